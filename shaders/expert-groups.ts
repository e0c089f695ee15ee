/**
 * The batched regime's view of a call's routing: (token, expert) pairs grouped by expert, as the batched kernels
 * (wgsl/expert_up_batched.wgsl, expert_down_batched.wgsl) read it. Pure functions over the ids; call-plan.ts groups a
 * call with them and call-run.ts uploads `perm` and `tiles` as two small storage buffers.
 *
 * @example
 *   const counts = expertCounts(ids, nExpert);            // also feeds chooseRegime (regime-policy.ts)
 *   const g = groupByExpert(ids, counts, tileRows);      // g.perm, g.tiles, g.nTiles
 */

/** Pairs routed to each expert of the slice; ids are validated local indices (0 ≤ id < nExpert). */
export function expertCounts(ids: Int32Array, nExpert: number): Uint32Array {
  const counts = new Uint32Array(nExpert);
  for (let i = 0; i < ids.length; i++) counts[ids[i]!]!++;
  return counts;
}

/** Experts with at least one pair. */
export function usedExperts(counts: Uint32Array): number {
  let n = 0;
  for (const c of counts) if (c > 0) n++;
  return n;
}

/** Words per entry of `ExpertGroups.tiles`; the WGSL `struct Tile { expert, first, count }`. */
export const TILE_WORDS = 3;

export interface ExpertGroups {
  /** Pair indices (t · nUsed + k) sorted by expert; stable, so within an expert in token order. */
  perm: Uint32Array;
  /** Expert e's pairs are perm[offsets[e] .. offsets[e + 1]); nExpert + 1 entries. */
  offsets: Uint32Array;
  /**
   * Row tiles, TILE_WORDS u32 each: (expert, first, count) = `count` (1..tileRows) pairs of `expert` starting at
   * perm[first]. Experts with no pairs have no tiles.
   */
  tiles: Uint32Array;
  nTiles: number;
}

/** Counting sort of the pairs by expert, then each expert's run cut into tiles of at most `tileRows` pairs. */
export function groupByExpert(ids: Int32Array, counts: Uint32Array, tileRows: number): ExpertGroups {
  const nExpert = counts.length;
  const offsets = new Uint32Array(nExpert + 1);
  let nTiles = 0;
  for (let e = 0; e < nExpert; e++) {
    offsets[e + 1] = offsets[e]! + counts[e]!;
    nTiles += Math.ceil(counts[e]! / tileRows);
  }
  const next = offsets.slice(0, nExpert);
  const perm = new Uint32Array(ids.length);
  for (let p = 0; p < ids.length; p++) perm[next[ids[p]!]!++] = p;

  const tiles = new Uint32Array(nTiles * TILE_WORDS);
  let t = 0;
  for (let e = 0; e < nExpert; e++) {
    for (let first = offsets[e]!; first < offsets[e + 1]!; first += tileRows) {
      tiles[t++] = e;
      tiles[t++] = first;
      tiles[t++] = Math.min(tileRows, offsets[e + 1]! - first);
    }
  }
  return { perm, offsets, tiles, nTiles };
}
