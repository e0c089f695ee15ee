/**
 * The saturation poller's I/O shell: reads each coordinator's `GET /slots` every interval with a timeout, falling back
 * to `/metrics` (`llamacpp:requests_processing`) when /slots is disabled or failing, else records "unknown". Each
 * coordinator is polled on its own, so one that hangs never delays the others. The decision is the pure
 * `saturationState` in market/saturation.ts.
 */
import { parseMetricsProcessing, parseSlots, type SlotsReading } from './market/saturation.ts';
import { COORDINATOR_REPLY_MAX_CHARS } from './limits.ts';

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

export async function readSlots(baseUrl: string, timeoutMs: number, nowMs: () => number = Date.now): Promise<SlotsReading> {
  const deadline = nowMs() + timeoutMs;
  try {
    const r = await fetchText(`${baseUrl}/slots`, timeoutMs);
    if (r.status === 200) return { atMs: nowMs(), source: 'slots', ...parseSlots(JSON.parse(r.text)) };
  } catch {
    // fall through to /metrics
  }
  const left = deadline - nowMs();
  if (left > 50) {
    try {
      const r = await fetchText(`${baseUrl}/metrics`, left);
      const busy = r.status === 200 ? parseMetricsProcessing(r.text) : null;
      if (busy !== null) return { atMs: nowMs(), source: 'metrics', busy, slots: null };
    } catch {
      // unknown
    }
  }
  return { atMs: nowMs(), source: 'unknown', busy: null, slots: null };
}

export class SaturationPoller {
  private readonly readings = new Map<string, SlotsReading>();
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

  private tick(): void {
    for (const { name, url } of this.coordinators()) {
      if (!url || this.inFlight.has(name)) continue;
      this.inFlight.add(name);
      const stats = this.stats.get(name) ?? { polls: 0, failures: 0 };
      this.stats.set(name, stats);
      readSlots(url, this.opts.timeoutMs)
        .then((reading) => {
          stats.polls++;
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
