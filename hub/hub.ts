/**
 * The hub: one object owning the registry, the market, the dispatch map, the coordinators and the durable store.
 * Its parts are private; the HTTP layer (app.ts) and the CLI call only the methods below, one per thing they need.
 */
import type { ChildProcess } from 'node:child_process';
import type { Server } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CoordinatorSupervisor, type CoordinatorStatus } from './supervisor.ts';
import { DEFAULT_POLLER, SaturationPoller, type PollerOptions } from './poller.ts';
import { CoverageStore } from './market/coverage.ts';
import { replicaVerdict } from './market/replicas.ts';
import type { SliceRef } from '../protocol/slice.ts';
import { SliceGrants } from './market/grants.ts';
import { type VolunteerAnswer, type VolunteerRequest, bytesForExpertOf } from './market/assign.ts';
import { DEFAULT_SATURATION, type SaturationConfig, type SaturationState } from './market/saturation.ts';
import type { HeldRange, ModelDemand, ModelShape } from './market/types.ts';
import { DEFAULT_TRUST, type TrustConfig, mayUse } from './dispatch/trust.ts';
import { DEFAULT_DISPATCH, DispatchMap, type DispatchConfig, type DispatchRow } from './dispatch/map.ts';

/**
 * A row of `GET /api/expert-dispatch-map`: the dispatch map's, with Kvasir's node id and relay fields (null: no relay),
 * and the hub the worker is attached to (`--redis`: any hub of the cluster; null for a hub alone).
 */
export type KvasirDispatchRow = DispatchRow & { node_id: string; listen_port: number | null; session: string | null; hub: string | null };
import { EventLog, type EventLogQuery, type HubEvent } from './events.ts';
import { HubStore } from './store.ts';
import { NodeAuth, type ChallengeReply, type NodeTokenReply } from './auth/index.ts';
import { HubError, isHubError } from './errors.ts';
import { DEFAULT_HTTP_SERVER, type HttpServerLimits } from './net.ts';
import { loadModelInfo, type ModelInfo } from './registry.ts';
import { HubMetrics, type HubReadings } from './metrics.ts';
import { AUTH_RATE_LIMIT, RELEASE_COOL_DOWN_MS, WORKER_STALE_MS, WORKERS_MAX } from './limits.ts';
import { type Shard, ShardServer, type ShardHost } from './shards.ts';
import { ShardWarmer } from './shard-warmer.ts';
import { type LedgerHost, TrustLedger } from './trust/ledger.ts';
import { sliceKey } from './trust/slice-credit.ts';
import { ChunkLists } from './chunk-lists.ts';
import { type DispatchObserver, Dispatchers, type DispatchersHost } from './dispatch/dispatchers.ts';
import { Recruiter, type RecruiterHost } from './recruiter.ts';
import { DEFAULT_PEERS, PeerDirectory, type PeerConfig, type SliceTransfer } from './peer-directory.ts';
import { PeerSignal } from './peers-signal.ts';
import type { ClaimConfig } from './dispatch/claims.ts';
import { DispatchMetrics, type DispatcherEvents } from './dispatch/dispatcher.ts';
import type { DispatchMode } from './dispatch/policy.ts';
import { DEFAULT_CHANNEL, VolunteerChannel, type ChannelHost, type ChannelOptions } from './channel/channel.ts';
import { KvasirRelays, joinDirectories, type RelayHost, type RelayOptions, type RelaySessionRow } from './relay/relay.ts';
import type { CoverageAnswer, CreditAnswer, DemandAnswer, HealthAnswer, RecruitmentAnswer } from '../protocol/http.ts';
import { AdminGate, checkedAdminToken } from './dashboard/admin.ts';
import { ClusterSync, type ClusterHost, type ClusterOptions, type ClusterStatus } from './cluster/cluster.ts';
import type { ClusterWorker } from './cluster/codec.ts';
import { RemoteHubLinks, type RelayLinkStats } from './cluster/relay-links.ts';
import { HubRelayServer, type HubRelayStats, relayUrlOf } from './cluster/relay-server.ts';
import { registerRelayMetrics } from './cluster/relay-metrics.ts';
import { ClusterFeed, type ClusterEventRow, clusterReading } from './cluster/cluster-feed.ts';
import { SharedStanding, type StandingHost } from './cluster/standing.ts';
import { SharedGrants } from './cluster/grants.ts';
import type { WorkerDirectory } from './dispatch/worker-link.ts';
import {
  ClusterCoverage,
  type CoverageView,
  type CreditBook,
  type CreditOnce,
  LocalCreditBook,
  type QuarantineList,
} from './cluster/shared.ts';
import { type AdminDone, AdminActions, type AdminHost } from './dashboard/admin-actions.ts';
import { DashboardReadModel, type ReadModelHost } from './dashboard/read-model.ts';
import type { StreamOptions, StreamSink } from './dashboard/stream.ts';
import type {
  AdminResult,
  CoverageMap,
  DispatchModeName,
  ModelStatus,
  Snapshot,
  WorkersPage,
  WorkersQuery,
} from '../protocol/dashboard.ts';

export const DEFAULT_COORDINATOR_BINARY = fileURLToPath(new URL('../coordinator/bin/linkcpp-server', import.meta.url));

export interface HubConfig {
  host: string;
  port: number;
  /** Directory of the durable store (hub.sqlite), `--state`; ':memory:' keeps it in memory (tests). */
  stateDir: string;
  models: Array<{ path: string; name?: string }>;
  externals: Array<{ name: string; url: string }>;
  slots: number;
  ctxPerSlot: number;
  threads?: number;
  coordinatorBinary: string;
  saturation: SaturationConfig;
  poller: PollerOptions;
  dispatch: DispatchConfig;
  staleMs: number;
  maxWorkers: number;
  evictEveryMs: number;
  /** Per-client token bucket on the auth endpoints. */
  authRateLimit: { capacity: number; refillPerSec: number };
  /** `--dispatch`: auto (Layer 1 decides), always (every covered pair to a worker), off (the coordinator alone). */
  dispatchMode: DispatchMode;
  /** `--dispatch-socket NAME=PATH`: where an external coordinator's dispatcher listens (managed ones get their own). */
  dispatchSockets: Array<{ name: string; path: string }>;
  /** The volunteer channel's timings and caps. */
  channel: Partial<ChannelOptions>;
  /**
   * Trust in workers' answers (hub/dispatch/trust.ts): `--probation N` audited items before a new worker's answers are
   * used (default 20), `--audit-rate R` the share of a trusted worker's items audited after that (default 0.02), and
   * the NMSE beyond which an audit quarantines the worker. `{ probation: 0, spotRate: 0 }` trusts every answer.
   */
  trust: TrustConfig;
  /**
   * `--dispatch-deadline-ms`: how long a managed coordinator waits for the dispatcher per MoE layer (its
   * `--expert-dispatch-deadline-ms`), and the cap of the dispatcher's own wait. Default 250.
   */
  dispatchDeadlineMs: number;
  /** The claim policy's settings over DEFAULT_CLAIMS (dispatch/claims.ts): benchmarks' experiments; absent = defaults. */
  claims?: Partial<ClaimConfig>;
  /**
   * More arguments for every managed coordinator, after the hub's own (tests and benchmarks: e.g. `--no-repack`, so
   * that a request's tokens do not depend on what else is in its batch).
   */
  coordinatorArgs: string[];
  /**
   * `--experts-on-demand`: managed coordinators keep the routed experts out of RAM until they compute them (mapped from
   * the GGUF and read on demand, no warmup; linkcpp-server's --experts-on-demand), so the experts the swarm serves are
   * never read in: a coordinator can serve a model whose experts exceed its memory. Default false.
   */
  expertsOnDemand: boolean;
  /**
   * `--admin-token` / EXPERTSWARM_ADMIN_TOKEN: the bearer token of the dashboard's admin actions (at least
   * ADMIN_TOKEN_MIN_CHARS characters); null disables them (every admin call answers 403 ADMIN_DISABLED).
   */
  adminToken: string | null;
  /** How long an operator's release keeps a worker from its slice (RELEASE_COOL_DOWN_MS). */
  releaseCoolDownMs: number;
  /** The dashboard streams' caps (tests raise the per-address ones). */
  dashboardStreams: Partial<StreamOptions>;
  /** The HTTP server's timeouts and socket caps (net.ts DEFAULT_HTTP_SERVER); simulations from one address raise them. */
  http: Partial<HttpServerLimits>;
  /** Volunteers passing slices to each other (hub/peer-directory.ts DEFAULT_PEERS, docs/peers.md); absent: the defaults. */
  peers?: Partial<PeerConfig>;
  /** Kvasir's relays (hub/relay/relay.ts DEFAULT_RELAY: the worker wire written, timings, caps); absent: the defaults. */
  relay?: Partial<RelayOptions>;
  /**
   * `--redis URL` (env EXPERTSWARM_REDIS): this hub joins the cluster of hubs sharing that Redis (docs/cluster.md):
   * worker records, quarantine and credit are shared. null (the default): a hub alone, SQLite and memory only.
   */
  redis: string | null;
  /** The cluster's settings (hub/cluster/cluster.ts DEFAULT_CLUSTER; `--hub-id`); used only with `redis`. */
  cluster: Partial<ClusterOptions>;
}

export function defaultConfig(over: Partial<HubConfig> = {}): HubConfig {
  return {
    host: '127.0.0.1',
    port: 8080,
    stateDir: '.cache/hub',
    models: [],
    externals: [],
    slots: 4,
    ctxPerSlot: 2048,
    coordinatorBinary: DEFAULT_COORDINATOR_BINARY,
    saturation: { ...DEFAULT_SATURATION },
    poller: { ...DEFAULT_POLLER },
    dispatch: { ...DEFAULT_DISPATCH },
    staleMs: WORKER_STALE_MS,
    maxWorkers: WORKERS_MAX,
    evictEveryMs: 5_000,
    authRateLimit: { ...AUTH_RATE_LIMIT },
    dispatchMode: 'auto',
    dispatchSockets: [],
    channel: {},
    trust: { ...DEFAULT_TRUST },
    dispatchDeadlineMs: 250,
    expertsOnDemand: false,
    coordinatorArgs: [],
    adminToken: null,
    releaseCoolDownMs: RELEASE_COOL_DOWN_MS,
    dashboardStreams: {},
    http: {},
    redis: null,
    cluster: {},
    ...over,
  };
}

export type { DispatchObserver } from './dispatch/dispatchers.ts';

export class Hub {
  /** Models whose GGUF the hub read: the ones on the market. Every served model is a coordinator (`servedModels()`). */
  private readonly marketModels = new Map<string, ModelInfo>();
  private readonly coverage: CoverageStore;
  private readonly dispatch: DispatchMap;
  private readonly events = new EventLog();
  private readonly supervisor: CoordinatorSupervisor;
  private readonly poller: SaturationPoller;
  private readonly store: HubStore;
  private readonly auth: NodeAuth;
  private readonly metrics: HubMetrics;
  private readonly recruiter: Recruiter;
  private evictTimer: NodeJS.Timeout | null = null;
  private readonly shards: ShardServer;
  /** Warms the digests of the slices the market will likely offer the volunteers that said hello (shard-warmer.ts). */
  readonly shardWarmer: ShardWarmer;
  private readonly channel: VolunteerChannel;
  /** Kvasir's workers: their relay sessions and dialed relays, each a dispatcher link (relay/relay.ts). */
  private readonly relays: KvasirRelays;
  private readonly peerDirectory: PeerDirectory;
  private readonly chunks: ChunkLists<Shard>;
  private readonly signal: PeerSignal;
  private readonly dispatchMetrics: DispatchMetrics;
  /** Every model's dispatcher, its socket, mode and coordinator numerics (dispatch/dispatchers.ts). */
  private readonly dispatchers: Dispatchers;
  private readonly ledger: TrustLedger;
  private readonly admin: AdminActions;
  private readonly dash: DashboardReadModel;
  /** Slices the market assigned to HTTP workers and their wallets downloaded: what their heartbeats may report. */
  private readonly grants = new SliceGrants();
  private readonly config: HubConfig;
  /** With `--redis`: this hub's part in the cluster (cluster/cluster.ts); null for a hub alone. */
  private readonly cluster: ClusterSync | null;
  /** Who is refused: the store's list, or with `--redis` the store's and the cluster's (cluster/shared.ts). */
  private readonly quarantines: QuarantineList;
  /** Credit by verified item: the store's, or the cluster's (cluster/shared.ts). */
  private readonly creditBook: CreditBook;
  /** Coverage as demand and recruitment read it: this hub's, or this hub's and the other hubs' (cluster/shared.ts). */
  private readonly coverageView: CoverageView;
  private clusterStarted = false;
  /** With `--redis`: the other hubs' workers as links of this hub's dispatchers, over their relays (cluster/relay-links.ts). */
  private readonly remoteLinks: RemoteHubLinks | null;
  /** With `--redis`: the relay the other hubs dial to reach the workers attached here (cluster/relay-server.ts). */
  private readonly hubRelay: HubRelayServer | null;
  /** Workers of other hubs this hub's dispatch map holds a record of (its own trust and credit of them). */
  private readonly remoteAttached = new Set<string>();
  /** With `--redis`: this hub's events and saturation readings shared with the others, theirs read (cluster/cluster-feed.ts). */
  private readonly feed: ClusterFeed | null;
  /** With `--redis` and trust checks on: passed probations and strikes told to the other hubs (cluster/standing.ts). */
  private readonly standing: SharedStanding | null;
  /** With `--redis`: slice grants written to the cluster too, read on a miss (cluster/grants.ts). */
  private readonly sharedGrants: SharedGrants | null;

  constructor(
    config: HubConfig,
    private readonly clock: () => number = Date.now,
  ) {
    // Admin actions change the targets at run time: the hub works on its own copies, never the caller's objects (which
    // may be shared, or frozen like DEFAULT_SATURATION).
    this.config = {
      ...config,
      saturation: { ...config.saturation },
      poller: { ...config.poller },
      dispatch: { ...config.dispatch },
      channel: { ...config.channel },
      dashboardStreams: { ...config.dashboardStreams },
    };
    this.coverage = new CoverageStore({ maxWorkers: config.maxWorkers });
    this.dispatch = new DispatchMap(config.dispatch);
    this.store = new HubStore(config.stateDir === ':memory:' ? ':memory:' : join(config.stateDir, 'hub.sqlite'));
    this.cluster = config.redis ? new ClusterSync(config.redis, config.cluster ?? {}, this.clusterHost()) : null;
    this.quarantines = this.cluster ?? this.store;
    this.creditBook = this.cluster ?? new LocalCreditBook(this.store, (wallet, pairs) => this.ledger.addCredit(wallet, pairs));
    this.coverageView = this.cluster ? new ClusterCoverage(this.coverage, this.cluster.remoteCoverage()) : this.coverage;
    if (this.cluster) {
      const cluster = this.cluster;
      this.coverage.onChange = (workerId, model) => cluster.localChanged(workerId, model);
    }
    const cluster = this.cluster;
    this.remoteLinks = cluster
      ? new RemoteHubLinks({
          selfId: cluster.hubId,
          relayOf: (hub) => cluster.relayOf(hub),
          event: (detail) => this.events.add('coordinator', null, `cluster: ${detail}`, this.now()),
        })
      : null;
    this.hubRelay = cluster
      ? new HubRelayServer({
          token: () => cluster.relayToken,
          linkOf: (model, workerId, layer) =>
            this.ownLinks(model)
              .workersFor(layer)
              .find((l) => l.workerId === workerId),
          event: (detail) => this.events.add('coordinator', null, `cluster: ${detail}`, this.now()),
        })
      : null;
    this.recruiter = new Recruiter(this.recruiterHost());
    this.auth = new NodeAuth({ secret: this.store.tokenSecret(), rateLimit: config.authRateLimit });
    this.supervisor = new CoordinatorSupervisor(
      (name, state, detail) => this.events.add('coordinator', name, `${state}: ${detail}`, this.now()),
      (name, note) => this.events.add('dispatch', name, `the coordinator computes some MoE layers itself: ${note}`, this.now()),
    );
    this.poller = new SaturationPoller(
      () => this.supervisor.names().map((name) => ({ name, url: this.supervisor.urlOf(name) })),
      config.poller,
      (name) => {
        this.feed?.reading(name, this.poller.reading(name));
        this.recruiter.reading(name);
      },
    );
    this.metrics = new HubMetrics(() => this.readings());
    this.dispatchMetrics = new DispatchMetrics(this.metrics.registry);
    if (this.cluster) registerRelayMetrics(this.metrics.registry, () => this.hubRelayStats());
    this.dispatchers = new Dispatchers(this.dispatchersHost());
    this.ledger = new TrustLedger(this.ledgerHost(), config.trust, this.metrics.registry);
    this.standing = cluster && this.ledger.on ? new SharedStanding(cluster.redisState, this.standingHost()) : null;
    this.sharedGrants = cluster ? new SharedGrants(cluster.redisState, () => this.now()) : null;
    this.shards = new ShardServer(this.shardHost());
    this.shardWarmer = new ShardWarmer({
      models: () => [...this.marketModels.keys()],
      shape: (model) => this.shape(model),
      warm: (model, slices) => this.shards.warm(model, slices),
    });
    this.channel = new VolunteerChannel(
      this.channelHost(),
      { ...DEFAULT_CHANNEL, maxConnections: config.maxWorkers, ...config.channel },
      clock,
    );
    this.relays = new KvasirRelays(this.relayHost(), { maxRelays: config.maxWorkers, ...config.relay }, clock);
    this.peerDirectory = new PeerDirectory({ ...DEFAULT_PEERS, ...config.peers }, clock);
    if (this.peerDirectory.config.enabled) this.channel.peers = this.peerDirectory;
    this.chunks = new ChunkLists<Shard>((s) => this.shards.body(s, 0, s.length), this.peerDirectory.config.chunkBytes);
    this.signal = new PeerSignal(this.peerDirectory, {
      path: this.peerDirectory.config.path,
      key: this.peerDirectory.config.key,
      maxConnections: config.maxWorkers,
    });
    this.peerDirectory.onRevoke = (peerId) => this.signal.revoke(peerId);
    this.channel.onResult = (workerId, roundTripMs, computeUs) => {
      const model = this.coverage.modelOf(workerId);
      if (model !== undefined) this.dash.roundTrip(model, roundTripMs);
      this.dispatchers.result(workerId, roundTripMs, computeUs, model);
    };
    this.admin = new AdminActions(this.adminHost(), new AdminGate(checkedAdminToken(config.adminToken)), config.releaseCoolDownMs);
    this.dash = new DashboardReadModel(
      this.readModelHost(),
      {
        streams: this.config.dashboardStreams,
        tokensMaxAgeMs: 2 * config.poller.intervalMs + config.poller.timeoutMs,
        onError: (e) => this.noteInternalError(`dashboard tick: ${errorText(e)}`),
      },
      clock,
    );
    this.events.onListenerError = (e) => this.noteInternalError(`event listener: ${errorText(e)}`);
    this.events.subscribe((e) => this.dash.event(e));
    this.feed = cluster
      ? new ClusterFeed(cluster.redisState, cluster.hubId, {
          now: () => this.now(),
          hubs: () => cluster.status().hubs,
          models: () => [...this.marketModels.keys()],
          readingTtlMs: () => this.config.saturation.maxReadingAgeMs,
          syncMs: cluster.options.syncMs,
        })
      : null;
    if (this.feed) {
      const feed = this.feed;
      this.events.subscribe((e) => feed.event(e));
    }
  }

  private now(): number {
    return this.clock();
  }

  /** Reads every model's metadata (once) and registers coordinators; `start()` then launches them. */
  async load(): Promise<void> {
    const externals = new Map(this.config.externals.map((e) => [e.name, e.url]));
    for (const m of this.config.models) {
      const info = await loadModelInfo(m.path, m.name);
      if (this.marketModels.has(info.model)) throw new Error(`two models are named ${info.model}; name one with NAME=PATH`);
      this.marketModels.set(info.model, info);
      this.coverage.addModel(info);
      this.cluster?.addModel(info);
      this.store.recordModel(info.model, info.path, this.now());
      // A model whose coordinator runs elsewhere (--coordinator-url with the same name) is only described by its GGUF.
      const url = externals.get(info.model);
      if (url) {
        this.supervisor.addExternal(info.model, url);
        externals.delete(info.model);
        const socket = this.config.dispatchSockets.find((d) => d.name === info.model);
        if (socket) this.dispatchers.externalSocket(info.model, socket.path);
        continue;
      }
      this.supervisor.addManaged({
        name: info.model,
        modelPath: info.path,
        dispatchSocket: this.dispatchers.managedSocket(info.model),
        extraArgs: [
          '--expert-dispatch-deadline-ms',
          String(this.config.dispatchDeadlineMs),
          ...(this.config.expertsOnDemand ? ['--experts-on-demand'] : []),
          ...this.config.coordinatorArgs,
        ],
        binary: this.config.coordinatorBinary,
        slots: this.config.slots,
        ctxPerSlot: this.config.ctxPerSlot,
        ...(this.config.threads ? { threads: this.config.threads } : {}),
      });
    }
    // Coordinators without a GGUF here are polled and proxied, but their experts are not on the market.
    for (const [name, url] of externals) {
      this.supervisor.addExternal(name, url);
      this.store.recordModel(name, null, this.now());
    }
  }

  async start(): Promise<void> {
    await this.startCluster();
    await this.dispatchers.start();
    await this.supervisor.start();
    this.ledger.start();
    this.poller.start();
    this.evictTimer = setInterval(() => this.evict(), this.config.evictEveryMs);
    this.evictTimer.unref();
    this.dash.start();
  }

  async stop(): Promise<void> {
    this.dash.stop();
    if (this.evictTimer) clearInterval(this.evictTimer);
    this.poller.stop();
    await this.channel.close();
    await this.signal.close();
    await this.relays.close();
    this.remoteLinks?.close();
    await this.hubRelay?.close();
    await this.supervisor.stop();
    await this.dispatchers.close();
    this.ledger.stop();
    await this.feed?.stop();
    await this.cluster?.stop();
    this.store.close();
  }

  // --- dispatch (Layer 1) and the volunteer channel

  /** What each model's dispatcher is built with (dispatch/dispatchers.ts DispatchersHost). */
  private dispatchersHost(): DispatchersHost {
    return {
      defaultMode: this.config.dispatchMode,
      events: (model) => this.dispatcherEvents(model),
      options: (model) => ({
        directory: this.remoteLinks ? joinDirectories(this.ownLinks(model), this.remoteLinks.directory(model)) : this.ownLinks(model),
        deadlines: { capMs: this.config.dispatchDeadlineMs },
        ...(this.config.claims ? { claims: this.config.claims } : {}),
        policy: {
          ...this.config.dispatch,
          saturateAt: this.config.saturation.saturateAt,
          maxReadingAgeMs: this.config.saturation.maxReadingAgeMs,
        },
        saturation: () => this.poller.reading(model),
        record: (workerId) => this.dispatch.record(workerId),
        metrics: this.dispatchMetrics,
        ...(this.ledger.on
          ? {
              chooseAudit: this.ledger.auditChooser(),
              auditDue: this.ledger.auditDue(),
              mayUse: (workerId: string) => mayUse(this.ledger.standingOf(workerId)),
            }
          : {}),
        clock: this.clock,
      }),
    };
  }

  /** The links of the workers attached to this hub: its volunteer channel's, then Kvasir's relays'. */
  private ownLinks(model: string): WorkerDirectory {
    return joinDirectories(this.channel.directory(model), this.relays.directory(model));
  }

  /** A model's dispatcher hooks: serves to the dispatch map, audits and faults to the ledger, the rest as events. */
  private dispatcherEvents(model: string): DispatcherEvents {
    return {
      onServe: (workerId, atMs, latencyMs, pairs, slice) => this.dispatch.recordServe(workerId, atMs, latencyMs, pairs, slice),
      onUsed: (workerId, pairs, slice) => this.ledger.used(workerId, pairs, slice),
      onBench: (workerId, benched) =>
        this.events.add(
          'dispatch',
          model,
          `${workerId} ${benched ? 'benched: keeps missing deadlines' : 'back: answered in time'}`,
          this.now(),
        ),
      onAudit: (workerId, result) => this.ledger.onAudit(model, workerId, result),
      // A partial of the wrong size or with NaN / ±∞ in it is refused at the frame; no honest client sends one (it
      // reports a failed computation instead), so with trust checks on it quarantines like a failed audit.
      onMiss: (workerId, kind) => {
        if (kind === 'non-finite' || kind === 'wrong-size')
          this.ledger.caught(workerId, `answered with ${kind === 'non-finite' ? 'sums that are not finite' : 'sums of the wrong size'}`);
      },
      onCoordinator: (event, detail) => {
        if (event !== 'closed' && event !== 'connected') this.events.add('coordinator', model, `dispatch ${event}: ${detail}`, this.now());
      },
    };
  }

  /**
   * Measurement seam (dispatch/dispatchers.ts `observe`): `observer` sees `model`'s dispatcher responses and its
   * workers' channel results until the returned function is called; one observer at a time.
   *
   *   const stop = hub.observeDispatch('m', { onResult: (id, rtMs, us) => overheadUs.push(rtMs * 1000 - us) });
   */
  observeDispatch(model: string, observer: DispatchObserver): () => void {
    return this.dispatchers.observe(model, observer);
  }

  /** Hands `/api/volunteer` upgrades on the HTTP server to the volunteer channel. */
  attachVolunteers(server: Server): void {
    const peers = this.peerDirectory.config.enabled;
    if (peers) this.signal.attach(server); // the PeerJS signalling server: docs/peers.md
    this.relays.attach(server); // Kvasir's /api/expert-relay (relay/relay.ts)
    const hubRelay = this.hubRelay;
    const cluster = this.cluster;
    if (hubRelay && cluster) {
      hubRelay.attach(server); // the other hubs' /api/hub-relay (cluster/relay-server.ts)
      server.once('listening', () => cluster.setRelayUrl(relayUrlOf(server.address())));
    }
    this.channel.upgradesElsewhere = (path) =>
      this.relays.handles(path) || (peers && this.signal.handles(path)) || (hubRelay?.handles(path) ?? false);
    this.channel.attach(server);
  }

  /** The shard server's per-chunk hash lists (GET /api/expert-shard/chunks). */
  chunkLists(): ChunkLists<Shard> {
    return this.chunks;
  }

  /** Whether the shard server tells volunteers its load (off with `--peers-first`: peers first, always). */
  shardLoadHint(): boolean {
    return !this.peerDirectory.config.peersFirst;
  }

  /** Bytes volunteers took from each other vs from the hub, per slice (GET /api/peers/slices). */
  peerSlices(): SliceTransfer[] {
    return this.peerDirectory.slices();
  }

  shardServer(): ShardServer {
    return this.shards;
  }

  /** The HTTP server's timeouts and socket caps (app.ts applies them where the server is created). */
  httpLimits(): HttpServerLimits {
    return { ...DEFAULT_HTTP_SERVER, ...this.config.http };
  }

  /** The shard server sent `wallet` a slice (or confirmed its cached copy): its workers may now report it held. */
  sliceDownloaded(wallet: string, slice: SliceRef): void {
    this.grants.downloaded(wallet, slice);
    this.sharedGrants?.downloaded(wallet, slice);
  }

  /** Tells a worker over its channel that its slice is no longer needed. */
  releaseWorker(workerId: string, reason: string): boolean {
    return this.channel.release(workerId, 'NOT_NEEDED', reason);
  }

  /** What the recruiter may read and tell (recruiter.ts RecruiterHost). */
  private recruiterHost(): RecruiterHost {
    return {
      now: () => this.now(),
      marketModels: this.marketModels,
      servedModels: () => this.servedModels(),
      shape: (model) => this.shape(model),
      // With --redis the cluster's demand: another hub's saturated coordinator recruits here too (cluster/cluster-feed.ts).
      reading: (model) =>
        this.feed
          ? clusterReading(
              this.poller.reading(model),
              this.feed.otherReadings(model),
              this.config.saturation.saturateAt,
              Date.now(),
              this.config.saturation.maxReadingAgeMs,
            )
          : this.poller.reading(model),
      saturation: this.config.saturation,
      dispatchModeOf: (model) => this.dispatchModeOf(model),
      coverage: this.coverageView,
      releaseCoverage: this.coverage,
      dispatch: this.dispatch,
      channel: { workerInfo: (id) => this.channel.workerInfo(id), demandChanged: () => this.channel.demandChanged() },
      grants: {
        assigned: (wallet, workerId, slice) => {
          this.grants.assigned(wallet, workerId, slice);
          this.sharedGrants?.assigned(wallet, workerId, slice);
        },
      },
      metrics: { assigned: () => this.metrics.assigned(), refused: () => this.metrics.refused() },
      release: (workerId, reason) => {
        this.releaseWorker(workerId, reason);
      },
      event: (kind, model, detail) => this.events.add(kind, model, detail, this.now()),
    };
  }

  /** What the trust ledger may call (trust/ledger.ts LedgerHost). */
  private ledgerHost(): LedgerHost {
    const cluster = this.cluster;
    return {
      // With --redis the credit goes to the cluster (each write with an item id: counted once), and the cluster tells
      // the volunteers their cluster-wide total when Redis answers.
      store: cluster
        ? {
            addCredit: (wallet, pairs, nowMs) => cluster.addCredit(wallet, pairs, nowMs),
            volunteer: (wallet) => this.store.volunteer(wallet),
            quarantine: (subject, reason, nowMs) => cluster.quarantine(subject, reason, nowMs),
          }
        : this.store,
      dispatch: this.dispatch,
      creditChanged: (wallet, credit) => {
        if (!cluster) this.channel.credit(wallet, credit);
      },
      event: (model, detail) => this.events.add('dispatch', model, detail, this.now()),
      quarantineWorker: (workerId, reason, wallet, by) => {
        this.quarantineWorker(workerId, reason, wallet, by);
      },
      now: () => this.now(),
      standingChanged: (workerId, wallet, change) => {
        if (change === 'strike') this.standing?.struck(workerId, wallet);
        else this.standing?.passedProbation(workerId, wallet);
      },
    };
  }

  /** What the shard server may call (shards.ts ShardHost): three methods, not the whole hub. */
  private shardHost(): ShardHost {
    return {
      modelInfo: (model) => this.modelInfo(model),
      authenticate: (authorization) => this.authenticate(authorization),
      sliceDownloaded: (wallet, slice) => this.sliceDownloaded(wallet, slice),
    };
  }

  private channelHost(): ChannelHost {
    return {
      otherHubs: () => this.cluster?.otherHubUrls() ?? [],
      authenticate: (authorization) => this.authenticate(authorization),
      quarantineReason: (workerId, wallet) => this.quarantines.quarantineReason(workerId) ?? this.quarantines.quarantineReason(wallet),
      badResult: (workerId, reason) => this.ledger.caught(workerId, `a result frame refused: ${reason}`),
      offer: (workerId, request) => this.volunteer(request, workerId),
      expertBytes: (model, layer) => bytesForExpertOf(this.shape(model), layer),
      warm: (request) => this.shardWarmer.asked(request),
      shard: async (model, layer, begin, end) => {
        const s = await this.shards.lookup({ model, layer, expertBegin: begin, expertEnd: end });
        return { bytes: s.length, digest: `sha256:${s.digest}` };
      },
      // linkcpp-server always computes as llama.cpp's CPU backend; the HELLO says so once it connected.
      numerics: (model) => this.dispatchers.numericsOf(model),
      reserve: (workerId, model, ranges) => this.coverage.heartbeat(workerId, model, ranges, this.now()),
      serving: (workerId, wallet, model, ranges) => {
        this.heartbeat(workerId, wallet, model, ranges);
      },
      forget: (workerId) => {
        this.coverage.remove(workerId);
        this.dispatch.forget(workerId);
        this.dispatchers.forget(workerId);
      },
      creditOf: (wallet) => this.creditOf(wallet),
      sliceCredit: (workerId, slice) => this.dispatch.record(workerId)?.slices.get(sliceKey(slice))?.credit ?? 0,
      event: (kind, model, detail) => this.events.add(kind, model, detail, this.now()),
    };
  }

  /** What Kvasir's relays may call (relay/relay.ts RelayHost). */
  private relayHost(): RelayHost {
    return {
      authenticate: (authorization) => this.authenticate(authorization),
      quarantineReason: (workerId, wallet) => this.quarantines.quarantineReason(workerId) ?? this.quarantines.quarantineReason(wallet),
      relayChanged: (workerId, model, ranges, seenMs, dialed) => {
        if (this.coverage.modelOf(workerId) !== model) return;
        this.coverage.heartbeat(workerId, model, ranges, seenMs, dialed);
        // Its grace window starts when work can first reach it, as a channel volunteer's does at `loaded`.
        const r = this.dispatch.record(workerId);
        if (dialed && r && r.lastServeMs === null && r.audits === 0) r.attachMs = this.now();
        this.channel.demandChanged();
      },
      badAnswer: (workerId, reason) => this.ledger.caught(workerId, reason),
      nEmbd: (model) => this.shape(model).nEmbd,
      event: (model, detail) => this.events.add('dispatch', model, detail, this.now()),
    };
  }

  // --- models and coordinators

  /** Every model served here (one coordinator each), market or not: what `/v1/models` lists. */
  servedModels(): string[] {
    return this.supervisor.names();
  }

  /** A market model's shape; throws MODEL_UNKNOWN for any other name. */
  shape(model: string): ModelShape {
    const m = this.marketModels.get(model);
    if (!m) throw new HubError('MODEL_UNKNOWN', `no model named "${model}" is served here`);
    return m;
  }

  /** A market model's registry record (its GGUF's path and shape), for the shard server; throws MODEL_UNKNOWN. */
  modelInfo(model: string): Readonly<ModelInfo> {
    const m = this.marketModels.get(model);
    if (!m) throw new HubError('MODEL_UNKNOWN', `no model named "${model}" is served here`);
    return m;
  }

  coordinators(): CoordinatorStatus[] {
    return this.supervisor.status();
  }

  /** Where to proxy a model's OpenAI request now. Throws MODEL_UNKNOWN, or COORDINATOR_UNAVAILABLE (503 + Retry-After). */
  coordinatorUrl(model: string): string {
    if (!this.supervisor.has(model))
      throw new HubError('MODEL_UNKNOWN', `no model named "${model}" is served here; GET /v1/models lists them`);
    return this.supervisor.available(model);
  }

  health(): HealthAnswer {
    return {
      ok: true,
      coordinators: this.coordinators().map((c) => ({ model: c.name, state: c.state, restarts: c.restarts })),
      ...(this.cluster ? { cluster: this.cluster.status() } : {}),
    };
  }

  // --- the cluster (--redis, cluster/cluster.ts)

  /**
   * Joins the cluster (`--redis`; nothing for a hub alone): connects, bounded, and syncs from then on. `start()` calls
   * it first; in-process tests that start no coordinator call it alone (harness/hub-fixtures.ts). Idempotent.
   */
  async startCluster(): Promise<void> {
    if (this.cluster && !this.clusterStarted) {
      this.clusterStarted = true;
      await this.cluster.start();
      this.feed?.start();
    }
  }

  /**
   * `GET /api/events?scope=cluster`: the newest events of every hub of the cluster (each row with its hub), from
   * Redis; a hub alone answers its own (hub null). CLUSTER_UNAVAILABLE while Redis is away.
   */
  async clusterEvents(filter: EventLogQuery): Promise<Array<HubEvent & { hub: string | null }>> {
    if (!this.feed) return this.events.query(filter).map((e) => ({ ...e, hub: null }));
    return (await this.feed.events(filter)) satisfies ClusterEventRow[];
  }

  /** The cluster's state now; null for a hub alone. */
  clusterStatus(): ClusterStatus | null {
    return this.cluster?.status() ?? null;
  }

  /** Writes this hub's due cluster state now (worker records, quarantines, credit) instead of at the next batch. */
  async clusterFlush(): Promise<void> {
    await this.cluster?.flush();
  }

  /** Reads the other hubs' state now (worker records, quarantines) instead of at the next `syncMs` tick. */
  async clusterSync(): Promise<void> {
    await this.cluster?.sync();
  }

  /** What the shared standing may read and change (cluster/standing.ts StandingHost). */
  private standingHost(): StandingHost {
    return {
      now: () => this.now(),
      probation: this.config.trust.probation,
      local: (workerId) => {
        const r = this.dispatch.record(workerId);
        return r && { standing: { wallet: r.wallet, passed: r.auditsPassed, strikes: r.strikes, quarantined: r.quarantined }, identity: r };
      },
      adopt: (workerId, adoption, from) => {
        const model = this.coverage.modelOf(workerId) ?? this.cluster?.remoteWorker(workerId)?.model ?? null;
        this.ledger.adoptShared(model, workerId, adoption, from.hub);
      },
    };
  }

  /** What the cluster may read and tell (cluster/cluster.ts ClusterHost). */
  private clusterHost(): ClusterHost {
    return {
      now: () => this.now(),
      staleMs: this.config.staleMs,
      dispatch: this.config.dispatch,
      localWorker: (workerId) => this.clusterRecord(workerId),
      localWorkerIds: () => this.coverage.models().flatMap((m) => this.coverage.workersOf(m)),
      localWorkerCount: () => this.coverage.size,
      isLocal: (workerId) => this.coverage.modelOf(workerId) !== undefined,
      store: this.store,
      quarantinedElsewhere: (subject, reason, hub) => this.quarantinedElsewhere(subject, reason, hub),
      creditChanged: (wallet, credit) => this.channel.credit(wallet, credit),
      event: (detail) => this.events.add('coordinator', null, `cluster: ${detail}`, this.now()),
      remoteChanged: () => this.remoteWorkersChanged(),
    };
  }

  /**
   * After a sync: the other hubs' workers become links of this hub's dispatchers (cluster/relay-links.ts), each with a
   * dispatch-map record here (not in this hub's coverage: its rows are the record's hub's), so that this hub's trust
   * checks audit it against this hub's coordinator, credit it (through the cluster, once) and quarantine it.
   */
  private remoteWorkersChanged(): void {
    const links = this.remoteLinks;
    const cluster = this.cluster;
    if (!links || !cluster) return;
    for (const model of this.marketModels.keys()) links.update(model, cluster.remoteWorkersOf(model));
    links.prune();
    const now = this.now();
    const ids = links.workerIds();
    for (const id of ids) {
      if (this.remoteAttached.has(id) || this.coverage.modelOf(id) !== undefined) continue;
      this.remoteAttached.add(id);
      this.dispatch.attach(id, cluster.remoteWorker(id)?.wallet ?? null, now);
    }
    for (const id of [...this.remoteAttached]) {
      if (ids.has(id)) continue;
      this.remoteAttached.delete(id);
      if (this.coverage.modelOf(id) !== undefined) continue; // it moved here: its record is the channel's now
      this.dispatch.forget(id);
      this.dispatchers.forget(id);
    }
    // The shared standing of every worker this hub holds a record of (cluster/standing.ts): its own and the linked.
    void this.standing
      ?.sync([...this.coverage.models().flatMap((m) => this.coverage.workersOf(m)), ...this.remoteAttached])
      .catch(() => {});
  }

  /** What the relay between hubs measured (cluster/relay-links.ts, relay-server.ts); null for a hub alone. */
  hubRelayStats(): { open: string[]; dialed: RelayLinkStats; served: HubRelayStats } | null {
    if (!this.remoteLinks || !this.hubRelay) return null;
    return { open: this.remoteLinks.openHubs(), dialed: this.remoteLinks.stats, served: this.hubRelay.stats };
  }

  /** A worker of this hub as the cluster publishes it (cluster/codec.ts ClusterWorker); null if it is not live here. */
  private clusterRecord(workerId: string): ClusterWorker | null {
    const model = this.coverage.modelOf(workerId);
    if (model === undefined || !this.cluster) return null;
    const seen = this.coverage.lastSeenMs(workerId) ?? this.now();
    const r = this.dispatch.record(workerId);
    return {
      v: 1,
      worker_id: workerId,
      hub: this.cluster.hubId,
      model,
      wallet: r?.wallet ?? this.channel.workerInfo(workerId)?.wallet ?? null,
      ranges: this.coverage.heldRanges(workerId) ?? [],
      replica: this.coverage.isReplica(workerId) ?? false,
      seen_ms: Math.max(0, Math.round(seen)),
      attach_ms: Math.max(0, Math.round(r?.attachMs ?? seen)),
      last_serve_ms: r?.lastServeMs === null || r?.lastServeMs === undefined ? null : Math.max(0, Math.round(r.lastServeMs)),
      latency_ms: r?.latencyMs ?? null,
      audits: r?.audits ?? 0,
      audits_passed: r?.auditsPassed ?? 0,
      audit_nmse_last: r?.auditNmseLast ?? null,
      audit_nmse_max: r?.auditNmseMax ?? null,
      quarantined: r?.quarantined ?? false,
      released: r?.released ?? false,
    };
  }

  /**
   * Another hub quarantined `subject`: every later heartbeat and hello of it is refused here already (the cluster's
   * list); a worker of that id attached here is disconnected and forgotten now, as on the hub that decided.
   */
  private quarantinedElsewhere(subject: string, reason: string, hub: string): void {
    const model = this.coverage.modelOf(subject) ?? null;
    const here = model !== null || this.dispatch.record(subject) !== undefined || this.channel.workerInfo(subject) !== undefined;
    this.events.add('quarantine', model, `${subject}: ${reason} (on hub ${hub})`, this.now());
    if (!here) return;
    this.dash.retire(model !== null ? this.dash.rowOf(subject, model) : null, 'quarantined');
    this.dispatch.setQuarantined(subject);
    if (!this.channel.disconnect(subject, 'QUARANTINED', reason)) this.dispatch.forget(subject);
    this.relays.forget(subject, 'FORBIDDEN', `quarantined: ${reason}`);
    this.coverage.remove(subject);
    this.dispatchers.forget(subject);
    this.channel.demandChanged();
  }

  // --- auth

  challenge(body: unknown, client: string): ChallengeReply {
    return this.auth.challenge(body, client, this.now());
  }

  /** Mints a node token and records the volunteer in the store. */
  login(body: unknown, client: string): NodeTokenReply {
    const answer = this.auth.nodeToken(body, client, this.now());
    this.store.touchVolunteer(answer.wallet, this.now());
    return answer;
  }

  /** The wallet of a market call's Authorization header; throws AUTH_*. */
  authenticate(authorizationHeader: string | undefined): string {
    return this.auth.authenticate(authorizationHeader, this.now());
  }

  // --- the market

  private saturation(model: string): SaturationState {
    return this.recruiter.saturation(model);
  }

  /** One market model's demand, or every one's (`model` ''/undefined); throws MODEL_UNKNOWN (recruiter.ts). */
  demandAnswer(model?: string): DemandAnswer<ModelDemand> {
    return this.recruiter.demandAnswer(model);
  }

  /**
   * The market's answer for one volunteer (recruiter.ts `volunteer`). `wallet` is the caller's over HTTP: the slice
   * is then remembered as assigned, so that its heartbeats may report it once the wallet downloaded it.
   */
  volunteer(request: VolunteerRequest, workerId: string | undefined, wallet?: string): VolunteerAnswer {
    return this.recruiter.volunteer(request, workerId, wallet);
  }

  /**
   * `POST /api/expert-coverage`: a heartbeat over HTTP. Each range must lie in a slice the market assigned to this
   * worker and its wallet downloaded (market/grants.ts: COVERAGE_NOT_ASSIGNED, COVERAGE_NOT_DOWNLOADED), after the
   * ranges' own checks; and the worker id must not be live under another wallet (WORKER_ID_TAKEN), or one token could
   * overwrite another volunteer's coverage by naming its worker id (the dashboard lists them).
   * The ranges count as replicas only when the hub can send the worker work (market/replicas.ts): over its channel, or
   * over the relay it dialed (Kvasir's, relay/relay.ts). A `url` of `relay:<session>` holds the worker's relay session:
   * the answer hands out `session` and `listen_port`, and says `wired` once the relay is dialed; another url ends it.
   */
  reportCoverage(workerId: string, wallet: string, model: string, ranges: readonly HeldRange[], url = ''): CoverageAnswer {
    const viaChannel = this.channel.workerInfo(workerId) !== undefined;
    const dialed = !viaChannel && ranges.length > 0 && this.relays.dialed(workerId, url);
    const verdict = replicaVerdict({ via: viaChannel ? 'channel' : 'http', relay: dialed ? 'dialed' : 'none' });
    const answer = this.heartbeat(
      workerId,
      wallet,
      model,
      ranges,
      () => {
        this.coverage.check(model, ranges);
        const owner =
          this.dispatch.record(workerId)?.wallet ||
          this.channel.workerInfo(workerId)?.wallet ||
          this.cluster?.remoteWorker(workerId)?.wallet;
        if (owner && owner !== wallet)
          throw new HubError('WORKER_ID_TAKEN', `worker id ${workerId} is live under another wallet; choose another worker id`);
        this.grants.admit(wallet, workerId, model, ranges);
        if (!viaChannel) this.relays.check(workerId, url);
      },
      verdict.counts,
    );
    const relay = viaChannel
      ? { wired: false, listen_port: null, session: null }
      : this.relays.report(workerId, wallet, model, ranges, url, this.now());
    return { ...answer, workers: this.coverage.size, replica: verdict.counts, ...relay };
  }

  /**
   * `POST /api/expert-coverage` as the route calls it: `reportCoverage`, and with `--redis` a report refused for a
   * grant this hub does not know (COVERAGE_NOT_ASSIGNED, COVERAGE_NOT_DOWNLOADED) is judged again, by the same rule,
   * after the wallet's grants are read from the cluster (another hub assigned the slice: cluster/grants.ts).
   */
  async reportCoverageShared(
    workerId: string,
    wallet: string,
    model: string,
    ranges: readonly HeldRange[],
    url = '',
  ): Promise<CoverageAnswer> {
    try {
      return this.reportCoverage(workerId, wallet, model, ranges, url);
    } catch (e) {
      const shared = this.sharedGrants;
      if (!shared || !(isHubError(e, 'COVERAGE_NOT_ASSIGNED') || isHubError(e, 'COVERAGE_NOT_DOWNLOADED'))) throw e;
      const read = await shared.load(wallet, this.grants).catch(() => 0);
      if (read === 0) throw e;
      return this.reportCoverage(workerId, wallet, model, ranges, url);
    }
  }

  /**
   * A heartbeat: the worker holds `ranges` now. The hub's own callers (the volunteer channel, tests) report what it
   * knows; `admit` is the HTTP path's extra rule, run after the quarantine and release checks, before anything changes.
   */
  heartbeat(
    workerId: string,
    wallet: string | null,
    model: string,
    ranges: readonly HeldRange[],
    admit?: () => void,
    replica = true,
  ): CoverageAnswer {
    const quarantined = this.quarantines.quarantineReason(workerId) ?? (wallet ? this.quarantines.quarantineReason(wallet) : undefined);
    if (quarantined) throw new HubError('WORKER_QUARANTINED', `this worker is quarantined: ${quarantined}`);
    const now = this.now();
    const heldOffMs = this.admin.holds.size > 0 ? this.admin.holds.remainingMs(workerId, now) : 0;
    if (heldOffMs > 0)
      throw new HubError(
        'WORKER_RELEASED',
        `the operator released this worker; stop serving its slice and ask for a new one after ${Math.ceil(heldOffMs / 1000)} s`,
      );
    admit?.();
    this.coverage.heartbeat(workerId, model, ranges, now, replica);
    this.dispatch.attach(workerId, wallet, now, ranges);
    this.dash.unretire(workerId);
    if (wallet) {
      this.store.touchVolunteer(wallet, now);
      this.creditOf(wallet); // into the cache now, not in the middle of a workers query
    }
    this.metrics.heartbeat();
    return { ok: true, stale_after_s: this.staleAfterS() };
  }

  /** Kvasir's relay sessions with their byte counts (GET /api/expert-relay/sessions). */
  relaySessions(): RelaySessionRow[] {
    return this.relays.sessions();
  }

  /** Drops workers without a heartbeat for `staleMs` (the timer calls this; tests call it after moving the clock). */
  evict(): string[] {
    const gone = this.coverage.evictStale(this.now(), this.config.staleMs);
    for (const w of gone) {
      this.dispatch.forget(w);
      this.relays.forget(w, 'SESSION_ENDED', 'no heartbeat');
      this.events.add('evict', null, `${w}: no heartbeat for ${this.staleAfterS()} s`, this.now());
    }
    this.metrics.evicted(gone.length);
    return gone;
  }

  private staleAfterS(): number {
    return Math.round(this.config.staleMs / 1000);
  }

  /** `GET /api/moe/recruitment` (recruiter.ts). */
  recruitment(): RecruitmentAnswer {
    return this.recruiter.recruitment();
  }

  /**
   * `GET /api/expert-dispatch-map`: one market model's rows (MODEL_UNKNOWN for another name), or, as Kvasir answers
   * when `model` is '' or absent, every market model's (`model` then names the only one, or is ''); `layer` ≥ 0 keeps
   * that layer's rows (Kvasir's -1: all). Rows carry Kvasir's `node_id` (the worker id, its convention) and its relay
   * fields `listen_port` and `session` (null for a worker without a relay session, relay/relay.ts).
   */
  dispatchMap(model = '', layer = -1): { model: string; rows: KvasirDispatchRow[] } {
    if (model) this.shape(model);
    const names = model ? [model] : [...this.marketModels.keys()];
    const now = this.now();
    const here = this.cluster?.hubId ?? null;
    const cluster = this.cluster;
    const rows = names
      .flatMap((name) => {
        const local = this.dispatch.rows(name, this.coverage, now).map((r) => ({ ...r, ...this.relays.fieldsOf(r.worker_id), hub: here }));
        if (!cluster) return local;
        // The other hubs' workers (from their records): no relay session here, theirs ends in their hub.
        const remote = cluster.remoteRows(name, now).map((r) => ({ ...r, listen_port: null, session: null }));
        return [...local, ...remote].sort(
          (a, b) => a.layer - b.layer || a.experts[0] - b.experts[0] || a.worker_id.localeCompare(b.worker_id),
        );
      })
      .filter((r) => layer < 0 || r.layer === layer)
      .map((r) => ({ ...r, node_id: r.worker_id }));
    return { model: model || (names.length === 1 ? (names[0] as string) : ''), rows };
  }

  // --- volunteers' durable record (the dispatcher and verification write these; tests use them directly)

  /** Credits `pairs` to `wallet` in the store at once (trust/ledger.ts). */
  addCredit(wallet: string, pairs: number): void {
    this.ledger.addCredit(wallet, pairs);
  }

  /**
   * `GET /api/credit?wallet=` (trust/ledger.ts); with `--redis` the cluster-wide credit, after this hub's due credit
   * is written (CLUSTER_UNAVAILABLE while Redis is away, CLUSTER_STATE_CORRUPT for an unreadable wallet).
   */
  async creditAnswer(wallet: string): Promise<CreditAnswer> {
    if (!this.cluster) return this.ledger.creditAnswer(wallet);
    this.ledger.flush();
    return await this.cluster.creditAnswer(wallet);
  }

  /** A wallet's durable credit, cached (trust/ledger.ts; with `--redis` the cluster's, cluster/cluster.ts `creditOf`). */
  creditOf(wallet: string): number {
    return this.cluster ? this.cluster.creditOf(wallet) : this.ledger.creditOf(wallet);
  }

  /**
   * Credits one verified item exactly once, whichever hub (or how many) reports it: `item` is the item's id, the same
   * on every hub that saw it (1 to 256 printable ASCII characters). Returns whether this report credited it, and the
   * wallet's credit after. In the store alone, or in the cluster's Redis with `--redis` (CLUSTER_UNAVAILABLE while away).
   */
  async creditVerified(item: string, wallet: string, pairs: number): Promise<CreditOnce> {
    const r = await this.creditBook.creditOnce(item, wallet, pairs, this.now());
    if (r.credited && !this.cluster) this.channel.credit(wallet, r.credit);
    return r;
  }

  /** Refuses every later heartbeat of `subject` (a worker id or a wallet) with WORKER_QUARANTINED. */
  quarantine(subject: string, reason: string): void {
    this.ledger.quarantine(subject, reason);
  }

  // --- the dashboard (protocol/dashboard.ts)

  /** A model's dispatch mode now (`--dispatch`, or what an admin set). */
  dispatchModeOf(model: string): DispatchMode {
    return this.dispatchers.modeOf(model);
  }

  /** Every served model as the dashboard shows it now (dashboard/read-model.ts). */
  dashboardModels(): ModelStatus[] {
    return this.dash.models();
  }

  /** The dashboard stream's first message (dashboard/read-model.ts). */
  dashboardSnapshot(): Snapshot {
    return this.dash.snapshot();
  }

  /**
   * A dashboard stream for `client`, in two steps (dashboard/read-model.ts `stream`): the caps and the snapshot now,
   * the sink when the returned function is called, at once.
   *
   *   const open = hub.dashboardStream(ip); reply.hijack(); res.writeHead(200, SSE_HEADERS); open(res);
   */
  dashboardStream(client: string): (sink: StreamSink) => void {
    return this.dash.stream(client, () => this.dashboardSnapshot());
  }

  /**
   * Ends every volunteer connection (SHUTTING_DOWN). The HTTP server's close waits for every socket it accepted,
   * upgraded WebSockets too, so the app calls this before closing (a preClose hook); stop() calls it again, harmlessly.
   */
  closeVolunteers(): Promise<void> {
    // The relay between hubs too: another hub's relay into this one is an upgraded socket of the HTTP server, and that
    // hub keeps it open while it links this hub's workers (cluster/relay-server.ts); this hub's own are closed with it.
    this.remoteLinks?.close();
    return Promise.all([this.channel.close(), this.signal.close(), this.relays.close(), this.hubRelay?.close()]).then(() => {});
  }

  /** Ends every dashboard stream (the HTTP server closes; the hub's stop does it too). */
  closeDashboardStreams(): void {
    this.dash.closeStreams();
  }

  /**
   * Takes a dashboard sample now, besides the TICK_MS timer's: every stream gets it as a tick and the history keeps it.
   * For a caller that drives the hub's time itself (the clock passed to the constructor: a simulation, a replay, a
   * test) and wants samples at its own instants rather than the wall clock's.
   */
  dashboardTick(): void {
    this.dash.tick();
  }

  /** `GET /api/dashboard/workers`: one page of the workers table; throws MODEL_UNKNOWN for a model not served here. */
  dashboardWorkers(q: WorkersQuery): WorkersPage {
    return this.dash.workers(q);
  }

  /** A market model's heatmap (dashboard/read-model.ts); throws MODEL_UNKNOWN. */
  coverageMap(model: string): CoverageMap {
    return this.dash.coverageMap(model);
  }

  /** What the dashboard's read model may read (dashboard/read-model.ts ReadModelHost). */
  private readModelHost(): ReadModelHost {
    return {
      now: () => this.now(),
      servedModels: () => this.servedModels(),
      marketModels: this.marketModels,
      coordinators: () => this.supervisor.status(),
      serves: (model) => this.supervisor.has(model),
      saturation: (model) => this.saturation(model),
      saturationConfig: this.config.saturation,
      dispatchConfig: this.config.dispatch,
      dispatchModeOf: (model) => this.dispatchModeOf(model),
      dispatcher: (model) => this.dispatchers.get(model),
      poller: this.poller,
      coverage: this.coverage,
      dispatch: this.dispatch,
      channel: this.channel,
      trustWords: (passed, quarantined) => this.ledger.trustWords(passed, quarantined),
      creditOf: (wallet) => this.creditOf(wallet),
      recentEvents: (limit) => this.events.recent(limit),
      adminEnabled: this.admin.enabled,
    };
  }

  // --- admin actions (token checked by `requireAdmin`; every action and every bad argument in the event log)

  /** Throws ADMIN_DISABLED (403) or ADMIN_TOKEN_INVALID (401) unless `authorization` carries the admin token. */
  requireAdmin(authorization: string | undefined): void {
    this.admin.require(authorization);
  }

  /** Admin calls refused so far, by code (dashboard/admin-actions.ts). */
  adminRefusalCounts(): Record<string, number> {
    return this.admin.refusalCounts();
  }

  /** Runs one admin action, logged (dashboard/admin-actions.ts `run`). */
  adminAction(what: string, model: string | null, act: () => AdminDone): AdminResult {
    return this.admin.run(what, model, act);
  }

  /** Releases a worker's slice (dashboard/admin-actions.ts `release`). */
  adminRelease(workerId: string, reason: string): AdminDone {
    return this.admin.release(workerId, reason);
  }

  /** Quarantines a worker, and its wallet when `wallet` (dashboard/admin-actions.ts `quarantine`). */
  adminQuarantine(workerId: string, reason: string, wallet = false): AdminDone {
    return this.admin.quarantine(workerId, reason, wallet);
  }

  /** The market's targets (dashboard/admin-actions.ts `target`). */
  adminTarget(change: { base?: number; boost?: number }): { model: null; detail: string } {
    return this.admin.target(change);
  }

  /** One model's dispatch mode (dashboard/admin-actions.ts `dispatch`). */
  adminDispatch(model: string, mode: DispatchModeName): { model: string; detail: string } {
    return this.admin.dispatch(model, mode);
  }

  /** What the admin actions may call (dashboard/admin-actions.ts AdminHost). */
  private adminHost(): AdminHost {
    return {
      event: (model, detail) => this.events.add('admin', model, detail, this.now()),
      workersChanged: () => this.dash.workersChanged(),
      workerModel: (workerId) => this.knownWorker(workerId).model,
      walletOf: (workerId) => this.dispatch.record(workerId)?.wallet ?? this.channel.workerInfo(workerId)?.wallet ?? null,
      release: (workerId, model, why, coolDownMs) => {
        const row = model !== null ? this.dash.rowOf(workerId, model) : null;
        if (this.channel.release(workerId, 'NOT_NEEDED', why, coolDownMs)) {
          this.dash.retire(row, 'released');
          return 'channel';
        }
        if (!this.dispatch.record(workerId) || this.channel.workerInfo(workerId)) return null;
        this.dash.retire(row, 'released');
        this.coverage.remove(workerId);
        this.dispatch.forget(workerId);
        this.dispatchers.forget(workerId);
        this.relays.forget(workerId, 'SESSION_ENDED', `released by the operator: ${why}`);
        this.channel.demandChanged();
        return 'http';
      },
      quarantineWorker: (workerId, reason, wallet, by) => this.quarantineWorker(workerId, reason, wallet, by),
      saturation: this.config.saturation,
      targetsChanged: () => {
        this.recruiter.targetsChanged();
      },
      serves: (model) => this.supervisor.has(model),
      dispatchModeOf: (model) => this.dispatchModeOf(model),
      setDispatchMode: (model, mode) => {
        this.dispatchers.setMode(model, mode);
        this.channel.demandChanged();
      },
      now: () => this.now(),
    };
  }

  private knownWorker(workerId: string): { model: string | null } {
    const model = this.coverage.modelOf(workerId);
    if (model !== undefined) return { model };
    if (this.dispatch.record(workerId) || this.channel.workerInfo(workerId)) return { model: null };
    throw new HubError('WORKER_UNKNOWN', `no worker "${workerId}" is connected or covering experts here`);
  }

  /** Quarantines a worker (and its wallet when `wallet`): durable, disconnected, forgotten by every dispatcher. */
  private quarantineWorker(workerId: string, reason: string, wallet: boolean, by: string): { model: string | null; detail: string } {
    const model = this.coverage.modelOf(workerId) ?? null;
    const walletId = wallet ? (this.dispatch.record(workerId)?.wallet ?? this.channel.workerInfo(workerId)?.wallet ?? null) : null;
    this.dash.retire(model !== null ? this.dash.rowOf(workerId, model) : null, 'quarantined');
    this.quarantines.quarantine(workerId, reason, this.now());
    if (walletId) this.quarantines.quarantine(walletId, reason, this.now());
    this.dispatch.setQuarantined(workerId); // the dispatcher skips it until its connection is gone (which forgets it)
    if (!this.channel.disconnect(workerId, 'QUARANTINED', reason)) this.dispatch.forget(workerId);
    this.relays.forget(workerId, 'FORBIDDEN', `quarantined: ${reason}`);
    this.coverage.remove(workerId);
    this.dispatchers.forget(workerId);
    this.events.add('quarantine', model, `${workerId}: ${reason} (${by})`, this.now());
    this.channel.demandChanged();
    const what = `${workerId}${model ? ` (${model})` : ''}${walletId ? ` and its wallet ${walletId}` : ''}`;
    return { model, detail: `quarantined ${what}: ${reason}` };
  }

  // --- observation

  recentEvents(limit: number): HubEvent[] {
    return this.events.recent(limit);
  }

  /** `GET /api/events` with its filters: the newest `limit` matching events, newest last. */
  queryEvents(filter: EventLogQuery): HubEvent[] {
    return this.events.query(filter);
  }

  /** An error the HTTP layer could not attribute (answered 500 INTERNAL) goes to the event log. */
  noteInternalError(message: string): void {
    this.events.add('coordinator', null, `internal error: ${message}`, this.now());
  }

  /** `GET /metrics`: Prometheus text and its content type. */
  async scrape(): Promise<{ contentType: string; text: string }> {
    return { contentType: this.metrics.contentType, text: await this.metrics.render() };
  }

  private readings(): HubReadings {
    const now = this.now();
    return {
      recruitment: this.recruitment().models,
      workers: [...this.marketModels.keys()].map((model) => ({ model, byState: this.dispatch.countByState(model, this.coverage, now) })),
      pollFailures: this.servedModels().map((model) => ({ model, failures: this.poller.stats.get(model)?.failures ?? 0 })),
      coordinators: this.coordinators(),
      volunteers: this.channel.countByState(),
    };
  }

  /**
   * The OS process of a managed coordinator now; null for an external one, or between a crash and its restart. For
   * tooling that watches or places it (bench/elastic/gain.ts pins its CPUs and reads its log; a residency check reads
   * its memory map) and for drills that kill it: the supervisor restarts a killed coordinator with backoff, as after a
   * crash. A restart spawns a new process, so ask again rather than keep the one returned.
   */
  coordinatorProcess(model: string): ChildProcess | null {
    return this.supervisor.processOf(model);
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
