/**
 * hub/cluster/retrying-client.ts against hubs played by loopback HTTP servers that fail on purpose: refused, 503,
 * a body cut short, a stream cut after some chunks, a replay that differs, a 4xx. The real thing (three hubs, one
 * SIGKILLed mid-load): test/integration/hub-cluster-faults.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { RetryingClient, RetryingClientError } from '../../hub/cluster/retrying-client.ts';

type Handler = (req: IncomingMessage, res: ServerResponse, body: string) => void;

async function hub(handler: Handler): Promise<{ url: string; hits: number; close(): Promise<void> }> {
  const h = { url: '', hits: 0, close: async () => {} };
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => {
      body += d.toString();
    });
    req.on('end', () => {
      h.hits++;
      handler(req, res, body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  h.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  h.close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  return h;
}

/** A port nothing listens on (a dead hub). */
async function deadUrl(): Promise<string> {
  const h = await hub(() => {});
  await h.close();
  return h.url;
}

const chunk = (text: string): string => `data: ${JSON.stringify({ id: Math.random(), choices: [{ text, finish_reason: null }] })}\n\n`;
const WORDS = ['The', ' swarm', ' serves', ' every', ' token', '.'];

const fast = { backoff: { baseMs: 1, maxMs: 4 } };

test('post: a refused hub, then a 503, then an answer — three attempts, the JSON of the third; a 4xx is not retried', async () => {
  const busy = await hub((_q, res) => {
    res.writeHead(503, { 'content-type': 'application/json' });
    res.end('{"error":"away","code":"COORDINATOR_UNAVAILABLE"}');
  });
  const ok = await hub((_q, res, body) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ echo: JSON.parse(body) }));
  });
  const refusing = await hub((_q, res) => {
    res.writeHead(400, { 'content-type': 'application/json' });
    res.end('{"error":"bad","code":"BODY_INVALID"}');
  });
  try {
    const retries: string[] = [];
    const c = new RetryingClient({ hubs: [await deadUrl(), busy.url, ok.url], ...fast, onRetry: (r) => retries.push(r.reason) });
    const r = await c.post('/v1/completions', { prompt: 'x' });
    assert.deepEqual(r.json, { echo: { prompt: 'x' } });
    assert.equal(r.hub, ok.url);
    assert.equal(r.attempts, 3);
    assert.match(retries[0] as string, /no answer/);
    assert.match(retries[1] as string, /answered 503/);

    const c4 = new RetryingClient({ hubs: [refusing.url, ok.url], ...fast });
    await assert.rejects(
      c4.post('/v1/completions', {}),
      (e: unknown) => e instanceof RetryingClientError && e.code === 'HUB_REFUSED' && e.status === 400 && e.hubCode === 'BODY_INVALID',
    );
    assert.equal(refusing.hits, 1);
    assert.equal(ok.hits, 1, 'the 4xx went nowhere else');

    const dead = new RetryingClient({ hubs: [await deadUrl()], attempts: 4, ...fast });
    await assert.rejects(dead.post('/x', {}), (e: unknown) => e instanceof RetryingClientError && e.code === 'ALL_HUBS_FAILED');
    assert.equal(dead.retries, 3);
    assert.throws(
      () => new RetryingClient({ hubs: [] }),
      (e: unknown) => e instanceof RetryingClientError && e.code === 'OPTIONS_INVALID',
    );
    assert.throws(
      () => new RetryingClient({ hubs: ['ftp://x'] }),
      (e: unknown) => e instanceof RetryingClientError && e.code === 'OPTIONS_INVALID',
    );
  } finally {
    await Promise.all([busy.close(), ok.close(), refusing.close()]);
  }
});

test('post: a body cut short (the hub died while answering) is retried at the next hub', async () => {
  const dying = await hub((_q, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
    res.write('{"choices":[');
    setTimeout(() => res.destroy(), 5);
  });
  const ok = await hub((_q, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"choices":[]}');
  });
  try {
    const r = await new RetryingClient({ hubs: [dying.url, ok.url], ...fast }).post('/v1/completions', {});
    assert.deepEqual([r.hub, r.attempts, r.json], [ok.url, 2, { choices: [] }]);
  } finally {
    await Promise.all([dying.close(), ok.close()]);
  }
});

/** A hub streaming WORDS; `cutAfter` chunks then the socket destroyed (no [DONE]); `change` alters one word. */
const streaming = (cutAfter: number | null, change?: [number, string]): Handler => {
  return (_q, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    WORDS.forEach((w, i) => {
      if (cutAfter !== null && i >= cutAfter) return;
      res.write(chunk(change && change[0] === i ? change[1] : w));
    });
    if (cutAfter !== null) setTimeout(() => res.destroy(), 5);
    else res.end('data: [DONE]\n\n');
  };
};

const collect = async (it: AsyncIterable<unknown>): Promise<string> => {
  let s = '';
  for await (const c of it) s += (c as { choices: Array<{ text: string }> }).choices[0]?.text;
  return s;
};

test('stream: cut after 3 chunks, a greedy request resumes at the next hub — each chunk yielded once, in order', async () => {
  const cut = await hub(streaming(3));
  const whole = await hub(streaming(null));
  try {
    const c = new RetryingClient({ hubs: [cut.url, whole.url], ...fast });
    assert.equal(await collect(c.stream('/v1/completions', { temperature: 0 })), WORDS.join(''));
    assert.equal(c.retries, 1);
    const seeded = new RetryingClient({ hubs: [cut.url, whole.url], ...fast });
    assert.equal(await collect(seeded.stream('/v1/completions', { temperature: 0.8, seed: 7 })), WORDS.join(''), 'a seeded request too');
  } finally {
    await Promise.all([cut.close(), whole.close()]);
  }
});

test('stream: cut after chunks of a sampled request → STREAM_NOT_RESUMABLE; a replay that differs → STREAM_DIVERGED', async () => {
  const cut = await hub(streaming(3));
  const whole = await hub(streaming(null));
  const other = await hub(streaming(null, [1, ' hive']));
  const refusedFirst = await hub((_q, res) => {
    res.writeHead(503);
    res.end();
  });
  try {
    await assert.rejects(
      collect(new RetryingClient({ hubs: [cut.url, whole.url], ...fast }).stream('/v1/completions', { temperature: 0.8 })),
      (e: unknown) => e instanceof RetryingClientError && e.code === 'STREAM_NOT_RESUMABLE',
    );
    await assert.rejects(
      collect(new RetryingClient({ hubs: [cut.url, other.url], ...fast }).stream('/v1/completions', { temperature: 0 })),
      (e: unknown) => e instanceof RetryingClientError && e.code === 'STREAM_DIVERGED',
    );
    // Nothing yielded yet: a sampled request is simply retried.
    const c = new RetryingClient({ hubs: [refusedFirst.url, whole.url], ...fast });
    assert.equal(await collect(c.stream('/v1/completions', { temperature: 0.8 })), WORDS.join(''));
  } finally {
    await Promise.all([cut.close(), whole.close(), other.close(), refusedFirst.close()]);
  }
});

test('the wait before retry n is drawn in [½, 1) of min(max, base · 2ⁿ⁻¹)', () => {
  const lo = new RetryingClient({ hubs: ['http://a'], random: () => 0 });
  const hi = new RetryingClient({ hubs: ['http://a'], random: () => 1 });
  for (const [n, step] of [
    [1, 100],
    [2, 200],
    [5, 1_600],
    [6, 2_000],
    [30, 2_000],
  ] as const) {
    assert.equal(lo.delayMs(n), step / 2);
    assert.ok(hi.delayMs(n) < step && hi.delayMs(n) > 0.99 * step, `retry ${n}: ${hi.delayMs(n)}`);
  }
});
