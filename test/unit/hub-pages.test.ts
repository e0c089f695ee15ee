/**
 * hub/pages.ts in-process (fastify inject, no port): the built pages at their routes, their caching (HTML
 * revalidated, hashed assets immutable), 503 PAGES_NOT_BUILT before a build, JSON 404s for missing assets, and a
 * build that appears while the hub runs. The build is a hand-made folder shaped like Vite's output.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import { ASSET_CACHE_CONTROL, PAGE_CACHE_CONTROL, registerPages } from '../../hub/pages.ts';

async function withPages(run: (app: ReturnType<typeof Fastify>, dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'es-pages-'));
  const app = Fastify({ logger: false });
  app.setNotFoundHandler((req, reply) => {
    void reply.status(404).send({ error: `no route ${req.method} ${req.url}`, code: 'NOT_FOUND' });
  });
  await registerPages(app, { dir });
  try {
    await run(app, dir);
  } finally {
    await app.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

function writeBuild(dir: string): void {
  mkdirSync(join(dir, 'assets'), { recursive: true });
  writeFileSync(
    join(dir, 'index.html'),
    '<!doctype html><title>volunteer</title><script type="module" src="/assets/volunteer-AbC123.js"></script>',
  );
  writeFileSync(join(dir, 'assets/volunteer-AbC123.js'), 'console.log("page")');
  writeFileSync(join(dir, 'assets/volunteer-XyZ789.css'), 'body{}');
}

test('before a build the page answers 503 PAGES_NOT_BUILT; after one, it is served without a restart', async () => {
  await withPages(async (app, dir) => {
    const before = await app.inject({ method: 'GET', url: '/' });
    assert.equal(before.statusCode, 503);
    assert.equal(before.json().code, 'PAGES_NOT_BUILT');
    assert.match(before.json().error, /npm run build:web/);
    assert.equal(before.headers['cache-control'], 'no-store');

    writeBuild(dir);
    const after = await app.inject({ method: 'GET', url: '/' });
    assert.equal(after.statusCode, 200);
    assert.match(String(after.headers['content-type']), /^text\/html/);
    assert.match(after.body, /volunteer-AbC123\.js/);
  });
});

test('caching: the page is revalidated (no-cache + ETag → 304), hashed assets are immutable', async () => {
  await withPages(async (app, dir) => {
    writeBuild(dir);
    const page = await app.inject({ method: 'GET', url: '/?from=widget' });
    assert.equal(page.statusCode, 200);
    assert.equal(page.headers['cache-control'], PAGE_CACHE_CONTROL);
    assert.equal(page.headers['x-content-type-options'], 'nosniff');
    const etag = page.headers.etag as string;
    assert.ok(etag, 'the page has an ETag');
    const again = await app.inject({ method: 'GET', url: '/', headers: { 'if-none-match': etag } });
    assert.equal(again.statusCode, 304);
    const head = await app.inject({ method: 'HEAD', url: '/' });
    assert.equal(head.statusCode, 200);

    const js = await app.inject({ method: 'GET', url: '/assets/volunteer-AbC123.js' });
    assert.equal(js.statusCode, 200);
    assert.match(String(js.headers['content-type']), /javascript/);
    assert.equal(js.headers['cache-control'], ASSET_CACHE_CONTROL);
    assert.match(ASSET_CACHE_CONTROL, /immutable/);
    const css = await app.inject({ method: 'GET', url: '/assets/volunteer-XyZ789.css' });
    assert.equal(css.headers['cache-control'], ASSET_CACHE_CONTROL);
    assert.match(String(css.headers['content-type']), /^text\/css/);
  });
});

test('missing assets, traversal and other paths end in the JSON 404', async () => {
  await withPages(async (app, dir) => {
    writeBuild(dir);
    writeFileSync(join(dir, 'secret.txt'), 'not a page');
    mkdirSync(join(dir, 'assets/sub'));
    writeFileSync(join(dir, 'assets/sub/deep.js'), 'not a page');
    for (const url of [
      '/assets/nope-123.js',
      '/assets/',
      '/assets',
      '/assets/sub/deep.js',
      '/assets/../secret.txt',
      '/assets/%2e%2e/secret.txt',
      '/assets/..%2fsecret.txt',
      '/secret.txt',
      '/index.html',
    ]) {
      const r = await app.inject({ method: 'GET', url });
      assert.deepEqual([r.statusCode, r.json().code], [404, 'NOT_FOUND'], url);
    }
  });
});
