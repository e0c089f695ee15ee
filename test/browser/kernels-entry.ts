/** Browser entry for the kernel grid: `window.runKernelGrid()` resolves with the adapter and the results. */
import { BATCHED_GRID, DECODE_GRID, runGridCase, type GridResult } from './kernel-grid.ts';

declare global {
  interface Window {
    runKernelGrid: (grid?: 'decode' | 'batched' | 'all') => Promise<{ adapter: Record<string, unknown> | null; features: string[]; results: GridResult[]; error?: string }>;
  }
}

window.runKernelGrid = async (grid = 'all') => {
  if (!navigator.gpu) return { adapter: null, features: [], results: [], error: 'navigator.gpu is missing (WebGPU disabled?)' };
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) return { adapter: null, features: [], results: [], error: 'requestAdapter() returned null' };
  const device = await adapter.requestDevice();
  const results: GridResult[] = [];
  try {
    let seed = 1;
    const cases = grid === 'decode' ? DECODE_GRID : grid === 'batched' ? BATCHED_GRID : [...DECODE_GRID, ...BATCHED_GRID];
    for (const c of cases) results.push(await runGridCase(device, c, seed++));
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
