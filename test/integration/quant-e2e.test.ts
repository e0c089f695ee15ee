/**
 * The weight types of issue 26 end to end through the hub, with the production trust defaults: a hub with its real
 * coordinator (linkcpp-server, `--dispatch always`), one Chromium tab (the production page's Join button, WebGPU on
 * SwiftShader) and one headless volunteer (`npx expertswarm volunteer --backend wasm`: the wasm kernel); the market
 * gives each a layer; both pass probation on completions that keep the token ids of the same hub with `--dispatch
 * off`; then, trusted, a 64-token greedy completion has those token ids again with ≥ 90% of its routed pairs served.
 *
 * Only with `npm run test:quant:e2e` (QUANT_E2E=full; `npm test` serves a three-layer mixed model in families-e2e, and
 * mixed-model.test.ts checks its file, slices and market there): one mixed model (tools/mixed-model.ts), qwen3moe
 * with four MoE layers, each layer's gate, up and down in a type of its own, twelve types in all, as a Q2_K_XL or
 * Q3_K_M file mixes them, and on its hub the market's answers to volunteers that cannot read a layer
 * (type-unsupported); then one qwen3moe model per type every engine reads (the WGSL kernels' and the wasm kernel's
 * lists, so a type joins when both read it), two MoE layers, both in that type: the tab and the headless volunteer
 * each compute one. QUANT_E2E_TYPES (a comma list of type names) runs only those grid cells.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { Browser } from 'playwright-core';
import { joinVolunteerPage, launchChromium, waitServing, type VolunteerTab } from '../../harness/browser.ts';
import { testModel, type TestModel } from '../../harness/models.ts';
import { describeExpertTypes, testMixedModel } from '../../harness/mixed-models.ts';
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
  type SwarmHub,
  waitForCoverage,
  waitForEveryHolder,
} from '../../harness/swarm.ts';
import { DEFAULT_TRUST } from '../../hub/dispatch/trust.ts';
import { GGMLType, typeName } from '../../gguf/quant-types.ts';
import { planExpertSlice } from '../../gguf/expert-slice.ts';
import { readGGUFFile } from '../../gguf/node-io.ts';
import { KERNEL_TYPES } from '../../shaders/expert-ffn.ts';
import { WASM_FALLBACK_TYPES } from '../../shaders/wasm/fallback.ts';
import type { ExpertTypes } from '../../tools/mixed-model.ts';

const N = E2E_TOKENS;
/**
 * Completions to pass probation in (20 audits a worker): a tab on SwiftShader answers fewer items in time than the wasm
 * volunteer and was audited 16 times in 6 rounds in one IQ1_M run (2026-12-06 21:46), so 10.
 */
const PROBATION_ROUNDS = 10;
/** From Join to serving: the page's bundle, SwiftShader's shader compiles and the slice, on 2 busy cores. */
const TAB_SERVE_MS = 150_000;
const ADMIN_TOKEN = 'quant-e2e-admin-token-0123456789abcdef';
const FULL = process.env.QUANT_E2E === 'full';

const { Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q5_0, IQ2_XXS, IQ3_XXS, IQ4_XS, IQ4_NL, MXFP4 } = GGMLType;
/**
 * Twelve types over four MoE layers, low bits first as a dynamic quant puts them: the Q2_K_XL-like layer (IQ2_XXS
 * gate, Q2_K up, Q3_K down), then IQ3_XXS/IQ4_XS/Q4_K, Q5_K/Q6_K/Q8_0 and MXFP4/IQ4_NL/Q5_0; the rest of the model Q8_0.
 */
const MIXED_LAYERS: ExpertTypes[] = [
  { gate: IQ2_XXS, up: Q2_K, down: Q3_K },
  { gate: IQ3_XXS, up: IQ4_XS, down: Q4_K },
  { gate: Q5_K, up: Q6_K, down: Q8_0 },
  { gate: MXFP4, up: IQ4_NL, down: Q5_0 },
];
const BASE = { arch: 'qwen3moe' as const, nEmbd: 256, ff: 256, nExpert: 8, nExpertUsed: 2, seed: 35, expertScale: 2 };

/** Every type both engines read: the per-type grid (QUANT_E2E=full). */
const GRID_TYPES = KERNEL_TYPES.types.filter((t) => WASM_FALLBACK_TYPES.types.includes(t));
/**
 * QUANT_E2E_TYPES=Q4_1,Q5_1 (with QUANT_E2E=full): only those cells of the per-type grid, without the mixed model; a
 * name that is not a grid type throws.
 */
const ONLY = (process.env.QUANT_E2E_TYPES ?? '')
  .split(',')
  .map((s) => s.trim())
  .filter((s) => s !== '')
  .map((name) => {
    const t = GRID_TYPES.find((g) => typeName(g) === name);
    if (t === undefined) throw new Error(`QUANT_E2E_TYPES: ${name} is not a grid type (${GRID_TYPES.map(typeName).join(', ')})`);
    return t;
  });
const RUN_TYPES = ONLY.length > 0 ? ONLY : GRID_TYPES;

let pagesDir = '';
let browser: Browser | undefined;

// Only for the grid: in `npm test` this file starts nothing (the mixed model's end-to-end run is families-e2e's).
if (FULL) {
  before(async () => {
    pagesDir = await buildPages('production');
    browser = await launchChromium();
  });
  after(async () => {
    await browser?.close();
  });
}

/**
 * The hub serves `m` (`--dispatch always`, production trust) with one tab and one headless volunteer; probation,
 * then a trusted completion: the token ids of `--dispatch off`, ≥ 90% of routed pairs served, none rejected.
 */
async function serveThroughHub(
  t: { diagnostic(s: string): void },
  m: TestModel,
  moeLayers: number[],
  check?: (hub: SwarmHub) => void,
): Promise<void> {
  const want = await baselineIds(m);
  assert.ok(new Set(want).size >= 16, `the baseline must not collapse: ${new Set(want).size} distinct tokens`);
  const hub = await startSwarmHub(m.path, 'always', { trust: DEFAULT_TRUST, adminToken: ADMIN_TOKEN }, 'm', { dir: pagesDir });
  let tab: VolunteerTab | undefined;
  let vol: ReturnType<typeof spawnVolunteer> | undefined;
  try {
    check?.(hub);
    // The tab joins first, so the market gives it a layer; the headless volunteer takes the others (or is given one).
    tab = await joinVolunteerPage(browser as Browser, hub.url, 'webgpu');
    await waitServing(tab, 'tab', TAB_SERVE_MS);
    vol = spawnVolunteer(hub.url, 'q1', ['--backend', 'wasm']);
    await waitForCoverage(hub.url, hub.model, moeLayers, m.config.nExpert, 1);
    await waitForEveryHolder(hub.url, hub.model, [tab.workerId, 'q1'], { adminToken: ADMIN_TOKEN, base: 1, timeoutMs: TAB_SERVE_MS });
    await waitForCoverage(hub.url, hub.model, moeLayers, m.config.nExpert, 1);
    let rounds = 0;
    for (; rounds < PROBATION_ROUNDS; rounds++) {
      const rows = await dispatchMap(hub.url, hub.model);
      if (rows.length > 0 && rows.every((r) => r.audits_passed >= DEFAULT_TRUST.probation)) break;
      assert.deepEqual(await completionIds(hub.url, hub.model, E2E_PROMPT, N, m.ban), want, `on probation, round ${rounds}`);
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
    assert.ok(routed >= N * moeLayers.length * m.config.nExpertUsed, `every routed pair is counted: ${JSON.stringify({ before, after })}`);
    assert.ok(d('served') >= 0.9 * routed, `volunteers served ${d('served')} of ${routed} routed pairs`);
    assert.equal(d('rejected'), 0);
    assert.ok(
      rows.some((r) => r.worker_id === (tab as VolunteerTab).workerId),
      `the tab holds a slice: ${JSON.stringify(rows)}`,
    );
    assert.ok(
      rows.some((r) => r.worker_id === 'q1'),
      `the headless volunteer holds a slice: ${JSON.stringify(rows)}; events ${await eventLines(hub.url)}`,
    );
    assert.deepEqual(tab.errors, [], 'no page errors');
    t.diagnostic(
      `${rounds} probation round(s); served ${d('served')} of ${routed} routed pairs; workers ${rows.map((r) => `${r.worker_id} L${r.layer} [${r.experts.join(',')})`).join(' ')}`,
    );
  } finally {
    await tab?.close();
    await vol?.stop();
    await hub.close();
  }
}

if (FULL && ONLY.length === 0)
  test(`a mixed model (${describeExpertTypes(MIXED_LAYERS)}): slices in their own types, refused by type, served by a tab and a headless volunteer with the token ids of --dispatch off`, {
    timeout: 600_000,
  }, async (t) => {
    const m = await testMixedModel({ ...BASE, layers: MIXED_LAYERS.length, type: Q8_0 }, MIXED_LAYERS);
    const moeLayers = MIXED_LAYERS.map((_, l) => l);
    // A slice of each layer carries each tensor in its own type (the shard server's plan, byte copies).
    const file = await readGGUFFile(m.path);
    for (const [l, types] of MIXED_LAYERS.entries()) {
      const plan = planExpertSlice(file, l, 2, 5);
      assert.deepEqual(plan.types, types, `layer ${l}'s slice: ${JSON.stringify(plan.types)}`);
    }
    await serveThroughHub(t, m, moeLayers, ({ hub }) => {
      // The market on this model, before anyone holds a slice: a volunteer that reads only layer 2's types is offered
      // layer 2 (the others' scarcity is the same and lower layers rank first); one that reads none of them is refused,
      // the first layer and its tensors named; one that lists no types is offered layer 0, as before issue 26.
      const only2 = hub.volunteer({ types: ['Q5_K', 'Q6_K', 'Q8_0'] }, undefined);
      assert.ok(only2.assigned && only2.layer === 2, JSON.stringify(only2));
      const none = hub.volunteer({ types: ['Q4_0'] }, undefined);
      assert.ok(!none.assigned && none.code === 'type-unsupported', JSON.stringify(none));
      assert.match(none.reason, /layer 0: gate IQ2_XXS, up Q2_K, down Q3_K/);
      const any = hub.volunteer({}, undefined);
      assert.ok(any.assigned && any.layer === 0, JSON.stringify(any));
    });
  });

for (const type of FULL ? RUN_TYPES : []) {
  test(`${typeName(type)}: a tab and a headless volunteer serve a ${typeName(type)} model with the token ids of --dispatch off, ≥ 90% served`, {
    timeout: 600_000,
  }, async (t) => {
    const m = await testModel({ ...BASE, layers: 2, type });
    await serveThroughHub(t, m, [0, 1]);
  });
}

/** The hub's recent events other than recruiting, one line each, for a failure's message. */
async function eventLines(url: string): Promise<string> {
  const { events } = (await (await fetch(`${url}/api/events?limit=100`)).json()) as { events: Array<{ kind: string; detail: string }> };
  return events
    .filter((e) => e.kind !== 'recruit')
    .map((e) => `${e.kind}: ${e.detail}`)
    .join(' | ');
}
