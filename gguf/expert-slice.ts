/**
 * Expert slices: a mini-GGUF holding experts [begin, end) of one MoE layer, what the hub serves at
 * `GET /api/expert-shard?model=&layer=&expert_begin=&expert_end=` and a volunteer loads into GPU buffers.
 *
 * A model stores layer L's routed experts as three 3-D tensors (ggml order, ne0 first), expert-major:
 *   blk.L.ffn_gate_exps.weight, blk.L.ffn_up_exps.weight   ne = [n_embd, ff, n_expert]
 *   blk.L.ffn_down_exps.weight                             ne = [ff, n_embd, n_expert]
 * so experts [begin, end) of each are one contiguous byte range. A slice is a GGUF v3 file (alignment 32) with the
 * same three tensors — same names and types, ne2 = end − begin, bytes copied unchanged, data in the order gate, up,
 * down — and this metadata:
 *   general.architecture                                       str, copied from the model when it has one
 *   expertswarm.slice.version                                  u32, EXPERT_SLICE_VERSION
 *   expertswarm.slice.{layer, expert_begin, expert_end,
 *                      n_expert_total, n_embd, ff}             u32
 *   expertswarm.slice.model_name                               str, the model's general.name when it has one
 *
 *   const plan = planExpertSlice(file, 3, 16, 32);                 // hub
 *   reply.header('content-length', expertSliceByteLength(plan));
 *   await writeExpertSlice(source, plan, sink);
 *   const info = await readExpertSliceStream(res.body, { onHeader, onData });   // volunteer
 *
 * Errors: ExpertSliceError (codes below) when a request or a file is not what a slice needs; GGUFErrors pass
 * through, notably GGUF_TRUNCATED (the stream ended early), GGUF_LIMIT (header over maxHeaderBytes) and GGUF_IO.
 * Browser-safe.
 */
import { GGUFError, isGGUFError } from './errors.ts';
import type { GGMLType } from './quant-types.ts';
import { bytesSource, readGGUF } from './reader.ts';
import type { ByteSource } from './reader.ts';
import { GGUFValueType, describeValueType, findTensor, str, u32 } from './types.ts';
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

export type ExpertMatrix = 'gate' | 'up' | 'down';
export const EXPERT_MATRICES: readonly ExpertMatrix[] = ['gate', 'up', 'down'];
export const EXPERT_SLICE_PREFIX = 'expertswarm.slice.';
export const EXPERT_SLICE_VERSION = 1;
/** The u32 keys after `${EXPERT_SLICE_PREFIX}version`, in the order they are written. */
const SLICE_KEYS = ['layer', 'expert_begin', 'expert_end', 'n_expert_total', 'n_embd', 'ff'] as const;
export const DEFAULT_MAX_HEADER_BYTES = 16 * 1024 * 1024;
export const DEFAULT_COPY_CHUNK_BYTES = 4 * 1024 * 1024;
/** The GGUF reader reads ahead up to 1 MiB past what it needs; header reads may reach that far past the cap. */
const READ_AHEAD_SLACK = 1024 * 1024;

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
}

export interface ExpertSliceMatrixPlan {
  matrix: ExpertMatrix;
  /** The tensor's name, the same in model and slice. */
  name: string;
  source: GGUFTensorInfo;
  /** Dims in the slice: the source's with ne2 = expertEnd − expertBegin. */
  dims: [number, number, number];
  bytesPerExpert: number;
  /** Absolute byte range [start, end) of the sliced experts in the model file. */
  start: number;
  end: number;
}

export interface ExpertSlicePlan extends ExpertSliceInfo {
  /** gate, up, down: the order their data is written. */
  matrices: ExpertSliceMatrixPlan[];
  metadata: Array<[string, GGUFValue]>;
}

function sameDims(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** Expected dims of each matrix; throws `code` naming every tensor when one differs. */
function checkDims(
  t: Record<ExpertMatrix, GGUFTensorInfo>,
  nEmbd: number,
  ff: number,
  n: number,
  code: ExpertSliceErrorCode,
): void {
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
  for (const [what, v] of [['layer', layer], ['expert_begin', expertBegin], ['expert_end', expertEnd]] as const) {
    if (!(Number.isInteger(v) && v >= 0 && v <= 0xffffffff)) {
      throw new ExpertSliceError('SLICE_BAD_RANGE', `${what} must be an integer in [0, 2^32), got ${String(v)}`);
    }
  }
  const found = byMatrix((m) => findTensor(file, expertTensorName(layer, m)));
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
    const start = file.dataOffset + source.offset + expertBegin * bytesPerExpert;
    const [d0 = 0, d1 = 0] = source.dims;
    return { matrix, name: source.name, source, dims: [d0, d1, n], bytesPerExpert, start, end: start + n * bytesPerExpert };
  });
  const architecture = optString(file, 'general.architecture');
  const modelName = optString(file, 'general.name');
  const metadata: Array<[string, GGUFValue]> = [];
  if (architecture !== undefined) metadata.push(['general.architecture', str(architecture)]);
  metadata.push([`${EXPERT_SLICE_PREFIX}version`, u32(EXPERT_SLICE_VERSION)]);
  const values = [layer, expertBegin, expertEnd, nExpertTotal, nEmbd, ff];
  SLICE_KEYS.forEach((k, i) => metadata.push([EXPERT_SLICE_PREFIX + k, u32(values[i] as number)]));
  if (modelName !== undefined) metadata.push([`${EXPERT_SLICE_PREFIX}model_name`, str(modelName)]);
  return {
    layer, expertBegin, expertEnd, nExpertTotal, nEmbd, ff,
    types: byMatrix((m) => t[m].type),
    bytes: byMatrix((m) => n * (t[m].byteLength / nExpertTotal)),
    ...(architecture !== undefined && { architecture }),
    ...(modelName !== undefined && { modelName }),
    matrices,
    metadata,
  };
}

function sliceWriter(plan: ExpertSlicePlan): GGUFWriter {
  const w = new GGUFWriter();
  for (const [k, v] of plan.metadata) w.set(k, v);
  for (const m of plan.matrices) w.addTensor(m.name, m.dims, m.source.type);
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
  for (const m of plan.matrices) {
    if (m.end > source.size) {
      const why = `${m.name}: experts end at byte ${m.end}, past the ${source.size}-byte source (another model's plan?)`;
      throw new GGUFError('GGUF_IO', why);
    }
  }
  const w = sliceWriter(plan);
  await w.writeHeader(sink);
  for (const m of plan.matrices) {
    for (let at = m.start; at < m.end; at += chunkBytes) {
      const n = Math.min(chunkBytes, m.end - at);
      const bytes = await source.read(at, n);
      if (bytes.length !== n) throw new GGUFError('GGUF_IO', `byte source returned ${bytes.length} bytes, ${n} were asked for`, at);
      await w.writeTensorData(sink, bytes, m.name);
    }
  }
  await w.finish(sink);
  return w.bytesWritten;
}

// ---------------------------------------------------------------------------------------------------------------
// reading

function notSlice(why: string): ExpertSliceError {
  return new ExpertSliceError('SLICE_NOT_A_SLICE', why);
}

function sliceTensors(file: GGUFFile): { info: ExpertSliceInfo; tensors: Record<ExpertMatrix, GGUFTensorInfo> } {
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
  if (file.tensors.length !== 3 || EXPERT_MATRICES.some((m) => !found[m])) {
    const names = file.tensors.map((t) => t.name).join(', ') || 'none';
    const want = EXPERT_MATRICES.map((m) => expertTensorName(layer, m)).join(', ');
    throw notSlice(`expected exactly the tensors ${want}; found ${names}`);
  }
  const tensors = found as Record<ExpertMatrix, GGUFTensorInfo>;
  checkDims(tensors, nEmbd, ff, expertEnd - expertBegin, 'SLICE_NOT_A_SLICE');
  const architecture = optString(file, 'general.architecture');
  const modelName = optString(file, `${EXPERT_SLICE_PREFIX}model_name`);
  const info: ExpertSliceInfo = {
    layer, expertBegin, expertEnd, nExpertTotal, nEmbd, ff,
    types: byMatrix((m) => tensors[m].type),
    bytes: byMatrix((m) => tensors[m].byteLength),
    ...(architecture !== undefined && { architecture }),
    ...(modelName !== undefined && { modelName }),
  };
  return { info, tensors };
}

/** Checks that a parsed GGUF is an expert slice and describes it; throws SLICE_NOT_A_SLICE otherwise. */
export function expertSliceInfo(file: GGUFFile): ExpertSliceInfo {
  return sliceTensors(file).info;
}

interface Segment {
  matrix: ExpertMatrix;
  start: number;
  end: number;
}

interface SliceLayout {
  info: ExpertSliceInfo;
  /** The tensors' data in file order, whatever the order of their infos. */
  segments: Segment[];
  /** End of the last tensor's data; fileEnd: with its padding. */
  dataEnd: number;
  fileEnd: number;
}

function sliceLayout(file: GGUFFile): SliceLayout {
  const { info, tensors } = sliceTensors(file);
  const segments = EXPERT_MATRICES.map((matrix) => {
    const start = file.dataOffset + tensors[matrix].offset;
    return { matrix, start, end: start + tensors[matrix].byteLength };
  }).sort((a, b) => a.start - b.start);
  const dataEnd = (segments[2] as Segment).end;
  const fileEnd = dataEnd + ((file.alignment - ((dataEnd - file.dataOffset) % file.alignment)) % file.alignment);
  return { info, segments, dataEnd, fileEnd };
}

function trailing(fileEnd: number): ExpertSliceError {
  return new ExpertSliceError('SLICE_TRAILING_BYTES', `bytes after the end of the slice (byte ${fileEnd})`);
}

export type ExpertSliceBytes = { info: ExpertSliceInfo } & Record<ExpertMatrix, Uint8Array>;

/** Parses a whole slice in memory; the matrices are views of `bytes` (no copy). */
export async function readExpertSliceBytes(bytes: Uint8Array): Promise<ExpertSliceBytes> {
  const file = await readGGUF(bytesSource(bytes));
  const { info, segments, fileEnd } = sliceLayout(file);
  if (bytes.length > fileEnd) throw trailing(fileEnd);
  const view = (m: ExpertMatrix): Uint8Array => {
    const s = segments.find((x) => x.matrix === m) as Segment;
    return bytes.subarray(s.start, s.end);
  };
  return { info, gate: view('gate'), up: view('up'), down: view('down') };
}

export interface ExpertSliceHandlers {
  /** Once, after the header is read and validated, before any data. Awaited. */
  onHeader?(info: ExpertSliceInfo): void | Promise<void>;
  /**
   * Tensor data in file order, padding skipped, each matrix from offset 0 to info.bytes[matrix] without gaps.
   * Awaited, so a slow consumer slows the stream down. `chunk` may be a view of the stream's buffer that is valid
   * only during the call: copy it to keep it.
   */
  onData(matrix: ExpertMatrix, offsetInMatrix: number, chunk: Uint8Array): void | Promise<void>;
}

export interface ReadExpertSliceLimits {
  /** Most bytes of header (everything before the tensor data) held in memory. Default 16 MiB. */
  maxHeaderBytes?: number;
}

/** A stream's bytes as they arrive, kept (no copies) from `pos`, the next byte take() hands out. */
class Inflow {
  private chunks: Uint8Array[] = [];
  private head = 0;
  pos = 0;
  /** Bytes received so far. */
  received = 0;
  ended = false;
  private readonly next: () => Promise<IteratorResult<Uint8Array, unknown>>;
  private readonly stop: () => Promise<unknown>;

  constructor(stream: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>) {
    if (typeof (stream as ReadableStream<Uint8Array>).getReader === 'function') {
      const reader = (stream as ReadableStream<Uint8Array>).getReader();
      this.next = () => reader.read() as Promise<IteratorResult<Uint8Array, unknown>>;
      this.stop = () => reader.cancel();
    } else {
      const it = (stream as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
      this.next = () => it.next();
      this.stop = async () => it.return?.();
    }
  }

  /** Receives one more non-empty chunk; false at the end of the stream. */
  private async pull(): Promise<boolean> {
    while (!this.ended) {
      const r = await this.next();
      if (r.done) break;
      const c: unknown = r.value;
      if (!(c instanceof Uint8Array)) {
        throw new GGUFError('GGUF_IO', `the stream yielded ${typeof c} chunks, expected Uint8Array`, this.received);
      }
      if (c.length === 0) continue;
      this.chunks.push(c);
      this.received += c.length;
      return true;
    }
    this.ended = true;
    return false;
  }

  /** Receives until byte `end` is in or the stream ends. */
  async fill(end: number): Promise<void> {
    while (this.received < end && (await this.pull()));
  }

  /** A copy of [offset, offset + length), offset ≥ pos; zeros past the end of the stream. */
  copy(offset: number, length: number): Uint8Array {
    const out = new Uint8Array(length);
    let at = this.pos;
    for (let i = this.head; i < this.chunks.length && at < offset + length; i++) {
      const c = this.chunks[i] as Uint8Array;
      const from = Math.max(offset, at);
      const to = Math.min(offset + length, at + c.length);
      if (from < to) out.set(c.subarray(from - at, to - at), from - offset);
      at += c.length;
    }
    return out;
  }

  /** Up to `max` bytes at `pos`, as a view, consumed; undefined at the end of the stream. */
  async take(max: number): Promise<Uint8Array | undefined> {
    if (this.head === this.chunks.length) {
      this.chunks = [];
      this.head = 0;
      if (!(await this.pull())) return undefined;
    }
    const c = this.chunks[this.head] as Uint8Array;
    const n = Math.min(max, c.length);
    if (n === c.length) this.chunks[this.head++] = c.subarray(0, 0);
    else this.chunks[this.head] = c.subarray(n);
    this.pos += n;
    return n === c.length ? c : c.subarray(0, n);
  }

  /** Consumes up to byte `end`; false when the stream ends first. */
  async skipTo(end: number): Promise<boolean> {
    while (this.pos < end) if (!(await this.take(end - this.pos))) return false;
    return true;
  }

  async close(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    await this.stop().catch(() => {});
  }
}

function headerTooLarge(max: number): GGUFError {
  return new GGUFError('GGUF_LIMIT', `the slice's header does not fit in maxHeaderBytes (${max})`);
}

/**
 * Parses the header with readGGUF over a source that waits for the stream. Its size is unknown, so the source claims
 * the largest (the data ranges are checked while streaming) and reads bytes past the end of the stream as zeros: a
 * header that used them ends past the last byte received, and a parse that failed on them is redone on exactly
 * the bytes received, for the real error.
 */
async function readStreamHeader(inflow: Inflow, maxHeaderBytes: number): Promise<GGUFFile> {
  let pastEnd = false;
  const src: ByteSource = {
    size: Number.MAX_SAFE_INTEGER,
    async read(offset, length) {
      if (offset + length > maxHeaderBytes + READ_AHEAD_SLACK) throw headerTooLarge(maxHeaderBytes);
      await inflow.fill(offset + length);
      if (offset + length > inflow.received) pastEnd = true;
      return inflow.copy(offset, length);
    },
  };
  let file: GGUFFile;
  try {
    file = await readGGUF(src);
  } catch (e) {
    if (!pastEnd || isGGUFError(e, 'GGUF_LIMIT')) throw e;
    await readGGUF(bytesSource(inflow.copy(0, inflow.received))).catch((real: unknown) => {
      throw isGGUFError(real, 'GGUF_TRUNCATED') ? real.withContext('the stream ended inside the header') : real;
    });
    throw e;
  }
  if (file.dataOffset > maxHeaderBytes) throw headerTooLarge(maxHeaderBytes);
  if (file.dataOffset > inflow.received) {
    const where = `inside the ${file.dataOffset}-byte header`;
    throw new GGUFError('GGUF_TRUNCATED', `the stream ended after ${inflow.received} bytes, ${where}`, inflow.received);
  }
  return file;
}

/**
 * Reads a slice forward-only: holds the header (at most maxHeaderBytes), calls onHeader, then hands the tensor
 * data to onData as it arrives, and checks the stream ends right after the last tensor (its padding optional).
 * Resolves with the slice's info. Cancels the stream when it stops early (an error, or a handler that throws).
 */
export async function readExpertSliceStream(
  stream: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
  handlers: ExpertSliceHandlers,
  limits: ReadExpertSliceLimits = {},
): Promise<ExpertSliceInfo> {
  const maxHeaderBytes = limits.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES;
  const inflow = new Inflow(stream);
  try {
    const file = await readStreamHeader(inflow, maxHeaderBytes);
    const { info, segments, dataEnd, fileEnd } = sliceLayout(file);
    await handlers.onHeader?.(info);
    const truncated = (): GGUFError => {
      const short = `${dataEnd - inflow.pos} bytes short of the end of the tensor data (byte ${dataEnd})`;
      return new GGUFError('GGUF_TRUNCATED', `the stream ended after ${inflow.pos} bytes, ${short}`, inflow.pos);
    };
    for (const s of segments) {
      if (!(await inflow.skipTo(s.start))) throw truncated();
      while (inflow.pos < s.end) {
        const offset = inflow.pos - s.start;
        const chunk = await inflow.take(s.end - inflow.pos);
        if (!chunk) throw truncated();
        await handlers.onData(s.matrix, offset, chunk);
      }
    }
    if ((await inflow.skipTo(fileEnd)) && (await inflow.take(1))) throw trailing(fileEnd);
    return info;
  } finally {
    await inflow.close();
  }
}
