/**
 * Several hubs on one real Redis (issue 30; harness/redis.ts starts a redis-server per test, hubs run in-process as
 * harness/hub-fixtures.ts builds them): coverage posted on one hub is in another's dispatch map and demand; credit for
 * one verified item reported by two hubs counts once; a worker quarantined on one hub is refused on another; a worker
 * record expires with its TTL; garbage written into keys by hand is answered CLUSTER_STATE_CORRUPT, never a crash;
 * Redis killed, hung (SIGSTOP) or restarted empty: the hubs answer CLUSTER_UNAVAILABLE within the command timeout,
 * serve alone, and recover (their records, quarantines and waiting credit written again).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { testModel } from '../../harness/models.ts';
import { newVolunteer, testHub, type TestHub, type Volunteer } from '../../harness/hub-fixtures.ts';
import { startRedis, type TestRedis } from '../../harness/redis.ts';
import { isHubError } from '../../hub/errors.ts';
import type { HubConfig } from '../../hub/hub.ts';
import type { ClusterOptions } from '../../hub/cluster/cluster.ts';

const wide = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 32, ff: 32, nExpert: 256, nExpertUsed: 8, seed: 4 });

/** Hubs `ids` on `redis`, serving `wide` with its base replicas wanted at rest. */
async function cluster(
  redis: TestRedis,
  ids: string[],
  cfg: Partial<ClusterOptions> = {},
  over: Partial<HubConfig> = {},
): Promise<TestHub[]> {
  const hubs: TestHub[] = [];
  for (const hubId of ids) {
    hubs.push(
      await testHub({
        models: [{ path: wide.path, name: 'wide' }],
        dispatchMode: 'always',
        redis: redis.url,
        cluster: { hubId, syncMs: 50, ...cfg },
        ...over,
      }),
    );
  }
  return hubs;
}

async function closeAll(hubs: TestHub[], redis: TestRedis): Promise<void> {
  for (const h of hubs) await h.close();
  await redis.stop();
}

/** Polls `check` every 20 ms until it returns a value that is not undefined/false; fails after `ms`. */
async function eventually<T>(what: string, check: () => Promise<T | undefined | false> | T | undefined | false, ms = 3_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface Row {
  worker_id: string;
  hub: string | null;
  layer: number;
  experts: [number, number];
  state: string;
  node_id: string;
}

const mapOf = async (t: TestHub): Promise<Row[]> => {
  const r = await t.call('GET', '/api/expert-dispatch-map?model=wide');
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.rows as Row[];
};

/** An HTTP worker's way to a slice on hub `t`: the market's offer, then the shard download (market/grants.ts). */
async function takeSlice(t: TestHub, token: string, workerId: string): Promise<[number, number, number]> {
  const a = await t.call('POST', '/api/expert-volunteer', { model: 'wide', worker_id: workerId }, token);
  assert.equal(a.json.assigned, true, JSON.stringify(a.json));
  const { layer, experts } = a.json as { layer: number; experts: [number, number] };
  const shard = `/api/expert-shard?model=wide&layer=${layer}&expert_begin=${experts[0]}&expert_end=${experts[1]}`;
  assert.equal((await t.call('GET', shard, undefined, token)).status, 200);
  return [layer, experts[0], experts[1]];
}

const beat = (t: TestHub, token: string, workerId: string, segments: number[][]) =>
  t.call('POST', '/api/expert-coverage', { worker_id: workerId, model: 'wide', segments }, token);

test("coverage posted on hub A is in hub B's dispatch map, demand and recruitment; a worker id is one wallet's across hubs", async () => {
  const redis = await startRedis();
  const hubs = await cluster(redis, ['hub-a', 'hub-b', 'hub-c']);
  const [a, b, c] = hubs as [TestHub, TestHub, TestHub];
  try {
    const v = newVolunteer();
    const token = await a.login(v);
    const held = await takeSlice(a, token, 'kv-1');
    const posted = await beat(a, token, 'kv-1', [held]);
    assert.equal(posted.status, 200, JSON.stringify(posted.json));
    // A volunteer on A's channel (the hub's own heartbeat path): its ranges count as replicas.
    a.hub.heartbeat('tab-1', v.wallet, 'wide', [[0, 0, 128]]);
    await a.hub.clusterFlush();
    await b.hub.clusterSync();

    const rows = await mapOf(b);
    const kv = rows.find((r) => r.worker_id === 'kv-1');
    assert.deepEqual(
      [kv?.hub, kv?.layer, kv?.experts, kv?.state, kv?.node_id],
      ['hub-a', held[0], [held[1], held[2]], 'grace', 'kv-1'],
      'the HTTP worker of A, as B lists it',
    );
    assert.deepEqual(
      rows.filter((r) => r.worker_id === 'tab-1').map((r) => [r.hub, r.layer, r.experts]),
      [['hub-a', 0, [0, 128]]],
    );
    assert.ok(
      (await mapOf(a)).every((r) => r.hub === 'hub-a'),
      'A lists its own workers with its own id',
    );

    // Demand on B counts A's replica (the tab), not the HTTP-only worker (no work link: market/replicas.ts).
    const demand = await b.call('GET', '/api/expert-demand?model=wide');
    const layer0 = demand.json.models[0].layers.find((l: { layer: number }) => l.layer === 0);
    assert.deepEqual(
      layer0.segments.map((s: { experts: [number, number]; replicas: number }) => [s.experts, s.replicas]),
      [
        [[0, 128], 1],
        [[128, 256], 0],
      ],
    );
    const rec = await b.call('GET', '/api/moe/recruitment');
    assert.equal(rec.json.models[0].expert_workers, 2, "B's recruitment counts A's two workers");
    // B's market offers a newcomer what the cluster lacks: not [0, 128) of layer 0, which A's tab holds.
    const bv = newVolunteer();
    const btoken = await b.login(bv);
    const offer = await b.call('POST', '/api/expert-volunteer', { model: 'wide', worker_id: 'newcomer' }, btoken);
    assert.notDeepEqual([offer.json.layer, ...offer.json.experts], [0, 0, 128]);
    assert.ok(offer.json.layer !== 0 || offer.json.experts[0] >= 128, JSON.stringify(offer.json));

    // Worker ids are kept per wallet across the cluster: another wallet cannot take kv-1 on B.
    const taken = await takeSlice(b, btoken, 'kv-1').catch(() => null);
    const steal = await beat(b, btoken, 'kv-1', taken ? [taken] : []);
    assert.deepEqual([steal.status, steal.json.code], [409, 'WORKER_ID_TAKEN']);

    // Without explicit flush or sync: the write-behind and the sync timer carry a new worker to C by themselves.
    a.hub.heartbeat('tab-2', v.wallet, 'wide', [[1, 0, 64]]);
    const seen = await eventually('tab-2 in C’s map', async () => (await mapOf(c)).find((r) => r.worker_id === 'tab-2'), 2_000);
    assert.equal(seen.hub, 'hub-a');
    const health = await c.call('GET', '/api/health');
    assert.equal(health.json.cluster.state, 'ready');
    assert.deepEqual(health.json.cluster.hubs, ['hub-a', 'hub-b', 'hub-c']);
    assert.equal(health.json.cluster.remote_workers, 3);
    const members = health.json.cluster.members as Array<{ hub: string; workers: number | null }>;
    assert.deepEqual(
      members.map((m) => m.hub),
      ['hub-a', 'hub-b', 'hub-c'],
    );
    assert.equal(members[0]?.workers, 3, "C counts A's three workers in its mirror");

    // A worker that leaves A (its channel closes: the hub forgets it) leaves the others' maps.
    a.hub.evict(); // nothing stale yet: every worker stays
    assert.equal((await mapOf(c)).filter((r) => r.hub === 'hub-a').length, 3);
    a.clock.now += 121_000;
    a.hub.evict();
    await a.hub.clusterFlush();
    await c.hub.clusterSync();
    assert.deepEqual(await mapOf(c), [], "A's evicted workers are gone from C");
    assert.equal(await redis.command('EXISTS', 'expertswarm:worker:tab-1'), '0', 'their records are deleted, not left to expire');
  } finally {
    await closeAll(hubs, redis);
  }
});

test('an HTTP worker assigned and served its slice by hub A reports its coverage to hub B (the grants are shared)', async () => {
  const redis = await startRedis();
  const hubs = await cluster(redis, ['hub-a', 'hub-b']);
  const [a, b] = hubs as [TestHub, TestHub];
  try {
    const v = newVolunteer();
    const onA = await a.login(v);
    const onB = await b.login(v); // each hub issues its own node tokens
    const held = await takeSlice(a, onA, 'kv-1');
    await eventually('the grants written', async () =>
      (await redis.command('HLEN', `expertswarm:grants:${v.wallet}`)) === '2' ? true : undefined,
    );
    const r = await beat(b, onB, 'kv-1', [held]);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(
      (await mapOf(b)).filter((row) => row.worker_id === 'kv-1').map((row) => [row.hub, row.layer, row.experts]),
      [['hub-b', held[0], [held[1], held[2]]]],
      'B holds it now',
    );
    // The rule stays the same on B: a slice assigned on A to a wallet that never downloaded it, another wallet's slice.
    const late = newVolunteer();
    const lateOnA = await a.login(late);
    const asked = await a.call('POST', '/api/expert-volunteer', { model: 'wide', worker_id: 'kv-2' }, lateOnA);
    assert.equal(asked.json.assigned, true);
    const undownloaded = await beat(b, await b.login(late), 'kv-2', [[asked.json.layer, ...asked.json.experts]]);
    assert.deepEqual([undownloaded.status, undownloaded.json.code], [409, 'COVERAGE_NOT_DOWNLOADED']);
    const other = newVolunteer();
    const otherOnB = await b.login(other);
    const stranger = await beat(b, otherOnB, 'kv-3', [held]);
    assert.deepEqual([stranger.status, stranger.json.code], [403, 'COVERAGE_NOT_ASSIGNED']);
    // Garbage in a wallet's grants is skipped; a grants key of another type refuses as without a cluster, no crash.
    await redis.command('HSET', `expertswarm:grants:${v.wallet}`, 'junk', 'not-a-time');
    assert.equal((await beat(b, onB, 'kv-1', [held])).status, 200);
    await redis.command('SET', `expertswarm:grants:${other.wallet}`, 'x');
    const typed = await beat(b, otherOnB, 'kv-3', [held]);
    assert.deepEqual([typed.status, typed.json.code], [403, 'COVERAGE_NOT_ASSIGNED']);
  } finally {
    await closeAll(hubs, redis);
  }
});

test('credit for one verified item reported by two hubs is counted once; the ledger’s credit reaches every hub', async () => {
  const redis = await startRedis();
  const hubs = await cluster(redis, ['hub-a', 'hub-b', 'hub-c']);
  const [a, b, c] = hubs as [TestHub, TestHub, TestHub];
  try {
    const w = newVolunteer().wallet;
    const item = 'wide:seq-7:layer-1:tab-1';
    const both = await Promise.all([a.hub.creditVerified(item, w, 5), b.hub.creditVerified(item, w, 5)]);
    assert.deepEqual(both.map((r) => r.credited).sort(), [false, true], 'exactly one of the two reports credits it');
    assert.deepEqual(
      both.map((r) => r.credit),
      [5, 5],
    );
    assert.deepEqual(await c.hub.creditVerified(item, w, 5), { credited: false, credit: 5 }, 'a third report, later');
    assert.deepEqual(await c.hub.creditVerified('wide:seq-8:layer-1:tab-1', w, 3), { credited: true, credit: 8 });
    // Many reports of many items from every hub at once: each item once.
    const items = Array.from({ length: 50 }, (_, i) => `wide:seq-${100 + i}:layer-0:tab-2`);
    const results = await Promise.all(items.flatMap((it) => hubs.map((h) => h.hub.creditVerified(it, w, 2))));
    assert.equal(results.filter((r) => r.credited).length, 50);
    for (const h of hubs) assert.equal((await h.call('GET', `/api/credit?wallet=${w}`)).json.credit_pairs, 108);

    // The ledger's path (a dispatcher's used pairs, flushed): each flush an item of its own hub, counted once.
    a.hub.addCredit(w, 4);
    b.hub.addCredit(w, 4);
    await a.hub.clusterFlush();
    await b.hub.clusterFlush();
    const answer = await c.call('GET', `/api/credit?wallet=${w}`);
    assert.equal(answer.json.credit_pairs, 116);
    assert.equal(typeof answer.json.first_seen_ms, 'number');
    assert.equal(await redis.command('HGET', `expertswarm:wallet:${w}`, 'credit_pairs'), '116');
    assert.equal(await eventually('C’s cache heard of it', () => c.hub.creditOf(w) === 116 || undefined), true);
    await assert.rejects(a.hub.creditVerified('has space', w, 1), RangeError);
  } finally {
    await closeAll(hubs, redis);
  }
});

test('a worker (and its wallet) quarantined on hub A is refused on hub B, told over the bus at once', async () => {
  const redis = await startRedis();
  // syncMs of a minute: only the bus can carry the quarantine within this test.
  const hubs = await cluster(redis, ['hub-a', 'hub-b'], { syncMs: 60_000 });
  const [a, b] = hubs as [TestHub, TestHub];
  try {
    const v: Volunteer = newVolunteer();
    b.hub.heartbeat('w-b', v.wallet, 'wide', [[0, 0, 64]]);
    b.hub.heartbeat('w-b2', v.wallet, 'wide', [[1, 0, 64]]);
    await b.hub.clusterFlush();
    a.hub.quarantine('w-b', 'answered with sums that are not finite');
    a.hub.quarantine(v.wallet, 'its worker answered with sums that are not finite');
    await a.hub.clusterFlush();
    const refused = await eventually('B refuses w-b', () => {
      try {
        b.hub.heartbeat('w-b', v.wallet, 'wide', [[0, 0, 64]]);
        return undefined;
      } catch (e) {
        return e;
      }
    });
    assert.ok(isHubError(refused, 'WORKER_QUARANTINED'), String(refused));
    assert.ok(!(await mapOf(b)).some((r) => r.worker_id === 'w-b'), 'B dropped the worker it held');
    assert.ok(
      b.hub.queryEvents({ kind: 'quarantine', limit: 10 }).some((e) => e.detail.includes('w-b') && e.detail.includes('on hub hub-a')),
      'B logs whose quarantine it applied',
    );
    await eventually('the wallet too', () => {
      try {
        b.hub.heartbeat('w-b2', v.wallet, 'wide', [[1, 0, 64]]);
        return undefined;
      } catch (e) {
        return isHubError(e, 'WORKER_QUARANTINED');
      }
    });
    // Over HTTP on B: refused before anything else is looked at.
    const token = await b.login(v);
    const r = await beat(b, token, 'w-b3', []);
    assert.deepEqual([r.status, r.json.code], [403, 'WORKER_QUARANTINED']);
    assert.match(await redis.command('HGET', 'expertswarm:quarantine', 'w-b'), /"hub":"hub-a"/);
  } finally {
    await closeAll(hubs, redis);
  }
});

test('a worker record expires with its TTL (the hub’s stale time)', async () => {
  const redis = await startRedis();
  const hubs = await cluster(redis, ['hub-a', 'hub-b'], {}, { staleMs: 400 });
  const [a, b] = hubs as [TestHub, TestHub];
  try {
    a.hub.heartbeat('short', null, 'wide', [[0, 0, 32]]);
    await a.hub.clusterFlush();
    const ttl = Number(await redis.command('PTTL', 'expertswarm:worker:short'));
    assert.ok(ttl > 0 && ttl <= 400, `PTTL ${ttl}`);
    await b.hub.clusterSync();
    assert.equal((await mapOf(b)).length, 1);
    await new Promise((r) => setTimeout(r, 500));
    await b.hub.clusterSync();
    assert.deepEqual(await mapOf(b), [], 'expired in Redis: gone from B');
    assert.equal(await redis.command('EXISTS', 'expertswarm:worker:short'), '0');
    assert.equal(await redis.command('SISMEMBER', 'expertswarm:workers:wide', 'short'), '0', 'and out of the model’s set');
    // A heartbeat writes it again, with a fresh TTL.
    a.hub.heartbeat('short', null, 'wide', [[0, 0, 32]]);
    await a.hub.clusterFlush();
    await b.hub.clusterSync();
    assert.equal((await mapOf(b)).length, 1);
  } finally {
    await closeAll(hubs, redis);
  }
});

test('a hub no longer announced (dead: its announcement expired) takes its workers out of the others’ maps before their TTL', async () => {
  const redis = await startRedis();
  const hubs = await cluster(redis, ['hub-a', 'hub-b'], { syncMs: 60_000 });
  const [a, b] = hubs as [TestHub, TestHub];
  try {
    a.hub.heartbeat('on-a', null, 'wide', [[0, 0, 32]]);
    await a.hub.clusterFlush();
    await a.hub.clusterSync(); // announced
    await b.hub.clusterSync();
    assert.deepEqual(
      (await mapOf(b)).map((r) => r.worker_id),
      ['on-a'],
    );
    // Hub A's announcement gone (as when it dies and its key expires); its worker's record is still in Redis.
    await redis.command('DEL', 'expertswarm:hub:hub-a');
    await redis.command('SREM', 'expertswarm:hubs', 'hub-a');
    await b.hub.clusterSync();
    assert.equal(await redis.command('EXISTS', 'expertswarm:worker:on-a'), '1', 'the record is there (its TTL runs)');
    assert.deepEqual(await mapOf(b), [], 'a dead hub’s workers are out of B’s map');
    await a.hub.clusterSync(); // A alive after all: announced again
    await b.hub.clusterSync();
    assert.deepEqual(
      (await mapOf(b)).map((r) => r.worker_id),
      ['on-a'],
      'and back with the hub',
    );
  } finally {
    await closeAll(hubs, redis);
  }
});

test('garbage written into keys by hand: CLUSTER_STATE_CORRUPT, never a crash', async () => {
  const redis = await startRedis();
  const hubs = await cluster(redis, ['hub-a', 'hub-b']);
  const [a, b] = hubs as [TestHub, TestHub];
  try {
    a.hub.heartbeat('good', null, 'wide', [[0, 0, 16]]);
    await a.hub.clusterFlush();
    const good = JSON.parse(await redis.command('GET', 'expertswarm:worker:good'));
    const junk: Array<[string, string]> = [
      ['junk-text', 'not json'],
      ['junk-version', JSON.stringify({ ...good, worker_id: 'junk-version', v: 99 })],
      ['junk-range', JSON.stringify({ ...good, worker_id: 'junk-range', ranges: [[0, 200, 999]] })], // beyond 256 experts
      ['junk-layer', JSON.stringify({ ...good, worker_id: 'junk-layer', ranges: [[7, 0, 8]] })], // no such MoE layer
      ['junk-other-id', JSON.stringify({ ...good, worker_id: 'someone-else' })],
    ];
    for (const [id, text] of junk) {
      await redis.command('SET', `expertswarm:worker:${id}`, text);
      await redis.command('SADD', 'expertswarm:workers:wide', id);
    }
    await b.hub.clusterSync();
    assert.deepEqual(
      (await mapOf(b)).map((r) => r.worker_id),
      ['good'],
      'the readable record is used, the garbage is not',
    );
    const status = b.hub.clusterStatus();
    assert.ok(status && status.corrupt_values >= junk.length, JSON.stringify(status));
    assert.equal(status?.state, 'ready', 'garbage is not an outage');
    const events = b.hub.queryEvents({ kind: 'coordinator', limit: 50 }).map((e) => e.detail);
    for (const [id] of junk)
      assert.ok(
        events.some((d) => d.includes('CLUSTER_STATE_CORRUPT') && d.includes(id)),
        `an event names ${id}`,
      );

    // A wallet key of the wrong type, and a credit that is not a count: the credit answer is the stable code.
    const w1 = newVolunteer().wallet;
    const w2 = newVolunteer().wallet;
    await redis.command('SET', `expertswarm:wallet:${w1}`, 'garbage');
    await redis.command('HSET', `expertswarm:wallet:${w2}`, 'credit_pairs', 'lots');
    for (const w of [w1, w2]) {
      const r = await b.call('GET', `/api/credit?wallet=${w}`);
      assert.deepEqual([r.status, r.json.code], [502, 'CLUSTER_STATE_CORRUPT'], JSON.stringify(r.json));
    }
    // A credit against an unreadable wallet is refused whole: its item is not spent, so it counts once the key is fixed.
    await assert.rejects(b.hub.creditVerified('item-1', w2, 5), (e: unknown) => isHubError(e, 'CLUSTER_STATE_CORRUPT'));
    await redis.command('DEL', `expertswarm:wallet:${w2}`);
    assert.deepEqual(await b.hub.creditVerified('item-1', w2, 5), { credited: true, credit: 5 });

    // An unreadable quarantine entry fails closed: the subject is refused.
    await redis.command('HSET', 'expertswarm:quarantine', 'evil', '{"v":1,"reason":');
    await b.hub.clusterSync();
    assert.throws(
      () => b.hub.heartbeat('evil', null, 'wide', [[0, 0, 8]]),
      (e: unknown) => isHubError(e, 'WORKER_QUARANTINED'),
    );
    // Garbage on the bus, and a worker set that is not a set.
    const before = b.hub.clusterStatus()?.corrupt_values ?? 0;
    await redis.command('PUBLISH', 'expertswarm:bus', 'garbage');
    await eventually('the bus garbage is counted', () => (b.hub.clusterStatus()?.corrupt_values ?? 0) > before);
    await redis.command('DEL', 'expertswarm:workers:wide');
    await redis.command('SET', 'expertswarm:workers:wide', 'not a set');
    await b.hub.clusterSync();
    assert.equal((await b.call('GET', '/api/expert-dispatch-map?model=wide')).status, 200, 'the map still answers');
    a.hub.heartbeat('good', null, 'wide', [[0, 0, 16]]);
    await a.hub.clusterFlush();
    assert.equal(a.hub.clusterStatus()?.state, 'ready');
    assert.equal((await b.call('GET', '/api/health')).status, 200);
  } finally {
    await closeAll(hubs, redis);
  }
});

test('Redis killed, hung, restarted empty: bounded CLUSTER_UNAVAILABLE, serving alone, then back with everything written again', async () => {
  const redis = await startRedis();
  const cfg = { commandTimeoutMs: 300, reconnectMaxMs: 100, syncMs: 50 };
  const hubs = await cluster(redis, ['hub-a', 'hub-b'], cfg);
  const [a, b] = hubs as [TestHub, TestHub];
  try {
    const w = newVolunteer().wallet;
    a.hub.heartbeat('wa', w, 'wide', [[0, 0, 64]]);
    b.hub.heartbeat('wb', w, 'wide', [[1, 0, 64]]);
    a.hub.quarantine('cheat', 'a failed audit');
    await a.hub.clusterFlush();
    await b.hub.clusterFlush();
    await eventually('B sees wa', async () => (await mapOf(b)).some((r) => r.worker_id === 'wa'));

    // Killed: each call answers at once, the hubs degrade and serve alone.
    await redis.kill();
    let t0 = Date.now();
    const down = await b.call('GET', `/api/credit?wallet=${w}`);
    assert.deepEqual([down.status, down.json.code], [503, 'CLUSTER_UNAVAILABLE']);
    assert.equal(down.headers['retry-after'], '2');
    assert.ok(Date.now() - t0 < 1_000, `answered in ${Date.now() - t0} ms`);
    await eventually('B degraded', () => b.hub.clusterStatus()?.state === 'degraded');
    assert.deepEqual(
      (await mapOf(b)).map((r) => r.worker_id),
      ['wb'],
      "B serves with its own workers: A's are out of its map",
    );
    const health = await b.call('GET', '/api/health');
    assert.equal(health.status, 200);
    assert.equal(health.json.cluster.state, 'degraded');
    assert.match(health.json.cluster.error, /./);
    a.hub.heartbeat('wa', w, 'wide', [[0, 0, 64]]); // heartbeats go on
    a.hub.addCredit(w, 7); // credit waits
    await a.hub.clusterFlush();
    assert.equal(a.hub.clusterStatus()?.pending.credits, 1);
    assert.throws(
      () => b.hub.heartbeat('cheat', null, 'wide', [[0, 0, 8]]),
      (e: unknown) => isHubError(e, 'WORKER_QUARANTINED'),
      'quarantines are kept while Redis is away',
    );
    assert.ok(
      b.hub.queryEvents({ kind: 'coordinator', limit: 20 }).some((e) => e.detail.startsWith('cluster: degraded')),
      'the degradation is in the event log',
    );

    // Back, empty (no persistence): the hubs write their records, quarantines and waiting credit again.
    await redis.restart();
    await eventually('both ready again', () => a.hub.clusterStatus()?.state === 'ready' && b.hub.clusterStatus()?.state === 'ready', 5_000);
    await eventually('B sees wa again', async () => (await mapOf(b)).some((r) => r.worker_id === 'wa'), 2_000);
    const back = await b.call('GET', `/api/credit?wallet=${w}`);
    assert.equal(back.json.credit_pairs, 7, 'the credit A held while Redis was away, written once');
    assert.equal(a.hub.clusterStatus()?.pending.credits, 0);
    assert.match(await redis.command('HGET', 'expertswarm:quarantine', 'cheat'), /a failed audit/, 'A wrote its quarantine again');

    // Hung (SIGSTOP): a call fails after the command timeout, not never.
    const pid = redis.pid() as number;
    process.kill(pid, 'SIGSTOP');
    try {
      t0 = Date.now();
      const hung = await b.call('GET', `/api/credit?wallet=${w}`);
      const took = Date.now() - t0;
      assert.deepEqual([hung.status, hung.json.code], [503, 'CLUSTER_UNAVAILABLE']);
      assert.ok(took < 2_000, `answered in ${took} ms with a 300 ms command timeout`);
      await eventually('B degraded while Redis hangs', () => b.hub.clusterStatus()?.state === 'degraded');
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    await eventually('B ready once Redis answers', () => b.hub.clusterStatus()?.state === 'ready', 5_000);
    assert.equal((await b.call('GET', `/api/credit?wallet=${w}`)).json.credit_pairs, 7, 'nothing counted twice');
  } finally {
    await closeAll(hubs, redis);
  }
});

test('a hub whose Redis is not there at start serves alone and joins when it comes', async () => {
  const redis = await startRedis();
  const url = redis.url;
  await redis.kill();
  const solo = await testHub({
    models: [{ path: wide.path, name: 'wide' }],
    redis: url,
    cluster: { hubId: 'late', syncMs: 50, connectTimeoutMs: 300, reconnectMaxMs: 100, commandTimeoutMs: 300 },
  });
  try {
    assert.equal(solo.hub.clusterStatus()?.state, 'degraded');
    solo.hub.heartbeat('w', null, 'wide', [[0, 0, 8]]);
    assert.equal((await mapOf(solo)).length, 1, 'it serves alone');
    await redis.restart();
    await eventually('joined', () => solo.hub.clusterStatus()?.state === 'ready', 5_000);
    await eventually('its worker written', async () => (await redis.command('EXISTS', 'expertswarm:worker:w')) === '1');
  } finally {
    await solo.close();
    await redis.stop();
  }
});
