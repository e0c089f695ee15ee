/**
 * Kvasir's data path (issue 28), end to end: a hub with its real coordinator (linkcpp-server, `--dispatch always`) and
 * a test double of a Kvasir worker (harness/kvasir-worker.ts, written from Kvasir's documented wire) that logs in,
 * takes the one MoE layer, downloads it on Kvasir's proxy path, heartbeats with its relay url and dials
 * `/api/expert-relay`. Its answers are the dispatcher's like a volunteer's: token ids identical to `--dispatch off`,
 * pairs served by it, credited; refusals are closes (4401, 4404, 4403); hostile bytes close the relay (4400); with
 * the trust checks on, a lying double is caught by its probation audits and quarantined (its relay closed 4403), one
 * answering NaN likewise, and an honest one passes its probation, is used and credited. v1 and v2f16 on hubs of their
 * own.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { testModel } from '../../harness/models.ts';
import { KvasirWorkerDouble } from '../../harness/kvasir-worker.ts';
import {
  QWEN_Q4K,
  baselineIds,
  completionIds,
  dispatchMap,
  pairOutcomes,
  startSwarmHub,
  until,
  type SwarmHub,
} from '../../harness/swarm.ts';
import { DEFAULT_TRUST } from '../../hub/dispatch/trust.ts';
import { KVASIR_RELAY_CLOSE } from '../../protocol/kvasir-wire.ts';

/** One MoE layer of 8 experts: one double holds it all, so every routed pair is its or the coordinator's. */
const CONFIG = { ...QWEN_Q4K, layers: 1 };
const N = 24;
const m = await testModel(CONFIG);
const want = await baselineIds(m, N);

async function creditOf(hub: SwarmHub, wallet: string): Promise<number> {
  return ((await (await fetch(`${hub.url}/api/credit?wallet=${wallet}`)).json()) as { credit_pairs: number }).credit_pairs;
}

async function events(hub: SwarmHub, kind: string): Promise<Array<{ detail: string }>> {
  return ((await (await fetch(`${hub.url}/api/events?kind=${kind}&limit=200`)).json()) as { events: Array<{ detail: string }> }).events;
}

/** Joins the double to the hub's one layer and dials its relay; resolves once its heartbeat says wired. */
async function serving(hub: SwarmHub, w: KvasirWorkerDouble): Promise<void> {
  const a = await w.join(CONFIG.nExpert, hub.model);
  assert.deepEqual([a.layer, a.experts], [0, [0, CONFIG.nExpert]], 'the whole layer');
  await w.dial();
  assert.ok(w.opened, 'the relay is upgraded');
  await until('the double wired', 10_000, async () => {
    const r = await w.report(hub.model);
    return r.json.wired && r.json.replica ? true : undefined;
  });
  await quietWindow();
}

/** How the double's relay closed, within 20 s (code −1: it did not). */
const closeOf = (w: KvasirWorkerDouble): Promise<{ code: number; reason: string }> =>
  Promise.race([
    w.closed,
    new Promise<{ code: number; reason: string }>((r) => setTimeout(() => r({ code: -1, reason: 'still open' }), 20_000)),
  ]);

/** A layer the coordinator asked about while nobody covered it stays local for the dispatcher's quiet window (1 s). */
const quietWindow = (): Promise<void> => new Promise((r) => setTimeout(r, 1_200));

test('a Kvasir worker double serves over its relay (v2): the coordinator’s tokens, its pairs served and credited; refusals and hostile bytes close the relay', {
  timeout: 600_000,
}, async () => {
  const hub = await startSwarmHub(m.path, 'always');
  const w = new KvasirWorkerDouble({ hubUrl: hub.url, workerId: 'kv-v2' });
  const other = new KvasirWorkerDouble({ hubUrl: hub.url, workerId: 'kv-other' });
  try {
    await w.join(CONFIG.nExpert, hub.model);
    // The heartbeat with `relay:expert-kv-v2` holds its session: Kvasir's fields, not wired before the dial.
    assert.deepEqual(
      [w.lastCoverage?.session, w.lastCoverage?.listen_port, w.lastCoverage?.wired, w.lastCoverage?.replica],
      ['expert-kv-v2', Number(new URL(hub.url).port), false, false],
    );

    // Refusals: 101, then a close with Kvasir's code.
    await other.login();
    for (const [session, token, code] of [
      ['expert-kv-v2', 'not-a-token', KVASIR_RELAY_CLOSE.UNAUTHORIZED],
      ['expert-nobody', other.token, KVASIR_RELAY_CLOSE.UNKNOWN_SESSION],
      ['expert-kv-v2', other.token, KVASIR_RELAY_CLOSE.FORBIDDEN],
    ] as const) {
      await other.dial(session, token);
      assert.equal((await closeOf(other)).code, code, `${session} with ${token === other.token ? 'another wallet’s token' : token}`);
      assert.ok(other.opened, 'upgraded first');
    }

    await w.dial();
    const wired = await until('the double wired', 10_000, async () => {
      const r = await w.report(hub.model);
      return r.json.wired ? r.json : undefined;
    });
    assert.equal(wired.replica, true, 'a dialed relay makes it a replica');
    const row = (await fetch(`${hub.url}/api/expert-dispatch-map`).then((r) => r.json())).rows.find(
      (r: { worker_id: string }) => r.worker_id === 'kv-v2',
    );
    assert.deepEqual([row?.session, row?.listen_port], ['expert-kv-v2', Number(new URL(hub.url).port)]);
    await quietWindow();

    const before = await pairOutcomes(hub.url, hub.model);
    const got = await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban);
    assert.deepEqual(got, want, 'the token ids of --dispatch off');
    const after = await pairOutcomes(hub.url, hub.model);
    const served = (after.served as number) - (before.served as number);
    assert.ok(served > 0 && w.served.v2 > 0, `pairs served by the double: ${served} (${w.served.v2} v2 requests)`);
    assert.ok(
      served >= 0.5 * (served + (after.fallback as number) - (before.fallback as number)),
      `most pairs served: ${JSON.stringify(after)}`,
    );
    const credit = await until('its wallet credited', 10_000, async () => {
      const c = await creditOf(hub, w.wallet);
      return c > 0 ? c : undefined;
    });
    console.log(`# v2: ${served} pairs served by the double over ${w.served.v2} requests, ${credit} credited`);
    // Kvasir's sessions ledger: the dialed relay's bytes both ways.
    const sessionRow = async () =>
      (
        (await fetch(`${hub.url}/api/expert-relay/sessions`).then((r) => r.json())) as { sessions: Array<Record<string, unknown>> }
      ).sessions.find((x) => x.session === 'expert-kv-v2');
    const live = await sessionRow();
    assert.ok(live && live.wired === true && live.owner === w.wallet && live.opened !== null && live.closed === null, JSON.stringify(live));
    assert.ok((live.tcp2ws as number) > 0 && (live.ws2tcp as number) > 0, `bytes both ways: ${JSON.stringify(live)}`);

    // An answer with NaN in it: the relay is closed (4400), the pairs fall back, the tokens stay the coordinator's.
    w.tamper = (_req, a) => {
      a[a.length >> 1] = Number.NaN;
      return a;
    };
    assert.deepEqual(await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban), want, 'tokens with a NaN answer');
    assert.equal((await closeOf(w)).code, KVASIR_RELAY_CLOSE.BAD_BYTES, 'NaN closes the relay');
    const unwired = await w.report(hub.model);
    assert.deepEqual([unwired.json.wired, unwired.json.replica], [false, false], 'no relay, no replica');
    const shut = await sessionRow();
    assert.ok(shut && shut.wired === false && shut.closed !== null, `the ledger: closed (${JSON.stringify(shut)})`);
    w.tamper = undefined;

    // Hostile bytes with nothing owed: unsolicited bytes, a text message. Then an answer longer than owed.
    for (const [what, send] of [
      ['bytes that answer nothing', () => w.sendRaw(new Uint8Array(16))],
      ['a text message', () => w.sendText('hello')],
    ] as const) {
      await w.dial();
      send();
      const c = await closeOf(w);
      assert.equal(c.code, KVASIR_RELAY_CLOSE.BAD_BYTES, what);
      assert.ok(c.reason.length > 0, `${what}: a reason (${c.reason})`);
    }
    await w.dial();
    await quietWindow();
    w.tamper = (_req, a) => {
      const b = new Uint8Array(a.byteLength + 4);
      b.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
      return b;
    };
    assert.deepEqual(await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban), want, 'tokens with a long answer');
    assert.equal((await closeOf(w)).code, KVASIR_RELAY_CLOSE.BAD_BYTES, 'an answer longer than owed closes the relay');
  } finally {
    await other.stop();
    await w.stop();
    await hub.close();
  }
});

/**
 * A prompt's batch: a request of every prompt token's rows. In a one-layer model the MoE layer is the last, where
 * llama.cpp keeps only the rows it samples from (one), so the batch needs two layers: layer 0 sees all ~22 rows.
 */
const TWO = { ...QWEN_Q4K, layers: 2 };
const BATCH_PROMPT = 'Kvasir workers dial the hub over a relay and compute the routed experts of every token of a long prompt at once';
const BATCH_TOKENS = 4;

test('a prompt’s batch is served by Kvasir worker doubles (two layers, one each): the coordinator’s tokens, most batch pairs served', {
  timeout: 600_000,
}, async () => {
  const m2 = await testModel(TWO);
  const off = await startSwarmHub(m2.path, 'off');
  let want2: number[];
  try {
    want2 = await completionIds(off.url, off.model, BATCH_PROMPT, BATCH_TOKENS, m2.ban);
  } finally {
    await off.close();
  }
  const hub = await startSwarmHub(m2.path, 'always');
  const ws = [0, 1].map((i) => new KvasirWorkerDouble({ hubUrl: hub.url, workerId: `kv-batch-${i}` }));
  try {
    for (const w of ws) {
      await w.join(TWO.nExpert, hub.model);
      await w.dial();
    }
    assert.deepEqual(ws.map((w) => w.assignment?.layer).sort(), [0, 1], 'one layer each');
    await until('both wired', 10_000, async () => {
      const r = await Promise.all(ws.map((w) => w.report(hub.model)));
      return r.every((x) => x.json.wired) ? true : undefined;
    });
    await quietWindow();
    const before = await pairOutcomes(hub.url, hub.model);
    const got = await completionIds(hub.url, hub.model, BATCH_PROMPT, BATCH_TOKENS, m2.ban);
    const after = await pairOutcomes(hub.url, hub.model);
    assert.deepEqual(got, want2, 'the token ids of --dispatch off');
    const served = (after.served as number) - (before.served as number);
    const fallback = (after.fallback as number) - (before.fallback as number);
    const batchPairs = ws.reduce((n, w) => n + w.served.batchPairs, 0);
    const timings = ws.map((w) => `${w.workerId}: ${w.served.pairs} pairs in ${w.computeMs.toFixed(0)} ms`).join(', ');
    console.log(`# batch: ${served} pairs served, ${fallback} fell back; the doubles computed ${batchPairs} in batches (${timings})`);
    // The prompt's batch (~22 rows × 2 pairs on layer 0) is given to the double, and served, not fallen back.
    assert.ok(batchPairs >= 32, `the doubles were given the prompt's batch: ${batchPairs} pairs`);
    assert.ok(served >= 0.75 * (served + fallback), `most pairs served, the batch's among them: ${served} of ${served + fallback}`);
  } finally {
    for (const w of ws) await w.stop();
    await hub.close();
  }
});

for (const wire of ['v1', 'v2f16'] as const) {
  test(`a Kvasir worker double serves ${wire}`, { timeout: 600_000 }, async () => {
    const hub = await startSwarmHub(m.path, 'always', { relay: { wire } });
    const w = new KvasirWorkerDouble({ hubUrl: hub.url, workerId: `kv-${wire}` });
    try {
      await serving(hub, w);
      const before = await pairOutcomes(hub.url, hub.model);
      const got = await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban);
      const served = ((await pairOutcomes(hub.url, hub.model)).served as number) - (before.served as number);
      assert.ok(served > 0 && w.served[wire] > 0, `${wire}: ${served} pairs served over ${w.served[wire]} requests`);
      // v1 is the reduce form's f32 arithmetic on the hub's side; v2f16 rounds rows, probs and sums to f16.
      if (wire === 'v1') assert.deepEqual(got, want, 'v1: the token ids of --dispatch off');
      const same = got.filter((t, i) => t === want[i]).length;
      console.log(`# ${wire}: ${served} pairs served over ${w.served[wire]} requests, ${same} of ${N} tokens as --dispatch off`);
    } finally {
      await w.stop();
      await hub.close();
    }
  });
}

test('with the trust checks on: a lying double and a NaN double are quarantined, an honest one passes probation and is credited', {
  timeout: 900_000,
}, async () => {
  const hub = await startSwarmHub(m.path, 'always', { trust: { ...DEFAULT_TRUST } });
  try {
    for (const [name, tamper] of [
      [
        'kv-liar',
        (_r: unknown, a: Float32Array) => {
          for (let i = 0; i < a.length; i++) a[i] = (a[i] as number) * 1.01;
          return a;
        },
      ],
      [
        'kv-nan',
        (_r: unknown, a: Float32Array) => {
          a[0] = Number.NaN;
          return a;
        },
      ],
    ] as const) {
      const w = new KvasirWorkerDouble({ hubUrl: hub.url, workerId: name, tamper });
      try {
        await serving(hub, w);
        let caught: { detail: string } | undefined;
        for (let round = 0; round < 6 && !caught; round++) {
          assert.deepEqual(await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban), want, `${name}: tokens (round ${round})`);
          caught = await until(`${name} quarantined`, 3_000, async () =>
            (await events(hub, 'quarantine')).find((e) => e.detail.startsWith(`${name}: `)),
          ).catch(() => undefined);
        }
        assert.ok(caught, `${name} quarantined (${w.served.v2} answers)`);
        // The liar's relay is closed by its quarantine (4403); the NaN answer is refused at the bytes first (4400).
        const code = name === 'kv-nan' ? KVASIR_RELAY_CLOSE.BAD_BYTES : KVASIR_RELAY_CLOSE.FORBIDDEN;
        assert.equal((await closeOf(w)).code, code, `${name}: its relay closed ${code}`);
        assert.equal(await creditOf(hub, w.wallet), 0, `${name}: no credit`);
        const again = await w.report(hub.model);
        assert.deepEqual([again.status, again.json.code], [403, 'WORKER_QUARANTINED'], `${name}: its heartbeats refused`);
        console.log(`# ${name}: ${caught.detail}`);
      } finally {
        await w.stop();
      }
    }
    const honest = new KvasirWorkerDouble({ hubUrl: hub.url, workerId: 'kv-honest' });
    try {
      await serving(hub, honest);
      const row = async () => (await dispatchMap(hub.url, hub.model)).find((r) => r.worker_id === 'kv-honest');
      for (let round = 0; round < 6 && ((await row())?.audits_passed ?? 0) < DEFAULT_TRUST.probation; round++) {
        assert.deepEqual(await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban), want, `on probation (round ${round})`);
        await new Promise((r) => setTimeout(r, 300));
      }
      const r = await row();
      assert.ok(r && r.audits_passed >= DEFAULT_TRUST.probation && r.audits === r.audits_passed, `probation passed: ${JSON.stringify(r)}`);
      const before = await pairOutcomes(hub.url, hub.model);
      assert.deepEqual(await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban), want, 'trusted');
      const served = ((await pairOutcomes(hub.url, hub.model)).served as number) - (before.served as number);
      assert.ok(served > 0, `its answers are used once trusted: ${served}`);
      const credit = await until('the honest wallet credited', 10_000, async () => {
        const c = await creditOf(hub, honest.wallet);
        return c > 0 ? c : undefined;
      });
      console.log(`# kv-honest: ${r.audits_passed} audits passed (NMSE max ${r.audit_nmse_max}), ${served} pairs used, ${credit} credited`);
    } finally {
      await honest.stop();
    }
  } finally {
    await hub.close();
  }
});
