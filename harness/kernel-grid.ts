/**
 * A small seeded grid of expert-FFN cases run on whatever GPUDevice it is given (headless Chromium here, the same
 * code as in Node), each compared with the CPU reference by NMSE: exact numerics against the exact reference, llama
 * numerics against the reference with ggml's rounding (compareLlama: also the NMSE beyond the ties of h).
 */
import { GGMLType, requireQuantType, typeName } from '../gguf/quant-types.ts';
import { quantize } from '../gguf/quantize.ts';
import { dequantizeExperts, nmse, referenceCall } from '../shaders/reference/expert-call.ts';
import { compareLlama } from '../shaders/reference/llama-ties.ts';
import {
  ExpertRuntime,
  type ExpertSlice,
  type IntegerDot,
  type KernelFeature,
  type Regime,
  type RegimeRequest,
} from '../shaders/runtime.ts';
import { INT8_SNIPPETS, QUANT_SNIPPETS } from '../shaders/expert-ffn.ts';
import type { Numerics } from '../protocol/numerics.ts';
import { mulberry32 as rng } from '../shaders/random.ts';

export interface GridCase {
  type: GGMLType;
  nEmbd: number;
  ff: number;
  nExpert: number;
  nTokens: number;
  nUsed: number;
  /** Kernels to run (default 'auto': the runtime's regime policy). */
  regime?: RegimeRequest;
  /** Optional kernel features (default 'auto'). */
  features?: readonly KernelFeature[] | 'auto';
  /** Caps one weight binding so the slice is split into parts. */
  maxBindingBytes?: number;
  /** Default 'exact'. */
  numerics?: Numerics;
  /** llama numerics: the runtime's integerDot option (default 'auto'). */
  integerDot?: 'auto' | IntegerDot;
  /** Also compare with the other numerics' reference (a negative check: exact results against the rounded one). */
  crossCheck?: boolean;
}

export interface GridResult extends GridCase {
  typeName: string;
  /** The regime that ran (the policy's choice for 'auto'). */
  ran: Regime;
  /** The kernel variant and the number of weight parts that ran. */
  kernelFeatures: KernelFeature[];
  weightParts: number;
  /** llama numerics: how the decode kernels' 8-bit dot products ran (capabilities().integerDot; null in exact numerics). */
  ranIntegerDot: IntegerDot | null;
  /** Against the reference of the case's numerics. */
  nmse: number;
  /** llama numerics: the NMSE beyond the ties of h (compareLlama), and the ties. */
  beyondTies?: number;
  ties?: number;
  /** crossCheck: an exact case's result against the rounded reference (its NMSE beyond ties). */
  vsLlama?: number;
  ms: number;
}

function uniform(n: number, r: () => number, scale: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (r() * 2 - 1) * scale;
  return out;
}

export async function runGridCase(device: GPUDevice, c: GridCase, seed: number): Promise<GridResult> {
  const r = rng(seed);
  const matrix = (rows: number, cols: number): Uint8Array => quantize(c.type, uniform(rows * cols * c.nExpert, r, 1 / Math.sqrt(cols)));
  const gate = matrix(c.ff, c.nEmbd);
  const up = matrix(c.ff, c.nEmbd);
  const down = matrix(c.nEmbd, c.ff);
  const rows = uniform(c.nTokens * c.nEmbd, r, 1);
  const ids = new Int32Array(c.nTokens * c.nUsed).map((_, i) => (i * 7 + Math.floor(i / c.nUsed)) % c.nExpert);
  const probs = uniform(c.nTokens * c.nUsed, r, 0.5).map((x) => Math.abs(x) + 0.1);

  const slice: ExpertSlice = {
    nEmbd: c.nEmbd,
    ff: c.ff,
    nExpert: c.nExpert,
    types: { gate: c.type, up: c.type, down: c.type },
    gate,
    up,
    down,
  };
  const numerics = c.numerics ?? 'exact';
  const rt = await ExpertRuntime.create(device, slice, {
    features: c.features ?? 'auto',
    numerics,
    ...(c.integerDot ? { integerDot: c.integerDot } : {}),
    ...(c.maxBindingBytes ? { maxBindingBytes: c.maxBindingBytes } : {}),
  });
  const { kernelFeatures, weightParts, integerDot: ranIntegerDot } = rt.capabilities();
  const request = c.regime ?? 'auto';
  const ran = request === 'auto' ? rt.planRegime(ids, c.nTokens, c.nUsed).regime : request;
  const t0 = performance.now();
  const got = await rt.compute(rows, ids, probs, c.nTokens, c.nUsed, { regime: request });
  const ms = performance.now() - t0;
  rt.dispose();

  const experts = dequantizeExperts(slice);
  const call = { rows, ids, probs, nTokens: c.nTokens, nUsed: c.nUsed };
  const base = { ...c, typeName: typeName(c.type), ran, kernelFeatures, weightParts, ranIntegerDot, ms };
  if (numerics === 'llama') {
    const r = compareLlama(experts, call, got);
    return { ...base, nmse: r.nmse, beyondTies: r.beyondTies, ties: r.ties };
  }
  const result: GridResult = { ...base, nmse: nmse(got, referenceCall(experts, call)) };
  if (c.crossCheck) result.vsLlama = compareLlama(experts, call, got).beyondTies;
  return result;
}

/** Every weight type the kernels read (QUANT_SNIPPETS), so a new quant snippet is in every grid below. */
const KERNEL_GRID_TYPES: readonly GGMLType[] = [...QUANT_SNIPPETS.keys()];
/** Super-blocks of 256 (the K-quants): shapes of 256. */
const isK = (t: GGMLType): boolean => requireQuantType(t).blockSize === 256;
/** Blocks of 32 (Q8_0, Q4_0, …, MXFP4, IQ4_NL); the float types (blocks of 1) get widths that are not multiples of 32. */
const isBlock32 = (t: GGMLType): boolean => requireQuantType(t).blockSize === 32;

/**
 * Every kernel quant type, decode shapes (a few rows) small enough for SwiftShader, on both variants of the decode
 * kernels ('subgroups' cases are skipped with a reason where the adapter lacks the feature).
 */
export const DECODE_GRID: GridCase[] = KERNEL_GRID_TYPES.flatMap((type): GridCase[] => {
  const k = isK(type);
  const nEmbd = k ? 256 : 64;
  const ff = k ? 256 : 64;
  const variants: KernelFeature[][] = [[], ['subgroups']];
  return variants.flatMap((features): GridCase[] => [
    { type, nEmbd, ff, nExpert: 3, nTokens: 1, nUsed: 2, regime: 'decode', features },
    { type, nEmbd, ff, nExpert: 3, nTokens: 4, nUsed: 2, regime: 'decode', features },
  ]);
});

/** Slices split over several weight bindings (one expert per part), in both regimes. */
export const SPLIT_GRID: GridCase[] = [
  { type: GGMLType.Q4_K, nEmbd: 256, ff: 256, nExpert: 4, nTokens: 3, nUsed: 2, regime: 'decode', maxBindingBytes: 256 * 144 },
  { type: GGMLType.Q4_K, nEmbd: 256, ff: 256, nExpert: 4, nTokens: 16, nUsed: 4, regime: 'batched', maxBindingBytes: 256 * 144 },
  { type: GGMLType.F16, nEmbd: 36, ff: 20, nExpert: 4, nTokens: 16, nUsed: 4, regime: 'batched', maxBindingBytes: 36 * 20 * 2 },
];

/**
 * Every kernel quant type in the batched regime (pairs grouped by expert, batched kernels): 16 tokens × top-4 of 4
 * experts, 16 pairs per expert (one full tile each); forced, and once through the auto policy, which picks batched
 * here too. Float shapes are not multiples of the tiles (partial staging step and column tile).
 */
export const BATCHED_GRID: GridCase[] = KERNEL_GRID_TYPES.flatMap((type): GridCase[] => {
  const k = isK(type);
  const block32 = isBlock32(type);
  const nEmbd = k ? 256 : block32 ? 64 : 36;
  const ff = k ? 256 : block32 ? 96 : 20;
  return [{ type, nEmbd, ff, nExpert: 4, nTokens: 16, nUsed: 4, regime: 'batched' }];
}).concat([{ type: GGMLType.Q4_K, nEmbd: 256, ff: 256, nExpert: 4, nTokens: 32, nUsed: 2, regime: 'auto' }]);

/**
 * llama numerics: every type in the decode regime (every integer-dot path for the 8-bit types: dot4I8Packed, its
 * unpacked fallback, the float kernels on rounded values) and in the batched regime, split slices in both regimes,
 * and the negative check: exact numerics on Q8_0 and Q4_K against the rounded reference (crossCheck).
 */
export const LLAMA_GRID: GridCase[] = [
  ...KERNEL_GRID_TYPES.flatMap((type): GridCase[] => {
    const k = isK(type);
    const block32 = isBlock32(type);
    const [nEmbd, ff] = k ? [256, 256] : block32 ? [64, 96] : [36, 20];
    const paths: ('auto' | IntegerDot)[] = INT8_SNIPPETS.has(type) ? ['packed', 'unpacked', 'float'] : ['auto'];
    return [
      ...paths.map(
        (integerDot): GridCase => ({ type, nEmbd, ff, nExpert: 3, nTokens: 4, nUsed: 2, regime: 'decode', numerics: 'llama', integerDot }),
      ),
      { type, nEmbd, ff, nExpert: 4, nTokens: 16, nUsed: 4, regime: 'batched', numerics: 'llama' },
    ];
  }),
  {
    type: GGMLType.Q4_K,
    nEmbd: 256,
    ff: 256,
    nExpert: 4,
    nTokens: 3,
    nUsed: 2,
    regime: 'decode',
    maxBindingBytes: 256 * 144,
    numerics: 'llama',
  },
  {
    type: GGMLType.Q4_K,
    nEmbd: 256,
    ff: 256,
    nExpert: 4,
    nTokens: 16,
    nUsed: 4,
    regime: 'batched',
    maxBindingBytes: 256 * 144,
    numerics: 'llama',
  },
  { type: GGMLType.Q8_0, nEmbd: 64, ff: 96, nExpert: 4, nTokens: 4, nUsed: 2, regime: 'decode', crossCheck: true },
  { type: GGMLType.Q4_K, nEmbd: 256, ff: 256, nExpert: 4, nTokens: 16, nUsed: 4, regime: 'batched', crossCheck: true },
];
