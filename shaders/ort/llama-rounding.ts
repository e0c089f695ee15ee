/**
 * 'llama' numerics for the onnxruntime fallback: ggml's activation rounding (roundActivations of
 * reference/ggml-activations.ts) applied to the hidden vector h = silu(g) ⊙ u when g and u come from float32 matrix
 * products and are therefore known only within a bound.
 *
 * Rounding h to 8-bit blocks (or to f16 / bf16) is a step function: where an exact h lands within float32 summation
 * error of a step, rounding the float32 h instead picks the neighbouring quantum, and that one value then differs by
 * amax/127 of its block, or one f16 / bf16 step (measured without what follows, 256 × 256: 0.05–0.9 % of pairs over
 * NMSE 1e-9 for the 8-bit types, up to 1.3e-5; F16 3 %, up to 7e-8; BF16 0.2 %, up to 6e-9). So each
 * value whose rounding the bound leaves open is recomputed exactly (g and u as float64 dots of the dequantized row with
 * the rounded input, as the reference does) before rounding, together with the values that may set its block's
 * scale. Every decision is then the one the exact h gives; what is left differs from the reference only continuously
 * (float32 summation in the down product, Q8_K's float32 scale), at float-summation precision.
 *
 * (Against a real llama.cpp coordinator, whose own h carries float32 error, such one-quantum steps remain possible at
 * the rate its error sets; this removes ours.)
 */
import { GGMLType } from '../../gguf/quant-types.ts';
import { bf16ToF32, f16ToF32, f16ToF32Table, f32ToBf16, f32ToF16 } from '../../gguf/half.ts';
import { roundActivations } from '../reference/ggml-activations.ts';
import { silu } from '../reference/expert-ffn.ts';

const f32 = Math.fround;
const EPS32 = 2 ** -24;

/**
 * Error model of onnxruntime's float32 MatMul (MLAS, wasm): one dot product of a weight row w with an input row x, of
 * length n, is within min(n, MATMUL_ERROR_FACTOR / √n) · 2⁻²⁴ · ‖w‖₂‖x‖₂ of the exact value. Any summation order
 * stays within (n − 1) · 2⁻²⁴ · Σ|w x| ≤ (n − 1) · 2⁻²⁴ · ‖w‖‖x‖; what MLAS does measures far below that. Measured as
 * |error| / (2⁻²⁴‖w‖‖x‖) over 6k–65k dots per case (Q8_0 and F16 weights, n = 32 … 4096): zero-mean inputs, with or
 * without outlier channels, ≤ 3.2 (n ≤ 256) falling to 0.4 (n = 4096); inputs and weights both biased to one sign
 * (partial sums grow with n, the worst case found) ≤ 11.3 at n = 256 and 3.6 at n = 4096, i.e. ≤ ~230 / √n. 256 / √n
 * keeps a margin of 5 or more over the zero-mean cases and ≥ 1.1 over the biased one: a larger factor recomputes more
 * values (the cost of this mode), and an error beyond the bound only leaves that value's rounding step unresolved, as
 * if nothing were recomputed (one quantum of one value, per-pair NMSE ≲ 1e-5 for Q8 blocks, ≲ 1e-7 for F16).
 */
export const MATMUL_ERROR_FACTOR = 256;

/** silu is 1.0998…-Lipschitz. */
const SILU_LIPSCHITZ = 1.1;

/** The bound of one dot product w · x of length n computed in float32 by onnxruntime (see MATMUL_ERROR_FACTOR). */
export function dotErrorBound(wNorm: number, xNorm: number, n: number): number {
  return Math.min(n, MATMUL_ERROR_FACTOR / Math.sqrt(n)) * EPS32 * wNorm * xNorm;
}

/**
 * h[i] = f32(silu(g[i]) · u[i]) from float32 g and u (as the reference computes it from exact ones), and bound[i], how
 * far the reference's h may be when its g and u are within dg[i] and du[i] of these (n values from `offset` of g and u).
 */
export function hiddenWithin(
  g: Float32Array,
  u: Float32Array,
  offset: number,
  dg: (i: number) => number,
  du: (i: number) => number,
  h: Float32Array,
  bound: Float64Array,
): void {
  for (let i = 0; i < h.length; i++) {
    const gi = g[offset + i]!;
    const ui = u[offset + i]!;
    const s = silu(gi);
    const hi = f32(s * ui);
    const dgi = dg(i);
    const dui = du(i);
    h[i] = hi;
    // |silu(g')u' − silu(g)u| ≤ |silu(g') − silu(g)|·|u'| + |silu(g)|·|u' − u|; both sides then rounded to float32.
    bound[i] = (SILU_LIPSCHITZ * dgi * (Math.abs(ui) + dui) + Math.abs(s) * dui) * (1 + 1e-9) + 2 * EPS32 * Math.abs(hi);
  }
}

/** Round half to even for v ≥ 0, as ggml's nearest_int does. */
function roundEvenNonNegative(v: number): number {
  const r = Math.floor(v + 0.5);
  return r - v === 0.5 && (r & 1) === 1 ? r - 1 : r;
}

/** The f16 scale Q8_0 stores for a block whose largest magnitude is `amax`. */
const q8_0Scale = (amax: number): number => f16ToF32(f32ToF16(f32(amax / 127)));

/**
 * roundActivations(vt, h) as the exact h would round, where each h[i] is within bound[i] of the exact value and
 * exact(i) computes that value (float32, as the reference holds it). Returns the rounded values and how many values
 * were recomputed. `h` is not modified.
 */
export function roundWithin(
  vt: GGMLType,
  h: Float32Array,
  bound: ArrayLike<number>,
  exact: (i: number) => number,
): { values: Float32Array; refined: number } {
  const x = Float32Array.from(h);
  const done = new Uint8Array(h.length);
  let refined = 0;
  const fix = (i: number): void => {
    if (done[i]) return;
    done[i] = 1;
    x[i] = exact(i);
    refined++;
  };
  switch (vt) {
    case GGMLType.F32:
      break;
    case GGMLType.F16:
    case GGMLType.BF16: {
      // One value at a time: the conversion is monotone, so the ends of [h − b, h + b] decide.
      if (vt === GGMLType.F16) {
        const f16 = f16ToF32Table();
        for (let i = 0; i < h.length; i++) {
          const v = h[i]!;
          const b = bound[i]!;
          if (b > 0 && f16[f32ToF16(v - b)] !== f16[f32ToF16(v + b)]) fix(i);
        }
      } else {
        for (let i = 0; i < h.length; i++) {
          const v = h[i]!;
          const b = bound[i]!;
          if (b > 0 && bf16ToF32(f32ToBf16(v - b)) !== bf16ToF32(f32ToBf16(v + b))) fix(i);
        }
      }
      break;
    }
    case GGMLType.Q8_0:
    case GGMLType.Q8_K: {
      const block = vt === GGMLType.Q8_0 ? 32 : 256;
      if (h.length % block !== 0) throw new RangeError(`roundWithin: ${h.length} values are not whole blocks of ${block}`);
      for (let b0 = 0; b0 < h.length; b0 += block) {
        // The exact block's amax lies in [lo, hi].
        let lo = 0;
        let hi = 0;
        let inexact = false;
        for (let i = b0; i < b0 + block; i++) {
          const a = Math.abs(h[i]!);
          lo = Math.max(lo, a - bound[i]!);
          hi = Math.max(hi, a + bound[i]!);
          inexact ||= bound[i]! > 0;
        }
        if (!inexact) continue; // exact already
        // Q8_0's stored scale is f16(amax / 127), a step function of amax: only a step needs the exact amax. Q8_K's is
        // a float32 quotient of it, so its values follow amax continuously: the exact amax (one or two values of 256)
        // makes them the reference's bit for bit.
        const scaleOpen = vt === GGMLType.Q8_K || q8_0Scale(lo) !== q8_0Scale(hi);
        // The inverse scale (127 / amax, in float32) lies in [idLo, idHi]; a value's quant q = round(f32(|v| · id))
        // is monotone in |v| and id (rounding half to even is symmetric, Q8_K's clamp at 127 too), so the ends decide.
        const idLo = f32(127 / hi);
        const idHi = lo > 0 ? f32(127 / lo) : Infinity;
        const openValues: number[] = [];
        for (let i = b0; i < b0 + block; i++) {
          const a = Math.abs(h[i]!);
          const b = bound[i]!;
          // (No exact value's quant exceeds 127: |v| ≤ amax, so both ends are capped there.)
          const qLo = Math.min(127, roundEvenNonNegative(f32(Math.max(0, a - b) * idLo * (1 - 1e-12))));
          const qHi = Math.min(127, roundEvenNonNegative(f32((a + b) * idHi * (1 + 1e-12))));
          if (qLo !== qHi) openValues.push(i);
        }
        if (!scaleOpen && openValues.length === 0) continue;
        // Make the block's amax exact (every value that may be it), then the open values: each decision is now the
        // exact h's, and values already decided stay decided for any amax in [lo, hi].
        for (let i = b0; i < b0 + block; i++) if (Math.abs(h[i]!) + bound[i]! >= lo) fix(i);
        for (const i of openValues) fix(i);
      }
      break;
    }
    default:
      throw new RangeError(`roundWithin: cannot round activations to ${GGMLType[vt] ?? vt}`);
  }
  return { values: roundActivations(vt, x), refined };
}
