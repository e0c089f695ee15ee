/**
 * The join widget end to end, with real parts on loopback: a hub (real coordinator, `--dispatch always`, deepseek
 * Q8_0 generated here) serving a fresh production build, and a host site on a SECOND loopback origin whose page has
 * a strict CSP (no inline script, no eval, nothing but the hub's origin for scripts and frames, no styles at all) and
 * embeds the one-line snippet. Headless Chromium (Debian's, via playwright-core) is the visitor.
 *
 * - The card renders with the hub's frame inside it, whose "Lend my GPU" is the consent (fully visible, keyboard
 *   reachable), accessibly (axe-core, card and frame); before the in-frame click the hub sees only the loader, the
 *   frame's page and its assets: no API call, no WebSocket, no slice, no wasm.
 * - Keyboard consent in the frame → its volunteer joins, downloads its slice and serves: a greedy completion gives
 *   the token ids of the coordinator alone (a `--dispatch off` hub), ≥ 1 pair was served by the frame, and the card
 *   counts the pairs it served.
 * - Pause / resume from the card; then the automatic pauses: the host tab hidden (document.visibilityState
 *   overridden, visibilitychange dispatched) and a device on battery (navigator.getBattery stubbed); each time the
 *   hub sees the volunteer paused and serving again.
 * - The host page's script, with every shadow root forced open (a hostile host can do that; the closed root is not
 *   the boundary, the frame is), gets nothing of the frame: no document, no storage, no token; the frame cannot
 *   reach the host page either. No CSP violation on either side, nor on the hub's volunteer page and dashboard under
 *   their own policies.
 * - Leave: the hub forgets the volunteer and a fresh frame offers consent again. A second host page (dark theme,
 *   automatic pauses off, shadow roots left alone) shows the root really is closed.
 * - Through the test build (the frame's fake client): every state the card can show (wording, progress bar,
 *   buttons, focus, axe); consent that cannot be forged (a host's `join` message, a script's click); messages of the
 *   right origin from the wrong window ignored by both ends; no global left by the loader; every listener gone with
 *   the element.
 * - /widget.js is one classic script within its size budget that assigns no global.
 *
 * Screenshots of the card in each state go to .cache/artifacts/widget/ (ignored by git).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runInNewContext } from 'node:vm';
import { gzipSync } from 'node:zlib';
import type { Browser, Frame, Page } from 'playwright-core';
import type { VolunteerState } from '../../volunteer/state.ts';
import type { FakeCall } from '../../web/test-entry/fake-client-factory.ts';
import { WIDGET_GZIP_LIMIT_BYTES } from '../../web/widget.vite.config.ts';
import { assertAccessible, launchChromium, pageErrors } from '../../harness/browser.ts';
import { testModel } from '../../harness/models.ts';
import { buildPages } from '../../harness/pages-build.ts';
import { type PagesHub, pagesHub } from '../../harness/pages-hub.ts';
import {
  baselineIds,
  DEEPSEEK_Q8,
  E2E_PROMPT,
  completionIds,
  dispatchMap,
  pairOutcomes,
  startSwarmHub,
  type SwarmHub,
} from '../../harness/swarm.ts';

const root = fileURLToPath(new URL('../../', import.meta.url));
const ARTIFACTS = join(root, '.cache/artifacts/widget');
/** Enough tokens to route many pairs through the frame; fewer than the other end-to-end tests, to keep this one short. */
const N = 24;
/** From consent to serving (onnxruntime's wasm, SwiftShader's shader compiles, on 2 busy cores). */
const SERVE_MS = 150_000;
const STEP_MS = 20_000;
const WORKER_ID_KEY = 'expertswarm.worker-id';

let pagesDir = '';
/** The test build: the frame runs the scripted fake client (web/test-entry/). */
let testPagesDir = '';
let browser: Browser | undefined;

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  pagesDir = await buildPages('production');
  testPagesDir = await buildPages('test');
});

after(async () => {
  await browser?.close().catch(() => {});
  for (const dir of [pagesDir, testPagesDir]) if (dir) rmSync(dir, { recursive: true, force: true });
});

async function launch(): Promise<Browser> {
  browser ??= await launchChromium();
  return browser;
}

/** A hub with no models serving the test build, on loopback. */
const fakeHub = (): Promise<PagesHub> => pagesHub(testPagesDir);

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
 * Runs before any script of every document (the host page and the frames): records CSP violations, stubs a battery
 * the test can unplug (`__setCharging(false)`), counts the listeners of the kinds the card adds (`__listeners()`),
 * notes the window's own names (`__globals`), and, where asked, forces shadow roots open and keeps them (`__roots`),
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
    const watched = new Map([[window, 'message'], [document, 'visibilitychange'], [battery, 'chargingchange']]);
    const live = [];
    const add = EventTarget.prototype.addEventListener;
    const remove = EventTarget.prototype.removeEventListener;
    const capture = (o) => (typeof o === 'boolean' ? o : !!(o && o.capture));
    const find = (t, type, fn, o) => live.findIndex((l) => l.t === t && l.type === type && l.fn === fn && l.capture === capture(o));
    EventTarget.prototype.addEventListener = function (type, fn, o) {
      if (watched.get(this) === type && fn && find(this, type, fn, o) < 0) live.push({ t: this, type, fn, capture: capture(o) });
      return add.call(this, type, fn, o);
    };
    EventTarget.prototype.removeEventListener = function (type, fn, o) {
      const i = find(this, type, fn, o);
      if (i >= 0) live.splice(i, 1);
      return remove.call(this, type, fn, o);
    };
    window.__listeners = () => {
      const n = { message: 0, visibilitychange: 0, chargingchange: 0 };
      for (const l of live) n[l.type]++;
      return n;
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
    }
    window.__globals = Object.getOwnPropertyNames(window);`;
}

const card = (page: Page) => page.locator('expertswarm-widget section');
const phase = async (page: Page): Promise<string> => (await card(page).getAttribute('data-phase')) ?? '';
const line = async (page: Page): Promise<string> => (await card(page).locator('.state').textContent()) ?? '';
const pairsShown = async (page: Page): Promise<number> =>
  Number(((await card(page).locator('.pairs strong').textContent()) ?? '').replace(/,/g, ''));

/**
 * axe-core over the host page with the card and its frame: no serious or critical violation of WCAG 2.x A/AA. With
 * `frame`, the frame's consent button must have been among what axe checked (axe enters the frames itself).
 */
async function assertCardAccessible(page: Page, where: string, { frame = false } = {}): Promise<void> {
  const axe = await assertAccessible(page, `${where} (the card or its frame)`);
  if (frame) assert.match(JSON.stringify(axe.passes), /#consent/, `${where}: axe checked the frame's consent button`);
}

/** The card's frame, once it shows its consent button (the frame said `ready`). */
async function consentFrame(page: Page, hubUrl: string, not?: Frame): Promise<Frame> {
  const until = Date.now() + STEP_MS;
  for (;;) {
    const f = page.frames().find((x) => x !== not && x.url().startsWith(`${hubUrl}/embed?`) && !x.isDetached());
    if (
      f &&
      (await f
        .locator('#consent')
        .isVisible()
        .catch(() => false))
    )
      return f;
    if (Date.now() > until) assert.fail("the card never showed the frame's consent button");
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The frame's "Lend my GPU": labelled, and all of it (with its focus ring) inside the iframe's box. */
async function assertConsentVisible(frame: Frame): Promise<void> {
  const button = frame.getByRole('button', { name: 'Lend my GPU' });
  assert.ok(await button.isVisible(), 'the consent button shows');
  const b = await button.boundingBox();
  const f = await (await frame.frameElement()).boundingBox();
  assert.ok(b && f, 'both have a box');
  const ring = 5; // outline 3px + offset 2px
  assert.ok(
    b.x - ring >= f.x && b.y - ring >= f.y && b.x + b.width + ring <= f.x + f.width && b.y + b.height + ring <= f.y + f.height,
    `the button and its focus ring fit the frame: ${JSON.stringify({ b, f })}`,
  );
}

async function detached(frame: Frame, what: string): Promise<void> {
  const until = Date.now() + STEP_MS;
  while (!frame.isDetached()) {
    if (Date.now() > until) assert.fail(what);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Waits until a message matching `marker` (a field of the message's data) has been dispatched to `target`'s window:
 * every listener of that window, the widget's included, has then seen it. Call `arm` before posting.
 */
const arm = (target: Page | Frame, marker: string): Promise<unknown> =>
  target.evaluate((m) => {
    const w = window as unknown as { __seen?: Record<string, number> };
    w.__seen ??= {};
    w.__seen[m] = 0;
    window.addEventListener('message', (e) => {
      const seen = w.__seen as Record<string, number>;
      if ((e.data as { marker?: string } | null)?.marker === m) seen[m] = (seen[m] ?? 0) + 1;
    });
  }, marker);
const delivered = (target: Page | Frame, marker: string): Promise<unknown> =>
  target.waitForFunction((m) => ((window as unknown as { __seen?: Record<string, number> }).__seen?.[m] ?? 0) > 0, marker, {
    timeout: STEP_MS,
  });

/**
 * Waits until the card shows a button named `name`. The card's shadow root is closed, so neither the DOM nor
 * Playwright's selectors reach it; the accessibility tree does (through the DevTools protocol).
 */
async function waitForCardButton(page: Page, name: string, ms = STEP_MS): Promise<void> {
  const cdp = await page.context().newCDPSession(page);
  try {
    const deadline = Date.now() + ms;
    for (;;) {
      const { nodes } = (await cdp.send('Accessibility.getFullAXTree')) as {
        nodes: Array<{ ignored?: boolean; role?: { value?: unknown }; name?: { value?: unknown } }>;
      };
      if (nodes.some((n) => !n.ignored && n.role?.value === 'button' && n.name?.value === name)) return;
      if (Date.now() > deadline) throw new Error(`the card shows no ${name} button within ${ms} ms`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await cdp.detach().catch(() => {});
  }
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
  const want = await baselineIds(m, N);

  const hub = await startSwarmHub(m.path, 'always', {}, 'm', { dir: pagesDir });
  const site = await hostSite(hub.url);
  const context = await (await launch()).newContext({ viewport: { width: 900, height: 700 } });
  try {
    await context.addInitScript(initScript({ pryOpen: true }));
    const page = await context.newPage();
    const requests: string[] = [];
    context.on('request', (r) => requests.push(r.url()));
    const errors = pageErrors(page, { types: ['error', 'warning'] });
    const sockets: string[] = [];
    page.on('websocket', (ws) => sockets.push(ws.url()));
    await page.goto(`${site.url}/`);

    // 1. The card, before consent: the hub's frame with its button, and nothing dialled.
    await waitPhase(page, 'idle');
    const consentIn = await consentFrame(page, hub.url);
    await page.waitForLoadState('networkidle');
    assert.equal(await card(page).getByRole('heading').textContent(), 'Lend your GPU');
    assert.match((await card(page).textContent()) ?? '', /GPU time, memory, bandwidth and battery/);
    assert.match((await card(page).textContent()) ?? '', /up to 256 MiB/, 'data-budget reaches the card');
    assert.match(await line(page), /Nothing is downloaded until you agree/);
    assert.deepEqual(await card(page).locator('button:visible').allInnerTexts(), [], 'the card itself offers no consent');
    await assertConsentVisible(consentIn);
    assert.match((await consentIn.locator('#consent-what').textContent()) ?? '', /^Up to 256 MiB for “m”, from 127\.0\.0\.1:\d+$/);
    await assertCardAccessible(page, 'consent', { frame: true });
    await shot(page, 'real-1-consent.png');
    const fromHub = requests.filter((u) => u.startsWith(hub.url)).map((u) => u.slice(hub.url.length));
    assert.equal(fromHub[0], '/widget.js');
    assert.match(fromHub[1] ?? '', /^\/embed\?host=http%3A%2F%2F127\.0\.0\.1%3A\d+&model=m&budget=256&theme=auto$/);
    assert.deepEqual(
      fromHub.slice(2).filter((u) => !/^\/assets\/[\w-]+\.(js|css)$/.test(u)),
      [],
      'before the click in the frame: the loader, the frame page and its scripts and styles, no API, no slice, no wasm',
    );
    assert.deepEqual(sockets, [], 'no WebSocket before the click in the frame');

    // 2. Consent with the keyboard, in the frame (the first thing Tab reaches); the frame's volunteer joins and serves.
    await page.keyboard.press('Tab');
    assert.equal(await consentIn.evaluate(() => document.activeElement?.id), 'consent', "Tab reaches the frame's button");
    await page.keyboard.press('Enter');
    const seen: string[] = [];
    const until = Date.now() + SERVE_MS;
    for (let p = await phase(page); p !== 'serving'; p = await phase(page)) {
      if (seen.at(-1) !== p) seen.push(p);
      if (p === 'failed' || Date.now() > until) assert.fail(`the frame never served: ${p} "${await line(page)}" ${errors.join(' | ')}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(await card(page).locator('button:focus').textContent(), 'Pause', 'the keyboard moves from the folded frame to Pause');
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
    // The card says how much the frame holds (every MoE layer of this model: it holds several slices, issue 27).
    assert.match(await line(page), /^Serving with (WebGPU|WebAssembly) · (one slice|\d+ slices) of the model, [\d.]+ MiB$/);
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
    await arm(page, 'forged-by-host');
    await page.evaluate(() => {
      const state = { phase: 'failed', progress: null, pairsServed: 999_999, backend: null, message: 'forged', code: '' };
      window.postMessage({ ns: 'expertswarm.widget', v: 2, type: 'state', state, marker: 'forged-by-host' }, '*');
    });
    await delivered(page, 'forged-by-host');
    assert.equal(await phase(page), 'serving', 'a forged state message changes nothing');
    assert.notEqual(await pairsShown(page), 999_999);
    assert.deepEqual(probe.violations, [], 'no CSP violation on the host page');
    assert.deepEqual(await frame.evaluate(() => (window as unknown as { __violations: string[] }).__violations), [], 'none in the frame');

    // 5. The hub's own pages under their own policies, next to a live volunteer: no CSP violation, nothing refused.
    for (const [path, ready] of [
      ['/', '#state-title'],
      ['/dashboard', '.uplot canvas'],
    ] as const) {
      const other = await context.newPage();
      const otherErrors = pageErrors(other, { ignore: /EventSource/ });
      await other.goto(`${hub.url}${path}`);
      await other.locator(ready).first().waitFor({ timeout: STEP_MS });
      if (path === '/dashboard') await other.locator('[data-testid^="heatmap-"] canvas').first().waitFor({ timeout: STEP_MS });
      await other.waitForTimeout(1_000);
      assert.deepEqual(
        await other.evaluate(() => (window as unknown as { __violations: string[] }).__violations),
        [],
        `${path}: no CSP violation`,
      );
      assert.deepEqual(otherErrors, [], `${path}: no script error or CSP report`);
      await other.close();
    }

    // 6. Leave: the frame goes with the volunteer, the hub forgets it, and a fresh frame offers consent again.
    await card(page).getByRole('button', { name: 'Leave' }).click();
    await waitPhase(page, 'left');
    assert.match(await line(page), /You left/);
    const fresh = await consentFrame(page, hub.url, frame);
    await detached(frame, 'the frame that served is removed');
    const gone = Date.now() + STEP_MS;
    while ((await dispatchMap(hub.url, hub.model)).some((r) => r.worker_id === workerId) && Date.now() < gone) {
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(!(await dispatchMap(hub.url, hub.model)).some((r) => r.worker_id === workerId), 'the hub forgot the volunteer');
    assert.deepEqual(await card(page).locator('button:visible').allInnerTexts(), []);
    await assertConsentVisible(fresh);
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
  const hub = await fakeHub();
  const site = await hostSite(hub.url);
  const context = await (await launch()).newContext({ viewport: { width: 900, height: 700 }, colorScheme: 'light' });
  try {
    await context.addInitScript(initScript({ pryOpen: false }));
    const page = await context.newPage();
    await page.goto(`${site.url}/dark`);
    const host = page.locator('expertswarm-widget');
    await host.waitFor();
    assert.ok(((await host.boundingBox())?.height ?? 0) > 100, 'the card renders');
    assert.equal(await host.evaluate((e) => e.shadowRoot), null, 'the shadow root is closed');
    const frame = await consentFrame(page, hub.url);
    assert.match(frame.url(), /&theme=dark$/);
    assert.equal(await frame.evaluate(() => document.documentElement.classList.contains('dark')), true, 'the frame wears the theme');
    await assertConsentVisible(frame);
    // (axe cannot enter the closed root, so it checks the host page here; the frame in the other tests.)
    await assertCardAccessible(page, 'dark, consent');
    await shot(page, 'dark-consent.png');
    // Automatic pauses off: with the tab hidden and the device unplugged, consent still joins and nothing pauses.
    const hideAndUnplug = (): Promise<void> =>
      page.evaluate(() => {
        Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => 'hidden' });
        document.dispatchEvent(new Event('visibilitychange'));
        (window as unknown as { __setCharging(c: boolean): void }).__setCharging(false);
      });
    await hideAndUnplug();
    // The root is closed, so the test goes through the keyboard, as a visitor would: Tab reaches the frame's button.
    await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await frame.waitForFunction(() => window.volunteerFake?.calls.length === 1, null, { timeout: STEP_MS });
    await hideAndUnplug();
    // A round trip through the card: once the frame says it joined (a message that may land after the client's join
    // call is seen), the card shows Pause and hands it the focus the folded frame had, in the same update. Pressing
    // it must give exactly one pause, the visitor's, after the join.
    await waitForCardButton(page, 'Pause');
    await page.keyboard.press('Enter');
    await frame.waitForFunction(() => (window.volunteerFake?.calls.length ?? 0) >= 2, null, { timeout: STEP_MS });
    const calls: FakeCall[] = await frame.evaluate(() => window.volunteerFake?.calls ?? []);
    assert.deepEqual(
      calls.map((c) => c.method),
      ['join', 'pause'],
      'no automatic pause with data-pause-on-hidden/battery="false", and the visitor\'s own Pause went through',
    );
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
 * state; the calls the card caused are the client's own. Around them, what a hostile page or frame tries: forged
 * consent, messages of the right origin from the wrong window; then the element's removal.
 */
test('through the test build: forged consent refused, every state, wrong-window messages ignored, listeners removed', {
  timeout: 180_000,
}, async () => {
  const hub = await fakeHub();
  const site = await hostSite(hub.url);
  const context = await (await launch()).newContext({ viewport: { width: 900, height: 700 } });
  try {
    await context.addInitScript(initScript({ pryOpen: true }));
    const page = await context.newPage();
    await page.goto(`${site.url}/`);
    await waitPhase(page, 'idle');
    const frame = await consentFrame(page, hub.url);
    const fakeCalls = async (): Promise<string[]> =>
      (await frame.evaluate(() => window.volunteerFake?.calls ?? [])).map((c: FakeCall) => c.method);
    assert.deepEqual(
      await page.evaluate(() => {
        const before = new Set((window as unknown as { __globals: string[] }).__globals);
        return Object.getOwnPropertyNames(window).filter((n) => !before.has(n) && n !== '__globals');
      }),
      [],
      'the loader added no global to the host page',
    );
    assert.ok(await page.evaluate(() => customElements.get('expertswarm-widget') !== undefined), 'only its custom element');

    // Forged consent. The host page (the frame's parent: right origin, right source) sends the joins of version 1
    // and 2 and a config; the frame's own scripts click its button without the visitor. None creates the client.
    await page.evaluate(() => {
      const roots = (window as unknown as { __roots: ShadowRoot[] }).__roots;
      const iframe = roots.map((r) => r.querySelector('iframe')).find((x) => x) as HTMLIFrameElement;
      (window as unknown as { __embed: Window }).__embed = iframe.contentWindow as Window;
    });
    await arm(frame, 'forged-join');
    await page.evaluate((hubUrl) => {
      const w = (window as unknown as { __embed: Window }).__embed;
      for (const v of [1, 2]) {
        w.postMessage({ ns: 'expertswarm.widget', v, type: 'config', budgetMiB: 8192, model: '' }, hubUrl);
        w.postMessage({ ns: 'expertswarm.widget', v, type: 'join', marker: 'forged-join' }, hubUrl);
      }
    }, hub.url);
    await delivered(frame, 'forged-join');
    await frame.evaluate(() => {
      const b = document.getElementById('consent') as HTMLButtonElement;
      b.click();
      b.dispatchEvent(new MouseEvent('click', { bubbles: true }));
    });
    assert.equal(await frame.evaluate(() => window.volunteerFake === undefined), true, 'no client without the visitor');
    assert.equal(await phase(page), 'idle');

    // The visitor's click, in the frame.
    await frame.getByRole('button', { name: 'Lend my GPU' }).click();
    await waitPhase(page, 'connecting');
    assert.deepEqual(await frame.evaluate(() => window.volunteerFake?.calls), [{ method: 'join', memoryBudgetBytes: 256 * 1024 * 1024 }]);
    assert.equal(await card(page).locator('button:focus').textContent(), 'Pause', 'focus moves from the folded frame to Pause');
    assert.equal(await frame.locator('#consent').isVisible(), false, 'the consent button is gone once pressed');

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
    const setState = (state: VolunteerState, pairs = 0): Promise<void> =>
      frame.evaluate(
        ([s, n]) => {
          window.volunteerFake?.setStats({ pairsServed: n, pairsPerSec: 0, workFrames: 0, lastLatencyMs: null, credit: 0, slices: [] });
          window.volunteerFake?.set(s);
        },
        [state, pairs] as const,
      );
    for (const [name, state, want, buttons] of states) {
      await setState(state, name === 'serving' ? 1234 : 0);
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
    assert.deepEqual(await fakeCalls(), ['join', 'pause', 'resume']);

    // Right origin, wrong window, towards the card: a second frame of the hub (another /embed, a sibling of the
    // card's own) posts a well-formed state to the host page. The card ignores it; then a real round trip.
    await setState({ kind: 'waiting' });
    await waitPhase(page, 'waiting');
    await page.evaluate(
      (src) => {
        const f = document.createElement('iframe');
        f.src = src;
        f.title = 'another frame of the hub';
        document.body.append(f);
      },
      `${hub.url}/embed?host=${encodeURIComponent(site.url)}&theme=light`,
    );
    const sibling = await consentFrame(page, hub.url, frame);
    await arm(page, 'forged-state');
    await sibling.evaluate(() => {
      const state = { phase: 'failed', progress: null, pairsServed: 999_999, backend: null, message: 'forged', code: '' };
      window.parent.postMessage({ ns: 'expertswarm.widget', v: 2, type: 'state', state, marker: 'forged-state' }, '*');
    });
    await delivered(page, 'forged-state');
    assert.equal(await phase(page), 'waiting', "a state from the hub's other frame changes nothing");
    assert.notEqual(await pairsShown(page), 999_999);
    await setState({ kind: 'serving', slice, backend: 'wasm' }, 7);
    await waitPhase(page, 'serving');
    assert.equal(await pairsShown(page), 7, 'the card still follows its own frame');

    // Right origin, wrong window, towards the frame: a frame of the host's origin (about:blank, a sibling of the
    // card's frame) posts `leave` to the card's frame. The frame ignores it; then a real round trip through the card.
    await page.evaluate(() => {
      const f = document.createElement('iframe');
      f.title = 'a frame of the host page';
      document.body.append(f);
    });
    const blank = page.frames().find((f) => f.url() === 'about:blank' && f.parentFrame() === page.mainFrame());
    assert.ok(blank, 'the host-origin sibling frame');
    await arm(frame, 'forged-leave');
    await blank.evaluate((hubUrl) => {
      const w = (window.parent as unknown as { __embed: Window }).__embed;
      w.postMessage({ ns: 'expertswarm.widget', v: 2, type: 'leave', marker: 'forged-leave' }, hubUrl);
    }, hub.url);
    await delivered(frame, 'forged-leave');
    assert.ok(!(await fakeCalls()).includes('leave'), "the sibling's leave is ignored");
    await card(page).getByRole('button', { name: 'Pause' }).click();
    await frame.waitForFunction(() => window.volunteerFake?.calls.at(-1)?.method === 'pause', null, { timeout: STEP_MS });
    assert.deepEqual(await fakeCalls(), ['join', 'pause', 'resume', 'pause'], "the sibling's leave never reached the client");
    await card(page).getByRole('button', { name: 'Resume' }).click();
    await waitPhase(page, 'serving');
    await page.evaluate(() => {
      for (const f of Array.from(document.querySelectorAll('body > iframe'))) f.remove();
    });
    await detached(sibling, "the hub's other frame is gone");

    // Leave: the frame goes and a fresh one, which has dialled nothing, offers consent again.
    await card(page).getByRole('button', { name: 'Leave' }).click();
    await waitPhase(page, 'left');
    const fresh = await consentFrame(page, hub.url, frame);
    await detached(frame, 'the frame that served is removed');
    assert.equal(await fresh.evaluate(() => window.volunteerFake === undefined), true, 'the fresh frame made no client');
    assert.deepEqual(await card(page).locator('button:visible').allInnerTexts(), []);
    assert.equal(
      await card(page).evaluate((c) => c.getRootNode() instanceof ShadowRoot && (c.getRootNode() as ShadowRoot).activeElement === c),
      true,
      'focus rests on the card',
    );
    await assertCardAccessible(page, 'left', { frame: true });
    await shot(page, 'state-left.png');

    // Removed by a single-page-app host: every listener the card added goes with it (so a later visibilitychange
    // reaches nothing), and so does its frame; put back, it listens again with a fresh frame.
    type Counts = { message: number; visibilitychange: number; chargingchange: number };
    const listeners = (): Promise<Counts> => page.evaluate(() => (window as unknown as { __listeners(): Counts }).__listeners());
    const withCard = await listeners();
    assert.ok(withCard.visibilitychange >= 1 && withCard.chargingchange >= 1 && withCard.message >= 1, JSON.stringify(withCard));
    await page.evaluate(() => {
      const w = document.querySelector('expertswarm-widget') as HTMLElement;
      (window as unknown as { __card: HTMLElement }).__card = w;
      w.remove();
    });
    assert.deepEqual(
      await listeners(),
      { message: withCard.message - 1, visibilitychange: withCard.visibilitychange - 1, chargingchange: withCard.chargingchange - 1 },
      'removing the element removes its message, visibilitychange and chargingchange listeners',
    );
    await detached(fresh, 'the frame goes with the element');
    await page.evaluate(() => document.querySelector('main')?.append((window as unknown as { __card: HTMLElement }).__card));
    await consentFrame(page, hub.url, fresh);
    await page.waitForFunction(
      (n) => (window as unknown as { __listeners(): Counts }).__listeners().chargingchange === n,
      withCard.chargingchange,
    );
    assert.deepEqual(await listeners(), withCard, 'put back, it listens again');
    assert.deepEqual(await page.evaluate(() => (window as unknown as { __violations: string[] }).__violations), []);
  } finally {
    await context.close().catch(() => {});
    site.close();
    await hub.close();
  }
});

test('/widget.js is one classic script within its size budget that assigns no global', () => {
  const code = readFileSync(join(pagesDir, 'widget.js'), 'utf8');
  const gz = gzipSync(code, { level: 9 }).length;
  console.log(`[widget] widget.js ${code.length} B, ${gz} B gzipped (limit ${WIDGET_GZIP_LIMIT_BYTES} B)`);
  assert.ok(gz <= WIDGET_GZIP_LIMIT_BYTES, `${gz} B gzipped`);
  assert.doesNotMatch(code, /^\s*(import|export)\s/m, 'no module syntax: it loads with a plain <script src>');
  assert.doesNotMatch(code, /\beval\(|new Function\(/, 'no eval under a strict CSP');
  // Run as a classic script in a bare global (it finds no <script> tag of its own and stops): whatever it declares
  // at the top level would land on the global object, as `var ExpertswarmWidget = …` would on a host page.
  const logged: string[] = [];
  const global: Record<string, unknown> = {
    HTMLElement: class {},
    document: { currentScript: null },
    console: { error: (m: string) => logged.push(m), warn: (m: string) => logged.push(m) },
  };
  const before = Object.keys(global);
  runInNewContext(code, global);
  assert.deepEqual(
    Object.keys(global).filter((k) => !before.includes(k)),
    [],
    'no global besides the custom element it registers',
  );
  assert.match(logged.join(' '), /cannot find its own <script> tag/);
});
