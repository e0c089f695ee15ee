/**
 * The demand market's vocabulary. Plain data only: the stores and policies in this folder pass these around, and the
 * HTTP shell serialises the snake_case ones as they are (`GET /api/expert-demand`, `POST /api/expert-volunteer`).
 * Ranges are half-open everywhere, as protocol/slice.ts states.
 */
import type { ExpertVariant } from '../../protocol/variant.ts';
import type { LayerTensorTypes } from '../../protocol/tensor-types.ts';

/** The slice vocabulary (ExpertRange, HeldRange) lives in protocol/slice.ts; the market names it from there. */
export type { ExpertRange, HeldRange } from '../../protocol/slice.ts';

/** What the market needs to know about a served model (read from its GGUF). */
export interface ModelShape {
  model: string;
  nLayer: number;
  nExpert: number;
  nEmbd: number;
  /** Layers that hold routed experts; dense layers are never offered. */
  moeLayers: number[];
  /**
   * gate+up+down bytes of one expert (with a biased variant's float32 biases): the largest over the MoE layers when
   * they differ (layerBytesPerExpert has each).
   */
  bytesPerExpert: number;
  /** The largest of the three matrices for one expert over every MoE layer (what one storage-buffer binding must hold). */
  maxMatrixBytesPerExpert: number;
  /**
   * Bytes of one expert of each MoE layer, by layer, where the layers differ (each tensor's own type: a Q2_K_XL file
   * has IQ2_XXS layers beside Q4_K ones); a layer not listed takes bytesPerExpert. bytesForExpertOf reads it.
   */
  layerBytesPerExpert?: Readonly<Record<number, number>>;
  /**
   * The ggml type name of each MoE layer's gate, up and down, by layer (protocol/tensor-types.ts); absent (or a layer
   * not listed): not checked. A volunteer that lists the types it reads is offered a layer only if it reads all three.
   */
  layerTypes?: Readonly<Record<number, LayerTensorTypes>>;
  /**
   * The expert FFN variant of each MoE layer that is not plain SiLU-gated (protocol/variant.ts), by layer; absent
   * (or a layer not listed): SiLU-gated without biases. A volunteer is offered a layer only if it computes its variant.
   */
  layerVariants?: Readonly<Record<number, ExpertVariant>>;
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
