/**
 * planModel for gemma4 (tools/model-arch-gemma4.ts): the keys the pinned llama.cpp's loader reads
 * (src/models/gemma4.cpp load_arch_hparams, and the generic head sizes of llama-model.cpp) and every tensor of a layer
 * with its name, shape and type (load_arch_tensors). llama.cpp loading and running the file is
 * test/integration/llama-loads.test.ts; dispatching its experts, test/integration/expert-dispatch.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { amplitude } from '../../tools/make-model.ts';
import { GEMMA4_SLIDING_WINDOW, gemma4Full } from '../../tools/model-arch-gemma4.ts';
import { type MetaEntry, type ModelConfig, type ModelPlan, defaultConfig, planModel, validateConfig } from '../../tools/model-arch.ts';

const VOCAB = 300;

function plan(partial: Partial<ModelConfig> = {}): ModelPlan {
  return planModel(
    defaultConfig({
      arch: 'gemma4',
      layers: 3,
      nEmbd: 256,
      ff: 256,
      sharedFf: 512,
      nExpert: 8,
      nExpertUsed: 2,
      type: GGMLType.Q4_K,
      ...partial,
    }),
    VOCAB,
  );
}

function meta(p: ModelPlan): Record<string, MetaEntry['value']> {
  return Object.fromEntries(p.metadata.map((m) => [m.key, m.value]));
}

test('gemma4: windowed and full layers with their own head sizes and RoPE, no per-layer embeddings, every layer routed', () => {
  const p = plan();
  const m = meta(p);
  // 256 / 8 heads: windowed heads of 32, full heads of 64 (the real 256 and 512)
  assert.deepEqual([m['gemma4.attention.key_length'], m['gemma4.attention.value_length'], m['gemma4.rope.dimension_count']], [64, 64, 64]);
  assert.deepEqual(
    [m['gemma4.attention.key_length_swa'], m['gemma4.attention.value_length_swa'], m['gemma4.rope.dimension_count_swa']],
    [32, 32, 32],
  );
  assert.deepEqual(m['gemma4.attention.sliding_window_pattern'], [true, true, false], 'the last layer attends in full');
  assert.equal(m['gemma4.attention.sliding_window'], GEMMA4_SLIDING_WINDOW);
  assert.equal(m['gemma4.embedding_length_per_layer_input'], 0);
  assert.equal(m['gemma4.feed_forward_length'], 512, 'the dense FFN beside the experts');
  assert.equal(m['gemma4.expert_feed_forward_length'], 256);
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
  // 7 layers: every 6th and the last attend in full
  assert.deepEqual(
    Array.from({ length: 7 }, (_, il) => gemma4Full(il, 7)),
    [false, false, false, false, false, true, true],
  );
});

test('gemma4: each layer has the dense FFN, the router with its scale, the four FFN norms, fused gate/up experts and a down scale alone', () => {
  const p = plan();
  const t = new Map(p.tensors.map((x) => [x.name, x]));
  const shape = (name: string): [number[], GGMLType] | undefined => {
    const x = t.get(name);
    return x && [x.dims, x.type];
  };
  const Q = GGMLType.Q4_K;
  const F = GGMLType.F32;
  assert.deepEqual(shape('rope_freqs.weight'), [[32], F], 'one RoPE factor per rotated pair of a full head');
  assert.equal(t.get('token_embd.weight')?.role, 'embed_scaled');
  for (const [l, hd] of [
    [0, 32],
    [2, 64],
  ] as const) {
    const b = `blk.${l}`;
    assert.deepEqual(shape(`${b}.attn_q.weight`), [[256, hd * 8], Q]);
    assert.deepEqual(shape(`${b}.attn_output.weight`), [[hd * 8, 256], Q]);
    assert.deepEqual(shape(`${b}.attn_q_norm.weight`), [[hd], F]);
    assert.deepEqual(shape(`${b}.ffn_gate.weight`), [[256, 512], Q]);
    assert.deepEqual(shape(`${b}.ffn_down.weight`), [[512, 256], Q]);
    assert.deepEqual(shape(`${b}.ffn_gate_inp.weight`), [[256, 8], F]);
    assert.deepEqual(shape(`${b}.ffn_gate_inp.scale`), [[256], F]);
    for (const n of ['post_attention_norm', 'ffn_norm', 'post_ffw_norm_1', 'pre_ffw_norm_2', 'post_ffw_norm_2', 'post_ffw_norm']) {
      assert.deepEqual(shape(`${b}.${n}.weight`), [[256], F], n);
    }
    assert.deepEqual(shape(`${b}.ffn_gate_up_exps.weight`), [[256, 512, 8], Q], 'fused: [n_embd, 2·ff, n_expert]');
    assert.deepEqual(shape(`${b}.ffn_down_exps.weight`), [[256, 256, 8], Q]);
    assert.deepEqual(shape(`${b}.ffn_down_exps.scale`), [[8], F]);
    assert.equal(t.get(`${b}.ffn_down_exps.scale`)?.role, 'expert_scale');
    for (const absent of ['ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_gate_exps.scale', 'ffn_up_exps.scale']) {
      assert.ok(!t.has(`${b}.${absent}`), `${b}: no ${absent}`);
    }
  }
  // The embeddings are drawn √n_embd smaller: unit variance once the graph scales them by √n_embd.
  const embd = t.get('token_embd.weight');
  assert.ok(embd);
  assert.ok(Math.abs(amplitude(embd, 2) * Math.sqrt(256) - Math.sqrt(3)) < 1e-12);
});

test('gemma4: fewer than 2 layers refused (a windowed layer, then a full one)', () => {
  const problems = validateConfig(defaultConfig({ arch: 'gemma4', layers: 1 }));
  assert.ok(
    problems.some((p) => p.includes('gemma4: --layers must be at least 2')),
    problems.join('; '),
  );
  assert.throws(() => plan({ layers: 1 }), /at least 2/);
  assert.deepEqual(validateConfig(defaultConfig({ arch: 'gemma4', layers: 2 })), []);
});
