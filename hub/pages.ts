/**
 * The pages the hub serves: Vite's build of web/ (`npm run build:web`, which `npm start` runs) at fixed routes, and
 * the hashed files they load from /assets/.
 *
 * Caching: a page's HTML is `no-cache` (revalidated by its ETag, so a new build shows at once); files under /assets/
 * carry a content hash in their names and are `immutable` for a year. A page that was not built answers 503
 * `PAGES_NOT_BUILT` (JSON, as every hub error) instead of a 404, so an operator knows what to run. The build is
 * looked up per request: building while the hub runs is enough.
 *
 * Content-Security-Policy: every page gets one (PAGE_CSP): its own scripts and styles, its own API and WebSocket,
 * nothing inline, no eval, no plugins, no <base>, no forms posted away; 'wasm-unsafe-eval' only where onnxruntime's
 * wasm runs (the volunteer page and the widget's frame). Framing: `/embed` is the join widget's frame, made to sit in
 * any site's page (`frame-ancestors *`); every other page refuses to be framed (`frame-ancestors 'none'`,
 * X-Frame-Options DENY), so nobody can dress the volunteer page up as a clickjacking target. `/widget.js`, the widget's loader, is the one
 * file other sites load: CORS-open and cross-origin-resource-policy `cross-origin`, revalidated like a page (its name
 * has no hash). docs/widget.md.
 *
 *   await registerPages(app);                       // web/dist
 *   await registerPages(app, { dir: '/tmp/build' }); // another build (tests)
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { HubError } from './errors.ts';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance, FastifyReply } from 'fastify';

/** Where `npm run build:web` writes (web/vite.config.ts). */
export const PAGES_DIR = fileURLToPath(new URL('../web/dist/', import.meta.url));

/** Route → built file. */
export const PAGE_ROUTES: Readonly<Record<string, string>> = {
  '/': 'index.html',
  '/dashboard': 'dashboard.html',
  '/embed': 'embed.html',
};

/** The join widget's loader, at the build's root (web/widget.vite.config.ts). */
export const WIDGET_ROUTE = '/widget.js';
export const WIDGET_FILE = 'widget.js';

/** The route other sites frame. */
export const EMBED_ROUTE = '/embed';

/**
 * A page's policy: its own scripts (plus 'wasm-unsafe-eval' where onnxruntime-web's wasm runs), its own API and
 * WebSocket (CSP3 'self' covers ws: and wss: to the same host and port; Chromium follows it), its own stylesheets
 * only (Vite extracts the Svelte and uPlot CSS into files; Svelte and uPlot set element styles through the CSSOM,
 * which style-src does not govern), images from itself and data: (the favicon is `data:,`), and who may frame it.
 */
function pageCsp({ wasm, frameAncestors }: { wasm: boolean; frameAncestors: string }): string {
  return [
    "default-src 'self'",
    `script-src 'self'${wasm ? " 'wasm-unsafe-eval'" : ''}`,
    "connect-src 'self'",
    "img-src 'self' data:",
    "style-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    `frame-ancestors ${frameAncestors}`,
  ].join('; ');
}

/** The widget's frame: framed by any site; it runs the volunteer client, wasm fallback included. */
export const EMBED_CSP = pageCsp({ wasm: true, frameAncestors: '*' });

/** Route → its Content-Security-Policy. Pages other than /embed refuse framing. */
export const PAGE_CSP: Readonly<Record<string, string>> = {
  '/': pageCsp({ wasm: true, frameAncestors: "'none'" }),
  '/dashboard': pageCsp({ wasm: false, frameAncestors: "'none'" }),
  [EMBED_ROUTE]: EMBED_CSP,
};

/** Vite's `build.assetsDir`: every name in it has a content hash. */
export const ASSETS_PREFIX = '/assets/';

export const PAGE_CACHE_CONTROL = 'no-cache';
export const ASSET_CACHE_CONTROL = 'public, max-age=31536000, immutable';

export interface PagesOptions {
  /** A build of web/ other than PAGES_DIR. */
  dir?: string;
}

export async function registerPages(app: FastifyInstance, options: PagesOptions = {}): Promise<void> {
  const dir = options.dir ?? PAGES_DIR;
  await app.register(fastifyStatic, {
    root: join(dir, ASSETS_PREFIX),
    prefix: ASSETS_PREFIX,
    index: false,
    dotfiles: 'deny',
    // Vite's asset names are flat `name-hash.ext`: anything else (the folder, a sub-path, an encoded `..`) is a plain
    // 404. sendFile passes the page's own file name, without the slash.
    allowedPath: (pathname) => /^\/?\w[\w.-]*$/.test(pathname) && !pathname.includes('..'),
    cacheControl: false,
    setHeaders(res) {
      res.setHeader('cache-control', ASSET_CACHE_CONTROL);
      res.setHeader('x-content-type-options', 'nosniff');
    },
  });
  for (const [route, file] of Object.entries(PAGE_ROUTES)) {
    app.get(route, async (_req, reply) => {
      if (!existsSync(join(dir, file))) return notBuilt(reply, file);
      reply.header('content-security-policy', PAGE_CSP[route] as string);
      if (route !== EMBED_ROUTE) reply.header('x-frame-options', 'DENY');
      return reply
        .header('cache-control', PAGE_CACHE_CONTROL)
        .header('x-content-type-options', 'nosniff')
        .sendFile(file, dir, { cacheControl: false });
    });
  }
  app.get(WIDGET_ROUTE, {
    // @fastify/static sets the type it guesses (text/javascript) after the handler: the loader's own type goes last.
    onSend: async (_req, reply, payload) => {
      if (reply.statusCode < 400) reply.header('content-type', 'application/javascript; charset=utf-8');
      return payload;
    },
    handler: async (_req, reply) => {
      if (!existsSync(join(dir, WIDGET_FILE))) return notBuilt(reply, WIDGET_FILE);
      return reply
        .header('cache-control', PAGE_CACHE_CONTROL)
        .header('x-content-type-options', 'nosniff')
        .header('access-control-allow-origin', '*')
        .header('cross-origin-resource-policy', 'cross-origin')
        .sendFile(WIDGET_FILE, dir, { cacheControl: false });
    },
  });
}

function notBuilt(reply: FastifyReply, file: string): FastifyReply {
  const e = new HubError('PAGES_NOT_BUILT', `the hub's pages are not built (${file}): run \`npm run build:web\` where the hub runs`);
  return reply.code(e.status).header('cache-control', 'no-store').send(e.toJSON());
}
