/**
 * From a downloaded slice to a running ExpertEngine, on whatever this machine has: WebGPU (navigator.gpu in a
 * browser, npm `webgpu` in Node), the wasm fallback, or both (the engine measures and keeps the faster). The wasm
 * fallback is our SIMD kernel (shaders/wasm/: routed pairs only, from the quantized bytes, memory ≈ the slice) when
 * the environment hands in its compiled module (`wasmKernel`), else onnxruntime's dense graph (shaders/ort/: every
 * expert for every row, 4 bytes per weight), kept only for environments that do not load the kernel yet.
 * Browser-safe: the caller hands in its GPU object, the compiled kernel and/or its onnxruntime module.
 */
import { readExpertSliceBytes } from '../gguf/expert-slice.ts';
import { requestExpertDevice, type ExpertDevice } from '../shaders/device.ts';
import { ExpertEngine, type ExpertEngineOptions } from '../shaders/engine.ts';
import { LLAMA_FALLBACK_TYPES, ORT_VARIANT_FEATURES, OrtExpertFallback, type OrtModuleLike } from '../shaders/ort/fallback.ts';
import {
  DEFAULT_TOKENS_PER_PASS,
  PASS_TOP_K,
  WASM_FALLBACK_TYPES,
  WASM_VARIANT_FEATURES,
  WasmExpertFallback,
} from '../shaders/wasm/fallback.ts';
import { KERNEL_TYPES } from '../shaders/expert-ffn.ts';
import { tensorTypeNames } from '../protocol/tensor-types.ts';
import type { Numerics } from '../protocol/numerics.ts';
import { ExpertRuntime, WGSL_VARIANT_FEATURES, type ExpertSlice } from '../shaders/runtime.ts';
import { VARIANT_FEATURES, type VariantFeature } from '../protocol/variant.ts';
import { VolunteerError, errorMessage } from './errors.ts';
import type { BackendPreference, DeviceReport } from './state.ts';

export type BackendChoice = BackendPreference;

export interface ComputeEnvironment {
  /** `navigator.gpu`, or `create([])` of npm `webgpu`; null where there is none. */
  gpu: GPU | null;
  /** onnxruntime-web, its wasm paths already set; null to go without it (the fallback then needs wasmKernel). */
  ort: OrtModuleLike | null;
  /**
   * The wasm fallback's kernel, compiled (shaders/wasm/build.ts `nodeExpertKernel()` in Node; a page compiles the
   * bytes its bundler inlines, shaders/wasm/vite-plugin.ts). When set it is the wasm fallback and `ort` is not used.
   */
  wasmKernel?: WebAssembly.Module | null;
  backend: BackendChoice;
}

/**
 * The expert FFN variant features this client computes (protocol/variant.ts), for its hello: those every backend it
 * may serve with computes — WebGPU (where a device is), the wasm kernel (where loaded), or else the onnxruntime
 * fallback — since which one serves is measured only once a slice is assigned.
 */
export function computedVariants(env: Pick<ComputeEnvironment, 'backend' | 'wasmKernel' | 'ort'>, hasDevice: boolean): VariantFeature[] {
  const lists: (readonly VariantFeature[])[] = [];
  if (hasDevice && env.backend !== 'wasm') lists.push(WGSL_VARIANT_FEATURES);
  if (env.backend !== 'webgpu') {
    if (env.wasmKernel) lists.push(WASM_VARIANT_FEATURES);
    else if (env.ort) lists.push(ORT_VARIANT_FEATURES);
  }
  if (lists.length === 0) return ['silu'];
  return VARIANT_FEATURES.filter((f) => lists.every((l) => l.includes(f)));
}

/**
 * The ggml weight types this client reads (protocol/tensor-types.ts), for its hello: those every backend it may
 * serve with reads — the WGSL kernels (where a device is), the wasm kernel (where loaded), or else the onnxruntime
 * fallback in llama numerics (the narrower of its two lists) — as computedVariants, since which backend serves is
 * measured only once a slice is assigned. The market offers it only layers whose gate, up and down it reads.
 */
export function computedTypes(env: Pick<ComputeEnvironment, 'backend' | 'wasmKernel' | 'ort'>, hasDevice: boolean): string[] {
  const lists: (readonly number[])[] = [];
  if (hasDevice && env.backend !== 'wasm') lists.push(KERNEL_TYPES.types);
  if (env.backend !== 'webgpu') {
    if (env.wasmKernel) lists.push(WASM_FALLBACK_TYPES.types);
    else if (env.ort) lists.push(LLAMA_FALLBACK_TYPES.types);
  }
  if (lists.length === 0) return [];
  const first = lists[0] as readonly number[];
  return tensorTypeNames(first.filter((t) => lists.every((l) => l.includes(t))));
}

/** The ORT dense fallback keeps each weight as an f32 (shaders/ort/expert-ffn-graph.ts): its memory per slice. */
export function wasmBytesFor(slice: Pick<ExpertSlice, 'nEmbd' | 'ff' | 'nExpert'>): number {
  return 3 * slice.nExpert * slice.ff * slice.nEmbd * 4;
}

/**
 * The kernel fallback's memory per slice: the slice's own bytes plus its per-call scratch (a pass holds ≤
 * DEFAULT_TOKENS_PER_PASS tokens and ≤ DEFAULT_TOKENS_PER_PASS × PASS_TOP_K pairs whatever a frame's top-k: rows, h
 * and each pair's down output in f32) and 1 MiB for the rest.
 */
export function kernelWasmBytesFor(slice: Pick<ExpertSlice, 'nEmbd' | 'ff' | 'gate' | 'up' | 'down' | 'biases' | 'scales'>): number {
  return sliceBytes(slice) + kernelOverheadBytes(slice);
}

/** A slice's own bytes: its matrices and, for a biased variant, its float32 biases. */
export function sliceBytes(slice: Pick<ExpertSlice, 'gate' | 'up' | 'down' | 'biases' | 'scales'>): number {
  const vectors = (v: { gate: Float32Array; up: Float32Array; down: Float32Array } | undefined): number =>
    v ? 4 * (v.gate.length + v.up.length + v.down.length) : 0;
  return slice.gate.length + slice.up.length + slice.down.length + vectors(slice.biases) + vectors(slice.scales);
}

/** What the kernel fallback holds beyond the slice's own bytes: its per-call scratch and 1 MiB. */
export function kernelOverheadBytes(shape: Pick<ExpertSlice, 'nEmbd' | 'ff'>): number {
  const pairs = DEFAULT_TOKENS_PER_PASS * PASS_TOP_K;
  return 4 * (2 * DEFAULT_TOKENS_PER_PASS * shape.nEmbd + pairs * (shape.ff + shape.nEmbd)) * 1.5 + 2 ** 20;
}

/**
 * What a held slice takes of the budget: what its engine holds (GPU buffers, the wasm kernel's memory), where the
 * engine can tell, else what the budget was charged when it opened (the onnxruntime fallback). The caller keeps the
 * largest it saw: a frame larger than the start-up measurement's grows the scratch, and wasm memory never shrinks.
 */
export function heldMemoryBytes(opened: Pick<OpenedEngine, 'budgetBytes' | 'engine'>): number {
  return opened.engine.heldBytes() ?? opened.budgetBytes;
}

/** Opens the device once per client (a GPUDevice outlives the slices it computes) and describes it for the page. */
export async function probeDevice(
  env: ComputeEnvironment,
  memoryBudgetBytes: number,
): Promise<{ report: DeviceReport; device: ExpertDevice | null }> {
  let device: ExpertDevice | null = null;
  let why = '';
  if (env.backend !== 'wasm') {
    if (!env.gpu) why = 'no WebGPU in this browser';
    else {
      try {
        device = await requestExpertDevice(env.gpu, 'expertswarm volunteer');
        if (!device) why = 'WebGPU found no adapter';
      } catch (e) {
        why = `WebGPU failed: ${errorMessage(e)}`;
      }
    }
  }
  const info = device?.adapter.info;
  const report: DeviceReport = {
    webgpu: device !== null,
    adapter: info
      ? {
          vendor: info.vendor,
          architecture: info.architecture,
          description: info.description,
          isFallbackAdapter: device?.isFallbackAdapter ?? false,
        }
      : null,
    limits: device
      ? { maxStorageBufferBindingSize: device.device.limits.maxStorageBufferBindingSize, maxBufferSize: device.device.limits.maxBufferSize }
      : null,
    features: device ? [...device.device.features].map(String).sort() : [],
    memoryBudgetBytes,
    backend: null,
    backendReason: device ? 'measured on the first slice' : env.backend === 'wasm' ? 'wasm chosen by the user' : `${why} → wasm`,
    gflops: null,
    variants: computedVariants(env, device !== null),
  };
  return { report, device };
}

export interface OpenedEngine {
  engine: ExpertEngine;
  slice: ExpertSlice;
  /** What the budget was charged for it: the kept backend's estimate (sliceBytes on WebGPU, the wasm figures else). */
  budgetBytes: number;
  layer: number;
  expertBegin: number;
  expertEnd: number;
}

/**
 * Parses the slice, drops the backends it does not fit, and starts the engine. Throws VolunteerError
 * SLICE_DOES_NOT_FIT or NO_BACKEND.
 */
export async function openEngine(
  bytes: Uint8Array,
  numerics: Numerics,
  env: ComputeEnvironment,
  device: ExpertDevice | null,
  memoryBudgetBytes: number,
): Promise<OpenedEngine> {
  const { info, gate, up, down, biases, scales } = await readExpertSliceBytes(bytes);
  const slice: ExpertSlice = {
    nEmbd: info.nEmbd,
    ff: info.ff,
    nExpert: info.expertEnd - info.expertBegin,
    types: { ...info.types },
    gate,
    up,
    down,
    ...(info.variant && { variant: info.variant }),
    ...(biases && { biases }),
    ...(scales && { scales }),
  };
  const gpuBytes = sliceBytes(slice);
  const useGpu = device !== null && env.backend !== 'wasm' && gpuBytes <= memoryBudgetBytes;
  const kernel = env.wasmKernel ?? null;
  const wasmBytes = kernel ? kernelWasmBytesFor(slice) : wasmBytesFor(slice);
  const useWasm = (kernel !== null || env.ort !== null) && env.backend !== 'webgpu' && wasmBytes <= memoryBudgetBytes;
  if (!useGpu && !useWasm) {
    const need = device && env.backend !== 'wasm' ? gpuBytes : wasmBytes;
    const why = device || env.backend === 'wasm' || kernel ? '' : ' (no WebGPU: the onnxruntime fallback keeps f32 weights)';
    throw new VolunteerError(
      'SLICE_DOES_NOT_FIT',
      `the slice needs ${mb(need)} MB and the memory budget is ${mb(memoryBudgetBytes)} MB${why}`,
    );
  }
  const options: ExpertEngineOptions = { numerics };
  const gpu: ExpertEngineOptions['webgpu'] =
    useGpu && device
      ? async (s, o) => ({
          runtime: await ExpertRuntime.create(device.device, s, { numerics: o.numerics, label: `layer ${info.layer}` }),
          isFallbackAdapter: device.isFallbackAdapter,
        })
      : undefined;
  // A software adapter never wins while wasm works (backend-choice.ts): where the user left the choice to us and wasm
  // fits, it is built only if wasm fails — SwiftShader's pipelines and timing cost seconds of start-up for a backend
  // that cannot be kept beside a working wasm.
  const softwareLater = gpu !== undefined && device?.isFallbackAdapter === true && env.backend === 'auto' && useWasm;
  if (softwareLater) {
    options.webgpu = async () => {
      throw new Error('a fallback (software) adapter: built only if wasm fails');
    };
  } else if (gpu) options.webgpu = gpu;
  const ort = env.ort;
  if (useWasm && kernel) options.wasm = async (s, o) => WasmExpertFallback.create(kernel, s, { numerics: o.numerics });
  else if (useWasm && ort) options.wasm = async (s, o) => OrtExpertFallback.create(ort, s, { numerics: o.numerics });
  const opened = (engine: ExpertEngine): OpenedEngine => ({
    engine,
    slice,
    budgetBytes: engine.backend === 'webgpu' ? gpuBytes : wasmBytes,
    layer: info.layer,
    expertBegin: info.expertBegin,
    expertEnd: info.expertEnd,
  });
  try {
    return opened(await ExpertEngine.start(slice, options));
  } catch (e) {
    if (!softwareLater) throw new VolunteerError('NO_BACKEND', `no backend could compute the slice: ${errorMessage(e)}`);
    // wasm failed: the software adapter is better than nothing.
    try {
      return opened(await ExpertEngine.start(slice, { numerics, webgpu: gpu }));
    } catch (again) {
      throw new VolunteerError('NO_BACKEND', `no backend could compute the slice: ${errorMessage(e)}; then ${errorMessage(again)}`);
    }
  }
}

const mb = (bytes: number): string => (bytes / 2 ** 20).toFixed(1);
