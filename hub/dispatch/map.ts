/**
 * The dispatch map: which worker holds which (model, layer, expert range), and in which state the Layer-1 dispatcher
 * should treat it. Rows are built from live coverage; the per-worker record (attach time, last serve, latency) lives
 * here. The state is a pure function of that record and the clock.
 */
import type { CoverageStore } from '../market/coverage.ts';
import { type SliceRef, type SliceTallies, tallyKeep, tallyServed } from '../trust/slice-credit.ts';
import type { HeldRange } from '../../protocol/slice.ts';

export type WorkerState = 'joining' | 'grace' | 'proven' | 'idle' | 'released' | 'quarantined';

export interface DispatchConfig {
  /** A new worker gets a fair first try this long after it attaches. */
  graceMs: number;
  /** Past this long since its last serve, a worker is dispatched only while saturated and proven. */
  idleMs: number;
}

export const DEFAULT_DISPATCH: Readonly<DispatchConfig> = Object.freeze({ graceMs: 15_000, idleMs: 20_000 });

export interface WorkerRecord {
  workerId: string;
  wallet: string | null;
  attachMs: number;
  lastServeMs: number | null;
  latencyMs: number | null;
  released: boolean;
  quarantined: boolean;
  /** Answers held against the coordinator's own sums (AUDIT), and their NMSE. */
  audits: number;
  /** Audits passed since its last strike, and strikes not yet worked off (hub/dispatch/trust.ts `afterAudit`). */
  auditsPassed: number;
  strikes: number;
  auditNmseLast: number | null;
  auditNmseMax: number | null;
  /** Pairs of its answers that went into the sums since its last passed audit: credit not yet verified. */
  unverifiedPairs: number;
  /** Its pairs and credit per slice it holds (trust/slice-credit.ts; a volunteer holds several: issue 27). */
  slices: SliceTallies;
}

/**
 * quarantined and released are final; a worker that served recently is proven, one that served long ago is idle;
 * one that never served is in its grace window right after attaching, and merely joining after it.
 */
/** What a worker's state is read from. */
export type WorkerStateInput = Pick<WorkerRecord, 'attachMs' | 'lastServeMs' | 'released' | 'quarantined'>;

export function workerState(r: WorkerStateInput, nowMs: number, cfg: DispatchConfig = DEFAULT_DISPATCH): WorkerState {
  if (r.quarantined) return 'quarantined';
  if (r.released) return 'released';
  if (r.lastServeMs !== null) return nowMs - r.lastServeMs <= cfg.idleMs ? 'proven' : 'idle';
  return nowMs - r.attachMs <= cfg.graceMs ? 'grace' : 'joining';
}

export interface DispatchRow {
  worker_id: string;
  model: string;
  layer: number;
  experts: [number, number];
  state: WorkerState;
  last_serve_ms: number | null;
  last_attach_ms: number;
  latency_ms: number | null;
  audits: number;
  audits_passed: number;
  audit_nmse_last: number | null;
  audit_nmse_max: number | null;
}

export class DispatchMap {
  private readonly records = new Map<string, WorkerRecord>();
  /** Pairs each worker served in time (the dashboard's count; not part of the record the dispatcher reads). */
  private readonly pairs = new Map<string, number>();

  constructor(private readonly cfg: DispatchConfig = DEFAULT_DISPATCH) {}

  /** Called on every heartbeat (with the ranges it holds: the tallies of others are forgotten); the first attaches it. */
  attach(workerId: string, wallet: string | null, nowMs: number, held?: readonly HeldRange[]): WorkerRecord {
    let r = this.records.get(workerId);
    if (!r) {
      r = {
        workerId,
        wallet,
        attachMs: nowMs,
        lastServeMs: null,
        latencyMs: null,
        released: false,
        quarantined: false,
        audits: 0,
        auditsPassed: 0,
        strikes: 0,
        auditNmseLast: null,
        auditNmseMax: null,
        unverifiedPairs: 0,
        slices: new Map(),
      };
      this.records.set(workerId, r);
    }
    if (held) tallyKeep(r.slices, held);
    return r;
  }

  /** A worker answered in time: `pairs` of `slice` (when the link said which) served. */
  recordServe(workerId: string, nowMs: number, latencyMs: number, pairs = 0, slice?: SliceRef): void {
    const r = this.records.get(workerId);
    if (!r) return;
    if (pairs > 0) this.pairs.set(workerId, (this.pairs.get(workerId) ?? 0) + pairs);
    if (slice) tallyServed(r.slices, slice, pairs);
    r.lastServeMs = nowMs;
    r.latencyMs = r.latencyMs === null ? latencyMs : r.latencyMs * 0.8 + latencyMs * 0.2;
  }

  recordAudit(workerId: string, nmse: number): void {
    const r = this.records.get(workerId);
    if (!r) return;
    r.audits++;
    r.auditNmseLast = nmse;
    r.auditNmseMax = r.auditNmseMax === null ? nmse : Math.max(r.auditNmseMax, nmse);
  }

  setQuarantined(workerId: string): void {
    const r = this.records.get(workerId);
    if (r) r.quarantined = true;
  }

  forget(workerId: string): void {
    this.records.delete(workerId);
    this.pairs.delete(workerId);
  }

  /** Pairs the worker served in time since it attached (0 for an unknown worker). */
  pairsServed(workerId: string): number {
    return this.pairs.get(workerId) ?? 0;
  }

  record(workerId: string): WorkerRecord | undefined {
    return this.records.get(workerId);
  }

  state(workerId: string, nowMs: number): WorkerState | undefined {
    const r = this.records.get(workerId);
    return r && workerState(r, nowMs, this.cfg);
  }

  rows(model: string, coverage: CoverageStore, nowMs: number): DispatchRow[] {
    const rows: DispatchRow[] = [];
    for (const workerId of coverage.workersOf(model)) {
      const r = this.records.get(workerId);
      if (!r) continue;
      const state = workerState(r, nowMs, this.cfg);
      for (const [layer, begin, end] of coverage.heldRanges(workerId) ?? []) {
        rows.push({
          worker_id: workerId,
          model,
          layer,
          experts: [begin, end],
          state,
          last_serve_ms: r.lastServeMs,
          last_attach_ms: r.attachMs,
          latency_ms: r.latencyMs,
          audits: r.audits,
          audits_passed: r.auditsPassed,
          audit_nmse_last: r.auditNmseLast,
          audit_nmse_max: r.auditNmseMax,
        });
      }
    }
    return rows.sort((a, b) => a.layer - b.layer || a.experts[0] - b.experts[0] || a.worker_id.localeCompare(b.worker_id));
  }

  /** Count of workers of a model by state (for metrics). */
  countByState(model: string, coverage: CoverageStore, nowMs: number): Record<WorkerState, number> {
    const counts: Record<WorkerState, number> = { joining: 0, grace: 0, proven: 0, idle: 0, released: 0, quarantined: 0 };
    for (const workerId of coverage.workersOf(model)) {
      const s = this.state(workerId, nowMs);
      if (s) counts[s]++;
    }
    return counts;
  }
}
