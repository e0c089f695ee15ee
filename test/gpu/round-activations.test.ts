/**
 * wgsl/round_activations.wgsl (through shaders/round-activations.ts) against ggml's activation rounding as the
 * reference writes it (shaders/reference/ggml-activations.ts: roundActivations(vecDotType(t), x)), bit for bit, on a
 * real WebGPU device: SwiftShader through the `webgpu` npm package, as test/gpu/kernels.test.ts. No adapter is a
 * failure, not a skip.
 *
 * Values are compared as Uint32Array bits. Where the reference's value is NaN the GPU's must be NaN with the bits the
 * kernel documents (JS numbers do not carry NaN payloads, so the reference cannot say more); F16/BF16/F32 NaN bits are
 * checked exactly against ggml's formulas on the input bits. The Q8 packed outputs (int8 quants, per-block scales)
 * are checked against a JS transcription of ggml's C (x86 quantize_row_q8_0 AVX2 path, quantize_row_q8_K_ref), tied
 * to the reference by q = value / d, and against value = f32(d · q).
 *
 * One documented divergence (round_activations.wgsl, header): a Q8 block whose 127 / amax overflows f32 (amax ≲ 3.7e-37)
 * gets ggml's result (zeros) where the reference computes NaN; expectations there follow ggml and say so.
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { GGMLType } from '../../gguf/quant-types.ts';
import { f16ToF32, f16ToF32Table, f32ToBf16, f32ToF16 } from '../../gguf/half.ts';
import { roundActivations, vecDotType } from '../../shaders/reference/ggml-activations.ts';
import {
  ROUND_BLOCK,
  ROUND_PARAMS_FIELDS,
  roundActivationsGpu,
  roundModeOf,
  writeRoundParams,
  type RoundMode,
} from '../../shaders/round-activations.ts';
import { ExpertRuntimeError } from '../../shaders/errors.ts';
import { mulberry32, mulberry32Uint } from '../../shaders/random.ts';
import { nodeExpertDevice } from '../../harness/node-gpu.ts';

const WGSL_TEXT = readFileSync(new URL('../../shaders/wgsl/round_activations.wgsl', import.meta.url), 'utf8');

// ---------------------------------------------------------------------------------------------
// Device.

let device: GPUDevice;
let openError: unknown = null;

async function openGpu(): Promise<void> {
  device = await nodeExpertDevice('round-activations.test device');
}

// ---------------------------------------------------------------------------------------------
// f32 bits.

const MODES: readonly RoundMode[] = ['f32', 'f16', 'bf16', 'q8_0', 'q8_k'];
/** A weight type per mode: the reference is roundActivations(vecDotType(weight), x). */
const WEIGHT: Record<RoundMode, GGMLType> = {
  f32: GGMLType.F32,
  f16: GGMLType.F16,
  bf16: GGMLType.BF16,
  q8_0: GGMLType.Q4_0,
  q8_k: GGMLType.Q4_K,
};
const isQ8 = (m: RoundMode): boolean => m === 'q8_0' || m === 'q8_k';

const f32 = Math.fround;
const cvtF = new Float32Array(1);
const cvtU = new Uint32Array(cvtF.buffer);
function bitsOf(v: number): number {
  cvtF[0] = v;
  return cvtU[0]!;
}
function fromBits(u: number): number {
  cvtU[0] = u >>> 0;
  return cvtF[0]!;
}
const u32View = (a: Float32Array): Uint32Array => new Uint32Array(a.buffer, a.byteOffset, a.length);
const isNaNBits = (u: number): boolean => (u & 0x7fffffff) > 0x7f800000;
const hex = (u: number): string => `0x${(u >>> 0).toString(16).padStart(8, '0')}`;
/** The next f32 away from zero (k > 0) or toward zero (k < 0) in magnitude, same sign; finite positive inputs. */
const stepUlp = (v: number, k: number): number => fromBits(bitsOf(v) + k);

/** Round half to even (ggml's nearest_int, _mm256_round_ps(…, _MM_ROUND_NEAREST)); keeps the sign of zero. */
function roundEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v - Math.trunc(v)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

const QNAN = 0x7fc00000;

// ---------------------------------------------------------------------------------------------
// ggml's C, transcribed: the int8 quants and scales the reference does not expose.

interface GgmlQuants {
  q: Int8Array;
  /** f32 bits of the scale per block. */
  d: Uint32Array;
  /** Blocks whose scale is non-finite or that hold inf/NaN inputs: the kernel documents these as unspecified. */
  unspecified: Uint8Array;
  /** Blocks where 127 / amax overflows f32 (ggml zeros, reference NaN). */
  tiny: Uint8Array;
}

/** x86 quantize_row_q8_0 (AVX2): d = f16(amax / 127), id = 127 / amax, q = cvtps_epi32(round(x · id)) saturated. */
function ggmlQ8_0(x: Float32Array): GgmlQuants {
  const nb = x.length / 32;
  const out: GgmlQuants = { q: new Int8Array(x.length), d: new Uint32Array(nb), unspecified: new Uint8Array(nb), tiny: new Uint8Array(nb) };
  for (let b = 0; b < nb; b++) {
    let amax = 0;
    for (let i = b * 32; i < b * 32 + 32; i++) amax = Math.max(amax, Math.abs(x[i]!));
    if (!Number.isFinite(amax)) {
      out.unspecified[b] = 1;
      continue;
    }
    const d = f16ToF32(f32ToF16(f32(amax / 127)));
    const id = amax !== 0 ? f32(127 / amax) : 0;
    if (id === Infinity) out.tiny[b] = 1;
    out.d[b] = bitsOf(d);
    for (let i = b * 32; i < b * 32 + 32; i++) {
      const v = roundEven(f32(x[i]! * id));
      // cvtps_epi32 of inf/NaN is 0x80000000; packs_epi32/packs_epi16 saturate to -128.
      out.q[i] = Number.isFinite(v) ? Math.max(-128, Math.min(127, v)) : -128;
    }
  }
  return out;
}

/** quantize_row_q8_K_ref: the first x of largest |x| (signed), iscale = -127 / max, q = MIN(127, nearest_int(iscale · x)). */
function ggmlQ8_K(x: Float32Array): GgmlQuants {
  const nb = x.length / 256;
  const out: GgmlQuants = { q: new Int8Array(x.length), d: new Uint32Array(nb), unspecified: new Uint8Array(nb), tiny: new Uint8Array(nb) };
  for (let b = 0; b < nb; b++) {
    let amax = 0;
    let max = 0;
    for (let i = b * 256; i < b * 256 + 256; i++) {
      const ax = Math.abs(x[i]!);
      if (ax > amax) {
        amax = ax;
        max = x[i]!;
      }
    }
    if (amax === 0) continue; // d = 0, qs = 0
    if (!Number.isFinite(amax)) {
      out.unspecified[b] = 1;
      continue;
    }
    const iscale = f32(-127 / max);
    if (!Number.isFinite(iscale)) out.tiny[b] = 1;
    out.d[b] = bitsOf(f32(1 / iscale));
    for (let i = b * 256; i < b * 256 + 256; i++) {
      const v = f32(iscale * x[i]!);
      // nearest_int: (bits(v + 12582912) & 0x7fffff) - 0x400000; ±inf gives -4194304, a quiet NaN 0, then MIN(127, ·)
      // and the store to int8_t keeps the low byte.
      const n = Number.isNaN(v) ? 0 : Number.isFinite(v) ? roundEven(v) : -4194304;
      out.q[i] = (Math.min(127, n) << 24) >> 24;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Expected values.

/** Bits the kernel must write: the reference's, with exact NaN bits and ggml's zeros in overflowing Q8 blocks. */
function expectedBits(mode: RoundMode, x: Float32Array): { want: Uint32Array; refNaNInTiny: number } {
  const ref = roundActivations(vecDotType(WEIGHT[mode]), x);
  const want = new Uint32Array(ref.buffer.slice(0));
  const xb = u32View(x);
  let refNaNInTiny = 0;
  for (let i = 0; i < x.length; i++) {
    const u = xb[i]!;
    if (mode === 'f32') {
      want[i] = u; // copy, NaN payloads included
    } else if (mode === 'f16' && isNaNBits(u)) {
      want[i] = (((u >>> 16) & 0x8000) << 16) | QNAN; // f16 sign | 0x7e00, widened
    } else if (mode === 'bf16' && isNaNBits(u)) {
      want[i] = (((u >>> 16) | 0x40) << 16) >>> 0;
    } else if (isNaNBits(want[i]!)) {
      want[i] = QNAN;
    }
  }
  if (mode === 'f16' || mode === 'bf16') {
    // Non-NaN inputs: the reference's converters again, on the integer side (a second path to the same bits).
    const table = f16ToF32Table();
    const tbits = new Uint32Array(table.buffer);
    for (let i = 0; i < x.length; i++) {
      if (isNaNBits(xb[i]!)) continue;
      const viaBits: number = mode === 'f16' ? tbits[f32ToF16(x[i]!)]! : (f32ToBf16(x[i]!) << 16) >>> 0;
      assert.equal(viaBits, want[i], `reference self-check at ${i}`);
    }
  }
  if (isQ8(mode)) {
    const g = mode === 'q8_0' ? ggmlQ8_0(x) : ggmlQ8_K(x);
    const bl = ROUND_BLOCK[mode];
    for (let b = 0; b < g.tiny.length; b++) {
      if (!g.tiny[b]) continue;
      const dSign = g.d[b]! & 0x80000000; // Q8_0: +0; Q8_K: ∓0 = 1 / (-127 / max)
      for (let i = b * bl; i < (b + 1) * bl; i++) {
        if (isNaNBits(want[i]!)) refNaNInTiny++;
        // ggml: Q8_0 q = -128 with d = +0 → -0; Q8_K q = 0 with d = ∓0 → d's sign.
        want[i] = mode === 'q8_0' ? 0x80000000 : dSign >>> 0;
      }
    }
  }
  return { want, refNaNInTiny };
}

// ---------------------------------------------------------------------------------------------
// The check every case runs.

interface CheckStats {
  elements: number;
  tinyBlocks: number;
  refNaNInTiny: number;
}

function firstMismatches(got: Uint32Array, want: Uint32Array, x: Float32Array, what: string): string[] {
  const xb = u32View(x);
  const lines: string[] = [];
  let count = 0;
  for (let i = 0; i < want.length; i++) {
    if (got[i] === want[i]) continue;
    count++;
    if (lines.length < 6)
      lines.push(
        `  [${i}] x=${hex(xb[i]!)} (${x[i]}) got ${hex(got[i]!)} (${fromBits(got[i]!)}) want ${hex(want[i]!)} (${fromBits(want[i]!)})`,
      );
  }
  if (count > 0) lines.unshift(`${what}: ${count} of ${want.length} differ`);
  return lines;
}

/** Runs `mode` on x (nRows × rowLen) through both entry points and checks everything bit for bit. */
async function check(mode: RoundMode, x: Float32Array, nRows: number, rowLen: number): Promise<CheckStats> {
  const { want, refNaNInTiny } = expectedBits(mode, x);
  const plain = await roundActivationsGpu(device, mode, x, nRows, rowLen, { packed: false });
  const problems = firstMismatches(u32View(plain.values), want, x, `${mode} values (main)`);
  let tinyBlocks = 0;
  if (isQ8(mode)) {
    const packed = await roundActivationsGpu(device, mode, x, nRows, rowLen);
    assert.ok(packed.qs && packed.d, 'Q8 modes return qs and d');
    problems.push(...firstMismatches(u32View(packed.values), want, x, `${mode} values (main_packed)`));
    const g = mode === 'q8_0' ? ggmlQ8_0(x) : ggmlQ8_K(x);
    const bl = ROUND_BLOCK[mode];
    const ref = roundActivations(vecDotType(WEIGHT[mode]), x);
    const gotD = u32View(packed.d);
    const gotQ = new Int8Array(packed.qs.buffer, packed.qs.byteOffset, x.length); // little-endian: element 4i in the low byte
    const qBad: string[] = [];
    for (let b = 0; b < g.d.length; b++) {
      if (g.unspecified[b]) continue;
      if (g.tiny[b]) tinyBlocks++;
      if (gotD[b] !== g.d[b]) qBad.push(`block ${b}: d got ${hex(gotD[b]!)} want ${hex(g.d[b]!)}`);
      const d = fromBits(g.d[b]!);
      for (let i = b * bl; i < (b + 1) * bl; i++) {
        const q = gotQ[i]!;
        if (q !== g.q[i]) qBad.push(`[${i}] q got ${q} want ${g.q[i]} (x=${x[i]})`);
        // The reference's own ints: q = rounded / d, where d says anything (finite, nonzero) and x is not NaN.
        if (Number.isFinite(d) && d !== 0 && !Number.isNaN(x[i]!)) {
          const r = ref[i]! / d;
          if (Math.abs(r - Math.round(r)) > 2 ** -16 || Math.round(r) !== g.q[i])
            qBad.push(`[${i}] reference value/d = ${r}, ggml q ${g.q[i]}`);
        }
        // And the GPU's value is its own d · q (±0 compare equal; the sign of zero is checked through the values).
        const v = packed.values[i]!;
        const dg = packed.d[b]!;
        if (Number.isFinite(dg) && !Number.isNaN(x[i]!)) {
          if (f32(dg * q) !== v) qBad.push(`[${i}] d·q = ${f32(dg * q)} but value ${v}`);
        } else if (dg === Infinity && !(q === 0 ? Number.isNaN(v) : v === Math.sign(q) * Infinity)) {
          qBad.push(`[${i}] d = inf, q = ${q}, value ${v}`);
        }
        if (qBad.length >= 6) break;
      }
      if (qBad.length >= 6) break;
    }
    if (mode === 'q8_0') {
      // block_q8_1's s (Q4_1 and Q5_1 weights): f16(amax / 127 · Σ q) in f32 steps; 0 for an all-zero block and where
      // 127 / amax overflows (the CPU's 32 saturated int32 quants add up to 0).
      assert.ok(packed.s, 'q8_0 returns s');
      const gotS = u32View(packed.s);
      for (let b = 0; b < g.d.length && qBad.length < 6; b++) {
        if (g.unspecified[b]) continue;
        let amax = 0;
        let sum = 0;
        for (let i = b * 32; i < b * 32 + 32; i++) {
          amax = Math.max(amax, Math.abs(x[i]!));
          sum += g.q[i]!;
        }
        const want = g.tiny[b] ? 0 : bitsOf(f16ToF32(f32ToF16(f32(f32(amax / 127) * sum))));
        if (gotS[b] !== want) qBad.push(`block ${b}: s got ${hex(gotS[b]!)} want ${hex(want)} (amax ${amax}, Σq ${sum})`);
      }
    }
    if (qBad.length > 0) problems.push(`${mode} packed quants/scales:`, ...qBad.map((s) => `  ${s}`));
  }
  assert.ok(problems.length === 0, problems.join('\n'));
  return { elements: x.length, tinyBlocks, refNaNInTiny };
}

// ---------------------------------------------------------------------------------------------
// Data.

function gaussian(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

/** 64 rows × 1024 of eight kinds of row (see the cases), seeded. */
function randomRows(seed: number): Float32Array {
  const nRows = 64;
  const rowLen = 1024;
  const rand = mulberry32(seed);
  const bitsRand = mulberry32Uint(seed ^ 0x9e3779b9);
  const x = new Float32Array(nRows * rowLen);
  const xb = u32View(x);
  const sign = (): number => (rand() < 0.5 ? -1 : 1);
  for (let r = 0; r < nRows; r++) {
    const scale = 10 ** Math.round(rand() * 60 - 30); // 1e-30 … 1e30
    for (let c = 0; c < rowLen; c++) {
      const i = r * rowLen + c;
      switch (r % 8) {
        case 0: // one magnitude per row, 1e-30 … 1e30
          x[i] = gaussian(rand) * scale;
          break;
        case 1: // every element its own magnitude, 1e-30 … 1e30, mixed signs
          x[i] = sign() * 10 ** (rand() * 60 - 30);
          break;
        case 2: {
          // any finite f32 bit pattern (subnormals, huge values, ±0)
          let u = bitsRand();
          while (((u >>> 23) & 0xff) === 0xff) u = bitsRand();
          xb[i] = u;
          break;
        }
        case 3: // subnormals only (127/amax overflows), or with tiny normals (Q8 scales underflow, Q8_K's d subnormal)
          xb[i] = r % 16 === 3 || rand() < 0.7 ? (bitsRand() & 0x807fffff) >>> 0 : bitsOf(sign() * 10 ** (-38 + rand() * 3));
          break;
        case 4: // typical activations with exact zeros of both signs
          x[i] = rand() < 0.1 ? sign() * 0 : gaussian(rand);
          break;
        case 5: // around the f16 range ends: 65504, 65520, 2^-14, 2^-24
          x[i] = sign() * [65504, 65520, 2 ** -14, 2 ** -24, 2 ** -25][Math.floor(rand() * 5)]! * (1 + (rand() - 0.5) * 2 ** -9);
          break;
        case 6: // large: Q8_0's d overflows f16 (amax ≥ 65520 · 127)
          x[i] = gaussian(rand) * 10 ** (5 + rand() * 6);
          break;
        default: // small integers and halves
          x[i] = (Math.floor(rand() * 512) - 256) / 2;
          break;
      }
    }
  }
  return x;
}

/**
 * Q8 blocks with exact ties after scaling: amax = ±127 · 2^s, so id (or |iscale|) = 2^-s exactly and every other
 * element is (k + 1/2) · 2^s: x · id = k + 1/2 exactly, both parities, both signs.
 */
function tieBlocks(mode: 'q8_0' | 'q8_k', nBlocks: number, seed: number): Float32Array {
  const bl = ROUND_BLOCK[mode];
  const rand = mulberry32(seed);
  const x = new Float32Array(nBlocks * bl);
  for (let b = 0; b < nBlocks; b++) {
    const s = 2 ** (Math.floor(rand() * 41) - 20);
    const at = b * bl + Math.floor(rand() * bl);
    for (let i = b * bl; i < (b + 1) * bl; i++) x[i] = (Math.floor(rand() * 254) - 127 + 0.5) * s; // -126.5 … 126.5
    x[at] = (b % 2 === 0 ? 127 : -127) * s;
  }
  return x;
}

/**
 * Q8 blocks built so that f32(x · id) is exactly k + 1/2 while x · id is not: the f32 product must be rounded before
 * the integer rounding (ggml's _mm256_mul_ps then _mm256_round_ps). A fused or wider product rounds the other way
 * whenever the exact product lies on the far side of the tie from the even neighbour.
 */
function doubleRoundingBlocks(mode: 'q8_0' | 'q8_k', nBlocks: number, seed: number): { x: Float32Array; hits: number } {
  const bl = ROUND_BLOCK[mode];
  const rand = mulberry32(seed);
  const x = new Float32Array(nBlocks * bl);
  let hits = 0;
  for (let b = 0; b < nBlocks; b++) {
    const amax = f32((1 + rand() * 126) * 2 ** (Math.floor(rand() * 21) - 10));
    const maxSign = rand() < 0.5 ? -1 : 1;
    const scale = mode === 'q8_0' ? f32(127 / amax) : f32(-127 / (maxSign * amax));
    let i = b * bl;
    x[i++] = maxSign * amax;
    for (let tries = 0; i < (b + 1) * bl && tries < 40 * bl; tries++) {
      const t = (rand() < 0.5 ? -1 : 1) * (Math.floor(rand() * 126) + 0.5);
      const x0 = f32(t / scale);
      for (let dx = -3; dx <= 3 && i < (b + 1) * bl; dx++) {
        const cand = fromBits(bitsOf(x0) + dx);
        const p = cand * scale; // exact in double (24 × 24 bits)
        if (Math.abs(cand) <= amax && f32(p) === t && p !== t) {
          x[i++] = cand;
          hits++;
        }
      }
    }
    for (; i < (b + 1) * bl; i++) x[i] = (rand() * 2 - 1) * amax;
  }
  return { x, hits };
}

/**
 * amax values whose 127 / amax the reciprocal-then-multiply most GPUs compile a division to (f32(127 · f32(1/amax)))
 * gets wrong by an ulp, each in a block with elements whose quant flips with that ulp. The same for Q8_0's
 * f16(amax / 127) near f16 rounding boundaries (f32(amax · f32(1/127))).
 */
function divisionBlocks(mode: 'q8_0' | 'q8_k', nBlocks: number, seed: number): { x: Float32Array; idTraps: number; dTraps: number } {
  const bl = ROUND_BLOCK[mode];
  const rand = mulberry32(seed);
  const x = new Float32Array(nBlocks * bl);
  let idTraps = 0;
  let dTraps = 0;
  const q = (v: number, s: number): number => roundEven(f32(v * s));
  for (let b = 0; b < nBlocks; b++) {
    let amax = 0;
    let id = 0;
    let alt = 0;
    if (mode === 'q8_0' && b % 2 === 1) {
      // f16(amax / 127) flips with an ulp of amax / 127: amax / 127 at or next to an f16 midpoint.
      for (;;) {
        const h = 0x0400 + Math.floor(rand() * (0x7bff - 0x0400)); // normal f16 below 65504
        const mid = (f16ToF32(h) + f16ToF32(h + 1)) / 2;
        const a0 = f32(mid * 127);
        let found = 0;
        for (let k = -6; k <= 6 && !found; k++) {
          const a = stepUlp(a0, k);
          const good = f32ToF16(f32(a / 127));
          const rcp = f32ToF16(f32(a * f32(1 / 127)));
          if (good !== rcp) found = a;
        }
        if (found) {
          amax = found;
          dTraps++;
          break;
        }
      }
      id = f32(127 / amax);
      alt = f32(127 * f32(1 / amax));
    } else {
      for (;;) {
        amax = f32((1 + rand()) * 2 ** (Math.floor(rand() * 200) - 100));
        id = f32(127 / amax);
        alt = f32(127 * f32(1 / amax));
        if (id !== alt) break;
      }
    }
    const maxSign = mode === 'q8_k' && rand() < 0.5 ? -1 : 1;
    const s = mode === 'q8_0' ? id : f32(-127 / (maxSign * amax));
    const sAlt = mode === 'q8_0' ? alt : -maxSign * alt;
    let i = b * bl;
    x[i++] = maxSign * amax;
    for (let tries = 0; i < (b + 1) * bl && tries < 20 * bl; tries++) {
      const t = (rand() < 0.5 ? -1 : 1) * (Math.floor(rand() * 126) + 0.5);
      const x0 = f32(t / s);
      for (let dx = -2; dx <= 2 && i < (b + 1) * bl; dx++) {
        const cand = fromBits(bitsOf(x0) + dx);
        if (Math.abs(cand) <= amax && s !== sAlt && q(cand, s) !== q(cand, sAlt)) {
          x[i++] = cand;
          idTraps++;
        }
      }
    }
    for (; i < (b + 1) * bl; i++) x[i] = (rand() * 2 - 1) * amax;
  }
  return { x, idTraps, dTraps };
}

// ---------------------------------------------------------------------------------------------

describe('round_activations.wgsl: ggml activation rounding, bit for bit', { concurrency: 1 }, () => {
  before(async () => {
    try {
      await openGpu();
    } catch (e) {
      openError = e;
    }
  });
  beforeEach(() => {
    if (openError) throw openError;
  });
  after(() => {
    device?.destroy();
  });

  test('RoundParams is written in struct order; modes map from vec-dot types; shapes are validated', async () => {
    assert.deepEqual([...ROUND_PARAMS_FIELDS], ['n_rows', 'row_len']);
    const struct = /struct RoundParams \{([^}]*)\}/.exec(WGSL_TEXT)?.[1] ?? '';
    assert.deepEqual(
      [...struct.matchAll(/^\s*(\w+):\s*u32/gm)].map((m) => m[1]),
      [...ROUND_PARAMS_FIELDS],
    );
    assert.deepEqual([...writeRoundParams(3, 96)], [3, 96]);
    for (const [t, m] of [
      [GGMLType.Q4_0, 'q8_0'],
      [GGMLType.Q4_1, 'q8_0'],
      [GGMLType.Q8_0, 'q8_0'],
      [GGMLType.Q4_K, 'q8_k'],
      [GGMLType.Q6_K, 'q8_k'],
      [GGMLType.F16, 'f16'],
      [GGMLType.BF16, 'bf16'],
      [GGMLType.F32, 'f32'],
    ] as const) {
      assert.equal(roundModeOf(vecDotType(t)), m, GGMLType[t]);
    }
    const x = new Float32Array(64);
    await assert.rejects(
      roundActivationsGpu(device, 'q8_k', x, 1, 64),
      (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'BAD_SHAPE',
    );
    await assert.rejects(
      roundActivationsGpu(device, 'q8_0', x, 3, 32),
      (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'BAD_SHAPE',
    );
    const empty = await roundActivationsGpu(device, 'q8_0', new Float32Array(0), 0, 32);
    assert.equal(empty.values.length, 0);
  });

  for (const mode of MODES) {
    test(`${mode}: 64 rows × 1024, magnitudes 1e-30 … 1e30, subnormals, random bits, mixed signs`, async (t) => {
      let tiny = 0;
      let refNaN = 0;
      for (const seed of [11, 12]) {
        const s = await check(mode, randomRows(seed), 64, 1024);
        tiny += s.tinyBlocks;
        refNaN += s.refNaNInTiny;
      }
      if (isQ8(mode)) {
        assert.ok(tiny > 0, 'the data has blocks where 127/amax overflows');
        t.diagnostic(
          `${tiny} blocks with 127/amax overflowing f32: ggml zeros expected; the reference gave NaN for ${refNaN} of their values`,
        );
      }
    });
  }

  for (const mode of ['f32', 'f16', 'bf16'] as const) {
    test(`${mode}: odd element counts (partial quads) and rows of length 1`, async () => {
      const rand = mulberry32(5);
      for (const [nRows, rowLen] of [
        [5, 3],
        [1, 1],
        [7, 1],
        [3, 37],
      ] as const) {
        const x = Float32Array.from({ length: nRows * rowLen }, () => gaussian(rand) * 1e3);
        await check(mode, x, nRows, rowLen);
      }
    });
  }

  test('f16: every f16 rounding midpoint and its f32 neighbours (ties to even, subnormal range, overflow to inf)', async () => {
    const vals: number[] = [];
    for (let h = 0; h < 0x7bff; h++) {
      const mid = f32((f16ToF32(h) + f16ToF32(h + 1)) / 2); // exact in f32
      for (const v of [mid, stepUlp(mid, -1), stepUlp(mid, 1)]) vals.push(v, -v);
    }
    // Overflow: 65504 and the boundary 65520 (ties to inf), f32 max, inf; below the smallest subnormal: 2^-25 ties to 0.
    for (const v of [
      65504,
      65519.996,
      65520,
      stepUlp(65520, -1),
      stepUlp(65520, 1),
      3.4028234663852886e38,
      Infinity,
      2 ** -25,
      stepUlp(2 ** -25, 1),
      2 ** -26,
      0,
    ]) {
      vals.push(v, -v);
    }
    const n = Math.ceil(vals.length / 4) * 4;
    const x = new Float32Array(n);
    x.set(vals);
    await check('f16', x, 1, n);
  });

  test('f16, bf16, f32: a sweep of 2^20 bit patterns over all exponents, NaN payloads of both signs, ±inf, ±0', async () => {
    const n = 1 << 20;
    const x = new Float32Array(n);
    const xb = u32View(x);
    const rnd = mulberry32Uint(77);
    for (let i = 0; i < n; i++) xb[i] = i % 2 === 0 ? Math.imul(i, 4099) >>> 0 : rnd();
    // bf16 ties (low half exactly 0x8000, both parities of bit 16) and neighbours; NaN payloads that a truncation
    // would turn into inf; the largest finite value, which rounds to inf.
    const special = [
      0x7f800001, 0xff800001, 0x7fbfffff, 0x7fc00000, 0xffc00000, 0x7fffffff, 0x7f800000, 0xff800000, 0x7f7fffff, 0xff7fffff, 0x00000000,
      0x80000000, 0x00000001, 0x80008000, 0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0x00008000, 0x00018000,
    ];
    special.forEach((u, k) => {
      xb[k] = u;
    });
    for (const mode of ['f16', 'bf16', 'f32'] as const) await check(mode, x, 1024, 1024);
  });

  for (const mode of ['q8_0', 'q8_k'] as const) {
    test(`${mode}: exact ties after scaling round half to even (x · id = k + 1/2 exactly)`, async (t) => {
      const bl = ROUND_BLOCK[mode];
      const x = tieBlocks(mode, 4096 / (bl / 32), 21);
      // The data really is ties: x · scale is k + 1/2 with the reference's own scale.
      let ties = 0;
      for (let b = 0; b < x.length / bl; b++) {
        let amax = 0;
        let max = 0;
        for (let i = b * bl; i < (b + 1) * bl; i++) {
          if (Math.abs(x[i]!) > amax) {
            amax = Math.abs(x[i]!);
            max = x[i]!;
          }
        }
        const s = mode === 'q8_0' ? f32(127 / amax) : f32(-127 / max);
        for (let i = b * bl; i < (b + 1) * bl; i++) if (Math.abs(f32(x[i]! * s) % 1) === 0.5) ties++;
      }
      assert.ok(ties > x.length * 0.9, `${ties} ties`);
      t.diagnostic(`${ties} exact ties`);
      await check(mode, x, x.length / 1024, 1024);
    });

    test(`${mode}: f32(x · id) is rounded before round-half-even (product ties that the exact product misses)`, async (t) => {
      const bl = ROUND_BLOCK[mode];
      const { x, hits } = doubleRoundingBlocks(mode, 2048 / (bl / 32), 31);
      assert.ok(hits > x.length / 4, `${hits} double-rounding cases`);
      t.diagnostic(`${hits} elements whose f32 product is a tie the exact product is not`);
      await check(mode, x, x.length / 1024, 1024);
    });

    test(`${mode}: divisions are correctly rounded (amax where reciprocal-multiply is an ulp off and it shows)`, async (t) => {
      const bl = ROUND_BLOCK[mode];
      const { x, idTraps, dTraps } = divisionBlocks(mode, 2048 / (bl / 32), 41);
      assert.ok(idTraps > 0, 'found elements exposing a wrong 127/amax');
      t.diagnostic(
        `${idTraps} elements whose quant flips with an ulp of 127/amax; ${dTraps} blocks whose f16 d flips with an ulp of amax/127`,
      );
      await check(mode, x, x.length / 1024, 1024);
    });

    test(`${mode}: all-zero blocks (+0, -0, mixed) next to ordinary ones`, async () => {
      const bl = ROUND_BLOCK[mode];
      const x = new Float32Array(8 * bl);
      const rand = mulberry32(3);
      for (let b = 0; b < 8; b++) {
        for (let i = b * bl; i < (b + 1) * bl; i++) {
          x[i] = [0, -0, rand() < 0.5 ? 0 : -0, gaussian(rand)][b % 4]!;
        }
      }
      await check(mode, x, 1, x.length);
      const { values } = await roundActivationsGpu(device, mode, x, 1, x.length, { packed: false });
      const vb = u32View(values);
      // Q8_0 keeps each zero's sign (x · 0 · d); Q8_K leaves an all-zero block +0 (the CPU skips it).
      assert.equal(vb[bl], mode === 'q8_0' ? 0x80000000 : 0);
    });
  }

  test('q8_k: the scale comes from the signed max — unique negative max, and ±amax ties broken by the first index', async () => {
    const rows: number[][] = [];
    const rand = mulberry32(9);
    const block = (): number[] => Array.from({ length: 256 }, () => gaussian(rand));
    // A unique negative max.
    const a = block();
    a[77] = -10;
    rows.push(a);
    // +m and -m tie: the first wins. Elements 64 and 128 sit in lanes 16 and 32 of the 64-invocation tree, where a
    // reduction that keeps the left operand on ties (without comparing indices) keeps lane 0's partner 32 instead.
    for (const [i, j] of [
      [64, 128],
      [128, 64],
      [0, 255],
      [255, 0],
      [4, 5],
      [5, 4],
      [3, 4],
    ] as const) {
      const b = block();
      b[i] = -9;
      b[j] = 9;
      rows.push(b);
    }
    const x = Float32Array.from(rows.flat());
    await check('q8_k', x, rows.length, 256);
    const { d } = await roundActivationsGpu(device, 'q8_k', x, rows.length, 256);
    assert.ok(d);
    // max = -10 → iscale = 12.7 > 0, d > 0; max = -9 first → d > 0; +9 first → d < 0.
    assert.deepEqual(
      Array.from(d, (v) => Math.sign(v)),
      [1, 1, -1, 1, -1, 1, -1, 1],
    );
  });

  test('q8_0: d overflows f16 (inf), is an f16 subnormal, ties to 0, or underflows', async () => {
    const amaxes = [
      65504 * 127, // d = 65504
      f32(65520 * 127), // d = 65520 → inf (tie to even)
      stepUlp(f32(65520 * 127), -1),
      1e7,
      1e30,
      3.4e38,
      1e-3, // d subnormal in f16
      f32(127 * 2 ** -24),
      f32(127 * 2 ** -25), // d = 2^-25: ties to 0
      stepUlp(f32(127 * 2 ** -25), 1),
      1e-6, // d underflows to 0
      1e-20,
    ];
    const rand = mulberry32(13);
    const x = new Float32Array(amaxes.length * 32);
    amaxes.forEach((amax, b) => {
      for (let i = 0; i < 32; i++) x[b * 32 + i] = (rand() * 2 - 1) * amax;
      x[b * 32 + 3] = rand() < 0.5 ? amax : -amax;
      x[b * 32 + 5] = 0; // q = 0: inf · 0 = NaN when d is inf
      x[b * 32 + 6] = -0;
    });
    await check('q8_0', x, 1, x.length);
  });

  test('q8_k: d is subnormal; 127/amax overflows right at the threshold; d over random amax of every exponent', async (t) => {
    // The smallest amax whose 127/amax is finite, found by bisection on the bits.
    let lo = 1;
    let hi = 0x10000000;
    while (hi - lo > 1) {
      const mid = (lo + hi) >>> 1;
      if (Number.isFinite(f32(127 / fromBits(mid)))) hi = mid;
      else lo = mid;
    }
    const threshold = fromBits(hi);
    t.diagnostic(`127/amax is finite from amax = ${threshold} (${hex(hi)})`);
    const rand = mulberry32(17);
    const rnd = mulberry32Uint(18);
    const maxes = [threshold, fromBits(hi - 1), fromBits(hi + 1), 1e-37, 5e-37, 1e-36, 1.4e-36, 1.5e-36, 2 ** -126, 1e-45];
    while (maxes.length < 4096) {
      const u = rnd() & 0x7fffffff;
      if (u < 0x7f800000 && u !== 0) maxes.push(fromBits(u));
    }
    const x = new Float32Array(maxes.length * 256);
    maxes.forEach((m, b) => {
      const sgn = rand() < 0.5 ? -1 : 1;
      for (let i = 0; i < 256; i++) x[b * 256 + i] = i % 16 === 0 ? (rand() * 2 - 1) * m : 0;
      x[b * 256 + Math.floor(rand() * 256)] = sgn * m;
    });
    const s = await check('q8_k', x, maxes.length / 4, 1024);
    assert.ok(s.tinyBlocks > 0);
  });

  test('q8_0, q8_k: blocks holding inf or NaN give NaN values (Q8_K skips NaN in the max, as the CPU)', async () => {
    for (const mode of ['q8_0', 'q8_k'] as const) {
      const bl = ROUND_BLOCK[mode];
      const rand = mulberry32(19);
      const x = Float32Array.from({ length: 4 * bl }, () => gaussian(rand));
      x[3] = Infinity;
      x[bl + 7] = Number.NaN;
      x[2 * bl + 1] = -Infinity;
      await check(mode, x, 1, x.length); // values vs reference; packed outputs unspecified for non-finite blocks
      const { values } = await roundActivationsGpu(device, mode, x, 1, x.length, { packed: false });
      assert.ok(values.subarray(0, bl).every(Number.isNaN), `${mode}: a block with inf is all NaN`);
      if (mode === 'q8_k') {
        assert.ok(
          Number.isNaN(values[bl + 7]!) && values.subarray(bl, 2 * bl).filter(Number.isNaN).length === 1,
          'q8_k: only the NaN element is NaN',
        );
      }
    }
  });

  test('q8_0, q8_k: the values-only entry point and the packed one agree, qs packs as pack4xI8, q8_k has its bsums', async () => {
    const x = randomRows(99).subarray(0, 8 * 1024);
    for (const mode of ['q8_0', 'q8_k'] as const) {
      const a = await roundActivationsGpu(device, mode, x, 8, 1024, { packed: false });
      const b = await roundActivationsGpu(device, mode, x, 8, 1024);
      assert.deepEqual(u32View(a.values), u32View(b.values));
      assert.ok(b.qs && b.d);
      assert.equal(b.qs.length, x.length / 4);
      assert.equal(b.d.length, x.length / ROUND_BLOCK[mode]);
      const g = mode === 'q8_0' ? ggmlQ8_0(x) : ggmlQ8_K(x);
      for (let i = 0; i < b.qs.length; i++) {
        const want =
          ((g.q[4 * i]! & 0xff) | ((g.q[4 * i + 1]! & 0xff) << 8) | ((g.q[4 * i + 2]! & 0xff) << 16) | ((g.q[4 * i + 3]! & 0xff) << 24)) >>>
          0;
        if (b.qs[i] !== want) assert.fail(`${mode} qs[${i}] = ${hex(b.qs[i]!)}, want ${hex(want)}`);
      }
      // block_q8_K's bsums (the K-quant int8 kernels read them): the sum of each 16 consecutive quants.
      if (mode === 'q8_0') {
        assert.equal(b.bsums, undefined);
        continue;
      }
      assert.ok(b.bsums);
      assert.equal(b.bsums.length, x.length / 16);
      for (let j = 0; j < b.bsums.length; j++) {
        let want = 0;
        for (let i = 16 * j; i < 16 * j + 16; i++) want += g.q[i]!;
        if (b.bsums[j] !== want) assert.fail(`bsums[${j}] = ${b.bsums[j]}, want ${want}`);
      }
    }
  });
});
