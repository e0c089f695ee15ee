/**
 * The churn drill (issue 14): half of ten volunteers die mid-generation, in every way a volunteer dies — a tab closed,
 * a tab's network cut (DevTools offline), a tab's renderer process killed, a tab's GPU device lost, a headless
 * volunteer killed with SIGKILL — and nothing a user sees changes: the request in flight and the one after it give
 * the coordinator's own token ids, no request fails, every dead worker leaves the dispatch map within the heartbeat
 * bound (idle timeout + one sweep), the tab whose GPU was lost rebuilds its engine and serves again, the tab whose
 * network comes back notices the hub's silence by itself and rejoins, and the survivors of every layer go on serving.
 *
 * Real parts: the hub with its linkcpp-server, a production build of the volunteer page in headless Chromium (six
 * tabs), four `npx expertswarm volunteer` processes. deepseek Q8_0 (two MoE layers), target 5: each volunteer holds a
 * whole layer, five replicas per layer. Victims are picked by layer so each layer keeps at least one survivor.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import type { Browser } from 'playwright-core';
import { DEFAULT_SATURATION } from '../../hub/market/saturation.ts';
import type { WorkersPage } from '../../protocol/dashboard.ts';
import { joinVolunteerPage, launchChromium, type VolunteerTab } from '../../harness/browser.ts';
import { testModel } from '../../harness/models.ts';
import { buildPages } from '../../harness/pages-build.ts';
import {
  DEEPSEEK_Q8,
  E2E_PROMPT,
  E2E_TOKENS,
  baselineIds,
  completionIds,
  dispatchMap,
  moeLayersOf,
  pairOutcomes,
  setTargetBase,
  spawnVolunteer,
  startSwarmHub,
  until,
  waitForHolders,
  waitForCoverage,
  type HeadlessVolunteer,
  type SwarmHub,
} from '../../harness/swarm.ts';

const SERVE_MS = 240_000;
/** Replicas wanted per layer: each of the ten volunteers holds one slice of the two layers at the start. */
const TARGET_BASE = 5;
const ADMIN_TOKEN = 'churn-admin-token-0123456789abcdef';
/** The request in flight when the volunteers die: long enough to outlast a dozen tokens' pairs on a busy machine. */
const CHURN_TOKENS = 128;
/** Requests tried, each checked, until one is still generating once a dozen tokens' pairs were served. */
const CHURN_ATTEMPTS = 3;
/** The channel's heartbeat and idle timeout here; the bound a silent worker is dropped within is idle + one sweep. */
const HEARTBEAT_MS = 1000;
const IDLE_TIMEOUT_MS = 6000;
const SWEEP_MS = Math.min(5000, IDLE_TIMEOUT_MS / 3);
/** The map is read every 100 ms on a busy machine (timers run late under load): room for that reading. */
const LEAVE_BOUND_MS = IDLE_TIMEOUT_MS + SWEEP_MS + 2500;

type Kill = 'tab closed' | 'tab offline' | 'tab renderer killed' | 'tab GPU device lost' | 'headless SIGKILL';

interface Volunteer {
  name: string;
  workerId: string;
  tab?: VolunteerTab;
  proc?: HeadlessVolunteer;
  layer: number;
  kill?: Kill;
}

/** Keeps every GPUDevice the page requests, so the test can destroy them as a driver reset would lose them. */
function captureDevices(): void {
  const w = window as unknown as { __xsDevices: GPUDevice[] };
  w.__xsDevices = [];
  if (typeof GPUAdapter === 'undefined') return;
  const request = GPUAdapter.prototype.requestDevice;
  GPUAdapter.prototype.requestDevice = async function (this: GPUAdapter, ...args: Parameters<GPUAdapter['requestDevice']>) {
    const device = await request.apply(this, args);
    w.__xsDevices.push(device);
    return device;
  };
}

async function workersPage(url: string): Promise<WorkersPage> {
  return (await (await fetch(`${url}/api/dashboard/workers?limit=100`)).json()) as WorkersPage;
}

async function killOne(v: Volunteer): Promise<void> {
  switch (v.kill) {
    case 'tab closed':
      await v.tab?.close();
      return;
    case 'tab offline':
      await v.tab?.context.setOffline(true);
      return;
    case 'tab renderer killed': {
      const cdp = await v.tab?.context.newCDPSession(v.tab.page);
      // The renderer dies before it could answer: the command's promise settles with an error, or never.
      void cdp?.send('Page.crash').catch(() => {});
      return;
    }
    case 'tab GPU device lost':
      await v.tab?.page.evaluate(() => {
        for (const d of (window as unknown as { __xsDevices: GPUDevice[] }).__xsDevices) d.destroy();
      });
      return;
    case 'headless SIGKILL':
      v.proc?.proc.kill('SIGKILL');
      return;
  }
}

/**
 * Who dies how: the GPU tab loses its device; the other kinds go, one by one, to a volunteer of the right sort in the
 * layer with the most live volunteers left, so no layer loses all of its replicas.
 */
function pickVictims(vs: Volunteer[], gpuTab: Volunteer): void {
  gpuTab.kill = 'tab GPU device lost';
  const kinds: Kill[] = ['tab closed', 'tab offline', 'tab renderer killed', 'headless SIGKILL'];
  for (const kind of kinds) {
    const live = (layer: number): number => vs.filter((v) => v.layer === layer && !v.kill).length;
    const sort = kind === 'headless SIGKILL' ? (v: Volunteer) => v.proc !== undefined : (v: Volunteer) => v.tab !== undefined;
    const candidates = vs.filter((v) => !v.kill && sort(v)).sort((a, b) => live(b.layer) - live(a.layer));
    const v = candidates[0];
    assert.ok(v, `a volunteer to die by ${kind}`);
    v.kill = kind;
  }
}

let pagesDir = '';
let browser: Browser | undefined;

before(async () => {
  pagesDir = await buildPages('production');
});

after(async () => {
  await browser?.close().catch(() => {});
  if (pagesDir) rmSync(pagesDir, { recursive: true, force: true });
});

test('churn: half of ten volunteers die mid-generation in every way; no request fails, tokens identical, the dead leave within the heartbeat bound, survivors serve', {
  timeout: 900_000,
}, async () => {
  const m = await testModel(DEEPSEEK_Q8);
  const want = await baselineIds(m, CHURN_TOKENS);
  const moe = moeLayersOf(m.config);
  const perToken = moe.length * m.config.nExpertUsed;
  let hub: SwarmHub | undefined;
  const vs: Volunteer[] = [];
  try {
    hub = await startSwarmHub(
      m.path,
      'always',
      {
        saturation: { ...DEFAULT_SATURATION, targetBase: TARGET_BASE },
        adminToken: ADMIN_TOKEN,
        channel: { heartbeatMs: HEARTBEAT_MS, idleTimeoutMs: IDLE_TIMEOUT_MS },
      },
      'm',
      { dir: pagesDir },
    );
    const url = hub.url;
    // The headless volunteers first: their processes start and load while the tabs join.
    for (let i = 0; i < 4; i++) {
      const id = `headless-${i}`;
      vs.push({ name: id, workerId: id, proc: spawnVolunteer(url, id), layer: -1 });
    }
    browser = await launchChromium();
    // Tabs one after another (a busy 2-core machine starts them faster in turn); the first computes with WebGPU.
    for (let i = 0; i < 6; i++) {
      const tab = await joinVolunteerPage(browser, url, i === 0 ? 'webgpu' : 'auto', undefined, captureDevices);
      vs.push({ name: `tab ${i}`, workerId: tab.workerId, tab, layer: -1 });
    }
    await waitForCoverage(url, hub.model, moe, m.config.nExpert, 5, SERVE_MS);
    // Volunteers hold several slices (issue 27): the first to load take both layers, and the hub then moves one slice
    // of each to a volunteer holding nothing (REBALANCE) until every one of the ten holds one.
    const rows = await waitForHolders(
      url,
      hub.model,
      vs.map((v) => v.workerId),
      SERVE_MS,
    );
    for (const v of vs) {
      const row = rows.find((r) => r.worker_id === v.workerId);
      assert.ok(row, `${v.name} holds a slice: ${JSON.stringify(rows)}`);
      v.layer = row.layer;
    }
    for (const v of vs) {
      if (!v.tab) continue;
      const tab = v.tab;
      await until(`${v.name} serving`, SERVE_MS, async () => ((await tab.title()).startsWith('Serving with ') ? true : undefined));
    }
    const gpuTab = vs.find((v) => v.name === 'tab 0') as Volunteer;
    assert.equal(await gpuTab.tab?.title(), 'Serving with WebGPU', 'the first tab computes with WebGPU');
    pickVictims(vs, gpuTab);
    const victims = vs.filter((v) => v.kill);
    const survivors = vs.filter((v) => !v.kill);
    for (const layer of moe)
      assert.ok(
        survivors.some((v) => v.layer === layer),
        `layer ${layer} keeps a survivor`,
      );
    console.log(`[churn] ${vs.map((v) => `${v.name} (layer ${v.layer})${v.kill ? `: ${v.kill}` : ''}`).join('; ')}`);

    // Mid-generation: once a dozen tokens' pairs were served. A request can end first where the volunteers were still
    // on probation or missing deadlines (a busy CI machine): its tokens are checked and another one starts, bounded.
    let since = await pairOutcomes(url, hub.model);
    let started = 0;
    let first: Promise<number[]> | undefined;
    for (let attempt = 1; attempt <= CHURN_ATTEMPTS && !first; attempt++) {
      since = await pairOutcomes(url, hub.model);
      let done = false;
      started = Date.now();
      const request = completionIds(url, hub.model, E2E_PROMPT, CHURN_TOKENS, m.ban).finally(() => {
        done = true;
      });
      await until('a dozen tokens served', 120_000, async () =>
        done || ((await pairOutcomes(url, hub?.model ?? '')).served as number) - (since.served as number) >= 12 * perToken
          ? true
          : undefined,
      );
      if (!done) {
        first = request;
        break;
      }
      const served = ((await pairOutcomes(url, hub.model)).served as number) - (since.served as number);
      assert.deepEqual(await request, want, `request ${attempt}, done before the kill, gives the coordinator's tokens`);
      console.log(`[churn] request ${attempt} ended before a dozen tokens' pairs were served (${served} pairs): another`);
    }
    assert.ok(first, `a request was still generating when the volunteers died (of ${CHURN_ATTEMPTS} tried)`);
    const devicesAtKill = await (gpuTab.tab as VolunteerTab).page.evaluate(
      () => (window as unknown as { __xsDevices: GPUDevice[] }).__xsDevices.length,
    );
    assert.ok(devicesAtKill > 0, 'the GPU tab requested a device');
    const killedAt = Date.now();
    await Promise.all(victims.map(killOne));

    // Each dead worker leaves the dispatch map; the GPU tab rebuilds instead and is checked below.
    const dead = victims.filter((v) => v.kill !== 'tab GPU device lost');
    const leftAfter = new Map<string, number>();
    while (leftAfter.size < dead.length && Date.now() - killedAt < 3 * LEAVE_BOUND_MS) {
      const listed = new Set((await dispatchMap(url, hub.model)).map((r) => r.worker_id));
      for (const v of dead) if (!listed.has(v.workerId) && !leftAfter.has(v.name)) leftAfter.set(v.name, Date.now() - killedAt);
      await new Promise((r) => setTimeout(r, 100));
    }
    const got = await first;
    const firstMs = Date.now() - started;
    const o = Object.fromEntries(Object.entries(await pairOutcomes(url, hub.model)).map(([k, n]) => [k, n - (since[k] ?? 0)]));
    const leaves = dead.map((v) => `${v.kill} ${leftAfter.has(v.name) ? `${leftAfter.get(v.name)} ms` : 'still listed'}`).join(', ');
    const line = `request done ${(firstMs / 1000).toFixed(1)} s after its start (volunteers killed at ${((killedAt - started) / 1000).toFixed(1)} s); pairs served ${o.served}, fallback ${o.fallback}, late ${o.late}, rejected ${o.rejected}; left the map after: ${leaves}`;
    console.log(`[churn] ${line}`);
    assert.deepEqual(got, want, `the request in flight gives the coordinator's tokens (${line})`);
    for (const v of dead) {
      const ms = leftAfter.get(v.name);
      assert.ok(
        ms !== undefined && ms <= LEAVE_BOUND_MS,
        `${v.name} (${v.kill}) left the dispatch map within ${LEAVE_BOUND_MS} ms: ${line}`,
      );
    }

    // The tab whose GPU device was lost builds its engine again on a new device and serves.
    const gpu = gpuTab.tab as VolunteerTab;
    const devices = (): Promise<number> => gpu.page.evaluate(() => (window as unknown as { __xsDevices: GPUDevice[] }).__xsDevices.length);
    await until('the GPU tab on a new device, serving again', SERVE_MS, async () =>
      (await devices()) > devicesAtKill && (await gpu.title()).startsWith('Serving with ') ? true : undefined,
    );
    await until('the GPU tab in the dispatch map', 30_000, async () =>
      (await dispatchMap(url, hub?.model ?? '')).some((r) => r.worker_id === gpuTab.workerId && r.state !== 'released') ? true : undefined,
    );
    // The hub shows the backend of the engine serving now (the rebuild says `loaded` again), not the first one's.
    const rebuiltOn = (await gpu.title()).startsWith('Serving with WebGPU') ? 'webgpu' : 'wasm';
    await until(`the hub showing the GPU tab's rebuilt backend (${rebuiltOn})`, 10_000, async () =>
      (await workersPage(url)).rows.find((r) => r.id === gpuTab.workerId)?.backend === rebuiltOn ? true : undefined,
    );

    // The cut network comes back: the tab notices the hub's silence itself (its own idle timeout), dials again and is
    // welcomed. By then the survivors may hold every wanted slice between them (the market hands the dead ones' layers
    // to volunteers with room, and rebalancing gives a slice only to a volunteer at least half as fast as its holder,
    // market/rebalance.ts): one more replica per layer is then asked for, and the market hands the rejoined tab a slice.
    const offline = victims.find((v) => v.kill === 'tab offline') as Volunteer;
    const offlineTab = offline.tab as VolunteerTab;
    await offlineTab.context.setOffline(false);
    const welcomedMs = await until('the offline tab welcomed back', SERVE_MS, async () =>
      /^(Waiting for demand|Serving with )/.test(await offlineTab.title()) ? Date.now() - killedAt : undefined,
    );
    const inMap = async (): Promise<boolean> => (await dispatchMap(url, hub?.model ?? '')).some((r) => r.worker_id === offline.workerId);
    if (!(await inMap())) await setTargetBase(url, ADMIN_TOKEN, TARGET_BASE + 1);
    const rejoinedMs = await until('the offline tab back in the dispatch map', SERVE_MS, async () =>
      (await inMap()) ? Date.now() - killedAt : undefined,
    );
    console.log(`[churn] the offline tab was welcomed back ${welcomedMs} ms after its network was cut`);
    console.log(`[churn] the offline tab served again ${rejoinedMs} ms after its network was cut`);

    // The survivors (and the rebuilt tab) go on serving: the next request's pairs are served in every layer.
    // Workers that missed deadlines in the churn may be benched for a while (their probes back off): a few requests,
    // each with the coordinator's tokens, until both layers' live volunteers have served again.
    const before = await workersPage(url);
    const servedBefore = new Map(before.rows.map((r) => [r.id, r.pairsServed]));
    const live = [...survivors, gpuTab, offline];
    let gained = (_: Volunteer): number => 0;
    let standing = (_: Volunteer): string => '';
    // The layers each holds now: volunteers hold several slices (issue 27), and the market hands the dead ones' layers
    // to survivors with room, so a layer may be served by one that held another at the start.
    let holds = (v: Volunteer): number[] => [v.layer];
    let requests = 0;
    const layerServed = (layer: number): boolean => live.filter((v) => holds(v).includes(layer)).some((v) => gained(v) > 0);
    const look = async (): Promise<void> => {
      const rows = (await workersPage(url)).rows;
      const map = await dispatchMap(url, hub?.model ?? '');
      holds = (v) => map.filter((r) => r.worker_id === v.workerId).map((r) => r.layer);
      gained = (v) => (rows.find((r) => r.id === v.workerId)?.pairsServed ?? 0) - (servedBefore.get(v.workerId) ?? 0);
      standing = (v) => {
        const r = rows.find((x) => x.id === v.workerId);
        return r ? `${r.state}${r.benched ? ' benched' : ''}, ${r.latencyMs ?? '?'} ms, slice ${JSON.stringify(r.slice)}` : 'not listed';
      };
    };
    while (requests < 5 && !moe.every(layerServed)) {
      const next = await completionIds(url, hub.model, E2E_PROMPT, E2E_TOKENS, m.ban);
      requests++;
      assert.deepEqual(next, want.slice(0, E2E_TOKENS), `request ${requests} after the churn gives the coordinator’s tokens`);
      // The workers table is sampled about once a second: read it until the request's pairs show, for 1.5 s at most.
      const readUntil = Date.now() + 1500;
      do {
        await new Promise((r) => setTimeout(r, 250));
        await look();
      } while (!moe.every(layerServed) && Date.now() < readUntil);
    }
    const summary = live
      .map((v) => `${v.name} (layer ${v.layer}, now ${JSON.stringify(holds(v))}) +${gained(v)} [${standing(v)}]`)
      .join(', ');
    console.log(`[churn] after ${requests} more request(s): ${summary}; GPU tab: ${await gpu.title()}`);
    for (const layer of moe) assert.ok(layerServed(layer), `layer ${layer}'s live volunteers serve again: ${summary}`);
    for (const v of live) if (v.tab) assert.deepEqual(v.tab.errors, [], `${v.name}: no script errors`);
  } finally {
    // All at once: stop() waits up to 5 s for its process's exit, and for the SIGKILLed one (its exit already passed) all 5.
    await Promise.all(vs.map(async (v) => Promise.all([v.tab?.close(), v.proc?.stop()])));
    await hub?.close();
  }
});
