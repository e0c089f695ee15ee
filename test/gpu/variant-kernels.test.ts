/**
 * The expert FFN variant on the WGSL kernels (issue 25): gpt-oss's swiglu_oai with expert biases (GPT_OSS_VARIANT)
 * against the CPU reference (shaders/reference/expert-call.ts referenceCall, which computes every variant), on
 * SwiftShader through the `webgpu` npm package as test/gpu/kernels.test.ts runs. No adapter is a failure, not a skip.
 *
 * Grid: F32, Q8_0 and Q4_K slices, and a mix whose gate and up differ (the two-pass up kernels: the gate pass adds the
 * gate bias, the up pass the up bias and the gated unit); 4 experts of [256 ↔ 256]; calls of 1 token (top-2, top-4)
 * and 9 tokens (top-3), each in the decode regime and the 9-token call in the batched one too; exact numerics with
 * the default kernel features and with the base kernels, llama numerics on every integer-dot path (compareLlama: the
 * NMSE beyond the ties of the variant's h).
 *
 * The inputs are scaled so that the clamps of swiglu_oai matter: gate values above the limit 7 and up values below −7
 * and above 7 occur in every call (asserted), and a reference without the clamps misses the result. Negative
 * controls: the references of the same slice with its biases zeroed, and as a silu slice, miss the result by orders
 * of magnitude, so a kernel that dropped a bias or the activation (and computed one of those) would fail. That the
 * kernels compute a silu slice's reference, with and without biases, is the last tests' here and kernels.test.ts's.
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { quantize } from '../../gguf/quantize.ts';
import { GPT_OSS_VARIANT, SILU_VARIANT, type ExpertVariant } from '../../protocol/variant.ts';
import type { ExpertMatrices } from '../../shaders/reference/expert-ffn.ts';
import { dequantizeExperts, nmse, referenceCall, type RoutedCall } from '../../shaders/reference/expert-call.ts';
import { compareLlama } from '../../shaders/reference/llama-ties.ts';
import { ExpertRuntime, ExpertRuntimeError, WGSL_VARIANT_FEATURES, type ExpertSlice, type Regime } from '../../shaders/runtime.ts';
import type { ExpertRuntimeErrorCode } from '../../shaders/errors.ts';
import type { SliceBiases, SliceTypes } from '../../shaders/slice.ts';
import { mulberry32 } from '../../shaders/random.ts';
import { nodeExpertDevice, nodeGpu } from '../../harness/node-gpu.ts';

// The process's GPU object (module scope: dawn.node frees its instance when it is collected; docs/kernels.md).
const gpu = await nodeGpu();

// ---------------------------------------------------------------------------------------------
// Tolerances (the reasons as in kernels.test.ts).
//
// Exact numerics: weights decoded exactly and activations in f32, so only f32 rounding of the sums, the bias adds,
// the gated unit and the products remains: NMSE ~1e-13…1e-11 against the float64 reference. 1e-9 leaves two orders of
// magnitude for other drivers' exp(); shader-f16 tiles (batched, where the device has them) round to f16: 1e-5.
const NMSE_MAX = 1e-9;
const NMSE_MAX_F16 = 1e-5;
// Llama numerics against referenceCall(…, 'llama') through compareLlama (shaders/reference/llama-ties.ts), which
// finds the ties of the variant's h (biases added, swiglu_oai) and allows one rounding step at each: the NMSE beyond
// them. The rows are rounded bit for bit and everything but h's rounding is f32 summation, so the bound of
// kernels.test.ts applies (1e-9; f16 tiles their own). The plain NMSE, where a tie rounded the other way costs
// ~1e-9…1e-6 in a call this small, is only reported.
const LLAMA_BEYOND_TIES_MAX = 1e-9;
// A negative control must miss the gpt-oss reference by at least this much (measured ~1e-2…1: a zeroed bias or
// silu in place of swiglu_oai changes every output).
const CONTROL_NMSE_MIN = 1e-3;

const T = GGMLType;
const N_EMBD = 256;
const FF = 256;
const N_EXPERT = 4;
const same = (t: GGMLType): SliceTypes => ({ gate: t, up: t, down: t });
const GRID: { name: string; types: SliceTypes }[] = [
  { name: 'F32', types: same(T.F32) },
  { name: 'Q8_0', types: same(T.Q8_0) },
  { name: 'Q4_K', types: same(T.Q4_K) },
  // gate and up of different types: the two-pass up kernels (both Q8_K-rounded, so llama numerics' int8 passes too)
  { name: 'mix Q4_K/Q6_K/Q8_0', types: { gate: T.Q4_K, up: T.Q6_K, down: T.Q8_0 } },
];
/** [nTokens, nUsed, regimes]: single tokens on the decode kernels, a 9-token call on both. */
const CALLS: [number, number, Regime[]][] = [
  [1, 2, ['decode']],
  [1, 4, ['decode']],
  [9, 3, ['decode', 'batched']],
];

// ---------------------------------------------------------------------------------------------
// Seeded data.

function gaussian(n: number, rand: () => number, scale: number): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand()) * scale;
  return x;
}

/**
 * A gpt-oss slice: weights as kernels.test.ts makes them (gate·x and up·x of the size of |x| / √nEmbd · √nEmbd), biases
 * of about 1.5 on gate and up and 3 on down (the size of a down output here), so each moves its sums visibly.
 */
function makeSlice(types: SliceTypes, seed: number): ExpertSlice {
  const rand = mulberry32(seed);
  const gate = quantize(types.gate, gaussian(N_EXPERT * FF * N_EMBD, rand, 1 / Math.sqrt(N_EMBD)));
  const up = quantize(types.up, gaussian(N_EXPERT * FF * N_EMBD, rand, 1 / Math.sqrt(N_EMBD)));
  const down = quantize(types.down, gaussian(N_EXPERT * N_EMBD * FF, rand, 1 / Math.sqrt(FF)));
  const biases: SliceBiases = {
    gate: gaussian(N_EXPERT * FF, rand, 1.5),
    up: gaussian(N_EXPERT * FF, rand, 1.5),
    down: gaussian(N_EXPERT * N_EMBD, rand, 3),
  };
  return { nEmbd: N_EMBD, ff: FF, nExpert: N_EXPERT, types, gate, up, down, variant: GPT_OSS_VARIANT, biases };
}

/**
 * Rows of scale 4, so gate·x and up·x have a standard deviation of ~4 and |values| > 7 (the limit) occur in ~8% of
 * them; distinct experts per token, positive weights summing to 1.
 */
function makeCall(nTokens: number, nUsed: number, seed: number): RoutedCall {
  const rand = mulberry32(seed);
  const rows = gaussian(nTokens * N_EMBD, rand, 4);
  const ids = new Int32Array(nTokens * nUsed);
  const probs = new Float32Array(nTokens * nUsed);
  for (let t = 0; t < nTokens; t++) {
    const pool = Array.from({ length: N_EXPERT }, (_, i) => i);
    let sum = 0;
    for (let k = 0; k < nUsed; k++) {
      const [e] = pool.splice(Math.floor(rand() * pool.length), 1);
      ids[t * nUsed + k] = e!;
      probs[t * nUsed + k] = 0.1 + rand();
      sum += probs[t * nUsed + k]!;
    }
    for (let k = 0; k < nUsed; k++) probs[t * nUsed + k] = probs[t * nUsed + k]! / sum;
  }
  return { rows, ids, probs, nTokens, nUsed };
}

/** The slice with every bias zero (still the gpt-oss variant). */
function zeroBiases(s: ExpertSlice): ExpertSlice {
  const b = s.biases!;
  return {
    ...s,
    biases: { gate: new Float32Array(b.gate.length), up: new Float32Array(b.up.length), down: new Float32Array(b.down.length) },
  };
}

/** The slice's matrices as a silu slice without biases (what every slice before issue 25 was). */
function asSilu(s: ExpertSlice): ExpertSlice {
  const { variant: _v, biases: _b, ...rest } = s;
  return rest;
}

/** The dequantized experts with another variant (the reference of a what-if). */
const withVariant = (experts: ExpertMatrices[], variant: ExpertVariant): ExpertMatrices[] => experts.map((e) => ({ ...e, variant }));

/**
 * How many of the call's gate and up values (biases added, exact math) lie past the clamps: gate > L, up < −L, up > L.
 */
function clampCounts(
  experts: readonly ExpertMatrices[],
  c: RoutedCall,
  limit: number,
): { gateOver: number; upUnder: number; upOver: number } {
  const n = { gateOver: 0, upUnder: 0, upOver: 0 };
  for (let p = 0; p < c.nTokens * c.nUsed; p++) {
    const w = experts[c.ids[p]!]!;
    const t = Math.floor(p / c.nUsed);
    for (let r = 0; r < w.ff; r++) {
      let g = w.biases!.gate[r]!;
      let u = w.biases!.up[r]!;
      for (let i = 0; i < w.nEmbd; i++) {
        const x = c.rows[t * w.nEmbd + i]!;
        g += w.gate[r * w.nEmbd + i]! * x;
        u += w.up[r * w.nEmbd + i]! * x;
      }
      if (g > limit) n.gateOver++;
      if (u < -limit) n.upUnder++;
      if (u > limit) n.upOver++;
    }
  }
  return n;
}

function sameBits(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

async function rejectsWith(p: () => Promise<unknown>, code: ExpertRuntimeErrorCode, details?: object): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof ExpertRuntimeError, `expected ExpertRuntimeError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    if (details) assert.deepEqual(e.details, details);
    return true;
  });
}

/** The exact-numerics bound of a call of `regime` on `rt` (f16 tiles where its batched kernels use them). */
function boundFor(rt: ExpertRuntime, regime: Regime): number {
  return regime === 'batched' && rt.capabilities().kernelFeatures.includes('shader-f16') ? NMSE_MAX_F16 : NMSE_MAX;
}

const compute = (rt: ExpertRuntime, c: RoutedCall, regime: Regime): Promise<Float32Array> =>
  rt.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime });

/** Worst NMSE per case, and the smallest miss of each negative control, printed after the file. */
const measured = new Map<string, number>();
const note = (key: string, v: number): void => {
  measured.set(key, Math.max(measured.get(key) ?? 0, v));
};
const misses = new Map<string, number>();
const noteMiss = (key: string, v: number): void => {
  misses.set(key, Math.min(misses.get(key) ?? Infinity, v));
};

// ---------------------------------------------------------------------------------------------

describe('expert FFN variants (gpt-oss swiglu_oai with biases) on WebGPU', { concurrency: 1 }, () => {
  let device: GPUDevice;
  let openError: unknown = null;
  let seed = 2500;

  before(async () => {
    try {
      device = await nodeExpertDevice('variant-kernels.test device');
    } catch (e) {
      openError = e;
    }
  });
  beforeEach(() => {
    if (openError) throw openError;
  });
  after(() => {
    device?.destroy();
    const lines = (m: Map<string, number>): string => [...m].map(([k, v]) => `${k}: ${v.toExponential(2)}`).join('\n  ');
    if (measured.size > 0) console.log(`max NMSE:\n  ${lines(measured)}`);
    if (misses.size > 0) console.log(`smallest NMSE of the negative controls:\n  ${lines(misses)}`);
  });

  for (const { name, types } of GRID) {
    test(`exact numerics: ${name} gpt-oss slice, decode and batched, default and base kernels, match the reference; controls miss it`, async (t) => {
      const slice = makeSlice(types, seed++);
      const experts = dequantizeExperts(slice);
      const calls = CALLS.map(([nTokens, nUsed, regimes]) => ({ c: makeCall(nTokens, nUsed, seed++), regimes }));
      // The clamps are exercised: every call has gate values over the limit and up values past it on both sides.
      for (const { c } of calls) {
        const n = clampCounts(experts, c, GPT_OSS_VARIANT.limit);
        assert.ok(n.gateOver > 0 && n.upUnder > 0 && n.upOver > 0, `${c.nTokens}×${c.nUsed}: clamps not exercised ${JSON.stringify(n)}`);
      }
      const unclamped = withVariant(experts, { ...GPT_OSS_VARIANT, limit: 1e30 });
      // Negative controls: the references of the slice with zero biases and as silu (what a kernel that dropped the
      // biases or the activation would compute) miss the result by orders of magnitude.
      const controls: [string, ExpertMatrices[]][] = [
        ['biases zeroed', dequantizeExperts(zeroBiases(slice))],
        ['silu', dequantizeExperts(asSilu(slice))],
      ];
      for (const features of ['auto', []] as const) {
        const rt = await ExpertRuntime.create(device, slice, { features, label: `gpt-oss ${name} ${features}` });
        try {
          assert.equal(rt.capabilities().slice.variant, 'swiglu_oai(α 1.702, limit 7) + biases');
          for (const { c, regimes } of calls) {
            for (const regime of regimes) {
              const what = `${name} ${regime} ${features === 'auto' ? rt.capabilities().kernelFeatures.join('+') || 'base' : 'base'} ${c.nTokens}×${c.nUsed}`;
              const got = await compute(rt, c, regime);
              const e = nmse(got, referenceCall(experts, c));
              note(`exact ${name} ${regime}`, e);
              assert.ok(e <= boundFor(rt, regime), `${what}: NMSE ${e}`);
              // Without the clamps the reference is another function: the clamps mattered to this result.
              const u = nmse(got, referenceCall(unclamped, c));
              noteMiss(`exact ${name}: unclamped reference`, u);
              assert.ok(u >= CONTROL_NMSE_MIN, `${what}: the unclamped reference is within ${u}`);
              for (const [control, ref] of controls) {
                const off = nmse(got, referenceCall(ref, c));
                noteMiss(`control (${control}) vs gpt-oss ${name}`, off);
                assert.ok(off >= CONTROL_NMSE_MIN, `${what}: within ${off} of the ${control} reference`);
              }
            }
          }
        } finally {
          rt.dispose();
        }
      }
      t.diagnostic(
        `max NMSE decode ${measured.get(`exact ${name} decode`)?.toExponential(2)}, batched ${measured.get(`exact ${name} batched`)?.toExponential(2)}`,
      );
    });
  }

  for (const { name, types } of GRID) {
    test(`llama numerics: ${name} gpt-oss slice, every integer-dot path and batched, match the rounded reference`, async (t) => {
      const slice = makeSlice(types, seed++);
      const experts = dequantizeExperts(slice);
      const calls = CALLS.map(([nTokens, nUsed, regimes]) => ({ c: makeCall(nTokens, nUsed, seed++), regimes }));
      const silu = withVariant(experts, SILU_VARIANT);
      const int8 = types.gate !== T.F32;
      const paths = int8 ? (['packed', 'unpacked', 'float'] as const) : (['auto'] as const);
      const outs = new Map<string, Float32Array[]>();
      for (const integerDot of paths) {
        if (integerDot === 'packed' && !gpu.wgslLanguageFeatures.has('packed_4x8_integer_dot_product')) {
          t.diagnostic('packed skipped: no packed_4x8_integer_dot_product here');
          continue;
        }
        const rt = await ExpertRuntime.create(device, slice, { numerics: 'llama', integerDot, label: `llama ${name} ${integerDot}` });
        try {
          const got: Float32Array[] = [];
          for (const { c, regimes } of calls) {
            // The batched regime reads rounded values whatever integerDot says: once is enough.
            for (const regime of integerDot === paths[0] ? regimes : (['decode'] as const)) {
              const what = `${name} llama ${regime} ${rt.capabilities().integerDot} ${c.nTokens}×${c.nUsed}`;
              const out = await compute(rt, c, regime);
              if (regime === 'decode') got.push(out);
              const r = compareLlama(experts, c, out);
              const key = `llama ${name} ${regime}${regime === 'decode' ? ` ${rt.capabilities().integerDot}` : ''}`;
              note(`${key} (plain)`, r.nmse);
              note(`${key} (beyond ties)`, r.beyondTies);
              assert.ok(r.beyondTies <= Math.max(LLAMA_BEYOND_TIES_MAX, boundFor(rt, regime)), `${what}: NMSE beyond ties ${r.beyondTies}`);
              const off = compareLlama(silu, c, out).beyondTies;
              noteMiss(`llama ${name}: silu reference`, off);
              assert.ok(off >= CONTROL_NMSE_MIN, `${what}: within ${off} of the silu reference`);
            }
          }
          outs.set(integerDot, got);
        } finally {
          rt.dispose();
        }
      }
      // dot4I8Packed and its unpacked fallback are both exact integer sums: the same bits, variant and all.
      const packed = outs.get('packed');
      const unpacked = outs.get('unpacked');
      if (packed && unpacked) {
        packed.forEach((p, i) => {
          assert.ok(sameBits(p, unpacked[i]!), `packed and unpacked differ (call ${i})`);
        });
      }
    });
  }

  test('a split slice (weights in parts of one expert) reads each expert its own biases, the same bits as one part', async () => {
    const slice = makeSlice(same(T.Q8_0), seed++);
    const experts = dequantizeExperts(slice);
    const c = makeCall(9, 3, seed++);
    const perExpert = (FF * N_EMBD * 34) / 32; // one Q8_0 matrix of one expert
    const whole = await ExpertRuntime.create(device, slice, { features: [] });
    const split = await ExpertRuntime.create(device, slice, { features: [], maxBindingBytes: perExpert });
    try {
      assert.equal(split.capabilities().weightParts, N_EXPERT);
      for (const regime of ['decode', 'batched'] as const) {
        const a = await compute(whole, c, regime);
        const b = await compute(split, c, regime);
        assert.ok(sameBits(a, b), `${regime}: split and whole differ`);
        assert.ok(nmse(b, referenceCall(experts, c)) <= NMSE_MAX);
      }
    } finally {
      whole.dispose();
      split.dispose();
    }
  });

  test('silu slices are unchanged: with or without an explicit SILU_VARIANT, the same bits, and the reference', async () => {
    const slice = asSilu(makeSlice(same(T.Q4_K), seed++));
    const c = makeCall(9, 2, seed++);
    const plain = await ExpertRuntime.create(device, slice);
    const explicit = await ExpertRuntime.create(device, { ...slice, variant: SILU_VARIANT });
    try {
      assert.deepEqual(plain.capabilities().variants, [...WGSL_VARIANT_FEATURES]);
      assert.equal(plain.capabilities().slice.variant, 'silu');
      for (const regime of ['decode', 'batched'] as const) {
        const a = await compute(plain, c, regime);
        assert.ok(sameBits(a, await compute(explicit, c, regime)), regime);
        assert.ok(nmse(a, referenceCall(dequantizeExperts(slice), c)) <= boundFor(plain, regime), regime);
      }
    } finally {
      plain.dispose();
      explicit.dispose();
    }
  });

  test('silu with biases (the bias feature alone) matches the reference in both regimes, and misses it without them', async () => {
    const slice: ExpertSlice = { ...makeSlice(same(T.Q8_0), seed++), variant: { ...SILU_VARIANT, biases: true } };
    const experts = dequantizeExperts(slice);
    const c = makeCall(9, 2, seed++);
    const rt = await ExpertRuntime.create(device, slice);
    try {
      assert.equal(rt.capabilities().slice.variant, 'silu + biases');
      for (const regime of ['decode', 'batched'] as const) {
        const got = await compute(rt, c, regime);
        assert.ok(nmse(got, referenceCall(experts, c)) <= boundFor(rt, regime), regime);
        assert.ok(nmse(got, referenceCall(withVariant(experts, SILU_VARIANT), c)) >= CONTROL_NMSE_MIN, `${regime}: biases ignored`);
      }
    } finally {
      rt.dispose();
    }
  });

  test('biases that do not fit the variant are refused with BAD_SLICE_BIASES, naming the bias and the lengths', async () => {
    const slice = makeSlice(same(T.Q8_0), seed++);
    const b = slice.biases!;
    const refusals: [string, ExpertSlice, object][] = [
      [
        'a down bias one short',
        { ...slice, biases: { ...b, down: b.down.subarray(1) } },
        { bias: 'down', expected: N_EXPERT * N_EMBD, actual: N_EXPERT * N_EMBD - 1 },
      ],
      [
        'an up bias of one expert',
        { ...slice, biases: { ...b, up: b.up.subarray(0, FF) } },
        { bias: 'up', expected: N_EXPERT * FF, actual: FF },
      ],
      ['gpt-oss without biases', { ...slice, biases: undefined }, { bias: 'gate', expected: N_EXPERT * FF, actual: 0 }],
      ['biases on a silu slice', { ...asSilu(slice), biases: b }, { bias: 'gate', expected: 0, actual: N_EXPERT * FF }],
    ];
    for (const [what, s, details] of refusals) {
      await rejectsWith(() => ExpertRuntime.create(device, s), 'BAD_SLICE_BIASES', details).catch((e: unknown) => {
        throw new Error(`${what}: ${String(e)}`);
      });
    }
  });
});
