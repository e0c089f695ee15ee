/**
 * A hub of a cluster that dies fails no request (issue 30; docs/faults.md "A hub of a cluster killed"): three hubs on
 * one real Redis, each in a process of its own with its real coordinator of the same model, volunteers attached to hub
 * A and hub B, load through the retrying client (hub/cluster/retrying-client.ts). A's volunteer and the client of the
 * stream are given hub A only: they learn the others from it (the welcome's `hubs`, `GET /api/health`
 * `cluster.hub_urls`: hub/cluster/hub-list.ts).
 * Hub A is SIGKILLed while it streams to the client: the stream is resumed at another hub with each token once, every
 * request gives the token ids of `--dispatch off`, A's volunteer moves to a live hub (its next in turn, after its
 * jittered wait) and serves there, the dead hub's records leave the others' maps with its announcement, and every
 * wallet is credited exactly the pairs the surviving dispatchers used. Then Redis is killed: the hubs degrade and go
 * on serving alone (the client sees no failure), and when Redis comes back they are one cluster again.
 *
 * Hub A recruits a0 with `--dispatch always` (which wants its replicas at rest) and is then set to `off` (admin): its
 * volunteer serves B's and C's coordinators over the relay until A dies, and what A's own dispatcher used before is
 * credited before the kill. So every pair used is known to a hub that can be asked, and "credit exact" is checked
 * against those counts; what a dying hub's own dispatcher used in its last second is lost (docs/faults.md says so).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { testModel } from '../../harness/models.ts';
import { waitForLog } from '../../harness/log-wait.ts';
import { startRedis } from '../../harness/redis.ts';
import { HUB_PROCESS, type HubProcessSpec } from '../../harness/hub-process.ts';
import {
  DEEPSEEK_Q8,
  E2E_PROMPT,
  TRUST_OFF,
  dispatchMap,
  moeLayersOf,
  pairOutcomes,
  spawnVolunteer,
  until,
  waitForCoverage,
} from '../../harness/swarm.ts';
import { RetryingClient } from '../../hub/cluster/retrying-client.ts';
import type { DispatchMode } from '../../hub/dispatch/policy.ts';

const N = 16;
/** The stream hub A is killed in: long enough to be cut (a few ms per token here). */
const STREAM_N = 160;
const m = await testModel(DEEPSEEK_Q8);
const MODEL = 'm';
const ADMIN = 'faults-drill-admin-token-0123456789';

interface HubChild {
  id: string;
  url: string;
  proc: ChildProcess;
  log(): string;
  stop(): Promise<void>;
}

async function startHub(id: string, redis: string, dispatch: DispatchMode): Promise<HubChild> {
  const spec: HubProcessSpec = {
    config: {
      port: 0,
      stateDir: ':memory:',
      models: [{ path: m.path, name: MODEL }],
      dispatchMode: dispatch,
      slots: 2,
      channel: { heartbeatMs: 1000, idleTimeoutMs: 10_000 },
      dispatchDeadlineMs: 1000,
      trust: TRUST_OFF,
      saturation: { targetBase: 1 } as never,
      adminToken: ADMIN,
      redis,
      cluster: { hubId: id, syncMs: 200 },
    },
  };
  const proc = spawn(process.execPath, ['--import', 'tsx', HUB_PROCESS, JSON.stringify(spec)], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  const keep = (d: Buffer): void => {
    out = (out + d.toString()).slice(-40_000);
  };
  proc.stdout?.on('data', keep);
  proc.stderr?.on('data', keep);
  const ready = await waitForLog(() => out, /\{"ready":true,"url":"[^"]+"\}/, 60_000, `hub ${id} ready`);
  const url = (JSON.parse(/\{"ready":true,"url":"[^"]+"\}/.exec(ready)?.[0] as string) as { url: string }).url;
  return {
    id,
    url,
    proc,
    log: () => out,
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    },
  };
}

const body = (n: number): Record<string, unknown> => ({
  model: MODEL,
  prompt: E2E_PROMPT,
  max_tokens: n,
  temperature: 0,
  seed: 1,
  ignore_eos: true,
  logprobs: 1,
  logit_bias: Object.fromEntries(m.ban.map((id) => [String(id), -100])),
});
const idsOf = (json: unknown): number[] =>
  ((json as { choices: Array<{ logprobs?: { content?: Array<{ id: number }> } }> }).choices[0]?.logprobs?.content ?? []).map((t) => t.id);
const textOf = (json: unknown): string => (json as { choices: Array<{ text: string }> }).choices[0]?.text ?? '';

const clusterState = async (url: string): Promise<string | undefined> =>
  ((await (await fetch(`${url}/api/health`)).json()) as { cluster?: { state: string } }).cluster?.state;

test('hub A SIGKILLed mid-load: no request fails, the stream resumes, A’s volunteer serves from B, credit exact; Redis restarted: served alone, then one cluster again', {
  timeout: 240_000,
}, async () => {
  const redis = await startRedis();
  const hubs: HubChild[] = [];
  const vols: Array<ReturnType<typeof spawnVolunteer>> = [];
  try {
    hubs.push(
      ...(await Promise.all([
        startHub('hub-a', redis.url, 'always'),
        startHub('hub-b', redis.url, 'always'),
        startHub('hub-c', redis.url, 'always'),
      ])),
    );
    const [a, b, c] = hubs as [HubChild, HubChild, HubChild];
    // Every hub lists the live ones (this one included) where clients and volunteers reach them.
    await until('every hub listing the three', 10_000, async () => {
      for (const h of [a, b, c]) {
        const urls = ((await (await fetch(`${h.url}/api/health`)).json()) as { cluster?: { hub_urls?: string[] } }).cluster?.hub_urls;
        if (JSON.stringify(urls) !== JSON.stringify([a.url, b.url, c.url])) return undefined;
      }
      return true;
    });
    // a0 given hub A only (it learns B and C from A's welcome), b0 on hub B: one slice each, the two MoE layers
    // between them.
    vols.push(spawnVolunteer(a.url, 'a0', ['--max-slices', '1']));
    await until('a0 holding a slice', 60_000, async () =>
      (await dispatchMap(a.url, MODEL)).some((r) => r.worker_id === 'a0') ? true : undefined,
    );
    // Hub A recruited a0 (`--dispatch always` wants its replicas at rest); from now on it computes its own pairs
    // (`off`): what its dispatcher used so far is credited within a second, and it uses no more.
    const off = await fetch(`${a.url}/api/admin/models/${MODEL}/dispatch`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ mode: 'off' }),
    });
    assert.equal(off.status, 200, await off.text());
    // The reference: hub A, which computes everything itself now (--dispatch off).
    const ref = new RetryingClient({ hubs: [a.url], attempts: 1 });
    const want = idsOf((await ref.post('/v1/completions', body(N))).json);
    const wantText = textOf((await ref.post('/v1/completions', { ...body(STREAM_N), logprobs: undefined })).json);
    assert.equal(want.length, N);

    vols.push(spawnVolunteer(`${b.url},${c.url},${a.url}`, 'b0', ['--max-slices', '1']));
    const moeLayers = moeLayersOf(DEEPSEEK_Q8);
    await waitForCoverage(c.url, MODEL, moeLayers, DEEPSEEK_Q8.nExpert, 1, 60_000);

    await new Promise((r) => setTimeout(r, 2_500)); // A's ledger flushed what its dispatcher used while `always`
    const aServed = (await pairOutcomes(a.url, MODEL)).served as number;

    // The load: two lanes of short requests round the three hubs, and one long stream that starts at hub A.
    const failed: string[] = [];
    const answers: number[][] = [];
    const load = new RetryingClient({ hubs: [a.url, b.url, c.url] });
    let loading = true;
    const lane = async (): Promise<void> => {
      while (loading) {
        try {
          answers.push(idsOf((await load.post('/v1/completions', body(N))).json));
        } catch (e) {
          failed.push(String(e));
        }
      }
    };
    const lanes = [lane(), lane()];
    const streamRetries: string[] = [];
    // The stream's client is given hub A only: it learns the others from A before its first request.
    const streamer = new RetryingClient({ hubs: [a.url], discover: true, onRetry: (r) => streamRetries.push(`${r.hub}: ${r.reason}`) });
    let text = '';
    let chunks = 0;
    let killedAt = 0;
    for await (const ch of streamer.stream('/v1/completions', { ...body(STREAM_N), logprobs: undefined })) {
      text += (ch as { choices: Array<{ text: string }> }).choices[0]?.text ?? '';
      if (++chunks === 4) {
        a.proc.kill('SIGKILL'); // mid-stream, mid-load
        killedAt = Date.now();
      }
    }
    assert.ok(killedAt > 0, 'hub A was killed mid-stream');
    assert.deepEqual(streamer.hubList, [a.url, b.url, c.url], 'the client learned B and C from A');
    assert.equal(text, wantText, 'the stream resumed at another hub: every token once, those of --dispatch off');
    assert.ok(
      streamRetries.length >= 1 && streamRetries[0]?.startsWith(a.url),
      `the stream was cut at A and resumed: ${streamRetries.join(' | ')}`,
    );

    // A's volunteer is back, on B (the next hub A's welcome named), and serves: B's map lists it as B's own, and C's map lists no
    // record of the dead hub's once its announcement expired (at most 5 s).
    const back = await until('a0 serving from hub B, hub A gone from C’s map', 30_000, async () => {
      const rows = (await dispatchMap(c.url, MODEL)) as unknown as Array<{ worker_id: string; hub: string | null }>;
      return rows.some((r) => r.worker_id === 'a0' && r.hub === 'hub-b') && rows.every((r) => r.hub !== 'hub-a') ? rows : undefined;
    });
    const movedMs = Date.now() - killedAt;
    await waitForCoverage(c.url, MODEL, moeLayers, DEEPSEEK_Q8.nExpert, 1, 30_000);
    // More load with both volunteers on B: B's pairs locally, C's over the relay to B.
    const before = ((await pairOutcomes(b.url, MODEL)).served as number) + ((await pairOutcomes(c.url, MODEL)).served as number);
    await until('pairs served after the move', 30_000, async () =>
      ((await pairOutcomes(b.url, MODEL)).served as number) + ((await pairOutcomes(c.url, MODEL)).served as number) > before
        ? true
        : undefined,
    );

    loading = false;
    await Promise.all(lanes);
    assert.deepEqual(failed, [], 'no request failed');
    assert.ok(load.retries >= 1, 'some requests met the dead hub and were retried');
    const phase1 = answers.length;

    // Credit: every pair B's and C's dispatchers used, once, to a0's and b0's wallets (their ledgers flush each second).
    const wallets = await Promise.all(
      vols.map(
        async (v) => /wallet (\w+)/.exec(await waitForLog(() => v.output(), /wallet (\w+)/, undefined, 'its wallet'))?.[1] as string,
      ),
    );
    const served = async (): Promise<number> =>
      aServed + ((await pairOutcomes(b.url, MODEL)).served as number) + ((await pairOutcomes(c.url, MODEL)).served as number);
    const credited = async (): Promise<number> => {
      let sum = 0;
      for (const w of wallets)
        sum += ((await (await fetch(`${b.url}/api/credit?wallet=${w}`)).json()) as { credit_pairs: number }).credit_pairs;
      return sum;
    };
    const total = await served();
    assert.ok(total > 0);
    await until(`credit = ${total} pairs served`, 15_000, async () => ((await credited()) === total ? true : undefined));
    await new Promise((r) => setTimeout(r, 1_500)); // a flush or retry more: still once
    assert.equal(await credited(), total, 'credit exact: each pair once');

    // Redis killed: the hubs degrade and serve alone, the load goes on; restarted (empty): one cluster again.
    loading = true;
    const lanes2 = [lane(), lane()];
    await redis.kill();
    await until('B and C degraded', 10_000, async () =>
      (await clusterState(b.url)) === 'degraded' && (await clusterState(c.url)) === 'degraded' ? true : undefined,
    );
    const during = answers.length;
    await until('requests answered while Redis is away', 30_000, () => (answers.length >= during + 2 ? true : undefined));
    await redis.restart();
    await until('B and C ready again', 15_000, async () =>
      (await clusterState(b.url)) === 'ready' && (await clusterState(c.url)) === 'ready' ? true : undefined,
    );
    await waitForCoverage(c.url, MODEL, moeLayers, DEEPSEEK_Q8.nExpert, 1, 15_000);
    const after = answers.length;
    await until('requests answered after Redis came back', 30_000, () => (answers.length >= after + 2 ? true : undefined));
    loading = false;
    await Promise.all(lanes2);
    assert.deepEqual(failed, [], 'no request failed');
    for (const [i, ids] of answers.entries()) assert.deepEqual(ids, want, `request ${i}: the token ids of --dispatch off`);
    console.log(
      `hub A killed after 4 of ${STREAM_N} streamed tokens; ${phase1} + ${answers.length - phase1} requests (Redis away and back), ` +
        `${load.retries} retries, 0 failed; ` +
        `a0 serving from hub B ${movedMs} ms after the kill (${back.length} rows on C); ${total} pairs served = credited`,
    );
  } finally {
    await Promise.all(vols.map((v) => v.stop()));
    await Promise.all(hubs.map((h) => h.stop()));
    await redis.stop();
  }
});
