/**
 * The cluster's pure parts (hub/cluster/keys.ts, codec.ts, shared.ts): `--redis` URLs, names that go into keys, the key
 * layout, every value read back from Redis checked (a table of garbage, each refused with CLUSTER_STATE_CORRUPT), the
 * cluster's coverage view (this hub's plus the mirror) and the single hub's credit book (each item once, in SQLite).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isHubError } from '../../hub/errors.ts';
import { checkHubId, checkPrefix, clusterKeys, isCreditItem, parseRedisUrl, redactRedisUrl } from '../../hub/cluster/keys.ts';
import {
  type ClusterWorker,
  checkCreditWrite,
  decodeBus,
  decodeCount,
  decodeCredit,
  decodeQuarantine,
  decodeWorker,
  encodeBus,
  encodeQuarantine,
  encodeWorker,
} from '../../hub/cluster/codec.ts';
import { ClusterCoverage, LocalCreditBook } from '../../hub/cluster/shared.ts';
import { CoverageStore } from '../../hub/market/coverage.ts';
import { HubStore } from '../../hub/store.ts';
import type { ModelShape } from '../../hub/market/types.ts';

const corruptCode = (fn: () => unknown, what: string): void => {
  assert.throws(fn, (e: unknown) => isHubError(e, 'CLUSTER_STATE_CORRUPT') && e.status === 502, what);
};

test('parseRedisUrl: the URL forms --redis takes, and what it refuses', () => {
  const good: Array<[string, unknown]> = [
    ['redis://127.0.0.1:6380', { host: '127.0.0.1', port: 6380 }],
    ['redis://cache.internal', { host: 'cache.internal', port: 6379 }],
    ['redis://cache:7000/3', { host: 'cache', port: 7000, db: 3 }],
    ['redis://user:p%40ss@cache:7000', { host: 'cache', port: 7000, username: 'user', password: 'p@ss' }],
    ['redis://:secret@cache', { host: 'cache', port: 6379, password: 'secret' }],
    ['rediss://cache:6380', { host: 'cache', port: 6380, tls: {} }],
    ['redis://[::1]:6380', { host: '::1', port: 6380 }],
    ['unix:///run/redis/redis.sock', { path: '/run/redis/redis.sock' }],
    ['unix:///tmp/r.sock?db=2', { path: '/tmp/r.sock', db: 2 }],
    ['/tmp/xsredis-1/redis.sock', { path: '/tmp/xsredis-1/redis.sock' }],
  ];
  for (const [url, want] of good) assert.deepEqual(parseRedisUrl(url), want, url);
  for (const bad of ['', 'localhost:6379', 'http://cache:6379', 'redis://cache/x', 'redis://cache/-1', 'unix://', 'redis://']) {
    assert.throws(() => parseRedisUrl(bad), RangeError, JSON.stringify(bad));
  }
  assert.equal(redactRedisUrl('redis://user:hunter2@cache:6379/0'), 'redis://user:***@cache:6379/0');
  assert.equal(redactRedisUrl('unix:///tmp/r.sock'), 'unix:///tmp/r.sock');
});

test('names in keys: hub ids, prefixes, credit items; the key layout', () => {
  for (const ok of ['hub-a', 'h1', 'box.example_7-1234-beef', 'x'.repeat(64)]) assert.equal(checkHubId(ok), ok);
  for (const bad of ['', 'a b', 'a:b', 'x'.repeat(65), 'ü']) assert.throws(() => checkHubId(bad), RangeError, bad);
  for (const bad of ['', 'a:b', 'x'.repeat(33)]) assert.throws(() => checkPrefix(bad), RangeError, bad);
  const items: Array<[unknown, boolean]> = [
    ['wide:7:1:w1', true],
    ['hub-a:12', true],
    ['x'.repeat(256), true],
    ['', false],
    ['x'.repeat(257), false],
    ['has space', false],
    ['tab\there', false],
    ['ü', false],
    [42, false],
  ];
  for (const [item, want] of items) assert.equal(isCreditItem(item), want, JSON.stringify(item));
  const k = clusterKeys('xs');
  assert.deepEqual(
    [k.worker('w:1'), k.workers('tiny-moe'), k.quarantine, k.wallet('W'), k.credited('i'), k.hub('a'), k.hubs, k.bus],
    ['xs:worker:w:1', 'xs:workers:tiny-moe', 'xs:quarantine', 'xs:wallet:W', 'xs:credited:i', 'xs:hub:a', 'xs:hubs', 'xs:bus'],
  );
  assert.equal(clusterKeys().worker('w'), 'expertswarm:worker:w', 'the default prefix');
});

const record = (over: Partial<ClusterWorker> = {}): ClusterWorker => ({
  v: 1,
  worker_id: 'w1',
  hub: 'hub-a',
  model: 'wide',
  wallet: 'Wal1et',
  ranges: [[0, 0, 128]],
  replica: true,
  seen_ms: 1_800_000_000_000,
  attach_ms: 1_800_000_000_000,
  last_serve_ms: null,
  latency_ms: 12.5,
  audits: 3,
  audits_passed: 3,
  audit_nmse_last: 0,
  audit_nmse_max: 1e-9,
  quarantined: false,
  released: false,
  ...over,
});

test('worker records: what a hub writes reads back; a table of garbage, each CLUSTER_STATE_CORRUPT', () => {
  const key = 'xs:worker:w1';
  assert.deepEqual(decodeWorker(encodeWorker(record()), key, 'w1'), record());
  assert.deepEqual(decodeWorker(encodeWorker(record({ wallet: null, last_serve_ms: 5, latency_ms: null })), key).wallet, null);
  const bad: Array<[string, unknown]> = [
    ['nil', null],
    ['not JSON', 'not json'],
    ['a JSON array', '[1,2]'],
    ['a number', 42],
    ['too long', `{"x":"${'a'.repeat(70_000)}"}`],
    ['another version', encodeWorker({ ...record(), v: 2 } as unknown as ClusterWorker)],
    ['no version', JSON.stringify({ ...record(), v: undefined })],
    ['another worker under this key', encodeWorker(record({ worker_id: 'w2' }))],
    ['empty worker id', encodeWorker(record({ worker_id: '' }))],
    ['a hub id too long', encodeWorker(record({ hub: 'h'.repeat(65) }))],
    ['ranges not an array', JSON.stringify({ ...record(), ranges: 'all' })],
    ['a range of two numbers', JSON.stringify({ ...record(), ranges: [[0, 1]] })],
    ['a range begin ≥ end', JSON.stringify({ ...record(), ranges: [[0, 5, 5]] })],
    ['a negative range', JSON.stringify({ ...record(), ranges: [[0, -1, 5]] })],
    ['a fractional range', JSON.stringify({ ...record(), ranges: [[0, 0.5, 5]] })],
    ['too many ranges', JSON.stringify({ ...record(), ranges: Array.from({ length: 5000 }, (_, i) => [0, i, i + 1]) })],
    ['replica not a boolean', JSON.stringify({ ...record(), replica: 1 })],
    ['seen_ms negative', JSON.stringify({ ...record(), seen_ms: -1 })],
    ['seen_ms a string', JSON.stringify({ ...record(), seen_ms: '1' })],
    ['latency NaN (as a string)', JSON.stringify({ ...record(), latency_ms: 'NaN' })],
    ['audits fractional', JSON.stringify({ ...record(), audits: 1.5 })],
    ['wallet a number', JSON.stringify({ ...record(), wallet: 7 })],
    ['quarantined missing', JSON.stringify({ ...record(), quarantined: undefined })],
  ];
  for (const [what, text] of bad) corruptCode(() => decodeWorker(text, key, 'w1'), what);
  try {
    decodeWorker('garbage', key);
    assert.fail('refused');
  } catch (e) {
    assert.ok(isHubError(e) && e.message.includes(key), 'the refusal names the key');
  }
});

test('quarantine entries, counts, wallet hashes and bus messages: good ones read back, garbage refused', () => {
  assert.deepEqual(decodeQuarantine(encodeQuarantine({ reason: 'a failed audit', since_ms: 5, hub: 'hub-a' }), 'q'), {
    reason: 'a failed audit',
    since_ms: 5,
    hub: 'hub-a',
  });
  for (const bad of [
    'garbage',
    '{}',
    JSON.stringify({ v: 1, reason: '', since_ms: 1, hub: 'a' }),
    JSON.stringify({ v: 1, reason: 'r', hub: 'a' }),
  ]) {
    corruptCode(() => decodeQuarantine(bad, 'q'), bad);
  }
  assert.equal(decodeCount('42', 'k'), 42);
  assert.equal(decodeCount(7, 'k'), 7);
  for (const bad of ['-1', '1.5', 'abc', '', '99999999999999999', null, '1e3']) corruptCode(() => decodeCount(bad, 'k'), String(bad));
  assert.equal(decodeCredit({}, 'w'), undefined, 'no hash: never credited');
  assert.deepEqual(decodeCredit({ credit_pairs: '12', first_seen_ms: '5', last_seen_ms: '9' }, 'w'), {
    credit_pairs: 12,
    first_seen_ms: 5,
    last_seen_ms: 9,
  });
  assert.deepEqual(decodeCredit({ last_seen_ms: '9' }, 'w'), { credit_pairs: 0, first_seen_ms: null, last_seen_ms: 9 });
  for (const bad of [{ credit_pairs: 'abc' }, { credit_pairs: '1', junk: 'x' }, 'string', null, [1]]) {
    corruptCode(() => decodeCredit(bad, 'w'), JSON.stringify(bad));
  }
  const q = { kind: 'quarantine', subject: 'w1', reason: 'r', hub: 'hub-a' } as const;
  const c = { kind: 'credit', wallet: 'W', credit_pairs: 5, hub: 'hub-b' } as const;
  assert.deepEqual(decodeBus(encodeBus(q), 'bus'), q);
  assert.deepEqual(decodeBus(encodeBus(c), 'bus'), c);
  for (const bad of [
    'garbage',
    JSON.stringify({ v: 1, kind: 'nuke', hub: 'a' }),
    JSON.stringify({ v: 1, kind: 'credit', wallet: 'W', credit_pairs: -1, hub: 'a' }),
  ]) {
    corruptCode(() => decodeBus(bad, 'bus'), bad);
  }
  assert.throws(() => checkCreditWrite('has space', 'W', 1), RangeError);
  assert.throws(() => checkCreditWrite('i', '', 1), RangeError);
  assert.throws(() => checkCreditWrite('i', 'W', -1), RangeError);
  assert.throws(() => checkCreditWrite('i', 'W', 1.5), RangeError);
});

const shape: ModelShape = {
  model: 'm',
  nLayer: 2,
  nExpert: 8,
  nEmbd: 16,
  moeLayers: [0, 1],
  bytesPerExpert: 64,
  maxMatrixBytesPerExpert: 32,
};

test("ClusterCoverage: this hub's coverage and the mirror's read as one", () => {
  const local = new CoverageStore();
  const remote = new CoverageStore();
  local.addModel(shape);
  remote.addModel(shape);
  local.heartbeat('a1', 'm', [[0, 0, 4]], 1);
  local.heartbeat('a2', 'm', [[0, 2, 8]], 1, false); // held, no work link: not a replica
  remote.heartbeat('b1', 'm', [[0, 0, 8]], 1);
  remote.heartbeat('b2', 'm', [[1, 0, 8]], 1);
  const view = new ClusterCoverage(local, remote);
  assert.equal(view.workerCount('m'), 4);
  assert.equal(view.replicaWorkerCount('m'), 3);
  assert.deepEqual(view.workersOf('m').sort(), ['a1', 'a2', 'b1', 'b2']);
  assert.deepEqual([...view.replicaCounts('m', 0)], [2, 2, 2, 2, 1, 1, 1, 1]);
  assert.deepEqual([...view.replicaCounts('m', 1)], [1, 1, 1, 1, 1, 1, 1, 1]);
  assert.deepEqual([...local.replicaCounts('m', 0)], [1, 1, 1, 1, 0, 0, 0, 0], "the view does not change this hub's counts");
  assert.deepEqual(view.heldRanges('b2'), [[1, 0, 8]]);
  assert.equal(view.modelOf('a2'), 'm');
  assert.equal(view.modelOf('nobody'), undefined);
  assert.equal(view.workerCount('other'), 0);
});

test('CoverageStore tells its listener of every change (the cluster publishes from there)', () => {
  const store = new CoverageStore();
  store.addModel(shape);
  const seen: string[] = [];
  store.onChange = (id, model) => seen.push(`${id}@${model}`);
  store.heartbeat('w', 'm', [[0, 0, 2]], 1);
  assert.throws(() => store.heartbeat('w', 'm', [[0, 0, 99]], 2), 'a refused heartbeat changes nothing');
  store.heartbeat('x', 'm', [], 3, false);
  assert.equal(store.isReplica('x'), false);
  assert.equal(store.isReplica('w'), true);
  store.evictStale(10, 5);
  assert.deepEqual(seen, ['w@m', 'x@m', 'w@m', 'x@m']);
  assert.equal(store.remove('w'), false);
  assert.equal(seen.length, 4, 'removing an unknown worker tells nobody');
});

test('LocalCreditBook: each item credited once in SQLite; a failed write takes its mark back', async () => {
  const store = new HubStore(':memory:');
  try {
    let fail = false;
    const book = new LocalCreditBook(store, (wallet, pairs) => {
      if (fail) throw new Error('disk full');
      store.addCredit(wallet, pairs, 1);
    });
    assert.deepEqual(await book.creditOnce('m:1:0:w1', 'W', 5, 1), { credited: true, credit: 5 });
    assert.deepEqual(await book.creditOnce('m:1:0:w1', 'W', 5, 2), { credited: false, credit: 5 }, 'the same item again');
    assert.deepEqual(await book.creditOnce('m:2:0:w1', 'W', 3, 3), { credited: true, credit: 8 });
    fail = true;
    await assert.rejects(book.creditOnce('m:3:0:w1', 'W', 4, 4), /disk full/);
    fail = false;
    assert.deepEqual(await book.creditOnce('m:3:0:w1', 'W', 4, 5), { credited: true, credit: 12 }, 'the failed item was not marked');
    await assert.rejects(book.creditOnce('bad item', 'W', 1, 6), RangeError);
    assert.equal((await book.creditAnswer('W')).credit_pairs, 12);
    assert.deepEqual(await book.creditAnswer('nobody'), { wallet: 'nobody', credit_pairs: 0, first_seen_ms: null, last_seen_ms: null });
    store.quarantine('w9', 'r', 7);
    assert.deepEqual(store.quarantined(), [{ subject: 'w9', reason: 'r', since_ms: 7 }]);
  } finally {
    store.close();
  }
});
