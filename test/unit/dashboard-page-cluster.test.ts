/**
 * The dashboard of a hub in a cluster (web/src/dashboard/cluster.ts): `GET /api/health`'s cluster part and the
 * cluster's events list checked at the page's edge, and the events list the page draws — every hub's, merged with
 * this hub's live ones and labelled with their hub; this hub's own with a note while the cluster answers 503. The page
 * with a real cluster runs in test/integration/dashboard-page.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { HubEventRow } from '../../protocol/dashboard.ts';
import {
  type ClusterEventRow,
  clusterStateText,
  eventLogView,
  filterLabelled,
  parseClusterEvents,
  parseClusterHealth,
} from '../../web/src/dashboard/cluster.ts';

const ev = (seq: number, atMs: number, detail = `e${seq}`, over: Partial<HubEventRow> = {}): HubEventRow => ({
  seq,
  atMs,
  kind: 'recruit',
  model: 'm',
  detail,
  ...over,
});
const cev = (hub: string, seq: number, atMs: number, detail = `${hub}:${seq}`): ClusterEventRow => ({ ...ev(seq, atMs, detail), hub });

test('parseClusterHealth: a hub alone is null; members checked (ids, http(s) links only, counts), this hub always listed', () => {
  assert.equal(parseClusterHealth({ ok: true, coordinators: [] }), null);
  assert.equal(parseClusterHealth({ cluster: { hub_id: 'bad id', state: 'ready' } }), null);
  assert.equal(parseClusterHealth({ cluster: { hub_id: 'a', state: 'lost' } }), null);
  assert.equal(parseClusterHealth('nonsense'), null);
  const v = parseClusterHealth({
    cluster: {
      hub_id: 'hub-b',
      state: 'ready',
      since_ms: 5,
      error: null,
      members: [
        { hub: 'hub-a', public_url: 'http://a:1/', workers: 3 },
        { hub: 'hub-b', public_url: 'javascript:alert(1)', workers: 0 },
        { hub: 'hub-c', public_url: null, workers: null },
        { hub: 'hub-a', public_url: 'http://dup:1', workers: 9 },
        { hub: 'x y', public_url: 'http://x:1', workers: 1 },
        { hub: 'hub-d', public_url: 'http://d:4', workers: -1 },
        'garbage',
      ],
    },
  });
  assert.deepEqual(v, {
    hubId: 'hub-b',
    state: 'ready',
    sinceMs: 5,
    error: null,
    hubs: [
      { hub: 'hub-a', url: 'http://a:1', workers: 3 },
      { hub: 'hub-b', url: null, workers: 0 },
      { hub: 'hub-c', url: null, workers: null },
      { hub: 'hub-d', url: 'http://d:4', workers: null },
    ],
  });
  // An older hub (no members): the ids of `hubs`, then the URLs of `hub_urls`; this hub added when missing.
  const old = parseClusterHealth({
    cluster: { hub_id: 'me', state: 'degraded', error: 'gone', hubs: ['a'], hub_urls: ['http://a:1', 'ftp://x'] },
  });
  assert.deepEqual(
    old?.hubs.map((h) => [h.hub, h.url]),
    [
      ['me', null],
      ['a', null],
      ['http://a:1', 'http://a:1'],
    ],
  );
  const many = parseClusterHealth({
    cluster: {
      hub_id: 'h0',
      state: 'ready',
      members: Array.from({ length: 500 }, (_, i) => ({ hub: `h${i}`, public_url: null, workers: i })),
    },
  });
  assert.equal(many?.hubs.length, 64, 'capped');
  assert.equal(
    clusterStateText(old!, () => 'T'),
    'degraded: gone; serving with its own workers',
  );
  assert.equal(
    clusterStateText(v!, () => '12:00:00'),
    'connected since 12:00:00',
  );
});

test('parseClusterEvents: rows that are not a hub’s are left out, long fields cut', () => {
  const rows = parseClusterEvents({
    events: [
      cev('hub-a', 1, 10),
      { ...cev('hub-b', 2, 11), kind: 'nonsense' },
      { ...cev('hub-b', 3, 12), hub: '<script>' },
      { ...cev('hub-b', 4, 13), seq: -1 },
      { ...cev('hub-b', 5, 14), model: 7 },
      { ...cev('hub-b', 6, 15), detail: 'x'.repeat(5000), model: null },
      null,
    ],
  });
  assert.deepEqual(
    rows.map((r) => [r.hub, r.seq, r.detail.length, r.model]),
    [
      ['hub-a', 1, 'hub-a:1'.length, 'm'],
      ['hub-b', 6, 2000, null],
    ],
  );
  assert.deepEqual(parseClusterEvents({ events: 'no' }), []);
  assert.equal(parseClusterEvents({ events: Array.from({ length: 3000 }, (_, i) => cev('a', i, i)) }).length, 1000);
});

test('eventLogView: alone, pending, the cluster merged with this hub’s live events, and 503 with a note', () => {
  const own = [ev(1, 100, 'own 1'), ev(2, 300, 'own 2'), ev(3, 500, 'own 3')];
  // A hub alone: its own, no hub, no note.
  const alone = eventLogView(own, { state: 'off' }, null);
  assert.deepEqual(
    alone.rows.map((r) => [r.hub, r.detail]),
    [
      [null, 'own 1'],
      [null, 'own 2'],
      [null, 'own 3'],
    ],
  );
  assert.deepEqual([alone.hubs, alone.cluster, alone.note], [[], false, null]);
  // In a cluster, not read yet: its own, labelled with it, no note.
  const pending = eventLogView(own, { state: 'pending' }, 'hub-a');
  assert.deepEqual([pending.rows.every((r) => r.hub === 'hub-a'), pending.note, pending.cluster], [true, null, false]);
  // Read: the cluster's rows (this hub's first two among them), and own 3 (newer than the list) added, by time.
  const rows = [cev('hub-a', 1, 100, 'own 1'), cev('hub-b', 7, 200), cev('hub-a', 2, 300, 'own 2'), cev('hub-b', 8, 600)];
  const merged = eventLogView(own, { state: 'ok', rows }, 'hub-a');
  assert.deepEqual(
    merged.rows.map((r) => [r.hub, r.detail]),
    [
      ['hub-a', 'own 1'],
      ['hub-b', 'hub-b:7'],
      ['hub-a', 'own 2'],
      ['hub-a', 'own 3'],
      ['hub-b', 'hub-b:8'],
    ],
  );
  assert.deepEqual([merged.hubs, merged.cluster, merged.note], [['hub-a', 'hub-b'], true, null]);
  assert.equal(new Set(merged.rows.map((r) => r.key)).size, merged.rows.length, 'keys unique');
  // A hub restarted under the same id numbers its events again: the keys stay unique.
  const again = eventLogView([], { state: 'ok', rows: [cev('hub-b', 1, 1), cev('hub-b', 1, 2), cev('hub-c', 1, 3)] }, 'hub-a');
  assert.deepEqual(
    again.rows.map((r) => r.key),
    ['hub-b/1', 'hub-b/1#1', 'hub-c/1'],
  );
  // Bounded: the newest `max`.
  assert.deepEqual(
    eventLogView(own, { state: 'ok', rows }, 'hub-a', 2).rows.map((r) => r.detail),
    ['own 3', 'hub-b:8'],
  );
  // 503: this hub's own, labelled, and the note says why.
  const down = eventLogView(own, { state: 'unavailable', reason: 'CLUSTER_UNAVAILABLE: Redis is away' }, 'hub-a');
  assert.deepEqual(
    down.rows.map((r) => [r.hub, r.detail]),
    [
      ['hub-a', 'own 1'],
      ['hub-a', 'own 2'],
      ['hub-a', 'own 3'],
    ],
  );
  assert.equal(down.note, "The cluster's events are unavailable (CLUSTER_UNAVAILABLE: Redis is away); showing this hub's own.");
  assert.equal(down.cluster, false);
});

test('filterLabelled: by hub, kind and model, newest first', () => {
  const rows = eventLogView(
    [],
    { state: 'ok', rows: [cev('a', 1, 1), { ...cev('b', 2, 2), kind: 'quarantine' }, cev('b', 3, 3), { ...cev('a', 4, 4), model: 'n' }] },
    'a',
  ).rows;
  const seqs = (f: Parameters<typeof filterLabelled>[1]) => filterLabelled(rows, f, 10).map((r) => r.seq);
  assert.deepEqual(seqs({ kind: '', model: '', hub: '' }), [4, 3, 2, 1]);
  assert.deepEqual(seqs({ kind: '', model: '', hub: 'b' }), [3, 2]);
  assert.deepEqual(seqs({ kind: 'quarantine', model: '', hub: '' }), [2]);
  assert.deepEqual(seqs({ kind: '', model: 'm', hub: 'a' }), [1]);
});
