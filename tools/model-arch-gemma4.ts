/**
 * Gemma 4's MoE models (`gemma4`, Gemma4ForConditionalGeneration's text model: 26B-A4B). Every layer has both a dense
 * GELU-gated FFN and routed experts beside it: the input of each is RMS-normed on its own (`ffn_norm`,
 * `pre_ffw_norm_2`), each output is RMS-normed (`post_ffw_norm_1`, `post_ffw_norm_2`), their sum is normed again
 * (`post_ffw_norm`) and added to the residual. The router is computed outside build_moe_ffn (its logits are handed in):
 * W · (rms_norm(x) · `ffn_gate_inp.scale` / √n_embd), softmax, top-k, the k weights renormalised. The experts are
 * GELU-gated (gelu(g) · u, ggml_geglu_split) with gate and up FUSED in one `ffn_gate_up_exps` [n_embd, 2·ff, n_expert]
 * (per expert its ff gate rows, then its ff up rows: build_moe_ffn's views), as the converter writes them from the
 * checkpoint's stacked `experts.gate_up_proj`, plus `ffn_down_exps` and a per-expert DOWN scale `ffn_down_exps.scale`
 * (F32 [n_expert], the checkpoint's per_expert_scale): no gate or up scales (the pinned loader looks for an up scale
 * only beside a split `ffn_up_exps`).
 *
 * Attention: sliding-window layers and full layers (`attention.sliding_window_pattern`, true = windowed; the last
 * layer and every 6th are full, as the real model's 5:1 pattern ends on a full layer) with their own head sizes
 * (`key_length`/`value_length` for the full layers, `*_swa` for the windowed ones: the real 512 and 256; here twice
 * and once n_embd / n_head) and RoPE (`rope.dimension_count[_swa]`, `rope.freq_base[_swa]`); the full layers rotate
 * with frequency factors `rope_freqs` (one tensor for all of them; ones here: plain RoPE). Queries and keys are
 * RMS-normed per head, values RMS-normed without weights; the attention output is normed (`post_attention_norm`)
 * before the residual add. The logits are soft-capped (`final_logit_softcapping`). No per-layer embeddings
 * (`embedding_length_per_layer_input` 0: the E2B/E4B models' extra inputs, not the MoE one's).
 *
 * The token embeddings are multiplied by √n_embd in the graph; they are drawn √n_embd smaller (role `embed_scaled`) so
 * that the scaled embeddings have unit variance, as the layers' normed outputs do. Every branch added to the residual
 * is RMS-normed, so the routed branch is as loud as the other branches whatever `expertScale` (which sets the experts'
 * down amplitude before that norm): an error in the experts moves the residual stream by a share of its own size.
 * The same norm all but hides one uniform factor on a token's routed sum (rms_norm(1.01·y) = rms_norm(y) but for
 * the epsilon and rounding): the exactness grid's sums × 1.01 move the logits by 1 − cos 1.6e-7 (F32) and 1.9e-6
 * (Q4_K) here, where a dropped expert moves them by more than 1.
 *
 * The keys and shapes are the pinned llama.cpp loader's (src/models/gemma4.cpp: load_arch_hparams, load_arch_tensors,
 * the graph); model-arch.ts's planModel and validateConfig hand this architecture to planGemma4 and validateGemma4.
 *
 * Shapes are in ggml order, as in model-arch.ts: dims[0] is the row length.
 */
import { GGMLType } from '../gguf/quant-types.ts';
import type { MetaEntry, ModelConfig, ModelPlan, TensorPlan, TensorRole } from './model-types.ts';

/** Gemma 4's sliding window (the real models' is 512 or 1024): shorter than the tests' prompt and generation. */
export const GEMMA4_SLIDING_WINDOW = 8;
/** Gemma 4's final logit soft-cap (logits = 30 · tanh(logits / 30)), the real models' value. */
export const GEMMA4_LOGIT_SOFTCAP = 30;

/** Layer `il` of `layers` attends in full (the others through the window): the last layer and every 6th. */
export function gemma4Full(il: number, layers: number): boolean {
  return il === layers - 1 || (il + 1) % 6 === 0;
}

/** The head sizes: windowed layers n_embd / n_head (key_length_swa), full layers twice that (key_length). */
export function gemma4HeadDims(c: ModelConfig): { swa: number; full: number } {
  const swa = c.nEmbd / c.nHead;
  return { swa, full: 2 * swa };
}

/** Problems with a config that only gemma4 has (model-arch.ts's validateConfig checks the rest). */
export function validateGemma4(c: ModelConfig): string[] {
  const problems: string[] = [];
  // llama.cpp's cache for Gemma 4 asserts at least 2 layers (n_layer_kv_from_start ≥ 2); one windowed layer at least.
  if (Number.isInteger(c.layers) && c.layers < 2)
    problems.push(`gemma4: --layers must be at least 2 (windowed layers, then a full one), got ${c.layers}`);
  return problems;
}

/** The whole model, metadata and tensors in file order; `fileType` is llama.cpp's LLAMA_FTYPE for `c.type`. */
export function planGemma4(c: ModelConfig, vocabSize: number, fileType: number): ModelPlan {
  const a = c.arch;
  if (a !== 'gemma4') throw new RangeError(`${a} is not gemma4`);
  const head = gemma4HeadDims(c);
  const metadata: MetaEntry[] = [
    { key: 'general.architecture', kind: 'str', value: a },
    { key: 'general.name', kind: 'str', value: `expertswarm-tiny-${a}` },
    { key: 'general.file_type', kind: 'u32', value: fileType },
    { key: `${a}.context_length`, kind: 'u32', value: c.contextLength },
    { key: `${a}.embedding_length`, kind: 'u32', value: c.nEmbd },
    { key: `${a}.block_count`, kind: 'u32', value: c.layers },
    // The dense FFN beside the experts.
    { key: `${a}.feed_forward_length`, kind: 'u32', value: c.sharedFf },
    { key: `${a}.attention.head_count`, kind: 'u32', value: c.nHead },
    { key: `${a}.attention.head_count_kv`, kind: 'u32', value: c.nHeadKv },
    { key: `${a}.attention.key_length`, kind: 'u32', value: head.full },
    { key: `${a}.attention.value_length`, kind: 'u32', value: head.full },
    { key: `${a}.attention.key_length_swa`, kind: 'u32', value: head.swa },
    { key: `${a}.attention.value_length_swa`, kind: 'u32', value: head.swa },
    { key: `${a}.attention.layer_norm_rms_epsilon`, kind: 'f32', value: 1e-6 },
    { key: `${a}.attention.sliding_window`, kind: 'u32', value: GEMMA4_SLIDING_WINDOW },
    {
      key: `${a}.attention.sliding_window_pattern`,
      kind: 'bool[]',
      value: Array.from({ length: c.layers }, (_, il) => !gemma4Full(il, c.layers)),
    },
    { key: `${a}.rope.freq_base`, kind: 'f32', value: 1e6 },
    { key: `${a}.rope.freq_base_swa`, kind: 'f32', value: 10000 },
    { key: `${a}.rope.dimension_count`, kind: 'u32', value: head.full },
    { key: `${a}.rope.dimension_count_swa`, kind: 'u32', value: head.swa },
    { key: `${a}.embedding_length_per_layer_input`, kind: 'u32', value: 0 },
    { key: `${a}.final_logit_softcapping`, kind: 'f32', value: GEMMA4_LOGIT_SOFTCAP },
    { key: `${a}.expert_count`, kind: 'u32', value: c.nExpert },
    { key: `${a}.expert_used_count`, kind: 'u32', value: c.nExpertUsed },
    { key: `${a}.expert_feed_forward_length`, kind: 'u32', value: c.ff },
    { key: `${a}.vocab_size`, kind: 'u32', value: vocabSize },
  ];

  const tensors: TensorPlan[] = [];
  // Vectors (norms, the router's input scale, the RoPE factors, the down scales) and the router stay F32, as
  // llama.cpp's quantizer keeps them; every other matrix gets the requested type (all their rows are whole blocks:
  // n_embd, 2·n_embd, ff or the dense width long).
  const small = new Set<TensorRole>(['norm', 'router', 'expert_scale']);
  const add = (name: string, dims: number[], role: TensorRole): void => {
    tensors.push({ name, dims, role, type: small.has(role) ? GGMLType.F32 : c.type });
  };
  add('token_embd.weight', [c.nEmbd, vocabSize], 'embed_scaled');
  add('output_norm.weight', [c.nEmbd], 'norm');
  add('output.weight', [c.nEmbd, vocabSize], 'output');
  // The full layers' RoPE frequency factors (one tensor, the loader duplicates it into each full layer).
  add('rope_freqs.weight', [head.full / 2], 'norm');

  const moeLayers: number[] = [];
  for (let i = 0; i < c.layers; i++) {
    const p = `blk.${i}`;
    const hd = gemma4Full(i, c.layers) ? head.full : head.swa;
    add(`${p}.attn_norm.weight`, [c.nEmbd], 'norm');
    add(`${p}.attn_q.weight`, [c.nEmbd, hd * c.nHead], 'attn');
    add(`${p}.attn_k.weight`, [c.nEmbd, hd * c.nHeadKv], 'attn');
    add(`${p}.attn_v.weight`, [c.nEmbd, hd * c.nHeadKv], 'attn');
    add(`${p}.attn_output.weight`, [hd * c.nHead, c.nEmbd], 'attn');
    add(`${p}.attn_q_norm.weight`, [hd], 'norm');
    add(`${p}.attn_k_norm.weight`, [hd], 'norm');
    add(`${p}.post_attention_norm.weight`, [c.nEmbd], 'norm');
    // The dense GELU-gated FFN every layer has, its input and output norms.
    add(`${p}.ffn_norm.weight`, [c.nEmbd], 'norm');
    add(`${p}.ffn_gate.weight`, [c.nEmbd, c.sharedFf], 'dense_ffn');
    add(`${p}.ffn_up.weight`, [c.nEmbd, c.sharedFf], 'dense_ffn');
    add(`${p}.ffn_down.weight`, [c.sharedFf, c.nEmbd], 'dense_ffn');
    add(`${p}.post_ffw_norm_1.weight`, [c.nEmbd], 'norm');
    // The routed experts: the router and its input scale, their own input and output norms.
    moeLayers.push(i);
    add(`${p}.ffn_gate_inp.weight`, [c.nEmbd, c.nExpert], 'router');
    add(`${p}.ffn_gate_inp.scale`, [c.nEmbd], 'norm');
    add(`${p}.pre_ffw_norm_2.weight`, [c.nEmbd], 'norm');
    add(`${p}.ffn_gate_up_exps.weight`, [c.nEmbd, 2 * c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_down_exps.weight`, [c.ff, c.nEmbd, c.nExpert], 'expert');
    add(`${p}.ffn_down_exps.scale`, [c.nExpert], 'expert_scale');
    add(`${p}.post_ffw_norm_2.weight`, [c.nEmbd], 'norm');
    // The norm of the two branches' sum.
    add(`${p}.post_ffw_norm.weight`, [c.nEmbd], 'norm');
  }
  return { config: c, metadata, tensors, moeLayers };
}
