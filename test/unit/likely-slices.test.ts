import { test } from 'node:test';
import assert from 'node:assert/strict';
import { CoverageStore } from '../../hub/market/coverage.ts';
import { modelDemand } from '../../hub/market/demand.ts';
import { chooseAssignment, type VolunteerRequest } from '../../hub/market/assign.ts';
import { likelySlices } from '../../hub/market/likely-slices.ts';
import type { HeldRange, ModelShape } from '../../hub/market/types.ts';
import { GPT_OSS_VARIANT } from '../../protocol/variant.ts';

/** 4 layers, MoE on 1, 2 and 3 (0 dense), 10 experts; layer 3's experts take twice the bytes. */
const SHAPE: ModelShape = {
  model: 'm',
  nLayer: 4,
  nExpert: 10,
  nEmbd: 16,
  moeLayers: [1, 2, 3],
  bytesPerExpert: 60,
  layerBytesPerExpert: { 1: 30, 2: 30, 3: 60 },
  maxMatrixBytesPerExpert: 20,
};

const CASES: Array<{ name: string; request: VolunteerRequest; max: number; want: HeldRange[] }> = [
  {
    name: 'one expert each: every layer in turn, expert by expert',
    request: { maxExperts: 1 },
    max: 7,
    want: [
      [1, 0, 1],
      [2, 0, 1],
      [3, 0, 1],
      [1, 1, 2],
      [2, 1, 2],
      [3, 1, 2],
      [1, 2, 3],
    ],
  },
  {
    name: 'the budget sets each layer its own width, the layer with the most left goes first, a last run is cut at the end',
    request: { device: { memoryBudgetBytes: 240 } },
    max: 100,
    want: [
      [1, 0, 8],
      [2, 0, 8],
      [3, 0, 4],
      [3, 4, 8],
      [1, 8, 10],
      [2, 8, 10],
      [3, 8, 10],
    ],
  },
  {
    name: 'no limit: whole layers',
    request: {},
    max: 100,
    want: [
      [1, 0, 10],
      [2, 0, 10],
      [3, 0, 10],
    ],
  },
  {
    name: 'a budget under one expert of layer 3 leaves it out',
    request: { maxExperts: 5, device: { memoryBudgetBytes: 59 } },
    max: 100,
    want: [
      [1, 0, 1],
      [2, 0, 1],
      [1, 1, 2],
      [2, 1, 2],
      [1, 2, 3],
      [2, 2, 3],
      [1, 3, 4],
      [2, 3, 4],
      [1, 4, 5],
      [2, 4, 5],
      [1, 5, 6],
      [2, 5, 6],
      [1, 6, 7],
      [2, 6, 7],
      [1, 7, 8],
      [2, 7, 8],
      [1, 8, 9],
      [2, 8, 9],
      [1, 9, 10],
      [2, 9, 10],
    ],
  },
  {
    name: 'a device whose binding cannot hold a matrix: none',
    request: { device: { maxStorageBufferBindingSize: 10 } },
    max: 100,
    want: [],
  },
  { name: 'max 0: none', request: { maxExperts: 1 }, max: 0, want: [] },
];

test('likelySlices: the table', () => {
  for (const c of CASES) assert.deepEqual(likelySlices(SHAPE, c.request, c.max), c.want, c.name);
});

test('likelySlices: a layer of a variant or types the volunteer does not compute is left out', () => {
  const shape: ModelShape = {
    ...SHAPE,
    layerVariants: { 2: GPT_OSS_VARIANT },
    layerTypes: { 3: { gate: 'Q4_K', up: 'Q4_K', down: 'Q6_K' } },
  };
  assert.deepEqual(likelySlices(shape, { maxExperts: 5, types: ['Q4_K'] }, 100), [
    [1, 0, 5],
    [1, 5, 10],
  ]);
});

test('likelySlices is what the market offers, in order, to volunteers that ask alike on a model nobody holds', () => {
  for (const request of [{ maxExperts: 1 }, { maxExperts: 3 }, { device: { memoryBudgetBytes: 240 } }, {}] as VolunteerRequest[]) {
    const store = new CoverageStore();
    store.addModel(SHAPE);
    const offered: HeldRange[] = [];
    for (let i = 0; i < 40; i++) {
      const demand = modelDemand(SHAPE, (l) => store.replicaCounts('m', l), 1, true, store.workerCount('m') > 0);
      const a = chooseAssignment([demand], new Map([['m', SHAPE]]), request);
      if (!a.assigned) break;
      offered.push([a.layer, a.experts[0], a.experts[1]]);
      store.heartbeat(`w${i}`, 'm', [[a.layer, a.experts[0], a.experts[1]]], 0);
    }
    assert.ok(offered.length > 0);
    assert.deepEqual(likelySlices(SHAPE, request, offered.length), offered, JSON.stringify(request));
  }
});
