/**
 * Who holds which experts right now: the hub's in-memory coverage, fed by `POST /api/expert-coverage` heartbeats.
 * No timers and no clock: the caller passes `nowMs` and calls `evictStale` on its own schedule.
 *
 *   const store = new CoverageStore();
 *   store.addModel(shape);
 *   store.heartbeat('w1', 'tiny-moe', [[1, 0, 64]], Date.now());
 *   store.replicaCounts('tiny-moe', 1); // Int32Array(nExpert): 1 for experts 0..63, 0 after
 *
 * Replica counts are kept as one difference array per (model, MoE layer): a heartbeat costs O(its held ranges) and
 * a read costs O(nExpert), independent of the number of workers (10,000 workers heartbeating every 15 s is ~670
 * heartbeats a second).
 *
 * Overlapping (or touching) held ranges of one worker on one layer are merged, not rejected: a worker holds an expert
 * or it doesn't, so the union is the truthful reading and the worker counts once per expert. `heldRanges` returns
 * the merged form, sorted by layer then begin. The caps (workers, ranges per heartbeat, worker id length, stale
 * time) are in ../limits.ts.
 */
import { HubError } from '../errors.ts';
import { HELD_RANGES_MAX, WORKER_ID_MAX_CHARS, WORKER_STALE_MS, WORKERS_MAX } from '../limits.ts';
import type { HeldRange, ModelShape } from './types.ts';

export interface CoverageOptions {
  /** New workers beyond this many are refused with TOO_MANY_WORKERS (default WORKERS_MAX). */
  maxWorkers?: number;
}

interface WorkerEntry {
  model: string;
  /** Merged, sorted by layer then begin. */
  ranges: HeldRange[];
  lastSeenMs: number;
  /** Whether its ranges count in the replica counts (replicas.ts: only a worker the hub can send work to). */
  replica: boolean;
}

interface ModelEntry {
  shape: ModelShape;
  moe: Set<number>;
  /** layer → difference array of length nExpert + 1 (count[e] = Σ diff[0..e]). */
  diff: Map<number, Int32Array>;
  workers: Set<string>;
  /** The workers of `workers` whose ranges count as replicas. */
  replicas: Set<string>;
}

export class CoverageStore {
  readonly maxWorkers: number;
  /**
   * Told after every change of one worker's coverage (a heartbeat, a removal, an eviction), with the worker's model
   * (its old one for a removal): the cluster publishes the hub's own workers from here (hub/cluster/cluster.ts).
   */
  onChange: ((workerId: string, model: string) => void) | null = null;
  #models = new Map<string, ModelEntry>();
  #workers = new Map<string, WorkerEntry>();

  constructor(options: CoverageOptions = {}) {
    const maxWorkers = options.maxWorkers ?? WORKERS_MAX;
    if (!Number.isInteger(maxWorkers) || maxWorkers < 0) throw new RangeError(`maxWorkers must be an integer ≥ 0, got ${maxWorkers}`);
    this.maxWorkers = maxWorkers;
  }

  /**
   * Registers a model. Registering the same shape again is a no-op; a changed shape replaces the old one and drops
   * the model's coverage (the old ranges may not exist any more; workers re-report on their next heartbeat).
   */
  addModel(shape: ModelShape): void {
    checkShape(shape);
    const old = this.#models.get(shape.model);
    if (old && sameShape(old.shape, shape)) return;
    if (old) for (const id of [...old.workers]) this.remove(id);
    const diff = new Map<number, Int32Array>();
    for (const layer of shape.moeLayers) diff.set(layer, new Int32Array(shape.nExpert + 1));
    this.#models.set(shape.model, {
      shape: { ...shape, moeLayers: [...shape.moeLayers] },
      moe: new Set(shape.moeLayers),
      diff,
      workers: new Set(),
      replicas: new Set(),
    });
  }

  shape(model: string): ModelShape | undefined {
    return this.#models.get(model)?.shape;
  }

  models(): string[] {
    return [...this.#models.keys()];
  }

  /** Live workers (any model). */
  get size(): number {
    return this.#workers.size;
  }

  /**
   * Replaces `workerId`'s coverage with `ranges` (`[layer, begin, end]`, experts `[begin, end)`) and marks it
   * live at `nowMs`. Everything is validated before anything changes, so a refused heartbeat leaves the old
   * coverage in place. An empty list is allowed: the worker is live but serves nothing yet. `replica` false: the
   * worker holds the ranges but nothing can send it work (replicas.ts), so they stay out of `replicaCounts`.
   * Returns the merged ranges as stored. (Messages name the wire field, `segments`.)
   */
  heartbeat(workerId: string, model: string, ranges: ReadonlyArray<Readonly<HeldRange>>, nowMs: number, replica = true): HeldRange[] {
    checkNow(nowMs);
    if (typeof workerId !== 'string' || workerId.length === 0 || workerId.length > WORKER_ID_MAX_CHARS) {
      throw new HubError('BODY_INVALID', `worker_id must be a non-empty string of at most ${WORKER_ID_MAX_CHARS} characters`);
    }
    const entry = this.#entry(model, ranges);
    const merged = mergeRanges(ranges.map((r, i) => checkHeldRange(entry, r, i)));
    const old = this.#workers.get(workerId);
    if (!old && this.#workers.size >= this.maxWorkers) {
      throw new HubError('TOO_MANY_WORKERS', `the hub already tracks ${this.maxWorkers} workers; retry later`, { 'Retry-After': '60' });
    }

    if (old) this.#unindex(workerId, old);
    const worker: WorkerEntry = { model, ranges: merged, lastSeenMs: nowMs, replica };
    this.#workers.set(workerId, worker);
    this.#index(workerId, worker, entry);
    this.onChange?.(workerId, model);
    return merged.map((r) => [...r]);
  }

  /**
   * Checks a heartbeat's `ranges` against `model` as `heartbeat` does (MODEL_UNKNOWN, BODY_INVALID, TOO_MANY_SEGMENTS,
   * LAYER_NOT_MOE, RANGE_OUT_OF_BOUNDS), changing nothing: a caller with its own rule for the ranges (market/grants.ts)
   * runs it after these, so that a malformed range gets its shape's code, not the rule's.
   */
  check(model: string, ranges: ReadonlyArray<Readonly<HeldRange>>): void {
    const entry = this.#entry(model, ranges);
    ranges.forEach((r, i) => {
      checkHeldRange(entry, r, i);
    });
  }

  #entry(model: string, ranges: unknown): ModelEntry {
    const entry = this.#models.get(model);
    if (!entry) throw new HubError('MODEL_UNKNOWN', `model ${JSON.stringify(model)} is not served here; GET /v1/models lists the names`);
    if (!Array.isArray(ranges)) throw new HubError('BODY_INVALID', 'segments must be an array of [layer, begin, end]');
    if (ranges.length > HELD_RANGES_MAX) {
      throw new HubError('TOO_MANY_SEGMENTS', `a worker may report at most ${HELD_RANGES_MAX} segments, got ${ranges.length}`);
    }
    return entry;
  }

  /** Drops every worker whose last heartbeat is `staleMs` or more before `nowMs`; returns their ids. */
  evictStale(nowMs: number, staleMs: number = WORKER_STALE_MS): string[] {
    checkNow(nowMs);
    const evicted: string[] = [];
    for (const [id, w] of this.#workers) if (nowMs - w.lastSeenMs >= staleMs) evicted.push(id);
    for (const id of evicted) this.remove(id);
    return evicted;
  }

  /** Forgets a worker (disconnect, quarantine). Returns whether it was known. */
  remove(workerId: string): boolean {
    const w = this.#workers.get(workerId);
    if (!w) return false;
    this.#unindex(workerId, w);
    this.#workers.delete(workerId);
    this.onChange?.(workerId, w.model);
    return true;
  }

  /** Live replicas (workers the hub can send work to) covering each expert of one MoE layer (a fresh array of length nExpert). */
  replicaCounts(model: string, layer: number): Int32Array {
    const entry = this.#models.get(model);
    if (!entry) throw new HubError('MODEL_UNKNOWN', `model ${JSON.stringify(model)} is not served here`);
    const diff = entry.diff.get(layer);
    if (!diff) throw new HubError('LAYER_NOT_MOE', `layer ${layer} of ${model} holds no routed experts`);
    const counts = new Int32Array(entry.shape.nExpert);
    let run = 0;
    for (let e = 0; e < counts.length; e++) counts[e] = run += diff[e]!;
    return counts;
  }

  /** Ids of the live workers of `model` (empty for an unknown model). */
  workersOf(model: string): string[] {
    return [...(this.#models.get(model)?.workers ?? [])];
  }

  /** How many live workers `model` has, without building the list. */
  workerCount(model: string): number {
    return this.#models.get(model)?.workers.size ?? 0;
  }

  /** How many of them count as replicas (their ranges are in `replicaCounts`). */
  replicaWorkerCount(model: string): number {
    return this.#models.get(model)?.replicas.size ?? 0;
  }

  /** The worker's merged held ranges, or undefined if it is not live. */
  heldRanges(workerId: string): HeldRange[] | undefined {
    return this.#workers.get(workerId)?.ranges.map((r) => [...r]);
  }

  /** The model a live worker serves. */
  modelOf(workerId: string): string | undefined {
    return this.#workers.get(workerId)?.model;
  }

  lastSeenMs(workerId: string): number | undefined {
    return this.#workers.get(workerId)?.lastSeenMs;
  }

  /** Whether a live worker's ranges count as replicas (undefined if it is not live). */
  isReplica(workerId: string): boolean | undefined {
    return this.#workers.get(workerId)?.replica;
  }

  #index(id: string, w: WorkerEntry, entry: ModelEntry): void {
    entry.workers.add(id);
    if (!w.replica) return;
    entry.replicas.add(id);
    for (const [layer, begin, end] of w.ranges) {
      const diff = entry.diff.get(layer)!;
      diff[begin]! += 1;
      diff[end]! -= 1;
    }
  }

  #unindex(id: string, w: WorkerEntry): void {
    const entry = this.#models.get(w.model);
    if (!entry) return;
    entry.workers.delete(id);
    if (!w.replica) return;
    entry.replicas.delete(id);
    for (const [layer, begin, end] of w.ranges) {
      const diff = entry.diff.get(layer)!;
      diff[begin]! -= 1;
      diff[end]! += 1;
    }
  }
}

function checkHeldRange(entry: ModelEntry, r: unknown, i: number): HeldRange {
  if (!Array.isArray(r) || r.length !== 3 || !r.every((v) => Number.isSafeInteger(v))) {
    throw new HubError('BODY_INVALID', `segments[${i}] must be [layer, begin, end] with integers`);
  }
  const [layer, begin, end] = r as HeldRange;
  const { shape } = entry;
  if (!entry.moe.has(layer)) {
    throw new HubError(
      'LAYER_NOT_MOE',
      `segments[${i}]: layer ${layer} of ${shape.model} holds no routed experts (MoE layers: ${shape.moeLayers.join(', ')})`,
    );
  }
  if (begin < 0 || begin >= end || end > shape.nExpert) {
    throw new HubError('RANGE_OUT_OF_BOUNDS', `segments[${i}]: experts [${begin}, ${end}) must satisfy 0 ≤ begin < end ≤ ${shape.nExpert}`);
  }
  return [layer, begin, end];
}

/** Union of the held ranges per layer, sorted by layer then begin; touching ranges join. */
function mergeRanges(ranges: HeldRange[]): HeldRange[] {
  const sorted = [...ranges].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const out: HeldRange[] = [];
  for (const [layer, begin, end] of sorted) {
    const last = out[out.length - 1];
    if (last && last[0] === layer && begin <= last[2]) last[2] = Math.max(last[2], end);
    else out.push([layer, begin, end]);
  }
  return out;
}

function checkNow(nowMs: number): void {
  if (!Number.isFinite(nowMs)) throw new RangeError(`nowMs must be a finite number, got ${nowMs}`);
}

function checkShape(s: ModelShape): void {
  const positiveInt = (v: number) => Number.isSafeInteger(v) && v > 0;
  if (typeof s.model !== 'string' || s.model.length === 0) throw new TypeError('shape.model must be a non-empty string');
  for (const k of ['nLayer', 'nExpert', 'nEmbd', 'bytesPerExpert', 'maxMatrixBytesPerExpert'] as const) {
    if (!positiveInt(s[k])) throw new RangeError(`shape.${k} of ${s.model} must be a positive integer, got ${s[k]}`);
  }
  if (s.maxMatrixBytesPerExpert > s.bytesPerExpert) throw new RangeError(`shape of ${s.model}: one matrix cannot exceed the whole expert`);
  const seen = new Set<number>();
  for (const l of s.moeLayers) {
    if (!Number.isSafeInteger(l) || l < 0 || l >= s.nLayer || seen.has(l)) {
      throw new RangeError(`shape.moeLayers of ${s.model} must be distinct layers in [0, ${s.nLayer}), got ${s.moeLayers.join(', ')}`);
    }
    seen.add(l);
  }
}

function sameShape(a: ModelShape, b: ModelShape): boolean {
  return (
    a.nLayer === b.nLayer &&
    a.nExpert === b.nExpert &&
    a.nEmbd === b.nEmbd &&
    a.bytesPerExpert === b.bytesPerExpert &&
    a.maxMatrixBytesPerExpert === b.maxMatrixBytesPerExpert &&
    a.moeLayers.length === b.moeLayers.length &&
    a.moeLayers.every((l, i) => l === b.moeLayers[i])
  );
}
