// Weight rows decoded from their GGUF bytes, one row at a time into a small buffer (the slice itself stays as it is):
// dequantRow to f32 for any type (bit-exact with gguf/dequantize.ts and ggml's dequantize_row_*), intRow to the
// integer form the integer dot products read.
//
// intRow: i16 quants in lane order (activations.as), and per block the float parameters:
//   Q8_0 / Q4_0 / Q5_0: q (Q4_0: nibble − 8; Q5_0: (nibble | 5th bit from qh) − 16); params f32 d per 32.
//   Q4_1 / Q5_1: the unsigned quants (nibble, Q5_1's with its 5th bit from qh); params per 32, 8 bytes: f32 d, f32 m.
//   MXFP4:       kvalues_fp4[nibble]; params f32 2^(e−128) per 32.
//   IQ4_NL:      kvalues_iq4nl[nibble]; params f32 d per 32.
//   Q4_K / Q5_K: scale × q (6-bit scale of the 32-element sub-block, q 4 or 5 bits); params per 256, 48 bytes:
//                f32 d, f32 dmin, then at 16 the eight 6-bit mins as i16.
//   IQ4_XS:      (6-bit scale − 32) × kvalues_iq4nl[nibble] per 32-element sub-block; params per 256, 48 bytes: f32 d.
//   IQ2_XXS:     (2s + 1) × ±iq2xxs_grid magnitude per 32-element sub-block (s its 4-bit scale, the sign from
//                keven_signs_q2xs); params per 256, 48 bytes: f32 d · 0.125 (ggml's final 0.125, kinds.as DOT_IQ4XS).
//   IQ2_XS:      as IQ2_XXS, each group's iq2xs_grid index and signs in its own u16, a 4-bit scale per 16 elements.
//   IQ3_XXS:     as IQ2_XXS, each 4 elements from an iq3xxs_grid point; params f32 d · 0.25.
//   IQ1_S:       (2s + 1) × iq1s_grid value per 32-element sub-block; params per 256, 48 bytes: f32 d, f32 −d · 0.125,
//                then at 16 the eight sub-blocks' ±(2s + 1) as i16 (the shift's coefficients, kinds.as DOT_IQ1S).
//   IQ1_M:       (2s + 1) × iq1s_grid value per 16 elements (s the half sub-block's 3-bit scale), then at dst + 2n a second
//                i16 row: (2s + 1) × ±1 (the sign of the group of 8's shift), both in lane order; params per 256, 48
//                bytes: f32 d (the f16 d from the scales' top nibbles; kinds.as DOT_IQ1M).
//   Q2_K:        (4-bit scale of the 16 elements) × q (0..3); params per 256, 48 bytes: f32 d, f32 dmin, then at 16 the
//                sixteen 4-bit mins as i16 (kinds.as DOT_Q2K).
//   Q3_K:        (signed 6-bit scale − 32 of the 16 elements) × q (−4..3: the low 2 bits, less 4 where the hmask bit is
//                clear); params per 256, 48 bytes: f32 d (kinds.as DOT_IQ4XS).
//   Q6_K:        scale × q (8-bit scale of the 16-element group, q unsigned 0..63); params per 256, 48 bytes: f32 d,
//                then at 16 the sixteen scales as i16.
// Folding the scales into the quants changes no integer ggml sums: its lanes hold Σ scale · (q · a) exactly.
import { T_F32, T_F16, T_BF16, T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0, T_MXFP4, T_IQ4_NL, T_IQ4_XS, T_IQ2_XXS, T_IQ2_XS, T_IQ3_XXS, T_IQ1_S, T_IQ1_M, T_Q2_K, T_Q3_K, T_Q4_K, T_Q5_K, T_Q6_K } from './kinds';
import { f16ToF32, f16x4ToF32 } from './ggml-float';
import { IQ1S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3XXS_GRID, KEVEN_SIGNS, entryPair } from './iq-grids';

export const K_PARAMS: i32 = 48;

/** kvalues_fp4 (ggml-common.h): MXFP4's E2M1 values doubled, as i8x16.swizzle reads them. */
export const KVALUES_FP4 = memory.data<i8>([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], 16);
/** kvalues_iq4nl (ggml-common.h): IQ4_NL's 16 non-linear levels. */
export const KVALUES_IQ4NL = memory.data<i8>([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], 16);

/** ggml_e8m0_to_fp32_half: 2^(e−128), the subnormals 2^-128 and 2^-127 for e < 2. */
@inline
export function e8m0Half(e: u32): f32 {
  return reinterpret<f32>(e < 2 ? <u32>0x00200000 << e : (e - 1) << 23);
}

@inline
function half(p: usize): f32 {
  return f16ToF32(<u32>load<u16>(p));
}

/** Bytes within each 16 reordered to lane order (activations.as). */
@inline
function lanes(v: v128): v128 {
  return i8x16.shuffle(v, v, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
}

/** 16 u8 quants in lane order × scale, as two i16x8 at dst. */
@inline
function storeScaledU(dst: usize, q: v128, scale: i32): void {
  const s = i16x8.splat(<i16>scale);
  v128.store(dst, i16x8.mul(i16x8.extend_low_i8x16_u(q), s));
  v128.store(dst, i16x8.mul(i16x8.extend_high_i8x16_u(q), s), 16);
}

/** 16 i8 values in lane order × scale, as two i16x8 at dst (|kvalue · scale| ≤ 127 · 32: no overflow). */
@inline
function storeScaledS(dst: usize, q: v128, scale: i32): void {
  const s = i16x8.splat(<i16>scale);
  v128.store(dst, i16x8.mul(i16x8.extend_low_i8x16_s(q), s));
  v128.store(dst, i16x8.mul(i16x8.extend_high_i8x16_s(q), s), 16);
}

@inline
function storeSigned(dst: usize, q: v128): void {
  v128.store(dst, i16x8.extend_low_i8x16_s(q));
  v128.store(dst, i16x8.extend_high_i8x16_s(q), 16);
}

/** ggml's get_scale_min_k4: scale (low byte) and min (high byte) of sub-block j of a Q4_K / Q5_K super-block. */
@inline
function scaleMinK4(sb: usize, j: i32): i32 {
  if (j < 4) return (<i32>load<u8>(sb + j) & 63) | ((<i32>load<u8>(sb + j + 4) & 63) << 8);
  const a = <i32>load<u8>(sb + j + 4);
  const sc = (a & 15) | ((<i32>load<u8>(sb + j - 4) >> 6) << 4);
  const m = (a >> 4) | ((<i32>load<u8>(sb + j) >> 6) << 4);
  return sc | (m << 8);
}

/** Bit k of each byte, for k = 0..7 twice (ggml's bytes_from_bits_32 masks). */
const BIT_OF_BYTE = memory.data<u8>([1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128], 16);

/** 16 bytes, byte j 16 where bit j of the 16 bits `bits` is set, else 0 (Q5_0/Q5_1's 5th bits, element order). */
@inline
function fifthBits(bits: u32): v128 {
  const v = i16x8.splat(<i16>bits);
  const bytes = i8x16.shuffle(v, v, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const m = v128.load(BIT_OF_BYTE);
  return v128.and(i8x16.eq(v128.and(bytes, m), m), i8x16.splat(16));
}

/** One row of n weights of type t at src, in the integer form, to dst (i16 × n) and params. */
export function intRow(t: i32, src: usize, n: i32, dst: usize, params: usize): void {
  const m15 = i8x16.splat(15);
  if (t == T_Q5_0) {
    const sixteen = i8x16.splat(16);
    for (let b = 0; b < n >> 5; b++) {
      const p = src + 22 * b;
      const o = dst + 64 * b;
      store<f32>(params + 4 * b, half(p));
      const qh = load<u32>(p + 2);
      const q = v128.load(p + 6);
      const lo = v128.or(v128.and(q, m15), fifthBits(qh & 0xffff));
      const hi = v128.or(i8x16.shr_u(q, 4), fifthBits(qh >> 16));
      storeSigned(o, lanes(i8x16.sub(lo, sixteen)));
      storeSigned(o + 32, lanes(i8x16.sub(hi, sixteen)));
    }
    return;
  }
  if (t == T_Q4_1 || t == T_Q5_1) {
    const five = t == T_Q5_1;
    const bytes: usize = five ? 24 : 20;
    for (let b = 0; b < n >> 5; b++) {
      const p = src + bytes * b;
      const o = dst + 64 * b;
      store<f32>(params + 8 * b, half(p));
      store<f32>(params + 8 * b, half(p + 2), 4);
      const q = v128.load(p + (five ? 8 : 4));
      let lo = v128.and(q, m15);
      let hi = i8x16.shr_u(q, 4);
      if (five) {
        const qh = load<u32>(p + 4);
        lo = v128.or(lo, fifthBits(qh & 0xffff));
        hi = v128.or(hi, fifthBits(qh >> 16));
      }
      storeScaledU(o, lanes(lo), 1);
      storeScaledU(o + 32, lanes(hi), 1);
    }
    return;
  }
  if (t == T_Q8_0 || t == T_Q4_0) {
    const bytes: usize = t == T_Q8_0 ? 34 : 18;
    for (let b = 0; b < n >> 5; b++) {
      const p = src + bytes * b;
      const o = dst + 64 * b;
      store<f32>(params + 4 * b, half(p));
      if (t == T_Q8_0) {
        storeSigned(o, lanes(v128.load(p, 2)));
        storeSigned(o + 32, lanes(v128.load(p, 18)));
      } else {
        const q = lanes(v128.load(p, 2));
        const eight = i8x16.splat(8);
        storeSigned(o, i8x16.sub(v128.and(q, m15), eight));
        storeSigned(o + 32, i8x16.sub(i8x16.shr_u(q, 4), eight));
      }
    }
    return;
  }
  if (t == T_MXFP4 || t == T_IQ4_NL) {
    const mx = t == T_MXFP4;
    const kv = v128.load(mx ? KVALUES_FP4 : KVALUES_IQ4NL);
    const bytes: usize = mx ? 17 : 18;
    for (let b = 0; b < n >> 5; b++) {
      const p = src + bytes * b;
      const o = dst + 64 * b;
      store<f32>(params + 4 * b, mx ? e8m0Half(<u32>load<u8>(p)) : half(p));
      const q = lanes(v128.load(p + (mx ? 1 : 2)));
      storeSigned(o, i8x16.swizzle(kv, v128.and(q, m15)));
      storeSigned(o + 32, i8x16.swizzle(kv, i8x16.shr_u(q, 4)));
    }
    return;
  }
  const nb = n >> 8;
  if (t == T_IQ4_XS) {
    const kv = v128.load(KVALUES_IQ4NL);
    for (let b = 0; b < nb; b++) {
      const p = src + 136 * b;
      store<f32>(params + K_PARAMS * b, half(p));
      const sh = <i32>load<u16>(p, 2);
      for (let ib = 0; ib < 8; ib++) {
        const ls = (((<i32>load<u8>(p + 4 + (ib >> 1)) >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
        const q = lanes(v128.load(p + 8 + 16 * ib));
        const o = dst + 2 * (256 * b + 32 * ib);
        storeScaledS(o, i8x16.swizzle(kv, v128.and(q, m15)), ls);
        storeScaledS(o + 32, i8x16.swizzle(kv, i8x16.shr_u(q, 4)), ls);
      }
    }
    return;
  }
  if (t == T_IQ2_XXS) {
    for (let b = 0; b < nb; b++) {
      const p = src + 66 * b;
      store<f32>(params + K_PARAMS * b, half(p) * 0.125);
      for (let ib = 0; ib < 8; ib++) {
        const q = p + 2 + 8 * ib;
        const aux1 = load<u32>(q, 4);
        const ls = i16x8.splat(<i16>(2 * (aux1 >> 28) + 1));
        const o = dst + 2 * (256 * b + 32 * ib);
        for (let h = 0; h < 2; h++) {
          // elements 16h..16h+15: groups 2h and 2h + 1, magnitudes (u8) and signs (±1) put in lane order together
          const g0 = 2 * h;
          const m = lanes(entryPair(IQ2XXS_GRID, <usize>load<u8>(q + g0), <usize>load<u8>(q + g0 + 1)));
          const sg = lanes(entryPair(KEVEN_SIGNS, <usize>((aux1 >> (7 * g0)) & 127), <usize>((aux1 >> (7 * (g0 + 1))) & 127)));
          v128.store(o + 32 * h, i16x8.mul(i16x8.mul(i16x8.extend_low_i8x16_u(m), i16x8.extend_low_i8x16_s(sg)), ls));
          v128.store(o + 32 * h, i16x8.mul(i16x8.mul(i16x8.extend_high_i8x16_u(m), i16x8.extend_high_i8x16_s(sg)), ls), 16);
        }
      }
    }
    return;
  }
  if (t == T_IQ2_XS) {
    for (let b = 0; b < nb; b++) {
      const p = src + 74 * b;
      store<f32>(params + K_PARAMS * b, half(p) * 0.125);
      for (let ib = 0; ib < 8; ib++) {
        const q = p + 2 + 8 * ib;
        const sc = <i32>load<u8>(p + 66 + ib);
        const o = dst + 2 * (256 * b + 32 * ib);
        for (let h = 0; h < 2; h++) {
          // elements 16h..16h+15: groups 2h and 2h + 1 (a u16 each: grid index, signs), the scale of nibble h
          const ls = i16x8.splat(<i16>(2 * ((sc >> (4 * h)) & 15) + 1));
          const q0 = <u32>load<u16>(q + 4 * h);
          const q1 = <u32>load<u16>(q + 4 * h + 2);
          const m = lanes(entryPair(IQ2XS_GRID, <usize>(q0 & 511), <usize>(q1 & 511)));
          const sg = lanes(entryPair(KEVEN_SIGNS, <usize>(q0 >> 9), <usize>(q1 >> 9)));
          v128.store(o + 32 * h, i16x8.mul(i16x8.mul(i16x8.extend_low_i8x16_u(m), i16x8.extend_low_i8x16_s(sg)), ls));
          v128.store(o + 32 * h, i16x8.mul(i16x8.mul(i16x8.extend_high_i8x16_u(m), i16x8.extend_high_i8x16_s(sg)), ls), 16);
        }
      }
    }
    return;
  }
  if (t == T_IQ1_S) {
    for (let b = 0; b < nb; b++) {
      const p = src + 50 * b;
      const pp = params + K_PARAMS * b;
      const d = half(p);
      store<f32>(pp, d);
      store<f32>(pp, -(d * 0.125), 4);
      for (let ib = 0; ib < 8; ib++) {
        const qh = <u32>load<u16>(p + 34 + 2 * ib);
        const s = <i32>(2 * ((qh >> 12) & 7) + 1);
        store<i16>(pp + 16 + 2 * ib, <i16>((qh & 0x8000) != 0 ? -s : s));
        const ls = i16x8.splat(<i16>s);
        const o = dst + 2 * (256 * b + 32 * ib);
        for (let h = 0; h < 2; h++) {
          // elements 16h..16h+15: groups 2h and 2h + 1, their 11-bit grid indices
          const g0 = 2 * h;
          const i0 = <usize>load<u8>(p + 2 + 4 * ib + g0) | (<usize>((qh >> (3 * g0)) & 7) << 8);
          const i1 = <usize>load<u8>(p + 3 + 4 * ib + g0) | (<usize>((qh >> (3 * g0 + 3)) & 7) << 8);
          const m = lanes(entryPair(IQ1S_GRID, i0, i1));
          v128.store(o + 32 * h, i16x8.mul(i16x8.extend_low_i8x16_s(m), ls));
          v128.store(o + 32 * h, i16x8.mul(i16x8.extend_high_i8x16_s(m), ls), 16);
        }
      }
    }
    return;
  }
  if (t == T_Q2_K) {
    const three = i8x16.splat(3);
    for (let b = 0; b < nb; b++) {
      const p = src + 84 * b;
      const pp = params + K_PARAMS * b;
      store<f32>(pp, half(p + 80));
      store<f32>(pp, half(p + 82), 4);
      const mins = i8x16.shr_u(v128.load(p), 4);
      v128.store(pp + 16, i16x8.extend_low_i8x16_u(mins));
      v128.store(pp + 32, i16x8.extend_high_i8x16_u(mins));
      for (let j = 0; j < 2; j++) {
        for (let k = 0; k < 4; k++) {
          for (let g = 0; g < 2; g++) {
            // elements 128j + 32k + 16g ..: bits 2k, 2k + 1 of bytes 32j + 16g .. of qs, sub-block 8j + 2k + g's scale
            const q = v128.and(i8x16.shr_u(v128.load(p + 16 + 32 * j + 16 * g), 2 * k), three);
            const sc = <i32>load<u8>(p + 8 * j + 2 * k + g) & 15;
            storeScaledU(dst + 2 * (256 * b + 128 * j + 32 * k + 16 * g), lanes(q), sc);
          }
        }
      }
    }
    return;
  }
  if (t == T_Q3_K) {
    const three = i8x16.splat(3);
    const four = i8x16.splat(4);
    for (let b = 0; b < nb; b++) {
      const p = src + 110 * b;
      store<f32>(params + K_PARAMS * b, half(p + 108));
      const sb = p + 96;
      for (let j = 0; j < 2; j++) {
        for (let k = 0; k < 4; k++) {
          const mask = i8x16.splat(<i8>(<i32>1 << <i32>(4 * j + k)));
          for (let g = 0; g < 2; g++) {
            const s = 8 * j + 2 * k + g;
            const low = s < 8 ? <i32>load<u8>(sb + s) & 15 : <i32>load<u8>(sb + s - 8) >> 4;
            const high = (<i32>load<u8>(sb + 8 + (s & 3)) >> (2 * (s >> 2))) & 3;
            const q = v128.and(i8x16.shr_u(v128.load(p + 32 + 32 * j + 16 * g), 2 * k), three);
            const set = i8x16.eq(v128.and(v128.load(p + 16 * g), mask), mask);
            // less 4 where the hmask bit is clear
            storeScaledS(dst + 2 * (256 * b + 128 * j + 32 * k + 16 * g), lanes(i8x16.sub(q, v128.andnot(four, set))), (low | (high << 4)) - 32);
          }
        }
      }
    }
    return;
  }
  if (t == T_IQ1_M) {
    const shifts = dst + 2 * <usize>n;
    const one = i8x16.splat(1);
    for (let b = 0; b < nb; b++) {
      const p = src + 56 * b;
      const sc0 = <u32>load<u16>(p + 48);
      const sc1 = <u32>load<u16>(p + 50);
      const sc2 = <u32>load<u16>(p + 52);
      const sc3 = <u32>load<u16>(p + 54);
      store<f32>(params + K_PARAMS * b, f16ToF32((sc0 >> 12) | ((sc1 >> 8) & 0x00f0) | ((sc2 >> 4) & 0x0f00) | (sc3 & 0xf000)));
      for (let ib = 0; ib < 8; ib++) {
        const s = <u32>load<u16>(p + 48 + 2 * (ib >> 1)) >> (6 * (ib & 1));
        const o: usize = 2 * (256 * b + 32 * ib);
        for (let h = 0; h < 2; h++) {
          // elements 16h..16h+15: groups 2h and 2h + 1 (qh byte 2ib + h: bits 0..2 and 4..6 their indices' high bits,
          // 3 and 7 their shifts' signs), the scale of half h
          const ls = i16x8.splat(<i16>(2 * ((s >> (3 * h)) & 7) + 1));
          const qh = <u32>load<u8>(p + 32 + 2 * ib + h);
          const i0 = <usize>load<u8>(p + 4 * ib + 2 * h) | (<usize>(qh & 7) << 8);
          const i1 = <usize>load<u8>(p + 4 * ib + 2 * h + 1) | (<usize>((qh >> 4) & 7) << 8);
          const m = lanes(entryPair(IQ1S_GRID, i0, i1));
          v128.store(dst + o + 32 * h, i16x8.mul(i16x8.extend_low_i8x16_s(m), ls));
          v128.store(dst + o + 32 * h, i16x8.mul(i16x8.extend_high_i8x16_s(m), ls), 16);
          // ±1 in every byte of each group's 8 (i8: ggml's delta1 / delta2), then in lane order: 0x01 bytes, or'd with
          // all ones where the sign bit is set (no select: V8 compiled one of i64s to a branch on a random bit)
          const s0: i64 = 0x0101010101010101 | -(<i64>((qh >> 3) & 1));
          const s1: i64 = 0x0101010101010101 | -(<i64>((qh >> 7) & 1));
          const sg = lanes(i64x2.replace_lane(i64x2.splat(s0), 1, s1));
          v128.store(shifts + o + 32 * h, i16x8.mul(i16x8.extend_low_i8x16_s(sg), ls));
          v128.store(shifts + o + 32 * h, i16x8.mul(i16x8.extend_high_i8x16_s(sg), ls), 16);
        }
      }
    }
    return;
  }
  if (t == T_IQ3_XXS) {
    for (let b = 0; b < nb; b++) {
      const p = src + 98 * b;
      store<f32>(params + K_PARAMS * b, half(p) * 0.25);
      for (let ib = 0; ib < 8; ib++) {
        const q = p + 2 + 8 * ib;
        const aux1 = load<u32>(p + 66 + 4 * ib);
        const ls = i16x8.splat(<i16>(2 * (aux1 >> 28) + 1));
        const o = dst + 2 * (256 * b + 32 * ib);
        for (let h = 0; h < 2; h++) {
          // elements 16h..16h+15: grid points 4h..4h+3 (4 magnitudes each), the signs of groups 2h and 2h + 1
          const g: usize = 4 * h;
          let v = i32x4.splat(load<u32>(IQ3XXS_GRID + 4 * <usize>load<u8>(q + g)));
          v = i32x4.replace_lane(v, 1, load<u32>(IQ3XXS_GRID + 4 * <usize>load<u8>(q + g + 1)));
          v = i32x4.replace_lane(v, 2, load<u32>(IQ3XXS_GRID + 4 * <usize>load<u8>(q + g + 2)));
          v = i32x4.replace_lane(v, 3, load<u32>(IQ3XXS_GRID + 4 * <usize>load<u8>(q + g + 3)));
          const m = lanes(v);
          const sg = lanes(
            i64x2.replace_lane(
              i64x2.splat(load<u64>(KEVEN_SIGNS + 8 * <usize>((aux1 >> (14 * h)) & 127))),
              1,
              load<u64>(KEVEN_SIGNS + 8 * <usize>((aux1 >> (14 * h + 7)) & 127)),
            ),
          );
          v128.store(o + 32 * h, i16x8.mul(i16x8.mul(i16x8.extend_low_i8x16_u(m), i16x8.extend_low_i8x16_s(sg)), ls));
          v128.store(o + 32 * h, i16x8.mul(i16x8.mul(i16x8.extend_high_i8x16_u(m), i16x8.extend_high_i8x16_s(sg)), ls), 16);
        }
      }
    }
    return;
  }
  if (t == T_Q4_K || t == T_Q5_K) {
    const five = t == T_Q5_K;
    const bytes: usize = five ? 176 : 144;
    const qsAt: usize = five ? 48 : 16;
    for (let b = 0; b < nb; b++) {
      const p = src + bytes * b;
      const pp = params + K_PARAMS * b;
      store<f32>(pp, half(p));
      store<f32>(pp, half(p + 2), 4);
      let sc0 = 0;
      let sc1 = 0;
      for (let jj = 0; jj < 4; jj++) {
        const sm0 = scaleMinK4(p + 4, 2 * jj);
        const sm1 = scaleMinK4(p + 4, 2 * jj + 1);
        store<i16>(pp + 16 + 4 * jj, <i16>(sm0 >> 8));
        store<i16>(pp + 18 + 4 * jj, <i16>(sm1 >> 8));
        sc0 = sm0 & 255;
        sc1 = sm1 & 255;
        for (let g = 0; g < 2; g++) {
          const q = lanes(v128.load(p + qsAt + 32 * jj + 16 * g));
          let lo = v128.and(q, m15);
          let hi = i8x16.shr_u(q, 4);
          if (five) {
            const qh = lanes(v128.load(p + 16 + 16 * g));
            const one = i8x16.splat(1);
            lo = v128.or(lo, i8x16.shl(v128.and(i8x16.shr_u(qh, <i32>(2 * jj)), one), 4));
            hi = v128.or(hi, i8x16.shl(v128.and(i8x16.shr_u(qh, <i32>(2 * jj + 1)), one), 4));
          }
          storeScaledU(dst + 2 * (256 * b + 64 * jj + 16 * g), lo, sc0);
          storeScaledU(dst + 2 * (256 * b + 64 * jj + 32 + 16 * g), hi, sc1);
        }
      }
    }
    return;
  }
  if (t == T_Q6_K) {
    const m3 = i8x16.splat(3);
    for (let b = 0; b < nb; b++) {
      const p = src + 210 * b;
      const pp = params + K_PARAMS * b;
      store<f32>(pp, half(p + 208));
      for (let j = 0; j < 16; j++) store<i16>(pp + 16 + 2 * j, <i16>load<i8>(p + 192 + j));
      for (let h = 0; h < 2; h++) {
        for (let g = 0; g < 2; g++) {
          const ql0 = lanes(v128.load(p + 64 * h + 16 * g));
          const ql1 = lanes(v128.load(p + 64 * h + 32 + 16 * g));
          const qh = lanes(v128.load(p + 128 + 32 * h + 16 * g));
          const q0 = v128.or(v128.and(ql0, m15), i8x16.shl(v128.and(qh, m3), 4));
          const q1 = v128.or(v128.and(ql1, m15), i8x16.shl(v128.and(i8x16.shr_u(qh, 2), m3), 4));
          const q2 = v128.or(i8x16.shr_u(ql0, 4), i8x16.shl(v128.and(i8x16.shr_u(qh, 4), m3), 4));
          const q3 = v128.or(i8x16.shr_u(ql1, 4), i8x16.shl(i8x16.shr_u(qh, 6), 4));
          const e = 128 * h + 16 * g;
          const sc = p + 192 + 8 * h + g;
          storeScaledU(dst + 2 * (256 * b + e), q0, <i32>load<i8>(sc));
          storeScaledU(dst + 2 * (256 * b + e + 32), q1, <i32>load<i8>(sc + 2));
          storeScaledU(dst + 2 * (256 * b + e + 64), q2, <i32>load<i8>(sc + 4));
          storeScaledU(dst + 2 * (256 * b + e + 96), q3, <i32>load<i8>(sc + 6));
        }
      }
    }
  }
}

/** 112 << 23: the rebias from an f16's exponent to an f32's, added to the moved bits. */
const F16_REBIAS: i32 = 0x38000000;

/**
 * Four of the eight f16s in h (the high four or the low) as f32, exact for every normal f16 (no zero, subnormal, inf
 * or NaN among them: f16Row checks): the sign-extended bits shifted so that sign, exponent and mantissa land in an
 * f32's places, the exponent rebiased by an integer add.
 */
@inline
function f16Normal4(h: v128, high: bool): v128 {
  const x = high ? i32x4.extend_high_i16x8_s(h) : i32x4.extend_low_i16x8_s(h);
  return i32x4.add(v128.and(i32x4.shl(x, 13), i32x4.splat(<i32>0x8fffe000)), i32x4.splat(F16_REBIAS));
}

/**
 * A row of n f16s at src as f32 at dst, bit for bit as half() (F16C's vcvtph2ps): eight at a time, by f16Normal4 where
 * all eight are normal, else by f16x4ToF32 (zeros, subnormals, inf and NaN too; slower, and needed for ~2 % of eights
 * in the bench's weights). Scaling the moved bits by 2^112 instead would be exact for subnormals as well, but an
 * f32 subnormal operand costs a microcode assist per multiply: 1 row took 23.9 ms that way against 15.5 (AMD EPYC).
 */
function f16Row(src: usize, n: i32, dst: usize): void {
  const expMask = i16x8.splat(0x7c00);
  const zero = i16x8.splat(0);
  let i = 0;
  for (; i + 8 <= n; i += 8) {
    const h = v128.load(src + 2 * i);
    const e = v128.and(h, expMask);
    if (v128.any_true(v128.or(i16x8.eq(e, expMask), i16x8.eq(e, zero)))) {
      v128.store(dst + 4 * i, f16x4ToF32(i32x4.extend_low_i16x8_u(h)));
      v128.store(dst + 4 * i, f16x4ToF32(i32x4.extend_high_i16x8_u(h)), 16);
      continue;
    }
    v128.store(dst + 4 * i, f16Normal4(h, false));
    v128.store(dst + 4 * i, f16Normal4(h, true), 16);
  }
  for (; i < n; i++) store<f32>(dst + 4 * i, half(src + 2 * i));
}

/** One row of n weights of type t at src, dequantized to f32 at dst. */
export function dequantRow(t: i32, src: usize, n: i32, dst: usize): void {
  switch (t) {
    case T_F32:
      memory.copy(dst, src, 4 * n);
      return;
    case T_F16:
      f16Row(src, n, dst);
      return;
    case T_BF16: {
      let i = 0;
      for (; i + 8 <= n; i += 8) {
        const h = v128.load(src + 2 * i);
        v128.store(dst + 4 * i, i32x4.shl(i32x4.extend_low_i16x8_u(h), 16));
        v128.store(dst + 4 * i, i32x4.shl(i32x4.extend_high_i16x8_u(h), 16), 16);
      }
      for (; i < n; i++) store<u32>(dst + 4 * i, <u32>load<u16>(src + 2 * i) << 16);
      return;
    }
    case T_Q4_0:
    case T_Q4_1:
    case T_Q5_0:
    case T_Q5_1:
    case T_Q8_0:
      dequant32(t, src, n >> 5, dst);
      return;
    case T_IQ4_NL:
      for (let b = 0; b < n >> 5; b++) {
        const p = src + 18 * b;
        const d = half(p);
        for (let j = 0; j < 16; j++) {
          const q = <usize>load<u8>(p + 2 + j);
          store<f32>(dst + 4 * (32 * b + j), d * <f32>load<i8>(KVALUES_IQ4NL + (q & 15)));
          store<f32>(dst + 4 * (32 * b + j + 16), d * <f32>load<i8>(KVALUES_IQ4NL + (q >> 4)));
        }
      }
      return;
    case T_IQ4_XS:
      for (let b = 0; b < n >> 8; b++) {
        const p = src + 136 * b;
        const d = half(p);
        const sh = <i32>load<u16>(p, 2);
        for (let ib = 0; ib < 8; ib++) {
          const ls = (((<i32>load<u8>(p + 4 + (ib >> 1)) >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
          const dl = d * <f32>ls;
          const o = dst + 4 * (256 * b + 32 * ib);
          for (let j = 0; j < 16; j++) {
            const q = <usize>load<u8>(p + 8 + 16 * ib + j);
            store<f32>(o + 4 * j, dl * <f32>load<i8>(KVALUES_IQ4NL + (q & 15)));
            store<f32>(o + 4 * (j + 16), dl * <f32>load<i8>(KVALUES_IQ4NL + (q >> 4)));
          }
        }
      }
      return;
    case T_IQ2_XXS:
      for (let b = 0; b < n >> 8; b++) {
        const p = src + 66 * b;
        const d = half(p);
        for (let ib = 0; ib < 8; ib++) {
          const q = p + 2 + 8 * ib;
          const aux1 = load<u32>(q, 4);
          const db = d * (<f32>0.5 + <f32>(aux1 >> 28)) * <f32>0.25;
          const o = dst + 4 * (256 * b + 32 * ib);
          for (let g = 0; g < 4; g++) {
            const grid = IQ2XXS_GRID + 8 * <usize>load<u8>(q + g);
            const signs = KEVEN_SIGNS + 8 * <usize>((aux1 >> (7 * g)) & 127);
            for (let j = 0; j < 8; j++) {
              const v = db * <f32>load<u8>(grid + j);
              store<f32>(o + 4 * (8 * g + j), load<i8>(signs + j) < 0 ? -v : v);
            }
          }
        }
      }
      return;
    case T_IQ2_XS:
      for (let b = 0; b < n >> 8; b++) {
        const p = src + 74 * b;
        const d = half(p);
        for (let ib = 0; ib < 8; ib++) {
          const sc = <u32>load<u8>(p + 66 + ib);
          const o = dst + 4 * (256 * b + 32 * ib);
          for (let g = 0; g < 4; g++) {
            const db = d * (<f32>0.5 + <f32>((sc >> (4 * (g >> 1))) & 15)) * <f32>0.25;
            const qs = <u32>load<u16>(p + 2 + 8 * ib + 2 * g);
            const grid = IQ2XS_GRID + 8 * <usize>(qs & 511);
            const signs = KEVEN_SIGNS + 8 * <usize>(qs >> 9);
            for (let j = 0; j < 8; j++) {
              const v = db * <f32>load<u8>(grid + j);
              store<f32>(o + 4 * (8 * g + j), load<i8>(signs + j) < 0 ? -v : v);
            }
          }
        }
      }
      return;
    case T_IQ1_S:
      for (let b = 0; b < n >> 8; b++) {
        const p = src + 50 * b;
        const d = half(p);
        for (let ib = 0; ib < 8; ib++) {
          const qh = <u32>load<u16>(p + 34 + 2 * ib);
          const dl = d * <f32>(<i32>(2 * ((qh >> 12) & 7) + 1));
          const delta: f32 = (qh & 0x8000) != 0 ? -0.125 : 0.125;
          const o = dst + 4 * (256 * b + 32 * ib);
          for (let g = 0; g < 4; g++) {
            const grid = IQ1S_GRID + 8 * (<usize>load<u8>(p + 2 + 4 * ib + g) | (<usize>((qh >> (3 * g)) & 7) << 8));
            for (let j = 0; j < 8; j++) store<f32>(o + 4 * (8 * g + j), dl * (<f32>load<i8>(grid + j) + delta));
          }
        }
      }
      return;
    case T_IQ1_M:
      for (let b = 0; b < n >> 8; b++) {
        const p = src + 56 * b;
        const sc0 = <u32>load<u16>(p + 48);
        const sc1 = <u32>load<u16>(p + 50);
        const sc2 = <u32>load<u16>(p + 52);
        const sc3 = <u32>load<u16>(p + 54);
        const d = f16ToF32((sc0 >> 12) | ((sc1 >> 8) & 0x00f0) | ((sc2 >> 4) & 0x0f00) | (sc3 & 0xf000));
        for (let ib = 0; ib < 8; ib++) {
          const s = <u32>load<u16>(p + 48 + 2 * (ib >> 1)) >> (6 * (ib & 1));
          const o = dst + 4 * (256 * b + 32 * ib);
          for (let g = 0; g < 4; g++) {
            const dl = d * <f32>(<i32>(2 * ((s >> (3 * (g >> 1))) & 7) + 1));
            const qh = <u32>load<u8>(p + 32 + 2 * ib + (g >> 1)) >> (4 * (g & 1));
            const delta: f32 = (qh & 8) != 0 ? -0.125 : 0.125;
            const grid = IQ1S_GRID + 8 * (<usize>load<u8>(p + 4 * ib + g) | (<usize>(qh & 7) << 8));
            for (let j = 0; j < 8; j++) store<f32>(o + 4 * (8 * g + j), dl * (<f32>load<i8>(grid + j) + delta));
          }
        }
      }
      return;
    case T_IQ3_XXS:
      for (let b = 0; b < n >> 8; b++) {
        const p = src + 98 * b;
        const d = half(p);
        for (let ib = 0; ib < 8; ib++) {
          const aux1 = load<u32>(p + 66 + 4 * ib);
          const db = d * (<f32>0.5 + <f32>(aux1 >> 28)) * <f32>0.5;
          const o = dst + 4 * (256 * b + 32 * ib);
          for (let g = 0; g < 4; g++) {
            const signs = KEVEN_SIGNS + 8 * <usize>((aux1 >> (7 * g)) & 127);
            for (let j = 0; j < 8; j++) {
              const grid = IQ3XXS_GRID + 4 * <usize>load<u8>(p + 2 + 8 * ib + 2 * g + (j >> 2));
              const v = db * <f32>load<u8>(grid + (j & 3));
              store<f32>(o + 4 * (8 * g + j), load<i8>(signs + j) < 0 ? -v : v);
            }
          }
        }
      }
      return;
    case T_MXFP4:
      for (let b = 0; b < n >> 5; b++) {
        const p = src + 17 * b;
        const d = e8m0Half(<u32>load<u8>(p));
        for (let j = 0; j < 16; j++) {
          const q = <usize>load<u8>(p + 1 + j);
          store<f32>(dst + 4 * (32 * b + j), <f32>load<i8>(KVALUES_FP4 + (q & 15)) * d);
          store<f32>(dst + 4 * (32 * b + j + 16), <f32>load<i8>(KVALUES_FP4 + (q >> 4)) * d);
        }
      }
      return;
    case T_Q2_K:
      dequantQ2K(src, n >> 8, dst);
      return;
    case T_Q3_K:
      dequantQ3K(src, n >> 8, dst);
      return;
    case T_Q4_K:
    case T_Q5_K:
      dequantQ45K(t == T_Q5_K, src, n >> 8, dst);
      return;
    case T_Q6_K:
      dequantQ6K(src, n >> 8, dst);
      return;
  }
}

function dequant32(t: i32, src: usize, nb: i32, dst: usize): void {
  for (let b = 0; b < nb; b++) {
    const o = dst + 128 * b;
    if (t == T_Q8_0) {
      const p = src + 34 * b;
      const d = half(p);
      for (let j = 0; j < 32; j++) store<f32>(o + 4 * j, <f32>load<i8>(p + 2 + j) * d);
    } else if (t == T_Q4_0) {
      const p = src + 18 * b;
      const d = half(p);
      for (let j = 0; j < 16; j++) {
        const q = <i32>load<u8>(p + 2 + j);
        store<f32>(o + 4 * j, <f32>((q & 15) - 8) * d);
        store<f32>(o + 4 * (j + 16), <f32>((q >> 4) - 8) * d);
      }
    } else if (t == T_Q4_1) {
      const p = src + 20 * b;
      const d = half(p);
      const m = half(p + 2);
      for (let j = 0; j < 16; j++) {
        const q = <i32>load<u8>(p + 4 + j);
        store<f32>(o + 4 * j, <f32>(q & 15) * d + m);
        store<f32>(o + 4 * (j + 16), <f32>(q >> 4) * d + m);
      }
    } else {
      // Q5_0 / Q5_1: 5th bits in a little-endian u32
      const one = t == T_Q5_1;
      const p = src + (one ? 24 : 22) * b;
      const d = half(p);
      const m = one ? half(p + 2) : <f32>0;
      const qh = load<u32>(p + (one ? 4 : 2));
      const qs = p + (one ? 8 : 6);
      for (let j = 0; j < 16; j++) {
        const q = <i32>load<u8>(qs + j);
        const lo = (q & 15) | (<i32>((qh >> j) & 1) << 4);
        const hi = (q >> 4) | (<i32>((qh >> (j + 16)) & 1) << 4);
        if (one) {
          store<f32>(o + 4 * j, <f32>lo * d + m);
          store<f32>(o + 4 * (j + 16), <f32>hi * d + m);
        } else {
          store<f32>(o + 4 * j, <f32>(lo - 16) * d);
          store<f32>(o + 4 * (j + 16), <f32>(hi - 16) * d);
        }
      }
    }
  }
}

function dequantQ2K(src: usize, nb: i32, dst: usize): void {
  for (let b = 0; b < nb; b++) {
    const p = src + 84 * b;
    const d = half(p + 80);
    const dmin = half(p + 82);
    for (let s = 0; s < 16; s++) {
      const sc = <i32>load<u8>(p + s);
      const dl = d * <f32>(sc & 15);
      const ml = dmin * <f32>(sc >> 4);
      const q = p + 16 + 32 * (s >> 3) + 16 * (s & 1);
      const shift = 2 * ((s >> 1) & 3);
      const o = dst + 4 * (256 * b + 16 * s);
      for (let l = 0; l < 16; l++) store<f32>(o + 4 * l, dl * <f32>((<i32>load<u8>(q + l) >> shift) & 3) - ml);
    }
  }
}

function dequantQ3K(src: usize, nb: i32, dst: usize): void {
  for (let b = 0; b < nb; b++) {
    const p = src + 110 * b;
    const d = half(p + 108);
    const sb = p + 96;
    for (let s = 0; s < 16; s++) {
      const low = s < 8 ? <i32>load<u8>(sb + s) & 15 : <i32>load<u8>(sb + s - 8) >> 4;
      const high = (<i32>load<u8>(sb + 8 + (s & 3)) >> (2 * (s >> 2))) & 3;
      const dl = d * <f32>((low | (high << 4)) - 32);
      const h = s >> 3;
      const j = (s >> 1) & 3;
      const k = s & 1;
      const q = p + 32 + 32 * h + 16 * k;
      const hm = p + 16 * k;
      const mask = 1 << (4 * h + j);
      const o = dst + 4 * (256 * b + 16 * s);
      for (let l = 0; l < 16; l++) {
        const v = ((<i32>load<u8>(q + l) >> (2 * j)) & 3) - ((<i32>load<u8>(hm + l) & mask) != 0 ? 0 : 4);
        store<f32>(o + 4 * l, dl * <f32>v);
      }
    }
  }
}

function dequantQ45K(five: bool, src: usize, nb: i32, dst: usize): void {
  for (let b = 0; b < nb; b++) {
    const p = src + (five ? 176 : 144) * b;
    const d = half(p);
    const dmin = half(p + 2);
    for (let s = 0; s < 8; s++) {
      const sm = scaleMinK4(p + 4, s);
      const dl = d * <f32>(sm & 255);
      const ml = dmin * <f32>(sm >> 8);
      const q = p + (five ? 48 : 16) + 32 * (s >> 1);
      const shift = (s & 1) * 4;
      const o = dst + 4 * (256 * b + 32 * s);
      for (let l = 0; l < 32; l++) {
        let v = (<i32>load<u8>(q + l) >> shift) & 15;
        if (five) v |= ((<i32>load<u8>(p + 16 + l) >> s) & 1) << 4;
        store<f32>(o + 4 * l, dl * <f32>v - ml);
      }
    }
  }
}

function dequantQ6K(src: usize, nb: i32, dst: usize): void {
  for (let b = 0; b < nb; b++) {
    const p = src + 210 * b;
    const d = half(p + 208);
    for (let h = 0; h < 2; h++) {
      for (let j = 0; j < 4; j++) {
        const ql = p + 64 * h + 32 * (j & 1);
        const lshift = (j >> 1) * 4;
        const qh = p + 128 + 32 * h;
        const e0 = 128 * h + 32 * j;
        const s0 = d * <f32>load<i8>(p + 192 + (e0 >> 4));
        const s1 = d * <f32>load<i8>(p + 193 + (e0 >> 4));
        const o = dst + 4 * (256 * b + e0);
        for (let l = 0; l < 32; l++) {
          const v = (((<i32>load<u8>(ql + l) >> lshift) & 15) | (((<i32>load<u8>(qh + l) >> (2 * j)) & 3) << 4)) - 32;
          store<f32>(o + 4 * l, (l < 16 ? s0 : s1) * <f32>v);
        }
      }
    }
  }
}
