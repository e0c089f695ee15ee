/**
 * Release: when the load passes and the effective target falls back, the workers beyond target are let go, least
 * useful first, and never below target. A pure function over the workers' held ranges and the replica counts; the hub
 * tells the chosen ones over their channel (they go back to waiting and are recruited again on the next surge).
 *
 *   const ids = chooseReleases(candidates, (layer) => store.replicaCounts('m', layer), 2);
 *
 * Least useful first: a worker that never served, then the one that served fewest pairs, then the slower one, then
 * the newest. A worker is released only if every expert it holds stays at or above `target` without it; the counts
 * are updated as the function goes, so two workers holding the same surplus range are not both released.
 */
import type { HeldRange } from './types.ts';

export interface ReleaseCandidate {
  workerId: string;
  ranges: readonly HeldRange[];
  /** When it last served a pair (ms), or null if it never did. */
  lastServeMs: number | null;
  pairsServed: number;
  /** Its measured round trip (ms), or null if unknown. */
  latencyMs: number | null;
  attachMs: number;
}

/** Negative when `a` is less useful than `b` (released first). */
export function lessUseful(a: ReleaseCandidate, b: ReleaseCandidate): number {
  const never = Number(b.lastServeMs === null) - Number(a.lastServeMs === null);
  if (never !== 0) return never;
  if (a.pairsServed !== b.pairsServed) return a.pairsServed - b.pairsServed;
  const la = a.latencyMs ?? Number.POSITIVE_INFINITY;
  const lb = b.latencyMs ?? Number.POSITIVE_INFINITY;
  if (la !== lb) return la > lb ? -1 : 1;
  if (a.attachMs !== b.attachMs) return b.attachMs - a.attachMs;
  return a.workerId < b.workerId ? -1 : a.workerId > b.workerId ? 1 : 0;
}

/**
 * The workers to release, in release order. `countsOf(layer)` gives the live replicas per expert of a MoE layer
 * (this function copies what it changes); `target` is the effective target now.
 */
export function chooseReleases(candidates: readonly ReleaseCandidate[], countsOf: (layer: number) => Int32Array, target: number): string[] {
  const counts = new Map<number, Int32Array>();
  const layer = (l: number): Int32Array => {
    let c = counts.get(l);
    if (!c) {
      c = Int32Array.from(countsOf(l));
      counts.set(l, c);
    }
    return c;
  };
  const released: string[] = [];
  for (const w of [...candidates].sort(lessUseful)) {
    if (w.ranges.length === 0) continue;
    const surplus = w.ranges.every(([l, begin, end]) => {
      const c = layer(l);
      for (let e = begin; e < end; e++) if ((c[e] ?? 0) - 1 < target) return false;
      return true;
    });
    if (!surplus) continue;
    for (const [l, begin, end] of w.ranges) {
      const c = layer(l);
      for (let e = begin; e < end; e++) c[e] = (c[e] ?? 0) - 1;
    }
    released.push(w.workerId);
  }
  return released;
}
