/**
 * hub/pages.ts for the join widget, in-process (fastify inject): `/widget.js` with the headers other sites need,
 * `/embed` frameable by any site, every other page unframeable, each page's Content-Security-Policy directive by
 * directive, and 503 PAGES_NOT_BUILT for a missing loader. The build is a hand-made folder shaped like Vite's output.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import { EMBED_CSP, PAGE_CACHE_CONTROL, PAGE_CSP, PAGE_ROUTES, registerPages } from '../../hub/pages.ts';

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

/** A policy as directive → sources, so a test names what each directive allows, whatever the order. */
function directives(policy: string): Record<string, string> {
  return Object.fromEntries(
    policy
      .split(';')
      .map((d) => d.trim().split(/\s+/))
      .filter((d) => d[0])
      .map(([name, ...sources]) => [name as string, sources.join(' ')]),
  );
}

/** What every page's policy says, whatever it runs. */
const COMMON = {
  'default-src': "'self'",
  'connect-src': "'self'",
  'img-src': "'self' data:",
  'style-src': "'self'",
  'object-src': "'none'",
  'base-uri': "'none'",
  'form-action': "'none'",
};

test('each page sends its own Content-Security-Policy: nothing inline, no eval, wasm only where the volunteer runs', async () => {
  const want: Record<string, Record<string, string>> = {
    // onnxruntime-web's wasm fallback runs in the volunteer page and in the widget's frame.
    '/': { ...COMMON, 'script-src': "'self' 'wasm-unsafe-eval'", 'frame-ancestors': "'none'" },
    '/dashboard': { ...COMMON, 'script-src': "'self'", 'frame-ancestors': "'none'" },
    '/embed': { ...COMMON, 'script-src': "'self' 'wasm-unsafe-eval'", 'frame-ancestors': '*' },
  };
  assert.deepEqual(Object.keys(PAGE_CSP).sort(), Object.keys(PAGE_ROUTES).sort(), 'a policy for every page');
  assert.equal(PAGE_CSP['/embed'], EMBED_CSP);
  await withPages(async (app, dir) => {
    for (const file of Object.values(PAGE_ROUTES)) writeFileSync(join(dir, file), `<!doctype html><title>${file}</title>`);
    for (const [route, policy] of Object.entries(want)) {
      const r = await app.inject({ method: 'GET', url: route === '/embed' ? '/embed?host=https%3A%2F%2Fsite.example' : route });
      assert.equal(r.statusCode, 200, route);
      const sent = String(r.headers['content-security-policy']);
      assert.deepEqual(directives(sent), policy, route);
      assert.doesNotMatch(sent, /unsafe-inline|'unsafe-eval'|\bblob:|https?:|ws:|wss:/, `${route}: no inline, no eval, no other origin`);
    }
  });
});

test('/embed may be framed by any site; every other page refuses framing', async () => {
  await withPages(async (app, dir) => {
    for (const file of Object.values(PAGE_ROUTES)) writeFileSync(join(dir, file), `<!doctype html><title>${file}</title>`);
    const embed = await app.inject({ method: 'GET', url: '/embed?host=https%3A%2F%2Fsite.example' });
    assert.equal(embed.statusCode, 200);
    assert.equal(embed.headers['content-security-policy'], EMBED_CSP);
    assert.equal(directives(EMBED_CSP)['frame-ancestors'], '*');
    assert.equal(embed.headers['x-frame-options'], undefined);
    for (const route of Object.keys(PAGE_ROUTES).filter((r) => r !== '/embed')) {
      const r = await app.inject({ method: 'GET', url: route });
      assert.equal(r.statusCode, 200, route);
      assert.equal(directives(String(r.headers['content-security-policy']))['frame-ancestors'], "'none'", route);
      assert.equal(r.headers['x-frame-options'], 'DENY', route);
    }
  });
});
