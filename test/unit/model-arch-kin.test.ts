/**
 * planModel for the kin families (tools/model-arch-kin.ts: the tensors of a family the generator already writes,
 * under their own keys): the keys and the tensors of a routed layer that each one's loader (pinned llama.cpp,
 * src/models/<arch>.cpp) requires and that tell it apart from its kin; and make-model's refusal, by name and with the
 * missing piece, of an architecture it does not write. llama.cpp loading and running them, with their experts
 * dispatched: test/integration/expert-dispatch.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { GGMLType } from '../../gguf/quant-types.ts';
import {
  type ArchName,
  type MetaEntry,
  type ModelConfig,
  type ModelPlan,
  defaultConfig,
  planModel,
  validateConfig,
} from '../../tools/model-arch.ts';
import { UNGENERATED, qwen3vlSections } from '../../tools/model-arch-kin.ts';
import { ARCHITECTURES } from '../../tools/model-types.ts';

const VOCAB = 300;

function plan(partial: Partial<ModelConfig> & { arch: ArchName }): ModelPlan {
  return planModel(defaultConfig({ layers: 3, nEmbd: 64, ff: 64, sharedFf: 64, nExpert: 8, nExpertUsed: 2, ...partial }), VOCAB);
}

function meta(p: ModelPlan): Record<string, MetaEntry['value']> {
  return Object.fromEntries(p.metadata.map((m) => [m.key, m.value]));
}

/** The tensor names of layer `l` (without the `blk.l.` prefix), in file order. */
function names(p: ModelPlan, l: number): string[] {
  return p.tensors.filter((t) => t.name.startsWith(`blk.${l}.`)).map((t) => t.name.slice(`blk.${l}.`.length));
}

const EXPERTS = ['ffn_gate_inp.weight', 'ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_down_exps.weight'];

/** Per family: keys that must be there with these values, tensors a routed layer must (and must not) have. */
const CASES: Array<{
  arch: ArchName;
  keys: Record<string, MetaEntry['value']>;
  has: string[];
  lacks?: string[];
  moe: number[];
}> = [
  {
    arch: 'dbrx',
    keys: { 'dbrx.attention.clamp_kqv': 8, 'dbrx.feed_forward_length': 64 },
    has: ['attn_qkv.weight', 'attn_output_norm.weight', ...EXPERTS],
    lacks: ['ffn_norm.weight', 'attn_q.weight'],
    moe: [0, 1, 2],
  },
  {
    arch: 'phimoe',
    keys: { 'phimoe.feed_forward_length': 64 },
    has: ['attn_norm.bias', 'attn_output.bias', 'ffn_norm.bias', ...EXPERTS],
    moe: [0, 1, 2],
  },
  { arch: 'granitemoe', keys: { 'granitemoe.logit_scale': 1 }, has: ['ffn_norm.weight', ...EXPERTS], moe: [0, 1, 2] },
  {
    arch: 'bailingmoe',
    keys: { 'bailingmoe.expert_shared_count': 1, 'bailingmoe.rope.dimension_count': 32 },
    has: ['ffn_gate_shexp.weight', ...EXPERTS],
    moe: [0, 1, 2],
  },
  {
    arch: 'arctic',
    keys: { 'arctic.feed_forward_length': 64 },
    has: ['ffn_gate.weight', 'ffn_up.weight', 'ffn_down.weight', 'ffn_norm_exps.weight', ...EXPERTS],
    moe: [0, 1, 2],
  },
  {
    arch: 'qwen3vlmoe',
    keys: { 'qwen3vlmoe.rope.dimension_sections': qwen3vlSections(32) },
    has: ['attn_q_norm.weight', 'attn_k_norm.weight', ...EXPERTS],
    moe: [0, 1, 2],
  },
  {
    arch: 'exaone-moe',
    keys: {
      'exaone-moe.expert_gating_func': 2,
      'exaone-moe.attention.sliding_window': 8,
      'exaone-moe.expert_shared_feed_forward_length': 64,
    },
    has: ['exp_probs_b.bias', 'ffn_up_shexp.weight', 'attn_q_norm.weight', ...EXPERTS],
    moe: [1, 2],
  },
  {
    arch: 'afmoe',
    keys: { 'afmoe.expert_shared_count': 1, 'afmoe.expert_gating_func': 2, 'afmoe.attention.sliding_window': 8 },
    has: ['attn_gate.weight', 'post_attention_norm.weight', 'post_ffw_norm.weight', 'exp_probs_b.bias', ...EXPERTS],
    moe: [1, 2],
  },
  {
    arch: 'mistral4',
    keys: { 'mistral4.attention.kv_lora_rank': 32, 'mistral4.expert_shared_count': 1, 'mistral4.leading_dense_block_count': 1 },
    has: ['attn_kv_a_mqa.weight', 'attn_k_b.weight', 'ffn_gate_up_exps.weight', 'ffn_down_exps.weight', 'ffn_gate_shexp.weight'],
    lacks: ['ffn_gate_exps.weight', 'ffn_up_exps.weight'],
    moe: [1, 2],
  },
  { arch: 'mellum', keys: { 'mellum.expert_feed_forward_length': 64 }, has: ['attn_q_norm.weight', ...EXPERTS], moe: [0, 1, 2] },
  {
    arch: 'hy_v3',
    keys: { 'hy_v3.expert_gating_func': 2, 'hy_v3.expert_shared_feed_forward_length': 64 },
    has: ['exp_probs_b', 'ffn_gate_shexp.weight', 'attn_k_norm.weight', ...EXPERTS],
    lacks: ['exp_probs_b.bias'],
    moe: [0, 1, 2],
  },
  {
    arch: 'granite',
    keys: { 'granite.logit_scale': 1, 'granite.feed_forward_length': 64, 'granite.expert_shared_feed_forward_length': 64 },
    has: ['ffn_gate_shexp.weight', 'ffn_up_shexp.weight', 'ffn_down_shexp.weight', ...EXPERTS],
    moe: [0, 1, 2],
  },
  {
    arch: 'minicpm',
    keys: { 'minicpm.embedding_scale': 1, 'minicpm.residual_scale': 1, 'minicpm.logit_scale': 1 },
    has: ['ffn_norm.weight', ...EXPERTS],
    moe: [0, 1, 2],
  },
  { arch: 'mistral3', keys: { 'mistral3.feed_forward_length': 64 }, has: ['attn_q.weight', ...EXPERTS], moe: [0, 1, 2] },
  {
    arch: 'deepseek2-ocr',
    keys: {
      'deepseek2-ocr.leading_dense_block_count': 1,
      'deepseek2-ocr.expert_shared_count': 1,
      'deepseek2-ocr.attention.head_count_kv': 2,
      'deepseek2-ocr.rope.dimension_count': 32,
    },
    has: ['attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'ffn_gate_shexp.weight', ...EXPERTS],
    lacks: ['attn_kv_a_mqa.weight', 'attn_q_a.weight'],
    moe: [1, 2],
  },
  {
    arch: 'granite_swa',
    keys: {
      'granite_swa.logit_scale': 1,
      'granite_swa.attention.sliding_window': 8,
      'granite_swa.attention.sliding_window_pattern': [true, false, true],
      'granite_swa.expert_shared_feed_forward_length': 64,
    },
    has: ['attn_sinks.weight', 'ffn_gate_inp.weight', 'ffn_gate_up_exps.weight', 'ffn_down_exps.weight', 'ffn_up_shexp.weight'],
    lacks: ['ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_gate_shexp.weight'],
    moe: [0, 1, 2],
  },
  {
    arch: 'mimo2',
    keys: {
      'mimo2.attention.sliding_window': 8,
      'mimo2.attention.sliding_window_pattern': [true, false, true],
      'mimo2.expert_feed_forward_length': 64,
    },
    has: ['attn_sinks.weight', 'exp_probs_b.bias', ...EXPERTS],
    lacks: ['ffn_gate_shexp.weight'],
    moe: [1, 2],
  },
  {
    arch: 'laguna',
    keys: {
      'laguna.leading_dense_block_count': 1,
      'laguna.expert_gating_func': 2,
      'laguna.expert_weights_scale': 2.5,
      'laguna.expert_shared_feed_forward_length': 64,
      'laguna.attention.sliding_window': 8,
      'laguna.attention.sliding_window_pattern': 4,
    },
    has: ['attn_gate.weight', 'attn_q_norm.weight', 'exp_probs_b.bias', 'ffn_gate_shexp.weight', ...EXPERTS],
    moe: [1, 2],
  },
  {
    arch: 'cohere2moe',
    keys: {
      'cohere2moe.logit_scale': 1,
      'cohere2moe.leading_dense_block_count': 1,
      'cohere2moe.expert_shared_count': 1,
      'cohere2moe.expert_gating_func': 2,
      'cohere2moe.attention.sliding_window': 8,
      'cohere2moe.attention.sliding_window_pattern': 4,
    },
    has: ['attn_norm.weight', 'ffn_gate_shexp.weight', ...EXPERTS],
    // parallel residual: the FFN reads attn_norm's output
    lacks: ['ffn_norm.weight', 'exp_probs_b.bias'],
    moe: [1, 2],
  },
  {
    arch: 'deepseek32',
    keys: {
      'deepseek32.attention.q_lora_rank': 32,
      'deepseek32.attention.indexer.head_count': 2,
      'deepseek32.attention.indexer.key_length': 64,
      'deepseek32.attention.indexer.top_k': 4,
      'deepseek32.expert_gating_func': 2,
    },
    has: [
      ...['attn_q_a.weight', 'attn_kv_a_mqa.weight', 'attn_k_b.weight', 'indexer.k_norm.weight', 'indexer.k_norm.bias'],
      ...['indexer.proj.weight', 'indexer.attn_k.weight', 'indexer.attn_q_b.weight', 'exp_probs_b.bias', ...EXPERTS],
    ],
    moe: [1, 2],
  },
  {
    arch: 'glm-dsa',
    keys: {
      'glm-dsa.attention.q_lora_rank': 32,
      'glm-dsa.attention.indexer.head_count': 2,
      'glm-dsa.attention.indexer.key_length': 64,
      'glm-dsa.attention.indexer.top_k': 4,
      'glm-dsa.expert_gating_func': 2,
    },
    has: [
      ...['attn_q_a.weight', 'attn_kv_a_mqa.weight', 'attn_k_b.weight', 'indexer.k_norm.weight', 'indexer.k_norm.bias'],
      ...['indexer.proj.weight', 'indexer.attn_k.weight', 'indexer.attn_q_b.weight', 'exp_probs_b.bias', ...EXPERTS],
    ],
    moe: [1, 2],
  },
  {
    arch: 'lfm2moe',
    keys: { 'lfm2moe.shortconv.l_cache': 3, 'lfm2moe.attention.head_count_kv': [0, 2, 0], 'lfm2moe.expert_gating_func': 2 },
    has: ['attn_q.weight', 'attn_q_norm.weight', 'exp_probs_b.bias', ...EXPERTS],
    lacks: ['shortconv.conv.weight'],
    moe: [1, 2],
  },
];

for (const c of CASES) {
  test(`${c.arch}: the keys and the routed layer's tensors its loader requires`, () => {
    const p = plan({ arch: c.arch });
    assert.equal(meta(p)['general.architecture'], c.arch);
    for (const [k, v] of Object.entries(c.keys)) assert.deepEqual(meta(p)[k], v, k);
    assert.deepEqual(p.moeLayers, c.moe);
    const layer = names(p, c.moe[0] as number);
    for (const n of c.has) assert.ok(layer.includes(n), `${c.arch} has ${n}: ${layer.join(' ')}`);
    for (const n of c.lacks ?? []) assert.ok(!layer.includes(n), `${c.arch} has no ${n}`);
    // Experts at the requested type; vectors F32.
    const q = planModel(defaultConfig({ arch: c.arch, layers: 3, nEmbd: 256, ff: 256, sharedFf: 256, type: GGMLType.Q4_K }), VOCAB);
    for (const t of q.tensors) {
      if (/ffn_(gate|up|down|gate_up)_exps\.weight$/.test(t.name)) assert.equal(t.type, GGMLType.Q4_K, t.name);
      if (t.dims.length === 1) assert.equal(t.type, GGMLType.F32, t.name);
    }
  });
}

test('mistral4: fused gate/up experts, each expert its gate rows then its up rows (2 × ff)', () => {
  const t = plan({ arch: 'mistral4' }).tensors.find((x) => x.name === 'blk.1.ffn_gate_up_exps.weight');
  assert.deepEqual(t?.dims, [64, 128, 8]);
});

test('granite_swa: one sink per head; the shared expert fused as the experts are (gate rows, then up rows: 2 × its width)', () => {
  const dims = (n: string): number[] | undefined => plan({ arch: 'granite_swa' }).tensors.find((x) => x.name === n)?.dims;
  assert.deepEqual(dims('blk.0.attn_sinks.weight'), [2]);
  assert.deepEqual(dims('blk.0.ffn_gate_up_exps.weight'), [64, 128, 8]);
  assert.deepEqual(dims('blk.0.ffn_up_shexp.weight'), [64, 128]);
  assert.deepEqual(dims('blk.0.ffn_down_shexp.weight'), [64, 64]);
  // granite, its sibling without the window: split experts and shared expert, no sinks.
  assert.equal(names(plan({ arch: 'granite' }), 0).includes('attn_sinks.weight'), false);
});

test('laguna: one attention gate per head (XS.2), not per element; mimo2: its dense first layer has no router', () => {
  const p = plan({ arch: 'laguna' });
  assert.deepEqual(p.tensors.find((x) => x.name === 'blk.1.attn_gate.weight')?.dims, [64, 2]);
  const m = names(plan({ arch: 'mimo2' }), 0);
  assert.ok(m.includes('ffn_up.weight') && !m.includes('ffn_gate_inp.weight'), m.join(' '));
});

test('deepseek32: the indexer in every layer, dense ones too; its q from the compressed query, 64-wide keys', () => {
  const p = plan({ arch: 'deepseek32' });
  const dims = (n: string): number[] | undefined => p.tensors.find((x) => x.name === n)?.dims;
  assert.deepEqual(dims('blk.0.indexer.attn_q_b.weight'), [32, 128]);
  assert.deepEqual(dims('blk.0.indexer.attn_k.weight'), [64, 64]);
  assert.deepEqual(dims('blk.2.indexer.proj.weight'), [64, 2]);
  assert.match(validateConfig(defaultConfig({ arch: 'deepseek32', nEmbd: 256, nHead: 1 })).join(), /rotates more than the indexer/);
});

test('lfm2moe: the even layers convolve instead of attending (no q, k, v, norms), one head_count_kv entry per layer', () => {
  const p = plan({ arch: 'lfm2moe' });
  const conv = names(p, 2);
  for (const n of ['shortconv.conv.weight', 'shortconv.in_proj.weight', 'shortconv.out_proj.weight', ...EXPERTS]) {
    assert.ok(conv.includes(n), `${n}: ${conv.join(' ')}`);
  }
  assert.ok(!conv.includes('attn_q.weight') && !conv.includes('attn_k_norm.weight'), conv.join(' '));
  assert.deepEqual(p.tensors.find((x) => x.name === 'blk.2.shortconv.in_proj.weight')?.dims, [64, 192]);
  assert.ok(p.tensors.some((x) => x.name === 'token_embd_norm.weight') && !p.tensors.some((x) => x.name === 'output_norm.weight'));
  assert.equal(p.metadata.filter((m) => m.key === 'lfm2moe.attention.head_count_kv').length, 1);
});

test('jamba: the even layers are Mamba layers (inner width 2 × n_embd, ssm_a and ssm_d without .weight), every layer routed', () => {
  const p = plan({ arch: 'jamba' });
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
  assert.deepEqual(meta(p)['jamba.attention.head_count_kv'], [0, 2, 0]);
  assert.equal(meta(p)['jamba.ssm.inner_size'], 128);
  const m = names(p, 0);
  for (const n of ['ssm_in.weight', 'ssm_conv1d.bias', 'ssm_x.weight', 'ssm_dt.bias', 'ssm_a', 'ssm_d', 'ssm_out.weight', ...EXPERTS]) {
    assert.ok(m.includes(n), `${n}: ${m.join(' ')}`);
  }
  assert.ok(!m.includes('attn_q.weight') && names(p, 1).includes('attn_q.weight'));
  // The decay and time-step bias stay F32 whatever the type (llama.cpp's scan reads them so).
  const q = planModel(defaultConfig({ arch: 'jamba', layers: 2, nEmbd: 256, ff: 256, type: GGMLType.Q8_0 }), VOCAB);
  for (const n of ['blk.0.ssm_a', 'blk.0.ssm_dt.bias']) assert.equal(q.tensors.find((t) => t.name === n)?.type, GGMLType.F32, n);
});

test('granitehybrid: Mamba2 layers in the even layers (one in_proj to z, x, B, C, dt; per-head decay), a shared expert', () => {
  const p = plan({ arch: 'granitehybrid' });
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
  assert.deepEqual(meta(p)['granitehybrid.attention.head_count_kv'], [0, 2, 0]);
  assert.equal(meta(p)['granitehybrid.ssm.time_step_rank'], 8);
  const dims = (n: string): number[] | undefined => p.tensors.find((x) => x.name === n)?.dims;
  // 2 × 128 (z, x) + 2 × 16 (B, C) + 8 heads
  assert.deepEqual(dims('blk.0.ssm_in.weight'), [64, 296]);
  assert.deepEqual(dims('blk.0.ssm_a'), [1, 8]);
  assert.deepEqual(dims('blk.0.ssm_norm.weight'), [128, 1]);
  assert.ok(names(p, 1).includes('attn_q.weight') && names(p, 0).includes('ffn_up_shexp.weight'));
});

test('dots3note: windowed latent attention in the even layers without the indexer, full ones with it; a gate per head, the rotated key normed', () => {
  const p = plan({ arch: 'dots3note' });
  assert.deepEqual(p.moeLayers, [1, 2]);
  assert.deepEqual(meta(p)['dots3note.attention.sliding_window_pattern'], [true, false, true]);
  assert.deepEqual(meta(p)['dots3note.attention.indexer.types'], [0, 1, 0]);
  for (const k of ['kv_lora_rank_swa', 'key_length_mla_swa', 'value_length_mla_swa', 'sliding_window']) {
    assert.ok(meta(p)[`dots3note.attention.${k}`] !== undefined, k);
  }
  assert.equal(meta(p)['dots3note.rope.freq_base_swa'], 10000);
  const dims = (n: string): number[] | undefined => p.tensors.find((x) => x.name === n)?.dims;
  assert.deepEqual(dims('blk.1.attn_gate.weight'), [64, 2]);
  // n_rot: half of a 32-wide head
  assert.deepEqual(dims('blk.2.attn_k_norm.weight'), [16]);
  assert.ok(names(p, 1).includes('indexer.attn_q_b.weight') && !names(p, 2).some((n) => n.startsWith('indexer.')), names(p, 2).join(' '));
  for (const n of ['attn_k_b.weight', 'attn_v_b.weight', 'exp_probs_b.bias', 'ffn_up_shexp.weight', ...EXPERTS]) {
    assert.ok(names(p, 2).includes(n), n);
  }
  assert.ok(!p.tensors.some((t) => t.name.includes('nextn')), 'no MTP layer');
  assert.match(
    validateConfig(defaultConfig({ arch: 'dots3note', layers: 1, denseLeading: 0 })).join(),
    /dots3note needs at least 2 layers/,
  );
});

test('minimax-01: lightning-attention layers in the even layers (one qkv projection, output norm and gate), softmax attention in the odd ones, every layer routed', () => {
  const p = plan({ arch: 'minimax-01' });
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
  assert.equal(meta(p)['minimax-01.residual_scale'], 1);
  assert.equal(meta(p)['minimax-01.full_attention_interval'], 2);
  assert.equal(meta(p)['minimax-01.feed_forward_length'], 64);
  const dims = (n: string): number[] | undefined => p.tensors.find((x) => x.name === n)?.dims;
  assert.deepEqual(dims('blk.0.attn_qkv.weight'), [64, 192]);
  assert.deepEqual(dims('blk.2.attn_gate.weight'), [64, 64]);
  assert.deepEqual(dims('blk.0.attn_norm_2.weight'), [64]);
  for (const n of ['attn_q.weight', 'attn_k.weight', 'attn_v.weight', 'ffn_norm.weight', 'attn_output.weight', ...EXPERTS]) {
    assert.ok(names(p, 1).includes(n), n);
  }
  assert.ok(!names(p, 1).includes('attn_qkv.weight') && !names(p, 0).includes('attn_q.weight'));
  assert.match(validateConfig(defaultConfig({ arch: 'minimax-01', layers: 1 })).join(), /minimax-01 needs at least 2 layers/);
});

test('kimi-linear: KDA layers in the even layers (q, k, v each through a 3-D convolution, low-rank gates), latent attention without query compression in the odd ones', () => {
  const p = plan({ arch: 'kimi-linear' });
  assert.deepEqual(p.moeLayers, [1, 2]);
  assert.deepEqual(meta(p)['kimi-linear.attention.head_count_kv'], [0, 1, 0]);
  assert.equal(meta(p)['kimi-linear.kda.head_dim'], 32);
  assert.equal(meta(p)['kimi-linear.expert_gating_func'], 2);
  assert.equal(p.metadata.filter((m) => m.key === 'kimi-linear.attention.head_count_kv').length, 1);
  const dims = (n: string): number[] | undefined => p.tensors.find((x) => x.name === n)?.dims;
  assert.deepEqual(dims('blk.2.ssm_conv1d_q.weight'), [4, 1, 64]);
  assert.deepEqual(dims('blk.2.ssm_f_b.weight'), [32, 64]);
  assert.deepEqual(dims('blk.2.ssm_a'), [1, 2]);
  assert.deepEqual(dims('blk.2.ssm_dt.bias'), [64]);
  assert.deepEqual(dims('blk.1.attn_q.weight'), [64, 64]);
  for (const n of ['attn_kv_a_mqa.weight', 'attn_k_b.weight', 'attn_v_b.weight', 'exp_probs_b.bias', 'ffn_up_shexp.weight', ...EXPERTS]) {
    assert.ok(names(p, 1).includes(n), n);
  }
  assert.ok(!names(p, 1).includes('attn_q_a.weight') && !names(p, 2).includes('attn_kv_a_mqa.weight'));
  assert.match(validateConfig(defaultConfig({ arch: 'kimi-linear', qLoraRank: 16 })).join(), /kimi-linear has no query compression/);
});

test('bailingmoe3: KDA layers with full-rank gates and 4-D convolutions, latent attention with a gate per head, every routed layer clamped as step35', () => {
  const p = plan({ arch: 'bailingmoe3' });
  assert.deepEqual(p.moeLayers, [1, 2]);
  assert.deepEqual(meta(p)['bailingmoe3.attention.head_count_kv'], [0, 1, 0]);
  assert.equal(meta(p)['bailingmoe3.kda.gate_lower_bound'], -5);
  assert.deepEqual(meta(p)['bailingmoe3.swiglu_clamp_exp'], [1.5, 0, 2]);
  const dims = (n: string): number[] | undefined => p.tensors.find((x) => x.name === n)?.dims;
  assert.deepEqual(dims('blk.2.ssm_conv1d_v.weight'), [4, 1, 64, 1]);
  assert.deepEqual(dims('blk.2.ssm_f_a.weight'), [64, 64]);
  assert.deepEqual(dims('blk.2.ssm_g_a.weight'), [64, 64]);
  assert.ok(!names(p, 2).includes('ssm_f_b.weight') && !names(p, 2).includes('ssm_g_b.weight'));
  assert.deepEqual(dims('blk.1.attn_gate.weight'), [64, 2]);
  for (const n of ['attn_q_a.weight', 'attn_kv_a_mqa.weight', 'attn_k_b.weight', 'exp_probs_b.bias', 'ffn_up_shexp.weight', ...EXPERTS]) {
    assert.ok(names(p, 1).includes(n), n);
  }
});

test('kin config checks: latent ranks only for latent attention; qwen3vlmoe needs heads wide enough for its sections', () => {
  assert.match(
    validateConfig(defaultConfig({ arch: 'dbrx', qLoraRank: 8 })).join(),
    /only deepseek2, mistral4, deepseek32, glm-dsa, dots3note, kimi-linear, bailingmoe3 have q_lora_rank/,
  );
  assert.match(validateConfig(defaultConfig({ arch: 'qwen3vlmoe', nEmbd: 64, nHead: 8 })).join(), /too small for its four RoPE sections/);
  assert.deepEqual(validateConfig(defaultConfig({ arch: 'afmoe' })), []);
  assert.match(validateConfig(defaultConfig({ arch: 'deepseek2-ocr', nHeadKv: 1 })).join(), /deepseek2-ocr has no grouped-query attention/);
  assert.match(validateConfig(defaultConfig({ arch: 'granite_swa', layers: 1 })).join(), /granite_swa needs at least 2 layers/);
});

test('no name is both generated and listed as not generated', () => {
  for (const a of ARCHITECTURES) assert.equal(UNGENERATED[a], undefined, a);
});

test('make-model refuses an architecture it does not write, naming it and the missing piece', () => {
  const cli = fileURLToPath(new URL('../../tools/make-model-cli.ts', import.meta.url));
  const r = spawnSync(process.execPath, ['--import', 'tsx', cli, '--arch', 'llada-moe', '--out', '/nonexistent/x.gguf'], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(r.status, 2, r.stderr);
  assert.match(
    r.stderr,
    /make-model: llada-moe is not generated yet: the generator lacks a server that completes with it: a diffusion LM .*no KV cache.*llama-server refuses completions/,
  );
});
