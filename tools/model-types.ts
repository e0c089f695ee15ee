/**
 * The shapes the model generator's modules share (model-arch.ts, model-arch-hybrid.ts, make-model.ts): the
 * architectures it writes, a model's configuration, and the plan of a model (its metadata and tensors). Types and
 * names only, so that the per-family modules import them from here and not from each other.
 */
import type { GGMLType } from '../gguf/quant-types.ts';

/** The hybrid families (linear-attention layers beside attention ones): model-arch-hybrid.ts plans them. */
export const HYBRID_ARCHITECTURES = ['qwen3next', 'qwen35moe'] as const;
export type HybridArchName = (typeof HYBRID_ARCHITECTURES)[number];

/**
 * Families whose loader wants the tensors of a family above under other metadata keys, with at most a few tensors of
 * their own (model-arch-kin.ts says which): planModel writes them with the others.
 */
export const KIN_ARCHITECTURES = [
  'dbrx',
  'phimoe',
  'granitemoe',
  'bailingmoe',
  'arctic',
  'qwen3vlmoe',
  'exaone-moe',
  'afmoe',
  'mistral4',
  'mellum',
  'hy_v3',
  'granite',
  'minicpm',
  'mistral3',
  'deepseek2-ocr',
  'granite_swa',
  'mimo2',
  'laguna',
  'cohere2moe',
  'deepseek32',
  'glm-dsa',
  'lfm2moe',
  'jamba',
  'granitehybrid',
  'dots3note',
  'minimax-01',
  'kimi-linear',
  'bailingmoe3',
] as const;
export type KinArchName = (typeof KIN_ARCHITECTURES)[number];

export const ARCHITECTURES = [
  'qwen3moe',
  'qwen2moe',
  'deepseek',
  'llama',
  'olmoe',
  'deepseek2',
  'glm4moe',
  'minimax-m2',
  'dots1',
  'ernie4_5-moe',
  'hunyuan-moe',
  'bailingmoe2',
  'llama4',
  'gpt-oss',
  'grok',
  'step35',
  'deepseek4',
  'gemma4',
  'minimax-m3',
  'qwen4exp',
  ...HYBRID_ARCHITECTURES,
  ...KIN_ARCHITECTURES,
] as const;
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
  /** Leading dense (non-MoE) layers; only the archs of DENSE_LEADING have them. */
  denseLeading: number;
  /** Width of the shared expert (qwen2moe) or of the shared experts together (deepseek, deepseek2, glm4moe: ff × count). */
  sharedFf: number;
  /** deepseek2's multi-head latent attention: rank of the query compression (0: no compression, one `attn_q`). */
  qLoraRank: number;
  /** deepseek2: rank of the key/value compression (the width of the latent the KV cache holds). */
  kvLoraRank: number;
  /** Expert groups for grouped top-k (deepseek2; 0: none): the router keeps the best `expertGroupsUsed` groups. */
  expertGroups: number;
  expertGroupsUsed: number;
  contextLength: number;
  /**
   * Loudness of the routed-expert branch: a multiplier on the amplitude of the routed experts' down projection
   * (1 = the unit-variance amplitude every other matrix gets). The default 0.1 keeps the branch quiet (see
   * make-model.ts); tests that judge expert outputs through the logits use a loud branch (≥ 1), so that an error in
   * the experts moves the logits as much as an error in any other matrix would.
   */
  expertScale: number;
  /**
   * Per-expert scale tensors `blk.N.ffn_{gate,up,down}_exps.scale` (F32 [n_expert], drawn in [0.5, 2)): llama.cpp
   * multiplies each selected expert's gate, up and down products by its scale. Only the families whose graph passes
   * them to build_moe_ffn (EXPERT_SCALE_ARCHS in model-arch.ts); `--expert-scales`. Not the loudness `expertScale`.
   */
  expertScales: boolean;
  /**
   * step35's clamped SwiGLU (`<arch>.swiglu_clamp_exp`, one limit per layer, 0: that layer unclamped): the routed
   * experts' up products are clamped to ±limit and silu(gate) to ≤ limit (deepseek4: silu(min(gate, limit)) and up
   * clamped to ±limit, ggml_swiglu_clamp). Empty for the families without it.
   */
  swigluLimits: number[];
  /**
   * deepseek4's hash layers (`hash_layer_count`): the first `hashLayers` layers pick their experts by token id from an
   * I32 table `ffn_gate_tid2eid` [n_expert_used, n_vocab] instead of by the router's top-k (the router still weighs
   * them). 0 for every other family.
   */
  hashLayers: number;
}

/** How a tensor's weights are drawn; also decides its type. */
export type TensorRole =
  | 'norm'
  | 'embed'
  // token embeddings the graph multiplies by √n_embd (gemma4): drawn √n_embd smaller, unit variance once scaled
  | 'embed_scaled'
  | 'output'
  | 'attn'
  | 'router'
  | 'router_bias'
  | 'dense_ffn'
  | 'shared_ffn'
  | 'shared_gate'
  | 'expert'
  // gpt-oss: the biases of q, k, v and the attention output; each head's attention sink (a logit every query also
  // attends to); the biases of the routed experts' gate, up and down projections
  | 'attn_bias'
  | 'attn_sinks'
  | 'expert_bias'
  // per-expert multipliers of the routed experts' gate, up and down products (ModelConfig.expertScales)
  | 'expert_scale'
  // the linear-attention layers of the hybrid families (model-arch-hybrid.ts): projections, convolution, decay, dt bias
  | 'ssm'
  | 'ssm_conv'
  | 'ssm_a'
  | 'ssm_dt'
  // deepseek4's hyper-connection mixers (hc_*_fn: F32, unit-variance mixes)
  | 'hc'
  // deepseek4's hash layers' table of expert ids per token (ffn_gate_tid2eid: I32, written by expertIdTable)
  | 'expert_ids';

export interface TensorPlan {
  name: string;
  dims: number[];
  role: TensorRole;
  type: GGMLType;
}

export type MetaEntry =
  | { key: string; kind: 'u32'; value: number }
  | { key: string; kind: 'f32'; value: number }
  | { key: string; kind: 'str'; value: string }
  | { key: string; kind: 'bool'; value: boolean }
  | { key: string; kind: 'i32[]'; value: number[] }
  | { key: string; kind: 'f32[]'; value: number[] }
  | { key: string; kind: 'bool[]'; value: boolean[] };

export interface ModelPlan {
  config: ModelConfig;
  metadata: MetaEntry[];
  tensors: TensorPlan[];
  /** Layers whose FFN is routed experts (the ones a volunteer can serve). */
  moeLayers: number[];
}
