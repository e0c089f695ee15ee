/**
 * Hostile input for minutes (issue 14's soak): the generators of test/integration/fuzz.test.ts (harness/fuzz.ts)
 * in a loop against one in-process hub — every HTTP endpoint, the volunteer channel in 4 lanes (two honest
 * volunteers serving meanwhile), the dispatch socket — with the hub's clock on real time (workers evicted after 20 s
 * without a heartbeat, challenges and tokens expiring as in production). Memory is sampled every 30 s: heapUsed and
 * rss after a full collection (`--expose-gc`, which the npm script passes). At the end it prints the memory table,
 * cases per second and the count of every status, close code and dispatch outcome, and exits 1 when heapUsed after
 * GC grew more than 20 % from the end of the first minute to the end, when any case failed (INTERNAL, a code outside
 * the catalogue, a wait without end), or when the process saw an uncaught exception.
 *
 *   npm run soak:fuzz [-- --minutes 10 --seed 7 --sample-s 30]
 *
 * Case indices grow round by round, so every case of the soak is a distinct, reproducible one: a failure prints the
 * FUZZ_SEED / FUZZ_CASE that replays it in the test.
 */
import { parseArgs } from 'node:util';
import { DEFAULT_SATURATION } from '../hub/market/saturation.ts';
import {
  type CaseResult,
  ChannelFuzzer,
  DispatchFuzzer,
  FUZZ_DEFAULT_SEED,
  HTTP_ENDPOINTS,
  Tally,
  describeFailure,
  honestVolunteers,
  httpContext,
  memoryNow,
  runHttpCase,
  runLanes,
  startFuzzHub,
} from '../harness/fuzz.ts';

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '10' },
    seed: { type: 'string', default: String(FUZZ_DEFAULT_SEED) },
    'sample-s': { type: 'string', default: '30' },
  },
});
const minutes = Number(values.minutes);
const seed = Number(values.seed);
const sampleS = Number(values['sample-s']);
if (!(minutes > 0)) throw new Error(`--minutes must be a positive number, got ${values.minutes}`);
if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`--seed must be an integer in [0, 2^32), got ${values.seed}`);
if (!(sampleS >= 1)) throw new Error(`--sample-s must be at least 1, got ${values['sample-s']}`);

/** Cases per round: HTTP per endpoint, channel, dispatch. A round takes a second or two on a 2-core machine. */
const ROUND = { http: 40, channel: 24, dispatch: 16 };

let crashes = 0;
process.on('uncaughtException', (e) => {
  crashes++;
  console.error(`uncaught exception: ${e.stack ?? e}`);
});
process.on('unhandledRejection', (e) => {
  crashes++;
  console.error(`unhandled rejection: ${(e as Error)?.stack ?? e}`);
});

const MB = (n: number): string => (n / 1024 / 1024).toFixed(1);
interface Sample {
  s: number;
  rss: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  arrayBuffers: number;
  cases: number;
}

// Target 2: the two honest volunteers hold one copy of each layer, the channel fuzz's serving volunteers the other.
const h = await startFuzzHub({
  realTime: true,
  over: { staleMs: 20_000, evictEveryMs: 5_000, saturation: { ...DEFAULT_SATURATION, targetBase: 2 } },
});

/** Sizes of the hub's bounded collections (private fields, read for this report only). */
function hubSizes(): string {
  const hub = h.t.hub as unknown as {
    auth: { challenges: { size: number } };
    coverage: { size: number };
    credits: Map<string, number>;
    released: Map<string, number>;
    retired: Map<string, unknown>;
  };
  const tracked = [...h.dispatcher().allWorkerStats()].length;
  return (
    `challenges ${hub.auth.challenges.size}, coverage workers ${hub.coverage.size}, credit cache ${hub.credits.size}, ` +
    `released ${hub.released.size}, retired ${hub.retired.size}, dispatcher-tracked workers ${tracked}`
  );
}
const stopHonest = await honestVolunteers(h, 2);
const ctx = httpContext(h);
const channel = new ChannelFuzzer(h, seed);
const dispatch = new DispatchFuzzer(h, seed);
const tallies = { http: new Tally(), channel: new Tally(), dispatch: new Tally() };
const failures: CaseResult[] = [];
const samples: Sample[] = [];
let cases = 0;

const record = (t: Tally, results: readonly CaseResult[]): void => {
  for (const r of results) {
    t.add(r.outcome.replace(/\[.*\]/, '').trim());
    if (r.failure !== null) {
      failures.push(r);
      if (failures.length <= 20) console.log(`FAIL ${describeFailure(seed, r)}`);
    }
  }
  cases += results.length;
};

const sample = (s: number): void => {
  const m = memoryNow();
  const row = { s, rss: m.rss, heapUsed: m.heapUsed, heapTotal: m.heapTotal, external: m.external, arrayBuffers: m.arrayBuffers, cases };
  samples.push(row);
  const prev = samples.at(-2);
  const rate = prev ? (row.cases - prev.cases) / (row.s - prev.s) : 0;
  console.log(
    `t=${String(Math.round(s)).padStart(4)} s  heapUsed ${MB(row.heapUsed).padStart(6)} MB  rss ${MB(row.rss).padStart(6)} MB  ` +
      `cases ${row.cases}${prev ? ` (${rate.toFixed(0)}/s)` : ''}; ${hubSizes()}`,
  );
};

console.log(
  `soak: ${minutes} min, seed ${seed}, memory every ${sampleS} s${memoryNow().gc ? ' after GC' : ' (no --expose-gc: heap sampled as it stands)'}; ` +
    `per round ${ROUND.http} cases × ${HTTP_ENDPOINTS.length} endpoints, ${ROUND.channel} channel, ${ROUND.dispatch} dispatch`,
);
const t0 = performance.now();
const elapsed = (): number => (performance.now() - t0) / 1000;
sample(0);
let nextSample = sampleS;
for (let round = 0; elapsed() < minutes * 60; round++) {
  for (const ep of HTTP_ENDPOINTS) {
    const idx = Array.from({ length: ROUND.http }, (_, k) => round * ROUND.http + k);
    record(tallies.http, await runLanes(idx, 4, (i) => runHttpCase(h, seed, ep, i, ctx)));
  }
  h.restoreAdmin();
  const cIdx = Array.from({ length: ROUND.channel }, (_, k) => round * ROUND.channel + k);
  record(tallies.channel, await runLanes(cIdx, 4, (i, lane) => channel.run(i, lane)));
  for (let k = 0; k < ROUND.dispatch; k++) record(tallies.dispatch, [await dispatch.run(round * ROUND.dispatch + k)]);
  if (elapsed() >= nextSample) {
    sample(elapsed());
    nextSample += sampleS;
  }
}
const seconds = elapsed();
if (seconds - (samples.at(-1)?.s ?? 0) > 1) sample(seconds);

await channel.close();
const afterChannel = await channel.stillServing();
const afterDispatch = await dispatch.stillAnswering();
const health = await fetch(`${h.http}/api/health`);
const totals = h.dispatcher().totals;
const internal = h.internalErrors.map((e) => e.detail);
await stopHonest();
await h.close();

console.log('\nmemory over time (heapUsed and rss after a full GC):');
console.log('     t (s)  heapUsed MB  heapTotal MB  rss MB  external MB  arrayBuffers MB   cases');
for (const r of samples) {
  console.log(
    `${r.s.toFixed(0).padStart(10)}  ${MB(r.heapUsed).padStart(11)}  ${MB(r.heapTotal).padStart(12)}  ${MB(r.rss).padStart(6)}  ` +
      `${MB(r.external).padStart(11)}  ${MB(r.arrayBuffers).padStart(15)}  ${String(r.cases).padStart(6)}`,
  );
}
// The end of the first minute is the baseline (the hub's caches and pools are warm by then); a shorter soak
// compares with its first sample after the start.
const baseline = samples.find((r) => r.s >= 59) ?? samples[1] ?? samples[0];
const last = samples.at(-1);
const growth = baseline && last ? (last.heapUsed - baseline.heapUsed) / baseline.heapUsed : 0;
console.log(
  `\n${cases} cases in ${seconds.toFixed(0)} s (${(cases / seconds).toFixed(0)}/s); heapUsed ${MB(baseline?.heapUsed ?? 0)} MB at ${baseline?.s.toFixed(0)} s → ` +
    `${MB(last?.heapUsed ?? 0)} MB at ${last?.s.toFixed(0)} s (${(growth * 100).toFixed(1)} %)`,
);
console.log(`HTTP (${tallies.http.total}): ${tallies.http}`);
console.log(`channel (${tallies.channel.total}): ${tallies.channel}`);
console.log(`dispatch (${tallies.dispatch.total}): ${tallies.dispatch}`);
console.log(
  `dispatcher totals: connections ${totals.connections}, protocolErrors ${totals.protocolErrors}, requests ${totals.requests} ` +
    `(local ${totals.localRequests}, served ${totals.servedRequests}), pairs ${JSON.stringify(totals.pairs)}`,
);

if (failures.length > 0) {
  const kinds = new Tally();
  for (const f of failures) kinds.add(`${f.surface} → ${f.outcome.replace(/\[.*\]/, '').trim()}`);
  console.log(`failures by surface and answer (${failures.length}): ${kinds}`);
}

const problems: string[] = [];
if (failures.length > 0) problems.push(`${failures.length} cases failed`);
if (crashes > 0) problems.push(`${crashes} uncaught exceptions`);
if (internal.length > 0) problems.push(`the hub logged ${internal.length} internal errors (first: ${internal[0]})`);
if (growth > 0.2) problems.push(`heapUsed after GC grew ${(growth * 100).toFixed(1)} % (> 20 %)`);
if (afterChannel) problems.push(`after the soak: ${afterChannel}`);
if (afterDispatch) problems.push(`after the soak: ${afterDispatch}`);
if (health.status !== 200) problems.push(`GET /api/health answered ${health.status}`);
if (problems.length > 0) {
  console.log(`\nFAILED: ${problems.join('; ')}`);
  process.exit(1);
}
console.log('\npassed: no failure, no crash, memory flat');
process.exit(0);
