/**
 * bench:elastic's split report, pure: B's REQUESTs grouped by batch size (decode steps of a few tokens against prompt
 * batches of hundreds), with the share the claims gave the volunteers, what was served, the quiet windows the answers
 * gave the layer, and the two sides' times — the coordinator's local part against the volunteers' wait.
 *
 * The coordinator's own time per pair is not sent per REQUEST; each REQUEST carries its per-layer EMA
 * (`local_ns_per_pair`, updated after every evaluation with local pairs as (7·old + cur) / 8, integer ns: the patch's
 * local_down_op). So the next REQUEST of the same layer gives the evaluation's own figure back: cur = 8·new − 7·old
 * (within 7 ns). Only evaluations whose claimed pairs were all served qualify (a second pass updates the EMA again).
 *
 *   for (const line of splitByBatch(responses)) console.log(line);
 */
import type { ResponseSummary } from '../../hub/dispatch/dispatcher.ts';

export const BATCH_BUCKETS: ReadonlyArray<readonly [number, number]> = [
  [1, 1],
  [2, 3],
  [4, 7],
  [8, 31],
  [32, 127],
  [128, Number.POSITIVE_INFINITY],
];

export interface BucketSplit {
  label: string;
  requests: number;
  pairs: number;
  claimed: number;
  served: number;
  /** REQUESTs answered with nothing claimed. */
  local: number;
  /** Σ quiet windows given by the answers, ms. */
  quietMs: number;
  /** Median of the REQUESTs' local_ns_per_pair (the figure the split used), µs a pair. */
  usedUsPerPair: number | null;
  /** Median of the evaluations' own local time per pair, reconstructed from the next REQUEST (above), µs. */
  actualUsPerPair: number | null;
  /** Median local part (its pairs × its own time per pair), ms, over evaluations that claimed pairs. */
  localPartMs: number | null;
  /** Median wait on the workers (work sent → last answer), ms, over the same. */
  remoteMs: number | null;
}

function med(xs: number[]): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
}

/** The evaluation's own local ns per pair, from this REQUEST's EMA and the next one's; null when it cannot be told. */
export function ownNsPerPair(r: ResponseSummary, next: ResponseSummary | undefined): number | null {
  if (next === undefined || r.localNsPerPair <= 0 || r.pairs - r.claimed <= 0 || r.served !== r.claimed) return null;
  const cur = 8 * next.localNsPerPair - 7 * r.localNsPerPair;
  return cur > 0 ? cur : null;
}

export function bucketSplits(responses: readonly ResponseSummary[]): BucketSplit[] {
  // The next REQUEST of the same layer, in arrival order.
  const own = new Array<number | null>(responses.length).fill(null);
  const lastOfLayer = new Map<number, number>();
  responses.forEach((r, i) => {
    const prev = lastOfLayer.get(r.layer);
    if (prev !== undefined) own[prev] = ownNsPerPair(responses[prev] as ResponseSummary, r);
    lastOfLayer.set(r.layer, i);
  });
  return BATCH_BUCKETS.map(([lo, hi]) => {
    const idx = responses.map((r, i) => (r.nTokens >= lo && r.nTokens <= hi ? i : -1)).filter((i) => i >= 0);
    const rs = idx.map((i) => responses[i] as ResponseSummary);
    const split = idx.filter((i) => (responses[i] as ResponseSummary).claimed > 0 && own[i] !== null);
    return {
      label: hi === lo ? `${lo} token` : hi === Number.POSITIVE_INFINITY ? `≥ ${lo} tokens` : `${lo}–${hi} tokens`,
      requests: rs.length,
      pairs: rs.reduce((s, r) => s + r.pairs, 0),
      claimed: rs.reduce((s, r) => s + r.claimed, 0),
      served: rs.reduce((s, r) => s + r.served, 0),
      local: rs.filter((r) => r.claimed === 0).length,
      quietMs: rs.reduce((s, r) => s + r.quietMs, 0),
      usedUsPerPair: med(rs.filter((r) => r.localNsPerPair > 0).map((r) => r.localNsPerPair / 1000)),
      actualUsPerPair: med(
        idx
          .map((i) => own[i])
          .filter((x): x is number => x !== null)
          .map((ns) => ns / 1000),
      ),
      localPartMs: med(
        split.map(
          (i) => ((own[i] as number) * ((responses[i] as ResponseSummary).pairs - (responses[i] as ResponseSummary).claimed)) / 1e6,
        ),
      ),
      remoteMs: med(split.map((i) => (responses[i] as ResponseSummary).settledMs - (responses[i] as ResponseSummary).dispatchMs)),
    };
  });
}

export function splitByBatch(responses: readonly ResponseSummary[]): string[] {
  const f = (x: number | null, d = 2): string => (x === null ? '—' : x.toFixed(d));
  const pct = (a: number, b: number): string => (b > 0 ? `${((100 * a) / b).toFixed(0)} %` : '—');
  return bucketSplits(responses)
    .filter((b) => b.requests > 0)
    .map(
      (b) =>
        `${b.label.padEnd(13)} ${String(b.requests).padStart(5)} REQUESTs, ${String(b.pairs).padStart(6)} pairs: claimed ${pct(b.claimed, b.pairs)}, served ${pct(b.served, b.pairs)}; ${b.local} answered local, quiet given ${(b.quietMs / 1000).toFixed(1)} s; local µs/pair used ${f(b.usedUsPerPair, 0)}, own ${f(b.actualUsPerPair, 0)}; local part ${f(b.localPartMs)} ms vs workers ${f(b.remoteMs)} ms (medians)`,
    );
}
