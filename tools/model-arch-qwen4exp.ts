/**
 * `qwen4exp` (Qwen4-Exp, `Qwen4ExpForConditionalGeneration`'s text model): the smallest model the pinned llama.cpp
 * loader (src/models/qwen4exp.cpp: load_arch_hparams, load_arch_tensors) accepts and runs. model-arch.ts's planModel
 * hands this architecture here.
 *
 * What the loader requires and how it is met here:
 *  - qwen35moe's layers (model-arch-hybrid.ts's shapes): gated delta nets (`attn_qkv`, `attn_gate`, the convolution,
 *    `ssm_beta`/`ssm_alpha`, `ssm_a`, `ssm_dt.bias`, the gated norm, `ssm_out`) beside full-attention layers every
 *    FULL_ATTENTION_INTERVAL-th (a query projection twice as wide for its output gate, head-wise q/k norms,
 *    interleaved multi-axis RoPE with `rope.dimension_sections`); every layer routed (softmax router, weights
 *    normalised, fixed in its graph), one shared expert behind a sigmoid gate;
 *  - low-rank hyper-connections instead of layer norms: QWEN4EXP_HC residual streams (`hyper_connection.count`, more
 *    than 1), mixed before the token mixer and before the FFN by `hc_{attn,ffn}_{norm,down,up,inject}` (a grouped RMS
 *    norm, a QWEN4EXP_HC_LOW_RANK-wide sigmoid gate, the scatter weights), and at the head by `output_hc_{norm,down,up}`
 *    (there is no output_norm); F32, as deepseek4's mixers;
 *  - the attention layers' sparse attention (QSA): an indexer (`indexer.{q_proj,k_proj,q_norm,k_norm}`, QWEN4EXP_INDEXER
 *    heads) scoring blocks of `compress_ratios` (4 here) cached keys; each query attends to the top-k blocks plus the
 *    incomplete tail — fewer positions than the tests' prompt and generation, so the sparsity matters;
 *  - no PLE n-gram embeddings (the key group absent: optional), no MTP layers.
 *
 * Shapes are in ggml order, as in model-arch.ts: dims[0] is the row length.
 */
import { GGMLType } from '../gguf/quant-types.ts';
import { FULL_ATTENTION_INTERVAL, SSM_CONV_KERNEL, hybridShape, validateHybrid } from './model-arch-hybrid.ts';
import type { MetaEntry, ModelConfig, ModelPlan, TensorPlan, TensorRole } from './model-types.ts';

/** Hyper-connection streams (Qwen4-Exp's 4 would do; 2 is the fewest the loader takes) and the mixer's gate rank. */
export const QWEN4EXP_HC = 2;
export const QWEN4EXP_HC_LOW_RANK = 16;
/**
 * The indexer: 2 heads of 64 (at least the rotated part of a head), blocks of 4 cached keys, the 2 best-scored blocks
 * (plus the incomplete tail: top_k + ratio − 1 = 5 positions per query), fewer than the tests' contexts hold.
 */
export const QWEN4EXP_INDEXER = { heads: 2, headDim: 64, topK: 2, ratio: 4 } as const;

/** Problems with a config that only qwen4exp has (model-arch.ts's validateConfig checks the rest). */
export function validateQwen4exp(c: ModelConfig): string[] {
  const problems = validateHybrid(c);
  const headDim = c.nEmbd / c.nHead;
  if (Number.isInteger(headDim) && headDim / 2 > QWEN4EXP_INDEXER.headDim) {
    problems.push(`qwen4exp: head size ${headDim} rotates more than the indexer's ${QWEN4EXP_INDEXER.headDim}-wide heads hold`);
  }
  return problems;
}

/** The whole model, metadata and tensors in file order; `fileType` is llama.cpp's LLAMA_FTYPE for `c.type`. */
export function planQwen4exp(
  c: ModelConfig,
  vocabSize: number,
  fileType: number,
  rowType: (type: GGMLType, rowLength: number) => GGMLType,
): ModelPlan {
  const a = 'qwen4exp';
  const s = hybridShape(c);
  const ix = QWEN4EXP_INDEXER;
  const hcDim = QWEN4EXP_HC * c.nEmbd;
  const lr = QWEN4EXP_HC_LOW_RANK;
  const metadata: MetaEntry[] = [
    { key: 'general.architecture', kind: 'str', value: a },
    { key: 'general.name', kind: 'str', value: `expertswarm-tiny-${a}` },
    { key: 'general.file_type', kind: 'u32', value: fileType },
    { key: `${a}.context_length`, kind: 'u32', value: c.contextLength },
    { key: `${a}.embedding_length`, kind: 'u32', value: c.nEmbd },
    { key: `${a}.block_count`, kind: 'u32', value: c.layers },
    { key: `${a}.feed_forward_length`, kind: 'u32', value: c.sharedFf },
    { key: `${a}.attention.head_count`, kind: 'u32', value: c.nHead },
    { key: `${a}.attention.head_count_kv`, kind: 'u32', value: c.nHeadKv },
    { key: `${a}.attention.key_length`, kind: 'u32', value: s.headDim },
    { key: `${a}.attention.value_length`, kind: 'u32', value: s.headDim },
    { key: `${a}.attention.layer_norm_rms_epsilon`, kind: 'f32', value: 1e-6 },
    { key: `${a}.rope.freq_base`, kind: 'f32', value: 10000 },
    { key: `${a}.rope.dimension_count`, kind: 'u32', value: s.nRot },
    { key: `${a}.rope.dimension_sections`, kind: 'i32[]', value: [...s.ropeSections] },
    { key: `${a}.expert_count`, kind: 'u32', value: c.nExpert },
    { key: `${a}.expert_used_count`, kind: 'u32', value: c.nExpertUsed },
    { key: `${a}.expert_feed_forward_length`, kind: 'u32', value: c.ff },
    { key: `${a}.expert_shared_feed_forward_length`, kind: 'u32', value: c.sharedFf },
    { key: `${a}.vocab_size`, kind: 'u32', value: vocabSize },
    { key: `${a}.ssm.conv_kernel`, kind: 'u32', value: SSM_CONV_KERNEL },
    { key: `${a}.ssm.state_size`, kind: 'u32', value: s.stateSize },
    { key: `${a}.ssm.group_count`, kind: 'u32', value: s.groupCount },
    { key: `${a}.ssm.time_step_rank`, kind: 'u32', value: s.timeStepRank },
    { key: `${a}.ssm.inner_size`, kind: 'u32', value: s.innerSize },
    { key: `${a}.full_attention_interval`, kind: 'u32', value: FULL_ATTENTION_INTERVAL },
    { key: `${a}.hyper_connection.count`, kind: 'u32', value: QWEN4EXP_HC },
    { key: `${a}.hyper_connection.low_rank`, kind: 'u32', value: lr },
    { key: `${a}.attention.indexer.head_count`, kind: 'u32', value: ix.heads },
    { key: `${a}.attention.indexer.key_length`, kind: 'u32', value: ix.headDim },
    { key: `${a}.attention.indexer.top_k`, kind: 'u32', value: ix.topK },
    {
      key: `${a}.attention.compress_ratios`,
      kind: 'i32[]',
      value: s.recurrent.map((r) => (r ? 0 : ix.ratio)),
    },
  ];

  const tensors: TensorPlan[] = [];
  // Vectors, the router, the shared expert's gate, the mixers, the convolution, decay and time-step bias stay F32.
  const small = new Set<TensorRole>(['norm', 'router', 'shared_gate', 'hc', 'ssm_conv', 'ssm_a', 'ssm_dt']);
  const add = (name: string, dims: number[], role: TensorRole): void => {
    tensors.push({ name, dims, role, type: small.has(role) ? GGMLType.F32 : rowType(c.type, dims[0] as number) });
  };
  add('token_embd.weight', [c.nEmbd, vocabSize], 'embed');
  add('output_hc_norm.weight', [hcDim], 'norm');
  add('output_hc_down.weight', [hcDim, lr], 'hc');
  add('output_hc_up.weight', [lr, hcDim], 'hc');
  add('output.weight', [c.nEmbd, vocabSize], 'output');

  const moeLayers: number[] = [];
  for (let i = 0; i < c.layers; i++) {
    const p = `blk.${i}`;
    for (const at of ['attn', 'ffn']) {
      add(`${p}.hc_${at}_norm.weight`, [hcDim], 'norm');
      add(`${p}.hc_${at}_down.weight`, [hcDim, lr], 'hc');
      add(`${p}.hc_${at}_up.weight`, [lr, hcDim], 'hc');
      add(`${p}.hc_${at}_inject.weight`, [hcDim, QWEN4EXP_HC], 'hc');
    }
    if (s.recurrent[i]) {
      add(`${p}.attn_qkv.weight`, [c.nEmbd, s.convDim], 'ssm');
      add(`${p}.attn_gate.weight`, [c.nEmbd, s.innerSize], 'ssm');
      add(`${p}.ssm_conv1d.weight`, [SSM_CONV_KERNEL, s.convDim], 'ssm_conv');
      add(`${p}.ssm_dt.bias`, [s.timeStepRank], 'ssm_dt');
      add(`${p}.ssm_a`, [s.timeStepRank], 'ssm_a');
      add(`${p}.ssm_beta.weight`, [c.nEmbd, s.timeStepRank], 'ssm');
      add(`${p}.ssm_alpha.weight`, [c.nEmbd, s.timeStepRank], 'ssm');
      add(`${p}.ssm_norm.weight`, [s.stateSize], 'norm');
      add(`${p}.ssm_out.weight`, [s.innerSize, c.nEmbd], 'ssm');
    } else {
      // The query projection also yields the output gate: 2 × head size per head.
      add(`${p}.attn_q.weight`, [c.nEmbd, 2 * s.headDim * c.nHead], 'attn');
      add(`${p}.attn_k.weight`, [c.nEmbd, s.headDim * c.nHeadKv], 'attn');
      add(`${p}.attn_v.weight`, [c.nEmbd, s.headDim * c.nHeadKv], 'attn');
      add(`${p}.attn_output.weight`, [s.headDim * c.nHead, c.nEmbd], 'attn');
      add(`${p}.attn_q_norm.weight`, [s.headDim], 'norm');
      add(`${p}.attn_k_norm.weight`, [s.headDim], 'norm');
      add(`${p}.indexer.q_proj.weight`, [c.nEmbd, ix.heads * ix.headDim], 'attn');
      add(`${p}.indexer.k_proj.weight`, [c.nEmbd, ix.headDim], 'attn');
      add(`${p}.indexer.q_norm.weight`, [ix.headDim], 'norm');
      add(`${p}.indexer.k_norm.weight`, [ix.headDim], 'norm');
    }
    moeLayers.push(i);
    add(`${p}.ffn_gate_inp.weight`, [c.nEmbd, c.nExpert], 'router');
    add(`${p}.ffn_gate_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_up_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_down_exps.weight`, [c.ff, c.nEmbd, c.nExpert], 'expert');
    add(`${p}.ffn_gate_inp_shexp.weight`, [c.nEmbd], 'shared_gate');
    add(`${p}.ffn_gate_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
    add(`${p}.ffn_up_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
    add(`${p}.ffn_down_shexp.weight`, [c.sharedFf, c.nEmbd], 'shared_ffn');
  }
  return { config: c, metadata, tensors, moeLayers };
}
