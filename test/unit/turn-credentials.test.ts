/**
 * TURN for peers behind NATs (issue 29): the hub's TURN REST API credentials (hub/turn-credentials.ts), the ICE
 * servers in welcome.peer (protocol/channel/ice-servers.ts: round trip, bad input with its close code, older
 * welcomes without them), the peer directory putting them in each welcome, and the hub's --turn-* flags. The real
 * coturn accepting these credentials is test/integration/turn.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseHubArgs } from '../../hub/cli.ts';
import { DEFAULT_PEERS, PeerDirectory } from '../../hub/peer-directory.ts';
import { checkedTurnConfig, DEFAULT_TURN_TTL_S, iceServersFor, turnCredential } from '../../hub/turn-credentials.ts';
import { type CloseName, encodeHubMessage, parseHubMessage, VolunteerWireError, type Welcome } from '../../protocol/channel/index.ts';

const SECRET = '0123456789abcdef-secret';

test('turnCredential: username expiry:id, password base64(HMAC-SHA1(secret, username)) (vectors from openssl dgst -sha1 -hmac)', () => {
  const table: Array<[string, number, number, string, string]> = [
    // id, now (ms), ttl (s), username, credential
    ['page-ab12', 1_766_999_000_000, 1000, '1767000000:page-ab12', 'Y43AS5HpqSVoOz2rov9G84upi80='],
    ['page-ab12', 1_766_999_000_999, 1000, '1767000000:page-ab12', 'Y43AS5HpqSVoOz2rov9G84upi80='],
    ['w:with:colons', 1_766_999_940_000, 60, '1767000000:w:with:colons', 'EVk+Cpacj3WQbDUx3QuBmZoEf7Y='],
  ];
  for (const [id, now, ttl, username, credential] of table)
    assert.deepEqual(turnCredential(SECRET, id, now, ttl), { username, credential }, `${id} at ${now}`);
  assert.notEqual(turnCredential(`${SECRET}x`, 'page-ab12', 1_766_999_000_000, 1000).credential, 'Y43AS5HpqSVoOz2rov9G84upi80=');
});

test('iceServersFor: TURN URLs with one credential per connection, STUN URLs without', () => {
  const turn = checkedTurnConfig({
    urls: ['turn:198.18.0.2:3478', 'stun:198.18.0.2', 'turn:198.18.0.2:3478?transport=tcp'],
    secret: SECRET,
  });
  assert.equal(turn.ttlS, DEFAULT_TURN_TTL_S);
  const now = 1_766_999_000_000;
  const s = iceServersFor(turn, 'w1', now);
  assert.deepEqual(s, [
    { urls: ['turn:198.18.0.2:3478', 'turn:198.18.0.2:3478?transport=tcp'], ...turnCredential(SECRET, 'w1', now, DEFAULT_TURN_TTL_S) },
    { urls: ['stun:198.18.0.2'] },
  ]);
  assert.notEqual(iceServersFor(turn, 'w2', now)[0]?.credential, s[0]?.credential, 'each volunteer its own');
});

test('checkedTurnConfig refuses what coturn or a browser could not use, saying what to fix', () => {
  const table: Array<[string, Parameters<typeof checkedTurnConfig>[0], RegExp]> = [
    ['no URL', { urls: [], secret: SECRET }, /at least one --turn-url/],
    ['an http URL', { urls: ['http://x:3478'], secret: SECRET }, /not a turn/],
    ['a path in the URL', { urls: ['turn:x:3478/a'], secret: SECRET }, /not a turn/],
    ['STUN only', { urls: ['stun:x'], secret: SECRET }, /no turn: server/],
    ['five TURN URLs', { urls: ['turn:a', 'turn:b', 'turn:c', 'turn:d', 'turn:e'], secret: SECRET }, /at most 4/],
    ['no secret', { urls: ['turn:x'] }, /shared secret/],
    ['a short secret', { urls: ['turn:x'], secret: 'short' }, /16/],
    ['a secret with a space', { urls: ['turn:x'], secret: 'a secret with spaces' }, /no spaces/],
    ['a ttl under a minute', { urls: ['turn:x'], secret: SECRET, ttlS: 59 }, /--turn-ttl/],
    ['a fractional ttl', { urls: ['turn:x'], secret: SECRET, ttlS: 60.5 }, /--turn-ttl/],
  ];
  for (const [label, c, re] of table) assert.throws(() => checkedTurnConfig(c), re, label);
});

const WELCOME: Welcome = {
  type: 'welcome',
  version: 1,
  workerId: 'tab-1',
  heartbeatMs: 15_000,
  idleTimeoutMs: 60_000,
  encoding: 'f16',
  credit: 0,
  peer: {
    path: '/api/peers',
    key: 'expertswarm',
    id: 'p0123',
    token: 'abc',
    iceServers: [{ urls: ['turn:198.18.0.2:3478'], username: '1767000000:tab-1', credential: 'Y43AS5HpqSVoOz2rov9G84upi80=' }],
  },
};

function throwsCode(f: () => unknown, code: CloseName, label: string): void {
  assert.throws(f, (e: unknown) => e instanceof VolunteerWireError && e.code === code, label);
}

test('welcome.peer.ice_servers: round trip, absent when not sent, bad ones refused with their close code', () => {
  const text = encodeHubMessage(WELCOME);
  assert.deepEqual(JSON.parse(text).peer.ice_servers, [
    { urls: ['turn:198.18.0.2:3478'], username: '1767000000:tab-1', credential: 'Y43AS5HpqSVoOz2rov9G84upi80=' },
  ]);
  assert.deepEqual(parseHubMessage(text), WELCOME);
  const { iceServers: _, ...older } = WELCOME.peer!;
  const old = parseHubMessage(encodeHubMessage({ ...WELCOME, peer: older })) as Welcome;
  assert.equal(old.peer?.iceServers, undefined, 'a hub without TURN sends none');
  assert.deepEqual(parseHubMessage(encodeHubMessage({ ...WELCOME, peer: { ...older, iceServers: [{ urls: ['stun:a.example:3478'] }] } })), {
    ...WELCOME,
    peer: { ...older, iceServers: [{ urls: ['stun:a.example:3478'] }] },
  });
  const edit = (f: (s: Record<string, unknown>, all: unknown[]) => void): string => {
    const o = JSON.parse(text);
    f(o.peer.ice_servers[0], o.peer.ice_servers);
    return JSON.stringify(o);
  };
  const table: Array<[string, string, CloseName]> = [
    ['a javascript: URL', edit((s) => (s.urls = ['javascript:alert(1)'])), 'BAD_FRAME'],
    ['an http URL', edit((s) => (s.urls = ['http://198.18.0.2:3478'])), 'BAD_FRAME'],
    ['port 0', edit((s) => (s.urls = ['turn:198.18.0.2:0'])), 'BAD_FRAME'],
    ['port 70000', edit((s) => (s.urls = ['turn:198.18.0.2:70000'])), 'BAD_FRAME'],
    ['no URL', edit((s) => (s.urls = [])), 'BAD_FRAME'],
    ['urls a string', edit((s) => (s.urls = 'turn:198.18.0.2')), 'BAD_FRAME'],
    ['five URLs', edit((s) => (s.urls = Array(5).fill('turn:a'))), 'TOO_LARGE'],
    ['an over-long URL', edit((s) => (s.urls = [`turn:${'a'.repeat(300)}`])), 'TOO_LARGE'],
    ['TURN without credential', edit((s) => delete s.credential), 'BAD_FRAME'],
    ['STUN with a credential', edit((s) => (s.urls = ['stun:a'])), 'BAD_FRAME'],
    ['a credential with a newline', edit((s) => (s.credential = 'a\nb')), 'BAD_FRAME'],
    ['an over-long username', edit((s) => (s.username = 'u'.repeat(300))), 'TOO_LARGE'],
    ['five servers', edit((_, all) => all.push(...Array(4).fill(all[0]))), 'TOO_LARGE'],
    ['a server not an object', edit((_, all) => (all[0] = 'turn:a')), 'BAD_FRAME'],
  ];
  for (const [label, t, code] of table) throwsCode(() => parseHubMessage(t), code, label);
});

test('the peer directory puts a fresh credential in each welcome when TURN is configured, none otherwise', () => {
  const now = 1_766_999_000_000;
  const turn = { urls: ['turn:198.18.0.2:3478'], secret: SECRET, ttlS: 600 };
  const d = new PeerDirectory({ ...DEFAULT_PEERS, turn }, () => now);
  const w = d.welcome('tab-1', 'wallet');
  assert.deepEqual(w?.iceServers, [{ urls: turn.urls, ...turnCredential(SECRET, 'tab-1', now, 600) }]);
  assert.equal(new PeerDirectory({ ...DEFAULT_PEERS }).welcome('tab-1', 'wallet')?.iceServers, undefined);
  assert.throws(() => new PeerDirectory({ ...DEFAULT_PEERS, turn: { ...turn, secret: 'short' } }), /shared secret/);
});

test('hub flags: --turn-url/--turn-secret/--turn-ttl, the secret also from EXPERTSWARM_TURN_SECRET', () => {
  const c = parseHubArgs(['--model', 'm.gguf', '--turn-url', 'turn:198.18.0.2:3478', '--turn-secret', SECRET, '--turn-ttl', '120'], {});
  assert.ok(c !== 'help');
  assert.deepEqual(c.peers?.turn, { urls: ['turn:198.18.0.2:3478'], secret: SECRET, ttlS: 120 });
  const e = parseHubArgs(['--model', 'm.gguf', '--turn-url', 'turn:a.example'], { EXPERTSWARM_TURN_SECRET: SECRET });
  assert.ok(e !== 'help');
  assert.deepEqual(e.peers?.turn, { urls: ['turn:a.example'], secret: SECRET, ttlS: DEFAULT_TURN_TTL_S });
  const none = parseHubArgs(['--model', 'm.gguf'], {});
  assert.ok(none !== 'help');
  assert.equal(none.peers?.turn, undefined);
  assert.throws(() => parseHubArgs(['--model', 'm.gguf', '--turn-url', 'turn:a.example'], {}), /shared secret/);
  assert.throws(() => parseHubArgs(['--model', 'm.gguf', '--turn-secret', SECRET], {}), /--turn-url/);
  assert.throws(
    () => parseHubArgs(['--model', 'm.gguf', '--turn-url', 'turn:a', '--turn-secret', SECRET, '--turn-ttl', '5'], {}),
    /--turn-ttl/,
  );
});
