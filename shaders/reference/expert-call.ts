/**
 * CPU reference of a whole compute call, the result every backend (WGSL kernels, onnxruntime fallback) is judged
 * against in the tests, the browser pages and the benchmarks:
 *   out[t] = Σ_k probs[t,k] · expert_{ids[t,k]}(rows[t])      in float64 (expert-ffn.ts)
 * in either numerics: 'exact' (the default: exact math on the dequantized weights) or 'llama' (activations rounded
 * as llama.cpp's CPU backend rounds them, expertFfnAccumulate's ggmlRounding: what a llama.cpp CPU coordinator
 * computes for the same pairs); and the NMSE that compares a result with it. Browser-safe.
 *
 * @example
 *   const experts = dequantizeExperts(slice);
 *   const e = nmse(await rt.compute(rows, ids, probs, nTokens, nUsed), referenceCall(experts, { rows, ids, probs, nTokens, nUsed }));
 *   const l = nmse(await llamaRt.compute(…), referenceCall(experts, call, 'llama'));
 */
import { dequantize } from '../../gguf/dequantize.ts';
import type { Numerics } from '../../protocol/numerics.ts';
import type { ExpertSlice } from '../slice.ts';
import { expertFfnAccumulate, type ExpertMatrices } from './expert-ffn.ts';

/** One call's inputs, as compute() takes them. */
export interface RoutedCall {
  rows: Float32Array;
  ids: Int32Array;
  probs: Float32Array;
  nTokens: number;
  nUsed: number;
}

/**
 * Each expert of a slice, dequantized (views into one dequantized array per matrix), with the stored types (ggmlTypes)
 * and the slice's variant and biases (views).
 */
export function dequantizeExperts(slice: ExpertSlice): ExpertMatrices[] {
  const { nEmbd, ff, nExpert, types } = slice;
  const per = nEmbd * ff;
  const values = (m: 'gate' | 'up' | 'down'): Float32Array => dequantize(types[m], slice[m], nExpert * per);
  const [gate, up, down] = [values('gate'), values('up'), values('down')];
  const experts: ExpertMatrices[] = [];
  for (let e = 0; e < nExpert; e++) {
    const sub = (m: Float32Array): Float32Array => m.subarray(e * per, (e + 1) * per);
    const b = slice.biases;
    experts.push({
      nEmbd,
      ff,
      gate: sub(gate),
      up: sub(up),
      down: sub(down),
      ggmlTypes: { ...types },
      ...(slice.variant && { variant: slice.variant }),
      ...(slice.scales && {
        scales: { gate: slice.scales.gate[e] as number, up: slice.scales.up[e] as number, down: slice.scales.down[e] as number },
      }),
      ...(b && {
        biases: {
          gate: b.gate.subarray(e * ff, (e + 1) * ff),
          up: b.up.subarray(e * ff, (e + 1) * ff),
          down: b.down.subarray(e * nEmbd, (e + 1) * nEmbd),
        },
      }),
    });
  }
  return experts;
}

/**
 * out[t] = Σ_k probs[t,k] · experts[ids[t,k]](rows[t]) for the call's nTokens rows; [nTokens × nEmbd] in float64.
 * 'llama' numerics round activations per the experts' ggmlTypes (dequantizeExperts sets them; RangeError without).
 */
export function referenceCall(experts: readonly ExpertMatrices[], c: RoutedCall, numerics: Numerics = 'exact'): Float64Array {
  const llama = numerics === 'llama';
  if (llama && experts.some((e) => !e.ggmlTypes)) throw new RangeError("referenceCall: 'llama' numerics need the experts' ggmlTypes");
  const nEmbd = experts[0]!.nEmbd;
  const out = new Float64Array(c.nTokens * nEmbd);
  for (let t = 0; t < c.nTokens; t++) {
    const x = c.rows.subarray(t * nEmbd, (t + 1) * nEmbd);
    const y = new Float64Array(nEmbd);
    for (let k = 0; k < c.nUsed; k++) {
      expertFfnAccumulate(experts[c.ids[t * c.nUsed + k]!]!, x, c.probs[t * c.nUsed + k]!, y, llama);
    }
    out.set(y, t * nEmbd);
  }
  return out;
}

/** Normalised mean squared error Σ(a−b)²/Σb², as llama.cpp's test-backend-ops compares ops with the CPU. */
export function nmse(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new RangeError(`nmse: ${a.length} values against ${b.length}`);
  let num = 0;
  let den = 0;
  for (let i = 0; i < b.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return num / den;
}
