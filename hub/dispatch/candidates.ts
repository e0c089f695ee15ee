/**
 * Candidate selection for one REQUEST, as pure functions over a snapshot: which of the layer's worker links cover any of
 * the request's pairs, what the Layer-1 policy (policy.ts) says of each, and where each one goes next — into the speed
 * race (plan.ts), onto probation (its answers may not be used yet), or out (declined; some of those may be probed in
 * shadow). The dispatcher (dispatcher.ts) builds the snapshot, calls `selectCandidates`, and acts on the result.
 *
 *   const sel = selectCandidates({ mode, nowMs, localNsPerPair, saturation, candidates, mayUse }, policyCfg);
 *   for (const c of sel.chosen) planWorkers.push(c.worker);
 *
 * Like petals' block_selection: plain arrays in, plain arrays out, every early `continue` saying why.
 */
import type { WorkerState } from './map.ts';
import { type LatencyModel, type PlanWorker, expectedRoundTripMs, latencyLine } from './plan.ts';
import { type DispatchMode, type LayerOneConfig, type PolicyReason, type SaturationSnapshot, layerOnePolicy } from './policy.ts';
import type { WorkerLink } from './worker-link.ts';

/** What selection reads of a worker's dispatch record (the dispatcher's `WorkerDispatchStats` has all of it). */
export interface CandidateStats {
  readonly latency: LatencyModel;
  readonly benchedAtMs: number | null;
  readonly lastProbeMs: number | null;
  /** Items the dispatcher sent it and has not seen settle (late ones count). */
  readonly outstanding: number;
}

/** What selection reads of a worker link (a `WorkerLink`, minus its `compute`). */
export type CandidateLink = Pick<WorkerLink, 'workerId' | 'layer' | 'begin' | 'end' | 'inFlight'>;

/** One covering worker as the dispatcher saw it when the request arrived. */
export interface Candidate<L extends CandidateLink, S extends CandidateStats> {
  readonly link: L;
  readonly stats: S;
  /** The request's pairs its slice covers (> 0). */
  readonly covered: number;
  /** map.ts `workerState` of its record. */
  readonly state: WorkerState;
}

/** A candidate the policy let through; `probe`: it was let through as a benched worker's occasional probe. */
export interface Admitted<L extends CandidateLink, S extends CandidateStats> {
  readonly link: L;
  readonly stats: S;
  readonly covered: number;
  readonly probe: boolean;
}

/** A usable candidate, with its place in the speed race. */
export interface Chosen<L extends CandidateLink, S extends CandidateStats> extends Admitted<L, S> {
  readonly worker: PlanWorker;
}

export interface SelectionInput<L extends CandidateLink, S extends CandidateStats> {
  mode: DispatchMode;
  nowMs: number;
  /** REQUEST `local_ns_per_pair`. */
  localNsPerPair: number;
  saturation: SaturationSnapshot | null;
  candidates: readonly Candidate<L, S>[];
  /** Protocol v2's trust gate: a worker it refuses is let through onto probation, not into the race. */
  mayUse?: ((workerId: string) => boolean) | undefined;
}

export interface Selection<L extends CandidateLink, S extends CandidateStats> {
  /** In the speed race, in the candidates' order. */
  readonly chosen: Chosen<L, S>[];
  /** Let through, but on probation (v2): planned apart from the race (probes.ts). */
  readonly untrusted: Admitted<L, S>[];
  /** Declined by the policy, every reason. */
  readonly declined: S[];
  /** Declined for want of proof (never served, benched): may be probed in shadow under v2. */
  readonly shadowable: Array<{ link: L; stats: S; covered: number }>;
  /** The policy's reason for each candidate, in order (the dispatcher counts them). */
  readonly reasons: PolicyReason[];
}

/**
 * Policy declines that a v2 dispatcher answers with a probe in shadow now and then (claims.ts `shadowProbeEveryMs`):
 * the worker has not proven itself (never served, or benched for missed deadlines); a probe it answers in time proves
 * it, and costs the coordinator nothing (the pairs are not claimed).
 */
export const PROBE_IN_SHADOW: ReadonlySet<PolicyReason> = new Set<PolicyReason>(['never-served', 'benched']);

/**
 * The request's pairs that `link` can compute: 0 when it is for another layer, its range is not a valid
 * `[begin, end)` within the model's `nExpert` experts, or none of the routed experts (`ids`, one per pair) fall in it.
 */
export function coveredPairs(
  req: { readonly layer: number; readonly ids: Int32Array; readonly nTokens: number; readonly nUsed: number },
  link: Pick<CandidateLink, 'layer' | 'begin' | 'end'>,
  nExpert: number,
): number {
  if (link.layer !== req.layer || !(link.begin >= 0 && link.begin < link.end && link.end <= nExpert)) return 0;
  const n = req.nTokens * req.nUsed;
  let c = 0;
  for (let p = 0; p < n; p++) {
    const e = req.ids[p] as number;
    if (e >= link.begin && e < link.end) c++;
  }
  return c;
}

/**
 * Asks the Layer-1 policy about each candidate and sorts them: chosen (usable, with their `PlanWorker`: queue from the
 * link's in-flight count or the dispatcher's own outstanding items, whichever is more, times the measured round
 * trip), untrusted (let through, but `mayUse` refuses them), declined and shadowable.
 */
export function selectCandidates<L extends CandidateLink, S extends CandidateStats>(
  input: SelectionInput<L, S>,
  cfg: LayerOneConfig,
): Selection<L, S> {
  const sel: Selection<L, S> = { chosen: [], untrusted: [], declined: [], shadowable: [], reasons: [] };
  for (const { link, stats: st, covered, state } of input.candidates) {
    const decision = layerOnePolicy(
      {
        mode: input.mode,
        nowMs: input.nowMs,
        worker: {
          state,
          expectedMs: expectedRoundTripMs(st.latency, covered),
          benchedAtMs: st.benchedAtMs,
          lastProbeMs: st.lastProbeMs,
        },
        pairs: covered,
        localNsPerPair: input.localNsPerPair,
        saturation: input.saturation,
      },
      cfg,
    );
    sel.reasons.push(decision.reason);
    if (!decision.dispatch) {
      sel.declined.push(st);
      if (PROBE_IN_SHADOW.has(decision.reason)) sel.shadowable.push({ link, stats: st, covered });
      continue;
    }
    const probe = decision.reason === 'bench-probe';
    if (input.mayUse && !input.mayUse(link.workerId)) {
      sel.untrusted.push({ link, stats: st, covered, probe });
      continue;
    }
    sel.chosen.push({ link, stats: st, covered, probe, worker: planWorkerOf(link, st, covered, true) });
  }
  return sel;
}

/**
 * A link as the planner sees it, on its line for items of `pairs` pairs (a prompt batch's, hundreds of pairs, or a
 * decode step's: plan.ts `latencyLine`); `queued`: its outstanding items count as a queue (a pre-claimed REQUEST,
 * whose offer was made for workers that had just answered, plans with none).
 */
export function planWorkerOf(link: CandidateLink, st: CandidateStats, pairs: number, queued: boolean): PlanWorker {
  const line = latencyLine(st.latency, pairs);
  return {
    begin: link.begin,
    end: link.end,
    queueMs: line === null || !queued ? 0 : Math.max(link.inFlight, st.outstanding) * st.latency.ms,
    overheadMs: line === null ? null : line.overheadMs,
    perPairMs: line === null ? 0 : line.perPairMs,
  };
}
