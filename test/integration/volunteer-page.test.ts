/**
 * The volunteer page (web/, Svelte) in real headless Chromium, served by the hub's own page serving (hub/pages.ts via
 * buildApp) on loopback, at laptop (1280×800) and phone (360×740) size.
 *
 * - The production build: it explains the costs, asks consent, and nothing (no API call, no WebSocket) reaches the
 *   hub before Join is pressed.
 * - The test build (Vite `--mode test`: the same page with a scripted fake client, web/test-entry/): walked through
 *   every VolunteerState with its own controls (keyboard included), asserting each visible message, the buttons,
 *   the progress bar, the live numbers and the device report; a screenshot per state and size in
 *   .cache/artifacts/volunteer-page/, and axe-core with no serious or critical violation in any state (at laptop
 *   size; at phone size in the states whose layout differs most).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BrowserContext, Locator, Page } from 'playwright-core';
import type { DeviceReport, SliceAssignment, VolunteerState } from '../../volunteer/state.ts';
import type { FakeCall } from '../../web/test-entry/fake-client-factory.ts';
import { assertAccessible, type ChromiumProfile, openProfile, pageErrors } from '../../harness/browser.ts';
import { buildPages } from '../../harness/pages-build.ts';
import { type PagesHub, pagesHub } from '../../harness/pages-hub.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
const ARTIFACTS = join(root, '.cache/artifacts/volunteer-page');
const LAPTOP = { width: 1280, height: 800 };
const PHONE = { width: 360, height: 740 };
const MIB = 1024 * 1024;
/** The states axe also checks at phone size. */
const PHONE_AXE = new Set(['idle', 'downloading', 'serving-webgpu', 'paused', 'failed-slice-does-not-fit']);

interface Served {
  url: string;
  context: BrowserContext;
  page: Page;
  /** Every request the page made, in order ("GET http://…/path"), and every WebSocket it opened. */
  requests: string[];
  sockets: string[];
  errors: string[];
  close(): Promise<void>;
}

/** A hub with no models serving the build in `dir`, and a fresh Chromium profile on its page. */
async function serve(dir: string): Promise<Served> {
  let hub: PagesHub | undefined;
  let browser: ChromiumProfile | undefined;
  const cleanup = async (): Promise<void> => {
    await browser?.close();
    await hub?.close();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    hub = await pagesHub(dir);
    const url = `${hub.url}/`;
    browser = await openProfile({ viewport: LAPTOP });
    const { context, page } = browser;
    const requests: string[] = [];
    const sockets: string[] = [];
    context.on('request', (r) => requests.push(`${r.method()} ${r.url()}`));
    page.on('websocket', (ws) => sockets.push(ws.url()));
    const errors = pageErrors(page);
    await page.goto(url);
    return { url, context, page, requests, sockets, errors, close: cleanup };
  } catch (e) {
    await cleanup();
    throw e;
  }
}

/** A node's text (Playwright's textContent; null, for a node without text, reads as ''). */
const textOf = async (l: Locator): Promise<string> => (await l.textContent()) ?? '';
const title = (page: Page): Promise<string> => textOf(page.locator('#state-title'));

/** The visible buttons of the volunteer panel, by name, in order. */
const buttons = (page: Page): Promise<string[]> => page.locator('.actions button').allInnerTexts();

test('the production page explains the costs, asks consent, and dials nothing before Join', { timeout: 120_000 }, async () => {
  const s = await serve(await buildPages('production'));
  try {
    const { page } = s;
    await page.locator('#state-title').waitFor();
    assert.equal(await title(page), 'Not joined yet');
    const text = await textOf(page.locator('main'));
    for (const cost of ['GPU time', 'Memory', 'Bandwidth', 'Battery', 'It stops when you close the tab']) {
      assert.ok(text.includes(cost), `the page states the cost: ${cost}`);
    }
    assert.match(text, /Nothing is downloaded and the hub is not contacted until you press Join/);
    assert.deepEqual(await buttons(page), ['Join']);
    assert.equal(await page.locator('#budget-number').inputValue(), '512');
    await page.waitForLoadState('networkidle');
    await page.waitForTimeout(500);
    const origin = new URL(s.url).origin;
    const beyondPage = s.requests.filter((r) => !/^GET http:\/\/127\.0\.0\.1:\d+\/(assets\/[\w.-]+)?$/.test(r));
    assert.deepEqual(beyondPage, [], 'before Join the page loads only itself and its assets');
    assert.ok(s.requests.some((r) => r.startsWith(`GET ${origin}/assets/`) && r.endsWith('.js')));
    assert.deepEqual(s.sockets, [], 'no WebSocket before Join');
    await assertAccessible(page, 'production page, idle');

    assert.deepEqual(s.errors, [], 'no script errors before Join');

    // Join is the consent: only now does the client reach the hub (its API or its channel), and the page leaves idle.
    const before = s.requests.length;
    await page.getByRole('button', { name: 'Join' }).click();
    await page.waitForFunction(() => document.querySelector('#state-title')?.textContent !== 'Not joined yet');
    const deadline = Date.now() + 10_000;
    const dialled = (): boolean =>
      s.requests.slice(before).some((r) => r.includes(`${origin}/api/`)) || s.sockets.some((u) => u.includes('/api/volunteer'));
    while (!dialled() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    assert.ok(dialled(), `after Join the client reaches the hub: ${JSON.stringify(s.requests.slice(before))}`);
  } finally {
    await s.close();
  }
});

const slice: SliceAssignment = { model: 'demo', layer: 1, experts: [0, 8], bytes: 48 * MIB, digest: 'sha256:ab' };
const gpuDevice: DeviceReport = {
  webgpu: true,
  adapter: { vendor: 'google', architecture: 'swiftshader', description: 'SwiftShader device', isFallbackAdapter: true },
  limits: { maxStorageBufferBindingSize: 128 * MIB, maxBufferSize: 256 * MIB },
  features: ['shader-f16', 'subgroups'],
  memoryBudgetBytes: 1024 * MIB,
  backend: 'webgpu',
  backendReason: 'WebGPU is faster: fallback (software) WebGPU adapter 3.10 GFLOP/s vs wasm 0.800 GFLOP/s',
  gflops: 3.1,
  variants: ['silu', 'swiglu_oai', 'bias'],
};
const noGpuDevice: DeviceReport = {
  webgpu: false,
  adapter: null,
  limits: null,
  features: [],
  memoryBudgetBytes: 1024 * MIB,
  backend: 'wasm',
  backendReason: 'only wasm was measured (0.800 GFLOP/s)',
  gflops: 0.8,
  variants: ['silu', 'swiglu_oai', 'bias'],
};

test('every state of the volunteer, through the page’s own controls, at laptop and phone size, accessible', {
  timeout: 300_000,
}, async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  const s = await serve(await buildPages('test'));
  try {
    const { page } = s;
    await page.waitForFunction(() => window.volunteerFake !== undefined);
    const set = (state: VolunteerState): Promise<void> => page.evaluate((x) => window.volunteerFake!.set(x), state);
    const setDevice = (d: DeviceReport): Promise<void> => page.evaluate((x) => window.volunteerFake!.setDevice(x), d);
    const calls = (): Promise<FakeCall[]> => page.evaluate(() => window.volunteerFake!.calls.map((c) => ({ ...c })));
    const shown: string[] = [];

    /** Asserts the headline, the buttons, then screenshots and axe at both sizes. */
    const check = async (name: string, expected: string | RegExp, expectedButtons: string[]): Promise<void> => {
      const pattern = typeof expected === 'string' ? `^${expected.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$` : expected.source;
      await page.waitForFunction((src) => new RegExp(src).test(document.querySelector('#state-title')?.textContent ?? ''), pattern, {
        timeout: 5000,
      });
      assert.deepEqual(await buttons(page), expectedButtons, `${name}: buttons`);
      const live = await textOf(page.locator('[role="status"]'));
      assert.ok(live.length > 0, `${name}: the live region speaks`);
      for (const [size, viewport] of [
        ['laptop', LAPTOP],
        ['phone', PHONE],
      ] as const) {
        await page.setViewportSize(viewport);
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert.ok(overflow <= 0, `${name} at ${size}: nothing wider than the screen (${overflow} px over)`);
        await page.screenshot({ path: join(ARTIFACTS, `${name}-${size}.png`), fullPage: true });
        // axe in every state at laptop size; at phone size where the layout differs most (it takes seconds a run).
        if (size === 'laptop' || PHONE_AXE.has(name)) await assertAccessible(page, `${name} at ${size}`);
      }
      await page.setViewportSize(LAPTOP);
      shown.push(name);
    };

    // idle: consent first; nothing has reached the hub.
    await check('idle', 'Not joined yet', ['Join']);
    await page.waitForLoadState('networkidle');
    assert.deepEqual(
      s.requests.filter((r) => !/^GET http:\/\/127\.0\.0\.1:\d+\/(assets\/[\w.-]+)?$/.test(r)),
      [],
      'before Join: only the page and its assets',
    );
    assert.equal(await page.locator('#device-rows').count(), 0, 'no device report before joining');

    // Keyboard: set the budget in the number field, Tab to Join, press Enter; focus shows and moves on to the status.
    await page.locator('#budget-number').fill('1000');
    await page.keyboard.press('Tab');
    assert.equal(await page.locator('#budget-number').inputValue(), '1024', 'a typed budget snaps to the 64 MiB step');
    assert.equal(await page.locator('#budget-range').inputValue(), '1024', 'the slider follows the number');
    for (let i = 0; i < 10 && (await page.evaluate(() => document.activeElement?.textContent?.trim())) !== 'Join'; i++) {
      await page.keyboard.press('Tab');
    }
    const focus = await page.evaluate(() => {
      const el = document.activeElement as HTMLElement;
      const style = getComputedStyle(el);
      return {
        text: el.textContent?.trim(),
        outline: style.outlineStyle,
        width: style.outlineWidth,
        visible: el.matches(':focus-visible'),
      };
    });
    assert.equal(focus.text, 'Join', 'Join is reachable with Tab');
    assert.ok(focus.visible && focus.outline !== 'none' && focus.width !== '0px', `focus is visible: ${JSON.stringify(focus)}`);
    await page.keyboard.press('Enter');
    assert.deepEqual(await calls(), [{ method: 'join', memoryBudgetBytes: 1024 * MIB }], 'Join sends the budget, in bytes');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'status-heading', 'focus moves to the status');
    await check('connecting', /^Connecting to the hub/, ['Leave']);
    assert.ok(await page.locator('#budget-range').isDisabled(), 'the budget is fixed while joined');

    // retrying: the page counts down by itself; a new announcement from the client restarts the count.
    const retrying: VolunteerState = { kind: 'retrying', inSeconds: 2, reason: 'the hub did not answer', attempt: 2 };
    await set(retrying);
    for (const n of [2, 1, 0]) {
      await page.waitForFunction((t) => document.querySelector('#state-title')?.textContent === t, `Hub unreachable — retrying in ${n} s`, {
        timeout: 2500,
      });
    }
    await set({ ...retrying, inSeconds: 30, attempt: 3 });
    await check('retrying', /^Hub unreachable — retrying in (30|29|28) s$/, ['Leave']);
    assert.equal(await textOf(page.locator('[role="status"]')), 'Hub unreachable, retrying shortly', 'spoken once, not every second');
    assert.match(await textOf(page.locator('#state-detail')), /the hub did not answer \(attempt 3\)/);

    await set({ kind: 'waiting' });
    await check('waiting', 'Waiting for demand', ['Pause', 'Leave']);

    await set({ kind: 'downloading', slice, loadedBytes: 12 * MIB, totalBytes: 48 * MIB, fromCache: false });
    await check('downloading', 'Downloading the slice: 12 MiB of 48 MiB (25%)', ['Pause', 'Leave']);
    const bar = page.getByRole('progressbar', { name: 'Slice downloaded' });
    assert.deepEqual(
      [await bar.getAttribute('max'), await bar.getAttribute('value')],
      [String(48 * MIB), String(12 * MIB)],
      'the progress bar carries the bytes',
    );
    assert.match(await textOf(page.locator('#state-detail')), /experts 0–7 of layer 1/);

    await set({ kind: 'downloading', slice, loadedBytes: 48 * MIB, totalBytes: 48 * MIB, fromCache: true });
    await check('downloading-from-cache', /^Loading the slice from this browser’s cache: 48 MiB of 48 MiB \(100%\)$/, ['Pause', 'Leave']);
    assert.equal(await page.getByRole('progressbar', { name: 'Slice loaded from the cache' }).count(), 1);

    await set({ kind: 'starting', slice });
    await check('starting', 'Starting the compute engine', ['Pause', 'Leave']);
    assert.equal(await page.getByRole('progressbar').count(), 0, 'no progress bar outside downloads');

    await setDevice(gpuDevice);
    await set({ kind: 'serving', slice, backend: 'webgpu' });
    await page.evaluate(() =>
      window.volunteerFake!.setStats({
        pairsServed: 12_345,
        pairsPerSec: 42.4,
        workFrames: 300,
        lastLatencyMs: 7.25,
        credit: 98_765,
        slices: [],
      }),
    );
    await check('serving-webgpu', 'Serving with WebGPU', ['Pause', 'Leave']);
    assert.deepEqual(
      await page.locator('#stat-pairs, #stat-rate, #stat-latency, #stat-credit').allInnerTexts(),
      ['12,345', '42 /s', '7.3 ms', '98,765'],
      'live numbers',
    );
    const deviceText = await textOf(page.locator('#device-rows'));
    for (const part of [
      'google · swiftshader (SwiftShader device)',
      'software fallback',
      '128 MiB',
      '256 MiB',
      'WebGPU is faster',
      'SwiGLU-OAI (gpt-oss)',
    ]) {
      assert.ok(deviceText.includes(part), `device panel shows ${part}`);
    }

    // Pause and Resume are one button whose label flips: focus stays on it.
    await page.getByRole('button', { name: 'Pause' }).focus();
    await page.keyboard.press('Enter');
    await check('paused', 'Paused', ['Resume', 'Leave']);
    assert.match(await textOf(page.locator('#state-detail')), /Holding experts 0–7 of layer 1/);
    assert.equal(await page.evaluate(() => document.activeElement?.textContent?.trim()), 'Resume', 'focus stays on the button');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('#state-title')?.textContent === 'Serving with WebGPU');

    await set({ kind: 'released', slice, reason: 'demand for layer 1 fell' });
    await check('released', 'Slice released', ['Pause', 'Leave']);
    assert.match(await textOf(page.locator('#state-detail')), /demand for layer 1 fell/);

    await setDevice(noGpuDevice);
    await set({ kind: 'serving', slice, backend: 'wasm' });
    await check('serving-wasm-no-webgpu', 'Serving with WebAssembly (wasm)', ['Pause', 'Leave']);
    assert.match(await textOf(page.locator('#state-detail')), /^No WebGPU in this browser/);
    assert.match(await textOf(page.locator('#device-rows')), /not available in this browser/);

    await set({ kind: 'failed', code: 'SLICE_DOES_NOT_FIT', message: 'the slice needs 700 MiB, the budget is 512 MiB', retrying: false });
    await check('failed-slice-does-not-fit', 'This device cannot help: the slice needs 700 MiB, the budget is 512 MiB', ['Leave']);
    assert.match(await textOf(page.locator('#state-detail')), /raise the budget.*\(code SLICE_DOES_NOT_FIT\)/);

    await set({ kind: 'failed', code: 'SHARD_NETWORK', message: 'the slice download failed', retrying: true });
    await check('failed-retrying', 'Problem: the slice download failed — trying again', ['Leave']);

    await page.getByRole('button', { name: 'Leave' }).click();
    await check('left', 'You left', ['Join again']);
    assert.ok(await page.locator('#budget-range').isEnabled(), 'the budget can change again');

    assert.deepEqual(
      (await calls()).map((c) => c.method),
      ['join', 'pause', 'resume', 'leave'],
    );
    const kinds = new Set(shown.map((n) => n.split('-')[0]));
    assert.deepEqual(
      [...kinds].sort(),
      ['connecting', 'downloading', 'failed', 'idle', 'left', 'paused', 'released', 'retrying', 'serving', 'starting', 'waiting'],
      'every kind of VolunteerState was shown',
    );
    assert.deepEqual(s.sockets, [], 'the fake client dials nothing');
    assert.deepEqual(s.errors, [], 'no script errors');
  } finally {
    await s.close();
  }
});
