/**
 * When to dial the hub again after a failed or dropped connection: exponential backoff with full jitter, so a hub
 * that restarts is not met by every volunteer in the same instant. Pure; the caller keeps the attempt count.
 *
 *   const ms = reconnectDelayMs(attempt, Math.random); // attempt 1 → [0.5 s, 1 s), 2 → [1 s, 2 s), … capped at 30 s
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
 * then a uniform draw in [step / 2, step) so waits never collapse to zero and never synchronise.
 */
export function reconnectDelayMs(attempt: number, random: () => number, policy: BackoffPolicy = DEFAULT_BACKOFF): number {
  if (!Number.isInteger(attempt) || attempt < 1) throw new RangeError(`attempt must be an integer ≥ 1, got ${attempt}`);
  const step = Math.min(policy.maxMs, policy.baseMs * 2 ** Math.min(attempt - 1, 30));
  const r = Math.min(Math.max(random(), 0), 1 - Number.EPSILON);
  return Math.round(step / 2 + (r * step) / 2);
}
