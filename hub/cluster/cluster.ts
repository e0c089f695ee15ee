/**
 * One hub's part in a cluster of hubs sharing a Redis (`--redis URL`, docs/cluster.md): what it publishes of its own
 * state, what it mirrors of the others', and how it degrades when Redis is away. The hub's code stays synchronous: it
 * reads the mirrors (memory), and its changes are written behind, in batches, by this class.
 *
 *   published  each worker attached here: a record per heartbeat, expiring with the worker's staleness (`staleMs`);
 *              removed (compare-and-delete) when the worker leaves this hub
 *   mirrored   the other hubs' worker records (every `syncMs`), read with this hub's own coverage as one
 *              (shared.ts ClusterCoverage) by demand, recruitment and the dispatch map
 *   shared     quarantine (this hub's SQLite ∪ the cluster's hash, pushed to the others at once on the bus) and credit
 *              (the wallet hashes in Redis, each verified item credited once: redis-state.ts CREDIT_ONCE)
 *
 * Redis away (down, restarting, hanging past the command timeout): the state turns 'degraded', the mirror of the other
 * hubs is dropped (the hub serves with its own workers, as a single hub), writes wait (worker records are written again,
 * credit is retried with the same item ids, so a write whose reply was lost counts once) and quarantines are kept
 * (a hub never forgets one because Redis is away). Back: everything this hub holds is written again and the mirrors
 * are read anew.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { CoverageStore } from '../market/coverage.ts';
import type { ModelShape } from '../market/types.ts';
import { type DispatchConfig, type DispatchRow, workerState } from '../dispatch/map.ts';
import { HubError, isHubError } from '../errors.ts';
import type { HubStore } from '../store.ts';
import { CREDIT_CACHE_MAX } from '../limits.ts';
import type { ClusterStatus, CreditAnswer } from '../../protocol/http.ts';
import type { BusMessage, ClusterHub, ClusterWorker } from './codec.ts';
import { CLUSTER_PREFIX, HUB_ID_MAX_CHARS, redactRedisUrl } from './keys.ts';
import { type CorruptValue, type RedisLinkState, RedisClusterState } from './redis-state.ts';
import { RecordDecoder } from './record-decoder.ts';
import { CreditOutbox, type OutboxStore, type PendingCredit } from './credit-outbox.ts';
import type { CoverageView, CreditBook, CreditOnce, QuarantineList } from './shared.ts';
import { hubMembers, hubUrls, publicUrlOf } from './hub-list.ts';

export interface ClusterOptions {
  /** This hub's name in the cluster (`--hub-id`); default: host name, process id and 4 random hex digits. */
  hubId: string;
  /** Every key starts with it (keys.ts). */
  prefix: string;
  /** How often the other hubs' records and the quarantine list are read. */
  syncMs: number;
  /** The bound of one Redis command. */
  commandTimeoutMs: number;
  /** The bound of the first connection at start (the hub starts degraded past it, and keeps trying). */
  connectTimeoutMs: number;
  /** The longest wait between reconnection attempts. */
  reconnectMaxMs: number;
  /**
   * `--hub-url`: the `ws://` or `wss://` base URL the other hubs dial for this hub's relay (`/api/hub-relay`,
   * relay-server.ts); null: derived from the address the hub listens on (`setRelayUrl`).
   */
  relayUrl: string | null;
  /**
   * `--public-url`: the `http://` or `https://` origin clients and volunteers reach this hub at, announced to the others
   * (`GET /api/health` cluster.hub_urls, the channel's welcome); null: the relay URL as http(s) (hub-list.ts).
   */
  publicUrl: string | null;
}

export const DEFAULT_CLUSTER: Readonly<Omit<ClusterOptions, 'hubId'>> = Object.freeze({
  prefix: CLUSTER_PREFIX,
  syncMs: 1_000,
  commandTimeoutMs: 1_000,
  connectTimeoutMs: 2_000,
  reconnectMaxMs: 2_000,
  relayUrl: null,
  publicUrl: null,
});

/** Workers of other hubs mirrored at most (beyond it a sync keeps the first ones and says so in an event). */
export const CLUSTER_REMOTE_WORKERS_MAX = 1_000_000;
/** Corrupt keys remembered so that each is reported once in the event log. */
const CORRUPT_KEYS_KEPT = 1000;

/** A hub id from this machine: host name and process id (cut to the id's alphabet) and 4 random hex digits. */
export function defaultHubId(): string {
  const host =
    hostname()
      .replace(/[^A-Za-z0-9_.-]/g, '-')
      .slice(0, 32) || 'hub';
  return `${host}-${process.pid}-${randomBytes(2).toString('hex')}`.slice(0, HUB_ID_MAX_CHARS);
}

/** The cluster part of `GET /api/health`: its shape is the HTTP contract's (protocol/http.ts). */
export type { ClusterStatus };
export type ClusterState = ClusterStatus['state'];

/** What the cluster reads and tells of its hub (the pattern of channel/channel.ts's ChannelHost). */
export interface ClusterHost {
  now(): number;
  /** A worker's record lives this long after its last heartbeat (the hub's `staleMs`). */
  staleMs: number;
  dispatch: DispatchConfig;
  /** The record of a worker attached here, built from its coverage and dispatch record; null if it is not live here. */
  localWorker(workerId: string): ClusterWorker | null;
  localWorkerIds(): string[];
  /** How many workers are live on this hub (`GET /api/health` cluster.members). */
  localWorkerCount(): number;
  /** Whether a worker is live on this hub (its coverage is here). */
  isLocal(workerId: string): boolean;
  /** The hub's own durable quarantine list (SQLite). */
  store: Pick<HubStore, 'quarantine' | 'quarantineReason' | 'quarantined'> & OutboxStore;
  /** Another hub quarantined `subject` (a worker id or a wallet): drop it here too. */
  quarantinedElsewhere(subject: string, reason: string, hub: string): void;
  /** A wallet's cluster-wide credit changed (its volunteers here are told). */
  creditChanged(wallet: string, credit: number): void;
  /** A line for the event log (kind 'cluster'). */
  event(detail: string): void;
  /** The mirror of the other hubs' workers, or the hubs announced, changed (after a sync, or on degrading). */
  remoteChanged?(): void;
}

export class ClusterSync implements QuarantineList, CreditBook {
  readonly hubId: string;
  readonly options: ClusterOptions;
  private readonly redis: RedisClusterState;
  private readonly url: string;
  /** The other hubs' workers (their records' coverage), and the records themselves (the dispatch map's rows). */
  private readonly remote = new CoverageStore({ maxWorkers: CLUSTER_REMOTE_WORKERS_MAX });
  private readonly remoteRecords = new Map<string, ClusterWorker>();
  /** Each record's text decoded once: an unchanged one is the same object at the next sync (record-decoder.ts). */
  private readonly decoder = new RecordDecoder();
  /** Subjects quarantined in the cluster's hash (or refused there unreadable: fail closed), with the reason. */
  private readonly quarantines = new Map<string, string>();
  private readonly credits = new Map<string, number>();
  private readonly creditFetches = new Set<string>();
  /** This hub's workers whose record must be written (or removed: model of the removed worker). */
  private readonly dirty = new Map<string, string>();
  /** The ledger's credit writes until Redis took them, in this hub's SQLite too (credit-outbox.ts: a restart resends). */
  private readonly outbox: CreditOutbox;
  private readonly pendingQuarantines = new Map<string, { reason: string; sinceMs: number }>();
  private readonly corruptSeen = new Set<string>();
  private corruptCount = 0;
  private state: ClusterState = 'connecting';
  private stateSince: number;
  private error: string | null = 'not connected yet';
  private hubs: string[] = [];
  /** The live hubs' public URLs (this one's included), in hub id order (hub-list.ts). */
  private hubUrls: string[] = [];
  /** The live hubs' ids and public URLs at the last sync (this one's included): `GET /api/health` cluster.members. */
  private announced: Array<{ hub: string; public_url: string | null }> = [];
  /** The mirror's workers per hub, counted when asked and kept until the mirror changes (null: counted anew). */
  private remoteByHub: Map<string, number> | null = null;
  /** The other hubs' announcements by id: where their relays are reached (relay-links.ts). */
  private readonly hubRecords = new Map<string, ClusterHub>();
  /** What another hub presents to dial this hub's relay; published in this hub's announcement only. */
  readonly relayToken = randomBytes(24).toString('base64url');
  private relayUrl: string | null;
  private lastSyncMs: number | null = null;
  private startedMs = 0;
  private syncTimer: NodeJS.Timeout | null = null;
  private flushing: Promise<void> | null = null;
  private flushAgain = false;
  private flushScheduled = false;
  private syncing: Promise<void> | null = null;
  private syncNext: Promise<void> | null = null;
  private stopped = false;
  private startedOnce = false;

  constructor(
    url: string,
    options: Partial<ClusterOptions>,
    private readonly host: ClusterHost,
  ) {
    this.options = { ...DEFAULT_CLUSTER, hubId: options.hubId ?? defaultHubId(), ...options } as ClusterOptions;
    if (!(Number.isSafeInteger(this.options.syncMs) && this.options.syncMs >= 10))
      throw new RangeError('cluster syncMs must be an integer ≥ 10');
    this.url = url;
    this.relayUrl = this.options.relayUrl;
    this.redis = new RedisClusterState({
      url,
      hubId: this.options.hubId,
      prefix: this.options.prefix,
      commandTimeoutMs: this.options.commandTimeoutMs,
      connectTimeoutMs: this.options.connectTimeoutMs,
      reconnectMaxMs: this.options.reconnectMaxMs,
    });
    this.hubId = this.redis.hubId;
    this.outbox = new CreditOutbox(host.store, this.hubId, host.now());
    this.stateSince = host.now();
    this.redis.onStatus = (s, detail) => this.linkChanged(s, detail);
    this.redis.onBus = (m) => this.busMessage(m);
    this.redis.onCorrupt = (c) => this.noteCorrupt(c);
  }

  /** The Redis calls, for the cluster's other shared state (standing.ts, grants.ts). */
  get redisState(): RedisClusterState {
    return this.redis;
  }

  /** Whether Redis answers now (commands may be sent). */
  get redisReady(): boolean {
    return this.redis.ready;
  }

  /** The market models whose workers are mirrored (the hub registers them after reading their GGUFs). */
  addModel(shape: ModelShape): void {
    this.remote.addModel(shape);
  }

  /** Connects (bounded by connectTimeoutMs: past it the hub starts degraded and keeps trying), then syncs every syncMs. */
  async start(): Promise<void> {
    this.startedMs = this.host.now();
    const left = this.outbox.load();
    if (left > 0) this.host.event(`${left} credit writes an earlier run left waiting: sent once Redis answers (each counted once)`);
    const ok = await this.redis.connect(this.options.connectTimeoutMs);
    this.startedOnce = true;
    if (!ok) this.degrade(`no answer from ${redactRedisUrl(this.url)} within ${this.options.connectTimeoutMs} ms; serving alone, retrying`);
    else await this.resync();
    this.syncTimer = setInterval(() => void this.sync().catch(() => {}), this.options.syncMs);
    this.syncTimer.unref();
  }

  /** Writes what is due (bounded by the command timeout), forgets this hub in Redis and closes the connections. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.syncTimer) clearInterval(this.syncTimer);
    if (this.redis.ready) {
      await this.flush().catch(() => {});
      await this.redis.retireHub().catch(() => {});
    }
    if (this.outbox.size > 0)
      this.host.event(`stopped with ${this.outbox.size} credit writes Redis never took: kept in this hub's state, sent at its next start`);
    await this.redis.close();
  }

  status(): ClusterStatus {
    return {
      hub_id: this.hubId,
      redis: redactRedisUrl(this.url),
      state: this.state,
      since_ms: this.stateSince,
      error: this.error,
      hubs: [...this.hubs],
      hub_urls: [...this.hubUrls],
      remote_workers: this.remoteRecords.size,
      members: hubMembers(
        this.announced,
        { hub: this.hubId, public_url: publicUrlOf(this.options.publicUrl, this.relayUrl), workers: this.host.localWorkerCount() },
        this.lastSyncMs !== null && this.state === 'ready' ? this.workersByHub() : null,
      ),
      last_sync_ms: this.lastSyncMs,
      pending: { workers: this.dirty.size, credits: this.outbox.size, quarantines: this.pendingQuarantines.size },
      corrupt_values: this.corruptCount,
    };
  }

  /** The mirror's records per hub (one pass, at most once per sync: only `GET /api/health` asks). */
  private workersByHub(): Map<string, number> {
    if (this.remoteByHub) return this.remoteByHub;
    const counts = new Map<string, number>();
    for (const w of this.remoteRecords.values()) counts.set(w.hub, (counts.get(w.hub) ?? 0) + 1);
    this.remoteByHub = counts;
    return counts;
  }

  // --- the link

  private linkChanged(s: RedisLinkState, detail: string): void {
    if (this.stopped) return;
    if (s === 'ready') {
      if (!this.startedOnce) return; // start() resyncs itself
      void this.resync().catch(() => {});
      return;
    }
    if (this.state !== 'degraded' || s === 'down') this.degrade(detail === 'reconnecting' ? 'reconnecting to Redis' : `Redis: ${detail}`);
  }

  /** Serving alone: the other hubs' workers leave the mirror (they may be gone; nothing here can reach them anyway). */
  private degrade(why: string): void {
    const was = this.state;
    this.error = why;
    if (was === 'degraded') return;
    this.state = 'degraded';
    this.stateSince = this.host.now();
    this.dropRemote();
    this.host.event(`degraded: ${why}; serving with this hub's own workers`);
  }

  private dropRemote(): void {
    this.decoder.clear();
    for (const id of [...this.remoteRecords.keys()]) this.remote.remove(id);
    this.remoteRecords.clear();
    this.remoteByHub = null;
    this.hubRecords.clear();
    this.host.remoteChanged?.();
  }

  /**
   * Back (or first) on Redis: everything this hub holds is written again (a restarted Redis may have lost it all: the
   * worker records, this hub's quarantines), then the mirrors are read.
   */
  private async resync(): Promise<void> {
    for (const id of this.host.localWorkerIds()) this.dirty.set(id, this.host.localWorker(id)?.model ?? '');
    for (const q of this.host.store.quarantined()) this.pendingQuarantines.set(q.subject, { reason: q.reason, sinceMs: q.since_ms });
    await this.flush();
    await this.sync();
  }

  /** A sync went through: ready (again). */
  private markReady(): void {
    if (this.state === 'ready') return;
    const was = this.state;
    this.state = 'ready';
    this.stateSince = this.host.now();
    this.error = null;
    this.host.event(was === 'connecting' ? `joined as ${this.hubId}` : 'ready again: Redis answers');
  }

  /** A failed call: unavailability degrades; a corrupt value is counted and reported once. */
  private failed(e: unknown): void {
    if (isHubError(e, 'CLUSTER_STATE_CORRUPT')) {
      this.noteCorrupt({ key: '', error: e.message });
      return;
    }
    this.degrade(e instanceof Error ? e.message : String(e));
  }

  private noteCorrupt(c: CorruptValue): void {
    this.corruptCount++;
    const key = c.key || c.error;
    if (this.corruptSeen.has(key)) return;
    if (this.corruptSeen.size >= CORRUPT_KEYS_KEPT) this.corruptSeen.clear();
    this.corruptSeen.add(key);
    this.host.event(`CLUSTER_STATE_CORRUPT: ${c.error.startsWith('the cluster') ? c.error : `${c.key}: ${c.error}`}`);
  }

  // --- this hub's workers, written behind

  /** A worker's coverage changed here (coverage.ts onChange): its record is written (or removed) in the next batch. */
  localChanged(workerId: string, model: string): void {
    this.dirty.set(workerId, model);
    if (this.remoteRecords.delete(workerId)) this.remote.remove(workerId);
    this.flushSoon();
  }

  private flushSoon(): void {
    if (this.flushScheduled || this.stopped) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      void this.flush().catch(() => {});
    });
  }

  /** Writes every change due now (one at a time: a call while one runs runs once more after it). */
  flush(): Promise<void> {
    if (this.flushing) {
      this.flushAgain = true;
      return this.flushing;
    }
    this.flushing = (async () => {
      try {
        do {
          this.flushAgain = false;
          await this.flushOnce();
        } while (this.flushAgain && this.redis.ready);
      } finally {
        this.flushing = null;
      }
    })();
    return this.flushing;
  }

  private async flushOnce(): Promise<void> {
    if (!this.redis.ready) return;
    // Worker records: the live ones written in one pipeline, the gone ones removed if this hub wrote them.
    const due = [...this.dirty];
    this.dirty.clear();
    const live: ClusterWorker[] = [];
    const gone: Array<[string, string]> = [];
    for (const [id, model] of due) {
      const rec = this.host.localWorker(id);
      if (rec) live.push(rec);
      else if (model) gone.push([id, model]);
    }
    try {
      await this.redis.putWorkers(live, this.host.staleMs);
      for (const [id, model] of gone) await this.redis.removeWorker(id, model);
    } catch (e) {
      for (const [id, model] of due) if (!this.dirty.has(id)) this.dirty.set(id, model);
      this.failed(e);
      if (!isHubError(e, 'CLUSTER_STATE_CORRUPT')) return;
    }
    // Quarantines this hub decided, not yet in Redis.
    for (const [subject, q] of [...this.pendingQuarantines]) {
      try {
        await this.redis.quarantine(subject, { reason: q.reason, since_ms: q.sinceMs, hub: this.hubId });
        this.pendingQuarantines.delete(subject);
      } catch (e) {
        this.failed(e);
        if (!isHubError(e, 'CLUSTER_STATE_CORRUPT')) return;
      }
    }
    // Credit, in order, each with its item id: a retry after a lost reply counts once.
    for (const c of this.outbox.pending() as PendingCredit[]) {
      try {
        const r = await this.redis.creditOnce(c.item, c.wallet, c.pairs, c.nowMs);
        this.outbox.done(c.item);
        this.credited(c.wallet, r.credit);
      } catch (e) {
        this.failed(e);
        if (!isHubError(e, 'CLUSTER_STATE_CORRUPT')) return;
        // an unreadable wallet keeps its credit waiting here; the others go on
      }
    }
  }

  // --- the other hubs' state, mirrored

  /**
   * Reads the other hubs' worker records, the quarantine list and the hubs. One at a time: a call while one runs gets
   * the next one (shared by every such caller), so that what it reads was written before it was called.
   */
  sync(): Promise<void> {
    if (!this.syncing) {
      this.syncing = this.syncOnce().finally(() => {
        this.syncing = null;
      });
      return this.syncing;
    }
    this.syncNext ??= this.syncing.then(() => {
      this.syncNext = null;
      return this.sync();
    });
    return this.syncNext;
  }

  private async syncOnce(): Promise<void> {
    if (!this.redis.ready || this.stopped) return;
    try {
      // This hub's own records are not read; of the others', only those rewritten since the last sync are decoded.
      const texts = await this.redis.readWorkerTexts(this.remote.models(), (id) => this.host.isLocal(id));
      const { workers, corrupt } = this.decoder.decode(texts);
      for (const c of corrupt) this.noteCorrupt(c);
      const q = await this.redis.quarantines();
      for (const c of q.corrupt) this.noteCorrupt(c);
      const next = new Map<string, string>();
      for (const [subject, e] of q.entries) next.set(subject, e.reason);
      for (const c of q.corrupt) next.set(c.subject, 'an unreadable quarantine entry in the cluster (CLUSTER_STATE_CORRUPT)');
      // Added only: a quarantine is not lifted by its absence (a Redis that lost its data, a read older than a bus message).
      for (const [subject, reason] of next)
        if (!this.quarantines.has(subject)) this.learnQuarantine(subject, reason, q.entries.get(subject)?.hub ?? '?');
      const announced = await this.redis.announceHub(this.startedMs, Math.max(5_000, 3 * this.options.syncMs), {
        url: this.relayUrl,
        token: this.relayToken,
        publicUrl: publicUrlOf(this.options.publicUrl, this.relayUrl),
      });
      for (const c of announced.corrupt) this.noteCorrupt(c);
      this.hubs = announced.hubs.map((h) => h.hub);
      this.hubUrls = hubUrls(announced.hubs);
      this.announced = announced.hubs.map((h) => ({ hub: h.hub, public_url: h.public_url }));
      // A hub that died (its announcement expired: 3 × syncMs, at least 5 s) takes its workers' records out of the
      // mirror with it, before their own TTL: its volunteers are redialling other hubs (docs/faults.md).
      const live = new Set(this.hubs);
      this.applyRemote(workers.filter((w) => live.has(w.hub)));
      this.remoteByHub = null;
      this.hubRecords.clear();
      for (const h of announced.hubs) if (h.hub !== this.hubId) this.hubRecords.set(h.hub, h);
      this.host.remoteChanged?.();
      this.lastSyncMs = this.host.now();
      this.markReady();
    } catch (e) {
      this.failed(e);
    }
  }

  private applyRemote(workers: ClusterWorker[]): void {
    const fresh = new Map<string, ClusterWorker>();
    for (const w of workers) if (w.hub !== this.hubId && !this.host.isLocal(w.worker_id)) fresh.set(w.worker_id, w);
    for (const id of [...this.remoteRecords.keys()]) {
      if (fresh.has(id)) continue;
      this.remoteRecords.delete(id);
      this.remote.remove(id);
    }
    for (const [id, w] of fresh) {
      if (this.remoteRecords.get(id) === w) continue; // the same text as at the last sync: nothing to re-index
      try {
        this.remote.heartbeat(id, w.model, w.ranges, w.seen_ms, w.replica);
        this.remoteRecords.set(id, w);
      } catch (e) {
        // A record whose ranges this hub's model refuses (another shape under the same name, or garbage).
        this.remoteRecords.delete(id);
        this.remote.remove(id);
        this.noteCorrupt({ key: `worker ${id}`, error: e instanceof Error ? e.message : String(e) });
      }
    }
  }

  /** Where this hub's relay is reached (`--hub-url`, or the address it listens on); announced from the next sync. */
  setRelayUrl(url: string): void {
    this.relayUrl ??= url;
  }

  /** The other live hubs' public URLs (for the channel's welcome): hub-list.ts. */
  otherHubUrls(): string[] {
    const mine = publicUrlOf(this.options.publicUrl, this.relayUrl);
    return this.hubUrls.filter((u) => u !== mine);
  }

  /** Another live hub's relay: its URL and the token it takes; undefined for a hub not announced or without a relay. */
  relayOf(hubId: string): { url: string; token: string } | undefined {
    const h = this.hubRecords.get(hubId);
    return h?.relay_url ? { url: h.relay_url, token: h.relay_token } : undefined;
  }

  /** The other hubs' worker records of `model`, from the mirror. */
  remoteWorkersOf(model: string): ClusterWorker[] {
    const out: ClusterWorker[] = [];
    for (const id of this.remote.workersOf(model)) {
      const w = this.remoteRecords.get(id);
      if (w) out.push(w);
    }
    return out;
  }

  /** The other hubs' workers, as the market's policies read coverage (shared.ts ClusterCoverage adds this hub's). */
  remoteCoverage(): CoverageView {
    return this.remote;
  }

  /** The record another hub published for `workerId`, from the mirror. */
  remoteWorker(workerId: string): ClusterWorker | undefined {
    return this.remoteRecords.get(workerId);
  }

  /** The dispatch map's rows of the other hubs' workers of `model` (their state from their records, on this hub's clock). */
  remoteRows(model: string, nowMs: number): Array<DispatchRow & { hub: string }> {
    const rows: Array<DispatchRow & { hub: string }> = [];
    for (const id of this.remote.workersOf(model)) {
      const w = this.remoteRecords.get(id);
      if (!w) continue;
      const state = workerState(
        { attachMs: w.attach_ms, lastServeMs: w.last_serve_ms, released: w.released, quarantined: w.quarantined },
        nowMs,
        this.host.dispatch,
      );
      for (const [layer, begin, end] of w.ranges) {
        rows.push({
          worker_id: id,
          model,
          layer,
          experts: [begin, end],
          state,
          last_serve_ms: w.last_serve_ms,
          last_attach_ms: w.attach_ms,
          latency_ms: w.latency_ms,
          audits: w.audits,
          audits_passed: w.audits_passed,
          audit_nmse_last: w.audit_nmse_last,
          audit_nmse_max: w.audit_nmse_max,
          hub: w.hub,
        });
      }
    }
    return rows;
  }

  // --- quarantine (QuarantineList)

  quarantine(subject: string, reason: string, nowMs: number): void {
    this.host.store.quarantine(subject, reason, nowMs);
    this.quarantines.set(subject, reason);
    this.pendingQuarantines.set(subject, { reason, sinceMs: nowMs });
    this.flushSoon();
  }

  quarantineReason(subject: string): string | undefined {
    return this.host.store.quarantineReason(subject) ?? this.quarantines.get(subject);
  }

  private learnQuarantine(subject: string, reason: string, hub: string): void {
    this.quarantines.set(subject, reason);
    if (hub !== this.hubId) this.host.quarantinedElsewhere(subject, reason, hub);
  }

  private busMessage(m: BusMessage): void {
    if (m.kind === 'quarantine') {
      if (!this.quarantines.has(m.subject)) this.learnQuarantine(m.subject, m.reason, m.hub);
      return;
    }
    // Credit only grows: an announcement older than what this hub read since is not taken (they may arrive late).
    const known = this.credits.get(m.wallet);
    if (known !== undefined && known >= m.credit_pairs) return;
    if (known !== undefined || this.creditFetches.has(m.wallet)) this.credits.set(m.wallet, m.credit_pairs);
    this.host.creditChanged(m.wallet, m.credit_pairs);
  }

  // --- credit (CreditBook), and the ledger's writes

  /** The ledger's credit write (trust/ledger.ts flush): queued with an item id of this hub's, written in the next batch. */
  addCredit(wallet: string, pairs: number, nowMs: number): void {
    if (!Number.isSafeInteger(pairs) || pairs < 0) throw new RangeError(`credit must be a non-negative integer, got ${pairs}`);
    if (pairs === 0) return;
    this.outbox.add(wallet, pairs, nowMs);
    this.flushSoon();
  }

  /** Credits one verified item once, whatever hub reports it (redis-state.ts CREDIT_ONCE). Throws CLUSTER_UNAVAILABLE. */
  async creditOnce(item: string, wallet: string, pairs: number, nowMs: number): Promise<CreditOnce> {
    const r = await this.redis.creditOnce(item, wallet, pairs, nowMs).catch((e) => {
      if (!isHubError(e)) throw e;
      this.failed(e);
      throw e;
    });
    if (r.credited) this.credited(wallet, r.credit);
    return r;
  }

  private credited(wallet: string, credit: number): void {
    const known = this.credits.get(wallet);
    if (known !== undefined && known > credit) return; // a later write's total is here already
    this.setCredit(wallet, credit);
    this.host.creditChanged(wallet, credit);
    void this.redis.announceCredit(wallet, credit).catch(() => {});
  }

  private setCredit(wallet: string, credit: number): void {
    if (!this.credits.has(wallet) && this.credits.size >= CREDIT_CACHE_MAX) this.credits.clear();
    this.credits.set(wallet, credit);
  }

  /** `GET /api/credit` with `--redis`: this hub's due credit written first, then the wallet's hash read. */
  async creditAnswer(wallet: string): Promise<CreditAnswer> {
    if (!this.redis.ready)
      throw new HubError('CLUSTER_UNAVAILABLE', `the cluster's Redis is away (${this.error ?? 'not ready'}): retry later`, {
        'Retry-After': '2',
      });
    await this.flush();
    const c = await this.redis.credit(wallet).catch((e) => {
      if (isHubError(e)) this.failed(e);
      throw e;
    });
    if (c) this.setCredit(wallet, c.credit_pairs);
    return { wallet, credit_pairs: c?.credit_pairs ?? 0, first_seen_ms: c?.first_seen_ms ?? null, last_seen_ms: c?.last_seen_ms ?? null };
  }

  /**
   * A wallet's credit for the channel and the dashboard, from memory: a wallet not read yet answers 0 now and is read
   * in the background (its volunteers are told the total when it comes).
   */
  creditOf(wallet: string): number {
    const c = this.credits.get(wallet);
    if (c !== undefined) return c;
    if (this.redis.ready && !this.creditFetches.has(wallet) && this.creditFetches.size < 256) {
      this.creditFetches.add(wallet);
      void this.redis
        .credit(wallet)
        .then((r) => {
          const credit = r?.credit_pairs ?? 0;
          const before = this.credits.get(wallet);
          this.setCredit(wallet, credit);
          if (before === undefined && credit > 0) this.host.creditChanged(wallet, credit);
        })
        .catch((e) => this.failed(e))
        .finally(() => this.creditFetches.delete(wallet));
    }
    return 0;
  }
}
