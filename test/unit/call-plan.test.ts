/**
 * The plan of one compute call (shaders/call-plan.ts), with no GPU: per-call buffer sizes, which weight parts
 * dispatch (an idle part dispatches nothing; batched, each part gets its own run of tiles), workgroup counts folded
 * into 2-D, the Shape uniforms and their stride, the refusals (BATCH_TOO_LARGE, DISPATCH_TOO_LARGE) and the binding
 * limit the sizes are checked against. The GPU runs of the same plans are in kernels.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { bindingLimit, planCall, type CallPlan, type PlanLimits, type PlannedCall } from '../../shaders/call-plan.ts';
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
