/** hub/dashboard/admin-actions.ts: the release cool-downs of HTTP-heartbeat workers (ReleaseHolds), as a table. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ReleaseHolds } from '../../hub/dashboard/admin-actions.ts';

test('ReleaseHolds: the ms left of a cool-down, 0 once over or never held; the oldest forgotten past the cap', () => {
  const rows: Array<{ holds: Array<[string, number]>; kept: number; ask: string; nowMs: number; want: number }> = [
    { holds: [], kept: 4, ask: 'w', nowMs: 0, want: 0 },
    { holds: [['w', 1000]], kept: 4, ask: 'w', nowMs: 400, want: 600 },
    { holds: [['w', 1000]], kept: 4, ask: 'w', nowMs: 1000, want: 0 },
    { holds: [['w', 1000]], kept: 4, ask: 'x', nowMs: 0, want: 0 },
    {
      holds: [
        ['w', 1000],
        ['w', 3000],
      ],
      kept: 4,
      ask: 'w',
      nowMs: 2000,
      want: 1000,
    },
    {
      holds: [
        ['a', 5000],
        ['b', 5000],
        ['c', 5000],
      ],
      kept: 2,
      ask: 'a',
      nowMs: 0,
      want: 0,
    },
    {
      holds: [
        ['a', 5000],
        ['b', 5000],
        ['c', 5000],
      ],
      kept: 2,
      ask: 'b',
      nowMs: 0,
      want: 5000,
    },
  ];
  for (const r of rows) {
    const h = new ReleaseHolds(r.kept);
    for (const [id, until] of r.holds) h.hold(id, until);
    assert.equal(h.remainingMs(r.ask, r.nowMs), r.want, JSON.stringify(r));
  }
});

test('ReleaseHolds: an ended cool-down is forgotten when asked', () => {
  const h = new ReleaseHolds(4);
  h.hold('a', 100);
  h.hold('b', 200);
  assert.equal(h.size, 2);
  assert.equal(h.remainingMs('b', 150), 50);
  assert.equal(h.size, 1);
});
