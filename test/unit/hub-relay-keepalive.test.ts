/**
 * The relay between hubs' keepalive (hub/cluster/relay-links.ts `keepaliveMs`): the dialing hub pings its relay to
 * another hub, and closes one whose pong does not come by the next ping — a hub that hangs, or a network that drops
 * without a close, refuses the items waiting on it within 2 × keepaliveMs instead of each at its deadline. A hub that
 * answers (the real relay server: `ws` answers pings by itself) keeps its relay.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { WebSocketServer } from 'ws';
import { HUB_RELAY_PATH } from '../../protocol/hub-relay.ts';
import { HubRelayServer, relayUrlOf } from '../../hub/cluster/relay-server.ts';
import { RemoteHubLinks } from '../../hub/cluster/relay-links.ts';
import type { WorkItem, WorkerLink } from '../../hub/dispatch/worker-link.ts';
import { clusterWorker, until } from '../../harness/cluster-fixtures.ts';

const work: WorkItem = {
  layer: 1,
  nEmbd: 4,
  rows: Float32Array.of(1, 2, 3, 4),
  nRows: 1,
  nPairs: 1,
  rowIndex: Uint32Array.of(0),
  localExpert: Uint16Array.of(0),
  weight: Float32Array.of(1),
};

const record = clusterWorker();

test('a relay whose hub stops answering pings is closed within 2 × keepaliveMs, its item refused then, not at its deadline', async () => {
  // Hub B hung: it took the relay, then answers nothing — no pong, no ANSWER.
  const server = createServer();
  const wss = new WebSocketServer({ server, path: HUB_RELAY_PATH, autoPong: false });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = relayUrlOf(server.address() as AddressInfo);
  const events: string[] = [];
  const links = new RemoteHubLinks(
    { selfId: 'hub-a', relayOf: () => ({ url, token: 't'.repeat(32) }), event: (d) => events.push(d) },
    { keepaliveMs: 100 },
  );
  try {
    links.update('m', [record]);
    await until('the relay open', () => (links.openHubs().length === 1 ? true : undefined));
    const t0 = performance.now();
    const item = (links.directory('m').workersFor(1)[0] as WorkerLink).compute(work, 30_000);
    await assert.rejects(item, /went silent \(keepalive\)/);
    const took = performance.now() - t0;
    assert.ok(took < 1_000, `refused after ${took.toFixed(0)} ms (2 × 100 ms keepalive, plus a loaded machine), not at 30 s`);
    assert.deepEqual(links.openHubs(), []);
    assert.ok(
      events.some((e) => /relay to hub hub-b: no pong within \d+ ms; closing it/.test(e)),
      events.join(' | '),
    );
  } finally {
    links.close();
    wss.close();
    server.closeAllConnections();
    server.close();
  }
});

test('a relay whose hub answers its pings stays open however long it idles', async () => {
  const token = 'k'.repeat(32);
  const relay = new HubRelayServer({ token: () => token, linkOf: () => undefined, event: () => {} });
  const server = createServer();
  relay.attach(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = relayUrlOf(server.address() as AddressInfo);
  const events: string[] = [];
  const links = new RemoteHubLinks({ selfId: 'hub-a', relayOf: () => ({ url, token }), event: (d) => events.push(d) }, { keepaliveMs: 40 });
  try {
    links.update('m', [record]);
    await until('the relay open', () => (links.openHubs().length === 1 ? true : undefined));
    await new Promise((r) => setTimeout(r, 500)); // a dozen pings, each answered
    assert.deepEqual(links.openHubs(), ['hub-b'], events.join(' | '));
    assert.ok(!events.some((e) => e.includes('no pong')), events.join(' | '));
  } finally {
    links.close();
    relay.close();
    server.close();
  }
});
