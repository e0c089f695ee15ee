/**
 * The data path end to end with headless volunteers (`npx expertswarm volunteer`, the same client as the page, in
 * Node): a hub with its real coordinator (linkcpp-server), two volunteer processes that the market assigns one MoE
 * layer each over the channel, `--dispatch always`; 64-token greedy completions through `/v1/completions` give the
 * token ids of the same hub with `--dispatch off`, and the metrics show the volunteers served ≥ 90% of routed pairs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { testModel } from '../../harness/models.ts';
import { waitForLog } from '../../harness/log-wait.ts';
import {
  baselineIds,
  DEEPSEEK_Q8,
  E2E_PROMPT,
  E2E_TOKENS,
  QWEN_Q4K,
  completionIds,
  moeLayersOf,
  pairOutcomes,
  pastWarmUpQuiet,
  spawnVolunteer,
  startSwarmHub,
  waitForCoverage,
  waitForEveryHolder,
} from '../../harness/swarm.ts';

/** The hub's admin token here: waitForEveryHolder may ask it for a second replica per layer. */
const ADMIN_TOKEN = 'e2e-admin-token-0123456789abcdef';

const N = E2E_TOKENS;
const PROMPT = E2E_PROMPT;

/**
 * `backend`: Q4_K's volunteers compute with WebGPU (Dawn): the WGSL kernels compute h in ggml's order, bit for bit,
 * so tokens match exactly; the wasm fallback agrees to NMSE ~1e-13 (the audit test below), which can move a loud
 * model's greedy token at a near-tie (docs/numerics.md).
 */
const MODELS = [
  { name: 'qwen3moe Q4_K', backend: 'webgpu', config: QWEN_Q4K },
  { name: 'deepseek Q8_0', backend: 'auto', config: DEEPSEEK_Q8 },
] as const;

for (const { name, config, backend } of MODELS) {
  test(`two headless volunteers serve ${name}: tokens identical to --dispatch off, ≥ 90% of routed pairs served`, {
    timeout: 600_000,
  }, async () => {
    const m = await testModel(config);
    const want = await baselineIds(m);
    assert.ok(new Set(want).size >= 16, `the baseline must not collapse: ${new Set(want).size} distinct tokens`);
    const hub = await startSwarmHub(m.path, 'always', { adminToken: ADMIN_TOKEN });
    const vols = [spawnVolunteer(hub.url, 'h0', ['--backend', backend]), spawnVolunteer(hub.url, 'h1', ['--backend', backend])];
    try {
      const moeLayers = moeLayersOf(config);
      await waitForCoverage(hub.url, hub.model, moeLayers, config.nExpert, 1);
      // Volunteers hold several slices: the first may take every layer, and the market then hands one of its slices
      // to the volunteer that holds nothing (REBALANCE), or, where it reads that one as too slow, a second replica.
      const rows = await waitForEveryHolder(hub.url, hub.model, ['h0', 'h1'], { adminToken: ADMIN_TOKEN, base: 1 });
      assert.deepEqual(new Set(rows.map((r) => r.worker_id)), new Set(['h0', 'h1']), 'the market gave each volunteer a slice');
      await pastWarmUpQuiet(hub.url);
      const got = await completionIds(hub.url, hub.model, PROMPT, N, m.ban);
      assert.deepEqual(got, want);
      const o = await pairOutcomes(hub.url, hub.model);
      const routed = (o.served as number) + (o.fallback as number) + (o.rejected as number);
      assert.ok(routed >= N * moeLayers.length * config.nExpertUsed, `every routed pair is counted: ${JSON.stringify(o)}`);
      assert.ok((o.served as number) >= 0.9 * routed, `volunteers served ${o.served} of ${routed} routed pairs`);
      assert.equal(o.rejected, 0);
      // Credit: every served pair is credited to the wallet of the volunteer that computed it, durably.
      let credited = 0;
      for (const v of vols) {
        const wallet = /wallet (\w+)/.exec(await waitForLog(() => v.output(), /wallet (\w+)/, undefined, 'its wallet'))?.[1];
        assert.ok(wallet, `the volunteer prints its wallet: ${v.output().slice(-300)}`);
        const c = (await (await fetch(`${hub.url}/api/credit?wallet=${wallet}`)).json()) as { credit_pairs: number };
        assert.ok(c.credit_pairs > 0, `${wallet} has credit`);
        credited += c.credit_pairs;
      }
      assert.equal(credited, o.served, 'credit = pairs served');
    } finally {
      for (const v of vols) await v.stop();
      await hub.close();
    }
  });
}
