/**
 * Per-slice attribution of a worker's pairs and credit (issue 27: a volunteer holds several slices, and the page and
 * the dashboard show what each one served and earned). The ledger (ledger.ts) decides when pairs are credited; these
 * functions say to which slice they go, over a worker's tallies keyed by `[layer, begin, end)`:
 *
 *   - served pairs (answered in time, shadow items too) count on the slice that computed them;
 *   - used pairs (in the sums the coordinator was sent) are credited at once with trust checks off, and wait as the
 *     slice's unverified pairs with them on;
 *   - an audit's passed pairs wait on the worker's slice of the audit's layer (the one that served most there);
 *   - once the worker is in good standing, every slice's unverified pairs become its credit; a quarantine drops them.
 *
 * So a worker's slices' credit sums to what the ledger credited its wallet for it while it held them.
 *
 *   const t: SliceTallies = new Map();
 *   tallyServed(t, [0, 0, 16], 24);
 *   tallyUsed(t, [0, 0, 16], 24, true);  // unverified
 *   tallyCredited(t);                    // t.get('0:0:16').credit === 24
 */
import type { HeldRange } from '../../protocol/slice.ts';

/** One slice's counts on one worker. */
export interface SliceTally {
  layer: number;
  begin: number;
  end: number;
  /** Pairs it answered in time (shadow items too): the dashboard's "pairs served". */
  pairs: number;
  /** Pairs of it used or audited that wait for the worker's good standing. */
  unverified: number;
  /** Pairs credited to the worker's wallet for it. */
  credit: number;
}

/** A worker's tallies by sliceKey. */
export type SliceTallies = Map<string, SliceTally>;

/** A slice as the dispatcher's links carry it. */
export interface SliceRef {
  readonly layer: number;
  readonly begin: number;
  readonly end: number;
}

export const sliceKey = (s: SliceRef): string => `${s.layer}:${s.begin}:${s.end}`;

/** The tally of `s`, created at zero. */
export function tallyOf(t: SliceTallies, s: SliceRef): SliceTally {
  const k = sliceKey(s);
  let x = t.get(k);
  if (!x) {
    x = { layer: s.layer, begin: s.begin, end: s.end, pairs: 0, unverified: 0, credit: 0 };
    t.set(k, x);
  }
  return x;
}

export function tallyServed(t: SliceTallies, s: SliceRef, pairs: number): void {
  if (pairs > 0) tallyOf(t, s).pairs += pairs;
}

/** Pairs of `s` went into the sums: credit now (`verified`: trust checks off), or unverified until good standing. */
export function tallyUsed(t: SliceTallies, s: SliceRef, pairs: number, verified: boolean): void {
  if (pairs <= 0) return;
  const x = tallyOf(t, s);
  if (verified) x.credit += pairs;
  else x.unverified += pairs;
}

/**
 * An audit of `layer` passed over `pairs`: they wait on the worker's slice of that layer that served most (an audit
 * names its layer, not the range); nothing when it holds none there (released meanwhile: the wallet's credit still
 * counts them, no slice shows them).
 */
export function tallyAudited(t: SliceTallies, layer: number, pairs: number): void {
  let best: SliceTally | undefined;
  for (const x of t.values()) if (x.layer === layer && (!best || x.pairs > best.pairs)) best = x;
  if (best && pairs > 0) best.unverified += pairs;
}

/** The worker is in good standing: every slice's unverified pairs are credited. Returns how many moved. */
export function tallyCredited(t: SliceTallies): number {
  let n = 0;
  for (const x of t.values()) {
    n += x.unverified;
    x.credit += x.unverified;
    x.unverified = 0;
  }
  return n;
}

/** The worker was quarantined: what was never vouched for is dropped. */
export function tallyDropped(t: SliceTallies): void {
  for (const x of t.values()) x.unverified = 0;
}

/** Forgets the tallies of slices it no longer holds (a slice held again later starts at zero). */
export function tallyKeep(t: SliceTallies, held: readonly HeldRange[]): void {
  if (t.size === 0) return;
  const keep = new Set(held.map(([layer, begin, end]) => sliceKey({ layer, begin, end })));
  for (const k of t.keys()) if (!keep.has(k)) t.delete(k);
}
