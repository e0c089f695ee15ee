/**
 * Browser entry of `npm run bench:kernels`: on one page, times our WGSL expert FFN (ExpertRuntime on WebGPU) in exact
 * and in llama numerics (float and int8 dot products) against onnxruntime-web's 'webgpu' and 'wasm' execution
 * providers on the same slices and calls, and checks every backend's output against the CPU reference of its
 * numerics.
 *
 * `window.runKernelBench(config)` resolves with the results and the printed report; opened with `?auto=1` (the
 * `--serve` mode, for a desktop browser) the page runs it itself and shows the report.
 */
import * as ort from 'onnxruntime-web';
import { GGMLType } from '../../gguf/quant-types.ts';
import { quantize } from '../../gguf/quantize.ts';
import { chooseBackend } from '../../shaders/backend-choice.ts';
import { callFlops, median, syntheticCall, type ExpertComputer } from '../../shaders/computer.ts';
import { dequantizeExperts, nmse, referenceCall } from '../../shaders/reference/expert-call.ts';
import { requestExpertDevice } from '../../shaders/device.ts';
import { ExpertRuntime, type ExpertSlice } from '../../shaders/runtime.ts';
import { OrtExpertFallback } from '../../shaders/ort/fallback.ts';
import { formatReport, type BackendName, type BenchConfig, type BenchReport, type BenchRow, type BenchShape } from './report.ts';
import { mulberry32 as rng } from '../../test/support/random.ts';

declare global {
  interface Window {
    runKernelBench: (config: BenchConfig) => Promise<BenchReport>;
  }
}

function makeSlice(type: GGMLType, s: BenchShape, seed: number): ExpertSlice {
  const r = rng(seed);
  const n = s.nExpert * s.nEmbd * s.ff;
  const mat = (scale: number): Uint8Array =>
    quantize(
      type,
      new Float32Array(n).map(() => (r() * 2 - 1) * scale),
    );
  const gate = mat(1 / Math.sqrt(s.nEmbd));
  const up = mat(1 / Math.sqrt(s.nEmbd));
  const down = mat(1 / Math.sqrt(s.ff));
  return { nEmbd: s.nEmbd, ff: s.ff, nExpert: s.nExpert, types: { gate: type, up: type, down: type }, gate, up, down };
}

const message = (e: unknown): string => (e instanceof Error ? e.message : String(e)).split('\n')[0]!.slice(0, 300);

async function timeCalls(
  rt: ExpertComputer,
  s: BenchShape,
  call: ReturnType<typeof syntheticCall>,
  cfg: BenchConfig,
): Promise<{ ms: number[]; out: Float32Array }> {
  let out: Float32Array = new Float32Array(0);
  for (let i = 0; i < cfg.warmup; i++) out = await rt.compute(call.rows, call.ids, call.probs, s.nTokens, s.nUsed);
  const ms: number[] = [];
  for (let i = 0; i < cfg.iterations; i++) {
    const t0 = performance.now();
    out = await rt.compute(call.rows, call.ids, call.probs, s.nTokens, s.nUsed);
    ms.push(performance.now() - t0);
  }
  return { ms, out };
}

/** Distinct experts a call routes to. */
function expertsTouched(ids: Int32Array): number {
  return new Set(ids).size;
}

async function run(cfg: BenchConfig): Promise<BenchReport> {
  const notes: string[] = [];
  const rows: BenchRow[] = [];
  const env: BenchReport['env'] = {
    userAgent: navigator.userAgent,
    hardwareConcurrency: navigator.hardwareConcurrency,
    crossOriginIsolated,
    ortVersion: ort.env.versions.web ?? '?',
    ortThreads: 1,
    adapter: null,
  };

  ort.env.wasm.wasmPaths = cfg.wasmPaths;
  ort.env.wasm.numThreads = cfg.ortThreads > 0 ? cfg.ortThreads : crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency) : 1;
  if (ort.env.wasm.numThreads > 1 && !crossOriginIsolated) {
    notes.push(`ort wasm: ${ort.env.wasm.numThreads} threads asked, but the page is not cross-origin isolated: onnxruntime uses 1`);
  }
  env.ortThreads = ort.env.wasm.numThreads;

  let device: GPUDevice | null = null;
  let isFallbackAdapter = false;
  if (!navigator.gpu) {
    notes.push('ours (WebGPU): navigator.gpu is missing (WebGPU disabled?)');
  } else {
    const got = await requestExpertDevice(navigator.gpu, 'kernel bench device');
    if (!got) {
      notes.push('ours (WebGPU): requestAdapter() returned null');
    } else {
      const info = got.adapter.info;
      isFallbackAdapter = got.isFallbackAdapter;
      env.adapter = { vendor: info.vendor, architecture: info.architecture, description: info.description, isFallbackAdapter };
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
      const experts = dequantizeExperts(slice);
      const want = referenceCall(experts, { ...call, nTokens: shape.nTokens, nUsed: shape.nUsed });
      const wantLlama = referenceCall(experts, { ...call, nTokens: shape.nTokens, nUsed: shape.nUsed }, 'llama');
      const touched = expertsTouched(call.ids);
      const quantBytesPerExpert = (slice.gate.length + slice.up.length + slice.down.length) / shape.nExpert;
      const f32Bytes = shape.nExpert * 3 * shape.nEmbd * shape.ff * 4;
      const flops = callFlops(shape);

      type Handle = { rt: ExpertComputer; dispose: () => unknown; kernelFeatures?: string[]; integerDot?: string | null; llama?: boolean };
      const oursWith = (features: 'auto' | [], llama?: 'float' | 'auto') => async (): Promise<Handle> => {
        if (!device) throw new Error('no WebGPU device');
        const rt = await ExpertRuntime.create(device, slice, {
          features,
          ...(llama ? { numerics: 'llama' as const, integerDot: llama } : {}),
        });
        const caps = rt.capabilities();
        return {
          rt,
          dispose: () => rt.dispose(),
          kernelFeatures: caps.kernelFeatures,
          ...(llama ? { integerDot: caps.integerDot, llama: true } : {}),
        };
      };
      const hasVariants = device !== null && (device.features.has('subgroups') || device.features.has('shader-f16'));
      const backends: { name: BackendName; weightBytes: number; create: () => Promise<Handle> }[] = [
        { name: 'ours-webgpu', weightBytes: touched * quantBytesPerExpert, create: oursWith('auto') },
        ...(hasVariants ? [{ name: 'ours-base' as BackendName, weightBytes: touched * quantBytesPerExpert, create: oursWith([]) }] : []),
        { name: 'ours-llama-float', weightBytes: touched * quantBytesPerExpert, create: oursWith('auto', 'float') },
        { name: 'ours-llama-int8', weightBytes: touched * quantBytesPerExpert, create: oursWith('auto', 'auto') },
        ...(['webgpu', 'wasm'] as const).map((ep) => ({
          name: `ort-${ep}` as BackendName,
          // The ORT graph is dense: every expert's float32 weights are read on every call.
          weightBytes: f32Bytes,
          create: async () => {
            const rt = await OrtExpertFallback.create(ort, slice, { executionProviders: [ep] });
            return { rt, dispose: () => rt.dispose() };
          },
        })),
      ];

      for (const b of backends) {
        let handle: Handle | null = null;
        try {
          handle = await b.create();
          const { ms, out } = await timeCalls(handle.rt, shape, call, cfg);
          const msMedian = median(ms);
          rows.push({
            type: typeName,
            shape,
            backend: b.name,
            msMedian,
            msMin: Math.min(...ms),
            iterations: ms.length,
            gflops: flops / (msMedian * 1e6),
            gbps: b.weightBytes / (msMedian * 1e6),
            weightBytes: b.weightBytes,
            nmse: nmse(out, handle.llama ? wantLlama : want),
            ...(handle.kernelFeatures ? { kernelFeatures: handle.kernelFeatures } : {}),
            ...(handle.llama ? { integerDot: handle.integerDot ?? null } : {}),
          });
        } catch (e) {
          // A backend that cannot run this case (no device, EP missing, a kernel that fails to build) is skipped, with its reason.
          notes.push(`${b.name} skipped for ${typeName} ${shape.label}: ${message(e)}`);
        } finally {
          await handle?.dispose();
        }
      }
      const ours = rows.find((r) => r.type === typeName && r.shape === shape && r.backend === 'ours-webgpu');
      const wasm = rows.find((r) => r.type === typeName && r.shape === shape && r.backend === 'ort-wasm');
      if (ours || wasm) {
        const choice = chooseBackend({
          ...(ours ? { webgpu: { gflops: ours.gflops, isFallbackAdapter } } : {}),
          ...(wasm ? { wasm: { gflops: wasm.gflops } } : {}),
        });
        notes.push(`chooseBackend(${typeName}, ${shape.label}): ${choice.backend} (${choice.reason})`);
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
