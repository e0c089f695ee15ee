/** hub/dispatch/trust.ts: standing, which items are audited, what may be used, and audit verdicts, as tables. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_TRUST, type Standing, auditThis, judgeAudit, mayUse, standing, trustOn } from '../../hub/dispatch/trust.ts';

test('standing: probation until `probation` audits passed; quarantine overrides', () => {
  const rows: Array<{ passed: number; quarantined: boolean; probation: number; want: Standing }> = [
    { passed: 0, quarantined: false, probation: 20, want: 'probation' },
    { passed: 19, quarantined: false, probation: 20, want: 'probation' },
    { passed: 20, quarantined: false, probation: 20, want: 'trusted' },
    { passed: 500, quarantined: true, probation: 20, want: 'quarantined' },
    { passed: 0, quarantined: false, probation: 0, want: 'trusted' },
  ];
  for (const r of rows) assert.equal(standing(r, { ...DEFAULT_TRUST, probation: r.probation }), r.want, JSON.stringify(r));
});

test('audits: every item on probation, a spotRate share once trusted, none once quarantined; only trusted answers used', () => {
  const rows: Array<{ s: Standing; rand: number; rate: number; audit: boolean; use: boolean }> = [
    { s: 'probation', rand: 0.99, rate: 0.02, audit: true, use: false },
    { s: 'trusted', rand: 0.019, rate: 0.02, audit: true, use: true },
    { s: 'trusted', rand: 0.02, rate: 0.02, audit: false, use: true },
    { s: 'trusted', rand: 0, rate: 0, audit: false, use: true },
    { s: 'trusted', rand: 0.999, rate: 1, audit: true, use: true },
    { s: 'quarantined', rand: 0, rate: 1, audit: false, use: false },
  ];
  for (const r of rows) {
    assert.equal(auditThis(r.s, r.rand, { ...DEFAULT_TRUST, spotRate: r.rate }), r.audit, JSON.stringify(r));
    assert.equal(mayUse(r.s), r.use, JSON.stringify(r));
  }
  // Over many items the spot audits come to the rate.
  let audited = 0;
  for (let i = 0; i < 10_000; i++) if (auditThis('trusted', (i + 0.5) / 10_000)) audited++;
  assert.equal(audited, 200);
});

test('verdicts: within the tolerance passes; beyond it, NaN, ±∞ or a negative NMSE fail with the number in the reason', () => {
  const tol = DEFAULT_TRUST.toleranceNmse;
  assert.deepEqual(judgeAudit(0), { ok: true });
  assert.deepEqual(judgeAudit(2e-13), { ok: true });
  assert.deepEqual(judgeAudit(tol), { ok: true });
  for (const bad of [tol * 1.01, 1e-4, Number.NaN, Number.POSITIVE_INFINITY, -1]) {
    const v = judgeAudit(bad);
    assert.equal(v.ok, false, String(bad));
    if (!v.ok) assert.match(v.reason, /^audit mismatch: NMSE \S+ against the coordinator's own sums \(tolerance 1e-6\)$/);
  }
  const v = judgeAudit(1.23e-4);
  assert.ok(!v.ok && v.reason.includes('1.23e-4'));
  // A result scaled by 1.001 sits at the tolerance's edge (NMSE (0.001)² = 1e-6); × 1.01 is far beyond it.
  assert.equal(judgeAudit(0.01 ** 2).ok, false);
});

test('trust checks are on unless both probation and spot audits are off', () => {
  assert.equal(trustOn(DEFAULT_TRUST), true);
  assert.equal(trustOn({ ...DEFAULT_TRUST, probation: 0 }), true);
  assert.equal(trustOn({ ...DEFAULT_TRUST, spotRate: 0 }), true);
  assert.equal(trustOn({ ...DEFAULT_TRUST, probation: 0, spotRate: 0 }), false);
});
