import { test } from 'node:test';
import assert from 'node:assert/strict';
import { workerState, type WorkerStateInput } from '../../hub/dispatch/map.ts';
import {
  DECISIONS,
  DEFAULT_LAYER_ONE,
  type DispatchMode,
  isSaturated,
  layerOnePolicy,
  type PolicyReason,
  type SaturationSnapshot,
  type WorkerSnapshot,
} from '../../hub/dispatch/policy.ts';

const cfg = DEFAULT_LAYER_ONE;
const NOW = 1_000_000;

/** A worker as the dispatcher sees it: its dispatch-map record turned into a state, plus what it measured. */
function worker(r: Partial<WorkerStateInput> = {}, m: Partial<Omit<WorkerSnapshot, 'state'>> = {}): WorkerSnapshot {
  const record: WorkerStateInput = {
    attachMs: r.attachMs ?? NOW - 60_000,
    lastServeMs: r.lastServeMs ?? null,
    released: r.released ?? false,
    quarantined: r.quarantined ?? false,
  };
  return { state: workerState(record, NOW, cfg), expectedMs: null, benchedAtMs: null, lastProbeMs: null, ...m };
}

const newcomer = worker({ attachMs: NOW - 5_000 }); // in its grace window
const graceEdge = worker({ attachMs: NOW - 15_000 }); // grace is inclusive
const neverServed = worker({ attachMs: NOW - 15_001 });
const proven = worker({ lastServeMs: NOW - 1_000 }, { expectedMs: 2 });
const provenSlow = worker({ lastServeMs: NOW - 1_000 }, { expectedMs: 50 });
const provenUnmeasured = worker({ lastServeMs: NOW - 1_000 });
const idle = worker({ lastServeMs: NOW - 20_001 }, { expectedMs: 2 });
const idleEdge = worker({ lastServeMs: NOW - 20_000 }, { expectedMs: 2 });
const released = worker({ lastServeMs: NOW - 1_000, released: true }, { expectedMs: 2 });
const quarantined = worker({ lastServeMs: NOW - 1_000, quarantined: true }, { expectedMs: 2 });
const benched = (since: number, lastProbe: number | null = null): WorkerSnapshot =>
  worker(
    { lastServeMs: NOW - 1_000 },
    { expectedMs: 2, benchedAtMs: NOW - since, lastProbeMs: lastProbe === null ? null : NOW - lastProbe },
  );

const rest: SaturationSnapshot = { busy: 0, slots: 4, ageMs: 1_000 };
const busy: SaturationSnapshot = { busy: 2, slots: 4, ageMs: 1_000 };
const busyStale: SaturationSnapshot = { busy: 4, slots: 4, ageMs: 30_001 };
const busyEdge: SaturationSnapshot = { busy: 2, slots: 4, ageMs: 30_000 };

test('Layer-1 policy: every rule, with its reason', () => {
  // local_ns_per_pair 1e6 = 1 ms per pair; 8 pairs → 8 ms locally.
  const table: Array<{
    name: string;
    mode?: DispatchMode;
    w: WorkerSnapshot;
    pairs?: number;
    localNs?: number;
    sat?: SaturationSnapshot | null;
    want: PolicyReason;
  }> = [
    { name: 'off never dispatches', mode: 'off', w: proven, want: 'mode-off' },
    { name: 'off beats always-style grace', mode: 'off', w: newcomer, want: 'mode-off' },
    { name: 'quarantined never', w: quarantined, sat: busy, want: 'quarantined' },
    { name: 'quarantined never, even forced', mode: 'always', w: quarantined, want: 'quarantined' },
    { name: 'released never', w: released, sat: busy, want: 'released' },
    { name: 'released never, even forced', mode: 'always', w: released, want: 'released' },
    { name: 'no covered pair', w: proven, pairs: 0, want: 'no-pairs' },
    { name: 'always: a worker that never served', mode: 'always', w: neverServed, want: 'always' },
    { name: 'always: slower than local', mode: 'always', w: provenSlow, want: 'always' },
    { name: 'always: idle at rest', mode: 'always', w: idle, sat: rest, want: 'always' },
    { name: 'always: benched is still only probed', mode: 'always', w: benched(1_000), want: 'benched' },
    { name: 'grace: a newcomer gets a first try at rest', w: newcomer, sat: rest, want: 'grace' },
    { name: 'grace: inclusive edge', w: graceEdge, want: 'grace' },
    { name: 'grace: regardless of local speed', w: newcomer, localNs: 1, want: 'grace' },
    { name: 'never served past grace: never, at rest', w: neverServed, sat: rest, want: 'never-served' },
    { name: 'never served past grace: never, even saturated', w: neverServed, sat: busy, want: 'never-served' },
    { name: 'proven and faster than local', w: proven, want: 'not-slower-than-local' },
    { name: 'proven, exactly as fast as local', w: worker({ lastServeMs: NOW - 1 }, { expectedMs: 8 }), want: 'not-slower-than-local' },
    { name: 'proven but slower than local, at rest', w: provenSlow, sat: rest, want: 'slower-than-local' },
    { name: 'proven, local cost unknown', w: provenSlow, localNs: 0, want: 'speed-unknown' },
    { name: 'proven, own speed unmeasured', w: provenUnmeasured, want: 'speed-unknown' },
    { name: 'proven but slower, saturated: throughput wins', w: provenSlow, sat: busy, want: 'saturated' },
    { name: 'idle at rest', w: idle, sat: rest, want: 'idle-at-rest' },
    { name: 'idle, no reading', w: idle, sat: null, want: 'idle-at-rest' },
    { name: 'idle edge is still proven', w: idleEdge, sat: rest, want: 'not-slower-than-local' },
    { name: 'idle, saturated: dispatched past the idle timeout', w: idle, sat: busy, want: 'saturated' },
    { name: 'idle, saturated on a stale reading: at rest', w: idle, sat: busyStale, want: 'idle-at-rest' },
    { name: 'idle, saturated at the age limit', w: idle, sat: busyEdge, want: 'saturated' },
    { name: 'idle, busy 1', w: idle, sat: { busy: 1, slots: 4, ageMs: 0 }, want: 'idle-at-rest' },
    { name: 'idle, busy unknown', w: idle, sat: { busy: null, slots: null, ageMs: 0 }, want: 'idle-at-rest' },
    { name: 'benched: not yet due for a probe', w: benched(4_999), want: 'benched' },
    { name: 'benched: due for a probe', w: benched(5_000), pairs: 2, want: 'bench-probe' },
    { name: 'benched: probe too large, waits', w: benched(9_000), pairs: 17, want: 'benched' },
    { name: 'benched: probed recently', w: benched(60_000, 1_000), want: 'benched' },
    { name: 'benched: last probe long ago', w: benched(60_000, 5_000), want: 'bench-probe' },
    { name: 'benched newcomer in grace: probed only', w: { ...newcomer, benchedAtMs: NOW - 100 }, want: 'benched' },
    { name: 'benched but idle at rest: not even probed', w: { ...idle, benchedAtMs: NOW - 60_000 }, sat: rest, want: 'idle-at-rest' },
    { name: 'benched never-served: not even probed', w: { ...neverServed, benchedAtMs: NOW - 60_000 }, want: 'never-served' },
    { name: 'benched under saturation: probe', w: { ...idle, benchedAtMs: NOW - 60_000 }, sat: busy, want: 'bench-probe' },
  ];
  for (const row of table) {
    const d = layerOnePolicy(
      {
        mode: row.mode ?? 'auto',
        nowMs: NOW,
        worker: row.w,
        pairs: row.pairs ?? 8,
        localNsPerPair: row.localNs ?? 1_000_000,
        saturation: row.sat === undefined ? rest : row.sat,
      },
      cfg,
    );
    assert.equal(d.reason, row.want, row.name);
    assert.equal(d, DECISIONS[row.want], `${row.name}: the frozen decision of its reason`);
  }
});

test('Layer-1 policy: dispatch is true exactly for the reasons that dispatch', () => {
  const yes = Object.values(DECISIONS)
    .filter((d) => d.dispatch)
    .map((d) => d.reason)
    .sort();
  assert.deepEqual(yes, ['always', 'bench-probe', 'grace', 'not-slower-than-local', 'saturated', 'speed-unknown']);
  for (const d of Object.values(DECISIONS)) assert.ok(Object.isFrozen(d));
});

test('isSaturated: busy ≥ saturateAt on a reading no older than maxReadingAgeMs', () => {
  assert.equal(isSaturated(null, cfg), false);
  assert.equal(isSaturated({ busy: 2, slots: null, ageMs: 0 }, cfg), true);
  assert.equal(isSaturated({ busy: 1, slots: 2, ageMs: 0 }, cfg), false);
  assert.equal(isSaturated({ busy: 9, slots: 9, ageMs: cfg.maxReadingAgeMs + 1 }, cfg), false);
  assert.equal(isSaturated({ busy: 3, slots: 4, ageMs: 0 }, { ...cfg, saturateAt: 4 }), false);
});

test('Layer-1 policy: configurable thresholds', () => {
  const tight = { ...cfg, graceMs: 1_000, idleMs: 2_000, probeEveryMs: 100, probeMaxPairs: 1 };
  const r = (w: Partial<Pick<WorkerStateInput, 'attachMs' | 'lastServeMs'>>): WorkerSnapshot => {
    const record: WorkerStateInput = {
      attachMs: w.attachMs ?? NOW,
      lastServeMs: w.lastServeMs ?? null,
      released: false,
      quarantined: false,
    };
    return { state: workerState(record, NOW, tight), expectedMs: 1, benchedAtMs: null, lastProbeMs: null };
  };
  const at = (w: WorkerSnapshot, pairs = 4): PolicyReason =>
    layerOnePolicy({ mode: 'auto', nowMs: NOW, worker: w, pairs, localNsPerPair: 1e6, saturation: rest }, tight).reason;
  assert.equal(at(r({ attachMs: NOW - 1_001 })), 'never-served');
  assert.equal(at(r({ lastServeMs: NOW - 2_001 })), 'idle-at-rest');
  assert.equal(at({ ...r({ lastServeMs: NOW }), benchedAtMs: NOW - 100 }, 1), 'bench-probe');
  assert.equal(at({ ...r({ lastServeMs: NOW }), benchedAtMs: NOW - 100 }, 2), 'benched');
});
