// Dot products of one decoded weight row (weight-rows.as) with one activation record (activations.as), each kind in
// the order of ggml's AVX2 vec_dot where the kind says so (kinds.as). harness/ggml-exact.ts is the TypeScript
// model of the same arithmetic; the wasm fallback's tests hold these to it bit for bit.
import { DOT_PLAIN, DOT_GGML_F32, DOT_GGML_F16, DOT_GGML_BF16, DOT_Q32, DOT_MX4, DOT_NL4, DOT_Q40, DOT_Q4K, DOT_Q5K, DOT_Q6K, DOT_Q32P, DOT_IQ4XS, DOT_IQ1S, DOT_Q1, DOT_IQ1M, DOT_Q2K, DOT_IQ2XS, DOT_IQ3XXS, DOT_Q50, DOT_Q41, DOT_Q51, RELAXED } from './kinds';
import { K_PARAMS, KVALUES_FP4, KVALUES_IQ4NL, e8m0Half } from './weight-rows';
import { IQ1S_GRID, IQ2XXS_GRID, IQ2XS_GRID, IQ3XXS_GRID, KEVEN_SIGNS, entryPair } from './iq-grids';
import { fmaPair, fmaPairExact, fma32, hsum8, f16ToF32, f16x4ToF32, usesFusedMadd } from './ggml-float';

/**
 * The token count a per-count copy of a multi-token dot stands for, from its type argument's size (u8: 1, u16: 2,
 * u32: 4). AssemblyScript has no constant generic parameters; with the count passed as a constant argument instead,
 * Binaryen's code folding merged the copies for 2, 3 and 4 tokens back into one body that tests the count in its inner
 * loop (and V8 then spills the accumulators around those tests). As a type the count is a constant of the source, so
 * every copy's branches fold before Binaryen sees them. Three tokens run as two and one.
 */
@inline
function tokens<C>(): i32 {
  return <i32>sizeof<C>();
}

/** Accumulators of ggml_vec_dot_f32 (4 × 8 lanes) as f64 holding f32 values. */
const ACC32 = memory.data(256, 16);
const T4 = memory.data(16, 16);
const ONE_ACT = memory.data(4, 4);
const ONE_OUT = memory.data(4, 4);

export function dot(kind: i32, w: usize, wp: usize, a: usize, n: i32): f32 {
  switch (kind) {
    case DOT_Q4K:
    case DOT_Q5K:
    case DOT_Q6K:
    case DOT_Q32:
    case DOT_Q32P:
    case DOT_IQ4XS:
    case DOT_IQ1S:
    case DOT_Q1:
    case DOT_Q2K:
      store<usize>(ONE_ACT, a);
      intDots(kind, w, wp, ONE_ACT, 1, n, ONE_OUT);
      return load<f32>(ONE_OUT);
    case DOT_IQ1M:
      store<usize>(ONE_ACT, a);
      iq1mDots(w, wp, ONE_ACT, 1, n, ONE_OUT);
      return load<f32>(ONE_OUT);
    case DOT_GGML_F16:
      return dotGgmlHalf(true, w, a, n);
    case DOT_GGML_BF16:
      return dotGgmlHalf(false, w, a, n);
    case DOT_GGML_F32:
      return dotGgmlF32(w, a, n);
    default:
      return dotPlain(w, a, n);
  }
}

/** Σ w·a in f32, four vectors of partial sums: 'exact' numerics, where only f32 summation error counts. */
function dotPlain(w: usize, a: usize, n: i32): f32 {
  let s0 = f32x4.splat(0);
  let s1 = s0;
  let s2 = s0;
  let s3 = s0;
  let i = 0;
  for (; i + 16 <= n; i += 16) {
    const o: usize = 4 * i;
    s0 = f32x4.add(s0, f32x4.mul(v128.load(w + o), v128.load(a + o)));
    s1 = f32x4.add(s1, f32x4.mul(v128.load(w + o, 16), v128.load(a + o, 16)));
    s2 = f32x4.add(s2, f32x4.mul(v128.load(w + o, 32), v128.load(a + o, 32)));
    s3 = f32x4.add(s3, f32x4.mul(v128.load(w + o, 48), v128.load(a + o, 48)));
  }
  const s = f32x4.add(f32x4.add(s0, s1), f32x4.add(s2, s3));
  let r = f32x4.extract_lane(s, 0) + f32x4.extract_lane(s, 1) + (f32x4.extract_lane(s, 2) + f32x4.extract_lane(s, 3));
  for (; i < n; i++) r += load<f32>(w + 4 * i) * load<f32>(a + 4 * i);
  return r;
}

/**
 * ggml_vec_dot_f16 (half) / ggml_vec_dot_bf16 on AVX2: 4 accumulators × 8 lanes over steps of 32 (the products of
 * two f16 or two bf16 values are exact in f32, so its fused multiply-adds are a product and a sum), reduced as
 * GGML_F32x8_REDUCE (f16) or the bf16 code's own adds, the leftovers added in double.
 */
function dotGgmlHalf(f16: bool, w: usize, a: usize, n: i32): f32 {
  let a0l = f32x4.splat(0);
  let a0h = a0l;
  let a1l = a0l;
  let a1h = a0l;
  let a2l = a0l;
  let a2h = a0l;
  let a3l = a0l;
  let a3h = a0l;
  const np = n & ~31;
  for (let i = 0; i < np; i += 32) {
    const o: usize = 4 * i;
    a0l = f32x4.add(a0l, f32x4.mul(v128.load(w + o), v128.load(a + o)));
    a0h = f32x4.add(a0h, f32x4.mul(v128.load(w + o, 16), v128.load(a + o, 16)));
    a1l = f32x4.add(a1l, f32x4.mul(v128.load(w + o, 32), v128.load(a + o, 32)));
    a1h = f32x4.add(a1h, f32x4.mul(v128.load(w + o, 48), v128.load(a + o, 48)));
    a2l = f32x4.add(a2l, f32x4.mul(v128.load(w + o, 64), v128.load(a + o, 64)));
    a2h = f32x4.add(a2h, f32x4.mul(v128.load(w + o, 80), v128.load(a + o, 80)));
    a3l = f32x4.add(a3l, f32x4.mul(v128.load(w + o, 96), v128.load(a + o, 96)));
    a3h = f32x4.add(a3h, f32x4.mul(v128.load(w + o, 112), v128.load(a + o, 112)));
  }
  const vl = f32x4.add(f32x4.add(a0l, a2l), f32x4.add(a1l, a3l));
  const vh = f32x4.add(f32x4.add(a0h, a2h), f32x4.add(a1h, a3h));
  const t = f32x4.add(vl, vh);
  const t0 = f32x4.extract_lane(t, 0);
  const t1 = f32x4.extract_lane(t, 1);
  const t2 = f32x4.extract_lane(t, 2);
  const t3 = f32x4.extract_lane(t, 3);
  let sum = f16 ? <f64>(t0 + t1 + (t2 + t3)) : <f64>(t0 + t2 + (t1 + t3));
  for (let i = np; i < n; i++) sum += <f64>(load<f32>(w + 4 * i) * load<f32>(a + 4 * i));
  return <f32>sum;
}

/** ggml_vec_dot_f32 on AVX2: fused multiply-adds into 4 × 8 lanes, GGML_F32x8_REDUCE, then the leftovers (n % 32) as a product and a sum (unfused, as the coordinator computes them: checked against linkcpp-expert-ref). */
function dotGgmlF32(w: usize, a: usize, n: i32): f32 {
  if (usesFusedMadd()) return dotGgmlF32Fused(w, a, n);
  for (let q = 0; q < 16; q++) v128.store(ACC32 + 16 * q, i32x4.splat(0));
  const np = n & ~31;
  for (let i = 0; i < np; i += 32) {
    for (let q = 0; q < 16; q++) {
      const o: usize = 4 * (i + 2 * q);
      const p = f64x2.mul(f64x2.promote_low_f32x4(v128.load64_zero(w + o)), f64x2.promote_low_f32x4(v128.load64_zero(a + o)));
      v128.store(ACC32 + 16 * q, fmaPair(p, v128.load(ACC32 + 16 * q)));
    }
  }
  const t = T4;
  for (let l = 0; l < 8; l++) {
    const s02 = <f32>load<f64>(ACC32 + 8 * l) + <f32>load<f64>(ACC32 + 8 * (16 + l));
    const s13 = <f32>load<f64>(ACC32 + 8 * (8 + l)) + <f32>load<f64>(ACC32 + 8 * (24 + l));
    const v = s02 + s13;
    if (l < 4) store<f32>(t + 4 * l, v);
    else store<f32>(t + 4 * (l - 4), load<f32>(t + 4 * (l - 4)) + v);
  }
  let sum = load<f32>(t) + load<f32>(t, 4) + (load<f32>(t, 8) + load<f32>(t, 12));
  for (let i = np; i < n; i++) sum += load<f32>(w + 4 * i) * load<f32>(a + 4 * i);
  return sum;
}

/**
 * dotGgmlF32 where relaxed_madd fuses (usesFusedMadd): the same 4 × 8 lanes, each accumulator's low and high four lanes
 * in a register of its own, ggml's FMA one instruction; GGML_F32x8_REDUCE as dotGgmlHalf's f16 case, the same tail.
 */
function dotGgmlF32Fused(w: usize, a: usize, n: i32): f32 {
  let a0l = f32x4.splat(0);
  let a0h = a0l;
  let a1l = a0l;
  let a1h = a0l;
  let a2l = a0l;
  let a2h = a0l;
  let a3l = a0l;
  let a3h = a0l;
  const np = n & ~31;
  for (let i = 0; i < np; i += 32) {
    const o: usize = 4 * i;
    a0l = f32x4.relaxed_madd(v128.load(w + o), v128.load(a + o), a0l);
    a0h = f32x4.relaxed_madd(v128.load(w + o, 16), v128.load(a + o, 16), a0h);
    a1l = f32x4.relaxed_madd(v128.load(w + o, 32), v128.load(a + o, 32), a1l);
    a1h = f32x4.relaxed_madd(v128.load(w + o, 48), v128.load(a + o, 48), a1h);
    a2l = f32x4.relaxed_madd(v128.load(w + o, 64), v128.load(a + o, 64), a2l);
    a2h = f32x4.relaxed_madd(v128.load(w + o, 80), v128.load(a + o, 80), a2h);
    a3l = f32x4.relaxed_madd(v128.load(w + o, 96), v128.load(a + o, 96), a3l);
    a3h = f32x4.relaxed_madd(v128.load(w + o, 112), v128.load(a + o, 112), a3h);
  }
  const t = f32x4.add(f32x4.add(f32x4.add(a0l, a2l), f32x4.add(a1l, a3l)), f32x4.add(f32x4.add(a0h, a2h), f32x4.add(a1h, a3h)));
  let sum = f32x4.extract_lane(t, 0) + f32x4.extract_lane(t, 1) + (f32x4.extract_lane(t, 2) + f32x4.extract_lane(t, 3));
  for (let i = np; i < n; i++) sum += load<f32>(w + 4 * i) * load<f32>(a + 4 * i);
  return sum;
}

/** Integer sums of 16 weights × 16 activations in lane order: the four 4-element groups of ggml's lanes. */
@inline
function lanes16(w0: v128, w1: v128, a: usize): v128 {
  return i32x4.add(i32x4.dot_i16x8_s(w0, v128.load(a)), i32x4.dot_i16x8_s(w1, v128.load(a, 16)));
}

/**
 * lanes16 for the 16 activations at i16 offset `o` of a record: i16 in lane order, or in the relaxed build's Q8_K
 * records (activations.as) i8 in element order, put in lane order here. In the relaxed build only IQ1_M (iq1mDots)
 * meets Q8_K records this way (every other integer type has a dot of its own there, so intDots runs in the simd
 * build only); `i8` is false for every kind of the other build.
 */
@inline
function lanesAt(i8: bool, w0: v128, w1: v128, a: usize, o: usize): v128 {
  if (!i8) return lanes16(w0, w1, a + o);
  const v = v128.load(a + (o >> 1));
  const q = i8x16.shuffle(v, v, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  return i32x4.add(i32x4.dot_i16x8_s(w0, i16x8.extend_low_i8x16_s(q)), i32x4.dot_i16x8_s(w1, i16x8.extend_high_i8x16_s(q)));
}

// Float accumulators of up to 4 tokens' integer dots, ACC_BYTES each: lanes 0-1, 2-3, 4-5, 6-7 (f64x2 holding f32
// values), Q4_K's min lanes 0-1, 2-3 at 64 and 80, Q5_K's scalar min sum (f32) at 96 (IQ1_S's shifts and Q4_1/Q5_1's
// summs there too); DOT_Q32P's second accumulator (odd blocks) at ACC2 as the first's (IQ1_M's shifts' lanes there
// too), and its scalar tail (an odd last block) at TAIL: f32 d, i32 sum, i32 present.
const ACC2: usize = 112;
const TAIL: usize = 176;
const ACC_BYTES = 192;
const FACC = memory.data(4 * ACC_BYTES, 16);
/** Zeroes the accumulators of `count` tokens (v128 stores: memory.fill is a call out of wasm in V8, per row). */
@inline
function clearAcc(count: i32): void {
  const z = i32x4.splat(0);
  for (let t = 0; t < count; t++) {
    const acc = FACC + ACC_BYTES * t;
    v128.store(acc, z);
    v128.store(acc, z, 16);
    v128.store(acc, z, 32);
    v128.store(acc, z, 48);
    v128.store(acc, z, 64);
    v128.store(acc, z, 80);
    v128.store(acc, z, 96);
    v128.store(acc, z, 112);
    v128.store(acc, z, 128);
    v128.store(acc, z, 144);
    v128.store(acc, z, 160);
    v128.store(acc, z, 176);
  }
}

/** 2^-100: a block scale below it takes the exact scalar path (an f64 sum can then be inexact and subnormal in f32). */
const TINY: f32 = 7.888609052210118e-31;

@inline
function halfway(s: v128): v128 {
  return i64x2.eq(v128.and(s, i64x2.splat(0x1fffffff)), i64x2.splat(0x10000000));
}

@inline
function rounded(s: v128): v128 {
  return f64x2.promote_low_f32x4(f32x4.demote_f64x2_zero(s));
}

/** The rare case of laneFma (an f64 sum on an f32 midpoint, or a tiny scale): every lane through the exact fma. */
function laneFmaSlow(acc: usize, p0: v128, p1: v128, p2: v128, p3: v128): void {
  v128.store(acc, fmaPairExact(p0, v128.load(acc)));
  v128.store(acc, fmaPairExact(p1, v128.load(acc, 16)), 16);
  v128.store(acc, fmaPairExact(p2, v128.load(acc, 32)), 32);
  v128.store(acc, fmaPairExact(p3, v128.load(acc, 48)), 48);
}

/** Any of the four f64x2 sums on an f32 midpoint: their low words (the 29 bits an f32 drops) checked at once. */
@inline
function anyHalfway(s0: v128, s1: v128, s2: v128, s3: v128): bool {
  const m = i32x4.splat(0x1fffffff);
  const h = i32x4.splat(0x10000000);
  const lo01 = v128.and(v128.shuffle<i32>(s0, s1, 0, 2, 4, 6), m);
  const lo23 = v128.and(v128.shuffle<i32>(s2, s3, 0, 2, 4, 6), m);
  return v128.any_true(v128.or(i32x4.eq(lo01, h), i32x4.eq(lo23, h)));
}

/** The high two i32 lanes as f64x2 (exact). */
@inline
function highF64(v: v128): v128 {
  return f64x2.convert_low_i32x4_s(v128.shuffle<i32>(v, v, 2, 3, 2, 3));
}

/**
 * acc[l] = fma(d, lane[l], acc[l]) for 8 lanes (ggml's per-block step), acc as four f64x2 at `acc`. ggml converts
 * each integer lane to f32 first; every kind's lanes stay below 2^24 in magnitude (Q6_K's after its bsum correction:
 * 8 · 4 · 128 · 32 · 127 < 2^24), so that conversion is exact and the lanes go to f64 directly.
 */
@inline
function laneFma(acc: usize, d: f32, l03: v128, l47: v128): void {
  const dd = f64x2.splat(<f64>d);
  const p0 = f64x2.mul(dd, f64x2.convert_low_i32x4_s(l03));
  const p1 = f64x2.mul(dd, highF64(l03));
  const p2 = f64x2.mul(dd, f64x2.convert_low_i32x4_s(l47));
  const p3 = f64x2.mul(dd, highF64(l47));
  const s0 = f64x2.add(p0, v128.load(acc));
  const s1 = f64x2.add(p1, v128.load(acc, 16));
  const s2 = f64x2.add(p2, v128.load(acc, 32));
  const s3 = f64x2.add(p3, v128.load(acc, 48));
  if (anyHalfway(s0, s1, s2, s3) || abs<f32>(d) < TINY) {
    laneFmaSlow(acc, p0, p1, p2, p3);
    return;
  }
  v128.store(acc, rounded(s0));
  v128.store(acc, rounded(s1), 16);
  v128.store(acc, rounded(s2), 32);
  v128.store(acc, rounded(s3), 48);
}

// The relaxed build's float steps where `f32x4.relaxed_madd` is one rounding (x86 with FMA3, ARM: what V8 emits
// there): ggml's _mm256_fmadd_ps is then one instruction per four lanes, bit for bit, instead of the f64 emulation
// above. The accumulators then hold f32x4: lanes 0-3 at 0, 4-7 at 16, Q4_K's four min lanes at 64, Q5_K's scalar
// min sum at 96. Where it is two roundings the kernel keeps the emulation.

// Whether it does: usesFusedMadd (ggml-float.as).

/** acc[l] = fma(d, lane[l], acc[l]) for four lanes at acc + off, the lanes converted to f32 first as ggml does. */
@inline
function maddLanes(acc: usize, off: usize, d: v128, l: v128): void {
  v128.store(acc + off, f32x4.relaxed_madd(d, f32x4.convert_i32x4_s(l), v128.load(acc + off)));
}

/** blockStep with fused relaxed_madd (f32x4 accumulators). */
@inline
function blockStepFused(kind: i32, acc: usize, l03: v128, l47: v128, a: usize, pp: usize, b: i32, n: i32): void {
  if (kind == DOT_Q32 || kind == DOT_Q1) {
    const d = f32x4.splat(load<f32>(pp) * load<f32>(a + 2 * n + 4 * b));
    maddLanes(acc, 0, d, l03);
    maddLanes(acc, 16, d, l47);
    if (kind == DOT_Q1) {
      const ys = load<f32>(a + 2 * n + 4 * (n >> 5) + 4 * b);
      const s = f32x4.relaxed_madd(f32x4.splat(load<f32>(pp, 4)), f32x4.splat(ys), f32x4.splat(load<f32>(acc, 96)));
      store<f32>(acc, f32x4.extract_lane(s, 0), 96);
    }
    return;
  }
  const nb = n >> 8;
  const ad = a + 2 * n;
  const yd = load<f32>(ad + 4 * b);
  const d = f32x4.splat(yd * load<f32>(pp));
  if (kind == DOT_IQ4XS) {
    maddLanes(acc, 0, d, l03);
    maddLanes(acc, 16, d, l47);
    return;
  }
  if (kind == DOT_Q2K) {
    // the mins first, into the same lanes: fma(−y.d · dmin, min · bsum pairs, acc)
    const bs = ad + 4 * nb + 32 * b;
    const dmin = f32x4.splat(-yd * load<f32>(pp, 4));
    maddLanes(acc, 0, dmin, i32x4.dot_i16x8_s(v128.load(pp, 16), v128.load(bs)));
    maddLanes(acc, 16, dmin, i32x4.dot_i16x8_s(v128.load(pp, 32), v128.load(bs, 16)));
    maddLanes(acc, 0, d, l03);
    maddLanes(acc, 16, d, l47);
    return;
  }
  if (kind == DOT_Q6K) {
    const bs = ad + 4 * nb + 32 * b;
    const c03 = i32x4.shl(i32x4.dot_i16x8_s(v128.load(pp, 16), v128.load(bs)), 5);
    const c47 = i32x4.shl(i32x4.dot_i16x8_s(v128.load(pp, 32), v128.load(bs, 16)), 5);
    maddLanes(acc, 0, d, i32x4.sub(l03, c03));
    maddLanes(acc, 16, d, i32x4.sub(l47, c47));
    return;
  }
  maddLanes(acc, 0, d, l03);
  maddLanes(acc, 16, d, l47);
  const dmin = f32x4.splat(-yd * load<f32>(pp, 4));
  const prod = i32x4.dot_i16x8_s(v128.load(pp, 16), v128.load(ad + 36 * nb + 16 * b));
  if (kind == DOT_Q5K || kind == DOT_IQ1S) {
    const mins = i32x4.extract_lane(prod, 0) + i32x4.extract_lane(prod, 1) + i32x4.extract_lane(prod, 2) + i32x4.extract_lane(prod, 3);
    const s = f32x4.relaxed_madd(dmin, f32x4.splat(<f32>mins), f32x4.splat(load<f32>(acc, 96)));
    store<f32>(acc, f32x4.extract_lane(s, 0), 96);
    return;
  }
  maddLanes(acc, 64, dmin, prod);
}

/** finish on blockStepFused's f32x4 accumulators: hsum_float_8 (lo + hi, then pairs), plus the mins. */
@inline
function finishFused(kind: i32, acc: usize): f32 {
  const s = f32x4.add(v128.load(acc), v128.load(acc, 16));
  const h = f32x4.extract_lane(s, 0) + f32x4.extract_lane(s, 2) + (f32x4.extract_lane(s, 1) + f32x4.extract_lane(s, 3));
  if (kind == DOT_Q5K || kind == DOT_IQ1S || kind == DOT_Q1) return h + load<f32>(acc, 96);
  if (kind != DOT_Q4K) return h;
  const m = v128.load(acc, 64);
  return h + (f32x4.extract_lane(m, 0) + f32x4.extract_lane(m, 2) + (f32x4.extract_lane(m, 1) + f32x4.extract_lane(m, 3)));
}

/**
 * DOT_Q32P's step (ggml_vec_dot_mxfp4_q8_0 on AVX2): even blocks into the first accumulator, odd ones into the second
 * (ACC2), each acc = fma(d, lane, acc); an odd last block is kept apart (TAIL) as one integer sum for finishPaired.
 */
@inline
function pairedStep(acc: usize, l03: v128, l47: v128, a: usize, pp: usize, b: i32, n: i32): void {
  const d = load<f32>(pp) * load<f32>(a + 2 * n + 4 * b);
  if ((b & 1) == 0 && b == (n >> 5) - 1) {
    const s = i32x4.add(l03, l47);
    store<f32>(acc + TAIL, d);
    store<i32>(acc + TAIL, i32x4.extract_lane(s, 0) + i32x4.extract_lane(s, 1) + i32x4.extract_lane(s, 2) + i32x4.extract_lane(s, 3), 4);
    store<i32>(acc + TAIL, 1, 8);
    return;
  }
  const at = acc + ((b & 1) != 0 ? ACC2 : 0);
  if (usesFusedMadd()) {
    const dd = f32x4.splat(d);
    maddLanes(at, 0, dd, l03);
    maddLanes(at, 16, dd, l47);
  } else {
    laneFma(at, d, l03, l47);
  }
}

/** DOT_Q32P's result: hsum_float_8 of the two accumulators' lane sums, then sumf = fma(d, Σ, sumf) for the tail. */
@inline
function finishPaired(acc: usize): f32 {
  let h: f32;
  if (usesFusedMadd()) {
    const s = f32x4.add(f32x4.add(v128.load(acc), v128.load(acc + ACC2)), f32x4.add(v128.load(acc, 16), v128.load(acc + ACC2, 16)));
    h = f32x4.extract_lane(s, 0) + f32x4.extract_lane(s, 2) + (f32x4.extract_lane(s, 1) + f32x4.extract_lane(s, 3));
  } else {
    h = hsum8(
      rounded(f64x2.add(v128.load(acc), v128.load(acc + ACC2))),
      rounded(f64x2.add(v128.load(acc, 16), v128.load(acc + ACC2, 16))),
      rounded(f64x2.add(v128.load(acc, 32), v128.load(acc + ACC2, 32))),
      rounded(f64x2.add(v128.load(acc, 48), v128.load(acc + ACC2, 48))),
    );
  }
  if (load<i32>(acc + TAIL, 8) != 0) h = fma32(load<f32>(acc + TAIL), <f32>load<i32>(acc + TAIL, 4), h);
  return h;
}

/** One block's float step for one token: Q6_K's bsum correction, the lane fmas, the mins. */
@inline
function blockStep(kind: i32, acc: usize, l03: v128, l47: v128, a: usize, pp: usize, b: i32, n: i32): void {
  if (kind == DOT_Q32P) {
    pairedStep(acc, l03, l47, a, pp, b, n);
    return;
  }
  if (usesFusedMadd()) {
    blockStepFused(kind, acc, l03, l47, a, pp, b, n);
    return;
  }
  if (kind == DOT_Q32) {
    laneFma(acc, load<f32>(pp) * load<f32>(a + 2 * n + 4 * b), l03, l47);
    return;
  }
  if (kind == DOT_Q1) {
    // summs += x.m · y.s (one vfmadd231ss in the build), then the lanes as DOT_Q32's
    store<f32>(acc, fma32(load<f32>(pp, 4), load<f32>(a + 2 * n + 4 * (n >> 5) + 4 * b), load<f32>(acc, 96)), 96);
    laneFma(acc, load<f32>(pp) * load<f32>(a + 2 * n + 4 * b), l03, l47);
    return;
  }
  const nb = n >> 8;
  const ad = a + 2 * n;
  const yd = load<f32>(ad + 4 * b);
  if (kind == DOT_IQ4XS) {
    laneFma(acc, yd * load<f32>(pp), l03, l47);
    return;
  }
  if (kind == DOT_Q2K) {
    const bs = ad + 4 * nb + 32 * b;
    laneFma(acc, -yd * load<f32>(pp, 4), i32x4.dot_i16x8_s(v128.load(pp, 16), v128.load(bs)), i32x4.dot_i16x8_s(v128.load(pp, 32), v128.load(bs, 16)));
    laneFma(acc, yd * load<f32>(pp), l03, l47);
    return;
  }
  if (kind == DOT_Q6K) {
    const bs = ad + 4 * nb + 32 * b;
    const c03 = i32x4.shl(i32x4.dot_i16x8_s(v128.load(pp, 16), v128.load(bs)), 5);
    const c47 = i32x4.shl(i32x4.dot_i16x8_s(v128.load(pp, 32), v128.load(bs, 16)), 5);
    laneFma(acc, yd * load<f32>(pp), i32x4.sub(l03, c03), i32x4.sub(l47, c47));
    return;
  }
  laneFma(acc, yd * load<f32>(pp), l03, l47);
  const dmin: f32 = -yd * load<f32>(pp, 4);
  const prod = i32x4.dot_i16x8_s(v128.load(pp, 16), v128.load(ad + 36 * nb + 16 * b));
  if (kind == DOT_Q5K || kind == DOT_IQ1S) {
    const mins = i32x4.extract_lane(prod, 0) + i32x4.extract_lane(prod, 1) + i32x4.extract_lane(prod, 2) + i32x4.extract_lane(prod, 3);
    store<f32>(acc, fma32(dmin, <f32>mins, load<f32>(acc, 96)), 96);
    return;
  }
  // (|prod| ≤ 2 · 63 · 32 · 127 < 2^24: exact in f32 as ggml converts it, so straight to f64)
  const dm = f64x2.splat(<f64>dmin);
  const p0 = f64x2.mul(dm, f64x2.convert_low_i32x4_s(prod));
  const p1 = f64x2.mul(dm, highF64(prod));
  const s0 = f64x2.add(p0, v128.load(acc, 64));
  const s1 = f64x2.add(p1, v128.load(acc, 80));
  if (v128.any_true(v128.or(halfway(s0), halfway(s1))) || abs<f32>(dmin) < TINY) {
    v128.store(acc, fmaPairExact(p0, v128.load(acc, 64)), 64);
    v128.store(acc, fmaPairExact(p1, v128.load(acc, 80)), 80);
  } else {
    v128.store(acc, rounded(s0), 64);
    v128.store(acc, rounded(s1), 80);
  }
}

/** The result of one token's integer dot from its accumulators: hsum_float_8, plus the mins (Q4_K, Q5_K). */
@inline
function finish(kind: i32, acc: usize): f32 {
  if (kind == DOT_Q32P) return finishPaired(acc);
  if (usesFusedMadd()) return finishFused(kind, acc);
  const h = hsum8(v128.load(acc), v128.load(acc, 16), v128.load(acc, 32), v128.load(acc, 48));
  if (kind == DOT_Q5K || kind == DOT_IQ1S || kind == DOT_Q1) return h + load<f32>(acc, 96);
  if (kind != DOT_Q4K) return h;
  const m01 = v128.load(acc, 64);
  const m23 = v128.load(acc, 80);
  const m =
    <f32>f64x2.extract_lane(m01, 0) +
    <f32>f64x2.extract_lane(m23, 0) +
    (<f32>f64x2.extract_lane(m01, 1) + <f32>f64x2.extract_lane(m23, 1));
  return h + m;
}

/** Bytes of one block's parameters in an integer row (weight-rows.as). */
@inline
function paramBytes(kind: i32): usize {
  if (kind == DOT_Q1) return 8;
  return kind == DOT_Q32 || kind == DOT_Q32P ? 4 : K_PARAMS;
}

/** 32-element runs per float step: one Q8_0 / Q4_0 / Q5_0 / Q4_1 / Q5_1 block, or the 8 sub-blocks of a super-block. */
@inline
function runsPerBlock(kind: i32): i32 {
  return kind == DOT_Q32 || kind == DOT_Q32P || kind == DOT_Q1 ? 1 : 8;
}

/**
 * One integer weight row (weight-rows.as intRow) against `count` activation records: for count = 4 the four tokens
 * share each load of weights. Record pointers at acts (usize each), results (f32) to out.
 */
export function intDots(kind: i32, w: usize, wp: usize, acts: usize, count: i32, n: i32, out: usize): void {
  clearAcc(count);
  const runs = runsPerBlock(kind);
  const nb = n / (32 * runs);
  const i8 = RELAXED && runs == 8;
  if (count == 4) {
    const a0 = load<usize>(acts);
    const a1 = load<usize>(acts, 4);
    const a2 = load<usize>(acts, 8);
    const a3 = load<usize>(acts, 12);
    for (let b = 0; b < nb; b++) {
      let x0 = i32x4.splat(0);
      let y0 = x0;
      let x1 = x0;
      let y1 = x0;
      let x2 = x0;
      let y2 = x0;
      let x3 = x0;
      let y3 = x0;
      for (let r = 0; r < runs; r++) {
        const o: usize = 64 * (b * runs + r);
        const w0 = v128.load(w + o);
        const w1 = v128.load(w + o, 16);
        const w2 = v128.load(w + o, 32);
        const w3 = v128.load(w + o, 48);
        x0 = i32x4.add(x0, lanesAt(i8, w0, w1, a0, o));
        y0 = i32x4.add(y0, lanesAt(i8, w2, w3, a0, o + 32));
        x1 = i32x4.add(x1, lanesAt(i8, w0, w1, a1, o));
        y1 = i32x4.add(y1, lanesAt(i8, w2, w3, a1, o + 32));
        x2 = i32x4.add(x2, lanesAt(i8, w0, w1, a2, o));
        y2 = i32x4.add(y2, lanesAt(i8, w2, w3, a2, o + 32));
        x3 = i32x4.add(x3, lanesAt(i8, w0, w1, a3, o));
        y3 = i32x4.add(y3, lanesAt(i8, w2, w3, a3, o + 32));
      }
      const pp = wp + paramBytes(kind) * b;
      blockStep(kind, FACC, x0, y0, a0, pp, b, n);
      blockStep(kind, FACC + ACC_BYTES, x1, y1, a1, pp, b, n);
      blockStep(kind, FACC + 2 * ACC_BYTES, x2, y2, a2, pp, b, n);
      blockStep(kind, FACC + 3 * ACC_BYTES, x3, y3, a3, pp, b, n);
    }
  } else {
    for (let t = 0; t < count; t++) {
      const a = load<usize>(acts + 4 * t);
      const acc = FACC + ACC_BYTES * t;
      for (let b = 0; b < nb; b++) {
        let x = i32x4.splat(0);
        let y = x;
        for (let r = 0; r < runs; r++) {
          const o: usize = 64 * (b * runs + r);
          x = i32x4.add(x, lanesAt(i8, v128.load(w + o), v128.load(w + o, 16), a, o));
          y = i32x4.add(y, lanesAt(i8, v128.load(w + o, 32), v128.load(w + o, 48), a, o + 32));
        }
        blockStep(kind, acc, x, y, a, wp + paramBytes(kind) * b, b, n);
      }
    }
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(kind, FACC + ACC_BYTES * t));
}

/**
 * ggml_vec_dot_iq1_m_q8_K (kinds.as DOT_IQ1M) on intRow's IQ1_M form against `count` activation records (Q8_K; the
 * relaxed build's i8 in element order): per super-block the grid values' 8 lanes and the shifts' 8 lanes (the second
 * i16 row at w + 2n), each through its own accumulator (the second at ACC2) with d = y.d · the f16 d; the result
 * hsum8(first) + 0.125 · hsum8(second). One token at a time (the row buffer stays in cache).
 */
export function iq1mDots(w: usize, wp: usize, acts: usize, count: i32, n: i32, out: usize): void {
  clearAcc(count);
  const nb = n >> 8;
  const c = w + 2 * <usize>n;
  for (let t = 0; t < count; t++) {
    const a = load<usize>(acts + 4 * t);
    const acc = FACC + ACC_BYTES * t;
    for (let b = 0; b < nb; b++) {
      let x = i32x4.splat(0);
      let y = x;
      let x2 = x;
      let y2 = x;
      for (let r = 0; r < 8; r++) {
        const o: usize = 64 * (8 * b + r);
        x = i32x4.add(x, lanesAt(RELAXED, v128.load(w + o), v128.load(w + o, 16), a, o));
        y = i32x4.add(y, lanesAt(RELAXED, v128.load(w + o, 32), v128.load(w + o, 48), a, o + 32));
        x2 = i32x4.add(x2, lanesAt(RELAXED, v128.load(c + o), v128.load(c + o, 16), a, o));
        y2 = i32x4.add(y2, lanesAt(RELAXED, v128.load(c + o, 32), v128.load(c + o, 48), a, o + 32));
      }
      const d = load<f32>(a + 2 * n + 4 * b) * load<f32>(wp + K_PARAMS * b);
      if (usesFusedMadd()) {
        const dd = f32x4.splat(d);
        maddLanes(acc, 0, dd, x);
        maddLanes(acc, 16, dd, y);
        maddLanes(acc + ACC2, 0, dd, x2);
        maddLanes(acc + ACC2, 16, dd, y2);
      } else {
        laneFma(acc, d, x, y);
        laneFma(acc + ACC2, d, x2, y2);
      }
    }
    let h1: f32;
    let h2: f32;
    if (usesFusedMadd()) {
      const s1 = f32x4.add(v128.load(acc), v128.load(acc, 16));
      const s2 = f32x4.add(v128.load(acc + ACC2), v128.load(acc + ACC2, 16));
      h1 = f32x4.extract_lane(s1, 0) + f32x4.extract_lane(s1, 2) + (f32x4.extract_lane(s1, 1) + f32x4.extract_lane(s1, 3));
      h2 = f32x4.extract_lane(s2, 0) + f32x4.extract_lane(s2, 2) + (f32x4.extract_lane(s2, 1) + f32x4.extract_lane(s2, 3));
    } else {
      h1 = hsum8(v128.load(acc), v128.load(acc, 16), v128.load(acc, 32), v128.load(acc, 48));
      const a2 = acc + ACC2;
      h2 = hsum8(v128.load(a2), v128.load(a2, 16), v128.load(a2, 32), v128.load(a2, 48));
    }
    store<f32>(out + 4 * t, h1 + <f32>0.125 * h2);
  }
}

/** 1 in every i16 lane, loaded once before a loop (a constant V8 would build again at every use). */
const ONES_I16 = memory.data<u16>([1, 1, 1, 1, 1, 1, 1, 1], 16);

/**
 * 16 Q8_0 weights against 16 activations (i8 at a) as ggml's AVX2 mul_sum_i8_pairs: |x| (ax) against y with x's
 * sign (y ^ m − m: −y where m, x < 0, is all ones; where x = 0 its |x| makes the product 0), pmaddubsw, then the
 * pairs summed by pmaddwd with ones: lane l = Σ of the products of elements 4l..4l+3.
 */
@inline
function q80Lanes(ax: v128, m: v128, a: usize, ones: v128): v128 {
  const y = v128.load(a);
  return i32x4.dot_i16x8_s(i16x8.relaxed_dot_i8x16_i7x16_s(i8x16.sub(v128.xor(y, m), m), ax), ones);
}

/**
 * The relaxed build's Q8_0 dot (kinds.as DOT_Q80): one weight row read in place from its GGUF blocks (f16 d, then 32
 * i8) against up to 4 tokens' ACT_Q8_0_I8 records (i8 in element order, f32 d at a + 2n), the tokens sharing each
 * load of weights. The lanes are DOT_Q32's (intDots), so are the float steps (acc = fma(x.d · y.d, lane, acc), in
 * registers where relaxed_madd fuses) and the sum (finish), bit for bit. relaxed_dot_i8x16_i7x16_s is exact here
 * because |x| ≤ 127 in every block llama.cpp's quantizer writes; a −128 (|x| = 128, the top bit set) is read as 128
 * on x86, where V8 emits pmaddubsw as ggml does, and is implementation-defined elsewhere.
 */
export function q80Dots(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) q80DotsOf<u8>(w, acts, n, out);
  else if (count == 2) q80DotsOf<u16>(w, acts, n, out);
  else if (count == 3) {
    q80DotsOf<u16>(w, acts, n, out);
    q80DotsOf<u8>(w, acts + 8, n, out + 8);
  } else q80DotsOf<u32>(w, acts, n, out);
}

/** q80Dots for tokens<C>() tokens, inlined once per count so its branches fold away. */
@inline
function q80DotsOf<C>(w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  const nb = n >> 5;
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  const d0 = a0 + 2 * <usize>n;
  const d1 = a1 + 2 * <usize>n;
  const d2 = a2 + 2 * <usize>n;
  const d3 = a3 + 2 * <usize>n;
  const ones = v128.load(ONES_I16);
  const zero = i32x4.splat(0);
  if (usesFusedMadd()) {
    let s0 = f32x4.splat(0);
    let t0 = s0;
    let s1 = s0;
    let t1 = s0;
    let s2 = s0;
    let t2 = s0;
    let s3 = s0;
    let t3 = s0;
    let p = w;
    for (let b = 0; b < nb; b++) {
      const wd = f16ToF32(<u32>load<u16>(p));
      const x0 = v128.load(p, 2);
      const x1 = v128.load(p, 18);
      const ax0 = i8x16.abs(x0);
      const ax1 = i8x16.abs(x1);
      const m0 = i8x16.lt_s(x0, zero);
      const m1 = i8x16.lt_s(x1, zero);
      const o: usize = 32 * b;
      const e: usize = 4 * b;
      let d = f32x4.splat(wd * load<f32>(d0 + e));
      s0 = f32x4.relaxed_madd(d, f32x4.convert_i32x4_s(q80Lanes(ax0, m0, a0 + o, ones)), s0);
      t0 = f32x4.relaxed_madd(d, f32x4.convert_i32x4_s(q80Lanes(ax1, m1, a0 + o + 16, ones)), t0);
      if (count > 1) {
        d = f32x4.splat(wd * load<f32>(d1 + e));
        s1 = f32x4.relaxed_madd(d, f32x4.convert_i32x4_s(q80Lanes(ax0, m0, a1 + o, ones)), s1);
        t1 = f32x4.relaxed_madd(d, f32x4.convert_i32x4_s(q80Lanes(ax1, m1, a1 + o + 16, ones)), t1);
      }
      if (count > 2) {
        d = f32x4.splat(wd * load<f32>(d2 + e));
        s2 = f32x4.relaxed_madd(d, f32x4.convert_i32x4_s(q80Lanes(ax0, m0, a2 + o, ones)), s2);
        t2 = f32x4.relaxed_madd(d, f32x4.convert_i32x4_s(q80Lanes(ax1, m1, a2 + o + 16, ones)), t2);
      }
      if (count > 3) {
        d = f32x4.splat(wd * load<f32>(d3 + e));
        s3 = f32x4.relaxed_madd(d, f32x4.convert_i32x4_s(q80Lanes(ax0, m0, a3 + o, ones)), s3);
        t3 = f32x4.relaxed_madd(d, f32x4.convert_i32x4_s(q80Lanes(ax1, m1, a3 + o + 16, ones)), t3);
      }
      p += 34;
    }
    // finishFused's hsum_float_8 on each token's two halves
    v128.store(FACC, s0);
    v128.store(FACC, t0, 16);
    if (count > 1) {
      v128.store(FACC + ACC_BYTES, s1);
      v128.store(FACC + ACC_BYTES, t1, 16);
    }
    if (count > 2) {
      v128.store(FACC + 2 * ACC_BYTES, s2);
      v128.store(FACC + 2 * ACC_BYTES, t2, 16);
    }
    if (count > 3) {
      v128.store(FACC + 3 * ACC_BYTES, s3);
      v128.store(FACC + 3 * ACC_BYTES, t3, 16);
    }
  } else {
    clearAcc(count);
    let p = w;
    for (let b = 0; b < nb; b++) {
      const wd = f16ToF32(<u32>load<u16>(p));
      const x0 = v128.load(p, 2);
      const x1 = v128.load(p, 18);
      const ax0 = i8x16.abs(x0);
      const ax1 = i8x16.abs(x1);
      const m0 = i8x16.lt_s(x0, zero);
      const m1 = i8x16.lt_s(x1, zero);
      const o: usize = 32 * b;
      const e: usize = 4 * b;
      laneFma(FACC, wd * load<f32>(d0 + e), q80Lanes(ax0, m0, a0 + o, ones), q80Lanes(ax1, m1, a0 + o + 16, ones));
      if (count > 1) laneFma(FACC + ACC_BYTES, wd * load<f32>(d1 + e), q80Lanes(ax0, m0, a1 + o, ones), q80Lanes(ax1, m1, a1 + o + 16, ones));
      if (count > 2) laneFma(FACC + 2 * ACC_BYTES, wd * load<f32>(d2 + e), q80Lanes(ax0, m0, a2 + o, ones), q80Lanes(ax1, m1, a2 + o + 16, ones));
      if (count > 3) laneFma(FACC + 3 * ACC_BYTES, wd * load<f32>(d3 + e), q80Lanes(ax0, m0, a3 + o, ones), q80Lanes(ax1, m1, a3 + o + 16, ones));
      p += 34;
    }
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(DOT_Q32, FACC + ACC_BYTES * t));
}

/** A block's weight scale (f32) where pairedStep and blockStep read it, Q4_1's and Q5_1's m (f32) after it; written by q4tDots and qnDots. */
const Q4T_D = memory.data(8, 8);
/** Q4_0's nibbles minus 8, as a lookup table for q4tDots (ggml subtracts 8 from each byte). */
const KVALUES_Q40 = memory.data<i8>([-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7], 16);

/**
 * The relaxed build's dots of the 4-bit types whose nibbles index a table (kinds.as DOT_MX4: MXFP4's kvalues_mxfp4,
 * DOT_NL4: IQ4_NL's kvalues_iq4nl, DOT_Q40: Q4_0's nibble − 8): one weight row read in place from its GGUF blocks
 * (MXFP4: the E8M0 exponent, then 16 bytes of nibbles; IQ4_NL and Q4_0: f16 d, then the nibbles) against up to 4
 * tokens' ACT_Q8_0_I8 records, the tokens sharing each block's unpacking. As ggml's AVX2 code: the low nibbles
 * (elements 0..15) and high nibbles (16..31) as i8 (_mm_shuffle_epi8 on the table, or bytes_from_nibbles_32 minus 8;
 * here a swizzle whose indices are all in 0..15), then mul_sum_i8_pairs as q80Lanes computes it (every value's
 * |x| ≤ 127: relaxed dot is exact), so DOT_Q32P's and DOT_Q32's lanes; the float steps and the sums are theirs
 * (MXFP4 and IQ4_NL in pairs with a scalar tail: pairedStep, finishPaired; Q4_0 blockStep), bit for bit.
 */
export function q4tDots(kind: i32, w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (kind == DOT_MX4) q4tDotsKind(DOT_MX4, w, acts, count, n, out);
  else if (kind == DOT_NL4) q4tDotsKind(DOT_NL4, w, acts, count, n, out);
  else q4tDotsKind(DOT_Q40, w, acts, count, n, out);
}

@inline
function q4tDotsKind(kind: i32, w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) q4tDotsOf<u8>(kind, w, acts, n, out);
  else if (count == 2) q4tDotsOf<u16>(kind, w, acts, n, out);
  else if (count == 3) {
    q4tDotsOf<u16>(kind, w, acts, n, out);
    q4tDotsOf<u8>(kind, w, acts + 8, n, out + 8);
  } else q4tDotsOf<u32>(kind, w, acts, n, out);
}

/** One q4tDots step: DOT_Q32P's paired step for MXFP4 and IQ4_NL, DOT_Q32's for Q4_0. */
@inline
function q4tStep(kind: i32, acc: usize, l03: v128, l47: v128, a: usize, b: i32, n: i32): void {
  if (kind == DOT_Q40) blockStep(DOT_Q32, acc, l03, l47, a, Q4T_D, b, n);
  else pairedStep(acc, l03, l47, a, Q4T_D, b, n);
}

/** Bit j of each byte j % 8 (bytes_from_bits_32's mask). */
const BIT_OF_BYTE = memory.data<u8>([1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128], 16);
/** Which byte of qh each of elements 0-15 (bytes 0, 1) and 16-31 (bytes 2, 3) reads its fifth bit from. */
const QH_LOW = memory.data<u8>([0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1], 16);
const QH_HIGH = memory.data<u8>([2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3], 16);

/** 0xff in byte j where bit j of the 16 bits of qh (v: qh splat) that sel picks is set (ggml's bytes_from_bits_32). */
@inline
function fifthBits(v: v128, sel: v128, bits: v128): v128 {
  return i8x16.eq(v128.and(i8x16.swizzle(v, sel), bits), bits);
}

/**
 * Q5_0's (signed: nibble − 16 where the fifth bit is clear, as ggml's andnot with 0xF0) or Q5_1's (unsigned: nibble
 * + 16 where it is set) 16 quants of a half, from its nibbles and its fifth bits' 0xff mask.
 */
@inline
function withFifth(signed: bool, nib: v128, set: v128): v128 {
  return signed ? v128.or(nib, v128.andnot(i8x16.splat(<i8>0xf0), set)) : v128.or(nib, v128.and(set, i8x16.splat(16)));
}

/** Lanes of unsigned quants u (at most 31) against 16 i8 activations at a: pmaddubsw, then pmaddwd with ones. */
@inline
function u8Lanes(u: v128, a: usize, ones: v128): v128 {
  return i32x4.dot_i16x8_s(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(a), u), ones);
}

/**
 * The relaxed build's Q5_0, Q4_1 and Q5_1 dots (kinds.as DOT_Q50, DOT_Q41, DOT_Q51): one weight row read in place
 * from its GGUF blocks (f16 d, Q4_1's and Q5_1's f16 m, Q5's u32 qh with element j's fifth bit in bit j, 16 bytes of
 * nibbles: element j low, j + 16 high) against up to 4 tokens' ACT_Q8_0_I8 (Q5_0) or ACT_Q8_1_I8 records, the
 * tokens sharing each block's unpacking. As ggml's AVX2 code: Q5_0's quants signed (nibble − 16 where the fifth bit
 * is clear) through q80Lanes' sign trick, Q4_1's and Q5_1's unsigned (0..31) straight into pmaddubsw; DOT_Q32's
 * (Q5_0) or DOT_Q1's float steps and sums, which the simd build reads their intRow form with: the same bits.
 * (Separate from q4tDots so that neither function's inlined copies make one body too large for the optimiser.)
 */
export function qnDots(kind: i32, w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (kind == DOT_Q50) qnDotsQ50(w, acts, count, n, out);
  else if (kind == DOT_Q41) qnDotsQ41(w, acts, count, n, out);
  else qnDotsQ51(w, acts, count, n, out);
}

function qnDotsQ50(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  qnDotsKind(DOT_Q50, w, acts, count, n, out);
}

function qnDotsQ41(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  qnDotsKind(DOT_Q41, w, acts, count, n, out);
}

function qnDotsQ51(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  qnDotsKind(DOT_Q51, w, acts, count, n, out);
}

@inline
function qnDotsKind(kind: i32, w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) qnDotsOf<u8>(kind, w, acts, n, out);
  else if (count == 2) qnDotsOf<u16>(kind, w, acts, n, out);
  else if (count == 3) {
    qnDotsOf<u16>(kind, w, acts, n, out);
    qnDotsOf<u8>(kind, w, acts + 8, n, out + 8);
  } else qnDotsOf<u32>(kind, w, acts, n, out);
}

/** One qnDots step: DOT_Q1's (Q4_1, Q5_1: the mins too) or DOT_Q32's (Q5_0). */
@inline
function qnStep(mins: bool, acc: usize, l03: v128, l47: v128, a: usize, b: i32, n: i32): void {
  blockStep(mins ? DOT_Q1 : DOT_Q32, acc, l03, l47, a, Q4T_D, b, n);
}

/** qnDots for one kind and tokens<C>() tokens, inlined once per pair so its branches fold away. */
@inline
function qnDotsOf<C>(kind: i32, w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  const five = kind == DOT_Q50 || kind == DOT_Q51;
  const mins = kind == DOT_Q41 || kind == DOT_Q51;
  const nb = n >> 5;
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  const m15 = v128.load(NIBBLE);
  const ones = v128.load(ONES_I16);
  const bits = v128.load(BIT_OF_BYTE);
  const qhLow = v128.load(QH_LOW);
  const qhHigh = v128.load(QH_HIGH);
  const zero = i32x4.splat(0);
  const bytes: usize = kind == DOT_Q41 ? 20 : kind == DOT_Q50 ? 22 : 24;
  const qsAt: usize = mins ? (five ? 8 : 4) : 6;
  if (count == 1 && usesFusedMadd()) {
    // One token (decode) where relaxed_madd fuses: blockStepFused's steps with the lanes' accumulators (and Q4_1's
    // and Q5_1's summs, lane 0) in registers; finishFused's sum
    let e0 = f32x4.splat(0);
    let e1 = e0;
    let summs = e0;
    const ad = a0 + 2 * <usize>n;
    const as = ad + 4 * <usize>nb;
    let p = w;
    for (let b = 0; b < nb; b++) {
      const q = v128.load(p + qsAt);
      let x0 = lowNibbles(q, m15);
      let x1 = highNibbles(q, m15);
      if (five) {
        const qh = i32x4.splat(load<u32>(p + (mins ? 4 : 2)));
        x0 = withFifth(!mins, x0, fifthBits(qh, qhLow, bits));
        x1 = withFifth(!mins, x1, fifthBits(qh, qhHigh, bits));
      }
      const o: usize = 32 * b;
      const l03 = mins ? u8Lanes(x0, a0 + o, ones) : q80Lanes(i8x16.abs(x0), i8x16.lt_s(x0, zero), a0 + o, ones);
      const l47 = mins ? u8Lanes(x1, a0 + o + 16, ones) : q80Lanes(i8x16.abs(x1), i8x16.lt_s(x1, zero), a0 + o + 16, ones);
      const dd = f32x4.splat(f16ToF32(<u32>load<u16>(p)) * load<f32>(ad + 4 * <usize>b));
      e0 = f32x4.relaxed_madd(dd, f32x4.convert_i32x4_s(l03), e0);
      e1 = f32x4.relaxed_madd(dd, f32x4.convert_i32x4_s(l47), e1);
      if (mins) summs = f32x4.relaxed_madd(f32x4.splat(f16ToF32(<u32>load<u16>(p, 2))), f32x4.splat(load<f32>(as + 4 * <usize>b)), summs);
      p += bytes;
    }
    const sum = f32x4.add(e0, e1);
    const h = f32x4.extract_lane(sum, 0) + f32x4.extract_lane(sum, 2) + (f32x4.extract_lane(sum, 1) + f32x4.extract_lane(sum, 3));
    store<f32>(out, mins ? h + f32x4.extract_lane(summs, 0) : h);
    return;
  }
  clearAcc(count);
  let p = w;
  for (let b = 0; b < nb; b++) {
    store<f32>(Q4T_D, f16ToF32(<u32>load<u16>(p)));
    if (mins) store<f32>(Q4T_D, f16ToF32(<u32>load<u16>(p, 2)), 4);
    const q = v128.load(p + qsAt);
    let x0 = lowNibbles(q, m15);
    let x1 = highNibbles(q, m15);
    if (five) {
      const qh = i32x4.splat(load<u32>(p + (mins ? 4 : 2)));
      x0 = withFifth(!mins, x0, fifthBits(qh, qhLow, bits));
      x1 = withFifth(!mins, x1, fifthBits(qh, qhHigh, bits));
    }
    const o: usize = 32 * b;
    if (mins) {
      qnStep(mins, FACC, u8Lanes(x0, a0 + o, ones), u8Lanes(x1, a0 + o + 16, ones), a0, b, n);
      if (count > 1) qnStep(mins, FACC + ACC_BYTES, u8Lanes(x0, a1 + o, ones), u8Lanes(x1, a1 + o + 16, ones), a1, b, n);
      if (count > 2) qnStep(mins, FACC + 2 * ACC_BYTES, u8Lanes(x0, a2 + o, ones), u8Lanes(x1, a2 + o + 16, ones), a2, b, n);
      if (count > 3) qnStep(mins, FACC + 3 * ACC_BYTES, u8Lanes(x0, a3 + o, ones), u8Lanes(x1, a3 + o + 16, ones), a3, b, n);
    } else {
      const ax0 = i8x16.abs(x0);
      const ax1 = i8x16.abs(x1);
      const m0 = i8x16.lt_s(x0, zero);
      const m1 = i8x16.lt_s(x1, zero);
      qnStep(mins, FACC, q80Lanes(ax0, m0, a0 + o, ones), q80Lanes(ax1, m1, a0 + o + 16, ones), a0, b, n);
      if (count > 1) qnStep(mins, FACC + ACC_BYTES, q80Lanes(ax0, m0, a1 + o, ones), q80Lanes(ax1, m1, a1 + o + 16, ones), a1, b, n);
      if (count > 2) qnStep(mins, FACC + 2 * ACC_BYTES, q80Lanes(ax0, m0, a2 + o, ones), q80Lanes(ax1, m1, a2 + o + 16, ones), a2, b, n);
      if (count > 3) qnStep(mins, FACC + 3 * ACC_BYTES, q80Lanes(ax0, m0, a3 + o, ones), q80Lanes(ax1, m1, a3 + o + 16, ones), a3, b, n);
    }
    p += bytes;
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(mins ? DOT_Q1 : DOT_Q32, FACC + ACC_BYTES * t));
}

/** q4tDots for one kind and tokens<C>() tokens, inlined once per pair so its branches fold away. */
@inline
function q4tDotsOf<C>(kind: i32, w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  const mx = kind == DOT_MX4;
  const nb = n >> 5;
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  const kv = v128.load(mx ? KVALUES_FP4 : kind == DOT_NL4 ? KVALUES_IQ4NL : KVALUES_Q40);
  const m15 = v128.load(NIBBLE);
  const ones = v128.load(ONES_I16);
  const zero = i32x4.splat(0);
  const bytes: usize = mx ? 17 : 18;
  if (count == 1 && usesFusedMadd()) {
    // One token (decode) where relaxed_madd fuses: the steps in registers, the blocks in pairs as ggml's loop takes
    // them (even blocks into e, odd into o; an odd last block as one integer sum), then finishPaired's / finishFused's sum.
    let e0 = f32x4.splat(0);
    let e1 = e0;
    let o0 = e0;
    let o1 = e0;
    let tailD: f32 = 0;
    let tailSum = 0;
    const ad = a0 + 2 * <usize>n;
    let p = w;
    for (let b = 0; b < nb; b++) {
      const wd = mx ? e8m0Half(<u32>load<u8>(p)) : f16ToF32(<u32>load<u16>(p));
      const q = v128.load(p + (mx ? 1 : 2));
      const x0 = i8x16.relaxed_swizzle(kv, lowNibbles(q, m15));
      const x1 = i8x16.relaxed_swizzle(kv, highNibbles(q, m15));
      const o: usize = 32 * b;
      const l03 = q80Lanes(i8x16.abs(x0), i8x16.lt_s(x0, zero), a0 + o, ones);
      const l47 = q80Lanes(i8x16.abs(x1), i8x16.lt_s(x1, zero), a0 + o + 16, ones);
      const d = wd * load<f32>(ad + 4 * <usize>b);
      if (kind == DOT_Q40 || (b & 1) == 0) {
        if (kind != DOT_Q40 && b == nb - 1) {
          const t = i32x4.add(l03, l47);
          tailD = d;
          tailSum = i32x4.extract_lane(t, 0) + i32x4.extract_lane(t, 1) + i32x4.extract_lane(t, 2) + i32x4.extract_lane(t, 3);
        } else {
          const dd = f32x4.splat(d);
          e0 = f32x4.relaxed_madd(dd, f32x4.convert_i32x4_s(l03), e0);
          e1 = f32x4.relaxed_madd(dd, f32x4.convert_i32x4_s(l47), e1);
        }
      } else {
        const dd = f32x4.splat(d);
        o0 = f32x4.relaxed_madd(dd, f32x4.convert_i32x4_s(l03), o0);
        o1 = f32x4.relaxed_madd(dd, f32x4.convert_i32x4_s(l47), o1);
      }
      p += bytes;
    }
    const sum = kind == DOT_Q40 ? f32x4.add(e0, e1) : f32x4.add(f32x4.add(e0, o0), f32x4.add(e1, o1));
    let h = f32x4.extract_lane(sum, 0) + f32x4.extract_lane(sum, 2) + (f32x4.extract_lane(sum, 1) + f32x4.extract_lane(sum, 3));
    if (kind != DOT_Q40 && (nb & 1) != 0) h = fma32(tailD, <f32>tailSum, h);
    store<f32>(out, h);
    return;
  }
  clearAcc(count);
  let p = w;
  for (let b = 0; b < nb; b++) {
    store<f32>(Q4T_D, mx ? e8m0Half(<u32>load<u8>(p)) : f16ToF32(<u32>load<u16>(p)));
    const q = v128.load(p + (mx ? 1 : 2));
    const x0 = i8x16.relaxed_swizzle(kv, lowNibbles(q, m15));
    const x1 = i8x16.relaxed_swizzle(kv, highNibbles(q, m15));
    const ax0 = i8x16.abs(x0);
    const ax1 = i8x16.abs(x1);
    const m0 = i8x16.lt_s(x0, zero);
    const m1 = i8x16.lt_s(x1, zero);
    const o: usize = 32 * b;
    q4tStep(kind, FACC, q80Lanes(ax0, m0, a0 + o, ones), q80Lanes(ax1, m1, a0 + o + 16, ones), a0, b, n);
    if (count > 1) q4tStep(kind, FACC + ACC_BYTES, q80Lanes(ax0, m0, a1 + o, ones), q80Lanes(ax1, m1, a1 + o + 16, ones), a1, b, n);
    if (count > 2) q4tStep(kind, FACC + 2 * ACC_BYTES, q80Lanes(ax0, m0, a2 + o, ones), q80Lanes(ax1, m1, a2 + o + 16, ones), a2, b, n);
    if (count > 3) q4tStep(kind, FACC + 3 * ACC_BYTES, q80Lanes(ax0, m0, a3 + o, ones), q80Lanes(ax1, m1, a3 + o + 16, ones), a3, b, n);
    p += bytes;
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, kind == DOT_Q40 ? finish(DOT_Q32, FACC + ACC_BYTES * t) : finishPaired(FACC + ACC_BYTES * t));
}

/** Q4_K's block parameters as blockStep reads them (d, dmin, mins), rebuilt per super-block by q4kDots. */
const Q4K_PARAMS = memory.data(K_PARAMS, 16);

@inline
function scaleMin(sb: usize, j: i32): i32 {
  if (j < 4) return (<i32>load<u8>(sb + j) & 63) | ((<i32>load<u8>(sb + j + 4) & 63) << 8);
  const a = <i32>load<u8>(sb + j + 4);
  return ((a & 15) | ((<i32>load<u8>(sb + j - 4) >> 6) << 4)) | (((a >> 4) | ((<i32>load<u8>(sb + j) >> 6) << 4)) << 8);
}

@inline
function byLanes(v: v128): v128 {
  return i8x16.shuffle(v, v, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
}

/**
 * ggml_vec_dot_q4_K_q8_K straight from a row's GGUF bytes (no row buffer): each super-block's quants are widened
 * and scaled in registers and met with up to 4 tokens' activations at once; the same integers and float steps as
 * intDots on intRow's form, so the same bits.
 */
export function q4kDots(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) q4kDotsOf<u8>(w, acts, n, out);
  else if (count == 2) q4kDotsOf<u16>(w, acts, n, out);
  else if (count == 3) {
    q4kDotsOf<u16>(w, acts, n, out);
    q4kDotsOf<u8>(w, acts + 8, n, out + 8);
  } else q4kDotsOf<u32>(w, acts, n, out);
}

/** q4kDots for tokens<C>() tokens, inlined once per count so its branches fold away. */
@inline
function q4kDotsOf<C>(w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  clearAcc(count);
  const nb = n >> 8;
  const m15 = i8x16.splat(15);
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  for (let b = 0; b < nb; b++) {
    const p = w + 144 * b;
    store<f32>(Q4K_PARAMS, f16ToF32(<u32>load<u16>(p)));
    store<f32>(Q4K_PARAMS, f16ToF32(<u32>load<u16>(p, 2)), 4);
    let x0 = i32x4.splat(0);
    let y0 = x0;
    let x1 = x0;
    let y1 = x0;
    let x2 = x0;
    let y2 = x0;
    let x3 = x0;
    let y3 = x0;
    for (let jj = 0; jj < 4; jj++) {
      const sm0 = scaleMin(p + 4, 2 * jj);
      const sm1 = scaleMin(p + 4, 2 * jj + 1);
      store<i16>(Q4K_PARAMS + 16 + 4 * jj, <i16>(sm0 >> 8));
      store<i16>(Q4K_PARAMS + 18 + 4 * jj, <i16>(sm1 >> 8));
      const s0 = i16x8.splat(<i16>(sm0 & 255));
      const s1 = i16x8.splat(<i16>(sm1 & 255));
      const q0 = byLanes(v128.load(p + 16 + 32 * jj));
      const q1 = byLanes(v128.load(p + 32 + 32 * jj));
      // sub-block 2jj: low nibbles; 2jj + 1: high nibbles; q0 holds elements 0-15 (lanes 0-3), q1 16-31 (lanes 4-7)
      const lo0 = v128.and(q0, m15);
      const lo1 = v128.and(q1, m15);
      const hi0 = i8x16.shr_u(q0, 4);
      const hi1 = i8x16.shr_u(q1, 4);
      const wa = i16x8.mul(i16x8.extend_low_i8x16_u(lo0), s0);
      const wb = i16x8.mul(i16x8.extend_high_i8x16_u(lo0), s0);
      const wc = i16x8.mul(i16x8.extend_low_i8x16_u(lo1), s0);
      const wd = i16x8.mul(i16x8.extend_high_i8x16_u(lo1), s0);
      const we = i16x8.mul(i16x8.extend_low_i8x16_u(hi0), s1);
      const wf = i16x8.mul(i16x8.extend_high_i8x16_u(hi0), s1);
      const wg = i16x8.mul(i16x8.extend_low_i8x16_u(hi1), s1);
      const wh = i16x8.mul(i16x8.extend_high_i8x16_u(hi1), s1);
      const o: usize = 512 * b + 128 * jj;
      x0 = i32x4.add(x0, i32x4.add(lanes16(wa, wb, a0 + o), lanes16(we, wf, a0 + o + 64)));
      y0 = i32x4.add(y0, i32x4.add(lanes16(wc, wd, a0 + o + 32), lanes16(wg, wh, a0 + o + 96)));
      if (count > 1) {
        x1 = i32x4.add(x1, i32x4.add(lanes16(wa, wb, a1 + o), lanes16(we, wf, a1 + o + 64)));
        y1 = i32x4.add(y1, i32x4.add(lanes16(wc, wd, a1 + o + 32), lanes16(wg, wh, a1 + o + 96)));
      }
      if (count > 2) {
        x2 = i32x4.add(x2, i32x4.add(lanes16(wa, wb, a2 + o), lanes16(we, wf, a2 + o + 64)));
        y2 = i32x4.add(y2, i32x4.add(lanes16(wc, wd, a2 + o + 32), lanes16(wg, wh, a2 + o + 96)));
      }
      if (count > 3) {
        x3 = i32x4.add(x3, i32x4.add(lanes16(wa, wb, a3 + o), lanes16(we, wf, a3 + o + 64)));
        y3 = i32x4.add(y3, i32x4.add(lanes16(wc, wd, a3 + o + 32), lanes16(wg, wh, a3 + o + 96)));
      }
    }
    blockStep(DOT_Q4K, FACC, x0, y0, a0, Q4K_PARAMS, b, n);
    if (count > 1) blockStep(DOT_Q4K, FACC + ACC_BYTES, x1, y1, a1, Q4K_PARAMS, b, n);
    if (count > 2) blockStep(DOT_Q4K, FACC + 2 * ACC_BYTES, x2, y2, a2, Q4K_PARAMS, b, n);
    if (count > 3) blockStep(DOT_Q4K, FACC + 3 * ACC_BYTES, x3, y3, a3, Q4K_PARAMS, b, n);
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(DOT_Q4K, FACC + ACC_BYTES * t));
}

/** 16 weights (u8, ≤ 63) × 16 activations (i8 at a) in element order, times `scale` (i16x8 splat): ggml's four lanes. */
@inline
function relaxedLanes(q: v128, a: usize, scale: v128): v128 {
  return i32x4.dot_i16x8_s(i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(a), q), scale);
}

/** Q4_K / Q5_K block parameters as blockStep reads them (d, dmin, mins), rebuilt per super-block by k45Dots. */
const K45_PARAMS = memory.data(K_PARAMS, 16);
/** Swizzle masks that spread i16 lane k of a vector over all eight lanes, for k = 0..7 (16 bytes each). */
const SCALE_LANES = memory.data<u8>([
  0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
  4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7,
  8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11,
  12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15], 16);

/**
 * A Q4_K / Q5_K super-block's parameters (at p) to `params`: d, dmin and the eight mins (i16) as blockStep reads them,
 * and the eight scales (i16) at 32. get_scale_min_k4 for all eight sub-blocks at once (ggml's utmp / kmask form).
 * The dots read the scales back from memory: a value computed here and used in their 64-element loop, V8 computed
 * again in every step of it (Turbofan schedules pure operations next to their use, loop or not); a load stays put.
 */
@inline
function k45Params(p: usize, params: usize): void {
  store<f32>(params, f16ToF32(<u32>load<u16>(p)));
  store<f32>(params, f16ToF32(<u32>load<u16>(p, 2)), 4);
  const u0 = load<u32>(p, 4);
  const u1 = load<u32>(p, 8);
  const u2 = load<u32>(p, 12);
  const sc0 = u0 & 0x3f3f3f3f;
  const sc1 = (u2 & 0x0f0f0f0f) | (((u0 >> 6) & 0x03030303) << 4);
  const mn0 = u1 & 0x3f3f3f3f;
  const mn1 = ((u2 >> 4) & 0x0f0f0f0f) | (((u1 >> 6) & 0x03030303) << 4);
  v128.store(params + 16, i16x8.extend_low_i8x16_u(i32x4.replace_lane(i32x4.splat(mn0), 1, mn1)));
  v128.store(params + 32, i16x8.extend_low_i8x16_u(i32x4.replace_lane(i32x4.splat(sc0), 1, sc1)));
}

/** 15 in every byte, loaded once before a loop (a constant V8 would build again at every use). */
const NIBBLE = memory.data<u8>([15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15], 16);
/** 16 in every byte: Q5_K's fifth bit in place (bit 4), loaded once before a loop as NIBBLE is. */
const FIFTH_BIT = memory.data<u8>([16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16], 16);

/** A Q4_K quant vector's low nibbles, as u8 lanes (m: NIBBLE). */
@inline
function lowNibbles(q: v128, m: v128): v128 {
  return v128.and(q, m);
}

/** Its high nibbles: a 16-bit shift and the mask (x64 has no byte shift; V8 emulates i8x16.shr_u). */
@inline
function highNibbles(q: v128, m: v128): v128 {
  return v128.and(i16x8.shr_u(q, 4), m);
}

/** One 32-element run of a Q4_K quant vector q (two sub-blocks' halves) against activations at a: lanes as k45Dots. */
@inline
function nibbleLanes(q: v128, m: v128, a: usize, s0: v128, s1: v128): v128 {
  return i32x4.add(relaxedLanes(lowNibbles(q, m), a, s0), relaxedLanes(highNibbles(q, m), a + 32, s1));
}

/** The second row's parameters in twoRowsQ4K. */
const K45_PARAMS_2 = memory.data(K_PARAMS, 16);

/**
 * Two Q4_K rows (gate's and up's row r, or two rows of down) against one token's activations at `a`: k45DotsOf's
 * one-token path for both rows in one pass, which shares the activation loads, the steps' pointers and the call (the
 * decode case, where each routed expert meets one token: ~15 % less time at 1 row). Results (f32) to outG and outU.
 */
export function twoRowsQ4K(wg: usize, wu: usize, a: usize, n: i32, outG: usize, outU: usize): void {
  if (usesFusedMadd()) {
    twoRowsQ4KFused(wg, wu, a, n, outG, outU);
    return;
  }
  clearAcc(2);
  const nb = n >> 8;
  const m15 = v128.load(NIBBLE);
  for (let b = 0; b < nb; b++) {
    const pg = wg + 144 * b;
    const pu = wu + 144 * b;
    k45Params(pg, K45_PARAMS);
    k45Params(pu, K45_PARAMS_2);
    const sg = v128.load(K45_PARAMS, 32);
    const su = v128.load(K45_PARAMS_2, 32);
    let xg = i32x4.splat(0);
    let yg = xg;
    let xu = xg;
    let yu = xg;
    let qg = pg + 16;
    let qu = pu + 16;
    let lanes = SCALE_LANES;
    let o = a + 256 * b;
    for (let jj = 0; jj < 4; jj++) {
      const l0 = v128.load(lanes);
      const l1 = v128.load(lanes, 16);
      const g0 = v128.load(qg);
      const g1 = v128.load(qg, 16);
      const sg0 = i8x16.relaxed_swizzle(sg, l0);
      const sg1 = i8x16.relaxed_swizzle(sg, l1);
      xg = i32x4.add(xg, nibbleLanes(g0, m15, o, sg0, sg1));
      yg = i32x4.add(yg, nibbleLanes(g1, m15, o + 16, sg0, sg1));
      const u0 = v128.load(qu);
      const u1 = v128.load(qu, 16);
      const su0 = i8x16.relaxed_swizzle(su, l0);
      const su1 = i8x16.relaxed_swizzle(su, l1);
      xu = i32x4.add(xu, nibbleLanes(u0, m15, o, su0, su1));
      yu = i32x4.add(yu, nibbleLanes(u1, m15, o + 16, su0, su1));
      qg += 32;
      qu += 32;
      lanes += 32;
      o += 64;
    }
    blockStep(DOT_Q4K, FACC, xg, yg, a, K45_PARAMS, b, n);
    blockStep(DOT_Q4K, FACC + ACC_BYTES, xu, yu, a, K45_PARAMS_2, b, n);
  }
  store<f32>(outG, finish(DOT_Q4K, FACC));
  store<f32>(outU, finish(DOT_Q4K, FACC + ACC_BYTES));
}

/**
 * A Q4_K / Q5_K super-block's eight scales and eight mins (sub-blocks 0-7), from its 12
 * packed bytes at p + 4 (get_scale_min_k4 for all eight at once, as k45Params): the scales in bytes 0-7 of the
 * returned vector, the mins in bytes 8-15 (u8; the callers widen them to i16).
 */
@inline
function k45ScalesMins(p: usize): v128 {
  const u0 = load<u32>(p, 4);
  const u1 = load<u32>(p, 8);
  const u2 = load<u32>(p, 12);
  const sc0 = u0 & 0x3f3f3f3f;
  const sc1 = (u2 & 0x0f0f0f0f) | (((u0 >> 6) & 0x03030303) << 4);
  const mn0 = u1 & 0x3f3f3f3f;
  const mn1 = ((u2 >> 4) & 0x0f0f0f0f) | (((u1 >> 6) & 0x03030303) << 4);
  // bytes: scales 0-7, then mins 0-7
  return i32x4.replace_lane(i32x4.replace_lane(i32x4.replace_lane(i32x4.splat(sc0), 1, sc1), 2, mn0), 3, mn1);
}

/**
 * twoRowsQ4K where relaxed_madd fuses: ggml's float steps in registers (no FACC), each super-block's d and dmin for both
 * rows converted together (f16x4ToF32), each activation vector of a 64-element step loaded once for both rows (the
 * steps written out instead of looped measured 1.25x slower: V8 then held every load at once). The same integer
 * lanes, fmas and sums as twoRowsQ4K, so the same bits.
 */
function twoRowsQ4KFused(wg: usize, wu: usize, a: usize, n: i32, outG: usize, outU: usize): void {
  const nb = n >> 8;
  const m15 = v128.load(NIBBLE);
  const ad = a + 2 * <usize>n;
  const bsums = ad + 36 * <usize>nb;
  const sign = v128.load(DMIN_SIGN);
  let accG0 = f32x4.splat(0);
  let accG1 = accG0;
  let accGm = accG0;
  let accU0 = accG0;
  let accU1 = accG0;
  let accUm = accG0;
  for (let b = 0; b < nb; b++) {
    const pg = wg + 144 * b;
    const pu = wu + 144 * b;
    // [d_g, dmin_g, d_u, dmin_u] · [y.d, −y.d, y.d, −y.d]: ggml's d and dmin of both rows
    const halves = i32x4.extend_low_i16x8_u(i32x4.replace_lane(i32x4.splat(load<u32>(pg)), 1, load<u32>(pu)));
    const dd = f32x4.mul(v128.xor(f32x4.splat(load<f32>(ad + 4 * b)), sign), f16x4ToF32(halves));
    const smG = k45ScalesMins(pg);
    const smU = k45ScalesMins(pu);
    // (through memory: a value computed here and used in the loop below, V8 computes again in every step of it)
    v128.store(K45_PARAMS, i16x8.extend_low_i8x16_u(smG), 32);
    v128.store(K45_PARAMS_2, i16x8.extend_low_i8x16_u(smU), 32);
    const sg = v128.load(K45_PARAMS, 32);
    const su = v128.load(K45_PARAMS_2, 32);
    let xg = i32x4.splat(0);
    let yg = xg;
    let xu = xg;
    let yu = xg;
    // (running pointers: V8 does not strength-reduce `base + 32 * jj`)
    let o = a + 256 * b;
    let qg = pg + 16;
    let qu = pu + 16;
    let lanes = SCALE_LANES;
    for (let jj = 0; jj < 4; jj++) {
      // (in this order, elements 0-15 and 32-47 of the step for both rows, then 16-31 and 48-63, so fewer vectors are
      // live at once: V8 keeps the loads where they are written)
      const l0 = v128.load(lanes);
      const l1 = v128.load(lanes, 16);
      const sg0 = i8x16.relaxed_swizzle(sg, l0);
      const sg1 = i8x16.relaxed_swizzle(sg, l1);
      const su0 = i8x16.relaxed_swizzle(su, l0);
      const su1 = i8x16.relaxed_swizzle(su, l1);
      const a0 = v128.load(o);
      const a2 = v128.load(o, 32);
      xg = i32x4.add(xg, nibbleRun(v128.load(qg), m15, a0, a2, sg0, sg1));
      xu = i32x4.add(xu, nibbleRun(v128.load(qu), m15, a0, a2, su0, su1));
      const a1 = v128.load(o, 16);
      const a3 = v128.load(o, 48);
      yg = i32x4.add(yg, nibbleRun(v128.load(qg, 16), m15, a1, a3, sg0, sg1));
      yu = i32x4.add(yu, nibbleRun(v128.load(qu, 16), m15, a1, a3, su0, su1));
      o += 64;
      qg += 32;
      qu += 32;
      lanes += 32;
    }
    const dg = i32x4.shuffle(dd, dd, 0, 0, 0, 0);
    const du = i32x4.shuffle(dd, dd, 2, 2, 2, 2);
    accG0 = f32x4.relaxed_madd(dg, f32x4.convert_i32x4_s(xg), accG0);
    accG1 = f32x4.relaxed_madd(dg, f32x4.convert_i32x4_s(yg), accG1);
    accU0 = f32x4.relaxed_madd(du, f32x4.convert_i32x4_s(xu), accU0);
    accU1 = f32x4.relaxed_madd(du, f32x4.convert_i32x4_s(yu), accU1);
    const bs = v128.load(bsums + 16 * b);
    const pmG = i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_u(smG), bs);
    const pmU = i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_u(smU), bs);
    accGm = f32x4.relaxed_madd(i32x4.shuffle(dd, dd, 1, 1, 1, 1), f32x4.convert_i32x4_s(pmG), accGm);
    accUm = f32x4.relaxed_madd(i32x4.shuffle(dd, dd, 3, 3, 3, 3), f32x4.convert_i32x4_s(pmU), accUm);
  }
  store<f32>(outG, hsumFused(accG0, accG1, accGm));
  store<f32>(outU, hsumFused(accU0, accU1, accUm));
}

/** [1, −1, 1, −1] as sign bits: y.d to [y.d, −y.d, y.d, −y.d] by one xor. */
const DMIN_SIGN = memory.data<u32>([0, 0x80000000, 0, 0x80000000], 16);

/** One 32-element run of a Q4_K quant vector q: its low nibbles against alo times s0, its high against ahi times s1. */
@inline
function nibbleRun(q: v128, m: v128, alo: v128, ahi: v128, s0: v128, s1: v128): v128 {
  const lo = i32x4.dot_i16x8_s(i16x8.relaxed_dot_i8x16_i7x16_s(alo, v128.and(q, m)), s0);
  const hi = i32x4.dot_i16x8_s(i16x8.relaxed_dot_i8x16_i7x16_s(ahi, v128.and(i16x8.shr_u(q, 4), m)), s1);
  return i32x4.add(lo, hi);
}

/** finishFused for Q4_K on accumulators in registers: hsum_float_8(lanes 0-3 + 4-7) plus the four min lanes' sum. */
@inline
function hsumFused(acc0: v128, acc1: v128, accM: v128): f32 {
  const s = f32x4.add(acc0, acc1);
  const h = f32x4.extract_lane(s, 0) + f32x4.extract_lane(s, 2) + (f32x4.extract_lane(s, 1) + f32x4.extract_lane(s, 3));
  return h + (f32x4.extract_lane(accM, 0) + f32x4.extract_lane(accM, 2) + (f32x4.extract_lane(accM, 1) + f32x4.extract_lane(accM, 3)));
}

/**
 * The relaxed build's ggml_vec_dot_q4_K_q8_K / q5_K_q8_K straight from a row's GGUF bytes: each super-block's quants
 * unpacked in registers (u8, 0..31) and met with up to 4 tokens' activations: per 16 elements a pmaddubsw and a
 * pmaddwd by the sub-block's scale, as ggml's AVX2 code does, so the same integer lanes as intDots on intRow's form.
 */
@inline
function k45DotsOf<C>(five: bool, w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  const kind = five ? DOT_Q5K : DOT_Q4K;
  clearAcc(count);
  const nb = n >> 8;
  const bytes: usize = five ? 176 : 144;
  const qsAt: usize = five ? 48 : 16;
  const m15 = v128.load(NIBBLE);
  const m16 = v128.load(FIFTH_BIT);
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  for (let b = 0; b < nb; b++) {
    const p = w + bytes * b;
    k45Params(p, K45_PARAMS);
    const scales = v128.load(K45_PARAMS, 32);
    // Q5_K's fifth bits: sub-block 2jj's at bit 2jj of qh, 2jj + 1's at bit 2jj + 1; qh0/qh1 move right by 2 per jj,
    // so both are always at bits 0 and 1 (constant shifts; a per-jj mask and compare cost 2 more operations each)
    let qh0 = five ? v128.load(p + 16) : m15;
    let qh1 = five ? v128.load(p + 32) : m15;
    let x0 = i32x4.splat(0);
    let y0 = x0;
    let x1 = x0;
    let y1 = x0;
    let x2 = x0;
    let y2 = x0;
    let x3 = x0;
    let y3 = x0;
    // (running pointers: V8 does not strength-reduce `base + 32 * jj`)
    let q = p + qsAt;
    let lanes = SCALE_LANES;
    let o: usize = 256 * b;
    for (let jj = 0; jj < 4; jj++) {
      // sub-blocks 2jj and 2jj + 1's scales in every i16 lane (one pshufb each)
      const s0 = i8x16.relaxed_swizzle(scales, v128.load(lanes));
      const s1 = i8x16.relaxed_swizzle(scales, v128.load(lanes, 16));
      const q0 = v128.load(q);
      const q1 = v128.load(q, 16);
      let lo0 = lowNibbles(q0, m15);
      let lo1 = lowNibbles(q1, m15);
      let hi0 = highNibbles(q0, m15);
      let hi1 = highNibbles(q1, m15);
      if (five) {
        // bit 0 to bit 4 (lo), bit 1 to bit 4 (hi): 16-bit shifts, then the byte mask keeps each byte's own bit
        lo0 = v128.or(lo0, v128.and(i16x8.shl(qh0, 4), m16));
        lo1 = v128.or(lo1, v128.and(i16x8.shl(qh1, 4), m16));
        hi0 = v128.or(hi0, v128.and(i16x8.shl(qh0, 3), m16));
        hi1 = v128.or(hi1, v128.and(i16x8.shl(qh1, 3), m16));
        qh0 = i16x8.shr_u(qh0, 2);
        qh1 = i16x8.shr_u(qh1, 2);
      }
      // sub-block 2jj: lo (elements 0-15 to lanes 0-3, 16-31 to lanes 4-7); 2jj + 1: hi, 32 elements on
      x0 = i32x4.add(x0, i32x4.add(relaxedLanes(lo0, a0 + o, s0), relaxedLanes(hi0, a0 + o + 32, s1)));
      y0 = i32x4.add(y0, i32x4.add(relaxedLanes(lo1, a0 + o + 16, s0), relaxedLanes(hi1, a0 + o + 48, s1)));
      if (count > 1) {
        x1 = i32x4.add(x1, i32x4.add(relaxedLanes(lo0, a1 + o, s0), relaxedLanes(hi0, a1 + o + 32, s1)));
        y1 = i32x4.add(y1, i32x4.add(relaxedLanes(lo1, a1 + o + 16, s0), relaxedLanes(hi1, a1 + o + 48, s1)));
      }
      if (count > 2) {
        x2 = i32x4.add(x2, i32x4.add(relaxedLanes(lo0, a2 + o, s0), relaxedLanes(hi0, a2 + o + 32, s1)));
        y2 = i32x4.add(y2, i32x4.add(relaxedLanes(lo1, a2 + o + 16, s0), relaxedLanes(hi1, a2 + o + 48, s1)));
      }
      if (count > 3) {
        x3 = i32x4.add(x3, i32x4.add(relaxedLanes(lo0, a3 + o, s0), relaxedLanes(hi0, a3 + o + 32, s1)));
        y3 = i32x4.add(y3, i32x4.add(relaxedLanes(lo1, a3 + o + 16, s0), relaxedLanes(hi1, a3 + o + 48, s1)));
      }
      q += 32;
      lanes += 32;
      o += 64;
    }
    blockStep(kind, FACC, x0, y0, a0, K45_PARAMS, b, n);
    if (count > 1) blockStep(kind, FACC + ACC_BYTES, x1, y1, a1, K45_PARAMS, b, n);
    if (count > 2) blockStep(kind, FACC + 2 * ACC_BYTES, x2, y2, a2, K45_PARAMS, b, n);
    if (count > 3) blockStep(kind, FACC + 3 * ACC_BYTES, x3, y3, a3, K45_PARAMS, b, n);
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(kind, FACC + ACC_BYTES * t));
}

/**
 * k45DotsOf for Q4_K (five = false) or Q5_K, inlined once per kind and token count (tokens<C>) so the branches on both
 * fold away (with `count` a variable, V8 keeps the count tests in the inner loop and spills the accumulators around them).
 */
export function k45Dots(five: bool, w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (five) {
    if (count == 1) k45DotsOf<u8>(true, w, acts, n, out);
    else if (count == 2) k45DotsOf<u16>(true, w, acts, n, out);
    else if (count == 3) {
      k45DotsOf<u16>(true, w, acts, n, out);
      k45DotsOf<u8>(true, w, acts + 8, n, out + 8);
    } else k45DotsOf<u32>(true, w, acts, n, out);
  } else if (count == 1) k45DotsOf<u8>(false, w, acts, n, out);
  else if (count == 2) k45DotsOf<u16>(false, w, acts, n, out);
  else if (count == 3) {
    k45DotsOf<u16>(false, w, acts, n, out);
    k45DotsOf<u8>(false, w, acts + 8, n, out + 8);
  } else k45DotsOf<u32>(false, w, acts, n, out);
}

/** Q6_K's block parameters as blockStep reads them (d; the 16 scales as i16 at 16 and 32), rebuilt per super-block by q6kDots. */
const Q6K_PARAMS = memory.data(K_PARAMS, 16);
/** 0x30 in every byte: where a Q6_K quant's two high bits go (bits 4-5), loaded once before a loop. */
const HIGH_BITS = memory.data<u8>([48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48], 16);

/**
 * The relaxed build's ggml_vec_dot_q6_K_q8_K straight from a row's GGUF bytes (ql[128], qh[64], 16 i8 scales, f16 d;
 * no row buffer): each 32-element run's quants rebuilt in registers (u8, 0..63, in element order) and met with up to
 * 4 tokens' Q8_K activations; the same integer lanes as k45Dots (per 16 elements a pmaddubsw and a pmaddwd by the
 * sub-block's scale; the −32 offset as ggml's bsums correction in blockStep), so the same bits as intDots on intRow's
 * form. Against the u8Row pass it replaced (2026-12-07, same core, A/B): 1 row 5.5 → 3.5 ms, 4 rows 15 → 11 ms, 64 rows
 * 152 → 165 ms (the unpacking then repeats per 4 tokens where u8Row did it once per row).
 */
export function q6kDots(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) q6kDotsOf<u8>(w, acts, n, out);
  else if (count == 2) q6kDotsOf<u16>(w, acts, n, out);
  else if (count == 3) {
    q6kDotsOf<u16>(w, acts, n, out);
    q6kDotsOf<u8>(w, acts + 8, n, out + 8);
  } else q6kDotsOf<u32>(w, acts, n, out);
}

/** q6kDots for tokens<C>() tokens, inlined once per count so its branches fold away. */
@inline
function q6kDotsOf<C>(w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  clearAcc(count);
  const nb = n >> 8;
  const m15 = v128.load(NIBBLE);
  const m48 = v128.load(HIGH_BITS);
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  for (let b = 0; b < nb; b++) {
    const p = w + 210 * b;
    store<f32>(Q6K_PARAMS, f16ToF32(<u32>load<u16>(p, 208)));
    const s8 = v128.load(p, 192);
    v128.store(Q6K_PARAMS + 16, i16x8.extend_low_i8x16_s(s8));
    v128.store(Q6K_PARAMS + 32, i16x8.extend_high_i8x16_s(s8));
    let x0 = i32x4.splat(0);
    let y0 = x0;
    let x1 = x0;
    let y1 = x0;
    let x2 = x0;
    let y2 = x0;
    let x3 = x0;
    let y3 = x0;
    for (let h = 0; h < 2; h++) {
      // half h: elements 128h..128h + 127, its low bits in ql[64h..64h + 63], its high bits in qh[32h..32h + 31]
      const ql = p + 64 * h;
      let ha = v128.load(p + 128 + 32 * h);
      let hb = v128.load(p + 144 + 32 * h);
      for (let k = 0; k < 2; k++) {
        // runs k and k + 2 of the half (32 elements each) share ql[32k..32k + 31]: its low nibbles and its high ones;
        // their high bits are qh's bits 2k..2k + 1 and 2k + 4..2k + 5, and ha/hb move right by 2 per k (constant
        // shifts: a variable count costs V8 a move and a mask per use)
        const qa = v128.load(ql + 32 * k);
        const qb = v128.load(ql + 32 * k + 16);
        const q0 = v128.or(v128.and(qa, m15), v128.and(i16x8.shl(ha, 4), m48));
        const q1 = v128.or(v128.and(qb, m15), v128.and(i16x8.shl(hb, 4), m48));
        const q2 = v128.or(v128.and(i16x8.shr_u(qa, 4), m15), v128.and(ha, m48));
        const q3 = v128.or(v128.and(i16x8.shr_u(qb, 4), m15), v128.and(hb, m48));
        // sub-blocks 8h + 2k, 8h + 2k + 1 (run k: lanes 0-3, 4-7), 8h + 2k + 4, 8h + 2k + 5 (run k + 2)
        const sc = Q6K_PARAMS + 16 + 16 * h + 4 * k;
        const s0 = v128.load16_splat(sc);
        const s1 = v128.load16_splat(sc, 2);
        const s2 = v128.load16_splat(sc, 8);
        const s3 = v128.load16_splat(sc, 10);
        const o: usize = 256 * b + 128 * h + 32 * k;
        x0 = i32x4.add(x0, i32x4.add(relaxedLanes(q0, a0 + o, s0), relaxedLanes(q2, a0 + o + 64, s2)));
        y0 = i32x4.add(y0, i32x4.add(relaxedLanes(q1, a0 + o + 16, s1), relaxedLanes(q3, a0 + o + 80, s3)));
        if (count > 1) {
          x1 = i32x4.add(x1, i32x4.add(relaxedLanes(q0, a1 + o, s0), relaxedLanes(q2, a1 + o + 64, s2)));
          y1 = i32x4.add(y1, i32x4.add(relaxedLanes(q1, a1 + o + 16, s1), relaxedLanes(q3, a1 + o + 80, s3)));
        }
        if (count > 2) {
          x2 = i32x4.add(x2, i32x4.add(relaxedLanes(q0, a2 + o, s0), relaxedLanes(q2, a2 + o + 64, s2)));
          y2 = i32x4.add(y2, i32x4.add(relaxedLanes(q1, a2 + o + 16, s1), relaxedLanes(q3, a2 + o + 80, s3)));
        }
        if (count > 3) {
          x3 = i32x4.add(x3, i32x4.add(relaxedLanes(q0, a3 + o, s0), relaxedLanes(q2, a3 + o + 64, s2)));
          y3 = i32x4.add(y3, i32x4.add(relaxedLanes(q1, a3 + o + 16, s1), relaxedLanes(q3, a3 + o + 80, s3)));
        }
        ha = i16x8.shr_u(ha, 2);
        hb = i16x8.shr_u(hb, 2);
      }
    }
    blockStep(DOT_Q6K, FACC, x0, y0, a0, Q6K_PARAMS, b, n);
    if (count > 1) blockStep(DOT_Q6K, FACC + ACC_BYTES, x1, y1, a1, Q6K_PARAMS, b, n);
    if (count > 2) blockStep(DOT_Q6K, FACC + 2 * ACC_BYTES, x2, y2, a2, Q6K_PARAMS, b, n);
    if (count > 3) blockStep(DOT_Q6K, FACC + 3 * ACC_BYTES, x3, y3, a3, Q6K_PARAMS, b, n);
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(DOT_Q6K, FACC + ACC_BYTES * t));
}

/** Q2_K's block parameters as blockStep reads them (d, dmin; the 16 mins as i16 at 16 and 32), and its 16 scales (i16) at 48. */
const Q2K_PARAMS = memory.data(80, 16);
/** 3 in every byte: a Q2_K quant's two bits, loaded once before a loop as NIBBLE is. */
const TWO_BITS = memory.data<u8>([3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3], 16);

/**
 * The relaxed build's ggml_vec_dot_q2_K_q8_K straight from a row's GGUF bytes (16 bytes of 4-bit scale and min, 64 of
 * 2-bit quants, f16 d and dmin; no row buffer): the quants of each 32-element run (bits 2k, 2k + 1 of 32 qs bytes) as
 * u8 0..3 in registers, met with up to 4 tokens' Q8_K activations by one pmaddubsw and one pmaddwd by the scale per 16
 * elements, as ggml's AVX2 code does: intRow's integer lanes, and blockStep's mins and float steps, so the same bits.
 */
export function q2kDots(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) q2kDotsOf<u8>(w, acts, n, out);
  else if (count == 2) q2kDotsOf<u16>(w, acts, n, out);
  else if (count == 3) {
    q2kDotsOf<u16>(w, acts, n, out);
    q2kDotsOf<u8>(w, acts + 8, n, out + 8);
  } else q2kDotsOf<u32>(w, acts, n, out);
}

/** q2kDots for tokens<C>() tokens, inlined once per count so its branches fold away. */
@inline
function q2kDotsOf<C>(w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  clearAcc(count);
  const nb = n >> 8;
  const m3 = v128.load(TWO_BITS);
  const m15 = v128.load(NIBBLE);
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  for (let b = 0; b < nb; b++) {
    const p = w + 84 * b;
    store<f32>(Q2K_PARAMS, f16ToF32(<u32>load<u16>(p, 80)));
    store<f32>(Q2K_PARAMS, f16ToF32(<u32>load<u16>(p, 82)), 4);
    const sm = v128.load(p);
    const mins = v128.and(i16x8.shr_u(sm, 4), m15);
    const scales = v128.and(sm, m15);
    v128.store(Q2K_PARAMS + 16, i16x8.extend_low_i8x16_u(mins));
    v128.store(Q2K_PARAMS + 32, i16x8.extend_high_i8x16_u(mins));
    v128.store(Q2K_PARAMS + 48, i16x8.extend_low_i8x16_u(scales));
    v128.store(Q2K_PARAMS + 64, i16x8.extend_high_i8x16_u(scales));
    let x0 = i32x4.splat(0);
    let y0 = x0;
    let x1 = x0;
    let y1 = x0;
    let x2 = x0;
    let y2 = x0;
    let x3 = x0;
    let y3 = x0;
    for (let j = 0; j < 2; j++) {
      // half j: elements 128j..128j + 127 from qs[32j..32j + 31]; run k of it in bits 2k, 2k + 1, which qa/qb hold at
      // bits 0-1 (moved right by 2 per k: constant shifts)
      let qa = v128.load(p + 16 + 32 * j);
      let qb = v128.load(p + 32 + 32 * j);
      // (running pointers: V8 does not strength-reduce `base + 32 * k`)
      let sc = Q2K_PARAMS + 48 + 16 * j;
      let o: usize = 256 * b + 128 * j;
      for (let k = 0; k < 4; k++) {
        const q0 = v128.and(qa, m3);
        const q1 = v128.and(qb, m3);
        // sub-blocks 8j + 2k (elements 0-15 of the run, lanes 0-3) and 8j + 2k + 1 (16-31, lanes 4-7)
        const s0 = v128.load16_splat(sc);
        const s1 = v128.load16_splat(sc, 2);
        x0 = i32x4.add(x0, relaxedLanes(q0, a0 + o, s0));
        y0 = i32x4.add(y0, relaxedLanes(q1, a0 + o + 16, s1));
        if (count > 1) {
          x1 = i32x4.add(x1, relaxedLanes(q0, a1 + o, s0));
          y1 = i32x4.add(y1, relaxedLanes(q1, a1 + o + 16, s1));
        }
        if (count > 2) {
          x2 = i32x4.add(x2, relaxedLanes(q0, a2 + o, s0));
          y2 = i32x4.add(y2, relaxedLanes(q1, a2 + o + 16, s1));
        }
        if (count > 3) {
          x3 = i32x4.add(x3, relaxedLanes(q0, a3 + o, s0));
          y3 = i32x4.add(y3, relaxedLanes(q1, a3 + o + 16, s1));
        }
        qa = i16x8.shr_u(qa, 2);
        qb = i16x8.shr_u(qb, 2);
        sc += 4;
        o += 32;
      }
    }
    blockStep(DOT_Q2K, FACC, x0, y0, a0, Q2K_PARAMS, b, n);
    if (count > 1) blockStep(DOT_Q2K, FACC + ACC_BYTES, x1, y1, a1, Q2K_PARAMS, b, n);
    if (count > 2) blockStep(DOT_Q2K, FACC + 2 * ACC_BYTES, x2, y2, a2, Q2K_PARAMS, b, n);
    if (count > 3) blockStep(DOT_Q2K, FACC + 3 * ACC_BYTES, x3, y3, a3, Q2K_PARAMS, b, n);
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(DOT_Q2K, FACC + ACC_BYTES * t));
}

/** Q3_K's block parameters as blockStep reads them for DOT_IQ4XS (d), and its 16 scales (i16, −32..31) at 16 and 32. */
const Q3K_PARAMS = memory.data(K_PARAMS, 16);
/** 4 in every byte: what a Q3_K quant loses where its hmask bit is clear, loaded once before a loop as NIBBLE is. */
const FOUR = memory.data<u8>([4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4], 16);

/**
 * The relaxed build's ggml_vec_dot_q3_K_q8_K straight from a row's GGUF bytes (hmask[32], qs[64], 12 bytes of packed
 * 6-bit scales, f16 d; no row buffer). As ggml's AVX2 code: per 16 elements the two low bits (u8 0..3) and the 4 that a
 * clear hmask bit takes away (u8 0 or 4), each met with the activations by a pmaddubsw, the second subtracted from the
 * first, then a pmaddwd by the sub-block's scale (the 12 bytes unpacked by ggml's kmask form); up to 4 tokens share the
 * unpacking. The lanes are intRow's (the signed quants times the scale), the float steps DOT_IQ4XS's, so the same bits.
 */
export function q3kDots(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) q3kDotsOf<u8>(w, acts, n, out);
  else if (count == 2) q3kDotsOf<u16>(w, acts, n, out);
  else if (count == 3) {
    q3kDotsOf<u16>(w, acts, n, out);
    q3kDotsOf<u8>(w, acts + 8, n, out + 8);
  } else q3kDotsOf<u32>(w, acts, n, out);
}

/** 16 Q3_K weights (low bits q, and h: 4 where the hmask bit is clear) × 16 activations (i8 at a), times `scale`. */
@inline
function q3Lanes(q: v128, h: v128, a: usize, scale: v128): v128 {
  const y = v128.load(a);
  return i32x4.dot_i16x8_s(i16x8.sub(i16x8.relaxed_dot_i8x16_i7x16_s(y, q), i16x8.relaxed_dot_i8x16_i7x16_s(y, h)), scale);
}

/** q3kDots for tokens<C>() tokens, inlined once per count so its branches fold away. */
@inline
function q3kDotsOf<C>(w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  clearAcc(count);
  const nb = n >> 8;
  const m3 = v128.load(TWO_BITS);
  const m4 = v128.load(FOUR);
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  for (let b = 0; b < nb; b++) {
    const p = w + 110 * b;
    store<f32>(Q3K_PARAMS, f16ToF32(<u32>load<u16>(p, 108)));
    // the 16 6-bit scales (ggml's aux / kmask form), less 32
    const u0 = load<u32>(p, 96);
    const u1 = load<u32>(p, 100);
    const u2 = load<u32>(p, 104);
    const s0 = (u0 & 0x0f0f0f0f) | ((u2 & 0x03030303) << 4);
    const s1 = (u1 & 0x0f0f0f0f) | (((u2 >> 2) & 0x03030303) << 4);
    const s2 = ((u0 >> 4) & 0x0f0f0f0f) | (((u2 >> 4) & 0x03030303) << 4);
    const s3 = ((u1 >> 4) & 0x0f0f0f0f) | (((u2 >> 6) & 0x03030303) << 4);
    const sv = i32x4.replace_lane(i32x4.replace_lane(i32x4.replace_lane(i32x4.splat(s0), 1, s1), 2, s2), 3, s3);
    const thirtyTwo = i16x8.splat(32);
    v128.store(Q3K_PARAMS + 16, i16x8.sub(i16x8.extend_low_i8x16_u(sv), thirtyTwo));
    v128.store(Q3K_PARAMS + 32, i16x8.sub(i16x8.extend_high_i8x16_u(sv), thirtyTwo));
    let x0 = i32x4.splat(0);
    let y0 = x0;
    let x1 = x0;
    let y1 = x0;
    let x2 = x0;
    let y2 = x0;
    let x3 = x0;
    let y3 = x0;
    // hmask bit 4j + k of bytes 0-15 (elements 0-15 of run k of half j) and 16-31 (16-31): at bit 0 of ha/hb, which
    // move right by 1 per run (constant shifts)
    let ha = v128.load(p);
    let hb = v128.load(p, 16);
    let sc = Q3K_PARAMS + 16;
    let o: usize = 256 * b;
    for (let j = 0; j < 2; j++) {
      // half j: its two low bits per element in qs[32j..32j + 31], run k in bits 2k, 2k + 1 (qa/qb move right by 2)
      let qa = v128.load(p + 32 + 32 * j);
      let qb = v128.load(p + 48 + 32 * j);
      for (let k = 0; k < 4; k++) {
        const q0 = v128.and(qa, m3);
        const q1 = v128.and(qb, m3);
        // 4 where the bit is clear: bit 0 moved to bit 2 (16-bit shift; the byte mask keeps each byte's own bit)
        const h0 = v128.andnot(m4, i16x8.shl(ha, 2));
        const h1 = v128.andnot(m4, i16x8.shl(hb, 2));
        // sub-blocks 8j + 2k (elements 0-15 of the run, lanes 0-3) and 8j + 2k + 1 (16-31, lanes 4-7)
        const c0 = v128.load16_splat(sc);
        const c1 = v128.load16_splat(sc, 2);
        x0 = i32x4.add(x0, q3Lanes(q0, h0, a0 + o, c0));
        y0 = i32x4.add(y0, q3Lanes(q1, h1, a0 + o + 16, c1));
        if (count > 1) {
          x1 = i32x4.add(x1, q3Lanes(q0, h0, a1 + o, c0));
          y1 = i32x4.add(y1, q3Lanes(q1, h1, a1 + o + 16, c1));
        }
        if (count > 2) {
          x2 = i32x4.add(x2, q3Lanes(q0, h0, a2 + o, c0));
          y2 = i32x4.add(y2, q3Lanes(q1, h1, a2 + o + 16, c1));
        }
        if (count > 3) {
          x3 = i32x4.add(x3, q3Lanes(q0, h0, a3 + o, c0));
          y3 = i32x4.add(y3, q3Lanes(q1, h1, a3 + o + 16, c1));
        }
        qa = i16x8.shr_u(qa, 2);
        qb = i16x8.shr_u(qb, 2);
        ha = i16x8.shr_u(ha, 1);
        hb = i16x8.shr_u(hb, 1);
        sc += 4;
        o += 32;
      }
    }
    blockStep(DOT_IQ4XS, FACC, x0, y0, a0, Q3K_PARAMS, b, n);
    if (count > 1) blockStep(DOT_IQ4XS, FACC + ACC_BYTES, x1, y1, a1, Q3K_PARAMS, b, n);
    if (count > 2) blockStep(DOT_IQ4XS, FACC + 2 * ACC_BYTES, x2, y2, a2, Q3K_PARAMS, b, n);
    if (count > 3) blockStep(DOT_IQ4XS, FACC + 3 * ACC_BYTES, x3, y3, a3, Q3K_PARAMS, b, n);
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(DOT_IQ4XS, FACC + ACC_BYTES * t));
}

/** IQ4_XS's block parameters as blockStep reads them for DOT_IQ4XS (d), and its 8 sub-block scales (i16, −32..31) at 16. */
const IQ4X_PARAMS = memory.data(K_PARAMS, 16);

/**
 * The relaxed build's ggml_vec_dot_iq4_xs_q8_K straight from a row's GGUF bytes (f16 d, scales_h, scales_l[4],
 * qs[128]; no row buffer). As ggml's AVX2 code: each 32-element sub-block's nibbles looked up in kvalues_iq4nl by a
 * swizzle (low nibbles elements 0-15, high 16-31), |x| against y with x's sign (q80Lanes' sign trick; |x| ≤ 127, and
 * a pair of products fits i16), then one pmaddwd by the sub-block's scale less 32; up to 4 tokens share the lookups.
 * The lanes are intRow's (the looked-up values times the scale), the float steps DOT_IQ4XS's, so the same bits.
 */
export function iq4xsDots(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) iq4xsDotsOf<u8>(w, acts, n, out);
  else if (count == 2) iq4xsDotsOf<u16>(w, acts, n, out);
  else if (count == 3) {
    iq4xsDotsOf<u16>(w, acts, n, out);
    iq4xsDotsOf<u8>(w, acts + 8, n, out + 8);
  } else iq4xsDotsOf<u32>(w, acts, n, out);
}

/** iq4xsDots for tokens<C>() tokens, inlined once per count so its branches fold away. */
@inline
function iq4xsDotsOf<C>(w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  clearAcc(count);
  const nb = n >> 8;
  const kv = v128.load(KVALUES_IQ4NL);
  const m15 = v128.load(NIBBLE);
  const zero = i32x4.splat(0);
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  for (let b = 0; b < nb; b++) {
    const p = w + 136 * b;
    store<f32>(IQ4X_PARAMS, f16ToF32(<u32>load<u16>(p)));
    const sh = <i32>load<u16>(p, 2);
    for (let ib = 0; ib < 8; ib++) {
      const ls = (((<i32>load<u8>(p + 4 + (ib >> 1)) >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
      store<i16>(IQ4X_PARAMS + 16 + 2 * ib, <i16>ls);
    }
    let x0 = i32x4.splat(0);
    let y0 = x0;
    let x1 = x0;
    let y1 = x0;
    let x2 = x0;
    let y2 = x0;
    let x3 = x0;
    let y3 = x0;
    // (running pointers: V8 does not strength-reduce `base + 16 * ib`)
    let q = p + 8;
    let sc = IQ4X_PARAMS + 16;
    let o: usize = 256 * b;
    for (let ib = 0; ib < 8; ib++) {
      const qs = v128.load(q);
      const xl = i8x16.relaxed_swizzle(kv, lowNibbles(qs, m15));
      const xh = i8x16.relaxed_swizzle(kv, highNibbles(qs, m15));
      const al = i8x16.abs(xl);
      const ml = i8x16.lt_s(xl, zero);
      const ah = i8x16.abs(xh);
      const mh = i8x16.lt_s(xh, zero);
      const s = v128.load16_splat(sc);
      // sub-block ib: elements 0-15 (lanes 0-3), 16-31 (lanes 4-7), one scale
      x0 = i32x4.add(x0, q80Lanes(al, ml, a0 + o, s));
      y0 = i32x4.add(y0, q80Lanes(ah, mh, a0 + o + 16, s));
      if (count > 1) {
        x1 = i32x4.add(x1, q80Lanes(al, ml, a1 + o, s));
        y1 = i32x4.add(y1, q80Lanes(ah, mh, a1 + o + 16, s));
      }
      if (count > 2) {
        x2 = i32x4.add(x2, q80Lanes(al, ml, a2 + o, s));
        y2 = i32x4.add(y2, q80Lanes(ah, mh, a2 + o + 16, s));
      }
      if (count > 3) {
        x3 = i32x4.add(x3, q80Lanes(al, ml, a3 + o, s));
        y3 = i32x4.add(y3, q80Lanes(ah, mh, a3 + o + 16, s));
      }
      q += 16;
      sc += 2;
      o += 32;
    }
    blockStep(DOT_IQ4XS, FACC, x0, y0, a0, IQ4X_PARAMS, b, n);
    if (count > 1) blockStep(DOT_IQ4XS, FACC + ACC_BYTES, x1, y1, a1, IQ4X_PARAMS, b, n);
    if (count > 2) blockStep(DOT_IQ4XS, FACC + 2 * ACC_BYTES, x2, y2, a2, IQ4X_PARAMS, b, n);
    if (count > 3) blockStep(DOT_IQ4XS, FACC + 3 * ACC_BYTES, x3, y3, a3, IQ4X_PARAMS, b, n);
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(DOT_IQ4XS, FACC + ACC_BYTES * t));
}

/** f16 d · 0.125 (IQ2_XXS, IQ2_XS) or 0.25 (IQ3_XXS) of the super-block iqGridDots is in, for blockStep. */
const IQG_PARAMS = memory.data(K_PARAMS, 16);

/** Four 4-byte entries of IQ3_XXS's grid, from the indices in the bytes at q: 16 bytes in element order. */
@inline
function iq3Points(q: usize): v128 {
  let v = i32x4.splat(load<u32>(IQ3XXS_GRID + 4 * <usize>load<u8>(q)));
  v = i32x4.replace_lane(v, 1, load<u32>(IQ3XXS_GRID + 4 * <usize>load<u8>(q, 1)));
  v = i32x4.replace_lane(v, 2, load<u32>(IQ3XXS_GRID + 4 * <usize>load<u8>(q, 2)));
  return i32x4.replace_lane(v, 3, load<u32>(IQ3XXS_GRID + 4 * <usize>load<u8>(q, 3)));
}

/**
 * The relaxed build's IQ2_XXS, IQ2_XS and IQ3_XXS dots (kinds.as DOT_IQ2XXS, DOT_IQ2XS, DOT_IQ3XXS): one weight row
 * read in place from its GGUF super-blocks against up to 4 tokens' Q8_K records (i8 in element order), the tokens
 * sharing each group's lookups. As ggml's AVX2 code: per 16 elements the magnitudes of two grid points (u8, at most 62,
 * so relaxed_dot_i8x16_i7x16_s is exact), the activations' signs flipped by the groups' keven_signs (its
 * _mm256_sign_epi8), pmaddubsw, then pmaddwd by 2s + 1 (the sub-block's scale, or the half's for IQ2_XS). The lanes
 * and float steps are DOT_IQ4XS's, which the simd build reads these types' intRow form with, d times the grid type's
 * 0.125 or 0.25 as intRow stores it: the same bits.
 */
export function iqGridDots(kind: i32, w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) iqGridDotsOf<u8>(kind, w, acts, n, out);
  else if (count == 2) iqGridDotsOf<u16>(kind, w, acts, n, out);
  else if (count == 3) {
    iqGridDotsOf<u16>(kind, w, acts, n, out);
    iqGridDotsOf<u8>(kind, w, acts + 8, n, out + 8);
  } else iqGridDotsOf<u32>(kind, w, acts, n, out);
}

/** iqGridDots for tokens<C>() tokens, inlined once per count so its branches fold away. */
@inline
function iqGridDotsOf<C>(kind: i32, w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  clearAcc(count);
  const nb = n >> 8;
  const xs = kind == DOT_IQ2XS;
  const three = kind == DOT_IQ3XXS;
  const bytes: usize = three ? 98 : xs ? 74 : 66;
  const factor: f32 = three ? 0.25 : 0.125;
  const zero = i8x16.splat(0);
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  for (let b = 0; b < nb; b++) {
    const p = w + bytes * <usize>b;
    store<f32>(IQG_PARAMS, f16ToF32(<u32>load<u16>(p)) * factor);
    let x0 = i32x4.splat(0);
    let y0 = x0;
    let x1 = x0;
    let y1 = x0;
    let x2 = x0;
    let y2 = x0;
    let x3 = x0;
    let y3 = x0;
    let o: usize = 256 * b;
    for (let ib = 0; ib < 8; ib++) {
      const q = p + 2 + 8 * <usize>ib;
      let m0: v128;
      let m1: v128;
      let g0: v128;
      let g1: v128;
      let s0: v128;
      let s1: v128;
      if (xs) {
        // a u16 per group of 8: the grid index in its low 9 bits, keven_signs' in its top 7; a scale per half
        const sc = <i32>load<u8>(p + 66 + ib);
        s0 = i16x8.splat(<i16>(2 * (sc & 15) + 1));
        s1 = i16x8.splat(<i16>(2 * (sc >> 4) + 1));
        const u0 = <usize>load<u16>(q);
        const u1 = <usize>load<u16>(q, 2);
        const u2 = <usize>load<u16>(q, 4);
        const u3 = <usize>load<u16>(q, 6);
        m0 = entryPair(IQ2XS_GRID, u0 & 511, u1 & 511);
        m1 = entryPair(IQ2XS_GRID, u2 & 511, u3 & 511);
        g0 = entryPair(KEVEN_SIGNS, u0 >> 9, u1 >> 9);
        g1 = entryPair(KEVEN_SIGNS, u2 >> 9, u3 >> 9);
      } else {
        // IQ2_XXS: four u8 grid indices, then a u32 of four 7-bit sign indices and the 4-bit scale; IQ3_XXS: eight u8
        // indices of 4-magnitude points, the u32 after all 64 of them
        const aux = three ? load<u32>(p + 66 + 4 * <usize>ib) : load<u32>(q, 4);
        s0 = i16x8.splat(<i16>(2 * (aux >> 28) + 1));
        s1 = s0;
        m0 = three ? iq3Points(q) : entryPair(IQ2XXS_GRID, <usize>load<u8>(q), <usize>load<u8>(q, 1));
        m1 = three ? iq3Points(q + 4) : entryPair(IQ2XXS_GRID, <usize>load<u8>(q, 2), <usize>load<u8>(q, 3));
        g0 = entryPair(KEVEN_SIGNS, <usize>(aux & 127), <usize>((aux >> 7) & 127));
        g1 = entryPair(KEVEN_SIGNS, <usize>((aux >> 14) & 127), <usize>((aux >> 21) & 127));
      }
      const n0 = i8x16.lt_s(g0, zero);
      const n1 = i8x16.lt_s(g1, zero);
      // sub-block ib: elements 0-15 (lanes 0-3), 16-31 (lanes 4-7)
      x0 = i32x4.add(x0, q80Lanes(m0, n0, a0 + o, s0));
      y0 = i32x4.add(y0, q80Lanes(m1, n1, a0 + o + 16, s1));
      if (count > 1) {
        x1 = i32x4.add(x1, q80Lanes(m0, n0, a1 + o, s0));
        y1 = i32x4.add(y1, q80Lanes(m1, n1, a1 + o + 16, s1));
      }
      if (count > 2) {
        x2 = i32x4.add(x2, q80Lanes(m0, n0, a2 + o, s0));
        y2 = i32x4.add(y2, q80Lanes(m1, n1, a2 + o + 16, s1));
      }
      if (count > 3) {
        x3 = i32x4.add(x3, q80Lanes(m0, n0, a3 + o, s0));
        y3 = i32x4.add(y3, q80Lanes(m1, n1, a3 + o + 16, s1));
      }
      o += 32;
    }
    blockStep(DOT_IQ4XS, FACC, x0, y0, a0, IQG_PARAMS, b, n);
    if (count > 1) blockStep(DOT_IQ4XS, FACC + ACC_BYTES, x1, y1, a1, IQG_PARAMS, b, n);
    if (count > 2) blockStep(DOT_IQ4XS, FACC + 2 * ACC_BYTES, x2, y2, a2, IQG_PARAMS, b, n);
    if (count > 3) blockStep(DOT_IQ4XS, FACC + 3 * ACC_BYTES, x3, y3, a3, IQG_PARAMS, b, n);
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(DOT_IQ4XS, FACC + ACC_BYTES * t));
}

/** IQ1_S's super-block parameters as blockStep's DOT_IQ1S reads them (f32 d, −d · 0.125, the shifts' ±(2s + 1) at 16), from iq1sDots. */
const IQ1S_PARAMS = memory.data(K_PARAMS, 16);

/**
 * The relaxed build's IQ1_S dot (kinds.as DOT_IQ1SX): one weight row read in place from its GGUF super-blocks (f16 d,
 * 32 low bytes of the grid indices, then per sub-block a u16: the indices' high 3 bits per group, the 3-bit scale s,
 * the shift's sign) against up to 4 tokens' Q8_K records (i8 in element order), the tokens sharing each group's
 * lookup. As ggml's AVX2 code: the grid's −1/0/+1 values through q80Lanes' sign trick (|x| ≤ 1), pmaddwd by 2s + 1;
 * the shifts Σ ±(2s + 1) · the sub-block's bsums and the float steps are DOT_IQ1S's (blockStep, from parameters
 * built per super-block as intRow builds them), so the bits are the simd build's.
 */
export function iq1sDots(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) iq1sDotsOf<u8>(w, acts, n, out);
  else if (count == 2) iq1sDotsOf<u16>(w, acts, n, out);
  else if (count == 3) {
    iq1sDotsOf<u16>(w, acts, n, out);
    iq1sDotsOf<u8>(w, acts + 8, n, out + 8);
  } else iq1sDotsOf<u32>(w, acts, n, out);
}

/** iq1sDots for tokens<C>() tokens, inlined once per count so its branches fold away. */
@inline
function iq1sDotsOf<C>(w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  clearAcc(count);
  const nb = n >> 8;
  const zero = i8x16.splat(0);
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  for (let b = 0; b < nb; b++) {
    const p = w + 50 * <usize>b;
    const d = f16ToF32(<u32>load<u16>(p));
    store<f32>(IQ1S_PARAMS, d);
    store<f32>(IQ1S_PARAMS, -(d * 0.125), 4);
    let x0 = i32x4.splat(0);
    let y0 = x0;
    let x1 = x0;
    let y1 = x0;
    let x2 = x0;
    let y2 = x0;
    let x3 = x0;
    let y3 = x0;
    let o: usize = 256 * b;
    for (let ib = 0; ib < 8; ib++) {
      const qh = <u32>load<u16>(p + 34 + 2 * <usize>ib);
      const s = <i32>(2 * ((qh >> 12) & 7) + 1);
      // ±(2s + 1) by the shift's sign bit, without a branch (the bit is random: a branch mispredicts half the time)
      store<i16>(IQ1S_PARAMS + 16 + 2 * ib, <i16>(s * (1 - 2 * <i32>(qh >> 15))));
      const ls = i16x8.splat(<i16>s);
      const q = p + 2 + 4 * <usize>ib;
      // elements 0-15: groups 0 and 1; 16-31: groups 2 and 3 (11-bit indices: a byte, 3 bits of qh)
      const g0 = entryPair(IQ1S_GRID, <usize>load<u8>(q) | (<usize>(qh & 7) << 8), <usize>load<u8>(q, 1) | (<usize>((qh >> 3) & 7) << 8));
      const g1 = entryPair(IQ1S_GRID, <usize>load<u8>(q, 2) | (<usize>((qh >> 6) & 7) << 8), <usize>load<u8>(q, 3) | (<usize>((qh >> 9) & 7) << 8));
      const m0 = i8x16.abs(g0);
      const n0 = i8x16.lt_s(g0, zero);
      const m1 = i8x16.abs(g1);
      const n1 = i8x16.lt_s(g1, zero);
      x0 = i32x4.add(x0, q80Lanes(m0, n0, a0 + o, ls));
      y0 = i32x4.add(y0, q80Lanes(m1, n1, a0 + o + 16, ls));
      if (count > 1) {
        x1 = i32x4.add(x1, q80Lanes(m0, n0, a1 + o, ls));
        y1 = i32x4.add(y1, q80Lanes(m1, n1, a1 + o + 16, ls));
      }
      if (count > 2) {
        x2 = i32x4.add(x2, q80Lanes(m0, n0, a2 + o, ls));
        y2 = i32x4.add(y2, q80Lanes(m1, n1, a2 + o + 16, ls));
      }
      if (count > 3) {
        x3 = i32x4.add(x3, q80Lanes(m0, n0, a3 + o, ls));
        y3 = i32x4.add(y3, q80Lanes(m1, n1, a3 + o + 16, ls));
      }
      o += 32;
    }
    blockStep(DOT_IQ1S, FACC, x0, y0, a0, IQ1S_PARAMS, b, n);
    if (count > 1) blockStep(DOT_IQ1S, FACC + ACC_BYTES, x1, y1, a1, IQ1S_PARAMS, b, n);
    if (count > 2) blockStep(DOT_IQ1S, FACC + 2 * ACC_BYTES, x2, y2, a2, IQ1S_PARAMS, b, n);
    if (count > 3) blockStep(DOT_IQ1S, FACC + 3 * ACC_BYTES, x3, y3, a3, IQ1S_PARAMS, b, n);
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, finish(DOT_IQ1S, FACC + ACC_BYTES * t));
}

/**
 * The relaxed build's IQ1_M dot (kinds.as DOT_IQ1MX): one weight row read in place from its GGUF super-blocks (32 low
 * bytes of the grid indices; per sub-block two qh bytes, each the high 3 bits of two groups' indices and their shifts'
 * signs; four u16 of 3-bit scales, two per sub-block, whose top nibbles make the f16 d) against up to 4 tokens' Q8_K
 * records (i8 in element order). As ggml's AVX2 code: per 16 elements the grid's −1/0/+1 values, and apart the groups'
 * shifts ±1, both through q80Lanes' sign trick and pmaddwd by the half's 2s + 1, into two sets of lanes; iq1mDots'
 * float steps and sum (hsum8 of the first, plus 0.125 times hsum8 of the second), so the bits are the simd build's.
 */
export function iq1mxDots(w: usize, acts: usize, count: i32, n: i32, out: usize): void {
  if (count == 1) iq1mxDotsOf<u8>(w, acts, n, out);
  else if (count == 2) iq1mxDotsOf<u16>(w, acts, n, out);
  else if (count == 3) {
    iq1mxDotsOf<u16>(w, acts, n, out);
    iq1mxDotsOf<u8>(w, acts + 8, n, out + 8);
  } else iq1mxDotsOf<u32>(w, acts, n, out);
}

/** One super-block's two sets of lanes (grid x03, x47; shifts s03, s47) into a token's accumulators, as iq1mDots steps them. */
@inline
function iq1mStep(acc: usize, d: f32, x03: v128, x47: v128, s03: v128, s47: v128): void {
  if (usesFusedMadd()) {
    const dd = f32x4.splat(d);
    maddLanes(acc, 0, dd, x03);
    maddLanes(acc, 16, dd, x47);
    maddLanes(acc + ACC2, 0, dd, s03);
    maddLanes(acc + ACC2, 16, dd, s47);
  } else {
    laneFma(acc, d, x03, x47);
    laneFma(acc + ACC2, d, s03, s47);
  }
}

/** A token's IQ1_M sum from its accumulators, as iq1mDots ends. */
@inline
function iq1mFinish(acc: usize): f32 {
  let h1: f32;
  let h2: f32;
  if (usesFusedMadd()) {
    const s1 = f32x4.add(v128.load(acc), v128.load(acc, 16));
    const s2 = f32x4.add(v128.load(acc + ACC2), v128.load(acc + ACC2, 16));
    h1 = f32x4.extract_lane(s1, 0) + f32x4.extract_lane(s1, 2) + (f32x4.extract_lane(s1, 1) + f32x4.extract_lane(s1, 3));
    h2 = f32x4.extract_lane(s2, 0) + f32x4.extract_lane(s2, 2) + (f32x4.extract_lane(s2, 1) + f32x4.extract_lane(s2, 3));
  } else {
    h1 = hsum8(v128.load(acc), v128.load(acc, 16), v128.load(acc, 32), v128.load(acc, 48));
    const a2 = acc + ACC2;
    h2 = hsum8(v128.load(a2), v128.load(a2, 16), v128.load(a2, 32), v128.load(a2, 48));
  }
  return h1 + <f32>0.125 * h2;
}

/** A qh byte's two shift-sign bits, bit 3 for the first group's 8 bytes and bit 7 for the second's. */
const SHIFT_SIGN_BITS = memory.data<u8>([8, 8, 8, 8, 8, 8, 8, 8, 128, 128, 128, 128, 128, 128, 128, 128], 16);

/** 0xff in the 8 bytes of a group whose shift is negative (its sign bit in the qh byte set), else 0. */
@inline
function shiftSigns(qh: u32, bits: v128): v128 {
  return i8x16.eq(v128.and(i8x16.splat(<i8>qh), bits), bits);
}

/** iq1mxDots for tokens<C>() tokens, inlined once per count so its branches fold away. */
@inline
function iq1mxDotsOf<C>(w: usize, acts: usize, n: i32, out: usize): void {
  const count = tokens<C>();
  clearAcc(count);
  const nb = n >> 8;
  const zero = i8x16.splat(0);
  const one = i8x16.splat(1);
  const signBits = v128.load(SHIFT_SIGN_BITS);
  const a0 = load<usize>(acts);
  const a1 = count > 1 ? load<usize>(acts, 4) : a0;
  const a2 = count > 2 ? load<usize>(acts, 8) : a0;
  const a3 = count > 3 ? load<usize>(acts, 12) : a0;
  for (let b = 0; b < nb; b++) {
    const p = w + 56 * <usize>b;
    const sc0 = <u32>load<u16>(p + 48);
    const sc1 = <u32>load<u16>(p + 50);
    const sc2 = <u32>load<u16>(p + 52);
    const sc3 = <u32>load<u16>(p + 54);
    const wd = f16ToF32((sc0 >> 12) | ((sc1 >> 8) & 0x00f0) | ((sc2 >> 4) & 0x0f00) | (sc3 & 0xf000));
    let x0 = i32x4.splat(0);
    let y0 = x0;
    let u0 = x0;
    let v0 = x0;
    let x1 = x0;
    let y1 = x0;
    let u1 = x0;
    let v1 = x0;
    let x2 = x0;
    let y2 = x0;
    let u2 = x0;
    let v2 = x0;
    let x3 = x0;
    let y3 = x0;
    let u3 = x0;
    let v3 = x0;
    let o: usize = 256 * b;
    for (let ib = 0; ib < 8; ib++) {
      const s = <u32>load<u16>(p + 48 + 2 * (<usize>ib >> 1)) >> (6 * (ib & 1));
      const ls0 = i16x8.splat(<i16>(2 * (s & 7) + 1));
      const ls1 = i16x8.splat(<i16>(2 * ((s >> 3) & 7) + 1));
      const q = p + 4 * <usize>ib;
      // half h: groups 2h and 2h + 1, qh byte 2ib + h (bits 0-2 and 4-6 their indices' high bits, 3 and 7 their shifts' signs)
      const qh0 = <u32>load<u8>(p + 32 + 2 * <usize>ib);
      const qh1 = <u32>load<u8>(p + 33 + 2 * <usize>ib);
      const g0 = entryPair(IQ1S_GRID, <usize>load<u8>(q) | (<usize>(qh0 & 7) << 8), <usize>load<u8>(q, 1) | (<usize>((qh0 >> 4) & 7) << 8));
      const g1 = entryPair(IQ1S_GRID, <usize>load<u8>(q, 2) | (<usize>(qh1 & 7) << 8), <usize>load<u8>(q, 3) | (<usize>((qh1 >> 4) & 7) << 8));
      const m0 = i8x16.abs(g0);
      const n0 = i8x16.lt_s(g0, zero);
      const m1 = i8x16.abs(g1);
      const n1 = i8x16.lt_s(g1, zero);
      const t0 = shiftSigns(qh0, signBits);
      const t1 = shiftSigns(qh1, signBits);
      x0 = i32x4.add(x0, q80Lanes(m0, n0, a0 + o, ls0));
      y0 = i32x4.add(y0, q80Lanes(m1, n1, a0 + o + 16, ls1));
      u0 = i32x4.add(u0, q80Lanes(one, t0, a0 + o, ls0));
      v0 = i32x4.add(v0, q80Lanes(one, t1, a0 + o + 16, ls1));
      if (count > 1) {
        x1 = i32x4.add(x1, q80Lanes(m0, n0, a1 + o, ls0));
        y1 = i32x4.add(y1, q80Lanes(m1, n1, a1 + o + 16, ls1));
        u1 = i32x4.add(u1, q80Lanes(one, t0, a1 + o, ls0));
        v1 = i32x4.add(v1, q80Lanes(one, t1, a1 + o + 16, ls1));
      }
      if (count > 2) {
        x2 = i32x4.add(x2, q80Lanes(m0, n0, a2 + o, ls0));
        y2 = i32x4.add(y2, q80Lanes(m1, n1, a2 + o + 16, ls1));
        u2 = i32x4.add(u2, q80Lanes(one, t0, a2 + o, ls0));
        v2 = i32x4.add(v2, q80Lanes(one, t1, a2 + o + 16, ls1));
      }
      if (count > 3) {
        x3 = i32x4.add(x3, q80Lanes(m0, n0, a3 + o, ls0));
        y3 = i32x4.add(y3, q80Lanes(m1, n1, a3 + o + 16, ls1));
        u3 = i32x4.add(u3, q80Lanes(one, t0, a3 + o, ls0));
        v3 = i32x4.add(v3, q80Lanes(one, t1, a3 + o + 16, ls1));
      }
      o += 32;
    }
    const ad = 2 * <usize>n + 4 * <usize>b;
    iq1mStep(FACC, load<f32>(a0 + ad) * wd, x0, y0, u0, v0);
    if (count > 1) iq1mStep(FACC + ACC_BYTES, load<f32>(a1 + ad) * wd, x1, y1, u1, v1);
    if (count > 2) iq1mStep(FACC + 2 * ACC_BYTES, load<f32>(a2 + ad) * wd, x2, y2, u2, v2);
    if (count > 3) iq1mStep(FACC + 3 * ACC_BYTES, load<f32>(a3 + ad) * wd, x3, y3, u3, v3);
  }
  for (let t = 0; t < count; t++) store<f32>(out + 4 * t, iq1mFinish(FACC + ACC_BYTES * t));
}
