/**
 * The data path over the network lab at CI size (issue 29's acceptance, docs/netlab.md): the hub (its real coordinator,
 * `--dispatch always`, a production build of the volunteer page) in the lab's hub namespace; behind the router's NAT
 *
 *   1. a Chromium tab (the page's Join button, wasm) and a headless volunteer (`expertswarm volunteer`), each in its own
 *      home on the broadband profile (30 ± 5 ms, 50 Mbit/s, 0.1% loss), serve a greedy completion: token ids equal to
 *      `--dispatch off`, both served pairs;
 *   2. then they leave, and a headless volunteer in a home on the mobile profile (80 ± 40 ms, 5 Mbit/s, 2% loss) takes
 *      every MoE layer; its link is cut for the profile's 3 s while a completion runs: the pairs in flight fall back to
 *      the coordinator (nothing is lost: the token ids are still those of `--dispatch off`), the channel survives or
 *      reconnects, the volunteer serves again (the misses bench it; a probe in time brings it back) while every
 *      completion keeps those token ids, and its wallet is credited exactly the pairs the hub counted served for it
 *      (late answers are not credited twice).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser } from 'playwright-core';
import type { WorkerRow } from '../../protocol/dashboard.ts';
import { loadIdentity } from '../../volunteer/identity.ts';
import { FileIdentityStore } from '../../volunteer/node/environment.ts';
import type { HubProcessSpec } from '../../harness/hub-process.ts';
import { joinVolunteerPage, type VolunteerTab, waitServing } from '../../harness/browser.ts';
import { testModel } from '../../harness/models.ts';
import { createLab, HUB_ADDRESS, type Lab } from '../../harness/netlab.ts';
import { launchChromiumIn } from '../../harness/netlab-browser.ts';
import { type LabHub, startLabHub, stopLabHub } from '../../harness/netlab-hub.ts';
import { PROFILES } from '../../harness/netlab-profiles.ts';
import { buildPages } from '../../harness/pages-build.ts';
import {
  baselineIds,
  completionIds,
  dispatchMap,
  E2E_PROMPT,
  moeLayersOf,
  pairOutcomes,
  QWEN_Q4K,
  TRUST_OFF,
  until,
  waitForHolders,
} from '../../harness/swarm.ts';

const BIN = fileURLToPath(new URL('../../bin/expertswarm.js', import.meta.url));
const PORT = 8080;
const HUB_URL = `http://${HUB_ADDRESS}:${PORT}`;
/** Tokens of each completion: short, every token waits for a link's round trip on each MoE layer. */
const N = 16;
/**
 * The completions after the outage: short ones, one after another until the mobile volunteer serves again. Missed
 * deadlines in the cut bench it (hub/dispatch/policy.ts): it is probed once per 5 s and leaves the bench on an answer
 * in time, so a few of these pass before it serves.
 */
const N_AFTER = 8;
const RECOVER_MS = 40_000;

interface Volunteer {
  proc: ChildProcess;
  log(): string;
  identity: string;
}

function spawnLabVolunteer(lab: Lab, home: string, dir: string, args: string[]): Volunteer {
  const identity = join(dir, `${home}.key.json`);
  const all = ['volunteer', '--hub', HUB_URL, '--worker-id', home, '--backend', 'webgpu', '--identity', identity];
  all.push('--cache', join(dir, `${home}-shards`), ...args);
  const proc = lab.spawn(home, process.execPath, [BIN, ...all]);
  let out = '';
  const keep = (d: Buffer): void => {
    out = (out + d.toString()).slice(-20_000);
  };
  proc.stdout?.on('data', keep);
  proc.stderr?.on('data', keep);
  return { proc, log: () => out, identity };
}

async function stopProc(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const gone = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
  await gone;
  clearTimeout(t);
}

interface Outcomes {
  served: number;
  fallback: number;
  late: number;
  rejected: number;
}

function outcomes(o: Record<string, number>): Outcomes {
  return { served: o.served ?? 0, fallback: o.fallback ?? 0, late: o.late ?? 0, rejected: o.rejected ?? 0 };
}

async function workers(url: string): Promise<Record<string, WorkerRow>> {
  const rows = ((await (await fetch(`${url}/api/dashboard/workers?model=m`)).json()) as { rows: WorkerRow[] }).rows;
  return Object.fromEntries(rows.map((r) => [r.id, r]));
}

test('over the lab: a tab and a headless volunteer behind NAT at broadband serve identical tokens; a mobile volunteer survives its 3 s outage', {
  timeout: 300_000,
}, async (t) => {
  const t0 = Date.now();
  const dir = mkdtempSync(join(tmpdir(), 'xs-netlab-data-'));
  let lab: Lab | undefined;
  let pagesDir: string | undefined;
  let hub: LabHub | undefined;
  let browser: Browser | undefined;
  let tab: VolunteerTab | undefined;
  const vols: Volunteer[] = [];
  const moeLayers = moeLayersOf(QWEN_Q4K);
  try {
    const m = await testModel(QWEN_Q4K);
    const [want, pages] = await Promise.all([
      baselineIds(m, N),
      buildPages('production'),
      createLab({
        homes: [
          { name: 'bb', profile: 'broadband' },
          { name: 'tab', profile: 'broadband' },
          { name: 'mob', profile: 'mobile' },
        ],
        tcpPorts: [PORT],
      }).then((l) => {
        lab = l;
      }),
    ]);
    pagesDir = pages;
    if (!lab) throw new Error('no lab');
    hub = startLabHub(lab, {
      config: {
        host: HUB_ADDRESS,
        port: PORT,
        stateDir: join(dir, 'state'),
        models: [{ path: m.path, name: 'm' }],
        dispatchMode: 'always',
        slots: 1,
        // Heartbeats every 2 s and a 10 s silence before a channel counts as dead: a 3 s outage plus the kernel's
        // retransmission backoff stays under it (the channel may also close and the volunteer reconnect: both pass).
        channel: { heartbeatMs: 2000, idleTimeoutMs: 10_000 },
        // Room for mobile's 120 ms round trips plus SwiftShader on busy cores; a frame cut by the outage waits this long.
        dispatchDeadlineMs: 1500,
        trust: TRUST_OFF,
        saturation: { targetBase: 1 } as HubProcessSpec['config']['saturation'],
      },
      pagesDir: pages,
    });
    const [launched] = await Promise.all([launchChromiumIn(lab.nsOf('tab'), [HUB_URL]), hub.ready]);
    browser = launched;
    const url = await lab.portal('hub', PORT, HUB_ADDRESS);
    const tReady = Date.now();

    // 1. A tab and a headless volunteer at broadband.
    vols.push(spawnLabVolunteer(lab, 'bb', dir, ['--max-slices', '1']));
    tab = await joinVolunteerPage(browser, HUB_URL, 'wasm');
    await waitServing(tab, 'the tab at broadband', 90_000);
    const rows = await waitForHolders(url, 'm', ['bb', tab.workerId], 90_000);
    const covered = await until('every MoE layer covered', 30_000, async () => {
      const r = await dispatchMap(url, 'm');
      return moeLayers.every((l) => r.some((x) => x.layer === l)) ? r : undefined;
    });
    t.diagnostic(
      `broadband slices: ${covered.map((r) => `${r.worker_id}: layer ${r.layer} [${r.experts}]`).join(', ')} (${rows.length} rows)`,
    );
    const tCovered = Date.now();
    const got = await completionIds(url, 'm', E2E_PROMPT, N, m.ban);
    const tBroadband = Date.now();
    assert.deepEqual(got, want, 'a tab and a headless volunteer behind NAT at broadband: the tokens of --dispatch off');
    const w1 = await workers(url);
    const o1 = await pairOutcomes(url, 'm');
    t.diagnostic(
      `broadband: pairs ${JSON.stringify(o1)}; bb ${w1.bb?.pairsServed} (${w1.bb?.latencyMs} ms), tab ${w1[tab.workerId]?.pairsServed} (${w1[tab.workerId]?.latencyMs} ms)`,
    );
    assert.ok((w1.bb?.pairsServed ?? 0) > 0, `the headless volunteer served: ${JSON.stringify(w1.bb)}`);
    assert.ok((w1[tab.workerId]?.pairsServed ?? 0) > 0, `the tab served: ${JSON.stringify(w1[tab.workerId])}`);
    assert.equal(o1.rejected, 0);

    // 2. They leave; a mobile volunteer takes every layer.
    await tab.close();
    await stopProc((vols[0] as Volunteer).proc);
    await until('the broadband volunteers gone from the dispatch map', 30_000, async () =>
      (await dispatchMap(url, 'm')).length === 0 ? true : undefined,
    );
    const mob = spawnLabVolunteer(lab, 'mob', dir, []);
    vols.push(mob);
    await until('the mobile volunteer holding every MoE layer', 120_000, async () => {
      if (mob.proc.exitCode !== null) throw new Error(`the mobile volunteer exited: ${mob.log().slice(-2000)}`);
      const r = await dispatchMap(url, 'm');
      return moeLayers.every((l) => r.some((x) => x.layer === l && x.worker_id === 'mob')) ? r : undefined;
    });
    const tMobile = Date.now();
    const before = outcomes(await pairOutcomes(url, 'm'));
    // The cut begins as the completion starts: its first layers' frames are held in the router.
    const tCut = Date.now();
    const [duringIds] = await Promise.all([completionIds(url, 'm', E2E_PROMPT, N, m.ban), lab.outage('mob')]);
    const during = outcomes(await pairOutcomes(url, 'm'));
    const afterIds: number[][] = [];
    const after = await until('the mobile volunteer serving again after its outage', RECOVER_MS, async () => {
      afterIds.push(await completionIds(url, 'm', E2E_PROMPT, N_AFTER, m.ban));
      const o = outcomes(await pairOutcomes(url, 'm'));
      return o.served > during.served ? o : undefined;
    });
    const tBack = Date.now();
    const tDone = Date.now();
    const w2 = await workers(url);
    const { wallet } = await loadIdentity(new FileIdentityStore(mob.identity));
    const credit = (await (await fetch(`${url}/api/credit?wallet=${wallet}`)).json()) as { credit_pairs: number };
    t.diagnostic(
      `mobile, ${PROFILES.mobile.outageMs} ms outage: pairs before ${JSON.stringify(before)}, after the cut completion ${JSON.stringify(during)}, ` +
        `after ${afterIds.length} more completions of ${N_AFTER} tokens (${((tBack - tCut) / 1000).toFixed(1)} s after the cut began) ${JSON.stringify(after)}; mob served ${w2.mob?.pairsServed} (latency ${w2.mob?.latencyMs} ms, benched ${w2.mob?.benched}), credit ${credit.credit_pairs}`,
    );
    t.diagnostic(
      `time: model, baseline, pages, lab, hub, browser ${((tReady - t0) / 1000).toFixed(1)} s; broadband coverage ${((tCovered - tReady) / 1000).toFixed(1)} s, ` +
        `${N} tokens ${((tBroadband - tCovered) / 1000).toFixed(1)} s; mobile coverage ${((tMobile - tBroadband) / 1000).toFixed(1)} s, ` +
        `the cut completion and those after ${((tDone - tMobile) / 1000).toFixed(1)} s`,
    );
    assert.deepEqual(duringIds, want, 'through the outage: the tokens of --dispatch off');
    for (const ids of afterIds) assert.deepEqual(ids, want.slice(0, N_AFTER), 'after the outage: the tokens of --dispatch off');
    assert.ok(
      during.fallback > before.fallback,
      `the outage held frames, their pairs computed by the coordinator: ${JSON.stringify(during)}`,
    );
    assert.ok(after.served > during.served, `the mobile volunteer serves again after the outage: ${JSON.stringify(after)}`);
    assert.equal(after.rejected, 0);
    assert.equal(w2.mob?.pairsServed, after.served - before.served, 'every pair served since the cut is the mobile volunteer’s');
    assert.equal(credit.credit_pairs, w2.mob?.pairsServed, 'the wallet credited once per pair served (late answers not credited)');
  } finally {
    await tab?.close();
    await browser?.close().catch(() => {});
    for (const v of vols) await stopProc(v.proc);
    if (hub) await stopLabHub(hub.proc);
    await lab?.close();
    if (pagesDir) rmSync(pagesDir, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  }
});
