/**
 * The hub's pages, built by Vite into web/dist (`npm run build:web`; `npm start` runs it), served by hub/pages.ts.
 * Each page is one HTML entry in PAGES.
 *
 * `--mode test` builds the same pages with the volunteer client swapped for a scripted fake
 * (web/test-entry/fake-client-factory.ts) into .cache/web-test, for the browser tests. Production builds never
 * contain the fake: the swap is an alias that exists only in that mode.
 */
import { fileURLToPath } from 'node:url';
import { svelte } from '@sveltejs/vite-plugin-svelte';
import { defineConfig, type Plugin } from 'vite';
import { expertKernelPlugin } from '../shaders/wasm/vite-plugin.ts';
import { WGSL } from '../shaders/wgsl-sources.ts';

const web = fileURLToPath(new URL('./', import.meta.url));

/** Entry name → HTML file under web/. */
const PAGES: Record<string, string> = {
  volunteer: 'index.html',
  dashboard: 'dashboard.html',
  /** The join widget's frame: the volunteer client inside a host page's sandboxed iframe (/widget.js makes it). */
  embed: 'embed.html',
};

/** shaders/wgsl-sources.ts reads the .wgsl files from disk in Node; in the pages it is the same strings, inlined. */
const inlineWgsl: Plugin = {
  name: 'expertswarm:inline-wgsl',
  enforce: 'pre',
  load(id) {
    if (id.split('?')[0]?.endsWith('/shaders/wgsl-sources.ts')) return `export const WGSL = ${JSON.stringify(WGSL)};`;
    return null;
  },
};

export default defineConfig(({ mode }) => {
  const test = mode === 'test';
  return {
    root: web,
    base: '/',
    publicDir: false,
    // The wasm fallback's kernel (shaders/wasm/), built from its AssemblyScript sources and inlined as bytes.
    plugins: [inlineWgsl, expertKernelPlugin(), svelte({ configFile: false })],
    resolve: {
      alias: test ? [{ find: /^.*\/client-factory\.ts$/, replacement: `${web}test-entry/fake-client-factory.ts` }] : [],
    },
    build: {
      outDir: test ? `${web}../.cache/web-test` : `${web}dist`,
      emptyOutDir: true,
      target: 'es2022',
      // Hashed names under assets/: hub/pages.ts serves that folder as immutable.
      assetsDir: 'assets',
      rolldownOptions: {
        // The timing report names the WGSL inlining and onnxruntime's 14 MB wasm on every build: noise, not news.
        checks: { bundlerTimings: false },
        input: Object.fromEntries(Object.entries(PAGES).map(([name, file]) => [name, `${web}${file}`])),
      },
    },
  };
});
