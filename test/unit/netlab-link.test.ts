/**
 * The network lab's link emulator (harness/netlab-link.ts) on loopback, no namespaces: the round trip it adds, its
 * jitter's bounds, a stream kept in order and whole (8 MiB each way, a half-close), UDP delayed per datagram.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { startLink } from '../../harness/netlab-link.ts';
import { dueAt, oneWayDelayMs, PROFILES, seededRandom } from '../../harness/netlab-profiles.ts';

async function echoServer(): Promise<{ server: Server; port: number }> {
  const server = createServer((s) => s.pipe(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as AddressInfo).port };
}

function connected(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port }, () => resolve(s));
    s.once('error', reject);
    s.setNoDelay(true);
  });
}

/** `n` one-byte-at-a-time echoes; each round trip in ms. */
async function echoRtts(s: Socket, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const got = new Promise<void>((r) => s.once('data', () => r()));
    s.write(Buffer.from([i & 255]));
    await got;
    out.push(performance.now() - t0);
  }
  return out;
}

test('one-way delay and due times: half the round trip ± half the jitter, never ahead of the chunk before', () => {
  const b = PROFILES.broadband;
  assert.equal(oneWayDelayMs(b, 0.5), 15);
  assert.equal(oneWayDelayMs(b, 0), 12.5);
  assert.ok(oneWayDelayMs(b, 0.999999) < 17.5 && oneWayDelayMs(b, 0.999999) > 17.49);
  assert.equal(dueAt(100, 130, 10), 130, 'a fast chunk waits for the slow one ahead of it');
  assert.equal(dueAt(100, 50, 10), 110);
  const r1 = seededRandom(7);
  const r2 = seededRandom(7);
  for (let i = 0; i < 5; i++) assert.equal(r1(), r2(), 'a seed replays');
});

test('TCP: the link adds its round trip (40 ms, no jitter) to every echo', async () => {
  const echo = await echoServer();
  const link = await startLink({
    proto: 'tcp',
    listenPort: 0,
    listenHost: '127.0.0.1',
    target: { host: '127.0.0.1', port: echo.port },
    shape: { rttMs: 40, jitterMs: 0 },
  });
  try {
    const direct = await connected(echo.port);
    const d = await echoRtts(direct, 10);
    direct.destroy();
    const s = await connected(link.port);
    const rtts = await echoRtts(s, 20);
    s.destroy();
    const sorted = [...rtts].sort((a, b) => a - b);
    assert.ok(Math.max(...d) < 20, `loopback alone is fast: ${d.map((x) => x.toFixed(1))}`);
    assert.ok((sorted[0] as number) >= 39, `no echo is faster than the link's round trip: ${sorted[0]}`);
    assert.ok((sorted[10] as number) <= 60, `the median is the round trip plus little: ${sorted[10]}`);
    assert.equal(link.stats.connections, 1);
    assert.equal(link.stats.up, 20);
    assert.equal(link.stats.down, 20);
  } finally {
    await link.close();
    echo.server.close();
  }
});

test('TCP: jitter spreads the round trips within ±jitter and keeps the stream in order', async () => {
  const echo = await echoServer();
  const link = await startLink({
    proto: 'tcp',
    listenPort: 0,
    listenHost: '127.0.0.1',
    target: { host: '127.0.0.1', port: echo.port },
    shape: { rttMs: 40, jitterMs: 20 },
    seed: 3,
  });
  try {
    const s = await connected(link.port);
    const rtts = await echoRtts(s, 60);
    const min = Math.min(...rtts);
    const max = Math.max(...rtts);
    assert.ok(min >= 19, `none below rtt − jitter: ${min}`);
    assert.ok(max - min >= 8, `jitter shows: ${min.toFixed(1)}..${max.toFixed(1)}`);
    // A burst of numbered writes, each its own chunk with its own draw, comes back in order.
    const want = Buffer.concat(Array.from({ length: 300 }, (_, i) => Buffer.from(`${i},`)));
    const got: Buffer[] = [];
    let n = 0;
    const done = new Promise<void>((r) =>
      s.on('data', (c: Buffer) => {
        got.push(c);
        n += c.length;
        if (n >= want.length) r();
      }),
    );
    for (let i = 0; i < 300; i++) {
      s.write(`${i},`);
      if (i % 10 === 0) await new Promise((r) => setImmediate(r));
    }
    await done;
    assert.equal(Buffer.concat(got).toString(), want.toString());
    s.destroy();
  } finally {
    await link.close();
    echo.server.close();
  }
});

test('TCP: 8 MiB each way arrive whole through a paused reader, and a half-close is carried', async () => {
  const up = randomBytes(8 << 20);
  const down = randomBytes(8 << 20);
  const hash = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
  let serverGot = '';
  const server = createServer({ allowHalfOpen: true }, (s) => {
    const h = createHash('sha256');
    s.on('data', (c) => h.update(c));
    s.on('end', () => {
      serverGot = h.digest('hex');
      // The answer goes after the client's FIN: the link must keep this direction open.
      s.end(down);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const link = await startLink({
    proto: 'tcp',
    listenPort: 0,
    listenHost: '127.0.0.1',
    target: { host: '127.0.0.1', port: (server.address() as AddressInfo).port },
    shape: { rttMs: 4, jitterMs: 2 },
    highWaterBytes: 256 << 10,
  });
  try {
    const s = connect({ host: '127.0.0.1', port: link.port, allowHalfOpen: true });
    const h = createHash('sha256');
    let bytes = 0;
    const ended = new Promise<void>((r) => s.on('end', () => r()));
    s.on('data', (c: Buffer) => {
      h.update(c);
      bytes += c.length;
      // A slow reader: the link must hold back, not lose or reorder.
      if (bytes % (1 << 20) < c.length) {
        s.pause();
        setTimeout(() => s.resume(), 30);
      }
    });
    s.end(up);
    await ended;
    assert.equal(serverGot, hash(up), 'the upload arrived whole');
    assert.equal(bytes, down.length);
    assert.equal(h.digest('hex'), hash(down), 'the download arrived whole, in order');
    s.destroy();
  } finally {
    await link.close();
    server.close();
  }
});

test('UDP: every datagram is delayed by the link, and answers find their way back', async () => {
  const target = createSocket('udp4');
  target.on('message', (m, r) => target.send(m, r.port, r.address));
  await new Promise<void>((r) => target.bind(0, '127.0.0.1', r));
  const link = await startLink({
    proto: 'udp',
    listenPort: 0,
    listenHost: '127.0.0.1',
    target: { host: '127.0.0.1', port: target.address().port },
    shape: { rttMs: 30, jitterMs: 10 },
  });
  const client = createSocket('udp4');
  try {
    await new Promise<void>((r) => client.bind(0, '127.0.0.1', r));
    const rtts: number[] = [];
    for (let i = 0; i < 15; i++) {
      const t0 = performance.now();
      const got = new Promise<void>((r) => client.once('message', () => r()));
      client.send(Buffer.from([i]), link.port, '127.0.0.1');
      await got;
      rtts.push(performance.now() - t0);
    }
    assert.ok(Math.min(...rtts) >= 19, `none below rtt − jitter: ${Math.min(...rtts)}`);
    const med = [...rtts].sort((a, b) => a - b)[7] as number;
    assert.ok(med <= 60, `the median is the round trip plus little (busy cores): ${med}`);
    assert.equal(link.stats.datagramsUp, 15);
    assert.equal(link.stats.datagramsDown, 15);
  } finally {
    client.close();
    await link.close();
    target.close();
  }
});
