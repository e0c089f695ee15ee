/**
 * The saturation poller's I/O shell: reads each coordinator's `GET /slots` every interval with a timeout, falling back
 * to `/metrics` (`llamacpp:requests_processing`) when /slots is disabled or failing, else records "unknown". The same
 * replies give the dashboard its tokens/s (the generated-tokens counter, kept as the last two readings). Each
 * coordinator, and each of its two endpoints, is polled on its own, so one that hangs never delays the others: a slow
 * /metrics delays the tokens/s, never a saturation reading. The decision is the pure `saturationState` in
 * market/saturation.ts.
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

/** A coordinator's reply, or null when it did not answer (refused, timed out). */
type Reply = { status: number; text: string } | null;

/** The busy slots a `/metrics` reply states (`llamacpp:requests_processing`), or null. */
function metricsReading(metrics: Reply, nowMs: number): SlotsReading | null {
  if (metrics?.status !== 200) return null;
  try {
    const busy = parseMetricsProcessing(metrics.text);
    return busy === null ? null : { atMs: nowMs, source: 'metrics', busy, slots: null };
  } catch {
    return null;
  }
}

export class SaturationPoller {
  private readonly readings = new Map<string, SlotsReading>();
  private readonly generated = new Map<string, { prev: CounterReading | undefined; cur: CounterReading }>();
  /**
   * Each coordinator's requests in flight, by endpoint: a /metrics that hangs (it can be slow on a busy server) never
   * holds back the next /slots poll, nor the reading of the one in flight.
   */
  private readonly slotsPending = new Map<string, Promise<unknown>>();
  private readonly metricsPending = new Map<string, Promise<Reply>>();
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

  /**
   * One poll of each coordinator: `/slots` and `/metrics` at once, each within `timeoutMs`. The saturation reading is
   * published as soon as /slots answers (from /metrics only when /slots is disabled or failing); the generated-tokens
   * counter is updated once both have answered or timed out.
   */
  private tick(): void {
    for (const { name, url } of this.coordinators()) {
      if (!url) continue;
      const stats = this.stats.get(name) ?? { polls: 0, failures: 0 };
      this.stats.set(name, stats);
      const metricsBusy = this.metricsPending.get(name);
      const metrics =
        metricsBusy ??
        pending(
          this.metricsPending,
          name,
          fetchText(`${url}/metrics`, this.opts.timeoutMs).catch(() => null),
        );
      const slots = this.slotsPending.get(name) ?? pending(this.slotsPending, name, this.pollSlots(name, url, metrics, stats));
      if (!metricsBusy)
        void Promise.all([slots, metrics])
          .then(([slotsJson, m]) => {
            if (m?.status !== 200) return;
            const value = generatedTokens(parseTokensPredicted(m.text), decodingTokens(slotsJson));
            if (value === null) return;
            const g = this.generated.get(name);
            this.generated.set(name, { prev: g?.cur, cur: { atMs: Date.now(), value } });
          })
          .catch(() => {});
    }
  }

  /** Reads /slots and publishes the reading (falling back to `metrics`); resolves with the parsed /slots JSON. */
  private async pollSlots(name: string, url: string, metrics: Promise<Reply>, stats: PollStats): Promise<unknown> {
    const r = await fetchText(`${url}/slots`, this.opts.timeoutMs).catch(() => null);
    let json: unknown;
    let reading: SlotsReading | null = null;
    if (r?.status === 200) {
      try {
        json = JSON.parse(r.text);
        reading = { atMs: Date.now(), source: 'slots', ...parseSlots(json) };
      } catch {
        json = undefined; // fall back to /metrics
      }
    }
    reading ??= metricsReading(await metrics, Date.now());
    stats.polls++;
    if (!reading) {
      stats.failures++;
      if (!this.readings.has(name)) this.readings.set(name, { atMs: Date.now(), source: 'unknown', busy: null, slots: null });
      return json;
    }
    this.readings.set(name, reading);
    try {
      this.onReading(name, reading);
    } catch {
      stats.failures++; // the hub's reaction to the reading failed (as before the split); the poller keeps polling
    }
    return json;
  }
}

/** Keeps `p` in `map` under `name` until it settles, and returns it. */
function pending<T>(map: Map<string, Promise<T>>, name: string, p: Promise<T>): Promise<T> {
  map.set(name, p);
  void p
    .finally(() => {
      if (map.get(name) === p) map.delete(name);
    })
    .catch(() => {});
  return p;
}
