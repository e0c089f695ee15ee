/**
 * Builds the hub's pages (web/, with its own Vite config) into a fresh temporary folder for a browser test; the hub
 * serves that folder (`buildApp(hub, { dir })`, `startSwarmHub(..., { dir })`). `test` mode swaps the volunteer
 * client for the scripted fake (web/test-entry/); `production` is the page as visitors get it. The join widget's
 * loader (`widget.js`, web/widget.vite.config.ts) is built into the same folder after the pages, as `npm run
 * build:web` does. The caller removes the folder.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'vite';

const root = fileURLToPath(new URL('..', import.meta.url));

export async function buildPages(mode: 'production' | 'test'): Promise<string> {
  const outDir = mkdtempSync(join(tmpdir(), `es-web-${mode}-`));
  await build({
    configFile: join(root, 'web/vite.config.ts'),
    mode,
    logLevel: 'warn',
    build: { outDir, emptyOutDir: true },
  });
  await build({
    configFile: join(root, 'web/widget.vite.config.ts'),
    mode,
    logLevel: 'warn',
    build: { outDir, emptyOutDir: false },
  });
  return outDir;
}
