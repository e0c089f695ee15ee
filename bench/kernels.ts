/**
 * Our WGSL expert FFN (ExpertRuntime on WebGPU) against the fair onnxruntime-web baselines ('webgpu' and 'wasm'
 * execution providers computing only the routed pairs, bench/ort-routed.ts) and the engine's own onnxruntime
 * fallback, on the same slices and calls, in one browser page: headless Chromium here (WebGPU on SwiftShader, so the
 * GPU numbers are a CPU emulation's), or any browser with `--serve` (see docs/kernels-bench.md).
 *
 *   npm run bench:kernels [-- --types Q4_K,F16 --iterations 5 --warmup 1 --threads 0]
 *   npm run bench:kernels -- --types all                 every type the WGSL kernels read (KERNEL_TYPES; long: ~4 min each)
 *   npm run bench:kernels -- --quick | --full            smoke shapes | the realistic shape (n_embd 2048, ff 768, top-8 of 16)
 *   npm run bench:kernels -- --rows 1,64 --backends ours-webgpu,ort-webgpu,ort-wasm
 *   npm run bench:kernels -- --ort-weights f32 --ort-accuracy-level 4    the fair ORT graphs on f32 weights / int8 MatMulNBits
 *   npm run bench:kernels -- --serve [--host 127.0.0.1 --port 8787]     prints a URL and waits; open it in a browser
 */
import { createServer, type Server } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { chromium } from 'playwright-core';
import { typeName } from '../gguf/quant-types.ts';
import { CHROMIUM, CHROMIUM_ARGS, ORT_PREFIX, bundle, ortAsset } from '../harness/browser.ts';
import { KERNEL_TYPES } from '../shaders/expert-ffn.ts';
import {
  BACKENDS,
  DEFAULT_SHAPES,
  FULL_SHAPES,
  QUICK_SHAPES,
  type BackendName,
  type BenchConfig,
  type BenchReport,
} from './browser/report.ts';
import { benchTypes } from './types-arg.ts';

const { values } = parseArgs({
  options: {
    serve: { type: 'boolean', default: false },
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string', default: '0' },
    types: { type: 'string', default: 'Q4_K' },
    iterations: { type: 'string' },
    warmup: { type: 'string' },
    threads: { type: 'string', default: '1' },
    'budget-s': { type: 'string', default: '20' },
    quick: { type: 'boolean', default: false },
    full: { type: 'boolean', default: false },
    rows: { type: 'string' },
    backends: { type: 'string', default: BACKENDS.join(',') },
    'ort-accuracy-level': { type: 'string', default: '0' },
    'ort-weights': { type: 'string', default: 'smallest' },
    json: { type: 'string' },
  },
});

if (values.quick && values.full) throw new Error('--quick and --full exclude each other');
const baseShapes = values.full ? FULL_SHAPES : values.quick ? QUICK_SHAPES : DEFAULT_SHAPES;
const onlyRows = values.rows?.split(',').map(Number);
const backends = values.backends.split(',').map((b) => b.trim()) as BackendName[];
const unknown = backends.filter((b) => !BACKENDS.includes(b));
if (unknown.length) throw new Error(`unknown backends ${unknown.join(', ')}; known: ${BACKENDS.join(', ')}`);
if (!['smallest', 'f32'].includes(values['ort-weights']))
  throw new Error(`--ort-weights must be smallest or f32, got ${values['ort-weights']}`);

const config: BenchConfig = {
  types: benchTypes(values.types, KERNEL_TYPES.types).map(typeName),
  shapes: onlyRows
    ? onlyRows.map((nTokens) => ({ ...baseShapes[0]!, nTokens, label: `${nTokens <= 4 ? 'decode' : 'batched'}-${nTokens}` }))
    : baseShapes,
  backends,
  warmup: Number(values.warmup ?? (values.full ? 2 : 1)),
  iterations: Number(values.iterations ?? (values.full ? 15 : values.quick ? 3 : 5)),
  budgetS: Number(values['budget-s']),
  wasmPaths: ORT_PREFIX,
  ortThreads: Number(values.threads),
  ortAccuracyLevel: Number(values['ort-accuracy-level']),
  ortWeights: values['ort-weights'] === 'f32' ? 'f32' : 'smallest',
};

const script = await bundle(fileURLToPath(new URL('./browser/kernels-bench-entry.ts', import.meta.url)));
if (!script) throw new Error('bundling bench/browser/kernels-bench-entry.ts produced nothing');

const html = `<!doctype html><meta charset="utf-8"><title>expertswarm kernel benchmark</title>
<link rel="icon" href="data:,">
<style>body{font:14px/1.4 ui-monospace,monospace;margin:1.5em}</style>
<script>window.BENCH_CONFIG = ${JSON.stringify(config)};</script>
<script type="module" src="/main.js"></script>`;

// Cross-origin isolation (COOP + COEP) gives the page SharedArrayBuffer, which onnxruntime's multi-threaded wasm needs.
const ISOLATION = {
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-embedder-policy': 'require-corp',
  'cache-control': 'no-store',
};
const server: Server = createServer((req, res) => {
  const path = (req.url ?? '/').split('?')[0]!;
  if (path === '/main.js') {
    res.writeHead(200, { ...ISOLATION, 'content-type': 'text/javascript' }).end(script);
  } else if (path.startsWith(ORT_PREFIX)) {
    const asset = ortAsset(path);
    if (!asset) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { ...ISOLATION, 'content-type': asset.type }).end(asset.body);
  } else if (path === '/' || path === '/index.html') {
    res.writeHead(200, { ...ISOLATION, 'content-type': 'text/html' }).end(html);
  } else {
    res.writeHead(404).end();
  }
});
await new Promise<void>((r) => server.listen(Number(values.port), values.host, () => r()));
const port = (server.address() as { port: number }).port;
const host = values.host === '0.0.0.0' ? '127.0.0.1' : values.host;
const url = `http://${host}:${port}/?auto=1`;

if (values.serve) {
  console.log(`kernel benchmark served at ${url}`);
  console.log('open it in a browser with WebGPU (WebGPU needs a secure context: localhost/127.0.0.1, or https); the report');
  console.log('appears on the page and in its console. Ctrl-C to stop.');
} else {
  const profile = mkdtempSync(join(tmpdir(), 'es-bench-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    timeout: 60_000,
  });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.on('pageerror', (e) => console.error(`page error: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') console.error(`page ${m.type()}: ${m.text()}`);
    });
    await page.goto(`http://${host}:${port}/`);
    await page.waitForFunction(() => typeof window.runKernelBench === 'function', undefined, { timeout: 30_000 });
    const t0 = performance.now();
    const report: BenchReport = await page.evaluate((cfg) => window.runKernelBench(cfg), config);
    console.log(
      `expert FFN kernels in headless Chromium ${context.browser()?.version() ?? ''} (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
    );
    console.log(report.text);
    if (values.json) {
      const { writeFileSync } = await import('node:fs');
      writeFileSync(values.json, JSON.stringify(report, null, 2));
    }
  } finally {
    await context.close();
    server.close();
    rmSync(profile, { recursive: true, force: true });
  }
}
