/**
 * How ggml's CPU backend rounds activations before a dot product with quantized weights: the activation row is
 * converted to the weight type's "vec_dot type" (Q8_0 for the 32-element quants, MXFP4 and IQ4_NL included (Q4_1/Q5_1: Q8_1), Q8_K for the
 * K-quants, IQ4_XS, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S and IQ1_M, F16/BF16
 * for half weights) and only then multiplied. A reference that wants to reproduce llama.cpp's numbers (not just the
 * exact math) applies the same rounding; the differences are ~0.4 % per dot for Q8_0, enough to flip near-tied
 * routing decisions in later layers of a random-weight model.
 */
import { GGMLType } from '../../gguf/quant-types.ts';
import { f16ToF32, f32ToF16, bf16ToF32, f32ToBf16 } from '../../gguf/half.ts';

export function vecDotType(weightType: GGMLType): GGMLType {
  switch (weightType) {
    case GGMLType.F32:
      return GGMLType.F32;
    case GGMLType.F16:
      return GGMLType.F16;
    case GGMLType.BF16:
      return GGMLType.BF16;
    case GGMLType.Q4_0:
    case GGMLType.Q4_1:
    case GGMLType.Q5_0:
    case GGMLType.Q5_1:
    case GGMLType.Q8_0:
    case GGMLType.MXFP4:
    case GGMLType.IQ4_NL:
      return GGMLType.Q8_0; // Q4_1/Q5_1 use Q8_1, whose quantized values are the same as Q8_0's
    case GGMLType.Q2_K:
    case GGMLType.Q3_K:
    case GGMLType.Q4_K:
    case GGMLType.Q5_K:
    case GGMLType.Q6_K:
    case GGMLType.IQ4_XS:
    case GGMLType.IQ2_XXS:
    case GGMLType.IQ2_XS:
    case GGMLType.IQ3_XXS:
    case GGMLType.IQ1_S:
    case GGMLType.IQ1_M:
      return GGMLType.Q8_K;
    default:
      throw new RangeError(`no activation rounding known for ggml type ${GGMLType[weightType] ?? weightType}`);
  }
}

/**
 * Weight types whose vec_dot type is really Q8_1 (vecDotType says Q8_0: the same quants, scale and values). ggml
 * multiplies each weight block's min by the activation block's s = f16(d · Σ quants) (d before its f16 rounding), not
 * by the sum of the rounded values as this reference does: ~1e-6 NMSE on a call. The int8 kernels and
 * harness/ggml-exact.ts read s (bit for bit with the coordinator); a reference comparison of them allows for it.
 */
export const Q8_1_WEIGHT_TYPES: ReadonlySet<GGMLType> = new Set([GGMLType.Q4_1, GGMLType.Q5_1]);

const f32 = Math.fround;

/** Round half to even, as `_mm256_round_ps(…, _MM_ROUND_NEAREST)` and ggml's nearest_int do. */
function roundEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v - Math.trunc(v)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** The values ggml's CPU backend multiplies with after converting `x` to `vt` (a new array). */
export function roundActivations(vt: GGMLType, x: Float32Array): Float32Array {
  const out = new Float32Array(x.length);
  switch (vt) {
    case GGMLType.F32:
      out.set(x);
      return out;
    case GGMLType.F16:
      for (let i = 0; i < x.length; i++) out[i] = f16ToF32(f32ToF16(x[i] as number));
      return out;
    case GGMLType.BF16:
      for (let i = 0; i < x.length; i++) out[i] = bf16ToF32(f32ToBf16(x[i] as number));
      return out;
    case GGMLType.Q8_0:
      // x86 quantize_row_q8_0: id = 127/amax in float, round half to even, scale stored as f16
      for (let b = 0; b < x.length; b += 32) {
        let amax = 0;
        for (let i = b; i < b + 32; i++) amax = Math.max(amax, Math.abs(x[i] as number));
        const d = f16ToF32(f32ToF16(f32(amax / 127)));
        const id = amax !== 0 ? f32(127 / amax) : 0;
        for (let i = b; i < b + 32; i++) out[i] = f32(d * roundEven(f32((x[i] as number) * id)));
      }
      return out;
    case GGMLType.Q8_K:
      // quantize_row_q8_K_ref: scale from the signed value of largest magnitude, float32 scale, ≤ 127
      for (let b = 0; b < x.length; b += 256) {
        let amax = 0;
        let max = 0;
        for (let i = b; i < b + 256; i++) {
          const a = Math.abs(x[i] as number);
          if (a > amax) {
            amax = a;
            max = x[i] as number;
          }
        }
        if (amax === 0) continue;
        const iscale = f32(-127 / max);
        const d = f32(1 / iscale);
        for (let i = b; i < b + 256; i++) out[i] = f32(d * Math.min(127, roundEven(f32(iscale * (x[i] as number)))));
      }
      return out;
    default:
      throw new RangeError(`cannot round activations to ${GGMLType[vt] ?? vt}`);
  }
}
