/**
 * Hubs telling clients and volunteers where the others are (issue 30): the pure list (hub/cluster/hub-list.ts), the
 * welcome's optional `hubs` on the wire (valid and refused), the volunteer's merge (volunteer/client.ts withHubs), and
 * the retrying client's discovery from one hub's `GET /api/health` (a fetch double: no sockets).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HUB_MEMBERS_LISTED, hubMembers, hubUrls, mergeHubs, originOf, publicUrlOf } from '../../hub/cluster/hub-list.ts';
import { decodeHub, encodeHub } from '../../hub/cluster/codec.ts';
import { RetryingClient } from '../../hub/cluster/retrying-client.ts';
import { encodeHubMessage, parseHubMessage, VolunteerWireError } from '../../protocol/channel/index.ts';
import { withHubs } from '../../volunteer/client.ts';
import { isHubError } from '../../hub/errors.ts';

test('publicUrlOf, hubUrls, mergeHubs: origins only, each once, those given kept first', () => {
  assert.equal(publicUrlOf(null, 'ws://10.0.0.6:8081'), 'http://10.0.0.6:8081');
  assert.equal(publicUrlOf(null, 'wss://b.example/'), 'https://b.example');
  assert.equal(publicUrlOf('https://pub.example:8443/', 'ws://10.0.0.6:8081'), 'https://pub.example:8443');
  assert.equal(publicUrlOf(null, null), null);
  assert.equal(originOf('ftp://x'), null);
  assert.equal(originOf('http://a:1/v1/x'), 'http://a:1');
  assert.deepEqual(hubUrls([{ public_url: 'http://a:1' }, { public_url: null }, { public_url: 'http://b:2/' }]), [
    'http://a:1',
    'http://b:2',
  ]);
  assert.deepEqual(mergeHubs(['http://a:1'], ['http://b:2/', 'http://a:1', 'ftp://x', 'nonsense', 'http://c:3'], 16), [
    'http://a:1',
    'http://b:2',
    'http://c:3',
  ]);
  assert.deepEqual(mergeHubs(['http://a:1', 'http://b:2'], ['http://c:3'], 2), ['http://a:1', 'http://b:2'], 'the bound keeps those given');
  assert.deepEqual(withHubs(['http://a:1/'], ['http://a:1', 'http://b:2'], 16), ['http://a:1/', 'http://b:2']);
});

test('hubMembers: this hub and the announced ones, each once, in id order, capped with this one kept; counts null without a mirror', () => {
  const announced = [
    { hub: 'hub-c', public_url: 'http://c:3/' },
    { hub: 'hub-a', public_url: 'http://a:1' },
    { hub: 'hub-b', public_url: null },
  ];
  const self = { hub: 'hub-b', public_url: 'http://b:2', workers: 4 };
  assert.deepEqual(hubMembers(announced, self, new Map([['hub-a', 7]])), [
    { hub: 'hub-a', public_url: 'http://a:1', workers: 7 },
    { hub: 'hub-b', public_url: 'http://b:2', workers: 4 },
    { hub: 'hub-c', public_url: 'http://c:3', workers: 0 },
  ]);
  assert.deepEqual(
    hubMembers(announced, self, null).map((m) => m.workers),
    [null, 4, null],
    'degraded: the others are not known',
  );
  assert.deepEqual(hubMembers([], { hub: 'z', public_url: 'ftp://x', workers: 0 }, null), [{ hub: 'z', public_url: null, workers: 0 }]);
  const many = Array.from({ length: 100 }, (_, i) => ({ hub: `h${String(i).padStart(3, '0')}`, public_url: null }));
  const capped = hubMembers(many, { hub: 'h099', public_url: null, workers: 1 }, new Map());
  assert.equal(capped.length, HUB_MEMBERS_LISTED);
  assert.equal(capped.at(-1)?.hub, 'h099', 'this hub is kept past the cap');
  assert.equal(capped.at(-2)?.hub, 'h062');
});

test('a hub announcement carries public_url (optional: an older hub’s reads as null); garbage refused', () => {
  const h = {
    v: 1 as const,
    hub: 'hub-a',
    started_ms: 1,
    relay_url: 'ws://a:1',
    relay_token: 't'.repeat(32),
    public_url: 'https://a.example',
  };
  assert.deepEqual(decodeHub(encodeHub(h), 'k'), h);
  const { public_url: _, ...older } = h;
  assert.equal(decodeHub(JSON.stringify(older), 'k').public_url, null);
  for (const bad of ['ws://a:1', 'https://a/x', 'javascript:1', 7])
    assert.throws(
      () => decodeHub(JSON.stringify({ ...h, public_url: bad }), 'k'),
      (e) => isHubError(e, 'CLUSTER_STATE_CORRUPT'),
      String(bad),
    );
});

test('welcome.hubs on the wire: round trip, absent when none; malformed or too many refused', () => {
  const w = {
    type: 'welcome' as const,
    version: 1,
    workerId: 'tab-1',
    heartbeatMs: 15_000,
    idleTimeoutMs: 60_000,
    encoding: 'f16' as const,
    credit: 0,
    hubs: ['http://b:2', 'https://c.example'],
  };
  assert.deepEqual(parseHubMessage(encodeHubMessage(w)), w);
  const { hubs: _, ...alone } = w;
  assert.ok(!('hubs' in parseHubMessage(encodeHubMessage(alone))));
  const wire = JSON.parse(encodeHubMessage(w)) as Record<string, unknown>;
  const cases: Array<[unknown, string]> = [
    ['http://b:2', 'BAD_FRAME'],
    [['ws://b:2'], 'BAD_FRAME'],
    [['http://b:2/path'], 'BAD_FRAME'],
    [['http://user@b:2'], 'BAD_FRAME'],
    [[7], 'BAD_FRAME'],
    [[`http://${'b'.repeat(600)}`], 'BAD_FRAME'],
    [Array.from({ length: 17 }, (_, i) => `http://h${i}:1`), 'TOO_LARGE'],
  ];
  for (const [hubs, code] of cases)
    assert.throws(
      () => parseHubMessage(JSON.stringify({ ...wire, hubs })),
      (e) => e instanceof VolunteerWireError && e.code === code,
      JSON.stringify(hubs).slice(0, 60),
    );
});

test('RetryingClient discover: learns the cluster’s hubs from the first hub that answers /api/health, once', async () => {
  const asked: string[] = [];
  const fakeFetch = (async (input: URL | string, init?: RequestInit) => {
    const u = new URL(String(input));
    asked.push(`${u.origin}${u.pathname}`);
    if (u.pathname === '/api/health') {
      if (u.origin === 'http://dead:1') throw new TypeError('fetch failed');
      return new Response(JSON.stringify({ cluster: { hub_urls: ['http://a:1', 'http://b:2', 'http://c:3'] } }));
    }
    assert.equal(init?.method, 'POST');
    return new Response(JSON.stringify({ ok: u.origin }));
  }) as typeof fetch;
  const client = new RetryingClient({ hubs: ['http://dead:1', 'http://a:1'], discover: true, fetch: fakeFetch });
  await Promise.all([client.post('/v1/x', {}).catch(() => {}), client.post('/v1/x', {}).catch(() => {})]);
  assert.deepEqual(client.hubList, ['http://dead:1', 'http://a:1', 'http://b:2', 'http://c:3']);
  assert.equal(asked.filter((a) => a.endsWith('/api/health')).length, 2, 'dead, then a: once for both requests');
  const plain = new RetryingClient({ hubs: ['http://a:1'], fetch: fakeFetch });
  await plain.post('/v1/x', {});
  assert.deepEqual(plain.hubList, ['http://a:1'], 'without discover nothing is looked up');
});
