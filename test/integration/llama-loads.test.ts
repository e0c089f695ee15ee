/**
 * llama.cpp (our linkcpp-server build) loads every generated architecture × the quant types in TYPES (the ones the
 * kernels read; q4_1, q5_0 and q5_1 are left to quant-vs-llama) and generates tokens. The first five architectures go
 * through all of TYPES; the later families (deepseek2, glm4moe, minimax-m2, ...) through FAMILY_TYPES, a float, a
 * block quant and a K-quant: what differs between families is the loader and the graph, not the quantisation.
 * gpt-oss also has a test of its own: llama.cpp reads its expert biases and attention sinks (zeroing them moves the
 * logits).
 * Runs one server at a time: on a 2-core machine parallel servers only slow each other down.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFile, mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testModel } from '../../harness/models.ts';
import { type Completion, completeGreedy, startServer } from '../../harness/linkcpp.ts';
import { logitDistances } from '../../harness/dispatch-checks.ts';
import { ARCHITECTURES, GPT_OSS_SLIDING_WINDOW, planModel } from '../../tools/model-arch.ts';
import { GGMLType } from '../../gguf/quant-types.ts';
import { readGGUFFile } from '../../gguf/node-io.ts';
import { requireMetaStringArray, tensorDataRange } from '../../gguf/types.ts';

const TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K];
const FAMILY_TYPES = [GGMLType.F32, GGMLType.Q8_0, GGMLType.Q4_K];
const FIRST_FIVE: readonly string[] = ['qwen3moe', 'qwen2moe', 'deepseek', 'llama', 'olmoe'];

for (const arch of ARCHITECTURES) {
  for (const type of FIRST_FIVE.includes(arch) ? TYPES : FAMILY_TYPES) {
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
      const expertTensor = file.tensors.find((t) => t.name.endsWith('ffn_up_exps.weight'));
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
          file.tensors.some((t) => t.name === `blk.${l}.ffn_up_exps.weight`),
          routed,
          `layer ${l} routed: ${routed}`,
        );
        assert.equal(
          file.tensors.some((t) => t.name === `blk.${l}.ffn_up.weight`),
          !routed,
          `layer ${l} dense: ${!routed}`,
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

/** A copy of the model at `path`, in `dir`, with every tensor whose name ends with `suffix` zeroed (F32 only). */
async function zeroedCopy(path: string, suffix: string, dir: string): Promise<string> {
  const file = await readGGUFFile(path);
  const targets = file.tensors.filter((t) => t.name.endsWith(suffix));
  assert.ok(targets.length > 0, `the model has ${suffix} tensors`);
  const out = join(dir, `zeroed-${suffix}.gguf`);
  await copyFile(path, out);
  const h = await open(out, 'r+');
  try {
    for (const t of targets) {
      assert.equal(t.type, GGMLType.F32, `${t.name} is F32 (zero bytes are 0.0)`);
      const { start, end } = tensorDataRange(file, t);
      await h.write(new Uint8Array(end - start), 0, end - start, start);
    }
  } finally {
    await h.close();
  }
  return out;
}

test('gpt-oss: llama.cpp reads its expert biases and attention sinks: zeroing the gate, up or down biases or the sinks moves the logits', async () => {
  // The loud expert branch (expert-scale 2) the dispatch tests use; all-probabilities completions to compare logits.
  const model = await testModel({
    arch: 'gpt-oss',
    layers: 3,
    nEmbd: 64,
    ff: 64,
    sharedFf: 64,
    nExpert: 8,
    nExpertUsed: 2,
    type: GGMLType.Q8_0,
    seed: 11,
    expertScale: 2,
  });
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
