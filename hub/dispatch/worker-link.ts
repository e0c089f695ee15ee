/**
 * What the Layer-1 dispatcher (dispatcher.ts) needs of the volunteer channel: a link per worker slice that computes one
 * work item in the "reduce" form, and a directory of the live links per layer. The channel implements them; tests
 * implement them in-process.
 *
 *   const directory: WorkerDirectory = { workersFor: (layer) => channel.linksOf(model, layer) };
 *
 * Expert ranges are `[begin, end)`; a work item names experts by their LOCAL id (expert − begin).
 */

/** One work item in the volunteer channel's "reduce" form: Σ weight·expert(row) per row. */
export interface WorkItem {
  layer: number;
  nEmbd: number;
  /** [nRows × nEmbd]; may be the request's own array: read it, never write it. */
  rows: Float32Array;
  nRows: number;
  nPairs: number;
  /** Per pair: row index into `rows`. */
  rowIndex: Uint32Array;
  /** Per pair: LOCAL expert id (expert − the link's begin). */
  localExpert: Uint16Array;
  /** Per pair: router weight. */
  weight: Float32Array;
}

/** A work item's answer with the worker's own time on it (the volunteer channel's RESULT `compute_us`). */
export interface WorkAnswer {
  /** `f32[nRows × nEmbd]`. */
  sums: Float32Array;
  /** The worker's time from the frame's arrival to its sums, µs, as it reports it (0: not reported). */
  computeUs: number;
}

/** A worker's slice of one layer, as the volunteer channel exposes it. */
export interface WorkerLink {
  readonly workerId: string;
  readonly layer: number;
  /** Experts `[begin, end)` it holds. */
  readonly begin: number;
  readonly end: number;
  /** Work items sent to it and not answered yet (its queue). */
  readonly inFlight: number;
  /**
   * Sends one work item; resolves with the sums `f32[nRows × nEmbd]` (or them and the worker's reported compute time:
   * the dispatcher then fits the worker's speed on its compute, plan.ts `LatencyModel`) or rejects. `deadlineMs` is
   * how long the dispatcher will wait (from the call), for the link to pass on; the dispatcher enforces it itself.
   */
  compute(work: WorkItem, deadlineMs: number): Promise<Float32Array | WorkAnswer>;
}

export interface WorkerDirectory {
  /**
   * The live links holding experts of `layer` of this model, in a stable order: the order partials are summed in,
   * and the tie-break between equally fast replicas. Called once per REQUEST: keep it cheap.
   */
  workersFor(layer: number): readonly WorkerLink[];
}
