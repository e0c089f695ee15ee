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
  shadowProbeGapMs,
} from '../../hub/dispatch/claims.ts';

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
