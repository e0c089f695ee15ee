import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chooseRebalance, type RebalanceMove, type SliceHolder, type WaitingVolunteer } from '../../hub/market/rebalance.ts';

const w = (id: string, speed: number | null = 10, model = ''): WaitingVolunteer => ({ id, model, speed });
const h = (id: string, n: number, speed: number | null = 10, model = 'm'): SliceHolder => ({
  id,
  model,
  speed,
  slices: Array.from({ length: n }, (_, i) => [i, 0, 8] as [number, number, number]),
});

const CASES: Array<{ name: string; waiting: WaitingVolunteer[]; holders: SliceHolder[]; want: RebalanceMove[] }> = [
  { name: 'nobody waits', waiting: [], holders: [h('a', 3)], want: [] },
  { name: 'a holder of one slice keeps it', waiting: [w('x')], holders: [h('a', 1)], want: [] },
  {
    name: 'the newest slice of a holder of two moves',
    waiting: [w('x')],
    holders: [h('a', 2)],
    want: [{ to: 'x', from: 'a', range: [1, 0, 8] }],
  },
  {
    name: 'the holder of the most slices gives first, each keeps one',
    waiting: [w('x'), w('y'), w('z')],
    holders: [h('a', 2), h('b', 3)],
    want: [
      { to: 'x', from: 'b', range: [2, 0, 8] },
      { to: 'y', from: 'a', range: [1, 0, 8] },
      { to: 'z', from: 'b', range: [1, 0, 8] },
    ],
  },
  {
    name: 'the fastest waiting volunteer is served first',
    waiting: [w('slow', 6), w('fast', 50)],
    holders: [h('a', 2, 10)],
    want: [{ to: 'fast', from: 'a', range: [1, 0, 8] }],
  },
  { name: 'not to a device under half as fast', waiting: [w('x', 4)], holders: [h('a', 2, 10)], want: [] },
  {
    name: 'an unknown speed is fast enough',
    waiting: [w('x', null)],
    holders: [h('a', 2, 10)],
    want: [{ to: 'x', from: 'a', range: [1, 0, 8] }],
  },
  { name: 'only to a volunteer of its model', waiting: [w('x', 10, 'other')], holders: [h('a', 2)], want: [] },
  {
    name: 'equal counts: the slower holder gives',
    waiting: [w('x', 10)],
    holders: [h('a', 2, 12), h('b', 2, 11)],
    want: [{ to: 'x', from: 'b', range: [1, 0, 8] }],
  },
];

for (const c of CASES) {
  test(`rebalance: ${c.name}`, () => {
    assert.deepEqual(chooseRebalance(c.waiting, c.holders), c.want);
  });
}
