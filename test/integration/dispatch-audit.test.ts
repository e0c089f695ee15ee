/**
 * Audits (docs/dispatch-protocol.md): a dispatcher flags pairs it did not serve, the coordinator computes them as it
 * computes every pair it keeps and sends their sums back in an AUDIT frame: the trusted reference the hub holds a
 * worker's answer against (probation, spot checks). Against the real linkcpp-server on generated models:
 *  - a dispatcher that serves nothing and audits every pair gets, per request, sums bit-identical to the test
 *    dispatcher's GgmlExactBackend (the coordinator's own arithmetic, harness/ggml-exact.ts) over the same pairs;
 *  - a subset (k = 0 only, on LOCAL answers) and a random half of the unserved pairs of half-served answers match the
 *    backend over exactly that subset;
 *  - the tokens stay those of the stock server throughout (auditing changes nothing the coordinator computes);
 *  - an invalid audit (a served pair flagged) makes the coordinator drop the connection and fall back: no AUDIT is
 *    sent, and the tokens are still stock's.
 * The dispatcher speaks protocol version 2 (audits ride on the CLAIM, among the unclaimed pairs; the AUDIT comes
 * before the RESULT); the invalid audit is also tried on a version 1 connection (on the RESPONSE).
 */
import { after, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GGMLType } from '../../gguf/quant-types.ts';
import { planModel, type ArchName } from '../../tools/model-arch.ts';
import { buildVocabulary } from '../../tools/tokenizer.ts';
import { FALLBACK_LINE } from '../../harness/dispatch-checks.ts';
import { completeGreedy, startServer, type Completion, type RunningServer } from '../../harness/linkcpp.ts';
import { logLines, waitForLog } from '../../harness/log-wait.ts';
import { testModel, type TestModel } from '../../harness/models.ts';
import { TestDispatcher, type AuditPolicy, type AuditRecord, type DispatcherBehaviour } from '../../harness/test-dispatcher.ts';
import type { DispatchVersion } from '../../protocol/dispatch.ts';

const dir = await mkdtemp(join(tmpdir(), 'es-audit-'));
after(() => rm(dir, { recursive: true, force: true }));
let socketCounter = 0;

const PROMPT = 'The swarm serves';
const N = 24;
const nVocab = buildVocabulary().tokens.length;
/** The routed-expert branch loud, as in expert-dispatch.test.ts, so that a wrong sum would move the tokens. */
const LOUD = 2;

/** Two architectures and weight types: one with 256-wide K-quants, one with a dense first layer and Q8_0. */
const MODELS: Array<{ arch: ArchName; type: GGMLType; width: number }> = [
  { arch: 'qwen3moe', type: GGMLType.Q4_K, width: 256 },
  { arch: 'deepseek', type: GGMLType.Q8_0, width: 64 },
];

function config(c: (typeof MODELS)[number]) {
  return {
    arch: c.arch,
    layers: 3,
    nEmbd: c.width,
    ff: c.width,
    sharedFf: c.width,
    nExpert: 8,
    nExpertUsed: 2,
    type: c.type,
    seed: 22,
    expertScale: LOUD,
  };
}

const baselines = new Map<string, Completion>();

/** The stock server's tokens (`--no-repack-exps`: the weight layout --expert-dispatch implies), once per model. */
async function stock(m: TestModel): Promise<Completion> {
  const cached = baselines.get(m.path);
  if (cached) return cached;
  const server = await startServer({ model: m.path, args: ['--no-repack-exps'] });
  try {
    const c = await completeGreedy(server.url, PROMPT, N, m.ban);
    assert.equal(c.tokens.length, N);
    baselines.set(m.path, c);
    return c;
  } finally {
    await server.stop();
  }
}

async function withDispatch<T>(
  m: TestModel,
  behaviour: DispatcherBehaviour,
  audit: AuditPolicy,
  run: (server: RunningServer, d: TestDispatcher) => Promise<T>,
  maxVersion: DispatchVersion = 2,
): Promise<T> {
  const sock = join(dir, `audit-${process.pid}-${socketCounter++}.sock`);
  const d = await TestDispatcher.start(sock, m.path, behaviour);
  d.audit = audit;
  d.maxVersion = maxVersion;
  const server = await startServer({ model: m.path, args: ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', '5000'] });
  try {
    await d.waitForHello();
    const out = await run(server, d);
    assert.ok(
      d.stats.log.every((r) => r.version === maxVersion),
      `every request on protocol version ${maxVersion}`,
    );
    return out;
  } finally {
    await server.stop();
    await d.stop();
  }
}

interface Agreement {
  values: number;
  /** Values whose bits differ from the reference (+0 and −0 count as equal), and the NMSE over all values. */
  differing: number;
  nmse: number;
}

/** Every audit's sums against GgmlExactBackend over exactly its flagged pairs. */
async function agreement(d: TestDispatcher, audits: readonly AuditRecord[]): Promise<Agreement> {
  let values = 0;
  let differing = 0;
  let err = 0;
  let ref2 = 0;
  for (const a of audits) {
    const want = await d.auditReference(a);
    assert.equal(want.length, a.sums.length);
    for (let i = 0; i < want.length; i++) {
      const x = a.sums[i] as number;
      const y = want[i] as number;
      values++;
      if (x !== y && !(Number.isNaN(x) && Number.isNaN(y))) differing++;
      err += (x - y) ** 2;
      ref2 += y * y;
    }
  }
  // an all-zero reference would make agreement meaningless
  assert.ok(ref2 > 0, 'the audited pairs have non-zero sums');
  return { values, differing, nmse: err / ref2 };
}

function fallbackLines(server: RunningServer): string[] {
  return logLines(server.log(), FALLBACK_LINE);
}

for (const c of MODELS) {
  const name = `${c.arch} ${GGMLType[c.type]}`;

  test(`${name}: serving nothing and auditing every pair: one AUDIT per request, sums bit-identical to ggml-exact, stock's tokens`, async (t: TestContext) => {
    const m = await testModel(config(c));
    const want = await stock(m);
    await withDispatch(m, 'none', 'all-unserved', async (server, d) => {
      const mark = d.mark();
      const auditMark = d.stats.audits.length;
      const got = await completeGreedy(server.url, PROMPT, N, m.ban);
      assert.deepEqual(got.tokens, want.tokens, 'auditing changes nothing the coordinator computes');
      const requests = d.since(mark);
      const audits = d.stats.audits.slice(auditMark);
      assert.ok(requests.length >= planModel(m.config, nVocab).moeLayers.length * (N - 1), `${requests.length} requests`);
      assert.equal(audits.length, requests.length, 'an AUDIT for every request');
      for (const [i, a] of audits.entries()) {
        const r = requests[i];
        assert.ok(r && a.layer === r.layer && a.nTokens === r.nTokens, `audit ${i} belongs to request ${i}`);
        assert.equal(a.nAudit, a.nTokens * a.nUsed, 'every pair audited');
      }
      const agree = await agreement(d, audits);
      t.diagnostic(`${audits.length} audits, ${agree.values} values: ${agree.differing} differ from ggml-exact, NMSE ${agree.nmse}`);
      assert.equal(agree.differing, 0, `audit sums differ from ggml-exact in ${agree.differing} of ${agree.values} values`);
      assert.deepEqual(d.stats.protocolErrors, []);
      assert.deepEqual(fallbackLines(server), [], 'no local fallback');
    });
  });

  test(`${name}: LOCAL answers auditing k = 0 only; half served with a random half of the rest audited: sums of exactly those pairs`, async (t: TestContext) => {
    const m = await testModel(config(c));
    const want = await stock(m);
    await withDispatch(
      m,
      'local',
      (_t, k) => k === 0,
      async (server, d) => {
        const got = await completeGreedy(server.url, PROMPT, N, m.ban);
        assert.deepEqual(got.tokens, want.tokens);
        const audits = d.stats.audits;
        assert.ok(audits.length > 0 && audits.length === d.stats.auditsAsked, `${audits.length} audits of ${d.stats.auditsAsked} asked`);
        for (const a of audits) assert.equal(a.nAudit, a.nTokens, 'one pair (k = 0) per token');
        const agree = await agreement(d, audits);
        t.diagnostic(`k = 0: ${audits.length} audits, ${agree.differing} of ${agree.values} values differ, NMSE ${agree.nmse}`);
        assert.equal(agree.differing, 0);
        // the subset matters: the sums over every pair are not what came back
        const a = audits[0] as AuditRecord;
        const all = await d.auditReference({ ...a, flags: new Uint8Array(a.flags.length).fill(1) });
        assert.ok(
          all.some((x, i) => x !== a.sums[i]),
          'k = 0 sums differ from all-pair sums',
        );
        assert.deepEqual(d.stats.protocolErrors, []);
      },
    );
    await withDispatch(m, 'half', 0.5, async (server, d) => {
      const mark = d.mark();
      const got = await completeGreedy(server.url, PROMPT, N, m.ban);
      assert.deepEqual(got.tokens, want.tokens);
      const requests = d.since(mark);
      const audited = requests.reduce((s, r) => s + r.audited, 0);
      const notServed = requests.reduce((s, r) => s + r.notServed, 0);
      assert.ok(audited > 0 && audited < notServed, `${audited} of ${notServed} unserved pairs audited`);
      const audits = d.stats.audits;
      assert.equal(audits.length, d.stats.auditsAsked);
      assert.equal(
        audits.reduce((s, a) => s + a.nAudit, 0),
        d.stats.log.reduce((s, r) => s + r.audited, 0),
        'every asked pair reported',
      );
      const agree = await agreement(d, audits);
      t.diagnostic(`half served, 0.5 of the rest audited: ${audits.length} audits, ${agree.differing} of ${agree.values} differ`);
      assert.equal(agree.differing, 0);
      assert.deepEqual(d.stats.protocolErrors, []);
      assert.deepEqual(fallbackLines(server), [], 'no local fallback');
    });
  });
}

for (const version of [2, 1] as const) {
  test(`v${version}: an audit flag on a ${version === 2 ? 'claimed' : 'served'} pair is an invalid frame: the coordinator drops the connection, sends no AUDIT, computes locally; stock tokens`, async () => {
    const c = MODELS[1] as (typeof MODELS)[number];
    const m = await testModel(config(c));
    const want = await stock(m);
    await withDispatch(
      m,
      'half',
      'served-too',
      async (server, d) => {
        const got = await completeGreedy(server.url, PROMPT, N, m.ban);
        assert.deepEqual(got.tokens, want.tokens, 'the fallback computes every pair locally');
        assert.ok(d.stats.auditsAsked >= 1, 'the invalid audit was sent');
        assert.equal(d.stats.audits.length, 0, 'no AUDIT answers an invalid response');
        // the coordinator writes the line through a pipe: wait for it (a CI run once read the log before it was there)
        const why = `audited pair also ${version === 2 ? 'claimed' : 'served'}`;
        await waitForLog(
          () => server.log(),
          (log) => logLines(log, FALLBACK_LINE).some((l) => l.includes(why)),
          undefined,
          `why the coordinator dropped the connection ("${why}")`,
        );
        // one dropped connection per incident, then a cool-down: far fewer requests than one per layer and token
        assert.ok(d.stats.requests < N, `${d.stats.requests} requests while the dispatcher kept answering invalidly`);
      },
      version,
    );
  });
}
