// Activations as ggml's CPU backend converts them before its dot products (shaders/reference/ggml-activations.ts is
// the TypeScript twin): Q8_0 (x86 quantize_row_q8_0: f16 scale amax/127, values × 127/amax rounded half to even) and
// Q8_K (quantize_row_q8_K_ref: f32 scale from the signed value of largest magnitude, bsums per 16), f16, bf16.
//
// ACT_Q8_0 record of a row of n: i16 q[n] in lane order (below), f32 d[n/32]. ACT_Q8_0_I8 (the relaxed build's Q8_0
// weights): the same, with q as i8 in element order in the first n of those 2n bytes.
// ACT_Q8_1 record (x86 quantize_row_q8_1): ACT_Q8_0's, then f32 s[n/32]: f16(f32(amax/127) · Σ q) decoded (the f32 d
// before its f16 rounding, as ggml's AVX2 code computes it). ACT_Q8_1_I8 (the relaxed build's Q4_1 and Q5_1): the same,
// with q as i8 in element order in the first n of its 2n bytes.
// ACT_Q8_K record: i16 q[n] in lane order, f32 d[n/256], i16 bsums[16 per block], i16 pairSums[8 per block]
// (bsums[2k] + bsums[2k+1]: the sums of the 32-element sub-blocks the mins of Q4_K and Q5_K multiply). The relaxed
// build (kinds.as RELAXED) holds q as i8 in element order in the first n of those 2n bytes instead; the rest is the same.
// Value records (ACT_F32 … ACT_Q8_K_VALUES): f32 values[n].
//
// Lane order: within each 16 elements, positions hold elements 0,1,4,5,8,9,12,13, 2,3,6,7,10,11,14,15. Then
// i32x4.dot_i16x8_s of the first 8 (weights × activations) gives the pair sums (0+1, 4+5, 8+9, 12+13) and of the
// last 8 the pairs (2+3, 6+7, 10+11, 14+15): their sum is the four 4-element groups ggml's AVX2 lanes hold.
import { ACT_Q8_0, ACT_Q8_0_I8, ACT_Q8_1, ACT_Q8_1_I8, ACT_Q8_K, ACT_F16, ACT_BF16, ACT_Q8_0_VALUES, ACT_Q8_K_VALUES, RELAXED, align16 } from './kinds';
import { f16ToF32, f32ToF16, roundF16, roundBf16 } from './ggml-float';

/** Position of element e in lane order. */
@inline
export function lanePos(e: i32): i32 {
  const k = e & 15;
  return (e & ~15) | ((k & 2) << 2) | ((k >> 2) << 1) | (k & 1);
}

export function actBytes(kind: i32, n: i32): usize {
  if (kind == ACT_Q8_0 || kind == ACT_Q8_0_I8) return align16(<usize>(2 * n + 4 * (n >> 5)));
  if (kind == ACT_Q8_1 || kind == ACT_Q8_1_I8) return align16(<usize>(2 * n + 8 * (n >> 5)));
  if (kind == ACT_Q8_K) return align16(<usize>(2 * n + 52 * (n >> 8)));
  return align16(<usize>(4 * n));
}

/** Converts the f32 row at src (n values) into the record at dst. */
export function quantizeRow(kind: i32, src: usize, n: i32, dst: usize): void {
  switch (kind) {
    case ACT_Q8_0:
      q8_0(src, n, dst, false, false, false);
      return;
    case ACT_Q8_0_I8:
      q8_0(src, n, dst, false, false, true);
      return;
    case ACT_Q8_1:
      q8_0(src, n, dst, false, true, false);
      return;
    case ACT_Q8_1_I8:
      q8_0(src, n, dst, false, true, true);
      return;
    case ACT_Q8_0_VALUES:
      q8_0(src, n, dst, true, false, false);
      return;
    case ACT_Q8_K:
      q8_K(src, n, dst, false);
      return;
    case ACT_Q8_K_VALUES:
      q8_K(src, n, dst, true);
      return;
    case ACT_F16:
      for (let i = 0; i < n; i++) store<f32>(dst + 4 * i, roundF16(load<f32>(src + 4 * i)));
      return;
    case ACT_BF16:
      for (let i = 0; i < n; i++) store<f32>(dst + 4 * i, roundBf16(load<f32>(src + 4 * i)));
      return;
    default:
      memory.copy(dst, src, 4 * n);
  }
}

/** Q8_0 (values: as f32 values; i8: q as i8 in element order), or with `withS` Q8_1 (its s after the d's). */
function q8_0(src: usize, n: i32, dst: usize, values: bool, withS: bool, i8: bool): void {
  const dOut = dst + 2 * n;
  const sOut = dOut + 4 * (n >> 5);
  for (let b = 0; b < n; b += 32) {
    let amax: f32 = 0;
    for (let i = b; i < b + 32; i++) amax = max<f32>(amax, abs<f32>(load<f32>(src + 4 * i)));
    const d0 = amax / <f32>127.0;
    const d = f16ToF32(f32ToF16(d0));
    const id: f32 = amax != 0 ? <f32>127.0 / amax : 0;
    let sum = 0;
    for (let i = b; i < b + 32; i++) {
      const q = <i32>nearest<f32>(load<f32>(src + 4 * i) * id);
      sum += q;
      if (values) store<f32>(dst + 4 * i, d * <f32>q);
      else if (i8) store<i8>(dst + i, <i8>q);
      else store<i16>(dst + 2 * lanePos(i), <i16>q);
    }
    if (!values) store<f32>(dOut + 4 * (b >> 5), d);
    // (|Σ q| ≤ 32 · 127: exact in f32; the product rounded to f32, then to f16, as ggml's GGML_FP32_TO_FP16(d · sum))
    if (withS) store<f32>(sOut + 4 * (b >> 5), f16ToF32(f32ToF16(d0 * <f32>sum)));
  }
}

function q8_K(src: usize, n: i32, dst: usize, values: bool): void {
  const nb = n >> 8;
  const dOut = dst + 2 * n;
  const bsOut = dOut + 4 * nb;
  const psOut = bsOut + 32 * nb;
  for (let b = 0; b < nb; b++) {
    const o = b << 8;
    let amax: f32 = 0;
    let mx: f32 = 0;
    for (let i = o; i < o + 256; i++) {
      const x = load<f32>(src + 4 * i);
      const a = abs<f32>(x);
      if (a > amax) {
        amax = a;
        mx = x;
      }
    }
    if (amax == 0) {
      if (values) memory.fill(dst + 4 * o, 0, 1024);
      else {
        if (RELAXED) memory.fill(dst + o, 0, 256);
        else memory.fill(dst + 2 * o, 0, 512);
        store<f32>(dOut + 4 * b, 0);
        memory.fill(bsOut + 32 * b, 0, 32);
        memory.fill(psOut + 16 * b, 0, 16);
      }
      continue;
    }
    const iscale: f32 = <f32>-127.0 / mx;
    const d: f32 = <f32>1.0 / iscale;
    for (let j = 0; j < 16; j++) {
      let sum = 0;
      for (let i = o + 16 * j; i < o + 16 * j + 16; i++) {
        const q = min<i32>(127, <i32>nearest<f32>(iscale * load<f32>(src + 4 * i)));
        sum += q;
        if (values) store<f32>(dst + 4 * i, d * <f32>q);
        else if (RELAXED) store<i8>(dst + i, <i8>q);
        else store<i16>(dst + 2 * lanePos(i), <i16>q);
      }
      if (!values) store<i16>(bsOut + 32 * b + 2 * j, <i16>sum);
    }
    if (!values) {
      store<f32>(dOut + 4 * b, d);
      for (let k = 0; k < 8; k++) {
        const s = <i32>load<i16>(bsOut + 32 * b + 4 * k) + <i32>load<i16>(bsOut + 32 * b + 4 * k + 2);
        store<i16>(psOut + 16 * b + 2 * k, <i16>s);
      }
    }
  }
}
