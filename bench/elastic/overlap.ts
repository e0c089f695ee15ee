/**
 * `npm run bench:elastic:overlap`: does overlapping two micro-batches pay on this machine (issue 24, item 4)? The
 * overlap is made by the operating system: two coordinators (linkcpp-server) of one model file share core 0, each
 * with half the slots, so that one computes its attention and local experts while the other waits for its
 * volunteers. Four hubs side by side, rounds alternating (A1 A2 B1 B2, then B2 B1 A2 A1, …) after one warm-up each:
 *
 *   A1  one coordinator with all the slots, dispatch off (bench:elastic's A);
 *   A2  two coordinators of the same file (two model names on one hub), half the slots each, dispatch off: what the
 *       split alone costs (each decode step is done twice at half the rows);
 *   B1  one coordinator with the swarm, dispatch auto, one wasm volunteer per MoE layer (bench:elastic's B);
 *   B2  two coordinators with the swarm, one volunteer per MoE layer each: overlap at the cost of the split.
 *
 * Prints each round's aggregate decode tokens/s (every token streamed ÷ the round's wall time), the medians, and the
 * ratios: A2/A1 (the split's cost), B1/A1 (the swarm without overlap), B2/A2 (the swarm with overlap, against its own
 * split) and B2/A1 (what a user would get from the overlap). Overlap pays where B2/A1 > B1/A1.
 *
 * Placement as bench:elastic's default: every coordinator's threads on core 0; this process (the hubs and the load's
 * lanes, run here for all four alike) and the volunteers on core 1. A machine of one core is not pinned.
 *
 *   npm run bench:elastic:overlap [-- --rounds 5 --slots 4 --streams 6 --requests 2 --tokens 64 --backend wasm]
 *
 * The model is bench:elastic's (bench/shapes.ts REALISTIC, 2 MoE layers; EXPERTSWARM_BENCH_MODEL to reuse a file).
 * docs/elastic.md ("Overlap by two coordinators") holds the last measurement.
 */
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { runHub } from '../../hub/cli.ts';
import { defaultConfig } from '../../hub/hub.ts';
import { DEFAULT_SATURATION } from '../../hub/market/saturation.ts';
import { DEFAULT_DISPATCH } from '../../hub/dispatch/map.ts';
import { type HeadlessVolunteer, TRUST_OFF, spawnVolunteer, waitForCoverage } from '../../harness/swarm.ts';
import { median } from '../../shaders/computer.ts';
import { pin } from '../placement.ts';
import { REALISTIC, benchModel, volunteerBudget } from '../shapes.ts';
import { type Req, runLanes } from './lanes.ts';
import { benchPrompts } from './prompts.ts';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '5' },
    slots: { type: 'string', default: '4' },
    streams: { type: 'string', default: '6' },
    requests: { type: 'string', default: '2' },
    tokens: { type: 'string', default: '64' },
    backend: { type: 'string', default: 'wasm' },
  },
});
const int = (name: keyof typeof values, min: number): number => {
  const x = Number(values[name]);
  if (!Number.isInteger(x) || x < min) throw new Error(`--${name} takes an integer ≥ ${min}, got ${values[name]}`);
  return x;
};
const ROUNDS = int('rounds', 1);
const SLOTS = int('slots', 2);
const STREAMS = int('streams', 2);
const REQUESTS = int('requests', 1);
const TOKENS = int('tokens', 1);
if (SLOTS % 2 !== 0 || STREAMS % 2 !== 0) throw new Error('--slots and --streams must be even: the two coordinators take half each');
const BACKEND = values.backend as string;
const LAYERS = 2;
const N_REQUESTS = STREAMS * REQUESTS;

const log = (s: string): void => console.log(`[${new Date().toISOString().slice(11, 19)}] ${s}`);
/** ~100-token prompts, as bench:elastic's. */
const PROMPTS = benchPrompts(N_REQUESTS);

const PIN = cpus().length > 1 ? { coordinator: '0', rest: '1' } : null;
const startedAt = new Date();
const loadAtStart = loadavg();
const { model } = await benchModel(REALISTIC, LAYERS, log);
const budget = volunteerBudget(REALISTIC);
if (PIN) log(pin('this process (the hubs and the load)', process.pid, PIN.rest));

type Name = 'A1' | 'A2' | 'B1' | 'B2';
interface Setup {
  name: Name;
  url: string;
  models: string[];
  volunteers: HeadlessVolunteer[];
  close: () => Promise<void>;
}

async function startSetup(name: Name): Promise<Setup> {
  const split = name.endsWith('2');
  const slots = split ? SLOTS / 2 : SLOTS;
  const models = split ? ['m', 'm2'] : ['m'];
  const config = defaultConfig({
    port: 0,
    stateDir: ':memory:',
    models: models.map((n) => ({ path: model.path, name: n })),
    dispatchMode: name.startsWith('B') ? 'auto' : 'off',
    slots,
    ctxPerSlot: 1024,
    threads: 1,
    channel: { heartbeatMs: 1000, idleTimeoutMs: 900_000, loadTimeoutMs: 900_000 },
    dispatchDeadlineMs: 250,
    trust: TRUST_OFF,
    poller: { intervalMs: 500, timeoutMs: 500 },
    saturation: { ...DEFAULT_SATURATION, saturateAt: Math.max(1, slots - 1), targetBase: 1, boost: 1 },
  });
  const running = await runHub(config, () => {}, {});
  for (const m of models) {
    const pid = running.hub.coordinatorProcess(m)?.pid;
    if (pid === undefined) throw new Error(`${name}: no coordinator for ${m}`);
    if (PIN) log(pin(`${name} coordinator ${m}`, pid, PIN.coordinator));
  }
  const volunteers: HeadlessVolunteer[] = [];
  if (name.startsWith('B'))
    for (const m of models)
      for (let i = 0; i < LAYERS; i++) {
        const args = ['--model', m, '--budget-mb', String(budget.mb), '--backend', BACKEND, '--max-slices', '1'];
        volunteers.push(spawnVolunteer(running.url, `${name}-${m}-v${i}`, args));
      }
  return { name, url: running.url, models, volunteers, close: running.close };
}

interface Round {
  name: Name;
  tps: number;
  wallMs: number;
  reqs: Array<Req & { model: string }>;
}

/** The streams split evenly over the setup's models, each model its share of the requests (or until `stop`). */
async function runRound(s: Setup, stop?: () => boolean): Promise<Round> {
  const t0 = performance.now();
  const parts = await Promise.all(
    s.models.map(async (m) => {
      const plan = { url: s.url, model: m, prompts: PROMPTS, tokens: TOKENS, ban: model.ban, streams: STREAMS / s.models.length };
      const count = N_REQUESTS / s.models.length;
      const { reqs } = await runLanes(
        plan,
        (sent) => (stop ? !stop() : sent < count),
        (r) => log(`  ${s.name} ${m}: request for prompt ${r.prompt} failed: ${r.error}`),
      );
      return reqs.map((q) => ({ ...q, model: m }));
    }),
  );
  const wallMs = performance.now() - t0;
  const reqs = parts.flat();
  return { name: s.name, tps: reqs.reduce((n, q) => n + q.ids.length, 0) / (wallMs / 1000), wallMs, reqs };
}

const setups: Setup[] = [];
const rounds: Round[] = [];
const reference = new Map<number, string>();
try {
  for (const name of ['A1', 'A2', 'B1', 'B2'] as const) setups.push(await startSetup(name));
  log(`hubs up: ${setups.map((s) => `${s.name} ${s.models.length} × ${s.models.length > 1 ? SLOTS / 2 : SLOTS} slots`).join(', ')}`);
  for (const s of setups) {
    if (s.volunteers.length === 0) {
      const w = await runRound(s);
      if (s.name === 'A1') for (const q of w.reqs) if (q.error === null) reference.set(q.prompt, q.ids.join(','));
      log(`warm-up ${s.name}: ${w.tps.toFixed(1)} tok/s`);
      continue;
    }
    // Volunteers are recruited under load: it runs until every MoE layer of each model is served, past the grace window.
    await new Promise((r) => setTimeout(r, 500));
    if (PIN) for (const v of s.volunteers) pin(`volunteer ${v.proc.pid}`, v.proc.pid as number, PIN.rest);
    let served = false;
    const warm = runRound(s, () => served);
    try {
      for (const m of s.models) await waitForCoverage(s.url, m, [0, 1], REALISTIC.nExpert, 1, 900_000);
      await new Promise((r) => setTimeout(r, DEFAULT_DISPATCH.graceMs + 2_000));
    } finally {
      served = true;
    }
    log(`warm-up ${s.name}: ${(await warm).tps.toFixed(1)} tok/s (recruitment, slice loading, grace window)`);
    // SwiftShader pins some threads of its own as an engine starts: every thread again.
    if (PIN) for (const v of s.volunteers) pin(`volunteer ${v.proc.pid}`, v.proc.pid as number, PIN.rest);
  }
  for (let i = 0; i < ROUNDS; i++) {
    for (const s of i % 2 === 0 ? setups : [...setups].reverse()) {
      const r = await runRound(s);
      rounds.push(r);
      log(`round ${i + 1}/${ROUNDS} ${s.name}: decode ${r.tps.toFixed(1)} tok/s aggregate, ${(r.wallMs / 1000).toFixed(1)} s`);
    }
  }
  for (const s of setups)
    for (const v of s.volunteers)
      log(`${s.name} ${(v.output().match(/serving [^\n]*/g) ?? []).pop()?.replace(/ · wallet \w+/, '') ?? '?'}`);
} finally {
  for (const s of setups) {
    for (const v of s.volunteers) await v.stop();
    await s.close();
  }
}

const of = (n: Name): number[] => rounds.filter((r) => r.name === n).map((r) => r.tps);
const med: Record<Name, number> = { A1: median(of('A1')), A2: median(of('A2')), B1: median(of('B1')), B2: median(of('B2')) };
/** Per round i: x_i / y_i (each round ran all four back to back). */
const pairs = (x: Name, y: Name): string => {
  const xs = of(x);
  const ys = of(y);
  const r = xs.map((v, i) => v / (ys[i] as number));
  return `${median(r).toFixed(3)} (rounds ${r.map((v) => v.toFixed(3)).join(' ')})`;
};
const same = (n: Name): string => {
  let k = 0;
  let all = 0;
  for (const r of rounds.filter((x) => x.name === n))
    for (const q of r.reqs) {
      const ref = reference.get(q.prompt);
      if (q.error !== null || ref === undefined) continue;
      all++;
      if (q.ids.join(',') === ref) k++;
    }
  return `${k} of ${all}`;
};
const line = '─'.repeat(100);
console.log(`\n${line}\nbench:elastic:overlap  ${startedAt.toISOString()}`);
console.log(
  `machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}; load average ${loadAtStart.map((x) => x.toFixed(2)).join(' ')} at the start`,
);
console.log(
  `model ${REALISTIC.name} (${LAYERS} MoE layers); ${SLOTS} slots in all, coordinators -t 1${PIN ? ' on core 0, the hubs, the load and the volunteers on core 1' : ''}; ${STREAMS} streams × ${REQUESTS} requests of ${TOKENS} tokens a round; volunteers --backend ${BACKEND}`,
);
for (const n of ['A1', 'A2', 'B1', 'B2'] as const)
  console.log(
    `  ${n}  decode tok/s ${of(n)
      .map((x) => x.toFixed(1).padStart(6))
      .join(' ')}   median ${med[n].toFixed(1)}   token ids as A1's warm-up ${same(n)}`,
  );
console.log(`  A2 / A1  the split's cost                          ${pairs('A2', 'A1')}`);
console.log(`  B1 / A1  the swarm, no overlap                     ${pairs('B1', 'A1')}`);
console.log(`  B2 / A2  the swarm with overlap, against its split ${pairs('B2', 'A2')}`);
console.log(`  B2 / A1  overlap as a user would get it            ${pairs('B2', 'A1')}`);
console.log(
  `  overlap ${med.B2 > med.B1 ? 'pays' : 'does not pay'} here: B2 ${med.B2.toFixed(1)} against B1 ${med.B1.toFixed(1)} tok/s (medians)`,
);
console.log(line);
