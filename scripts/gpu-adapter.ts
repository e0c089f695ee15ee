/**
 * The GPU bundle's first, cheap check: which adapter Dawn (npm `webgpu`) finds through Vulkan, and whether it is a real
 * GPU. Prints one `adapter:` line, the features and the limits the kernels care about; exits 3 on a software adapter
 * (SwiftShader, llvmpipe) unless `--allow-software`, 2 when there is no adapter at all. Also says whether the prebuilt
 * wasm kernel is found where the volunteers will look for it.
 *
 *   node app/dist/gpu-adapter.js [--allow-software]
 */
import { existsSync } from 'node:fs';
import { create, globals } from 'webgpu';
import { kernelDigest } from '../shaders/wasm/build.ts';
import { describeAdapter, isSoftwareAdapter } from './gpu-adapter-check.ts';

// The wasm kernel travels prebuilt (the host has no compiler): its cache key must match here, or the volunteers' wasm
// fallback would quietly become onnxruntime's dense graph.
for (const variant of ['simd', 'relaxed-simd'] as const) {
  const file = new URL(`../.cache/wasm/expert-kernel-${variant}-${kernelDigest(undefined, variant)}.wasm`, import.meta.url);
  console.log(`wasm kernel ${variant}: ${existsSync(file) ? 'prebuilt' : 'MISSING'} (${file.pathname})`);
}

Object.assign(globalThis, globals);
const allowSoftware = process.argv.includes('--allow-software');
console.log(`VK_DRIVER_FILES=${process.env.VK_DRIVER_FILES ?? ''} VK_ICD_FILENAMES=${process.env.VK_ICD_FILENAMES ?? ''}`);
const gpu = create([]);
// dawn.node frees its instance when this object is garbage-collected, even while its device is in use (docs/kernels.md).
(globalThis as { expertswarmGpu?: GPU }).expertswarmGpu = gpu;
const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
if (!adapter) {
  console.log('adapter: none (no WebGPU adapter: is the Vulkan loader installed and VK_DRIVER_FILES right?)');
  process.exit(2);
}
const info = adapter.info as GPUAdapterInfo & { isFallbackAdapter?: boolean };
const facts = {
  vendor: info.vendor,
  architecture: info.architecture,
  device: info.device,
  description: info.description,
  isFallbackAdapter: info.isFallbackAdapter,
};
console.log(describeAdapter(facts));
console.log(`features: ${[...adapter.features].sort().join(' ')}`);
const l = adapter.limits;
console.log(
  `limits: maxStorageBufferBindingSize ${l.maxStorageBufferBindingSize}, maxBufferSize ${l.maxBufferSize}, ` +
    `maxComputeWorkgroupSizeX ${l.maxComputeWorkgroupSizeX}, maxComputeInvocationsPerWorkgroup ${l.maxComputeInvocationsPerWorkgroup}`,
);
if (isSoftwareAdapter(facts)) {
  if (!allowSoftware) {
    console.log('STOP: a software adapter, not a GPU (pass --allow-software to go on anyway)');
    process.exit(3);
  }
  console.log("software adapter allowed (--allow-software): the numbers that follow are not a GPU's");
}
// dawn.node keeps the process alive while its instance lives.
process.exit(0);
