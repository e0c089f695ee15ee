/**
 * Streaming GGUF writer (version 3 by default), byte-compatible with llama.cpp's gguf.cpp:
 *   magic, version (u32), n_tensors (i64), n_kv (i64), key/values, tensor infos, zero padding to the alignment,
 *   then each tensor's data followed by zero padding to the alignment (the last one too, as gguf.cpp writes it).
 * Tensor offsets are assigned in declaration order, each a multiple of the alignment.
 *
 *   const w = new GGUFWriter();
 *   w.set('general.architecture', str('llama'));
 *   w.addTensor('tok_embd.weight', [64, 100], GGMLType.F16);
 *   await w.writeHeader(sink);
 *   await w.writeTensorData(sink, chunk1); await w.writeTensorData(sink, chunk2);  // any chunking
 *   await w.finish(sink);
 *
 * Browser-safe.
 */
import { GGUFError } from './errors.ts';
import { quantTypeInfo } from './quant-types.ts';
import type { GGMLType } from './quant-types.ts';
import {
  GGML_MAX_DIMS,
  GGML_MAX_NAME,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_KEY_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_MAX_ALIGNMENT,
  GGUF_VERSION,
  GGUFValueType,
  checkScalar,
  describeValueType,
  minEncodedSize,
  typedArrayClassOf,
  u32,
  valueTypeName,
} from './types.ts';
import type { GGUFArray, GGUFScalarType, GGUFTensorInfo, GGUFValue } from './types.ts';

/** Where the writer puts bytes. write() may keep a reference to `chunk` only until its promise settles. */
export interface ByteSink {
  write(chunk: Uint8Array): Promise<void>;
  close?(): Promise<void>;
}

/** A sink that collects everything in memory (chunks are copied). */
export function memorySink(): ByteSink & { bytes(): Uint8Array; readonly length: number; readonly closed: boolean } {
  const chunks: Uint8Array[] = [];
  let length = 0;
  let closed = false;
  return {
    async write(chunk: Uint8Array) {
      if (closed) throw new GGUFError('GGUF_WRITER', 'memorySink: write after close');
      chunks.push(new Uint8Array(chunk)); // a copy (Buffer#slice would be a view)
      length += chunk.length;
    },
    async close() {
      closed = true;
    },
    bytes() {
      const out = new Uint8Array(length);
      let o = 0;
      for (const c of chunks) {
        out.set(c, o);
        o += c.length;
      }
      return out;
    },
    get length() {
      return length;
    },
    get closed() {
      return closed;
    },
  };
}

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const utf8 = new TextEncoder();
const TWO32 = 2 ** 32;

function alignUp(n: number, a: number): number {
  const r = n % a;
  return r === 0 ? n : n + (a - r);
}

/** A growable little-endian byte buffer. */
class ByteBuilder {
  buf = new Uint8Array(4096);
  dv = new DataView(this.buf.buffer);
  len = 0;

  ensure(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.len + n) cap *= 2;
    const next = new Uint8Array(cap);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
    this.dv = new DataView(next.buffer);
  }
  u8(v: number): void {
    this.ensure(1);
    this.dv.setUint8(this.len, v);
    this.len += 1;
  }
  u32(v: number): void {
    this.ensure(4);
    this.dv.setUint32(this.len, v, true);
    this.len += 4;
  }
  i32(v: number): void {
    this.ensure(4);
    this.dv.setInt32(this.len, v, true);
    this.len += 4;
  }
  /** A non-negative safe integer as u64 (also used for i64 fields that hold sizes). */
  u64(v: number): void {
    this.ensure(8);
    this.dv.setUint32(this.len, v % TWO32, true);
    this.dv.setUint32(this.len + 4, Math.floor(v / TWO32), true);
    this.len += 8;
  }
  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.len);
    this.len += b.length;
  }
  str(s: string): void {
    this.ensure(8 + s.length * 3);
    const { written } = utf8.encodeInto(s, this.buf.subarray(this.len + 8));
    this.u64(written);
    this.len += written;
  }
  scalar(t: GGUFScalarType, v: number | bigint | boolean | string): void {
    switch (t) {
      case GGUFValueType.STRING:
        this.str(v as string);
        return;
      case GGUFValueType.BOOL:
        this.u8(v ? 1 : 0);
        return;
    }
    const n = minEncodedSize(t);
    this.ensure(n);
    const dv = this.dv;
    const o = this.len;
    switch (t) {
      case GGUFValueType.UINT8:
        dv.setUint8(o, v as number);
        break;
      case GGUFValueType.INT8:
        dv.setInt8(o, v as number);
        break;
      case GGUFValueType.UINT16:
        dv.setUint16(o, v as number, true);
        break;
      case GGUFValueType.INT16:
        dv.setInt16(o, v as number, true);
        break;
      case GGUFValueType.UINT32:
        dv.setUint32(o, v as number, true);
        break;
      case GGUFValueType.INT32:
        dv.setInt32(o, v as number, true);
        break;
      case GGUFValueType.FLOAT32:
        dv.setFloat32(o, v as number, true);
        break;
      case GGUFValueType.FLOAT64:
        dv.setFloat64(o, v as number, true);
        break;
      case GGUFValueType.UINT64:
        dv.setBigUint64(o, v as bigint, true);
        break;
      case GGUFValueType.INT64:
        dv.setBigInt64(o, v as bigint, true);
        break;
    }
    this.len += n;
  }
  /** Array body: item type, count, items (no ARRAY tag). */
  array(a: GGUFArray): void {
    this.u32(a.itemType);
    this.u64(a.value.length);
    switch (a.itemType) {
      case GGUFValueType.STRING:
        for (const s of a.value) this.str(s);
        return;
      case GGUFValueType.BOOL:
        this.ensure(a.value.length);
        for (const b of a.value) this.buf[this.len++] = b ? 1 : 0;
        return;
      case GGUFValueType.ARRAY:
        for (const sub of a.value) this.array(sub);
        return;
      default: {
        const ta = a.value;
        if (LITTLE_ENDIAN_HOST) {
          this.bytes(new Uint8Array(ta.buffer, ta.byteOffset, ta.byteLength));
        } else {
          for (let i = 0; i < ta.length; i++) this.scalar(a.itemType, ta[i] as number | bigint);
        }
      }
    }
  }
}

function isWellFormed(s: string): boolean {
  const f = (s as unknown as { isWellFormed?: () => boolean }).isWellFormed;
  return f ? f.call(s) : !/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(s);
}

function checkString(s: unknown, what: string): void {
  if (typeof s !== 'string') throw new GGUFError('GGUF_BAD_VALUE', `${what}: expected a string, got ${typeof s}`);
  if (!isWellFormed(s)) throw new GGUFError('GGUF_BAD_VALUE', `${what}: string has a lone surrogate (not encodable as UTF-8)`);
}

/** Validates a value deeply; returns it with 64-bit scalars normalised to bigint. */
function normaliseValue(v: GGUFValue, what: string, depth = 0): GGUFValue {
  if (typeof v !== 'object' || v === null) throw new GGUFError('GGUF_BAD_VALUE', `${what}: not a GGUF value object`);
  const t = (v as { type: unknown }).type;
  if (typeof t !== 'number' || !(t >= 0 && t <= GGUFValueType.FLOAT64 && Number.isInteger(t))) {
    throw new GGUFError('GGUF_BAD_VALUE', `${what}: unknown value type ${String(t)}`);
  }
  if (v.type !== GGUFValueType.ARRAY) {
    if (v.type === GGUFValueType.STRING) {
      checkString(v.value, what);
      return v;
    }
    const value = checkScalar(v.type, v.value, what);
    return value === v.value ? v : ({ type: v.type, value } as GGUFValue);
  }
  if (depth > 64) throw new GGUFError('GGUF_BAD_VALUE', `${what}: arrays nested too deeply`);
  const it = v.itemType as number;
  if (typeof it !== 'number' || !(it >= 0 && it <= GGUFValueType.FLOAT64 && Number.isInteger(it))) {
    throw new GGUFError('GGUF_BAD_VALUE', `${what}: unknown array item type ${String(it)}`);
  }
  const ctor = typedArrayClassOf(v.itemType);
  if (ctor) {
    if (!(v.value instanceof (ctor as unknown as abstract new (...a: never[]) => unknown))) {
      const cls = (ctor as unknown as { name: string }).name;
      throw new GGUFError('GGUF_BAD_VALUE', `${what}: arr[${valueTypeName(it)}] must hold a ${cls} (use arr())`);
    }
    return v;
  }
  if (!Array.isArray(v.value)) throw new GGUFError('GGUF_BAD_VALUE', `${what}: arr[${valueTypeName(it)}] must hold a JS array`);
  const items: unknown[] = v.value;
  if (v.itemType === GGUFValueType.STRING) {
    for (let i = 0; i < items.length; i++) {
      const s = items[i];
      if (typeof s !== 'string' || !isWellFormed(s)) checkString(s, `${what} item ${i}`);
    }
  } else if (v.itemType === GGUFValueType.BOOL) {
    for (let i = 0; i < items.length; i++) {
      if (typeof items[i] !== 'boolean') throw new GGUFError('GGUF_BAD_VALUE', `${what} item ${i}: expected a boolean`);
    }
  } else {
    for (let i = 0; i < items.length; i++) {
      const sub = items[i] as GGUFValue;
      if (typeof sub !== 'object' || sub === null || sub.type !== GGUFValueType.ARRAY) {
        throw new GGUFError('GGUF_BAD_VALUE', `${what} item ${i}: items of a nested array must be array values`);
      }
      normaliseValue(sub, `${what} item ${i}`, depth + 1);
    }
  }
  return v;
}

export interface GGUFWriterOptions {
  /** Data alignment; when not 32 it is stored as "general.alignment" (u32). Default 32. */
  alignment?: number;
  /** Version written in the header: 3 (default) or 2 (same layout). */
  version?: 2 | 3;
}

interface PendingTensor {
  name: string;
  dims: number[];
  type: GGMLType;
  byteLength: number;
}

interface Layout {
  header: Uint8Array;
  alignment: number;
  offsets: number[];
  dataOffset: number;
  fileSize: number;
}

type State = 'building' | 'data' | 'finished' | 'failed';

export class GGUFWriter {
  readonly version: number;
  private readonly meta = new Map<string, GGUFValue>();
  private readonly pending: PendingTensor[] = [];
  private readonly names = new Set<string>();
  private layoutCache: Layout | undefined;
  private state: State = 'building';
  private busy = false;
  private cur = 0;
  private curWritten = 0;
  private written = 0;
  private zeros = new Uint8Array(0);

  constructor(opts: GGUFWriterOptions = {}) {
    const version = opts.version ?? GGUF_VERSION;
    if (version !== 2 && version !== 3) throw new GGUFError('GGUF_WRITER', `version must be 2 or 3, got ${String(version)}`);
    this.version = version;
    if (opts.alignment !== undefined && opts.alignment !== GGUF_DEFAULT_ALIGNMENT) this.set(GGUF_KEY_ALIGNMENT, u32(opts.alignment));
  }

  /** Metadata in insertion order. */
  get metadata(): ReadonlyMap<string, GGUFValue> {
    return this.meta;
  }

  get alignment(): number {
    const v = this.meta.get(GGUF_KEY_ALIGNMENT);
    return v ? (v.value as number) : GGUF_DEFAULT_ALIGNMENT;
  }

  /** Adds or replaces a metadata value (a replaced key keeps its position). Validates the value deeply. */
  set(key: string, value: GGUFValue): this {
    this.assertBuilding('set()');
    if (typeof key !== 'string' || key.length === 0) throw new GGUFError('GGUF_BAD_VALUE', 'metadata key must be a non-empty string');
    checkString(key, `metadata key "${key}"`);
    const v = normaliseValue(value, `metadata "${key}"`);
    if (key === GGUF_KEY_ALIGNMENT) {
      if (v.type !== GGUFValueType.UINT32) {
        throw new GGUFError('GGUF_BAD_VALUE', `"${GGUF_KEY_ALIGNMENT}" must be u32, got ${describeValueType(v)}`);
      }
      const a = v.value;
      if (a === 0 || (a & (a - 1)) !== 0 || a > GGUF_MAX_ALIGNMENT) {
        throw new GGUFError(
          'GGUF_BAD_VALUE',
          `"${GGUF_KEY_ALIGNMENT}" is ${a}, expected a power of two between 1 and ${GGUF_MAX_ALIGNMENT}`,
        );
      }
    }
    this.meta.set(key, v);
    this.layoutCache = undefined;
    return this;
  }

  delete(key: string): boolean {
    this.assertBuilding('delete()');
    this.layoutCache = undefined;
    return this.meta.delete(key);
  }

  /** Declares a tensor; data must later be written in declaration order. `dims` in ggml order (ne0 first). */
  addTensor(name: string, dims: readonly number[], type: GGMLType): this {
    this.assertBuilding('addTensor()');
    checkString(name, 'tensor name');
    const nameBytes = utf8.encode(name).length;
    if (nameBytes >= GGML_MAX_NAME) {
      throw new GGUFError('GGUF_BAD_TENSOR', `tensor "${name}": name is ${nameBytes} bytes, must be fewer than ${GGML_MAX_NAME}`);
    }
    if (this.names.has(name)) throw new GGUFError('GGUF_BAD_TENSOR', `duplicate tensor name "${name}"`);
    if (!Array.isArray(dims) || dims.length < 1 || dims.length > GGML_MAX_DIMS) {
      throw new GGUFError('GGUF_BAD_TENSOR', `tensor "${name}": expected 1 to ${GGML_MAX_DIMS} dimensions, got ${String(dims?.length)}`);
    }
    let elements = 1;
    for (const d of dims) {
      if (!Number.isSafeInteger(d) || d < 1) {
        throw new GGUFError('GGUF_BAD_TENSOR', `tensor "${name}": dimension ${String(d)} is not a positive integer`);
      }
      elements *= d;
    }
    const info = quantTypeInfo(type);
    if (!info) throw new GGUFError('GGUF_BAD_TENSOR', `tensor "${name}": unknown ggml type id ${String(type)}`);
    const ne0 = dims[0] as number;
    if (ne0 % info.blockSize !== 0) {
      throw new GGUFError(
        'GGUF_BAD_TENSOR',
        `tensor "${name}": ${info.name} rows must be a multiple of ${info.blockSize} elements, ne0 is ${ne0}`,
      );
    }
    const byteLength = (elements / info.blockSize) * info.bytesPerBlock;
    if (!Number.isSafeInteger(byteLength)) throw new GGUFError('GGUF_BAD_TENSOR', `tensor "${name}": too large`);
    this.pending.push({ name, dims: [...dims], type, byteLength });
    this.names.add(name);
    this.layoutCache = undefined;
    return this;
  }

  /** Tensor infos with the offsets they will get (relative to the data section). */
  get tensors(): GGUFTensorInfo[] {
    const { offsets } = this.layout();
    return this.pending.map((t, i) => ({
      name: t.name,
      dims: [...t.dims],
      type: t.type,
      offset: offsets[i] as number,
      byteLength: t.byteLength,
    }));
  }

  /** Absolute offset of the data section (= header bytes including padding). */
  get dataOffset(): number {
    return this.layout().dataOffset;
  }

  /** Total size of the finished file. */
  get fileSize(): number {
    return this.layout().fileSize;
  }

  /** Bytes handed to the sink so far. */
  get bytesWritten(): number {
    return this.written;
  }

  /** Name of the tensor whose data is expected next, or undefined when none is. */
  get currentTensor(): string | undefined {
    return this.state === 'data' ? this.pending[this.cur]?.name : undefined;
  }

  /** The header: magic … tensor infos, zero-padded to the data offset. */
  encodeHeader(): Uint8Array {
    return this.layout().header;
  }

  private layout(): Layout {
    if (this.layoutCache) return this.layoutCache;
    const alignment = this.alignment;
    const offsets: number[] = [];
    let dataSize = 0;
    for (const t of this.pending) {
      offsets.push(dataSize);
      dataSize += alignUp(t.byteLength, alignment);
    }
    const b = new ByteBuilder();
    b.u32(GGUF_MAGIC);
    b.u32(this.version);
    b.u64(this.pending.length);
    b.u64(this.meta.size);
    for (const [key, v] of this.meta) {
      b.str(key);
      b.u32(v.type);
      if (v.type === GGUFValueType.ARRAY) b.array(v);
      else b.scalar(v.type, v.value);
    }
    this.pending.forEach((t, i) => {
      b.str(t.name);
      b.u32(t.dims.length);
      for (const d of t.dims) b.u64(d);
      b.i32(t.type);
      b.u64(offsets[i] as number);
    });
    const dataOffset = alignUp(b.len, alignment);
    b.ensure(dataOffset - b.len);
    b.buf.fill(0, b.len, dataOffset);
    b.len = dataOffset;
    const header = b.buf.slice(0, dataOffset);
    this.layoutCache = { header, alignment, offsets, dataOffset, fileSize: dataOffset + dataSize };
    return this.layoutCache;
  }

  private assertBuilding(what: string): void {
    if (this.state !== 'building') {
      throw new GGUFError('GGUF_WRITER', `${what} after writeHeader(): metadata and tensors are fixed once the header is written`);
    }
  }

  private assertNotBusy(what: string): void {
    if (this.busy) throw new GGUFError('GGUF_WRITER', `${what} while a previous write is still pending (await each call)`);
    if (this.state === 'failed') throw new GGUFError('GGUF_WRITER', `${what} after a failed write`);
    if (this.state === 'finished') throw new GGUFError('GGUF_WRITER', `${what} after finish()`);
  }

  private async emit(sink: ByteSink, chunk: Uint8Array): Promise<void> {
    if (chunk.length === 0) return;
    try {
      await sink.write(chunk);
    } catch (e) {
      this.state = 'failed';
      throw e;
    }
    this.written += chunk.length;
  }

  /** Writes header, metadata, tensor infos and the padding before the data section. */
  async writeHeader(sink: ByteSink): Promise<void> {
    this.assertNotBusy('writeHeader()');
    if (this.state !== 'building') throw new GGUFError('GGUF_WRITER', 'writeHeader() called twice');
    const { header, alignment } = this.layout();
    this.zeros = new Uint8Array(alignment);
    this.state = 'data';
    this.busy = true;
    try {
      await this.emit(sink, header);
    } finally {
      this.busy = false;
    }
  }

  /**
   * Streams (part of) the current tensor's data. Chunks may be any size but must not run past the current tensor;
   * when a tensor is complete the padding is written and the next tensor becomes current. With `name`, checks that
   * the chunk belongs to that tensor (catches out-of-order writes and short tensors).
   */
  async writeTensorData(sink: ByteSink, bytes: Uint8Array, name?: string): Promise<void> {
    this.assertNotBusy('writeTensorData()');
    if (this.state === 'building') throw new GGUFError('GGUF_WRITER', 'writeTensorData() before writeHeader()');
    if (!(bytes instanceof Uint8Array)) throw new GGUFError('GGUF_WRITER', 'writeTensorData() needs a Uint8Array');
    const t = this.pending[this.cur];
    if (!t) {
      const forName = name !== undefined ? ` for "${name}"` : '';
      throw new GGUFError(
        'GGUF_WRITER',
        `all ${this.pending.length} tensors are complete, but ${bytes.length} more bytes were written${forName}`,
      );
    }
    if (name !== undefined && name !== t.name) {
      if (this.curWritten > 0) {
        throw new GGUFError(
          'GGUF_WRITER',
          `tensor "${t.name}" got only ${this.curWritten} of ${t.byteLength} bytes before data for "${name}"`,
        );
      }
      const j = this.pending.findIndex((p) => p.name === name);
      if (j < 0) throw new GGUFError('GGUF_WRITER', `no tensor named "${name}" was declared`);
      throw new GGUFError(
        'GGUF_WRITER',
        `tensor data out of order: expected "${t.name}" (tensor ${this.cur}), got "${name}" (tensor ${j}${j < this.cur ? ', already written' : ''})`,
      );
    }
    if (this.curWritten + bytes.length > t.byteLength) {
      throw new GGUFError(
        'GGUF_WRITER',
        `too many bytes for tensor "${t.name}": ${this.curWritten} written + ${bytes.length} > ${t.byteLength}`,
      );
    }
    this.busy = true;
    try {
      await this.emit(sink, bytes);
      this.curWritten += bytes.length;
      if (this.curWritten === t.byteLength) {
        const pad = alignUp(t.byteLength, this.zeros.length) - t.byteLength;
        if (pad > 0) await this.emit(sink, this.zeros.subarray(0, pad));
        this.cur++;
        this.curWritten = 0;
      }
    } finally {
      this.busy = false;
    }
  }

  /** Writes one whole tensor's data, which must be the current tensor and exactly its size. */
  async writeTensor(sink: ByteSink, name: string, bytes: Uint8Array): Promise<void> {
    const t = this.pending[this.cur];
    if (t && t.name === name && this.curWritten === 0 && bytes.length !== t.byteLength) {
      throw new GGUFError('GGUF_WRITER', `tensor "${name}" is ${t.byteLength} bytes, got ${bytes.length}`);
    }
    await this.writeTensorData(sink, bytes, name);
  }

  /** Checks every tensor is complete, then closes the sink (if it has close()). */
  async finish(sink: ByteSink): Promise<void> {
    this.assertNotBusy('finish()');
    if (this.state === 'building') throw new GGUFError('GGUF_WRITER', 'finish() before writeHeader()');
    if (this.cur < this.pending.length) {
      const t = this.pending[this.cur] as PendingTensor;
      throw new GGUFError(
        'GGUF_WRITER',
        `finish() with tensor data missing: tensor "${t.name}" (${this.cur + 1} of ${this.pending.length}) ` +
          `got ${this.curWritten} of ${t.byteLength} bytes`,
      );
    }
    this.busy = true;
    try {
      await sink.close?.();
      this.state = 'finished';
    } catch (e) {
      this.state = 'failed';
      throw e;
    } finally {
      this.busy = false;
    }
  }
}

export interface GGUFSpec {
  version?: 2 | 3;
  alignment?: number;
  metadata?: Iterable<readonly [string, GGUFValue]> | Record<string, GGUFValue>;
  tensors?: ReadonlyArray<{ name: string; dims: readonly number[]; type: GGMLType; data: Uint8Array }>;
}

function metadataEntries(m: GGUFSpec['metadata']): Iterable<readonly [string, GGUFValue]> {
  if (!m) return [];
  if (Symbol.iterator in m) return m as Iterable<readonly [string, GGUFValue]>;
  return Object.entries(m as Record<string, GGUFValue>);
}

function writerFromSpec(spec: GGUFSpec): GGUFWriter {
  const opts: GGUFWriterOptions = {};
  if (spec.alignment !== undefined) opts.alignment = spec.alignment;
  if (spec.version !== undefined) opts.version = spec.version;
  const w = new GGUFWriter(opts);
  for (const [k, v] of metadataEntries(spec.metadata)) w.set(k, v);
  return w;
}

/** Builds a whole GGUF file in memory (for small files and tests). Each tensor's data must be exactly its size. */
export function encodeGGUF(spec: GGUFSpec): Uint8Array {
  const w = writerFromSpec(spec);
  const tensors = spec.tensors ?? [];
  for (const t of tensors) w.addTensor(t.name, t.dims, t.type);
  const header = w.encodeHeader();
  const out = new Uint8Array(w.fileSize);
  out.set(header);
  const infos = w.tensors;
  tensors.forEach((t, i) => {
    const info = infos[i] as GGUFTensorInfo;
    if (!(t.data instanceof Uint8Array) || t.data.length !== info.byteLength) {
      throw new GGUFError('GGUF_WRITER', `tensor "${t.name}" is ${info.byteLength} bytes, got ${String(t.data?.length)}`);
    }
    out.set(t.data, w.dataOffset + info.offset);
  });
  return out;
}

/** Async twin of encodeGGUF that goes through the streaming path (writeHeader / writeTensorData / finish). */
export async function writeGGUFToBuffer(spec: GGUFSpec): Promise<Uint8Array> {
  const w = writerFromSpec(spec);
  for (const t of spec.tensors ?? []) w.addTensor(t.name, t.dims, t.type);
  const sink = memorySink();
  await w.writeHeader(sink);
  for (const t of spec.tensors ?? []) await w.writeTensor(sink, t.name, t.data);
  await w.finish(sink);
  return sink.bytes();
}
