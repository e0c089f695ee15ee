/**
 * Which slice to offer a volunteer (`POST /api/expert-volunteer`). Pure: demand snapshots and shapes in, one
 * answer out.
 *
 *   chooseAssignment([demandOfA, demandOfB], shapes, { model: '', maxExperts: 64, device, held })
 *
 * Ranking, best first: higher scarcity, then the wider free range, then the lowest model name, layer and begin
 * (so equal inputs always give the same answer). Only demand segments with scarcity > 0 are offered. Ranges the
 * volunteer already holds are cut out of each segment first, and every free piece competes on its own: the volunteer
 * never gets an overlap with what it holds, and among equally wide pieces the first (lowest begin) wins.
 * The winner is clipped to `[begin, min(end, begin + maxExperts, begin + device capacity))`.
 *
 * Request validation throws HubError (BODY_INVALID, MODEL_UNKNOWN); market outcomes ("nothing wanted", "device too
 * small") are answers, `{assigned: false, code, reason}`: a stable `RefusalCode` to match and a sentence to read.
 */
import { HubError } from '../errors.ts';
import type { DeviceCapabilities, ExpertRange, HeldRange, ModelDemand, ModelShape } from './types.ts';
import { computesVariant, describeVariant, variantFeatures, type ExpertVariant } from '../../protocol/variant.ts';
import { readsLayer, unreadTensors } from '../../protocol/tensor-types.ts';

export interface VolunteerRequest {
  /** '' or missing = any model. */
  model?: string;
  /** 0 or missing = no limit. */
  maxExperts?: number;
  device?: DeviceCapabilities;
  /** What this volunteer already holds (its coverage: ranges of one model); never offered again. */
  held?: { model: string; ranges: readonly HeldRange[] };
  /** Expert FFN variant features it computes (protocol/variant.ts); missing = ['silu'] (clients before variants). */
  variants?: readonly string[];
  /**
   * The ggml type names its engine reads (protocol/tensor-types.ts); missing = not stated (clients before issue 26):
   * offered every type, its engine refusing what it cannot read.
   */
  types?: readonly string[];
}

export interface Assignment {
  assigned: true;
  model: string;
  layer: number;
  /** `[begin, end)`. */
  experts: [number, number];
  scarcity: number;
  replicas: number;
  target: number;
  n_embd: number;
  n_layer: number;
  n_expert: number;
}

/** Why the device cannot take one expert of a model. */
export type DeviceRefusalCode =
  /** One expert matrix is larger than the device's maxStorageBufferBindingSize. */
  | 'binding-too-small'
  /** One expert matrix is larger than the device's maxBufferSize. */
  | 'buffer-too-small'
  /** memoryBudgetBytes is less than one whole expert. */
  | 'budget-too-small';

/** Why a volunteer is offered nothing. Callers and tests match the code; `reason` says it to a person. */
export type RefusalCode =
  /** No expert of the asked model (or of any model) is below its target replicas. */
  | 'nothing-wanted'
  /** Everything below target is already held by this volunteer. */
  | 'already-held'
  /** Every wanted piece is on a layer whose expert FFN variant this volunteer does not compute. */
  | 'variant-unsupported'
  /** Every wanted piece is on a layer with a gate, up or down of a type this volunteer does not read (each named). */
  | 'type-unsupported'
  /** Something is wanted, but no model with a wanted piece fits the device; the code says which limit. */
  | DeviceRefusalCode;

export interface Refusal {
  assigned: false;
  code: RefusalCode;
  reason: string;
}

export type VolunteerAnswer = Assignment | Refusal;

export type DeviceFit = { fits: true; experts: number } | { fits: false; code: DeviceRefusalCode; reason: string };

interface Candidate {
  model: string;
  layer: number;
  begin: number;
  end: number;
  scarcity: number;
  replicas: number;
  target: number;
  /** Its model and layer: the key of its device fit. */
  fitKey: string;
}

export function chooseAssignment(
  demands: readonly ModelDemand[],
  shapes: ReadonlyMap<string, ModelShape>,
  request: VolunteerRequest = {},
): VolunteerAnswer {
  const { model = '', maxExperts = 0, device, held, variants = ['silu'], types } = request;
  checkRequest(model, maxExperts, device);
  if (model !== '' && !demands.some((d) => d.model === model)) {
    throw new HubError('MODEL_UNKNOWN', `model ${JSON.stringify(model)} is not served here; GET /v1/models lists the names`);
  }

  const fitOf = new Map<string, DeviceFit>();
  let best: Candidate | undefined;
  let bestFitting: Candidate | undefined;
  let scarceSeen = false;
  let variantSkipped: ExpertVariant | undefined;
  let typeSkipped: { model: string; layer: number; unread: string[] } | undefined;
  for (const demand of demands) {
    if (model !== '' && demand.model !== model) continue;
    const shape = shapes.get(demand.model);
    if (!shape) continue; // no shape, no n_embd to hand out: not offerable
    const heldOfModel = held?.model === demand.model ? held.ranges : [];
    for (const { layer, segments } of demand.layers) {
      const variant = shape.layerVariants?.[layer];
      if (variant && !computesVariant(variants, variant)) {
        if (segments.some((seg) => seg.scarcity > 0)) variantSkipped = variant;
        continue;
      }
      const layerTypes = shape.layerTypes?.[layer];
      if (layerTypes && types && !readsLayer(types, layerTypes)) {
        if (!typeSkipped && segments.some((seg) => seg.scarcity > 0)) {
          typeSkipped = { model: demand.model, layer, unread: unreadTensors(types, layerTypes) };
        }
        continue;
      }
      // Layers of one model may differ in type, so in bytes per expert: the device's fit is per layer.
      const fitKey = `${demand.model}\u0000${layer}`;
      let fit = fitOf.get(fitKey);
      if (!fit) {
        fit = deviceFit(shape, device, layer);
        fitOf.set(fitKey, fit);
      }
      const heldHere = heldOfModel.filter(([l]) => l === layer).map(([, begin, end]) => ({ begin, end }));
      for (const seg of segments) {
        if (!(seg.scarcity > 0)) continue;
        scarceSeen = true;
        for (const piece of freeRanges(seg.experts[0], seg.experts[1], heldHere)) {
          const c: Candidate = {
            model: demand.model,
            layer,
            ...piece,
            scarcity: seg.scarcity,
            replicas: seg.replicas,
            target: seg.target,
            fitKey,
          };
          if (!best || better(c, best)) best = c;
          if (fit.fits && (!bestFitting || better(c, bestFitting))) bestFitting = c;
        }
      }
    }
  }

  const scope = model === '' ? 'any served model' : JSON.stringify(model);
  if (!scarceSeen && typeSkipped) {
    const { model: m, layer, unread } = typeSkipped;
    return {
      assigned: false,
      code: 'type-unsupported',
      reason: `the wanted experts of ${scope} are in layers whose weights this volunteer cannot read (${m} layer ${layer}: ${unread.join(', ')}); it reads ${types?.join(', ') || 'none'}`,
    };
  }
  if (!scarceSeen && variantSkipped) {
    const need = variantFeatures(variantSkipped).join(', ');
    return {
      assigned: false,
      code: 'variant-unsupported',
      reason: `the wanted experts of ${scope} are ${describeVariant(variantSkipped)} experts (features ${need}); this volunteer computes ${variants.join(', ') || 'none'}`,
    };
  }
  if (!scarceSeen) return { assigned: false, code: 'nothing-wanted', reason: `no expert of ${scope} is below its target replicas` };
  if (!best)
    return { assigned: false, code: 'already-held', reason: `this volunteer already holds every expert of ${scope} that is below target` };
  if (!bestFitting) {
    // Had best's own layer fit, best itself would be bestFitting: so its layer is one the device cannot take.
    const fit = fitOf.get(best.fitKey)!;
    if (fit.fits) throw new Error('chooseAssignment: the best candidate fits the device but was not chosen');
    return { assigned: false, code: fit.code, reason: fit.reason };
  }

  const c = bestFitting;
  const shape = shapes.get(c.model)!;
  const fit = fitOf.get(c.fitKey)!;
  let width = c.end - c.begin;
  if (maxExperts > 0) width = Math.min(width, maxExperts);
  if (fit.fits) width = Math.min(width, fit.experts);
  return {
    assigned: true,
    model: c.model,
    layer: c.layer,
    experts: [c.begin, c.begin + width],
    scarcity: c.scarcity,
    replicas: c.replicas,
    target: c.target,
    n_embd: shape.nEmbd,
    n_layer: shape.nLayer,
    n_expert: shape.nExpert,
  };
}

/**
 * The request for the next slice of a volunteer that holds `held` (ranges of one model; multi-slice volunteers,
 * docs/volunteer-channel.md `max_slices`) and asks as `request`: the same model, never those ranges again, and its
 * memory budget less what the experts it holds take (the market's measure: `bytesPerExpert`, one number for every
 * layer or each layer's own, bytesForExpertOf, since each tensor has its own type). Holding nothing, the request as
 * it is.
 */
export function nextSliceRequest(
  request: VolunteerRequest,
  held: { model: string; ranges: readonly HeldRange[] },
  bytesPerExpert: number | ((layer: number) => number),
): VolunteerRequest {
  if (held.ranges.length === 0) return request;
  const per = typeof bytesPerExpert === 'number' ? () => bytesPerExpert : bytesPerExpert;
  const spent = held.ranges.reduce((n, [layer, begin, end]) => n + (end - begin) * per(layer), 0);
  const budget = request.device?.memoryBudgetBytes;
  return {
    ...request,
    model: held.model,
    held,
    ...(budget !== undefined && { device: { ...request.device, memoryBudgetBytes: Math.max(0, budget - spent) } }),
  };
}

/** Bytes one expert of `layer` takes (its gate, up and down in their own types): layerBytesPerExpert, else bytesPerExpert. */
export function bytesForExpertOf(shape: Pick<ModelShape, 'bytesPerExpert' | 'layerBytesPerExpert'>, layer: number): number {
  return shape.layerBytesPerExpert?.[layer] ?? shape.bytesPerExpert;
}

/**
 * How many experts of `shape` the device can take (Infinity when it states no budget): of `layer` where given (its
 * own bytes per expert), else of the model's largest. Each expert matrix has to fit one storage-buffer binding and
 * one buffer; the memory budget bounds the count.
 */
export function deviceFit(shape: ModelShape, device: DeviceCapabilities | undefined, layer?: number): DeviceFit {
  const matrix = shape.maxMatrixBytesPerExpert;
  const binding = device?.maxStorageBufferBindingSize;
  if (binding !== undefined && matrix > binding) {
    return {
      fits: false,
      code: 'binding-too-small',
      reason: `one expert matrix of ${shape.model} is ${matrix} bytes, above this device's maxStorageBufferBindingSize of ${binding}`,
    };
  }
  const buffer = device?.maxBufferSize;
  if (buffer !== undefined && matrix > buffer) {
    return {
      fits: false,
      code: 'buffer-too-small',
      reason: `one expert matrix of ${shape.model} is ${matrix} bytes, above this device's maxBufferSize of ${buffer}`,
    };
  }
  const budget = device?.memoryBudgetBytes;
  if (budget === undefined) return { fits: true, experts: Infinity };
  const perExpert = layer === undefined ? shape.bytesPerExpert : bytesForExpertOf(shape, layer);
  const experts = Math.floor(budget / perExpert);
  if (experts < 1) {
    const of = layer === undefined ? shape.model : `${shape.model} layer ${layer}`;
    return {
      fits: false,
      code: 'budget-too-small',
      reason: `memoryBudgetBytes ${budget} is less than one expert of ${of} (${perExpert} bytes)`,
    };
  }
  return { fits: true, experts };
}

/** `[begin, end)` minus the held ranges, as ordered disjoint pieces. */
export function freeRanges(begin: number, end: number, held: readonly ExpertRange[]): ExpertRange[] {
  const cuts = held.filter((h) => h.begin < end && h.end > begin).sort((a, b) => a.begin - b.begin);
  const out: ExpertRange[] = [];
  let at = begin;
  for (const h of cuts) {
    if (h.begin > at) out.push({ begin: at, end: h.begin });
    at = Math.max(at, h.end);
    if (at >= end) return out;
  }
  if (at < end) out.push({ begin: at, end });
  return out;
}

function better(a: Candidate, b: Candidate): boolean {
  if (a.scarcity !== b.scarcity) return a.scarcity > b.scarcity;
  const wa = a.end - a.begin;
  const wb = b.end - b.begin;
  if (wa !== wb) return wa > wb;
  if (a.model !== b.model) return a.model < b.model;
  if (a.layer !== b.layer) return a.layer < b.layer;
  return a.begin < b.begin;
}

function checkRequest(model: unknown, maxExperts: unknown, device: DeviceCapabilities | undefined): void {
  if (typeof model !== 'string') throw new HubError('BODY_INVALID', 'model must be a string ("" = any)');
  if (!Number.isSafeInteger(maxExperts) || (maxExperts as number) < 0) {
    throw new HubError('BODY_INVALID', 'max_experts must be an integer ≥ 0 (0 = no limit)');
  }
  if (device === undefined) return;
  if (typeof device !== 'object' || device === null) throw new HubError('BODY_INVALID', 'device must be an object of capabilities');
  for (const k of ['maxStorageBufferBindingSize', 'maxBufferSize', 'memoryBudgetBytes'] as const) {
    const v = device[k];
    if (v !== undefined && !(typeof v === 'number' && Number.isFinite(v) && v >= 0)) {
      throw new HubError('BODY_INVALID', `device.${k} must be a finite number ≥ 0`);
    }
  }
}
