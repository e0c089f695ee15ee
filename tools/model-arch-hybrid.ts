/**
 * The hybrid Qwen MoE families: `qwen3next` (Qwen3-Next) and `qwen35moe` (Qwen3.5-MoE). Most of their layers are
 * gated delta nets (linear attention with a recurrent state, "ssm" tensors in llama.cpp), every
 * FULL_ATTENTION_INTERVAL-th layer is full attention (gated queries, q/k norms); every layer's FFN is routed experts
 * (SiLU-gated, separate gate/up/down: the variant expert dispatch covers) plus one shared expert scaled by a sigmoid
 * gate. The keys and shapes are the pinned llama.cpp loader's (src/models/qwen3next.cpp and qwen35moe.cpp:
 * load_arch_hparams, load_arch_tensors); model-arch.ts's planModel hands these architectures to planHybridModel.
 *
 * The two differ in a few tensors: qwen3next projects β and α of the delta rule with one fused `ssm_ba` matrix,
 * qwen35moe with `ssm_beta` and `ssm_alpha`; qwen35moe's attention uses interleaved multi-axis RoPE and needs
 * `rope.dimension_sections`. Both accept separate `ffn_gate_exps`/`ffn_up_exps` (the loader tries the fused
 * `ffn_gate_up_exps` first and falls back to them), which is what this module writes.
 *
 * Shapes are in ggml order, as in model-arch.ts: dims[0] is the row length.
 */
import { GGMLType } from '../gguf/quant-types.ts';
import {
  HYBRID_ARCHITECTURES,
  type HybridArchName,
  type MetaEntry,
  type ModelConfig,
  type ModelPlan,
  type TensorPlan,
  type TensorRole,
} from './model-types.ts';

export { HYBRID_ARCHITECTURES, type HybridArchName };

export function isHybridArch(arch: string): arch is HybridArchName {
  return (HYBRID_ARCHITECTURES as readonly string[]).includes(arch);
}

/**
 * Layer i is full attention when (i + 1) % FULL_ATTENTION_INTERVAL == 0, a gated delta net otherwise (llama.cpp's
 * rule; the real models use 4). 2 gives the tests' 3-layer models both kinds and ends them on a recurrent layer:
 * delta net, attention, delta net.
 */
export const FULL_ATTENTION_INTERVAL = 2;
/** Width of the causal convolution over q, k, v ahead of the delta rule (Qwen3-Next's linear_conv_kernel_dim). */
export const SSM_CONV_KERNEL = 4;

/**
 * How make-model.ts draws the vectors of the delta rule's gate, g = softplus(α + dt_bias) · A, the log of the state's
 * decay per token: uniform in [centre − amplitude, centre + amplitude). `ssm_a` holds A = −exp(A_log) (the converter
 * stores it negated and exponentiated) and must stay negative, so that every decay exp(g) is in (0, 1) and the state
 * forgets: here A ∈ [−1, −0.2), a decay of 0.5–0.9 per token at softplus ≈ 0.7, so the state carries several tokens
 * without blowing up. dt_bias is a small offset around 0. (β = sigmoid(·) ∈ (0, 1) and l2-normed keys make each
 * delta-rule update a contraction, so the recurrence is stable whatever the projections draw.)
 */
export const HYBRID_FILL = {
  ssm_a: { centre: -0.6, amplitude: 0.4 },
  ssm_dt: { centre: 0, amplitude: 0.5 },
} as const satisfies Partial<Record<TensorRole, { centre: number; amplitude: number }>>;

/** The widths derived from a config (llama.cpp's names in comments). */
export interface HybridShape {
  /** Attention head size (attention.key_length = value_length). */
  headDim: number;
  /** Rotated dimensions per head (rope.dimension_count): half the head, as the real models rotate a part of it. */
  nRot: number;
  /** qwen35moe's rope.dimension_sections: the nRot / 2 rotated pairs split over time, height, width (and 0). */
  ropeSections: [number, number, number, number];
  /** Size of one delta-net head, keys and values alike (ssm.state_size: head_k_dim = head_v_dim). */
  stateSize: number;
  /** Key heads of the delta net (ssm.group_count). */
  groupCount: number;
  /** Value heads of the delta net (ssm.time_step_rank): one α, β, A and dt_bias each. */
  timeStepRank: number;
  /** Values' width (ssm.inner_size = stateSize × timeStepRank = n_embd here). */
  innerSize: number;
  /** Keys' width, stateSize × groupCount (queries the same). */
  keyDim: number;
  /** Channels of the convolution: q, k and v (2 × keyDim + innerSize). */
  convDim: number;
  /** Per layer: true for a gated delta net, false for full attention. */
  recurrent: boolean[];
}

export function hybridShape(c: ModelConfig): HybridShape {
  const headDim = c.nEmbd / c.nHead;
  const nRot = headDim / 2;
  const pairs = nRot / 2;
  const t = Math.ceil(pairs / 3);
  const h = Math.ceil((pairs - t) / 2);
  const stateSize = headDim;
  const timeStepRank = c.nHead;
  // Fewer key heads than value heads, as in both real families (16 and 32): llama.cpp then repeats each key head.
  const groupCount = c.nHead % 2 === 0 ? c.nHead / 2 : c.nHead;
  const innerSize = stateSize * timeStepRank;
  const keyDim = stateSize * groupCount;
  return {
    headDim,
    nRot,
    ropeSections: [t, h, pairs - t - h, 0],
    stateSize,
    groupCount,
    timeStepRank,
    innerSize,
    keyDim,
    convDim: 2 * keyDim + innerSize,
    recurrent: Array.from({ length: c.layers }, (_, i) => (i + 1) % FULL_ATTENTION_INTERVAL !== 0),
  };
}

/** Problems with a config that only the hybrid families have (model-arch.ts's validateConfig checks the rest). */
export function validateHybrid(c: ModelConfig): string[] {
  const problems: string[] = [];
  if (c.layers < FULL_ATTENTION_INTERVAL) {
    problems.push(
      `${c.arch}: --layers must be at least ${FULL_ATTENTION_INTERVAL} (layer ${FULL_ATTENTION_INTERVAL - 1} is the first attention layer)`,
    );
  }
  const headDim = c.nEmbd / c.nHead;
  if (Number.isInteger(headDim) && headDim % 4 !== 0) {
    problems.push(`${c.arch}: head size ${headDim} must be a multiple of 4 (half of it is rotated, in pairs)`);
  }
  return problems;
}

/** The whole model, metadata and tensors in file order; `fileType` is llama.cpp's LLAMA_FTYPE for `c.type`. */
export function planHybridModel(c: ModelConfig, vocabSize: number, fileType: number): ModelPlan {
  const a = c.arch;
  if (!isHybridArch(a)) throw new RangeError(`${a} is not a hybrid architecture`);
  const s = hybridShape(c);
  const metadata: MetaEntry[] = [
    { key: 'general.architecture', kind: 'str', value: a },
    { key: 'general.name', kind: 'str', value: `expertswarm-tiny-${a}` },
    { key: 'general.file_type', kind: 'u32', value: fileType },
    { key: `${a}.context_length`, kind: 'u32', value: c.contextLength },
    { key: `${a}.embedding_length`, kind: 'u32', value: c.nEmbd },
    { key: `${a}.block_count`, kind: 'u32', value: c.layers },
    // Read but unused while the two expert widths below are given (llama.cpp falls back to it).
    { key: `${a}.feed_forward_length`, kind: 'u32', value: c.sharedFf },
    { key: `${a}.attention.head_count`, kind: 'u32', value: c.nHead },
    { key: `${a}.attention.head_count_kv`, kind: 'u32', value: c.nHeadKv },
    { key: `${a}.attention.key_length`, kind: 'u32', value: s.headDim },
    { key: `${a}.attention.value_length`, kind: 'u32', value: s.headDim },
    { key: `${a}.attention.layer_norm_rms_epsilon`, kind: 'f32', value: 1e-6 },
    { key: `${a}.rope.freq_base`, kind: 'f32', value: 10000 },
    { key: `${a}.rope.dimension_count`, kind: 'u32', value: s.nRot },
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
  ];
  if (a === 'qwen35moe') metadata.push({ key: `${a}.rope.dimension_sections`, kind: 'i32[]', value: [...s.ropeSections] });

  const tensors: TensorPlan[] = [];
  // The vectors, the router, the shared expert's gate and the convolution (rows of SSM_CONV_KERNEL) stay F32, as
  // llama.cpp's quantizer keeps them; every other matrix gets the requested type.
  const small = new Set<TensorRole>(['norm', 'router', 'shared_gate', 'expert_scale', 'ssm_conv', 'ssm_a', 'ssm_dt']);
  const add = (name: string, dims: number[], role: TensorRole): void => {
    tensors.push({ name, dims, role, type: small.has(role) ? GGMLType.F32 : c.type });
  };
  add('token_embd.weight', [c.nEmbd, vocabSize], 'embed');
  add('output_norm.weight', [c.nEmbd], 'norm');
  add('output.weight', [c.nEmbd, vocabSize], 'output');

  const moeLayers: number[] = [];
  for (let i = 0; i < c.layers; i++) {
    const p = `blk.${i}`;
    add(`${p}.attn_norm.weight`, [c.nEmbd], 'norm');
    if (s.recurrent[i]) {
      add(`${p}.attn_qkv.weight`, [c.nEmbd, s.convDim], 'ssm');
      add(`${p}.attn_gate.weight`, [c.nEmbd, s.innerSize], 'ssm');
      add(`${p}.ssm_conv1d.weight`, [SSM_CONV_KERNEL, s.convDim], 'ssm_conv');
      add(`${p}.ssm_dt.bias`, [s.timeStepRank], 'ssm_dt');
      add(`${p}.ssm_a`, [s.timeStepRank], 'ssm_a');
      if (a === 'qwen3next') {
        add(`${p}.ssm_ba.weight`, [c.nEmbd, 2 * s.timeStepRank], 'ssm');
      } else {
        add(`${p}.ssm_beta.weight`, [c.nEmbd, s.timeStepRank], 'ssm');
        add(`${p}.ssm_alpha.weight`, [c.nEmbd, s.timeStepRank], 'ssm');
      }
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
    }
    // The FFN's input norm (there is no ffn_norm in these families).
    add(`${p}.post_attention_norm.weight`, [c.nEmbd], 'norm');
    moeLayers.push(i);
    add(`${p}.ffn_gate_inp.weight`, [c.nEmbd, c.nExpert], 'router');
    add(`${p}.ffn_gate_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_up_exps.weight`, [c.nEmbd, c.ff, c.nExpert], 'expert');
    add(`${p}.ffn_down_exps.weight`, [c.ff, c.nEmbd, c.nExpert], 'expert');
    // Per-expert scales (ModelConfig.expertScales): both graphs pass them to build_moe_ffn.
    if (c.expertScales) {
      for (const m of ['gate', 'up', 'down']) add(`${p}.ffn_${m}_exps.scale`, [c.nExpert], 'expert_scale');
    }
    add(`${p}.ffn_gate_inp_shexp.weight`, [c.nEmbd], 'shared_gate');
    add(`${p}.ffn_gate_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
    add(`${p}.ffn_up_shexp.weight`, [c.nEmbd, c.sharedFf], 'shared_ffn');
    add(`${p}.ffn_down_shexp.weight`, [c.sharedFf, c.nEmbd], 'shared_ffn');
  }
  return { config: c, metadata, tensors, moeLayers };
}
