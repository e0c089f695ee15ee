/**
 * The hub: one object owning the registry, the market, the dispatch map, the coordinators and the durable state.
 * The HTTP layer (app.ts) is a thin shell over it.
 */
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CoordinatorSupervisor } from './supervisor.ts';
import { DEFAULT_POLLER, SaturationPoller, type PollerOptions } from './poller.ts';
import { CoverageStore } from './market/coverage.ts';
import { modelDemand } from './market/demand.ts';
import { chooseAssignment, type VolunteerAnswer, type VolunteerRequest } from './market/assign.ts';
import { DEFAULT_SATURATION, effectiveTarget, saturationState, type SaturationConfig, type SaturationState } from './market/saturation.ts';
import type { ModelDemand, ModelShape } from './market/types.ts';
import { DEFAULT_DISPATCH, DispatchMap, type DispatchConfig } from './dispatch-map.ts';
import { EventLog } from './events.ts';
import { HubState } from './state.ts';
import { NodeAuth } from './auth/index.ts';
import { HubError } from './errors.ts';
import { loadModelInfo, type ModelInfo } from './registry.ts';
import { renderPrometheus, type MetricSample } from './metrics.ts';

export const DEFAULT_COORDINATOR_BINARY = fileURLToPath(new URL('../coordinator/bin/linkcpp-server', import.meta.url));

export interface HubConfig {
  host: string;
  port: number;
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
    staleMs: 120_000,
    maxWorkers: 10_000,
    evictEveryMs: 5_000,
    authRateLimit: { capacity: 30, refillPerSec: 0.5 },
    ...over,
  };
}

export interface RecruitmentRow {
  model: string;
  busy: number | null;
  slots: number | null;
  saturated: boolean;
  recruiting: boolean;
  base_target: number;
  effective_target: number;
  expert_workers: number;
  age_s: number | null;
}

export class Hub {
  readonly models = new Map<string, ModelInfo>();
  readonly coverage: CoverageStore;
  readonly dispatch: DispatchMap;
  readonly events = new EventLog(1000);
  readonly supervisor: CoordinatorSupervisor;
  readonly poller: SaturationPoller;
  readonly state: HubState;
  readonly auth: NodeAuth;
  readonly counters = { assignments: 0, refusals: 0, evictions: 0, heartbeats: 0 };
  private readonly recruitingNow = new Map<string, boolean>();
  private evictTimer: NodeJS.Timeout | null = null;

  constructor(readonly config: HubConfig, private readonly clock: () => number = Date.now) {
    this.coverage = new CoverageStore({ maxWorkers: config.maxWorkers });
    this.dispatch = new DispatchMap(config.dispatch);
    this.state = new HubState(config.stateDir === ':memory:' ? ':memory:' : join(config.stateDir, 'hub.sqlite'));
    this.auth = new NodeAuth({ secret: this.state.tokenSecret(), rateLimit: config.authRateLimit });
    this.supervisor = new CoordinatorSupervisor((name, state, detail) => this.events.add('coordinator', name, `${state}: ${detail}`, this.clock()));
    this.poller = new SaturationPoller(
      () => this.supervisor.names().map((name) => ({ name, url: this.supervisor.urlOf(name) })),
      config.poller,
      (name) => this.noteSaturation(name),
    );
  }

  now(): number {
    return this.clock();
  }

  /** Reads every model's metadata (once) and registers coordinators; `start()` then launches them. */
  async load(): Promise<void> {
    const externals = new Map(this.config.externals.map((e) => [e.name, e.url]));
    for (const m of this.config.models) {
      const info = await loadModelInfo(m.path, m.name);
      if (this.models.has(info.model)) throw new Error(`two models are named ${info.model}; name one with NAME=PATH`);
      this.models.set(info.model, info);
      this.coverage.addModel(info);
      this.state.recordModel(info.model, info.path, this.now());
      // A model whose coordinator runs elsewhere (--coordinator-url with the same name) is only described by its GGUF.
      const url = externals.get(info.model);
      if (url) {
        this.supervisor.addExternal(info.model, url);
        externals.delete(info.model);
        continue;
      }
      this.supervisor.addManaged({
        name: info.model, modelPath: info.path, binary: this.config.coordinatorBinary, slots: this.config.slots,
        ctxPerSlot: this.config.ctxPerSlot, ...(this.config.threads ? { threads: this.config.threads } : {}),
      });
    }
    // Coordinators without a GGUF here are polled and proxied, but their experts are not on the market.
    for (const [name, url] of externals) {
      this.supervisor.addExternal(name, url);
      this.state.recordModel(name, null, this.now());
    }
  }

  async start(): Promise<void> {
    await this.supervisor.start();
    this.poller.start();
    this.evictTimer = setInterval(() => this.evict(), this.config.evictEveryMs);
    this.evictTimer.unref();
  }

  async stop(): Promise<void> {
    if (this.evictTimer) clearInterval(this.evictTimer);
    this.poller.stop();
    await this.supervisor.stop();
    this.state.close();
  }

  modelNames(): string[] {
    return this.supervisor.names();
  }

  shape(model: string): ModelShape {
    const m = this.models.get(model);
    if (!m) throw new HubError('MODEL_UNKNOWN', `no model named "${model}" is served here`);
    return m;
  }

  saturation(model: string): SaturationState {
    return saturationState(this.poller.reading(model), this.now(), this.config.saturation);
  }

  private noteSaturation(model: string): void {
    const recruiting = this.saturation(model).recruiting;
    const before = this.recruitingNow.get(model) ?? false;
    if (recruiting !== before) {
      this.recruitingNow.set(model, recruiting);
      this.events.add(recruiting ? 'saturation-onset' : 'saturation-end', model, recruiting ? 'recruiting volunteers' : 'load passed', this.now());
    }
  }

  demand(model?: string): ModelDemand[] {
    const names = model ? [model] : [...this.models.keys()];
    return names.map((name) => {
      const shape = this.shape(name);
      const recruiting = this.saturation(name).recruiting;
      const target = effectiveTarget(this.config.saturation, recruiting);
      return modelDemand(shape, (layer) => this.coverage.replicaCounts(name, layer), target, recruiting, this.coverage.workerCount(name) > 0);
    });
  }

  volunteer(request: VolunteerRequest, workerId: string | undefined): VolunteerAnswer {
    if (request.model && !this.models.has(request.model)) throw new HubError('MODEL_UNKNOWN', `no model named "${request.model}" is served here`);
    const held = workerId
      ? (this.coverage.segmentsOf(workerId) ?? []).map(([layer, begin, end]) => ({ model: this.coverage.modelOf(workerId) ?? '', layer, begin, end }))
      : [];
    const answer = chooseAssignment(this.demand(request.model || undefined), this.models, { ...request, held });
    if (answer.assigned) {
      this.counters.assignments++;
      this.events.add('recruit', answer.model, `layer ${answer.layer} experts [${answer.experts[0]}, ${answer.experts[1]})${workerId ? ` to ${workerId}` : ''}`, this.now());
    } else {
      this.counters.refusals++;
    }
    return answer;
  }

  heartbeat(workerId: string, wallet: string | null, model: string, segments: Array<[number, number, number]>): void {
    const quarantined = this.state.quarantineReason(workerId) ?? (wallet ? this.state.quarantineReason(wallet) : undefined);
    if (quarantined) throw new HubError('WORKER_QUARANTINED', `this worker is quarantined: ${quarantined}`);
    const now = this.now();
    this.coverage.heartbeat(workerId, model, segments, now);
    this.dispatch.attach(workerId, wallet, now);
    if (wallet) this.state.touchVolunteer(wallet, now);
    this.counters.heartbeats++;
  }

  evict(): string[] {
    const gone = this.coverage.evictStale(this.now(), this.config.staleMs);
    for (const w of gone) {
      this.dispatch.forget(w);
      this.events.add('evict', null, `${w}: no heartbeat for ${Math.round(this.config.staleMs / 1000)} s`, this.now());
    }
    this.counters.evictions += gone.length;
    return gone;
  }

  recruitment(): { saturate_at: number; boost: number; target_base: number; models: RecruitmentRow[] } {
    const cfg = this.config.saturation;
    return {
      saturate_at: cfg.saturateAt,
      boost: cfg.boost,
      target_base: cfg.targetBase,
      models: this.modelNames().map((model) => {
        const s = this.saturation(model);
        return {
          model, busy: s.busy, slots: s.slots, saturated: s.saturated, recruiting: s.recruiting,
          base_target: cfg.targetBase, effective_target: effectiveTarget(cfg, s.recruiting),
          expert_workers: this.models.has(model) ? this.coverage.workerCount(model) : 0, age_s: s.ageS,
        };
      }),
    };
  }

  metrics(): string {
    const now = this.now();
    const rec = this.recruitment();
    const perModel = (f: (r: RecruitmentRow) => number): MetricSample['values'] => rec.models.map((r) => ({ labels: { model: r.model }, value: f(r) }));
    const workers: MetricSample['values'] = [];
    for (const model of this.models.keys()) {
      for (const [state, n] of Object.entries(this.dispatch.countByState(model, this.coverage, now))) workers.push({ labels: { model, state }, value: n });
    }
    const coord = this.supervisor.status();
    return renderPrometheus([
      { name: 'expertswarm_coordinator_busy_slots', help: 'Slots processing a request at the last poll.', type: 'gauge', values: perModel((r) => r.busy ?? NaN) },
      { name: 'expertswarm_coordinator_slots', help: 'Slots of the coordinator.', type: 'gauge', values: perModel((r) => r.slots ?? NaN) },
      { name: 'expertswarm_saturated', help: '1 while busy slots reach the threshold.', type: 'gauge', values: perModel((r) => Number(r.saturated)) },
      { name: 'expertswarm_recruiting', help: '1 while the model recruits volunteers.', type: 'gauge', values: perModel((r) => Number(r.recruiting)) },
      { name: 'expertswarm_target_replicas_base', help: 'Base target replicas per expert.', type: 'gauge', values: perModel((r) => r.base_target) },
      { name: 'expertswarm_target_replicas_effective', help: 'Target replicas per expert now.', type: 'gauge', values: perModel((r) => r.effective_target) },
      { name: 'expertswarm_reading_age_seconds', help: 'Age of the last saturation reading.', type: 'gauge', values: perModel((r) => r.age_s ?? NaN) },
      { name: 'expertswarm_workers', help: 'Expert workers by dispatch state.', type: 'gauge', values: workers },
      { name: 'expertswarm_assignments_total', help: 'Slices assigned to volunteers.', type: 'counter', values: [{ value: this.counters.assignments }] },
      { name: 'expertswarm_volunteer_refusals_total', help: 'Volunteer requests answered assigned:false.', type: 'counter', values: [{ value: this.counters.refusals }] },
      { name: 'expertswarm_heartbeats_total', help: 'Coverage heartbeats accepted.', type: 'counter', values: [{ value: this.counters.heartbeats }] },
      { name: 'expertswarm_evictions_total', help: 'Workers evicted for missing heartbeats.', type: 'counter', values: [{ value: this.counters.evictions }] },
      {
        name: 'expertswarm_poll_failures_total', help: 'Saturation polls that got no reading.', type: 'counter',
        values: this.modelNames().map((model) => ({ labels: { model }, value: this.poller.stats.get(model)?.failures ?? 0 })),
      },
      {
        name: 'expertswarm_coordinator_restarts_total', help: 'Coordinator restarts after a crash.', type: 'counter',
        values: coord.map((c) => ({ labels: { model: c.name }, value: c.restarts })),
      },
      {
        name: 'expertswarm_coordinator_up', help: '1 while the coordinator takes requests.', type: 'gauge',
        values: coord.map((c) => ({ labels: { model: c.name }, value: Number(c.state === 'ready' || c.state === 'external') })),
      },
    ]);
  }
}
