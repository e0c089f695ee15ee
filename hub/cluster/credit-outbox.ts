/**
 * A hub's credit writes on their way to the cluster's Redis, kept in its SQLite state (`--state`) until Redis took
 * them: the ledger's credit (a dispatcher's used pairs, trust/ledger.ts, once a second) is written here first, with an
 * item id that is the same on every try, and deleted when the credit script answered (cluster.ts flush). A hub killed
 * while credit waits (Redis away, or the reply not back yet) finds it here at its next start with the same `--state`
 * and sends it again; the credit script counts an item once (redis-state.ts CREDIT_ONCE), so a write whose reply was
 * lost before the kill is not counted twice.
 *
 *   const outbox = new CreditOutbox(store, 'hub-a');
 *   outbox.load();                                  // what an earlier run of this hub left waiting
 *   const c = outbox.add(wallet, 12, Date.now());   // { item: 'hub-a:mfx3k2-9c1e:1', … }, in SQLite now
 *   outbox.done(c.item);                            // Redis took it
 *
 * Item ids carry a token of this start (its clock and 2 random bytes): a restarted hub with the same `--hub-id` would
 * otherwise count its items from 1 again and have its first ones refused as credited before (kept 24 h).
 */
import { randomBytes } from 'node:crypto';
import type { HubStore } from '../store.ts';

/** One credit write: its item id (the credit script's idempotency key), the wallet, the pairs, when it was due. */
export interface PendingCredit {
  item: string;
  wallet: string;
  pairs: number;
  nowMs: number;
}

export type OutboxStore = Pick<HubStore, 'outboxAdd' | 'outboxDelete' | 'outbox'>;

export class CreditOutbox {
  /** Waiting writes in the order they were due (Map keeps insertion order). */
  private readonly waiting = new Map<string, PendingCredit>();
  private readonly start: string;
  private seq = 0;

  constructor(
    private readonly store: OutboxStore,
    private readonly hubId: string,
    nowMs: number = Date.now(),
  ) {
    this.start = `${Math.max(0, Math.round(nowMs)).toString(36)}-${randomBytes(2).toString('hex')}`;
  }

  /** Takes in what an earlier run left in the store (oldest first); returns how many. */
  load(): number {
    let n = 0;
    for (const r of this.store.outbox()) {
      if (this.waiting.has(r.item)) continue;
      this.waiting.set(r.item, { item: r.item, wallet: r.wallet, pairs: r.pairs, nowMs: r.at_ms });
      n++;
    }
    return n;
  }

  /** A credit write due now: stored first (a kill after this loses nothing), then waiting here. */
  add(wallet: string, pairs: number, nowMs: number): PendingCredit {
    const c: PendingCredit = { item: `${this.hubId}:${this.start}:${++this.seq}`, wallet, pairs, nowMs };
    this.store.outboxAdd(c.item, c.wallet, c.pairs, c.nowMs);
    this.waiting.set(c.item, c);
    return c;
  }

  /** Redis took `item` (credited now or before): it leaves the store. */
  done(item: string): void {
    this.waiting.delete(item);
    this.store.outboxDelete(item);
  }

  /** The waiting writes, oldest first (a copy: `done` may be called while going through it). */
  pending(): PendingCredit[] {
    return [...this.waiting.values()];
  }

  get size(): number {
    return this.waiting.size;
  }
}
