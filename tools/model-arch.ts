/**
 * What a tiny MoE model of each supported architecture consists of: its metadata keys and its tensors, with the
 * shapes llama.cpp's loader (pinned commit) expects. Pure data; `make-model.ts` fills the tensors with weights.
 *
 * Shapes are in ggml order: dims[0] is the row length (the contiguous dimension).
 */
import { GGMLType, quantTypeInfo } from '../gguf/quant-types.ts';
import { isHybridArch, planHybridModel, validateHybrid } from './model-arch-hybrid.ts';
import { DEEPSEEK4_ROUTING, deepseek4SwigluLimits, planDeepseek4Model, validateDeepseek4 } from './model-arch-deepseek4.ts';
import { planGemma4, validateGemma4 } from './model-arch-gemma4.ts';
import { MINIMAX_M3_ROUTING, planMinimaxM3, validateMinimaxM3 } from './model-arch-minimax-m3.ts';
import { planQwen4exp, validateQwen4exp } from './model-arch-qwen4exp.ts';
import {
  KIN,
  dsaIndexerTensors,
  isKinArch,
  kinMetadata,
  kdaLayer,
  kdaTensors,
  kinWith,
  lightningLayer,
  lightningTensors,
  mambaLayer,
  mambaTensors,
  shortConvLayer,
  shortConvTensors,
  validateKin,
  windowedMlaLayer,
} from './model-arch-kin.ts';
import {
  ARCHITECTURES,
  type ArchName,
  type MetaEntry,
  type ModelConfig,
  type ModelPlan,
  type TensorPlan,
  type TensorRole,
} from './model-types.ts';

export { ARCHITECTURES, type ArchName, type MetaEntry, type ModelConfig, type ModelPlan, type TensorPlan, type TensorRole };

/** Architectures whose first `denseLeading` layers have a dense FFN instead of routed experts. */
const DENSE_LEADING: readonly ArchName[] = [
  ...['deepseek', 'deepseek2', 'glm4moe', 'dots1', 'ernie4_5-moe', 'bailingmoe2', 'minimax-m3'],
  ...kinWith('denseLeading'),
] as ArchName[];
/** Architectures with shared experts counted in units of `ff` (`expert_shared_count` = sharedFf / ff). */
const SHARED_COUNT: readonly ArchName[] = ['deepseek', 'deepseek2', 'glm4moe', 'dots1', 'bailingmoe2', ...kinWith('sharedCount')];
/** Architectures with one shared expert of its own width (`expert_shared_feed_forward_length` = sharedFf). */
const SHARED_FF: readonly ArchName[] = ['qwen2moe', 'ernie4_5-moe', 'hunyuan-moe', 'step35', ...kinWith('sharedFf')];
/** Architectures whose experts are sized by `feed_forward_length` (the others read expert_feed_forward_length). */
const EXPERTS_BY_FF: readonly ArchName[] = ['llama', 'olmoe', 'minimax-m2', 'hunyuan-moe', ...kinWith('expertsByFf')];
/** Architectures with RMS norms over each head's queries and keys. */
const HEAD_QK_NORM: readonly ArchName[] = [
  ...['qwen3moe', 'glm4moe', 'dots1', 'hunyuan-moe', 'bailingmoe2', 'step35'],
  ...kinWith('headQkNorm'),
] as ArchName[];
/** Architectures that rotate half of each head (partial RoPE). */
const HALF_ROPE: readonly ArchName[] = ['deepseek2', 'glm4moe', 'minimax-m2', 'bailingmoe2', ...kinWith('mla')];
/** Architectures with deepseek2's multi-head latent attention (q/kv compression ranks, one cached latent). */
const MLA: readonly ArchName[] = ['deepseek2', ...kinWith('mla')];

/**
 * gpt-oss's sliding window (attention.sliding_window; the real models use 128). Its even layers attend to the last
 * GPT_OSS_SLIDING_WINDOW tokens only (llama.cpp's default swa pattern 2: every second layer full). Shorter than the
 * tests' prompt and generation together, so that the windowed layers attend differently from the full ones.
 */
export const GPT_OSS_SLIDING_WINDOW = 8;

/**
 * The families whose graph passes the per-expert scale tensors (`ffn_*_exps.scale`) to build_moe_ffn (pinned commit:
 * src/models/qwen3moe.cpp, llama.cpp, qwen3next.cpp, qwen35moe.cpp). llama.cpp's loader reads them for every
 * architecture, but the others' graphs would load and then ignore them: the generator refuses those.
 */
export const EXPERT_SCALE_ARCHS: readonly ArchName[] = ['qwen3moe', 'llama', 'qwen3next', 'qwen35moe'];

/** step35's sliding window, as gpt-oss's: shorter than the tests' prompt and generation together. */
export const STEP35_SLIDING_WINDOW = 8;

/** step35: layer `il` attends through the sliding window, as Step-3.5's layer_types (one full layer, three windowed). */
export function step35Windowed(il: number): boolean {
  return il % 4 !== 0;
}

/**
 * step35's default clamp limits, one per layer (`swiglu_clamp_exp`). Unit-variance gate and up products (normed input,
 * unit-variance matrices) would never reach Step-3.5's own limit of 7, so these are low enough to bite: |up| > 1.5 for
 * about 13% of the values, silu(gate) > 1.5 for about 6%. Every second layer is left unclamped (0) and the clamped ones
 * differ, as the real files' limits do per layer: a reader must take each layer's limit, not the first one.
 */
export function defaultSwigluLimits(layers: number): number[] {
  return Array.from({ length: layers }, (_, il) => (il % 2 === 1 ? 0 : 1.5 + 0.25 * il));
}

/**
 * How the router of an architecture picks and weighs experts (all on the coordinator: router authority). Sigmoid gates
 * with a selection bias (`exp_probs_b`), grouped top-k, normalised and scaled weights change which experts a worker is
 * sent and the weights it sums with, never the expert FFN it computes.
 */
export interface Routing {
  /**
   * llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE: 1 softmax, 2 sigmoid, 3 softmax over the selected experts' logits
   * (gpt-oss), 4 sqrt(softplus) (deepseek4: its own module writes its keys). Sigmoid families read the gating, norm
   * and scale keys from the file (written); the others here have them fixed in their graph (not written).
   */
  gating: 1 | 2 | 3 | 4;
  /** A per-expert selection bias `blk.N.exp_probs_b.bias` (DeepSeek-V3's e_score_correction_bias). */
  probsBias: boolean;
  /** `expert_weights_norm`: the selected weights are divided by their sum. */
  norm: boolean;
  /** `expert_weights_scale` (routed_scaling_factor); 0 leaves the key out. */
  scale: number;
}

const ROUTING: Partial<Record<ArchName, Routing>> = {
  deepseek2: { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  glm4moe: { gating: 2, probsBias: true, norm: true, scale: 1.5 },
  'minimax-m2': { gating: 2, probsBias: true, norm: true, scale: 0 },
  dots1: { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  bailingmoe2: { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  'ernie4_5-moe': { gating: 1, probsBias: true, norm: true, scale: 0 },
  'hunyuan-moe': { gating: 1, probsBias: false, norm: true, scale: 0 },
  // The router's own bias (ffn_gate_inp.bias) shifts the logits before the top-k, so it weighs as well as selects:
  // not a selection-only exp_probs_b. The softmax over the k selected logits makes the weights sum to 1.
  'gpt-oss': { gating: 3, probsBias: false, norm: true, scale: 0 },
  // Grok: softmax over all experts, the selected weights renormalised (build_moe_ffn's norm_w fixed true in grok.cpp).
  grok: { gating: 1, probsBias: false, norm: true, scale: 0 },
  // Step-3.5: sigmoid gates with a selection bias, normalised and scaled (moe_router_scaling_factor 3).
  step35: { gating: 2, probsBias: true, norm: true, scale: 3 },
  // DeepSeek-V4: sqrt(softplus) gates with a selection bias, normalised and scaled (model-arch-deepseek4.ts).
  deepseek4: DEEPSEEK4_ROUTING,
  'minimax-m3': MINIMAX_M3_ROUTING,
  // AFMoE, EXAONE MoE: sigmoid gates with a selection bias, normalised and scaled (route_scale).
  afmoe: { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  'exaone-moe': { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  hy_v3: { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  // MiMo-V2: sigmoid gates with a selection bias, normalised, fixed in its graph (no scale read).
  mimo2: { gating: 2, probsBias: true, norm: true, scale: 0 },
  laguna: { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  cohere2moe: { gating: 2, probsBias: false, norm: true, scale: 2.5 },
  deepseek32: { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  'glm-dsa': { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  lfm2moe: { gating: 2, probsBias: true, norm: true, scale: 0 },
  dots3note: { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  'kimi-linear': { gating: 2, probsBias: true, norm: true, scale: 2.5 },
  bailingmoe3: { gating: 2, probsBias: true, norm: true, scale: 2.5 },
};

/** The router an architecture's generated model asks llama.cpp for; undefined: softmax over all experts, as stock. */
export function routingOf(arch: ArchName): Routing | undefined {
  return ROUTING[arch];
}

/** llama.cpp's LLAMA_FTYPE for a file whose big matrices are `type`. */
const FILE_TYPE: Partial<Record<GGMLType, number>> = {
  [GGMLType.F32]: 0,
  [GGMLType.F16]: 1,
  [GGMLType.Q4_0]: 2,
  [GGMLType.Q4_1]: 3,
  [GGMLType.Q8_0]: 7,
  [GGMLType.Q5_0]: 8,
  [GGMLType.Q5_1]: 9,
  [GGMLType.Q2_K]: 10,
  [GGMLType.Q3_K]: 12,
  [GGMLType.Q4_K]: 15,
  [GGMLType.Q5_K]: 17,
  [GGMLType.Q6_K]: 18,
  [GGMLType.BF16]: 32,
  [GGMLType.MXFP4]: 38, // LLAMA_FTYPE_MOSTLY_MXFP4_MOE (every matrix MXFP4 here, as llama-quantize --pure writes it)
  [GGMLType.IQ4_NL]: 25, // LLAMA_FTYPE_MOSTLY_IQ4_NL
  [GGMLType.IQ4_XS]: 30, // LLAMA_FTYPE_MOSTLY_IQ4_XS
  [GGMLType.IQ2_XXS]: 19, // LLAMA_FTYPE_MOSTLY_IQ2_XXS (written by linkcpp-quantize: tools/llama-quantized.ts)
  [GGMLType.IQ2_XS]: 20, // LLAMA_FTYPE_MOSTLY_IQ2_XS (likewise)
  [GGMLType.IQ3_XXS]: 23, // LLAMA_FTYPE_MOSTLY_IQ3_XXS (likewise)
  [GGMLType.IQ1_S]: 24, // LLAMA_FTYPE_MOSTLY_IQ1_S (likewise)
  [GGMLType.IQ1_M]: 31, // LLAMA_FTYPE_MOSTLY_IQ1_M (likewise)
};

export function defaultConfig(partial: Partial<ModelConfig> & Pick<ModelConfig, 'arch'>): ModelConfig {
  const nEmbd = partial.nEmbd ?? 64;
  const nHead = partial.nHead ?? Math.max(1, Math.floor(nEmbd / 32));
  return {
    layers: 2,
    nExpert: 8,
    nExpertUsed: 2,
    ff: 64,
    type: GGMLType.F32,
    seed: 1,
    nHeadKv: partial.nHeadKv ?? nHead,
    denseLeading: DENSE_LEADING.includes(partial.arch) ? 1 : 0,
    sharedFf: partial.sharedFf ?? partial.ff ?? 64,
    // Kimi Linear's loader never reads q_lora_rank: its latent attention has one attn_q.
    qLoraRank: MLA.includes(partial.arch) && partial.arch !== 'kimi-linear' ? nEmbd / 2 : 0,
    kvLoraRank: MLA.includes(partial.arch) ? nEmbd / 2 : 0,
    expertGroups: partial.arch === 'deepseek2' && (partial.nExpert ?? 8) % 4 === 0 ? 4 : 0,
    expertGroupsUsed: partial.arch === 'deepseek2' && (partial.nExpert ?? 8) % 4 === 0 ? 2 : 0,
    contextLength: 4096,
    expertScale: 0.1,
    expertScales: false,
    swigluLimits:
      partial.arch === 'step35' || partial.arch === 'bailingmoe3'
        ? defaultSwigluLimits(partial.layers ?? 2)
        : partial.arch === 'deepseek4'
          ? deepseek4SwigluLimits(partial.layers ?? 2)
          : [],
    hashLayers: 0,
    ...partial,
    nEmbd,
    nHead,
  };
}

/** Checks the numbers a user gave and says which one is wrong; returns the list of problems. */
export function validateConfig(c: ModelConfig): string[] {
  const problems: string[] = [];
  const positive: Array<[string, number]> = [
    ['layers', c.layers],
    ['n-embd', c.nEmbd],
    ['n-expert', c.nExpert],
    ['n-expert-used', c.nExpertUsed],
    ['ff', c.ff],
    ['n-head', c.nHead],
    ['n-head-kv', c.nHeadKv],
    ['shared-ff', c.sharedFf],
    ['context', c.contextLength],
  ];
  for (const [name, v] of positive) {
    if (!Number.isInteger(v) || v <= 0) problems.push(`--${name} must be a positive integer, got ${v}`);
  }
  if (!Number.isInteger(c.seed) || c.seed < 0) problems.push(`--seed must be a non-negative integer, got ${c.seed}`);
  if (!Number.isFinite(c.expertScale) || c.expertScale <= 0 || c.expertScale > 100) {
    problems.push(`--expert-scale must be a number in (0, 100], got ${c.expertScale}`);
  }
  if (c.nExpertUsed > c.nExpert) problems.push(`--n-expert-used (${c.nExpertUsed}) exceeds --n-expert (${c.nExpert})`);
  if (c.nExpert > 512) problems.push(`--n-expert ${c.nExpert} exceeds llama.cpp's limit of 512`);
  if (c.nEmbd % c.nHead !== 0) problems.push(`--n-embd (${c.nEmbd}) must be divisible by --n-head (${c.nHead})`);
  else if ((c.nEmbd / c.nHead) % 2 !== 0) problems.push(`head size ${c.nEmbd / c.nHead} must be even for RoPE`);
  if (c.nHead % c.nHeadKv !== 0) problems.push(`--n-head (${c.nHead}) must be divisible by --n-head-kv (${c.nHeadKv})`);
  if (c.denseLeading < 0 || c.denseLeading >= c.layers) {
    problems.push(`dense leading layers (${c.denseLeading}) must be in [0, layers)`);
  }
  if (c.denseLeading > 0 && !DENSE_LEADING.includes(c.arch)) {
    problems.push(`only ${DENSE_LEADING.join(', ')} have leading dense layers`);
  }
  // Llama 4's attention is chunked in 3 layers of every 4 and full in the 4th; llama.cpp needs one full layer at least.
  if (c.arch === 'llama4' && c.layers < 4) problems.push(`llama4 needs at least 4 layers (every 4th attends in full), got ${c.layers}`);
  if (c.hashLayers !== 0 && c.arch !== 'deepseek4') problems.push(`--hash-layers: only deepseek4 routes layers by token id, not ${c.arch}`);
  if (c.expertScales && !EXPERT_SCALE_ARCHS.includes(c.arch)) {
    problems.push(`--expert-scales: only ${EXPERT_SCALE_ARCHS.join(', ')} pass per-expert scales to their experts, not ${c.arch}`);
  }
  if (c.swigluLimits.length > 0) {
    if (c.arch !== 'step35' && c.arch !== 'deepseek4' && c.arch !== 'bailingmoe3')
      problems.push(`--swiglu-limit: only step35, bailingmoe3 and deepseek4 clamp their experts' SwiGLU, not ${c.arch}`);
    else if (c.swigluLimits.length !== c.layers) {
      problems.push(`--swiglu-limit: ${c.swigluLimits.length} limits for ${c.layers} layers (give one, or one per layer)`);
    }
    for (const v of c.swigluLimits) {
      if (!Number.isFinite(v) || v < 0) problems.push(`--swiglu-limit must be finite and ≥ 0 (0: unclamped), got ${v}`);
    }
  }
  if (c.arch === 'step35') {
    // Layer 0 attends in full, the next through the window: llama.cpp's windowed cache needs one windowed layer.
    if (c.layers < 2) problems.push(`step35 needs at least 2 layers (a windowed one beside a full one), got ${c.layers}`);
    if ((c.nEmbd / c.nHead) % 4 !== 0)
      problems.push(`step35: head size ${c.nEmbd / c.nHead} must be a multiple of 4 (full layers rotate half of it)`);
  }
  if (c.arch === 'dots1' && c.nHeadKv !== c.nHead) problems.push(`dots1 has no grouped-query attention: --n-head-kv must equal --n-head`);
  if (SHARED_COUNT.includes(c.arch) && c.sharedFf % c.ff !== 0) {
    problems.push(`${c.arch}: --shared-ff (${c.sharedFf}) must be a multiple of --ff (${c.ff}): shared experts are counted in units of ff`);
  }
  if (MLA.includes(c.arch)) {
    if (!Number.isInteger(c.qLoraRank) || c.qLoraRank < 0) problems.push(`q_lora_rank must be a non-negative integer, got ${c.qLoraRank}`);
    if (!Number.isInteger(c.kvLoraRank) || c.kvLoraRank <= 0) problems.push(`kv_lora_rank must be a positive integer, got ${c.kvLoraRank}`);
    if ((c.nEmbd / c.nHead) % 4 !== 0)
      problems.push(`${c.arch}: head size ${c.nEmbd / c.nHead} must be a multiple of 4 (half of it rotated)`);
  } else if (c.qLoraRank !== 0 || c.kvLoraRank !== 0) {
    problems.push(`only ${MLA.join(', ')} have q_lora_rank / kv_lora_rank`);
  }
  if (c.expertGroups !== 0) {
    if (c.arch !== 'deepseek2') problems.push(`only deepseek2 routes by expert groups`);
    else if (
      !Number.isInteger(c.expertGroups) ||
      c.expertGroups < 2 ||
      c.nExpert % c.expertGroups !== 0 ||
      c.nExpert / c.expertGroups < 2
    ) {
      problems.push(`expert groups (${c.expertGroups}) must divide --n-expert (${c.nExpert}) into groups of at least 2`);
    } else if (!Number.isInteger(c.expertGroupsUsed) || c.expertGroupsUsed < 1 || c.expertGroupsUsed >= c.expertGroups) {
      problems.push(`expert groups used (${c.expertGroupsUsed}) must be in [1, ${c.expertGroups})`);
    } else if (c.expertGroupsUsed * (c.nExpert / c.expertGroups) < c.nExpertUsed) {
      problems.push(`the ${c.expertGroupsUsed} groups used hold fewer experts than --n-expert-used (${c.nExpertUsed})`);
    }
  }
  const info = quantTypeInfo(c.type);
  if (!info) problems.push(`unknown type id ${c.type}`);
  else if (FILE_TYPE[c.type] === undefined) problems.push(`type ${info.name} is not supported by the generator`);
  else {
    for (const [name, width] of [
      ['n-embd', c.nEmbd],
      ['ff', c.ff],
      ['shared-ff', c.sharedFf],
    ] as const) {
      if (width % info.blockSize !== 0) {
        problems.push(`--${name} (${width}) must be a multiple of ${info.name}'s block size ${info.blockSize}`);
      }
    }
  }
  if (isHybridArch(c.arch)) problems.push(...validateHybrid(c));
  if (c.arch === 'deepseek4') problems.push(...validateDeepseek4(c));
  if (c.arch === 'gemma4') problems.push(...validateGemma4(c));
  if (c.arch === 'minimax-m3') problems.push(...validateMinimaxM3(c));
  if (c.arch === 'qwen4exp') problems.push(...validateQwen4exp(c));
  if (isKinArch(c.arch)) problems.push(...validateKin(c));
  return problems;
}

/**
 * The type of a matrix whose rows do not fill whole blocks of `type` (deepseek2's latent-attention matrices at K-quant
 * widths): what llama.cpp's quantizer falls back to for such rows (llama-quant.cpp: q4_K → q5_0, q5_K → q5_1,
 * q6_K → q8_0, iq4_xs and the IQ1/IQ2/IQ3 types → iq4_nl; the smaller K-quants to q4_0 here), else F32.
 */
export function rowType(type: GGMLType, rowLength: number): GGMLType {
  const fits = (t: GGMLType): boolean => rowLength % (quantTypeInfo(t)?.blockSize ?? 1) === 0;
  if (fits(type)) return type;
  const fallback: Partial<Record<GGMLType, GGMLType>> = {
    [GGMLType.Q2_K]: GGMLType.Q4_0,
    [GGMLType.Q3_K]: GGMLType.Q4_0,
    [GGMLType.Q4_K]: GGMLType.Q5_0,
    [GGMLType.Q5_K]: GGMLType.Q5_1,
    [GGMLType.Q6_K]: GGMLType.Q8_0,
    [GGMLType.IQ4_XS]: GGMLType.IQ4_NL,
    [GGMLType.IQ2_XXS]: GGMLType.IQ4_NL,
    [GGMLType.IQ2_XS]: GGMLType.IQ4_NL,
    [GGMLType.IQ3_XXS]: GGMLType.IQ4_NL,
    [GGMLType.IQ1_S]: GGMLType.IQ4_NL,
    [GGMLType.IQ1_M]: GGMLType.IQ4_NL,
  };
  const f = fallback[type];
  return f !== undefined && fits(f) ? f : GGMLType.F32;
}

/** Roles of the tensors that stay F32 whatever the type asked for: vectors, the router, the shared expert's gate. */
const SMALL_ROLES: readonly TensorRole[] = [
  'norm',
  'router',
  'router_bias',
  'shared_gate',
  'attn_bias',
  'attn_sinks',
  'expert_bias',
  'expert_scale',
  // the recurrent layers' (lfm2moe, jamba) convolution windows, decays and time-step biases, as llama.cpp's ssm ops read them
  'ssm_conv',
  'ssm_a',
  'ssm_dt',
];

/** The whole model: metadata and every tensor in file order. */
export function planModel(c: ModelConfig, vocabSize: number): ModelPlan {
  const problems = validateConfig(c);
  if (problems.length > 0) throw new RangeError(problems.join('; '));
  if (isHybridArch(c.arch)) return planHybridModel(c, vocabSize, FILE_TYPE[c.type] as number);
  if (c.arch === 'deepseek4') return planDeepseek4Model(c, vocabSize, FILE_TYPE[c.type] as number, rowType);
  if (c.arch === 'gemma4') return planGemma4(c, vocabSize, FILE_TYPE[c.type] as number);
  if (c.arch === 'minimax-m3') return planMinimaxM3(c, vocabSize, FILE_TYPE[c.type] as number);
  if (c.arch === 'qwen4exp') return planQwen4exp(c, vocabSize, FILE_TYPE[c.type] as number, rowType);
  const a = c.arch;
  const headDim = c.nEmbd / c.nHead;
  const kvDim = headDim * c.nHeadKv;
  const big = c.type;
  const F32 = GGMLType.F32;
  const mla = MLA.includes(a);
  const oss = a === 'gpt-oss';
  const grok = a === 'grok';
  const step = a === 'step35';
  // deepseek2: each head's key is a non-rotated half and a rotated half of headDim; values are headDim wide.
  const ropeDim = HALF_ROPE.includes(a) ? headDim / 2 : headDim;
  // gpt-oss has no dense FFN: its converter writes the experts' width (intermediate_size) to both keys.
  const denseFf = EXPERTS_BY_FF.includes(a) || oss ? c.ff : c.sharedFf;
  const metadata: MetaEntry[] = [
    { key: 'general.architecture', kind: 'str', value: a },
    { key: 'general.name', kind: 'str', value: `expertswarm-tiny-${a}` },
    { key: 'general.file_type', kind: 'u32', value: FILE_TYPE[c.type] as number },
    { key: `${a}.context_length`, kind: 'u32', value: c.contextLength },
    { key: `${a}.embedding_length`, kind: 'u32', value: c.nEmbd },
    { key: `${a}.block_count`, kind: 'u32', value: c.layers },
    // Dense FFN width: the leading dense layers' (deepseek, deepseek2, glm4moe); llama, olmoe and minimax-m2 size
    // their experts by it; the other MoE archs read expert_feed_forward_length for the experts.
    { key: `${a}.feed_forward_length`, kind: 'u32', value: denseFf },
    { key: `${a}.attention.head_count`, kind: 'u32', value: c.nHead },
    // deepseek2's latent attention keeps one key/value head: the compressed latent and the rotated part of the key.
    { key: `${a}.attention.head_count_kv`, kind: 'u32', value: mla ? 1 : c.nHeadKv },
    { key: `${a}.attention.layer_norm_rms_epsilon`, kind: 'f32', value: 1e-6 },
    { key: `${a}.rope.freq_base`, kind: 'f32', value: 10000 },
    { key: `${a}.rope.dimension_count`, kind: 'u32', value: ropeDim },
    { key: `${a}.expert_count`, kind: 'u32', value: c.nExpert },
    { key: `${a}.expert_used_count`, kind: 'u32', value: c.nExpertUsed },
    { key: `${a}.vocab_size`, kind: 'u32', value: vocabSize },
  ];
  if (a !== 'llama' && a !== 'olmoe') metadata.push({ key: `${a}.expert_feed_forward_length`, kind: 'u32', value: c.ff });
  if (SHARED_FF.includes(a)) metadata.push({ key: `${a}.expert_shared_feed_forward_length`, kind: 'u32', value: c.sharedFf });
  // ernie4_5-moe: every layer past the dense ones routed (the step between MoE layers is required).
  if (a === 'ernie4_5-moe') metadata.push({ key: `${a}.interleave_moe_layer_step`, kind: 'u32', value: 1 });
  // llama4: every second layer routed, the others dense (Maverick's interleave). No sliding_window key: the loader
  // then sets Llama 4's own attention (chunks of 8192, longer than any test context; no RoPE in every 4th layer;
  // temperature tuning). Its experts take the router weight before the FFN.
  if (a === 'llama4') metadata.push({ key: `${a}.interleave_moe_layer_step`, kind: 'u32', value: 2 });
  if (DENSE_LEADING.includes(a)) metadata.push({ key: `${a}.leading_dense_block_count`, kind: 'u32', value: c.denseLeading });
  if (SHARED_COUNT.includes(a)) metadata.push({ key: `${a}.expert_shared_count`, kind: 'u32', value: c.sharedFf / c.ff });
  if (a === 'deepseek') metadata.push({ key: `${a}.expert_weights_scale`, kind: 'f32', value: 1 });
  if (isKinArch(a)) {
    // A kin family's own entry replaces a common one of the same key (lfm2moe's per-layer head_count_kv).
    for (const m of kinMetadata(a, c)) {
      const at = metadata.findIndex((x) => x.key === m.key);
      if (at >= 0) metadata[at] = m;
      else metadata.push(m);
    }
  }
  if (mla) {
    metadata.push(
      { key: `${a}.attention.q_lora_rank`, kind: 'u32', value: c.qLoraRank },
      { key: `${a}.attention.kv_lora_rank`, kind: 'u32', value: c.kvLoraRank },
      // What the cache holds per token (the latent and the rotated key) and what a head is once decompressed.
      { key: `${a}.attention.key_length`, kind: 'u32', value: c.kvLoraRank + ropeDim },
      { key: `${a}.attention.value_length`, kind: 'u32', value: c.kvLoraRank },
      { key: `${a}.attention.key_length_mla`, kind: 'u32', value: headDim },
      { key: `${a}.attention.value_length_mla`, kind: 'u32', value: headDim },
    );
  }
  if (oss) {
    // No sliding_window_pattern key: llama.cpp's default for gpt-oss (2) is the real models' alternation, and their
    // files do not write it. key_length sizes the q, k and v projections (n_rot per head).
    metadata.push(
      { key: `${a}.attention.sliding_window`, kind: 'u32', value: GPT_OSS_SLIDING_WINDOW },
      { key: `${a}.attention.key_length`, kind: 'u32', value: headDim },
      { key: `${a}.attention.value_length`, kind: 'u32', value: headDim },
    );
  }
  if (grok) {
    // The loader's defaults are Grok-1's multipliers (embeddings × 78.4, logits × 0.577, attention logits × 0.088
    // before the tanh soft-cap of 30): ×78 would drown the layers' normed outputs in the residual of these unit-variance
    // embeddings. 1, 1 and 1/√head (the real models' attention multiplier for their head size 128) instead.
    metadata.push(
      { key: `${a}.embedding_scale`, kind: 'f32', value: 1 },
      { key: `${a}.logit_scale`, kind: 'f32', value: 1 },
      { key: `${a}.attention.output_scale`, kind: 'f32', value: 1 / Math.sqrt(headDim) },
    );
  }
  if (step) {
    // Full layers rotate half of each head (the loader halves rope.dimension_count), windowed ones all of it.
    metadata.push(
      { key: `${a}.attention.sliding_window`, kind: 'u32', value: STEP35_SLIDING_WINDOW },
      {
        key: `${a}.attention.sliding_window_pattern`,
        kind: 'bool[]',
        value: Array.from({ length: c.layers }, (_, il) => step35Windowed(il)),
      },
    );
  }
  // One limit per layer, as Step-3.5's converter writes them (llama.cpp also takes one scalar for all layers).
  if (c.swigluLimits.length > 0) metadata.push({ key: `${a}.swiglu_clamp_exp`, kind: 'f32[]', value: [...c.swigluLimits] });
  const routing = ROUTING[a];
  if (routing?.gating === 2) {
    metadata.push({ key: `${a}.expert_gating_func`, kind: 'u32', value: routing.gating });
    metadata.push({ key: `${a}.expert_weights_norm`, kind: 'bool', value: routing.norm });
    if (routing.scale !== 0) metadata.push({ key: `${a}.expert_weights_scale`, kind: 'f32', value: routing.scale });
  }
  if (c.expertGroups > 0) {
    metadata.push({ key: `${a}.expert_group_count`, kind: 'u32', value: c.expertGroups });
    metadata.push({ key: `${a}.expert_group_used_count`, kind: 'u32', value: c.expertGroupsUsed });
  }

  const tensors: TensorPlan[] = [];
  const add = (name: string, dims: number[], role: TensorRole): void => {
    const small = SMALL_ROLES.includes(role);
    tensors.push({ name, dims, role, type: small ? F32 : rowType(big, dims[0] as number) });
  };
  add('token_embd.weight', [c.nEmbd, vocabSize], 'embed');
  // LFM2's output norm carries the name token_embd_norm (a naming slip its loader keeps).
  add(isKinArch(a) && KIN[a].shortConv ? 'token_embd_norm.weight' : 'output_norm.weight', [c.nEmbd], 'norm');
  add('output.weight', [c.nEmbd, vocabSize], 'output');
  if (a === 'phimoe') {
    add('output_norm.bias', [c.nEmbd], 'attn_bias');
    add('output.bias', [vocabSize], 'attn_bias');
  }

  const moeLayers: number[] = [];
  for (let i = 0; i < c.layers; i++) {
    const p = `blk.${i}`;
    add(`${p}.attn_norm.weight`, [c.nEmbd], 'norm');
    const conv = shortConvLayer(a, i);
    const mamba = mambaLayer(a, i);
    const lightning = lightningLayer(a, i);
    if (conv) {
      for (const t of shortConvTensors(p, c)) add(t.name, t.dims, t.role);
    } else if (lightning) {
      for (const t of lightningTensors(p, c)) add(t.name, t.dims, t.role);
    } else if (kdaLayer(a, i)) {
      for (const t of kdaTensors(p, c)) add(t.name, t.dims, t.role);
    } else if (mamba) {
      for (const t of mambaTensors(p, c)) add(t.name, t.dims, t.role);
    } else if (mla) {
      const nope = headDim - ropeDim;
      if (c.qLoraRank > 0) {
        add(`${p}.attn_q_a_norm.weight`, [c.qLoraRank], 'norm');
        add(`${p}.attn_q_a.weight`, [c.nEmbd, c.qLoraRank], 'attn');
        add(`${p}.attn_q_b.weight`, [c.qLoraRank, c.nHead * headDim], 'attn');
      } else {
        add(`${p}.attn_q.weight`, [c.nEmbd, c.nHead * headDim], 'attn');
      }
      add(`${p}.attn_kv_a_norm.weight`, [c.kvLoraRank], 'norm');
      add(`${p}.attn_kv_a_mqa.weight`, [c.nEmbd, c.kvLoraRank + ropeDim], 'attn');
      // The split form current conversions write (attn_kv_b is the legacy one): per head, the latent → key's
      // non-rotated part (absorbed into the query) and latent → value.
      add(`${p}.attn_k_b.weight`, [nope, c.kvLoraRank, c.nHead], 'attn');
      add(`${p}.attn_v_b.weight`, [c.kvLoraRank, headDim, c.nHead], 'attn');
      add(`${p}.attn_output.weight`, [c.nHead * headDim, c.nEmbd], 'attn');
      const windowed = windowedMlaLayer(a, i);
      if (isKinArch(a) && KIN[a].dsaIndexer && !windowed) for (const t of dsaIndexerTensors(p, c)) add(t.name, t.dims, t.role);
      // dots3note: the shared rotated key's norm; dots3note and bailingmoe3: one sigmoid gate per head on the output.
      if (isKinArch(a) && KIN[a].windowedMla) add(`${p}.attn_k_norm.weight`, [ropeDim], 'norm');
      if (isKinArch(a) && KIN[a].attnGatePerHead) add(`${p}.attn_gate.weight`, [c.nEmbd, c.nHead], 'attn');
    } else if (a === 'bailingmoe2' || a === 'dbrx') {
      add(`${p}.attn_qkv.weight`, [c.nEmbd, c.nEmbd + 2 * kvDim], 'attn');
      add(`${p}.attn_output.weight`, [c.nEmbd, c.nEmbd], 'attn');
      // DBRX: the attention output's norm is the experts' input norm (it has no ffn_norm).
      if (a === 'dbrx') add(`${p}.attn_output_norm.weight`, [c.nEmbd], 'norm');
    } else if (oss) {
      // Biases on q, k, v and the output; one sink logit per head.
      add(`${p}.attn_q.weight`, [c.nEmbd, c.nEmbd], 'attn');
      add(`${p}.attn_q.bias`, [c.nEmbd], 'attn_bias');
      add(`${p}.attn_k.weight`, [c.nEmbd, kvDim], 'attn');
      add(`${p}.attn_k.bias`, [kvDim], 'attn_bias');
      add(`${p}.attn_v.weight`, [c.nEmbd, kvDim], 'attn');
      add(`${p}.attn_v.bias`, [kvDim], 'attn_bias');
      add(`${p}.attn_output.weight`, [c.nEmbd, c.nEmbd], 'attn');
      add(`${p}.attn_output.bias`, [c.nEmbd], 'attn_bias');
      add(`${p}.attn_sinks.weight`, [c.nHead], 'attn_sinks');
    } else {
      add(`${p}.attn_q.weight`, [c.nEmbd, c.nEmbd], 'attn');
      add(`${p}.attn_k.weight`, [c.nEmbd, kvDim], 'attn');
      add(`${p}.attn_v.weight`, [c.nEmbd, kvDim], 'attn');
      add(`${p}.attn_output.weight`, [c.nEmbd, c.nEmbd], 'attn');
      // Grok RMS-normalises the attention output before the residual add.
      if (grok) add(`${p}.attn_output_norm.weight`, [c.nEmbd], 'norm');
      // Step-3.5: one sigmoid gate per head on the attention output (g_proj).
      if (step || (isKinArch(a) && KIN[a].attnGatePerHead)) add(`${p}.attn_gate.weight`, [c.nEmbd, c.nHead], 'attn');
      // AFMoE: one sigmoid gate per attention output element, a norm after the attention.
      if (a === 'afmoe') {
        add(`${p}.attn_gate.weight`, [c.nEmbd, c.nEmbd], 'attn');
        add(`${p}.post_attention_norm.weight`, [c.nEmbd], 'norm');
      }
      // Phi-3.5-MoE: layer norms with biases, a bias on the attention output.
      if (a === 'phimoe') {
        add(`${p}.attn_norm.bias`, [c.nEmbd], 'attn_bias');
        add(`${p}.attn_output.bias`, [c.nEmbd], 'attn_bias');
      }
      if (isKinArch(a) && KIN[a].attnSinks) add(`${p}.attn_sinks.weight`, [c.nHead], 'attn_sinks');
    }
    if (HEAD_QK_NORM.includes(a) && !conv) {
      add(`${p}.attn_q_norm.weight`, [headDim], 'norm');
      add(`${p}.attn_k_norm.weight`, [headDim], 'norm');
    } else if (a === 'olmoe' || a === 'minimax-m2') {
      add(`${p}.attn_q_norm.weight`, [c.nEmbd], 'norm');
      add(`${p}.attn_k_norm.weight`, [kvDim], 'norm');
    }
    // glm4moe and gpt-oss name their FFN norm after the attention (HF post_attention_layernorm).
    const ffnNorm = a !== 'dbrx' && !(isKinArch(a) && KIN[a].parallelResidual);
    if (ffnNorm) add(a === 'glm4moe' || oss ? `${p}.post_attention_norm.weight` : `${p}.ffn_norm.weight`, [c.nEmbd], 'norm');
    if (a === 'phimoe') add(`${p}.ffn_norm.bias`, [c.nEmbd], 'attn_bias');
    if (a === 'afmoe') add(`${p}.post_ffw_norm.weight`, [c.nEmbd], 'norm');
    if (i < c.denseLeading || (a === 'llama4' && (i + 1) % 2 !== 0)) {
      add(`${p}.ffn_gate.weight`, [c.nEmbd, c.sharedFf], 'dense_ffn');
      add(`${p}.ffn_up.weight`, [c.nEmbd, c.sharedFf], 'dense_ffn');
      add(`${p}.ffn_down.weight`, [c.sharedFf, c.nEmbd], 'dense_ffn');
      continue;
    }
    // Arctic: a dense MLP as wide as the model beside the experts, which read the layer's input through their own norm.
    if (a === 'arctic') {
      add(`${p}.ffn_gate.weight`, [c.nEmbd, c.nEmbd], 'dense_ffn');
      add(`${p}.ffn_up.weight`, [c.nEmbd, c.nEmbd], 'dense_ffn');
      add(`${p}.ffn_down.weight`, [c.nEmbd, c.nEmbd], 'dense_ffn');
      add(`${p}.ffn_norm_exps.weight`, [c.nEmbd], 'norm');
    }
    // Grok-2: a dense GELU-gated FFN beside the experts in every layer ((dense + experts) · √2/2, then normed).
    if (grok) {
      add(`${p}.ffn_gate.weight`, [c.nEmbd, c.sharedFf], 'dense_ffn');
      add(`${p}.ffn_up.weight`, [c.nEmbd, c.sharedFf], 'dense_ffn');
      add(`${p}.ffn_down.weight`, [c.sharedFf, c.nEmbd], 'dense_ffn');
    }
    moeLayers.push(i);
    add(`${p}.ffn_gate_inp.weight`, [c.nEmbd, c.nExpert], 'router');
    // hy_v3's loader names the selection bias without the `.bias` suffix.
    if (routing?.probsBias) add(a === 'hy_v3' ? `${p}.exp_probs_b` : `${p}.exp_probs_b.bias`, [c.nExpert], 'router_bias');
    if (oss) {
      // gpt-oss: the router's bias on its logits; each expert's gate, up and down projections have biases (one row
      // per expert), separate tensors as its converter writes them (it splits HF's interleaved gate_up).
      add(`${p}.ffn_gate_inp.bias`, [c.nExpert], 'router_bias');
      add(`${p}.ffn_gate_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
      add(`${p}.ffn_gate_exps.bias`, [c.ff, c.nExpert], 'expert_bias');
      add(`${p}.ffn_up_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
      add(`${p}.ffn_up_exps.bias`, [c.ff, c.nExpert], 'expert_bias');
      add(`${p}.ffn_down_exps.weight`, [c.ff, c.nEmbd, c.nExpert], 'expert');
      add(`${p}.ffn_down_exps.bias`, [c.nEmbd, c.nExpert], 'expert_bias');
      continue;
    }
    if (isKinArch(a) && KIN[a].fusedGateUp) {
      add(`${p}.ffn_gate_up_exps.weight`, [c.nEmbd, 2 * c.ff, c.nExpert], 'expert');
    } else {
      add(`${p}.ffn_gate_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
      add(`${p}.ffn_up_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    }
    add(`${p}.ffn_down_exps.weight`, [c.ff, c.nEmbd, c.nExpert], 'expert');
    if (c.expertScales) {
      for (const m of ['gate', 'up', 'down']) add(`${p}.ffn_${m}_exps.scale`, [c.nExpert], 'expert_scale');
    }
    // Grok RMS-normalises the FFN output before the residual add.
    if (grok) add(`${p}.layer_output_norm.weight`, [c.nEmbd], 'norm');
    if (a === 'llama4') {
      // one shared expert as wide as a routed one
      add(`${p}.ffn_gate_shexp.weight`, [c.nEmbd, c.ff], 'shared_ffn');
      add(`${p}.ffn_up_shexp.weight`, [c.nEmbd, c.ff], 'shared_ffn');
      add(`${p}.ffn_down_shexp.weight`, [c.ff, c.nEmbd], 'shared_ffn');
    }
    if (SHARED_FF.includes(a) || SHARED_COUNT.includes(a)) {
      if (a === 'qwen2moe') add(`${p}.ffn_gate_inp_shexp.weight`, [c.nEmbd], 'shared_gate');
      if (isKinArch(a) && KIN[a].fusedSharedGateUp) {
        add(`${p}.ffn_up_shexp.weight`, [c.nEmbd, 2 * c.sharedFf], 'shared_ffn');
      } else {
        add(`${p}.ffn_gate_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
        add(`${p}.ffn_up_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
      }
      add(`${p}.ffn_down_shexp.weight`, [c.sharedFf, c.nEmbd], 'shared_ffn');
    }
  }
  return { config: c, metadata, tensors, moeLayers };
}
