/**
 * The dashboard's workers table arithmetic (web/src/dashboard/workers-window.ts): which rows are in the DOM for a
 * scroll position, which rows one fetch asks the hub for, which cached blocks go, and how header clicks sort; and
 * the heatmap's (web/src/dashboard/heatmap.ts): colours, layout at 48 × 256, hit testing, keyboard, summary.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { WORKERS_PAGE_MAX } from '../../protocol/dashboard.ts';
import {
  AXIS_LEFT,
  AXIS_TOP,
  cellAt,
  cellColor,
  cellReadout,
  HEAT,
  heatLayout,
  labelStep,
  MIN_CELL,
  moveCursor,
  summarise,
  summarySentence,
} from '../../web/src/dashboard/heatmap.ts';
import {
  ariaSort,
  BLOCK_ROWS,
  blocksOf,
  blocksToForget,
  fetchPlan,
  formatSlice,
  formatSliceStats,
  formatSlices,
  nextSort,
  queryKey,
  rowWindow,
} from '../../web/src/dashboard/workers-window.ts';

const H = 36;

test('the row window: visible rows plus overscan, clamped to [0, total)', () => {
  const cases: Array<[{ scrollTop: number; viewportHeight: number; total: number; overscan: number }, [number, number]]> = [
    // top of a long table: 480 / 36 → rows 0..13 visible, + 8 below
    [{ scrollTop: 0, viewportHeight: 480, total: 10_000, overscan: 8 }, [0, 22]],
    // middle: first visible 100 (3600 / 36), last visible 113 (ceil(4080 / 36) = 114 end)
    [{ scrollTop: 3600, viewportHeight: 480, total: 10_000, overscan: 8 }, [92, 122]],
    // a scroll between rows: rows 100 and 113 partly visible
    [{ scrollTop: 3610, viewportHeight: 480, total: 10_000, overscan: 0 }, [100, 114]],
    // the bottom
    [{ scrollTop: 10_000 * H - 480, viewportHeight: 480, total: 10_000, overscan: 8 }, [9978, 10_000]],
    // scrolled past the end (the total shrank under the scroller): still within [0, total)
    [{ scrollTop: 1e9, viewportHeight: 480, total: 10, overscan: 8 }, [1, 10]],
    // short tables, empty tables, negative (rubber-band) scroll
    [{ scrollTop: 0, viewportHeight: 480, total: 5, overscan: 8 }, [0, 5]],
    [{ scrollTop: 0, viewportHeight: 480, total: 0, overscan: 8 }, [0, 0]],
    [{ scrollTop: -40, viewportHeight: 480, total: 100, overscan: 2 }, [0, 16]],
    // a zero-height viewport still renders the row at the top
    [{ scrollTop: 360, viewportHeight: 0, total: 100, overscan: 0 }, [10, 11]],
  ];
  for (const [input, [first, end]] of cases) {
    assert.deepEqual(rowWindow({ ...input, rowHeight: H }), { first, end }, JSON.stringify(input));
  }
});

test('the DOM holds at most the visible rows + 2 × overscan, wherever the scroll is', () => {
  const viewportHeight = 500;
  const bound = Math.ceil(viewportHeight / H) + 1 + 2 * 8;
  for (let top = 0; top < 10_000 * H; top += 977) {
    const w = rowWindow({ scrollTop: top, viewportHeight, rowHeight: H, total: 10_000, overscan: 8 });
    assert.ok(w.end - w.first <= bound, `${w.end - w.first} rows at ${top}`);
    assert.ok(w.first <= Math.floor(top / H) && w.end >= Math.min(10_000, Math.ceil((top + viewportHeight) / H)), 'covers the viewport');
  }
});

test('a fetch asks once for the missing blocks of the window, capped at the hub page size', () => {
  const none = (): boolean => false;
  assert.deepEqual(blocksOf({ first: 92, end: 122 }), { firstBlock: 0, endBlock: 2 });
  assert.deepEqual(fetchPlan({ first: 92, end: 122 }, none), { offset: 0, limit: 200 });
  assert.deepEqual(
    fetchPlan({ first: 92, end: 122 }, (b) => b === 0),
    { offset: 100, limit: 100 },
  );
  assert.equal(
    fetchPlan({ first: 92, end: 122 }, () => true),
    null,
    'all there: no request',
  );
  // A gap in the middle still costs one request spanning it.
  assert.deepEqual(
    fetchPlan({ first: 0, end: 400 }, (b) => b === 1),
    { offset: 0, limit: 400 },
  );
  // A huge window is capped at WORKERS_PAGE_MAX.
  const big = fetchPlan({ first: 0, end: 10_000 }, none);
  assert.deepEqual(big, { offset: 0, limit: WORKERS_PAGE_MAX });
  assert.equal(fetchPlan({ first: 0, end: 0 }, none), null, 'empty window');
  assert.equal((big?.limit ?? 0) % BLOCK_ROWS, 0, 'whole blocks');
});

test('the cache forgets the blocks farthest from the window', () => {
  const held = Array.from({ length: 45 }, (_, i) => i);
  const gone = blocksToForget(held, { first: 0, end: 30 }, 40);
  assert.deepEqual(
    gone.sort((a, b) => a - b),
    [40, 41, 42, 43, 44],
  );
  const fromEnd = blocksToForget(held, { first: 4400, end: 4430 }, 40);
  assert.deepEqual(
    fromEnd.sort((a, b) => a - b),
    [0, 1, 2, 3, 4],
  );
  assert.deepEqual(blocksToForget([1, 2], { first: 0, end: 10 }, 40), []);
});

test('sorting: a new column starts at its natural direction, the same column flips; aria-sort follows', () => {
  assert.deepEqual(nextSort({ sort: 'id', dir: 'asc' }, 'id'), { sort: 'id', dir: 'desc' });
  assert.deepEqual(nextSort({ sort: 'id', dir: 'desc' }, 'id'), { sort: 'id', dir: 'asc' });
  assert.deepEqual(nextSort({ sort: 'id', dir: 'asc' }, 'state'), { sort: 'state', dir: 'asc' });
  assert.deepEqual(nextSort({ sort: 'id', dir: 'asc' }, 'pairs'), { sort: 'pairs', dir: 'desc' });
  assert.deepEqual(nextSort({ sort: 'id', dir: 'asc' }, 'lastServe'), { sort: 'lastServe', dir: 'desc' });
  assert.equal(ariaSort({ sort: 'id', dir: 'asc' }, 'id'), 'ascending');
  assert.equal(ariaSort({ sort: 'id', dir: 'desc' }, 'id'), 'descending');
  assert.equal(ariaSort({ sort: 'id', dir: 'desc' }, 'credit'), 'none');
  const base = { model: '', state: '' as const, q: '', sort: 'id' as const, dir: 'asc' as const };
  assert.notEqual(queryKey(base), queryKey({ ...base, q: 'x' }));
  assert.equal(queryKey(base), queryKey({ ...base }));
  assert.equal(formatSlice([3, 0, 64]), 'L3 [0, 64)');
  assert.equal(formatSlice(null), '—');
  assert.equal(formatSlices([3, 0, 64]), 'L3 [0, 64)');
  assert.equal(
    formatSlices(
      [0, 0, 8],
      [
        [0, 0, 8],
        [1, 0, 8],
      ],
    ),
    '2 slices: L0 [0, 8), L1 [0, 8)',
  );
  assert.equal(formatSliceStats(undefined), '');
  assert.equal(
    formatSliceStats([
      { slice: [0, 0, 8], pairs: 120, credit: 100 },
      { slice: [1, 0, 8], pairs: 4, credit: 0 },
    ]),
    'L0 [0, 8): 120 pairs, 100 credited; L1 [0, 8): 4 pairs, 0 credited',
  );
});

test('heatmap colours: none is red, under target amber, at target green, above it dark green', () => {
  assert.equal(cellColor(0, 2), HEAT.none);
  assert.equal(cellColor(1, 3), HEAT.low);
  assert.equal(cellColor(3, 4), HEAT.high, 'one short of the target: the lightest amber');
  assert.equal(cellColor(2, 2), HEAT.met);
  assert.equal(cellColor(5, 2), HEAT.surplus);
  assert.equal(cellColor(0, 0), HEAT.met, 'nothing wanted: met');
  const mid = cellColor(2, 4);
  assert.match(mid, /^#[0-9a-f]{6}$/);
  assert.notEqual(mid, HEAT.low);
  assert.notEqual(mid, HEAT.high);
});

test('heatmap layout: cells ≥ 2 px at 48 × 256 even on a phone, capped for small models', () => {
  for (const width of [320, 600, 1200]) {
    const l = heatLayout(48, 256, width);
    assert.ok(l.cellW >= MIN_CELL && l.cellH >= MIN_CELL, `${width}: ${l.cellW} × ${l.cellH}`);
    assert.equal(l.width, AXIS_LEFT + 256 * l.cellW);
    assert.ok(l.height <= AXIS_TOP + 48 * 6 + 1, 'a 48-layer map stays about 300 px tall');
  }
  assert.equal(heatLayout(48, 256, 1200).cellW, 4);
  const small = heatLayout(2, 8, 1200);
  assert.ok(small.cellW <= 28 && small.cellH <= 18, 'an 8-expert model is not a wall of bricks');
  assert.ok(labelStep(256, 2) >= 16 && labelStep(8, 40) === 1);
});

test('heatmap hit testing and keyboard cursor', () => {
  const l = heatLayout(48, 256, 1200);
  assert.deepEqual(cellAt(l, 48, 256, AXIS_LEFT, AXIS_TOP), { row: 0, col: 0 });
  assert.deepEqual(cellAt(l, 48, 256, AXIS_LEFT + 5 * l.cellW + 1, AXIS_TOP + 3 * l.cellH + 1), { row: 3, col: 5 });
  assert.equal(cellAt(l, 48, 256, AXIS_LEFT - 1, AXIS_TOP + 1), null, 'on the axis');
  assert.equal(cellAt(l, 48, 256, l.width + 1, AXIS_TOP + 1), null, 'past the last expert');
  const c = { row: 0, col: 0 };
  assert.deepEqual(moveCursor(c, 'ArrowLeft', 48, 256), { row: 0, col: 0 }, 'clamped');
  assert.deepEqual(moveCursor(c, 'ArrowDown', 48, 256), { row: 1, col: 0 });
  assert.deepEqual(moveCursor(c, 'End', 48, 256), { row: 0, col: 255 });
  assert.deepEqual(moveCursor({ row: 47, col: 250 }, 'PageDown', 48, 256), { row: 47, col: 255 });
  assert.equal(moveCursor(c, 'a', 48, 256), null);
});

test('heatmap summary and readout', () => {
  const bytes = Uint8Array.from([0, 1, 2, 3, 0, 2]);
  const s = summarise(bytes, 2);
  assert.deepEqual(s, { cells: 6, under: 3, uncovered: 2 });
  assert.equal(summarySentence(s, 2), '3 of 6 experts under target (2 with no replica); target 2');
  assert.equal(summarySentence(summarise(new Uint8Array(12_288).fill(1), 1), 1), '0 of 12288 experts under target; target 1');
  assert.equal(cellReadout(12, 200, 1, 2), 'layer 12, expert 200: 1 of 2 replicas');
  assert.equal(cellReadout(0, 0, 255, 1), 'layer 0, expert 0: 255+ of 1 replica');
});
