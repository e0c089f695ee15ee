/**
 * The plans of the hybrid families (tools/model-arch-hybrid.ts) against what the pinned llama.cpp loader reads and
 * creates (src/models/qwen3next.cpp, qwen35moe.cpp): the keys and their values, which layers are gated delta nets,
 * every tensor's name, shape and type; config checks; and make-model.ts's draw of the decay and dt-bias vectors.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ARCHITECTURES, defaultConfig, planModel, validateConfig, type MetaEntry, type ModelPlan } from '../../tools/model-arch.ts';
import {
  FULL_ATTENTION_INTERVAL,
  HYBRID_ARCHITECTURES,
  HYBRID_FILL,
  SSM_CONV_KERNEL,
  hybridShape,
  isHybridArch,
} from '../../tools/model-arch-hybrid.ts';
import { makeModel } from '../../tools/make-model.ts';
import { GGMLType } from '../../gguf/quant-types.ts';
import { openFileSource } from '../../gguf/node-io.ts';
import { readGGUF } from '../../gguf/reader.ts';
import { dequantize } from '../../gguf/dequantize.ts';
import { GGUFValueType, metaArray } from '../../gguf/types.ts';

const VOCAB = 300;

function meta(plan: ModelPlan): Map<string, MetaEntry['value']> {
  return new Map(plan.metadata.map((m) => [m.key, m.value]));
}

function tensors(plan: ModelPlan): Map<string, { dims: number[]; type: GGMLType }> {
  return new Map(plan.tensors.map((t) => [t.name, { dims: t.dims, type: t.type }]));
}

test('both hybrid families are generator architectures, and only they are hybrid', () => {
  for (const a of HYBRID_ARCHITECTURES) assert.ok((ARCHITECTURES as readonly string[]).includes(a), a);
  assert.deepEqual(
    ARCHITECTURES.filter((a) => isHybridArch(a)),
    ['qwen3next', 'qwen35moe'],
  );
});

for (const arch of HYBRID_ARCHITECTURES) {
  test(`${arch}: the keys llama.cpp reads, with the widths the tensors are made from`, () => {
    const c = defaultConfig({ arch, layers: 3, nEmbd: 64, ff: 32, sharedFf: 48, nExpert: 8, nExpertUsed: 2 });
    const m = meta(planModel(c, VOCAB));
    const want: Record<string, MetaEntry['value']> = {
      'general.architecture': arch,
      [`${arch}.block_count`]: 3,
      [`${arch}.embedding_length`]: 64,
      [`${arch}.attention.head_count`]: 2,
      [`${arch}.attention.head_count_kv`]: 2,
      [`${arch}.attention.key_length`]: 32,
      [`${arch}.attention.value_length`]: 32,
      [`${arch}.rope.dimension_count`]: 16,
      [`${arch}.expert_count`]: 8,
      [`${arch}.expert_used_count`]: 2,
      [`${arch}.expert_feed_forward_length`]: 32,
      [`${arch}.expert_shared_feed_forward_length`]: 48,
      [`${arch}.ssm.conv_kernel`]: SSM_CONV_KERNEL,
      [`${arch}.ssm.state_size`]: 32,
      [`${arch}.ssm.group_count`]: 1,
      [`${arch}.ssm.time_step_rank`]: 2,
      [`${arch}.ssm.inner_size`]: 64,
      [`${arch}.full_attention_interval`]: FULL_ATTENTION_INTERVAL,
      [`${arch}.vocab_size`]: VOCAB,
    };
    for (const [k, v] of Object.entries(want)) assert.deepEqual(m.get(k), v, k);
    assert.ok(m.has(`${arch}.attention.layer_norm_rms_epsilon`));
    // qwen35moe's rope is multi-axis (IMROPE): the 8 rotated pairs over time, height, width.
    if (arch === 'qwen35moe') assert.deepEqual(m.get(`${arch}.rope.dimension_sections`), [3, 3, 2, 0]);
    else assert.equal(m.has(`${arch}.rope.dimension_sections`), false);
    // No MTP layers (nextn_predict_layers) and no explicit recurrent-layer list: the interval decides.
    assert.equal(m.has(`${arch}.nextn_predict_layers`), false);
    assert.equal(m.has(`${arch}.attention.recurrent_layers`), false);
  });

  test(`${arch}: gated delta nets and attention layers as llama.cpp's (i + 1) % interval rule makes them, every layer routed`, () => {
    const c = defaultConfig({ arch, layers: 5, nEmbd: 64, ff: 64 });
    const plan = planModel(c, VOCAB);
    assert.deepEqual(hybridShape(c).recurrent, [true, false, true, false, true]);
    assert.deepEqual(plan.moeLayers, [0, 1, 2, 3, 4]);
    const names = new Set(plan.tensors.map((t) => t.name));
    for (let i = 0; i < 5; i++) {
      const recurrent = (i + 1) % FULL_ATTENTION_INTERVAL !== 0;
      assert.equal(names.has(`blk.${i}.ssm_conv1d.weight`), recurrent, `layer ${i} delta net`);
      assert.equal(names.has(`blk.${i}.attn_q.weight`), !recurrent, `layer ${i} attention`);
      assert.ok(names.has(`blk.${i}.post_attention_norm.weight`) && !names.has(`blk.${i}.ffn_norm.weight`), `layer ${i} FFN norm`);
    }
  });

  test(`${arch} Q4_K: every tensor's name, shape and type`, () => {
    // n_embd 256, 8 heads of 32: 4 key heads, 8 value heads; key dim 128, value dim 256, conv channels 512.
    const c = defaultConfig({ arch, layers: 2, nEmbd: 256, ff: 256, sharedFf: 256, nExpert: 4, nExpertUsed: 2, type: GGMLType.Q4_K });
    const s = hybridShape(c);
    assert.deepEqual(
      { headDim: s.headDim, groupCount: s.groupCount, timeStepRank: s.timeStepRank, keyDim: s.keyDim, convDim: s.convDim },
      { headDim: 32, groupCount: 4, timeStepRank: 8, keyDim: 128, convDim: 512 },
    );
    const F = GGMLType.F32;
    const Q = GGMLType.Q4_K;
    const ba: Array<[string, number[], GGMLType]> =
      arch === 'qwen3next'
        ? [['blk.0.ssm_ba.weight', [256, 16], Q]]
        : [
            ['blk.0.ssm_beta.weight', [256, 8], Q],
            ['blk.0.ssm_alpha.weight', [256, 8], Q],
          ];
    const moe = (i: number): Array<[string, number[], GGMLType]> => [
      [`blk.${i}.post_attention_norm.weight`, [256], F],
      [`blk.${i}.ffn_gate_inp.weight`, [256, 4], F],
      [`blk.${i}.ffn_gate_exps.weight`, [256, 256, 4], Q],
      [`blk.${i}.ffn_up_exps.weight`, [256, 256, 4], Q],
      [`blk.${i}.ffn_down_exps.weight`, [256, 256, 4], Q],
      [`blk.${i}.ffn_gate_inp_shexp.weight`, [256], F],
      [`blk.${i}.ffn_gate_shexp.weight`, [256, 256], Q],
      [`blk.${i}.ffn_up_shexp.weight`, [256, 256], Q],
      [`blk.${i}.ffn_down_shexp.weight`, [256, 256], Q],
    ];
    const want: Array<[string, number[], GGMLType]> = [
      ['token_embd.weight', [256, VOCAB], Q],
      ['output_norm.weight', [256], F],
      ['output.weight', [256, VOCAB], Q],
      ['blk.0.attn_norm.weight', [256], F],
      ['blk.0.attn_qkv.weight', [256, 512], Q],
      ['blk.0.attn_gate.weight', [256, 256], Q],
      ['blk.0.ssm_conv1d.weight', [4, 512], F],
      ['blk.0.ssm_dt.bias', [8], F],
      ['blk.0.ssm_a', [8], F],
      ...ba,
      ['blk.0.ssm_norm.weight', [32], F],
      ['blk.0.ssm_out.weight', [256, 256], Q],
      ...moe(0),
      ['blk.1.attn_norm.weight', [256], F],
      // queries and their output gate: 2 × 32 per head
      ['blk.1.attn_q.weight', [256, 512], Q],
      ['blk.1.attn_k.weight', [256, 256], Q],
      ['blk.1.attn_v.weight', [256, 256], Q],
      ['blk.1.attn_output.weight', [256, 256], Q],
      ['blk.1.attn_q_norm.weight', [32], F],
      ['blk.1.attn_k_norm.weight', [32], F],
      ...moe(1),
    ];
    assert.deepEqual(
      planModel(c, VOCAB).tensors.map((t) => [t.name, t.dims, t.type]),
      want,
    );
  });

  test(`${arch}: the shapes follow llama.cpp's formulas for other widths and head counts`, () => {
    for (const [nEmbd, nHead, nHeadKv] of [
      [64, 2, 1],
      [128, 4, 2],
      [96, 3, 3],
    ] as const) {
      const c = defaultConfig({ arch, layers: 2, nEmbd, nHead, nHeadKv, ff: 32, sharedFf: 32 });
      const t = tensors(planModel(c, VOCAB));
      const m = meta(planModel(c, VOCAB));
      const dState = m.get(`${arch}.ssm.state_size`) as number;
      const nK = m.get(`${arch}.ssm.group_count`) as number;
      const nV = m.get(`${arch}.ssm.time_step_rank`) as number;
      const dInner = m.get(`${arch}.ssm.inner_size`) as number;
      const headK = m.get(`${arch}.attention.key_length`) as number;
      // load_arch_tensors: head_k_dim = head_v_dim = ssm_d_state; the graph's head_v_dim = d_inner / n_v_heads.
      assert.equal(dInner / nV, dState, `${nEmbd}/${nHead}: d_inner / time_step_rank = state_size`);
      assert.equal(nV % nK, 0, 'value heads a multiple of key heads');
      const keyDim = dState * nK;
      const valueDim = dState * nV;
      assert.deepEqual(t.get('blk.0.attn_qkv.weight')?.dims, [nEmbd, 2 * keyDim + valueDim]);
      assert.deepEqual(t.get('blk.0.attn_gate.weight')?.dims, [nEmbd, valueDim]);
      assert.deepEqual(t.get('blk.0.ssm_conv1d.weight')?.dims, [SSM_CONV_KERNEL, 2 * keyDim + valueDim]);
      assert.deepEqual(t.get('blk.0.ssm_out.weight')?.dims, [valueDim, nEmbd]);
      assert.deepEqual(t.get('blk.0.ssm_norm.weight')?.dims, [dState]);
      assert.deepEqual(t.get('blk.1.attn_q.weight')?.dims, [nEmbd, headK * nHead * 2]);
      assert.deepEqual(t.get('blk.1.attn_k.weight')?.dims, [nEmbd, headK * nHeadKv]);
      assert.deepEqual(t.get('blk.1.attn_output.weight')?.dims, [headK * nHead, nEmbd]);
      assert.equal((m.get(`${arch}.rope.dimension_count`) as number) % 2, 0, 'rotated dimensions come in pairs');
      if (arch === 'qwen35moe') {
        const sections = m.get(`${arch}.rope.dimension_sections`) as number[];
        assert.equal(
          sections.reduce((a, b) => a + b, 0),
          (m.get(`${arch}.rope.dimension_count`) as number) / 2,
          'the sections cover the rotated pairs',
        );
      }
    }
  });

  test(`${arch}: configs the families cannot take are refused, naming the problem`, () => {
    assert.deepEqual(validateConfig(defaultConfig({ arch, layers: 2 })), []);
    assert.match(validateConfig(defaultConfig({ arch, layers: 1 })).join('; '), /--layers must be at least 2/);
    // Half a head is rotated, in pairs: a head of 6 (n_embd 12, 2 heads) would rotate 3 dimensions.
    assert.match(validateConfig(defaultConfig({ arch, nEmbd: 12, nHead: 2 })).join('; '), /head size 6 must be a multiple of 4/);
    assert.throws(() => planModel(defaultConfig({ arch, layers: 1 }), VOCAB), RangeError);
  });
}

test('make-model draws the delta rule decay negative and the dt bias around 0 (HYBRID_FILL), norms as ones', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'es-hybrid-'));
  try {
    const path = join(dir, 'tiny.gguf');
    await makeModel(defaultConfig({ arch: 'qwen35moe', layers: 2, nEmbd: 64, nHead: 8, ff: 32, sharedFf: 32, nExpert: 4 }), path);
    const src = await openFileSource(path);
    try {
      const file = await readGGUF(src);
      assert.deepEqual(Array.from(metaArray(file, 'qwen35moe.rope.dimension_sections', GGUFValueType.INT32) ?? []), [1, 1, 0, 0]);
      const values = async (name: string): Promise<Float32Array> => {
        const t = file.tensors.find((x) => x.name === name);
        assert.ok(t, name);
        const n = t.dims.reduce((a, b) => a * b, 1);
        return dequantize(t.type, await src.read(file.dataOffset + t.offset, t.byteLength), n);
      };
      const a = await values('blk.0.ssm_a');
      const { centre: ac, amplitude: aa } = HYBRID_FILL.ssm_a;
      assert.equal(a.length, 8);
      assert.ok(
        a.every((x) => x >= ac - aa && x < ac + aa && x < 0),
        `ssm_a ${Array.from(a)}`,
      );
      assert.ok(new Set(a).size > 1, 'not one value repeated');
      const dt = await values('blk.0.ssm_dt.bias');
      const { centre: dc, amplitude: da } = HYBRID_FILL.ssm_dt;
      assert.ok(
        dt.every((x) => x >= dc - da && x < dc + da),
        `ssm_dt ${Array.from(dt)}`,
      );
      assert.ok((await values('blk.0.ssm_norm.weight')).every((x) => x === 1));
      // The convolution: unit-variance outputs for unit-variance inputs, |w| < √3 / √kernel.
      const conv = await values('blk.0.ssm_conv1d.weight');
      assert.ok(conv.every((x) => Math.abs(x) <= Math.sqrt(3) / Math.sqrt(SSM_CONV_KERNEL)));
      assert.ok(conv.some((x) => x < 0) && conv.some((x) => x > 0));
    } finally {
      await src.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
