/**
 * The volunteer's expert engine: one slice, computed by whichever backend is faster on this machine. On start it
 * builds both — our WGSL kernels (ExpertRuntime on WebGPU) and the onnxruntime wasm fallback (OrtExpertFallback) —
 * times each on a short call of the slice's own shape (timeCompute, computer.ts), keeps the faster (chooseBackend,
 * backend-choice.ts) and disposes the other. `report` says what was measured, what was picked and why, for the hub
 * and the page.
 *
 * @example
 *   const engine = await ExpertEngine.start(slice, {
 *     webgpu: async (slice) => ({ runtime: await ExpertRuntime.create(device, slice), isFallbackAdapter }),
 *     wasm: async (slice) => OrtExpertFallback.create(ort, slice),
 *   });
 *   engine.report; // { backend: 'wasm', reason: 'wasm is faster: …', measured: { webgpu: {…}, wasm: {…} }, errors: {} }
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
import { chooseBackend, type Backend } from './backend-choice.ts';
import { timeCompute, type ExpertComputer, type MeasureCall, type Numerics, type Timing } from './computer.ts';
import type { ExpertSlice } from './slice.ts';

/** A backend's runtime: ExpertRuntime and OrtExpertFallback both fit. */
export interface EngineBackend extends ExpertComputer {
  dispose(): void | Promise<void>;
  /** The numerics it computes in, where it says (ExpertRuntime does): checked against the engine's. */
  readonly numerics?: Numerics;
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
  /** The timed call (default: 1 token × min(2, nExpert) experts, the decode shape a volunteer serves most). */
  call?: Pick<MeasureCall, 'nTokens' | 'nUsed'>;
  /** Untimed calls per backend before timing (default 1). */
  warmup?: number;
  /** Timed samples per backend, median counted (default 3). */
  iterations?: number;
  /** A sample repeats the call for at least this long (default 2 ms; see timeCompute). */
  minSampleMs?: number;
  /** Clock in ms (default performance.now); tests pass their own. */
  now?: () => number;
}

export interface EngineMeasurement {
  msMedian: number;
  gflops: number;
}

export interface EngineReport {
  backend: Backend;
  /** The numerics both backends were built with. */
  numerics: Numerics;
  reason: string;
  call: MeasureCall;
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
    const call: MeasureCall = {
      nEmbd: slice.nEmbd,
      ff: slice.ff,
      nExpert: slice.nExpert,
      nTokens: options.call?.nTokens ?? 1,
      nUsed: options.call?.nUsed ?? Math.min(2, slice.nExpert),
    };
    const timing = {
      warmup: options.warmup ?? 1,
      iterations: options.iterations ?? 3,
      ...(options.minSampleMs !== undefined ? { minSampleMs: options.minSampleMs } : {}),
      ...(options.now ? { now: options.now } : {}),
    };
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
    const numerics = options.numerics ?? 'exact';
    if (numerics !== 'exact' && numerics !== 'llama') {
      throw new ExpertRuntimeError(
        'BAD_OPTION',
        { option: 'numerics', value: NaN, requirement: "'exact' or 'llama'" },
        `numerics must be 'exact' or 'llama', got ${JSON.stringify(numerics)}`,
      );
    }
    const backendOptions: BackendOptions = { numerics };
    const report: EngineReport = { backend: 'wasm', numerics, reason: '', call, measured: {}, errors: {} };
    const built: Partial<Record<Backend, EngineBackend>> = {};

    const run = async (backend: Backend, make: () => Promise<{ runtime: EngineBackend; isFallbackAdapter?: boolean }>): Promise<void> => {
      let runtime: EngineBackend | undefined;
      try {
        const made = await make();
        runtime = made.runtime;
        if (runtime.numerics !== undefined && runtime.numerics !== numerics)
          throw new Error(`it was built with '${runtime.numerics}' numerics, not the '${numerics}' asked for`);
        const t: Timing = await timeCompute(runtime, call, timing);
        if (!(Number.isFinite(t.gflops) && t.gflops > 0))
          throw new Error(`timing measured ${t.msMedian} ms per call: the clock did not advance`);
        const adapter = made.isFallbackAdapter === undefined ? {} : { isFallbackAdapter: made.isFallbackAdapter };
        report.measured[backend] = { msMedian: t.msMedian, gflops: t.gflops, ...adapter };
        built[backend] = runtime;
      } catch (e) {
        report.errors[backend] = message(e);
        if (runtime) await safeDispose(runtime);
      }
    };
    // One after the other: timing both at once would have them compete for the same cores.
    const { webgpu, wasm: ortWasm } = options;
    if (webgpu) await run('webgpu', () => webgpu(slice, backendOptions));
    else report.errors.webgpu = 'not offered (no WebGPU on this machine)';
    if (ortWasm) await run('wasm', async () => ({ runtime: await ortWasm(slice, backendOptions) }));
    else report.errors.wasm = 'not offered';

    const gpu = report.measured.webgpu;
    const wasm = report.measured.wasm;
    if (!gpu && !wasm) {
      // (nothing was kept: every backend that failed was disposed above)
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
    for (const [backend, runtime] of Object.entries(built) as [Backend, EngineBackend][]) {
      if (backend !== choice.backend) await safeDispose(runtime);
    }
    return new ExpertEngine(built[choice.backend]!, report);
  }

  get backend(): Backend {
    return this.report.backend;
  }

  compute(rows: Float32Array, ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number): Promise<Float32Array> {
    if (this.disposed) return Promise.reject(new ExpertRuntimeError('DISPOSED', {}, 'expert engine: used after dispose()'));
    return this.runtime.compute(rows, ids, probs, nTokens, nUsed);
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    await this.runtime.dispose();
  }
}
