/**
 * The volunteer client's parts that need no channel: reconnect backoff (table), the identity and login against a
 * real in-process hub, the slice download (progress, Range resume after a dropped connection, digest check, size cap)
 * against a loopback HTTP server, and the file cache.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { reconnectDelayMs } from '../../volunteer/backoff.ts';
import { loadIdentity, login, MemoryIdentityStore } from '../../volunteer/identity.ts';
import { downloadShard } from '../../volunteer/shard-download.ts';
import { sha256Digest } from '../../volunteer/shard-cache.ts';
import { FileShardCache } from '../../volunteer/node/file-cache.ts';
import { VolunteerError } from '../../volunteer/errors.ts';
import { testHub } from '../../harness/hub-fixtures.ts';

test('reconnect backoff: doubles per attempt within [step/2, step), capped, never zero', () => {
  const table: Array<[attempt: number, random: number, ms: number]> = [
    [1, 0, 500],
    [1, 0.999, 1000],
    [2, 0, 1000],
    [3, 0.5, 3000],
    [5, 0, 8000],
    [6, 0.999, 29_985],
    [40, 0, 15_000],
    [40, 1, 30_000],
  ];
  for (const [attempt, random, ms] of table)
    assert.equal(
      reconnectDelayMs(attempt, () => random),
      ms,
      `attempt ${attempt}, random ${random}`,
    );
  assert.throws(() => reconnectDelayMs(0, Math.random), RangeError);
});

test('an identity is made once and reused, and its login gets a node token from the hub', async () => {
  const store = new MemoryIdentityStore();
  const a = await loadIdentity(store);
  const b = await loadIdentity(store);
  assert.equal(a.wallet, b.wallet);
  assert.match(a.wallet, /^[1-9A-HJ-NP-Za-km-z]{32,44}$/);
  const t = await testHub({});
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  try {
    const address = t.app.server.address();
    const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
    const token = await login(url, a);
    assert.equal(token.wallet, a.wallet);
    assert.equal(t.hub.authenticate(`Bearer ${token.token}`), a.wallet);
  } finally {
    await t.close();
  }
});

function servePayload(body: Uint8Array, dropAfter: number | null): Promise<{ server: Server; url: string; requests: string[] }> {
  const etag = `"${createHash('sha256').update(body).digest('hex')}"`;
  const requests: string[] = [];
  let dropped = false;
  const server = createServer((req, res) => {
    requests.push(String(req.headers.range ?? 'full'));
    const m = /^bytes=(\d+)-$/.exec(String(req.headers.range ?? ''));
    const start = m && req.headers['if-range'] === etag ? Number(m[1]) : 0;
    res.writeHead(start > 0 ? 206 : 200, { 'content-length': body.length - start, etag, 'accept-ranges': 'bytes' });
    if (dropAfter !== null && !dropped) {
      dropped = true;
      res.write(body.subarray(start, dropAfter));
      setTimeout(() => res.destroy(), 20);
      return;
    }
    res.end(body.subarray(start));
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => {
      const a = server.address();
      resolve({ server, url: `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}/shard`, requests });
    }),
  );
}

test('a slice download reports progress, resumes with Range after a drop, and checks the digest', async () => {
  const body = Uint8Array.from({ length: 300_000 }, (_, i) => (i * 7) & 255);
  const digest = await sha256Digest(body);
  assert.equal(digest, `sha256:${createHash('sha256').update(body).digest('hex')}`);
  const { server, url, requests } = await servePayload(body, 100_000);
  try {
    const progress: number[] = [];
    const got = await downloadShard({ url, token: 't', bytes: body.length, digest, onProgress: (n) => progress.push(n) });
    assert.deepEqual(got, body);
    assert.deepEqual(requests, ['full', 'bytes=100000-']);
    assert.equal(progress.at(-1), body.length);
    assert.ok(progress.every((n, i) => i === 0 || n > (progress[i - 1] as number)));
    await assert.rejects(
      downloadShard({ url, token: 't', bytes: body.length, digest: `sha256:${'0'.repeat(64)}` }),
      (e: unknown) => e instanceof VolunteerError && e.code === 'SHARD_DIGEST_MISMATCH',
    );
    await assert.rejects(
      downloadShard({ url, token: 't', bytes: body.length - 1, digest }),
      (e: unknown) => e instanceof VolunteerError && e.code === 'SHARD_TOO_LARGE',
    );
  } finally {
    server.close();
  }
});

test('the file cache keeps a slice under its digest and refuses malformed digests', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'xs-cache-'));
  try {
    const cache = new FileShardCache(dir);
    const bytes = Uint8Array.of(1, 2, 3);
    const digest = await sha256Digest(bytes);
    assert.equal(await cache.get(digest), null);
    await cache.put(digest, bytes);
    assert.deepEqual(await cache.get(digest), bytes);
    await cache.delete(digest);
    assert.equal(await cache.get(digest), null);
    await assert.rejects(cache.get('sha256:../../etc/passwd'), RangeError);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
