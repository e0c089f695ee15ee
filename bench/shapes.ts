/**
 * The generated benchmark models shared by bench:dispatch, bench:elastic and its memory mode: one definition, so their
 * configs (and seed) agree and the cached GGUF in .cache/models is generated once for all of them.
 *
 *   const made = await benchModel(REALISTIC, 2, log);        // qwen3moe Q4_K, 2 MoE layers, cached by config
 *   const budget = volunteerBudget(REALISTIC, overrideMb);   // a whole layer per volunteer
 */
import { existsSync, readdirSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { GGMLType, rowByteSize } from '../gguf/quant-types.ts';
import { MODEL_CACHE, type TestModel, testModel, testModelAt } from '../harness/models.ts';
import { kernelOverheadBytes } from '../volunteer/engine-open.ts';

export interface Shape {
  name: string;
  nEmbd: number;
  ff: number;
  nExpert: number;
  nExpertUsed: number;
  nHead: number;
  nHeadKv: number;
}

/** The issue's realistic layer shape: n_embd 2048, 128 experts, top-8, ff 768. */
export const REALISTIC: Shape = { name: 'realistic', nEmbd: 2048, ff: 768, nExpert: 128, nExpertUsed: 8, nHead: 16, nHeadKv: 4 };
/** The realistic shape with 8 experts: the same frame sizes, but a CPU volunteer answers it in time. */
export const FRAMES: Shape = { ...REALISTIC, name: 'frames', nExpert: 8 };
/** A small model for smoke runs (`--quick`). */
export const QUICK: Shape = { name: 'quick', nEmbd: 512, ff: 256, nExpert: 32, nExpertUsed: 8, nHead: 4, nHeadKv: 1 };

export function describeShape(s: Shape, layers: number): string {
  return `qwen3moe Q4_K, ${layers} MoE layers, n_embd ${s.nEmbd}, ${s.nExpert} experts, top-${s.nExpertUsed}, ff ${s.ff}, ${s.nHead} heads (${s.nHeadKv} kv)`;
}

export interface BenchModel {
  shape: Shape;
  model: TestModel;
  /** Seconds spent generating; null when it came from the cache. */
  generatedS: number | null;
}

/** The shape's qwen3moe Q4_K model with `layers` MoE layers (seed 11), generated on first use and cached by config. */
export async function benchModel(s: Shape, layers: number, log: (line: string) => void): Promise<BenchModel> {
  const before = new Set(existsSync(MODEL_CACHE) ? readdirSync(MODEL_CACHE) : []);
  log(`model ${s.name}: ${describeShape(s, layers)}…`);
  const t0 = performance.now();
  const { nEmbd, ff, nExpert, nExpertUsed, nHead, nHeadKv } = s;
  const partial = { arch: 'qwen3moe' as const, layers, nEmbd, ff, nExpert, nExpertUsed, nHead, nHeadKv, type: GGMLType.Q4_K, seed: 11 };
  // EXPERTSWARM_BENCH_MODEL: a model generated before with this shape (the cache's key changes with every edit under
  // tools/ and gguf/, and the realistic model takes minutes to generate): used as it is.
  const given = process.env.EXPERTSWARM_BENCH_MODEL;
  if (given) {
    log(`  given (EXPERTSWARM_BENCH_MODEL, not checked against the shape): ${given}`);
    return { shape: s, model: testModelAt(given, partial), generatedS: null };
  }
  const model = await testModel(partial);
  const generatedS = before.has(model.path.split('/').pop() as string) ? null : (performance.now() - t0) / 1000;
  log(`  ${generatedS === null ? 'cached' : `generated in ${generatedS.toFixed(0)} s`}: ${model.path}`);
  return { shape: s, model, generatedS };
}

/**
 * A volunteer's memory budget for a whole layer: the Q4_K slice with a margin. Both engines hold about the slice —
 * the WebGPU engine its quantized bytes, the wasm kernel fallback the same bytes plus a bounded per-call scratch
 * (volunteer/engine-open.ts `kernelWasmBytesFor`) — so `auto` can build and time both. `overrideMb` wins.
 */
export function volunteerBudget(s: Shape, overrideMb?: number): { mb: number; q4kMb: number; wasmMb: number } {
  const q4kBytes = s.nExpert * 3 * s.ff * rowByteSize(GGMLType.Q4_K, s.nEmbd);
  const q4kMb = q4kBytes / 2 ** 20;
  const wasmMb = (q4kBytes + kernelOverheadBytes(s)) / 2 ** 20;
  const mb = overrideMb ?? Math.ceil((Math.max(q4kMb, wasmMb) * 1.25) / 64) * 64;
  return { mb, q4kMb, wasmMb };
}
