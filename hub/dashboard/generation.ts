/**
 * What a coordinator has generated so far, from the replies the poller already reads (pure parsers; poller.ts does the
 * I/O). llama-server adds a request's tokens to `llamacpp:tokens_predicted_total` only when the request ends, so a
 * long generation would show as one spike at its end; adding the tokens its busy slots decoded so far (`/slots`
 * `next_token[0].n_decoded` of each slot with `is_processing`) gives a counter that grows while it generates and does
 * not jump when a request ends (the slot's count moves into the total in the same step).
 *
 *   generatedTokens(parseTokensPredicted(metricsText), decodingTokens(slotsJson)) // cumulative, or null
 */

const PREDICTED = /^llamacpp:tokens_predicted_total(?:\{[^}]*\})?\s+(\S+)(?:\s+-?\d+)?$/;

/** `llamacpp:tokens_predicted_total` of a `/metrics` reply (summed over its samples); null when absent or malformed. */
export function parseTokensPredicted(text: string): number | null {
  let total: number | null = null;
  for (const raw of text.split('\n')) {
    if (!raw.startsWith('llamacpp:tokens_predicted_total')) continue;
    const m = PREDICTED.exec(raw.trim());
    if (!m) continue; // another metric sharing the prefix (tokens_predicted_total_…)
    const v = Number(m[1]);
    if (!Number.isFinite(v) || v < 0) return null;
    total = (total ?? 0) + v;
  }
  return total;
}

/** Tokens decoded so far by the slots processing a request, from a `/slots` reply; null when it is not a slot array. */
export function decodingTokens(json: unknown): number | null {
  if (!Array.isArray(json)) return null;
  let n = 0;
  for (const slot of json) {
    if (typeof slot !== 'object' || slot === null) return null;
    const s = slot as { is_processing?: unknown; next_token?: unknown };
    if (s.is_processing !== true || !Array.isArray(s.next_token)) continue;
    const decoded = (s.next_token[0] as { n_decoded?: unknown } | undefined)?.n_decoded;
    if (typeof decoded === 'number' && Number.isFinite(decoded) && decoded > 0) n += decoded;
  }
  return n;
}

/** The cumulative counter: finished requests' tokens plus those being generated; null without the finished total. */
export function generatedTokens(predicted: number | null, decoding: number | null): number | null {
  if (predicted === null) return null;
  return predicted + (decoding ?? 0);
}
