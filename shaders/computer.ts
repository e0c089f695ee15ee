/**
 * What the engine's backends have in common — `ExpertComputer`, anything with ExpertRuntime's compute()
 * (ExpertRuntime, OrtExpertFallback) — and how ExpertEngine times one on a call shape: a deterministic synthetic call,
 * the flops it asks for, the median of timed samples.
 */
import { ExpertRuntimeError } from './errors.ts';
import type { Numerics } from '../protocol/numerics.ts';
import { mulberry32 } from './random.ts';

/** The `numerics` option every backend takes: 'exact' when absent; anything else throws BAD_OPTION. */
export function numericsOption(numerics: Numerics | undefined): Numerics {
  const n = numerics ?? 'exact';
  if (n !== 'exact' && n !== 'llama') {
    throw new ExpertRuntimeError(
      'BAD_OPTION',
      { option: 'numerics', value: NaN, requirement: "'exact' or 'llama'" },
      `numerics must be 'exact' or 'llama', got ${JSON.stringify(n)}`,
    );
  }
  return n;
}

/** Anything with ExpertRuntime's compute() (ExpertRuntime, OrtExpertFallback). */
export interface ExpertComputer {
  compute(rows: Float32Array, ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number): Promise<Float32Array>;
}

export interface MeasureCall {
  nEmbd: number;
  ff: number;
  nExpert: number;
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
  const r = mulberry32(seed);
  const rows = new Float32Array(c.nTokens * c.nEmbd).map(() => r() * 2 - 1);
  const ids = new Int32Array(c.nTokens * c.nUsed);
  const probs = new Float32Array(c.nTokens * c.nUsed);
  for (let t = 0; t < c.nTokens; t++) {
    const start = Math.floor(r() * c.nExpert);
    for (let k = 0; k < c.nUsed; k++) {
      ids[t * c.nUsed + k] = (start + k) % c.nExpert;
      probs[t * c.nUsed + k] = 1 / c.nUsed;
    }
  }
  return { rows, ids, probs };
}

/** The median (the mean of the two middle values for an even count; NaN for none). */
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
  if (!(Number.isSafeInteger(iterations) && iterations >= 1))
    throw new RangeError(`timeCompute: iterations must be an integer ≥ 1, got ${iterations}`);
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
