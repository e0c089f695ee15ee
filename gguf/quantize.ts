/**
 * Encoding float32 data into ggml tensor formats. Standard JS only (browser-safe).
 *
 * F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4 follow ggml's reference quantizers
 * (quantize_row_*_ref in ggml-quants.c, ggml_fp32_to_fp16_row, ggml_fp32_to_bf16_row_ref) step by
 * step, with Math.fround after every float operation, so the bytes equal llama.cpp's (what
 * llama-quantize writes without an importance matrix) for finite inputs.
 *
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K use this module's own, simpler quantizer (not ggml's iterative
 * make_qkx2/make_qx searches, so the bytes differ from llama.cpp's): per sub-block min/max (or
 * signed absmax) scales, super-block d/dmin rounded *up* to f16 so every sub-block scale fits,
 * then a small search over neighbouring quantized scale/min codes minimising the sub-block's
 * squared error. The bytes are valid ggml blocks (decoded by ggml's dequantize_row_* and by
 * dequantize.ts). Expected normalized MSE (sum err^2 / sum x^2), measured on N(0,1) data:
 *   Q6_K 3.2e-4, Q5_K 1.25e-3, Q4_K 5.3e-3, Q3_K 2.2e-2, Q2_K 7.9e-2
 * On sum-of-4-uniforms data ours vs ggml's quantize_row_*_ref: Q6_K 2.9e-4 vs 2.9e-4,
 * Q5_K 1.15e-3 vs 1.21e-3, Q4_K 4.9e-3 vs 4.75e-3, Q3_K 2.0e-2 vs 2.15e-2, Q2_K 7.6e-2 vs 8.35e-2.
 * Per element the error is about half a quantization step of its sub-block (a full step where the
 * search chose to clip an outlier), plus the 6-bit (Q2_K: 4-bit) rounding of the sub-block scale;
 * worst block error / super-block absmax measured: Q6_K 0.021, Q5_K 0.056, Q4_K 0.096, Q3_K 0.24,
 * Q2_K 0.40 (bounds in test/unit/quant.test.ts). Speed: ~100-250 ns/element (the 32-element and
 * float formats ~10-20 ns).
 *
 * Limits shared with ggml: scales are f16, so blocks whose absmax is beyond what f16 scales reach
 * (e.g. Q8_0 absmax > 127*65504; Q4_1/Q5_1 also store the block min as f16, so |min| > 65504
 * overflows) or below f16 resolution (d underflows to 0 or to a coarse
 * subnormal) lose precision; NaN/Inf inputs give valid but meaningless blocks.
 */
import { GGMLType, requireQuantType, typeName } from './quant-types.ts';
import { f16ToF32, f32ToBf16, f32ToF16 } from './half.ts';
import { e8m0ToF32Half, KVALUES_IQ4NL, KVALUES_MXFP4 } from './dequantize.ts';

type Encoder = (x: Float32Array, nBlocks: number, out: Uint8Array) => void;

const fround = Math.fround;
const FLT_MAX = 3.4028234663852886e38;

/** C roundf: round half away from zero. */
function roundf(v: number): number {
  return v >= 0 ? Math.floor(v + 0.5) : -Math.floor(0.5 - v);
}

function putU16(out: Uint8Array, p: number, v: number): void {
  out[p] = v & 255;
  out[p + 1] = (v >>> 8) & 255;
}

function putU32(out: Uint8Array, p: number, v: number): void {
  out[p] = v & 255;
  out[p + 1] = (v >>> 8) & 255;
  out[p + 2] = (v >>> 16) & 255;
  out[p + 3] = (v >>> 24) & 255;
}

// ---------------------------------------------------------------------------------------------
// Float formats.

function encodeF32(x: Float32Array, n: number, out: Uint8Array): void {
  const bits = new Uint32Array(x.buffer, x.byteOffset, n);
  for (let i = 0; i < n; i++) putU32(out, 4 * i, bits[i]!);
}

function encodeF16(x: Float32Array, n: number, out: Uint8Array): void {
  for (let i = 0; i < n; i++) putU16(out, 2 * i, f32ToF16(x[i]!));
}

function encodeBF16(x: Float32Array, n: number, out: Uint8Array): void {
  for (let i = 0; i < n; i++) putU16(out, 2 * i, f32ToBf16(x[i]!));
}

// ---------------------------------------------------------------------------------------------
// 32-element formats: ggml reference algorithms. Layouts: see dequantize.ts.

/** Index of the element with the largest |x| (first one wins), ggml's `if (amax < fabsf(v))`. */
function signedAbsMax(x: Float32Array, o: number, len: number): number {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < len; j++) {
    const v = x[o + j]!;
    if (amax < Math.abs(v)) {
      amax = Math.abs(v);
      max = v;
    }
  }
  return max;
}

/** Q4_0 (quantize_row_q4_0_ref): d = max/-8, q = min(15, (int8)(x/d + 8.5)). */
function encodeQ4_0(x: Float32Array, nb: number, out: Uint8Array): void {
  for (let b = 0; b < nb; b++) {
    const o = 32 * b,
      p = 18 * b;
    const d = fround(signedAbsMax(x, o, 32) / -8);
    const id = d ? fround(1 / d) : 0;
    putU16(out, p, f32ToF16(d));
    for (let j = 0; j < 16; j++) {
      const q0 = Math.min(15, Math.trunc(fround(fround(x[o + j]! * id) + 8.5)));
      const q1 = Math.min(15, Math.trunc(fround(fround(x[o + 16 + j]! * id) + 8.5)));
      out[p + 2 + j] = (q0 & 15) | ((q1 & 15) << 4);
    }
  }
}

/** Block min and max as in ggml's Q4_1/Q5_1 loops (start FLT_MAX / -FLT_MAX). */
function minMax(x: Float32Array, o: number): [number, number] {
  let min = FLT_MAX;
  let max = -FLT_MAX;
  for (let j = 0; j < 32; j++) {
    const v = x[o + j]!;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return [min, max];
}

/** Q4_1 (quantize_row_q4_1_ref): d = (max-min)/15, m = min, q = min(15, (int8)((x-min)/d + 0.5)). */
function encodeQ4_1(x: Float32Array, nb: number, out: Uint8Array): void {
  for (let b = 0; b < nb; b++) {
    const o = 32 * b,
      p = 20 * b;
    const [min, max] = minMax(x, o);
    const d = fround(fround(max - min) / 15);
    const id = d ? fround(1 / d) : 0;
    putU16(out, p, f32ToF16(d));
    putU16(out, p + 2, f32ToF16(min));
    for (let j = 0; j < 16; j++) {
      const q0 = Math.min(15, Math.trunc(fround(fround(fround(x[o + j]! - min) * id) + 0.5)));
      const q1 = Math.min(15, Math.trunc(fround(fround(fround(x[o + 16 + j]! - min) * id) + 0.5)));
      out[p + 4 + j] = (q0 & 15) | ((q1 & 15) << 4);
    }
  }
}

/** Q5_0 (quantize_row_q5_0_ref): d = max/-16, q = min(31, (int8)(x/d + 16.5)). */
function encodeQ5_0(x: Float32Array, nb: number, out: Uint8Array): void {
  for (let b = 0; b < nb; b++) {
    const o = 32 * b,
      p = 22 * b;
    const d = fround(signedAbsMax(x, o, 32) / -16);
    const id = d ? fround(1 / d) : 0;
    putU16(out, p, f32ToF16(d));
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const q0 = Math.min(31, Math.trunc(fround(fround(x[o + j]! * id) + 16.5)));
      const q1 = Math.min(31, Math.trunc(fround(fround(x[o + 16 + j]! * id) + 16.5)));
      out[p + 6 + j] = (q0 & 15) | ((q1 & 15) << 4);
      qh |= ((q0 >> 4) & 1) << j;
      qh |= ((q1 >> 4) & 1) << (j + 16);
    }
    putU32(out, p + 2, qh);
  }
}

/** Q5_1 (quantize_row_q5_1_ref): d = (max-min)/31, m = min, q = (uint8)((x-min)/d + 0.5). */
function encodeQ5_1(x: Float32Array, nb: number, out: Uint8Array): void {
  for (let b = 0; b < nb; b++) {
    const o = 32 * b,
      p = 24 * b;
    const [min, max] = minMax(x, o);
    const d = fround(fround(max - min) / 31);
    const id = d ? fround(1 / d) : 0;
    putU16(out, p, f32ToF16(d));
    putU16(out, p + 2, f32ToF16(min));
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      const q0 = Math.trunc(fround(fround(fround(x[o + j]! - min) * id) + 0.5)) & 255;
      const q1 = Math.trunc(fround(fround(fround(x[o + 16 + j]! - min) * id) + 0.5)) & 255;
      out[p + 8 + j] = (q0 & 15) | ((q1 & 15) << 4);
      qh |= ((q0 >> 4) & 1) << j;
      qh |= ((q1 >> 4) & 1) << (j + 16);
    }
    putU32(out, p + 4, qh);
  }
}

/** Q8_0 (quantize_row_q8_0_ref): d = absmax/127, q = roundf(x/d). */
function encodeQ8_0(x: Float32Array, nb: number, out: Uint8Array): void {
  for (let b = 0; b < nb; b++) {
    const o = 32 * b,
      p = 34 * b;
    let amax = 0;
    for (let j = 0; j < 32; j++) {
      const a = Math.abs(x[o + j]!);
      amax = Math.max(amax, a); // C MAX(amax, fabsf(v))
    }
    const d = fround(amax / 127);
    const id = d ? fround(1 / d) : 0;
    putU16(out, p, f32ToF16(d));
    for (let j = 0; j < 32; j++) out[p + 2 + j] = roundf(fround(x[o + j]! * id)) & 255;
  }
}

/** best_index_mxfp4: the first kvalue k minimising |k*e - x| in float. */
function bestIndexMXFP4(x: number, e: number): number {
  let best = 0;
  let bestErr = Math.abs(fround(KVALUES_MXFP4[0]! * e - x));
  for (let i = 1; i < 16; i++) {
    const err = Math.abs(fround(KVALUES_MXFP4[i]! * e - x));
    if (err < bestErr) {
      best = i;
      bestErr = err;
    }
  }
  return best;
}

/**
 * MXFP4 (quantize_row_mxfp4_ref): e = (uint8)(floorf(log2f(amax)) - 2 + 127) (0 for an all-zero block), scale
 * d = 2^(e-128), each element the nearest of KVALUES_MXFP4 × d. log2f is taken as the correctly rounded float
 * (glibc's is); the uint8 cast of a negative exponent (amax < 2^-125) wraps as x86's cvttss2si does.
 */
function encodeMXFP4(x: Float32Array, nb: number, out: Uint8Array): void {
  for (let b = 0; b < nb; b++) {
    const o = 32 * b,
      p = 17 * b;
    let amax = 0;
    for (let j = 0; j < 32; j++) {
      const a = Math.abs(x[o + j]!);
      if (amax < a) amax = a;
    }
    const e = amax > 0 ? (Math.floor(fround(Math.log2(amax))) - 2 + 127) & 255 : 0;
    const d = e8m0ToF32Half(e);
    out[p] = e;
    for (let j = 0; j < 16; j++) {
      out[p + 1 + j] = bestIndexMXFP4(x[o + j]!, d) | (bestIndexMXFP4(x[o + 16 + j]!, d) << 4);
    }
  }
}

/** best_index_int8 (ggml-quants.c): the nearest of the sorted int8 `values` to x (float comparisons, ties upward). */
function bestIndexInt8(values: readonly number[], x: number): number {
  const n = values.length;
  if (x <= values[0]!) return 0;
  if (x >= values[n - 1]!) return n - 1;
  let ml = 0,
    mu = n - 1;
  while (mu - ml > 1) {
    const mav = (ml + mu) >> 1;
    if (x < values[mav]!) mu = mav;
    else ml = mav;
  }
  return fround(x - values[mu - 1]!) < fround(values[mu]! - x) ? mu - 1 : mu;
}

const GROUP_MAX_EPS = fround(1e-15);

/** Σ w·q·x and Σ w·q·q of a 32-element block at levels from `values` chosen for id·x, float32 as ggml sums them. */
function iq4Fit(values: readonly number[], x: Float32Array, o: number, w: Float32Array, id: number): [number, number] {
  let sumqx = 0,
    sumq2 = 0;
  for (let j = 0; j < 32; j++) {
    const xj = x[o + j]!;
    const q = values[bestIndexInt8(values, fround(id * xj))]!;
    const wq = fround(w[j]! * q);
    sumqx = fround(sumqx + fround(wq * xj));
    sumq2 = fround(sumq2 + fround(wq * q));
  }
  return [sumqx, sumq2];
}

/**
 * The scale quantize_row_iq4_nl_impl fits to one 32-element block without an importance matrix (ntry 7, weights x²):
 * d from the signed max (max/127), a least-squares refit of d to the chosen levels, 15 more trial scales
 * (itry − 127)/max keeping the best sumqx²/sumq2. 0 for a block below GROUP_MAX_EPS. Every float step rounded as
 * ggml-base computes it (no FMA there: SSE2 scalar code).
 */
function iq4BlockScale(values: readonly number[], x: Float32Array, o: number, w: Float32Array): number {
  const ntry = 7;
  let amax = 0,
    max = 0;
  for (let j = 0; j < 32; j++) {
    const v = x[o + j]!;
    w[j] = v * v;
    const ax = Math.abs(v);
    if (ax > amax) {
      amax = ax;
      max = v;
    }
  }
  if (amax < GROUP_MAX_EPS) return 0;
  let [sumqx, sumq2] = iq4Fit(values, x, o, w, fround(1 / fround(-max / values[0]!)));
  let d = sumq2 > 0 ? fround(sumqx / sumq2) : 0;
  let best = fround(d * sumqx);
  for (let itry = -ntry; itry <= ntry; itry++) {
    [sumqx, sumq2] = iq4Fit(values, x, o, w, fround((itry + values[0]!) / max));
    if (sumq2 > 0 && fround(sumqx * sumqx) > fround(best * sumq2)) {
      d = fround(sumqx / sumq2);
      best = fround(d * sumqx);
    }
  }
  return d;
}

/** The 32 levels of a block for the inverse scale `id`, packed as IQ4_NL's qs (element j low, j + 16 high). */
function putIQ4Levels(values: readonly number[], x: Float32Array, o: number, id: number, out: Uint8Array, p: number): void {
  for (let j = 0; j < 16; j++) {
    out[p + j] = bestIndexInt8(values, fround(id * x[o + j]!)) | (bestIndexInt8(values, fround(id * x[o + j + 16]!)) << 4);
  }
}

/** IQ4_NL as llama-quantize writes it without an importance matrix (quantize_iq4_nl): one fitted scale per block. */
function encodeIQ4_NL(x: Float32Array, nb: number, out: Uint8Array): void {
  const w = new Float32Array(32);
  for (let b = 0; b < nb; b++) {
    const scale = iq4BlockScale(KVALUES_IQ4NL, x, 32 * b, w);
    putU16(out, 18 * b, f32ToF16(scale));
    putIQ4Levels(KVALUES_IQ4NL, x, 32 * b, scale ? fround(1 / scale) : 0, out, 18 * b + 2);
  }
}

/** ggml's nearest_int (the 1.5·2^23 trick: round half to even), for |v| < 2^22. */
function nearestInt(v: number): number {
  return fround(v + 12582912) - 12582912;
}

/**
 * IQ4_XS as llama-quantize writes it without an importance matrix (quantize_iq4_xs → quantize_row_iq4_nl_impl with
 * super-blocks of 256): each 32-block's scale fitted as IQ4_NL's, then d = −(the signed largest of them)/32 stored as
 * f16, each block's 6-bit scale l = nearest_int(scale/d) clamped to −32..31 (stored + 32), and its levels chosen
 * again for d·l (d before its f16 rounding, as ggml).
 */
function encodeIQ4_XS(x: Float32Array, nb: number, out: Uint8Array): void {
  const w = new Float32Array(32);
  const scales = new Float32Array(8);
  for (let b = 0; b < nb; b++) {
    const o = 256 * b,
      p = 136 * b;
    let amaxScale = 0,
      maxScale = 0;
    for (let ib = 0; ib < 8; ib++) {
      const d = iq4BlockScale(KVALUES_IQ4NL, x, o + 32 * ib, w);
      scales[ib] = d;
      if (Math.abs(d) > amaxScale) {
        amaxScale = Math.abs(d);
        maxScale = d;
      }
    }
    const d = fround(-maxScale / 32);
    putU16(out, p, f32ToF16(d));
    const id = d ? fround(1 / d) : 0;
    let sh = 0;
    for (let ib = 0; ib < 8; ib++) {
      const l = Math.max(-32, Math.min(31, nearestInt(fround(id * scales[ib]!))));
      const dl = fround(d * l);
      putIQ4Levels(KVALUES_IQ4NL, x, o + 32 * ib, dl ? fround(1 / dl) : 0, out, p + 8 + 16 * ib);
      const u = l + 32;
      if (ib % 2 === 0) out[p + 4 + (ib >> 1)] = u & 15;
      else out[p + 4 + (ib >> 1)]! |= (u & 15) << 4;
      sh |= (u >> 4) << (2 * ib);
    }
    putU16(out, p + 2, sh);
  }
}

// ---------------------------------------------------------------------------------------------
// K-quants: own quantizer (see the header comment). Layouts: see dequantize.ts.

/** f16 bits of the smallest half >= v (v >= 0), saturating at the largest finite half. */
function f16Up(v: number): number {
  if (!(v > 0)) return 0;
  if (v >= 65504) return 0x7bff;
  let h = f32ToF16(v);
  if (f16ToF32(h) < v) h++;
  return h;
}

function clamp(v: number, lo: number, hi: number): number {
  return v < lo ? lo : Math.min(v, hi);
}

interface AffineResult {
  d: number; // f16 bits
  dmin: number; // f16 bits
}

/**
 * Affine super-block quantization (Q2_K, Q4_K, Q5_K): y = d*sc[s] * q - dmin*m[s], q in 0..qmax,
 * sc and m in 0..codeMax. Writes the per-element codes into `codes` and sub-block sc/m into
 * `sc`/`mins`.
 */
function quantizeAffine(
  x: Float32Array,
  o: number,
  nSub: number,
  subLen: number,
  qmax: number,
  codeMax: number,
  codes: Uint8Array,
  sc: Uint8Array,
  mins: Uint8Array,
  spanS: Float64Array,
  spanM: Float64Array,
): AffineResult {
  // 1. Per sub-block range [lo, hi] with lo <= 0 (the format can only subtract a min).
  let maxS = 0,
    maxM = 0;
  for (let s = 0; s < nSub; s++) {
    let lo = 0,
      hi = -Infinity;
    for (let l = 0; l < subLen; l++) {
      const v = x[o + s * subLen + l]!;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
    spanM[s] = -lo;
    spanS[s] = Math.max(0, hi - lo) / qmax;
    if (spanM[s]! > maxM) maxM = spanM[s]!;
    if (spanS[s]! > maxS) maxS = spanS[s]!;
  }
  // 2. Super-block scales, rounded up so every sub-block's ideal code is <= codeMax.
  const dBits = f16Up(maxS / codeMax);
  const dminBits = f16Up(maxM / codeMax);
  const d = f16ToF32(dBits),
    dmin = f16ToF32(dminBits);
  // 3. Per sub-block: search neighbouring (sc, m) codes for the least squared error.
  for (let s = 0; s < nSub; s++) {
    const base = o + s * subLen;
    const m0 = dmin > 0 ? clamp(Math.ceil(spanM[s]! / dmin), 0, codeMax) : 0;
    let bestErr = Infinity,
      bestSc = 0,
      bestM = 0;
    for (let m = Math.max(0, m0 - 1); m <= Math.min(codeMax, m0 + 1); m++) {
      const M = fround(dmin * m);
      const sc0 = d > 0 ? clamp(Math.round(spanS[s]! / d), 0, codeMax) : 0;
      for (let c = Math.max(0, sc0 - 2); c <= Math.min(codeMax, sc0 + 1); c++) {
        const S = fround(d * c);
        const inv = S > 0 ? 1 / S : 0;
        let err = 0;
        for (let l = 0; l < subLen; l++) {
          const v = x[base + l]!;
          const q = clamp(Math.round((v + M) * inv), 0, qmax);
          const e = S * q - M - v;
          err += e * e;
        }
        if (err < bestErr) {
          bestErr = err;
          bestSc = c;
          bestM = m;
        }
      }
    }
    sc[s] = bestSc;
    mins[s] = bestM;
    const S = fround(d * bestSc),
      M = fround(dmin * bestM);
    const inv = S > 0 ? 1 / S : 0;
    for (let l = 0; l < subLen; l++) codes[s * subLen + l] = clamp(Math.round((x[base + l]! + M) * inv), 0, qmax);
  }
  return { d: dBits, dmin: dminBits };
}

/**
 * Symmetric super-block quantization (Q3_K, Q6_K): y = d*sc[s] * q, q in qmin..qmax, sc in
 * -codeMax..codeMax. Writes signed codes and sub-block scales; returns d as f16 bits.
 */
function quantizeSymmetric(
  x: Float32Array,
  o: number,
  nSub: number,
  subLen: number,
  qmin: number,
  qmax: number,
  codeMax: number,
  codes: Int8Array,
  sc: Int8Array,
  scale: Float64Array,
): number {
  // 1. Per sub-block scale mapping the largest-magnitude value onto qmin (the longer side).
  let maxAbs = 0;
  for (let s = 0; s < nSub; s++) {
    const big = signedAbsMax(x, o + s * subLen, subLen);
    scale[s] = big / qmin;
    if (Math.abs(scale[s]!) > maxAbs) maxAbs = Math.abs(scale[s]!);
  }
  const dBits = f16Up(maxAbs / codeMax);
  const d = f16ToF32(dBits);
  // 2. Per sub-block: try neighbouring scale codes, keep the least squared error.
  for (let s = 0; s < nSub; s++) {
    const base = o + s * subLen;
    const c0 = d > 0 ? clamp(Math.round(scale[s]! / d), -codeMax, codeMax) : 0;
    let bestErr = Infinity,
      best = 0;
    for (let c = Math.max(-codeMax, c0 - 2); c <= Math.min(codeMax, c0 + 2); c++) {
      const S = fround(d * c);
      const inv = S !== 0 ? 1 / S : 0;
      let err = 0;
      for (let l = 0; l < subLen; l++) {
        const v = x[base + l]!;
        const e = S * clamp(Math.round(v * inv), qmin, qmax) - v;
        err += e * e;
      }
      if (err < bestErr) {
        bestErr = err;
        best = c;
      }
    }
    sc[s] = best;
    const S = fround(d * best);
    const inv = S !== 0 ? 1 / S : 0;
    for (let l = 0; l < subLen; l++) codes[s * subLen + l] = clamp(Math.round(x[base + l]! * inv), qmin, qmax);
  }
  return dBits;
}

/** Packs eight 6-bit scale/min pairs into 12 bytes at p (inverse of get_scale_min_k4). */
function packScaleMinK4(out: Uint8Array, p: number, sc: Uint8Array, mins: Uint8Array): void {
  for (let j = 0; j < 4; j++) {
    out[p + j] = (sc[j]! & 63) | ((sc[j + 4]! >> 4) << 6);
    out[p + j + 4] = (mins[j]! & 63) | ((mins[j + 4]! >> 4) << 6);
    out[p + j + 8] = (sc[j + 4]! & 15) | ((mins[j + 4]! & 15) << 4);
  }
}

function encodeQ4_K(x: Float32Array, nb: number, out: Uint8Array): void {
  const codes = new Uint8Array(256),
    sc = new Uint8Array(8),
    mins = new Uint8Array(8);
  const spanS = new Float64Array(8),
    spanM = new Float64Array(8);
  for (let b = 0; b < nb; b++) {
    const p = 144 * b;
    const r = quantizeAffine(x, 256 * b, 8, 32, 15, 63, codes, sc, mins, spanS, spanM);
    putU16(out, p, r.d);
    putU16(out, p + 2, r.dmin);
    packScaleMinK4(out, p + 4, sc, mins);
    for (let s = 0; s < 8; s += 2) {
      for (let l = 0; l < 32; l++) out[p + 16 + 16 * s + l] = codes[32 * s + l]! | (codes[32 * s + 32 + l]! << 4);
    }
  }
}

function encodeQ5_K(x: Float32Array, nb: number, out: Uint8Array): void {
  const codes = new Uint8Array(256),
    sc = new Uint8Array(8),
    mins = new Uint8Array(8);
  const spanS = new Float64Array(8),
    spanM = new Float64Array(8);
  for (let b = 0; b < nb; b++) {
    const p = 176 * b;
    const r = quantizeAffine(x, 256 * b, 8, 32, 31, 63, codes, sc, mins, spanS, spanM);
    putU16(out, p, r.d);
    putU16(out, p + 2, r.dmin);
    packScaleMinK4(out, p + 4, sc, mins);
    out.fill(0, p + 16, p + 48);
    for (let s = 0; s < 8; s++) {
      for (let l = 0; l < 32; l++) {
        const q = codes[32 * s + l]!;
        out[p + 16 + l]! |= (q >> 4) << s;
        if ((s & 1) === 0) out[p + 48 + 16 * s + l] = q & 15;
        else out[p + 48 + 16 * (s - 1) + l]! |= (q & 15) << 4;
      }
    }
  }
}

function encodeQ2_K(x: Float32Array, nb: number, out: Uint8Array): void {
  const codes = new Uint8Array(256),
    sc = new Uint8Array(16),
    mins = new Uint8Array(16);
  const spanS = new Float64Array(16),
    spanM = new Float64Array(16);
  for (let b = 0; b < nb; b++) {
    const p = 84 * b;
    const r = quantizeAffine(x, 256 * b, 16, 16, 3, 15, codes, sc, mins, spanS, spanM);
    for (let s = 0; s < 16; s++) out[p + s] = sc[s]! | (mins[s]! << 4);
    out.fill(0, p + 16, p + 80);
    // Element e = 128h + 32j + 16k + l -> bits 2j of qs[32h + 16k + l].
    for (let e = 0; e < 256; e++) {
      const h = e >> 7,
        j = (e >> 5) & 3,
        k = (e >> 4) & 1,
        l = e & 15;
      out[p + 16 + 32 * h + 16 * k + l]! |= codes[e]! << (2 * j);
    }
    putU16(out, p + 80, r.d);
    putU16(out, p + 82, r.dmin);
  }
}

function encodeQ3_K(x: Float32Array, nb: number, out: Uint8Array): void {
  const codes = new Int8Array(256),
    sc = new Int8Array(16),
    scale = new Float64Array(16);
  for (let b = 0; b < nb; b++) {
    const p = 110 * b;
    const d = quantizeSymmetric(x, 256 * b, 16, 16, -4, 3, 31, codes, sc, scale);
    out.fill(0, p, p + 108);
    // Element e = 128h + 32j + 16k + l: low 2 bits at bits 2j of qs[32h + 16k + l],
    // high bit (set for q >= 0) at bit 4h + j of hmask[16k + l]; stored value q + 4.
    for (let e = 0; e < 256; e++) {
      const h = e >> 7,
        j = (e >> 5) & 3,
        k = (e >> 4) & 1,
        l = e & 15;
      const u = codes[e]! + 4;
      out[p + 32 + 32 * h + 16 * k + l]! |= (u & 3) << (2 * j);
      out[p + 16 * k + l]! |= (u >> 2) << (4 * h + j);
    }
    // Scales stored as sc + 32 in 6 bits: low nibbles in bytes 0..7, high 2 bits in bytes 8..11.
    for (let i = 0; i < 16; i++) {
      const u = sc[i]! + 32;
      if (i < 8) out[p + 96 + i]! |= u & 15;
      else out[p + 96 + i - 8]! |= (u & 15) << 4;
      out[p + 104 + (i & 3)]! |= (u >> 4) << (2 * (i >> 2));
    }
    putU16(out, p + 108, d);
  }
}

function encodeQ6_K(x: Float32Array, nb: number, out: Uint8Array): void {
  const codes = new Int8Array(256),
    sc = new Int8Array(16),
    scale = new Float64Array(16);
  for (let b = 0; b < nb; b++) {
    const p = 210 * b;
    const d = quantizeSymmetric(x, 256 * b, 16, 16, -32, 31, 127, codes, sc, scale);
    out.fill(0, p, p + 192);
    // Element e = 128h + 32j + l: nibble (j>>1) of ql[64h + 32(j&1) + l], bits 2j of qh[32h + l].
    for (let e = 0; e < 256; e++) {
      const h = e >> 7,
        j = (e >> 5) & 3,
        l = e & 31;
      const u = codes[e]! + 32;
      out[p + 64 * h + 32 * (j & 1) + l]! |= (u & 15) << (4 * (j >> 1));
      out[p + 128 + 32 * h + l]! |= (u >> 4) << (2 * j);
    }
    for (let s = 0; s < 16; s++) out[p + 192 + s] = sc[s]! & 255;
    putU16(out, p + 208, d);
  }
}

const encoders = new Map<GGMLType, Encoder>([
  [GGMLType.F32, encodeF32],
  [GGMLType.F16, encodeF16],
  [GGMLType.BF16, encodeBF16],
  [GGMLType.Q4_0, encodeQ4_0],
  [GGMLType.Q4_1, encodeQ4_1],
  [GGMLType.Q5_0, encodeQ5_0],
  [GGMLType.Q5_1, encodeQ5_1],
  [GGMLType.Q8_0, encodeQ8_0],
  [GGMLType.MXFP4, encodeMXFP4],
  [GGMLType.IQ4_NL, encodeIQ4_NL],
  [GGMLType.IQ4_XS, encodeIQ4_XS],
  [GGMLType.Q2_K, encodeQ2_K],
  [GGMLType.Q3_K, encodeQ3_K],
  [GGMLType.Q4_K, encodeQ4_K],
  [GGMLType.Q5_K, encodeQ5_K],
  [GGMLType.Q6_K, encodeQ6_K],
]);

/** Whether `quantize` supports this type. */
export function canQuantize(type: GGMLType): boolean {
  return encoders.has(type);
}

/**
 * Encodes `src` (length a multiple of the type's block size) as `type`; returns the tensor bytes
 * ((src.length / blockSize) * bytesPerBlock). Throws RangeError for an unsupported type or a
 * length that is not a whole number of blocks.
 */
export function quantize(type: GGMLType, src: Float32Array): Uint8Array {
  const encode = encoders.get(type);
  if (!encode) {
    throw new RangeError(`quantize: unsupported type ${typeName(type)} (${type})`);
  }
  const info = requireQuantType(type);
  if (src.length % info.blockSize !== 0) {
    throw new RangeError(`quantize ${info.name}: ${src.length} elements is not a multiple of the block size ${info.blockSize}`);
  }
  const nBlocks = src.length / info.blockSize;
  const out = new Uint8Array(nBlocks * info.bytesPerBlock);
  if (nBlocks > 0) encode(src, nBlocks, out);
  return out;
}
