/** Browser entry for the kernel grid: `window.runKernelGrid()` resolves with the adapter and the results. */
import { DECODE_GRID, runGridCase, type GridResult } from './kernel-grid.ts';

declare global {
  interface Window {
    runKernelGrid: () => Promise<{ adapter: Record<string, unknown> | null; features: string[]; results: GridResult[]; error?: string }>;
  }
}

window.runKernelGrid = async () => {
  if (!navigator.gpu) return { adapter: null, features: [], results: [], error: 'navigator.gpu is missing (WebGPU disabled?)' };
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return { adapter: null, features: [], results: [], error: 'requestAdapter() returned null' };
  const device = await adapter.requestDevice();
  const results: GridResult[] = [];
  try {
    let seed = 1;
    for (const c of DECODE_GRID) results.push(await runGridCase(device, c, seed++));
  } finally {
    device.destroy();
  }
  const info = adapter.info;
  return {
    adapter: { vendor: info.vendor, architecture: info.architecture, description: info.description, isFallbackAdapter: (info as { isFallbackAdapter?: boolean }).isFallbackAdapter ?? null },
    features: [...adapter.features],
    results,
  };
};
