/**
 * What the data path costs, side by side in one run, on generated qwen3moe Q4_K models with realistic layer shapes
 * (n_embd 2048, top-8, ff 768):
 *   1. decode tokens/s of a hub with `--dispatch off` (the coordinator computes every expert) vs one with
 *      `--dispatch always` whose MoE layers are served by headless volunteers (`expertswarm volunteer`). A client
 *      holds one slice, so there is one volunteer process per MoE layer, each with a memory budget for a whole layer;
 *   2. the hub's added latency per layer round trip beyond the worker's own compute, p50/p99 in µs (goal ≤ 100 / 500);
 *   3. bytes on the wire per token per layer, f32 vs f16 (protocol/channel/wire-cost.ts `wireBytesPerToken`; goal ≤ 12 KB with
 *      f16 at n_embd 2048, top-8), and the bytes counted on the volunteers' TCP connections (`ss -ti`).
 *
 * Two models, one after the other:
 *   realistic   128 experts per layer: the shape the issue asks for.
 *   frames      8 experts per layer, everything else the same. Its work and result frames are byte for byte the size of
 *               the realistic model's (rows of n_embd, top-8 pairs), but a CPU volunteer answers within the
 *               dispatcher's deadline (≤ 225 ms per layer by default), which on a machine without a GPU it cannot do for 128
 *               experts. Where the realistic volunteers fall back, the hub's latency is read here.
 *
 *   npm run bench:dispatch [-- --tokens 32 --rounds 5 --models realistic,frames --backend auto --sums f32 --layers 2
 *                              --threads N --budget-mb N --deadline-ms 250 --samples FILE --quick --pin 0:1]
 *
 * `--pin C:H` (default 0:1; `none`, or a machine of one core: no pinning): every thread of the coordinators and the
 * volunteers on cores C, this process (the hubs) on cores H (taskset lists), so that the hub has a core of its own.
 * On this project's 2-vCPU guest it did not move the hub's share (2026-12-07, frames model: b1 p50 357 µs pinned, 373
 * unpinned; docs/dispatch-bench.md says what does).
 *
 * `--samples FILE` writes every ResponseSummary and channel result of the measured requests as JSON, for analysis.
 *
 * `--quick`: one small model (n_embd 512, 32 experts, ff 256) for a smoke run. docs/dispatch-bench.md says what each
 * number is and holds the last measurement.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, freemem, loadavg, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { ResponseSummary } from '../hub/dispatch/dispatcher.ts';
import type { WorkTimings } from '../volunteer/client.ts';
import { DEFAULT_DEADLINES, requestBudgetMs } from '../hub/dispatch/plan.ts';
import { median } from '../shaders/computer.ts';
import { decodeResult, decodeWork, encodeResult, encodeWork, wireBytesPerToken, type WireEncoding } from '../protocol/channel/index.ts';
import { pin } from './placement.ts';
import { type BenchModel, FRAMES, QUICK, REALISTIC, type Shape, benchModel, describeShape, volunteerBudget } from './shapes.ts';
import { pairOutcomes, spawnVolunteer, startSwarmHub, waitForCoverage, type HeadlessVolunteer, type SwarmHub } from '../harness/swarm.ts';

const { values } = parseArgs({
  options: {
    tokens: { type: 'string', default: '32' },
    rounds: { type: 'string', default: '5' },
    layers: { type: 'string', default: '2' },
    backend: { type: 'string', default: 'auto' },
    sums: { type: 'string', default: 'f32' },
    'budget-mb': { type: 'string' },
    threads: { type: 'string' },
    models: { type: 'string', default: 'realistic,frames' },
    samples: { type: 'string' },
    'deadline-ms': { type: 'string', default: '250' },
    quick: { type: 'boolean', default: false },
    pin: { type: 'string', default: '0:1' },
  },
});
const N_TOKENS = Number(values.tokens);
const ROUNDS = Number(values.rounds);
const LAYERS = Number(values.layers);
const BACKEND = values.backend;
const SUMS = values.sums as WireEncoding;
/** The hubs' `--dispatch-deadline-ms`; the dispatcher gives a worker this less its margin. */
const DEADLINE_MS = Number(values['deadline-ms']);
const WORKER_BUDGET_MS = requestBudgetMs(DEADLINE_MS * 1000, { ...DEFAULT_DEADLINES, capMs: DEADLINE_MS });
/**
 * The coordinators' threads (-t). The hub, its coordinator and the volunteers share this machine: by default each
 * volunteer and the hub keep a core, because llama.cpp's default (all cores) spins at its barriers while a dispatched
 * layer waits, and on 2 cores shared with other jobs that made decode swing 40× from one request to the next.
 */
const THREADS = values.threads === undefined ? Math.max(1, cpus().length - 1 - LAYERS) : Number(values.threads);
if (!['auto', 'webgpu', 'wasm'].includes(BACKEND)) throw new Error(`--backend must be auto, webgpu or wasm, got ${BACKEND}`);
if (SUMS !== 'f32' && SUMS !== 'f16') throw new Error(`--sums must be f32 or f16, got ${SUMS}`);
for (const [name, v] of [
  ['--tokens', N_TOKENS],
  ['--rounds', ROUNDS],
  ['--layers', LAYERS],
  ['--threads', THREADS],
  ['--deadline-ms', DEADLINE_MS],
  ['--budget-mb', values['budget-mb'] === undefined ? 1 : Number(values['budget-mb'])],
] as const) {
  if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be a positive integer, got ${v}`);
}

/** `--pin`: cores for the coordinators and volunteers, and for this process (the hubs); null: not pinned. */
const PIN = ((): { rest: string; hub: string } | null => {
  if (values.pin === 'none' || cpus().length < 2) return null;
  const m = /^([\d,-]+):([\d,-]+)$/.exec(values.pin);
  if (!m) throw new Error(`--pin takes C:H (taskset lists) or none, got ${values.pin}`);
  return { rest: m[1] as string, hub: m[2] as string };
})();
const placement: string[] = [];

const PROMPT = 'The swarm serves a model';
/** The goal's shape (issue 11): the wire table is computed for it whatever model runs. */
const GOAL_SHAPE = { nEmbd: 2048, topK: 8 };

const SHAPES = values.quick
  ? [QUICK]
  : values.models.split(',').map((name) => {
      const s = [REALISTIC, FRAMES].find((x) => x.name === name);
      if (!s) throw new Error(`--models takes realistic and/or frames, got "${name}"`);
      return s;
    });

const startedAt = new Date();
const loadAtStart = loadavg();
const fmtLoad = (l: number[]): string => l.map((x) => x.toFixed(2)).join(' / ');
const log = (line: string): void => console.log(`· ${line}`);
const describe = (s: Shape): string => describeShape(s, LAYERS);
const budgetFor = (s: Shape): { mb: number; q4kMb: number; wasmMb: number } =>
  volunteerBudget(s, values['budget-mb'] ? Number(values['budget-mb']) : undefined);

// --- the models (cached by config in .cache/models: only the first run pays)

type Made = BenchModel;

const makeModel = (s: Shape): Promise<Made> => benchModel(s, LAYERS, log);

// --- one completion, with the server's own decode timing

interface Completion {
  ids: number[];
  /** llama-server's `timings.predicted_per_second`: decode only, the prompt excluded. */
  decodePerS: number;
}

async function complete(h: SwarmHub, ban: number[], n: number): Promise<Completion> {
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
      logit_bias: Object.fromEntries(ban.map((id) => [String(id), -100])),
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

const us = (x: number): string =>
  !Number.isFinite(x) ? '—' : Math.abs(x) < 10 ? `${x.toFixed(1)} µs` : `${Math.round(x).toLocaleString('en-US')} µs`;
const kb = (bytes: number): string => `${Math.round(bytes).toLocaleString('en-US')} B (${(bytes / 1024).toFixed(1)} KiB)`;
const pad = (s: string, n: number): string => s.padEnd(n);

// --- the codec's own CPU per round trip (no sockets, no scheduling): the floor under a and b below

interface CodecCost {
  sums: WireEncoding;
  /** encodeWork + decodeResult, µs per round trip. */
  hubUs: number;
  /** decodeWork + encodeResult, µs per round trip. */
  clientUs: number;
}

/** One decode token's frames at n_embd 2048, top-8, timed in a loop: median of 7 batches of 2,000. */
function codecCost(sums: WireEncoding): CodecCost {
  const { nEmbd, topK } = GOAL_SHAPE;
  const rows = Float32Array.from({ length: nEmbd }, (_, i) => Math.sin(i));
  const weight = Float32Array.from({ length: topK }, () => 1 / topK);
  const work = {
    workId: 1,
    assignmentId: 1,
    nRows: 1,
    nEmbd,
    rows,
    rowIndex: new Uint16Array(topK),
    localExpert: Uint16Array.from({ length: topK }, (_, k) => k),
    weight,
    rowEncoding: 'f32' as const,
    resultEncoding: sums,
  };
  const result = { workId: 1, nRows: 1, nEmbd, sums: rows, encoding: sums, computeUs: 1 };
  const workFrame = encodeWork(work);
  const resultFrame = encodeResult(result);
  const time = (f: () => void): number => {
    const batches: number[] = [];
    for (let b = 0; b < 8; b++) {
      const t0 = performance.now();
      for (let i = 0; i < 2000; i++) f();
      if (b > 0) batches.push(((performance.now() - t0) * 1000) / 2000);
    }
    return median(batches);
  };
  const hubUs = time(() => {
    encodeWork(work);
    decodeResult(resultFrame, { workId: 1, nRows: 1, nEmbd, encoding: sums });
  });
  const clientUs = time(() => {
    decodeWork(workFrame);
    encodeResult(result);
  });
  return { sums, hubUs, clientUs };
}

// --- one model: two hubs, the volunteers, alternating requests

interface PhaseResult {
  made: Made;
  budgetMb: number;
  serving: string[];
  loadS: number;
  local: number[];
  swarm: number[];
  ratio: number;
  identical: number;
  outcomes: Record<string, number>;
  /** a: roundTripMs×1000 − computeUs per result. */
  channelUs: number[];
  roundTripUs: number[];
  computeUs: number[];
  /** b: totalMs − settledMs + dispatchMs per served REQUEST, and its two parts. */
  insideUs: number[];
  dispatchUs: number[];
  answerUs: number[];
  /** c: totalMs×1000 − computeUs per served REQUEST with one worker. */
  endToEndUs: number[];
  /** d: the volunteers' own share per work frame (`--timings`): arrival → result sent, less the engine call. */
  volunteerUs: number[];
  /** d1: arrival → engine call (decoding, queueing); d2: engine returned → result sent (check, encode, send). */
  volunteerInUs: number[];
  volunteerOutUs: number[];
  engineUs: number[];
  /** totalMs of the served one-token (decode) REQUESTs, µs: the dispatcher's whole window per layer. */
  decodeWindowUs: number[];
  /** TCP payload on the volunteers' sockets during the dispatched requests; null when not counted. */
  wireBytes: number | null;
  /** Token rows of the dispatched REQUESTs. */
  tokenLayers: number;
  /** The raw readings (`--samples`). */
  responses: ResponseSummary[];
  results: Array<{ workerId: string; roundTripMs: number; computeUs: number }>;
}

/**
 * Engine start of a whole layer can block the volunteer's event loop for minutes (dequantizing, creating onnxruntime
 * sessions, compiling pipelines on a software adapter), so no keep-alive gets out meanwhile: the channel's idle and
 * load timeouts are raised for the bench (defaults 45 s and 120 s).
 */
const CHANNEL = { heartbeatMs: 1000, idleTimeoutMs: 900_000, loadTimeoutMs: 900_000, resultEncoding: SUMS };

const hubs: SwarmHub[] = [];
const volunteers: HeadlessVolunteer[] = [];
async function cleanUp(): Promise<void> {
  for (const v of volunteers.splice(0)) await v.stop();
  for (const h of hubs.splice(0).reverse()) await h.close();
}
// Ctrl-C stops the volunteers (they may hold GiBs) and the coordinators too, not only this process.
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void cleanUp().finally(() => process.exit(130));
  });
}

async function runPhase(made: Made): Promise<PhaseResult> {
  const { shape, model } = made;
  const moeLayers = Array.from({ length: LAYERS }, (_, i) => i);
  const over = { channel: CHANNEL, threads: THREADS, dispatchDeadlineMs: DEADLINE_MS };
  const local = await startSwarmHub(model.path, 'off', over);
  hubs.push(local);
  if (PIN && placement.length === 0) placement.push(pin(`this process (the hubs; taskset -a -cp ${PIN.hub})`, process.pid, PIN.hub));
  const swarm = await startSwarmHub(model.path, 'always', over);
  hubs.push(swarm);
  const budget = budgetFor(shape);
  log(`${shape.name}: hubs up (--dispatch off ${local.url}, --dispatch always ${swarm.url})`);
  log(
    `  ${LAYERS} headless volunteers, one per MoE layer, --budget-mb ${budget.mb} (a layer: ${Math.round(budget.q4kMb)} MiB Q4_K, ${Math.round(budget.wasmMb)} MiB with the wasm kernel's scratch), --backend ${BACKEND}`,
  );
  const t0 = performance.now();
  const mine: HeadlessVolunteer[] = [];
  // Each volunteer writes its work frames' timings here when it stops (the volunteer side's split, d below).
  const timingsDir = mkdtempSync(join(tmpdir(), 'xs-timings-'));
  const timingFiles = moeLayers.map((layer) => join(timingsDir, `v${layer}.json`));
  for (const layer of moeLayers) {
    const args = [
      '--model',
      swarm.model,
      '--budget-mb',
      String(budget.mb),
      '--backend',
      BACKEND,
      '--timings',
      timingFiles[layer] as string,
    ];
    mine.push(spawnVolunteer(swarm.url, `${shape.name}-v${layer}`, args));
  }
  volunteers.push(...mine);
  if (PIN) {
    const lines = [...placement];
    for (const h of [local, swarm]) {
      const pid = h.hub.coordinatorProcess(h.model)?.pid;
      if (pid === undefined) throw new Error('a hub has no coordinator process');
      lines.push(pin(`coordinator ${h === local ? 'off' : 'always'} (taskset -a -cp ${PIN.rest})`, pid, PIN.rest));
    }
    for (const v of mine) lines.push(pin(`volunteer ${v.proc.pid} (taskset -a -cp ${PIN.rest})`, v.proc.pid as number, PIN.rest));
    for (const l of lines) log(`  ${l}`);
  }
  const loadLimit = Date.now() + 900_000;
  for (;;) {
    const dead = mine.find((v) => v.proc.exitCode !== null);
    if (dead) throw new Error(`a volunteer exited (${dead.proc.exitCode}): ${dead.output().slice(-600)}`);
    try {
      await waitForCoverage(swarm.url, swarm.model, moeLayers, shape.nExpert, 1, 20_000);
      break;
    } catch (e) {
      if (Date.now() > loadLimit) throw e;
      for (const v of mine) log(`  ${v.output().trim().split('\n').pop() ?? '(no status yet)'}`);
    }
  }
  const loadS = (performance.now() - t0) / 1000;
  log(`  every MoE layer served after ${loadS.toFixed(0)} s (download, digest, engine start)`);
  // The status line comes once a second: wait for one that names the backend.
  await new Promise((r) => setTimeout(r, 1500));
  const serving = mine.map((v) => (v.output().match(/serving [^\n]*/g) ?? []).pop()?.replace(/ · wallet \w+/, '') ?? '?');

  log(`  warm-up: one ${Math.min(8, N_TOKENS)}-token request per hub`);
  await complete(local, model.ban, Math.min(8, N_TOKENS));
  await complete(swarm, model.ban, Math.min(8, N_TOKENS));

  // Measured: the dispatched hub's requests after the warm-up.
  const responses: ResponseSummary[] = [];
  const results: PhaseResult['results'] = [];
  const r: Omit<PhaseResult, 'made' | 'budgetMb' | 'serving' | 'loadS' | 'ratio' | 'outcomes' | 'tokenLayers' | 'responses' | 'results'> = {
    local: [],
    swarm: [],
    identical: 0,
    channelUs: [],
    roundTripUs: [],
    computeUs: [],
    insideUs: [],
    dispatchUs: [],
    answerUs: [],
    endToEndUs: [],
    volunteerUs: [],
    volunteerInUs: [],
    volunteerOutUs: [],
    engineUs: [],
    decodeWindowUs: [],
    wireBytes: 0,
  };
  let lastComputeUs: number | null = null;
  const stopObserving = swarm.hub.observeDispatch(swarm.model, {
    onResult: (workerId, rtMs, cUs) => {
      results.push({ workerId, roundTripMs: rtMs, computeUs: cUs });
      r.roundTripUs.push(rtMs * 1000);
      r.computeUs.push(cUs);
      r.channelUs.push(rtMs * 1000 - cUs);
      lastComputeUs = cUs;
    },
    onResponse: (s) => {
      responses.push(s);
      if (s.mode !== 'served') return;
      r.insideUs.push((s.totalMs - s.settledMs + s.dispatchMs) * 1000);
      r.dispatchUs.push(s.dispatchMs * 1000);
      r.answerUs.push((s.totalMs - s.settledMs) * 1000);
      if (s.pairs === shape.nExpertUsed) r.decodeWindowUs.push(s.totalMs * 1000);
      // One worker per layer and one request in flight (one slot): its result came just before.
      if (s.workers === 1 && lastComputeUs !== null) r.endToEndUs.push(s.totalMs * 1000 - lastComputeUs);
      lastComputeUs = null;
    },
  });
  const pids = new Set(mine.map((v) => v.proc.pid as number));
  const port = Number(new URL(swarm.url).port);
  const outcomesBefore = await pairOutcomes(swarm.url, swarm.model);
  const ratios: number[] = [];
  const measuredFromMs = Date.now();
  const runSwarm = async (): Promise<Completion> => {
    const before = tcpBytes(pids, port);
    const c = await complete(swarm, model.ban, N_TOKENS);
    const b = bytesSince(before, tcpBytes(pids, port));
    r.wireBytes = r.wireBytes === null || b === null ? null : r.wireBytes + b;
    return c;
  };
  for (let i = 0; i < ROUNDS; i++) {
    // Alternating order, so that the machine's drift (other jobs) hits both alike; the ratio is taken per pair.
    let a: Completion;
    let b: Completion;
    if (i % 2 === 0) {
      a = await complete(local, model.ban, N_TOKENS);
      b = await runSwarm();
    } else {
      b = await runSwarm();
      a = await complete(local, model.ban, N_TOKENS);
    }
    r.local.push(a.decodePerS);
    r.swarm.push(b.decodePerS);
    ratios.push(b.decodePerS / a.decodePerS);
    if (a.ids.length === b.ids.length && a.ids.every((id, k) => id === b.ids[k])) r.identical++;
    log(`  round ${i + 1}/${ROUNDS}: off ${a.decodePerS.toFixed(2)} tok/s, always ${b.decodePerS.toFixed(2)} tok/s`);
  }
  stopObserving();
  const measuredToMs = Date.now();
  const outcomesAfter = await pairOutcomes(swarm.url, swarm.model);
  const outcomes: Record<string, number> = {};
  for (const k of Object.keys(outcomesAfter)) outcomes[k] = (outcomesAfter[k] ?? 0) - (outcomesBefore[k] ?? 0);
  const tokenLayers = responses.filter((s) => s.workers > 0).reduce((n, s) => n + s.pairs / shape.nExpertUsed, 0);

  for (const v of volunteers.splice(0)) await v.stop();
  for (const h of hubs.splice(0).reverse()) await h.close();
  for (const f of timingFiles) {
    if (!existsSync(f)) continue;
    for (const t of JSON.parse(readFileSync(f, 'utf8')) as WorkTimings[]) {
      if (t.atMs < measuredFromMs || t.atMs > measuredToMs) continue; // warm-up, or the other hub's window
      r.volunteerUs.push(t.sentUs - t.engineUs);
      r.volunteerInUs.push(t.startUs);
      r.volunteerOutUs.push(t.sentUs - t.startUs - t.engineUs);
      r.engineUs.push(t.engineUs);
    }
  }
  rmSync(timingsDir, { recursive: true, force: true });
  return { ...r, made, budgetMb: budget.mb, serving, loadS, ratio: median(ratios), outcomes, tokenLayers, responses, results };
}

// --- the run

const codec = [codecCost('f32'), codecCost('f16')];
const made: Made[] = [];
for (const s of SHAPES) made.push(await makeModel(s));
const results: PhaseResult[] = [];
try {
  for (const m of made) results.push(await runPhase(m));
} finally {
  await cleanUp();
}
const loadAtEnd = loadavg();
if (values.samples) {
  const raw = Object.fromEntries(results.map((p) => [p.made.shape.name, { responses: p.responses, results: p.results }]));
  writeFileSync(values.samples, JSON.stringify(raw));
}

// --- the report

const line = '─'.repeat(110);
console.log(`\n${line}`);
console.log(`bench:dispatch  ${startedAt.toISOString()}`);
console.log(
  `machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB (${(freemem() / 2 ** 30).toFixed(0)} free at the end); node ${process.version}`,
);
console.log(`load average (1/5/15 min): start ${fmtLoad(loadAtStart)}, end ${fmtLoad(loadAtEnd)}`);
console.log(
  `requests: /v1/completions, greedy, ${N_TOKENS} tokens after "${PROMPT}", ${ROUNDS} alternating pairs (off, always) after one warm-up each; coordinator threads (-t): ${THREADS}; ${PIN ? `pinned: coordinators and volunteers on ${PIN.rest}, the hubs on ${PIN.hub}` : 'not pinned'}; --dispatch-deadline-ms ${DEADLINE_MS} (a worker gets ≤ ${WORKER_BUDGET_MS} ms per layer)`,
);
console.log(
  `volunteers: one headless process per MoE layer (a client holds one slice), each assigned a whole layer by the market; --backend ${BACKEND}`,
);
for (const p of results) {
  const gen = p.made.generatedS === null ? 'from the cache' : `generated in ${p.made.generatedS.toFixed(0)} s`;
  console.log(`  ${pad(p.made.shape.name, 10)}${describe(p.made.shape)}; ${gen}`);
  console.log(`  ${pad('', 10)}--budget-mb ${p.budgetMb}; all layers served ${p.loadS.toFixed(0)} s after the volunteers started`);
  for (const [i, s] of p.serving.entries()) console.log(`  ${pad('', 10)}v${i}: ${s}`);
}

console.log(`\n1. decode tokens/s (llama-server timings.predicted_per_second)`);
const runs = (xs: number[]): string => `${pad(xs.map((x) => x.toFixed(2)).join('  '), 36)} median ${median(xs).toFixed(2)}`;
for (const p of results) {
  const o = p.outcomes;
  const routed = (o.served ?? 0) + (o.fallback ?? 0) + (o.rejected ?? 0);
  const servedPct = routed > 0 ? (100 * (o.served ?? 0)) / routed : NaN;
  console.log(`   ${p.made.shape.name} (${p.made.shape.nExpert} experts)`);
  console.log(`     ${pad('--dispatch off (local)', 40)}${runs(p.local)}`);
  console.log(`     ${pad(`--dispatch always (${LAYERS} volunteers)`, 40)}${runs(p.swarm)}`);
  console.log(`     ${pad('always / off', 40)}${p.ratio.toFixed(3)} (median of per-pair ratios)`);
  console.log(
    `     pairs: ${o.served} served, ${o.fallback} fallback, ${o.late} late, ${o.rejected} rejected of ${routed} routed (${servedPct.toFixed(1)}% served); token ids identical to off in ${p.identical} of ${ROUNDS}`,
  );
  const perToken = 1e6 / median(p.swarm);
  const inDispatcher = LAYERS * percentile(p.decodeWindowUs, 50);
  if (Number.isFinite(inDispatcher))
    console.log(
      `     a dispatched token takes ${us(perToken)}: ${LAYERS} × ${us(inDispatcher / LAYERS)} (p50 REQUEST → RESPONSE at the dispatcher) + ${us(perToken - inDispatcher)} elsewhere (the coordinator's own graph, the unix socket, waiting for a core)`,
    );
  if (!(servedPct >= 90)) {
    console.log(
      `     → the volunteers did not answer within the dispatcher's deadline (≤ ${WORKER_BUDGET_MS} ms per layer; their compute p50 ${us(percentile(p.computeUs, 50))}):`,
    );
    console.log(`       missed pairs fell back to the coordinator, so "always" here is not the speed of a served swarm.`);
  }
}

console.log(`\n2. the hub's added latency per layer round trip, beyond the worker's own compute   [goal p50 ≤ 100 µs, p99 ≤ 500 µs]`);
const row = (name: string, xs: number[]): void =>
  console.log(
    `     ${pad(name, 62)}p50 ${pad(us(percentile(xs, 50)), 13)} p99 ${pad(us(percentile(xs, 99)), 13)} p10 ${pad(us(percentile(xs, 10)), 11)} n ${xs.length}`,
  );
for (const p of results) {
  console.log(`   ${p.made.shape.name} (${p.made.shape.nExpert} experts)`);
  row('a. channel: roundTripMs×1000 − computeUs', p.channelUs);
  row('b. inside the dispatcher: totalMs − settledMs + dispatchMs', p.insideUs);
  row('   b1. REQUEST → work handed to the links: dispatchMs', p.dispatchUs);
  row('   b2. last answer → RESPONSE written: totalMs − settledMs', p.answerUs);
  row('c. REQUEST arrival → RESPONSE written − computeUs', p.endToEndUs);
  row('   (context) channel round trip', p.roundTripUs);
  row("   (context) the worker's computeUs", p.computeUs);
  row('d. volunteer: frame in → result sent − engine call', p.volunteerUs);
  row('   d1. frame in → engine call starts (decode, queue)', p.volunteerInUs);
  row('   d2. engine returned → result sent (check, encode, send)', p.volunteerOutUs);
  row('   (context) the engine call (the kernels)', p.engineUs);
}
for (const c of codec)
  console.log(
    `   floor, sums ${c.sums}: the wire codec's CPU per round trip at n_embd 2048, top-8 (in-process loop): hub ${us(c.hubUs)} (encodeWork + decodeResult), client ${us(c.clientUs)} (decodeWork + encodeResult)`,
  );
console.log(`   a: from handing the encoded work frame to the WebSocket to the decoded result (VolunteerChannel.onResult), less
      the worker's own time (computeUs: from the frame's arrival at the client, its decoding included, to its sums):
      loopback TCP both ways, the ws libraries, the client's event-loop wait and result encoding, the hub's decoding.
   b: the dispatcher's own work per REQUEST (ResponseSummary): arrival → work frames handed to the links (plan, row
      gather, frame encoding), plus the last answer → RESPONSE written (merge, encode, write).
   c: the REQUEST's arrival at the dispatcher → its RESPONSE written, less the worker's compute (≈ a + b, one worker
      per layer). The coordinator ↔ dispatcher unix socket is on the coordinator's side of these clocks.
   d: the volunteer's own share per work frame of the measured requests, as it times itself (volunteer --timings):
      the frame's message event → its result handed to the socket, less the engine call; a part of a.
   All are wall-clock intervals on a machine whose cores the hub, the coordinator and the volunteers share: a frame
   written to loopback wakes its reader, which may take the hub's core for a slice (ms) inside any of them. p10 shows
   the floor without such waits; the codec lines show what encoding and decoding themselves cost.`);

console.log(
  `\n3. bytes on the wire per token per MoE layer (work + result frames, our headers and WebSocket framing)   [goal ≤ 12 KB with f16]`,
);
const wireShapes = [GOAL_SHAPE, ...results.map((p) => ({ nEmbd: p.made.shape.nEmbd, topK: p.made.shape.nExpertUsed }))].filter(
  (s, i, all) => all.findIndex((t) => t.nEmbd === s.nEmbd && t.topK === s.topK) === i,
);
for (const s of wireShapes) {
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
for (const p of results) {
  const s = p.made.shape;
  const formula = wireBytesPerToken({ nEmbd: s.nEmbd, topK: s.nExpertUsed, rowEncoding: 'f32', resultEncoding: SUMS });
  const o = p.outcomes;
  const routed = (o.served ?? 0) + (o.fallback ?? 0) + (o.rejected ?? 0);
  if (p.wireBytes === null) console.log(`   measured (${s.name}): not available (${tcpProblem})`);
  else if (p.tokenLayers === 0) console.log(`   measured (${s.name}): nothing was dispatched`);
  else if ((o.served ?? 0) < 0.9 * routed)
    console.log(
      `   measured (${s.name}): not per token — ${p.wireBytes.toLocaleString('en-US')} B over ${p.tokenLayers} token-layers, mostly heartbeats and probes of a benched worker`,
    );
  else {
    console.log(
      `   measured (${s.name}), rows f32 sums ${SUMS}: ${kb(p.wireBytes / p.tokenLayers)} per token per layer (formula ${kb(formula.total)})`,
    );
    console.log(
      `     ${p.wireBytes.toLocaleString('en-US')} B of TCP payload on the volunteers' sockets (ss -ti) over ${p.tokenLayers} token-layers of REQUESTs sent to a worker; heartbeats and the prompt's batched frames included`,
    );
  }
}
console.log(line);
