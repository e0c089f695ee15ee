/**
 * What the swarm could give at most on the machine a bench:elastic run measured, by Amdahl's law: the coordinator
 * spends a share `s` of its time on routed experts; the rest (attention, the output head, sampling, the server) no
 * volunteer can take. `npm run bench:elastic -- --share` measures `s` by difference (shareFromTopOne); with a volunteer
 * core computing a pair in ρ times the coordinator's time per pair, the balanced split of every layer (both finish
 * together, nothing fixed per exchange) leaves the coordinator ρ / (1 + ρ) of its expert time:
 *
 *   const s = shareFromTopOne(tTop1 / tTop8, 8);
 *   amdahlCeiling(s, null)   // 1 / (1 − s): every routed expert away at no cost
 *   amdahlCeiling(s, 2)      // a volunteer core at half the coordinator's speed per pair, balanced
 *
 * Pure; table tests in test/unit/elastic-ceiling.test.ts. Fixed costs per exchange only lower these: they are ceilings.
 * (Estimating `s` from the coordinator's own per-pair times in its REQUESTs does not work: those are the first
 * evaluation after each quiet window, cold, and came to more than the whole run's time.)
 */

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

/**
 * The speed-up bound for expert share `s` (0…1): with `rho` null, every routed expert away at no cost, 1 / (1 − s)
 * (Infinity at s = 1); with a volunteer core whose time per pair is `rho` times the coordinator's, the balanced split,
 * 1 / (1 − s + s · ρ / (1 + ρ)).
 */
export function amdahlCeiling(s: number, rho: number | null): number {
  if (!(s >= 0 && s <= 1)) throw new RangeError(`the share must be in [0, 1], got ${s}`);
  if (rho === null) return s === 1 ? Number.POSITIVE_INFINITY : 1 / (1 - s);
  if (!(rho > 0)) throw new RangeError(`ρ must be > 0, got ${rho}`);
  return 1 / (1 - s + (s * rho) / (1 + rho));
}
