/**
 * Audit bookkeeping as pure functions: which of the items an `AuditChooser` picked are audited (at most one item per
 * token row, so each audited row's sums name one worker), the audit flags of their pairs, and how far a worker's
 * answer lies from the coordinator's own sums. Both protocol versions use them: v1 withholds the audited answers
 * (dispatcher.ts `withholdAudited`), v2 sends the audited items in shadow (`chooseShadow`).
 *
 *   const items = pickAuditItems(plan.workers, picked, nTokens, (i) => partials[i] !== null);
 *   const mask = auditMask(plan.workers, items, nTokens * nUsed);
 */

import type { RequestPlan } from './plan.ts';

/**
 * Which work items are audited. An audit holds one worker's answer against the coordinator's own sums: the chosen
 * items' pairs are flagged "audited" (v1: in the RESPONSE, their answers withheld; v2: in the CLAIM, the items sent in
 * shadow), so the coordinator computes them and reports their per-row sums in an AUDIT frame, and `onAudit` gets the
 * comparison. Given the items of one request (`answered[i]` for `plan.workers[i]`; v2 chooses before any answer, all
 * true), the chooser returns the indices to audit (default: none). At most one item per row is audited (the
 * coordinator reports one sum per row): later ones that share a row with an earlier one are skipped.
 */
export type AuditChooser = (ctx: {
  seq: number;
  layer: number;
  plan: RequestPlan;
  workerIds: readonly string[];
  answered: readonly boolean[];
  /** v3: a spot check is owed here (the dispatcher withheld a standing offer for it: `auditDue`). */
  owed?: boolean;
}) => readonly number[] | null;

/** One worker's answer held against the coordinator's own sums (AUDIT frame). */
export interface AuditResult {
  layer: number;
  seq: number;
  rows: number;
  pairs: number;
  /** Σ(worker − coordinator)² / Σ coordinator² over the audited rows (0 when both are 0). */
  nmse: number;
}

/** What audit picking reads of a planned item (plan.ts `WorkerPlan` has it). */
export interface AuditableItem {
  /** Per compact row: the token row it is. */
  readonly rowToken: ArrayLike<number>;
  /** The request's pair indices the item computes. */
  readonly pairIndex: ArrayLike<number>;
}

/**
 * The items to audit, in the chooser's order: each picked index that names an item, is `eligible` (v1: it answered;
 * v2: it is not in shadow already), was not picked before and shares no token row with an item already taken.
 */
export function pickAuditItems(
  items: readonly AuditableItem[],
  picked: readonly number[],
  nTokens: number,
  eligible: (i: number) => boolean,
): number[] {
  const rowTaken = new Uint8Array(nTokens);
  const taken: number[] = [];
  for (const i of picked) {
    const it = items[i];
    if (!it || taken.includes(i) || !eligible(i) || Array.prototype.some.call(it.rowToken, (t: number) => rowTaken[t] === 1)) continue;
    for (let r = 0; r < it.rowToken.length; r++) rowTaken[it.rowToken[r] as number] = 1;
    taken.push(i);
  }
  return taken;
}

/** The audit flags (one byte per pair of the request) of the pairs of `taken`. */
export function auditMask(items: readonly AuditableItem[], taken: readonly number[], nPairs: number): Uint8Array {
  const mask = new Uint8Array(nPairs);
  for (const i of taken) {
    const it = items[i] as AuditableItem;
    for (let p = 0; p < it.pairIndex.length; p++) mask[it.pairIndex[p] as number] = 1;
  }
  return mask;
}

/** NMSE of one worker's partial (its compact rows) against the coordinator's audited sums (one per token row). */
export function compareAudit(
  it: { rowToken: ArrayLike<number>; nRows: number; nPairs: number; partial: Float32Array },
  trusted: Float32Array,
  nEmbd: number,
  layer: number,
  seq: number,
): AuditResult {
  let err = 0;
  let ref = 0;
  for (let r = 0; r < it.nRows; r++) {
    const t = it.rowToken[r] as number;
    for (let i = 0; i < nEmbd; i++) {
      const want = trusted[t * nEmbd + i] as number;
      const d = (it.partial[r * nEmbd + i] as number) - want;
      err += d * d;
      ref += want * want;
    }
  }
  return { layer, seq, rows: it.nRows, pairs: it.nPairs, nmse: ref > 0 ? err / ref : err > 0 ? Number.POSITIVE_INFINITY : 0 };
}
