/**
 * The hub's end of the volunteer channel (`/api/volunteer`, docs/volunteer-channel.md, protocol/channel/): one
 * WebSocket per volunteer, opened by the volunteer. It authenticates the hello, pushes assignments the moment the
 * market has demand (idle volunteers hold the channel open; nobody polls), turns `loaded` and heartbeats into
 * coverage, and is the dispatcher's way to the workers: each serving connection is a `WorkerLink`.
 *
 *   const channel = new VolunteerChannel(host, { heartbeatMs: 15_000 });
 *   channel.attach(app.server);                         // handles the upgrade of /api/volunteer
 *   new ModelDispatcher({ directory: channel.directory('qwen3moe'), … });
 *   channel.demandChanged();                            // after a poller reading: assigns idle volunteers at once
 *
 * Assignments reserve their range in the coverage store while the slice downloads and loads, so one round of demand
 * is not answered by every idle volunteer downloading the same slice; a volunteer that does not load in time is
 * released (LOAD_TIMEOUT) and its reservation dropped. A worker is attached to the dispatch map (its grace window
 * starts) only once it says `loaded`.
 *
 * Admission (docs/threat-model.md): an upgrade is refused with an HTTP answer before any WebSocket exists when its
 * Origin is another site's (403 ORIGIN_FORBIDDEN, admission.ts), when its address holds `maxPerAddress` connections
 * (503 TOO_MANY_CONNECTIONS) or opens them faster than `opensPerAddress` (429 RATE_LIMITED); a hello is closed with
 * OVER_CAPACITY when its wallet holds `maxPerWallet` connections. After the hello, control messages and binary frames
 * for work not in flight share one token bucket per connection (RATE_LIMITED), and no work is queued to a volunteer
 * that does not read (`sendBacklogMaxBytes`).
 */
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { admitUpgrade, countDown, messageBytes, refuseUpgrade } from './upgrade.ts';
import {
  CLOSE_CODES,
  VOLUNTEER_LIMITS,
  VOLUNTEER_PATH,
  VOLUNTEER_WIRE_VERSION,
  VolunteerWireError,
  closeReason,
  decodeResult,
  decodeWorkFailed,
  encodeHubMessage,
  encodeWork,
  parseClientMessage,
  peekFrame,
  type Assign,
  type CloseName,
  type ChannelHello,
  type HubMessage,
  type ReleaseCode,
  type WireEncoding,
} from '../../protocol/channel/index.ts';
import type { Numerics } from '../../protocol/numerics.ts';
import { type Assignment, type VolunteerAnswer, type VolunteerRequest, nextSliceRequest } from '../market/assign.ts';
import type { HeldRange } from '../market/types.ts';
import { chooseRebalance } from '../market/rebalance.ts';
import type { WorkAnswer, WorkItem, WorkerDirectory, WorkerLink } from '../dispatch/worker-link.ts';
import { RateLimiter } from '../auth/rate-limit.ts';
import { HubError } from '../errors.ts';
import {
  CHANNEL_CONNECTIONS_PER_ADDRESS,
  CHANNEL_CONNECTIONS_PER_WALLET,
  CHANNEL_LATE_IDS_KEPT,
  CHANNEL_OPEN_RATE,
  CHANNEL_SEND_BACKLOG_MAX_BYTES,
  CHANNEL_UNSOLICITED_BYTES_PER_TOKEN,
} from '../limits.ts';
import { clientKey } from '../net.ts';
import { normalOrigin } from './admission.ts';
import type { PeerListing } from '../peer-directory.ts';
import { inLanes } from '../lanes.ts';

/** What the channel needs of the hub (the Hub implements it; tests may pass their own). */
export interface ChannelHost {
  /** With `--redis`: the other live hubs' public URLs, told to each volunteer in its welcome (cluster/hub-list.ts). */
  otherHubs?(): string[];
  /** The wallet of a node token; throws (HubError AUTH_*) for a bad one. */
  authenticate(authorization: string): string;
  /** Why this worker or wallet is quarantined, or undefined. */
  quarantineReason(workerId: string, wallet: string): string | undefined;
  /** The market's answer for one idle volunteer (POST /api/expert-volunteer's logic). */
  offer(workerId: string, request: VolunteerRequest): VolunteerAnswer;
  /**
   * Bytes one expert of the model's `layer` takes on a volunteer (the market's measure of a budget: each layer's own,
   * market/assign.ts bytesForExpertOf).
   */
  expertBytes(model: string, layer: number): number;
  /**
   * A volunteer said hello and will be offered slices for `request`: the host may get their digests ready (the shard
   * server's warm-up, hub/shard-warmer.ts) so that the push that assigns them does not wait on reading them.
   */
  warm?(request: VolunteerRequest): void;
  /** Size and `sha256:<hex>` of a slice (the shard server's). */
  shard(model: string, layer: number, begin: number, end: number): Promise<{ bytes: number; digest: string }>;
  /** How the model's coordinator computes (from its dispatch HELLO; 'llama' for linkcpp-server). */
  numerics(model: string): Numerics;
  /** Counts a range as held in the coverage store (no dispatch-map attach): an assignment being loaded. */
  reserve(workerId: string, model: string, ranges: readonly HeldRange[]): void;
  /** A worker serves these ranges (coverage + dispatch map, as a heartbeat). Throws when it may not (quarantine). */
  serving(workerId: string, wallet: string, model: string, ranges: readonly HeldRange[]): void;
  /** The worker is gone: drop its coverage and dispatch record. */
  forget(workerId: string): void;
  creditOf(wallet: string): number;
  /** Pairs credited to a worker for one slice it holds (trust/slice-credit.ts); absent: credit messages list no slices. */
  sliceCredit?(workerId: string, slice: { layer: number; begin: number; end: number }): number;
  /**
   * A result frame that does not decode (NaN or ±∞ in it, the wrong size, the wrong work): the connection is closed
   * with BAD_FRAME; the host may also distrust the worker (quarantine).
   */
  badResult?(workerId: string, reason: string): void;
  event(kind: 'volunteer-join' | 'volunteer-leave' | 'release' | 'load-failed' | 'peer-report', model: string | null, detail: string): void;
}

export interface ChannelOptions {
  heartbeatMs: number;
  /** Nothing from the volunteer for this long closes with IDLE_TIMEOUT. */
  idleTimeoutMs: number;
  helloTimeoutMs: number;
  /** An assignment not loaded within this is released (LOAD_TIMEOUT). */
  loadTimeoutMs: number;
  maxConnections: number;
  /** How results travel (rows are always f32: the coordinator's own rows, so llama numerics stay exact). */
  resultEncoding: WireEncoding;
  /** A pending work item is forgotten after this long even if the dispatcher stopped waiting long ago. */
  forgetWorkMs: number;
  /** Control messages per second a volunteer may send (burst = 4×). */
  controlPerSec: number;
  /** Connections open at once from one client address (net.ts clientKey); one more → 503 TOO_MANY_CONNECTIONS. */
  maxPerAddress: number;
  /** Connections open at once of one wallet; one more is closed at its hello with OVER_CAPACITY. */
  maxPerWallet: number;
  /** Opens per client address (token bucket); beyond → 429 RATE_LIMITED at the upgrade. */
  opensPerAddress: { capacity: number; refillPerSec: number };
  /** Origins besides the hub's own whose pages may open the channel (`--allow-origin`; admission.ts). */
  allowedOrigins: readonly string[];
  /** Bytes queued unsent to a volunteer beyond which it gets no new work. */
  sendBacklogMaxBytes: number;
}

export const DEFAULT_CHANNEL: Readonly<ChannelOptions> = Object.freeze({
  heartbeatMs: 15_000,
  idleTimeoutMs: 45_000,
  helloTimeoutMs: 10_000,
  loadTimeoutMs: 120_000,
  maxConnections: 10_000,
  resultEncoding: 'f32',
  forgetWorkMs: 30_000,
  controlPerSec: 20,
  maxPerAddress: CHANNEL_CONNECTIONS_PER_ADDRESS,
  maxPerWallet: CHANNEL_CONNECTIONS_PER_WALLET,
  opensPerAddress: CHANNEL_OPEN_RATE,
  allowedOrigins: [],
  sendBacklogMaxBytes: CHANNEL_SEND_BACKLOG_MAX_BYTES,
});

export type VolunteerConnectionState = 'hello' | 'waiting' | 'loading' | 'serving' | 'paused';

/** What the dashboard shows of a volunteer's connection (`VolunteerChannel.workerInfo`). */
export interface VolunteerInfo {
  state: VolunteerConnectionState;
  wallet: string;
  /** `webgpu` / `wasm`, from its `loaded` (or its hello, before one); null when it never said. */
  backend: string | null;
  gflops: number | null;
  /** The adapter's description, else the client's agent string. */
  device: string;
}

interface Pending {
  /** When the frame was handed to the socket (performance.now(), ms). */
  sentAt: number;
  resolve(answer: WorkAnswer): void;
  reject(e: Error): void;
  nRows: number;
  nEmbd: number;
  encoding: WireEncoding;
  timer: NodeJS.Timeout;
  /** The slice the work was for. */
  assignmentId: number;
}

class WorkError extends Error {}

/**
 * One slice a volunteer was assigned: loading until it says `loaded`, then, while the volunteer is not paused, the
 * dispatcher's link to those experts. A volunteer that holds several slices (hello `max_slices`) has one per slice,
 * all on its one connection and its one queue.
 */
class SliceLink implements WorkerLink {
  private loadedNow = false;
  loadTimer: NodeJS.Timeout | null = null;
  constructor(
    readonly conn: VolunteerConnection,
    readonly assign: Assign,
  ) {}
  /** It said `loaded`: the connection's state follows (it may now be serving). */
  get loaded(): boolean {
    return this.loadedNow;
  }
  set loaded(on: boolean) {
    if (on === this.loadedNow) return;
    this.loadedNow = on;
    this.conn.restate();
  }
  get workerId(): string {
    return this.conn.workerId;
  }
  get model(): string {
    return this.assign.model;
  }
  get layer(): number {
    return this.assign.layer;
  }
  get begin(): number {
    return this.assign.experts[0];
  }
  get end(): number {
    return this.assign.experts[1];
  }
  get range(): HeldRange {
    return [this.assign.layer, this.assign.experts[0], this.assign.experts[1]];
  }
  /** The volunteer's queue, shared by every slice it holds: one device computes them all, one frame at a time. */
  get inFlight(): number {
    return this.conn.inFlight;
  }
  compute(work: WorkItem, deadlineMs: number): Promise<WorkAnswer> {
    return this.conn.compute(this, work, deadlineMs);
  }
}

/**
 * One volunteer's connection and the slices it holds (each a SliceLink). What its `state` is made of (its hello, its
 * slices, `loaded`, `reserving`, `paused`) changes only through setters and hold/drop, each telling the channel, which
 * keeps its connections counted by state as they change rather than walking them all per reading.
 */
class VolunteerConnection {
  workerId = '';
  wallet = '';
  private helloNow: ChannelHello | null = null;
  /** Its slices by assignment id, loading or loaded, in the order they were assigned. */
  private readonly held = new Map<number, SliceLink>();
  private reservingNow = false;
  private pausedNow = false;
  /** The state the channel counts it under; null while it is not counted (not yet accepted, or gone). */
  countedAs: VolunteerConnectionState | null = null;
  /** Set after a slice did not fit: offer at most this many experts next time (0 = no limit). */
  maxExperts = 0;
  unfit = false;
  /** A slice did not fit beside those it holds: offer it no more until one is released. */
  full = false;
  /** Waiting with nothing, it had a slice moved its way (market/rebalance.ts): not again until it is assigned one. */
  rebalanceAsked = false;
  /** An operator released it: offer rounds skip it until then (this clock), or until it reconnects. */
  heldOffUntilMs = 0;
  inFlight = 0;
  /** What `loaded` said it computes with, and how fast (the hello's guess before that). */
  backend: string | null = null;
  gflops: number | null = null;
  private nextWorkId = 1;
  readonly pending = new Map<number, Pending>();
  /** Work ids the hub stopped waiting for (oldest first): a late answer to one is a race, dropped for free. */
  private readonly late = new Set<number>();
  lastHeardMs: number;
  private nextPingId = 1;
  tokens: number;
  tokensAtMs: number;

  constructor(
    readonly ws: WebSocket,
    readonly remote: string,
    private readonly channel: VolunteerChannel,
    nowMs: number,
  ) {
    this.lastHeardMs = nowMs;
    this.tokens = channel.options.controlPerSec * 4;
    this.tokensAtMs = nowMs;
  }

  /**
   * Where it stands: `hello` before its hello; `paused` when the user paused (unless its only slices are still
   * loading); else `serving` with a slice loaded, `loading` with one on its way, `waiting` with none.
   */
  /** The user paused it (`pause`, or `loaded` with ready false): the channel keeps the others in a set of their own. */
  get paused(): boolean {
    return this.pausedNow;
  }
  set paused(on: boolean) {
    if (on === this.pausedNow) return;
    this.pausedNow = on;
    this.channel.pausedChanged(this);
    this.restate();
  }

  get hello(): ChannelHello | null {
    return this.helloNow;
  }
  set hello(h: ChannelHello | null) {
    this.helloNow = h;
    this.restate();
  }

  /** Between the market's answer and its `assign`: the range is reserved, the shard being looked up. */
  get reserving(): boolean {
    return this.reservingNow;
  }
  set reserving(on: boolean) {
    if (on === this.reservingNow) return;
    this.reservingNow = on;
    this.restate();
  }

  get slices(): ReadonlyMap<number, SliceLink> {
    return this.held;
  }
  hold(sl: SliceLink): void {
    this.held.set(sl.assign.assignmentId, sl);
    this.restate();
  }
  /** Returns whether it held `sl`. */
  drop(sl: SliceLink): boolean {
    if (this.held.get(sl.assign.assignmentId) !== sl) return false;
    this.held.delete(sl.assign.assignmentId);
    this.restate();
    return true;
  }

  /** Something its state is made of changed. */
  restate(): void {
    this.channel.restate(this);
  }

  get state(): VolunteerConnectionState {
    if (!this.hello) return 'hello';
    // Most of a large swarm: paused, holding nothing (no walk over its slices).
    if (this.pausedNow && this.slices.size === 0 && !this.reserving) return 'paused';
    let loaded = false;
    let loading = this.reserving;
    for (const s of this.slices.values()) {
      if (s.loaded) loaded = true;
      else loading = true;
    }
    if (this.paused && (loaded || !loading)) return 'paused';
    if (loaded) return 'serving';
    return loading ? 'loading' : 'waiting';
  }

  /** Slices it holds at once: one for a client from before multi-slice volunteers. */
  get maxSlices(): number {
    return this.hello?.maxSlices ?? 1;
  }

  /** The model of its slices (one model per volunteer), or undefined while it holds none. */
  get model(): string | undefined {
    for (const s of this.slices.values()) return s.model;
    return undefined;
  }

  /** Every range it holds or loads, for the coverage store. */
  ranges(): HeldRange[] {
    return [...this.slices.values()].map((s) => s.range);
  }

  loadedCount(): number {
    let n = 0;
    for (const s of this.slices.values()) if (s.loaded) n++;
    return n;
  }

  /** Whether any of its slices is loaded (then it is attached to the dispatch map). */
  anyLoaded(): boolean {
    for (const s of this.slices.values()) if (s.loaded) return true;
    return false;
  }

  /** Experts it holds or loads, all slices together. */
  heldExperts(): number {
    let n = 0;
    for (const s of this.slices.values()) n += s.end - s.begin;
    return n;
  }

  /** The channel's keep-alive: a `ping` the volunteer's script answers with a `pong` (heard like any message). */
  ping(): void {
    this.send({ type: 'ping', id: this.nextPingId });
    this.nextPingId = this.nextPingId >= 0xffffffff ? 1 : this.nextPingId + 1;
  }

  send(m: HubMessage): void {
    if (this.ws.readyState === this.ws.OPEN) this.ws.send(encodeHubMessage(m));
  }

  compute(slice: SliceLink, work: WorkItem, deadlineMs: number): Promise<WorkAnswer> {
    const a = slice.assign;
    if (this.slices.get(a.assignmentId) !== slice || !slice.loaded || this.paused) return Promise.reject(new WorkError('not serving'));
    // A volunteer that does not read would make the hub buffer every frame it is sent.
    if (this.ws.bufferedAmount > this.channel.options.sendBacklogMaxBytes)
      return Promise.reject(new WorkError('backlogged: the volunteer is not reading its frames'));
    const workId = this.nextWorkId;
    this.nextWorkId = this.nextWorkId >= 0xffffffff ? 1 : this.nextWorkId + 1;
    const encoding = this.channel.options.resultEncoding;
    const frame = encodeWork({
      workId,
      assignmentId: a.assignmentId,
      nRows: work.nRows,
      nEmbd: work.nEmbd,
      rows: work.rows.length === work.nRows * work.nEmbd ? work.rows : work.rows.subarray(0, work.nRows * work.nEmbd),
      rowIndex: work.rowIndex.subarray(0, work.nPairs),
      localExpert: work.localExpert.subarray(0, work.nPairs),
      weight: work.weight.subarray(0, work.nPairs),
      rowEncoding: 'f32',
      resultEncoding: encoding,
    });
    return new Promise<WorkAnswer>((resolve, reject) => {
      const forgetMs = Math.max(deadlineMs * 4, this.channel.options.forgetWorkMs);
      const timer = setTimeout(() => this.giveUp(workId, 'no answer'), forgetMs);
      timer.unref();
      this.pending.set(workId, {
        sentAt: performance.now(),
        resolve,
        reject,
        nRows: work.nRows,
        nEmbd: work.nEmbd,
        encoding,
        timer,
        assignmentId: a.assignmentId,
      });
      this.inFlight++;
      this.ws.send(frame, (err) => {
        if (err) this.settle(workId)?.reject(err);
      });
    });
  }

  settle(workId: number): Pending | undefined {
    const p = this.pending.get(workId);
    if (!p) return undefined;
    this.pending.delete(workId);
    clearTimeout(p.timer);
    this.inFlight--;
    return p;
  }

  /** Gives up on the work in flight: all of it, or that of one slice. */
  failAll(why: string, assignmentId?: number): void {
    for (const [id, p] of [...this.pending]) if (assignmentId === undefined || p.assignmentId === assignmentId) this.giveUp(id, why);
  }

  /** Stops waiting for a work item; its id is remembered as late (the newest CHANNEL_LATE_IDS_KEPT). */
  private giveUp(workId: number, why: string): void {
    const p = this.settle(workId);
    if (!p) return;
    this.late.add(workId);
    if (this.late.size > CHANNEL_LATE_IDS_KEPT) this.late.delete(this.late.values().next().value as number);
    p.reject(new WorkError(why));
  }

  /** Whether `workId` was given up on (and forgets it: each work id is answered once). */
  wasLate(workId: number): boolean {
    return this.late.delete(workId);
  }

  /** Token bucket for control messages (and frames for work not in flight, which cost `cost`). */
  allowControl(nowMs: number, cost = 1): boolean {
    const rate = this.channel.options.controlPerSec;
    this.tokens = Math.min(rate * 4, this.tokens + (Math.max(0, nowMs - this.tokensAtMs) / 1000) * rate);
    this.tokensAtMs = Math.max(this.tokensAtMs, nowMs);
    if (this.tokens < cost) return false;
    this.tokens -= cost;
    return true;
  }
}

export class VolunteerChannel {
  readonly options: ChannelOptions;
  private readonly wss: WebSocketServer;
  private readonly byWorker = new Map<string, VolunteerConnection>();
  private readonly all = new Set<VolunteerConnection>();
  /**
   * Those of `all` not paused: what offer rounds and rebalancing walk (a paused volunteer is offered nothing and gives
   * nothing up), so a round after each reading costs the active volunteers, not the whole swarm.
   */
  private readonly unpaused = new Set<VolunteerConnection>();
  /** Open sockets of the channel per client address (from the upgrade to the close). */
  private readonly perAddress = new Map<string, number>();
  /** Said-hello connections by wallet: whom credit() reaches, and what the per-wallet cap counts. */
  private readonly byWallet = new Map<string, Set<VolunteerConnection>>();
  /**
   * Connections of `all` by state, moved as each one's state changes (restate): the dashboard's ticks and every
   * metrics scrape read them, and a walk of 19,000 connections took 16 ms of the hub's loop (docs/cluster.md, Scale).
   */
  private readonly counts: Record<VolunteerConnectionState, number> = { hello: 0, waiting: 0, loading: 0, serving: 0, paused: 0 };
  private readonly opens: RateLimiter;
  private readonly allowedOrigins: ReadonlySet<string>;
  private nextAssignment = 1;
  /** Serving slices per model and layer, rebuilt when a slice starts or stops serving. */
  private readonly links = new Map<string, Map<number, SliceLink[]>>();
  /** Connections holding an assignment, by model: what a rebuild of the links looks through (not every connection). */
  private readonly assigned = new Map<string, Set<VolunteerConnection>>();
  private assigning = false;
  /** Whom the next round offers a slice: every idle volunteer once the market may have changed, else newcomers only. */
  private offerTo: Set<VolunteerConnection> | 'all' | null = null;
  private readonly sweep: NodeJS.Timeout;
  private closed = false;
  private closing: Promise<void> | null = null;
  /**
   * Called for every result in time or not: the round trip from handing the frame to the socket to decoding the
   * answer (ms), and the worker's own time on it (µs, as it reports). Benchmarks take the hub's share from these.
   */
  onResult: ((workerId: string, roundTripMs: number, computeUs: number) => void) | null = null;
  /** Who holds which slice, for volunteers passing slices to each other (hub/peer-directory.ts, docs/peers.md); null: off. */
  peers: PeerListing | null = null;
  /** Other WebSocket paths served on the same HTTP server (the PeerJS signalling server): not refused here. */
  upgradesElsewhere: ((path: string) => boolean) | null = null;

  constructor(
    private readonly host: ChannelHost,
    options: Partial<ChannelOptions> = {},
    readonly nowMs: () => number = Date.now,
  ) {
    this.options = { ...DEFAULT_CHANNEL, ...options };
    this.opens = new RateLimiter(this.options.opensPerAddress);
    this.allowedOrigins = new Set(this.options.allowedOrigins.map(normalOrigin));
    this.wss = new WebSocketServer({ noServer: true, maxPayload: VOLUNTEER_LIMITS.maxFrameBytes, perMessageDeflate: false });
    this.sweep = setInterval(() => this.sweepIdle(), Math.min(5_000, this.options.idleTimeoutMs / 3));
    this.sweep.unref();
  }

  /** Takes over the upgrade of `/api/volunteer` on the hub's HTTP server; other upgrades are refused. */
  attach(server: Server): void {
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      const path = (req.url ?? '').split('?')[0];
      if (path !== VOLUNTEER_PATH || this.closed) {
        if (path !== VOLUNTEER_PATH && this.upgradesElsewhere?.(path ?? '')) return;
        socket.end('HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      const remote = req.socket.remoteAddress ?? '';
      const key = clientKey({ ip: remote });
      try {
        this.admit(req, key);
      } catch (e) {
        refuseUpgrade(socket, e instanceof HubError ? e : new HubError('INTERNAL', 'internal error'));
        return;
      }
      this.perAddress.set(key, (this.perAddress.get(key) ?? 0) + 1);
      socket.once('close', () => countDown(this.perAddress, key));
      this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws, remote));
    });
  }

  /** The upgrade's checks, cheapest first: ORIGIN_FORBIDDEN, TOO_MANY_CONNECTIONS, RATE_LIMITED (upgrade.ts). */
  private admit(req: IncomingMessage, key: string): void {
    const gate = {
      noun: 'volunteer connections',
      allowedOrigins: this.allowedOrigins,
      perAddress: this.perAddress,
      maxPerAddress: this.options.maxPerAddress,
      opens: this.opens,
    };
    admitUpgrade(req, key, gate, this.nowMs());
  }

  /** The dispatcher's view of one model's serving workers. */
  directory(model: string): WorkerDirectory {
    return { workersFor: (layer) => this.links.get(model)?.get(layer) ?? [] };
  }

  /** Connections by state (for the metrics gauge and the dashboard's totals). */
  countByState(): Record<VolunteerConnectionState, number> {
    return { ...this.counts };
  }

  /** VolunteerConnection's setters: moves it to the count of the state it is in now (one not counted stays so). */
  restate(c: VolunteerConnection): void {
    if (c.countedAs === null) return;
    const s = c.state;
    if (s === c.countedAs) return;
    this.counts[c.countedAs]--;
    this.counts[s]++;
    c.countedAs = s;
  }

  /** VolunteerConnection's `paused` setter: keeps `unpaused` in step. */
  pausedChanged(c: VolunteerConnection): void {
    if (c.paused || !this.all.has(c)) this.unpaused.delete(c);
    else this.unpaused.add(c);
  }

  /** The connection of a worker id that said hello, as the dashboard shows it; undefined for none. */
  workerInfo(workerId: string): VolunteerInfo | undefined {
    const c = this.byWorker.get(workerId);
    if (!c) return undefined;
    const d = c.hello?.device;
    return {
      state: c.state,
      wallet: c.wallet,
      backend: c.backend ?? d?.backend ?? null,
      gflops: c.gflops ?? d?.gflops ?? null,
      device: d?.adapter?.description || c.hello?.agent || '',
    };
  }

  /** Closes a worker's connection with a close code (the operator quarantined it). Returns whether it was connected. */
  disconnect(workerId: string, name: CloseName, message: string): boolean {
    const c = this.byWorker.get(workerId);
    if (!c) return false;
    this.closeWith(c, name, message);
    return true;
  }

  /**
   * Tells the worker its slice is no longer needed; it frees the memory and waits again. Returns whether it held one.
   * `holdOffMs` > 0 (an operator's release) keeps it out of offer rounds that long: the market may still want that
   * very slice, and would hand it straight back.
   */
  release(workerId: string, code: ReleaseCode, reason: string, holdOffMs = 0, range?: HeldRange): boolean {
    const c = this.byWorker.get(workerId);
    if (!c) return false;
    const which = [...c.slices.values()].filter((s) => !range || (s.layer === range[0] && s.begin === range[1] && s.end === range[2]));
    if (which.length === 0) return false;
    if (holdOffMs > 0) c.heldOffUntilMs = this.nowMs() + holdOffMs;
    for (const s of which) {
      c.send({ type: 'release', assignmentId: s.assign.assignmentId, code, reason });
      this.host.event(
        'release',
        s.model,
        `${workerId}: ${code} (${reason})${c.maxSlices > 1 ? ` layer ${s.layer} [${s.begin}, ${s.end})` : ''}`,
      );
      this.dropSlice(c, s);
    }
    this.demandChanged();
    return true;
  }

  /** Pushes credit totals to a wallet's connections, with each loaded slice's credit (optional on the wire). */
  credit(wallet: string, total: number): void {
    const of = this.host.sliceCredit?.bind(this.host);
    for (const c of this.byWallet.get(wallet) ?? []) {
      const held = of ? [...c.slices.values()].filter((sl) => sl.loaded) : [];
      c.send({
        type: 'credit',
        credit: total,
        ...(of && held.length > 0 && { slices: held.map((sl) => ({ assignmentId: sl.assign.assignmentId, credit: of(c.workerId, sl) })) }),
      });
    }
  }

  /**
   * The market may have changed (a reading, a worker came or went): offer every idle volunteer a slice, best-suited
   * first (fastest measured backend, then the largest budget). One round at a time; a call during a round runs
   * another after it.
   */
  demandChanged(): void {
    this.offerRound('all');
  }

  /**
   * A volunteer that just became idle (hello, resume) while the market did not change is offered a slice alone: the
   * others were offered theirs when it last changed, and a round over all of them per hello makes 10,000 joining
   * volunteers cost 10,000²/2 offers.
   */
  private offerRound(who: VolunteerConnection | 'all'): void {
    if (this.closed) return;
    if (who === 'all') this.offerTo = 'all';
    else if (this.offerTo === null) this.offerTo = new Set([who]);
    else if (this.offerTo !== 'all') this.offerTo.add(who);
    if (!this.assigning) this.nextRound();
  }

  private nextRound(): void {
    const who = this.offerTo;
    this.offerTo = null;
    if (!who || this.closed) return;
    this.assigning = true;
    void this.assignRound(who === 'all' ? this.unpaused : who)
      .catch((e: unknown) =>
        this.host.event('load-failed', null, `assigning volunteers failed: ${e instanceof Error ? e.message : String(e)}`),
      )
      .finally(() => {
        this.assigning = false;
        if (this.offerTo) setImmediate(() => this.nextRound());
      });
  }

  /** Ends every connection with SHUTTING_DOWN and stops accepting; a second call waits for the first. */
  close(): Promise<void> {
    if (!this.closing) {
      this.closed = true;
      clearInterval(this.sweep);
      for (const c of this.all) this.closeWith(c, 'SHUTTING_DOWN', 'the hub is stopping');
      this.closing = new Promise<void>((resolve) => this.wss.close(() => resolve()));
    }
    return this.closing;
  }

  // --- connections

  private accept(ws: WebSocket, remote: string): void {
    const c = new VolunteerConnection(ws, remote, this, this.nowMs());
    if (this.all.size >= this.options.maxConnections) {
      ws.close(CLOSE_CODES.OVER_CAPACITY.code, closeReason(`the hub holds ${this.options.maxConnections} volunteers`));
      return;
    }
    this.all.add(c);
    this.unpaused.add(c);
    c.countedAs = c.state;
    this.counts[c.countedAs]++;
    const helloTimer = setTimeout(() => {
      if (!c.hello) this.closeWith(c, 'HELLO_TIMEOUT', `no hello within ${this.options.helloTimeoutMs} ms`);
    }, this.options.helloTimeoutMs);
    helloTimer.unref();
    ws.on('message', (data: RawData, isBinary: boolean) => {
      c.lastHeardMs = this.nowMs();
      try {
        const bytes = messageBytes(data);
        if (isBinary) this.onBinary(c, bytes);
        else this.onText(c, bytes);
      } catch (e) {
        if (e instanceof VolunteerWireError) this.closeWith(c, e.code, e.message);
        else this.closeWith(c, 'INTERNAL_ERROR', e instanceof Error ? e.message : String(e));
      }
    });
    ws.on('error', () => {});
    ws.on('close', () => {
      clearTimeout(helloTimer);
      this.gone(c);
    });
  }

  private closeWith(c: VolunteerConnection, name: CloseName, message: string): void {
    if (c.ws.readyState === c.ws.OPEN || c.ws.readyState === c.ws.CONNECTING) c.ws.close(CLOSE_CODES[name].code, closeReason(message));
    // A peer that never completes the closing handshake is cut off.
    setTimeout(() => c.ws.terminate(), 2_000).unref();
  }

  private gone(c: VolunteerConnection): void {
    if (!this.all.delete(c)) return;
    this.unpaused.delete(c);
    if (c.countedAs !== null) this.counts[c.countedAs]--;
    c.countedAs = null;
    const mates = this.byWallet.get(c.wallet);
    if (mates?.delete(c) && mates.size === 0) this.byWallet.delete(c.wallet);
    c.failAll('the volunteer disconnected');
    if (c.workerId && this.byWorker.get(c.workerId) === c) {
      const held = c.slices.size > 0 || c.reserving; // only a slice given up changes what the market wants
      this.byWorker.delete(c.workerId);
      for (const sl of [...c.slices.values()]) this.dropSlice(c, sl);
      if (c.reserving) this.host.forget(c.workerId);
      this.peers?.gone(c.workerId);
      this.host.forget(c.workerId);
      this.host.event('volunteer-leave', null, c.workerId);
      if (held) this.demandChanged();
    }
  }

  /**
   * Closes connections silent for idleTimeoutMs, and pings those quiet for heartbeatMs. The ping is the channel's own
   * (`ping` → `pong`, answered by the page's script from its message event), not a WebSocket protocol ping: a
   * background tab whose timers are throttled to a minute still answers it (message events are not throttled), while
   * a page whose network DevTools cut, or whose script is frozen, does not — its browser would have answered a
   * protocol ping below the page, keeping a volunteer that serves nothing. Volunteers that heartbeat are not pinged:
   * 10,000 pings at once stall the hub for about a second on a loaded 2-core machine (bench/hub.ts).
   */
  private sweepIdle(): void {
    const t = this.nowMs();
    for (const c of this.all) {
      if (!c.hello) continue;
      const quiet = t - c.lastHeardMs;
      // Silent that long, it may not answer the closing handshake either (a cut network, a frozen tab): it is gone
      // from the dispatch map now, within idle timeout + one sweep, not once the handshake gives up.
      if (quiet > this.options.idleTimeoutMs) {
        this.closeWith(c, 'IDLE_TIMEOUT', `nothing heard for ${this.options.idleTimeoutMs} ms`);
        this.gone(c);
      } else if (quiet >= this.options.heartbeatMs) c.ping();
    }
  }

  private onText(c: VolunteerConnection, bytes: Uint8Array): void {
    if (c.state !== 'hello' && !c.allowControl(this.nowMs())) throw new VolunteerWireError('RATE_LIMITED', 'too many control messages');
    const m = parseClientMessage(bytes);
    if (c.state === 'hello') {
      if (m.type !== 'hello') throw new VolunteerWireError('UNEXPECTED_MESSAGE', `expected hello, got ${m.type}`);
      this.onHello(c, m);
      return;
    }
    switch (m.type) {
      case 'hello':
        throw new VolunteerWireError('UNEXPECTED_MESSAGE', 'a second hello');
      case 'loaded': {
        const sl = c.slices.get(m.assignmentId);
        if (sl && this.onLoaded(c, sl, m.ready, m.backend, m.gflops))
          this.peers?.loaded(c.workerId, sl.assign.shardDigest, m.peerBytes, m.hubBytes);
        return;
      }
      case 'peer_report': {
        const sl = c.slices.get(m.assignmentId);
        if (!sl) return; // about an assignment already gone
        const line = this.peers?.report(c.workerId, sl.assign.shardDigest, m);
        if (line) this.host.event('peer-report', sl.model, line);
        return;
      }
      case 'load_failed': {
        const sl = c.slices.get(m.assignmentId);
        if (!sl) return;
        this.host.event('load-failed', sl.model, `${c.workerId}: ${m.code} ${m.message}`);
        const others = c.slices.size > 1;
        this.dropSlice(c, sl); // before the flags: dropping a slice clears `full`
        if (others)
          c.full = true; // it serves what it holds; it takes more once one is released
        else if (m.code === 'DOES_NOT_FIT') {
          const width = sl.end - sl.begin;
          c.maxExperts = Math.floor(width / 2);
          if (c.maxExperts === 0) c.unfit = true;
        } else c.unfit = true; // nothing this volunteer can serve until it reconnects
        this.demandChanged();
        return;
      }
      case 'heartbeat': {
        // Coverage follows what the hub assigned and the worker said it loaded; the heartbeat keeps it fresh.
        for (const sl of c.slices.values()) {
          if (!sl.loaded) continue;
          const holds = m.coverage.some(([l, b, e]) => l === sl.layer && b === sl.begin && e === sl.end);
          if (!holds) throw new VolunteerWireError('UNEXPECTED_MESSAGE', 'a serving worker reported coverage without its slice');
        }
        this.refresh(c);
        return;
      }
      case 'pause':
        c.paused = true;
        this.peers?.paused(c.workerId, true);
        if (c.anyLoaded()) this.rebuildLinks(c.model);
        return;
      case 'resume':
        c.paused = false;
        this.peers?.paused(c.workerId, false);
        if (c.anyLoaded()) this.rebuildLinks(c.model);
        this.offerRound(c);
        return;
      case 'leave':
        c.ws.close(1000, 'left');
        return;
      case 'ping':
        c.send({ type: 'pong', id: m.id });
        return;
      case 'pong':
        return;
    }
  }

  private onHello(c: VolunteerConnection, h: ChannelHello): void {
    if (h.version !== VOLUNTEER_WIRE_VERSION) {
      throw new VolunteerWireError('UNSUPPORTED_VERSION', `this hub speaks version ${VOLUNTEER_WIRE_VERSION}, got ${h.version}`);
    }
    let wallet: string;
    try {
      wallet = this.host.authenticate(`Bearer ${h.token}`);
    } catch (e) {
      throw new VolunteerWireError('BAD_TOKEN', e instanceof Error ? e.message : 'bad token');
    }
    const quarantined = this.host.quarantineReason(h.workerId, wallet);
    if (quarantined) throw new VolunteerWireError('QUARANTINED', quarantined);
    const old = this.byWorker.get(h.workerId);
    // Worker ids are the client's to choose and the dashboard lists them: only its own wallet may take one over.
    if (old && old !== c && old.wallet !== wallet)
      throw new VolunteerWireError('UNEXPECTED_MESSAGE', `worker id ${h.workerId} is connected under another wallet`);
    const { maxPerWallet } = this.options;
    if ((this.byWallet.get(wallet)?.size ?? 0) - (old && old !== c ? 1 : 0) >= maxPerWallet)
      throw new VolunteerWireError('OVER_CAPACITY', `this wallet has ${maxPerWallet} volunteers connected, the most one wallet may`);
    if (old && old !== c) {
      this.closeWith(old, 'REPLACED', 'a newer connection with this worker id took over');
      this.gone(old);
    }
    c.workerId = h.workerId;
    c.wallet = wallet;
    const mates = this.byWallet.get(wallet) ?? new Set<VolunteerConnection>();
    this.byWallet.set(wallet, mates.add(c));
    c.hello = h;
    c.paused = false;
    this.byWorker.set(h.workerId, c);
    const peer = this.peers?.welcome(h.workerId, wallet);
    c.send({
      type: 'welcome',
      version: VOLUNTEER_WIRE_VERSION,
      workerId: h.workerId,
      heartbeatMs: this.options.heartbeatMs,
      idleTimeoutMs: this.options.idleTimeoutMs,
      encoding: this.options.resultEncoding,
      credit: this.host.creditOf(wallet),
      ...(peer ? { peer } : {}),
      ...this.otherHubs(),
    });
    this.host.event(
      'volunteer-join',
      null,
      `${h.workerId} (${h.device.webgpu ? h.device.adapter?.description || 'WebGPU' : 'no WebGPU'}; ${h.agent || 'client'})`,
    );
    this.host.warm?.(this.firstRequest(c));
    this.offerRound(c);
  }

  /** welcome's `hubs`: the cluster's other live hubs (none for a hub alone: the field is left out). */
  private otherHubs(): { hubs?: string[] } {
    const hubs = this.host.otherHubs?.().slice(0, VOLUNTEER_LIMITS.maxHubs) ?? [];
    return hubs.length > 0 ? { hubs } : {};
  }

  /** Returns whether this `loaded` put the slice in service (false: said again, or refused). */
  private onLoaded(c: VolunteerConnection, sl: SliceLink, ready: boolean, backend: string, gflops: number): boolean {
    c.backend = backend;
    c.gflops = gflops;
    // Again for a slice it serves: its engine was rebuilt (a lost GPU device), maybe on another backend.
    if (sl.loaded) return false;
    sl.loaded = true;
    if (sl.loadTimer) clearTimeout(sl.loadTimer);
    sl.loadTimer = null;
    try {
      this.host.serving(c.workerId, c.wallet, sl.model, c.ranges());
    } catch (e) {
      this.closeWith(c, 'QUARANTINED', e instanceof Error ? e.message : String(e));
      return false;
    }
    // `ready` false: it paused while loading, and said `pause` before this; it serves after `resume`.
    if (!ready) c.paused = true;
    this.rebuildLinks(sl.model);
    // One slice at a time: the next is offered once this one serves.
    if (c.maxSlices > 1) this.offerRound(c);
    return true;
  }

  /** Tells the coverage store what the volunteer holds now (a heartbeat, or a slice that came or went). */
  private refresh(c: VolunteerConnection): void {
    const model = c.model;
    if (model === undefined) return;
    try {
      if (c.anyLoaded()) this.host.serving(c.workerId, c.wallet, model, c.ranges());
      else this.host.reserve(c.workerId, model, c.ranges());
    } catch (e) {
      this.closeWith(c, 'QUARANTINED', e instanceof Error ? e.message : String(e));
    }
  }

  private onBinary(c: VolunteerConnection, bytes: Uint8Array): void {
    if (c.state === 'hello') throw new VolunteerWireError('UNEXPECTED_MESSAGE', 'a binary frame before hello');
    const { kind, workId } = peekFrame(bytes);
    if (kind === 'work') throw new VolunteerWireError('BAD_FRAME', 'volunteers do not send work frames');
    const p = c.pending.get(workId);
    if (!p) {
      // An answer to work the hub gave up on is dropped for free (the dispatcher has counted it). A frame for work
      // never sent costs the control bucket by its size: O(1) to drop, and a flood of them is closed.
      if (c.wasLate(workId)) return;
      const cost = 1 + Math.floor(bytes.length / CHANNEL_UNSOLICITED_BYTES_PER_TOKEN);
      if (!c.allowControl(this.nowMs(), cost)) throw new VolunteerWireError('RATE_LIMITED', 'too many frames for work not in flight');
      return;
    }
    if (kind === 'work_failed') {
      const f = decodeWorkFailed(bytes);
      c.settle(workId)?.reject(new WorkError(`${f.code}: ${f.message}`));
      return;
    }
    let r: ReturnType<typeof decodeResult>;
    try {
      r = decodeResult(bytes, { workId, nRows: p.nRows, nEmbd: p.nEmbd, encoding: p.encoding });
    } catch (e) {
      this.host.badResult?.(c.workerId, e instanceof Error ? e.message : String(e));
      throw e;
    }
    this.onResult?.(c.workerId, performance.now() - p.sentAt, r.computeUs);
    c.settle(workId)?.resolve({ sums: r.sums, computeUs: r.computeUs });
  }

  // --- assignments

  /** A slice ends (released, failed, the volunteer gone): its work fails over, its range leaves the coverage store. */
  private dropSlice(c: VolunteerConnection, sl: SliceLink): void {
    if (sl.loadTimer) clearTimeout(sl.loadTimer);
    sl.loadTimer = null;
    if (!c.drop(sl)) return;
    c.full = false;
    this.peers?.dropped(c.workerId, sl.assign.shardDigest);
    c.failAll('released', sl.assign.assignmentId);
    if (c.slices.size === 0) {
      this.assigned.get(sl.model)?.delete(c);
      if (!c.reserving) this.host.forget(c.workerId);
    } else this.refresh(c);
    this.rebuildLinks(sl.model);
  }

  private rebuildLinks(model: string | undefined): void {
    if (!model) return;
    const byLayer = new Map<number, SliceLink[]>();
    for (const c of this.assigned.get(model) ?? []) {
      if (c.paused) continue;
      for (const sl of c.slices.values()) {
        if (!sl.loaded || sl.model !== model) continue;
        const list = byLayer.get(sl.layer) ?? [];
        list.push(sl);
        byLayer.set(sl.layer, list);
      }
    }
    // A stable order (the dispatcher sums partials in it): by first expert, then worker id.
    for (const list of byLayer.values()) list.sort((x, y) => x.begin - y.begin || (x.workerId < y.workerId ? -1 : 1));
    this.links.set(model, byLayer);
  }

  private async assignRound(candidates: Iterable<VolunteerConnection>): Promise<void> {
    const now = this.nowMs();
    const idle = [...candidates].filter((c) => this.offerable(c, now));
    // Those holding nothing first (one slice each before anyone gets a second), then the fastest, then the largest budget.
    idle.sort(
      (x, y) =>
        Number(x.slices.size > 0) - Number(y.slices.size > 0) ||
        speed(y) - speed(x) ||
        budget(y) - budget(x) ||
        (x.workerId < y.workerId ? -1 : 1),
    );
    // Models ('' = any) of which nothing is wanted: assignments in this round only lower demand, so a later volunteer
    // asking for one of them would be refused too, whatever its device.
    const nothingWanted = new Set<string>();
    let i = 0;
    while (i < idle.length) {
      // A batch at a time, best-suited first: its ranges are reserved, then the shards' sizes and digests (one read of
      // each slice not yet known) are looked up a few at a time and each volunteer is sent its assignment as soon as
      // its own is known. The first assignments of a long round leave before everyone has been offered a slice.
      const batch: Array<{ c: VolunteerConnection; answer: Assignment }> = [];
      while (i < idle.length && batch.length < ROUND_BATCH) {
        const c = idle[i++]!;
        const answer = this.reserveFor(c, nothingWanted);
        if (answer) batch.push({ c, answer });
      }
      await inLanes(batch, SHARD_LOOKUPS, ({ c, answer }) => this.sendAssignment(c, answer));
    }
    this.rebalance();
  }

  /**
   * Everything wanted is held, yet volunteers wait with nothing: the holders of several slices give one each their
   * way (market/rebalance.ts), released with REBALANCE; the round that follows offers them to those waiting first.
   */
  private rebalance(): void {
    const now = this.nowMs();
    const waiting: VolunteerConnection[] = [];
    const holders: VolunteerConnection[] = [];
    for (const c of this.unpaused) {
      if (c.slices.size === 0 && !c.rebalanceAsked && this.offerable(c, now)) waiting.push(c);
      else if (!c.paused && c.loadedCount() >= 2) holders.push(c);
    }
    if (waiting.length === 0 || holders.length === 0) return;
    const moves = chooseRebalance(
      waiting.map((c) => ({ id: c.workerId, model: c.hello?.model ?? '', speed: c.gflops ?? c.hello?.device.gflops ?? null })),
      holders.map((c) => ({
        id: c.workerId,
        model: c.model ?? '',
        speed: c.gflops ?? c.hello?.device.gflops ?? null,
        slices: [...c.slices.values()].filter((sl) => sl.loaded).map((sl) => sl.range),
      })),
    );
    for (const m of moves) {
      const to = this.byWorker.get(m.to);
      if (to) to.rebalanceAsked = true;
      this.release(m.from, 'REBALANCE', `a slice moves to ${m.to}, which holds nothing`, 0, m.range);
    }
  }

  /**
   * Whether a round may offer `c` a slice: it said hello, is not paused, refused or held off, loads nothing now, and
   * holds fewer slices than it takes (one, for a client from before multi-slice volunteers).
   */
  private offerable(c: VolunteerConnection, now: number): boolean {
    if (!c.hello || c.paused || c.unfit || c.full || c.reserving || c.heldOffUntilMs > now) return false;
    if (c.slices.size >= c.maxSlices) return false;
    for (const sl of c.slices.values()) if (!sl.loaded) return false;
    return true;
  }

  /** The market's slice for one volunteer, its range reserved and the volunteer loading; null when none. */
  private reserveFor(c: VolunteerConnection, nothingWanted: Set<string>): Assignment | null {
    if (!this.all.has(c) || !this.offerable(c, this.nowMs())) return null;
    const h = c.hello as ChannelHello;
    if (nothingWanted.has('') || nothingWanted.has(c.model ?? h.model)) return null;
    // One model per volunteer; the next slice of one that holds some is of that model, within what its budget has left.
    const request = nextSliceRequest(this.firstRequest(c), { model: c.model ?? h.model, ranges: c.ranges() }, (layer) =>
      c.slices.size > 0 ? this.host.expertBytes(c.model ?? h.model, layer) : 0,
    );
    const model = request.model ?? '';
    if (c.slices.size > 0 && (request.device?.memoryBudgetBytes ?? 1) <= 0) {
      c.full = true;
      return null;
    }
    let answer: VolunteerAnswer;
    try {
      answer = this.host.offer(c.workerId, request);
    } catch (e) {
      // The market refuses this request itself (a model not served here): nothing can be offered to it until it
      // reconnects, and the volunteers after it in this round are still offered theirs.
      c.unfit = true;
      this.host.event('load-failed', null, `${c.workerId}: cannot be offered a slice: ${e instanceof Error ? e.message : String(e)}`);
      return null;
    }
    if (!answer.assigned) {
      if (answer.code === 'nothing-wanted') nothingWanted.add(model);
      // What it holds already fills its budget: no more offers until a slice is released.
      else if (c.slices.size > 0 && answer.code === 'budget-too-small') c.full = true;
      return null;
    }
    // Reserve before the first await: the next volunteer in this round must see this range as taken.
    try {
      this.host.reserve(c.workerId, answer.model, [...c.ranges(), [answer.layer, answer.experts[0], answer.experts[1]]]);
    } catch (e) {
      // The coverage store is full (TOO_MANY_WORKERS): this one waits for the next round.
      this.host.event('load-failed', answer.model, `${c.workerId}: not reserved: ${e instanceof Error ? e.message : String(e)}`);
      return null;
    }
    c.reserving = true;
    return answer;
  }

  /** What a volunteer that holds nothing asks the market for (its hello's model, width, device, variants, types). */
  private firstRequest(c: VolunteerConnection): VolunteerRequest {
    const h = c.hello as ChannelHello;
    return {
      model: h.model,
      maxExperts: c.maxExperts > 0 ? (h.maxExperts > 0 ? Math.min(h.maxExperts, c.maxExperts) : c.maxExperts) : h.maxExperts,
      device: { ...(h.device.limits ?? {}), memoryBudgetBytes: h.device.memoryBudgetBytes },
      ...(h.variants && { variants: h.variants }),
      ...(h.types && { types: h.types }),
    };
  }

  private async sendAssignment(c: VolunteerConnection, answer: Assignment): Promise<void> {
    let shard: { bytes: number; digest: string };
    try {
      shard = await this.host.shard(answer.model, answer.layer, answer.experts[0], answer.experts[1]);
    } catch (e) {
      // Said once per failure: a slice the hub cannot prepare would otherwise be offered again every round unseen.
      const slice = `layer ${answer.layer} experts [${answer.experts[0]}, ${answer.experts[1]})`;
      this.host.event(
        'load-failed',
        answer.model,
        `${c.workerId}: the hub cannot prepare ${slice}: ${e instanceof Error ? e.message : String(e)}`,
      );
      c.reserving = false;
      if (c.slices.size > 0) this.refresh(c);
      else this.host.forget(c.workerId);
      return;
    }
    if (!this.all.has(c) || !c.reserving) {
      if (!this.all.has(c)) this.host.forget(c.workerId);
      return;
    }
    c.reserving = false;
    const query = `model=${encodeURIComponent(answer.model)}&layer=${answer.layer}&expert_begin=${answer.experts[0]}&expert_end=${answer.experts[1]}`;
    const peers = this.peers?.assigning(c.workerId, {
      model: answer.model,
      layer: answer.layer,
      experts: [answer.experts[0], answer.experts[1]],
      digest: shard.digest,
      bytes: shard.bytes,
    });
    const assign: Assign = {
      type: 'assign',
      assignmentId: this.nextAssignment++,
      model: answer.model,
      layer: answer.layer,
      experts: [answer.experts[0], answer.experts[1]],
      nEmbd: answer.n_embd,
      nExpert: answer.n_expert,
      numerics: this.host.numerics(answer.model),
      shardUrl: `/api/expert-shard?model=${encodeURIComponent(answer.model)}&layer=${answer.layer}&expert_begin=${answer.experts[0]}&expert_end=${answer.experts[1]}`,
      shardBytes: shard.bytes,
      shardDigest: shard.digest,
      ...(peers ? { peers, chunksUrl: `/api/expert-shard/chunks?${query}` } : {}),
    };
    const sl = new SliceLink(c, assign);
    c.hold(sl);
    c.rebalanceAsked = false;
    const holders = this.assigned.get(assign.model) ?? new Set<VolunteerConnection>();
    this.assigned.set(assign.model, holders.add(c));
    sl.loadTimer = setTimeout(() => {
      if (c.slices.get(assign.assignmentId) === sl && !sl.loaded)
        this.release(c.workerId, 'LOAD_TIMEOUT', `not loaded within ${this.options.loadTimeoutMs} ms`, 0, sl.range);
    }, this.options.loadTimeoutMs);
    sl.loadTimer.unref();
    c.send(assign);
  }
}

/** Volunteers reserved at a time in a round before their assignments are sent. */
const ROUND_BATCH = 64;
/**
 * Shard lookups at once in a round (each may open and read the model file once). A first lookup of a slice is a few
 * trips through libuv's thread pool, so a push of hundreds is set by how many are in flight, not by CPU: 32 rather
 * than 8 took 250 pushed a hub from 1.2 / 3.0 s (p50 / last) to 0.8 / 1.9 s (bench:hub --hubs 4, docs/cluster.md).
 */
const SHARD_LOOKUPS = 32;

const speed = (c: VolunteerConnection): number => c.hello?.device.gflops ?? 0;
const budget = (c: VolunteerConnection): number => c.hello?.device.memoryBudgetBytes ?? 0;
