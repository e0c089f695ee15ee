/**
 * The pages the hub serves: Vite's build of web/ (`npm run build:web`, which `npm start` runs) at fixed routes, and
 * the hashed files they load from /assets/.
 *
 * Caching: a page's HTML is `no-cache` (revalidated by its ETag, so a new build shows at once); files under /assets/
 * carry a content hash in their names and are `immutable` for a year. A page that was not built answers 503
 * `PAGES_NOT_BUILT` (JSON, as every hub error) instead of a 404, so an operator knows what to run. The build is
 * looked up per request: building while the hub runs is enough.
 *
 *   await registerPages(app);                       // web/dist
 *   await registerPages(app, { dir: '/tmp/build' }); // another build (tests)
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { HubError } from './errors.ts';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance } from 'fastify';

/** Where `npm run build:web` writes (web/vite.config.ts). */
export const PAGES_DIR = fileURLToPath(new URL('../web/dist/', import.meta.url));

/** Route → built file. */
export const PAGE_ROUTES: Readonly<Record<string, string>> = {
  '/': 'index.html',
  '/dashboard': 'dashboard.html',
  '/embed': 'embed.html',
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
      if (!existsSync(join(dir, file))) {
        const e = new HubError('PAGES_NOT_BUILT', `the hub's pages are not built (${file}): run \`npm run build:web\` where the hub runs`);
        return reply.code(e.status).header('cache-control', 'no-store').send(e.toJSON());
      }
      return reply
        .header('cache-control', PAGE_CACHE_CONTROL)
        .header('x-content-type-options', 'nosniff')
        .sendFile(file, dir, { cacheControl: false });
    });
  }
}
