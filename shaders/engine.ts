/**
 * The volunteer's expert engine: one slice, computed by whichever backend is faster on this machine. On start it
 * builds both — our WGSL kernels (ExpertRuntime on WebGPU) and the wasm fallback (WasmExpertFallback, or
 * OrtExpertFallback) — times each on the two calls a volunteer serves, a decode call (1 token) and a small batch
 * (8 tokens), of the slice's own shape (timeCompute, computer.ts), keeps the faster over both together
 * (chooseBackend, backend-choice.ts) and disposes the other. `report` says what was measured, what was picked and
 * why, for the hub and the page.
 *
 * The timing is made to not pick a slower backend on a noisy machine or adapter (SwiftShader's fallback adapter runs
 * our kernels tens of times slower than wasm): both backends are built first, then timed in `rounds` (default 2)
 * interleaved rounds, the order swapped each round, and each call's best median over the rounds counts, so one slow
 * first round (shader compilation, a JIT tier-up, another process) does not decide; only a software (fallback)
 * adapter beside a working wasm skips the next (it cannot win, backend-choice.ts).
 *
 * @example
 *   const engine = await ExpertEngine.start(slice, {
 *     webgpu: async (slice) => ({ runtime: await ExpertRuntime.create(device, slice), isFallbackAdapter }),
 *     wasm: async (slice) => OrtExpertFallback.create(ort, slice),
 *   });
 *   engine.report; // { backend: 'wasm', reason: 'wasm is faster: …', measured: { webgpu: {…}, wasm: {…} }, errors: {} }
 *   engine.report.measured.wasm; // { msMedian: decode + batch ms, gflops: over both, decodeMs, batchMs }
 *   const out = await engine.compute(rows, ids, probs, nTokens, nUsed);
 *
 * Backends come as factories so the caller decides how each is loaded (which onnxruntime build, which adapter) and a
 * machine without WebGPU simply passes none. A backend that fails to build or to compute is reported and left out.
 *
 * `numerics` (default 'exact'; 'llama' when the coordinator is a llama.cpp CPU one, as its assignment says) is handed
 * to both factories, which build their backend with it (`ExpertRuntime.create(device, slice, { numerics })`,
 * `OrtExpertFallback.create(ort, slice, { numerics })`); a backend that reports other numerics is left out.
 */
import { ExpertRuntimeError } from './errors.ts';
import { chooseBackend } from './backend-choice.ts';
import type { Backend } from '../protocol/numerics.ts';
import { callFlops, numericsOption, timeCompute, type ExpertComputer, type MeasureCall, type Timing } from './computer.ts';
import type { Numerics } from '../protocol/numerics.ts';
import type { ExpertSlice } from './slice.ts';

/** A backend's runtime: ExpertRuntime and OrtExpertFallback both fit. */
export interface EngineBackend extends ExpertComputer {
  dispose(): void | Promise<void>;
  /** The numerics it computes in, where it says (ExpertRuntime does): checked against the engine's. */
  readonly numerics?: Numerics;
  /** Bytes it holds now (GPU buffers, wasm memory), where it can tell (ExpertRuntime and the wasm kernel do). */
  heldBytes?(): number;
}

/** What the engine asks of each backend it builds. */
export interface BackendOptions {
  numerics: Numerics;
}

export interface ExpertEngineOptions {
  webgpu?: (slice: ExpertSlice, options: BackendOptions) => Promise<{ runtime: EngineBackend; isFallbackAdapter: boolean }>;
  wasm?: (slice: ExpertSlice, options: BackendOptions) => Promise<EngineBackend>;
  /**
   * How both backends round activations (default 'exact'): 'llama' to agree with a llama.cpp CPU coordinator to
   * float-summation precision (docs/kernels.md). Passed to the factories.
   */
  numerics?: Numerics;
  /** The timed decode call (default: 1 token × min(2, nExpert) experts, the shape a volunteer serves most). */
  call?: Pick<MeasureCall, 'nTokens' | 'nUsed'>;
  /** The timed batch call (default: 8 tokens × the decode call's experts). */
  batchCall?: Pick<MeasureCall, 'nTokens' | 'nUsed'>;
  /** Untimed calls per backend and call before timing (default 1). */
  warmup?: number;
  /** Timed samples per backend and call, median counted (default 3). */
  iterations?: number;
  /** Interleaved timing rounds, the best median of each call counted (default 2; ≥ 1). */
  rounds?: number;
  /** A sample repeats the call for at least this long (default 2 ms; see timeCompute). */
  minSampleMs?: number;
  /** Clock in ms (default performance.now); tests pass their own. */
  now?: () => number;
}

export interface EngineMeasurement {
  /** ms of the decode and the batch call together (each its best median over the rounds). */
  msMedian: number;
  /** Flops of both calls over msMedian: what chooseBackend compares. */
  gflops: number;
  decodeMs: number;
  batchMs: number;
}

export interface EngineReport {
  backend: Backend;
  /** The numerics both backends were built with. */
  numerics: Numerics;
  reason: string;
  /** The timed decode call; `batchCall` the timed batch. */
  call: MeasureCall;
  batchCall: MeasureCall;
  measured: Partial<Record<Backend, EngineMeasurement & { isFallbackAdapter?: boolean }>>;
  /** Why a backend is missing from `measured`: not offered, failed to build, or failed to compute. */
  errors: Partial<Record<Backend, string>>;
}

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** Disposes a backend that is not kept; its failure to let go must not cost the engine the other one. */
async function safeDispose(runtime: EngineBackend): Promise<void> {
  try {
    await runtime.dispose();
  } catch {
    // nothing more can be done with it
  }
}

export class ExpertEngine {
  private disposed = false;

  private constructor(
    private readonly runtime: EngineBackend,
    readonly report: EngineReport,
  ) {}

  /**
   * Builds the offered backends, measures them and keeps the faster. Throws ExpertRuntimeError NO_BACKEND when none
   * could build and compute (the message lists each one's error).
   */
  static async start(slice: ExpertSlice, options: ExpertEngineOptions): Promise<ExpertEngine> {
    const nUsed = options.call?.nUsed ?? Math.min(2, slice.nExpert);
    const shape = { nEmbd: slice.nEmbd, ff: slice.ff, nExpert: slice.nExpert };
    const call: MeasureCall = { ...shape, nTokens: options.call?.nTokens ?? 1, nUsed };
    const batchCall: MeasureCall = {
      ...shape,
      nTokens: options.batchCall?.nTokens ?? 8,
      nUsed: options.batchCall?.nUsed ?? nUsed,
    };
    const timing = {
      warmup: options.warmup ?? 1,
      iterations: options.iterations ?? 3,
      ...(options.minSampleMs !== undefined ? { minSampleMs: options.minSampleMs } : {}),
      ...(options.now ? { now: options.now } : {}),
    };
    const rounds = options.rounds ?? 2;
    const check = (option: string, value: number, min: number): void => {
      if (!(Number.isSafeInteger(value) && value >= min)) {
        throw new ExpertRuntimeError(
          'BAD_OPTION',
          { option, value, requirement: `an integer ≥ ${min}` },
          `${option} must be an integer ≥ ${min}, got ${value}`,
        );
      }
    };
    check('iterations', timing.iterations, 1);
    check('warmup', timing.warmup, 0);
    check('rounds', rounds, 1);
    check('call.nTokens', call.nTokens, 1);
    check('batchCall.nTokens', batchCall.nTokens, 1);
    const numerics = numericsOption(options.numerics);
    const backendOptions: BackendOptions = { numerics };
    const report: EngineReport = { backend: 'wasm', numerics, reason: '', call, batchCall, measured: {}, errors: {} };
    const built: Partial<Record<Backend, { runtime: EngineBackend; isFallbackAdapter?: boolean }>> = {};

    const fail = async (backend: Backend, e: unknown): Promise<void> => {
      report.errors[backend] = message(e);
      const runtime = built[backend]?.runtime;
      delete built[backend];
      if (runtime) await safeDispose(runtime);
    };
    const build = async (backend: Backend, make: () => Promise<{ runtime: EngineBackend; isFallbackAdapter?: boolean }>): Promise<void> => {
      try {
        const made = await make();
        built[backend] = made;
        if (made.runtime.numerics !== undefined && made.runtime.numerics !== numerics)
          throw new Error(`it was built with '${made.runtime.numerics}' numerics, not the '${numerics}' asked for`);
      } catch (e) {
        await fail(backend, e);
      }
    };
    const { webgpu, wasm: wasmFactory } = options;
    if (webgpu) await build('webgpu', () => webgpu(slice, backendOptions));
    else report.errors.webgpu = 'not offered (no WebGPU on this machine)';
    if (wasmFactory) await build('wasm', async () => ({ runtime: await wasmFactory(slice, backendOptions) }));
    else report.errors.wasm = 'not offered';

    // One backend at a time (timing both at once would have them compete for the same cores), interleaved in rounds.
    const best: Partial<Record<Backend, { decode: number; batch: number }>> = {};
    const timeOnce = async (backend: Backend): Promise<void> => {
      const runtime = built[backend]?.runtime;
      if (!runtime) return;
      try {
        const ms = { decode: 0, batch: 0 };
        for (const [which, c] of [
          ['decode', call],
          ['batch', batchCall],
        ] as const) {
          const t: Timing = await timeCompute(runtime, c, timing);
          if (!(Number.isFinite(t.msMedian) && t.msMedian > 0))
            throw new Error(`timing measured ${t.msMedian} ms per call: the clock did not advance`);
          ms[which] = t.msMedian;
        }
        const b = best[backend];
        best[backend] = b ? { decode: Math.min(b.decode, ms.decode), batch: Math.min(b.batch, ms.batch) } : ms;
      } catch (e) {
        delete best[backend];
        await fail(backend, e);
      }
    };
    const total = (b: Backend): number => (best[b] ? best[b]!.decode + best[b]!.batch : NaN);
    for (let round = 0; round < rounds; round++) {
      // Another round decides nothing with one backend, nor beside a software adapter once wasm has computed (it never
      // wins while wasm works, backend-choice.ts; its second round would cost seconds of start-up on SwiftShader). A
      // real GPU always gets every round.
      const softwareBeside = built.webgpu?.isFallbackAdapter === true && Number.isFinite(total('wasm'));
      if (round > 0 && (Object.keys(best).length < 2 || softwareBeside)) break;
      for (const backend of (round % 2 === 0 ? ['webgpu', 'wasm'] : ['wasm', 'webgpu']) as Backend[]) await timeOnce(backend);
    }
    const flops = callFlops(call) + callFlops(batchCall);
    for (const [backend, b] of Object.entries(best) as [Backend, { decode: number; batch: number }][]) {
      const ms = b.decode + b.batch;
      const adapter = built[backend]?.isFallbackAdapter;
      report.measured[backend] = {
        msMedian: ms,
        gflops: flops / (ms * 1e6),
        decodeMs: b.decode,
        batchMs: b.batch,
        ...(adapter === undefined ? {} : { isFallbackAdapter: adapter }),
      };
    }

    const gpu = report.measured.webgpu;
    const wasm = report.measured.wasm;
    if (!gpu && !wasm) {
      // (nothing was kept: every backend that failed was disposed by fail())
      const why = Object.entries(report.errors)
        .map(([b, e]) => `${b}: ${e}`)
        .join('; ');
      throw new ExpertRuntimeError('NO_BACKEND', { errors: report.errors }, `no expert backend works here (${why})`);
    }
    const choice = chooseBackend({
      ...(gpu ? { webgpu: { gflops: gpu.gflops, isFallbackAdapter: gpu.isFallbackAdapter ?? false } } : {}),
      ...(wasm ? { wasm: { gflops: wasm.gflops } } : {}),
    });
    report.backend = choice.backend;
    report.reason = choice.reason;
    for (const [backend, b] of Object.entries(built) as [Backend, { runtime: EngineBackend }][]) {
      if (backend !== choice.backend) await safeDispose(b.runtime);
    }
    return new ExpertEngine(built[choice.backend]!.runtime, report);
  }

  get backend(): Backend {
    return this.report.backend;
  }

  compute(rows: Float32Array, ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number): Promise<Float32Array> {
    if (this.disposed) return Promise.reject(new ExpertRuntimeError('DISPOSED', {}, 'expert engine: used after dispose()'));
    return this.runtime.compute(rows, ids, probs, nTokens, nUsed);
  }

  /** Bytes the kept backend holds now, or null where it cannot tell (the onnxruntime fallback). */
  heldBytes(): number | null {
    return this.disposed ? 0 : (this.runtime.heldBytes?.() ?? null);
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    await this.runtime.dispose();
  }
}
