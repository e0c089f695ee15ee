/**
 * The join widget's loader (/widget.js): a second Vite build, of web/src/widget/loader.ts alone as ONE
 * classic script (IIFE: no import, no export) at the root of the pages' build folder. Run after the pages build
 * (`npm run build:web`, harness/pages-build.ts): that one empties the folder, this one only adds widget.js.
 *
 * The loader is on every host page, so its size is a budget: the build prints its gzipped size and fails above
 * WIDGET_GZIP_LIMIT_BYTES.
 */
import { gzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { defineConfig, type Plugin } from 'vite';

const web = fileURLToPath(new URL('./', import.meta.url));

export const WIDGET_FILE = 'widget.js';
/** 15 KB gzipped (the widget issue's budget), counted as KiB. */
export const WIDGET_GZIP_LIMIT_BYTES = 15 * 1024;

const sizeBudget: Plugin = {
  name: 'expertswarm:widget-size',
  generateBundle(_options, bundle) {
    const chunk = bundle[WIDGET_FILE];
    if (chunk?.type !== 'chunk') this.error(`the widget build made no ${WIDGET_FILE}`);
    const gz = gzipSync(chunk.code, { level: 9 }).length;
    const kb = (n: number): string => `${(n / 1024).toFixed(2)} KiB`;
    const line = `${WIDGET_FILE}: ${kb(chunk.code.length)}, ${kb(gz)} gzipped (limit ${kb(WIDGET_GZIP_LIMIT_BYTES)})`;
    if (gz > WIDGET_GZIP_LIMIT_BYTES) this.error(`${line}: over the loader's size budget`);
    console.log(line);
  },
};

export default defineConfig(({ mode }) => ({
  root: web,
  base: '/',
  publicDir: false,
  plugins: [sizeBudget],
  build: {
    outDir: mode === 'test' ? `${web}../.cache/web-test` : `${web}dist`,
    // The pages build wrote this folder first.
    emptyOutDir: false,
    target: 'es2022',
    copyPublicDir: false,
    // Not library mode: Vite's lib mode wants a `name` for an IIFE, which would become a global (window.X) on every
    // host page. loader.ts exports nothing, so a plain IIFE assigns no global (the size test checks).
    rolldownOptions: {
      checks: { bundlerTimings: false },
      input: `${web}src/widget/loader.ts`,
      output: { format: 'iife', entryFileNames: WIDGET_FILE },
    },
  },
}));
