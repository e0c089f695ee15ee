/**
 * What the headless volunteer computes with in Node: npm `webgpu` (Dawn; on a machine without a GPU, SwiftShader
 * through Chromium's Vulkan ICD when it is installed) and the wasm fallback (our SIMD kernel, shaders/wasm/;
 * onnxruntime-web's dense graph only if the kernel cannot be built), the same two backends a browser tab has. And
 * where it keeps its key pair: a file beside the shard cache.
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { homedir } from 'node:os';
import { setFlagsFromString } from 'node:v8';
import type { OrtModuleLike } from '../../shaders/ort/fallback.ts';
import { nodeExpertKernel } from '../../shaders/wasm/build.ts';
import { relaxedSimdSupported } from '../../shaders/wasm/features.ts';
import type { BackendChoice, ComputeEnvironment } from '../engine-open.ts';
import type { IdentityStore } from '../identity.ts';

const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';

/**
 * dawn.node frees its instance when the GPU object is collected, even while a device made from it is in use:
 * the object lives at module scope for the life of the process.
 */
let gpu: GPU | null = null;

export async function nodeEnvironment(backend: BackendChoice): Promise<ComputeEnvironment> {
  if (backend !== 'wasm' && !gpu) {
    // The Vulkan loader reads this when the instance is created, so setting it here still counts.
    if (!process.env.VK_ICD_FILENAMES && existsSync(SWIFTSHADER_ICD)) process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
    try {
      const webgpu = await import('webgpu');
      Object.assign(globalThis, webgpu.globals);
      gpu = webgpu.create([]);
    } catch {
      gpu = null;
    }
  }
  let wasmKernel: WebAssembly.Module | null = null;
  let ort: OrtModuleLike | null = null;
  if (backend !== 'webgpu') {
    enableRelaxedSimd();
    try {
      wasmKernel = await nodeExpertKernel();
    } catch (e) {
      // onnxruntime's dense graph is the fallback of the fallback: slower, 4 bytes per weight, but it computes.
      console.error(`[volunteer] the wasm kernel is unavailable (${e instanceof Error ? e.message.split('\n')[0] : e}); using onnxruntime`);
      const mod = await import('onnxruntime-web');
      mod.env.wasm.numThreads = 1;
      ort = mod as unknown as OrtModuleLike;
    }
  }
  return { gpu: backend === 'wasm' ? null : gpu, ort, wasmKernel, backend };
}

/**
 * Node 20 validates relaxed SIMD only behind `--experimental-wasm-relaxed-simd` (Node ≥ 22 and Chromium by default),
 * and without it the volunteer ran the baseline 'simd' build: the same bits, about half the speed at one row
 * (docs/kernels.md). V8 reads wasm feature flags when a module is validated, so setting it before the kernel is
 * compiled is enough; `npx expertswarm volunteer` need not be started with the flag.
 */
function enableRelaxedSimd(): void {
  if (relaxedSimdSupported()) return;
  setFlagsFromString('--experimental-wasm-relaxed-simd');
}

export const DEFAULT_IDENTITY_FILE = join(homedir(), '.config', 'expertswarm', 'volunteer-key.json');

/** The key pair as a JWK in a file only its owner can read. */
export class FileIdentityStore implements IdentityStore {
  constructor(private readonly path: string = DEFAULT_IDENTITY_FILE) {}

  async load(): Promise<JsonWebKey | null> {
    try {
      return JSON.parse(await readFile(this.path, 'utf8')) as JsonWebKey;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw e;
    }
  }

  async save(jwk: JsonWebKey): Promise<void> {
    await mkdir(dirname(this.path), { recursive: true, mode: 0o700 });
    await writeFile(this.path, JSON.stringify(jwk), { mode: 0o600 });
  }
}
