/**
 * Slices passed between volunteers (docs/peers.md), without a browser: the chunk list's format and its binding to the
 * slice, the peer protocol's validation (a table of bad messages), the swarm's scheduling over an in-memory network
 * (peers first, the hub for the rest; a corrupting peer dropped and reported; a silent peer overtaken by the hub; the
 * upload cap and the pause), and the hub's directory (who is listed, a reported peer no longer).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import {
  buildChunkList,
  ChunkListError,
  chunkBytesFor,
  chunkMatches,
  CHUNK_BYTES_DEFAULT,
  MAX_CHUNKS,
  parseChunkList,
} from '../../protocol/chunk-list.ts';
import {
  decodePeerMessage,
  encodePeerMessage,
  PEER_HEADER_BYTES,
  PeerWireError,
  peekHelloDigest,
  PIECE_BYTES,
} from '../../protocol/peer-messages.ts';
import { SliceSwarm, type PeerLink, type PeerNetwork } from '../../volunteer/peers-swarm.ts';
import { UploadBudget } from '../../volunteer/peer-host.ts';
import { PeerDirectory, DEFAULT_PEERS } from '../../hub/peer-directory.ts';
import { encodeClientMessage, encodeHubMessage, parseClientMessage, parseHubMessage } from '../../protocol/channel/index.ts';
import { describeSource, shareChoice, shareLabel } from '../../web/src/volunteer/page-model.ts';

const KIB = 1024;

function slice(n: number, seed = 1): { bytes: Uint8Array; digest: string } {
  const bytes = new Uint8Array(n);
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    bytes[i] = x >>> 24;
  }
  return { bytes, digest: `sha256:${createHash('sha256').update(bytes).digest('hex')}` };
}

test('chunk list: encodes, parses back, and is bound to its slice (digest, size, shape)', async () => {
  const s = slice(100 * KIB + 7);
  const raw = await buildChunkList(s.bytes, s.digest, 16 * KIB);
  const list = parseChunkList(raw, { digest: s.digest, bytes: s.bytes.length });
  assert.equal(list.nChunks, 7);
  assert.equal(raw.length, 64 + 7 * 32);
  for (let i = 0; i < 7; i++)
    assert.ok(await chunkMatches(list, i, s.bytes.subarray(i * 16 * KIB, Math.min(s.bytes.length, (i + 1) * 16 * KIB))));
  const wrong = s.bytes.slice(0, 16 * KIB);
  wrong[5] = (wrong[5] as number) ^ 1;
  assert.equal(await chunkMatches(list, 0, wrong), false, 'a flipped bit fails its chunk');
  assert.equal(await chunkMatches(list, 6, s.bytes.subarray(0, 16)), false, 'a short chunk fails');

  const other = slice(100 * KIB + 7, 2);
  assert.throws(() => parseChunkList(raw, { digest: other.digest, bytes: s.bytes.length }), /describes sha256:/, 'another slice');
  assert.throws(() => parseChunkList(raw, { digest: s.digest, bytes: s.bytes.length + 1 }), /bytes, the slice is/, 'another size');
  const bad = (edit: (b: Uint8Array) => void, why: RegExp): void => {
    const b = raw.slice();
    edit(b);
    assert.throws(
      () => parseChunkList(b, { digest: s.digest, bytes: s.bytes.length }),
      (e: unknown) => e instanceof ChunkListError && why.test(e.message),
    );
  };
  bad((b) => (b[0] = 0), /magic/);
  bad((b) => (b[4] = 2), /version 2/);
  bad((b) => (b[60] = 1), /reserved/);
  bad((b) => new DataView(b.buffer).setUint32(8, 3000, true), /power of two/);
  bad((b) => new DataView(b.buffer).setUint32(12, 8, true), /does not cover/);
  assert.throws(() => parseChunkList(raw.subarray(0, raw.length - 1), { digest: s.digest, bytes: s.bytes.length }), /bytes, got/);

  assert.equal(chunkBytesFor(800e6), CHUNK_BYTES_DEFAULT, 'an 800 MB slice: 1 MiB chunks');
  assert.ok(Math.ceil(2 ** 40 / chunkBytesFor(2 ** 40)) <= MAX_CHUNKS, 'a 1 TiB slice: larger chunks, within the cap');
});

test('peer protocol: round trips, and a table of bad messages is refused with a reason', () => {
  const shape = { nChunks: 10, chunkBytes: 16 * KIB, totalBytes: 9 * 16 * KIB + 100 };
  const digest = new Uint8Array(32).fill(7);
  const have = new Uint8Array(2);
  have[0] = 0b101;
  const hello = encodePeerMessage({ kind: 'hello', nChunks: 10, chunkBytes: 16 * KIB, digest, have });
  const back = decodePeerMessage(hello, shape);
  assert.equal(back.kind, 'hello');
  assert.equal(peekHelloDigest(hello), `sha256:${'07'.repeat(32)}`);
  const piece = encodePeerMessage({ kind: 'piece', chunk: 9, offset: 0, data: new Uint8Array(100) });
  assert.deepEqual(decodePeerMessage(piece, shape), { kind: 'piece', chunk: 9, offset: 0, data: new Uint8Array(100) });
  assert.deepEqual(decodePeerMessage(encodePeerMessage({ kind: 'refuse', chunk: 3, reason: 'paused' }), shape), {
    kind: 'refuse',
    chunk: 3,
    reason: 'paused',
  });
  const at = (b: Uint8Array, o: number, v: number): Uint8Array => {
    const c = b.slice();
    c[o] = v;
    return c;
  };
  const table: Array<[string, Uint8Array, RegExp]> = [
    ['short', new Uint8Array(10), /shorter than its header/],
    ['bad magic', at(piece, 0, 0), /bad magic/],
    ['version', at(piece, 4, 9), /version 9/],
    ['kind', at(piece, 5, 42), /unknown message kind/],
    ['reserved', at(piece, 6, 1), /reserved/],
    ['chunk out of range', encodePeerMessage({ kind: 'request', chunk: 10 }), /not below 10/],
    [
      'piece past the short last chunk',
      encodePeerMessage({ kind: 'piece', chunk: 9, offset: 50, data: new Uint8Array(51) }),
      /not within chunk 9/,
    ],
    ['piece too large', new Uint8Array(PEER_HEADER_BYTES + PIECE_BYTES + 1), /exceeds/],
    ['hello of another shape', encodePeerMessage({ kind: 'hello', nChunks: 11, chunkBytes: 16 * KIB, digest, have }), /this slice is 10/],
    [
      'hello with spare bits',
      encodePeerMessage({ kind: 'hello', nChunks: 10, chunkBytes: 16 * KIB, digest, have: Uint8Array.of(0, 0b100) }),
      /spare/,
    ],
    ['request with a body', Uint8Array.from([...encodePeerMessage({ kind: 'request', chunk: 1 }), 0]), /carries no body/],
    ['refuse reason', at(encodePeerMessage({ kind: 'refuse', chunk: 1, reason: 'busy' }), 12, 9), /unknown reason/],
  ];
  for (const [name, bytes, why] of table) {
    assert.throws(
      () => decodePeerMessage(bytes, shape),
      (e: unknown) => e instanceof PeerWireError && why.test(e.message),
      name,
    );
  }
});

// --- an in-memory network: links deliver on the next turn of the event loop, in order

class MemLink implements PeerLink {
  onMessage: ((data: unknown) => void) | null = null;
  onClose: (() => void) | null = null;
  other: MemLink | null = null;
  closed = false;
  sent = 0;
  /** Changes what this end sends (a dishonest peer). */
  tamper: ((b: Uint8Array) => Uint8Array | null) | null = null;
  constructor(readonly peerId: string) {}
  get buffered(): number {
    return 0;
  }
  send(bytes: Uint8Array): void {
    if (this.closed) return;
    const out = this.tamper ? this.tamper(bytes.slice()) : bytes.slice();
    if (!out) return;
    this.sent += out.length;
    const to = this.other;
    setImmediate(() => {
      if (to && !to.closed) to.onMessage?.(out);
    });
  }
  close(): void {
    if (this.closed) return;
    this.closed = true;
    setImmediate(() => this.onClose?.());
    const o = this.other;
    if (o && !o.closed) o.close();
  }
}

class MemNet {
  readonly nodes = new Map<string, MemNode>();
  node(id: string): MemNode {
    const n = new MemNode(id, this);
    this.nodes.set(id, n);
    return n;
  }
}

class MemNode implements PeerNetwork {
  onIncoming: ((link: PeerLink) => void) | null = null;
  /** Links this node opened or accepted, by the other's id (the tests tamper through them). */
  readonly ends: MemLink[] = [];
  silent = false;
  constructor(
    readonly id: string,
    private readonly net: MemNet,
  ) {}
  async connect(peerId: string): Promise<PeerLink> {
    const there = this.net.nodes.get(peerId);
    if (!there) throw new Error(`no peer ${peerId}`);
    const mine = new MemLink(peerId);
    const theirs = new MemLink(this.id);
    mine.other = theirs;
    theirs.other = mine;
    this.ends.push(mine);
    there.ends.push(theirs);
    if (there.silent) theirs.tamper = () => null;
    setImmediate(() => there.onIncoming?.(theirs));
    return mine;
  }
  destroy(): void {}
}

/** A seeder on `net` holding the whole slice, routing incoming links to its swarm as PeerHost does. */
function seeder(
  net: MemNet,
  id: string,
  list: ReturnType<typeof parseChunkList>,
  bytes: Uint8Array,
  upload = new UploadBudget({ share: true, uploadCapBytesPerSec: Number.POSITIVE_INFINITY }),
): { node: MemNode; swarm: SliceSwarm } {
  const node = net.node(id);
  const swarm = SliceSwarm.complete({ list, network: node, upload }, bytes);
  node.onIncoming = (link) => {
    link.onMessage = (first) => {
      link.onMessage = null;
      swarm.adopt(link, first);
    };
  };
  return { node, swarm };
}

function hubOf(
  bytes: Uint8Array,
  delayMs = 0,
): { fetch: (a: number, b: number, s: AbortSignal) => Promise<Uint8Array>; served: () => number } {
  let served = 0;
  return {
    served: () => served,
    fetch: async (a, b, signal) => {
      if (delayMs) await new Promise((r) => setTimeout(r, delayMs));
      if (signal.aborted) throw new Error('aborted');
      served += b - a;
      return bytes.slice(a, b);
    },
  };
}

const unlimited = (): UploadBudget => new UploadBudget({ share: true, uploadCapBytesPerSec: Number.POSITIVE_INFINITY });
const fast = { graceMs: 300, takeoverMs: 400, pieceGapMs: 300, connectMs: 300 };

async function setup(
  size = 40 * 16 * KIB + 5,
): Promise<{ s: { bytes: Uint8Array; digest: string }; list: ReturnType<typeof parseChunkList> }> {
  const s = slice(size);
  const list = parseChunkList(await buildChunkList(s.bytes, s.digest, 16 * KIB), { digest: s.digest, bytes: s.bytes.length });
  return { s, list };
}

test('swarm: a newcomer takes every chunk from two holders, nothing from the hub, byte-identical', async () => {
  const { s, list } = await setup();
  const net = new MemNet();
  const a = seeder(net, 'pa', list, s.bytes);
  const b = seeder(net, 'pb', list, s.bytes);
  const me = new SliceSwarm({ list, network: net.node('pme'), upload: unlimited(), timing: fast });
  const hub = hubOf(s.bytes, 50);
  const got = await me.fetch({ peers: ['pa', 'pb'], hub: hub.fetch });
  assert.deepEqual(got.bytes, s.bytes);
  assert.equal(got.fromPeers, s.bytes.length);
  assert.equal(got.fromHub, 0);
  assert.ok(a.swarm.uploaded > 0 && b.swarm.uploaded > 0, `both holders served: ${a.swarm.uploaded} + ${b.swarm.uploaded}`);
  for (const x of [me, a.swarm, b.swarm]) x.close();
});

test('swarm: a chunk verified before a peer’s hello arrived is still announced to it', async () => {
  const { s, list } = await setup();
  const net = new MemNet();
  // A peer that takes our link, hears everything, and holds back its own hello until the test sends it.
  const them = net.node('pslow');
  let theirEnd: PeerLink | null = null;
  const heard: string[] = [];
  let digest = new Uint8Array(32);
  them.onIncoming = (link) => {
    theirEnd = link;
    link.onMessage = (data) => {
      const m = decodePeerMessage(data as Uint8Array, list);
      if (m.kind === 'hello') digest = m.digest.slice();
      heard.push(m.kind === 'have' ? `have ${m.chunk}` : m.kind);
    };
  };
  const me = new SliceSwarm({ list, network: net.node('pme2'), upload: unlimited(), timing: fast });
  const hub = hubOf(s.bytes);
  const got = me.fetch({ peers: ['pslow'], hub: hub.fetch });
  // No peer is ready, so after the grace the hub gives chunks; each is announced on the open link.
  for (let i = 0; i < 200 && !heard.some((h) => h.startsWith('have ')); i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(heard[0], 'hello', 'our hello first');
  assert.ok(
    heard.some((h) => h.startsWith('have ')),
    `announced while their hello was outstanding: ${heard.slice(0, 4).join(', ')}`,
  );
  (theirEnd as PeerLink | null)?.send(
    encodePeerMessage({
      kind: 'hello',
      nChunks: list.nChunks,
      chunkBytes: list.chunkBytes,
      digest,
      have: new Uint8Array(Math.ceil(list.nChunks / 8)),
    }),
  );
  assert.deepEqual((await got).bytes, s.bytes);
  // The hub may finish the slice before their hello is delivered (the links deliver on the next turn): the swarm goes
  // on serving once done, so the hello still lands; wait for it, bounded.
  for (let i = 0; i < 200 && me.peerCount.ready === 0; i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(me.peerCount.ready, 1, 'their late hello was taken: the link is ready, not dropped');
  me.close();
});

test('swarm: a peer that corrupts chunks is dropped and reported, the slice still completes correctly', async () => {
  const { s, list } = await setup();
  const net = new MemNet();
  const liar = seeder(net, 'pliar', list, s.bytes);
  const honest = seeder(net, 'phonest', list, s.bytes);
  // Every piece the liar sends has one byte flipped.
  const origConnect = liar.node.onIncoming;
  liar.node.onIncoming = (link) => {
    (link as MemLink).tamper = (b) => {
      if (b[5] === 4 && b.length > 20) b[20] = (b[20] as number) ^ 0xff;
      return b;
    };
    origConnect?.(link);
  };
  const reports: string[] = [];
  const me = new SliceSwarm({
    list,
    network: net.node('pme'),
    upload: unlimited(),
    timing: fast,
    onBadPeer: (id, code, chunk) => reports.push(`${id} ${code} ${chunk}`),
  });
  const got = await me.fetch({ peers: ['pliar', 'phonest'], hub: hubOf(s.bytes).fetch });
  assert.deepEqual(got.bytes, s.bytes, 'byte-identical despite the liar');
  assert.equal(reports.length, 1, `one report: ${reports.join('; ')}`);
  assert.match(reports[0] as string, /^pliar BAD_CHUNK \d+$/);
  assert.equal(me.peerCount.open, 1, 'the liar was dropped');
  for (const x of [me, liar.swarm, honest.swarm]) x.close();
});

test('swarm: no peer, an unreachable one, or a silent one: the hub gives the rest', async () => {
  const { s, list } = await setup();
  const net = new MemNet();
  const alone = new SliceSwarm({ list, network: net.node('p1'), upload: unlimited(), timing: fast });
  const hub = hubOf(s.bytes);
  const a = await alone.fetch({ peers: ['pnobody'], hub: hub.fetch });
  assert.deepEqual(a.bytes, s.bytes);
  assert.equal(a.fromHub, s.bytes.length);

  const mute = seeder(net, 'pmute', list, s.bytes);
  mute.node.silent = true;
  const me = new SliceSwarm({ list, network: net.node('p2'), upload: unlimited(), timing: fast });
  const t0 = Date.now();
  const b = await me.fetch({ peers: ['pmute'], hub: hubOf(s.bytes).fetch });
  assert.deepEqual(b.bytes, s.bytes);
  assert.equal(b.fromPeers, 0);
  assert.ok(Date.now() - t0 < 5_000, 'bounded waits');
  for (const x of [alone, me, mute.swarm]) x.close();
});

test('swarm: a holder that refuses every request as busy cannot stall the download: the hub gives those chunks', {
  timeout: 20_000,
}, async () => {
  const { s, list } = await setup();
  const net = new MemNet();
  const node = net.node('pbusy');
  const busy = SliceSwarm.complete({ list, network: node, upload: unlimited(), timing: { maxQueued: 0 } }, s.bytes);
  node.onIncoming = (link) => {
    link.onMessage = (first) => {
      link.onMessage = null;
      busy.adopt(link, first);
    };
  };
  const me = new SliceSwarm({ list, network: net.node('p3'), upload: unlimited(), timing: fast });
  const t0 = Date.now();
  const got = await me.fetch({ peers: ['pbusy'], hub: hubOf(s.bytes).fetch });
  assert.deepEqual(got.bytes, s.bytes);
  assert.equal(got.fromPeers, 0, 'a holder that is always busy sends nothing');
  assert.ok(Date.now() - t0 < 5_000, `bounded waits: ${Date.now() - t0} ms`);
  for (const x of [me, busy]) x.close();
});

test('swarm: the upload cap bounds a holder’s rate; a paused holder refuses and the hub gives the slice', async () => {
  const { s, list } = await setup(20 * 16 * KIB);
  const net = new MemNet();
  const capped = new UploadBudget({ share: true, uploadCapBytesPerSec: 640 * KIB });
  const holder = seeder(net, 'pcap', list, s.bytes, capped);
  const me = new SliceSwarm({
    list,
    network: net.node('pme'),
    upload: unlimited(),
    timing: { ...fast, takeoverMs: 60_000, pieceGapMs: 5_000 },
  });
  const t0 = Date.now();
  const got = await me.fetch({ peers: ['pcap'], hub: hubOf(s.bytes).fetch });
  const seconds = (Date.now() - t0) / 1000;
  assert.equal(got.fromPeers, s.bytes.length);
  // 320 KiB at 640 KiB/s with a quarter second banked: at least ~0.25 s.
  assert.ok(seconds >= 0.2, `capped: ${seconds.toFixed(2)} s for 320 KiB at 640 KiB/s`);
  assert.equal(capped.uploaded, s.bytes.length);

  const pausedBudget = new UploadBudget({ share: true, uploadCapBytesPerSec: Number.POSITIVE_INFINITY });
  pausedBudget.paused = true;
  const paused = seeder(net, 'ppaused', list, s.bytes, pausedBudget);
  const me2 = new SliceSwarm({ list, network: net.node('pme2'), upload: unlimited(), timing: fast });
  const got2 = await me2.fetch({ peers: ['ppaused'], hub: hubOf(s.bytes).fetch });
  assert.deepEqual(got2.bytes, s.bytes);
  assert.equal(got2.fromPeers, 0, 'a paused holder uploads nothing');
  assert.equal(pausedBudget.uploaded, 0);
  for (const x of [me, me2, holder.swarm, paused.swarm]) x.close();
});

test('swarm: a peer far slower than an idle hub is outpaced (the hub gives the rest); a busy hub or an older one is spared', async () => {
  const { s, list } = await setup(20 * 16 * KIB);
  const net = new MemNet();
  // A holder capped at 128 KiB/s (a relayed peer over a slow link): 320 KiB take it ~2.3 s; the hub sends a chunk in 5 ms.
  const holder = seeder(net, 'pslow', list, s.bytes, new UploadBudget({ share: true, uploadCapBytesPerSec: 128 * KIB }));
  const timing = { ...fast, takeoverMs: 60_000, pieceGapMs: 5_000 };
  const run = async (
    id: string,
    hubLoad: (() => number | null) | undefined,
  ): Promise<{ ms: number; fromPeers: number; fromHub: number }> => {
    // 2.3 s against the hub's ~0.1 s would pass over the peer only if the saving bound were under 2 s.
    const me = new SliceSwarm({ list, network: net.node(id), upload: unlimited(), timing, source: { minSavingMs: 500 } });
    const t0 = Date.now();
    const got = await me.fetch({ peers: ['pslow'], hub: hubOf(s.bytes, 5).fetch, ...(hubLoad ? { hubLoad } : {}) });
    assert.deepEqual(got.bytes, s.bytes, id);
    me.close();
    return { ms: Date.now() - t0, fromPeers: got.fromPeers, fromHub: got.fromHub };
  };
  const idle = await run('pidle', () => 0.02);
  assert.ok(idle.fromHub >= 15 * 16 * KIB, `idle hub: most chunks from it, ${idle.fromHub} B (peers ${idle.fromPeers} B)`);
  assert.ok(idle.ms < 1_500, `idle hub: the slice in ${idle.ms} ms, not the peer's ~2.3 s`);
  const busy = await run('pbusyhub', () => 0.5);
  assert.equal(busy.fromPeers, s.bytes.length, 'a busy hub is spared: every chunk from the peer');
  assert.equal(busy.fromHub, 0);
  const older = await run('polder', undefined);
  assert.equal(older.fromPeers, s.bytes.length, 'no load hint (an older hub): every chunk from the peer');
  holder.swarm.close();
});

test('swarm: a peer too slow to finish a chunk before the idle hub takes it over is measured by what it sent, and outpaced', async () => {
  const { s, list } = await setup(20 * 16 * KIB);
  const net = new MemNet();
  // 8 KiB/s: a 16 KiB chunk takes it ~2 s; the hub takes a chunk over after 300 ms (minTakeoverMs), in 5 ms.
  const holder = seeder(net, 'pcrawl', list, s.bytes, new UploadBudget({ share: true, uploadCapBytesPerSec: 8 * KIB }));
  const me = new SliceSwarm({
    list,
    network: net.node('pme'),
    upload: unlimited(),
    timing: { ...fast, takeoverMs: 60_000, pieceGapMs: 5_000 },
    source: { minSavingMs: 500, minTakeoverMs: 300 },
  });
  const t0 = Date.now();
  const got = await me.fetch({ peers: ['pcrawl'], hub: hubOf(s.bytes, 5).fetch, hubLoad: () => 0 });
  const ms = Date.now() - t0;
  assert.deepEqual(got.bytes, s.bytes);
  // Asked again for every chunk, each taken over after 300 ms with one hub lane beside it, it would take ~3 s.
  assert.ok(ms < 1_500, `outpaced after its first chunk was taken over: ${ms} ms`);
  assert.ok(got.fromHub >= 18 * 16 * KIB, `the hub gave the slice: ${got.fromHub} B, peers ${got.fromPeers} B`);
  for (const x of [me, holder.swarm]) x.close();
});

test('swarm: three newcomers at once with one hub share chunks among themselves (the hub sends under 2 slices of bytes for the 3)', async () => {
  const { s, list } = await setup(64 * 16 * KIB);
  const net = new MemNet();
  const hub = hubOf(s.bytes, 5);
  const nodes = ['pa', 'pb', 'pc'].map((id) => ({ id, node: net.node(id) }));
  const swarms = nodes.map(({ node }) => new SliceSwarm({ list, network: node, upload: unlimited(), timing: { ...fast, graceMs: 50 } }));
  for (const [i, { node }] of nodes.entries()) {
    node.onIncoming = (link) => {
      link.onMessage = (first) => {
        link.onMessage = null;
        swarms[i]?.adopt(link, first);
      };
    };
  }
  const results = await Promise.all(swarms.map((sw, i) => sw.fetch({ peers: nodes.slice(0, i).map((n) => n.id), hub: hub.fetch })));
  for (const r of results) assert.deepEqual(r.bytes, s.bytes);
  const fromPeers = results.reduce((a, r) => a + r.fromPeers, 0);
  assert.ok(hub.served() < 2 * s.bytes.length, `hub egress ${hub.served()} for 3 × ${s.bytes.length}; from peers ${fromPeers}`);
  for (const x of swarms) x.close();
});

test('hub directory: lists holders first, not paused or reported ones, and counts bytes per slice', () => {
  let now = 1000;
  const d = new PeerDirectory(
    { ...DEFAULT_PEERS },
    () => now,
    () => 0.5,
  );
  const key = { model: 'm', layer: 1, experts: [0, 8] as [number, number], digest: `sha256:${'a'.repeat(64)}`, bytes: 1000 };
  const grants = ['w1', 'w2', 'w3', 'w4'].map((w) => d.welcome(w, `wallet-${w}`));
  assert.ok(grants.every((g) => g && /^p[0-9a-f]{32}$/.test(g.id)));
  assert.ok(d.verify(grants[0]!.id, grants[0]!.token));
  assert.ok(!d.verify(grants[0]!.id, grants[1]!.token), 'another token');
  assert.deepEqual(d.assigning('w1', key), [], 'the first has nobody to ask');
  d.loaded('w1', key.digest, 0, 1000);
  assert.deepEqual(d.assigning('w2', key), [grants[0]!.id]);
  assert.deepEqual(d.assigning('w3', key), [grants[0]!.id, grants[1]!.id], 'holders first, then those fetching');
  d.loaded('w2', key.digest, 900, 100);
  d.paused('w1', true);
  assert.deepEqual(d.assigning('w4', key), [grants[1]!.id, grants[2]!.id], 'a paused holder is not listed');
  d.paused('w1', false);
  // w4 reports w2; a second report of the same pair, or of a peer of another slice, is ignored.
  const r = { type: 'peer_report' as const, assignmentId: 1, peerId: grants[1]!.id, code: 'BAD_CHUNK' as const, chunk: 3, detail: '' };
  assert.match(d.report('w4', key.digest, r) ?? '', /w4 reported peer w2 \(BAD_CHUNK, chunk 3\)/);
  assert.equal(d.report('w4', key.digest, r), null);
  assert.ok(d.isBannedWorker('w2'));
  d.welcome('w5', 'wallet-w5');
  assert.ok(!d.assigning('w5', key).includes(grants[1]!.id), 'a reported peer is not listed');
  now += DEFAULT_PEERS.banMs + 1;
  d.welcome('w6', 'wallet-w6');
  assert.ok(d.assigning('w6', key).includes(grants[1]!.id), 'listed again after the ban');
  const [t] = d.slices();
  assert.deepEqual(
    { loads: t?.loads, fromPeers: t?.fromPeers, fromHub: t?.fromHub, holders: t?.holders, badPeers: t?.badPeers },
    { loads: 2, fromPeers: 900, fromHub: 1100, holders: 2, badPeers: 1 },
  );
  d.gone('w1');
  assert.ok(!d.verify(grants[0]!.id, grants[0]!.token), 'a closed connection’s id is revoked');
  assert.equal(d.slices()[0]?.holders, 1);
  // A peer reported after it left (a liar that disconnects at once) is still not listed when it comes back.
  d.gone('w3');
  assert.match(d.report('w4', key.digest, { ...r, peerId: grants[2]!.id }) ?? '', /reported peer w3/);
  const back = d.welcome('w3', 'wallet-w3');
  d.assigning('w3', key);
  d.welcome('w7', 'wallet-w7');
  assert.ok(!d.assigning('w7', key).includes(back!.id), 'its worker id stays banned');
});

test('hub directory: a volunteer holding several slices is listed for each, and drops one alone', () => {
  const d = new PeerDirectory(
    { ...DEFAULT_PEERS },
    () => 1000,
    () => 0.5,
  );
  const slice = (layer: number, c: string) => ({
    model: 'm',
    layer,
    experts: [0, 8] as [number, number],
    digest: `sha256:${c.repeat(64)}`,
    bytes: 1000,
  });
  const [a, b] = [slice(0, 'a'), slice(1, 'b')];
  const [g1] = ['w1', 'w2'].map((w) => d.welcome(w, `wallet-${w}`));
  d.assigning('w1', a);
  d.assigning('w1', b);
  d.loaded('w1', a.digest, 0, 1000);
  d.loaded('w1', b.digest, 0, 1000);
  assert.deepEqual(d.assigning('w2', a), [g1!.id], 'a holder of layer 0');
  d.dropped('w2', a.digest);
  assert.deepEqual(d.assigning('w2', b), [g1!.id], 'and of layer 1');
  d.dropped('w1', a.digest);
  d.welcome('w3', 'wallet-w3');
  assert.deepEqual(d.assigning('w3', a), [], 'w1 no longer holds layer 0');
  assert.deepEqual(d.assigning('w3', b).includes(g1!.id), true, 'but still layer 1');
  // a report counts only for the slice the reporter fetched from that peer
  const r = { type: 'peer_report' as const, assignmentId: 1, peerId: g1!.id, code: 'BAD_CHUNK' as const, chunk: 0, detail: '' };
  assert.equal(d.report('w3', a.digest, r), null, 'w1 holds nothing of layer 0 now');
  assert.match(d.report('w3', b.digest, r) ?? '', /w3 reported peer w1/);
  const byDigest = new Map(d.slices().map((t) => [t.digest, t.holders]));
  assert.deepEqual([byDigest.get(a.digest), byDigest.get(b.digest)], [0, 1]);
});

test('channel wire: the optional peer fields round-trip, and a bad peer id is refused', () => {
  const welcome = {
    type: 'welcome' as const,
    version: 1,
    workerId: 'w',
    heartbeatMs: 1000,
    idleTimeoutMs: 3000,
    encoding: 'f32' as const,
    credit: 0,
    peer: { path: '/api/peers', key: 'expertswarm', id: 'p0123', token: 'abc' },
  };
  assert.deepEqual(parseHubMessage(encodeHubMessage(welcome)), welcome);
  const assign = {
    type: 'assign' as const,
    assignmentId: 1,
    model: 'm',
    layer: 0,
    experts: [0, 8] as [number, number],
    nEmbd: 64,
    nExpert: 8,
    numerics: 'llama' as const,
    shardUrl: '/api/expert-shard?model=m',
    shardBytes: 10,
    shardDigest: `sha256:${'0'.repeat(64)}`,
    peers: ['pa', 'pb'],
    chunksUrl: '/api/expert-shard/chunks?model=m',
  };
  assert.deepEqual(parseHubMessage(encodeHubMessage(assign)), assign);
  assert.throws(() => parseHubMessage(JSON.stringify({ ...JSON.parse(encodeHubMessage(assign)), peers: ['p a'] })), /not a peer id/);
  assert.throws(
    () => parseHubMessage(JSON.stringify({ ...JSON.parse(encodeHubMessage(assign)), peers: Array(17).fill('p') })),
    /cap is 16/,
  );
  const report = { type: 'peer_report' as const, assignmentId: 3, peerId: 'pa', code: 'BAD_CHUNK' as const, chunk: 4, detail: 'hash' };
  assert.deepEqual(parseClientMessage(encodeClientMessage(report)), report);
  const loaded = { type: 'loaded' as const, assignmentId: 3, ready: true, backend: 'wasm' as const, gflops: 1, peerBytes: 10, hubBytes: 2 };
  assert.deepEqual(parseClientMessage(encodeClientMessage(loaded)), loaded);
});

test('the page: the share control maps to an upload cap, and the slice source reads as a sentence', () => {
  assert.deepEqual(shareChoice(4), { share: true, uploadCapBytesPerSec: 4 * 1024 * 1024 });
  assert.deepEqual(shareChoice(0), { share: false, uploadCapBytesPerSec: 0 });
  assert.deepEqual(shareChoice(3), shareChoice(4), 'a value the control does not offer falls back to the default');
  assert.equal(shareLabel(0), 'Do not share');
  assert.equal(shareLabel(16), 'Share, up to 16 MiB/s');
  const MIB = 1024 * 1024;
  assert.equal(describeSource({ fromPeers: 0, fromHub: 0, uploaded: 0 }), 'from this browser’s cache');
  assert.equal(describeSource({ fromPeers: 0, fromHub: 3 * MIB, uploaded: 0 }), 'all from the hub (3 MiB)');
  assert.equal(describeSource({ fromPeers: 3 * MIB, fromHub: MIB, uploaded: 0 }), '75% from other volunteers (3 MiB of 4 MiB)');
});
