/**
 * The dashboard stream's framing and its set of clients (hub/dashboard/stream.ts) with fake sinks; the admin token
 * check and the admin bodies (admin.ts); the event log's sequence numbers and filters (hub/events.ts).
 */
import { mock, test } from 'node:test';
import assert from 'node:assert/strict';
import { DashboardStreams, SSE_HEADERS, SSE_PING, type StreamSink, sseMessage } from '../../hub/dashboard/stream.ts';
import { AdminGate, checkedAdminToken, dispatchBody, quarantineBody, releaseBody, targetBody } from '../../hub/dashboard/admin.ts';
import { EventLog, HUB_EVENT_KINDS } from '../../hub/events.ts';
import { DashboardSampler, type ModelReading } from '../../hub/dashboard/sampler.ts';
import { isHubError, type ErrorCode } from '../../hub/errors.ts';
import {
  ADMIN_REASON_MAX_CHARS,
  type CoverageMap,
  type HubEventKindName,
  type ModelStatus,
  STREAMS_MAX,
  type Tick,
} from '../../protocol/dashboard.ts';

class FakeSink implements StreamSink {
  chunks: string[] = [];
  writableLength = 0;
  destroyed = false;
  ended = false;
  /** Bytes the fake "socket" takes per write before it backs up (Infinity: a fast reader). */
  constructor(private readonly drainsPerWrite = Number.POSITIVE_INFINITY) {}
  private onClose: (() => void) | null = null;
  private onDrain: (() => void) | null = null;
  write(chunk: string): boolean {
    this.chunks.push(chunk);
    this.writableLength = Math.max(0, this.writableLength + chunk.length - this.drainsPerWrite);
    return this.writableLength === 0;
  }
  /** The "socket" takes `bytes` of what is queued; 'drain' when nothing is left, as a ServerResponse does. */
  read(bytes: number): void {
    this.writableLength = Math.max(0, this.writableLength - bytes);
    if (this.writableLength === 0) {
      const d = this.onDrain;
      this.onDrain = null;
      d?.();
    }
  }
  end(): void {
    this.ended = true;
    this.onClose?.();
  }
  destroy(): void {
    this.destroyed = true;
    this.onClose?.();
  }
  once(event: 'close' | 'drain', listener: () => void): unknown {
    if (event === 'close') this.onClose = listener;
    else this.onDrain = listener;
    return this;
  }
  close(): void {
    this.onClose?.();
  }
}

const tick = (atMs: number): Tick => ({ atMs, models: [], samples: {}, totals: { volunteers: {}, workers: 0 } });

/** Parses SSE text into (event, data) pairs the way a browser's EventSource does (comments skipped). */
function parseSse(text: string): Array<{ event: string; data: string }> {
  const out: Array<{ event: string; data: string }> = [];
  for (const block of text.split('\n\n')) {
    if (block === '') continue;
    let event = 'message';
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue;
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data.push(line.slice(6));
    }
    if (data.length > 0) out.push({ event, data: data.join('\n') });
  }
  return out;
}

test('sseMessage: one event line, one data line, a blank line; names and data that would break the framing are refused', () => {
  assert.equal(sseMessage('tick', '{"a":1}'), 'event: tick\ndata: {"a":1}\n\n');
  const text = JSON.stringify({ detail: 'two\nlines and a \r too' });
  assert.deepEqual(parseSse(sseMessage('event', text)), [{ event: 'event', data: text }], 'JSON escapes newlines in strings');
  assert.deepEqual(JSON.parse(parseSse(sseMessage('event', text))[0]?.data ?? ''), { detail: 'two\nlines and a \r too' });
  for (const bad of ['', 'Tick', 'ti ck', 'tick\n', 'a:b']) assert.throws(() => sseMessage(bad, '{}'), RangeError, JSON.stringify(bad));
  for (const bad of ['{\n}', 'a\rb']) assert.throws(() => sseMessage('tick', bad), RangeError);
  assert.equal(SSE_PING, ': ping\n\n');
  assert.deepEqual(parseSse(SSE_PING), [], 'a ping is a comment: no event');
  assert.equal(SSE_HEADERS['content-type'], 'text/event-stream; charset=utf-8');
  assert.equal(SSE_HEADERS['cache-control'], 'no-store');
  assert.equal(SSE_HEADERS['x-accel-buffering'], 'no');
});

test('DashboardStreams: snapshot first, one serialisation per broadcast for every client, closed clients leave', () => {
  const streams = new DashboardStreams({ maxStreams: 3 });
  const a = new FakeSink();
  const b = new FakeSink();
  streams.open(a, 'ip-a', 'tick', tick(1));
  streams.open(b, 'ip-b', 'tick', tick(2));
  assert.equal(streams.size, 2);
  const realStringify = JSON.stringify;
  let calls = 0;
  JSON.stringify = ((...args: Parameters<typeof JSON.stringify>) => {
    calls++;
    return realStringify(...args);
  }) as typeof JSON.stringify;
  try {
    streams.broadcast('tick', tick(3));
  } finally {
    JSON.stringify = realStringify;
  }
  assert.equal(calls, 1, 'serialised once for both clients');
  assert.deepEqual(
    parseSse(a.chunks.join('')).map((m) => [m.event, JSON.parse(m.data).atMs]),
    [
      ['tick', 1],
      ['tick', 3],
    ],
  );
  assert.equal(b.chunks.at(-1), a.chunks.at(-1), 'the same bytes to both');
  b.close();
  assert.equal(streams.size, 1);
  streams.broadcast('tick', tick(4));
  assert.equal(b.chunks.length, 2, 'a closed client gets nothing more');
  streams.closeAll();
  assert.deepEqual([a.ended, streams.size], [true, 0]);
});

test('DashboardStreams: the cap refuses with TOO_MANY_STREAMS before writing; a slow consumer is cut off', () => {
  assert.equal(STREAMS_MAX, 64);
  const streams = new DashboardStreams({ maxStreams: 2, backlogMaxBytes: 1000 });
  const fast = new FakeSink();
  const slow = new FakeSink(0); // reads nothing
  streams.open(fast, 'ip-a', 'tick', tick(0));
  streams.open(slow, 'ip-b', 'tick', tick(0));
  const third = new FakeSink();
  assert.throws(
    () => streams.assertRoom('ip-c'),
    (e: unknown) => isHubError(e, 'TOO_MANY_STREAMS') && e.status === 503,
  );
  let n = 0;
  while (!slow.destroyed && n < 100) streams.broadcast('tick', tick(++n));
  assert.ok(slow.destroyed, 'dropped once its backlog passed 1000 bytes');
  assert.ok(slow.chunks.join('').length > 1000 && slow.chunks.join('').length < 1200, 'not long after');
  assert.deepEqual([fast.destroyed, streams.size, streams.slowDropped], [false, 1, 1]);
  streams.assertRoom('ip-c');
  streams.open(third, 'ip-c', 'tick', tick(0));
  assert.equal(streams.size, 2, 'its place is free again');
  streams.closeAll();
});

test('DashboardStreams: a ping comment every pingMs while a stream is open, none after closeAll (mocked timers)', () => {
  mock.timers.enable({ apis: ['setInterval'] });
  try {
    const streams = new DashboardStreams({ pingMs: 20 });
    const a = new FakeSink();
    streams.open(a, 'ip-a', 'tick', tick(0));
    const pings = (): number => a.chunks.filter((c) => c === SSE_PING).length;
    mock.timers.tick(19);
    assert.equal(pings(), 0, 'not before pingMs');
    mock.timers.tick(1);
    assert.equal(pings(), 1);
    mock.timers.tick(60);
    assert.equal(pings(), 4, 'one per 20 ms');
    streams.closeAll();
    const after = a.chunks.length;
    mock.timers.tick(100);
    assert.equal(a.chunks.length, after, 'no ping after closeAll');
  } finally {
    mock.timers.reset();
  }
});

test('DashboardStreams: the snapshot is not a backlog — a slow link gets it whole and is cut only for what follows', () => {
  const streams = new DashboardStreams({ backlogMaxBytes: 1000 });
  const big = { ...tick(0), totals: { volunteers: {}, workers: 0 }, pad: 'x'.repeat(300_000) } as unknown as Tick;
  const slow = new FakeSink(0); // a slow link: nothing read yet
  streams.open(slow, 'ip-a', 'tick', big);
  assert.ok(slow.writableLength > 300_000, 'the whole snapshot is queued');
  for (let n = 1; n <= 5; n++) streams.broadcast('tick', tick(n));
  assert.equal(slow.destroyed, false, 'a few ticks behind its own snapshot: kept');
  // It reads the snapshot (the socket drains), then stalls: the backlog now counts from zero.
  slow.read(slow.writableLength);
  let n = 0;
  while (!slow.destroyed && n < 100) streams.broadcast('tick', tick(++n));
  assert.ok(slow.destroyed && n > 5, `cut off once ${n} ticks (> 1000 bytes) were left unread`);
  assert.equal(streams.slowDropped, 1);

  // Stalled from the start: cut once what follows the snapshot passes the bound, not later.
  const stalled = new FakeSink(0);
  streams.open(stalled, 'ip-b', 'tick', big);
  const queued = stalled.writableLength;
  n = 0;
  while (!stalled.destroyed && n < 100) streams.broadcast('tick', tick(++n));
  assert.ok(stalled.destroyed, 'a client that never reads is still cut');
  assert.ok(stalled.writableLength - queued > 1000 && stalled.writableLength - queued < 1200, 'once 1000 bytes followed');
  streams.closeAll();
});

test('DashboardStreams: per-address cap (TOO_MANY_STREAMS for the 5th) and a token bucket on opens (RATE_LIMITED)', () => {
  const clock = { now: 0 };
  const streams = new DashboardStreams({ maxStreams: 64, maxPerClient: 4, openRate: { capacity: 6, refillPerSec: 0.5 } }, () => clock.now);
  const open = (ip: string): FakeSink => {
    streams.assertRoom(ip);
    const s = new FakeSink();
    streams.open(s, ip, 'tick', tick(0));
    return s;
  };
  const mine = [open('10.0.0.1'), open('10.0.0.1'), open('10.0.0.1'), open('10.0.0.1')];
  assert.throws(
    () => streams.assertRoom('10.0.0.1'),
    (e: unknown) => isHubError(e, 'TOO_MANY_STREAMS') && e.status === 503,
    'the 5th from one address',
  );
  assert.equal(streams.openFrom('10.0.0.1'), 4);
  const operator = open('10.0.0.2');
  assert.equal(streams.size, 5, 'another address still gets in');
  // Closing and reopening at once: 2 more opens from the burst of 6, then the bucket is empty.
  for (let i = 0; i < 2; i++) {
    mine.pop()?.close();
    mine.push(open('10.0.0.1'));
  }
  mine.pop()?.close();
  assert.throws(
    () => streams.assertRoom('10.0.0.1'),
    (e: unknown) => isHubError(e, 'RATE_LIMITED') && e.status === 429 && e.headers['retry-after'] === '2',
  );
  clock.now += 2_000; // one token back at 0.5 per second
  mine.push(open('10.0.0.1'));
  assert.deepEqual([streams.openFrom('10.0.0.1'), streams.openFrom('10.0.0.2'), operator.destroyed], [4, 1, false]);
  streams.closeAll();
  assert.deepEqual([streams.size, streams.openFrom('10.0.0.1')], [0, 0]);
});

test('admin token: refused at startup when short; checked in constant time against Bearer <token>', () => {
  assert.equal(checkedAdminToken(undefined), null);
  assert.equal(checkedAdminToken(null), null);
  assert.equal(checkedAdminToken(''), null);
  assert.throws(() => checkedAdminToken('short-token-15ch'.slice(0, 15)), /at least 16 characters/);
  assert.throws(() => checkedAdminToken('sixteen chars ok'), /whitespace/);
  assert.throws(() => checkedAdminToken('x'.repeat(513)), /at most 512/);
  const token = 'correct-horse-battery-staple';
  assert.equal(checkedAdminToken(token), token);

  assert.equal(new AdminGate(null).enabled, false);
  assert.equal(new AdminGate(null).access(`Bearer ${token}`), 'disabled');
  const gate = new AdminGate(token);
  const table: Array<[header: string | undefined, want: 'ok' | 'invalid']> = [
    [`Bearer ${token}`, 'ok'],
    [undefined, 'invalid'],
    ['', 'invalid'],
    [token, 'invalid'],
    [`bearer ${token}`, 'invalid'],
    [`Bearer  ${token}`, 'invalid'],
    [`Bearer ${token} `, 'invalid'],
    [`Bearer ${token}x`, 'invalid'],
    [`Bearer ${token.slice(0, -1)}`, 'invalid'],
    [`Bearer ${token.toUpperCase()}`, 'invalid'],
    [`Basic ${token}`, 'invalid'],
    [`Bearer ${'a'.repeat(5000)}`, 'invalid'],
  ];
  for (const [header, want] of table) assert.equal(gate.access(header), want, JSON.stringify(header?.slice(0, 40)));
  const code = (f: () => void): ErrorCode | undefined => {
    try {
      f();
    } catch (e) {
      return isHubError(e) ? e.code : undefined;
    }
    return undefined;
  };
  assert.equal(
    code(() => gate.require(`Bearer ${token}`)),
    undefined,
  );
  assert.equal(
    code(() => gate.require('Bearer nope')),
    'ADMIN_TOKEN_INVALID',
  );
  assert.equal(
    code(() => new AdminGate(null).require(`Bearer ${token}`)),
    'ADMIN_DISABLED',
  );
});

test('admin bodies: each field checked, with BODY_INVALID for anything else', () => {
  assert.deepEqual(releaseBody(undefined), { reason: '' });
  assert.deepEqual(releaseBody({}), { reason: '' });
  assert.deepEqual(releaseBody({ reason: 'rebalancing' }), { reason: 'rebalancing' });
  assert.deepEqual(quarantineBody({ reason: 'wrong sums' }), { reason: 'wrong sums', wallet: false }, 'the worker id alone by default');
  assert.deepEqual(quarantineBody({ reason: 'wrong sums', wallet: true }), { reason: 'wrong sums', wallet: true });
  assert.deepEqual(targetBody({ base: 3 }), { base: 3 });
  assert.deepEqual(targetBody({ boost: 0 }), { boost: 0 });
  assert.deepEqual(targetBody({ base: 1, boost: 64 }), { base: 1, boost: 64 });
  assert.deepEqual(dispatchBody({ mode: 'off' }), { mode: 'off' });
  const bad: Array<[name: string, f: () => unknown]> = [
    ['release reason a number', () => releaseBody({ reason: 5 })],
    ['release reason too long', () => releaseBody({ reason: 'x'.repeat(ADMIN_REASON_MAX_CHARS + 1) })],
    ['release body an array', () => releaseBody([])],
    ['quarantine without reason', () => quarantineBody({})],
    ['quarantine blank reason', () => quarantineBody({ reason: '   ' })],
    ['quarantine no body', () => quarantineBody(undefined)],
    ['quarantine wallet "yes"', () => quarantineBody({ reason: 'x', wallet: 'yes' })],
    ['quarantine wallet 1', () => quarantineBody({ reason: 'x', wallet: 1 })],
    ['target empty', () => targetBody({})],
    ['target base 0', () => targetBody({ base: 0 })],
    ['target base 65', () => targetBody({ base: 65 })],
    ['target base 2.5', () => targetBody({ base: 2.5 })],
    ['target base "3"', () => targetBody({ base: '3' })],
    ['target boost -1', () => targetBody({ boost: -1 })],
    ['target boost 65', () => targetBody({ boost: 65 })],
    ['dispatch mode unknown', () => dispatchBody({ mode: 'sometimes' })],
    ['dispatch mode missing', () => dispatchBody({})],
    ['dispatch mode upper case', () => dispatchBody({ mode: 'OFF' })],
  ];
  for (const [name, f] of bad) assert.throws(f, (e: unknown) => isHubError(e, 'BODY_INVALID'), name);
  assert.equal(releaseBody({ reason: 'x'.repeat(ADMIN_REASON_MAX_CHARS) }).reason.length, ADMIN_REASON_MAX_CHARS);
});

test('EventLog: strictly increasing seqs, bounded ring, filters by kind and model, listeners see each add', () => {
  const log = new EventLog(5);
  const seen: number[] = [];
  const stop = log.subscribe((e) => seen.push(e.seq));
  for (let i = 0; i < 8; i++) log.add(i % 2 ? 'recruit' : 'admin', i % 3 ? 'a' : null, `e${i}`, 1000 + i);
  stop();
  log.add('admin', 'a', 'unseen', 2000);
  assert.deepEqual(seen, [1, 2, 3, 4, 5, 6, 7, 8]);
  assert.equal(log.total, 9);
  assert.deepEqual(
    log.recent(100).map((e) => e.seq),
    [5, 6, 7, 8, 9],
    'the newest 5 kept',
  );
  assert.deepEqual(
    log.query({ kind: 'admin', limit: 100 }).map((e) => e.detail),
    ['e4', 'e6', 'unseen'],
  );
  assert.deepEqual(
    log.query({ model: 'a', limit: 2 }).map((e) => e.detail),
    ['e7', 'unseen'],
    'the newest 2, newest last',
  );
  assert.deepEqual(
    log.query({ kind: 'recruit', model: 'a', limit: 10 }).map((e) => e.detail),
    ['e5', 'e7'],
  );
  assert.deepEqual(log.query({ kind: 'evict', limit: 10 }), []);
  // The wire's kinds and the log's kinds are the same set.
  const wire: Record<HubEventKindName, true> = {
    'saturation-onset': true,
    'saturation-end': true,
    recruit: true,
    release: true,
    evict: true,
    coordinator: true,
    quarantine: true,
    'volunteer-join': true,
    'volunteer-leave': true,
    'load-failed': true,
    dispatch: true,
    admin: true,
    'peer-report': true,
  };
  assert.deepEqual([...HUB_EVENT_KINDS].sort(), Object.keys(wire).sort());
});

test('DashboardSampler: a tick per call with rates from the previous one; a heatmap only when it changed and someone listens', () => {
  const status = (model: string, market: boolean): ModelStatus => ({
    model,
    coordinator: { state: 'ready', restarts: 0, lastExit: null, dispatchUnsupported: null },
    market,
    busy: 0,
    slots: 1,
    saturated: false,
    recruiting: false,
    baseTarget: 2,
    boost: 1,
    effectiveTarget: 2,
    dispatchMode: 'auto',
    dispatchConnected: true,
    workers: { loading: 0, joining: 0, grace: 0, proven: 0, idle: 0, released: 0, quarantined: 0 },
    shape: null,
  });
  let served = 0;
  let replicas = 'AAAA';
  let coverageReads = 0;
  const clock = { now: 10_000 };
  const source = {
    read: () => ({
      models: [
        {
          status: status('m', true),
          pairs: { served, fallback: 0, late: 0, rejected: 0 },
          roundTrips: [],
          generation: { prev: undefined, cur: undefined },
        } satisfies ModelReading,
        {
          status: status('ext', false),
          pairs: null,
          roundTrips: [],
          generation: { prev: undefined, cur: undefined },
        } satisfies ModelReading,
      ],
      totals: { volunteers: {}, workers: 0 },
    }),
    coverage: (model: string): CoverageMap => {
      coverageReads++;
      return { model, atMs: clock.now, moeLayers: [0], nExpert: 3, target: 2, replicas };
    },
  };
  const streams = new DashboardStreams();
  const sampler = new DashboardSampler(source, streams, () => clock.now);
  sampler.tick();
  assert.equal(coverageReads, 0, 'nobody listens: no heatmap is built');
  const sink = new FakeSink();
  streams.open(sink, 'ip-a', 'tick', tick(0));
  sampler.snapshotSent([source.coverage('m')], true);
  coverageReads = 0;
  served = 500;
  clock.now += 1000;
  const t2 = sampler.tick();
  assert.equal(t2.samples.m?.pairsPerS.served, 500);
  assert.deepEqual(Object.keys(t2.samples), ['m', 'ext']);
  assert.equal(coverageReads, 1, 'only the market model has a heatmap');
  replicas = 'AQEB';
  clock.now += 1000;
  sampler.tick();
  clock.now += 1000;
  sampler.tick();
  const events = parseSse(sink.chunks.join('')).map((m) => m.event);
  assert.deepEqual(events, ['tick', 'tick', 'tick', 'coverage', 'tick'], 'the changed heatmap once, after its tick');
  assert.equal(sampler.history.all().m?.length, 4);
  streams.closeAll();
});

test('EventLog: a listener that throws neither breaks add() nor the other listeners; it is reported, without a loop', () => {
  const log = new EventLog(10);
  const reported: string[] = [];
  log.onListenerError = (e) => {
    reported.push(e instanceof Error ? e.message : String(e));
    log.add('coordinator', null, 'internal error: listener'); // the hub logs it as an event: the listener throws again
  };
  const seen: number[] = [];
  log.subscribe(() => {
    throw new Error('listener broke');
  });
  log.subscribe((e) => seen.push(e.seq));
  const e = log.add('admin', null, 'first');
  assert.equal(e.seq, 1);
  assert.deepEqual(
    [...seen].sort(),
    [1, 2],
    'the other listener got the event and the report (the report first: it is added while the event is dispatched)',
  );
  assert.deepEqual(reported, ['listener broke'], 'reported once, not for the report itself');
  assert.doesNotThrow(() => log.add('admin', null, 'second'));
  assert.equal(log.total, 4);
  const silent = new EventLog(10);
  silent.subscribe(() => {
    throw new Error('nobody told');
  });
  assert.doesNotThrow(() => silent.add('admin', null, 'no reporter'));
});

test('DashboardSampler: a timer tick whose read throws is reported and survived; the next tick runs', () => {
  mock.timers.enable({ apis: ['setInterval'] });
  try {
    let fail = true;
    const errors: unknown[] = [];
    const source = {
      read: () => {
        if (fail) throw new Error('coverage store broke');
        return { models: [], totals: { volunteers: {}, workers: 0 } };
      },
      coverage: () => null,
    };
    const streams = new DashboardStreams();
    const sink = new FakeSink();
    streams.open(sink, 'ip-a', 'tick', tick(0));
    const sampler = new DashboardSampler(source, streams, () => 1, { tickMs: 1000, onError: (e) => errors.push(e) });
    sampler.start();
    assert.doesNotThrow(() => mock.timers.tick(1000));
    assert.equal(errors.length, 1);
    assert.match(String(errors[0]), /coverage store broke/);
    fail = false;
    mock.timers.tick(1000);
    assert.deepEqual(
      parseSse(sink.chunks.join('')).map((m) => m.event),
      ['tick', 'tick'],
      'the snapshot, then the tick after the failed one',
    );
    sampler.stop();
    streams.closeAll();
  } finally {
    mock.timers.reset();
  }
});
