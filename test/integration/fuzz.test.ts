/**
 * Hostile input, fuzzed (issue 14): seeded, reproducible mutations of everything a stranger can send the hub.
 * - HTTP: ≥ 1,000 mutated bodies (POST) or queries (GET) per endpoint, in process (fastify inject), with mutated path
 *   parameters and Authorization headers now and then: every answer is 2xx, or exactly the catalogue status of a
 *   catalogue code with `{error, code}`, never INTERNAL.
 * - Volunteer channel: ≥ 1,000 mutated hellos, control messages after a hello, binary frames for work never sent, and
 *   results for work the hub really sent to a serving volunteer, over real WebSockets: each connection ends with a
 *   catalogue close code (or `ws`'s 1007 / 1009) or stays open and answers a ping, and the hub's work settles.
 * - Dispatch socket: ≥ 1,000 mutated HELLO and REQUEST frames, frames out of order, valid frames in small chunks and
 *   garbage, with two honest volunteers serving so REQUESTs reach workers: each connection is answered with frames
 *   that decode, or dropped and counted in `totals.protocolErrors`, or left waiting for the rest of a frame.
 * Throughout, the hub logs no internal error, and afterwards it still serves (health, a fresh volunteer, a valid
 * coordinator). harness/fuzz.ts has the mutators; scripts/soak-fuzz.ts runs them for minutes and watches memory.
 *
 *   node --import tsx --test test/integration/fuzz.test.ts
 *   FUZZ_SEED=7 FUZZ_CASES=200 node --import tsx --test test/integration/fuzz.test.ts    # another seed, fewer cases
 *   FUZZ_SEED=20140014 FUZZ_CASE='POST /v1/completions#17' node --import tsx --test …   # one case again
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  type CaseResult,
  ChannelFuzzer,
  DispatchFuzzer,
  type FuzzHub,
  HTTP_ENDPOINTS,
  Tally,
  describeFailure,
  fuzzCaseFilter,
  fuzzSeed,
  honestVolunteers,
  httpContext,
  runHttpCase,
  runLanes,
  startFuzzHub,
} from '../../harness/fuzz.ts';

const seed = fuzzSeed();
const only = fuzzCaseFilter();
/** 1,100 per surface: about 6 % of the draws leave the input valid, so each surface gets ≥ 1,000 mutated ones. */
const CASES = Number(process.env.FUZZ_CASES ?? 1100);
assert.ok(Number.isInteger(CASES) && CASES > 0, 'FUZZ_CASES must be a positive integer');
const atScale = only === null && process.env.FUZZ_CASES === undefined;

console.log(
  `# fuzz seed ${seed} (FUZZ_SEED=${seed} reproduces this run), ${only ? `one case: ${only.surface}#${only.index}` : `${CASES} cases per surface`}`,
);

/** Whether this run executes any of these surfaces (FUZZ_CASE picks one). */
const runs = (surfaces: readonly string[]): boolean => only === null || surfaces.includes(only.surface);
const OTHER = 'FUZZ_CASE names another surface';
/** A case whose input was changed (`valid` is the op of a draw that left it as it was). */
const mutated = (r: CaseResult): boolean => !r.ops.includes('valid');
const HTTP_NAMES = HTTP_ENDPOINTS.map((e) => e.name);

/** The case indices of a surface this run executes. */
function indices(surface: string): number[] {
  if (only) return only.surface === surface ? [only.index] : [];
  return Array.from({ length: CASES }, (_, i) => i);
}

/** Prints a surface's counts and returns its failures, reproducible one by one. */
function report(label: string, results: readonly CaseResult[], ms: number): string[] {
  const tally = new Tally();
  for (const r of results) tally.add(r.outcome.replace(/\[.*\]/, '').trim());
  console.log(
    `# ${label}: ${results.length} cases in ${(ms / 1000).toFixed(1)} s (${((results.length / ms) * 1000).toFixed(0)}/s): ${tally}`,
  );
  const failed = results.filter((r) => r.failure !== null);
  for (const r of failed.slice(0, 5)) console.log(`#   FAIL ${describeFailure(seed, r)}`);
  if (failed.length > 5) console.log(`#   … and ${failed.length - 5} more failures`);
  return failed.map((r) => describeFailure(seed, r));
}

async function healthy(h: FuzzHub): Promise<void> {
  const r = await fetch(`${h.http}/api/health`);
  assert.equal(r.status, 200, 'GET /api/health after the fuzz');
}

function noInternalErrors(h: FuzzHub): void {
  assert.deepEqual(
    h.internalErrors.map((e) => e.detail),
    [],
    'the hub logged internal errors',
  );
}

function shortList(failures: readonly string[]): string {
  return `${failures.length} failures; the first:\n${failures.slice(0, 10).join('\n')}`;
}

test('HTTP: mutated bodies, queries, path parameters and tokens get 2xx or their catalogue code, never INTERNAL', {
  skip: !runs(HTTP_NAMES) && OTHER,
}, async () => {
  const h = await startFuzzHub();
  try {
    const ctx = httpContext(h);
    const failures: string[] = [];
    let total = 0;
    const t0 = performance.now();
    for (const ep of HTTP_ENDPOINTS) {
      const idx = indices(ep.name);
      if (idx.length === 0) continue;
      const t1 = performance.now();
      const results = await runLanes(idx, 4, (i) => runHttpCase(h, seed, ep, i, ctx));
      h.restoreAdmin(); // the admin fuzz changes the target and the dispatch mode
      failures.push(...report(ep.name, results, performance.now() - t1));
      total += results.length;
      const n = results.filter(mutated).length;
      if (atScale) assert.ok(n >= 1000, `${ep.name}: ${n} mutated inputs`);
    }
    console.log(`# HTTP: ${total} cases over ${HTTP_ENDPOINTS.length} endpoints in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    await healthy(h);
    assert.deepEqual(failures, [], shortList(failures));
    noInternalErrors(h);
  } finally {
    await h.close();
  }
});

test('volunteer channel: mutated hellos, control messages and frames end with a catalogue close code or stay open', {
  skip: !runs(['channel']) && OTHER,
}, async () => {
  const h = await startFuzzHub();
  const fz = new ChannelFuzzer(h, seed);
  try {
    const idx = indices('channel');
    const t0 = performance.now();
    const results = await runLanes(idx, 4, (i, lane) => fz.run(i, lane));
    const failures = report('volunteer channel', results, performance.now() - t0);
    const kinds = new Tally();
    for (const r of results) kinds.add(r.ops[0]?.split(' ')[0] ?? '?');
    console.log(`# volunteer channel by kind: ${kinds}; result cases without a slice to serve: ${fz.skipped}`);
    if (atScale) {
      assert.ok(results.filter(mutated).length >= 1000, 'channel inputs');
      assert.ok(
        results.filter((r) => r.ops[0] === 'result for real work' && !r.outcome.startsWith('skipped')).length >= 100,
        'results for real work',
      );
    }
    await fz.close();
    assert.equal(await fz.stillServing(), null, 'a fresh volunteer after the fuzz');
    await healthy(h);
    assert.deepEqual(failures, [], shortList(failures));
    noInternalErrors(h);
  } finally {
    await fz.close();
    await h.close();
  }
});

test('dispatch socket: mutated HELLO and REQUEST frames and garbage are answered validly or dropped and counted', {
  skip: !runs(['dispatch']) && OTHER,
}, async () => {
  const h = await startFuzzHub();
  const stop = await honestVolunteers(h, 2);
  const fz = new DispatchFuzzer(h, seed);
  try {
    const idx = indices('dispatch');
    const t0 = performance.now();
    const results: CaseResult[] = [];
    for (const i of idx) results.push(await fz.run(i)); // one connection at a time: a new one replaces the last
    const failures = report('dispatch socket', results, performance.now() - t0);
    const d = h.dispatcher().totals;
    console.log(
      `# dispatch totals: connections ${d.connections}, protocolErrors ${d.protocolErrors}, requests ${d.requests} ` +
        `(local ${d.localRequests}, served ${d.servedRequests}), pairs ${JSON.stringify(d.pairs)}`,
    );
    if (atScale) {
      assert.ok(results.filter(mutated).length >= 1000, 'dispatch inputs');
      assert.ok(d.protocolErrors >= 300, 'most mutations are refused');
      assert.ok(d.requests >= 100, 'and valid ones answered');
    }
    assert.equal(await fz.stillAnswering(), null, 'a valid coordinator after the fuzz');
    await healthy(h);
    assert.deepEqual(failures, [], shortList(failures));
    noInternalErrors(h);
  } finally {
    await stop();
    await h.close();
  }
});
