/**
 * When to dial the hub again after a failed or dropped connection: exponential backoff with full jitter, so a hub
 * that restarts is not met by every volunteer in the same instant. Pure; the caller keeps the attempt count.
 *
 *   const ms = reconnectDelayMs(attempt, Math.random); // attempt 1 → [0.5 s, 1 s), 2 → [1 s, 2 s), … capped at 30 s
 *   const later = laterDelayMs(60_000, Math.random);     // after OVER_CAPACITY and the like: [60 s, 120 s)
 *
 * The first retry is already a draw: a dropped channel never redials at once. 10,000 volunteers of a hub that
 * restarts reach the new one spread over [0.5 s, 1 s) rather than in its first millisecond (`npm run sim:reconnect`,
 * docs/faults.md).
 */
export interface BackoffPolicy {
  /** The first retry waits between half of this and this. */
  baseMs: number;
  /** No wait exceeds this. */
  maxMs: number;
}

export const DEFAULT_BACKOFF: Readonly<BackoffPolicy> = Object.freeze({ baseMs: 1_000, maxMs: 30_000 });

/**
 * The wait before attempt `attempt` (1 = the first retry): the exponential step min(max, base · 2^(attempt−1)),
 * then a uniform draw in [step / 2, step) so waits never collapse to zero and never synchronise. Rounded to whole
 * milliseconds, so a draw within half a millisecond of the top gives the step itself.
 */
export function reconnectDelayMs(attempt: number, random: () => number, policy: BackoffPolicy = DEFAULT_BACKOFF): number {
  if (!Number.isInteger(attempt) || attempt < 1) throw new RangeError(`attempt must be an integer ≥ 1, got ${attempt}`);
  const step = Math.min(policy.maxMs, policy.baseMs * 2 ** Math.min(attempt - 1, 30));
  return Math.round(step / 2 + (unit(random) * step) / 2);
}

/**
 * The wait after a close that says "come back later" (a full hub, a rate limit, a quarantine): a uniform draw in
 * [floor, 2 · floor) (rounded to whole milliseconds, as reconnectDelayMs). A fixed floor would undo the jitter: every volunteer a full hub turned away in the same second
 * would come back in the same second a minute later.
 */
export function laterDelayMs(floorMs: number, random: () => number): number {
  if (!(Number.isFinite(floorMs) && floorMs >= 0)) throw new RangeError(`floorMs must be a finite number ≥ 0, got ${floorMs}`);
  return Math.round(floorMs + unit(random) * floorMs);
}

/** A draw in [0, 1) whatever `random` returns (NaN and negatives → 0). */
function unit(random: () => number): number {
  const x = random();
  return x > 0 ? Math.min(x, 1 - Number.EPSILON) : 0;
}
