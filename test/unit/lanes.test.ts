import assert from 'node:assert/strict';
import { test } from 'node:test';
import { inLanes } from '../../hub/lanes.ts';

test('inLanes: every item once, started in order, at most width in flight', async () => {
  for (const [n, width] of [
    [0, 3],
    [1, 3],
    [7, 3],
    [5, 1],
    [4, 8],
  ] as const) {
    const started: number[] = [];
    let inFlight = 0;
    let most = 0;
    await inLanes(
      Array.from({ length: n }, (_, i) => i),
      width,
      async (i) => {
        started.push(i);
        most = Math.max(most, ++inFlight);
        await new Promise((r) => setTimeout(r, (i * 7) % 5));
        inFlight--;
      },
    );
    assert.deepEqual(
      started,
      Array.from({ length: n }, (_, i) => i),
      `n ${n} width ${width}`,
    );
    assert.equal(most, Math.min(n, width), `n ${n} width ${width}: lanes in flight`);
  }
});
