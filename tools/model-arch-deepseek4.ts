/**
 * `deepseek4` (DeepSeek-V4): the smallest model the pinned llama.cpp loader (src/models/deepseek4.cpp:
 * load_arch_hparams, load_arch_tensors) accepts and runs. model-arch.ts's planModel hands this architecture here.
 *
 * What the loader requires and how it is met here:
 *  - hyper-connections: four residual streams (`hyper_connection.count` 4, asserted by the graph), mixed before and
 *    after attention and the FFN by `hc_{attn,ffn}_{fn,base,scale}` and at the head by `output_hc_{fn,base,scale}`
 *    (F32, as the converter keeps them: role `hc` for the mixing matrices, ones for bases and scales);
 *  - attention: a compressed query (`attn_q_a` → norm → `attn_q_b`), one key/value head shared by all heads
 *    (`attn_kv`, normed, also the value), an attention sink per head, a grouped low-rank output (`attn_output_a`
 *    per group of heads, then `attn_output_b`), windowed to DEEPSEEK4_SLIDING_WINDOW; `compress_ratios` 4 in the odd
 *    layers (compressed keys and a lightning indexer: DEEPSEEK4_CSA_RATIO), 0 in the others (the window alone; no
 *    layer of ratio 128);
 *  - every layer MoE: a sqrt-softplus router (`expert_gating_func` 4, the only one the loader takes) with a
 *    selection bias `exp_probs_b`, weights normalised and scaled, SiLU-gated experts clamped in DeepSeek-V4's form
 *    silu(min(g, L)) · clamp(u, −L, L) at `swiglu_clamp_exp` (the shared experts take the same limits:
 *    `swiglu_clamp_shexp` is absent), plus shared experts (`expert_shared_count` × ff wide);
 *  - `hash_layer_count` ModelConfig.hashLayers (default 0): the first layers pick their experts by token id from an I32
 *    table `ffn_gate_tid2eid` [n_expert_used, n_vocab] (expertIdTable), without a selection bias (the router still
 *    weighs the picked experts); no MTP layers.
 *
 * Shapes are in ggml order, as in model-arch.ts: dims[0] is the row length.
 */
import { GGMLType } from '../gguf/quant-types.ts';
import type { MetaEntry, ModelConfig, ModelPlan, TensorPlan, TensorRole } from './model-types.ts';

/** Hyper-connection streams: the graph asserts 4. */
export const DEEPSEEK4_HC = 4;
/**
 * The attention window (the real model's is 128): shorter than the tests' prompt and generation together, so that
 * the window matters, as gpt-oss's and step35's do.
 */
export const DEEPSEEK4_SLIDING_WINDOW = 8;
/**
 * Compressed sparse attention (compress ratio 4: every 4 positions' keys pooled into one, a lightning indexer picking
 * the top-k of them). At least one layer must have it: llama.cpp always builds the indexer cache's Hadamard rotation,
 * whose size it derives from that cache's head width, 0 without an indexed layer (a division by zero at startup).
 * The indexer's head is 64 wide (the rotation's smallest size) and differs from the attention head (32 in the tests'
 * models), so that the raw cache takes no rotation of its own.
 */
export const DEEPSEEK4_CSA_RATIO = 4;
export const DEEPSEEK4_INDEXER = { heads: 2, headDim: 64, topK: 4 } as const;
/** The router: sqrt(softplus(logits)), a selection bias, the selected weights normalised then scaled (× 1.5, V4's). */
export const DEEPSEEK4_ROUTING = { gating: 4, probsBias: true, norm: true, scale: 1.5 } as const;

/**
 * DeepSeek-V4's clamp limits, one per layer (`swiglu_clamp_exp`; the real files write 10 in every layer). Unit-variance
 * gate and up products never reach 10, so these are low enough to bite: min(g, L) and |u| > L for several percent of the
 * values at L 1.5–2. Every layer clamped (as in V4), each at its own limit, so that a reader must take each layer's.
 */
export function deepseek4SwigluLimits(layers: number): number[] {
  return Array.from({ length: layers }, (_, il) => 1.5 + 0.25 * (il % 3));
}

/** The widths derived from a config. */
export interface Deepseek4Shape {
  headDim: number;
  /** Rotated dimensions per head (rope.dimension_count): the last half of each head. */
  nRot: number;
  qLoraRank: number;
  /** Output groups (attention.output_group_count) and each group's rank (attention.output_lora_rank). */
  oGroups: number;
  oLoraRank: number;
  /** Per layer (attention.compress_ratios): 4 in the odd layers (compressed and indexed attention), 0 in the others. */
  compressRatios: number[];
}

export function deepseek4Shape(c: ModelConfig): Deepseek4Shape {
  const headDim = c.nEmbd / c.nHead;
  return {
    headDim,
    nRot: headDim / 2,
    qLoraRank: c.nEmbd / 2,
    oGroups: c.nHead % 2 === 0 ? 2 : 1,
    oLoraRank: c.nEmbd / 2,
    compressRatios: Array.from({ length: c.layers }, (_, il) => (il % 2 === 1 ? DEEPSEEK4_CSA_RATIO : 0)),
  };
}

/** Problems with a config that only deepseek4 has (model-arch.ts's validateConfig checks the rest). */
export function validateDeepseek4(c: ModelConfig): string[] {
  const problems: string[] = [];
  const headDim = c.nEmbd / c.nHead;
  if (Number.isInteger(headDim) && headDim % 4 !== 0) {
    problems.push(`deepseek4: head size ${headDim} must be a multiple of 4 (half of it rotated, in pairs)`);
  }
  if (c.nHeadKv !== c.nHead && c.nHeadKv !== 1) {
    problems.push(`deepseek4 has one key/value head shared by all: --n-head-kv is not used (leave it out)`);
  }
  if (c.sharedFf % c.ff !== 0) {
    problems.push(`deepseek4: --shared-ff (${c.sharedFf}) must be a multiple of --ff (${c.ff}): shared experts are counted in units of ff`);
  }
  if (!Number.isInteger(c.hashLayers) || c.hashLayers < 0 || c.hashLayers > c.layers) {
    problems.push(`deepseek4: hash layers (${c.hashLayers}) must be an integer in [0, ${c.layers}]`);
  }
  if (c.swigluLimits.length !== c.layers) {
    problems.push(`deepseek4: ${c.swigluLimits.length} clamp limits for ${c.layers} layers (swiglu_clamp_exp is required)`);
  }
  return problems;
}

/**
 * The whole model, metadata and tensors in file order; `fileType` is llama.cpp's LLAMA_FTYPE for `c.type`, `rowType`
 * model-arch.ts's fallback for rows that are not whole blocks of the type (as llama.cpp's quantizer falls back).
 */
export function planDeepseek4Model(
  c: ModelConfig,
  vocabSize: number,
  fileType: number,
  rowType: (type: GGMLType, rowLength: number) => GGMLType,
): ModelPlan {
  const a = 'deepseek4';
  const s = deepseek4Shape(c);
  const hcMix = (2 + DEEPSEEK4_HC) * DEEPSEEK4_HC;
  const metadata: MetaEntry[] = [
    { key: 'general.architecture', kind: 'str', value: a },
    { key: 'general.name', kind: 'str', value: `expertswarm-tiny-${a}` },
    { key: 'general.file_type', kind: 'u32', value: fileType },
    { key: `${a}.context_length`, kind: 'u32', value: c.contextLength },
    { key: `${a}.embedding_length`, kind: 'u32', value: c.nEmbd },
    { key: `${a}.block_count`, kind: 'u32', value: c.layers },
    { key: `${a}.feed_forward_length`, kind: 'u32', value: c.ff },
    { key: `${a}.attention.head_count`, kind: 'u32', value: c.nHead },
    { key: `${a}.attention.head_count_kv`, kind: 'u32', value: 1 },
    { key: `${a}.attention.key_length`, kind: 'u32', value: s.headDim },
    { key: `${a}.attention.value_length`, kind: 'u32', value: s.headDim },
    { key: `${a}.attention.layer_norm_rms_epsilon`, kind: 'f32', value: 1e-6 },
    { key: `${a}.attention.q_lora_rank`, kind: 'u32', value: s.qLoraRank },
    { key: `${a}.attention.sliding_window`, kind: 'u32', value: DEEPSEEK4_SLIDING_WINDOW },
    { key: `${a}.attention.output_group_count`, kind: 'u32', value: s.oGroups },
    { key: `${a}.attention.output_lora_rank`, kind: 'u32', value: s.oLoraRank },
    { key: `${a}.attention.compress_ratios`, kind: 'i32[]', value: s.compressRatios },
    { key: `${a}.attention.compress_rope_freq_base`, kind: 'f32', value: 160000 },
    { key: `${a}.attention.indexer.head_count`, kind: 'u32', value: DEEPSEEK4_INDEXER.heads },
    { key: `${a}.attention.indexer.key_length`, kind: 'u32', value: DEEPSEEK4_INDEXER.headDim },
    { key: `${a}.attention.indexer.top_k`, kind: 'u32', value: DEEPSEEK4_INDEXER.topK },
    { key: `${a}.rope.freq_base`, kind: 'f32', value: 10000 },
    { key: `${a}.rope.dimension_count`, kind: 'u32', value: s.nRot },
    { key: `${a}.expert_count`, kind: 'u32', value: c.nExpert },
    { key: `${a}.expert_used_count`, kind: 'u32', value: c.nExpertUsed },
    { key: `${a}.expert_feed_forward_length`, kind: 'u32', value: c.ff },
    { key: `${a}.expert_shared_count`, kind: 'u32', value: c.sharedFf / c.ff },
    { key: `${a}.expert_gating_func`, kind: 'u32', value: DEEPSEEK4_ROUTING.gating },
    { key: `${a}.expert_weights_norm`, kind: 'bool', value: DEEPSEEK4_ROUTING.norm },
    { key: `${a}.expert_weights_scale`, kind: 'f32', value: DEEPSEEK4_ROUTING.scale },
    { key: `${a}.swiglu_clamp_exp`, kind: 'f32[]', value: [...c.swigluLimits] },
    { key: `${a}.hyper_connection.count`, kind: 'u32', value: DEEPSEEK4_HC },
    { key: `${a}.hyper_connection.sinkhorn_iterations`, kind: 'u32', value: 3 },
    { key: `${a}.hyper_connection.epsilon`, kind: 'f32', value: 1e-6 },
    { key: `${a}.hash_layer_count`, kind: 'u32', value: c.hashLayers },
    { key: `${a}.vocab_size`, kind: 'u32', value: vocabSize },
  ];

  const tensors: TensorPlan[] = [];
  // Vectors, the router, the hyper-connection mixers and the sinks stay F32 (as the converter and llama.cpp's
  // quantizer keep them); a matrix whose rows do not fill whole blocks of the type falls back as the quantizer does.
  const small = new Set<TensorRole>(['norm', 'router', 'router_bias', 'hc', 'attn_sinks', 'attn_bias']);
  const add = (name: string, dims: number[], role: TensorRole): void => {
    const type = role === 'expert_ids' ? GGMLType.I32 : small.has(role) ? GGMLType.F32 : rowType(c.type, dims[0] as number);
    tensors.push({ name, dims, role, type });
  };
  const hcDim = DEEPSEEK4_HC * c.nEmbd;
  add('token_embd.weight', [c.nEmbd, vocabSize], 'embed');
  add('output_norm.weight', [c.nEmbd], 'norm');
  add('output.weight', [c.nEmbd, vocabSize], 'output');
  add('output_hc_fn.weight', [hcDim, DEEPSEEK4_HC], 'hc');
  add('output_hc_base.weight', [DEEPSEEK4_HC], 'norm');
  add('output_hc_scale.weight', [1], 'norm');

  const moeLayers: number[] = [];
  for (let i = 0; i < c.layers; i++) {
    const p = `blk.${i}`;
    add(`${p}.attn_norm.weight`, [c.nEmbd], 'norm');
    add(`${p}.attn_sinks.weight`, [c.nHead], 'attn_sinks');
    add(`${p}.attn_q_a.weight`, [c.nEmbd, s.qLoraRank], 'attn');
    add(`${p}.attn_q_a_norm.weight`, [s.qLoraRank], 'norm');
    add(`${p}.attn_q_b.weight`, [s.qLoraRank, c.nHead * s.headDim], 'attn');
    add(`${p}.attn_kv.weight`, [c.nEmbd, s.headDim], 'attn');
    add(`${p}.attn_kv_a_norm.weight`, [s.headDim], 'norm');
    // Two-dimensional in the file (the loader reshapes it to [heads·head / groups, rank, groups]).
    add(`${p}.attn_output_a.weight`, [(c.nHead * s.headDim) / s.oGroups, s.oLoraRank * s.oGroups], 'attn');
    add(`${p}.attn_output_b.weight`, [s.oGroups * s.oLoraRank, c.nEmbd], 'attn');
    if (s.compressRatios[i] === DEEPSEEK4_CSA_RATIO) {
      // Overlapping windows: two compressed entries' worth of key and gate per position; the absolute position
      // embedding `ape` is a bias on the gate scores (F32).
      const kvw = 2 * s.headDim;
      add(`${p}.attn_compressor_kv.weight`, [c.nEmbd, kvw], 'attn');
      add(`${p}.attn_compressor_gate.weight`, [c.nEmbd, kvw], 'attn');
      add(`${p}.attn_compressor_ape.weight`, [kvw, DEEPSEEK4_CSA_RATIO], 'attn_bias');
      add(`${p}.attn_compressor_norm.weight`, [s.headDim], 'norm');
      const ix = DEEPSEEK4_INDEXER;
      add(`${p}.indexer.proj.weight`, [c.nEmbd, ix.heads], 'attn');
      add(`${p}.indexer.attn_q_b.weight`, [s.qLoraRank, ix.heads * ix.headDim], 'attn');
      add(`${p}.indexer_compressor_kv.weight`, [c.nEmbd, 2 * ix.headDim], 'attn');
      add(`${p}.indexer_compressor_gate.weight`, [c.nEmbd, 2 * ix.headDim], 'attn');
      add(`${p}.indexer_compressor_ape.weight`, [2 * ix.headDim, DEEPSEEK4_CSA_RATIO], 'attn_bias');
      add(`${p}.indexer_compressor_norm.weight`, [ix.headDim], 'norm');
    }
    for (const at of ['attn', 'ffn']) {
      add(`${p}.hc_${at}_fn.weight`, [hcDim, hcMix], 'hc');
      add(`${p}.hc_${at}_base.weight`, [hcMix], 'norm');
      add(`${p}.hc_${at}_scale.weight`, [3], 'norm');
    }
    moeLayers.push(i);
    add(`${p}.ffn_gate_inp.weight`, [c.nEmbd, c.nExpert], 'router');
    // A hash layer takes its experts from the table by token id (no selection bias); the others route by top-k.
    if (i < c.hashLayers) add(`${p}.ffn_gate_tid2eid.weight`, [c.nExpertUsed, vocabSize], 'expert_ids');
    else add(`${p}.exp_probs_b.bias`, [c.nExpert], 'router_bias');
    add(`${p}.ffn_norm.weight`, [c.nEmbd], 'norm');
    add(`${p}.ffn_gate_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_up_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_down_exps.weight`, [c.ff, c.nEmbd, c.nExpert], 'expert');
    add(`${p}.ffn_gate_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
    add(`${p}.ffn_up_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
    add(`${p}.ffn_down_shexp.weight`, [c.sharedFf, c.nEmbd], 'shared_ffn');
  }
  return { config: c, metadata, tensors, moeLayers };
}

/**
 * The bytes of a hash layer's `ffn_gate_tid2eid` (I32 [n_expert_used, n_vocab]): for each token id, n_expert_used
 * distinct expert ids, consecutive (mod n_expert) from a start that a multiplicative hash of the token and the layer
 * spreads over the experts, so that different tokens of a prompt go to different experts.
 */
export function expertIdTable(t: TensorPlan, c: ModelConfig): Uint8Array {
  const [nUsed, nVocab] = t.dims as [number, number];
  const layer = Number(/^blk\.(\d+)\./.exec(t.name)?.[1] ?? 0);
  const ids = new Int32Array(nUsed * nVocab);
  for (let tok = 0; tok < nVocab; tok++) {
    const start = (Math.imul(tok + 1, 0x9e3779b1) >>> 0) % c.nExpert;
    const shift = (start + 3 * layer) % c.nExpert;
    for (let j = 0; j < nUsed; j++) ids[tok * nUsed + j] = (shift + j) % c.nExpert;
  }
  return new Uint8Array(ids.buffer);
}
