/**
 * The workers table's data: the hub sorts, filters and pages (`GET /api/dashboard/workers`); the page keeps the
 * blocks of rows it has fetched, renders only the rows in view (workers-window.ts), and fetches what a scroll
 * uncovers, at most one request in flight (a newer one aborts it) and at most one per FETCH_GAP_MS while scrolling.
 * Visible rows are fetched again every REFRESH_MS so states and latencies stay live. Every request and the cache's
 * key come from the applied filter (workers-filter.ts): typed text applies only when typing pauses.
 */
import type { WorkerRow, WorkerSortKey } from '../../../protocol/dashboard.ts';
import { ApiError, fetchWorkers } from './api.ts';
import {
  type FilterAction,
  type FilterState,
  filterKey,
  initialFilter,
  reduceFilter,
  type WorkersFilter,
  workersRequest,
} from './workers-filter.ts';
import {
  BLOCK_ROWS,
  blocksOf,
  blocksToForget,
  fetchPlan,
  nextSort,
  OVERSCAN,
  ROW_HEIGHT,
  type RowWindow,
  rowWindow,
} from './workers-window.ts';

/** At most one fetch per this while scrolling (the last position always gets its fetch). */
const FETCH_GAP_MS = 60;
/** The free-text filter waits for typing to pause. */
const TEXT_DEBOUNCE_MS = 250;
/** Rows in view are fetched again this often. */
export const REFRESH_MS = 5000;

export type { WorkersFilter };

export interface ShownRow {
  index: number;
  row: WorkerRow | null;
}

export class WorkersView {
  #filters: FilterState = $state.raw(initialFilter());
  /** What the controls show (the text as typed). */
  readonly filter: Readonly<WorkersFilter> = $derived(this.#filters.shown);
  /** What the rows, the total and every request belong to. */
  readonly applied: Readonly<WorkersFilter> = $derived(this.#filters.applied);
  /** Rows matching the filter, as the hub last said; null before the first answer. */
  total: number | null = $state(null);
  error: string | null = $state(null);
  loading = $state(false);
  scrollTop = $state(0);
  viewportHeight = $state(480);
  /** Bumped when a block arrives or is dropped: the rows below read it. */
  #version = $state(0);

  readonly window: RowWindow = $derived(
    rowWindow({
      scrollTop: this.scrollTop,
      viewportHeight: this.viewportHeight,
      rowHeight: ROW_HEIGHT,
      total: this.total ?? 0,
      overscan: OVERSCAN,
    }),
  );
  readonly rows: ShownRow[] = $derived.by(() => {
    void this.#version;
    const out: ShownRow[] = [];
    for (let i = this.window.first; i < this.window.end; i++) {
      const block = this.#blocks.get(Math.floor(i / BLOCK_ROWS));
      out.push({ index: i, row: block?.[i % BLOCK_ROWS] ?? null });
    }
    return out;
  });

  readonly #blocks = new Map<number, WorkerRow[]>();
  #key = filterKey(this.#filters);
  #inflight: AbortController | null = null;
  #inflightSpan: { key: string; offset: number; end: number } | null = null;
  #gapTimer: ReturnType<typeof setTimeout> | undefined;
  #textTimer: ReturnType<typeof setTimeout> | undefined;
  #refreshTimer: ReturnType<typeof setInterval> | undefined;
  #pending = false;

  start(): void {
    this.#fetch(false);
    this.#refreshTimer = setInterval(() => this.refresh(), REFRESH_MS);
  }

  destroy(): void {
    clearTimeout(this.#gapTimer);
    clearTimeout(this.#textTimer);
    clearInterval(this.#refreshTimer);
    this.#inflight?.abort();
  }

  /** The scroller moved or resized. */
  view(scrollTop: number, viewportHeight: number): void {
    this.scrollTop = scrollTop;
    this.viewportHeight = viewportHeight;
    if (this.#gapTimer !== undefined) {
      this.#pending = true;
      return;
    }
    this.#fetch(false);
    this.#gapTimer = setTimeout(() => {
      this.#gapTimer = undefined;
      if (this.#pending) {
        this.#pending = false;
        this.#fetch(false);
      }
    }, FETCH_GAP_MS);
  }

  /** Model or state filter, or a sort: the rows change at once. */
  set(change: Partial<WorkersFilter>): void {
    // The typed text applies with it: no debounce left to wait for.
    clearTimeout(this.#textTimer);
    this.#apply({ type: 'set', change });
  }

  /** The free-text filter: shown at once, applied when typing pauses. */
  setText(q: string): void {
    this.#apply({ type: 'type', q });
    clearTimeout(this.#textTimer);
    this.#textTimer = setTimeout(() => this.#apply({ type: 'debounced' }), TEXT_DEBOUNCE_MS);
  }

  sortBy(key: WorkerSortKey): void {
    this.set(nextSort(this.#filters.applied, key));
  }

  /** Fetch the rows in view again (the timer; after an admin action). */
  refresh(): void {
    this.#fetch(true);
  }

  #apply(action: FilterAction): void {
    this.#filters = reduceFilter(this.#filters, action);
    const key = filterKey(this.#filters);
    if (key === this.#key) return;
    this.#key = key;
    this.#blocks.clear();
    this.#version++;
    this.#fetch(true);
  }

  #fetch(force: boolean): void {
    // An empty window (before the first answer, or no rows yet): ask for the first block, to see rows arrive.
    const w = this.window.end > this.window.first ? this.window : { first: 0, end: BLOCK_ROWS };
    const plan = fetchPlan(w, (b) => !force && this.#blocks.has(b));
    if (!plan) return;
    const key = this.#key;
    const query = workersRequest(this.#filters, plan);
    // The request in flight already brings these rows (a small scroll): let it finish rather than ask again.
    const f = this.#inflightSpan;
    if (!force && this.#inflight && f && f.key === key && f.offset <= plan.offset && plan.offset + plan.limit <= f.end) return;
    this.#inflight?.abort();
    const ac = new AbortController();
    this.#inflight = ac;
    this.#inflightSpan = { key, offset: plan.offset, end: plan.offset + plan.limit };
    this.loading = true;
    fetchWorkers(query, ac.signal).then(
      (page) => {
        if (this.#inflight !== ac) return;
        this.#inflight = null;
        this.loading = false;
        this.error = null;
        if (key !== this.#key) return;
        this.#store(page.offset, page.rows, page.total);
        // A scroll during the fetch may have uncovered more.
        if (fetchPlan(this.window, (b) => this.#blocks.has(b))) this.#fetch(false);
      },
      (e: unknown) => {
        if (this.#inflight !== ac) return;
        this.#inflight = null;
        this.loading = false;
        if (e instanceof DOMException && e.name === 'AbortError') return;
        this.error = e instanceof ApiError ? e.display : String(e);
      },
    );
  }

  #store(offset: number, rows: WorkerRow[], total: number): void {
    if (total !== this.total) {
      for (const b of [...this.#blocks.keys()]) if (b * BLOCK_ROWS >= total) this.#blocks.delete(b);
      this.total = total;
    }
    for (let i = 0; i < rows.length; i += BLOCK_ROWS) {
      this.#blocks.set(Math.floor((offset + i) / BLOCK_ROWS), rows.slice(i, i + BLOCK_ROWS));
    }
    const { firstBlock, endBlock } = blocksOf({ first: offset, end: offset + Math.max(rows.length, 1) });
    // A short answer (rows removed since the count): the blocks it did not fill are gone.
    for (let b = firstBlock; b < endBlock; b++) if (!this.#blocks.has(b)) this.#blocks.set(b, []);
    for (const b of blocksToForget([...this.#blocks.keys()], this.window)) this.#blocks.delete(b);
    this.#version++;
  }
}
