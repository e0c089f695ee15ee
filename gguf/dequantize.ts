/**
 * Decoding of ggml tensor data to float32, bit-exact with ggml's dequantize_row_* (ggml-quants.c)
 * and its fp16/bf16 row converters, for the pinned llama.cpp.
 *
 * ggml computes these in C `float` (no FMA in the reference build). JS numbers are doubles, so each
 * intermediate float operation is rounded with Math.fround; the last rounding happens on the store
 * into the Float32Array. A product of a float and a small integer is exact in double, so rounding it
 * once (fround or store) gives exactly C's float result; double rounding of a single +,-,* to float
 * is innocuous, so fround(a op b) equals the C float operation.
 *
 * Standard JS only (typed arrays): safe in browsers. `src` may be any Uint8Array view (unaligned
 * offsets fine); multi-byte fields are assembled from bytes, little-endian as GGUF stores them.
 */
import { GGMLType, requireQuantType, typeName } from './quant-types.ts';
import { IQ1S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS } from './iq-grids.ts';
import { f16ToF32Table } from './half.ts';

type Decoder = (src: Uint8Array, nBlocks: number, out: Float32Array, o: number) => void;

const fround = Math.fround;

/** Little-endian u16 at byte offset p. */
function _u16(src: Uint8Array, p: number): number {
  return src[p]! | (src[p + 1]! << 8);
}

/** f16 field at byte offset p, as a float32 value. */
function half(tab: Float32Array, src: Uint8Array, p: number): number {
  return tab[src[p]! | (src[p + 1]! << 8)]!;
}

// ---------------------------------------------------------------------------------------------
// Plain float formats (block size 1).

/** F32: 4 bytes per element, little-endian IEEE float32. Bits are copied verbatim. */
function decodeF32(src: Uint8Array, n: number, out: Float32Array, o: number): void {
  const dst = new Uint32Array(out.buffer, out.byteOffset + o * 4, n);
  for (let i = 0, p = 0; i < n; i++, p += 4) {
    dst[i] = (src[p]! | (src[p + 1]! << 8) | (src[p + 2]! << 16) | (src[p + 3]! << 24)) >>> 0;
  }
}

/** F16: 2 bytes per element, little-endian IEEE binary16. */
function decodeF16(src: Uint8Array, n: number, out: Float32Array, o: number): void {
  // Copy table bits rather than values so NaN payloads survive.
  const tab = f16ToF32Table();
  const tabBits = new Uint32Array(tab.buffer, tab.byteOffset, 65536);
  const dst = new Uint32Array(out.buffer, out.byteOffset + o * 4, n);
  for (let i = 0, p = 0; i < n; i++, p += 2) dst[i] = tabBits[src[p]! | (src[p + 1]! << 8)]!;
}

/** BF16: 2 bytes per element, little-endian; the upper 16 bits of a float32. */
function decodeBF16(src: Uint8Array, n: number, out: Float32Array, o: number): void {
  const dst = new Uint32Array(out.buffer, out.byteOffset + o * 4, n);
  for (let i = 0, p = 0; i < n; i++, p += 2) dst[i] = ((src[p]! << 16) | (src[p + 1]! << 24)) >>> 0;
}

// ---------------------------------------------------------------------------------------------
// 32-element block formats.

/**
 * Q4_0: BLOCK_SIZE 32, 18 bytes. [0] f16 d; [2..18) qs[16]: byte j holds element j (low nibble)
 * and element j+16 (high nibble). y = (q - 8) * d.
 */
function decodeQ4_0(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 18, o += 32) {
    const d = half(tab, src, p);
    for (let j = 0; j < 16; j++) {
      const q = src[p + 2 + j]!;
      out[o + j] = ((q & 15) - 8) * d;
      out[o + j + 16] = ((q >> 4) - 8) * d;
    }
  }
}

/**
 * Q4_1: BLOCK_SIZE 32, 20 bytes. [0] f16 d; [2] f16 m; [4..20) qs[16] nibbles as in Q4_0.
 * y = q * d + m.
 */
function decodeQ4_1(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 20, o += 32) {
    const d = half(tab, src, p);
    const m = half(tab, src, p + 2);
    for (let j = 0; j < 16; j++) {
      const q = src[p + 4 + j]!;
      out[o + j] = fround((q & 15) * d) + m;
      out[o + j + 16] = fround((q >> 4) * d) + m;
    }
  }
}

/**
 * Q5_0: BLOCK_SIZE 32, 22 bytes. [0] f16 d; [2..6) qh: u32 LE, bit j = 5th bit of element j;
 * [6..22) qs[16] low nibbles as in Q4_0. y = (q - 16) * d.
 */
function decodeQ5_0(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 22, o += 32) {
    const d = half(tab, src, p);
    const qh = (src[p + 2]! | (src[p + 3]! << 8) | (src[p + 4]! << 16) | (src[p + 5]! << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const q = src[p + 6 + j]!;
      const lo = (q & 15) | (((qh >>> j) & 1) << 4);
      const hi = (q >> 4) | (((qh >>> (j + 16)) & 1) << 4);
      out[o + j] = (lo - 16) * d;
      out[o + j + 16] = (hi - 16) * d;
    }
  }
}

/**
 * Q5_1: BLOCK_SIZE 32, 24 bytes. [0] f16 d; [2] f16 m; [4..8) qh u32 LE (5th bits);
 * [8..24) qs[16] low nibbles. y = q * d + m.
 */
function decodeQ5_1(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 24, o += 32) {
    const d = half(tab, src, p);
    const m = half(tab, src, p + 2);
    const qh = (src[p + 4]! | (src[p + 5]! << 8) | (src[p + 6]! << 16) | (src[p + 7]! << 24)) >>> 0;
    for (let j = 0; j < 16; j++) {
      const q = src[p + 8 + j]!;
      const lo = (q & 15) | (((qh >>> j) & 1) << 4);
      const hi = (q >> 4) | (((qh >>> (j + 16)) & 1) << 4);
      out[o + j] = fround(lo * d) + m;
      out[o + j + 16] = fround(hi * d) + m;
    }
  }
}

/** Q8_0: BLOCK_SIZE 32, 34 bytes. [0] f16 d; [2..34) qs[32] int8. y = q * d. */
function decodeQ8_0(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 34, o += 32) {
    const d = half(tab, src, p);
    for (let j = 0; j < 32; j++) out[o + j] = ((src[p + 2 + j]! << 24) >> 24) * d;
  }
}

/** kvalues_fp4 (ggml-common.h, kvalues_mxfp4): E2M1 values doubled, so a block's scale is half its E8M0 exponent. */
export const KVALUES_MXFP4: readonly number[] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/** kvalues_iq4nl (ggml-common.h): IQ4_NL's 16 non-linear levels. */
export const KVALUES_IQ4NL: readonly number[] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/**
 * ggml_e8m0_to_fp32_half (ggml-impl.h): 2^(e-128) as a float32, the subnormals 2^-128 and 2^-127 for e < 2
 * (e = 255 gives 2^127; NaN is not handled, as in ggml).
 */
export function e8m0ToF32Half(e: number): number {
  return 2 ** (e - 128);
}

/**
 * MXFP4: BLOCK_SIZE 32, 17 bytes. [0] u8 e (E8M0 exponent); [1..17) qs[16]: byte j holds element j (low nibble)
 * and element j+16 (high nibble), each an index into KVALUES_MXFP4. y = kvalue * 2^(e-128) (exact in float32).
 */
function decodeMXFP4(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  for (let b = 0, p = 0; b < nb; b++, p += 17, o += 32) {
    const d = e8m0ToF32Half(src[p]!);
    for (let j = 0; j < 16; j++) {
      const q = src[p + 1 + j]!;
      out[o + j] = KVALUES_MXFP4[q & 15]! * d;
      out[o + j + 16] = KVALUES_MXFP4[q >> 4]! * d;
    }
  }
}

/**
 * IQ4_NL: BLOCK_SIZE 32, 18 bytes. [0] f16 d; [2..18) qs[16] nibbles as in Q4_0, each an index into KVALUES_IQ4NL.
 * y = d * kvalue.
 */
function decodeIQ4_NL(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 18, o += 32) {
    const d = half(tab, src, p);
    for (let j = 0; j < 16; j++) {
      const q = src[p + 2 + j]!;
      out[o + j] = d * KVALUES_IQ4NL[q & 15]!;
      out[o + j + 16] = d * KVALUES_IQ4NL[q >> 4]!;
    }
  }
}

/**
 * IQ4_XS: BLOCK_SIZE 256, 136 bytes. [0] f16 d; [2] u16 scales_h (2 high bits per 32-element sub-block);
 * [4..8) scales_l[4] (4 low bits per sub-block, sub-block 2k in the low nibble of byte k); [8..136) qs[128]: sub-block
 * ib's 16 bytes qs[16ib..] as in IQ4_NL. ls = 6-bit scale; y = (d · (ls − 32)) · kvalue (two float32 roundings).
 */
function decodeIQ4_XS(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 136) {
    const d = half(tab, src, p);
    const sh = src[p + 2]! | (src[p + 3]! << 8);
    for (let ib = 0; ib < 8; ib++, o += 32) {
      const ls = ((src[p + 4 + (ib >> 1)]! >> (4 * (ib & 1))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
      const dl = fround(d * (ls - 32));
      const q = p + 8 + 16 * ib;
      for (let j = 0; j < 16; j++) {
        out[o + j] = dl * KVALUES_IQ4NL[src[q + j]! & 15]!;
        out[o + j + 16] = dl * KVALUES_IQ4NL[src[q + j]! >> 4]!;
      }
    }
  }
}

/**
 * IQ2_XXS: BLOCK_SIZE 256, 66 bytes. [0] f16 d; [2..66) per 32-element sub-block ib 8 bytes (two u32 at 2 + 8ib):
 * bytes 0..3 the iq2xxs_grid indices of its four groups of 8, the second u32's bits 7l..7l+6 group l's ksigns index and
 * its top 4 bits s. db = (d · (0.5 + s)) · 0.25; y = ±(db · grid magnitude), the sign from bit j of the group's signs.
 */
function decodeIQ2_XXS(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 66) {
    const d = half(tab, src, p);
    for (let ib = 0; ib < 8; ib++) {
      const q = p + 2 + 8 * ib;
      const aux1 = (src[q + 4]! | (src[q + 5]! << 8) | (src[q + 6]! << 16) | (src[q + 7]! << 24)) >>> 0;
      const db = fround(fround(d * (0.5 + (aux1 >>> 28))) * 0.25);
      for (let l = 0; l < 4; l++, o += 8) {
        const g = 8 * src[q + l]!;
        const signs = KSIGNS_IQ2XS[(aux1 >>> (7 * l)) & 127]!;
        for (let j = 0; j < 8; j++) {
          const v = fround(db * IQ2XXS_GRID[g + j]!);
          out[o + j] = signs & (1 << j) ? -v : v;
        }
      }
    }
  }
}

/**
 * IQ2_XS: BLOCK_SIZE 256, 74 bytes. [0] f16 d; [2..66) qs[32] u16: per group of 8 elements its iq2xs_grid index (low 9
 * bits) and ksigns index (top 7 bits), 4 groups per 32-element sub-block; [66..74) scales[8]: sub-block ib's two 4-bit
 * scales, the low nibble for its first 16 elements. db = (d · (0.5 + s)) · 0.25; y = ±(db · grid magnitude).
 */
function decodeIQ2_XS(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 74) {
    const d = half(tab, src, p);
    for (let ib = 0; ib < 8; ib++) {
      const sc = src[p + 66 + ib]!;
      const db = [fround(fround(d * (0.5 + (sc & 15))) * 0.25), fround(fround(d * (0.5 + (sc >> 4))) * 0.25)];
      for (let l = 0; l < 4; l++, o += 8) {
        const q = p + 2 + 2 * (4 * ib + l);
        const qs = src[q]! | (src[q + 1]! << 8);
        const g = 8 * (qs & 511);
        const signs = KSIGNS_IQ2XS[qs >> 9]!;
        for (let j = 0; j < 8; j++) {
          const v = fround(db[l >> 1]! * IQ2XS_GRID[g + j]!);
          out[o + j] = signs & (1 << j) ? -v : v;
        }
      }
    }
  }
}

/** IQ1S_DELTA = IQ1M_DELTA (ggml-common.h): the shift of every IQ1 grid value, its sign per group. */
export const IQ1_DELTA = 0.125;

/**
 * IQ1_S: BLOCK_SIZE 256, 50 bytes. [0] f16 d; [2..34) qs[32]: the low 8 bits of each group of 8's iq1s_grid index, 4
 * per 32-element sub-block; [34..50) qh[8] u16 per sub-block ib: bits 3l..3l+2 the high 3 bits of group l's index,
 * bits 12..14 the scale s, bit 15 the sign of delta. dl = d · (2s + 1); y = dl · (grid value ± 0.125).
 */
function decodeIQ1_S(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 50) {
    const d = half(tab, src, p);
    for (let ib = 0; ib < 8; ib++) {
      const qh = src[p + 34 + 2 * ib]! | (src[p + 35 + 2 * ib]! << 8);
      const dl = fround(d * (2 * ((qh >> 12) & 7) + 1));
      const delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
      for (let l = 0; l < 4; l++, o += 8) {
        const g = 8 * (src[p + 2 + 4 * ib + l]! | (((qh >> (3 * l)) & 7) << 8));
        for (let j = 0; j < 8; j++) out[o + j] = dl * (IQ1S_GRID[g + j]! + delta);
      }
    }
  }
}

/**
 * IQ1_M: BLOCK_SIZE 256, 56 bytes, no d of its own. [0..32) qs[32]: the low 8 bits of each group of 8's iq1s_grid
 * index; [32..48) qh[16], two per 32-element sub-block, one per pair of groups: bits 0..2 and 4..6 the high 3 bits of
 * its two groups' indices, bits 3 and 7 their delta signs; [48..56) scales as four u16 sc[k]: bits 6(ib & 1) ..
 * 6(ib & 1) + 5 of sc[ib / 2] are sub-block ib's two 3-bit scales (first half, second half), and the top 4 bits of the
 * four together the f16 d (sc[0] >> 12 lowest). dl = d · (2s + 1); y = dl · (grid value ± 0.125).
 */
function decodeIQ1_M(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 56) {
    const sc = [0, 1, 2, 3].map((k) => src[p + 48 + 2 * k]! | (src[p + 49 + 2 * k]! << 8));
    const d = tab[(sc[0]! >> 12) | ((sc[1]! >> 8) & 0x00f0) | ((sc[2]! >> 4) & 0x0f00) | (sc[3]! & 0xf000)]!;
    for (let ib = 0; ib < 8; ib++) {
      const s = sc[ib >> 1]! >> (6 * (ib & 1));
      const dl = [fround(d * (2 * (s & 7) + 1)), fround(d * (2 * ((s >> 3) & 7) + 1))];
      for (let l = 0; l < 4; l++, o += 8) {
        const qh = src[p + 32 + 2 * ib + (l >> 1)]! >> (4 * (l & 1));
        const g = 8 * (src[p + 4 * ib + l]! | ((qh & 7) << 8));
        const delta = qh & 8 ? -IQ1_DELTA : IQ1_DELTA;
        for (let j = 0; j < 8; j++) out[o + j] = dl[l >> 1]! * (IQ1S_GRID[g + j]! + delta);
      }
    }
  }
}

/**
 * IQ3_XXS: BLOCK_SIZE 256, 98 bytes. [0] f16 d; [2..66) qs: the iq3xxs_grid index of each 4 elements (8 per 32-element
 * sub-block); [66..98) per sub-block ib a u32: bits 7l..7l+6 the ksigns index of its group l of 8, the top 4 bits s.
 * db = (d · (0.5 + s)) · 0.5; y = ±(db · grid magnitude), the sign from bit j of the group's signs.
 */
function decodeIQ3_XXS(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 98) {
    const d = half(tab, src, p);
    for (let ib = 0; ib < 8; ib++) {
      const a = p + 66 + 4 * ib;
      const aux = (src[a]! | (src[a + 1]! << 8) | (src[a + 2]! << 16) | (src[a + 3]! << 24)) >>> 0;
      const db = fround(fround(d * (0.5 + (aux >>> 28))) * 0.5);
      for (let l = 0; l < 4; l++, o += 8) {
        const signs = KSIGNS_IQ2XS[(aux >>> (7 * l)) & 127]!;
        for (let j = 0; j < 8; j++) {
          const v = fround(db * IQ3XXS_GRID[4 * src[p + 2 + 8 * ib + 2 * l + (j >> 2)]! + (j & 3)]!);
          out[o + j] = signs & (1 << j) ? -v : v;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// K-quants: super-blocks of QK_K = 256 elements (the decoders hard-code 256).

/**
 * Q2_K: BLOCK_SIZE 256, 84 bytes. [0..16) scales[16]: sub-block s (16 elements) has scale
 * scales[s] & 15 and min scales[s] >> 4; [16..80) qs[64] 2-bit quants; [80] f16 d; [82] f16 dmin.
 * Element e = 128h + 32j + 16k + l (h<2, j<4, k<2, l<16) is bits 2j..2j+1 of qs[32h + 16k + l].
 * y = d*sc * q - dmin*m.
 */
function decodeQ2_K(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 84) {
    const d = half(tab, src, p + 80);
    const dmin = half(tab, src, p + 82);
    for (let s = 0; s < 16; s++, o += 16) {
      const sc = src[p + s]!;
      const dl = fround(d * (sc & 15));
      const ml = fround(dmin * (sc >> 4));
      const h = s >> 3,
        j = (s >> 1) & 3,
        k = s & 1;
      const q = p + 16 + 32 * h + 16 * k;
      const shift = 2 * j;
      for (let l = 0; l < 16; l++) out[o + l] = fround(dl * ((src[q + l]! >> shift) & 3)) - ml;
    }
  }
}

/**
 * Q3_K: BLOCK_SIZE 256, 110 bytes. [0..32) hmask[32] high bits; [32..96) qs[64] low 2 bits;
 * [96..108) scales: 16 six-bit values; [108] f16 d.
 * Scale i: low 4 bits = i<8 ? sb[i] & 15 : sb[i-8] >> 4; high 2 bits = (sb[8 + (i&3)] >> 2*(i>>2)) & 3;
 * stored biased by 32. Element e = 128h + 32j + 16k + l: low bits 2j.. of qs[32h + 16k + l],
 * high bit (4h + j) of hmask[16k + l]; q = low - (high ? 0 : 4). y = d*(scale-32) * q.
 */
function decodeQ3_K(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 110) {
    const d = half(tab, src, p + 108);
    const sb = p + 96;
    for (let s = 0; s < 16; s++, o += 16) {
      const low = s < 8 ? src[sb + s]! & 15 : src[sb + s - 8]! >> 4;
      const high = (src[sb + 8 + (s & 3)]! >> (2 * (s >> 2))) & 3;
      const dl = fround(d * ((low | (high << 4)) - 32));
      const h = s >> 3,
        j = (s >> 1) & 3,
        k = s & 1;
      const q = p + 32 + 32 * h + 16 * k;
      const hm = p + 16 * k;
      const shift = 2 * j;
      const mask = 1 << (4 * h + j);
      for (let l = 0; l < 16; l++) {
        const v = ((src[q + l]! >> shift) & 3) - (src[hm + l]! & mask ? 0 : 4);
        out[o + l] = dl * v;
      }
    }
  }
}

/**
 * Scale/min pair j (0..7) of the 12-byte 6-bit packing shared by Q4_K and Q5_K
 * (ggml's get_scale_min_k4). Returns sc | (m << 8).
 */
function scaleMinK4(src: Uint8Array, sb: number, j: number): number {
  if (j < 4) return (src[sb + j]! & 63) | ((src[sb + j + 4]! & 63) << 8);
  const sc = (src[sb + j + 4]! & 15) | ((src[sb + j - 4]! >> 6) << 4);
  const m = (src[sb + j + 4]! >> 4) | ((src[sb + j]! >> 6) << 4);
  return sc | (m << 8);
}

/**
 * Q4_K: BLOCK_SIZE 256, 144 bytes. [0] f16 d; [2] f16 dmin; [4..16) scales (12 bytes, eight
 * 6-bit scale/min pairs, see scaleMinK4); [16..144) qs[128]. Sub-block s (32 elements) lives in
 * qs[32*(s>>1) + l], low nibble for even s, high nibble for odd s. y = d*sc * q - dmin*m.
 */
function decodeQ4_K(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 144) {
    const d = half(tab, src, p);
    const dmin = half(tab, src, p + 2);
    for (let s = 0; s < 8; s++, o += 32) {
      const sm = scaleMinK4(src, p + 4, s);
      const dl = fround(d * (sm & 255));
      const ml = fround(dmin * (sm >> 8));
      const q = p + 16 + 32 * (s >> 1);
      const shift = (s & 1) * 4;
      for (let l = 0; l < 32; l++) out[o + l] = fround(dl * ((src[q + l]! >> shift) & 15)) - ml;
    }
  }
}

/**
 * Q5_K: BLOCK_SIZE 256, 176 bytes. [0] f16 d; [2] f16 dmin; [4..16) scales as Q4_K;
 * [16..48) qh[32]: bit s of qh[l] is the 5th bit of element 32s + l; [48..176) qs[128] low nibbles
 * as Q4_K. y = d*sc * q - dmin*m.
 */
function decodeQ5_K(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 176) {
    const d = half(tab, src, p);
    const dmin = half(tab, src, p + 2);
    for (let s = 0; s < 8; s++, o += 32) {
      const sm = scaleMinK4(src, p + 4, s);
      const dl = fround(d * (sm & 255));
      const ml = fround(dmin * (sm >> 8));
      const q = p + 48 + 32 * (s >> 1);
      const qh = p + 16;
      const shift = (s & 1) * 4;
      for (let l = 0; l < 32; l++) {
        const v = ((src[q + l]! >> shift) & 15) | (((src[qh + l]! >> s) & 1) << 4);
        out[o + l] = fround(dl * v) - ml;
      }
    }
  }
}

/**
 * Q6_K: BLOCK_SIZE 256, 210 bytes. [0..128) ql[128] low 4 bits; [128..192) qh[64] high 2 bits;
 * [192..208) scales[16] int8 (one per 16 elements); [208] f16 d.
 * Element e = 128h + 32j + l (h<2, j<4, l<32): low bits = ql[64h + 32(j&1) + l] nibble (j>>1),
 * high bits = (qh[32h + l] >> 2j) & 3; q = (low | high<<4) - 32. y = d*scales[e>>4] * q.
 */
function decodeQ6_K(src: Uint8Array, nb: number, out: Float32Array, o: number): void {
  const tab = f16ToF32Table();
  for (let b = 0, p = 0; b < nb; b++, p += 210, o += 256) {
    const d = half(tab, src, p + 208);
    for (let h = 0; h < 2; h++) {
      for (let j = 0; j < 4; j++) {
        const ql = p + 64 * h + 32 * (j & 1);
        const lshift = (j >> 1) * 4;
        const qh = p + 128 + 32 * h;
        const hshift = 2 * j;
        const e0 = 128 * h + 32 * j;
        const s0 = fround(d * ((src[p + 192 + (e0 >> 4)]! << 24) >> 24));
        const s1 = fround(d * ((src[p + 193 + (e0 >> 4)]! << 24) >> 24));
        for (let l = 0; l < 32; l++) {
          const v = (((src[ql + l]! >> lshift) & 15) | (((src[qh + l]! >> hshift) & 3) << 4)) - 32;
          out[o + e0 + l] = (l < 16 ? s0 : s1) * v;
        }
      }
    }
  }
}

const decoders = new Map<GGMLType, Decoder>([
  [GGMLType.F32, decodeF32],
  [GGMLType.F16, decodeF16],
  [GGMLType.BF16, decodeBF16],
  [GGMLType.Q4_0, decodeQ4_0],
  [GGMLType.Q4_1, decodeQ4_1],
  [GGMLType.Q5_0, decodeQ5_0],
  [GGMLType.Q5_1, decodeQ5_1],
  [GGMLType.Q8_0, decodeQ8_0],
  [GGMLType.MXFP4, decodeMXFP4],
  [GGMLType.IQ4_NL, decodeIQ4_NL],
  [GGMLType.IQ4_XS, decodeIQ4_XS],
  [GGMLType.IQ2_XXS, decodeIQ2_XXS],
  [GGMLType.IQ2_XS, decodeIQ2_XS],
  [GGMLType.IQ1_S, decodeIQ1_S],
  [GGMLType.IQ1_M, decodeIQ1_M],
  [GGMLType.IQ3_XXS, decodeIQ3_XXS],
  [GGMLType.Q2_K, decodeQ2_K],
  [GGMLType.Q3_K, decodeQ3_K],
  [GGMLType.Q4_K, decodeQ4_K],
  [GGMLType.Q5_K, decodeQ5_K],
  [GGMLType.Q6_K, decodeQ6_K],
]);

/** Whether `dequantize` supports this type. */
export function canDequantize(type: GGMLType): boolean {
  return decoders.has(type);
}

/**
 * Decodes `n` elements of `type` from `src` into `out` starting at `outOffset` (a new Float32Array
 * of length outOffset + n when `out` is omitted) and returns the array written. Results equal ggml's
 * dequantize_row_* bit for bit. Throws RangeError for an unsupported type, an `n` that is not a
 * whole number of blocks, a too short `src`, or an `out` without room.
 */
export function dequantize(type: GGMLType, src: Uint8Array, n: number, out?: Float32Array, outOffset = 0): Float32Array {
  const decode = decoders.get(type);
  if (!decode) {
    throw new RangeError(`dequantize: unsupported type ${typeName(type)} (${type})`);
  }
  const info = requireQuantType(type);
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`dequantize ${info.name}: bad element count ${n}`);
  if (n % info.blockSize !== 0) {
    throw new RangeError(`dequantize ${info.name}: ${n} elements is not a multiple of the block size ${info.blockSize}`);
  }
  const nBlocks = n / info.blockSize;
  const need = nBlocks * info.bytesPerBlock;
  if (src.length < need) {
    throw new RangeError(`dequantize ${info.name}: ${n} elements need ${need} bytes, src has ${src.length}`);
  }
  if (!Number.isSafeInteger(outOffset) || outOffset < 0) {
    throw new RangeError(`dequantize ${info.name}: bad output offset ${outOffset}`);
  }
  const dst = out ?? new Float32Array(outOffset + n);
  if (dst.length < outOffset + n) {
    throw new RangeError(`dequantize ${info.name}: output has ${dst.length} elements, needs ${outOffset + n}`);
  }
  if (n > 0) decode(src, nBlocks, dst, outOffset);
  return dst;
}
