/**
 * The arithmetic of a dashboard tick, as pure functions over plain numbers: percentiles of the round trips that
 * arrived in a tick, per-second rates from the deltas of cumulative counters (a counter that went backwards was reset:
 * its coordinator or dispatcher restarted, so that tick has no rate rather than a negative one), and the reservoir
 * that keeps a tick's round trips bounded.
 *
 *   roundTripPercentiles([5, 1, 3])                               // { p50: 3, p99: 5 } (nearest rank)
 *   counterRate({ atMs: 0, value: 10 }, { atMs: 2000, value: 30 }) // 10 per second
 */
import { RTT_SAMPLES_PER_TICK } from '../limits.ts';

/**
 * p50 and p99 of one tick's round trips (one sort for both), rounded to 0.01 ms: the nearest rank, i.e. the smallest
 * value with at least p% of them at or below it. null for none; `values` is not modified.
 */
export function roundTripPercentiles(values: ArrayLike<number>): { p50: number | null; p99: number | null } {
  const n = values.length;
  if (n === 0) return { p50: null, p99: null };
  const sorted = Float64Array.from(values).sort();
  const at = (p: number): number => round2(sorted[Math.ceil((p / 100) * n) - 1] as number);
  return { p50: at(50), p99: at(99) };
}

export interface CounterReading {
  atMs: number;
  value: number;
}

/**
 * Per second between two readings of a cumulative counter; null without an earlier reading, when no time passed, or
 * when the counter went backwards (reset).
 */
export function counterRate(prev: CounterReading | undefined, cur: CounterReading | undefined): number | null {
  if (!prev || !cur) return null;
  const dtMs = cur.atMs - prev.atMs;
  const dv = cur.value - prev.value;
  if (!(dtMs > 0) || dv < 0 || !Number.isFinite(dv)) return null;
  return round2((dv * 1000) / dtMs);
}

/**
 * A coordinator's generated tokens per second from its last two counter readings (taken every poll), or null when
 * there are not two, or the newest is older than `maxAgeMs` (the coordinator stopped answering: no rate, not an old one).
 */
export function tokensPerSecond(
  prev: CounterReading | undefined,
  cur: CounterReading | undefined,
  nowMs: number,
  maxAgeMs: number,
): number | null {
  if (!cur || nowMs - cur.atMs > maxAgeMs) return null;
  return counterRate(prev, cur);
}

export interface PairCounters {
  served: number;
  fallback: number;
  late: number;
  rejected: number;
}

export const NO_PAIRS: Readonly<PairCounters> = Object.freeze({ served: 0, fallback: 0, late: 0, rejected: 0 });

/** Pairs per second by outcome between two readings of a dispatcher's totals; 0 where unknown or reset. */
export function pairRates(prev: PairCounters | undefined, cur: PairCounters | null, dtMs: number): PairCounters {
  if (!prev || !cur || !(dtMs > 0)) return { ...NO_PAIRS };
  const rate = (a: number, b: number): number => (b >= a ? round2(((b - a) * 1000) / dtMs) : 0);
  return {
    served: rate(prev.served, cur.served),
    fallback: rate(prev.fallback, cur.fallback),
    late: rate(prev.late, cur.late),
    rejected: rate(prev.rejected, cur.rejected),
  };
}

export function round2(x: number): number {
  return Math.round(x * 100) / 100;
}

/**
 * One model's round trips since the last tick: at most `capacity` of them, a uniform sample (reservoir) beyond that,
 * so a burst of results costs the same memory and the same sort as a quiet tick.
 *
 *   rec.add(12.5); … const { p50, p99 } = roundTripPercentiles(rec.drain());
 */
export class RoundTripReservoir {
  private readonly buf: Float64Array;
  private seen = 0;

  constructor(
    readonly capacity = RTT_SAMPLES_PER_TICK,
    private readonly random: () => number = Math.random,
  ) {
    this.buf = new Float64Array(capacity);
  }

  add(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return;
    if (this.seen < this.capacity) this.buf[this.seen] = ms;
    else {
      const j = Math.floor(this.random() * (this.seen + 1));
      if (j < this.capacity) this.buf[j] = ms;
    }
    this.seen++;
  }

  /** Results seen since the last drain (kept or not). */
  get count(): number {
    return this.seen;
  }

  /** The kept round trips, and a fresh start. */
  drain(): Float64Array {
    const out = this.buf.slice(0, Math.min(this.seen, this.capacity));
    this.seen = 0;
    return out;
  }
}
