/**
 * The families added for issue 25 end to end through the hub, with the production trust defaults: a hub with its real
 * coordinator (linkcpp-server, `--dispatch always`) and one headless volunteer per routed layer (`npx expertswarm
 * volunteer`, WebGPU on Dawn/SwiftShader) to which the market gives those layers; all pass their probation (20 audited items,
 * none used) on completions that keep the token ids of the same hub with `--dispatch off`; then, trusted, a 64-token
 * greedy completion has those token ids again with ≥ 90% of its routed pairs served by the volunteers.
 *
 * The coordinator keeps everything but the routed experts (latent attention, sigmoid routers with selection biases
 * and groups, shared experts, dense layers, Llama 4's weighting of each pair's row, the hybrids' delta-net layers);
 * the volunteers compute the same expert FFN as for the first five
 * architectures. One model per family: Q4_K (exact in WebGPU numerics), 3 layers, loud experts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { testModel } from '../../harness/models.ts';
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
} from '../../harness/swarm.ts';
import { DEFAULT_TRUST } from '../../hub/dispatch/trust.ts';
import { GGMLType } from '../../gguf/quant-types.ts';
import { type ArchName, defaultConfig, planModel } from '../../tools/model-arch.ts';
import { buildVocabulary } from '../../tools/tokenizer.ts';

const FAMILIES: ArchName[] = [
  'deepseek2',
  'glm4moe',
  'minimax-m2',
  'dots1',
  'ernie4_5-moe',
  'hunyuan-moe',
  'bailingmoe2',
  'llama4',
  'gpt-oss',
  'qwen3next',
  'qwen35moe',
];
const N = E2E_TOKENS;

for (const arch of FAMILIES) {
  test(`${arch}: headless volunteers pass probation and serve ≥ 90% of routed pairs with the token ids of --dispatch off`, {
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
    };
    const m = await testModel(config);
    const moeLayers = planModel(defaultConfig(config), buildVocabulary().tokens.length).moeLayers;
    const want = await baselineIds(m);
    assert.ok(new Set(want).size >= 16, `the baseline must not collapse: ${new Set(want).size} distinct tokens`);
    const hub = await startSwarmHub(m.path, 'always', { trust: DEFAULT_TRUST });
    const vols = moeLayers.map((_, i) => spawnVolunteer(hub.url, `f${i}`, ['--backend', 'webgpu']));
    try {
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
      assert.ok(routed >= N * moeLayers.length * config.nExpertUsed, `every routed pair is counted: ${JSON.stringify({ before, after })}`);
      assert.ok(d('served') >= 0.9 * routed, `volunteers served ${d('served')} of ${routed} routed pairs`);
      assert.equal(d('rejected'), 0);
      t.diagnostic(
        `${rounds} probation round(s); served ${d('served')} of ${routed} routed pairs; workers ${rows.map((r) => `${r.worker_id} L${r.layer} [${r.experts.join(',')})`).join(' ')}`,
      );
    } finally {
      for (const v of vols) await v.stop();
      await hub.close();
    }
  });
}
