/**
 * The cluster's names, pure: where each piece of shared state lives in Redis (docs/cluster.md has the table), the
 * checks on the names that go into keys (hub ids, prefixes, credit item ids), and `--redis URL` read into the
 * client's connection options.
 *
 *   const k = clusterKeys('expertswarm');
 *   k.worker('w1');          // 'expertswarm:worker:w1'  — one worker's record (JSON), PX = the hub's stale time
 *   k.workers('tiny-moe');   // 'expertswarm:workers:tiny-moe' — the ids of a model's records (a set, pruned lazily)
 *   parseRedisUrl('unix:///run/redis.sock');  // { path: '/run/redis.sock' }
 *
 * Every key starts with the prefix, so one Redis can hold several clusters (or a cluster and anything else) apart.
 * Worker ids, wallets and model names go into keys as they are: Redis keys are binary-safe, and each of them is the
 * last part of its key, so a ':' inside one cannot make it another key's name.
 */

/** The default key prefix (HubConfig cluster.prefix). */
export const CLUSTER_PREFIX = 'expertswarm';

const NAME = /^[A-Za-z0-9_.-]+$/;

/** A hub id (`--hub-id`, or made up at start): letters, digits, '_', '.', '-'; 1 to 64 characters. */
export const HUB_ID_MAX_CHARS = 64;
/** A credit item id (the idempotency key of one verified item): 1 to 256 printable ASCII characters. */
export const CREDIT_ITEM_MAX_CHARS = 256;

export function checkHubId(id: string): string {
  if (typeof id !== 'string' || id.length === 0 || id.length > HUB_ID_MAX_CHARS || !NAME.test(id)) {
    throw new RangeError(`a hub id is 1 to ${HUB_ID_MAX_CHARS} of A-Z a-z 0-9 _ . -, got ${JSON.stringify(id)}`);
  }
  return id;
}

export function checkPrefix(prefix: string): string {
  if (typeof prefix !== 'string' || prefix.length === 0 || prefix.length > 32 || !NAME.test(prefix)) {
    throw new RangeError(`a cluster key prefix is 1 to 32 of A-Z a-z 0-9 _ . -, got ${JSON.stringify(prefix)}`);
  }
  return prefix;
}

/** Whether `item` may name a credited item: 1 to CREDIT_ITEM_MAX_CHARS printable ASCII characters, no spaces. */
export function isCreditItem(item: unknown): item is string {
  return typeof item === 'string' && item.length > 0 && item.length <= CREDIT_ITEM_MAX_CHARS && /^[\x21-\x7e]+$/.test(item);
}

export interface ClusterKeys {
  readonly prefix: string;
  /** One worker's record: JSON (codec.ts ClusterWorker), expiring with the worker's staleness (PX). */
  worker(workerId: string): string;
  /** The ids of a model's worker records: a set, pruned when a read finds the record gone. */
  workers(model: string): string;
  /** Quarantined subjects (worker ids and wallets): a hash, subject → JSON {reason, since_ms, hub}. */
  readonly quarantine: string;
  /** A wallet's credit: a hash {credit_pairs, first_seen_ms, last_seen_ms}. */
  wallet(wallet: string): string;
  /** One credited item's idempotency key (SET NX, PX CREDIT_ITEM_TTL_MS): its value is the hub that credited it. */
  credited(item: string): string;
  /** One live hub: JSON {hub, started_ms, seen_ms}, expiring unless the hub refreshes it. */
  hub(hubId: string): string;
  /** The ids of hubs that announced themselves (a set, pruned when a read finds the hub's key gone). */
  readonly hubs: string;
  /** The pub/sub channel hubs tell each other on (codec.ts BusMessage). */
  readonly bus: string;
  /** One worker's trust standing as the hubs share it (standing.ts): JSON, PX STANDING_TTL_MS. */
  standing(workerId: string): string;
  /** A wallet's slice grants (grants.ts): a hash, one field per grant, PX GRANTS_TTL_MS. */
  grants(wallet: string): string;
}

export function clusterKeys(prefix: string = CLUSTER_PREFIX): ClusterKeys {
  const p = checkPrefix(prefix);
  return {
    prefix: p,
    worker: (id) => `${p}:worker:${id}`,
    workers: (model) => `${p}:workers:${model}`,
    quarantine: `${p}:quarantine`,
    wallet: (w) => `${p}:wallet:${w}`,
    credited: (item) => `${p}:credited:${item}`,
    hub: (id) => `${p}:hub:${id}`,
    hubs: `${p}:hubs`,
    bus: `${p}:bus`,
    standing: (id) => `${p}:standing:${id}`,
    grants: (w) => `${p}:grants:${w}`,
  };
}

/** What the Redis client connects to: a unix socket's path, or a host and port (with db, credentials, TLS). */
export type RedisTarget =
  | { path: string; db?: number }
  | { host: string; port: number; db?: number; username?: string; password?: string; tls?: Record<string, never> };

/**
 * `--redis URL`: `redis://[user[:password]@]host[:port][/db]`, `rediss://…` (TLS), `unix:///path/to/redis.sock`
 * (`?db=N` optional), or an absolute socket path. Throws a RangeError naming what is wrong.
 */
export function parseRedisUrl(url: string): RedisTarget {
  if (typeof url !== 'string' || url.length === 0)
    throw new RangeError('--redis needs a URL: redis://host:port, rediss://…, or unix:///path');
  if (url.startsWith('/')) return { path: url };
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new RangeError(`--redis: ${JSON.stringify(url)} is not a URL (redis://host:port, rediss://…, unix:///path)`);
  }
  const db = (v: string | null, what: string): number | undefined => {
    if (v === null || v === '') return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0 || n > 1_000_000) throw new RangeError(`--redis: the database number ${what} must be an integer ≥ 0`);
    return n;
  };
  if (u.protocol === 'unix:') {
    if (!u.pathname || u.pathname === '/') throw new RangeError('--redis: unix:///path needs the socket path');
    const n = db(u.searchParams.get('db'), '(?db=)');
    return { path: decodeURIComponent(u.pathname), ...(n !== undefined ? { db: n } : {}) };
  }
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:') {
    throw new RangeError(`--redis: the scheme must be redis:, rediss: or unix:, got ${u.protocol}`);
  }
  if (!u.hostname) throw new RangeError('--redis: the URL names no host');
  const port = u.port === '' ? 6379 : Number(u.port);
  const n = db(u.pathname.replace(/^\//, ''), '(the path)');
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  return {
    host,
    port,
    ...(n !== undefined ? { db: n } : {}),
    ...(u.username ? { username: decodeURIComponent(u.username) } : {}),
    ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
    ...(u.protocol === 'rediss:' ? { tls: {} } : {}),
  };
}

/** The URL with its password replaced by '***' (for logs and the health answer). */
export function redactRedisUrl(url: string): string {
  return url.replace(/^(rediss?:\/\/[^:@/]*:)[^@/]*@/, '$1***@');
}
