/**
 * Which kernels serve one compute call — a pure function of the call's routing, table-tested in
 * test/gpu/kernels.test.ts.
 *
 *   decode   one matrix–vector product per (token, expert) pair (expert_up/expert_down): every pair reads its
 *            expert's weights again. Best for a few tokens (generation).
 *   batched  pairs grouped by expert, matrix–matrix products (expert_up_batched/expert_down_batched): a
 *            workgroup decodes each weight element once for a tile of up to tileRows pairs. Best when many pairs
 *            share an expert (prompt processing: e.g. 32–512 tokens × top-k).
 *
 * @example
 *   const d = chooseRegime({ nPairs: 512, usedExperts: 8, nEmbd: 2048, ff: 768 });
 *   // { regime: 'batched', reason: 'pairs-share-experts', pairsPerExpert: 64 }
 */

export type Regime = 'decode' | 'batched';
/** What a caller may ask compute() for: a regime, or the policy's choice. */
export type RegimeRequest = Regime | 'auto';

/** What the policy looks at: the call's routing and the slice's row lengths. */
export interface RoutingSnapshot {
  /** (token, expert) pairs of the call: nTokens × nUsed. */
  nPairs: number;
  /** Distinct experts among those pairs. */
  usedExperts: number;
  /** Row length of gate and up. */
  nEmbd: number;
  /** Row length of down. */
  ff: number;
}

export interface RegimePolicy {
  /** Batched from this average of pairs per used expert on. */
  minPairsPerExpert: number;
}

/**
 * Batched from 4 pairs per used expert on. Below that a tile is mostly empty: the batched kernels still stage every
 * weight tile through workgroup memory behind two barriers per step, and that fixed cost is what the decode kernels
 * avoid, while at 4 pairs they already read each weight a quarter as often. (llama.cpp keeps its mat-vec kernels up
 * to about 8 columns on CUDA; ours do not share weights across pairs at all, hence the lower bound.) Set from that
 * reasoning, not measured on a real GPU yet: SwiftShader timings say nothing about memory bandwidth.
 */
export const DEFAULT_REGIME_POLICY: RegimePolicy = { minPairsPerExpert: 4 };

export type RegimeReason =
  /** No pairs: nothing to group. */
  | 'empty'
  /** A row length is not a multiple of 4; the batched kernels decode weights four elements at a time. */
  | 'rows-not-quads'
  /** Too few pairs per used expert for tiles to pay. */
  | 'few-pairs-per-expert'
  /** Enough pairs per used expert that reading each weight once per tile wins. */
  | 'pairs-share-experts';

export interface RegimeDecision {
  regime: Regime;
  reason: RegimeReason;
  /** nPairs / usedExperts (0 for an empty call). */
  pairsPerExpert: number;
}

/** Whether the batched kernels can read this slice at all (see 'rows-not-quads'). */
export function batchedSupported(s: Pick<RoutingSnapshot, 'nEmbd' | 'ff'>): boolean {
  return s.nEmbd % 4 === 0 && s.ff % 4 === 0;
}

export function chooseRegime(s: RoutingSnapshot, policy: RegimePolicy = DEFAULT_REGIME_POLICY): RegimeDecision {
  if (s.nPairs === 0 || s.usedExperts === 0) return { regime: 'decode', reason: 'empty', pairsPerExpert: 0 };
  const pairsPerExpert = s.nPairs / s.usedExperts;
  if (!batchedSupported(s)) return { regime: 'decode', reason: 'rows-not-quads', pairsPerExpert };
  if (pairsPerExpert < policy.minPairsPerExpert) return { regime: 'decode', reason: 'few-pairs-per-expert', pairsPerExpert };
  return { regime: 'batched', reason: 'pairs-share-experts', pairsPerExpert };
}
