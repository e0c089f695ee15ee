/**
 * The dashboard's hub side against real hubs (hub/dashboard/, contract in protocol/dashboard.ts):
 * - a hub with its real coordinator (linkcpp-server) and a listening port: the SSE stream's snapshot equals the API
 *   (`/api/moe/recruitment`, `/api/expert-dispatch-map`), ticks arrive every second, heartbeats show as worker counts
 *   and a `coverage` message, a volunteer joining and leaving over the channel shows as events and totals, load
 *   saturates the coordinator and ends (events, ticks, tokens/s), admin actions are refused without the token and
 *   take effect with it, the 65th stream is refused with TOO_MANY_STREAMS, and stopping the hub ends the streams;
 * - a hub without coordinator and without an admin token (fastify inject): every admin call 403, bad queries 400;
 * - 10,000 simulated workers on a 48-layer × 256-expert model: the workers query's latency (printed, asserted only
 *   structurally) and the snapshot's size.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { get, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocket, type RawData } from 'ws';
import { startSwarmHub, type SwarmHub } from '../../harness/swarm.ts';
import { testModel } from '../../harness/models.ts';
import { newVolunteer, testHub } from '../../harness/hub-fixtures.ts';
import { GGMLType } from '../../gguf/quant-types.ts';
import { DEFAULT_SATURATION } from '../../hub/market/saturation.ts';
import { DEFAULT_DISPATCH } from '../../hub/dispatch/map.ts';
import { isHubError } from '../../hub/errors.ts';
import { STREAMS_PER_IP } from '../../hub/limits.ts';
import { parseHubArgs } from '../../hub/cli.ts';
import { Hub, defaultConfig } from '../../hub/hub.ts';
import {
  type CoverageMap,
  coverageBytes,
  type HubEventRow,
  type Snapshot,
  STREAMS_MAX,
  type StreamMessages,
  type WorkerRow,
  type WorkersPage,
} from '../../protocol/dashboard.ts';
import { encodeClientMessage, parseHubMessage, VOLUNTEER_PATH, type HubMessage } from '../../protocol/channel/index.ts';

const model = await testModel({ arch: 'qwen3moe', layers: 4, nEmbd: 256, ff: 256, nExpert: 16, nExpertUsed: 4, seed: 9 });
const banBias = Object.fromEntries(model.ban.map((id) => [String(id), -100]));
const TOKEN = 'dashboard-test-admin-token-0123456789';
const wait = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------------- an SSE client

type Message = { [K in keyof StreamMessages]: { event: K; data: StreamMessages[K] } }[keyof StreamMessages];

/** One `GET /api/dashboard/stream`, parsed as a browser's EventSource would (comments counted, not delivered). */
class Stream {
  readonly messages: Message[] = [];
  pings = 0;
  ended = false;
  private buffer = '';
  private wake: () => void = () => {};

  private constructor(private readonly res: IncomingMessage) {
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      this.buffer += chunk;
      let i = this.buffer.indexOf('\n\n');
      while (i >= 0) {
        const block = this.buffer.slice(0, i);
        this.buffer = this.buffer.slice(i + 2);
        if (block.startsWith(':')) this.pings++;
        else {
          const event = /^event: (\w+)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (event && data) this.messages.push({ event, data: JSON.parse(data) } as Message);
        }
        i = this.buffer.indexOf('\n\n');
      }
      this.wake();
    });
    res.on('close', () => {
      this.ended = true;
      this.wake();
    });
  }

  get headers(): IncomingMessage['headers'] {
    return this.res.headers;
  }

  /** Opens a stream; a refusal resolves with its status and JSON body instead. */
  static open(url: string): Promise<Stream | { status: number; json: { code: string; error: string } }> {
    return new Promise((resolve, reject) => {
      const req = get(`${url}/api/dashboard/stream`, { agent: false }, (res) => {
        if (res.statusCode === 200) {
          resolve(new Stream(res));
          return;
        }
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          body += c;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, json: JSON.parse(body) }));
      });
      req.on('error', reject);
    });
  }

  static async must(url: string): Promise<Stream> {
    const s = await Stream.open(url);
    if (!(s instanceof Stream)) throw new Error(`stream refused: ${s.status} ${JSON.stringify(s.json)}`);
    return s;
  }

  /** The first message from index `from` on of this kind that passes `ok`; waits up to `ms` for it. */
  async next<K extends keyof StreamMessages>(
    event: K,
    ok: (d: StreamMessages[K]) => boolean = () => true,
    ms = 5_000,
    from = 0,
  ): Promise<StreamMessages[K]> {
    const deadline = performance.now() + ms;
    for (;;) {
      const m = this.messages.slice(from).find((x) => x.event === event && ok(x.data as StreamMessages[K]));
      if (m) return m.data as StreamMessages[K];
      if (this.ended) throw new Error(`the stream ended while waiting for ${event}`);
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`no matching ${event} within ${ms} ms (${this.messages.length} messages)`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
  }

  /** Index after the messages received so far: `next(…, from)` then sees only newer ones. */
  get mark(): number {
    return this.messages.length;
  }

  async closed(ms = 5_000): Promise<void> {
    const deadline = performance.now() + ms;
    while (!this.ended && performance.now() < deadline) await wait(20);
    assert.ok(this.ended, 'the stream ended');
  }

  close(): void {
    this.res.destroy();
  }
}

// ---------------------------------------------------------------------------------------------------- HTTP helpers

/** A JSON answer; the tests read the fields they assert. */
// biome-ignore lint/suspicious/noExplicitAny: any JSON answer
type Answer = { status: number; json: any };

async function call(url: string, method: 'GET' | 'POST', path: string, body?: unknown, token?: string): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (token !== undefined) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await fetch(`${url}${path}`, { method, headers, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await r.text();
  let json: unknown = text;
  try {
    json = JSON.parse(text);
  } catch {
    // 204 and the like
  }
  return { status: r.status, json };
}

interface MapRow {
  worker_id: string;
  state: string;
  layer: number;
  experts: [number, number];
}

/** Workers by state as the dispatch map lists them (one per worker, whatever its rows). */
async function mapStates(url: string, m: string): Promise<Record<string, number>> {
  const rows = (await call(url, 'GET', `/api/expert-dispatch-map?model=${m}`)).json.rows as MapRow[];
  const byWorker = new Map(rows.map((r) => [r.worker_id, r.state]));
  const out: Record<string, number> = {};
  for (const s of byWorker.values()) out[s] = (out[s] ?? 0) + 1;
  return out;
}

const nonZero = (counts: Record<string, number>): Record<string, number> =>
  Object.fromEntries(Object.entries(counts).filter(([, n]) => n > 0));

/**
 * The dashboard's counts of the workers the hub tracks now: what the dispatch map lists too. The dashboard also counts
 * released and quarantined workers retired in the last 15 minutes (HISTORY_MS), which the map no longer lists; those
 * are compared with the workers table instead (`retiredCounts`).
 */
const liveCounts = (counts: Record<string, number>): Record<string, number> =>
  nonZero(Object.fromEntries(Object.entries(counts).filter(([state]) => state !== 'released' && state !== 'quarantined')));

/** Released and quarantined workers as the workers table lists them (the API behind the dashboard's retired counts). */
async function retiredCounts(url: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const state of ['released', 'quarantined']) {
    const total = ((await call(url, 'GET', `/api/dashboard/workers?state=${state}&model=m`)).json as WorkersPage).total;
    if (total > 0) out[state] = total;
  }
  return out;
}

/** The dashboard's counts equal the API's: live workers the dispatch map's, retired ones the workers table's. */
async function assertCountsEqualApi(url: string, counts: Record<string, number>): Promise<void> {
  assert.deepEqual(liveCounts(counts), await mapStates(url, 'm'), 'live workers = /api/expert-dispatch-map');
  const retired = nonZero(Object.fromEntries(Object.entries(counts).filter(([state]) => state === 'released' || state === 'quarantined')));
  assert.deepEqual(retired, await retiredCounts(url), 'released and quarantined (last 15 min) = the workers table');
}

/** A volunteer over the channel: logs in, says hello, and keeps what the hub sends. */
async function channelVolunteer(
  url: string,
  workerId: string,
): Promise<{ ws: WebSocket; inbox: HubMessage[]; next: (type: string) => Promise<HubMessage> }> {
  const v = newVolunteer();
  const c = await call(url, 'POST', '/api/auth/challenge', { wallet: v.wallet });
  const t = await call(url, 'POST', '/api/auth/node-token', { wallet: v.wallet, nonce: c.json.nonce, signature: v.sign(c.json.message) });
  assert.equal(t.status, 200);
  const ws = new WebSocket(`${url.replace('http', 'ws')}${VOLUNTEER_PATH}`);
  const inbox: HubMessage[] = [];
  ws.on('message', (data: RawData, isBinary) => {
    if (!isBinary) inbox.push(parseHubMessage(String(data)));
  });
  ws.on('error', () => {});
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  ws.send(
    encodeClientMessage({
      type: 'hello',
      version: 1,
      token: t.json.node_token,
      workerId,
      device: {
        webgpu: true,
        adapter: { vendor: 'test', architecture: 'loopback', description: 'Dashboard Test GPU', isFallbackAdapter: false },
        limits: { maxStorageBufferBindingSize: 1 << 30, maxBufferSize: 1 << 30 },
        features: [],
        backend: null,
        gflops: null,
        memoryBudgetBytes: 1 << 30,
      },
      numerics: ['exact', 'llama'],
      encodings: ['f32'],
      model: '',
      maxExperts: 0,
      agent: 'dashboard-api.test',
    }),
  );
  const next = async (type: string): Promise<HubMessage> => {
    for (let i = 0; i < 200; i++) {
      const k = inbox.findIndex((m) => m.type === type);
      if (k >= 0) return inbox.splice(k, 1)[0] as HubMessage;
      await wait(25);
    }
    throw new Error(`no ${type} within 5 s: ${JSON.stringify(inbox)}`);
  };
  await next('welcome');
  return { ws, inbox, next };
}

// ---------------------------------------------------------------------------------------------------- the live hub

test('a live hub: stream = API, ticks, heartbeats, a volunteer, admin actions, saturation, the stream cap, stop', async (t) => {
  let swarm: SwarmHub | null = await startSwarmHub(model.path, 'auto', {
    adminToken: TOKEN,
    poller: { intervalMs: 250, timeoutMs: 1000 },
    saturation: { ...DEFAULT_SATURATION, saturateAt: 1 },
    // every stream of this test comes from 127.0.0.1: the per-address caps are tested on their own below
    dashboardStreams: { maxPerClient: STREAMS_MAX, openRate: { capacity: 1000, refillPerSec: 100 } },
  });
  const { hub, url } = swarm;
  const streams: Stream[] = [];
  const sockets: WebSocket[] = [];
  try {
    // --- the snapshot equals the API (once the poller has read the coordinator), then a tick within 2 s
    for (let i = 0; i < 100 && (await call(url, 'GET', '/api/moe/recruitment')).json.models[0].busy === null; i++) await wait(50);
    const s = await Stream.must(url);
    streams.push(s);
    assert.equal(s.headers['content-type'], 'text/event-stream; charset=utf-8');
    assert.equal(s.headers['cache-control'], 'no-store');
    assert.equal(s.headers['x-accel-buffering'], 'no');
    const snap = await s.next('snapshot');
    assert.equal(s.messages[0]?.event, 'snapshot', 'the snapshot comes first');
    const rec = (await call(url, 'GET', '/api/moe/recruitment')).json;
    assert.deepEqual(
      snap.models.map((m) => [m.model, m.busy, m.slots, m.saturated, m.recruiting, m.baseTarget, m.boost, m.effectiveTarget]),
      rec.models.map((m: Record<string, unknown>) => [
        m.model,
        m.busy,
        m.slots,
        m.saturated,
        m.recruiting,
        m.base_target,
        rec.boost,
        m.effective_target,
      ]),
    );
    const m0 = snap.models[0];
    assert.ok(m0);
    assert.deepEqual(
      [m0.model, m0.market, m0.coordinator.state, m0.dispatchMode, m0.shape],
      ['m', true, 'ready', 'auto', { nLayer: 4, nExpert: 16, moeLayers: [0, 1, 2, 3] }],
    );
    await assertCountsEqualApi(url, m0.workers);
    assert.equal(snap.adminEnabled, true);
    assert.deepEqual([snap.v, snap.tickMs, snap.historyMs], [1, 1000, 900_000]);
    assert.ok(
      snap.events.some((e) => e.kind === 'coordinator' && e.model === 'm'),
      'the coordinator coming up is in the snapshot',
    );
    assert.ok(snap.events.every((e, i, all) => i === 0 || e.seq > (all[i - 1] as HubEventRow).seq));
    const cov0 = snap.coverage.find((c) => c.model === 'm') as CoverageMap;
    assert.deepEqual([cov0.moeLayers, cov0.nExpert, coverageBytes(cov0).length], [[0, 1, 2, 3], 16, 64]);
    const t0 = performance.now();
    const tick = await s.next('tick', () => true, 15_000);
    t.diagnostic(`first tick after ${(performance.now() - t0).toFixed(0)} ms`);
    assert.deepEqual(Object.keys(tick.samples), ['m']);
    assert.equal(tick.models[0]?.model, 'm');
    assert.ok((tick.samples.m?.t ?? 0) >= snap.atMs);

    // --- HTTP-heartbeat workers: counts equal the dispatch map, the heatmap changes, rows in the table
    let mark = s.mark;
    hub.heartbeat('http-a', null, 'm', [[0, 0, 16]]);
    hub.heartbeat('http-b', null, 'm', [[1, 0, 8]]);
    hub.heartbeat('http-c', null, 'm', [[1, 4, 12]]);
    const cov = await s.next('coverage', (c) => c.model === 'm', 15_000, mark);
    const bytes = coverageBytes(cov);
    const want = new Uint8Array(64);
    for (let e = 0; e < 16; e++) want[e] = 1; // layer 0: http-a
    for (let e = 0; e < 12; e++) want[16 + e] = (e < 8 ? 1 : 0) + (e >= 4 ? 1 : 0); // layer 1: b [0,8) + c [4,12)
    assert.deepEqual([...bytes], [...want]);
    assert.deepEqual(cov, { ...(await call(url, 'GET', '/api/dashboard/coverage?model=m')).json, atMs: cov.atMs });
    const afterBeat = await s.next('tick', (x) => (x.models[0]?.workers.grace ?? 0) === 3, 15_000, mark);
    await assertCountsEqualApi(url, afterBeat.models[0]?.workers ?? {});
    assert.equal(afterBeat.totals.workers, 3);
    const page = (await call(url, 'GET', '/api/dashboard/workers?sort=layer')).json as WorkersPage;
    assert.deepEqual(
      page.rows.map((r) => [r.id, r.slice, r.state, r.backend]),
      [
        ['http-a', [0, 0, 16], 'grace', 'native'],
        ['http-b', [1, 0, 8], 'grace', 'native'],
        ['http-c', [1, 4, 12], 'grace', 'native'],
      ],
    );

    // --- admin: refused without the token, with a wrong one
    for (const token of [undefined, 'wrong-token-wrong-token', `${TOKEN}x`]) {
      const r = await call(url, 'GET', '/api/admin/check', undefined, token);
      assert.deepEqual([r.status, r.json.code], [401, 'ADMIN_TOKEN_INVALID'], String(token));
      const target = await call(url, 'POST', '/api/admin/target', { base: 5 }, token);
      assert.deepEqual([target.status, target.json.code], [401, 'ADMIN_TOKEN_INVALID']);
      const release = await call(url, 'POST', '/api/admin/workers/http-a/release', {}, token);
      assert.deepEqual([release.status, release.json.code], [401, 'ADMIN_TOKEN_INVALID']);
    }
    assert.equal((await call(url, 'GET', '/api/moe/recruitment')).json.target_base, 2, 'nothing changed without the token');
    assert.deepEqual(hub.adminRefusalCounts(), { ADMIN_TOKEN_INVALID: 9 }, 'bad tokens are counted, not logged');
    assert.ok(!hub.recentEvents(1000).some((e) => e.kind === 'admin'));
    assert.deepEqual(nonZero(await mapStates(url, 'm')), { grace: 3 });
    assert.equal((await call(url, 'GET', '/api/admin/check', undefined, TOKEN)).status, 204);

    // --- with it: base target 1, and a worker covering the rest, so the market wants nobody at rest
    mark = s.mark;
    const base1 = await call(url, 'POST', '/api/admin/target', { base: 1 }, TOKEN);
    assert.deepEqual([base1.status, base1.json], [200, { ok: true, detail: 'target base 2 → 1, boost 1 → 1' }]);
    await s.next('event', (e) => e.kind === 'admin' && e.detail === base1.json.detail, 15_000, mark);
    await s.next('tick', (x) => x.models[0]?.baseTarget === 1 && x.models[0]?.effectiveTarget === 1, 15_000, mark);
    assert.equal((await call(url, 'GET', '/api/moe/recruitment')).json.target_base, 1);
    hub.heartbeat('http-d', null, 'm', [
      [1, 0, 16],
      [2, 0, 16],
      [3, 0, 16],
    ]);
    const demand = (await call(url, 'GET', '/api/expert-demand?model=m')).json;
    assert.ok(demand.models[0].layers.every((l: { segments: Array<{ scarcity: number }> }) => l.segments.every((x) => x.scarcity === 0)));

    // --- a volunteer joins over the channel: an event, and the totals of the next tick
    mark = s.mark;
    const vol = await channelVolunteer(url, 'vol-1');
    sockets.push(vol.ws);
    const joined = await s.next('event', (e) => e.kind === 'volunteer-join' && e.detail.includes('vol-1'), 15_000, mark);
    assert.match(joined.detail, /Dashboard Test GPU/);
    await s.next('tick', (x) => x.totals.volunteers.waiting === 1, 15_000, mark);

    // --- dispatch always: the dispatcher's mode, and the market recruits at rest
    mark = s.mark;
    const always = await call(url, 'POST', '/api/admin/models/m/dispatch', { mode: 'always' }, TOKEN);
    assert.deepEqual([always.status, always.json], [200, { ok: true, detail: 'dispatch of m: auto → always' }]);
    await s.next('event', (e) => e.kind === 'admin' && e.detail === 'dispatch of m: auto → always', 15_000, mark);
    assert.equal((await call(url, 'GET', '/api/expert-demand?model=m')).json.models[0].recruiting, true);
    await s.next('tick', (x) => x.models[0]?.dispatchMode === 'always', 15_000, mark);
    // --- base target 2: every expert short of a replica, so the waiting volunteer is assigned a slice at once
    mark = s.mark;
    assert.equal((await call(url, 'POST', '/api/admin/target', { base: 2 }, TOKEN)).status, 200);
    const assign = (await vol.next('assign')) as Extract<HubMessage, { type: 'assign' }>;
    await s.next('tick', (x) => x.models[0]?.workers.loading === 1 && x.totals.volunteers.loading === 1, 15_000, mark);
    vol.ws.send(encodeClientMessage({ type: 'loaded', assignmentId: assign.assignmentId, ready: true, backend: 'wasm', gflops: 42 }));
    const serving = await s.next('tick', (x) => x.totals.volunteers.serving === 1, 15_000, mark);
    assert.deepEqual(nonZero(serving.models[0]?.workers ?? {}), { grace: 5 });
    await assertCountsEqualApi(url, serving.models[0]?.workers ?? {});
    const volRow = (await call(url, 'GET', '/api/dashboard/workers?q=vol-')).json as WorkersPage;
    assert.deepEqual(
      volRow.rows.map((r) => [r.id, r.state, r.backend, r.gflops, r.device, r.slice, typeof r.credit]),
      [['vol-1', 'grace', 'wasm', 42, 'Dashboard Test GPU', [assign.layer, assign.experts[0], assign.experts[1]], 'number']],
    );
    // --- release: a channel volunteer is told, and shows as released in the table and the counts
    mark = s.mark;
    const rel = await call(url, 'POST', '/api/admin/workers/vol-1/release', { reason: 'test release' }, TOKEN);
    assert.deepEqual([rel.status, rel.json.detail], [200, 'released vol-1 (m): test release']);
    const released = (await vol.next('release')) as Extract<HubMessage, { type: 'release' }>;
    assert.equal(released.reason, 'test release');
    await s.next('event', (e) => e.kind === 'admin' && e.detail === 'released vol-1 (m): test release', 15_000, mark);
    const relTick = await s.next('tick', (x) => x.models[0]?.workers.released === 1, 15_000, mark);
    assert.deepEqual(nonZero(relTick.models[0]?.workers ?? {}), { grace: 4, released: 1 });
    await assertCountsEqualApi(url, relTick.models[0]?.workers ?? {});
    assert.equal(relTick.totals.volunteers.waiting, 1);
    const relRows = (await call(url, 'GET', '/api/dashboard/workers?state=released')).json as WorkersPage;
    assert.deepEqual(
      relRows.rows.map((r) => [r.id, r.state, r.backend]),
      [['vol-1', 'released', 'wasm']],
    );
    // back to auto and base 1: nothing is wanted at rest (released before this, while the market still wanted its
    // slice: lowering the target first would have released it as surplus on the next reading, market/release.ts)
    mark = s.mark;
    assert.equal((await call(url, 'POST', '/api/admin/models/m/dispatch', { mode: 'auto' }, TOKEN)).status, 200);
    assert.equal((await call(url, 'POST', '/api/admin/target', { base: 1 }, TOKEN)).status, 200);
    assert.equal((await call(url, 'GET', '/api/expert-demand?model=m')).json.models[0].recruiting, false);
    await s.next('tick', (x) => x.models[0]?.dispatchMode === 'auto' && x.models[0]?.baseTarget === 1, 15_000, mark);

    // … and an HTTP-heartbeat worker, which cannot be told, is dropped (the market recruits for its range) and its
    // heartbeats are refused for the cool-down
    assert.equal((await call(url, 'POST', '/api/admin/workers/http-a/release', {}, TOKEN)).status, 200);
    assert.deepEqual(nonZero(await mapStates(url, 'm')), { grace: 3 });
    assert.throws(
      () => hub.heartbeat('http-a', null, 'm', [[0, 0, 16]]),
      (e: unknown) => isHubError(e, 'WORKER_RELEASED'),
    );

    // --- quarantine: durable; the worker is dropped at once and its heartbeats refused
    mark = s.mark;
    const q = await call(url, 'POST', '/api/admin/workers/http-b/quarantine', { reason: 'wrong sums' }, TOKEN);
    assert.deepEqual([q.status, q.json.detail], [200, 'quarantined http-b (m): wrong sums']);
    await s.next('event', (e) => e.kind === 'quarantine' && e.detail.startsWith('http-b'), 15_000, mark);
    await s.next('event', (e) => e.kind === 'admin' && e.detail === q.json.detail, 15_000, mark);
    assert.deepEqual(nonZero(await mapStates(url, 'm')), { grace: 2 });
    assert.throws(
      () => hub.heartbeat('http-b', null, 'm', [[1, 0, 8]]),
      (e: unknown) => isHubError(e, 'WORKER_QUARANTINED'),
    );
    const qTick = await s.next('tick', (x) => x.models[0]?.workers.quarantined === 1, 15_000, mark);
    assert.deepEqual(nonZero(qTick.models[0]?.workers ?? {}), { grace: 2, released: 2, quarantined: 1 });
    await assertCountsEqualApi(url, qTick.models[0]?.workers ?? {});
    const qRows = (await call(url, 'GET', '/api/dashboard/workers?state=quarantined')).json as WorkersPage;
    assert.deepEqual(
      qRows.rows.map((r) => r.id),
      ['http-b'],
    );

    // targets
    const tg = await call(url, 'POST', '/api/admin/target', { base: 3, boost: 2 }, TOKEN);
    assert.deepEqual([tg.status, tg.json.detail], [200, 'target base 1 → 3, boost 1 → 2']);
    const recAfter = (await call(url, 'GET', '/api/moe/recruitment')).json;
    assert.deepEqual([recAfter.target_base, recAfter.boost, recAfter.models[0].effective_target], [3, 2, 3]);
    await s.next('tick', (x) => x.models[0]?.baseTarget === 3 && x.models[0]?.boost === 2, 15_000, mark);

    // bad arguments: refused with their code, and each one in the event log
    const bad: Array<[path: string, body: unknown, status: number, code: string]> = [
      ['/api/admin/workers/nobody/release', {}, 404, 'WORKER_UNKNOWN'],
      ['/api/admin/workers/nobody/quarantine', { reason: 'x' }, 404, 'WORKER_UNKNOWN'],
      ['/api/admin/workers/http-c/quarantine', {}, 400, 'BODY_INVALID'],
      ['/api/admin/target', { base: 0 }, 400, 'BODY_INVALID'],
      ['/api/admin/target', { boost: 1000 }, 400, 'BODY_INVALID'],
      ['/api/admin/target', {}, 400, 'BODY_INVALID'],
      ['/api/admin/models/m/dispatch', { mode: 'never' }, 400, 'BODY_INVALID'],
      ['/api/admin/models/nope/dispatch', { mode: 'off' }, 404, 'MODEL_UNKNOWN'],
    ];
    const before = (await call(url, 'GET', '/api/events?kind=admin&limit=1000')).json.events.length as number;
    for (const [path, body, status, code] of bad) {
      const r = await call(url, 'POST', path, body, TOKEN);
      assert.deepEqual([r.status, r.json.code], [status, code], path);
    }
    const adminEvents = (await call(url, 'GET', '/api/events?kind=admin&limit=1000')).json.events as HubEventRow[];
    assert.equal(adminEvents.length, before + bad.length, 'every refused action is logged');
    assert.ok(adminEvents.slice(-bad.length).every((e) => e.detail.startsWith('refused ')));
    assert.equal(((await call(url, 'GET', '/api/events?kind=admin&model=nope')).json.events as HubEventRow[]).length, 1);
    assert.equal((await call(url, 'GET', '/api/moe/recruitment')).json.target_base, 3, 'a refused target changed nothing');

    // --- the volunteer leaves
    mark = s.mark;
    vol.ws.close();
    await s.next('event', (e) => e.kind === 'volunteer-leave' && e.detail === 'vol-1', 15_000, mark);
    await s.next('tick', (x) => Object.values(x.totals.volunteers).every((n) => n === 0), 15_000, mark);
    assert.equal((await call(url, 'POST', '/api/admin/workers/vol-1/release', {}, TOKEN)).json.code, 'WORKER_UNKNOWN', 'gone');

    // --- load saturates the coordinator (saturateAt 1, one slot), then ends
    mark = s.mark;
    const abort = new AbortController();
    const load = fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        prompt: 'The swarm serves',
        max_tokens: 4000,
        ignore_eos: true,
        stream: true,
        logit_bias: banBias,
      }),
      signal: abort.signal,
    }).then(async (r) => {
      const reader = r.body?.getReader();
      while (reader && !(await reader.read()).done);
    });
    load.catch(() => {});
    const onset = await s.next('event', (e) => e.kind === 'saturation-onset' && e.model === 'm', 10_000, mark);
    assert.equal(onset.detail, 'recruiting volunteers');
    const busyTick = await s.next('tick', (x) => x.models[0]?.saturated === true && (x.samples.m?.tokensPerS ?? 0) > 0, 10_000, mark);
    assert.deepEqual([busyTick.models[0]?.busy, busyTick.models[0]?.recruiting, busyTick.models[0]?.effectiveTarget], [1, true, 5]);
    t.diagnostic(`under load: ${busyTick.samples.m?.tokensPerS} tokens/s`);
    abort.abort();
    await load.catch(() => {});
    const mark2 = s.mark;
    await s.next('event', (e) => e.kind === 'saturation-end' && e.model === 'm', 10_000, mark);
    await s.next('tick', (x) => x.models[0]?.saturated === false && x.models[0]?.effectiveTarget === 3, 15_000, mark2);

    // --- the history holds the ticks so far, and a new stream gets it in its snapshot
    const s2 = await Stream.must(url);
    streams.push(s2);
    const snap2 = await s2.next('snapshot');
    const hist = snap2.history.m ?? [];
    assert.ok(hist.length >= 3, `${hist.length} samples`);
    assert.ok(hist.some((x) => x.busy === 1) && hist.some((x) => (x.tokensPerS ?? 0) > 0));
    assert.ok(hist.every((x, i) => i === 0 || x.t > (hist[i - 1]?.t ?? 0)));
    assert.ok(
      snap2.events.some((e) => e.kind === 'saturation-end'),
      'events continue',
    );

    // --- the stream cap: STREAMS_MAX open, one more is refused with TOO_MANY_STREAMS
    while (streams.length < STREAMS_MAX) streams.push(await Stream.must(url));
    const refused = await Stream.open(url);
    assert.ok(!(refused instanceof Stream));
    assert.deepEqual([refused.status, refused.json.code], [503, 'TOO_MANY_STREAMS']);
    streams.pop()?.close();
    // The hub frees the place when it sees the close, which a loaded machine may take a while to do.
    let again: Stream | null = null;
    for (const deadline = performance.now() + 10_000; !again; ) {
      const r = await Stream.open(url);
      if (r instanceof Stream) again = r;
      else {
        assert.deepEqual([r.status, r.json.code], [503, 'TOO_MANY_STREAMS']);
        assert.ok(performance.now() < deadline, 'a closed stream frees its place within 10 s');
        await wait(50);
      }
    }
    streams.push(again);
    await again.next('snapshot');

    // --- stopping the hub ends every stream
    const closing = swarm;
    swarm = null;
    await closing.close();
    for (const x of streams) await x.closed();
  } finally {
    for (const x of streams) x.close();
    for (const ws of sockets) ws.terminate(); // an open WebSocket would hold the HTTP server's close
    await swarm?.close();
  }
});

// ---------------------------------------------------------------------------------------------------- no admin token

test('without an admin token every admin call is 403; bad queries are 400 QUERY_INVALID; short tokens refused at startup', async () => {
  const small = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 32, ff: 32, nExpert: 8, nExpertUsed: 2, seed: 21 });
  const h = await testHub({ models: [{ path: small.path, name: 'm' }] });
  try {
    const admin: Array<['GET' | 'POST', string, unknown]> = [
      ['GET', '/api/admin/check', undefined],
      ['POST', '/api/admin/workers/w/release', {}],
      ['POST', '/api/admin/workers/w/quarantine', { reason: 'x' }],
      ['POST', '/api/admin/target', { base: 3 }],
      ['POST', '/api/admin/models/m/dispatch', { mode: 'off' }],
    ];
    for (const [method, path, body] of admin) {
      for (const token of [undefined, TOKEN]) {
        const r = await h.call(method, path, body, token);
        assert.deepEqual([r.status, r.json.code], [403, 'ADMIN_DISABLED'], `${path} ${token ? 'with' : 'without'} a token`);
      }
    }
    assert.equal(h.hub.dashboardSnapshot().adminEnabled, false);
    assert.deepEqual(h.hub.adminRefusalCounts(), { ADMIN_DISABLED: admin.length * 2 });

    const bad: string[] = [
      '/api/dashboard/workers?sort=speed',
      '/api/dashboard/workers?dir=up',
      '/api/dashboard/workers?state=busy',
      '/api/dashboard/workers?limit=0',
      '/api/dashboard/workers?limit=501',
      '/api/dashboard/workers?offset=-1',
      '/api/dashboard/workers?offset=1.5',
      `/api/dashboard/workers?q=${'x'.repeat(129)}`,
      `/api/dashboard/workers?model=${'x'.repeat(257)}`,
      '/api/dashboard/workers?sort=id&sort=model',
      '/api/events?kind=party',
      '/api/events?limit=0',
      '/api/events?limit=1001',
      '/api/events?limit=ten',
      `/api/events?model=${'x'.repeat(257)}`,
      '/api/events?kind=admin&kind=recruit',
      '/api/dashboard/coverage',
      `/api/dashboard/coverage?model=${'x'.repeat(257)}`,
    ];
    for (const path of bad) {
      const r = await h.call('GET', path);
      assert.deepEqual([r.status, r.json.code], [400, 'QUERY_INVALID'], path);
      assert.equal(typeof r.json.error, 'string');
    }
    for (const path of ['/api/dashboard/coverage?model=nope', '/api/dashboard/workers?model=nope']) {
      const r = await h.call('GET', path);
      assert.deepEqual([r.status, r.json.code], [404, 'MODEL_UNKNOWN'], path);
    }
    const ok = await h.call('GET', '/api/events?kind=&model=&limit=');
    assert.equal(ok.status, 200, 'empty parameters are no filter');
    const empty = await h.call('GET', '/api/dashboard/workers?model=m&state=proven&q=x&sort=credit&dir=desc&offset=10&limit=500');
    assert.deepEqual([empty.status, empty.json], [200, { total: 0, offset: 10, rows: [] }]);

    const short = 'x'.repeat(15);
    assert.throws(() => new Hub(defaultConfig({ stateDir: ':memory:', adminToken: short })), /at least 16 characters/);
    assert.throws(() => parseHubArgs(['--model', small.path, '--admin-token', short], {}), /at least 16 characters/);
    assert.throws(() => parseHubArgs(['--model', small.path], { EXPERTSWARM_ADMIN_TOKEN: short }), /at least 16 characters/);
    const cfg = parseHubArgs(['--model', small.path], { EXPERTSWARM_ADMIN_TOKEN: TOKEN });
    assert.equal(cfg !== 'help' && cfg.adminToken, TOKEN);
    const flag = parseHubArgs(['--model', small.path, '--admin-token', `${TOKEN}-flag`], { EXPERTSWARM_ADMIN_TOKEN: TOKEN });
    assert.equal(flag !== 'help' && flag.adminToken, `${TOKEN}-flag`, 'the flag wins over the environment');
    const none = parseHubArgs(['--model', small.path], {});
    assert.equal(none !== 'help' && none.adminToken, null);
    // An empty EXPERTSWARM_ADMIN_TOKEN is unset: it does not turn off the token of --config.
    const dir = mkdtempSync(join(tmpdir(), 'es-cli-'));
    try {
      const file = join(dir, 'hub.json');
      writeFileSync(file, JSON.stringify({ adminToken: `${TOKEN}-file` }));
      const fromFile = parseHubArgs(['--model', small.path, '--config', file], { EXPERTSWARM_ADMIN_TOKEN: '' });
      assert.equal(fromFile !== 'help' && fromFile.adminToken, `${TOKEN}-file`);
      const envWins = parseHubArgs(['--model', small.path, '--config', file], { EXPERTSWARM_ADMIN_TOKEN: TOKEN });
      assert.equal(envWins !== 'help' && envWins.adminToken, TOKEN, 'a set variable still wins over the file');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  } finally {
    await h.close();
  }
});

// ---------------------------------------------------------------------------------------------------- stream refusals

test('stream refusals are JSON answers that end: 5th stream of one address, a snapshot that throws (500 INTERNAL)', async () => {
  const small = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 32, ff: 32, nExpert: 8, nExpertUsed: 2, seed: 21 });
  const h = await testHub({ models: [{ path: small.path, name: 'm' }] });
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  const open: Stream[] = [];
  try {
    for (let i = 0; i < STREAMS_PER_IP; i++) {
      const s = await Stream.must(url);
      open.push(s);
      await s.next('snapshot', () => true, 15_000);
    }
    const fifth = await Stream.open(url);
    assert.ok(!(fifth instanceof Stream), 'the 5th stream from one address is refused');
    assert.deepEqual([fifth.status, fifth.json.code], [503, 'TOO_MANY_STREAMS']);
    for (const s of open.splice(0)) s.close();

    // A snapshot that throws: a JSON 500 and the end of the response, not a 200 left open for ever.
    const real = h.hub.dashboardSnapshot.bind(h.hub);
    h.hub.dashboardSnapshot = () => {
      throw new Error('snapshot broke');
    };
    let broken: Awaited<ReturnType<typeof Stream.open>> | null = null;
    for (const deadline = performance.now() + 10_000; broken === null; ) {
      const r = await Stream.open(url); // the closed streams' places free as the hub sees them close
      if (r instanceof Stream) throw new Error('a stream opened with a broken snapshot');
      if (r.status === 503 && performance.now() < deadline) await wait(50);
      else broken = r;
    }
    assert.ok(!(broken instanceof Stream));
    assert.deepEqual(
      [broken.status, broken.json.code],
      [500, 'INTERNAL'],
      'a JSON error, and the response ended (Stream.open read it to its end)',
    );
    assert.ok(
      h.hub.recentEvents(10).some((e) => e.detail.includes('snapshot broke')),
      'logged as an internal error',
    );
    h.hub.dashboardSnapshot = real;
    const ok = await Stream.must(url);
    open.push(ok);
    await ok.next('snapshot', () => true, 15_000);
  } finally {
    for (const s of open) s.close();
    await h.close();
  }
});

// ---------------------------------------------------------------------------------------------------- 10,000 workers

test('10,000 simulated workers on 48 layers × 256 experts: workers pages, the heatmap, the snapshot', async (t) => {
  const big = await testModel({
    arch: 'qwen3moe',
    layers: 48,
    nEmbd: 32,
    ff: 32,
    nExpert: 256,
    nExpertUsed: 8,
    type: GGMLType.Q4_0,
    seed: 48,
  });
  // Every worker stays in its grace window however slowly this runs (the default is 15 s from its first heartbeat).
  const h = await testHub({
    models: [{ path: big.path, name: 'big' }],
    adminToken: TOKEN,
    dispatch: { ...DEFAULT_DISPATCH, graceMs: 3_600_000 },
  });
  try {
    const N = 10_000;
    const t0 = performance.now();
    for (let i = 0; i < N; i++) {
      const layer = i % 48;
      const begin = (Math.floor(i / 48) * 8) % 256;
      h.hub.heartbeat(`w${String(i).padStart(5, '0')}`, i % 4 === 0 ? null : `wallet-${i % 2000}`, 'big', [[layer, begin, begin + 8]]);
    }
    t.diagnostic(`${N} heartbeats in ${(performance.now() - t0).toFixed(0)} ms`);
    for (let k = 0; k < 2000; k += 7) h.hub.addCredit(`wallet-${k}`, k);

    const times: string[] = [];
    const timed = async (label: string, path: string): Promise<WorkersPage> => {
      const a = performance.now();
      const r = await h.call('GET', path);
      times.push(`${label} ${(performance.now() - a).toFixed(1)} ms`);
      assert.equal(r.status, 200, path);
      return r.json as WorkersPage;
    };
    const first = await timed('first page (rows built, sorted by id):', '/api/dashboard/workers?limit=100');
    assert.deepEqual([first.total, first.offset, first.rows.length], [N, 0, 100]);
    assert.deepEqual(
      first.rows.slice(0, 3).map((r) => r.id),
      ['w00000', 'w00001', 'w00002'],
    );
    const second = await timed('next page:', '/api/dashboard/workers?offset=100&limit=100');
    assert.deepEqual(
      second.rows.map((r) => r.id),
      Array.from({ length: 100 }, (_, i) => `w${String(100 + i).padStart(5, '0')}`),
    );
    const deep = await timed('credit desc (a new sort):', '/api/dashboard/workers?sort=credit&dir=desc&offset=7250&limit=500');
    assert.deepEqual([deep.total, deep.offset, deep.rows.length], [N, 7250, 500]);
    const credits = deep.rows.map((r) => r.credit);
    const nonNull = credits.filter((c): c is number => c !== null);
    assert.deepEqual(
      nonNull,
      [...nonNull].sort((a, b) => b - a),
      'credit descending',
    );
    assert.deepEqual([nonNull.length, credits.slice(250).every((c) => c === null)], [250, true], '2,500 rows without a wallet come last');
    const top = await timed('credit desc, first row:', '/api/dashboard/workers?sort=credit&dir=desc&limit=1');
    assert.equal(top.rows[0]?.credit, 1995, 'the largest credit (wallet-1995) first');
    const layer = await timed('layer desc:', '/api/dashboard/workers?sort=layer&dir=desc&limit=500');
    assert.deepEqual(layer.rows[0]?.slice?.[0], 47);
    const filtered = await timed('filter q=w0999:', '/api/dashboard/workers?q=w0999&limit=500');
    assert.deepEqual([filtered.total, filtered.rows.map((r: WorkerRow) => r.id)], [10, Array.from({ length: 10 }, (_, i) => `w0999${i}`)]);
    const states = await timed('state grace, 2nd page of 500:', '/api/dashboard/workers?state=grace&sort=state&limit=500&offset=500');
    assert.deepEqual([states.total, states.rows.length], [N, 500]);
    t.diagnostic(`workers queries over 10,000 rows (fastify inject, 2 shared cores): ${times.join('; ')}`);

    const a = performance.now();
    const snap: Snapshot = h.hub.dashboardSnapshot();
    const json = JSON.stringify(snap);
    const cov = snap.coverage[0] as CoverageMap;
    t.diagnostic(
      `snapshot: ${(json.length / 1024).toFixed(0)} KiB with no history, built and serialised in ${(performance.now() - a).toFixed(1)} ms; ` +
        `heatmap ${cov.moeLayers.length}×${cov.nExpert} = ${(cov.replicas.length / 1024).toFixed(1)} KiB base64`,
    );
    const bytes = coverageBytes(cov);
    assert.equal(bytes.length, 48 * 256);
    // Each layer got 10,000 / 48 ≈ 208 workers of 8 experts: 1,664 expert-slots over 256 experts, 6 or 7 each.
    assert.ok(bytes.every((b) => b === 6 || b === 7));
    assert.equal(
      bytes.reduce((s, b) => s + b, 0),
      N * 8,
    );
    assert.deepEqual(snap.models[0]?.workers.grace, N);
    assert.equal(snap.totals.workers, N);
    h.hub.dashboardTick();
    const withHistory = JSON.stringify(h.hub.dashboardSnapshot());
    t.diagnostic(
      `one sample per model adds ${withHistory.length - json.length} bytes; 900 of them ≈ ${(((withHistory.length - json.length) * 900) / 1024).toFixed(0)} KiB per model`,
    );
  } finally {
    await h.close();
  }
});
