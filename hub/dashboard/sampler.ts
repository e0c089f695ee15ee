/**
 * The dashboard's clock: once per TICK_MS it reads every model (through `SamplerSource`, which the Hub implements),
 * turns the readings into one Sample each (pure `buildSample`), keeps them in the bounded History, and broadcasts the
 * tick — and each heatmap that changed since the streams last saw it — to the open streams.
 *
 *   const sampler = new DashboardSampler(source, streams, Date.now);
 *   sampler.start(); … sampler.stop();
 */
import { History } from './history.ts';
import { type CounterReading, type PairCounters, pairRates, roundTripPercentiles, tokensPerSecond } from './rates.ts';
import type { DashboardStreams } from './stream.ts';
import {
  type CoverageMap,
  HISTORY_SAMPLES,
  type ModelStatus,
  type Sample,
  TICK_MS,
  type Tick,
  type Totals,
} from '../../protocol/dashboard.ts';

/** One model as the sampler reads it at a tick. */
export interface ModelReading {
  status: ModelStatus;
  /** The dispatcher's cumulative pairs by outcome; null for a model without a dispatcher. */
  pairs: PairCounters | null;
  /** Round trips (ms) of the workers' results since the last tick. */
  roundTrips: ArrayLike<number>;
  /** The last two readings of the coordinator's generated-tokens counter. */
  generation: { prev: CounterReading | undefined; cur: CounterReading | undefined };
}

export interface SamplerSource {
  read(): { models: ModelReading[]; totals: Totals };
  /** A market model's heatmap now; null for a model that is not on the market. */
  coverage(model: string): CoverageMap | null;
}

export interface SamplerOptions {
  tickMs: number;
  /** A generated-tokens reading older than this gives no tokens/s (the poller stopped getting answers). */
  tokensMaxAgeMs: number;
  /** A timer's tick that threw (the hub logs it): the dashboard misses that tick, the hub keeps running. */
  onError: (e: unknown) => void;
}

/** One tick's Sample of one model, from its reading and the pairs counters of the previous tick. */
export function buildSample(
  atMs: number,
  r: ModelReading,
  prevPairs: { atMs: number; pairs: PairCounters } | undefined,
  tokensMaxAgeMs: number,
): Sample {
  const { p50, p99 } = roundTripPercentiles(r.roundTrips);
  const s = r.status;
  return {
    t: atMs,
    busy: s.busy,
    slots: s.slots,
    effectiveTarget: s.effectiveTarget,
    workers: { ...s.workers },
    pairsPerS: pairRates(prevPairs?.pairs, r.pairs, prevPairs ? atMs - prevPairs.atMs : 0),
    rttP50Ms: p50,
    rttP99Ms: p99,
    tokensPerS: tokensPerSecond(r.generation.prev, r.generation.cur, atMs, tokensMaxAgeMs),
  };
}

export class DashboardSampler {
  readonly history = new History(HISTORY_SAMPLES);
  private readonly prevPairs = new Map<string, { atMs: number; pairs: PairCounters }>();
  /** What the open streams last got of each heatmap (its replicas and target). */
  private readonly sentCoverage = new Map<string, string>();
  private timer: NodeJS.Timeout | null = null;
  readonly options: SamplerOptions;

  constructor(
    private readonly source: SamplerSource,
    private readonly streams: DashboardStreams,
    private readonly clock: () => number = Date.now,
    options: Partial<SamplerOptions> = {},
  ) {
    this.options = { tickMs: TICK_MS, tokensMaxAgeMs: 10_000, onError: () => {}, ...options };
  }

  start(): void {
    if (this.timer) return;
    // An exception out of a timer callback would end the process: a bad reading costs one tick, not the hub.
    this.timer = setInterval(() => {
      try {
        this.tick();
      } catch (e) {
        this.options.onError(e);
      }
    }, this.options.tickMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** Takes one sample of every model and broadcasts it (the timer calls this; tests may too). */
  tick(): Tick {
    const atMs = this.clock();
    const { models, totals } = this.source.read();
    const samples: Record<string, Sample> = {};
    for (const r of models) {
      const model = r.status.model;
      const sample = buildSample(atMs, r, this.prevPairs.get(model), this.options.tokensMaxAgeMs);
      if (r.pairs) this.prevPairs.set(model, { atMs, pairs: { ...r.pairs } });
      this.history.push(model, sample);
      samples[model] = sample;
    }
    const tick: Tick = { atMs, models: models.map((r) => r.status), samples, totals };
    this.streams.broadcast('tick', tick);
    if (this.streams.size > 0) {
      for (const r of models) {
        if (!r.status.market) continue;
        const map = this.source.coverage(r.status.model);
        if (map && this.noteSent(map)) this.streams.broadcast('coverage', map);
      }
    }
    return tick;
  }

  /** Records what a snapshot showed the first client, so the next tick does not resend unchanged heatmaps. */
  snapshotSent(maps: readonly CoverageMap[], firstClient: boolean): void {
    if (firstClient) for (const m of maps) this.noteSent(m);
  }

  /** Whether `map` differs from what the streams last got (and remembers it). */
  private noteSent(map: CoverageMap): boolean {
    const key = `${map.target}:${map.replicas}`;
    if (this.sentCoverage.get(map.model) === key) return false;
    this.sentCoverage.set(map.model, key);
    return true;
  }
}
