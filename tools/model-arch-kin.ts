/**
 * The kin families: architectures whose loader (pinned llama.cpp, src/models/<arch>.cpp load_arch_hparams and
 * load_arch_tensors) wants the tensors of a family model-arch.ts already writes, under their own metadata keys, with
 * at most a few tensors of their own. model-arch.ts's planModel writes them; this module says, per family, which
 * shared structure it takes (leading dense layers, shared experts, head-wise q/k norms, latent attention...) and
 * the keys only it has. Every one computes SiLU-gated experts (the common variant): what differs is the loader and the
 * graph around the experts, which stay on the coordinator.
 *
 * Also the names llama.cpp serves and dispatches that the generator does not write yet (UNGENERATED), each with what
 * is missing, so that `npm run make-model -- --arch NAME` refuses them by name.
 */
import type { KinArchName, MetaEntry, ModelConfig, TensorRole } from './model-types.ts';

export interface KinTraits {
  /** Leading dense layers (`leading_dense_block_count`). */
  denseLeading?: boolean;
  /** Shared experts counted in units of the expert width (`expert_shared_count`). */
  sharedCount?: boolean;
  /** One shared expert of its own width (`expert_shared_feed_forward_length`). */
  sharedFf?: boolean;
  /** Experts sized by `feed_forward_length` (no `expert_feed_forward_length` read). */
  expertsByFf?: boolean;
  /** RMS norms over each head's queries and keys (`attn_q_norm`, `attn_k_norm`, head-sized). */
  headQkNorm?: boolean;
  /** deepseek2's latent attention (the deepseek2 loader: mistral4). */
  mla?: boolean;
  /** Routed experts in one fused `ffn_gate_up_exps` (each expert's gate rows, then its up rows). */
  fusedGateUp?: boolean;
  /** The shared expert's gate and up in one `ffn_up_shexp` of 2 × its width (gate rows, then up rows: LLM_FFN_SWIGLU). */
  fusedSharedGateUp?: boolean;
  /** One attention-sink logit per head in every layer (`attn_sinks`). */
  attnSinks?: boolean;
  /** A gate per head on the attention output (`attn_gate`, n_embd → n_head), as step35's. */
  attnGatePerHead?: boolean;
  /** Attention and FFN side by side on the one normed input (parallel residual): no `ffn_norm`. */
  parallelResidual?: boolean;
  /** DeepSeek-V3.2's lightning indexer (DSA) beside the latent attention, in every layer (`indexer.*`). */
  dsaIndexer?: boolean;
  /** LFM2's short-convolution layers in place of attention in the even layers (shortConvLayer). */
  shortConv?: boolean;
  /** Jamba's Mamba (selective state-space) layers in place of attention in the even layers (mambaLayer). */
  mamba?: boolean;
  /** Granite 4.0 H's Mamba2 layers in place of attention in the even layers (mambaLayer). */
  mamba2?: boolean;
  /**
   * dots3note's windowed latent-attention layers (the even ones: windowedMlaLayer) beside full ones that keep the
   * lightning indexer, and an RMS norm over the shared rotated key (`attn_k_norm`, n_rot wide) before RoPE.
   */
  windowedMla?: boolean;
  /** MiniMax-01's lightning (linear) attention layers in place of softmax attention in the even layers (lightningLayer). */
  lightning?: boolean;
  /** Kimi Linear's KDA (gated delta-rule linear attention) layers in place of latent attention in the even layers (kdaLayer). */
  kda?: boolean;
  /** bailingmoe3's KDA layers: Kimi's, with full-rank forget and output gates (f_a, g_a only) and 4-D convolutions. */
  kdaFullRank?: boolean;
}

export const KIN: Record<KinArchName, KinTraits> = {
  // DBRX: fused qkv, the attention output's norm is the MoE's input norm (no ffn_norm), layer norms without biases.
  dbrx: { expertsByFf: true },
  // Phi-3.5-MoE: layer norms with biases, biases on the attention output and the logits.
  phimoe: { expertsByFf: true },
  // Granite MoE: a llama with Granite's multipliers (logit_scale required).
  granitemoe: { expertsByFf: true },
  // Ling-lite / Ling-plus: every layer routed (the loader reads leading_dense_block_count but makes experts in all).
  bailingmoe: { sharedCount: true },
  // Snowflake Arctic: a dense MLP of width n_embd beside the experts in every layer, the experts on their own norm.
  arctic: { expertsByFf: true },
  // Qwen3-VL MoE (text): qwen3moe with multi-section RoPE.
  qwen3vlmoe: { headQkNorm: true },
  // EXAONE MoE: sliding-window layers, a sigmoid router with a selection bias, one shared expert.
  'exaone-moe': { denseLeading: true, sharedFf: true, headQkNorm: true },
  // Arcee AFMoE: norms after attention and FFN too, a sigmoid gate on the attention output, sigmoid router.
  afmoe: { denseLeading: true, sharedCount: true, headQkNorm: true },
  // mistral4: deepseek2's loader and graph; its converter writes the checkpoint's fused gate_up experts.
  mistral4: { denseLeading: true, sharedCount: true, mla: true, fusedGateUp: true },
  // Mellum: qwen3moe's layout (its optional sliding window left out).
  mellum: { headQkNorm: true },
  // Hunyuan V3: a sigmoid router with a selection bias (`blk.N.exp_probs_b`, no `.bias`), one shared expert.
  hy_v3: { sharedFf: true, headQkNorm: true },
  // Granite with experts (expert_count > 0): granitemoe's graph; its optional shared expert written here.
  granite: { expertsByFf: true, sharedFf: true },
  // MiniCPM with experts: Granite's graph under MiniCPM's multipliers.
  minicpm: { expertsByFf: true },
  // Mistral Small 3.x / Ministral with experts (expert_count > 0): a llama.
  mistral3: { expertsByFf: true },
  // DeepSeek-OCR's language model: deepseek2's graph without latent attention (plain multi-head q, k, v; full RoPE).
  'deepseek2-ocr': { denseLeading: true, sharedCount: true },
  // Granite MoE SWA: interleaved sliding-window layers with attention sinks, fused gate/up experts (its converter
  // writes the checkpoint's stacked gate_up) and a shared expert fused the same way.
  granite_swa: { expertsByFf: true, fusedGateUp: true, sharedFf: true, fusedSharedGateUp: true, attnSinks: true },
  // MiMo-V2-Flash: windowed layers with attention sinks, a dense first layer (MoE where the file has ffn_gate_inp), a
  // sigmoid router with a selection bias fixed in its graph. Its MTP layers are left out (optional in the loader).
  mimo2: { denseLeading: true, attnSinks: true },
  // Laguna (poolside): afmoe's MoE (sigmoid router, selection bias required, one always-on shared expert of its own
  // width), head-wise q/k norms, a softplus gate per head on the attention output, windowed layers (XS.2).
  laguna: { denseLeading: true, sharedFf: true, headQkNorm: true, attnGatePerHead: true },
  // Cohere 2 MoE: parallel residual (attention and FFN both read attn_norm's output), windows of period 4 with the first
  // full (full layers past the dense ones without RoPE), a dense leading layer, sigmoid router, shared experts whose
  // sum with the routed ones is halved. Its MTP layer is left out (optional in the loader).
  cohere2moe: { denseLeading: true, sharedCount: true, parallelResidual: true },
  // DeepSeek-V3.2: deepseek2's latent attention (query compression required), its keys picked per query by a lightning
  // indexer (DSA); sigmoid router with selection bias, shared experts, leading dense layers. No MTP layer.
  deepseek32: { denseLeading: true, sharedCount: true, mla: true, dsaIndexer: true },
  // GLM-5 / 5.1 (GlmMoeDsa): deepseek32's layout; with a context under 1M every layer has its indexer (GLM-5.2's
  // pattern, some layers without, is taken from the context length or `attention.indexer.types`).
  'glm-dsa': { denseLeading: true, sharedCount: true, mla: true, dsaIndexer: true },
  // LFM2 MoE: short-convolution layers (no key/value heads) beside attention ones with head-wise q/k norms, a dense
  // leading layer, a sigmoid router with its required selection bias, normalised; the output norm named token_embd_norm.
  lfm2moe: { denseLeading: true, headQkNorm: true, shortConv: true },
  // Jamba: Mamba layers (head_count_kv 0) beside attention ones, experts sized by feed_forward_length, softmax router
  // without normalisation (fixed in its graph); every layer routed here (the file decides: ffn_gate_inp).
  jamba: { expertsByFf: true, mamba: true },
  // Granite 4.0 H: Mamba2 layers beside attention under Granite's multipliers (logit_scale), every layer routed, one
  // shared expert.
  granitehybrid: { expertsByFf: true, sharedFf: true, mamba2: true },
  // dots.llm3 (Dots3Note): deepseek32's latent attention and indexer in the full layers, windowed latent attention in
  // the even ones (no indexer), a sigmoid gate per head on the attention output, the shared rotated key normed; sigmoid
  // router with its required selection bias, shared experts, a dense leading layer. Its MTP layers are left out (the
  // loader marks them not required and skips them: there is no MTP graph).
  dots3note: { denseLeading: true, sharedCount: true, mla: true, dsaIndexer: true, attnGatePerHead: true, windowedMla: true },
  // MiniMax-Text-01 / M1: lightning (linear) attention layers beside softmax ones (the real models: one in 8), every
  // layer routed, experts sized by feed_forward_length, softmax router normalised (fixed in its graph); its residual
  // is the normed input scaled by `residual_scale` (1 here).
  'minimax-01': { expertsByFf: true, lightning: true },
  // Kimi Linear: KDA layers (head_count_kv 0) beside latent-attention ones (no RoPE in them), a dense leading layer,
  // sigmoid router with its required selection bias, normalised (fixed in its graph) and scaled, shared experts.
  'kimi-linear': { denseLeading: true, sharedCount: true, mla: true, kda: true },
  // Ling 3 (BailingMoeV3): KDA layers with full-rank gates beside latent attention with a sigmoid gate per head, a dense
  // leading layer, sigmoid router with its required selection bias, normalised and scaled, shared experts, the experts'
  // SwiGLU clamped after the activation (step35's form and default limits: `swiglu_clamp_exp`); no MTP layer.
  bailingmoe3: { denseLeading: true, sharedCount: true, mla: true, kdaFullRank: true, attnGatePerHead: true },
};

/** minimax-01: layer `il` is a lightning-attention layer (`full_attention_interval` 2: the odd layers attend in full). */
export function lightningLayer(a: string, il: number): boolean {
  return isKinArch(a) && KIN[a].lightning === true && il % 2 === 0;
}

/**
 * A lightning-attention layer's tensors: q, k and v from one projection (SiLU'd, one head each of the model's heads),
 * the RMS norm of the attention's output, its sigmoid gate, and the output projection.
 */
export function lightningTensors(p: string, c: ModelConfig): Array<{ name: string; dims: number[]; role: TensorRole }> {
  return [
    { name: `${p}.attn_norm_2.weight`, dims: [c.nEmbd], role: 'norm' },
    { name: `${p}.attn_qkv.weight`, dims: [c.nEmbd, 3 * c.nEmbd], role: 'attn' },
    { name: `${p}.attn_gate.weight`, dims: [c.nEmbd, c.nEmbd], role: 'attn' },
    { name: `${p}.attn_output.weight`, dims: [c.nEmbd, c.nEmbd], role: 'attn' },
  ];
}

/** kimi-linear: layer `il` is a KDA layer (`head_count_kv` 0 marks it); the odd layers attend through MLA. */
export function kdaLayer(a: string, il: number): boolean {
  return isKinArch(a) && (KIN[a].kda === true || KIN[a].kdaFullRank === true) && il % 2 === 0;
}

/** The window of the KDA layers' short causal convolutions (`ssm.conv_kernel`: the real models' 4). */
export const SSM_KDA_CONV = 4;

/**
 * A KDA layer's tensors (heads of the attention's head size, `kda.head_dim`): q, k and v projections each through its
 * own short causal convolution (3-D, as the converter writes them), the forget gate's low-rank projection (f_a, f_b)
 * with its per-channel bias (`ssm_dt.bias`) and per-head decay (`ssm_a`), β per head, the output gate's low-rank
 * projection (g_a, g_b), the gated output norm and the output projection.
 */
export function kdaTensors(p: string, c: ModelConfig): Array<{ name: string; dims: number[]; role: TensorRole }> {
  const head = c.nEmbd / c.nHead;
  const inner = head * c.nHead;
  if (isKinArch(c.arch) && KIN[c.arch].kdaFullRank) {
    return [
      ...['q', 'k', 'v'].map((x) => ({
        name: `${p}.ssm_conv1d_${x}.weight`,
        dims: [SSM_KDA_CONV, 1, inner, 1],
        role: 'ssm_conv' as const,
      })),
      { name: `${p}.attn_q.weight`, dims: [c.nEmbd, inner], role: 'attn' },
      { name: `${p}.attn_k.weight`, dims: [c.nEmbd, inner], role: 'attn' },
      { name: `${p}.attn_v.weight`, dims: [c.nEmbd, inner], role: 'attn' },
      { name: `${p}.ssm_f_a.weight`, dims: [c.nEmbd, inner], role: 'ssm' },
      { name: `${p}.ssm_beta.weight`, dims: [c.nEmbd, c.nHead], role: 'ssm' },
      { name: `${p}.ssm_a`, dims: [1, c.nHead], role: 'ssm_a' },
      { name: `${p}.ssm_dt.bias`, dims: [inner], role: 'ssm_dt' },
      { name: `${p}.ssm_g_a.weight`, dims: [c.nEmbd, inner], role: 'ssm' },
      { name: `${p}.ssm_norm.weight`, dims: [head], role: 'norm' },
      { name: `${p}.attn_output.weight`, dims: [inner, c.nEmbd], role: 'attn' },
    ];
  }
  return [
    { name: `${p}.ssm_conv1d_q.weight`, dims: [SSM_KDA_CONV, 1, inner], role: 'ssm_conv' },
    { name: `${p}.ssm_conv1d_k.weight`, dims: [SSM_KDA_CONV, 1, inner], role: 'ssm_conv' },
    { name: `${p}.ssm_conv1d_v.weight`, dims: [SSM_KDA_CONV, 1, inner], role: 'ssm_conv' },
    { name: `${p}.attn_q.weight`, dims: [c.nEmbd, inner], role: 'attn' },
    { name: `${p}.attn_k.weight`, dims: [c.nEmbd, inner], role: 'attn' },
    { name: `${p}.attn_v.weight`, dims: [c.nEmbd, inner], role: 'attn' },
    { name: `${p}.ssm_f_a.weight`, dims: [c.nEmbd, head], role: 'ssm' },
    { name: `${p}.ssm_f_b.weight`, dims: [head, inner], role: 'ssm' },
    { name: `${p}.ssm_beta.weight`, dims: [c.nEmbd, c.nHead], role: 'ssm' },
    { name: `${p}.ssm_a`, dims: [1, c.nHead], role: 'ssm_a' },
    { name: `${p}.ssm_dt.bias`, dims: [inner], role: 'ssm_dt' },
    { name: `${p}.ssm_g_a.weight`, dims: [c.nEmbd, head], role: 'ssm' },
    { name: `${p}.ssm_g_b.weight`, dims: [head, inner], role: 'ssm' },
    { name: `${p}.ssm_norm.weight`, dims: [head], role: 'norm' },
    { name: `${p}.attn_output.weight`, dims: [inner, c.nEmbd], role: 'attn' },
  ];
}

/** dots3note: layer `il` attends through the window, with no indexer (the even layers); the odd ones in full. */
export function windowedMlaLayer(a: string, il: number): boolean {
  return isKinArch(a) && KIN[a].windowedMla === true && il % 2 === 0;
}

/** Granite 4.0 H's Mamba2 heads are MAMBA2_HEAD_DIM wide; one group. */
const MAMBA2_HEAD_DIM = 16;
function mamba2Heads(c: ModelConfig): number {
  return (2 * c.nEmbd) / MAMBA2_HEAD_DIM;
}

/** Jamba's Mamba widths: the inner width (the loader wants 2 × n_embd), convolution window, state size. */
export const MAMBA_CONV_KERNEL = 4;
export const MAMBA_STATE_SIZE = 16;
function mambaDtRank(c: ModelConfig): number {
  return Math.ceil(c.nEmbd / 16);
}

/** jamba: layer `il` is a Mamba layer (no attention); the odd layers attend. */
export function mambaLayer(a: string, il: number): boolean {
  return isKinArch(a) && (KIN[a].mamba === true || KIN[a].mamba2 === true) && il % 2 === 0;
}

/** A Mamba layer's tensors (llama.cpp's names: ssm_a and ssm_d carry no `.weight`). */
export function mambaTensors(p: string, c: ModelConfig): Array<{ name: string; dims: number[]; role: TensorRole }> {
  const inner = 2 * c.nEmbd;
  if (isKinArch(c.arch) && KIN[c.arch].mamba2) {
    // Mamba2: one in_proj to z, x, B, C and dt; per-head decay, skip and time-step bias; a gated RMS norm.
    const heads = mamba2Heads(c);
    const xbc = inner + 2 * MAMBA_STATE_SIZE;
    return [
      { name: `${p}.ssm_in.weight`, dims: [c.nEmbd, 2 * inner + 2 * MAMBA_STATE_SIZE + heads], role: 'ssm' },
      { name: `${p}.ssm_conv1d.weight`, dims: [MAMBA_CONV_KERNEL, xbc], role: 'ssm_conv' },
      { name: `${p}.ssm_conv1d.bias`, dims: [xbc], role: 'attn_bias' },
      { name: `${p}.ssm_dt.bias`, dims: [heads], role: 'ssm_dt' },
      { name: `${p}.ssm_a`, dims: [1, heads], role: 'ssm_a' },
      { name: `${p}.ssm_d`, dims: [1, heads], role: 'norm' },
      { name: `${p}.ssm_norm.weight`, dims: [inner, 1], role: 'norm' },
      { name: `${p}.ssm_out.weight`, dims: [inner, c.nEmbd], role: 'ssm' },
    ];
  }
  const dt = mambaDtRank(c);
  return [
    { name: `${p}.ssm_in.weight`, dims: [c.nEmbd, 2 * inner], role: 'ssm' },
    { name: `${p}.ssm_conv1d.weight`, dims: [MAMBA_CONV_KERNEL, inner], role: 'ssm_conv' },
    { name: `${p}.ssm_conv1d.bias`, dims: [inner], role: 'attn_bias' },
    { name: `${p}.ssm_x.weight`, dims: [inner, dt + 2 * MAMBA_STATE_SIZE], role: 'ssm' },
    { name: `${p}.ssm_dt_norm.weight`, dims: [dt], role: 'norm' },
    { name: `${p}.ssm_dt.weight`, dims: [dt, inner], role: 'ssm' },
    { name: `${p}.ssm_dt.bias`, dims: [inner], role: 'ssm_dt' },
    { name: `${p}.ssm_b_norm.weight`, dims: [MAMBA_STATE_SIZE], role: 'norm' },
    { name: `${p}.ssm_c_norm.weight`, dims: [MAMBA_STATE_SIZE], role: 'norm' },
    { name: `${p}.ssm_a`, dims: [MAMBA_STATE_SIZE, inner], role: 'ssm_a' },
    { name: `${p}.ssm_d`, dims: [inner], role: 'norm' },
    { name: `${p}.ssm_out.weight`, dims: [inner, c.nEmbd], role: 'ssm' },
  ];
}

/** LFM2's convolution window (`shortconv.l_cache`: the real models' 3). */
export const SHORTCONV_L_CACHE = 3;

/** lfm2moe: layer `il` is a short-convolution layer (no attention); the odd layers attend. */
export function shortConvLayer(a: string, il: number): boolean {
  return isKinArch(a) && KIN[a].shortConv === true && il % 2 === 0;
}

/** The short-convolution layer's tensors: in_proj to gate, value and output gate, the depthwise window, out_proj. */
export function shortConvTensors(p: string, c: ModelConfig): Array<{ name: string; dims: number[]; role: TensorRole }> {
  return [
    { name: `${p}.shortconv.conv.weight`, dims: [SHORTCONV_L_CACHE, c.nEmbd], role: 'ssm_conv' },
    { name: `${p}.shortconv.in_proj.weight`, dims: [c.nEmbd, 3 * c.nEmbd], role: 'ssm' },
    { name: `${p}.shortconv.out_proj.weight`, dims: [c.nEmbd, c.nEmbd], role: 'ssm' },
  ];
}

/**
 * The lightning indexer's heads and how many keys it keeps per query (`attention.indexer.top_k`): fewer than the
 * tests' prompt, so that the sparse attention leaves keys out (the real models: 64 heads of 128, top 2048).
 */
export const DSA_INDEXER_HEADS = 2;
const KIN_DSA: readonly string[] = ['deepseek32', 'glm-dsa', 'dots3note'];
export const DSA_INDEXER_TOP_K = 4;
/**
 * The indexer's key width: llama.cpp's indexer cache rotates keys and queries by a Hadamard matrix of at least 64
 * (llama_kv_cache::build_input_k_rot), so the width is 64 whatever the model's; it rotates n_rot (≤ 64) of it.
 */
export const DSA_INDEXER_KEY_LENGTH = 64;

/** The indexer's tensors of layer `p` (`blk.N`): q from the compressed query, one key head, per-head weights. */
export function dsaIndexerTensors(p: string, c: ModelConfig): Array<{ name: string; dims: number[]; role: TensorRole }> {
  const size = DSA_INDEXER_KEY_LENGTH;
  return [
    { name: `${p}.indexer.k_norm.weight`, dims: [size], role: 'norm' },
    { name: `${p}.indexer.k_norm.bias`, dims: [size], role: 'attn_bias' },
    { name: `${p}.indexer.proj.weight`, dims: [c.nEmbd, DSA_INDEXER_HEADS], role: 'attn' },
    { name: `${p}.indexer.attn_k.weight`, dims: [c.nEmbd, size], role: 'attn' },
    { name: `${p}.indexer.attn_q_b.weight`, dims: [c.qLoraRank, DSA_INDEXER_HEADS * size], role: 'attn' },
  ];
}

export function isKinArch(arch: string): arch is KinArchName {
  return Object.hasOwn(KIN, arch);
}

/** The kin families that have `trait`. */
export function kinWith(trait: keyof KinTraits): KinArchName[] {
  return (Object.keys(KIN) as KinArchName[]).filter((a) => KIN[a][trait] === true);
}

/**
 * EXAONE MoE's, AFMoE's and Granite MoE SWA's sliding window (`attention.sliding_window`): shorter than the tests' prompt and generation
 * together, with a pattern of 2 (even layers windowed, odd ones full: llama.cpp's `set_swa_pattern`).
 */
export const KIN_SLIDING_WINDOW = 8;

/**
 * Qwen3-VL's four RoPE sections for a head of `headDim` (they cover the rotated pairs, headDim / 2): text positions
 * put the same position in each section, so the split changes nothing for text but the loader requires it.
 */
export function qwen3vlSections(headDim: number): number[] {
  const t = Math.floor((headDim * 5) / 32);
  return [headDim / 2 - 2 * t, t, t, 0];
}

/** The metadata keys only a kin family has (`a` is its name, the prefix of its keys). */
export function kinMetadata(a: KinArchName, c: ModelConfig): MetaEntry[] {
  const headDim = c.nEmbd / c.nHead;
  switch (a) {
    case 'dbrx':
      // LLM_NORM layers read the plain epsilon; clamp_kqv is required (the real model's 8; out of reach here).
      return [
        { key: `${a}.attention.layer_norm_epsilon`, kind: 'f32', value: 1e-5 },
        { key: `${a}.attention.clamp_kqv`, kind: 'f32', value: 8 },
      ];
    case 'granitemoe':
    case 'granite':
      // Required; 1 leaves the logits as the output matrix gives them (the real models divide by 8 or so).
      return [{ key: `${a}.logit_scale`, kind: 'f32', value: 1 }];
    case 'minicpm':
      // Without the keys the loader takes MiniCPM's old defaults (embeddings × 12, each branch × 1.4/√layers, logits
      // × n_embd/256): × 12 would drown the layers' outputs in the residual of these unit-variance embeddings, and a
      // branch scaled down quietens the experts. 1 each leaves the model as drawn; the graph still applies them.
      return [
        { key: `${a}.embedding_scale`, kind: 'f32', value: 1 },
        { key: `${a}.residual_scale`, kind: 'f32', value: 1 },
        { key: `${a}.logit_scale`, kind: 'f32', value: 1 },
      ];
    case 'mimo2':
      // Both required; the pattern one flag per layer, even layers windowed.
      return [
        { key: `${a}.attention.sliding_window`, kind: 'u32', value: KIN_SLIDING_WINDOW },
        {
          key: `${a}.attention.sliding_window_pattern`,
          kind: 'bool[]',
          value: Array.from({ length: c.layers }, (_, il) => il % 2 === 0),
        },
      ];
    case 'cohere2moe':
      // Window, window period and logit_scale all required (1: the logits as the output matrix gives them).
      return [
        { key: `${a}.logit_scale`, kind: 'f32', value: 1 },
        { key: `${a}.attention.sliding_window`, kind: 'u32', value: KIN_SLIDING_WINDOW },
        { key: `${a}.attention.sliding_window_pattern`, kind: 'u32', value: 4 },
      ];
    case 'deepseek32':
    case 'glm-dsa':
      return [
        { key: `${a}.attention.indexer.head_count`, kind: 'u32', value: DSA_INDEXER_HEADS },
        { key: `${a}.attention.indexer.key_length`, kind: 'u32', value: DSA_INDEXER_KEY_LENGTH },
        { key: `${a}.attention.indexer.top_k`, kind: 'u32', value: DSA_INDEXER_TOP_K },
      ];
    case 'dots3note':
      // Every key required. The windowed layers' latent ranks and head widths are the full layers' (their own keys);
      // the window pattern and the indexer's layers one flag per layer (1: windowed / 1: indexed).
      return [
        { key: `${a}.attention.indexer.head_count`, kind: 'u32', value: DSA_INDEXER_HEADS },
        { key: `${a}.attention.indexer.key_length`, kind: 'u32', value: DSA_INDEXER_KEY_LENGTH },
        { key: `${a}.attention.indexer.top_k`, kind: 'u32', value: DSA_INDEXER_TOP_K },
        { key: `${a}.attention.kv_lora_rank_swa`, kind: 'u32', value: c.kvLoraRank },
        { key: `${a}.attention.key_length_mla_swa`, kind: 'u32', value: headDim },
        { key: `${a}.attention.value_length_mla_swa`, kind: 'u32', value: headDim },
        { key: `${a}.attention.sliding_window`, kind: 'u32', value: KIN_SLIDING_WINDOW },
        { key: `${a}.rope.freq_base_swa`, kind: 'f32', value: 10000 },
        {
          key: `${a}.attention.sliding_window_pattern`,
          kind: 'bool[]',
          value: Array.from({ length: c.layers }, (_, il) => windowedMlaLayer(a, il)),
        },
        {
          key: `${a}.attention.indexer.types`,
          kind: 'i32[]',
          value: Array.from({ length: c.layers }, (_, il) => (windowedMlaLayer(a, il) ? 0 : 1)),
        },
      ];
    case 'kimi-linear':
    case 'bailingmoe3':
      // One key/value head count per layer, 0 for the KDA layers (how the loader tells them apart); bailingmoe3's
      // forget gate's lower bound is required and negative (Ling 3's -5).
      return [
        ...(a === 'bailingmoe3' ? [{ key: `${a}.kda.gate_lower_bound`, kind: 'f32' as const, value: -5 }] : []),
        { key: `${a}.ssm.conv_kernel`, kind: 'u32', value: SSM_KDA_CONV },
        { key: `${a}.kda.head_dim`, kind: 'u32', value: headDim },
        {
          key: `${a}.attention.head_count_kv`,
          kind: 'i32[]',
          value: Array.from({ length: c.layers }, (_, il) => (kdaLayer(a, il) ? 0 : 1)),
        },
      ];
    case 'minimax-01':
      // residual_scale required (1: the normed input as it is); the even layers lightning ones.
      return [
        { key: `${a}.residual_scale`, kind: 'f32', value: 1 },
        { key: `${a}.full_attention_interval`, kind: 'u32', value: 2 },
      ];
    case 'lfm2moe':
      // One key/value head count per layer, 0 for the convolution layers (how the loader tells them apart).
      return [
        { key: `${a}.shortconv.l_cache`, kind: 'u32', value: SHORTCONV_L_CACHE },
        {
          key: `${a}.attention.head_count_kv`,
          kind: 'i32[]',
          value: Array.from({ length: c.layers }, (_, il) => (shortConvLayer(a, il) ? 0 : c.nHeadKv)),
        },
      ];
    case 'granitehybrid':
      return [
        { key: `${a}.logit_scale`, kind: 'f32', value: 1 },
        { key: `${a}.ssm.conv_kernel`, kind: 'u32', value: MAMBA_CONV_KERNEL },
        { key: `${a}.ssm.inner_size`, kind: 'u32', value: 2 * c.nEmbd },
        { key: `${a}.ssm.state_size`, kind: 'u32', value: MAMBA_STATE_SIZE },
        { key: `${a}.ssm.time_step_rank`, kind: 'u32', value: mamba2Heads(c) },
        { key: `${a}.ssm.group_count`, kind: 'u32', value: 1 },
        {
          key: `${a}.attention.head_count_kv`,
          kind: 'i32[]',
          value: Array.from({ length: c.layers }, (_, il) => (mambaLayer(a, il) ? 0 : c.nHeadKv)),
        },
      ];
    case 'jamba':
      return [
        { key: `${a}.ssm.conv_kernel`, kind: 'u32', value: MAMBA_CONV_KERNEL },
        { key: `${a}.ssm.inner_size`, kind: 'u32', value: 2 * c.nEmbd },
        { key: `${a}.ssm.state_size`, kind: 'u32', value: MAMBA_STATE_SIZE },
        { key: `${a}.ssm.time_step_rank`, kind: 'u32', value: mambaDtRank(c) },
        {
          key: `${a}.attention.head_count_kv`,
          kind: 'i32[]',
          value: Array.from({ length: c.layers }, (_, il) => (mambaLayer(a, il) ? 0 : c.nHeadKv)),
        },
      ];
    case 'laguna':
      // XS.2's period of 4, the first of each full (llama.cpp's set_swa_pattern with dense_first): layers 1-3 windowed.
      return [
        { key: `${a}.attention.sliding_window`, kind: 'u32', value: KIN_SLIDING_WINDOW },
        { key: `${a}.attention.sliding_window_pattern`, kind: 'u32', value: 4 },
      ];
    case 'granite_swa':
      // logit_scale is required; the window pattern is one flag per layer (even layers windowed, as exaone-moe's).
      return [
        { key: `${a}.logit_scale`, kind: 'f32', value: 1 },
        { key: `${a}.attention.sliding_window`, kind: 'u32', value: KIN_SLIDING_WINDOW },
        {
          key: `${a}.attention.sliding_window_pattern`,
          kind: 'bool[]',
          value: Array.from({ length: c.layers }, (_, il) => il % 2 === 0),
        },
      ];
    case 'qwen3vlmoe':
      return [{ key: `${a}.rope.dimension_sections`, kind: 'i32[]', value: qwen3vlSections(headDim) }];
    case 'exaone-moe':
    case 'afmoe':
      return [
        { key: `${a}.attention.sliding_window`, kind: 'u32', value: KIN_SLIDING_WINDOW },
        { key: `${a}.attention.sliding_window_pattern`, kind: 'u32', value: 2 },
      ];
    default:
      return [];
  }
}

/** Problems with a config that only a kin family has. */
export function validateKin(c: ModelConfig): string[] {
  const problems: string[] = [];
  const headDim = c.nEmbd / c.nHead;
  if (c.arch === 'qwen3vlmoe' && Number.isInteger(headDim) && headDim < 16) {
    problems.push(`qwen3vlmoe: head size ${headDim} is too small for its four RoPE sections (at least 16)`);
  }
  if (
    [
      'exaone-moe',
      'afmoe',
      'granite_swa',
      'mimo2',
      'laguna',
      'cohere2moe',
      'lfm2moe',
      'jamba',
      'dots3note',
      'minimax-01',
      'kimi-linear',
      'bailingmoe3',
    ].includes(c.arch) &&
    c.layers < 2
  ) {
    problems.push(`${c.arch} needs at least 2 layers (a windowed one beside a full one), got ${c.layers}`);
  }
  // DeepSeek-OCR's q, k and v are all n_embd × n_embd: one key/value head per query head.
  // The indexer rotates n_rot (half a head) of its 64-wide keys.
  if (KIN_DSA.includes(c.arch) && c.nEmbd / c.nHead / 2 > DSA_INDEXER_KEY_LENGTH) {
    problems.push(`${c.arch}: head size ${c.nEmbd / c.nHead} rotates more than the indexer's ${DSA_INDEXER_KEY_LENGTH}-wide keys hold`);
  }
  if (c.arch === 'kimi-linear' && c.qLoraRank !== 0) {
    problems.push(`kimi-linear has no query compression (its loader reads no q_lora_rank): --q-lora-rank must be 0`);
  }
  if (c.arch === 'deepseek2-ocr' && c.nHeadKv !== c.nHead) {
    problems.push(`deepseek2-ocr has no grouped-query attention: --n-head-kv (${c.nHeadKv}) must equal --n-head (${c.nHead})`);
  }
  return problems;
}

/**
 * The MoE architectures llama.cpp serves (docs/families.md) whose files the generator does not write, each with the
 * piece it lacks: `make-model` names it when asked for one.
 */
/**
 * Why the diffusion LMs stay refused: not a missing piece of the generator but of llama-server, which would never run
 * them (read from the pinned source: src/llama-model.cpp create_memory, tools/server/server-context.cpp).
 */
const DIFFUSION_LM =
  'a server that completes with it: a diffusion LM (non-causal attention) gets no KV cache from llama.cpp ' +
  "(llama_model::create_memory) and llama-server refuses completions on a context without one ('the current context " +
  "does not logits computation'); only llama-diffusion-cli's denoising loop decodes it, with no expert dispatch";
export const UNGENERATED: Readonly<Record<string, string>> = {
  'llada-moe': DIFFUSION_LM,
  rnd1: DIFFUSION_LM,
};
