/**
 * The workers table's two filter copies (web/src/dashboard/workers-filter.ts): typed text is UI state until the
 * debounce applies it; every request and the cache key come from the applied copy. The regression: a scroll or
 * refresh inside the debounce fetched rows for the new text and filed them under the old key, so when the text went
 * back to its old value the wrong rows stayed until the next refresh.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { workersQueryKey } from '../../protocol/dashboard.ts';
import {
  type FilterAction,
  type FilterState,
  filterKey,
  initialFilter,
  reduceFilter,
  workersRequest,
} from '../../web/src/dashboard/workers-filter.ts';

const run = (actions: FilterAction[], from = initialFilter()): FilterState => actions.reduce(reduceFilter, from);
const PAGE = { offset: 200, limit: 100 };

test('typing changes what the controls show, not what requests ask for', () => {
  const start = initialFilter();
  const typed = run([{ type: 'type', q: 'w-01' }]);
  assert.equal(typed.shown.q, 'w-01');
  assert.equal(typed.applied.q, '');
  assert.equal(filterKey(typed), filterKey(start), 'the cached rows still belong to the applied filter');
  assert.deepEqual(workersRequest(typed, PAGE), { model: '', state: '', q: '', sort: 'id', dir: 'asc', offset: 200, limit: 100 });
});

test('the debounce applies the typed text: the key and the requests change together', () => {
  const s = run([{ type: 'type', q: 'w-0' }, { type: 'type', q: 'w-01' }, { type: 'debounced' }]);
  assert.deepEqual(s.applied, s.shown);
  assert.equal(s.applied.q, 'w-01');
  const req = workersRequest(s, PAGE);
  assert.equal(req.q, 'w-01');
  assert.equal(filterKey(s), workersQueryKey(req), 'a request is filed under the key of the filter it asked with');
  assert.notEqual(filterKey(s), filterKey(initialFilter()));
});

test('text typed and taken back before the debounce: nothing changes (regression)', () => {
  const start = run([{ type: 'type', q: 'abc' }, { type: 'debounced' }]);
  const mid = run([{ type: 'type', q: 'abcd' }], start);
  // A scroll or a refresh here asks for the applied rows and files them under the applied key.
  assert.equal(workersRequest(mid, PAGE).q, 'abc');
  assert.equal(filterKey(mid), filterKey(start));
  const back = run([{ type: 'type', q: 'abc' }, { type: 'debounced' }], mid);
  assert.equal(filterKey(back), filterKey(start), 'same key: the rows held are the right ones');
  assert.equal(reduceFilter(back, { type: 'debounced' }), back, 'a debounce with nothing new is a no-op');
});

test('a select or a sort applies at once, with any text typed so far', () => {
  const s = run([
    { type: 'type', q: 'gpu' },
    { type: 'set', change: { state: 'proven' } },
  ]);
  assert.deepEqual(s.applied, { model: '', state: 'proven', q: 'gpu', sort: 'id', dir: 'asc' });
  assert.deepEqual(s.shown, s.applied);
  const sorted = run([{ type: 'set', change: { sort: 'latency', dir: 'desc' } }], s);
  assert.deepEqual(workersRequest(sorted, { offset: 0, limit: 500 }), {
    model: '',
    state: 'proven',
    q: 'gpu',
    sort: 'latency',
    dir: 'desc',
    offset: 0,
    limit: 500,
  });
});

test('every request in a sequence of actions is built from the applied copy only', () => {
  const actions: FilterAction[] = [
    { type: 'type', q: 'a' },
    { type: 'set', change: { model: 'm' } },
    { type: 'type', q: 'ab' },
    { type: 'type', q: 'abc' },
    { type: 'debounced' },
    { type: 'type', q: '' },
    { type: 'set', change: { sort: 'pairs', dir: 'desc' } },
    { type: 'type', q: 'x' },
  ];
  let s = initialFilter();
  for (const a of actions) {
    s = reduceFilter(s, a);
    const req = workersRequest(s, PAGE);
    assert.equal(workersQueryKey(req), filterKey(s), JSON.stringify(a));
    assert.deepEqual({ ...req, offset: undefined, limit: undefined }, { ...s.applied, offset: undefined, limit: undefined });
  }
  assert.deepEqual(s.applied, { model: 'm', state: '', q: '', sort: 'pairs', dir: 'desc' });
  assert.equal(s.shown.q, 'x');
});
