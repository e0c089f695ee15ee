/**
 * The data path end to end with headless volunteers (`npx expertswarm volunteer`, the same client as the page, in
 * Node): a hub with its real coordinator (linkcpp-server), two volunteer processes that the market assigns one MoE
 * layer each over the channel, `--dispatch always`; 64-token greedy completions through `/v1/completions` give the
 * token ids of the same hub with `--dispatch off`, and the metrics show the volunteers served ≥ 90% of routed pairs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { testModel } from '../support/models.ts';
import { WebSocket } from 'ws';
import { AUDIT_MISMATCH_NMSE } from '../../hub/dispatch-map.ts';
import { createVolunteerClient, type SocketFactory } from '../../volunteer/client.ts';
import { MemoryIdentityStore } from '../../volunteer/identity.ts';
import { nodeEnvironment } from '../../volunteer/node/environment.ts';
import { NoShardCache } from '../../volunteer/shard-cache.ts';
import type { VolunteerControls } from '../../volunteer/state.ts';
import {
  baselineIds,
  DEEPSEEK_Q8,
  E2E_PROMPT,
  E2E_TOKENS,
  QWEN_Q4K,
  completionIds,
  dispatchMap,
  moeLayersOf,
  pairOutcomes,
  spawnVolunteer,
  startSwarmHub,
  waitForCoverage,
  type MapRow,
} from '../support/swarm.ts';

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
    const hub = await startSwarmHub(m.path, 'always');
    const vols = [spawnVolunteer(hub.url, 'h0', ['--backend', backend]), spawnVolunteer(hub.url, 'h1', ['--backend', backend])];
    try {
      const moeLayers = moeLayersOf(config);
      const rows = await waitForCoverage(hub.url, hub.model, moeLayers, config.nExpert, 1);
      assert.deepEqual(new Set(rows.map((r) => r.worker_id)), new Set(['h0', 'h1']), 'the market gave each volunteer a slice');
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
        const wallet = /wallet (\w+)/.exec(v.output())?.[1];
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

/**
 * Exactness that can fail: with every answered work item audited (`--audit-rate 1`: the dispatcher withholds the
 * volunteer's answer and the coordinator computes the same pairs and reports their sums), an honest volunteer's NMSE
 * against the coordinator is at float-summation level and a volunteer whose sums are scaled by 1.01 is a mismatch
 * (NMSE ≈ 1e-4), orders of magnitude apart. Tokens stay the coordinator's: audited pairs are never served.
 */
for (const { name, config } of MODELS) {
  test(`audits tell an honest volunteer from one whose sums are × 1.01 (${name})`, { timeout: 600_000 }, async () => {
    const m = await testModel(config);
    // A generous deadline: under load a volunteer that misses deadlines is benched and then audited no more; this
    // test is about telling answers apart, not about speed.
    const hub = await startSwarmHub(m.path, 'always', { auditRate: 1, dispatchDeadlineMs: 5000 });
    const honest = spawnVolunteer(hub.url, 'honest');
    const moeLayers = moeLayersOf(config);
    let dishonest: VolunteerControls | null = null;
    try {
      await waitForCoverage(hub.url, hub.model, moeLayers.slice(0, 1), config.nExpert, 1);
      dishonest = createVolunteerClient({
        hubUrl: hub.url,
        environment: () => nodeEnvironment('wasm'),
        identity: new MemoryIdentityStore(),
        cache: new NoShardCache(),
        WebSocket: WebSocket as unknown as SocketFactory,
        workerId: 'dishonest',
        tamper: (sums) => {
          for (let i = 0; i < sums.length; i++) sums[i] = (sums[i] as number) * 1.01;
        },
      });
      dishonest.join({ memoryBudgetBytes: 256 << 20 });
      await waitForCoverage(hub.url, hub.model, moeLayers, config.nExpert, 1);
      // Completions until both have been audited often enough (each evaluation audits both layers; a loaded machine
      // may make a volunteer miss some), at most a few.
      const WANT_AUDITS = 8;
      let rows: MapRow[] = [];
      const of = (id: string): MapRow => rows.find((r) => r.worker_id === id) as MapRow;
      for (let round = 0; round < 5; round++) {
        await completionIds(hub.url, hub.model, PROMPT, 16, m.ban);
        rows = await dispatchMap(hub.url, hub.model);
        if (of('honest').audits >= WANT_AUDITS && of('dishonest').audits >= WANT_AUDITS) break;
      }
      const h = of('honest');
      const d = of('dishonest');
      console.log(
        `# ${name}: honest NMSE max ${h.audit_nmse_max} over ${h.audits} audits; × 1.01 NMSE max ${d.audit_nmse_max} over ${d.audits}`,
      );
      assert.ok(
        h.audits >= WANT_AUDITS && d.audits >= WANT_AUDITS,
        `both volunteers audited ${WANT_AUDITS}+ times: ${h.audits}, ${d.audits}`,
      );
      assert.ok((h.audit_nmse_max as number) <= AUDIT_MISMATCH_NMSE, `honest NMSE ${h.audit_nmse_max}`);
      assert.ok((d.audit_nmse_last as number) > AUDIT_MISMATCH_NMSE, `× 1.01 NMSE ${d.audit_nmse_last}`);
      assert.ok((d.audit_nmse_last as number) > 100 * (h.audit_nmse_max as number) + 1e-12, 'orders of magnitude apart');
      const text = await (await fetch(`${hub.url}/metrics`)).text();
      assert.match(text, /^expertswarm_audits_total\{model="m",result="mismatch"\} [1-9]/m);
    } finally {
      await dishonest?.leave();
      await honest.stop();
      await hub.close();
    }
  });
}
