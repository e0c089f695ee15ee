/**
 * What the data path costs, side by side in one run on one generated model with realistic layer shapes (qwen3moe,
 * n_embd 2048, 128 experts, top-8, ff 768, Q4_K):
 *   1. decode tokens/s of a hub with `--dispatch off` (the coordinator computes every expert) vs one with
 *      `--dispatch always` whose MoE layers are served by headless volunteers (`expertswarm volunteer`). A client
 *      holds one slice, so there is one volunteer process per MoE layer, each with a memory budget for a whole layer;
 *   2. the hub's added latency per layer round trip beyond the worker's own compute, p50/p99 in µs (goal ≤ 100 / 500);
 *   3. bytes on the wire per token per layer, f32 vs f16 (volunteer/wire.ts `wireBytesPerToken`; goal ≤ 12 KB with
 *      f16 at n_embd 2048, top-8), and the bytes counted on the volunteers' TCP connections (`ss -ti`).
 *
 *   npm run bench:dispatch [-- --tokens 48 --rounds 3 --backend auto --sums f32 --layers 2 --quick]
 *
 * `--quick` uses small shapes (n_embd 512, 32 experts, ff 256) for a smoke run. docs/dispatch-bench.md says what
 * each number is and holds the last measurement.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { parseArgs } from 'node:util';
import { GGMLType } from '../gguf/quant-types.ts';
import type { ResponseSummary } from '../hub/dispatch/dispatcher.ts';
import { median } from '../shaders/computer.ts';
import { wasmBytesFor } from '../volunteer/engine-open.ts';
import { wireBytesPerToken, type WireEncoding } from '../volunteer/wire.ts';
import { MODEL_CACHE, testModel } from '../test/support/models.ts';
import {
  pairOutcomes,
  spawnVolunteer,
  startSwarmHub,
  waitForCoverage,
  type HeadlessVolunteer,
  type SwarmHub,
} from '../test/support/swarm.ts';

const { values } = parseArgs({
  options: {
    tokens: { type: 'string', default: '48' },
    rounds: { type: 'string', default: '3' },
    layers: { type: 'string', default: '2' },
    backend: { type: 'string', default: 'auto' },
    sums: { type: 'string', default: 'f32' },
    'budget-mb': { type: 'string' },
    quick: { type: 'boolean', default: false },
  },
});
const N_TOKENS = Number(values.tokens);
const ROUNDS = Number(values.rounds);
const LAYERS = Number(values.layers);
const BACKEND = values.backend;
const SUMS = values.sums as WireEncoding;
if (!['auto', 'webgpu', 'wasm'].includes(BACKEND)) throw new Error(`--backend must be auto, webgpu or wasm, got ${BACKEND}`);
if (SUMS !== 'f32' && SUMS !== 'f16') throw new Error(`--sums must be f32 or f16, got ${SUMS}`);
for (const [name, v] of [
  ['--tokens', N_TOKENS],
  ['--rounds', ROUNDS],
  ['--layers', LAYERS],
] as const) {
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be a positive integer, got ${v}`);
}

const PROMPT = 'The swarm serves a model';
/** The goal's shape (issue 11): what the wire table is computed for whatever model runs. */
const GOAL_SHAPE = { nEmbd: 2048, topK: 8 };
const REALISTIC = { nEmbd: 2048, ff: 768, nExpert: 128, nExpertUsed: 8, nHead: 16, nHeadKv: 4 };
const QUICK = { nEmbd: 512, ff: 256, nExpert: 32, nExpertUsed: 8, nHead: 4, nHeadKv: 1 };
const shape = values.quick ? QUICK : REALISTIC;
const config = { arch: 'qwen3moe', layers: LAYERS, ...shape, type: GGMLType.Q4_K, seed: 11 } as const;
const moeLayers = Array.from({ length: LAYERS }, (_, i) => i);

const startedAt = new Date();
const loadAtStart = loadavg();
const fmtLoad = (l: number[]): string => l.map((x) => x.toFixed(2)).join(' / ');
const log = (line: string): void => console.log(`· ${line}`);

// --- the model (cached by its config in .cache/models: only the first run pays)

const cachedBefore = new Set(existsSync(MODEL_CACHE) ? readdirSync(MODEL_CACHE) : []);
const genStart = performance.now();
log(
  `model: qwen3moe Q4_K, ${LAYERS} MoE layers, n_embd ${shape.nEmbd}, ${shape.nExpert} experts, top-${shape.nExpertUsed}, ff ${shape.ff}…`,
);
const model = await testModel(config);
const genS = (performance.now() - genStart) / 1000;
const generated = !cachedBefore.has(model.path.split('/').pop() as string);
log(`${generated ? `generated in ${genS.toFixed(0)} s` : 'cached'}: ${model.path}`);

// One layer's slice on the wasm fallback (f32 weights) with a margin: the volunteer takes the whole layer on either backend.
const layerWasmMb = wasmBytesFor(shape) / 2 ** 20;
const budgetMb = values['budget-mb'] ? Number(values['budget-mb']) : Math.ceil((layerWasmMb * 1.1) / 64) * 64;

// --- one completion, with the server's own decode timing

interface Completion {
  ids: number[];
  /** llama-server's `timings.predicted_per_second`: decode only, the prompt excluded. */
  decodePerS: number;
}

async function complete(h: SwarmHub, n: number): Promise<Completion> {
  const r = await fetch(`${h.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: h.model,
      prompt: PROMPT,
      max_tokens: n,
      temperature: 0,
      seed: 1,
      ignore_eos: true,
      cache_prompt: false,
      logprobs: 1,
      logit_bias: Object.fromEntries(model.ban.map((id) => [String(id), -100])),
    }),
    signal: AbortSignal.timeout(900_000),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`/v1/completions answered ${r.status}: ${text.slice(0, 400)}`);
  const json = JSON.parse(text) as {
    choices: Array<{ logprobs?: { content?: Array<{ id: number }> } }>;
    timings?: { predicted_per_second?: number };
  };
  const decodePerS = json.timings?.predicted_per_second;
  if (decodePerS === undefined) throw new Error(`the answer has no timings: ${text.slice(0, 200)}`);
  return { ids: (json.choices[0]?.logprobs?.content ?? []).map((t) => t.id), decodePerS };
}

// --- bytes on the volunteers' TCP connections (payload: WebSocket frames, not TCP/IP headers)

/** Why counting failed, for the report. */
let tcpProblem = '';

/** bytes_sent + bytes_received of each established TCP socket of these processes to `port`, by socket. */
function tcpBytes(pids: ReadonlySet<number>, port: number): Map<string, number> | null {
  const r = spawnSync('ss', ['-tinpH', 'state', 'established', `( dport = :${port} )`], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) {
    tcpProblem = `ss: ${r.error?.message ?? r.stderr.trim().slice(0, 200)} (status ${r.status})`;
    return null;
  }
  const out = new Map<string, number>();
  const lines = r.stdout.split('\n');
  for (let i = 0; i + 1 < lines.length; i++) {
    const head = lines[i] as string;
    const pid = /pid=(\d+)/.exec(head);
    if (!pid || !pids.has(Number(pid[1]))) continue;
    const info = lines[i + 1] as string;
    const sent = Number(/bytes_sent:(\d+)/.exec(info)?.[1] ?? 0);
    const received = Number(/bytes_received:(\d+)/.exec(info)?.[1] ?? 0);
    out.set(head.trim().split(/\s+/).slice(2, 4).join(' '), sent + received);
  }
  if (out.size === 0) tcpProblem ||= 'ss listed no socket of the volunteers';
  return out;
}

function bytesSince(before: Map<string, number> | null, after: Map<string, number> | null): number | null {
  if (!before || !after) return null;
  let sum = 0;
  for (const [k, v] of after) sum += v - (before.get(k) ?? 0);
  return sum;
}

// --- statistics

/** Nearest-rank percentile (p in [0, 100]); NaN for none. */
function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] as number;
}

const us = (x: number): string => (Number.isFinite(x) ? `${Math.round(x).toLocaleString('en-US')} µs` : '—');
const kb = (bytes: number): string => `${Math.round(bytes).toLocaleString('en-US')} B (${(bytes / 1024).toFixed(1)} KiB)`;
const pad = (s: string, n: number): string => s.padEnd(n);

// --- the run

/**
 * Engine start of a whole realistic layer blocks the volunteer's event loop for minutes (dequantizing to f32 and
 * creating onnxruntime sessions on the main thread), so no keep-alive gets out meanwhile: the channel's idle and load
 * timeouts are raised for the bench (defaults 45 s and 120 s; see docs/dispatch-bench.md).
 */
const channel = { heartbeatMs: 1000, idleTimeoutMs: 900_000, loadTimeoutMs: 900_000, resultEncoding: SUMS };
const hubs: SwarmHub[] = [];
const volunteers: HeadlessVolunteer[] = [];
async function cleanUp(): Promise<void> {
  for (const v of volunteers.splice(0)) await v.stop();
  for (const h of hubs.splice(0).reverse()) await h.close();
}
// Ctrl-C stops the volunteers (they hold GiBs) and the coordinators too, not only this process.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void cleanUp().finally(() => process.exit(130));
  });
}
try {
  const local = await startSwarmHub(model.path, 'off', { channel });
  hubs.push(local);
  const swarm = await startSwarmHub(model.path, 'always', { channel });
  hubs.push(swarm);
  log(`hubs up: --dispatch off at ${local.url}, --dispatch always at ${swarm.url}`);
  log(
    `${LAYERS} headless volunteers (one per MoE layer: a client holds one slice), --budget-mb ${budgetMb} each (a whole layer: ${Math.round(layerWasmMb)} MiB on the wasm fallback), --backend ${BACKEND}`,
  );
  const loadStart = performance.now();
  for (const layer of moeLayers) {
    volunteers.push(
      spawnVolunteer(swarm.url, `bench-v${layer}`, ['--model', swarm.model, '--budget-mb', String(budgetMb), '--backend', BACKEND]),
    );
  }
  // Download, digest, dequantize and engine start of a whole layer each; the status lines show where they are.
  const loadLimit = Date.now() + 900_000;
  for (;;) {
    const dead = volunteers.find((v) => v.proc.exitCode !== null);
    if (dead) throw new Error(`a volunteer exited (${dead.proc.exitCode}): ${dead.output().slice(-600)}`);
    try {
      await waitForCoverage(swarm.url, swarm.model, moeLayers, shape.nExpert, 1, 20_000);
      break;
    } catch (e) {
      if (Date.now() > loadLimit) throw e;
      for (const v of volunteers) log(`  ${v.output().trim().split('\n').pop() ?? '(no status yet)'}`);
    }
  }
  const loadS = (performance.now() - loadStart) / 1000;
  log(`every MoE layer served after ${loadS.toFixed(0)} s (download, digest, dequantize, engine start)`);
  // The status line is printed once a second: give each a fresh one that names its backend.
  await new Promise((r) => setTimeout(r, 1500));
  const serving = volunteers.map((v) => (v.output().match(/serving [^\n]*/g) ?? []).pop() ?? '?');
  for (const s of serving) log(`  ${s}`);

  log(`warm-up: one ${Math.min(8, N_TOKENS)}-token request per hub`);
  await complete(local, Math.min(8, N_TOKENS));
  await complete(swarm, Math.min(8, N_TOKENS));

  // Measured: only the dispatched hub's requests after the warm-up.
  const responses: ResponseSummary[] = [];
  const channelOverheadUs: number[] = [];
  const roundTripUs: number[] = [];
  const computeUs: number[] = [];
  const insideUs: number[] = [];
  const endToEndUs: number[] = [];
  let lastComputeUs: number | null = null;
  const stopObserving = swarm.hub.observeDispatch(swarm.model, {
    onResult: (_worker, rtMs, cUs) => {
      roundTripUs.push(rtMs * 1000);
      computeUs.push(cUs);
      channelOverheadUs.push(rtMs * 1000 - cUs);
      lastComputeUs = cUs;
    },
    onResponse: (s) => {
      responses.push(s);
      if (s.mode !== 'served') return;
      insideUs.push((s.totalMs - s.settledMs + s.dispatchMs) * 1000);
      // One worker per layer and one request in flight per coordinator slot: its result came just before.
      if (s.workers === 1 && lastComputeUs !== null) endToEndUs.push(s.totalMs * 1000 - lastComputeUs);
      lastComputeUs = null;
    },
  });
  const pids = new Set(volunteers.map((v) => v.proc.pid as number));
  const port = Number(new URL(swarm.url).port);
  const outcomesBefore = await pairOutcomes(swarm.url, swarm.model);
  const localRuns: number[] = [];
  const swarmRuns: number[] = [];
  const ratios: number[] = [];
  let identical = 0;
  let wireBytes: number | null = 0;
  for (let i = 0; i < ROUNDS; i++) {
    // Alternating order, so that the machine's drift (other jobs) hits both alike; the ratio is taken per pair.
    const runSwarm = async (): Promise<Completion> => {
      const before = tcpBytes(pids, port);
      const c = await complete(swarm, N_TOKENS);
      const b = bytesSince(before, tcpBytes(pids, port));
      wireBytes = wireBytes === null || b === null ? null : wireBytes + b;
      return c;
    };
    let a: Completion;
    let b: Completion;
    if (i % 2 === 0) {
      a = await complete(local, N_TOKENS);
      b = await runSwarm();
    } else {
      b = await runSwarm();
      a = await complete(local, N_TOKENS);
    }
    localRuns.push(a.decodePerS);
    swarmRuns.push(b.decodePerS);
    ratios.push(b.decodePerS / a.decodePerS);
    if (a.ids.length === b.ids.length && a.ids.every((id, k) => id === b.ids[k])) identical++;
    log(`round ${i + 1}/${ROUNDS}: off ${a.decodePerS.toFixed(2)} tok/s, always ${b.decodePerS.toFixed(2)} tok/s`);
  }
  stopObserving();
  const outcomesAfter = await pairOutcomes(swarm.url, swarm.model);
  const loadAtEnd = loadavg();

  const delta = (k: string): number => (outcomesAfter[k] ?? 0) - (outcomesBefore[k] ?? 0);
  const routed = delta('served') + delta('fallback') + delta('rejected');
  const dispatchedTokenLayers = responses.filter((s) => s.workers > 0).reduce((n, s) => n + s.pairs / shape.nExpertUsed, 0);

  // --- the report

  const line = '─'.repeat(100);
  console.log(`\n${line}`);
  console.log(`bench:dispatch  ${startedAt.toISOString()}`);
  console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB; node ${process.version}`);
  console.log(`load average (1/5/15 min): start ${fmtLoad(loadAtStart)}, end ${fmtLoad(loadAtEnd)}`);
  console.log(
    `model: qwen3moe Q4_K, ${LAYERS} MoE layers, n_embd ${shape.nEmbd}, ${shape.nExpert} experts, top-${shape.nExpertUsed}, ff ${shape.ff}, ${shape.nHead} heads (${shape.nHeadKv} kv)${values.quick ? '  [--quick: NOT the realistic shape]' : ''}`,
  );
  console.log(`  ${generated ? `generated in ${genS.toFixed(0)} s` : 'from the cache'} (.cache/models, keyed by its config)`);
  console.log(
    `volunteers: ${LAYERS} headless processes, one per MoE layer (a client holds one slice), --budget-mb ${budgetMb} each, --backend ${BACKEND}`,
  );
  for (const [i, s] of serving.entries()) console.log(`  v${i}: ${s}`);
  console.log(`  all layers served ${loadS.toFixed(0)} s after the volunteers started (download + dequantize + engine start)`);
  console.log(
    `requests: /v1/completions, greedy, ${N_TOKENS} tokens after "${PROMPT}", ${ROUNDS} alternating pairs after one warm-up each`,
  );

  console.log(`\n1. decode tokens/s (llama-server timings.predicted_per_second)`);
  const runs = (xs: number[]): string => `${xs.map((x) => x.toFixed(2)).join('  ')}   median ${median(xs).toFixed(2)}`;
  console.log(`   ${pad('--dispatch off (local)', 44)}${runs(localRuns)}`);
  console.log(`   ${pad(`--dispatch always (${LAYERS} volunteers)`, 44)}${runs(swarmRuns)}`);
  console.log(`   ${pad('always / off', 44)}${median(ratios).toFixed(3)} (median of per-pair ratios)`);
  console.log(
    `   pairs: ${delta('served')} served, ${delta('fallback')} fallback, ${delta('late')} late, ${delta('rejected')} rejected of ${routed} routed (${routed > 0 ? ((100 * delta('served')) / routed).toFixed(1) : '—'}% served)`,
  );
  console.log(`   token ids identical to --dispatch off in ${identical} of ${ROUNDS} pairs`);

  console.log(`\n2. the hub's added latency per layer round trip, beyond the worker's own compute       [goal p50 ≤ 100 µs, p99 ≤ 500 µs]`);
  const row = (name: string, xs: number[]): void =>
    console.log(`   ${pad(name, 62)}p50 ${pad(us(percentile(xs, 50)), 12)} p99 ${pad(us(percentile(xs, 99)), 12)} n ${xs.length}`);
  row('a. channel: roundTripMs×1000 − computeUs', channelOverheadUs);
  row('b. inside the dispatcher: totalMs − settledMs + dispatchMs', insideUs);
  row('c. REQUEST arrival → RESPONSE written, minus computeUs', endToEndUs);
  row('   (context) channel round trip', roundTripUs);
  row("   (context) worker's computeUs", computeUs);
  console.log(`   a: from handing the encoded work frame to the WebSocket to the decoded result, less the worker's own time
      (computeUs: from the frame's arrival at the client, its decode included, to its sums): loopback TCP both ways,
      the ws libraries, the client's event-loop wait and result encoding, the hub's result decoding.
   b: the dispatcher's own work per REQUEST: arrival → work frames handed to the links (plan, row gather, frame
      encoding), plus the last answer → RESPONSE written (merge, encode, write).
   c: everything between the coordinator's REQUEST read by the dispatcher and its RESPONSE written, less the worker's
      compute (≈ a + b); the coordinator ↔ dispatcher unix socket transfer is on the coordinator's side, not here.`);

  console.log(
    `\n3. bytes on the wire per token per MoE layer (work + result frames, our headers and WebSocket framing)   [goal ≤ 12 KB with f16]`,
  );
  const shapes = [GOAL_SHAPE, ...(values.quick ? [{ nEmbd: shape.nEmbd, topK: shape.nExpertUsed }] : [])];
  for (const s of shapes) {
    for (const [rows, sums, note] of [
      ['f32', 'f32', "the hub's default"],
      ['f32', 'f16', 'channel resultEncoding f16 (rows are always f32 today)'],
      ['f16', 'f16', 'f16 both ways (the wire supports it)'],
    ] as const) {
      const b = wireBytesPerToken({ nEmbd: s.nEmbd, topK: s.topK, rowEncoding: rows, resultEncoding: sums });
      console.log(
        `   n_embd ${s.nEmbd} top-${s.topK}, rows ${rows} sums ${sums}: ${pad(kb(b.total), 22)} (work ${Math.round(b.work)} + result ${Math.round(b.result)})  ${note}`,
      );
    }
  }
  const modelShape = wireBytesPerToken({ nEmbd: shape.nEmbd, topK: shape.nExpertUsed, rowEncoding: 'f32', resultEncoding: SUMS });
  if (wireBytes !== null && dispatchedTokenLayers > 0) {
    console.log(
      `   measured, rows f32 sums ${SUMS}: ${kb(wireBytes / dispatchedTokenLayers)} per token per layer — ${wireBytes.toLocaleString('en-US')} B of TCP payload on the volunteers' sockets (ss -ti) over ${dispatchedTokenLayers} dispatched token-layers`,
    );
    console.log(
      `     (formula for this model: ${kb(modelShape.total)}; the measurement also counts heartbeats and the prompt's batched frame)`,
    );
  } else {
    console.log(`   measured: not available (${wireBytes === null ? tcpProblem : 'nothing was dispatched'})`);
  }
  console.log(line);
} finally {
  await cleanUp();
}
