/**
 * A model whose experts are stored fused (llama.cpp's `ffn_gate_up_exps`: per expert its gate rows, then its up rows;
 * what the converter writes with `--fuse-gate-up-exps`, and what deepseek2, qwen3next, qwen35moe and others load in
 * place of the separate pair) is served like any other: the hook reads the fused tensor through two strided views,
 * the hub cuts slices whose gate and up come apart expert by expert (the same bytes a volunteer gets from the unfused
 * file), and the dispatched run gives the stock server's logits at every position.
 *
 * Model: deepseek2 (a family whose loader takes the fused tensor), Q4_K, generated unfused and rewritten fused
 * (gguf/fuse-gate-up.ts), loud experts as in the exactness grid.
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testModel, type TestModel } from '../../harness/models.ts';
import { completeGreedy, startServer, type Completion } from '../../harness/linkcpp.ts';
import { TestDispatcher } from '../../harness/test-dispatcher.ts';
import { checkRun } from '../../harness/dispatch-checks.ts';
import { WgslBackend } from '../../harness/wgsl-backend.ts';
import { fuseGateUpFile } from '../../gguf/fuse-gate-up.ts';
import { openFileSource, readGGUFFile } from '../../gguf/node-io.ts';
import { gateUpTensorName, expertTensorName, planExpertSlice, writeExpertSlice } from '../../gguf/expert-slice.ts';
import { memorySink } from '../../gguf/writer.ts';
import { describeModel } from '../../hub/registry.ts';
import { planModel } from '../../tools/model-arch.ts';
import { buildVocabulary } from '../../tools/tokenizer.ts';
import { GGMLType } from '../../gguf/quant-types.ts';
import type { Hello } from '../../protocol/dispatch.ts';

const dir = await mkdtemp(join(tmpdir(), 'es-fused-'));
after(() => rm(dir, { recursive: true, force: true }));
const PROMPT = 'The swarm serves';
const N = 32;
const nVocab = buildVocabulary().tokens.length;
const ALL_PROBS = { n_probs: nVocab };

const unfused = await testModel({
  arch: 'deepseek2',
  layers: 3,
  nEmbd: 256,
  ff: 256,
  sharedFf: 256,
  nExpert: 8,
  nExpertUsed: 2,
  type: GGMLType.Q4_K,
  seed: 22,
  expertScale: 2,
});
const fusedPath = join(dir, 'deepseek2-fused.gguf');
const { fusedLayers } = await fuseGateUpFile(unfused.path, fusedPath);
const fused: TestModel = { ...unfused, path: fusedPath };
const moeLayers = planModel(unfused.config, nVocab).moeLayers;

async function stock(m: TestModel): Promise<Completion> {
  const server = await startServer({ model: m.path, args: ['--no-repack-exps'] });
  try {
    return await completeGreedy(server.url, PROMPT, N, m.ban, ALL_PROBS);
  } finally {
    await server.stop();
  }
}

test('the fused file: one gate_up tensor per MoE layer; the hub describes it and slices it as the unfused one', async () => {
  assert.deepEqual(fusedLayers, moeLayers);
  const [a, b] = await Promise.all([readGGUFFile(unfused.path), readGGUFFile(fusedPath)]);
  for (const l of moeLayers) {
    const gu = b.tensors.find((t) => t.name === gateUpTensorName(l));
    assert.deepEqual(gu?.dims, [256, 512, 8], `layer ${l}: fused [n_embd, 2·ff, n_expert]`);
    assert.ok(!b.tensors.some((t) => t.name === expertTensorName(l, 'gate') || t.name === expertTensorName(l, 'up')));
  }
  const da = describeModel(unfused.path, a, 'm');
  const db = describeModel(fusedPath, b, 'm');
  assert.deepEqual(
    { moe: db.moeLayers, ff: db.expertFf, bytes: db.bytesPerExpert, types: db.expertTypes },
    { moe: da.moeLayers, ff: da.expertFf, bytes: da.bytesPerExpert, types: da.expertTypes },
  );
  // A slice of each file, byte for byte the same (the slice names gate and up apart, as volunteers read them).
  const [sa, sb] = [await openFileSource(unfused.path), await openFileSource(fusedPath)];
  try {
    for (const [l, begin, end] of [
      [moeLayers[0] as number, 0, 8],
      [moeLayers[1] as number, 3, 6],
    ] as const) {
      const outA = memorySink();
      const outB = memorySink();
      await writeExpertSlice(sa, planExpertSlice(a, l, begin, end), outA);
      await writeExpertSlice(sb, planExpertSlice(b, l, begin, end), outB);
      assert.ok(outA.length > 0 && Buffer.from(outA.bytes()).equals(Buffer.from(outB.bytes())), `layer ${l} [${begin}, ${end})`);
    }
  } finally {
    await sa.close();
    await sb.close();
  }
});

test("llama.cpp serves the fused file; dispatched, its experts are served and the logits are stock's at every position; WGSL gives stock's tokens", async () => {
  const want = await stock(fused);
  const plain = await stock(unfused);
  assert.deepEqual(want.tokens, plain.tokens, 'fused and unfused files give the stock server the same tokens');

  const sock = join(dir, 'xd.sock');
  const d = await TestDispatcher.start(sock, fusedPath, 'all');
  // A correctness test, not a timing one: a deadline SwiftShader meets on a loaded 2-core machine (CI once saw the
  // 250 ms default run out on the first WGSL layer and the coordinator fall back to local experts).
  const server = await startServer({ model: fusedPath, args: ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', '5000'] });
  try {
    const hello = await d.waitForHello();
    const check = async (bound: number) => {
      const mark = d.mark();
      const logMark = server.log().length;
      const got = await completeGreedy(server.url, PROMPT, N, fused.ban, ALL_PROBS);
      return checkRun({
        want,
        got,
        nPredict: N,
        nVocab,
        moeLayers,
        nLayer: fused.config.layers,
        requests: d.since(mark),
        log: server.log().slice(logMark),
        protocolErrors: d.stats.protocolErrors,
        bound,
      });
    };
    const exact = await check(1e-12);
    assert.deepEqual(exact.failures, [], `CPU dispatcher: ${exact.failures.join('\n')}`);
    const gpu = await WgslBackend.open(fusedPath, moeLayers, { numerics: (hello as Hello).numerics });
    try {
      d.backend = gpu;
      const wgsl = await check(1e-6);
      assert.deepEqual(wgsl.failures, [], `WGSL: ${wgsl.failures.join('\n')}`);
    } finally {
      gpu.close();
    }
    assert.ok(!server.log().includes('does not cover'), 'the hook took every MoE layer');
  } finally {
    await server.stop();
    await d.stop();
  }
});
