/**
 * Expert dispatch on the hybrid families, qwen3next and qwen35moe (tools/model-arch-hybrid.ts): gated-delta-net layers
 * that carry a recurrent state from token to token, beside full-attention layers, with routed experts and a gated
 * shared expert in every layer. The grid of expert-dispatch.test.ts for them (F32 and Q4_K), through the same checks
 * (harness/dispatch-checks.ts), against the stock server on the same model and prompt:
 *  - an honest CPU dispatcher (ggml-exact.ts): identical logits at every one of 64 positions. An expert output that
 *    reached the recurrent state wrong, or a dispatched graph that disturbed the state's update, would show at every
 *    later position, so "every position" is what holds the state up;
 *  - the three negative controls (one routed expert dropped yet reported served, sums × 1.01, a dispatcher that
 *    serves the prompt and then answers "local"), each of which the checks must reject; the dropped expert must also
 *    change the tokens (the model is loud enough that an expert error moves the greedy output, not only the logits);
 *  - the honest dispatcher again after the controls: stock's logits, so no state from the corrupted runs leaks into
 *    the next request of the slot;
 *  - the WGSL runtime (ExpertRuntime on Node's WebGPU, SwiftShader here) with llama numerics: stock's tokens.
 * Then the recurrent state in the server's other paths, with dispatch on: 4 slots generating at once (one state per
 * sequence, however the server batches them) give the tokens of stock alone with every pair served; and a request
 * that reuses the cached prompt (the server restores the state from its context checkpoint and evaluates only the
 * prompt's tail) gives stock's logits at every position, as the request that filled the cache did.
 *
 * Their prompt is evaluated unlike the other families' (HYBRID_EVALUATION): in two graphs, the last 4 tokens apart (the
 * server checkpoints the recurrent state before them), so the state crosses a graph boundary inside the prompt too;
 * and with every prompt row in the last layer (the rows whose logits are wanted are picked after the output norm:
 * src/models/qwen3next.cpp, qwen35moe.cpp). The expected requests say so.
 * The residual probe of expert-dispatch.test.ts does not walk a delta-net layer; the loudness here is judged by what
 * an expert error does to the output (the dropped expert above) and reported as routed-output RMS / FFN-input RMS.
 */
import { after, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testModel, type TestModel } from '../../harness/models.ts';
import { completeGreedy, startServer, type Completion, type RunningServer } from '../../harness/linkcpp.ts';
import { TestDispatcher, type DispatcherBehaviour, type RequestRecord } from '../../harness/test-dispatcher.ts';
import type { Hello } from '../../protocol/dispatch.ts';
import {
  FALLBACK_LINE,
  checkRun,
  logitDistances,
  promptTokens,
  type PromptEvaluation,
  type RunCheck,
} from '../../harness/dispatch-checks.ts';
import { logLines } from '../../harness/log-wait.ts';
import { WgslBackend } from '../../harness/wgsl-backend.ts';
import { planModel, type ModelConfig } from '../../tools/model-arch.ts';
import { HYBRID_ARCHITECTURES, type HybridArchName, hybridShape } from '../../tools/model-arch-hybrid.ts';
import { buildVocabulary } from '../../tools/tokenizer.ts';
import { GGMLType } from '../../gguf/quant-types.ts';

const dir = await mkdtemp(join(tmpdir(), 'es-xdh-'));
after(() => rm(dir, { recursive: true, force: true }));
let socketCounter = 0;
const PROMPT = 'The swarm serves';
const nVocab = buildVocabulary().tokens.length;
/** Every position's full distribution, so that the logits can be compared at every position. */
const ALL_PROBS = { n_probs: nVocab };
/** The routed experts' down projection at 2× the unit-variance amplitude, as in expert-dispatch.test.ts. */
const LOUD = 2;
const N = 64;
/** Each stock baseline must have at least this many distinct tokens of N (a collapsed baseline hides errors). */
const MIN_DISTINCT = 16;
/** Largest 1 − cos at any position for the bit-exact CPU dispatcher: identical logits, room for JSON float noise. */
const EXACT_BOUND = 1e-12;
/** Largest 1 − cos for the WGSL runtime in llama numerics (expert-dispatch.test.ts's bound and its reasons). */
const WGSL_BOUND = 1e-6;
const TYPES = [GGMLType.F32, GGMLType.Q4_K];
/** How llama-server evaluates these models' prompts: see the header. */
const HYBRID_EVALUATION: PromptEvaluation = { lastLayerAllRows: true, checkpointSplit: true };

const CONTROLS: Array<{ behaviour: DispatcherBehaviour; caughtBy: RegExp; atGeneration: boolean }> = [
  { behaviour: 'drop-one', caughtBy: /1 − cos/, atGeneration: true },
  { behaviour: 'sums-x1.01', caughtBy: /1 − cos/, atGeneration: true },
  { behaviour: 'prompt-only', caughtBy: /pairs served/, atGeneration: false },
];

function gridConfig(arch: HybridArchName, type: GGMLType): Partial<ModelConfig> & Pick<ModelConfig, 'arch'> {
  const width = type === GGMLType.Q4_K ? 256 : 64;
  return { arch, layers: 3, nEmbd: width, ff: width, sharedFf: width, nExpert: 8, nExpertUsed: 2, type, seed: 22, expertScale: LOUD };
}

function moeLayers(m: TestModel): number[] {
  return planModel(m.config, nVocab).moeLayers;
}

function fmt(x: number): string {
  return x === 0 ? '0' : x.toExponential(1);
}

/**
 * The stock server, one slot, the prompts one after the other; `--no-repack-exps` keeps the expert weights in the
 * layout `--expert-dispatch` leaves them in (repacked kernels round activations differently).
 */
async function stock(m: TestModel, prompts: string[], nPredict: number, extra: Record<string, unknown> = {}): Promise<Completion[]> {
  const server = await startServer({ model: m.path, args: ['--no-repack-exps'] });
  try {
    const out: Completion[] = [];
    for (const p of prompts) {
      const c = await completeGreedy(server.url, p, nPredict, m.ban, extra);
      assert.equal(c.tokens?.length, nPredict, `stock gave ${c.tokens?.length} tokens, ${nPredict} requested`);
      out.push(c);
    }
    return out;
  } finally {
    await server.stop();
  }
}

/** The coordinator with `--expert-dispatch` to a TestDispatcher serving every pair; HELLO and protocol checked. */
async function withDispatch(m: TestModel, run: (server: RunningServer, d: TestDispatcher) => Promise<void>, slots = 1): Promise<void> {
  const sock = join(dir, `xdh-${process.pid}-${socketCounter++}.sock`);
  const d = await TestDispatcher.start(sock, m.path, 'all');
  const deadlineMs = 5000;
  const server = await startServer({
    model: m.path,
    slots,
    args: ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', String(deadlineMs)],
  });
  try {
    const hello = await d.waitForHello();
    const c = m.config;
    assert.deepEqual(
      { nLayer: hello.nLayer, nEmbd: hello.nEmbd, nExpert: hello.nExpert, nExpertUsed: hello.nExpertUsed },
      { nLayer: c.layers, nEmbd: c.nEmbd, nExpert: c.nExpert, nExpertUsed: c.nExpertUsed },
      'HELLO as the coordinator was started',
    );
    await run(server, d);
    assert.deepEqual(d.stats.protocolErrors, [], 'the dispatcher met no protocol error');
  } finally {
    await server.stop();
    await d.stop();
  }
}

/** One dispatched completion of PROMPT judged against `want` by every check of dispatch-checks.ts. */
async function dispatchedRun(
  server: RunningServer,
  d: TestDispatcher,
  m: TestModel,
  want: Completion,
  bound: number,
): Promise<RunCheck & { requests: RequestRecord[] }> {
  const mark = d.mark();
  const logMark = server.log().length;
  const got = await completeGreedy(server.url, PROMPT, N, m.ban, ALL_PROBS);
  const requests = d.since(mark);
  const check = checkRun({
    want,
    got,
    nPredict: N,
    nVocab,
    moeLayers: moeLayers(m),
    nLayer: m.config.layers,
    evaluation: HYBRID_EVALUATION,
    requests,
    log: server.log().slice(logMark),
    protocolErrors: d.stats.protocolErrors,
    bound,
  });
  return { ...check, requests };
}

for (const arch of HYBRID_ARCHITECTURES) {
  for (const type of TYPES) {
    test(`${arch} ${GGMLType[type]}: dispatch gives stock's logits at every position through the recurrent layers; the negative controls are caught; WGSL gives stock's tokens`, async (t: TestContext) => {
      const m = await testModel(gridConfig(arch, type));
      const shape = hybridShape(m.config);
      assert.ok(shape.recurrent.includes(true) && shape.recurrent.includes(false), 'both kinds of layer in the model');
      assert.deepEqual(moeLayers(m), [0, 1, 2], 'every layer has routed experts');
      const [want] = (await stock(m, [PROMPT], N, ALL_PROBS)) as [Completion];
      const distinct = new Set(want.tokens).size;
      assert.ok(distinct >= MIN_DISTINCT, `the stock baseline has ${distinct} distinct tokens of ${N} (need ≥ ${MIN_DISTINCT})`);
      assert.ok(promptTokens(want) > 1, 'the prompt is more than one token (generation steps are the one-row requests)');
      let wgsl: WgslBackend | undefined;
      try {
        await withDispatch(m, async (server, d) => {
          const { numerics } = d.stats.hellos[0] as Hello;
          assert.equal(numerics, 'llama', 'linkcpp-server computes as llama.cpp CPU backend does');
          const gpu = await WgslBackend.open(m.path, moeLayers(m), { numerics });
          wgsl = gpu;
          const honest = await dispatchedRun(server, d, m, want, EXACT_BOUND);
          assert.deepEqual(honest.failures, [], `${d.backend.name}: ${honest.failures.join('\n')}`);
          const notes = [
            `distinct ${distinct}`,
            `recurrent layers ${shape.recurrent.flatMap((r, i) => (r ? [i] : [])).join(',')}`,
            `routed/input RMS ${honest.requests
              .slice(0, 3)
              .map((r) => `L${r.layer} ${(r.sumsRms / r.rowsRms).toFixed(2)}`)
              .join(' ')}`,
            `exact: max 1−cos ${fmt(honest.maxDistance)}`,
          ];

          for (const c of CONTROLS) {
            d.behaviour = c.behaviour;
            const r = await dispatchedRun(server, d, m, want, EXACT_BOUND);
            assert.ok(r.failures.length > 0, `negative control ${c.behaviour} passed every check`);
            assert.ok(
              r.failures.some((f) => c.caughtBy.test(f)),
              `negative control ${c.behaviour} was not caught by ${c.caughtBy}: ${r.failures.join(' | ')}`,
            );
            if (c.atGeneration) assert.equal(r.distances[0], 0, `${c.behaviour} applies after the prompt: position 0 is exact`);
            if (c.behaviour === 'drop-one') assert.ok(!r.tokensEqual, 'a dropped expert changes the greedy tokens (a loud expert branch)');
            notes.push(`${c.behaviour}: max ${fmt(r.maxDistance)}${r.tokensEqual ? '' : ', tokens differ'}`);
          }

          d.behaviour = 'all';
          const again = await dispatchedRun(server, d, m, want, EXACT_BOUND);
          assert.deepEqual(again.failures, [], `after the controls: ${again.failures.join('\n')}`);
          t.diagnostic(notes.join('; '));

          d.backend = gpu;
          await t.test("WGSL runtime, llama numerics: stock's tokens, every request served", async (st) => {
            const w = await dispatchedRun(server, d, m, want, WGSL_BOUND);
            st.diagnostic(`wgsl: max 1−cos ${fmt(w.maxDistance)}${w.tokensEqual ? '' : ', tokens differ'}`);
            assert.deepEqual(w.failures, [], `${d.backend.name}: ${w.failures.join('\n')}`);
          });
        });
      } finally {
        wgsl?.close();
      }
    });
  }
}

test('4 slots generating concurrently on a hybrid model with dispatch on (one recurrent state per sequence): the tokens of stock alone, every pair served', async () => {
  const m = await testModel(gridConfig('qwen35moe', GGMLType.F32));
  const prompts = ['The swarm serves', 'hello world', 'A volunteer opens a page', 'numbers 1 2 3'];
  const nPredict = 32;
  const want = await stock(m, prompts, nPredict);
  await withDispatch(
    m,
    async (server, d) => {
      const mark = d.mark();
      const logMark = server.log().length;
      const outs = await Promise.all(prompts.map((p) => completeGreedy(server.url, p, nPredict, m.ban)));
      const answered = d.since(mark);
      for (const [i, o] of outs.entries()) {
        assert.deepEqual(o.tokens, want[i]?.tokens, `prompt ${JSON.stringify(prompts[i])}: concurrent dispatch differs from stock alone`);
      }
      // Per sequence and MoE layer: every prompt row (every layer keeps them all here), then one row per generated
      // token but the last, however the server batched and split them.
      const rowsPerSeq = (promptN: number): number => moeLayers(m).length * (promptN + nPredict - 1);
      const wantPairs = m.config.nExpertUsed * outs.reduce((s, o) => s + rowsPerSeq(promptTokens(o)), 0);
      const served = answered.reduce((s, r) => s + r.served, 0);
      assert.equal(served, wantPairs, `served ${served} pairs, expected ${wantPairs}`);
      assert.equal(
        answered.reduce((s, r) => s + r.notServed, 0),
        0,
        'nothing answered not served',
      );
      assert.deepEqual(logLines(server.log().slice(logMark), FALLBACK_LINE), [], 'no local fallback');
    },
    4,
  );
});

test("qwen3next: a request that reuses the cached prompt (the server restores the recurrent state from a checkpoint and re-evaluates the prompt's tail) gives stock's logits at every position with dispatch on", async (t: TestContext) => {
  const m = await testModel(gridConfig('qwen3next', GGMLType.F32));
  const cached = { ...ALL_PROBS, cache_prompt: true };
  // The same two requests on each server: the first fills the cache and its checkpoints, the second reuses them.
  const want = await stock(m, [PROMPT, PROMPT], N, cached);
  await withDispatch(m, async (server, d) => {
    const evaluated: number[] = [];
    for (const [i, w] of want.entries()) {
      const mark = d.mark();
      const logMark = server.log().length;
      const got = await completeGreedy(server.url, PROMPT, N, m.ban, cached);
      const requests = d.since(mark);
      evaluated.push(promptTokens(got));
      assert.equal(promptTokens(got), promptTokens(w), `request ${i + 1}: the prompt rows stock evaluated`);
      assert.deepEqual(got.tokens, w.tokens, `request ${i + 1}: stock's tokens`);
      const distances = logitDistances(w, got, nVocab);
      assert.equal(distances.length, N, `request ${i + 1}: logits at every position`);
      const max = Math.max(...distances);
      assert.ok(max <= EXACT_BOUND, `request ${i + 1}: 1 − cos of the logits up to ${max}`);
      const rows = requests.reduce((s, r) => s + r.nTokens, 0);
      const wantRows = moeLayers(m).length * (promptTokens(got) + N - 1);
      assert.equal(rows, wantRows, `request ${i + 1}: ${rows} rows asked, ${wantRows} expected`);
      assert.ok(
        requests.every((r) => r.notServed === 0 && r.served === r.nTokens * r.nUsed),
        `request ${i + 1}: every pair served`,
      );
      assert.deepEqual(logLines(server.log().slice(logMark), FALLBACK_LINE), [], `request ${i + 1}: no local fallback`);
    }
    const [first, second] = evaluated as [number, number];
    t.diagnostic(`prompt tokens evaluated: ${first}, then ${second} after the checkpoint restore`);
    assert.ok(second < first, `the second request evaluated ${second} prompt tokens, the first ${first}: the cache was not used`);
  });
});
