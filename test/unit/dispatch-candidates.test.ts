/**
 * Candidate selection (hub/dispatch/candidates.ts) as tables: which links cover a request's pairs, and where the
 * Layer-1 policy's answer sends each covering worker — into the race, onto probation, declined, probed in shadow.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type Candidate, type CandidateLink, type CandidateStats, coveredPairs, selectCandidates } from '../../hub/dispatch/candidates.ts';
import type { WorkerState } from '../../hub/dispatch/map.ts';
import { newLatencyModel, observeRoundTrip } from '../../hub/dispatch/plan.ts';
import { DEFAULT_LAYER_ONE, type DispatchMode } from '../../hub/dispatch/policy.ts';

const NOW = 1_000_000;

test('coveredPairs: layer, range validity and routed experts', () => {
  // 2 tokens × 2 used: experts 0, 3, 5, 7.
  const req = { layer: 4, ids: Int32Array.from([0, 3, 5, 7]), nTokens: 2, nUsed: 2 };
  const rows: Array<{ name: string; link: { layer: number; begin: number; end: number }; want: number }> = [
    { name: 'all experts', link: { layer: 4, begin: 0, end: 8 }, want: 4 },
    { name: 'a slice', link: { layer: 4, begin: 3, end: 6 }, want: 2 },
    { name: 'end is exclusive', link: { layer: 4, begin: 1, end: 3 }, want: 0 },
    { name: 'another layer', link: { layer: 5, begin: 0, end: 8 }, want: 0 },
    { name: 'empty range', link: { layer: 4, begin: 3, end: 3 }, want: 0 },
    { name: 'negative begin', link: { layer: 4, begin: -1, end: 4 }, want: 0 },
    { name: 'past nExpert', link: { layer: 4, begin: 0, end: 9 }, want: 0 },
  ];
  for (const r of rows) assert.equal(coveredPairs(req, r.link, 8), r.want, r.name);
});

interface Stats extends CandidateStats {
  id: string;
}

function stats(id: string, o: { ms?: number; outstanding?: number; benchedAtMs?: number | null } = {}): Stats {
  const latency = newLatencyModel();
  if (o.ms !== undefined) observeRoundTrip(latency, 4, o.ms);
  return { id, latency, benchedAtMs: o.benchedAtMs ?? null, lastProbeMs: null, outstanding: o.outstanding ?? 0 };
}

function cand(id: string, state: WorkerState, s: Stats = stats(id), inFlight = 0): Candidate<CandidateLink, Stats> {
  return { link: { workerId: id, layer: 0, begin: 0, end: 8, inFlight }, stats: s, covered: 4, state };
}

interface Row {
  name: string;
  mode: DispatchMode;
  candidates: Candidate<CandidateLink, Stats>[];
  mayUse?: (id: string) => boolean;
  localNsPerPair?: number;
  chosen: string[];
  untrusted?: string[];
  declined?: string[];
  shadowable?: string[];
  reasons: string[];
  /** Expected queueMs per chosen worker, when checked. */
  queueMs?: number[];
  probes?: boolean[];
}

const rows: Row[] = [
  {
    name: 'always: every covering worker races',
    mode: 'always',
    candidates: [cand('a', 'proven'), cand('b', 'joining')],
    chosen: ['a', 'b'],
    reasons: ['always', 'always'],
  },
  {
    name: 'off: nobody',
    mode: 'off',
    candidates: [cand('a', 'proven')],
    chosen: [],
    declined: ['a'],
    reasons: ['mode-off'],
  },
  {
    name: 'auto: a newcomer in grace races, a never-served one may be probed in shadow',
    mode: 'auto',
    candidates: [cand('new', 'grace'), cand('old', 'joining')],
    chosen: ['new'],
    declined: ['old'],
    shadowable: ['old'],
    reasons: ['grace', 'never-served'],
  },
  {
    name: 'auto: quarantined and released are declined, not probed',
    mode: 'auto',
    candidates: [cand('q', 'quarantined'), cand('r', 'released')],
    chosen: [],
    declined: ['q', 'r'],
    reasons: ['quarantined', 'released'],
  },
  {
    name: 'auto: a benched worker not due its probe is shadowable',
    mode: 'auto',
    candidates: [cand('b', 'proven', stats('b', { ms: 2, benchedAtMs: NOW - 10 }))],
    chosen: [],
    declined: ['b'],
    shadowable: ['b'],
    reasons: ['benched'],
  },
  {
    name: 'mayUse refuses: let through onto probation, not into the race',
    mode: 'always',
    candidates: [cand('a', 'proven'), cand('u', 'proven')],
    mayUse: (id) => id !== 'u',
    chosen: ['a'],
    untrusted: ['u'],
    reasons: ['always', 'always'],
  },
  {
    name: 'queue: the larger of link in-flight and outstanding, times the measured round trip; unmeasured: 0',
    mode: 'always',
    candidates: [
      cand('a', 'proven', stats('a', { ms: 10, outstanding: 1 }), 3),
      cand('b', 'proven', stats('b', { ms: 10, outstanding: 2 }), 0),
      cand('c', 'proven', stats('c', { outstanding: 5 }), 5),
    ],
    chosen: ['a', 'b', 'c'],
    reasons: ['always', 'always', 'always'],
    queueMs: [30, 20, 0],
    probes: [false, false, false],
  },
];

test('selectCandidates: table', () => {
  for (const r of rows) {
    const sel = selectCandidates(
      {
        mode: r.mode,
        nowMs: NOW,
        localNsPerPair: r.localNsPerPair ?? 0,
        saturation: null,
        candidates: r.candidates,
        mayUse: r.mayUse,
      },
      DEFAULT_LAYER_ONE,
    );
    assert.deepEqual(
      sel.chosen.map((c) => c.link.workerId),
      r.chosen,
      `${r.name}: chosen`,
    );
    assert.deepEqual(
      sel.untrusted.map((c) => c.link.workerId),
      r.untrusted ?? [],
      `${r.name}: untrusted`,
    );
    assert.deepEqual(
      sel.declined.map((s) => s.id),
      r.declined ?? [],
      `${r.name}: declined`,
    );
    assert.deepEqual(
      sel.shadowable.map((c) => c.link.workerId),
      r.shadowable ?? [],
      `${r.name}: shadowable`,
    );
    assert.deepEqual(sel.reasons, r.reasons, `${r.name}: reasons`);
    if (r.queueMs)
      assert.deepEqual(
        sel.chosen.map((c) => c.worker.queueMs),
        r.queueMs,
        `${r.name}: queueMs`,
      );
    if (r.probes)
      assert.deepEqual(
        sel.chosen.map((c) => c.probe),
        r.probes,
        `${r.name}: probes`,
      );
  }
});
