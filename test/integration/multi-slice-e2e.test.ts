/**
 * Issue 27's acceptance, as a user of `npm start` meets it: the demo model (tools/demo-model.ts, what `npm start`
 * serves) behind a hub with `--dispatch always` and the production trust defaults, one Chromium tab on the hub's
 * volunteer page (production build), joined with the page's default budget and backend choice. The tab alone holds
 * every MoE layer (four slices, one after another), passes probation on completions that keep the token ids of
 * `--dispatch off`, then serves ≥ 90% of the routed pairs of a 64-token completion with those token ids; the page
 * lists the four slices it holds.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser } from 'playwright-core';
import { joinVolunteerPage, launchChromium, type VolunteerTab } from '../../harness/browser.ts';
import { testModel } from '../../harness/models.ts';
import { buildPages } from '../../harness/pages-build.ts';
import {
  baselineIds,
  completionIds,
  DEEPSEEK_Q8,
  dispatchMap,
  E2E_PROMPT,
  E2E_TOKENS,
  moeLayersOf,
  pairOutcomes,
  startSwarmHub,
  waitForCoverage,
} from '../../harness/swarm.ts';
import { DEFAULT_TRUST } from '../../hub/dispatch/trust.ts';
import { DEMO_MODEL_CONFIG } from '../../tools/demo-model.ts';

/** Keeps every wasm kernel instance the page makes (weakly), so the test can measure the memory the tab holds in them. */
function captureWasm(): void {
  const w = window as unknown as { __xsWasm: WeakRef<WebAssembly.Instance>[] };
  w.__xsWasm = [];
  const instantiate = WebAssembly.instantiate;
  (WebAssembly as { instantiate: unknown }).instantiate = async function (this: unknown, ...args: unknown[]) {
    const got = await (instantiate as (...a: unknown[]) => Promise<unknown>).apply(this, args);
    const instance = got instanceof WebAssembly.Instance ? got : (got as { instance: WebAssembly.Instance }).instance;
    if (typeof instance.exports.heapBase === 'function') w.__xsWasm.push(new WeakRef(instance)); // the expert kernel
    return got;
  };
}

/** Join → four slices loaded, each engine measured (WebGPU on SwiftShader against wasm), on 2 busy cores. */
const COVER_MS = 240_000;

let pagesDir = '';
let browser: Browser | undefined;

before(async () => {
  pagesDir = await buildPages('production');
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
});

test('npm start’s demo model, one tab with the default budget: it holds every MoE layer, passes probation and serves ≥ 90% of routed pairs with the token ids of --dispatch off', {
  timeout: 600_000,
}, async (t) => {
  const m = await testModel({ ...DEMO_MODEL_CONFIG });
  const c = m.config;
  const layers = Array.from({ length: c.layers }, (_, i) => i);
  const want = await baselineIds(m);
  const hub = await startSwarmHub(m.path, 'always', { trust: DEFAULT_TRUST }, 'demo', { dir: pagesDir });
  let tab: VolunteerTab | undefined;
  try {
    tab = await joinVolunteerPage(browser as Browser, hub.url, 'auto', undefined, captureWasm);
    const rows = await waitForCoverage(hub.url, hub.model, layers, c.nExpert, 1, COVER_MS);
    assert.deepEqual(
      [...new Set(rows.map((r) => r.worker_id))],
      [tab.workerId],
      `the tab alone holds every layer: ${JSON.stringify(rows.map((r) => [r.worker_id, r.layer, r.experts]))}`,
    );
    assert.deepEqual(
      rows.map((r) => r.layer).sort(),
      layers,
      'one slice per layer, each whole (its 16 experts in 3.2 MiB: the default 512 MiB budget holds them all)',
    );
    // The page lists what it holds: four slices, each serving.
    await tab.page.waitForFunction(
      (n) => document.querySelectorAll('#slices-table tbody tr[data-state="serving"]').length === n,
      layers.length,
      { timeout: 15_000, polling: 250 },
    );
    // The dashboard's workers table lists every slice the tab holds.
    const workers = (await (await fetch(`${hub.url}/api/dashboard/workers?limit=20`)).json()) as {
      rows: Array<{ id: string; slices?: Array<[number, number, number]> }>;
    };
    const tabRow = workers.rows.find((r) => r.id === tab?.workerId);
    assert.deepEqual(
      tabRow?.slices?.map((x) => x[0]).sort(),
      layers,
      `the dashboard row lists the tab's four slices: ${JSON.stringify(workers.rows)}`,
    );
    // Probation: every item audited against the coordinator, none used.
    let rounds = 0;
    for (; rounds < 8; rounds++) {
      const now = await dispatchMap(hub.url, hub.model);
      if (now.length === layers.length && now.every((r) => r.audits_passed >= DEFAULT_TRUST.probation)) break;
      assert.deepEqual(await completionIds(hub.url, hub.model, E2E_PROMPT, E2E_TOKENS, m.ban), want, `on probation, round ${rounds}`);
    }
    const trusted = await dispatchMap(hub.url, hub.model);
    assert.ok(
      trusted.length === layers.length && trusted.every((r) => r.audits_passed >= DEFAULT_TRUST.probation && r.audits === r.audits_passed),
      `every slice passed its probation: ${JSON.stringify(trusted)}`,
    );
    const before = await pairOutcomes(hub.url, hub.model);
    const got = await completionIds(hub.url, hub.model, E2E_PROMPT, E2E_TOKENS, m.ban);
    const after = await pairOutcomes(hub.url, hub.model);
    assert.deepEqual(got, want, 'the token ids of --dispatch off');
    const d = (k: string): number => (after[k] as number) - (before[k] as number);
    const routed = d('served') + d('fallback') + d('rejected');
    assert.ok(routed >= E2E_TOKENS * layers.length * c.nExpertUsed, `every routed pair is counted: ${JSON.stringify({ before, after })}`);
    assert.ok(d('served') >= 0.9 * routed, `the tab served ${d('served')} of ${routed} routed pairs`);
    // Per-slice pairs and credit (trusted now, its pairs are credited as used, flushed once a second): each slice's
    // own on the dashboard's row, and the page's list shows each slice's credit as the hub's credit message says it.
    type SliceStats = { slice: [number, number, number]; pairs: number; credit: number };
    let stats: SliceStats[] = [];
    let rowCredit = 0;
    for (const until = Date.now() + 10_000; Date.now() < until; await new Promise((r) => setTimeout(r, 250))) {
      const page = (await (await fetch(`${hub.url}/api/dashboard/workers?limit=20`)).json()) as {
        rows: Array<{ id: string; credit: number | null; sliceStats?: SliceStats[] }>;
      };
      const row = page.rows.find((r) => r.id === tab?.workerId);
      stats = row?.sliceStats ?? [];
      rowCredit = row?.credit ?? 0;
      // The tallies count at once, the wallet's credit once its second's flush is written: compare after it.
      const sum = stats.reduce((n, x) => n + x.credit, 0);
      if (stats.length === layers.length && stats.every((x) => x.pairs > 0 && x.credit > 0) && sum <= rowCredit) break;
    }
    assert.deepEqual(
      stats.map((x) => x.slice[0]).sort(),
      layers,
      `the dashboard row has each slice's pairs and credit: ${JSON.stringify(stats)}`,
    );
    assert.ok(
      stats.every((x) => x.pairs > 0 && x.credit > 0 && x.credit <= x.pairs),
      `every slice served and earned credit: ${JSON.stringify(stats)}`,
    );
    const sliceCredit = stats.reduce((n, x) => n + x.credit, 0);
    assert.ok(sliceCredit <= rowCredit, `the slices' credit ${sliceCredit} is within the wallet's ${rowCredit}`);
    await tab.page.waitForFunction(
      (n) => {
        const cells = document.querySelectorAll('#slices-table tbody tr[data-state="serving"] [data-testid="slice-credit"]');
        return (
          cells.length === n && Array.prototype.every.call(cells, (c: Element) => Number((c.textContent ?? '').replace(/[^0-9]/g, '')) > 0)
        );
      },
      layers.length,
      { timeout: 15_000, polling: 250 },
    );
    // Memory is real: what the tab holds for its slices, measured apart from the client (the live kernels' wasm
    // memories after a GC), is what the client charges its budget for them (never less), and within the budget.
    const cdp = await tab.context.newCDPSession(tab.page);
    await cdp.send('HeapProfiler.collectGarbage');
    const measured = await tab.page.evaluate(() => {
      const live = (window as unknown as { __xsWasm: WeakRef<WebAssembly.Instance>[] }).__xsWasm
        .map((r) => r.deref())
        .filter((x) => x !== undefined);
      const rows = document.querySelectorAll('#slices-table tbody tr[data-state="serving"]');
      return {
        kernels: live.length,
        wasmBytes: live.reduce((n, x) => n + (x.exports.memory as WebAssembly.Memory).buffer.byteLength, 0),
        accounted: Array.from(rows).reduce((n, r) => n + Number(r.getAttribute('data-memory-bytes')), 0),
      };
    });
    const heap = (await cdp.send('Runtime.getHeapUsage')) as { usedSize: number; totalSize: number };
    assert.equal(
      measured.kernels,
      layers.length,
      `one live wasm kernel per slice (auto on a software adapter keeps wasm): ${JSON.stringify(measured)}`,
    );
    assert.ok(measured.wasmBytes <= measured.accounted, `the client charges at least what its kernels hold: ${JSON.stringify(measured)}`);
    assert.ok(measured.accounted <= 1.25 * measured.wasmBytes, `and not much more: ${JSON.stringify(measured)}`);
    assert.ok(measured.accounted <= 512 * 2 ** 20, `within the page's default budget: ${JSON.stringify(measured)}`);
    assert.deepEqual(tab.errors, [], 'no page errors');
    t.diagnostic(
      `${rounds} probation round(s); the tab served ${d('served')} of ${routed} routed pairs over ${layers.length} layers; ` +
        `its kernels hold ${(measured.wasmBytes / 2 ** 20).toFixed(1)} MiB of wasm memory, charged ${(measured.accounted / 2 ** 20).toFixed(1)} MiB; ` +
        `JS heap ${(heap.usedSize / 2 ** 20).toFixed(1)} MiB used`,
    );
  } finally {
    await tab?.close();
    await hub.close();
  }
});

/**
 * Keeps every GPUDevice the page requests, so the test can destroy them as a driver reset would lose them; a device
 * requested while `__xsRefuseLayer` is set cannot hold that layer's weights (its createBuffer refuses them, as a
 * smaller GPU would run out of memory).
 */
function captureDevices(): void {
  const w = window as unknown as { __xsDevices: GPUDevice[]; __xsRefuseLayer?: number };
  w.__xsDevices = [];
  if (typeof GPUAdapter === 'undefined') return;
  const request = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = async function (this: GPUAdapter, ...args: Parameters<GPUAdapter['requestDevice']>) {
    const device = await request.apply(this, args);
    const refuse = w.__xsRefuseLayer;
    if (refuse !== undefined) {
      const create = device.createBuffer.bind(device);
      device.createBuffer = (d: GPUBufferDescriptor) => {
        if ((d.label ?? '').startsWith(`layer ${refuse} `) && (d.label ?? '').includes('weights'))
          throw new RangeError(`this device has no memory for layer ${refuse}'s weights (${d.size} bytes)`);
        return create(d);
      };
    }
    w.__xsDevices.push(device);
    return device;
  };
}

test('a WebGPU tab holding two slices loses its GPU device: it rebuilds both on one new device, the hub keeps both routes, tokens identical', {
  timeout: 600_000,
}, async (t) => {
  const m = await testModel({ ...DEEPSEEK_Q8 });
  const moe = moeLayersOf(m.config);
  assert.equal(moe.length, 2, 'two MoE layers');
  const want = await baselineIds(m);
  const hub = await startSwarmHub(m.path, 'always', {}, 'm', { dir: pagesDir });
  let tab: VolunteerTab | undefined;
  try {
    tab = await joinVolunteerPage(browser as Browser, hub.url, 'webgpu', undefined, captureDevices);
    const page = tab.page;
    const rows = await waitForCoverage(hub.url, hub.model, moe, m.config.nExpert, 1, COVER_MS);
    assert.deepEqual([...new Set(rows.map((r) => r.worker_id))], [tab.workerId], 'the tab holds both layers');
    await page.waitForFunction(() => document.querySelectorAll('#slices-table tbody tr[data-state="serving"]').length === 2, null, {
      timeout: 30_000,
      polling: 250,
    });
    const devicesBefore = await page.evaluate(() => (window as unknown as { __xsDevices: GPUDevice[] }).__xsDevices.length);
    await page.evaluate(() => {
      for (const d of (window as unknown as { __xsDevices: GPUDevice[] }).__xsDevices) d.destroy();
    });
    // Both engines are rebuilt on one new device (one probe), and the tab serves both layers again.
    await page.waitForFunction(
      (n) =>
        (window as unknown as { __xsDevices: GPUDevice[] }).__xsDevices.length > n &&
        /^Serving with /.test(document.querySelector('#state-title')?.textContent ?? '') &&
        document.querySelectorAll('#slices-table tbody tr[data-state="serving"]').length === 2,
      devicesBefore,
      { timeout: COVER_MS, polling: 250 },
    );
    const devicesAfter = await page.evaluate(() => (window as unknown as { __xsDevices: GPUDevice[] }).__xsDevices.length);
    assert.equal(devicesAfter, devicesBefore + 1, 'one new device for both slices');
    const after = await dispatchMap(hub.url, hub.model);
    assert.deepEqual(
      after
        .filter((r) => r.worker_id === tab?.workerId)
        .map((r) => r.layer)
        .sort(),
      moe,
      'the hub keeps both of its routes',
    );
    const before = await pairOutcomes(hub.url, hub.model);
    const got = await completionIds(hub.url, hub.model, E2E_PROMPT, E2E_TOKENS, m.ban);
    const o = await pairOutcomes(hub.url, hub.model);
    assert.deepEqual(got, want, 'the token ids of --dispatch off');
    const served = (o.served as number) - (before.served as number);
    assert.ok(served > 0, `the rebuilt tab serves: ${served} pairs`);
    // Lost again, and the new device cannot hold the second layer: that slice alone is given back (load_failed; the
    // hub wants it again), the first is rebuilt and serves on, tokens identical.
    const [kept, gone] = moe as [number, number];
    await page.evaluate((layer) => {
      const w = window as unknown as { __xsDevices: GPUDevice[]; __xsRefuseLayer?: number };
      w.__xsRefuseLayer = layer;
      for (const d of w.__xsDevices) d.destroy();
    }, gone);
    await page.waitForFunction(
      ([n, layer]) =>
        (window as unknown as { __xsDevices: GPUDevice[] }).__xsDevices.length > (n as number) &&
        /^Serving with /.test(document.querySelector('#state-title')?.textContent ?? '') &&
        Array.from(document.querySelectorAll('#slices-table tbody tr'), (r) => r.getAttribute('data-layer')).join() === String(layer),
      [devicesAfter, kept],
      { timeout: COVER_MS, polling: 250 },
    );
    let mine: number[] = [];
    for (const until = Date.now() + 10_000; Date.now() < until; await new Promise((r) => setTimeout(r, 250))) {
      mine = (await dispatchMap(hub.url, hub.model)).filter((r) => r.worker_id === tab?.workerId).map((r) => r.layer);
      if (mine.length === 1) break;
    }
    assert.deepEqual(mine, [kept], 'the hub keeps the route of the slice it still holds, and only that one');
    const demand = (await (await fetch(`${hub.url}/api/expert-demand?model=${encodeURIComponent(hub.model)}`)).json()) as {
      models: Array<{ layers: Array<{ layer: number; segments: Array<{ replicas: number; scarcity: number }> }> }>;
    };
    const wanted = demand.models[0]?.layers.find((l) => l.layer === gone)?.segments ?? [];
    assert.ok(
      wanted.length > 0 && wanted.every((s) => s.replicas === 0 && s.scarcity > 0),
      `the given-back layer is wanted again: ${JSON.stringify(wanted)}`,
    );
    const before2 = await pairOutcomes(hub.url, hub.model);
    assert.deepEqual(await completionIds(hub.url, hub.model, E2E_PROMPT, E2E_TOKENS, m.ban), want, 'the token ids of --dispatch off');
    const served2 = ((await pairOutcomes(hub.url, hub.model)).served as number) - (before2.served as number);
    assert.ok(served2 > 0, `the slice it kept serves on: ${served2} pairs`);
    assert.deepEqual(tab.errors, [], 'no page errors');
    t.diagnostic(
      `devices ${devicesBefore} → ${devicesAfter}; served ${served} pairs after the rebuild, ${served2} with one slice given back`,
    );
  } finally {
    await tab?.close();
    await hub.close();
  }
});
