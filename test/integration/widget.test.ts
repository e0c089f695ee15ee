/**
 * The join widget end to end, with real parts on loopback: a hub (real coordinator, `--dispatch always`, deepseek
 * Q8_0 generated here) serving a fresh production build, and a host site on a SECOND loopback origin whose page has
 * a strict CSP (no inline script, no eval, nothing but the hub's origin for scripts and frames, no styles at all) and
 * embeds the one-line snippet. Headless Chromium (Debian's, via playwright-core) is the visitor.
 *
 * - The card renders, accessibly (axe-core), and nothing but /widget.js is fetched from the hub before consent.
 * - Keyboard consent → the frame's volunteer joins, downloads its slice and serves: a greedy completion gives the
 *   token ids of the coordinator alone (a `--dispatch off` hub), ≥ 1 pair was served by the frame, and the card
 *   counts the pairs it served.
 * - Pause / resume from the card; then the automatic pauses: the host tab hidden (document.visibilityState
 *   overridden, visibilitychange dispatched) and a device on battery (navigator.getBattery stubbed); each time the
 *   hub sees the volunteer paused and serving again.
 * - The host page's script, with every shadow root forced open (a hostile host can do that; the closed root is not
 *   the boundary, the frame is), gets nothing of the frame: no document, no storage, no token; the frame cannot
 *   reach the host page either. No CSP violation on either side.
 * - Leave removes the frame and the hub forgets the volunteer. A second host page (dark theme, automatic pauses off,
 *   shadow roots left alone) shows the root really is closed.
 * - Every state the card can show, scripted through the test build's fake client inside the frame: wording,
 *   progress bar, buttons and focus, axe in each.
 * - /widget.js is one classic script within its size budget.
 *
 * Screenshots of the card in each state go to .cache/artifacts/widget/ (ignored by git).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { AxeBuilder } from '@axe-core/playwright';
import type { FastifyInstance } from 'fastify';
import { chromium, type Browser, type Frame, type Page } from 'playwright-core';
import { buildApp } from '../../hub/app.ts';
import { defaultConfig, Hub } from '../../hub/hub.ts';
import type { VolunteerState } from '../../volunteer/state.ts';
import type { FakeCall } from '../../web/test-entry/fake-client-factory.ts';
import { WIDGET_GZIP_LIMIT_BYTES } from '../../web/widget.vite.config.ts';
import { CHROMIUM, CHROMIUM_ARGS } from '../support/browser.ts';
import { testModel } from '../support/models.ts';
import { buildPages } from '../support/pages-build.ts';
import { DEEPSEEK_Q8, E2E_PROMPT, completionIds, dispatchMap, pairOutcomes, startSwarmHub, type SwarmHub } from '../support/swarm.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
const ARTIFACTS = join(root, '.cache/artifacts/widget');
/** Enough tokens to route many pairs through the frame; fewer than the other end-to-end tests, to keep this one short. */
const N = 24;
/** From consent to serving (onnxruntime's wasm, SwiftShader's shader compiles, on 2 busy cores). */
const SERVE_MS = 150_000;
const STEP_MS = 20_000;
const WORKER_ID_KEY = 'expertswarm.worker-id';

let pagesDir = '';
let browser: Browser | undefined;

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  pagesDir = await buildPages('production');
});

after(async () => {
  await browser?.close().catch(() => {});
  if (pagesDir) rmSync(pagesDir, { recursive: true, force: true });
});

/** The host site's policy: scripts and frames from the hub only, nothing else at all. */
function hostCsp(hub: string): string {
  return `default-src 'none'; script-src ${hub}; frame-src ${hub}; connect-src 'none'; style-src 'none'; img-src 'none'`;
}

/** A site on its own loopback origin: `/` embeds the widget with the default options, `/dark` with every option set. */
async function hostSite(hub: string): Promise<{ url: string; close(): void }> {
  const page = (title: string, snippet: string): string =>
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${title}</title></head><body><main><h1>${title}</h1><p>An ordinary article on someone else's site.</p>${snippet}</main></body></html>`;
  const pages: Record<string, string> = {
    '/': page('A host site', `<script src="${hub}/widget.js" data-model="m" data-budget="256MB" async></script>`),
    '/dark': page(
      'A dark host site',
      `<script src="${hub}/widget.js" data-model="m" data-theme="dark" data-pause-on-hidden="false" data-pause-on-battery="false" async></script>`,
    ),
  };
  const server: Server = createServer((req, res) => {
    const body = pages[(req.url ?? '/').split('?')[0] as string];
    if (!body) return void res.writeHead(404, { 'content-security-policy': hostCsp(hub) }).end();
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': hostCsp(hub) }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, close: () => server.close() };
}

/**
 * Runs before any script of every document (the host page and the frame): records CSP violations, stubs a battery
 * the test can unplug (`__setCharging(false)`), and, where asked, forces shadow roots open and keeps them (`__roots`),
 * as a hostile host page could. Text, not a function: tsx compiles this file with esbuild's keepNames, whose `__name`
 * helper would be missing in the page; the script also defines it for the functions this test evaluates there.
 */
function initScript({ pryOpen }: { pryOpen: boolean }): string {
  return `
    window.__name = (f) => f;
    const violations = [];
    window.__violations = violations;
    document.addEventListener('securitypolicyviolation', (e) => violations.push(e.violatedDirective + ' ' + e.blockedURI));
    const battery = Object.assign(new EventTarget(), { charging: true, level: 0.8, chargingTime: 0, dischargingTime: Infinity });
    Object.defineProperty(Navigator.prototype, 'getBattery', { configurable: true, value: () => Promise.resolve(battery) });
    window.__setCharging = (charging) => {
      battery.charging = charging;
      battery.dispatchEvent(new Event('chargingchange'));
    };
    if (${pryOpen}) {
      const roots = [];
      window.__roots = roots;
      const attach = Element.prototype.attachShadow;
      Element.prototype.attachShadow = function (init) {
        const r = attach.call(this, { ...init, mode: 'open' });
        roots.push(r);
        return r;
      };
    }`;
}

const card = (page: Page) => page.locator('expertswarm-widget section');
const phase = async (page: Page): Promise<string> => (await card(page).getAttribute('data-phase')) ?? '';
const line = async (page: Page): Promise<string> => (await card(page).locator('.state').textContent()) ?? '';
const pairsShown = async (page: Page): Promise<number> =>
  Number(((await card(page).locator('.pairs strong').textContent()) ?? '').replace(/,/g, ''));

/** axe-core over the card: no serious or critical violation of WCAG 2.x A/AA. */
async function assertCardAccessible(page: Page, where: string): Promise<void> {
  const axe = await new AxeBuilder({ page })
    .include('expertswarm-widget')
    .withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa'])
    .analyze();
  const bad = axe.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(
    bad.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`),
    [],
    `${where}: axe violations in the card`,
  );
}

async function shot(page: Page, file: string): Promise<void> {
  await page.locator('expertswarm-widget').screenshot({ path: join(ARTIFACTS, file) });
}

async function waitPhase(page: Page, want: string, timeout = STEP_MS): Promise<void> {
  const until = Date.now() + timeout;
  while ((await phase(page)) !== want) {
    if (Date.now() > until) assert.fail(`the card never showed ${want}: ${await phase(page)} "${await line(page)}"`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** `expertswarm_volunteers_connected{state}` as the hub counts it. */
async function volunteersIn(hub: SwarmHub, state: string): Promise<number> {
  const text = await (await fetch(`${hub.url}/metrics`)).text();
  return Number(new RegExp(`^expertswarm_volunteers_connected\\{state="${state}"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
}

async function hubSees(hub: SwarmHub, state: string): Promise<void> {
  const until = Date.now() + STEP_MS;
  while ((await volunteersIn(hub, state)) !== 1) {
    if (Date.now() > until) assert.fail(`the hub never counted the volunteer ${state}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Both the card and the hub say paused, then (after `undo`) serving again. */
async function pausesAndResumes(
  page: Page,
  hub: SwarmHub,
  why: RegExp,
  name: string,
  pause: () => Promise<unknown>,
  undo: () => Promise<unknown>,
) {
  await pause();
  await waitPhase(page, 'paused');
  assert.match(await line(page), why);
  await hubSees(hub, 'paused');
  await shot(page, `${name}.png`);
  await undo();
  await waitPhase(page, 'serving');
  await hubSees(hub, 'serving');
}

function embedFrame(page: Page, hub: SwarmHub): Frame {
  const f = page.frames().find((x) => x.url().startsWith(`${hub.url}/embed`));
  assert.ok(f, 'the card made the frame');
  return f;
}

test('the widget on a strict-CSP site: consent, serve with identical tokens, pause, auto-pause, isolation, leave', {
  timeout: 360_000,
}, async () => {
  const m = await testModel(DEEPSEEK_Q8);
  const baselineHub = await startSwarmHub(m.path, 'off');
  let want: number[];
  try {
    want = await completionIds(baselineHub.url, baselineHub.model, E2E_PROMPT, N, m.ban);
  } finally {
    await baselineHub.close();
  }
  assert.equal(want.length, N);

  const hub = await startSwarmHub(m.path, 'always', {}, 'm', { dir: pagesDir });
  const site = await hostSite(hub.url);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [...CHROMIUM_ARGS, '--headless=new'],
    timeout: 60_000,
  });
  const context = await browser.newContext({ viewport: { width: 900, height: 700 } });
  try {
    await context.addInitScript(initScript({ pryOpen: true }));
    const page = await context.newPage();
    const requests: string[] = [];
    const errors: string[] = [];
    context.on('request', (r) => requests.push(r.url()));
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (msg) => {
      if (msg.type() === 'error' || msg.type() === 'warning') errors.push(msg.text());
    });
    await page.goto(`${site.url}/`);

    // 1. The card, before consent.
    await waitPhase(page, 'idle');
    assert.equal(await card(page).getByRole('heading').textContent(), 'Lend your GPU');
    assert.match((await card(page).textContent()) ?? '', /GPU time, memory, bandwidth and battery/);
    assert.match((await card(page).textContent()) ?? '', /up to 256 MiB/, 'data-budget reaches the card');
    assert.match(await line(page), /Nothing is downloaded until you agree/);
    assert.deepEqual(await card(page).locator('button:visible').allInnerTexts(), ['Lend my GPU']);
    await assertCardAccessible(page, 'consent');
    await shot(page, 'real-1-consent.png');
    assert.deepEqual(
      requests.filter((u) => u.startsWith(hub.url)),
      [`${hub.url}/widget.js`],
      'nothing but the loader comes from the hub before consent',
    );

    // 2. Consent with the keyboard; the frame's volunteer joins and serves.
    await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    const seen: string[] = [];
    const until = Date.now() + SERVE_MS;
    for (let p = await phase(page); p !== 'serving'; p = await phase(page)) {
      if (seen.at(-1) !== p) seen.push(p);
      if (p === 'failed' || Date.now() > until) assert.fail(`the frame never served: ${p} "${await line(page)}" ${errors.join(' | ')}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const frame = embedFrame(page, hub);
    const workerId = await frame.evaluate((key) => sessionStorage.getItem(key) ?? '', WORKER_ID_KEY);
    const rows = await dispatchMap(hub.url, hub.model);
    assert.ok(
      rows.some((r) => r.worker_id === workerId),
      `the frame's volunteer is in the dispatch map: ${JSON.stringify(rows)}`,
    );

    const since = await pairOutcomes(hub.url, hub.model);
    const got = await completionIds(hub.url, hub.model, E2E_PROMPT, N, m.ban);
    const now = await pairOutcomes(hub.url, hub.model);
    const served = (now.served as number) - (since.served as number);
    console.log(
      `[widget] served ${served} pairs, fallback ${(now.fallback as number) - (since.fallback as number)}; card: "${await line(page)}"; phases seen: ${seen.join(' → ')}`,
    );
    assert.deepEqual(got, want, 'tokens identical to the coordinator alone');
    assert.ok(served >= 1, `the frame served routed pairs: ${served}`);
    const shown = Date.now() + STEP_MS;
    while ((await pairsShown(page)) < 1 && Date.now() < shown) await new Promise((r) => setTimeout(r, 100));
    assert.ok((await pairsShown(page)) >= 1, 'the card counts the pairs served');
    assert.match(await line(page), /^Serving with (WebGPU|WebAssembly)$/);
    await shot(page, 'real-2-serving.png');

    // 3. Pause and resume from the card, then the automatic pauses.
    await pausesAndResumes(
      page,
      hub,
      /^Paused\. Nothing is computed until you resume/,
      'real-3-paused',
      () => card(page).getByRole('button', { name: 'Pause' }).click(),
      () => card(page).getByRole('button', { name: 'Resume' }).click(),
    );
    await pausesAndResumes(
      page,
      hub,
      /tab is hidden/,
      'real-4-paused-hidden',
      () =>
        page.evaluate(() => {
          Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' });
          document.dispatchEvent(new Event('visibilitychange'));
        }),
      () =>
        page.evaluate(() => {
          delete (document as { visibilityState?: string }).visibilityState;
          document.dispatchEvent(new Event('visibilitychange'));
        }),
    );
    await pausesAndResumes(
      page,
      hub,
      /on battery/,
      'real-5-paused-battery',
      () => page.evaluate(() => (window as unknown as { __setCharging(c: boolean): void }).__setCharging(false)),
      () => page.evaluate(() => (window as unknown as { __setCharging(c: boolean): void }).__setCharging(true)),
    );

    // 4. What the host page's script can reach: nothing of the frame.
    const frameStorage = await frame.evaluate(() => Object.entries(localStorage).map(([k, v]) => `${k}=${v}`));
    assert.ok(frameStorage.length > 0, 'the frame keeps its key pair in its own (hub-origin) storage');
    const probe = await page.evaluate(() => {
      const roots = (window as unknown as { __roots: ShadowRoot[] }).__roots;
      const iframe = roots.map((r) => r.querySelector('iframe')).find((x) => x) as HTMLIFrameElement;
      const attempt = (f: () => unknown): string => {
        try {
          return `read: ${String(f())}`;
        } catch (e) {
          return (e as Error).name;
        }
      };
      return {
        sandbox: iframe.getAttribute('sandbox'),
        contentDocument: iframe.contentDocument === null ? 'null' : 'a document',
        document: attempt(() => iframe.contentWindow?.document),
        frames: window.frames.length,
        storage: attempt(() => iframe.contentWindow?.localStorage),
        cookieOfFrame: attempt(() => iframe.contentWindow?.document.cookie),
        hostStorage: [...Object.entries(localStorage), ...Object.entries(sessionStorage)].map(([k, v]) => `${k}=${v}`),
        cookie: document.cookie,
        violations: (window as unknown as { __violations: string[] }).__violations,
      };
    });
    assert.equal(probe.sandbox, 'allow-scripts allow-same-origin');
    assert.equal(probe.contentDocument, 'null');
    assert.equal(probe.document, 'SecurityError');
    // A frame inside a shadow tree is not even listed in window.frames; the pried-open root handed it over anyway.
    assert.equal(probe.frames, 0);
    assert.equal(probe.storage, 'SecurityError');
    assert.equal(probe.cookieOfFrame, 'SecurityError');
    for (const s of frameStorage) assert.ok(!probe.hostStorage.includes(s), "the frame's key is not on the host page");
    assert.deepEqual(probe.hostStorage, [], 'the host page stores nothing of the volunteer');
    assert.equal(probe.cookie, '');
    const reach = await frame.evaluate(() => {
      try {
        return `read: ${window.parent.document.title}`;
      } catch (e) {
        return (e as Error).name;
      }
    });
    assert.equal(reach, 'SecurityError', 'the frame cannot reach the host page');
    // A message that looks like the frame's but comes from the host page itself is dropped (wrong source and origin).
    await page.evaluate(() => {
      const state = { phase: 'failed', progress: null, pairsServed: 999_999, backend: null, message: 'forged', code: '' };
      window.postMessage({ ns: 'expertswarm.widget', v: 1, type: 'state', state }, '*');
    });
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await phase(page), 'serving', 'a forged state message changes nothing');
    assert.notEqual(await pairsShown(page), 999_999);
    assert.deepEqual(probe.violations, [], 'no CSP violation on the host page');
    assert.deepEqual(await frame.evaluate(() => (window as unknown as { __violations: string[] }).__violations), [], 'none in the frame');

    // 5. Leave: the frame goes, the hub forgets the volunteer.
    await card(page).getByRole('button', { name: 'Leave' }).click();
    await waitPhase(page, 'left');
    assert.match(await line(page), /You left/);
    const gone = Date.now() + STEP_MS;
    while (page.frames().length > 1 && Date.now() < gone) await new Promise((r) => setTimeout(r, 100));
    assert.equal(page.frames().length, 1, 'the frame is removed');
    while ((await dispatchMap(hub.url, hub.model)).some((r) => r.worker_id === workerId) && Date.now() < gone) {
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(!(await dispatchMap(hub.url, hub.model)).some((r) => r.worker_id === workerId), 'the hub forgot the volunteer');
    assert.deepEqual(await card(page).locator('button:visible').allInnerTexts(), ['Lend my GPU']);
    await shot(page, 'real-6-left.png');
    assert.deepEqual(errors, [], 'no script error, warning or CSP report in the console');
  } finally {
    await context.close().catch(() => {});
    site.close();
    await hub.close();
  }
});

test('every option on another host page: dark theme, automatic pauses off, and the shadow root really closed', {
  timeout: 120_000,
}, async () => {
  const hub = await startSwarmHub((await testModel(DEEPSEEK_Q8)).path, 'off', {}, 'm', { dir: pagesDir });
  const site = await hostSite(hub.url);
  browser ??= await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [...CHROMIUM_ARGS, '--headless=new'],
    timeout: 60_000,
  });
  const context = await browser.newContext({ viewport: { width: 900, height: 700 }, colorScheme: 'light' });
  try {
    await context.addInitScript(initScript({ pryOpen: false }));
    const page = await context.newPage();
    await page.goto(`${site.url}/dark`);
    const host = page.locator('expertswarm-widget');
    await host.waitFor();
    assert.ok(((await host.boundingBox())?.height ?? 0) > 100, 'the card renders');
    assert.equal(await host.evaluate((e) => e.shadowRoot), null, 'the shadow root is closed');
    await shot(page, 'dark-consent.png');
    // Automatic pauses off: with the tab hidden and the device unplugged, consent still joins and nothing pauses.
    await page.evaluate(() => {
      Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' });
      document.dispatchEvent(new Event('visibilitychange'));
      (window as unknown as { __setCharging(c: boolean): void }).__setCharging(false);
    });
    // The root is closed, so the test goes through the keyboard, as a visitor would, and reads the frame's own line.
    await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    const phases: string[] = [];
    const until = Date.now() + STEP_MS;
    for (let p = ''; !['waiting', 'downloading', 'starting', 'serving'].includes(p); ) {
      const frame = page.frames().find((x) => x.url().startsWith(`${hub.url}/embed`));
      p = ((await frame?.locator('#frame-status').textContent()) ?? '').replace(/^Volunteer: /, '');
      if (phases.at(-1) !== p) phases.push(p);
      if (Date.now() > until) assert.fail(`the frame never joined: ${phases.join(' → ')}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(!phases.includes('paused'), `no automatic pause with data-pause-on-hidden/battery="false": ${phases.join(' → ')}`);
    assert.equal(await volunteersIn(hub, 'paused'), 0);
    await shot(page, 'dark-joined.png');
  } finally {
    await context.close().catch(() => {});
    site.close();
    await hub.close();
  }
});

/**
 * Every state the card can show, scripted: the test build's frame runs the fake client (web/test-entry/), which the
 * test drives from inside the frame while the card renders what the frame reports. A screenshot and an axe run per
 * state; the calls the card caused are the client's own.
 */
test('every state of the card, scripted through the test build: wording, progress, buttons, axe, screenshots', {
  timeout: 180_000,
}, async () => {
  const dir = await buildPages('test');
  const hub = new Hub(defaultConfig({ stateDir: ':memory:', models: [] }));
  await hub.load();
  let app: FastifyInstance | undefined;
  let site: { url: string; close(): void } | undefined;
  browser ??= await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [...CHROMIUM_ARGS, '--headless=new'],
    timeout: 60_000,
  });
  const context = await browser.newContext({ viewport: { width: 900, height: 700 } });
  try {
    app = await buildApp(hub, { dir });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const hubUrl = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    site = await hostSite(hubUrl);
    await context.addInitScript(initScript({ pryOpen: true }));
    const page = await context.newPage();
    await page.goto(`${site.url}/`);
    await waitPhase(page, 'idle');
    await card(page).getByRole('button', { name: 'Lend my GPU' }).click();
    const frame = await (async () => {
      const until = Date.now() + STEP_MS;
      for (;;) {
        const f = page.frames().find((x) => x.url().startsWith(`${hubUrl}/embed`));
        if (f && (await f.evaluate(() => window.volunteerFake !== undefined).catch(() => false))) return f;
        if (Date.now() > until) assert.fail('the frame never created its client');
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    assert.deepEqual(await frame.evaluate(() => window.volunteerFake?.calls), [{ method: 'join', memoryBudgetBytes: 256 * 1024 * 1024 }]);
    const slice = { model: 'm', layer: 1, experts: [0, 8] as [number, number], bytes: 40 << 20, digest: 'sha256:00' };
    const states: [string, VolunteerState, RegExp, string[]][] = [
      ['connecting', { kind: 'connecting', attempt: 1 }, /^Connecting to the hub/, ['Pause', 'Leave']],
      [
        'retrying',
        { kind: 'retrying', inSeconds: 4, reason: 'connection refused', attempt: 2 },
        /^Hub unreachable, retrying… \(connection refused\)$/,
        ['Pause', 'Leave'],
      ],
      ['waiting', { kind: 'waiting' }, /^Waiting: the hub sends a slice/, ['Pause', 'Leave']],
      [
        'downloading',
        { kind: 'downloading', slice, loadedBytes: 17 << 20, totalBytes: 40 << 20, fromCache: false },
        /: 42%$/,
        ['Pause', 'Leave'],
      ],
      ['starting', { kind: 'starting', slice }, /^Starting the compute engine/, ['Pause', 'Leave']],
      ['serving', { kind: 'serving', slice, backend: 'webgpu' }, /^Serving with WebGPU$/, ['Pause', 'Leave']],
      ['released', { kind: 'released', slice, reason: 'demand fell' }, /no longer needs this slice/, ['Pause', 'Leave']],
      [
        'failed',
        { kind: 'failed', code: 'SLICE_DOES_NOT_FIT', message: 'the slice does not fit this device', retrying: false },
        /^Stopped: the slice does not fit this device\.$/,
        ['Pause', 'Leave'],
      ],
    ];
    for (const [name, state, want, buttons] of states) {
      await frame.evaluate(
        ([s, pairs]) => {
          window.volunteerFake?.setStats({ pairsServed: pairs, pairsPerSec: 0, workFrames: 0, lastLatencyMs: null, credit: 0 });
          window.volunteerFake?.set(s);
        },
        [state, name === 'serving' ? 1234 : 0] as const,
      );
      await waitPhase(page, state.kind);
      assert.match(await line(page), want, name);
      assert.deepEqual(await card(page).locator('button:visible').allInnerTexts(), buttons, name);
      const bar = card(page).locator('progress');
      assert.equal(await bar.isVisible(), name === 'downloading', `${name}: the progress bar`);
      if (name === 'downloading') assert.equal(await bar.evaluate((b: HTMLProgressElement) => b.value), 42);
      if (name === 'serving') assert.equal(await pairsShown(page), 1234);
      await assertCardAccessible(page, name);
      await shot(page, `state-${name}.png`);
    }
    await card(page).getByRole('button', { name: 'Pause' }).click();
    await waitPhase(page, 'paused');
    assert.deepEqual(await card(page).locator('button:visible').allInnerTexts(), ['Resume', 'Leave']);
    assert.equal(await card(page).locator('button:focus').textContent(), 'Resume', 'focus moves to Resume, never lost');
    await assertCardAccessible(page, 'paused');
    await shot(page, 'state-paused.png');
    await card(page).getByRole('button', { name: 'Resume' }).click();
    await waitPhase(page, 'failed');
    const calls: FakeCall[] = await frame.evaluate(() => window.volunteerFake?.calls ?? []);
    assert.deepEqual(
      calls.map((c) => c.method),
      ['join', 'pause', 'resume'],
    );
    await card(page).getByRole('button', { name: 'Leave' }).click();
    await waitPhase(page, 'left');
    assert.deepEqual(await card(page).locator('button:visible').allInnerTexts(), ['Lend my GPU']);
    await shot(page, 'state-left.png');
  } finally {
    await context.close().catch(() => {});
    site?.close();
    await app?.close();
    await hub.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('/widget.js is one classic script within its size budget', () => {
  const code = readFileSync(join(pagesDir, 'widget.js'), 'utf8');
  const gz = gzipSync(code, { level: 9 }).length;
  console.log(`[widget] widget.js ${code.length} B, ${gz} B gzipped (limit ${WIDGET_GZIP_LIMIT_BYTES} B)`);
  assert.ok(gz <= WIDGET_GZIP_LIMIT_BYTES, `${gz} B gzipped`);
  assert.doesNotMatch(code, /^\s*(import|export)\s/m, 'no module syntax: it loads with a plain <script src>');
  assert.doesNotMatch(code, /\beval\(|new Function\(/, 'no eval under a strict CSP');
});
