/**
 * Unit tests of gguf/half.ts, gguf/dequantize.ts and gguf/quantize.ts.
 *
 * Golden hashes ("ggml golden" tests) were produced by a small C program that linked the pinned
 * llama.cpp's ggml-quants.c (quantize_row_*_ref, dequantize_row_*) and ggml-impl.h's fp16/bf16
 * converters (gcc -O2, x86-64, no FMA), fed with the same mulberry32 streams as below, and hashed the
 * outputs with FNV-1a 32. They pin bit-exactness with ggml; the hand-built blocks pin the layouts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType, QK_K, requireQuantType } from '../../gguf/quant-types.ts';
import { bf16ToF32, f16ToF32, f16ToF32Table, f32ToBf16, f32ToF16 } from '../../gguf/half.ts';
import { canDequantize, dequantize } from '../../gguf/dequantize.ts';
import { canQuantize, quantize } from '../../gguf/quantize.ts';
import { mulberry32Uint as mulberry32 } from '../../shaders/random.ts';

// ---------------------------------------------------------------------------------------------
// Helpers.

/** mulberry32: tiny seeded PRNG, returns uint32. */

/** Gaussian samples (Box-Muller); a 1% of them times 10 when `outliers`. */
function gaussian(n: number, seed: number, scale = 1, outliers = false): Float32Array {
  const r = mulberry32(seed);
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const u = 1 - r() / 4294967296,
      v = r() / 4294967296;
    let g = Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v) * scale;
    if (outliers && r() % 100 === 0) g *= 10;
    x[i] = g;
  }
  return x;
}

function fnv1a(b: Uint8Array, h = 2166136261): number {
  for (let i = 0; i < b.length; i++) {
    h ^= b[i]!;
    h = Math.imul(h, 16777619) >>> 0;
  }
  return h >>> 0;
}

const bytesOf = (a: Float32Array | Uint16Array): Uint8Array => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);

/** Block bytes with little-endian u16 fields patched in. */
function block(size: number, fields: Record<number, number> = {}, bytes: Record<number, number> = {}): Uint8Array {
  const b = new Uint8Array(size);
  for (const [o, v] of Object.entries(fields)) {
    b[+o] = v & 255;
    b[+o + 1] = v >>> 8;
  }
  for (const [o, v] of Object.entries(bytes)) b[+o] = v;
  return b;
}

function assertArrayEqual(actual: Float32Array, expected: ArrayLike<number>, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    if (!Object.is(actual[i], Math.fround(expected[i]!))) {
      assert.fail(`${what}: element ${i} is ${actual[i]}, expected ${expected[i]}`);
    }
  }
}

const REF_TYPES = [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0];
const K_TYPES = [GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K];
const QUANT_TYPES = [...REF_TYPES, ...K_TYPES];

// ---------------------------------------------------------------------------------------------
// half.ts

test('f16ToF32 special values', () => {
  const cases: Array<[number, number]> = [
    [0x0000, 0],
    [0x8000, -0],
    [0x3c00, 1],
    [0xbc00, -1],
    [0xc000, -2],
    [0x3800, 0.5],
    [0x3555, 0.333251953125],
    [0x7bff, 65504],
    [0xfbff, -65504],
    [0x0400, 2 ** -14],
    [0x0001, 2 ** -24],
    [0x8001, -(2 ** -24)],
    [0x03ff, 1023 * 2 ** -24],
    [0x7c00, Infinity],
    [0xfc00, -Infinity],
  ];
  for (const [h, v] of cases) assert.ok(Object.is(f16ToF32(h), v), `0x${h.toString(16)} -> ${f16ToF32(h)}, expected ${v}`);
  for (const h of [0x7c01, 0x7e00, 0x7fff, 0xfc01, 0xfe00]) assert.ok(Number.isNaN(f16ToF32(h)));
});

test('f32ToF16 special values and rounding', () => {
  const cases: Array<[number, number]> = [
    [0, 0x0000],
    [-0, 0x8000],
    [1, 0x3c00],
    [-2, 0xc000],
    [0.1, 0x2e66],
    [65504, 0x7bff],
    [65519.99, 0x7bff],
    [65520, 0x7c00],
    [-65520, 0xfc00],
    [1e9, 0x7c00],
    [Infinity, 0x7c00],
    [-Infinity, 0xfc00],
    [NaN, 0x7e00],
    [2 ** -14, 0x0400],
    [2 ** -24, 0x0001],
    [2 ** -25, 0x0000], // tie between 0 and the smallest subnormal: even (0)
    [1.5 * 2 ** -25, 0x0001],
    [3 * 2 ** -25, 0x0002], // tie between 1 and 2 ulps: even (2)
    [5 * 2 ** -25, 0x0002], // tie between 2 and 3 ulps: even (2)
    [2 ** -26, 0x0000],
    [1e-10, 0x0000],
    [-1e-10, 0x8000],
    [1023.5 * 2 ** -24, 0x0400], // largest subnormal + half ulp: rounds (even) into the smallest normal
    [1 + 2 ** -11, 0x3c00],
    [1 + 3 * 2 ** -11, 0x3c02],
    [1 + 2 ** -11 + 2 ** -20, 0x3c01],
  ];
  for (const [x, h] of cases) assert.equal(f32ToF16(x), h, `${x} -> 0x${f32ToF16(x).toString(16)}, expected 0x${h.toString(16)}`);
});

test('f16: exhaustive round trip over all 65536 bit patterns; lookup table agrees', () => {
  const table = f16ToF32Table();
  assert.equal(table.length, 65536);
  assert.equal(f16ToF32Table(), table, 'table is built once');
  for (let h = 0; h < 65536; h++) {
    const v = f16ToF32(h);
    const isNaN16 = (h & 0x7c00) === 0x7c00 && (h & 0x3ff) !== 0;
    if (isNaN16) {
      assert.ok(Number.isNaN(v), `0x${h.toString(16)} should be NaN`);
      assert.ok(Number.isNaN(table[h]!));
      const back = f32ToF16(v);
      assert.ok((back & 0x7c00) === 0x7c00 && (back & 0x3ff) !== 0, `NaN stays NaN (0x${back.toString(16)})`);
    } else {
      assert.ok(Object.is(table[h], v), `table[0x${h.toString(16)}]`);
      assert.equal(Math.fround(v), v, 'every half is a float32');
      assert.equal(f32ToF16(v), h, `round trip 0x${h.toString(16)}`);
    }
  }
});

test('f32ToF16: every midpoint between adjacent halves rounds to even, and its float neighbours to the nearer', () => {
  const f = new Float32Array(1),
    u = new Uint32Array(f.buffer);
  for (let h = 0; h < 0x7c00; h++) {
    const lo = f16ToF32(h);
    const hi = h === 0x7bff ? 65536 : f16ToF32(h + 1); // 65536: where the next half would be
    const mid = (lo + hi) / 2;
    assert.equal(Math.fround(mid), mid, 'midpoints are float32s');
    const even = (h & 1) === 0 ? h : h + 1;
    for (const sign of [0, 0x8000]) {
      const s = sign ? -1 : 1;
      assert.equal(f32ToF16(s * mid), sign | even, `midpoint after 0x${h.toString(16)}`);
      f[0] = mid;
      u[0] = u[0]! - 1; // next float32 towards zero
      assert.equal(f32ToF16(s * f[0]!), sign | h);
      u[0] = u[0]! + 2; // next float32 away from zero
      assert.equal(f32ToF16(s * f[0]!), sign | (h + 1));
    }
  }
});

test('bf16 conversions: special values, rounding, exhaustive round trip', () => {
  const dec: Array<[number, number]> = [
    [0x0000, 0],
    [0x8000, -0],
    [0x3f80, 1],
    [0xc000, -2],
    [0x7f80, Infinity],
    [0xff80, -Infinity],
    [0x7f7f, 3.3895313892515355e38],
    [0x0001, 2 ** -133],
    [0x0080, 2 ** -126],
  ];
  for (const [h, v] of dec) assert.ok(Object.is(bf16ToF32(h), v), `0x${h.toString(16)}`);
  assert.ok(Number.isNaN(bf16ToF32(0x7fc0)) && Number.isNaN(bf16ToF32(0xff81)));
  const enc: Array<[number, number]> = [
    [1, 0x3f80],
    [-0, 0x8000],
    [1 + 2 ** -8, 0x3f80],
    [1 + 3 * 2 ** -8, 0x3f82],
    [1 + 2 ** -8 + 2 ** -20, 0x3f81],
    [3.4028234663852886e38, 0x7f80], // FLT_MAX rounds up to infinity, as in ggml
    [Infinity, 0x7f80],
    [-Infinity, 0xff80],
    [2 ** -133, 0x0001],
    [2 ** -149, 0x0000],
    [-3.5, 0xc060],
  ];
  for (const [x, h] of enc) assert.equal(f32ToBf16(x), h, `${x}`);
  const nan = f32ToBf16(NaN);
  assert.ok((nan & 0x7f80) === 0x7f80 && (nan & 0x40) !== 0, 'NaN encodes as a quiet NaN');
  for (let h = 0; h < 65536; h++) {
    const v = bf16ToF32(h);
    if ((h & 0x7f80) === 0x7f80 && (h & 0x7f) !== 0) assert.ok(Number.isNaN(v) && Number.isNaN(bf16ToF32(f32ToBf16(v))));
    else assert.equal(f32ToBf16(v), h, `0x${h.toString(16)}`);
  }
});

test('ggml golden: fp32->fp16 and fp32->bf16 on 2^18 random float bit patterns; fp16->fp32 table bits', () => {
  const r = mulberry32(777);
  const u = new Uint32Array(1),
    f = new Float32Array(u.buffer);
  const a = new Uint16Array(1),
    b = new Uint16Array(1);
  let h16 = 2166136261,
    hbf = 2166136261;
  for (let i = 0; i < 1 << 18; i++) {
    let v = r();
    if (i & 1) v = ((v & 0x8fffffff) | 0x30000000) >>> 0; // half of them near the f16 range
    if ((v & 0x7fffffff) > 0x7f800000) v = (v & 0xff7fffff) >>> 0; // no NaN inputs
    u[0] = v;
    a[0] = f32ToF16(f[0]!);
    b[0] = f32ToBf16(f[0]!);
    h16 = fnv1a(bytesOf(a), h16);
    hbf = fnv1a(bytesOf(b), hbf);
  }
  assert.equal(h16, 256347940);
  assert.equal(hbf, 1875615187);
  // Includes ggml's NaN bits (payload kept, quieted).
  assert.equal(fnv1a(new Uint8Array(f16ToF32Table().buffer)), 1680031205);
});

// ---------------------------------------------------------------------------------------------
// dequantize: hand-built blocks.

test('dequantize F32 / F16 / BF16', () => {
  const f32 = new Uint8Array(new Float32Array([1.5, -2, 3.25e-30, Infinity]).buffer);
  assertArrayEqual(dequantize(GGMLType.F32, f32, 4), [1.5, -2, 3.25e-30, Infinity], 'F32');
  const f16 = block(8, { 0: 0x3c00, 2: 0xc000, 4: 0x0001, 6: 0x7bff });
  assertArrayEqual(dequantize(GGMLType.F16, f16, 4), [1, -2, 2 ** -24, 65504], 'F16');
  const bf16 = block(6, { 0: 0x3f80, 2: 0xc060, 4: 0x0080 });
  assertArrayEqual(dequantize(GGMLType.BF16, bf16, 3), [1, -3.5, 2 ** -126], 'BF16');
  const nan = dequantize(GGMLType.F16, block(2, { 0: 0x7e00 }), 1);
  assert.ok(Number.isNaN(nan[0]));
});

test('dequantize Q4_0: d = 0.5, nibbles 0..15', () => {
  // byte j: low nibble = element j = j, high nibble = element j+16 = 15 - j
  const b = block(18, { 0: 0x3800 });
  for (let j = 0; j < 16; j++) b[2 + j] = j | ((15 - j) << 4);
  const expected = [];
  for (let j = 0; j < 16; j++) expected[j] = (j - 8) * 0.5;
  for (let j = 0; j < 16; j++) expected[16 + j] = (7 - j) * 0.5;
  assertArrayEqual(dequantize(GGMLType.Q4_0, b, 32), expected, 'Q4_0');
});

test('dequantize Q4_1: d = 0.25, m = -1', () => {
  const b = block(20, { 0: 0x3400, 2: 0xbc00 });
  for (let j = 0; j < 16; j++) b[4 + j] = j | ((15 - j) << 4);
  const expected = [];
  for (let j = 0; j < 16; j++) expected[j] = j * 0.25 - 1;
  for (let j = 0; j < 16; j++) expected[16 + j] = (15 - j) * 0.25 - 1;
  assertArrayEqual(dequantize(GGMLType.Q4_1, b, 32), expected, 'Q4_1');
});

test('dequantize Q5_0: d = 1, 5th bits from qh', () => {
  // qh bit 0 (element 0) and bit 31 (element 31) set; qs[0] = 0x21: element 0 low 1, element 16 low 2;
  // qs[15] = 0xf3: element 15 low 3, element 31 low 15. Everything else 0 -> -16.
  const b = block(22, { 0: 0x3c00 }, { 2: 0x01, 5: 0x80, 6: 0x21, 21: 0xf3 });
  const expected = new Array<number>(32).fill(-16);
  expected[0] = 1;
  expected[16] = -14;
  expected[15] = -13;
  expected[31] = 15;
  assertArrayEqual(dequantize(GGMLType.Q5_0, b, 32), expected, 'Q5_0');
});

test('dequantize Q5_1: d = 0.5, m = 2, 5th bits from qh', () => {
  // qh = 0x00010002: element 1 and element 16 have the 5th bit.
  const b = block(24, { 0: 0x3800, 2: 0x4000 }, { 4: 0x02, 6: 0x01, 8: 0x5f, 9: 0x03 });
  const expected = new Array<number>(32).fill(2);
  expected[0] = 15 * 0.5 + 2; // qs[0] low
  expected[16] = (5 + 16) * 0.5 + 2; // qs[0] high + 5th bit
  expected[1] = (3 + 16) * 0.5 + 2; // qs[1] low + 5th bit
  assertArrayEqual(dequantize(GGMLType.Q5_1, b, 32), expected, 'Q5_1');
});

test('dequantize Q8_0: d = 0.125, int8 quants', () => {
  const qs = [-128, 127, 0, 1, -1, 64, -64, 5];
  const b = block(34, { 0: 0x3000 });
  const expected = new Array<number>(32).fill(0);
  qs.forEach((q, j) => {
    b[2 + j] = q & 255;
    expected[j] = q * 0.125;
  });
  assertArrayEqual(dequantize(GGMLType.Q8_0, b, 32), expected, 'Q8_0');
  // two blocks in a row
  const two = new Uint8Array(68);
  two.set(b, 0);
  two.set(block(34, { 0: 0xc000 }, { 2: 3 }), 34); // d = -2, q0 = 3
  const y = dequantize(GGMLType.Q8_0, two, 64);
  assert.equal(y[32], -6);
  assert.equal(y[1], 127 * 0.125);
});

test('dequantize Q2_K: scales/mins per 16, 2-bit quants', () => {
  // d = 1, dmin = 0.5; sub-block s: scale s, min 15 - s; every qs byte 0b11100100 so the code at
  // shift 2j is j: element e = 128h + 32j + 16k + l has code j = (e >> 5) & 3.
  const b = block(84, { 80: 0x3c00, 82: 0x3800 });
  for (let s = 0; s < 16; s++) b[s] = s | ((15 - s) << 4);
  b.fill(0xe4, 16, 80);
  const expected = [];
  for (let e = 0; e < 256; e++) {
    const s = e >> 4;
    expected[e] = s * ((e >> 5) & 3) - 0.5 * (15 - s);
  }
  assertArrayEqual(dequantize(GGMLType.Q2_K, b, 256), expected, 'Q2_K pattern');
  // A single code: qs[16 + 5] (block byte 16 + 21) bits 2..3 = 3 -> element 32*1 + 16*1 + 5 = 53
  // (sub-block 3: scale 2, min 1); d = 0.5, dmin = 1.
  const one = block(84, { 80: 0x3800, 82: 0x3c00 }, { 3: 0x12, 37: 0x0c });
  const y = dequantize(GGMLType.Q2_K, one, 256);
  assert.equal(y[53], 0.5 * 2 * 3 - 1 * 1);
  assert.equal(y[52], -1);
  assert.equal(y[48 + 128], 0);
});

test('dequantize Q3_K: 6-bit signed scales, 2 low bits + high bit', () => {
  // Scales: all stored values 33 (sc = 1): low nibbles 1 -> bytes 0..7 = 0x11; high 2 bits 2 -> 0xaa.
  // byte 0 = 0x1f: scale 0 low nibble 15; byte 8 = 0xab: scale 0 high bits 3 -> 63 -> sc 31.
  // byte 11 = 0x2a: scale 15 (i&3 = 3, shift 6) high bits 0 -> stored 1 -> sc -31.
  const b = block(110, { 108: 0x3800 }); // d = 0.5
  b.fill(0x11, 96, 104);
  b.fill(0xaa, 104, 108);
  b[96] = 0x1f;
  b[104] = 0xab;
  b[107] = 0x2a;
  // hmask 0 and qs 0 -> q = -4 everywhere, except:
  b[32] = 0x03;
  b[0] = 0x01; // element 0: low 3, high bit 0 of hmask[0] set -> q = 3
  b[32 + 32 + 16 + 15] = 0x80;
  b[31] = 0x80; // element 255: low bits 6..7 = 2, hmask[31] bit 7 -> q = 2
  const y = dequantize(GGMLType.Q3_K, b, 256);
  assert.equal(y[0], 0.5 * 31 * 3);
  assert.equal(y[1], 0.5 * 31 * -4);
  assert.equal(y[255], 0.5 * -31 * 2);
  assert.equal(y[254], 0.5 * -31 * -4);
  assert.equal(y[16], -2); // sub-block 1: sc 1
  assert.equal(y[128], -2); // sub-block 8: low nibble from byte 0's high nibble (1), high bits 2 -> sc 1
  assert.equal(y[239], -2);

  // Every scale distinct: sc_i = i - 16 (stored i + 16); all codes q = 1 (low 1, high bit set).
  const c = block(110, { 108: 0x3c00 });
  c.fill(0xff, 0, 32);
  c.fill(0x55, 32, 96);
  for (let i = 0; i < 16; i++) {
    const u = i + 16;
    if (i < 8) c[96 + i]! |= u & 15;
    else c[96 + i - 8]! |= (u & 15) << 4;
    c[104 + (i & 3)]! |= (u >> 4) << (2 * (i >> 2));
  }
  const z = dequantize(GGMLType.Q3_K, c, 256);
  for (let e = 0; e < 256; e++) assert.equal(z[e], (e >> 4) - 16, `element ${e}`);
});

// Q4_K / Q5_K scale bytes for sc = [1,2,3,4,63,17,32,48], m = [5,6,7,8,63,33,0,16] (worked by hand).
const K4_SC = [1, 2, 3, 4, 63, 17, 32, 48];
const K4_M = [5, 6, 7, 8, 63, 33, 0, 16];
const K4_SCALE_BYTES = [0xc1, 0x42, 0x83, 0xc4, 0xc5, 0x86, 0x07, 0x48, 0xff, 0x11, 0x00, 0x00];

test('dequantize Q4_K: packed 6-bit scales and mins', () => {
  const b = block(144, { 0: 0x3800, 2: 0x3400 }); // d = 0.5, dmin = 0.25
  b.set(K4_SCALE_BYTES, 4);
  // qs[32p + l]: low nibble -> sub-block 2p element l (code l & 15), high -> sub-block 2p+1 (15 - (l & 15)).
  for (let p = 0; p < 4; p++) for (let l = 0; l < 32; l++) b[16 + 32 * p + l] = (l & 15) | ((15 - (l & 15)) << 4);
  const expected = [];
  for (let e = 0; e < 256; e++) {
    const s = e >> 5,
      l = e & 31;
    const q = s & 1 ? 15 - (l & 15) : l & 15;
    expected[e] = 0.5 * K4_SC[s]! * q - 0.25 * K4_M[s]!;
  }
  assertArrayEqual(dequantize(GGMLType.Q4_K, b, 256), expected, 'Q4_K');
});

test('dequantize Q5_K: packed scales, 4 low bits + 5th bit from qh', () => {
  const b = block(176, { 0: 0x3800, 2: 0x3400 });
  b.set(K4_SCALE_BYTES, 4);
  for (let l = 0; l < 32; l++) b[16 + l] = l & 1 ? 0xaa : 0x55; // bit s set when s and l have the same parity
  for (let p = 0; p < 4; p++) for (let l = 0; l < 32; l++) b[48 + 32 * p + l] = (l & 15) | ((15 - (l & 15)) << 4);
  const expected = [];
  for (let e = 0; e < 256; e++) {
    const s = e >> 5,
      l = e & 31;
    const q = (s & 1 ? 15 - (l & 15) : l & 15) + ((s & 1) === (l & 1) ? 16 : 0);
    expected[e] = 0.5 * K4_SC[s]! * q - 0.25 * K4_M[s]!;
  }
  assertArrayEqual(dequantize(GGMLType.Q5_K, b, 256), expected, 'Q5_K');
});

test('dequantize Q6_K: int8 scales per 16, 4 low bits + 2 high bits', () => {
  const scales = [-128, -70, -61, -1, 0, 1, 9, 18, 27, 36, 45, 54, -9, -18, 100, 127];
  const b = block(210, { 208: 0x3400 }); // d = 0.25
  scales.forEach((s, i) => {
    b[192 + i] = s & 255;
  });
  // All quants 0 (q = -32) except:
  b[0] = 0xf5; // element 0 low 5, element 64 low 15
  b[128] = 0xe4; // high bits: element 0 -> 0, 32 -> 1, 64 -> 2, 96 -> 3
  b[64 + 32 + 31] = 0xa0; // element 255 low 10 (high nibble), element 191 low 0
  b[128 + 32 + 31] = 0xc0; // element 255 high bits 3
  const y = dequantize(GGMLType.Q6_K, b, 256);
  const val = (e: number, q: number) => Math.fround(0.25 * scales[e >> 4]!) * q;
  assert.equal(y[0], val(0, 5 - 32));
  assert.equal(y[32], val(32, 16 - 32));
  assert.equal(y[64], val(64, 47 - 32));
  assert.equal(y[96], val(96, 48 - 32));
  assert.equal(y[255], val(255, 58 - 32));
  assert.equal(y[191], val(191, -32));
  assert.equal(y[1], 0.25 * -128 * -32);
  assert.equal(y[17], 0.25 * -70 * -32);
  assert.equal(y[254], 0.25 * 127 * -32);

  // Every element a distinct (element, code) pair: code u = (5e + 3) & 63, packed per the layout.
  const c = block(210, { 208: 0x3c00 });
  scales.forEach((s, i) => {
    c[192 + i] = s & 255;
  });
  for (let e = 0; e < 256; e++) {
    const h = e >> 7,
      j = (e >> 5) & 3,
      l = e & 31,
      u = (5 * e + 3) & 63;
    c[64 * h + 32 * (j & 1) + l]! |= (u & 15) << (4 * (j >> 1));
    c[128 + 32 * h + l]! |= (u >> 4) << (2 * j);
  }
  const z = dequantize(GGMLType.Q6_K, c, 256);
  for (let e = 0; e < 256; e++) assert.equal(z[e], scales[e >> 4]! * (((5 * e + 3) & 63) - 32), `element ${e}`);
});

test('ggml golden: dequantize random blocks of every quant type bit for bit', () => {
  const golden: Array<[GGMLType, number[], number, number]> = [
    [GGMLType.Q4_0, [0], 3755900048, 1936385702],
    [GGMLType.Q4_1, [0, 2], 3194483237, 2301944138],
    [GGMLType.Q5_0, [0], 637395763, 405740092],
    [GGMLType.Q5_1, [0, 2], 774762221, 3535075933],
    [GGMLType.Q8_0, [0], 1046295633, 1442083347],
    [GGMLType.Q2_K, [80, 82], 2759600238, 460162663],
    [GGMLType.Q3_K, [108], 1093239550, 3557248072],
    [GGMLType.Q4_K, [0, 2], 4204126896, 1874152684],
    [GGMLType.Q5_K, [0, 2], 945391070, 3950910629],
    [GGMLType.Q6_K, [208], 501295515, 785816439],
  ];
  const N = 4096;
  golden.forEach(([type, scaleOffsets, srcHash, outHash], k) => {
    const info = requireQuantType(type);
    const r = mulberry32(4242 + k);
    const nb = N / info.blockSize;
    const q = new Uint8Array(nb * info.bytesPerBlock);
    for (let i = 0; i < q.length; i++) q[i] = r() & 255;
    // f16 scale fields: random but finite
    for (let b = 0; b < nb; b++) {
      for (const o of scaleOffsets) {
        let h = r() & 0xffff;
        if (((h >> 10) & 31) === 31) h &= ~(1 << 10);
        q[b * info.bytesPerBlock + o] = h & 255;
        q[b * info.bytesPerBlock + o + 1] = h >> 8;
      }
    }
    assert.equal(fnv1a(q), srcHash, `${info.name} input`);
    assert.equal(fnv1a(bytesOf(dequantize(type, q, N))), outHash, `${info.name} output`);
  });
});

test('dequantize reads unaligned views and honours out/outOffset', () => {
  const x = gaussian(512, 5);
  for (const type of [GGMLType.F32, GGMLType.F16, GGMLType.BF16, ...QUANT_TYPES]) {
    const q = quantize(type, x);
    const ref = dequantize(type, q, 512);
    const shifted = new Uint8Array(q.length + 3);
    shifted.set(q, 1);
    const view = shifted.subarray(1, 1 + q.length);
    assert.deepEqual(dequantize(type, view, 512), ref, `${GGMLType[type]} unaligned`);
    const out = new Float32Array(600).fill(7);
    const ret = dequantize(type, q, 512, out, 50);
    assert.equal(ret, out);
    assert.deepEqual(out.subarray(50, 562), ref);
    assert.ok(out.subarray(0, 50).every((v) => v === 7) && out.subarray(562).every((v) => v === 7), 'outside untouched');
    // fewer elements than the source holds
    const bs = requireQuantType(type).blockSize;
    const n = type === GGMLType.F32 || type === GGMLType.F16 || type === GGMLType.BF16 ? 7 : bs;
    assert.deepEqual(dequantize(type, q, n), ref.subarray(0, n));
  }
});

// ---------------------------------------------------------------------------------------------
// quantize: ggml reference algorithms, byte for byte.

test('ggml golden: Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 quantize_row_*_ref bytes and dequantized values', () => {
  // Irwin-Hall (sum of 4 uniforms) values, per-block scale 2^k/64 with k in 0..12: built with the
  // exact same double arithmetic as the C generator, so the float inputs are identical.
  const N = 4096;
  const r = mulberry32(12345);
  const unif = () => (r() >>> 8) / 16777216;
  const x = new Float32Array(N);
  let sc = 1;
  for (let i = 0; i < N; i++) {
    if (i % 32 === 0) sc = (1 << (r() % 13)) / 64;
    x[i] = (unif() + unif() + unif() + unif() - 2) * sc;
  }
  assert.equal(fnv1a(bytesOf(x)), 387129428, 'input data');
  const golden: Array<[GGMLType, number, number]> = [
    [GGMLType.Q4_0, 1002545490, 2086413337],
    [GGMLType.Q4_1, 80082753, 1504050811],
    [GGMLType.Q5_0, 333731601, 1637417448],
    [GGMLType.Q5_1, 3517536591, 186533867],
    [GGMLType.Q8_0, 4174311228, 528779502],
  ];
  for (const [type, qHash, yHash] of golden) {
    const q = quantize(type, x);
    assert.equal(q.length, (N / 32) * requireQuantType(type).bytesPerBlock);
    assert.equal(fnv1a(q), qHash, `${GGMLType[type]} bytes`);
    assert.equal(fnv1a(bytesOf(dequantize(type, q, N))), yHash, `${GGMLType[type]} values`);
  }
});

test('ggml golden: reference quantizers on grid data (small integers x awkward scales: many rounding ties)', () => {
  const N = 4096;
  const scales = [0.1, 0.3, 1 / 3, 7, 1, 0.0625];
  const r = mulberry32(2024);
  const x = new Float32Array(N);
  let s = 1,
    off = 0;
  for (let i = 0; i < N; i++) {
    if (i % 32 === 0) {
      s = scales[r() % 6]!;
      off = (r() % 9) - 4;
    }
    x[i] = ((r() % 33) - 16 + off) * s;
  }
  assert.equal(fnv1a(bytesOf(x)), 3294825219, 'input data');
  const golden: Array<[GGMLType, number, number]> = [
    [GGMLType.Q4_0, 2745338533, 3131060660],
    [GGMLType.Q4_1, 141333734, 2621669687],
    [GGMLType.Q5_0, 4032476422, 4183005141],
    [GGMLType.Q5_1, 3376833218, 2032400566],
    [GGMLType.Q8_0, 289529536, 4067875443],
  ];
  for (const [type, qHash, yHash] of golden) {
    const q = quantize(type, x);
    assert.equal(fnv1a(q), qHash, `${GGMLType[type]} bytes`);
    assert.equal(fnv1a(bytesOf(dequantize(type, q, N))), yHash, `${GGMLType[type]} values`);
  }
});

test('quantize Q8_0 rounds half away from zero (C roundf)', () => {
  const x = new Float32Array(32);
  const vals = [127, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5, 0.49999997, -0.49999997];
  vals.forEach((v, i) => {
    x[i] = v;
  });
  const q = quantize(GGMLType.Q8_0, x); // amax 127 -> d = 1
  assert.equal(q[0]! | (q[1]! << 8), 0x3c00);
  const expected = [127, 1, -1, 2, -2, 3, -3, 127, -127, 0, 0];
  for (const [i, e] of expected.entries()) assert.equal((q[2 + i]! << 24) >> 24, e, `element ${i} (${vals[i]})`);
});

test('quantize Q4_0 follows the reference: d = max/-8, q = min(15, trunc(x/d + 8.5))', () => {
  const x = new Float32Array(32);
  const vals = [-8, 7, 7.6, -0.5, 0.49, 0.5, 3.9, -7.6];
  vals.forEach((v, i) => {
    x[i] = v;
  });
  const q = quantize(GGMLType.Q4_0, x); // max = -8 -> d = 1, id = 1
  assert.equal(q[0]! | (q[1]! << 8), 0x3c00);
  // d = max/-8 = +1 because the largest-magnitude value is -8, so q = min(15, trunc(x + 8.5))
  const codes = [0, 15, 15, 8, 8, 9, 12, 0];
  for (const [i, c] of codes.entries()) assert.equal(q[2 + i]! & 15, c, `element ${i} (${vals[i]})`);
  assert.equal(q[2 + 8]! & 15, 8, 'zeros map to 8');
});

test('quantize F32 / F16 / BF16 write little-endian bits', () => {
  const x = new Float32Array([1, -2, 0.1, 65520, NaN, 2 ** -25]);
  assert.deepEqual([...quantize(GGMLType.F32, x.subarray(0, 2))], [0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]);
  assert.deepEqual([...quantize(GGMLType.F16, x)], [0x00, 0x3c, 0x00, 0xc0, 0x66, 0x2e, 0x00, 0x7c, 0x00, 0x7e, 0x00, 0x00]);
  const bf = quantize(GGMLType.BF16, x.subarray(0, 3));
  assert.deepEqual([...bf], [0x80, 0x3f, 0x00, 0xc0, 0xcd, 0x3d]);
  const x2 = gaussian(64, 9);
  assert.deepEqual(dequantize(GGMLType.F32, quantize(GGMLType.F32, x2), 64), x2);
});

// ---------------------------------------------------------------------------------------------
// quantize -> dequantize round trips.

/**
 * NMSE bounds (sum err^2 / sum x^2) for N(0,1) data. Uniform rounding leaves error variance
 * step^2/12 (+ clipping); with E[absmax of 32 gaussians] ~ 2.1, E[range of 32] ~ 4.1,
 * E[absmax of 16] ~ 1.8, E[range of 16] ~ 3.5 (sigma = 1):
 *   Q8_0: step = absmax/127 ~ 0.017     -> ~2.9e-5 measured; bound 5e-5
 *   Q4_0: step = absmax/8 ~ 0.27 (+ the side opposite the extreme clips at 7 steps) -> 7.5e-3; bound 1e-2
 *   Q4_1: step = range/15 ~ 0.27        -> 6.2e-3; bound 8e-3
 *   Q5_0: step = absmax/16              -> 1.9e-3; bound 2.5e-3
 *   Q5_1: step = range/31               -> 1.45e-3; bound 2e-3
 *   Q2_K: step = range16/3 ~ 1.2        -> ~0.11 before the scale search; measured 0.08; bound 0.1
 *   Q3_K: step = absmax16/4 ~ 0.45 (+ clipping of the 3-step side) -> 2.2e-2; bound 3e-2
 *   Q4_K: step = range32/15, 6-bit scales -> 5.3e-3; bound 7e-3
 *   Q5_K: step = range32/31             -> 1.25e-3; bound 1.7e-3
 *   Q6_K: step = absmax16/32            -> 3.2e-4; bound 4.5e-4
 * Max abs error per block / block absmax (for K-quants: per super-block, relative to its absmax):
 * half a step, or a full step where the format clips (Q4_0/Q5_0's short side; Q3_K/Q6_K's short
 * side; K-quants' scale search may clip outliers), plus f16 rounding of d and 6-bit (Q2_K 4-bit)
 * rounding of sub-block scales:
 *   Q8_0 1/127 (half a step + f16 d, or a subnormal d at tiny magnitudes; measured 0.0057)
 *   Q4_0 0.13 (1/8)   Q4_1 0.07 (1/15)   Q5_0 0.066 (1/16)   Q5_1 0.035 (1/31)
 *   Q2_K 0.5 (measured 0.40)  Q3_K 0.3 (1/4, measured 0.24)  Q4_K 0.12 (0.096)  Q5_K 0.07 (0.056)
 *   Q6_K 0.035 (1/32, measured 0.021)
 */
const BOUNDS = new Map<GGMLType, { nmse: number; rel: number }>([
  [GGMLType.Q8_0, { nmse: 5e-5, rel: 1 / 127 }],
  [GGMLType.Q4_0, { nmse: 1e-2, rel: 0.13 }],
  [GGMLType.Q4_1, { nmse: 8e-3, rel: 0.07 }],
  [GGMLType.Q5_0, { nmse: 2.5e-3, rel: 0.066 }],
  [GGMLType.Q5_1, { nmse: 2e-3, rel: 0.035 }],
  [GGMLType.Q2_K, { nmse: 0.1, rel: 0.5 }],
  [GGMLType.Q3_K, { nmse: 3e-2, rel: 0.3 }],
  [GGMLType.Q4_K, { nmse: 7e-3, rel: 0.12 }],
  [GGMLType.Q5_K, { nmse: 1.7e-3, rel: 0.07 }],
  [GGMLType.Q6_K, { nmse: 4.5e-4, rel: 0.035 }],
]);

function errors(type: GGMLType, x: Float32Array): { nmse: number; rel: number; y: Float32Array } {
  const n = x.length;
  const y = dequantize(type, quantize(type, x), n);
  const bs = requireQuantType(type).blockSize;
  let e2 = 0,
    x2 = 0,
    rel = 0;
  for (let b = 0; b < n; b += bs) {
    let amax = 0,
      emax = 0;
    for (let i = b; i < b + bs; i++) {
      const e = y[i]! - x[i]!;
      e2 += e * e;
      x2 += x[i]! * x[i]!;
      amax = Math.max(amax, Math.abs(x[i]!));
      emax = Math.max(emax, Math.abs(e));
    }
    if (amax > 0) rel = Math.max(rel, emax / amax);
  }
  return { nmse: e2 / x2, rel, y };
}

for (const type of QUANT_TYPES) {
  const name = GGMLType[type];
  const bound = BOUNDS.get(type)!;
  test(`${name}: round trip error on gaussian data (NMSE < ${bound.nmse}, block max error < ${bound.rel} absmax)`, () => {
    const N = 16384;
    for (const seed of [1, 2]) {
      // Magnitude-invariant within f16's range: the same bounds at scale 1, 5e3 (Q4_1/Q5_1's f16
      // min caps the scale at 65504 / 4.5 sigma) and 1e-3.
      for (const scale of [1, 5e3, 1e-3]) {
        const { nmse, rel } = errors(type, gaussian(N, seed * 31, scale));
        assert.ok(nmse < bound.nmse, `${name} seed ${seed} scale ${scale}: NMSE ${nmse.toExponential(3)}`);
        assert.ok(rel < bound.rel, `${name} seed ${seed} scale ${scale}: block max error ${rel.toFixed(4)} x absmax`);
      }
      // Heavy tails (1% outliers x10): the per-block bound still holds; NMSE grows (x4 allowed).
      const { nmse, rel } = errors(type, gaussian(N, seed * 31 + 7, 1, true));
      assert.ok(nmse < 4 * bound.nmse, `${name} outliers: NMSE ${nmse.toExponential(3)}`);
      assert.ok(rel < bound.rel, `${name} outliers: block max error ${rel.toFixed(4)} x absmax`);
    }
  });
}

test("K-quants: error within 10% of ggml's own reference quantizers (ggml ref NMSE measured on the same data)", () => {
  // ggml quantize_row_*_ref NMSE on Irwin-Hall data (sum of 4 uniforms - 2), measured with the C
  // harness: Q2_K 8.35e-2, Q3_K 2.15e-2, Q4_K 4.75e-3, Q5_K 1.21e-3, Q6_K 2.88e-4.
  const ggml = new Map([
    [GGMLType.Q2_K, 8.35e-2],
    [GGMLType.Q3_K, 2.15e-2],
    [GGMLType.Q4_K, 4.75e-3],
    [GGMLType.Q5_K, 1.21e-3],
    [GGMLType.Q6_K, 2.88e-4],
  ]);
  const N = 65536;
  const r = mulberry32(99);
  const u = () => (r() >>> 8) / 16777216;
  const x = new Float32Array(N);
  for (let i = 0; i < N; i++) x[i] = u() + u() + u() + u() - 2;
  for (const type of K_TYPES) {
    const { nmse } = errors(type, x);
    assert.ok(nmse < ggml.get(type)! * 1.1, `${GGMLType[type]}: NMSE ${nmse.toExponential(3)} vs ggml ${ggml.get(type)}`);
  }
});

test('all-zero blocks decode to zeros; constant blocks decode to the constant', () => {
  for (const type of QUANT_TYPES) {
    const bs = requireQuantType(type).blockSize;
    const zeros = dequantize(type, quantize(type, new Float32Array(2 * bs)), 2 * bs);
    assert.ok(
      zeros.every((v) => v === 0),
      `${GGMLType[type]} zeros`,
    );
    for (const c of [0.7, -3.25, 1000, -0.3, 1]) {
      const y = dequantize(type, quantize(type, new Float32Array(bs).fill(c)), bs);
      // Only f16 rounding of d/m (2^-11) and of rounded-up K-quant scales (2^-10) remain. (Smaller
      // constants push Q6_K's d = c/32/127 into f16 subnormals, where it is coarser: ggml too.)
      for (let i = 0; i < bs; i++) {
        assert.ok(Math.abs(y[i]! - c) <= Math.abs(c) * 2 ** -9, `${GGMLType[type]} constant ${c}: element ${i} = ${y[i]}`);
      }
    }
  }
});

test('blocks with huge or tiny magnitudes stay finite and bounded', () => {
  for (const type of QUANT_TYPES) {
    const name = GGMLType[type];
    const bs = requireQuantType(type).blockSize;
    const n = 4 * QK_K;
    // Mixed magnitudes: each block at its own scale from 1e-2 to 1e4 (blocks of 32; K-quant
    // sub-blocks share a super-block and its f16 d, so tiny sub-blocks next to huge ones lose precision).
    const x = gaussian(n, 77);
    for (let b = 0; b < n; b += 32) {
      const s = 10 ** (((b / 32) % 7) - 2);
      for (let i = b; i < b + 32; i++) x[i]! *= s;
    }
    const { rel, y } = errors(type, x);
    assert.ok(y.every(Number.isFinite), `${name} mixed: finite`);
    if (bs === 32) assert.ok(rel < BOUNDS.get(type)!.rel, `${name} mixed: block error ${rel}`);
    else {
      // Each super-block's error stays within the bound relative to the super-block's absmax.
      assert.ok(rel < BOUNDS.get(type)!.rel, `${name} mixed: super-block error ${rel}`);
    }
    // Below f16 resolution (~6e-8): scales flush to 0 or the smallest subnormal; nothing blows up.
    const tiny = gaussian(n, 78, 1e-7);
    const t = errors(type, tiny);
    assert.ok(t.y.every(Number.isFinite), `${name} tiny: finite`);
    const maxErr = t.y.reduce((m, v, i) => Math.max(m, Math.abs(v - tiny[i]!)), 0);
    assert.ok(maxErr < 2e-6, `${name} tiny: max error ${maxErr}`);
    // Largest f16-representable scales: absmax 1e5 for the symmetric 32-element formats.
    if (type === GGMLType.Q8_0 || type === GGMLType.Q4_0 || type === GGMLType.Q5_0 || bs === QK_K) {
      const huge = gaussian(n, 79, 2e4);
      const h = errors(type, huge);
      assert.ok(h.y.every(Number.isFinite), `${name} huge: finite`);
      assert.ok(h.nmse < BOUNDS.get(type)!.nmse * 1.5, `${name} huge: NMSE ${h.nmse}`);
    }
  }
});

// ---------------------------------------------------------------------------------------------
// MXFP4 (bytes and values against llama.cpp's own: test/integration/quant-vs-llama.test.ts).

test('dequantize MXFP4: E8M0 exponent, E2M1 nibbles (doubled kvalues × 2^(e-128))', () => {
  const e2m1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6];
  const qs: Record<number, number> = {};
  for (let j = 0; j < 16; j++) qs[1 + j] = j | ((15 - j) << 4);
  // e = 127: scale 2^-1, so the values are E2M1's own; e = 130: × 8.
  for (const [e, mul] of [
    [127, 1],
    [130, 8],
  ] as const) {
    const expected = [...e2m1.map((v) => v * mul), ...e2m1.map((_, j) => (e2m1[15 - j] as number) * mul)];
    assertArrayEqual(dequantize(GGMLType.MXFP4, block(17, {}, { 0: e, ...qs }), 32), expected, `MXFP4 e=${e}`);
  }
  // e < 2: the subnormal scales 2^-128 and 2^-127; e = 255: 2^127, so 12 × it (or 2 ×) overflows to +Inf as in ggml.
  assert.equal(dequantize(GGMLType.MXFP4, block(17, {}, { 0: 0, 1: 1 }), 32)[0], 2 ** -128);
  assert.equal(dequantize(GGMLType.MXFP4, block(17, {}, { 0: 1, 1: 7 }), 32)[0], 12 * 2 ** -127);
  const top = dequantize(GGMLType.MXFP4, block(17, {}, { 0: 255, 1: 1 | (7 << 4) }), 32);
  assert.equal(top[0], 2 ** 127);
  assert.equal(top[16], Infinity);
});

test('quantize MXFP4 (quantize_row_mxfp4_ref): e = floor(log2 amax) - 2 + 127, nearest level, first of ties', () => {
  // amax 6 -> e = 2 - 2 + 127 = 127, d = 0.5: the E2M1 levels themselves; 2.5 ties 2 and 3 -> the first (2).
  const x = new Float32Array(32);
  x.set([6, -6, 0.5, 2.5, -0.25, 5.1, 0, -0]);
  const q = quantize(GGMLType.MXFP4, x);
  assert.equal(q.length, 17);
  assert.equal(q[0], 127);
  assert.deepEqual([...dequantize(GGMLType.MXFP4, q, 32).subarray(0, 8)], [6, -6, 0.5, 2, 0, 6, 0, 0]);
  // An all-zero block: e = 0.
  assert.equal(quantize(GGMLType.MXFP4, new Float32Array(32))[0], 0);
  // Error: E2M1's coarse top (4 -> 6) and values in (1.5, 2) × 2^k clipping to 1.5 × 2^k leave up to a quarter of
  // the block's absmax; ~1.3e-2 NMSE on gaussian data at any magnitude.
  for (const scale of [1, 5e3, 1e-3, 1e-30]) {
    const x = gaussian(16384, 31, scale);
    const { nmse, rel, y } = errors(GGMLType.MXFP4, x);
    assert.ok(y.every(Number.isFinite), `scale ${scale}: finite`);
    assert.ok(nmse < 1.6e-2, `scale ${scale}: NMSE ${nmse.toExponential(3)}`);
    assert.ok(rel <= 0.25, `scale ${scale}: block max error ${rel.toFixed(4)} x absmax`);
  }
});

test('dequantize IQ4_NL: f16 d × kvalues_iq4nl[nibble]', () => {
  const kv = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
  const qs: Record<number, number> = {};
  for (let j = 0; j < 16; j++) qs[2 + j] = j | ((15 - j) << 4);
  const expected = [...kv.map((v) => v * 0.25), ...kv.map((_, j) => (kv[15 - j] as number) * 0.25)];
  assertArrayEqual(dequantize(GGMLType.IQ4_NL, block(18, { 0: f32ToF16(0.25) }, qs), 32), expected, 'IQ4_NL');
});

test('quantize IQ4_NL (quantize_iq4_nl without an importance matrix): levels and error', () => {
  // The block max maps onto the level -127 (d = max/127 first, then refitted): -127 × d for the largest magnitude.
  const x = new Float32Array(32).map((_, i) => (i - 16) / 16);
  const q = quantize(GGMLType.IQ4_NL, x);
  assert.equal(q.length, 18);
  const y = dequantize(GGMLType.IQ4_NL, q, 32);
  assert.ok(Math.abs((y[0] as number) + 1) < 0.05, `element 0 (-1) decodes to ${y[0]}`);
  // Tiny blocks (below GROUP_MAX_EPS): d = 0, every nibble 8 (the level 1 nearest to 0).
  const t = quantize(GGMLType.IQ4_NL, new Float32Array(32).fill(1e-16));
  assert.deepEqual([...t], [0, 0, ...new Array(16).fill(0x88)]);
  // ~4.5 bits: NMSE about 6e-3 on gaussian data, the block max error within an eighth of its absmax.
  for (const scale of [1, 5e3, 1e-3]) {
    const { nmse, rel, y } = errors(GGMLType.IQ4_NL, gaussian(16384, 31, scale));
    assert.ok(y.every(Number.isFinite), `scale ${scale}: finite`);
    assert.ok(nmse < 8e-3, `scale ${scale}: NMSE ${nmse.toExponential(3)}`);
    assert.ok(rel < 0.125, `scale ${scale}: block max error ${rel.toFixed(4)} x absmax`);
  }
});

test('dequantize IQ4_XS: (f16 d × (6-bit scale − 32)) × kvalues_iq4nl[nibble] per 32-element sub-block', () => {
  const kv = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
  // Sub-block ib's 6-bit scale is 33 + ib (low 4 bits in scales_l, high 2 bits 0b10 in scales_h), so ls − 32 = 1 + ib;
  // every sub-block's levels are j | (15 − j) << 4.
  const ls = [33, 34, 35, 36, 37, 38, 39, 40];
  let sh = 0;
  const bytes: Record<number, number> = {};
  for (let ib = 0; ib < 8; ib++) {
    sh |= ((ls[ib] as number) >> 4) << (2 * ib);
    bytes[4 + (ib >> 1)] = (bytes[4 + (ib >> 1)] ?? 0) | (((ls[ib] as number) & 15) << (4 * (ib & 1)));
    for (let j = 0; j < 16; j++) bytes[8 + 16 * ib + j] = j | ((15 - j) << 4);
  }
  const y = dequantize(GGMLType.IQ4_XS, block(136, { 0: f32ToF16(0.5), 2: sh }, bytes), 256);
  const expected: number[] = [];
  for (let ib = 0; ib < 8; ib++) {
    const dl = 0.5 * (ib + 1);
    expected.push(...kv.map((v) => dl * v), ...kv.map((_, j) => dl * (kv[15 - j] as number)));
  }
  assertArrayEqual(y, expected, 'IQ4_XS');
});

test('quantize IQ4_XS (quantize_iq4_xs without an importance matrix): scales, levels and error', () => {
  const q = quantize(GGMLType.IQ4_XS, gaussian(256, 7, 1));
  assert.equal(q.length, 136);
  // d = −(signed largest sub-block scale)/32: that sub-block's 6-bit scale is −32 (stored 0) unless it was negative.
  const ls = [...Array(8).keys()].map(
    (ib) =>
      (((q[4 + (ib >> 1)] as number) >> (4 * (ib & 1))) & 15) | (((((q[2] as number) | ((q[3] as number) << 8)) >> (2 * ib)) & 3) << 4),
  );
  assert.ok(ls.includes(0), `one sub-block carries the extreme scale: ${ls}`);
  // An all-zero super-block: d = −0 (f16 0x8000), every scale 32 (0), every level 8.
  const z = quantize(GGMLType.IQ4_XS, new Float32Array(256));
  assert.deepEqual([...z.subarray(0, 8)], [0, 0x80, 0xaa, 0xaa, 0, 0, 0, 0]);
  assert.ok(z.subarray(8).every((b) => b === 0x88));
  // ~4.25 bits: NMSE about 6e-3 on gaussian data, like IQ4_NL; the block max error within an eighth of its absmax.
  for (const scale of [1, 5e3, 1e-3]) {
    const { nmse, rel, y } = errors(GGMLType.IQ4_XS, gaussian(16384, 31, scale));
    assert.ok(y.every(Number.isFinite), `scale ${scale}: finite`);
    assert.ok(nmse < 8e-3, `scale ${scale}: NMSE ${nmse.toExponential(3)}`);
    assert.ok(rel < 0.125, `scale ${scale}: block max error ${rel.toFixed(4)} x absmax`);
  }
});

test('dequantize IQ2_XXS: (d · (0.5 + s)) · 0.25 × iq2xxs_grid magnitudes, signs from ksigns_iq2xs', () => {
  // Sub-block 0: groups on grid points 0..3, group 0's sign index 3 (ksigns 3: elements 0 and 1 negative), the others
  // 0 (all positive); s = 3, so db = (1 · 3.5) · 0.25 = 0.875. The other sub-blocks: point 0, s = 0 (db = 0.125).
  const bytes: Record<number, number> = { 2: 0, 3: 1, 4: 2, 5: 3, 6: 3, 9: 3 << 4 };
  const y = dequantize(GGMLType.IQ2_XXS, block(66, { 0: f32ToF16(1) }, bytes), 256);
  // iq2xxs_grid[0..3]: 8 8 8 8 8 8 8 8 | 43 8 8 8 8 8 8 8 | 25 25 8 8 8 8 8 8 | 8 43 8 8 8 8 8 8
  const points = [
    [8, 8, 8, 8, 8, 8, 8, 8],
    [43, 8, 8, 8, 8, 8, 8, 8],
    [25, 25, 8, 8, 8, 8, 8, 8],
    [8, 43, 8, 8, 8, 8, 8, 8],
  ];
  const first = points.flat().map((v, i) => 0.875 * v * (i < 2 ? -1 : 1));
  assertArrayEqual(y.subarray(0, 32), first, 'IQ2_XXS sub-block 0');
  assertArrayEqual(y.subarray(32), new Array(224).fill(1), 'IQ2_XXS sub-blocks 1..7');
});

test('dequantize IQ2_XS: (d · (0.5 + s)) · 0.25 × iq2xs_grid magnitudes, 9-bit indices, a scale per 16 elements', () => {
  // Sub-block 0: groups on grid points 0, 1, 256 and 511 (the 9th index bit), group 0's sign index 3 (elements 0 and 1
  // negative), the others 0; scales 3 (first half: db = (1 · 3.5) · 0.25 = 0.875) and 1 (second: 0.375). The other
  // sub-blocks: point 0, s = 0 (db = 0.125): every value 1.
  const bytes: Record<number, number> = { 3: 3 << 1, 4: 1, 7: 1, 8: 0xff, 9: 1, 66: 3 | (1 << 4) };
  const y = dequantize(GGMLType.IQ2_XS, block(74, { 0: f32ToF16(1) }, bytes), 256);
  // iq2xs_grid[0], [1], [256], [511]
  const points = [
    [8, 8, 8, 8, 8, 8, 8, 8],
    [43, 8, 8, 8, 8, 8, 8, 8],
    [43, 25, 8, 8, 8, 8, 8, 25],
    [43, 43, 43, 43, 43, 43, 43, 43],
  ];
  const first = points.flat().map((v, i) => (i < 16 ? 0.875 : 0.375) * v * (i < 2 ? -1 : 1));
  assertArrayEqual(y.subarray(0, 32), first, 'IQ2_XS sub-block 0');
  assertArrayEqual(y.subarray(32), new Array(224).fill(1), 'IQ2_XS sub-blocks 1..7');
});

test('dequantize IQ1_S: d · (2s + 1) × (iq1s_grid value ± 0.125), 11-bit indices', () => {
  // Sub-block 0: groups on grid points 0, 1, 0 and 2047 (high bits 7 for group 3), s = 3 (dl = 7), delta negative
  // (bit 15). The other sub-blocks: point 0 (all −1), s = 0, delta +0.125: every value −0.875.
  const bytes: Record<number, number> = { 3: 1, 5: 0xff, 34: 0, 35: (3 << 4) | 0x80 | (7 << 1) };
  const y = dequantize(GGMLType.IQ1_S, block(50, { 0: f32ToF16(1) }, bytes), 256);
  const points = [
    [-1, -1, -1, -1, -1, -1, -1, -1],
    [1, -1, -1, -1, -1, -1, -1, -1],
    [-1, -1, -1, -1, -1, -1, -1, -1],
    [1, 1, 1, 1, 1, 1, 1, 1],
  ];
  assertArrayEqual(
    y.subarray(0, 32),
    points.flat().map((v) => 7 * (v - 0.125)),
    'IQ1_S sub-block 0',
  );
  assertArrayEqual(y.subarray(32), new Array(224).fill(-0.875), 'IQ1_S sub-blocks 1..7');
});

test('dequantize IQ1_M: d from the scales’ top nibbles, 3-bit scales per 16, a delta sign per group', () => {
  // d = f16 0x3c00 = 1 (nibbles 0, 0, c, 3 in sc[0..3]'s top bits). Sub-block 0: scales 3 (dl 7) and 1 (dl 3); groups
  // on points 0, 1, 0, 2047; group 0's delta negative. The other sub-blocks: point 0, scale 0, delta +: −0.875.
  const bytes: Record<number, number> = { 1: 1, 3: 0xff, 32: 0x08, 33: 0x70, 48: 3 | (1 << 3), 53: 0xc0, 55: 0x30 };
  const y = dequantize(GGMLType.IQ1_M, block(56, {}, bytes), 256);
  const want = [
    ...new Array(8).fill(7 * -1.125),
    7 * 1.125,
    ...new Array(7).fill(7 * -0.875),
    ...new Array(8).fill(3 * -0.875),
    ...new Array(8).fill(3 * 1.125),
  ];
  assertArrayEqual(y.subarray(0, 32), want, 'IQ1_M sub-block 0');
  assertArrayEqual(y.subarray(32), new Array(224).fill(-0.875), 'IQ1_M sub-blocks 1..7');
});

test('dequantize IQ3_XXS: (d · (0.5 + s)) · 0.5 × iq3xxs_grid magnitudes, signs from ksigns_iq2xs', () => {
  // Sub-block 0: its 8 quads on grid points 0..7, group 0's sign index 3 (elements 0 and 1 negative), s = 1, so
  // db = (1 · 1.5) · 0.5 = 0.75. The other sub-blocks: point 0 (4 4 4 4), s = 0 (db = 0.25): every value 1.
  const bytes: Record<number, number> = { 2: 0, 3: 1, 4: 2, 5: 3, 6: 4, 7: 5, 8: 6, 9: 7, 66: 3, 69: 1 << 4 };
  const y = dequantize(GGMLType.IQ3_XXS, block(98, { 0: f32ToF16(1) }, bytes), 256);
  // iq3xxs_grid[0..7] = 0x04040404 0x04040414 0x04040424 0x04040c0c 0x04040c1c 0x04040c3e 0x04041404 0x04041414
  const points = [
    [4, 4, 4, 4],
    [20, 4, 4, 4],
    [36, 4, 4, 4],
    [12, 12, 4, 4],
    [28, 12, 4, 4],
    [62, 12, 4, 4],
    [4, 20, 4, 4],
    [20, 20, 4, 4],
  ];
  const first = points.flat().map((v, i) => 0.75 * v * (i < 2 ? -1 : 1));
  assertArrayEqual(y.subarray(0, 32), first, 'IQ3_XXS sub-block 0');
  assertArrayEqual(y.subarray(32), new Array(224).fill(1), 'IQ3_XXS sub-blocks 1..7');
});

// ---------------------------------------------------------------------------------------------
// Arguments.

test('supported type sets', () => {
  const all = [GGMLType.F32, GGMLType.F16, GGMLType.BF16, ...QUANT_TYPES];
  for (const t of all) {
    assert.ok(canDequantize(t), `canDequantize ${GGMLType[t]}`);
    assert.ok(canQuantize(t), `canQuantize ${GGMLType[t]}`);
  }
  assert.ok(canDequantize(GGMLType.MXFP4) && canQuantize(GGMLType.MXFP4), 'MXFP4');
  assert.ok(canDequantize(GGMLType.IQ4_NL) && canQuantize(GGMLType.IQ4_NL), 'IQ4_NL');
  assert.ok(canDequantize(GGMLType.IQ4_XS) && canQuantize(GGMLType.IQ4_XS), 'IQ4_XS');
  // IQ2_XXS: read here, written by llama.cpp's quantizer (tools/llama-quantized.ts)
  assert.ok(canDequantize(GGMLType.IQ2_XXS) && !canQuantize(GGMLType.IQ2_XXS), 'IQ2_XXS');
  assert.ok(canDequantize(GGMLType.IQ3_XXS) && !canQuantize(GGMLType.IQ3_XXS), 'IQ3_XXS');
  assert.ok(canDequantize(GGMLType.IQ2_XS) && !canQuantize(GGMLType.IQ2_XS), 'IQ2_XS');
  assert.ok(canDequantize(GGMLType.IQ1_S) && !canQuantize(GGMLType.IQ1_S), 'IQ1_S');
  assert.ok(canDequantize(GGMLType.IQ1_M) && !canQuantize(GGMLType.IQ1_M), 'IQ1_M');
  for (const t of [GGMLType.Q8_1, GGMLType.Q8_K, GGMLType.IQ2_S, GGMLType.I8, GGMLType.F64, GGMLType.NVFP4, 999 as GGMLType]) {
    assert.equal(canDequantize(t), false, `canDequantize ${t}`);
    assert.equal(canQuantize(t), false, `canQuantize ${t}`);
  }
});

test('bad arguments throw RangeError', () => {
  const q40 = new Uint8Array(18 * 2);
  assert.throws(() => dequantize(GGMLType.Q4_0, q40, 31), { name: 'RangeError', message: /31.*32/ });
  assert.throws(() => dequantize(GGMLType.Q4_0, q40, 96), { name: 'RangeError', message: /54.*36/ });
  assert.throws(() => dequantize(GGMLType.Q6_K, new Uint8Array(209), 256), { name: 'RangeError', message: /210.*209/ });
  assert.throws(() => dequantize(GGMLType.Q4_K, new Uint8Array(144), 255), RangeError);
  assert.throws(() => dequantize(GGMLType.F32, new Uint8Array(7), 2), RangeError);
  assert.throws(() => dequantize(GGMLType.Q4_0, q40, -32), RangeError);
  assert.throws(() => dequantize(GGMLType.Q4_0, q40, 1.5), RangeError);
  assert.throws(() => dequantize(GGMLType.Q4_0, q40, 32, new Float32Array(31)), RangeError);
  assert.throws(() => dequantize(GGMLType.Q4_0, q40, 32, new Float32Array(40), 9), RangeError);
  assert.throws(() => dequantize(GGMLType.Q4_0, q40, 32, undefined, -1), RangeError);
  assert.throws(() => dequantize(GGMLType.IQ2_XXS, new Uint8Array(65), 256), { name: 'RangeError', message: /IQ2_XXS.*66.*65/ });
  assert.throws(() => dequantize(GGMLType.IQ3_XXS, new Uint8Array(97), 256), { name: 'RangeError', message: /IQ3_XXS.*98.*97/ });
  assert.throws(() => dequantize(GGMLType.IQ2_XS, new Uint8Array(73), 256), { name: 'RangeError', message: /IQ2_XS.*74.*73/ });
  assert.throws(() => dequantize(GGMLType.IQ1_S, new Uint8Array(49), 256), { name: 'RangeError', message: /IQ1_S.*50.*49/ });
  assert.throws(() => dequantize(GGMLType.IQ1_M, new Uint8Array(55), 256), { name: 'RangeError', message: /IQ1_M.*56.*55/ });
  assert.throws(() => dequantize(999 as GGMLType, q40, 32), RangeError);
  assert.throws(() => quantize(GGMLType.Q8_0, new Float32Array(33)), { name: 'RangeError', message: /33.*32/ });
  assert.throws(() => quantize(GGMLType.Q4_K, new Float32Array(128)), RangeError);
  assert.throws(() => quantize(GGMLType.Q8_1, new Float32Array(32)), RangeError);
  assert.throws(() => quantize(999 as GGMLType, new Float32Array(32)), RangeError);
  // empty input is fine
  assert.equal(quantize(GGMLType.Q4_K, new Float32Array(0)).length, 0);
  assert.equal(dequantize(GGMLType.Q4_K, new Uint8Array(0), 0).length, 0);
});
