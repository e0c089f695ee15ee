/**
 * A device on Dawn's Null backend (npm `webgpu`): Tint's full WGSL and pipeline validation, nothing executes, no
 * Vulkan or browser needed — what the compile tests build every kernel variant on.
 */
import assert from 'node:assert/strict';

// Kept for the whole process: dawn.node frees its instance once this object is garbage-collected, even while a
// device made from it is alive, and the process then crashes (docs/kernels.md).
let gpu: GPU | undefined;

export async function nullDevice(label: string, requiredFeatures: GPUFeatureName[]): Promise<{ gpu: GPU; device: GPUDevice }> {
  const webgpu = await import('webgpu');
  Object.assign(globalThis, webgpu.globals);
  gpu ??= webgpu.create(['backend=null']);
  const adapter = await gpu.requestAdapter();
  assert.ok(adapter, "Dawn's Null backend gave no adapter");
  for (const f of requiredFeatures) assert.ok(adapter.features.has(f), `the Null adapter lacks ${f}`);
  return { gpu, device: await adapter.requestDevice({ label, requiredFeatures }) };
}
