/**
 * Which backend computes a slice's experts on this machine: our WebGPU kernels (ExpertRuntime) or the wasm fallback
 * (WasmExpertFallback, our SIMD kernel; OrtExpertFallback where no kernel was loaded). A pure policy over measured
 * throughput (computer.ts times the backends).
 *
 * Policy: the faster one wins on the slice actually assigned (the engine times both on it, each at its real memory:
 * the wasm kernel holds about the slice, the GPU the slice's bytes). A tie goes to a real GPU adapter. A fallback
 * (software) adapter such as SwiftShader never wins by default: it is a CPU emulating a GPU, so whenever wasm was
 * measured it computes the same pairs on the same cores without the emulation — a faster measurement is a quirk of
 * the timing (a cold wasm round, another tab on the core), not a backend to serve with. It serves only where wasm was
 * not measured (not offered, did not fit, failed), or when the user chose WebGPU (then wasm is not offered). A backend
 * that was not measured (or measured nothing usable) is unavailable; with one backend left it wins; with none,
 * chooseBackend throws.
 */

import type { Backend } from '../protocol/numerics.ts';

export interface BackendMeasurements {
  webgpu?: { gflops: number; isFallbackAdapter: boolean };
  wasm?: { gflops: number };
}

export interface BackendChoice {
  backend: Backend;
  reason: string;
}

const usable = (g: number | undefined): g is number => typeof g === 'number' && Number.isFinite(g) && g > 0;
const fmt = (g: number): string => `${g.toPrecision(3)} GFLOP/s`;

export function chooseBackend(m: BackendMeasurements): BackendChoice {
  const gpu = m.webgpu && usable(m.webgpu.gflops) ? m.webgpu : undefined;
  const wasm = m.wasm && usable(m.wasm.gflops) ? m.wasm : undefined;
  const adapter = gpu?.isFallbackAdapter ? 'fallback (software) WebGPU adapter' : 'WebGPU adapter';
  if (!gpu && !wasm) throw new RangeError('chooseBackend: no backend has a usable measurement');
  if (!wasm) return { backend: 'webgpu', reason: `only the ${adapter} was measured (${fmt(gpu!.gflops)})` };
  if (!gpu) return { backend: 'wasm', reason: `only wasm was measured (${fmt(wasm.gflops)})` };
  const vs = `${adapter} ${fmt(gpu.gflops)} vs wasm ${fmt(wasm.gflops)}`;
  if (gpu.isFallbackAdapter) {
    const than = gpu.gflops > wasm.gflops ? 'though measured faster' : gpu.gflops === wasm.gflops ? 'at a tie' : 'slower';
    return { backend: 'wasm', reason: `a fallback adapter never wins while wasm works (${than}): ${vs}` };
  }
  if (gpu.gflops > wasm.gflops) return { backend: 'webgpu', reason: `WebGPU is faster: ${vs}` };
  if (gpu.gflops === wasm.gflops) return { backend: 'webgpu', reason: `a tie goes to the GPU: ${vs}` };
  return { backend: 'wasm', reason: `wasm is faster: ${vs}` };
}
