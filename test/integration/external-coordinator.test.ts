/**
 * An external coordinator on the data path: a linkcpp-server the hub did not start (`--coordinator-url NAME=URL`,
 * with the model's GGUF given as `--model NAME=PATH` so its experts are on the market), started with
 * `--expert-dispatch PATH` on the socket the hub listens on for it (`--dispatch-socket NAME=PATH`). The hub is built
 * from its command line (`parseHubArgs`, then `runHub` as `npx expertswarm hub` does) with `--dispatch always`; two
 * headless volunteers (`npx expertswarm volunteer`) take one MoE layer each.
 *
 * Asserted: the flags parse into the config; the coordinator is listed as external at its URL; the hub's dispatcher
 * for the model got the coordinator's HELLO on protocol v3 (the dashboard's `dispatchConnected` and the hub's event
 * log); a 64-token greedy completion through the hub's `/v1/completions` (proxied to the external coordinator) gives
 * the token ids of a coordinator with no dispatcher serving (`baselineIds`: a hub of its own with `--dispatch off`),
 * and the volunteers served ≥ 90% of the routed pairs (`expertswarm_dispatch_pairs_total{outcome="served"}`).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseHubArgs, runHub } from '../../hub/cli.ts';
import { startServer, type RunningServer } from '../../harness/linkcpp.ts';
import { testModel } from '../../harness/models.ts';
import {
  baselineIds,
  completionIds,
  DEEPSEEK_Q8,
  E2E_PROMPT,
  E2E_TOKENS,
  moeLayersOf,
  pairOutcomes,
  spawnVolunteer,
  waitForCoverage,
  waitForEveryHolder,
  type HeadlessVolunteer,
} from '../../harness/swarm.ts';

/** The hub's admin token here: waitForEveryHolder may ask it for a second replica per layer. */
const ADMIN_TOKEN = 'e2e-admin-token-0123456789abcdef';

const MODEL = 'm';
/** The coordinator's per-layer wait for the dispatcher, as the hub gives its managed ones (`--dispatch-deadline-ms`). */
const DEADLINE_MS = '1000';

test('an external coordinator on --dispatch-socket is served by the hub’s dispatcher: HELLO v3, pairs served, tokens identical', {
  timeout: 300_000,
}, async () => {
  const m = await testModel(DEEPSEEK_Q8);
  const want = await baselineIds(m);
  assert.ok(new Set(want).size >= 16, `the baseline must not collapse: ${new Set(want).size} distinct tokens`);

  const dir = mkdtempSync(join(tmpdir(), 'xs-ext-'));
  const socketPath = join(dir, 'dispatch.sock');
  let coordinator: RunningServer | undefined;
  let hub: Awaited<ReturnType<typeof runHub>> | undefined;
  const vols: HeadlessVolunteer[] = [];
  try {
    // Started first, as an operator would: with no dispatcher listening yet it computes everything itself and keeps
    // dialling the socket in the background (docs/dispatch-protocol.md, "Rules on the coordinator side").
    coordinator = await startServer({
      model: m.path,
      ctx: 2048,
      args: ['--alias', MODEL, '--metrics', '--slots', '--expert-dispatch', socketPath, '--expert-dispatch-deadline-ms', DEADLINE_MS],
    });

    const config = parseHubArgs(
      [
        '--model',
        `${MODEL}=${m.path}`,
        '--coordinator-url',
        `${MODEL}=${coordinator.url}/`,
        '--dispatch-socket',
        `${MODEL}=${socketPath}`,
        '--dispatch',
        'always',
        '--target-base',
        '1',
        '--slots',
        '1',
        '--dispatch-deadline-ms',
        DEADLINE_MS,
        // Every answer used from the first (no probation, no spot audits): this test counts what is served.
        '--probation',
        '0',
        '--audit-rate',
        '0',
        '--port',
        '0',
        '--state',
        ':memory:',
      ],
      {},
    );
    assert.notEqual(config, 'help');
    if (config === 'help') return;
    assert.deepEqual(config.dispatchSockets, [{ name: MODEL, path: socketPath }]);
    assert.deepEqual(config.externals, [{ name: MODEL, url: `${coordinator.url}/` }]);
    assert.deepEqual(config.models, [{ name: MODEL, path: m.path }]);
    assert.equal(config.dispatchMode, 'always');
    assert.throws(() => parseHubArgs(['--model', m.path, '--dispatch-socket', socketPath], {}), /--dispatch-socket must be NAME=VALUE/);

    hub = await runHub({ ...config, adminToken: ADMIN_TOKEN }, () => {});
    const running = hub;
    assert.deepEqual(
      running.hub.coordinators().map((c) => [c.name, c.state, c.url, c.pid]),
      [[MODEL, 'external', coordinator.url, null]],
      'the hub lists the coordinator as external (trailing slash dropped) and started none of its own',
    );

    // The coordinator finds the dispatcher within its reconnect backoff (≤ 2 s).
    const connected = (): boolean => running.hub.dashboardModels().find((s) => s.model === MODEL)?.dispatchConnected === true;
    const connectedBy = Date.now() + 15_000;
    while (!connected() && Date.now() < connectedBy) await new Promise((r) => setTimeout(r, 100));
    assert.ok(connected(), `the coordinator never said HELLO to the hub's dispatcher:\n${coordinator.log().slice(-2000)}`);
    const hellos = running.hub.queryEvents({ kind: 'coordinator', model: MODEL, limit: 50 }).map((e) => e.detail);
    assert.ok(
      hellos.some((d) => /^dispatch hello: .+ \(protocol v3\)$/.test(d)),
      `the hub's dispatcher got the HELLO on protocol v3: ${JSON.stringify(hellos)}`,
    );

    vols.push(spawnVolunteer(running.url, 'x0'), spawnVolunteer(running.url, 'x1'));
    const moeLayers = moeLayersOf(DEEPSEEK_Q8);
    await waitForCoverage(running.url, MODEL, moeLayers, DEEPSEEK_Q8.nExpert, 1);
    // Volunteers hold several slices: the first may take every layer, and the market then hands one of its slices to
    // the volunteer that holds nothing (REBALANCE), or, where it reads that one as too slow, a second replica.
    const rows = await waitForEveryHolder(running.url, MODEL, ['x0', 'x1'], { adminToken: ADMIN_TOKEN, base: 1 });
    assert.deepEqual(new Set(rows.map((r) => r.worker_id)), new Set(['x0', 'x1']), 'the market gave each volunteer a slice');

    const since = await pairOutcomes(running.url, MODEL);
    const got = await completionIds(running.url, MODEL, E2E_PROMPT, E2E_TOKENS, m.ban);
    const now = await pairOutcomes(running.url, MODEL);
    const o = Object.fromEntries(Object.entries(now).map(([k, v]) => [k, v - (since[k] ?? 0)])) as Record<string, number>;
    const routed = (o.served as number) + (o.fallback as number) + (o.rejected as number);
    const line = `served ${o.served} of ${routed} routed pairs, fallback ${o.fallback}, late ${o.late}, rejected ${o.rejected}`;
    console.log(`# external coordinator: ${line}`);
    assert.deepEqual(got, want, `tokens identical to a coordinator with no dispatcher serving (${line})`);
    assert.ok(routed >= E2E_TOKENS * moeLayers.length * DEEPSEEK_Q8.nExpertUsed, `every routed pair is counted: ${line}`);
    assert.ok((o.served as number) >= 0.9 * routed, `the volunteers served ≥ 90%: ${line}`);
    assert.equal(o.rejected, 0);
  } finally {
    for (const v of vols) await v.stop();
    await hub?.close();
    await coordinator?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
