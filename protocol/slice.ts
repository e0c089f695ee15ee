/**
 * The slice vocabulary both the hub and the volunteers use, defined once (issue 23: one name per idea). Ranges are
 * half-open everywhere: `[begin, end)` holds experts begin, begin+1, …, end-1, so the width is `end - begin` and two
 * adjacent ranges share a bound without overlapping. The wire pair `experts: [a, b]` follows the same rule.
 */

/** Experts `[begin, end)` of one layer; `0 <= begin < end <= nExpert`. */
export interface ExpertRange {
  begin: number;
  end: number;
}

/** Experts `[begin, end)` of one layer of one model: which slice, and nothing about its bytes. */
export interface SliceRef extends ExpertRange {
  model: string;
  layer: number;
}

/**
 * Experts a worker holds on one layer, as heartbeats carry them (an entry of `coverage` on the channel, of `segments`
 * in `POST /api/expert-coverage`): `[layer, begin, end]`, experts `[begin, end)`. The model is the message's, so it
 * is not repeated per range. Not a demand `Segment`: this is what one worker has, not a run of replica counts.
 */
export type HeldRange = [layer: number, begin: number, end: number];

/**
 * A slice as an assign names it, in its wire form (`experts: [begin, end)`), with the shard's size and digest: what
 * the peer directory keys transfers by and what a volunteer records of its assignment.
 */
export interface AssignedSlice {
  model: string;
  layer: number;
  experts: [number, number];
  /** The slice's size in bytes, as the hub announced it. */
  bytes: number;
  digest: string;
}
