/**
 * Slice grants shared by the hubs of a cluster (issue 30; docs/cluster.md): what the market assigned to an HTTP
 * (Kvasir) worker and what its wallet downloaded (market/grants.ts, the rule its coverage reports must pass) are also
 * written to Redis, so that the worker may report its coverage to any hub — one behind the same address as the hub
 * that assigned it, or the next one after that hub died.
 *
 *   P:grants:WALLET   hash, one field per grant, its value the time it was given (ms); PX GRANTS_TTL_MS from the last
 *     ["a", model, layer, begin, end, worker_id]   assigned (worker_id '' for a request that named none)
 *     ["d", model, layer, begin, end]              downloaded
 *
 * Written behind each grant on the hub that gave it (a write Redis does not take is not retried: the grant stays that
 * hub's, as without a cluster). Read only when a coverage report is refused COVERAGE_NOT_ASSIGNED or
 * COVERAGE_NOT_DOWNLOADED on a hub that does not know the grant: the wallet's grants are read into that hub's own
 * SliceGrants (oldest first, so its bounds keep the newest) and the report is judged again, by the same rule.
 * Bounded: at most GRANTS_FIELDS_MAX fields per wallet (the oldest dropped by the write script). A field or value that
 * is not what a hub writes is skipped and counted (never used).
 */
import type { Redis } from 'ioredis';
import { HELD_RANGE_NUMBER_LIMIT, SLICE_GRANTS_PER_WALLET, WORKER_ID_MAX_CHARS } from '../limits.ts';
import type { SliceRef } from '../../protocol/slice.ts';
import type { SliceGrants } from '../market/grants.ts';
import type { RedisClusterState } from './redis-state.ts';

/** A wallet's grants live this long after the last one written. */
export const GRANTS_TTL_MS = 6 * 60 * 60 * 1000;
/** Fields kept per wallet: both kinds' bound of one hub (market/grants.ts SLICE_GRANTS_PER_WALLET each). */
export const GRANTS_FIELDS_MAX = 2 * SLICE_GRANTS_PER_WALLET;

/** HSET, PEXPIRE, then drop the oldest fields (and any whose value is not a time) beyond ARGV[4]. */
const PUT_GRANT = `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local max = tonumber(ARGV[4])
while redis.call('HLEN', KEYS[1]) > max do
  local all = redis.call('HGETALL', KEYS[1])
  local oldest, at = nil, nil
  for i = 1, #all, 2 do
    local t = tonumber(all[i + 1])
    if not t then oldest = all[i]; break end
    if not at or t < at then oldest, at = all[i], t end
  end
  redis.call('HDEL', KEYS[1], oldest)
end
return 1`;

export type SharedGrant =
  | { kind: 'a'; slice: SliceRef; workerId: string | null; atMs: number }
  | { kind: 'd'; slice: SliceRef; atMs: number };

export function grantField(g: { kind: 'a'; slice: SliceRef; workerId: string | null } | { kind: 'd'; slice: SliceRef }): string {
  const s = g.slice;
  return g.kind === 'a'
    ? JSON.stringify(['a', s.model, s.layer, s.begin, s.end, g.workerId ?? ''])
    : JSON.stringify(['d', s.model, s.layer, s.begin, s.end]);
}

/** One field and value read back, or null for anything a hub does not write (pure). */
export function decodeGrant(field: string, value: string): SharedGrant | null {
  if (field.length > 1024 || !/^\d{1,16}$/.test(value)) return null;
  let f: unknown;
  try {
    f = JSON.parse(field);
  } catch {
    return null;
  }
  if (!Array.isArray(f) || (f[0] !== 'a' && f[0] !== 'd') || f.length !== (f[0] === 'a' ? 6 : 5)) return null;
  const [kind, model, layer, begin, end, workerId] = f as [unknown, unknown, unknown, unknown, unknown, unknown];
  const n = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < HELD_RANGE_NUMBER_LIMIT;
  if (typeof model !== 'string' || model.length === 0 || model.length > 256 || !n(layer) || !n(begin) || !n(end) || begin >= end)
    return null;
  const slice: SliceRef = { model, layer, begin, end };
  const atMs = Number(value);
  if (kind === 'd') return { kind, slice, atMs };
  if (typeof workerId !== 'string' || workerId.length > WORKER_ID_MAX_CHARS) return null;
  return { kind: 'a', slice, workerId: workerId === '' ? null : workerId, atMs };
}

export class SharedGrants {
  readonly stats = { written: 0, failed: 0, loaded: 0, corrupt: 0 };

  constructor(
    private readonly redis: Pick<RedisClusterState, 'call' | 'keys' | 'ready'>,
    private readonly now: () => number,
    private readonly ttlMs = GRANTS_TTL_MS,
  ) {}

  /** The market assigned `slice` to `workerId` of `wallet` on this hub: written behind. */
  assigned(wallet: string, workerId: string | null, slice: SliceRef): void {
    this.put(wallet, grantField({ kind: 'a', slice, workerId }));
  }

  /** `wallet` downloaded `slice` from this hub: written behind. */
  downloaded(wallet: string, slice: SliceRef): void {
    this.put(wallet, grantField({ kind: 'd', slice }));
  }

  private put(wallet: string, field: string): void {
    if (!this.redis.ready) {
      this.stats.failed++;
      return;
    }
    const at = String(Math.max(0, Math.round(this.now())));
    void this.redis
      .call('grants', (c: Redis) => c.eval(PUT_GRANT, 1, this.redis.keys.grants(wallet), field, at, this.ttlMs, GRANTS_FIELDS_MAX))
      .then(
        () => this.stats.written++,
        () => this.stats.failed++,
      );
  }

  /**
   * Reads `wallet`'s grants from the cluster into `into` (oldest first). Resolves how many were read (0: none there);
   * throws CLUSTER_UNAVAILABLE when Redis does not answer.
   */
  async load(wallet: string, into: Pick<SliceGrants, 'assigned' | 'downloaded'>): Promise<number> {
    const all = await this.redis.call('grants', (c: Redis) => c.hgetall(this.redis.keys.grants(wallet)));
    const grants: SharedGrant[] = [];
    for (const [field, value] of Object.entries(all)) {
      const g = decodeGrant(field, value);
      if (g) grants.push(g);
      else this.stats.corrupt++;
    }
    grants.sort((x, y) => x.atMs - y.atMs);
    for (const g of grants) {
      if (g.kind === 'a') into.assigned(wallet, g.workerId, g.slice);
      else into.downloaded(wallet, g.slice);
    }
    this.stats.loaded += grants.length;
    return grants.length;
  }
}
