/**
 * The volunteer client: one UI-free module behind the volunteer page, the widget's frame and the headless volunteer
 * (`npx expertswarm volunteer`). It runs in browsers and in Node; the caller hands in what differs (WebSocket, the
 * compute environment, where keys and slices are kept).
 *
 *   const client = createVolunteerClient({ hubUrl: location.origin, environment, identity, cache, WebSocket });
 *   client.on('state', render);
 *   joinButton.onclick = () => client.join({ memoryBudgetBytes: 512 << 20 });   // consent: nothing is fetched before
 *
 * One life: join → log in (ed25519 challenge) → dial `/api/volunteer` → hello → welcome → wait. The hub pushes
 * `assign` when a model needs replicas: the client takes the slice from its cache or downloads it (progress, digest
 * check), starts the engine (WebGPU or wasm, whichever measures faster), says `loaded` and serves work frames one at
 * a time, heartbeating what it serves. `release` frees the engine and it waits again. A dropped channel frees the
 * engine too (the hub forgets a worker with its connection) and the client dials again with jittered backoff; the
 * slice stays in the cache, so the next assignment of it costs no download.
 */
import { laterDelayMs, reconnectDelayMs } from './backoff.ts';
import {
  computedTypes,
  computedVariants,
  heldMemoryBytes,
  openEngine,
  probeDevice,
  type ComputeEnvironment,
  type OpenedEngine,
} from './engine-open.ts';
import { VolunteerError, errorMessage, type VolunteerErrorCode } from './errors.ts';
import type { ExpertDevice } from '../shaders/device.ts';
import { ExpertRuntimeError } from '../shaders/errors.ts';
import { loadIdentity, login, type IdentityStore, type NodeToken } from './identity.ts';
import type { ShardCache } from './shard-cache.ts';
import { downloadChunkList, fetchSlice } from './shard-download.ts';
import { DEFAULT_SHARE, PeerHost, type OpenNetwork, type ShareSettings } from './peer-host.ts';
import {
  emptyStats,
  type BackendPreference,
  type DeviceReport,
  type HeldSlice,
  type SliceAssignment,
  type VolunteerControls,
  type VolunteerEvents,
  type VolunteerState,
  type VolunteerStats,
} from './state.ts';
import type { Backend } from '../protocol/numerics.ts';
import {
  CLOSE_CODES,
  VOLUNTEER_LIMITS,
  VOLUNTEER_PATH,
  VOLUNTEER_WIRE_VERSION,
  VolunteerWireError,
  closeName,
  closeReason,
  decodeWork,
  encodeClientMessage,
  encodeResult,
  encodeWorkFailed,
  firstNonFinite,
  parseHubMessage,
  type Assign,
  type ClientMessage,
  type LoadFailedCode,
  type Loaded,
  type WelcomePeer,
  type WorkFailedCode,
  type WorkFrame,
} from '../protocol/channel/index.ts';
import type { ExpertSlice } from '../shaders/slice.ts';

/** The part of the WebSocket API the client uses: the browser's and npm `ws`'s both fit. */
export interface SocketLike {
  binaryType: string;
  readonly readyState: number;
  send(data: string | Uint8Array): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
}

export type SocketFactory = new (url: string) => SocketLike;

export interface VolunteerClientOptions {
  /** The hub's origin, e.g. `http://127.0.0.1:8080`. */
  hubUrl: string;
  /**
   * Other hubs of the same cluster (`--redis`, docs/cluster.md), origins like `hubUrl`: each retry after a drop or a
   * failed dial goes to the next hub in turn (hubUrl, then these, round), after the same jittered wait, so a hub that
   * died sends its volunteers to the live ones. A node token is kept per hub (each hub issues its own).
   */
  otherHubs?: readonly string[];
  /**
   * What computes, with the backend the user chose: called after the user joins (nothing is probed or fetched before
   * consent), again only when a later join asks for another backend.
   */
  environment: (backend: BackendPreference) => Promise<ComputeEnvironment>;
  identity: IdentityStore;
  cache: ShardCache;
  WebSocket: SocketFactory;
  /** Stable per tab (or per process): a second connection with the same id replaces the first. */
  workerId: string;
  /** Preferred model ('' = any). */
  model?: string;
  maxExperts?: number;
  /** Slices held at once (hello `max_slices`, 1…256; default DEFAULT_MAX_SLICES): the memory budget bounds them first. */
  maxSlices?: number;
  /** e.g. "page/0.1.0". */
  agent?: string;
  fetch?: typeof fetch;
  /**
   * Opens WebRTC data channels to other volunteers (volunteer/peers-peerjs.ts); absent or null where there are none
   * (Node, a browser without WebRTC): slices then come from the hub alone (docs/peers.md).
   */
  peers?: OpenNetwork | null;
  /**
   * Negative-control seam for verification tests: changes each result's sums in place, or returns others to send
   * instead, or the raw bytes of a result frame (a dishonest or broken volunteer; `ctx.compute` gives the honest sums
   * of another frame, e.g. the same rows with other experts). Never set by the page or the headless volunteer.
   */
  tamper?: (sums: Float32Array, ctx: TamperContext) => TamperAnswer | Promise<TamperAnswer>;
  random?: () => number;
  now?: () => number;
  /**
   * Measurement seam: each answered work frame's path through this client (bench:dispatch splits the volunteer's
   * share of a layer from its engine's). Never set by the page.
   */
  onWorkTimings?: (t: WorkTimings) => void;
}

/**
 * One work frame from its arrival (the socket's message event) to its result handed to the socket, µs on the
 * monotonic clock. The engine call is the compute itself; the rest is this client's own cost.
 */
export interface WorkTimings {
  /** Wall clock at arrival, ms (to match a benchmark's window). */
  atMs: number;
  nRows: number;
  nPairs: number;
  /** Arrival → the engine call starts: decoding, and waiting behind earlier frames. */
  startUs: number;
  /** The engine call. */
  engineUs: number;
  /** Arrival → the result frame handed to the socket. */
  sentUs: number;
}

const DEFAULT_BUDGET = 512 * 2 ** 20;
/** After a failed or released slice, back to waiting after this long (so the state is readable). */
const SETTLE_MS = 1_500;
/** A `later` close code waits at least this long, and at most twice it (laterDelayMs). */
const LATER_MS = 60_000;
const RATE_WINDOW_MS = 10_000;
const OPEN = 1;

type Listener<K extends keyof VolunteerEvents> = (value: VolunteerEvents[K]) => void;

interface Held {
  assign: Assign;
  slice: SliceAssignment;
  opened: OpenedEngine;
  /** Its GPU device was lost and a new engine is being built (rebuildEngine). */
  rebuilding?: boolean;
  /** Pairs served with it on this connection. */
  pairs: number;
  /** Pairs the hub credited for it (`credit` messages' per-slice counts). */
  credit: number;
  /** Bytes it takes of the memory budget (heldMemoryBytes: at least what its engine holds, checked after each frame). */
  memoryBytes: number;
  /** The GPU device its engine was built on (null: none then). */
  device: ExpertDevice | null;
  /** Where its bytes came from. */
  fromPeers: number;
  fromHub: number;
}

/** Slices held at once unless told otherwise (hello `max_slices`); the memory budget bounds them first. */
export const DEFAULT_MAX_SLICES = 64;

const LOAD_CODES: Partial<Record<VolunteerErrorCode, LoadFailedCode>> = {
  SHARD_HTTP: 'DOWNLOAD_FAILED',
  SHARD_NETWORK: 'DOWNLOAD_FAILED',
  SHARD_TOO_LARGE: 'DOWNLOAD_FAILED',
  SHARD_DIGEST_MISMATCH: 'DIGEST_MISMATCH',
  SLICE_DOES_NOT_FIT: 'DOES_NOT_FIT',
  NO_BACKEND: 'NO_BACKEND',
};

/** Sums to send instead, a raw frame to send as it is, or undefined: the (possibly changed) sums. */
export type TamperAnswer = Float32Array | Uint8Array | undefined;

/** What a `tamper` seam sees of the work it answers. */
export interface TamperContext {
  frame: WorkFrame;
  compute(frame: WorkFrame): Promise<Float32Array>;
}

export function createVolunteerClient(options: VolunteerClientOptions): VolunteerControls {
  return new VolunteerClient(options);
}

class VolunteerClient implements VolunteerControls {
  state: VolunteerState = { kind: 'idle' };
  device: DeviceReport | null = null;
  stats: VolunteerStats = emptyStats();
  wallet: string | null = null;

  private readonly listeners: { [K in keyof VolunteerEvents]: Set<Listener<K>> } = {
    state: new Set(),
    device: new Set(),
    stats: new Set(),
  };
  private readonly now: () => number;
  private readonly random: () => number;
  private env: ComputeEnvironment | null = null;
  private gpuDevice: ExpertDevice | null = null;
  /** The probed device was lost while no WebGPU engine was held: the next load probes again. */
  private gpuLost = false;
  /** A new GPU device being probed after a loss (slices rebuilt together wait for the one probe). */
  private reprobe: Promise<void> | null = null;
  private token: NodeToken | null = null;
  /**
   * hubUrl then otherHubs, then the hubs a welcome told of (a cluster's other live hubs, protocol `welcome.hubs`);
   * `hubIndex` is the one dialled now, with each hub's node token kept.
   */
  private hubs: readonly string[];
  private hubIndex = 0;
  private readonly tokens = new Map<string, NodeToken>();
  private socket: SocketLike | null = null;
  private attempt = 0;
  private budget = DEFAULT_BUDGET;
  private backend: BackendPreference = 'auto';
  private joined = false;
  private paused = false;
  /** The slices it holds, by assignment id, in the order they were assigned. */
  private readonly held = new Map<number, Held>();
  /** Slice sharing for this connection (welcome's `peer`), with what the volunteer allows itself to upload. */
  private peerHost: PeerHost | null = null;
  private share: ShareSettings = { ...DEFAULT_SHARE };
  /** The assignment being downloaded or started; a release or a newer assign cancels it. */
  /** Slices being fetched or started, by assignment id. */
  private readonly loading = new Map<number, { slice: SliceAssignment; abort: AbortController }>();
  private timers = new Set<ReturnType<typeof setTimeout>>();
  private heartbeatTimer: ReturnType<typeof setInterval> | null = null;
  /** When the hub was last heard on this connection, and how long a silence the welcome said ends it. */
  private lastHeardMs = 0;
  private heartbeatMs = 0;
  private idleTimeoutMs = 0;
  private nextPingId = 1;
  /** When the last keep-alive ping was sent (answered once lastHeardMs passes it). */
  private pingSentMs = 0;
  /** Work frames are computed one at a time, in arrival order. */
  private queue: Promise<void> = Promise.resolve();
  private queued = 0;
  private recent: Array<{ atMs: number; pairs: number }> = [];
  /** Σ pairs of `recent`, kept as frames come and go (a frame's bookkeeping stays O(1) at hundreds of frames a second). */
  private recentPairs = 0;

  constructor(private readonly o: VolunteerClientOptions) {
    this.now = o.now ?? (() => Date.now());
    this.random = o.random ?? Math.random;
    this.hubs = [o.hubUrl, ...(o.otherHubs ?? []).filter((h) => h !== o.hubUrl)];
  }

  /** The hub dialled now (docs/cluster.md: a volunteer of a cluster moves to the next hub at each retry). */
  get hubUrl(): string {
    return this.hubs[this.hubIndex] as string;
  }

  // --- controls

  join(options: { memoryBudgetBytes?: number; backend?: BackendPreference; share?: ShareSettings } = {}): void {
    if (this.joined) return;
    if (options.memoryBudgetBytes !== undefined) this.budget = options.memoryBudgetBytes;
    if (options.share) this.share = { ...options.share };
    const backend = options.backend ?? 'auto';
    if (backend !== this.backend) {
      this.backend = backend;
      this.env = null; // probed again with the new choice
      this.gpuDevice?.device.destroy();
      this.gpuDevice = null;
    }
    this.joined = true;
    this.paused = false;
    this.attempt = 0;
    void this.connect();
  }

  pause(): void {
    if (!this.joined || this.paused) return;
    this.paused = true;
    this.peerHost?.setPaused(true); // uploads stop at once
    this.send({ type: 'pause' });
    this.setState({ kind: 'paused', slice: this.latest()?.slice ?? null });
  }

  resume(): void {
    if (!this.joined || !this.paused) return;
    this.paused = false;
    this.peerHost?.setPaused(false);
    const rebuilding = [...this.held.values()].find((h) => h.rebuilding);
    if (rebuilding) {
      this.setState({ kind: 'starting', slice: rebuilding.slice }); // rebuildEngine says resume once the engine is back
      return;
    }
    this.send({ type: 'resume' });
    this.setState(this.settled());
  }

  async leave(): Promise<void> {
    this.joined = false;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.stopHeartbeat();
    this.closePeers();
    this.abortLoads();
    const s = this.socket;
    this.socket = null;
    if (s) {
      if (s.readyState === OPEN) s.send(encodeClientMessage({ type: 'leave' }));
      s.onclose = null;
      s.close(1000, 'left');
    }
    await this.dropEngines();
    this.setState({ kind: 'left' });
  }

  on<K extends keyof VolunteerEvents>(event: K, listener: Listener<K>): () => void {
    (this.listeners[event] as Set<Listener<K>>).add(listener);
    const current = { state: this.state, device: this.device, stats: this.stats }[event];
    if (current !== null) listener(current as VolunteerEvents[K]);
    return () => (this.listeners[event] as Set<Listener<K>>).delete(listener);
  }

  // --- events

  private emit<K extends keyof VolunteerEvents>(event: K, value: VolunteerEvents[K]): void {
    for (const l of this.listeners[event] as Set<Listener<K>>) {
      try {
        l(value);
      } catch {
        // a listener's failure is the page's problem, never the client's
      }
    }
  }

  private setState(s: VolunteerState): void {
    this.state = s;
    this.emit('state', s);
  }

  private setDevice(d: DeviceReport): void {
    this.device = d;
    this.emit('device', d);
  }

  private setStats(patch: Partial<VolunteerStats>): void {
    this.stats = { ...this.stats, ...patch };
    this.emit('stats', this.stats);
  }

  private later(ms: number, f: () => void): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      f();
    }, ms);
    this.timers.add(t);
  }

  // --- the channel

  private async connect(): Promise<void> {
    if (!this.joined) return;
    this.setState({ kind: 'connecting', attempt: this.attempt + 1 });
    try {
      if (!this.env) {
        this.env = await this.o.environment(this.backend);
        const probed = await probeDevice(this.env, this.budget);
        this.useDevice(probed.device);
        this.setDevice(probed.report);
      } else if (this.device && this.device.memoryBudgetBytes !== this.budget) {
        this.setDevice({ ...this.device, memoryBudgetBytes: this.budget });
      }
      if (!this.token || this.token.renewAtMs <= this.now()) {
        this.token = await login(this.hubUrl, await loadIdentity(this.o.identity), this.o.fetch ?? fetch, this.now());
        this.tokens.set(this.hubUrl, this.token);
        this.wallet = this.token.wallet;
      }
    } catch (e) {
      this.retry(`cannot reach the hub: ${errorMessage(e)}`);
      return;
    }
    if (!this.joined) return;
    const url = new URL(VOLUNTEER_PATH, this.hubUrl);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    let s: SocketLike;
    try {
      s = new this.o.WebSocket(url.toString());
    } catch (e) {
      this.retry(`cannot open the channel: ${errorMessage(e)}`);
      return;
    }
    s.binaryType = 'arraybuffer';
    this.socket = s;
    s.onopen = () => this.sendHello();
    s.onmessage = (ev) => this.onMessage(ev.data);
    s.onerror = () => {};
    s.onclose = (ev) => {
      if (this.socket !== s) return;
      this.socket = null;
      void this.onClosed(ev.code, ev.reason);
    };
  }

  private sendHello(): void {
    const d = this.device;
    this.send({
      type: 'hello',
      version: VOLUNTEER_WIRE_VERSION,
      token: this.token?.token ?? '',
      workerId: this.o.workerId,
      device: {
        webgpu: d?.webgpu ?? false,
        adapter: d?.adapter ?? null,
        limits: d?.limits ?? null,
        features: d?.features ?? [],
        backend: d?.backend ?? null,
        gflops: d?.gflops ?? null,
        memoryBudgetBytes: this.budget,
      },
      numerics: ['exact', 'llama'],
      encodings: ['f32', 'f16'],
      variants: this.env ? computedVariants(this.env, this.gpuDevice !== null) : ['silu'],
      ...(this.env && { types: computedTypes(this.env, this.gpuDevice !== null) }),
      model: this.o.model ?? '',
      maxExperts: this.o.maxExperts ?? 0,
      maxSlices: this.o.maxSlices ?? DEFAULT_MAX_SLICES,
      agent: this.o.agent ?? '',
    });
  }

  private send(m: ClientMessage): void {
    const s = this.socket;
    if (s && s.readyState === OPEN) s.send(encodeClientMessage(m));
  }

  private sendBinary(bytes: Uint8Array): void {
    const s = this.socket;
    if (s && s.readyState === OPEN) s.send(bytes);
  }

  /** Dials again after a jittered wait, the first retry too: a hub that restarts is not met by every volunteer at once. */
  private retry(reason: string, later = false): void {
    if (!this.joined) return;
    this.attempt++;
    if (this.hubs.length > 1) {
      this.hubIndex = (this.hubIndex + 1) % this.hubs.length;
      this.token = this.tokens.get(this.hubUrl) ?? null;
    }
    const ms = later ? laterDelayMs(LATER_MS, this.random) : reconnectDelayMs(this.attempt, this.random);
    this.setState({ kind: 'retrying', inSeconds: Math.ceil(ms / 1000), reason, attempt: this.attempt });
    this.later(ms, () => void this.connect());
  }

  private async onClosed(code: number, reason: string): Promise<void> {
    this.stopHeartbeat();
    this.closePeers(); // its peer id was this connection's
    this.abortLoads();
    await this.dropEngines();
    if (!this.joined) return;
    const name = closeName(code);
    const entry = name ? CLOSE_CODES[name] : undefined;
    const why = entry ? `${name}: ${reason || entry.meaning}` : `the channel closed (${code})`;
    if (entry?.then === 'stop') {
      this.joined = false;
      this.setState({ kind: 'failed', code: 'HUB_REFUSED', message: why, retrying: false });
      return;
    }
    if (entry?.then === 'new-token') {
      this.token = null;
      this.tokens.delete(this.hubUrl);
    }
    this.retry(why, entry?.then === 'later');
  }

  private fail(e: VolunteerWireError): void {
    const s = this.socket;
    if (s) s.close(e.closeCode, closeReason(e.message));
  }

  private onMessage(data: unknown): void {
    this.lastHeardMs = this.now();
    try {
      if (typeof data === 'string') {
        this.onControl(data);
        return;
      }
      const bytes =
        data instanceof ArrayBuffer
          ? new Uint8Array(data)
          : ArrayBuffer.isView(data)
            ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength)
            : null;
      if (!bytes) throw new VolunteerWireError('BAD_FRAME', 'a binary message must be bytes');
      this.onWork(bytes);
    } catch (e) {
      if (e instanceof VolunteerWireError) this.fail(e);
      else this.fail(new VolunteerWireError('INTERNAL_ERROR', errorMessage(e)));
    }
  }

  private onControl(text: string): void {
    const m = parseHubMessage(text);
    switch (m.type) {
      case 'welcome':
        this.attempt = 0;
        this.setStats({ credit: m.credit });
        this.heartbeatMs = m.heartbeatMs;
        this.idleTimeoutMs = m.idleTimeoutMs;
        this.startHeartbeat(m.heartbeatMs);
        this.openPeers(m.peer);
        if (m.hubs) this.hubs = withHubs(this.hubs, m.hubs, VOLUNTEER_LIMITS.maxHubs);
        this.setState(this.paused ? { kind: 'paused', slice: null } : { kind: 'waiting' });
        if (this.paused) this.send({ type: 'pause' });
        return;
      case 'assign':
        void this.load(m);
        return;
      case 'release':
        void this.release(m.assignmentId, m.reason);
        return;
      case 'credit':
        for (const c of m.slices ?? []) {
          const h = this.held.get(c.assignmentId);
          if (h) h.credit = c.credit;
        }
        this.setStats(m.slices ? { credit: m.credit, slices: this.sliceList() } : { credit: m.credit });
        return;
      case 'ping':
        this.send({ type: 'pong', id: m.id });
        return;
      case 'pong':
        return;
    }
  }

  private startHeartbeat(ms: number): void {
    this.stopHeartbeat();
    this.heartbeatTimer = setInterval(() => this.heartbeat(), ms);
  }

  private stopHeartbeat(): void {
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = null;
  }

  /**
   * The hub's silence, judged as the hub judges ours: quiet for half the idle timeout, it is pinged (its pong counts
   * as heard; an idle hub sends nothing else, so this is one ping per half timeout per idle volunteer); quiet for the
   * idle timeout with that ping unanswered (a cut network, a hub that died without closing), the socket is given up and dialled
   * again with backoff — a browser may take minutes to notice a dead TCP connection by itself.
   */
  private hubSilent(): boolean {
    const t = this.now();
    const quiet = t - this.lastHeardMs;
    const s = this.socket;
    // Only a ping left unanswered for half the timeout condemns the hub: after the page itself was blocked (an engine
    // starting), this timer may run before the messages that arrived meanwhile, and the silence is the page's own.
    const unanswered = this.pingSentMs > this.lastHeardMs && t - this.pingSentMs >= this.idleTimeoutMs / 2;
    if (!s || this.idleTimeoutMs <= 0 || quiet <= this.idleTimeoutMs || !unanswered) {
      if (quiet >= Math.max(this.heartbeatMs, this.idleTimeoutMs / 2) && this.pingSentMs <= this.lastHeardMs) {
        this.pingSentMs = t;
        this.send({ type: 'ping', id: this.nextPingId++ });
      }
      return false;
    }
    this.socket = null;
    s.onclose = null;
    s.onmessage = null;
    s.close(CLOSE_CODES.IDLE_TIMEOUT.code, closeReason(`nothing heard from the hub for ${this.idleTimeoutMs} ms`));
    void this.onClosed(CLOSE_CODES.IDLE_TIMEOUT.code, `nothing heard from the hub for ${this.idleTimeoutMs} ms`);
    return true;
  }

  /** Only what is loaded and serving counts as coverage. */
  private heartbeat(): void {
    if (this.hubSilent()) return;
    const held = [...this.held.values()];
    const p = this.stats.peers;
    if (p && this.peerHost && p.uploaded !== this.peerHost.uploaded) this.setStats({ peers: { ...p, uploaded: this.peerHost.uploaded } });
    this.send({
      type: 'heartbeat',
      model: held[0]?.assign.model ?? '',
      coverage: held.map((h) => [h.assign.layer, h.assign.experts[0], h.assign.experts[1]]),
      paused: this.paused,
      stats: { pairsServed: this.stats.pairsServed, queueDepth: this.queued },
    });
  }

  // --- slices

  /** The slice assigned last of those it holds (what the page's state names while it serves). */
  private latest(): Held | undefined {
    let last: Held | undefined;
    for (const h of this.held.values()) last = h;
    return last;
  }

  /** Where it stands when nothing is loading: serving what it holds, paused, or waiting. */
  private settled(): VolunteerState {
    const h = this.latest();
    if (this.paused) return { kind: 'paused', slice: h?.slice ?? null };
    return h ? { kind: 'serving', slice: h.slice, backend: h.opened.engine.report.backend } : { kind: 'waiting' };
  }

  /** Back to the settled state a moment after a failure or release, unless something else happened meanwhile. */
  private settleLater(kind: VolunteerState['kind']): void {
    this.later(SETTLE_MS, () => {
      if (this.joined && this.state.kind === kind && this.loading.size === 0) this.setState(this.settled());
    });
  }

  /** The page's list of slices: those held, then those loading. */
  private listSlices(): void {
    this.setStats({ slices: this.sliceList() });
  }

  private sliceList(): HeldSlice[] {
    const slices: HeldSlice[] = [...this.held.values()].map((h) => ({
      ...h.slice,
      state: 'serving',
      backend: h.opened.engine.report.backend,
      pairsServed: h.pairs,
      credit: h.credit,
      memoryBytes: h.memoryBytes,
      fromPeers: h.fromPeers,
      fromHub: h.fromHub,
    }));
    for (const l of this.loading.values())
      slices.push({ ...l.slice, state: 'loading', backend: null, pairsServed: 0, credit: 0, memoryBytes: 0, fromPeers: 0, fromHub: 0 });
    return slices;
  }

  private abortLoads(): void {
    for (const l of this.loading.values()) l.abort.abort();
    this.loading.clear();
  }

  /** Bytes of memory the slices it holds take: what is left of the budget for the next one is the rest. */
  private heldBytes(): number {
    let n = 0;
    for (const h of this.held.values()) n += h.memoryBytes;
    return n;
  }

  private async load(a: Assign): Promise<void> {
    // A hub assigns one model per volunteer and never two copies of the same experts; an assign that breaks either
    // (a hub from before multi-slice volunteers replacing what it holds) replaces what it overlaps.
    for (const h of [...this.held.values()]) {
      const overlaps = h.assign.layer === a.layer && h.assign.experts[0] < a.experts[1] && a.experts[0] < h.assign.experts[1];
      if (h.assign.model !== a.model || overlaps) await this.dropEngine(h);
    }
    this.loading.get(a.assignmentId)?.abort.abort();
    const abort = new AbortController();
    const slice: SliceAssignment = {
      model: a.model,
      layer: a.layer,
      experts: [a.experts[0], a.experts[1]],
      bytes: a.shardBytes,
      digest: a.shardDigest,
    };
    const entry = { slice, abort };
    this.loading.set(a.assignmentId, entry);
    this.listSlices();
    const current = (): boolean => this.loading.get(a.assignmentId) === entry && !abort.signal.aborted;
    try {
      let bytes = await this.o.cache.get(a.shardDigest).catch(() => null);
      const fromCache = bytes !== null && bytes.length === a.shardBytes;
      let source = { fromPeers: 0, fromHub: 0 };
      if (!fromCache) {
        bytes = null;
        this.setState({ kind: 'downloading', slice, loadedBytes: 0, totalBytes: a.shardBytes, fromCache: false });
        let lastEmit = 0;
        const host = this.peerHost;
        const got = await fetchSlice({
          peers: host && a.peers && a.chunksUrl ? { host, ids: a.peers, chunksUrl: new URL(a.chunksUrl, this.hubUrl).toString() } : null,
          url: new URL(a.shardUrl, this.hubUrl).toString(),
          token: this.token?.token ?? '',
          bytes: a.shardBytes,
          digest: a.shardDigest,
          signal: abort.signal,
          ...(this.o.fetch ? { fetch: this.o.fetch } : {}),
          onProgress: (loadedBytes, totalBytes) => {
            const t = this.now();
            if (loadedBytes < totalBytes && t - lastEmit < 100) return;
            lastEmit = t;
            if (current()) this.setState({ kind: 'downloading', slice, loadedBytes, totalBytes, fromCache: false });
          },
        });
        bytes = got.bytes;
        source = { fromPeers: got.fromPeers, fromHub: got.fromHub };
        await this.o.cache.put(a.shardDigest, bytes).catch(() => {});
      } else {
        this.setState({ kind: 'downloading', slice, loadedBytes: a.shardBytes, totalBytes: a.shardBytes, fromCache: true });
      }
      if (!current()) {
        if (!this.holdsDigest(a.shardDigest)) this.peerHost?.drop(a.shardDigest); // cancelled: nothing of it held, or shared
        return;
      }
      slice.fromCache = fromCache;
      this.setState({ kind: 'starting', slice });
      const env = this.env as ComputeEnvironment;
      if (this.gpuLost) {
        const probed = await probeDevice(env, this.budget);
        this.useDevice(probed.device);
        this.setDevice(probed.report);
      }
      // What the slices it holds take is spent: this one gets the rest of the budget.
      const opened = await openEngine(bytes as Uint8Array, a.numerics, env, this.gpuDevice, Math.max(0, this.budget - this.heldBytes()));
      if (!current()) {
        if (!this.holdsDigest(a.shardDigest)) this.peerHost?.drop(a.shardDigest);
        await opened.engine.dispose();
        return;
      }
      if (opened.layer !== a.layer || opened.expertBegin !== a.experts[0] || opened.expertEnd !== a.experts[1]) {
        await opened.engine.dispose();
        throw new VolunteerError(
          'SHARD_DIGEST_MISMATCH',
          `the slice holds layer ${opened.layer} [${opened.expertBegin}, ${opened.expertEnd}), not what was assigned`,
        );
      }
      this.loading.delete(a.assignmentId);
      this.held.set(a.assignmentId, {
        assign: a,
        slice,
        opened,
        pairs: 0,
        credit: 0,
        memoryBytes: heldMemoryBytes(opened),
        device: this.gpuDevice,
        ...source,
      });
      const backend = this.announceEngine(
        a.assignmentId,
        opened,
        this.peerHost ? { peerBytes: source.fromPeers, hubBytes: source.fromHub } : {},
      );
      this.setStats({ peers: { ...source, uploaded: this.peerHost?.uploaded ?? 0 } });
      this.listSlices();
      void this.sharePeers(a, bytes as Uint8Array);
      this.heartbeat();
      this.setState(this.paused ? { kind: 'paused', slice } : { kind: 'serving', slice, backend });
    } catch (e) {
      if (!this.holdsDigest(a.shardDigest)) this.peerHost?.drop(a.shardDigest);
      if (!current()) return;
      this.loading.delete(a.assignmentId);
      this.listSlices();
      const code: VolunteerErrorCode = e instanceof VolunteerError ? e.code : 'NO_BACKEND';
      this.send({
        type: 'load_failed',
        assignmentId: a.assignmentId,
        code: LOAD_CODES[code] ?? 'ENGINE_FAILED',
        message: errorMessage(e).slice(0, 500),
      });
      this.setState({ kind: 'failed', code, message: errorMessage(e), retrying: true });
      this.settleLater('failed');
    }
  }

  /** Whether a held slice has this digest (then its bytes stay shared with peers). */
  private holdsDigest(digest: string): boolean {
    for (const h of this.held.values()) if (h.assign.shardDigest === digest) return true;
    return false;
  }

  private async release(assignmentId: number, reason: string): Promise<void> {
    const l = this.loading.get(assignmentId);
    if (l) {
      l.abort.abort();
      this.loading.delete(assignmentId);
      this.listSlices();
    }
    const h = this.held.get(assignmentId);
    if (!h) return;
    await this.dropEngine(h);
    this.heartbeat();
    this.setState({ kind: 'released', slice: h.slice, reason });
    this.settleLater('released');
  }

  /** Frees one slice's engine; frames already queued for it finish first (disposing under a running compute would fail it). */
  private async dropEngine(h: Held): Promise<void> {
    if (this.held.get(h.assign.assignmentId) !== h) return;
    this.held.delete(h.assign.assignmentId);
    this.listSlices();
    this.peerHost?.drop(h.assign.shardDigest); // peers are told it no longer holds it by the hub's next listings
    await this.queue.catch(() => {});
    await h.opened.engine.dispose().catch(() => {});
  }

  private async dropEngines(): Promise<void> {
    for (const h of [...this.held.values()]) await this.dropEngine(h);
  }

  // --- sharing slices with other volunteers (docs/peers.md)

  private openPeers(grant: WelcomePeer | undefined): void {
    this.closePeers();
    const open = this.o.peers;
    if (!grant || !open) return;
    this.peerHost = new PeerHost({
      hubUrl: this.hubUrl,
      welcome: grant,
      openNetwork: open,
      settings: this.share,
      report: (peerId, code, chunk, detail) => {
        // Slices are fetched one at a time: a bad chunk belongs to the one loading (else the last one held).
        let id: number | undefined;
        for (const k of this.loading.keys()) id = k;
        id ??= this.latest()?.assign.assignmentId;
        if (id !== undefined) this.send({ type: 'peer_report', assignmentId: id, peerId, code, chunk, detail });
      },
    });
    this.peerHost.setPaused(this.paused);
  }

  private closePeers(): void {
    this.peerHost?.close();
    this.peerHost = null;
  }

  /** Serves the slice just loaded to peers while it is held (one fetched from peers is being served already). */
  private async sharePeers(a: Assign, bytes: Uint8Array): Promise<void> {
    const host = this.peerHost;
    if (!host || !a.chunksUrl || !this.share.share || host.holds(a.shardDigest)) return;
    try {
      const list = await downloadChunkList({
        url: new URL(a.chunksUrl, this.hubUrl).toString(),
        token: this.token?.token ?? '',
        digest: a.shardDigest,
        bytes: a.shardBytes,
        ...(this.o.fetch ? { fetch: this.o.fetch } : {}),
      });
      if (this.held.get(a.assignmentId)?.assign !== a || this.peerHost !== host) return;
      await host.hold(a.shardDigest, list, bytes);
      // Released while the host opened its network: share nothing of a slice no longer held.
      if (this.held.get(a.assignmentId)?.assign !== a) host.drop(a.shardDigest);
    } catch {
      // Not shared: peers take the slice from the hub instead.
    }
  }

  // --- work

  private onWork(bytes: Uint8Array): void {
    // Durations on the monotonic clock: the result's computeUs is in µs, and Date.now() counts whole ms.
    const arrived = performance.now();
    const frame = decodeWork(bytes, { sliceWidth: (id) => this.held.get(id)?.opened.slice.nExpert });
    const h = this.held.get(frame.assignmentId);
    // The frame's arrays may be views of the received buffer; they are used before it could be reused.
    if (!h) {
      this.refuse(frame.workId, 'NOT_LOADED', 'no loaded slice has this assignment');
      return;
    }
    if (this.paused) {
      this.refuse(frame.workId, 'PAUSED', 'the volunteer paused');
      return;
    }
    this.queued++;
    this.queue = this.queue.then(async () => {
      try {
        const started = performance.now();
        const sums = await compute(h.opened.engine, h.opened.slice, frame);
        const computed = performance.now();
        if (firstNonFinite(sums) >= 0) return this.refuse(frame.workId, 'COMPUTE_ERROR', 'the backend produced sums that are not finite');
        const tamper = this.o.tamper;
        const out = tamper ? ((await tamper(sums, { frame, compute: (f) => compute(h.opened.engine, h.opened.slice, f) })) ?? sums) : sums;
        const computeUs = Math.round((performance.now() - arrived) * 1000);
        this.sendBinary(
          out instanceof Uint8Array
            ? out
            : encodeResult({
                workId: frame.workId,
                nRows: frame.nRows,
                nEmbd: frame.nEmbd,
                sums: out,
                encoding: frame.resultEncoding,
                computeUs,
              }),
        );
        const sent = performance.now();
        h.pairs += frame.nPairs;
        h.memoryBytes = Math.max(h.memoryBytes, heldMemoryBytes(h.opened)); // a larger frame may have grown its scratch
        this.served(frame.nPairs, sent - arrived);
        this.o.onWorkTimings?.({
          atMs: this.now() - (sent - arrived),
          nRows: frame.nRows,
          nPairs: frame.nPairs,
          startUs: (started - arrived) * 1000,
          engineUs: (computed - started) * 1000,
          sentUs: (sent - arrived) * 1000,
        });
      } catch (e) {
        if (e instanceof ExpertRuntimeError && e.code === 'DEVICE_LOST') {
          this.refuse(frame.workId, 'DEVICE_LOST', errorMessage(e));
          void this.rebuildEngine(h);
        } else this.refuse(frame.workId, 'COMPUTE_ERROR', errorMessage(e));
      } finally {
        this.queued--;
      }
    });
  }

  /**
   * The GPU device engines are built on from now on, with one listener on its loss: noticed when it is lost, not at
   * the next work frame (which may not come for long to a replica the dispatcher does not choose). A held WebGPU
   * engine is rebuilt; with none held, the next load probes a new device first.
   */
  private useDevice(device: ExpertDevice | null): void {
    this.gpuDevice = device;
    this.gpuLost = false;
    if (!device) return;
    void device.device.lost.then(() => {
      if (this.gpuDevice !== device) return; // replaced, or destroyed by join() on purpose
      this.gpuLost = true;
      for (const h of this.held.values()) if (h.opened.engine.report.backend === 'webgpu') void this.rebuildEngine(h);
    });
  }

  /**
   * The GPU device under the held engine was lost (a driver reset, the browser's GPU process gone): the hub stops
   * sending work (`pause` on the wire) while an engine is built anew from the cached slice on a fresh device, or on the
   * wasm fallback if that measures faster now, and then work resumes. A slice that cannot be rebuilt — the new device
   * or what is left of the budget cannot hold it, or no backend computes it — is given up alone (`load_failed`
   * DOES_NOT_FIT / NO_BACKEND / ENGINE_FAILED) so the market places it elsewhere, while the others serve on. Frames
   * that arrive meanwhile are refused with DEVICE_LOST; the hub computes those pairs itself.
   */
  private async rebuildEngine(h: Held): Promise<void> {
    if (h.rebuilding || this.held.get(h.assign.assignmentId) !== h) return;
    h.rebuilding = true;
    this.send({ type: 'pause' });
    this.setState({ kind: 'starting', slice: h.slice });
    try {
      const env = this.env as ComputeEnvironment;
      // Slices rebuilt together share one new device: the first to get here probes it, the others wait for it.
      if (this.gpuDevice === h.device || this.gpuLost) {
        this.reprobe ??= (async () => {
          const probed = await probeDevice(env, this.budget);
          this.useDevice(probed.device);
          this.setDevice(probed.report);
        })().finally(() => {
          this.reprobe = null;
        });
        await this.reprobe;
      }
      const bytes = await this.o.cache.get(h.assign.shardDigest).catch(() => null);
      if (!bytes || bytes.length !== h.assign.shardBytes) throw new VolunteerError('NO_BACKEND', 'the slice is no longer in the cache');
      const opened = await openEngine(
        bytes,
        h.assign.numerics,
        env,
        this.gpuDevice,
        Math.max(0, this.budget - this.heldBytes() + h.memoryBytes),
      );
      await this.queue.catch(() => {}); // frames queued for the lost engine are refused first
      if (this.held.get(h.assign.assignmentId) !== h) {
        await opened.engine.dispose(); // released or replaced meanwhile
        return;
      }
      this.held.set(h.assign.assignmentId, {
        ...h,
        opened,
        memoryBytes: heldMemoryBytes(opened),
        rebuilding: false,
        device: this.gpuDevice,
      });
      await h.opened.engine.dispose().catch(() => {});
      // The same slice again: the hub shows the backend and speed of the engine now serving it.
      const backend = this.announceEngine(h.assign.assignmentId, opened);
      this.listSlices();
      // The hub sends work again once every slice is rebuilt.
      if ([...this.held.values()].some((x) => x.rebuilding)) return;
      if (!this.paused) this.send({ type: 'resume' });
      this.setState(this.paused ? { kind: 'paused', slice: h.slice } : { kind: 'serving', slice: h.slice, backend });
    } catch (e) {
      if (this.held.get(h.assign.assignmentId) !== h) return;
      await this.dropEngine(h);
      // load_failed first: the hub drops the assignment while it still counts the worker paused, then resume makes it
      // serve what it still holds (or an idle volunteer again).
      this.send({
        type: 'load_failed',
        assignmentId: h.assign.assignmentId,
        code: (e instanceof VolunteerError && LOAD_CODES[e.code]) || 'ENGINE_FAILED',
        message: errorMessage(e).slice(0, 500),
      });
      if (!this.paused && ![...this.held.values()].some((x) => x.rebuilding)) this.send({ type: 'resume' });
      this.heartbeat();
      this.setState({ kind: 'failed', code: 'NO_BACKEND', message: errorMessage(e), retrying: true });
      this.settleLater('failed');
    }
  }

  /**
   * The engine now serving the slice of `assignmentId`: its backend and speed go on the page's device card and to the
   * hub as `loaded` (with `extra` fields); returns the backend.
   */
  private announceEngine(assignmentId: number, opened: OpenedEngine, extra: Pick<Loaded, 'peerBytes' | 'hubBytes'> = {}): Backend {
    const report = opened.engine.report;
    const gflops = report.measured[report.backend]?.gflops ?? 0;
    if (this.device) this.setDevice({ ...this.device, backend: report.backend, backendReason: report.reason, gflops });
    this.send({
      type: 'loaded',
      assignmentId,
      ready: !this.paused,
      backend: report.backend,
      gflops: Number.isFinite(gflops) ? gflops : 0,
      ...extra,
    });
    return report.backend;
  }

  private refuse(workId: number, code: WorkFailedCode, message: string): void {
    this.sendBinary(encodeWorkFailed({ workId, code, message }));
  }

  private served(pairs: number, latencyMs: number): void {
    const t = this.now();
    this.recent.push({ atMs: t, pairs });
    this.recentPairs += pairs;
    while (this.recent.length > 0 && (this.recent[0] as { atMs: number }).atMs < t - RATE_WINDOW_MS)
      this.recentPairs -= (this.recent.shift() as { pairs: number }).pairs;
    const inWindow = this.recentPairs;
    this.setStats({
      pairsServed: this.stats.pairsServed + pairs,
      workFrames: this.stats.workFrames + 1,
      lastLatencyMs: latencyMs,
      pairsPerSec: inWindow / (RATE_WINDOW_MS / 1000),
      slices: this.sliceList(),
    });
  }
}

/**
 * The reduce form (pairs of row, local expert, weight) as the engine's call shape (rows × nUsed ids and probs): each
 * row's pairs in arrival order, rows with fewer pairs padded with weight-0 pairs of an expert the row already uses
 * (adding a +0 or −0 product changes no sum).
 */
export function compute(engine: OpenedEngine['engine'], slice: ExpertSlice, f: WorkFrame): Promise<Float32Array> {
  const counts = new Uint32Array(f.nRows);
  for (let p = 0; p < f.nPairs; p++) {
    const r = f.rowIndex[p] as number;
    counts[r] = (counts[r] as number) + 1;
  }
  let nUsed = 1;
  for (let r = 0; r < f.nRows; r++) nUsed = Math.max(nUsed, counts[r] as number);
  const ids = new Int32Array(f.nRows * nUsed);
  const probs = new Float32Array(f.nRows * nUsed);
  const fill = new Uint32Array(f.nRows);
  for (let p = 0; p < f.nPairs; p++) {
    const r = f.rowIndex[p] as number;
    const k = fill[r] as number;
    fill[r] = k + 1;
    ids[r * nUsed + k] = f.localExpert[p] as number;
    probs[r * nUsed + k] = f.weight[p] as number;
  }
  for (let r = 0; r < f.nRows; r++) {
    const first = (fill[r] as number) > 0 ? (ids[r * nUsed] as number) : 0;
    for (let k = fill[r] as number; k < nUsed; k++) ids[r * nUsed + k] = first;
  }
  if (f.nEmbd !== slice.nEmbd) throw new VolunteerError('COMPUTE_FAILED', `work rows have ${f.nEmbd} values, the slice ${slice.nEmbd}`);
  return engine.compute(f.rows, ids, probs, f.nRows, nUsed);
}

/**
 * `known`, then the origins of `learned` (a welcome's `hubs`) not in it, at most `max` in all: a volunteer given one
 * hub of a cluster learns the others, and never drops a hub it was given.
 */
export function withHubs(known: readonly string[], learned: readonly string[], max: number): string[] {
  const origin = (h: string): string => {
    try {
      return new URL(h).origin;
    } catch {
      return h;
    }
  };
  const out = [...known];
  const seen = new Set(known.map(origin));
  for (const h of learned) {
    if (out.length >= max) break;
    const o = origin(h);
    if (seen.has(o)) continue;
    seen.add(o);
    out.push(o);
  }
  return out;
}
