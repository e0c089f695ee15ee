/**
 * Which held ranges count as replicas (hub/market/replicas.ts): only a worker the hub can send work to. A Kvasir worker
 * that reports over HTTP and has not dialed its relay (hub/relay/relay.ts) is held, not a replica: its heartbeat must
 * not lower the demand for experts nobody serves, nor make a model wanted at rest.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CoverageStore } from '../../hub/market/coverage.ts';
import { modelDemand } from '../../hub/market/demand.ts';
import { replicaVerdict, type ReplicaCode, type ReplicaInput } from '../../hub/market/replicas.ts';
import type { ModelShape } from '../../hub/market/types.ts';

const SHAPE: ModelShape = {
  model: 'm',
  nLayer: 2,
  nExpert: 8,
  nEmbd: 16,
  moeLayers: [0, 1],
  bytesPerExpert: 30,
  maxMatrixBytesPerExpert: 10,
};

test('replicaVerdict: a worker counts exactly when something can send it work', () => {
  const table: Array<[string, ReplicaInput, boolean, ReplicaCode]> = [
    ['a channel volunteer (serving, or loading with its range reserved)', { via: 'channel', relay: 'none' }, true, 'channel'],
    ['a channel volunteer that also names a relay', { via: 'channel', relay: 'dialed' }, true, 'channel'],
    ['an HTTP worker with no relay dialed (a Kvasir worker before its dial)', { via: 'http', relay: 'none' }, false, 'no-work-link'],
    ['an HTTP worker whose relay is dialed', { via: 'http', relay: 'dialed' }, true, 'relay'],
  ];
  for (const [what, input, counts, code] of table) {
    const v = replicaVerdict(input);
    assert.deepEqual([v.counts, v.code], [counts, code], what);
    assert.ok(v.reason.length > 0);
  }
});

test('CoverageStore: a held range that is no replica is in the census, not in the counts demand reads', () => {
  const store = new CoverageStore();
  store.addModel(SHAPE);
  const demand = () =>
    modelDemand(SHAPE, (l) => store.replicaCounts('m', l), 2, false, store.replicaWorkerCount('m') > 0).layers.map((l) =>
      l.segments.map((s) => [...s.experts, s.replicas]),
    );
  // A Kvasir worker over HTTP, no relay: held (census, dispatch map) but not a replica.
  store.heartbeat('kvasir', 'm', [[0, 0, 8]], 0, replicaVerdict({ via: 'http', relay: 'none' }).counts);
  assert.deepEqual([store.workerCount('m'), store.replicaWorkerCount('m')], [1, 0]);
  assert.deepEqual(store.heldRanges('kvasir'), [[0, 0, 8]]);
  assert.deepEqual([...store.replicaCounts('m', 0)], [0, 0, 0, 0, 0, 0, 0, 0]);
  assert.deepEqual(demand(), [], 'it alone does not make the model wanted at rest');

  store.heartbeat('tab', 'm', [[0, 0, 4]], 0); // a channel volunteer
  assert.deepEqual(
    demand(),
    [
      [
        [0, 4, 1],
        [4, 8, 0],
      ],
      [[0, 8, 0]],
    ],
    'only the channel volunteer counts',
  );

  // The same worker becoming reachable (its relay dialed) counts from that heartbeat on, and back.
  store.heartbeat('kvasir', 'm', [[0, 0, 8]], 1, true);
  assert.deepEqual([...store.replicaCounts('m', 0)], [2, 2, 2, 2, 1, 1, 1, 1]);
  store.heartbeat('kvasir', 'm', [[0, 0, 8]], 2, false);
  assert.deepEqual([...store.replicaCounts('m', 0)], [1, 1, 1, 1, 0, 0, 0, 0]);
  assert.equal(store.replicaWorkerCount('m'), 1);
  // Leaving (eviction, release) takes nothing from the counts it never added to.
  store.remove('kvasir');
  assert.deepEqual([...store.replicaCounts('m', 0)], [1, 1, 1, 1, 0, 0, 0, 0]);
  assert.deepEqual([store.workerCount('m'), store.replicaWorkerCount('m')], [1, 1]);
});
