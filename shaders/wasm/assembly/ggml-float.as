// ggml's float steps bit for bit, in AssemblyScript (compiled by shaders/wasm/build.ts; not TypeScript, hence .as):
// the fused multiply-add its AVX2 vec_dot lanes use (wasm has none: the product is exact in f64, the sum is rounded
// once to f64 and then to f32, and the one case where that double rounding can differ, an f64 sum exactly halfway
// between two f32s, is redone from the sum's exact error), f16/bf16 conversions as F16C and ggml round, and
// ggml_v_expf / ggml_vec_swiglu_f32 (harness/ggml-exact.ts is the TypeScript model of the same steps), and the gated
// units of the other expert variants: ggml_compute_forward_swiglu_oai_f32 and _swiglu_clamp_f32, ggml_silu + ggml_clamp,
// ggml_vec_geglu_f32 (shaders/reference/expert-ffn.ts and ggml-gelu.ts are their TypeScript twins).
import { RELAXED } from './kinds';

/** Low 29 bits of an f64 (the bits an f32 drops) and the pattern of an f64 exactly halfway between two f32s. */
const LOW29: u64 = 0x1fffffff;
const HALF29: u64 = 0x10000000;
const EXP64: u64 = 0x7ff0000000000000;
/** 2^-126 as f64 bits: below it an f32 result is subnormal and the halfway pattern above does not apply. */
const MIN_NORMAL32: u64 = 0x3810000000000000;

/** The f32 next to `r` towards +∞ (up) or −∞. */
function nextF32(r: f32, up: bool): f32 {
  if (r == 0) return up ? reinterpret<f32>(<u32>1) : -reinterpret<f32>(<u32>1);
  const b = reinterpret<u32>(r);
  return reinterpret<f32>((r > 0) == up ? b + 1 : b - 1);
}

/** fmaP's rare case: s = p + c rounded to f64 lies on an f32 midpoint, or is tiny; decide from the exact error. */
@inline
function fmaSlow(p: f64, c: f64, s: f64, r: f32): f32 {
  const bb = s - p;
  const e = p - (s - bb) + (c - bb);
  if (e == 0 || <f64>r == s) return r;
  const other = nextF32(r, s > <f64>r);
  if (s - <f64>r != <f64>other - s) return r;
  return e > 0 == other > r ? other : r;
}

function fmaSlowCall(p: f64, c: f64): f32 {
  const s = p + c;
  return fmaSlow(p, c, s, <f32>s);
}

/** Single-rounded f32 p + c where p is an exact product of two f32s (in f64) and c an f32 (in f64). */
@inline
export function fmaP(p: f64, c: f64): f32 {
  const s = p + c;
  const bits = reinterpret<u64>(s);
  if ((bits & LOW29) != HALF29 && (bits & EXP64) >= MIN_NORMAL32) return <f32>s;
  return fmaSlowCall(p, c);
}

/** Single-rounded f32 a · b + c (the FMA instruction). */
@inline
export function fma32(a: f32, b: f32, c: f32): f32 {
  return fmaP(<f64>a * <f64>b, <f64>c);
}

/** Two lanes of fmaP, each through the exact scalar path (any input). */
export function fmaPairExact(p: v128, c: v128): v128 {
  const r0 = fmaSlowCall(f64x2.extract_lane(p, 0), f64x2.extract_lane(c, 0));
  const r1 = fmaSlowCall(f64x2.extract_lane(p, 1), f64x2.extract_lane(c, 1));
  return f64x2.replace_lane(f64x2.splat(<f64>r0), 1, <f64>r1);
}

/**
 * Two lanes of fmaP: p exact products, c f32 values, both as f64x2; returns the single-rounded f32 sums as f64x2.
 */
@inline
export function fmaPair(p: v128, c: v128): v128 {
  const s = f64x2.add(p, c);
  const tie = i64x2.eq(v128.and(s, i64x2.splat(LOW29)), i64x2.splat(HALF29));
  const tiny = i64x2.lt_s(v128.and(s, i64x2.splat(EXP64)), i64x2.splat(MIN_NORMAL32));
  if (v128.any_true(v128.or(tie, tiny))) return fmaPairExact(p, c);
  return f64x2.promote_low_f32x4(f32x4.demote_f64x2_zero(s));
}

/** The high two f32 lanes of an f32x4 as f64x2. */
@inline
export function promoteHigh(v: v128): v128 {
  return f64x2.promote_low_f32x4(v128.shuffle<f32>(v, v, 2, 3, 2, 3));
}

/** hsum_float_8 over 8 lanes held as four f64x2 (lanes 0-1, 2-3, 4-5, 6-7): ((x0+x4) + (x2+x6)) + ((x1+x5) + (x3+x7)). */
@inline
export function hsum8(a01: v128, a23: v128, a45: v128, a67: v128): f32 {
  const r0 = <f32>f64x2.extract_lane(a01, 0) + <f32>f64x2.extract_lane(a45, 0);
  const r1 = <f32>f64x2.extract_lane(a01, 1) + <f32>f64x2.extract_lane(a45, 1);
  const r2 = <f32>f64x2.extract_lane(a23, 0) + <f32>f64x2.extract_lane(a67, 0);
  const r3 = <f32>f64x2.extract_lane(a23, 1) + <f32>f64x2.extract_lane(a67, 1);
  return r0 + r2 + (r1 + r3);
}

// ---------------------------------------------------------------------------------------------------------------
// f16 and bf16.

/** f16 bits to f32 (exact; NaN payloads kept, quieted). */
@inline
export function f16ToF32(h: u32): f32 {
  const sign = (h & 0x8000) << 16;
  const exp = (h >> 10) & 0x1f;
  const man = h & 0x3ff;
  if (exp == 0) return reinterpret<f32>(reinterpret<u32>(<f32>man * <f32>5.9604644775390625e-8) | sign);
  if (exp == 31) return reinterpret<f32>(sign | 0x7f800000 | (man << 13) | (man != 0 ? 0x400000 : 0));
  return reinterpret<f32>(sign | ((exp + 112) << 23) | (man << 13));
}

/** 2^-24: an f16 subnormal's mantissa (an integer) times it is its value. */
const F16_SUBNORMAL: f32 = 5.9604644775390625e-8;

/**
 * The f16s in the low halves of the four i32 lanes of h as f32 (F16C's vcvtph2ps, bit for bit, as f16ToF32), four at
 * once where the dots converted each d and dmin apart: normals by moving the exponent and mantissa into place and
 * rebiasing the exponent (an integer add), inf and NaN (quieted) by a select, subnormals as their mantissa converted to
 * f32 times 2^-24, the sign or-ed in. No float operation sees a subnormal: Q4_K's d of small weights is an f16
 * subnormal, and an f32 subnormal operand costs a microcode assist per multiply (measured: the kernel ~1.5× slower
 * at 1 row with the 2^112-scaling form of this conversion).
 */
@inline
export function f16x4ToF32(h: v128): v128 {
  const e = v128.and(h, i32x4.splat(0x7fff));
  const em = i32x4.shl(e, 13);
  const special = i32x4.ge_s(em, i32x4.splat(0x0f800000));
  const quiet = v128.and(i32x4.gt_s(em, i32x4.splat(0x0f800000)), i32x4.splat(0x00400000));
  const big = v128.bitselect(v128.or(i32x4.add(em, i32x4.splat(0x70000000)), quiet), i32x4.add(em, i32x4.splat(0x38000000)), special);
  const sub = f32x4.mul(f32x4.convert_i32x4_s(e), f32x4.splat(F16_SUBNORMAL));
  const isSub = i32x4.lt_s(e, i32x4.splat(0x400));
  return v128.or(v128.bitselect(sub, big, isSub), i32x4.shl(v128.and(h, i32x4.splat(0x8000)), 16));
}

/** f32 to f16 bits, round to nearest even (F16C's _cvtss_sh(x, 0)); NaN becomes 0x7e00 with the sign. */
export function f32ToF16(x: f32): u32 {
  const w = reinterpret<u32>(x);
  const sign = (w >> 16) & 0x8000;
  const a = w & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7e00;
  if (a >= 0x477ff000) return sign | 0x7c00;
  if (a < 0x38800000) return sign | <u32>nearest<f64>(<f64>reinterpret<f32>(a) * 16777216.0);
  const mant = a & 0x7fffff;
  let h = (((a >> 23) - 112) << 10) | (mant >> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1) == 1)) h++;
  return sign | h;
}

/** x rounded to f16 and back (GGML_CPU_FP32_TO_FP16 then _TO_FP32). */
@inline
export function roundF16(x: f32): f32 {
  return f16ToF32(f32ToF16(x));
}

/** x rounded to bf16 and back (ggml_compute_fp32_to_bf16: nearest even on the bits; NaN quieted). */
@inline
export function roundBf16(x: f32): f32 {
  const u = reinterpret<u32>(x);
  if ((u & 0x7fffffff) > 0x7f800000) return reinterpret<f32>(((u >> 16) | 0x40) << 16);
  return reinterpret<f32>(((u + (0x7fff + ((u >> 16) & 1))) >> 16) << 16);
}

// Where `f32x4.relaxed_madd` is one rounding (x86 with FMA3, ARM: what V8 emits there) it is ggml's fused multiply-add
// bit for bit, one instruction instead of the f64 emulation (fma32); where it is two roundings the kernel keeps the
// emulation. The dots' per-block float steps and ggml_v_expf below use it so.

/** 1 + 2^-12 and -1: fused, a·a + c = 2^-11 + 2^-24; with the product rounded first (to even), 2^-11. */
const MADD_PROBE = memory.data<f32>([1.000244140625, -1.0]);
let fusedMadd = false;

/**
 * Finds whether relaxed_madd fuses on this machine (from memory, so no optimiser folds it at build time), and uses it
 * if so and `allow`ed (false: the f64 emulation, as on a machine whose relaxed_madd does not fuse).
 */
export function probeFusedMadd(allow: bool): void {
  fusedMadd = false;
  if (RELAXED && allow) {
    const a = f32x4.splat(load<f32>(MADD_PROBE));
    const r = f32x4.relaxed_madd(a, a, f32x4.splat(load<f32>(MADD_PROBE, 4)));
    fusedMadd = f32x4.extract_lane(r, 0) != <f32>0.00048828125;
  }
}

/** Whether the kernel computes ggml's fused multiply-adds with relaxed_madd (see probeFusedMadd). */
@inline
export function usesFusedMadd(): bool {
  return RELAXED && fusedMadd;
}

/** fma32 through relaxed_madd where that fuses (usesFusedMadd), else the f64 emulation: the same bits either way. */
@inline
function fmaF(a: f32, b: f32, c: f32): f32 {
  if (usesFusedMadd()) return f32x4.extract_lane(f32x4.relaxed_madd(f32x4.splat(a), f32x4.splat(b), f32x4.splat(c)), 0);
  return fma32(a, b, c);
}

// ---------------------------------------------------------------------------------------------------------------
// ggml_v_expf (AVX2) and ggml_vec_swiglu_f32, one lane.

const R: f32 = 12582912.0; // 0x1.8p23
const LOG2E: f32 = 1.4426950216293335; // 0x1.715476p+0
const LN2HI: f32 = 0.693145751953125; // 0x1.62e4p-1
const LN2LO: f32 = 1.428606765330187e-6; // 0x1.7f7d1cp-20
const P0: f32 = 0.008247390389442444; // 0x1.0e4020p-7
const P1: f32 = 0.04189976677298546; // 0x1.573e2ep-5
const P2: f32 = 0.16668395698070526; // 0x1.555e66p-3
const P3: f32 = 0.4999912679195404; // 0x1.fffdb6p-2
const P4: f32 = 0.9999994039535522; // 0x1.ffffecp-1

export function ggmlExpf(x: f32): f32 {
  const z = fmaF(x, LOG2E, R);
  const n = z - R;
  const b = fmaF(-n, LN2LO, fmaF(-n, LN2HI, x));
  const e = reinterpret<u32>(z) << 23;
  const k = reinterpret<f32>(e + reinterpret<u32>(<f32>1.0));
  const u = b * b;
  const j = fmaF(fmaF(fmaF(P0, b, P1), u, fmaF(P2, b, P3)), u, P4 * b);
  if (!(abs<f32>(n) > 126)) return fmaF(j, k, k);
  const g: u32 = n <= 0 ? 0x82000000 : 0;
  const s1 = reinterpret<f32>(g + 0x7f000000);
  const s2 = reinterpret<f32>(e - g);
  if (abs<f32>(n) > 192) return s1 * s1;
  return fmaF(s2, j, s2) * s1;
}

/** silu(g) · u as ggml_vec_swiglu_f32 computes it: g / (1 + ggml_v_expf(−g)), then the product. */
@inline
export function ggmlSwiglu(g: f32, u: f32): f32 {
  const silu = g / (<f32>1.0 + ggmlExpf(<f32>0.0 - g));
  return silu * u;
}

/** silu(g) · u in f64, rounded once ('exact' numerics: the reference's formula). */
@inline
export function exactSwiglu(g: f32, u: f32): f32 {
  const g64 = <f64>g;
  return <f32>((g64 / (1.0 + Math.exp(-g64))) * <f64>u);
}

// ---------------------------------------------------------------------------------------------------------------
// gpt-oss's gated unit, ggml_swiglu_oai (protocol/variant.ts).

/**
 * min(g, L) / (1 + expf(α · −min(g, L))) · (clamp(u, −L, L) + 1), each step in f32 in the order of
 * ggml_compute_forward_swiglu_oai_f32 (scalar C, no vector expf). Its expf is libm's; here the f64 exp of the f32
 * argument rounded to f32, which is the correctly rounded expf: glibc's expf returns that too but in rare near-ties
 * (its error bound is 0.502 ulp, not 0.5), so this can differ from glibc in the last bit there. AssemblyScript's
 * Math.exp is musl's (< 1 f64 ulp): its f32 rounding is the correct one but where exp lies within an f64 ulp of an f32
 * midpoint (a chance of about 2^-28 per value).
 * std::min / std::clamp and wasm's min / max agree on every input but NaN, where both give NaN.
 */
@inline
export function ggmlSwigluOai(g: f32, u: f32, alpha: f32, limit: f32): f32 {
  const x = min<f32>(g, limit);
  const y = min<f32>(max<f32>(u, -limit), limit);
  const e = <f32>Math.exp(<f64>(alpha * -x));
  return (x / (<f32>1.0 + e)) * (y + <f32>1.0);
}

/** The same in f64, rounded once ('exact' numerics: the reference's swigluOai). */
@inline
export function exactSwigluOai(g: f32, u: f32, alpha: f32, limit: f32): f32 {
  const x = min<f64>(<f64>g, <f64>limit);
  const y = min<f64>(max<f64>(<f64>u, -<f64>limit), <f64>limit);
  return <f32>((x / (1.0 + Math.exp(-<f64>alpha * x))) * (y + 1.0));
}

// ---------------------------------------------------------------------------------------------------------------
// The second wave of expert variants (protocol/variant.ts): swiglu_clamp, silu_limit, gelu.

/**
 * DeepSeek-V4's gated unit, ggml_compute_forward_swiglu_clamp_f32's f32 steps: x = min(g, L), y = clamp(u, −L, L),
 * x / (1 + expf(−x)) · y, expf as in ggmlSwigluOai (the f64 exp rounded to f32). shaders/reference swigluClampF32.
 */
@inline
export function ggmlSwigluClamp(g: f32, u: f32, limit: f32): f32 {
  const x = min<f32>(g, limit);
  const y = min<f32>(max<f32>(u, -limit), limit);
  const e = <f32>Math.exp(<f64>-x);
  return (x / (<f32>1.0 + e)) * y;
}

/** The same in f64, rounded once ('exact' numerics: the reference's silu(min(g, L)) · clamp(u, −L, L)). */
@inline
export function exactSwigluClamp(g: f32, u: f32, limit: f32): f32 {
  const x = min<f64>(<f64>g, <f64>limit);
  const y = min<f64>(max<f64>(<f64>u, -<f64>limit), <f64>limit);
  return <f32>((x / (1.0 + Math.exp(-x))) * y);
}

/**
 * Step-3.5's and Ling 3's gated unit: ggml_silu (the SIMD silu of ggml_vec_silu_f32, ggml_v_silu: g / (1 +
 * ggml_v_expf(−g)), as in ggmlSwiglu), ggml_clamp to ≤ L, ggml_mul by clamp(u, −L, L). shaders/reference siluLimitF32.
 */
@inline
export function ggmlSiluLimit(g: f32, u: f32, limit: f32): f32 {
  const s = g / (<f32>1.0 + ggmlExpf(<f32>0.0 - g));
  const y = min<f32>(max<f32>(u, -limit), limit);
  return min<f32>(s, limit) * y;
}

/** The same in f64, rounded once ('exact' numerics: the reference's min(silu(g), L) · clamp(u, −L, L)). */
@inline
export function exactSiluLimit(g: f32, u: f32, limit: f32): f32 {
  const g64 = <f64>g;
  const y = min<f64>(max<f64>(<f64>u, -<f64>limit), <f64>limit);
  return <f32>(min<f64>(g64 / (1.0 + Math.exp(-g64)), <f64>limit) * y);
}

/**
 * Grok's gated unit, ggml_vec_geglu_f32 (GGML_GELU_FP16): 0 for g ≤ −10, g · u for g ≥ 10, else the f16 table (at
 * `table`: ggml_table_gelu_f16's 65,536 f16 values, which the JS side copies in, shaders/reference/ggml-gelu.ts) read
 * at g rounded to f16 (f32ToF16: to nearest even, as F16C), times u in f32.
 */
@inline
export function ggmlGeglu(g: f32, u: f32, table: usize): f32 {
  if (g <= <f32>-10.0) return 0;
  if (g >= <f32>10.0) return g * u;
  return f16ToF32(<u32>load<u16>(table + 2 * <usize>f32ToF16(g))) * u;
}

/** GELU's tanh formula times u in f64, rounded once ('exact' numerics: the reference's gelu(g) · u). */
@inline
export function exactGeglu(g: f32, u: f32): f32 {
  const v = <f64>g;
  const gelu = 0.5 * v * (1.0 + Math.tanh(0.7978845608028654 * v * (1.0 + 0.044715 * v * v)));
  return <f32>(gelu * <f64>u);
}
