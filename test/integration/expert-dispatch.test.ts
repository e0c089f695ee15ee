/**
 * linkcpp-server's expert-dispatch hook against the test dispatcher (CPU references in TypeScript):
 * exactness when every or half of the pairs are served, local fallback when the dispatcher stalls, dies or sends
 * garbage, quiet windows, and concurrent slots. Token ids are compared (random-weight models emit arbitrary bytes).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testModel, type TestModel } from '../support/models.ts';
import { completeGreedy, startServer, type Completion, type RunningServer } from '../support/linkcpp.ts';
import { TestDispatcher, type DispatcherBehaviour } from '../support/test-dispatcher.ts';
import { ARCHITECTURES, planModel } from '../../tools/model-arch.ts';
import { buildVocabulary } from '../../tools/tokenizer.ts';
import { GGMLType } from '../../gguf/quant-types.ts';

const dir = await mkdtemp(join(tmpdir(), 'es-xd-'));
test.after(() => rm(dir, { recursive: true, force: true }));
let socketCounter = 0;
const PROMPT = 'The swarm serves';

function moeLayers(m: TestModel): number[] {
  return planModel(m.config, buildVocabulary().tokens.length).moeLayers;
}

async function withDispatch<T>(
  m: TestModel,
  behaviour: DispatcherBehaviour,
  run: (server: RunningServer, d: TestDispatcher) => Promise<T>,
  opts: { deadlineMs?: number; slots?: number; quietMs?: number; args?: string[] } = {},
): Promise<T> {
  const sock = join(dir, `xd-${process.pid}-${socketCounter++}.sock`);
  const d = await TestDispatcher.start(sock, m.path, behaviour);
  d.quietMs = opts.quietMs ?? 0;
  const server = await startServer({
    model: m.path,
    slots: opts.slots ?? 1,
    args: ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', String(opts.deadlineMs ?? 250), ...(opts.args ?? [])],
  });
  try {
    await d.waitForHello();
    return await run(server, d);
  } finally {
    await server.stop();
    await d.stop();
  }
}

/**
 * The same server with dispatch off. `--no-repack` keeps the weights in ggml's standard layout, as
 * `--expert-dispatch` does, so both runs use the same CPU kernels: repacked kernels round activations differently,
 * and a random-weight model amplifies such differences into other tokens.
 */
async function baseline(m: TestModel, nPredict: number, extra: Record<string, unknown> = {}): Promise<Completion> {
  const server = await startServer({ model: m.path, args: ['--no-repack'] });
  try {
    return await completeGreedy(server.url, PROMPT, nPredict, m.ban, extra);
  } finally {
    await server.stop();
  }
}

type TopLogprobs = Array<{ top_logprobs: Array<{ id: number; logprob: number }> }>;

/** Cosine of the centred log-probability vectors (shift-invariant, so it compares logits) at one position. */
function logitCosine(a: TopLogprobs, b: TopLogprobs, pos: number, nVocab: number): number {
  const va = new Float64Array(nVocab);
  const vb = new Float64Array(nVocab);
  for (const { id, logprob } of a[pos]?.top_logprobs ?? []) va[id] = logprob;
  for (const { id, logprob } of b[pos]?.top_logprobs ?? []) vb[id] = logprob;
  const mean = (v: Float64Array): number => v.reduce((s, x) => s + x, 0) / v.length;
  const ma = mean(va);
  const mb = mean(vb);
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < nVocab; i++) {
    const x = (va[i] as number) - ma;
    const y = (vb[i] as number) - mb;
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  return dot / Math.sqrt(na * nb);
}

const TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_K];
const nVocab = buildVocabulary().tokens.length;

for (const arch of ARCHITECTURES) {
  for (const type of TYPES) {
    test(`${arch} ${GGMLType[type]}: every MoE layer dispatched, all pairs served → same 64 tokens, logit cosine ≥ 0.999`, async () => {
      const width = type === GGMLType.Q4_K ? 256 : 64;
      const m = await testModel({ arch, layers: 3, nEmbd: width, ff: width, sharedFf: width, nExpert: 8, nExpertUsed: 2, type, seed: 22 });
      const probs = { n_probs: nVocab };
      const want = await baseline(m, 64, probs);
      await withDispatch(m, 'all', async (server, d) => {
        const got = await completeGreedy(server.url, PROMPT, 64, m.ban, probs);
        assert.deepEqual(got.tokens, want.tokens);
        assert.deepEqual([...d.stats.layersServed].sort(), moeLayers(m), 'every MoE layer (and only those) was served remotely');
        assert.equal(d.stats.notServedPairs, 0);
        for (let pos = 0; pos < 8; pos++) {
          const c = logitCosine(
            want.raw.completion_probabilities as TopLogprobs,
            got.raw.completion_probabilities as TopLogprobs,
            pos,
            nVocab,
          );
          assert.ok(c >= 0.999, `position ${pos}: logit cosine ${c}`);
        }
      });
    });
  }
}

test('negative control: a dispatcher computing the wrong experts is caught by the same checks', async () => {
  const m = await testModel({ arch: 'qwen3moe', layers: 3, nEmbd: 64, ff: 64, nExpert: 8, nExpertUsed: 2, type: GGMLType.Q8_0, seed: 22 });
  const probs = { n_probs: nVocab };
  const want = await baseline(m, 64, probs);
  await withDispatch(m, 'wrong-expert', async (server) => {
    const got = await completeGreedy(server.url, PROMPT, 64, m.ban, probs);
    const cos = logitCosine(want.raw.completion_probabilities as TopLogprobs, got.raw.completion_probabilities as TopLogprobs, 0, nVocab);
    assert.ok(cos < 0.999 || got.tokens.join() !== want.tokens.join(), `wrong experts went unnoticed (cosine ${cos})`);
    assert.ok(cos < 0.999, `first-position logit cosine ${cos} should fall below 0.999 with wrong experts`);
  });
});

const small = { layers: 3, nEmbd: 64, ff: 64, sharedFf: 64, nExpert: 8, nExpertUsed: 2, type: GGMLType.Q8_0, seed: 23 };

test('half of the pairs served, the rest reported not served → same tokens, both paths used', async () => {
  for (const arch of ['qwen3moe', 'deepseek'] as const) {
    const m = await testModel({ arch, ...small });
    const want = await baseline(m, 64);
    await withDispatch(m, 'half', async (server, d) => {
      const got = await completeGreedy(server.url, PROMPT, 64, m.ban);
      assert.deepEqual(got.tokens, want.tokens, arch);
      assert.ok(
        d.stats.servedPairs > 0 && d.stats.notServedPairs > 0,
        `${arch}: served ${d.stats.servedPairs}, not served ${d.stats.notServedPairs}`,
      );
      // The coordinator measured its own cost for the pairs it computed and reports it in later requests.
      assert.ok(
        d.stats.localCosts.some((ns) => ns > 0),
        'local cost per pair reported',
      );
    });
  }
});

for (const behaviour of ['stall', 'die', 'garbage'] as const) {
  test(`a ${behaviour === 'die' ? 'dying' : behaviour === 'stall' ? 'stalling' : 'garbage-sending'} dispatcher: same tokens, bounded time, next request served, fault logged once`, async () => {
    const m = await testModel({ arch: 'qwen3moe', ...small });
    const want = await baseline(m, 64);
    const deadlineMs = 200;
    await withDispatch(
      m,
      behaviour,
      async (server, d) => {
        const t0 = performance.now();
        const got = await completeGreedy(server.url, PROMPT, 64, m.ban);
        const ms = performance.now() - t0;
        assert.deepEqual(got.tokens, want.tokens);
        const bound = deadlineMs * moeLayers(m).length + 3000;
        assert.ok(ms < bound, `request took ${ms.toFixed(0)} ms, bound ${bound} ms`);
        assert.ok(d.stats.requests >= 1, 'the dispatcher was asked');
        const again = await completeGreedy(server.url, PROMPT, 16, m.ban);
        assert.deepEqual(again.tokens, want.tokens.slice(0, 16), 'the server keeps serving');
        const incidents = server
          .log()
          .split('\n')
          .filter((l) => l.includes('computing experts locally until it recovers'));
        assert.ok(incidents.length >= 1 && incidents.length <= 2, `logged ${incidents.length} times:\n${incidents.join('\n')}`);
      },
      { deadlineMs },
    );
  });
}

test('a dispatcher that answers "local" with a quiet window is not asked again during it', async () => {
  const m = await testModel({ arch: 'qwen3moe', ...small });
  const want = await baseline(m, 32);
  await withDispatch(
    m,
    'local',
    async (server, d) => {
      const got = await completeGreedy(server.url, PROMPT, 32, m.ban);
      assert.deepEqual(got.tokens, want.tokens);
      assert.equal(d.stats.requests, moeLayers(m).length, 'one request per MoE layer, then quiet');
    },
    { quietMs: 60_000 },
  );
});

test('no dispatcher listening: the coordinator serves alone and says so once', async () => {
  const m = await testModel({ arch: 'qwen3moe', ...small });
  const want = await baseline(m, 16);
  const server = await startServer({ model: m.path, args: ['--expert-dispatch', join(dir, 'nobody-here.sock')] });
  try {
    const got = await completeGreedy(server.url, PROMPT, 16, m.ban);
    assert.deepEqual(got.tokens, want.tokens);
    await new Promise((r) => setTimeout(r, 1500)); // a few background reconnect attempts
    const lines = server
      .log()
      .split('\n')
      .filter((l) => l.includes('expert-dispatch: cannot connect'));
    assert.equal(lines.length, 1, lines.join('\n'));
  } finally {
    await server.stop();
  }
});

test('4 slots generating concurrently with dispatch on: all complete; /slots, /health, /metrics as stock', async () => {
  const m = await testModel({ arch: 'qwen2moe', ...small });
  await withDispatch(
    m,
    'all',
    async (server, d) => {
      const prompts = ['The swarm serves', 'hello world', 'A volunteer opens a page', 'numbers 1 2 3'];
      const outs = await Promise.all(prompts.map((p) => completeGreedy(server.url, p, 32, m.ban)));
      for (const o of outs) assert.equal(o.tokens.length, 32);
      assert.ok(d.stats.servedPairs > 0);
      const health = await fetch(`${server.url}/health`);
      assert.equal(health.status, 200);
      const slots = (await (await fetch(`${server.url}/slots`)).json()) as Array<{ id: number; is_processing: boolean }>;
      assert.equal(slots.length, 4);
      assert.ok(slots.every((s) => s.is_processing === false));
      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      assert.match(metrics, /llamacpp:tokens_predicted_total \d+/);
      // The same prompt alone, with dispatch on, gives the same tokens as in the concurrent batch.
      const alone = await completeGreedy(server.url, prompts[0] as string, 32, m.ban);
      assert.deepEqual(alone.tokens, outs[0]?.tokens);
    },
    { slots: 4, args: ['--metrics'] },
  );
});
