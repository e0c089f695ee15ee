/**
 * The reconnect policy (volunteer/backoff.ts) as a distribution: 10,000 seeded first retries spread evenly over
 * [0.5 s, 1 s), the windows of later attempts adjacent and capped, "come back later" waits spread over a minute; and
 * the client (volunteer/client.ts) on mocked timers: its first retry after a drop waits the drawn delay, never 0, and
 * a `later` close waits the drawn [60 s, 120 s), not a fixed minute. The same volunteers against a real hub that
 * restarts: test/integration/reconnect.test.ts and `npm run sim:reconnect`.
 */
import { test, mock } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_BACKOFF, laterDelayMs, reconnectDelayMs } from '../../volunteer/backoff.ts';
import { createVolunteerClient, type SocketFactory, type SocketLike, type VolunteerClientOptions } from '../../volunteer/client.ts';
import { MemoryIdentityStore } from '../../volunteer/identity.ts';
import { NoShardCache } from '../../volunteer/shard-cache.ts';
import { CLOSE_CODES, encodeHubMessage, parseClientMessage } from '../../protocol/channel/index.ts';
import { mulberry32 } from '../../shaders/random.ts';

const DRAWS = 10_000;

/** Counts per sub-window of [lo, hi] cut in `parts` (the top, which rounding reaches, in the last); throws on a value outside. */
function counts(xs: readonly number[], lo: number, hi: number, parts: number): number[] {
  const out = new Array<number>(parts).fill(0);
  for (const x of xs) {
    assert.ok(x >= lo && x <= hi, `${x} outside [${lo}, ${hi}]`);
    const i = Math.min(parts - 1, Math.floor(((x - lo) / (hi - lo)) * parts));
    out[i] = (out[i] as number) + 1;
  }
  return out;
}

/** No 5 % sub-window holds more than twice its even share (nor less than half: the draw covers the whole window). */
function assertEven(xs: readonly number[], lo: number, hi: number): void {
  const c = counts(xs, lo, hi, 20);
  const share = xs.length / 20;
  assert.ok(Math.max(...c) <= 2 * share, `a 5 % sub-window holds ${Math.max(...c)} of ${xs.length} (share ${share}): ${c}`);
  assert.ok(Math.min(...c) >= share / 2, `a 5 % sub-window holds only ${Math.min(...c)} (share ${share}): ${c}`);
}

test('the first retry: 10,000 seeded draws cover [0.5 s, 1 s) evenly, none at once', () => {
  const random = mulberry32(14);
  const waits = Array.from({ length: DRAWS }, () => reconnectDelayMs(1, random));
  assert.ok(Math.min(...waits) >= 500, 'no volunteer redials before half the first step');
  assertEven(waits, 500, 1_000);
  // The negative control: a policy without jitter (every draw the same) fails the same check.
  const fixed = Array.from({ length: DRAWS }, () => reconnectDelayMs(1, () => 0));
  assert.throws(() => assertEven(fixed, 500, 1_000), /sub-window holds 10000/);
});

test('every attempt draws in [step / 2, step), step = min(max, base · 2^(n−1)): adjacent windows that grow, then the cap', () => {
  const random = mulberry32(7);
  for (let attempt = 1; attempt <= 40; attempt++) {
    const step = Math.min(DEFAULT_BACKOFF.maxMs, DEFAULT_BACKOFF.baseMs * 2 ** (attempt - 1));
    const lowest = reconnectDelayMs(attempt, () => 0);
    const highest = reconnectDelayMs(attempt, () => 1);
    assert.equal(lowest, step / 2, `attempt ${attempt}: the wait never falls below half the step`);
    assert.ok(highest <= step, `attempt ${attempt}: ${highest} over the step (or the cap)`);
    for (let i = 0; i < 200; i++) {
      const w = reconnectDelayMs(attempt, random);
      assert.ok(w >= step / 2 && w <= step, `attempt ${attempt}: ${w} outside [${step / 2}, ${step}]`);
    }
    if (2 * step <= DEFAULT_BACKOFF.maxMs) {
      // Below the cap the next attempt's shortest wait is this one's longest: retries of a hub that stays down thin out.
      assert.ok(reconnectDelayMs(attempt + 1, () => 0) >= highest, `attempt ${attempt + 1} may wait less than attempt ${attempt}`);
    }
    // Past it the windows are all [max / 2, max): the mean wait never shrinks.
    const mean = (lowest + highest) / 2;
    const next = (reconnectDelayMs(attempt + 1, () => 0) + reconnectDelayMs(attempt + 1, () => 1)) / 2;
    assert.ok(next >= mean, `attempt ${attempt + 1}'s mean wait ${next} < attempt ${attempt}'s ${mean}`);
  }
  assert.equal(
    reconnectDelayMs(6, () => 0),
    15_000,
    'attempt 6: the step 32 s is capped at 30 s',
  );
  assert.equal(
    reconnectDelayMs(1_000, () => 0.999_999),
    30_000,
    'a huge attempt stays at the cap',
  );
  const capped = Array.from({ length: DRAWS }, () => reconnectDelayMs(12, random));
  assertEven(capped, 15_000, 30_000);
});

test('a custom policy, out-of-range draws clamped, bad attempts refused', () => {
  const policy = { baseMs: 200, maxMs: 1_000 };
  assert.equal(
    reconnectDelayMs(1, () => 0, policy),
    100,
  );
  assert.equal(
    reconnectDelayMs(4, () => 0, policy),
    500,
  );
  assert.equal(
    reconnectDelayMs(2, () => -3, policy),
    200,
    'below 0 → 0',
  );
  assert.equal(
    reconnectDelayMs(2, () => 7, policy),
    400,
    'above 1 → just under 1 (the step, once rounded)',
  );
  assert.equal(
    reconnectDelayMs(2, () => Number.NaN, policy),
    200,
    'NaN → 0',
  );
  for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
    assert.throws(() => reconnectDelayMs(bad, Math.random), RangeError, String(bad));
  }
});

test('a "later" close: [floor, 2 · floor), spread evenly, not a fixed minute', () => {
  const random = mulberry32(4005);
  const waits = Array.from({ length: DRAWS }, () => laterDelayMs(60_000, random));
  assertEven(waits, 60_000, 120_000);
  assert.equal(
    laterDelayMs(60_000, () => 0),
    60_000,
  );
  assert.ok(laterDelayMs(60_000, () => 1) <= 120_000);
  assert.equal(laterDelayMs(0, random), 0);
  for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY]) assert.throws(() => laterDelayMs(bad, Math.random), RangeError);
});

// ---------------------------------------------------------------------------------------------------- the client

/** A WebSocket that opens on the next microtask, welcomes every hello, and drops when the test says. */
class FakeSocket implements SocketLike {
  static made: FakeSocket[] = [];
  binaryType = 'blob';
  readyState = 0;
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  constructor(readonly url: string) {
    FakeSocket.made.push(this);
    queueMicrotask(() => {
      this.readyState = 1;
      this.onopen?.({});
    });
  }
  static answerPings = true;
  readonly sent: string[] = [];
  closedWith: number | null = null;
  send(data: string | Uint8Array): void {
    if (typeof data !== 'string') return;
    const m = parseClientMessage(data);
    this.sent.push(m.type);
    if (m.type === 'ping' && FakeSocket.answerPings) {
      queueMicrotask(() => this.onmessage?.({ data: encodeHubMessage({ type: 'pong', id: m.id }) }));
    }
    if (m.type !== 'hello') return;
    const welcome = {
      type: 'welcome',
      version: 1,
      workerId: m.workerId,
      heartbeatMs: 15_000,
      idleTimeoutMs: 45_000,
      encoding: 'f32',
      credit: 0,
    };
    queueMicrotask(() => this.onmessage?.({ data: encodeHubMessage(welcome as Parameters<typeof encodeHubMessage>[0]) }));
  }
  close(code = 1000): void {
    this.closedWith = code;
    this.drop(code);
  }
  drop(code: number): void {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.onclose?.({ code, reason: '' });
  }
}

/** A login that always succeeds (the hub's two calls, answered in-process). */
const fakeFetch = (async (url: URL | string) => {
  const path = new URL(String(url)).pathname;
  const body = path.endsWith('/challenge')
    ? { nonce: 'n', message: 'sign this' }
    : { node_token: 'T'.repeat(40), wallet: 'w', expires_in: 86_400 };
  return new Response(JSON.stringify(body), { status: 200, headers: { 'content-type': 'application/json' } });
}) as typeof fetch;

const settle = async (): Promise<void> => {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
};

/**
 * Until the client's first dial is answered. Joining makes an Ed25519 key through WebCrypto, which runs on libuv's
 * thread pool in real time, not on the mocked timers: so the wait is bounded in wall time (Date is not mocked here),
 * not in a count of turns a loaded machine may run through before the key is made.
 */
const untilWaiting = async (client: { state: { kind: string } }, limitMs = 10_000): Promise<void> => {
  const until = Date.now() + limitMs;
  while (client.state.kind !== 'waiting' && Date.now() < until) await settle();
  assert.equal(client.state.kind, 'waiting', `the client is waiting for work within ${limitMs} ms`);
};

/** A client on FakeSocket, worker 'w1', wasm, no cache; `random` and `now` are the test's. */
const fakeClient = (clock: Pick<VolunteerClientOptions, 'random' | 'now'>) =>
  createVolunteerClient({
    hubUrl: 'http://hub.test',
    environment: async () => ({ gpu: null, ort: null, backend: 'wasm' }),
    identity: new MemoryIdentityStore(),
    cache: new NoShardCache(),
    WebSocket: FakeSocket as unknown as SocketFactory,
    workerId: 'w1',
    fetch: fakeFetch,
    ...clock,
  });

test('the client: the first retry after a drop waits its draw (never at once); a `later` close waits [60 s, 120 s)', async (t) => {
  FakeSocket.made = [];
  let draw = 0;
  const client = fakeClient({ random: () => draw, now: () => 0 });
  const kind = (): string => client.state.kind; // read afresh: assertions would narrow `client.state`
  const states: string[] = [];
  client.on('state', (s) => states.push(s.kind));
  mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
  t.after(() => {
    mock.timers.reset();
    void client.leave();
  });
  client.join({ backend: 'wasm' });
  await untilWaiting(client).catch((e: Error) => assert.fail(`${e.message}; states: ${states.join(' → ')}`));
  assert.equal(FakeSocket.made.length, 1);

  // The hub dies (1006, no close frame): the smallest draw still waits half the first step.
  draw = 0;
  FakeSocket.made[0]?.drop(1006);
  await settle();
  assert.equal(kind(), 'retrying');
  mock.timers.tick(499);
  await settle();
  assert.equal(FakeSocket.made.length, 1, 'no dial before 500 ms');
  mock.timers.tick(1);
  await settle();
  assert.equal(FakeSocket.made.length, 2, 'the dial at 500 ms');
  assert.equal(kind(), 'waiting');

  // A large draw: 998 ms.
  draw = 0.996;
  FakeSocket.made[1]?.drop(1006);
  await settle();
  mock.timers.tick(997);
  await settle();
  assert.equal(FakeSocket.made.length, 2, 'no dial before the drawn 998 ms');
  mock.timers.tick(1);
  await settle();
  assert.equal(FakeSocket.made.length, 3);

  // A full hub (OVER_CAPACITY, then "later"): a draw of 0.5 waits 90 s, not the fixed 60 s that made every refused
  // volunteer come back in the same second.
  draw = 0.5;
  FakeSocket.made[2]?.drop(CLOSE_CODES.OVER_CAPACITY.code);
  await settle();
  mock.timers.tick(89_999);
  await settle();
  assert.equal(FakeSocket.made.length, 3, 'no dial before the drawn 90 s');
  mock.timers.tick(1);
  await settle();
  assert.equal(FakeSocket.made.length, 4);
});

test('the client judges the hub’s silence as the hub judges its own: pinged at half the idle timeout, given up at it', async (t) => {
  FakeSocket.made = [];
  FakeSocket.answerPings = true;
  let clock = 0;
  const client = fakeClient({ random: () => 0, now: () => clock });
  mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
  t.after(() => {
    FakeSocket.answerPings = true;
    mock.timers.reset();
    void client.leave();
  });
  client.join({ backend: 'wasm' });
  await untilWaiting(client);
  const first = FakeSocket.made[0] as FakeSocket;
  const beat = async (): Promise<void> => {
    clock += 15_000; // the welcome's heartbeat; idle timeout 45 s
    mock.timers.tick(15_000);
    await settle();
  };
  // A hub that answers: heartbeats, a ping once 22.5 s passed in silence, its pong — and the socket stays.
  for (let i = 0; i < 6; i++) await beat();
  assert.ok(first.sent.includes('ping'), `pinged a quiet hub: ${first.sent.join(' ')}`);
  assert.equal(first.closedWith, null, 'a hub that answers its pings is kept');
  assert.equal(FakeSocket.made.length, 1);
  // A hub gone silent (a cut network: no close ever arrives): given up once 45 s passed, then dialled again.
  FakeSocket.answerPings = false;
  for (let i = 0; i < 3 && first.closedWith === null; i++) await beat();
  assert.equal(first.closedWith, null, 'not before the idle timeout');
  await beat();
  assert.equal(first.closedWith, CLOSE_CODES.IDLE_TIMEOUT.code, 'closed as IDLE_TIMEOUT after 45 s of silence');
  assert.equal(client.state.kind, 'retrying');
  mock.timers.tick(500);
  await settle();
  assert.equal(FakeSocket.made.length, 2, 'dialled again after its backoff');
});

test('a cluster’s volunteer (otherHubs): each retry dials the next hub in turn, after its jittered wait, logging in there', async (t) => {
  FakeSocket.made = [];
  const logins: string[] = [];
  const fetchLogged = (async (url: URL | string, init?: RequestInit) => {
    if (new URL(String(url)).pathname.endsWith('/challenge')) logins.push(new URL(String(url)).origin);
    return fakeFetch(url, init);
  }) as typeof fetch;
  const client = createVolunteerClient({
    hubUrl: 'http://a.test',
    otherHubs: ['http://b.test', 'http://a.test', 'http://c.test'],
    environment: async () => ({ gpu: null, ort: null, backend: 'wasm' }),
    identity: new MemoryIdentityStore(),
    cache: new NoShardCache(),
    WebSocket: FakeSocket as unknown as SocketFactory,
    workerId: 'w1',
    fetch: fetchLogged,
    random: () => 0,
    now: () => 0,
  });
  mock.timers.enable({ apis: ['setTimeout', 'setInterval'] });
  t.after(() => {
    mock.timers.reset();
    void client.leave();
  });
  client.join({ backend: 'wasm' });
  await untilWaiting(client);
  const dialled = (): string[] => FakeSocket.made.map((s) => new URL(s.url).host);
  for (const next of ['b.test', 'c.test', 'a.test', 'b.test']) {
    const before = FakeSocket.made.length;
    FakeSocket.made.at(-1)?.drop(1006); // the hub died
    await settle();
    mock.timers.tick(499);
    await settle();
    assert.equal(FakeSocket.made.length, before, 'no dial before the drawn 500 ms');
    mock.timers.tick(1);
    await untilWaiting(client); // a login at a new hub signs through WebCrypto: real time
    assert.equal(dialled().at(-1), next, `dialled ${dialled().join(', ')}`);
  }
  assert.deepEqual(dialled(), ['a.test', 'b.test', 'c.test', 'a.test', 'b.test'], 'the list without its duplicate, in turn');
  // One login per hub: a hub's node token is kept for the next time round (each hub issues its own).
  assert.deepEqual(logins, ['http://a.test', 'http://b.test', 'http://c.test']);
});
