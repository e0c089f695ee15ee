/**
 * Real headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core; never a browser download) with
 * WebGPU through SwiftShader: a page served from loopback that runs a bundled entry module (openPage), and the
 * launchers, error collection and axe check that the page tests (dashboard, volunteer page, widget) share.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { AxeBuilder } from '@axe-core/playwright';
import { build, type Plugin } from 'esbuild';
import { chromium, type Browser, type BrowserContext, type Page, type ViewportSize } from 'playwright-core';
import { WGSL } from '../shaders/wgsl-sources.ts';

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

/** The page tests' launch: CHROMIUM_ARGS in Chrome's new headless mode. */
export const CHROMIUM_LAUNCH = { executablePath: CHROMIUM, headless: true, args: [...CHROMIUM_ARGS, '--headless=new'], timeout: 60_000 };

/** A headless Chromium (CHROMIUM_LAUNCH, or other flags) for a test that opens its own contexts; the caller closes it. */
export function launchChromium(args: string[] = CHROMIUM_LAUNCH.args): Promise<Browser> {
  return chromium.launch({ ...CHROMIUM_LAUNCH, args });
}

export interface ChromiumProfile {
  context: BrowserContext;
  /** The profile's first page, blank. */
  page: Page;
  /** Closes the browser and removes its profile. */
  close(): Promise<void>;
}

/** A headless Chromium on a fresh profile (a temporary folder, removed by close), with its first page. */
export async function openProfile({ args, viewport }: { args?: string[]; viewport?: ViewportSize } = {}): Promise<ChromiumProfile> {
  const profile = mkdtempSync(join(tmpdir(), 'es-chromium-'));
  let context: BrowserContext | undefined;
  const close = async (): Promise<void> => {
    await context?.close();
    rmSync(profile, { recursive: true, force: true });
  };
  try {
    context = await chromium.launchPersistentContext(profile, {
      ...CHROMIUM_LAUNCH,
      args: args ?? CHROMIUM_LAUNCH.args,
      ...(viewport ? { viewport } : {}),
    });
    const page = context.pages()[0] ?? (await context.newPage());
    return { context, page, close };
  } catch (e) {
    await close();
    throw e;
  }
}

/**
 * Collects what goes wrong on `page`: its uncaught errors, and its console messages of `types` (errors unless told)
 * except those that match `ignore`. The array fills as the page runs.
 */
export function pageErrors(page: Page, { types = ['error'], ignore }: { types?: string[]; ignore?: RegExp } = {}): string[] {
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (types.includes(m.type()) && !ignore?.test(m.text())) errors.push(m.text());
  });
  return errors;
}

/** axe-core over the page and its frames: no serious or critical violation of WCAG 2.x A/AA. Returns axe's results. */
export async function assertAccessible(page: Page, where: string): Promise<Awaited<ReturnType<AxeBuilder['analyze']>>> {
  const result = await new AxeBuilder({ page }).withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa']).analyze();
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(
    bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => JSON.stringify(n.target)).join(', ')}`),
    [],
    `${where}: axe violations`,
  );
  return result;
}

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
  let browser: ChromiumProfile | undefined;
  const close = async (): Promise<void> => {
    await browser?.close();
    server.close();
  };
  try {
    // CHROMIUM_ARGS alone (no '--headless=new'), as the kernel tests have always launched it.
    browser = await openProfile({ args: CHROMIUM_ARGS });
    await browser.page.goto(`http://127.0.0.1:${port}/`);
    return { page: browser.page, close };
  } catch (e) {
    await close();
    throw e;
  }
}

/** Where the volunteer page keeps its worker id (sessionStorage; web/src/volunteer/browser-client.ts). */
export const PAGE_WORKER_ID_KEY = 'expertswarm.worker-id';

export interface VolunteerTab {
  context: BrowserContext;
  page: Page;
  /** The tab's worker id (`page-…`), as the hub's events and dispatch map name it. */
  workerId: string;
  /** Uncaught script errors on the page, as they happen. */
  errors: string[];
  /** The page's headline (`#state-title`: "Waiting for demand", "Serving with WebGPU", …). */
  title(): Promise<string>;
  /** Closes the tab's context (the volunteer leaves as a closed tab does). */
  close(): Promise<void>;
}

/**
 * A volunteer as a visitor is one: a fresh browser context (its own key, worker id and slice cache) on the hub's
 * volunteer page `/`, joined through the page's own controls — "Compute with" set to `backend` unless `auto`, then
 * Join. Returns once the page keeps its worker id; what the hub then assigns is the caller's to wait for.
 */
export async function joinVolunteerPage(
  browser: Browser,
  hubUrl: string,
  backend: 'auto' | 'webgpu' | 'wasm' = 'auto',
  viewport: ViewportSize = { width: 1280, height: 900 },
  /** Runs in the page before its own scripts (playwright's addInitScript): a test's instrumentation. */
  init?: () => void,
): Promise<VolunteerTab> {
  const context = await browser.newContext({ viewport });
  if (init) await context.addInitScript(init);
  let closed = false;
  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    await context.close().catch(() => {});
  };
  try {
    const page = await context.newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${hubUrl}/`);
    if (backend !== 'auto') await page.getByLabel('Compute with').selectOption(backend);
    await page.getByRole('button', { name: 'Join' }).click();
    const workerId = await page.evaluate((key) => sessionStorage.getItem(key) ?? '', PAGE_WORKER_ID_KEY);
    if (!/^page-/.test(workerId)) throw new Error(`the volunteer page kept no worker id after Join (got "${workerId}")`);
    const title = async (): Promise<string> => ((await page.locator('#state-title').textContent()) ?? '').trim();
    return { context, page, workerId, errors, title, close };
  } catch (e) {
    await close();
    throw e;
  }
}

/**
 * Waits until the tab's page says it serves and returns its headline ("Serving with WebGPU" / "… WebAssembly
 * (wasm)"); else throws with `what`, the page's headline and detail, and its script errors.
 */
export async function waitServing(tab: VolunteerTab, what: string, timeoutMs: number): Promise<string> {
  try {
    await tab.page.waitForFunction(() => /^Serving with /.test(document.querySelector('#state-title')?.textContent ?? ''), null, {
      timeout: timeoutMs,
      polling: 250,
    });
  } catch (e) {
    const detail = await tab.page
      .locator('#state-detail')
      .textContent()
      .catch(() => '');
    throw new Error(`${what} never served: "${await tab.title().catch(() => '?')}" ${detail} ${tab.errors.join(' | ')} (${e})`);
  }
  return tab.title();
}
