/**
 * Untrusted volunteers (hub/dispatch/trust.ts), end to end: a hub with its real coordinator (linkcpp-server,
 * `--dispatch always`, protocol v2) and the production trust defaults (probation 20 audited items, spot audits 2%),
 * one MoE layer, and in-process volunteer clients (the page's client in Node, wasm backend) whose answers a `tamper`
 * seam falsifies. Each hostile volunteer holds the layer alone while a completion runs; each must be quarantined —
 * by a failed audit, or refused at the frame (NaN) — with the request's token ids equal to the coordinator alone's,
 * no credit to its wallet, the reason in the event log, and its wallet refused when it comes back under a new worker
 * id. An honest volunteer beside them passes its probation and is credited.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WebSocket } from 'ws';
import { DEFAULT_TRUST } from '../../hub/dispatch/trust.ts';
import { type TamperAnswer, type TamperContext, createVolunteerClient, type SocketFactory } from '../../volunteer/client.ts';
import { WIRE_HEADER_BYTES, encodeResult } from '../../protocol/channel/index.ts';
import { MemoryIdentityStore } from '../../volunteer/identity.ts';
import { nodeEnvironment } from '../../volunteer/node/environment.ts';
import { NoShardCache } from '../../volunteer/shard-cache.ts';
import type { VolunteerControls, VolunteerState } from '../../volunteer/state.ts';
import { mulberry32 } from '../../shaders/random.ts';
import { testModel } from '../../harness/models.ts';
import {
  QWEN_Q4K,
  baselineIds,
  completionIds,
  dispatchMap,
  pairOutcomes,
  startSwarmHub,
  waitForCoverage,
  type MapRow,
  type SwarmHub,
  until,
} from '../../harness/swarm.ts';

/** One MoE layer of 8 experts: one volunteer holds it all, so each hostile one is the only worker while it runs. */
const CONFIG = { ...QWEN_Q4K, layers: 1 };
const N = 24;

type Tamper = (sums: Float32Array, ctx: TamperContext) => TamperAnswer | Promise<TamperAnswer>;

/** The hostile volunteers of issue 14, each a `tamper` over the honest sums. */
function hostile(): Array<{ name: string; tamper: Tamper }> {
  const rand = mulberry32(14);
  let stale: Float32Array | null = null;
  return [
    {
      name: 'scaled',
      tamper: (s) => {
        for (let i = 0; i < s.length; i++) s[i] = (s[i] as number) * 1.01;
        return undefined;
      },
    },
    {
      // The same rows with the next expert of the slice: an honest computation of the wrong thing.
      name: 'other-expert',
      tamper: (_s, ctx) => ctx.compute({ ...ctx.frame, localExpert: ctx.frame.localExpert.map((e) => (e + 1) % CONFIG.nExpert) }),
    },
    { name: 'zeros', tamper: (s) => new Float32Array(s.length) },
    {
      // Our encoder refuses non-finite sums, so a hostile client writes the frame itself: a valid one, then a NaN.
      name: 'nan',
      tamper: (s, { frame }) => {
        const bytes = encodeResult({
          workId: frame.workId,
          nRows: frame.nRows,
          nEmbd: frame.nEmbd,
          sums: s,
          encoding: 'f32',
          computeUs: 1,
        });
        new DataView(bytes.buffer, bytes.byteOffset).setFloat32(WIRE_HEADER_BYTES + 4 * (s.length >> 1), Number.NaN, true);
        return bytes;
      },
    },
    {
      // Replays its last answer of the same size (decode answers are all one row).
      name: 'stale',
      tamper: (s) => {
        const out = stale && stale.length === s.length ? stale : undefined;
        stale = Float32Array.from(s);
        return out;
      },
    },
    {
      name: 'noise',
      tamper: (s) => {
        let rms = 0;
        for (const x of s) rms += x * x;
        rms = Math.sqrt(rms / s.length);
        for (let i = 0; i < s.length; i++) s[i] = (s[i] as number) + (rand() - 0.5) * 0.02 * rms;
        return undefined;
      },
    },
    {
      // Never loaded the slice: made-up sums of the right size.
      name: 'no-slice',
      tamper: (s) => Float32Array.from(s, () => (rand() - 0.5) * 0.1),
    },
  ];
}

/** Hostile ones compute with the wasm fallback (their answers are never used); the honest one with WebGPU (Dawn): Q4_K bit for bit. */
function client(hub: SwarmHub, workerId: string, identity: MemoryIdentityStore, tamper?: Tamper): VolunteerControls {
  const c = createVolunteerClient({
    hubUrl: hub.url,
    environment: () => nodeEnvironment(tamper ? 'wasm' : 'webgpu'),
    identity,
    cache: new NoShardCache(),
    WebSocket: WebSocket as unknown as SocketFactory,
    workerId,
    ...(tamper ? { tamper } : {}),
  });
  c.join({ memoryBudgetBytes: 256 << 20 });
  return c;
}

async function events(hub: SwarmHub, kind: string): Promise<Array<{ kind: string; detail: string }>> {
  const r = await fetch(`${hub.url}/api/events?kind=${kind}&limit=200`);
  return ((await r.json()) as { events: Array<{ kind: string; detail: string }> }).events;
}

async function creditOf(hub: SwarmHub, wallet: string): Promise<number> {
  return ((await (await fetch(`${hub.url}/api/credit?wallet=${wallet}`)).json()) as { credit_pairs: number }).credit_pairs;
}

function stateWhere(c: VolunteerControls, ok: (s: VolunteerState) => boolean, ms: number, what: string): Promise<VolunteerState> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`timed out waiting for ${what}; state ${JSON.stringify(c.state)}`));
    }, ms);
    const off = c.on('state', (s) => {
      if (!ok(s)) return;
      clearTimeout(timer);
      queueMicrotask(() => off());
      resolve(s);
    });
  });
}

test('hostile volunteers are quarantined with their wallets, tokens stay the coordinator’s, they earn no credit', {
  timeout: 900_000,
}, async () => {
  const m = await testModel(CONFIG);
  const want = await baselineIds(m, N);
  assert.ok(new Set(want).size >= 8, `the baseline must not collapse: ${new Set(want).size} distinct tokens`);
  const hub = await startSwarmHub(m.path, 'always', { trust: { ...DEFAULT_TRUST } });
  const summary: string[] = [];
  try {
    for (const h of hostile()) {
      let answers = 0;
      const identity = new MemoryIdentityStore();
      const tamper: Tamper = (s, ctx) => {
        answers++;
        return h.tamper(s, ctx);
      };
      const c = client(hub, h.name, identity, tamper);
      try {
        await waitForCoverage(hub.url, hub.model, [0], CONFIG.nExpert, 1, 120_000);
        // Completions until it is caught (a layer the hub had no worker for stays quiet for up to 1 s, and this tiny
        // model decodes 24 tokens in less): every one must have the coordinator's tokens.
        let caught: { detail: string } | undefined;
        for (let round = 0; round < 10 && !caught; round++) {
          const got = await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban);
          assert.deepEqual(got, want, `${h.name}: the tokens are the coordinator's while it runs (round ${round})`);
          caught = await until(`${h.name} quarantined`, answers > 0 ? 5_000 : 1_500, async () =>
            (await events(hub, 'quarantine')).find((e) => e.detail.startsWith(`${h.name}: `)),
          ).catch(() => undefined);
        }
        assert.ok(caught, `${h.name} quarantined (${answers} answers)`);
        assert.ok(answers <= 20, `${h.name}: caught within 20 answers (${answers})`);
        assert.match(caught.detail, /by the trust checks/);
        const wallet = c.wallet as string;
        assert.ok(wallet, `${h.name} logged in`);
        assert.equal(await creditOf(hub, wallet), 0, `${h.name}: no credit`);
        summary.push(`${h.name}: caught after ${answers} answers — ${caught.detail}`);
      } finally {
        await c.leave();
      }
      // Back under another worker id with the same identity (so the same wallet): refused at its hello.
      const again = client(hub, `${h.name}-again`, identity);
      try {
        const s = await stateWhere(
          again,
          (s) => (s.kind === 'failed' && s.code === 'QUARANTINED') || (s.kind === 'retrying' && /quarantin/i.test(s.reason)),
          30_000,
          `${h.name}-again refused`,
        );
        assert.ok(s, `${h.name}: its wallet is refused`);
        assert.ok(!(await dispatchMap(hub.url, hub.model)).some((r) => r.worker_id === `${h.name}-again`));
      } finally {
        await again.leave();
      }
    }
    // An honest volunteer passes its probation (20 audited items, none used), then serves and is credited.
    const identity = new MemoryIdentityStore();
    const honest = client(hub, 'honest', identity);
    try {
      await waitForCoverage(hub.url, hub.model, [0], CONFIG.nExpert, 1, 120_000);
      const honestRow = async (): Promise<MapRow | undefined> =>
        (await dispatchMap(hub.url, hub.model)).find((r) => r.worker_id === 'honest');
      const workersRow = async (id: string) =>
        (
          (await (await fetch(`${hub.url}/api/dashboard/workers?model=m&limit=50`)).json()) as {
            rows: Array<{ id: string; state: string; trust: string }>;
          }
        ).rows.find((w) => w.id === id);
      assert.equal((await workersRow('honest'))?.trust, 'probation 0/20', 'the dashboard shows a newcomer on probation');
      const before = await pairOutcomes(hub.url, hub.model);
      let row: MapRow | undefined;
      // Its probation: every item audited, none used (the comparisons lag the completion that sent them).
      for (let round = 0; round < 20 && (row?.audits_passed ?? 0) < DEFAULT_TRUST.probation; round++) {
        const got = await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban);
        assert.deepEqual(got, want, `the honest volunteer on probation: the same tokens (round ${round})`);
        await new Promise((r) => setTimeout(r, 300));
        row = await honestRow();
      }
      // Trusted: its answers are used, with the coordinator's tokens still.
      assert.deepEqual(await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban), want, 'the honest volunteer, trusted');
      row = await honestRow();
      assert.ok(row && row.audits_passed >= DEFAULT_TRUST.probation, `probation passed: ${JSON.stringify(row)}`);
      assert.equal(row.audits, row.audits_passed, 'every audit passed');
      // The dashboard's workers: the honest one trusted, the hostile ones listed as quarantined.
      assert.equal((await workersRow('honest'))?.trust, 'trusted');
      for (const h of hostile()) assert.equal((await workersRow(h.name))?.state, 'quarantined', h.name);
      const after = await pairOutcomes(hub.url, hub.model);
      const served = (after.served as number) - (before.served as number);
      assert.ok(served > 0, `its answers are used once trusted: ${served} pairs served`);
      const credit = await until('the honest wallet credited', 10_000, async () => {
        const c = await creditOf(hub, honest.wallet as string);
        return c > 0 ? c : undefined;
      });
      summary.push(
        `honest: ${row.audits_passed} audits passed (NMSE max ${row.audit_nmse_max}), ${served} pairs served, ${credit} credited`,
      );
      assert.equal((await events(hub, 'quarantine')).filter((e) => e.detail.startsWith('honest')).length, 0);
    } finally {
      await honest.leave();
    }
    for (const line of summary) console.log(`# ${line}`);
  } finally {
    await hub.close();
  }
});

/**
 * Correct, then wrong once trusted: caught by a spot audit after the fact. With --audit-rate 0.5 the first audited
 * wrong answer comes within a few items (the chance of 20 unaudited in a row is 1e-6); its answers until then were
 * used, so this test asserts the quarantine and the credit, and prints whether the tokens moved (docs/trust.md,
 * "Limits": a check after probation is after the fact).
 */
test('a volunteer that turns after its probation is caught by the spot audits and loses its unverified credit', {
  timeout: 600_000,
}, async () => {
  const m = await testModel(CONFIG);
  const want = await baselineIds(m, N);
  const hub = await startSwarmHub(m.path, 'always', { trust: { ...DEFAULT_TRUST, probation: 4, spotRate: 0.5 } });
  let answers = 0;
  let turnedAt: number | null = null;
  const c = client(hub, 'turncoat', new MemoryIdentityStore(), (s) => {
    answers++;
    if (turnedAt === null) return undefined;
    for (let i = 0; i < s.length; i++) s[i] = (s[i] as number) * 1.01;
    return undefined;
  });
  try {
    await waitForCoverage(hub.url, hub.model, [0], CONFIG.nExpert, 1, 120_000);
    let row: MapRow | undefined;
    for (let round = 0; round < 20 && (row?.audits_passed ?? 0) < 4; round++) {
      assert.deepEqual(await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban), want, 'on probation: the same tokens');
      await new Promise((r) => setTimeout(r, 300));
      row = (await dispatchMap(hub.url, hub.model)).find((r) => r.worker_id === 'turncoat');
    }
    assert.ok(row && row.audits_passed >= 4, `probation passed: ${JSON.stringify(row)}`);
    turnedAt = answers;
    await new Promise((r) => setTimeout(r, 1_200)); // the credit of its probation, flushed every second
    const creditAtTurn = await creditOf(hub, c.wallet as string);
    let caught: { detail: string } | undefined;
    const moved: number[] = [];
    for (let round = 0; round < 10 && !caught; round++) {
      const got = await completionIds(hub.url, hub.model, 'The swarm serves', N, m.ban);
      if (got.some((t, i) => t !== want[i])) moved.push(round);
      caught = await until('the turncoat quarantined', 1_500, async () =>
        (await events(hub, 'quarantine')).find((e) => e.detail.startsWith('turncoat: ')),
      ).catch(() => undefined);
    }
    assert.ok(caught, `quarantined after it turned (${answers - turnedAt} answers since)`);
    assert.ok(answers - turnedAt <= 20, `within 20 answers of turning: ${answers - turnedAt}`);
    assert.match(caught.detail, /audit mismatch/);
    await new Promise((r) => setTimeout(r, 1_200));
    assert.ok(creditAtTurn > 0, 'its probation was credited once passed');
    assert.equal(await creditOf(hub, c.wallet as string), creditAtTurn, 'nothing it answered after turning is credited');
    console.log(
      `# turncoat: ${answers - turnedAt} answers after it turned, then ${caught.detail}; completions whose tokens moved meanwhile: ${moved.length ? moved.join(', ') : 'none'}`,
    );
  } finally {
    await c.leave();
    await hub.close();
  }
});
