/**
 * The dispatcher's work items (dispatch/worker-link.ts, the "reduce" form: Σ weight · expert(row) per row) in
 * Kvasir's worker wire (protocol/kvasir-wire.ts), and the answers back as the sums the dispatcher merges. Pure.
 *
 *   const req = kvasirRequestOf(work, 'v2', nLocal);      // throws KvasirWireError where the wire cannot carry it
 *   const sums = kvasirSums(work, req, decodeKvasirAnswer(req, work.nEmbd, bytes));
 *
 * v2 and v2f16 carry a work item as it is (the worker sums in pair order from 0, as our volunteers do). v1 has no
 * weights and a fixed n_used per token: each row is a token with as many slots as its most-paired row has pairs,
 * short rows padded with experts of the slice the row does not name (their outputs are dropped), and the hub sums
 * weight · output in the work item's pair order — the same f32 operations as v2's.
 */
import { type KvasirRequest, KvasirWireError, type KvasirWire } from '../../protocol/kvasir-wire.ts';
import type { WorkItem } from '../dispatch/worker-link.ts';

export function kvasirRequestOf(work: WorkItem, wire: KvasirWire, nLocal: number): KvasirRequest {
  const { nRows, nPairs, nEmbd } = work;
  const rows = work.rows.length === nRows * nEmbd ? work.rows : work.rows.subarray(0, nRows * nEmbd);
  if (wire !== 'v1') {
    return {
      wire,
      nRows,
      nPairs,
      rows,
      rowIndex: Int32Array.from(work.rowIndex.subarray(0, nPairs)),
      ids: Int32Array.from(work.localExpert.subarray(0, nPairs)),
      probs: work.weight.subarray(0, nPairs),
    };
  }
  const perRow = new Int32Array(nRows);
  for (let p = 0; p < nPairs; p++) perRow[work.rowIndex[p] as number] = (perRow[work.rowIndex[p] as number] as number) + 1;
  let nUsed = 1;
  for (const n of perRow) if (n > nUsed) nUsed = n;
  if (nUsed > nLocal) throw new KvasirWireError('DUPLICATE_EXPERT', `a row has ${nUsed} pairs and the slice ${nLocal} experts`);
  const sel = new Int32Array(nRows * nUsed).fill(-1);
  const fill = new Int32Array(nRows);
  for (let p = 0; p < nPairs; p++) {
    const r = work.rowIndex[p] as number;
    sel[r * nUsed + (fill[r] as number)] = work.localExpert[p] as number;
    fill[r] = (fill[r] as number) + 1;
  }
  for (let r = 0; r < nRows; r++) {
    const s = sel.subarray(r * nUsed, (r + 1) * nUsed);
    let next = 0;
    for (let u = fill[r] as number; u < nUsed; u++) {
      while (s.includes(next)) next++;
      s[u] = next;
    }
  }
  return { wire: 'v1', nUsed, nTokens: nRows, cur: rows, sel };
}

/**
 * The work item's sums `f32[nRows × nEmbd]` from a decoded answer: v2's are the answer itself; v1's per-slot outputs
 * are weighted and summed here, per row in pair order (first product copied, later ones added, each rounded to f32).
 */
export function kvasirSums(work: WorkItem, req: KvasirRequest, answer: Float32Array): Float32Array {
  if (req.wire !== 'v1') return answer;
  const { nRows, nPairs, nEmbd } = work;
  const sums = new Float32Array(nRows * nEmbd);
  const fill = new Int32Array(nRows);
  for (let p = 0; p < nPairs; p++) {
    const r = work.rowIndex[p] as number;
    const slot = fill[r] as number;
    fill[r] = slot + 1;
    const w = work.weight[p] as number;
    const y = answer.subarray((r * req.nUsed + slot) * nEmbd, (r * req.nUsed + slot + 1) * nEmbd);
    const acc = sums.subarray(r * nEmbd, (r + 1) * nEmbd);
    if (slot === 0) for (let i = 0; i < nEmbd; i++) acc[i] = Math.fround((y[i] as number) * w);
    else for (let i = 0; i < nEmbd; i++) acc[i] = Math.fround((acc[i] as number) + Math.fround((y[i] as number) * w));
  }
  return sums;
}
