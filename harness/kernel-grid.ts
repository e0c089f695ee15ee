/**
 * A small seeded grid of expert-FFN cases run on whatever GPUDevice it is given (headless Chromium here, the same
 * code as in Node), each compared with the CPU reference by NMSE: exact numerics against the exact reference, llama
 * numerics against the reference with ggml's rounding (compareLlama: also the NMSE beyond the ties of h).
 */
import { GGMLType, requireQuantType, typeName } from '../gguf/quant-types.ts';
import { weightBytes } from './weight-bytes.ts';
import { dequantizeExperts, nmse, referenceCall } from '../shaders/reference/expert-call.ts';
import { Q8_1_WEIGHT_TYPES, vecDotType } from '../shaders/reference/ggml-activations.ts';
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
  const matrix = (rows: number, cols: number): Uint8Array => weightBytes(c.type, rows * cols * c.nExpert, r, 1 / Math.sqrt(cols));
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
export const KERNEL_GRID_TYPES: readonly GGMLType[] = [...QUANT_SNIPPETS.keys()];
/**
 * Types whose GPU cases `npm test` runs one of (test/gpu/kernels.test.ts's llama-numerics case: the float snippet in
 * the batched and decode-float kernels, the int8 snippet on the packed and unpacked paths), the rest of their grids
 * (decode and batched exact cases, ggml-exact.test's bit-for-bit cases) being `npm run test:kernels:full`'s:
 * SwiftShader seconds per case, for snippets of the same pattern as IQ2_XXS's. (CHROMIUM_SMOKE_GRID keeps its one
 * decode case per type.)
 */
export const LIGHT_GPU_TYPES: ReadonlySet<GGMLType> = new Set([GGMLType.IQ2_XS, GGMLType.IQ3_XXS, GGMLType.IQ1_S, GGMLType.IQ1_M]);
/** Super-blocks of 256 (the K-quants, IQ4_XS): shapes of 256. */
export const isK = (t: GGMLType): boolean => requireQuantType(t).blockSize === 256;
/** Blocks of 32 (Q8_0, Q4_0, …, MXFP4, IQ4_NL); the float types (blocks of 1) get widths that are not multiples of 32. */
export const isBlock32 = (t: GGMLType): boolean => requireQuantType(t).blockSize === 32;

/**
 * Whether `npm run test:kernels:full` asked for the whole grids (EXPERTSWARM_KERNELS=full): the kernel test files run
 * their exhaustive cases then, and `npm test` a representative subset of them (each file says which).
 */
export const FULL_KERNEL_GRID = typeof process !== 'undefined' && process.env?.EXPERTSWARM_KERNELS === 'full';

/**
 * The grids' shape [nEmbd, ff] of one type for each kind of case, by its block size: a super-block of 256 (or whatever
 * block a new type has) per row, blocks of 32 several to a row, the float types on batched and llama widths that are
 * not multiples of the batched kernels' 32-element staging step or column tile.
 */
export function gridShape(type: GGMLType, kind: 'decode' | 'batched' | 'llama'): [number, number] {
  const b = requireQuantType(type).blockSize;
  if (b === 1) return kind === 'decode' ? [64, 64] : [36, 20];
  if (b === 32) return kind === 'decode' ? [64, 64] : [64, 96];
  return [b, b];
}

/** The first kernel type of each block size (F32, Q8_0, Q4_K today): one per family of row layouts. */
export const BLOCK_FAMILY_TYPES: readonly GGMLType[] = KERNEL_GRID_TYPES.filter(
  (t, i) => KERNEL_GRID_TYPES.findIndex((u) => requireQuantType(u).blockSize === requireQuantType(t).blockSize) === i,
);

/**
 * Every kernel quant type, decode shapes (a few rows) small enough for SwiftShader, on both variants of the decode
 * kernels ('subgroups' cases are skipped with a reason where the adapter lacks the feature). The full grid.
 */
export const DECODE_GRID: GridCase[] = KERNEL_GRID_TYPES.flatMap((type): GridCase[] => {
  const [nEmbd, ff] = gridShape(type, 'decode');
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

/** The batched case of one type: 16 tokens × top-4 of 4 experts, 16 pairs per expert (one full tile each). */
const batchedCase = (type: GGMLType): GridCase => {
  const [nEmbd, ff] = gridShape(type, 'batched');
  return { type, nEmbd, ff, nExpert: 4, nTokens: 16, nUsed: 4, regime: 'batched' };
};
/** The auto policy on a call it runs batched. */
const AUTO_CASE: GridCase = { type: GGMLType.Q4_K, nEmbd: 256, ff: 256, nExpert: 4, nTokens: 32, nUsed: 2, regime: 'auto' };

/**
 * Every kernel quant type in the batched regime (pairs grouped by expert, batched kernels): 16 tokens × top-4 of 4
 * experts, 16 pairs per expert (one full tile each); forced, and once through the auto policy, which picks batched
 * here too. Float shapes are not multiples of the tiles (partial staging step and column tile). The full grid.
 */
export const BATCHED_GRID: GridCase[] = KERNEL_GRID_TYPES.map(batchedCase).concat([AUTO_CASE]);

/** The llama-numerics decode cases of one type: every integer-dot path of an 8-bit type, else the float kernels. */
function llamaDecodeCases(type: GGMLType): GridCase[] {
  const [nEmbd, ff] = gridShape(type, 'llama');
  const paths: ('auto' | IntegerDot)[] = INT8_SNIPPETS.has(type) ? ['packed', 'unpacked', 'float'] : ['auto'];
  return paths.map(
    (integerDot): GridCase => ({ type, nEmbd, ff, nExpert: 3, nTokens: 4, nUsed: 2, regime: 'decode', numerics: 'llama', integerDot }),
  );
}
const llamaBatchedCase = (type: GGMLType): GridCase => {
  const [nEmbd, ff] = gridShape(type, 'llama');
  return { type, nEmbd, ff, nExpert: 4, nTokens: 16, nUsed: 4, regime: 'batched', numerics: 'llama' };
};
/** llama numerics on split slices, both regimes, and the negative checks (exact results against the rounded reference). */
const LLAMA_SPLIT_AND_CROSS: GridCase[] = [
  { ...SPLIT_GRID[0]!, numerics: 'llama' },
  { ...SPLIT_GRID[1]!, numerics: 'llama' },
  { type: GGMLType.Q8_0, nEmbd: 64, ff: 96, nExpert: 4, nTokens: 4, nUsed: 2, regime: 'decode', crossCheck: true },
  { type: GGMLType.Q4_K, nEmbd: 256, ff: 256, nExpert: 4, nTokens: 16, nUsed: 4, regime: 'batched', crossCheck: true },
];

/**
 * llama numerics: every type in the decode regime (every integer-dot path for the 8-bit types: dot4I8Packed, its
 * unpacked fallback, the float kernels on rounded values) and in the batched regime, split slices in both regimes,
 * and the negative check: exact numerics on Q8_0 and Q4_K against the rounded reference (crossCheck). The full grid.
 */
export const LLAMA_GRID: GridCase[] = [
  ...KERNEL_GRID_TYPES.flatMap((type): GridCase[] => [...llamaDecodeCases(type), llamaBatchedCase(type)]),
  ...LLAMA_SPLIT_AND_CROSS,
];

/**
 * `npm test`'s Chromium grid (test/integration/kernels-chromium.test.ts), exact numerics: what the browser's own
 * WebGPU (Chromium's Dawn and Tint, another version than the `webgpu` package's) must show, while every type on every
 * path and variant is test/gpu/kernels.test.ts's on Node's WebGPU:
 *  - every kernel type on the decode kernels (its quant snippet compiled by Chromium's Tint and computing right),
 *    one case each, so a new type costs one small case here (LIGHT_GPU_TYPES too: the test asserts every type);
 *  - the 'subgroups' decode variant on one type of each block size (F32, Q8_0, Q4_K);
 *  - the batched kernels on a float type whose shape is not a multiple of the tiles (F16 36 × 20) and on a K-quant
 *    (Q4_K), and the auto policy; split slices in both regimes (SPLIT_GRID).
 * Building a batched pipeline costs SwiftShader seconds per type, which is why the other types' batched cases are
 * the full grid's (BATCHED_GRID).
 */
export const CHROMIUM_SMOKE_GRID: GridCase[] = [
  ...KERNEL_GRID_TYPES.map((type): GridCase => {
    const [nEmbd, ff] = gridShape(type, 'decode');
    return { type, nEmbd, ff, nExpert: 3, nTokens: 4, nUsed: 2, regime: 'decode', features: [] };
  }),
  ...BLOCK_FAMILY_TYPES.map((type): GridCase => {
    const [nEmbd, ff] = gridShape(type, 'decode');
    return { type, nEmbd, ff, nExpert: 3, nTokens: 1, nUsed: 2, regime: 'decode', features: ['subgroups'] };
  }),
  batchedCase(GGMLType.F16),
  batchedCase(GGMLType.Q4_K),
  AUTO_CASE,
  ...SPLIT_GRID,
];

/** The activation rounding llama numerics applies before a type's dots (vecDotType; Q4_1 and Q5_1 add Q8_1's s). */
export const roundingOf = (t: GGMLType): string => (Q8_1_WEIGHT_TYPES.has(t) ? 'Q8_1' : typeName(vecDotType(t)));
/** The first kernel type of each activation rounding (F32, F16, BF16, Q8_0, Q4_K for Q8_K, Q5_1 for Q8_1 today). */
export const ROUNDING_TYPES: readonly GGMLType[] = KERNEL_GRID_TYPES.filter(
  (t, i) => KERNEL_GRID_TYPES.findIndex((u) => roundingOf(u) === roundingOf(t)) === i,
);

/**
 * `npm test`'s Chromium llama-numerics grid: one weight type per activation rounding (ROUNDING_TYPES) in the decode
 * regime, the 8-bit ones on every integer-dot path (dot4I8Packed, the unpacked fallback, the float kernels on rounded
 * values), the batched regime on F16 and Q4_K (the exact grid's pipelines), split slices in both regimes and the
 * negative checks. Every type on every path is test/gpu/kernels.test.ts's (Node), and in Chromium the full grid's
 * (LLAMA_GRID).
 */
export const CHROMIUM_SMOKE_LLAMA_GRID: GridCase[] = [
  ...ROUNDING_TYPES.flatMap((t) => llamaDecodeCases(t)),
  llamaBatchedCase(GGMLType.F16),
  llamaBatchedCase(GGMLType.Q4_K),
  ...LLAMA_SPLIT_AND_CROSS,
];
