/**
 * Trust in a worker's answers (pure functions; the hub keeps the counts, the dispatcher applies the verdicts).
 *
 * A worker's answer is a claim, not a fact: it is held against the coordinator's own sums for the same pairs (the
 * dispatch protocol's AUDIT frame). A new worker is on probation: every item it is sent is audited and none is used
 * (the coordinator computes those pairs as if nobody had helped) until it has passed `probation` audits. A worker in
 * good standing has its answers used, and a random `spotRate` share of its items audited after the fact. An audit far
 * beyond what an honest worker can give (`grossNmse`, or a non-finite answer) quarantines it at once: durable, its
 * wallet too, its unverified credit dropped. One beyond `toleranceNmse` but not gross is a strike: the worker goes back
 * on probation (its answers unused, every item audited), and a second strike before it has passed that probation
 * quarantines it — an honest worker's rare near-tie outlier costs it a probation, a dishonest one is caught at its
 * second audit.
 *
 *   const s = standing({ passed: rec.auditsPassed, quarantined: rec.quarantined }, cfg);
 *   if (auditThis(s, Math.random(), cfg)) …;                       // per work item
 *   const next = afterAudit(rec, judgeAudit(result.nmse, cfg), cfg); // per AUDIT compared
 *   if (next.quarantine) quarantine(workerId, next.quarantine);
 */

export interface TrustConfig {
  /** Audited items a new worker must pass before its answers are used (0: trusted at once). */
  probation: number;
  /** Share of a trusted worker's items audited after the fact, 0..1. */
  spotRate: number;
  /**
   * Normalised squared error (Σ(a−t)² / Σt²) above which an audit is a strike. Workers computing in the coordinator's
   * numerics agree with it to float-summation order on almost every token (median NMSE 0–1e-13 per type, WebGPU and
   * wasm, docs/numerics.md); the rare token whose activation sits at a rounding boundary of its 8-bit block differs
   * by one quantisation step (up to 8.5e-7 measured for the WGSL kernels, 1.1e-5 for the wasm fallback, in 0.4–1.7 %
   * of tokens above 1e-9). 1e-6 catches a result scaled by 1.001.
   */
  toleranceNmse: number;
  /**
   * NMSE above which one audit quarantines at once: no honest answer comes near it (90× the worst honest outlier
   * measured), while a wrong expert, zeros, a stale or made-up answer give 0.1–2.
   */
  grossNmse: number;
}

export const DEFAULT_TRUST: Readonly<TrustConfig> = Object.freeze({
  probation: 20,
  spotRate: 0.02,
  toleranceNmse: 1e-6,
  grossNmse: 1e-3,
});

export type Standing = 'probation' | 'trusted' | 'quarantined';

export function standing(w: { passed: number; quarantined: boolean }, cfg: TrustConfig = DEFAULT_TRUST): Standing {
  if (w.quarantined) return 'quarantined';
  return w.passed < cfg.probation ? 'probation' : 'trusted';
}

/** Whether one work item of a worker in this standing is audited; `rand` uniform in [0, 1). */
export function auditThis(s: Standing, rand: number, cfg: TrustConfig = DEFAULT_TRUST): boolean {
  if (s === 'probation') return true;
  return s === 'trusted' && rand < cfg.spotRate;
}

/** Whether an answer in this standing may go into the coordinator's sums. */
export function mayUse(s: Standing): boolean {
  return s === 'trusted';
}

export type AuditVerdict = { kind: 'pass' } | { kind: 'strike' | 'gross'; reason: string };

/** An audit's verdict from its NMSE (NaN, infinite or negative: gross). */
export function judgeAudit(nmse: number, cfg: TrustConfig = DEFAULT_TRUST): AuditVerdict {
  const ok = Number.isFinite(nmse) && nmse >= 0;
  if (ok && nmse <= cfg.toleranceNmse) return { kind: 'pass' };
  const gross = !ok || nmse > cfg.grossNmse;
  return {
    kind: gross ? 'gross' : 'strike',
    reason: `audit mismatch: NMSE ${ok ? nmse.toExponential(2) : String(nmse)} against the coordinator's own sums (tolerance ${cfg.toleranceNmse.toExponential(0)}${gross ? `, gross above ${cfg.grossNmse.toExponential(0)}` : ''})`,
  };
}

/** A worker's audit record: audits passed since its last strike, and strikes not yet worked off. */
export interface AuditRecord {
  passed: number;
  strikes: number;
}

/**
 * The record after one audit, and the reason to quarantine, if any. A pass counts towards (re-)probation, and
 * passing it works a strike off; a strike sends the worker back on probation (passed 0), a second one before that
 * probation is passed quarantines; a gross mismatch quarantines at once.
 */
export function afterAudit(r: AuditRecord, v: AuditVerdict, cfg: TrustConfig = DEFAULT_TRUST): AuditRecord & { quarantine: string | null } {
  if (v.kind === 'pass') {
    const passed = r.passed + 1;
    return { passed, strikes: passed >= cfg.probation ? 0 : r.strikes, quarantine: null };
  }
  if (v.kind === 'gross') return { ...r, quarantine: v.reason };
  if (r.strikes >= 1)
    return { ...r, strikes: r.strikes + 1, quarantine: `${v.reason}; a second strike before its probation was passed again` };
  return { passed: 0, strikes: 1, quarantine: null };
}

/** Whether trust checks are on at all (off: every answer is used at once and credited as it is served). */
export function trustOn(cfg: TrustConfig): boolean {
  return cfg.probation > 0 || cfg.spotRate > 0;
}
