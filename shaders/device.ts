/**
 * The GPUDevice the expert runtime wants: the adapter's own binding limits (a device otherwise gets the WebGPU
 * defaults, 128 MiB per binding) and the optional features its kernel variants use ('subgroups', 'shader-f16'),
 * where the adapter has them.
 *
 * @example
 *   const got = await requestExpertDevice(navigator.gpu);   // or create([]) from the npm `webgpu` package in Node
 *   if (got) { const rt = await ExpertRuntime.create(got.device, slice); … }
 */
import type { KernelFeature } from './expert-ffn.ts';

const OPTIONAL_FEATURES: readonly KernelFeature[] = ['subgroups', 'shader-f16'];

export interface ExpertDevice {
  adapter: GPUAdapter;
  device: GPUDevice;
  /** A software adapter (SwiftShader, WARP…): it never wins while the wasm fallback works (backend-choice.ts). */
  isFallbackAdapter: boolean;
}

/**
 * A device for the expert kernels from a fresh adapter, or null when there is no adapter. `extraFeatures` are asked
 * for too where the adapter has them (the benchmarks add 'timestamp-query').
 */
export async function requestExpertDevice(
  gpu: GPU,
  label = 'expert device',
  extraFeatures: readonly GPUFeatureName[] = [],
): Promise<ExpertDevice | null> {
  const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!adapter) return null;
  // Chromium reports it on adapter.info; older implementations (no adapter.info before Chrome 127) on the adapter.
  const info = (adapter as { info?: GPUAdapterInfo & { isFallbackAdapter?: boolean } }).info;
  const isFallbackAdapter = info?.isFallbackAdapter ?? (adapter as { isFallbackAdapter?: boolean }).isFallbackAdapter ?? false;
  const device = await adapter.requestDevice({
    label,
    requiredFeatures: [...OPTIONAL_FEATURES, ...extraFeatures].filter((f) => adapter.features.has(f)),
    requiredLimits: {
      maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
      maxBufferSize: adapter.limits.maxBufferSize,
    },
  });
  return { adapter, device, isFallbackAdapter };
}
