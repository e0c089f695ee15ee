/**
 * The kernel sweep's pure half (scripts/sweep-plan.ts): its grids hold the runtime's defaults and only tunings the
 * runtime accepts, the threshold it suggests from decode-vs-batched points, the best-config picks and the rates.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { validateTuning } from '../../shaders/expert-ffn.ts';
import {
  DEFAULT_BATCHED,
  DEFAULT_DECODE,
  batchedName,
  batchedValid,
  bestOverall,
  bestPerRows,
  decodeName,
  rates,
  suggestThreshold,
  sweepPlan,
  type Measurement,
} from '../../scripts/sweep-plan.ts';

/** Limits of a typical discrete GPU (the WebGPU defaults raised where GPUs do). */
const LIMITS = {
  maxComputeInvocationsPerWorkgroup: 1024,
  maxComputeWorkgroupSizeX: 1024,
  maxComputeWorkgroupStorageSize: 32768,
} as GPUSupportedLimits;

test('sweep grids: the defaults are in, and every batched tuning passes validateTuning', () => {
  for (const quick of [false, true]) {
    const p = sweepPlan(quick);
    assert.ok(p.decode.some((c) => decodeName(c) === decodeName(DEFAULT_DECODE)));
    assert.ok(p.batched.some((c) => batchedName(c) === batchedName(DEFAULT_BATCHED)));
    for (const c of p.batched) {
      assert.ok(batchedValid(c), batchedName(c));
      const t = { ...c, rowsPerWorkgroup: 1 };
      // Workgroup memory is the device's business (the sweep records a refusal as skipped); the tile rules must hold.
      try {
        validateTuning(t, LIMITS);
      } catch (e) {
        assert.match((e as Error).message, /workgroup memory/, batchedName(c));
      }
    }
    for (const c of p.decode) validateTuning({ ...c, tileRows: 16, tileCols: Math.min(32, c.workgroupSize) }, LIMITS);
  }
  assert.ok(!batchedValid({ workgroupSize: 64, tileRows: 8, tileCols: 4 }), 'stride 16 > 8 tile rows');
  assert.ok(!batchedValid({ workgroupSize: 64, tileRows: 16, tileCols: 128 }), 'more columns than threads');
});

test('suggestThreshold: from where batched wins for good', () => {
  const p = (pairsPerExpert: number, decodeMs: number, batchedMs: number) => ({
    rows: pairsPerExpert,
    pairsPerExpert,
    decodeMs,
    batchedMs,
  });
  assert.equal(suggestThreshold([p(1, 1, 2), p(2, 2, 2.5), p(4, 4, 3), p(8, 8, 4)]), 4);
  assert.equal(suggestThreshold([p(1, 1, 0.5), p(2, 2, 1)]), 1, 'batched always wins');
  assert.equal(suggestThreshold([p(1, 1, 2), p(2, 1, 0.5), p(4, 1, 2)]), Infinity, 'decode wins at the largest point');
  assert.equal(suggestThreshold([]), Infinity);
});

test('best configs: per row count by kernel time (wall without it), and overall by geometric mean', () => {
  const m = (config: string, rows: number, kernelMs: number | null, wallMs = 10): Measurement => ({
    regime: 'decode',
    config,
    rows,
    pairsPerExpert: rows,
    wallMs,
    kernelMs,
    weightBytes: 1e6,
    flops: 1e9,
    nmseVsDefault: 0,
  });
  const ms = [m('a', 1, 1), m('b', 1, 2), m('a', 4, 4), m('b', 4, 2.5), m('c', 1, null, 0.5)];
  assert.deepEqual(
    bestPerRows(ms, 'decode').map((x) => [x.rows, x.config]),
    [
      [1, 'c'],
      [4, 'b'],
    ],
  );
  // c misses 4 rows: out. a: (1/0.5 · 4/2.5)^½ = 1.79; b: (2/0.5 · 1)^½ = 2.
  assert.equal(bestOverall(ms, 'decode')?.config, 'a');
  const r = rates(m('a', 1, 1), 2, { bandwidthGbs: 1000, peakTflops: 10 });
  assert.equal(r.gbs, 0.5);
  assert.equal(r.gflops, 500);
  assert.equal(r.bandwidthPct, 0.05);
  assert.equal(r.peakPct, 5);
});
