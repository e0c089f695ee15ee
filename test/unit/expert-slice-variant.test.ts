/**
 * Slices of layers whose experts are not plain SiLU-gated (issue 25): gpt-oss's SwiGLU-OAI with expert biases. The
 * model file says the variant (its architecture, its `ffn_*_exps.bias` tensors); the slice carries the variant in
 * its metadata and each expert's biases beside its matrices; both readers (whole bytes, stream) give them back.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType, arr, bytesSource, encodeGGUF, f32, memorySink, readGGUF, requireQuantType, str, u32 } from '../../gguf/index.ts';
import { GGUFValueType } from '../../gguf/types.ts';
import type { GGUFFile, GGUFValue } from '../../gguf/index.ts';
import {
  EXPERT_MATRICES,
  ExpertSliceError,
  expertSliceByteLength,
  expertTensorName,
  planExpertSlice,
  readExpertSliceBytes,
  readPlannedScales,
  writeExpertSlice,
} from '../../gguf/expert-slice.ts';
import type { ExpertMatrix, ExpertSliceBiasValues } from '../../gguf/expert-slice.ts';
import { readExpertSliceStream } from '../../gguf/expert-slice-stream.ts';
import { EXPERT_BIASES, expertBiasName, expertScaleName, layerVariant } from '../../gguf/expert-variant.ts';
import { GPT_OSS_VARIANT, SILU_VARIANT, computesVariant, describeVariant, variantFeatures } from '../../protocol/variant.ts';
import { mulberry32 } from '../../shaders/random.ts';

const N_EMBD = 64;
const FF = 32;
const N_EXPERT = 8;

function f32Bytes(values: Float32Array): Uint8Array {
  return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

function randomF32(n: number, seed: number): Float32Array {
  const r = mulberry32(seed);
  return Float32Array.from({ length: n }, () => r() * 2 - 1);
}

interface Spec {
  arch: string;
  /** Write per-expert scales (F32 [N_EXPERT]): for each matrix (true) or for those listed. */
  scales?: boolean | readonly ('gate' | 'up' | 'down')[];
  /** Metadata beside the architecture (e.g. a swiglu_clamp_exp). */
  meta?: Record<string, GGUFValue>;
  /** Which biases to write (default: all three). */
  biases?: readonly ('gate' | 'up' | 'down')[];
  biasType?: GGMLType;
}

/** A one-layer model with routed experts (F32), and biases as `spec` says. */
async function makeModel(spec: Spec): Promise<{ bytes: Uint8Array; file: GGUFFile; bias: Record<string, Float32Array> }> {
  let seed = 7;
  const tensors: { name: string; dims: number[]; type: GGMLType; data: Uint8Array }[] = [];
  for (const m of EXPERT_MATRICES) {
    const dims = m === 'down' ? [FF, N_EMBD, N_EXPERT] : [N_EMBD, FF, N_EXPERT];
    tensors.push({ name: expertTensorName(0, m), dims, type: GGMLType.F32, data: f32Bytes(randomF32(N_EMBD * FF * N_EXPERT, seed++)) });
  }
  const bias: Record<string, Float32Array> = {};
  for (const b of spec.biases ?? EXPERT_BIASES) {
    const len = b === 'down' ? N_EMBD : FF;
    const values = randomF32(len * N_EXPERT, seed++);
    bias[b] = values;
    const type = spec.biasType ?? GGMLType.F32;
    const data =
      type === GGMLType.F32
        ? f32Bytes(values)
        : new Uint8Array((len * N_EXPERT * requireQuantType(type).bytesPerBlock) / requireQuantType(type).blockSize);
    tensors.push({ name: expertBiasName(0, b), dims: [len, N_EXPERT], type, data });
  }
  if (spec.scales) {
    for (const m of spec.scales === true ? EXPERT_BIASES : spec.scales) {
      const values = Float32Array.from({ length: N_EXPERT }, (_, e) => 0.5 + e / 4 + (m === 'down' ? 0.125 : 0));
      bias[`${m}_scale`] = values;
      tensors.push({ name: expertScaleName(0, m), dims: [N_EXPERT], type: GGMLType.F32, data: f32Bytes(values) });
    }
  }
  const metadata = { 'general.architecture': str(spec.arch), [`${spec.arch}.block_count`]: u32(1), ...spec.meta };
  const bytes = encodeGGUF({ metadata, tensors });
  return { bytes, file: await readGGUF(bytesSource(bytes)), bias };
}

async function sliceBytes(bytes: Uint8Array, file: GGUFFile, begin: number, end: number): Promise<Uint8Array> {
  const plan = planExpertSlice(file, 0, begin, end);
  const sink = memorySink();
  await writeExpertSlice(bytesSource(bytes), plan, sink);
  const out = sink.bytes();
  assert.equal(out.length, expertSliceByteLength(plan));
  return out;
}

describe('expert FFN variants', () => {
  it('features: a worker computes a variant only when it lists its activation and, for biases, bias', () => {
    assert.deepEqual(variantFeatures(SILU_VARIANT), ['silu']);
    assert.deepEqual(variantFeatures(GPT_OSS_VARIANT), ['swiglu_oai', 'bias']);
    assert.ok(computesVariant(['silu'], SILU_VARIANT));
    assert.ok(!computesVariant(['silu'], GPT_OSS_VARIANT));
    assert.ok(!computesVariant(['silu', 'swiglu_oai'], GPT_OSS_VARIANT));
    assert.ok(computesVariant(['silu', 'swiglu_oai', 'bias'], GPT_OSS_VARIANT));
    assert.equal(describeVariant(GPT_OSS_VARIANT), 'swiglu_oai(α 1.702, limit 7) + biases');
  });

  it('a layer’s variant comes from the architecture and its bias tensors', async () => {
    const oss = await makeModel({ arch: 'gpt-oss' });
    assert.deepEqual(layerVariant(oss.file, 0, { nEmbd: N_EMBD, ff: FF, nExpert: N_EXPERT }), GPT_OSS_VARIANT);
    const plain = await makeModel({ arch: 'qwen3moe', biases: [] });
    assert.deepEqual(layerVariant(plain.file, 0, { nEmbd: N_EMBD, ff: FF, nExpert: N_EXPERT }), SILU_VARIANT);
    const biasedSilu = await makeModel({ arch: 'qwen3moe' });
    assert.deepEqual(layerVariant(biasedSilu.file, 0, { nEmbd: N_EMBD, ff: FF, nExpert: N_EXPERT }), { ...SILU_VARIANT, biases: true });
  });

  it('a gpt-oss slice carries its variant and each sliced expert’s biases, read back whole and streamed', async () => {
    const m = await makeModel({ arch: 'gpt-oss' });
    const [begin, end] = [3, 7];
    const bytes = await sliceBytes(m.bytes, m.file, begin, end);
    const want = (b: string): Float32Array => {
      const len = b === 'down' ? N_EMBD : FF;
      return m.bias[b]!.slice(begin * len, end * len);
    };
    const whole = await readExpertSliceBytes(bytes);
    assert.deepEqual(whole.info.variant, GPT_OSS_VARIANT);
    assert.ok(whole.biases);
    for (const b of EXPERT_BIASES) assert.deepEqual(whole.biases[b], want(b), `${b} bias`);

    let streamed: ExpertSliceBiasValues | undefined;
    const got: Record<ExpertMatrix, number> = { gate: 0, up: 0, down: 0 };
    const info = await readExpertSliceStream(
      (async function* () {
        for (let at = 0; at < bytes.length; at += 997) yield bytes.subarray(at, at + 997);
      })(),
      {
        onData(matrix, _offset, chunk) {
          got[matrix] += chunk.length;
        },
        onBiases(values) {
          streamed = values;
        },
      },
    );
    assert.deepEqual(info.variant, GPT_OSS_VARIANT);
    for (const mtx of EXPERT_MATRICES) assert.equal(got[mtx], info.bytes[mtx]);
    assert.ok(streamed);
    for (const b of EXPERT_BIASES) assert.deepEqual(streamed[b], want(b), `${b} bias (streamed)`);
  });

  it('a slice of a plain layer has no variant and no biases, as before', async () => {
    const m = await makeModel({ arch: 'qwen3moe', biases: [] });
    const whole = await readExpertSliceBytes(await sliceBytes(m.bytes, m.file, 0, 2));
    assert.equal(whole.info.variant, undefined);
    assert.equal(whole.biases, undefined);
  });

  it('some biases but not all, or biases of another type, are refused by name', async () => {
    const partial = await makeModel({ arch: 'gpt-oss', biases: ['gate', 'up'] });
    assert.throws(
      () => planExpertSlice(partial.file, 0, 0, 2),
      (e: unknown) => e instanceof ExpertSliceError && e.code === 'SLICE_BAD_TENSORS' && /blk\.0\.ffn_down_exps\.bias/.test(e.message),
    );
    const f16 = await makeModel({ arch: 'gpt-oss', biasType: GGMLType.F16 });
    assert.throws(
      () => planExpertSlice(f16.file, 0, 0, 2),
      (e: unknown) => e instanceof ExpertSliceError && e.code === 'SLICE_BAD_TENSORS' && /expected F32/.test(e.message),
    );
  });

  it('second wave: gelu, the two clamps (scalar or per-layer limit) and per-expert scales, from the model to the slice', async () => {
    const shape = { nEmbd: N_EMBD, ff: FF, nExpert: N_EXPERT };
    const grok = await makeModel({ arch: 'grok', biases: [] });
    assert.deepEqual(layerVariant(grok.file, 0, shape), { activation: 'gelu', alpha: 0, limit: 0, biases: false });
    const step = await makeModel({ arch: 'step35', biases: [], meta: { 'step35.swiglu_clamp_exp': f32(7) } });
    assert.deepEqual(layerVariant(step.file, 0, shape), { activation: 'silu_limit', alpha: 0, limit: 7, biases: false });
    const perLayer = await makeModel({
      arch: 'deepseek4',
      biases: [],
      meta: { 'deepseek4.swiglu_clamp_exp': arr(GGUFValueType.FLOAT32, [10.5, 0]) },
    });
    assert.deepEqual(layerVariant(perLayer.file, 0, shape), { activation: 'swiglu_clamp', alpha: 0, limit: 10.5, biases: false });
    const unclamped = await makeModel({ arch: 'step35', biases: [], meta: { 'step35.swiglu_clamp_exp': f32(0) } });
    assert.deepEqual(layerVariant(unclamped.file, 0, shape), SILU_VARIANT, 'a zero limit clamps nothing');

    const scaled = await makeModel({ arch: 'qwen3moe', biases: [], scales: true });
    assert.deepEqual(layerVariant(scaled.file, 0, shape), { ...SILU_VARIANT, scales: true });
    const whole = await readExpertSliceBytes(await sliceBytes(scaled.bytes, scaled.file, 2, 5));
    assert.deepEqual(whole.info.variant, { ...SILU_VARIANT, scales: true });
    assert.equal(whole.biases, undefined);
    for (const m of EXPERT_BIASES) assert.deepEqual(whole.scales?.[m], scaled.bias[`${m}_scale`]!.slice(2, 5), `${m} scales`);
    const sb = await sliceBytes(scaled.bytes, scaled.file, 2, 5);
    let streamedScales: ExpertSliceBiasValues | undefined;
    await readExpertSliceStream(
      (async function* () {
        for (let at = 0; at < sb.length; at += 7) yield sb.subarray(at, at + 7);
      })(),
      {
        onData() {},
        onBiases() {
          assert.fail('a slice without biases streams none');
        },
        onScales(values) {
          streamedScales = values;
        },
      },
    );
    for (const m of EXPERT_BIASES) assert.deepEqual(streamedScales?.[m], scaled.bias[`${m}_scale`]!.slice(2, 5), `${m} scales, streamed`);

    // Gemma 4's files scale down alone: the layer is scaled, and its slices carry ones for gate and up
    const downOnly = await makeModel({ arch: 'gemma4', biases: [], scales: ['down'] });
    assert.deepEqual(layerVariant(downOnly.file, 0, shape), { activation: 'gelu', alpha: 0, limit: 0, biases: false, scales: true });
    const db = await sliceBytes(downOnly.bytes, downOnly.file, 1, 6);
    const d = await readExpertSliceBytes(db);
    assert.deepEqual(d.info.variant, { activation: 'gelu', alpha: 0, limit: 0, biases: false, scales: true });
    assert.deepEqual(d.scales?.down, downOnly.bias.down_scale!.slice(1, 6), 'down scales from the model');
    assert.deepEqual(d.scales?.gate, new Float32Array(5).fill(1), 'no gate scale in the model: ones');
    assert.deepEqual(d.scales?.up, new Float32Array(5).fill(1), 'no up scale in the model: ones');
    const downPlan = planExpertSlice(downOnly.file, 0, 1, 6);
    assert.deepEqual(await readPlannedScales(bytesSource(downOnly.bytes), downPlan), d.scales, 'the plan reads what the slice holds');

    const clamped = await readExpertSliceBytes(await sliceBytes(step.bytes, step.file, 0, 8));
    assert.deepEqual(clamped.info.variant, { activation: 'silu_limit', alpha: 0, limit: 7, biases: false });
    const g = await readExpertSliceBytes(await sliceBytes(grok.bytes, grok.file, 0, 8));
    assert.equal(g.info.variant?.activation, 'gelu');
  });
});
