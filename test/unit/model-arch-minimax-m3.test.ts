/**
 * planModel for minimax-m3 (tools/model-arch-minimax-m3.ts): the keys the pinned llama.cpp's loader requires
 * (src/models/minimax-m3.cpp load_arch_hparams) and every tensor of a dense and a routed layer with its name, shape and
 * type (load_arch_tensors). llama.cpp loading and running the file is test/integration/llama-loads.test.ts; dispatching
 * its experts, test/integration/expert-dispatch.test.ts and families-e2e.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { MINIMAX_M3_MSA } from '../../tools/model-arch-minimax-m3.ts';
import {
  type MetaEntry,
  type ModelConfig,
  type ModelPlan,
  defaultConfig,
  planModel,
  routingOf,
  validateConfig,
} from '../../tools/model-arch.ts';

const VOCAB = 300;

function plan(partial: Partial<ModelConfig> = {}): ModelPlan {
  return planModel(
    defaultConfig({
      arch: 'minimax-m3',
      layers: 3,
      nEmbd: 256,
      ff: 256,
      sharedFf: 512,
      nExpert: 8,
      nExpertUsed: 2,
      nHead: 8,
      nHeadKv: 4,
      type: GGMLType.Q4_K,
      ...partial,
    }),
    VOCAB,
  );
}

function meta(p: ModelPlan): Record<string, MetaEntry['value']> {
  return Object.fromEntries(p.metadata.map((m) => [m.key, m.value]));
}

function layer(p: ModelPlan, il: number): Array<[string, number[], string]> {
  return p.tensors
    .filter((t) => t.name.startsWith(`blk.${il}.`))
    .map((t) => [t.name.slice(`blk.${il}.`.length), t.dims, GGMLType[t.type] as string]);
}

test('minimax-m3: the keys its loader requires — shared experts in units of ff, a sigmoid router normalised and scaled, the sparse attention one indexer head per KV head', () => {
  const p = plan();
  const m = meta(p);
  assert.deepEqual(
    {
      dense: m['minimax-m3.leading_dense_block_count'],
      ff: m['minimax-m3.feed_forward_length'],
      ffExp: m['minimax-m3.expert_feed_forward_length'],
      shared: m['minimax-m3.expert_shared_count'],
      gating: m['minimax-m3.expert_gating_func'],
      norm: m['minimax-m3.expert_weights_norm'],
      scale: m['minimax-m3.expert_weights_scale'],
      rope: m['minimax-m3.rope.dimension_count'],
      kv: m['minimax-m3.attention.head_count_kv'],
      idxHeads: m['minimax-m3.attention.indexer.head_count'],
      idxLength: m['minimax-m3.attention.indexer.key_length'],
      topK: m['minimax-m3.attention.indexer.top_k'],
      block: m['minimax-m3.attention.indexer.block_size'],
      local: m['minimax-m3.attention.indexer.local_blocks'],
    },
    {
      dense: 1,
      ff: 512,
      ffExp: 256,
      shared: 2,
      gating: 2,
      norm: true,
      scale: 2,
      // half of each 32-wide head rotated
      rope: 16,
      kv: 4,
      idxHeads: 4,
      idxLength: 32,
      topK: MINIMAX_M3_MSA.topK,
      block: MINIMAX_M3_MSA.blockSize,
      local: MINIMAX_M3_MSA.localBlocks,
    },
  );
  assert.deepEqual(routingOf('minimax-m3'), { gating: 2, probsBias: true, norm: true, scale: 2 });
  assert.deepEqual(p.moeLayers, [1, 2], 'layer 0 dense');
});

test('minimax-m3: a dense layer (SwiGLU-OAI FFN of feed_forward_length), then routed layers with split experts and no expert biases, shared experts, the MSA indexer in F32', () => {
  const p = plan();
  const attention: Array<[string, number[], string]> = [
    ['attn_norm.weight', [256], 'F32'],
    ['attn_q.weight', [256, 256], 'Q4_K'],
    ['attn_k.weight', [256, 128], 'Q4_K'],
    ['attn_v.weight', [256, 128], 'Q4_K'],
    ['attn_output.weight', [256, 256], 'Q4_K'],
    ['attn_q_norm.weight', [32], 'F32'],
    ['attn_k_norm.weight', [32], 'F32'],
    ['ffn_norm.weight', [256], 'F32'],
  ];
  assert.deepEqual(layer(p, 0), [
    ...attention,
    ['ffn_gate.weight', [256, 512], 'Q4_K'],
    ['ffn_up.weight', [256, 512], 'Q4_K'],
    ['ffn_down.weight', [512, 256], 'Q4_K'],
  ]);
  assert.deepEqual(layer(p, 1), [
    ...attention,
    ['ffn_gate_inp.weight', [256, 8], 'F32'],
    ['exp_probs_b.bias', [8], 'F32'],
    ['ffn_gate_exps.weight', [256, 256, 8], 'Q4_K'],
    ['ffn_down_exps.weight', [256, 256, 8], 'Q4_K'],
    ['ffn_up_exps.weight', [256, 256, 8], 'Q4_K'],
    ['ffn_gate_shexp.weight', [256, 512], 'Q4_K'],
    ['ffn_down_shexp.weight', [512, 256], 'Q4_K'],
    ['ffn_up_shexp.weight', [256, 512], 'Q4_K'],
    ['indexer.q_proj.weight', [256, 128], 'F32'],
    ['indexer.k_proj.weight', [256, 32], 'F32'],
    ['indexer.q_norm.weight', [32], 'F32'],
    ['indexer.k_norm.weight', [32], 'F32'],
  ]);
  assert.ok(!p.tensors.some((t) => t.name.includes('_exps.bias') || t.name.includes('_exps.scale')), 'no expert biases or scales');
});

test('minimax-m3: validateConfig refuses shared experts not a whole number of routed ones and head sizes that cannot rotate half in pairs', () => {
  const problems = (partial: Partial<ModelConfig>): string[] =>
    validateConfig(defaultConfig({ arch: 'minimax-m3', layers: 3, nEmbd: 64, ff: 64, sharedFf: 64, ...partial }));
  assert.deepEqual(problems({}), []);
  assert.match(problems({ sharedFf: 96 }).join('; '), /--shared-ff \(96\) must be a multiple of --ff \(64\)/);
  assert.match(problems({ nEmbd: 72, ff: 72, sharedFf: 72, nHead: 4, nHeadKv: 4 }).join('; '), /head size 18 must be a multiple of 4/);
  assert.match(problems({ expertScales: true }).join('; '), /--expert-scales: only .* not minimax-m3/);
  assert.deepEqual(problems({ denseLeading: 0 }), [], 'no dense layer is allowed too');
});
