/**
 * Protocol v2's shadow and probation planning as pure functions: where a probe in shadow or a worker on probation
 * stands in the plan (plan.ts `PlanWorker`), when a worker the claim caps left out is due its next probe in shadow, and
 * how long the layer may stay quiet until then. The dispatcher (dispatcher.ts) applies what they return.
 *
 *   const next = shadowProbeBooking(st, nowMs, claimCfg);
 *   if (next !== null) { st.nextShadowProbeMs = next; st.shadowStreak++; }
 *
 * A shadow item is sent and never claimed: the coordinator computes those pairs anyway, so nothing waits on it.
 */
import { type ClaimConfig, shadowProbeGapMs } from './claims.ts';
import { type LatencyModel, type PlanWorker, expectedRoundTripMs } from './plan.ts';

/** What probe planning reads of a worker's dispatch record (the dispatcher's `WorkerDispatchStats` has all of it). */
export interface ProbeStats {
  readonly latency: LatencyModel;
  /** Items sent and not settled: never probe a worker that has work outstanding. */
  readonly outstanding: number;
  readonly consecutiveMisses: number;
  /** Shadow probes sent since it was last claimed pairs. */
  readonly shadowStreak: number;
  /** When it may next be probed in shadow (null: at once). */
  readonly nextShadowProbeMs: number | null;
  readonly servedItems: number;
  readonly misses: number;
  /** When it last answered a claimed item in time (the dispatcher's clock; null: never). */
  readonly lastClaimedServeMs: number | null;
  /** When it may next be given a keep-warm claim (null: at once). */
  readonly nextKeepWarmMs: number | null;
}

/** A probation worker's planned queue: ahead of every measured worker (plan.ts picks the lowest expected finish). */
export const PROBATION_FIRST_MS = -1e12;

/**
 * Whether a worker may be probed in shadow now: null when not (work outstanding, or its next probe is not due), else
 * when the probe after this one is due (claims.ts `shadowProbeGapMs`): the base interval doubled per consecutive miss
 * and per earlier probe since its last claim, and at least 20 × what a probe takes it. The caller books it (sets
 * `nextShadowProbeMs` and counts one more in `shadowStreak`).
 *
 * A worker with a thin line (fewer than `warmFollowUpUntil` warm samples) whose probe is quick (within
 * `warmFollowUpMaxMs`) is not backed off for its streak, only for misses: each of its probes brings warm follow-ups
 * (`warmFollowUp`), which are how its line fills. Backed off, a line fitted on four follow-ups taken at a bad moment
 * (bench:elastic 2026-12-07: 6.4 ms + 0.72 ms/pair where the worker's decode items took ~2 ms) declined the worker
 * for the rest of the run, its next probe 16–64 s away. A slow worker's probe (a software adapter's seconds) gets no
 * follow-ups and keeps its backoff.
 */
export function shadowProbeBooking(st: ProbeStats, nowMs: number, cfg: ClaimConfig): number | null {
  if (st.outstanding > 0 || nowMs < (st.nextShadowProbeMs ?? 0)) return null;
  const probeMs = expectedRoundTripMs(st.latency, cfg.probePairs);
  const thin = st.latency.warm < cfg.warmFollowUpUntil && probeMs !== null && probeMs <= cfg.warmFollowUpMaxMs;
  return nowMs + shadowProbeGapMs(st.consecutiveMisses + (thin ? 0 : st.shadowStreak), probeMs, cfg);
}

/**
 * A probe in shadow of a worker the policy declined for want of proof: last in line, so that it takes only pairs no
 * claimed worker takes (it must not thin a proven replica's share), at most `probePairs`.
 */
export function shadowProbeWorker(link: { readonly begin: number; readonly end: number }, covered: number, cfg: ClaimConfig): PlanWorker {
  return {
    begin: link.begin,
    end: link.end,
    queueMs: Number.MAX_SAFE_INTEGER,
    overheadMs: null,
    perPairMs: 0,
    cap: Math.min(covered, cfg.probePairs),
  };
}

/**
 * A worker on probation, first in line apart from the speed race (a newcomer slower than a trusted replica would
 * otherwise never be planned once measured, and so never pass its probation): at most one token's worth of pairs
 * (at least `probePairs`), least-tried first (ties: the order of the list). Null while it has an item outstanding.
 */
export function probationWorker(
  link: { readonly begin: number; readonly end: number },
  st: ProbeStats,
  covered: number,
  nUsed: number,
  cfg: ClaimConfig,
): PlanWorker | null {
  if (st.outstanding > 0) return null;
  return {
    begin: link.begin,
    end: link.end,
    queueMs: PROBATION_FIRST_MS + st.servedItems + st.misses,
    overheadMs: null,
    perPairMs: 0,
    cap: Math.min(covered, Math.max(cfg.probePairs, nUsed)),
  };
}

/**
 * Whether a probe in shadow (or a follow-up) that answered in `roundTripMs` is followed at once by the same item
 * again: only for a worker whose line holds fewer than `warmFollowUpUntil` warm samples (all it has run were cold —
 * its first item, probes after idle gaps — or its few warm ones may come from a hiccup), and only when the answer was
 * quick (`warmFollowUpMaxMs`) — or, for a well-measured worker, when the answer (of `pairs` pairs) came sooner than its
line expects: a line fitted while the worker was slow (its wasm not yet tiered up, its core busy) declines it, and a
declined worker gets only backed-off probes, cold ones that enter its line only if faster; the follow-ups are warm
samples that move it. The dispatcher chains at most `warmFollowUpChain` of them. The follow-up finds the worker's engine and event loop awake — a warm
 * sample, which replaces the cold-only line (plan.ts) — so a worker first measured cold (bench:elastic: 8.5 ms +
 * 3.2 ms/pair, declined on every decode item) is judged on its warm speed (~1 ms + 0.3 ms/pair), while a slow
 * worker's probe (seconds) gets no follow-up and it stays declined at the cost of its probes only. In shadow: the
 * coordinator waits on neither.
 */
export function warmFollowUp(st: Pick<ProbeStats, 'latency'>, roundTripMs: number, cfg: ClaimConfig, pairs?: number): boolean {
  if (st.latency.n === 0 || roundTripMs > cfg.warmFollowUpMaxMs) return false;
  if (st.latency.warm < cfg.warmFollowUpUntil) return true;
  // a well-measured line that this answer beats is stale (its samples came from a slower moment): measure it again
  const expected = pairs === undefined ? null : expectedRoundTripMs(st.latency, pairs);
  return expected !== null && roundTripMs < expected;
}

/**
 * Whether a worker is proven warm: it has warm samples in its line (plan.ts `LatencyModel`) and answered a claimed
 * item within `keepWarmForMs`. Such a worker, left out by a marginal split, gets keep-warm claims (claims.ts).
 */
export function provenWarm(st: ProbeStats, nowMs: number, cfg: ClaimConfig): boolean {
  return st.latency.warm > 0 && st.lastClaimedServeMs !== null && nowMs - st.lastClaimedServeMs <= cfg.keepWarmForMs;
}

/** Whether a proven-warm worker is due a keep-warm claim now (at most one per `keepWarmEveryMs`). */
export function keepWarmDue(st: ProbeStats, nowMs: number, cfg: ClaimConfig): boolean {
  return provenWarm(st, nowMs, cfg) && nowMs >= (st.nextKeepWarmMs ?? 0);
}

/**
 * The quiet window after the `streak`-th REQUEST in a row of a layer that the split left to the coordinator alone
 * while one of its workers is proven warm (`provenWarm`), ms: `declineQuietMs` doubled per earlier one, at most
 * `capMs`. Short at first — the next evaluation may be one the worker helps with, and asking costs one exchange — and
 * long once the declines persist (the load has passed: the coordinator is fast alone), so a layer the swarm no longer
 * helps asks about once per `capMs`.
 */
export function declineQuietMs(streak: number, capMs: number, cfg: ClaimConfig): number {
  if (!(streak >= 1) || !(cfg.declineQuietMs > 0)) return Math.max(0, Math.floor(capMs));
  return Math.max(0, Math.floor(Math.min(capMs, cfg.declineQuietMs * 2 ** Math.min(streak - 1, 30))));
}

/**
 * How long until one of these workers is due a shadow probe or (proven warm) a keep-warm claim again, whole ms (at most
 * `capMs`, the configured quiet window; the whole window when none of them can be probed: all have work outstanding).
 * A proven worker declined by a marginal split so leaves the layer quiet for at most `keepWarmEveryMs`, not the whole
 * window: the next request may be one it helps with.
 */
export function quietUntilProbeMs(stats: readonly ProbeStats[], nowMs: number, capMs: number, cfg?: ClaimConfig): number {
  let due = capMs;
  for (const st of stats) {
    if (st.outstanding === 0) due = Math.min(due, (st.nextShadowProbeMs ?? 0) - nowMs);
    if (cfg && provenWarm(st, nowMs, cfg)) due = Math.min(due, (st.nextKeepWarmMs ?? 0) - nowMs);
  }
  return Math.max(0, Math.floor(due));
}
