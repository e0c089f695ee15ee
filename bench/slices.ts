/**
 * Slices from peers vs from the hub (docs/peers.md): N volunteers (headless Chromium tabs, each a fresh context, all
 * pressing Join at once) are assigned the same slice of a one-MoE-layer model; the bench measures the hub's slice
 * egress (bytes its shard server streamed) and each tab's time from Join to "download done" and to serving, once with
 * volunteers passing the slice to each other (the hub's PeerJS server on) and once without (every byte from the hub).
 * Numbers printed and written to .cache/bench/slices.json, not asserted.
 *
 * The hub's uplink is simulated: every byte its shard server streams passes one shared token bucket of `--hub-mib-s`
 * (default 8 MiB/s, a 64 Mbit/s uplink), the limit peers are meant to lift; loopback alone would make the hub
 * infinitely fast. Volunteers on one address would hit the hub's per-address download cap, which real volunteers on
 * their own addresses do not: it is raised here.
 *
 *   npm run bench:slices [-- --volunteers 8 --hub-mib-s 8 --experts 32 --chunk-kib 256]
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { Browser, Page } from 'playwright-core';
import { buildApp } from '../hub/app.ts';
import type { SliceTransfer } from '../protocol/dashboard.ts';
import { defaultConfig, Hub } from '../hub/hub.ts';
import { DEFAULT_SATURATION } from '../hub/market/saturation.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { launchChromium } from '../harness/browser.ts';
import { testModel } from '../harness/models.ts';
import { buildPages } from '../harness/pages-build.ts';

const { values: args } = parseArgs({
  options: {
    volunteers: { type: 'string', default: '8' },
    'hub-mib-s': { type: 'string', default: '8' },
    experts: { type: 'string', default: '32' },
    'chunk-kib': { type: 'string', default: '256' },
  },
});
const N = Number(args.volunteers);
const HUB_BYTES_PER_S = Number(args['hub-mib-s']) * 2 ** 20;
const CHUNK_BYTES = Number(args['chunk-kib']) * 1024;
const MIB = 2 ** 20;
const SERVE_MS = 300_000;

/** One MoE layer (deepseek's layer 0 is dense): every volunteer is given layer 1, all experts. */
const CONFIG = {
  arch: 'deepseek' as const,
  layers: 2,
  nEmbd: 256,
  ff: 256,
  sharedFf: 256,
  nExpert: Number(args.experts),
  nExpertUsed: 2,
  type: GGMLType.Q8_0,
  seed: 51,
};

/** Every byte streamed by the shard server passes one bucket: the hub's uplink. */
function throttleShards(hub: Hub, bytesPerS: number): { streamed: () => number } {
  const server = hub.shardServer();
  const body = server.body.bind(server);
  let streamed = 0;
  let tokens = 0;
  let at = Date.now();
  const take = async (n: number): Promise<void> => {
    for (;;) {
      const t = Date.now();
      tokens = Math.min(bytesPerS / 10, tokens + ((t - at) / 1000) * bytesPerS);
      at = t;
      if (tokens >= n || tokens >= bytesPerS / 10) {
        tokens -= n;
        return;
      }
      await new Promise((r) => setTimeout(r, Math.ceil(((n - tokens) / bytesPerS) * 1000)));
    }
  };
  server.body = (shard, from, to) => {
    const source = body(shard, from, to);
    return Readable.from(
      (async function* () {
        for await (const piece of source as AsyncIterable<Uint8Array>) {
          for (let o = 0; o < piece.length; o += 64 * 1024) {
            const part = piece.subarray(o, Math.min(piece.length, o + 64 * 1024));
            await take(part.length);
            streamed += part.length;
            yield part;
          }
        }
      })(),
      { objectMode: false },
    );
  };
  return { streamed: () => streamed };
}

/** Title changes with their time, recorded in the page (as a string: tsx's helpers do not exist there). */
const RECORD = `{
  const seen = (window.titles = []);
  const note = () => {
    const t = document.querySelector('#state-title')?.textContent?.trim() ?? '';
    if (t && seen.at(-1)?.[1] !== t) seen.push([Date.now(), t]);
  };
  new MutationObserver(note).observe(document, { subtree: true, childList: true, characterData: true });
}`;

interface TabResult {
  downloadedS: number;
  servingS: number;
  source: string;
  /** Every headline the page showed, seconds after Join. */
  titles: Array<[number, string]>;
}

interface RunResult {
  mode: string;
  sliceBytes: number;
  hubSliceBytes: number;
  reported: SliceTransfer | undefined;
  tabs: TabResult[];
}

async function run(browser: Browser, pagesDir: string, modelPath: string, peers: boolean): Promise<RunResult> {
  const config = defaultConfig({
    port: 0,
    stateDir: ':memory:',
    models: [{ path: modelPath, name: 'm' }],
    dispatchMode: 'always', // wants its base replicas at rest: every volunteer is recruited at once
    slots: 1,
    // The production channel timings: 8 tabs starting their engines at once on a small machine block their pages for
    // seconds, which 1 s heartbeats would take for a dead channel.
    channel: {},
    saturation: { ...DEFAULT_SATURATION, targetBase: N },
    peers: { enabled: peers, chunkBytes: CHUNK_BYTES },
  });
  const hub = new Hub(config);
  await hub.load();
  const app = await buildApp(hub, { dir: pagesDir });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  await hub.start();
  hub.shardServer().limits.perIp = 1000; // N volunteers on one address stand for N addresses
  // The slice's digest and chunk list are computed before the clock starts (one read each, not egress).
  const shard = await hub.shardServer().open({ model: 'm', layer: 1, expertBegin: 0, expertEnd: CONFIG.nExpert });
  await hub.chunkLists().of(shard);
  const meter = throttleShards(hub, HUB_BYTES_PER_S);
  const contexts = await Promise.all(Array.from({ length: N }, () => browser.newContext({ viewport: { width: 1280, height: 900 } })));
  try {
    const pages: Page[] = [];
    for (const c of contexts) {
      await c.addInitScript(RECORD);
      const page = await c.newPage();
      await page.goto(`${url}/`);
      await page.getByLabel('Compute with').selectOption('wasm');
      pages.push(page);
    }
    const t0 = Date.now();
    await Promise.all(pages.map((p) => p.getByRole('button', { name: 'Join' }).click()));
    await Promise.all(
      pages.map((p) =>
        p.waitForFunction(() => /^Serving with /.test(document.querySelector('#state-title')?.textContent ?? ''), null, {
          timeout: SERVE_MS,
          polling: 250,
        }),
      ),
    ).catch(async (e: unknown) => {
      const seen = await Promise.all(pages.map((p) => p.evaluate(() => JSON.stringify((window as unknown as { titles: unknown }).titles))));
      throw new Error(`not every tab served within ${SERVE_MS / 1000} s: ${seen.join('\n')} (${e})`);
    });
    const tabs: TabResult[] = [];
    for (const p of pages) {
      const titles = await p.evaluate(() => (window as unknown as { titles: Array<[number, string]> }).titles);
      const at = (re: RegExp): number => (titles.find(([, t]) => re.test(t))?.[0] ?? Number.NaN) - t0;
      const source = (
        (await p
          .locator('#stat-source')
          .textContent()
          .catch(() => '')) ?? ''
      ).trim();
      tabs.push({
        downloadedS: at(/^Starting the compute engine/) / 1000,
        servingS: at(/^Serving with /) / 1000,
        source,
        titles: titles.map(([t, text]) => [Math.round(t - t0) / 1000, text]),
      });
    }
    const reported = ((await (await fetch(`${url}/api/peers/slices`)).json()) as { slices: SliceTransfer[] }).slices[0];
    return { mode: peers ? 'with peers' : 'hub only', sliceBytes: shard.length, hubSliceBytes: meter.streamed(), reported, tabs };
  } finally {
    for (const c of contexts) await c.close().catch(() => {});
    await app.close();
    await hub.stop();
  }
}

const pct = (xs: number[], q: number): number => {
  const s = [...xs].filter(Number.isFinite).sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
};

async function main(): Promise<void> {
  const model = await testModel(CONFIG);
  const pagesDir = await buildPages('production');
  const browser = await launchChromium();
  const results: RunResult[] = [];
  try {
    for (const peers of [false, true]) {
      const r = await run(browser, pagesDir, model.path, peers);
      results.push(r);
      const serving = r.tabs.map((t) => t.servingS);
      const downloaded = r.tabs.map((t) => t.downloadedS);
      console.log(
        `[bench:slices] ${r.mode}: ${N} volunteers, slice ${(r.sliceBytes / MIB).toFixed(1)} MiB, hub uplink ${args['hub-mib-s']} MiB/s → ` +
          `hub slice egress ${(r.hubSliceBytes / MIB).toFixed(1)} MiB (${(r.hubSliceBytes / r.sliceBytes).toFixed(2)} slices); ` +
          `download done p50 ${pct(downloaded, 0.5).toFixed(1)} s, last ${Math.max(...downloaded).toFixed(1)} s; ` +
          `serving p50 ${pct(serving, 0.5).toFixed(1)} s, last ${Math.max(...serving).toFixed(1)} s`,
      );
      for (const [i, t] of r.tabs.entries())
        console.log(`  tab ${i + 1}: ${t.source || '—'}; downloaded ${t.downloadedS.toFixed(1)} s, serving ${t.servingS.toFixed(1)} s`);
    }
  } finally {
    await browser.close();
    rmSync(pagesDir, { recursive: true, force: true });
  }
  const dir = join(fileURLToPath(new URL('../', import.meta.url)), '.cache/bench');
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'slices.json'),
    `${JSON.stringify({ at: new Date().toISOString(), volunteers: N, hubMiBPerS: Number(args['hub-mib-s']), chunkBytes: CHUNK_BYTES, results }, null, 2)}\n`,
  );
}

await main();
