/**
 * llama.cpp (our linkcpp-server build) loads every generated architecture × the quant types in TYPES (the ones the
 * kernels read; q4_1, q5_0 and q5_1 are left to quant-vs-llama) and generates tokens. The first five architectures go
 * through all of TYPES; the later families (deepseek2, glm4moe, minimax-m2, ...) through FAMILY_TYPES, a float, a
 * block quant and a K-quant: what differs between families is the loader and the graph, not the quantisation.
 * gpt-oss also has a test of its own: llama.cpp reads its expert biases and attention sinks (zeroing them moves the
 * logits); so do the second-wave expert variants: grok's GELU-gated experts beside a dense FFN (the expert branch is
 * loud), qwen3moe's per-expert scale tensors (set to 1, they move the logits), step35's clamped SwiGLU (raised out
 * of reach, its per-layer limits move the logits) and gemma4's fused experts with a down scale alone (set to 1, it
 * moves the logits).
 * Runs one server at a time: on a 2-core machine parallel servers only slow each other down.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFile, mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TOP2_OF_8, testModel } from '../../harness/models.ts';
import { type Completion, completeGreedy, startServer } from '../../harness/linkcpp.ts';
import { logitDistances } from '../../harness/dispatch-checks.ts';
import {
  ARCHITECTURES,
  EXPERT_SCALE_ARCHS,
  GPT_OSS_SLIDING_WINDOW,
  type ModelConfig,
  STEP35_SLIDING_WINDOW,
  defaultSwigluLimits,
  planModel,
} from '../../tools/model-arch.ts';
import { deepseek4SwigluLimits } from '../../tools/model-arch-deepseek4.ts';
import { isKinArch } from '../../tools/model-arch-kin.ts';
import { GGMLType } from '../../gguf/quant-types.ts';
import { readGGUFFile } from '../../gguf/node-io.ts';
import { requireMetaStringArray, tensorDataRange } from '../../gguf/types.ts';

const TYPES = [
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_K,
  GGMLType.Q5_K,
  GGMLType.Q6_K,
  GGMLType.MXFP4,
  GGMLType.IQ4_NL,
];
const FAMILY_TYPES = [GGMLType.F32, GGMLType.Q8_0, GGMLType.Q4_K];
const FIRST_FIVE: readonly string[] = ['qwen3moe', 'qwen2moe', 'deepseek', 'llama', 'olmoe'];

for (const arch of ARCHITECTURES) {
  // The kin families (model-arch-kin.ts) and qwen4exp at Q8_0 only: the grid (expert-dispatch.test.ts) loads them at Q4_K.
  for (const type of FIRST_FIVE.includes(arch) ? TYPES : isKinArch(arch) || arch === 'qwen4exp' ? [GGMLType.Q8_0] : FAMILY_TYPES) {
    test(`llama.cpp loads and runs ${arch} ${GGMLType[type]}`, async () => {
      // K-quants need rows that are whole 256-element super-blocks.
      const width = type >= GGMLType.Q2_K && type <= GGMLType.Q6_K ? 256 : 64;
      const model = await testModel({
        arch,
        // llama4: one full-attention layer in every 4 (the generator refuses fewer)
        layers: arch === 'llama4' ? 4 : 3,
        nEmbd: width,
        ff: width,
        sharedFf: width,
        nExpert: 8,
        nExpertUsed: 2,
        type,
        seed: 11,
      });
      const file = await readGGUFFile(model.path);
      // gemma4: gate and up fused (ffn_gate_up_exps)
      const expertTensor = file.tensors.find((t) => /ffn_(gate_)?up_exps\.weight$/.test(t.name));
      assert.equal(expertTensor?.type, type, 'expert tensors carry the requested type');
      // The file holds the plan's tensors (dense leading layers: a dense FFN, no experts).
      const plan = planModel(model.config, requireMetaStringArray(file, 'tokenizer.ggml.tokens').length);
      assert.deepEqual(
        file.tensors.map((t) => t.name),
        plan.tensors.map((t) => t.name),
      );
      for (let l = 0; l < model.config.layers; l++) {
        const routed = plan.moeLayers.includes(l);
        assert.equal(
          file.tensors.some((t) => t.name === `blk.${l}.ffn_up_exps.weight` || t.name === `blk.${l}.ffn_gate_up_exps.weight`),
          routed,
          `layer ${l} routed: ${routed}`,
        );
        // grok, gemma4, arctic: a dense FFN beside the experts in every layer
        const dense = !routed || arch === 'grok' || arch === 'gemma4' || arch === 'arctic';
        assert.equal(
          file.tensors.some((t) => t.name === `blk.${l}.ffn_up.weight`),
          dense,
          `layer ${l} dense: ${dense}`,
        );
      }
      if (arch === 'deepseek' || arch === 'deepseek2' || arch === 'glm4moe') assert.deepEqual(plan.moeLayers, [1, 2], 'layer 0 is dense');

      const server = await startServer({ model: model.path });
      try {
        const out = await completeGreedy(server.url, 'The swarm serves', 8, model.ban);
        assert.equal(out.tokens.length, 8, 'eight tokens generated');
        const banned = new Set(model.ban);
        for (const id of out.tokens) {
          assert.ok(Number.isInteger(id) && id >= 0, `token id ${id}`);
          assert.ok(!banned.has(id), `banned token ${id} was sampled`);
        }
        // Same request again: greedy decoding of the same model is deterministic.
        const again = await completeGreedy(server.url, 'The swarm serves', 8, model.ban);
        assert.deepEqual(again.tokens, out.tokens);
        // The server describes the model it loaded: our vocabulary and width, not something else.
        const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ meta: Record<string, number> }> };
        const meta = models.data[0]?.meta;
        assert.equal(meta?.n_vocab, requireMetaStringArray(file, 'tokenizer.ggml.tokens').length);
        assert.equal(meta?.n_embd, width);
      } finally {
        await server.stop();
      }
    });
  }
}

test('llama.cpp loads and runs deepseek2 without query compression (q_lora_rank 0: one attn_q, as DeepSeek-V2-Lite)', async () => {
  const model = await testModel({
    arch: 'deepseek2',
    layers: 3,
    nEmbd: 64,
    ff: 64,
    sharedFf: 64,
    nExpert: 8,
    nExpertUsed: 2,
    qLoraRank: 0,
    seed: 11,
  });
  const file = await readGGUFFile(model.path);
  assert.ok(file.tensors.some((t) => t.name === 'blk.1.attn_q.weight'));
  assert.ok(!file.tensors.some((t) => t.name.includes('attn_q_a')));
  const server = await startServer({ model: model.path });
  try {
    const out = await completeGreedy(server.url, 'The swarm serves', 8, model.ban);
    assert.equal(out.tokens.length, 8, 'eight tokens generated');
  } finally {
    await server.stop();
  }
});

/** A copy of the model at `path`, in `dir`, with every tensor whose name ends with `suffix` filled with `value` (F32 only). */
async function filledCopy(path: string, suffix: string, value: number, dir: string): Promise<string> {
  const file = await readGGUFFile(path);
  const targets = file.tensors.filter((t) => t.name.endsWith(suffix));
  assert.ok(targets.length > 0, `the model has ${suffix} tensors`);
  const out = join(dir, `filled-${value}-${suffix}.gguf`);
  await copyFile(path, out);
  const h = await open(out, 'r+');
  try {
    for (const t of targets) {
      assert.equal(t.type, GGMLType.F32, `${t.name} is F32`);
      const { start, end } = tensorDataRange(file, t);
      const bytes = new Uint8Array(new Float32Array((end - start) / 4).fill(value).buffer);
      await h.write(bytes, 0, bytes.length, start);
    }
  } finally {
    await h.close();
  }
  return out;
}

const zeroedCopy = (path: string, suffix: string, dir: string): Promise<string> => filledCopy(path, suffix, 0, dir);

/** The loud expert branch (expert-scale 2) the dispatch tests use, on a small model of `arch`. */
function loudConfig(partial: Partial<ModelConfig> & Pick<ModelConfig, 'arch'>): Partial<ModelConfig> & Pick<ModelConfig, 'arch'> {
  return {
    layers: 3,
    nEmbd: 64,
    ff: 64,
    sharedFf: 64,
    nExpert: 8,
    nExpertUsed: 2,
    type: GGMLType.F32,
    seed: 11,
    expertScale: 2,
    ...partial,
  };
}

/** Greedy completion of `path` with every token's probability (to compare logits), 8 tokens past the windows. */
async function completeAll(path: string, ban: number[], nVocab: number): Promise<Completion> {
  const server = await startServer({ model: path });
  try {
    return await completeGreedy(server.url, 'The swarm serves', 8, ban, { n_probs: nVocab, post_sampling_probs: false });
  } finally {
    await server.stop();
  }
}

/** 1 − cos of the first generated position's logits of two completions (the same context on both sides). */
function firstDistance(want: Completion, got: Completion, nVocab: number): number {
  return logitDistances(want, got, nVocab)[0] ?? 0;
}

test('gpt-oss: llama.cpp reads its expert biases and attention sinks: zeroing the gate, up or down biases or the sinks moves the logits', async () => {
  // The loud expert branch (expert-scale 2) the dispatch tests use; all-probabilities completions to compare logits.
  const model = await testModel({ ...TOP2_OF_8, arch: 'gpt-oss', seed: 11 });
  const file = await readGGUFFile(model.path);
  const nVocab = requireMetaStringArray(file, 'tokenizer.ggml.tokens').length;
  const window = file.metadata.get('gpt-oss.attention.sliding_window');
  assert.equal(window?.value, GPT_OSS_SLIDING_WINDOW);
  const complete = async (path: string): Promise<Completion> => {
    const server = await startServer({ model: path });
    try {
      // 8 generated tokens after the prompt pass the window: the windowed layers attend to part of the context only.
      return await completeGreedy(server.url, 'The swarm serves', 8, model.ban, { n_probs: nVocab, post_sampling_probs: false });
    } finally {
      await server.stop();
    }
  };
  const want = await complete(model.path);
  assert.equal(want.tokens.length, 8);
  // 1 − cos of the first generated position's logits (the same context on both sides). Measured (seed 11): the
  // expert biases 0.23–0.70, the sinks 7e-3; the bounds leave a wide margin, and an unread tensor gives exactly 0.
  const cases: Array<[string, number]> = [
    ['ffn_gate_exps.bias', 0.05],
    ['ffn_up_exps.bias', 0.05],
    ['ffn_down_exps.bias', 0.05],
    ['attn_sinks.weight', 1e-3],
  ];
  const dir = await mkdtemp(join(tmpdir(), 'llama-loads-gpt-oss-'));
  try {
    for (const [suffix, bound] of cases) {
      const got = await complete(await zeroedCopy(model.path, suffix, dir));
      const first = logitDistances(want, got, nVocab)[0] ?? 0;
      assert.ok(first >= bound, `${suffix} zeroed: 1 − cos ${first.toExponential(2)} at the first position (want ≥ ${bound})`);
      assert.notDeepEqual(got.tokens, want.tokens, `${suffix} zeroed: the greedy tokens change`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('grok: llama.cpp runs its GELU-gated experts beside the dense FFN, loud: zeroing the expert gates (gelu(0) · up = 0) moves the logits', async () => {
  const model = await testModel(loudConfig({ arch: 'grok' }));
  const file = await readGGUFFile(model.path);
  const nVocab = requireMetaStringArray(file, 'tokenizer.ggml.tokens').length;
  assert.ok(file.tensors.some((t) => t.name === 'blk.2.ffn_up.weight') && file.tensors.some((t) => t.name === 'blk.2.ffn_up_exps.weight'));
  const want = await completeAll(model.path, model.ban, nVocab);
  assert.equal(want.tokens.length, 8);
  const dir = await mkdtemp(join(tmpdir(), 'llama-loads-grok-'));
  try {
    // Zero gates switch the routed branch off (GELU(0) = 0): the experts' share of each layer's normed FFN output.
    // Measured (seed 11): 1 − cos 0.34; a silent branch gives 0. (The activation itself cannot be swapped in the file:
    // this shows the branch loud enough that SiLU for GELU, about 20% apart on unit-variance gates, would show.)
    const got = await completeAll(await zeroedCopy(model.path, 'ffn_gate_exps.weight', dir), model.ban, nVocab);
    const d = firstDistance(want, got, nVocab);
    assert.ok(d >= 0.05, `expert gates zeroed: 1 − cos ${d.toExponential(2)} at the first position (want ≥ 0.05)`);
    assert.notDeepEqual(got.tokens, want.tokens, 'expert gates zeroed: the greedy tokens change');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('qwen3moe --expert-scales: llama.cpp reads the per-expert gate, up and down scales: setting either to 1 moves the logits', async () => {
  const model = await testModel(loudConfig({ arch: 'qwen3moe', expertScales: true }));
  const file = await readGGUFFile(model.path);
  const nVocab = requireMetaStringArray(file, 'tokenizer.ggml.tokens').length;
  const want = await completeAll(model.path, model.ban, nVocab);
  assert.equal(want.tokens.length, 8);
  // Measured (seed 11): 1 − cos 0.16 (gate), 0.054 (up), 0.019 (down); a scale llama.cpp did not read gives exactly 0.
  const dir = await mkdtemp(join(tmpdir(), 'llama-loads-scales-'));
  try {
    for (const suffix of ['ffn_gate_exps.scale', 'ffn_up_exps.scale', 'ffn_down_exps.scale']) {
      const got = await completeAll(await filledCopy(model.path, suffix, 1, dir), model.ban, nVocab);
      const d = firstDistance(want, got, nVocab);
      assert.ok(d >= 5e-3, `${suffix} set to 1: 1 − cos ${d.toExponential(2)} at the first position (want ≥ 5e-3)`);
      assert.notDeepEqual(got.tokens, want.tokens, `${suffix} set to 1: the greedy tokens change`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('--expert-scales on llama, qwen3next and qwen35moe: their graphs read the scales too (the down scales set to 1 move the logits)', async () => {
  // Measured (seed 11): 1 − cos 0.043 (llama), 0.080 (qwen3next), 0.23 (qwen35moe).
  const dir = await mkdtemp(join(tmpdir(), 'llama-loads-scales-'));
  try {
    for (const arch of EXPERT_SCALE_ARCHS.filter((a) => a !== 'qwen3moe')) {
      const model = await testModel(loudConfig({ arch, expertScales: true }));
      const nVocab = requireMetaStringArray(await readGGUFFile(model.path), 'tokenizer.ggml.tokens').length;
      const want = await completeAll(model.path, model.ban, nVocab);
      const got = await completeAll(await filledCopy(model.path, 'ffn_down_exps.scale', 1, dir), model.ban, nVocab);
      const d = firstDistance(want, got, nVocab);
      assert.ok(d >= 5e-3, `${arch}: down scales set to 1: 1 − cos ${d.toExponential(2)} at the first position (want ≥ 5e-3)`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('gemma4: fused GELU-gated experts beside the dense FFN with a per-expert down scale alone; llama.cpp reads it: set to 1, it moves the logits', async () => {
  const model = await testModel(loudConfig({ arch: 'gemma4' }));
  const file = await readGGUFFile(model.path);
  const nVocab = requireMetaStringArray(file, 'tokenizer.ggml.tokens').length;
  for (let l = 0; l < 3; l++) {
    const names = new Set(file.tensors.filter((t) => t.name.startsWith(`blk.${l}.`)).map((t) => t.name.slice(`blk.${l}.`.length)));
    assert.deepEqual(
      file.tensors.find((t) => t.name === `blk.${l}.ffn_gate_up_exps.weight`)?.dims,
      [64, 128, 8],
      `layer ${l}: gate and up fused, [n_embd, 2·ff, n_expert]`,
    );
    const down = file.tensors.find((t) => t.name === `blk.${l}.ffn_down_exps.scale`);
    assert.deepEqual([down?.type, down?.dims], [GGMLType.F32, [8]], `layer ${l}: the down scale, F32 [n_expert]`);
    for (const absent of ['ffn_gate_exps.weight', 'ffn_up_exps.weight', 'ffn_gate_exps.scale', 'ffn_up_exps.scale']) {
      assert.ok(!names.has(absent), `layer ${l}: no ${absent}`);
    }
    for (const present of [
      'ffn_up.weight',
      'ffn_gate_inp.scale',
      'pre_ffw_norm_2.weight',
      'post_ffw_norm_1.weight',
      'post_ffw_norm_2.weight',
    ]) {
      assert.ok(names.has(present), `layer ${l}: ${present}`);
    }
  }
  const want = await completeAll(model.path, model.ban, nVocab);
  assert.equal(want.tokens.length, 8);
  // The routed branch is RMS-normed before it joins the dense one (post_ffw_norm_2): the scales move the logits by
  // changing each token's mix of its experts. Measured (seed 11): 1 − cos 0.050; a model whose scales are all 1
  // already gives exactly 0.
  const dir = await mkdtemp(join(tmpdir(), 'llama-loads-gemma4-'));
  try {
    const got = await completeAll(await filledCopy(model.path, 'ffn_down_exps.scale', 1, dir), model.ban, nVocab);
    const d = firstDistance(want, got, nVocab);
    assert.ok(d >= 5e-3, `down scales set to 1: 1 − cos ${d.toExponential(2)} at the first position (want ≥ 5e-3)`);
    assert.notDeepEqual(got.tokens, want.tokens, 'down scales set to 1: the greedy tokens change');
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("step35: llama.cpp clamps the experts' SwiGLU at each layer's own limit (swiglu_clamp_exp): limits out of reach move the logits, as does raising one layer's", async () => {
  const base = loudConfig({ arch: 'step35' });
  const limits = defaultSwigluLimits(3);
  const model = await testModel({ ...base, swigluLimits: limits });
  const file = await readGGUFFile(model.path);
  const nVocab = requireMetaStringArray(file, 'tokenizer.ggml.tokens').length;
  assert.deepEqual(Array.from(file.metadata.get('step35.swiglu_clamp_exp')?.value as ArrayLike<number>), limits);
  assert.equal(file.metadata.get('step35.attention.sliding_window')?.value, STEP35_SLIDING_WINDOW);
  const want = await completeAll(model.path, model.ban, nVocab);
  assert.equal(want.tokens.length, 8);
  // The same weights (drawn per tensor name and seed), other limits: out of reach in every layer, in layer 0 only, in
  // layer 2 only; 0 (off) everywhere.
  const other = async (swigluLimits: number[]): Promise<Completion> =>
    completeAll((await testModel({ ...base, swigluLimits })).path, model.ban, nVocab);
  const unclamped = await other([1e9, 1e9, 1e9]);
  const layer0 = await other([1e9, 0, limits[2] ?? 0]);
  const layer2 = await other([limits[0] ?? 0, 0, 1e9]);
  const off = await other([0, 0, 0]);
  // Measured (seed 11), 1 − cos at the first position: 0.042 (all), 0.043 (layer 0), 1.1e-3 (layer 2, the last: the
  // greedy tokens change from the second on); limits 0 and 1e9 give the same logits exactly.
  const cases: Array<[string, Completion, number]> = [
    ['every limit raised to 1e9', unclamped, 0.01],
    ["layer 0's limit raised", layer0, 0.01],
    ["layer 2's limit raised", layer2, 3e-4],
  ];
  for (const [what, got, bound] of cases) {
    const d = firstDistance(want, got, nVocab);
    assert.ok(d >= bound, `${what}: 1 − cos ${d.toExponential(2)} at the first position (want ≥ ${bound})`);
    assert.notDeepEqual(got.tokens, want.tokens, `${what}: the greedy tokens change`);
  }
  // A limit of 0 is no clamp: the same logits as limits no value reaches.
  const zero = firstDistance(unclamped, off, nVocab);
  assert.ok(zero < 1e-6, `limits 0 and 1e9: 1 − cos ${zero.toExponential(2)} (want < 1e-6)`);
});

test("deepseek4: llama.cpp clamps the experts' SwiGLU in DeepSeek-V4's form at each layer's own limit (swiglu_clamp_exp): limits out of reach move the logits, as does raising one layer's", async () => {
  const base = loudConfig({ arch: 'deepseek4' });
  const limits = deepseek4SwigluLimits(3);
  const model = await testModel({ ...base, swigluLimits: limits });
  const file = await readGGUFFile(model.path);
  const nVocab = requireMetaStringArray(file, 'tokenizer.ggml.tokens').length;
  assert.deepEqual(Array.from(file.metadata.get('deepseek4.swiglu_clamp_exp')?.value as ArrayLike<number>), limits);
  assert.ok(
    limits.every((l) => l > 1e-6),
    'every layer clamped, as DeepSeek-V4',
  );
  const want = await completeAll(model.path, model.ban, nVocab);
  assert.equal(want.tokens.length, 8);
  // The same weights (drawn per tensor name and seed), other limits: out of reach in every layer, in layer 0 only, in
  // layer 2 only; 0 (off) everywhere.
  const other = async (swigluLimits: number[]): Promise<Completion> =>
    completeAll((await testModel({ ...base, swigluLimits })).path, model.ban, nVocab);
  const unclamped = await other([1e9, 1e9, 1e9]);
  const layer0 = await other([1e9, limits[1] ?? 0, limits[2] ?? 0]);
  const layer2 = await other([limits[0] ?? 0, limits[1] ?? 0, 1e9]);
  const off = await other([0, 0, 0]);
  // Measured (seed 11), 1 − cos at the first position: 0.18 (all), 0.17 (layer 0), 0.028 (layer 2, the last); limits
  // 0 and 1e9 give the same logits exactly. (That dispatch computes this form, not silu(g) · u or step35's
  // min(silu(g), L) · clamp(u), is the exactness grid's part: expert-dispatch.test.ts.)
  const cases: Array<[string, Completion, number]> = [
    ['every limit raised to 1e9', unclamped, 0.05],
    ["layer 0's limit raised", layer0, 0.05],
    ["layer 2's limit raised", layer2, 5e-3],
  ];
  for (const [what, got, bound] of cases) {
    const d = firstDistance(want, got, nVocab);
    assert.ok(d >= bound, `${what}: 1 − cos ${d.toExponential(2)} at the first position (want ≥ ${bound})`);
    assert.notDeepEqual(got.tokens, want.tokens, `${what}: the greedy tokens change`);
  }
  // A limit of 0 is no clamp: the same logits as limits no value reaches.
  const zero = firstDistance(unclamped, off, nVocab);
  assert.ok(zero < 1e-6, `limits 0 and 1e9: 1 − cos ${zero.toExponential(2)} (want < 1e-6)`);
});

test("minimax-m3: llama.cpp clamps its experts' SwiGLU-OAI (min(g, 7), clamp(u, −7, 7)): gates and ups far past the limit give the same logits at 1e4 and 1e5, an unclamped SiLU family's do not", async (t) => {
  // Every expert's gate, up and down filled with constants: each unit sees g = u = c·Σx (Σx of the normed input, about
  // ±8), so at c = 1e4 and 1e5 every unit is saturated: 7·σ(1.702·7)·(7 + 1) where Σx > 0, 0 where it is < 0. The
  // routed branch then adds the same vector at both scales (the down fill makes it about as loud as the residual):
  // identical logits. Without the clamp it would grow 100-fold, as qwen3moe's silu(g)·u does (its down fill scaled so
  // that the 1e4 branch is as loud). The minimax-m3 model also attends through MSA and its dense and shared FFNs are
  // SwiGLU-OAI; those are left as drawn.
  const dir = await mkdtemp(join(tmpdir(), 'llama-loads-m3-clamp-'));
  try {
    const saturated = async (path: string, c: number, down: number): Promise<string> => {
      const sub = await mkdtemp(join(dir, `${c}-${down}-`));
      const gate = await filledCopy(path, 'ffn_gate_exps.weight', c, sub);
      return filledCopy(await filledCopy(gate, 'ffn_up_exps.weight', c, sub), 'ffn_down_exps.weight', down, sub);
    };
    const run = async (arch: 'minimax-m3' | 'qwen3moe', down: number): Promise<Completion[]> => {
      const model = await testModel(loudConfig({ arch }));
      const nVocab = requireMetaStringArray(await readGGUFFile(model.path), 'tokenizer.ggml.tokens').length;
      const out: Completion[] = [];
      for (const [c, d] of [
        [1e4, down],
        [1e5, down],
        [1e4, 0],
      ] as const) {
        out.push(await completeAll(await saturated(model.path, c, d), model.ban, nVocab));
      }
      return out;
    };
    const nVocab = requireMetaStringArray(
      await readGGUFFile((await testModel(loudConfig({ arch: 'minimax-m3' }))).path),
      'tokenizer.ggml.tokens',
    ).length;
    const [m4, m5, mSilent] = (await run('minimax-m3', 1e-4)) as [Completion, Completion, Completion];
    const clamped = Math.max(...logitDistances(m4, m5, nVocab));
    // Measured (seed 11): 0 at every position (gate and up at 1e-2 vs 1e-1, below the limit: 1.2e-4); silenced 0.14;
    // qwen3moe 0.26.
    assert.ok(clamped < 1e-12, `minimax-m3, gate and up 1e4 vs 1e5: max 1 − cos ${clamped.toExponential(2)} (want < 1e-12)`);
    assert.deepEqual(m5.tokens, m4.tokens, 'minimax-m3, gate and up 1e4 vs 1e5: the same tokens');
    // The saturated branch is loud: silenced (down 0), the logits move.
    const loud = firstDistance(m4, mSilent, nVocab);
    assert.ok(loud >= 0.01, `minimax-m3, the saturated routed branch silenced: 1 − cos ${loud.toExponential(2)} (want ≥ 0.01)`);
    const [q4, q5] = (await run('qwen3moe', 1e-13)) as [Completion, Completion, Completion];
    const unclamped = firstDistance(q4, q5, nVocab);
    t.diagnostic(
      `minimax-m3 1e4 vs 1e5 max ${clamped.toExponential(1)}; silenced ${loud.toExponential(1)}; qwen3moe 1e4 vs 1e5 ${unclamped.toExponential(1)}`,
    );
    assert.ok(unclamped >= 0.01, `qwen3moe (SiLU, no clamp), gate and up 1e4 vs 1e5: 1 − cos ${unclamped.toExponential(2)} (want ≥ 0.01)`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('deepseek4 with hash layers: llama.cpp routes the first layers by token id from ffn_gate_tid2eid (I32), and that moves the logits', async () => {
  const base = loudConfig({ arch: 'deepseek4' });
  const model = await testModel({ ...base, hashLayers: 2 });
  const file = await readGGUFFile(model.path);
  const nVocab = requireMetaStringArray(file, 'tokenizer.ggml.tokens').length;
  assert.equal(file.metadata.get('deepseek4.hash_layer_count')?.value, 2);
  const table = file.tensors.find((t) => t.name === 'blk.0.ffn_gate_tid2eid.weight');
  assert.equal(table?.type, GGMLType.I32, 'the table is I32');
  const hashed = await completeAll(model.path, model.ban, nVocab);
  assert.equal(hashed.tokens.length, 8);
  // The same weights (drawn per tensor name and seed) routed by the router's top-k in every layer.
  const routed = await completeAll((await testModel(base)).path, model.ban, nVocab);
  const d = firstDistance(hashed, routed, nVocab);
  assert.ok(d >= 5e-3, `hash layers vs top-k routing: 1 − cos ${d.toExponential(2)} at the first position (want ≥ 5e-3)`);
});
