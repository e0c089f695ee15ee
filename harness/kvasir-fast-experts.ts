/**
 * A Kvasir worker double's arithmetic, fast enough to be given prompt batches (issue 28): a layer's Q4_K SiLU experts
 * (the relay tests' model) unpacked once into typed arrays — each 256-weight block's quants as bytes in the order of
 * the Q8_K activation they meet, its 8 scales and mins, d and dmin decoded — and evaluated with no allocation per
 * pair beyond one Q8_K rounding per row. Bit for bit as harness/ggml-exact.ts's ggml_vec_dot_q4_K_q8_K (and so as the
 * coordinator): the integer lanes are exact in any order, and every float step (d·y.d, the fused multiply-adds per
 * lane, the mins' lanes, hsum8) is the same operation in the same order. ggml-exact's version decodes the scales and
 * nibbles on every dot and allocated per block; here a pair costs ~0.3 ms instead of ~3 ms (the double's prompt
 * items then finish inside the dispatcher's deadline: kvasir-relay.test.ts).
 *
 *   const fast = fastExperts(experts);   // null: another type, variant, biases or scales (use ggmlExpertOut)
 *   const row = fast.rowOf(x);           // once per row
 *   const y = fast.expertOut(expert, row);   // a view, valid until the next call
 */
import { GGMLType } from '../gguf/quant-types.ts';
import { f16ToF32 } from '../gguf/half.ts';
import { type ExactExperts, fma32, ggmlSwiglu, hsum8, quantizeQ8_K } from './ggml-exact.ts';

const QK_K = 256;
const BLOCK_BYTES = 144;
const f32 = Math.fround;

/** One matrix of every expert, unpacked: rows × blocks of 256 quants, 8 scales and 8 mins, d and dmin per block. */
interface UnpackedQ4K {
  q: Uint8Array;
  sc: Uint8Array;
  mn: Uint8Array;
  d: Float64Array;
  dmin: Float64Array;
  /** Blocks per row. */
  nb: number;
  /** Rows per expert. */
  rows: number;
}

/** A row rounded to Q8_K once, for every pair of it. */
export type FastRow = ReturnType<typeof quantizeQ8_K>;

/** get_scale_min_k4 of sub-block j of the 12 scale bytes at o. */
function scaleMin(j: number, w: Uint8Array, o: number, out: Uint8Array, at: number, mins: Uint8Array): void {
  if (j < 4) {
    out[at] = (w[o + j] as number) & 63;
    mins[at] = (w[o + j + 4] as number) & 63;
    return;
  }
  const a = w[o + j + 4] as number;
  out[at] = (a & 0xf) | (((w[o + j - 4] as number) >> 6) << 4);
  mins[at] = (a >> 4) | (((w[o + j] as number) >> 6) << 4);
}

function unpack(bytes: Uint8Array, rowLen: number, rowsPerExpert: number): UnpackedQ4K {
  const nb = rowLen / QK_K;
  const blocks = bytes.length / BLOCK_BYTES;
  const u: UnpackedQ4K = {
    q: new Uint8Array(blocks * QK_K),
    sc: new Uint8Array(blocks * 8),
    mn: new Uint8Array(blocks * 8),
    d: new Float64Array(blocks),
    dmin: new Float64Array(blocks),
    nb,
    rows: rowsPerExpert,
  };
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let k = 0; k < blocks; k++) {
    const o = k * BLOCK_BYTES;
    u.d[k] = f16ToF32(view.getUint16(o, true));
    u.dmin[k] = f16ToF32(view.getUint16(o + 2, true));
    for (let j = 0; j < 8; j++) scaleMin(j, bytes, o + 4, u.sc, 8 * k + j, u.mn);
    // Quant 64j + t is qs[32j + t]'s low nibble, 64j + 32 + t its high one: the Q8_K value it multiplies.
    for (let j = 0; j < 4; j++)
      for (let t = 0; t < 32; t++) {
        const byte = bytes[o + 16 + 32 * j + t] as number;
        u.q[k * QK_K + 64 * j + t] = byte & 0xf;
        u.q[k * QK_K + 64 * j + 32 + t] = byte >> 4;
      }
  }
  return u;
}

const ACC = new Float64Array(8);
const ACC_M = new Float64Array(4);
const LANE = new Int32Array(8);

/** ggml_vec_dot_q4_K_q8_K of row `r` (absolute, across experts) with y, bit for bit as ggml-exact's dotQ4K. */
function dot(m: UnpackedQ4K, r: number, y: FastRow): number {
  ACC.fill(0);
  ACC_M.fill(0);
  const bsums = y.bsums as Int32Array;
  const yq = y.qs;
  for (let b = 0; b < m.nb; b++) {
    const k = r * m.nb + b;
    const yd = y.d[b] as number;
    const d = f32(yd * (m.d[k] as number));
    const dmin = f32(-yd * (m.dmin[k] as number));
    const s8 = 8 * k;
    for (let l = 0; l < 4; l++) {
      const s0 = (bsums[16 * b + 4 * l] as number) + (bsums[16 * b + 4 * l + 1] as number);
      const s1 = (bsums[16 * b + 4 * l + 2] as number) + (bsums[16 * b + 4 * l + 3] as number);
      const prod = (m.mn[s8 + 2 * l] as number) * s0 + (m.mn[s8 + 2 * l + 1] as number) * s1;
      ACC_M[l] = fma32(dmin, prod, ACC_M[l] as number);
    }
    LANE.fill(0);
    const q0 = k * QK_K;
    const y0 = b * QK_K;
    for (let g = 0; g < 8; g++) {
      const s = m.sc[s8 + g] as number;
      const qg = q0 + 32 * g;
      const yg = y0 + 32 * g;
      for (let l = 0; l < 8; l++) {
        const t = 4 * l;
        const sum =
          (m.q[qg + t] as number) * (yq[yg + t] as number) +
          (m.q[qg + t + 1] as number) * (yq[yg + t + 1] as number) +
          (m.q[qg + t + 2] as number) * (yq[yg + t + 2] as number) +
          (m.q[qg + t + 3] as number) * (yq[yg + t + 3] as number);
        LANE[l] = (LANE[l] as number) + s * sum;
      }
    }
    for (let l = 0; l < 8; l++) ACC[l] = fma32(d, LANE[l] as number, ACC[l] as number);
  }
  const mins = f32(f32((ACC_M[0] as number) + (ACC_M[2] as number)) + f32((ACC_M[1] as number) + (ACC_M[3] as number)));
  return f32(hsum8(ACC) + mins);
}

export interface FastExperts {
  rowOf(x: Float32Array): FastRow;
  /** expert(x) of the row, bit for bit as ggmlExpertOut; a view into a buffer reused by the next call. */
  expertOut(expert: number, row: FastRow): Float32Array;
}

/** The fast form of a layer's experts, or null where it does not apply (another type, a variant, biases, scales). */
export function fastExperts(e: ExactExperts): FastExperts | null {
  const { types, nEmbd, ff } = e;
  if (types.gate !== GGMLType.Q4_K || types.up !== GGMLType.Q4_K || types.down !== GGMLType.Q4_K) return null;
  if (e.variant && e.variant.activation !== 'silu') return null;
  if (e.biases || e.scales || nEmbd % QK_K !== 0 || ff % QK_K !== 0) return null;
  const gate = unpack(e.gate, nEmbd, ff);
  const up = unpack(e.up, nEmbd, ff);
  const down = unpack(e.down, ff, nEmbd);
  const h = new Float32Array(ff);
  const out = new Float32Array(nEmbd);
  return {
    rowOf: (x) => quantizeQ8_K(x),
    expertOut(expert, row) {
      for (let r = 0; r < ff; r++) h[r] = ggmlSwiglu(dot(gate, expert * ff + r, row), dot(up, expert * ff + r, row));
      const hd = quantizeQ8_K(h);
      for (let r = 0; r < nEmbd; r++) out[r] = dot(down, expert * nEmbd + r, hd);
      return out;
    },
  };
}
