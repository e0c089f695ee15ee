/**
 * Protocol v1's own part of the dispatcher (docs/dispatch-protocol.md). A v1 coordinator waits for one RESPONSE per
 * REQUEST, sent once the workers settled, with the served flags and the sums; v2 claims pairs at once (CLAIM) and
 * sends the sums in a RESULT. So v1 has no shadow items: an answer that may not be used yet (probation) is dropped when
 * the RESPONSE is built, and an audit withholds answered items, flags their pairs "audited" in the RESPONSE and waits
 * for the coordinator's AUDIT sums to compare them with. Pure functions over the request's plan and its answers.
 *
 *   dropUnusable(partials, workerIds, mayUse);
 *   const withheld = withholdAudited({ seq, layer, plan, workerIds, partials, nTokens, nUsed }, chooseAudit);
 *   write(encodeV1Answer(head, withheld?.mask ?? null, nServed, served, sums));
 *   // … AUDIT frame:  for (const [id, r] of auditWithheld(withheld.awaiting, a.sums, nEmbd)) onAudit(id, r);
 */
import { encodeResponse } from '../../protocol/dispatch.ts';
import { type AuditChooser, type AuditResult, auditMask, compareAudit, pickAuditItems } from './audits.ts';
import type { RequestPlan } from './plan.ts';

/** Answers withheld from a RESPONSE, waiting for the coordinator's AUDIT frame of the same seq. */
export interface AwaitingAudit {
  seq: number;
  layer: number;
  items: Array<{ workerId: string; rowToken: ArrayLike<number>; nRows: number; nPairs: number; partial: Float32Array }>;
}

/** What withholding took: the RESPONSE's audit flags, the pairs audited, and what waits for AUDIT. */
export interface Withheld {
  mask: Uint8Array;
  pairs: number;
  awaiting: AwaitingAudit;
}

/** The answers of workers that may not be used yet are not summed (v2 sends their items in shadow instead). */
export function dropUnusable(
  partials: Array<Float32Array | null>,
  workerIds: readonly string[],
  mayUse: ((workerId: string) => boolean) | undefined,
): void {
  if (!mayUse) return;
  for (const [i, p] of partials.entries()) if (p && !mayUse(workerIds[i] as string)) partials[i] = null;
}

/**
 * The audit seam (audits.ts `AuditChooser`) for v1: takes the chosen answered items' partials out of `partials` (so
 * they are not served) and returns their flags and what waits for AUDIT, or null when nothing is audited.
 */
export function withholdAudited(
  r: {
    seq: number;
    layer: number;
    plan: RequestPlan;
    workerIds: readonly string[];
    partials: Array<Float32Array | null>;
    nTokens: number;
    nUsed: number;
  },
  choose: AuditChooser | undefined,
): Withheld | null {
  if (!choose) return null;
  const answered = r.partials.map((p) => p !== null);
  if (!answered.includes(true)) return null;
  const chosen = choose({ seq: r.seq, layer: r.layer, plan: r.plan, workerIds: r.workerIds, answered });
  if (!chosen || chosen.length === 0) return null;
  const taken = pickAuditItems(r.plan.workers, chosen, r.nTokens, (i) => r.partials[i] !== null);
  if (taken.length === 0) return null;
  let pairs = 0;
  const items = taken.map((i) => {
    const wp = r.plan.workers[i] as RequestPlan['workers'][number];
    const partial = r.partials[i] as Float32Array;
    r.partials[i] = null;
    pairs += wp.nPairs;
    return { workerId: r.workerIds[i] as string, rowToken: wp.rowToken, nRows: wp.nRows, nPairs: wp.nPairs, partial };
  });
  return {
    mask: auditMask(r.plan.workers, taken, r.nTokens * r.nUsed),
    pairs,
    awaiting: { seq: r.seq, layer: r.layer, items },
  };
}

/** The RESPONSE: served with the flags and sums when any pair was served, else local; the audit flags either way. */
export function encodeV1Answer(
  head: { seq: number; layer: number; nTokens: number; nUsed: number; quietMs: number },
  audit: Uint8Array | null,
  nServed: number,
  served: Uint8Array,
  sums: Float32Array,
): Uint8Array {
  const base = audit ? { ...head, audit } : head;
  return encodeResponse(nServed > 0 ? { ...base, mode: 'served', served, sums } : { ...base, mode: 'local' });
}

/** A RESPONSE that serves nothing (LOCAL): the coordinator computes every pair; `quietMs` may spare it asking. */
export function encodeV1Local(head: { seq: number; layer: number; nTokens: number; nUsed: number; quietMs: number }): Uint8Array {
  return encodeResponse({ ...head, mode: 'local' });
}

/** Each withheld answer against the coordinator's AUDIT sums, in the order withheld. */
export function auditWithheld(awaiting: AwaitingAudit, trusted: Float32Array, nEmbd: number): Array<[string, AuditResult]> {
  return awaiting.items.map((it) => [it.workerId, compareAudit(it, trusted, nEmbd, awaiting.layer, awaiting.seq)]);
}
