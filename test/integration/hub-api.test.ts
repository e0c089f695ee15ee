/**
 * The hub's HTTP API in-process (fastify inject, no port): auth flows, the market through its endpoints, eviction,
 * and tables of malformed requests, each with its exact status and code; the admin release and quarantine of
 * HTTP-heartbeat workers; the saturation poller against a fake coordinator whose /metrics hangs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { testModel } from '../../harness/models.ts';
import { newVolunteer, testHub, type TestHub } from '../../harness/hub-fixtures.ts';
import { DEFAULT_SATURATION } from '../../hub/market/saturation.ts';
import { SaturationPoller } from '../../hub/poller.ts';
import type { SlotsReading } from '../../hub/market/saturation.ts';

const wide = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 32, ff: 32, nExpert: 256, nExpertUsed: 8, seed: 4 });
const dense = await testModel({ arch: 'deepseek', layers: 3, nEmbd: 32, ff: 32, sharedFf: 32, nExpert: 16, nExpertUsed: 2, seed: 4 });

interface Offered {
  model: string;
  layer: number;
  experts: [number, number];
}

/**
 * An HTTP worker's way to a slice: the market's offer for `workerId` (`POST /api/expert-volunteer`), then the shard
 * download. Its heartbeats may report the slice from then on (market/grants.ts); nothing is reported here.
 */
async function takeSlice(t: TestHub, token: string, workerId: string, request: Record<string, unknown> = {}): Promise<Offered> {
  const a = await t.call('POST', '/api/expert-volunteer', { ...request, worker_id: workerId }, token);
  assert.equal(a.status, 200);
  assert.equal(a.json.assigned, true, `${workerId} was offered a slice: ${JSON.stringify(a.json)}`);
  const { model, layer, experts } = a.json as Offered;
  const shard = `/api/expert-shard?model=${model}&layer=${layer}&expert_begin=${experts[0]}&expert_end=${experts[1]}`;
  assert.equal((await t.call('GET', shard, undefined, token)).status, 200, `${workerId} downloaded its slice`);
  return { model, layer, experts };
}

test('auth: a good login, a replayed nonce, a wrong signature, an expired token', async () => {
  const t = await testHub({ models: [{ path: wide.path, name: 'wide' }] });
  try {
    const v = newVolunteer();
    const c = await t.call('POST', '/api/auth/challenge', { wallet: v.wallet });
    assert.equal(c.status, 200);
    assert.match(c.json.message, new RegExp(c.json.nonce));
    const good = await t.call('POST', '/api/auth/node-token', { wallet: v.wallet, nonce: c.json.nonce, signature: v.sign(c.json.message) });
    assert.equal(good.status, 200);
    assert.equal(good.json.wallet, v.wallet);
    assert.ok(good.json.expires_in > 0);
    const token = good.json.node_token as string;
    const nothing = await t.call('POST', '/api/expert-volunteer', {}, token);
    assert.equal(nothing.status, 200);
    assert.deepEqual(
      [nothing.json.assigned, nothing.json.code],
      [false, 'nothing-wanted'],
      'an idle model wants nobody; the refusal carries its code',
    );
    assert.equal(typeof nothing.json.reason, 'string');

    const replay = await t.call('POST', '/api/auth/node-token', {
      wallet: v.wallet,
      nonce: c.json.nonce,
      signature: v.sign(c.json.message),
    });
    assert.deepEqual([replay.status, replay.json.code], [401, 'AUTH_NONCE_UNKNOWN']);

    const c2 = await t.call('POST', '/api/auth/challenge', { wallet: v.wallet });
    const other = newVolunteer();
    const wrong = await t.call('POST', '/api/auth/node-token', {
      wallet: v.wallet,
      nonce: c2.json.nonce,
      signature: other.sign(c2.json.message),
    });
    assert.deepEqual([wrong.status, wrong.json.code], [401, 'AUTH_BAD_SIGNATURE']);

    t.clock.now += 2 * 86_400_000;
    const expired = await t.call('POST', '/api/expert-volunteer', {}, token);
    assert.deepEqual([expired.status, expired.json.code], [401, 'AUTH_TOKEN_EXPIRED']);
    assert.equal((await t.call('GET', '/api/health')).status, 200);
  } finally {
    await t.close();
  }
});

test("market through the API: the brief's example, dense layers, eviction after 120 s", async () => {
  const t = await testHub({
    models: [
      { path: wide.path, name: 'wide' },
      { path: dense.path, name: 'dense' },
    ],
    dispatchMode: 'always', // the market wants its base replicas at rest: the first workers are offered slices
  });
  try {
    const token = await t.login(newVolunteer());
    const beat = (worker: string, model: string, segments: number[][], n: { n_layer: number; n_expert: number }) =>
      t.call('POST', '/api/expert-coverage', { worker_id: worker, model, ...n, segments }, token);
    // Replicas are workers the hub can send work to: the channel's heartbeat path (an HTTP heartbeat alone is held, no
    // replica: market/replicas.ts, issue 28, kvasir-contract.test.ts).
    const serve = (worker: string, model: string, segments: number[][]) => {
      t.hub.heartbeat(worker, null, model, segments as Array<[number, number, number]>);
    };
    // Each worker holds what the market offered it and it downloaded (A and C the first half of theirs): in this order
    // the offers build the brief's example, A=[0,128) B=[128,256) C=[0,128) on layer 0, with layer 1 held twice.
    const offers: Array<[string, [number, number, number], [number, number, number]]> = [
      ['A', [0, 0, 256], [0, 0, 128]],
      ['D', [1, 0, 256], [1, 0, 256]],
      ['B', [0, 128, 256], [0, 128, 256]],
      ['C', [0, 0, 256], [0, 0, 128]],
      ['E', [1, 0, 256], [1, 0, 256]],
    ];
    for (const [worker, offered, held] of offers) {
      const s = await takeSlice(t, token, worker, { model: 'wide' });
      assert.deepEqual([s.layer, ...s.experts], offered, `${worker}'s offer`);
      serve(worker, 'wide', [held]);
    }

    const demand = await t.call('GET', '/api/expert-demand?model=wide');
    assert.equal(demand.status, 200);
    const layer0 = demand.json.models[0].layers.find((l: { layer: number }) => l.layer === 0);
    assert.deepEqual(layer0.segments, [
      { experts: [0, 128], replicas: 2, target: 2, scarcity: 0 },
      { experts: [128, 256], replicas: 1, target: 2, scarcity: 0.5 },
    ]);
    const got = await t.call('POST', '/api/expert-volunteer', { model: 'wide', max_experts: 64 }, token);
    assert.equal(got.status, 200);
    assert.deepEqual(
      {
        assigned: got.json.assigned,
        model: got.json.model,
        layer: got.json.layer,
        experts: got.json.experts,
        scarcity: got.json.scarcity,
        n_expert: got.json.n_expert,
      },
      { assigned: true, model: 'wide', layer: 0, experts: [128, 192], scarcity: 0.5, n_expert: 256 },
    );

    // deepseek's layer 0 is dense: never offered, refused in coverage.
    const denseN = { n_layer: 3, n_expert: 16 };
    const f = await takeSlice(t, token, 'F', { model: 'dense' });
    assert.deepEqual([f.layer, ...f.experts], [1, 0, 16]);
    serve('F', 'dense', [[1, 0, 16]]);
    const dd = await t.call('GET', '/api/expert-demand?model=dense');
    assert.deepEqual(
      dd.json.models[0].layers.map((l: { layer: number }) => l.layer),
      [1, 2],
    );
    const bad = await beat('G', 'dense', [[0, 0, 16]], denseN);
    assert.deepEqual([bad.status, bad.json.code], [400, 'LAYER_NOT_MOE']);

    const map = await t.call('GET', '/api/expert-dispatch-map?model=wide');
    assert.equal(map.status, 200);
    assert.ok(map.json.rows.some((r: { worker_id: string; state: string }) => r.worker_id === 'A' && r.state === 'grace'));

    t.clock.now += 119_000;
    serve('A', 'wide', [[0, 0, 128]]);
    t.clock.now += 1_000;
    const gone = t.hub.evict();
    assert.deepEqual(gone.sort(), ['B', 'C', 'D', 'E', 'F'], 'everyone silent for 120 s is evicted, A (heard 1 s ago) stays');
    const after = await t.call('GET', '/api/expert-demand?model=wide');
    const l0 = after.json.models[0].layers.find((l: { layer: number }) => l.layer === 0);
    assert.deepEqual(
      l0.segments.map((s: { replicas: number }) => s.replicas),
      [1, 0],
    );
    const metrics = await t.call('GET', '/metrics');
    const text = String(metrics.json);
    assert.match(text, /^expertswarm_evictions_total 5$/m);
    assert.match(text, /^expertswarm_workers\{model="wide",state="joining"\} 1$/m, 'A is past its grace window and never served');
    assert.match(text, /^expertswarm_heartbeats_total 7$/m, 'A, B, C, D, E, F and A again; G was refused');
    assert.deepEqual(
      [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => `${m[1]} ${m[2]}`),
      [
        'expertswarm_coordinator_busy_slots gauge',
        'expertswarm_coordinator_slots gauge',
        'expertswarm_saturated gauge',
        'expertswarm_recruiting gauge',
        'expertswarm_target_replicas_base gauge',
        'expertswarm_target_replicas_effective gauge',
        'expertswarm_reading_age_seconds gauge',
        'expertswarm_workers gauge',
        'expertswarm_volunteers_connected gauge',
        'expertswarm_assignments_total counter',
        'expertswarm_volunteer_refusals_total counter',
        'expertswarm_heartbeats_total counter',
        'expertswarm_evictions_total counter',
        'expertswarm_poll_failures_total counter',
        'expertswarm_coordinator_restarts_total counter',
        'expertswarm_coordinator_up gauge',
        'expertswarm_dispatch_pairs_total counter',
        'expertswarm_dispatch_requests_total counter',
        'expertswarm_dispatch_roundtrip_seconds histogram',
        'expertswarm_audits_total counter',
      ],
    );
  } finally {
    await t.close();
  }
});

test('≥ 20 malformed bodies per market endpoint get the right status and code; the hub stays healthy', async () => {
  const t = await testHub({
    models: [
      { path: wide.path, name: 'wide' },
      { path: dense.path, name: 'dense' },
    ],
    dispatchMode: 'always', // the market offers slices at rest: the good heartbeat below follows an offer
  });
  try {
    const token = await t.login(newVolunteer());
    // 'w' holds the slice of the good heartbeat `ok`; 'u' was offered one of dense and did not download it.
    assert.deepEqual(await takeSlice(t, token, 'w', { model: 'wide', max_experts: 8 }), { model: 'wide', layer: 0, experts: [0, 8] });
    const u = await t.call('POST', '/api/expert-volunteer', { model: 'dense', max_experts: 4, worker_id: 'u' }, token);
    assert.deepEqual([u.json.layer, u.json.experts], [1, [0, 4]]);
    const json = (v: unknown) => ({ payload: JSON.stringify(v), contentType: 'application/json' });
    type Case = [string, { body?: unknown; raw?: { payload: string; contentType: string }; token?: string | null }, number, string];
    const ok = { worker_id: 'w', model: 'wide', n_layer: 2, n_expert: 256, segments: [[0, 0, 8]] };
    const volunteer: Case[] = [
      ['no token', { body: {}, token: null }, 401, 'AUTH_REQUIRED'],
      ['garbage token', { body: {}, token: 'abc' }, 401, 'AUTH_TOKEN_INVALID'],
      ['null body', { raw: json(null) }, 400, 'BODY_INVALID'],
      ['array body', { body: [] }, 400, 'BODY_INVALID'],
      ['string body', { body: 'x' }, 400, 'BODY_INVALID'],
      ['number body', { body: 5 }, 400, 'BODY_INVALID'],
      ['negative max_experts', { body: { max_experts: -1 } }, 400, 'BODY_INVALID'],
      ['fractional max_experts', { body: { max_experts: 1.5 } }, 400, 'BODY_INVALID'],
      ['string max_experts', { body: { max_experts: '3' } }, 400, 'BODY_INVALID'],
      ['huge max_experts', { body: { max_experts: 2 ** 40 } }, 400, 'BODY_INVALID'],
      ['numeric model', { body: { model: 5 } }, 400, 'BODY_INVALID'],
      ['long model', { body: { model: 'x'.repeat(300) } }, 400, 'BODY_INVALID'],
      ['unknown model', { body: { model: 'nope' } }, 404, 'MODEL_UNKNOWN'],
      ['device not an object', { body: { device: 5 } }, 400, 'BODY_INVALID'],
      ['device array', { body: { device: [] } }, 400, 'BODY_INVALID'],
      ['negative budget', { body: { device: { memoryBudgetBytes: -1 } } }, 400, 'BODY_INVALID'],
      ['string buffer size', { body: { device: { maxBufferSize: 'a' } } }, 400, 'BODY_INVALID'],
      ['null binding size', { body: { device: { maxStorageBufferBindingSize: null } } }, 400, 'BODY_INVALID'],
      ['numeric worker_id', { body: { worker_id: 5 } }, 400, 'BODY_INVALID'],
      ['long worker_id', { body: { worker_id: 'x'.repeat(200) } }, 400, 'BODY_INVALID'],
      ['broken JSON', { raw: { payload: '{"max_experts":', contentType: 'application/json' } }, 400, 'BODY_NOT_JSON'],
      ['text body', { raw: { payload: 'hello', contentType: 'text/plain' } }, 415, 'UNSUPPORTED_MEDIA_TYPE'],
      ['oversized body', { raw: json({ pad: 'x'.repeat(70_000) }) }, 413, 'BODY_TOO_LARGE'],
    ];
    const coverage: Case[] = [
      ['no token', { body: ok, token: null }, 401, 'AUTH_REQUIRED'],
      ['missing worker_id', { body: { ...ok, worker_id: undefined } }, 400, 'BODY_INVALID'],
      ['empty worker_id', { body: { ...ok, worker_id: '' } }, 400, 'BODY_INVALID'],
      ['missing model', { body: { ...ok, model: undefined } }, 400, 'BODY_INVALID'],
      ['unknown model', { body: { ...ok, model: 'nope' } }, 404, 'MODEL_UNKNOWN'],
      ['n_layer mismatch', { body: { ...ok, n_layer: 3 } }, 400, 'BODY_INVALID'],
      ['n_expert mismatch', { body: { ...ok, n_expert: 128 } }, 400, 'BODY_INVALID'],
      ['negative n_layer', { body: { ...ok, n_layer: -1 } }, 400, 'BODY_INVALID'],
      ['string n_expert', { body: { ...ok, n_expert: '256' } }, 400, 'BODY_INVALID'],
      ['segments not an array', { body: { ...ok, segments: 'all' } }, 400, 'BODY_INVALID'],
      ['segments object', { body: { ...ok, segments: { 0: [0, 0, 1] } } }, 400, 'BODY_INVALID'],
      [
        '300 segments',
        { body: { ...ok, segments: Array.from({ length: 300 }, (_, i) => [0, i % 256, (i % 256) + 1]) } },
        400,
        'TOO_MANY_SEGMENTS',
      ],
      ['short segment', { body: { ...ok, segments: [[0, 1]] } }, 400, 'BODY_INVALID'],
      ['negative begin', { body: { ...ok, segments: [[0, -1, 2]] } }, 400, 'BODY_INVALID'],
      ['begin after end', { body: { ...ok, segments: [[0, 5, 3]] } }, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['empty range', { body: { ...ok, segments: [[0, 5, 5]] } }, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['end past n_expert', { body: { ...ok, segments: [[0, 0, 999]] } }, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['layer past n_layer', { body: { ...ok, segments: [[7, 0, 8]] } }, 400, 'LAYER_NOT_MOE'],
      ['fractional layer', { body: { ...ok, segments: [[0.5, 0, 8]] } }, 400, 'BODY_INVALID'],
      ['string in segment', { body: { ...ok, segments: [['0', 0, 8]] } }, 400, 'BODY_INVALID'],
      ['dense layer', { body: { ...ok, model: 'dense', n_layer: 3, n_expert: 16, segments: [[0, 0, 8]] } }, 400, 'LAYER_NOT_MOE'],
      ['a range never assigned', { body: { ...ok, segments: [[1, 0, 8]] } }, 403, 'COVERAGE_NOT_ASSIGNED'],
      ['past the end of its slice', { body: { ...ok, segments: [[0, 0, 9]] } }, 403, 'COVERAGE_NOT_ASSIGNED'],
      ["another worker's slice", { body: { ...ok, worker_id: 'v' } }, 403, 'COVERAGE_NOT_ASSIGNED'],
      [
        'assigned, not downloaded',
        { body: { worker_id: 'u', model: 'dense', n_layer: 3, n_expert: 16, segments: [[1, 0, 4]] } },
        409,
        'COVERAGE_NOT_DOWNLOADED',
      ],
      ['broken JSON', { raw: { payload: '[[[', contentType: 'application/json' } }, 400, 'BODY_NOT_JSON'],
      ['oversized body', { raw: json({ ...ok, pad: 'x'.repeat(70_000) }) }, 413, 'BODY_TOO_LARGE'],
    ];
    const auth: Case[] = [
      ['challenge: no wallet', { body: {} }, 400, 'BODY_INVALID'],
      ['challenge: numeric wallet', { body: { wallet: 5 } }, 400, 'BODY_INVALID'],
      ['challenge: not base58', { body: { wallet: '0OIl' } }, 400, 'AUTH_BAD_WALLET'],
      ['challenge: short key', { body: { wallet: '11111' } }, 400, 'AUTH_BAD_WALLET'],
      ['challenge: broken JSON', { raw: { payload: '{', contentType: 'application/json' } }, 400, 'BODY_NOT_JSON'],
    ];
    const run = async (url: string, cases: Case[]) => {
      for (const [name, c, status, code] of cases) {
        const tk = c.token === null ? undefined : (c.token ?? token);
        const r = await t.call('POST', url, c.body, tk, c.raw);
        assert.deepEqual([r.status, r.json?.code], [status, code], `${url} ${name}: ${JSON.stringify(r.json)}`);
        assert.equal(typeof r.json.error, 'string');
        assert.doesNotMatch(r.json.error, /\bat .*\.ts:\d+/, 'no stack traces');
      }
    };
    assert.ok(volunteer.length >= 20 && coverage.length >= 20);
    await run('/api/expert-volunteer', volunteer);
    await run('/api/expert-coverage', coverage);
    await run('/api/auth/challenge', auth);
    const queries: Array<[string, number, string]> = [
      ['/api/expert-dispatch-map?layer=-2', 400, 'QUERY_INVALID'],
      ['/api/expert-dispatch-map?layer=1.5', 400, 'QUERY_INVALID'],
      ['/api/expert-dispatch-map?model=nope', 404, 'MODEL_UNKNOWN'],
      ['/api/expert-dispatch-map?model=wide&model=dense', 400, 'QUERY_INVALID'],
      [`/api/expert-dispatch-map?model=${'x'.repeat(300)}`, 400, 'QUERY_INVALID'],
      ['/api/expert-demand?model=nope', 404, 'MODEL_UNKNOWN'],
      ['/api/expert-demand?model=wide&model=dense', 400, 'QUERY_INVALID'],
      [`/api/expert-demand?model=${'x'.repeat(300)}`, 400, 'QUERY_INVALID'],
      ['/api/expert-demand?model=%00', 404, 'MODEL_UNKNOWN'],
      ['/api/nothing-here', 404, 'NOT_FOUND'],
    ];
    for (const [url, status, code] of queries) {
      const r = await t.call('GET', url);
      assert.deepEqual([r.status, r.json?.code], [status, code], url);
    }
    const wrongMethod = await t.call('GET', '/api/expert-volunteer');
    assert.deepEqual([wrongMethod.status, wrongMethod.json.code], [404, 'NOT_FOUND']);
    assert.equal((await t.call('GET', '/api/health')).status, 200);
    assert.equal((await t.call('POST', '/api/expert-coverage', ok, token)).status, 200, 'a good heartbeat still works');
  } finally {
    await t.close();
  }
});

test('durable state: the token secret and volunteers survive a restart', async () => {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const dir = mkdtempSync(join(tmpdir(), 'es-state-'));
  try {
    const v = newVolunteer();
    const a = await testHub({ stateDir: dir, models: [{ path: wide.path, name: 'wide' }] });
    const token = await a.login(v);
    a.hub.addCredit(v.wallet, 42);
    a.hub.quarantine('bad-worker', 'failed spot checks');
    await a.close();
    const b = await testHub({ stateDir: dir, models: [{ path: wide.path, name: 'wide' }] });
    try {
      assert.equal((await b.call('POST', '/api/expert-volunteer', {}, token)).status, 200, 'token minted before the restart still valid');
      assert.equal(b.hub.creditOf(v.wallet), 42);
      const q = await b.call(
        'POST',
        '/api/expert-coverage',
        { worker_id: 'bad-worker', model: 'wide', n_layer: 2, n_expert: 256, segments: [] },
        token,
      );
      assert.deepEqual([q.status, q.json.code], [403, 'WORKER_QUARANTINED']);
    } finally {
      await b.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// ---------------------------------------------------------------------------------------------------- admin actions

const small = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 32, ff: 32, nExpert: 8, nExpertUsed: 2, seed: 7 });
const ADMIN = 'hub-api-test-admin-token-0123456789';

async function heartbeatOf(t: TestHub, token: string, workerId: string): Promise<{ status: number; json: { code?: string } }> {
  return t.call(
    'POST',
    '/api/expert-coverage',
    {
      worker_id: workerId,
      model: 'm',
      n_layer: 2,
      n_expert: 8,
      segments: [
        [0, 0, 8],
        [1, 0, 8],
      ],
    },
    token,
  );
}

/** The proper way for an HTTP worker of model 'm' to hold both its layers: two offers, two downloads, heartbeats. */
async function holdWholeModel(t: TestHub, token: string, workerId: string): Promise<void> {
  const segments: number[][] = [];
  for (let i = 0; i < 2; i++) {
    const s = await takeSlice(t, token, workerId, { model: 'm' });
    segments.push([s.layer, ...s.experts]);
    const r = await t.call('POST', '/api/expert-coverage', { worker_id: workerId, model: 'm', n_layer: 2, n_expert: 8, segments }, token);
    assert.equal(r.status, 200, `${workerId}: ${JSON.stringify(r.json)}`);
  }
  assert.deepEqual(
    segments.sort((a, b) => (a[0] ?? 0) - (b[0] ?? 0)),
    [
      [0, 0, 8],
      [1, 0, 8],
    ],
    `${workerId} holds every expert of m`,
  );
}

const wantsNothing = (demand: { models: Array<{ layers: Array<{ segments: Array<{ scarcity: number }> }> }> }): boolean =>
  demand.models[0]?.layers.every((l) => l.segments.every((x) => x.scarcity === 0)) ?? false;

test('admin release of an HTTP-heartbeat worker: its range is wanted again; its heartbeats get WORKER_RELEASED until the cool-down ends', async () => {
  // DEFAULT_SATURATION is frozen: the hub must change its own copy when an admin sets the targets (not throw → 500).
  const t = await testHub({
    models: [{ path: small.path, name: 'm' }],
    dispatchMode: 'always', // the market wants its base replicas at rest
    saturation: DEFAULT_SATURATION,
    adminToken: ADMIN,
    releaseCoolDownMs: 60_000,
  });
  try {
    const token = await t.login(newVolunteer());
    for (const id of ['w-a', 'w-b']) {
      await holdWholeModel(t, token, id);
      assert.equal((await heartbeatOf(t, token, id)).status, 200);
    }
    // Held over HTTP alone, nothing can send them work: no replicas (market/replicas.ts, issue 28), still wanted.
    assert.ok(!wantsNothing((await t.call('GET', '/api/expert-demand?model=m')).json), 'held, not replicas: still wanted');

    const rel = await t.call('POST', '/api/admin/workers/w-a/release', { reason: 'rebalancing' }, ADMIN);
    assert.deepEqual([rel.status, rel.json.detail], [200, 'released w-a (m): rebalancing']);
    assert.ok(!wantsNothing((await t.call('GET', '/api/expert-demand?model=m')).json), 'its range is wanted again');
    const map = (await t.call('GET', '/api/expert-dispatch-map?model=m')).json.rows as Array<{ worker_id: string }>;
    assert.deepEqual([...new Set(map.map((r) => r.worker_id))], ['w-b'], 'gone from the dispatch map');
    const workers = t.hub.dashboardModels()[0]?.workers;
    assert.deepEqual([workers?.grace, workers?.released], [1, 1], 'the dashboard shows it released (retired), not as a replica');

    const again = await heartbeatOf(t, token, 'w-a');
    assert.deepEqual([again.status, again.json.code], [409, 'WORKER_RELEASED']);
    assert.ok(!wantsNothing((await t.call('GET', '/api/expert-demand?model=m')).json), 'a refused heartbeat covers nothing');
    assert.equal((await heartbeatOf(t, token, 'w-b')).status, 200, 'the others are untouched');

    t.clock.now += 60_001;
    assert.equal((await heartbeatOf(t, token, 'w-a')).status, 200, 'after the cool-down it may serve again');
    const back = (await t.call('GET', '/api/expert-dispatch-map?model=m')).json.rows as Array<{ worker_id: string }>;
    assert.deepEqual([...new Set(back.map((r) => r.worker_id))].sort(), ['w-a', 'w-b'], 'back in the dispatch map');

    const target = await t.call('POST', '/api/admin/target', { base: 3, boost: 2 }, ADMIN);
    assert.deepEqual([target.status, target.json.detail], [200, 'target base 2 → 3, boost 1 → 2']);
    assert.deepEqual([DEFAULT_SATURATION.targetBase, DEFAULT_SATURATION.boost], [2, 1], "the caller's config is not changed");
    assert.equal((await t.call('GET', '/api/moe/recruitment')).json.target_base, 3);
  } finally {
    await t.close();
  }
});

test('admin quarantine: the worker id alone by default; { wallet: true } quarantines its wallet too', async () => {
  // Demand for eight replicas at rest: every worker below is offered both layers of m before it reports them.
  const t = await testHub({
    models: [{ path: small.path, name: 'm' }],
    adminToken: ADMIN,
    dispatchMode: 'always',
    saturation: { ...DEFAULT_SATURATION, targetBase: 8 },
  });
  try {
    const alice = newVolunteer();
    const bob = newVolunteer();
    const aliceToken = await t.login(alice);
    const bobToken = await t.login(bob);
    for (const id of ['a-1', 'a-2']) {
      await holdWholeModel(t, aliceToken, id);
      assert.equal((await heartbeatOf(t, aliceToken, id)).status, 200);
    }
    for (const id of ['b-1', 'b-2']) {
      await holdWholeModel(t, bobToken, id);
      assert.equal((await heartbeatOf(t, bobToken, id)).status, 200);
    }

    const byId = await t.call('POST', '/api/admin/workers/b-1/quarantine', { reason: 'wrong sums' }, ADMIN);
    assert.deepEqual([byId.status, byId.json.detail], [200, 'quarantined b-1 (m): wrong sums']);
    assert.deepEqual((await heartbeatOf(t, bobToken, 'b-1')).json.code, 'WORKER_QUARANTINED');
    assert.equal((await heartbeatOf(t, bobToken, 'b-2')).status, 200, "default: the wallet's other workers keep serving");
    await holdWholeModel(t, bobToken, 'b-3');
    assert.equal((await heartbeatOf(t, bobToken, 'b-3')).status, 200, '… and a new worker id of it too');

    const byWallet = await t.call('POST', '/api/admin/workers/a-1/quarantine', { reason: 'wrong sums', wallet: true }, ADMIN);
    assert.deepEqual([byWallet.status, byWallet.json.detail], [200, `quarantined a-1 (m) and its wallet ${alice.wallet}: wrong sums`]);
    for (const id of ['a-1', 'a-2', 'a-fresh']) {
      const r = await heartbeatOf(t, aliceToken, id);
      assert.deepEqual([r.status, r.json.code], [403, 'WORKER_QUARANTINED'], id);
    }
    const events = (await t.call('GET', '/api/events?kind=admin')).json.events as Array<{ detail: string }>;
    assert.equal(events.at(-1)?.detail, byWallet.json.detail);

    t.hub.heartbeat('no-wallet', null, 'm', [[0, 0, 8]]);
    const none = await t.call('POST', '/api/admin/workers/no-wallet/quarantine', { reason: 'x', wallet: true }, ADMIN);
    assert.deepEqual([none.status, none.json.code], [400, 'BODY_INVALID'], 'no wallet to quarantine: refused, nothing done');
    t.hub.heartbeat('no-wallet', null, 'm', [[0, 0, 8]]);
  } finally {
    await t.close();
  }
});

// ---------------------------------------------------------------------------------------------------- the poller

test('the saturation poller publishes each /slots reading at once while /metrics hangs; tokens follow when /metrics answers', async () => {
  const held: ServerResponse[] = [];
  let metricsAnswers = false;
  const METRICS = 'llamacpp:requests_processing 0\nllamacpp:tokens_predicted_total 42\n';
  const server = createServer((req, res) => {
    if (req.url === '/slots') {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify([
          { id: 0, is_processing: true },
          { id: 1, is_processing: false },
        ]),
      );
    } else if (req.url === '/metrics' && metricsAnswers) res.end(METRICS);
    else held.push(res); // hangs
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const readings: Array<{ at: number; reading: SlotsReading }> = [];
  const poller = new SaturationPoller(
    () => [{ name: 'c', url }],
    { intervalMs: 100, timeoutMs: 20_000 },
    (_name, reading) => readings.push({ at: performance.now(), reading }),
  );
  const t0 = performance.now();
  try {
    poller.start();
    const deadline = t0 + 10_000; // well under the 20 s /metrics timeout that used to hold every reading back
    while (readings.length < 3 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.ok(readings.length >= 3, `${readings.length} readings while /metrics hangs`);
    assert.deepEqual([readings[0]?.reading.source, readings[0]?.reading.busy, readings[0]?.reading.slots], ['slots', 1, 2]);
    assert.equal(held.length, 1, 'one /metrics in flight; the /slots polls do not wait for it, nor queue more of it');
    assert.equal(poller.generation('c').cur, undefined, 'no tokens counter without /metrics');

    metricsAnswers = true;
    for (const res of held.splice(0)) res.end(METRICS);
    while (poller.generation('c').cur === undefined && performance.now() < deadline + 5_000) await new Promise((r) => setTimeout(r, 20));
    assert.equal(poller.generation('c').cur?.value, 42, 'the counter once /metrics landed');
  } finally {
    poller.stop();
    for (const res of held) res.destroy();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('POST /api/expert-volunteer types: offered only layers whose tensors it reads, else type-unsupported naming them; bad lists are 400', async () => {
  const t = await testHub({ models: [{ path: wide.path, name: 'wide' }], dispatchMode: 'always' });
  try {
    const token = await t.login(newVolunteer());
    const offer = (types: unknown) => t.call('POST', '/api/expert-volunteer', { model: 'wide', max_experts: 8, types }, token);
    // wide is F32 throughout: a worker that reads F32 (an unknown name beside it is dropped) is offered a slice.
    const reads = await offer(['Q9_Z', 'F32']);
    assert.equal(reads.status, 200);
    assert.deepEqual([reads.json.assigned, reads.json.layer, reads.json.experts], [true, 0, [0, 8]]);
    const lacks = await offer(['Q4_K', 'IQ2_XXS']);
    assert.equal(lacks.status, 200);
    assert.equal(lacks.json.code, 'type-unsupported', JSON.stringify(lacks.json));
    assert.match(lacks.json.reason, /wide layer 0: gate F32, up F32, down F32\); it reads Q4_K, IQ2_XXS/);
    for (const bad of ['F32', [1], Array(65).fill('F32')]) {
      const r = await offer(bad);
      assert.equal(r.status, 400, JSON.stringify(bad));
      assert.equal(r.json.code, 'BODY_INVALID');
    }
  } finally {
    await t.close();
  }
});
