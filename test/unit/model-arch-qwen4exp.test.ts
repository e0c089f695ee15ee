/**
 * The plan of `qwen4exp` (tools/model-arch-qwen4exp.ts) against what the pinned llama.cpp loader reads and creates
 * (src/models/qwen4exp.cpp: load_arch_hparams, load_arch_tensors): the required keys, the low-rank hyper-connection
 * mixers in place of norms, the delta-net and attention layers with the attention layers' indexer, routed experts
 * with a gated shared expert in every layer, and the config checks.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { ARCHITECTURES, defaultConfig, planModel, validateConfig, type ModelPlan } from '../../tools/model-arch.ts';
import { UNGENERATED } from '../../tools/model-arch-kin.ts';
import { QWEN4EXP_HC, QWEN4EXP_HC_LOW_RANK, QWEN4EXP_INDEXER } from '../../tools/model-arch-qwen4exp.ts';

const VOCAB = 300;

function plan(type = GGMLType.F32, width = 64): ModelPlan {
  return planModel(
    defaultConfig({ arch: 'qwen4exp', layers: 3, nEmbd: width, ff: width, sharedFf: width, nExpert: 8, nExpertUsed: 2, type }),
    VOCAB,
  );
}

test('qwen4exp is generated, no longer refused', () => {
  assert.ok((ARCHITECTURES as readonly string[]).includes('qwen4exp'));
  assert.equal(UNGENERATED.qwen4exp, undefined);
});

test('qwen4exp: the keys the loader requires (ssm widths, sections, hyper-connections, indexer, compress ratios on attention layers)', () => {
  const m = new Map(plan().metadata.map((e) => [e.key, e.value]));
  for (const k of ['conv_kernel', 'state_size', 'group_count', 'time_step_rank', 'inner_size']) {
    assert.ok((m.get(`qwen4exp.ssm.${k}`) as number) > 0, k);
  }
  assert.equal(m.get('qwen4exp.rope.dimension_sections')?.toString(), '3,3,2,0');
  assert.equal(m.get('qwen4exp.hyper_connection.count'), QWEN4EXP_HC);
  assert.ok(QWEN4EXP_HC > 1, 'the loader refuses a single stream');
  assert.equal(m.get('qwen4exp.hyper_connection.low_rank'), QWEN4EXP_HC_LOW_RANK);
  assert.equal(m.get('qwen4exp.attention.indexer.key_length'), QWEN4EXP_INDEXER.headDim);
  assert.deepEqual(m.get('qwen4exp.attention.compress_ratios'), [0, QWEN4EXP_INDEXER.ratio, 0]);
  assert.equal(m.get('qwen4exp.full_attention_interval'), 2);
});

test('qwen4exp: mixers instead of norms, delta nets in layers 0 and 2, gated attention with its indexer in layer 1, every layer routed', () => {
  const p = plan();
  const dims = (n: string): number[] | undefined => p.tensors.find((t) => t.name === n)?.dims;
  const names = (l: number): string[] =>
    p.tensors.filter((t) => t.name.startsWith(`blk.${l}.`)).map((t) => t.name.slice(`blk.${l}.`.length));
  assert.deepEqual(p.moeLayers, [0, 1, 2]);
  // No output_norm and no attn_norm: the hyper-connection mixers carry them.
  assert.ok(!p.tensors.some((t) => /^output_norm|\.attn_norm|post_attention_norm/.test(t.name)));
  assert.deepEqual(dims('output_hc_down.weight'), [2 * 64, QWEN4EXP_HC_LOW_RANK]);
  assert.deepEqual(dims('blk.1.hc_ffn_inject.weight'), [2 * 64, QWEN4EXP_HC]);
  for (const n of ['attn_qkv.weight', 'attn_gate.weight', 'ssm_beta.weight', 'ssm_alpha.weight', 'ssm_a', 'ssm_out.weight']) {
    assert.ok(names(0).includes(n) && names(2).includes(n) && !names(1).includes(n), n);
  }
  // The query projection is twice as wide: its second half gates the attention output.
  assert.deepEqual(dims('blk.1.attn_q.weight'), [64, 2 * 64]);
  assert.deepEqual(dims('blk.1.indexer.q_proj.weight'), [64, QWEN4EXP_INDEXER.heads * QWEN4EXP_INDEXER.headDim]);
  assert.ok(!names(0).includes('indexer.k_proj.weight'));
  for (const l of [0, 1, 2]) {
    for (const n of ['ffn_gate_inp.weight', 'ffn_up_exps.weight', 'ffn_gate_inp_shexp.weight', 'ffn_down_shexp.weight']) {
      assert.ok(names(l).includes(n), `layer ${l}: ${n}`);
    }
  }
  // Experts at the requested type; mixers, vectors, decay F32.
  const q = plan(GGMLType.Q4_K, 256);
  for (const t of q.tensors) {
    if (/ffn_(gate|up|down)_exps\.weight$/.test(t.name)) assert.equal(t.type, GGMLType.Q4_K, t.name);
    if (t.dims.length === 1 || /hc_/.test(t.name)) assert.equal(t.type, GGMLType.F32, t.name);
  }
});

test('qwen4exp: validateConfig names the wrong number', () => {
  assert.match(validateConfig(defaultConfig({ arch: 'qwen4exp', layers: 1 })).join(), /--layers must be at least 2/);
  assert.match(
    validateConfig(defaultConfig({ arch: 'qwen4exp', nEmbd: 256, nHead: 1, nHeadKv: 1 })).join(),
    /qwen4exp: head size 256 rotates more than the indexer's 64-wide heads hold/,
  );
});
