/**
 * The trust ledger: what the hub believes of each worker's answers (trust checks: probation, spot audits, strikes,
 * quarantine; the policy is hub/dispatch/trust.ts) and what each wallet is owed for them (credit). The two live
 * together because credit waits on trust: with trust checks on, a worker's pairs are credited only once an audit
 * vouched for them, and a quarantine drops what was never vouched for.
 *
 * Credit is written to the store once a second (`start()`; `flush()` on demand), and a cache keeps every wallet's
 * lifetime credit in step with the store's, so that the workers table reads no store per row.
 *
 *   const ledger = new TrustLedger(host, config.trust, metrics.registry);
 *   ledger.used(workerId, pairs);            // a dispatcher used a worker's pairs
 *   ledger.onAudit(model, workerId, result); // an audit's verdict
 */
import { Counter, type Registry } from 'prom-client';
import type { AuditChooser, AuditResult } from '../dispatch/audits.ts';
import type { DispatchMap } from '../dispatch/map.ts';
import { type Standing, type TrustConfig, afterAudit, auditThis, judgeAudit, standing, trustOn } from '../dispatch/trust.ts';
import { CREDIT_CACHE_MAX } from '../limits.ts';
import { type SliceRef, tallyAudited, tallyCredited, tallyDropped, tallyUsed } from './slice-credit.ts';
import type { HubStore } from '../store.ts';
import type { CreditAnswer } from '../../protocol/http.ts';

/** What the ledger needs of the hub, and no more (the pattern of channel/channel.ts's ChannelHost). */
export interface LedgerHost {
  /** The durable record: credit and quarantines. */
  store: Pick<HubStore, 'addCredit' | 'volunteer' | 'quarantine'>;
  /** The workers' audit counts and quarantine flags. */
  dispatch: Pick<DispatchMap, 'record' | 'recordAudit' | 'setQuarantined'>;
  /** A wallet's lifetime credit changed (the volunteer channel tells its workers). */
  creditChanged(wallet: string, credit: number): void;
  /** A trust event of `model` for the event log (kind `dispatch`). */
  event(model: string, detail: string): void;
  /** Quarantines a worker (and its wallet when `wallet`) everywhere: the store, the channel, the dispatchers. */
  quarantineWorker(workerId: string, reason: string, wallet: boolean, by: string): void;
  now(): number;
  /**
   * With `--redis`: this hub's audits put the worker in good standing (its probation passed) or gave it a strike;
   * told to the other hubs (cluster/standing.ts).
   */
  standingChanged?(workerId: string, wallet: string | null, change: 'passed-probation' | 'strike'): void;
}

/** A worker's standing as the dashboard's workers table words it (WorkerRow.trust): '' with trust checks off. */
export function trustWords(passed: number, quarantined: boolean, cfg: TrustConfig): string {
  if (!trustOn(cfg) || quarantined) return '';
  const s = standing({ passed, quarantined }, cfg);
  return s === 'probation' ? `probation ${passed}/${cfg.probation}` : 'trusted';
}

export class TrustLedger {
  /** Served pairs not yet written to the store, by wallet (flushed once a second). */
  private readonly creditDue = new Map<string, number>();
  /** Lifetime credit by wallet, read from the store once and kept in step with every write (the workers table). */
  private readonly credits = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private readonly audits: Counter<'model' | 'result'>;

  constructor(
    private readonly host: LedgerHost,
    private readonly trust: TrustConfig,
    registry: Registry,
  ) {
    this.audits = new Counter({
      name: 'expertswarm_audits_total',
      help: "Workers' answers held against the coordinator's own sums, by result (match: NMSE within AUDIT_MISMATCH_NMSE).",
      labelNames: ['model', 'result'],
      registers: [registry],
    });
  }

  /** Whether answers are checked at all (`{ probation: 0, spotRate: 0 }` trusts every one). */
  get on(): boolean {
    return trustOn(this.trust);
  }

  /** Flushes due credit once a second until `stop()`. */
  start(): void {
    this.timer = setInterval(() => this.flush(), 1_000);
    this.timer.unref();
  }

  /** Stops the timer and writes what is due. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.flush();
  }

  // --- trust

  /** A worker's standing (trust.ts); an unknown one is on probation. */
  standingOf(workerId: string): Standing {
    const rec = this.host.dispatch.record(workerId);
    return standing({ passed: rec?.auditsPassed ?? 0, quarantined: rec?.quarantined ?? false }, this.trust);
  }

  /** A worker's standing for the dashboard (WorkerRow.trust). */
  trustWords(passed: number, quarantined: boolean): string {
    return trustWords(passed, quarantined, this.trust);
  }

  /**
   * Which items of a request are audited: every item of a worker on probation (first, so that a shared row goes to
   * it), and a random `spotRate` share of the trusted workers' items.
   */
  auditChooser(): AuditChooser {
    return ({ workerIds, answered, owed }) => {
      const probation: number[] = [];
      const spot: number[] = [];
      workerIds.forEach((id, i) => {
        if (!answered[i]) return;
        const s = this.standingOf(id);
        if (s === 'probation') probation.push(i);
        // a check owed (a standing offer was withheld for it, `auditDue`) is this draw, made then
        else if (owed ? s !== 'quarantined' && this.on : auditThis(s, Math.random(), this.trust)) spot.push(i);
      });
      return [...probation, ...spot];
    };
  }

  /**
   * Whether a spot check of these workers is due now (protocol v3, dispatcher.ts `auditDue`): one on probation, or
   * the spot-check draw for a trusted one. When it is, the dispatcher withholds its standing offer, and the next
   * exchange of the layer, a CLAIM, audits them (`owed`), so pre-claimed REQUESTs keep the spot-check rate.
   */
  auditDue(): (workerIds: readonly string[]) => boolean {
    return (workerIds) =>
      workerIds.some((id) => {
        const s = this.standingOf(id);
        return s === 'probation' || auditThis(s, Math.random(), this.trust);
      });
  }

  /**
   * A dispatcher used `pairs` of a worker's (of `slice`, when the link said): credited now, or with trust checks on at
   * the worker's next passed audit. The slice's tally follows the wallet's credit (slice-credit.ts).
   */
  used(workerId: string, pairs: number, slice?: SliceRef): void {
    const rec = this.host.dispatch.record(workerId);
    if (!rec) return;
    if (slice && rec.wallet) tallyUsed(rec.slices, slice, pairs, !this.on);
    // With trust checks on, credit waits for the worker's next passed audit (and is dropped if it is quarantined).
    if (this.on) rec.unverifiedPairs += pairs;
    else this.credit(rec.wallet, pairs);
  }

  /**
   * An audit's verdict (trust.ts): passed, the audited pairs join the worker's unverified credit, all of which is
   * credited once the worker is in good standing (probation passed); a strike sends it back on probation (an event);
   * a gross mismatch or a second strike quarantines it and its wallet (durable), its unverified credit dropped.
   */
  onAudit(model: string, workerId: string, result: AuditResult): void {
    const verdict = judgeAudit(result.nmse, this.trust);
    this.host.dispatch.recordAudit(workerId, result.nmse);
    this.audits.inc({ model, result: verdict.kind === 'pass' ? 'match' : 'mismatch' });
    const rec = this.host.dispatch.record(workerId);
    if (!rec || rec.quarantined) return;
    const before = this.standingOf(workerId);
    const next = afterAudit({ passed: rec.auditsPassed, strikes: rec.strikes }, verdict, this.trust);
    rec.auditsPassed = next.passed;
    rec.strikes = next.strikes;
    if (next.quarantine !== null) {
      this.distrust(workerId, `${next.quarantine} (layer ${result.layer}, ${result.pairs} pairs)`);
      return;
    }
    if (verdict.kind === 'strike') {
      this.host.event(model, `${workerId}: ${verdict.reason} (layer ${result.layer}, ${result.pairs} pairs): a strike, back on probation`);
      this.host.standingChanged?.(workerId, rec.wallet, 'strike');
      return;
    }
    if (before === 'probation' && this.standingOf(workerId) === 'trusted')
      this.host.standingChanged?.(workerId, rec.wallet, 'passed-probation');
    if (verdict.kind !== 'pass') return;
    // Verified work counts once the worker is in good standing: a passed audit on probation waits for the rest (and
    // a worker back on probation after a strike keeps its unverified credit waiting with it).
    rec.unverifiedPairs += result.pairs;
    if (rec.wallet) tallyAudited(rec.slices, result.layer, result.pairs);
    if (this.standingOf(workerId) === 'trusted') {
      this.credit(rec.wallet, rec.unverifiedPairs);
      rec.unverifiedPairs = 0;
      tallyCredited(rec.slices);
    }
  }

  /**
   * Another hub's verdict on a worker this hub holds a record of (cluster/standing.ts, with `--redis`): `trust` — it
   * passed its probation on hub `hub`, so it is trusted here without a second one (the pairs audited here meanwhile
   * are credited now); `strike` — an audit there was a strike, so it is back on probation here too (a second strike,
   * on any hub, quarantines it). Spot audits go on here as for any worker in that standing.
   */
  adoptShared(model: string | null, workerId: string, adoption: 'trust' | 'strike', hub: string): void {
    const rec = this.host.dispatch.record(workerId);
    if (!rec || rec.quarantined || !this.on) return;
    if (adoption === 'trust') {
      rec.auditsPassed = Math.max(rec.auditsPassed, this.trust.probation);
      rec.strikes = 0;
      this.credit(rec.wallet, rec.unverifiedPairs);
      rec.unverifiedPairs = 0;
      tallyCredited(rec.slices);
      if (model) this.host.event(model, `${workerId}: passed its probation on hub ${hub}: trusted here too (spot audits go on)`);
      return;
    }
    rec.auditsPassed = 0;
    rec.strikes = Math.max(rec.strikes, 1);
    if (model) this.host.event(model, `${workerId}: a strike on hub ${hub}: back on probation here too`);
  }

  /** With trust checks on, a worker that sent something no honest client sends (`why`) is quarantined. */
  caught(workerId: string, why: string): void {
    if (this.on) this.distrust(workerId, why);
  }

  /**
   * Quarantines a worker the trust checks caught, and its wallet: at once in the dispatch map (its next items go in
   * shadow, the policy declines it), the rest (the store, the channel, every dispatcher) once the dispatcher that
   * reported it has returned. Its unverified credit is dropped.
   */
  private distrust(workerId: string, reason: string): void {
    const rec = this.host.dispatch.record(workerId);
    if (!rec || rec.quarantined) return;
    const dropped = rec.unverifiedPairs;
    rec.unverifiedPairs = 0;
    tallyDropped(rec.slices);
    this.host.dispatch.setQuarantined(workerId);
    queueMicrotask(() =>
      this.host.quarantineWorker(workerId, reason, rec.wallet !== null, `by the trust checks; ${dropped} unverified pairs not credited`),
    );
  }

  // --- credit

  private credit(wallet: string | null, pairs: number): void {
    if (wallet && pairs > 0) this.creditDue.set(wallet, (this.creditDue.get(wallet) ?? 0) + pairs);
  }

  /** Writes the credit due to the store and tells each wallet its new total. */
  flush(): void {
    if (this.creditDue.size === 0) return;
    const due = [...this.creditDue];
    this.creditDue.clear();
    for (const [wallet, pairs] of due) {
      this.host.store.addCredit(wallet, pairs, this.host.now());
      this.creditAdded(wallet, pairs);
      this.host.creditChanged(wallet, this.creditOf(wallet));
    }
  }

  /** Keeps the credit cache in step with a write to the store. */
  private creditAdded(wallet: string, pairs: number): void {
    const cached = this.credits.get(wallet);
    if (cached !== undefined) this.credits.set(wallet, cached + pairs);
  }

  /** Credits `pairs` to `wallet` in the store at once (verification and tests write these directly). */
  addCredit(wallet: string, pairs: number): void {
    this.host.store.addCredit(wallet, pairs, this.host.now());
    this.creditAdded(wallet, pairs);
  }

  /** `GET /api/credit?wallet=`: a volunteer's lifetime credit (pairs served), durable; 0 for an unknown wallet. */
  creditAnswer(wallet: string): CreditAnswer {
    this.flush();
    const v = this.host.store.volunteer(wallet);
    return { wallet, credit_pairs: v?.credit_pairs ?? 0, first_seen_ms: v?.first_seen_ms ?? null, last_seen_ms: v?.last_seen_ms ?? null };
  }

  /** A wallet's durable credit (flushed pairs), from the cache; the store is read once per wallet. */
  creditOf(wallet: string): number {
    let credit = this.credits.get(wallet);
    if (credit === undefined) {
      credit = this.host.store.volunteer(wallet)?.credit_pairs ?? 0;
      if (this.credits.size >= CREDIT_CACHE_MAX) this.credits.clear();
      this.credits.set(wallet, credit);
    }
    return credit;
  }

  /** Refuses every later heartbeat of `subject` (a worker id or a wallet) with WORKER_QUARANTINED. */
  quarantine(subject: string, reason: string): void {
    this.host.store.quarantine(subject, reason, this.host.now());
  }
}
