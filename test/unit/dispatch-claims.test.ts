/**
 * Protocol v2's claim caps (hub/dispatch/claims.ts) as a table: a worker faster or slower than the coordinator,
 * never measured, with the coordinator saturated (slow per pair) or idle (fast), replicas, deadlines — the caps, the
 * reasons and the expected layer time against the coordinator alone.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  type ClaimInput,
  type ClaimReason,
  type ClaimWorker,
  DEFAULT_CLAIMS,
  claimCaps,
  offerLine,
  shadowProbeGapMs,
} from '../../hub/dispatch/claims.ts';
import {
  type LatencyModel,
  SMALL_ITEM_PAIRS,
  expectedRoundTripMs,
  latencyLine,
  newLatencyModel,
  observeRoundTrip,
} from '../../hub/dispatch/plan.ts';
import { warmFollowUp } from '../../hub/dispatch/probes.ts';

const W = (covered: number, overheadMs: number | null, perPairMs = 0, queueMs = 0): ClaimWorker => ({
  covered,
  overheadMs,
  perPairMs,
  queueMs,
});

interface Row {
  name: string;
  input: ClaimInput;
  /** Each worker's cap: an exact number or [min, max]. */
  caps: Array<number | [number, number]>;
  reasons: ClaimReason[];
  /** The expected layer time must be at most this share of the coordinator alone (when measured). */
  maxShareOfAlone?: number;
  /** One worker: its part and the coordinator's finish together (within one pair of the slower side). */
  together?: boolean;
}

const ROWS: Row[] = [
  {
    name: 'a fast worker (2 ms + 0.05 ms/pair) vs a saturated coordinator (1 ms/pair): it takes most, the split finishes together',
    input: { nPairs: 64, localMsPerPair: 1, budgetMs: 225, workers: [W(64, 2, 0.05)] },
    caps: [[55, 62]],
    reasons: ['balanced'],
    maxShareOfAlone: 0.15,
  },
  {
    name: 'a worker as fast as the coordinator per pair, with 4 ms of overhead: about half, less the overhead',
    input: { nPairs: 64, localMsPerPair: 1, budgetMs: 225, workers: [W(64, 4, 1)] },
    caps: [[28, 31]],
    reasons: ['balanced'],
    maxShareOfAlone: 0.6,
  },
  {
    name: 'a slower worker (3 ms/pair, 2 ms overhead): a small share still helps',
    input: { nPairs: 64, localMsPerPair: 1, budgetMs: 225, workers: [W(64, 2, 3)] },
    caps: [[14, 16]],
    reasons: ['balanced'],
    maxShareOfAlone: 0.8,
  },
  {
    name: 'a worker that halves the layer (as fast as the coordinator per pair, no overhead): half the pairs, half the time',
    input: { nPairs: 64, localMsPerPair: 1, budgetMs: 225, workers: [W(64, 0, 1)] },
    caps: [32],
    reasons: ['balanced'],
    maxShareOfAlone: 0.5,
    together: true,
  },
  {
    name: 'a worker 4× slower per pair than the coordinator: a fifth of the pairs, both parts done at 80 % of alone',
    input: { nPairs: 100, localMsPerPair: 1, budgetMs: 225, workers: [W(100, 0, 4)] },
    caps: [20],
    reasons: ['balanced'],
    maxShareOfAlone: 0.8,
    together: true,
  },
  {
    name: "bench:elastic's wasm volunteer on a decode step (6 ms + 0.8 ms/pair; 4 slots × top-8 at 0.12 ms): nothing",
    input: { nPairs: 32, localMsPerPair: 0.12, budgetMs: 225, workers: [W(32, 6, 0.8)] },
    caps: [0],
    reasons: ['too-slow'],
  },
  {
    name: 'the same volunteer on a prompt batch (512 tokens × top-8 at 0.05 ms a pair): its share, finishing with the coordinator',
    input: { nPairs: 4096, localMsPerPair: 0.05, budgetMs: 500, workers: [W(4096, 6, 0.8)] },
    caps: [[228, 236]],
    reasons: ['balanced'],
    maxShareOfAlone: 0.96,
    together: true,
  },
  {
    name: 'a batch the balance would give 107 pairs (92 ms) under a 100 ms budget: what it finishes in half of it (room for a hiccup)',
    input: { nPairs: 1024, localMsPerPair: 0.1, budgetMs: 100, workers: [W(1024, 6, 0.8)] },
    caps: [55],
    reasons: ['balanced'],
    maxShareOfAlone: 0.95,
  },
  {
    name: 'the prompt batch under a 225 ms budget: half the deadline leaves a gain under 5 %, so nothing',
    input: { nPairs: 4096, localMsPerPair: 0.05, budgetMs: 225, workers: [W(4096, 6, 0.8)] },
    caps: [0],
    reasons: ['no-gain'],
  },
  {
    name: 'a worker whose fixed cost alone is past the coordinator alone: nothing (a wasm tab on a phone)',
    input: { nPairs: 8, localMsPerPair: 0.05, budgetMs: 225, workers: [W(8, 30, 1)] },
    caps: [0],
    reasons: ['too-slow'],
  },
  {
    name: 'an idle coordinator (decode: 8 pairs at 0.02 ms) vs a 1 ms round trip: nothing',
    input: { nPairs: 8, localMsPerPair: 0.02, budgetMs: 225, workers: [W(8, 1, 0.01)] },
    caps: [0],
    reasons: ['too-slow'],
  },
  {
    name: 'a split that saves under 5 %: nothing claimed',
    input: { nPairs: 100, localMsPerPair: 1, budgetMs: 225, workers: [W(3, 0, 0.5)] },
    caps: [0],
    reasons: ['no-gain'],
  },
  {
    name: 'never measured: a probe of probePairs, whatever the coordinator',
    input: { nPairs: 64, localMsPerPair: 1, budgetMs: 225, workers: [W(64, null)] },
    caps: [DEFAULT_CLAIMS.probePairs],
    reasons: ['probe'],
  },
  {
    name: 'never measured, covering fewer pairs than a probe: all of them',
    input: { nPairs: 64, localMsPerPair: 1, budgetMs: 225, workers: [W(3, null)] },
    caps: [3],
    reasons: ['probe'],
  },
  {
    name: "the coordinator's speed unmeasured: the worker's coverage within half its deadline",
    input: { nPairs: 64, localMsPerPair: 0, budgetMs: 100, workers: [W(64, 2, 2), W(10, null)] },
    caps: [24, DEFAULT_CLAIMS.probePairs],
    reasons: ['unmeasured-local', 'probe'],
  },
  {
    name: 'the deadline (halved: slack for a hiccup) bounds a worker even where the balance would give it more',
    input: { nPairs: 400, localMsPerPair: 1, budgetMs: 50, workers: [W(400, 0, 0.5)] },
    caps: [50],
    reasons: ['balanced'],
  },
  {
    name: 'a worker that covers nothing, beside one that helps',
    input: { nPairs: 32, localMsPerPair: 1, budgetMs: 225, workers: [W(0, 1, 0.1), W(32, 1, 0.1)] },
    caps: [0, [25, 31]],
    reasons: ['uncovered', 'balanced'],
    maxShareOfAlone: 0.25,
  },
  {
    name: 'two replicas, one queued behind 20 ms of work: the free one takes more',
    input: { nPairs: 64, localMsPerPair: 1, budgetMs: 225, workers: [W(64, 1, 0.5), W(64, 1, 0.5, 20)] },
    caps: [
      [38, 44],
      [0, 4],
    ],
    reasons: ['balanced', 'too-slow'],
  },
];

for (const row of ROWS) {
  test(`claim caps: ${row.name}`, () => {
    const out = claimCaps(row.input);
    row.caps.forEach((want, i) => {
      const got = out.caps[i] as number;
      if (typeof want === 'number') assert.equal(got, want, `worker ${i}: cap ${got}, want ${want}`);
      else assert.ok(got >= want[0] && got <= want[1], `worker ${i}: cap ${got}, want ${want[0]}..${want[1]}`);
    });
    // The second replica's reason depends on whether its queue is past the balanced finish: allow either side of it.
    row.reasons.forEach((want, i) => {
      const got = out.reasons[i];
      if (row.name.startsWith('two replicas') && i === 1) assert.ok(got === 'too-slow' || got === 'balanced', String(got));
      else assert.equal(got, want, `worker ${i}`);
    });
    if (row.maxShareOfAlone !== undefined) {
      assert.ok(out.expectedMs <= row.maxShareOfAlone * out.aloneMs, `expected ${out.expectedMs.toFixed(2)} ms of ${out.aloneMs} ms alone`);
    }
    if (row.input.localMsPerPair > 0) assert.ok(out.expectedMs <= out.aloneMs + 1e-9, 'never slower than the coordinator alone');
    if (row.together) {
      const w = row.input.workers[0] as ClaimWorker;
      const c = out.caps[0] as number;
      const local = (row.input.nPairs - c) * row.input.localMsPerPair;
      const remote = w.queueMs + (w.overheadMs ?? 0) + c * w.perPairMs;
      const slack = Math.max(row.input.localMsPerPair, w.perPairMs);
      assert.ok(
        Math.abs(local - remote) <= slack + 1e-9,
        `local ${local.toFixed(2)} ms and remote ${remote.toFixed(2)} ms finish together`,
      );
    }
  });
}

test('claim caps never make the layer slower than the coordinator alone (random workers, seeded)', () => {
  let seed = 12345;
  const rnd = (): number => {
    seed = (seed * 1103515245 + 12345) >>> 0;
    return seed / 2 ** 32;
  };
  for (let n = 0; n < 2000; n++) {
    const nPairs = 1 + Math.floor(rnd() * 512);
    const workers = Array.from({ length: 1 + Math.floor(rnd() * 4) }, () =>
      W(Math.floor(rnd() * (nPairs + 1)), rnd() * 20, rnd() * 2, rnd() < 0.3 ? rnd() * 30 : 0),
    );
    const input = { nPairs, localMsPerPair: 0.01 + rnd() * 2, budgetMs: 50 + rnd() * 200, workers };
    const out = claimCaps(input);
    assert.ok(out.expectedMs <= out.aloneMs + 1e-9, `case ${n}: ${out.expectedMs} > ${out.aloneMs}`);
    out.caps.forEach((c, i) => {
      const w = workers[i] as ClaimWorker;
      assert.ok(c >= 0 && c <= w.covered, `case ${n}: cap ${c} outside 0..${w.covered}`);
      const slackMs = input.budgetMs / DEFAULT_CLAIMS.deadlineSlack;
      if (c > 0 && w.overheadMs !== null)
        assert.ok(w.queueMs + w.overheadMs + c * w.perPairMs <= slackMs + 1e-9, `case ${n}: past half the deadline`);
    });
  }
});

test('claim caps: a deadlineSlack left unset or out of range in an override reads as none (never NaN caps)', () => {
  const input: ClaimInput = { nPairs: 400, localMsPerPair: 1, budgetMs: 50, workers: [W(400, 0, 0.5)] };
  for (const deadlineSlack of [undefined as unknown as number, Number.NaN, 0, -3]) {
    const out = claimCaps(input, { ...DEFAULT_CLAIMS, deadlineSlack });
    assert.deepEqual(out.caps, [100], `deadlineSlack ${deadlineSlack}: the whole budget`);
  }
  assert.deepEqual(claimCaps(input, { ...DEFAULT_CLAIMS, deadlineSlack: 4 }).caps, [25]);
});

test('shadow probe gaps: the base doubled per backoff step (at most 32×), never under 20 × the probe itself', () => {
  const rows: Array<{ name: string; backoff: number; probeMs: number | null; want: number }> = [
    { name: 'first probe, unmeasured', backoff: 0, probeMs: null, want: 2_000 },
    { name: 'a fast worker', backoff: 0, probeMs: 5, want: 2_000 },
    { name: 'second probe of a worker that stays too slow', backoff: 1, probeMs: 5, want: 4_000 },
    { name: 'backoff capped at 32×', backoff: 12, probeMs: 5, want: 64_000 },
    { name: 'negative backoff reads as none', backoff: -1, probeMs: null, want: 2_000 },
    { name: 'a probe that takes 2 s: at most 5 % of the worker', backoff: 0, probeMs: 2_000, want: 40_000 },
    { name: 'its backoff still counts when longer', backoff: 5, probeMs: 2_000, want: 64_000 },
  ];
  for (const r of rows) assert.equal(shadowProbeGapMs(r.backoff, r.probeMs), r.want, r.name);
  assert.equal(shadowProbeGapMs(0, 2_000, { ...DEFAULT_CLAIMS, shadowProbeDuty: 0 }), 2_000, 'duty 0: no floor from the probe');
});

// ---------------------------------------------------------------------------------------------
// Claims on lines the dispatcher fits (plan.ts LatencyModel): the decline loop of docs/elastic.md ("Measured for
// issue 24") — a line fitted at ~10 ms of fixed cost declined every decode item, and the cold probes that were then
// all it saw re-confirmed the decline.

/** bench:elastic's coordinator on one core, ms per pair; a decode step of its 4 slots × top-8. */
const L = 0.15;
const DECODE = 32;

/** A wasm volunteer warm under load: compute 0.2 ms + 0.28 ms/pair, transport 0.7–1.1 ms, decode batches of 1–4 tokens. */
function warmWorker(samples = 40): LatencyModel {
  const m = newLatencyModel();
  for (let i = 0; i < samples; i++) {
    const pairs = 8 * (1 + (i % 4));
    const compute = 0.2 + 0.28 * pairs;
    observeRoundTrip(m, pairs, compute + 0.7 + 0.1 * (i % 5), compute);
  }
  return m;
}

/** bench:elastic run 6's cold shadow probe: 8 pairs, 19 ms on the channel, of which 8.2 ms the volunteer's own. */
const coldProbe = (m: LatencyModel): boolean => observeRoundTrip(m, 8, 19, 8.2, true);

function claimOn(m: LatencyModel, nPairs = DECODE, keepWarm = false): ReturnType<typeof claimCaps> {
  const line = latencyLine(m);
  assert.ok(line, 'measured');
  return claimCaps({
    nPairs,
    localMsPerPair: L,
    budgetMs: 225,
    workers: [{ covered: nPairs, queueMs: 0, overheadMs: line.overheadMs, perPairMs: line.perPairMs, keepWarm }],
  });
}

test('fitted claims: a warm worker that helps on a decode step is claimed (the line is its compute plus its transport)', () => {
  const m = warmWorker();
  const line = latencyLine(m);
  assert.ok(line && line.overheadMs > 0.8 && line.overheadMs < 1.3, `fixed cost ${line?.overheadMs} ms: 0.2 compute + ~0.9 transport`);
  assert.ok(Math.abs(line.perPairMs - 0.28) < 0.01, `per pair ${line.perPairMs} ms`);
  const out = claimOn(m);
  assert.equal(out.reasons[0], 'balanced');
  assert.ok((out.caps[0] as number) >= 6, `cap ${out.caps[0]}`);
  assert.ok(out.expectedMs <= 0.8 * out.aloneMs, `${out.expectedMs} ms of ${out.aloneMs} alone`);
});

test('fitted claims: cold probes after warm service do not flip the decision (they leave the line as it was)', () => {
  const m = warmWorker();
  const before = latencyLine(m);
  for (let i = 0; i < 10; i++) assert.equal(coldProbe(m), false, 'a cold probe slower than the line is left out');
  assert.equal(m.coldSkipped, 10);
  assert.deepEqual(latencyLine(m), before);
  assert.equal(claimOn(m).reasons[0], 'balanced');
  // A cold item that shows the worker faster than its line does enter it.
  assert.equal(observeRoundTrip(m, 8, 1.5, 1.0, true), true);
  assert.ok((latencyLine(m)?.overheadMs ?? 99) <= (before?.overheadMs ?? 0) + 0.05);
});

test('fitted claims: one GC pause in the round trip does not set the fixed cost (transport is a windowed upper quartile)', () => {
  const m = warmWorker();
  const before = latencyLine(m);
  assert.ok(before);
  const compute = 0.2 + 0.28 * DECODE;
  observeRoundTrip(m, DECODE, compute + 40, compute); // the hub's event loop stalled 40 ms before it read the answer
  const after = latencyLine(m);
  assert.ok(after && Math.abs(after.overheadMs - before.overheadMs) < 0.15, `${before.overheadMs} → ${after?.overheadMs} ms`);
  assert.ok(Math.abs(after.perPairMs - before.perPairMs) < 1e-9, 'the compute fit does not see it');
  assert.equal(claimOn(m).reasons[0], 'balanced');
  // Without compute reports the round trip is all there is: the same pause moves that line by several ms (why
  // compute is fitted apart).
  const rt = newLatencyModel();
  for (let i = 0; i < 40; i++) {
    const pairs = 8 * (1 + (i % 4));
    observeRoundTrip(rt, pairs, 0.2 + 0.28 * pairs + 0.9);
  }
  const rtBefore = expectedRoundTripMs(rt, DECODE) as number;
  observeRoundTrip(rt, DECODE, compute + 40);
  assert.ok((expectedRoundTripMs(rt, DECODE) as number) - rtBefore > 2, 'a round-trip fit is moved by it');
  assert.ok(Math.abs((expectedRoundTripMs(m, DECODE) as number) - (before.overheadMs + DECODE * before.perPairMs)) < 0.15);
});

test('fitted claims: a truly slow worker (a software adapter, 50× slower) stays declined, keep-warm or not', () => {
  const m = newLatencyModel();
  // Its probation and probes are all it has run: cold, and they count in full (they are all there is of it).
  for (let i = 0; i < 6; i++) assert.equal(observeRoundTrip(m, 8, 2_000 + 10 * i, 1_990 + 10 * i, true), true);
  for (const nPairs of [8, DECODE, 800]) {
    for (const keepWarm of [false, true]) {
      const out = claimOn(m, nPairs, keepWarm);
      assert.equal(out.caps[0], 0, `${nPairs} pairs, keepWarm ${keepWarm}`);
      assert.ok(out.reasons[0] === 'too-slow' || out.reasons[0] === 'no-gain', String(out.reasons[0]));
    }
  }
});

test("fitted claims: a worker that halves the layer (its pairs as fast as the coordinator's, little fixed cost) takes half", () => {
  const m = newLatencyModel();
  for (let i = 0; i < 40; i++) {
    const pairs = 64 * (1 + (i % 4));
    observeRoundTrip(m, pairs, L * pairs + 0.05, L * pairs);
  }
  const out = claimOn(m, 256);
  assert.equal(out.reasons[0], 'balanced');
  assert.ok(Math.abs((out.caps[0] as number) - 128) <= 2, `cap ${out.caps[0]}`);
  assert.ok(out.expectedMs <= 0.51 * out.aloneMs, `${out.expectedMs} ms of ${out.aloneMs} alone`);
});

test('keep-warm claims: a proven worker left out by a marginal split gets a small item, free by its line', () => {
  // A split that saves 3 % (under minGain): no-gain — unless the worker is proven and due (keepWarm).
  const input: ClaimInput = { nPairs: 100, localMsPerPair: 1, budgetMs: 225, workers: [W(3, 0, 0.5)] };
  assert.deepEqual(claimCaps(input).reasons, ['no-gain']);
  const warm = claimCaps({ ...input, workers: [{ ...W(3, 0, 0.5), keepWarm: true }] });
  assert.deepEqual(warm.caps, [3]);
  assert.deepEqual(warm.reasons, ['keep-warm']);
  assert.ok(warm.expectedMs <= warm.aloneMs);
  // At most probePairs, and only what it finishes within the layer's expected time.
  const wide = claimCaps({ nPairs: 1000, localMsPerPair: 0.02, budgetMs: 225, workers: [{ ...W(1000, 19, 0.01), keepWarm: true }] });
  assert.deepEqual(wide.reasons, ['keep-warm']);
  assert.equal(wide.caps[0], DEFAULT_CLAIMS.probePairs);
  // Too slow for any pair within the coordinator's time alone: nothing, keepWarm or not.
  const slow = claimCaps({ nPairs: 8, localMsPerPair: 0.05, budgetMs: 225, workers: [{ ...W(8, 30, 1), keepWarm: true }] });
  assert.deepEqual(slow.caps, [0]);
  assert.deepEqual(slow.reasons, ['too-slow']);
  // Beside a worker the split claims: only what it finishes within the split's expected time.
  const two = claimCaps({
    nPairs: 64,
    localMsPerPair: 1,
    budgetMs: 225,
    workers: [W(64, 2, 0.05), { ...W(64, 20, 0.5), keepWarm: true }],
  });
  assert.equal(two.reasons[0], 'balanced');
  const c = two.caps[1] as number;
  assert.ok(c === 0 || 20 + 0.5 * c <= two.expectedMs + 1e-9, `keep-warm cap ${c} within ${two.expectedMs} ms`);
});

test('fitted claims: a worker first measured only cold is declined, and claimed after the warm follow-up to its probe', () => {
  const m = newLatencyModel();
  // bench:elastic: its first item and the probes after it, all cold (its engine had just started; idle between).
  for (let i = 0; i < 6; i++) {
    const pairs = 8 * (1 + (i % 2));
    observeRoundTrip(m, pairs, 8.5 + 3.2 * pairs, 3.2 * pairs, true);
  }
  assert.equal(claimOn(m).caps[0], 0, 'declined on its cold line');
  assert.equal(warmFollowUp({ latency: m }, 19, DEFAULT_CLAIMS), true, 'its quick probe is followed up');
  observeRoundTrip(m, 8, 0.9 + 0.2 + 0.28 * 8, 0.2 + 0.28 * 8, false); // the follow-up: warm
  assert.equal(claimOn(m).reasons[0], 'balanced');
  assert.equal(warmFollowUp({ latency: m }, 19, DEFAULT_CLAIMS), true, 'one warm sample is not yet enough');
  for (let i = 1; i < DEFAULT_CLAIMS.warmFollowUpUntil; i++) observeRoundTrip(m, 8, 0.9 + 0.2 + 0.28 * 8, 0.2 + 0.28 * 8, false);
  assert.equal(warmFollowUp({ latency: m }, 19, DEFAULT_CLAIMS), false, `${DEFAULT_CLAIMS.warmFollowUpUntil} warm samples are`);
  // A software adapter's probe takes seconds: no follow-up, and it stays declined.
  const slow = newLatencyModel();
  observeRoundTrip(slow, 8, 2_000, 1_990, true);
  assert.equal(warmFollowUp({ latency: slow }, 2_000, DEFAULT_CLAIMS), false);
  assert.equal(claimOn(slow).caps[0], 0);
});

test('fitted claims: prompt items (hundreds of pairs, cheaper per pair) do not bend the decode line (a fit per size)', () => {
  // bench:elastic: decode items of 8–32 pairs at 0.2 + 0.28 ms/pair, and now and then a prompt batch's item of 300–500
  // pairs, whose batched kernel reads each expert once for many rows: 0.15 ms/pair. One line through both read
  // ~7 ms + 0.1 ms/pair, and the decode items after each prompt item were declined as too slow.
  const m = warmWorker();
  for (let i = 0; i < 3; i++) {
    const pairs = 300 + 100 * i;
    observeRoundTrip(m, pairs, 0.15 * pairs + 0.9, 0.15 * pairs);
  }
  const decode = latencyLine(m, DECODE);
  assert.ok(decode && Math.abs(decode.perPairMs - 0.28) < 0.01 && decode.overheadMs < 1.3, `decode line ${JSON.stringify(decode)}`);
  const prompt = latencyLine(m, 400);
  assert.ok(prompt && Math.abs(prompt.perPairMs - 0.15) < 0.01, `prompt line ${JSON.stringify(prompt)}`);
  assert.ok(Math.abs((expectedRoundTripMs(m, 400) as number) - (prompt.overheadMs + 400 * prompt.perPairMs)) < 1e-9);
  const out = claimOn(m);
  assert.equal(out.reasons[0], 'balanced', 'the decode step after the prompt items is still claimed');
  assert.ok((out.caps[0] as number) >= 6, `cap ${out.caps[0]}`);
  // The boundary: items of SMALL_ITEM_PAIRS pairs are decode-sized; one more is prompt-sized.
  assert.deepEqual(latencyLine(m, SMALL_ITEM_PAIRS), decode);
  assert.deepEqual(latencyLine(m, SMALL_ITEM_PAIRS + 1), prompt);
  // A worker measured on one size only answers for the other with that line (nothing better is known).
  const onlyDecode = warmWorker();
  assert.deepEqual(latencyLine(onlyDecode, 400), latencyLine(onlyDecode, DECODE));
});

test('offerLine (v3): the balanced split as a line a*N - b, the same as claimCaps for workers that start at once', () => {
  const cfg = DEFAULT_CLAIMS;
  const rows: Array<{
    name: string;
    workers: Array<{ overheadMs: number; perPairMs: number }>;
    L: number;
    budget: number;
    want: { a: number; b: number; maxPairs: number } | null;
  }> = [
    // a = L/(L+P), b = F/(L+P); maxPairs: the pairs within budget / deadlineSlack (225 / 2 = 112.5 ms)
    {
      name: 'a wasm volunteer slower than local per pair',
      workers: [{ overheadMs: 1.1, perPairMs: 0.45 }],
      L: 0.16,
      budget: 225,
      want: { a: 0.16 / 0.61, b: 1.1 / 0.61, maxPairs: Math.floor((112.5 - 1.1) / 0.45) },
    },
    {
      name: 'a GPU volunteer faster than local',
      workers: [{ overheadMs: 2, perPairMs: 0.01 }],
      L: 0.2,
      budget: 225,
      want: { a: 0.2 / 0.21, b: 2 / 0.21, maxPairs: Math.floor((112.5 - 2) / 0.01) },
    },
    {
      name: 'one as fast as local, no fixed cost: halves the layer',
      workers: [{ overheadMs: 0, perPairMs: 0.2 }],
      L: 0.2,
      budget: 225,
      want: { a: 0.5, b: 0, maxPairs: 562 },
    },
    {
      name: 'two workers in parallel',
      workers: [
        { overheadMs: 1, perPairMs: 0.4 },
        { overheadMs: 2, perPairMs: 0.8 },
      ],
      L: 0.2,
      budget: 225,
      want: { a: (0.2 * 3.75) / (1 + 0.2 * 3.75), b: (2.5 + 2.5) / (1 + 0.2 * 3.75), maxPairs: 278 + 138 },
    },
    { name: 'local speed not measured yet', workers: [{ overheadMs: 1, perPairMs: 0.4 }], L: 0, budget: 225, want: null },
    {
      name: 'a software adapter whose fixed cost is past the slack',
      workers: [{ overheadMs: 2000, perPairMs: 50 }],
      L: 0.2,
      budget: 225,
      want: null,
    },
    { name: 'no per-pair cost fitted', workers: [{ overheadMs: 1, perPairMs: 0 }], L: 0.2, budget: 225, want: null },
    { name: 'no worker', workers: [], L: 0.2, budget: 225, want: null },
  ];
  for (const r of rows) {
    const got = offerLine(r.workers, r.L, r.budget, cfg);
    if (r.want === null) {
      assert.equal(got, null, r.name);
      continue;
    }
    assert.ok(got, r.name);
    assert.ok(Math.abs(got.a - r.want.a) < 1e-9, `${r.name}: a ${got.a} vs ${r.want.a}`);
    assert.ok(Math.abs(got.b - r.want.b) < 1e-9, `${r.name}: b ${got.b} vs ${r.want.b}`);
    assert.equal(got.maxPairs, r.want.maxPairs, `${r.name}: maxPairs`);
  }
  // The line is claimCaps' balanced split (one worker, no queue): floor(a*N - b) is its cap within a pair.
  for (const N of [16, 32, 48, 64, 200]) {
    const w = { overheadMs: 1.1, perPairMs: 0.45 };
    const line = offerLine([w], 0.16, 225, cfg);
    assert.ok(line);
    const caps = claimCaps(
      { nPairs: N, localMsPerPair: 0.16, budgetMs: 225, workers: [W(N, w.overheadMs, w.perPairMs)] },
      { ...cfg, minGain: 0 },
    );
    const c = Math.max(0, Math.floor(line.a * N - line.b));
    assert.ok(Math.abs(c - (caps.caps[0] as number)) <= 1, `N ${N}: line ${c}, claimCaps ${caps.caps[0]}`);
  }
});
