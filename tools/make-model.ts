/**
 * Writes a deterministic random-weight MoE model that llama.cpp loads.
 *
 *   npm run make-model -- --arch qwen3moe --layers 2 --n-embd 64 --n-expert 8 --n-expert-used 2 --ff 64 \
 *     --type q8_0 --seed 1 --out .cache/models/tiny.gguf
 *
 * Weights are drawn per tensor from a generator seeded by (seed, tensor name), so two files that differ only in
 * `--type` hold the same underlying weights, quantized differently. The command line is tools/make-model-cli.ts.
 */
import { mkdir, rename, stat, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { GGUFWriter } from '../gguf/writer.ts';
import { type GGUFValue, GGUFValueType, arr, bool, f32, str, u32 } from '../gguf/types.ts';
import { HYBRID_FILL } from './model-arch-hybrid.ts';
import { expertIdTable } from './model-arch-deepseek4.ts';
import { fileSink } from '../gguf/node-io.ts';
import { quantize } from '../gguf/quantize.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { LLAMA_QUANTIZED, quantizeWithLlama } from './llama-quantized.ts';
import { type MetaEntry, type ModelConfig, type ModelPlan, type TensorPlan, planModel } from './model-arch.ts';
import { CHATML_TEMPLATE, buildVocabulary } from './tokenizer.ts';

/** Elements generated and quantized at a time: bounds memory whatever the model size. */
const CHUNK_ELEMENTS = 1 << 20;

/** 32-bit FNV-1a, to derive a per-tensor seed from its name (also scripts/gpu-model-parallel.ts's). */
export function hashName(seed: number, name: string): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193) >>> 0;
  return h || 1;
}

/** Fills `out` with uniform values in [-amplitude, amplitude) from a xorshift32 state; returns the next state. */
function fillUniform(out: Float32Array, state: number, amplitude: number): number {
  let s = state;
  const k = (2 * amplitude) / 4294967296;
  for (let i = 0; i < out.length; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = (s >>> 0) * k - amplitude;
  }
  return s;
}

/**
 * Amplitude of a tensor's uniform weights. Matrices get unit-variance outputs for unit-variance inputs (√3/√fan_in);
 * the output projection is scaled up so that logits are far apart; norms are all ones. The routed experts' down
 * projection is multiplied by `expertScale` (ModelConfig). Its default 0.1 makes the expert branch quiet: llama.cpp
 * rounds activations to 8 bits before quantized dot products, so two implementations that differ by one float ulp can
 * round one activation differently, and a quiet branch keeps such differences below the greedy margins. A quiet branch
 * also hides real errors in the experts (a dropped expert barely moves the logits), so the tests that judge expert
 * outputs (test/integration/expert-dispatch.test.ts) use a loud one and compare against workers that round as
 * llama.cpp does.
 */
export function amplitude(t: TensorPlan, expertScale: number): number {
  const fanIn = t.dims[0] as number;
  switch (t.role) {
    case 'norm':
      return 0;
    case 'embed':
      return Math.sqrt(3);
    case 'output':
      return (4 * Math.sqrt(3)) / Math.sqrt(fanIn);
    case 'router':
      return (2 * Math.sqrt(3)) / Math.sqrt(fanIn);
    case 'router_bias':
      // Selection bias added to sigmoid gates in (0, 1), or gpt-oss's bias on router logits of standard deviation 2:
      // large enough to change some picks, not to decide them all.
      return 0.2;
    case 'attn_bias':
      return 0.5;
    case 'attn_sinks':
      // Sink logits beside attention scores of about unit spread: some heads give the sink most of their attention,
      // others hardly any, so a lost sink moves the logits.
      return 3;
    case 'expert_bias':
      // As loud as the matrix product each is added to: a unit-variance term on gate and up, the down projection's
      // expertScale on down (so that --expert-scale quiets or raises the whole routed branch alike).
      return (t.name.includes('ffn_down_exps') ? expertScale : 1) * Math.sqrt(3);
    case 'expert_scale':
      // Uniform in [0.5, 2) (centre 1.25): each expert's gate, up and down products scaled apart.
      return 0.75;
    case 'ssm_a':
    case 'ssm_dt':
      return HYBRID_FILL[t.role].amplitude;
    case 'expert':
      return ((t.name.includes('ffn_down_exps') ? expertScale : 1) * Math.sqrt(3)) / Math.sqrt(fanIn);
    default:
      return Math.sqrt(3) / Math.sqrt(fanIn);
  }
}

/**
 * Centre of a tensor's uniform weights: 0 but for the linear-attention decay, which must be negative (HYBRID_FILL),
 * and the per-expert scales (1.25: positive multipliers in [0.5, 2)).
 */
export function centre(t: TensorPlan): number {
  if (t.role === 'expert_scale') return 1.25;
  return t.role === 'ssm_a' || t.role === 'ssm_dt' ? HYBRID_FILL[t.role].centre : 0;
}

/** Streams one tensor's bytes in chunks of whole rows. */
async function* tensorChunks(t: TensorPlan, seed: number, expertScale: number): AsyncGenerator<Uint8Array> {
  const rowLength = t.dims[0] as number;
  const total = t.dims.reduce((a, b) => a * b, 1);
  const rowsPerChunk = Math.max(1, Math.floor(CHUNK_ELEMENTS / rowLength));
  let state = hashName(seed, t.name);
  const amp = amplitude(t, expertScale);
  const mid = centre(t);
  for (let done = 0; done < total; ) {
    const n = Math.min(rowsPerChunk * rowLength, total - done);
    const values = new Float32Array(n);
    if (amp === 0) values.fill(1);
    else state = fillUniform(values, state, amp);
    if (mid !== 0) for (let i = 0; i < n; i++) values[i] = (values[i] as number) + mid;
    yield quantize(t.type, values);
    done += n;
  }
}

export interface MadeModel {
  path: string;
  plan: ModelPlan;
  bytes: number;
  /** Token ids whose bytes alone are not valid UTF-8 (tests ban them with logit_bias). */
  nonUtf8TokenIds: number[];
  vocabSize: number;
}

/** A metadata entry as the GGUF value the writer takes. */
function metaValue(m: MetaEntry): GGUFValue {
  switch (m.kind) {
    case 'u32':
      return u32(m.value);
    case 'f32':
      return f32(m.value);
    case 'bool':
      return bool(m.value);
    case 'i32[]':
      return arr(GGUFValueType.INT32, m.value);
    case 'f32[]':
      return arr(GGUFValueType.FLOAT32, m.value);
    case 'bool[]':
      return arr(GGUFValueType.BOOL, m.value);
    case 'str':
      return str(m.value);
  }
}

/** The model's plan and its GGUF header (metadata, vocabulary, tensor infos): what every writer of it starts from. */
export function modelHeader(config: ModelConfig): { plan: ModelPlan; writer: GGUFWriter; vocab: ReturnType<typeof buildVocabulary> } {
  const vocab = buildVocabulary();
  const plan = planModel(config, vocab.tokens.length);
  const w = new GGUFWriter();
  for (const m of plan.metadata) {
    w.set(m.key, metaValue(m));
  }
  w.set('tokenizer.ggml.model', str('gpt2'));
  w.set('tokenizer.ggml.pre', str('default'));
  w.set('tokenizer.ggml.tokens', arr(GGUFValueType.STRING, vocab.tokens));
  w.set('tokenizer.ggml.token_type', arr(GGUFValueType.INT32, vocab.types));
  w.set('tokenizer.ggml.merges', arr(GGUFValueType.STRING, vocab.merges));
  w.set('tokenizer.ggml.bos_token_id', u32(vocab.bosId));
  w.set('tokenizer.ggml.eos_token_id', u32(vocab.eosId));
  w.set('tokenizer.chat_template', str(CHATML_TEMPLATE));
  for (const t of plan.tensors) w.addTensor(t.name, t.dims, t.type);
  return { plan, writer: w, vocab };
}

/** Writes the model to `path` (atomically: a partial file never has the final name). */
export async function makeModel(config: ModelConfig, path: string): Promise<MadeModel> {
  const { plan, writer: w, vocab } = modelHeader(config);

  await mkdir(dirname(path), { recursive: true });
  if (LLAMA_QUANTIZED.has(config.type)) {
    // The same weights in F32, then llama.cpp's quantizer (tools/llama-quantized.ts).
    const f32Path = `${path}.f32-${process.pid}`;
    const tmp = `${path}.part-${process.pid}`;
    try {
      await makeModel({ ...config, type: GGMLType.F32 }, f32Path);
      await quantizeWithLlama(f32Path, tmp, config.type, plan.tensors);
    } finally {
      await unlink(f32Path).catch(() => undefined);
    }
    const bytes = (await stat(tmp)).size;
    await rename(tmp, path);
    return { path, plan, bytes, nonUtf8TokenIds: vocab.nonUtf8Ids, vocabSize: vocab.tokens.length };
  }
  const tmp = `${path}.part-${process.pid}`;
  const sink = fileSink(tmp);
  let bytes = 0;
  const counting = {
    write: async (chunk: Uint8Array) => {
      bytes += chunk.length;
      await sink.write(chunk);
    },
  };
  await w.writeHeader(counting);
  for (const t of plan.tensors) {
    if (t.role === 'expert_ids') {
      await w.writeTensorData(counting, expertIdTable(t, config));
      continue;
    }
    for await (const chunk of tensorChunks(t, config.seed, config.expertScale)) await w.writeTensorData(counting, chunk);
  }
  await w.finish(counting);
  await sink.close?.();
  await rename(tmp, path);
  return { path, plan, bytes, nonUtf8TokenIds: vocab.nonUtf8Ids, vocabSize: vocab.tokens.length };
}
