/**
 * Which backend computes a slice's experts on this machine: our WebGPU kernels (ExpertRuntime) or the onnxruntime
 * wasm fallback (OrtExpertFallback). A pure policy over measured throughput, plus the timing ExpertEngine uses.
 *
 * Policy: the faster one wins. A tie goes to a real GPU adapter; a fallback (software) adapter such as SwiftShader only
 * wins when it is measured strictly faster. A backend that was not measured (or measured nothing usable) is
 * unavailable; with one backend left it wins; with none, chooseBackend throws.
 */

export type Backend = 'webgpu' | 'wasm';

export interface BackendMeasurements {
  webgpu?: { gflops: number; isFallbackAdapter: boolean };
  wasm?: { gflops: number };
}

export interface BackendChoice {
  backend: Backend;
  reason: string;
}

const usable = (g: number | undefined): g is number => typeof g === 'number' && Number.isFinite(g) && g > 0;
const fmt = (g: number): string => `${g.toPrecision(3)} GFLOP/s`;

export function chooseBackend(m: BackendMeasurements): BackendChoice {
  const gpu = m.webgpu && usable(m.webgpu.gflops) ? m.webgpu : undefined;
  const wasm = m.wasm && usable(m.wasm.gflops) ? m.wasm : undefined;
  const adapter = gpu?.isFallbackAdapter ? 'fallback (software) WebGPU adapter' : 'WebGPU adapter';
  if (!gpu && !wasm) throw new RangeError('chooseBackend: no backend has a usable measurement');
  if (!wasm) return { backend: 'webgpu', reason: `only the ${adapter} was measured (${fmt(gpu!.gflops)})` };
  if (!gpu) return { backend: 'wasm', reason: `only wasm was measured (${fmt(wasm.gflops)})` };
  const vs = `${adapter} ${fmt(gpu.gflops)} vs wasm ${fmt(wasm.gflops)}`;
  if (gpu.gflops > wasm.gflops) return { backend: 'webgpu', reason: `WebGPU is faster: ${vs}` };
  if (gpu.gflops === wasm.gflops && !gpu.isFallbackAdapter) return { backend: 'webgpu', reason: `a tie goes to the GPU: ${vs}` };
  if (gpu.gflops === wasm.gflops) return { backend: 'wasm', reason: `a fallback adapter must be faster to win, it ties: ${vs}` };
  return { backend: 'wasm', reason: `wasm is faster: ${vs}` };
}

/** Anything with ExpertRuntime's compute() (ExpertRuntime, OrtExpertFallback). */
export interface ExpertComputer {
  compute(rows: Float32Array, ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number): Promise<Float32Array>;
}

export interface MeasureCall {
  nEmbd: number;
  ff: number;
  nExperts: number;
  nTokens: number;
  nUsed: number;
}

export interface MeasureOptions {
  /** Untimed calls first (pipeline / session warm-up; default 1). */
  warmup?: number;
  /** Timed samples (default 5); the median counts. */
  iterations?: number;
  /**
   * A sample repeats the call until at least this many ms have passed (default 2, at most 1000 calls), so a clock
   * coarser than one call (browsers round performance.now() to 0.1–1 ms) still measures it.
   */
  minSampleMs?: number;
  /** Clock in ms (default performance.now). */
  now?: () => number;
}

/** Calls per sample at most, however fast the calls or coarse the clock. */
const MAX_CALLS_PER_SAMPLE = 1000;

export interface Timing {
  msMedian: number;
  ms: number[];
  /** Useful flops (2 · 3 · nEmbd · ff per routed pair) over the median time. */
  gflops: number;
}

/** Flops of one call that routing asks for: 3 matrices of nEmbd × ff, a multiply-add each, per (token, expert) pair. */
export function callFlops(c: Pick<MeasureCall, 'nEmbd' | 'ff' | 'nTokens' | 'nUsed'>): number {
  return 2 * 3 * c.nEmbd * c.ff * c.nTokens * c.nUsed;
}

/** A deterministic call: rows in [-1, 1), each token routed to nUsed distinct experts with probs summing to 1. */
export function syntheticCall(c: MeasureCall, seed = 1): { rows: Float32Array; ids: Int32Array; probs: Float32Array } {
  let s = seed >>> 0;
  const r = (): number => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
  const rows = new Float32Array(c.nTokens * c.nEmbd).map(() => r() * 2 - 1);
  const ids = new Int32Array(c.nTokens * c.nUsed);
  const probs = new Float32Array(c.nTokens * c.nUsed);
  for (let t = 0; t < c.nTokens; t++) {
    const start = Math.floor(r() * c.nExperts);
    for (let k = 0; k < c.nUsed; k++) {
      ids[t * c.nUsed + k] = (start + k) % c.nExperts;
      probs[t * c.nUsed + k] = 1 / c.nUsed;
    }
  }
  return { rows, ids, probs };
}

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/**
 * Times compute() on one call shape: `iterations` samples, each the mean of as many calls as fill minSampleMs.
 * gflops is not finite when even a full sample measured no time (a stopped clock): callers treat that as no
 * measurement.
 */
export async function timeCompute(rt: ExpertComputer, c: MeasureCall, options: MeasureOptions = {}): Promise<Timing> {
  const now = options.now ?? (() => performance.now());
  const iterations = options.iterations ?? 5;
  const warmup = options.warmup ?? 1;
  const minSampleMs = options.minSampleMs ?? 2;
  if (!(Number.isSafeInteger(iterations) && iterations >= 1)) throw new RangeError(`timeCompute: iterations must be an integer ≥ 1, got ${iterations}`);
  if (!(Number.isSafeInteger(warmup) && warmup >= 0)) throw new RangeError(`timeCompute: warmup must be an integer ≥ 0, got ${warmup}`);
  if (!(minSampleMs >= 0)) throw new RangeError(`timeCompute: minSampleMs must be ≥ 0, got ${minSampleMs}`);
  const { rows, ids, probs } = syntheticCall(c);
  for (let i = 0; i < warmup; i++) await rt.compute(rows, ids, probs, c.nTokens, c.nUsed);
  const ms: number[] = [];
  for (let i = 0; i < iterations; i++) {
    const t0 = now();
    let calls = 0;
    let elapsed = 0;
    do {
      await rt.compute(rows, ids, probs, c.nTokens, c.nUsed);
      calls++;
      elapsed = now() - t0;
    } while (elapsed < minSampleMs && calls < MAX_CALLS_PER_SAMPLE);
    ms.push(elapsed / calls);
  }
  const msMedian = median(ms);
  return { msMedian, ms, gflops: callFlops(c) / (msMedian * 1e6) };
}
