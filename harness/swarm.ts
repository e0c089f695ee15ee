/**
 * The whole system on loopback for end-to-end tests: a hub (in this process) with its real coordinator, volunteers
 * as separate processes (`npx expertswarm volunteer`) or browser tabs, and the readings the tests assert: token ids
 * of greedy completions through `/v1/completions`, the dispatch map, and the Prometheus counters.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runHub } from '../hub/cli.ts';
import { defaultConfig, type Hub, type HubConfig } from '../hub/hub.ts';
import type { DispatchMode } from '../hub/dispatch/policy.ts';
import { DEFAULT_QUIET_MS } from '../hub/dispatch/dispatcher.ts';
import { DEFAULT_TRUST } from '../hub/dispatch/trust.ts';
import type { PagesOptions } from '../hub/pages.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import type { ModelConfig } from '../tools/model-arch.ts';
import type { TestModel } from './models.ts';

/** The end-to-end tests' generation: greedy tokens after this prompt. */
export const E2E_PROMPT = 'The swarm serves';
export const E2E_TOKENS = 64;
/** The routed branch as loud as in the dispatch grid (test/integration/expert-dispatch.test.ts, LOUD). */
const LOUD = 2;

type E2EModel = Partial<ModelConfig> & Pick<ModelConfig, 'arch' | 'layers' | 'nExpert' | 'nExpertUsed'>;

/** The two end-to-end models: two MoE layers each, 8 experts, top-2 (deepseek's layer 0 is dense). */
export const QWEN_Q4K: E2EModel = {
  arch: 'qwen3moe',
  layers: 2,
  nEmbd: 256,
  ff: 256,
  nExpert: 8,
  nExpertUsed: 2,
  type: GGMLType.Q4_K,
  seed: 31,
  expertScale: LOUD,
};
export const DEEPSEEK_Q8: E2EModel = {
  arch: 'deepseek',
  layers: 3,
  nEmbd: 128,
  ff: 128,
  sharedFf: 128,
  nExpert: 8,
  nExpertUsed: 2,
  type: GGMLType.Q8_0,
  seed: 32,
  expertScale: LOUD,
};

/** deepseek's first layer is dense (leading_dense_block_count 1); every other layer routes. */
export function moeLayersOf(c: Pick<ModelConfig, 'arch' | 'layers'>): number[] {
  return Array.from({ length: c.layers }, (_, i) => i).filter((l) => c.arch !== 'deepseek' || l >= 1);
}

const BIN = fileURLToPath(new URL('../bin/expertswarm.js', import.meta.url));

export interface SwarmHub {
  hub: Hub;
  url: string;
  model: string;
  close(): Promise<void>;
}

/** Every answer used at once, nothing audited. */
export const TRUST_OFF = Object.freeze({ ...DEFAULT_TRUST, probation: 0, spotRate: 0 });

export async function startSwarmHub(
  modelPath: string,
  dispatch: DispatchMode,
  over: Partial<HubConfig> = {},
  model = 'm',
  pages: PagesOptions = {},
): Promise<SwarmHub> {
  const config = defaultConfig({
    port: 0,
    stateDir: ':memory:',
    models: [{ path: modelPath, name: model }],
    dispatchMode: dispatch,
    slots: 1,
    channel: { heartbeatMs: 1000, idleTimeoutMs: 10_000 },
    // Volunteers here compute on SwiftShader (CPU) on 2 cores shared with the coordinator and the hub: a work item
    // takes 5–100 ms, more under load. The tests assert what is served, not how fast, so the wait is generous.
    dispatchDeadlineMs: 1000,
    // The data path's tests count what volunteers serve: every answer is used from the first (trust.ts off). The
    // trust tests (test/integration/trust.test.ts) pass their own, the production defaults among them.
    trust: TRUST_OFF,
    ...over,
  });
  config.saturation.targetBase = over.saturation?.targetBase ?? 1;
  const running = await runHub(config, () => {}, pages);
  return { hub: running.hub, url: running.url, model, close: running.close };
}

/** Polls `f` every 100 ms until it gives a value; throws after `ms` naming `what`. */
export async function until<T>(what: string, ms: number, f: () => Promise<T | undefined> | T | undefined): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() - t0 > ms) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Greedy token ids through the hub's OpenAI API; `ban` keeps the random-weight model's output valid UTF-8. */
export async function completionIds(url: string, model: string, prompt: string, n: number, ban: number[]): Promise<number[]> {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model,
      prompt,
      max_tokens: n,
      temperature: 0,
      seed: 1,
      ignore_eos: true,
      logprobs: 1,
      logit_bias: Object.fromEntries(ban.map((id) => [String(id), -100])),
    }),
    signal: AbortSignal.timeout(300_000),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`/v1/completions answered ${r.status}: ${text.slice(0, 400)}`);
  const json = JSON.parse(text) as { choices: Array<{ logprobs?: { content?: Array<{ id: number }> } }> };
  return (json.choices[0]?.logprobs?.content ?? []).map((t) => t.id);
}

/**
 * The tokens a dispatched run must give: `n` greedy tokens after E2E_PROMPT from the same model on a hub of its own
 * with `--dispatch off` (the coordinator alone), closed once it answered.
 */
export async function baselineIds(m: Pick<TestModel, 'path' | 'ban'>, n = E2E_TOKENS): Promise<number[]> {
  const hub = await startSwarmHub(m.path, 'off');
  try {
    const ids = await completionIds(hub.url, hub.model, E2E_PROMPT, n, m.ban);
    assert.equal(ids.length, n, 'the baseline has every token');
    return ids;
  } finally {
    await hub.close();
  }
}

export interface MapRow {
  worker_id: string;
  layer: number;
  experts: [number, number];
  state: string;
  audits: number;
  audits_passed: number;
  audit_nmse_last: number | null;
  audit_nmse_max: number | null;
}

export async function dispatchMap(url: string, model: string): Promise<MapRow[]> {
  const r = await fetch(`${url}/api/expert-dispatch-map?model=${encodeURIComponent(model)}`);
  return ((await r.json()) as { rows: MapRow[] }).rows;
}

/** Waits until every (MoE layer, expert) has at least `replicas` serving workers. */
export async function waitForCoverage(
  url: string,
  model: string,
  moeLayers: readonly number[],
  nExpert: number,
  replicas: number,
  timeoutMs = 120_000,
): Promise<MapRow[]> {
  const until = Date.now() + timeoutMs;
  let rows: MapRow[] = [];
  while (Date.now() < until) {
    rows = await dispatchMap(url, model);
    const covered = moeLayers.every((layer) => {
      const counts = new Int32Array(nExpert);
      for (const r of rows) if (r.layer === layer) for (let e = r.experts[0]; e < r.experts[1]; e++) counts[e] = (counts[e] as number) + 1;
      return counts.every((c) => c >= replicas);
    });
    if (covered) return rows;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`coverage not reached in ${timeoutMs} ms: ${JSON.stringify(rows)}`);
}

/**
 * Waits until every worker of `workerIds` holds a slice (a row of the dispatch map): volunteers hold several slices
 * (issue 27), so the first to load may hold what others wait for until the hub moves some their way (REBALANCE).
 */
export async function waitForHolders(url: string, model: string, workerIds: readonly string[], timeoutMs = 120_000): Promise<MapRow[]> {
  return until(`every volunteer holding a slice (${workerIds.join(', ')})`, timeoutMs, async () => {
    const rows = await dispatchMap(url, model);
    return workerIds.every((id) => rows.some((r) => r.worker_id === id)) ? rows : undefined;
  });
}

/**
 * waitForHolders, and when a volunteer still holds nothing after `rebalanceMs`, one more replica per layer is asked for
 * (`POST /api/admin/target`, the hub started with `adminToken`) and the wait goes on. Every wanted slice may be held
 * by then, and rebalancing gives a slice only to a volunteer at least half as fast as its holder
 * (hub/market/rebalance.ts): on a busy machine the volunteers' speed readings are noisy enough for that to leave one
 * waiting, rightly, where a test needs each to hold a slice.
 */
export async function waitForEveryHolder(
  url: string,
  model: string,
  workerIds: readonly string[],
  opts: { adminToken: string; base: number; rebalanceMs?: number; timeoutMs?: number },
): Promise<MapRow[]> {
  try {
    return await waitForHolders(url, model, workerIds, opts.rebalanceMs ?? 30_000);
  } catch {
    await setTargetBase(url, opts.adminToken, opts.base + 1);
    return waitForHolders(url, model, workerIds, opts.timeoutMs ?? 120_000);
  }
}

/**
 * Waits out the quiet window of a hub's coordinator warm-up (a managed coordinator: its `ready` event dates it). The
 * warm-up (one token, before the coordinator reports ready) finds no worker on any layer, and the dispatcher answers a
 * layer no worker serves LOCAL with its quiet window (DEFAULT_QUIET_MS, 1 s: no exchange per layer while nobody could
 * serve it): the coordinator asks nothing for that layer until the window ends, so a worker wired meanwhile is first
 * asked then. Without this wait, a request made soon after the volunteers joined ran inside the window: the cluster
 * relay's standing test (20 rounds of 8 tokens, 0.6 s) in most runs; "two headless volunteers serve deepseek Q8_0"
 * (64 tokens in 0.2 s, volunteers holding their slices 1 s after the hub started) in about 1 run of 6 here, and in CI:
 * the dispatcher saw only the warm-up's REQUESTs (6 pairs, computed locally) and the volunteers none.
 */
export async function pastWarmUpQuiet(url: string): Promise<void> {
  const r = (await (await fetch(`${url}/api/events?kind=coordinator&limit=200`)).json()) as {
    events: Array<{ atMs: number; detail: string }>;
  };
  const ready = r.events.find((e) => e.detail.startsWith('ready: '));
  assert.ok(ready, `the coordinator's ready event: ${JSON.stringify(r.events)}`);
  const left = ready.atMs + DEFAULT_QUIET_MS + 50 - Date.now();
  if (left > 0) await new Promise((resolve) => setTimeout(resolve, left));
}

/** `POST /api/admin/target {base}` on a hub started with `adminToken`; throws with the hub's answer unless 200. */
export async function setTargetBase(url: string, adminToken: string, base: number): Promise<void> {
  const res = await fetch(`${url}/api/admin/target`, {
    method: 'POST',
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({ base }),
  });
  if (res.status !== 200) throw new Error(`setting the target base to ${base}: ${res.status} ${await res.text()}`);
}

/** `expertswarm_dispatch_pairs_total{model,outcome}` by outcome. */
export async function pairOutcomes(url: string, model: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out: Record<string, number> = { served: 0, fallback: 0, late: 0, rejected: 0 };
  for (const m of text.matchAll(/^expertswarm_dispatch_pairs_total\{model="([^"]+)",outcome="(\w+)"\} (\S+)$/gm)) {
    if (m[1] === model) out[m[2] as string] = Number(m[3]);
  }
  return out;
}

export interface HeadlessVolunteer {
  proc: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

/** `npx expertswarm volunteer` as its own process, with its own key and slice cache. */
export function spawnVolunteer(hubUrl: string, workerId: string, args: string[] = []): HeadlessVolunteer {
  const dir = mkdtempSync(join(tmpdir(), 'xs-vol-'));
  const proc = spawn(
    process.execPath,
    [
      BIN,
      'volunteer',
      '--hub',
      hubUrl,
      '--worker-id',
      workerId,
      '--identity',
      join(dir, 'key.json'),
      '--cache',
      join(dir, 'shards'),
      ...args,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return headlessVolunteer(proc, () => rmSync(dir, { recursive: true, force: true }));
}

/**
 * A volunteer process as a HeadlessVolunteer: the last 20,000 characters of its stdout and stderr kept, and a stop
 * that sends SIGTERM, waits up to 5 s, then SIGKILL; `cleanUp` runs after it (its own folders).
 */
export function headlessVolunteer(proc: ChildProcess, cleanUp: () => void = () => {}): HeadlessVolunteer {
  let out = '';
  const keep = (d: Buffer): void => {
    out = (out + d.toString()).slice(-20_000);
  };
  proc.stdout?.on('data', keep);
  proc.stderr?.on('data', keep);
  return {
    proc,
    output: () => out,
    stop: async () => {
      // A process killed by a signal has exitCode null and its signalCode set: it has exited, nothing to wait for.
      const running = (): boolean => proc.exitCode === null && proc.signalCode === null;
      if (running()) {
        const exited = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
        if (running()) proc.kill('SIGKILL');
      }
      cleanUp();
    },
  };
}
