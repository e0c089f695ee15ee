/**
 * Browser entry for the kernel tests: `window.runKernelGrid(cases)` runs seeded grid cases (harness/kernel-grid.ts,
 * chosen by the test) on the page's WebGPU adapter; `window.runEngineStart(numerics)` starts an ExpertEngine with both
 * real backends (our kernels on WebGPU, onnxruntime-web's wasm served under /ort/) in those numerics and reports its
 * choice and the chosen backend's accuracy against the reference of the same numerics. Every call uses one device per
 * page (opened on the first): the runtime builds each pipeline once per device, and on SwiftShader a batched pipeline
 * takes seconds to build, so the grids and the engine share what the others built.
 */
import * as ort from 'onnxruntime-web';
import { GGMLType } from '../../gguf/quant-types.ts';
import { quantize } from '../../gguf/quantize.ts';
import { requestExpertDevice, type ExpertDevice } from '../../shaders/device.ts';
import { ExpertEngine, type EngineReport } from '../../shaders/engine.ts';
import { OrtExpertFallback } from '../../shaders/ort/fallback.ts';
import { dequantizeExperts, nmse, referenceCall } from '../../shaders/reference/expert-call.ts';
import { compareLlama } from '../../shaders/reference/llama-ties.ts';
import type { Numerics } from '../../protocol/numerics.ts';
import { ExpertRuntime, type ExpertSlice } from '../../shaders/runtime.ts';
import { mulberry32 } from '../../shaders/random.ts';
import { runGridCase, type GridCase, type GridResult } from '../../harness/kernel-grid.ts';

interface GridOutput {
  adapter: Record<string, unknown> | null;
  features: string[];
  /** navigator.gpu.wgslLanguageFeatures. */
  wgslLanguageFeatures: string[];
  results: GridResult[];
  skipped: { case: GridCase; reason: string }[];
  error?: string;
}

interface EngineOutput {
  report: EngineReport;
  nmse: number;
  /** llama numerics: the NMSE beyond the ties of h (compareLlama). */
  beyondTies?: number;
  error?: string;
}

declare global {
  interface Window {
    runKernelGrid: (cases: GridCase[]) => Promise<GridOutput>;
    runEngineStart: (numerics?: Numerics) => Promise<EngineOutput>;
  }
}

let opening: Promise<ExpertDevice | string> | undefined;

/** The page's device (one for every call; a lost one is opened again), or why there is none. */
function openDevice(): Promise<ExpertDevice | string> {
  opening ??= (async () => {
    if (!navigator.gpu) return 'navigator.gpu is missing (WebGPU disabled?)';
    const got = await requestExpertDevice(navigator.gpu, 'kernels-entry device');
    if (!got) return 'requestAdapter() returned null';
    void got.device.lost.then(() => {
      opening = undefined;
    });
    return got;
  })();
  return opening;
}

window.runKernelGrid = async (cases) => {
  const opened = await openDevice();
  const languageFeatures = [...(navigator.gpu?.wgslLanguageFeatures ?? [])];
  if (typeof opened === 'string')
    return { adapter: null, features: [], wgslLanguageFeatures: languageFeatures, results: [], skipped: [], error: opened };
  const { adapter, device } = opened;
  const results: GridResult[] = [];
  const skipped: GridOutput['skipped'] = [];
  let seed = 1;
  for (const c of cases) {
    const missing = c.features === 'auto' || !c.features ? undefined : c.features.find((f) => !device.features.has(f));
    if (missing) {
      skipped.push({ case: c, reason: `the adapter has no '${missing}' feature` });
      continue;
    }
    if (c.integerDot === 'packed' && !languageFeatures.includes('packed_4x8_integer_dot_product')) {
      skipped.push({ case: c, reason: 'navigator.gpu.wgslLanguageFeatures lacks packed_4x8_integer_dot_product' });
      continue;
    }
    results.push(await runGridCase(device, c, seed++));
  }
  const info = adapter.info;
  return {
    adapter: {
      vendor: info.vendor,
      architecture: info.architecture,
      description: info.description,
      isFallbackAdapter: (info as { isFallbackAdapter?: boolean }).isFallbackAdapter ?? null,
    },
    features: [...adapter.features],
    wgslLanguageFeatures: languageFeatures,
    results,
    skipped,
  };
};

window.runEngineStart = async (numerics: Numerics = 'exact') => {
  const r = mulberry32(77);
  const nEmbd = 256;
  const ff = 256;
  const nExpert = 4;
  const type = GGMLType.Q4_K;
  const values = (n: number, scale: number): Float32Array => new Float32Array(n).map(() => (r() * 2 - 1) * scale);
  const matrix = (n: number, scale: number): Uint8Array => quantize(type, values(n, scale));
  const slice: ExpertSlice = {
    nEmbd,
    ff,
    nExpert,
    types: { gate: type, up: type, down: type },
    gate: matrix(nExpert * ff * nEmbd, 1 / 16),
    up: matrix(nExpert * ff * nEmbd, 1 / 16),
    down: matrix(nExpert * nEmbd * ff, 1 / 16),
  };
  ort.env.wasm.wasmPaths = '/ort/';
  ort.env.wasm.numThreads = 1;
  const opened = await openDevice();
  const engine = await ExpertEngine.start(slice, {
    numerics,
    ...(typeof opened === 'string'
      ? {}
      : {
          webgpu: async (s, o) => ({
            runtime: await ExpertRuntime.create(opened.device, s, { numerics: o.numerics }),
            isFallbackAdapter: opened.isFallbackAdapter,
          }),
        }),
    wasm: (s, o) => OrtExpertFallback.create(ort, s, { numerics: o.numerics }),
  });
  try {
    // One decode call on the chosen backend against the float64 reference.
    const rows = values(2 * nEmbd, 1);
    const ids = Int32Array.of(0, 3, 2, 1);
    const probs = Float32Array.of(0.7, 0.3, 0.6, 0.4);
    const got = await engine.compute(rows, ids, probs, 2, 2);
    const call = { rows, ids, probs, nTokens: 2, nUsed: 2 };
    const experts = dequantizeExperts(slice);
    if (numerics === 'llama') {
      const r = compareLlama(experts, call, got);
      return { report: engine.report, nmse: r.nmse, beyondTies: r.beyondTies };
    }
    return { report: engine.report, nmse: nmse(got, referenceCall(experts, call)) };
  } finally {
    await engine.dispose();
  }
};
