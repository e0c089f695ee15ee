/**
 * The hub's Prometheus metrics (`GET /metrics`), through prom-client with one Registry per Hub. Gauges, and the
 * counters whose counts live elsewhere (poller, supervisor), read the hub when scraped through `collect()`; the hub's
 * own event counters are incremented as things happen. The Hub hands its readings over as plain data and never
 * sees the exposition text.
 *
 *   const metrics = new HubMetrics(() => hub.readings());
 *   metrics.assigned();
 *   reply.type(metrics.contentType).send(await metrics.render());
 */
import { Counter, Gauge, Registry } from 'prom-client';
import type { RecruitmentRow } from '../protocol/http.ts';
import type { WorkerState } from './dispatch/map.ts';
import type { CoordinatorStatus } from './supervisor.ts';

/** What a scrape reads from the hub, taken once per scrape. */
export interface HubReadings {
  recruitment: RecruitmentRow[];
  /** Market models only (those with a GGUF here). */
  workers: Array<{ model: string; byState: Record<WorkerState, number> }>;
  pollFailures: Array<{ model: string; failures: number }>;
  coordinators: CoordinatorStatus[];
  /** Open volunteer channels by connection state. */
  volunteers: Record<string, number>;
}

export class HubMetrics {
  readonly registry = new Registry();
  private readonly assignments: Counter;
  private readonly refusals: Counter;
  private readonly heartbeats: Counter;
  private readonly evictions: Counter;
  private current: HubReadings | undefined;

  constructor(private readonly read: () => HubReadings) {
    const registers = [this.registry];
    const readings = (): HubReadings => this.readings();
    const perModel = (name: string, help: string, value: (r: RecruitmentRow) => number | null): void => {
      new Gauge({
        name,
        help,
        labelNames: ['model'],
        registers,
        collect() {
          this.reset();
          for (const r of readings().recruitment) this.set({ model: r.model }, value(r) ?? NaN);
        },
      });
    };
    perModel('expertswarm_coordinator_busy_slots', 'Slots processing a request at the last poll.', (r) => r.busy);
    perModel('expertswarm_coordinator_slots', 'Slots of the coordinator.', (r) => r.slots);
    perModel('expertswarm_saturated', '1 while busy slots reach the threshold.', (r) => Number(r.saturated));
    perModel('expertswarm_recruiting', '1 while the model recruits volunteers.', (r) => Number(r.recruiting));
    perModel('expertswarm_target_replicas_base', 'Base target replicas per expert.', (r) => r.base_target);
    perModel('expertswarm_target_replicas_effective', 'Target replicas per expert now.', (r) => r.effective_target);
    perModel('expertswarm_reading_age_seconds', 'Age of the last saturation reading.', (r) => r.age_s);
    new Gauge({
      name: 'expertswarm_workers',
      help: 'Expert workers by dispatch state.',
      labelNames: ['model', 'state'],
      registers,
      collect() {
        this.reset();
        for (const { model, byState } of readings().workers) {
          for (const [state, n] of Object.entries(byState)) this.set({ model, state }, n);
        }
      },
    });
    new Gauge({
      name: 'expertswarm_volunteers_connected',
      help: 'Volunteer channels open, by state (hello, waiting, loading, serving, paused).',
      labelNames: ['state'],
      registers,
      collect() {
        this.reset();
        for (const [state, n] of Object.entries(readings().volunteers)) this.set({ state }, n);
      },
    });
    this.assignments = new Counter({ name: 'expertswarm_assignments_total', help: 'Slices assigned to volunteers.', registers });
    this.refusals = new Counter({
      name: 'expertswarm_volunteer_refusals_total',
      help: 'Volunteer requests answered assigned:false.',
      registers,
    });
    this.heartbeats = new Counter({ name: 'expertswarm_heartbeats_total', help: 'Coverage heartbeats accepted.', registers });
    this.evictions = new Counter({ name: 'expertswarm_evictions_total', help: 'Workers evicted for missing heartbeats.', registers });
    // Counted by the poller and the supervisor: mirrored at each scrape.
    new Counter({
      name: 'expertswarm_poll_failures_total',
      help: 'Saturation polls that got no reading.',
      labelNames: ['model'],
      registers,
      collect() {
        this.reset();
        for (const { model, failures } of readings().pollFailures) this.inc({ model }, failures);
      },
    });
    new Counter({
      name: 'expertswarm_coordinator_restarts_total',
      help: 'Coordinator restarts after a crash.',
      labelNames: ['model'],
      registers,
      collect() {
        this.reset();
        for (const c of readings().coordinators) this.inc({ model: c.name }, c.restarts);
      },
    });
    new Gauge({
      name: 'expertswarm_coordinator_up',
      help: '1 while the coordinator takes requests.',
      labelNames: ['model'],
      registers,
      collect() {
        this.reset();
        for (const c of readings().coordinators) this.set({ model: c.name }, Number(c.state === 'ready' || c.state === 'external'));
      },
    });
  }

  assigned(): void {
    this.assignments.inc();
  }

  refused(): void {
    this.refusals.inc();
  }

  heartbeat(): void {
    this.heartbeats.inc();
  }

  evicted(n: number): void {
    this.evictions.inc(n);
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** The exposition text; the hub is read once for the whole scrape. */
  async render(): Promise<string> {
    this.current = undefined;
    return this.registry.metrics();
  }

  private readings(): HubReadings {
    if (!this.current) this.current = this.read();
    return this.current;
  }
}
