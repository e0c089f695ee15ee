/**
 * Audit bookkeeping (hub/dispatch/audits.ts) as tables: which picked items are audited (one per token row), their
 * pairs' flags, and the NMSE of an answer against the coordinator's sums.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type AuditableItem, auditMask, compareAudit, pickAuditItems } from '../../hub/dispatch/audits.ts';

const item = (rows: number[], pairs: number[]): AuditableItem => ({
  rowToken: Uint32Array.from(rows),
  pairIndex: Uint32Array.from(pairs),
});
// 3 tokens; item 0 holds rows 0 and 1, item 1 row 1, item 2 row 2.
const items = [item([0, 1], [0, 2]), item([1], [3]), item([2], [5])];

test('pickAuditItems and auditMask: table', () => {
  const rows: Array<{ name: string; picked: number[]; eligible?: (i: number) => boolean; want: number[]; mask: number[] }> = [
    { name: 'nothing picked', picked: [], want: [], mask: [0, 0, 0, 0, 0, 0] },
    { name: 'one', picked: [2], want: [2], mask: [0, 0, 0, 0, 0, 1] },
    { name: 'a shared row: the first pick wins', picked: [0, 1], want: [0], mask: [1, 0, 1, 0, 0, 0] },
    { name: 'the other order', picked: [1, 0, 2], want: [1, 2], mask: [0, 0, 0, 1, 0, 1] },
    { name: 'no such item', picked: [7, -1, 2], want: [2], mask: [0, 0, 0, 0, 0, 1] },
    { name: 'picked twice', picked: [2, 2], want: [2], mask: [0, 0, 0, 0, 0, 1] },
    {
      name: 'not eligible: skipped, its rows stay free',
      picked: [0, 1],
      eligible: (i) => i !== 0,
      want: [1],
      mask: [0, 0, 0, 1, 0, 0],
    },
  ];
  for (const r of rows) {
    const got = pickAuditItems(items, r.picked, 3, r.eligible ?? (() => true));
    assert.deepEqual(got, r.want, r.name);
    assert.deepEqual([...auditMask(items, got, 6)], r.mask, `${r.name}: mask`);
  }
});

test('compareAudit: table', () => {
  // nEmbd 2; the coordinator's sums for 2 token rows.
  const trusted = Float32Array.from([1, 2, 3, 4]);
  const rows: Array<{ name: string; rowToken: number[]; partial: number[]; trusted?: Float32Array; nmse: number }> = [
    { name: 'exact', rowToken: [1], partial: [3, 4], nmse: 0 },
    { name: 'off by one in one value', rowToken: [0], partial: [1, 3], nmse: 1 / 5 },
    { name: 'two rows, out of order', rowToken: [1, 0], partial: [3, 4, 1, 2], nmse: 0 },
    { name: 'both zero', rowToken: [0], partial: [0, 0], trusted: new Float32Array(4), nmse: 0 },
    { name: 'reference zero, answer not', rowToken: [0], partial: [1, 0], trusted: new Float32Array(4), nmse: Infinity },
  ];
  for (const r of rows) {
    const it = { rowToken: r.rowToken, nRows: r.rowToken.length, nPairs: 3, partial: Float32Array.from(r.partial) };
    assert.deepEqual(
      compareAudit(it, r.trusted ?? trusted, 2, 5, 9),
      { layer: 5, seq: 9, rows: r.rowToken.length, pairs: 3, nmse: r.nmse },
      r.name,
    );
  }
});
