/**
 * Event-loop delay as the benchmarks report it. Node's monitorEventLoopDelay records the whole time between two
 * firings of its `resolution` timer, so an idle loop reads p50 ≈ the resolution itself (resolution 5: p50 5.15 ms,
 * measured on Node 20). What the loop's work added is that less the resolution.
 *
 *   const loop = loopDelay(5);   // …the work…   loop.stop();   loop.ms(99)   // p99 added delay, ms
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';

export interface LoopDelay {
  /** The delay the loop's work added at percentile p (0…100), ms: the timer's interval less the resolution. */
  ms(p: number): number;
  /** The largest added delay, ms. */
  maxMs(): number;
  stop(): void;
}

/** A raw reading of the histogram (ns) as the delay added beyond the probe's interval, ms. */
export function addedMs(rawNs: number, resolutionMs: number): number {
  return Math.max(0, rawNs / 1e6 - resolutionMs);
}

export function loopDelay(resolutionMs: number): LoopDelay {
  const h = monitorEventLoopDelay({ resolution: resolutionMs });
  h.enable();
  return { ms: (p) => addedMs(h.percentile(p), resolutionMs), maxMs: () => addedMs(h.max, resolutionMs), stop: () => h.disable() };
}
