/**
 * The cluster's shared market state in Redis (ioredis), I/O only: every call is one bounded round trip (a pipeline or
 * a Lua script), every value read back goes through codec.ts. The policy (what to publish when, what to mirror, how to
 * degrade) is cluster.ts's.
 *
 *   const state = new RedisClusterState({ url: 'unix:///run/redis.sock', hubId: 'hub-a' });
 *   await state.connect(2_000);
 *   await state.putWorkers([record], 120_000);
 *   const { workers, corrupt } = await state.readWorkers(['tiny-moe']);
 *   await state.creditOnce('m:7:1:w1', wallet, 12, Date.now());   // { credited: true, credit: 12 }; again: false, 12
 *
 * The client never queues a command while Redis is away (`enableOfflineQueue: false`, no retries per request) and
 * every command is bounded (`commandTimeout`): a call against a Redis that is down fails at once, one that hangs fails
 * after the timeout, both as HubError CLUSTER_UNAVAILABLE. A reply Redis refuses (WRONGTYPE on a key someone wrote by
 * hand) is CLUSTER_STATE_CORRUPT. The client reconnects by itself with capped backoff; `onStatus` reports each change.
 */
import { Redis, type RedisOptions } from 'ioredis';
import { HubError, isHubError } from '../errors.ts';
import {
  type BusMessage,
  type ClusterCredit,
  type ClusterHub,
  type ClusterQuarantine,
  type ClusterWorker,
  checkCreditWrite,
  corrupt,
  decodeBus,
  decodeCount,
  decodeCredit,
  decodeHub,
  decodeQuarantine,
  decodeWorker,
  encodeBus,
  encodeHub,
  encodeQuarantine,
  encodeWorker,
} from './codec.ts';
import { type ClusterKeys, checkHubId, clusterKeys, parseRedisUrl } from './keys.ts';

/** How long an idempotency key of a credited item is kept: a second report of the item within it is not credited. */
export const CREDIT_ITEM_TTL_MS = 24 * 60 * 60 * 1000;
/** Ids read per MGET when a hub reads a model's worker records. */
export const WORKER_READ_BATCH = 1000;

export interface RedisStateOptions {
  url: string;
  hubId: string;
  prefix?: string;
  /** Each command's bound (ioredis commandTimeout). Default 1000 ms. */
  commandTimeoutMs?: number;
  /** A connection attempt's bound. Default 2000 ms. */
  connectTimeoutMs?: number;
  /** The longest wait between reconnection attempts. Default 2000 ms. */
  reconnectMaxMs?: number;
}

export type RedisLinkState = 'connecting' | 'ready' | 'down';

/** A record that could not be read: its key and why (codec.ts's message). */
export interface CorruptValue {
  key: string;
  error: string;
}

/**
 * Compare-and-delete of a worker record: only the hub that wrote it (its `hub` field) removes it, so a hub forgetting a
 * worker that has moved to another hub leaves the newer record alone. 1: deleted, 0: absent or another hub's, -1: unreadable.
 */
const REMOVE_WORKER = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local ok, rec = pcall(cjson.decode, v)
if not ok or type(rec) ~= 'table' then return -1 end
if rec['hub'] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
return 1`;

/**
 * Credit exactly once per item: the item's key is set only if absent (SET NX, PX), and only then is the wallet's
 * credit raised, in one script (Redis runs it alone). The wallet hash is checked before anything is written, so a
 * garbage value makes the script refuse ({-1, why}) rather than fail halfway. Replies {1, total} credited now,
 * {0, total} credited before (by any hub), {-1, why} unreadable.
 */
const CREDIT_ONCE = `
local t = redis.call('TYPE', KEYS[2])['ok']
if t ~= 'hash' and t ~= 'none' then return {-1, 'the wallet key is a ' .. t .. ', not a hash'} end
local c = redis.call('HGET', KEYS[2], 'credit_pairs')
if c and not string.match(c, '^%d+$') then return {-1, 'credit_pairs is not a count'} end
if redis.call('SET', KEYS[1], ARGV[4], 'NX', 'PX', ARGV[3]) then
  local total = redis.call('HINCRBY', KEYS[2], 'credit_pairs', ARGV[1])
  redis.call('HSETNX', KEYS[2], 'first_seen_ms', ARGV[2])
  redis.call('HSET', KEYS[2], 'last_seen_ms', ARGV[2])
  return {1, tostring(total)}
end
return {0, c or '0'}`;

/** Runs a MULTI or pipeline and throws the first command's error (exec reports them per command, never as a rejection). */
async function execAll(batch: { exec(): Promise<Array<[Error | null, unknown]> | null> }): Promise<unknown[]> {
  const out = (await batch.exec()) ?? [];
  const failed = out.find(([err]) => err);
  if (failed) throw failed[0];
  return out.map(([, v]) => v);
}

/** A failed call as the hub's error: a refused reply is bad state, anything else (down, timeout) unavailability. */
export function clusterError(e: unknown, what: string): HubError {
  if (isHubError(e)) return e;
  const err = e as Error;
  if (err?.name === 'ReplyError') return corrupt(what, err.message);
  return new HubError('CLUSTER_UNAVAILABLE', `the cluster's Redis did not answer (${what}): ${err?.message ?? String(e)}`, {
    'Retry-After': '2',
  });
}

export class RedisClusterState {
  readonly keys: ClusterKeys;
  readonly hubId: string;
  /** Called on every change of the link: ready (connected and answering), down (lost), connecting. */
  onStatus: (state: RedisLinkState, detail: string) => void = () => {};
  /** Called with each bus message from another hub (this hub's own are skipped); a bad one goes to `onCorrupt`. */
  onBus: (m: BusMessage) => void = () => {};
  onCorrupt: (c: CorruptValue) => void = () => {};
  private readonly client: Redis;
  private readonly subscriber: Redis;
  private closed = false;

  constructor(options: RedisStateOptions) {
    this.hubId = checkHubId(options.hubId);
    this.keys = clusterKeys(options.prefix);
    const reconnectMaxMs = options.reconnectMaxMs ?? 2_000;
    const base: RedisOptions = {
      ...parseRedisUrl(options.url),
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: options.commandTimeoutMs ?? 1_000,
      connectTimeout: options.connectTimeoutMs ?? 2_000,
      retryStrategy: (n) => (this.closed ? null : Math.min(50 * 2 ** Math.min(n, 10), reconnectMaxMs)),
      connectionName: `expertswarm-${this.hubId}`,
    };
    this.client = new Redis(base);
    // The subscriber resubscribes by itself after a reconnect; it may queue its SUBSCRIBE until connected.
    this.subscriber = new Redis({
      ...base,
      enableOfflineQueue: true,
      commandTimeout: undefined,
      connectionName: `expertswarm-${this.hubId}-bus`,
    });
    // ioredis emits 'error' on every failed attempt; the state changes below say what the hub needs to know.
    this.client.on('error', () => {});
    this.subscriber.on('error', () => {});
    this.client.on('ready', () => this.onStatus('ready', 'connected'));
    this.client.on('close', () => {
      if (!this.closed) this.onStatus('down', 'the connection closed');
    });
    this.client.on('reconnecting', () => {
      if (!this.closed) this.onStatus('connecting', 'reconnecting');
    });
    this.subscriber.on('message', (channel: string, text: string) => {
      if (channel !== this.keys.bus) return;
      let m: BusMessage;
      try {
        m = decodeBus(text, channel);
      } catch (e) {
        this.onCorrupt({ key: channel, error: (e as Error).message });
        return;
      }
      if (m.hub !== this.hubId) this.onBus(m);
    });
  }

  /** Whether commands may be sent now. */
  get ready(): boolean {
    return this.client.status === 'ready';
  }

  /** Connects both connections, bounded; resolves false (and keeps retrying in the background) if Redis does not answer. */
  async connect(timeoutMs: number): Promise<boolean> {
    const within = <T>(p: Promise<T>): Promise<T | 'timeout'> =>
      Promise.race([p, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), timeoutMs).unref())]);
    const ok = await within(
      Promise.all([this.client.connect(), this.subscriber.connect()]).then(
        () => true,
        () => false,
      ),
    );
    void this.subscriber.subscribe(this.keys.bus).catch(() => {});
    return ok === true;
  }

  async close(): Promise<void> {
    this.closed = true;
    const quit = (c: Redis) =>
      c.status === 'ready' ? Promise.race([c.quit().catch(() => {}), new Promise((r) => setTimeout(r, 500).unref())]) : undefined;
    await Promise.all([quit(this.client), quit(this.subscriber)]);
    this.client.disconnect();
    this.subscriber.disconnect();
  }

  /** One bounded call for the cluster's other modules (standing.ts, grants.ts): failures as `run`'s. */
  call<T>(what: string, f: (c: Redis) => Promise<T>): Promise<T> {
    return this.run(what, f);
  }

  private async run<T>(what: string, f: (c: Redis) => Promise<T>): Promise<T> {
    try {
      return await f(this.client);
    } catch (e) {
      throw clusterError(e, what);
    }
  }

  // --- workers

  /** Writes worker records (each expiring `ttlMs` from now) and indexes them by model, in one pipeline. */
  async putWorkers(records: readonly ClusterWorker[], ttlMs: number): Promise<void> {
    if (records.length === 0) return;
    await this.run('putWorkers', async (c) => {
      const p = c.pipeline();
      for (const r of records) {
        p.set(this.keys.worker(r.worker_id), encodeWorker(r), 'PX', Math.max(1, Math.round(ttlMs)));
        p.sadd(this.keys.workers(r.model), r.worker_id);
      }
      await execAll(p);
    });
  }

  /** Removes a worker's record if this hub wrote it (REMOVE_WORKER). Returns whether it was removed. */
  async removeWorker(workerId: string, model: string): Promise<boolean> {
    const key = this.keys.worker(workerId);
    const r = await this.run('removeWorker', (c) => c.eval(REMOVE_WORKER, 2, key, this.keys.workers(model), this.hubId, workerId));
    if (r === -1) throw corrupt(key, 'not a worker record');
    return r === 1;
  }

  /** One worker's record, or null; throws CLUSTER_STATE_CORRUPT for an unreadable one. */
  async readWorker(workerId: string): Promise<ClusterWorker | null> {
    const key = this.keys.worker(workerId);
    const text = await this.run('readWorker', (c) => c.get(key));
    return text === null ? null : decodeWorker(text, key, workerId);
  }

  /**
   * Every live worker record of `models`. Ids whose record is gone (expired) or now of another model are taken out of
   * the model's set; unreadable records are skipped and listed in `corrupt` (left in place for an operator to see).
   */
  async readWorkers(models: readonly string[]): Promise<{ workers: ClusterWorker[]; corrupt: CorruptValue[] }> {
    return await this.run('readWorkers', async (c) => {
      const workers: ClusterWorker[] = [];
      const bad: CorruptValue[] = [];
      for (const model of models) {
        const setKey = this.keys.workers(model);
        const ids = await c.smembers(setKey);
        const gone: string[] = [];
        for (let i = 0; i < ids.length; i += WORKER_READ_BATCH) {
          const batch = ids.slice(i, i + WORKER_READ_BATCH);
          const texts = await c.mget(...batch.map((id) => this.keys.worker(id)));
          batch.forEach((id, j) => {
            const text = texts[j];
            if (text === null || text === undefined) {
              gone.push(id);
              return;
            }
            const key = this.keys.worker(id);
            try {
              const w = decodeWorker(text, key, id);
              if (w.model === model) workers.push(w);
              else gone.push(id);
            } catch (e) {
              bad.push({ key, error: (e as Error).message });
            }
          });
        }
        if (gone.length > 0) await c.srem(setKey, ...gone);
      }
      return { workers, corrupt: bad };
    });
  }

  /**
   * The texts of the live worker records of `models`, undecoded (the caller decodes each changed one once:
   * record-decoder.ts), leaving out the ids `skip` names (this hub's own workers: not read at all). Ids whose record is
   * gone are taken out of the model's set.
   */
  async readWorkerTexts(
    models: readonly string[],
    skip: (id: string) => boolean = () => false,
  ): Promise<Array<{ model: string; id: string; key: string; text: string }>> {
    return await this.run('readWorkers', async (c) => {
      const out: Array<{ model: string; id: string; key: string; text: string }> = [];
      for (const model of models) {
        const setKey = this.keys.workers(model);
        const ids = (await c.smembers(setKey)).filter((id) => !skip(id));
        const gone: string[] = [];
        for (let i = 0; i < ids.length; i += WORKER_READ_BATCH) {
          const batch = ids.slice(i, i + WORKER_READ_BATCH);
          const keys = batch.map((id) => this.keys.worker(id));
          const texts = await c.mget(...keys);
          batch.forEach((id, j) => {
            const text = texts[j];
            if (text === null || text === undefined) gone.push(id);
            else out.push({ model, id, key: keys[j] as string, text });
          });
        }
        if (gone.length > 0) await c.srem(setKey, ...gone);
      }
      return out;
    });
  }

  // --- quarantine

  /** Quarantines `subject` cluster-wide and tells the other hubs at once (the bus). */
  async quarantine(subject: string, q: ClusterQuarantine): Promise<void> {
    await this.run('quarantine', async (c) => {
      await execAll(
        c
          .multi()
          .hset(this.keys.quarantine, subject, encodeQuarantine(q))
          .publish(this.keys.bus, this.bus({ kind: 'quarantine', subject, reason: q.reason })),
      );
    });
  }

  /** Every quarantined subject; an unreadable entry is returned in `corrupt` (the caller decides: cluster.ts fails closed). */
  async quarantines(): Promise<{ entries: Map<string, ClusterQuarantine>; corrupt: Array<CorruptValue & { subject: string }> }> {
    const key = this.keys.quarantine;
    const all = await this.run('quarantines', (c) => c.hgetall(key));
    const entries = new Map<string, ClusterQuarantine>();
    const bad: Array<CorruptValue & { subject: string }> = [];
    for (const [subject, text] of Object.entries(all)) {
      try {
        entries.set(subject, decodeQuarantine(text, `${key} ${subject}`));
      } catch (e) {
        bad.push({ subject, key: `${key} ${subject}`, error: (e as Error).message });
      }
    }
    return { entries, corrupt: bad };
  }

  // --- credit

  /**
   * Credits `pairs` to `wallet` unless `item` was credited before by any hub (CREDIT_ONCE). Returns whether it was
   * credited now and the wallet's credit after. Safe to retry with the same item after a lost reply.
   */
  async creditOnce(item: string, wallet: string, pairs: number, nowMs: number): Promise<{ credited: boolean; credit: number }> {
    checkCreditWrite(item, wallet, pairs);
    const walletKey = this.keys.wallet(wallet);
    const r = await this.run('creditOnce', (c) =>
      c.eval(CREDIT_ONCE, 2, this.keys.credited(item), walletKey, pairs, Math.round(nowMs), CREDIT_ITEM_TTL_MS, this.hubId),
    );
    if (!Array.isArray(r) || r.length !== 2) throw corrupt(walletKey, `the credit script answered ${JSON.stringify(r)?.slice(0, 80)}`);
    if (r[0] === -1) throw corrupt(walletKey, String(r[1]));
    return { credited: r[0] === 1, credit: decodeCount(r[1], walletKey) };
  }

  /** A wallet's credit, or undefined for a wallet never credited. */
  async credit(wallet: string): Promise<ClusterCredit | undefined> {
    const key = this.keys.wallet(wallet);
    return decodeCredit(await this.run(key, (c) => c.hgetall(key)), key);
  }

  /** Tells the other hubs a wallet's credit now (they tell its volunteers). */
  async announceCredit(wallet: string, credit: number): Promise<void> {
    await this.run('announceCredit', (c) => c.publish(this.keys.bus, this.bus({ kind: 'credit', wallet, credit_pairs: credit })));
  }

  // --- hubs

  /**
   * Announces this hub for `ttlMs` (with where its relay is reached, `relay`) and returns the hubs announced now (this
   * one included), by id, and the announcements that do not read back (skipped).
   */
  async announceHub(
    startedMs: number,
    ttlMs: number,
    relay: { url: string | null; token: string; publicUrl?: string | null },
  ): Promise<{ hubs: ClusterHub[]; corrupt: CorruptValue[] }> {
    return await this.run('announceHub', async (c) => {
      const me: ClusterHub = {
        v: 1,
        hub: this.hubId,
        started_ms: startedMs,
        relay_url: relay.url,
        relay_token: relay.token,
        public_url: relay.publicUrl ?? null,
      };
      await execAll(
        c
          .multi()
          .set(this.keys.hub(this.hubId), encodeHub(me), 'PX', Math.max(1, Math.round(ttlMs)))
          .sadd(this.keys.hubs, this.hubId),
      );
      const ids = await c.smembers(this.keys.hubs);
      const alive = ids.length > 0 ? await c.mget(...ids.map((id) => this.keys.hub(id))) : [];
      const gone = ids.filter((_, i) => alive[i] === null);
      if (gone.length > 0) await c.srem(this.keys.hubs, ...gone);
      const hubs: ClusterHub[] = [];
      const bad: CorruptValue[] = [];
      ids.forEach((id, i) => {
        const text = alive[i];
        if (text === null || text === undefined) return;
        const key = this.keys.hub(id);
        try {
          const h = decodeHub(text, key);
          if (h.hub !== id) throw corrupt(key, `the announcement is of hub ${JSON.stringify(h.hub)}`);
          hubs.push(h);
        } catch (e) {
          bad.push({ key, error: e instanceof Error ? e.message : String(e) });
        }
      });
      return { hubs: hubs.sort((a, b) => a.hub.localeCompare(b.hub)), corrupt: bad };
    });
  }

  /** Forgets this hub at once (a graceful stop). */
  async retireHub(): Promise<void> {
    await this.run('retireHub', async (c) => {
      await execAll(c.multi().del(this.keys.hub(this.hubId)).srem(this.keys.hubs, this.hubId));
    });
  }

  private bus(
    m: { kind: 'quarantine'; subject: string; reason: string } | { kind: 'credit'; wallet: string; credit_pairs: number },
  ): string {
    return encodeBus({ ...m, hub: this.hubId } as BusMessage);
  }
}
