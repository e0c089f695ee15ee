/**
 * Per-request planning for the Layer-1 dispatcher, pure: which worker computes which (token, expert) pair of one
 * REQUEST, the work item each chosen worker gets, how long to wait for it, and how the partial sums come back
 * together. It runs per MoE layer per evaluated token, so it works on typed arrays and allocates nothing per pair.
 *
 *   const plan = planRequest(req, workers);             // workers: the layer's eligible replicas, in a fixed order
 *   for (const w of plan.workers) send(w.worker, gatherRows(w, req.rows, req.nEmbd), w);
 *   const served = new Uint8Array(nPairs), sums = new Float32Array(nTokens * nEmbd);
 *   const n = mergePartials(plan, results, req.nEmbd, served, sums);   // results[i] for plan.workers[i], null = none
 *
 * Conventions: expert ranges are `[begin, end)`; pair `p = t·nUsed + k` indexes ids/probs/served; a work item's
 * pairs name a compact row (the worker's rows are the request's rows it needs, deduplicated, in token order) and the
 * worker's LOCAL expert id (expert − begin).
 */

/** One replica that may take pairs of this request (the dispatcher has already applied the Layer-1 policy). */
export interface PlanWorker {
  /** Experts `[begin, end)` of the layer this worker holds. */
  begin: number;
  end: number;
  /** Time until it can start on new work (its queue of unfinished items), ms. */
  queueMs: number;
  /** Fixed cost of one round trip, ms; null while unmeasured (then it is planned optimistically: a fair first try). */
  overheadMs: number | null;
  /** Marginal cost of one more pair, ms. */
  perPairMs: number;
  /** At most this many pairs (protocol v2's claim caps, hub/dispatch/claims.ts); absent = no cap. */
  cap?: number;
}

/** One chosen worker's work item, and where its pairs sit in the request. */
export interface WorkerPlan {
  /** Index of the worker in the list given to planRequest. */
  readonly worker: number;
  readonly nRows: number;
  /** Compact row → the request's token index, ascending. */
  readonly rowToken: Uint32Array;
  readonly nPairs: number;
  /** Per pair: compact row index. */
  readonly rowIndex: Uint32Array;
  /** Per pair: local expert id (expert − begin). */
  readonly localExpert: Uint16Array;
  /** Per pair: the router weight (prob). */
  readonly weight: Float32Array;
  /** Per pair: its position t·nUsed + k in the request. */
  readonly pairIndex: Uint32Array;
  /** Expected time until its answer, ms (null when the worker is unmeasured). */
  readonly expectedMs: number | null;
}

export interface RequestPlan {
  /** Chosen workers, in the order of the list given to planRequest (which is the order partials are summed in). */
  readonly workers: readonly WorkerPlan[];
  /** Pairs handed to some worker. */
  readonly dispatchedPairs: number;
}

export interface PlanRequestInput {
  nTokens: number;
  nUsed: number;
  ids: Int32Array;
  probs: Float32Array;
}

/** A local expert id travels as u16: a worker's range may not be wider than this. */
export const MAX_RANGE_WIDTH = 65_536;

const EMPTY_PLAN: RequestPlan = Object.freeze({ workers: Object.freeze([]) as readonly WorkerPlan[], dispatchedPairs: 0 });

// Scratch reused across calls (never returned): the choice per pair, and per-worker counters.
let choice = new Int32Array(64);
let counts = new Int32Array(8);
let rows = new Int32Array(8);
let lastToken = new Int32Array(8);

function ensureScratch(nPairs: number, nWorkers: number): void {
  if (choice.length < nPairs) choice = new Int32Array(Math.max(nPairs, choice.length * 2));
  if (counts.length < nWorkers) {
    const n = Math.max(nWorkers, counts.length * 2);
    counts = new Int32Array(n);
    rows = new Int32Array(n);
    lastToken = new Int32Array(n);
  }
}

/** Expected finish of a worker after it is given `pairs` pairs. */
function finishMs(w: PlanWorker, pairs: number): number {
  return w.queueMs + (w.overheadMs ?? 0) + pairs * w.perPairMs;
}

/**
 * For every pair, at most one worker whose range holds its expert; pairs no worker covers stay with the coordinator.
 *
 * A token goes whole to one worker where one covers all its experts and has room under its cap: the token's sum is
 * then computed by one party in k order, as the coordinator's stock graph adds its experts, so the coordinator's
 * output is bit for bit its own (a token split between parties is summed in another order: equal to float-summation
 * precision, not bit for bit — docs/numerics.md). Among such workers, the one with the lowest expected finish after
 * taking the token, updated as tokens are assigned so the load spreads (ties → the earlier worker in the list). A
 * token no single worker can take is split pair by pair, each to the covering worker with the lowest expected finish.
 */
export function planRequest(req: PlanRequestInput, workers: readonly PlanWorker[]): RequestPlan {
  const nPairs = req.nTokens * req.nUsed;
  const nW = workers.length;
  if (nW === 0 || nPairs === 0) return EMPTY_PLAN;
  ensureScratch(nPairs, nW);
  counts.fill(0, 0, nW);
  rows.fill(0, 0, nW);
  lastToken.fill(-1, 0, nW);
  const { ids, nUsed } = req;
  let dispatched = 0;
  const covers = (W: PlanWorker, e: number): boolean => e >= W.begin && e < W.end && W.end - W.begin <= MAX_RANGE_WIDTH;
  const room = (w: number, n: number): boolean => {
    const cap = (workers[w] as PlanWorker).cap;
    return cap === undefined || (counts[w] as number) + n <= cap;
  };
  for (let t = 0; t < req.nTokens; t++) {
    const p0 = t * nUsed;
    // The whole token to one worker, if one covers all its experts and has room.
    let whole = -1;
    let wholeFinish = Number.POSITIVE_INFINITY;
    for (let w = 0; w < nW; w++) {
      const W = workers[w] as PlanWorker;
      if (!room(w, nUsed)) continue;
      let all = true;
      for (let k = 0; k < nUsed && all; k++) all = covers(W, ids[p0 + k] as number);
      if (!all) continue;
      const f = finishMs(W, (counts[w] as number) + nUsed);
      if (f < wholeFinish) {
        wholeFinish = f;
        whole = w;
      }
    }
    for (let k = 0; k < nUsed; k++) {
      const p = p0 + k;
      let best = whole;
      if (whole < 0) {
        let bestFinish = Number.POSITIVE_INFINITY;
        for (let w = 0; w < nW; w++) {
          const W = workers[w] as PlanWorker;
          if (!covers(W, ids[p] as number) || !room(w, 1)) continue;
          const f = finishMs(W, (counts[w] as number) + 1);
          if (f < bestFinish) {
            bestFinish = f;
            best = w;
          }
        }
      }
      choice[p] = best;
      if (best < 0) continue;
      dispatched++;
      counts[best] = (counts[best] as number) + 1;
      // Pairs come in token order, so a worker's rows are deduplicated by remembering the last token it got.
      if (lastToken[best] !== t) {
        lastToken[best] = t;
        rows[best] = (rows[best] as number) + 1;
      }
    }
  }
  if (dispatched === 0) return EMPTY_PLAN;

  const plans: WorkerPlan[] = [];
  const slot = new Int32Array(nW).fill(-1);
  for (let w = 0; w < nW; w++) {
    const n = counts[w] as number;
    if (n === 0) continue;
    const W = workers[w] as PlanWorker;
    slot[w] = plans.length;
    plans.push({
      worker: w,
      nRows: rows[w] as number,
      rowToken: new Uint32Array(rows[w] as number),
      nPairs: n,
      rowIndex: new Uint32Array(n),
      localExpert: new Uint16Array(n),
      weight: new Float32Array(n),
      pairIndex: new Uint32Array(n),
      expectedMs: W.overheadMs === null ? null : finishMs(W, n),
    });
  }
  // Second pass: fill the work items. counts/rows/lastToken become fill cursors.
  counts.fill(0, 0, nW);
  rows.fill(0, 0, nW);
  lastToken.fill(-1, 0, nW);
  const { probs } = req;
  for (let p = 0; p < nPairs; p++) {
    const w = choice[p] as number;
    if (w < 0) continue;
    const wp = plans[slot[w] as number] as WorkerPlan;
    const t = (p / nUsed) | 0;
    if (lastToken[w] !== t) {
      lastToken[w] = t;
      wp.rowToken[rows[w] as number] = t;
      rows[w] = (rows[w] as number) + 1;
    }
    const i = counts[w] as number;
    counts[w] = i + 1;
    wp.rowIndex[i] = (rows[w] as number) - 1;
    wp.localExpert[i] = (ids[p] as number) - (workers[w] as PlanWorker).begin;
    wp.weight[i] = probs[p] as number;
    wp.pairIndex[i] = p;
  }
  return { workers: plans, dispatchedPairs: dispatched };
}

/**
 * The rows a work item carries, `[nRows × nEmbd]`. When the worker needs every token's row the request's own array
 * is returned (no copy): callers must not write to it.
 */
export function gatherRows(wp: WorkerPlan, requestRows: Float32Array, nEmbd: number): Float32Array {
  if (wp.nRows * nEmbd === requestRows.length) return requestRows; // every row, in order (rowToken is ascending)
  const out = new Float32Array(wp.nRows * nEmbd);
  for (let r = 0; r < wp.nRows; r++) {
    const t = wp.rowToken[r] as number;
    out.set(requestRows.subarray(t * nEmbd, (t + 1) * nEmbd), r * nEmbd);
  }
  return out;
}

export type PartialVerdict = 'ok' | 'wrong-size' | 'non-finite';

/** A worker's answer must hold one finite f32 per (row, feature) of its work item. */
export function checkPartial(wp: WorkerPlan, partial: unknown, nEmbd: number): PartialVerdict {
  if (!(partial instanceof Float32Array) || partial.length !== wp.nRows * nEmbd) return 'wrong-size';
  // x − x is 0 for a finite x and NaN for NaN and ±∞; one NaN makes the sum NaN. No branch in the loop.
  let z = 0;
  const n = partial.length;
  for (let i = 0; i < n; i++) {
    const x = partial[i] as number;
    z += x - x;
  }
  return z === 0 ? 'ok' : 'non-finite';
}

let written = new Uint8Array(64);

/**
 * Adds the accepted partials into `sums` ([nTokens × nEmbd]) and sets `served` for their pairs. A row's first
 * partial is copied and later ones are added, per row in plan order — a fixed order, so the same answers always give
 * the same sums; a worker's partial already sums several pairs, so the result agrees with the coordinator's k-order
 * sum to float-summation precision (bit for bit when a row has at most two pairs: a + b = b + a). Rows no partial
 * reaches are left as they are (zero in a fresh array). Returns the count of served pairs.
 * `partials[i]` answers `plan.workers[i]`; null means not served (timed out, failed or rejected).
 */
export function mergePartials(
  plan: RequestPlan,
  partials: ReadonlyArray<Float32Array | null>,
  nEmbd: number,
  served: Uint8Array,
  sums: Float32Array,
): number {
  const nTokens = sums.length / nEmbd;
  if (written.length < nTokens) written = new Uint8Array(Math.max(nTokens, written.length * 2));
  written.fill(0, 0, nTokens);
  let nServed = 0;
  for (let i = 0; i < plan.workers.length; i++) {
    const part = partials[i];
    if (!part) continue;
    const wp = plan.workers[i] as WorkerPlan;
    for (let r = 0; r < wp.nRows; r++) {
      const t = wp.rowToken[r] as number;
      const o = t * nEmbd;
      const s = r * nEmbd;
      if (written[t] === 0) {
        written[t] = 1;
        sums.set(part.subarray(s, s + nEmbd), o);
        continue;
      }
      for (let j = 0; j < nEmbd; j++) sums[o + j] = (sums[o + j] as number) + (part[s + j] as number);
    }
    for (let q = 0; q < wp.nPairs; q++) served[wp.pairIndex[q] as number] = 1;
    nServed += wp.nPairs;
  }
  return nServed;
}

// ---------------------------------------------------------------------------------------------
// Deadlines

export interface DeadlineConfig {
  /** Kept back from the coordinator's deadline for the answer's trip and the coordinator's read, ms. */
  marginMs: number;
  /** The margin is at least this fraction of the coordinator's deadline. */
  marginFraction: number;
  /** No wait is longer than this, ms (the architecture's per-layer cap). */
  capMs: number;
  /** A measured worker gets at least this long, ms. */
  floorMs: number;
  /** …and otherwise this many times its expected time. */
  latencyFactor: number;
  /** A shadow item (an audit or a probe: nothing waits on it) may take this many times the request's budget… */
  shadowFactor: number;
  /** …and at least this long, ms: a slow worker's probe measures it rather than counting as a miss. */
  shadowFloorMs: number;
}

export const DEFAULT_DEADLINES: Readonly<DeadlineConfig> = Object.freeze({
  marginMs: 10,
  marginFraction: 0.1,
  capMs: 250,
  floorMs: 20,
  latencyFactor: 3,
  shadowFactor: 4,
  shadowFloorMs: 3000,
});

/** How long the dispatcher may wait at most for a request whose coordinator waits `deadlineUs`, ms (≤ 0: not at all). */
export function requestBudgetMs(deadlineUs: number, cfg: DeadlineConfig = DEFAULT_DEADLINES): number {
  const coordinatorMs = deadlineUs / 1000;
  return Math.min(cfg.capMs, coordinatorMs - Math.max(cfg.marginMs, cfg.marginFraction * coordinatorMs));
}

/**
 * One worker's wait within the request's budget: `latencyFactor ×` its expected time, at least `floorMs`; an
 * unmeasured worker gets the whole budget (its fair first try must be able to succeed).
 */
export function workerDeadlineMs(expectedMs: number | null, budgetMs: number, cfg: DeadlineConfig = DEFAULT_DEADLINES): number {
  if (expectedMs === null) return budgetMs;
  return Math.min(budgetMs, Math.max(cfg.floorMs, cfg.latencyFactor * expectedMs));
}

/**
 * A shadow item's wait (an audit or a probe, sent but not claimed: the coordinator computes its pairs anyway): long,
 * so that a worker slower than the layer's budget is measured — and kept in the claim policy's sight while saturated —
 * instead of benched for misses; bounded all the same, so an answer that never comes is not held.
 */
export function shadowDeadlineMs(budgetMs: number, cfg: DeadlineConfig = DEFAULT_DEADLINES): number {
  return Math.max(cfg.shadowFactor * budgetMs, cfg.shadowFloorMs);
}

// ---------------------------------------------------------------------------------------------
// A worker's speed

/** Transport samples (round trip − the worker's compute) whose upper quartile is the line's fixed cost beyond compute. */
export const TRANSPORT_WINDOW = 16;

/**
 * A worker's speed as `overhead + pairs × perPair`, fitted online on exponentially weighted means (α LATENCY_ALPHA) of
 * the pairs and the time (and their product and square): a least-squares line. While the sizes seen hardly vary (decode
 * only: one token, the same count of pairs) the line is undetermined and the whole time is charged per pair —
 * pessimistic for a large request, which is the safe side.
 *
 * Where the worker reports its own compute time per item (the volunteer channel's RESULT `compute_us`), the line is
 * fitted on that — pairs against compute, what the pairs really cost, one fit for decode-sized items and one for
 * larger ones (SMALL_ITEM_PAIRS) — and the rest of the round trip (sockets, event
 * loops, the hub's own GC pauses: "transport") is tracked apart as the upper quartile of the last TRANSPORT_WINDOW
 * samples and added to the fixed cost. A quartile, not the mean: one stalled trip in 16 does not move it (it takes 5);
 * the upper one, not the median: the coordinator waits for the later of its own part and the worker's, so a worker
 * whose trips are often slow costs it that often (bench:elastic with the median: transport 0.7 ms, p90 5 ms; decode
 * items of 1–8 pairs were claimed and the coordinator's core sat 12–28 % idle waiting, decode 0.88×). A round-trip fit let one slow trip in five set most of the fixed cost: bench:elastic's
 * volunteers were fitted at ~10 ms + 0.3 ms/pair where their round trip was p50 3.4 ms, and every decode item was
 * declined (docs/elastic.md, "Measured for issue 24"). A worker that reports nothing keeps the round-trip fit.
 *
 * Cold samples — a speed probe in shadow, or the first item after the worker sat idle (dispatcher.ts
 * `COLD_AFTER_IDLE_MS`) — are slow for reasons that do not last (an idle tab's engine and event loop wake up slowly: 19 ms
 * probes against 3.4 ms warm in bench:elastic). Once a worker has a warm sample, a cold one enters its line only if
 * it makes the worker look no slower than the line expects; otherwise it is counted (`coldSkipped`) and left out. So a
 * worker measured warm is not declined on its cold probes, while one that never ran warm is judged on what there is (a
 * slow worker's probes are all there is of it, and decline it) — until its first warm sample, which replaces such a
 * cold-only line outright (an EWMA would keep most of the cold start for several samples, and a declined worker gets
 * few: dispatcher.ts sends a worker measured only cold a warm follow-up to a quick probe, probes.ts `warmFollowUp`).
 * A worker that really slowed down shows it in its warm items (claimed ones, late ones included).
 */
export interface LatencyModel {
  /** Samples in the line (cold ones left out do not count). */
  n: number;
  /** EWMA of the round trip, ms (what the dispatch map and dashboards show as the worker's latency; its queue's cost). */
  ms: number;
  /** The round trip's fit (used while no compute was reported): EWMAs of pairs, pairs², pairs·ms. */
  pairs: number;
  pairs2: number;
  pairsMs: number;
  /** Samples that reported the worker's compute time. */
  nCompute: number;
  /**
   * The compute fits, one per size of item (SMALL_ITEM_PAIRS): decode steps' items of a few tokens, and prompt
   * batches' items of hundreds of pairs, whose kernels read each expert's weights once for many rows.
   */
  readonly small: ComputeFit;
  readonly large: ComputeFit;
  /**
   * The last TRANSPORT_WINDOW transports of decode-sized items (a ring; `nTransport` says how many were written), ms,
   * and their upper quartile; the same for larger items apart. One window for both let a few prompt items (hundreds
   * of rows to send and decode: ~10 ms) set a decode item's fixed cost, which declined the worker on every decode
   * step and so left only prompt items in the window (bench:elastic: transport p75 10.3 ms where decode items took
   * 0.7 ms outside compute).
   */
  readonly transport: Float64Array;
  nTransport: number;
  transportMs: number;
  readonly transportLarge: Float64Array;
  nTransportLarge: number;
  transportLargeMs: number;
  /** Warm samples in the line. */
  warm: number;
  /** Cold samples left out of the line (slower than it expected). */
  coldSkipped: number;
}

export const LATENCY_ALPHA = 0.2;

/**
 * Items of at most this many pairs are fitted apart from larger ones (LatencyModel `small` / `large`). One line through
 * both sizes was steered by the few prompt items — hundreds of pairs at a lower cost per pair (the batched kernel) —
 * to a small slope and a large fixed cost, which declined the next decode items as too slow: bench:elastic's
 * volunteers read 6.8 ms + 0.24 ms/pair and 7.3 ms + 0.09 ms/pair where their decode items took ~3 ms (docs/elastic.md).
 */
export const SMALL_ITEM_PAIRS = 64;

/** One compute fit's EWMAs: samples, pairs, pairs², pairs·ms, ms. */
export interface ComputeFit {
  n: number;
  pairs: number;
  pairs2: number;
  pairsMs: number;
  ms: number;
}

const newFit = (): ComputeFit => ({ n: 0, pairs: 0, pairs2: 0, pairsMs: 0, ms: 0 });

export function newLatencyModel(): LatencyModel {
  return {
    n: 0,
    ms: 0,
    pairs: 0,
    pairs2: 0,
    pairsMs: 0,
    nCompute: 0,
    small: newFit(),
    large: newFit(),
    transport: new Float64Array(TRANSPORT_WINDOW),
    nTransport: 0,
    transportMs: 0,
    transportLarge: new Float64Array(TRANSPORT_WINDOW),
    nTransportLarge: 0,
    transportLargeMs: 0,
    warm: 0,
    coldSkipped: 0,
  };
}

const sorted = new Float64Array(TRANSPORT_WINDOW);

/** The upper quartile (the ⌊¾(k − 1)⌋-th smallest of k) of the filled part of a transport ring (`n` written). */
function transportQuartile(ring: Float64Array, n: number): number {
  const k = Math.min(n, TRANSPORT_WINDOW);
  sorted.set(k === TRANSPORT_WINDOW ? ring : ring.subarray(0, k));
  const s = sorted.subarray(0, k).sort();
  return s[Math.floor((3 * (k - 1)) / 4)] as number;
}

/**
 * One answered item: `pairs` pairs, `ms` from sending it to its answer; `computeMs` the worker's own time on it as it
 * reported (≤ 0: not reported); `cold`: a speed probe, or the first item after an idle gap (see LatencyModel). Returns
 * whether the sample entered the line.
 */
export function observeRoundTrip(m: LatencyModel, pairs: number, ms: number, computeMs = 0, cold = false, alpha = LATENCY_ALPHA): boolean {
  if (cold && m.warm > 0) {
    const expected = expectedRoundTripMs(m, pairs);
    if (expected !== null && ms > expected) {
      m.coldSkipped++;
      return false;
    }
  }
  if (!cold) {
    // the first warm sample replaces a cold-only line
    if (m.warm === 0) m.n = m.nCompute = m.nTransport = m.nTransportLarge = m.small.n = m.large.n = 0;
    m.warm++;
  }
  addSample(m, pairs, ms, alpha); // the round trip's fit
  if (computeMs > 0) {
    const c = Math.min(computeMs, ms);
    addSample(pairs > SMALL_ITEM_PAIRS ? m.large : m.small, pairs, c, alpha);
    m.nCompute++;
    if (pairs > SMALL_ITEM_PAIRS) {
      m.transportLarge[m.nTransportLarge++ % TRANSPORT_WINDOW] = ms - c;
      m.transportLargeMs = transportQuartile(m.transportLarge, m.nTransportLarge);
    } else {
      m.transport[m.nTransport++ % TRANSPORT_WINDOW] = ms - c;
      m.transportMs = transportQuartile(m.transport, m.nTransport);
    }
  }
  return true;
}

/**
 * Forgets a line's samples (not its count of cold ones left out): the dispatcher's answer to a cold probe that came
 * sooner than a well-measured line expects — the line was fitted while the worker was slower than it is now (a start
 * on a busy core, wasm not yet tiered up) — before the warm follow-ups that fit a new one (probes.ts `warmFollowUp`).
 */
export function restartLine(m: LatencyModel): void {
  m.n = m.nCompute = m.nTransport = m.nTransportLarge = m.small.n = m.large.n = 0;
  m.warm = 0;
  m.transportMs = m.transportLargeMs = 0;
}

/** One sample into a fit's EWMAs (the first one sets them). */
function addSample(f: ComputeFit, pairs: number, ms: number, alpha: number): void {
  const a = f.n === 0 ? 1 : alpha;
  f.ms += a * (ms - f.ms);
  f.pairs += a * (pairs - f.pairs);
  f.pairs2 += a * (pairs * pairs - f.pairs2);
  f.pairsMs += a * (pairs * ms - f.pairsMs);
  f.n++;
}

/** The least-squares line of EWMAs, or the whole mean time per pair while the sizes hardly vary (or the fit is < 0). */
function fitLine(pairs: number, pairs2: number, pairsMs: number, ms: number): { overheadMs: number; perPairMs: number } {
  const variance = pairs2 - pairs * pairs;
  if (variance > 0.01 * pairs * pairs + 1e-9) {
    const slope = (pairsMs - pairs * ms) / variance;
    const overhead = ms - slope * pairs;
    if (slope >= 0 && overhead >= 0) return { overheadMs: overhead, perPairMs: slope };
  }
  return { overheadMs: 0, perPairMs: pairs > 0 ? ms / pairs : ms };
}

/**
 * `{overheadMs, perPairMs}` of the worker's line for items of about `pairs` pairs (default: a decode item); null before
 * the first observation. With compute reported: the compute fit of that size (SMALL_ITEM_PAIRS; the other size's while
 * that one has no sample), its fixed cost plus the transport's upper quartile; else the round trip's fit.
 */
export function latencyLine(m: LatencyModel, pairs = 1): { overheadMs: number; perPairMs: number } | null {
  if (m.n === 0) return null;
  if (m.nCompute === 0) return fitLine(m.pairs, m.pairs2, m.pairsMs, m.ms);
  const large = pairs > SMALL_ITEM_PAIRS;
  const want = large ? m.large : m.small;
  const f = want.n > 0 ? want : want === m.small ? m.large : m.small;
  const c = fitLine(f.pairs, f.pairs2, f.pairsMs, f.ms);
  // the transport of items of that size, or of the other size while none was seen
  const useLarge = m.nTransport === 0 || (large && m.nTransportLarge > 0);
  return { overheadMs: c.overheadMs + (useLarge ? m.transportLargeMs : m.transportMs), perPairMs: c.perPairMs };
}

/** Expected round trip for `pairs` pairs, ms (the line of that size of item); null before the first observation. */
export function expectedRoundTripMs(m: LatencyModel, pairs: number): number | null {
  const line = latencyLine(m, pairs);
  return line === null ? null : line.overheadMs + pairs * line.perPairMs;
}

/** The line and how it was measured, for benchmarks and logs: "3.1 ms + 0.30 ms/pair (compute …; transport p50 …)". */
export function describeLatency(m: LatencyModel): string {
  const line = latencyLine(m);
  if (line === null) return 'unmeasured';
  const head = `${line.overheadMs.toFixed(1)} ms + ${line.perPairMs.toFixed(2)} ms/pair`;
  const cold = m.coldSkipped > 0 ? `, ${m.coldSkipped} cold left out` : '';
  if (m.nCompute === 0) return `${head} (round trip; n ${m.n}, ${m.warm} warm${cold})`;
  const big = latencyLine(m, SMALL_ITEM_PAIRS + 1) as { overheadMs: number; perPairMs: number };
  const large =
    m.large.n > 0 && m.small.n > 0
      ? `; items > ${SMALL_ITEM_PAIRS} pairs ${big.overheadMs.toFixed(1)} ms + ${big.perPairMs.toFixed(2)} ms/pair (n ${m.large.n})`
      : '';
  const tLarge = m.nTransportLarge > 0 ? `, larger items ${m.transportLargeMs.toFixed(2)} ms` : '';
  return `${head} (compute fit + transport p75 ${m.transportMs.toFixed(2)} ms${tLarge}; n ${m.n}, ${m.warm} warm${cold})${large}`;
}
