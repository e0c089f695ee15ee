/**
 * The coordinator's CPU arithmetic for routed experts, bit for bit: what llama.cpp's stock graph computes for one
 * MoE layer (mul_mat_id with ggml's vec_dot per weight row, ggml_vec_swiglu_f32, the multiplication by the router
 * weights and the adds of the experts' views), in the order and rounding of the build coordinator/build.sh makes
 * (x86-64 with AVX2/FMA/F16C, no AVX-512): activations converted to the weight's vec_dot type, integer block dot
 * products, their per-lane float fused multiply-adds, the horizontal sums, ggml_v_expf's polynomial.
 *
 * Why: the CPU reference (shaders/reference/) rounds activations as llama.cpp does but sums in float64, so it differs
 * from the coordinator by float-summation error (1 ulp here and there). In a model whose expert branch is loud, such a
 * 1-ulp difference right before an 8-bit activation rounding sometimes flips that rounding, and the flip reaches the
 * logits at 1e-5..1e-4 (1 − cos) — as much as a worker whose sums are 1 % off. A dispatcher that computes exactly as
 * the coordinator does has no such noise, so the tests can hold it to "identical logits" and catch a 1 % error by
 * orders of magnitude (test/integration/expert-dispatch.test.ts measures both).
 *
 * Types (GGML_EXACT_TYPES): F32, F16, Q8_0, Q4_0, Q4_K (the dispatch grid's; checked against the coordinator there),
 * Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, Q6_K, MXFP4, IQ4_NL, IQ4_XS, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S and IQ1_M (checked against the coordinator's own local computation, linkcpp-expert-ref, in
 * numerics-vs-coordinator.test.ts).
 * Row lengths must be multiples of 32 (F32/F16) or of the type's block.
 *
 * Besides the dispatcher backend (GgmlExactBackend, over a GGUF file), `ggmlHidden`, `ggmlExpertOut` and
 * `ggmlLayerSums` compute from experts in memory (the expert-slice layout), for the WGSL kernels' bit-exactness
 * tests (test/gpu/ggml-exact.test.ts).
 */
import { openFileSource } from '../gguf/node-io.ts';
import { readGGUF } from '../gguf/reader.ts';
import type { GGUFFile, GGUFTensorInfo } from '../gguf/types.ts';
import { GGMLType, rowByteSize } from '../gguf/quant-types.ts';
import { expertTensorName, layerExpertTensors, readExpertMatrix, type ExpertMatrix } from '../gguf/expert-slice.ts';
import { f16ToF32, f32ToF16 } from '../gguf/half.ts';
import { e8m0ToF32Half, KVALUES_IQ4NL, KVALUES_MXFP4 } from '../gguf/dequantize.ts';
import { IQ1S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS } from '../gguf/iq-grids.ts';
import { layerBiasTensors, layerVariant, modelScaleTensors, readBiasRange, readScaleRange } from '../gguf/expert-variant.ts';
import { SILU_VARIANT, type ExpertVariant } from '../protocol/variant.ts';
import { siluLimitF32, swigluClampF32, swigluOaiF32 } from '../shaders/reference/expert-ffn.ts';
import { ggmlGeglu } from '../shaders/reference/ggml-gelu.ts';
import { f32Bits as f32BitsOf, fma32, fromF32Bits } from '../shaders/reference/ggml-float.ts';
import type { ExpertBackend } from './expert-backend.ts';

const f32 = Math.fround;
const f32Bits = f32BitsOf;
const fromBits = fromF32Bits;

export { fma32, hsum8, quantizeQ8_K };

/** hsum_float_8: ((x0+x4) + (x2+x6)) + ((x1+x5) + (x3+x7)), each add in float32. */
function hsum8(x: Float64Array): number {
  const r0 = f32((x[0] as number) + (x[4] as number));
  const r1 = f32((x[1] as number) + (x[5] as number));
  const r2 = f32((x[2] as number) + (x[6] as number));
  const r3 = f32((x[3] as number) + (x[7] as number));
  return f32(f32(r0 + r2) + f32(r1 + r3));
}

/** GGML_F32x8_REDUCE over the 4 accumulators of ggml_vec_dot_f32/f16: pairwise adds, then hadd twice. */
function reduce4x8(acc: Float64Array[]): number {
  const a = acc as [Float64Array, Float64Array, Float64Array, Float64Array];
  const v = new Float64Array(8);
  for (let l = 0; l < 8; l++) {
    const s02 = f32((a[0][l] as number) + (a[2][l] as number));
    const s13 = f32((a[1][l] as number) + (a[3][l] as number));
    v[l] = f32(s02 + s13);
  }
  const t0 = f32((v[0] as number) + (v[4] as number));
  const t1 = f32((v[1] as number) + (v[5] as number));
  const t2 = f32((v[2] as number) + (v[6] as number));
  const t3 = f32((v[3] as number) + (v[7] as number));
  return f32(f32(t0 + t1) + f32(t2 + t3));
}

/** The weight types whose vec_dot this module emulates bit for bit. */
export const GGML_EXACT_TYPES: ReadonlySet<GGMLType> = new Set([
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.Q2_K,
  GGMLType.Q3_K,
  GGMLType.Q4_K,
  GGMLType.Q5_K,
  GGMLType.Q6_K,
  GGMLType.MXFP4,
  GGMLType.IQ4_NL,
  GGMLType.IQ4_XS,
  GGMLType.IQ2_XXS,
  GGMLType.IQ2_XS,
  GGMLType.IQ3_XXS,
  GGMLType.IQ1_S,
  GGMLType.IQ1_M,
]);

// ---------------------------------------------------------------------------------------------
// Activations in the vec_dot type.

interface QuantRow {
  /** Per-block scale as the dot product reads it (f16-decoded for Q8_0, float32 for Q8_K). */
  d: Float64Array;
  qs: Int8Array;
  /** Q8_K: sums of 16 consecutive qs. */
  bsums?: Int32Array;
  /** Q8_1: per block s = f16(d · Σ qs) (d before its f16 rounding), f16-decoded. */
  s?: Float64Array;
}

function roundEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v - Math.trunc(v)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** quantize_row_q8_0 (x86 AVX2): scale amax/127 stored as f16, values × (127/amax) rounded half to even. */
function quantizeQ8_0(x: Float32Array): QuantRow {
  const nb = x.length / 32;
  const d = new Float64Array(nb);
  const qs = new Int8Array(x.length);
  for (let b = 0; b < nb; b++) {
    let amax = 0;
    for (let i = 32 * b; i < 32 * b + 32; i++) amax = Math.max(amax, Math.abs(x[i] as number));
    d[b] = f16ToF32(f32ToF16(f32(amax / 127)));
    const id = amax !== 0 ? f32(127 / amax) : 0;
    for (let i = 32 * b; i < 32 * b + 32; i++) qs[i] = roundEven(f32((x[i] as number) * id));
  }
  return { d, qs };
}

/**
 * quantize_row_q8_1 (x86 AVX2): Q8_0's quants and f16 d, and s = f16(d · Σ qs) with d = amax/127 as a float32 (not
 * the f16 one); Q4_1 and Q5_1 read it for their mins.
 */
function quantizeQ8_1(x: Float32Array): QuantRow {
  const row = quantizeQ8_0(x);
  const s = new Float64Array(x.length / 32);
  for (let b = 0; b < s.length; b++) {
    let amax = 0;
    let sum = 0;
    for (let i = 32 * b; i < 32 * b + 32; i++) {
      amax = Math.max(amax, Math.abs(x[i] as number));
      sum += row.qs[i] as number;
    }
    s[b] = f16ToF32(f32ToF16(f32(f32(amax / 127) * sum)));
  }
  return { ...row, s };
}

/** quantize_row_q8_K_ref: iscale = −127/max (signed), float32 scale 1/iscale, values ≤ 127, bsums per 16. */
function quantizeQ8_K(x: Float32Array): QuantRow {
  const nb = x.length / 256;
  const d = new Float64Array(nb);
  const qs = new Int8Array(x.length);
  const bsums = new Int32Array(x.length / 16);
  for (let b = 0; b < nb; b++) {
    let amax = 0;
    let max = 0;
    for (let i = 256 * b; i < 256 * b + 256; i++) {
      const a = Math.abs(x[i] as number);
      if (a > amax) {
        amax = a;
        max = x[i] as number;
      }
    }
    if (amax === 0) continue;
    const iscale = f32(-127 / max);
    for (let i = 256 * b; i < 256 * b + 256; i++) qs[i] = Math.min(127, roundEven(f32(iscale * (x[i] as number))));
    for (let j = 0; j < 16; j++) {
      let s = 0;
      for (let i = 0; i < 16; i++) s += qs[256 * b + 16 * j + i] as number;
      bsums[16 * b + j] = s;
    }
    d[b] = f32(1 / iscale);
  }
  return { d, qs, bsums };
}

type Activation = { kind: 'f32'; x: Float32Array } | { kind: 'f16'; x: Float32Array } | { kind: 'q'; q: QuantRow };

/** The activation row converted to the weight type's vec_dot type (ggml's from_float). */
function toVecDot(type: GGMLType, x: Float32Array): Activation {
  switch (type) {
    case GGMLType.F32:
      return { kind: 'f32', x };
    case GGMLType.F16: {
      const h = new Float32Array(x.length);
      for (let i = 0; i < x.length; i++) h[i] = f16ToF32(f32ToF16(x[i] as number));
      return { kind: 'f16', x: h };
    }
    case GGMLType.Q8_0:
    case GGMLType.Q4_0:
    case GGMLType.Q5_0:
    case GGMLType.MXFP4:
    case GGMLType.IQ4_NL:
      return { kind: 'q', q: quantizeQ8_0(x) };
    case GGMLType.Q4_1:
    case GGMLType.Q5_1:
      return { kind: 'q', q: quantizeQ8_1(x) };
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
      return { kind: 'q', q: quantizeQ8_K(x) };
    default:
      throw new RangeError(`ggml-exact: no bit-exact dot product for ${GGMLType[type] ?? type}`);
  }
}

// ---------------------------------------------------------------------------------------------
// vec_dot per weight type (AVX2 paths of ggml-cpu/vec.cpp and ggml-cpu/arch/x86/quants.c).

const FLOAT_ACC = [new Float64Array(8), new Float64Array(8), new Float64Array(8), new Float64Array(8)];
const LANES = new Float64Array(8);
const LANES2 = new Float64Array(8);
const LANES_M = new Float64Array(4);
const SC = new Int32Array(8);
const MN = new Int32Array(8);
const WQ = new Int32Array(32);
const SC16 = new Int32Array(16);

/** ggml_vec_dot_f32 / ggml_vec_dot_f16: 4 accumulators × 8 lanes of FMAs over steps of 32, then GGML_F32x8_REDUCE. */
function dotFloat(w: Float32Array, wOff: number, x: Float32Array, n: number): number {
  if (n % 32 !== 0) throw new RangeError(`ggml-exact: float rows of ${n} (not a multiple of 32) are not emulated`);
  const acc = FLOAT_ACC;
  for (const a of acc) a.fill(0);
  for (let i = 0; i < n; i += 32) {
    for (let j = 0; j < 4; j++) {
      const a = acc[j] as Float64Array;
      for (let l = 0; l < 8; l++) a[l] = fma32(w[wOff + i + 8 * j + l] as number, x[i + 8 * j + l] as number, a[l] as number);
    }
  }
  return reduce4x8(acc);
}

/**
 * ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0 / q5_0_q8_0: per block 8 integer lanes of 4 products, acc = fma(dx·dy, lane,
 * acc), hsum. Q5_0's quants are (nibble | 5th bit from qh) − 16 (bytes_from_bits_32: bit j of qh for element j).
 */
function dotQ32(wType: GGMLType.Q8_0 | GGMLType.Q4_0 | GGMLType.Q5_0, w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  const view = new DataView(w.buffer, w.byteOffset, w.byteLength);
  const blockBytes = wType === GGMLType.Q8_0 ? 34 : wType === GGMLType.Q5_0 ? 22 : 18;
  const wq = WQ;
  for (let b = 0; b < n / 32; b++) {
    const o = wOff + b * blockBytes;
    const dw = f16ToF32(view.getUint16(o, true));
    if (wType === GGMLType.Q8_0) {
      for (let i = 0; i < 32; i++) wq[i] = view.getInt8(o + 2 + i);
    } else if (wType === GGMLType.Q5_0) {
      const qh = view.getUint32(o + 2, true);
      for (let i = 0; i < 16; i++) {
        const byte = w[o + 6 + i] as number;
        wq[i] = ((byte & 0xf) | (((qh >>> i) & 1) << 4)) - 16;
        wq[i + 16] = ((byte >> 4) | (((qh >>> (i + 16)) & 1) << 4)) - 16;
      }
    } else {
      for (let i = 0; i < 16; i++) {
        const byte = w[o + 2 + i] as number;
        wq[i] = (byte & 0xf) - 8;
        wq[i + 16] = (byte >> 4) - 8;
      }
    }
    const d = f32(dw * (y.d[b] as number));
    for (let l = 0; l < 8; l++) {
      let s = 0;
      for (let i = 4 * l; i < 4 * l + 4; i++) s += (wq[i] as number) * (y.qs[32 * b + i] as number);
      acc[l] = fma32(d, s, acc[l] as number);
    }
  }
  return hsum8(acc);
}

/**
 * ggml_vec_dot_q4_1_q8_1 / ggml_vec_dot_q5_1_q8_1 (AVX2): unsigned quants (Q4_1's nibbles; Q5_1's with the 5th bit
 * from qh), 8 integer lanes of 4 products per block, acc = fma(x.d·y.d, lane, acc); the mins one scalar, summs =
 * fma(x.m, y.s, summs) (GCC contracts `summs += m * s`: vfmadd231ss in the build); hsum8(acc) + summs.
 */
function dotQ1(type: GGMLType.Q4_1 | GGMLType.Q5_1, w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  let summs = 0;
  const view = new DataView(w.buffer, w.byteOffset, w.byteLength);
  const q5 = type === GGMLType.Q5_1;
  const blockBytes = q5 ? 24 : 20;
  const ys = y.s as Float64Array;
  const wq = WQ;
  for (let b = 0; b < n / 32; b++) {
    const o = wOff + b * blockBytes;
    const qh = q5 ? view.getUint32(o + 4, true) : 0;
    const qs = o + (q5 ? 8 : 4);
    for (let i = 0; i < 16; i++) {
      const byte = w[qs + i] as number;
      wq[i] = (byte & 0xf) | (((qh >>> i) & 1) << 4);
      wq[i + 16] = (byte >> 4) | (((qh >>> (i + 16)) & 1) << 4);
    }
    summs = fma32(f16ToF32(view.getUint16(o + 2, true)), ys[b] as number, summs);
    const d = f32(f16ToF32(view.getUint16(o, true)) * (y.d[b] as number));
    for (let l = 0; l < 8; l++) {
      let s = 0;
      for (let i = 4 * l; i < 4 * l + 4; i++) s += (wq[i] as number) * (y.qs[32 * b + i] as number);
      acc[l] = fma32(d, s, acc[l] as number);
    }
  }
  return f32(hsum8(acc) + summs);
}

/**
 * ggml_vec_dot_mxfp4_q8_0 / ggml_vec_dot_iq4_nl_q8_0 (AVX2): the 16 nibbles looked up in kvalues_fp4 / kvalues_iq4nl
 * (low nibbles = elements 0..15, high = 16..31), 8 integer lanes of 4 products per block; blocks in pairs, the even
 * one into acc1, the odd one into acc2, acc = fma(y.d · x's scale (2^(e−128); IQ4_NL's f16 d), lane, acc);
 * hsum8(acc1 + acc2); an odd last block in scalar: sumf = fma(d, Σ, sumf) (GCC contracts `sumf += d * (sumi1 +
 * sumi2)`: vfmadd231ss in the build).
 */
function dotPaired(type: GGMLType.MXFP4 | GGMLType.IQ4_NL, w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc1 = LANES.fill(0);
  const acc2 = LANES2.fill(0);
  const wq = WQ;
  const nb = n / 32;
  const mx = type === GGMLType.MXFP4;
  const kv = mx ? KVALUES_MXFP4 : KVALUES_IQ4NL;
  const blockBytes = mx ? 17 : 18;
  const qs = mx ? 1 : 2;
  const blockSum = (b: number): number => {
    const o = wOff + b * blockBytes;
    for (let i = 0; i < 16; i++) {
      const byte = w[o + qs + i] as number;
      wq[i] = kv[byte & 0xf] as number;
      wq[i + 16] = kv[byte >> 4] as number;
    }
    const xd = mx ? e8m0ToF32Half(w[o] as number) : f16ToF32((w[o] as number) | ((w[o + 1] as number) << 8));
    return f32((y.d[b] as number) * xd);
  };
  let b = 0;
  for (; b + 1 < nb; b += 2) {
    for (const [k, acc] of [
      [0, acc1],
      [1, acc2],
    ] as const) {
      const d = blockSum(b + k);
      for (let l = 0; l < 8; l++) {
        let s = 0;
        for (let i = 4 * l; i < 4 * l + 4; i++) s += (wq[i] as number) * (y.qs[32 * (b + k) + i] as number);
        acc[l] = fma32(d, s, acc[l] as number);
      }
    }
  }
  for (let l = 0; l < 8; l++) acc1[l] = f32((acc1[l] as number) + (acc2[l] as number));
  let sumf = hsum8(acc1);
  if (b < nb) {
    const d = blockSum(b);
    let s = 0;
    for (let i = 0; i < 32; i++) s += (wq[i] as number) * (y.qs[32 * b + i] as number);
    sumf = fma32(d, s, sumf);
  }
  return sumf;
}

/** Scale s (0..15) of a Q3_K super-block, 6 bits less 32 (low 4 bits in scales[s % 8], high 2 in scales[8 + s % 4]). */
function scaleQ3K(q: Uint8Array, o: number, s: number): number {
  const low = s < 8 ? (q[o + s] as number) & 15 : (q[o + s - 8] as number) >> 4;
  const high = ((q[o + 8 + (s & 3)] as number) >> (2 * (s >> 2))) & 3;
  return (low | (high << 4)) - 32;
}

/**
 * ggml_vec_dot_q2_K_q8_K / ggml_vec_dot_q3_K_q8_K (AVX2): for each 128-element half j and 32-element run k of it,
 * lane l gets scale[8j + 2k + (l ≥ 4)] · Σ(quants of bytes 4l..4l+3 of the run × their activations) (Q2_K's quants
 * 0..3, Q3_K's low 2 bits less 4 where the hmask bit is clear). Q2_K's mins share the one accumulator and come first:
 * lane l = min[2l]·bsum[2l] + min[2l+1]·bsum[2l+1], acc = fma(−y.d·x.dmin, lane, acc); then acc = fma(y.d·x.d,
 * f32(lane), acc) per block; hsum8.
 */
function dotQ23K(type: GGMLType.Q2_K | GGMLType.Q3_K, w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  const view = new DataView(w.buffer, w.byteOffset, w.byteLength);
  const bsums = y.bsums as Int32Array;
  const q2 = type === GGMLType.Q2_K;
  const sc = SC16;
  for (let b = 0; b < n / 256; b++) {
    const yd = y.d[b] as number;
    let qs: number;
    let hm = 0;
    let d: number;
    if (q2) {
      const o = wOff + b * 84;
      const dmin = f32(-yd * f16ToF32(view.getUint16(o + 82, true)));
      d = f32(yd * f16ToF32(view.getUint16(o + 80, true)));
      for (let s = 0; s < 16; s++) sc[s] = (w[o + s] as number) & 15;
      for (let l = 0; l < 8; l++) {
        const prod =
          ((w[o + 2 * l] as number) >> 4) * (bsums[16 * b + 2 * l] as number) +
          ((w[o + 2 * l + 1] as number) >> 4) * (bsums[16 * b + 2 * l + 1] as number);
        acc[l] = fma32(dmin, prod, acc[l] as number);
      }
      qs = o + 16;
    } else {
      const o = wOff + b * 110;
      d = f32(yd * f16ToF32(view.getUint16(o + 108, true)));
      for (let s = 0; s < 16; s++) sc[s] = scaleQ3K(w, o + 96, s);
      hm = o;
      qs = o + 32;
    }
    for (let l = 0; l < 8; l++) {
      let lane = 0;
      for (let j = 0; j < 2; j++) {
        for (let k = 0; k < 4; k++) {
          let sum = 0;
          for (let t = 4 * l; t < 4 * l + 4; t++) {
            let q = ((w[qs + 32 * j + t] as number) >> (2 * k)) & 3;
            if (!q2 && (((w[hm + t] as number) >> (4 * j + k)) & 1) === 0) q -= 4;
            sum += q * (y.qs[256 * b + 128 * j + 32 * k + t] as number);
          }
          lane += (sc[8 * j + 2 * k + (l >> 2)] as number) * sum;
        }
      }
      acc[l] = fma32(d, lane, acc[l] as number);
    }
  }
  return hsum8(acc);
}

/** The 6-bit scale and min of sub-block j of a Q4_K super-block (get_scale_min_k4). */
function scaleMinK4(j: number, q: Uint8Array, o: number, sc: Int32Array, mn: Int32Array): void {
  if (j < 4) {
    sc[j] = (q[o + j] as number) & 63;
    mn[j] = (q[o + j + 4] as number) & 63;
    return;
  }
  const a = q[o + j + 4] as number;
  sc[j] = (a & 0xf) | (((q[o + j - 4] as number) >> 6) << 4);
  mn[j] = (a >> 4) | (((q[o + j] as number) >> 6) << 4);
}

/**
 * ggml_vec_dot_q4_K_q8_K: integer lane m (of 8) sums scale·(4 products at bytes 4m..4m+3) over the 8 sub-blocks;
 * acc = fma(y.d·x.d, lane, acc); the mins side has 4 lanes (min·bsum pairs) with fma(−y.d·x.dmin, lane, acc_m);
 * result hsum8(acc) + ((m0+m2) + (m1+m3)).
 */
function dotQ4K(w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  const accM = LANES_M.fill(0);
  const view = new DataView(w.buffer, w.byteOffset, w.byteLength);
  const bsums = y.bsums as Int32Array;
  const sc = SC;
  const mn = MN;
  for (let b = 0; b < n / 256; b++) {
    const o = wOff + b * 144;
    const yd = y.d[b] as number;
    const d = f32(yd * f16ToF32(view.getUint16(o, true)));
    const dmin = f32(-yd * f16ToF32(view.getUint16(o + 2, true)));
    for (let j = 0; j < 8; j++) scaleMinK4(j, w, o + 4, sc, mn);
    for (let l = 0; l < 4; l++) {
      const s0 = (bsums[16 * b + 4 * l] as number) + (bsums[16 * b + 4 * l + 1] as number);
      const s1 = (bsums[16 * b + 4 * l + 2] as number) + (bsums[16 * b + 4 * l + 3] as number);
      const prod = (mn[2 * l] as number) * s0 + (mn[2 * l + 1] as number) * s1;
      accM[l] = fma32(dmin, prod, accM[l] as number);
    }
    const qs = o + 16;
    for (let l = 0; l < 8; l++) {
      let lane = 0;
      for (let j = 0; j < 4; j++) {
        let lo = 0;
        let hi = 0;
        for (let t = 4 * l; t < 4 * l + 4; t++) {
          const byte = w[qs + 32 * j + t] as number;
          lo += (byte & 0xf) * (y.qs[256 * b + 64 * j + t] as number);
          hi += (byte >> 4) * (y.qs[256 * b + 64 * j + 32 + t] as number);
        }
        lane += (sc[2 * j] as number) * lo + (sc[2 * j + 1] as number) * hi;
      }
      acc[l] = fma32(d, lane, acc[l] as number);
    }
  }
  const m = f32(f32((accM[0] as number) + (accM[2] as number)) + f32((accM[1] as number) + (accM[3] as number)));
  return f32(hsum8(acc) + m);
}

/**
 * ggml_vec_dot_q5_K_q8_K: the lanes as in Q4_K with each quant's 5th bit from qh (bit 2j of qh[t] for the low nibble
 * of qs[32j + t], bit 2j + 1 for the high one); the mins are one scalar per block, Σ_s min[s]·(bsum pair of s),
 * summs = fma(dmin, that, summs) (GCC contracts `summs += dmin * …`: vfmadd231ss in the build); hsum8(acc) + summs.
 */
function dotQ5K(w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  let summs = 0;
  const view = new DataView(w.buffer, w.byteOffset, w.byteLength);
  const bsums = y.bsums as Int32Array;
  const sc = SC;
  const mn = MN;
  for (let b = 0; b < n / 256; b++) {
    const o = wOff + b * 176;
    const yd = y.d[b] as number;
    const d = f32(yd * f16ToF32(view.getUint16(o, true)));
    const dmin = f32(-yd * f16ToF32(view.getUint16(o + 2, true)));
    for (let j = 0; j < 8; j++) scaleMinK4(j, w, o + 4, sc, mn);
    let mins = 0;
    for (let k = 0; k < 8; k++) mins += (mn[k] as number) * ((bsums[16 * b + 2 * k] as number) + (bsums[16 * b + 2 * k + 1] as number));
    summs = fma32(dmin, mins, summs);
    for (let l = 0; l < 8; l++) {
      let lane = 0;
      for (let j = 0; j < 4; j++) {
        let lo = 0;
        let hi = 0;
        for (let t = 4 * l; t < 4 * l + 4; t++) {
          const byte = w[o + 48 + 32 * j + t] as number;
          const hb = w[o + 16 + t] as number;
          lo += ((byte & 0xf) | (((hb >> (2 * j)) & 1) << 4)) * (y.qs[256 * b + 64 * j + t] as number);
          hi += ((byte >> 4) | (((hb >> (2 * j + 1)) & 1) << 4)) * (y.qs[256 * b + 64 * j + 32 + t] as number);
        }
        lane += (sc[2 * j] as number) * lo + (sc[2 * j + 1] as number) * hi;
      }
      acc[l] = fma32(d, lane, acc[l] as number);
    }
  }
  return f32(hsum8(acc) + summs);
}

/**
 * ggml_vec_dot_q6_K_q8_K: unsigned quants (0..63); for each half h and 32-element run k, lane l gets
 * scale[8h + 2k + (l ≥ 4)] · Σ(bytes 4l..4l+3 of the run × activations), then loses 32·(scale[2l]·bsum[2l] +
 * scale[2l+1]·bsum[2l+1]) (q8sclsub); acc = fma(y.d·x.d, f32(lane), acc); hsum8.
 */
function dotQ6K(w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  const view = new DataView(w.buffer, w.byteOffset, w.byteLength);
  const bsums = y.bsums as Int32Array;
  for (let b = 0; b < n / 256; b++) {
    const o = wOff + b * 210;
    const d = f32((y.d[b] as number) * f16ToF32(view.getUint16(o + 208, true)));
    const sc = o + 192;
    for (let l = 0; l < 8; l++) {
      let lane = 0;
      for (let h = 0; h < 2; h++) {
        for (let k = 0; k < 4; k++) {
          let s = 0;
          for (let t = 4 * l; t < 4 * l + 4; t++) {
            const ql = w[o + 64 * h + 32 * (k & 1) + t] as number;
            const qh = w[o + 128 + 32 * h + t] as number;
            const q = ((ql >> (4 * (k >> 1))) & 0xf) | (((qh >> (2 * k)) & 3) << 4);
            s += q * (y.qs[256 * b + 128 * h + 32 * k + t] as number);
          }
          lane += view.getInt8(sc + 8 * h + 2 * k + (l >= 4 ? 1 : 0)) * s;
        }
      }
      lane -=
        32 *
        (view.getInt8(sc + 2 * l) * (bsums[16 * b + 2 * l] as number) +
          view.getInt8(sc + 2 * l + 1) * (bsums[16 * b + 2 * l + 1] as number));
      acc[l] = fma32(d, f32(lane), acc[l] as number); // _mm256_cvtepi32_ps rounds lanes past 2^24
    }
  }
  return hsum8(acc);
}

/**
 * ggml_vec_dot_iq4_xs_q8_K (AVX2): per 32-element sub-block ib, its nibbles looked up in kvalues_iq4nl (low nibbles =
 * elements 0..15, high = 16..31), lane l = Σ_ib (ls[ib] − 32) · Σ(products of elements 4l..4l+3) in int32 (maddubs,
 * then madd with the scale); acc = fma(f32(f16 d · y.d), f32(lane), acc) per super-block (_mm256_cvtepi32_ps rounds
 * lanes past 2^24); hsum8.
 */
function dotIQ4XS(w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  for (let b = 0; b < n / 256; b++) {
    const o = wOff + b * 136;
    const d = f32(f16ToF32((w[o] as number) | ((w[o + 1] as number) << 8)) * (y.d[b] as number));
    const sh = (w[o + 2] as number) | ((w[o + 3] as number) << 8);
    for (let l = 0; l < 8; l++) {
      let lane = 0;
      for (let ib = 0; ib < 8; ib++) {
        const ls = ((((w[o + 4 + (ib >> 1)] as number) >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
        let s = 0;
        for (let t = 4 * l; t < 4 * l + 4; t++) {
          const byte = w[o + 8 + 16 * ib + (t & 15)] as number;
          s += (KVALUES_IQ4NL[t < 16 ? byte & 15 : byte >> 4] as number) * (y.qs[256 * b + 32 * ib + t] as number);
        }
        lane += ls * s;
      }
      acc[l] = fma32(d, f32(lane), acc[l] as number);
    }
  }
  return hsum8(acc);
}

/**
 * ggml_vec_dot_iq2_xxs_q8_K (AVX2): per 32-element sub-block its four groups of 8 from iq2xxs_grid (magnitudes 8, 25,
 * 43: unsigned bytes for maddubs), the activation's sign flipped by keven_signs_q2xs (_mm256_sign_epi8), lane l =
 * Σ_ib (2·s + 1) · Σ(products of elements 4l..4l+3) in int32, s the sub-block's top 4 bits; acc =
 * fma(f32(f16 d · y.d), f32(lane), acc) per super-block; 0.125 · hsum8 (a power of two: exact).
 */
function dotIQ2XXS(w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  const wq = WQ;
  for (let b = 0; b < n / 256; b++) {
    const o = wOff + b * 66;
    const d = f32(f16ToF32((w[o] as number) | ((w[o + 1] as number) << 8)) * (y.d[b] as number));
    const lanes = SC.fill(0);
    for (let ib = 0; ib < 8; ib++) {
      const q = o + 2 + 8 * ib;
      const aux1 = ((w[q + 4] as number) | ((w[q + 5] as number) << 8) | ((w[q + 6] as number) << 16) | ((w[q + 7] as number) << 24)) >>> 0;
      for (let g = 0; g < 4; g++) {
        const grid = 8 * (w[q + g] as number);
        const signs = KSIGNS_IQ2XS[(aux1 >>> (7 * g)) & 127] as number;
        for (let j = 0; j < 8; j++) {
          const m = IQ2XXS_GRID[grid + j] as number;
          wq[8 * g + j] = signs & (1 << j) ? -m : m;
        }
      }
      const ls = 2 * (aux1 >>> 28) + 1;
      for (let l = 0; l < 8; l++) {
        let s = 0;
        for (let t = 4 * l; t < 4 * l + 4; t++) s += (wq[t] as number) * (y.qs[256 * b + 32 * ib + t] as number);
        lanes[l] = (lanes[l] as number) + ls * s;
      }
    }
    for (let l = 0; l < 8; l++) acc[l] = fma32(d, f32(lanes[l] as number), acc[l] as number);
  }
  return f32(0.125 * hsum8(acc));
}

/**
 * ggml_vec_dot_iq2_xs_q8_K (AVX2): as IQ2_XXS's, but each group of 8 has its own u16 (iq2xs_grid index in the low 9
 * bits, ksigns index in the top 7) and each half of a sub-block its own 4-bit scale s (the low nibble of scales[ib] for
 * elements 0..15: lanes 0..3), times 2s + 1 (get_scale_shuffle); the final factor 0.125.
 */
function dotIQ2XS(w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  const wq = WQ;
  for (let b = 0; b < n / 256; b++) {
    const o = wOff + b * 74;
    const d = f32(f16ToF32((w[o] as number) | ((w[o + 1] as number) << 8)) * (y.d[b] as number));
    const lanes = SC.fill(0);
    for (let ib = 0; ib < 8; ib++) {
      for (let g = 0; g < 4; g++) {
        const q = o + 2 + 2 * (4 * ib + g);
        const qs = (w[q] as number) | ((w[q + 1] as number) << 8);
        const grid = 8 * (qs & 511);
        const signs = KSIGNS_IQ2XS[qs >> 9] as number;
        for (let j = 0; j < 8; j++) {
          const m = IQ2XS_GRID[grid + j] as number;
          wq[8 * g + j] = signs & (1 << j) ? -m : m;
        }
      }
      const sc = w[o + 66 + ib] as number;
      for (let l = 0; l < 8; l++) {
        const ls = 2 * (l < 4 ? sc & 15 : sc >> 4) + 1;
        let s = 0;
        for (let t = 4 * l; t < 4 * l + 4; t++) s += (wq[t] as number) * (y.qs[256 * b + 32 * ib + t] as number);
        lanes[l] = (lanes[l] as number) + ls * s;
      }
    }
    for (let l = 0; l < 8; l++) acc[l] = fma32(d, f32(lanes[l] as number), acc[l] as number);
  }
  return f32(0.125 * hsum8(acc));
}

/**
 * ggml_vec_dot_iq3_xxs_q8_K (AVX2): as IQ2_XXS's, but lane l of sub-block ib is the 4 magnitudes of iq3xxs_grid point
 * qs[8ib + l] (elements 4l..4l+3) with the signs of group l >> 1 from the sub-block's u32 (after the 64 index bytes),
 * times 2s + 1; the final factor 0.25.
 */
function dotIQ3XXS(w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  for (let b = 0; b < n / 256; b++) {
    const o = wOff + b * 98;
    const d = f32(f16ToF32((w[o] as number) | ((w[o + 1] as number) << 8)) * (y.d[b] as number));
    const lanes = SC.fill(0);
    for (let ib = 0; ib < 8; ib++) {
      const a = o + 66 + 4 * ib;
      const aux = ((w[a] as number) | ((w[a + 1] as number) << 8) | ((w[a + 2] as number) << 16) | ((w[a + 3] as number) << 24)) >>> 0;
      const ls = 2 * (aux >>> 28) + 1;
      for (let l = 0; l < 8; l++) {
        const grid = 4 * (w[o + 2 + 8 * ib + l] as number);
        const signs = KSIGNS_IQ2XS[(aux >>> (7 * (l >> 1))) & 127] as number;
        let s = 0;
        for (let k = 0; k < 4; k++) {
          const j = 4 * (l & 1) + k;
          const m = IQ3XXS_GRID[grid + k] as number;
          s += (signs & (1 << j) ? -m : m) * (y.qs[256 * b + 32 * ib + 4 * l + k] as number);
        }
        lanes[l] = (lanes[l] as number) + ls * s;
      }
    }
    for (let l = 0; l < 8; l++) acc[l] = fma32(d, f32(lanes[l] as number), acc[l] as number);
  }
  return f32(0.25 * hsum8(acc));
}

/**
 * ggml_vec_dot_iq1_s_q8_K (AVX2): lane l of sub-block ib = (2s + 1) · Σ iq1s_grid value · q over elements 4l..4l+3
 * (mul_add_epi8), summed over the 8 sub-blocks in int32; the deltas apart in one int, Σ_ib ±(2s + 1) · (the sub-block's
 * two bsums). Per super-block acc = fma(f32(y.d · f16 d), f32(lane), acc) and accum1 = fma(d, f32(that int), accum1)
 * (GCC contracts `accum1 += d * sumi1`); hsum8(acc) + 0.125 · accum1.
 */
function dotIQ1S(w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  const bsums = y.bsums as Int32Array;
  let accum1 = 0;
  for (let b = 0; b < n / 256; b++) {
    const o = wOff + b * 50;
    const lanes = SC.fill(0);
    let sumi1 = 0;
    for (let ib = 0; ib < 8; ib++) {
      const qh = (w[o + 34 + 2 * ib] as number) | ((w[o + 35 + 2 * ib] as number) << 8);
      const ls = 2 * ((qh >> 12) & 7) + 1;
      for (let l = 0; l < 8; l++) {
        const grid = 8 * ((w[o + 2 + 4 * ib + (l >> 1)] as number) | (((qh >> (3 * (l >> 1))) & 7) << 8)) + 4 * (l & 1);
        let s = 0;
        for (let k = 0; k < 4; k++) s += (IQ1S_GRID[grid + k] as number) * (y.qs[256 * b + 32 * ib + 4 * l + k] as number);
        lanes[l] = (lanes[l] as number) + ls * s;
      }
      sumi1 += ((bsums[16 * b + 2 * ib] as number) + (bsums[16 * b + 2 * ib + 1] as number)) * (qh & 0x8000 ? -1 : 1) * ls;
    }
    const d = f32((y.d[b] as number) * f16ToF32((w[o] as number) | ((w[o + 1] as number) << 8)));
    for (let l = 0; l < 8; l++) acc[l] = fma32(d, f32(lanes[l] as number), acc[l] as number);
    accum1 = fma32(d, f32(sumi1), accum1);
  }
  return f32(hsum8(acc) + f32(0.125 * accum1));
}

/**
 * ggml_vec_dot_iq1_m_q8_K (AVX2): two 8-lane int32 sums per super-block. sumi1's lane l of sub-block ib = (2s + 1) ·
 * Σ iq1s_grid value · q over elements 4l..4l+3 (mul_add_epi8), s the sub-block's 3-bit scale of the lane's half (lanes
 * 0..3: elements 0..15); sumi2's lane l = (2s + 1) · ±Σ q over the same 4 elements, the sign that of group l / 2's
 * shift (maddubs of 1 with sign_epi8). d = f32(y.d · the f16 d from the scales' top nibbles); accum1 = fma(d, f32(sumi1),
 * accum1), accum2 likewise, lane by lane; hsum8(accum1) + 0.125 · hsum8(accum2).
 */
function dotIQ1M(w: Uint8Array, wOff: number, y: QuantRow, n: number): number {
  const acc = LANES.fill(0);
  const acc2 = LANES2.fill(0);
  const sumi1 = SC;
  const sumi2 = MN;
  for (let b = 0; b < n / 256; b++) {
    const o = wOff + b * 56;
    sumi1.fill(0);
    sumi2.fill(0);
    const sc = [0, 1, 2, 3].map((k) => (w[o + 48 + 2 * k] as number) | ((w[o + 49 + 2 * k] as number) << 8)) as [
      number,
      number,
      number,
      number,
    ];
    const dBits = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    for (let ib = 0; ib < 8; ib++) {
      const s = (sc[ib >> 1] as number) >> (6 * (ib & 1));
      for (let l = 0; l < 8; l++) {
        const ls = 2 * ((l < 4 ? s : s >> 3) & 7) + 1;
        const g = l >> 1;
        const qh = (w[o + 32 + 2 * ib + (g >> 1)] as number) >> (4 * (g & 1));
        const grid = 8 * ((w[o + 4 * ib + g] as number) | ((qh & 7) << 8)) + 4 * (l & 1);
        let dot = 0;
        let sum = 0;
        for (let k = 0; k < 4; k++) {
          const q = y.qs[256 * b + 32 * ib + 4 * l + k] as number;
          dot += (IQ1S_GRID[grid + k] as number) * q;
          sum += q;
        }
        sumi1[l] = (sumi1[l] as number) + ls * dot;
        sumi2[l] = (sumi2[l] as number) + ls * (qh & 8 ? -sum : sum);
      }
    }
    const d = f32((y.d[b] as number) * f16ToF32(dBits));
    for (let l = 0; l < 8; l++) {
      acc[l] = fma32(d, f32(sumi1[l] as number), acc[l] as number);
      acc2[l] = fma32(d, f32(sumi2[l] as number), acc2[l] as number);
    }
  }
  return f32(hsum8(acc) + f32(0.125 * hsum8(acc2)));
}

/** A matrix as the dot products read it: float rows for F32/F16 (decoded once), the GGUF bytes otherwise. */
type Weights = { type: GGMLType; bytes: Uint8Array; floats?: Float32Array };

function weights(type: GGMLType, bytes: Uint8Array): Weights {
  if (type === GGMLType.F32) return { type, bytes, floats: new Float32Array(bytes.slice().buffer) };
  if (type === GGMLType.F16) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const floats = new Float32Array(bytes.length / 2);
    for (let i = 0; i < floats.length; i++) floats[i] = f16ToF32(view.getUint16(2 * i, true));
    return { type, bytes, floats };
  }
  return { type, bytes };
}

/** Row `r` (of `n` elements) of a matrix · the converted activation, as ggml's vec_dot returns it. */
function vecDot(w: Weights, r: number, a: Activation, n: number): number {
  switch (w.type) {
    case GGMLType.F32:
    case GGMLType.F16:
      return dotFloat(w.floats as Float32Array, r * n, (a as { x: Float32Array }).x, n);
    case GGMLType.Q8_0:
    case GGMLType.Q4_0:
    case GGMLType.Q5_0:
      return dotQ32(w.type, w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.MXFP4:
    case GGMLType.IQ4_NL:
      return dotPaired(w.type, w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.Q4_1:
    case GGMLType.Q5_1:
      return dotQ1(w.type, w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.Q2_K:
    case GGMLType.Q3_K:
      return dotQ23K(w.type, w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.Q4_K:
      return dotQ4K(w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.Q5_K:
      return dotQ5K(w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.Q6_K:
      return dotQ6K(w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.IQ4_XS:
      return dotIQ4XS(w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.IQ2_XXS:
      return dotIQ2XXS(w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.IQ2_XS:
      return dotIQ2XS(w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.IQ3_XXS:
      return dotIQ3XXS(w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.IQ1_S:
      return dotIQ1S(w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    case GGMLType.IQ1_M:
      return dotIQ1M(w.bytes, r * rowByteSize(w.type, n), (a as { q: QuantRow }).q, n);
    default:
      throw new RangeError(`ggml-exact: no bit-exact dot product for ${GGMLType[w.type] ?? w.type}`);
  }
}

// ---------------------------------------------------------------------------------------------
// SiLU as ggml_vec_swiglu_f32 computes it (AVX2 ggml_v_expf, ggml_v_silu).

/** ggml_v_expf's constants (hex floats in the C source; each exactly a float32). */
const C = {
  r: 12582912, // 0x1.8p23
  log2e: 1.4426950216293335, // 0x1.715476p+0
  ln2hi: 0.693145751953125, // 0x1.62e4p-1
  ln2lo: 1.428606765330187e-6, // 0x1.7f7d1cp-20
  p0: 0.008247390389442444, // 0x1.0e4020p-7
  p1: 0.04189976677298546, // 0x1.573e2ep-5
  p2: 0.16668395698070526, // 0x1.555e66p-3
  p3: 0.4999912679195404, // 0x1.fffdb6p-2
  p4: 0.9999994039535522, // 0x1.ffffecp-1
};
for (const v of Object.values(C)) if (f32(v) !== v) throw new Error('ggml-exact: a ggml_v_expf constant is not a float32');

/** ggml_v_expf (AVX2), one lane. */
export function ggmlExpf(x: number): number {
  const z = fma32(x, C.log2e, C.r);
  const n = f32(z - C.r);
  const b = fma32(-n, C.ln2lo, fma32(-n, C.ln2hi, x));
  const e = (f32Bits(z) << 23) >>> 0;
  const k = fromBits((e + f32Bits(1)) >>> 0);
  const u = f32(b * b);
  const j = fma32(fma32(fma32(C.p0, b, C.p1), u, fma32(C.p2, b, C.p3)), u, f32(C.p4 * b));
  if (!(Math.abs(n) > 126)) return fma32(j, k, k);
  const g = n <= 0 ? 0x82000000 : 0;
  const s1 = fromBits((g + 0x7f000000) >>> 0);
  const s2 = fromBits((e - g) >>> 0);
  if (Math.abs(n) > 192) return f32(s1 * s1);
  return f32(fma32(s2, j, s2) * s1);
}

/** ggml_vec_swiglu_f32 for one element: silu(g) · u with silu(g) = g / (1 + ggml_v_expf(−g)). */
export function ggmlSwiglu(g: number, u: number): number {
  const silu = f32(g / f32(1 + ggmlExpf(f32(0 - g))));
  return f32(silu * u);
}

// ---------------------------------------------------------------------------------------------
// One expert and one layer, from matrices in memory.

/** One expert's three matrices as the dot products read them, its layer's variant and its biases (when it has them). */
interface ExpertWeights {
  types: Record<ExpertMatrix, GGMLType>;
  nEmbd: number;
  ff: number;
  gate: Weights;
  up: Weights;
  down: Weights;
  variant: ExpertVariant;
  biases?: { gate: Float32Array; up: Float32Array; down: Float32Array };
  scales?: { gate: number; up: number; down: number };
}

/** ggml_vec_silu_f32 for one element (the ggml_silu op): the same AVX2 silu as ggml_vec_swiglu_f32's. */
export function ggmlSilu(x: number): number {
  return f32(x / f32(1 + ggmlExpf(f32(0 - x))));
}

/** The variant's gated unit on one gate and up value, as the coordinator's op for it computes it. */
function gatedUnit32(v: ExpertVariant, g: number, u: number): number {
  switch (v.activation) {
    case 'silu':
      return ggmlSwiglu(g, u);
    case 'swiglu_oai':
      return swigluOaiF32(g, u, v.alpha, v.limit);
    case 'swiglu_clamp':
      return swigluClampF32(g, u, v.limit);
    case 'silu_limit':
      return siluLimitF32(g, u, v.limit, ggmlSilu);
    case 'gelu':
      return ggmlGeglu(g, u);
  }
}

/**
 * h = glu(gate·x + bg, up·x + bu), x converted to the gate's (and up's) vec_dot type first; the biases added as
 * ggml_add_id adds them (one float add), the unit ggml_vec_swiglu_f32 or ggml's swiglu_oai op.
 */
function hiddenOf(e: ExpertWeights, x: Float32Array): Float32Array {
  const { nEmbd, ff, types, variant, biases, scales } = e;
  const xg = toVecDot(types.gate, x);
  const xu = types.up === types.gate ? xg : toVecDot(types.up, x);
  const h = new Float32Array(ff);
  for (let r = 0; r < ff; r++) {
    let g = vecDot(e.gate, r, xg, nEmbd);
    let u = vecDot(e.up, r, xu, nEmbd);
    if (scales) {
      g = f32(g * scales.gate);
      u = f32(u * scales.up);
    }
    if (biases) {
      g = f32(g + (biases.gate[r] as number));
      u = f32(u + (biases.up[r] as number));
    }
    h[r] = gatedUnit32(variant, g, u);
  }
  return h;
}

/** down · h (+ the down bias), h converted to down's vec_dot type first. */
function downOf(e: ExpertWeights, h: Float32Array): Float32Array {
  const { nEmbd, ff, types, biases, scales } = e;
  const hd = toVecDot(types.down, h);
  const out = new Float32Array(nEmbd);
  for (let r = 0; r < nEmbd; r++) out[r] = vecDot(e.down, r, hd, ff);
  if (scales) for (let r = 0; r < nEmbd; r++) out[r] = f32((out[r] as number) * scales.down);
  if (biases) for (let r = 0; r < nEmbd; r++) out[r] = f32((out[r] as number) + (biases.down[r] as number));
  return out;
}

/**
 * Σ_k probs·expert as the stock graph sums it: each expert's output times its weight (ggml_mul), then the experts
 * added in k order (ggml_add of the views). Pairs with probability 0 are left out (the dispatcher's "not served").
 */
async function sumsOf(
  expertOut: (expert: number, x: Float32Array) => Promise<Float32Array> | Float32Array,
  rows: Float32Array,
  ids: Int32Array,
  probs: Float32Array,
  nTokens: number,
  nUsed: number,
): Promise<Float32Array> {
  const nEmbd = rows.length / nTokens;
  const sums = new Float32Array(nTokens * nEmbd);
  for (let t = 0; t < nTokens; t++) {
    const x = rows.subarray(t * nEmbd, (t + 1) * nEmbd);
    const acc = sums.subarray(t * nEmbd, (t + 1) * nEmbd);
    let first = true;
    for (let k = 0; k < nUsed; k++) {
      const p = probs[t * nUsed + k] as number;
      if (p === 0) continue;
      const y = await expertOut(ids[t * nUsed + k] as number, x);
      for (let i = 0; i < nEmbd; i++) {
        const w = f32((y[i] as number) * p);
        acc[i] = first ? w : f32((acc[i] as number) + w);
      }
      first = false;
    }
  }
  return sums;
}

/** A layer's routed experts in memory: each matrix's bytes for experts [0, nExpert) back to back (expert-slice layout). */
export interface ExactExperts {
  types: Record<ExpertMatrix, GGMLType>;
  nEmbd: number;
  ff: number;
  gate: Uint8Array;
  up: Uint8Array;
  down: Uint8Array;
  /** Absent: SiLU-gated without biases. */
  variant?: ExpertVariant;
  /** With a biased variant: gate and up [nExpert × ff], down [nExpert × nEmbd]. */
  biases?: { gate: Float32Array; up: Float32Array; down: Float32Array };
  /** With a scaled variant: one scale per expert for each matrix [nExpert]. */
  scales?: { gate: Float32Array; up: Float32Array; down: Float32Array };
}

function expertWeightsOf(e: ExactExperts, expert: number): ExpertWeights {
  const one = (m: ExpertMatrix, rows: number, rowLen: number): Weights => {
    const per = rows * rowByteSize(e.types[m], rowLen);
    return weights(e.types[m], e[m].subarray(expert * per, (expert + 1) * per));
  };
  const b = e.biases;
  return {
    types: e.types,
    nEmbd: e.nEmbd,
    ff: e.ff,
    gate: one('gate', e.ff, e.nEmbd),
    up: one('up', e.ff, e.nEmbd),
    down: one('down', e.nEmbd, e.ff),
    variant: e.variant ?? SILU_VARIANT,
    ...(e.scales && {
      scales: { gate: e.scales.gate[expert] as number, up: e.scales.up[expert] as number, down: e.scales.down[expert] as number },
    }),
    ...(b && {
      biases: {
        gate: b.gate.subarray(expert * e.ff, (expert + 1) * e.ff),
        up: b.up.subarray(expert * e.ff, (expert + 1) * e.ff),
        down: b.down.subarray(expert * e.nEmbd, (expert + 1) * e.nEmbd),
      },
    }),
  };
}

/** h of `expert` for one row x, bit for bit as the coordinator computes it (before down's rounding of h). */
export function ggmlHidden(e: ExactExperts, expert: number, x: Float32Array): Float32Array {
  return hiddenOf(expertWeightsOf(e, expert), x);
}

/** down(h) of `expert` for one row x, bit for bit as the coordinator computes it. */
export function ggmlExpertOut(e: ExactExperts, expert: number, x: Float32Array): Float32Array {
  const w = expertWeightsOf(e, expert);
  return downOf(w, hiddenOf(w, x));
}

/** A layer's sums over the pairs of a call (rows [nTokens × nEmbd], ids and probs [nTokens × nUsed]), bit for bit. */
export function ggmlLayerSums(
  e: ExactExperts,
  rows: Float32Array,
  ids: Int32Array,
  probs: Float32Array,
  nTokens: number,
  nUsed: number,
): Promise<Float32Array> {
  const cache = new Map<number, ExpertWeights>();
  const of = (expert: number): ExpertWeights => {
    let w = cache.get(expert);
    if (!w) {
      w = expertWeightsOf(e, expert);
      cache.set(expert, w);
    }
    return w;
  };
  return sumsOf((expert, x) => downOf(of(expert), hiddenOf(of(expert), x)), rows, ids, probs, nTokens, nUsed);
}

// ---------------------------------------------------------------------------------------------
// A dispatcher backend computing as the coordinator's stock graph does.

interface LayerTensors {
  types: Record<ExpertMatrix, GGMLType>;
  nEmbd: number;
  ff: number;
  variant: ExpertVariant;
  /** Each expert's biases, cached per expert (biased layers only). */
  biases: Map<number, { gate: Float32Array; up: Float32Array; down: Float32Array }>;
  /** The layer's per-expert scales [nExpert] of each matrix (scaled layers only). */
  scales?: { gate: Float32Array; up: Float32Array; down: Float32Array };
  /** Each expert's matrix, cached per (matrix, expert). */
  weights: Map<string, Weights>;
}

export class GgmlExactBackend implements ExpertBackend {
  readonly name = 'ggml-exact CPU (bit for bit as the coordinator)';
  private layers = new Map<number, LayerTensors>();

  private constructor(
    private readonly file: GGUFFile,
    private readonly src: Awaited<ReturnType<typeof openFileSource>>,
  ) {}

  static async open(modelPath: string): Promise<GgmlExactBackend> {
    const src = await openFileSource(modelPath);
    return new GgmlExactBackend(await readGGUF(src), src);
  }

  async close(): Promise<void> {
    await this.src.close();
  }

  private tensor(layer: number, m: ExpertMatrix): GGUFTensorInfo {
    const t = layerExpertTensors(this.file, layer).found[m];
    if (!t) throw new RangeError(`layer ${layer} has no routed experts (${expertTensorName(layer, m)} missing)`);
    return t;
  }

  private layer(layer: number): LayerTensors {
    let L = this.layers.get(layer);
    if (!L) {
      const gate = this.tensor(layer, 'gate');
      const shape = { nEmbd: gate.dims[0] as number, ff: gate.dims[1] as number, nExpert: gate.dims[2] as number };
      L = {
        types: { gate: gate.type, up: this.tensor(layer, 'up').type, down: this.tensor(layer, 'down').type },
        nEmbd: shape.nEmbd,
        ff: shape.ff,
        variant: layerVariant(this.file, layer, shape),
        biases: new Map(),
        weights: new Map(),
      };
      this.layers.set(layer, L);
    }
    return L;
  }

  private async layerScales(layer: number): Promise<LayerTensors['scales']> {
    const L = this.layer(layer);
    if (!L.variant.scales) return undefined;
    if (!L.scales) {
      const nExpert = this.tensor(layer, 'gate').dims[2] as number;
      const t = modelScaleTensors(this.file, layer, nExpert);
      const read = (m: 'gate' | 'up' | 'down'): Promise<Float32Array> => readScaleRange(this.src, this.file, t?.[m], 0, nExpert);
      L.scales = { gate: await read('gate'), up: await read('up'), down: await read('down') };
    }
    return L.scales;
  }

  private async expertWeights(layer: number, m: ExpertMatrix, expert: number): Promise<Weights> {
    const L = this.layer(layer);
    const key = `${m}/${expert}`;
    let w = L.weights.get(key);
    if (!w) {
      const { info, bytes } = await readExpertMatrix(this.src, this.file, layer, m, expert);
      w = weights(info.type, bytes);
      L.weights.set(key, w);
    }
    return w;
  }

  private async expertBiases(layer: number, expert: number): Promise<ExpertWeights['biases']> {
    const L = this.layer(layer);
    if (!L.variant.biases) return undefined;
    let b = L.biases.get(expert);
    if (!b) {
      const t = layerBiasTensors(this.file, layer, { nEmbd: L.nEmbd, ff: L.ff, nExpert: this.tensor(layer, 'gate').dims[2] as number });
      const read = (which: 'gate' | 'up' | 'down'): Promise<Float32Array> =>
        readBiasRange(this.src, this.file, t![which], expert, expert + 1);
      b = { gate: await read('gate'), up: await read('up'), down: await read('down') };
      L.biases.set(expert, b);
    }
    return b;
  }

  /**
   * down_e(glu(gate_e·x, up_e·x)) for one row, as mul_mat_id (+ add_id) + the variant's GLU op + mul_mat_id (+ add_id)
   * compute it.
   */
  async expertOut(layer: number, expert: number, x: Float32Array): Promise<Float32Array> {
    const { nEmbd, ff, types, variant } = this.layer(layer);
    const biases = await this.expertBiases(layer, expert);
    const sc = await this.layerScales(layer);
    const w: ExpertWeights = {
      types,
      nEmbd,
      ff,
      gate: await this.expertWeights(layer, 'gate', expert),
      up: await this.expertWeights(layer, 'up', expert),
      down: await this.expertWeights(layer, 'down', expert),
      variant,
      ...(biases && { biases }),
      ...(sc && { scales: { gate: sc.gate[expert] as number, up: sc.up[expert] as number, down: sc.down[expert] as number } }),
    };
    return downOf(w, hiddenOf(w, x));
  }

  /** The layer's sums as the stock graph computes them (sumsOf). */
  layerSums(
    layer: number,
    rows: Float32Array,
    ids: Int32Array,
    probs: Float32Array,
    nTokens: number,
    nUsed: number,
  ): Promise<Float32Array> {
    return sumsOf((expert, x) => this.expertOut(layer, expert, x), rows, ids, probs, nTokens, nUsed);
  }
}
