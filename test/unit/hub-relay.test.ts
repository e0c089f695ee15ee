/**
 * The relay between hubs (issue 30): its wire (protocol/hub-relay.ts) round trips and refuses a table of malformed
 * frames with its code; the two ends (hub/cluster/relay-server.ts, relay-links.ts) over a real loopback WebSocket with
 * in-process worker links on the dialed side: sums and compute time come back, local ids are re-based to the dialed
 * hub's slice, a worker not there or an expert outside its slice is refused (WORKER_UNKNOWN), a failing link is
 * WORKER_FAILED, the upgrade without or with a wrong token is refused with the catalogue's code, a frame that does not
 * decode closes the relay (4400), and which records become links (not quarantined, released, or of a hub without relay).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import {
  HUB_RELAY_PATH,
  HubRelayError,
  HubRelayKind,
  HubRelayStatus,
  type RelayWork,
  decodeRelayFrame,
  encodeRelayAnswer,
  encodeRelayWork,
} from '../../protocol/hub-relay.ts';
import { HubRelayServer, relayUrlOf } from '../../hub/cluster/relay-server.ts';
import { RemoteHubLinks } from '../../hub/cluster/relay-links.ts';
import type { WorkItem, WorkerLink } from '../../hub/dispatch/worker-link.ts';
import type { ClusterWorker } from '../../hub/cluster/codec.ts';
import { clusterWorker } from '../../harness/cluster-fixtures.ts';

const work = (nPairs = 3): WorkItem => ({
  layer: 1,
  nEmbd: 4,
  rows: Float32Array.of(1, 2, 3, 4, 5, 6, 7, 8),
  nRows: 2,
  nPairs,
  rowIndex: Uint32Array.from({ length: nPairs }, (_, p) => p % 2),
  localExpert: Uint16Array.from({ length: nPairs }, (_, p) => p % 3),
  weight: Float32Array.from({ length: nPairs }, (_, p) => 0.25 * (p + 1)),
});
const relayWork = (over: Partial<RelayWork> = {}): RelayWork => ({
  id: 7,
  deadlineMs: 250,
  model: 'm',
  workerId: 'w1',
  begin: 4,
  work: work(),
  ...over,
});
const codeOf = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    if (e instanceof HubRelayError) return e.code;
    throw e;
  }
  return 'accepted';
};

test('WORK and ANSWER round trip', () => {
  const w = relayWork();
  const back = decodeRelayFrame(encodeRelayWork(w));
  assert.equal(back.kind, HubRelayKind.Work);
  if (back.kind !== HubRelayKind.Work) return;
  assert.deepEqual([back.id, back.deadlineMs, back.model, back.workerId, back.begin], [7, 250, 'm', 'w1', 4]);
  assert.deepEqual(back.work, w.work);
  const a = decodeRelayFrame(
    encodeRelayAnswer({ id: 9, status: HubRelayStatus.Ok, computeUs: 1234, reason: '', sums: Float32Array.of(1.5, -2) }),
  );
  assert.deepEqual(a, {
    kind: HubRelayKind.Answer,
    id: 9,
    status: HubRelayStatus.Ok,
    computeUs: 1234,
    reason: '',
    sums: Float32Array.of(1.5, -2),
  });
  const f = decodeRelayFrame(
    encodeRelayAnswer({ id: 3, status: HubRelayStatus.WorkerUnknown, computeUs: 0, reason: 'gone', sums: Float32Array.of(1) }),
  );
  assert.deepEqual([f.kind, f.id, (f as { status: number }).status, (f as { reason: string }).reason], [HubRelayKind.Answer, 3, 1, 'gone']);
});

test('malformed frames are refused with their code', () => {
  const good = encodeRelayWork(relayWork());
  const edit = (f: (b: Uint8Array, v: DataView) => void): Uint8Array => {
    const b = good.slice();
    f(b, new DataView(b.buffer));
    return b;
  };
  const okAnswer = encodeRelayAnswer({ id: 1, status: HubRelayStatus.Ok, computeUs: 0, reason: '', sums: Float32Array.of(1, 2) });
  const cases: Array<[string, Uint8Array, string]> = [
    ['empty', new Uint8Array(0), 'BAD_FRAME'],
    ['another version', edit((b) => (b[1] = 2)), 'VERSION'],
    ['an unknown kind', edit((b) => (b[0] = 9)), 'BAD_FRAME'],
    ['cut short', good.subarray(0, good.length - 4), 'BAD_FRAME'],
    ['4 bytes more', Uint8Array.from([...good, 0, 0, 0, 0]), 'BAD_FRAME'],
    ['n_rows 0', edit((_, v) => v.setUint32(16, 0, true)), 'BAD_FRAME'],
    ['n_pairs beyond the cap', edit((_, v) => v.setUint32(20, 1 << 20, true)), 'BAD_FRAME'],
    ['n_embd 0', edit((_, v) => v.setUint32(12, 0, true)), 'BAD_FRAME'],
    ['no worker id', edit((b) => (b[27] = 0)), 'BAD_FRAME'],
    ['a model that is not UTF-8', edit((b) => (b[28] = 0xff)), 'BAD_FRAME'],
    // rows 2×4 floats at 28+4 = 32, then the row indices at 64
    ['a row index out of range', edit((_, v) => v.setUint32(64, 2, true)), 'BAD_FRAME'],
    ['a weight that is NaN', edit((_, v) => v.setFloat32(76, Number.NaN, true)), 'BAD_FRAME'],
    ['an answer cut short', okAnswer.subarray(0, okAnswer.length - 4), 'BAD_FRAME'],
    ['an answer of an unknown status', Uint8Array.from(okAnswer, (x, i) => (i === 2 ? 9 : x)), 'BAD_FRAME'],
    ['a failed answer with sums', Uint8Array.from(okAnswer, (x, i) => (i === 2 ? 2 : x)), 'BAD_FRAME'],
  ];
  for (const [what, bytes, code] of cases)
    assert.equal(
      codeOf(() => decodeRelayFrame(bytes)),
      code,
      what,
    );
  assert.equal(
    codeOf(() => encodeRelayWork(relayWork({ workerId: '' }))),
    'BAD_FRAME',
    'an empty worker id is not sent',
  );
  assert.equal(
    codeOf(() => encodeRelayWork(relayWork({ begin: 70_000 }))),
    'BAD_FRAME',
    'begin beyond u16',
  );
});

test('relayUrlOf: the listening address, or the host name on every interface', () => {
  assert.equal(relayUrlOf({ address: '127.0.0.1', family: 'IPv4', port: 8080 }), 'ws://127.0.0.1:8080');
  assert.equal(relayUrlOf({ address: '::1', family: 'IPv6', port: 81 }), 'ws://[::1]:81');
  assert.match(relayUrlOf({ address: '0.0.0.0', family: 'IPv4', port: 82 }), /^ws:\/\/[^:]+:82$/);
});

/** A link of the dialed hub: expert e's output is (e + 1)·row, summed with the weights; holds [begin, end). */
function fakeLink(workerId: string, layer: number, begin: number, end: number, fail = false): WorkerLink {
  return {
    workerId,
    layer,
    begin,
    end,
    inFlight: 0,
    compute: async (w) => {
      if (fail) throw new Error('the volunteer left');
      const sums = new Float32Array(w.nRows * w.nEmbd);
      for (let p = 0; p < w.nPairs; p++) {
        const r = w.rowIndex[p] as number;
        const f = (w.weight[p] as number) * (begin + (w.localExpert[p] as number) + 1);
        for (let i = 0; i < w.nEmbd; i++)
          sums[r * w.nEmbd + i] = (sums[r * w.nEmbd + i] as number) + f * (w.rows[r * w.nEmbd + i] as number);
      }
      return { sums, computeUs: 42 };
    },
  };
}

const record = (over: Partial<ClusterWorker>): ClusterWorker => clusterWorker({ ranges: [[1, 4, 8]], ...over });

async function listen(server: Server): Promise<string> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return relayUrlOf(server.address() as AddressInfo);
}

async function until<T>(what: string, f: () => T | undefined, ms = 3_000): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = f();
    if (v !== undefined) return v;
    if (Date.now() - t0 > ms) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('two ends over a loopback WebSocket: sums, re-based ids, WORKER_UNKNOWN, WORKER_FAILED, the records that link', async () => {
  const token = 'x'.repeat(32);
  // Hub B holds w1's experts [2, 8) of layer 1 (A's record says [4, 8): a narrower view, re-based on B) and w2, failing.
  const bLinks = [fakeLink('w1', 1, 2, 8), fakeLink('w2', 1, 0, 4, true)];
  const events: string[] = [];
  const relay = new HubRelayServer({
    token: () => token,
    linkOf: (_m, w, l) => bLinks.find((k) => k.workerId === w && k.layer === l),
    event: (d) => events.push(d),
  });
  const server = createServer();
  relay.attach(server);
  const url = await listen(server);
  const links = new RemoteHubLinks({
    selfId: 'hub-a',
    relayOf: (hub) => (hub === 'hub-b' ? { url, token } : undefined),
    event: (d) => events.push(d),
  });
  try {
    links.update('m', [
      record({ worker_id: 'w1' }),
      record({ worker_id: 'w2', ranges: [[1, 0, 4]] }),
      record({ worker_id: 'gone', ranges: [[1, 0, 8]] }),
      record({ worker_id: 'q', quarantined: true }),
      record({ worker_id: 'r', released: true }),
      record({ worker_id: 'c', hub: 'hub-c' }), // a hub that announced no relay
    ]);
    assert.deepEqual([...links.workerIds()].sort(), ['gone', 'w1', 'w2']);
    await until('the relay open', () => (links.openHubs().includes('hub-b') ? true : undefined));
    const of = (id: string): WorkerLink =>
      links
        .directory('m')
        .workersFor(1)
        .find((l) => l.workerId === id) as WorkerLink;

    const w = work();
    const a = await of('w1').compute(w, 500);
    const want = (await fakeLink('w1', 1, 4, 8).compute(w, 500)) as { sums: Float32Array };
    assert.deepEqual(a, { sums: want.sums, computeUs: 42 }, "A's local ids count from 4: B's link (from 2) sees them + 2");
    await assert.rejects(of('w2').compute(w, 500), /WorkerFailed: the volunteer left/);
    await assert.rejects(of('gone').compute(w, 500), /WorkerUnknown: worker gone serves no slice/);
    // A's view wider than B's slice: expert 3 is not B's w1's.
    links.update('m', [record({ worker_id: 'w1', ranges: [[1, 0, 8]] })]);
    await assert.rejects(of('w1').compute(w, 500), /WorkerUnknown: expert \d is not in its slice/);
    assert.deepEqual([links.stats.items, links.stats.answered, links.stats.refused], [4, 1, 3]);
    assert.deepEqual([relay.stats.items, relay.stats.failed], [2, 1]);
    links.update('m', []);
    assert.equal(links.directory('m').workersFor(1).length, 0, 'a record gone: its link too');
    links.prune();
    assert.deepEqual(links.openHubs(), [], 'no worker of hub B linked: its socket closed');
  } finally {
    links.close();
    relay.close();
    server.close();
  }
});

test('hub B going away mid-item: the item is refused at once (not at its deadline), and the relay redialed', {
  timeout: 10_000,
}, async () => {
  const token = 'w'.repeat(32);
  let started = 0;
  const stuck: WorkerLink = {
    ...fakeLink('w1', 1, 4, 8),
    compute: () => {
      started++;
      return new Promise(() => {});
    },
  };
  const relay = new HubRelayServer({ token: () => token, linkOf: () => stuck, event: () => {} });
  const server = createServer();
  relay.attach(server);
  const url = await listen(server);
  const links = new RemoteHubLinks({ selfId: 'hub-a', relayOf: () => ({ url, token }), event: () => {} }, { redialMs: 0 });
  try {
    links.update('m', [record({})]);
    await until('the relay open', () => (links.openHubs().length === 1 ? true : undefined));
    const link = links.directory('m').workersFor(1)[0] as WorkerLink;
    const t0 = performance.now();
    const item = link.compute(work(), 60_000);
    await until('the item at hub B', () => (started === 1 ? true : undefined));
    relay.close(); // B shutting down: 1001 to every relay
    await assert.rejects(item, /the relay to hub hub-b closed/);
    assert.ok(performance.now() - t0 < 5_000, 'refused at the close, not at the 60 s deadline');
    assert.equal(link.inFlight, 0);
    await until('the relay closed', () => (links.openHubs().length === 0 ? true : undefined));
    links.update('m', [record({})]); // the next sync names B again: dialed again (refused: B's relay is closed)
    await assert.rejects(link.compute(work(), 500), /no relay to hub hub-b open yet/);
  } finally {
    links.close();
    server.close();
  }
});

test('the upgrade: no token AUTH_REQUIRED, a wrong one AUTH_TOKEN_INVALID; a frame that does not decode closes 4400', async () => {
  const token = 'y'.repeat(32);
  const relay = new HubRelayServer({ token: () => token, linkOf: () => undefined, event: () => {} });
  const server = createServer();
  relay.attach(server);
  const url = await listen(server);
  try {
    const refusal = (q: string) =>
      new Promise<{ status: number; code: string }>((resolve, reject) => {
        const ws = new WebSocket(`${url}${HUB_RELAY_PATH}${q}`);
        ws.on('unexpected-response', (_req, res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, code: (JSON.parse(body) as { code: string }).code }));
        });
        ws.on('open', () => reject(new Error('the relay was opened')));
        ws.on('error', () => {});
      });
    assert.deepEqual(await refusal('?hub=a'), { status: 401, code: 'AUTH_REQUIRED' });
    assert.deepEqual(await refusal(`?hub=a&token=${'z'.repeat(32)}`), { status: 401, code: 'AUTH_TOKEN_INVALID' });
    const closed = await new Promise<number>((resolve) => {
      const ws = new WebSocket(`${url}${HUB_RELAY_PATH}?hub=a&token=${token}`);
      ws.on('open', () => ws.send(Uint8Array.of(1, 1, 0, 0, 9)));
      ws.on('close', (code) => resolve(code));
      ws.on('error', () => {});
    });
    assert.equal(closed, 4400);
  } finally {
    relay.close();
    server.close();
  }
});
