/**
 * Browser entry of `npm run bench:kernels`: on one page, times our WGSL expert FFN (ExpertRuntime on WebGPU) in exact
 * and in llama numerics (float and int8 dot products) against the fair onnxruntime-web baselines on its 'webgpu' and
 * 'wasm' execution providers (bench/ort-routed.ts: only the routed pairs, MatMulNBits weights where the type maps)
 * and the engine's own onnxruntime fallback, on the same slices and calls, and checks every backend's output against
 * the CPU reference of its numerics. Where the device has timestamp-query our calls also report their kernel time.
 *
 * `window.runKernelBench(config)` resolves with the results and the printed report; opened with `?auto=1` (the
 * `--serve` mode, for a desktop browser) the page runs it itself and shows the report.
 */
import * as ort from 'onnxruntime-web';
import { GGMLType } from '../../gguf/quant-types.ts';
import { weightBytes } from '../../harness/weight-bytes.ts';
import { chooseBackend } from '../../shaders/backend-choice.ts';
import { callFlops, median, syntheticCall } from '../../shaders/computer.ts';
import { dequantizeExperts, nmse, referenceCall } from '../../shaders/reference/expert-call.ts';
import { ExpertRuntime, type ComputeOptions, type ExpertSlice } from '../../shaders/runtime.ts';
import { OrtExpertFallback } from '../../shaders/ort/fallback.ts';
import { mulberry32 as rng } from '../../shaders/random.ts';
import { requestBenchDevice } from '../gpu/bench-device.ts';
import { OrtRoutedExperts, describeForms, type OrtRoutedModule } from '../ort-routed.ts';
import {
  WRONG_NMSE,
  formatReport,
  type BackendName,
  type BenchConfig,
  type BenchReport,
  type BenchRow,
  type BenchShape,
} from './report.ts';

declare global {
  interface Window {
    runKernelBench: (config: BenchConfig) => Promise<BenchReport>;
  }
}

function makeSlice(type: GGMLType, s: BenchShape, seed: number): ExpertSlice {
  const r = rng(seed);
  const n = s.nExpert * s.nEmbd * s.ff;
  const mat = (scale: number): Uint8Array => weightBytes(type, n, r, scale);
  const gate = mat(1 / Math.sqrt(s.nEmbd));
  const up = mat(1 / Math.sqrt(s.nEmbd));
  const down = mat(1 / Math.sqrt(s.ff));
  return { nEmbd: s.nEmbd, ff: s.ff, nExpert: s.nExpert, types: { gate: type, up: type, down: type }, gate, up, down };
}

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e)).split('\n')[0]!.slice(0, 300);

/** Flops of the CPU reference beyond which the NMSE is taken against ours-webgpu instead (float64 JS is slow). */
const REFERENCE_FLOPS = 2e9;

type Call = ReturnType<typeof syntheticCall>;

/** What a backend is timed through: one call, optionally reporting its kernel time. */
type ComputeFn = (call: Call, s: BenchShape, onTiming?: ComputeOptions['onTiming']) => Promise<Float32Array>;

async function timeCalls(
  compute: ComputeFn,
  s: BenchShape,
  call: Call,
  cfg: BenchConfig,
  timed: boolean,
): Promise<{ ms: number[]; kernelMs: number[]; out: Float32Array }> {
  let out: Float32Array = new Float32Array(0);
  for (let i = 0; i < cfg.warmup; i++) out = await compute(call, s);
  const ms: number[] = [];
  const kernelMs: number[] = [];
  const onTiming = timed ? (t: { kernelMs: number }) => kernelMs.push(t.kernelMs) : undefined;
  const start = performance.now();
  for (let i = 0; i < cfg.iterations && (i === 0 || performance.now() - start < cfg.budgetS * 1000); i++) {
    const t0 = performance.now();
    out = await compute(call, s, onTiming);
    ms.push(performance.now() - t0);
  }
  return { ms, kernelMs, out };
}

let nativeOrt: Promise<OrtRoutedModule> | null = null;

/**
 * onnxruntime-web's `/webgpu` build: its native (C++) WebGPU execution provider, where the default build the rest of
 * the page uses runs WebGPU through its JS kernels (JSEP). Loaded on first use; a module of its own, with its own env.
 */
function nativeWebgpuOrt(cfg: BenchConfig): Promise<OrtRoutedModule> {
  nativeOrt ??= import('onnxruntime-web/webgpu').then((m) => {
    m.env.wasm.wasmPaths = cfg.wasmPaths;
    m.env.wasm.numThreads = 1;
    return m as unknown as OrtRoutedModule;
  });
  return nativeOrt;
}

/** Distinct experts a call routes to. */
function expertsTouched(ids: Int32Array): number {
  return new Set(ids).size;
}

async function run(cfg: BenchConfig): Promise<BenchReport> {
  const notes: string[] = [];
  const rows: BenchRow[] = [];
  const env: NonNullable<BenchReport['env']> = {
    userAgent: navigator.userAgent,
    hardwareConcurrency: navigator.hardwareConcurrency,
    crossOriginIsolated,
    ortVersion: ort.env.versions.web ?? '?',
    ortThreads: 1,
    adapter: null,
    timestampQuery: false,
  };

  ort.env.wasm.wasmPaths = cfg.wasmPaths;
  ort.env.wasm.numThreads = cfg.ortThreads > 0 ? cfg.ortThreads : crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency) : 1;
  if (ort.env.wasm.numThreads > 1 && !crossOriginIsolated) {
    notes.push(`ort wasm: ${ort.env.wasm.numThreads} threads asked, but the page is not cross-origin isolated: onnxruntime uses 1`);
  }
  env.ortThreads = ort.env.wasm.numThreads;
  const wanted = new Set(cfg.backends);

  let device: GPUDevice | null = null;
  let isFallbackAdapter = false;
  if (!navigator.gpu) {
    notes.push('ours (WebGPU): navigator.gpu is missing (WebGPU disabled?)');
  } else {
    const got = await requestBenchDevice(navigator.gpu, 'kernel bench device');
    if (!got) {
      notes.push('ours (WebGPU): requestAdapter() returned null');
    } else {
      const info = got.adapter.info;
      isFallbackAdapter = got.isFallbackAdapter;
      env.adapter = { vendor: info.vendor, architecture: info.architecture, description: info.description, isFallbackAdapter };
      env.timestampQuery = got.timestampQuery;
      device = got.device;
    }
  }

  let seed = 1;
  for (const typeName of cfg.types) {
    const type = GGMLType[typeName as keyof typeof GGMLType];
    if (typeof type !== 'number') {
      notes.push(`unknown type ${typeName}: skipped`);
      continue;
    }
    for (const shape of cfg.shapes) {
      const slice = makeSlice(type, shape, seed++);
      const call = syntheticCall(shape, seed++);
      const flops = callFlops(shape);
      const withReference = flops <= REFERENCE_FLOPS;
      const experts = withReference ? dequantizeExperts(slice) : null;
      const routed = { ...call, nTokens: shape.nTokens, nUsed: shape.nUsed };
      const want = experts ? referenceCall(experts, routed) : null;
      const wantLlama = experts ? referenceCall(experts, routed, 'llama') : null;
      const touched = expertsTouched(call.ids);
      const quantBytesPerExpert = (slice.gate.length + slice.up.length + slice.down.length) / shape.nExpert;

      type Handle = {
        compute: ComputeFn;
        dispose: () => unknown;
        weightBytes: number;
        timed?: boolean;
        kernelFeatures?: string[];
        integerDot?: string | null;
        llama?: boolean;
        forms?: string;
        regime?: string;
      };
      const oursWith = (features: 'auto' | [], llama?: 'float' | 'auto') => async (): Promise<Handle> => {
        if (!device) throw new Error('no WebGPU device');
        const rt = await ExpertRuntime.create(device, slice, {
          features,
          ...(llama ? { numerics: 'llama' as const, integerDot: llama } : {}),
        });
        const caps = rt.capabilities();
        return {
          compute: (c, s, onTiming) => rt.compute(c.rows, c.ids, c.probs, s.nTokens, s.nUsed, onTiming ? { onTiming } : {}),
          dispose: () => rt.dispose(),
          weightBytes: touched * quantBytesPerExpert,
          timed: caps.timestampQuery,
          kernelFeatures: caps.kernelFeatures,
          regime: rt.planRegime(call.ids, shape.nTokens, shape.nUsed).regime,
          ...(llama ? { integerDot: caps.integerDot, llama: true } : {}),
        };
      };
      const fairOrt =
        (ep: 'webgpu' | 'wasm', build: () => Promise<OrtRoutedModule> = async () => ort as unknown as OrtRoutedModule) =>
        async (): Promise<Handle> => {
          const fair = await OrtRoutedExperts.create(await build(), slice, call.ids, shape.nTokens, shape.nUsed, {
            ep,
            accuracyLevel: cfg.ortAccuracyLevel,
            ...(cfg.ortWeights === 'f32' ? { forms: { gate: 'f32', up: 'f32', down: 'f32' } as const } : {}),
          });
          return {
            compute: (c, s) => fair.compute(c.rows, c.ids, c.probs, s.nTokens, s.nUsed),
            dispose: () => fair.dispose(),
            weightBytes: fair.weightBytes,
            forms: describeForms(slice.types, fair.forms),
          };
        };
      const hasVariants = device !== null && (device.features.has('subgroups') || device.features.has('shader-f16'));
      const backends: { name: BackendName; create: () => Promise<Handle> }[] = [
        { name: 'ours-webgpu', create: oursWith('auto') },
        ...(hasVariants ? [{ name: 'ours-base' as BackendName, create: oursWith([]) }] : []),
        { name: 'ours-llama-float', create: oursWith('auto', 'float') },
        { name: 'ours-llama-int8', create: oursWith('auto', 'auto') },
        { name: 'ort-webgpu', create: fairOrt('webgpu') },
        { name: 'ort-webgpu-ep', create: fairOrt('webgpu', () => nativeWebgpuOrt(cfg)) },
        { name: 'ort-wasm', create: fairOrt('wasm') },
        {
          name: 'fallback-wasm',
          create: async () => {
            const rt = await OrtExpertFallback.create(ort, slice, { executionProviders: ['wasm'] });
            return {
              compute: (c, s) => rt.compute(c.rows, c.ids, c.probs, s.nTokens, s.nUsed),
              dispose: () => rt.dispose(),
              weightBytes: NaN, // what it holds is the fallback's business (shaders/ort/fallback.ts)
            };
          },
        },
      ];

      let oursOut: Float32Array | null = null;
      for (const b of backends) {
        if (!wanted.has(b.name)) continue;
        let handle: Handle | null = null;
        try {
          handle = await b.create();
          const { ms, kernelMs, out } = await timeCalls(handle.compute, shape, call, cfg, handle.timed ?? false);
          if (b.name === 'ours-webgpu') oursOut = out;
          const msMedian = median(ms);
          const against = handle.llama ? wantLlama : want;
          const error = against ? nmse(out, against) : oursOut ? nmse(out, oursOut) : NaN;
          if (error > WRONG_NMSE) {
            notes.push(
              `${b.name} gave a wrong result for ${typeName} ${shape.label} (NMSE ${error.toExponential(1)}): left out of the ratios`,
            );
          }
          rows.push({
            type: typeName,
            shape,
            backend: b.name,
            msMedian,
            msMin: Math.min(...ms),
            iterations: ms.length,
            kernelMs: kernelMs.length ? median(kernelMs) : null,
            gflops: flops / (msMedian * 1e6),
            gbps: handle.weightBytes / (msMedian * 1e6),
            weightBytes: handle.weightBytes,
            nmse: error,
            nmseAgainst: against ? 'reference' : 'ours-webgpu',
            ...(error > WRONG_NMSE ? { wrong: true } : {}),
            ...(handle.kernelFeatures ? { kernelFeatures: handle.kernelFeatures } : {}),
            ...(handle.llama ? { integerDot: handle.integerDot ?? null } : {}),
            ...(handle.forms ? { forms: handle.forms } : {}),
            ...(handle.regime ? { regime: handle.regime } : {}),
          });
        } catch (e) {
          // A backend that cannot run this case (no device, EP missing, a kernel that fails to build) is skipped, with its reason.
          notes.push(`${b.name} skipped for ${typeName} ${shape.label}: ${message(e)}`);
        } finally {
          await handle?.dispose();
        }
      }
      const ours = rows.find((r) => r.type === typeName && r.shape === shape && r.backend === 'ours-webgpu');
      const wasm = rows.find((r) => r.type === typeName && r.shape === shape && r.backend === 'fallback-wasm');
      if (ours || wasm) {
        const choice = chooseBackend({
          ...(ours ? { webgpu: { gflops: ours.gflops, isFallbackAdapter } } : {}),
          ...(wasm ? { wasm: { gflops: wasm.gflops } } : {}),
        });
        notes.push(`chooseBackend(${typeName}, ${shape.label}; ours-webgpu vs fallback-wasm): ${choice.backend} (${choice.reason})`);
      }
    }
  }
  device?.destroy();
  const report: BenchReport = { config: cfg, env, rows, notes, text: '' };
  report.text = formatReport(report);
  return report;
}

window.runKernelBench = async (config) => {
  try {
    return await run(config);
  } catch (e) {
    const report: BenchReport = {
      config,
      env: null,
      rows: [],
      notes: [`bench failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}`],
      text: '',
    };
    report.text = formatReport(report);
    return report;
  }
};

// --serve mode: the page runs itself with the config the server embedded, and shows the report.
const params = new URLSearchParams(location.search);
if (params.get('auto') === '1') {
  const pre = document.createElement('pre');
  pre.textContent = 'running the kernel benchmark… (the first WebGPU/ORT calls compile shaders)';
  document.body.append(pre);
  const cfg = (window as unknown as { BENCH_CONFIG: BenchConfig }).BENCH_CONFIG;
  void window.runKernelBench(cfg).then((r) => {
    pre.textContent = r.text;
    console.log(r.text);
  });
}
