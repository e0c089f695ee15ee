/**
 * The pure parts of issue 30's cluster feed, outbox and record decoder: which reading the recruiter judges by
 * (clusterReading's table), event stream entries and readings written and read back (garbage refused), each worker
 * record decoded once (RecordDecoder), and the credit outbox over a real SQLite store (kept across a reopen).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  clusterReading,
  decodeEventEntry,
  decodeReading,
  encodeEventFields,
  encodeReading,
  type HubReading,
} from '../../hub/cluster/cluster-feed.ts';
import { CreditOutbox } from '../../hub/cluster/credit-outbox.ts';
import { RecordDecoder } from '../../hub/cluster/record-decoder.ts';
import { encodeWorker, type ClusterWorker } from '../../hub/cluster/codec.ts';
import { clusterWorker } from '../../harness/cluster-fixtures.ts';
import type { SlotsReading } from '../../hub/market/saturation.ts';
import { HubStore } from '../../hub/store.ts';

const NOW = 1_000_000;
const r = (busy: number | null, ageMs = 0, source: SlotsReading['source'] = 'slots'): SlotsReading => ({
  atMs: NOW - ageMs,
  busy,
  slots: 4,
  source,
});
const other = (hub: string, reading: SlotsReading): HubReading => ({ hub, reading });

test('clusterReading: this hub’s own unless it is not saturated and another hub’s fresh one is', () => {
  const cases: Array<[string, SlotsReading | undefined, HubReading[], SlotsReading | undefined]> = [
    ['alone, idle', r(0), [], r(0)],
    ['alone, none', undefined, [], undefined],
    ['own saturated wins', r(3), [other('b', r(4))], r(3)],
    ['own idle, another saturated', r(0), [other('b', r(2, 100))], r(2, 100)],
    ['own none, another saturated', undefined, [other('b', r(2))], r(2)],
    ['the freshest saturated other', r(1), [other('b', r(2, 500)), other('c', r(3, 100))], r(3, 100)],
    ['another idle: own', r(1), [other('b', r(1))], r(1)],
    ['another stale: own', r(1), [other('b', r(4, 3_000))], r(1)],
    ['another of unknown source: own', r(1), [other('b', r(4, 0, 'unknown'))], r(1)],
    ['another without a busy count: own', r(0), [other('b', r(null))], r(0)],
  ];
  for (const [name, own, others, want] of cases) assert.deepEqual(clusterReading(own, others, 2, NOW, 2_000), want, name);
});

test('event entries and readings round-trip; what a hub does not write is refused', () => {
  const e = { seq: 7, atMs: 123, kind: 'recruit' as const, model: 'm', detail: 'layer 1 experts [0, 8) to w1' };
  assert.deepEqual(decodeEventEntry(encodeEventFields('hub-a', e)), { ...e, hub: 'hub-a' });
  assert.deepEqual(decodeEventEntry(encodeEventFields('hub-a', { ...e, model: null })), { ...e, model: null, hub: 'hub-a' });
  const good = encodeEventFields('hub-a', e);
  const bad: Array<[string, unknown]> = [
    ['not a list', 'x'],
    ['odd length', good.slice(1)],
    ['a hub id with a space', good.map((v, i) => (i === 3 ? 'x y' : v))],
    ['seq not a number', good.map((v, i) => (i === 5 ? 'one' : v))],
    ['unknown kind', good.map((v, i) => (i === 9 ? 'party' : v))],
    ['another version', good.map((v, i) => (i === 1 ? '2' : v))],
    ['no detail', good.slice(0, 12)],
  ];
  for (const [name, fields] of bad) assert.equal(decodeEventEntry(fields), null, name);

  const reading = r(2, 10);
  assert.deepEqual(decodeReading(encodeReading('hub-b', reading), 'hub-b'), reading);
  assert.equal(decodeReading(encodeReading('hub-b', reading), 'hub-c'), null, "another hub's key");
  for (const text of ['{', '[]', '{"v":1,"hub":"hub-b","at_ms":-1,"busy":1,"slots":4,"source":"slots"}', 42, null])
    assert.equal(decodeReading(text, 'hub-b'), null, String(text));
});

const worker = (id: string, seen: number): ClusterWorker =>
  clusterWorker({ worker_id: id, ranges: [[0, 0, 8]], seen_ms: seen, attach_ms: 1 });

test('RecordDecoder: an unchanged text is the same object, a changed one decoded anew, garbage reported each time', () => {
  const d = new RecordDecoder();
  const entry = (id: string, text: string, model = 'm') => ({ model, id, key: `p:worker:${id}`, text });
  const first = d.decode([entry('w1', encodeWorker(worker('w1', 5))), entry('w2', encodeWorker(worker('w2', 5))), entry('w3', '{')]);
  assert.equal(first.decoded, 3);
  assert.equal(first.workers.length, 2);
  assert.equal(first.corrupt.length, 1);
  const second = d.decode([entry('w1', encodeWorker(worker('w1', 5))), entry('w2', encodeWorker(worker('w2', 6))), entry('w3', '{')]);
  assert.equal(second.decoded, 1, 'only w2 changed');
  assert.equal(second.workers[0], first.workers[0], 'w1 is the same object');
  assert.notEqual(second.workers[1], first.workers[1]);
  assert.equal(second.corrupt.length, 1, 'the garbage is reported again');
  assert.equal(
    d.decode([entry('w1', encodeWorker(worker('w1', 5)), 'other')]).workers.length,
    0,
    "a record of another model than its set's",
  );
  d.clear();
  assert.equal(d.decode([entry('w1', encodeWorker(worker('w1', 5)))]).decoded, 1, 'cleared: decoded anew');
});

test('CreditOutbox: stored before it is sent, kept across a reopen until done, item ids unique per start', () => {
  const dir = mkdtempSync(join(tmpdir(), 'es-outbox-unit-'));
  try {
    const path = join(dir, 'hub.sqlite');
    let store = new HubStore(path);
    const o = new CreditOutbox(store, 'hub-a', NOW);
    const c1 = o.add('W1', 3, NOW);
    const c2 = o.add('W2', 4, NOW + 1);
    assert.match(c1.item, /^hub-a:[0-9a-z]+-[0-9a-f]{4}:1$/);
    assert.equal(store.outbox().length, 2, 'in SQLite at once');
    o.done(c1.item);
    store.close();
    store = new HubStore(path); // the hub killed and started again
    const o2 = new CreditOutbox(store, 'hub-a', NOW);
    assert.equal(o2.load(), 1);
    assert.deepEqual(o2.pending(), [c2]);
    assert.notEqual(o2.add('W1', 1, NOW).item, c1.item, 'a new start does not reuse an item id');
    assert.equal(o2.load(), 0, 'loading twice adds nothing');
    store.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
