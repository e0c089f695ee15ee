/**
 * The wasm fallback (shaders/wasm/: our AssemblyScript SIMD kernel, built from npm's `assemblyscript` into .cache/wasm)
 * as a table: every weight type it reads × both numerics × 1, 4 and 64 rows against the float64 reference
 * (shaders/reference/), and in llama numerics bit for bit against harness/ggml-exact.ts (the coordinator's
 * arithmetic) for every type that model has (every type the kernel reads but BF16); 64 rows over 4 experts put
 * 32 pairs on each expert, so the kernel's four-token passes and their remainders both run. Then: routed only (an
 * unrouted expert's weights poisoned with NaN change nothing), memory about the slice's own size, passes of any
 * size giving the same bits, and the validation errors of ExpertRuntime / OrtExpertFallback.
 *
 * Bounds: 'exact' NMSE ≤ 1e-9 (weights dequantized bit for bit, f32 sums: only f32 summation error, measured
 * ~1e-14); 'llama' NMSE beyond the ties of h ≤ 1e-9 (docs/kernels.md, "What agrees means") — and 0 differing bits
 * against ggml-exact where it applies.
 *
 * Both builds of the kernel (shaders/wasm/features.ts) run the grid: 'simd' here, 'relaxed-simd' here too where this
 * Node validates relaxed SIMD, else in a child Node started with `--experimental-wasm-relaxed-simd` that runs this
 * file for that build alone (EXPERTSWARM_WASM_VARIANT), holding it to the simd build's bits on the grid (VERSUS_SIMD).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { IQ1S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3XXS_GRID, KSIGNS_IQ2XS } from '../../gguf/iq-grids.ts';
import type { Numerics } from '../../protocol/numerics.ts';
import { GPT_OSS_VARIANT, SILU_VARIANT, type ExpertVariant } from '../../protocol/variant.ts';
import { ExpertRuntimeError } from '../../shaders/errors.ts';
import { dequantizeExperts, nmse, referenceCall, type RoutedCall } from '../../shaders/reference/expert-call.ts';
import { compareLlama } from '../../shaders/reference/llama-ties.ts';
import { gatedUnit } from '../../shaders/reference/expert-ffn.ts';
import { Q8_1_WEIGHT_TYPES, roundActivations, vecDotType } from '../../shaders/reference/ggml-activations.ts';
import { f16ToF32, f32ToF16 } from '../../gguf/half.ts';
import { sliceMatrixBytes, type ExpertSlice, type SliceTypes } from '../../shaders/slice.ts';
import { nodeExpertKernel } from '../../shaders/wasm/build.ts';
import { KERNEL_VARIANTS, relaxedSimdSupported, type ExpertKernelVariant } from '../../shaders/wasm/features.ts';
import { WASM_BIT_EXACT_TYPES, WASM_FALLBACK_TYPES, WasmExpertFallback } from '../../shaders/wasm/fallback.ts';
import { kernelWasmBytesFor } from '../../volunteer/engine-open.ts';
import { ggmlLayerSums } from '../../harness/ggml-exact.ts';
import { weightBytes } from '../../harness/weight-bytes.ts';
import { mulberry32 as rng } from '../../shaders/random.ts';

const uniform = (n: number, r: () => number, scale: number): Float32Array => new Float32Array(n).map(() => (r() * 2 - 1) * scale);

const SHAPE = { nEmbd: 256, ff: 256, nExpert: 4 };
const ROWS = [1, 4, 64];
/**
 * Q4_1 / Q5_1 in llama numerics against the reference (compareLlama): the kernel multiplies each block's min by Q8_1's
 * f16 s as ggml does, which the reference does not model (Q8_1_WEIGHT_TYPES), so it sits ~1e-6..1e-5 off it (the WGSL
 * int8 kernels' LLAMA_Q8_1_INT8_MAX, test/gpu/kernels.test.ts); a wrong min or scale reads ≥ 1e-2. Their bits are
 * held to ggml-exact's, which models s.
 */
const LLAMA_Q8_1_MAX = 2e-4;
const N_USED = 2;
/** Types ggml-exact models bit for bit (its toVecDot / vecDot). */
const GGML_EXACT = new Set([
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.Q2_K,
  GGMLType.Q3_K,
  GGMLType.Q4_K,
  GGMLType.Q5_K,
  GGMLType.Q6_K,
  GGMLType.MXFP4,
  GGMLType.IQ4_NL,
  GGMLType.IQ4_XS,
  GGMLType.IQ2_XXS,
  GGMLType.IQ2_XS,
  GGMLType.IQ3_XXS,
  GGMLType.IQ1_S,
  GGMLType.IQ1_M,
]);

function makeSlice(type: GGMLType | SliceTypes, seed: number, shape = SHAPE): ExpertSlice {
  const { nEmbd, ff, nExpert } = shape;
  const types = typeof type === 'number' ? { gate: type, up: type, down: type } : type;
  const r = rng(seed);
  const n = nExpert * nEmbd * ff;
  return {
    nEmbd,
    ff,
    nExpert,
    types,
    gate: weightBytes(types.gate, n, r, 1 / Math.sqrt(nEmbd)),
    up: weightBytes(types.up, n, r, 1 / Math.sqrt(nEmbd)),
    down: weightBytes(types.down, n, r, 1 / Math.sqrt(ff)),
  };
}

/** nTokens rows in [-1, 1), each routed to nUsed distinct experts of `avoid`-free ids, probs in [0.1, 0.6). */
function call(nTokens: number, seed: number, nExpert = SHAPE.nExpert, nEmbd = SHAPE.nEmbd, avoid = -1, nUsed = N_USED): RoutedCall {
  const r = rng(seed);
  const rows = uniform(nTokens * nEmbd, r, 1);
  const ids = new Int32Array(nTokens * nUsed);
  const pool = [...Array(nExpert).keys()].filter((e) => e !== avoid);
  for (let t = 0; t < nTokens; t++) {
    const start = Math.floor(r() * pool.length);
    for (let k = 0; k < nUsed; k++) ids[t * nUsed + k] = pool[(start + k) % pool.length]!;
  }
  const probs = new Float32Array(nTokens * nUsed).map(() => 0.1 + r() * 0.5);
  return { rows, ids, probs, nTokens, nUsed };
}

const run = (fb: WasmExpertFallback, c: RoutedCall): Promise<Float32Array> => fb.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed);

function differingBits(a: Float32Array, b: Float32Array): number {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let n = 0;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) n++;
  return n;
}

/** The build this process tests alone (the child below), or none: every build this Node runs. */
const FORCED = process.env.EXPERTSWARM_WASM_VARIANT as ExpertKernelVariant | undefined;
const VARIANTS: readonly ExpertKernelVariant[] = FORCED ? [FORCED] : KERNEL_VARIANTS.filter((v) => v === 'simd' || relaxedSimdSupported());
const kernel = nodeExpertKernel(VARIANTS[0]);
const kernelOf = (v: ExpertKernelVariant): Promise<WebAssembly.Module> => nodeExpertKernel(v);

/**
 * The child that runs this file for the relaxed-simd build (where this Node does not validate relaxed SIMD) holds it to
 * the simd build's bits on the per-type grid (the same seeds; the parent holds the simd build to the reference and
 * ggml-exact there), and skips the variant slices (wasm-variant.test.ts's child holds the relaxed build to the simd
 * build's bits on every variant): neither the references nor ggml-exact (JS, most of the time here) run twice.
 * `npm run test:kernels:full` (EXPERTSWARM_KERNELS=full) runs the whole file in the child as well.
 */
const VERSUS_SIMD = FORCED !== undefined && FORCED !== 'simd' && process.env.EXPERTSWARM_KERNELS !== 'full';

/** This process's environment without node --test's child protocol, so the child reports as a plain run (TAP). */
function childEnv(): NodeJS.ProcessEnv {
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  return env;
}

if (!FORCED && !relaxedSimdSupported()) {
  test('the relaxed-simd build passes this file under --experimental-wasm-relaxed-simd', { timeout: 900_000 }, (t) => {
    const r = spawnSync(process.execPath, ['--experimental-wasm-relaxed-simd', '--import', 'tsx', fileURLToPath(import.meta.url)], {
      env: { ...childEnv(), EXPERTSWARM_WASM_VARIANT: 'relaxed-simd' },
      encoding: 'utf8',
      timeout: 880_000,
    });
    const summary = `${r.stdout}`.split('\n').filter((l) => /^# (tests|pass|fail)/.test(l));
    t.diagnostic(`child: ${summary.join(', ')}`);
    assert.equal(r.status, 0, `the relaxed-simd build failed:\n${r.stdout}\n${r.stderr}`);
  });
}

test('the wasm fallback reads every type it lists', () => {
  assert.deepEqual(
    [...WASM_FALLBACK_TYPES.types].sort((a, b) => a - b),
    [0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 16, 17, 18, 19, 20, 23, 29, 30, 39],
    'F32 F16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ2_XXS IQ2_XS IQ3_XXS IQ1_S IQ4_NL IQ4_XS IQ1_M BF16 MXFP4',
  );
  for (const t of WASM_BIT_EXACT_TYPES) assert.ok(WASM_FALLBACK_TYPES.types.includes(t));
  // every type it reads is computed as ggml does (and held to ggml-exact below)
  assert.deepEqual([...WASM_BIT_EXACT_TYPES].sort(), [...WASM_FALLBACK_TYPES.types].sort());
  for (const t of WASM_FALLBACK_TYPES.types) if (t !== GGMLType.BF16) assert.ok(GGML_EXACT.has(t), GGMLType[t]);
});

test("the kernel's IQ2_XXS, IQ2_XS, IQ3_XXS and IQ1_S grids (assembly/iq-grids.as) are gguf/iq-grids.ts's", () => {
  const text = readFileSync(fileURLToPath(new URL('../../shaders/wasm/assembly/iq-grids.as', import.meta.url)), 'utf8');
  const arrays = [...text.matchAll(/export const (\w+) = memory\.data<[ui]8>\(\[([^\]]*)\]/g)].map(
    (m) =>
      [
        m[1],
        m[2]!
          .split(',')
          .map((v) => v.trim())
          .filter((v) => v !== '')
          .map(Number),
      ] as const,
  );
  const byName = new Map(arrays);
  assert.deepEqual(byName.get('IQ2XXS_GRID'), [...IQ2XXS_GRID], 'iq2xxs_grid');
  assert.deepEqual(byName.get('IQ3XXS_GRID'), [...IQ3XXS_GRID], 'iq3xxs_grid');
  assert.deepEqual(byName.get('IQ2XS_GRID'), [...IQ2XS_GRID], 'iq2xs_grid');
  assert.deepEqual(byName.get('IQ1S_GRID'), [...IQ1S_GRID], 'iq1s_grid');
  const signs = Array.from({ length: 1024 }, (_, i) => ((KSIGNS_IQ2XS[i >> 3] as number) & (1 << (i & 7)) ? -1 : 1));
  assert.deepEqual(byName.get('KEVEN_SIGNS'), signs, 'keven_signs_q2xs');
});

for (const variant of VARIANTS)
  for (const type of WASM_FALLBACK_TYPES.types) {
    const name = GGMLType[type];
    const against = VERSUS_SIMD ? "the simd build's bits" : 'the reference and ggml-exact';
    test(`wasm fallback (${variant}), ${name}: both numerics × 1/4/64 rows against ${against}`, {
      timeout: 300_000,
    }, async (t) => {
      const slice = makeSlice(type, 100 + type);
      if (VERSUS_SIMD) {
        for (const numerics of ['exact', 'llama'] as Numerics[]) {
          const mine = await WasmExpertFallback.create(await kernelOf(variant), slice, { numerics });
          const simd = await WasmExpertFallback.create(await kernelOf('simd'), slice, { numerics });
          for (const nTokens of ROWS) {
            const c = call(nTokens, 1000 * type + nTokens);
            const diff = differingBits(await run(mine, c), await run(simd, c));
            assert.equal(diff, 0, `${name} ${numerics}, ${nTokens} rows: ${diff} values differ from the simd build's`);
          }
          await mine.dispose();
          await simd.dispose();
        }
        return;
      }
      const experts = dequantizeExperts(slice);
      for (const numerics of ['exact', 'llama'] as Numerics[]) {
        const fb = await WasmExpertFallback.create(await kernelOf(variant), slice, { numerics });
        try {
          for (const nTokens of ROWS) {
            const c = call(nTokens, 1000 * type + nTokens);
            const got = await run(fb, c);
            assert.equal(got.length, nTokens * SHAPE.nEmbd);
            const where = `${name} ${numerics}, ${nTokens} rows`;
            if (numerics === 'exact') {
              const e = nmse(got, referenceCall(experts, c));
              t.diagnostic(`${where}: NMSE ${e.toExponential(2)}`);
              assert.ok(e <= 1e-9, `${where}: NMSE ${e}`);
              continue;
            }
            const cmp = compareLlama(experts, c, got);
            let bits = '';
            if (GGML_EXACT.has(type)) {
              const want = await ggmlLayerSums(slice, c.rows, c.ids, c.probs, c.nTokens, c.nUsed);
              const diff = differingBits(got, want);
              bits = `, ${diff} of ${got.length} values differ from ggml-exact`;
              assert.equal(diff, 0, `${where}: ${diff} values differ from ggml-exact`);
            }
            t.diagnostic(`${where}: NMSE ${cmp.nmse.toExponential(2)}, beyond ties ${cmp.beyondTies.toExponential(2)}${bits}`);
            const bound = Q8_1_WEIGHT_TYPES.has(type) ? LLAMA_Q8_1_MAX : 1e-9;
            assert.ok(cmp.beyondTies <= bound, `${where}: NMSE beyond ties ${cmp.beyondTies}`);
          }
        } finally {
          await fb.dispose();
        }
      }
    });
  }

for (const variant of VARIANTS) {
  test(`wasm fallback (${variant}): mixed types per matrix, bit for bit with ggml-exact; FMA fused or emulated`, async (t) => {
    for (const [types, emulateFma] of [
      [{ gate: GGMLType.Q4_K, up: GGMLType.Q8_0, down: GGMLType.Q6_K }, false],
      [{ gate: GGMLType.Q5_K, up: GGMLType.Q6_K, down: GGMLType.Q4_K }, false],
      // The relaxed build's f64 emulation, which machines whose relaxed_madd does not fuse run, every integer kind.
      [{ gate: GGMLType.Q4_K, up: GGMLType.Q8_0, down: GGMLType.Q6_K }, true],
      [{ gate: GGMLType.Q5_K, up: GGMLType.Q4_0, down: GGMLType.Q4_K }, true],
      // Q4_0 and Q8_0 sharing one Q8_0 record (the relaxed build's i8 ones, q4tDots and q80Dots), and Q5_0 (qnDots
      // there) beside them
      [{ gate: GGMLType.Q4_0, up: GGMLType.Q8_0, down: GGMLType.Q8_0 }, false],
      [{ gate: GGMLType.Q8_0, up: GGMLType.Q4_0, down: GGMLType.Q5_0 }, true],
      // IQ4_XS beside the K-quants (the relaxed build's Q8_K records are i8 in element order; each type's own dot reads them)
      [{ gate: GGMLType.IQ4_XS, up: GGMLType.Q6_K, down: GGMLType.IQ4_XS }, false],
      [{ gate: GGMLType.Q4_K, up: GGMLType.IQ4_XS, down: GGMLType.IQ4_XS }, true],
      // IQ2_XXS (its 0.125 folded into d) beside IQ4_XS and Q6_K, FMA fused and emulated
      [{ gate: GGMLType.IQ2_XXS, up: GGMLType.IQ4_XS, down: GGMLType.Q6_K }, false],
      [{ gate: GGMLType.Q6_K, up: GGMLType.IQ2_XXS, down: GGMLType.IQ2_XXS }, true],
      [{ gate: GGMLType.IQ3_XXS, up: GGMLType.IQ2_XXS, down: GGMLType.IQ3_XXS }, true],
      [{ gate: GGMLType.IQ2_XS, up: GGMLType.IQ4_XS, down: GGMLType.IQ2_XS }, false],
      // IQ1_S (its shifts' scalar sum, as Q5_K's mins) beside Q5_K and IQ2_XS
      [{ gate: GGMLType.IQ1_S, up: GGMLType.Q5_K, down: GGMLType.IQ1_S }, true],
      [{ gate: GGMLType.IQ2_XS, up: GGMLType.IQ1_S, down: GGMLType.Q5_K }, false],
      // Q4_1 / Q5_1 (Q8_1 activations: their mins times its f16 s), Q2_K (its mins first into the lanes' accumulator),
      // Q3_K (DOT_IQ4XS) and IQ1_M (its shifts' own lanes and accumulator) beside each other (the per-type grid has
      // each alone, fused in the relaxed child against the simd build's emulated bits)
      [{ gate: GGMLType.Q4_1, up: GGMLType.Q2_K, down: GGMLType.IQ1_M }, true],
      [{ gate: GGMLType.IQ1_M, up: GGMLType.Q5_1, down: GGMLType.Q3_K }, false],
      // the relaxed build's Q2_K and Q3_K read in place (q2kDots, q3kDots) with FMA emulated (the grid has them fused)
      [{ gate: GGMLType.Q3_K, up: GGMLType.Q2_K, down: GGMLType.Q3_K }, true],
      // the relaxed build's Q5_0, Q4_1 and Q5_1 read in place (qnDots: Q8_0 and Q8_1 i8 records) with FMA emulated
      [{ gate: GGMLType.Q5_1, up: GGMLType.Q5_0, down: GGMLType.Q4_1 }, true],
      // F32 (the relaxed build's ggml_vec_dot_f32 in registers where relaxed_madd fuses, else emulated) beside F16
      [{ gate: GGMLType.F32, up: GGMLType.F16, down: GGMLType.F32 }, true],
      [{ gate: GGMLType.F16, up: GGMLType.F32, down: GGMLType.F32 }, false],
    ] as const) {
      const slice = makeSlice(types, 7);
      const fb = await WasmExpertFallback.create(await kernelOf(variant), slice, { numerics: 'llama', emulateFma });
      if (!emulateFma) t.diagnostic(`${variant}: FMA ${fb.fusedMadd ? 'fused (relaxed_madd)' : 'emulated in f64'}`);
      if (emulateFma) assert.equal(fb.fusedMadd, false, 'emulated when asked');
      for (const nTokens of [3, 64]) {
        const c = call(nTokens, 70 + nTokens);
        const want = await ggmlLayerSums(slice, c.rows, c.ids, c.probs, c.nTokens, c.nUsed);
        assert.equal(
          differingBits(await run(fb, c), want),
          0,
          `${JSON.stringify(types)}${emulateFma ? ', FMA emulated' : ''}, ${nTokens} rows`,
        );
      }
    }
  });
}

for (const variant of VARIANTS) {
  test(`wasm fallback (${variant}): MXFP4 and IQ4_NL (blocks in pairs, an odd last block in scalar) on odd block counts, bit for bit with ggml-exact; FMA fused or emulated`, async () => {
    // 96 and 160: 3 and 5 blocks of 32, so every row ends in ggml's scalar tail; 64: 2 blocks, no tail.
    for (const [shape, types] of [
      [
        { nEmbd: 96, ff: 160, nExpert: 4 },
        { gate: GGMLType.MXFP4, up: GGMLType.MXFP4, down: GGMLType.MXFP4 },
      ],
      [
        { nEmbd: 96, ff: 160, nExpert: 4 },
        { gate: GGMLType.IQ4_NL, up: GGMLType.IQ4_NL, down: GGMLType.IQ4_NL },
      ],
      [
        { nEmbd: 160, ff: 64, nExpert: 4 },
        { gate: GGMLType.IQ4_NL, up: GGMLType.MXFP4, down: GGMLType.IQ4_NL },
      ],
      [
        { nEmbd: 160, ff: 64, nExpert: 4 },
        { gate: GGMLType.MXFP4, up: GGMLType.Q8_0, down: GGMLType.MXFP4 },
      ],
    ] as const) {
      const slice = makeSlice(types, 17, shape);
      for (const emulateFma of [false, true]) {
        const fb = await WasmExpertFallback.create(await kernelOf(variant), slice, { numerics: 'llama', emulateFma });
        try {
          for (const nTokens of [1, 3, 4, 33]) {
            const c = call(nTokens, 90 + nTokens, shape.nExpert, shape.nEmbd);
            const want = await ggmlLayerSums(slice, c.rows, c.ids, c.probs, c.nTokens, c.nUsed);
            const what = `${JSON.stringify(shape)} ${JSON.stringify(types)}${emulateFma ? ', FMA emulated' : ''}, ${nTokens} rows`;
            assert.equal(differingBits(await run(fb, c), want), 0, what);
          }
        } finally {
          await fb.dispose();
        }
      }
    }
  });
}

/**
 * Q4_K super-blocks' f16 d and dmin set to subnormals, zeros, negatives and normals of every size (the relaxed
 * build's fused Q4_K dots convert them four at a time in SIMD, dots.as f16x4ToF32; uniform weights of 1/√n_embd,
 * the bench's, quantize to subnormal d). Finite values only: inf and NaN make the sums NaN whatever their bits.
 */
const F16_CASES = [0x0000, 0x8000, 0x0001, 0x0155, 0x03ff, 0x83ff, 0x0400, 0x1234, 0x2bcd, 0x3c00, 0x8abc, 0x0200, 0x7bff, 0x0010];

function q4kOddScales(seed: number, shape: { nEmbd: number; ff: number; nExpert: number }): ExpertSlice {
  const slice = makeSlice(GGMLType.Q4_K, seed, shape);
  let i = 0;
  for (const m of [slice.gate, slice.up, slice.down])
    for (let o = 0; o < m.length; o += 144, i++) {
      // d: mostly small (the weights' own scale), dmin from the list; every pair of the list meets somewhere
      const d = F16_CASES[i % F16_CASES.length]!;
      const dmin = F16_CASES[Math.floor(i / F16_CASES.length) % F16_CASES.length]!;
      m[o] = d & 255;
      m[o + 1] = d >> 8;
      m[o + 2] = dmin & 255;
      m[o + 3] = dmin >> 8;
    }
  return slice;
}

for (const variant of VARIANTS) {
  test(`wasm fallback (${variant}): Q4_K with subnormal, zero, negative and normal f16 d and dmin, bit for bit with ggml-exact; FMA fused or emulated`, async () => {
    const shape = { nEmbd: 512, ff: 256, nExpert: 4 };
    const slice = q4kOddScales(23, shape);
    for (const emulateFma of [false, true]) {
      const fb = await WasmExpertFallback.create(await kernelOf(variant), slice, { numerics: 'llama', emulateFma });
      try {
        // 1 row: gate and up in one pass, down two rows at a time; 9: 1 to 4 tokens per expert
        for (const nTokens of [1, 9]) {
          const c = call(nTokens, 40 + nTokens, shape.nExpert, shape.nEmbd);
          const want = await ggmlLayerSums(slice, c.rows, c.ids, c.probs, c.nTokens, c.nUsed);
          const got = await run(fb, c);
          assert.ok(got.every(Number.isFinite), 'finite sums');
          assert.equal(differingBits(got, want), 0, `${variant}${emulateFma ? ', FMA emulated' : ''}, ${nTokens} rows`);
        }
      } finally {
        await fb.dispose();
      }
    }
  });
}

/**
 * F16 weights at the format's edges: every value of F16_CASES and 65504 spread over gate, up and down (weight-rows.as
 * f16Row converts eight at a time by moving the bits into place and scaling by 2^112, subnormals included; ±65504 in
 * down only), and one
 * down row of expert 1 with an inf and a NaN among finite neighbours (those eights go one by one). Bit for bit with
 * ggml-exact in llama numerics, NaN where it has NaN: the inf and the NaN reach only their row's output element.
 */
function f16Edges(seed: number, shape: { nEmbd: number; ff: number; nExpert: number }): ExpertSlice {
  const slice = makeSlice(GGMLType.F16, seed, shape);
  let i = 0;
  for (const m of [slice.gate, slice.up, slice.down]) {
    // ±65504 in down only: in gate or up it makes h overflow its f16 rounding before down, and every sum inf or NaN
    const cases = m === slice.down ? [...F16_CASES, 0x7bff, 0xfbff] : F16_CASES.filter((h) => h !== 0x7bff);
    for (let o = 0; o < m.length; o += 2 * 37, i++) {
      const h = cases[i % cases.length]!;
      m[o] = h & 255;
      m[o + 1] = h >> 8;
    }
  }
  const row = (1 * shape.nEmbd + 5) * shape.ff; // expert 1, down row 5
  for (const [at, h] of [
    [row + 3, 0x7c00],
    [row + 20, 0xfe01],
  ] as const) {
    slice.down[2 * at] = h & 255;
    slice.down[2 * at + 1] = h >> 8;
  }
  return slice;
}

function differingValues(a: Float32Array, b: Float32Array): number {
  let n = 0;
  for (let i = 0; i < a.length; i++) if (!(Object.is(a[i], b[i]) || (Number.isNaN(a[i]) && Number.isNaN(b[i])))) n++;
  return n;
}

for (const variant of VARIANTS) {
  test(`wasm fallback (${variant}): F16 weights at the format's edges (subnormal, ±0, ±65504, inf, NaN), bit for bit with ggml-exact; FMA fused or emulated`, async () => {
    const shape = { nEmbd: 256, ff: 96, nExpert: 4 };
    const slice = f16Edges(29, shape);
    for (const emulateFma of [false, true]) {
      const fb = await WasmExpertFallback.create(await kernelOf(variant), slice, { numerics: 'llama', emulateFma });
      try {
        for (const nTokens of [1, 9]) {
          const c = call(nTokens, 50 + nTokens, shape.nExpert, shape.nEmbd);
          const want = await ggmlLayerSums(slice, c.rows, c.ids, c.probs, c.nTokens, c.nUsed);
          const got = await run(fb, c);
          const nonFinite = want.filter((v) => !Number.isFinite(v)).length;
          assert.ok(nonFinite > 0 && nonFinite < want.length / 8, `the inf and NaN reach some outputs, not all (${nonFinite})`);
          assert.equal(differingValues(got, want), 0, `${variant}${emulateFma ? ', FMA emulated' : ''}, ${nTokens} rows`);
        }
      } finally {
        await fb.dispose();
      }
    }
  });
}

for (const variant of VARIANTS) {
  test(`wasm fallback (${variant}) computes only routed pairs: an unrouted expert poisoned with NaN changes nothing`, async () => {
    const kernel = kernelOf(variant);
    for (const type of [GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.Q8_0, GGMLType.F16, GGMLType.F32]) {
      const slice = makeSlice(type, 300 + type);
      const poisoned: ExpertSlice = { ...slice, gate: slice.gate.slice(), up: slice.up.slice(), down: slice.down.slice() };
      const bytes = sliceMatrixBytes(slice);
      const last = SHAPE.nExpert - 1;
      for (const m of ['gate', 'up', 'down'] as const) {
        const per = bytes[m] / SHAPE.nExpert;
        poisoned[m].fill(0xff, last * per, (last + 1) * per); // f16 / f32 0xff…: NaN scales and values
      }
      for (const numerics of ['exact', 'llama'] as Numerics[]) {
        const clean = await WasmExpertFallback.create(await kernel, slice, { numerics });
        const dirty = await WasmExpertFallback.create(await kernel, poisoned, { numerics });
        const c = call(64, 5, SHAPE.nExpert, SHAPE.nEmbd, last);
        // a pair with prob 0 on the poisoned expert: not routed, neither computed nor added
        c.ids[1] = last;
        c.probs[1] = 0;
        const want = await run(clean, c);
        const got = await run(dirty, c);
        assert.ok(
          got.every((v) => Number.isFinite(v)),
          `${GGMLType[type]} ${numerics}: NaN reached the result`,
        );
        assert.equal(differingBits(got, want), 0, `${GGMLType[type]} ${numerics}`);
      }
    }
  });
}

// compareLlama judges a variant slice too (issue 25): it finds the ties of the variant's h (biases added, then
// swiglu_oai or silu), so the bound of the silu grid (1e-9 beyond ties) holds for them, and ggml-exact's bits stay
// those of the coordinator. Rows of scale 4 and biases of about 2 (down 4) reach the clamps of swiglu_oai.
test('wasm fallback, llama numerics: variant slices judged by compareLlama with the silu grid’s bound', {
  skip: VERSUS_SIMD ? "the child: wasm-variant.test.ts's child holds this build to the simd build's bits on every variant" : false,
}, async (t) => {
  const variants: [string, ExpertVariant][] = [
    ['swiglu_oai + biases', GPT_OSS_VARIANT],
    ['silu + biases', { ...SILU_VARIANT, biases: true }],
  ];
  for (const [vname, variant] of variants) {
    for (const type of [GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.F16]) {
      const r = rng(300 + type);
      const { nEmbd, ff, nExpert } = SHAPE;
      const slice: ExpertSlice = {
        ...makeSlice(type, 200 + type),
        variant,
        biases: { gate: uniform(nExpert * ff, r, 2), up: uniform(nExpert * ff, r, 2), down: uniform(nExpert * nEmbd, r, 4) },
      };
      const experts = dequantizeExperts(slice);
      const asSilu = experts.map((e) => ({ ...e, variant: SILU_VARIANT }));
      const fb = await WasmExpertFallback.create(await kernel, slice, { numerics: 'llama' });
      try {
        for (const nTokens of ROWS) {
          const base = call(nTokens, 3000 * type + nTokens);
          const c = { ...base, rows: base.rows.map((v) => 4 * v) };
          const got = await run(fb, c);
          const where = `${vname} ${GGMLType[type]}, ${nTokens} rows`;
          const want = await ggmlLayerSums(slice, c.rows, c.ids, c.probs, c.nTokens, c.nUsed);
          assert.equal(differingBits(got, want), 0, `${where}: differs from ggml-exact`);
          const cmp = compareLlama(experts, c, got);
          t.diagnostic(`${where}: NMSE ${cmp.nmse.toExponential(2)}, beyond ${cmp.ties} ties ${cmp.beyondTies.toExponential(2)}`);
          assert.ok(cmp.beyondTies <= 1e-9, `${where}: NMSE beyond ties ${cmp.beyondTies}`);
          // The control: judged as a silu slice without biases, the same result is far off.
          const off = compareLlama(asSilu, c, got).beyondTies;
          assert.ok(off >= 1e-3, `${where}: within ${off} of the silu reference`);
        }
      } finally {
        await fb.dispose();
      }
    }
  }
  // The wasm kernel is ggml's bits, and ties decided the other way are rare between it and the float64 reference (the
  // WGSL float kernels meet them: test/gpu/variant-kernels.test.ts). So one is made: the reference with one element
  // of a gpt-oss h that sits at a Q8_0 tie (the variant's h: biases added, swiglu_oai) rounded one step the other way.
  // compareLlama must allow it, and only because it found that tie (without margins it does not).
  const slice: ExpertSlice = { ...makeSlice(GGMLType.Q8_0, 41), variant: GPT_OSS_VARIANT };
  const r = rng(42);
  const { nEmbd, ff, nExpert } = SHAPE;
  slice.biases = { gate: uniform(nExpert * ff, r, 2), up: uniform(nExpert * ff, r, 2), down: uniform(nExpert * nEmbd, r, 4) };
  const experts = dequantizeExperts(slice);
  const base = call(16, 43);
  const c = { ...base, rows: base.rows.map((v) => 4 * v) };
  const tie = findQ8Tie(experts, c);
  assert.ok(tie, 'no element of h at a Q8_0 tie in this call: pick another seed');
  const got = Float32Array.from(referenceCall(experts, c, 'llama'));
  const w = experts[c.ids[tie.pair]!]!;
  const t0 = Math.floor(tie.pair / c.nUsed);
  for (let row = 0; row < nEmbd; row++) got[t0 * nEmbd + row]! += c.probs[tie.pair]! * tie.d * w.down[row * ff + tie.i]!;
  const cmp = compareLlama(experts, c, got);
  const blind = compareLlama(experts, c, got, { quant: 0, half: 0 });
  t.diagnostic(`one tie flipped: NMSE ${cmp.nmse.toExponential(2)}, beyond ${cmp.ties} ties ${cmp.beyondTies.toExponential(2)}`);
  assert.ok(cmp.beyondTies <= 1e-9, `a flipped tie of the variant's h is not allowed: beyond ties ${cmp.beyondTies}`);
  assert.ok(blind.beyondTies > 1e-9, `the flip is within the bound anyway (${blind.beyondTies}): the check cannot tell`);
});

/**
 * The first element of h (pair, element) at a Q8_0 rounding tie, with the block's step d: h computed as the
 * reference does (rounded rows, float64 sums, biases, the variant's gated unit, stored as f32).
 */
function findQ8Tie(experts: ReturnType<typeof dequantizeExperts>, c: RoutedCall): { pair: number; i: number; d: number } | null {
  const f = Math.fround;
  for (let p = 0; p < c.nTokens * c.nUsed; p++) {
    const w = experts[c.ids[p]!]!;
    const t0 = Math.floor(p / c.nUsed);
    const x = roundActivations(vecDotType(w.ggmlTypes!.gate), c.rows.subarray(t0 * w.nEmbd, (t0 + 1) * w.nEmbd));
    const h = new Float32Array(w.ff);
    for (let row = 0; row < w.ff; row++) {
      let g = w.biases!.gate[row]!;
      let u = w.biases!.up[row]!;
      for (let i = 0; i < w.nEmbd; i++) {
        g += w.gate[row * w.nEmbd + i]! * x[i]!;
        u += w.up[row * w.nEmbd + i]! * x[i]!;
      }
      h[row] = gatedUnit(w.variant!, g, u);
    }
    for (let b = 0; b < w.ff; b += 32) {
      let amax = 0;
      for (let i = b; i < b + 32; i++) amax = Math.max(amax, Math.abs(h[i]!));
      const id = f(127 / amax);
      const d = f16ToF32(f32ToF16(f(amax / 127)));
      for (let i = b; i < b + 32; i++) {
        const v = Math.abs(f(h[i]! * id));
        if (Math.abs(v - Math.floor(v) - 0.5) < 1e-4) return { pair: p, i, d };
      }
    }
  }
  return null;
}

test('wasm fallback memory is about the slice: ≤ 1.1 × slice + 1 MiB loaded, + a bounded per-call scratch', async (t) => {
  const shape = { nEmbd: 1024, ff: 512, nExpert: 8 };
  const slice = makeSlice(GGMLType.Q4_K, 9, shape);
  const sliceBytes = slice.gate.length + slice.up.length + slice.down.length;
  const fb = await WasmExpertFallback.create(await kernel, slice, { numerics: 'llama' });
  const loaded = fb.memory();
  assert.equal(loaded.sliceBytes, sliceBytes);
  t.diagnostic(`Q4_K slice ${sliceBytes} bytes: wasm memory ${loaded.wasmBytes} after loading`);
  assert.ok(loaded.wasmBytes <= sliceBytes * 1.1 + 2 ** 20, `after loading: ${loaded.wasmBytes} bytes for a ${sliceBytes}-byte slice`);
  // the ORT dense fallback kept 4 bytes per weight
  assert.ok(loaded.wasmBytes < (3 * shape.nExpert * shape.nEmbd * shape.ff * 4) / 6);
  const c = call(64, 3, shape.nExpert, shape.nEmbd);
  await run(fb, c);
  const after = fb.memory().wasmBytes;
  t.diagnostic(`after a 64-row call (passes of 32 tokens): ${after} bytes`);
  assert.ok(after <= sliceBytes * 1.1 + 4 * 2 ** 20, `after a call: ${after} bytes`);
  // a larger call reuses the same bounded scratch
  await run(fb, call(200, 4, shape.nExpert, shape.nEmbd));
  assert.equal(fb.memory().wasmBytes, after);
});

test('wasm fallback: a frame’s top-k above 8 takes fewer tokens per pass, not more scratch than the budget counts', async () => {
  const shape = { nEmbd: 256, ff: 256, nExpert: 16 };
  const slice = makeSlice(GGMLType.Q4_K, 13, shape);
  const fb = await WasmExpertFallback.create(await kernel, slice, { numerics: 'llama' });
  const top8 = call(64, 8, shape.nExpert, shape.nEmbd, -1, 8);
  await run(fb, top8);
  const after8 = fb.memory().wasmBytes;
  const top16 = call(64, 16, shape.nExpert, shape.nEmbd, -1, 16);
  const got = await run(fb, top16);
  assert.equal(fb.memory().wasmBytes, after8, 'top-16 in the scratch of top-8');
  assert.ok(after8 <= kernelWasmBytesFor(slice), `${after8} bytes within the budget ${kernelWasmBytesFor(slice)}`);
  // the same bits as passes of one token each
  const single = await WasmExpertFallback.create(await kernel, slice, { numerics: 'llama', maxTokensPerPass: 1 });
  assert.deepEqual(new Uint32Array((await run(single, top16)).buffer), new Uint32Array(got.buffer));
});

test('wasm fallback: passes of any size and every build give the same bits', async () => {
  const slice = makeSlice(GGMLType.Q5_K, 21);
  const c = call(37, 8);
  const outs: Float32Array[] = [];
  for (const variant of VARIANTS) {
    for (const maxTokensPerPass of [1, 7, 64]) {
      const fb = await WasmExpertFallback.create(await kernelOf(variant), slice, { numerics: 'llama', maxTokensPerPass });
      outs.push(await run(fb, c));
    }
  }
  for (const out of outs.slice(1)) assert.equal(differingBits(outs[0]!, out), 0);
});

test('wasm fallback: the touch-ahead on, off or measured gives the same bits; measured, it keeps the faster', async () => {
  const slice = makeSlice(GGMLType.Q4_K, 17);
  const c = call(9, 8);
  for (const variant of VARIANTS) {
    const k = await kernelOf(variant);
    const on = await WasmExpertFallback.create(k, slice, { numerics: 'llama', touchAhead: true });
    const off = await WasmExpertFallback.create(k, slice, { numerics: 'llama', touchAhead: false });
    const measured = await WasmExpertFallback.create(k, slice, { numerics: 'llama' });
    assert.deepEqual(
      [on.touch, off.touch],
      [
        { on: true, onMs: null, offMs: null },
        { on: false, onMs: null, offMs: null },
      ],
    );
    const { onMs, offMs } = measured.touch;
    assert.ok(onMs !== null && offMs !== null && onMs > 0 && offMs > 0, `${variant}: both measured (${onMs}, ${offMs})`);
    assert.equal(measured.touch.on, !(offMs < onMs), `${variant}: the faster kept, a tie on`);
    const want = await run(on, c);
    assert.equal(differingBits(want, await run(off, c)), 0, `${variant}: off`);
    assert.equal(differingBits(want, await run(measured, c)), 0, `${variant}: measured`);
  }
  const bad = WasmExpertFallback.create(await kernel, slice, { touchAhead: 'sometimes' as 'measure' });
  await assert.rejects(bad, (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'BAD_OPTION');
});

test('wasm fallback refuses what ExpertRuntime refuses, with the same codes', async () => {
  const k = await kernel;
  const slice = makeSlice(GGMLType.Q8_0, 1);
  const code = (c: string) => (e: unknown) => e instanceof ExpertRuntimeError && e.code === c;
  await assert.rejects(WasmExpertFallback.create(k, slice, { numerics: 'fast' as Numerics }), code('BAD_OPTION'));
  await assert.rejects(WasmExpertFallback.create(k, slice, { maxTokensPerPass: 0 }), code('BAD_OPTION'));
  await assert.rejects(
    WasmExpertFallback.create(k, { ...slice, types: { ...slice.types, down: GGMLType.TQ1_0 } }),
    code('UNSUPPORTED_TYPE'),
  );
  await assert.rejects(WasmExpertFallback.create(k, { ...slice, up: slice.up.subarray(1) }), code('BAD_SLICE_BYTES'));
  await assert.rejects(WasmExpertFallback.create(k, { ...slice, nEmbd: 250 }), code('BAD_SHAPE'));
  const fb = await WasmExpertFallback.create(k, slice);
  const c = call(2, 1);
  await assert.rejects(fb.compute(c.rows.subarray(1), c.ids, c.probs, 2, N_USED), code('BAD_INPUT'));
  await assert.rejects(fb.compute(c.rows, Int32Array.of(0, 1, 2, 4), c.probs, 2, N_USED), code('ID_OUT_OF_RANGE'));
  await assert.rejects(fb.compute(c.rows, c.ids, c.probs, 2, 0), code('BAD_SHAPE'));
  assert.equal((await fb.compute(new Float32Array(0), new Int32Array(0), new Float32Array(0), 0, N_USED)).length, 0);
  await fb.dispose();
  await fb.dispose();
  await assert.rejects(run(fb, c), code('DISPOSED'));
});
