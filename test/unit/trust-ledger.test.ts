/** hub/trust/ledger.ts: how the workers table words a worker's standing (trustWords), as a table. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_TRUST } from '../../hub/dispatch/trust.ts';
import { trustWords } from '../../hub/trust/ledger.ts';

test('trustWords: probation n/N, trusted, and nothing when quarantined or with trust checks off', () => {
  const rows: Array<{ passed: number; quarantined: boolean; probation: number; spotRate: number; want: string }> = [
    { passed: 0, quarantined: false, probation: 20, spotRate: 0.02, want: 'probation 0/20' },
    { passed: 19, quarantined: false, probation: 20, spotRate: 0.02, want: 'probation 19/20' },
    { passed: 20, quarantined: false, probation: 20, spotRate: 0.02, want: 'trusted' },
    { passed: 3, quarantined: true, probation: 20, spotRate: 0.02, want: '' },
    { passed: 0, quarantined: false, probation: 0, spotRate: 0.5, want: 'trusted' },
    { passed: 0, quarantined: false, probation: 0, spotRate: 0, want: '' },
  ];
  for (const r of rows)
    assert.equal(
      trustWords(r.passed, r.quarantined, { ...DEFAULT_TRUST, probation: r.probation, spotRate: r.spotRate }),
      r.want,
      JSON.stringify(r),
    );
});
