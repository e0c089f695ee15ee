/** The workers table's filter, sort and paging (hub/dashboard/workers.ts) and the history ring (history.ts). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { queryWorkers, sortedMatches, WorkersTable } from '../../hub/dashboard/workers.ts';
import { History, SampleRing } from '../../hub/dashboard/history.ts';
import {
  DEFAULT_WORKERS_QUERY,
  HISTORY_SAMPLES,
  WORKER_STATES,
  type Sample,
  type WorkerRow,
  type WorkersQuery,
} from '../../protocol/dashboard.ts';

function row(id: string, over: Partial<WorkerRow> = {}): WorkerRow {
  return {
    id,
    model: 'm',
    slice: [1, 0, 8],
    state: 'proven',
    backend: 'webgpu',
    device: '',
    gflops: null,
    lastServeMs: null,
    latencyMs: null,
    pairsServed: 0,
    trust: '',
    benched: false,
    credit: null,
    ...over,
  };
}

const ROWS: WorkerRow[] = [
  row('w3', {
    model: 'a',
    slice: [2, 0, 4],
    state: 'grace',
    backend: 'wasm',
    device: 'Chrome on Linux',
    latencyMs: 12,
    pairsServed: 5,
    credit: 10,
  }),
  row('w1', {
    model: 'b',
    slice: [1, 8, 16],
    state: 'proven',
    backend: 'webgpu',
    device: 'NVIDIA RTX 4090',
    latencyMs: 3,
    pairsServed: 50,
  }),
  row('w2', { model: 'a', slice: [1, 0, 8], state: 'loading', backend: null, device: '', pairsServed: 0, credit: 3 }),
  row('W10', {
    model: 'a',
    slice: null,
    state: 'quarantined',
    backend: 'native',
    latencyMs: 40,
    lastServeMs: 1000,
    pairsServed: 50,
    credit: 99,
  }),
  row('w4', {
    model: 'b',
    slice: [1, 0, 8],
    state: 'idle',
    backend: 'webgpu',
    device: 'Apple M2',
    latencyMs: 3,
    lastServeMs: 500,
    credit: 10,
  }),
];

const q = (over: Partial<WorkersQuery>): WorkersQuery => ({ ...DEFAULT_WORKERS_QUERY, ...over });
const ids = (over: Partial<WorkersQuery>): string[] => queryWorkers(ROWS, q(over)).rows.map((r) => r.id);

test('queryWorkers: every sort key both ways, empty values last either way, ties by id', () => {
  const table: Array<[Partial<WorkersQuery>, string[]]> = [
    [{}, ['W10', 'w1', 'w2', 'w3', 'w4']], // code-unit order: upper case first
    [{ dir: 'desc' }, ['w4', 'w3', 'w2', 'w1', 'W10']],
    [{ sort: 'model' }, ['W10', 'w2', 'w3', 'w1', 'w4']],
    [{ sort: 'model', dir: 'desc' }, ['w1', 'w4', 'W10', 'w2', 'w3']],
    [{ sort: 'layer' }, ['w2', 'w4', 'w1', 'w3', 'W10']], // layer 1 [0, …) w2 and w4 by id, then layer 1 [8, …), then layer 2
    [{ sort: 'state' }, ['w2', 'w3', 'w1', 'w4', 'W10']], // lifecycle order, not alphabetical
    [{ sort: 'state', dir: 'desc' }, ['W10', 'w4', 'w1', 'w3', 'w2']],
    [{ sort: 'backend' }, ['W10', 'w3', 'w1', 'w4', 'w2']], // native < wasm < webgpu, null last
    [{ sort: 'backend', dir: 'desc' }, ['w1', 'w4', 'w3', 'W10', 'w2']],
    [{ sort: 'latency' }, ['w1', 'w4', 'w3', 'W10', 'w2']],
    [{ sort: 'latency', dir: 'desc' }, ['W10', 'w3', 'w1', 'w4', 'w2']],
    [{ sort: 'lastServe' }, ['w4', 'W10', 'w1', 'w2', 'w3']],
    [{ sort: 'lastServe', dir: 'desc' }, ['W10', 'w4', 'w1', 'w2', 'w3']],
    [{ sort: 'pairs', dir: 'desc' }, ['W10', 'w1', 'w3', 'w2', 'w4']],
    [{ sort: 'credit' }, ['w2', 'w3', 'w4', 'W10', 'w1']],
    [{ sort: 'credit', dir: 'desc' }, ['W10', 'w3', 'w4', 'w2', 'w1']],
  ];
  for (const [over, want] of table) assert.deepEqual(ids(over), want, JSON.stringify(over));
});

test('queryWorkers: filters by model, state and a case-insensitive needle in id, device or backend', () => {
  const table: Array<[Partial<WorkersQuery>, string[]]> = [
    [{ model: 'a' }, ['W10', 'w2', 'w3']],
    [{ model: 'nope' }, []],
    [{ state: 'proven' }, ['w1']],
    [{ state: 'released' }, []],
    [{ model: 'b', state: 'idle' }, ['w4']],
    [{ q: 'w1' }, ['W10', 'w1']], // w1 and W10 (its id contains "w1" in any case)
    [{ q: 'nvidia' }, ['w1']],
    [{ q: 'APPLE' }, ['w4']],
    [{ q: 'wasm' }, ['w3']],
    [{ q: 'native' }, ['W10']],
    [{ q: 'linux', model: 'b' }, []],
    [{ q: 'zzz' }, []],
  ];
  for (const [over, want] of table) assert.deepEqual(ids(over), want, JSON.stringify(over));
});

test('queryWorkers: pages count every match and keep one order across pages', () => {
  const rows = Array.from({ length: 250 }, (_, i) => row(`w${String(i).padStart(3, '0')}`, { pairsServed: i % 7 }));
  const all: string[] = [];
  for (let offset = 0; offset < 250; offset += 100) {
    const page = queryWorkers(rows, q({ sort: 'pairs', offset, limit: 100 }));
    assert.equal(page.total, 250);
    assert.equal(page.offset, offset);
    assert.equal(page.rows.length, Math.min(100, 250 - offset));
    all.push(...page.rows.map((r) => r.id));
  }
  assert.equal(new Set(all).size, 250, 'no row twice, none missing');
  const pairs = all.map((id) => Number(id.slice(1)) % 7);
  assert.deepEqual(
    pairs,
    [...pairs].sort((a, b) => a - b),
  );
  const past = queryWorkers(rows, q({ offset: 1000 }));
  assert.deepEqual([past.total, past.rows.length], [250, 0]);
  assert.deepEqual(rows.map((r) => r.id).slice(0, 3), ['w000', 'w001', 'w002'], 'the input is not reordered');
});

test('sortedMatches: states rank in WORKER_STATES order, either direction', () => {
  const rows = [...WORKER_STATES].reverse().map((state, i) => row(`x${i}`, { state }));
  const by = (dir: 'asc' | 'desc'): string[] => sortedMatches(rows, q({ sort: 'state', dir })).map((r) => r.state);
  assert.deepEqual(by('asc'), [...WORKER_STATES]);
  assert.deepEqual(by('desc'), [...WORKER_STATES].reverse());
});

test('queryWorkers: 10,000 rows sort and page in a few milliseconds', (t) => {
  const states = WORKER_STATES;
  const rows = Array.from({ length: 10_000 }, (_, i) =>
    row(`worker-${(i * 7919) % 10_000}`, {
      state: states[i % states.length] as WorkerRow['state'],
      latencyMs: i % 5 === 0 ? null : (i * 31) % 500,
      pairsServed: (i * 13) % 1000,
      device: i % 2 ? 'Chrome' : 'Firefox',
    }),
  );
  const times: number[] = [];
  queryWorkers(rows, q({ sort: 'state' })); // warm up the JIT: a hub answers many of these
  for (const sort of ['id', 'latency', 'pairs', 'state'] as const) {
    const t0 = performance.now();
    const page = queryWorkers(rows, q({ sort, dir: 'desc', offset: 5000, limit: 500, q: 'worker' }));
    times.push(performance.now() - t0);
    assert.equal(page.total, 10_000);
    assert.equal(page.rows.length, 500);
  }
  t.diagnostic(`10,000 rows: ${times.map((ms) => ms.toFixed(1)).join(' / ')} ms (id / latency / pairs / state)`);
});

test('WorkersTable: rows rebuilt at most once per maxAgeMs, one sort per query, pages sliced; invalidate rebuilds', () => {
  let builds = 0;
  let rows = ROWS;
  const clock = { now: 0 };
  const table = new WorkersTable(
    () => {
      builds++;
      return rows;
    },
    1000,
    () => clock.now,
  );
  assert.deepEqual(
    table.page(q({ limit: 2 })).rows.map((r) => r.id),
    ['W10', 'w1'],
  );
  assert.deepEqual(
    table.page(q({ offset: 2, limit: 2 })).rows.map((r) => r.id),
    ['w2', 'w3'],
  );
  assert.equal(builds, 1);
  rows = [...ROWS, row('w0')];
  clock.now = 1000;
  assert.equal(table.page(q({})).total, 5, 'still the rows of t=0: at most maxAgeMs old');
  clock.now = 1001;
  assert.equal(table.page(q({})).total, 6, 'rebuilt past maxAgeMs');
  assert.equal(builds, 2);
  rows = ROWS;
  table.invalidate();
  assert.equal(table.page(q({})).total, 5);
  clock.now = 500;
  assert.equal(table.page(q({ sort: 'pairs' })).total, 5, 'a clock that went back rebuilds');
  assert.equal(builds, 4);
  assert.deepEqual(
    table.page(q({ state: 'idle' })).rows.map((r) => r.id),
    ['w4'],
    'a new filter on the same rows',
  );
  assert.equal(builds, 4);
});

test('SampleRing: O(1) pushes, oldest first, never more than capacity', () => {
  const r = new SampleRing<number>(3);
  assert.deepEqual([r.toArray(), r.last(), r.size], [[], undefined, 0]);
  const table: Array<[push: number, want: number[]]> = [
    [1, [1]],
    [2, [1, 2]],
    [3, [1, 2, 3]],
    [4, [2, 3, 4]],
    [5, [3, 4, 5]],
    [6, [4, 5, 6]],
    [7, [5, 6, 7]],
  ];
  for (const [v, want] of table) {
    r.push(v);
    assert.deepEqual(r.toArray(), want);
    assert.equal(r.last(), v);
    assert.equal(r.size, want.length);
  }
  assert.throws(() => new SampleRing(0), RangeError);
});

test('History: one ring per model, HISTORY_SAMPLES (15 minutes of ticks) each', () => {
  assert.equal(HISTORY_SAMPLES, 900);
  const h = new History(HISTORY_SAMPLES);
  const sample = (t: number): Sample => ({
    t,
    busy: 0,
    slots: 1,
    effectiveTarget: 2,
    workers: { loading: 0, joining: 0, grace: 0, proven: 0, idle: 0, released: 0, quarantined: 0 },
    pairsPerS: { served: 0, fallback: 0, late: 0, rejected: 0 },
    rttP50Ms: null,
    rttP99Ms: null,
    tokensPerS: null,
  });
  for (let t = 0; t < 1000; t++) h.push('a', sample(t));
  h.push('b', sample(5));
  const all = h.all();
  assert.deepEqual(Object.keys(all).sort(), ['a', 'b']);
  assert.equal(all.a?.length, 900);
  assert.deepEqual([all.a?.[0]?.t, all.a?.[899]?.t], [100, 999]);
  assert.deepEqual(
    all.b?.map((s) => s.t),
    [5],
  );
  assert.equal(all.c, undefined, 'a model never pushed has no ring');
});
