/**
 * What the hubs of a cluster tell each other beyond the market's state (docs/cluster.md): each hub's event log, and
 * each hub's saturation reading of its own coordinator of each model.
 *
 *   events    every event of this hub's log goes to one capped stream, `P:events` (XADD MAXLEN ~ EVENTS_STREAM_LEN,
 *             batched: at most one pipeline per FEED_FLUSH_MS), with the hub's id; `GET /api/events?scope=cluster`
 *             reads the newest of every hub (`events()`), each row marked with its hub
 *   readings  each poller reading of this hub's coordinator goes to `P:reading:MODEL:HUB` (JSON, PX = the reading's
 *             useful age, `maxReadingAgeMs`); every `syncMs` the other live hubs' readings are read back, and the
 *             recruiter judges the cluster's demand (`clusterReading`): a model is recruited for while any hub's
 *             coordinator of it is saturated, since every hub's volunteers serve every hub's coordinator (the relay)
 *
 * Redis away: events wait in memory (at most FEED_PENDING_MAX, the oldest dropped first: a log, not a ledger) and
 * readings are not written (the next poll writes a fresh one); the other hubs' readings are dropped, so the hub
 * recruits on its own coordinator's alone. Every value read back is checked; an unreadable one is skipped and counted.
 */
import type { Redis } from 'ioredis';
import { HUB_EVENT_KINDS, type HubEventKindName, newestEvents } from '../../protocol/dashboard.ts';
import type { HubEvent } from '../events.ts';
import type { SlotsReading } from '../market/saturation.ts';
import { HUB_ID_MAX_CHARS } from './keys.ts';
import type { RedisClusterState } from './redis-state.ts';

/** The stream keeps about this many events of the whole cluster (MAXLEN ~). */
export const EVENTS_STREAM_LEN = 10_000;
/** Events waiting for Redis at most (the oldest dropped beyond). */
export const FEED_PENDING_MAX = 2_000;
/** Events and readings are written at most this often (one pipeline). */
export const FEED_FLUSH_MS = 100;
/** A filtered query reads at most this many of the newest events. */
export const EVENTS_SCAN_MAX = 5_000;
const DETAIL_MAX_CHARS = 2_000;
const HUB_ID = /^[A-Za-z0-9_.-]+$/;

/** An event of the cluster's stream: an event row of its hub's log, with the hub. */
export interface ClusterEventRow extends HubEvent {
  hub: string;
}

/** Another hub's saturation reading of its own coordinator of a model. */
export interface HubReading {
  hub: string;
  reading: SlotsReading;
}

export interface FeedHost {
  now(): number;
  /** The live hubs (their announcements), this one included. */
  hubs(): string[];
  /** The market models whose readings are shared. */
  models(): string[];
  /** How long a reading is worth anything (SaturationConfig maxReadingAgeMs): its key's TTL. */
  readingTtlMs(): number;
  syncMs: number;
}

/** The stream entry of an event (field, value, …): XADD's arguments after the id. */
export function encodeEventFields(hub: string, e: HubEvent): string[] {
  return [
    'v',
    '1',
    'hub',
    hub,
    'seq',
    String(e.seq),
    'at',
    String(Math.round(e.atMs)),
    'kind',
    e.kind,
    'model',
    e.model ?? '',
    'detail',
    e.detail,
  ];
}

/** An event read back from the stream (XRANGE's [id, [field, value, …]]); null when it is not what a hub writes. */
export function decodeEventEntry(fields: unknown): ClusterEventRow | null {
  if (!Array.isArray(fields) || fields.length % 2 !== 0 || fields.length > 32) return null;
  const f = new Map<string, string>();
  for (let i = 0; i < fields.length; i += 2) {
    if (typeof fields[i] !== 'string' || typeof fields[i + 1] !== 'string') return null;
    f.set(fields[i], fields[i + 1]);
  }
  const hub = f.get('hub') ?? '';
  const seq = Number(f.get('seq'));
  const at = Number(f.get('at'));
  const kind = f.get('kind') as HubEventKindName;
  const detail = f.get('detail');
  const model = f.get('model');
  if (f.get('v') !== '1' || !HUB_ID.test(hub) || hub.length > HUB_ID_MAX_CHARS) return null;
  if (!Number.isSafeInteger(seq) || seq < 1 || !Number.isSafeInteger(at) || at < 0) return null;
  if (!(HUB_EVENT_KINDS as readonly string[]).includes(kind)) return null;
  if (detail === undefined || detail.length > DETAIL_MAX_CHARS || model === undefined || model.length > 256) return null;
  return { hub, seq, atMs: at, kind, model: model === '' ? null : model, detail };
}

export function encodeReading(hub: string, r: SlotsReading): string {
  return JSON.stringify({ v: 1, hub, at_ms: Math.round(r.atMs), busy: r.busy, slots: r.slots, source: r.source });
}

/** A reading read back; null when it is not what a hub writes. */
export function decodeReading(text: unknown, hub: string): SlotsReading | null {
  if (typeof text !== 'string' || text.length > 1_000) return null;
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof o !== 'object' || o === null || o.v !== 1 || o.hub !== hub) return null;
  const count = (v: unknown): v is number | null => v === null || (Number.isSafeInteger(v) && (v as number) >= 0);
  if (!Number.isSafeInteger(o.at_ms) || (o.at_ms as number) < 0 || !count(o.busy) || !count(o.slots)) return null;
  if (o.source !== 'slots' && o.source !== 'metrics' && o.source !== 'unknown') return null;
  return { atMs: o.at_ms as number, busy: o.busy as number | null, slots: o.slots as number | null, source: o.source };
}

/**
 * The reading the recruiter judges a model by in a cluster: this hub's own, unless it is not saturated and another
 * hub's fresh reading is (then the freshest such one: the cluster's demand). Pure.
 */
export function clusterReading(
  own: SlotsReading | undefined,
  others: readonly HubReading[],
  saturateAt: number,
  nowMs: number,
  maxAgeMs: number,
): SlotsReading | undefined {
  const saturated = (r: SlotsReading | undefined): boolean =>
    r !== undefined && r.source !== 'unknown' && r.busy !== null && r.busy >= saturateAt && nowMs - r.atMs <= maxAgeMs;
  if (saturated(own)) return own;
  let best: SlotsReading | undefined;
  for (const o of others) if (saturated(o.reading) && (!best || o.reading.atMs > best.atMs)) best = o.reading;
  return best ?? own;
}

export class ClusterFeed {
  private readonly pending: HubEvent[] = [];
  private readonly readingsDue = new Map<string, SlotsReading>();
  private others = new Map<string, HubReading[]>();
  private timer: NodeJS.Timeout | null = null;
  private syncTimer: NodeJS.Timeout | null = null;
  private flushing = false;
  private stopped = false;
  /** Events dropped while Redis was away (beyond FEED_PENDING_MAX), and unreadable values skipped. */
  dropped = 0;
  corrupt = 0;

  constructor(
    private readonly redis: RedisClusterState,
    private readonly hubId: string,
    private readonly host: FeedHost,
  ) {}

  private get streamKey(): string {
    return `${this.redis.keys.prefix}:events`;
  }

  private readingKey(model: string, hub: string): string {
    return `${this.redis.keys.prefix}:reading:${model}:${hub}`;
  }

  start(): void {
    this.syncTimer = setInterval(() => void this.readOthers().catch(() => {}), this.host.syncMs);
    this.syncTimer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.syncTimer) clearInterval(this.syncTimer);
    if (this.timer) clearTimeout(this.timer);
    await this.flush().catch(() => {});
  }

  /** An event of this hub's log (EventLog.subscribe): written with the next batch. */
  event(e: HubEvent): void {
    this.pending.push(e);
    if (this.pending.length > FEED_PENDING_MAX) this.dropped += this.pending.splice(0, this.pending.length - FEED_PENDING_MAX).length;
    this.soon();
  }

  /** This hub's poller read its coordinator of `model`: the reading is shared with the next batch. */
  reading(model: string, r: SlotsReading | undefined): void {
    if (!r) return;
    this.readingsDue.set(model, r);
    this.soon();
  }

  /** The other live hubs' fresh readings of `model` (as of the last read, every syncMs). */
  otherReadings(model: string): readonly HubReading[] {
    return this.others.get(model) ?? [];
  }

  private soon(): void {
    if (this.timer || this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.flush().catch(() => {});
    }, FEED_FLUSH_MS);
    this.timer.unref();
  }

  /** Writes the waiting events and readings in one pipeline; on failure they wait (readings: the newest only). */
  async flush(): Promise<void> {
    if (this.flushing || (this.pending.length === 0 && this.readingsDue.size === 0) || !this.redis.ready) return;
    this.flushing = true;
    const events = this.pending.splice(0);
    const readings = [...this.readingsDue];
    this.readingsDue.clear();
    try {
      await this.redis.call('feed', async (c: Redis) => {
        const p = c.pipeline();
        for (const e of events) p.xadd(this.streamKey, 'MAXLEN', '~', String(EVENTS_STREAM_LEN), '*', ...encodeEventFields(this.hubId, e));
        const ttl = Math.max(1, Math.round(this.host.readingTtlMs()));
        for (const [model, r] of readings) p.set(this.readingKey(model, this.hubId), encodeReading(this.hubId, r), 'PX', ttl);
        const out = (await p.exec()) ?? [];
        const failed = out.find(([err]) => err);
        if (failed) throw failed[0];
      });
    } catch {
      this.pending.unshift(...events.slice(-(FEED_PENDING_MAX - this.pending.length)));
      for (const [model, r] of readings) if (!this.readingsDue.has(model)) this.readingsDue.set(model, r);
    } finally {
      this.flushing = false;
    }
    if (this.pending.length > 0 || this.readingsDue.size > 0) this.soon();
  }

  /** Reads the other live hubs' readings of every market model; Redis away: they are dropped. */
  async readOthers(): Promise<void> {
    if (this.stopped) return;
    if (!this.redis.ready) {
      this.others = new Map();
      return;
    }
    const hubs = this.host.hubs().filter((h) => h !== this.hubId);
    const models = this.host.models();
    const next = new Map<string, HubReading[]>();
    if (hubs.length > 0 && models.length > 0) {
      const keys = models.flatMap((m) => hubs.map((h) => this.readingKey(m, h)));
      let texts: Array<string | null>;
      try {
        texts = await this.redis.call('readings', (c) => c.mget(...keys));
      } catch {
        this.others = new Map();
        return;
      }
      models.forEach((m, i) => {
        const list: HubReading[] = [];
        hubs.forEach((h, j) => {
          const text = texts[i * hubs.length + j];
          if (text === null || text === undefined) return;
          const r = decodeReading(text, h);
          if (r) list.push({ hub: h, reading: r });
          else this.corrupt++;
        });
        if (list.length > 0) next.set(m, list);
      });
    }
    this.others = next;
    await this.flush().catch(() => {});
  }

  /**
   * The newest `limit` events of the whole cluster matching `kind` / `model`, newest last (this hub's written first).
   * Throws CLUSTER_UNAVAILABLE while Redis is away (redis-state.ts).
   */
  async events(q: { kind?: HubEventKindName | undefined; model?: string | undefined; limit: number }): Promise<ClusterEventRow[]> {
    await this.flush();
    const filtered = q.kind !== undefined || q.model !== undefined;
    const count = filtered ? EVENTS_SCAN_MAX : q.limit;
    const raw = (await this.redis.call('events', (c) => c.xrevrange(this.streamKey, '+', '-', 'COUNT', count))) as Array<
      [string, string[]]
    >;
    const rows: ClusterEventRow[] = [];
    for (const [, fields] of raw) {
      const e = decodeEventEntry(fields);
      if (e) rows.push(e);
      else this.corrupt++;
    }
    rows.reverse(); // oldest first, as newestEvents reads a log
    return newestEvents(rows, q, q.limit).reverse();
  }
}
