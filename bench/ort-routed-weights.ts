/**
 * GGUF expert matrices in the smallest form onnxruntime-web runs them in, for the fair ORT baselines
 * (bench/ort-routed.ts): com.microsoft `MatMulNBits` blocks where the GGUF layout maps onto them, dequantized float32
 * where it does not.
 *
 * MatMulNBits (bits, block_size 32) computes Y = A · Bᵀ with B [N, K] cut along K into blocks of 32, each decoded as
 * (code − zero_point) · scale: codes packed low nibble first (byte j of a 4-bit block holds elements 2j and 2j+1),
 * one scale per block (the type of A: float32 here), zero points uint8 packed the same way (default 2^(bits−1)).
 *
 *   Q4_0  d · (q − 8) per block of 32                    → bits 4, scale d, default zero point 8: exact
 *   Q8_0  d · q, q int8, per block of 32                 → bits 8, code q + 128, default zero point 128: exact, but
 *                                                          only the wasm EP runs bits 8 (the webgpu EP: 2 and 4 bits)
 *   Q4_K  d·sc_j · q − dmin·m_j per sub-block j of 32    → bits 4, scale d·sc_j, default zero point 8, plus the
 *         (sc_j, m_j 6-bit, d, dmin f16 per 256)           separate term −(Σ_block x) · (dmin·m_j − 8·d·sc_j). A zero
 *                                                          point alone cannot carry the min: it would be
 *                                                          dmin·m_j / (d·sc_j), not an integer in 0..15. (Zero point
 *                                                          0 with the term −(Σ_block x)·dmin·m_j is exact too, but
 *                                                          onnxruntime's kernels are slower with zero points.)
 *   Q5_K, Q6_K (5- and 6-bit codes), F16, BF16, F32    → dequantized float32 (MatMul wants both operands of one
 *                                                          type, and the rows are float32)
 *
 * d·sc_j and dmin·m_j are products of an f16 and a 6-bit integer: exact in float32, as is (q − zp) · scale, so Q4_0
 * and Q8_0 weights are GGUF's bit for bit; Q4_K's folded min term is rounded once to float32 per block (ggml rounds
 * each weight once too): results differ from the dequantized weights' by float32 rounding and summation only.
 */
import { dequantize } from '../gguf/dequantize.ts';
import { f16ToF32Table } from '../gguf/half.ts';
import { GGMLType, QK_K, rowByteSize, typeName } from '../gguf/quant-types.ts';

/** MatMulNBits' block length along K: GGUF's 32-element blocks and sub-blocks. */
export const NBITS_BLOCK = 32;

/** The onnxruntime-web execution providers the benchmark compares. */
export type OrtEp = 'webgpu' | 'wasm';

/**
 * How one matrix is stored in the ORT graph: 'q4' (MatMulNBits 4-bit, zero point 8), 'q4k' (4-bit, zero point 0,
 * plus mins), 'q8' (8-bit, zero point 128), 'f32' (dequantized MatMul).
 */
export type OrtWeightForm = 'q4' | 'q4k' | 'q8' | 'f32';

/** The smallest form `ep` runs a `type` matrix in (see the module comment for why). */
export function ortWeightForm(type: GGMLType, ep: OrtEp): OrtWeightForm {
  switch (type) {
    case GGMLType.Q4_0:
      return 'q4';
    case GGMLType.Q4_K:
      return 'q4k';
    case GGMLType.Q8_0:
      return ep === 'wasm' ? 'q8' : 'f32'; // onnxruntime-web's webgpu MatMulNBits: "Only 2b and 4b quantization"
    default:
      return 'f32';
  }
}

/** One [N × K] matrix as MatMulNBits reads it. */
export interface NBitsMatrix {
  bits: 4 | 8;
  n: number;
  k: number;
  /** B: [N, K/32, 32·bits/8] codes. */
  codes: Uint8Array;
  /** [N · K/32] per-block scales. */
  scales: Float32Array;
  /** Packed per-block zero points ([N · ceil(K/32 · bits/8)]), or null for the default 2^(bits−1). */
  zeroPoints: Uint8Array | null;
  /**
   * Q4_K: what each block subtracts besides (code − 8) · scale, transposed to [K/32, N]: minsT[b·N + n] =
   * dmin·m − 8·d·sc of row n's block b (the graph subtracts Σ_block x · minsT).
   */
  minsT: Float32Array | null;
}

/** One matrix in its ORT form: MatMulNBits blocks, or the dequantized rows [N × K]. */
export type OrtMatrix =
  | { form: 'f32'; n: number; k: number; values: Float32Array }
  | ({ form: Exclude<OrtWeightForm, 'f32'> } & NBitsMatrix);

/** Bytes the graph reads for this matrix (its initializers). */
export function ortMatrixBytes(m: OrtMatrix): number {
  if (m.form === 'f32') return m.values.byteLength;
  return m.codes.byteLength + m.scales.byteLength + (m.zeroPoints?.byteLength ?? 0) + (m.minsT?.byteLength ?? 0);
}

/**
 * `rows` rows of length `k` of a GGUF matrix (`bytes`, row-major, whole rows) in `form`. Throws RangeError when the
 * form does not fit the type or the row length is not a whole number of blocks.
 */
export function toOrtMatrix(form: OrtWeightForm, type: GGMLType, bytes: Uint8Array, rows: number, k: number): OrtMatrix {
  const rowBytes = rowByteSize(type, k);
  if (bytes.length < rows * rowBytes)
    throw new RangeError(`toOrtMatrix: ${rows} rows of ${typeName(type)}[${k}] need ${rows * rowBytes} bytes`);
  if (form === 'f32') return { form, n: rows, k, values: dequantize(type, bytes, rows * k) };
  const want = form === 'q4' ? GGMLType.Q4_0 : form === 'q4k' ? GGMLType.Q4_K : GGMLType.Q8_0;
  if (type !== want) throw new RangeError(`toOrtMatrix: form ${form} reads ${typeName(want)}, not ${typeName(type)}`);
  if (k % NBITS_BLOCK !== 0) throw new RangeError(`toOrtMatrix: K = ${k} is not a multiple of ${NBITS_BLOCK}`);
  const blocks = k / NBITS_BLOCK;
  const bits = form === 'q8' ? 8 : 4;
  const blob = (NBITS_BLOCK * bits) / 8;
  const codes = new Uint8Array(rows * blocks * blob);
  const scales = new Float32Array(rows * blocks);
  const tab = f16ToF32Table();
  const half = (p: number): number => tab[bytes[p]! | (bytes[p + 1]! << 8)]!;
  if (form === 'q4') {
    // Q4_0 block: [0] f16 d, [2..18) byte j = element j (low nibble) and j + 16 (high).
    for (let r = 0; r < rows; r++) {
      for (let b = 0; b < blocks; b++) {
        const p = r * rowBytes + b * 18;
        const o = (r * blocks + b) * blob;
        scales[r * blocks + b] = half(p);
        const q = (i: number): number => (i < 16 ? bytes[p + 2 + i]! & 15 : bytes[p + 2 + i - 16]! >> 4);
        for (let j = 0; j < 16; j++) codes[o + j] = q(2 * j) | (q(2 * j + 1) << 4);
      }
    }
    return { form, bits, n: rows, k, codes, scales, zeroPoints: null, minsT: null };
  }
  if (form === 'q8') {
    // Q8_0 block: [0] f16 d, [2..34) int8 q; code q + 128 against the default zero point 128.
    for (let r = 0; r < rows; r++) {
      for (let b = 0; b < blocks; b++) {
        const p = r * rowBytes + b * 34;
        const o = (r * blocks + b) * blob;
        scales[r * blocks + b] = half(p);
        for (let j = 0; j < 32; j++) codes[o + j] = bytes[p + 2 + j]! ^ 0x80;
      }
    }
    return { form, bits, n: rows, k, codes, scales, zeroPoints: null, minsT: null };
  }
  // Q4_K super-block (256): [0] f16 d, [2] f16 dmin, [4..16) eight 6-bit (sc, m), [16..144) qs; sub-block s's
  // element l is nibble (s & 1) of qs[32·(s >> 1) + l].
  if (k % QK_K !== 0) throw new RangeError(`toOrtMatrix: Q4_K rows of ${k} are not whole super-blocks of ${QK_K}`);
  const minsT = new Float32Array(blocks * rows);
  for (let r = 0; r < rows; r++) {
    for (let sb = 0; sb < k / QK_K; sb++) {
      const p = r * rowBytes + sb * 144;
      const d = half(p);
      const dmin = half(p + 2);
      for (let s = 0; s < 8; s++) {
        const [sc, m] = scaleMinK4(bytes, p + 4, s);
        const b = sb * 8 + s;
        const scale = Math.fround(d * sc);
        scales[r * blocks + b] = scale;
        minsT[b * rows + r] = Math.fround(Math.fround(dmin * m) - 8 * scale);
        const qs = p + 16 + 32 * (s >> 1);
        const shift = (s & 1) * 4;
        const o = (r * blocks + b) * blob;
        for (let j = 0; j < 16; j++) {
          codes[o + j] = ((bytes[qs + 2 * j]! >> shift) & 15) | (((bytes[qs + 2 * j + 1]! >> shift) & 15) << 4);
        }
      }
    }
  }
  return { form, bits, n: rows, k, codes, scales, zeroPoints: null, minsT };
}

/** ggml's get_scale_min_k4: the 6-bit (scale, min) pair j of a K-quant's 12-byte packing at `p`. */
function scaleMinK4(q: Uint8Array, p: number, j: number): [number, number] {
  if (j < 4) return [q[p + j]! & 63, q[p + j + 4]! & 63];
  return [(q[p + j + 4]! & 15) | ((q[p + j - 4]! >> 6) << 4), (q[p + j + 4]! >> 4) | ((q[p + j]! >> 6) << 4)];
}

/** The weights an OrtMatrix stands for, [N × K] in float64 (tests compare them with the dequantized GGUF rows). */
export function ortMatrixValues(m: OrtMatrix): Float64Array {
  const out = new Float64Array(m.n * m.k);
  if (m.form === 'f32') {
    out.set(m.values);
    return out;
  }
  const blocks = m.k / NBITS_BLOCK;
  const blob = (NBITS_BLOCK * m.bits) / 8;
  for (let r = 0; r < m.n; r++) {
    for (let b = 0; b < blocks; b++) {
      const s = m.scales[r * blocks + b]!;
      const zp = m.zeroPoints ? (m.zeroPoints[r * Math.ceil(blocks / 2) + (b >> 1)]! >> ((b & 1) * 4)) & 15 : 2 ** (m.bits - 1);
      const min = m.minsT ? m.minsT[b * m.n + r]! : 0;
      for (let i = 0; i < NBITS_BLOCK; i++) {
        const byte = m.codes[(r * blocks + b) * blob + (m.bits === 8 ? i : i >> 1)]!;
        const code = m.bits === 8 ? byte : (byte >> ((i & 1) * 4)) & 15;
        out[r * m.k + b * NBITS_BLOCK + i] = (code - zp) * s - min;
      }
    }
  }
  return out;
}
