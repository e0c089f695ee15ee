/**
 * A gpt-oss slice streamed into the WGSL runtime (ExpertRuntime.load, issue 25): the stream's header declares the
 * variant (swiglu_oai with expert biases), its biases arrive after the matrices (readExpertSliceStream's onBiases)
 * and go into the slice's bias buffer before load() resolves, and the pipelines are the variant's, as create() builds
 * them. On SwiftShader through the `webgpu` npm package, as test/gpu/variant-kernels.test.ts runs; no adapter is a
 * failure, not a skip.
 *
 * The slice is cut by gguf/expert-slice.ts writeExpertSlice from a small in-memory gpt-oss model (encodeGGUF: F32 or
 * Q8_0 expert matrices and three F32 bias tensors), experts [2, 7) of 8, and streamed in odd chunk sizes (1 byte up to
 * a few KiB, so chunks end inside words, rows, matrices and biases). Each load is compared with create() on the same
 * slice read whole (readExpertSliceBytes): the same bits (the decode regime, and the batched one on Q8_0, whose
 * pipelines are built from the same settings and read the same buffers); and with referenceCall in exact numerics.
 * A stream that ends before or inside its biases fails with the reader's GGUF_TRUNCATED (as BAD_SLICE_STREAM), and a
 * stream that errors there with its own error.
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { bytesSource, encodeGGUF, GGMLType, memorySink, readGGUF, str, u32 } from '../../gguf/index.ts';
import { quantize } from '../../gguf/quantize.ts';
import {
  EXPERT_MATRICES,
  expertSliceLayout,
  expertTensorName,
  planExpertSlice,
  readExpertSliceBytes,
  writeExpertSlice,
} from '../../gguf/expert-slice.ts';
import { EXPERT_BIASES, expertBiasName, expertScaleName } from '../../gguf/expert-variant.ts';
import { GPT_OSS_VARIANT } from '../../protocol/variant.ts';
import { dequantizeExperts, nmse, referenceCall, type RoutedCall } from '../../shaders/reference/expert-call.ts';
import { ExpertRuntime, ExpertRuntimeError, type ExpertSlice, type Regime, type SliceStreamSource } from '../../shaders/runtime.ts';
import type { ExpertRuntimeErrorCode } from '../../shaders/errors.ts';
import { mulberry32 } from '../../shaders/random.ts';
import { nodeExpertDevice } from '../../harness/node-gpu.ts';

// Exact numerics against the float64 reference: only f32 rounding remains (variant-kernels.test.ts: NMSE ~1e-13…1e-11;
// 1e-9 leaves room for other drivers' exp(), shader-f16 tiles round to f16: 1e-5).
const NMSE_MAX = 1e-9;
const NMSE_MAX_F16 = 1e-5;
// The zero-bias reference must miss the result by this much, so the comparison can tell whether the biases arrived.
const CONTROL_NMSE_MIN = 1e-3;

const N_EMBD = 128;
const FF = 64;
const N_EXPERT_TOTAL = 8;
const [BEGIN, END] = [2, 7];
/** Chunk sizes the stream cycles through: odd, from a byte to a few KiB. */
const CHUNKS = [1, 3, 997, 5, 4099, 61, 7, 2053];

function gaussian(n: number, rand: () => number, scale: number): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand()) * scale;
  return x;
}

const f32Bytes = (v: Float32Array): Uint8Array => new Uint8Array(v.buffer, v.byteOffset, v.byteLength);

/**
 * A one-layer gpt-oss model file: expert matrices of `type` (weights as variant-kernels.test.ts makes them, so with
 * rows of scale 4 the clamps of swiglu_oai are reached) and F32 biases of about 1.5 (gate, up) and 3 (down).
 */
function gptOssModel(type: GGMLType, seed: number, scales = false): Uint8Array {
  const rand = mulberry32(seed);
  const tensors = EXPERT_MATRICES.map((m) => {
    const [cols, rows] = m === 'down' ? [FF, N_EMBD] : [N_EMBD, FF];
    const data = quantize(type, gaussian(N_EXPERT_TOTAL * rows * cols, rand, 1 / Math.sqrt(cols)));
    return { name: expertTensorName(0, m), dims: [cols, rows, N_EXPERT_TOTAL], type, data };
  });
  for (const b of EXPERT_BIASES) {
    const len = b === 'down' ? N_EMBD : FF;
    const data = f32Bytes(gaussian(N_EXPERT_TOTAL * len, rand, b === 'down' ? 3 : 1.5));
    tensors.push({ name: expertBiasName(0, b), dims: [len, N_EXPERT_TOTAL], type: GGMLType.F32, data });
  }
  if (scales) {
    for (const m of EXPERT_BIASES) {
      const data = f32Bytes(Float32Array.from({ length: N_EXPERT_TOTAL }, () => 0.5 + 1.5 * rand()));
      tensors.push({ name: expertScaleName(0, m), dims: [N_EXPERT_TOTAL], type: GGMLType.F32, data });
    }
  }
  return encodeGGUF({ metadata: { 'general.architecture': str('gpt-oss'), 'gpt-oss.block_count': u32(1) }, tensors });
}

/** Experts [BEGIN, END) of the model's layer 0, as the hub's /api/expert-shard writes them. */
async function sliceFile(model: Uint8Array): Promise<Uint8Array> {
  const plan = planExpertSlice(await readGGUF(bytesSource(model)), 0, BEGIN, END);
  const sink = memorySink();
  await writeExpertSlice(bytesSource(model), plan, sink);
  return sink.bytes();
}

/** The slice file read whole, as create() takes it. */
async function wholeSlice(file: Uint8Array): Promise<ExpertSlice> {
  const { info, gate, up, down, biases, scales } = await readExpertSliceBytes(file);
  return {
    nEmbd: info.nEmbd,
    ff: info.ff,
    nExpert: info.expertEnd - info.expertBegin,
    types: { ...info.types },
    gate,
    up,
    down,
    ...(info.variant && { variant: info.variant }),
    ...(biases && { biases }),
    ...(scales && { scales }),
  };
}

/** `bytes` in the CHUNKS sizes (copies, so no chunk shares a buffer with the file); `fail` thrown once `failAt` is reached. */
async function* chunked(bytes: Uint8Array, failAt?: number, fail?: Error): AsyncGenerator<Uint8Array> {
  let i = 0;
  for (let at = 0; at < bytes.length; ) {
    const n = CHUNKS[i++ % CHUNKS.length]!;
    if (failAt !== undefined && at + n > failAt) {
      if (failAt > at) yield bytes.slice(at, failAt);
      throw fail;
    }
    yield bytes.slice(at, at + n);
    at += n;
  }
}

const streamOf = (bytes: Uint8Array): SliceStreamSource => ({ open: async () => chunked(bytes) });

function makeCall(nTokens: number, nUsed: number, nExpert: number, seed: number): RoutedCall {
  const rand = mulberry32(seed);
  const rows = gaussian(nTokens * N_EMBD, rand, 4);
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

function sameBits(a: Float32Array, b: Float32Array): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

const compute = (rt: ExpertRuntime, c: RoutedCall, regime: Regime): Promise<Float32Array> =>
  rt.compute(c.rows, c.ids, c.probs, c.nTokens, c.nUsed, { regime });

function boundFor(rt: ExpertRuntime, regime: Regime): number {
  return regime === 'batched' && rt.capabilities().kernelFeatures.includes('shader-f16') ? NMSE_MAX_F16 : NMSE_MAX;
}

async function rejectsWith(p: Promise<unknown>, code: ExpertRuntimeErrorCode, details?: object): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof ExpertRuntimeError, `expected ExpertRuntimeError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    if (details) assert.deepEqual({ ...e.details, ...details }, e.details, e.message);
    return true;
  });
}

describe('a gpt-oss slice streamed into ExpertRuntime.load', { concurrency: 1 }, () => {
  let device: GPUDevice;
  let openError: unknown = null;
  let seed = 2700;

  before(async () => {
    try {
      device = await nodeExpertDevice('variant-stream.test device');
    } catch (e) {
      openError = e;
    }
  });
  beforeEach(() => {
    if (openError) throw openError;
  });
  after(() => device?.destroy());

  for (const type of [GGMLType.F32, GGMLType.Q8_0]) {
    test(`${GGMLType[type]}: streamed in odd chunks, the bits of create() on the same slice, and the reference`, async () => {
      const file = await sliceFile(gptOssModel(type, seed++));
      const slice = await wholeSlice(file);
      assert.deepEqual(slice.variant, GPT_OSS_VARIANT);
      assert.equal(slice.nExpert, END - BEGIN);
      const experts = dequantizeExperts(slice);
      // The control: without its biases the reference is another function, so a load that dropped them would fail.
      const unbiased = dequantizeExperts({
        ...slice,
        biases: {
          gate: new Float32Array(slice.biases!.gate.length),
          up: new Float32Array(slice.biases!.up.length),
          down: new Float32Array(slice.biases!.down.length),
        },
      });
      // The batched regime reads the same buffers through other pipelines, built from the same settings: once (Q8_0) is
      // enough here, as each costs SwiftShader seconds; the variant's batched kernels are variant-kernels.test.ts's.
      const calls: [RoutedCall, Regime[]][] = [
        [makeCall(1, 4, slice.nExpert, seed++), ['decode']],
        [makeCall(7, 3, slice.nExpert, seed++), type === GGMLType.Q8_0 ? ['decode', 'batched'] : ['decode']],
      ];
      const created = await ExpertRuntime.create(device, slice, { label: 'created' });
      // One load with every expert in one weight part, one with each expert in its own (the biases stay one buffer).
      const perExpert = slice.gate.length / slice.nExpert;
      const loads = [
        await ExpertRuntime.load(device, streamOf(file), { label: 'streamed' }),
        await ExpertRuntime.load(device, streamOf(file), { label: 'streamed, split', maxBindingBytes: perExpert }),
      ];
      try {
        assert.equal(loads[1]!.capabilities().weightParts, slice.nExpert);
        for (const rt of loads) assert.equal(rt.capabilities().slice.variant, 'swiglu_oai(α 1.702, limit 7) + biases');
        for (const [c, regimes] of calls) {
          for (const regime of regimes) {
            const what = `${GGMLType[type]} ${regime} ${c.nTokens}×${c.nUsed}`;
            const want = await compute(created, c, regime);
            const e = nmse(want, referenceCall(experts, c));
            assert.ok(e <= boundFor(created, regime), `${what}: create() NMSE ${e}`);
            for (const rt of loads) {
              const got = await compute(rt, c, regime);
              assert.ok(
                sameBits(got, want),
                `${what} ${rt.capabilities().weightParts} part(s): the stream's result differs from create()'s`,
              );
              const g = nmse(got, referenceCall(experts, c));
              assert.ok(g <= boundFor(rt, regime), `${what}: streamed NMSE ${g}`);
              const off = nmse(got, referenceCall(unbiased, c));
              assert.ok(off >= CONTROL_NMSE_MIN, `${what}: within ${off} of the reference without biases`);
            }
          }
        }
      } finally {
        created.dispose();
        for (const rt of loads) rt.dispose();
      }
    });
  }

  test('a stream that ends before or inside its biases fails with GGUF_TRUNCATED; one that errors there, with its error', async () => {
    const file = await sliceFile(gptOssModel(GGMLType.Q8_0, seed++));
    const { biasRanges, dataEnd } = expertSliceLayout(await readGGUF(bytesSource(file)));
    assert.deepEqual(
      biasRanges.map((r) => r.bias),
      ['gate', 'up', 'down'],
    );
    const [gate, up, down] = biasRanges as [(typeof biasRanges)[0], (typeof biasRanges)[0], (typeof biasRanges)[0]];
    const cuts: [string, number][] = [
      ['right after the matrices', gate.start],
      ['inside the gate bias', gate.start + 5],
      ['between the up and down biases', up.end],
      ['one byte short of the down bias', down.end - 1],
      ['one byte short of the data', dataEnd - 1],
    ];
    for (const [where, cut] of cuts) {
      await rejectsWith(ExpertRuntime.load(device, { open: async () => chunked(file.subarray(0, cut)) }), 'BAD_SLICE_STREAM', {
        cause: 'GGUF_TRUNCATED',
      }).catch((e: unknown) => {
        throw new Error(`cut ${where} (byte ${cut}): ${String(e)}`);
      });
    }
    const reset = new Error('connection reset in the biases');
    await assert.rejects(ExpertRuntime.load(device, { open: async () => chunked(file, up.start + 3, reset) }), (e: unknown) => e === reset);
    // The whole file still loads (the failed loads left nothing behind that a new one trips on).
    const rt = await ExpertRuntime.load(device, streamOf(file));
    rt.dispose();
  });

  test('per-expert scales arrive through the stream too: the bits of create(), not those of unit scales', async () => {
    const file = await sliceFile(gptOssModel(GGMLType.Q8_0, seed++, true));
    const slice = await wholeSlice(file);
    assert.equal(slice.variant?.scales, true);
    const ones = {
      gate: new Float32Array(slice.nExpert).fill(1),
      up: new Float32Array(slice.nExpert).fill(1),
      down: new Float32Array(slice.nExpert).fill(1),
    };
    const call = makeCall(5, 3, slice.nExpert, seed++);
    const created = await ExpertRuntime.create(device, slice, { label: 'created, scaled' });
    const unit = await ExpertRuntime.create(device, { ...slice, scales: ones }, { label: 'unit scales' });
    const streamed = await ExpertRuntime.load(device, streamOf(file), { label: 'streamed, scaled' });
    try {
      // Decode only: the scales are a buffer every regime reads (the batched kernels' use of them: variant-kernels-2).
      for (const regime of ['decode'] as Regime[]) {
        const want = await compute(created, call, regime);
        assert.ok(sameBits(await compute(streamed, call, regime), want), `${regime}: streamed = created`);
        assert.ok(!sameBits(await compute(unit, call, regime), want), `${regime}: the scales matter`);
      }
    } finally {
      for (const rt of [created, unit, streamed]) rt.dispose();
    }
  });
});
