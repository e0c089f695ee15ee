/**
 * Expert-FFN WGSL kernels (shaders/) against the CPU reference (shaders/reference/expert-call.ts), on a real WebGPU
 * device: SwiftShader (Chromium's CPU Vulkan driver) through the `webgpu` npm package. No adapter is a failure, not a
 * skip: CI installs libvulkan1 and Chromium's SwiftShader ICD for this file.
 *
 * Weights are random floats quantized with gguf/quantize.ts, so the kernels read real llama.cpp block layouts; the
 * reference runs on the same weights dequantized (exact math, no ggml activation rounding). Both regimes are
 * covered: decode (a matrix–vector product per pair) and batched (pairs grouped by expert, batched kernels), each
 * against the reference, against each other, and through the auto policy.
 *
 * Numerics 'llama' (activations rounded as llama.cpp's CPU backend rounds them) is checked against the reference with
 * the same rounding (referenceCall(…, 'llama'), through compareLlama: NMSE beyond the ties of h, see
 * shaders/reference/llama-ties.ts) on every type, both regimes, every integer-dot path and split slices; and exact
 * numerics is shown to miss that bound by orders of magnitude, so a runtime that ignored the option would fail.
 *
 * Tolerances follow what ran: a runtime with the default features whose batched kernels use f16 tiles
 * (capabilities().kernelFeatures has 'shader-f16') is held to the f16 bound, not the f32 one (boundFor).
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { allQuantTypes, GGMLType, requireQuantType, typeName } from '../../gguf/quant-types.ts';
import { canQuantize, quantize } from '../../gguf/quantize.ts';
import { weightBytes } from '../../harness/weight-bytes.ts';
import { planExpertSlice, writeExpertSlice } from '../../gguf/expert-slice.ts';
import { bytesSource, readGGUF } from '../../gguf/reader.ts';
import { GGUFValueType } from '../../gguf/types.ts';
import { encodeGGUF, memorySink } from '../../gguf/writer.ts';
import type { ExpertMatrices } from '../../shaders/reference/expert-ffn.ts';
import { dequantizeExperts, nmse, referenceCall } from '../../shaders/reference/expert-call.ts';
import { compareLlama } from '../../shaders/reference/llama-ties.ts';
import { Q8_1_WEIGHT_TYPES } from '../../shaders/reference/ggml-activations.ts';
import {
  ExpertRuntime,
  ExpertRuntimeError,
  type ExpertSlice,
  type IntegerDot,
  type Regime,
  type RuntimeEvent,
} from '../../shaders/runtime.ts';
import { batchedWorkgroups, foldDispatch } from '../../shaders/call-plan.ts';
import { sliceMatrixBytes, type SliceTypes } from '../../shaders/slice.ts';
import { expertCounts, groupByExpert } from '../../shaders/expert-groups.ts';
import { batchedSupported, type RegimeDecision } from '../../shaders/regime-policy.ts';
import type { ExpertRuntimeErrorCode } from '../../shaders/errors.ts';
import { INT8_SNIPPETS } from '../../shaders/expert-ffn.ts';
import { mulberry32 } from '../../shaders/random.ts';
import { nodeExpertDevice, nodeGpu } from '../../harness/node-gpu.ts';
import { BLOCK_FAMILY_TYPES, FULL_KERNEL_GRID, KERNEL_GRID_TYPES, LIGHT_GPU_TYPES } from '../../harness/kernel-grid.ts';

// The process's GPU object (module scope: dawn.node frees its instance when it is collected; docs/kernels.md).
const gpu = await nodeGpu();

// ---------------------------------------------------------------------------------------------
// Device.

let device: GPUDevice;
const extraDevices: GPUDevice[] = [];
let openError: unknown = null;

async function openGpu(): Promise<void> {
  device = await testDevice('kernels.test device');
}

/** A device as the runtime wants it (shaders/device.ts: adapter limits, 'subgroups' where SwiftShader has it). */
const testDevice = nodeExpertDevice;

// ---------------------------------------------------------------------------------------------
// Seeded data.

function gaussian(n: number, rand: () => number, scale: number): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand()) * scale;
  return x;
}

interface TestSlice {
  slice: ExpertSlice;
  /** Dequantized matrices per expert, for the reference. */
  experts: ExpertMatrices[];
}

function makeSlice(types: SliceTypes, nEmbd: number, ff: number, nExpert: number, seed: number): TestSlice {
  const rand = mulberry32(seed);
  // Scales keep gate·x, up·x and the outputs around 1, as in a trained model.
  // The IQ types only llama.cpp's quantizer writes: random valid super-blocks (harness/weight-bytes.ts)
  const bytes = (t: GGMLType, n: number, scale: number): Uint8Array =>
    canQuantize(t) ? quantize(t, gaussian(n, rand, scale)) : weightBytes(t, n, rand, scale);
  const gate = bytes(types.gate, nExpert * ff * nEmbd, 1 / Math.sqrt(nEmbd));
  const up = bytes(types.up, nExpert * ff * nEmbd, 1 / Math.sqrt(nEmbd));
  const down = bytes(types.down, nExpert * nEmbd * ff, 1 / Math.sqrt(ff));
  const slice: ExpertSlice = { nEmbd, ff, nExpert, types, gate, up, down };
  return { slice, experts: dequantizeExperts(slice) };
}

interface Call {
  rows: Float32Array;
  ids: Int32Array;
  probs: Float32Array;
  nTokens: number;
  nUsed: number;
}

/** Random rows, distinct experts per token (as top-k routing picks them), softmax-like positive weights. */
function makeCall(nEmbd: number, nExpert: number, nTokens: number, nUsed: number, seed: number): Call {
  const rand = mulberry32(seed);
  const rows = gaussian(nTokens * nEmbd, rand, 1);
  const ids = new Int32Array(nTokens * nUsed);
  const probs = new Float32Array(nTokens * nUsed);
  for (let t = 0; t < nTokens; t++) {
    const pool = Array.from({ length: nExpert }, (_, i) => i);
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

/** The mini-GGUF of experts [begin, end) of a one-layer model file holding `slice` as layer 0 (gguf/expert-slice.ts). */
async function miniGGUF(slice: ExpertSlice, begin: number, end: number): Promise<Uint8Array> {
  const { nEmbd, ff, nExpert, types } = slice;
  const model = encodeGGUF({
    metadata: { 'general.architecture': { type: GGUFValueType.STRING, value: 'qwen3moe' } },
    tensors: [
      { name: 'blk.0.ffn_gate_exps.weight', dims: [nEmbd, ff, nExpert], type: types.gate, data: slice.gate },
      { name: 'blk.0.ffn_up_exps.weight', dims: [nEmbd, ff, nExpert], type: types.up, data: slice.up },
      { name: 'blk.0.ffn_down_exps.weight', dims: [ff, nEmbd, nExpert], type: types.down, data: slice.down },
    ],
  });
  const src = bytesSource(model);
  const sink = memorySink();
  await writeExpertSlice(src, planExpertSlice(await readGGUF(src), 0, begin, end), sink);
  return sink.bytes();
}

/** `bytes` as a stream of seeded random chunks (1 byte to 2 KiB). */
function chunked(bytes: Uint8Array, seed: number): ReadableStream<Uint8Array> {
  const rand = mulberry32(seed);
  let at = 0;
  return new ReadableStream({
    pull(controller) {
      if (at >= bytes.length) {
        controller.close();
        return;
      }
      const n = 1 + Math.floor(rand() * 2048);
      controller.enqueue(bytes.slice(at, at + n));
      at += n;
    },
  });
}

async function rejectsWith(p: Promise<unknown> | (() => unknown), code: ExpertRuntimeErrorCode, details?: object): Promise<void> {
  await assert.rejects(
    async () => (typeof p === 'function' ? p() : p),
    (e: unknown) => {
      assert.ok(e instanceof ExpertRuntimeError, `expected ExpertRuntimeError, got ${String(e)}`);
      assert.equal(e.code, code, e.message);
      if (details) assert.deepEqual(e.details, details);
      return true;
    },
  );
}

// ---------------------------------------------------------------------------------------------
// Tolerances.
//
// The kernels decode every weight exactly (f16 scales and small-integer quants are exact in f32) and do not round
// activations, so against the float64 reference on the same dequantized weights the only error is f32 rounding of
// the accumulations, of silu(g)·u and of the products: relative ~1e-7 per value, NMSE ~1e-13…1e-11. llama.cpp's
// test-backend-ops allows 5e-4 for mul_mat because its backends also quantize activations (Q8_0/Q8_K); we do not,
// so a tighter bound catches real mistakes (one wrong sub-block scale gives NMSE ~1e-3). 1e-9 leaves two orders of
// magnitude for other drivers' exp() and fused multiply-adds.
const NMSE_MAX = 1e-9;
// F32 weights: the same math with nothing decoded; keep it tighter still.
const NMSE_MAX_F32 = 1e-10;
// shader-f16 tiles round activations and decoded weights to f16 (11-bit significands) and sum each four products in
// f16: relative error ~2^-11 per product, NMSE ~1e-7; 1e-5 leaves the same two orders of magnitude of room.
const NMSE_MAX_F16 = 1e-5;
// The contract for callers (the hub's verification), matching llama.cpp's mul_mat tolerance; every case must also
// meet it, whichever of the bounds above applies.
const NMSE_CONTRACT = 5e-4;

const T = GGMLType;
/** Weight types with an integer block dot (llama numerics' int8 kernels). */
const INT8_TYPES: ReadonlySet<GGMLType> = new Set(INT8_SNIPPETS.keys());
const same = (t: GGMLType): SliceTypes => ({ gate: t, up: t, down: t });
/**
 * Every weight type the kernels read (QUANT_SNIPPETS through harness/kernel-grid.ts), so a new quant snippet is in
 * every grid of this file without an edit. `npm test` runs one shape per type and grid, rows of several blocks (the
 * decode grid's larger shape, the batched grid's partial-tile float shape or multi-block quant shape);
 * `npm run test:kernels:full` (EXPERTSWARM_KERNELS=full) adds the other shape of each and the largest batched call.
 * LIGHT_GPU_TYPES get the llama-numerics case alone in `npm test` (both of their snippets); their decode and batched
 * cases are the full run's.
 */
const KERNEL_TYPES_HERE: readonly GGMLType[] = KERNEL_GRID_TYPES;
const EXACT_TYPES_HERE: readonly GGMLType[] = KERNEL_GRID_TYPES.filter((t) => FULL_KERNEL_GRID || !LIGHT_GPU_TYPES.has(t));
/** In `npm test`, the last shape of a list (the full grid: every one). */
const sized = <S>(all: S[]): S[] => (FULL_KERNEL_GRID ? all : all.slice(-1));

/** Decode shapes [nEmbd, ff, nExpert] of a type by its block size: one block per down row, then several. */
function decodeSizes(t: GGMLType): [number, number, number][] {
  const b = requireQuantType(t).blockSize;
  if (b <= 32)
    return [
      [64, 32, 2],
      [128, 64, 3],
    ];
  return [
    [b, b, 2],
    [2 * b, b, 3],
  ];
}

const GRID: { name: string; types: SliceTypes; sizes: [number, number, number][] }[] = [
  ...EXACT_TYPES_HERE.map((t) => ({ name: typeName(t), types: same(t), sizes: sized(decodeSizes(t)) })),
  // gate and up of different types run the two-pass expert_up path (Q4_K_M-like mix, and a float mix)
  { name: 'mix Q4_K/Q5_K/Q6_K', types: { gate: T.Q4_K, up: T.Q5_K, down: T.Q6_K }, sizes: [[256, 256, 3]] },
  { name: 'mix F16/BF16/Q8_0', types: { gate: T.F16, up: T.BF16, down: T.Q8_0 }, sizes: [[64, 64, 4]] },
];
const N_TOKENS = [1, 3, 8];
const N_USED = [1, 2];

// Batched regime: prompt-sized calls on slices of 4 experts, so experts get many pairs each (16 or 64 tokens × top-2
// or top-4 of 4: 8 to 64 pairs per expert, up to 4 tiles of 16). Float shapes that are not multiples of the kernels'
// 32-element staging step or 32 weight rows per workgroup exercise the zero-padded edges; the quant shapes are whole
// blocks. Same tolerances as decode, for the same reason: weights decoded exactly, activations in f32, so only the
// f32 summation error remains (in another order than decode's).
const BATCHED_EXPERTS = 4;
/** Batched shapes [nEmbd, ff] of a type: floats off the tiles (the first, the one `npm test` runs), quants in whole blocks. */
function batchedSizes(t: GGMLType): [number, number][] {
  const b = requireQuantType(t).blockSize;
  if (b === 1)
    return [
      [96, 64],
      [36, 20],
    ];
  if (b === 32)
    return [
      [64, 32],
      [96, 64],
    ];
  return [
    [b, b],
    [2 * b, b],
  ];
}
const BATCHED_GRID: { name: string; types: SliceTypes; sizes: [number, number][] }[] = [
  ...EXACT_TYPES_HERE.map((t) => ({ name: typeName(t), types: same(t), sizes: sized(batchedSizes(t)) })),
  // gate and up of different types: the two-pass expert_up_batched path
  { name: 'mix Q4_K/Q5_K/Q6_K', types: { gate: T.Q4_K, up: T.Q5_K, down: T.Q6_K }, sizes: [[256, 256]] },
];
/**
 * [nTokens, nUsed]: 8 pairs per expert (a partial tile), 16 (one), 32 (two); the full grid adds 64 (four tiles). In
 * `npm test` the types other than one per block size and the mix take the 16-pair call alone.
 */
const BATCHED_CALLS: [number, number][] = [[16, 2], [16, 4], [64, 2], ...(FULL_KERNEL_GRID ? ([[64, 4]] as [number, number][]) : [])];
// Decode and batched on the same inputs: each is within ~1e-12 of the exact result, so of each other too; the bound
// is the decode bound, the same two orders of magnitude of room.
const REGIMES_NMSE_MAX = 1e-9;

/**
 * The bound for a call of `regime` on `rt`, from the kernels that ran: f16 tiles (the 'shader-f16' variant, used
 * by the batched kernels only) get NMSE_MAX_F16; otherwise F32 slices NMSE_MAX_F32 and the rest NMSE_MAX.
 */
function boundFor(rt: ExpertRuntime, regime: Regime): number {
  const caps = rt.capabilities();
  if (regime === 'batched' && caps.kernelFeatures.includes('shader-f16')) return NMSE_MAX_F16;
  const t = caps.slice.types;
  return t.gate === 'F32' && t.up === 'F32' && t.down === 'F32' ? NMSE_MAX_F32 : NMSE_MAX;
}

/** The regime a call with `regime` ('auto' or forced) runs on `rt`. */
function ranRegime(rt: ExpertRuntime, c: Call, regime: Regime | 'auto' = 'auto'): Regime {
  return regime === 'auto' ? rt.planRegime(c.ids, c.nTokens, c.nUsed).regime : regime;
}

// Numerics 'llama' against referenceCall(…, 'llama') (compareLlama): the NMSE beyond the ties of h. Everything but h's
// rounding is bit-exact or f32 summation (measured ≤ 2e-13 beyond ties on SwiftShader), so the f32 bound applies;
// f16 tiles add their own rounding. The plain NMSE is reported too: one tie rounded the other way costs ~1e-9 … 1e-6
// in a small call (see llama-ties.ts), which no bound on the plain NMSE of one call could both allow and stay tight.
const LLAMA_BEYOND_TIES_MAX = 1e-9;
// Exact numerics against the rounded reference: ~1e-4 for 8-bit activations (ggml's Q8_0 / Q8_K rounding), the
// difference llama numerics exists to remove; ~1e-7 for F16 (activations rounded to f16). The negative check asks for
// 1000× the llama bound at least (F16: 10×), and so does a llama result with its sums 1% off (NMSE 1e-4).
const EXACT_VS_LLAMA_MIN = 1e3 * LLAMA_BEYOND_TIES_MAX;
// Q4_1 / Q5_1 on the int8 kernels: they use Q8_1's f16 s for the mins as ggml does, which the reference does not model
// (Q8_1_WEIGHT_TYPES): each block's min is multiplied by f16(d · Σq) rather than f16(d) · Σq, up to 2^-11 apart, and in
// a one-token call 96 wide the mins' terms can outweigh the sum they leave, so the NMSE depends on the draw: 7e-7 … 3e-6
// on the seeds of 2026-12-05, 4.8e-5 (Q5_1, 1 × 2) once IQ2_XXS/IQ3_XXS joined the grid and moved every later seed.
// A wrong min or scale reads ≥ 1e-2. Their bit-exactness is ggml-exact.test.ts's.
const LLAMA_Q8_1_INT8_MAX = 2e-4;
const EXACT_VS_LLAMA_MIN_F16 = 10 * LLAMA_BEYOND_TIES_MAX;

/** Bit-for-bit equality of two results (the same kernels on the same inputs sum in the same order). */
function sameBits(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

const measured = new Map<string, number>();

// ---------------------------------------------------------------------------------------------

describe('expert FFN kernels on WebGPU', { concurrency: 1 }, () => {
  // A missing adapter fails every test below (not a hook error, which node:test reports as "cancelled").
  before(async () => {
    try {
      await openGpu();
    } catch (e) {
      openError = e;
    }
  });
  beforeEach(() => {
    if (openError) throw openError;
  });
  after(() => {
    for (const d of extraDevices) d.destroy();
    device?.destroy();
    if (measured.size > 0) {
      const lines = [...measured].map(([k, v]) => `${k}: ${v.toExponential(2)}`);
      console.log(`max NMSE per type:\n  ${lines.join('\n  ')}`);
    }
    if (llamaMeasured.size > 0) {
      const lines = [...llamaMeasured].map(
        ([k, v]) =>
          `${k}: NMSE ${v.nmse.toExponential(2)}, beyond ties ${v.beyond.toExponential(2)} (${v.ties} ties in ${v.elements} h elements)`,
      );
      console.log(`llama numerics against the rounded reference, worst per type and path:\n  ${lines.join('\n  ')}`);
    }
  });

  let seed = 1;
  // Every decode case runs on both variants of the decode kernels: 'base' (workgroup-memory reduction) and
  // 'subgroups' (shuffles), which needs the adapter's feature and a passing layout probe.
  for (const variant of ['base', 'subgroups'] as const) {
    const features = variant === 'base' ? [] : [variant];
    for (const { name, types, sizes } of GRID) {
      for (const [nEmbd, ff, nExpert] of sizes) {
        test(`decode (${variant}): ${name} nEmbd=${nEmbd} ff=${ff} ${nExpert} experts matches the CPU reference`, async (t) => {
          if (variant === 'subgroups' && !device.features.has('subgroups')) {
            t.skip("the adapter has no 'subgroups' feature; the base variant above covers this case");
            return;
          }
          const { slice, experts } = makeSlice(types, nEmbd, ff, nExpert, seed++);
          const rt = await ExpertRuntime.create(device, slice, { label: `test ${name}`, features });
          const key = `decode ${variant} ${name}`;
          try {
            assert.deepEqual(rt.capabilities().kernelFeatures, features);
            const bound = types.gate === T.F32 && types.up === T.F32 && types.down === T.F32 ? NMSE_MAX_F32 : NMSE_MAX;
            for (const nTokens of N_TOKENS) {
              for (const nUsed of N_USED) {
                const c = makeCall(nEmbd, nExpert, nTokens, nUsed, seed++);
                const got = await rt.compute(c.rows, c.ids, c.probs, nTokens, nUsed, { regime: 'decode' });
                const e = nmse(got, referenceCall(experts, c));
                measured.set(key, Math.max(measured.get(key) ?? 0, e));
                assert.ok(e <= bound && e <= NMSE_CONTRACT, `nTokens=${nTokens} nUsed=${nUsed}: NMSE ${e} > ${bound}`);
              }
            }
            t.diagnostic(`max NMSE ${measured.get(key)?.toExponential(2)}`);
          } finally {
            rt.dispose();
          }
        });
      }
    }
  }

  // The batched cases run on both variants of the batched kernels: 'base' (f32 tiles) and 'shader-f16' (f16 tiles),
  // which needs the adapter's feature (SwiftShader has none: skipped there with the reason).
  for (const variant of ['base', 'shader-f16'] as const) {
    const features = variant === 'base' ? [] : [variant];
    for (const { name, types, sizes } of BATCHED_GRID) {
      for (const [shapeIndex, [nEmbd, ff]] of sizes.entries()) {
        // 'auto' against the forced regime, batched against decode (tens of pairs: seconds of decode on SwiftShader)
        // and the partial and multi-tile calls: in `npm test` on one type of each block size and the mix, which run
        // the same tile code as every type; every type's weights are held to the reference here and in decode anyway.
        const representative = FULL_KERNEL_GRID || types.gate !== types.up || BLOCK_FAMILY_TYPES.includes(types.gate);
        const extra = variant === 'base' && shapeIndex === sizes.length - 1 && representative;
        // The other types' weights in one call, a full tile per expert (partial and several tiles: the representatives').
        const calls: [number, number][] = representative ? BATCHED_CALLS : [[16, 4]];
        test(`batched (${variant}): ${name} nEmbd=${nEmbd} ff=${ff} ${BATCHED_EXPERTS} experts matches the CPU reference${extra ? ', auto and decode' : ''}`, async (t) => {
          if (variant === 'shader-f16' && !device.features.has('shader-f16')) {
            t.skip("the adapter has no 'shader-f16' feature; the base variant covers this case");
            return;
          }
          const { slice, experts } = makeSlice(types, nEmbd, ff, BATCHED_EXPERTS, seed++);
          const rt = await ExpertRuntime.create(device, slice, { label: `test batched ${name}`, features });
          const key = `batched ${variant} ${name}`;
          try {
            const bound =
              variant === 'shader-f16'
                ? NMSE_MAX_F16
                : types.gate === T.F32 && types.up === T.F32 && types.down === T.F32
                  ? NMSE_MAX_F32
                  : NMSE_MAX;
            for (const [nTokens, nUsed] of calls) {
              const c = makeCall(nEmbd, BATCHED_EXPERTS, nTokens, nUsed, seed++);
              const what = `nTokens=${nTokens} nUsed=${nUsed}`;
              const batched = await rt.compute(c.rows, c.ids, c.probs, nTokens, nUsed, { regime: 'batched' });
              const e = nmse(batched, referenceCall(experts, c));
              measured.set(key, Math.max(measured.get(key) ?? 0, e));
              assert.ok(e <= bound && e <= NMSE_CONTRACT, `${what}: NMSE ${e} > ${bound}`);
              // At least 8 pairs per used expert: the policy picks batched, and 'auto' runs exactly that.
              const plan = rt.planRegime(c.ids, nTokens, nUsed);
              assert.equal(plan.regime, 'batched', `${what}: ${plan.reason}`);
              // The slower checks on each type's smallest call only (decode takes seconds for 256 pairs on SwiftShader).
              if (extra && nTokens === BATCHED_CALLS[0]![0] && nUsed === BATCHED_CALLS[0]![1]) {
                assert.ok(
                  sameBits(await rt.compute(c.rows, c.ids, c.probs, nTokens, nUsed), batched),
                  `${what}: auto differs from batched`,
                );
                const decode = await rt.compute(c.rows, c.ids, c.probs, nTokens, nUsed, { regime: 'decode' });
                const d = nmse(batched, decode);
                assert.ok(d <= REGIMES_NMSE_MAX, `${what}: batched vs decode NMSE ${d}`);
              }
            }
            t.diagnostic(`max NMSE ${measured.get(key)?.toExponential(2)}`);
          } finally {
            rt.dispose();
          }
        });
      }
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Numerics 'llama': every type × both regimes × every integer-dot path, against the reference with ggml's rounding.

  /** Every kernel type (llama shapes by block size: floats 64 × 96, blocks of 32 96 × 64, super-blocks one per row). */
  const llamaShape = (t: GGMLType): [number, number] => {
    const b = requireQuantType(t).blockSize;
    return b === 1 ? [64, 96] : b === 32 ? [96, 64] : [b, b];
  };
  const LLAMA_GRID: { name: string; types: SliceTypes; nEmbd: number; ff: number }[] = [
    ...KERNEL_TYPES_HERE.map((t) => {
      const [nEmbd, ff] = llamaShape(t);
      return { name: typeName(t), types: same(t), nEmbd, ff };
    }),
    // two-pass up with int8 kernels (gate and up both round to Q8_K); two row roundings (f16, bf16) and a packed down
    { name: 'mix Q4_K/Q5_K/Q6_K', types: { gate: T.Q4_K, up: T.Q5_K, down: T.Q6_K }, nEmbd: 256, ff: 256 },
    { name: 'mix F16/BF16/Q8_0', types: { gate: T.F16, up: T.BF16, down: T.Q8_0 }, nEmbd: 64, ff: 64 },
  ];
  const LLAMA_EXPERTS = 4;
  const hasInt8 = (types: SliceTypes): boolean => [types.gate, types.up, types.down].some((t) => INT8_TYPES.has(t));
  /** Worst plain NMSE and NMSE beyond ties per type and path, and the ties seen (printed after the file). */
  const llamaMeasured = new Map<string, { nmse: number; beyond: number; ties: number; elements: number }>();
  const noteLlama = (key: string, r: { nmse: number; beyondTies: number; ties: number; elements: number }): void => {
    const m = llamaMeasured.get(key) ?? { nmse: 0, beyond: 0, ties: 0, elements: 0 };
    llamaMeasured.set(key, {
      nmse: Math.max(m.nmse, r.nmse),
      beyond: Math.max(m.beyond, r.beyondTies),
      ties: m.ties + r.ties,
      elements: m.elements + r.elements,
    });
  };

  for (const { name, types, nEmbd, ff } of LLAMA_GRID) {
    test(`llama numerics: ${name} nEmbd=${nEmbd} ff=${ff}, decode (every integer-dot path) and batched, match the rounded reference`, async (t) => {
      const { slice, experts } = makeSlice(types, nEmbd, ff, LLAMA_EXPERTS, seed++);
      const decodeCalls = [makeCall(nEmbd, LLAMA_EXPERTS, 1, 2, seed++), makeCall(nEmbd, LLAMA_EXPERTS, 5, 2, seed++)];
      const batchedCall = makeCall(nEmbd, LLAMA_EXPERTS, 16, 4, seed++);
      const paths: ('auto' | IntegerDot)[] = hasInt8(types) ? ['packed', 'unpacked', 'float'] : ['auto'];
      const outs = new Map<string, Float32Array[]>();
      for (const integerDot of paths) {
        if (integerDot === 'packed' && !gpu.wgslLanguageFeatures.has('packed_4x8_integer_dot_product')) {
          t.diagnostic('packed skipped: no packed_4x8_integer_dot_product here');
          continue;
        }
        const rt = await ExpertRuntime.create(device, slice, { numerics: 'llama', integerDot, label: `llama ${name} ${integerDot}` });
        try {
          const caps = rt.capabilities();
          assert.equal(caps.numerics, 'llama');
          assert.equal(caps.integerDot, hasInt8(types) ? integerDot : 'float', caps.integerDotReason);
          const key = `llama decode ${name} ${caps.integerDot}`;
          const got: Float32Array[] = [];
          for (const c of decodeCalls) {
            const out = await rt.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime: 'decode' });
            got.push(out);
            const r = compareLlama(experts, c, out);
            noteLlama(key, r);
            const q8_1 = caps.integerDot !== 'float' && [types.gate, types.up, types.down].some((t) => Q8_1_WEIGHT_TYPES.has(t));
            assert.ok(
              r.beyondTies <= (q8_1 ? LLAMA_Q8_1_INT8_MAX : LLAMA_BEYOND_TIES_MAX),
              `${key} ${c.nTokens}×${c.nUsed}: NMSE beyond ties ${r.beyondTies} (plain ${r.nmse}, ${r.ties} ties)`,
            );
          }
          outs.set(integerDot, got);
          if (integerDot === paths[0]) {
            // The batched regime reads rounded values (the float kernels), whatever integerDot says.
            const c = batchedCall;
            const out = await rt.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime: 'batched' });
            const bound = Math.max(LLAMA_BEYOND_TIES_MAX, boundFor(rt, 'batched'));
            const r = compareLlama(experts, c, out);
            noteLlama(`llama batched ${name}${bound > LLAMA_BEYOND_TIES_MAX ? ' (f16 tiles)' : ''}`, r);
            assert.ok(r.beyondTies <= bound, `batched: NMSE beyond ties ${r.beyondTies} > ${bound} (plain ${r.nmse}, ${r.ties} ties)`);
          }
        } finally {
          rt.dispose();
        }
      }
      // dot4I8Packed and its unpacked fallback are both exact integer sums: the same bits.
      const packed = outs.get('packed');
      const unpacked = outs.get('unpacked');
      if (packed && unpacked) {
        packed.forEach((p, i) => {
          assert.ok(sameBits(p, unpacked[i]!), `packed and unpacked differ (call ${i})`);
        });
      }
      const m = [...llamaMeasured].filter(([k]) => k.includes(` ${name} `) || k.endsWith(` ${name}`));
      t.diagnostic(m.map(([k, v]) => `${k}: NMSE ${v.nmse.toExponential(1)}, beyond ties ${v.beyond.toExponential(1)}`).join('; '));
    });
  }

  test('llama numerics is not exact numerics: exact results miss the rounded reference by orders of magnitude (Q8_0, Q4_K, F16)', async (t) => {
    for (const type of [T.Q8_0, T.Q4_K, T.F16]) {
      const k = type === T.Q4_K;
      const [nEmbd, ff] = k ? [256, 256] : [64, 96];
      const { slice, experts } = makeSlice(same(type), nEmbd, ff, LLAMA_EXPERTS, seed++);
      const exact = await ExpertRuntime.create(device, slice, { features: [] });
      const llama = await ExpertRuntime.create(device, slice, { features: [], numerics: 'llama' });
      try {
        assert.equal(exact.capabilities().numerics, 'exact');
        assert.equal(exact.capabilities().integerDot, null);
        for (const [regime, c] of [
          ['decode', makeCall(nEmbd, LLAMA_EXPERTS, 3, 2, seed++)],
          ['batched', makeCall(nEmbd, LLAMA_EXPERTS, 16, 4, seed++)],
        ] as const) {
          const e = await exact.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime });
          const l = await llama.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime });
          const ofExact = compareLlama(experts, c, e);
          const ofLlama = compareLlama(experts, c, l);
          // The exact result is right against the exact reference, and far from the rounded one.
          assert.ok(nmse(e, referenceCall(experts, c)) <= NMSE_MAX);
          assert.ok(
            ofExact.beyondTies >= (type === T.F16 ? EXACT_VS_LLAMA_MIN_F16 : EXACT_VS_LLAMA_MIN),
            `${GGMLType[type]} ${regime}: exact numerics is within ${ofExact.beyondTies} of the rounded reference`,
          );
          assert.ok(ofLlama.beyondTies <= LLAMA_BEYOND_TIES_MAX, `${GGMLType[type]} ${regime}: ${ofLlama.beyondTies}`);
          // The comparison itself has teeth: the llama result with its sums 1% off fails it by orders of magnitude.
          const off = compareLlama(
            experts,
            c,
            l.map((v) => v * 1.01),
          );
          assert.ok(off.beyondTies >= EXACT_VS_LLAMA_MIN, `${GGMLType[type]} ${regime}: sums × 1.01 within ${off.beyondTies}`);
          t.diagnostic(
            `${GGMLType[type]} ${regime}: exact vs rounded reference NMSE ${ofExact.nmse.toExponential(1)} (beyond ties ` +
              `${ofExact.beyondTies.toExponential(1)}); llama ${ofLlama.nmse.toExponential(1)} (${ofLlama.beyondTies.toExponential(1)}); ` +
              `llama × 1.01 ${off.beyondTies.toExponential(1)}`,
          );
        }
      } finally {
        exact.dispose();
        llama.dispose();
      }
    }
  });

  test('llama numerics on split slices: the same bits as one part, and the rounded reference, in both regimes', async () => {
    const cases: { name: string; types: SliceTypes; nEmbd: number; ff: number; nExpert: number }[] = [
      { name: 'Q4_K', types: same(T.Q4_K), nEmbd: 256, ff: 256, nExpert: 4 },
      { name: 'Q4_0 + F16 down, unaligned parts', types: { gate: T.Q4_0, up: T.Q4_0, down: T.F16 }, nEmbd: 32, ff: 33, nExpert: 4 },
    ];
    for (const k of cases) {
      const { slice, experts } = makeSlice(k.types, k.nEmbd, k.ff, k.nExpert, seed++);
      const bytes = sliceMatrixBytes(slice);
      const maxBindingBytes = Math.ceil(Math.max(bytes.gate, bytes.up, bytes.down) / k.nExpert / 4) * 4; // one expert per part
      const split = await ExpertRuntime.create(device, slice, { numerics: 'llama', maxBindingBytes });
      const whole = await ExpertRuntime.create(device, slice, { numerics: 'llama' });
      try {
        assert.equal(split.capabilities().weightParts, k.nExpert);
        const regimes = batchedSupported(slice) ? (['decode', 'batched'] as const) : (['decode'] as const);
        for (const regime of regimes) {
          const c = makeCall(k.nEmbd, k.nExpert, regime === 'decode' ? 3 : 16, 2, seed++);
          const a = await split.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime });
          const b = await whole.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime });
          assert.ok(sameBits(a, b), `${k.name} ${regime}: split and whole differ`);
          const r = compareLlama(experts, c, a);
          noteLlama(`llama ${regime} split ${k.name}`, r);
          const bound = Math.max(LLAMA_BEYOND_TIES_MAX, boundFor(split, regime));
          assert.ok(r.beyondTies <= bound, `${k.name} ${regime}: NMSE beyond ties ${r.beyondTies} (plain ${r.nmse})`);
        }
      } finally {
        split.dispose();
        whole.dispose();
      }
    }
  });

  test('llama numerics: the int8 decode kernels with subgroup reductions, and a folded 2-D rounding dispatch', async (t) => {
    const { slice, experts } = makeSlice(same(T.Q4_K), 256, 256, 3, seed++);
    const c = makeCall(256, 3, 8, 2, seed++);
    // Rounding: rows 8 × 256 / 4 / 64 = 8 workgroups → 4 × 2, h 16 × 256 → 16 → 6 × 3 at 6 per dimension; every other
    // dispatch folds too (the batched regime: the decode kernels' 16 pairs × 64 row groups do not fit 6 × 6).
    const folded = await ExpertRuntime.create(device, slice, { numerics: 'llama', maxWorkgroupsPerDimension: 6 });
    try {
      const r = compareLlama(experts, c, await folded.compute(c.rows, c.ids, c.probs, 8, 2, { regime: 'batched' }));
      assert.ok(r.beyondTies <= Math.max(LLAMA_BEYOND_TIES_MAX, boundFor(folded, 'batched')), `folded: ${r.beyondTies}`);
    } finally {
      folded.dispose();
    }
    if (!device.features.has('subgroups')) {
      t.skip("the adapter has no 'subgroups' feature");
      return;
    }
    const d = makeCall(256, 3, 3, 2, seed++);
    const outs: Float32Array[] = [];
    for (const features of [['subgroups'], []] as const) {
      const rt = await ExpertRuntime.create(device, slice, { numerics: 'llama', integerDot: 'packed', features });
      try {
        assert.deepEqual(rt.capabilities().kernelFeatures, features);
        const out = await rt.compute(d.rows, d.ids, d.probs, 3, 2, { regime: 'decode' });
        outs.push(out);
        const r = compareLlama(experts, d, out);
        assert.ok(r.beyondTies <= LLAMA_BEYOND_TIES_MAX, `${features.join() || 'base'}: ${r.beyondTies}`);
      } finally {
        rt.dispose();
      }
    }
    assert.ok(nmse(outs[0]!, outs[1]!) <= NMSE_MAX, 'subgroups and base reductions agree');
  });

  test('numerics and integerDot options: checked, reported, and exact numerics unchanged by them', async () => {
    const { slice } = makeSlice(same(T.Q8_0), 64, 32, 2, seed++);
    await rejectsWith(ExpertRuntime.create(device, slice, { numerics: 'ggml' as 'llama' }), 'BAD_OPTION');
    await rejectsWith(ExpertRuntime.create(device, slice, { integerDot: 'int4' as 'packed' }), 'BAD_OPTION');
    const c = makeCall(64, 2, 3, 2, seed++);
    const plain = await ExpertRuntime.create(device, slice);
    const exactFloat = await ExpertRuntime.create(device, slice, { integerDot: 'packed' }); // ignored in exact numerics
    const auto = await ExpertRuntime.create(device, slice, { numerics: 'llama' });
    try {
      assert.equal(plain.numerics, 'exact');
      assert.equal(auto.numerics, 'llama');
      assert.ok(sameBits(await plain.compute(c.rows, c.ids, c.probs, 3, 2), await exactFloat.compute(c.rows, c.ids, c.probs, 3, 2)));
      const caps = auto.capabilities();
      // SwiftShader through Dawn has the packed_4x8_integer_dot_product language feature: 'auto' takes it.
      assert.equal(caps.integerDot, gpu.wgslLanguageFeatures.has('packed_4x8_integer_dot_product') ? 'packed' : 'unpacked');
      assert.match(caps.integerDotReason, /packed/);
    } finally {
      plain.dispose();
      exactFloat.dispose();
      auto.dispose();
    }
    // A page whose navigator.gpu.wgslLanguageFeatures lacks the packed dot: 'auto' takes the unpacked int8 kernels
    // (bit for bit the packed ones' result, as the coordinator computes), 'packed' is refused, 'float' still builds.
    const had = Object.getOwnPropertyDescriptor(globalThis, 'navigator');
    Object.defineProperty(globalThis, 'navigator', { value: { gpu: { wgslLanguageFeatures: new Set<string>() } }, configurable: true });
    try {
      const noPacked = await ExpertRuntime.create(device, slice, { numerics: 'llama' });
      const unpacked = await ExpertRuntime.create(device, slice, { numerics: 'llama', integerDot: 'unpacked' });
      const float = await ExpertRuntime.create(device, slice, { numerics: 'llama', integerDot: 'float' });
      try {
        assert.equal(noPacked.capabilities().integerDot, 'unpacked');
        assert.match(noPacked.capabilities().integerDotReason, /wgslLanguageFeatures lacks packed_4x8_integer_dot_product/);
        assert.equal(unpacked.capabilities().integerDot, 'unpacked');
        assert.equal(float.capabilities().integerDot, 'float');
        const a = await noPacked.compute(c.rows, c.ids, c.probs, 3, 2, { regime: 'decode' });
        const b = await unpacked.compute(c.rows, c.ids, c.probs, 3, 2, { regime: 'decode' });
        const f = await float.compute(c.rows, c.ids, c.probs, 3, 2, { regime: 'decode' });
        assert.ok(sameBits(a, b), 'the fallback is the unpacked path');
        assert.ok(nmse(f, b) <= NMSE_MAX, 'the float and unpacked paths agree');
      } finally {
        noPacked.dispose();
        unpacked.dispose();
        float.dispose();
      }
      await rejectsWith(ExpertRuntime.create(device, slice, { numerics: 'llama', integerDot: 'packed' }), 'FEATURE_UNAVAILABLE', {
        feature: 'packed_4x8_integer_dot_product',
        reason: 'navigator.gpu.wgslLanguageFeatures lacks packed_4x8_integer_dot_product',
      });
    } finally {
      if (had) Object.defineProperty(globalThis, 'navigator', had);
      else delete (globalThis as { navigator?: unknown }).navigator;
    }
    // F16 weights have no 8-bit activations: llama numerics rounds to f16 and the float kernels read it.
    const half = await ExpertRuntime.create(device, makeSlice(same(T.F16), 64, 32, 2, seed++).slice, { numerics: 'llama' });
    try {
      assert.equal(half.capabilities().integerDot, 'float');
      assert.match(half.capabilities().integerDotReason, /no 8-bit activations/);
    } finally {
      half.dispose();
    }
  });

  test('batched: skewed routing, small tiles and a folded 2-D dispatch give the reference result', async () => {
    // 40 tokens × top-2 of 4: expert 0 takes every token's first pick, expert 2 most second picks, expert 3 the
    // rest, expert 1 nothing. Tiles of 8: 5 + 5 (the last of 3 rows) + 1 (5 rows) = 11.
    const { slice, experts } = makeSlice(same(T.Q8_0), 64, 96, 4, 601);
    const c = makeCall(64, 4, 40, 2, 602);
    for (let t = 0; t < 40; t++) {
      c.ids[2 * t] = 0;
      c.ids[2 * t + 1] = t < 35 ? 2 : 3;
    }
    const tuning = { workgroupSize: 64, tileRows: 8, tileCols: 16 };
    const groups = groupByExpert(c.ids, expertCounts(c.ids, 4), tuning.tileRows);
    assert.equal(groups.nTiles, 11);
    // up: 11 tiles × 96/16 = 66 workgroups → 10 × 7 (4 padding); down: 11 × 64/16 = 44 → 9 × 5 (1 padding)
    assert.deepEqual(foldDispatch(batchedWorkgroups(11, 96, 16), 10), [10, 7]);
    assert.deepEqual(foldDispatch(batchedWorkgroups(11, 64, 16), 10), [9, 5]);
    const rt = await ExpertRuntime.create(device, slice, { ...tuning, maxWorkgroupsPerDimension: 10 });
    // Decode on default tuning (its 80 pairs × 96/4 row groups would not fold into 10 × 10).
    const rtDecode = await ExpertRuntime.create(device, slice);
    try {
      const batched = await rt.compute(c.rows, c.ids, c.probs, 40, 2, { regime: 'batched' });
      assert.ok(nmse(batched, referenceCall(experts, c)) <= boundFor(rt, 'batched'));
      const decode = await rtDecode.compute(c.rows, c.ids, c.probs, 40, 2, { regime: 'decode' });
      assert.ok(nmse(batched, decode) <= Math.max(REGIMES_NMSE_MAX, boundFor(rt, 'batched')));
    } finally {
      rt.dispose();
      rtDecode.dispose();
    }
  });

  test('auto runs what the policy plans; a slice the batched kernels cannot read stays on decode', async () => {
    const { slice, experts } = makeSlice(same(T.F16), 64, 32, 4, 701);
    const rt = await ExpertRuntime.create(device, slice);
    try {
      const few = makeCall(64, 4, 3, 1, 702); // 3 pairs on up to 3 experts: ~1 per expert
      const many = makeCall(64, 4, 16, 2, 703); // 32 pairs on 4 experts
      const cases: [Call, RegimeDecision['regime']][] = [
        [few, 'decode'],
        [many, 'batched'],
      ];
      for (const [c, regime] of cases) {
        assert.equal(rt.planRegime(c.ids, c.nTokens, c.nUsed).regime, regime);
        const auto = await rt.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed);
        const forced = await rt.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime });
        assert.ok(sameBits(auto, forced), `auto differs from ${regime}`);
        assert.ok(nmse(auto, referenceCall(experts, c)) <= boundFor(rt, regime));
      }
      await rejectsWith(rt.compute(many.rows, many.ids, many.probs, 16, 2, { regime: 'fast' as 'auto' }), 'REGIME_UNAVAILABLE', {
        regime: 'fast',
        reason: 'unknown',
      });
    } finally {
      rt.dispose();
    }
    // nEmbd = 30: rows are not whole quads. auto keeps to decode; asking for batched is refused with the reason.
    const odd = makeSlice(same(T.F32), 30, 20, 2, 704);
    const rtOdd = await ExpertRuntime.create(device, odd.slice);
    try {
      const c = makeCall(30, 2, 16, 2, 705);
      assert.deepEqual(rtOdd.planRegime(c.ids, 16, 2), { regime: 'decode', reason: 'rows-not-quads', pairsPerExpert: 16 });
      assert.ok(nmse(await rtOdd.compute(c.rows, c.ids, c.probs, 16, 2), referenceCall(odd.experts, c)) <= NMSE_MAX_F32);
      await rejectsWith(rtOdd.compute(c.rows, c.ids, c.probs, 16, 2, { regime: 'batched' }), 'REGIME_UNAVAILABLE', {
        regime: 'batched',
        reason: 'rows-not-quads',
      });
    } finally {
      rtOdd.dispose();
    }
  });

  test('a dispatch folded into 2-D (more workgroups than one dimension allows) gives the same result', async () => {
    const { slice, experts } = makeSlice(same(T.Q4_0), 128, 64, 3, 101);
    // Workgroups: up 10 pairs × 64/8 rows = 80 → 12 × 7; down 10 × 128/8 = 160 → 13 × 13; both with padding.
    assert.deepEqual(foldDispatch(80, 13), [12, 7]);
    assert.deepEqual(foldDispatch(160, 13), [13, 13]);
    const rt = await ExpertRuntime.create(device, slice, { maxWorkgroupsPerDimension: 13, rowsPerWorkgroup: 8 });
    try {
      const c = makeCall(128, 3, 5, 2, 102);
      const got = await rt.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime: 'decode' });
      assert.ok(nmse(got, referenceCall(experts, c)) <= boundFor(rt, 'decode'));
    } finally {
      rt.dispose();
    }
  });

  test('concurrent calls on one runtime each get their own buffers and results', async () => {
    const { slice, experts } = makeSlice(same(T.Q8_0), 64, 32, 4, 201);
    const rt = await ExpertRuntime.create(device, slice);
    try {
      const calls = [makeCall(64, 4, 3, 2, 202), makeCall(64, 4, 8, 2, 203), makeCall(64, 4, 3, 2, 204)];
      const outs = await Promise.all(calls.map((c) => rt.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed)));
      outs.forEach((o, i) => {
        assert.ok(nmse(o, referenceCall(experts, calls[i]!)) <= boundFor(rt, ranRegime(rt, calls[i]!)), `call ${i}`);
      });
      // Recycled only after completion: nothing is left in use, and a later call reuses the pooled buffers.
      const before = rt.memory().pool;
      assert.equal(before.inUse, 0);
      await rt.compute(calls[0]!.rows, calls[0]!.ids, calls[0]!.probs, 3, 2);
      assert.equal(rt.memory().pool.free, before.free);
      assert.deepEqual(await rt.compute(new Float32Array(0), new Int32Array(0), new Float32Array(0), 0, 2), new Float32Array(0));
    } finally {
      rt.dispose();
    }
  });

  test('bad inputs throw typed errors naming the input and the numbers', async () => {
    const { slice } = makeSlice(same(T.Q4_0), 64, 32, 2, 301);
    const rt = await ExpertRuntime.create(device, slice);
    try {
      const c = makeCall(64, 2, 3, 2, 302);
      const cases: [string, () => Promise<unknown>, ExpertRuntimeErrorCode, object][] = [
        [
          'id = nExpert',
          () => rt.compute(c.rows, Int32Array.of(0, 1, 1, 0, 2, 0), c.probs, 3, 2),
          'ID_OUT_OF_RANGE',
          { index: 4, id: 2, nExpert: 2 },
        ],
        [
          'negative id',
          () => rt.compute(c.rows, Int32Array.of(0, -1, 1, 0, 1, 0), c.probs, 3, 2),
          'ID_OUT_OF_RANGE',
          { index: 1, id: -1, nExpert: 2 },
        ],
        [
          'short rows',
          () => rt.compute(c.rows.subarray(1), c.ids, c.probs, 3, 2),
          'BAD_INPUT',
          { input: 'rows', expected: 192, actual: 191 },
        ],
        ['ids for another nUsed', () => rt.compute(c.rows, c.ids, c.probs, 3, 1), 'BAD_INPUT', { input: 'ids', expected: 3, actual: 6 }],
        ['long probs', () => rt.compute(c.rows, c.ids, new Float32Array(7), 3, 2), 'BAD_INPUT', { input: 'probs', expected: 6, actual: 7 }],
        [
          'nUsed = 0',
          () => rt.compute(c.rows, c.ids, c.probs, 3, 0),
          'BAD_SHAPE',
          { field: 'nUsed', value: 0, requirement: 'a positive integer' },
        ],
        [
          'fractional nTokens',
          () => rt.compute(c.rows, c.ids, c.probs, 2.5, 2),
          'BAD_SHAPE',
          { field: 'nTokens', value: 2.5, requirement: 'an integer ≥ 0' },
        ],
      ];
      for (const [what, call, code, details] of cases) {
        await rejectsWith(call, code, details).catch((e: unknown) => assert.fail(`${what}: ${String(e)}`));
      }
      // A slice that does not fit its own shape, or a type the kernels cannot read.
      await rejectsWith(ExpertRuntime.create(device, { ...slice, down: slice.down.subarray(1) }), 'BAD_SLICE_BYTES', {
        matrix: 'down',
        expected: slice.down.length,
        actual: slice.down.length - 1,
      });
      const unreadable = allQuantTypes().find((q) => !KERNEL_GRID_TYPES.includes(q.type) && q.blockSize === 32);
      assert.ok(unreadable, 'a type of blocks of 32 the kernels do not read');
      await rejectsWith(ExpertRuntime.create(device, { ...slice, types: { ...slice.types, up: unreadable.type } }), 'UNSUPPORTED_TYPE');
      await rejectsWith(ExpertRuntime.create(device, { ...slice, types: same(T.Q4_K) }), 'BAD_SHAPE');
      await rejectsWith(ExpertRuntime.create(device, slice, { workgroupSize: 48 }), 'BAD_OPTION');
      // Tiles: tileCols must divide the workgroup; each thread holds tileRows / (64 / tileCols) ≤ 16 rows.
      // 16 × 64 needs 20 KiB of workgroup memory, over the default 16 KiB this device has.
      const tiles: [number, number, string][] = [
        [13, 32, 'tileRows'],
        [1, 32, 'tileRows'],
        [32, 64, 'tileRows'],
        [16, 128, 'tileCols'],
        [16, 24, 'tileCols'],
        [16, 64, 'tileCols'],
      ];
      assert.equal(device.limits.maxComputeWorkgroupStorageSize, 16384);
      for (const [tileRows, tileCols, option] of tiles) {
        await assert.rejects(
          ExpertRuntime.create(device, slice, { tileRows, tileCols }),
          (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'BAD_OPTION' && (e.details as { option: string }).option === option,
          `tileRows=${tileRows} tileCols=${tileCols} should be refused for ${option}`,
        );
      }
      // The runtime still works after all that.
      await rt.compute(c.rows, c.ids, c.probs, 3, 2);
    } finally {
      rt.dispose();
    }
  });

  // Splitting: each matrix is cut by expert ranges into parts of at most maxBindingBytes. The cases: three parts of
  // 2 + 2 + 1 experts; parts whose byte lengths are not multiples of 4 (Q4_0 rows of 18 bytes × 33 rows); one
  // expert per part; and routing that leaves a part with no pairs. Split and whole slices run the same per-pair
  // arithmetic, so their results must be bit-identical, and both match the reference.
  const SPLIT_CASES: { name: string; types: SliceTypes; nEmbd: number; ff: number; nExpert: number; perPart: number }[] = [
    { name: 'Q4_K', types: same(T.Q4_K), nEmbd: 256, ff: 256, nExpert: 5, perPart: 2 },
    {
      name: 'Q4_0 + F16 down, unaligned parts',
      types: { gate: T.Q4_0, up: T.Q4_0, down: T.F16 },
      nEmbd: 32,
      ff: 33,
      nExpert: 4,
      perPart: 1,
    },
    { name: 'F32', types: same(T.F32), nEmbd: 64, ff: 32, nExpert: 6, perPart: 4 },
  ];
  for (const k of SPLIT_CASES) {
    test(`split slice: ${k.name}, ${k.nExpert} experts in parts of ${k.perPart}, both regimes, same bits as one part`, async () => {
      const { slice, experts } = makeSlice(k.types, k.nEmbd, k.ff, k.nExpert, seed++);
      const bytes = sliceMatrixBytes(slice);
      // The binding cap that fits exactly perPart experts of the largest matrix.
      const perExpert = Math.max(bytes.gate, bytes.up, bytes.down) / k.nExpert;
      const maxBindingBytes = Math.ceil((k.perPart * perExpert) / 4) * 4;
      const split = await ExpertRuntime.create(device, slice, { maxBindingBytes, tileRows: 16 });
      const whole = await ExpertRuntime.create(device, slice);
      try {
        const caps = split.capabilities();
        assert.equal(caps.weightParts, Math.ceil(k.nExpert / k.perPart));
        assert.equal(caps.maxBindingBytes, maxBindingBytes);
        assert.equal(whole.capabilities().weightParts, 1);
        assert.equal(split.memory().weightBuffers, 3 * caps.weightParts);
        const regimes = batchedSupported(slice) ? (['decode', 'batched'] as const) : (['decode'] as const);
        for (const regime of regimes) {
          for (const [nTokens, nUsed] of [
            [3, 2],
            [16, 2],
          ] as const) {
            const c = makeCall(k.nEmbd, k.nExpert, nTokens, nUsed, seed++);
            const a = await split.compute(c.rows, c.ids, c.probs, nTokens, nUsed, { regime });
            const b = await whole.compute(c.rows, c.ids, c.probs, nTokens, nUsed, { regime });
            assert.ok(sameBits(a, b), `${regime} ${nTokens}×${nUsed}: split and whole differ`);
            assert.ok(nmse(a, referenceCall(experts, c)) <= boundFor(split, regime), `${regime} ${nTokens}×${nUsed}`);
          }
          // Every pair on the last expert: the other parts dispatch nothing.
          const c = makeCall(k.nEmbd, k.nExpert, 4, 1, seed++);
          c.ids.fill(k.nExpert - 1);
          const a = await split.compute(c.rows, c.ids, c.probs, 4, 1, { regime });
          assert.ok(sameBits(a, await whole.compute(c.rows, c.ids, c.probs, 4, 1, { regime })), `${regime}: one part only`);
        }
      } finally {
        split.dispose();
        whole.dispose();
      }
    });
  }

  test('an expert larger than one binding is refused with the numbers', async () => {
    const { slice } = makeSlice(same(T.F32), 64, 32, 2, seed++);
    await rejectsWith(ExpertRuntime.create(device, slice, { maxBindingBytes: 4096 }), 'BINDING_TOO_LARGE', {
      matrix: 'gate',
      bytes: 64 * 32 * 4,
      limit: 4096,
      limitName: 'the maxBindingBytes option',
    });
    // The device's own limit: a device with the WebGPU defaults (128 MiB per binding) and one F32 gate of 4096 ×
    // 8224 (> 128 MiB). The arrays are zero-filled and never touched, so they cost address space, not memory.
    const second = await gpu.requestAdapter();
    assert.ok(second, 'requestAdapter() returned null for a second adapter');
    const small = await second.requestDevice({ label: 'kernels.test default-limit device' });
    extraDevices.push(small);
    const limit = small.limits.maxStorageBufferBindingSize;
    const types: SliceTypes = { gate: T.F32, up: T.Q4_0, down: T.Q4_0 };
    const big = { nEmbd: 4096, ff: 8224, nExpert: 1, types };
    const bytes = sliceMatrixBytes(big);
    assert.ok(bytes.gate > limit, `gate ${bytes.gate} vs ${limit}`);
    await rejectsWith(
      ExpertRuntime.create(small, {
        ...big,
        gate: new Uint8Array(bytes.gate),
        up: new Uint8Array(bytes.up),
        down: new Uint8Array(bytes.down),
      }),
      'BINDING_TOO_LARGE',
      { matrix: 'gate', bytes: bytes.gate, limit, limitName: 'maxStorageBufferBindingSize' },
    );
    await rejectsWith(ExpertRuntime.create(device, slice, { maxBindingBytes: 0 }), 'BAD_OPTION');
  });

  test('features: auto picks subgroups where the probe passes, base without the feature; asking for a missing one throws', async (t) => {
    const { slice } = makeSlice(same(T.Q8_0), 64, 32, 2, seed++);
    const second = await gpu.requestAdapter();
    assert.ok(second);
    const plain = await second.requestDevice({ label: 'kernels.test device without subgroups' });
    extraDevices.push(plain);
    const rt = await ExpertRuntime.create(plain, slice);
    try {
      assert.deepEqual(rt.capabilities().kernelFeatures, []);
      assert.match(rt.capabilities().kernelFeaturesReason, /without the 'subgroups' feature/);
    } finally {
      rt.dispose();
    }
    await rejectsWith(ExpertRuntime.create(plain, slice, { features: ['subgroups'] }), 'FEATURE_UNAVAILABLE');
    await rejectsWith(ExpertRuntime.create(plain, slice, { features: ['shader-f16'] }), 'FEATURE_UNAVAILABLE', {
      feature: 'shader-f16',
      reason: "the device was created without the 'shader-f16' feature",
    });
    await rejectsWith(ExpertRuntime.create(plain, slice, { features: ['fast-math' as 'subgroups'] }), 'BAD_OPTION');
    if (!device.features.has('subgroups')) {
      t.skip("the adapter has no 'subgroups' feature");
      return;
    }
    const auto = await ExpertRuntime.create(device, slice);
    try {
      assert.ok(auto.capabilities().kernelFeatures.includes('subgroups'));
      t.diagnostic(auto.capabilities().kernelFeaturesReason);
    } finally {
      auto.dispose();
    }
  });

  test('device lost: reported, rebuilt on a new device, the interrupted and later calls served', async () => {
    const { slice, experts } = makeSlice(same(T.Q4_K), 256, 256, 3, seed++);
    const c = makeCall(256, 3, 4, 2, seed++);
    const first = await testDevice('kernels.test device to lose');
    const events: RuntimeEvent[] = [];
    const newDevices: GPUDevice[] = [];
    const rt = await ExpertRuntime.create(first, slice, {
      onEvent: (e) => events.push(e),
      recovery: {
        requestDevice: async () => {
          const d = await testDevice('kernels.test replacement device');
          newDevices.push(d);
          return d;
        },
      },
    });
    try {
      const before = await rt.compute(c.rows, c.ids, c.probs, 4, 2);
      const inFlight = rt.compute(c.rows, c.ids, c.probs, 4, 2);
      first.destroy();
      const after = await rt.compute(c.rows, c.ids, c.probs, 4, 2);
      assert.ok(sameBits(await inFlight, before), 'the call in flight when the device went');
      assert.ok(sameBits(after, before), 'a call after the loss');
      assert.ok(nmse(after, referenceCall(experts, c)) <= boundFor(rt, ranRegime(rt, c)));
      assert.deepEqual(
        events.map((e) => e.type),
        ['device-lost', 'recovered'],
      );
      assert.equal(newDevices.length, 1);
      assert.equal(rt.memory().weightBuffers, 3);
    } finally {
      rt.dispose();
    }
    // The runtime requested the replacement, so dispose() destroys it.
    const lost = await Promise.race([newDevices[0]!.lost.then((i) => i.reason), new Promise((r) => setTimeout(() => r('alive'), 2000))]);
    assert.equal(lost, 'destroyed');
  });

  test('device lost without recovery, or with a recovery that fails: DEVICE_LOST, reported once', async () => {
    const { slice } = makeSlice(same(T.F16), 64, 32, 2, seed++);
    const c = makeCall(64, 2, 2, 1, seed++);
    for (const recovery of [undefined, { requestDevice: () => Promise.reject(new Error('no adapter today')), attempts: 2 }]) {
      const d = await testDevice('kernels.test device to lose');
      const events: RuntimeEvent[] = [];
      const rt = await ExpertRuntime.create(d, slice, { onEvent: (e) => events.push(e), ...(recovery ? { recovery } : {}) });
      try {
        await rt.compute(c.rows, c.ids, c.probs, 2, 1);
        d.destroy();
        await rejectsWith(rt.compute(c.rows, c.ids, c.probs, 2, 1), 'DEVICE_LOST');
        await rejectsWith(rt.compute(c.rows, c.ids, c.probs, 2, 1), 'DEVICE_LOST');
        const expected = recovery ? ['device-lost', 'recovery-failed'] : ['device-lost'];
        assert.deepEqual(
          events.map((e) => e.type),
          expected,
        );
        if (recovery) assert.deepEqual(events[1], { type: 'recovery-failed', attempts: 2, message: 'no adapter today' });
      } finally {
        rt.dispose();
      }
    }
  });

  test('recovery is bounded: attempts time out, a device lost on arrival uses up the attempts, dispose() frees waiting calls', async () => {
    const { slice } = makeSlice(same(T.Q8_0), 64, 32, 2, seed++);
    const c = makeCall(64, 2, 2, 1, seed++);
    const until = async (what: string, ok: () => boolean): Promise<void> => {
      for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 50));
      assert.ok(ok(), what);
    };
    const never = (): Promise<GPUDevice> => new Promise(() => {});

    // requestDevice() never answers: each attempt times out, then DEVICE_LOST.
    let d = await testDevice('kernels.test device to lose');
    let events: RuntimeEvent[] = [];
    let rt = await ExpertRuntime.create(d, slice, {
      onEvent: (e) => events.push(e),
      recovery: { requestDevice: never, attempts: 2, attemptTimeoutMs: 150 },
    });
    d.destroy();
    await rejectsWith(rt.compute(c.rows, c.ids, c.probs, 2, 1), 'DEVICE_LOST');
    assert.deepEqual(
      events.map((e) => e.type),
      ['device-lost', 'recovery-failed'],
    );
    assert.match((events[1] as { message: string }).message, /recovery attempt 2 took over 150 ms/);
    rt.dispose();

    // Every new device arrives lost: three attempts in all, not a loop.
    d = await testDevice('kernels.test device to lose');
    events = [];
    let requested = 0;
    rt = await ExpertRuntime.create(d, slice, {
      onEvent: (e) => events.push(e),
      recovery: {
        requestDevice: async () => {
          requested++;
          const lost = await testDevice('kernels.test device lost on arrival');
          lost.destroy();
          return lost;
        },
      },
    });
    d.destroy();
    await until('recovery gives up', () => events.some((e) => e.type === 'recovery-failed'));
    assert.ok(requested <= 3, `${requested} devices requested`);
    await rejectsWith(rt.compute(c.rows, c.ids, c.probs, 2, 1), 'DEVICE_LOST');
    rt.dispose();

    // A recovery that hangs (long timeout) and a call waiting on it: dispose() answers the call with DISPOSED. The
    // request is failed once that is checked, so the attempt's 60 s timer ends with it and not the process's life.
    d = await testDevice('kernels.test device to lose');
    let endRequest: (e: Error) => void = () => {};
    const hanging = (): Promise<GPUDevice> =>
      new Promise((_, reject) => {
        endRequest = reject;
      });
    rt = await ExpertRuntime.create(d, slice, { recovery: { requestDevice: hanging, attemptTimeoutMs: 60_000 } });
    d.destroy();
    await new Promise((r) => setTimeout(r, 50));
    const waiting = rt.compute(c.rows, c.ids, c.probs, 2, 1);
    rt.dispose();
    await rejectsWith(waiting, 'DISPOSED');
    endRequest(new Error('the test is over'));
  });

  test('subgroups: rows narrower than, equal to and wider than a subgroup reduce alike', async (t) => {
    if (!device.features.has('subgroups')) {
      t.skip("the adapter has no 'subgroups' feature");
      return;
    }
    const { slice, experts } = makeSlice(same(T.Q8_0), 256, 64, 3, seed++);
    const c = makeCall(256, 3, 3, 2, seed++);
    const want = referenceCall(experts, c);
    // 64 threads per workgroup: 4, 16 and 64 rows per workgroup → 16, 4 and 1 threads per row.
    for (const rowsPerWorkgroup of [4, 16, 64]) {
      const rt = await ExpertRuntime.create(device, slice, { rowsPerWorkgroup, features: ['subgroups'] });
      const base = await ExpertRuntime.create(device, slice, { rowsPerWorkgroup, features: [] });
      try {
        const got = await rt.compute(c.rows, c.ids, c.probs, 3, 2, { regime: 'decode' });
        assert.ok(nmse(got, want) <= NMSE_MAX, `${rowsPerWorkgroup} rows per workgroup`);
        assert.ok(nmse(got, await base.compute(c.rows, c.ids, c.probs, 3, 2, { regime: 'decode' })) <= NMSE_MAX);
      } finally {
        rt.dispose();
        base.dispose();
      }
    }
  });

  test('load() / fromGGUF(): a mini-GGUF slice, streamed in random chunks or in one buffer, computes the same bits as create()', async () => {
    // A 6-expert layer in a model file; the slice is experts [1, 5) of it, as /api/expert-shard cuts it.
    const whole = makeSlice({ gate: T.Q4_0, up: T.Q4_0, down: T.F16 }, 32, 33, 6, seed++); // odd byte lengths
    const mini = await miniGGUF(whole.slice, 1, 5);
    const part = (m: 'gate' | 'up' | 'down'): Uint8Array => {
      const per = whole.slice[m].length / 6;
      return whole.slice[m].subarray(per, 5 * per);
    };
    const bytes: ExpertSlice = { ...whole.slice, nExpert: 4, gate: part('gate'), up: part('up'), down: part('down') };
    const c = makeCall(32, 4, 5, 2, seed++);
    const fromBytes = await ExpertRuntime.create(device, bytes);
    const expected = await fromBytes.compute(c.rows, c.ids, c.probs, 5, 2);
    const bound = boundFor(fromBytes, ranRegime(fromBytes, c));
    fromBytes.dispose();
    assert.ok(nmse(expected, referenceCall(whole.experts.slice(1, 5), c)) <= bound);
    let opened = 0;
    for (const [i, maxBindingBytes] of [undefined, 2112].entries()) {
      const rt = await ExpertRuntime.load(
        device,
        {
          open: async () => {
            opened++;
            return chunked(mini, seed + i);
          },
        },
        maxBindingBytes ? { maxBindingBytes } : {},
      );
      try {
        assert.equal(rt.capabilities().weightParts, maxBindingBytes ? 4 : 1);
        assert.deepEqual(rt.capabilities().slice.types, { gate: 'Q4_0', up: 'Q4_0', down: 'F16' });
        assert.ok(sameBits(await rt.compute(c.rows, c.ids, c.probs, 5, 2), expected), `maxBindingBytes ${maxBindingBytes}`);
      } finally {
        rt.dispose();
      }
    }
    assert.equal(opened, 2);
    // The same file already in memory (an ArrayBuffer, as fetch() gives it).
    const fromBuffer = await ExpertRuntime.fromGGUF(device, mini.slice().buffer);
    try {
      assert.ok(sameBits(await fromBuffer.compute(c.rows, c.ids, c.probs, 5, 2), expected), 'fromGGUF');
    } finally {
      fromBuffer.dispose();
    }
    await rejectsWith(ExpertRuntime.fromGGUF(device, mini.subarray(0, mini.length - 1)), 'BAD_SLICE_STREAM');
    // A cut stream, or a GGUF that is not a slice: BAD_SLICE_STREAM with the reader's code, nothing left behind.
    for (const cut of [10, mini.length >> 1, mini.length - 1]) {
      await rejectsWith(ExpertRuntime.load(device, { open: async () => chunked(mini.subarray(0, cut), cut) }), 'BAD_SLICE_STREAM');
    }
    // A budget: refused from the header, before any weight is allocated or read.
    let pulled = 0;
    await rejectsWith(
      ExpertRuntime.load(
        device,
        {
          open: async () => {
            pulled++;
            return chunked(mini, 3);
          },
        },
        { maxWeightBytes: 1000 },
      ),
      'SLICE_TOO_LARGE',
      { bytes: bytes.gate.length + bytes.up.length + bytes.down.length, limit: 1000 },
    );
    assert.equal(pulled, 1);
    await rejectsWith(ExpertRuntime.create(device, bytes, { maxWeightBytes: 1000 }), 'SLICE_TOO_LARGE');
    const notSlice = encodeGGUF({ metadata: { 'general.architecture': { type: GGUFValueType.STRING, value: 'qwen3moe' } } });
    await assert.rejects(
      ExpertRuntime.load(device, { open: async () => chunked(notSlice, 1) }),
      (e: unknown) =>
        e instanceof ExpertRuntimeError && e.code === 'BAD_SLICE_STREAM' && (e.details as { cause: string }).cause === 'SLICE_NOT_A_SLICE',
    );
  });

  test('load() with recovery reopens the stream after a device loss', async () => {
    const whole = makeSlice(same(T.Q8_0), 64, 32, 3, seed++);
    const mini = await miniGGUF(whole.slice, 0, 3);
    const c = makeCall(64, 3, 3, 2, seed++);
    const d = await testDevice('kernels.test device to lose');
    let opened = 0;
    const events: string[] = [];
    const rt = await ExpertRuntime.load(
      d,
      {
        open: async () => {
          opened++;
          return chunked(mini, opened);
        },
      },
      {
        onEvent: (e) => events.push(e.type),
        recovery: { requestDevice: async () => testDevice('kernels.test replacement device') },
      },
    );
    try {
      const before = await rt.compute(c.rows, c.ids, c.probs, 3, 2);
      assert.ok(nmse(before, referenceCall(whole.experts, c)) <= boundFor(rt, ranRegime(rt, c)));
      d.destroy();
      assert.ok(sameBits(await rt.compute(c.rows, c.ids, c.probs, 3, 2), before));
      assert.deepEqual(events, ['device-lost', 'recovered']);
      assert.equal(opened, 2);
    } finally {
      rt.dispose();
    }
  });

  test('dispose() destroys every buffer; a second dispose is harmless; use after dispose throws', async () => {
    const { slice } = makeSlice(same(T.F16), 64, 32, 2, 401);
    const rt = await ExpertRuntime.create(device, slice);
    const c = makeCall(64, 2, 3, 1, 402);
    await rt.compute(c.rows, c.ids, c.probs, 3, 1);
    const m = rt.memory();
    assert.equal(m.weightBuffers, 3);
    assert.equal(m.weightBytes, slice.gate.length + slice.up.length + slice.down.length);
    assert.ok(m.pool.free > 0);
    rt.dispose();
    assert.deepEqual(rt.memory(), { weightBytes: 0, weightBuffers: 0, pool: { free: 0, freeBytes: 0, inUse: 0 } });
    rt.dispose();
    await rejectsWith(rt.compute(c.rows, c.ids, c.probs, 3, 1), 'DISPOSED');
  });

  test('capabilities() reports the adapter, the binding limits and the features', async () => {
    const { slice } = makeSlice(same(T.Q6_K), 256, 256, 2, 501);
    const rt = await ExpertRuntime.create(device, slice);
    try {
      const caps = rt.capabilities();
      assert.equal(caps.limits.maxStorageBufferBindingSize, device.limits.maxStorageBufferBindingSize);
      assert.equal(caps.limits.maxBufferSize, device.limits.maxBufferSize);
      assert.equal(typeof caps.adapter.vendor, 'string');
      assert.deepEqual(caps.features, [...device.features].sort());
      assert.ok(caps.quantTypes.includes('Q6_K'));
      assert.deepEqual(caps.slice.types, { gate: 'Q6_K', up: 'Q6_K', down: 'Q6_K' });
      assert.equal(caps.backend, 'webgpu');
      assert.equal(caps.weightParts, 1);
      assert.equal(caps.maxBindingBytes, Math.min(device.limits.maxStorageBufferBindingSize, device.limits.maxBufferSize, 2 ** 32 - 4));
      const expected = (['shader-f16', 'subgroups'] as const).filter((f) => device.features.has(f));
      assert.deepEqual(caps.kernelFeatures, expected);
    } finally {
      rt.dispose();
    }
  });
});
