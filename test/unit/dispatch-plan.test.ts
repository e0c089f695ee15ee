import { test } from 'node:test';
import assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import {
  DEFAULT_DEADLINES,
  checkPartial,
  expectedRoundTripMs,
  gatherRows,
  latencyLine,
  mergePartials,
  newLatencyModel,
  observeRoundTrip,
  restartLine,
  planRequest,
  type PlanWorker,
  type RequestPlan,
  requestBudgetMs,
  shadowDeadlineMs,
  workerDeadlineMs,
} from '../../hub/dispatch/plan.ts';
import { mulberry32 } from '../../shaders/random.ts';

const w = (begin: number, end: number, o: Partial<PlanWorker> = {}): PlanWorker => ({
  begin,
  end,
  queueMs: 0,
  overheadMs: 1,
  perPairMs: 0.1,
  ...o,
});

function request(nTokens: number, nUsed: number, ids: number[], probs?: number[]) {
  return {
    nTokens,
    nUsed,
    ids: Int32Array.from(ids),
    probs: Float32Array.from(probs ?? ids.map((_, i) => (i + 1) / 16)),
  };
}

/** Which worker (index into the list) each pair went to, -1 for none. */
function owners(plan: RequestPlan, nPairs: number): number[] {
  const out = new Array(nPairs).fill(-1);
  for (const wp of plan.workers) for (const p of wp.pairIndex) out[p] = wp.worker;
  return out;
}

test('planRequest: each pair goes to at most one worker whose range covers its expert', () => {
  // 2 tokens × 4 used, experts 0..15; A [0,8), B [8,12); nobody holds 12..15.
  const req = request(2, 4, [0, 9, 12, 7, 15, 8, 3, 11]);
  const plan = planRequest(req, [w(0, 8), w(8, 12)]);
  assert.deepEqual(owners(plan, 8), [0, 1, -1, 0, -1, 1, 0, 1]);
  assert.equal(plan.dispatchedPairs, 6);
  const [a, b] = plan.workers;
  assert.ok(a && b);
  // A: pairs 0, 3 (token 0) and 6 (token 1) → rows [0, 1], local experts = expert − 0.
  assert.deepEqual([...a.rowToken], [0, 1]);
  assert.deepEqual([...a.pairIndex], [0, 3, 6]);
  assert.deepEqual([...a.rowIndex], [0, 0, 1]);
  assert.deepEqual([...a.localExpert], [0, 7, 3]);
  assert.deepEqual([...a.weight], [1 / 16, 4 / 16, 7 / 16]);
  // B: pairs 1 (token 0), 5 and 7 (token 1); local experts = expert − 8.
  assert.deepEqual([...b.rowToken], [0, 1]);
  assert.deepEqual([...b.pairIndex], [1, 5, 7]);
  assert.deepEqual([...b.rowIndex], [0, 1, 1]);
  assert.deepEqual([...b.localExpert], [1, 0, 3]);
});

test('planRequest: rows are deduplicated and remapped to a compact index', () => {
  // 4 tokens; the worker holds only expert 5, used by tokens 1 and 3.
  const req = request(4, 2, [0, 1, 5, 2, 3, 4, 6, 5]);
  const plan = planRequest(req, [w(5, 6)]);
  const [a] = plan.workers;
  assert.ok(a);
  assert.equal(a.nRows, 2);
  assert.deepEqual([...a.rowToken], [1, 3]);
  assert.deepEqual([...a.rowIndex], [0, 1]);
  assert.deepEqual([...a.pairIndex], [2, 7]);
  const rows = Float32Array.from({ length: 4 * 3 }, (_, i) => i);
  assert.deepEqual([...gatherRows(a, rows, 3)], [3, 4, 5, 9, 10, 11]);
  // A worker that needs every row gets the request's array itself (no copy).
  const all = planRequest(request(2, 1, [5, 5]), [w(0, 8)]).workers[0];
  assert.ok(all);
  const two = rows.subarray(0, 6);
  assert.equal(gatherRows(all, two, 3), two);
});

test('planRequest: a token goes whole to one worker; replicas share tokens by expected finish time', () => {
  const ids = [0, 1, 2, 3, 4, 5, 6, 7];
  // Four tokens of two experts: equal replicas alternate whole tokens (ties → the earlier one), never splitting one.
  assert.deepEqual(owners(planRequest(request(4, 2, ids), [w(0, 8), w(0, 8)]), 8), [0, 0, 1, 1, 0, 0, 1, 1]);
  // One token of eight: one replica takes it whole.
  assert.deepEqual(owners(planRequest(request(1, 8, ids), [w(0, 8), w(0, 8)]), 8), [0, 0, 0, 0, 0, 0, 0, 0]);
  // A replica 3× faster per pair takes 3 of every 4 tokens.
  const fast = planRequest(request(8, 1, ids), [w(0, 8, { perPairMs: 0.3 }), w(0, 8, { perPairMs: 0.1 })]);
  assert.deepEqual(
    fast.workers.map((x) => x.nPairs),
    [2, 6],
  );
  // No worker holds all of a token's experts: split pair by pair, each to the covering worker.
  assert.deepEqual(owners(planRequest(request(1, 4, [0, 5, 1, 6]), [w(0, 4), w(4, 8)]), 4), [0, 1, 0, 1]);
  // A cap too small for a whole token: split too (the cap's pairs to that worker, the rest to the coordinator).
  assert.deepEqual(owners(planRequest(request(1, 4, [0, 1, 2, 3]), [w(0, 8, { cap: 2 })]), 4), [0, 0, -1, -1]);
  // A queue (an earlier item still computing) pushes pairs to the free replica.
  const queued = planRequest(request(1, 8, ids), [w(0, 8, { queueMs: 10 }), w(0, 8)]);
  assert.deepEqual(
    queued.workers.map((x) => x.worker),
    [1],
  );
  // An unmeasured replica is planned optimistically: its fair first try.
  const fresh = planRequest(request(1, 2, [0, 1]), [w(0, 8), w(0, 8, { overheadMs: null, perPairMs: 0 })]);
  assert.deepEqual(owners(fresh, 2), [1, 1]);
  assert.equal(fresh.workers[0]?.expectedMs, null);
  // Expected finish reported per chosen worker.
  const one = planRequest(request(1, 2, [0, 1]), [w(0, 8, { queueMs: 2, overheadMs: 3, perPairMs: 0.5 })]);
  assert.equal(one.workers[0]?.expectedMs, 2 + 3 + 2 * 0.5);
});

test('planRequest: nothing to plan', () => {
  assert.equal(planRequest(request(1, 2, [0, 1]), []).dispatchedPairs, 0);
  const none = planRequest(request(1, 2, [0, 1]), [w(4, 8)]);
  assert.equal(none.dispatchedPairs, 0);
  assert.equal(none.workers.length, 0);
});

test('planRequest agrees with a naive planner on random requests', () => {
  const rand = mulberry32(7);
  for (let trial = 0; trial < 200; trial++) {
    const nExpert = 4 + Math.floor(rand() * 60);
    const nTokens = 1 + Math.floor(rand() * 9);
    const nUsed = 1 + Math.floor(rand() * Math.min(8, nExpert));
    const ids: number[] = [];
    for (let i = 0; i < nTokens * nUsed; i++) ids.push(Math.floor(rand() * nExpert));
    const workers: PlanWorker[] = [];
    const nW = Math.floor(rand() * 6);
    for (let i = 0; i < nW; i++) {
      const a = Math.floor(rand() * nExpert);
      const b = a + 1 + Math.floor(rand() * (nExpert - a));
      workers.push(w(a, b, { queueMs: rand() * 3, overheadMs: rand() < 0.2 ? null : rand() * 2, perPairMs: rand() }));
    }
    const req = request(nTokens, nUsed, ids);
    const plan = planRequest(req, workers);
    // naive: same greedy rules with objects — a token whole to the covering worker that finishes first, else per pair
    const count = workers.map(() => 0);
    const finish = (x: PlanWorker, i: number, n: number): number =>
      x.queueMs + (x.overheadMs ?? 0) + ((count[i] as number) + n) * x.perPairMs;
    const want: number[] = [];
    for (let t = 0; t < nTokens; t++) {
      const tok = ids.slice(t * nUsed, (t + 1) * nUsed);
      let whole = -1;
      let wf = Number.POSITIVE_INFINITY;
      workers.forEach((x, i) => {
        if (!tok.every((e) => e >= x.begin && e < x.end)) return;
        const f = finish(x, i, nUsed);
        if (f < wf) {
          wf = f;
          whole = i;
        }
      });
      for (const e of tok) {
        let best = whole;
        if (whole < 0) {
          let bf = Number.POSITIVE_INFINITY;
          workers.forEach((x, i) => {
            if (e < x.begin || e >= x.end) return;
            const f = finish(x, i, 1);
            if (f < bf) {
              bf = f;
              best = i;
            }
          });
        }
        if (best >= 0) count[best] = (count[best] as number) + 1;
        want.push(best);
      }
    }
    assert.deepEqual(owners(plan, ids.length), want, `trial ${trial}`);
    for (const wp of plan.workers) {
      const W = workers[wp.worker] as PlanWorker;
      for (let q = 0; q < wp.nPairs; q++) {
        const p = wp.pairIndex[q] as number;
        assert.equal((wp.localExpert[q] as number) + W.begin, ids[p]);
        assert.equal(wp.rowToken[wp.rowIndex[q] as number], Math.floor(p / nUsed));
        assert.equal(wp.weight[q], req.probs[p]);
      }
    }
  }
});

test('checkPartial: wrong size and non-finite answers are refused', () => {
  const [wp] = planRequest(request(2, 1, [0, 1]), [w(0, 2)]).workers;
  assert.ok(wp);
  const table: Array<[string, unknown, string]> = [
    ['right', new Float32Array(6), 'ok'],
    ['short', new Float32Array(5), 'wrong-size'],
    ['long', new Float32Array(7), 'wrong-size'],
    ['f64', new Float64Array(6), 'wrong-size'],
    ['not an array', 'x', 'wrong-size'],
    ['NaN', Float32Array.of(0, 0, 0, 0, Number.NaN, 0), 'non-finite'],
    ['+inf', Float32Array.of(Number.POSITIVE_INFINITY, 0, 0, 0, 0, 0), 'non-finite'],
    ['-inf', Float32Array.of(0, 0, 0, 0, 0, Number.NEGATIVE_INFINITY), 'non-finite'],
  ];
  for (const [name, partial, verdict] of table) assert.equal(checkPartial(wp, partial, 3), verdict, name);
});

test('mergePartials: partials added per row in plan order, served flags set, missing ones left out', () => {
  // 2 tokens × 2 used; A [0,4) gets pairs 0 and 3, B [4,8) gets 1 and 2; nEmbd 2.
  const req = request(2, 2, [1, 5, 6, 2]);
  const plan = planRequest(req, [w(0, 4), w(4, 8)]);
  const a = Float32Array.of(1, 2, 3, 4); // rows of tokens 0, 1
  const b = Float32Array.of(10, 20, 30, 40);
  const served = new Uint8Array(4);
  const sums = new Float32Array(4);
  assert.equal(mergePartials(plan, [a, b], 2, served, sums), 4);
  assert.deepEqual([...served], [1, 1, 1, 1]);
  assert.deepEqual([...sums], [11, 22, 33, 44]);
  served.fill(0);
  sums.fill(0);
  assert.equal(mergePartials(plan, [null, b], 2, served, sums), 2);
  assert.deepEqual([...served], [0, 1, 1, 0]);
  assert.deepEqual([...sums], [10, 20, 30, 40]);
  // f32 sums in a fixed order: the same inputs always give the same bits.
  const x = Float32Array.of(0.1, 1e8);
  const y = Float32Array.of(0.2, 1);
  const s1 = new Float32Array(2);
  mergePartials(planRequest(request(1, 2, [0, 4]), [w(0, 4), w(4, 8)]), [x, y], 2, new Uint8Array(2), s1);
  assert.deepEqual([...s1], [Math.fround(Math.fround(0.1) + Math.fround(0.2)), Math.fround(1e8 + 1)]);
});

test('deadlines: the coordinator budget less a margin, capped; per worker from its expected time', () => {
  const c = DEFAULT_DEADLINES;
  assert.equal(requestBudgetMs(250_000, c), 225); // 10 % of 250 ms > 10 ms
  assert.equal(requestBudgetMs(50_000, c), 40); // 10 ms margin
  assert.equal(requestBudgetMs(1_000_000, c), 250); // the cap
  assert.ok(requestBudgetMs(5_000, c) <= 0); // too short to dispatch at all
  assert.equal(workerDeadlineMs(null, 225, c), 225); // unmeasured: the whole budget
  assert.equal(workerDeadlineMs(1, 225, c), 20); // the floor
  assert.equal(workerDeadlineMs(10, 225, c), 30); // 3 × expected
  assert.equal(workerDeadlineMs(100, 225, c), 225); // never past the budget
  // Shadow items (nothing waits on them): the floor, so that a slow worker is measured, not benched…
  assert.equal(shadowDeadlineMs(225, c), 3000);
  // …or 4 × the budget where that is longer.
  assert.equal(shadowDeadlineMs(225, { ...c, shadowFloorMs: 0 }), 900);
});

test('latency model: a fitted line when sizes vary, the whole round trip per pair when they do not', () => {
  const m = newLatencyModel();
  assert.equal(latencyLine(m), null);
  assert.equal(expectedRoundTripMs(m, 4), null);
  for (let i = 0; i < 50; i++) observeRoundTrip(m, 2, 4); // decode only: 2 pairs, 4 ms
  assert.deepEqual(latencyLine(m), { overheadMs: 0, perPairMs: 2 });
  assert.equal(expectedRoundTripMs(m, 2), 4);
  const fit = newLatencyModel();
  for (let i = 0; i < 200; i++) {
    const pairs = [1, 2, 8, 40][i % 4] as number;
    observeRoundTrip(fit, pairs, 3 + 0.25 * pairs);
  }
  const line = latencyLine(fit);
  assert.ok(line);
  assert.ok(Math.abs(line.overheadMs - 3) < 1e-6 && Math.abs(line.perPairMs - 0.25) < 1e-6, JSON.stringify(line));
  assert.ok(Math.abs((expectedRoundTripMs(fit, 100) as number) - 28) < 1e-4);
});

test("latency model with the worker's compute reported: compute fit + the transport's upper quartile; cold samples; none reported", () => {
  const rows: Array<{
    name: string;
    samples: Array<[pairs: number, ms: number, computeMs: number, cold?: boolean]>;
    line: { overheadMs: number; perPairMs: number };
    coldSkipped?: number;
  }> = [
    {
      name: 'compute 1 + 0.5/pair, transport 2 ms: the line is their sum',
      samples: [8, 16, 24, 32, 8, 16, 24, 32].map((p) => [p, 3 + 0.5 * p, 1 + 0.5 * p]),
      line: { overheadMs: 3, perPairMs: 0.5 },
    },
    {
      name: 'transport is the upper quartile of the window: one 40 ms stall in 9 does not move it',
      samples: [2, 2, 2, 2, 42, 2, 2, 2, 2].map((t, i) => [8 * (1 + (i % 2)), 4 * (1 + (i % 2)) + t, 4 * (1 + (i % 2))]),
      line: { overheadMs: 2, perPairMs: 0.5 },
    },
    {
      name: 'a report longer than the round trip is clipped to it (transport 0)',
      samples: [[8, 4, 9]],
      line: { overheadMs: 0, perPairMs: 0.5 },
    },
    {
      name: 'cold samples count in full until the first warm one (they are all there is)…',
      samples: [
        [8, 80, 40, true],
        [8, 80, 40, true],
      ],
      line: { overheadMs: 40, perPairMs: 5 },
    },
    {
      name: '…and the first warm one replaces that cold-only line outright',
      samples: [
        [8, 80, 40, true],
        [16, 160, 80, true],
        [8, 5, 2.4],
      ],
      line: { overheadMs: 2.6, perPairMs: 0.3 },
    },
    {
      name: '…then only when they make the worker look no slower',
      samples: [
        [8, 8, 4],
        [8, 80, 40, true],
        [8, 6, 3, true],
      ],
      line: { overheadMs: 3, perPairMs: 0.475 },
      coldSkipped: 1,
    },
    {
      name: "prompt items' transport (10 ms to send and decode hundreds of rows) stays out of a decode item's line",
      samples: [
        ...[8, 16, 8, 16].map((p): [number, number, number] => [p, 0.7 + 0.5 * p, 0.5 * p]),
        ...[400, 800, 400, 800, 400, 800].map((p): [number, number, number] => [p, 10 + 20 + 0.2 * p, 20 + 0.2 * p]),
      ],
      line: { overheadMs: 0.7, perPairMs: 0.5 },
    },
    {
      name: 'nothing reported (0): the round trip is fitted, as before',
      samples: [8, 16, 24, 32, 8, 16, 24, 32].map((p) => [p, 3 + 0.5 * p, 0]),
      line: { overheadMs: 3, perPairMs: 0.5 },
    },
  ];
  for (const r of rows) {
    const m = newLatencyModel();
    for (const [pairs, ms, computeMs, cold] of r.samples) observeRoundTrip(m, pairs, ms, computeMs, cold ?? false);
    const line = latencyLine(m);
    assert.ok(line, r.name);
    assert.ok(
      Math.abs(line.overheadMs - r.line.overheadMs) < 1e-6 && Math.abs(line.perPairMs - r.line.perPairMs) < 1e-6,
      `${r.name}: ${JSON.stringify(line)}`,
    );
    assert.equal(m.coldSkipped, r.coldSkipped ?? 0, `${r.name}: cold left out`);
  }
});

test('micro-benchmark: plan + gather + merge for 1 token × 8 experts (printed, not asserted)', (t) => {
  const nEmbd = 2048;
  const req = { ...request(1, 8, [3, 17, 40, 77, 90, 101, 120, 127]), rows: new Float32Array(nEmbd) };
  // 128 experts, two replicas of each half.
  const workers = [w(0, 64), w(64, 128), w(0, 64, { perPairMs: 0.12 }), w(64, 128, { perPairMs: 0.12 })];
  const partials = new Map<number, Float32Array>();
  const run = (): number => {
    const plan = planRequest(req, workers);
    const answers: Array<Float32Array | null> = [];
    for (const wp of plan.workers) {
      gatherRows(wp, req.rows, nEmbd);
      let p = partials.get(wp.nRows);
      if (!p) {
        p = new Float32Array(wp.nRows * nEmbd);
        partials.set(wp.nRows, p);
      }
      checkPartial(wp, p, nEmbd);
      answers.push(p);
    }
    const served = new Uint8Array(8);
    const sums = new Float32Array(nEmbd);
    return mergePartials(plan, answers, nEmbd, served, sums);
  };
  const measure = (f: () => unknown): [number, number] => {
    for (let i = 0; i < 2000; i++) f();
    const n = 20000;
    const times = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      f();
      times[i] = (performance.now() - t0) * 1000;
    }
    times.sort();
    return [times[n >> 1] as number, times[Math.floor(n * 0.99)] as number];
  };
  assert.equal(run(), 8);
  const [p50, p99] = measure(run);
  const [plan50, plan99] = measure(() => planRequest(req, workers));
  t.diagnostic(
    `1 token × 8 experts, 4 replicas (4 work items): plan only p50 ${plan50.toFixed(1)} µs p99 ${plan99.toFixed(1)} µs; ` +
      `plan + gather + check + merge at n_embd ${nEmbd}: p50 ${p50.toFixed(1)} µs p99 ${p99.toFixed(1)} µs (goal ≤ ~20 µs)`,
  );
});

test('latency model: a larger item is charged the transport of larger items, or of small ones while none was seen', () => {
  const m = newLatencyModel();
  for (const p of [8, 16, 8, 16]) observeRoundTrip(m, p, 0.7 + 0.5 * p, 0.5 * p);
  assert.ok(Math.abs((latencyLine(m, 400)?.overheadMs ?? -1) - 0.7) < 1e-6, "no large item yet: the small items' transport");
  for (const p of [400, 800, 400, 800]) observeRoundTrip(m, p, 10 + 20 + 0.2 * p, 20 + 0.2 * p);
  const big = latencyLine(m, 400);
  assert.ok(big && Math.abs(big.overheadMs - 30) < 1e-6 && Math.abs(big.perPairMs - 0.2) < 1e-6, JSON.stringify(big));
  assert.ok(Math.abs((latencyLine(m, 8)?.overheadMs ?? -1) - 0.7) < 1e-6, 'decode items keep theirs');
});

test('restartLine: a stale line (fitted while the worker was slow) gives way to the next warm samples at once', () => {
  const m = newLatencyModel();
  for (let i = 0; i < 12; i++) observeRoundTrip(m, 8, 12 + 0.6 * 8, 0.6 * 8 + 6, false); // slow: busy core, cold wasm
  const stale = latencyLine(m);
  assert.ok(stale && stale.overheadMs > 5, JSON.stringify(stale));
  restartLine(m);
  assert.equal(latencyLine(m), null, 'unmeasured until the next sample');
  observeRoundTrip(m, 8, 0.7 + 0.3 * 8, 0.3 * 8, false);
  const fresh = latencyLine(m);
  assert.ok(fresh && Math.abs(fresh.overheadMs - 0.7) < 1e-6 && Math.abs(fresh.perPairMs - 0.3) < 1e-6, JSON.stringify(fresh));
  assert.equal(m.warm, 1);
});
