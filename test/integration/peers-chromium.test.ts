/**
 * Slices passed between volunteers (docs/peers.md), end to end with real parts on loopback: a hub with its real
 * coordinator serving a production build of the volunteer page, its PeerJS signalling server, and headless Chromium
 * tabs (each a fresh browser context: its own key, worker id and slice cache) joined with the page's Join button. The
 * model has one MoE layer, so every tab is assigned the same slice (3.3 MiB, 128 KiB chunks here).
 *
 * 1. Three tabs: the first downloads the slice from the hub; the next two take ≥ 80% of their bytes from peers over
 *    WebRTC data channels; all three hold the same digest, and each alone (the others paused) serves 24 tokens
 *    identical to the coordinator alone (`--dispatch off`).
 * 2. A tab whose data channel corrupts every piece it sends (RTCDataChannel.send patched in that tab) is detected by
 *    the next tab's per-chunk hashes, dropped, reported to the hub (event `peer-report`, no longer listed), and that
 *    tab's slice still completes; a tab without WebRTC (RTCPeerConnection deleted) and a headless Node volunteer
 *    (no WebRTC at all) take the slice from the hub over HTTP and serve.
 *
 * WebRTC over loopback needed no STUN server (`iceServers: []`) and no Chromium flag: with mDNS host-candidate
 * obfuscation left on, connections open through peer-reflexive candidates; `--disable-quic` does not touch WebRTC.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import type { Browser } from 'playwright-core';
import { DEFAULT_SATURATION } from '../../hub/market/saturation.ts';
import type { SliceTransfer } from '../../protocol/dashboard.ts';
import { joinVolunteerPage, launchChromium, waitServing as waitForServing, type VolunteerTab } from '../../harness/browser.ts';
import { ONE_MOE_LAYER, testModel, type TestModel } from '../../harness/models.ts';
import { buildPages } from '../../harness/pages-build.ts';
import {
  baselineIds,
  completionIds,
  pairOutcomes,
  spawnVolunteer,
  startSwarmHub,
  until,
  type HeadlessVolunteer,
  type SwarmHub,
} from '../../harness/swarm.ts';

const CHUNK_BYTES = 128 * 1024;
const TOKENS = 24;
const SERVE_MS = 180_000;

let pagesDir = '';
let browser: Browser | undefined;
let model: TestModel | undefined;
let baseline: Promise<number[]> | undefined;

before(async () => {
  pagesDir = await buildPages('production');
  browser = await launchChromium();
  model = await testModel(ONE_MOE_LAYER);
});

after(async () => {
  await browser?.close().catch(() => {});
  if (pagesDir) rmSync(pagesDir, { recursive: true, force: true });
});

function want(): Promise<number[]> {
  baseline ??= baselineIds(model as TestModel, TOKENS);
  return baseline;
}

/** A joined tab of the hub's page (joinVolunteerPage), named for messages. */
interface Tab extends VolunteerTab {
  name: string;
}

/** A fresh context on the hub's page, joined on wasm (the quickest engine to start here); `init` runs before the page. */
async function openTab(hub: SwarmHub, name: string, init?: () => void): Promise<Tab> {
  return { ...(await joinVolunteerPage(browser as Browser, hub.url, 'wasm', undefined, init)), name };
}

const waitServing = (t: Tab): Promise<string> => waitForServing(t, t.name, SERVE_MS);

/** The page's own account of where its slice came from: the share from peers, in percent. */
async function peerShare(t: Tab): Promise<{ percent: number; text: string }> {
  const text = ((await t.page.locator('#stat-source').textContent({ timeout: 10_000 })) ?? '').trim();
  const m = /^(\d+)% from other volunteers/.exec(text);
  return { percent: m ? Number(m[1]) : 0, text };
}

async function slices(hub: SwarmHub): Promise<SliceTransfer[]> {
  return ((await (await fetch(`${hub.url}/api/peers/slices`)).json()) as { slices: SliceTransfer[] }).slices;
}

async function events(hub: SwarmHub, kind: string): Promise<Array<{ detail: string }>> {
  return ((await (await fetch(`${hub.url}/api/events?kind=${kind}`)).json()) as { events: Array<{ detail: string }> }).events;
}

/** Pauses (or resumes) a tab with its own button. */
async function setPaused(t: Tab, paused: boolean): Promise<void> {
  await t.page.getByRole('button', { name: paused ? 'Pause' : 'Resume' }).click();
  await t.page.waitForFunction(
    (p) => (document.querySelector('#state-title')?.textContent ?? '').startsWith(p ? 'Paused' : 'Serving'),
    paused,
  );
}

async function closeAll(tabs: Tab[], hub: SwarmHub | undefined, vols: HeadlessVolunteer[] = []): Promise<void> {
  for (const t of tabs) await t.context.close().catch(() => {});
  for (const v of vols) await v.stop();
  await hub?.close();
}

test('three tabs: the first from the hub, the next two ≥ 80% from peers, one digest, each serves identical tokens', {
  timeout: 600_000,
}, async () => {
  const m = model as TestModel;
  const expected = await want();
  const tabs: Tab[] = [];
  let hub: SwarmHub | undefined;
  try {
    hub = await startSwarmHub(
      m.path,
      'always',
      { saturation: { ...DEFAULT_SATURATION, targetBase: 3 }, peers: { chunkBytes: CHUNK_BYTES } },
      'm',
      { dir: pagesDir },
    );
    const t0 = Date.now();
    tabs.push(await openTab(hub, 'tab 1'));
    await waitServing(tabs[0] as Tab);
    const first = await peerShare(tabs[0] as Tab);
    assert.equal(first.percent, 0, `the first tab had nobody to ask: ${first.text}`);
    const t1 = Date.now();
    tabs.push(await openTab(hub, 'tab 2'), await openTab(hub, 'tab 3'));
    for (const t of tabs.slice(1)) await waitServing(t);
    const t2 = Date.now();
    const shares = await Promise.all(tabs.map(peerShare));
    const s = await slices(hub);
    const line = `${tabs.map((t, i) => `${t.name}: ${shares[i]?.text}`).join('; ')}; hub counters ${JSON.stringify(s)}; first tab serving after ${((t1 - t0) / 1000).toFixed(1)} s, the next two ${((t2 - t1) / 1000).toFixed(1)} s later`;
    console.log(`[peers-chromium] three tabs: ${line}`);
    for (const [i, t] of tabs.slice(1).entries()) {
      assert.ok((shares[i + 1]?.percent ?? 0) >= 80, `${t.name} took ≥ 80% of its bytes from peers: ${line}`);
    }
    assert.equal(s.length, 1, 'one slice digest for all three');
    assert.equal(s[0]?.loads, 3);
    assert.equal(s[0]?.holders, 3);
    assert.ok((s[0]?.fromPeers ?? 0) >= 1.6 * (s[0]?.bytes ?? 0), `the hub counted the peers' bytes: ${line}`);

    // Each tab alone (the other two paused) serves the layer: tokens identical to the coordinator alone.
    for (const alone of tabs) {
      for (const t of tabs) if (t !== alone) await setPaused(t, true);
      await new Promise((r) => setTimeout(r, 500)); // the hub takes the pauses in
      const since = await pairOutcomes(hub.url, hub.model);
      const got = await completionIds(hub.url, hub.model, 'The swarm serves', TOKENS, m.ban);
      const now = await pairOutcomes(hub.url, hub.model);
      const served = (now.served as number) - (since.served as number);
      const routed = served + (now.fallback as number) - (since.fallback as number);
      console.log(`[peers-chromium] ${alone.name} alone: ${served}/${routed} pairs served`);
      assert.deepEqual(got, expected, `${alone.name} serves with tokens identical to --dispatch off`);
      assert.ok(served >= 0.9 * routed && served > 0, `${alone.name} served the pairs: ${served}/${routed}`);
      for (const t of tabs) if (t !== alone) await setPaused(t, false);
    }
    for (const t of tabs) assert.deepEqual(t.errors, [], `${t.name}: no script errors`);
  } finally {
    await closeAll(tabs, hub);
  }
});

test('a corrupting peer is dropped and reported and the slice completes; without WebRTC (tab, Node) it comes over HTTP', {
  timeout: 600_000,
}, async () => {
  const m = model as TestModel;
  const tabs: Tab[] = [];
  const vols: HeadlessVolunteer[] = [];
  let hub: SwarmHub | undefined;
  try {
    hub = await startSwarmHub(
      m.path,
      'always',
      { saturation: { ...DEFAULT_SATURATION, targetBase: 5 }, peers: { chunkBytes: CHUNK_BYTES } },
      'm',
      { dir: pagesDir },
    );
    const honest = await openTab(hub, 'honest');
    tabs.push(honest);
    await waitServing(honest);
    // This tab's data channels flip a byte in every piece of a chunk they send (kind 4 of the peer protocol).
    const liar = await openTab(hub, 'liar', () => {
      const send = RTCDataChannel.prototype.send as (this: RTCDataChannel, data: unknown) => void;
      RTCDataChannel.prototype.send = function (this: RTCDataChannel, data: unknown) {
        if (ArrayBuffer.isView(data) && data.byteLength > 40) {
          const b = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
          if (b[5] === 4) {
            const c = b.slice();
            c[40] = (c[40] as number) ^ 0xff;
            send.call(this, c);
            return;
          }
        }
        send.call(this, data);
      } as typeof RTCDataChannel.prototype.send;
    });
    tabs.push(liar);
    await waitServing(liar);
    const victim = await openTab(hub, 'victim');
    tabs.push(victim);
    await waitServing(victim);
    const reports = await until('a peer-report event', 30_000, async () => {
      const e = await events(hub as SwarmHub, 'peer-report');
      return e.length > 0 ? e : undefined;
    });
    const share = await peerShare(victim);
    console.log(`[peers-chromium] corrupting peer: ${reports.map((r) => r.detail).join(' | ')}; victim: ${share.text}`);
    assert.equal(reports.length, 1, 'one report');
    assert.match(
      reports[0]?.detail ?? '',
      new RegExp(`^${victim.workerId} reported peer ${liar.workerId} \\(BAD_CHUNK, chunk \\d+: chunk \\d+ does not match its sha256`),
    );
    const [s] = await slices(hub);
    assert.equal(s?.badPeers, 1);
    assert.equal(s?.holders, 3, 'the victim loaded the slice: its digest checked before loading');

    // No WebRTC in this tab: the client never opens a peer connection and downloads over HTTP.
    const plain = await openTab(hub, 'no WebRTC', () => {
      const w = window as unknown as Record<string, unknown>;
      delete w.RTCPeerConnection;
      delete w.webkitRTCPeerConnection;
      delete w.RTCDataChannel;
    });
    tabs.push(plain);
    await waitServing(plain);
    const plainShare = await peerShare(plain);
    assert.match(plainShare.text, /^all from the hub/, `the tab without WebRTC: ${plainShare.text}`);

    // A headless Node volunteer (no WebRTC at all) is assigned the same slice and loads it from the hub.
    const before = (await slices(hub))[0]?.loads ?? 0;
    vols.push(spawnVolunteer(hub.url, 'node-1', ['--backend', 'wasm']));
    await until('the Node volunteer loaded', SERVE_MS, async () => ((await slices(hub as SwarmHub))[0]?.loads ?? 0) > before || undefined);
    const [after] = await slices(hub);
    console.log(`[peers-chromium] after the plain tab and the Node volunteer: ${JSON.stringify(after)}`);
    assert.equal(after?.holders, 5);
    for (const t of tabs) assert.deepEqual(t.errors, [], `${t.name}: no script errors`);
  } finally {
    await closeAll(tabs, hub, vols);
  }
});
