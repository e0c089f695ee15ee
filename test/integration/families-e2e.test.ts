/**
 * The families added for issue 25 end to end through the hub, with the production trust defaults: a hub with its real
 * coordinator (linkcpp-server, `--dispatch always`) serving a production build of the volunteer page, one Chromium tab
 * (Debian's chromium, the page's Join button, WebGPU on SwiftShader) and one headless volunteer (`npx expertswarm
 * volunteer`, WebGPU on Dawn/SwiftShader) for each other routed layer; the market gives each its layer; all pass their
 * probation (20 audited items, none used) on completions that keep the token ids of the same hub with
 * `--dispatch off`; then, trusted, a 64-token greedy completion has those token ids again with ≥ 90% of its routed
 * pairs served by the volunteers, the tab among them.
 *
 * The coordinator keeps everything but the routed experts (latent attention, sigmoid routers with selection biases
 * and groups, shared experts, dense layers, Llama 4's weighting of each pair's row, the hybrids' delta-net layers);
 * the volunteers compute the expert FFN variant of each layer (gpt-oss: SwiGLU-OAI with expert biases; grok: GELU;
 * step35: the clamped SiLU, its limits from the model's metadata; deepseek4: DeepSeek-V4's clamp silu(min(g, L)) ·
 * clamp(u, −L, L), likewise (beside hyper-connections, compressed attention and a sqrt-softplus router); gemma4: GELU on fused gate/up with a down scale
 * alone, the slices carrying ones for gate and up; qwen3moe with per-expert scale tensors, a variant its file asks
 * for; announced in their hello). One model per family: Q4_K (exact in WebGPU numerics), 3 layers, loud experts;
 * the qwen3moe with per-expert scales is also a mixed-type model (issue 26): each layer's gate, up and down in a type
 * of its own, nine in all (harness/mixed-models.ts MIXED_E2E_LAYERS; mixed-model.test.ts checks its file and market).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser } from 'playwright-core';
import { joinVolunteerPage, launchChromium, waitServing, type VolunteerTab } from '../../harness/browser.ts';
import { testModel } from '../../harness/models.ts';
import { MIXED_E2E_LAYERS, testMixedModel } from '../../harness/mixed-models.ts';
import type { ExpertTypes } from '../../tools/mixed-model.ts';
import { buildPages } from '../../harness/pages-build.ts';
import {
  baselineIds,
  completionIds,
  dispatchMap,
  E2E_PROMPT,
  E2E_TOKENS,
  pairOutcomes,
  spawnVolunteer,
  startSwarmHub,
  waitForCoverage,
  waitForEveryHolder,
} from '../../harness/swarm.ts';
import { DEFAULT_TRUST } from '../../hub/dispatch/trust.ts';
import { GGMLType } from '../../gguf/quant-types.ts';
import { type ArchName, defaultConfig, planModel } from '../../tools/model-arch.ts';
import { KIN_ARCHITECTURES } from '../../tools/model-types.ts';
import { buildVocabulary } from '../../tools/tokenizer.ts';

/**
 * What `npm test` runs: one family per expert FFN variant a worker computes and per path the coordinator takes around
 * it (each 20–60 s here, so not one per family). The other families differ from these in the loader, the attention
 * and the router, all on the coordinator; their experts are plain SiLU-gated, as deepseek2's. The exactness grid
 * (expert-dispatch.test.ts) has every family in `npm test`; `npm run test:families:full` runs this file over every
 * generated family (EXPERTSWARM_FAMILIES=full).
 */
const EVERY_VARIANT: Array<{ arch: ArchName; covers: string }> = [
  { arch: 'deepseek2', covers: 'SiLU-gated, split; latent attention, sigmoid router with groups, shared experts, a dense layer' },
  { arch: 'llama4', covers: 'the router weight before the FFN (the coordinator weighs each pair row)' },
  { arch: 'gpt-oss', covers: 'SwiGLU-OAI with expert biases' },
  { arch: 'minimax-m3', covers: 'SwiGLU-OAI without biases' },
  { arch: 'grok', covers: 'GELU-gated, split' },
  { arch: 'gemma4', covers: 'GELU-gated on fused gate/up, a down scale alone' },
  { arch: 'step35', covers: 'SiLU clamped after the activation (silu_limit), per-layer limits' },
  { arch: 'deepseek4', covers: "DeepSeek-V4's clamp (swiglu_clamp)" },
  { arch: 'qwen3next', covers: 'a hybrid: delta-net layers carrying state beside the dispatched ones' },
];
/** The rest of the generated families (EXPERTSWARM_FAMILIES=full): every one SiLU-gated, split unless said. */
const MORE_FAMILIES: ArchName[] = [
  'glm4moe',
  'minimax-m2',
  'dots1',
  'ernie4_5-moe',
  'hunyuan-moe',
  'bailingmoe2',
  'qwen35moe',
  // gated delta nets beside sparse attention, low-rank hyper-connections
  'qwen4exp',
  ...KIN_ARCHITECTURES, // mistral4: SiLU-gated on fused gate/up
];
const FAMILIES: ArchName[] = [...EVERY_VARIANT.map((v) => v.arch), ...(process.env.EXPERTSWARM_FAMILIES === 'full' ? MORE_FAMILIES : [])];
/**
 * Variants a model takes from its file, not its architecture: per-expert scale tensors (on qwen3moe), always run;
 * deepseek4's hash layers (the first two layers' experts picked by token id from `ffn_gate_tid2eid`) with the full set.
 */
const FILE_VARIANTS: Array<{ name: string; arch: ArchName; extra: { expertScales?: boolean; hashLayers?: number } }> = [
  { name: 'qwen3moe with per-expert scales', arch: 'qwen3moe', extra: { expertScales: true } },
  ...(process.env.EXPERTSWARM_FAMILIES === 'full'
    ? [{ name: 'deepseek4 with hash layers', arch: 'deepseek4' as const, extra: { hashLayers: 2 } }]
    : []),
];
const N = E2E_TOKENS;
/** From Join to serving: the page's bundle, SwiftShader's shader compiles and the slice, on 2 busy cores. */
const TAB_SERVE_MS = 150_000;
const ADMIN_TOKEN = 'families-e2e-admin-token-0123456789';

/**
 * Cases whose model mixes expert types (tools/mixed-model.ts), by name: the rest of the model stays Q4_K. What npm
 * test runs of issue 26's end to end (npm run test:quant:e2e has one model per type).
 */
const MIXED_TYPES: Partial<Record<string, readonly ExpertTypes[]>> = { 'qwen3moe with per-expert scales': MIXED_E2E_LAYERS };

let pagesDir = '';
let browser: Browser | undefined;

before(async () => {
  pagesDir = await buildPages('production');
  browser = await launchChromium();
});

after(async () => {
  await browser?.close();
});

for (const { name, arch, extra } of [...FAMILIES.map((arch) => ({ name: arch as string, arch, extra: {} })), ...FILE_VARIANTS]) {
  test(`${name}: a Chromium tab and headless volunteers pass probation and serve ≥ 90% of routed pairs with the token ids of --dispatch off`, {
    timeout: 600_000,
  }, async (t) => {
    // Llama 4: top-1 routing (Scout, Maverick), MoE in layers 1 and 3 of 4 (the router weight before the FFN: the
    // coordinator weighs each pair's row, the volunteers compute the common variant).
    const llama4 = arch === 'llama4';
    const config = {
      arch,
      layers: llama4 ? 4 : 3,
      nEmbd: 256,
      ff: 256,
      sharedFf: 256,
      nExpert: 8,
      nExpertUsed: llama4 ? 1 : 2,
      type: GGMLType.Q4_K,
      seed: 33,
      expertScale: 2,
      ...extra,
    };
    const mixed = MIXED_TYPES[name];
    const m = mixed ? await testMixedModel(config, mixed) : await testModel(config);
    const moeLayers = planModel(defaultConfig(config), buildVocabulary().tokens.length).moeLayers;
    const want = await baselineIds(m);
    assert.ok(new Set(want).size >= 16, `the baseline must not collapse: ${new Set(want).size} distinct tokens`);
    const hub = await startSwarmHub(m.path, 'always', { trust: DEFAULT_TRUST, adminToken: ADMIN_TOKEN }, 'm', { dir: pagesDir });
    // The tab joins first, so the market gives it a layer; a headless volunteer takes each other one.
    let tab: VolunteerTab | undefined;
    const vols: Array<ReturnType<typeof spawnVolunteer>> = [];
    try {
      tab = await joinVolunteerPage(browser as Browser, hub.url, 'webgpu');
      await waitServing(tab, `${arch} tab`, TAB_SERVE_MS);
      for (let i = 1; i < moeLayers.length; i++) vols.push(spawnVolunteer(hub.url, `f${i}`, ['--backend', 'webgpu']));
      await waitForCoverage(hub.url, hub.model, moeLayers, config.nExpert, 1);
      // The tab holds several slices (issue 27): it may have taken more than one layer before the headless volunteers
      // came, and gives them on (REBALANCE) until each holds one — or, where rebalancing rightly keeps a slice from a
      // volunteer it reads as too slow, one more replica per layer is asked for.
      await waitForEveryHolder(hub.url, hub.model, [(tab as VolunteerTab).workerId, ...vols.map((_, i) => `f${i + 1}`)], {
        adminToken: ADMIN_TOKEN,
        base: 1,
        timeoutMs: TAB_SERVE_MS,
      });
      await waitForCoverage(hub.url, hub.model, moeLayers, config.nExpert, 1);
      // Probation: every item audited against the coordinator, none used; the tokens stay the coordinator's.
      let rounds = 0;
      for (; rounds < 6; rounds++) {
        const rows = await dispatchMap(hub.url, hub.model);
        if (rows.length > 0 && rows.every((r) => r.audits_passed >= DEFAULT_TRUST.probation)) break;
        assert.deepEqual(await completionIds(hub.url, hub.model, E2E_PROMPT, N, m.ban), want, `on probation, round ${rounds}`);
        await new Promise((r) => setTimeout(r, 300));
      }
      const rows = await dispatchMap(hub.url, hub.model);
      assert.ok(
        rows.length > 0 && rows.every((r) => r.audits_passed >= DEFAULT_TRUST.probation && r.audits === r.audits_passed),
        `every worker passed its probation, every audit passed: ${JSON.stringify(rows)}`,
      );
      const before = await pairOutcomes(hub.url, hub.model);
      const got = await completionIds(hub.url, hub.model, E2E_PROMPT, N, m.ban);
      const after = await pairOutcomes(hub.url, hub.model);
      assert.deepEqual(got, want, 'trusted volunteers: the token ids of --dispatch off');
      const d = (k: string): number => (after[k] as number) - (before[k] as number);
      const routed = d('served') + d('fallback') + d('rejected');
      assert.ok(
        routed >= N * moeLayers.length * config.nExpertUsed,
        `every routed pair is counted: ${JSON.stringify({ before, after })}; workers ${JSON.stringify(await workerRows(hub.url))}; events ${await eventLines(hub.url)}`,
      );
      assert.ok(d('served') >= 0.9 * routed, `volunteers served ${d('served')} of ${routed} routed pairs`);
      assert.equal(d('rejected'), 0);
      const tabId = (tab as VolunteerTab).workerId;
      const tabRows = rows.filter((r) => r.worker_id === tabId);
      assert.ok(tabRows.length > 0, `the Chromium tab ${tabId} holds a slice: ${JSON.stringify(rows)}`);
      assert.deepEqual((tab as VolunteerTab).errors, [], 'no page errors');
      // The page counts what its tab served (pushed about once a second): trusted, it served pairs of this layer.
      const page = (tab as VolunteerTab).page;
      await page.waitForFunction(() => Number((document.querySelector('#stat-pairs')?.textContent ?? '0').replace(/,/g, '')) > 0, null, {
        timeout: 15_000,
        polling: 250,
      });
      t.diagnostic(
        `${rounds} probation round(s); served ${d('served')} of ${routed} routed pairs; workers ${rows.map((r) => `${r.worker_id} L${r.layer} [${r.experts.join(',')})`).join(' ')}`,
      );
    } finally {
      await tab?.close();
      for (const v of vols) await v.stop();
      await hub.close();
    }
  });
}

/** The dashboard's worker rows, for a failure's message. */
async function workerRows(url: string): Promise<unknown> {
  return ((await (await fetch(`${url}/api/dashboard/workers?limit=20`)).json()) as { rows: unknown }).rows;
}

/** The hub's recent events other than recruiting, one line each, for a failure's message. */
async function eventLines(url: string): Promise<string> {
  const { events } = (await (await fetch(`${url}/api/events?limit=100`)).json()) as { events: Array<{ kind: string; detail: string }> };
  return events
    .filter((e) => e.kind !== 'recruit')
    .map((e) => `${e.kind}: ${e.detail}`)
    .join(' | ');
}
