/**
 * The volunteer page's slice cache (volunteer/shard-cache.ts `BrowserShardCache`, the Cache API keyed by digest) in
 * real headless Chromium: a hub (with its coordinator, `--dispatch always`, target 1) serving the production build of
 * the page; one browser context joins through the page's controls, is assigned a slice, downloads it from
 * `/api/expert-shard` and serves. Then the SAME context reloads the page (the Cache API and sessionStorage live on)
 * and joins again. The client asks its cache before any network (volunteer/client.ts `load`), so the design promises
 * no request for the slice at all, not even a HEAD or a conditional GET.
 *
 * Asserted: the first join downloads the slice (the hub's shard server streamed its bytes once) and serves; after
 * the reload the tab keeps its worker id, is assigned the same slice (same digest: the market's ranking is
 * deterministic and the reloaded connection replaces the old one) and serves again, with no request of any method to
 * `/api/expert-shard` from the context and no bytes streamed by the shard server; no script error on either load.
 * What the page showed on the way (its headlines, recorded as they changed) is logged: the `fromCache` download
 * state lasts no time at all (the client moves on to `starting` in the same task), so the page's "Loading the slice
 * from this browser's cache" line is not asserted.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import type { Browser, Page } from 'playwright-core';
import {
  joinVolunteerPage,
  launchChromium,
  PAGE_WORKER_ID_KEY,
  waitServing as waitForServing,
  type VolunteerTab,
} from '../../harness/browser.ts';
import { testModel } from '../../harness/models.ts';
import { buildPages } from '../../harness/pages-build.ts';
import { DEEPSEEK_Q8, moeLayersOf, startSwarmHub, until, waitForCoverage, type SwarmHub } from '../../harness/swarm.ts';

/** From Join to serving: onnxruntime-web's wasm on two busy cores. */
const SERVE_MS = 90_000;
const SHARD_PATH = '/api/expert-shard';
/** `BrowserShardCache`'s cache (volunteer/shard-cache.ts). */
const CACHE_NAME = 'expertswarm-shards-v1';

let pagesDir = '';
let browser: Browser | undefined;

before(async () => {
  pagesDir = await buildPages('production');
  browser = await launchChromium();
});

after(async () => {
  await browser?.close().catch(() => {});
  if (pagesDir) rmSync(pagesDir, { recursive: true, force: true });
});

/**
 * Records every `#state-title` the page shows from now on (a MutationObserver; read back with `headlines`). A string,
 * not a function: tsx would wrap a named function for its name with a helper the page does not have.
 */
const RECORD_HEADLINES = `{
  const seen = (window.headlines = []);
  const note = () => {
    const t = document.querySelector('#state-title')?.textContent?.trim() ?? '';
    if (t && seen.at(-1) !== t) seen.push(t);
  };
  new MutationObserver(note).observe(document.body, { subtree: true, childList: true, characterData: true });
  note();
}`;

const headlines = (page: Page): Promise<string[]> => page.evaluate(() => (window as unknown as { headlines: string[] }).headlines);

const waitServing = (tab: VolunteerTab, what: string): Promise<string> => waitForServing(tab, what, SERVE_MS);

test('a reloaded volunteer page serves its slice from the Cache API: no second shard request', { timeout: 300_000 }, async () => {
  const m = await testModel(DEEPSEEK_Q8);
  // The tab holds every MoE layer (a slice each, issue 27): both are downloaded once, and neither after the reload.
  const moe = moeLayersOf(DEEPSEEK_Q8);
  let hub: SwarmHub | undefined;
  let tab: VolunteerTab | undefined;
  try {
    hub = await startSwarmHub(m.path, 'always', {}, 'm', { dir: pagesDir });
    // The hub's side: every body its shard server streams (a GET, full or ranged; HEAD and 304 stream none).
    const shards = hub.hub.shardServer();
    const streamed: string[] = [];
    const body = shards.body.bind(shards);
    shards.body = (shard, from, to) => {
      streamed.push(`${shard.digest} [${from}, ${to})`);
      return body(shard, from, to);
    };

    const t0 = Date.now();
    tab = await joinVolunteerPage(browser as Browser, hub.url, 'wasm');
    const joined = tab;
    // The page's side, for the whole life of the context (reloads included): every request to the shard path.
    const requests: string[] = [];
    joined.context.on('request', (r) => {
      if (new URL(r.url()).pathname === SHARD_PATH) requests.push(`${r.method()} ${r.url()}`);
    });
    const first = await waitServing(joined, 'the first join');
    const rows = await waitForCoverage(hub.url, hub.model, moe, DEEPSEEK_Q8.nExpert, 1, SERVE_MS);
    const slice = rows
      .filter((r) => r.worker_id === joined.workerId)
      .map((r) => [r.layer, ...r.experts])
      .sort((a, b) => (a[0] as number) - (b[0] as number));
    assert.equal(slice.length, moe.length, `the tab holds a slice of each MoE layer: ${JSON.stringify(rows)}`);
    // The map lists a range from its assignment on (the coverage store reserves it while it loads), so the page may
    // serve its first slice, with the second listed, before it has asked for the second: wait for both in its cache
    // (each put there once downloaded and checked), then count what the shard server streamed.
    const cached = await until('the page keeping each slice in the Cache API', SERVE_MS, async () => {
      const keys = await joined.page.evaluate(async (name) => {
        const keys = await (await caches.open(name)).keys();
        return keys.map((r) => new URL(r.url).pathname);
      }, CACHE_NAME);
      return keys.length >= moe.length ? keys : undefined;
    });
    assert.equal(streamed.length, moe.length, `the first join downloaded each slice once: ${JSON.stringify(streamed)}`);
    const digests = streamed.map((x) => x.split(' ')[0]).sort();
    assert.deepEqual(
      cached.sort(),
      digests.map((d) => `/__expertswarm_shard/sha256:${d}`),
      'the page keeps the slices in the Cache API by their digests',
    );
    const firstMs = Date.now() - t0;

    const requestsBefore = requests.length;
    const t1 = Date.now();
    await joined.page.reload();
    await joined.page.evaluate(RECORD_HEADLINES);
    const workerId = await joined.page.evaluate((key) => sessionStorage.getItem(key), PAGE_WORKER_ID_KEY);
    assert.equal(workerId, joined.workerId, 'the reloaded tab keeps its worker id');
    await joined.page.getByLabel('Compute with').selectOption('wasm');
    await joined.page.getByRole('button', { name: 'Join' }).click();
    const second = await waitServing(joined, 'the join after the reload');
    const again = (await waitForCoverage(hub.url, hub.model, moe, DEEPSEEK_Q8.nExpert, 1, SERVE_MS))
      .filter((r) => r.worker_id === joined.workerId)
      .map((r) => [r.layer, ...r.experts])
      .sort((a, b) => (a[0] as number) - (b[0] as number));
    const shown = await headlines(joined.page);
    console.log(
      `# first join: "${first}" after ${(firstMs / 1000).toFixed(1)} s (${JSON.stringify(streamed)}); after the reload: "${second}" after ${((Date.now() - t1) / 1000).toFixed(1)} s; headlines ${JSON.stringify(shown)}`,
    );
    assert.deepEqual(again, slice, 'the reloaded tab serves the same slices');
    assert.deepEqual(requests.slice(requestsBefore), [], 'no request for the slice after the reload');
    assert.equal(streamed.length, moe.length, `the shard server streamed nothing after the reload: ${JSON.stringify(streamed)}`);
    assert.ok(
      !shown.some((h) => h.startsWith('Downloading the slice')),
      `the page never said it was downloading after the reload: ${JSON.stringify(shown)}`,
    );
    const detail = (await joined.page.locator('#state-detail').textContent()) ?? '';
    assert.match(detail, /from this browser’s cache: nothing downloaded/, `the serving page says its slice came from the cache: ${detail}`);
    assert.deepEqual(joined.errors, [], 'no script errors');
  } finally {
    await tab?.close();
    await hub?.close();
  }
});
