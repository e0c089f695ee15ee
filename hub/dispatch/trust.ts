/**
 * Trust in a worker's answers (pure functions; the hub keeps the counts, the dispatcher applies the verdicts).
 *
 * A worker's answer is a claim, not a fact: it is held against the coordinator's own sums for the same pairs (the
 * dispatch protocol's AUDIT frame). A new worker is on probation: every item it is sent is audited and none is used
 * (the coordinator computes those pairs as if nobody had helped) until it has passed `probation` audits. A worker in
 * good standing has its answers used, and a random `spotRate` share of its items audited after the fact. One audit
 * beyond `toleranceNmse` quarantines it: durable, its wallet too, its unverified credit dropped.
 *
 *   const s = standing({ passed: rec.auditsPassed, quarantined: rec.quarantined }, cfg);
 *   if (auditThis(s, Math.random(), cfg)) …;          // per work item
 *   const v = judgeAudit(result.nmse, cfg);            // per AUDIT compared
 *   if (!v.ok) quarantine(workerId, v.reason);
 */

export interface TrustConfig {
  /** Audited items a new worker must pass before its answers are used (0: trusted at once). */
  probation: number;
  /** Share of a trusted worker's items audited after the fact, 0..1. */
  spotRate: number;
  /**
   * Largest normalised squared error (Σ(a−t)² / Σt²) of an honest answer. Workers computing in the coordinator's
   * numerics agree with it to float-summation order: measured NMSE 0 (WebGPU Q4_K, bit for bit) to 2e-13 (the wasm
   * fallback); the f16 tiles a GPU with `shader-f16` may use reach ≈1e-7. 1e-6 leaves 10× above the worst honest case
   * and still catches a result scaled by 1.001 (NMSE 1e-6) or one expert of eight dropped (NMSE ≈ 1e-1).
   */
  toleranceNmse: number;
}

export const DEFAULT_TRUST: Readonly<TrustConfig> = Object.freeze({ probation: 20, spotRate: 0.02, toleranceNmse: 1e-6 });

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

export type AuditVerdict = { ok: true } | { ok: false; reason: string };

/** An audit's verdict from its NMSE (NaN or infinite: a non-finite answer, a mismatch). */
export function judgeAudit(nmse: number, cfg: TrustConfig = DEFAULT_TRUST): AuditVerdict {
  if (Number.isFinite(nmse) && nmse >= 0 && nmse <= cfg.toleranceNmse) return { ok: true };
  return {
    ok: false,
    reason: `audit mismatch: NMSE ${Number.isFinite(nmse) ? nmse.toExponential(2) : String(nmse)} against the coordinator's own sums (tolerance ${cfg.toleranceNmse.toExponential(0)})`,
  };
}

/** Whether trust checks are on at all (off: every answer is used at once and credited as it is served). */
export function trustOn(cfg: TrustConfig): boolean {
  return cfg.probation > 0 || cfg.spotRate > 0;
}
