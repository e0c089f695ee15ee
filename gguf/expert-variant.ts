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
import { GGUFValueType, findTensor, metaNumberArray } from './types.ts';
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

/** Whether `v` is anything but plain SiLU-gated experts without biases or scales. */
export function isPlainVariant(v: ExpertVariant): boolean {
  return v.activation === 'silu' && !v.biases && !v.scales;
}

/** Throws a RangeError naming the field when `v` is not a variant a worker could compute. */
export function checkVariant(v: ExpertVariant): void {
  if (!EXPERT_ACTIVATIONS.includes(v.activation)) throw new RangeError(`unknown expert activation ${String(v.activation)}`);
  if (v.activation === 'swiglu_oai') {
    if (!(Number.isFinite(v.alpha) && v.alpha > 0)) throw new RangeError(`swiglu_oai needs alpha > 0, got ${v.alpha}`);
  } else if (v.alpha !== 0) {
    throw new RangeError(`${v.activation} takes no alpha, got ${v.alpha}`);
  }
  if (LIMITED_ACTIVATIONS.includes(v.activation)) {
    if (!(Number.isFinite(v.limit) && v.limit > 0)) throw new RangeError(`${v.activation} needs limit > 0, got ${v.limit}`);
  } else if (v.limit !== 0) {
    throw new RangeError(`${v.activation} takes no limit, got ${v.limit}`);
  }
}

export type ExpertBiasName = 'gate' | 'up' | 'down';
export const EXPERT_BIASES: readonly ExpertBiasName[] = ['gate', 'up', 'down'];

export function expertBiasName(layer: number, which: ExpertBiasName): string {
  return `blk.${layer}.ffn_${which}_exps.bias`;
}

/**
 * Architectures whose experts are not SiLU-gated, with the gated unit llama.cpp's build_moe_ffn computes for them:
 * gpt-oss and minimax-m3 LLM_FFN_SWIGLU_OAI_MOE (alpha 1.702 and limit 7, fixed there), grok and gemma4 LLM_FFN_GELU.
 * Every other architecture is SiLU-gated, clamped where the model sets swiglu_clamp_exp (layerVariant); those the
 * dispatch path does not serve are refused by the coordinator (docs/families.md).
 */
const ACTIVATION_OF_ARCH: Readonly<Record<string, Pick<ExpertVariant, 'activation' | 'alpha' | 'limit'>>> = {
  'gpt-oss': { activation: 'swiglu_oai', alpha: GPT_OSS_VARIANT.alpha, limit: 7 },
  'minimax-m3': { activation: 'swiglu_oai', alpha: GPT_OSS_VARIANT.alpha, limit: 7 },
  grok: { activation: 'gelu', alpha: 0, limit: 0 },
  gemma4: { activation: 'gelu', alpha: 0, limit: 0 },
};

/**
 * Whether metadata key `key` is one layerVariant reads (besides general.architecture): a reader that keeps only some of
 * a model's metadata (the hub's shard server drops the tokenizer's arrays) keeps these, or every clamp reads as 0.
 */
export function isVariantMetadataKey(key: string): boolean {
  return key.endsWith('.swiglu_clamp_exp');
}

/** `<arch>.swiglu_clamp_exp` of `layer`: one float for every layer or an array of one per layer; 0 when absent. */
export function swigluClampLimit(file: GGUFFile, arch: string, layer: number): number {
  const key = `${arch}.swiglu_clamp_exp`;
  const v = file.metadata.get(key);
  if (v?.type === GGUFValueType.FLOAT32) return v.value;
  const per = metaNumberArray(file, key);
  const x = per?.[layer];
  return typeof x === 'number' ? x : 0;
}

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
  const a = file.metadata.get('general.architecture');
  const arch = a?.type === GGUFValueType.STRING ? a.value : '';
  let unit: Pick<ExpertVariant, 'activation' | 'alpha' | 'limit'> = ACTIVATION_OF_ARCH[arch] ?? SILU_VARIANT;
  // build_moe_ffn clamps a SiLU-gated layer with a split gate (not a fused gate_up) whose limit is set
  const limit = unit.activation === 'silu' ? Math.fround(swigluClampLimit(file, arch, layer)) : 0;
  if (limit > 1e-6 && findTensor(file, `blk.${layer}.ffn_gate_exps.weight`)) {
    unit = { activation: arch === 'deepseek4' ? 'swiglu_clamp' : 'silu_limit', alpha: 0, limit };
  }
  const biases = layerBiasTensors(file, layer, shape) !== undefined;
  const scales = modelScaleTensors(file, layer, shape.nExpert) !== undefined;
  return { ...unit, biases, ...(scales && { scales }) };
}

export function expertScaleName(layer: number, which: ExpertBiasName): string {
  return `blk.${layer}.ffn_${which}_exps.scale`;
}

/** A layer's per-expert scale tensors as a model file has them: any of the three; a missing one scales by 1. */
export type LayerScaleTensors = Partial<Record<ExpertBiasName, GGUFTensorInfo>>;

function scaleTensor(file: GGUFFile, layer: number, which: ExpertBiasName, nExpert: number): GGUFTensorInfo | undefined {
  const t = findTensor(file, expertScaleName(layer, which));
  if (t && (t.type !== GGMLType.F32 || t.dims.length !== 1 || t.dims[0] !== nExpert)) {
    throw new ExpertVariantError(`${t.name} is ${GGMLType[t.type] ?? t.type} [${t.dims.join(', ')}]; expected F32 [${nExpert}]`);
  }
  return t;
}

/**
 * A model layer's per-expert scale tensors (F32 [nExpert]): those it has (llama.cpp multiplies each product by its
 * scale when the tensor exists and leaves it alone when not: Gemma 4's files carry a down scale alone), or undefined
 * when it has none. Throws ExpertVariantError when one has another type or shape.
 */
export function modelScaleTensors(file: GGUFFile, layer: number, nExpert: number): LayerScaleTensors | undefined {
  const out: LayerScaleTensors = {};
  for (const b of EXPERT_BIASES) {
    const t = scaleTensor(file, layer, b, nExpert);
    if (t) out[b] = t;
  }
  return Object.keys(out).length === 0 ? undefined : out;
}

/**
 * A slice's per-expert scale tensors (F32 [nExpert]): all three, or none (the hub writes a missing model scale as
 * ones). Throws ExpertVariantError when only some exist or one has another type or shape.
 */
export function layerScaleTensors(file: GGUFFile, layer: number, nExpert: number): Record<ExpertBiasName, GGUFTensorInfo> | undefined {
  const found = modelScaleTensors(file, layer, nExpert);
  if (found === undefined) return undefined;
  const missing = EXPERT_BIASES.filter((b) => found[b] === undefined);
  if (missing.length > 0) {
    throw new ExpertVariantError(
      `layer ${layer} has some per-expert scales but not ${missing.map((b) => expertScaleName(layer, b)).join(', ')}`,
    );
  }
  return found as Record<ExpertBiasName, GGUFTensorInfo>;
}

/** Experts [begin, end) of one scale tensor as float32 values; ones where the model has no such tensor. */
export async function readScaleRange(
  source: ByteSource,
  file: GGUFFile,
  t: GGUFTensorInfo | undefined,
  begin: number,
  end: number,
): Promise<Float32Array> {
  return t ? readBiasRange(source, file, t, begin, end) : new Float32Array(end - begin).fill(1);
}

/** Experts [begin, end) of one bias or scale tensor, as float32 values (absolute offsets: the file's data offset is added). */
export async function readBiasRange(
  source: ByteSource,
  file: GGUFFile,
  t: GGUFTensorInfo,
  begin: number,
  end: number,
): Promise<Float32Array> {
  // a bias tensor [len, n_expert] holds len floats per expert, a scale tensor [n_expert] one
  const len = t.dims.length === 1 ? 1 : (t.dims[0] as number);
  const start = file.dataOffset + t.offset + begin * len * 4;
  const n = (end - begin) * len * 4;
  const bytes = await source.read(start, n);
  if (bytes.length !== n) throw new GGUFError('GGUF_IO', `byte source returned ${bytes.length} bytes, ${n} were asked for`, start);
  const copy = new Uint8Array(n);
  copy.set(bytes);
  return new Float32Array(copy.buffer);
}
