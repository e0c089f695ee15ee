/**
 * The workers table's arithmetic, pure: which rows are in the DOM for a scroll position (fixed row height, the
 * visible ones plus overscan), which rows to fetch from the hub for them (aligned blocks, one request), which blocks
 * to forget, and how a header click changes the sort. test/unit/dashboard-page-workers.test.ts checks each.
 *
 *   const w = rowWindow({ scrollTop: 3600, viewportHeight: 480, rowHeight: 36, total: 10_000, overscan: 8 });
 *   // → { first: 92, end: 122 }: rows [92, 122) are rendered, at top = first × rowHeight
 */
import { WORKERS_PAGE_MAX, type WorkerSortKey, type WorkersQuery, workersQueryKey } from '../../../protocol/dashboard.ts';

/** One row's height in px: fixed, so a row's position is its index × this. */
export const ROW_HEIGHT = 36;
/** Rows rendered above and below the visible ones, so a fast scroll does not show blanks for a frame. */
export const OVERSCAN = 8;
/** Rows fetched per block: the cache's unit. */
export const BLOCK_ROWS = 100;
/** Blocks the page keeps (the rest are fetched again when scrolled back to). */
export const BLOCKS_KEPT = 40;

export interface WindowInput {
  scrollTop: number;
  viewportHeight: number;
  rowHeight: number;
  total: number;
  overscan: number;
}

/** `[first, end)`: the rows to render. Empty (first = end) when there are none. */
export interface RowWindow {
  first: number;
  end: number;
}

export function rowWindow({ scrollTop, viewportHeight, rowHeight, total, overscan }: WindowInput): RowWindow {
  if (total <= 0 || rowHeight <= 0) return { first: 0, end: 0 };
  const top = Math.max(0, scrollTop);
  const firstVisible = Math.min(total - 1, Math.floor(top / rowHeight));
  const endVisible = Math.min(total, Math.ceil((top + Math.max(0, viewportHeight)) / rowHeight));
  return { first: Math.max(0, firstVisible - overscan), end: Math.min(total, Math.max(endVisible, firstVisible + 1) + overscan) };
}

/** The blocks `[firstBlock, endBlock)` that hold a window's rows. */
export function blocksOf(w: RowWindow, blockRows = BLOCK_ROWS): { firstBlock: number; endBlock: number } {
  if (w.end <= w.first) return { firstBlock: 0, endBlock: 0 };
  return { firstBlock: Math.floor(w.first / blockRows), endBlock: Math.ceil(w.end / blockRows) };
}

/**
 * The one request that fills a window's missing blocks: from the first missing block to the last, capped at the
 * hub's page size; null when every block is there.
 */
export function fetchPlan(
  w: RowWindow,
  have: (block: number) => boolean,
  blockRows = BLOCK_ROWS,
  maxRows = WORKERS_PAGE_MAX,
): { offset: number; limit: number } | null {
  const { firstBlock, endBlock } = blocksOf(w, blockRows);
  let lo = -1;
  let hi = -1;
  for (let b = firstBlock; b < endBlock; b++) {
    if (have(b)) continue;
    if (lo < 0) lo = b;
    hi = b;
  }
  if (lo < 0) return null;
  const limit = Math.min((hi - lo + 1) * blockRows, Math.floor(maxRows / blockRows) * blockRows);
  return { offset: lo * blockRows, limit };
}

/** Blocks to drop so that at most `kept` remain, farthest from the window first. */
export function blocksToForget(held: readonly number[], w: RowWindow, kept = BLOCKS_KEPT, blockRows = BLOCK_ROWS): number[] {
  if (held.length <= kept) return [];
  const centre = (w.first + w.end) / 2 / blockRows;
  return [...held].sort((a, b) => Math.abs(b + 0.5 - centre) - Math.abs(a + 0.5 - centre)).slice(0, held.length - kept);
}

/** Columns whose first click sorts largest first (recent, slow, busy, rich at the top). */
const DESC_FIRST = new Set<WorkerSortKey>(['lastServe', 'latency', 'pairs', 'credit']);

/** A header click: the same column flips its direction; another column starts at its natural direction. */
export function nextSort(q: Pick<WorkersQuery, 'sort' | 'dir'>, key: WorkerSortKey): Pick<WorkersQuery, 'sort' | 'dir'> {
  if (q.sort === key) return { sort: key, dir: q.dir === 'asc' ? 'desc' : 'asc' };
  return { sort: key, dir: DESC_FIRST.has(key) ? 'desc' : 'asc' };
}

/** aria-sort of a column header. */
export function ariaSort(q: Pick<WorkersQuery, 'sort' | 'dir'>, key: WorkerSortKey): 'ascending' | 'descending' | 'none' {
  if (q.sort !== key) return 'none';
  return q.dir === 'asc' ? 'ascending' : 'descending';
}

/** The part of a query that decides which rows exist and in what order (changing it invalidates every block). */
export { workersQueryKey as queryKey };

/** A slice `[layer, begin, end)` as the table shows it. */
export function formatSlice(slice: [number, number, number] | null): string {
  return slice === null ? '—' : `L${slice[0]} [${slice[1]}, ${slice[2]})`;
}

/** A worker's slices in the table: one as formatSlice says it, several counted then listed ("2 slices: L0 [0, 8), L1 [0, 8)"). */
export function formatSlices(slice: [number, number, number] | null, slices?: ReadonlyArray<[number, number, number]>): string {
  if (!slices || slices.length < 2) return formatSlice(slice);
  return `${slices.length} slices: ${slices.map((s) => formatSlice(s)).join(', ')}`;
}

/** Each served slice's pairs and credit, for the slice cell's title ("L0 [0, 8): 120 pairs, 100 credited; …"). */
export function formatSliceStats(stats?: ReadonlyArray<{ slice: [number, number, number]; pairs: number; credit: number }>): string {
  if (!stats || stats.length === 0) return '';
  return stats.map((s) => `${formatSlice(s.slice)}: ${s.pairs} pairs, ${s.credit} credited`).join('; ');
}
