/**
 * What the hubs of a cluster tell each other beyond the market (issue 30; a real redis-server, harness/redis.ts):
 * every hub's events in one capped stream that `GET /api/events?scope=cluster` reads on any hub, each row with its hub;
 * each hub's saturation reading shared with a TTL, so that a hub whose own coordinator is idle recruits while another
 * hub's is saturated (cluster/cluster-feed.ts). And the credit outbox (cluster/credit-outbox.ts): a hub SIGKILLed with
 * credit waiting for Redis finds it in its `--state` at its restart and the credit arrives once.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testModel } from '../../harness/models.ts';
import { newVolunteer, testHub, type TestHub } from '../../harness/hub-fixtures.ts';
import { startRedis } from '../../harness/redis.ts';
import { HubStore } from '../../hub/store.ts';

const wide = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 32, ff: 32, nExpert: 256, nExpertUsed: 8, seed: 4 });

async function eventually<T>(what: string, check: () => Promise<T | undefined | false> | T | undefined | false, ms = 4_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

test("every hub's events on any hub (scope=cluster), and another hub's saturated coordinator recruits here", async () => {
  const redis = await startRedis();
  // A stand-in coordinator per hub: /a/slots and /b/slots, busy as the test sets them.
  const busy: Record<string, number> = { a: 0, b: 0 };
  const slots = createServer((req, res) => {
    const hub = /^\/(\w)\//.exec(req.url ?? '')?.[1] ?? '';
    res.end(JSON.stringify(Array.from({ length: 4 }, (_, i) => ({ id: i, is_processing: i < (busy[hub] ?? 0) }))));
  });
  await new Promise<void>((r) => slots.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(slots.address() as AddressInfo).port}`;
  const hubs: TestHub[] = [];
  try {
    for (const id of ['a', 'b']) {
      const t = await testHub({
        models: [{ path: wide.path, name: 'wide' }],
        externals: [{ name: 'wide', url: `${base}/${id}` }],
        poller: { intervalMs: 100, timeoutMs: 500 },
        saturation: { saturateAt: 2, maxReadingAgeMs: 2_000, targetBase: 0, boost: 1 },
        redis: redis.url,
        cluster: { hubId: `hub-${id}`, syncMs: 100 },
      });
      Object.defineProperty(t.clock, 'now', { get: () => Date.now() }); // the poller's readings are on the wall clock
      await t.hub.start();
      hubs.push(t);
    }
    const [a, b] = hubs as [TestHub, TestHub];

    // Events: a quarantine decided on one hub is logged by the other (learned over the bus: "… (on hub …)"). On B,
    // scope=cluster lists A's event of cheat-b and B's own of cheat-a, each with the hub that logged it.
    a.hub.quarantine('cheat-a', 'a failed audit on A');
    b.hub.quarantine('cheat-b', 'a failed audit on B');
    const logged = (ev: Array<{ hub: string; detail: string }>, hub: string, subject: string, from: string) =>
      ev.some((e) => e.hub === hub && e.detail.startsWith(`${subject}:`) && e.detail.endsWith(`(on hub ${from})`));
    await eventually('both quarantines in the cluster stream, read on B', async () => {
      const r = await b.call('GET', '/api/events?scope=cluster&kind=quarantine');
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const ev = r.json.events as Array<{ hub: string; detail: string }>;
      return logged(ev, 'hub-a', 'cheat-b', 'hub-b') && logged(ev, 'hub-b', 'cheat-a', 'hub-a');
    });
    const own = (await b.call('GET', '/api/events?kind=quarantine')).json.events as Array<{ detail: string; hub?: string }>;
    assert.ok(own.length > 0 && own.every((e) => !e.detail.startsWith('cheat-b:') && e.hub === undefined), "B's own log (scope=hub)");
    assert.equal((await b.call('GET', '/api/events?scope=everything')).status, 400);
    // A stream entry that no hub wrote is skipped, never a crash.
    await redis.command('XADD', 'expertswarm:events', '*', 'v', '1', 'hub', 'x y', 'seq', 'one');
    const after = await b.call('GET', '/api/events?scope=cluster&limit=5');
    assert.equal(after.status, 200);
    assert.ok((after.json.events as Array<{ hub: string }>).every((e) => e.hub === 'hub-a' || e.hub === 'hub-b'));

    // Readings: both coordinators idle, nobody recruits; A's saturated: B recruits too (its own is idle).
    const recruiting = (t: TestHub) => t.hub.recruitment().models.find((m) => m.model === 'wide')?.recruiting;
    await eventually('A and B have read their coordinators', () => recruiting(a) === false && recruiting(b) === false);
    busy.a = 2;
    await eventually('A recruits on its own reading', () => recruiting(a) === true);
    await eventually("B recruits on A's reading", () => recruiting(b) === true);
    assert.equal((await b.call('GET', '/api/expert-demand?model=wide')).json.recruiting, true, "B's demand is the cluster's");
    busy.a = 0;
    await eventually("B stops once A's coordinator is idle again", () => recruiting(b) === false);
  } finally {
    for (const t of hubs) await t.close();
    slots.closeAllConnections();
    slots.close();
    await redis.stop();
  }
});

test("credit waiting in a SIGKILLed hub's state is sent at its restart, and counted once", async () => {
  const redis = await startRedis();
  const dir = mkdtempSync(join(tmpdir(), 'es-outbox-'));
  const w = newVolunteer().wallet;
  let restarted: TestHub | null = null;
  try {
    // Redis away: the child's credit waits (in memory and in its SQLite), and the child is killed.
    await redis.kill();
    const child = spawn(process.execPath, ['--import', 'tsx', 'harness/cluster-credit-child.ts', dir, redis.url, wide.path, w, '7'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const line = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(out.split('\n')[0] as string);
      });
      child.once('exit', (code) => reject(new Error(`the child exited (${code}) before it was ready`)));
    });
    assert.deepEqual(JSON.parse(line), { ready: true, pending: 1 });
    const gone = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await gone;

    // A write whose reply was lost: an item Redis has, still in the outbox. Put one there by hand, credited before.
    await redis.restart();
    await redis.command('SET', 'expertswarm:credited:hub-k:old:1', 'hub-k');
    await redis.command('HSET', `expertswarm:wallet:${w}`, 'credit_pairs', '5');
    const store = new HubStore(join(dir, 'hub.sqlite'));
    assert.equal(store.outbox().length, 1, 'the killed hub left its credit in its state');
    store.outboxAdd('hub-k:old:1', w, 5, Date.now());
    store.close();

    // Restarted with the same --state: both sent once Redis answers; the one credited before is not counted again.
    restarted = await testHub({
      stateDir: dir,
      models: [{ path: wide.path, name: 'wide' }],
      redis: redis.url,
      cluster: { hubId: 'hub-k', syncMs: 50, reconnectMaxMs: 100, commandTimeoutMs: 300 },
    });
    const t = restarted;
    await eventually('the outbox empty', () => t.hub.clusterStatus()?.pending.credits === 0);
    assert.equal((await t.call('GET', `/api/credit?wallet=${w}`)).json.credit_pairs, 5 + 7, '7 pairs once, the 5 not twice');
    assert.ok(t.hub.queryEvents({ limit: 50 }).some((e) => /2 credit writes an earlier run left waiting/.test(e.detail)));
    await t.close();
    restarted = null;
    const again = await testHub({
      stateDir: dir,
      models: [{ path: wide.path, name: 'wide' }],
      redis: redis.url,
      cluster: { hubId: 'hub-k', syncMs: 50 },
    });
    restarted = again;
    assert.equal(again.hub.clusterStatus()?.pending.credits, 0, 'nothing left in the state');
    assert.equal((await again.call('GET', `/api/credit?wallet=${w}`)).json.credit_pairs, 12);
  } finally {
    await restarted?.close();
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
