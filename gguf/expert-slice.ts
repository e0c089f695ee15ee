/**
 * Expert slices: a mini-GGUF holding experts [begin, end) of one MoE layer, what the hub's shard server (planned) is to
 * serve at `GET /api/expert-shard?model=&layer=&expert_begin=&expert_end=` and a volunteer loads into GPU buffers.
 *
 * A model stores layer L's routed experts as three 3-D tensors (ggml order, ne0 first), expert-major:
 *   blk.L.ffn_gate_exps.weight, blk.L.ffn_up_exps.weight   ne = [n_embd, ff, n_expert]
 *   blk.L.ffn_down_exps.weight                             ne = [ff, n_embd, n_expert]
 * so experts [begin, end) of each are one contiguous byte range. Where a model fuses gate and up (llama.cpp's
 *   blk.L.ffn_gate_up_exps.weight                          ne = [n_embd, 2·ff, n_expert], per expert its gate rows then its up rows)
 * a slice's gate and up are gathered expert by expert from it. A slice is a GGUF v3 file (alignment 32) with the
 * same three tensors — same names and types, ne2 = end − begin, bytes copied unchanged, data in the order gate, up,
 * down — and this metadata:
 *   general.architecture                                       str, copied from the model when it has one
 *   expertswarm.slice.version                                  u32, EXPERT_SLICE_VERSION
 *   expertswarm.slice.{layer, expert_begin, expert_end,
 *                      n_expert_total, n_embd, ff}             u32
 *   expertswarm.slice.model_name                               str, the model's general.name when it has one
 *   expertswarm.slice.activation                               str, the experts' activation when not 'silu'
 *   expertswarm.slice.{alpha, limit}                           f32, with it (swiglu_oai: gpt-oss's 1.702 and 7)
 *   kvasir.expert_shard.{layer, expert_begin, expert_end,
 *                        n_expert_total, n_embd}               u32, what Kvasir's clients check (kvasirSliceKeys)
 *   linkcpp.expert_shard.{expert_begin, expert_end,
 *                         n_expert_global, n_embd}             i32, what Kvasir's native worker reads
 * A slice of a layer whose experts have biases (gpt-oss) or per-expert scales carries them after the matrices (biases,
 * then scales), sliced the same way (scales: blk.L.ffn_{gate,up,down}_exps.scale [end − begin], F32). Biases:
 *   blk.L.ffn_{gate,up}_exps.bias [ff, end − begin], blk.L.ffn_down_exps.bias [n_embd, end − begin]   F32
 * (gguf/expert-variant.ts; protocol/variant.ts says what a worker computes with them).
 *
 *   const plan = planExpertSlice(file, 3, 16, 32);                 // hub
 *   reply.header('content-length', expertSliceByteLength(plan));
 *   await writeExpertSlice(source, plan, sink);
 *   const { info, gate, up, down } = await readExpertSliceBytes(bytes);   // a whole slice in memory
 *
 * The forward-only stream reader a volunteer uses, readExpertSliceStream, is in expert-slice-stream.ts.
 *
 * Errors: ExpertSliceError (codes below) when a request or a file is not what a slice needs; GGUFErrors pass
 * through, notably GGUF_TRUNCATED and GGUF_IO. Browser-safe.
 */
import { GGUFError } from './errors.ts';
import { GGMLType } from './quant-types.ts';
import { bytesSource, readGGUF } from './reader.ts';
import type { ByteSource } from './reader.ts';
import { GGUFValueType, describeValueType, f32, findTensor, i32, str, u32 } from './types.ts';
import {
  EXPERT_ACTIVATIONS,
  EXPERT_BIASES,
  SILU_VARIANT,
  checkVariant,
  expertBiasName,
  expertScaleName,
  isPlainVariant,
  layerBiasTensors,
  layerScaleTensors,
  layerVariant,
  modelScaleTensors,
  type ExpertActivation,
  type ExpertBiasName,
  type ExpertVariant,
} from './expert-variant.ts';
import type { GGUFFile, GGUFTensorInfo, GGUFValue } from './types.ts';
import { GGUFWriter } from './writer.ts';
import type { ByteSink } from './writer.ts';

export type ExpertSliceErrorCode =
  /** layer / expert_begin / expert_end not integers in [0, 2^32), an empty range, or end past the layer's experts. */
  | 'SLICE_BAD_RANGE'
  /** The layer has none of the three routed-expert tensors: a dense layer, no such layer, or not an MoE model. */
  | 'SLICE_NOT_MOE'
  /** The model has some but not all three tensors for the layer, or their shapes disagree. */
  | 'SLICE_BAD_TENSORS'
  /** A valid GGUF that is not an expert slice: slice keys missing or wrong, other tensors, shapes unlike the keys. */
  | 'SLICE_NOT_A_SLICE'
  /** Bytes after the last tensor's padding. */
  | 'SLICE_TRAILING_BYTES';

export class ExpertSliceError extends Error {
  override readonly name = 'ExpertSliceError';
  constructor(
    readonly code: ExpertSliceErrorCode,
    message: string,
  ) {
    super(`${code}: ${message}`);
  }
}

/** The three matrices of a routed expert (gate, up, down projections); EXPERT_MATRICES is their storage order. */
export type ExpertMatrix = 'gate' | 'up' | 'down';
export const EXPERT_MATRICES: readonly ExpertMatrix[] = ['gate', 'up', 'down'];
export const EXPERT_SLICE_PREFIX = 'expertswarm.slice.';
export const EXPERT_SLICE_VERSION = 1;
/** The u32 keys after `${EXPERT_SLICE_PREFIX}version`, in the order they are written. */
const SLICE_KEYS = ['layer', 'expert_begin', 'expert_end', 'n_expert_total', 'n_embd', 'ff'] as const;

/**
 * The keys Kvasir's clients and native worker read from a shard, written beside ours (issue 28): its desktop and server
 * clients refuse a shard whose `kvasir.expert_shard.{layer, expert_begin, expert_end}` (or the `linkcpp.` begin/end)
 * are not the range they asked for; its shard writer puts them, n_expert_total and n_embd as u32. Its native worker
 * reads `linkcpp.expert_shard.*` with gguf_get_val_i32, which aborts on any other type: those are i32, and left out
 * when a value does not fit one. Our readers ignore every one of them.
 */
export function kvasirSliceKeys(
  layer: number,
  begin: number,
  end: number,
  nExpertTotal: number,
  nEmbd: number,
): Array<[string, GGUFValue]> {
  const out: Array<[string, GGUFValue]> = [
    ['kvasir.expert_shard.layer', u32(layer)],
    ['kvasir.expert_shard.expert_begin', u32(begin)],
    ['kvasir.expert_shard.expert_end', u32(end)],
    ['kvasir.expert_shard.n_expert_total', u32(nExpertTotal)],
    ['kvasir.expert_shard.n_embd', u32(nEmbd)],
  ];
  if (Math.max(begin, end, nExpertTotal, nEmbd) > 0x7fffffff) return out;
  out.push(
    ['linkcpp.expert_shard.expert_begin', i32(begin)],
    ['linkcpp.expert_shard.expert_end', i32(end)],
    ['linkcpp.expert_shard.n_expert_global', i32(nExpertTotal)],
    ['linkcpp.expert_shard.n_embd', i32(nEmbd)],
  );
  return out;
}
export const DEFAULT_COPY_CHUNK_BYTES = 4 * 1024 * 1024;

export function expertTensorName(layer: number, matrix: ExpertMatrix): string {
  return `blk.${layer}.ffn_${matrix}_exps.weight`;
}

/** What a slice holds: experts [expertBegin, expertEnd) of the layer's nExpertTotal. */
export interface ExpertSliceInfo {
  layer: number;
  expertBegin: number;
  expertEnd: number;
  nExpertTotal: number;
  nEmbd: number;
  ff: number;
  /** Each matrix has its own type: mixes like Q4_K_M quantise ffn_down differently from gate and up. */
  types: Record<ExpertMatrix, GGMLType>;
  /** Data bytes of each matrix in the slice (all its experts, expert-major, each bytes / (end − begin) long). */
  bytes: Record<ExpertMatrix, number>;
  architecture?: string;
  modelName?: string;
  /** What the experts compute beyond their matrices; absent: SiLU-gated without biases. */
  variant?: ExpertVariant;
}

/** Bytes [start, end) of one bias tensor's data, absolute in a file. */
export interface BiasRange {
  bias: ExpertBiasName;
  start: number;
  end: number;
}

/** One bias or scale tensor of a planned slice: experts [begin, end) of the model's, one contiguous range. */
export interface ExpertSliceBiasPlan extends BiasRange {
  name: string;
  /** [ff or n_embd, expertEnd − expertBegin]; a scale's is [expertEnd − expertBegin, 1]. */
  dims: [number, number];
  /**
   * A scale the model does not have (Gemma 4's files scale down alone): every value of the slice's tensor is `fill`
   * (1: llama.cpp leaves that product alone), and the range is empty (start = end = 0).
   */
  fill?: number;
}

/** The bytes of a planned tensor that the model does not hold (`fill`), or undefined for a range of the model. */
export function filledBytes(b: ExpertSliceBiasPlan): Uint8Array | undefined {
  if (b.fill === undefined) return undefined;
  const values = new Float32Array(b.dims[0] * b.dims[1]).fill(b.fill);
  return new Uint8Array(values.buffer);
}

/** Bytes [start, end) of one matrix's data, absolute in a file. */
export interface ByteRange {
  matrix: ExpertMatrix;
  start: number;
  end: number;
}

/**
 * One matrix of a planned slice; its ByteRange spans the sliced experts in the model file, `pieces` are the bytes
 * themselves, in order (one range, or one per expert where the model fuses gate and up: `ffn_gate_up_exps` holds each
 * expert's gate rows, then its up rows).
 */
export interface ExpertSliceMatrixPlan extends ByteRange {
  /** The tensor's name in the slice (the model's own, or the unfused name where the model fuses gate and up). */
  name: string;
  source: GGUFTensorInfo;
  /** Dims in the slice: [row length, rows, expertEnd − expertBegin]. */
  dims: [number, number, number];
  bytesPerExpert: number;
  /** Absolute byte ranges of the model file whose concatenation is this matrix's data in the slice. */
  pieces: ReadonlyArray<{ start: number; end: number }>;
}

/** The fused gate-and-up tensor of `layer` (llama.cpp's `ffn_gate_up_exps`): [n_embd, 2·ff, n_expert]. */
export function gateUpTensorName(layer: number): string {
  return `blk.${layer}.ffn_gate_up_exps.weight`;
}

/**
 * A layer's three expert matrices as the slice sees them: the model's own tensors, or for a fused layer the gate and
 * up halves of its `ffn_gate_up_exps` (infos with the unfused name, dims [n_embd, ff, n_expert] and half the bytes).
 * `fusedFrom` is the fused tensor, absent when the layer is not fused.
 */
export function layerExpertTensors(
  file: GGUFFile,
  layer: number,
): { found: Partial<Record<ExpertMatrix, GGUFTensorInfo>>; fusedFrom?: GGUFTensorInfo } {
  const found = byMatrix((m) => findTensor(file, expertTensorName(layer, m)));
  const gu = found.gate || found.up ? undefined : findTensor(file, gateUpTensorName(layer));
  if (!gu) return { found };
  const [nEmbd = 0, ff2 = 0, nExpert = 0] = gu.dims;
  if (gu.dims.length !== 3 || ff2 % 2 !== 0) return { found };
  const half = (m: ExpertMatrix): GGUFTensorInfo => ({
    ...gu,
    name: expertTensorName(layer, m),
    dims: [nEmbd, ff2 / 2, nExpert],
    byteLength: gu.byteLength / 2,
  });
  return { found: { ...found, gate: half('gate'), up: half('up') }, fusedFrom: gu };
}

export interface ExpertSlicePlan extends ExpertSliceInfo {
  /** gate, up, down: the order their data is written. */
  matrices: ExpertSliceMatrixPlan[];
  /** The gate, up and down biases (written after the matrices), or none when the layer has none. */
  biases: ExpertSliceBiasPlan[];
  /** The gate, up and down per-expert scales (written after the biases), or none; `bias` names the matrix. */
  scales: ExpertSliceBiasPlan[];
  metadata: Array<[string, GGUFValue]>;
}

function sameDims(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** Expected dims of each matrix; throws `code` naming every tensor when one differs. */
function checkDims(t: Record<ExpertMatrix, GGUFTensorInfo>, nEmbd: number, ff: number, n: number, code: ExpertSliceErrorCode): void {
  const want = { gate: [nEmbd, ff, n], up: [nEmbd, ff, n], down: [ff, nEmbd, n] };
  if (EXPERT_MATRICES.every((m) => sameDims(t[m].dims, want[m]))) return;
  const shapes = EXPERT_MATRICES.map((m) => `${t[m].name} [${t[m].dims.join(', ')}]`).join(', ');
  const expected = `gate = up = [${want.gate.join(', ')}], down = [${want.down.join(', ')}]`;
  throw new ExpertSliceError(code, `expert tensors ${shapes}; expected ${expected}`);
}

function byMatrix<T>(f: (m: ExpertMatrix) => T): Record<ExpertMatrix, T> {
  return { gate: f('gate'), up: f('up'), down: f('down') };
}

function optString(file: GGUFFile, key: string): string | undefined {
  const v = file.metadata.get(key);
  return v?.type === GGUFValueType.STRING ? v.value : undefined;
}

/**
 * Plans the slice of experts [expertBegin, expertEnd) of `layer` from a parsed model. Refuses (never clamps) an
 * empty or out-of-bounds range.
 */
export function planExpertSlice(file: GGUFFile, layer: number, expertBegin: number, expertEnd: number): ExpertSlicePlan {
  for (const [what, v] of [
    ['layer', layer],
    ['expert_begin', expertBegin],
    ['expert_end', expertEnd],
  ] as const) {
    if (!(Number.isInteger(v) && v >= 0 && v <= 0xffffffff)) {
      throw new ExpertSliceError('SLICE_BAD_RANGE', `${what} must be an integer in [0, 2^32), got ${String(v)}`);
    }
  }
  const { found, fusedFrom } = layerExpertTensors(file, layer);
  const missing = EXPERT_MATRICES.filter((m) => !found[m]).map((m) => expertTensorName(layer, m));
  if (missing.length === 3) {
    const why = `layer ${layer} has no routed experts (no ${missing[0]}): a dense layer, or no such layer`;
    throw new ExpertSliceError('SLICE_NOT_MOE', why);
  }
  if (missing.length > 0) throw new ExpertSliceError('SLICE_BAD_TENSORS', `layer ${layer} lacks ${missing.join(', ')}`);
  const t = found as Record<ExpertMatrix, GGUFTensorInfo>;
  const [nEmbd = 0, ff = 0, nExpertTotal = 0] = t.gate.dims;
  checkDims(t, nEmbd, ff, nExpertTotal, 'SLICE_BAD_TENSORS');
  if (!(expertBegin < expertEnd && expertEnd <= nExpertTotal)) {
    throw new ExpertSliceError(
      'SLICE_BAD_RANGE',
      `experts [${expertBegin}, ${expertEnd}) is not a non-empty range within layer ${layer}'s ${nExpertTotal} experts`,
    );
  }
  const n = expertEnd - expertBegin;
  const matrices = EXPERT_MATRICES.map((matrix): ExpertSliceMatrixPlan => {
    const source = t[matrix];
    const bytesPerExpert = source.byteLength / nExpertTotal;
    const [d0 = 0, d1 = 0] = source.dims;
    const dims: [number, number, number] = [d0, d1, n];
    if (fusedFrom && matrix !== 'down') {
      // Expert e's gate rows, then its up rows: this half of each expert's block of the fused tensor.
      const stride = 2 * bytesPerExpert;
      const first = file.dataOffset + fusedFrom.offset + expertBegin * stride + (matrix === 'up' ? bytesPerExpert : 0);
      const pieces = Array.from({ length: n }, (_, i) => ({ start: first + i * stride, end: first + i * stride + bytesPerExpert }));
      return {
        matrix,
        name: source.name,
        source,
        dims,
        bytesPerExpert,
        start: first,
        end: first + (n - 1) * stride + bytesPerExpert,
        pieces,
      };
    }
    const start = file.dataOffset + source.offset + expertBegin * bytesPerExpert;
    const end = start + n * bytesPerExpert;
    return { matrix, name: source.name, source, dims, bytesPerExpert, start, end, pieces: [{ start, end }] };
  });
  const architecture = optString(file, 'general.architecture');
  const modelName = optString(file, 'general.name');
  const metadata: Array<[string, GGUFValue]> = [];
  if (architecture !== undefined) metadata.push(['general.architecture', str(architecture)]);
  metadata.push([`${EXPERT_SLICE_PREFIX}version`, u32(EXPERT_SLICE_VERSION)]);
  const values = [layer, expertBegin, expertEnd, nExpertTotal, nEmbd, ff];
  SLICE_KEYS.forEach((k, i) => {
    metadata.push([EXPERT_SLICE_PREFIX + k, u32(values[i] as number)]);
  });
  if (modelName !== undefined) metadata.push([`${EXPERT_SLICE_PREFIX}model_name`, str(modelName)]);
  metadata.push(...kvasirSliceKeys(layer, expertBegin, expertEnd, nExpertTotal, nEmbd));
  const shape = { nEmbd, ff, nExpert: nExpertTotal };
  let variant: ExpertVariant;
  let biasTensors: ReturnType<typeof layerBiasTensors>;
  let scaleTensors: ReturnType<typeof modelScaleTensors>;
  try {
    variant = layerVariant(file, layer, shape);
    biasTensors = layerBiasTensors(file, layer, shape);
    scaleTensors = modelScaleTensors(file, layer, nExpertTotal);
  } catch (e) {
    throw new ExpertSliceError('SLICE_BAD_TENSORS', (e as Error).message);
  }
  if (variant.activation !== 'silu') {
    metadata.push([`${EXPERT_SLICE_PREFIX}activation`, str(variant.activation)]);
    if (variant.alpha !== 0) metadata.push([`${EXPERT_SLICE_PREFIX}alpha`, f32(variant.alpha)]);
    if (variant.limit !== 0) metadata.push([`${EXPERT_SLICE_PREFIX}limit`, f32(variant.limit)]);
  }
  const biases = !biasTensors
    ? []
    : EXPERT_BIASES.map((bias): ExpertSliceBiasPlan => {
        const t = biasTensors[bias];
        const len = t.dims[0] as number;
        const start = file.dataOffset + t.offset + expertBegin * len * 4;
        return { bias, name: t.name, dims: [len, n], start, end: start + n * len * 4 };
      });
  const scales = !scaleTensors
    ? []
    : EXPERT_BIASES.map((bias): ExpertSliceBiasPlan => {
        const t = scaleTensors[bias];
        // a scale the model lacks is carried as ones, so that a slice has all three or none
        if (!t) return { bias, name: expertScaleName(layer, bias), dims: [n, 1], start: 0, end: 0, fill: 1 };
        const start = file.dataOffset + t.offset + expertBegin * 4;
        return { bias, name: t.name, dims: [n, 1], start, end: start + n * 4 };
      });
  return {
    layer,
    expertBegin,
    expertEnd,
    nExpertTotal,
    nEmbd,
    ff,
    types: byMatrix((m) => t[m].type),
    bytes: byMatrix((m) => n * (t[m].byteLength / nExpertTotal)),
    ...(architecture !== undefined && { architecture }),
    ...(modelName !== undefined && { modelName }),
    ...(!isPlainVariant(variant) ? { variant } : {}),
    matrices,
    biases,
    scales,
    metadata,
  };
}

/** The planned experts' biases as float32 values, or undefined when the layer has none. */
export async function readPlannedBiases(source: ByteSource, plan: ExpertSlicePlan): Promise<ExpertSliceBiasValues | undefined> {
  if (plan.biases.length === 0) return undefined;
  const out = {} as ExpertSliceBiasValues;
  for (const b of plan.biases) {
    const filled = filledBytes(b);
    if (filled) {
      out[b.bias] = biasValues(filled);
      continue;
    }
    const bytes = await source.read(b.start, b.end - b.start);
    if (bytes.length !== b.end - b.start)
      throw new GGUFError('GGUF_IO', `byte source returned ${bytes.length} bytes, ${b.end - b.start} were asked for`, b.start);
    out[b.bias] = biasValues(bytes);
  }
  return out;
}

/** The planned experts' per-expert scales as float32 values, or undefined when the layer has none. */
export async function readPlannedScales(source: ByteSource, plan: ExpertSlicePlan): Promise<ExpertSliceBiasValues | undefined> {
  return readPlannedBiases(source, { ...plan, biases: plan.scales });
}

/** The planned experts' bytes of each matrix, read whole into memory (tests and tools; the hub streams them). */
export async function readPlannedMatrices(source: ByteSource, plan: ExpertSlicePlan): Promise<Record<ExpertMatrix, Uint8Array>> {
  const out = {} as Record<ExpertMatrix, Uint8Array>;
  for (const m of plan.matrices) {
    const bytes = new Uint8Array(m.pieces.reduce((n, p) => n + (p.end - p.start), 0));
    let at = 0;
    for (const p of m.pieces) {
      const got = await source.read(p.start, p.end - p.start);
      if (got.length !== p.end - p.start)
        throw new GGUFError('GGUF_IO', `byte source returned ${got.length} bytes, ${p.end - p.start} were asked for`, p.start);
      bytes.set(got, at);
      at += got.length;
    }
    out[m.matrix] = bytes;
  }
  return out;
}

/** One expert's bytes of one matrix of `layer` (a fused gate_up_exps read as its halves), read from `source`. */
export async function readExpertMatrix(
  source: ByteSource,
  file: GGUFFile,
  layer: number,
  matrix: ExpertMatrix,
  expert: number,
): Promise<{ info: GGUFTensorInfo; bytes: Uint8Array }> {
  const plan = planExpertSlice(file, layer, expert, expert + 1);
  const m = plan.matrices.find((x) => x.matrix === matrix) as ExpertSliceMatrixPlan;
  const { start, end } = m.pieces[0] as { start: number; end: number };
  const bytes = await source.read(start, end - start);
  if (bytes.length !== end - start)
    throw new GGUFError('GGUF_IO', `byte source returned ${bytes.length} bytes, ${end - start} were asked for`, start);
  return { info: m.source, bytes };
}

function sliceWriter(plan: ExpertSlicePlan): GGUFWriter {
  const w = new GGUFWriter();
  for (const [k, v] of plan.metadata) w.set(k, v);
  for (const m of plan.matrices) w.addTensor(m.name, m.dims, m.source.type);
  for (const b of plan.biases) w.addTensor(b.name, b.dims, GGMLType.F32);
  for (const b of plan.scales) w.addTensor(b.name, [b.dims[0]], GGMLType.F32);
  return w;
}

/** Exact size of the slice file writeExpertSlice writes (for Content-Length). */
export function expertSliceByteLength(plan: ExpertSlicePlan): number {
  return sliceWriter(plan).fileSize;
}

/**
 * Writes the slice to `sink`, copying the experts' bytes from the model in reads of at most `chunkBytes`
 * (default 4 MiB); never holds a whole tensor. Closes the sink when done (GGUFWriter.finish). Returns the bytes written.
 */
export async function writeExpertSlice(
  source: ByteSource,
  plan: ExpertSlicePlan,
  sink: ByteSink,
  opts: { chunkBytes?: number } = {},
): Promise<number> {
  const chunkBytes = opts.chunkBytes ?? DEFAULT_COPY_CHUNK_BYTES;
  if (!(Number.isSafeInteger(chunkBytes) && chunkBytes > 0)) {
    throw new RangeError(`chunkBytes must be a positive integer, got ${chunkBytes}`);
  }
  for (const m of [...plan.matrices, ...plan.biases, ...plan.scales]) {
    if (m.end > source.size) {
      const why = `${m.name}: experts end at byte ${m.end}, past the ${source.size}-byte source (another model's plan?)`;
      throw new GGUFError('GGUF_IO', why);
    }
  }
  const w = sliceWriter(plan);
  await w.writeHeader(sink);
  for (const m of plan.matrices) {
    for (const piece of m.pieces) {
      for (let at = piece.start; at < piece.end; at += chunkBytes) {
        const n = Math.min(chunkBytes, piece.end - at);
        const bytes = await source.read(at, n);
        if (bytes.length !== n) throw new GGUFError('GGUF_IO', `byte source returned ${bytes.length} bytes, ${n} were asked for`, at);
        await w.writeTensorData(sink, bytes, m.name);
      }
    }
  }
  for (const b of [...plan.biases, ...plan.scales]) {
    const filled = filledBytes(b);
    const bytes = filled ?? (await source.read(b.start, b.end - b.start));
    if (!filled && bytes.length !== b.end - b.start)
      throw new GGUFError('GGUF_IO', `byte source returned ${bytes.length} bytes, ${b.end - b.start} were asked for`, b.start);
    await w.writeTensorData(sink, bytes, b.name);
  }
  await w.finish(sink);
  return w.bytesWritten;
}

// ---------------------------------------------------------------------------------------------------------------
// reading

function notSlice(why: string): ExpertSliceError {
  return new ExpertSliceError('SLICE_NOT_A_SLICE', why);
}

/** The slice's variant from its metadata (activation, alpha, limit) and whether it carries biases. */
function sliceVariant(file: GGUFFile, biases: boolean, scales: boolean): ExpertVariant {
  const act = file.metadata.get(`${EXPERT_SLICE_PREFIX}activation`);
  const extra = { biases, ...(scales && { scales }) };
  if (act === undefined) return { ...SILU_VARIANT, ...extra };
  if (act.type !== GGUFValueType.STRING || !EXPERT_ACTIVATIONS.includes(act.value as ExpertActivation)) {
    throw notSlice(`metadata key "${EXPERT_SLICE_PREFIX}activation" is not one of ${EXPERT_ACTIVATIONS.join(', ')}`);
  }
  const num = (k: string): number => {
    const v = file.metadata.get(EXPERT_SLICE_PREFIX + k);
    if (v?.type !== GGUFValueType.FLOAT32 || !(Number.isFinite(v.value) && v.value > 0)) {
      throw notSlice(`metadata key "${EXPERT_SLICE_PREFIX}${k}" must be a positive f32`);
    }
    return v.value;
  };
  const activation = act.value as ExpertActivation;
  const has = (k: string): boolean => file.metadata.has(EXPERT_SLICE_PREFIX + k);
  const v: ExpertVariant = { activation, alpha: has('alpha') ? num('alpha') : 0, limit: has('limit') ? num('limit') : 0, ...extra };
  try {
    checkVariant(v);
  } catch (e) {
    throw notSlice(`the slice's variant: ${(e as Error).message}`);
  }
  return v;
}

function sliceTensors(file: GGUFFile): {
  info: ExpertSliceInfo;
  tensors: Record<ExpertMatrix, GGUFTensorInfo>;
  biases?: Record<ExpertBiasName, GGUFTensorInfo>;
  scales?: Record<ExpertBiasName, GGUFTensorInfo>;
} {
  const key = (k: string): number => {
    const v = file.metadata.get(EXPERT_SLICE_PREFIX + k);
    if (v?.type !== GGUFValueType.UINT32) {
      throw notSlice(`metadata key "${EXPERT_SLICE_PREFIX}${k}" is ${v ? describeValueType(v) : 'missing'}, expected u32`);
    }
    return v.value;
  };
  const version = key('version');
  if (version !== EXPERT_SLICE_VERSION) throw notSlice(`slice version ${version} is not supported (expected ${EXPERT_SLICE_VERSION})`);
  const [layer, expertBegin, expertEnd, nExpertTotal, nEmbd, ff] = SLICE_KEYS.map(key) as [number, number, number, number, number, number];
  if (!(expertBegin < expertEnd && expertEnd <= nExpertTotal)) {
    throw notSlice(`experts [${expertBegin}, ${expertEnd}) of ${nExpertTotal} is not a non-empty range`);
  }
  const found = byMatrix((m) => findTensor(file, expertTensorName(layer, m)));
  const hasBiases = EXPERT_BIASES.some((b) => findTensor(file, expertBiasName(layer, b)));
  const hasScales = EXPERT_BIASES.some((b) => findTensor(file, expertScaleName(layer, b)));
  if (file.tensors.length !== 3 + (hasBiases ? 3 : 0) + (hasScales ? 3 : 0) || EXPERT_MATRICES.some((m) => !found[m])) {
    const names = file.tensors.map((t) => t.name).join(', ') || 'none';
    const want = EXPERT_MATRICES.map((m) => expertTensorName(layer, m)).join(', ');
    throw notSlice(`expected exactly the tensors ${want} (and their three biases and three scales, or none); found ${names}`);
  }
  const tensors = found as Record<ExpertMatrix, GGUFTensorInfo>;
  checkDims(tensors, nEmbd, ff, expertEnd - expertBegin, 'SLICE_NOT_A_SLICE');
  let biases: Record<ExpertBiasName, GGUFTensorInfo> | undefined;
  let scales: Record<ExpertBiasName, GGUFTensorInfo> | undefined;
  try {
    biases = layerBiasTensors(file, layer, { nEmbd, ff, nExpert: expertEnd - expertBegin });
    scales = layerScaleTensors(file, layer, expertEnd - expertBegin);
  } catch (e) {
    throw notSlice((e as Error).message);
  }
  const variant = sliceVariant(file, biases !== undefined, scales !== undefined);
  const architecture = optString(file, 'general.architecture');
  const modelName = optString(file, `${EXPERT_SLICE_PREFIX}model_name`);
  const info: ExpertSliceInfo = {
    layer,
    expertBegin,
    expertEnd,
    nExpertTotal,
    nEmbd,
    ff,
    types: byMatrix((m) => tensors[m].type),
    bytes: byMatrix((m) => tensors[m].byteLength),
    ...(architecture !== undefined && { architecture }),
    ...(modelName !== undefined && { modelName }),
    ...(!isPlainVariant(variant) ? { variant } : {}),
  };
  return { info, tensors, ...(biases && { biases }), ...(scales && { scales }) };
}

/** Checks that a parsed GGUF is an expert slice and describes it; throws SLICE_NOT_A_SLICE otherwise. */
export function expertSliceInfo(file: GGUFFile): ExpertSliceInfo {
  return sliceTensors(file).info;
}

/** Where a slice's data lies in its file (readExpertSliceBytes, and readExpertSliceStream in expert-slice-stream.ts). */
export interface ExpertSliceLayout {
  info: ExpertSliceInfo;
  /** The matrices' data in the slice file, in file order whatever the order of their infos. */
  ranges: ByteRange[];
  /** The biases' data (none when the slice has none), in file order. */
  biasRanges: BiasRange[];
  /** The per-expert scales' data (none when the slice has none), in file order; `bias` names the matrix. */
  scaleRanges: BiasRange[];
  /** End of the last tensor's data; fileEnd: with its padding. */
  dataEnd: number;
  fileEnd: number;
}

/** Checks that a parsed GGUF is an expert slice (SLICE_NOT_A_SLICE otherwise) and locates its data. */
export function expertSliceLayout(file: GGUFFile): ExpertSliceLayout {
  const { info, tensors, biases, scales } = sliceTensors(file);
  const ranges = EXPERT_MATRICES.map((matrix): ByteRange => {
    const start = file.dataOffset + tensors[matrix].offset;
    return { matrix, start, end: start + tensors[matrix].byteLength };
  }).sort((a, b) => a.start - b.start);
  const biasRanges = !biases
    ? []
    : EXPERT_BIASES.map((bias): BiasRange => {
        const start = file.dataOffset + biases[bias].offset;
        return { bias, start, end: start + biases[bias].byteLength };
      }).sort((a, b) => a.start - b.start);
  const scaleRanges = !scales
    ? []
    : EXPERT_BIASES.map((bias): BiasRange => {
        const start = file.dataOffset + scales[bias].offset;
        return { bias, start, end: start + scales[bias].byteLength };
      }).sort((a, b) => a.start - b.start);
  const dataEnd = Math.max(...ranges.map((r) => r.end), ...biasRanges.map((r) => r.end), ...scaleRanges.map((r) => r.end));
  const fileEnd = dataEnd + ((file.alignment - ((dataEnd - file.dataOffset) % file.alignment)) % file.alignment);
  return { info, ranges, biasRanges, scaleRanges, dataEnd, fileEnd };
}

/** SLICE_TRAILING_BYTES: bytes after `fileEnd`, the end of the last tensor's padding. */
export function trailingBytesError(fileEnd: number): ExpertSliceError {
  return new ExpertSliceError('SLICE_TRAILING_BYTES', `bytes after the end of the slice (byte ${fileEnd})`);
}

/** A slice's biases as float32 values: gate and up [n × ff], down [n × n_embd], n = expertEnd − expertBegin. */
export type ExpertSliceBiasValues = Record<ExpertBiasName, Float32Array>;

export type ExpertSliceBytes = {
  info: ExpertSliceInfo;
  biases?: ExpertSliceBiasValues;
  /** Per-expert scales, one float per expert of the slice for each matrix. */
  scales?: ExpertSliceBiasValues;
} & Record<ExpertMatrix, Uint8Array>;

/** Float32 values of bias bytes (a copy: the bytes may sit at any offset). */
export function biasValues(bytes: Uint8Array): Float32Array {
  const copy = new Uint8Array(bytes.length);
  copy.set(bytes);
  return new Float32Array(copy.buffer);
}

/** Parses a whole slice in memory; the matrices are views of `bytes` (no copy). */
export async function readExpertSliceBytes(bytes: Uint8Array): Promise<ExpertSliceBytes> {
  const file = await readGGUF(bytesSource(bytes));
  const { info, ranges, biasRanges, scaleRanges, fileEnd } = expertSliceLayout(file);
  if (bytes.length > fileEnd) throw trailingBytesError(fileEnd);
  const view = (m: ExpertMatrix): Uint8Array => {
    const s = ranges.find((x) => x.matrix === m) as ByteRange;
    return bytes.subarray(s.start, s.end);
  };
  const vectors = (rs: BiasRange[]): ExpertSliceBiasValues | undefined => {
    if (rs.length === 0) return undefined;
    const one = (b: ExpertBiasName): Float32Array => {
      const s = rs.find((x) => x.bias === b) as BiasRange;
      return biasValues(bytes.subarray(s.start, s.end));
    };
    return { gate: one('gate'), up: one('up'), down: one('down') };
  };
  const biases = vectors(biasRanges);
  const scales = vectors(scaleRanges);
  return { info, gate: view('gate'), up: view('up'), down: view('down'), ...(biases && { biases }), ...(scales && { scales }) };
}
