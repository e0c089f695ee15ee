/**
 * The Layer-1 dispatcher's I/O shell for one model: a unix socket server that the model's coordinator
 * (`linkcpp-server --expert-dispatch PATH`) connects to, speaking docs/dispatch-protocol.md. Per REQUEST it takes a
 * snapshot (the layer's worker links, their measured speed, the poller's saturation reading — never awaited), asks
 * the Layer-1 policy (policy.ts) about each worker, plans the pairs (plan.ts), sends each chosen worker one work item
 * through its `WorkerLink`, waits for the answers until each worker's deadline, sums the partials and answers SERVED
 * with the served flags — or LOCAL at once when nothing was dispatched (it never waits for nothing).
 *
 *   const d = await ModelDispatcher.listen({ model: 'qwen3', socketPath, directory, mode: 'auto',
 *     saturation: () => poller.reading('qwen3'), record: (id) => dispatchMap.record(id),
 *     metrics: dispatchMetrics, events: { onServe: (id, atMs, ms) => dispatchMap.recordServe(id, atMs, ms) } });
 *   ...; await d.close();
 *
 * A pair is never lost: a timeout, a failed or closed link, a wrong-sized or non-finite answer all leave the pair
 * "not served", and the coordinator computes it. Answers after their deadline are dropped and counted (late).
 *
 * Coordinator connections: one at a time. A new connection REPLACES the current one (whose request in flight, if
 * any, is abandoned): the coordinator only reconnects after it has given up on its connection (a timeout or an
 * invalid frame on its side), possibly before this side has seen the old one close, so refusing the newcomer would
 * lock the coordinator out until then. The socket file is mode 0600: only this user can connect.
 *
 * Bounds: frame sizes (protocol caps, then the HELLO's shape: no frame may exceed the largest valid REQUEST); bytes
 * buffered from the coordinator (one frame); bytes written and not yet read by it; one request in flight (the
 * coordinator sends one at a time; a second is a protocol violation); HELLO within `helloTimeoutMs`; every worker
 * wait within the coordinator's deadline less a margin, capped (plan.ts `requestBudgetMs`).
 */
import { constants as fsConstants } from 'node:fs';
import { access, chmod, rm } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { Counter, Histogram, type Registry } from 'prom-client';
import { type WorkerStateInput, workerState } from './map.ts';
import type { SlotsReading } from '../market/saturation.ts';
import {
  DISPATCH_LIMITS,
  DispatchProtocolError,
  type DispatchRequest,
  type FrameHeader,
  FrameKind,
  FrameReader,
  HEADER_BYTES,
  type Hello,
  decodeAudit,
  decodeHello,
  decodeRequest,
  type DispatchVersion,
  checkVersion,
  type DispatchOffer,
  draftResult,
  encodeClaim,
  encodeHelloAck,
  negotiateVersion,
  offerBitmapBytes,
  sealResult,
} from '../../protocol/dispatch.ts';
import { type ClaimConfig, type ClaimReason, DEFAULT_CLAIMS, claimCaps, type OfferWorker, offerLine } from './claims.ts';
import {
  DEFAULT_DEADLINES,
  type DeadlineConfig,
  type LatencyModel,
  type PlanWorker,
  type RequestPlan,
  checkPartial,
  gatherRows,
  latencyLine,
  mergePartials,
  restartLine,
  newLatencyModel,
  observeRoundTrip,
  planRequest,
  requestBudgetMs,
  shadowDeadlineMs,
  workerDeadlineMs,
} from './plan.ts';
import {
  DEFAULT_LAYER_ONE,
  DISPATCH_MODES,
  type DispatchMode,
  type LayerOneConfig,
  type PolicyReason,
  type SaturationSnapshot,
} from './policy.ts';
import { type AuditChooser, type AuditResult, compareAudit, pickAuditItems } from './audits.ts';
import { type AwaitingAudit, type Withheld, auditWithheld, dropUnusable, encodeV1Answer, encodeV1Local, withholdAudited } from './v1.ts';
import { type Admitted, type Candidate, coveredPairs, planWorkerOf, selectCandidates } from './candidates.ts';
import {
  declineQuietMs,
  keepWarmDue,
  probationWorker,
  provenWarm,
  quietUntilProbeMs,
  shadowProbeBooking,
  shadowProbeWorker,
  warmFollowUp,
} from './probes.ts';
import type { WorkAnswer, WorkItem, WorkerDirectory, WorkerLink } from './worker-link.ts';

/** The link contract, also importable from here (hub/channel/channel.ts does). */
export type { WorkAnswer, WorkItem, WorkerDirectory, WorkerLink };

/**
 * An item sent to a worker that has nothing outstanding and has not answered for this long is a cold sample of its
 * speed (plan.ts `LatencyModel`): an idle volunteer's event loop and engine wake up slowly (bench:elastic: 19 ms probes
 * against a 3.4 ms warm round trip), and that is not what its next items under load will take.
 */
export const COLD_AFTER_IDLE_MS = 500;

// ---------------------------------------------------------------------------------------------
// What the hub plugs in (besides the links and directory of worker-link.ts)

export type CoordinatorEvent =
  /** A coordinator connected (`detail`: whether it replaced another connection). */
  | 'connected'
  /** HELLO accepted (`detail`: the model description). */
  | 'hello'
  /** HELLO refused by `acceptHello`. */
  | 'refused'
  /** The connection broke a protocol rule and was dropped (`detail`: the error). */
  | 'protocol-error'
  | 'closed';

export type MissKind = 'timeout' | 'error' | 'wrong-size' | 'non-finite';

/** One answered REQUEST (for tracing and measurements); times in ms from the REQUEST's arrival. */
export interface ResponseSummary {
  seq: number;
  layer: number;
  pairs: number;
  served: number;
  fallback: number;
  rejected: number;
  mode: 'local' | 'served';
  /** Workers a work item went to. */
  workers: number;
  /** Until the work items were handed to the links. */
  dispatchMs: number;
  /** Until the last answer (or deadline) that the response waited for. */
  settledMs: number;
  /** Until the response was written. */
  totalMs: number;
  /** Tokens of the REQUEST (its pairs are nTokens × nUsed). */
  nTokens: number;
  /** The REQUEST's `local_ns_per_pair`: the coordinator's per-pair EMA for this layer before it computed this one. */
  localNsPerPair: number;
  /** Pairs claimed (v2: sent to workers not in shadow; the coordinator computes the rest in its first pass). */
  claimed: number;
  /** The quiet window the answer gave this layer, ms (0: the coordinator asks again on its next evaluation). */
  quietMs: number;
  /** v3: the pairs the coordinator pre-claimed under a standing offer (0: a CLAIM exchange). */
  preclaimed?: number;
  /** v3: whether the RESULT carried an offer for the layer's next REQUEST. */
  offered?: boolean;
}

/** The slice a link serves (a volunteer holding several has one link each): per-slice pairs and credit. */
export type SliceOfLink = Pick<WorkerLink, 'layer' | 'begin' | 'end'>;

/** Callbacks the hub hooks into the DispatchMap, the event log and the dashboards. All optional; none may throw. */
export interface DispatcherEvents {
  /**
   * A worker answered in time with a valid partial (used or not: shadow items count too):
   * `DispatchMap.recordServe(workerId, atMs, latencyMs)`.
   */
  onServe?(workerId: string, atMs: number, latencyMs: number, pairs: number, slice: SliceOfLink): void;
  /** A worker's answer went into the sums the coordinator was sent: its pairs were computed by it (credit), with `slice`. */
  onUsed?(workerId: string, pairs: number, slice: SliceOfLink): void;
  /** A work item not served: timed out, failed, or answered with a wrong-sized or non-finite partial. */
  onMiss?(workerId: string, kind: MissKind, consecutive: number): void;
  /** A worker was benched (true) or came back (false). */
  onBench?(workerId: string, benched: boolean): void;
  /** An answer came after its deadline and was dropped. */
  onLate?(workerId: string, pairs: number, lateByMs: number): void;
  onCoordinator?(event: CoordinatorEvent, detail: string): void;
  onResponse?(summary: ResponseSummary): void;
  /** A worker's withheld answer compared with the coordinator's own sums for the same pairs. */
  onAudit?(workerId: string, result: AuditResult): void;
}

// ---------------------------------------------------------------------------------------------
// Metrics

/**
 * The dispatcher's Prometheus metrics; one instance per registry, shared by every model's dispatcher.
 * `expertswarm_dispatch_pairs_total{model,outcome}`: every routed pair once, when its REQUEST is answered — served (in
 * the sums), fallback (the coordinator computes it: no eligible worker, a timeout, a failed link) or rejected (a
 * worker answered in time with a wrong-sized or non-finite partial); plus `late` for the pairs of an answer that came
 * after its deadline (already counted as fallback). So served / (served + fallback + rejected) is the share of routed
 * pairs the swarm computed.
 */
export class DispatchMetrics {
  readonly pairs: Counter<'model' | 'outcome'>;
  readonly requests: Counter<'model' | 'mode'>;
  readonly roundtrip: Histogram<'model'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.pairs = new Counter({
      name: 'expertswarm_dispatch_pairs_total',
      help: 'Routed (token, expert) pairs by outcome: served, fallback, rejected; late counts answers after their deadline.',
      labelNames: ['model', 'outcome'],
      registers,
    });
    this.requests = new Counter({
      name: 'expertswarm_dispatch_requests_total',
      help: 'Coordinator requests answered, by mode: local (nothing served) or served.',
      labelNames: ['model', 'mode'],
      registers,
    });
    this.roundtrip = new Histogram({
      name: 'expertswarm_dispatch_roundtrip_seconds',
      help: 'From a dispatched request to its answer, as the dispatcher sees it.',
      labelNames: ['model'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5],
      registers,
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Options and state

export interface DispatcherLimits {
  /** A connection that has not said HELLO after this long is dropped. */
  helloTimeoutMs: number;
  /** Bytes written to the coordinator and not yet read by it; beyond this the connection is dropped. */
  maxUnreadBytes: number;
  /** Workers whose statistics are kept; beyond this the longest unseen is forgotten. */
  maxTrackedWorkers: number;
}

export const DEFAULT_DISPATCHER_LIMITS: Readonly<DispatcherLimits> = Object.freeze({
  helloTimeoutMs: 10_000,
  maxUnreadBytes: DISPATCH_LIMITS.maxPayload + HEADER_BYTES,
  maxTrackedWorkers: 10_000,
});

export interface ModelDispatcherOptions {
  /** The hub's name of the model (metrics label). */
  model: string;
  socketPath: string;
  directory: WorkerDirectory;
  /** `--dispatch`; changeable later through `mode`. */
  mode?: DispatchMode;
  policy?: Partial<LayerOneConfig>;
  deadlines?: Partial<DeadlineConfig>;
  /** Protocol v2's claim caps (claims.ts): probe size, the gain a split must bring. */
  claims?: Partial<ClaimConfig>;
  limits?: Partial<DispatcherLimits>;
  /** The poller's latest reading of this model's coordinator (`SaturationPoller.reading`); must not block. */
  saturation?: () => SlotsReading | undefined;
  /** The worker's dispatch-map record (`DispatchMap.record`): attach time, released, quarantined. */
  /** What the dispatcher reads of the hub's dispatch-map record (hub/dispatch/map.ts `DispatchMap.record`). */
  record?: (workerId: string) => WorkerStateInput | undefined;
  metrics?: DispatchMetrics;
  events?: DispatcherEvents;
  /** Decides whether to serve this coordinator: 0 accepts, any other value refuses with that code. */
  acceptHello?: (hello: Hello) => number;
  /**
   * `quiet_ms` asked for in a LOCAL answer when the layer has no live worker link or the mode is off, so the
   * coordinator builds its stock graph meanwhile (0: none). A worker joining waits at most this long for its first
   * request. Default 1000.
   */
  quietMs?: number;
  chooseAudit?: AuditChooser;
  /**
   * Whether a worker's answers may go into the sums (trust.ts `mayUse`; default: every worker's). The items of one
   * that may not are still sent — audited where `chooseAudit` picks them, that is how it earns trust — but never used:
   * v2 sends them in shadow (not claimed), v1 withholds their answers.
   */
  mayUse?: (workerId: string) => boolean;
  /** Wall clock (ms) for attach / serve times; the dispatch map's clock. */
  clock?: () => number;
  /**
   * v3: whether a spot check of these workers is due (trust: probation, or the spot-check draw). When it says so, the
   * RESULT carries no standing offer, the next REQUEST of the layer is a CLAIM exchange, and `chooseAudit` is told the
   * check is owed. Absent: no checks are owed (offers follow `offerBreakEvery` alone).
   */
  auditDue?: (workerIds: readonly string[]) => boolean;
}

/** What the dispatcher has measured of one worker. */
export interface WorkerDispatchStats {
  readonly workerId: string;
  firstSeenMs: number;
  lastSeenMs: number;
  lastServeMs: number | null;
  latency: LatencyModel;
  servedItems: number;
  servedPairs: number;
  misses: number;
  consecutiveMisses: number;
  rejected: number;
  lateAnswers: number;
  benchedAtMs: number | null;
  lastProbeMs: number | null;
  /**
   * v2: when it may next be given a probe in shadow (null: at once). Probes back off with consecutive misses and with
   * consecutive probes that did not win the worker a claim, and none is sent while the worker still has work
   * outstanding, so a slow worker is not kept busy by probes alone.
   */
  nextShadowProbeMs: number | null;
  /** v2: shadow probes sent since the worker was last claimed pairs. */
  shadowStreak: number;
  /** Items sent and not settled yet (late ones included). */
  outstanding: number;
  /** When it last answered anything (performance.now(); null: never): an item after a long gap is a cold sample. */
  lastAnswerAt: number | null;
  /** When it last answered a claimed item in time (the dispatcher's clock): it is proven warm for a while (probes.ts). */
  lastClaimedServeMs: number | null;
  /** v2: when it may next be given a keep-warm claim (claims.ts; null: at once). */
  nextKeepWarmMs: number | null;
}

export interface DispatcherTotals {
  connections: number;
  protocolErrors: number;
  requests: number;
  localRequests: number;
  servedRequests: number;
  /**
   * served + fallback + rejected = every routed pair; late ⊆ fallback (answers after their deadline); audited ⊆
   * fallback (answered, withheld for an audit: the coordinator computed them).
   */
  pairs: { served: number; fallback: number; rejected: number; late: number; audited: number };
  /** Policy decisions by reason, per (worker, request). */
  decisions: Partial<Record<PolicyReason, number>>;
  /** v2 claim caps by reason, per (worker, request) that the Layer-1 policy let through. */
  claims: Partial<Record<ClaimReason, number>>;
  /** v3: RESULTs that carried a standing offer, and REQUESTs that came pre-claimed under one (with their pairs). */
  offers: { made: number; preclaimed: number; preclaimedPairs: number };
}

const PENDING = 0;
const ANSWERED = 1;
const TIMED_OUT = 2;
const FAILED = 3;

interface InFlight {
  readonly conn: Connection;
  /**
   * v2: items sent in shadow, never claimed and never in the sums: audited ones (their answers go to `audit`) and
   * speed probes of workers the claim caps left out (their answers only refresh the worker's measured speed).
   */
  readonly shadow: boolean[];
  /** v2: per item, its index in `audit.items` (-1: not audited). */
  readonly auditItem: number[];
  audit: PendingAudit | null;
  readonly req: DispatchRequest;
  readonly plan: RequestPlan;
  readonly links: WorkerLink[];
  readonly stats: WorkerDispatchStats[];
  readonly partials: Array<Float32Array | null>;
  readonly state: Uint8Array;
  readonly rejectedPairs: number[];
  readonly timers: Array<NodeJS.Timeout | undefined>;
  readonly arrivedAt: number;
  /** v3: pairs the coordinator pre-claimed (no CLAIM was written); 0 for a CLAIM exchange. */
  readonly preclaimed: number;
  dispatchedAt: number;
  settledAt: number;
  remaining: number;
  abandoned: boolean;
}

interface Connection {
  readonly socket: Socket;
  readonly reader: FrameReader;
  hello: Hello | null;
  /** The version the connection speaks, agreed at HELLO (the coordinator's offer, at most DISPATCH_VERSION). */
  version: DispatchVersion;
  /** Bytes received and not yet returned as a frame. */
  buffered: number;
  maxFrameBytes: number;
  helloTimer: NodeJS.Timeout | undefined;
  inFlight: InFlight | null;
  /** Withheld partials waiting for the coordinator's AUDIT frame of the same seq. */
  awaitingAudit: AwaitingAudit | null;
  /** v2: the shadow items of the request whose AUDIT frame is awaited (its AUDIT comes before the next REQUEST). */
  pendingAudit: PendingAudit | null;
  /** Per layer: REQUESTs in a row the split left to the coordinator alone (probes.ts `declineQuietMs`). */
  readonly declineStreak: Map<number, number>;
  /** v3, per layer: RESULTs written (every `offerBreakEvery`-th carries no offer). */
  readonly offerCount: Map<number, number>;
  /** v3: layers whose next CLAIM exchange owes a spot check (an offer was withheld for it). */
  readonly auditOwed: Set<number>;
  closed: boolean;
}

/**
 * v2: the items of one request sent in shadow, and the coordinator's AUDIT sums for them — each may come first. An
 * item is compared once both are there; one that fails or is late is dropped.
 */
interface PendingAudit {
  seq: number;
  layer: number;
  trusted: Float32Array | null;
  items: Array<{
    workerId: string;
    rowToken: ArrayLike<number>;
    nRows: number;
    nPairs: number;
    partial: Float32Array | null;
    done: boolean;
  }>;
}

export const DEFAULT_QUIET_MS = 1000;

/** REQUEST's fixed fields (docs/dispatch-protocol.md). */
const REQUEST_FIXED_BYTES = 24;
/** HELLO's fixed fields. */
const HELLO_FIXED_BYTES = 28;

function largestRequestFrame(nEmbd: number): number {
  const r = DISPATCH_LIMITS.maxRows;
  return HEADER_BYTES + Math.min(DISPATCH_LIMITS.maxPayload, REQUEST_FIXED_BYTES + 4 * (r * nEmbd + 2 * r * DISPATCH_LIMITS.maxUsed));
}

/** A REQUEST's state from its plan on: every item pending, none in shadow or audited yet. */
function newInFlight(conn: Connection, req: DispatchRequest, plan: RequestPlan, arrivedAt: number, preclaimed: number): InFlight {
  const n = plan.workers.length;
  return {
    conn,
    shadow: new Array(n).fill(false),
    auditItem: new Array(n).fill(-1),
    audit: null,
    req,
    plan,
    links: new Array(n),
    stats: new Array(n),
    partials: new Array(n).fill(null),
    state: new Uint8Array(n),
    rejectedPairs: new Array(n).fill(0),
    timers: new Array(n),
    arrivedAt,
    preclaimed,
    dispatchedAt: 0,
    settledAt: 0,
    remaining: n,
    abandoned: false,
  };
}

/** Resolves true when something accepts connections at `path` (a live dispatcher must not be unlinked). */
function socketIsLive(path: string, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(path);
    const done = (live: boolean): void => {
      clearTimeout(t);
      s.destroy();
      resolve(live);
    };
    const t = setTimeout(() => done(false), timeoutMs);
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
  });
}

export class ModelDispatcher {
  mode: DispatchMode;
  readonly totals: DispatcherTotals = {
    connections: 0,
    protocolErrors: 0,
    requests: 0,
    localRequests: 0,
    servedRequests: 0,
    pairs: { served: 0, fallback: 0, rejected: 0, late: 0, audited: 0 },
    decisions: {},
    claims: {},
    offers: { made: 0, preclaimed: 0, preclaimedPairs: 0 },
  };
  private readonly policyCfg: LayerOneConfig;
  private readonly deadlineCfg: DeadlineConfig;
  private readonly claimCfg: ClaimConfig;
  private readonly limits: DispatcherLimits;
  private readonly workers = new Map<string, WorkerDispatchStats>();
  private readonly clock: () => number;
  private readonly events: DispatcherEvents;
  private conn: Connection | null = null;
  /** Every open socket (a refused or replaced one may still be closing): close() destroys them all. */
  private readonly sockets = new Set<Socket>();
  private lastHello: Hello | null = null;
  private closing = false;
  /** Reused for workerState: the policy runs per worker per request. */
  private readonly scratch: WorkerStateInput = { attachMs: 0, lastServeMs: null, released: false, quarantined: false };

  private constructor(
    private readonly opts: ModelDispatcherOptions,
    private readonly server: Server,
  ) {
    this.mode = opts.mode ?? 'auto';
    if (!DISPATCH_MODES.includes(this.mode)) throw new RangeError(`dispatch mode ${String(this.mode)} is not one of ${DISPATCH_MODES}`);
    this.policyCfg = { ...DEFAULT_LAYER_ONE, ...opts.policy };
    this.deadlineCfg = { ...DEFAULT_DEADLINES, ...opts.deadlines };
    this.claimCfg = { ...DEFAULT_CLAIMS, ...opts.claims };
    this.limits = { ...DEFAULT_DISPATCHER_LIMITS, ...opts.limits };
    this.clock = opts.clock ?? Date.now;
    this.events = opts.events ?? {};
  }

  /**
   * Listens on `socketPath`: a stale socket file is removed first (a live one — another dispatcher answering there —
   * is an error, not stolen), and the new one gets mode 0600.
   */
  static async listen(opts: ModelDispatcherOptions): Promise<ModelDispatcher> {
    const path = opts.socketPath;
    if (
      await access(path, fsConstants.F_OK).then(
        () => true,
        () => false,
      )
    ) {
      if (await socketIsLive(path)) throw new Error(`${path} is in use by another dispatcher`);
      await rm(path, { force: true });
    }
    const server = createServer({ allowHalfOpen: false });
    const d = new ModelDispatcher(opts, server);
    server.on('connection', (s) => d.onConnection(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => {
        server.off('error', reject);
        resolve();
      });
    });
    server.on('error', () => {}); // a listening unix server has nothing left to fail on but accept errors
    await chmod(path, 0o600);
    return d;
  }

  /** Switches the mode for the next REQUEST on (`auto`, `always`, `off`); the one in flight keeps its decision. */
  setMode(mode: DispatchMode): void {
    if (!DISPATCH_MODES.includes(mode)) throw new RangeError(`dispatch mode ${String(mode)} is not one of ${DISPATCH_MODES}`);
    this.mode = mode;
  }

  get socketPath(): string {
    return this.opts.socketPath;
  }

  /** The connected coordinator's HELLO (the last one, after it disconnects); null before any. */
  get hello(): Hello | null {
    return this.lastHello;
  }

  get connected(): boolean {
    return this.conn?.hello != null;
  }

  /** The protocol version of the current connection (null when none). */
  get protocolVersion(): DispatchVersion | null {
    return this.conn?.hello ? this.conn.version : null;
  }

  workerStats(workerId: string): Readonly<WorkerDispatchStats> | undefined {
    return this.workers.get(workerId);
  }

  allWorkerStats(): IterableIterator<Readonly<WorkerDispatchStats>> {
    return this.workers.values();
  }

  /** Whether the worker is benched now (missed `benchAfterMisses` deadlines in a row, no answer in time since). */
  isBenched(workerId: string): boolean {
    return (this.workers.get(workerId)?.benchedAtMs ?? null) !== null;
  }

  /** Drops what the dispatcher measured of a worker (the hub evicted it). */
  forget(workerId: string): void {
    this.workers.delete(workerId);
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.conn) this.drop(this.conn, null);
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await rm(this.opts.socketPath, { force: true });
  }

  // -------------------------------------------------------------------------------------------
  // Connection

  private onConnection(socket: Socket): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    const replaced = this.conn !== null;
    if (this.conn) this.drop(this.conn, null);
    const conn: Connection = {
      socket,
      reader: new FrameReader(),
      hello: null,
      buffered: 0,
      maxFrameBytes: HEADER_BYTES + HELLO_FIXED_BYTES + DISPATCH_LIMITS.maxModelDesc,
      helloTimer: undefined,
      version: 1,
      inFlight: null,
      awaitingAudit: null,
      pendingAudit: null,
      declineStreak: new Map(),
      offerCount: new Map(),
      auditOwed: new Set(),
      closed: false,
    };
    this.conn = conn;
    this.totals.connections++;
    conn.helloTimer = setTimeout(
      () => this.violation(conn, `no HELLO within ${this.limits.helloTimeoutMs} ms`),
      this.limits.helloTimeoutMs,
    );
    socket.on('data', (chunk: Buffer) => this.onData(conn, chunk));
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.onClose(conn));
    this.emitCoordinator('connected', replaced ? 'replaced the previous connection' : '');
  }

  private onData(conn: Connection, chunk: Buffer): void {
    if (conn.closed) return;
    conn.buffered += chunk.length;
    let frames: ReturnType<FrameReader['push']>;
    try {
      frames = conn.reader.push(chunk);
    } catch (e) {
      this.violation(conn, (e as Error).message);
      return;
    }
    for (const { header, payload } of frames) {
      conn.buffered -= HEADER_BYTES + payload.length;
      if (conn.closed) return;
      try {
        this.onFrame(conn, header, payload);
      } catch (e) {
        this.violation(conn, e instanceof DispatchProtocolError ? e.message : `internal error: ${(e as Error).message}`);
        return;
      }
    }
    if (conn.buffered > conn.maxFrameBytes) {
      this.violation(conn, `DISPATCH_TOO_LARGE: more than ${conn.maxFrameBytes} bytes buffered for one frame`);
    }
  }

  private onFrame(conn: Connection, header: FrameHeader, payload: Uint8Array): void {
    if (conn.hello) checkVersion(header, conn.version);
    switch (header.kind) {
      case FrameKind.Hello: {
        if (conn.hello) throw new DispatchProtocolError('DISPATCH_BAD_KIND', 'a second HELLO on one connection');
        const hello = decodeHello(payload);
        clearTimeout(conn.helloTimer);
        const code = this.opts.acceptHello?.(hello) ?? 0;
        if (code !== 0) {
          conn.socket.end(encodeHelloAck(false, code), () => conn.socket.destroy());
          conn.closed = true;
          this.emitCoordinator('refused', `code ${code}: ${hello.modelDesc}`);
          return;
        }
        conn.version = negotiateVersion(header.version);
        conn.hello = hello;
        this.lastHello = hello;
        conn.maxFrameBytes = largestRequestFrame(hello.nEmbd);
        this.write(conn, encodeHelloAck(true, 0, conn.version));
        this.emitCoordinator('hello', `${hello.modelDesc} (protocol v${conn.version})`);
        return;
      }
      case FrameKind.Request: {
        const hello = conn.hello;
        if (!hello) throw new DispatchProtocolError('DISPATCH_BAD_KIND', 'a REQUEST before HELLO');
        if (conn.inFlight)
          throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `REQUEST ${header.seq} while ${conn.inFlight.req.seq} is in flight`);
        const req = decodeRequest(header, payload, hello.nExpert);
        // The coordinator sends AUDIT before its next REQUEST; one still awaited was not sent (it dropped the layer).
        conn.awaitingAudit = null;
        conn.pendingAudit = null;
        if (req.nEmbd !== hello.nEmbd)
          throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `n_embd ${req.nEmbd}, HELLO said ${hello.nEmbd}`);
        if (req.layer >= hello.nLayer) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `layer ${req.layer} of ${hello.nLayer}`);
        this.onRequest(conn, req);
        return;
      }
      case FrameKind.Audit: {
        // v1: withheld answers wait in awaitingAudit; v2: shadow items in pendingAudit (their answers may come later).
        const hello = conn.hello;
        const waiting = conn.version >= 2 ? conn.pendingAudit : conn.awaitingAudit;
        if (!hello || !waiting || waiting.seq !== header.seq)
          throw new DispatchProtocolError('DISPATCH_BAD_KIND', `an AUDIT (seq ${header.seq}) nobody asked for`);
        conn.awaitingAudit = null;
        conn.pendingAudit = null;
        const a = decodeAudit(header, payload, hello.nEmbd);
        if (a.layer !== waiting.layer)
          throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `AUDIT of layer ${a.layer}, asked for ${waiting.layer}`);
        if (conn.version >= 2) {
          const pending = waiting as PendingAudit;
          pending.trusted = a.sums;
          this.compareShadow(pending, hello.nEmbd);
        } else {
          for (const [workerId, result] of auditWithheld(waiting as AwaitingAudit, a.sums, hello.nEmbd))
            this.events.onAudit?.(workerId, result);
        }
        return;
      }
      default:
        throw new DispatchProtocolError('DISPATCH_BAD_KIND', `frame kind ${header.kind} is not sent by a coordinator`);
    }
  }

  private violation(conn: Connection, message: string): void {
    if (conn.closed) return;
    this.totals.protocolErrors++;
    this.drop(conn, message);
  }

  /** Closes a connection; its request in flight (if any) is abandoned: the coordinator computes every pair of it. */
  private drop(conn: Connection, error: string | null): void {
    if (!conn.closed) {
      conn.closed = true;
      conn.socket.destroy();
    }
    this.cleanup(conn);
    if (error !== null) this.emitCoordinator('protocol-error', error);
  }

  private onClose(conn: Connection): void {
    conn.closed = true;
    this.cleanup(conn);
    this.emitCoordinator('closed', '');
  }

  private cleanup(conn: Connection): void {
    clearTimeout(conn.helloTimer);
    const f = conn.inFlight;
    if (f && !f.abandoned) {
      f.abandoned = true;
      for (const t of f.timers) clearTimeout(t);
      conn.inFlight = null;
    }
    if (this.conn === conn) this.conn = null;
  }

  private write(conn: Connection, bytes: Uint8Array): void {
    if (conn.closed) return;
    conn.socket.write(bytes);
    if (conn.socket.writableLength > this.limits.maxUnreadBytes) {
      this.violation(conn, `the coordinator left more than ${this.limits.maxUnreadBytes} bytes unread`);
    }
  }

  private emitCoordinator(event: CoordinatorEvent, detail: string): void {
    this.events.onCoordinator?.(event, detail);
  }

  // -------------------------------------------------------------------------------------------
  // Requests

  private stats(workerId: string, nowMs: number): WorkerDispatchStats {
    let s = this.workers.get(workerId);
    if (!s) {
      if (this.workers.size >= this.limits.maxTrackedWorkers) this.evictOldest();
      s = {
        workerId,
        firstSeenMs: nowMs,
        lastSeenMs: nowMs,
        lastServeMs: null,
        latency: newLatencyModel(),
        servedItems: 0,
        servedPairs: 0,
        misses: 0,
        consecutiveMisses: 0,
        rejected: 0,
        lateAnswers: 0,
        benchedAtMs: null,
        lastProbeMs: null,
        nextShadowProbeMs: null,
        shadowStreak: 0,
        outstanding: 0,
        lastAnswerAt: null,
        lastClaimedServeMs: null,
        nextKeepWarmMs: null,
      };
      this.workers.set(workerId, s);
    }
    s.lastSeenMs = nowMs;
    return s;
  }

  private evictOldest(): void {
    let oldest: WorkerDispatchStats | undefined;
    for (const s of this.workers.values()) if (!oldest || s.lastSeenMs < oldest.lastSeenMs) oldest = s;
    if (oldest) this.workers.delete(oldest.workerId);
  }

  private saturationSnapshot(nowMs: number): SaturationSnapshot | null {
    const r = this.opts.saturation?.();
    if (!r || r.source === 'unknown') return null;
    return { busy: r.busy, slots: r.slots, ageMs: Math.max(0, nowMs - r.atMs) };
  }

  private answerLocal(conn: Connection, req: DispatchRequest, quietMs: number, arrivedAt: number): void {
    const pairs = req.nTokens * req.nUsed;
    const head = { seq: req.seq, layer: req.layer, nTokens: req.nTokens, nUsed: req.nUsed, quietMs };
    this.write(conn, conn.version >= 2 ? encodeClaim({ ...head, claimed: null }, conn.version) : encodeV1Local(head));
    this.totals.localRequests++;
    this.totals.pairs.fallback += pairs;
    const m = this.opts.metrics;
    if (m) {
      m.requests.inc({ model: this.opts.model, mode: 'local' });
      m.pairs.inc({ model: this.opts.model, outcome: 'fallback' }, pairs);
    }
    if (this.events.onResponse) {
      const ms = performance.now() - arrivedAt;
      this.events.onResponse({
        seq: req.seq,
        layer: req.layer,
        pairs,
        served: 0,
        fallback: pairs,
        rejected: 0,
        mode: 'local',
        workers: 0,
        dispatchMs: ms,
        settledMs: ms,
        totalMs: ms,
        nTokens: req.nTokens,
        localNsPerPair: req.localNsPerPair,
        claimed: 0,
        quietMs,
      });
    }
  }

  private onRequest(conn: Connection, req: DispatchRequest): void {
    const arrivedAt = performance.now();
    const nowMs = this.clock();
    this.totals.requests++;
    const quiet = Math.min(this.opts.quietMs ?? DEFAULT_QUIET_MS, DISPATCH_LIMITS.maxQuietMs);
    if (req.preclaimed) {
      this.onPreclaimed(conn, req, req.preclaimed, arrivedAt, nowMs);
      return;
    }
    if (this.mode === 'off') {
      this.answerLocal(conn, req, quiet, arrivedAt);
      return;
    }
    const links = this.opts.directory.workersFor(req.layer);
    const budgetMs = requestBudgetMs(req.deadlineUs, this.deadlineCfg);
    if (links.length === 0 || budgetMs <= 0) {
      this.answerLocal(conn, req, links.length === 0 ? quiet : 0, arrivedAt);
      return;
    }

    const nExpert = (conn.hello as Hello).nExpert;
    // v2: workers whose answers may not be used yet (probation) are planned apart from the rest (below); covering
    // workers the policy declined for want of proof (never served, benched) may be probed in shadow under v2, where
    // nothing waits on a probe.
    const v2 = conn.version >= 2;
    const candidates: Candidate<WorkerLink, WorkerDispatchStats>[] = [];
    for (const link of links) {
      const covered = coveredPairs(req, link, nExpert);
      if (covered === 0) continue;
      const st = this.stats(link.workerId, nowMs);
      const rec = this.opts.record?.(link.workerId);
      const r = this.scratch;
      r.attachMs = rec?.attachMs ?? st.firstSeenMs;
      r.lastServeMs = st.lastServeMs ?? rec?.lastServeMs ?? null;
      r.released = rec?.released ?? false;
      r.quarantined = rec?.quarantined ?? false;
      candidates.push({ link, stats: st, covered, state: workerState(r, nowMs, this.policyCfg) });
    }
    const selection = selectCandidates(
      {
        mode: this.mode,
        nowMs,
        localNsPerPair: req.localNsPerPair,
        saturation: this.saturationSnapshot(nowMs),
        candidates,
        mayUse: v2 ? this.opts.mayUse : undefined,
      },
      this.policyCfg,
    );
    for (const reason of selection.reasons) this.totals.decisions[reason] = (this.totals.decisions[reason] ?? 0) + 1;
    const { declined, shadowable, untrusted } = selection;
    const planWorkers: PlanWorker[] = selection.chosen.map((c) => c.worker);
    const chosen: WorkerLink[] = selection.chosen.map((c) => c.link);
    const chosenStats: WorkerDispatchStats[] = selection.chosen.map((c) => c.stats);
    const probes: boolean[] = selection.chosen.map((c) => c.probe);
    const coveredBy: number[] = selection.chosen.map((c) => c.covered);
    // `always` (tests, benchmarks) hands every covered pair to a worker; otherwise v2 claims only what speeds the layer up.
    const capped = v2 && this.mode !== 'always';
    const shadowProbe: boolean[] =
      capped && planWorkers.length > 0 ? this.capClaims(req, planWorkers, coveredBy, budgetMs, chosenStats, nowMs) : [];
    if (capped) {
      for (const { link, stats: st, covered } of shadowable) {
        if (!this.shadowProbeDue(st, nowMs)) continue;
        planWorkers.push(shadowProbeWorker(link, covered, this.claimCfg));
        chosen.push(link);
        chosenStats.push(st);
        probes.push(false);
        coveredBy.push(covered);
        shadowProbe[planWorkers.length - 1] = true;
        this.totals.claims['shadow-probe'] = (this.totals.claims['shadow-probe'] ?? 0) + 1;
      }
    }
    this.planProbation(req, untrusted, planWorkers, chosen, chosenStats, probes, coveredBy);
    const plan = planRequest(req, planWorkers);
    // Declined or uncovered: no quiet window, the next token may route to experts a worker holds — except when the
    // claim caps left every worker out: then the layer is quiet until the next shadow probe is due (the coordinator
    // runs its stock graph meanwhile, with no exchange per layer at all).
    if (plan.dispatchedPairs === 0) {
      let q = 0;
      if (capped && (declined.length > 0 || planWorkers.length > 0))
        q = this.quietUntilProbe([...chosenStats, ...shadowable.map((x) => x.stats)], nowMs);
      // (`always` keeps asking: tests and benchmarks count every routed pair.)
      else if (this.mode === 'auto' && declined.length > 0 && planWorkers.length === 0) q = quiet;
      // A worker of this layer that serves (proven warm) was left out this time: quiet for a few evaluations at first,
      // longer as the declines go on in a row (the load has passed), never longer than the rules above say.
      const streak = (conn.declineStreak.get(req.layer) ?? 0) + 1;
      conn.declineStreak.set(req.layer, streak);
      const warm = (st: WorkerDispatchStats): boolean => provenWarm(st, nowMs, this.claimCfg);
      if (q > 0 && (chosenStats.some(warm) || declined.some(warm))) q = declineQuietMs(streak, q, this.claimCfg);
      this.answerLocal(conn, req, q, arrivedAt);
      return;
    }
    conn.declineStreak.delete(req.layer);

    const f = newInFlight(conn, req, plan, arrivedAt, 0);
    conn.inFlight = f;
    for (const [i, wp] of plan.workers.entries()) {
      if (!shadowProbe[wp.worker]) continue;
      f.shadow[i] = true;
      f.remaining--;
    }
    if (v2) {
      this.chooseShadow(f, chosen);
      this.shadowUntrusted(f, chosen);
    }
    // v2: the CLAIM before the work goes out. The coordinator waits for it before it computes its own pairs, and it
    // depends on the plan alone; a worker whose send fails below is a claimed pair not served, which the coordinator
    // computes after the RESULT (as for any miss).
    const claimedAny = v2 ? this.writeClaim(f) : true;
    this.sendItems(f, chosen, chosenStats, probes, shadowProbe, budgetMs, nowMs);
    if (!claimedAny) {
      // Only shadow items: every pair is the coordinator's, no RESULT follows; the shadow answers still come to `audit`.
      conn.inFlight = null;
      this.finish(f);
    }
  }

  /** Hands each planned item to its worker's link, with its deadline and timer; answers come to onAnswer. */
  private sendItems(
    f: InFlight,
    chosen: readonly WorkerLink[],
    chosenStats: readonly WorkerDispatchStats[],
    probes: readonly boolean[],
    shadowProbe: readonly boolean[],
    budgetMs: number,
    nowMs: number,
  ): void {
    const { req, plan } = f;
    const n = plan.workers.length;
    for (let i = 0; i < n; i++) {
      const wp = plan.workers[i] as (typeof plan.workers)[number];
      const link = chosen[wp.worker] as WorkerLink;
      const st = chosenStats[wp.worker] as WorkerDispatchStats;
      f.links[i] = link;
      f.stats[i] = st;
      if (probes[wp.worker]) st.lastProbeMs = nowMs;
      // A bench probe gets the whole budget, as a first try does: its speed may have changed since it was measured.
      const deadlineMs = f.shadow[i]
        ? shadowDeadlineMs(budgetMs, this.deadlineCfg)
        : workerDeadlineMs(probes[wp.worker] ? null : wp.expectedMs, budgetMs, this.deadlineCfg);
      const work: WorkItem = {
        layer: req.layer,
        nEmbd: req.nEmbd,
        rows: gatherRows(wp, req.rows, req.nEmbd),
        nRows: wp.nRows,
        nPairs: wp.nPairs,
        rowIndex: wp.rowIndex,
        localExpert: wp.localExpert,
        weight: wp.weight,
      };
      const sentAt = performance.now();
      // A speed probe, or the first item after the worker sat idle: a cold sample (plan.ts LatencyModel).
      const speedProbe = shadowProbe[wp.worker] === true;
      const cold = speedProbe || (st.outstanding === 0 && (st.lastAnswerAt === null || sentAt - st.lastAnswerAt > COLD_AFTER_IDLE_MS));
      st.outstanding++;
      let answer: Promise<Float32Array | WorkAnswer>;
      try {
        answer = link.compute(work, deadlineMs);
      } catch (e) {
        answer = Promise.reject(e);
      }
      f.timers[i] = setTimeout(() => this.onTimeout(f, i), deadlineMs);
      Promise.resolve(answer).then(
        (partial) => {
          this.onAnswer(f, i, partial, sentAt, sentAt + deadlineMs, cold);
          if (speedProbe && f.state[i] === ANSWERED && warmFollowUp(st, (st.lastAnswerAt ?? sentAt) - sentAt, this.claimCfg, work.nPairs)) {
            // a cold probe faster than a well-measured line: the line is stale; the warm follow-ups make a new one
            if (st.latency.warm >= this.claimCfg.warmFollowUpUntil) restartLine(st.latency);
            this.sendWarmFollowUp(link, st, work, shadowDeadlineMs(budgetMs, this.deadlineCfg));
          }
        },
        () => this.onFailure(f, i),
      );
    }
    f.dispatchedAt = performance.now();
  }

  /**
   * v3: a REQUEST whose pairs the coordinator pre-claimed under a standing offer. No CLAIM is written and no policy,
   * cap, shadow or audit applies (the offer was made under them, moments ago): the pre-claimed pairs are planned onto
   * the layer's workers whose answers may be used, and exactly one RESULT follows; a pre-claimed pair no such worker
   * covers now is not served (the coordinator computes it after the RESULT, as any claimed pair not served).
   */
  private onPreclaimed(conn: Connection, req: DispatchRequest, pre: Uint8Array, arrivedAt: number, nowMs: number): void {
    const pairs = req.nTokens * req.nUsed;
    let nPre = 0;
    for (const x of pre) nPre += x;
    this.totals.offers.preclaimed++;
    this.totals.offers.preclaimedPairs += nPre;
    const budgetMs = requestBudgetMs(req.deadlineUs, this.deadlineCfg);
    const mayUse = this.opts.mayUse;
    const chosen: WorkerLink[] = [];
    const chosenStats: WorkerDispatchStats[] = [];
    const planWorkers: PlanWorker[] = [];
    if (this.mode !== 'off' && budgetMs > 0) {
      for (const link of this.opts.directory.workersFor(req.layer)) {
        if (mayUse && !mayUse(link.workerId)) continue;
        const st = this.stats(link.workerId, nowMs);
        chosen.push(link);
        chosenStats.push(st);
        planWorkers.push(planWorkerOf(link, st, nPre, false));
      }
    }
    // Only the pre-claimed pairs are planned: the others' ids are out of every range.
    const ids = new Int32Array(req.ids);
    for (let p = 0; p < pairs; p++) if (pre[p] !== 1) ids[p] = -1;
    const plan = planRequest({ nTokens: req.nTokens, nUsed: req.nUsed, ids, probs: req.probs }, planWorkers);
    const n = plan.workers.length;
    const f = newInFlight(conn, req, plan, arrivedAt, nPre);
    conn.inFlight = f;
    if (n === 0) {
      // nothing can be placed: the RESULT at once, nothing served
      f.dispatchedAt = performance.now();
      f.settledAt = f.dispatchedAt;
      this.finish(f);
      return;
    }
    this.sendItems(f, chosen, chosenStats, new Array(chosen.length).fill(false), [], budgetMs, nowMs);
  }

  /**
   * v2: workers on probation go first in line, apart from the speed race: a newcomer slower than a trusted replica
   * would otherwise never be planned once measured, and so never pass its probation. Each takes at most one token's
   * worth of pairs (at least `probePairs`) and has at most one item outstanding; its item goes in shadow (the
   * coordinator computes and audits those pairs), so the cost is bounded by the probation length, and nothing waits on
   * it. Least-tried first (ties: the order of the list).
   */
  private planProbation(
    req: DispatchRequest,
    untrusted: readonly Admitted<WorkerLink, WorkerDispatchStats>[],
    planWorkers: PlanWorker[],
    chosen: WorkerLink[],
    chosenStats: WorkerDispatchStats[],
    probes: boolean[],
    coveredBy: number[],
  ): void {
    for (const { link, stats: st, covered, probe } of untrusted) {
      const w = probationWorker(link, st, covered, req.nUsed, this.claimCfg);
      if (w === null) continue;
      planWorkers.push(w);
      chosen.push(link);
      chosenStats.push(st);
      probes.push(probe);
      coveredBy.push(covered);
    }
  }

  /**
   * v2: caps each worker's pairs so that the layer finishes sooner than the coordinator alone (claims.ts). A worker
   * the caps leave out is given a probe in shadow now and then (`shadowProbeEveryMs`): the coordinator computes those
   * pairs anyway, so a slow answer delays nothing, and a worker that got faster (its kernels compiled, its GPU free)
   * is measured again. Returns which plan workers are such probes.
   */
  private capClaims(
    req: DispatchRequest,
    planWorkers: PlanWorker[],
    covered: readonly number[],
    budgetMs: number,
    stats: readonly WorkerDispatchStats[],
    nowMs: number,
  ): boolean[] {
    const keepWarm = stats.map((st) => keepWarmDue(st, nowMs, this.claimCfg));
    const caps = claimCaps(
      {
        nPairs: req.nTokens * req.nUsed,
        localMsPerPair: req.localNsPerPair / 1e6,
        budgetMs,
        workers: planWorkers.map((w, i) => ({
          covered: covered[i] as number,
          queueMs: w.queueMs,
          overheadMs: w.overheadMs,
          perPairMs: w.perPairMs,
          keepWarm: keepWarm[i] as boolean,
        })),
      },
      this.claimCfg,
    );
    const probe = new Array<boolean>(planWorkers.length).fill(false);
    for (const [i, w] of planWorkers.entries()) {
      w.cap = caps.caps[i] as number;
      const r = caps.reasons[i] as ClaimReason;
      this.totals.claims[r] = (this.totals.claims[r] ?? 0) + 1;
      const st = stats[i] as WorkerDispatchStats;
      // A keep-warm claim books the next one; one due that the caps still gave nothing (too slow for even one pair
      // within the layer's time: the coordinator is fast now) waits as long as a probe would, so that it does not cut
      // the layer's quiet window short for nothing (probes.ts quietUntilProbeMs).
      if (r === 'keep-warm') st.nextKeepWarmMs = nowMs + this.claimCfg.keepWarmEveryMs;
      else if (keepWarm[i] && w.cap === 0) st.nextKeepWarmMs = nowMs + this.claimCfg.shadowProbeEveryMs;
      if (w.cap > 0) {
        // Claimed: the probes' backoff starts over the next time the caps leave it out.
        st.shadowStreak = 0;
        st.nextShadowProbeMs = null;
      } else if ((r === 'too-slow' || r === 'no-gain') && this.shadowProbeDue(st, nowMs)) {
        w.cap = Math.min(covered[i] as number, this.claimCfg.probePairs);
        probe[i] = true;
        this.totals.claims['shadow-probe'] = (this.totals.claims['shadow-probe'] ?? 0) + 1;
      }
    }
    return probe;
  }

  /**
   * v2: which items go to their workers in shadow (audited: the coordinator computes their pairs and reports the sums,
   * the worker's answer is held against them and never used). The AuditChooser picks among all items (none has
   * answered yet); at most one item per row.
   */
  private chooseShadow(f: InFlight, chosen: readonly WorkerLink[]): void {
    const choose = this.opts.chooseAudit;
    if (!choose) return;
    const workerIds = f.plan.workers.map((wp) => (chosen[wp.worker] as WorkerLink).workerId);
    const owed = f.conn.auditOwed.delete(f.req.layer);
    const picked = choose({ seq: f.req.seq, layer: f.req.layer, plan: f.plan, workerIds, answered: f.shadow.map(() => true), owed });
    if (!picked || picked.length === 0) return;
    const items: PendingAudit['items'] = [];
    for (const i of pickAuditItems(f.plan.workers, picked, f.req.nTokens, (i) => !f.shadow[i])) {
      const wp = f.plan.workers[i] as RequestPlan['workers'][number];
      f.shadow[i] = true;
      f.remaining--;
      f.auditItem[i] = items.length;
      items.push({
        workerId: workerIds[i] as string,
        rowToken: wp.rowToken,
        nRows: wp.nRows,
        nPairs: wp.nPairs,
        partial: null,
        done: false,
      });
    }
    if (items.length > 0) f.audit = { seq: f.req.seq, layer: f.req.layer, trusted: null, items };
  }

  /** v2: the items of workers whose answers may not be used go in shadow too (not claimed; audited or not). */
  private shadowUntrusted(f: InFlight, chosen: readonly WorkerLink[]): void {
    const mayUse = this.opts.mayUse;
    if (!mayUse) return;
    for (const [i, wp] of f.plan.workers.entries()) {
      if (f.shadow[i] || mayUse((chosen[wp.worker] as WorkerLink).workerId)) continue;
      f.shadow[i] = true;
      f.remaining--;
    }
  }

  /**
   * How long until one of these workers is due a shadow probe again, ms (at most the configured quiet window; the
   * whole window when none of them can be probed).
   */
  private quietUntilProbe(stats: readonly WorkerDispatchStats[], nowMs: number): number {
    return quietUntilProbeMs(stats, nowMs, Math.min(this.opts.quietMs ?? DEFAULT_QUIET_MS, DISPATCH_LIMITS.maxQuietMs), this.claimCfg);
  }

  /**
   * Whether a worker may be probed in shadow now; if so, books the next probe (claims.ts `shadowProbeGapMs`): the
   * base interval doubled per consecutive miss and per earlier probe since its last claim, and at least 20 × what a
   * probe takes it; never while it has work outstanding.
   */
  private shadowProbeDue(st: WorkerDispatchStats, nowMs: number): boolean {
    const next = shadowProbeBooking(st, nowMs, this.claimCfg);
    if (next === null) return false;
    st.nextShadowProbeMs = next;
    st.shadowStreak++;
    return true;
  }

  /**
   * v2: the same item as a quick probe in shadow, sent again at once to a worker measured only cold or on few warm
   * samples (probes.ts `warmFollowUp`): its answer is a warm sample of its speed and nothing else (no request waits on
   * it, its sums are dropped); a quick one is followed by another while the rule holds, `warmFollowUpChain` at most.
   * Bounded like a shadow item: it counts as outstanding until it settles, the link gives up on it in time.
   */
  private sendWarmFollowUp(link: WorkerLink, st: WorkerDispatchStats, work: WorkItem, deadlineMs: number, chain = 1): void {
    const sentAt = performance.now();
    st.outstanding++;
    let answer: Promise<Float32Array | WorkAnswer>;
    try {
      answer = link.compute(work, deadlineMs);
    } catch (e) {
      answer = Promise.reject(e);
    }
    this.totals.claims['warm-follow-up'] = (this.totals.claims['warm-follow-up'] ?? 0) + 1;
    Promise.resolve(answer).then(
      (a) => {
        st.outstanding--;
        const now = performance.now();
        st.lastAnswerAt = now;
        const sums: unknown = a instanceof Float32Array ? a : (a as WorkAnswer | undefined)?.sums;
        if (!(sums instanceof Float32Array) || sums.length !== work.nRows * work.nEmbd || now - sentAt > deadlineMs) return;
        const computeMs = a instanceof Float32Array ? 0 : ((a as WorkAnswer).computeUs ?? 0) / 1000;
        observeRoundTrip(st.latency, work.nPairs, now - sentAt, computeMs, false);
        if (chain < this.claimCfg.warmFollowUpChain && warmFollowUp(st, now - sentAt, this.claimCfg, work.nPairs))
          this.sendWarmFollowUp(link, st, work, deadlineMs, chain + 1);
      },
      () => {
        st.outstanding--;
      },
    );
  }

  /**
   * v2: the CLAIM, at once: the pairs of the items not in shadow are claimed, the shadow items' pairs audited. Returns
   * whether any pair was claimed (none: no RESULT follows).
   */
  private writeClaim(f: InFlight): boolean {
    const { conn, req, plan } = f;
    const pairs = req.nTokens * req.nUsed;
    const claimed = new Uint8Array(pairs);
    const audit = f.audit ? new Uint8Array(pairs) : null;
    let auditedPairs = 0;
    for (const [i, wp] of plan.workers.entries()) {
      const audited = f.auditItem[i] !== -1;
      const mask = audited ? audit : f.shadow[i] ? null : claimed;
      if (!mask) continue;
      for (const p of wp.pairIndex) mask[p] = 1;
      if (audited) auditedPairs += wp.nPairs;
    }
    if (f.audit) {
      this.totals.pairs.audited += auditedPairs;
      conn.pendingAudit = f.audit;
    }
    const claimedAny = f.remaining > 0;
    this.write(
      conn,
      encodeClaim(
        {
          seq: req.seq,
          layer: req.layer,
          nTokens: req.nTokens,
          nUsed: req.nUsed,
          quietMs: 0,
          claimed: claimedAny ? claimed : null,
          audit,
        },
        conn.version,
      ),
    );
    return claimedAny;
  }

  /** v2: compares the shadow items that have both their answer and the coordinator's sums. */
  private compareShadow(a: PendingAudit, nEmbd: number): void {
    if (!a.trusted) return;
    for (const it of a.items) {
      if (it.done || !it.partial) continue;
      it.done = true;
      this.events.onAudit?.(it.workerId, compareAudit({ ...it, partial: it.partial }, a.trusted, nEmbd, a.layer, a.seq));
    }
  }

  private onAnswer(f: InFlight, i: number, answer: Float32Array | WorkAnswer, sentAt: number, deadlineAt: number, cold: boolean): void {
    const st = f.stats[i] as WorkerDispatchStats;
    const wp = f.plan.workers[i] as (typeof f.plan.workers)[number];
    st.outstanding--;
    const now = performance.now();
    st.lastAnswerAt = now;
    // A link may resolve anything (checkPartial judges it): the sums alone, or them with the worker's compute time.
    const partial: unknown = answer instanceof Float32Array ? answer : (answer as WorkAnswer | undefined)?.sums;
    const computeMs = answer instanceof Float32Array ? 0 : ((answer as WorkAnswer | undefined)?.computeUs ?? 0) / 1000;
    // Timers of an abandoned request are cleared: its deadlines are judged by the clock.
    if (f.state[i] === TIMED_OUT || (f.state[i] === PENDING && f.abandoned && now > deadlineAt)) {
      f.state[i] = TIMED_OUT;
      st.lateAnswers++;
      // Too late to use, but a true measure of its speed now: the next deadline is set from it (a worker that slowed
      // down — a busy machine — is otherwise held to its old speed and misses for ever).
      observeRoundTrip(st.latency, wp.nPairs, now - sentAt, computeMs, cold);
      this.totals.pairs.late += wp.nPairs;
      this.opts.metrics?.pairs.inc({ model: this.opts.model, outcome: 'late' }, wp.nPairs);
      this.events.onLate?.(st.workerId, wp.nPairs, now - deadlineAt);
      return;
    }
    if (f.state[i] !== PENDING) return;
    clearTimeout(f.timers[i]);
    const verdict = checkPartial(wp, partial, f.req.nEmbd);
    if (verdict !== 'ok') {
      f.state[i] = FAILED;
      if (!f.shadow[i]) f.rejectedPairs[i] = wp.nPairs;
      st.rejected++;
      this.miss(st, verdict);
    } else {
      f.state[i] = ANSWERED;
      this.served(st, wp.nPairs, now - sentAt, computeMs, cold, f.links[i] as WorkerLink);
      if (f.shadow[i]) this.shadowAnswer(f, i, partial as Float32Array);
      else {
        f.partials[i] = partial as Float32Array;
        st.lastClaimedServeMs = st.lastServeMs; // proven warm for a while: keep-warm claims (claims.ts)
      }
    }
    this.settle(f, i);
  }

  /** v2: a shadow item's answer, held until the coordinator's AUDIT sums are there. */
  private shadowAnswer(f: InFlight, i: number, partial: Float32Array): void {
    const a = f.audit;
    const hello = f.conn.hello;
    if (!a || !hello) return;
    const it = a.items[f.auditItem[i] as number];
    if (!it) return;
    it.partial = partial;
    this.compareShadow(a, hello.nEmbd);
  }

  private onTimeout(f: InFlight, i: number): void {
    if (f.state[i] !== PENDING) return;
    f.state[i] = TIMED_OUT;
    this.miss(f.stats[i] as WorkerDispatchStats, 'timeout');
    this.settle(f, i);
  }

  private onFailure(f: InFlight, i: number): void {
    const st = f.stats[i] as WorkerDispatchStats;
    st.outstanding--;
    if (f.state[i] !== PENDING) return;
    clearTimeout(f.timers[i]);
    f.state[i] = FAILED;
    this.miss(st, 'error');
    this.settle(f, i);
  }

  private served(st: WorkerDispatchStats, pairs: number, latencyMs: number, computeMs: number, cold: boolean, link: SliceOfLink): void {
    const atMs = this.clock();
    st.lastServeMs = atMs;
    st.servedItems++;
    st.servedPairs += pairs;
    st.consecutiveMisses = 0;
    observeRoundTrip(st.latency, pairs, latencyMs, computeMs, cold);
    if (st.benchedAtMs !== null) {
      st.benchedAtMs = null;
      st.lastProbeMs = null;
      this.events.onBench?.(st.workerId, false);
    }
    this.events.onServe?.(st.workerId, atMs, latencyMs, pairs, { layer: link.layer, begin: link.begin, end: link.end });
  }

  private miss(st: WorkerDispatchStats, kind: MissKind): void {
    st.misses++;
    st.consecutiveMisses++;
    this.events.onMiss?.(st.workerId, kind, st.consecutiveMisses);
    if (st.benchedAtMs === null && st.consecutiveMisses >= this.policyCfg.benchAfterMisses) {
      st.benchedAtMs = this.clock();
      st.lastProbeMs = null;
      this.events.onBench?.(st.workerId, true);
    }
  }

  /** Work item i settled; answers the coordinator once none is pending (shadow items are not waited for). */
  private settle(f: InFlight, i: number): void {
    if (f.shadow[i]) return;
    if (--f.remaining > 0 || f.abandoned) return;
    f.settledAt = performance.now();
    this.finish(f);
  }

  private finish(f: InFlight): void {
    const { conn, req, plan } = f;
    conn.inFlight = null;
    const pairs = req.nTokens * req.nUsed;
    const v2 = conn.version >= 2;
    const head = { seq: req.seq, layer: req.layer, nTokens: req.nTokens, nUsed: req.nUsed, quietMs: 0 };
    // v2 merges the partials straight into the RESULT frame it writes; v1 into arrays its RESPONSE encoder copies.
    const draft = v2 ? draftResult({ ...head, nEmbd: req.nEmbd, version: conn.version, nExpert: (conn.hello as Hello).nExpert }) : null;
    const served = draft ? draft.served : new Uint8Array(pairs);
    const sums = draft ? draft.sums : new Float32Array(req.nTokens * req.nEmbd);
    let withheld: Withheld | null = null;
    if (!v2) {
      // v1 only: v2 sent unusable and audited items in shadow, so it has nothing to take out here (and no list to build).
      const workerIds = f.links.map((l) => l.workerId);
      withheld = withholdAudited(
        { seq: req.seq, layer: req.layer, plan, workerIds, partials: f.partials, nTokens: req.nTokens, nUsed: req.nUsed },
        this.opts.chooseAudit,
      );
      dropUnusable(f.partials, workerIds, this.opts.mayUse);
    }
    const nServed = mergePartials(plan, f.partials, req.nEmbd, served, sums);
    let rejected = 0;
    for (const r of f.rejectedPairs) rejected += r;
    const fallback = pairs - nServed - rejected;
    const mode = nServed > 0 ? 'served' : 'local';
    if (withheld) {
      this.totals.pairs.audited += withheld.pairs;
      conn.awaitingAudit = withheld.awaiting;
    }
    const offer = draft && conn.version >= 3 ? this.offerAfter(f) : null;
    if (!draft) this.write(conn, encodeV1Answer(head, withheld?.mask ?? null, nServed, served, sums));
    else if (f.preclaimed > 0 || f.shadow.some((s) => !s)) this.write(conn, sealResult(draft, offer));
    const end = performance.now();
    // Bookkeeping after the write: the coordinator is reading its answer meanwhile.
    if (this.events.onUsed) {
      for (const [i, p] of f.partials.entries()) {
        const link = f.links[i] as WorkerLink;
        if (p)
          this.events.onUsed(link.workerId, (plan.workers[i] as RequestPlan['workers'][number]).nPairs, {
            layer: link.layer,
            begin: link.begin,
            end: link.end,
          });
      }
    }
    const t = this.totals;
    if (nServed > 0) t.servedRequests++;
    else t.localRequests++;
    t.pairs.served += nServed;
    t.pairs.fallback += fallback;
    t.pairs.rejected += rejected;
    const m = this.opts.metrics;
    if (m) {
      const model = this.opts.model;
      m.requests.inc({ model, mode });
      if (nServed > 0) m.pairs.inc({ model, outcome: 'served' }, nServed);
      if (fallback > 0) m.pairs.inc({ model, outcome: 'fallback' }, fallback);
      if (rejected > 0) m.pairs.inc({ model, outcome: 'rejected' }, rejected);
      m.roundtrip.observe({ model }, (end - f.arrivedAt) / 1000);
    }
    this.events.onResponse?.({
      seq: req.seq,
      layer: req.layer,
      pairs,
      served: nServed,
      fallback,
      rejected,
      mode,
      workers: plan.workers.length,
      dispatchMs: f.dispatchedAt - f.arrivedAt,
      settledMs: f.settledAt - f.arrivedAt,
      totalMs: end - f.arrivedAt,
      nTokens: req.nTokens,
      localNsPerPair: req.localNsPerPair,
      claimed: plan.workers.reduce((c, wp, i) => (f.shadow[i] ? c : c + wp.nPairs), 0),
      quietMs: 0,
      preclaimed: f.preclaimed,
      offered: offer !== null,
    });
  }

  /**
   * v3: the standing offer a RESULT carries for the layer's next REQUEST, or null. Only under `auto`, after an
   * exchange with nothing in shadow and every item answered in time by a measured worker whose answers may be used;
   * none on every `offerBreakEvery`-th RESULT of the layer, nor when a spot check is due (`auditDue`: the next REQUEST
   * is then a CLAIM exchange that owes it). The line is claims.ts `offerLine`; the experts are those of the items' links.
   */
  private offerAfter(f: InFlight): DispatchOffer | null {
    const { conn, req, plan } = f;
    const cfg = this.claimCfg;
    if (this.mode !== 'auto' || !(cfg.offerTtlMs > 0) || plan.workers.length === 0) return null;
    const count = (conn.offerCount.get(req.layer) ?? 0) + 1;
    conn.offerCount.set(req.layer, count);
    if (cfg.offerBreakEvery > 0 && count % cfg.offerBreakEvery === 0) return null;
    if (f.audit !== null || f.shadow.some((s) => s)) return null;
    const workers: OfferWorker[] = [];
    for (let i = 0; i < plan.workers.length; i++) {
      const link = f.links[i] as WorkerLink;
      if (f.state[i] !== ANSWERED || !f.partials[i]) return null;
      if (this.opts.mayUse && !this.opts.mayUse(link.workerId)) return null;
      // the line for items of this exchange's size: the next REQUEST of the layer is most often the same phase
      const line = latencyLine((f.stats[i] as WorkerDispatchStats).latency, (plan.workers[i] as RequestPlan['workers'][number]).nPairs);
      if (!line) return null;
      workers.push(line);
    }
    const ids = f.links.map((l) => l.workerId);
    if (this.opts.auditDue?.(ids)) {
      conn.auditOwed.add(req.layer);
      return null;
    }
    const line = offerLine(workers, req.localNsPerPair / 1e6, requestBudgetMs(req.deadlineUs, this.deadlineCfg), cfg);
    if (!line) return null;
    const nExpert = (conn.hello as Hello).nExpert;
    const experts = new Uint8Array(offerBitmapBytes(nExpert));
    for (const link of f.links) {
      for (let e = Math.max(0, link.begin); e < Math.min(nExpert, link.end); e++)
        experts[e >> 3] = (experts[e >> 3] as number) | (1 << (e & 7));
    }
    const maxPairs = Math.min(line.maxPairs, DISPATCH_LIMITS.maxRows * DISPATCH_LIMITS.maxUsed);
    this.totals.offers.made++;
    return { ttlMs: Math.min(cfg.offerTtlMs, DISPATCH_LIMITS.maxOfferTtlMs), maxPairs, a: line.a, b: line.b, experts };
  }
}
