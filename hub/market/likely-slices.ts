/**
 * The slices the market will most likely offer first, so that the shard server can know their digests before the
 * push (hub/shards.ts warm): a pure function of a model's shape and one volunteer's request.
 *
 *   likelySlices(shape, { maxExperts: 2 }, 100)
 *   // → [[L0, 0, 2], [L1, 0, 2], …, [L0, 2, 4], [L1, 2, 4], …]: what volunteers like it are offered on a model nobody holds
 *
 * On a model nobody holds, each MoE layer is one segment of demand, all equally scarce; chooseAssignment offers a
 * volunteer the widest free range (ties: the lowest layer), clipped at its begin to the volunteer's width (its
 * maxExperts, and its budget over the layer's bytes per expert). So volunteers that ask alike take each layer in runs
 * of that width from expert 0, the layer with the most left first. Layers the volunteer cannot take (its device, its
 * variants or types) are left out, as the market leaves them out.
 */
import { computesVariant } from '../../protocol/variant.ts';
import { readsLayer } from '../../protocol/tensor-types.ts';
import { deviceFit, type VolunteerRequest } from './assign.ts';
import type { HeldRange, ModelShape } from './types.ts';

/** Each MoE layer the volunteer can take, with how many experts it is offered at once there. */
export function sliceWidths(shape: ModelShape, request: VolunteerRequest): Array<[layer: number, width: number]> {
  const { maxExperts = 0, device, variants = ['silu'], types } = request;
  const widths: Array<[layer: number, width: number]> = [];
  for (const layer of shape.moeLayers) {
    const variant = shape.layerVariants?.[layer];
    if (variant && !computesVariant(variants, variant)) continue;
    const layerTypes = shape.layerTypes?.[layer];
    if (layerTypes && types && !readsLayer(types, layerTypes)) continue;
    const fit = deviceFit(shape, device, layer);
    if (!fit.fits) continue;
    let width = shape.nExpert;
    if (maxExperts > 0) width = Math.min(width, maxExperts);
    width = Math.min(width, fit.experts);
    widths.push([layer, width]);
  }
  return widths;
}

/** At most `max` slices, in the order the market would offer them. */
export function likelySlices(shape: ModelShape, request: VolunteerRequest, max: number): HeldRange[] {
  const widths = sliceWidths(shape, request);
  // The market's choice among equally scarce ranges: the widest free one, then the lowest layer.
  const next = new Map(widths.map(([layer]) => [layer, 0]));
  const out: HeldRange[] = [];
  while (out.length < max) {
    let pick: [layer: number, width: number] | undefined;
    for (const w of widths) {
      const free = shape.nExpert - next.get(w[0])!;
      if (free > 0 && (!pick || free > shape.nExpert - next.get(pick[0])!)) pick = w;
    }
    if (!pick) break;
    const [layer, width] = pick;
    const begin = next.get(layer)!;
    const end = Math.min(begin + width, shape.nExpert);
    out.push([layer, begin, end]);
    next.set(layer, end);
  }
  return out;
}
