/**
 * What the swarm could give at most on the machine a bench:elastic run measured, by Amdahl's law: the coordinator
 * spends a share `s` of its core on routed experts; the rest (attention, the output head, sampling, the server) no
 * volunteer can take. With a volunteer core computing a pair in `r` ms against the coordinator's `l`, the balanced
 * split of every layer (both finish together, nothing fixed per exchange) leaves the coordinator r / (l + r) of its
 * expert time, so a round takes (1 − s) + s · r / (l + r) of the time alone:
 *
 *   const c = swarmCeiling({ wallMs, buckets: [{ tokens, pairsPerToken: 16, localMsPerPair: 0.2 }], remoteMsPerPair: 0.3 });
 *   c.freeExperts   // 1 / (1 − s): every routed expert away at no cost
 *   c.balanced      // the balanced split with this volunteer speed
 *
 * Decode steps and prompt batches cost the coordinator different times per pair (a prompt batch reads each expert's
 * weights once for many tokens), so the tokens come in buckets, each with its own measured `l`. Pure; table tests in
 * test/unit/elastic-ceiling.test.ts. Fixed costs per exchange only lower both figures: they are ceilings.
 */

export interface CeilingBucket {
  /** Tokens of this kind the coordinator computed in the round (generated, or prompt). */
  tokens: number;
  /** Routed pairs per token (MoE layers × top-k). */
  pairsPerToken: number;
  /** The coordinator's wall time per routed pair for tokens of this kind, ms (all its threads). */
  localMsPerPair: number;
}

export interface CeilingInput {
  /** The round's wall time, ms. */
  wallMs: number;
  buckets: readonly CeilingBucket[];
  /** A volunteer core's time per pair, ms; null when none was measured. */
  remoteMsPerPair: number | null;
}

export interface Ceiling {
  /** The share of the coordinator's wall time spent on routed experts (0…1, clamped). */
  expertShare: number;
  /** Speed-up with every routed expert away at no cost: 1 / (1 − s). Infinity when s is 1. */
  freeExperts: number;
  /** Speed-up with the balanced split at remoteMsPerPair; null without a measured volunteer. */
  balanced: number | null;
  /**
   * The per-pair times came to more than the round's wall time: they carry per-layer fixed costs (a small model's
   * pairs cost less than the exchange around them), so the share is no measurement and the figures bound nothing.
   */
  overshoot: boolean;
}

export function swarmCeiling(input: CeilingInput): Ceiling {
  if (!(input.wallMs > 0)) throw new RangeError(`wallMs must be > 0, got ${input.wallMs}`);
  let expertMs = 0;
  for (const b of input.buckets) {
    if (!(b.tokens >= 0 && b.pairsPerToken >= 0 && b.localMsPerPair >= 0)) throw new RangeError(`bad bucket ${JSON.stringify(b)}`);
    expertMs += b.tokens * b.pairsPerToken * b.localMsPerPair;
  }
  const overshoot = expertMs > input.wallMs;
  const scale = overshoot ? input.wallMs / expertMs : 1;
  const s = Math.min(1, expertMs / input.wallMs);
  const freeExperts = s >= 1 ? Number.POSITIVE_INFINITY : 1 / (1 - s);
  const r = input.remoteMsPerPair;
  if (r === null || !(r > 0)) return { expertShare: s, freeExperts, balanced: null, overshoot };
  let left = 1 - s;
  for (const b of input.buckets) {
    const share = (b.tokens * b.pairsPerToken * b.localMsPerPair * scale) / input.wallMs;
    left += b.localMsPerPair > 0 ? (share * r) / (b.localMsPerPair + r) : 0;
  }
  return { expertShare: s, freeExperts, balanced: 1 / left, overshoot };
}

/**
 * The share of a coordinator's time its routed experts take, from two runs of the same load that differ only in top-k:
 * T_k = O + E and T_1 = O + E / k (the expert work scales with the pairs), so E = (T_k − T_1) · k / (k − 1) and the
 * share is E / T_k. `t1OverTk` is T_1 / T_k (the top-k run's rate over the top-1 run's). Clamped to [0, 1]: noise can
 * make the top-1 run no faster.
 *
 *   shareFromTopOne(0.7, 8)   // 0.3 · 8/7 ≈ 0.343
 */
export function shareFromTopOne(t1OverTk: number, k: number): number {
  if (!(k > 1)) throw new RangeError(`top-k must be > 1, got ${k}`);
  if (!(t1OverTk > 0)) throw new RangeError(`T_1 / T_k must be > 0, got ${t1OverTk}`);
  return Math.min(1, Math.max(0, ((1 - t1OverTk) * k) / (k - 1)));
}
