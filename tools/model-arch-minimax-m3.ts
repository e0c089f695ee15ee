/**
 * MiniMax-M3 (`minimax-m3`, MiniMaxM3SparseForCausalLM): MiniMax-M2's attention (GQA, an RMS norm over each head's
 * queries and keys, partial NeoX RoPE) with DeepSeek-V3's FFN layout — leading dense layers, then routed experts
 * beside shared experts, a sigmoid router with a selection bias, normalised and scaled weights — where every FFN (the
 * dense one, the shared experts, the routed experts) is SwiGLU-OAI (`LLM_FFN_SWIGLU_OAI_MOE`: min(g, 7) ·
 * σ(1.702 · min(g, 7)) · (clamp(u, −7, 7) + 1)) without biases; and MiniMax Sparse Attention (MSA) in the routed
 * layers: a small indexer (queries per KV head, one key) scores blocks of `block_size` positions, and each query
 * attends to its `top_k` best blocks, the `local_blocks` latest always among them.
 *
 * The keys and shapes are the pinned llama.cpp's (src/models/minimax-m3.cpp: load_arch_hparams, load_arch_tensors,
 * the graph; conversion/minimax.py for what a converted file holds). model-arch.ts's planModel and validateConfig hand
 * this architecture to planMinimaxM3 and validateMinimaxM3.
 *
 * MSA runs only with flash attention on (llama-server's default `-fa auto` turns it on for the CPU backend) and one
 * sequence or per-sequence KV streams; otherwise llama.cpp warns and attends densely. At the tests' sizes the blocks are
 * small (MINIMAX_M3_MSA) so that a prompt and a few generated tokens span more blocks than a query attends to: the
 * sparse selection really drops context.
 *
 * Shapes are in ggml order, as in model-arch.ts: dims[0] is the row length.
 */
import { GGMLType } from '../gguf/quant-types.ts';
import type { MetaEntry, ModelConfig, ModelPlan, TensorPlan, TensorRole } from './model-types.ts';

/**
 * The sparse attention's sizes (`minimax-m3.attention.indexer.*`). The real model's blocks are 128 positions, far
 * longer than the tests' contexts (about 70 positions): with blocks of 4, a query at position 70 sees 2 of its 18
 * blocks, its own (local) and the indexer's best other one. The indexer key length is the attention head's (it must
 * hold the `rope.dimension_count` rotated dimensions).
 */
export const MINIMAX_M3_MSA = { blockSize: 4, topK: 2, localBlocks: 1 } as const;

/** The router (all on the coordinator): sigmoid gates, a selection bias, weights normalised then scaled. */
export const MINIMAX_M3_ROUTING = { gating: 2, probsBias: true, norm: true, scale: 2 } as const;

/** Problems with a config that only minimax-m3 has (model-arch.ts's validateConfig checks the rest). */
export function validateMinimaxM3(c: ModelConfig): string[] {
  const problems: string[] = [];
  // expert_shared_count × expert_feed_forward_length is the shared experts' width.
  if (Number.isInteger(c.sharedFf) && Number.isInteger(c.ff) && c.sharedFf % c.ff !== 0) {
    problems.push(`minimax-m3: --shared-ff (${c.sharedFf}) must be a multiple of --ff (${c.ff}) (shared experts as wide as routed ones)`);
  }
  const headDim = c.nEmbd / c.nHead;
  if (Number.isInteger(headDim) && headDim % 4 !== 0) {
    problems.push(`minimax-m3: head size ${headDim} must be a multiple of 4 (half of it is rotated, in pairs)`);
  }
  return problems;
}

/** The whole model, metadata and tensors in file order; `fileType` is llama.cpp's LLAMA_FTYPE for `c.type`. */
export function planMinimaxM3(c: ModelConfig, vocabSize: number, fileType: number): ModelPlan {
  const a = c.arch;
  if (a !== 'minimax-m3') throw new RangeError(`${a} is not minimax-m3`);
  const headDim = c.nEmbd / c.nHead;
  const kvDim = headDim * c.nHeadKv;
  const r = MINIMAX_M3_ROUTING;
  const metadata: MetaEntry[] = [
    { key: 'general.architecture', kind: 'str', value: a },
    { key: 'general.name', kind: 'str', value: `expertswarm-tiny-${a}` },
    { key: 'general.file_type', kind: 'u32', value: fileType },
    { key: `${a}.context_length`, kind: 'u32', value: c.contextLength },
    { key: `${a}.embedding_length`, kind: 'u32', value: c.nEmbd },
    { key: `${a}.block_count`, kind: 'u32', value: c.layers },
    // The leading dense layers' width; the experts read expert_feed_forward_length.
    { key: `${a}.feed_forward_length`, kind: 'u32', value: c.sharedFf },
    { key: `${a}.attention.head_count`, kind: 'u32', value: c.nHead },
    { key: `${a}.attention.head_count_kv`, kind: 'u32', value: c.nHeadKv },
    { key: `${a}.attention.layer_norm_rms_epsilon`, kind: 'f32', value: 1e-6 },
    { key: `${a}.rope.freq_base`, kind: 'f32', value: 10000 },
    // Partial rotary (MiniMax's rotary_dim): half of each head.
    { key: `${a}.rope.dimension_count`, kind: 'u32', value: headDim / 2 },
    { key: `${a}.expert_count`, kind: 'u32', value: c.nExpert },
    { key: `${a}.expert_used_count`, kind: 'u32', value: c.nExpertUsed },
    { key: `${a}.expert_feed_forward_length`, kind: 'u32', value: c.ff },
    { key: `${a}.expert_shared_count`, kind: 'u32', value: c.sharedFf / c.ff },
    { key: `${a}.leading_dense_block_count`, kind: 'u32', value: c.denseLeading },
    { key: `${a}.expert_gating_func`, kind: 'u32', value: r.gating },
    { key: `${a}.expert_weights_norm`, kind: 'bool', value: r.norm },
    { key: `${a}.expert_weights_scale`, kind: 'f32', value: r.scale },
    // MSA: one indexer head per KV head (the graph asserts it), keys as wide as an attention head.
    { key: `${a}.attention.indexer.head_count`, kind: 'u32', value: c.nHeadKv },
    { key: `${a}.attention.indexer.key_length`, kind: 'u32', value: headDim },
    { key: `${a}.attention.indexer.top_k`, kind: 'u32', value: MINIMAX_M3_MSA.topK },
    { key: `${a}.attention.indexer.block_size`, kind: 'u32', value: MINIMAX_M3_MSA.blockSize },
    { key: `${a}.attention.indexer.local_blocks`, kind: 'u32', value: MINIMAX_M3_MSA.localBlocks },
    { key: `${a}.vocab_size`, kind: 'u32', value: vocabSize },
  ];

  const tensors: TensorPlan[] = [];
  // Vectors and the router stay F32, as llama.cpp's quantizer keeps them; so do the indexer's matrices (the converter
  // forces `.indexer.` tensors to F32). Every other matrix gets the requested type.
  const small = new Set<TensorRole>(['norm', 'router', 'router_bias']);
  const add = (name: string, dims: number[], role: TensorRole, type?: GGMLType): void => {
    tensors.push({ name, dims, role, type: type ?? (small.has(role) ? GGMLType.F32 : c.type) });
  };
  add('token_embd.weight', [c.nEmbd, vocabSize], 'embed');
  add('output_norm.weight', [c.nEmbd], 'norm');
  add('output.weight', [c.nEmbd, vocabSize], 'output');

  const moeLayers: number[] = [];
  for (let i = 0; i < c.layers; i++) {
    const p = `blk.${i}`;
    add(`${p}.attn_norm.weight`, [c.nEmbd], 'norm');
    add(`${p}.attn_q.weight`, [c.nEmbd, headDim * c.nHead], 'attn');
    add(`${p}.attn_k.weight`, [c.nEmbd, kvDim], 'attn');
    add(`${p}.attn_v.weight`, [c.nEmbd, kvDim], 'attn');
    add(`${p}.attn_output.weight`, [headDim * c.nHead, c.nEmbd], 'attn');
    // One head-sized vector for every head (M2 norms the whole projection instead).
    add(`${p}.attn_q_norm.weight`, [headDim], 'norm');
    add(`${p}.attn_k_norm.weight`, [headDim], 'norm');
    add(`${p}.ffn_norm.weight`, [c.nEmbd], 'norm');
    if (i < c.denseLeading) {
      add(`${p}.ffn_gate.weight`, [c.nEmbd, c.sharedFf], 'dense_ffn');
      add(`${p}.ffn_up.weight`, [c.nEmbd, c.sharedFf], 'dense_ffn');
      add(`${p}.ffn_down.weight`, [c.sharedFf, c.nEmbd], 'dense_ffn');
      continue;
    }
    moeLayers.push(i);
    add(`${p}.ffn_gate_inp.weight`, [c.nEmbd, c.nExpert], 'router');
    add(`${p}.exp_probs_b.bias`, [c.nExpert], 'router_bias');
    add(`${p}.ffn_gate_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_down_exps.weight`, [c.ff, c.nEmbd, c.nExpert], 'expert');
    add(`${p}.ffn_up_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_gate_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
    add(`${p}.ffn_down_shexp.weight`, [c.sharedFf, c.nEmbd], 'shared_ffn');
    add(`${p}.ffn_up_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
    // The sparse attention's indexer: queries (one head per KV head) and one key per token, each RMS-normed per head.
    add(`${p}.indexer.q_proj.weight`, [c.nEmbd, c.nHeadKv * headDim], 'attn', GGMLType.F32);
    add(`${p}.indexer.k_proj.weight`, [c.nEmbd, headDim], 'attn', GGMLType.F32);
    add(`${p}.indexer.q_norm.weight`, [headDim], 'norm');
    add(`${p}.indexer.k_norm.weight`, [headDim], 'norm');
  }
  return { config: c, metadata, tensors, moeLayers };
}
