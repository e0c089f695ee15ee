/**
 * What a tiny MoE model of each supported architecture consists of: its metadata keys and its tensors, with the
 * shapes llama.cpp's loader (pinned commit) expects. Pure data; `make-model.ts` fills the tensors with weights.
 *
 * Shapes are in ggml order: dims[0] is the row length (the contiguous dimension).
 */
import { GGMLType, quantTypeInfo } from '../gguf/quant-types.ts';

export const ARCHITECTURES = ['qwen3moe', 'qwen2moe', 'deepseek', 'llama', 'olmoe'] as const;
export type ArchName = (typeof ARCHITECTURES)[number];

export interface ModelConfig {
  arch: ArchName;
  layers: number;
  nEmbd: number;
  nExpert: number;
  nExpertUsed: number;
  /** Feed-forward width of one routed expert. */
  ff: number;
  /** Type of the big matrices (norms, router and other 1-D tensors stay F32). */
  type: GGMLType;
  seed: number;
  nHead: number;
  nHeadKv: number;
  /** Leading dense (non-MoE) layers; only `deepseek` has them. */
  denseLeading: number;
  /** Width of the shared expert (qwen2moe) or of one shared expert (deepseek: ff × count). */
  sharedFf: number;
  contextLength: number;
  /**
   * Loudness of the routed-expert branch: a multiplier on the amplitude of the routed experts' down projection
   * (1 = the unit-variance amplitude every other matrix gets). The default 0.1 keeps the branch quiet (see
   * make-model.ts); tests that judge expert outputs through the logits use a loud branch (≥ 1), so that an error in
   * the experts moves the logits as much as an error in any other matrix would.
   */
  expertScale: number;
}

/** How a tensor's weights are drawn; also decides its type. */
export type TensorRole = 'norm' | 'embed' | 'output' | 'attn' | 'router' | 'dense_ffn' | 'shared_ffn' | 'shared_gate' | 'expert';

export interface TensorPlan {
  name: string;
  dims: number[];
  role: TensorRole;
  type: GGMLType;
}

export type MetaEntry =
  | { key: string; kind: 'u32'; value: number }
  | { key: string; kind: 'f32'; value: number }
  | { key: string; kind: 'str'; value: string };

export interface ModelPlan {
  config: ModelConfig;
  metadata: MetaEntry[];
  tensors: TensorPlan[];
  /** Layers whose FFN is routed experts (the ones a volunteer can serve). */
  moeLayers: number[];
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
    denseLeading: partial.arch === 'deepseek' ? 1 : 0,
    sharedFf: partial.sharedFf ?? partial.ff ?? 64,
    contextLength: 4096,
    expertScale: 0.1,
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
  if (c.denseLeading > 0 && c.arch !== 'deepseek') problems.push(`only deepseek has leading dense layers`);
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
  return problems;
}

/** The whole model: metadata and every tensor in file order. */
export function planModel(c: ModelConfig, vocabSize: number): ModelPlan {
  const problems = validateConfig(c);
  if (problems.length > 0) throw new RangeError(problems.join('; '));
  const a = c.arch;
  const headDim = c.nEmbd / c.nHead;
  const kvDim = headDim * c.nHeadKv;
  const big = c.type;
  const F32 = GGMLType.F32;
  const metadata: MetaEntry[] = [
    { key: 'general.architecture', kind: 'str', value: a },
    { key: 'general.name', kind: 'str', value: `expertswarm-tiny-${a}` },
    { key: 'general.file_type', kind: 'u32', value: FILE_TYPE[c.type] as number },
    { key: `${a}.context_length`, kind: 'u32', value: c.contextLength },
    { key: `${a}.embedding_length`, kind: 'u32', value: c.nEmbd },
    { key: `${a}.block_count`, kind: 'u32', value: c.layers },
    // Dense FFN width: used by deepseek's leading layers; the MoE archs read expert_feed_forward_length instead.
    { key: `${a}.feed_forward_length`, kind: 'u32', value: a === 'llama' || a === 'olmoe' ? c.ff : c.sharedFf },
    { key: `${a}.attention.head_count`, kind: 'u32', value: c.nHead },
    { key: `${a}.attention.head_count_kv`, kind: 'u32', value: c.nHeadKv },
    { key: `${a}.attention.layer_norm_rms_epsilon`, kind: 'f32', value: 1e-6 },
    { key: `${a}.rope.freq_base`, kind: 'f32', value: 10000 },
    { key: `${a}.rope.dimension_count`, kind: 'u32', value: headDim },
    { key: `${a}.expert_count`, kind: 'u32', value: c.nExpert },
    { key: `${a}.expert_used_count`, kind: 'u32', value: c.nExpertUsed },
    { key: `${a}.vocab_size`, kind: 'u32', value: vocabSize },
  ];
  if (a === 'qwen3moe' || a === 'qwen2moe' || a === 'deepseek') {
    metadata.push({ key: `${a}.expert_feed_forward_length`, kind: 'u32', value: c.ff });
  }
  if (a === 'qwen2moe') metadata.push({ key: `${a}.expert_shared_feed_forward_length`, kind: 'u32', value: c.sharedFf });
  if (a === 'deepseek') {
    metadata.push({ key: `${a}.leading_dense_block_count`, kind: 'u32', value: c.denseLeading });
    if (c.sharedFf % c.ff !== 0) throw new RangeError(`deepseek: shared-ff (${c.sharedFf}) must be a multiple of ff (${c.ff})`);
    metadata.push({ key: `${a}.expert_shared_count`, kind: 'u32', value: c.sharedFf / c.ff });
    metadata.push({ key: `${a}.expert_weights_scale`, kind: 'f32', value: 1 });
  }

  const tensors: TensorPlan[] = [];
  const add = (name: string, dims: number[], role: TensorRole): void => {
    const type = role === 'norm' || role === 'router' || role === 'shared_gate' ? F32 : big;
    tensors.push({ name, dims, role, type });
  };
  add('token_embd.weight', [c.nEmbd, vocabSize], 'embed');
  add('output_norm.weight', [c.nEmbd], 'norm');
  add('output.weight', [c.nEmbd, vocabSize], 'output');

  const moeLayers: number[] = [];
  for (let i = 0; i < c.layers; i++) {
    const p = `blk.${i}`;
    add(`${p}.attn_norm.weight`, [c.nEmbd], 'norm');
    add(`${p}.attn_q.weight`, [c.nEmbd, c.nEmbd], 'attn');
    add(`${p}.attn_k.weight`, [c.nEmbd, kvDim], 'attn');
    add(`${p}.attn_v.weight`, [c.nEmbd, kvDim], 'attn');
    add(`${p}.attn_output.weight`, [c.nEmbd, c.nEmbd], 'attn');
    if (a === 'qwen3moe') {
      add(`${p}.attn_q_norm.weight`, [headDim], 'norm');
      add(`${p}.attn_k_norm.weight`, [headDim], 'norm');
    } else if (a === 'olmoe') {
      add(`${p}.attn_q_norm.weight`, [c.nEmbd], 'norm');
      add(`${p}.attn_k_norm.weight`, [kvDim], 'norm');
    }
    add(`${p}.ffn_norm.weight`, [c.nEmbd], 'norm');
    if (i < c.denseLeading) {
      add(`${p}.ffn_gate.weight`, [c.nEmbd, c.sharedFf], 'dense_ffn');
      add(`${p}.ffn_up.weight`, [c.nEmbd, c.sharedFf], 'dense_ffn');
      add(`${p}.ffn_down.weight`, [c.sharedFf, c.nEmbd], 'dense_ffn');
      continue;
    }
    moeLayers.push(i);
    add(`${p}.ffn_gate_inp.weight`, [c.nEmbd, c.nExpert], 'router');
    add(`${p}.ffn_gate_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_up_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_down_exps.weight`, [c.ff, c.nEmbd, c.nExpert], 'expert');
    if (a === 'qwen2moe' || a === 'deepseek') {
      if (a === 'qwen2moe') add(`${p}.ffn_gate_inp_shexp.weight`, [c.nEmbd], 'shared_gate');
      add(`${p}.ffn_gate_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
      add(`${p}.ffn_up_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
      add(`${p}.ffn_down_shexp.weight`, [c.sharedFf, c.nEmbd], 'shared_ffn');
    }
  }
  return { config: c, metadata, tensors, moeLayers };
}
