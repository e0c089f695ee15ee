/**
 * The wasm fallback computes gpt-oss's expert variant (protocol/variant.ts: swiglu_oai with α 1.702, limit 7, and
 * expert biases), and silu with biases: random slices (F32, Q8_0, Q4_K; 4 experts of 512 ↔ 256; top-2..4; 1 and 5
 * tokens) with biases big enough to matter and rows scaled so the clamps are exercised (asserted), against
 *   - the float64 reference, referenceCall(…, 'llama'): NMSE ≤ 1e-6 (compareLlama's tie analysis knows only silu; a
 *     tie of h that rounds the other way in down's 8-bit rounding moves the output by ~1e-9 … 1e-6, llama-ties.ts),
 *     and referenceCall(…, 'exact') in 'exact' numerics: ≤ 1e-9 (f32 sums only);
 *   - bit for bit, an oracle in this file that follows ggml's CPU graph (build_moe_ffn): gate and up by ggml's own
 *     vec_dot, then ggml_add_id of the biases (f32), ggml_swiglu_oai's f32 steps (or ggml_vec_swiglu_f32), down by
 *     ggml's vec_dot, ggml_add_id of the down bias, ggml_mul by the router weight, the adds in k order.
 * The oracle takes its vec_dot results from harness/ggml-exact.ts (the model the silu kernel is tested bit for bit
 * against) through its exported per-expert functions (ggmlHidden, ggmlExpertOut) fed so the unit between them is
 * exact: a gate of 128 (silu(128) is exactly 128 in f32) times up / 128 (see matrixDots, downDots).
 *
 * Negative controls: the reference without the biases, or with silu, is far off (so the comparisons can fail).
 * Then the errors: biases of the wrong length (BAD_SLICE_BIASES), a variant no worker computes (UNSUPPORTED_VARIANT).
 *
 * Both builds of the kernel run it, as in wasm-fallback.test.ts ('relaxed-simd' in a child Node where this one does
 * not validate relaxed SIMD): the relaxed build's one-token Q4_K paths write the down rows two at a time.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { quantize } from '../../gguf/quantize.ts';
import type { Numerics } from '../../protocol/numerics.ts';
import { GPT_OSS_VARIANT, SILU_VARIANT, VARIANT_FEATURES, type ExpertActivation, type ExpertVariant } from '../../protocol/variant.ts';
import { ExpertRuntimeError } from '../../shaders/errors.ts';
import { dequantizeExperts, nmse, referenceCall, type RoutedCall } from '../../shaders/reference/expert-call.ts';
import { swigluOaiF32 } from '../../shaders/reference/expert-ffn.ts';
import { sliceMatrixBytes, type ExpertSlice, type SliceBiases } from '../../shaders/slice.ts';
import { nodeExpertKernel } from '../../shaders/wasm/build.ts';
import { KERNEL_VARIANTS, relaxedSimdSupported, type ExpertKernelVariant } from '../../shaders/wasm/features.ts';
import { WASM_VARIANT_FEATURES, WasmExpertFallback } from '../../shaders/wasm/fallback.ts';
import { ggmlExpertOut, ggmlHidden, ggmlSwiglu, type ExactExperts } from '../../harness/ggml-exact.ts';
import { mulberry32 as rng } from '../../shaders/random.ts';

const f32 = Math.fround;
const uniform = (n: number, r: () => number, scale: number): Float32Array => new Float32Array(n).map(() => (r() * 2 - 1) * scale);

/** nEmbd > ff: the oracle's down needs a column beyond ff's (downDots). */
const SHAPE = { nEmbd: 512, ff: 256, nExpert: 4 };
const TYPES = [GGMLType.F32, GGMLType.Q8_0, GGMLType.Q4_K];
/** Rows in ±ROW_SCALE: gate and up dots of a few units (σ ≈ ROW_SCALE / 3), so ~15% pass the limit 7 either way. */
const ROW_SCALE = 14;
const SILU_WITH_BIASES: ExpertVariant = { ...SILU_VARIANT, biases: true };

function makeSlice(type: GGMLType, seed: number, variant: ExpertVariant): ExpertSlice {
  const { nEmbd, ff, nExpert } = SHAPE;
  const r = rng(seed);
  const n = nExpert * nEmbd * ff;
  const slice: ExpertSlice = {
    nEmbd,
    ff,
    nExpert,
    types: { gate: type, up: type, down: type },
    gate: quantize(type, uniform(n, r, 1 / Math.sqrt(nEmbd))),
    up: quantize(type, uniform(n, r, 1 / Math.sqrt(nEmbd))),
    down: quantize(type, uniform(n, r, 1 / Math.sqrt(ff))),
    variant,
  };
  if (variant.biases) {
    slice.biases = { gate: uniform(nExpert * ff, r, 2), up: uniform(nExpert * ff, r, 2), down: uniform(nExpert * nEmbd, r, 4) };
  }
  return slice;
}

/** Rows in ±ROW_SCALE with element 0 exactly 1 (the oracle's constant column), nUsed distinct experts each, probs in [0.1, 0.6). */
function call(nTokens: number, nUsed: number, seed: number): RoutedCall {
  const { nEmbd, nExpert } = SHAPE;
  const r = rng(seed);
  const rows = uniform(nTokens * nEmbd, r, ROW_SCALE);
  for (let t = 0; t < nTokens; t++) rows[t * nEmbd] = 1;
  const ids = new Int32Array(nTokens * nUsed);
  for (let t = 0; t < nTokens; t++) {
    const start = Math.floor(r() * nExpert);
    for (let k = 0; k < nUsed; k++) ids[t * nUsed + k] = (start + k) % nExpert;
  }
  const probs = new Float32Array(nTokens * nUsed).map(() => 0.1 + r() * 0.5);
  return { rows, ids, probs, nTokens, nUsed };
}

// ---------------------------------------------------------------------------------------------------------------
// The oracle.

const GATE_128 = 128;

/** An F32 matrix [ff × nEmbd] (bytes) whose row r is 1 at column col(r), 0 elsewhere, times `scale`. */
function selector(ff: number, nEmbd: number, col: (r: number) => number, scale: number): Uint8Array {
  const m = new Float32Array(ff * nEmbd);
  for (let r = 0; r < ff; r++) m[r * nEmbd + col(r)] = scale;
  return new Uint8Array(m.buffer);
}

class GgmlOracle {
  private readonly per: Record<'gate' | 'up' | 'down', number>;
  /** gate rows: 128 · x[0] = 128 (every row has x[0] = 1). */
  private readonly gate128: Uint8Array;
  /** up rows for downDots: row r picks x'[r + 1]. */
  private readonly pick: Uint8Array;

  constructor(
    private readonly slice: ExpertSlice,
    private readonly variant: ExpertVariant,
    private readonly biases: SliceBiases | undefined,
  ) {
    const bytes = sliceMatrixBytes(slice);
    this.per = { gate: bytes.gate / slice.nExpert, up: bytes.up / slice.nExpert, down: bytes.down / slice.nExpert };
    this.gate128 = selector(slice.ff, slice.nEmbd, () => 0, GATE_128);
    this.pick = selector(slice.ff, slice.nEmbd, (r) => r + 1, 1);
  }

  private bytesOf(m: 'gate' | 'up' | 'down', e: number): Uint8Array {
    return this.slice[m].subarray(e * this.per[m], (e + 1) * this.per[m]);
  }

  /**
   * ggml's vec_dot of each row of matrix m (gate or up) of expert e with x converted to m's vec_dot type: ggml-exact's
   * h = swiglu(gate·x, up·x) with its gate 128 (silu(128) = 128 exactly) and m in up's place is 128 · (m·x), exactly.
   */
  matrixDots(m: 'gate' | 'up', e: number, x: Float32Array): Float32Array {
    const { nEmbd, ff, types } = this.slice;
    const experts: ExactExperts = {
      types: { gate: GGMLType.F32, up: types[m], down: types.down },
      nEmbd,
      ff,
      gate: this.gate128,
      up: this.bytesOf(m, e),
      down: this.bytesOf('down', e),
    };
    return ggmlHidden(experts, 0, x).map((v) => v / GATE_128);
  }

  /** ggml's vec_dot of each down row of expert e with h converted to down's vec_dot type: h fed back exactly as 128 · (h / 128). */
  downDots(e: number, h: Float32Array): Float32Array {
    const { nEmbd, ff, types } = this.slice;
    const x = new Float32Array(nEmbd);
    x[0] = 1;
    for (let r = 0; r < ff; r++) x[r + 1] = h[r]! / GATE_128;
    const experts: ExactExperts = {
      types: { gate: GGMLType.F32, up: GGMLType.F32, down: types.down },
      nEmbd,
      ff,
      gate: this.gate128,
      up: this.pick,
      down: this.bytesOf('down', e),
    };
    return ggmlExpertOut(experts, 0, x);
  }

  /** ggml_swiglu_oai's f32 steps (ggml_compute_forward_swiglu_oai_f32), expf the correctly rounded f32 of exp. */
  static swigluOai(g: number, u: number, alpha: number, limit: number): number {
    const x = Math.min(g, limit);
    const y = Math.min(Math.max(u, -limit), limit);
    const out = f32(x / f32(1 + f32(Math.exp(f32(alpha * -x)))));
    return f32(out * f32(y + 1));
  }

  /** Gate and up plus their biases (f32) of every (token, k) pair, for the clamp checks, and the call's result. */
  run(c: RoutedCall): { out: Float32Array; gates: number[]; ups: number[] } {
    const { nEmbd, ff } = this.slice;
    const { activation, alpha, limit } = this.variant;
    const b = this.biases;
    const out = new Float32Array(c.nTokens * nEmbd);
    const gates: number[] = [];
    const ups: number[] = [];
    for (let t = 0; t < c.nTokens; t++) {
      const x = c.rows.subarray(t * nEmbd, (t + 1) * nEmbd);
      const acc = out.subarray(t * nEmbd, (t + 1) * nEmbd);
      let first = true;
      for (let k = 0; k < c.nUsed; k++) {
        const p = c.probs[t * c.nUsed + k]!;
        if (p === 0) continue;
        const e = c.ids[t * c.nUsed + k]!;
        const g = this.matrixDots('gate', e, x);
        const u = this.matrixDots('up', e, x);
        const h = new Float32Array(ff);
        for (let r = 0; r < ff; r++) {
          const gb = b ? f32(g[r]! + b.gate[e * ff + r]!) : g[r]!;
          const ub = b ? f32(u[r]! + b.up[e * ff + r]!) : u[r]!;
          gates.push(gb);
          ups.push(ub);
          h[r] = activation === 'swiglu_oai' ? GgmlOracle.swigluOai(gb, ub, alpha, limit) : ggmlSwiglu(gb, ub);
        }
        const d = this.downDots(e, h);
        for (let i = 0; i < nEmbd; i++) {
          const y = b ? f32(d[i]! + b.down[e * nEmbd + i]!) : d[i]!;
          const w = f32(y * p);
          acc[i] = first ? w : f32(acc[i]! + w);
        }
        first = false;
      }
    }
    return { out, gates, ups };
  }
}

// ---------------------------------------------------------------------------------------------------------------

const run = (fb: WasmExpertFallback, c: RoutedCall): Promise<Float32Array> => fb.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed);

function differingBits(a: Float32Array, b: Float32Array): number {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let n = 0;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) n++;
  return n;
}

const FORCED = process.env.EXPERTSWARM_WASM_VARIANT as ExpertKernelVariant | undefined;
const BUILDS: readonly ExpertKernelVariant[] = FORCED ? [FORCED] : KERNEL_VARIANTS.filter((v) => v === 'simd' || relaxedSimdSupported());

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

test('the oracle: silu(128) is 128 in ggml f32, and its swiglu_oai steps are the reference’s swigluOaiF32', () => {
  for (const v of [1, -3.25, 0.1, 1e-3, 77.5]) assert.equal(ggmlSwiglu(GATE_128, f32(v)), f32(GATE_128 * f32(v)));
  const r = rng(5);
  const { alpha, limit } = GPT_OSS_VARIANT;
  for (let i = 0; i < 10_000; i++) {
    const g = f32((r() * 2 - 1) * 12);
    const u = f32((r() * 2 - 1) * 12);
    assert.equal(GgmlOracle.swigluOai(g, u, alpha, limit), swigluOaiF32(g, u, alpha, limit), `g ${g} u ${u}`);
  }
});

test('the wasm fallback lists every variant feature', () => {
  assert.deepEqual([...WASM_VARIANT_FEATURES].sort(), [...VARIANT_FEATURES].sort());
});

const CASES: { variant: ExpertVariant; name: string }[] = [
  { variant: GPT_OSS_VARIANT, name: 'swiglu_oai + biases' },
  { variant: { ...GPT_OSS_VARIANT, biases: false }, name: 'swiglu_oai' },
  { variant: SILU_WITH_BIASES, name: 'silu + biases' },
];

for (const build of BUILDS)
  for (const type of TYPES) {
    const tn = GGMLType[type];
    test(`wasm fallback (${build}), ${tn}: the variants bit for bit with ggml's order, near the reference`, {
      timeout: 600_000,
    }, async (t) => {
      const kernel = await nodeExpertKernel(build);
      for (const [ci, { variant, name }] of CASES.entries()) {
        const slice = makeSlice(type, 40 + 7 * type + ci, variant);
        const experts = dequantizeExperts(slice);
        const oracle = new GgmlOracle(slice, variant, slice.biases);
        const llama = await WasmExpertFallback.create(kernel, slice, { numerics: 'llama', touchAhead: false });
        const exact = await WasmExpertFallback.create(kernel, slice, { touchAhead: false });
        let clamped = { gateHigh: 0, upHigh: 0, upLow: 0, values: 0 };
        for (const [nTokens, nUsed] of [
          [1, 2],
          [1, 4],
          [5, 3],
          [5, 4],
        ] as const) {
          const c = call(nTokens, nUsed, 1000 * type + 10 * nTokens + nUsed + 100 * ci);
          const where = `${tn} ${name}, ${nTokens} rows top-${nUsed}`;
          const got = await run(llama, c);
          const want = oracle.run(c);
          const diff = differingBits(got, want.out);
          const e = nmse(got, referenceCall(experts, c, 'llama'));
          const ex = nmse(await run(exact, c), referenceCall(experts, c, 'exact'));
          t.diagnostic(
            `${where}: ${diff} of ${got.length} values differ from the oracle; llama NMSE ${e.toExponential(2)}, exact ${ex.toExponential(2)}`,
          );
          assert.equal(diff, 0, `${where}: ${diff} values differ from ggml's order`);
          assert.ok(e <= 1e-6, `${where}: NMSE ${e} against referenceCall(…, 'llama')`);
          assert.ok(ex <= 1e-9, `${where}: 'exact' NMSE ${ex}`);
          clamped = {
            gateHigh: clamped.gateHigh + want.gates.filter((g) => g > 7).length,
            upHigh: clamped.upHigh + want.ups.filter((u) => u > 7).length,
            upLow: clamped.upLow + want.ups.filter((u) => u < -7).length,
            values: clamped.values + want.gates.length,
          };
        }
        t.diagnostic(
          `${tn} ${name}: of ${clamped.values} gate/up values, gate > 7: ${clamped.gateHigh}, up > 7: ${clamped.upHigh}, up < −7: ${clamped.upLow}`,
        );
        for (const [k, n] of Object.entries(clamped)) assert.ok(n > clamped.values / 50, `${tn} ${name}: too few ${k} (${n})`);
      }
    });
  }

test('negative controls: without the biases, or with silu, the reference and the oracle are far off', async () => {
  const kernel = await nodeExpertKernel(BUILDS[0]);
  for (const type of TYPES) {
    const slice = makeSlice(type, 90 + type, GPT_OSS_VARIANT);
    const fb = await WasmExpertFallback.create(kernel, slice, { numerics: 'llama', touchAhead: false });
    const c = call(5, 3, 91 + type);
    const got = await run(fb, c);
    const b = slice.biases!;
    const zero: SliceBiases = {
      gate: new Float32Array(b.gate.length),
      up: new Float32Array(b.up.length),
      down: new Float32Array(b.down.length),
    };
    const controls: [string, ExpertSlice][] = [
      ['biases zeroed', { ...slice, biases: zero }],
      ['silu instead', { ...slice, variant: SILU_WITH_BIASES }],
    ];
    for (const [what, wrong] of controls) {
      const e = nmse(got, referenceCall(dequantizeExperts(wrong), c, 'llama'));
      assert.ok(e > 1e-3, `${GGMLType[type]} ${what}: NMSE ${e} — the comparison cannot tell`);
      const o = new GgmlOracle(wrong, wrong.variant!, wrong.biases).run(c).out;
      assert.ok(differingBits(got, o) > got.length / 2, `${GGMLType[type]} ${what}: the oracle cannot tell`);
    }
  }
});

test('wasm fallback refuses biases that do not fit the variant, and variants it does not compute', async () => {
  const kernel = await nodeExpertKernel(BUILDS[0]);
  const slice = makeSlice(GGMLType.Q8_0, 3, GPT_OSS_VARIANT);
  const b = slice.biases!;
  const code = (c: string, bias?: string) => (e: unknown) =>
    e instanceof ExpertRuntimeError && e.code === c && (bias === undefined || (e.details as { bias?: string }).bias === bias);
  const bad: [string, Partial<ExpertSlice>, string, string?][] = [
    ['gate one short', { biases: { ...b, gate: b.gate.subarray(1) } }, 'BAD_SLICE_BIASES', 'gate'],
    ['up [nEmbd] per expert', { biases: { ...b, up: new Float32Array(SHAPE.nExpert * SHAPE.nEmbd) } }, 'BAD_SLICE_BIASES', 'up'],
    ['down [ff] per expert', { biases: { ...b, down: new Float32Array(SHAPE.nExpert * SHAPE.ff) } }, 'BAD_SLICE_BIASES', 'down'],
    ['none for a variant with biases', { biases: undefined }, 'BAD_SLICE_BIASES', 'gate'],
    ['biases for a variant without', { variant: { ...GPT_OSS_VARIANT, biases: false } }, 'BAD_SLICE_BIASES', 'gate'],
    ['an activation no one computes', { variant: { ...GPT_OSS_VARIANT, activation: 'geglu' as ExpertActivation } }, 'UNSUPPORTED_VARIANT'],
  ];
  for (const [what, change, c, bias] of bad) {
    await assert.rejects(WasmExpertFallback.create(kernel, { ...slice, ...change }, { touchAhead: false }), code(c, bias), what);
  }
});

test('wasm fallback: a silu slice that names its variant gives the bits of one that does not', async () => {
  const kernel = await nodeExpertKernel(BUILDS[0]);
  const slice = makeSlice(GGMLType.Q4_K, 11, SILU_VARIANT);
  const { variant: _, ...unnamed } = slice;
  const c = call(5, 4, 12);
  for (const numerics of ['llama', 'exact'] as Numerics[]) {
    const a = await run(await WasmExpertFallback.create(kernel, slice, { numerics, touchAhead: false }), c);
    const b = await run(await WasmExpertFallback.create(kernel, unnamed, { numerics, touchAhead: false }), c);
    assert.equal(differingBits(a, b), 0, numerics);
  }
});
