/**
 * Protocol version 3 (standing offers, docs/dispatch-protocol.md "Version 3") with the real linkcpp-server against a
 * test dispatcher that speaks 3 (harness/test-dispatcher.ts `maxVersion` 3, `offer`): the coordinator's side of the
 * exchange and exactness, each run's token ids compared with the stock server's (no dispatch).
 *  - An offer of a = 1 over every expert whose line a·N − b exceeds every request's N pairs (b = −16): HELLO offered 3
 *    and agreed 3; each layer's first REQUEST on the connection is a v2 exchange (CLAIM, then the RESULT that brings
 *    the offer); later REQUESTs arrive pre-claimed, each with c = min(max_pairs, covered, ⌊a·N − b⌋) = N pairs, the
 *    dispatcher writes no CLAIM for them and the coordinator waits for none (no fault); its stats line counts them
 *    (`preclaimed`, no `offer_local`); stock tokens.
 *  - Pre-claimed pairs the RESULT does not serve (every other one): the coordinator computes them; no fault.
 *  - An offer whose line takes nothing (b far above any request's pairs): every layer evaluation within the ttl is
 *    computed with no REQUEST (`offer_local`; with the REQUESTs, every evaluation of the completion), and the next
 *    REQUEST of a layer comes only after the ttl, in a v2 exchange (a second completion after it); stock tokens.
 *  - A coordinator told to offer 2 and the v3 dispatcher agree on 2: CLAIM exchanges only, no offer.
 *  - Invalid v3 frames: an offer out of range (a = 2; ttl 5000 ms) and a RESULT serving a pair the REQUEST did not
 *    pre-claim. The coordinator logs the fault, drops the connection, computes locally; stock tokens.
 * One small qwen3moe model (the same as expert-dispatch.test.ts's version cases), 16 tokens per run.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { completeGreedy, startServer, type Completion, type RunningServer } from '../../harness/linkcpp.ts';
import { logLines, waitForLog } from '../../harness/log-wait.ts';
import { TOP2_OF_8, testModel } from '../../harness/models.ts';
import { TestDispatcher, type DispatcherBehaviour, type RequestRecord, type TestOffer } from '../../harness/test-dispatcher.ts';
import { FALLBACK_LINE, expectedRequests, promptTokens } from '../../harness/dispatch-checks.ts';
import { planModel } from '../../tools/model-arch.ts';
import { buildVocabulary } from '../../tools/tokenizer.ts';
import { parseCoordinatorStats, type CoordinatorStats } from '../../bench/elastic/coordinator-stats.ts';

const dir = await mkdtemp(join(tmpdir(), 'es-xd3-'));
after(() => rm(dir, { recursive: true, force: true }));

const m = await testModel(TOP2_OF_8);
const MOE_LAYERS = planModel(m.config, buildVocabulary().tokens.length).moeLayers;
const PROMPT = 'The swarm serves';
const N = 16;
const STATS = /expert-dispatch: stats /;
/** The largest max_pairs an offer may carry (8192 rows × 64 experts). */
const ANY_PAIRS = 8192 * 64;

/** The stock server's tokens (no dispatch; `--no-repack-exps` as `--expert-dispatch` keeps the expert weights). */
let want: Completion;
before(async () => {
  const server = await startServer({ model: m.path, args: ['--no-repack-exps'] });
  try {
    want = await completeGreedy(server.url, PROMPT, N, m.ban);
    assert.equal(want.tokens.length, N);
  } finally {
    await server.stop();
  }
});

/**
 * One completion of PROMPT through a coordinator connected to a v3 test dispatcher (`setup` before the coordinator
 * starts), with the stats line on; the token ids must be stock's.
 */
async function run<T>(
  name: string,
  behaviour: DispatcherBehaviour,
  setup: (d: TestDispatcher) => void,
  check: (server: RunningServer, d: TestDispatcher, got: Completion, mark: number) => Promise<T>,
  env: Record<string, string> = {},
): Promise<T> {
  const sock = join(dir, `${name}.sock`);
  const d = await TestDispatcher.start(sock, m.path, behaviour);
  d.maxVersion = 3;
  setup(d);
  const server = await startServer({
    model: m.path,
    env: { LINKCPP_EXPERT_DISPATCH_STATS_MS: '1', ...env },
    args: ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', '2000', '-lv', '4'],
  });
  try {
    await d.waitForHello();
    const mark = d.mark();
    const got = await completeGreedy(server.url, PROMPT, N, m.ban);
    assert.deepEqual(got.tokens, want.tokens, 'the token ids are stock');
    return await check(server, d, got, mark);
  } finally {
    await server.stop();
    await d.stop();
  }
}

/**
 * The coordinator's last stats line, once one counts at least `min` exchanges (bounded wait). Its figures are sums
 * since the start at the moment it was written: the line is rate-limited and written only after an exchange, so the
 * last exchanges may be missing from it; it is compared with the first `exchanges` requests the dispatcher answered
 * (one slot: in order), as coordinator-stats.test.ts does.
 */
async function lastStats(server: RunningServer, min: number): Promise<CoordinatorStats> {
  const last = (log: string) =>
    logLines(log, STATS)
      .map((l) => parseCoordinatorStats(l))
      .filter((x) => x !== undefined)
      .at(-1);
  const log = await waitForLog(server.log, (l) => (last(l)?.exchanges ?? 0) >= min, undefined, `a stats line counting ≥ ${min} exchanges`);
  return last(log) as CoordinatorStats;
}

/** The records of each layer, in order. */
function byLayer(log: RequestRecord[]): Map<number, RequestRecord[]> {
  const out = new Map<number, RequestRecord[]>();
  for (const r of log) out.set(r.layer, [...(out.get(r.layer) ?? []), r]);
  return out;
}

test('an offer of every pair (a = 1, every expert): v3 agreed, REQUESTs after the first of each layer pre-claimed whole, no CLAIM for them, stock tokens', async () => {
  // b = −16: ⌊a·N − b⌋ = N + 16, so c = covered = N (the line is not what limits it, by a margin of 16 pairs)
  const offer: TestOffer = { a: 1, b: -16, maxPairs: ANY_PAIRS, ttlMs: 1000 };
  await run(
    'preclaim',
    'all',
    (d) => (d.offer = offer),
    async (server, d) => {
      assert.deepEqual(d.stats.versions, [{ offered: 3, agreed: 3 }], 'HELLO offered 3, HELLO_ACK agreed 3, one connection');
      await waitForLog(server.log, /expert-dispatch: connected to dispatcher at .*, protocol version 3/);
      assert.deepEqual(d.stats.protocolErrors, []);
      const log = d.stats.log;
      assert.ok(
        log.every((r) => r.version === 3),
        'every REQUEST on version 3',
      );
      for (const [layer, rs] of byLayer(log)) {
        const [first, ...rest] = rs as [RequestRecord, ...RequestRecord[]];
        assert.equal(first.preclaimed, 0, `layer ${layer}: the first REQUEST holds no offer yet (a v2 exchange)`);
        assert.equal(first.claimed, first.nTokens * first.nUsed, `layer ${layer}: the first REQUEST's CLAIM took every pair`);
        assert.ok(rest.length > 0 && rest.some((r) => r.preclaimed > 0), `layer ${layer}: later REQUESTs pre-claimed`);
      }
      const pre = log.filter((r) => r.preclaimed > 0);
      // c = min(max_pairs, covered, ⌊a·N − b⌋) = N: every expert covered, the line N + 16
      for (const r of pre) {
        const pairs = r.nTokens * r.nUsed;
        assert.ok(r.preclaimed === pairs && r.served === pairs, `pre-claimed ${r.preclaimed}, served ${r.served} of ${pairs}`);
      }
      assert.ok(pre.length >= log.length / 2, `${pre.length} of ${log.length} REQUESTs pre-claimed`);
      assert.equal(d.stats.claims, log.length - pre.length, 'a CLAIM for each REQUEST without pre-claims, none for the others');
      assert.equal(d.stats.offers, log.length, 'every RESULT carried the offer');
      assert.deepEqual(logLines(server.log(), FALLBACK_LINE), [], 'the coordinator waited for no CLAIM (no fault)');
      const s = await lastStats(server, 1);
      const seen = log.slice(0, s.exchanges);
      assert.ok(s.preclaimed > 0, `the stats line counts pre-claimed REQUESTs: ${s.preclaimed}`);
      assert.deepEqual(
        {
          preclaimed: s.preclaimed,
          offerLocal: s.offerLocal,
          claimed: s.claimed,
          pairsClaimed: s.pairsClaimed,
          pairsServed: s.pairsServed,
        },
        {
          preclaimed: seen.filter((r) => r.preclaimed > 0).length,
          offerLocal: 0,
          claimed: seen.length,
          pairsClaimed: seen.reduce((n, r) => n + r.claimed, 0),
          pairsServed: seen.reduce((n, r) => n + r.served, 0),
        },
        'the stats line counts the pre-claimed REQUESTs, and no layer left local',
      );
    },
  );
});

test('an offer of experts [0, 4) and at most 5 pairs: each pre-claim takes c = min(max_pairs, covered, ⌊a·N − b⌋), the first covered pairs in (t, k) order; stock tokens', async () => {
  const offer: TestOffer = { a: 1, b: -16, maxPairs: 5, ttlMs: 1000, experts: [0, 4] };
  await run(
    'cover',
    'all',
    (d) => {
      d.offer = offer;
      d.capture = true;
    },
    async (server, d) => {
      // the same prompt again within the ttl: its prompt evaluation (more pairs than max_pairs) pre-claimed too
      const again = await completeGreedy(server.url, PROMPT, 2, m.ban);
      assert.deepEqual(again.tokens, want.tokens.slice(0, 2), 'the token ids are stock');
      assert.deepEqual(d.stats.protocolErrors, []);
      const pre = d.stats.log.filter((r) => r.preclaimed > 0);
      assert.ok(pre.some((r) => r.nTokens > 1) && pre.some((r) => r.nTokens === 1), 'prompt and generation REQUESTs pre-claimed');
      const [begin, end] = offer.experts as [number, number];
      for (const r of pre) {
        const ids = r.ids as Int32Array;
        const pairs = r.nTokens * r.nUsed;
        const covered = ids.filter((e) => e >= begin && e < end).length;
        const c = Math.min(offer.maxPairs, covered, Math.floor(offer.a * pairs - offer.b));
        const flags = new Uint8Array(pairs);
        for (let p = 0, taken = 0; p < pairs && taken < c; p++) {
          if ((ids[p] as number) >= begin && (ids[p] as number) < end) {
            flags[p] = 1;
            taken++;
          }
        }
        assert.deepEqual(
          { preclaimed: r.preclaimed, flags: [...(r.preclaimedFlags as Uint8Array)], served: r.served },
          { preclaimed: c, flags: [...flags], served: c },
          `layer ${r.layer}, ${r.nTokens} tokens, ids ${[...ids].join(' ')}`,
        );
      }
      assert.ok(
        pre.some((r) => r.preclaimed === offer.maxPairs),
        'max_pairs cut a REQUEST',
      );
      assert.deepEqual(logLines(server.log(), FALLBACK_LINE), [], 'no fault');
    },
  );
});

test('pre-claimed pairs not served (every other one, as if its workers were late): the coordinator computes them after the RESULT; no fault, stock tokens', async () => {
  await run(
    'late',
    'late-half',
    (d) => (d.offer = { a: 1, b: -16, maxPairs: ANY_PAIRS, ttlMs: 1000 }),
    async (server, d) => {
      assert.deepEqual(d.stats.protocolErrors, []);
      const pre = d.stats.log.filter((r) => r.preclaimed > 0);
      assert.ok(pre.length > 0, 'REQUESTs pre-claimed');
      for (const r of pre) {
        assert.ok(r.served > 0 && r.served < r.preclaimed, `served ${r.served} of ${r.preclaimed} pre-claimed pairs`);
      }
      assert.deepEqual(logLines(server.log(), FALLBACK_LINE), [], 'pre-claimed pairs not served are no fault');
    },
  );
});

test('an offer whose line takes nothing: no REQUEST for those layers until its ttl passes (offer_local), stock tokens', async () => {
  const ttlMs = 300;
  await run(
    'nothing',
    'all',
    (d) => (d.offer = { a: 1, b: 100_000, maxPairs: ANY_PAIRS, ttlMs }),
    async (server, d, got, mark) => {
      // the first completion: each layer's first REQUEST a v2 exchange, the rest of its evaluations (within the ttl)
      // computed under the offer with no REQUEST
      const first = d.since(mark).length;
      const evaluations = expectedRequests(MOE_LAYERS, m.config.layers, promptTokens(got), N).length;
      assert.ok(first < evaluations, `${first} REQUESTs for ${evaluations} layer evaluations`);
      // past the ttl: the next evaluation of each layer asks again
      await new Promise((r) => setTimeout(r, ttlMs + 100));
      const again = await completeGreedy(server.url, PROMPT, 2, m.ban);
      assert.deepEqual(again.tokens, want.tokens.slice(0, 2), 'the token ids are stock');
      assert.deepEqual(d.stats.versions, [{ offered: 3, agreed: 3 }]);
      assert.deepEqual(d.stats.protocolErrors, []);
      const log = d.stats.log;
      assert.ok(log.length > first && log.every((r) => r.preclaimed === 0), 'a line ≤ 0 pre-claims nothing: only v2 exchanges');
      // each layer's offer came with the RESULT answered at answeredMs; the coordinator read it after that, so its
      // next REQUEST for the layer comes at least ttl later
      for (const [layer, rs] of byLayer(log)) {
        for (let i = 1; i < rs.length; i++) {
          const gap = (rs[i] as RequestRecord).receivedMs - (rs[i - 1] as RequestRecord).answeredMs;
          assert.ok(gap >= ttlMs, `layer ${layer}: a REQUEST ${gap.toFixed(1)} ms after the offer, within its ${ttlMs} ms ttl`);
        }
      }
      assert.deepEqual(logLines(server.log(), FALLBACK_LINE), [], 'no fault');
      // a line written at the second completion's first exchange or later counts the first completion's local layers
      const s = await lastStats(server, first + 1);
      assert.ok(
        s.offerLocal >= evaluations - first,
        `layers computed under the offer with no REQUEST: ${s.offerLocal}, at least ${evaluations - first} expected`,
      );
      assert.equal(s.preclaimed, 0);
    },
  );
});

test('a coordinator told to offer 2 (LINKCPP_EXPERT_DISPATCH_VERSION=2) and a v3 dispatcher agree on 2: no offer, no pre-claim; stock tokens', async () => {
  await run(
    'forced-2',
    'all',
    (d) => (d.offer = { a: 1, b: -16, maxPairs: ANY_PAIRS, ttlMs: 1000 }),
    async (server, d) => {
      assert.deepEqual(d.stats.versions, [{ offered: 2, agreed: 2 }]);
      await waitForLog(server.log, /expert-dispatch: connected to dispatcher at .*, protocol version 2/);
      assert.deepEqual(d.stats.protocolErrors, []);
      const log = d.stats.log;
      assert.ok(log.length > 0 && log.every((r) => r.version === 2 && r.preclaimed === 0), 'v2 exchanges only');
      assert.equal(d.stats.claims, log.length, 'a CLAIM for every REQUEST');
      assert.equal(d.stats.offers, 0, 'no offer on a v2 connection');
      const s = await lastStats(server, 1);
      assert.deepEqual({ preclaimed: s.preclaimed, offerLocal: s.offerLocal }, { preclaimed: 0, offerLocal: 0 });
    },
    { LINKCPP_EXPERT_DISPATCH_VERSION: '2' },
  );
});

/** Invalid v3 frames, how the test dispatcher makes each, and the reason the coordinator must log. */
const INVALID_V3: Array<{ name: string; behaviour: DispatcherBehaviour; setup: (d: TestDispatcher) => void; why: RegExp }> = [
  {
    name: 'an offer with a = 2',
    behaviour: 'invalid-offer',
    setup: (d) => (d.invalidOffer = { a: 2 }),
    why: /offer out of range/,
  },
  {
    name: 'an offer with a ttl of 5000 ms',
    behaviour: 'invalid-offer',
    setup: (d) => (d.invalidOffer = { ttlMs: 5000 }),
    why: /offer out of range/,
  },
  {
    name: 'a RESULT serving a pair that was not pre-claimed',
    behaviour: 'serve-unpreclaimed',
    // a·N − b with a = 0.5: half of each REQUEST's pairs pre-claimed, the other half served all the same
    setup: (d) => (d.offer = { a: 0.5, b: 0, maxPairs: ANY_PAIRS, ttlMs: 1000 }),
    why: /served pair that was not claimed/,
  },
];

for (const { name, behaviour, setup, why } of INVALID_V3) {
  test(`${name}: the coordinator logs the fault, drops the connection, computes locally; stock tokens`, async () => {
    await run(`bad-${INVALID_V3.findIndex((c) => c.name === name)}`, behaviour, setup, async (server, d) => {
      assert.ok(d.stats.requests >= 1, 'the dispatcher was asked');
      if (behaviour === 'invalid-offer') assert.ok(d.stats.offers >= 1, 'a RESULT carried the invalid offer');
      else
        assert.ok(
          d.stats.log.some((r) => r.preclaimed > 0 && r.preclaimed < r.nTokens * r.nUsed),
          'a REQUEST pre-claimed some of its pairs, not all',
        );
      const incidents = logLines(await waitForLog(server.log, FALLBACK_LINE, undefined, 'the local fallback'), FALLBACK_LINE);
      assert.match(incidents[0] as string, why);
      assert.ok(d.stats.versions.length >= 1 && d.stats.versions.every((v) => v.agreed === 3), JSON.stringify(d.stats.versions));
    });
  });
}
