/**
 * Demand: how far each expert's live replica count is from its target. Pure functions over counts (the
 * CoverageStore supplies them); the result is the `models[]` entry of `GET /api/expert-demand`.
 *
 *   modelDemand(shape, (l) => store.replicaCounts(shape.model, l), 2, false, store.workerCount(shape.model) > 0)
 *
 * Segments tile every MoE layer completely, including runs already at or above target (scarcity 0), so the
 * dashboard sees the whole picture; only segments with scarcity > 0 are ever offered (see assign.ts).
 * A model with no live workers that is not recruiting reports `layers: []`: the coordinator serves it alone and
 * nobody is wanted, so `POST /api/expert-volunteer` answers assigned:false for it.
 */
import type { LayerDemand, ModelDemand, ModelShape, Segment } from './types.ts';

/** `round(max(0, target − replicas) / target, 3)`; a target of 0 (or less) wants nothing. */
export function scarcity(replicas: number, target: number): number {
  if (!(target > 0)) return 0;
  return Math.round((Math.max(0, target - replicas) / target) * 1000) / 1000;
}

/** Maximal runs of equal replica count, in expert order, as `[begin, end)` segments. */
export function layerSegments(counts: Int32Array, target: number): Segment[] {
  const out: Segment[] = [];
  let begin = 0;
  for (let e = 1; e <= counts.length; e++) {
    if (e < counts.length && counts[e] === counts[begin]) continue;
    const replicas = counts[begin]!;
    out.push({ experts: [begin, e], replicas, target, scarcity: scarcity(replicas, target) });
    begin = e;
  }
  return out;
}

/**
 * One model's demand over its MoE layers (dense layers never appear). `countsOfLayer` is only called when the
 * model has workers; a recruiting model without workers is seeded from zero: every MoE layer whole at 0 replicas.
 */
export function modelDemand(
  shape: ModelShape,
  countsOfLayer: (layer: number) => Int32Array,
  target: number,
  recruiting: boolean,
  hasWorkers: boolean,
): ModelDemand {
  const head = { model: shape.model, n_layer: shape.nLayer, n_expert: shape.nExpert, target_replicas: target, recruiting };
  // Idle and unheld: the coordinator serves it alone; recruiting nobody keeps quiet models quiet.
  if (!hasWorkers && !recruiting) return { ...head, layers: [] };
  const layers: LayerDemand[] = [...shape.moeLayers]
    .sort((a, b) => a - b)
    .map((layer) => {
      // Without workers every count is 0 by definition; don't trust a caller's array to say otherwise.
      const counts = hasWorkers ? countsOfLayer(layer) : new Int32Array(shape.nExpert);
      if (counts.length !== shape.nExpert) {
        throw new RangeError(`replica counts of ${shape.model} layer ${layer} have ${counts.length} entries, expected ${shape.nExpert}`);
      }
      return { layer, segments: layerSegments(counts, target) };
    });
  return { ...head, layers };
}
