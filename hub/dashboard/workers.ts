/**
 * The dashboard's workers table, server side: filter, sort and page plain rows (the Hub builds them from the coverage
 * store, the dispatch map and the volunteer channel). Pure, so the page can scroll 10,000 workers while the hub sends
 * it one page at a time.
 *
 *   queryWorkers(rows, { ...DEFAULT_WORKERS_QUERY, state: 'proven', sort: 'latency', dir: 'asc', limit: 50 });
 *
 * Order: by the sort key in `dir`, empty values (null: never served, no backend, no wallet) last in either direction,
 * then by id and model ascending, so equal keys keep one stable order across pages. States sort in their lifecycle
 * order (WORKER_STATES), not alphabetically.
 */
import {
  TICK_MS,
  WORKER_STATES,
  type WorkerRow,
  type WorkerSortKey,
  type WorkersPage,
  type WorkersQuery,
  workersQueryKey,
} from '../../protocol/dashboard.ts';

const STATE_RANK = new Map<string, number>(WORKER_STATES.map((s, i) => [s, i]));

type Key = (r: WorkerRow) => number | string | null;

const KEYS: Readonly<Record<WorkerSortKey, Key>> = {
  id: (r) => r.id,
  model: (r) => r.model,
  layer: (r) => (r.slice ? r.slice[0] * 1e6 + r.slice[1] : null),
  state: (r) => STATE_RANK.get(r.state) ?? WORKER_STATES.length,
  backend: (r) => r.backend,
  lastServe: (r) => r.lastServeMs,
  latency: (r) => r.latencyMs,
  pairs: (r) => r.pairsServed,
  credit: (r) => r.credit,
};

function cmp(a: number | string, b: number | string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Whether a row passes the query's filters (model, state, and `q` in its id, device or backend, any case). */
export function workerMatches(r: WorkerRow, q: Pick<WorkersQuery, 'model' | 'state'>, needle: string): boolean {
  if (q.model !== '' && r.model !== q.model) return false;
  if (q.state !== '' && r.state !== q.state) return false;
  if (needle === '') return true;
  return (
    r.id.toLowerCase().includes(needle) || r.device.toLowerCase().includes(needle) || (r.backend?.toLowerCase().includes(needle) ?? false)
  );
}

/** Every row that matches, in the query's order (the sort keys are read once per row, not once per comparison). */
export function sortedMatches(rows: readonly WorkerRow[], q: Omit<WorkersQuery, 'offset' | 'limit'>): WorkerRow[] {
  const needle = q.q.toLowerCase();
  const matched = rows.filter((r) => workerMatches(r, q, needle));
  const key = KEYS[q.sort];
  const keys = matched.map(key);
  const sign = q.dir === 'asc' ? 1 : -1;
  const order = matched.map((_, i) => i);
  order.sort((i, j) => {
    const ka = keys[i] as number | string | null;
    const kb = keys[j] as number | string | null;
    if (ka !== kb) {
      if (ka === null) return 1;
      if (kb === null) return -1;
      return ka < kb ? -sign : sign;
    }
    const a = matched[i] as WorkerRow;
    const b = matched[j] as WorkerRow;
    return cmp(a.id, b.id) || cmp(a.model, b.model);
  });
  return order.map((i) => matched[i] as WorkerRow);
}

/** One page of the rows that match, in the query's order; `total` counts every match. */
export function queryWorkers(rows: readonly WorkerRow[], q: WorkersQuery): WorkersPage {
  const all = sortedMatches(rows, q);
  return { total: all.length, offset: q.offset, rows: all.slice(q.offset, q.offset + q.limit) };
}

/**
 * The table a hub serves: rows built at most once per `maxAgeMs` (a tick: the numbers are as fresh as the stream's),
 * and the sorted, filtered view kept for the next page of the same query. A page scrolled through 10,000 rows then
 * costs a slice, not a sort; a new sort or filter costs one sort over the cached rows.
 *
 *   const table = new WorkersTable(() => hub.rows());
 *   table.page({ ...DEFAULT_WORKERS_QUERY, offset: 500 });
 *   table.invalidate(); // after an admin action: the next page shows it
 */
export class WorkersTable {
  private rows: WorkerRow[] | null = null;
  private builtAt = 0;
  private view: { key: string; rows: WorkerRow[] } | null = null;

  constructor(
    private readonly build: () => WorkerRow[],
    private readonly maxAgeMs = TICK_MS,
    private readonly now: () => number = () => performance.now(),
  ) {}

  page(q: WorkersQuery): WorkersPage {
    const t = this.now();
    if (this.rows === null || t - this.builtAt > this.maxAgeMs || t < this.builtAt) {
      this.rows = this.build();
      this.builtAt = t;
      this.view = null;
    }
    const key = workersQueryKey(q);
    if (this.view?.key !== key) this.view = { key, rows: sortedMatches(this.rows, q) };
    const all = this.view.rows;
    return { total: all.length, offset: q.offset, rows: all.slice(q.offset, q.offset + q.limit) };
  }

  invalidate(): void {
    this.rows = null;
    this.view = null;
  }
}
