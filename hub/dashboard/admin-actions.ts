/**
 * The dashboard's admin actions (release, quarantine, target, dispatch mode), their token check, the refusal counts,
 * and the release cool-downs of HTTP-heartbeat workers. The token check and the bodies' parsers are admin.ts's; the
 * routes are routes.ts's. What an action changes elsewhere (the channel, the coverage, the dispatchers) it asks of an
 * AdminHost, so that this module never holds the Hub.
 *
 *   admin.require(req.headers.authorization);  // ADMIN_DISABLED / ADMIN_TOKEN_INVALID
 *   admin.run('release', null, () => admin.release(workerId, reason));
 */
import { HubError } from '../errors.ts';
import { RELEASED_WORKERS_KEPT } from '../limits.ts';
import type { DispatchMode } from '../dispatch/policy.ts';
import type { SaturationConfig } from '../market/saturation.ts';
import type { AdminResult, DispatchModeName } from '../../protocol/dashboard.ts';
import type { AdminGate } from './admin.ts';

/** What an admin action did: its model (null for none or every one) and the sentence the event log keeps. */
export interface AdminDone {
  model: string | null;
  detail: string;
}

/** What the admin actions need of the hub, and no more (the pattern of channel/channel.ts's ChannelHost). */
export interface AdminHost {
  /** An admin event (kind `admin`) for the event log. */
  event(model: string | null, detail: string): void;
  /** An action changed what the workers table shows (its cached page is stale). */
  workersChanged(): void;
  /** The model a known worker covers (null: connected, none yet); throws WORKER_UNKNOWN for an unknown worker. */
  workerModel(workerId: string): string | null;
  /** The wallet the hub knows for a worker, if any. */
  walletOf(workerId: string): string | null;
  /**
   * Releases a worker's slice: 'channel' when its channel was told (and it sits out offers for `coolDownMs`), 'http'
   * when an HTTP-heartbeat worker was dropped (its heartbeats are then refused here for the cool-down), null when it
   * holds nothing to release.
   */
  release(workerId: string, model: string | null, why: string, coolDownMs: number): 'channel' | 'http' | null;
  /** Quarantines a worker (and its wallet when `wallet`): durable, disconnected, forgotten by every dispatcher. */
  quarantineWorker(workerId: string, reason: string, wallet: boolean, by: string): AdminDone;
  /** The market's targets, changed in place by `target()`. */
  saturation: SaturationConfig;
  /** The targets changed: every market model may now have a surplus to release or a shortfall to recruit. */
  targetsChanged(): void;
  /** Whether `model` is served here. */
  serves(model: string): boolean;
  dispatchModeOf(model: string): DispatchMode;
  /** Sets `model`'s dispatch mode (its dispatcher's too) and lets the market recruit for it. */
  setDispatchMode(model: string, mode: DispatchMode): void;
  now(): number;
}

/**
 * HTTP-heartbeat workers an operator released, with when their cool-down ends (insertion order = oldest first); at
 * most `kept`, the oldest forgotten first. Every release has the same cool-down, so the oldest end comes first.
 */
export class ReleaseHolds {
  private readonly until = new Map<string, number>();

  constructor(private readonly kept: number = RELEASED_WORKERS_KEPT) {}

  get size(): number {
    return this.until.size;
  }

  /** Holds `workerId` off until `untilMs`. */
  hold(workerId: string, untilMs: number): void {
    this.until.delete(workerId);
    this.until.set(workerId, untilMs);
    while (this.until.size > this.kept) this.until.delete(this.until.keys().next().value as string);
  }

  /** The ms left of `workerId`'s cool-down at `nowMs`, 0 when none (forgets those whose cool-down is over). */
  remainingMs(workerId: string, nowMs: number): number {
    for (const [id, until] of this.until) {
      if (until > nowMs) break;
      this.until.delete(id);
    }
    return Math.max(0, (this.until.get(workerId) ?? 0) - nowMs);
  }
}

export class AdminActions {
  /**
   * Admin calls refused before acting, by code (ADMIN_TOKEN_INVALID: a wrong or missing token). Counted here, not in
   * /metrics yet: test/integration/hub-api.test.ts pins the list of metric families.
   */
  private readonly refusals = new Map<string, number>();
  /** Released HTTP-heartbeat workers: their heartbeats are refused with WORKER_RELEASED until the cool-down ends. */
  readonly holds = new ReleaseHolds();

  constructor(
    private readonly host: AdminHost,
    private readonly gate: AdminGate,
    private readonly releaseCoolDownMs: number,
  ) {}

  /** Whether admin actions are enabled (a token is configured). */
  get enabled(): boolean {
    return this.gate.enabled;
  }

  /** Throws ADMIN_DISABLED (403) or ADMIN_TOKEN_INVALID (401) unless `authorization` carries the admin token. */
  require(authorization: string | undefined): void {
    try {
      this.gate.require(authorization);
    } catch (e) {
      if (e instanceof HubError) this.countRefusal(e.code);
      throw e;
    }
  }

  private countRefusal(code: string): void {
    this.refusals.set(code, (this.refusals.get(code) ?? 0) + 1);
  }

  /** Admin calls refused so far, by code (bad tokens included: they are counted, not logged). */
  refusalCounts(): Record<string, number> {
    return Object.fromEntries(this.refusals);
  }

  /**
   * Runs one admin action: its sentence goes to the event log (kind `admin`), and so does a refusal for a bad argument
   * (an unknown worker or model, an invalid body), which is then rethrown.
   */
  run(what: string, model: string | null, act: () => AdminDone): AdminResult {
    let done: AdminDone;
    try {
      done = act();
    } catch (e) {
      if (e instanceof HubError) {
        this.countRefusal(e.code);
        this.host.event(model, `refused ${what}: ${e.message}`);
      }
      throw e;
    }
    this.host.event(done.model, done.detail);
    this.host.workersChanged(); // the next page shows what the action changed
    return { ok: true, detail: done.detail };
  }

  /**
   * Release: the worker gives up its slice and the market recruits a replacement. A channel volunteer is told its slice
   * is not needed and is left out of offer rounds for the cool-down (else the next round would hand it the same slice);
   * an HTTP-heartbeat worker, which cannot be told, is dropped from the coverage, the dispatch map and every dispatcher,
   * and its heartbeats are refused with WORKER_RELEASED for the cool-down.
   */
  release(workerId: string, reason: string): AdminDone {
    const model = this.host.workerModel(workerId);
    const why = reason || 'released by the operator';
    const how = this.host.release(workerId, model, why, this.releaseCoolDownMs);
    if (how === null) throw new HubError('WORKER_UNKNOWN', `worker "${workerId}" holds no slice to release`);
    if (how === 'http') this.holds.hold(workerId, this.host.now() + this.releaseCoolDownMs);
    return { model, detail: `released ${workerId}${model ? ` (${model})` : ''}: ${why}` };
  }

  /**
   * Quarantine: durable (its worker id is refused from now on), and the worker is disconnected and dropped at once.
   * A worker id is the client's to choose, so `wallet` quarantines its wallet too (durable as well): every worker of
   * that wallet is refused at its next hello or heartbeat.
   */
  quarantine(workerId: string, reason: string, wallet = false): AdminDone {
    this.host.workerModel(workerId);
    if (wallet && !this.host.walletOf(workerId))
      throw new HubError('BODY_INVALID', `worker "${workerId}" has no wallet known to the hub; quarantine it without wallet: true`);
    return this.host.quarantineWorker(workerId, reason, wallet, 'by the operator');
  }

  /** The market's targets: base replicas at rest and the boost while saturated (every model). */
  target(change: { base?: number; boost?: number }): { model: null; detail: string } {
    const cfg = this.host.saturation;
    const before = { base: cfg.targetBase, boost: cfg.boost };
    if (change.base !== undefined) cfg.targetBase = change.base;
    if (change.boost !== undefined) cfg.boost = change.boost;
    this.host.targetsChanged();
    return { model: null, detail: `target base ${before.base} → ${cfg.targetBase}, boost ${before.boost} → ${cfg.boost}` };
  }

  /** One model's dispatch mode (its dispatcher's, and whether the market recruits at rest for `always`). */
  dispatch(model: string, mode: DispatchModeName): { model: string; detail: string } {
    if (!this.host.serves(model)) throw new HubError('MODEL_UNKNOWN', `no model named "${model}" is served here`);
    const before = this.host.dispatchModeOf(model);
    this.host.setDispatchMode(model, mode);
    return { model, detail: `dispatch of ${model}: ${before} → ${mode}` };
  }
}
