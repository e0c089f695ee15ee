/**
 * How the floats of work rows and result sums travel (f32 or f16): the encoding names and header values, f32 ⇄ f16
 * array conversion that refuses non-finite values, and the finiteness scan every frame codec uses.
 */
import { f16ToF32Table } from '../../gguf/half.ts';
import { badFrame } from './close-codes.ts';

// The bulk arrays are written and read through typed-array views, which use the host's byte order; the wire is
// little-endian, as is every browser and Node host (x86, ARM).
if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  throw new Error('protocol/channel/ needs a little-endian host');
}

/** How the floats of a work frame's rows or a result's sums travel. */
export type WireEncoding = 'f32' | 'f16';
export const WIRE_ENCODINGS: readonly WireEncoding[] = Object.freeze(['f32', 'f16']);
/** The u8 each encoding has in a frame header. */
export const ENCODING_WIRE = Object.freeze({ f32: 1, f16: 2 } as const);
/** Bytes per element of an encoding. */
export const elemBytes = (e: WireEncoding): number => (e === 'f32' ? 4 : 2);

/** The encoding a header byte names; BAD_FRAME for any other value. */
export function encodingFromWire(v: number, field: string): WireEncoding {
  if (v === ENCODING_WIRE.f32) return 'f32';
  if (v === ENCODING_WIRE.f16) return 'f16';
  throw badFrame(`${field} ${v} is neither 1 (f32) nor 2 (f16)`);
}

/**
 * f32 → f16 bits for a whole array: round to nearest even, gradual underflow, bit-identical to gguf/half.ts
 * `f32ToF16` (the unit test compares them), but on the integer bits, without a call per element. Returns false when
 * a value was not finite or overflowed f16 (|x| ≥ 65520); those elements hold ±Inf / NaN.
 */
export function f32ArrayToF16(src: Float32Array, dst: Uint16Array): boolean {
  if (dst.length !== src.length) throw new RangeError('f32ArrayToF16: src and dst differ in length');
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  let finite = true;
  for (let i = 0; i < bits.length; i++) {
    const w = bits[i]!;
    const a = w & 0x7fffffff;
    let h: number;
    if (a >= 0x38800000) {
      if (a >= 0x477ff000) {
        h = a > 0x7f800000 ? 0x7e00 : 0x7c00;
        finite = false;
      } else {
        // Normal: rebias the exponent (127 → 15) and round the 13 dropped bits to nearest even without a branch
        // (a data-dependent branch here mispredicts half the time): add 0xfff, plus 1 when the kept part is odd.
        h = (a - 0x38000000 + 0xfff + ((a >>> 13) & 1)) >>> 13;
      }
    } else if (a >= 0x33000000) {
      // [2^-25, 2^-14): an f16 subnormal, |x|·2^24 rounded to nearest even.
      const shift = 126 - (a >>> 23);
      const m = (a & 0x7fffff) | 0x800000;
      h = m >>> shift;
      const rest = m & ((1 << shift) - 1);
      const half = 1 << (shift - 1);
      if (rest > half || (rest === half && (h & 1) === 1)) h++;
    } else {
      h = 0;
    }
    dst[i] = ((w >>> 16) & 0x8000) | h;
  }
  return finite;
}

/** f16 bits → f32 through gguf/half.ts's table. Returns false when an element was ±Inf or NaN. */
export function f16ArrayToF32(src: Uint16Array, dst: Float32Array): boolean {
  if (dst.length !== src.length) throw new RangeError('f16ArrayToF32: src and dst differ in length');
  const table = f16ToF32Table();
  let finite = true;
  for (let i = 0; i < src.length; i++) {
    const h = src[i]!;
    if ((h & 0x7c00) === 0x7c00) finite = false;
    dst[i] = table[h]!;
  }
  return finite;
}

/**
 * Index of the first non-finite element, or -1. The common all-finite case is one branch-free pass (x·0 is 0 for a
 * finite x and NaN otherwise; four accumulators keep the additions independent), about twice as fast as testing
 * each element's exponent bits; only a failing array is scanned again for the index.
 */
export function firstNonFinite(a: Float32Array): number {
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  const n4 = a.length & ~3;
  let i = 0;
  for (; i < n4; i += 4) {
    s0 += a[i]! * 0;
    s1 += a[i + 1]! * 0;
    s2 += a[i + 2]! * 0;
    s3 += a[i + 3]! * 0;
  }
  for (; i < a.length; i++) s0 += a[i]! * 0;
  if (s0 + s1 + s2 + s3 === 0) return -1;
  return a.findIndex((x) => !Number.isFinite(x));
}
