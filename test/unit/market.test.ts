import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isHubError, type ErrorCode } from '../../hub/errors.ts';
import { CoverageStore } from '../../hub/market/coverage.ts';
import { HELD_RANGES_MAX, WORKER_ID_MAX_CHARS } from '../../hub/limits.ts';
import { layerSegments, modelDemand, scarcity } from '../../hub/market/demand.ts';
import {
  chooseAssignment,
  freeRanges,
  nextSliceRequest,
  type RefusalCode,
  type VolunteerAnswer,
  type VolunteerRequest,
} from '../../hub/market/assign.ts';
import type { HeldRange, ModelDemand, ModelShape } from '../../hub/market/types.ts';
import { GPT_OSS_VARIANT, SILU_VARIANT } from '../../protocol/variant.ts';

/** 4 layers, MoE on 1 and 3 (0 and 2 dense), 256 experts. */
const WIDE: ModelShape = {
  model: 'wide',
  nLayer: 4,
  nExpert: 256,
  nEmbd: 64,
  moeLayers: [1, 3],
  bytesPerExpert: 3000,
  maxMatrixBytesPerExpert: 1000,
};
/** The architecture's example model: 256 experts, MoE on layer 0. */
const EXAMPLE: ModelShape = {
  model: 'example',
  nLayer: 2,
  nExpert: 256,
  nEmbd: 32,
  moeLayers: [0, 1],
  bytesPerExpert: 300,
  maxMatrixBytesPerExpert: 100,
};
const SMALL: ModelShape = {
  model: 'small',
  nLayer: 3,
  nExpert: 8,
  nEmbd: 16,
  moeLayers: [1, 2],
  bytesPerExpert: 30,
  maxMatrixBytesPerExpert: 10,
};
const SHAPES = new Map([WIDE, EXAMPLE, SMALL].map((s) => [s.model, s]));

function storeWith(...shapes: ModelShape[]): CoverageStore {
  const store = new CoverageStore();
  for (const s of shapes) store.addModel(s);
  return store;
}

/** Demand of every model in the store, as the HTTP shell would build it. */
function demandsOf(store: CoverageStore, target: number, recruiting: ReadonlySet<string> = new Set()): ModelDemand[] {
  return store.models().map((m) => {
    const shape = store.shape(m)!;
    return modelDemand(shape, (l) => store.replicaCounts(m, l), target, recruiting.has(m), store.workerCount(m) > 0);
  });
}

/** The refusal code of an answer ('assigned' for an offer); every refusal also carries a sentence. */
function refusal(a: VolunteerAnswer): RefusalCode | 'assigned' {
  if (a.assigned) return 'assigned';
  assert.ok(typeof a.reason === 'string' && a.reason.length > 0, 'a refusal says why in words too');
  return a.code;
}

function codeOf(fn: () => unknown): ErrorCode | 'none' | 'not a HubError' {
  try {
    fn();
    return 'none';
  } catch (e) {
    return isHubError(e) ? e.code : 'not a HubError';
  }
}

test('architecture example: A=[0,128) B=[128,256) C=[0,128), max_experts 64 → layer 0, experts [128, 192]', () => {
  const store = storeWith(EXAMPLE);
  store.heartbeat('A', 'example', [[0, 0, 128]], 0);
  store.heartbeat('B', 'example', [[0, 128, 256]], 0);
  store.heartbeat('C', 'example', [[0, 0, 128]], 0);
  // Layer 1 fully covered twice, so layer 0's [128, 256) is the only scarce run.
  store.heartbeat('D', 'example', [[1, 0, 256]], 0);
  store.heartbeat('E', 'example', [[1, 0, 256]], 0);
  const demands = demandsOf(store, 2);
  assert.deepEqual(demands[0]!.layers[0]!.segments, [
    { experts: [0, 128], replicas: 2, target: 2, scarcity: 0 },
    { experts: [128, 256], replicas: 1, target: 2, scarcity: 0.5 },
  ]);
  assert.deepEqual(chooseAssignment(demands, SHAPES, { model: '', maxExperts: 64 }), {
    assigned: true,
    model: 'example',
    layer: 0,
    experts: [128, 192],
    scarcity: 0.5,
    replicas: 1,
    target: 2,
    n_embd: 32,
    n_layer: 2,
    n_expert: 256,
  });
});

test('scarcity: round(max(0, target − replicas) / target, 3)', () => {
  const table: Array<[replicas: number, target: number, want: number]> = [
    [1, 3, 0.667],
    [2, 3, 0.333],
    [0, 3, 1],
    [0, 2, 1],
    [1, 2, 0.5],
    [2, 2, 0],
    [5, 2, 0],
    [0, 0, 0],
    [3, 0, 0],
    [0, 7, 1],
    [1, 7, 0.857],
  ];
  for (const [r, t, want] of table) assert.equal(scarcity(r, t), want, `replicas ${r}, target ${t}`);
});

test('layerSegments: maximal runs of equal count, [begin, end)', () => {
  const table: Array<[counts: number[], want: Array<[number, number, number]>]> = [
    [[], []],
    [[0], [[0, 1, 0]]],
    [[0, 0, 0, 0], [[0, 4, 0]]],
    [
      [1, 1, 2, 2, 0],
      [
        [0, 2, 1],
        [2, 4, 2],
        [4, 5, 0],
      ],
    ],
    [
      [3, 0, 3],
      [
        [0, 1, 3],
        [1, 2, 0],
        [2, 3, 3],
      ],
    ],
  ];
  for (const [counts, want] of table) {
    const got = layerSegments(Int32Array.from(counts), 2).map((s) => [s.experts[0], s.experts[1], s.replicas]);
    assert.deepEqual(got, want, `counts ${counts.join(',')}`);
  }
  assert.deepEqual(layerSegments(Int32Array.from([1]), 3)[0], { experts: [0, 1], replicas: 1, target: 3, scarcity: 0.667 });
});

test('modelDemand: idle unheld model offers nothing; recruiting seeds every MoE layer whole; dense layers never appear', () => {
  const never = (): Int32Array => assert.fail('counts must not be read for a model without workers');
  const idle = modelDemand(WIDE, never, 2, false, false);
  assert.deepEqual(idle, { model: 'wide', n_layer: 4, n_expert: 256, target_replicas: 2, recruiting: false, layers: [] });
  assert.equal(refusal(chooseAssignment([idle], SHAPES, {})), 'nothing-wanted');

  const seeded = modelDemand(WIDE, never, 3, true, false);
  assert.deepEqual(seeded.layers, [
    { layer: 1, segments: [{ experts: [0, 256], replicas: 0, target: 3, scarcity: 1 }] },
    { layer: 3, segments: [{ experts: [0, 256], replicas: 0, target: 3, scarcity: 1 }] },
  ]);
  const a = chooseAssignment([seeded], SHAPES, { maxExperts: 16 });
  assert.ok(a.assigned);
  assert.equal(a.layer, 1);
  assert.deepEqual(a.experts, [0, 16]);

  // With workers: every MoE layer, runs tile [0, nExpert); dense layers 0 and 2 never listed.
  const store = storeWith(WIDE);
  store.heartbeat('w', 'wide', [[3, 0, 100]], 0);
  const held = demandsOf(store, 2)[0]!;
  assert.deepEqual(
    held.layers.map((l) => l.layer),
    [1, 3],
  );
  assert.deepEqual(
    held.layers[1]!.segments.map((s) => [...s.experts, s.scarcity]),
    [
      [0, 100, 0.5],
      [100, 256, 1],
    ],
  );
});

test('dense layers are never offered, even when every MoE layer is fully covered', () => {
  const store = storeWith(WIDE);
  for (const id of ['a', 'b'])
    store.heartbeat(
      id,
      'wide',
      [
        [1, 0, 256],
        [3, 0, 256],
      ],
      0,
    );
  const demands = demandsOf(store, 2);
  assert.equal(refusal(chooseAssignment(demands, SHAPES, {})), 'nothing-wanted');
  // Boost to 3: offered again, still only MoE layers.
  for (let i = 0; i < 10; i++) {
    const held = { model: 'wide', ranges: i === 0 ? [] : [[1, 0, 10 * i] as HeldRange] };
    const a = chooseAssignment(demandsOf(store, 3), SHAPES, { maxExperts: 10, held });
    assert.ok(a.assigned);
    assert.ok(WIDE.moeLayers.includes(a.layer), `layer ${a.layer} is MoE`);
  }
});

test('ties: higher scarcity first, then the wider, then lowest model, layer, begin', () => {
  const seg = (a: number, b: number, replicas: number, target = 2) => ({
    experts: [a, b] as [number, number],
    replicas,
    target,
    scarcity: scarcity(replicas, target),
  });
  const demand = (model: string, layers: Array<[number, ReturnType<typeof seg>[]]>): ModelDemand => ({
    model,
    n_layer: 4,
    n_expert: 256,
    target_replicas: 2,
    recruiting: false,
    layers: layers.map(([layer, segments]) => ({ layer, segments })),
  });
  const table: Array<{ name: string; demands: ModelDemand[]; want: [string, number, number, number] }> = [
    {
      name: 'scarcer beats wider',
      demands: [demand('wide', [[1, [seg(0, 200, 1), seg(200, 210, 0), seg(210, 256, 2)]]])],
      want: ['wide', 1, 200, 210],
    },
    {
      name: 'equal scarcity → wider',
      demands: [demand('wide', [[1, [seg(0, 10, 1), seg(10, 20, 2), seg(20, 60, 1), seg(60, 256, 2)]]])],
      want: ['wide', 1, 20, 60],
    },
    {
      name: 'wider across layers',
      demands: [
        demand('wide', [
          [1, [seg(0, 10, 0), seg(10, 256, 2)]],
          [3, [seg(0, 30, 0), seg(30, 256, 2)]],
        ]),
      ],
      want: ['wide', 3, 0, 30],
    },
    {
      name: 'same width → lower layer',
      demands: [
        demand('wide', [
          [3, [seg(0, 30, 0), seg(30, 256, 2)]],
          [1, [seg(0, 226, 2), seg(226, 256, 0)]],
        ]),
      ],
      want: ['wide', 1, 226, 256],
    },
    {
      name: 'same width, same layer → lower begin',
      demands: [demand('wide', [[1, [seg(0, 10, 2), seg(10, 20, 0), seg(20, 30, 2), seg(30, 40, 0), seg(40, 256, 2)]]])],
      want: ['wide', 1, 10, 20],
    },
    {
      name: 'same everything → lower model name',
      demands: [demand('wide', [[1, [seg(0, 8, 0)]]]), demand('example', [[1, [seg(0, 8, 0)]]])],
      want: ['example', 1, 0, 8],
    },
  ];
  for (const { name, demands, want } of table) {
    const a = chooseAssignment(demands, SHAPES, {});
    assert.ok(a.assigned, name);
    assert.deepEqual([a.model, a.layer, ...a.experts], want, name);
  }
});

test('never overlaps what the volunteer holds', () => {
  const store = storeWith(SMALL);
  store.heartbeat('other', 'small', [[2, 0, 8]], 0); // layer 1 is at 0 replicas, layer 2 at 1
  const demands = demandsOf(store, 2);
  const small = (...ranges: HeldRange[]) => ({ model: 'small', ranges });
  const table: Array<{ held: VolunteerRequest['held']; want: [number, number, number] | RefusalCode }> = [
    { held: undefined, want: [1, 0, 8] },
    { held: small(), want: [1, 0, 8] },
    { held: small([1, 0, 2]), want: [1, 2, 8] },
    { held: small([1, 2, 5]), want: [1, 5, 8] }, // [0,2) and [5,8): the wider
    { held: small([1, 2, 4], [1, 6, 8]), want: [1, 0, 2] }, // equal → first
    { held: small([1, 0, 8]), want: [2, 0, 8] }, // falls to the less scarce layer
    { held: small([1, 0, 8], [2, 1, 8]), want: [2, 0, 1] },
    { held: { model: 'other', ranges: [[1, 0, 8]] }, want: [1, 0, 8] }, // another model's layer 1 is irrelevant
    { held: small([1, 0, 8], [2, 0, 8]), want: 'already-held' },
  ];
  for (const { held, want } of table) {
    const a = chooseAssignment(demands, SHAPES, held ? { held } : {});
    const label = JSON.stringify(held);
    if (typeof want === 'string') {
      assert.equal(refusal(a), want, label);
      continue;
    }
    assert.ok(a.assigned, label);
    assert.deepEqual([a.layer, ...a.experts], want, label);
    if (held?.model !== a.model) continue;
    for (const [layer, begin, end] of held.ranges) {
      if (layer === a.layer) assert.ok(a.experts[1] <= begin || a.experts[0] >= end, `${label}: overlap`);
    }
  }
  assert.deepEqual(
    freeRanges(0, 10, [
      { begin: 3, end: 5 },
      { begin: 4, end: 7 },
      { begin: 9, end: 20 },
    ]),
    [
      { begin: 0, end: 3 },
      { begin: 7, end: 9 },
    ],
  );
  assert.deepEqual(freeRanges(0, 10, [{ begin: 0, end: 10 }]), []);
});

test('max_experts and device capacity clip the offer; a device that cannot hold one expert is refused', () => {
  const demands = [modelDemand(EXAMPLE, () => new Int32Array(256), 2, true, false)];
  const table: Array<{ name: string; req: VolunteerRequest; want: [number, number] | RefusalCode }> = [
    { name: 'max_experts 0 = no limit', req: { maxExperts: 0 }, want: [0, 256] },
    { name: 'max_experts missing = no limit', req: {}, want: [0, 256] },
    { name: 'max_experts 64', req: { maxExperts: 64 }, want: [0, 64] },
    { name: 'max_experts above the segment', req: { maxExperts: 1000 }, want: [0, 256] },
    { name: 'budget 3000 / 300 B = 10 experts', req: { device: { memoryBudgetBytes: 3000 } }, want: [0, 10] },
    { name: 'budget 3299 still 10', req: { device: { memoryBudgetBytes: 3299 } }, want: [0, 10] },
    { name: 'budget and max_experts: the smaller', req: { maxExperts: 4, device: { memoryBudgetBytes: 3000 } }, want: [0, 4] },
    { name: 'limits that fit one matrix', req: { device: { maxStorageBufferBindingSize: 100, maxBufferSize: 100 } }, want: [0, 256] },
    { name: 'budget below one expert', req: { device: { memoryBudgetBytes: 299 } }, want: 'budget-too-small' },
    { name: 'binding below one matrix', req: { device: { maxStorageBufferBindingSize: 99 } }, want: 'binding-too-small' },
    { name: 'buffer below one matrix', req: { device: { maxBufferSize: 50, memoryBudgetBytes: 1e9 } }, want: 'buffer-too-small' },
    {
      name: 'binding checked before buffer',
      req: { device: { maxStorageBufferBindingSize: 99, maxBufferSize: 50 } },
      want: 'binding-too-small',
    },
  ];
  for (const { name, req, want } of table) {
    const a = chooseAssignment(demands, SHAPES, req);
    if (typeof want === 'string') {
      assert.equal(refusal(a), want, name);
    } else {
      assert.ok(a.assigned, name);
      assert.deepEqual(a.experts, want, name);
    }
  }
  // A device too small for the scarcest model still gets a model it can hold.
  const both = [...demands, modelDemand(SMALL, () => new Int32Array(8), 2, false, true)];
  const a = chooseAssignment(both, SHAPES, { device: { memoryBudgetBytes: 60 } });
  assert.ok(a.assigned);
  assert.deepEqual([a.model, a.layer, ...a.experts], ['small', 1, 0, 2]);
});

test('volunteer request validation throws exact codes', () => {
  const demands = [modelDemand(SMALL, () => new Int32Array(8), 2, true, false)];
  const table: Array<[VolunteerRequest, ErrorCode]> = [
    [{ model: 'nope' }, 'MODEL_UNKNOWN'],
    [{ maxExperts: -1 }, 'BODY_INVALID'],
    [{ maxExperts: 1.5 }, 'BODY_INVALID'],
    [{ maxExperts: '4' as unknown as number }, 'BODY_INVALID'],
    [{ model: 3 as unknown as string }, 'BODY_INVALID'],
    [{ device: { memoryBudgetBytes: -5 } }, 'BODY_INVALID'],
    [{ device: { maxBufferSize: Number.NaN } }, 'BODY_INVALID'],
  ];
  for (const [req, code] of table)
    assert.equal(
      codeOf(() => chooseAssignment(demands, SHAPES, req)),
      code,
      JSON.stringify(req),
    );
  const a = chooseAssignment(demands, SHAPES, { model: 'small' });
  assert.ok(a.assigned);
});

test("replica counts follow heartbeats; a heartbeat replaces the worker's previous coverage", () => {
  const store = storeWith(SMALL, WIDE);
  const counts = (layer: number) => [...store.replicaCounts('small', layer)];
  store.heartbeat('a', 'small', [[1, 0, 4]], 0);
  store.heartbeat(
    'b',
    'small',
    [
      [1, 2, 8],
      [2, 0, 8],
    ],
    0,
  );
  assert.deepEqual(counts(1), [1, 1, 2, 2, 1, 1, 1, 1]);
  assert.deepEqual(counts(2), [1, 1, 1, 1, 1, 1, 1, 1]);
  store.heartbeat('a', 'small', [[1, 6, 8]], 1000);
  assert.deepEqual(counts(1), [0, 0, 1, 1, 1, 1, 2, 2]);
  // overlapping and touching segments merge: the worker counts once per expert
  store.heartbeat(
    'a',
    'small',
    [
      [1, 0, 3],
      [1, 2, 5],
      [1, 5, 6],
      [2, 7, 8],
    ],
    2000,
  );
  assert.deepEqual(store.heldRanges('a'), [
    [1, 0, 6],
    [2, 7, 8],
  ]);
  assert.deepEqual(counts(1), [1, 1, 2, 2, 2, 2, 1, 1]);
  assert.deepEqual(counts(2), [1, 1, 1, 1, 1, 1, 1, 2]);
  // empty heartbeat: live, holds nothing
  store.heartbeat('b', 'small', [], 3000);
  assert.deepEqual(counts(1), [1, 1, 1, 1, 1, 1, 0, 0]);
  assert.deepEqual(store.workersOf('small').sort(), ['a', 'b']);
  // moving to another model leaves the first one
  store.heartbeat('a', 'wide', [[3, 0, 1]], 4000);
  assert.deepEqual(counts(1), [0, 0, 0, 0, 0, 0, 0, 0]);
  assert.deepEqual(store.workersOf('small'), ['b']);
  assert.deepEqual(store.workersOf('wide'), ['a']);
  assert.equal(store.replicaCounts('wide', 3)[0], 1);
  assert.equal(store.remove('a'), true);
  assert.equal(store.remove('a'), false);
  assert.equal(store.replicaCounts('wide', 3)[0], 0);
  assert.equal(store.size, 1);
  assert.equal(
    codeOf(() => store.replicaCounts('wide', 0)),
    'LAYER_NOT_MOE',
  );
  assert.equal(
    codeOf(() => store.replicaCounts('nope', 1)),
    'MODEL_UNKNOWN',
  );
});

test('heartbeat validation: exact codes, and a refused heartbeat keeps the old coverage', () => {
  const store = storeWith(SMALL);
  store.heartbeat('w', 'small', [[1, 0, 4]], 0);
  const many = Array.from({ length: HELD_RANGES_MAX + 1 }, (_, i): HeldRange => [1, i % 8, (i % 8) + 1]);
  const table: Array<[name: string, id: string, model: string, ranges: unknown, code: ErrorCode]> = [
    ['unknown model', 'w', 'nope', [[1, 0, 1]], 'MODEL_UNKNOWN'],
    ['257 segments', 'w', 'small', many, 'TOO_MANY_SEGMENTS'],
    ['dense layer 0', 'w', 'small', [[0, 0, 1]], 'LAYER_NOT_MOE'],
    ['layer past nLayer', 'w', 'small', [[3, 0, 1]], 'LAYER_NOT_MOE'],
    ['negative layer', 'w', 'small', [[-1, 0, 1]], 'LAYER_NOT_MOE'],
    ['begin < 0', 'w', 'small', [[1, -1, 1]], 'RANGE_OUT_OF_BOUNDS'],
    ['end > nExpert', 'w', 'small', [[1, 0, 9]], 'RANGE_OUT_OF_BOUNDS'],
    ['empty range', 'w', 'small', [[1, 3, 3]], 'RANGE_OUT_OF_BOUNDS'],
    ['reversed range', 'w', 'small', [[1, 5, 2]], 'RANGE_OUT_OF_BOUNDS'],
    [
      'bad one after good ones',
      'w',
      'small',
      [
        [1, 0, 2],
        [2, 0, 8],
        [2, 8, 9],
      ],
      'RANGE_OUT_OF_BOUNDS',
    ],
    ['fractional begin', 'w', 'small', [[1, 0.5, 2]], 'BODY_INVALID'],
    ['string layer', 'w', 'small', [['1', 0, 2]], 'BODY_INVALID'],
    ['pair, not triple', 'w', 'small', [[1, 0]], 'BODY_INVALID'],
    ['not an array', 'w', 'small', { 0: [1, 0, 2] }, 'BODY_INVALID'],
    ['NaN end', 'w', 'small', [[1, 0, Number.NaN]], 'BODY_INVALID'],
    ['empty worker id', '', 'small', [[1, 0, 2]], 'BODY_INVALID'],
    ['overlong worker id', 'x'.repeat(WORKER_ID_MAX_CHARS + 1), 'small', [[1, 0, 2]], 'BODY_INVALID'],
  ];
  for (const [name, id, model, ranges, code] of table) {
    assert.equal(
      codeOf(() => store.heartbeat(id, model, ranges as HeldRange[], 5)),
      code,
      name,
    );
  }
  assert.deepEqual(store.heldRanges('w'), [[1, 0, 4]]);
  assert.equal(store.lastSeenMs('w'), 0);
  assert.deepEqual([...store.replicaCounts('small', 1)], [1, 1, 1, 1, 0, 0, 0, 0]);
  assert.equal(store.size, 1);
  // exactly HELD_RANGES_MAX (256) ranges is allowed
  store.heartbeat('w', 'small', many.slice(0, HELD_RANGES_MAX), 6);
  assert.deepEqual(store.heldRanges('w'), [[1, 0, 8]]);
});

test('eviction: stale after 120 s without a heartbeat, still live at 119 s', () => {
  const store = storeWith(SMALL);
  store.heartbeat('old', 'small', [[1, 0, 8]], 0);
  store.heartbeat('new', 'small', [[1, 0, 4]], 60_000);
  assert.deepEqual(store.evictStale(119_000), []);
  assert.deepEqual([...store.replicaCounts('small', 1)], [2, 2, 2, 2, 1, 1, 1, 1]);
  assert.deepEqual(store.evictStale(120_000), ['old']);
  assert.deepEqual([...store.replicaCounts('small', 1)], [1, 1, 1, 1, 0, 0, 0, 0]);
  assert.equal(store.heldRanges('old'), undefined);
  // a heartbeat refreshes
  store.heartbeat('new', 'small', [[1, 0, 4]], 170_000);
  assert.deepEqual(store.evictStale(240_000), []);
  assert.deepEqual(store.evictStale(300_000, 60_000), ['new']);
  assert.equal(store.size, 0);
  assert.equal(store.workerCount('small'), 0);
  // after eviction the idle model offers nothing again
  assert.equal(refusal(chooseAssignment(demandsOf(store, 2), SHAPES, {})), 'nothing-wanted');
});

test('10,000 workers cap: new workers refused, known workers keep heartbeating, room frees on eviction', () => {
  const store = storeWith(WIDE);
  const t0 = performance.now();
  for (let i = 0; i < 10_000; i++) store.heartbeat(`w${i}`, 'wide', [[1 + 2 * (i % 2), (i * 7) % 200, ((i * 7) % 200) + 56]], i);
  assert.equal(store.size, 10_000);
  assert.equal(
    codeOf(() => store.heartbeat('one-too-many', 'wide', [[1, 0, 1]], 20_000)),
    'TOO_MANY_WORKERS',
  );
  store.heartbeat('w0', 'wide', [[1, 0, 8]], 20_000); // known worker: fine
  // a full round of heartbeats and demand reads stays cheap
  for (let i = 0; i < 10_000; i++) store.heartbeat(`w${i}`, 'wide', [[1 + 2 * (i % 2), (i * 5) % 200, ((i * 5) % 200) + 56]], 30_000 + i);
  for (let r = 0; r < 100; r++) demandsOf(store, 3);
  const total = store.replicaCounts('wide', 1).reduce((s, c) => s + c, 0) + store.replicaCounts('wide', 3).reduce((s, c) => s + c, 0);
  assert.equal(total, 10_000 * 56);
  // A guard against a quadratic path (190 ms alone here), not a speed goal: loose enough for a loaded 2-core machine.
  assert.ok(performance.now() - t0 < 5000, `took ${performance.now() - t0} ms`);
  store.remove('w1');
  store.heartbeat('one-more', 'wide', [[1, 0, 1]], 40_000);
  assert.equal(store.size, 10_000);
  const tiny = new CoverageStore({ maxWorkers: 2 });
  tiny.addModel(SMALL);
  tiny.heartbeat('a', 'small', [], 0);
  tiny.heartbeat('b', 'small', [], 0);
  const e = (() => {
    try {
      tiny.heartbeat('c', 'small', [], 0);
    } catch (err) {
      return err;
    }
  })();
  assert.ok(isHubError(e, 'TOO_MANY_WORKERS'));
  assert.equal(e.status, 503);
});

test("addModel: same shape is a no-op, a changed shape drops that model's coverage", () => {
  const store = storeWith(SMALL);
  store.heartbeat('a', 'small', [[1, 0, 8]], 0);
  store.addModel({ ...SMALL });
  assert.equal(store.workerCount('small'), 1);
  store.addModel({ ...SMALL, nExpert: 4 });
  assert.equal(store.workerCount('small'), 0);
  assert.equal(store.replicaCounts('small', 1).length, 4);
  assert.throws(() => store.addModel({ ...SMALL, moeLayers: [3] }), RangeError);
});

test('variants: a layer is offered only to a volunteer that computes its expert FFN variant', () => {
  // gpt-oss-like: both MoE layers SwiGLU-OAI with biases; a mixed model: only layer 2 biased.
  const OSS: ModelShape = { ...SMALL, model: 'oss', layerVariants: { 1: GPT_OSS_VARIANT, 2: GPT_OSS_VARIANT } };
  const MIXED: ModelShape = { ...SMALL, model: 'mixed', layerVariants: { 2: { ...SILU_VARIANT, biases: true } } };
  const shapes = new Map([OSS, MIXED].map((s) => [s.model, s]));
  const want = (s: ModelShape): ModelDemand => modelDemand(s, () => new Int32Array(8), 2, true, false);
  const table: Array<[string, ModelShape, VolunteerRequest, RefusalCode | [number, number, number]]> = [
    ['an old client (no variants) computes silu only', OSS, {}, 'variant-unsupported'],
    ['silu alone', OSS, { variants: ['silu'] }, 'variant-unsupported'],
    ['the activation without bias', OSS, { variants: ['silu', 'swiglu_oai'] }, 'variant-unsupported'],
    ['every feature', OSS, { variants: ['silu', 'swiglu_oai', 'bias'] }, [1, 0, 8]],
    ['mixed, silu only: the plain layer', MIXED, { variants: ['silu'] }, [1, 0, 8]],
    ['mixed, silu + bias: the plain layer first (lowest layer)', MIXED, { variants: ['silu', 'bias'] }, [1, 0, 8]],
  ];
  for (const [name, shape, req, expected] of table) {
    const a = chooseAssignment([want(shape)], shapes, req);
    if (typeof expected === 'string') {
      assert.equal(refusal(a), expected, name);
      if (!a.assigned) assert.match(a.reason, /swiglu_oai|biases/, name);
    } else {
      assert.ok(a.assigned, name);
      assert.deepEqual([a.layer, ...a.experts], expected, name);
    }
  }
  // Layer 1 of the mixed model held already: a silu-only volunteer has nothing it can take (layer 2 is biased).
  const held = { model: 'mixed', ranges: [[1, 0, 8]] as HeldRange[] };
  assert.equal(refusal(chooseAssignment([want(MIXED)], shapes, { variants: ['silu'], held })), 'already-held');
  const withBias = chooseAssignment([want(MIXED)], shapes, { variants: ['silu', 'bias'], held });
  assert.ok(withBias.assigned);
  assert.equal(withBias.layer, 2);
});

// ---------------------------------------------------------------------------------------------------------------
// multi-slice volunteers (issue 27): the next slice of a volunteer that holds some

/** Offers `id` slices of `small` one after another, as the channel does (each held before the next), until refused. */
function holdAll(store: CoverageStore, id: string, budget: number, target: number): { held: HeldRange[]; last: RefusalCode | 'assigned' } {
  const held: HeldRange[] = [];
  for (;;) {
    const request = nextSliceRequest(
      { model: '', device: { memoryBudgetBytes: budget } },
      { model: 'small', ranges: held },
      SMALL.bytesPerExpert,
    );
    const a = chooseAssignment(demandsOf(store, target, new Set(['small'])), SHAPES, request);
    if (!a.assigned) return { held, last: refusal(a) };
    held.push([a.layer, a.experts[0], a.experts[1]]);
    store.heartbeat(id, 'small', held, 1000);
    assert.ok(held.length <= 8, 'a bounded number of offers');
  }
}

const LAYER_BYTES = 8 * SMALL.bytesPerExpert;
const MULTI: Array<{ name: string; budget: number; target: number; want: HeldRange[]; last: RefusalCode }> = [
  { name: 'a budget of one layer holds one layer', budget: LAYER_BYTES, target: 1, want: [[1, 0, 8]], last: 'budget-too-small' },
  {
    name: 'a budget of two layers holds both MoE layers',
    budget: 2 * LAYER_BYTES,
    target: 1,
    want: [
      [1, 0, 8],
      [2, 0, 8],
    ],
    last: 'nothing-wanted',
  },
  {
    name: 'a layer and a half: the second slice is what is left',
    budget: 1.5 * LAYER_BYTES,
    target: 1,
    want: [
      [1, 0, 8],
      [2, 0, 4],
    ],
    last: 'budget-too-small',
  },
  {
    name: 'a large budget holds every layer once',
    budget: 100 * LAYER_BYTES,
    target: 1,
    want: [
      [1, 0, 8],
      [2, 0, 8],
    ],
    last: 'nothing-wanted',
  },
  {
    name: 'two replicas wanted: never the same experts twice to one volunteer',
    budget: 100 * LAYER_BYTES,
    target: 2,
    want: [
      [1, 0, 8],
      [2, 0, 8],
    ],
    last: 'already-held',
  },
];

for (const c of MULTI) {
  test(`multi-slice offers: ${c.name}`, () => {
    const { held, last } = holdAll(storeWith(SMALL), 'v', c.budget, c.target);
    assert.deepEqual(held, c.want);
    assert.equal(last, c.last);
  });
}

test('multi-slice offers: two volunteers share — the second gets what the first does not hold', () => {
  const store = storeWith(SMALL);
  assert.deepEqual(holdAll(store, 'a', LAYER_BYTES, 1).held, [[1, 0, 8]]);
  assert.deepEqual(holdAll(store, 'b', 100 * LAYER_BYTES, 1).held, [[2, 0, 8]]);
});

test('nextSliceRequest: the same model, the ranges held, the budget less their experts; holding nothing, the request as it is', () => {
  const base: VolunteerRequest = { model: '', maxExperts: 4, device: { memoryBudgetBytes: 1000, maxBufferSize: 50 } };
  assert.equal(nextSliceRequest(base, { model: 'small', ranges: [] }, 30), base);
  const next = nextSliceRequest(
    base,
    {
      model: 'small',
      ranges: [
        [1, 0, 8],
        [2, 2, 4],
      ],
    },
    30,
  );
  assert.deepEqual(next, {
    ...base,
    model: 'small',
    held: {
      model: 'small',
      ranges: [
        [1, 0, 8],
        [2, 2, 4],
      ],
    },
    device: { memoryBudgetBytes: 700, maxBufferSize: 50 },
  });
  assert.equal(nextSliceRequest(base, { model: 'small', ranges: [[1, 0, 8]] }, 1000).device?.memoryBudgetBytes, 0, 'never below 0');
});
