/**
 * Layer-1 policy: whether the dispatcher hands a worker its pairs of one REQUEST, or leaves them to the coordinator.
 * A pure function over a snapshot taken by the dispatcher (hub/dispatch/dispatcher.ts); every answer carries a stable
 * reason code that callers, metrics and tests match.
 *
 *   const d = layerOnePolicy({ mode: 'auto', nowMs, worker, pairs, localNsPerPair, saturation }, DEFAULT_LAYER_ONE);
 *   if (d.dispatch) ... else log(d.reason);
 *
 * Modes (`--dispatch` on the hub):
 * - `off`: never.
 * - `always`: every live worker (not released, not quarantined) that covers a pair of the request — tests and
 *   benchmarks. The bench still applies: a worker that keeps missing deadlines costs a deadline per request even when
 *   forced, so it is only probed (a health judgement, not a load policy).
 * - `auto` (the default), in this order:
 *   1. a worker that never served is dispatched only in its grace window after attaching (a fair first try) and never
 *      after it;
 *   2. under saturation (busy ≥ saturateAt on a reading no older than maxReadingAgeMs) a worker that served before is
 *      dispatched, even past the idle timeout and even when slower than local: throughput over per-token latency;
 *   3. at rest, a worker idle past the idle timeout is not dispatched;
 *   4. at rest, a worker that served within the idle timeout keeps serving while it is not slower than local: its
 *      expected time for its pairs ≤ local_ns_per_pair × pairs (an unmeasured side — local cost 0 or no worker
 *      latency yet — allows it).
 * Then the bench: a worker that missed `benchAfterMisses` deadlines in a row (dispatcher.ts counts them) is benched;
 * a benched worker the rules above would dispatch is only probed — one request of at most `probeMaxPairs` of its
 * pairs per `probeEveryMs`, waited for the whole request budget as a first try is — and leaves the bench on its first
 * answer in time. Its late answers keep measuring it meanwhile (dispatcher.ts), so once back its deadline fits the
 * speed it has now, not the one it had before its machine got busy.
 */
import { DEFAULT_DISPATCH, type DispatchConfig, type WorkerState } from './map.ts';
import { DEFAULT_SATURATION } from '../market/saturation.ts';
import { DISPATCH_MODES, type DispatchModeName } from '../../protocol/dashboard.ts';

export type DispatchMode = DispatchModeName;
export { DISPATCH_MODES };

export interface LayerOneConfig extends DispatchConfig {
  /** Saturated at busy ≥ this many slots (the poller's reading). */
  saturateAt: number;
  /** A saturation reading older than this counts as "at rest". */
  maxReadingAgeMs: number;
  /** Consecutive missed deadlines that bench a worker. */
  benchAfterMisses: number;
  /** A benched worker is probed at most once per this long. */
  probeEveryMs: number;
  /** A probe carries at most this many of the worker's pairs (larger requests wait for a smaller one). */
  probeMaxPairs: number;
}

export const DEFAULT_LAYER_ONE: Readonly<LayerOneConfig> = Object.freeze({
  graceMs: DEFAULT_DISPATCH.graceMs,
  idleMs: DEFAULT_DISPATCH.idleMs,
  saturateAt: DEFAULT_SATURATION.saturateAt,
  maxReadingAgeMs: DEFAULT_SATURATION.maxReadingAgeMs,
  benchAfterMisses: 3,
  probeEveryMs: 5_000,
  probeMaxPairs: 16,
});

/**
 * What the dispatcher knows of one worker when a request arrives. Times are ms on the dispatcher's clock. `state` is
 * hub/dispatch/map.ts `workerState` of the worker's record (attach time, last serve, released, quarantined), so the
 * policy and the dispatch map can never disagree on grace, proven and idle.
 */
export interface WorkerSnapshot {
  state: WorkerState;
  /** Expected round trip for its pairs of this request, from its measured latency; null while unmeasured. */
  expectedMs: number | null;
  /** Null while not benched, else when it was benched. */
  benchedAtMs: number | null;
  /** Last probe sent while benched (null: none yet). */
  lastProbeMs: number | null;
}

/** The poller's latest reading as the dispatcher saw it (never awaited); null when there is none. */
export interface SaturationSnapshot {
  busy: number | null;
  slots: number | null;
  ageMs: number;
}

export interface PolicyInput {
  mode: DispatchMode;
  nowMs: number;
  worker: WorkerSnapshot;
  /** The request's pairs this worker covers. */
  pairs: number;
  /** The coordinator's wall time per locally computed pair on this layer (REQUEST `local_ns_per_pair`); 0 = unknown. */
  localNsPerPair: number;
  saturation: SaturationSnapshot | null;
}

export type PolicyReason =
  /** `--dispatch off`. */
  | 'mode-off'
  | 'quarantined'
  | 'released'
  /** The worker's slice covers none of the request's pairs. */
  | 'no-pairs'
  /** `--dispatch always`. */
  | 'always'
  /** Never served, attached within the grace window: its fair first try. */
  | 'grace'
  /** Never served and past its grace window: never trusted with load. */
  | 'never-served'
  /** Served before, and the coordinator is saturated on a fresh reading. */
  | 'saturated'
  /** Served, but longer ago than the idle timeout, and the coordinator is at rest. */
  | 'idle-at-rest'
  /** Served recently and expected no slower than the coordinator for these pairs. */
  | 'not-slower-than-local'
  /** Served recently; the coordinator's or the worker's speed is not measured yet, so it may serve. */
  | 'speed-unknown'
  /** Served recently, but the coordinator would compute these pairs faster. */
  | 'slower-than-local'
  /** Missed too many deadlines in a row; not dispatched until its probe answers in time. */
  | 'benched'
  /** Benched, and due for its occasional probe. */
  | 'bench-probe';

export interface PolicyDecision {
  readonly dispatch: boolean;
  readonly reason: PolicyReason;
}

const YES = new Set<PolicyReason>(['always', 'grace', 'saturated', 'not-slower-than-local', 'speed-unknown', 'bench-probe']);

/** One frozen decision per reason: the policy allocates nothing per call. */
export const DECISIONS: Readonly<Record<PolicyReason, PolicyDecision>> = Object.freeze(
  Object.fromEntries(
    (
      [
        'mode-off',
        'quarantined',
        'released',
        'no-pairs',
        'always',
        'grace',
        'never-served',
        'saturated',
        'idle-at-rest',
        'not-slower-than-local',
        'speed-unknown',
        'slower-than-local',
        'benched',
        'bench-probe',
      ] as const
    ).map((reason) => [reason, Object.freeze({ dispatch: YES.has(reason), reason })]),
  ) as Record<PolicyReason, PolicyDecision>,
);

/** Busy ≥ saturateAt on a reading no older than maxReadingAgeMs. */
export function isSaturated(s: SaturationSnapshot | null, cfg: LayerOneConfig): boolean {
  return s !== null && s.busy !== null && s.busy >= cfg.saturateAt && s.ageMs <= cfg.maxReadingAgeMs;
}

function benchFilter(input: PolicyInput, cfg: LayerOneConfig, yes: PolicyDecision): PolicyDecision {
  const { worker: w, nowMs } = input;
  if (w.benchedAtMs === null) return yes;
  const since = Math.max(w.benchedAtMs, w.lastProbeMs ?? w.benchedAtMs);
  if (nowMs - since >= cfg.probeEveryMs && input.pairs <= cfg.probeMaxPairs) return DECISIONS['bench-probe'];
  return DECISIONS.benched;
}

export function layerOnePolicy(input: PolicyInput, cfg: LayerOneConfig = DEFAULT_LAYER_ONE): PolicyDecision {
  const { mode, worker: w } = input;
  if (mode === 'off') return DECISIONS['mode-off'];
  if (w.state === 'quarantined') return DECISIONS.quarantined;
  if (w.state === 'released') return DECISIONS.released;
  if (input.pairs <= 0) return DECISIONS['no-pairs'];
  if (mode === 'always') return benchFilter(input, cfg, DECISIONS.always);
  if (w.state === 'grace') return benchFilter(input, cfg, DECISIONS.grace);
  if (w.state === 'joining') return DECISIONS['never-served'];
  if (isSaturated(input.saturation, cfg)) return benchFilter(input, cfg, DECISIONS.saturated);
  if (w.state === 'idle') return DECISIONS['idle-at-rest'];
  // proven: served within the idle timeout
  if (input.localNsPerPair <= 0 || w.expectedMs === null) return benchFilter(input, cfg, DECISIONS['speed-unknown']);
  if (w.expectedMs * 1e6 > input.localNsPerPair * input.pairs) return DECISIONS['slower-than-local'];
  return benchFilter(input, cfg, DECISIONS['not-slower-than-local']);
}
