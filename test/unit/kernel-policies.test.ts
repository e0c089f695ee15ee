/**
 * The expert kernels' pure policies and tables, no GPU: uniform layout against the WGSL struct, pipeline names,
 * expert grouping, the regime policy, the subgroup probe's verdict, dispatch folding, block tables. The GPU runs of
 * the same kernels are in test/gpu/kernels.test.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType as T, requireQuantType } from '../../gguf/quant-types.ts';
import { ExpertRuntimeError } from '../../shaders/errors.ts';
import { BATCHED_WGSL_CONSTANTS, kernelVariant, pipelineName, type KernelTuning } from '../../shaders/expert-ffn.ts';
import { SHAPE_FIELDS, foldDispatch, writeShapeUniform } from '../../shaders/call-plan.ts';
import { judgeSubgroupLayout } from '../../shaders/subgroup-probe.ts';
import { TILE_WORDS, expertCounts, groupByExpert, usedExperts } from '../../shaders/expert-groups.ts';
import { chooseRegime, type RegimeDecision, type RoutingSnapshot } from '../../shaders/regime-policy.ts';
import { WGSL } from '../../shaders/wgsl-sources.ts';

test('the shape uniform is written in the field order of the WGSL struct', () => {
  const body = /struct Shape \{([^}]*)\}/.exec(WGSL.common)?.[1] ?? '';
  const fields = [...body.matchAll(/^\s*(\w+)\s*:\s*u32/gm)].map((m) => m[1]);
  assert.deepEqual(fields, [...SHAPE_FIELDS]);
  const u = writeShapeUniform(
    { nEmbd: 10, ff: 20, nExpert: 5 },
    { nTokens: 3, nUsed: 2 },
    { expertBegin: 2, expertEnd: 4, tileBegin: 6, nRowTiles: 7 },
  );
  assert.deepEqual([...u], [10, 20, 3, 2, 5, 7, 2, 4, 6]);
});

test('pipeline names say kernel, quant type, pass, tuning and features', () => {
  const tuning: KernelTuning = { workgroupSize: 64, rowsPerWorkgroup: 4, tileRows: 16, tileCols: 32 };
  assert.equal(
    pipelineName({ kernel: 'expert_up', quant: 'q4_k', pass: 'fused', tuning, variant: 'subgroups' }),
    'expert_up/q4_k/fused/wg64r4/subgroups',
  );
  assert.equal(
    pipelineName({ kernel: 'expert_up_batched', quant: 'q4_k', pass: 'gate', tuning, variant: 'base' }),
    'expert_up_batched/q4_k/gate/wg64m16n32/base',
  );
  assert.equal(
    pipelineName({ kernel: 'expert_down_batched', quant: 'q6_k', tuning, variant: 'shader-f16' }),
    'expert_down_batched/q6_k/wg64m16n32/shader-f16',
  );
  // Each feature changes its own kernels only.
  assert.equal(kernelVariant('expert_up', ['shader-f16', 'subgroups']), 'subgroups');
  assert.equal(kernelVariant('expert_down_batched', ['shader-f16', 'subgroups']), 'shader-f16');
  assert.equal(kernelVariant('expert_up_batched', ['subgroups']), 'base');
  assert.equal(kernelVariant('expert_combine', ['shader-f16', 'subgroups']), 'base');
});

test('the batched kernels declare the Tile struct and constants that TS writes and checks against', () => {
  for (const k of ['expert_up_batched', 'expert_down_batched'] as const) {
    const src = WGSL.kernels[k];
    const body = /struct Tile \{([^}]*)\}/.exec(src)?.[1] ?? '';
    assert.deepEqual(
      [...body.matchAll(/^\s*(\w+)\s*:\s*u32/gm)].map((m) => m[1]),
      ['expert', 'first', 'count'],
      k,
    );
    for (const [name, value] of Object.entries(BATCHED_WGSL_CONSTANTS)) {
      assert.match(src, new RegExp(`^const ${name}: u32 = ${value}u;`, 'm'), `${k}: ${name}`);
    }
  }
  assert.equal(TILE_WORDS, 3);
});

test('groupByExpert: a stable sort of the pairs by expert, cut into tiles', () => {
  // 6 tokens × top-2 over 4 experts; expert 1 unused.
  const ids = Int32Array.of(0, 2, 2, 0, 3, 0, 0, 2, 2, 3, 0, 2);
  const counts = expertCounts(ids, 4);
  assert.deepEqual([...counts], [5, 0, 5, 2]);
  assert.equal(usedExperts(counts), 3);
  const g = groupByExpert(ids, counts, 2);
  assert.deepEqual([...g.perm], [0, 3, 5, 6, 10, 1, 2, 7, 8, 11, 4, 9]);
  assert.deepEqual([...g.offsets], [0, 5, 5, 10, 12]);
  // (expert, first, count); 5 pairs in tiles of 2 → 2 + 2 + 1
  assert.deepEqual([...g.tiles], [0, 0, 2, 0, 2, 2, 0, 4, 1, 2, 5, 2, 2, 7, 2, 2, 9, 1, 3, 10, 2]);
  assert.equal(g.nTiles, 7);
  const one = groupByExpert(ids, counts, 16);
  assert.deepEqual([...one.tiles], [0, 0, 5, 2, 5, 5, 3, 10, 2]);
  const empty = groupByExpert(new Int32Array(0), new Uint32Array(4), 16);
  assert.deepEqual([empty.nTiles, empty.perm.length, [...empty.offsets]], [0, 0, [0, 0, 0, 0, 0]]);
});

test('chooseRegime: batched once pairs share experts enough, with the reason', () => {
  const shape = { nEmbd: 2048, ff: 768 };
  const rows: [string, RoutingSnapshot, RegimeDecision][] = [
    [
      'generation: 1 token × top-8',
      { ...shape, nPairs: 8, usedExperts: 8 },
      { regime: 'decode', reason: 'few-pairs-per-expert', pairsPerExpert: 1 },
    ],
    [
      'short prompt spread over many experts',
      { ...shape, nPairs: 256, usedExperts: 100 },
      { regime: 'decode', reason: 'few-pairs-per-expert', pairsPerExpert: 2.56 },
    ],
    [
      'just below the threshold',
      { ...shape, nPairs: 39, usedExperts: 10 },
      { regime: 'decode', reason: 'few-pairs-per-expert', pairsPerExpert: 3.9 },
    ],
    [
      'at the threshold',
      { ...shape, nPairs: 40, usedExperts: 10 },
      { regime: 'batched', reason: 'pairs-share-experts', pairsPerExpert: 4 },
    ],
    [
      'prompt of 512 × top-8 over 128 experts',
      { ...shape, nPairs: 4096, usedExperts: 128 },
      { regime: 'batched', reason: 'pairs-share-experts', pairsPerExpert: 32 },
    ],
    [
      'every pair on one expert',
      { ...shape, nPairs: 64, usedExperts: 1 },
      { regime: 'batched', reason: 'pairs-share-experts', pairsPerExpert: 64 },
    ],
    ['empty call', { ...shape, nPairs: 0, usedExperts: 0 }, { regime: 'decode', reason: 'empty', pairsPerExpert: 0 }],
    [
      'nEmbd not whole quads',
      { nEmbd: 30, ff: 64, nPairs: 512, usedExperts: 4 },
      { regime: 'decode', reason: 'rows-not-quads', pairsPerExpert: 128 },
    ],
    [
      'ff not whole quads',
      { nEmbd: 64, ff: 22, nPairs: 512, usedExperts: 4 },
      { regime: 'decode', reason: 'rows-not-quads', pairsPerExpert: 128 },
    ],
  ];
  for (const [what, snapshot, expected] of rows) assert.deepEqual(chooseRegime(snapshot), expected, what);
  // A policy can move the threshold (e.g. a device where tiles pay off sooner).
  assert.equal(chooseRegime({ ...shape, nPairs: 16, usedExperts: 8 }, { minPairsPerExpert: 2 }).regime, 'batched');
  assert.equal(chooseRegime({ ...shape, nPairs: 16, usedExperts: 8 }).regime, 'decode');
});

test('the subgroup layout probe: lanes in local invocation order with one power-of-two size, or the reason', () => {
  // Per invocation: (lane, size, smallest lid of its subgroup, 0).
  const probe = (
    size: number,
    lane: (lid: number) => number,
    sizeAt: (lid: number) => number = () => size,
    first: (lid: number) => number = (lid) => lid - lane(lid),
  ): Uint32Array => Uint32Array.from({ length: 64 * 4 }, (_, i) => [lane(i >> 2), sizeAt(i >> 2), first(i >> 2), 0][i % 4]!);
  assert.deepEqual(
    judgeSubgroupLayout(
      probe(32, (l) => l % 32),
      64,
    ),
    { usable: true, subgroupSize: 32, reason: 'subgroups of 32 in local invocation order' },
  );
  assert.equal(
    judgeSubgroupLayout(
      probe(4, (l) => l % 4),
      64,
    ).usable,
    true,
  );
  assert.match(
    judgeSubgroupLayout(
      probe(24, (l) => l % 24),
      64,
    ).reason,
    /not a power of two/,
  );
  assert.match(
    judgeSubgroupLayout(
      probe(16, (l) => 15 - (l % 16)),
      64,
    ).reason,
    /invocation 0 is subgroup lane 15/,
  );
  assert.match(
    judgeSubgroupLayout(
      probe(
        16,
        (l) => l % 16,
        (l) => (l < 32 ? 16 : 32),
      ),
      64,
    ).reason,
    /sizes differ/,
  );
  // Lanes in order but subgroups interleaved ({0,1,6,7} and {4,5,2,3}): the lane check alone would pass.
  const interleaved = probe(
    4,
    (l) => l % 4,
    () => 4,
    (l) => [0, 0, 2, 2, 2, 2, 0, 0][l % 8]! + 8 * Math.floor(l / 8),
  );
  assert.match(judgeSubgroupLayout(interleaved, 64).reason, /not a contiguous run/);
});

test('dispatch folding', () => {
  assert.deepEqual(foldDispatch(1, 65535), [1, 1]);
  assert.deepEqual(foldDispatch(65535, 65535), [65535, 1]);
  assert.deepEqual(foldDispatch(65536, 65535), [32768, 2]);
  assert.deepEqual(foldDispatch(200_000, 65535), [50000, 4]);
  assert.throws(
    () => foldDispatch(65535 * 65535 + 1, 65535),
    (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'DISPATCH_TOO_LARGE',
  );
});

test('the block table agrees with the quant snippets', () => {
  for (const [stem, type] of [
    ['q8_0', T.Q8_0],
    ['q4_0', T.Q4_0],
    ['mxfp4', T.MXFP4],
    ['iq4_nl', T.IQ4_NL],
    ['iq4_xs', T.IQ4_XS],
    ['iq2_xxs', T.IQ2_XXS],
    ['iq2_xs', T.IQ2_XS],
    ['iq3_xxs', T.IQ3_XXS],
    ['iq1_s', T.IQ1_S],
    ['iq1_m', T.IQ1_M],
    ['q5_1', T.Q5_1],
    ['q4_1', T.Q4_1],
    ['q2_k', T.Q2_K],
    ['q3_k', T.Q3_K],
    ['q5_0', T.Q5_0],
    ['q4_k', T.Q4_K],
    ['q5_k', T.Q5_K],
    ['q6_k', T.Q6_K],
    ['f16', T.F16],
    ['bf16', T.BF16],
    ['f32', T.F32],
  ] as const) {
    const src = WGSL.quant[stem];
    const info = requireQuantType(type);
    assert.match(src, new RegExp(`const BLOCK_SIZE: u32 = ${info.blockSize}u;`), stem);
    assert.match(src, new RegExp(`const BLOCK_BYTES: u32 = ${info.bytesPerBlock}u;`), stem);
  }
});
