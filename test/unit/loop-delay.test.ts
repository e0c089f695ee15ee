import assert from 'node:assert/strict';
import { test } from 'node:test';
import { addedMs, loopDelay } from '../../bench/loop-delay.ts';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

test('addedMs: a raw reading less the probe timer’s own interval (table)', () => {
  // An idle loop at resolution 5 reads ≈ 5.15 ms raw on Node 20: 0.15 ms added.
  for (const [raw, res, want] of [
    [5.15e6, 5, 0.15],
    [4.2e6, 5, 0],
    [12e6, 10, 2],
    [45e6, 5, 40],
  ] as const)
    assert.ok(Math.abs(addedMs(raw, res) - want) < 1e-9, `${raw} ns at ${res} ms: ${addedMs(raw, res)} ≠ ${want}`);
});

test('loopDelay: a loop held 40 ms shows as at least 30 ms added', async () => {
  const loop = loopDelay(5);
  await sleep(20);
  const t0 = performance.now();
  while (performance.now() - t0 < 40); // the loop held
  await sleep(30);
  loop.stop();
  assert.ok(loop.maxMs() >= 30, `max added ${loop.maxMs().toFixed(1)} ms`);
  assert.ok(loop.ms(50) <= loop.maxMs());
});
