/**
 * The wasm fallback computes every expert variant (protocol/variant.ts): gpt-oss's (swiglu_oai with α 1.702, limit 7,
 * and expert biases), swiglu_clamp (DeepSeek-V4), silu_limit (Step-3.5, Ling 3) and gelu (Grok), each with and
 * without biases and per-expert scales, and silu with biases or scales: random slices (F32, Q8_0, Q4_K; 4 experts of
 * 512 ↔ 256; top-2..4; 1 and 5 tokens) with biases and scales big enough to matter and rows scaled so the clamps (and
 * gelu's ±10 ends) are exercised (asserted), against
 *   - the float64 reference, referenceCall(…, 'llama'): NMSE ≤ 1e-6 (compareLlama's tie analysis knows only silu; a
 *     tie of h that rounds the other way in down's 8-bit rounding moves the output by ~1e-9 … 1e-6, llama-ties.ts;
 *     gelu: ≤ 1e-5, as ggml reads it from an f16 table at g rounded to f16, two roundings of 2^-11 relative that the
 *     reference's tanh formula does not make), and referenceCall(…, 'exact') in 'exact' numerics: ≤ 1e-9 (f32 sums);
 *   - bit for bit, an oracle in this file that follows ggml's CPU graph (build_moe_ffn): gate and up by ggml's own
 *     vec_dot, times their scales (ggml_mul, f32), then ggml_add_id of the biases (f32), the gated unit in ggml's f32
 *     steps (ggml_swiglu_oai, swigluClampF32, siluLimitF32 with ggml_v_silu, ggml-gelu.ts ggmlGeglu, or
 *     ggml_vec_swiglu_f32), down by ggml's vec_dot, its scale, ggml_add_id of the down bias, ggml_mul by the router
 *     weight, the adds in k order.
 * The oracle takes its vec_dot results from harness/ggml-exact.ts (the model the silu kernel is tested bit for bit
 * against) through its exported per-expert functions (ggmlHidden, ggmlExpertOut) fed so the unit between them is
 * exact: a gate of 128 (silu(128) is exactly 128 in f32) times up / 128 (see matrixDots, downDots).
 *
 * Negative controls: the reference without the biases, without the scales, or with silu, is far off (so the comparisons
 * can fail). ggml's GELU table as create() hands it to the kernel gives ggmlGelu's value for all 65,536 f16 inputs.
 * Then the errors: biases or scales of the wrong length (BAD_SLICE_BIASES), a variant no worker computes
 * (UNSUPPORTED_VARIANT).
 *
 * Both builds of the kernel run it, as in wasm-fallback.test.ts ('relaxed-simd' in a child Node where this one does
 * not validate relaxed SIMD): the relaxed build's one-token Q4_K paths write the down rows two at a time. The child
 * holds the relaxed build to the simd build's bits on every case (VERSUS_SIMD), which this process holds to ggml's.
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { quantize } from '../../gguf/quantize.ts';
import type { Numerics } from '../../protocol/numerics.ts';
import { f16ToF32 } from '../../gguf/half.ts';
import { GPT_OSS_VARIANT, SILU_VARIANT, VARIANT_FEATURES, type ExpertActivation, type ExpertVariant } from '../../protocol/variant.ts';
import { ExpertRuntimeError } from '../../shaders/errors.ts';
import { dequantizeExperts, nmse, referenceCall, type RoutedCall } from '../../shaders/reference/expert-call.ts';
import { siluLimitF32, swigluClampF32, swigluOaiF32 } from '../../shaders/reference/expert-ffn.ts';
import { ggmlGeglu, ggmlGelu } from '../../shaders/reference/ggml-gelu.ts';
import { sliceMatrixBytes, type ExpertSlice, type SliceBiases, type SliceScales } from '../../shaders/slice.ts';
import { nodeExpertKernel } from '../../shaders/wasm/build.ts';
import { KERNEL_VARIANTS, relaxedSimdSupported, type ExpertKernelVariant } from '../../shaders/wasm/features.ts';
import { WASM_VARIANT_FEATURES, WasmExpertFallback } from '../../shaders/wasm/fallback.ts';
import { ggmlExpertOut, ggmlExpf, ggmlHidden, ggmlSwiglu, type ExactExperts } from '../../harness/ggml-exact.ts';
import { mulberry32 as rng } from '../../shaders/random.ts';

const f32 = Math.fround;
const uniform = (n: number, r: () => number, scale: number): Float32Array => new Float32Array(n).map(() => (r() * 2 - 1) * scale);

/** nEmbd > ff: the oracle's down needs a column beyond ff's (downDots). */
const SHAPE = { nEmbd: 512, ff: 256, nExpert: 4 };
const TYPES = [GGMLType.F32, GGMLType.Q8_0, GGMLType.Q4_K];
/** Rows in ±ROW_SCALE: gate and up dots of a few units (σ ≈ ROW_SCALE / 3), so ~15% pass the limit 7 either way. */
const ROW_SCALE = 14;
const SILU_WITH_BIASES: ExpertVariant = { ...SILU_VARIANT, biases: true };
const SWIGLU_CLAMP: ExpertVariant = { activation: 'swiglu_clamp', alpha: 0, limit: 7, biases: false };
const SILU_LIMIT: ExpertVariant = { activation: 'silu_limit', alpha: 0, limit: 6, biases: false };
const GELU: ExpertVariant = { activation: 'gelu', alpha: 0, limit: 0, biases: false };
/** Per-expert scales in [SCALE_LOW, SCALE_LOW + SCALE_SPAN): ignoring them is far off, and the clamps are still reached. */
const SCALE_LOW = 0.6;
const SCALE_SPAN = 1.4;

/** ggml_silu as the build's SIMD silu computes it (ggml_v_silu: the silu of ggml_vec_swiglu_f32). */
const ggmlSilu = (x: number): number => f32(f32(x) / f32(1 + ggmlExpf(f32(0 - x))));

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
  if (variant.scales) {
    const scale = (): Float32Array => new Float32Array(nExpert).map(() => SCALE_LOW + r() * SCALE_SPAN);
    slice.scales = { gate: scale(), up: scale(), down: scale() };
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
    private readonly scales?: SliceScales,
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

  /** ggml's gated unit of the variant's activation, in its f32 steps. */
  unit(g: number, u: number): number {
    const { activation, alpha, limit } = this.variant;
    switch (activation) {
      case 'swiglu_oai':
        return GgmlOracle.swigluOai(g, u, alpha, limit);
      case 'swiglu_clamp':
        return swigluClampF32(g, u, limit);
      case 'silu_limit':
        return siluLimitF32(g, u, limit, ggmlSilu);
      case 'gelu':
        return ggmlGeglu(g, u);
      default:
        return ggmlSwiglu(g, u);
    }
  }

  /** Gate and up times their scales plus their biases (f32) of every (token, k) pair, for the clamp checks, and the call's result. */
  run(c: RoutedCall): { out: Float32Array; gates: number[]; ups: number[] } {
    const { nEmbd, ff } = this.slice;
    const b = this.biases;
    const s = this.scales;
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
        if (s) {
          for (let r = 0; r < ff; r++) {
            g[r] = f32(g[r]! * s.gate[e]!);
            u[r] = f32(u[r]! * s.up[e]!);
          }
        }
        const h = new Float32Array(ff);
        for (let r = 0; r < ff; r++) {
          const gb = b ? f32(g[r]! + b.gate[e * ff + r]!) : g[r]!;
          const ub = b ? f32(u[r]! + b.up[e * ff + r]!) : u[r]!;
          gates.push(gb);
          ups.push(ub);
          h[r] = this.unit(gb, ub);
        }
        const d = this.downDots(e, h);
        for (let i = 0; i < nEmbd; i++) {
          const ds = s ? f32(d[i]! * s.down[e]!) : d[i]!;
          const y = b ? f32(ds + b.down[e * nEmbd + i]!) : ds;
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

/**
 * The child that runs this file for the relaxed-simd build (where this Node does not validate relaxed SIMD) holds it to
 * the simd build's bits, case by case (the same seeds), in both numerics; the parent holds the simd build to ggml's
 * order and the reference on those cases, so the relaxed build answers to them too. The child thus computes neither
 * the oracle nor the references again (JS, most of this file's time), and skips the negative controls, which are about
 * the comparisons (the references and the oracle) and not the build. `npm run test:kernels:full`
 * (EXPERTSWARM_KERNELS=full) runs the whole file in the child as well.
 */
const VERSUS_SIMD = FORCED !== undefined && FORCED !== 'simd' && process.env.EXPERTSWARM_KERNELS !== 'full';
const COMPARISONS_ONLY = VERSUS_SIMD ? 'the child: the comparisons are the same in every build (the parent runs this)' : false;

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

/** v alone, with biases, with scales, with both. */
const withParts = (v: ExpertVariant): ExpertVariant[] => [
  v,
  { ...v, biases: true },
  { ...v, scales: true },
  { ...v, biases: true, scales: true },
];
const caseName = (v: ExpertVariant): string => v.activation + (v.biases ? ' + biases' : '') + (v.scales ? ' + scales' : '');

const CASES: { variant: ExpertVariant; name: string }[] = [
  GPT_OSS_VARIANT,
  { ...GPT_OSS_VARIANT, biases: false },
  SILU_WITH_BIASES,
  { ...GPT_OSS_VARIANT, scales: true },
  { ...SILU_VARIANT, scales: true },
  ...withParts(SWIGLU_CLAMP),
  ...withParts(SILU_LIMIT),
  ...withParts(GELU),
].map((variant) => ({ variant, name: caseName(variant) }));

/**
 * gelu: ggml reads g and its result at f16 (~2^-11 relative each) where the reference computes the tanh formula, and
 * down's 8-bit rounding of h (Q8_0, Q8_K) turns those small differences into a quantum where a block's scale or a value
 * near a rounding midpoint moves: NMSE ~3e-8 with F32 weights, up to ~1.3e-5 with Q8_0 and Q4_K seen.
 */
const llamaBound = (v: ExpertVariant): number => (v.activation === 'gelu' ? 5e-5 : 1e-6);

/**
 * The gate and up values (scaled, biased) that reach each end of the variant's unit: the clamps of the limited
 * activations, gelu's ends at ±10 and its table between; and the share of all values each must have at least.
 */
function endsReached(v: ExpertVariant, gates: number[], ups: number[]): { counts: Record<string, number>; least: number } {
  const L = v.limit;
  const count = (xs: number[], p: (x: number) => boolean): number => xs.reduce((n, x) => n + (p(x) ? 1 : 0), 0);
  if (v.activation === 'gelu') {
    return {
      counts: {
        'gate ≤ −10': count(gates, (g) => g <= -10),
        'gate ≥ 10': count(gates, (g) => g >= 10),
        'gate in (−10, 10)': count(gates, (g) => g > -10 && g < 10),
      },
      least: 1 / 200,
    };
  }
  if (v.activation === 'silu') return { counts: {}, least: 0 };
  return {
    counts: {
      [`gate > ${L}`]: count(gates, (g) => g > L),
      [`up > ${L}`]: count(ups, (u) => u > L),
      [`up < −${L}`]: count(ups, (u) => u < -L),
    },
    least: 1 / 50,
  };
}

/** The calls of each case: one token (top-2, top-4) and five (top-3, top-4). */
const CALLS = [
  [1, 2],
  [1, 4],
  [5, 3],
  [5, 4],
] as const;

/** The child's check: `kernel` (the forced build) gives the simd build's bits on every call of the case, both numerics. */
async function assertSimdBits(
  kernel: WebAssembly.Module,
  slice: ExpertSlice,
  callOf: (nTokens: number, nUsed: number) => RoutedCall,
  where: string,
): Promise<void> {
  const simd = await nodeExpertKernel('simd');
  for (const numerics of ['llama', 'exact'] as const) {
    const mine = await WasmExpertFallback.create(kernel, slice, { numerics, touchAhead: false });
    const theirs = await WasmExpertFallback.create(simd, slice, { numerics, touchAhead: false });
    for (const [nTokens, nUsed] of CALLS) {
      const c = callOf(nTokens, nUsed);
      const diff = differingBits(await run(mine, c), await run(theirs, c));
      assert.equal(diff, 0, `${where}, ${numerics}, ${nTokens} rows top-${nUsed}: ${diff} values differ from the simd build's`);
    }
  }
}

for (const build of BUILDS)
  for (const type of TYPES) {
    const tn = GGMLType[type];
    const what = VERSUS_SIMD ? "the simd build's bits (which the parent holds to ggml's order)" : "ggml's order, near the reference";
    test(`wasm fallback (${build}), ${tn}: the variants bit for bit with ${what}`, {
      timeout: 600_000,
    }, async (t) => {
      const kernel = await nodeExpertKernel(build);
      for (const [ci, { variant, name }] of CASES.entries()) {
        const slice = makeSlice(type, 40 + 7 * type + ci, variant);
        if (VERSUS_SIMD) {
          await assertSimdBits(
            kernel,
            slice,
            (nTokens, nUsed) => call(nTokens, nUsed, 1000 * type + 10 * nTokens + nUsed + 100 * ci),
            `${tn} ${name}`,
          );
          continue;
        }
        const experts = dequantizeExperts(slice);
        const oracle = new GgmlOracle(slice, variant, slice.biases, slice.scales);
        const llama = await WasmExpertFallback.create(kernel, slice, { numerics: 'llama', touchAhead: false });
        const exact = await WasmExpertFallback.create(kernel, slice, { touchAhead: false });
        const gates: number[] = [];
        const ups: number[] = [];
        for (const [nTokens, nUsed] of CALLS) {
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
          assert.ok(e <= llamaBound(variant), `${where}: NMSE ${e} against referenceCall(…, 'llama')`);
          assert.ok(ex <= 1e-9, `${where}: 'exact' NMSE ${ex}`);
          gates.push(...want.gates);
          ups.push(...want.ups);
        }
        const { counts, least } = endsReached(variant, gates, ups);
        const said = Object.entries(counts).map(([k, n]) => `${k}: ${n}`);
        t.diagnostic(`${tn} ${name}: of ${gates.length} gate/up values, ${said.join(', ') || 'no clamps'}`);
        for (const [k, n] of Object.entries(counts)) assert.ok(n > gates.length * least, `${tn} ${name}: too few ${k} (${n})`);
      }
    });
  }

test('negative controls: without the biases, or with silu, the reference and the oracle are far off', {
  skip: COMPARISONS_ONLY,
}, async () => {
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

test('negative controls, second wave: without the scales, without the biases, or with silu, both are far off', {
  skip: COMPARISONS_ONLY,
}, async (t) => {
  const kernel = await nodeExpertKernel(BUILDS[0]);
  for (const type of TYPES) {
    for (const base of [SWIGLU_CLAMP, SILU_LIMIT, GELU]) {
      const variant: ExpertVariant = { ...base, biases: true, scales: true };
      const slice = makeSlice(type, 190 + type, variant);
      const fb = await WasmExpertFallback.create(kernel, slice, { numerics: 'llama', touchAhead: false });
      // gelu: rows at a quarter of the scale (element 0 kept at 1 for the oracle), gates of a few units, where gelu and
      // silu differ most (at the full scale most gates are far out, where both are nearly g or 0); the clamped
      // activations at the full scale, where their clamps (all that parts them from silu) are reached
      const shrink = base.activation === 'gelu' ? 4 : 1;
      const full = call(5, 3, 191 + type);
      const c = { ...full, rows: full.rows.map((v, i) => (i % SHAPE.nEmbd === 0 ? v : v / shrink)) };
      const got = await run(fb, c);
      const { scales: _, ...unscaled } = slice;
      const b = slice.biases!;
      const zero: SliceBiases = {
        gate: new Float32Array(b.gate.length),
        up: new Float32Array(b.up.length),
        down: new Float32Array(b.down.length),
      };
      const controls: [string, ExpertSlice][] = [
        ['scales ignored', { ...unscaled, variant: { ...variant, scales: false } }],
        ['biases zeroed', { ...slice, biases: zero }],
        ['silu instead', { ...slice, variant: { ...SILU_VARIANT, biases: true, scales: true } }],
      ];
      for (const [what, wrong] of controls) {
        const where = `${GGMLType[type]} ${caseName(variant)}, ${what}`;
        const e = nmse(got, referenceCall(dequantizeExperts(wrong), c, 'llama'));
        t.diagnostic(`${where}: NMSE ${e.toExponential(2)}`);
        assert.ok(e > 10 * llamaBound(variant), `${where}: NMSE ${e} — the comparison cannot tell`);
        const o = new GgmlOracle(wrong, wrong.variant!, wrong.biases, wrong.scales).run(c).out;
        assert.ok(differingBits(got, o) > got.length / 2, `${where}: the oracle cannot tell`);
      }
    }
  }
});

/**
 * Every f16 input through the kernel: an F32 slice (64 ↔ 64, gelu with biases) whose expert 0 has gate row r pick
 * x[r + 1], up rows x[0] = 1 and down the identity, so each output is gelu(x[r + 1]) · 1 read from the table create()
 * copied in, exactly (F32 vec_dots of one non-zero product): the 63,488 finite f16 values, 63 to a row. ±∞ and NaN (as
 * JS numbers the 2,046 NaN patterns are one NaN) cannot be an x (0 · ∞ would spoil every dot), so they come as the gate
 * bias of row 0 of experts 1 … 3 (gate rows 0), read at output 0 of their token.
 */
test('ggml’s GELU table as the wasm fallback holds it gives ggmlGelu for all 65,536 f16 inputs', async () => {
  const n = 64;
  const nonFinite = [0x7c00, 0xfc00, 0x7e00];
  const nExpert = 1 + nonFinite.length;
  const eyes = (col: (r: number) => number, first = col): Uint8Array => {
    const m = new Uint8Array(nExpert * n * n * 4);
    m.set(selector(n, n, first, 1));
    for (let e = 1; e < nExpert; e++) m.set(selector(n, n, col, 1), e * n * n * 4);
    return m;
  };
  const gate = new Uint8Array(nExpert * n * n * 4);
  gate.set(selector(n, n, (r) => (r + 1) % n, 1));
  const gateBias = new Float32Array(nExpert * n);
  nonFinite.forEach((h, i) => {
    gateBias[(i + 1) * n] = f16ToF32(h);
  });
  const slice: ExpertSlice = {
    nEmbd: n,
    ff: n,
    nExpert,
    types: { gate: GGMLType.F32, up: GGMLType.F32, down: GGMLType.F32 },
    gate,
    up: eyes(() => 0),
    down: eyes((r) => r),
    variant: { ...GELU, biases: true },
    biases: { gate: gateBias, up: new Float32Array(nExpert * n), down: new Float32Array(nExpert * n) },
  };
  const finite: number[] = [];
  for (let h = 0; h < 65536; h++) if ((h & 0x7c00) !== 0x7c00) finite.push(h);
  const perRow = n - 1;
  const rowsOfFinite = Math.ceil(finite.length / perRow);
  const nTokens = rowsOfFinite + nonFinite.length;
  const rows = new Float32Array(nTokens * n);
  const ids = new Int32Array(nTokens);
  const at = new Map<number, number>(); // f16 bits → output index
  for (let t = 0; t < nTokens; t++) rows[t * n] = 1;
  finite.forEach((h, i) => {
    const t = Math.floor(i / perRow);
    rows[t * n + (i % perRow) + 1] = f16ToF32(h);
    at.set(h, t * n + (i % perRow));
  });
  nonFinite.forEach((h, i) => {
    ids[rowsOfFinite + i] = i + 1;
    at.set(h, (rowsOfFinite + i) * n);
  });
  const fb = await WasmExpertFallback.create(await nodeExpertKernel(BUILDS[0]), slice, { numerics: 'llama', touchAhead: false });
  const out = await fb.compute(rows, ids, new Float32Array(nTokens).fill(1), nTokens, 1);
  const ends = { low: 0, high: 0, table: 0 };
  for (const [h, i] of at) {
    const g = f16ToF32(h);
    const want = ggmlGelu(g);
    const got = out[i]!;
    assert.ok(
      got === want || (Number.isNaN(got) && Number.isNaN(want)),
      `f16 ${h.toString(16)} (${g}): the kernel gives ${got}, ggmlGelu ${want}`,
    );
    if (g <= -10) ends.low++;
    else if (g >= 10) ends.high++;
    else if (g > -10 && g < 10) ends.table++;
  }
  // every finite f16, ±∞ and NaN; the table's part of the range and both ends
  assert.equal(at.size, finite.length + nonFinite.length);
  assert.ok(ends.table > 30_000 && ends.low > 10_000 && ends.high > 10_000, JSON.stringify(ends));
});

const ones = (n: number): SliceScales => ({
  gate: new Float32Array(n).fill(1),
  up: new Float32Array(n).fill(1),
  down: new Float32Array(n).fill(1),
});

test('wasm fallback refuses biases or scales that do not fit the variant, and variants it does not compute', async () => {
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
    ['scales for a variant without', { scales: ones(SHAPE.nExpert) }, 'BAD_SLICE_BIASES', 'gate scale'],
    ['none for a variant with scales', { variant: { ...GPT_OSS_VARIANT, scales: true } }, 'BAD_SLICE_BIASES', 'gate scale'],
    [
      'down scale one short',
      { variant: { ...GPT_OSS_VARIANT, scales: true }, scales: { ...ones(SHAPE.nExpert), down: new Float32Array(SHAPE.nExpert - 1) } },
      'BAD_SLICE_BIASES',
      'down scale',
    ],
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

test('wasm fallback: scales of 1 change no bit of any activation', async () => {
  const kernel = await nodeExpertKernel(BUILDS[0]);
  const c = call(5, 3, 13);
  for (const variant of [SILU_VARIANT, GPT_OSS_VARIANT, SWIGLU_CLAMP, SILU_LIMIT, GELU]) {
    const slice = makeSlice(GGMLType.Q8_0, 14, variant);
    const scaled: ExpertSlice = { ...slice, variant: { ...variant, scales: true }, scales: ones(SHAPE.nExpert) };
    for (const numerics of ['llama', 'exact'] as Numerics[]) {
      const a = await run(await WasmExpertFallback.create(kernel, slice, { numerics, touchAhead: false }), c);
      const b = await run(await WasmExpertFallback.create(kernel, scaled, { numerics, touchAhead: false }), c);
      assert.equal(differingBits(a, b), 0, `${caseName(variant)}, ${numerics}`);
    }
  }
});
