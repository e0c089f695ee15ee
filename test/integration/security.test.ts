/**
 * The volunteer surface under the threat model (docs/threat-model.md), against a real hub on loopback with real `ws`
 * clients and raw sockets: the channel's per-address, open-rate and per-wallet caps; its Origin check; frames for
 * work never sent; coverage over HTTP only for slices assigned and downloaded, and worker ids kept per wallet; the
 * HTTP server's Slowloris bounds (and the streams they must not cut); the socket cap per address; every admin route
 * behind the admin token; no token in a URL, an event, an error or the hub's output.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { WebSocket, type ClientOptions, type RawData } from 'ws';
import {
  CLOSE_CODES,
  VOLUNTEER_PATH,
  encodeClientMessage,
  encodeResult,
  parseHubMessage,
  type HubMessage,
} from '../../protocol/channel/index.ts';
import type { HubConfig } from '../../hub/hub.ts';
import { DEFAULT_SATURATION } from '../../hub/market/saturation.ts';
import {
  CHANNEL_CONNECTIONS_PER_ADDRESS,
  CHANNEL_CONNECTIONS_PER_WALLET,
  CHANNEL_OPEN_RATE,
  HTTP_HEADERS_TIMEOUT_MS,
  HTTP_MAX_HEADER_BYTES,
  HTTP_TIMEOUT_CHECK_MS,
} from '../../hub/limits.ts';
import { testModel } from '../../harness/models.ts';
import { newVolunteer, testDevice, testHub, type TestHub } from '../../harness/hub-fixtures.ts';

const model = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 32, ff: 32, nExpert: 8, nExpertUsed: 2, seed: 21 });
const MODELS = [{ path: model.path, name: 'm' }];
const ADMIN = 'security-test-admin-token-0123456789';
const wait = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------------- harness

interface Listening {
  t: TestHub;
  port: number;
  http: string;
  ws: string;
  sockets: Set<{ destroy(): void }>;
  close(): Promise<void>;
}

async function listening(over: Partial<HubConfig> = {}): Promise<Listening> {
  const t = await testHub({ models: MODELS, ...over });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = t.app.server.address() as AddressInfo;
  const sockets = new Set<{ destroy(): void }>();
  return {
    t,
    port,
    http: `http://127.0.0.1:${port}`,
    ws: `ws://127.0.0.1:${port}${VOLUNTEER_PATH}`,
    sockets,
    async close() {
      for (const s of sockets) s.destroy();
      await t.close();
    },
  };
}

/** How a WebSocket dial ended: open, refused at the upgrade (status and catalogue code), or closed with a code. */
type Dialled =
  | { kind: 'open'; ws: WebSocket; inbox: HubMessage[]; closed: Promise<{ code: number; reason: string }> }
  | { kind: 'refused'; status: number; code: string; retryAfter: string | undefined };

function dial(h: Listening, opts: ClientOptions = {}): Promise<Dialled> {
  const ws = new WebSocket(h.ws, opts);
  h.sockets.add({ destroy: () => ws.terminate() });
  const inbox: HubMessage[] = [];
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  ws.on('error', () => {});
  ws.on('message', (data: RawData, isBinary) => {
    if (!isBinary) inbox.push(parseHubMessage(String(data)));
  });
  return new Promise((resolve) => {
    ws.once('open', () => resolve({ kind: 'open', ws, inbox, closed }));
    ws.once('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => {
        body += c.toString();
      });
      res.on('end', () => {
        const code = (JSON.parse(body) as { code: string }).code;
        resolve({ kind: 'refused', status: res.statusCode ?? 0, code, retryAfter: res.headers['retry-after'] as string | undefined });
      });
    });
  });
}

async function open(h: Listening, opts: ClientOptions = {}): Promise<Extract<Dialled, { kind: 'open' }>> {
  const d = await dial(h, opts);
  assert.equal(d.kind, 'open', `the upgrade was refused: ${JSON.stringify(d)}`);
  return d as Extract<Dialled, { kind: 'open' }>;
}

async function refused(h: Listening, opts: ClientOptions = {}): Promise<Extract<Dialled, { kind: 'refused' }>> {
  const d = await dial(h, opts);
  assert.equal(d.kind, 'refused', 'the upgrade was accepted');
  return d as Extract<Dialled, { kind: 'refused' }>;
}

const DEVICE = testDevice('security test');

function hello(token: string, workerId: string): string {
  return encodeClientMessage({
    type: 'hello',
    version: 1,
    token,
    workerId,
    device: DEVICE,
    numerics: ['exact', 'llama'],
    encodings: ['f32'],
    model: '',
    maxExperts: 0,
    agent: 'security.test',
  });
}

/** Dials, says hello, and resolves with the connection once welcomed, or with the close code it got instead. */
async function join(h: Listening, token: string, workerId: string): Promise<Extract<Dialled, { kind: 'open' }> | number> {
  const c = await open(h);
  c.ws.send(hello(token, workerId));
  for (const t0 = performance.now(); performance.now() - t0 < 3_000; ) {
    if (c.inbox.some((m) => m.type === 'welcome')) return c;
    const done = await Promise.race([c.closed, wait(10).then(() => null)]);
    if (done) return done.code;
  }
  throw new Error(`${workerId}: neither welcome nor close within 3 s`);
}

/** The channel is open and answering. */
async function alive(c: Extract<Dialled, { kind: 'open' }>): Promise<boolean> {
  const id = Math.floor(Math.random() * 1e6);
  c.ws.send(encodeClientMessage({ type: 'ping', id }));
  for (const t0 = performance.now(); performance.now() - t0 < 2_000; await wait(10))
    if (c.inbox.some((m) => m.type === 'pong' && m.id === id)) return true;
  return false;
}

/** A raw TCP socket to the hub, recording what it receives and when it closes (ms after it opened). */
function raw(h: Listening): { socket: Socket; got: () => string; closedAfterMs: Promise<number> } {
  const socket = connect(h.port, '127.0.0.1');
  h.sockets.add(socket);
  const t0 = performance.now();
  let got = '';
  socket.on('data', (d) => {
    got += d.toString();
  });
  socket.on('error', () => {});
  const closedAfterMs = new Promise<number>((resolve) => socket.on('close', () => resolve(performance.now() - t0)));
  return { socket, got: () => got, closedAfterMs };
}

// ---------------------------------------------------------------------------------------------------- the channel

test(`per address: ${CHANNEL_CONNECTIONS_PER_ADDRESS} channel connections open at once, the next refused with 503 TOO_MANY_CONNECTIONS; opens beyond the burst 429 RATE_LIMITED`, async () => {
  const h = await listening();
  try {
    const held = [];
    for (let i = 0; i < CHANNEL_CONNECTIONS_PER_ADDRESS; i++) held.push(await open(h));
    const over = await refused(h);
    assert.deepEqual([over.status, over.code, over.retryAfter], [503, 'TOO_MANY_CONNECTIONS', '60']);

    // One closes: the address has room again, but it spent its burst of opens (the hub's clock is frozen here).
    held.pop()?.ws.close();
    await wait(200);
    const fast = await refused(h);
    assert.deepEqual(
      [fast.status, fast.code, fast.retryAfter],
      [429, 'RATE_LIMITED', String(Math.ceil(1 / CHANNEL_OPEN_RATE.refillPerSec))],
    );
    h.t.clock.now += 1000 / CHANNEL_OPEN_RATE.refillPerSec; // one token back
    await open(h);
    assert.equal((await refused(h)).code, 'TOO_MANY_CONNECTIONS', 'full again');
    // Another address is not affected: the HTTP API still answers from here too (a separate cap, 256 sockets).
    assert.equal((await fetch(`${h.http}/api/health`)).status, 200);
  } finally {
    await h.close();
  }
});

test(`per wallet: ${CHANNEL_CONNECTIONS_PER_WALLET} volunteers of one token, the next closed with OVER_CAPACITY; worker ids stay with their wallet`, async () => {
  const h = await listening();
  try {
    const token = await h.t.login(newVolunteer());
    const mine = [];
    for (let i = 0; i < CHANNEL_CONNECTIONS_PER_WALLET; i++) {
      const c = await join(h, token, `mine-${i}`);
      assert.notEqual(typeof c, 'number', `mine-${i} joined`);
      mine.push(c as Extract<Dialled, { kind: 'open' }>);
    }
    assert.equal(await join(h, token, 'mine-over'), CLOSE_CODES.OVER_CAPACITY.code);
    // Its own worker id again replaces the old connection (a reload): not one more.
    const again = await join(h, token, 'mine-0');
    assert.notEqual(typeof again, 'number', 'a reload at the cap is let in');
    assert.equal((await mine[0]!.closed).code, CLOSE_CODES.REPLACED.code);

    const otherToken = await h.t.login(newVolunteer());
    const other = await join(h, otherToken, 'theirs-1');
    assert.notEqual(typeof other, 'number', "another wallet's volunteer joins");
    // Another wallet may not take a connected worker id over (the dashboard lists them): refused, the owner stays.
    assert.equal(await join(h, otherToken, 'mine-1'), CLOSE_CODES.UNEXPECTED_MESSAGE.code);
    assert.ok(await alive(mine[1]!), 'mine-1 was not replaced');

    // A freed place is taken again.
    mine[2]!.ws.close();
    await mine[2]!.closed;
    await wait(100);
    assert.notEqual(typeof (await join(h, token, 'mine-new')), 'number');
  } finally {
    await h.close();
  }
});

test('Origin: none (not a browser), the hub’s own and --allow-origin ones open the channel; other sites and opaque origins get 403 ORIGIN_FORBIDDEN', async () => {
  const h = await listening({ channel: { allowedOrigins: ['https://swarm.example.org'] } });
  try {
    const token = await h.t.login(newVolunteer());
    await open(h); // the headless volunteer sends no Origin
    await open(h, { origin: `http://127.0.0.1:${h.port}` }); // a page the hub served (/, /embed)
    await open(h, { origin: 'https://swarm.example.org' });
    for (const origin of ['https://evil.example', `http://127.0.0.1:${h.port + 1}`, 'null', 'http://swarm.example.org']) {
      const r = await refused(h, { origin });
      assert.deepEqual([r.status, r.code], [403, 'ORIGIN_FORBIDDEN'], origin);
    }
    // A refusal costs no WebSocket: the hub holds only the three accepted ones, and a good one still joins.
    const c = await open(h, { origin: `http://127.0.0.1:${h.port}` });
    c.ws.send(hello(token, 'same-origin'));
    assert.ok(await alive(c));
  } finally {
    await h.close();
  }
});

test('frames for work never sent are dropped at O(1) and share the control bucket: a flood of them is closed with RATE_LIMITED', async () => {
  const h = await listening();
  try {
    const token = await h.t.login(newVolunteer());
    const small = encodeResult({ workId: 777, nRows: 1, nEmbd: 8, sums: new Float32Array(8), encoding: 'f32' });
    const a = (await join(h, token, 'flood-small')) as Extract<Dialled, { kind: 'open' }>;
    for (let i = 0; i < 4; i++) a.ws.send(small);
    assert.ok(await alive(a), 'a few stray frames are dropped and the channel stays');
    for (let i = 0; i < 200; i++) a.ws.send(small);
    assert.equal((await a.closed).code, CLOSE_CODES.RATE_LIMITED.code);

    // A large one costs by its size: 6 MiB is more than a whole burst.
    const big = encodeResult({ workId: 778, nRows: 64, nEmbd: 24_576, sums: new Float32Array(64 * 24_576), encoding: 'f32' });
    const b = (await join(h, token, 'flood-big')) as Extract<Dialled, { kind: 'open' }>;
    b.ws.send(big);
    assert.equal((await b.closed).code, CLOSE_CODES.RATE_LIMITED.code);
  } finally {
    await h.close();
  }
});

// ---------------------------------------------------------------------------------------------------- coverage

test('coverage over HTTP: only ranges the market assigned to that worker and its wallet downloaded; worker ids stay with their wallet', async () => {
  const h = await listening({ dispatchMode: 'always', saturation: { ...DEFAULT_SATURATION, targetBase: 4 } });
  try {
    const t = h.t;
    const token = await t.login(newVolunteer());
    const beat = (workerId: string, segments: number[][], tk = token) =>
      t.call('POST', '/api/expert-coverage', { worker_id: workerId, model: 'm', n_layer: 2, n_expert: 8, segments }, tk);

    const never = await beat('w', [[0, 0, 8]]);
    assert.deepEqual([never.status, never.json.code], [403, 'COVERAGE_NOT_ASSIGNED']);
    assert.equal((await t.call('GET', '/api/expert-demand?model=m')).json.models[0].layers[0].segments[0].replicas, 0, 'nothing counted');

    const offer = await t.call('POST', '/api/expert-volunteer', { model: 'm', worker_id: 'w' }, token);
    assert.deepEqual([offer.json.layer, offer.json.experts], [0, [0, 8]]);
    const early = await beat('w', [[0, 0, 8]]);
    assert.deepEqual([early.status, early.json.code], [409, 'COVERAGE_NOT_DOWNLOADED']);
    // The last byte of a slice (a range that ends at its end) is not the slice.
    const tail = await t.app.inject({
      method: 'GET',
      url: '/api/expert-shard?model=m&layer=0&expert_begin=0&expert_end=8',
      headers: { authorization: `Bearer ${token}`, range: 'bytes=-1' },
    });
    assert.equal(tail.statusCode, 206);
    assert.equal((await beat('w', [[0, 0, 8]])).json.code, 'COVERAGE_NOT_DOWNLOADED', 'one byte proves nothing');
    const half = await t.call('GET', '/api/expert-shard?model=m&layer=0&expert_begin=0&expert_end=4', undefined, token);
    assert.equal(half.status, 200);
    assert.equal((await beat('w', [[0, 0, 8]])).json.code, 'COVERAGE_NOT_DOWNLOADED', 'half of the slice is not the slice');
    assert.equal((await beat('w', [[0, 0, 4]])).status, 200, 'the half it downloaded may be reported');
    assert.equal((await t.call('GET', '/api/expert-shard?model=m&layer=0&expert_begin=0&expert_end=8', undefined, token)).status, 200);
    assert.equal((await beat('w', [[0, 0, 8]])).status, 200);
    assert.equal((await beat('w', [[1, 0, 8]])).json.code, 'COVERAGE_NOT_ASSIGNED', 'another layer');
    assert.equal((await beat('w2', [[0, 0, 8]])).json.code, 'COVERAGE_NOT_ASSIGNED', 'another worker of the wallet: not its slice');

    // Another wallet cannot report under w's id, even with a slice of its own.
    const otherToken = await t.login(newVolunteer());
    await t.call('POST', '/api/expert-volunteer', { model: 'm', worker_id: 'w' }, otherToken);
    await t.call('GET', '/api/expert-shard?model=m&layer=0&expert_begin=0&expert_end=8', undefined, otherToken);
    const taken = await beat('w', [[0, 0, 8]], otherToken);
    assert.deepEqual([taken.status, taken.json.code], [409, 'WORKER_ID_TAKEN']);
    // … nor a channel volunteer's.
    const c = (await join(h, otherToken, 'on-channel')) as Extract<Dialled, { kind: 'open' }>;
    assert.ok(await alive(c));
    assert.equal((await beat('on-channel', [], token)).json.code, 'WORKER_ID_TAKEN');
  } finally {
    await h.close();
  }
});

// ---------------------------------------------------------------------------------------------------- HTTP

test(`Slowloris: headers sent a byte a second are cut within ${HTTP_HEADERS_TIMEOUT_MS / 1000} s (408), a silent socket too; the hub keeps answering`, async () => {
  const h = await listening();
  try {
    const slow = raw(h);
    const request = 'GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n';
    let i = 0;
    const drip = setInterval(() => {
      if (i < request.length && !slow.socket.destroyed) slow.socket.write(request[i++]!);
    }, 1_000);
    const silent = raw(h);
    try {
      const [slowMs, silentMs] = await Promise.all([slow.closedAfterMs, silent.closedAfterMs]);
      const bound = HTTP_HEADERS_TIMEOUT_MS + HTTP_TIMEOUT_CHECK_MS + 1_500;
      for (const [name, ms, got] of [
        ['slow', slowMs, slow.got()],
        ['silent', silentMs, silent.got()],
      ] as const) {
        assert.ok(ms >= HTTP_HEADERS_TIMEOUT_MS - 500 && ms <= bound, `${name} cut after ${ms.toFixed(0)} ms`);
        assert.match(got, /^HTTP\/1\.1 408 /, `${name} got 408`);
      }
      assert.ok(i < request.length, `the slow client sent ${i} of ${request.length} bytes`);
    } finally {
      clearInterval(drip);
    }
    assert.equal((await fetch(`${h.http}/api/health`)).status, 200);
  } finally {
    await h.close();
  }
});

test('the request timeouts bound receiving only: a slow body is cut (and oversized headers refused), while the dashboard stream and a WebSocket outlive them', async () => {
  const h = await listening({ http: { headersTimeoutMs: 1_000, requestTimeoutMs: 1_500, timeoutCheckMs: 200 } });
  try {
    const token = await h.t.login(newVolunteer());
    const body = raw(h);
    body.socket.write('POST /api/expert-demand HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{');
    const drip = setInterval(() => body.socket.destroyed || body.socket.write(' '), 200);
    const stream = raw(h);
    stream.socket.write('GET /api/dashboard/stream HTTP/1.1\r\nHost: x\r\n\r\n');
    let streamClosed = false;
    void stream.closedAfterMs.then(() => {
      streamClosed = true;
    });
    const channel = (await join(h, token, 'long-lived')) as Extract<Dialled, { kind: 'open' }>;
    try {
      const ms = await body.closedAfterMs;
      assert.ok(ms < 1_500 + 200 + 1_000, `the slow body was cut after ${ms.toFixed(0)} ms`);
      assert.match(body.got(), /^HTTP\/1\.1 408 /);
      // Headers over HTTP_MAX_HEADER_BYTES are refused whole.
      const fat = raw(h);
      fat.socket.write(`GET /api/health HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(HTTP_MAX_HEADER_BYTES)}\r\n\r\n`);
      await fat.closedAfterMs;
      assert.match(fat.got(), /^HTTP\/1\.1 431 /);
      await wait(3_000); // twice the request timeout
      assert.match(stream.got(), /^HTTP\/1\.1 200 [\s\S]*event: snapshot/, 'the stream answered');
      assert.equal(streamClosed, false, 'the stream is still open');
      assert.ok(await alive(channel), 'the channel is still open');
    } finally {
      clearInterval(drip);
    }
  } finally {
    await h.close();
  }
});

test('sockets per address: one beyond the cap is closed as it is accepted; a freed place is taken again', async () => {
  const h = await listening({ http: { socketsPerAddress: 4 } });
  try {
    const held = [raw(h), raw(h), raw(h), raw(h)];
    await wait(100);
    const over = raw(h);
    const ms = await over.closedAfterMs;
    assert.ok(ms < 1_000, `closed after ${ms.toFixed(0)} ms`);
    assert.equal(over.got(), '', 'not a byte answered');
    held[0]!.socket.destroy();
    await held[0]!.closedAfterMs;
    await wait(100);
    const r = raw(h);
    r.socket.write('GET /api/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    await r.closedAfterMs;
    assert.match(r.got(), /^HTTP\/1\.1 200 /);
  } finally {
    await h.close();
  }
});

// ---------------------------------------------------------------------------------------------------- tokens and admin

/** Every route of the app as `METHOD /path`, from fastify's route tree (one level per 4 columns of indent). */
function routes(h: Listening): string[] {
  const out: string[] = [];
  const stack: string[] = [];
  for (const line of h.t.app.printRoutes({ commonPrefix: false }).split('\n')) {
    const at = line.search(/[└├]── /);
    const m = /[└├]── (\S+) \(([A-Z, ]+)\)/.exec(line);
    if (at < 0 || !m) continue;
    const depth = Math.floor(at / 4);
    const seg = m[1] ?? '';
    const parent = depth > 0 ? (stack[depth - 1] ?? '') : '';
    const path = seg === '/' ? '/' : `${parent.replace(/\/$/, '')}/${seg.replace(/^\//, '')}`;
    stack.length = depth;
    stack[depth] = path;
    for (const method of (m[2] ?? '').split(', ')) out.push(`${method} ${path}`);
  }
  return out;
}

test('admin: every /api/admin/* route needs the admin token, no preflight lets another site send one; every state-changing route is accounted for', async () => {
  const h = await listening({ adminToken: ADMIN });
  const off = await listening();
  try {
    const all = routes(h);
    assert.ok(
      ['POST /api/admin/target', 'GET /api/health', 'POST /api/admin/workers/:id/release', 'GET /api/expert-shard'].every((r) =>
        all.includes(r),
      ),
      `parsed the routes: ${all.join(', ')}`,
    );
    // POST is the only state-changing method the hub serves; each is public by design or behind a token.
    const byDesign: Record<string, 'public' | 'node' | 'admin'> = {
      'POST /api/auth/challenge': 'public', // rate-limited per address (AUTH_RATE_LIMIT)
      'POST /api/auth/node-token': 'public',
      'POST /v1/chat/completions': 'public', // the OpenAI API: put the hub behind a proxy with API keys to restrict it
      'POST /v1/completions': 'public',
      'POST /api/expert-volunteer': 'node',
      'POST /api/expert-coverage': 'node',
    };
    const posts = all.filter((r) => r.startsWith('POST ') || r.startsWith('PUT ') || r.startsWith('DELETE ') || r.startsWith('PATCH '));
    for (const r of posts)
      assert.ok(byDesign[r] || r.startsWith('POST /api/admin/'), `${r}: classify it here (public, node or admin token)`);
    const admin = all.filter((r) => r.includes(' /api/admin/') && !r.startsWith('HEAD '));
    assert.ok(admin.length >= 5, admin.join(', '));
    for (const r of admin) {
      const [method, path] = r.split(' ') as ['GET' | 'POST', string];
      const url = path.replace(':id', 'w-1').replace(':model', 'm');
      const body = method === 'POST' ? { reason: 'x', base: 3, mode: 'off' } : undefined;
      for (const [tk, want] of [
        [undefined, 'ADMIN_TOKEN_INVALID'],
        ['wrong-token-of-enough-length', 'ADMIN_TOKEN_INVALID'],
        [`${ADMIN}x`, 'ADMIN_TOKEN_INVALID'],
      ] as const) {
        const res = await h.t.call(method, url, body, tk);
        assert.deepEqual([res.status, res.json?.code], [401, want], `${r} with ${tk ?? 'no token'}`);
      }
      const disabled = await off.t.call(method, url, body, ADMIN);
      assert.deepEqual([disabled.status, disabled.json?.code], [403, 'ADMIN_DISABLED'], `${r} on a hub without an admin token`);
    }
    // Cross-site pages cannot send the header at all: no route grants a CORS preflight.
    for (const url of ['/api/admin/target', '/api/admin/workers/w-1/release', '/api/expert-coverage']) {
      const pre = await h.t.app.inject({
        method: 'OPTIONS',
        url,
        headers: {
          origin: 'https://evil.example',
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization',
        },
      });
      assert.equal(pre.headers['access-control-allow-origin'], undefined, `no CORS for ${url}`);
      assert.equal(pre.headers['access-control-allow-headers'], undefined, `no CORS for ${url}`);
    }
    assert.equal(h.t.hub.recruitment().target_base, DEFAULT_SATURATION.targetBase, 'no refused call changed anything');
    assert.equal((await h.t.call('POST', '/api/admin/target', { base: 3 }, ADMIN)).status, 200, 'the right token works');
  } finally {
    await h.close();
    await off.close();
  }
});

test('no node token or admin token in a URL, an event, an error, the dashboard or anything the hub prints', async () => {
  const printed: string[] = [];
  const spies = [process.stdout, process.stderr].map((stream) => {
    const write = stream.write.bind(stream);
    stream.write = ((chunk: unknown, ...rest: unknown[]) => {
      printed.push(String(chunk));
      return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
    }) as typeof stream.write;
    return () => {
      stream.write = write;
    };
  });
  const h = await listening({ adminToken: ADMIN, dispatchMode: 'always', saturation: { ...DEFAULT_SATURATION, targetBase: 1 } });
  try {
    const t = h.t;
    const token = await t.login(newVolunteer());
    const seen: string[] = [];
    const note = (x: unknown): void => {
      seen.push(typeof x === 'string' ? x : JSON.stringify(x));
    };
    // The HTTP volunteer's whole way, right and wrong.
    const offer = await t.call('POST', '/api/expert-volunteer', { model: 'm', worker_id: 'http-w' }, token);
    note(offer.json);
    note((await t.call('GET', '/api/expert-shard?model=m&layer=0&expert_begin=0&expert_end=8', undefined, token)).headers);
    for (const segments of [[[0, 0, 8]], [[1, 0, 8]]])
      note(
        (await t.call('POST', '/api/expert-coverage', { worker_id: 'http-w', model: 'm', n_layer: 2, n_expert: 8, segments }, token)).json,
      );
    note(
      (await t.call('POST', '/api/expert-coverage', { worker_id: 'x', model: 'm', n_layer: 2, n_expert: 8, segments: [] }, `${token}x`))
        .json,
    );
    note((await t.call('GET', `/api/expert-demand?model=m&token=${encodeURIComponent('not-ours')}`)).json);
    // A channel volunteer: its assignment (the shard URL), a bad token, a token in a hello of the wrong shape.
    const c = (await join(h, token, 'ws-w')) as Extract<Dialled, { kind: 'open' }>;
    for (let i = 0; i < 250 && !c.inbox.some((m) => m.type === 'assign'); i++) await wait(20);
    const assign = c.inbox.find((m) => m.type === 'assign');
    assert.ok(assign && assign.type === 'assign', 'assigned over the channel');
    assert.ok(!assign.shardUrl.includes(token) && !/token/i.test(assign.shardUrl), `no token in ${assign.shardUrl}`);
    note(c.inbox);
    note(await join(h, `${token.slice(0, -2)}AA`, 'bad-token'));
    const broken = await open(h);
    broken.ws.send(JSON.stringify({ ...JSON.parse(hello(token, 'x')), worker_id: 'bad id with spaces' }));
    note(await broken.closed);
    // Admin calls, wrong and right.
    note((await t.call('POST', '/api/admin/target', { base: 2 }, token)).json);
    note((await t.call('POST', '/api/admin/workers/ws-w/release', { reason: 'test' }, ADMIN)).json);
    note((await t.call('GET', '/api/admin/check', undefined, `${ADMIN}y`)).json);
    // What a person or a scraper can read afterwards.
    note((await t.call('GET', '/api/events?limit=500')).json);
    note(t.hub.dashboardSnapshot());
    note((await t.call('GET', '/api/dashboard/workers')).json);
    note((await t.call('GET', '/metrics')).json);
    const text = [...seen, ...printed].join('\n');
    const mac = token.split('.')[2] ?? '';
    assert.ok(mac.length === 43, 'the token has its MAC');
    for (const [name, secret] of [
      ['node token', token],
      ["node token's MAC", mac],
      ['admin token', ADMIN],
    ] as const)
      assert.ok(!text.includes(secret), `the ${name} appears in what the hub said or printed`);
  } finally {
    for (const restore of spies) restore();
    await h.close();
  }
});
