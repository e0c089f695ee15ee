/**
 * A hub's close with the relay between hubs open (hub/cluster/relay-server.ts `close`, relay-links.ts `close`): the
 * relay another hub dialed into this one is an upgraded socket of this hub's HTTP server, whose close waits for it,
 * and the dialing hub, alive, keeps it open while it links this hub's workers. So the hub closes those relays itself
 * (GOING_AWAY, then terminate after a grace) before its HTTP server closes (hub.ts `closeVolunteers`, the app's
 * preClose), and its own dialing side stops dialing for good.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import { HUB_RELAY_PATH } from '../../protocol/hub-relay.ts';
import { HubRelayServer, relayUrlOf } from '../../hub/cluster/relay-server.ts';
import { RemoteHubLinks } from '../../hub/cluster/relay-links.ts';
import { clusterWorker, until } from '../../harness/cluster-fixtures.ts';

const token = 'k'.repeat(32);

const record = clusterWorker();

/** Hub B's side: its HTTP server with the relay server attached. */
async function hubB(): Promise<{ relay: HubRelayServer; server: ReturnType<typeof createServer>; url: string }> {
  const relay = new HubRelayServer({ token: () => token, linkOf: () => undefined, event: () => {} });
  const server = createServer();
  relay.attach(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { relay, server, url: relayUrlOf(server.address() as AddressInfo) };
}

/** server.close's callback, ms after the call; Infinity when it has not come within `ms`. */
function closeTime(server: ReturnType<typeof createServer>, ms: number): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(Number.POSITIVE_INFINITY), ms);
    server.close(() => {
      clearTimeout(timer);
      resolve(performance.now() - t0);
    });
  });
}

test('a hub closes at once while another hub, alive, holds a relay into it: the relay is closed GOING_AWAY', async () => {
  const b = await hubB();
  const events: string[] = [];
  const links = new RemoteHubLinks({ selfId: 'hub-a', relayOf: () => ({ url: b.url, token }), event: (d) => events.push(d) });
  try {
    links.update('m', [record]);
    await until('the relay open', () => (b.relay.size === 1 && links.openHubs().length === 1 ? true : undefined));
    // Hub B shuts down as the app does: its relays closed first, then its HTTP server.
    const t0 = performance.now();
    await b.relay.close();
    const took = await closeTime(b.server, 5_000);
    assert.ok(took < 5_000, 'the HTTP server closed');
    assert.ok(performance.now() - t0 < 1_500, `closed in ${(performance.now() - t0).toFixed(0)} ms`);
    assert.equal(b.relay.size, 0);
    await until('hub A seeing the close', () => (events.some((e) => /relay to hub hub-b closed \(1001/.test(e)) ? true : undefined));
  } finally {
    links.close();
    b.server.closeAllConnections();
  }
});

test('a dialing hub that never answers the close frame is terminated after the grace, not waited for', async () => {
  const b = await hubB();
  const ws = new WebSocket(`${b.url}${HUB_RELAY_PATH}?hub=hub-a&token=${token}`);
  try {
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    await until('the relay taken', () => (b.relay.size === 1 ? true : undefined));
    // A hung hub: it reads nothing more, so it never answers B's close frame.
    (ws as unknown as { _socket: { pause(): void } })._socket.pause();
    const t0 = performance.now();
    await b.relay.close(150);
    const closed = performance.now() - t0;
    assert.ok(closed >= 100 && closed < 1_000, `close waited its grace (150 ms), then terminated: ${closed.toFixed(0)} ms`);
    const took = await closeTime(b.server, 3_000);
    assert.ok(took < 1_000, `the HTTP server closed ${took} ms after`);
  } finally {
    ws.terminate();
    b.server.closeAllConnections();
  }
});

test('a closed RemoteHubLinks dials nothing more (the cluster may still sync while the hub shuts down)', async () => {
  const b = await hubB();
  const links = new RemoteHubLinks({ selfId: 'hub-a', relayOf: () => ({ url: b.url, token }), event: () => {} });
  try {
    links.close();
    links.update('m', [record]);
    assert.deepEqual(links.directory('m').workersFor(1), [], 'no link');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(b.relay.size, 0, 'no relay dialed');
  } finally {
    await b.relay.close();
    b.server.close();
  }
});
