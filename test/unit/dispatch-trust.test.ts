/** hub/dispatch/trust.ts: standing, which items are audited, what may be used, and audit verdicts, as tables. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_TRUST, type Standing, afterAudit, auditThis, judgeAudit, mayUse, standing, trustOn } from '../../hub/dispatch/trust.ts';

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

test('verdicts: within the tolerance passes; beyond it a strike; beyond the gross bound, NaN, ±∞ or negative: gross', () => {
  const { toleranceNmse: tol, grossNmse: gross } = DEFAULT_TRUST;
  for (const nmse of [0, 2e-13, 8.5e-7, tol]) assert.deepEqual(judgeAudit(nmse), { kind: 'pass' }, String(nmse));
  // An honest worker's rarest outlier (1.1e-5, wasm) and a result scaled by 1.01 (1e-4): strikes, not gross.
  for (const nmse of [tol * 1.01, 1.1e-5, 1e-4, gross]) assert.equal(judgeAudit(nmse).kind, 'strike', String(nmse));
  for (const nmse of [gross * 1.01, 1, Number.NaN, Number.POSITIVE_INFINITY, -1])
    assert.equal(judgeAudit(nmse).kind, 'gross', String(nmse));
  const v = judgeAudit(1.23e-4);
  assert.ok(
    v.kind === 'strike' && /^audit mismatch: NMSE 1\.23e-4 against the coordinator's own sums \(tolerance 1e-6\)$/.test(v.reason),
    JSON.stringify(v),
  );
  const g = judgeAudit(Number.NaN);
  assert.ok(g.kind === 'gross' && g.reason.includes('NMSE NaN') && g.reason.includes('gross above 1e-3'), JSON.stringify(g));
});

test('after an audit: passes count; a strike sends back on probation; a second before it is passed, or a gross one, quarantines', () => {
  const cfg = DEFAULT_TRUST; // probation 20
  const pass = judgeAudit(0);
  const strike = judgeAudit(1e-4);
  const gross = judgeAudit(1);
  const rows: Array<{
    name: string;
    r: { passed: number; strikes: number };
    v: typeof pass;
    want: { passed: number; strikes: number; q: boolean };
  }> = [
    { name: 'a pass on probation', r: { passed: 3, strikes: 0 }, v: pass, want: { passed: 4, strikes: 0, q: false } },
    { name: 'the pass that ends probation', r: { passed: 19, strikes: 0 }, v: pass, want: { passed: 20, strikes: 0, q: false } },
    {
      name: 'a first strike, trusted: back on probation',
      r: { passed: 500, strikes: 0 },
      v: strike,
      want: { passed: 0, strikes: 1, q: false },
    },
    { name: 'a pass while working a strike off', r: { passed: 5, strikes: 1 }, v: pass, want: { passed: 6, strikes: 1, q: false } },
    {
      name: 'probation passed again: the strike is worked off',
      r: { passed: 19, strikes: 1 },
      v: pass,
      want: { passed: 20, strikes: 0, q: false },
    },
    { name: 'a second strike before that', r: { passed: 19, strikes: 1 }, v: strike, want: { passed: 19, strikes: 2, q: true } },
    { name: 'a gross mismatch, trusted', r: { passed: 500, strikes: 0 }, v: gross, want: { passed: 500, strikes: 0, q: true } },
  ];
  for (const row of rows) {
    const got = afterAudit(row.r, row.v, cfg);
    assert.deepEqual({ passed: got.passed, strikes: got.strikes, q: got.quarantine !== null }, row.want, row.name);
  }
  // A worker that is always 1 % off is quarantined at its second audit, whatever its standing before.
  let r = { passed: 500, strikes: 0 };
  const first = afterAudit(r, strike, cfg);
  r = first;
  assert.equal(first.quarantine, null);
  assert.match(afterAudit(r, strike, cfg).quarantine ?? '', /a second strike before its probation was passed again$/);
  // An honest worker with one outlier in every 100 audits (far more often than measured) is never quarantined.
  let h = { passed: 0, strikes: 0 };
  for (let i = 0; i < 10_000; i++) {
    const next = afterAudit(h, i % 100 === 50 ? strike : pass, cfg);
    assert.equal(next.quarantine, null, `audit ${i}`);
    h = next;
  }
});

test('trust checks are on unless both probation and spot audits are off', () => {
  assert.equal(trustOn(DEFAULT_TRUST), true);
  assert.equal(trustOn({ ...DEFAULT_TRUST, probation: 0 }), true);
  assert.equal(trustOn({ ...DEFAULT_TRUST, spotRate: 0 }), true);
  assert.equal(trustOn({ ...DEFAULT_TRUST, probation: 0, spotRate: 0 }), false);
});
