/**
 * The elastic gain (issue 13): aggregate decode and prompt tokens/s of a saturated coordinator alone against the same
 * coordinator with the swarm, side by side in one run, on a generated qwen3moe Q4_K model with realistic layer shapes
 * (n_embd 2048, 128 experts, top-8, ff 768; two MoE layers).
 *
 *   A  a hub with `--dispatch off`: the coordinator alone;
 *   B  a hub with `--dispatch auto` and one headless volunteer per MoE layer (`expertswarm volunteer`, a whole layer's
 *      budget), recruited by the market when the load saturates the coordinator.
 *
 * Both hubs run their coordinator (linkcpp-server) with 4 slots (`--slots`) and `-t 1`, polled every 500 ms, saturated
 * at one slot below full. Each round sends `streams` concurrent streaming greedy completions (the `openai` client, more lanes than
 * slots, so a request always waits in the coordinator's queue) until `streams × requests` requests of ~100 prompt
 * tokens and `tokens` generated tokens each have ended; rounds alternate A, B, B, A, A, B, … after one warm-up per hub,
 * so that the machine's drift hits both alike. B's warm-up keeps the load on until the volunteers cover every MoE
 * layer and none is left in its grace window (each had its fair first try under load, as the Layer-1 policy gives it).
 *
 * CPU-only placement (`--pin 0:1`, the default): each coordinator and all its threads on core 0 (`taskset -a -cp 0`),
 * this process (which runs both hubs) and the volunteers on core 1. Whatever the volunteers' speed, B must not be
 * slower than A (issue 13 (a): ratio ≥ 0.97): the claim policy (protocol v2) declines workers that do not help. With
 * a GPU for the volunteers (issue 13 (b): goal ≥ 2×), run with `--backend webgpu` (and `--pin none` or other cores).
 *
 * The load's lanes run in a child process on the hubs' cores (`--load child`, bench/elastic/load-child.ts), not on the
 * dispatchers' event loop; `--load inline` runs them in this process, as before 2026-12-06.
 *
 *   npm run bench:elastic [-- --rounds 5 --tokens 64 --streams 6 --requests 2 --backend auto --threads 1 --pin 0:1
 *                             --budget-mb N --deadline-ms 250 --volunteers N --quick --slots 4
 *                             --claims '{"declineQuietMs": 4, "deadlineSlack": 2}' --load child --load-nice 10
 *                             --network PROFILE --volunteer-cache DIR]
 *
 * `--quick`: a small model (n_embd 512, 32 experts, ff 256) for a smoke run. `--volunteers 0`: the control, B with
 * nobody to dispatch to. docs/elastic.md ("Elastic gain") says what each number is and holds the last measurements.
 *
 *   npm run bench:elastic -- --memory [--limit-mb 256 --tokens 64 --threads 1 --timeout-s 300 --quick]
 *
 * measures something else: the coordinator's memory alone vs with the swarm, under a limit below its experts
 * (bench/elastic/memory.ts; docs/elastic.md, "Bigger than the coordinator's memory").
 */
import { type ChildProcess, fork, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { cpus, freemem, loadavg, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import type { DispatcherTotals, ModelDispatcher, ResponseSummary } from '../../hub/dispatch/dispatcher.ts';
import { describeLatency } from '../../hub/dispatch/plan.ts';
import { type ClaimConfig, DEFAULT_CLAIMS } from '../../hub/dispatch/claims.ts';
import { DEFAULT_DISPATCH } from '../../hub/dispatch/map.ts';
import { DEFAULT_SATURATION } from '../../hub/market/saturation.ts';
import { median } from '../../shaders/computer.ts';
import {
  dispatchMap,
  type HeadlessVolunteer,
  type MapRow,
  pairOutcomes,
  type SwarmHub,
  spawnVolunteer,
  startSwarmHub,
  waitForCoverage,
} from '../../harness/swarm.ts';
import { type Shape, QUICK, REALISTIC, benchModel, describeShape, volunteerBudget } from '../shapes.ts';
import { loopDelay } from '../loop-delay.ts';
import { checkAffinity, pin, threadAffinity } from '../placement.ts';
import { amdahlCeiling, shareFromTopOne } from './ceiling.ts';
import { splitByBatch } from './split.ts';
import { type CoordinatorStats, describeStats, parseCoordinatorStats, statsDelta, sumStats } from './coordinator-stats.ts';
import { type NetProfile, PROFILES, type ProfileName } from '../../harness/netlab-profiles.ts';
import { type LabNetwork, labNetwork } from '../netlab-network.ts';
import { type LanePlan, type Req, type Timings, runLanes } from './lanes.ts';
import { benchPrompts } from './prompts.ts';

// `--memory`: the coordinator's memory alone vs with the swarm, under a limit below the experts (bench/elastic/memory.ts).
if (process.argv.includes('--memory')) {
  const { runMemoryBench } = await import('./memory.ts');
  await runMemoryBench(process.argv.slice(2).filter((a) => a !== '--memory'));
  process.exit(0);
}

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    tokens: { type: 'string', default: '64' },
    streams: { type: 'string', default: '6' },
    requests: { type: 'string', default: '2' },
    backend: { type: 'string', default: 'auto' },
    threads: { type: 'string', default: '1' },
    pin: { type: 'string', default: '0:1' },
    'budget-mb': { type: 'string' },
    'volunteer-nice': { type: 'string', default: '0' },
    'max-slices': { type: 'string', default: '1' },
    'deadline-ms': { type: 'string', default: '250' },
    slots: { type: 'string', default: '4' },
    claims: { type: 'string' },
    volunteers: { type: 'string' },
    quick: { type: 'boolean', default: false },
    share: { type: 'boolean', default: false },
    load: { type: 'string', default: 'child' },
    'load-nice': { type: 'string', default: '10' },
    'hub-nice': { type: 'string', default: '-10' },
    protocol: { type: 'string' },
    network: { type: 'string' },
    'volunteer-cache': { type: 'string' },
  },
});
/**
 * `--share`: how much of the coordinator's time the routed experts take, measured by difference. B is no swarm but the
 * same coordinator with top-1 routing (`--override-kv <arch>.expert_used_count=int:1`, dispatch off, no volunteers):
 * only the routed experts' work shrinks (k → 1), so T_k − T_1 = (k − 1)/k of the expert time (shareFromTopOne,
 * ceiling.ts), and Amdahl's ceiling on this machine follows (what any volunteer could give at most).
 */
const SHARE = values.share;
const int = (v: string | undefined, name: string): number => {
  const x = Number(v);
  if (!Number.isInteger(x) || x < 1) throw new Error(`--${name} must be a positive integer, got ${v}`);
  return x;
};
const ROUNDS = int(values.rounds, 'rounds');
const N_TOKENS = int(values.tokens, 'tokens');
const STREAMS = int(values.streams, 'streams');
/** Requests per lane per round: a round ends when STREAMS × REQUESTS requests have ended. */
const REQUESTS = int(values.requests, 'requests');
const THREADS = int(values.threads, 'threads');
const DEADLINE_MS = int(values['deadline-ms'], 'deadline-ms');
const BACKEND = values.backend;
if (!['auto', 'webgpu', 'wasm'].includes(BACKEND)) throw new Error(`--backend must be auto, webgpu or wasm, got ${BACKEND}`);
/** `--claims JSON`: B's claim policy settings over DEFAULT_CLAIMS (hub/dispatch/claims.ts), numbers only: experiments. */
const CLAIMS = parseClaims(values.claims);
function parseClaims(json: string | undefined): Partial<ClaimConfig> | null {
  if (json === undefined) return null;
  const o: unknown = JSON.parse(json);
  if (typeof o !== 'object' || o === null || Array.isArray(o)) throw new Error('--claims must be a JSON object');
  for (const [k, v] of Object.entries(o)) {
    if (!(k in DEFAULT_CLAIMS)) throw new Error(`--claims: unknown setting ${k} (${Object.keys(DEFAULT_CLAIMS).join(', ')})`);
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new Error(`--claims: ${k} must be a number`);
  }
  return o as Partial<ClaimConfig>;
}
/** The coordinators' slots (`--slots`, default 4): a decode step evaluates up to this many tokens at once. */
const SLOTS = int(values.slots, 'slots');
/** Saturated at this many busy slots (the poller's reading): one below full, as in the elastic scenario. */
const SATURATE_AT = Math.max(1, SLOTS - 1);
const POLL_MS = 500;
/** The coordinators' stats lines (bench/elastic/coordinator-stats.ts), every this many ms; they inherit the variable. */
const STATS_MS = 100;
process.env.LINKCPP_EXPERT_DISPATCH_STATS_MS = String(STATS_MS);
/**
 * `--protocol 2`: the coordinators offer protocol version 2 only (LINKCPP_EXPERT_DISPATCH_VERSION, inherited): B's
 * exchanges wait for a CLAIM, as before v3's standing offers, for a side-by-side run. Default: the coordinator's own (3).
 */
if (values.protocol !== undefined) {
  if (!['1', '2', '3'].includes(values.protocol)) throw new Error(`--protocol must be 1, 2 or 3, got ${values.protocol}`);
  process.env.LINKCPP_EXPERT_DISPATCH_VERSION = values.protocol;
}
const LAYERS = 2;
/** Headless volunteers on B: one per MoE layer by default; 0 runs B as the control (dispatch auto, nobody to dispatch to). */
const N_VOLUNTEERS = SHARE ? 0 : values.volunteers === undefined ? LAYERS : Number(values.volunteers);
if (STREAMS <= SLOTS) throw new Error(`--streams must exceed the ${SLOTS} slots (a request must wait in the queue), got ${STREAMS}`);
/**
 * `--pin C:V[:H]`: the coordinators on cores C, the volunteers on cores V, this process (the hubs) on cores H (default
 * V) — taskset lists; or none. `0:1:0` puts the hubs beside the coordinators (alike for A and B), so that only the
 * volunteers share core 1.
 */
const PIN =
  values.pin === 'none'
    ? null
    : (() => {
        const m = /^([\d,-]+):([\d,-]+)(?::([\d,-]+))?$/.exec(values.pin);
        if (!m) throw new Error(`--pin takes CORES:CORES[:CORES] (coordinators:volunteers[:hubs]) or none, got ${values.pin}`);
        return { coordinator: m[1] as string, rest: m[2] as string, hub: (m[3] ?? m[2]) as string };
      })();

const SHAPE = values.quick ? QUICK : REALISTIC;
/**
 * `--network PROFILE` (issue 29): B's volunteers in a network lab home of that profile (harness/netlab-profiles.ts:
 * lan, broadband, far, mobile), behind the router's NAT and link emulator, reaching B's hub through a bridge
 * (bench/netlab-network.ts); the hubs and coordinators stay here. Root only. The lab's own processes (the emulator,
 * the bridge) are pinned with the volunteers.
 */
const NETWORK = values.network ?? null;
/**
 * `--volunteer-cache DIR`: the volunteers keep their slices in DIR (`expertswarm volunteer --cache`, one folder for
 * all: slices are named by digest, and the market may give a volunteer another layer next time) across runs, as
 * returning volunteers do: a run at a slow `--network` after one on loopback measures the data path over the link with
 * the slices already held (a realistic layer is ~324 MiB: 9 min over far's 10 Mbit/s). Without it each run's volunteers
 * start empty.
 */
const VOLUNTEER_CACHE = values['volunteer-cache'] ?? null;
if (NETWORK !== null && !(NETWORK in PROFILES))
  throw new Error(`--network must be one of ${Object.keys(PROFILES).join(', ')}, got ${NETWORK}`);
const describe = (s: Shape): string => describeShape(s, LAYERS);

const startedAt = new Date();
const loadAtStart = loadavg();
const fmtLoad = (l: number[]): string => l.map((x) => x.toFixed(2)).join(' / ');
const log = (line: string): void => console.log(`· ${line}`);
const wait = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// --- prompts (bench/elastic/prompts.ts)

const N_PROMPTS = STREAMS * REQUESTS;
const PROMPTS = benchPrompts(N_PROMPTS);

// --- CPU placement: bench/placement.ts

/**
 * The volunteers' nice value (every thread), 0 by default. On this 2-core machine they share core 1 with the hubs,
 * whose dispatcher answers each REQUEST with a CLAIM while the coordinator waits; a higher nice makes the hubs win
 * every wake-up, but starves the volunteers behind any other job on the machine (nice 19: 1.4 % of a core against
 * one): measured 2026-12-06 with other engineers' jobs running, claim lines of 47–99 ms + 1.6–3.7 ms/pair and 44
 * pairs served. For experiments on a quiet machine.
 */
const VOLUNTEER_NICE = Number(values['volunteer-nice']);
/**
 * Slices each volunteer holds (its `--max-slices`), 1 by default: one layer each, the bench's placement since it began.
 * With more, the budget's room past one layer buys part of the other layer, and two volunteers then compute for the
 * same layer at once on their one shared core (2026-12-06: each held a layer and 48 experts of the other).
 */
const MAX_SLICES = int(values['max-slices'], 'max-slices');
/**
 * Fewer volunteers than MoE layers (`--volunteers 1 --max-slices 2`): each holds several whole layers (its budget
 * scaled to them) and computes them in turn on its core, with no second volunteer process competing for that core.
 */
if (!Number.isInteger(N_VOLUNTEERS) || N_VOLUNTEERS < 0 || (N_VOLUNTEERS > 0 && N_VOLUNTEERS * MAX_SLICES < LAYERS))
  throw new Error(
    `--volunteers must be 0, or enough to hold the ${LAYERS} MoE layers with --max-slices ${MAX_SLICES}, got ${values.volunteers}`,
  );
/** Whole layers each volunteer holds. */
const LAYERS_PER_VOLUNTEER = N_VOLUNTEERS > 0 ? Math.ceil(LAYERS / N_VOLUNTEERS) : 1;
if (!Number.isInteger(VOLUNTEER_NICE) || VOLUNTEER_NICE < 0 || VOLUNTEER_NICE > 19)
  throw new Error(`--volunteer-nice must be 0…19, got ${values['volunteer-nice']}`);
/**
 * This process's nice (every thread), set before the measured rounds, −20…0, −10 by default. It runs the hubs, whose
 * dispatcher plans each REQUEST while the coordinator computes and then waits, on the core the volunteers and the load
 * share: below 0 it wins the wake-ups there (as a hub on a core of its own would) without taking the volunteers' share
 * from any other job, as a volunteer nice does. The coordinators, started before, keep theirs (0). At 0 (protocol v3,
 * 2026-12-07) REQUEST in → work sent was p90 2.8 ms and the event loop's delay p99 16 ms; at −10, 0.7 and 5.7 ms.
 */
const HUB_NICE = Number(values['hub-nice']);
if (!Number.isInteger(HUB_NICE) || HUB_NICE < -20 || HUB_NICE > 0) throw new Error(`--hub-nice must be -20…0, got ${values['hub-nice']}`);
/** Sets every thread of `pid` to nice `n` (nice is per thread on Linux; threads made later inherit their maker's). */
function reniceAll(pid: number, n: number): string {
  const tids = readdirSync(`/proc/${pid}/task`);
  const r = spawnSync('renice', ['-n', String(n), '-p', ...tids], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`renice ${pid}: ${r.stderr}`);
  return `${tids.length} threads of ${pid} at nice ${n}`;
}

const affinityLines: string[] = [];
if (PIN) {
  if (cpus().length < 2) throw new Error(`--pin needs 2 cores, this machine has ${cpus().length}; use --pin none`);
  affinityLines.push(pin(`this process (the hubs; taskset -a -cp ${PIN.hub} ${process.pid})`, process.pid, PIN.hub));
  log(affinityLines[0] as string);
}

// --- a round: STREAMS lanes drain a queue of requests

/** The processes whose CPU time each round reports: this one (the hubs and the load), the volunteers, the coordinators. */
const cpuWatch: Array<{ name: string; pid: number }> = [];

/** CPU seconds (user + system, all threads) a process has used so far; NaN once it is gone. */
function cpuSeconds(pid: number): number {
  try {
    // Fields after the command's closing parenthesis: utime is the 12th, stime the 13th (proc(5)); USER_HZ is 100.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

interface Round {
  hub: 'A' | 'B';
  /** CPU seconds each watched process used during the round, by name. */
  cpuS: Record<string, number>;
  reqs: Req[];
  wallMs: number;
  /** The hub's saturation readings sampled every 250 ms during the round: how many said saturated. */
  saturatedSamples: number;
  samples: number;
  /** This process's event-loop delay during the round (the hubs and their dispatchers run on it), ms. */
  loopP50Ms: number;
  loopP99Ms: number;
}

/** Each watched process's CPU time over the round's wall time, % of one core. */
function cpuShares(r: Round): string {
  return Object.entries(r.cpuS)
    .map(([name, sec]) => `${name} ${((100 * sec) / (r.wallMs / 1000)).toFixed(0)}`)
    .join(', ');
}

/** Σ generated tokens / the round's wall time (first request sent → last ended). */
const decodeRate = (r: Round): number => r.reqs.reduce((s, q) => s + q.ids.length, 0) / (r.wallMs / 1000);
/** Σ prompt_n / Σ prompt_ms of llama-server's timings: the prompt rate each request saw, tokens-weighted. */
function promptRate(r: Round): number {
  let n = 0;
  let ms = 0;
  for (const q of r.reqs) {
    if (!q.timings) continue;
    n += q.timings.prompt_n;
    ms += q.timings.prompt_ms;
  }
  return ms > 0 ? n / (ms / 1000) : NaN;
}
/**
 * Σ prompt_n / the wall time during which some request was in its prompt phase: the union over requests of
 * [first token − prompt_ms, first token] (llama-server puts prompt chunks and other slots' decode in one batch).
 */
function promptAggregate(r: Round): number {
  const spans = r.reqs
    .filter((q) => q.timings && q.firstMs !== null)
    .map((q) => [(q.firstMs as number) - (q.timings as Timings).prompt_ms, q.firstMs as number] as const)
    .sort((a, b) => a[0] - b[0]);
  let covered = 0;
  let end = -Infinity;
  for (const [s, e] of spans) {
    if (e <= end) continue;
    covered += e - Math.max(s, end);
    end = e;
  }
  const n = r.reqs.reduce((s, q) => s + (q.timings?.prompt_n ?? 0), 0);
  return covered > 0 ? n / (covered / 1000) : NaN;
}

function saturatedNow(h: SwarmHub): boolean {
  return h.hub.recruitment().models.find((m) => m.model === h.model)?.saturated ?? false;
}

/**
 * Runs the lanes until `count` requests have been sent and have ended, or — with `until` — until it says stop (each
 * lane then finishes its request in flight).
 */
async function runLoad(
  h: SwarmHub,
  name: 'A' | 'B',
  ban: readonly number[],
  opts: { count?: number; until?: () => boolean },
): Promise<Round> {
  const plan: LanePlan = { url: h.url, model: h.model, prompts: PROMPTS, tokens: N_TOKENS, ban, streams: STREAMS };
  let saturatedSamples = 0;
  let samples = 0;
  const sampler = setInterval(() => {
    samples++;
    if (saturatedNow(h)) saturatedSamples++;
  }, 250);
  const loop = loopDelay(5);
  const cpu0 = cpuWatch.map((w) => cpuSeconds(w.pid));
  let lanes: { reqs: Req[]; wallMs: number };
  try {
    lanes = LOAD_CHILD
      ? await childRound(plan, name, opts)
      : await runLanes(
          plan,
          (sent) => (opts.until ? !opts.until() : sent < (opts.count ?? 0)),
          (r) => log(`  ${name}: request for prompt ${r.prompt} failed: ${r.error}`),
        );
  } finally {
    clearInterval(sampler);
    loop.stop();
  }
  const cpuS = Object.fromEntries(cpuWatch.map((w, i) => [w.name, cpuSeconds(w.pid) - (cpu0[i] as number)]));
  return {
    hub: name,
    cpuS,
    reqs: lanes.reqs,
    wallMs: lanes.wallMs,
    saturatedSamples,
    samples,
    loopP50Ms: loop.ms(50),
    loopP99Ms: loop.ms(99),
  };
}

/**
 * `--load child` (the default): the lanes run in a forked process (bench/elastic/load-child.ts) on the hubs' cores, so
 * that the streamed chunks are parsed on another event loop than the dispatchers'; `--load inline` runs them here.
 */
const LOAD_CHILD = values.load === 'child';
/**
 * The load child's nice value (`--load-nice`, default 10). It shares the hubs' core, and every decode step ends with
 * the coordinator streaming a token to each request at once: at nice 0 the child woke to parse them just as the next
 * step's first REQUEST reached the dispatcher (layer 0's REQUEST in -> work sent p50 3.8 ms, layer 1's 0.75 ms, at load
 * 4, 2026-12-06). A client that reads a chunk a few ms late changes no rate measured here: decode is tokens over the
 * round's wall time, prompt is llama-server's own timings.
 */
const LOAD_NICE = Number(values['load-nice']);
if (!Number.isInteger(LOAD_NICE) || LOAD_NICE < 0 || LOAD_NICE > 19)
  throw new Error(`--load-nice must be 0…19, got ${values['load-nice']}`);
if (!['child', 'inline'].includes(values.load)) throw new Error(`--load must be child or inline, got ${values.load}`);
let loadChild: ChildProcess | null = null;
/**
 * What to fork for the load: in the GPU bundle (scripts/gpu-bundle-plan.ts ENTRIES) the bundled `load-child.js` beside
 * this bundle (`dist/gain.js`), which runs on the bundle's node alone; here the source, with tsx.
 */
function loadChildEntry(): { path: string | URL; execArgv: string[] } {
  const bundled = join(dirname(process.argv[1] ?? '.'), 'load-child.js');
  return existsSync(bundled)
    ? { path: bundled, execArgv: [] }
    : { path: new URL('./load-child.ts', import.meta.url), execArgv: ['--import', 'tsx'] };
}

/** The load's child process id, once it runs. */
const loadPid = (): number | undefined => loadChild?.pid;

function childRound(
  plan: LanePlan,
  name: 'A' | 'B',
  opts: { count?: number; until?: () => boolean },
): Promise<{ reqs: Req[]; wallMs: number }> {
  if (!loadChild) {
    const entry = loadChildEntry();
    loadChild = fork(entry.path, [], { execArgv: entry.execArgv, stdio: 'inherit' });
    if (loadChild.pid !== undefined) {
      cpuWatch.push({ name: 'load', pid: loadChild.pid });
      if (LOAD_NICE > 0) log(`the load: ${reniceAll(loadChild.pid, LOAD_NICE)} (--load-nice)`);
    }
  }
  const child = loadChild;
  return new Promise((resolve, reject) => {
    let watch: ReturnType<typeof setInterval> | undefined;
    const done = (): void => {
      if (watch) clearInterval(watch);
      child.off('message', onMessage);
      child.off('exit', onExit);
    };
    const onMessage = (m: { type: string; prompt?: number; error?: string; reqs?: Req[]; wallMs?: number }): void => {
      if (m.type === 'error') log(`  ${name}: request for prompt ${m.prompt} failed: ${m.error}`);
      if (m.type !== 'done') return;
      done();
      resolve({ reqs: m.reqs as Req[], wallMs: m.wallMs as number });
    };
    const onExit = (code: number | null): void => {
      done();
      reject(new Error(`the load's child process exited (${code}) during a round`));
    };
    child.on('message', onMessage);
    child.on('exit', onExit);
    child.send({ type: 'round', plan, count: opts.until ? null : (opts.count ?? 0) });
    const until = opts.until;
    if (until)
      watch = setInterval(() => {
        if (!until()) return;
        clearInterval(watch);
        child.send({ type: 'stop' });
      }, 100);
  });
}

// --- the dispatcher's own counters (no public accessor on Hub: read through its private map, for this bench only)

function dispatcherOf(h: SwarmHub): ModelDispatcher {
  const d = (h.hub as unknown as { dispatchers: Map<string, ModelDispatcher> }).dispatchers.get(h.model);
  if (!d) throw new Error(`no dispatcher for ${h.model}`);
  return d;
}

const snapshot = (t: DispatcherTotals): DispatcherTotals => JSON.parse(JSON.stringify(t)) as DispatcherTotals;

function diffCounts<K extends string>(after: Partial<Record<K, number>>, before: Partial<Record<K, number>>): Partial<Record<K, number>> {
  const out: Partial<Record<K, number>> = {};
  for (const k of Object.keys(after) as K[]) {
    const d = (after[k] ?? 0) - (before[k] ?? 0);
    if (d !== 0) out[k] = d;
  }
  return out;
}

function diffTotals(a: DispatcherTotals, b: DispatcherTotals): DispatcherTotals {
  return {
    connections: a.connections - b.connections,
    protocolErrors: a.protocolErrors - b.protocolErrors,
    requests: a.requests - b.requests,
    localRequests: a.localRequests - b.localRequests,
    servedRequests: a.servedRequests - b.servedRequests,
    pairs: {
      served: a.pairs.served - b.pairs.served,
      fallback: a.pairs.fallback - b.pairs.fallback,
      rejected: a.pairs.rejected - b.pairs.rejected,
      late: a.pairs.late - b.pairs.late,
      audited: a.pairs.audited - b.pairs.audited,
    },
    decisions: diffCounts(a.decisions, b.decisions),
    claims: diffCounts(a.claims, b.claims),
    offers: {
      made: a.offers.made - b.offers.made,
      preclaimed: a.offers.preclaimed - b.offers.preclaimed,
      preclaimedPairs: a.offers.preclaimedPairs - b.offers.preclaimedPairs,
    },
  };
}

const counts = (c: Partial<Record<string, number>>): string =>
  Object.entries(c)
    .sort((x, y) => (y[1] ?? 0) - (x[1] ?? 0))
    .map(([k, v]) => `${k} ${v}`)
    .join(', ') || 'none';

function protocolOf(h: SwarmHub): string {
  const hello = h.hub
    .recentEvents(1000)
    .filter((e) => e.model === h.model && /dispatch hello/.test(e.detail))
    .pop();
  return /protocol v(\d+)/.exec(hello?.detail ?? '')?.[0] ?? 'no HELLO seen';
}

function workerLines(h: SwarmHub, rows: MapRow[]): string[] {
  const d = dispatcherOf(h);
  return rows.map((row) => {
    const st = d.workerStats(row.worker_id);
    if (!st) return `${row.worker_id} layer ${row.layer} [${row.experts[0]}, ${row.experts[1]}): ${row.state}, never dispatched`;
    const fit = `claim line ${describeLatency(st.latency)}`;
    return `${row.worker_id} layer ${row.layer} [${row.experts[0]}, ${row.experts[1]}): ${row.state}; ${fit}; served ${st.servedPairs} pairs in ${st.servedItems} items, ${st.misses} misses, ${st.lateAnswers} late answers, ${st.benchedAtMs === null ? 'not benched' : 'benched'}`;
  });
}

// --- the run

const CHANNEL = { heartbeatMs: 1000, idleTimeoutMs: 900_000, loadTimeoutMs: 900_000 };
const hubs: SwarmHub[] = [];
const volunteers: HeadlessVolunteer[] = [];
const profileLine = (p: NetProfile): string =>
  `${p.rttMs} ms ± ${p.jitterMs} round trip, ${p.rateMbit === undefined ? 'rate not shaped' : `${p.rateMbit} Mbit/s`}, ${p.lossPct} % loss`;

/** The network lab of `--network`, once B's volunteers are in it. */
let lab: LabNetwork | null = null;
/** Every process in the lab's namespaces (`ip netns pids`): its emulator, bridge and volunteers. */
function labPids(l: LabNetwork): number[] {
  return l.lab.namespaces().flatMap((ns) => {
    const r = spawnSync('ip', ['netns', 'pids', ns], { encoding: 'utf8' });
    return r.status === 0 ? r.stdout.split('\n').filter(Boolean).map(Number) : [];
  });
}

async function cleanUp(): Promise<void> {
  for (const v of volunteers.splice(0)) await v.stop();
  await lab?.close();
  lab = null;
  for (const h of hubs.splice(0).reverse()) await h.close();
  loadChild?.kill();
  loadChild = null;
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void cleanUp().finally(() => process.exit(130));
  });
}

const { model, generatedS } = await benchModel(SHAPE, LAYERS, log);
const moeLayers = Array.from({ length: LAYERS }, (_, i) => i);
const budgetOfLayer = volunteerBudget(SHAPE, values['budget-mb'] ? int(values['budget-mb'], 'budget-mb') : undefined);
/** A volunteer's budget: a layer's, times the layers it holds (`--budget-mb` as given). */
const budget = { ...budgetOfLayer, mb: values['budget-mb'] ? budgetOfLayer.mb : budgetOfLayer.mb * LAYERS_PER_VOLUNTEER };

const rounds: Round[] = [];
let warmA: Round | null = null;
let warmB: Round | null = null;
let loadS = 0;
let serving: string[] = [];
let totalsB: DispatcherTotals | null = null;
let totalsA: DispatcherTotals | null = null;
let outcomesB: Record<string, number> = {};
let protocolB = '';
let mapAfterWarm: string[] = [];
let mapAtEnd: string[] = [];
let grace: string[] = [];
/** Each pinned process's threads after the measured rounds. */
const affinityDrift: string[] = [];
/** The coordinators' `expert-dispatch:` log lines after they started, with seconds since this run began. */
const dispatchLog: string[] = [];
const tRun = performance.now();
/** When the measured rounds began, s since tRun. */
let measuredFromS = 0;
/** Each coordinator's latest stats line (LINKCPP_EXPERT_DISPATCH_STATS_MS, set below), and B's over its rounds. */
const coordinatorStats: { A?: CoordinatorStats; B?: CoordinatorStats } = {};
let coordinatorB: CoordinatorStats | undefined;
let coordinatorBWallUs = 0;
/** B's dispatcher over the measured rounds: REQUESTs with pairs served, and every channel result. */
const hops: {
  responses: ResponseSummary[];
  all: ResponseSummary[];
  results: Array<{ workerId: string; roundTripMs: number; computeUs: number }>;
} = {
  responses: [],
  all: [],
  results: [],
};
let stopObserving = (): void => {};

try {
  const over = {
    slots: SLOTS,
    ctxPerSlot: 1024,
    threads: THREADS,
    channel: CHANNEL,
    dispatchDeadlineMs: DEADLINE_MS,
    poller: { intervalMs: POLL_MS, timeoutMs: POLL_MS },
    saturation: { ...DEFAULT_SATURATION, saturateAt: SATURATE_AT, targetBase: 1, boost: 1 },
    ...(CLAIMS ? { claims: CLAIMS } : {}),
  };
  const alone = await startSwarmHub(model.path, 'off', over);
  hubs.push(alone);
  const swarm = SHARE
    ? await startSwarmHub(model.path, 'off', { ...over, coordinatorArgs: ['--override-kv', `qwen3moe.expert_used_count=int:1`] })
    : await startSwarmHub(model.path, 'auto', over);
  hubs.push(swarm);
  log(`hubs up: A --dispatch off ${alone.url}, B --dispatch auto ${swarm.url}; ${SLOTS} slots, -t ${THREADS} each`);
  for (const [name, h] of [
    ['A', alone],
    ['B', swarm],
  ] as const) {
    const proc = h.hub.coordinatorProcess(h.model);
    const pid = proc?.pid;
    if (!proc || pid === undefined) throw new Error(`hub ${name}: no coordinator process`);
    // The coordinator's own word on its dispatch connection (connects, incidents, recoveries), beside the hub's log;
    // its stats lines (read line by line) are kept as the latest figures, not logged.
    for (const stream of [proc.stdout, proc.stderr]) {
      if (!stream) continue;
      createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY }).on('line', (l) => {
        const stats = parseCoordinatorStats(l);
        if (stats) coordinatorStats[name] = stats;
        else if (/expert-dispatch:/.test(l) && !/dispatcher socket/.test(l))
          dispatchLog.push(`${name} +${((performance.now() - tRun) / 1000).toFixed(1)} s ${l.trim()}`);
      });
    }
    if (PIN) {
      affinityLines.push(pin(`coordinator ${name} (taskset -a -cp ${PIN.coordinator} ${pid})`, pid, PIN.coordinator));
      log(affinityLines.at(-1) as string);
    }
  }

  // A: its warm-up round gives every prompt's token ids, the reference of the identity check.
  log(`warm-up A: ${N_PROMPTS} requests over ${STREAMS} streams`);
  warmA = await runLoad(alone, 'A', model.ban, { count: N_PROMPTS });

  // B: the volunteers wait on the channel until the load saturates the coordinator and the market recruits them.
  log(
    `B: ${N_VOLUNTEERS} headless volunteers${N_VOLUNTEERS === 0 ? ' (the control: dispatch auto with nobody to dispatch to)' : ''}, --budget-mb ${budget.mb} (a layer: ${Math.round(budget.q4kMb)} MiB Q4_K, ${Math.round(budget.wasmMb)} MiB with the wasm kernel's scratch), --backend ${BACKEND}`,
  );
  const mine: HeadlessVolunteer[] = [];
  if (NETWORK !== null) {
    lab = await labNetwork(NETWORK as ProfileName, Number(new URL(swarm.url).port));
    log(`network: B's volunteers in a lab home at the ${NETWORK} profile, reaching B as ${lab.hubUrl}`);
  }
  for (let i = 0; i < N_VOLUNTEERS; i++) {
    const id = `${SHAPE.name}-v${i}`;
    const args = ['--model', swarm.model, '--budget-mb', String(budget.mb), '--backend', BACKEND, '--max-slices', String(MAX_SLICES)];
    if (VOLUNTEER_CACHE !== null) args.push('--cache', VOLUNTEER_CACHE);
    mine.push(lab ? lab.spawnVolunteer(['--worker-id', id, ...args]) : spawnVolunteer(swarm.url, id, args));
  }
  if (lab && PIN) for (const pid of labPids(lab)) if (!mine.some((v) => v.proc.pid === pid)) pin(`the lab's process ${pid}`, pid, PIN.rest);
  volunteers.push(...mine);
  cpuWatch.push({ name: 'this process', pid: process.pid });
  for (const [name, h] of [
    ['coordinator A', alone],
    ['coordinator B', swarm],
  ] as const) {
    const pid = h.hub.coordinatorProcess(h.model)?.pid;
    if (pid !== undefined) cpuWatch.push({ name, pid });
  }
  mine.forEach((v, i) => {
    if (v.proc.pid !== undefined) cpuWatch.push({ name: `volunteer ${i}`, pid: v.proc.pid });
  });
  await wait(500);
  if (PIN)
    for (const v of mine) {
      affinityLines.push(pin(`volunteer pid ${v.proc.pid} (taskset -a -cp ${PIN.rest})`, v.proc.pid as number, PIN.rest));
      log(affinityLines.at(-1) as string);
    }
  if (VOLUNTEER_NICE > 0) for (const v of mine) log(`volunteer ${reniceAll(v.proc.pid as number, VOLUNTEER_NICE)} (--volunteer-nice)`);

  log(
    N_VOLUNTEERS === 0
      ? `warm-up B: ${N_PROMPTS} requests over ${STREAMS} streams`
      : `warm-up B: the load runs until every MoE layer is served and no volunteer is in its grace window (${DEFAULT_DISPATCH.graceMs / 1000} s)`,
  );
  let warmDone = N_VOLUNTEERS === 0;
  const warm = runLoad(swarm, 'B', model.ban, N_VOLUNTEERS === 0 ? { count: N_PROMPTS } : { until: () => warmDone });
  const t0 = performance.now();
  if (N_VOLUNTEERS > 0)
    try {
      const loadLimit = Date.now() + 900_000;
      for (;;) {
        const dead = mine.find((v) => v.proc.exitCode !== null);
        if (dead) throw new Error(`a volunteer exited (${dead.proc.exitCode}): ${dead.output().slice(-600)}`);
        try {
          await waitForCoverage(swarm.url, swarm.model, moeLayers, SHAPE.nExpert, 1, 20_000);
          break;
        } catch (e) {
          if (Date.now() > loadLimit) throw e;
          log(
            `  saturated ${saturatedNow(swarm)}; ${mine.map((v) => v.output().trim().split('\n').pop() ?? '(no status yet)').join(' | ')}`,
          );
        }
      }
      loadS = (performance.now() - t0) / 1000;
      log(`  every MoE layer served ${loadS.toFixed(0)} s after the load began (saturation, recruitment, download, engine start)`);
      const graceLimit = Date.now() + DEFAULT_DISPATCH.graceMs + 30_000;
      for (;;) {
        const rows = await dispatchMap(swarm.url, swarm.model);
        if (rows.length >= LAYERS && rows.every((r) => r.state !== 'grace')) break;
        if (Date.now() > graceLimit) throw new Error(`still in grace: ${JSON.stringify(rows)}`);
        await wait(500);
      }
    } finally {
      warmDone = true;
    }
  warmB = await warm;
  const rowsWarm = await dispatchMap(swarm.url, swarm.model);
  grace = rowsWarm.map((r) => `${r.worker_id} ${r.state}`);
  mapAfterWarm = workerLines(swarm, rowsWarm);
  for (const l of mapAfterWarm) log(`  ${l}`);
  serving = mine.map((v) => (v.output().match(/serving [^\n]*/g) ?? []).pop()?.replace(/ · wallet \w+/, '') ?? '?');
  protocolB = protocolOf(swarm);
  log(`  dispatcher B speaks ${protocolB} with its coordinator`);
  if (PIN) {
    // The coordinators' threads again (any created since were created by pinned threads), and the volunteers'.
    for (const [name, h] of [
      ['A', alone],
      ['B', swarm],
    ] as const)
      checkAffinity(`coordinator ${name}`, h.hub.coordinatorProcess(h.model)?.pid as number, PIN.coordinator);
    checkAffinity('this process', process.pid, PIN.hub);
    // SwiftShader (Dawn's CPU adapter) pins some of its worker threads to cores of its own choosing as the engine
    // starts: the volunteers are pinned again, every thread, now that their engines run.
    for (const v of mine) {
      affinityLines.push(
        pin(`volunteer pid ${v.proc.pid} after its engine started (taskset -a -cp ${PIN.rest})`, v.proc.pid as number, PIN.rest),
      );
      log(affinityLines.at(-1) as string);
    }
    log('coordinators and this process checked again before measuring: unchanged');
  }
  // Threads the engines made since inherited their maker's nice; every thread again, as with the affinity.
  if (VOLUNTEER_NICE > 0)
    for (const v of mine) {
      affinityLines.push(`volunteer ${reniceAll(v.proc.pid as number, VOLUNTEER_NICE)} (--volunteer-nice)`);
      log(affinityLines.at(-1) as string);
    }

  if (HUB_NICE < 0) {
    affinityLines.push(`this process: ${reniceAll(process.pid, HUB_NICE)} (--hub-nice)`);
    log(affinityLines.at(-1) as string);
  }

  // Measured: alternating A, B / B, A. B's every REQUEST and channel result, for the hops' costs.
  stopObserving = swarm.hub.observeDispatch(swarm.model, {
    onResponse: (r) => {
      hops.all.push(r);
      if (r.served > 0) hops.responses.push(r);
    },
    onResult: (workerId, roundTripMs, computeUs) => hops.results.push({ workerId, roundTripMs, computeUs }),
  });
  const dB = dispatcherOf(swarm);
  const dA = dispatcherOf(alone);
  const totalsB0 = snapshot(dB.totals);
  const totalsA0 = snapshot(dA.totals);
  const outcomes0 = await pairOutcomes(swarm.url, swarm.model);
  measuredFromS = (performance.now() - tRun) / 1000;
  for (let i = 0; i < ROUNDS; i++) {
    const order = i % 2 === 0 ? (['A', 'B'] as const) : (['B', 'A'] as const);
    for (const name of order) {
      const before = coordinatorStats[name];
      const r = await runLoad(name === 'A' ? alone : swarm, name, model.ban, { count: N_PROMPTS });
      rounds.push(r);
      // the line written after the round's last exchange comes within the stats interval
      await new Promise((res) => setTimeout(res, 2 * STATS_MS));
      const after = coordinatorStats[name];
      const split = before && after ? statsDelta(before, after) : undefined;
      if (name === 'B' && split) {
        coordinatorB = coordinatorB ? sumStats(coordinatorB, split) : split;
        coordinatorBWallUs += r.wallMs * 1000;
      }
      log(
        `round ${i + 1}/${ROUNDS} ${name}: decode ${decodeRate(r).toFixed(1)} tok/s, prompt ${promptRate(r).toFixed(1)} tok/s (aggregate ${promptAggregate(r).toFixed(1)}), ${(r.wallMs / 1000).toFixed(1)} s, saturated ${r.saturatedSamples}/${r.samples} samples, event loop delay p50 ${r.loopP50Ms.toFixed(1)} / p99 ${r.loopP99Ms.toFixed(1)} ms`,
      );
      log(`  CPU in the round, % of one core: ${cpuShares(r)}`);
      if (name === 'B') log(`  B's coordinator in the round: ${split ? describeStats(split, r.wallMs * 1000) : 'no stats line'}`);
    }
  }
  stopObserving();
  totalsB = diffTotals(dB.totals, totalsB0);
  totalsA = diffTotals(dA.totals, totalsA0);
  const outcomes1 = await pairOutcomes(swarm.url, swarm.model);
  outcomesB = Object.fromEntries(Object.keys(outcomes1).map((k) => [k, (outcomes1[k] ?? 0) - (outcomes0[k] ?? 0)]));
  mapAtEnd = workerLines(swarm, await dispatchMap(swarm.url, swarm.model));
  if (PIN) {
    // Did anything leave its cores during the measured rounds?
    const procs: Array<[string, number, string]> = [
      ['coordinator A', alone.hub.coordinatorProcess(alone.model)?.pid as number, PIN.coordinator],
      ['coordinator B', swarm.hub.coordinatorProcess(swarm.model)?.pid as number, PIN.coordinator],
      ['this process', process.pid, PIN.hub],
      ...(loadPid() !== undefined ? [['the load', loadPid() as number, PIN.hub] as [string, number, string]] : []),
      ...mine.map((v): [string, number, string] => [`volunteer ${v.proc.pid}`, v.proc.pid as number, PIN.rest]),
    ];
    for (const [name, pid, cores] of procs) {
      const { lists } = threadAffinity(pid);
      const off = [...lists.entries()].filter(([l]) => l !== cores);
      affinityDrift.push(off.length ? `${name}: ${off.map(([l, n]) => `${n} threads on ${l}`).join(', ')}` : `${name}: all on ${cores}`);
    }
  }
} finally {
  await cleanUp();
}
const loadAtEnd = loadavg();

// --- the report

const A = rounds.filter((r) => r.hub === 'A');
const B = rounds.filter((r) => r.hub === 'B');
/** Per round pair i: B_i / A_i (the pair ran back to back, in alternating order). */
const pairRatios = (f: (r: Round) => number): number[] => A.map((a, i) => f(B[i] as Round) / f(a));
const reference = new Map<number, number[]>();
for (const q of warmA?.reqs ?? []) if (q.error === null && !reference.has(q.prompt)) reference.set(q.prompt, q.ids);
const identical = (rs: Round[]): string => {
  let same = 0;
  let n = 0;
  for (const r of rs)
    for (const q of r.reqs) {
      const ref = reference.get(q.prompt);
      if (!ref || q.error !== null) continue;
      n++;
      if (ref.length === q.ids.length && ref.every((id, k) => id === q.ids[k])) same++;
    }
  return `${same} of ${n}`;
};
/** Every token-id sequence A gave for each prompt (warm-up and rounds): batches of other compositions may differ. */
const answersOfA = new Map<number, Set<string>>();
for (const r of [...(warmA ? [warmA] : []), ...A])
  for (const q of r.reqs) if (q.error === null) answersOfA.set(q.prompt, (answersOfA.get(q.prompt) ?? new Set()).add(q.ids.join(',')));
const likeSomeA = (rs: Round[]): string => {
  let same = 0;
  let n = 0;
  for (const r of rs)
    for (const q of r.reqs) {
      if (q.error !== null) continue;
      n++;
      if (answersOfA.get(q.prompt)?.has(q.ids.join(','))) same++;
    }
  return `${same} of ${n}`;
};
const distinctA = [...answersOfA.values()].reduce((s, v) => s + v.size, 0);
const errors = rounds.reduce((s, r) => s + r.reqs.filter((q) => q.error !== null).length, 0);
const retried = rounds.reduce((s, r) => s + r.reqs.reduce((t, q) => t + q.retried, 0), 0);
const promptNs = rounds.flatMap((r) => r.reqs.map((q) => q.timings?.prompt_n ?? NaN)).filter(Number.isFinite);
const noTimings = rounds.reduce((s, r) => s + r.reqs.filter((q) => q.error === null && !q.timings).length, 0);

const pad = (s: string, n: number): string => s.padEnd(n);
const line = '─'.repeat(110);
const fmt = (xs: number[], d = 1): string => `${pad(xs.map((x) => x.toFixed(d)).join('  '), 48)} median ${median(xs).toFixed(d)}`;
console.log(`\n${line}`);
console.log(`bench:elastic  ${startedAt.toISOString()}`);
console.log(
  `machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB (${(freemem() / 2 ** 30).toFixed(0)} free at the end); node ${process.version}`,
);
console.log(`load average (1/5/15 min): start ${fmtLoad(loadAtStart)}, end ${fmtLoad(loadAtEnd)}`);
console.log(
  `model: ${SHAPE.name}, ${describe(SHAPE)}; ${generatedS === null ? 'from the cache' : `generated in ${generatedS.toFixed(0)} s`}`,
);
console.log(
  `hubs: ${SLOTS} slots, coordinator -t ${THREADS}, poll ${POLL_MS} ms, saturated at ${SATURATE_AT} busy, --dispatch-deadline-ms ${DEADLINE_MS}, claim policy ${CLAIMS ? `${JSON.stringify(CLAIMS)} over the defaults` : 'defaults'}; A --dispatch off, B --dispatch auto (target base 1, boost 1; dispatcher ↔ coordinator ${protocolB})`,
);
console.log(
  `load: ${STREAMS} concurrent streaming greedy /v1/completions per round until ${N_PROMPTS} requests ended (prompt ${Math.min(...promptNs)}–${Math.max(...promptNs)} tokens, ${N_TOKENS} generated, cache_prompt false); ${ROUNDS} rounds per hub, alternating, after one warm-up each`,
);
console.log(
  `network: ${NETWORK === null ? 'loopback (no --network)' : `B's volunteers behind NAT at the ${NETWORK} profile (${profileLine(PROFILES[NETWORK as ProfileName])}); A has no volunteers`}`,
);
console.log(
  `placement: ${PIN ? `coordinators on core ${PIN.coordinator}, volunteers on core ${PIN.rest}, this process (the hubs) on core ${PIN.hub}` : 'not pinned (--pin none)'}`,
);
for (const l of affinityLines) console.log(`  ${l}`);
if (affinityDrift.length) console.log(`  after the measured rounds: ${affinityDrift.join('; ')}`);
if (SHARE) console.log('volunteers: none (--share: B is --dispatch off with top-1 routing)');
else if (N_VOLUNTEERS === 0) console.log('volunteers: none (the control: B is --dispatch auto with nobody to dispatch to)');
else {
  console.log(
    `volunteers: ${N_VOLUNTEERS === LAYERS ? 'one per MoE layer' : `${N_VOLUNTEERS} for ${LAYERS} MoE layers`}, --budget-mb ${budget.mb}, --backend ${BACKEND}; every layer served ${loadS.toFixed(0)} s into B's warm-up`,
  );
  for (const s of serving) console.log(`  ${s}`);
  console.log(`  after the warm-up: ${grace.join(', ')}`);
}
for (const w of [warmA, warmB])
  if (w)
    console.log(
      `warm-up ${w.hub}: ${w.reqs.length} requests in ${(w.wallMs / 1000).toFixed(1)} s, decode ${decodeRate(w).toFixed(1)} tok/s${w.hub === 'B' && N_VOLUNTEERS > 0 ? ' (recruitment, slice loading and the grace window under load)' : ''}`,
    );

console.log(`\naggregate decode tokens/s: Σ generated tokens / the round's wall time (first request sent → last ended)`);
console.log(`  ${pad('A  coordinator alone', 30)}${fmt(A.map(decodeRate))}`);
console.log(`  ${pad(SHARE ? 'B  alone, top-1 routing' : 'B  coordinator + swarm', 30)}${fmt(B.map(decodeRate))}`);
console.log(`  ${pad('B / A per round pair', 30)}${fmt(pairRatios(decodeRate), 3)}`);
console.log(`prompt tokens/s: Σ prompt_n / Σ prompt_ms of llama-server's timings (the prompt rate the requests saw)`);
console.log(`  ${pad('A', 30)}${fmt(A.map(promptRate))}`);
console.log(`  ${pad('B', 30)}${fmt(B.map(promptRate))}`);
console.log(`  ${pad('B / A per round pair', 30)}${fmt(pairRatios(promptRate), 3)}`);
console.log(`  aggregate: Σ prompt_n / the union of the requests' prompt phases [first token − prompt_ms, first token]`);
console.log(`  ${pad('A', 30)}${fmt(A.map(promptAggregate))}`);
console.log(`  ${pad('B', 30)}${fmt(B.map(promptAggregate))}`);
console.log(`  ${pad('B / A per round pair', 30)}${fmt(pairRatios(promptAggregate), 3)}`);
const ratioDecode = median(pairRatios(decodeRate));
const ratioPrompt = median(pairRatios(promptRate));
console.log(
  `\nRATIO swarm / alone (median of per-pair ratios): decode ${ratioDecode.toFixed(3)}, prompt ${ratioPrompt.toFixed(3)}   [goals (issue 24): wasm volunteers ≥ 1.25 both; software-adapter ones ≥ 0.97; a GPU volunteer decode ≥ 2, prompt ≥ 3]`,
);
if (SHARE) {
  // T_k / T_1 per round pair is B's rate over A's (B: top-1); the expert share s = (1 − T_1/T_k) · k/(k − 1).
  const k = SHAPE.nExpertUsed;
  const shareOf = (ratio: number): number => shareFromTopOne(1 / ratio, k);
  const sd = pairRatios(decodeRate).map(shareOf);
  const sp = pairRatios(promptAggregate).map(shareOf);
  console.log(
    `\nSHARE (--share: B is A's coordinator with top-1 routing, no swarm): routed experts take ${(100 * median(sd)).toFixed(1)} % of the coordinator's decode time (per round ${sd.map((x) => (100 * x).toFixed(1)).join(', ')}) and ${(100 * median(sp)).toFixed(1)} % of its prompt time (aggregate rate)`,
  );
  for (const [what, xs] of [
    ['decode', sd],
    ['prompt', sp],
  ] as const) {
    const s0 = median(xs);
    const at = (rho: number): string => amdahlCeiling(s0, rho).toFixed(3);
    console.log(
      `  ${what}: ceiling with every routed expert away for free ${amdahlCeiling(s0, null).toFixed(3)}×; with a second core balanced against the coordinator (no cost per exchange), a volunteer as fast as llama.cpp per core ${at(1)}×, at 0.5× its speed (wasm here) ${at(2)}×, at 0.45× ${at(1 / 0.45)}×`,
    );
  }
}
console.log(
  `  saturated (hub's reading, sampled every 250 ms): A ${A.reduce((s, r) => s + r.saturatedSamples, 0)}/${A.reduce((s, r) => s + r.samples, 0)}, B ${B.reduce((s, r) => s + r.saturatedSamples, 0)}/${B.reduce((s, r) => s + r.samples, 0)} samples`,
);
console.log(
  `  token ids identical to A's warm-up answer for the same prompt: A ${identical(A)} (the control: concurrent batches of other compositions may flip a near-tie), B ${identical(B)}`,
);
console.log(
  `  B's token ids equal to one of A's answers for the same prompt: ${likeSomeA(B)} (A gave ${distinctA} distinct answers to ${answersOfA.size} prompts); failed requests ${errors}, 503s retried ${retried}${noTimings ? `, ${noTimings} without timings` : ''}`,
);
console.log(
  `  this process's event-loop delay (the hubs, the dispatchers), median over rounds of p50 / p99: A ${median(A.map((r) => r.loopP50Ms)).toFixed(1)} / ${median(A.map((r) => r.loopP99Ms)).toFixed(1)} ms, B ${median(B.map((r) => r.loopP50Ms)).toFixed(1)} / ${median(B.map((r) => r.loopP99Ms)).toFixed(1)} ms`,
);

{
  // Who used the cores: the coordinators' core should be full in both; what B adds on the other is the swarm's cost.
  const names = [...new Set(rounds.flatMap((r) => Object.keys(r.cpuS)))];
  const share = (rs: Round[], n: string): string => `${median(rs.map((r) => (100 * (r.cpuS[n] ?? NaN)) / (r.wallMs / 1000))).toFixed(0)}`;
  console.log(
    `  CPU, median % of one core over the rounds (A / B): ${names.map((n) => `${n} ${share(A, n)} / ${share(B, n)}`).join(', ')}`,
  );
}
if (hops.results.length > 0) {
  // Each hop of a served layer: the dispatcher's own time (REQUEST in -> work handed to the links, last answer ->
  // RESPONSE written), the channel's round trip (work handed to the socket -> result decoded) and, within it, the
  // volunteer's time (frame in -> sums), as it reports them.
  // (No samples — a run whose volunteers were all declined — reads as a dash, not a crash before the totals.)
  const q = (xs: number[], p: number): string => {
    const v = [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];
    return v === undefined ? '—' : v.toFixed(2);
  };
  const line = (name: string, xs: number[]): string => `  ${pad(name, 44)}p10 ${q(xs, 0.1)}  p50 ${q(xs, 0.5)}  p90 ${q(xs, 0.9)} ms`;
  console.log(`\nB's hops per served layer over the measured rounds (${hops.responses.length} REQUESTs, ${hops.results.length} results)`);
  console.log(
    line(
      'dispatcher: REQUEST in -> work sent',
      hops.responses.map((r) => r.dispatchMs),
    ),
  );
  console.log(
    line(
      'dispatcher: last answer -> RESPONSE written',
      hops.responses.map((r) => r.totalMs - r.settledMs),
    ),
  );
  console.log(
    line(
      'REQUEST in -> RESPONSE written',
      hops.responses.map((r) => r.totalMs),
    ),
  );
  console.log(
    line(
      'channel round trip',
      hops.results.map((r) => r.roundTripMs),
    ),
  );
  console.log(
    line(
      "  of which the volunteer's frame in -> sums",
      hops.results.map((r) => r.computeUs / 1000),
    ),
  );
  console.log(
    line(
      '  the rest (sockets, both event loops)',
      hops.results.map((r) => r.roundTripMs - r.computeUs / 1000),
    ),
  );
  // The same per layer and per worker (issue 24: the layer-0 volunteer was the slow one in every run of 2026-12-06).
  for (const layer of [...new Set(hops.responses.map((r) => r.layer))].sort((a, b) => a - b))
    console.log(
      line(
        `  layer ${layer}: REQUEST in -> work sent`,
        hops.responses.filter((r) => r.layer === layer).map((r) => r.dispatchMs),
      ),
    );
  for (const id of [...new Set(hops.results.map((r) => r.workerId))].sort()) {
    const rs = hops.results.filter((r) => r.workerId === id);
    console.log(
      line(
        `  ${id} (${rs.length}): round trip`,
        rs.map((r) => r.roundTripMs),
      ),
    );
    console.log(
      line(
        `  ${id}: the rest (less frame in -> sums)`,
        rs.map((r) => r.roundTripMs - r.computeUs / 1000),
      ),
    );
  }
  // A served REQUEST's wait on its workers (work sent -> last answer), by the pairs they served: what the claim
  // policy's fitted line (overhead + pairs × per pair) should say for each size.
  for (const [lo, hi] of [
    [1, 8],
    [9, 32],
    [33, 128],
    [129, Number.POSITIVE_INFINITY],
  ] as const) {
    const rs = hops.responses.filter((r) => r.served >= lo && r.served <= hi);
    if (rs.length === 0) continue;
    const label = `  ${hi === Number.POSITIVE_INFINITY ? `> ${lo - 1}` : `${lo}–${hi}`} pairs served (${rs.length}): work sent -> last answer`;
    console.log(
      line(
        label,
        rs.map((r) => r.settledMs - r.dispatchMs),
      ),
    );
  }
}
if (hops.all.length > 0) {
  console.log(`\nB's REQUESTs by batch size over the measured rounds (the split the claims made, and what it cost)`);
  for (const l of splitByBatch(hops.all)) console.log(`  ${l}`);
}
if (totalsB) {
  const t = totalsB;
  const routed = t.pairs.served + t.pairs.fallback + t.pairs.rejected;
  console.log(`\nB's dispatcher over the measured rounds (ModelDispatcher.totals)`);
  console.log(
    `  REQUESTs ${t.requests} (${t.servedRequests} with pairs served, ${t.localRequests} answered local; ${((100 * t.requests) / B.reduce((s, r) => s + r.reqs.reduce((u, q) => u + q.ids.length, 0), 0)).toFixed(1)} per 100 generated tokens, the rest of the layers ran quiet); connections ${t.connections}, protocol errors ${t.protocolErrors}`,
  );
  console.log(
    `  pairs: ${t.pairs.served} served, ${t.pairs.fallback} fallback (${t.pairs.late} late, ${t.pairs.audited} audited), ${t.pairs.rejected} rejected of ${routed} routed; metrics: ${counts(outcomesB)}`,
  );
  console.log(`  Layer-1 policy decisions (per worker and REQUEST): ${counts(t.decisions)}`);
  console.log(`  claim caps (v2, per worker the policy let through): ${counts(t.claims)}`);
  console.log(
    `  standing offers (v3): ${t.offers.made} made; ${t.offers.preclaimed} REQUESTs pre-claimed (${t.offers.preclaimedPairs} pairs) of ${t.requests}`,
  );
  console.log(
    `  B's coordinator (its stats lines, B's rounds summed): ${coordinatorB ? describeStats(coordinatorB, coordinatorBWallUs) : 'no stats line'}`,
  );
  console.log(`  workers at the end:`);
  for (const l of mapAtEnd) console.log(`    ${l}`);
}
console.log(`the coordinators' expert-dispatch log (the measured rounds began at +${measuredFromS.toFixed(1)} s):`);
for (const l of dispatchLog.length ? dispatchLog : ['(nothing)']) console.log(`  ${l}`);
if (totalsA)
  console.log(
    `A's dispatcher (--dispatch off: every answer asks for a quiet window): ${totalsA.requests} REQUESTs, ${((100 * totalsA.requests) / A.reduce((s, r) => s + r.reqs.reduce((u, q) => u + q.ids.length, 0), 0)).toFixed(1)} per 100 generated tokens`,
  );
console.log(line);
