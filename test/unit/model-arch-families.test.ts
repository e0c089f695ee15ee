/**
 * planModel for the families added for issue 25 (deepseek2, glm4moe, minimax-m2, dots1, ernie4_5-moe, hunyuan-moe,
 * bailingmoe2) and later (llama4, gpt-oss, grok, step35, the per-expert scales of --expert-scales): the metadata keys llama.cpp's
 * loader reads for each (`${arch}.…`, pinned commit: src/models/<arch>.cpp load_arch_hparams) and every tensor of a
 * dense and of a routed layer with its name, shape and type (load_arch_tensors). llama.cpp loading and running the
 * files is test/integration/llama-loads.test.ts; dispatching their experts, test/integration/expert-dispatch.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GGMLType } from '../../gguf/quant-types.ts';
import { readGGUFFile } from '../../gguf/node-io.ts';
import { tensorDataRange } from '../../gguf/types.ts';
import { amplitude, centre, makeModel } from '../../tools/make-model.ts';
import {
  type ArchName,
  EXPERT_SCALE_ARCHS,
  GPT_OSS_SLIDING_WINDOW,
  STEP35_SLIDING_WINDOW,
  type MetaEntry,
  type ModelConfig,
  type ModelPlan,
  defaultConfig,
  defaultSwigluLimits,
  planModel,
  routingOf,
  rowType,
  step35Windowed,
  validateConfig,
} from '../../tools/model-arch.ts';

const VOCAB = 300;

function plan(partial: Partial<ModelConfig> & { arch: ArchName }): ModelPlan {
  return planModel(defaultConfig({ layers: 3, nEmbd: 64, ff: 64, sharedFf: 64, nExpert: 8, nExpertUsed: 2, ...partial }), VOCAB);
}

function meta(p: ModelPlan): Record<string, MetaEntry['value']> {
  return Object.fromEntries(p.metadata.map((m) => [m.key, m.value]));
}

/** The tensors of layer `l` as `name dims type`, in file order. */
function layer(p: ModelPlan, l: number): string[] {
  return p.tensors.filter((t) => t.name.startsWith(`blk.${l}.`)).map((t) => `${t.name} ${t.dims.join('x')} ${GGMLType[t.type]}`);
}

test('deepseek2: latent attention (q and kv compression, split k_b / v_b), sigmoid router with a selection bias, grouped top-k, normalised and scaled weights, shared experts, a leading dense layer', () => {
  const p = plan({ arch: 'deepseek2' });
  const m = meta(p);
  // nEmbd 64, 2 heads of 32: 16 non-rotated + 16 rotated key dims; ranks nEmbd / 2.
  assert.deepEqual(
    {
      q: m['deepseek2.attention.q_lora_rank'],
      kv: m['deepseek2.attention.kv_lora_rank'],
      kLen: m['deepseek2.attention.key_length'],
      vLen: m['deepseek2.attention.value_length'],
      kMla: m['deepseek2.attention.key_length_mla'],
      vMla: m['deepseek2.attention.value_length_mla'],
      rope: m['deepseek2.rope.dimension_count'],
      heads: m['deepseek2.attention.head_count'],
      kvHeads: m['deepseek2.attention.head_count_kv'],
    },
    { q: 32, kv: 32, kLen: 48, vLen: 32, kMla: 32, vMla: 32, rope: 16, heads: 2, kvHeads: 1 },
  );
  assert.deepEqual(
    {
      gating: m['deepseek2.expert_gating_func'],
      norm: m['deepseek2.expert_weights_norm'],
      scale: m['deepseek2.expert_weights_scale'],
      groups: m['deepseek2.expert_group_count'],
      groupsUsed: m['deepseek2.expert_group_used_count'],
      dense: m['deepseek2.leading_dense_block_count'],
      shared: m['deepseek2.expert_shared_count'],
      ffExp: m['deepseek2.expert_feed_forward_length'],
      ff: m['deepseek2.feed_forward_length'],
    },
    { gating: 2, norm: true, scale: 2.5, groups: 4, groupsUsed: 2, dense: 1, shared: 1, ffExp: 64, ff: 64 },
  );
  assert.equal(p.metadata.find((e) => e.key === 'deepseek2.expert_weights_norm')?.kind, 'bool', 'a GGUF bool, as the loader reads it');
  const attn = [
    'attn_norm.weight 64 F32',
    'attn_q_a_norm.weight 32 F32',
    'attn_q_a.weight 64x32 F32',
    'attn_q_b.weight 32x64 F32',
    'attn_kv_a_norm.weight 32 F32',
    'attn_kv_a_mqa.weight 64x48 F32',
    'attn_k_b.weight 16x32x2 F32',
    'attn_v_b.weight 32x32x2 F32',
    'attn_output.weight 64x64 F32',
    'ffn_norm.weight 64 F32',
  ];
  assert.deepEqual(
    layer(p, 0),
    [...attn, 'ffn_gate.weight 64x64 F32', 'ffn_up.weight 64x64 F32', 'ffn_down.weight 64x64 F32'].map((s) => `blk.0.${s}`),
  );
  assert.deepEqual(
    layer(p, 1),
    [
      ...attn,
      'ffn_gate_inp.weight 64x8 F32',
      'exp_probs_b.bias 8 F32',
      'ffn_gate_exps.weight 64x64x8 F32',
      'ffn_up_exps.weight 64x64x8 F32',
      'ffn_down_exps.weight 64x64x8 F32',
      'ffn_gate_shexp.weight 64x64 F32',
      'ffn_up_shexp.weight 64x64 F32',
      'ffn_down_shexp.weight 64x64 F32',
    ].map((s) => `blk.1.${s}`),
  );
  assert.deepEqual(p.moeLayers, [1, 2]);
  assert.equal(p.tensors.filter((t) => t.role === 'router_bias').length, 2, 'one selection bias per routed layer');
});

test('deepseek2 variants: q_lora_rank 0 gives one attn_q; at Q4_K the expert matrices are Q4_K and latent rows that are not whole super-blocks fall back as llama-quantize does', () => {
  const lite = plan({ arch: 'deepseek2', qLoraRank: 0 });
  assert.equal(meta(lite)['deepseek2.attention.q_lora_rank'], 0);
  assert.ok(layer(lite, 1).includes('blk.1.attn_q.weight 64x64 F32'));
  assert.ok(!layer(lite, 1).some((s) => s.includes('attn_q_a')));

  const q = plan({ arch: 'deepseek2', nEmbd: 256, ff: 256, sharedFf: 256, type: GGMLType.Q4_K });
  const types = Object.fromEntries(q.tensors.filter((t) => t.name.startsWith('blk.1.')).map((t) => [t.name.slice(6), GGMLType[t.type]]));
  // 8 heads of 32: attn_k_b rows of 16 (F32: not whole q5_0 blocks), attn_v_b and attn_q_b rows of 128 (q5_0).
  assert.deepEqual(
    {
      gate: types['ffn_gate_exps.weight'],
      down: types['ffn_down_exps.weight'],
      qa: types['attn_q_a.weight'],
      qb: types['attn_q_b.weight'],
      kb: types['attn_k_b.weight'],
      vb: types['attn_v_b.weight'],
      out: types['attn_output.weight'],
      bias: types['exp_probs_b.bias'],
    },
    { gate: 'Q4_K', down: 'Q4_K', qa: 'Q4_K', qb: 'Q5_0', kb: 'F32', vb: 'Q5_0', out: 'Q4_K', bias: 'F32' },
  );
  assert.equal(rowType(GGMLType.Q6_K, 64), GGMLType.Q8_0);
  assert.equal(rowType(GGMLType.Q8_0, 16), GGMLType.F32);
  assert.equal(rowType(GGMLType.Q4_K, 512), GGMLType.Q4_K);
});

test('glm4moe: post_attention_norm before the FFN, per-head q/k norms, partial RoPE, sigmoid router with a selection bias, scaled weights, a shared expert, a leading dense layer; no MTP layer', () => {
  const p = plan({ arch: 'glm4moe' });
  const m = meta(p);
  assert.deepEqual(
    {
      gating: m['glm4moe.expert_gating_func'],
      norm: m['glm4moe.expert_weights_norm'],
      scale: m['glm4moe.expert_weights_scale'],
      dense: m['glm4moe.leading_dense_block_count'],
      shared: m['glm4moe.expert_shared_count'],
      rope: m['glm4moe.rope.dimension_count'],
      kvHeads: m['glm4moe.attention.head_count_kv'],
      nextn: m['glm4moe.nextn_predict_layers'],
      groups: m['glm4moe.expert_group_count'],
    },
    { gating: 2, norm: true, scale: 1.5, dense: 1, shared: 1, rope: 16, kvHeads: 2, nextn: undefined, groups: undefined },
  );
  const attn = [
    'attn_norm.weight 64 F32',
    'attn_q.weight 64x64 F32',
    'attn_k.weight 64x64 F32',
    'attn_v.weight 64x64 F32',
    'attn_output.weight 64x64 F32',
    'attn_q_norm.weight 32 F32',
    'attn_k_norm.weight 32 F32',
    'post_attention_norm.weight 64 F32',
  ];
  assert.deepEqual(
    layer(p, 0),
    [...attn, 'ffn_gate.weight 64x64 F32', 'ffn_up.weight 64x64 F32', 'ffn_down.weight 64x64 F32'].map((s) => `blk.0.${s}`),
  );
  assert.deepEqual(
    layer(p, 2),
    [
      ...attn,
      'ffn_gate_inp.weight 64x8 F32',
      'exp_probs_b.bias 8 F32',
      'ffn_gate_exps.weight 64x64x8 F32',
      'ffn_up_exps.weight 64x64x8 F32',
      'ffn_down_exps.weight 64x64x8 F32',
      'ffn_gate_shexp.weight 64x64 F32',
      'ffn_up_shexp.weight 64x64 F32',
      'ffn_down_shexp.weight 64x64 F32',
    ].map((s) => `blk.2.${s}`),
  );
  assert.deepEqual(p.moeLayers, [1, 2]);
});

test('minimax-m2: every layer routed, experts sized by feed_forward_length (and expert_feed_forward_length, both read), q/k norms over all heads, sigmoid router with a selection bias, no shared expert', () => {
  const p = plan({ arch: 'minimax-m2', ff: 32, nHeadKv: 1 });
  const m = meta(p);
  assert.deepEqual(
    {
      ff: m['minimax-m2.feed_forward_length'],
      ffExp: m['minimax-m2.expert_feed_forward_length'],
      gating: m['minimax-m2.expert_gating_func'],
      norm: m['minimax-m2.expert_weights_norm'],
      scale: m['minimax-m2.expert_weights_scale'],
      rope: m['minimax-m2.rope.dimension_count'],
      dense: m['minimax-m2.leading_dense_block_count'],
    },
    { ff: 32, ffExp: 32, gating: 2, norm: true, scale: undefined, rope: 16, dense: undefined },
  );
  assert.deepEqual(
    layer(p, 0),
    [
      'attn_norm.weight 64 F32',
      'attn_q.weight 64x64 F32',
      'attn_k.weight 64x32 F32',
      'attn_v.weight 64x32 F32',
      'attn_output.weight 64x64 F32',
      'attn_q_norm.weight 64 F32',
      'attn_k_norm.weight 32 F32',
      'ffn_norm.weight 64 F32',
      'ffn_gate_inp.weight 64x8 F32',
      'exp_probs_b.bias 8 F32',
      'ffn_gate_exps.weight 64x32x8 F32',
      'ffn_up_exps.weight 64x32x8 F32',
      'ffn_down_exps.weight 32x64x8 F32',
    ].map((s) => `blk.0.${s}`),
  );
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
});

test('the first five architectures keep their softmax router: no gating key, no selection bias, no groups, no MLA keys', () => {
  for (const arch of ['qwen3moe', 'qwen2moe', 'deepseek', 'llama', 'olmoe'] as const) {
    const p = plan({ arch });
    const keys = p.metadata.map((e) => e.key);
    assert.ok(!keys.some((k) => /gating_func|expert_group|lora_rank|_mla$|weights_norm/.test(k)), `${arch}: ${keys.join(', ')}`);
    assert.ok(!p.tensors.some((t) => t.role === 'router_bias'), arch);
  }
});

test('validateConfig names the wrong number for the new families', () => {
  const cases: Array<[Partial<ModelConfig> & { arch: ArchName }, RegExp]> = [
    [
      { arch: 'minimax-m2', denseLeading: 1 },
      /only deepseek, deepseek2, glm4moe, dots1, ernie4_5-moe, bailingmoe2, minimax-m3, exaone-moe, afmoe, mistral4, deepseek2-ocr, mimo2, laguna, cohere2moe, deepseek32, glm-dsa, lfm2moe, dots3note, kimi-linear, bailingmoe3 have leading dense layers/,
    ],
    [{ arch: 'glm4moe', sharedFf: 96 }, /--shared-ff \(96\) must be a multiple of --ff \(64\)/],
    [{ arch: 'deepseek2', expertGroups: 3 }, /expert groups \(3\) must divide --n-expert \(8\)/],
    [{ arch: 'deepseek2', expertGroups: 4, expertGroupsUsed: 4 }, /expert groups used \(4\) must be in \[1, 4\)/],
    [
      { arch: 'deepseek2', nExpertUsed: 4, expertGroups: 4, expertGroupsUsed: 1 },
      /groups used hold fewer experts than --n-expert-used \(4\)/,
    ],
    [{ arch: 'deepseek2', kvLoraRank: 0 }, /kv_lora_rank must be a positive integer/],
    [{ arch: 'glm4moe', expertGroups: 4, expertGroupsUsed: 2 }, /only deepseek2 routes by expert groups/],
    [
      { arch: 'qwen3moe', kvLoraRank: 32 },
      /only deepseek2, mistral4, deepseek32, glm-dsa, dots3note, kimi-linear, bailingmoe3 have q_lora_rank/,
    ],
  ];
  for (const [partial, want] of cases) {
    const problems = validateConfig(defaultConfig({ layers: 3, nEmbd: 64, ff: 64, sharedFf: 64, nExpert: 8, nExpertUsed: 2, ...partial }));
    assert.ok(
      problems.some((p) => want.test(p)),
      `${JSON.stringify(partial)}: ${problems.join('; ') || 'no problem found'}`,
    );
  }
});

test('dots1: per-head q/k norms, sigmoid router with a selection bias, normalised weights × 2.5, shared experts, a leading dense layer; no grouped-query attention', () => {
  const p = plan({ arch: 'dots1' });
  const m = meta(p);
  assert.deepEqual(
    [m['dots1.expert_gating_func'], m['dots1.expert_weights_norm'], m['dots1.expert_weights_scale'], m['dots1.leading_dense_block_count']],
    [2, true, 2.5, 1],
  );
  assert.deepEqual([m['dots1.expert_shared_count'], m['dots1.expert_feed_forward_length'], m['dots1.rope.dimension_count']], [1, 64, 32]);
  assert.deepEqual(
    layer(p, 1).map((s) => s.slice('blk.1.'.length)),
    [
      'attn_norm.weight 64 F32',
      'attn_q.weight 64x64 F32',
      'attn_k.weight 64x64 F32',
      'attn_v.weight 64x64 F32',
      'attn_output.weight 64x64 F32',
      'attn_q_norm.weight 32 F32',
      'attn_k_norm.weight 32 F32',
      'ffn_norm.weight 64 F32',
      'ffn_gate_inp.weight 64x8 F32',
      'exp_probs_b.bias 8 F32',
      'ffn_gate_exps.weight 64x64x8 F32',
      'ffn_up_exps.weight 64x64x8 F32',
      'ffn_down_exps.weight 64x64x8 F32',
      'ffn_gate_shexp.weight 64x64 F32',
      'ffn_up_shexp.weight 64x64 F32',
      'ffn_down_shexp.weight 64x64 F32',
    ],
  );
  assert.deepEqual(p.moeLayers, [1, 2]);
  assert.match(validateConfig(defaultConfig({ arch: 'dots1', nHead: 2, nHeadKv: 1 })).join('; '), /dots1 has no grouped-query attention/);
});

test('ernie4_5-moe: softmax router (fixed by its graph: no gating keys) with a selection bias, a shared expert of its own width, the MoE step, a leading dense layer', () => {
  const p = plan({ arch: 'ernie4_5-moe', sharedFf: 96 });
  const m = meta(p);
  assert.deepEqual(
    {
      step: m['ernie4_5-moe.interleave_moe_layer_step'],
      dense: m['ernie4_5-moe.leading_dense_block_count'],
      ff: m['ernie4_5-moe.feed_forward_length'],
      ffExp: m['ernie4_5-moe.expert_feed_forward_length'],
      ffShared: m['ernie4_5-moe.expert_shared_feed_forward_length'],
      gating: m['ernie4_5-moe.expert_gating_func'],
      sharedCount: m['ernie4_5-moe.expert_shared_count'],
    },
    { step: 1, dense: 1, ff: 96, ffExp: 64, ffShared: 96, gating: undefined, sharedCount: undefined },
  );
  assert.deepEqual(
    layer(p, 0).slice(-3),
    ['ffn_gate.weight 64x96 F32', 'ffn_up.weight 64x96 F32', 'ffn_down.weight 96x64 F32'].map((s) => `blk.0.${s}`),
  );
  assert.deepEqual(
    layer(p, 2).slice(5),
    [
      'ffn_norm.weight 64 F32',
      'ffn_gate_inp.weight 64x8 F32',
      'exp_probs_b.bias 8 F32',
      'ffn_gate_exps.weight 64x64x8 F32',
      'ffn_up_exps.weight 64x64x8 F32',
      'ffn_down_exps.weight 64x64x8 F32',
      'ffn_gate_shexp.weight 64x96 F32',
      'ffn_up_shexp.weight 64x96 F32',
      'ffn_down_shexp.weight 96x64 F32',
    ].map((s) => `blk.2.${s}`),
  );
  assert.deepEqual(p.moeLayers, [1, 2]);
});

test('hunyuan-moe: experts sized by feed_forward_length, a shared expert of its own width, per-head q/k norms, softmax router; every layer routed', () => {
  const p = plan({ arch: 'hunyuan-moe', ff: 32, sharedFf: 96 });
  const m = meta(p);
  assert.deepEqual(
    [m['hunyuan-moe.feed_forward_length'], m['hunyuan-moe.expert_feed_forward_length'], m['hunyuan-moe.expert_shared_feed_forward_length']],
    [32, 32, 96],
  );
  assert.equal(m['hunyuan-moe.leading_dense_block_count'], undefined);
  assert.deepEqual(
    layer(p, 0).slice(5),
    [
      'attn_q_norm.weight 32 F32',
      'attn_k_norm.weight 32 F32',
      'ffn_norm.weight 64 F32',
      'ffn_gate_inp.weight 64x8 F32',
      'ffn_gate_exps.weight 64x32x8 F32',
      'ffn_up_exps.weight 64x32x8 F32',
      'ffn_down_exps.weight 32x64x8 F32',
      'ffn_gate_shexp.weight 64x96 F32',
      'ffn_up_shexp.weight 64x96 F32',
      'ffn_down_shexp.weight 96x64 F32',
    ].map((s) => `blk.0.${s}`),
  );
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
});

test('bailingmoe2: one fused attn_qkv, per-head q/k norms, partial RoPE, sigmoid router with a selection bias, × 2.5, shared experts, a leading dense layer', () => {
  const p = plan({ arch: 'bailingmoe2', nHeadKv: 1 });
  const m = meta(p);
  assert.deepEqual(
    [
      m['bailingmoe2.expert_gating_func'],
      m['bailingmoe2.expert_weights_scale'],
      m['bailingmoe2.expert_shared_count'],
      m['bailingmoe2.rope.dimension_count'],
    ],
    [2, 2.5, 1, 16],
  );
  assert.deepEqual(
    layer(p, 1).slice(0, 6),
    [
      'attn_norm.weight 64 F32',
      'attn_qkv.weight 64x128 F32',
      'attn_output.weight 64x64 F32',
      'attn_q_norm.weight 32 F32',
      'attn_k_norm.weight 32 F32',
      'ffn_norm.weight 64 F32',
    ].map((s) => `blk.1.${s}`),
  );
  assert.ok(!p.tensors.some((t) => /attn_[qkv]\.weight/.test(t.name)), 'no separate q, k, v');
  assert.ok(layer(p, 1).includes('blk.1.exp_probs_b.bias 8 F32'));
  assert.deepEqual(p.moeLayers, [1, 2]);
});

test('llama4: MoE every second layer with a shared expert, dense between; fewer than 4 layers refused', () => {
  const plan = planModel(defaultConfig({ arch: 'llama4', layers: 4, nEmbd: 64, ff: 64, sharedFf: 128, nExpert: 8, nExpertUsed: 1 }), VOCAB);
  assert.deepEqual(plan.moeLayers, [1, 3]);
  const names = new Set(plan.tensors.map((t) => t.name));
  for (const l of [1, 3]) {
    for (const t of ['ffn_gate_exps', 'ffn_up_exps', 'ffn_down_exps', 'ffn_gate_shexp', 'ffn_up_shexp', 'ffn_down_shexp'])
      assert.ok(names.has(`blk.${l}.${t}.weight`), `blk.${l}.${t}`);
  }
  assert.deepEqual(plan.tensors.find((t) => t.name === 'blk.0.ffn_up.weight')?.dims, [64, 128], 'dense FFN at feed_forward_length');
  assert.ok(!names.has('blk.0.ffn_up_exps.weight') && !names.has('blk.2.ffn_up_exps.weight'));
  assert.ok(plan.metadata.some((m) => m.key === 'llama4.interleave_moe_layer_step' && m.value === 2));
  const problems = validateConfig(defaultConfig({ arch: 'llama4', layers: 3, nEmbd: 64, ff: 64, nExpert: 8, nExpertUsed: 1 }));
  assert.ok(
    problems.some((p) => p.includes('llama4 needs at least 4 layers')),
    problems.join('; '),
  );
});

test('gpt-oss: every layer routed; biases on q, k, v, the output, the router and each expert gate, up and down; one sink per head; windowed and full attention alternate; softmax over the selected experts', () => {
  const p = plan({ arch: 'gpt-oss', nHeadKv: 1, ff: 32 });
  const m = meta(p);
  assert.deepEqual(
    {
      window: m['gpt-oss.attention.sliding_window'],
      pattern: m['gpt-oss.attention.sliding_window_pattern'],
      keyLength: m['gpt-oss.attention.key_length'],
      valueLength: m['gpt-oss.attention.value_length'],
      rope: m['gpt-oss.rope.dimension_count'],
      heads: m['gpt-oss.attention.head_count'],
      kvHeads: m['gpt-oss.attention.head_count_kv'],
      ff: m['gpt-oss.feed_forward_length'],
      ffExp: m['gpt-oss.expert_feed_forward_length'],
      experts: m['gpt-oss.expert_count'],
      used: m['gpt-oss.expert_used_count'],
      gating: m['gpt-oss.expert_gating_func'],
      dense: m['gpt-oss.leading_dense_block_count'],
    },
    {
      window: GPT_OSS_SLIDING_WINDOW,
      pattern: undefined,
      keyLength: 32,
      valueLength: 32,
      rope: 32,
      heads: 2,
      kvHeads: 1,
      ff: 32,
      ffExp: 32,
      experts: 8,
      used: 2,
      gating: undefined,
      dense: undefined,
    },
  );
  const want = [
    'attn_norm.weight 64 F32',
    'attn_q.weight 64x64 F32',
    'attn_q.bias 64 F32',
    'attn_k.weight 64x32 F32',
    'attn_k.bias 32 F32',
    'attn_v.weight 64x32 F32',
    'attn_v.bias 32 F32',
    'attn_output.weight 64x64 F32',
    'attn_output.bias 64 F32',
    'attn_sinks.weight 2 F32',
    'post_attention_norm.weight 64 F32',
    'ffn_gate_inp.weight 64x8 F32',
    'ffn_gate_inp.bias 8 F32',
    'ffn_gate_exps.weight 64x32x8 F32',
    'ffn_gate_exps.bias 32x8 F32',
    'ffn_up_exps.weight 64x32x8 F32',
    'ffn_up_exps.bias 32x8 F32',
    'ffn_down_exps.weight 32x64x8 F32',
    'ffn_down_exps.bias 64x8 F32',
  ];
  for (const l of [0, 1, 2])
    assert.deepEqual(
      layer(p, l),
      want.map((s) => `blk.${l}.${s}`),
    );
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
  assert.deepEqual(routingOf('gpt-oss'), { gating: 3, probsBias: false, norm: true, scale: 0 });

  // Q8_0: the matrices take the type asked for, every bias and sink stays F32; all are drawn non-zero (amplitude > 0),
  // and the down biases follow --expert-scale as the down projection does.
  const q = plan({ arch: 'gpt-oss', type: GGMLType.Q8_0 });
  const types = Object.fromEntries(q.tensors.filter((t) => t.name.startsWith('blk.1.')).map((t) => [t.name.slice(6), GGMLType[t.type]]));
  assert.deepEqual(
    [types['attn_q.weight'], types['ffn_gate_exps.weight'], types['ffn_up_exps.weight'], types['ffn_down_exps.weight']],
    ['Q8_0', 'Q8_0', 'Q8_0', 'Q8_0'],
  );
  const vectors = q.tensors.filter((t) => t.name.endsWith('.bias') || t.name.endsWith('attn_sinks.weight'));
  assert.equal(vectors.length, 3 * 9, 'nine bias or sink vectors per layer');
  for (const t of vectors) {
    assert.equal(t.type, GGMLType.F32, t.name);
    assert.ok(amplitude(t, 0.1) > 0, `${t.name} is drawn non-zero`);
  }
  const down = vectors.find((t) => t.name === 'blk.0.ffn_down_exps.bias');
  const gate = vectors.find((t) => t.name === 'blk.0.ffn_gate_exps.bias');
  assert.ok(down && gate);
  assert.equal(amplitude(down, 2) / amplitude(down, 0.1), 20, 'the down biases scale with --expert-scale');
  assert.equal(amplitude(gate, 2), amplitude(gate, 0.1), 'the gate and up biases do not');
  // Unlike llama4, no minimum of layers: llama.cpp loads and runs a one-layer gpt-oss (its one layer windowed).
  assert.deepEqual(validateConfig(defaultConfig({ arch: 'gpt-oss', layers: 1, nEmbd: 64, ff: 64, nExpert: 8, nExpertUsed: 2 })), []);
});

test('grok: every layer routed (GELU-gated experts, separate gate and up) beside a dense FFN; attention and FFN outputs normed; multipliers written; softmax router, weights renormalised', () => {
  const p = plan({ arch: 'grok', ff: 32 });
  const m = meta(p);
  assert.deepEqual(
    {
      ff: m['grok.feed_forward_length'],
      ffExp: m['grok.expert_feed_forward_length'],
      rope: m['grok.rope.dimension_count'],
      embedding: m['grok.embedding_scale'],
      logit: m['grok.logit_scale'],
      attention: m['grok.attention.output_scale'],
      gating: m['grok.expert_gating_func'],
      dense: m['grok.leading_dense_block_count'],
    },
    { ff: 64, ffExp: 32, rope: 32, embedding: 1, logit: 1, attention: 1 / Math.sqrt(32), gating: undefined, dense: undefined },
  );
  const want = [
    'attn_norm.weight 64 F32',
    'attn_q.weight 64x64 F32',
    'attn_k.weight 64x64 F32',
    'attn_v.weight 64x64 F32',
    'attn_output.weight 64x64 F32',
    'attn_output_norm.weight 64 F32',
    'ffn_norm.weight 64 F32',
    'ffn_gate.weight 64x64 F32',
    'ffn_up.weight 64x64 F32',
    'ffn_down.weight 64x64 F32',
    'ffn_gate_inp.weight 64x8 F32',
    'ffn_gate_exps.weight 64x32x8 F32',
    'ffn_up_exps.weight 64x32x8 F32',
    'ffn_down_exps.weight 32x64x8 F32',
    'layer_output_norm.weight 64 F32',
  ];
  for (const l of [0, 1, 2])
    assert.deepEqual(
      layer(p, l),
      want.map((s) => `blk.${l}.${s}`),
    );
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
  assert.deepEqual(routingOf('grok'), { gating: 1, probsBias: false, norm: true, scale: 0 });
  // The routed branch follows --expert-scale as the other families' do; the dense FFN beside it does not.
  const q = plan({ arch: 'grok', type: GGMLType.Q8_0 });
  const down = q.tensors.find((t) => t.name === 'blk.0.ffn_down_exps.weight');
  const dense = q.tensors.find((t) => t.name === 'blk.0.ffn_down.weight');
  assert.ok(down && dense);
  assert.equal(down.type, GGMLType.Q8_0);
  assert.equal(amplitude(down, 2) / amplitude(down, 0.1), 20);
  assert.equal(amplitude(dense, 2), amplitude(dense, 0.1));
});

test('step35: every layer routed with a shared expert, sigmoid router with a selection bias; full and windowed attention (one in four full), a head gate; one SwiGLU clamp limit per layer, 0 on odd layers', () => {
  const p = plan({ arch: 'step35', ff: 32 });
  const m = meta(p);
  assert.deepEqual(
    {
      window: m['step35.attention.sliding_window'],
      pattern: m['step35.attention.sliding_window_pattern'],
      limits: m['step35.swiglu_clamp_exp'],
      shexp: m['step35.swiglu_clamp_shexp'],
      rope: m['step35.rope.dimension_count'],
      ff: m['step35.feed_forward_length'],
      ffExp: m['step35.expert_feed_forward_length'],
      ffShared: m['step35.expert_shared_feed_forward_length'],
      gating: m['step35.expert_gating_func'],
      norm: m['step35.expert_weights_norm'],
      scale: m['step35.expert_weights_scale'],
    },
    {
      window: STEP35_SLIDING_WINDOW,
      pattern: [false, true, true],
      limits: [1.5, 0, 2],
      shexp: undefined,
      rope: 32,
      ff: 64,
      ffExp: 32,
      ffShared: 64,
      gating: 2,
      norm: true,
      scale: 3,
    },
  );
  const kinds = Object.fromEntries(p.metadata.map((e) => [e.key, e.kind]));
  assert.equal(kinds['step35.swiglu_clamp_exp'], 'f32[]', 'an F32 array, as the converter writes it');
  assert.equal(kinds['step35.attention.sliding_window_pattern'], 'bool[]');
  const want = [
    'attn_norm.weight 64 F32',
    'attn_q.weight 64x64 F32',
    'attn_k.weight 64x64 F32',
    'attn_v.weight 64x64 F32',
    'attn_output.weight 64x64 F32',
    'attn_gate.weight 64x2 F32',
    'attn_q_norm.weight 32 F32',
    'attn_k_norm.weight 32 F32',
    'ffn_norm.weight 64 F32',
    'ffn_gate_inp.weight 64x8 F32',
    'exp_probs_b.bias 8 F32',
    'ffn_gate_exps.weight 64x32x8 F32',
    'ffn_up_exps.weight 64x32x8 F32',
    'ffn_down_exps.weight 32x64x8 F32',
    'ffn_gate_shexp.weight 64x64 F32',
    'ffn_up_shexp.weight 64x64 F32',
    'ffn_down_shexp.weight 64x64 F32',
  ];
  for (const l of [0, 1, 2])
    assert.deepEqual(
      layer(p, l),
      want.map((s) => `blk.${l}.${s}`),
    );
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
  assert.deepEqual(defaultSwigluLimits(5), [1.5, 0, 2, 0, 2.5]);
  assert.deepEqual(
    [0, 1, 2, 3, 4, 5].map((l) => step35Windowed(l)),
    [false, true, true, true, false, true],
  );
  // Limits given: one per layer, written as given; none: no key (llama.cpp: no clamp).
  assert.deepEqual(meta(plan({ arch: 'step35', swigluLimits: [7, 7, 0] }))['step35.swiglu_clamp_exp'], [7, 7, 0]);
  assert.equal(meta(plan({ arch: 'step35', swigluLimits: [] }))['step35.swiglu_clamp_exp'], undefined);
  const bad = (partial: Partial<ModelConfig> & { arch: ArchName }): string =>
    validateConfig(defaultConfig({ layers: 3, nEmbd: 64, ff: 64, nExpert: 8, nExpertUsed: 2, ...partial })).join('; ');
  assert.match(bad({ arch: 'step35', swigluLimits: [7, 7] }), /2 limits for 3 layers/);
  assert.match(bad({ arch: 'step35', swigluLimits: [7, -1, 7] }), /finite and ≥ 0/);
  assert.match(bad({ arch: 'step35', swigluLimits: [7, Number.NaN, 7] }), /finite and ≥ 0/);
  assert.match(bad({ arch: 'qwen3moe', swigluLimits: [7, 7, 7] }), /only step35, bailingmoe3 and deepseek4 clamp/);
  assert.match(bad({ arch: 'step35', layers: 1 }), /at least 2 layers/);
  assert.match(bad({ arch: 'step35', nEmbd: 96, nHead: 16 }), /multiple of 4/);
  assert.equal(bad({ arch: 'step35', layers: 2 }), '');
});

test('--expert-scales: ffn_gate, up and down_exps.scale (F32 [n_expert], whatever the type) on every routed layer of the families whose graph reads them, drawn in [0.5, 2) and distinct; refused elsewhere', async () => {
  for (const arch of EXPERT_SCALE_ARCHS) {
    const p = plan({ arch, expertScales: true, type: GGMLType.Q8_0, nEmbd: 64, nHead: 2, nHeadKv: 2 });
    const scales = p.tensors.filter((t) => t.name.endsWith('_exps.scale'));
    assert.deepEqual(
      scales.map((t) => t.name),
      p.moeLayers.flatMap((l) => ['gate', 'up', 'down'].map((m) => `blk.${l}.ffn_${m}_exps.scale`)),
      arch,
    );
    for (const t of scales) {
      assert.deepEqual([t.dims, t.type, t.role], [[8], GGMLType.F32, 'expert_scale'], t.name);
      assert.deepEqual([centre(t) - amplitude(t, 0.1), centre(t) + amplitude(t, 2)], [0.5, 2]);
    }
    assert.equal(plan({ arch }).tensors.filter((t) => t.name.endsWith('.scale')).length, 0, `${arch}: none unless asked`);
  }
  // Drawn: every value in [0.5, 2), none repeated across experts and matrices.
  const dir = await mkdtemp(join(tmpdir(), 'expert-scales-'));
  try {
    const made = await makeModel(defaultConfig({ arch: 'qwen3moe', layers: 2, expertScales: true, seed: 3 }), join(dir, 'm.gguf'));
    const file = await readGGUFFile(made.path);
    const bytes = await readFile(made.path);
    const values = file.tensors
      .filter((t) => t.name.endsWith('_exps.scale'))
      .flatMap((t) => {
        const { start, end } = tensorDataRange(file, t);
        return [...new Float32Array(bytes.buffer.slice(bytes.byteOffset + start, bytes.byteOffset + end))];
      });
    assert.equal(values.length, 2 * 3 * 8);
    assert.ok(
      values.every((v) => v >= 0.5 && v < 2),
      `${values}`,
    );
    assert.equal(new Set(values).size, values.length);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  for (const arch of ['qwen2moe', 'deepseek2', 'gpt-oss', 'grok', 'step35'] as const) {
    const problems = validateConfig(defaultConfig({ arch, expertScales: true }));
    assert.ok(
      problems.some((s) => s.includes('--expert-scales')),
      `${arch}: ${problems.join('; ')}`,
    );
  }
});
