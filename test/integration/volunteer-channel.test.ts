/**
 * The volunteer channel (`/api/volunteer`, hub/channel/channel.ts) over real WebSockets: a hub listening on
 * loopback, volunteers played by the `ws` client speaking protocol/channel/. A table of malformed frames and
 * messages, each answered with its exact close code while the hub keeps serving; the handshake's refusals (token,
 * version, capacity, replacement, hello and idle timeouts, flooding); pushed recruitment from a poller reading to
 * `assign`, the reservation, narrower slices after DOES_NOT_FIT, the dispatch map, disconnects, releases and load
 * timeouts; and the `expertswarm_volunteers_connected{state}` gauge.
 *
 * The test hub's clock is frozen unless a test makes it follow real time (`realTime`): with it frozen the control
 * token bucket never refills, so a flood is refused after exactly its burst.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocket, type ClientOptions, type RawData } from 'ws';
import { DEFAULT_TOKEN_TTL_S } from '../../hub/auth/tokens.ts';
import { DEFAULT_SATURATION } from '../../hub/market/saturation.ts';
import type { HubConfig } from '../../hub/hub.ts';
import type { VolunteerChannel } from '../../hub/channel/channel.ts';
import {
  CLOSE_CODES,
  VOLUNTEER_LIMITS,
  VOLUNTEER_PATH,
  WIRE_HEADER_BYTES,
  WIRE_MAGIC,
  encodeClientMessage,
  encodeResult,
  encodeWork,
  parseHubMessage,
  type Assign,
  type CloseName,
  type ChannelHello,
  type HubMessage,
} from '../../protocol/channel/index.ts';
import { testModel } from '../../harness/models.ts';
import { newVolunteer, testDevice, testHub, type TestHub } from '../../harness/hub-fixtures.ts';

// Two MoE layers of 8 experts: a volunteer without max_experts is offered a whole layer.
const model = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 32, ff: 32, nExpert: 8, nExpertUsed: 2, seed: 21 });
const MODELS = [{ path: model.path, name: 'm' }];
const wait = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------------- harness

interface Listening {
  t: TestHub;
  http: string;
  ws: string;
  peers: Set<Peer>;
  close(): Promise<void>;
}

async function listening(over: Partial<HubConfig>): Promise<Listening> {
  const t = await testHub(over);
  await t.app.listen({ port: 0, host: '127.0.0.1' }); // buildApp already attached the channel to app.server
  const { port } = t.app.server.address() as AddressInfo;
  const peers = new Set<Peer>();
  return {
    t,
    http: `http://127.0.0.1:${port}`,
    ws: `ws://127.0.0.1:${port}${VOLUNTEER_PATH}`,
    peers,
    async close() {
      for (const p of peers) p.ws.terminate();
      await t.close();
    },
  };
}

/**
 * The hub's clock is the real one from now on: the poller stamps its readings with Date.now(), and idle timeouts
 * need time to pass. Call it before logging in (tokens are minted on the hub's clock).
 */
function realTime(t: TestHub): void {
  Object.defineProperty(t.clock, 'now', { get: () => Date.now(), configurable: true });
}

interface Closed {
  code: number;
  reason: string;
}

/** One volunteer's end: everything the hub sends, parsed with the wire module (so the hub's output is checked too). */
class Peer {
  readonly inbox: HubMessage[] = [];
  readonly closed: Promise<Closed>;
  isClosed = false;
  /** Answers the hub's keep-alive `ping` with a `pong`, as the client's script does (false: a page that cannot). */
  answerPings = true;
  private wake: () => void = () => {};

  private constructor(readonly ws: WebSocket) {
    this.closed = new Promise((resolve) =>
      ws.on('close', (code, reason) => {
        this.isClosed = true;
        resolve({ code, reason: reason.toString() });
        this.wake();
      }),
    );
    ws.on('error', () => {}); // a refused or reset connection shows as its close code
    ws.on('message', (data: RawData, isBinary) => {
      if (isBinary) return;
      const m = parseHubMessage(String(data));
      if (m.type === 'ping') {
        if (this.answerPings) this.json({ type: 'pong', id: m.id });
        return;
      }
      this.inbox.push(m);
      this.wake();
    });
  }

  static open(h: Listening, opts: ClientOptions = {}): Promise<Peer> {
    const p = new Peer(new WebSocket(h.ws, opts));
    h.peers.add(p);
    return new Promise((resolve, reject) => {
      p.ws.once('open', () => resolve(p));
      p.ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
      void p.closed.then(() => resolve(p)); // refused right after the upgrade (OVER_CAPACITY)
    });
  }

  send(data: string | Buffer | Uint8Array, binary = typeof data !== 'string'): void {
    this.ws.send(data, { binary });
  }

  json(v: unknown): void {
    this.send(JSON.stringify(v));
  }

  /** The next message of this type (earlier ones of other types stay in the inbox). */
  async next<K extends HubMessage['type']>(type: K, ms = 2_000): Promise<Extract<HubMessage, { type: K }>> {
    const deadline = performance.now() + ms;
    for (;;) {
      const i = this.inbox.findIndex((m) => m.type === type);
      if (i >= 0) return this.inbox.splice(i, 1)[0] as Extract<HubMessage, { type: K }>;
      if (this.isClosed) throw new Error(`closed while waiting for ${type}: ${JSON.stringify(await this.closed)}`);
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`no ${type} within ${ms} ms; inbox ${JSON.stringify(this.inbox)}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  /** Asserts that no message of this type arrives within `ms`. */
  async none(type: HubMessage['type'], ms: number): Promise<void> {
    await wait(ms);
    assert.equal(
      this.inbox.find((m) => m.type === type),
      undefined,
      `unexpected ${type}`,
    );
  }

  /** The channel is open and answering: a ping comes back as a pong with its id. */
  async alive(id = 4242): Promise<void> {
    this.json({ type: 'ping', id });
    while ((await this.next('pong')).id !== id); // pongs to the case's own pings come first
  }
}

const DEVICE = testDevice('channel test', ['shader-f16']);

function helloText(token: string, workerId: string, over: Partial<Omit<ChannelHello, 'type'>> = {}): string {
  return encodeClientMessage({
    type: 'hello',
    version: 1,
    token,
    workerId,
    device: DEVICE,
    numerics: ['exact', 'llama'],
    encodings: ['f32', 'f16'],
    model: '',
    maxExperts: 0,
    agent: 'volunteer-channel.test',
    ...over,
  });
}

/** The hello as JSON on the wire (snake_case), to break one field at a time. */
// biome-ignore lint/suspicious/noExplicitAny: a wire object the cases below edit field by field
const helloWire = (token: string, workerId: string): any => JSON.parse(helloText(token, workerId));

/** Opens a channel, says hello and waits for welcome. */
async function join(h: Listening, token: string, workerId: string, over: Partial<Omit<ChannelHello, 'type'>> = {}): Promise<Peer> {
  const p = await Peer.open(h);
  p.send(helloText(token, workerId, over));
  const w = await p.next('welcome');
  assert.equal(w.workerId, workerId);
  return p;
}

async function closedWith(p: Peer, want: CloseName | number, label: string, ms = 3_000): Promise<Closed> {
  const code = typeof want === 'number' ? want : CLOSE_CODES[want].code;
  const c = await Promise.race([p.closed, wait(ms).then(() => null)]);
  assert.ok(c, `${label}: not closed within ${ms} ms (wanted ${want} ${code})`);
  assert.equal(c.code, code, `${label}: closed with ${c.code} "${c.reason}", wanted ${want} (${code})`);
  assert.ok(Buffer.byteLength(c.reason) <= 123, `${label}: close reason over 123 bytes`);
  return c;
}

/** The hub keeps serving: a fresh volunteer gets welcome, answers come back, and the HTTP API answers. */
async function stillServing(h: Listening, label: string): Promise<void> {
  const token = await h.t.login(newVolunteer());
  const p = await join(h, token, `fresh-${Math.random().toString(36).slice(2, 10)}`);
  await p.alive();
  const r = await fetch(`${h.http}/api/health`);
  assert.equal(r.status, 200, `${label}: /api/health`);
  p.json({ type: 'leave' });
  assert.equal((await p.closed).code, 1000, `${label}: leave`);
}

// ---------------------------------------------------------------------------------------------------- frames

function frameHeader(over: { magic?: number; version?: number; kind?: number; workId?: number; bytes?: number } = {}): Buffer {
  const b = Buffer.alloc(over.bytes ?? WIRE_HEADER_BYTES);
  b.writeUInt32LE(over.magic ?? WIRE_MAGIC, 0);
  b.writeUInt16LE(over.version ?? 1, 4);
  b.writeUInt16LE(over.kind ?? 2, 6);
  b.writeUInt32LE(over.workId ?? 1, 8);
  return b;
}

const WORK = encodeWork({
  workId: 1,
  assignmentId: 1,
  nRows: 1,
  nEmbd: 4,
  rows: new Float32Array(4),
  rowIndex: new Uint16Array([0]),
  localExpert: new Uint16Array([0]),
  weight: new Float32Array([1]),
  rowEncoding: 'f32',
  resultEncoding: 'f32',
});

// ---------------------------------------------------------------------------------------------------- the table

interface Case {
  name: string;
  /** Sent instead of hello (false: after a valid hello and its welcome). */
  first?: boolean;
  /** What the volunteer sends; `token` is a fresh, valid node token of this hub. */
  send(p: Peer, token: string, h: Listening): void | Promise<void>;
  /** The close code, or null: the hub ignores it and the channel stays open. */
  close: CloseName | number | null;
}

const pingWith = (id: unknown): unknown => ({ type: 'ping', id });
const heartbeat = (coverage: unknown[]): unknown => ({
  type: 'heartbeat',
  model: 'm',
  coverage,
  paused: false,
  stats: { pairs_served: 0, queue_depth: 0 },
});

const CASES: Case[] = [
  // --- instead of hello
  { name: 'bad JSON instead of hello', first: true, send: (p) => p.send('{"type":"hello",'), close: 'BAD_FRAME' },
  { name: 'a ping before hello', first: true, send: (p) => p.json(pingWith(1)), close: 'UNEXPECTED_MESSAGE' },
  { name: 'a binary frame before hello', first: true, send: (p) => p.send(frameHeader()), close: 'UNEXPECTED_MESSAGE' },
  {
    name: 'hello version 2',
    first: true,
    send: (p, token) => p.json({ ...helloWire(token, 'v2'), version: 2 }),
    close: 'UNSUPPORTED_VERSION',
  },
  {
    name: 'hello version 2 of another shape (version is checked first)',
    first: true,
    send: (p) => p.json({ type: 'hello', version: 2, credentials: { kind: 'passkey' } }),
    close: 'UNSUPPORTED_VERSION',
  },
  {
    name: 'hello version "1" (a string)',
    first: true,
    send: (p, token) => p.json({ ...helloWire(token, 'vs'), version: '1' }),
    close: 'BAD_FRAME',
  },
  {
    name: 'hello without a token',
    first: true,
    send: (p, token) => {
      const m = helloWire(token, 'nt');
      delete m.token;
      p.json(m);
    },
    close: 'BAD_TOKEN',
  },
  {
    name: 'hello with a token holding a space',
    first: true,
    send: (p, token) => p.json({ ...helloWire(token, 'sp'), token: 'v1.a b' }),
    close: 'BAD_TOKEN',
  },
  {
    name: 'hello with a token over 1024 characters',
    first: true,
    send: (p, token) => p.json({ ...helloWire(token, 'lt'), token: 'x'.repeat(VOLUNTEER_LIMITS.maxTokenChars + 1) }),
    close: 'BAD_TOKEN',
  },
  {
    name: 'hello with a made-up token',
    first: true,
    send: (p, token) => p.json({ ...helloWire(token, 'mu'), token: 'v1.bm90LWEtdG9rZW4.c2lnbmF0dXJl' }),
    close: 'BAD_TOKEN',
  },
  {
    name: 'hello with a tampered token (last character of the signature changed)',
    first: true,
    send: (p, token) => p.json({ ...helloWire(token, 'tt'), token: token.slice(0, -1) + (token.endsWith('A') ? 'B' : 'A') }),
    close: 'BAD_TOKEN',
  },
  {
    name: 'hello with an expired token',
    first: true,
    send: (p, token, h) => {
      h.t.clock.now += DEFAULT_TOKEN_TTL_S * 1000 + 1_000;
      p.json(helloWire(token, 'ex'));
    },
    close: 'BAD_TOKEN',
  },
  {
    name: 'hello with a worker_id over 128 characters',
    first: true,
    send: (p, token) => p.json({ ...helloWire(token, 'w'), worker_id: 'w'.repeat(VOLUNTEER_LIMITS.maxWorkerIdChars + 1) }),
    close: 'TOO_LARGE',
  },
  {
    name: 'hello with a worker_id holding a slash',
    first: true,
    send: (p, token) => p.json({ ...helloWire(token, 'w'), worker_id: 'a/b' }),
    close: 'BAD_FRAME',
  },
  {
    name: 'hello without device',
    first: true,
    send: (p, token) => {
      const m = helloWire(token, 'nd');
      delete m.device;
      p.json(m);
    },
    close: 'BAD_FRAME',
  },
  {
    name: 'hello with device.webgpu "yes"',
    first: true,
    send: (p, token) => {
      const m = helloWire(token, 'dw');
      m.device.webgpu = 'yes';
      p.json(m);
    },
    close: 'BAD_FRAME',
  },
  {
    name: 'hello with 65 features',
    first: true,
    send: (p, token) => {
      const m = helloWire(token, 'ff');
      m.device.features = Array.from({ length: VOLUNTEER_LIMITS.maxFeatures + 1 }, (_, i) => `f${i}`);
      p.json(m);
    },
    close: 'TOO_LARGE',
  },
  {
    name: 'hello with an adapter description over 256 characters',
    first: true,
    send: (p, token) => {
      const m = helloWire(token, 'ad');
      m.device.adapter.description = 'd'.repeat(VOLUNTEER_LIMITS.maxAdapterChars + 1);
      p.json(m);
    },
    close: 'TOO_LARGE',
  },
  {
    name: 'hello with a memory budget over 2^50',
    first: true,
    send: (p, token) => {
      const m = helloWire(token, 'mb');
      m.device.memory_budget_bytes = 2 ** 51;
      p.json(m);
    },
    close: 'TOO_LARGE',
  },
  {
    name: 'hello with encodings lacking f32',
    first: true,
    send: (p, token) => p.json({ ...helloWire(token, 'en'), encodings: ['f16'] }),
    close: 'BAD_FRAME',
  },
  {
    name: 'hello with an agent over 128 characters',
    first: true,
    send: (p, token) => p.json({ ...helloWire(token, 'ag'), agent: 'a'.repeat(VOLUNTEER_LIMITS.maxAgentChars + 1) }),
    close: 'TOO_LARGE',
  },
  // --- after hello: text
  { name: 'bad JSON', send: (p) => p.send('{"type": "ping", "id": 1'), close: 'BAD_FRAME' },
  { name: 'a JSON array', send: (p) => p.send('[1, 2]'), close: 'BAD_FRAME' },
  { name: 'a message without type', send: (p) => p.json({ id: 1 }), close: 'BAD_FRAME' },
  { name: 'an unknown type', send: (p) => p.json({ type: 'teleport' }), close: 'BAD_FRAME' },
  { name: 'a hub message type (assign) from a volunteer', send: (p) => p.json({ type: 'assign', assignment_id: 1 }), close: 'BAD_FRAME' },
  {
    name: 'loaded without assignment_id',
    send: (p) => p.json({ type: 'loaded', ready: true, backend: 'wasm', gflops: 1 }),
    close: 'BAD_FRAME',
  },
  {
    name: 'loaded with backend "cuda"',
    send: (p) => p.json({ type: 'loaded', assignment_id: 1, ready: true, backend: 'cuda', gflops: 1 }),
    close: 'BAD_FRAME',
  },
  {
    name: 'loaded with gflops over 1e7',
    send: (p) => p.json({ type: 'loaded', assignment_id: 1, ready: true, backend: 'wasm', gflops: 1e8 }),
    close: 'TOO_LARGE',
  },
  { name: 'ping with id "seven"', send: (p) => p.json(pingWith('seven')), close: 'BAD_FRAME' },
  { name: 'ping with id -1', send: (p) => p.json(pingWith(-1)), close: 'BAD_FRAME' },
  { name: 'ping with id 2^32', send: (p) => p.json(pingWith(2 ** 32)), close: 'BAD_FRAME' },
  { name: 'ping with id 1.5', send: (p) => p.json(pingWith(1.5)), close: 'BAD_FRAME' },
  {
    name: 'load_failed with an unknown code',
    send: (p) => p.json({ type: 'load_failed', assignment_id: 1, code: 'ON_FIRE', message: '' }),
    close: 'BAD_FRAME',
  },
  {
    name: 'load_failed with a message over 512 characters',
    send: (p) => p.json({ type: 'load_failed', assignment_id: 1, code: 'DOES_NOT_FIT', message: 'm'.repeat(513) }),
    close: 'TOO_LARGE',
  },
  // Encoders turn control characters in sentences into spaces, so only a hand-made message holds one.
  {
    name: 'load_failed with a newline in its message',
    send: (p) => p.json({ type: 'load_failed', assignment_id: 1, code: 'CANCELLED', message: 'tab\nclosed' }),
    close: 'BAD_FRAME',
  },
  { name: 'heartbeat with layer 4096', send: (p) => p.json(heartbeat([[VOLUNTEER_LIMITS.maxLayers, 0, 1]])), close: 'TOO_LARGE' },
  { name: 'heartbeat with 257 ranges', send: (p) => p.json(heartbeat(Array.from({ length: 257 }, () => [0, 0, 1]))), close: 'TOO_LARGE' },
  { name: 'heartbeat with begin ≥ end', send: (p) => p.json(heartbeat([[0, 4, 4]])), close: 'BAD_FRAME' },
  { name: 'heartbeat with a range of two numbers', send: (p) => p.json(heartbeat([[0, 4]])), close: 'BAD_FRAME' },
  {
    name: 'heartbeat without stats',
    send: (p) => p.json({ type: 'heartbeat', model: '', coverage: [], paused: false }),
    close: 'BAD_FRAME',
  },
  {
    name: `a text message over ${VOLUNTEER_LIMITS.maxTextBytes} bytes`,
    send: (p) => p.json({ type: 'ping', id: 1, pad: 'x'.repeat(VOLUNTEER_LIMITS.maxTextBytes) }),
    close: 'TOO_LARGE',
  },
  // `ws` checks UTF-8 itself and closes with 1007 (RFC 6455 "invalid frame payload data") before the hub sees it.
  { name: 'a text frame that is not UTF-8', send: (p) => p.send(Buffer.from([0x7b, 0xff, 0xfe, 0x7d]), false), close: 1007 },
  { name: 'a second hello', send: (p, token) => p.send(helloText(token, 'again')), close: 'UNEXPECTED_MESSAGE' },
  // --- after hello: binary
  { name: 'a binary frame shorter than its header', send: (p) => p.send(Buffer.alloc(10)), close: 'BAD_FRAME' },
  { name: 'a binary frame with the wrong magic', send: (p) => p.send(frameHeader({ magic: 0x12345678 })), close: 'BAD_FRAME' },
  { name: 'a binary frame of version 2', send: (p) => p.send(frameHeader({ version: 2 })), close: 'UNSUPPORTED_VERSION' },
  { name: 'a binary frame of unknown kind 9', send: (p) => p.send(frameHeader({ kind: 9 })), close: 'BAD_FRAME' },
  { name: 'a work frame from a volunteer', send: (p) => p.send(WORK), close: 'BAD_FRAME' },
  // `ws` refuses a frame over its maxPayload (= maxFrameBytes) from the frame header, before reading the body, and
  // closes with 1009 (RFC 6455 "message too big"); the hub's TOO_LARGE covers text over 16 KiB and sizes inside frames.
  {
    name: `a binary frame over ${VOLUNTEER_LIMITS.maxFrameBytes} bytes`,
    send: (p) => p.send(frameHeader({ bytes: VOLUNTEER_LIMITS.maxFrameBytes + 1 })),
    close: 1009,
  },
  // --- races the hub ignores (docs/volunteer-channel.md, Validation): the channel stays open
  {
    name: 'a result for work never sent',
    send: (p) => p.send(encodeResult({ workId: 77, nRows: 1, nEmbd: 4, sums: new Float32Array(4), encoding: 'f32' })),
    close: null,
  },
  {
    name: 'loaded for an assignment never given',
    send: (p) => p.json({ type: 'loaded', assignment_id: 9, ready: true, backend: 'wasm', gflops: 1 }),
    close: null,
  },
  {
    name: 'load_failed for an assignment never given',
    send: (p) => p.json({ type: 'load_failed', assignment_id: 9, code: 'CANCELLED', message: 'the tab closed' }),
    close: null,
  },
  { name: 'a heartbeat while waiting, listing a range', send: (p) => p.json(heartbeat([[0, 0, 8]])), close: null },
  { name: 'an unknown field', send: (p) => p.json({ type: 'ping', id: 5, future: { x: 1 } }), close: null },
];

test('a table of malformed frames and messages gets the exact close codes, and the hub keeps serving', async (tt) => {
  // Without models nothing is ever assigned, so nothing but the case's own frames reaches the channel. One connection
  // per case from one address on a frozen clock: the per-address open rate is lifted, as the login rate is.
  const h = await listening({
    channel: { helloTimeoutMs: 2_000, opensPerAddress: { capacity: 1e9, refillPerSec: 1e9 } },
    authRateLimit: { capacity: 1e9, refillPerSec: 1e9 },
  });
  try {
    for (const [i, c] of CASES.entries()) {
      const code = c.close === null ? 'stays open' : typeof c.close === 'number' ? c.close : `${c.close} ${CLOSE_CODES[c.close].code}`;
      await tt.test(`${c.first ? 'instead of hello' : 'after hello'}: ${c.name} → ${code}`, async () => {
        const token = await h.t.login(newVolunteer());
        const p = c.first ? await Peer.open(h) : await join(h, token, `case-${i}`);
        await c.send(p, token, h);
        if (c.close === null) await p.alive();
        else await closedWith(p, c.close, c.name);
        if (!p.isClosed) p.ws.close(1000);
        await stillServing(h, c.name);
      });
    }
  } finally {
    await h.close();
  }
});

test('no hello within helloTimeoutMs closes with HELLO_TIMEOUT; the hub keeps serving', async () => {
  const h = await listening({ channel: { helloTimeoutMs: 300 } });
  try {
    const p = await Peer.open(h);
    const t0 = performance.now();
    await closedWith(p, 'HELLO_TIMEOUT', 'silent connection');
    const ms = performance.now() - t0;
    assert.ok(ms >= 250 && ms < 2_000, `closed after ${ms.toFixed(0)} ms, wanted about 300`);
    // A hello in time is not affected by the timer (the fresh volunteer's hello comes well within 300 ms).
    await stillServing(h, 'after HELLO_TIMEOUT');
  } finally {
    await h.close();
  }
});

test('stopping the hub with volunteers connected closes them with SHUTTING_DOWN and does not wait for them', async () => {
  const h = await listening({});
  const token = await h.t.login(newVolunteer());
  const p = await join(h, token, 'stays-connected');
  // The HTTP server's close waits for every socket it accepted, upgraded ones too: the channel must end its own.
  const stopped = await Promise.race([h.t.close().then(() => true), wait(5_000).then(() => false)]);
  assert.ok(stopped, 'the hub stopped within 5 s with a volunteer still connected');
  await closedWith(p, 'SHUTTING_DOWN', 'a volunteer of a stopping hub');
});

test('control messages faster than the bucket allows close with RATE_LIMITED after its burst', async () => {
  const burst = 4 * 5;
  const h = await listening({ channel: { controlPerSec: 5 } });
  try {
    const token = await h.t.login(newVolunteer());
    const p = await join(h, token, 'flood');
    // The frozen clock refills nothing: exactly `burst` messages pass, the next one closes the channel.
    for (let i = 0; i < burst + 10; i++) p.json(pingWith(i));
    await closedWith(p, 'RATE_LIMITED', 'ping flood');
    assert.equal(p.inbox.filter((m) => m.type === 'pong').length, burst);
    await stillServing(h, 'after RATE_LIMITED');
  } finally {
    await h.close();
  }
});

test('a second connection with the same worker id replaces the first (REPLACED), and the second stays', async () => {
  const h = await listening({});
  try {
    const token = await h.t.login(newVolunteer());
    const a = await join(h, token, 'tab-1');
    const b = await join(h, token, 'tab-1');
    await closedWith(a, 'REPLACED', 'older connection');
    await b.alive();
    const m = await (await fetch(`${h.http}/metrics`)).text();
    assert.match(m, /expertswarm_volunteers_connected\{state="waiting"\} 1\n/);
    await stillServing(h, 'after REPLACED');
  } finally {
    await h.close();
  }
});

test('PeerJS signalling: only the id and token of a welcome are admitted, and the id’s socket closes when its volunteer leaves', async () => {
  const h = await listening({});
  const signalling = (peer: { path: string; key: string; id: string; token: string }, token = peer.token): string =>
    `${h.http.replace('http:', 'ws:')}${peer.path}/peerjs?key=${peer.key}&id=${peer.id}&token=${token}`;
  /** The upgrade's HTTP status (101 when admitted) and, when admitted, the socket. */
  const dial = (url: string): Promise<{ status: number; ws: WebSocket | null }> =>
    new Promise((resolve) => {
      const ws = new WebSocket(url);
      ws.on('open', () => resolve({ status: 101, ws }));
      ws.on('unexpected-response', (_req, res) => resolve({ status: res.statusCode ?? 0, ws: null }));
      ws.on('error', () => resolve({ status: 0, ws: null }));
    });
  try {
    const token = await h.t.login(newVolunteer());
    const p = await Peer.open(h);
    p.send(helloText(token, 'sig-1'));
    const peer = (await p.next('welcome')).peer;
    assert.ok(peer, 'the welcome carries a PeerJS id and token');
    assert.equal((await dial(signalling(peer, `${peer.token.slice(0, -2)}00`))).status, 401, 'a wrong token');
    const admitted = await dial(signalling(peer));
    assert.equal(admitted.status, 101, 'its own id and token');
    const closed = new Promise<number>((resolve) => admitted.ws?.on('close', (code) => resolve(code)));
    p.json({ type: 'leave' });
    const code = await Promise.race([closed, wait(3_000).then(() => -1)]);
    assert.equal(code, 1008, 'the revoked id’s signalling socket is closed (1008) when its volunteer leaves');
    assert.equal((await dial(signalling(peer))).status, 401, 'and the revoked id is not admitted again');
  } finally {
    await h.close();
  }
});

test('over capacity (maxWorkers 2): the third connection is closed with OVER_CAPACITY; a place freed is taken again', async () => {
  const h = await listening({ maxWorkers: 2 });
  try {
    const token = await h.t.login(newVolunteer());
    const a = await join(h, token, 'a');
    await join(h, token, 'b');
    const c = await Peer.open(h);
    await closedWith(c, 'OVER_CAPACITY', 'third connection');
    a.json({ type: 'leave' });
    assert.equal((await a.closed).code, 1000);
    await wait(50); // the hub sees the close
    await stillServing(h, 'after OVER_CAPACITY');
  } finally {
    await h.close();
  }
});

test('idle timeout: silence closes with IDLE_TIMEOUT; a volunteer that answers the hub’s keep-alive pings stays', async () => {
  const h = await listening({ channel: { heartbeatMs: 1_000, idleTimeoutMs: 3_000 } });
  realTime(h.t);
  try {
    const token = await h.t.login(newVolunteer());
    const deaf = await Peer.open(h, { autoPong: false });
    deaf.answerPings = false;
    const t0 = performance.now(); // the hub hears the hello after this
    deaf.send(helloText(token, 'deaf'));
    await deaf.next('welcome');
    // A volunteer whose page is throttled in a background tab: its timers send nothing, but its message events still
    // answer the hub's pings.
    const quiet = await join(h, token, 'quiet');
    await closedWith(deaf, 'IDLE_TIMEOUT', 'silent volunteer', 6_000);
    const ms = performance.now() - t0;
    assert.ok(ms >= 2_990, `closed after ${ms.toFixed(0)} ms, before idleTimeoutMs`);
    await wait(1_500); // past another idle period and sweep
    assert.equal(quiet.isClosed, false, 'a volunteer answering pings was closed');
    await quiet.alive();
    await stillServing(h, 'after IDLE_TIMEOUT');
    quiet.answerPings = false; // its page frozen: the socket below it still answers protocol pings, not ours
    await closedWith(quiet, 'IDLE_TIMEOUT', 'a volunteer whose socket answers only protocol pings', 6_000);
  } finally {
    await h.close();
  }
});

test('a serving volunteer whose page answers nothing (DevTools offline: its browser still answers protocol pings) leaves at the idle timeout; its work fails then', async () => {
  const h = await listening({ ...ALWAYS, channel: { heartbeatMs: 1_000, idleTimeoutMs: 3_000 } });
  realTime(h.t);
  try {
    const token = await h.t.login(newVolunteer());
    const mute = await join(h, token, 'mute');
    loaded(mute, await mute.next('assign', 1_000));
    await mute.alive();
    const channel = (h.t.hub as unknown as { channel: VolunteerChannel }).channel;
    const link = channel.directory('m').workersFor(0)[0];
    assert.equal(link?.workerId, 'mute');
    mute.answerPings = false; // `ws` still answers protocol pings for it, as the browser's network service does
    const t0 = performance.now();
    const outcome = link
      .compute(
        {
          layer: 0,
          nEmbd: 32,
          rows: new Float32Array(32),
          nRows: 1,
          nPairs: 1,
          rowIndex: new Uint32Array(1),
          localExpert: new Uint16Array(1),
          weight: new Float32Array([1]),
        },
        60_000,
      )
      .then(
        () => 'answered',
        (e: Error) => e.message,
      );
    await closedWith(mute, 'IDLE_TIMEOUT', 'a volunteer whose page answers nothing', 6_000);
    const ms = performance.now() - t0;
    assert.ok(ms >= 2_000, `closed after ${ms.toFixed(0)} ms, within the idle timeout of its last message`);
    // Its work fails now (the dispatcher computes it), not at the 60 s deadline.
    assert.equal(await outcome, 'the volunteer disconnected');
    assert.deepEqual(servingIds(h, 0), [], 'it left the dispatcher’s directory');
  } finally {
    await h.close();
  }
});

// ---------------------------------------------------------------------------------------------------- recruitment

/** A stand-in coordinator whose `GET /slots` says how many of its 4 slots are busy. */
async function fakeCoordinator(): Promise<{ url: string; busy: number; firstBusyAt: number | null; close(): Promise<void> }> {
  const state = { busy: 0, firstBusyAt: null as number | null };
  const server: Server = createServer((req, res) => {
    if (req.url !== '/slots') {
      res.writeHead(404).end();
      return;
    }
    const busy = state.busy;
    if (busy >= 2 && state.firstBusyAt === null) state.firstBusyAt = performance.now();
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(Array.from({ length: 4 }, (_, i) => ({ id: i, is_processing: i < busy }))));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return Object.assign(state, {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  });
}

test('pushed recruitment: idle volunteers get assign within 1 s of the poller’s saturated reading, different slices', async () => {
  const coordinator = await fakeCoordinator();
  const h = await listening({
    models: MODELS,
    externals: [{ name: 'm', url: coordinator.url }],
    poller: { intervalMs: 100, timeoutMs: 500 },
  });
  realTime(h.t);
  try {
    await h.t.hub.start(); // the poller (the coordinator is external: nothing is spawned)
    const token = await h.t.login(newVolunteer());
    const idle = [await join(h, token, 'idle-1'), await join(h, token, 'idle-2')];
    // At rest (busy 0, no workers) nothing is wanted: the volunteers wait with their channels open.
    await idle[0]!.none('assign', 600);
    assert.equal(idle[1]!.inbox.length, 0);
    coordinator.busy = 2;
    const got = await Promise.all(idle.map(async (p) => ({ a: await p.next('assign', 3_000), at: performance.now() })));
    assert.ok(coordinator.firstBusyAt !== null);
    for (const { at } of got) {
      const ms = at - coordinator.firstBusyAt;
      assert.ok(ms < 1_000, `assign ${ms.toFixed(0)} ms after the saturated reading`);
    }
    // The first reservation counts at once: the second volunteer gets the other layer, not a copy of the first.
    assert.deepEqual(got.map(({ a }) => [a.model, a.layer, a.experts]).sort(), [
      ['m', 0, [0, 8]],
      ['m', 1, [0, 8]],
    ]);
  } finally {
    await h.close();
    await coordinator.close();
  }
});

test('the load passes: volunteers beyond the base target are released, one per surplus copy, and recruited again on the next surge', async () => {
  const coordinator = await fakeCoordinator();
  const h = await listening({
    models: MODELS,
    externals: [{ name: 'm', url: coordinator.url }],
    poller: { intervalMs: 100, timeoutMs: 500 },
    saturation: { ...DEFAULT_SATURATION, targetBase: 1, boost: 1 },
  });
  realTime(h.t);
  try {
    await h.t.hub.start();
    const token = await h.t.login(newVolunteer());
    const vols = [await join(h, token, 'e1'), await join(h, token, 'e2'), await join(h, token, 'e3'), await join(h, token, 'e4')];
    coordinator.busy = 2; // saturated: target 1 + boost 1 = 2 replicas of each of the two MoE layers
    const assigns = await Promise.all(vols.map((p) => p.next('assign', 3_000)));
    assert.deepEqual(assigns.map((a) => a.layer).sort(), [0, 0, 1, 1], 'two copies of each layer');
    for (const [i, p] of vols.entries()) loaded(p, assigns[i] as Assign);
    // Serving: all four are in the dispatch map.
    const deadline = Date.now() + 5_000;
    while ((await dispatchRows(h)).length < 4 && Date.now() < deadline) await wait(50);
    assert.equal((await dispatchRows(h)).length, 4);

    const t0 = performance.now();
    coordinator.busy = 0; // the load passes: the target falls back to 1
    const releases = await Promise.all(
      vols.map(async (p) => {
        try {
          return await p.next('release', 3_000);
        } catch {
          return null;
        }
      }),
    );
    const released = vols.filter((_, i) => releases[i] !== null);
    // Each wait is bounded by 3 s, well within the 45 s idle timeout the issue allows.
    assert.equal(released.length, 2, `one copy of each layer released (${(performance.now() - t0).toFixed(0)} ms)`);
    for (const r of releases) if (r) assert.equal(r.code, 'NOT_NEEDED');
    const kept = await dispatchRows(h);
    assert.deepEqual(kept.map((r) => r.layer).sort(), [0, 1], 'one serving copy of each layer stays');
    const events = (await (await fetch(`${h.http}/api/events?kind=release`)).json()) as { events: Array<{ detail: string }> };
    assert.equal(events.events.filter((e) => e.detail.includes('more replicas than the target 1')).length, 2);

    // They went back to waiting; the next surge recruits them again.
    coordinator.busy = 2;
    const again = await Promise.all(released.map((p) => p.next('assign', 3_000)));
    assert.equal(again.length, 2);
  } finally {
    await h.close();
    await coordinator.close();
  }
});

/** `--dispatch always` wants every MoE expert at its base target at rest: with target 1, two whole-layer workers. */
const ALWAYS: Partial<HubConfig> = {
  models: MODELS,
  dispatchMode: 'always',
  saturation: { ...DEFAULT_SATURATION, targetBase: 1 },
};

function loaded(p: Peer, a: Assign, ready = true): void {
  p.json({ type: 'loaded', assignment_id: a.assignmentId, ready, backend: 'webgpu', gflops: 50 });
}

/** The serving workers the dispatcher would choose from for one layer of model m (the Hub's own channel). */
function servingIds(h: Listening, layer: number): string[] {
  const channel = (h.t.hub as unknown as { channel: VolunteerChannel }).channel;
  return channel
    .directory('m')
    .workersFor(layer)
    .map((w) => w.workerId);
}

async function dispatchRows(h: Listening): Promise<Array<{ worker_id: string; layer: number; experts: [number, number] }>> {
  const r = await fetch(`${h.http}/api/expert-dispatch-map?model=m`);
  assert.equal(r.status, 200);
  return ((await r.json()) as { rows: Array<{ worker_id: string; layer: number; experts: [number, number] }> }).rows;
}

test('pushed assignments: shard digest, the reservation, DOES_NOT_FIT, loaded → dispatch map, disconnect, release', async () => {
  const h = await listening(ALWAYS);
  try {
    const token = await h.t.login(newVolunteer());

    // Demand exists at once: the first volunteer is assigned the moment it says hello.
    const v1 = await join(h, token, 'v1');
    const a1 = await v1.next('assign', 1_000);
    assert.deepEqual([a1.model, a1.layer, a1.experts, a1.nExpert, a1.nEmbd], ['m', 0, [0, 8], 8, 32]);

    // The shard URL downloads with the node token, and its bytes are what the assignment announced.
    const r = await fetch(`${h.http}${a1.shardUrl}`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(r.status, 200);
    const body = new Uint8Array(await r.arrayBuffer());
    assert.equal(body.length, a1.shardBytes);
    assert.equal(`sha256:${createHash('sha256').update(body).digest('hex')}`, a1.shardDigest);
    assert.equal(r.headers.get('x-expertswarm-shard-digest'), a1.shardDigest);
    assert.equal((await fetch(`${h.http}${a1.shardUrl}`)).status, 401, 'no token, no shard');

    // The reservation: while v1 loads, its layer counts as held, so the next idle volunteer gets the other layer.
    const v2 = await join(h, token, 'v2');
    const a2 = await v2.next('assign', 1_000);
    assert.deepEqual([a2.layer, a2.experts], [1, [0, 8]]);
    assert.notEqual(a2.assignmentId, a1.assignmentId);

    // A slice that does not fit comes back narrower.
    v2.json({ type: 'load_failed', assignment_id: a2.assignmentId, code: 'DOES_NOT_FIT', message: 'needs 2 GiB, budget 1 GiB' });
    const a2b = await v2.next('assign', 1_000);
    assert.deepEqual([a2b.layer, a2b.experts], [1, [0, 4]]);

    // Reserved is not serving: the dispatch map lists a worker only once it says loaded.
    assert.deepEqual(await dispatchRows(h), []);
    loaded(v1, a1);
    loaded(v2, a2b);
    await v1.alive();
    await v2.alive();
    const rows = await dispatchRows(h);
    assert.deepEqual(rows.map((x) => [x.worker_id, x.layer, x.experts]).sort(), [
      ['v1', 0, [0, 8]],
      ['v2', 1, [0, 4]],
    ]);
    // And the dispatcher's directory has them as links, by layer.
    assert.deepEqual(servingIds(h, 0), ['v1']);
    assert.deepEqual(servingIds(h, 1), ['v2']);

    // The rest of layer 1 goes to the next volunteer; after that nothing is wanted and a fourth one waits.
    const v3 = await join(h, token, 'v3');
    const a3 = await v3.next('assign', 1_000);
    assert.deepEqual([a3.layer, a3.experts], [1, [4, 8]]);
    loaded(v3, a3);
    v3.json(heartbeat([[1, 4, 8]]));
    await v3.alive();
    const v4 = await join(h, token, 'v4');
    await v4.none('assign', 300);

    // Disconnect: v1 is gone from the map at once and its layer is offered to the waiting volunteer.
    v1.ws.terminate();
    const a4 = await v4.next('assign', 1_000);
    assert.deepEqual([a4.layer, a4.experts], [0, [0, 8]]);
    assert.ok(!(await dispatchRows(h)).some((x) => x.worker_id === 'v1'));
    assert.deepEqual(servingIds(h, 0), []);
    loaded(v4, a4);
    await v4.alive();
    // Its engine rebuilt (a lost GPU device), v4 says loaded again for the slice it serves, between pause and resume:
    // the hub shows the new backend and speed, and v4 stays in the dispatch map.
    v4.json({ type: 'pause' });
    v4.json({ type: 'loaded', assignment_id: a4.assignmentId, ready: true, backend: 'wasm', gflops: 3 });
    v4.json({ type: 'resume' });
    await v4.alive();
    const v4info = (h.t.hub as unknown as { channel: VolunteerChannel }).channel.workerInfo('v4');
    assert.deepEqual([v4info?.state, v4info?.backend, v4info?.gflops], ['serving', 'wasm', 3]);
    assert.deepEqual(servingIds(h, 0), ['v4']);

    // release: v3 is told its slice is not needed; the faster idle v5 takes it, and v3 waits again.
    const v5 = await join(h, token, 'v5', { device: { ...DEVICE, gflops: 1_000 } });
    await v5.none('assign', 200);
    assert.equal(h.t.hub.releaseWorker('v3', 'the operator moved you'), true);
    const rel = await v3.next('release');
    assert.deepEqual([rel.assignmentId, rel.code, rel.reason], [a3.assignmentId, 'NOT_NEEDED', 'the operator moved you']);
    const a5 = await v5.next('assign', 1_000);
    assert.deepEqual([a5.layer, a5.experts], [1, [4, 8]]);
    await v3.none('assign', 200);
    assert.ok(!(await dispatchRows(h)).some((x) => x.worker_id === 'v3'));
    assert.deepEqual(servingIds(h, 1), ['v2']); // v5 is still loading
    assert.equal(h.t.hub.releaseWorker('v3', 'again'), false, 'a waiting volunteer holds nothing to release');
    // v3's late heartbeat of the slice it held is a race, ignored; a serving v4 reporting a slice not its own is not.
    v3.json(heartbeat([[1, 4, 8]]));
    await v3.alive();
    v4.json(heartbeat([[1, 0, 4]]));
    await closedWith(v4, 'UNEXPECTED_MESSAGE', 'serving worker reporting another slice');
  } finally {
    await h.close();
  }
});

test('multi-slice volunteers (max_slices): one slice at a time up to the budget, every layer a route, spread to a newcomer (REBALANCE), released one by one; an old client holds one', async () => {
  const h = await listening(ALWAYS);
  try {
    const token = await h.t.login(newVolunteer());
    const channel = (h.t.hub as unknown as { channel: VolunteerChannel }).channel;

    // An old client (no max_slices) holds one slice: after it loads, it is offered nothing more though the other
    // layer is wanted, and it is a route as before.
    const old = await join(h, token, 'old');
    const o = await old.next('assign', 1_000);
    assert.deepEqual([o.layer, o.experts], [0, [0, 8]]);
    loaded(old, o);
    await old.alive();
    channel.demandChanged(); // a round over every volunteer
    await old.none('assign', 300);
    assert.deepEqual(servingIds(h, 0), ['old']);
    old.json({ type: 'leave' });
    await old.closed;

    // A volunteer that holds up to 4 slices is offered one, and the next only once that one is loaded.
    const v1 = await join(h, token, 'v1', { maxSlices: 4 });
    const a = await v1.next('assign', 1_000);
    assert.deepEqual([a.layer, a.experts], [0, [0, 8]]);
    await v1.none('assign', 300);
    loaded(v1, a);
    const b = await v1.next('assign', 1_000);
    assert.deepEqual([b.layer, b.experts], [1, [0, 8]], 'the other layer, never a second copy of layer 0');
    assert.notEqual(b.assignmentId, a.assignmentId);
    // While it loads the second, it serves the first.
    assert.deepEqual(servingIds(h, 0), ['v1']);
    assert.deepEqual(servingIds(h, 1), []);
    loaded(v1, b);
    v1.json(
      heartbeat([
        [0, 0, 8],
        [1, 0, 8],
      ]),
    );
    await v1.alive();
    assert.deepEqual(servingIds(h, 0), ['v1']);
    assert.deepEqual(servingIds(h, 1), ['v1'], 'each held slice is its own route');
    // One volunteer computes all its slices, one frame at a time: work sent for layer 0 is in the queue the
    // dispatcher sees for its layer-1 route too (the claim policy's queue time is the volunteer's).
    const [l0, l1] = [channel.directory('m').workersFor(0)[0], channel.directory('m').workersFor(1)[0]];
    const work = {
      layer: 0,
      nEmbd: 32,
      rows: new Float32Array(32),
      nRows: 1,
      nPairs: 1,
      rowIndex: new Uint32Array([0]),
      localExpert: new Uint16Array([0]),
      weight: new Float32Array([1]),
    };
    const pendingWork = l0?.compute(work, 1000).catch(() => null);
    assert.deepEqual([l0?.inFlight, l1?.inFlight], [1, 1], 'the layer-1 route counts the layer-0 frame in flight');
    assert.deepEqual((await dispatchRows(h)).map((x) => [x.worker_id, x.layer, x.experts]).sort(), [
      ['v1', 0, [0, 8]],
      ['v1', 1, [0, 8]],
    ]);
    // Everything is covered, and a faster volunteer joins with nothing: v1 gives it its newest slice (REBALANCE, one
    // slice alone), so that two devices compute the two layers.
    await v1.none('assign', 300);
    const v2 = await join(h, token, 'v2', { maxSlices: 4, device: { ...DEVICE, gflops: 1_000 } });
    const rel = await v1.next('release', 1_000);
    assert.deepEqual([rel.assignmentId, rel.code], [b.assignmentId, 'REBALANCE']);
    const c = await v2.next('assign', 1_000);
    assert.deepEqual([c.layer, c.experts], [1, [0, 8]]);
    assert.deepEqual(servingIds(h, 0), ['v1'], 'v1 keeps serving the slice it still holds');
    assert.deepEqual(servingIds(h, 1), []);
    // v1 heartbeats the slice it still holds; one that leaves out a held slice is refused (below).
    v1.json(heartbeat([[0, 0, 8]]));
    await v1.alive();
    loaded(v2, c);
    await v2.alive();
    assert.deepEqual(servingIds(h, 1), ['v2']);
    // Holders of one slice keep it: the next volunteer with nothing waits.
    const v3 = await join(h, token, 'v3', { maxSlices: 4 });
    await v3.none('assign', 300);
    assert.equal(
      v1.inbox.find((m) => m.type === 'release'),
      undefined,
      'a holder of one slice is not asked for it',
    );
    // One slice released alone with a cool-down (as an operator's release): it goes to v3, not back to v2.
    assert.equal(channel.release('v2', 'NOT_NEEDED', 'moved', 60_000, [1, 0, 8]), true);
    assert.equal((await v2.next('release')).assignmentId, c.assignmentId);
    const d = await v3.next('assign', 1_000);
    assert.deepEqual([d.layer, d.experts], [1, [0, 8]]);
    loaded(v3, d);
    await v3.alive();
    // Pausing takes every slice of a volunteer out of service, resuming puts them back.
    v1.json({ type: 'pause' });
    await v1.alive();
    assert.deepEqual(servingIds(h, 0), []);
    v1.json({ type: 'resume' });
    await v1.alive();
    assert.deepEqual(servingIds(h, 0), ['v1']);
    v3.json(heartbeat([]));
    await closedWith(v3, 'UNEXPECTED_MESSAGE', 'a serving worker reporting coverage without its slice');
    v1.ws.terminate();
    assert.equal(await pendingWork, null, 'the frame v1 never answered fails when it goes');
  } finally {
    await h.close();
  }

  // The budget bounds what it holds: a budget of one layer's slice and a half gets the rest as a narrower slice, and
  // nothing after that.
  const h2 = await listening(ALWAYS);
  try {
    const token = await h2.t.login(newVolunteer());
    const probe = await join(h2, token, 'probe');
    const whole = await probe.next('assign', 1_000);
    probe.ws.terminate();
    await probe.closed;
    const budget = Math.floor(whole.shardBytes * 1.5);
    const v = await join(h2, token, 'v', { maxSlices: 8, device: { ...DEVICE, memoryBudgetBytes: budget } });
    const held: Assign[] = [];
    for (;;) {
      const next = await v.next('assign', 1_000).catch(() => null);
      if (!next) break;
      held.push(next);
      loaded(v, next);
    }
    assert.ok(held.length >= 2, `two slices at least: ${JSON.stringify(held.map((x) => [x.layer, x.experts]))}`);
    // in the market's measure: the experts' bytes (a shard's header is read, not held)
    const bytes = held.reduce((n, x) => n + (x.experts[1] - x.experts[0]) * h2.t.hub.shape('m').bytesPerExpert, 0);
    assert.ok(bytes <= budget, `${bytes} bytes held within the ${budget}-byte budget`);
    const layers = new Set(held.map((x) => x.layer));
    assert.equal(layers.size, held.length, 'never two slices of one layer to one volunteer here (no duplicate experts)');
    assert.ok(held[1]!.experts[1] - held[1]!.experts[0] < 8, 'the second slice is narrower: what the budget has left');
    // A slice given up beside others (load_failed: its rebuild after a device loss did not fit) is not offered back
    // to the volunteer that gave it up, though its budget now has room: it serves what it still holds.
    const last = held[held.length - 1] as Assign;
    v.json({ type: 'load_failed', assignment_id: last.assignmentId, code: 'DOES_NOT_FIT', message: 'the new device cannot hold it' });
    await v.alive();
    (h2.t.hub as unknown as { channel: VolunteerChannel }).channel.demandChanged();
    await v.none('assign', 300);
  } finally {
    await h2.close();
  }
});

test('an operator’s release while the market still wants the slice: the volunteer is not handed it back until the cool-down ends', async () => {
  const ADMIN = 'channel-test-admin-token-0123456789';
  // The base target stays where it is: the released slice is still wanted when the release happens.
  const h = await listening({ ...ALWAYS, adminToken: ADMIN, releaseCoolDownMs: 20_000 });
  const admin = (path: string, body: unknown): Promise<Response> =>
    fetch(`${h.http}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  try {
    const token = await h.t.login(newVolunteer());
    const v1 = await join(h, token, 'v1');
    const a1 = await v1.next('assign', 2_000);
    assert.deepEqual([a1.layer, a1.experts], [0, [0, 8]]);
    loaded(v1, a1);
    await v1.alive();

    const r = await admin('/api/admin/workers/v1/release', { reason: 'operator test' });
    assert.equal(r.status, 200);
    const rel = await v1.next('release');
    assert.deepEqual([rel.assignmentId, rel.reason], [a1.assignmentId, 'operator test']);
    // The market still wants layer 0 (and layer 1): a newcomer is given it, and a round over every idle volunteer
    // (a target change) runs after that; v1 is in neither.
    const v2 = await join(h, token, 'v2');
    const a2 = await v2.next('assign', 2_000);
    assert.deepEqual([a2.layer, a2.experts], [0, [0, 8]], 'the released slice was still wanted');
    assert.equal((await admin('/api/admin/target', { base: 1 })).status, 200); // demandChanged: a round over all
    const v3 = await join(h, token, 'v3');
    const a3 = await v3.next('assign', 2_000);
    assert.deepEqual([a3.layer, a3.experts], [1, [0, 8]], 'layer 1 was wanted too, and went to the newcomer');
    await v1.none('assign', 300);

    // After the cool-down the next round may offer it a slice again.
    loaded(v2, a2);
    loaded(v3, a3);
    await v3.alive();
    assert.equal((await admin('/api/admin/target', { base: 2 })).status, 200);
    await v1.none('assign', 200);
    h.t.clock.now += 20_001;
    assert.equal((await admin('/api/admin/target', { base: 2 })).status, 200);
    const back = await v1.next('assign', 2_000);
    assert.equal(back.model, 'm');
  } finally {
    await h.close();
  }
});

test('a volunteer that never says loaded is released with LOAD_TIMEOUT, and its late loaded is ignored', async () => {
  const h = await listening({ ...ALWAYS, channel: { loadTimeoutMs: 300 } });
  try {
    const token = await h.t.login(newVolunteer());
    const p = await join(h, token, 'slow');
    const a = await p.next('assign', 1_000);
    const t0 = performance.now();
    const rel = await p.next('release', 2_000);
    const ms = performance.now() - t0;
    assert.deepEqual([rel.assignmentId, rel.code], [a.assignmentId, 'LOAD_TIMEOUT']);
    assert.ok(ms >= 250 && ms < 1_500, `released after ${ms.toFixed(0)} ms, wanted about 300`);
    // Demand is still there: it is offered a slice again, under a new assignment id.
    const again = await p.next('assign', 1_000);
    assert.notEqual(again.assignmentId, a.assignmentId);
    loaded(p, a); // the old one: stale, ignored
    await p.alive();
    assert.deepEqual(await dispatchRows(h), []);
    loaded(p, again);
    await p.alive();
    assert.deepEqual(
      (await dispatchRows(h)).map((x) => x.worker_id),
      ['slow'],
    );
  } finally {
    await h.close();
  }
});

test('a volunteer asking for an unknown model does not stop the others from being assigned', async () => {
  const h = await listening(ALWAYS);
  try {
    const token = await h.t.login(newVolunteer());
    // The fastest volunteer is offered first; its unknown model must not end the round for everyone.
    const odd = await join(h, token, 'odd', { model: 'no-such-model', device: { ...DEVICE, gflops: 9_999 } });
    const p = await join(h, token, 'plain');
    await p.next('assign', 1_000);
    await odd.alive();
    await odd.none('assign', 100);
  } finally {
    await h.close();
  }
});

test('expertswarm_volunteers_connected{state} counts hello, waiting, loading, serving and paused', async () => {
  const h = await listening(ALWAYS);
  try {
    const token = await h.t.login(newVolunteer());
    const gauge = async (): Promise<Record<string, number>> => {
      const text = await (await fetch(`${h.http}/metrics`)).text();
      const out: Record<string, number> = {};
      for (const m of text.matchAll(/^expertswarm_volunteers_connected\{state="(\w+)"\} (\d+)$/gm)) out[m[1]!] = Number(m[2]);
      return out;
    };
    assert.deepEqual(await gauge(), { hello: 0, waiting: 0, loading: 0, serving: 0, paused: 0 });
    const serving = await join(h, token, 'serving');
    loaded(serving, await serving.next('assign'));
    await serving.alive();
    const loading = await join(h, token, 'loading');
    await loading.next('assign');
    const waiting = await join(h, token, 'waiting');
    const paused = await join(h, token, 'paused');
    paused.json({ type: 'pause' });
    await paused.alive();
    await Peer.open(h); // no hello yet
    await waiting.none('assign', 100);
    assert.deepEqual(await gauge(), { hello: 1, waiting: 1, loading: 1, serving: 1, paused: 1 });
    // A serving volunteer that pauses stops serving; resume brings it back.
    serving.json({ type: 'pause' });
    await serving.alive();
    assert.deepEqual(await gauge(), { hello: 1, waiting: 1, loading: 1, serving: 0, paused: 2 });
    serving.json({ type: 'resume' });
    await serving.alive();
    serving.ws.terminate();
    loading.json({ type: 'leave' });
    await serving.closed;
    await loading.closed;
    // Their slices are wanted again: the waiting volunteer is assigned one and loads it.
    await waiting.next('assign');
    assert.deepEqual(await gauge(), { hello: 1, waiting: 0, loading: 1, serving: 0, paused: 1 });
  } finally {
    await h.close();
  }
});

test('a round over every volunteer skips the paused and includes one that resumed', async () => {
  // Slices are wanted, but this volunteer lends no memory: every offer it gets is a refusal (budget-too-small), counted.
  const h = await listening(ALWAYS);
  try {
    const refusals = async (): Promise<number> => {
      const text = await (await fetch(`${h.http}/metrics`)).text();
      return Number(/^expertswarm_volunteer_refusals_total (\d+)$/m.exec(text)?.[1] ?? Number.NaN);
    };
    const channel = (h.t.hub as unknown as { channel: VolunteerChannel }).channel;
    const token = await h.t.login(newVolunteer());
    const v = await join(h, token, 'small', { device: { ...DEVICE, memoryBudgetBytes: 0 } });
    await v.alive();
    const joined = await refusals();
    assert.ok(joined >= 1, 'its hello was offered a slice');
    v.json({ type: 'pause' });
    await v.alive();
    channel.demandChanged();
    await v.alive();
    assert.equal(await refusals(), joined, 'a paused volunteer is offered nothing');
    v.json({ type: 'resume' });
    await v.alive();
    assert.equal(await refusals(), joined + 1, 'resume offers it a slice');
    channel.demandChanged();
    await v.alive();
    assert.equal(await refusals(), joined + 2, 'the next round over every volunteer includes it');
  } finally {
    await h.close();
  }
});

test('joining and leaving cost one offer each, not a round over every idle volunteer', async () => {
  // Slices are wanted, but these volunteers lend no memory: every offer is a refusal (budget-too-small), counted.
  // Twenty volunteers of one token: above the per-wallet cap of 16, lifted here.
  const h = await listening({ ...ALWAYS, channel: { maxPerWallet: 20 } });
  try {
    const refusals = async (): Promise<number> => {
      const text = await (await fetch(`${h.http}/metrics`)).text();
      return Number(/^expertswarm_volunteer_refusals_total (\d+)$/m.exec(text)?.[1] ?? Number.NaN);
    };
    const token = await h.t.login(newVolunteer());
    const before = await refusals();
    const peers: Peer[] = [];
    for (let i = 0; i < 20; i++) peers.push(await join(h, token, `small-${i}`, { device: { ...DEVICE, memoryBudgetBytes: 0 } }));
    await peers[0]!.alive();
    // A round over all idle volunteers per hello would make 1 + 2 + … + 20 = 210 offers.
    assert.equal((await refusals()) - before, 20);
    // A waiting volunteer leaving gives up no slice: nobody is offered anything again.
    for (const p of peers.slice(10)) p.ws.terminate();
    await Promise.all(peers.slice(10).map((p) => p.closed));
    for (
      let i = 0;
      !/expertswarm_volunteers_connected\{state="waiting"\} 10\n/.test(await (await fetch(`${h.http}/metrics`)).text());
      i++
    ) {
      assert.ok(i < 100, 'the hub did not see the closes');
      await wait(20);
    }
    assert.equal((await refusals()) - before, 20);
  } finally {
    await h.close();
  }
});
