/** hub/market/release.ts: who is let go when the load passes, as a table. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chooseReleases, lessUseful, type ReleaseCandidate } from '../../hub/market/release.ts';
import type { HeldRange } from '../../hub/market/types.ts';

const N_EXPERT = 8;

function w(id: string, ranges: HeldRange[], over: Partial<ReleaseCandidate> = {}): ReleaseCandidate {
  return { workerId: id, ranges, lastServeMs: 1_000, pairsServed: 10, latencyMs: 5, attachMs: 0, ...over };
}

/** Replica counts of each layer from the candidates themselves (every live worker is a candidate here). */
function countsFrom(cands: readonly ReleaseCandidate[]): (layer: number) => Int32Array {
  return (layer) => {
    const c = new Int32Array(N_EXPERT);
    for (const x of cands) for (const [l, b, e] of x.ranges) if (l === layer) for (let i = b; i < e; i++) c[i]!++;
    return c;
  };
}

const L0: HeldRange = [0, 0, 8];
const L1: HeldRange = [1, 0, 8];
const L0_LO: HeldRange = [0, 0, 4];
const L0_HI: HeldRange = [0, 4, 8];

const cases: Array<{ name: string; cands: ReleaseCandidate[]; target: number; want: string[] }> = [
  { name: 'at target: nobody', cands: [w('a', [L0]), w('b', [L0])], target: 2, want: [] },
  { name: 'below target: nobody', cands: [w('a', [L0])], target: 2, want: [] },
  {
    name: 'one surplus of equals: the newest',
    cands: [w('a', [L0], { attachMs: 1 }), w('b', [L0], { attachMs: 2 })],
    target: 1,
    want: ['b'],
  },
  {
    name: 'never served goes before one that served',
    cands: [w('served', [L0], { attachMs: 9 }), w('never', [L0], { lastServeMs: null, pairsServed: 0, attachMs: 1 })],
    target: 1,
    want: ['never'],
  },
  {
    name: 'fewer pairs first',
    cands: [w('many', [L0], { pairsServed: 100 }), w('few', [L0], { pairsServed: 3 })],
    target: 1,
    want: ['few'],
  },
  { name: 'then the slower', cands: [w('fast', [L0], { latencyMs: 2 }), w('slow', [L0], { latencyMs: 40 })], target: 1, want: ['slow'] },
  {
    name: 'unknown latency counts as slowest',
    cands: [w('known', [L0], { latencyMs: 90 }), w('unknown', [L0], { latencyMs: null })],
    target: 1,
    want: ['unknown'],
  },
  {
    name: 'two surplus copies of one range: both go down to target, not below',
    cands: [w('a', [L0], { attachMs: 1 }), w('b', [L0], { attachMs: 2 }), w('c', [L0], { attachMs: 3 })],
    target: 1,
    want: ['c', 'b'],
  },
  {
    name: 'surplus on one layer only',
    cands: [w('l0a', [L0]), w('l0b', [L0], { attachMs: 5 }), w('l1', [L1])],
    target: 1,
    want: ['l0b'],
  },
  {
    name: 'a whole-layer worker stays when a half of the layer would fall below target',
    cands: [w('whole', [L0], { lastServeMs: null, pairsServed: 0 }), w('lo', [L0_LO]), w('hi', [L0_HI])],
    target: 1,
    want: ['whole'],
  },
  {
    name: 'a half stays where the other half has no second replica',
    cands: [w('whole', [L0]), w('lo', [L0_LO], { pairsServed: 0, lastServeMs: null })],
    target: 1,
    want: ['lo'],
  },
  {
    name: 'a worker holding two layers stays unless both are in surplus; the other copy of its layer goes',
    cands: [w('both', [L0, L1], { pairsServed: 0 }), w('l0', [L0])],
    target: 1,
    want: ['l0'],
  },
  { name: 'target 0 (nothing wanted): everyone', cands: [w('a', [L0]), w('b', [L1])], target: 0, want: ['a', 'b'] },
  { name: 'a worker without ranges is never chosen', cands: [w('empty', []), w('a', [L0])], target: 1, want: [] },
];

for (const c of cases) {
  test(`chooseReleases: ${c.name}`, () => {
    assert.deepEqual(chooseReleases(c.cands, countsFrom(c.cands), c.target), c.want);
  });
}

test('chooseReleases does not change the counts it is given', () => {
  const cands = [w('a', [L0]), w('b', [L0])];
  const given = new Int32Array(N_EXPERT).fill(2);
  assert.deepEqual(
    chooseReleases(cands, () => given, 1),
    ['a'],
  );
  assert.deepEqual([...given], new Array(N_EXPERT).fill(2));
});

test('lessUseful is a total order: antisymmetric, and 0 only for the same worker', () => {
  const pool = [
    w('a', [L0], { lastServeMs: null, pairsServed: 0 }),
    w('b', [L0], { pairsServed: 1 }),
    w('c', [L0], { latencyMs: null }),
    w('d', [L0], { attachMs: 7 }),
    w('e', [L0]),
  ];
  for (const x of pool) {
    for (const y of pool) {
      const xy = Math.sign(lessUseful(x, y));
      assert.equal(xy + Math.sign(lessUseful(y, x)), 0, `${x.workerId} vs ${y.workerId}`);
      if (x !== y) assert.notEqual(xy, 0);
    }
  }
});
