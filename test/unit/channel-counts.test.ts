/**
 * The volunteer channel's counts by state and its wallet index (hub/channel/channel.ts), kept as connections change
 * rather than walked per reading: a seeded run of opens, hellos, assignments, loads, pauses, resumes, failed loads,
 * releases, reconnects under the same worker id, disconnects and closes, over real WebSockets on loopback with a
 * stand-in host. After every step `countByState()` equals a walk of the connections (each said-hello worker's
 * `workerInfo`, and the sockets that have not said hello), and `credit()` reaches exactly the wallet's open
 * connections.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocket, type RawData } from 'ws';
import { VolunteerChannel, type ChannelHost, type VolunteerConnectionState } from '../../hub/channel/channel.ts';
import type { VolunteerAnswer } from '../../hub/market/assign.ts';
import { VOLUNTEER_PATH, encodeClientMessage, parseHubMessage, type ChannelHello, type HubMessage } from '../../protocol/channel/index.ts';
import { mulberry32 } from '../../shaders/random.ts';
import { testDevice } from '../../harness/hub-fixtures.ts';

const DEVICE = testDevice('counts test');

/** A volunteer's end: what the hub sent, in order. */
class Peer {
  readonly inbox: HubMessage[] = [];
  closed = false;
  workerId = '';
  wallet = '';
  private nextPing = 1;
  private wake: () => void = () => {};

  private constructor(readonly ws: WebSocket) {
    ws.on('error', () => {});
    ws.on('close', () => {
      this.closed = true;
      this.wake();
    });
    ws.on('message', (data: RawData, isBinary) => {
      if (isBinary) return;
      this.inbox.push(parseHubMessage(String(data)));
      this.wake();
    });
  }

  static open(url: string): Promise<Peer> {
    const p = new Peer(new WebSocket(url));
    return new Promise((resolve, reject) => {
      p.ws.once('open', () => resolve(p));
      p.ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
    });
  }

  send(m: Parameters<typeof encodeClientMessage>[0]): void {
    this.ws.send(encodeClientMessage(m));
  }

  /** Resolves once a message matching `want` has come (removed from the inbox), or the socket closed. */
  async next(want: (m: HubMessage) => boolean): Promise<HubMessage | null> {
    const deadline = performance.now() + 2_000;
    for (;;) {
      const i = this.inbox.findIndex(want);
      if (i >= 0) return this.inbox.splice(i, 1)[0] ?? null;
      if (this.closed) return null;
      if (performance.now() > deadline) throw new Error(`${this.workerId || 'a peer'}: nothing came`);
      await new Promise<void>((r) => {
        this.wake = r;
        setTimeout(r, 50);
      });
    }
  }

  /** A ping answered: whatever the peer sent before has been handled, and what the hub sent before has come. */
  async sync(): Promise<void> {
    if (this.closed) return;
    const id = this.nextPing++;
    this.send({ type: 'ping', id });
    await this.next((m) => m.type === 'pong' && m.id === id);
  }

  close(): Promise<void> {
    this.ws.close(1000, 'done');
    return new Promise((r) => (this.closed ? r() : this.ws.once('close', () => r())));
  }
}

function hello(wallet: string, workerId: string, maxSlices: number): ChannelHello {
  return {
    type: 'hello',
    version: 1,
    token: `tok-${wallet}`,
    workerId,
    device: DEVICE,
    numerics: ['exact', 'llama'],
    encodings: ['f32'],
    model: '',
    maxExperts: 0,
    maxSlices,
    agent: 'channel-counts.test',
  };
}

interface Rig {
  channel: VolunteerChannel;
  url: string;
  /** Whether the market's next offers assign a slice. */
  demand: { on: boolean };
  close(): Promise<void>;
}

async function rig(maxPerWallet = 1e9): Promise<Rig> {
  const demand = { on: true };
  let layer = 0;
  const host: ChannelHost = {
    authenticate: (authorization) => authorization.replace(/^Bearer tok-/, ''),
    quarantineReason: () => undefined,
    offer: (): VolunteerAnswer => {
      if (!demand.on) return { assigned: false, code: 'nothing-wanted', reason: 'nothing is wanted' };
      layer = (layer + 1) % 8;
      const a = { model: 'm', layer, experts: [0, 2] as [number, number], scarcity: 1, replicas: 0, target: 1 };
      return { assigned: true, ...a, n_embd: 8, n_layer: 8, n_expert: 8 };
    },
    expertBytes: () => 1,
    shard: async () => ({ bytes: 1, digest: `sha256:${'0'.repeat(64)}` }),
    numerics: () => 'llama',
    reserve: () => {},
    serving: () => {},
    forget: () => {},
    creditOf: () => 0,
    sliceCredit: (_workerId, slice) => slice.layer,
    event: () => {},
  };
  const channel = new VolunteerChannel(host, {
    heartbeatMs: 60_000,
    idleTimeoutMs: 600_000,
    maxPerAddress: 1e9,
    maxPerWallet,
    opensPerAddress: { capacity: 1e9, refillPerSec: 1e9 },
  });
  const http = createServer();
  channel.attach(http);
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  return {
    channel,
    url: `ws://127.0.0.1:${(http.address() as AddressInfo).port}${VOLUNTEER_PATH}`,
    demand,
    async close() {
      await channel.close();
      await new Promise<void>((r) => http.close(() => r()));
    },
  };
}

const NO_ONE = (): Record<VolunteerConnectionState, number> => ({ hello: 0, waiting: 0, loading: 0, serving: 0, paused: 0 });

/** The walk the counts stand for: each said-hello worker's state as the dashboard reads it, and those before hello. */
function walk(channel: VolunteerChannel, workerIds: Iterable<string>, beforeHello: number): Record<VolunteerConnectionState, number> {
  const out = NO_ONE();
  out.hello = beforeHello;
  for (const id of workerIds) {
    const info = channel.workerInfo(id);
    if (info) out[info.state]++;
  }
  return out;
}

/** Waits for a condition the hub reaches a loopback hop after the client (a close it hears). */
async function until(what: string, ok: () => boolean): Promise<void> {
  const deadline = performance.now() + 2_000;
  while (!ok()) {
    if (performance.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const STEPS = 240;
const WALLETS = ['w0', 'w1', 'w2', 'w3'];
const WORKER_IDS = Array.from({ length: 12 }, (_, i) => `v${i}`);

test('countByState equals a walk of the connections after every step of a seeded run', async () => {
  const r = await rig();
  const random = mulberry32(30);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)] as T;
  /** Sockets open on the hub, said hello or not (a replaced one leaves this set once the hub closed it). */
  const open = new Set<Peer>();
  const said = (): Peer[] => [...open].filter((p) => p.workerId !== '' && !p.closed);
  const beforeHello = (): number => [...open].filter((p) => p.workerId === '').length;
  const assigns = (p: Peer): number[] => p.inbox.flatMap((m) => (m.type === 'assign' ? [m.assignmentId] : []));
  const seen = new Set<string>();
  const reached = new Set<string>();
  let credits = 0;
  try {
    for (let step = 0; step < STEPS; step++) {
      const roll = random();
      const live = said();
      let did: string;
      if (roll < 0.18 || open.size === 0) {
        open.add(await Peer.open(r.url));
        did = 'open';
      } else if (roll < 0.36 && beforeHello() > 0) {
        // A hello, sometimes under a worker id already connected (same wallet: a reconnect that replaces it).
        const p = pick([...open].filter((q) => q.workerId === ''));
        const free = WORKER_IDS.filter((id) => !live.some((q) => q.workerId === id));
        const again = live.length > 0 && (random() < 0.3 || free.length === 0) ? pick(live) : null;
        const workerId = again?.workerId ?? pick(free);
        const wallet = again?.wallet ?? pick(WALLETS);
        p.workerId = workerId;
        p.wallet = wallet;
        p.send(hello(wallet, workerId, random() < 0.3 ? 2 : 1));
        assert.ok(await p.next((m) => m.type === 'welcome'), `step ${step}: welcomed`);
        if (again) {
          await again.next(() => false); // its REPLACED close
          open.delete(again);
        }
        seen.add(workerId);
        did = again ? `reconnect ${workerId}` : `hello ${workerId}`;
      } else if (roll < 0.5 && live.some((p) => assigns(p).length > 0)) {
        const p = pick(live.filter((q) => assigns(q).length > 0));
        const id = pick(assigns(p));
        p.inbox.splice(
          p.inbox.findIndex((m) => m.type === 'assign' && m.assignmentId === id),
          1,
        );
        if (random() < 0.2) p.send({ type: 'load_failed', assignmentId: id, code: 'DOES_NOT_FIT', message: 'too big' });
        else p.send({ type: 'loaded', assignmentId: id, ready: random() < 0.85, backend: 'webgpu', gflops: 100 });
        await p.sync();
        did = `loaded/failed ${p.workerId}`;
      } else if (roll < 0.62 && live.length > 0) {
        const p = pick(live);
        p.send({ type: random() < 0.5 ? 'pause' : 'resume' });
        await p.sync();
        did = `pause/resume ${p.workerId}`;
      } else if (roll < 0.68 && live.length > 0) {
        const p = pick(live);
        r.channel.release(p.workerId, 'REBALANCE', 'test');
        await p.sync();
        did = `release ${p.workerId}`;
      } else if (roll < 0.74) {
        r.demand.on = !r.demand.on;
        r.channel.demandChanged();
        for (const p of live) await p.sync();
        did = `demand ${r.demand.on}`;
      } else if (roll < 0.8 && live.length > 0) {
        const p = pick(live);
        const total = ++credits;
        r.channel.credit(p.wallet, total);
        for (const q of said()) {
          await q.sync();
          const got = q.inbox.filter((m) => m.type === 'credit' && m.credit === total);
          assert.equal(
            got.length,
            q.wallet === p.wallet ? 1 : 0,
            `step ${step}: credit ${total} for ${p.wallet} at ${q.workerId} (${q.wallet})`,
          );
        }
        did = `credit ${p.wallet}`;
      } else if (roll < 0.86 && live.length > 0) {
        const p = pick(live);
        r.channel.disconnect(p.workerId, 'QUARANTINED', 'test');
        await p.next(() => false);
        open.delete(p);
        await until(`${p.workerId} gone`, () => r.channel.workerInfo(p.workerId) === undefined);
        did = `disconnect ${p.workerId}`;
      } else if (open.size > 0) {
        const p = pick([...open]);
        await p.close();
        open.delete(p);
        if (p.workerId) await until(`${p.workerId} gone`, () => r.channel.workerInfo(p.workerId) === undefined);
        // A socket that never said hello shows nowhere but in the count: the hub hears its close a hop after the client.
        else await until('the close heard', () => r.channel.countByState().hello === beforeHello());
        did = `close ${p.workerId || '(before hello)'}`;
      } else continue;
      const counts = r.channel.countByState();
      assert.deepEqual(counts, walk(r.channel, seen, beforeHello()), `step ${step}: ${did}`);
      for (const [state, n] of Object.entries(counts)) if (n > 0) reached.add(state);
    }
    assert.deepEqual([...reached].sort(), ['hello', 'loading', 'paused', 'serving', 'waiting'], 'every state was counted in');
    assert.ok(seen.size >= 6, `hellos under ${seen.size} worker ids`);
    // The hub stops: every connection closes (SHUTTING_DOWN) and is counted out.
    await r.channel.close();
    await until('every close heard', () => Object.values(r.channel.countByState()).every((n) => n === 0));
  } finally {
    await r.close();
  }
});

test('credit reaches exactly the wallet’s connections: after a reconnect under the same worker id, and after closes', async () => {
  const r = await rig(2);
  const peers: Peer[] = [];
  const join = async (wallet: string, workerId: string): Promise<Peer> => {
    const p = await Peer.open(r.url);
    p.workerId = workerId;
    p.wallet = wallet;
    p.send(hello(wallet, workerId, 1));
    assert.ok(await p.next((m) => m.type === 'welcome'));
    peers.push(p);
    return p;
  };
  /** The credit totals each peer got since the last look, by worker id (a closed peer: none). */
  const creditsNow = async (total: number): Promise<string[]> => {
    r.channel.credit('w1', total);
    const got: string[] = [];
    for (const p of peers) {
      await p.sync();
      if (p.inbox.some((m) => m.type === 'credit' && m.credit === total)) got.push(p.workerId + (p.closed ? ' (closed)' : ''));
    }
    return got.sort();
  };
  try {
    const a = await join('w1', 'a');
    await join('w1', 'b');
    await join('w2', 'c');
    assert.deepEqual(await creditsNow(1), ['a', 'b']);
    // `a` reconnects: the new connection is credited, the replaced one is closed and gets nothing.
    const a2 = await join('w1', 'a');
    await a.next(() => false);
    assert.equal(a.closed, true, 'the replaced connection closed');
    assert.deepEqual(await creditsNow(2), ['a', 'b']);
    assert.ok(a2.inbox.some((m) => m.type === 'credit' && m.credit === 2) && !a.inbox.some((m) => m.type === 'credit' && m.credit === 2));
    // `b` leaves: only `a` (the new one) is credited; then `a` too, and no one is.
    const b = peers[1] as Peer;
    await b.close();
    await until('b gone', () => r.channel.workerInfo('b') === undefined);
    assert.deepEqual(await creditsNow(3), ['a']);
    await a2.close();
    await until('a gone', () => r.channel.workerInfo('a') === undefined);
    assert.deepEqual(await creditsNow(4), []);
    // The wallet's index forgot them: two new hellos fit under its cap of 2 (the cap reads the same index).
    await join('w1', 'd');
    await join('w1', 'e');
    assert.deepEqual(await creditsNow(5), ['d', 'e']);
  } finally {
    await r.close();
  }
});
