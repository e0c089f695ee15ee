/**
 * A small seeded grid of expert-FFN cases run on whatever GPUDevice it is given (headless Chromium here, the same
 * code as in Node), each compared with the CPU reference by NMSE.
 */
import { GGMLType } from '../../gguf/quant-types.ts';
import { quantize } from '../../gguf/quantize.ts';
import { dequantize } from '../../gguf/dequantize.ts';
import { expertFfnAccumulate, type ExpertMatrices } from '../../shaders/reference/expert-ffn.ts';
import { ExpertRuntime, type KernelFeature, type Regime, type RegimeRequest } from '../../shaders/runtime.ts';
import { mulberry32 as rng } from '../support/random.ts';

export interface GridCase {
  type: GGMLType;
  nEmbd: number;
  ff: number;
  nExperts: number;
  nTokens: number;
  nUsed: number;
  /** Kernels to run (default 'auto': the runtime's regime policy). */
  regime?: RegimeRequest;
  /** Optional kernel features (default 'auto'). */
  features?: readonly KernelFeature[] | 'auto';
  /** Caps one weight binding so the slice is split into parts. */
  maxBindingBytes?: number;
}

export interface GridResult extends GridCase {
  typeName: string;
  /** The regime that ran (the policy's choice for 'auto'). */
  ran: Regime;
  /** The kernel variant and the number of weight parts that ran. */
  kernelFeatures: KernelFeature[];
  weightParts: number;
  nmse: number;
  ms: number;
}


function uniform(n: number, r: () => number, scale: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (r() * 2 - 1) * scale;
  return out;
}

export async function runGridCase(device: GPUDevice, c: GridCase, seed: number): Promise<GridResult> {
  const r = rng(seed);
  const matrix = (rows: number, cols: number): { bytes: Uint8Array; values: Float32Array } => {
    const bytes = quantize(c.type, uniform(rows * cols * c.nExperts, r, 1 / Math.sqrt(cols)));
    return { bytes, values: dequantize(c.type, bytes, rows * cols * c.nExperts) };
  };
  const gate = matrix(c.ff, c.nEmbd);
  const up = matrix(c.ff, c.nEmbd);
  const down = matrix(c.nEmbd, c.ff);
  const rows = uniform(c.nTokens * c.nEmbd, r, 1);
  const ids = new Int32Array(c.nTokens * c.nUsed).map((_, i) => (i * 7 + Math.floor(i / c.nUsed)) % c.nExperts);
  const probs = uniform(c.nTokens * c.nUsed, r, 0.5).map((x) => Math.abs(x) + 0.1);

  const rt = await ExpertRuntime.create(device, {
    nEmbd: c.nEmbd, ff: c.ff, nExperts: c.nExperts, types: { gate: c.type, up: c.type, down: c.type },
    gate: gate.bytes, up: up.bytes, down: down.bytes,
  }, { features: c.features ?? 'auto', ...(c.maxBindingBytes ? { maxBindingBytes: c.maxBindingBytes } : {}) });
  const { kernelFeatures, weightParts } = rt.capabilities();
  const request = c.regime ?? 'auto';
  const ran = request === 'auto' ? rt.planRegime(ids, c.nTokens, c.nUsed).regime : request;
  const t0 = performance.now();
  const got = await rt.compute(rows, ids, probs, c.nTokens, c.nUsed, { regime: request });
  const ms = performance.now() - t0;
  rt.dispose();

  const perExpert = (m: Float32Array, e: number, n: number): Float32Array => m.subarray(e * n, (e + 1) * n);
  let num = 0;
  let den = 0;
  for (let t = 0; t < c.nTokens; t++) {
    const y = new Float64Array(c.nEmbd);
    for (let k = 0; k < c.nUsed; k++) {
      const e = ids[t * c.nUsed + k] as number;
      const m: ExpertMatrices = {
        nEmbd: c.nEmbd, ff: c.ff,
        gate: perExpert(gate.values, e, c.ff * c.nEmbd), up: perExpert(up.values, e, c.ff * c.nEmbd), down: perExpert(down.values, e, c.ff * c.nEmbd),
      };
      expertFfnAccumulate(m, rows.subarray(t * c.nEmbd, (t + 1) * c.nEmbd), probs[t * c.nUsed + k] as number, y);
    }
    for (let i = 0; i < c.nEmbd; i++) {
      const d = (got[t * c.nEmbd + i] as number) - (y[i] as number);
      num += d * d;
      den += (y[i] as number) ** 2;
    }
  }
  return { ...c, typeName: GGMLType[c.type] as string, ran, kernelFeatures, weightParts, nmse: num / den, ms };
}

/**
 * Every kernel quant type, decode shapes (a few rows) small enough for SwiftShader, on both variants of the decode
 * kernels ('subgroups' cases are skipped with a reason where the adapter lacks the feature).
 */
export const DECODE_GRID: GridCase[] = [
  GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K,
].flatMap((type): GridCase[] => {
  const k = type >= GGMLType.Q2_K && type <= GGMLType.Q6_K;
  const nEmbd = k ? 256 : 64;
  const ff = k ? 256 : 64;
  const variants: KernelFeature[][] = [[], ['subgroups']];
  return variants.flatMap((features): GridCase[] => [
    { type, nEmbd, ff, nExperts: 3, nTokens: 1, nUsed: 2, regime: 'decode', features },
    { type, nEmbd, ff, nExperts: 3, nTokens: 4, nUsed: 2, regime: 'decode', features },
  ]);
});

/** Slices split over several weight bindings (one expert per part), in both regimes. */
export const SPLIT_GRID: GridCase[] = [
  { type: GGMLType.Q4_K, nEmbd: 256, ff: 256, nExperts: 4, nTokens: 3, nUsed: 2, regime: 'decode', maxBindingBytes: 256 * 144 },
  { type: GGMLType.Q4_K, nEmbd: 256, ff: 256, nExperts: 4, nTokens: 16, nUsed: 4, regime: 'batched', maxBindingBytes: 256 * 144 },
  { type: GGMLType.F16, nEmbd: 36, ff: 20, nExperts: 4, nTokens: 16, nUsed: 4, regime: 'batched', maxBindingBytes: 36 * 20 * 2 },
];

/**
 * Every kernel quant type in the batched regime (pairs grouped by expert, tiled kernels): 16 tokens × top-4 of 4
 * experts, 16 pairs per expert (one full tile each); forced, and once through the auto policy, which picks batched
 * here too. Float shapes are not multiples of the tiles (partial staging step and column tile).
 */
export const BATCHED_GRID: GridCase[] = [
  GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K,
].flatMap((type): GridCase[] => {
  const k = type >= GGMLType.Q2_K && type <= GGMLType.Q6_K;
  const block32 = type === GGMLType.Q8_0 || type === GGMLType.Q4_0;
  const nEmbd = k ? 256 : block32 ? 64 : 36;
  const ff = k ? 256 : block32 ? 96 : 20;
  return [{ type, nEmbd, ff, nExperts: 4, nTokens: 16, nUsed: 4, regime: 'batched' }];
}).concat([{ type: GGMLType.Q4_K, nEmbd: 256, ff: 256, nExperts: 4, nTokens: 32, nUsed: 2, regime: 'auto' }]);
