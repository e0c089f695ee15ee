/** The dashboard's tick arithmetic (hub/dashboard/rates.ts, generation.ts, sampler.ts buildSample) as table tests. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  type CounterReading,
  counterRate,
  pairRates,
  RoundTripReservoir,
  roundTripPercentiles,
  tokensPerSecond,
} from '../../hub/dashboard/rates.ts';
import { decodingTokens, generatedTokens, parseTokensPredicted } from '../../hub/dashboard/generation.ts';
import { buildSample, type ModelReading } from '../../hub/dashboard/sampler.ts';
import type { ModelStatus } from '../../protocol/dashboard.ts';

test('roundTripPercentiles: the nearest rank over unsorted values; null for none', () => {
  const table: Array<[values: number[], want: { p50: number | null; p99: number | null }]> = [
    [[], { p50: null, p99: null }],
    [[7], { p50: 7, p99: 7 }],
    [[5, 1, 3], { p50: 3, p99: 5 }],
    [[1, 2, 3, 4], { p50: 2, p99: 4 }],
    [Array.from({ length: 100 }, (_, i) => 100 - i), { p50: 50, p99: 99 }],
    [Array.from({ length: 1000 }, (_, i) => i), { p50: 499, p99: 989 }],
    [[2, 2, 2, 10], { p50: 2, p99: 10 }],
  ];
  for (const [values, want] of table) assert.deepEqual(roundTripPercentiles(values), want, `${values.length} values`);
  const input = [3, 1, 2];
  roundTripPercentiles(input);
  assert.deepEqual(input, [3, 1, 2], 'the input is not sorted in place');
});

test('roundTripPercentiles: p50 and p99 of one tick, rounded to 0.01 ms', () => {
  assert.deepEqual(roundTripPercentiles([]), { p50: null, p99: null });
  assert.deepEqual(roundTripPercentiles([12.3456]), { p50: 12.35, p99: 12.35 });
  const many = Float64Array.from({ length: 200 }, (_, i) => (i < 197 ? 10 : 500));
  assert.deepEqual(
    roundTripPercentiles(many),
    { p50: 10, p99: 500 },
    'the 3 slow ones of 200 are more than the top 1%: p99 is one of them',
  );
  const two = Float64Array.from({ length: 200 }, (_, i) => (i < 198 ? 10 : 500));
  assert.deepEqual(roundTripPercentiles(two), { p50: 10, p99: 10 }, '2 of 200 are exactly the top 1%: the 198th value is p99');
});

test('counterRate and tokensPerSecond: per second from deltas; none without two readings, for a reset, or when stale', () => {
  const r = (atMs: number, value: number): CounterReading => ({ atMs, value });
  const table: Array<[name: string, prev: CounterReading | undefined, cur: CounterReading | undefined, want: number | null]> = [
    ['no readings', undefined, undefined, null],
    ['one reading', undefined, r(1000, 10), null],
    ['10 per s', r(0, 10), r(2000, 30), 10],
    ['fractional', r(0, 0), r(3000, 1), 0.33],
    ['idle', r(0, 50), r(2000, 50), 0],
    ['reset (restart)', r(0, 500), r(2000, 20), null],
    ['no time passed', r(1000, 1), r(1000, 5), null],
    ['clock stepped back', r(2000, 1), r(1000, 5), null],
  ];
  for (const [name, prev, cur, want] of table) assert.equal(counterRate(prev, cur), want, name);
  assert.equal(tokensPerSecond(r(0, 0), r(2000, 100), 2500, 5000), 50);
  assert.equal(tokensPerSecond(r(0, 0), r(2000, 100), 7001, 5000), null, 'a reading older than maxAgeMs gives no rate');
  assert.equal(tokensPerSecond(undefined, undefined, 0, 5000), null);
});

test('pairRates: pairs per second by outcome; zeros without a previous reading or after a reset', () => {
  const a = { served: 100, fallback: 50, late: 2, rejected: 0 };
  const b = { served: 300, fallback: 51, late: 4, rejected: 1 };
  assert.deepEqual(pairRates(a, b, 2000), { served: 100, fallback: 0.5, late: 1, rejected: 0.5 });
  assert.deepEqual(pairRates(undefined, b, 1000), { served: 0, fallback: 0, late: 0, rejected: 0 });
  assert.deepEqual(pairRates(a, null, 1000), { served: 0, fallback: 0, late: 0, rejected: 0 }, 'no dispatcher');
  assert.deepEqual(pairRates(b, a, 1000), { served: 0, fallback: 0, late: 0, rejected: 0 }, 'counters went back');
  assert.deepEqual(pairRates(a, b, 0), { served: 0, fallback: 0, late: 0, rejected: 0 });
});

test('RoundTripReservoir: keeps everything up to capacity, a bounded uniform sample beyond, starts over on drain', () => {
  const small = new RoundTripReservoir(4, () => 0.99);
  for (const v of [1, 2, 3]) small.add(v);
  small.add(Number.NaN);
  small.add(-1);
  assert.deepEqual([...small.drain()], [1, 2, 3], 'non-finite and negative round trips are ignored');
  assert.equal(small.count, 0);
  assert.deepEqual([...small.drain()], []);

  let i = 0;
  const seq = [0, 0.5, 0.99];
  const r = new RoundTripReservoir(2, () => seq[i++ % seq.length] as number);
  for (const v of [10, 20, 30, 40, 50]) r.add(v);
  assert.equal(r.count, 5);
  // 30: j = floor(0 × 3) = 0 replaces 10; 40: j = floor(0.5 × 4) = 2 ≥ 2 is dropped; 50: j = floor(0.99 × 5) = 4 dropped.
  assert.deepEqual([...r.drain()], [30, 20]);

  const big = new RoundTripReservoir(1000);
  for (let k = 0; k < 100_000; k++) big.add(k % 100);
  const kept = big.drain();
  assert.equal(kept.length, 1000, 'memory stays at capacity');
  const mean = kept.reduce((s, v) => s + v, 0) / kept.length;
  assert.ok(mean > 40 && mean < 59, `a uniform sample keeps the mean (~49.5), got ${mean}`);
});

test("generation: llama-server's tokens counter plus what busy slots decoded so far", () => {
  const metrics = [
    '# HELP llamacpp:tokens_predicted_total Number of generation tokens processed',
    '# TYPE llamacpp:tokens_predicted_total counter',
    'llamacpp:tokens_predicted_total 1234',
    'llamacpp:tokens_predicted_seconds_total 5.5',
    'llamacpp:requests_processing 2',
  ].join('\n');
  const table: Array<[text: string, want: number | null]> = [
    [metrics, 1234],
    ['', null],
    ['llamacpp:requests_processing 1', null],
    ['llamacpp:tokens_predicted_total{slot="0"} 10\nllamacpp:tokens_predicted_total{slot="1"} 5', 15],
    ['llamacpp:tokens_predicted_total 7 1700000000', 7],
    ['llamacpp:tokens_predicted_total -3', null],
    ['llamacpp:tokens_predicted_total NaN', null],
  ];
  for (const [text, want] of table) assert.equal(parseTokensPredicted(text), want, JSON.stringify(text.slice(-60)));

  const slots = [
    { id: 0, is_processing: true, next_token: [{ n_decoded: 40 }] },
    { id: 1, is_processing: false, next_token: [{ n_decoded: 99 }] }, // a finished request: already in the total
    { id: 2, is_processing: true, next_token: [{ n_decoded: 2 }] },
    { id: 3, is_processing: true },
  ];
  assert.equal(decodingTokens(slots), 42);
  assert.equal(decodingTokens([]), 0);
  assert.equal(decodingTokens({ slots }), null);
  assert.equal(decodingTokens([null]), null);
  assert.equal(decodingTokens(undefined), null);
  assert.equal(generatedTokens(1234, 42), 1276);
  assert.equal(generatedTokens(1234, null), 1234, '/slots unreadable: the finished requests only');
  assert.equal(generatedTokens(null, 42), null, 'no counter without /metrics');
});

test('buildSample: one tick of one model from its reading', () => {
  const status: ModelStatus = {
    model: 'm',
    coordinator: { state: 'ready', restarts: 0, lastExit: null, dispatchUnsupported: null },
    market: true,
    busy: 3,
    slots: 4,
    saturated: true,
    recruiting: true,
    baseTarget: 2,
    boost: 1,
    effectiveTarget: 3,
    dispatchMode: 'auto',
    dispatchConnected: true,
    workers: { loading: 1, joining: 0, grace: 2, proven: 3, idle: 0, released: 0, quarantined: 1 },
    shape: { nLayer: 2, nExpert: 8, moeLayers: [0, 1] },
  };
  const reading: ModelReading = {
    status,
    pairs: { served: 1000, fallback: 100, late: 10, rejected: 0 },
    roundTrips: [4, 8, 6],
    generation: { prev: { atMs: 8000, value: 100 }, cur: { atMs: 10_000, value: 180 } },
  };
  const s = buildSample(10_500, reading, { atMs: 9500, pairs: { served: 500, fallback: 100, late: 0, rejected: 0 } }, 5000);
  assert.deepEqual(s, {
    t: 10_500,
    busy: 3,
    slots: 4,
    effectiveTarget: 3,
    workers: status.workers,
    pairsPerS: { served: 500, fallback: 0, late: 10, rejected: 0 },
    rttP50Ms: 6,
    rttP99Ms: 8,
    tokensPerS: 40,
  });
  assert.notEqual(s.workers, status.workers, 'the sample owns its counts');
  const first = buildSample(10_500, { ...reading, roundTrips: [], pairs: null }, undefined, 5000);
  assert.deepEqual([first.pairsPerS, first.rttP50Ms, first.rttP99Ms], [{ served: 0, fallback: 0, late: 0, rejected: 0 }, null, null]);
});
