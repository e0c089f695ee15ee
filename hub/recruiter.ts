/**
 * The market at work: each model's saturation from the poller's readings, recruiting on and off (with its events),
 * the demand the market publishes, the assignment one volunteer gets, and the release of surplus volunteers once the
 * load passed. The decisions are market/'s pure policies; this keeps the little state between readings (which models
 * recruit, which may have a surplus) and reads the hub through a RecruiterHost, never the Hub itself.
 *
 *   const recruiter = new Recruiter(host);
 *   poller → recruiter.reading(model);      // every reading: demand may have changed
 *   recruiter.demandAnswer(model); recruiter.volunteer(request, workerId, wallet); recruiter.recruitment();
 */
import type { DispatchMap } from './dispatch/map.ts';
import type { DispatchMode } from './dispatch/policy.ts';
import type { VolunteerChannel } from './channel/channel.ts';
import type { HubEventKind } from './events.ts';
import { HubError } from './errors.ts';
import type { HubMetrics } from './metrics.ts';
import type { CoverageStore } from './market/coverage.ts';
import { modelDemand } from './market/demand.ts';
import type { SliceGrants } from './market/grants.ts';
import { chooseReleases, type ReleaseCandidate } from './market/release.ts';
import { chooseAssignment, type VolunteerAnswer, type VolunteerRequest } from './market/assign.ts';
import { effectiveTarget, saturationState, type SaturationConfig, type SaturationState, type SlotsReading } from './market/saturation.ts';
import type { ModelDemand, ModelShape } from './market/types.ts';
import type { ModelInfo } from './registry.ts';
import type { DemandAnswer, RecruitmentAnswer } from '../protocol/http.ts';

/** What the recruiter reads and tells of the hub (the pattern of channel/channel.ts's ChannelHost). */
export interface RecruiterHost {
  now(): number;
  /** The models on the market, by name. */
  marketModels: ReadonlyMap<string, ModelInfo>;
  /** Every served model (one coordinator each), market or not. */
  servedModels(): string[];
  /** A market model's shape; throws MODEL_UNKNOWN. */
  shape(model: string): ModelShape;
  /** The poller's latest reading of a model's slots. */
  reading(model: string): SlotsReading | undefined;
  /** The market's targets now (an admin may change them). */
  saturation: SaturationConfig;
  dispatchModeOf(model: string): DispatchMode;
  coverage: Pick<CoverageStore, 'workerCount' | 'replicaWorkerCount' | 'workersOf' | 'heldRanges' | 'replicaCounts' | 'modelOf'>;
  /**
   * The coverage surplus release counts against, when not `coverage`: with `--redis`, `coverage` is the whole cluster's
   * (demand and recruitment see every hub's workers) but each hub releases only its own volunteers, counted against its
   * own coverage, so that two hubs never release the same surplus twice (docs/cluster.md).
   */
  releaseCoverage?: Pick<CoverageStore, 'workerCount' | 'workersOf' | 'heldRanges' | 'replicaCounts'>;
  dispatch: Pick<DispatchMap, 'record' | 'pairsServed'>;
  channel: Pick<VolunteerChannel, 'workerInfo' | 'demandChanged'>;
  grants: Pick<SliceGrants, 'assigned'>;
  metrics: Pick<HubMetrics, 'assigned' | 'refused'>;
  /** Tells a worker over its channel that its slice is no longer needed. */
  release(workerId: string, reason: string): void;
  event(kind: HubEventKind, model: string | null, detail: string): void;
}

export class Recruiter {
  private readonly recruitingNow = new Map<string, boolean>();
  /** Models that recruited (or whose target fell) since their surplus was last released: readings look for one. */
  private readonly surplusPossible = new Set<string>();

  constructor(private readonly host: RecruiterHost) {}

  /** A model's saturation now, from the poller's latest reading. */
  saturation(model: string): SaturationState {
    return saturationState(this.host.reading(model), this.host.now(), this.host.saturation);
  }

  /** The poller read `model`: recruiting may start or end, and a surplus may be released. */
  reading(model: string): void {
    // Every reading may change demand: idle volunteers on the channel are offered slices at once.
    this.host.channel.demandChanged();
    const recruiting = this.saturation(model).recruiting;
    const before = this.recruitingNow.get(model) ?? false;
    if (recruiting !== before) {
      this.recruitingNow.set(model, recruiting);
      this.host.event(recruiting ? 'saturation-onset' : 'saturation-end', model, recruiting ? 'recruiting volunteers' : 'load passed');
    }
    if (recruiting) this.surplusPossible.add(model);
    else if (this.surplusPossible.has(model) && !this.releaseSurplus(model)) this.surplusPossible.delete(model);
  }

  /** The targets changed (an admin): every market model may have a surplus now. */
  targetsChanged(): void {
    for (const model of this.host.marketModels.keys()) this.surplusPossible.add(model);
    this.host.channel.demandChanged();
  }

  /**
   * The load passed (or the target fell): volunteers beyond the effective target are released, least useful first
   * and never below target (market/release.ts); they go back to waiting and are recruited again on the next surge.
   * Only volunteers on the channel can be told; HTTP-heartbeat workers leave by themselves. Returns whether any
   * volunteer is still loading a slice (it may become surplus once it holds it: the next reading looks again).
   */
  private releaseSurplus(model: string): boolean {
    const { dispatch, channel } = this.host;
    const coverage = this.host.releaseCoverage ?? this.host.coverage;
    if (!this.host.marketModels.has(model) || coverage.workerCount(model) === 0) return false;
    const target = effectiveTarget(this.host.saturation, false);
    const now = this.host.now();
    const candidates: ReleaseCandidate[] = [];
    let loading = false;
    for (const workerId of coverage.workersOf(model)) {
      const info = channel.workerInfo(workerId);
      if (!info) continue;
      if (info.state === 'loading') loading = true;
      const r = dispatch.record(workerId);
      candidates.push({
        workerId,
        ranges: coverage.heldRanges(workerId) ?? [],
        lastServeMs: r?.lastServeMs ?? null,
        pairsServed: dispatch.pairsServed(workerId),
        latencyMs: r?.latencyMs ?? null,
        attachMs: r?.attachMs ?? now,
      });
    }
    for (const workerId of chooseReleases(candidates, (layer) => coverage.replicaCounts(model, layer), target)) {
      this.host.release(workerId, `more replicas than the target ${target} now`);
    }
    return loading;
  }

  private demand(model?: string): ModelDemand[] {
    const names = model ? [model] : [...this.host.marketModels.keys()];
    return names.map((name) => {
      const recruiting = this.saturation(name).recruiting;
      return modelDemand(
        this.host.shape(name),
        (layer) => this.host.coverage.replicaCounts(name, layer),
        effectiveTarget(this.host.saturation, recruiting),
        // `--dispatch always` sends every covered pair to a worker, load or not: it wants its base replicas at rest too.
        recruiting || this.host.dispatchModeOf(name) === 'always',
        // Workers that hold ranges nothing can send work to (market/replicas.ts) do not make a model wanted at rest.
        this.host.coverage.replicaWorkerCount(name) > 0,
      );
    });
  }

  /** One market model's demand, or every one's (`model` ''/undefined); throws MODEL_UNKNOWN. */
  demandAnswer(model?: string): DemandAnswer<ModelDemand> {
    const models = this.demand(model || undefined);
    return {
      target_replicas: Math.max(this.host.saturation.targetBase, ...models.map((m) => m.target_replicas)),
      recruiting: models.some((m) => m.recruiting),
      models,
    };
  }

  /**
   * The market's answer for one volunteer. `wallet` is the caller's over HTTP (`POST /api/expert-volunteer`): the
   * slice is then remembered as assigned to `workerId` (or to whichever worker of that wallet reports it first), so
   * that its heartbeats may report it once the wallet downloaded it.
   */
  volunteer(request: VolunteerRequest, workerId: string | undefined, wallet?: string): VolunteerAnswer {
    const { marketModels, coverage } = this.host;
    if (request.model && !marketModels.has(request.model))
      throw new HubError('MODEL_UNKNOWN', `no model named "${request.model}" is served here`);
    const heldModel = workerId ? coverage.modelOf(workerId) : undefined;
    const held = workerId && heldModel !== undefined ? { model: heldModel, ranges: coverage.heldRanges(workerId) ?? [] } : undefined;
    const answer = chooseAssignment(this.demand(request.model || undefined), marketModels, { ...request, ...(held ? { held } : {}) });
    if (answer.assigned) {
      const [begin, end] = answer.experts;
      if (wallet !== undefined)
        this.host.grants.assigned(wallet, workerId ?? null, { model: answer.model, layer: answer.layer, begin, end });
      this.host.metrics.assigned();
      this.host.event('recruit', answer.model, `layer ${answer.layer} experts [${begin}, ${end})${workerId ? ` to ${workerId}` : ''}`);
    } else {
      this.host.metrics.refused();
    }
    return answer;
  }

  /** `GET /api/moe/recruitment`: every served model's saturation and targets. */
  recruitment(): RecruitmentAnswer {
    const cfg = this.host.saturation;
    return {
      saturate_at: cfg.saturateAt,
      boost: cfg.boost,
      target_base: cfg.targetBase,
      models: this.host.servedModels().map((model) => {
        const s = this.saturation(model);
        return {
          model,
          busy: s.busy,
          slots: s.slots,
          saturated: s.saturated,
          recruiting: s.recruiting,
          base_target: cfg.targetBase,
          effective_target: effectiveTarget(cfg, s.recruiting),
          expert_workers: this.host.marketModels.has(model) ? this.host.coverage.workerCount(model) : 0,
          age_s: s.ageS,
        };
      }),
    };
  }
}
