/**
 * A hub with no models on loopback, serving a build of the hub's pages (harness/pages-build.ts): the page tests'
 * server where no coordinator is needed (the volunteer page, the widget's test build).
 *
 *   const hub = await pagesHub(await buildPages('test'));
 *   await page.goto(`${hub.url}/`);
 *   await hub.close(); // the hub only: the caller removes the build
 */
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../hub/app.ts';
import { defaultConfig, Hub } from '../hub/hub.ts';

export interface PagesHub {
  /** `http://127.0.0.1:port`, no trailing slash. */
  url: string;
  close(): Promise<void>;
}

export async function pagesHub(dir: string): Promise<PagesHub> {
  const hub = new Hub(defaultConfig({ stateDir: ':memory:', models: [] }));
  await hub.load();
  let app: FastifyInstance | undefined;
  const close = async (): Promise<void> => {
    await app?.close();
    await hub.stop();
  };
  try {
    app = await buildApp(hub, { dir });
    await app.listen({ port: 0, host: '127.0.0.1' });
    return { url: `http://127.0.0.1:${(app.server.address() as { port: number }).port}`, close };
  } catch (e) {
    await close();
    throw e;
  }
}
