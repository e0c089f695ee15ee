/**
 * How far a result computed in llama numerics may honestly stray from the reference (referenceCall(…, 'llama')).
 *
 * llama.cpp's CPU backend rounds the hidden vector h = silu(gate·x) ⊙ (up·x) (or the expert FFN variant's gated unit
 * of the scaled and biased products, protocol/variant.ts) to the down type's vec-dot type before the down projection
 * (8-bit blocks for the quants, f16/bf16 for half weights). h itself is a float result: any two
 * honest implementations (two CPUs, a GPU, this float64 reference) compute it a few f32 ulps apart, and an element
 * of h that lies that close to a rounding boundary (h·id within float error of k + ½, or a Q8_0 block's scale
 * amax / 127 within float error of an f16 tie) may round one step either way. One such step in an 8-bit block moves
 * the output by |d| · ‖down column‖ — NMSE ~1e-9 … 1e-6 for one element in a small call, far above the float
 * summation error (~1e-14) everything else agrees to. The rows themselves are rounded bit-exactly (identical input),
 * so h is the only place ties arise.
 *
 * compareLlama() finds the elements of h within `margin` of a tie (in the reference's h), bounds what one step at
 * each could move each output row (the slack: Σ over the tied elements of step · prob · |down scale| · ‖down column‖,
 * a rigorous triangle bound, ~0.1–0.2% of a token's output norm at ff·nUsed = 1024), and reports the NMSE beyond that slack: ~1e-14
 * for an honest result, while anything that rounds wrongly everywhere (exact math: 1e-7 for F16 … 1e-4 for the 8-bit
 * types; a skipped rounding; sums 1% off: 1e-4) stays far above 1e-9. Browser-safe.
 */
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16 } from '../../gguf/half.ts';
import { GGMLType } from '../../gguf/quant-types.ts';
import type { RoutedCall } from './expert-call.ts';
import { referenceCall } from './expert-call.ts';
import { SILU_VARIANT } from '../../protocol/variant.ts';
import { gatedUnit, type ExpertMatrices } from './expert-ffn.ts';
import { roundActivations, vecDotType } from './ggml-activations.ts';

const f32 = Math.fround;

/** Margins (in units of the step a tie decides) within which an element counts as tied. */
export interface TieMargins {
  /**
   * Q8_0 / Q8_K: |frac(|h·id|) − ½| below this (default 1e-3). An f32 h a few ulps off moves h·id (≤ 127) by ~1e-5:
   * the margin leaves ~100× that, and flags ~0.2% of the elements.
   */
  quant: number;
  /**
   * F16 / BF16 elements, and a Q8_0 block scale's f16 rounding: distance to the tie in units of the half step (default
   * 2e-3; an f32 ulp is 2^-13 of an f16 step, 2^-16 of a bf16 one).
   */
  half: number;
}

export const DEFAULT_TIE_MARGINS: TieMargins = { quant: 1e-3, half: 2e-3 };

export interface LlamaComparison {
  /** Plain NMSE against referenceCall(experts, c, 'llama'). */
  nmse: number;
  /** NMSE of the error beyond each token's tie slack: Σ_t max(0, ‖e_t‖ − s_t)² / Σ‖ref‖². */
  beyondTies: number;
  /** Elements of h (and Q8_0 block scales) found within the margin of a tie. */
  ties: number;
  /** h elements rounded in all. */
  elements: number;
  reference: Float64Array;
}

/** How far `v` is from the midpoint of its two grid neighbours `lo` < `hi`, in units of the gap (0: a tie). */
function halfGridTie(v: number, lo: number, hi: number): number {
  if (!(hi > lo)) return Infinity;
  return Math.abs((v - lo) / (hi - lo) - 0.5);
}

/** Per element of h: the size of the step a tie there could take (0 where it is not tied). */
function tieSteps(vt: GGMLType, h: Float32Array, m: TieMargins): { step: Float64Array; ties: number } {
  const step = new Float64Array(h.length);
  let ties = 0;
  switch (vt) {
    case GGMLType.F32:
      return { step, ties };
    case GGMLType.F16:
    case GGMLType.BF16: {
      const [to, from] = vt === GGMLType.F16 ? [f32ToF16, f16ToF32] : [f32ToBf16, bf16ToF32];
      for (let i = 0; i < h.length; i++) {
        const v = Math.abs(h[i]!);
        const r = from(to(v));
        // the other neighbour of v on the half grid
        const other = from(r <= v ? to(v) + 1 : Math.max(0, to(v) - 1));
        const [lo, hi] = r <= v ? [r, other] : [other, r];
        if (halfGridTie(v, lo, hi) < m.half) {
          step[i] = hi - lo;
          ties++;
        }
      }
      return { step, ties };
    }
    case GGMLType.Q8_0:
      for (let b = 0; b < h.length; b += 32) {
        let amax = 0;
        for (let i = b; i < b + 32; i++) amax = Math.max(amax, Math.abs(h[i]!));
        if (amax === 0) continue;
        const a = f32(amax / 127);
        const dBits = f32ToF16(a);
        const d = f16ToF32(dBits);
        const id = f32(127 / amax);
        // The block's f16 scale itself at a tie: every element may move by the other f16 neighbour's difference.
        const other = f16ToF32(d <= a ? dBits + 1 : dBits - 1);
        const scaleTie = halfGridTie(a, Math.min(d, other), Math.max(d, other)) < m.half ? Math.abs(other - d) : 0;
        if (scaleTie) ties++;
        for (let i = b; i < b + 32; i++) {
          const t = Math.abs(f32(h[i]! * id));
          const quantTie = Math.abs(t - Math.floor(t) - 0.5) < m.quant;
          if (quantTie) ties++;
          step[i] = (quantTie ? d : 0) + scaleTie * (Math.round(t) + 1);
        }
      }
      return { step, ties };
    case GGMLType.Q8_K:
      for (let b = 0; b < h.length; b += 256) {
        let amax = 0;
        let max = 0;
        for (let i = b; i < b + 256; i++) {
          const a = Math.abs(h[i]!);
          if (a > amax) {
            amax = a;
            max = h[i]!;
          }
        }
        if (amax === 0) continue;
        const iscale = f32(-127 / max);
        const d = Math.abs(f32(1 / iscale));
        for (let i = b; i < b + 256; i++) {
          const t = Math.abs(f32(iscale * h[i]!));
          if (Math.abs(t - Math.floor(t) - 0.5) < m.quant) {
            step[i] = d;
            ties++;
          }
        }
      }
      return { step, ties };
    default:
      throw new RangeError(`no tie analysis for ggml type ${GGMLType[vt] ?? vt}`);
  }
}

/**
 * h of expert `w` on row `x`, as expertFfnAccumulate computes it in llama numerics, so the ties are the reference's:
 * float64 sums of the rounded rows, then in ggml's order (build_moe_ffn) the expert's scales (ggml_mul), its gate and
 * up biases (ggml_add_id), the variant's gated unit (gatedUnit), stored as f32. An honest float32 implementation
 * (ggml's swiglu_oai steps, swigluOaiF32) lands a few ulps away: the margins cover that.
 */
function hiddenOf(w: ExpertMatrices, x: Float32Array): Float32Array {
  const types = w.ggmlTypes!;
  const variant = w.variant ?? SILU_VARIANT;
  const b = variant.biases ? w.biases : undefined;
  if (variant.biases && !b) throw new RangeError('compareLlama: the variant has biases and the expert has none');
  const sc = variant.scales ? w.scales : undefined;
  if (variant.scales && !sc) throw new RangeError('compareLlama: the variant has scales and the expert has none');
  const xg = roundActivations(vecDotType(types.gate), x);
  const xu = roundActivations(vecDotType(types.up), x);
  const h = new Float32Array(w.ff);
  for (let r = 0; r < w.ff; r++) {
    let g = 0;
    let u = 0;
    const o = r * w.nEmbd;
    for (let i = 0; i < w.nEmbd; i++) {
      g += w.gate[o + i]! * xg[i]!;
      u += w.up[o + i]! * xu[i]!;
    }
    if (sc) {
      g *= sc.gate;
      u *= sc.up;
    }
    if (b) {
      g += b.gate[r]!;
      u += b.up[r]!;
    }
    h[r] = gatedUnit(variant, g, u);
  }
  return h;
}

/**
 * `got` against referenceCall(experts, c, 'llama'), allowing one rounding step at each tie of h (see the header).
 * The experts need their ggmlTypes (dequantizeExperts sets them); a variant's experts their biases and scales.
 */
export function compareLlama(
  experts: readonly ExpertMatrices[],
  c: RoutedCall,
  got: ArrayLike<number>,
  margins: TieMargins = DEFAULT_TIE_MARGINS,
): LlamaComparison {
  const reference = referenceCall(experts, c, 'llama');
  if (got.length !== reference.length) throw new RangeError(`compareLlama: ${got.length} values against ${reference.length}`);
  const nEmbd = experts[0]!.nEmbd;
  // ‖column i of down‖ per expert, computed once.
  const colNorms = new Map<ExpertMatrices, Float64Array>();
  const colNorm = (w: ExpertMatrices): Float64Array => {
    let n = colNorms.get(w);
    if (!n) {
      n = new Float64Array(w.ff);
      for (let r = 0; r < w.nEmbd; r++) for (let i = 0; i < w.ff; i++) n[i] = n[i]! + w.down[r * w.ff + i]! ** 2;
      for (let i = 0; i < w.ff; i++) n[i] = Math.sqrt(n[i]!);
      colNorms.set(w, n);
    }
    return n;
  };
  let num = 0;
  let den = 0;
  let beyond = 0;
  let ties = 0;
  let elements = 0;
  for (let t = 0; t < c.nTokens; t++) {
    const x = c.rows.subarray(t * nEmbd, (t + 1) * nEmbd);
    let slack = 0;
    for (let k = 0; k < c.nUsed; k++) {
      const w = experts[c.ids[t * c.nUsed + k]!]!;
      const types = w.ggmlTypes!;
      const s = tieSteps(vecDotType(types.down), hiddenOf(w, x), margins);
      ties += s.ties;
      elements += w.ff;
      const norms = colNorm(w);
      let pairSlack = 0;
      for (let i = 0; i < w.ff; i++) pairSlack += s.step[i]! * norms[i]!;
      // A step of h moves down·h by step · ‖column‖, and the output by that times the down scale and the router weight
      // (the down bias is added after the rounding: no step there).
      const downScale = w.variant?.scales && w.scales ? Math.abs(w.scales.down) : 1;
      slack += Math.abs(c.probs[t * c.nUsed + k]!) * downScale * pairSlack;
    }
    let e2 = 0;
    for (let r = 0; r < nEmbd; r++) {
      const want = reference[t * nEmbd + r]!;
      e2 += (got[t * nEmbd + r]! - want) ** 2;
      den += want ** 2;
    }
    num += e2;
    beyond += Math.max(0, Math.sqrt(e2) - slack) ** 2;
  }
  return { nmse: num / den, beyondTies: beyond / den, ties, elements, reference };
}
