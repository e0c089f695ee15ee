/**
 * Which weight types a worker reads (issue 26). A volunteer's engine reads some ggml tensor types and not others (the
 * WGSL kernels' snippets, the wasm kernel's decoders, the onnxruntime fallback's dequantizers); a worker lists the
 * type names it reads (`types` in its channel hello and in `POST /api/expert-volunteer`), the hub reads each MoE
 * layer's gate, up and down types from the model file, and the market offers a layer only to a worker that reads all
 * three. A layer nobody reads is held by no worker, so the coordinator computes it (never sent to a worker).
 *
 *   readsLayer(['F32', 'Q4_K', 'Q6_K'], { gate: 'Q4_K', up: 'Q4_K', down: 'Q6_K' })   // true
 *   unreadTensors(['Q4_K'], { gate: 'IQ1_S', up: 'IQ1_S', down: 'Q4_K' })             // ['gate IQ1_S', 'up IQ1_S']
 *
 * Names are ggml's (`GGMLType`: "Q4_K", "IQ2_XXS"), case as ggml writes them. Optional on the wire: a client that lists
 * none is offered every type (as before issue 26); its engine then refuses a slice it cannot read (UNSUPPORTED_TYPE,
 * `load_failed`).
 */
import { GGMLType } from '../gguf/quant-types.ts';

/** Every ggml type name a worker may list; others are dropped from a list (a newer client may know more). */
export const TENSOR_TYPE_NAMES: readonly string[] = Object.keys(GGMLType).filter((k) => Number.isNaN(Number(k)));

/** The three expert matrices of a layer, each by its type name. */
export interface LayerTensorTypes {
  gate: string;
  up: string;
  down: string;
}

const ROLES = ['gate', 'up', 'down'] as const;

/** `role TYPE` for each of the layer's matrices whose type `reads` lacks; empty when it reads them all. */
export function unreadTensors(reads: readonly string[], layer: LayerTensorTypes): string[] {
  return ROLES.filter((r) => !reads.includes(layer[r])).map((r) => `${r} ${layer[r]}`);
}

/** Whether a worker that lists `reads` reads every matrix of the layer; `undefined` (lists none) reads everything. */
export function readsLayer(reads: readonly string[] | undefined, layer: LayerTensorTypes): boolean {
  return reads === undefined || unreadTensors(reads, layer).length === 0;
}

/** Type ids as the names a worker lists, in ggml's order. */
export function tensorTypeNames(types: readonly number[]): string[] {
  return TENSOR_TYPE_NAMES.filter((n) => types.includes(GGMLType[n as keyof typeof GGMLType]));
}
