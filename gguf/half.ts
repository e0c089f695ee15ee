/**
 * IEEE binary16 ("f16", "half") and bfloat16 ("bf16") conversions, bit-compatible with
 * ggml's software converters (ggml-impl.h: ggml_compute_fp16_to_fp32 / ggml_compute_fp32_to_fp16,
 * ggml_compute_bf16_to_fp32 / ggml_compute_fp32_to_bf16). Standard JS only (browser-safe).
 *
 * All "bits" arguments/results are unsigned 16-bit integers (0..0xffff).
 * Inputs to the f32 -> 16-bit converters are first rounded to float32 (as a C `float` would be).
 */

// Shared scratch for reinterpreting float32 <-> uint32 bits.
const scratchF32 = new Float32Array(1);
const scratchU32 = new Uint32Array(scratchF32.buffer);

/** 2^-24: value of the f16 mantissa LSB for subnormals (and exponent field 1). */
const TWO_POW_M24 = 2 ** -24;

/** Decodes an f16 bit pattern to a number (exact; every f16 is representable as a float32). */
export function f16ToF32(bits: number): number {
  const h = bits & 0xffff;
  const exp = (h >>> 10) & 0x1f;
  const man = h & 0x3ff;
  let v: number;
  if (exp === 0) {
    v = man * TWO_POW_M24; // zero or subnormal: man * 2^-24
  } else if (exp === 31) {
    v = man === 0 ? Infinity : NaN;
  } else {
    v = (man + 1024) * 2 ** (exp - 25); // (1 + man/1024) * 2^(exp-15)
  }
  return h & 0x8000 ? -v : v;
}

/**
 * Encodes a number as f16 bits, round-to-nearest-even, with gradual underflow (subnormals) and
 * overflow to +-Infinity. NaN becomes the quiet NaN 0x7e00 with the input's sign, like ggml.
 */
export function f32ToF16(x: number): number {
  scratchF32[0] = x;
  const w = scratchU32[0]!;
  const sign = (w >>> 16) & 0x8000;
  const a = w & 0x7fffffff; // |x| as float32 bits
  if (a > 0x7f800000) return sign | 0x7e00; // NaN
  // 0x477ff000 = 65520: halfway between 65504 (max half) and 65536; ties-to-even rounds it up.
  if (a >= 0x477ff000) return sign | 0x7c00;
  if (a < 0x38800000) {
    // Below 2^-14: result is subnormal (or rounds up to the smallest normal, 0x0400).
    scratchU32[0] = a;
    const m = scratchF32[0]! * 16777216; // |x| * 2^24, exact in double
    let r = Math.floor(m);
    const frac = m - r;
    if (frac > 0.5 || (frac === 0.5 && (r & 1) === 1)) r++;
    return sign | r;
  }
  // Normal range: rebias exponent (127 -> 15), keep 10 mantissa bits, round the dropped 13 bits.
  const mant = a & 0x7fffff;
  let h = ((((a >>> 23) - 112) << 10) | (mant >>> 13)) >>> 0;
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (h & 1) === 1)) h++; // carry may bump the exponent
  return sign | h;
}

/** Decodes bf16 bits (upper half of a float32) to a number. */
export function bf16ToF32(bits: number): number {
  scratchU32[0] = (bits & 0xffff) << 16;
  return scratchF32[0]!;
}

/**
 * Encodes a number as bf16 bits like ggml_compute_fp32_to_bf16: round-to-nearest-even on the
 * float32 bits (overflowing to infinity), subnormals kept, NaN truncated and forced quiet.
 */
export function f32ToBf16(x: number): number {
  scratchF32[0] = x;
  const u = scratchU32[0]!;
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  // u + 0x7fff + lsb never exceeds 2^32 for non-NaN inputs (max 0xff800000 + 0x8000).
  return Math.floor((u + 0x7fff + ((u >>> 16) & 1)) / 65536) & 0xffff;
}

let table: Float32Array | undefined;

/**
 * Lookup table f16 bits -> float32 (65536 entries, 256 KiB), built on first call and shared.
 * NaN entries keep their f16 payload (quieted), as a hardware conversion would. Do not mutate it.
 */
export function f16ToF32Table(): Float32Array {
  if (table) return table;
  const t = new Float32Array(65536);
  const bits = new Uint32Array(t.buffer);
  for (let h = 0; h < 65536; h++) {
    const sign = (h & 0x8000) << 16;
    const exp = (h >>> 10) & 0x1f;
    const man = h & 0x3ff;
    if (exp === 31) {
      // inf / NaN: exponent all ones, mantissa shifted into the top; NaNs quieted.
      bits[h] = (sign | 0x7f800000 | (man << 13) | (man !== 0 ? 0x400000 : 0)) >>> 0;
    } else {
      t[h] = f16ToF32(h);
    }
  }
  table = t;
  return t;
}
