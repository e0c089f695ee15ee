/**
 * The plan of one compute call (shaders/call-plan.ts), with no GPU: per-call buffer sizes, which weight parts
 * dispatch (an idle part dispatches nothing; batched, each part gets its own run of tiles), workgroup counts folded
 * into 2-D, the Shape uniforms and their stride, the refusals (BATCH_TOO_LARGE, DISPATCH_TOO_LARGE) and the binding
 * limit the sizes are checked against; and llama numerics: which roundings a call needs (callRounding) and their
 * dispatches, buffers and RoundParams uniforms. The GPU runs of the same plans are in kernels.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import {
  NO_ROUNDING,
  bindingLimit,
  callRounding,
  planCall,
  type CallPlan,
  type CallRounding,
  type PlanLimits,
  type PlannedCall,
} from '../../shaders/call-plan.ts';
import type { IntegerDot } from '../../shaders/expert-ffn.ts';
import type { SliceTypes } from '../../shaders/slice.ts';
import { ExpertRuntimeError } from '../../shaders/errors.ts';
import type { KernelTuning } from '../../shaders/expert-ffn.ts';
import { expertCounts } from '../../shaders/expert-groups.ts';
import type { Regime } from '../../shaders/regime-policy.ts';

const SHAPE = { nEmbd: 64, ff: 32, nExpert: 4 };
const TUNING: KernelTuning = { workgroupSize: 64, rowsPerWorkgroup: 4, tileRows: 16, tileCols: 32 };
const LIMITS: PlanLimits = {
  binding: { limit: 2 ** 27, limitName: 'maxStorageBufferBindingSize' },
  maxPerDimension: 65535,
  uniformAlignment: 256,
};

function call(regime: Regime, nTokens: number, nUsed: number, ids: number[]): PlannedCall {
  const i = Int32Array.from(ids);
  return { ids: i, counts: expertCounts(i, SHAPE.nExpert), nTokens, nUsed, regime };
}

/** What a plan decides, in plain arrays. */
function summary(p: CallPlan): object {
  return {
    regime: p.regime,
    nTiles: p.groups?.nTiles ?? null,
    sizes: p.sizes,
    parts: p.parts.map((x) => [
      x.index,
      x.dispatch.expertBegin,
      x.dispatch.expertEnd,
      x.dispatch.tileBegin,
      x.dispatch.nRowTiles,
      x.up,
      x.down,
    ]),
    combine: p.combine,
    uniformStride: p.uniformStride,
    uniforms: p.uniforms.map((u) => [...u]),
  };
}

test('planCall: sizes, part dispatches, folded workgroups and Shape uniforms', () => {
  // Shape uniform fields: n_embd, ff, n_tokens, n_used, n_expert, n_row_tiles, expert_begin, expert_end, tile_begin.
  // Parts: [index, expertBegin, expertEnd, tileBegin, nRowTiles, up (x, y), down (x, y)].
  const rows: [string, PlannedCall, Partial<KernelTuning>, [number, number][], Partial<PlanLimits>, object][] = [
    [
      'decode, one part: a workgroup per pair × 4 weight rows',
      call('decode', 3, 2, [0, 1, 2, 3, 1, 2]),
      {},
      [[0, 4]],
      {},
      {
        regime: 'decode',
        nTiles: null,
        sizes: { rows: 768, probs: 24, hidden: 768, expertOut: 1536, out: 768, ids: 24, tiles: 0 },
        parts: [[0, 0, 4, 0, 0, [48, 1], [96, 1]]], // 6 pairs × 32/4, 6 × 64/4
        combine: [3, 1], // 3 × 64 outputs / 64 threads
        uniformStride: 256,
        uniforms: [
          [64, 32, 3, 2, 4, 0, 0, 4, 0],
          [64, 32, 3, 2, 4, 0, 0, 4, 0],
        ],
      },
    ],
    [
      'decode, three parts: the idle ones dispatch nothing; folded into 10 × 10 at most',
      call('decode', 2, 2, [2, 3, 3, 2]),
      {},
      [
        [0, 1],
        [1, 2],
        [2, 4],
      ],
      { maxPerDimension: 10, uniformAlignment: 16 },
      {
        regime: 'decode',
        nTiles: null,
        sizes: { rows: 512, probs: 16, hidden: 512, expertOut: 1024, out: 512, ids: 16, tiles: 0 },
        parts: [[2, 2, 4, 0, 0, [8, 4], [10, 7]]], // 32 workgroups → 8 × 4; 64 → 10 × 7 (6 padding)
        combine: [2, 1],
        uniformStride: 48, // 36 bytes at 16-byte alignment
        uniforms: [
          [64, 32, 2, 2, 4, 0, 2, 4, 0],
          [64, 32, 2, 2, 4, 0, 0, 4, 0],
        ],
      },
    ],
    [
      'batched, two parts: each its own run of tiles (2 per expert at tileRows 4)',
      call(
        'batched',
        16,
        2,
        Array.from({ length: 32 }, (_, i) => ((i >> 1) + (i & 1)) % 4),
      ),
      { tileRows: 4 },
      [
        [0, 2],
        [2, 4],
      ],
      { uniformAlignment: 16 },
      {
        regime: 'batched',
        nTiles: 8,
        sizes: { rows: 4096, probs: 128, hidden: 4096, expertOut: 8192, out: 4096, ids: 128, tiles: 96 },
        parts: [
          [0, 0, 2, 0, 4, [4, 1], [8, 1]],
          [1, 2, 4, 4, 4, [4, 1], [8, 1]],
        ], // 4 tiles × 32/32 columns, × 64/32
        combine: [16, 1],
        uniformStride: 48,
        uniforms: [
          [64, 32, 16, 2, 4, 4, 0, 2, 0],
          [64, 32, 16, 2, 4, 4, 2, 4, 4],
          [64, 32, 16, 2, 4, 0, 0, 4, 0],
        ],
      },
    ],
    [
      'batched, one expert per part, expert 1 unused: its part is skipped and the tile offsets run on',
      call(
        'batched',
        8,
        2,
        Array.from({ length: 16 }, (_, i) => (i & 1 ? (i >> 1 < 5 ? 2 : 3) : 0)),
      ),
      {},
      [
        [0, 1],
        [1, 2],
        [2, 3],
        [3, 4],
      ],
      {},
      {
        regime: 'batched',
        nTiles: 3, // 8, 0, 5, 3 pairs at tileRows 16
        sizes: { rows: 2048, probs: 64, hidden: 2048, expertOut: 4096, out: 2048, ids: 64, tiles: 36 },
        parts: [
          [0, 0, 1, 0, 1, [1, 1], [2, 1]],
          [2, 2, 3, 1, 1, [1, 1], [2, 1]],
          [3, 3, 4, 2, 1, [1, 1], [2, 1]],
        ],
        combine: [8, 1],
        uniformStride: 256,
        uniforms: [
          [64, 32, 8, 2, 4, 1, 0, 1, 0],
          [64, 32, 8, 2, 4, 1, 2, 3, 1],
          [64, 32, 8, 2, 4, 1, 3, 4, 2],
          [64, 32, 8, 2, 4, 0, 0, 4, 0],
        ],
      },
    ],
  ];
  for (const [what, c, tuning, parts, limits, expected] of rows) {
    const plan = planCall(SHAPE, c, { ...TUNING, ...tuning }, parts, { ...LIMITS, ...limits });
    assert.deepEqual(summary(plan), expected, what);
    if (plan.groups) {
      assert.deepEqual(plan.groups.tiles.byteLength, plan.sizes.tiles, what);
      assert.equal(
        plan.parts.reduce((n, p) => n + p.dispatch.nRowTiles, 0),
        plan.groups.nTiles,
        `${what}: every tile in one part`,
      );
    }
  }
});

test('planCall refuses, naming the numbers, before any GPU work', () => {
  const decode = call('decode', 3, 2, [0, 1, 2, 3, 1, 2]);
  const rows: [string, Partial<PlanLimits>, string, object][] = [
    // rows 768, probs 24, hidden 768 fit; expertOut (6 pairs × 64 × 4 bytes) is the first over.
    [
      'a per-call buffer over the binding limit',
      { binding: { limit: 1000, limitName: 'maxStorageBufferBindingSize' } },
      'BATCH_TOO_LARGE',
      { buffer: 'expertOut', bytes: 1536, limit: 1000, limitName: 'maxStorageBufferBindingSize' },
    ],
    // up: 48 workgroups need ⌈48 / 5⌉ = 10 rows of 5: more than 5.
    ['a dispatch that does not fold into 5 × 5', { maxPerDimension: 5 }, 'DISPATCH_TOO_LARGE', { workgroups: 48, maxPerDimension: 5 }],
  ];
  for (const [what, limits, code, details] of rows) {
    assert.throws(
      () => planCall(SHAPE, decode, TUNING, [[0, 4]], { ...LIMITS, ...limits }),
      (e: unknown) => {
        assert.ok(e instanceof ExpertRuntimeError, what);
        assert.equal(e.code, code, what);
        assert.deepEqual(e.details, details, what);
        return true;
      },
    );
  }
});

test('bindingLimit: the smallest of the limits that cap one binding, with its name', () => {
  const GiB = 2 ** 30;
  const rows: [
    string,
    { maxStorageBufferBindingSize: number; maxBufferSize: number },
    number | undefined,
    { limit: number; limitName: string },
  ][] = [
    [
      'WebGPU defaults',
      { maxStorageBufferBindingSize: 2 ** 27, maxBufferSize: 2 ** 28 },
      undefined,
      { limit: 2 ** 27, limitName: 'maxStorageBufferBindingSize' },
    ],
    [
      'a buffer smaller than a binding',
      { maxStorageBufferBindingSize: GiB, maxBufferSize: GiB / 2 },
      undefined,
      { limit: GiB / 2, limitName: 'maxBufferSize' },
    ],
    [
      'past what a u32 byte offset addresses',
      { maxStorageBufferBindingSize: 4 * GiB, maxBufferSize: 8 * GiB },
      undefined,
      { limit: 2 ** 32 - 4, limitName: 'u32 byte addressing of the kernels' },
    ],
    [
      'the maxBindingBytes option',
      { maxStorageBufferBindingSize: 2 ** 27, maxBufferSize: 2 ** 28 },
      4096,
      { limit: 4096, limitName: 'the maxBindingBytes option' },
    ],
  ];
  for (const [what, limits, cap, expected] of rows) assert.deepEqual(bindingLimit(limits, cap), expected, what);
});

const T = GGMLType;
const same = (t: GGMLType): SliceTypes => ({ gate: t, up: t, down: t });

test('callRounding: which activations llama numerics rounds, how, and which the int8 kernels read packed', () => {
  const q = (mode: string, packed: boolean) => ({ mode, packed });
  const rows: [string, SliceTypes, 'exact' | 'llama', 'decode' | 'batched', IntegerDot, CallRounding][] = [
    ['exact numerics: nothing', same(T.Q4_K), 'exact', 'decode', 'packed', NO_ROUNDING],
    [
      'Q8_0, decode, packed: Q8_0 blocks, int8 up and down',
      same(T.Q8_0),
      'llama',
      'decode',
      'packed',
      { gate: q('q8_0', true), up: q('q8_0', true), down: q('q8_0', true) } as CallRounding,
    ],
    [
      'Q4_0, decode, unpacked: the same plan (the kernels differ only in dot_i8)',
      same(T.Q4_0),
      'llama',
      'decode',
      'unpacked',
      { gate: q('q8_0', true), up: q('q8_0', true), down: q('q8_0', true) } as CallRounding,
    ],
    [
      'Q4_K, decode, float: Q8_K values through the float kernels',
      same(T.Q4_K),
      'llama',
      'decode',
      'float',
      { gate: q('q8_k', false), up: q('q8_k', false), down: q('q8_k', false) } as CallRounding,
    ],
    [
      'Q6_K, batched: values, whatever integerDot says',
      same(T.Q6_K),
      'llama',
      'batched',
      'packed',
      { gate: q('q8_k', false), up: q('q8_k', false), down: q('q8_k', false) } as CallRounding,
    ],
    [
      'Q4_K/Q5_K/Q6_K: gate and up round alike, two int8 passes',
      { gate: T.Q4_K, up: T.Q5_K, down: T.Q6_K },
      'llama',
      'decode',
      'packed',
      { gate: q('q8_k', true), up: q('q8_k', true), down: q('q8_k', true) } as CallRounding,
    ],
    [
      'Q8_0 gate, Q4_K up: they round differently, so the up step reads values; down Q8_0 is packed',
      { gate: T.Q8_0, up: T.Q4_K, down: T.Q8_0 },
      'llama',
      'decode',
      'packed',
      { gate: q('q8_0', false), up: q('q8_k', false), down: q('q8_0', true) } as CallRounding,
    ],
    [
      'F16 / BF16 / Q8_0: half roundings (values), a packed down',
      { gate: T.F16, up: T.BF16, down: T.Q8_0 },
      'llama',
      'decode',
      'packed',
      { gate: q('f16', false), up: q('bf16', false), down: q('q8_0', true) } as CallRounding,
    ],
    ['F32: no rounding in either numerics', same(T.F32), 'llama', 'decode', 'packed', NO_ROUNDING],
    [
      'F16 down after Q4_0 gate/up: the rows packed, h to f16',
      { gate: T.Q4_0, up: T.Q4_0, down: T.F16 },
      'llama',
      'decode',
      'packed',
      { gate: q('q8_0', true), up: q('q8_0', true), down: q('f16', false) } as CallRounding,
    ],
  ];
  for (const [what, types, numerics, regime, integerDot, expected] of rows) {
    assert.deepEqual(callRounding(types, numerics, regime, integerDot), expected, what);
  }
});

test('planCall with roundings: the round_activations dispatches, their buffers and RoundParams uniforms', () => {
  const K_SHAPE = { nEmbd: 256, ff: 512, nExpert: 4 };
  const rows: [string, typeof SHAPE, PlannedCall, Partial<PlanLimits>, object[], number[][]][] = [
    [
      "Q8_0 decode, packed: the rows once (gate and up), h once; quants 1 byte, a scale and Q8_1's s per 32",
      SHAPE,
      { ...call('decode', 3, 2, [0, 1, 2, 3, 1, 2]), rounding: callRounding(same(T.Q8_0), 'llama', 'decode', 'packed') },
      {},
      [
        // input, for, mode, packed, nRows, rowLen, workgroups, bytes
        ['rows', ['gate', 'up'], 'q8_0', true, 3, 64, [1, 1], { values: 768, qs: 192, scales: 48 }],
        ['hidden', ['down'], 'q8_0', true, 6, 32, [1, 1], { values: 768, qs: 192, scales: 48 }],
      ],
      [
        [3, 64],
        [6, 32],
      ],
    ],
    [
      'F16 gate, BF16 up, Q8_0 down: two roundings of the rows (values), h packed',
      SHAPE,
      { ...call('decode', 2, 1, [1, 3]), rounding: callRounding({ gate: T.F16, up: T.BF16, down: T.Q8_0 }, 'llama', 'decode', 'packed') },
      {},
      [
        ['rows', ['gate'], 'f16', false, 2, 64, [1, 1], { values: 512, qs: 0, scales: 0 }],
        ['rows', ['up'], 'bf16', false, 2, 64, [1, 1], { values: 512, qs: 0, scales: 0 }],
        ['hidden', ['down'], 'q8_0', true, 2, 32, [1, 1], { values: 256, qs: 64, scales: 16 }],
      ],
      [
        [2, 64],
        [2, 64],
        [2, 32],
      ],
    ],
    [
      'Q4_K batched, 64 rows × top-2, 16 workgroups per dimension: values only; 64 and 256 workgroups fold into 2-D',
      K_SHAPE,
      {
        ...call(
          'batched',
          64,
          2,
          Array.from({ length: 128 }, (_, i) => i % 4),
        ),
        rounding: callRounding(same(T.Q4_K), 'llama', 'batched', 'packed'),
      },
      // combine: 64 × 256 / 64 = 256 workgroups fit 16 × 16 at most
      { maxPerDimension: 16 },
      [
        // 64 × 256 / 4 / 64 = 64 workgroups → 16 × 4; 128 × 512 → 256 → 16 × 16
        ['rows', ['gate', 'up'], 'q8_k', false, 64, 256, [16, 4], { values: 65536, qs: 0, scales: 0 }],
        ['hidden', ['down'], 'q8_k', false, 128, 512, [16, 16], { values: 262144, qs: 0, scales: 0 }],
      ],
      [
        [64, 256],
        [128, 512],
      ],
    ],
    ['exact numerics: no round dispatch, no extra uniform', SHAPE, call('decode', 3, 2, [0, 1, 2, 3, 1, 2]), {}, [], []],
  ];
  for (const [what, shape, c, limits, rounds, params] of rows) {
    const plan = planCall(shape, c, TUNING, [[0, 4]], { ...LIMITS, ...limits });
    assert.deepEqual(
      plan.rounds.map((r) => [r.input, r.for, r.mode, r.packed, r.nRows, r.rowLen, r.workgroups, r.bytes]),
      rounds,
      what,
    );
    assert.deepEqual(plan.rounding, c.rounding ?? NO_ROUNDING, what);
    // Uniforms: one Shape per planned part, the combine's, then one RoundParams per round.
    assert.equal(plan.uniforms.length, plan.parts.length + 1 + rounds.length, what);
    assert.deepEqual(
      plan.uniforms.slice(plan.parts.length + 1).map((u) => [...u]),
      params,
      what,
    );
    // A rounding's outputs are never larger than its input (values: the same bytes; quants a quarter; scales less),
    // so the plain buffers' BATCH_TOO_LARGE check covers them.
    for (const r of plan.rounds) {
      assert.equal(r.bytes.values, r.input === 'rows' ? plan.sizes.rows : plan.sizes.hidden, what);
      assert.ok(r.bytes.qs <= r.bytes.values / 4 && r.bytes.scales <= r.bytes.qs, what);
    }
  }
});
