/**
 * The plan of `deepseek4` (tools/model-arch-deepseek4.ts) against what the pinned llama.cpp loader reads and creates
 * (src/models/deepseek4.cpp: load_arch_hparams, load_arch_tensors): the required keys and their values, the
 * hyper-connection, attention, compressor/indexer, router and expert tensors with their shapes and types, the clamp
 * limits per layer, and the config checks.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ARCHITECTURES,
  defaultConfig,
  planModel,
  routingOf,
  validateConfig,
  type MetaEntry,
  type ModelPlan,
} from '../../tools/model-arch.ts';
import {
  DEEPSEEK4_CSA_RATIO,
  DEEPSEEK4_HC,
  DEEPSEEK4_INDEXER,
  DEEPSEEK4_SLIDING_WINDOW,
  deepseek4SwigluLimits,
  expertIdTable,
} from '../../tools/model-arch-deepseek4.ts';
import { GGMLType } from '../../gguf/quant-types.ts';

const VOCAB = 300;

function meta(plan: ModelPlan): Map<string, MetaEntry['value']> {
  return new Map(plan.metadata.map((m) => [m.key, m.value]));
}

function tensors(plan: ModelPlan): Map<string, { dims: number[]; type: GGMLType }> {
  return new Map(plan.tensors.map((t) => [t.name, { dims: t.dims, type: t.type }]));
}

test('deepseek4 is a generator architecture with a sqrt-softplus router (gating 4), a selection bias, weights normalised and × 1.5', () => {
  assert.ok((ARCHITECTURES as readonly string[]).includes('deepseek4'));
  assert.deepEqual(routingOf('deepseek4'), { gating: 4, probsBias: true, norm: true, scale: 1.5 });
});

test('deepseek4: the keys the loader requires, with the widths the tensors are made from; every layer clamped at its own limit', () => {
  const c = defaultConfig({ arch: 'deepseek4', layers: 3, nEmbd: 64, ff: 32, sharedFf: 64, nExpert: 8, nExpertUsed: 2 });
  const m = meta(planModel(c, VOCAB));
  const want: Record<string, MetaEntry['value']> = {
    'general.architecture': 'deepseek4',
    'deepseek4.block_count': 3,
    'deepseek4.embedding_length': 64,
    'deepseek4.attention.head_count': 2,
    'deepseek4.attention.head_count_kv': 1,
    'deepseek4.attention.key_length': 32,
    'deepseek4.attention.value_length': 32,
    'deepseek4.rope.dimension_count': 16,
    'deepseek4.attention.q_lora_rank': 32,
    'deepseek4.attention.sliding_window': DEEPSEEK4_SLIDING_WINDOW,
    'deepseek4.attention.output_group_count': 2,
    'deepseek4.attention.output_lora_rank': 32,
    'deepseek4.attention.compress_ratios': [0, DEEPSEEK4_CSA_RATIO, 0],
    'deepseek4.attention.indexer.head_count': DEEPSEEK4_INDEXER.heads,
    'deepseek4.attention.indexer.key_length': 64,
    'deepseek4.attention.indexer.top_k': DEEPSEEK4_INDEXER.topK,
    'deepseek4.expert_count': 8,
    'deepseek4.expert_used_count': 2,
    'deepseek4.expert_feed_forward_length': 32,
    'deepseek4.expert_shared_count': 2,
    'deepseek4.expert_gating_func': 4,
    'deepseek4.expert_weights_norm': true,
    'deepseek4.expert_weights_scale': 1.5,
    'deepseek4.swiglu_clamp_exp': [1.5, 1.75, 2],
    'deepseek4.hyper_connection.count': DEEPSEEK4_HC,
    'deepseek4.hash_layer_count': 0,
    'deepseek4.vocab_size': VOCAB,
  };
  for (const [k, v] of Object.entries(want)) assert.deepEqual(m.get(k), v, k);
  for (const k of ['compress_rope_freq_base', 'hyper_connection.sinkhorn_iterations', 'hyper_connection.epsilon']) {
    assert.ok(m.has(`deepseek4.${k}`) || m.has(`deepseek4.attention.${k}`), k);
  }
  // The shared experts take the routed limits (no swiglu_clamp_shexp); no MTP layer.
  assert.ok(!m.has('deepseek4.swiglu_clamp_shexp') && !m.has('deepseek4.nextn_predict_layers'));
  assert.deepEqual(deepseek4SwigluLimits(4), [1.5, 1.75, 2, 1.5]);
  assert.ok(
    deepseek4SwigluLimits(6).every((l) => l > 1e-6),
    'every layer clamped',
  );
});

test('deepseek4: every layer routed; hyper-connection mixers, compressed query, one shared key/value head, grouped output, compressor and indexer in the odd layers; F32 vectors, router and mixers', () => {
  const c = defaultConfig({ arch: 'deepseek4', layers: 3, nEmbd: 64, ff: 32, sharedFf: 64, nExpert: 8, nExpertUsed: 2 });
  const p = planModel(c, VOCAB);
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
  const t = tensors(p);
  const F32 = GGMLType.F32;
  const want: Record<string, number[]> = {
    'output_hc_fn.weight': [256, 4],
    'output_hc_base.weight': [4],
    'output_hc_scale.weight': [1],
    'blk.0.attn_sinks.weight': [2],
    'blk.0.attn_q_a.weight': [64, 32],
    'blk.0.attn_q_a_norm.weight': [32],
    'blk.0.attn_q_b.weight': [32, 64],
    'blk.0.attn_kv.weight': [64, 32],
    'blk.0.attn_kv_a_norm.weight': [32],
    'blk.0.attn_output_a.weight': [32, 64],
    'blk.0.attn_output_b.weight': [64, 64],
    'blk.0.hc_attn_fn.weight': [256, 24],
    'blk.0.hc_attn_base.weight': [24],
    'blk.0.hc_attn_scale.weight': [3],
    'blk.0.hc_ffn_fn.weight': [256, 24],
    'blk.1.attn_compressor_kv.weight': [64, 64],
    'blk.1.attn_compressor_gate.weight': [64, 64],
    'blk.1.attn_compressor_ape.weight': [64, 4],
    'blk.1.attn_compressor_norm.weight': [32],
    'blk.1.indexer.proj.weight': [64, 2],
    'blk.1.indexer.attn_q_b.weight': [32, 128],
    'blk.1.indexer_compressor_kv.weight': [64, 128],
    'blk.1.indexer_compressor_ape.weight': [128, 4],
    'blk.1.indexer_compressor_norm.weight': [64],
    'blk.2.ffn_gate_inp.weight': [64, 8],
    'blk.2.exp_probs_b.bias': [8],
    'blk.2.ffn_norm.weight': [64],
    'blk.2.ffn_gate_exps.weight': [64, 32, 8],
    'blk.2.ffn_up_exps.weight': [64, 32, 8],
    'blk.2.ffn_down_exps.weight': [32, 64, 8],
    'blk.2.ffn_gate_shexp.weight': [64, 64],
    'blk.2.ffn_down_shexp.weight': [64, 64],
  };
  for (const [name, dims] of Object.entries(want)) assert.deepEqual(t.get(name)?.dims, dims, name);
  assert.ok(!t.has('blk.0.attn_compressor_kv.weight') && !t.has('blk.2.indexer.proj.weight'), 'no compressor in ratio-0 layers');
  assert.ok(![...t.keys()].some((n) => /tid2eid|nextn|ffn_(gate|up|down)\.weight/.test(n)), 'no hash layer, MTP or dense FFN');
  for (const name of ['output_hc_fn.weight', 'blk.0.hc_attn_fn.weight', 'blk.0.attn_sinks.weight', 'blk.1.attn_compressor_ape.weight']) {
    assert.equal(t.get(name)?.type, F32, name);
  }

  // At Q4_K (width 256): the experts Q4_K, rows that are not whole super-blocks fall back (128 → Q5_0), mixers F32.
  const q = tensors(
    planModel(defaultConfig({ arch: 'deepseek4', layers: 2, nEmbd: 256, ff: 256, sharedFf: 256, type: GGMLType.Q4_K }), VOCAB),
  );
  assert.equal(q.get('blk.0.ffn_up_exps.weight')?.type, GGMLType.Q4_K);
  assert.equal(q.get('blk.0.attn_q_b.weight')?.type, GGMLType.Q5_0);
  assert.equal(q.get('blk.0.hc_ffn_fn.weight')?.type, F32);
});

test('deepseek4: validateConfig names the wrong number', () => {
  const base = { arch: 'deepseek4' as const, layers: 3, nEmbd: 64, ff: 32, sharedFf: 64 };
  const cases: Array<[Parameters<typeof defaultConfig>[0], RegExp]> = [
    [{ ...base, sharedFf: 48 }, /shared-ff \(48\) must be a multiple of --ff/],
    [{ ...base, nHead: 32 }, /head size 2 must be a multiple of 4/],
    [{ ...base, swigluLimits: [] }, /0 clamp limits for 3 layers/],
    [{ ...base, swigluLimits: [1, 2] }, /2 limits for 3 layers/],
  ];
  for (const [partial, want] of cases) {
    const problems = validateConfig(defaultConfig(partial));
    assert.ok(
      problems.some((p) => want.test(p)),
      `${JSON.stringify(partial)}: ${problems.join('; ')}`,
    );
  }
  assert.deepEqual(validateConfig(defaultConfig(base)), []);
  // The limits are deepseek4's and step35's only.
  assert.ok(
    validateConfig(defaultConfig({ arch: 'qwen3moe', swigluLimits: [1, 1] })).some((p) => /only step35, bailingmoe3 and deepseek4/.test(p)),
  );
});

test('deepseek4 with hash layers: the first layers take an I32 table of distinct expert ids per token instead of a selection bias', () => {
  const c = defaultConfig({ arch: 'deepseek4', layers: 3, nEmbd: 64, nHead: 2, ff: 64, sharedFf: 64, hashLayers: 2 });
  const plan = planModel(c, VOCAB);
  assert.equal(meta(plan).get('deepseek4.hash_layer_count'), 2);
  const t = tensors(plan);
  for (const il of [0, 1]) {
    assert.deepEqual(t.get(`blk.${il}.ffn_gate_tid2eid.weight`), { dims: [c.nExpertUsed, VOCAB], type: GGMLType.I32 }, `layer ${il}`);
    assert.equal(t.get(`blk.${il}.exp_probs_b.bias`), undefined, `layer ${il} has no selection bias`);
  }
  assert.equal(t.get('blk.2.ffn_gate_tid2eid.weight'), undefined);
  assert.ok(t.get('blk.2.exp_probs_b.bias'));
  assert.deepEqual(plan.moeLayers, [0, 1, 2]);
  // The table: each token's ids distinct and in range, and the tokens spread over every expert.
  const table = plan.tensors.find((x) => x.name === 'blk.0.ffn_gate_tid2eid.weight');
  const ids = new Int32Array(expertIdTable(table as NonNullable<typeof table>, c).buffer.slice(0));
  assert.equal(ids.length, c.nExpertUsed * VOCAB);
  for (let tok = 0; tok < VOCAB; tok++) {
    const row = Array.from(ids.subarray(tok * c.nExpertUsed, (tok + 1) * c.nExpertUsed));
    assert.equal(new Set(row).size, row.length, `token ${tok}: ${row}`);
    assert.ok(
      row.every((e) => e >= 0 && e < c.nExpert),
      `token ${tok}: ${row}`,
    );
  }
  assert.equal(new Set(ids).size, c.nExpert);
  assert.match(validateConfig({ ...c, hashLayers: 4 }).join(), /hash layers \(4\) must be an integer in \[0, 3\]/);
  assert.match(validateConfig(defaultConfig({ arch: 'qwen3moe', hashLayers: 1 })).join(), /only deepseek4 routes layers by token id/);
});
