/**
 * A MoE layer's expert FFN variant as a model file states it (protocol/variant.ts): the activation the architecture's
 * llama.cpp graph asks for, and the expert biases the layer has. The hub describes layers and cuts slices with it, the
 * test backends compute with it. Browser-safe.
 *
 * Biases, when a layer has them, are float32 tensors next to its matrices:
 *   blk.L.ffn_gate_exps.bias, blk.L.ffn_up_exps.bias   ne = [ff, n_expert]
 *   blk.L.ffn_down_exps.bias                           ne = [n_embd, n_expert]
 * (llama.cpp adds them with ggml_add_id: gate and up before the activation, down before the router weight).
 */
import { GGUFError } from './errors.ts';
import { GGMLType } from './quant-types.ts';
import type { ByteSource } from './reader.ts';
import { GGUFValueType, findTensor } from './types.ts';
import type { GGUFFile, GGUFTensorInfo } from './types.ts';

// The variant vocabulary (protocol/variant.ts re-exports it with what a worker announces): defined here, at the
// floor both the model file's readers and the protocol stand on.

export type ExpertActivation = 'silu' | 'swiglu_oai' | 'swiglu_clamp' | 'silu_limit' | 'gelu';
export const EXPERT_ACTIVATIONS: readonly ExpertActivation[] = ['silu', 'swiglu_oai', 'swiglu_clamp', 'silu_limit', 'gelu'];
/** The activations that take a limit L (and, swiglu_oai alone, a slope α). */
export const LIMITED_ACTIVATIONS: readonly ExpertActivation[] = ['swiglu_oai', 'swiglu_clamp', 'silu_limit'];

export interface ExpertVariant {
  activation: ExpertActivation;
  /** swiglu_oai: the sigmoid's slope α (gpt-oss: 1.702, fixed by llama.cpp); 0 for every other activation. */
  alpha: number;
  /** The clamp limit L of swiglu_oai (gpt-oss: 7), swiglu_clamp and silu_limit (the model's swiglu_clamp_exp); else 0. */
  limit: number;
  /** Whether each expert adds a bias after its gate, up and down products (float32 vectors, ffn_*_exps.bias). */
  biases: boolean;
  /**
   * Whether each expert multiplies its gate, up and down products by a scale of its own (float32 scalars,
   * ffn_*_exps.scale: models whose expert weights are stored scaled). Absent: false.
   */
  scales?: boolean;
}

/** Every family before issue 25: SiLU-gated, no biases. A slice or layer that says nothing is this. */
export const SILU_VARIANT: Readonly<ExpertVariant> = Object.freeze({ activation: 'silu', alpha: 0, limit: 0, biases: false });

/** gpt-oss (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE with the constants build_moe_ffn fixes, and expert biases). */
export const GPT_OSS_VARIANT: Readonly<ExpertVariant> = Object.freeze({
  activation: 'swiglu_oai',
  alpha: Math.fround(1.702),
  limit: 7,
  biases: true,
});

export type ExpertBiasName = 'gate' | 'up' | 'down';
export const EXPERT_BIASES: readonly ExpertBiasName[] = ['gate', 'up', 'down'];

export function expertBiasName(layer: number, which: ExpertBiasName): string {
  return `blk.${layer}.ffn_${which}_exps.bias`;
}

/**
 * Architectures whose experts are not SiLU-gated, with the variant llama.cpp's build_moe_ffn computes for them
 * (gpt-oss: LLM_FFN_SWIGLU_OAI_MOE, alpha 1.702 and limit 7 fixed there). Every other architecture the dispatch path
 * serves is SiLU-gated; those it does not serve are refused by the coordinator (docs/families.md).
 */
const ACTIVATION_OF_ARCH: Readonly<Record<string, ExpertVariant>> = { 'gpt-oss': GPT_OSS_VARIANT };

export class ExpertVariantError extends Error {
  override readonly name = 'ExpertVariantError';
  readonly code = 'VARIANT_BAD_BIASES';
}

/**
 * The layer's bias tensors: all three, or none. Throws ExpertVariantError when only some exist or one is not a float32
 * [ff or n_embd, nExpert] tensor.
 */
export function layerBiasTensors(
  file: GGUFFile,
  layer: number,
  shape: { nEmbd: number; ff: number; nExpert: number },
): Record<ExpertBiasName, GGUFTensorInfo> | undefined {
  const found = EXPERT_BIASES.map((b) => findTensor(file, expertBiasName(layer, b)));
  if (found.every((t) => t === undefined)) return undefined;
  const missing = EXPERT_BIASES.filter((_, i) => found[i] === undefined);
  if (missing.length > 0) {
    throw new ExpertVariantError(
      `layer ${layer} has some expert biases but not ${missing.map((b) => expertBiasName(layer, b)).join(', ')}`,
    );
  }
  const out = {} as Record<ExpertBiasName, GGUFTensorInfo>;
  EXPERT_BIASES.forEach((b, i) => {
    const t = found[i] as GGUFTensorInfo;
    const len = b === 'down' ? shape.nEmbd : shape.ff;
    if (t.type !== GGMLType.F32 || t.dims.length !== 2 || t.dims[0] !== len || t.dims[1] !== shape.nExpert) {
      throw new ExpertVariantError(
        `${t.name} is ${GGMLType[t.type] ?? t.type} [${t.dims.join(', ')}]; expected F32 [${len}, ${shape.nExpert}]`,
      );
    }
    out[b] = t;
  });
  return out;
}

/** The variant of `layer` (shape: its experts' dims): the architecture's activation, biases if the layer has them. */
export function layerVariant(file: GGUFFile, layer: number, shape: { nEmbd: number; ff: number; nExpert: number }): ExpertVariant {
  const arch = file.metadata.get('general.architecture');
  const base = (arch?.type === GGUFValueType.STRING && ACTIVATION_OF_ARCH[arch.value]) || SILU_VARIANT;
  const biases = layerBiasTensors(file, layer, shape) !== undefined;
  return { ...base, biases };
}

/** Experts [begin, end) of one bias tensor, as float32 values (absolute offsets: the file's data offset is added). */
export async function readBiasRange(
  source: ByteSource,
  file: GGUFFile,
  t: GGUFTensorInfo,
  begin: number,
  end: number,
): Promise<Float32Array> {
  const len = t.dims[0] as number;
  const start = file.dataOffset + t.offset + begin * len * 4;
  const n = (end - begin) * len * 4;
  const bytes = await source.read(start, n);
  if (bytes.length !== n) throw new GGUFError('GGUF_IO', `byte source returned ${bytes.length} bytes, ${n} were asked for`, start);
  const copy = new Uint8Array(n);
  copy.set(bytes);
  return new Float32Array(copy.buffer);
}
