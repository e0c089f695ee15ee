/**
 * The workers table's filter as two copies: `shown`, what the controls say (the text as typed), and `applied`, what
 * every request asks the hub for and what the cached rows belong to. A select or a sort applies at once; typed text
 * is only UI state until typing pauses (workers.svelte.ts's debounce), so a scroll or a refresh meanwhile still asks
 * for the rows of the applied filter and files them under the applied key. Pure; test/unit/dashboard-page-workers-filter.test.ts.
 *
 *   let f = initialFilter();
 *   f = reduceFilter(f, { type: 'type', q: 'w-01' });   // shown.q 'w-01', applied.q '' (requests unchanged)
 *   f = reduceFilter(f, { type: 'debounced' });         // applied.q 'w-01': filterKey(f) changes, the rows reset
 */
import { DEFAULT_WORKERS_QUERY, type WorkersQuery, workersQueryKey } from '../../../protocol/dashboard.ts';

export type WorkersFilter = Pick<WorkersQuery, 'model' | 'state' | 'q' | 'sort' | 'dir'>;

export interface FilterState {
  readonly shown: Readonly<WorkersFilter>;
  readonly applied: Readonly<WorkersFilter>;
}

export type FilterAction =
  /** Model, state or sort: applied at once, together with any text typed so far. */
  | { type: 'set'; change: Partial<WorkersFilter> }
  /** A keystroke in the text filter: the controls only. */
  | { type: 'type'; q: string }
  /** Typing paused: the typed text applies. */
  | { type: 'debounced' };

export function initialFilter(): FilterState {
  const f: WorkersFilter = {
    model: DEFAULT_WORKERS_QUERY.model,
    state: DEFAULT_WORKERS_QUERY.state,
    q: DEFAULT_WORKERS_QUERY.q,
    sort: DEFAULT_WORKERS_QUERY.sort,
    dir: DEFAULT_WORKERS_QUERY.dir,
  };
  return { shown: f, applied: f };
}

export function reduceFilter(s: FilterState, a: FilterAction): FilterState {
  switch (a.type) {
    case 'set': {
      const shown = { ...s.shown, ...a.change };
      return { shown, applied: shown };
    }
    case 'type':
      return s.shown.q === a.q ? s : { shown: { ...s.shown, q: a.q }, applied: s.applied };
    case 'debounced':
      return s.applied.q === s.shown.q ? s : { shown: s.shown, applied: { ...s.applied, q: s.shown.q } };
  }
}

/** The key of the rows the page holds: the applied filter's (typing does not change it). */
export function filterKey(s: FilterState): string {
  return workersQueryKey(s.applied);
}

/** The request for rows `[offset, offset + limit)`: always from the applied filter. */
export function workersRequest(s: FilterState, page: { offset: number; limit: number }): WorkersQuery {
  const { model, state, q, sort, dir } = s.applied;
  return { model, state, q, sort, dir, offset: page.offset, limit: page.limit };
}
