/**
 * The dashboard page's state transitions (web/src/dashboard/model.ts): snapshot, tick, event and coverage messages
 * of the hub's stream applied as pure functions, with bounded history and events, staleness, the event filter and
 * the chart columns. The page itself runs in headless Chromium in test/integration/dashboard-page.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  type CoverageMap,
  coverageBase64,
  HISTORY_SAMPLES,
  type HubEventRow,
  type ModelStatus,
  type Sample,
  type Snapshot,
  STALE_AFTER_MS,
  type Tick,
  type WorkerStateName,
} from '../../protocol/dashboard.ts';
import {
  applyCoverage,
  applyEvent,
  applySnapshot,
  applyTick,
  CHARTS,
  chartColumns,
  coordinatorLabel,
  emptyState,
  EVENTS_KEPT,
  filterEvents,
  formatAgo,
  formatMs,
  hubNow,
  keepLast,
  latestValues,
  staleMessage,
  staleSince,
} from '../../web/src/dashboard/model.ts';

const workers = (n = 0): Record<WorkerStateName, number> => ({
  loading: 0,
  joining: 0,
  grace: 0,
  proven: n,
  idle: 0,
  released: 0,
  quarantined: 0,
});

function status(model: string, over: Partial<ModelStatus> = {}): ModelStatus {
  return {
    model,
    coordinator: { state: 'ready', restarts: 0, lastExit: null, dispatchUnsupported: null },
    market: true,
    busy: 0,
    slots: 4,
    saturated: false,
    recruiting: false,
    baseTarget: 1,
    boost: 2,
    effectiveTarget: 1,
    dispatchMode: 'auto',
    dispatchConnected: true,
    workers: workers(),
    shape: { nLayer: 2, nExpert: 8, moeLayers: [0, 1] },
    ...over,
  };
}

function sample(t: number, over: Partial<Sample> = {}): Sample {
  return {
    t,
    busy: 1,
    slots: 4,
    effectiveTarget: 1,
    workers: workers(2),
    pairsPerS: { served: 10, fallback: 1, late: 0, rejected: 0 },
    rttP50Ms: 12,
    rttP99Ms: 40,
    tokensPerS: 8.5,
    ...over,
  };
}

const ev = (seq: number, kind: HubEventRow['kind'] = 'recruit', model: string | null = 'a'): HubEventRow => ({
  seq,
  atMs: 1_000_000 + seq,
  kind,
  model,
  detail: `event ${seq}`,
});

function coverage(model: string, atMs: number, replicas: number[]): CoverageMap {
  return { model, atMs, moeLayers: [0, 1], nExpert: replicas.length / 2, target: 1, replicas: coverageBase64(Uint8Array.from(replicas)) };
}

function snapshot(over: Partial<Snapshot> = {}): Snapshot {
  return {
    v: 1,
    atMs: 10_000,
    tickMs: 1000,
    historyMs: 900_000,
    models: [status('a'), status('b')],
    history: { a: [sample(9000), sample(10_000)], b: [] },
    events: [ev(3), ev(1), ev(2)],
    coverage: [coverage('a', 10_000, [1, 0, 2, 1])],
    totals: { volunteers: { open: 2 }, workers: 3 },
    adminEnabled: true,
    ...over,
  };
}

const tick = (atMs: number, models = [status('a', { busy: 3 }), status('b')], samples?: Record<string, Sample>): Tick => ({
  atMs,
  models,
  samples: samples ?? Object.fromEntries(models.map((m) => [m.model, sample(atMs)])),
  totals: { volunteers: { open: 2 }, workers: 4 },
});

test('a snapshot replaces everything, sorts events by seq, and keys coverage by model', () => {
  const s = applySnapshot(emptyState(), snapshot(), 500);
  assert.equal(s.loaded, true);
  assert.equal(s.receivedAtMs, 500);
  assert.equal(s.hubAtMs, 10_000);
  assert.deepEqual(
    s.models.map((m) => m.model),
    ['a', 'b'],
  );
  assert.equal(s.history.a?.length, 2);
  assert.deepEqual(s.history.b, []);
  assert.deepEqual(
    s.events.map((e) => e.seq),
    [1, 2, 3],
  );
  assert.deepEqual(Object.keys(s.coverage), ['a']);
  assert.equal(s.adminEnabled, true);
  // A reconnect's snapshot: the old models, history and events are gone.
  const again = applySnapshot(
    s,
    snapshot({ models: [status('c')], history: { c: [sample(20_000)] }, events: [], coverage: [], adminEnabled: false }),
    900,
  );
  assert.deepEqual(Object.keys(again.history), ['c']);
  assert.deepEqual(again.events, []);
  assert.deepEqual(again.coverage, {});
  assert.equal(again.adminEnabled, false);
});

test('a snapshot longer than HISTORY_SAMPLES is cut to the newest', () => {
  const long = Array.from({ length: HISTORY_SAMPLES + 50 }, (_, i) => sample(i * 1000));
  const s = applySnapshot(emptyState(), snapshot({ history: { a: long, b: [] } }), 0);
  assert.equal(s.history.a?.length, HISTORY_SAMPLES);
  assert.equal(s.history.a?.[0]?.t, 50_000);
});

test('ticks append one sample per model, bounded at HISTORY_SAMPLES, and replace the numbers', () => {
  let s = applySnapshot(emptyState(), snapshot(), 0);
  for (let i = 1; i <= HISTORY_SAMPLES + 5; i++) s = applyTick(s, tick(10_000 + i * 1000), i * 1000);
  assert.equal(s.history.a?.length, HISTORY_SAMPLES, 'bounded');
  assert.equal(s.history.b?.length, HISTORY_SAMPLES);
  assert.equal(s.history.a?.at(-1)?.t, 10_000 + (HISTORY_SAMPLES + 5) * 1000, 'newest last');
  assert.equal(s.models[0]?.busy, 3);
  assert.equal(s.totals.workers, 4);
  assert.equal(s.receivedAtMs, (HISTORY_SAMPLES + 5) * 1000);
});

test('a tick before the snapshot, or older than the state, changes nothing', () => {
  const empty = emptyState();
  assert.equal(applyTick(empty, tick(1), 1), empty, 'no snapshot yet');
  const s = applySnapshot(emptyState(), snapshot(), 0);
  assert.equal(applyTick(s, tick(9_999), 1), s, 'late delivery');
});

test('a model that leaves loses its history and heatmap; a model that arrives starts empty', () => {
  let s = applySnapshot(emptyState(), snapshot(), 0);
  s = applyTick(s, tick(11_000, [status('a'), status('new')], { a: sample(11_000) }), 1000);
  assert.deepEqual(Object.keys(s.history).sort(), ['a', 'new']);
  assert.deepEqual(s.history.new, []);
  assert.equal(s.history.a?.length, 3);
  s = applyTick(s, tick(12_000, [status('new')]), 2000);
  assert.deepEqual(Object.keys(s.coverage), [], 'a left: its heatmap goes');
});

test('events: each seq once, newest last, bounded at EVENTS_KEPT', () => {
  let s = applySnapshot(emptyState(), snapshot(), 0);
  s = applyEvent(s, ev(4));
  assert.equal(applyEvent(s, ev(4)), s, 'a repeated seq is ignored');
  assert.equal(applyEvent(s, ev(2)), s, 'an older seq is ignored');
  for (let i = 5; i < 5 + EVENTS_KEPT; i++) s = applyEvent(s, ev(i));
  assert.equal(s.events.length, EVENTS_KEPT);
  assert.equal(s.events.at(-1)?.seq, 4 + EVENTS_KEPT);
  assert.equal(applyEvent(emptyState(), ev(1)).events.length, 0, 'nothing before the snapshot');
});

test('coverage: a newer map replaces, an older one is ignored', () => {
  let s = applySnapshot(emptyState(), snapshot(), 0);
  const newer = coverage('a', 11_000, [1, 1, 1, 1]);
  s = applyCoverage(s, newer);
  assert.equal(s.coverage.a, newer);
  assert.equal(applyCoverage(s, coverage('a', 10_500, [0, 0, 0, 0])), s);
  s = applyCoverage(s, coverage('b', 1, [0, 0]));
  assert.deepEqual(Object.keys(s.coverage).sort(), ['a', 'b']);
});

test('stale after STALE_AFTER_MS without a tick, and live again on the next', () => {
  assert.equal(staleSince(emptyState(), 1e9), null, 'not before the first snapshot');
  let s = applySnapshot(emptyState(), snapshot(), 1000);
  assert.equal(staleSince(s, 1000 + STALE_AFTER_MS), null, 'exactly at the limit: still live');
  assert.equal(staleSince(s, 1001 + STALE_AFTER_MS), 1000, 'past it: stale since the last arrival');
  s = applyTick(s, tick(11_000), 9000);
  assert.equal(staleSince(s, 9500), null);
  assert.match(staleMessage(new Date(2026, 0, 1, 8, 5, 9).getTime()), /^Stale since 08:05:09: /);
});

test('the hub clock: the page clock shifted by the skew seen at the last message', () => {
  assert.equal(hubNow(emptyState(), 5000), 5000, 'before a message: the page clock');
  // The hub is 2 s ahead of the page: a snapshot stamped 10 000 arrives at page time 8 000.
  const s = applySnapshot(emptyState(), snapshot({ atMs: 10_000 }), 8000);
  assert.equal(hubNow(s, 8500), 10_500);
  assert.equal(formatAgo(10_000, hubNow(s, 12_000)), '4 s ago');
});

test('the event filter: newest first, by kind and model, bounded', () => {
  const events = [
    ev(1, 'recruit', 'a'),
    ev(2, 'release', 'a'),
    ev(3, 'recruit', 'b'),
    ev(4, 'saturation-onset', 'a'),
    ev(5, 'evict', null),
  ];
  const seqs = (f: Parameters<typeof filterEvents>[1], limit = 100): number[] => filterEvents(events, f, limit).map((e) => e.seq);
  assert.deepEqual(seqs({ kind: '', model: '' }), [5, 4, 3, 2, 1]);
  assert.deepEqual(seqs({ kind: 'recruit', model: '' }), [3, 1]);
  assert.deepEqual(seqs({ kind: '', model: 'a' }), [4, 2, 1]);
  assert.deepEqual(seqs({ kind: 'recruit', model: 'b' }), [3]);
  assert.deepEqual(seqs({ kind: '', model: '' }, 2), [5, 4]);
  assert.deepEqual(seqs({ kind: 'quarantine', model: '' }), []);
});

test('chart columns: seconds on x, one column per series, nulls kept as gaps', () => {
  const h = [sample(1000), sample(2000, { rttP50Ms: null, rttP99Ms: null, tokensPerS: null })];
  const latency = CHARTS.find((c) => c.group === 'latency')!;
  assert.deepEqual(chartColumns(h, latency), [
    [1, 2],
    [12, null],
    [40, null],
  ]);
  const pairs = CHARTS.find((c) => c.group === 'pairs')!;
  assert.deepEqual(
    pairs.series.map((s) => s.label),
    ['served', 'fallback', 'late'],
  );
  assert.deepEqual(chartColumns(h, pairs).slice(1), [
    [10, 10],
    [1, 1],
    [0, 0],
  ]);
  const ws = CHARTS.find((c) => c.group === 'workers')!;
  assert.deepEqual(
    ws.series.map((s) => s.label),
    ['grace', 'proven', 'idle', 'released', 'quarantined'],
  );
  assert.deepEqual(latestValues(h, latency), [
    { label: 'p50', value: '—' },
    { label: 'p99', value: '—' },
  ]);
  assert.deepEqual(latestValues([sample(1)], CHARTS.find((c) => c.group === 'tokens')!), [{ label: 'tokens/s', value: '8.50 tokens/s' }]);
  assert.deepEqual(
    CHARTS.map((c) => c.group),
    ['slots', 'workers', 'pairs', 'latency', 'tokens'],
  );
});

test('formatting: coordinator states, durations, ages', () => {
  assert.equal(coordinatorLabel('ready'), 'up');
  assert.equal(coordinatorLabel('restarting'), 'restarting');
  assert.equal(coordinatorLabel('external'), 'external');
  assert.equal(formatMs(null), '—');
  assert.equal(formatMs(3.25), '3.3 ms');
  assert.equal(formatMs(250.4), '250 ms');
  assert.equal(formatMs(12_345), '12.3 s');
  assert.equal(formatAgo(null, 0), 'never');
  assert.equal(formatAgo(1000, 5000), '4 s ago');
  assert.equal(formatAgo(0, 300_000), '5 min ago');
  assert.deepEqual(keepLast([1, 2, 3], 2), [2, 3]);
});
