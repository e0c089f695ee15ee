/**
 * The int8 kernels of llama numerics (decode regime: expert_up_q8, expert_down_q8, wgsl/int8/) against
 * harness/ggml-exact.ts, a bit-exact model of the coordinator's x86 arithmetic: the same bits, not a bound.
 *
 *  - h (silu(gate·x) ⊙ (up·x), before down's rounding) of every int8 type, read through the runtime with an F32
 *    identity down matrix (no rounding of h, and down · h = h exactly), one pair per token with weight 1;
 *  - the whole call (rows rounded, gate and up, swiglu, h rounded, down, Σ_k prob · y) against ggmlLayerSums;
 *  - on both integer-dot forms (dot4I8Packed and the unpacked fallback) and both lane reductions (workgroup memory,
 *    subgroup shuffles), on shapes of one and of several blocks per row.
 * And ggml_math.wgsl's float steps on their own (fma_rn, ggml_swiglu), element by element, over inputs chosen where
 * an unfused or reassociated computation would differ: SwiftShader's WGSL fma() is not fused (measured below), so a
 * kernel that called it would fail here.
 *
 * SwiftShader flushes subnormal results to zero, so values below 2^-126 are compared as zero (swiglu only).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType, requireQuantType } from '../../gguf/quant-types.ts';
import { canQuantize, quantize } from '../../gguf/quantize.ts';
import { weightBytes } from '../../harness/weight-bytes.ts';
import { FULL_KERNEL_GRID, LIGHT_GPU_TYPES } from '../../harness/kernel-grid.ts';
import { INT8_SNIPPETS } from '../../shaders/expert-ffn.ts';
import { ExpertRuntime, type ExpertSlice, type IntegerDot, type KernelFeature } from '../../shaders/runtime.ts';
import type { SliceTypes } from '../../shaders/slice.ts';
import { WGSL } from '../../shaders/wgsl-sources.ts';
import { fma32, ggmlHidden, ggmlLayerSums, ggmlSwiglu, type ExactExperts } from '../../harness/ggml-exact.ts';
import { mulberry32 } from '../../shaders/random.ts';
import { nodeExpertDevice, nodeGpu } from '../../harness/node-gpu.ts';

// The process's GPU object (module scope: dawn.node frees its instance when it is collected; docs/kernels.md).
const gpu = await nodeGpu();

let device: GPUDevice;

before(async () => {
  device = await nodeExpertDevice('ggml-exact.test device');
});

after(() => device?.destroy());

function gaussian(n: number, rand: () => number, scale: number): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand()) * scale;
  return x;
}

/** Random experts in the slice layout; `identityDown`: F32 down = the identity (nEmbd = ff), so out = h. */
function experts(types: SliceTypes, nEmbd: number, ff: number, nExpert: number, seed: number, identityDown = false): ExpertSlice {
  const rand = mulberry32(seed);
  // The IQ types only llama.cpp's quantizer writes: random valid super-blocks (harness/weight-bytes.ts)
  const bytes = (t: GGMLType, n: number, scale: number): Uint8Array =>
    canQuantize(t) ? quantize(t, gaussian(n, rand, scale)) : weightBytes(t, n, rand, scale);
  const gate = bytes(types.gate, nExpert * ff * nEmbd, 1 / Math.sqrt(nEmbd));
  const up = bytes(types.up, nExpert * ff * nEmbd, 1 / Math.sqrt(nEmbd));
  let down: Uint8Array;
  if (identityDown) {
    const eye = new Float32Array(nExpert * nEmbd * ff);
    for (let e = 0; e < nExpert; e++) for (let i = 0; i < ff; i++) eye[e * nEmbd * ff + i * ff + i] = 1;
    down = new Uint8Array(eye.buffer);
  } else {
    down = bytes(types.down, nExpert * nEmbd * ff, 1 / Math.sqrt(ff));
  }
  return { nEmbd, ff, nExpert, types, gate, up, down };
}

const exact = (s: ExpertSlice): ExactExperts => ({ types: s.types, nEmbd: s.nEmbd, ff: s.ff, gate: s.gate, up: s.up, down: s.down });

interface Call {
  rows: Float32Array;
  ids: Int32Array;
  probs: Float32Array;
  nTokens: number;
  nUsed: number;
}

/** Rows of several magnitudes (quantization blocks of every scale), distinct experts per token, positive weights. */
function makeCall(nEmbd: number, nExpert: number, nTokens: number, nUsed: number, seed: number): Call {
  const rand = mulberry32(seed);
  const rows = gaussian(nTokens * nEmbd, rand, 1);
  for (let i = 0; i < rows.length; i++) rows[i] = (rows[i] as number) * 2 ** Math.floor(rand() * 6 - 3);
  const ids = new Int32Array(nTokens * nUsed);
  const probs = new Float32Array(nTokens * nUsed);
  for (let t = 0; t < nTokens; t++) {
    const pool = Array.from({ length: nExpert }, (_, i) => i);
    for (let k = 0; k < nUsed; k++) {
      ids[t * nUsed + k] = pool.splice(Math.floor(rand() * pool.length), 1)[0] as number;
      probs[t * nUsed + k] = nUsed === 1 ? 1 : Math.fround(0.05 + rand());
    }
  }
  return { rows, ids, probs, nTokens, nUsed };
}

/** Indexes where a and b differ in bits (+0 and -0 count as equal). */
function diffBits(a: Float32Array, b: Float32Array): number[] {
  assert.equal(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < a.length; i++) if (!(a[i] === b[i] || (Number.isNaN(a[i]) && Number.isNaN(b[i])))) out.push(i);
  return out;
}

function assertSameBits(got: Float32Array, want: Float32Array, what: string): void {
  const d = diffBits(got, want);
  assert.equal(
    d.length,
    0,
    `${what}: ${d.length} of ${got.length} values differ, e.g. [${d[0]}] ${got[d[0] as number]} vs ${want[d[0] as number]}`,
  );
}

/** LIGHT_GPU_TYPES (harness/kernel-grid.ts): here in `npm run test:kernels:full` only (EXPERTSWARM_KERNELS=full). */
const INT8_TYPES = [...INT8_SNIPPETS.keys()].filter((t) => FULL_KERNEL_GRID || !LIGHT_GPU_TYPES.has(t));
const same = (t: GGMLType): SliceTypes => ({ gate: t, up: t, down: t });
const isK = (t: GGMLType): boolean => requireQuantType(t).blockSize === 256;
/**
 * One block per row and several (K-quants: 256 and 512; the blocks of 32: 32 and 96); MXFP4, whose dot takes blocks in pairs
 * and an odd last one apart, also 8 and 5 blocks.
 */
const widths = (t: GGMLType): [number, number][] =>
  isK(t)
    ? t === GGMLType.Q2_K || t === GGMLType.Q3_K || t === GGMLType.IQ4_XS || !canQuantize(t)
      ? [[512, 256]] // two super-blocks per row (h: 512 × 512); one block adds little and costs SwiftShader seconds
      : [
          [256, 256],
          [512, 256],
        ]
    : [[32, 32], [96, 64], ...(t === GGMLType.MXFP4 || t === GGMLType.IQ4_NL ? ([[256, 160]] as [number, number][]) : [])];

function packedDot(): boolean {
  return gpu.wgslLanguageFeatures.has('packed_4x8_integer_dot_product');
}

describe('the int8 kernels compute as ggml does, bit for bit', () => {
  let seed = 7100;

  for (const type of INT8_TYPES) {
    const name = GGMLType[type];
    test(`${name}: h equals ggml-exact's h bit for bit (packed and unpacked; gate/up fused and split)`, async () => {
      for (const [width] of widths(type)) {
        // Identity down needs nEmbd = ff; h is read through it untouched (F32 down: no rounding of h).
        const fused = experts({ gate: type, up: type, down: GGMLType.F32 }, width, width, 3, seed++, true);
        // Gate and up of different types that round alike (Q8_0 / Q4_0; Q4_K / Q6_K): the two-pass up kernel.
        const other = isK(type)
          ? type === GGMLType.Q6_K
            ? GGMLType.Q4_K
            : GGMLType.Q6_K
          : type === GGMLType.Q8_0
            ? GGMLType.Q4_0
            : GGMLType.Q8_0;
        const split = experts({ gate: type, up: other, down: GGMLType.F32 }, width, width, 3, seed++, true);
        const call = makeCall(width, 3, 5, 1, seed++);
        for (const slice of [fused, split]) {
          const want = new Float32Array(call.nTokens * width);
          for (let t = 0; t < call.nTokens; t++) {
            want.set(ggmlHidden(exact(slice), call.ids[t] as number, call.rows.subarray(t * width, (t + 1) * width)), t * width);
          }
          for (const integerDot of (packedDot() ? ['packed', 'unpacked'] : ['unpacked']) as IntegerDot[]) {
            const rt = await ExpertRuntime.create(device, slice, { numerics: 'llama', integerDot, features: [] });
            try {
              assert.equal(rt.capabilities().integerDot, integerDot);
              const got = await rt.compute(call.rows, call.ids, call.probs, call.nTokens, 1, { regime: 'decode' });
              assertSameBits(got, want, `${GGMLType[slice.types.gate]}/${GGMLType[slice.types.up]} width ${width} ${integerDot}`);
            } finally {
              rt.dispose();
            }
          }
        }
      }
    });

    test(`${name}: a whole call (rows, gate/up, swiglu, h rounded, down, Σ prob·y) equals ggmlLayerSums bit for bit`, async () => {
      for (const [nEmbd, ff] of widths(type)) {
        const slice = experts(same(type), nEmbd, ff, 4, seed++);
        const calls = [makeCall(nEmbd, 4, 1, 2, seed++), makeCall(nEmbd, 4, 6, 2, seed++), makeCall(nEmbd, 4, 2, 4, seed++)];
        const variants: { integerDot: IntegerDot; features: KernelFeature[] }[] = [{ integerDot: 'unpacked', features: [] }];
        if (packedDot()) variants.push({ integerDot: 'packed', features: [] });
        if (packedDot() && device.features.has('subgroups')) variants.push({ integerDot: 'packed', features: ['subgroups'] });
        for (const { integerDot, features } of variants) {
          const rt = await ExpertRuntime.create(device, slice, { numerics: 'llama', integerDot, features });
          try {
            for (const c of calls) {
              const want = await ggmlLayerSums(exact(slice), c.rows, c.ids, c.probs, c.nTokens, c.nUsed);
              const got = await rt.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime: 'decode' });
              assertSameBits(got, want, `${nEmbd}×${ff} ${c.nTokens}×${c.nUsed} ${integerDot} ${features.join() || 'base'}`);
            }
          } finally {
            rt.dispose();
          }
        }
      }
    });
  }
});

describe("ggml_math.wgsl: ggml's float steps element by element", () => {
  /** Runs `expr` (WGSL over x, y, z) on each triple of `input`; the module has ggml_math.wgsl and opaque_init called. */
  async function evaluate(expr: string, input: Float32Array<ArrayBuffer>): Promise<Float32Array> {
    const n = input.length / 3;
    const code = `${WGSL.ggmlMath}
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> o: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let n = arrayLength(&a) / 3u;
  opaque_init(n);
  let i = g.x;
  if (i >= n) { return; }
  let x = a[3u * i];
  let y = a[3u * i + 1u];
  let z = a[3u * i + 2u];
  o[i] = ${expr};
}`;
    const module = device.createShaderModule({ label: 'ggml_math test', code });
    const pipeline = await device.createComputePipelineAsync({
      label: 'ggml_math test',
      layout: 'auto',
      compute: { module, entryPoint: 'main' },
    });
    const usage = GPUBufferUsage;
    const inBuf = device.createBuffer({ size: input.byteLength, usage: usage.STORAGE | usage.COPY_DST });
    const outBuf = device.createBuffer({ size: n * 4, usage: usage.STORAGE | usage.COPY_SRC });
    const read = device.createBuffer({ size: n * 4, usage: usage.MAP_READ | usage.COPY_DST });
    try {
      device.queue.writeBuffer(inBuf, 0, input);
      const enc = device.createCommandEncoder();
      const pass = enc.beginComputePass();
      pass.setPipeline(pipeline);
      pass.setBindGroup(
        0,
        device.createBindGroup({
          layout: pipeline.getBindGroupLayout(0),
          entries: [
            { binding: 0, resource: { buffer: inBuf } },
            { binding: 1, resource: { buffer: outBuf } },
          ],
        }),
      );
      pass.dispatchWorkgroups(Math.ceil(n / 64));
      pass.end();
      enc.copyBufferToBuffer(outBuf, 0, read, 0, n * 4);
      device.queue.submit([enc.finish()]);
      await read.mapAsync(GPUMapMode.READ);
      return new Float32Array(read.getMappedRange().slice(0));
    } finally {
      for (const b of [inBuf, outBuf, read]) b.destroy();
    }
  }

  /** Triples where a·b + c cancels (the product's low bits decide), of every magnitude, some on exact ties. */
  function fmaInputs(n: number, seed: number): Float32Array<ArrayBuffer> {
    const rand = mulberry32(seed);
    const v = new Float32Array(3 * n);
    for (let i = 0; i < n; i++) {
      const a = Math.fround((rand() - 0.5) * 2 ** Math.floor(rand() * 40 - 20));
      const b =
        i % 4 === 0 ? Math.fround(Math.floor((rand() - 0.5) * 2 ** 20)) : Math.fround((rand() - 0.5) * 2 ** Math.floor(rand() * 40 - 20));
      const p = Math.fround(a * b);
      const c = [
        () => -p,
        () => -p * (1 + (rand() - 0.5) * 2 ** -20),
        () => (rand() - 0.5) * 2 ** Math.floor(rand() * 40 - 20),
        () => -p / 2,
      ][i % 4]!();
      v.set([a, b, c], 3 * i);
    }
    return v;
  }

  test('fma_rn is a fused multiply-add (and WGSL fma() here is not one, which is why it exists)', async (t) => {
    const input = fmaInputs(20000, 1);
    const got = await evaluate('fma_rn(x, y, z)', input);
    const builtin = await evaluate('fma(x, y, z)', input);
    let unfused = 0;
    for (let i = 0; i < got.length; i++) {
      const [a, b, c] = [input[3 * i], input[3 * i + 1], input[3 * i + 2]] as [number, number, number];
      const want = fma32(a, b, c);
      assert.ok(got[i] === want, `fma_rn(${a}, ${b}, ${c}) = ${got[i]}, fused ${want}`);
      if (builtin[i] !== want) unfused++;
    }
    t.diagnostic(`WGSL fma() differs from a fused multiply-add on ${unfused} of ${got.length} inputs here`);
  });

  test("ggml_swiglu is ggml_vec_swiglu_f32's (ggml_v_expf, the division, the product)", async () => {
    const rand = mulberry32(2);
    const n = 30000;
    const input = new Float32Array(3 * n);
    for (let i = 0; i < n; i++) {
      // gate values from tiny to past ggml_v_expf's |n| > 126 branch
      const g = (rand() - 0.5) * 2 ** Math.floor(rand() * 18 - 10) * (i % 10 === 0 ? 64 : 1);
      input.set([g, (rand() - 0.5) * 4, 0], 3 * i);
    }
    const got = await evaluate('ggml_swiglu(x, y)', input);
    for (let i = 0; i < n; i++) {
      const [g, u] = [input[3 * i], input[3 * i + 1]] as [number, number];
      const want = ggmlSwiglu(g, u);
      const flushed = Math.abs(want) < 2 ** -126 ? 0 : want; // SwiftShader flushes subnormals
      assert.ok(got[i] === flushed, `ggml_swiglu(${g}, ${u}) = ${got[i]}, ggml ${want}`);
    }
  });
});
