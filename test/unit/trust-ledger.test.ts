/**
 * hub/trust/ledger.ts: how the workers table words a worker's standing (trustWords), and to which slice a worker's
 * pairs and credit go (trust/slice-credit.ts through the ledger), as tables.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { DispatchMap } from '../../hub/dispatch/map.ts';
import { DEFAULT_TRUST } from '../../hub/dispatch/trust.ts';
import { HubStore } from '../../hub/store.ts';
import { TrustLedger, trustWords } from '../../hub/trust/ledger.ts';

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

// ------------------------------------------------------------------------------------------------ per-slice credit

/** One step of a worker's life as the dispatcher and the ledger see it. */
type Step =
  | { serve: [number, number, number]; pairs: number }
  | { audit: number; pairs: number; nmse: number }
  | { held: Array<[number, number, number]> };

/** A real ledger over a real DispatchMap and an in-memory store; per-slice tallies after `steps`, as [key, pairs, credit]. */
function attribute(steps: Step[], probation: number): { slices: Array<[string, number, number]>; wallet: number } {
  const store = new HubStore(':memory:');
  const dispatch = new DispatchMap();
  const ledger = new TrustLedger(
    { store, dispatch, creditChanged: () => {}, event: () => {}, quarantineWorker: () => {}, now: () => 1 },
    { ...DEFAULT_TRUST, probation, spotRate: probation === 0 ? 0 : DEFAULT_TRUST.spotRate },
    new Registry(),
  );
  dispatch.attach('w', 'wallet-a', 0);
  for (const s of steps) {
    if ('serve' in s) {
      const [layer, begin, end] = s.serve;
      dispatch.recordServe('w', 1, 5, s.pairs, { layer, begin, end });
      ledger.used('w', s.pairs, { layer, begin, end });
    } else if ('audit' in s) ledger.onAudit('m', 'w', { layer: s.audit, seq: 1, rows: 1, pairs: s.pairs, nmse: s.nmse });
    else dispatch.attach('w', 'wallet-a', 2, s.held);
  }
  ledger.flush();
  const rec = dispatch.record('w');
  const wallet = ledger.creditOf('wallet-a');
  store.close();
  return {
    slices: [...(rec?.slices.values() ?? [])].map((x) => [`${x.layer}:${x.begin}:${x.end}`, x.pairs, x.credit]),
    wallet,
  };
}

test('per-slice credit: each slice gets the pairs it served and the credit they earned, in step with the wallet', () => {
  const L0: [number, number, number] = [0, 0, 16];
  const L1: [number, number, number] = [1, 0, 16];
  const L1b: [number, number, number] = [1, 16, 32];
  const rows: Array<{ name: string; probation: number; steps: Step[]; slices: Array<[string, number, number]>; wallet: number }> = [
    {
      name: 'trust off: credited as used, per slice',
      probation: 0,
      steps: [
        { serve: L0, pairs: 10 },
        { serve: L1, pairs: 4 },
        { serve: L0, pairs: 2 },
      ],
      slices: [
        ['0:0:16', 12, 12],
        ['1:0:16', 4, 4],
      ],
      wallet: 16,
    },
    {
      name: 'on probation: served but not credited yet',
      probation: 2,
      steps: [
        { serve: L0, pairs: 10 },
        { serve: L1, pairs: 4 },
        { audit: 0, pairs: 3, nmse: 0 },
      ],
      slices: [
        ['0:0:16', 10, 0],
        ['1:0:16', 4, 0],
      ],
      wallet: 0,
    },
    {
      name: 'probation passed: every slice credited its used pairs, the audited ones on the audit’s layer',
      probation: 2,
      steps: [
        { serve: L0, pairs: 10 },
        { serve: L1, pairs: 4 },
        { audit: 0, pairs: 3, nmse: 0 },
        { audit: 1, pairs: 5, nmse: 0 },
      ],
      slices: [
        ['0:0:16', 10, 13],
        ['1:0:16', 4, 9],
      ],
      wallet: 22,
    },
    {
      name: 'two slices of one layer: an audit of the layer goes to the one that served most there',
      probation: 1,
      steps: [
        { serve: L1, pairs: 2 },
        { serve: L1b, pairs: 7 },
        { audit: 1, pairs: 3, nmse: 0 },
      ],
      slices: [
        ['1:0:16', 2, 2],
        ['1:16:32', 7, 10],
      ],
      wallet: 12,
    },
    {
      name: 'quarantined by a gross audit: nothing credited, nothing waits',
      probation: 2,
      steps: [
        { serve: L0, pairs: 10 },
        { audit: 0, pairs: 3, nmse: 0 },
        { serve: L1, pairs: 4 },
        { audit: 1, pairs: 5, nmse: 1 },
      ],
      slices: [
        ['0:0:16', 10, 0],
        ['1:0:16', 4, 0],
      ],
      wallet: 0,
    },
    {
      name: 'a slice given up is forgotten at the next heartbeat; held again it starts at zero',
      probation: 0,
      steps: [{ serve: L0, pairs: 10 }, { serve: L1, pairs: 4 }, { held: [L1] }, { serve: L0, pairs: 1 }],
      slices: [
        ['1:0:16', 4, 4],
        ['0:0:16', 1, 1],
      ],
      wallet: 15,
    },
  ];
  for (const r of rows) {
    const got = attribute(r.steps, r.probation);
    assert.deepEqual(got.slices, r.slices, r.name);
    assert.equal(got.wallet, r.wallet, `${r.name}: the wallet's credit`);
    // The slices' credit never exceeds the wallet's, and equals it while no slice was given up.
    const sum = got.slices.reduce((n, [, , c]) => n + c, 0);
    assert.ok(sum <= got.wallet, `${r.name}: Σ slice credit ${sum} ≤ wallet ${got.wallet}`);
  }
});
