/**
 * Token-bucket rate limiting per key (e.g. client IP), with a bounded key map.
 *
 * A key never seen starts with a full bucket. The map holds at most `maxKeys` buckets, kept in least-recently-used order;
 * a new key beyond that evicts the least recently used bucket (usually long since refilled, i.e. equivalent to absent).
 */
import { LinkedMap } from './linked-map.ts';

export interface RateLimiterOptions {
  /** Burst size: tokens a full bucket holds. */
  capacity: number;
  /** Tokens added per second, up to capacity. */
  refillPerSec: number;
  /** Most keys tracked at once. */
  maxKeys?: number;
}

interface Bucket {
  tokens: number;
  lastMs: number;
}

export class RateLimiter {
  readonly capacity: number;
  readonly refillPerSec: number;
  readonly maxKeys: number;
  /** Oldest = least recently used; every take moves its key to the newest end. */
  private readonly buckets = new LinkedMap<Bucket>();

  constructor({ capacity, refillPerSec, maxKeys = 100_000 }: RateLimiterOptions) {
    if (!(Number.isFinite(capacity) && capacity >= 1)) throw new RangeError('RateLimiter capacity must be ≥ 1');
    if (!(Number.isFinite(refillPerSec) && refillPerSec > 0)) throw new RangeError('RateLimiter refillPerSec must be > 0');
    if (!(Number.isSafeInteger(maxKeys) && maxKeys >= 1)) throw new RangeError('RateLimiter maxKeys must be a positive integer');
    this.capacity = capacity;
    this.refillPerSec = refillPerSec;
    this.maxKeys = maxKeys;
  }

  /** Keys tracked now; never more than maxKeys. */
  get size(): number {
    return this.buckets.size;
  }

  /** Spends one token of `key`'s bucket if it has one. */
  take(key: string, nowMs: number): boolean {
    const b = this.touch(key, nowMs);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  /** Milliseconds until `key` could take a token (0 if it can now). Does not spend. */
  waitMs(key: string, nowMs: number): number {
    const b = this.buckets.get(key);
    if (b === undefined) return 0;
    const tokens = this.refilled(b, nowMs);
    return tokens >= 1 ? 0 : Math.ceil(((1 - tokens) * 1000) / this.refillPerSec);
  }

  private refilled(b: Bucket, nowMs: number): number {
    const elapsed = Math.max(0, nowMs - b.lastMs); // a clock stepping back refills nothing
    return Math.min(this.capacity, b.tokens + (elapsed * this.refillPerSec) / 1000);
  }

  private touch(key: string, nowMs: number): Bucket {
    let b = this.buckets.get(key);
    if (b === undefined) {
      while (this.buckets.size >= this.maxKeys && this.buckets.shift() !== undefined);
      b = { tokens: this.capacity, lastMs: nowMs };
      this.buckets.set(key, b);
    } else {
      b.tokens = this.refilled(b, nowMs);
      b.lastMs = Math.max(b.lastMs, nowMs);
      this.buckets.touch(key);
    }
    return b;
  }
}
