/**
 * WebGPU in Node for tests and benches: npm `webgpu` (Dawn), on Chromium's SwiftShader ICD where no other Vulkan
 * driver is named. The GPU object lives at module scope for the life of the process: dawn.node frees its instance
 * when that object is collected, even while a device made from it is in use (docs/kernels.md).
 *
 *   const gpu = await nodeGpu();
 *   const adapter = await gpu.requestAdapter();
 */
import { existsSync } from 'node:fs';
import { requestExpertDevice } from '../shaders/device.ts';

export const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

let gpu: GPU | undefined;

/** The process's GPU object (created on first call, WebGPU's globals installed). */
export async function nodeGpu(): Promise<GPU> {
  if (gpu) return gpu;
  // The Vulkan loader reads this when the instance is created, so setting it here still counts.
  if (!process.env.VK_ICD_FILENAMES && existsSync(SWIFTSHADER_ICD)) process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
  const webgpu = await import('webgpu');
  Object.assign(globalThis, webgpu.globals);
  gpu = webgpu.create([]);
  return gpu;
}

/** What a missing adapter means on these machines, and what to install. */
export const NO_ADAPTER_HELP =
  'requestAdapter() returned null: no WebGPU adapter. Install libvulkan1 and Chromium (for its SwiftShader ICD at ' +
  `${SWIFTSHADER_ICD}) and run with VK_ICD_FILENAMES=${SWIFTSHADER_ICD}`;

/** A device as the expert runtime asks for it (shaders/device.ts) on the process's GPU; no adapter is an error. */
export async function nodeExpertDevice(label: string): Promise<GPUDevice> {
  const got = await requestExpertDevice(await nodeGpu(), label);
  if (!got) throw new Error(NO_ADAPTER_HELP);
  return got.device;
}
