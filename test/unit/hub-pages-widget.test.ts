/**
 * hub/pages.ts for the join widget, in-process (fastify inject): `/widget.js` with the headers other sites need,
 * `/embed` frameable by any site under a CSP without inline script, every other page unframeable, and 503
 * PAGES_NOT_BUILT for a missing loader. The build is a hand-made folder shaped like Vite's output.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import { EMBED_CSP, PAGE_CACHE_CONTROL, PAGE_ROUTES, registerPages } from '../../hub/pages.ts';

async function withPages(run: (app: ReturnType<typeof Fastify>, dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'es-pages-'));
  const app = Fastify({ logger: false });
  await registerPages(app, { dir });
  try {
    await run(app, dir);
  } finally {
    await app.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

test('/widget.js: 503 before a build, then the loader with the headers other sites need', async () => {
  await withPages(async (app, dir) => {
    const before = await app.inject({ method: 'GET', url: '/widget.js' });
    assert.equal(before.statusCode, 503);
    assert.equal(before.json().code, 'PAGES_NOT_BUILT');
    assert.match(before.json().error, /widget\.js.*npm run build:web/);
    assert.doesNotMatch(String(before.headers['content-type']), /javascript/);

    writeFileSync(join(dir, 'widget.js'), '(function(){})();');
    const r = await app.inject({ method: 'GET', url: '/widget.js', headers: { origin: 'https://site.example' } });
    assert.equal(r.statusCode, 200);
    assert.equal(r.body, '(function(){})();');
    assert.equal(r.headers['content-type'], 'application/javascript; charset=utf-8');
    assert.equal(r.headers['cache-control'], PAGE_CACHE_CONTROL);
    assert.equal(r.headers['access-control-allow-origin'], '*');
    assert.equal(r.headers['cross-origin-resource-policy'], 'cross-origin');
    assert.equal(r.headers['x-content-type-options'], 'nosniff');
    const again = await app.inject({ method: 'GET', url: '/widget.js', headers: { 'if-none-match': r.headers.etag as string } });
    assert.equal(again.statusCode, 304);
  });
});

test('/embed may be framed by any site, with no inline script; every other page refuses framing', async () => {
  await withPages(async (app, dir) => {
    for (const file of Object.values(PAGE_ROUTES)) writeFileSync(join(dir, file), `<!doctype html><title>${file}</title>`);
    const embed = await app.inject({ method: 'GET', url: '/embed?host=https%3A%2F%2Fsite.example' });
    assert.equal(embed.statusCode, 200);
    assert.equal(embed.headers['content-security-policy'], EMBED_CSP);
    assert.match(EMBED_CSP, /frame-ancestors \*/);
    assert.match(EMBED_CSP, /script-src 'self' 'wasm-unsafe-eval'(;|$)/);
    assert.doesNotMatch(EMBED_CSP, /unsafe-inline|'unsafe-eval'/);
    assert.equal(embed.headers['x-frame-options'], undefined);
    for (const route of Object.keys(PAGE_ROUTES).filter((r) => r !== '/embed')) {
      const r = await app.inject({ method: 'GET', url: route });
      assert.equal(r.statusCode, 200, route);
      assert.equal(r.headers['content-security-policy'], "frame-ancestors 'none'", route);
      assert.equal(r.headers['x-frame-options'], 'DENY', route);
    }
  });
});
