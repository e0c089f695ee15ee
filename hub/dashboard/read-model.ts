/**
 * The dashboard's read model: what the page and its API read of the hub (protocol/dashboard.ts), built from the hub's
 * parts on demand, plus the little state only the dashboard keeps (workers retired lately, round trips since the last
 * tick) and the live wiring (the sampler's TICK_MS timer, the SSE streams, the workers table's cache). It reads the
 * hub through a ReadModelHost, never the Hub itself, so the dashboard's shape can change without touching the hub.
 *
 *   const dash = new DashboardReadModel(host, { streams: config.dashboardStreams, tokensMaxAgeMs, onError }, clock);
 *   dash.start();                       // samples every TICK_MS, broadcast to every stream
 *   dash.snapshot(); dash.workers(q);   // GET /api/dashboard/snapshot, /api/dashboard/workers
 */
import type { CoverageStore } from '../market/coverage.ts';
import { effectiveTarget, type SaturationConfig, type SaturationState } from '../market/saturation.ts';
import type { DispatchConfig, DispatchMap } from '../dispatch/map.ts';
import { workerState } from '../dispatch/map.ts';
import type { DispatchMode } from '../dispatch/policy.ts';
import type { ModelDispatcher } from '../dispatch/dispatcher.ts';
import type { VolunteerChannel } from '../channel/channel.ts';
import type { SaturationPoller } from '../poller.ts';
import type { ModelInfo } from '../registry.ts';
import type { CoordinatorStatus } from '../supervisor.ts';
import type { HubEvent } from '../events.ts';
import { HubError } from '../errors.ts';
import { RETIRED_WORKERS_KEPT } from '../limits.ts';
import { RoundTripReservoir, round2 } from './rates.ts';
import { DashboardSampler, type ModelReading, type SamplerSource } from './sampler.ts';
import { DashboardStreams, type StreamOptions, type StreamSink } from './stream.ts';
import { WorkersTable } from './workers.ts';
import { sliceKey } from '../trust/slice-credit.ts';
import {
  EVENTS_PAGE_MAX,
  HISTORY_MS,
  TICK_MS,
  WORKER_STATES,
  type CoverageMap,
  type ModelStatus,
  type Snapshot,
  type Totals,
  type WorkerRow,
  type WorkerStateName,
  type WorkersPage,
  type WorkersQuery,
} from '../../protocol/dashboard.ts';

/** What the read model reads of the hub, and no more (the pattern of channel/channel.ts's ChannelHost). */
export interface ReadModelHost {
  now(): number;
  /** Every served model (one coordinator each), market or not. */
  servedModels(): string[];
  /** The models on the market (those whose GGUF the hub read), by name. */
  marketModels: ReadonlyMap<string, ModelInfo>;
  coordinators(): CoordinatorStatus[];
  /** Whether `model` is served here. */
  serves(model: string): boolean;
  saturation(model: string): SaturationState;
  /** The market's targets now (an admin may change them). */
  saturationConfig: SaturationConfig;
  dispatchConfig: DispatchConfig;
  dispatchModeOf(model: string): DispatchMode;
  dispatcher(model: string): Pick<ModelDispatcher, 'connected' | 'totals' | 'isBenched'> | undefined;
  poller: Pick<SaturationPoller, 'generation'>;
  coverage: Pick<CoverageStore, 'workersOf' | 'modelOf' | 'heldRanges' | 'replicaCounts' | 'size'>;
  dispatch: Pick<DispatchMap, 'record' | 'state' | 'pairsServed'>;
  channel: Pick<VolunteerChannel, 'workerInfo' | 'countByState'>;
  /** A worker's standing as the workers table words it (trust/ledger.ts). */
  trustWords(passed: number, quarantined: boolean): string;
  /** A wallet's durable credit (trust/ledger.ts). */
  creditOf(wallet: string): number;
  recentEvents(limit: number): HubEvent[];
  /** Whether the admin actions are enabled (the page shows their buttons). */
  adminEnabled: boolean;
}

export interface ReadModelOptions {
  /** The dashboard streams' caps. */
  streams: Partial<StreamOptions>;
  /** How old a coordinator's token counters may be and still give a rate (the poller's interval and timeout). */
  tokensMaxAgeMs: number;
  /** A tick that threw (the timer keeps going). */
  onError(e: unknown): void;
}

/** A worker the hub released or quarantined and no longer tracks: the dashboard lists it for HISTORY_MS more. */
interface RetiredWorker {
  row: WorkerRow;
  state: 'released' | 'quarantined';
  atMs: number;
}

const NO_WORKERS = (): Record<WorkerStateName, number> =>
  Object.fromEntries(WORKER_STATES.map((s) => [s, 0])) as Record<WorkerStateName, number>;

export class DashboardReadModel {
  private readonly streams: DashboardStreams;
  private readonly sampler: DashboardSampler;
  private readonly workersTable = new WorkersTable(() => this.workerRows());
  /** Each market model's round trips since the last dashboard tick (always on: one reservoir add per result). */
  private readonly roundTrips = new Map<string, RoundTripReservoir>();
  private readonly retired = new Map<string, RetiredWorker>();

  constructor(
    private readonly host: ReadModelHost,
    options: ReadModelOptions,
    clock: () => number,
  ) {
    this.streams = new DashboardStreams(options.streams, clock);
    this.sampler = new DashboardSampler(this.samplerSource(), this.streams, clock, {
      tokensMaxAgeMs: options.tokensMaxAgeMs,
      onError: options.onError,
    });
  }

  /** Samples every TICK_MS until `stop()`. */
  start(): void {
    this.sampler.start();
  }

  /** Stops the timer and ends every stream. */
  stop(): void {
    this.sampler.stop();
    this.streams.closeAll();
  }

  /**
   * Takes a sample now, besides the timer's: every stream gets it as a tick and the history keeps it. For a caller
   * that drives the hub's time itself (a simulation, a replay, a test) and wants samples at its own instants.
   */
  tick(): void {
    this.sampler.tick();
  }

  /** An event for every stream. */
  event(e: HubEvent): void {
    this.streams.broadcast('event', e);
  }

  /** A worker's channel result took `roundTripMs` (the next tick's round-trip percentiles). */
  roundTrip(model: string, roundTripMs: number): void {
    let r = this.roundTrips.get(model);
    if (!r) {
      r = new RoundTripReservoir();
      this.roundTrips.set(model, r);
    }
    r.add(roundTripMs);
  }

  /** Something an admin did changed what the workers table shows. */
  workersChanged(): void {
    this.workersTable.invalidate();
  }

  /** A worker's row of `model` as the table shows it now (taken before the hub stops tracking it, for `retire`). */
  rowOf(workerId: string, model: string): WorkerRow {
    return this.workerRow(workerId, model, this.host.now());
  }

  /** Remembers a worker the hub stops tracking (its row taken before), for HISTORY_MS; the newest RETIRED_WORKERS_KEPT. */
  retire(row: WorkerRow | null, state: RetiredWorker['state']): void {
    if (!row) return;
    this.retired.delete(row.id);
    this.retired.set(row.id, { row: { ...row, state }, state, atMs: this.host.now() });
    while (this.retired.size > RETIRED_WORKERS_KEPT) this.retired.delete(this.retired.keys().next().value as string);
  }

  /** A retired worker is back (a heartbeat): listed as it is, no longer as retired. */
  unretire(workerId: string): void {
    this.retired.delete(workerId);
  }

  /** Forgets retired workers older than the history (oldest first: the map is in insertion order). */
  private pruneRetired(nowMs: number): void {
    for (const [id, r] of this.retired) {
      if (nowMs - r.atMs <= HISTORY_MS) break;
      this.retired.delete(id);
    }
  }

  private samplerSource(): SamplerSource {
    return {
      read: () => {
        this.pruneRetired(this.host.now());
        return this.readModels();
      },
      coverage: (model) => (this.host.marketModels.has(model) ? this.coverageMap(model) : null),
    };
  }

  private readModels(): { models: ModelReading[]; totals: Totals } {
    return {
      models: this.models().map((status): ModelReading => {
        const p = this.host.dispatcher(status.model)?.totals.pairs;
        return {
          status,
          pairs: p ? { served: p.served, fallback: p.fallback, late: p.late, rejected: p.rejected } : null,
          roundTrips: this.roundTrips.get(status.model)?.drain() ?? [],
          generation: this.host.poller.generation(status.model),
        };
      }),
      totals: this.totals(),
    };
  }

  /** Every served model as the dashboard shows it now; its numbers are those of `recruitment()` and `dispatchMap()`. */
  models(): ModelStatus[] {
    const now = this.host.now();
    const cfg = this.host.saturationConfig;
    const coordinators = new Map(this.host.coordinators().map((c) => [c.name, c]));
    return this.host.servedModels().map((model) => {
      const s = this.host.saturation(model);
      const c = coordinators.get(model);
      const info = this.host.marketModels.get(model);
      return {
        model,
        coordinator: {
          state: c?.state ?? 'stopped',
          restarts: c?.restarts ?? 0,
          lastExit: c?.lastExit ?? null,
          dispatchUnsupported: c?.dispatchUnsupported ?? null,
        },
        market: info !== undefined,
        busy: s.busy,
        slots: s.slots,
        saturated: s.saturated,
        recruiting: s.recruiting,
        baseTarget: cfg.targetBase,
        boost: cfg.boost,
        effectiveTarget: effectiveTarget(cfg, s.recruiting),
        dispatchMode: this.host.dispatchModeOf(model),
        dispatchConnected: this.host.dispatcher(model)?.connected ?? false,
        workers: info ? this.workerCounts(model, now) : NO_WORKERS(),
        shape: info ? { nLayer: info.nLayer, nExpert: info.nExpert, moeLayers: [...info.moeLayers] } : null,
      };
    });
  }

  /** A model's workers by state: the dispatch map's, `loading` for reservations, and those retired lately. */
  private workerCounts(model: string, nowMs: number): Record<WorkerStateName, number> {
    const counts = NO_WORKERS();
    const { coverage, dispatch } = this.host;
    for (const id of coverage.workersOf(model)) counts[dispatch.state(id, nowMs) ?? 'loading']++;
    for (const [id, r] of this.retired) if (r.row.model === model && coverage.modelOf(id) === undefined) counts[r.state]++;
    return counts;
  }

  private totals(): Totals {
    return { volunteers: this.host.channel.countByState(), workers: this.host.coverage.size };
  }

  /** The stream's first message: everything the page draws from nothing. */
  snapshot(): Snapshot {
    return {
      v: 1,
      atMs: this.host.now(),
      tickMs: TICK_MS,
      historyMs: HISTORY_MS,
      models: this.models(),
      history: this.sampler.history.all(),
      events: this.host.recentEvents(EVENTS_PAGE_MAX),
      coverage: [...this.host.marketModels.keys()].map((m) => this.coverageMap(m)),
      totals: this.totals(),
      adminEnabled: this.host.adminEnabled,
    };
  }

  /**
   * A dashboard stream for `client` (its address key), in two steps so that every refusal is a JSON answer: this
   * checks the caps (TOO_MANY_STREAMS, RATE_LIMITED) and builds the snapshot — any throw leaves before the route
   * commits to a stream — and the function it returns adds the sink and writes the snapshot, then every tick, event
   * and heatmap change until the sink or the hub closes. Call it at once (no broadcast may fall between).
   * `snapshot` builds the first message (the Hub passes its own `dashboardSnapshot`, the one public read of it).
   */
  stream(client: string, snapshot: () => Snapshot = () => this.snapshot()): (sink: StreamSink) => void {
    this.streams.assertRoom(client);
    const first = snapshot();
    return (sink) => {
      const none = this.streams.size === 0;
      this.streams.open(sink, client, 'snapshot', first);
      this.sampler.snapshotSent(first.coverage, none);
    };
  }

  /** Ends every dashboard stream. */
  closeStreams(): void {
    this.streams.closeAll();
  }

  /** `GET /api/dashboard/workers`: one page of the workers table; throws MODEL_UNKNOWN for a model not served here. */
  workers(q: WorkersQuery): WorkersPage {
    if (q.model !== '' && !this.host.serves(q.model)) throw new HubError('MODEL_UNKNOWN', `no model named "${q.model}" is served here`);
    return this.workersTable.page(q);
  }

  /** Every worker of every market model, as the table shows it (one pass; no store reads once credits are cached). */
  private workerRows(): WorkerRow[] {
    const now = this.host.now();
    const rows: WorkerRow[] = [];
    for (const model of this.host.marketModels.keys())
      for (const id of this.host.coverage.workersOf(model)) rows.push(this.workerRow(id, model, now));
    for (const [id, r] of this.retired) if (this.host.coverage.modelOf(id) === undefined) rows.push({ ...r.row, state: r.state });
    return rows;
  }

  private workerRow(id: string, model: string, nowMs: number): WorkerRow {
    const { dispatch, channel, coverage } = this.host;
    const rec = dispatch.record(id);
    const v = channel.workerInfo(id);
    const ranges = coverage.heldRanges(id) ?? [];
    const held = ranges[0];
    const wallet = rec?.wallet ?? v?.wallet ?? null;
    return {
      id,
      model,
      slice: held ? [held[0], held[1], held[2]] : null,
      ...(ranges.length > 1 && { slices: ranges.map(([l, b, e]): [number, number, number] => [l, b, e]) }),
      ...(rec &&
        ranges.length > 0 && {
          sliceStats: ranges.map(([l, b, e]) => {
            const x = rec.slices.get(sliceKey({ layer: l, begin: b, end: e }));
            return { slice: [l, b, e] as [number, number, number], pairs: x?.pairs ?? 0, credit: x?.credit ?? 0 };
          }),
        }),
      state: rec ? workerState(rec, nowMs, this.host.dispatchConfig) : 'loading',
      backend: v ? v.backend : 'native',
      device: v?.device ?? '',
      gflops: v?.gflops ?? null,
      lastServeMs: rec?.lastServeMs ?? null,
      latencyMs: rec?.latencyMs == null ? null : round2(rec.latencyMs),
      pairsServed: dispatch.pairsServed(id),
      trust: rec ? this.host.trustWords(rec.auditsPassed, rec.quarantined) : '',
      benched: this.host.dispatcher(model)?.isBenched(id) ?? false,
      credit: wallet ? this.host.creditOf(wallet) : null,
    };
  }

  /** A market model's heatmap: live replicas per (MoE layer, expert), capped at 255; throws MODEL_UNKNOWN. */
  coverageMap(model: string): CoverageMap {
    const info = this.host.marketModels.get(model);
    if (!info) throw new HubError('MODEL_UNKNOWN', `no model named "${model}" is served here`);
    const { nExpert, moeLayers } = info;
    const bytes = Buffer.alloc(moeLayers.length * nExpert);
    moeLayers.forEach((layer, i) => {
      const counts = this.host.coverage.replicaCounts(model, layer);
      for (let e = 0; e < nExpert; e++) bytes[i * nExpert + e] = Math.min(counts[e] as number, 255);
    });
    return {
      model,
      atMs: this.host.now(),
      moeLayers: [...moeLayers],
      nExpert,
      target: effectiveTarget(this.host.saturationConfig, this.host.saturation(model).recruiting),
      replicas: bytes.toString('base64'),
    };
  }
}
