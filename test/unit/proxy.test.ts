/** hub/proxy.ts against a stand-in upstream that closes kept-alive connections as they are reused. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import Fastify from 'fastify';
import { proxyJson } from '../../hub/proxy.ts';

test('a kept-alive upstream connection reset as it is reused is retried once on a fresh one, not answered 503', async () => {
  // Every connection serves one request; a second request on it is cut without an answer (ECONNRESET), as a
  // coordinator closing an idle keep-alive connection at the moment the hub reuses it.
  const served = new WeakMap<Socket, number>();
  let resets = 0;
  const upstream: Server = createServer((req, res) => {
    const n = (served.get(req.socket) ?? 0) + 1;
    served.set(req.socket, n);
    if (n > 1) {
      resets++;
      req.socket.destroy();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', connection: 'keep-alive' }).end('{"ok":true}');
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  const app = Fastify();
  app.post('/p', async (req, reply) => proxyJson(reply, base, '/v1/completions', req.body));
  await app.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/p`;
  try {
    for (let i = 0; i < 6; i++) {
      const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      assert.equal(r.status, 200, `request ${i}`);
      assert.deepEqual(await r.json(), { ok: true });
    }
    assert.ok(resets > 0, 'the upstream did cut reused connections (the case under test happened)');
  } finally {
    await app.close();
    upstream.closeAllConnections();
    await new Promise<void>((r) => upstream.close(() => r()));
  }
});

test('an upstream that refuses connections is 503 COORDINATOR_UNAVAILABLE with Retry-After', async () => {
  const app = Fastify();
  app.setErrorHandler((e: Error & { status?: number; headers?: Record<string, string>; code?: string }, _req, reply) => {
    void reply
      .status(e.status ?? 500)
      .headers(e.headers ?? {})
      .send({ code: e.code });
  });
  app.post('/p', async (req, reply) => proxyJson(reply, 'http://127.0.0.1:1', '/v1/completions', req.body));
  const r = await app.inject({ method: 'POST', url: '/p', payload: {} });
  assert.equal(r.statusCode, 503);
  assert.equal(r.json().code, 'COORDINATOR_UNAVAILABLE');
  assert.equal(r.headers['retry-after'], '2');
  await app.close();
});
