/**
 * One slice shared between volunteers (docs/peers.md): a SliceSwarm fetches the slice's chunks from several peers at
 * once and from the hub (HTTP `Range`), checks each chunk against the slice's hash list before keeping it, and serves
 * the chunks it holds to peers that ask, within the upload budget the volunteer set. Browser-safe; the transport is a
 * PeerNetwork (PeerJS data channels in browsers, volunteer/peers-peerjs.ts; an in-memory one in tests).
 *
 *   const swarm = new SliceSwarm({ list, network, upload, onBadPeer });
 *   const { bytes, fromPeers, fromHub } = await swarm.fetch({ peers: assign.peers, hub: (from, to, s) => range(from, to, s) });
 *   // … then it serves what it holds until swarm.close()
 *
 * Scheduling: each ready peer gets up to `perPeer` requests, rarest chunk first among those it holds (ties random).
 * The hub gets the chunks no ready peer holds, `hubLanesAlone` at a time while no peer is ready (after `graceMs` for
 * the listed ones to connect), `hubLanesWithPeers` once one is; and any chunk a peer has kept in flight for
 * `takeoverMs` is fetched from the hub too (the first copy that verifies wins). While the hub says it is idle
 * (FetchOptions.hubLoad), speed may win (source-choice.ts): one chunk measures the hub, a peer far slower than it gets
 * no new requests, and a peer's chunk is taken over after twice the hub's time for it. A request with no piece for
 * `pieceGapMs` is given up and counts against the peer (dropped after `maxStrikes`). A chunk that fails its hash, or a
 * malformed message, drops the peer at once and is reported (`onBadPeer`). Every wait is bounded; the hub can always
 * give the rest, so a fetch ends unless the hub itself fails.
 */
import { chunkMatches, chunkRange, type ChunkList } from '../protocol/chunk-list.ts';
import {
  DEFAULT_SOURCE_POLICY,
  type HubView,
  type SourcePolicy,
  hubIdle,
  nextMsPerByte,
  peerOutpaced,
  takeoverAfterMs,
} from './source-choice.ts';
import {
  type PeerMessage,
  bitfieldBytes,
  decodePeerMessage,
  encodePeerMessage,
  hasBit,
  messageBytes,
  PeerWireError,
  PIECE_BYTES,
  setBit,
} from '../protocol/peer-messages.ts';

/** One open data channel to another volunteer. */
export interface PeerLink {
  /** The other end's peer id (set by the signalling server, not by the peer). */
  readonly peerId: string;
  /** Bytes handed to the transport and not yet sent. */
  readonly buffered: number;
  send(bytes: Uint8Array): void;
  close(): void;
  onMessage: ((data: unknown) => void) | null;
  onClose: (() => void) | null;
}

/** Where links come from: dialled by id, or arriving. */
export interface PeerNetwork {
  /** Resolves with an open link, rejects on failure or after `timeoutMs`. */
  connect(peerId: string, timeoutMs: number): Promise<PeerLink>;
  onIncoming: ((link: PeerLink) => void) | null;
  destroy(): void;
}

/** What a volunteer allows itself to upload: shared by every slice it serves. */
export interface UploadPolicy {
  /** Consented, not paused, a cap above 0. */
  sharing(): boolean;
  /** Takes `n` bytes of budget: 0 when it may send now, else ms to wait before asking again. */
  take(n: number): number;
  /** Bytes it uploaded. */
  sent(n: number): void;
}

export type BadPeerCode = 'BAD_CHUNK' | 'BAD_MESSAGE';

export interface SwarmTiming {
  graceMs: number;
  takeoverMs: number;
  pieceGapMs: number;
  connectMs: number;
  perPeer: number;
  hubLanesAlone: number;
  hubLanesWithPeers: number;
  maxLinks: number;
  maxStrikes: number;
  /** Requests a peer may queue with us. */
  maxQueued: number;
}

export const DEFAULT_SWARM_TIMING: Readonly<SwarmTiming> = Object.freeze({
  graceMs: 2_000,
  takeoverMs: 8_000,
  pieceGapMs: 5_000,
  connectMs: 6_000,
  perPeer: 2,
  hubLanesAlone: 2,
  hubLanesWithPeers: 1,
  maxLinks: 8,
  maxStrikes: 2,
  maxQueued: 4,
});

/** Bytes of a link's transport queue above which no more pieces are handed to it. */
const HIGH_WATER = 256 * 1024;
/** A chunk taken over before its peer sent this much counts as this much sent (its rate then reads optimistic). */
const MIN_RATE_BYTES = 16 * 1024;
const TICK_MS = 200;

export interface SwarmOptions {
  list: ChunkList;
  network: PeerNetwork;
  upload: UploadPolicy;
  onBadPeer?: (peerId: string, code: BadPeerCode, chunk: number | null, detail: string) => void;
  timing?: Partial<SwarmTiming>;
  /** When speed may win over sparing the hub (source-choice.ts). */
  source?: Partial<SourcePolicy>;
  now?: () => number;
  random?: () => number;
}

export interface FetchOptions {
  /** Peer ids the hub listed (holders first). */
  peers: readonly string[];
  /** Bytes [from, to) of the slice from the hub; rejects on failure. */
  hub: (from: number, to: number, signal: AbortSignal) => Promise<Uint8Array>;
  onProgress?: (haveBytes: number, totalBytes: number) => void;
  signal?: AbortSignal;
  /** The hub's last shard-load hint (0..1), or null: none, or an older hub (source-choice.ts). */
  hubLoad?: () => number | null;
}

export interface FetchResult {
  bytes: Uint8Array;
  /** Bytes of chunks taken from peers (each verified), and bytes received from the hub. */
  fromPeers: number;
  fromHub: number;
}

interface Wanted {
  chunk: number;
  startedMs: number;
  /** When the peer could start sending it: the request, or the end of the chunk it sent before (its rate's clock). */
  waitFromMs: number;
  lastPieceMs: number;
  buf: Uint8Array;
  got: number;
}

interface Link {
  link: PeerLink;
  ready: boolean;
  theirs: Uint8Array;
  /** Our requests to them, by chunk. */
  wanted: Map<number, Wanted>;
  /** Chunks we cancelled: their pieces may still be on the way and are dropped quietly. */
  cancelled: Set<number>;
  /** Their requests to us, oldest first; `upload` is the one being sent. */
  queue: number[];
  upload: { chunk: number; offset: number } | null;
  strikes: number;
  /** Milliseconds per byte of its whole chunks (moving average), or null before the first. */
  msPerByte: number | null;
}

export class SwarmError extends Error {
  override readonly name = 'SwarmError';
}

export class SliceSwarm {
  readonly list: ChunkList;
  readonly bytes: Uint8Array;
  private readonly have: Uint8Array;
  private haveCount = 0;
  private readonly links = new Map<PeerLink, Link>();
  private readonly dropped = new Set<string>();
  private readonly dialling = new Set<string>();
  /** Chunks being fetched from the hub, with their abort. */
  private readonly fromHubNow = new Map<number, AbortController>();
  /** Chunks received whole and being hashed. */
  private readonly verifying = new Set<number>();
  private readonly timing: SwarmTiming;
  private readonly source: SourcePolicy;
  /** Milliseconds per byte of the hub's ranges (moving average over whole chunks), or null before the first. */
  private hubMsPerByte: number | null = null;
  private readonly now: () => number;
  private readonly random: () => number;
  private fetching: {
    opts: FetchOptions;
    startedMs: number;
    resolve: (r: FetchResult) => void;
    reject: (e: unknown) => void;
    fromPeers: number;
    fromHub: number;
    hubFailures: number;
  } | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private uploadTimer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private rotate = 0;
  /** Bytes uploaded from this slice. */
  uploaded = 0;

  /** `held`: the whole slice already in hand (complete()); it is served as it is, never copied. */
  constructor(
    private readonly o: SwarmOptions,
    held?: Uint8Array,
  ) {
    this.list = o.list;
    this.bytes = held ?? new Uint8Array(o.list.totalBytes);
    this.have = new Uint8Array(bitfieldBytes(o.list.nChunks));
    this.timing = { ...DEFAULT_SWARM_TIMING, ...o.timing };
    this.source = { ...DEFAULT_SOURCE_POLICY, ...o.source };
    this.now = o.now ?? (() => Date.now());
    this.random = o.random ?? Math.random;
  }

  /** A swarm that already holds the whole slice (from the cache, or just fetched some other way): it only serves. */
  static complete(o: SwarmOptions, bytes: Uint8Array): SliceSwarm {
    if (bytes.length !== o.list.totalBytes) throw new SwarmError(`the slice has ${bytes.length} bytes, its list ${o.list.totalBytes}`);
    const s = new SliceSwarm(o, bytes);
    for (let i = 0; i < o.list.nChunks; i++) setBit(s.have, i);
    s.haveCount = o.list.nChunks;
    return s;
  }

  get done(): boolean {
    return this.haveCount === this.list.nChunks;
  }

  /** Links open now, and how many of them completed the hello. */
  get peerCount(): { open: number; ready: number } {
    let ready = 0;
    for (const l of this.links.values()) if (l.ready) ready++;
    return { open: this.links.size, ready };
  }

  /** Fetches every chunk not held yet; once done, the swarm goes on serving. One fetch at a time. */
  fetch(opts: FetchOptions): Promise<FetchResult> {
    if (this.fetching) return Promise.reject(new SwarmError('a fetch is already running'));
    if (this.closed) return Promise.reject(new SwarmError('the swarm is closed'));
    if (this.done) return Promise.resolve({ bytes: this.bytes, fromPeers: 0, fromHub: 0 });
    if (opts.signal?.aborted) return Promise.reject(new SwarmError('the fetch was cancelled'));
    return new Promise<FetchResult>((resolve, reject) => {
      this.fetching = { opts, startedMs: this.now(), resolve, reject, fromPeers: 0, fromHub: 0, hubFailures: 0 };
      opts.signal?.addEventListener('abort', () => this.finish(new SwarmError('the fetch was cancelled')), { once: true });
      for (const id of opts.peers.slice(0, this.timing.maxLinks)) this.dial(id);
      this.timer = setInterval(() => this.pump(), TICK_MS);
      this.pump();
    });
  }

  /**
   * A link another volunteer opened to us for this slice, with the first message it sent (its hello, which named this
   * slice's digest: peekHelloDigest).
   */
  adopt(link: PeerLink, first?: unknown): void {
    if (this.closed || this.links.size >= this.timing.maxLinks * 2 || this.dropped.has(link.peerId)) {
      link.close();
      return;
    }
    this.attach(link);
    if (first !== undefined) link.onMessage?.(first);
  }

  /** Stops fetching and serving; closes every link. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.finish(new SwarmError('the swarm closed'));
    for (const l of [...this.links.keys()]) l.close();
    this.links.clear();
    if (this.uploadTimer) clearTimeout(this.uploadTimer);
    this.uploadTimer = null;
  }

  /** The volunteer paused or stopped sharing: queued requests are refused; resume() lets peers ask again. */
  refuseAll(): void {
    for (const l of this.links.values()) {
      for (const c of l.queue) this.send(l, { kind: 'refuse', chunk: c, reason: 'paused' });
      if (l.upload) this.send(l, { kind: 'refuse', chunk: l.upload.chunk, reason: 'paused' });
      l.queue = [];
      l.upload = null;
    }
  }

  // --- links

  private dial(peerId: string): void {
    if (this.dialling.has(peerId) || this.dropped.has(peerId) || [...this.links.keys()].some((l) => l.peerId === peerId)) return;
    this.dialling.add(peerId);
    this.o.network
      .connect(peerId, this.timing.connectMs)
      .then((link) => {
        this.dialling.delete(peerId);
        if (this.closed || this.dropped.has(peerId)) {
          link.close();
          return;
        }
        this.attach(link);
      })
      .catch(() => {
        this.dialling.delete(peerId);
        this.pump();
      });
  }

  private attach(link: PeerLink): void {
    const l: Link = {
      link,
      ready: false,
      theirs: new Uint8Array(bitfieldBytes(this.list.nChunks)),
      wanted: new Map(),
      cancelled: new Set(),
      queue: [],
      upload: null,
      strikes: 0,
      msPerByte: null,
    };
    this.links.set(link, l);
    link.onClose = () => this.detach(l);
    link.onMessage = (data) => {
      let m: PeerMessage;
      try {
        m = decodePeerMessage(messageBytes(data), this.list);
      } catch (e) {
        this.bad(l, 'BAD_MESSAGE', null, e instanceof Error ? e.message : String(e));
        return;
      }
      this.onMessage(l, m);
    };
    this.send(l, {
      kind: 'hello',
      nChunks: this.list.nChunks,
      chunkBytes: this.list.chunkBytes,
      digest: digestBytes(this.list),
      have: this.have.slice(),
    });
  }

  private detach(l: Link): void {
    if (!this.links.delete(l.link)) return;
    l.link.onMessage = null;
    l.link.onClose = null;
    l.link.close();
    l.wanted.clear();
    this.pump();
  }

  /** Drops a peer that misbehaved and tells the hub. */
  private bad(l: Link, code: BadPeerCode, chunk: number | null, detail: string): void {
    if (this.dropped.has(l.link.peerId)) return;
    this.dropped.add(l.link.peerId);
    this.detach(l);
    this.o.onBadPeer?.(l.link.peerId, code, chunk, detail.slice(0, 200));
  }

  private send(l: Link, m: PeerMessage): void {
    try {
      l.link.send(encodePeerMessage(m));
    } catch {
      this.detach(l);
    }
  }

  private onMessage(l: Link, m: PeerMessage): void {
    if (!this.links.has(l.link)) return;
    if (m.kind === 'hello') {
      if (l.ready) {
        this.bad(l, 'BAD_MESSAGE', null, 'a second hello');
        return;
      }
      if (!sameBytes(m.digest, digestBytes(this.list))) {
        this.bad(l, 'BAD_MESSAGE', null, 'hello for another slice');
        return;
      }
      l.ready = true;
      l.theirs = m.have;
      this.pump();
      return;
    }
    if (!l.ready) {
      this.bad(l, 'BAD_MESSAGE', null, `${m.kind} before hello`);
      return;
    }
    switch (m.kind) {
      case 'have':
        setBit(l.theirs, m.chunk);
        this.pumpSoon(); // one scheduling pass for a burst of them, not one per message
        return;
      case 'request':
        this.onRequest(l, m.chunk);
        return;
      case 'cancel':
        l.queue = l.queue.filter((c) => c !== m.chunk);
        if (l.upload?.chunk === m.chunk) l.upload = null;
        return;
      case 'refuse': {
        if (!l.wanted.delete(m.chunk)) return;
        // It lost the chunk, paused or is busy: ask others. A chunk refused is never asked of this link again and no
        // longer counts as held by it (so the hub takes it if no one else holds it): a peer that claims every chunk
        // and refuses each cannot stall the download. A claim to a chunk it does not have counts a strike too.
        l.cancelled.add(m.chunk);
        if (m.reason === 'missing') l.strikes++;
        if (m.reason === 'paused') l.theirs.fill(0);
        if (l.strikes >= this.timing.maxStrikes) this.detach(l);
        this.pump();
        return;
      }
      case 'piece':
        this.onPiece(l, m.chunk, m.offset, m.data);
        return;
    }
  }

  // --- fetching

  private onPiece(l: Link, chunk: number, offset: number, data: Uint8Array): void {
    const w = l.wanted.get(chunk);
    if (!w) {
      if (l.cancelled.has(chunk) || hasBit(this.have, chunk)) return; // a piece already on its way when we cancelled
      this.bad(l, 'BAD_MESSAGE', chunk, `a piece of chunk ${chunk}, which was not requested`);
      return;
    }
    if (offset !== w.got) {
      this.bad(l, 'BAD_MESSAGE', chunk, `a piece at ${offset} of chunk ${chunk}, expected ${w.got}`);
      return;
    }
    w.buf.set(data, offset);
    w.got += data.length;
    w.lastPieceMs = this.now();
    if (w.got < w.buf.length) return;
    l.wanted.delete(chunk);
    l.msPerByte = nextMsPerByte(l.msPerByte, w.lastPieceMs - w.waitFromMs, w.buf.length);
    // A peer sends one chunk at a time, in the order asked: the next one's wait for its first piece starts now.
    for (const next of l.wanted.values()) {
      next.lastPieceMs = w.lastPieceMs;
      next.waitFromMs = w.lastPieceMs;
    }
    this.received(chunk, w.buf, l);
  }

  /** A whole chunk arrived from a peer (`from`) or the hub (`from` null): verify, keep, announce. */
  private received(chunk: number, buf: Uint8Array, from: Link | null): void {
    if (hasBit(this.have, chunk) || this.verifying.has(chunk)) {
      this.pump();
      return;
    }
    this.verifying.add(chunk);
    void chunkMatches(this.list, chunk, buf).then((ok) => {
      this.verifying.delete(chunk);
      if (this.closed) return;
      if (!ok) {
        if (from) this.bad(from, 'BAD_CHUNK', chunk, `chunk ${chunk} does not match its sha256 in the slice's list`);
        else this.finish(new SwarmError(`chunk ${chunk} from the hub does not match its sha256 in the slice's list`));
        this.pump();
        return;
      }
      if (!hasBit(this.have, chunk)) {
        const [a] = chunkRange(this.list, chunk);
        this.bytes.set(buf, a);
        setBit(this.have, chunk);
        this.haveCount++;
        if (from && this.fetching) this.fetching.fromPeers += buf.length;
        this.fromHubNow.get(chunk)?.abort();
        const t = this.now();
        for (const l of this.links.values()) {
          const w = l.wanted.get(chunk);
          if (w) {
            // The chunk the peer is sending now: the first asked of those still wanted (it sends them in order).
            const sending = l.wanted.keys().next().value === chunk;
            l.wanted.delete(chunk);
            // The hub won a chunk the peer was sending: what it sent meanwhile is its rate so far (so a peer too slow
            // to finish any chunk before the hub takes it over is measured too).
            if (!from && sending) l.msPerByte = nextMsPerByte(l.msPerByte, t - w.waitFromMs, Math.max(w.got, MIN_RATE_BYTES));
            l.cancelled.add(chunk);
            this.send(l, { kind: 'cancel', chunk });
          }
          // To every link, ready or not: ours sent its hello when it opened (the bitfield then), and the channel is
          // ordered, so a peer whose hello we still wait for learns of chunks verified since.
          this.send(l, { kind: 'have', chunk });
        }
        this.fetching?.opts.onProgress?.(this.haveBytes(), this.list.totalBytes);
      }
      if (this.done) this.finish(null);
      else this.pump();
    });
  }

  private haveBytes(): number {
    let n = 0;
    for (let i = 0; i < this.list.nChunks; i++) if (hasBit(this.have, i)) n += chunkRange(this.list, i)[1] - chunkRange(this.list, i)[0];
    return n;
  }

  private finish(error: SwarmError | null): void {
    const f = this.fetching;
    if (!f) return;
    this.fetching = null;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    for (const a of this.fromHubNow.values()) a.abort();
    this.fromHubNow.clear();
    for (const l of this.links.values()) {
      for (const c of l.wanted.keys()) {
        l.cancelled.add(c);
        this.send(l, { kind: 'cancel', chunk: c });
      }
      l.wanted.clear();
    }
    if (error) f.reject(error);
    else f.resolve({ bytes: this.bytes, fromPeers: f.fromPeers, fromHub: f.fromHub });
  }

  /** Chunks neither held, being verified, nor asked of anyone. */
  private isFree(c: number): boolean {
    if (hasBit(this.have, c) || this.verifying.has(c) || this.fromHubNow.has(c)) return false;
    for (const l of this.links.values()) if (l.wanted.has(c)) return false;
    return true;
  }

  private pumpQueued = false;

  private pumpSoon(): void {
    if (this.pumpQueued) return;
    this.pumpQueued = true;
    setTimeout(() => {
      this.pumpQueued = false;
      this.pump();
    }, 0);
  }

  private pump(): void {
    const f = this.fetching;
    if (!f || this.closed) return;
    const t = this.now();
    const ready = [...this.links.values()].filter((l) => l.ready);
    // Requests that stopped moving are given up.
    for (const l of ready) {
      for (const w of [...l.wanted.values()]) {
        if (t - w.lastPieceMs > this.timing.pieceGapMs) {
          l.wanted.delete(w.chunk);
          l.cancelled.add(w.chunk);
          this.send(l, { kind: 'cancel', chunk: w.chunk });
          l.strikes++;
        }
      }
      if (l.strikes >= this.timing.maxStrikes) this.detach(l);
    }
    const usable = ready.filter((l) => this.links.has(l.link));
    // While the hub is idle and measured, a peer far slower than it gets no new requests (source-choice.ts); the
    // chunks only such peers hold count as held by nobody, for the hub to take.
    const hub: HubView = { load: f.opts.hubLoad?.() ?? null, msPerByte: this.hubMsPerByte };
    const remaining = this.list.totalBytes - this.haveBytes();
    const asking = usable.filter((l) => !peerOutpaced(l.msPerByte, hub, remaining, this.source));
    // Peers: rarest chunk first among those each holds.
    const n = this.list.nChunks;
    const rarity = new Uint16Array(n);
    for (const l of asking) {
      for (let c = 0; c < n; c++) if (hasBit(l.theirs, c) && !l.cancelled.has(c)) rarity[c] = (rarity[c] as number) + 1;
    }
    const order = shuffled(n, this.random);
    order.sort((a, b) => (rarity[a] as number) - (rarity[b] as number));
    for (const l of asking.sort(() => this.random() - 0.5)) {
      for (const c of order) {
        if (l.wanted.size >= this.timing.perPeer) break;
        // A chunk cancelled on this link is not asked of it again: its old pieces may still be on the way.
        if (rarity[c] === 0 || !hasBit(l.theirs, c) || l.cancelled.has(c) || !this.isFree(c)) continue;
        const [a, b] = chunkRange(this.list, c);
        l.wanted.set(c, { chunk: c, startedMs: t, waitFromMs: t, lastPieceMs: t, buf: new Uint8Array(b - a), got: 0 });
        this.send(l, { kind: 'request', chunk: c });
      }
    }
    // The hub: after the grace for listed peers to connect, the chunks no ready peer holds; and any chunk a peer has
    // held up for takeoverMs.
    const waitingForPeers = this.dialling.size > 0 && usable.length === 0 && t - f.startedMs < this.timing.graceMs;
    if (waitingForPeers) return;
    const lanes = asking.length > 0 ? this.timing.hubLanesWithPeers : this.timing.hubLanesAlone;
    for (const c of order) {
      if (this.fromHubNow.size >= lanes) break;
      if (!this.isFree(c) || (rarity[c] as number) > 0) continue;
      this.fromHub(c);
    }
    if (this.fromHubNow.size >= lanes) return;
    // An idle hub not measured yet gives one chunk that peers hold, so that its speed can be weighed against theirs.
    if (this.hubMsPerByte === null && hubIdle(hub, this.source) && this.fromHubNow.size === 0) {
      const c = order.find((c) => this.isFree(c));
      if (c !== undefined) {
        this.fromHub(c);
        return;
      }
    }
    const takeoverMs = takeoverAfterMs(this.list.chunkBytes, hub, this.timing.takeoverMs, this.source);
    let oldest: { c: number; at: number } | null = null;
    for (const l of usable) {
      for (const w of l.wanted.values()) {
        if (t - w.startedMs >= takeoverMs && !this.fromHubNow.has(w.chunk) && (!oldest || w.startedMs < oldest.at)) {
          oldest = { c: w.chunk, at: w.startedMs };
        }
      }
    }
    if (oldest) this.fromHub(oldest.c);
    // Chunks some peer holds but none could take now (all busy) are left for them; nothing else is free.
  }

  private fromHub(c: number): void {
    const f = this.fetching;
    if (!f) return;
    const abort = new AbortController();
    this.fromHubNow.set(c, abort);
    const [a, b] = chunkRange(this.list, c);
    const startedMs = this.now();
    f.opts
      .hub(a, b, abort.signal)
      .then((buf) => {
        if (this.fromHubNow.get(c) === abort) this.fromHubNow.delete(c);
        if (!this.fetching) return;
        this.fetching.fromHub += buf.length;
        this.hubMsPerByte = nextMsPerByte(this.hubMsPerByte, this.now() - startedMs, buf.length);
        if (buf.length !== b - a) throw new SwarmError(`the hub sent ${buf.length} bytes of chunk ${c}, expected ${b - a}`);
        this.received(c, buf, null);
      })
      .catch((e: unknown) => {
        if (this.fromHubNow.get(c) === abort) this.fromHubNow.delete(c);
        if (abort.signal.aborted || !this.fetching) return;
        // The hub is the source of last resort: a few failures in a row end the fetch (the caller falls back).
        if (++this.fetching.hubFailures > 3) {
          this.finish(new SwarmError(`the hub failed to send chunk ${c}: ${e instanceof Error ? e.message : String(e)}`));
          return;
        }
        this.pump();
      });
  }

  // --- serving

  private onRequest(l: Link, chunk: number): void {
    if (!hasBit(this.have, chunk)) {
      this.send(l, { kind: 'refuse', chunk, reason: 'missing' });
      return;
    }
    if (!this.o.upload.sharing()) {
      this.send(l, { kind: 'refuse', chunk, reason: 'paused' });
      return;
    }
    if (l.upload?.chunk === chunk || l.queue.includes(chunk)) return;
    if (l.queue.length >= this.timing.maxQueued) {
      this.send(l, { kind: 'refuse', chunk, reason: 'busy' });
      return;
    }
    l.queue.push(chunk);
    this.scheduleUpload(0);
  }

  private scheduleUpload(ms: number): void {
    if (this.uploadTimer || this.closed) return;
    this.uploadTimer = setTimeout(() => {
      this.uploadTimer = null;
      this.uploadTick();
    }, ms);
  }

  /** Sends pieces round-robin over the peers with requests, within the budget and each link's queue. */
  private uploadTick(): void {
    if (this.closed) return;
    if (!this.o.upload.sharing()) {
      this.refuseAll();
      return;
    }
    const busy = [...this.links.values()].filter((l) => l.upload || l.queue.length > 0);
    if (busy.length === 0) return;
    let sentNow = 0;
    let waitMs = 0;
    let blocked = 0;
    while (sentNow < 1024 * 1024 && blocked < busy.length) {
      const l = busy[this.rotate++ % busy.length] as Link;
      if (!this.links.has(l.link) || l.link.buffered > HIGH_WATER || (!l.upload && l.queue.length === 0)) {
        blocked++;
        continue;
      }
      if (!l.upload) l.upload = { chunk: l.queue.shift() as number, offset: 0 };
      const [a, b] = chunkRange(this.list, l.upload.chunk);
      const n = Math.min(PIECE_BYTES, b - a - l.upload.offset);
      const wait = this.o.upload.take(n);
      if (wait > 0) {
        waitMs = wait;
        break;
      }
      blocked = 0;
      const data = this.bytes.subarray(a + l.upload.offset, a + l.upload.offset + n);
      this.send(l, { kind: 'piece', chunk: l.upload.chunk, offset: l.upload.offset, data });
      this.o.upload.sent(n);
      this.uploaded += n;
      sentNow += n;
      l.upload.offset += n;
      if (a + l.upload.offset >= b) l.upload = null;
    }
    const more = [...this.links.values()].some((l) => l.upload || l.queue.length > 0);
    if (more) this.scheduleUpload(Math.max(waitMs, blocked >= busy.length ? 10 : 0));
  }
}

function digestBytes(list: ChunkList): Uint8Array {
  return list.bytes.subarray(24, 56);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function shuffled(n: number, random: () => number): number[] {
  const out = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as number, out[i] as number];
  }
  return out;
}

/** Peer messages are validated here; the error type is re-exported for callers that route incoming hellos. */
export { PeerWireError };
