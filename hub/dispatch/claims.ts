/**
 * Latency-aware claims (protocol v2), pure: how many pairs of one REQUEST each eligible worker is given so that the
 * layer finishes sooner than the coordinator alone — and never later.
 *
 * In v2 the coordinator computes every pair it was not given while the workers compute theirs, so the layer takes
 * max(local part, slowest worker). With the coordinator's measured time per pair `L` (REQUEST.local_ns_per_pair, on
 * all its threads) and each worker's fitted round trip `queue + overhead + c·perPair` for c pairs, the caps come from
 * the smallest makespan T at which the pairs the workers can finish by T leave the coordinator no more than T of work:
 *
 *   c_w(T) = min(covered_w, ⌊(T − queue_w − overhead_w) / perPair_w⌋)      (0 when T is below its fixed cost)
 *   T* = min { T : (N − Σ c_w(T)) · L ≤ T }
 *
 * found by bisection (the left side falls as T grows). A worker whose fixed cost alone exceeds T* gets nothing: it
 * would only make the token late. When the best split does not beat the coordinator alone by `minGain`, nothing is
 * claimed. A worker never measured gets a probe of at most `probePairs` (its first try must not cost a token more than
 * the deadline it is given; the Layer-1 policy decides whether it may try at all). Without a measurement of `L` (the
 * coordinator has not computed a pair of this layer yet) the caps are the workers' coverage within the deadline.
 *
 * Keeping a proven worker warm: a worker the split leaves out (`no-gain`, `too-slow`) but which the dispatcher marks
 * `keepWarm` (it served claimed pairs lately and is due; dispatcher.ts) is given the most pairs, at most `probePairs`,
 * that its line says it finishes within the layer's expected time without it — free by the model, so a marginal
 * `no-gain` still gets small claimed items, which keep its engine warm and its line measured on warm items, instead of
 * only cold probes in shadow that re-confirm the decline. A worker whose fixed cost alone is past that time (a software
 * adapter, 50× slower) gets nothing this way: it stays declined at no cost.
 *
 *   const caps = claimCaps({ nPairs, localMsPerPair, budgetMs, workers }, cfg);   // caps.caps[i] for workers[i]
 */

export interface ClaimWorker {
  /** Pairs of this request its slice covers. */
  covered: number;
  /** Time until it can start, ms (its queue). */
  queueMs: number;
  /** Fitted fixed cost of a round trip, ms; null while never measured. */
  overheadMs: number | null;
  /** Fitted cost per pair, ms. */
  perPairMs: number;
  /** Proven and due a keep-warm claim (the dispatcher's judgement): see above. */
  keepWarm?: boolean;
}

export interface ClaimInput {
  /** Routed pairs in the request (N). */
  nPairs: number;
  /** The coordinator's measured wall time per locally computed pair, ms; 0 = not measured yet. */
  localMsPerPair: number;
  /** The longest a worker may take (its deadline), ms. */
  budgetMs: number;
  workers: readonly ClaimWorker[];
}

export interface ClaimConfig {
  /** Pairs a never-measured worker is given on its first tries. */
  probePairs: number;
  /** Claim only when the split is at least this much faster than the coordinator alone (fraction of its time). */
  minGain: number;
  /**
   * A worker the caps leave out gets probePairs in shadow (sent, not claimed: the coordinator computes them anyway)
   * at most this often, ms, so that its measured speed stays current (the dispatcher's part, not claimCaps').
   */
  shadowProbeEveryMs: number;
  /**
   * …and so that a worker spends at most this share of its time on shadow probes: one whose probe takes 2 s (a
   * software-rendered tab) is probed every 40 s at most, whatever the backoff says.
   */
  shadowProbeDuty: number;
  /**
   * A measured worker is given at most the pairs it is expected to finish within budget / deadlineSlack, so its
   * deadline (latencyFactor × its expected time, within the budget: plan.ts) leaves room for a hiccup. A claim sized
   * to the whole budget had none: a prompt batch's item that ran a little long was a miss, and a miss costs the
   * coordinator the whole wait and then the pairs themselves (bench:elastic: 35 such misses, 6,261 late pairs).
   */
  deadlineSlack: number;
  /** A proven worker the caps leave out is given a keep-warm claim at most this often, ms (the dispatcher's part). */
  keepWarmEveryMs: number;
  /** …while it was last claimed and answered within this long, ms: past it, only probes in shadow measure it. */
  keepWarmForMs: number;
  /**
   * A probe in shadow of a worker measured only cold (plan.ts `LatencyModel`) that answers within this long, ms, is
   * followed at once by the same item again, which finds its engine warm (probes.ts `warmFollowUp`); a slower one (a
   * software adapter's 2 s) is not: no wait of a layer is longer than this anyway (the architecture's 250 ms cap).
   */
  warmFollowUpMaxMs: number;
  /**
   * …and so is a quick probe of a worker whose line holds fewer warm samples than this: a line fitted on a sample or
   * two taken in a hiccup (the machine loaded as the worker started: bench:elastic, 6.7 ms + 1.67 ms/pair on one item,
   * where it serves at ~1 ms + 0.4) otherwise declines the worker for the rest of the load, since only the
   * backed-off probes in shadow measure it again.
   */
  warmFollowUpUntil: number;
  /** At most this many follow-ups in a row per probe, each sent when the one before answered quickly. */
  warmFollowUpChain: number;
  /**
   * The quiet window after a REQUEST the split left to the coordinator alone while a worker of the layer is proven
   * warm, ms: doubled per consecutive such answer of the layer, at most the window the probes' rules give (probes.ts
   * `declineQuietMs`).
   * A single decline of a worker that serves (a prompt batch it is too slow for, a late item in its queue) then costs
   * the layer a few evaluations, not a quarter second of them (bench:elastic: 50 declines in 1,196 REQUESTs each left
   * the layer to the coordinator for up to 250 ms: 31 REQUESTs per 100 generated tokens of the ~50 it evaluates).
   */
  declineQuietMs: number;
  /** v3: how long a standing offer (offerLine) stays good after the coordinator read it, ms; 0 = no offers. */
  offerTtlMs: number;
  /**
   * v3: every this many RESULTs of a layer, one carries no offer, so that the next REQUEST is a v2 exchange, where
   * shadow probes, keep-warm claims, probation and spot checks happen (a pre-claimed REQUEST has no CLAIM to ask for
   * them).
   */
  offerBreakEvery: number;
}

export const DEFAULT_CLAIMS: Readonly<ClaimConfig> = Object.freeze({
  probePairs: 8,
  minGain: 0.05,
  shadowProbeEveryMs: 2000,
  shadowProbeDuty: 0.05,
  deadlineSlack: 2,
  keepWarmEveryMs: 250,
  keepWarmForMs: 30_000,
  warmFollowUpMaxMs: 250,
  warmFollowUpUntil: 8,
  warmFollowUpChain: 4,
  declineQuietMs: 4,
  offerTtlMs: 250,
  offerBreakEvery: 8,
});

/**
 * The wait before a worker's next shadow probe, ms: `shadowProbeEveryMs` doubled `backoff` times (at most 32×), and
 * at least the probe's expected round trip (`probeMs`, null: not measured) over `shadowProbeDuty`.
 */
export function shadowProbeGapMs(backoff: number, probeMs: number | null, cfg: ClaimConfig = DEFAULT_CLAIMS): number {
  const base = cfg.shadowProbeEveryMs * 2 ** Math.min(Math.max(0, backoff), 5);
  return probeMs === null || !(cfg.shadowProbeDuty > 0) ? base : Math.max(base, probeMs / cfg.shadowProbeDuty);
}

export type ClaimReason =
  /** Given pairs as the balanced split says. */
  | 'balanced'
  /** Never measured: a probe of at most probePairs. */
  | 'probe'
  /** Left out by the split, but proven and due: the pairs it finishes within the layer's expected time (keepWarm). */
  | 'keep-warm'
  /** The coordinator's speed is not measured yet: the worker's coverage within its deadline. */
  | 'unmeasured-local'
  /** Its fixed cost (queue + overhead) alone is later than the balanced finish, or its deadline allows no pair. */
  | 'too-slow'
  /** The best split is not faster than the coordinator alone by minGain: nothing claimed. */
  | 'no-gain'
  /** It covers no pair of this request. */
  | 'uncovered'
  /** Left out by the caps, given a probe in shadow (the dispatcher's, counted beside the reasons). */
  | 'shadow-probe'
  /** A quick shadow probe of a worker measured only cold, sent again at once for a warm sample (the dispatcher's). */
  | 'warm-follow-up';

export interface ClaimCaps {
  /** Pairs each worker may be given, by index of `workers`. */
  caps: number[];
  reasons: ClaimReason[];
  /** The expected layer time with these caps, and with the coordinator alone, ms (0 when L is unmeasured). */
  expectedMs: number;
  aloneMs: number;
}

/** Pairs a measured worker can finish within `t` ms, at most its coverage. */
function pairsBy(w: ClaimWorker, t: number): number {
  const fixed = w.queueMs + (w.overheadMs ?? 0);
  if (t < fixed) return 0;
  if (w.perPairMs <= 0) return w.covered;
  return Math.min(w.covered, Math.floor((t - fixed) / w.perPairMs));
}

function workerMs(w: ClaimWorker, c: number): number {
  return c === 0 ? 0 : w.queueMs + (w.overheadMs ?? 0) + c * w.perPairMs;
}

export function claimCaps(input: ClaimInput, cfg: ClaimConfig = DEFAULT_CLAIMS): ClaimCaps {
  const { workers, nPairs, budgetMs } = input;
  const L = input.localMsPerPair;
  const caps = new Array<number>(workers.length).fill(0);
  const reasons = new Array<ClaimReason>(workers.length).fill('uncovered');
  const aloneMs = nPairs * L;
  // Probes and the deadline (with its slack) bound every worker whatever the balance says.
  const slack = cfg.deadlineSlack;
  const slackMs = budgetMs / (Number.isFinite(slack) && slack >= 1 ? slack : 1);
  const bounded = workers.map((w) => (w.overheadMs === null ? w.covered : pairsBy(w, slackMs)));
  if (!(L > 0)) {
    workers.forEach((w, i) => {
      if (w.covered === 0) return;
      if (w.overheadMs === null) {
        caps[i] = Math.min(w.covered, cfg.probePairs);
        reasons[i] = 'probe';
      } else {
        caps[i] = bounded[i] as number;
        reasons[i] = caps[i] > 0 ? 'unmeasured-local' : 'too-slow';
      }
    });
    return { caps, reasons, expectedMs: 0, aloneMs: 0 };
  }

  // Measured workers: the smallest makespan T with (N − Σ c_w(T))·L ≤ T. Probes are given their pairs up front.
  let probed = 0;
  workers.forEach((w, i) => {
    if (w.covered > 0 && w.overheadMs === null) {
      caps[i] = Math.min(w.covered, cfg.probePairs);
      reasons[i] = 'probe';
      probed += caps[i] as number;
    }
  });
  const measured = workers.map((w, i) => (w.covered > 0 && w.overheadMs !== null ? i : -1)).filter((i) => i >= 0);
  const claimedBy = (t: number): number => {
    let c = 0;
    for (const i of measured) c += Math.min(pairsBy(workers[i] as ClaimWorker, t), bounded[i] as number);
    return c;
  };
  const localLeft = (t: number): number => Math.max(0, nPairs - probed - claimedBy(t)) * L;
  let lo = 0;
  let hi = Math.max(0, nPairs - probed) * L;
  for (let iter = 0; iter < 60 && hi - lo > 1e-6 * (hi + 1e-9); iter++) {
    const mid = (lo + hi) / 2;
    if (localLeft(mid) <= mid) hi = mid;
    else lo = mid;
  }
  const t = hi;
  let expectedMs = localLeft(t);
  for (const i of measured) {
    const w = workers[i] as ClaimWorker;
    const c = Math.min(pairsBy(w, t), bounded[i] as number);
    caps[i] = c;
    reasons[i] = c > 0 ? 'balanced' : 'too-slow';
    expectedMs = Math.max(expectedMs, workerMs(w, c));
  }
  const measuredClaimed = measured.reduce((s, i) => s + (caps[i] as number), 0);
  if (measuredClaimed > 0 && expectedMs > aloneMs * (1 - cfg.minGain)) {
    for (const i of measured) {
      caps[i] = 0;
      reasons[i] = 'no-gain';
    }
    expectedMs = Math.max(0, nPairs - probed) * L;
  }
  // Keep-warm claims: only within the expected time already planned, so the layer is expected no later for them.
  for (const i of measured) {
    const w = workers[i] as ClaimWorker;
    if (!w.keepWarm || (caps[i] as number) > 0) continue;
    const c = Math.min(cfg.probePairs, bounded[i] as number, pairsBy(w, expectedMs));
    if (c <= 0) continue;
    caps[i] = c;
    reasons[i] = 'keep-warm';
  }
  return { caps, reasons, expectedMs, aloneMs };
}

/** One worker of a standing offer: its fitted round trip `overhead + c·perPair` for c pairs (ms). */
export interface OfferWorker {
  overheadMs: number;
  perPairMs: number;
}

/**
 * v3's standing offer as a line in the request's size, pure: the claim that makes the coordinator's part and the
 * workers' finish together, c(N) = a·N − b, and the most pairs the workers finish within the deadline slack. With
 * the coordinator's time per pair L and workers in parallel (each c_w = (T − F_w) / P_w), (N − Σ c_w)·L = T gives
 *
 *   S = Σ 1/P_w,  F = Σ F_w/P_w,  a = L·S / (1 + L·S),  b = F / (1 + L·S)
 *
 * — claimCaps' makespan for workers that start at once (the coordinator pre-claims with no CLAIM in between). Null
 * (no offer) when L is unmeasured, a worker's line is not usable, or the slack leaves no pair.
 *
 *   const line = offerLine(workers, req.localNsPerPair / 1e6, budgetMs);   // { a, b, maxPairs } | null
 */
export function offerLine(
  workers: readonly OfferWorker[],
  localMsPerPair: number,
  budgetMs: number,
  cfg: ClaimConfig = DEFAULT_CLAIMS,
): { a: number; b: number; maxPairs: number } | null {
  const L = localMsPerPair;
  if (!(L > 0) || workers.length === 0) return null;
  const slack = Number.isFinite(cfg.deadlineSlack) && cfg.deadlineSlack >= 1 ? cfg.deadlineSlack : 1;
  let S = 0;
  let F = 0;
  let maxPairs = 0;
  for (const w of workers) {
    if (!(w.perPairMs > 0) || !(w.overheadMs >= 0) || !Number.isFinite(w.overheadMs)) return null;
    S += 1 / w.perPairMs;
    F += w.overheadMs / w.perPairMs;
    maxPairs += Math.max(0, Math.floor((budgetMs / slack - w.overheadMs) / w.perPairMs));
  }
  if (maxPairs < 1) return null;
  const a = (L * S) / (1 + L * S);
  const b = F / (1 + L * S);
  return { a, b, maxPairs };
}
