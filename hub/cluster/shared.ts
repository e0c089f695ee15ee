/**
 * The seams the hub reads its market state through, so that one hub alone (SQLite and memory, the default) and a hub
 * of a cluster (the same, plus the cluster's Redis: cluster.ts) are the same to its callers.
 *
 *   quarantine  QuarantineList   HubStore (SQLite)            | ClusterSync: SQLite ∪ the cluster's quarantine hash
 *   credit      CreditBook       LocalCreditBook (SQLite)     | ClusterSync: the cluster's wallet hashes, Lua
 *   coverage    CoverageView     CoverageStore (this hub's)   | ClusterCoverage: this hub's ∪ the other hubs' records
 */
import type { CreditAnswer } from '../../protocol/http.ts';
import type { CoverageStore } from '../market/coverage.ts';
import type { HubStore } from '../store.ts';
import { checkCreditWrite } from './codec.ts';

/** Who is refused: worker ids and wallets, with the reason. */
export interface QuarantineList {
  quarantine(subject: string, reason: string, nowMs: number): void;
  quarantineReason(subject: string): string | undefined;
}

/** What a credit by item answers: whether this report credited it (false: it was credited before), and the total after. */
export interface CreditOnce {
  credited: boolean;
  credit: number;
}

/** Credit by verified item: each item id credits once, whoever reports it (and however often). */
export interface CreditBook {
  creditOnce(item: string, wallet: string, pairs: number, nowMs: number): Promise<CreditOnce>;
  creditAnswer(wallet: string): Promise<CreditAnswer>;
}

/**
 * The single hub's credit book: its SQLite store marks each item once (credited_items), and `credit` writes the pairs
 * (the ledger's addCredit: the store and its cache), in the same tick; a failed write takes the mark back.
 */
export class LocalCreditBook implements CreditBook {
  constructor(
    private readonly store: Pick<HubStore, 'markCredited' | 'unmarkCredited' | 'volunteer'>,
    private readonly credit: (wallet: string, pairs: number) => void,
  ) {}

  async creditOnce(item: string, wallet: string, pairs: number, nowMs: number): Promise<CreditOnce> {
    checkCreditWrite(item, wallet, pairs);
    const credited = this.store.markCredited(item, nowMs);
    if (credited) {
      try {
        this.credit(wallet, pairs);
      } catch (e) {
        this.store.unmarkCredited(item);
        throw e;
      }
    }
    return { credited, credit: this.store.volunteer(wallet)?.credit_pairs ?? 0 };
  }

  async creditAnswer(wallet: string): Promise<CreditAnswer> {
    const v = this.store.volunteer(wallet);
    return { wallet, credit_pairs: v?.credit_pairs ?? 0, first_seen_ms: v?.first_seen_ms ?? null, last_seen_ms: v?.last_seen_ms ?? null };
  }
}

/** What the market's policies read of coverage (recruiter.ts): one hub's CoverageStore, or the cluster's view. */
export type CoverageView = Pick<
  CoverageStore,
  'workerCount' | 'replicaWorkerCount' | 'workersOf' | 'heldRanges' | 'replicaCounts' | 'modelOf'
>;

/**
 * This hub's coverage and the other hubs' (mirrored from Redis), read as one. A worker is in one of the two: the
 * mirror leaves out the workers attached here (cluster.ts removes one from the mirror when it heartbeats here).
 */
export class ClusterCoverage implements CoverageView {
  constructor(
    private readonly local: CoverageView,
    private readonly remote: CoverageView,
  ) {}

  workerCount(model: string): number {
    return this.local.workerCount(model) + this.remote.workerCount(model);
  }

  replicaWorkerCount(model: string): number {
    return this.local.replicaWorkerCount(model) + this.remote.replicaWorkerCount(model);
  }

  workersOf(model: string): string[] {
    return [...this.local.workersOf(model), ...this.remote.workersOf(model)];
  }

  heldRanges(workerId: string): ReturnType<CoverageStore['heldRanges']> {
    return this.local.heldRanges(workerId) ?? this.remote.heldRanges(workerId);
  }

  modelOf(workerId: string): string | undefined {
    return this.local.modelOf(workerId) ?? this.remote.modelOf(workerId);
  }

  replicaCounts(model: string, layer: number): Int32Array {
    const counts = this.local.replicaCounts(model, layer);
    if (this.remote.workerCount(model) === 0) return counts;
    const more = this.remote.replicaCounts(model, layer);
    for (let e = 0; e < counts.length; e++) counts[e]! += more[e] ?? 0;
    return counts;
  }
}
