/**
 * The benchmarks' GPU device: what requestExpertDevice (shaders/device.ts) asks for — the adapter's binding limits,
 * 'subgroups' and 'shader-f16' where it has them — plus 'timestamp-query' where it has that, so a benchmark can ask
 * ExpertRuntime.compute(…, { onTiming }) for kernel times. Browser-safe (no Node imports): the page and Node share it.
 *
 * @example
 *   const got = await requestBenchDevice(navigator.gpu);   // or create([]) from the npm `webgpu` package
 *   got?.timestampQuery;                                   // whether kernel times will be reported
 */
import { requestExpertDevice, type ExpertDevice } from '../../shaders/device.ts';

export interface BenchDevice extends ExpertDevice {
  /** The device has 'timestamp-query': compute(…, { onTiming }) reports kernel times. */
  timestampQuery: boolean;
}

/** A device for the benchmarks from a fresh adapter, or null when there is none. */
export async function requestBenchDevice(gpu: GPU, label = 'bench device'): Promise<BenchDevice | null> {
  const got = await requestExpertDevice(gpu, label, ['timestamp-query']);
  return got && { ...got, timestampQuery: got.device.features.has('timestamp-query') };
}

/** Kernel time and wall time of timed calls, and what the wall time adds. */
export interface CallTimes {
  wallMs: number;
  /** Median kernel time (timestamp-query), or null where the device has none. */
  kernelMs: number | null;
}

/** "kernel 0.21 ms, wall 0.73 ms (wall ÷ kernel 3.5×)", or "kernel time n/a (no timestamp-query), wall 0.73 ms". */
export function describeTimes(t: CallTimes): string {
  const wall = `wall ${t.wallMs.toFixed(3)} ms`;
  if (t.kernelMs === null) return `kernel time n/a (no timestamp-query), ${wall}`;
  const ratio = t.kernelMs > 0 ? `${(t.wallMs / t.kernelMs).toFixed(2)}×` : '∞';
  return `kernel ${t.kernelMs.toFixed(3)} ms, ${wall} (wall ÷ kernel ${ratio})`;
}
