import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isHubError } from '../../hub/errors.ts';
import {
  DEFAULT_SATURATION,
  effectiveTarget,
  parseMetricsProcessing,
  parseSlots,
  saturationState,
  type SaturationCode,
  type SlotsReading,
} from '../../hub/market/saturation.ts';
import { COORDINATOR_SLOTS_MAX } from '../../hub/limits.ts';

const cfg = DEFAULT_SATURATION;
const reading = (busy: number | null, atMs = 0, source: SlotsReading['source'] = 'slots', slots: number | null = 4): SlotsReading => ({
  atMs,
  busy,
  slots,
  source,
});

test('saturationState: saturated at busy ≥ 2, recruiting only while the reading is fresh and known', () => {
  const table: Array<{
    name: string;
    r: SlotsReading | undefined;
    now: number;
    saturated: boolean;
    recruiting: boolean;
    ageS: number | null;
    code: SaturationCode;
  }> = [
    { name: 'no reading', r: undefined, now: 0, saturated: false, recruiting: false, ageS: null, code: 'no-reading' },
    { name: 'idle', r: reading(0), now: 1000, saturated: false, recruiting: false, ageS: 1, code: 'not-saturated' },
    { name: 'busy 1', r: reading(1), now: 0, saturated: false, recruiting: false, ageS: 0, code: 'not-saturated' },
    { name: 'busy 2', r: reading(2), now: 0, saturated: true, recruiting: true, ageS: 0, code: 'recruiting' },
    { name: 'busy 4 at 30 s', r: reading(4), now: 30_000, saturated: true, recruiting: true, ageS: 30, code: 'recruiting' },
    { name: 'busy 4 at 30.001 s: stale', r: reading(4), now: 30_001, saturated: true, recruiting: false, ageS: 30, code: 'reading-stale' },
    { name: 'busy 4 at 45 s: stale', r: reading(4), now: 45_000, saturated: true, recruiting: false, ageS: 45, code: 'reading-stale' },
    {
      name: 'metrics source recruits',
      r: reading(3, 0, 'metrics', null),
      now: 2000,
      saturated: true,
      recruiting: true,
      ageS: 2,
      code: 'recruiting',
    },
    {
      name: 'unknown source never recruits',
      r: reading(null, 0, 'unknown', null),
      now: 0,
      saturated: false,
      recruiting: false,
      ageS: 0,
      code: 'source-unknown',
    },
    {
      name: 'unknown with a busy count',
      r: reading(9, 0, 'unknown'),
      now: 0,
      saturated: true,
      recruiting: false,
      ageS: 0,
      code: 'source-unknown',
    },
    { name: 'slots without busy', r: reading(null), now: 0, saturated: false, recruiting: false, ageS: 0, code: 'no-busy-count' },
    { name: 'reading from the future', r: reading(2, 5000), now: 0, saturated: true, recruiting: true, ageS: 0, code: 'recruiting' },
  ];
  for (const t of table) {
    const s = saturationState(t.r, t.now, cfg);
    assert.equal(s.saturated, t.saturated, t.name);
    assert.equal(s.recruiting, t.recruiting, t.name);
    assert.equal(s.ageS, t.ageS, t.name);
    assert.equal(s.code, t.code, t.name);
    assert.ok(s.reason.length > 0, `${t.name}: a sentence says why`);
    assert.equal(s.busy, t.r?.busy ?? null, t.name);
  }
  assert.equal(saturationState(reading(2), 0, { ...cfg, saturateAt: 3 }).recruiting, false);
});

test('target: base 2, boosted to 3 while saturated, back to base when busy drops or the reading goes stale', () => {
  const target = (r: SlotsReading | undefined, now: number) => effectiveTarget(cfg, saturationState(r, now, cfg).recruiting);
  const timeline: Array<[label: string, r: SlotsReading | undefined, now: number, want: number]> = [
    ['before any reading', undefined, 0, 2],
    ['quiet', reading(1, 0), 0, 2],
    ['spike', reading(3, 2000), 2000, 3],
    ['spike, reading 10 s old', reading(3, 2000), 12_000, 3],
    ['spike ends', reading(0, 14_000), 14_000, 2],
    ['spike again', reading(2, 16_000), 16_000, 3],
    ['poller lost the coordinator: reading 30 s old', reading(2, 16_000), 46_000, 3],
    ['… 31 s old', reading(2, 16_000), 47_000, 2],
  ];
  for (const [label, r, now, want] of timeline) assert.equal(target(r, now), want, label);
  assert.equal(effectiveTarget({ ...cfg, targetBase: 3, boost: 2 }, true), 5);
});

test('parseSlots: counts is_processing, throws on anything else', () => {
  const slots = [
    { id: 0, is_processing: true, n_ctx: 4096 },
    { id: 1, is_processing: false },
    { id: 2, is_processing: true, extra: {} },
  ];
  assert.deepEqual(parseSlots(slots), { busy: 2, slots: 3 });
  assert.deepEqual(parseSlots([]), { busy: 0, slots: 0 });
  assert.equal(parseSlots(Array.from({ length: COORDINATOR_SLOTS_MAX }, () => ({ is_processing: false }))).slots, COORDINATOR_SLOTS_MAX);
  const bad: unknown[] = [
    null,
    {},
    'slots',
    3,
    [null],
    [1],
    [[true]],
    [{ id: 0 }],
    [{ is_processing: 1 }],
    [{ is_processing: 'true' }],
    [{ is_processing: true }, { state: 1 }],
    Array.from({ length: COORDINATOR_SLOTS_MAX + 1 }, () => ({ is_processing: false })),
  ];
  for (const b of bad) {
    assert.throws(
      () => parseSlots(b),
      (e) => isHubError(e, 'COORDINATOR_ERROR'),
      JSON.stringify(b)?.slice(0, 60),
    );
  }
});

test('parseMetricsProcessing: reads llamacpp:requests_processing from Prometheus text', () => {
  const text = [
    '# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.',
    '# TYPE llamacpp:prompt_tokens_total counter',
    'llamacpp:prompt_tokens_total 123',
    '# HELP llamacpp:requests_processing Number of requests processing.',
    '# TYPE llamacpp:requests_processing gauge',
    'llamacpp:requests_processing 2',
    'llamacpp:requests_deferred 5',
  ].join('\n');
  const table: Array<[string, number | null]> = [
    [text, 2],
    ['llamacpp:requests_processing 0\n', 0],
    ['llamacpp:requests_processing 3.0 1700000000000', 3],
    ['llamacpp:requests_processing{slot="0"} 1\r\nllamacpp:requests_processing{slot="1"} 1\r\n', 2],
    ['llamacpp:requests_processing_total 7', null],
    ['# TYPE llamacpp:requests_processing gauge', null],
    ['', null],
    ['llamacpp:requests_deferred 4', null],
  ];
  for (const [t, want] of table) assert.equal(parseMetricsProcessing(t), want, JSON.stringify(t).slice(0, 60));
  for (const t of [
    'llamacpp:requests_processing',
    'llamacpp:requests_processing abc',
    'llamacpp:requests_processing -1',
    'llamacpp:requests_processing NaN',
    'llamacpp:requests_processing +Inf',
  ]) {
    assert.throws(
      () => parseMetricsProcessing(t),
      (e) => isHubError(e, 'COORDINATOR_ERROR'),
      t,
    );
  }
});
