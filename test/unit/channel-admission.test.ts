/**
 * The volunteer channel's Origin policy (hub/channel/admission.ts): a table of Origin and Host headers with the
 * verdict each gets, and the `--allow-origin` values the CLI accepts and refuses.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkOrigin, normalOrigin } from '../../hub/channel/admission.ts';
import { parseHubArgs } from '../../hub/cli.ts';

const LISTED = new Set(['https://swarm.example.org', 'http://127.0.0.1:5173']);

test('checkOrigin: who may open the channel', () => {
  const cases: Array<[string, string | undefined, string | undefined, 'no-origin' | 'same-origin' | 'listed' | 'refused']> = [
    ['no Origin: not a browser (the headless volunteer, ws)', undefined, 'hub.example', 'no-origin'],
    ['no Origin and no Host', undefined, undefined, 'no-origin'],
    ["the hub's own page over TLS (Host without port)", 'https://hub.example', 'hub.example', 'same-origin'],
    ["the hub's own page on loopback", 'http://127.0.0.1:8080', '127.0.0.1:8080', 'same-origin'],
    ['Host in other case', 'https://hub.example', 'HUB.Example', 'same-origin'],
    ['Host writes the default port out', 'https://hub.example', 'hub.example:443', 'same-origin'],
    ['plain HTTP behind a TLS proxy: the scheme is not compared', 'http://hub.example', 'hub.example', 'same-origin'],
    ['IPv6 loopback', 'http://[::1]:8080', '[::1]:8080', 'same-origin'],
    ['listed with --allow-origin', 'https://swarm.example.org', 'hub.example', 'listed'],
    ['listed, on loopback with a port', 'http://127.0.0.1:5173', '127.0.0.1:8080', 'listed'],
    ['another site', 'https://evil.example', 'hub.example', 'refused'],
    ['same host, other port', 'http://127.0.0.1:9999', '127.0.0.1:8080', 'refused'],
    ['a listed host over another scheme', 'http://swarm.example.org', 'hub.example', 'refused'],
    ['a subdomain of the hub', 'https://x.hub.example', 'hub.example', 'refused'],
    ['the hub as a suffix', 'https://evilhub.example', 'hub.example', 'refused'],
    ['opaque origin (sandboxed frame, file:)', 'null', 'hub.example', 'refused'],
    ['empty Origin', '', 'hub.example', 'refused'],
    ['not a URL', 'hub.example', 'hub.example', 'refused'],
    ['another scheme', 'chrome-extension://abcdef', 'hub.example', 'refused'],
    ['a path after the origin', 'https://hub.example/page', 'hub.example', 'refused'],
    ['credentials in it', 'https://u:p@hub.example', 'hub.example', 'refused'],
    ['same origin but Host missing', 'https://hub.example', undefined, 'refused'],
  ];
  for (const [name, origin, host, want] of cases) {
    const v = checkOrigin(origin, host, LISTED);
    if (want === 'refused') {
      assert.equal(v.ok, false, name);
      if (!v.ok) assert.ok(v.reason.length > 0, `${name}: a reason`);
    } else assert.deepEqual(v, { ok: true, why: want }, name);
  }
});

test('normalOrigin: --allow-origin takes an origin and nothing more', () => {
  const good: Array<[string, string]> = [
    ['https://swarm.example.org', 'https://swarm.example.org'],
    ['https://Swarm.Example.org/', 'https://swarm.example.org'],
    ['https://swarm.example.org:443', 'https://swarm.example.org'],
    ['http://127.0.0.1:5173', 'http://127.0.0.1:5173'],
    [' http://localhost:80 ', 'http://localhost'],
  ];
  for (const [given, want] of good) assert.equal(normalOrigin(given), want, given);
  for (const bad of ['*', 'swarm.example.org', 'https://swarm.example.org/app', 'https://a.org?x=1', 'ftp://a.org', 'null', '']) {
    assert.throws(() => normalOrigin(bad), /http\(s\):\/\/host\[:port\]/, bad);
  }
});

test('--allow-origin is repeatable and reaches the channel options', () => {
  const c = parseHubArgs(['--model', 'm.gguf', '--allow-origin', 'https://a.example/', '--allow-origin', 'http://127.0.0.1:5173'], {});
  assert.notEqual(c, 'help');
  if (c === 'help') return;
  assert.deepEqual(c.channel.allowedOrigins, ['https://a.example', 'http://127.0.0.1:5173']);
  assert.throws(() => parseHubArgs(['--model', 'm.gguf', '--allow-origin', 'a.example'], {}), /http\(s\):\/\/host/);
});

test('--no-peers turns peer-to-peer slices off; they are on by default', () => {
  const on = parseHubArgs(['--model', 'm.gguf'], {});
  const off = parseHubArgs(['--model', 'm.gguf', '--no-peers'], {});
  if (on === 'help' || off === 'help') return assert.fail('not help');
  assert.notEqual(on.peers?.enabled, false);
  assert.equal(off.peers?.enabled, false);
  const first = parseHubArgs(['--model', 'm.gguf', '--peers-first'], {});
  if (first === 'help') return assert.fail('not help');
  assert.equal(first.peers?.peersFirst, true, '--peers-first: no load hint, peers first always');
  assert.notEqual(on.peers?.peersFirst, true);
});
