/**
 * A worker's trust standing, shared by the hubs of a cluster (issue 30; docs/cluster.md "Standing across hubs").
 * Each hub keeps its own trust record of every worker its dispatcher uses (dispatch/map.ts; the policy is
 * dispatch/trust.ts), audited against its own coordinator. Two verdicts are told to the others through Redis:
 *
 *   trusted  the worker passed its probation on hub X: another hub where it is on probation (and has no strike of
 *            its own there) trusts it at once, with spot audits as for any trusted worker — no second probation;
 *   struck   an audit on hub X was a strike: every other hub puts it back on probation too, so a second strike on
 *            any hub quarantines it (as on one hub), instead of one strike's allowance per hub.
 *
 *   P:standing:WORKER = {"v":1,"worker_id","wallet","standing":"trusted"|"struck","hub","at_ms"}   PX STANDING_TTL_MS
 *
 * A record counts only for the same wallet (a worker id is one wallet's while live, but not after: a record of
 * another wallet under a reused id is ignored). The hub whose audits wrote `trusted` renews it (compare-exact
 * PEXPIRE: never over a newer verdict) while the worker is still trusted there; otherwise it expires after
 * STANDING_TTL_MS. Quarantine is shared apart (cluster.ts, the bus) and is final; a shared standing never lifts one.
 * Why sharing is safe (docs/trust.md "Standing across hubs"): every hub of a cluster runs the same model's coordinator
 * and trusts the others with its state already (they share Redis); probation proves nothing about the next answers
 * that spot audits do not keep checking on every hub, and a liar passes a probation on each hub as easily as on one.
 */
import type { Redis } from 'ioredis';
import { WORKER_ID_MAX_CHARS } from '../limits.ts';
import { corrupt } from './codec.ts';
import { HUB_ID_MAX_CHARS } from './keys.ts';
import type { RedisClusterState } from './redis-state.ts';

/** How long a shared verdict lives unless its hub renews it (a trusted one, while the worker stays trusted there). */
export const STANDING_TTL_MS = 10 * 60_000;
/** Standing keys read per MGET at a sync. */
export const STANDING_READ_BATCH = 1000;

export type SharedVerdict = 'trusted' | 'struck';

export interface SharedStandingRecord {
  v: 1;
  worker_id: string;
  wallet: string;
  standing: SharedVerdict;
  /** The hub whose audit gave the verdict. */
  hub: string;
  at_ms: number;
}

export function encodeStanding(r: SharedStandingRecord): string {
  return JSON.stringify(r);
}

/** A standing record read back; throws CLUSTER_STATE_CORRUPT (codec.ts) for anything a hub does not write. */
export function decodeStanding(text: unknown, key: string, expectId?: string): SharedStandingRecord {
  if (typeof text !== 'string' || text.length > 4096) throw corrupt(key, 'expected a JSON string of at most 4096 characters');
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(text) as Record<string, unknown>;
  } catch {
    throw corrupt(key, 'not JSON');
  }
  if (typeof o !== 'object' || o === null || Array.isArray(o)) throw corrupt(key, 'not a JSON object');
  if (o.v !== 1) throw corrupt(key, `record version ${JSON.stringify(o.v)}, this hub reads 1`);
  const str = (f: string, max: number): string => {
    const v = o[f];
    if (typeof v !== 'string' || v.length === 0 || v.length > max) throw corrupt(key, `${f} must be a string of 1 to ${max} characters`);
    return v;
  };
  const worker_id = str('worker_id', WORKER_ID_MAX_CHARS);
  if (expectId !== undefined && worker_id !== expectId) throw corrupt(key, `the record is of worker ${JSON.stringify(worker_id)}`);
  if (o.standing !== 'trusted' && o.standing !== 'struck') throw corrupt(key, 'standing must be "trusted" or "struck"');
  const at = o.at_ms;
  if (typeof at !== 'number' || !Number.isSafeInteger(at) || at < 0) throw corrupt(key, 'at_ms must be a non-negative integer');
  return { v: 1, worker_id, wallet: str('wallet', 128), standing: o.standing, hub: str('hub', HUB_ID_MAX_CHARS), at_ms: at };
}

/** What the policy reads of this hub's own record of the worker. */
export interface LocalStanding {
  wallet: string | null;
  /** Audits passed here since the last strike (dispatch/map.ts auditsPassed). */
  passed: number;
  strikes: number;
  quarantined: boolean;
  /** Whether a strike it carries was this hub's own audit (not one taken from another hub's verdict). */
  struckHere: boolean;
}

export type Adoption = 'trust' | 'strike' | 'none';

/**
 * What this hub does with another hub's verdict (pure). Nothing for a quarantined worker or another wallet's record;
 * `trusted`: trusted here too if it is on probation here and not for a strike of this hub's own audits (that
 * probation it passes here); `struck`: back on probation here unless it carries a strike here already (a strike is
 * counted once: a second one — on any hub — quarantines it).
 */
export function adoptShared(local: LocalStanding, shared: SharedStandingRecord, probation: number): Adoption {
  if (local.quarantined || local.wallet === null || local.wallet !== shared.wallet) return 'none';
  if (shared.standing === 'trusted') return local.passed < probation && !(local.strikes > 0 && local.struckHere) ? 'trust' : 'none';
  return local.strikes === 0 ? 'strike' : 'none';
}

/** Renews a trusted record only if it is still the one this hub wrote (a newer verdict is never extended). */
const RENEW_IF_SAME = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`;

export interface StandingHost {
  now(): number;
  /** Audits a new worker passes before its answers are used (the hub's TrustConfig.probation). */
  probation: number;
  /** This hub's record of a worker, for the policy; undefined if it holds none. `identity` changes when it is new. */
  local(workerId: string): { standing: Omit<LocalStanding, 'struckHere'>; identity: object } | undefined;
  /** Apply another hub's verdict to this hub's record (trust/ledger.ts adoptShared). */
  adopt(workerId: string, adoption: Exclude<Adoption, 'none'>, from: SharedStandingRecord): void;
}

interface Own {
  text: string;
  renewedMs: number;
}

export class SharedStanding {
  /** Verdicts this hub decided and has not written yet (Redis away): written at the next sync. */
  private readonly pending = new Map<string, string>();
  /** `trusted` records this hub wrote, renewed while the worker stays trusted here. */
  private readonly own = new Map<string, Own>();
  /** The record text last applied to (or written from) this hub's record of each worker: each verdict is taken once. */
  private readonly applied = new Map<string, { text: string; identity: object | undefined }>();
  /** Workers whose strike here came from this hub's own audit. */
  private readonly struckHere = new Set<string>();
  /** Counts, for the health answer and tests. */
  readonly stats = { written: 0, adopted: 0, renewed: 0, corrupt: 0 };
  private syncing = false;

  constructor(
    private readonly redis: Pick<RedisClusterState, 'call' | 'keys' | 'hubId' | 'ready'>,
    private readonly host: StandingHost,
    private readonly ttlMs = STANDING_TTL_MS,
  ) {}

  /** This hub's audits put the worker in good standing (its probation passed): told to the other hubs. */
  passedProbation(workerId: string, wallet: string | null): void {
    this.struckHere.delete(workerId);
    if (wallet) this.write(workerId, wallet, 'trusted');
  }

  /** This hub's audit was a strike: the other hubs put it back on probation. */
  struck(workerId: string, wallet: string | null): void {
    this.struckHere.add(workerId);
    if (wallet) this.write(workerId, wallet, 'struck');
  }

  /** This hub holds no record of the worker any more. */
  forget(workerId: string): void {
    this.own.delete(workerId);
    this.applied.delete(workerId);
    this.struckHere.delete(workerId);
    this.pending.delete(workerId);
  }

  private write(workerId: string, wallet: string, standing: SharedVerdict): void {
    const now = Math.max(0, Math.round(this.host.now()));
    const text = encodeStanding({ v: 1, worker_id: workerId, wallet, standing, hub: this.redis.hubId, at_ms: now });
    const local = this.host.local(workerId);
    this.applied.set(workerId, { text, identity: local?.identity });
    if (standing === 'trusted') this.own.set(workerId, { text, renewedMs: now });
    else this.own.delete(workerId);
    this.pending.set(workerId, text);
    void this.flush().catch(() => {});
  }

  /** Writes the verdicts waiting; each stays waiting if Redis does not take it. */
  async flush(): Promise<void> {
    if (!this.redis.ready || this.pending.size === 0) return;
    const due = [...this.pending];
    await this.redis.call('standing', async (c: Redis) => {
      const p = c.pipeline();
      for (const [id, text] of due) p.set(this.redis.keys.standing(id), text, 'PX', this.ttlMs);
      const out = (await p.exec()) ?? [];
      due.forEach(([id, text], i) => {
        if (out[i]?.[0]) return;
        if (this.pending.get(id) === text) this.pending.delete(id);
        this.stats.written++;
      });
    });
  }

  /**
   * At each cluster sync: writes what waits, renews this hub's trusted records of workers still trusted here, and
   * reads the shared standing of `workerIds` (every worker this hub holds a record of), applying each new verdict once.
   */
  async sync(workerIds: readonly string[]): Promise<void> {
    if (!this.redis.ready || this.syncing) return;
    this.syncing = true;
    try {
      await this.syncOnce(workerIds);
    } finally {
      this.syncing = false;
    }
  }

  private async syncOnce(workerIds: readonly string[]): Promise<void> {
    await this.flush();
    const now = this.host.now();
    const ids = workerIds.filter((id) => this.host.local(id)?.standing.wallet);
    const live = new Set(workerIds);
    for (const id of [...this.applied.keys()]) if (!live.has(id)) this.forget(id);
    await this.renew(now);
    for (let i = 0; i < ids.length; i += STANDING_READ_BATCH) {
      const batch = ids.slice(i, i + STANDING_READ_BATCH);
      const texts = await this.redis.call('standing', (c: Redis) => c.mget(...batch.map((id) => this.redis.keys.standing(id))));
      batch.forEach((id, j) => {
        const text = texts[j];
        if (typeof text === 'string') this.consider(id, text);
      });
    }
  }

  private consider(workerId: string, text: string): void {
    const local = this.host.local(workerId);
    if (!local) return;
    const seen = this.applied.get(workerId);
    if (seen && seen.text === text && seen.identity === local.identity) return;
    let rec: SharedStandingRecord;
    try {
      rec = decodeStanding(text, this.redis.keys.standing(workerId), workerId);
    } catch {
      this.stats.corrupt++;
      this.applied.set(workerId, { text, identity: local.identity });
      return;
    }
    this.applied.set(workerId, { text, identity: local.identity });
    const adoption = adoptShared({ ...local.standing, struckHere: this.struckHere.has(workerId) }, rec, this.host.probation);
    if (adoption === 'none') return;
    if (adoption === 'trust') this.struckHere.delete(workerId);
    this.stats.adopted++;
    this.host.adopt(workerId, adoption, rec);
  }

  /** Renews (a quarter of the TTL apart) the trusted records this hub wrote, while the worker is trusted here. */
  private async renew(now: number): Promise<void> {
    const due = [...this.own].filter(([id, o]) => {
      const l = this.host.local(id)?.standing;
      if (!l || l.quarantined || l.strikes > 0 || l.passed < this.host.probation) {
        this.own.delete(id);
        return false;
      }
      return now - o.renewedMs >= this.ttlMs / 4 && !this.pending.has(id);
    });
    for (const [id, o] of due) {
      const r = await this.redis.call('standing', (c: Redis) => c.eval(RENEW_IF_SAME, 1, this.redis.keys.standing(id), o.text, this.ttlMs));
      if (r === 1) {
        o.renewedMs = now;
        this.stats.renewed++;
      } else this.own.delete(id);
    }
  }
}
