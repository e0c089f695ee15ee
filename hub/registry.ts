/**
 * What the hub knows about each model, read once from its GGUF metadata at start (never on a request path).
 */
import { basename } from 'node:path';
import { readGGUFFile } from '../gguf/node-io.ts';
import { metaNumber, requireMetaString, type GGUFFile } from '../gguf/types.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { layerExpertTensors } from '../gguf/expert-slice.ts';
import { ExpertVariantError, isPlainVariant, layerVariant } from '../gguf/expert-variant.ts';
import type { ExpertVariant } from '../protocol/variant.ts';
import type { LayerTensorTypes } from '../protocol/tensor-types.ts';
import type { ModelShape } from './market/types.ts';

export interface ModelInfo extends ModelShape {
  path: string;
  arch: string;
  nExpertUsed: number;
  /** Feed-forward width of one routed expert. */
  expertFf: number;
  /** Type name of each expert matrix ("Q8_0") of the first MoE layer, by role (layerTypes has every layer's). */
  expertTypes: LayerTensorTypes;
  fileBytes: number;
}

/** The name the hub and the coordinator's `/v1/models` use for a model file: its base name without `.gguf`. */
export function modelNameFromPath(path: string): string {
  return basename(path).replace(/\.gguf$/i, '');
}

export function describeModel(path: string, file: GGUFFile, name = modelNameFromPath(path)): ModelInfo {
  const arch = requireMetaString(file, 'general.architecture');
  const num = (key: string): number => metaNumber(file, `${arch}.${key}`) ?? 0;
  const nLayer = num('block_count');
  const nExpert = num('expert_count');
  const moeLayers: number[] = [];
  let bytesPerExpert = 0;
  let maxMatrixBytesPerExpert = 0;
  let expertFf = 0;
  let expertTypes: LayerTensorTypes = { gate: '', up: '', down: '' };
  const layerVariants: Record<number, ExpertVariant> = {};
  // Each MoE layer's own: a mixed file (Q2_K_XL, Q3_K_M) has layers of different types, so of different sizes.
  const layerTypes: Record<number, LayerTensorTypes> = {};
  const layerBytes: Record<number, number> = {};
  for (let l = 0; l < nLayer; l++) {
    // A fused ffn_gate_up_exps counts as its gate and up halves (what a slice of it carries).
    const { gate, up, down } = layerExpertTensors(file, l).found;
    if (!gate || !up || !down) continue;
    const shape = { nEmbd: gate.dims[0] as number, ff: gate.dims[1] as number, nExpert: gate.dims[2] as number };
    let variant: ExpertVariant;
    try {
      variant = layerVariant(file, l, shape);
    } catch (e) {
      // Biases or scales the hub cannot describe (some of the three, another type): the layer is not offered and the
      // coordinator computes it, as it computes any layer no volunteer holds.
      if (e instanceof ExpertVariantError) continue;
      throw e;
    }
    moeLayers.push(l);
    if (!isPlainVariant(variant)) layerVariants[l] = variant;
    // Each matrix's bytes from its own type (the file's byte length: blocks × bytes per block, gguf/quant-types.ts).
    const per = [gate, up, down].map((t) => t.byteLength / (t.dims[2] as number));
    // a slice of a biased layer also carries each expert's float32 biases: gate and up [ff], down [n_embd]
    const biasBytes = (variant.biases ? 4 * (2 * shape.ff + shape.nEmbd) : 0) + (variant.scales ? 12 : 0);
    const bytes = per.reduce((a, b) => a + b, 0) + biasBytes;
    layerBytes[l] = bytes;
    bytesPerExpert = Math.max(bytesPerExpert, bytes);
    maxMatrixBytesPerExpert = Math.max(maxMatrixBytesPerExpert, ...per);
    const types: LayerTensorTypes = {
      gate: GGMLType[gate.type] ?? String(gate.type),
      up: GGMLType[up.type] ?? String(up.type),
      down: GGMLType[down.type] ?? String(down.type),
    };
    layerTypes[l] = types;
    if (expertFf === 0) {
      expertFf = gate.dims[1] as number;
      expertTypes = types;
    }
  }
  const uniform = moeLayers.every((l) => layerBytes[l] === bytesPerExpert);
  return {
    model: name,
    path,
    arch,
    nLayer,
    nExpert,
    nExpertUsed: num('expert_used_count'),
    nEmbd: num('embedding_length'),
    moeLayers,
    bytesPerExpert,
    maxMatrixBytesPerExpert,
    ...(!uniform && { layerBytesPerExpert: layerBytes }),
    ...(moeLayers.length > 0 && { layerTypes }),
    ...(Object.keys(layerVariants).length > 0 && { layerVariants }),
    expertFf,
    expertTypes,
    fileBytes: file.fileSize,
  };
}

export async function loadModelInfo(path: string, name?: string): Promise<ModelInfo> {
  return describeModel(path, await readGGUFFile(path), name);
}
