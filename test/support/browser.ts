/**
 * Real headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core; never a browser download) with
 * WebGPU through SwiftShader, on a page served from loopback that runs a bundled entry module.
 */
import { createServer, type Server } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { build, type Plugin } from 'esbuild';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { WGSL } from '../../shaders/wgsl-sources.ts';

export const CHROMIUM = '/usr/bin/chromium';

/** Chromium flags for WebGPU on SwiftShader in a sandbox-less container with no network. */
export const CHROMIUM_ARGS = [
  '--enable-unsafe-webgpu',
  '--enable-dawn-features=allow_unsafe_apis,disable_robustness',
  '--no-sandbox',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-quic',
];

/** The browser has no filesystem: the WGSL loader module is replaced by the same strings, inlined. */
const inlineWgsl: Plugin = {
  name: 'inline-wgsl',
  setup(b) {
    b.onLoad({ filter: /wgsl-sources\.ts$/ }, () => ({
      contents: `export const WGSL = ${JSON.stringify(WGSL)};`,
      loader: 'ts',
    }));
  },
};

export async function bundle(entry: string): Promise<string> {
  const out = await build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    plugins: [inlineWgsl],
    logLevel: 'silent',
  });
  return out.outputFiles[0]?.text ?? '';
}

/** Where pages find onnxruntime-web's wasm files (set `ort.env.wasm.wasmPaths` to it). */
export const ORT_PREFIX = '/ort/';

/**
 * onnxruntime-web's runtime file for a request path under ORT_PREFIX (from node_modules/onnxruntime-web/dist), or
 * null for any other name.
 */
export function ortAsset(path: string): { body: Buffer; type: string } | null {
  if (!path.startsWith(ORT_PREFIX)) return null;
  const name = path.slice(ORT_PREFIX.length);
  if (!/^ort-wasm-simd-threaded(\.[a-z]+)?\.(wasm|mjs)$/.test(name)) return null;
  const dist = dirname(createRequire(import.meta.url).resolve('onnxruntime-web/ort-wasm-simd-threaded.wasm'));
  return { body: readFileSync(join(dist, name)), type: name.endsWith('.wasm') ? 'application/wasm' : 'text/javascript' };
}

export interface BrowserPage {
  page: Page;
  close(): Promise<void>;
}

/**
 * Serves `script` on a blank page on loopback (with onnxruntime-web's wasm files under ORT_PREFIX) and opens it in a
 * fresh headless Chromium profile.
 */
export async function openPage(script: string): Promise<BrowserPage> {
  const html = `<!doctype html><meta charset="utf-8"><title>expertswarm test</title><script type="module" src="/main.js"></script>`;
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    const ort = ortAsset(path);
    if (path === '/main.js') {
      res.writeHead(200, { 'content-type': 'text/javascript' }).end(script);
    } else if (ort) {
      res.writeHead(200, { 'content-type': ort.type }).end(ort.body);
    } else if (path.startsWith(ORT_PREFIX)) {
      res.writeHead(404).end();
    } else {
      res.writeHead(200, { 'content-type': 'text/html' }).end(html);
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as { port: number }).port;
  const profile = mkdtempSync(join(tmpdir(), 'es-chromium-'));
  let context: BrowserContext | undefined;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
      timeout: 60_000,
    });
    const page = context.pages()[0] ?? (await context.newPage());
    await page.goto(`http://127.0.0.1:${port}/`);
    return {
      page,
      async close() {
        await context?.close();
        server.close();
        rmSync(profile, { recursive: true, force: true });
      },
    };
  } catch (e) {
    await context?.close();
    server.close();
    rmSync(profile, { recursive: true, force: true });
    throw e;
  }
}
