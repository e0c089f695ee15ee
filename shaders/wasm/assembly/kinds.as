// What each matrix of a slice is read as, from its ggml type and the numerics: how a weight row is decoded
// (ROW_*), what its activations become (ACT_*: ggml's vec_dot type in 'llama' numerics, the f32 rows in 'exact'),
// and which dot product meets them (DOT_*).

// ggml type ids (gguf/quant-types.ts).
export const T_F32: i32 = 0;
export const T_F16: i32 = 1;
export const T_Q4_0: i32 = 2;
export const T_Q4_1: i32 = 3;
export const T_IQ4_NL: i32 = 20;
export const T_IQ4_XS: i32 = 23;
export const T_IQ2_XXS: i32 = 16;
export const T_IQ2_XS: i32 = 17;
export const T_IQ3_XXS: i32 = 18;
export const T_IQ1_S: i32 = 19;
export const T_IQ1_M: i32 = 29;
export const T_Q5_0: i32 = 6;
export const T_Q5_1: i32 = 7;
export const T_Q8_0: i32 = 8;
export const T_Q2_K: i32 = 10;
export const T_Q3_K: i32 = 11;
export const T_Q4_K: i32 = 12;
export const T_Q5_K: i32 = 13;
export const T_Q6_K: i32 = 14;
export const T_BF16: i32 = 30;
export const T_MXFP4: i32 = 39;

/** A weight row dequantized to f32 (any type). */
export const ROW_F32: i32 = 0;
/** A weight row as i16 quants in lane order with the K-quants' 6-bit/8-bit scales folded in (weight-rows.as). */
export const ROW_INT: i32 = 1;
/** A row read in place from its GGUF bytes by its dot (dots.as q4kDots; the relaxed build's k45Dots, q6kDots, q2kDots, q3kDots, iq4xsDots, iqGridDots, q80Dots, q4tDots: Q4_0, Q5_0, Q4_1, Q5_1, MXFP4, IQ4_NL). */
export const ROW_GGUF: i32 = 3;

/**
 * This binary is the relaxed-SIMD build (build.ts compiles the same sources twice, with and without
 * `--enable relaxed-simd`): the K-quants' integer dots use i16x8.relaxed_dot_i8x16_i7x16_s, which is exact and
 * deterministic here because its second operand (the weights' unsigned quants, 0..63) never sets a lane's top bit.
 */
export const RELAXED: bool = ASC_FEATURE_RELAXED_SIMD;

/** Activations as f32 values: the row itself, or ggml's rounding of it to f16, bf16, Q8_0 or Q8_K (as values). */
export const ACT_F32: i32 = 0;
export const ACT_F16: i32 = 1;
export const ACT_BF16: i32 = 2;
export const ACT_Q8_0_VALUES: i32 = 3;
export const ACT_Q8_K_VALUES: i32 = 4;
/** Activations as Q8_0 / Q8_K quants for the integer dot products (activations.as has the layouts). */
export const ACT_Q8_0: i32 = 5;
export const ACT_Q8_K: i32 = 6;
/** Activations as Q8_1: ACT_Q8_0's record, then per block ggml's f16 s = f16(amax/127 · Σ q), f16-decoded (f32). */
export const ACT_Q8_1: i32 = 7;
/**
 * ACT_Q8_0's record with q as i8 in element order in its first n bytes: the relaxed build's Q8_0, Q4_0, MXFP4 and
 * IQ4_NL weights (DOT_Q80, DOT_Q40, DOT_MX4, DOT_NL4).
 */
export const ACT_Q8_0_I8: i32 = 8;
/** ACT_Q8_1's record with q as i8 in element order in its first n bytes: the relaxed build's Q4_1 and Q5_1 (DOT_Q41, DOT_Q51). */
export const ACT_Q8_1_I8: i32 = 9;

/** f32 · f32 in any order ('exact' numerics; 'llama' only for a type without a dot of its own here, none since issue 26). */
export const DOT_PLAIN: i32 = 0;
/** ggml_vec_dot_f32 / _f16 / _bf16 on AVX2, in their order. */
export const DOT_GGML_F32: i32 = 1;
export const DOT_GGML_F16: i32 = 2;
export const DOT_GGML_BF16: i32 = 3;
/** ggml_vec_dot_q8_0_q8_0 / q4_0_q8_0 / q5_0_q8_0, q4_K_q8_K, q5_K_q8_K, q6_K_q8_K on AVX2: integer lanes, their fmas and sums. */
export const DOT_Q32: i32 = 4;
export const DOT_Q4K: i32 = 5;
export const DOT_Q5K: i32 = 6;
export const DOT_Q6K: i32 = 7;
/**
 * ggml_vec_dot_mxfp4_q8_0 / ggml_vec_dot_iq4_nl_q8_0 on AVX2: Q8_0's integer lanes (the nibbles looked up in a table),
 * but blocks in pairs into two accumulators summed before the hsum, and an odd last block in scalar code (dots.as).
 */
export const DOT_Q32P: i32 = 8;
/**
 * ggml_vec_dot_iq4_xs_q8_K, ggml_vec_dot_iq2_xxs_q8_K, _iq2_xs_q8_K and _iq3_xxs_q8_K on AVX2: per super-block 8 integer lanes (the sub-blocks'
 * scales folded into the weights, intRow), one fma each with f16 d · y.d; no mins. IQ2_XXS's (and IQ2_XS's) final 0.125 · hsum
 * (IQ3_XXS's 0.25) is folded into its d (intRow stores f16 d · 0.125 or 0.25): scaling by a power of two commutes with every f32 rounding on the
 * way (fma, hsum) while no value is subnormal, so the sum has ggml's bits.
 */
export const DOT_IQ4XS: i32 = 9;
/**
 * ggml_vec_dot_iq1_s_q8_K on AVX2: DOT_IQ4XS's lanes (the grid values times 2s + 1, intRow), plus one scalar sum of the
 * shifts per super-block, Σ ±(2s + 1) · (the sub-block's two bsums), through accum1 = fma(d, sum, accum1), as DOT_Q5K
 * adds its mins (its coefficients at 16 in the params, its factor at 4: −f16 d · 0.125, so that ggml's final 0.125 ·
 * accum1 is that accumulator exactly); the result hsum8 + it.
 */
export const DOT_IQ1S: i32 = 10;
/**
 * ggml_vec_dot_q4_1_q8_1 / _q5_1_q8_1 on AVX2: DOT_Q32's lanes (the unsigned quants, 0..15 or 0..31) through
 * acc = fma(x.d · y.d, lane, acc), and the mins one scalar sum per row, summs = fma(x.m, y.s, summs) (y.s: Q8_1's f16
 * s); the result hsum8 + summs. Params per 32: f32 d, f32 m.
 */
export const DOT_Q1: i32 = 11;
/**
 * ggml_vec_dot_iq1_m_q8_K on AVX2: two sets of 8 integer lanes per super-block, each through its own accumulator
 * (acc = fma(y.d · f16 d, lane, acc)): the first DOT_IQ4XS's ((2s + 1) · grid value, intRow), the second the shifts'
 * (2s + 1) · ±1 per group of 8 against the same activations (intRow writes them as a second i16 row after the first);
 * the result hsum8(first) + 0.125 · hsum8(second) (dots.as iq1mDots).
 */
export const DOT_IQ1M: i32 = 12;
/**
 * ggml_vec_dot_q2_K_q8_K on AVX2: per super-block first the mins into the lanes' accumulator, lane l =
 * min[2l] · bsum[2l] + min[2l + 1] · bsum[2l + 1] through acc = fma(−y.d · dmin, lane, acc), then the quants' lanes
 * (the 4-bit scales folded in by intRow) through acc = fma(y.d · d, lane, acc); hsum8. (Q3_K is DOT_IQ4XS: its signed
 * 6-bit scales folded in, no mins.)
 */
export const DOT_Q2K: i32 = 13;
/**
 * The relaxed build's Q8_0 (dots.as q80Dots): ggml_vec_dot_q8_0_q8_0 on AVX2 with the weight rows read in place from
 * their GGUF blocks and ACT_Q8_0_I8 activations; DOT_Q32's lanes, float steps and sums.
 */
export const DOT_Q80: i32 = 14;
/**
 * The relaxed build's MXFP4 and IQ4_NL (dots.as q4tDots): ggml_vec_dot_mxfp4_q8_0 / _iq4_nl_q8_0 on AVX2 with the
 * weight rows read in place (the nibbles looked up in kvalues by a swizzle) and ACT_Q8_0_I8 activations; DOT_Q32P's
 * lanes, paired float steps, scalar tail and sums.
 */
export const DOT_MX4: i32 = 15;
export const DOT_NL4: i32 = 16;
/** The relaxed build's Q4_0, read in place by q4tDots (the nibbles minus 8 by the same lookup): DOT_Q32's steps. */
export const DOT_Q40: i32 = 17;
/**
 * The relaxed build's Q3_K (dots.as q3kDots): ggml_vec_dot_q3_K_q8_K on AVX2 with the weight rows read in place; the
 * lanes and float steps of DOT_IQ4XS (acc = fma(y.d · d, lane, acc)), which the simd build reads Q3_K's intRow form with.
 */
export const DOT_Q3K: i32 = 18;
/**
 * The relaxed build's IQ4_XS (dots.as iq4xsDots): ggml_vec_dot_iq4_xs_q8_K on AVX2 with the weight rows read in place
 * (the nibbles looked up in kvalues_iq4nl, the signs moved onto the activations); DOT_IQ4XS's lanes and float steps.
 */
export const DOT_IQ4X: i32 = 19;
/**
 * The relaxed build's IQ2_XXS, IQ2_XS and IQ3_XXS (dots.as iqGridDots): their AVX2 vec_dots with the weight rows read
 * in place (each group's magnitudes from its grid, the signs from keven_signs moved onto the activations); the lanes
 * and float steps of DOT_IQ4XS (the grid type's 0.125 or 0.25 folded into d, as intRow folds it).
 */
export const DOT_IQ2XXS: i32 = 20;
export const DOT_IQ2XS: i32 = 21;
export const DOT_IQ3XXS: i32 = 22;
/**
 * The relaxed build's Q5_0, Q4_1 and Q5_1 (dots.as q4tDots): their AVX2 vec_dots with the weight rows read in place
 * (the nibbles, and Q5's fifth bits expanded from qh as ggml's bytes_from_bits_32) against ACT_Q8_0_I8 (Q5_0) or
 * ACT_Q8_1_I8 (Q4_1, Q5_1) records; DOT_Q32's (Q5_0) or DOT_Q1's lanes, float steps and sums.
 */
export const DOT_Q50: i32 = 23;
export const DOT_Q41: i32 = 24;
export const DOT_Q51: i32 = 25;
/**
 * The relaxed build's IQ1_S (dots.as iq1sDots): ggml_vec_dot_iq1_s_q8_K on AVX2 with the weight rows read in place (the
 * grid's −1/0/+1 values through the sign trick, pmaddwd by 2s + 1); DOT_IQ1S's lanes, shifts and float steps.
 */
export const DOT_IQ1SX: i32 = 26;
/**
 * The relaxed build's IQ1_M (dots.as iq1mxDots): ggml_vec_dot_iq1_m_q8_K on AVX2 with the weight rows read in place
 * (the grid's −1/0/+1 values, and each group's shift ±1, through the sign trick; pmaddwd by the half's 2s + 1);
 * DOT_IQ1M's two sets of lanes, float steps and sum.
 */
export const DOT_IQ1MX: i32 = 27;

export function isKQuant(t: i32): bool {
  return t == T_Q2_K || t == T_Q3_K || t == T_Q4_K || t == T_Q5_K || t == T_Q6_K;
}

/** Super-blocks of 256 elements with Q8_K activations: the K-quants, IQ4_XS, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S and IQ1_M. */
export function isSuperBlock(t: i32): bool {
  return isKQuant(t) || t == T_IQ4_XS || t == T_IQ2_XXS || t == T_IQ2_XS || t == T_IQ3_XXS || t == T_IQ1_S || t == T_IQ1_M;
}

export function rowKind(t: i32, llama: bool): i32 {
  if (llama && (t == T_Q4_K || (RELAXED && (t == T_Q2_K || t == T_Q3_K || t == T_IQ4_XS || t == T_IQ2_XXS || t == T_IQ2_XS || t == T_IQ3_XXS || t == T_IQ1_S || t == T_IQ1_M || t == T_Q5_K || t == T_Q6_K || t == T_Q8_0 || t == T_Q4_0 || t == T_Q5_0 || t == T_Q4_1 || t == T_Q5_1 || t == T_MXFP4 || t == T_IQ4_NL)))) return ROW_GGUF;
  return llama && (t == T_Q8_0 || t == T_Q4_0 || t == T_Q4_1 || t == T_Q5_0 || t == T_Q5_1 || t == T_Q2_K || t == T_Q3_K || t == T_MXFP4 || t == T_IQ4_NL || t == T_IQ4_XS || t == T_IQ2_XXS || t == T_IQ2_XS || t == T_IQ3_XXS || t == T_IQ1_S || t == T_IQ1_M || t == T_Q4_K || t == T_Q5_K || t == T_Q6_K) ? ROW_INT : ROW_F32;
}

export function actKind(t: i32, llama: bool): i32 {
  if (!llama || t == T_F32) return ACT_F32;
  if (t == T_F16) return ACT_F16;
  if (t == T_BF16) return ACT_BF16;
  if (RELAXED && (t == T_Q8_0 || t == T_Q4_0 || t == T_Q5_0 || t == T_MXFP4 || t == T_IQ4_NL)) return ACT_Q8_0_I8;
  if (RELAXED && (t == T_Q4_1 || t == T_Q5_1)) return ACT_Q8_1_I8;
  if (t == T_Q8_0 || t == T_Q4_0 || t == T_Q5_0 || t == T_MXFP4 || t == T_IQ4_NL) return ACT_Q8_0;
  if (t == T_Q4_1 || t == T_Q5_1) return ACT_Q8_1;
  if (t == T_Q2_K || t == T_Q3_K || t == T_Q4_K || t == T_Q5_K || t == T_Q6_K || t == T_IQ4_XS || t == T_IQ2_XXS || t == T_IQ2_XS || t == T_IQ3_XXS || t == T_IQ1_S || t == T_IQ1_M) return ACT_Q8_K;
  return isKQuant(t) ? ACT_Q8_K_VALUES : ACT_Q8_0_VALUES;
}

export function dotKind(t: i32, llama: bool): i32 {
  if (!llama) return DOT_PLAIN;
  if (t == T_F32) return DOT_GGML_F32;
  if (t == T_F16) return DOT_GGML_F16;
  if (t == T_BF16) return DOT_GGML_BF16;
  if (RELAXED && t == T_Q8_0) return DOT_Q80;
  if (RELAXED && t == T_MXFP4) return DOT_MX4;
  if (RELAXED && t == T_IQ4_NL) return DOT_NL4;
  if (RELAXED && t == T_Q4_0) return DOT_Q40;
  if (RELAXED && t == T_Q5_0) return DOT_Q50;
  if (RELAXED && t == T_Q4_1) return DOT_Q41;
  if (RELAXED && t == T_Q5_1) return DOT_Q51;
  if (RELAXED && t == T_Q3_K) return DOT_Q3K;
  if (RELAXED && t == T_IQ4_XS) return DOT_IQ4X;
  if (RELAXED && t == T_IQ2_XXS) return DOT_IQ2XXS;
  if (RELAXED && t == T_IQ2_XS) return DOT_IQ2XS;
  if (RELAXED && t == T_IQ3_XXS) return DOT_IQ3XXS;
  if (RELAXED && t == T_IQ1_S) return DOT_IQ1SX;
  if (RELAXED && t == T_IQ1_M) return DOT_IQ1MX;
  if (t == T_Q8_0 || t == T_Q4_0 || t == T_Q5_0) return DOT_Q32;
  if (t == T_MXFP4 || t == T_IQ4_NL) return DOT_Q32P;
  if (t == T_Q4_1 || t == T_Q5_1) return DOT_Q1;
  if (t == T_Q4_K) return DOT_Q4K;
  if (t == T_Q5_K) return DOT_Q5K;
  if (t == T_Q6_K) return DOT_Q6K;
  if (t == T_Q3_K || t == T_IQ4_XS || t == T_IQ2_XXS || t == T_IQ2_XS || t == T_IQ3_XXS) return DOT_IQ4XS;
  if (t == T_Q2_K) return DOT_Q2K;
  if (t == T_IQ1_S) return DOT_IQ1S;
  if (t == T_IQ1_M) return DOT_IQ1M;
  return DOT_PLAIN;
}

/** Elements per block and bytes per block of a weight type (gguf/quant-types.ts). */
export function blockSize(t: i32): i32 {
  if (t == T_F32 || t == T_F16 || t == T_BF16) return 1;
  return isSuperBlock(t) ? 256 : 32;
}

export function blockBytes(t: i32): i32 {
  switch (t) {
    case T_F32:
      return 4;
    case T_F16:
    case T_BF16:
      return 2;
    case T_Q4_0:
    case T_IQ4_NL:
      return 18;
    case T_Q4_1:
      return 20;
    case T_Q5_0:
      return 22;
    case T_Q5_1:
      return 24;
    case T_Q8_0:
      return 34;
    case T_MXFP4:
      return 17;
    case T_Q2_K:
      return 84;
    case T_Q3_K:
      return 110;
    case T_Q4_K:
      return 144;
    case T_Q5_K:
      return 176;
    case T_Q6_K:
      return 210;
    case T_IQ4_XS:
      return 136;
    case T_IQ2_XXS:
      return 66;
    case T_IQ2_XS:
      return 74;
    case T_IQ1_S:
      return 50;
    case T_IQ1_M:
      return 56;
    case T_IQ3_XXS:
      return 98;
    default:
      return 0;
  }
}

/** Round up to a multiple of 16 bytes (v128 alignment). */
@inline
export function align16(n: usize): usize {
  return (n + 15) & ~(<usize>15);
}
