/**
 * The saturation poller's I/O shell: reads each coordinator's `GET /slots` every interval with a timeout, falling back
 * to `/metrics` (`llamacpp:requests_processing`) when /slots is disabled or failing, else records "unknown". The same
 * replies give the dashboard its tokens/s (the generated-tokens counter, kept as the last two readings). Each
 * coordinator is polled on its own, so one that hangs never delays the others. The decision is the pure
 * `saturationState` in market/saturation.ts.
 */
import { parseMetricsProcessing, parseSlots, type SlotsReading } from './market/saturation.ts';
import { COORDINATOR_REPLY_MAX_CHARS } from './limits.ts';
import { decodingTokens, generatedTokens, parseTokensPredicted } from './dashboard/generation.ts';
import type { CounterReading } from './dashboard/rates.ts';

export interface PollerOptions {
  intervalMs: number;
  timeoutMs: number;
}

export const DEFAULT_POLLER: PollerOptions = Object.freeze({ intervalMs: 2000, timeoutMs: 1500 });

export interface PollStats {
  polls: number;
  failures: number;
}

async function fetchText(url: string, timeoutMs: number): Promise<{ status: number; text: string }> {
  const r = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  const text = await r.text();
  return { status: r.status, text: text.length > COORDINATOR_REPLY_MAX_CHARS ? '' : text };
}

export interface PollResult {
  reading: SlotsReading;
  /** Tokens generated so far (dashboard/generation.ts), or null when its counters are unreadable. */
  generatedTokens: number | null;
}

/**
 * One poll of a coordinator: `/slots` and `/metrics` at once, each within `timeoutMs`. Busy slots come from /slots,
 * else from /metrics (`llamacpp:requests_processing`); the generated-tokens counter from both.
 */
export async function pollCoordinator(baseUrl: string, timeoutMs: number, nowMs: () => number = Date.now): Promise<PollResult> {
  const [slots, metrics] = await Promise.all([
    fetchText(`${baseUrl}/slots`, timeoutMs).catch(() => null),
    fetchText(`${baseUrl}/metrics`, timeoutMs).catch(() => null),
  ]);
  let slotsJson: unknown;
  let reading: SlotsReading | null = null;
  if (slots?.status === 200) {
    try {
      slotsJson = JSON.parse(slots.text);
      reading = { atMs: nowMs(), source: 'slots', ...parseSlots(slotsJson) };
    } catch {
      slotsJson = undefined; // fall back to /metrics
    }
  }
  const metricsText = metrics?.status === 200 ? metrics.text : null;
  if (!reading && metricsText !== null) {
    try {
      const busy = parseMetricsProcessing(metricsText);
      if (busy !== null) reading = { atMs: nowMs(), source: 'metrics', busy, slots: null };
    } catch {
      // unknown
    }
  }
  return {
    reading: reading ?? { atMs: nowMs(), source: 'unknown', busy: null, slots: null },
    generatedTokens: metricsText === null ? null : generatedTokens(parseTokensPredicted(metricsText), decodingTokens(slotsJson)),
  };
}

/** The saturation reading alone (see pollCoordinator). */
export async function readSlots(baseUrl: string, timeoutMs: number, nowMs: () => number = Date.now): Promise<SlotsReading> {
  return (await pollCoordinator(baseUrl, timeoutMs, nowMs)).reading;
}

export class SaturationPoller {
  private readonly readings = new Map<string, SlotsReading>();
  private readonly generated = new Map<string, { prev: CounterReading | undefined; cur: CounterReading }>();
  private readonly inFlight = new Set<string>();
  private timer: NodeJS.Timeout | null = null;
  readonly stats = new Map<string, PollStats>();

  constructor(
    private readonly coordinators: () => Array<{ name: string; url: string | null }>,
    private readonly opts: PollerOptions = DEFAULT_POLLER,
    private readonly onReading: (name: string, reading: SlotsReading) => void = () => {},
  ) {}

  start(): void {
    if (this.timer) return;
    this.tick();
    this.timer = setInterval(() => this.tick(), this.opts.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Latest reading; only successful readings replace older ones, so a failing coordinator's reading ages. */
  reading(name: string): SlotsReading | undefined {
    return this.readings.get(name);
  }

  /** The last two readings of the coordinator's generated-tokens counter (dashboard tokens/s). */
  generation(name: string): { prev: CounterReading | undefined; cur: CounterReading | undefined } {
    const g = this.generated.get(name);
    return { prev: g?.prev, cur: g?.cur };
  }

  private tick(): void {
    for (const { name, url } of this.coordinators()) {
      if (!url || this.inFlight.has(name)) continue;
      this.inFlight.add(name);
      const stats = this.stats.get(name) ?? { polls: 0, failures: 0 };
      this.stats.set(name, stats);
      pollCoordinator(url, this.opts.timeoutMs)
        .then(({ reading, generatedTokens }) => {
          stats.polls++;
          if (generatedTokens !== null) {
            const g = this.generated.get(name);
            this.generated.set(name, { prev: g?.cur, cur: { atMs: reading.atMs, value: generatedTokens } });
          }
          if (reading.source === 'unknown') {
            stats.failures++;
            if (!this.readings.has(name)) this.readings.set(name, reading);
            return;
          }
          this.readings.set(name, reading);
          this.onReading(name, reading);
        })
        .catch(() => {
          stats.failures++;
        })
        .finally(() => this.inFlight.delete(name));
    }
  }
}
