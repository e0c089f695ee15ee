/**
 * The demand market's vocabulary. Plain data only: the stores and policies in this folder pass these around, and the
 * HTTP shell serialises the snake_case ones as they are (`GET /api/expert-demand`, `POST /api/expert-volunteer`).
 *
 * Ranges are half-open everywhere: `[begin, end)` holds experts begin, begin+1, …, end-1, so the width is `end - begin`
 * and two adjacent ranges share a bound without overlapping. The wire pair `experts: [a, b]` follows the same rule.
 */

/** Experts `[begin, end)` of one layer; `0 <= begin < end <= nExpert`. */
export interface ExpertRange {
  begin: number;
  end: number;
}

/** What the market needs to know about a served model (read from its GGUF). */
export interface ModelShape {
  model: string;
  nLayer: number;
  nExpert: number;
  nEmbd: number;
  /** Layers that hold routed experts; dense layers are never offered. */
  moeLayers: number[];
  /** gate+up+down bytes of one expert. */
  bytesPerExpert: number;
  /** The largest of the three matrices for one expert (what one storage-buffer binding must hold). */
  maxMatrixBytesPerExpert: number;
}

/** What a volunteer's browser reports about its GPU; any field may be missing. */
export interface DeviceCapabilities {
  maxStorageBufferBindingSize?: number;
  maxBufferSize?: number;
  /** Bytes the volunteer is willing to spend on a new slice. */
  memoryBudgetBytes?: number;
}

/** A demand segment: a maximal run of experts with the same live replica count; `experts` is `[begin, end)`. */
export interface Segment {
  experts: [number, number];
  replicas: number;
  target: number;
  /** `round(max(0, target − replicas) / target, 3)`; 0 means not wanted. */
  scarcity: number;
}

export interface LayerDemand {
  layer: number;
  segments: Segment[];
}

/** One model's entry in `GET /api/expert-demand` (field names are the wire names). */
export interface ModelDemand {
  model: string;
  n_layer: number;
  n_expert: number;
  target_replicas: number;
  recruiting: boolean;
  layers: LayerDemand[];
}

/**
 * Experts a worker holds on one layer, as heartbeats carry them (an entry of `segments` in `POST /api/expert-coverage`):
 * `[layer, begin, end]`, experts `[begin, end)`. Not a demand `Segment`: this is what one worker has, not a run of
 * the market's replica counts.
 */
export type HeldRange = [layer: number, begin: number, end: number];
