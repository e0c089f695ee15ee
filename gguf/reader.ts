/**
 * GGUF reader (versions 2 and 3; both have the same layout — v3 only added big-endian files, which we reject).
 *
 * Reads the header, metadata and tensor infos through a buffered cursor over a ByteSource; never reads tensor data.
 * Every count and length in the header is checked against the bytes left in the file and against caps before
 * anything is allocated for it, so a corrupted or hostile file fails fast with a GGUFError.
 * Browser-safe.
 */
import { GGUFError } from './errors.ts';
import { quantTypeInfo } from './quant-types.ts';
import {
  GGML_MAX_DIMS,
  GGML_MAX_NAME,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_KEY_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_MAX_ALIGNMENT,
  GGUF_VERSION,
  GGUFValueType,
  describeValueType,
  minEncodedSize,
  valueTypeName,
} from './types.ts';
import type { GGUFArray, GGUFFile, GGUFTensorInfo, GGUFValue } from './types.ts';

/** Random-access bytes: a whole file in memory, a file handle, an HTTP range reader… */
export interface ByteSource {
  readonly size: number;
  /** Exactly `length` bytes at `offset` (the reader never asks beyond `size`). May return a view; it is not kept. */
  read(offset: number, length: number): Promise<Uint8Array>;
}

/** A ByteSource over bytes in memory (no copy). */
export function bytesSource(buf: Uint8Array | ArrayBuffer): ByteSource {
  // A plain Uint8Array view (a Node Buffer's slice() would not copy).
  const bytes = buf instanceof Uint8Array ? new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength) : new Uint8Array(buf);
  return {
    size: bytes.length,
    read(offset: number, length: number): Promise<Uint8Array> {
      if (!(offset >= 0 && length >= 0 && offset + length <= bytes.length)) {
        return Promise.reject(new GGUFError('GGUF_IO', `read of ${length} bytes at ${offset} is outside the ${bytes.length}-byte buffer`));
      }
      return Promise.resolve(bytes.subarray(offset, offset + length));
    },
  };
}

export interface ReadGGUFOptions {
  /** Longest string (key, value, array item, tensor name), in bytes. Default 64 MiB. */
  maxStringBytes?: number;
  /** Most items in one metadata array (each nesting level counted on its own). Default 16 Mi (16,777,216). */
  maxArrayItems?: number;
  /** Most tensor infos. Default 262,144. */
  maxTensors?: number;
  /** Most metadata key/value pairs. Default 65,536. */
  maxMetadataEntries?: number;
  /** Deepest array nesting (1 = arrays of scalars only). Default 16. */
  maxArrayDepth?: number;
}

export const DEFAULT_READ_LIMITS: Readonly<Required<ReadGGUFOptions>> = Object.freeze({
  maxStringBytes: 64 * 1024 * 1024,
  maxArrayItems: 16 * 1024 * 1024,
  maxTensors: 262_144,
  maxMetadataEntries: 65_536,
  maxArrayDepth: 16,
});

/** Smallest possible encoded tensor info: name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8). */
const MIN_TENSOR_INFO_BYTES = 32;
/** Smallest possible encoded key/value: key length (8) + type (4) + a 1-byte value. */
const MIN_KV_BYTES = 13;

const INITIAL_CHUNK = 64 * 1024;
const MAX_CHUNK = 1024 * 1024;
const TWO32 = 2 ** 32;

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * A forward cursor over a ByteSource with a read-ahead buffer. `has(n)` is the synchronous fast path; `fill(n)`
 * fetches when the buffer does not hold the next n bytes, and throws GGUF_TRUNCATED when the file does not.
 */
class Cursor {
  private buf: Uint8Array = new Uint8Array(0);
  private dv: DataView = new DataView(this.buf.buffer);
  private bufStart = 0;
  private chunk = INITIAL_CHUNK;
  /** Absolute position of the next byte to read. */
  pos = 0;

  constructor(private readonly src: ByteSource) {}

  get size(): number {
    return this.src.size;
  }
  get remaining(): number {
    return this.src.size - this.pos;
  }

  has(n: number): boolean {
    return this.pos + n <= this.bufStart + this.buf.length;
  }

  /** Makes the next `n` bytes available in the buffer; `what` names them for the error message. */
  async fill(n: number, what: string): Promise<void> {
    if (this.has(n)) return;
    const size = this.src.size;
    if (this.pos + n > size) {
      throw new GGUFError(
        'GGUF_TRUNCATED',
        `expected ${n} bytes for ${what}, but only ${Math.max(0, size - this.pos)} remain in the ${size}-byte file`,
        this.pos,
      );
    }
    const want = Math.min(Math.max(n, this.chunk), size - this.pos);
    this.chunk = Math.min(this.chunk * 2, MAX_CHUNK);
    let bytes: Uint8Array;
    try {
      bytes = await this.src.read(this.pos, want);
    } catch (e) {
      if (e instanceof GGUFError) throw e;
      throw new GGUFError('GGUF_IO', `reading ${want} bytes failed: ${e instanceof Error ? e.message : String(e)}`, this.pos, { cause: e });
    }
    if (!(bytes instanceof Uint8Array) || bytes.length !== want) {
      throw new GGUFError('GGUF_IO', `byte source returned ${bytes?.length} bytes, ${want} were asked for`, this.pos);
    }
    this.buf = bytes;
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.bufStart = this.pos;
  }

  /** Index in `buf` of the current position; advances by n. Call only after has(n)/fill(n). */
  private take(n: number): number {
    const i = this.pos - this.bufStart;
    this.pos += n;
    return i;
  }

  u8(): number {
    return this.dv.getUint8(this.take(1));
  }
  i8(): number {
    return this.dv.getInt8(this.take(1));
  }
  u16(): number {
    return this.dv.getUint16(this.take(2), true);
  }
  i16(): number {
    return this.dv.getInt16(this.take(2), true);
  }
  u32(): number {
    return this.dv.getUint32(this.take(4), true);
  }
  i32(): number {
    return this.dv.getInt32(this.take(4), true);
  }
  f32(): number {
    return this.dv.getFloat32(this.take(4), true);
  }
  f64(): number {
    return this.dv.getFloat64(this.take(8), true);
  }
  bu64(): bigint {
    return this.dv.getBigUint64(this.take(8), true);
  }
  bi64(): bigint {
    return this.dv.getBigInt64(this.take(8), true);
  }
  /** A u64 as a number; values ≥ 2^53 come back inexact but still ≥ 2^53, so range checks against sizes hold. */
  u64n(): number {
    const i = this.take(8);
    return this.dv.getUint32(i + 4, true) * TWO32 + this.dv.getUint32(i, true);
  }
  /** The last 8 bytes read, as an exact decimal (for error messages). */
  lastU64Text(): string {
    return this.dv.getBigUint64(this.pos - 8 - this.bufStart, true).toString();
  }
  /** A copy of the next n bytes in a fresh ArrayBuffer (not Buffer#slice, which would be a view). */
  copy(n: number): Uint8Array {
    const i = this.take(n);
    const out = new Uint8Array(n);
    out.set(this.buf.subarray(i, i + n));
    return out;
  }
  /** A view of the next n bytes (valid until the next fill). */
  view(n: number): Uint8Array {
    const i = this.take(n);
    return this.buf.subarray(i, i + n);
  }
}

/** Reads a length-prefixed UTF-8 string (length already checked to be buffered). */
function decodeString(c: Cursor, len: number, what: string, item = -1): string {
  const start = c.pos;
  const bytes = c.view(len);
  if (len <= 32) {
    // Short ASCII strings (most vocabulary tokens) skip the decoder.
    let ascii = true;
    for (let i = 0; i < len; i++) {
      if ((bytes[i] as number) >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) return String.fromCharCode.apply(null, bytes as unknown as number[]);
  }
  try {
    return utf8.decode(bytes);
  } catch {
    throw new GGUFError('GGUF_BAD_VALUE', `${what}${item >= 0 ? ` item ${item}` : ''} (${len} bytes) is not valid UTF-8`, start);
  }
}

interface Limits {
  maxStringBytes: number;
  maxArrayItems: number;
  maxTensors: number;
  maxMetadataEntries: number;
  maxArrayDepth: number;
}

async function readString(c: Cursor, lim: Limits, what: string): Promise<string> {
  if (!c.has(8)) await c.fill(8, `the length of ${what}`);
  const len = c.u64n();
  checkStringLength(c, len, lim, what);
  if (!c.has(len)) await c.fill(len, what);
  return decodeString(c, len, what);
}

function checkStringLength(c: Cursor, len: number, lim: Limits, what: string): void {
  if (len > c.remaining) {
    throw new GGUFError(
      'GGUF_TRUNCATED',
      `${what} has length ${c.lastU64Text()}, but only ${c.remaining} bytes remain in the ${c.size}-byte file`,
      c.pos - 8,
    );
  }
  if (len > lim.maxStringBytes) {
    throw new GGUFError('GGUF_LIMIT', `${what} has length ${len}, more than maxStringBytes (${lim.maxStringBytes})`, c.pos - 8);
  }
}

function checkValueType(c: Cursor, t: number, what: string): GGUFValueType {
  if (!(Number.isInteger(t) && t >= 0 && t <= GGUFValueType.FLOAT64)) {
    throw new GGUFError('GGUF_BAD_VALUE', `${what} has unknown value type id ${t} (expected 0..12)`, c.pos - 4);
  }
  return t as GGUFValueType;
}

async function readScalar(c: Cursor, t: GGUFValueType, lim: Limits, what: string): Promise<GGUFValue> {
  if (t === GGUFValueType.STRING) return { type: t, value: await readString(c, lim, what) };
  const n = minEncodedSize(t);
  if (!c.has(n)) await c.fill(n, `${what} (${valueTypeName(t)})`);
  switch (t) {
    case GGUFValueType.UINT8:
      return { type: t, value: c.u8() };
    case GGUFValueType.INT8:
      return { type: t, value: c.i8() };
    case GGUFValueType.UINT16:
      return { type: t, value: c.u16() };
    case GGUFValueType.INT16:
      return { type: t, value: c.i16() };
    case GGUFValueType.UINT32:
      return { type: t, value: c.u32() };
    case GGUFValueType.INT32:
      return { type: t, value: c.i32() };
    case GGUFValueType.FLOAT32:
      return { type: t, value: c.f32() };
    case GGUFValueType.FLOAT64:
      return { type: t, value: c.f64() };
    case GGUFValueType.UINT64:
      return { type: t, value: c.bu64() };
    case GGUFValueType.INT64:
      return { type: t, value: c.bi64() };
    case GGUFValueType.BOOL:
      // llama.cpp reads an int8 and treats any non-zero as true.
      return { type: t, value: c.i8() !== 0 };
    default:
      throw new GGUFError('GGUF_BAD_VALUE', `${what}: ${valueTypeName(t)} is not a scalar type`, c.pos);
  }
}

type AnyTypedCtor = new (buffer: ArrayBuffer) => ArrayLike<number | bigint>;
const TYPED: Partial<Record<GGUFValueType, AnyTypedCtor>> = {
  [GGUFValueType.UINT8]: Uint8Array,
  [GGUFValueType.INT8]: Int8Array,
  [GGUFValueType.UINT16]: Uint16Array,
  [GGUFValueType.INT16]: Int16Array,
  [GGUFValueType.UINT32]: Uint32Array,
  [GGUFValueType.INT32]: Int32Array,
  [GGUFValueType.FLOAT32]: Float32Array,
  [GGUFValueType.FLOAT64]: Float64Array,
  [GGUFValueType.UINT64]: BigUint64Array,
  [GGUFValueType.INT64]: BigInt64Array,
};

/** Reads an array body (item type, count, items) — the part after the ARRAY type tag. */
async function readArray(c: Cursor, lim: Limits, depth: number, what: string): Promise<GGUFArray> {
  if (depth > lim.maxArrayDepth) {
    throw new GGUFError('GGUF_LIMIT', `${what} nests arrays deeper than maxArrayDepth (${lim.maxArrayDepth})`, c.pos);
  }
  if (!c.has(12)) await c.fill(12, `the item type and count of ${what}`);
  const itemType = checkValueType(c, c.i32(), `${what} (array)`);
  const count = c.u64n();
  const itemBytes = minEncodedSize(itemType);
  if (count > Math.floor(c.remaining / itemBytes)) {
    throw new GGUFError(
      'GGUF_TRUNCATED',
      `${what} announces ${c.lastU64Text()} ${valueTypeName(itemType)} items (≥ ${itemBytes} bytes each), ` +
        `but only ${c.remaining} bytes remain in the ${c.size}-byte file`,
      c.pos - 8,
    );
  }
  if (count > lim.maxArrayItems) {
    throw new GGUFError('GGUF_LIMIT', `${what} has ${count} items, more than maxArrayItems (${lim.maxArrayItems})`, c.pos - 8);
  }

  const ctor = TYPED[itemType];
  if (ctor) {
    const bytes = count * itemBytes;
    if (!c.has(bytes)) await c.fill(bytes, `the ${count} items of ${what}`);
    let items: ArrayLike<number | bigint>;
    if (LITTLE_ENDIAN_HOST || itemBytes === 1) {
      items = new ctor(c.copy(bytes).buffer as ArrayBuffer);
    } else {
      items = readTypedSlow(c, itemType, count);
    }
    return { type: GGUFValueType.ARRAY, itemType, value: items } as GGUFArray;
  }
  switch (itemType) {
    case GGUFValueType.BOOL: {
      if (!c.has(count)) await c.fill(count, `the ${count} items of ${what}`);
      const raw = c.view(count);
      const out: boolean[] = new Array<boolean>(count);
      for (let i = 0; i < count; i++) out[i] = raw[i] !== 0;
      return { type: GGUFValueType.ARRAY, itemType, value: out };
    }
    case GGUFValueType.STRING: {
      const out: string[] = [];
      for (let i = 0; i < count; i++) {
        if (!c.has(8)) await c.fill(8, `the length of ${what} item ${i}`);
        const len = c.u64n();
        if (len > c.remaining || len > lim.maxStringBytes) checkStringLength(c, len, lim, `${what} item ${i}`);
        if (!c.has(len)) await c.fill(len, `${what} item ${i}`);
        out.push(decodeString(c, len, what, i));
      }
      return { type: GGUFValueType.ARRAY, itemType, value: out };
    }
    case GGUFValueType.ARRAY: {
      const out: GGUFArray[] = [];
      for (let i = 0; i < count; i++) out.push(await readArray(c, lim, depth + 1, `${what} item ${i}`));
      return { type: GGUFValueType.ARRAY, itemType, value: out };
    }
    default:
      throw new GGUFError('GGUF_BAD_VALUE', `${what}: unexpected item type ${itemType}`, c.pos);
  }
}

/** Big-endian hosts: decode little-endian items one by one. */
function readTypedSlow(c: Cursor, t: GGUFValueType, count: number): ArrayLike<number | bigint> {
  const raw = c.view(count * minEncodedSize(t));
  const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  const ctor = TYPED[t] as unknown as new (n: number) => { [i: number]: number | bigint; length: number };
  const out = new ctor(count);
  const sz = minEncodedSize(t);
  for (let i = 0; i < count; i++) {
    const o = i * sz;
    switch (t) {
      case GGUFValueType.UINT16:
        out[i] = dv.getUint16(o, true);
        break;
      case GGUFValueType.INT16:
        out[i] = dv.getInt16(o, true);
        break;
      case GGUFValueType.UINT32:
        out[i] = dv.getUint32(o, true);
        break;
      case GGUFValueType.INT32:
        out[i] = dv.getInt32(o, true);
        break;
      case GGUFValueType.FLOAT32:
        out[i] = dv.getFloat32(o, true);
        break;
      case GGUFValueType.FLOAT64:
        out[i] = dv.getFloat64(o, true);
        break;
      case GGUFValueType.UINT64:
        out[i] = dv.getBigUint64(o, true);
        break;
      case GGUFValueType.INT64:
        out[i] = dv.getBigInt64(o, true);
        break;
      default:
        out[i] = raw[o] as number;
    }
  }
  return out;
}

function withContext(e: unknown, prefix: string): unknown {
  return e instanceof GGUFError ? e.withContext(prefix) : e;
}

function alignUp(n: number, a: number): number {
  const r = n % a;
  return r === 0 ? n : n + (a - r);
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/**
 * Parses a GGUF file's header, metadata and tensor infos. Throws GGUFError (see its codes) for any invalid file;
 * errors thrown by the source's read() that are not GGUFErrors are wrapped as GGUF_IO.
 */
export async function readGGUF(src: ByteSource, opts: ReadGGUFOptions = {}): Promise<GGUFFile> {
  const lim: Limits = { ...DEFAULT_READ_LIMITS };
  for (const k of Object.keys(DEFAULT_READ_LIMITS) as (keyof Limits)[]) {
    const v = opts[k];
    if (v !== undefined) {
      if (!(typeof v === 'number' && v >= 0)) throw new RangeError(`readGGUF: option ${k} must be a non-negative number, got ${String(v)}`);
      lim[k] = v;
    }
  }
  const size = src.size;
  if (!(Number.isSafeInteger(size) && size >= 0)) {
    throw new GGUFError('GGUF_IO', `byte source has an invalid size ${String(size)}`);
  }
  const c = new Cursor(src);

  // --- header: magic, version, n_tensors, n_kv
  await c.fill(4, 'the magic "GGUF"');
  const magic = c.u32();
  if (magic !== GGUF_MAGIC) {
    const b = [magic & 0xff, (magic >>> 8) & 0xff, (magic >>> 16) & 0xff, magic >>> 24];
    const shown = b.map((x) => (x >= 0x20 && x < 0x7f ? String.fromCharCode(x) : '?')).join('');
    const hex = b.map((x) => x.toString(16).padStart(2, '0')).join(' ');
    throw new GGUFError('GGUF_BAD_MAGIC', `expected magic "GGUF" (47 47 55 46), found "${shown}" (${hex})`, 0);
  }
  await c.fill(4, 'the version (u32)');
  const version = c.u32();
  if (version === 0) {
    throw new GGUFError('GGUF_BAD_VERSION', 'version is 0, expected 2 or 3', 4);
  }
  if ((version & 0xffff) === 0) {
    throw new GGUFError(
      'GGUF_BAD_VERSION',
      `version reads as ${version} (0x${version.toString(16).padStart(8, '0')}); ` +
        'the file looks byte-swapped (big-endian), only little-endian files are supported',
      4,
    );
  }
  if (version === 1) {
    throw new GGUFError('GGUF_BAD_VERSION', 'GGUF version 1 is not supported (expected 2 or 3); re-convert the model', 4);
  }
  if (version > GGUF_VERSION) {
    throw new GGUFError('GGUF_BAD_VERSION', `GGUF version ${version} is newer than supported (expected 2 or 3)`, 4);
  }

  await c.fill(16, 'the tensor and metadata counts (2 × u64)');
  const nTensors = c.u64n();
  const nTensorsText = c.lastU64Text();
  const nKv = c.u64n();
  if (nKv > Math.floor(c.remaining / MIN_KV_BYTES)) {
    throw new GGUFError(
      'GGUF_TRUNCATED',
      `header announces ${c.lastU64Text()} metadata entries (≥ ${MIN_KV_BYTES} bytes each), ` +
        `but only ${c.remaining} bytes remain in the ${size}-byte file`,
      16,
    );
  }
  if (nTensors > Math.floor((c.remaining - nKv * MIN_KV_BYTES) / MIN_TENSOR_INFO_BYTES)) {
    throw new GGUFError(
      'GGUF_TRUNCATED',
      `header announces ${nTensorsText} tensors (≥ ${MIN_TENSOR_INFO_BYTES} bytes each) and ${nKv} metadata entries, ` +
        `but only ${c.remaining} bytes remain in the ${size}-byte file`,
      8,
    );
  }
  if (nKv > lim.maxMetadataEntries) {
    throw new GGUFError(
      'GGUF_LIMIT',
      `header announces ${nKv} metadata entries, more than maxMetadataEntries (${lim.maxMetadataEntries})`,
      16,
    );
  }
  if (nTensors > lim.maxTensors) {
    throw new GGUFError('GGUF_LIMIT', `header announces ${nTensors} tensors, more than maxTensors (${lim.maxTensors})`, 8);
  }

  // --- metadata
  const metadata = new Map<string, GGUFValue>();
  for (let i = 0; i < nKv; i++) {
    const kvStart = c.pos;
    let key = `#${i}`;
    try {
      key = await readString(c, lim, 'the key');
      if (key.length === 0) throw new GGUFError('GGUF_BAD_VALUE', 'the key is empty', kvStart);
      if (metadata.has(key)) throw new GGUFError('GGUF_BAD_VALUE', `duplicate key "${key}"`, kvStart);
      if (!c.has(4)) await c.fill(4, 'the value type (i32)');
      const t = checkValueType(c, c.i32(), 'the value');
      const value = t === GGUFValueType.ARRAY ? await readArray(c, lim, 1, 'the value') : await readScalar(c, t, lim, 'the value');
      metadata.set(key, value);
    } catch (e) {
      throw withContext(e, `metadata entry ${i} of ${nKv}${key.startsWith('#') ? '' : ` ("${key}")`}`);
    }
  }

  // --- alignment
  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const alignValue = metadata.get(GGUF_KEY_ALIGNMENT);
  if (alignValue !== undefined) {
    if (alignValue.type !== GGUFValueType.UINT32) {
      throw new GGUFError('GGUF_BAD_VALUE', `"${GGUF_KEY_ALIGNMENT}" must be u32, but is ${describeValueType(alignValue)}`);
    }
    alignment = alignValue.value;
    if (alignment === 0 || (alignment & (alignment - 1)) !== 0 || alignment > GGUF_MAX_ALIGNMENT) {
      throw new GGUFError(
        'GGUF_BAD_VALUE',
        `"${GGUF_KEY_ALIGNMENT}" is ${alignment}, expected a power of two between 1 and ${GGUF_MAX_ALIGNMENT}`,
      );
    }
  }

  // --- tensor infos
  if (nTensors > Math.floor(c.remaining / MIN_TENSOR_INFO_BYTES)) {
    throw new GGUFError(
      'GGUF_TRUNCATED',
      `header announces ${nTensors} tensors (≥ ${MIN_TENSOR_INFO_BYTES} bytes each), but only ${c.remaining} bytes remain after the metadata`,
      c.pos,
    );
  }
  const tensors: GGUFTensorInfo[] = [];
  const names = new Set<string>();
  for (let i = 0; i < nTensors; i++) {
    const infoStart = c.pos;
    let name: string | undefined;
    try {
      name = await readString(c, lim, 'the name');
      const nameBytes = c.pos - infoStart - 8;
      if (nameBytes >= GGML_MAX_NAME) {
        throw new GGUFError('GGUF_BAD_TENSOR', `the name is ${nameBytes} bytes, expected fewer than ${GGML_MAX_NAME}`, infoStart);
      }
      if (names.has(name)) throw new GGUFError('GGUF_BAD_TENSOR', `duplicate tensor name "${name}"`, infoStart);
      names.add(name);

      if (!c.has(4)) await c.fill(4, 'the number of dimensions (u32)');
      const nDims = c.u32();
      if (nDims < 1 || nDims > GGML_MAX_DIMS) {
        throw new GGUFError('GGUF_BAD_TENSOR', `has ${nDims} dimensions, expected 1 to ${GGML_MAX_DIMS}`, c.pos - 4);
      }
      if (!c.has(8 * nDims + 12)) await c.fill(8 * nDims + 12, `${nDims} dimensions (i64), the type (i32) and the offset (u64)`);
      const dims: number[] = [];
      let elements = 1;
      for (let d = 0; d < nDims; d++) {
        const ne = c.u64n();
        if (ne === 0 || ne > MAX_SAFE) {
          const exact = BigInt.asIntN(64, BigInt(c.lastU64Text()));
          throw new GGUFError('GGUF_BAD_TENSOR', `dimension ${d} is ${exact}, expected a positive size below 2^53`, c.pos - 8);
        }
        dims.push(ne);
        elements *= ne;
      }
      if (elements > MAX_SAFE) {
        throw new GGUFError('GGUF_BAD_TENSOR', `shape [${dims.join(', ')}] has more than 2^53 elements`, c.pos - 8 * nDims);
      }
      const typeId = c.i32();
      const info = quantTypeInfo(typeId);
      if (!info) throw new GGUFError('GGUF_BAD_TENSOR', `has unknown ggml type id ${typeId}`, c.pos - 4);
      const ne0 = dims[0] as number;
      if (ne0 % info.blockSize !== 0) {
        throw new GGUFError(
          'GGUF_BAD_TENSOR',
          `type ${info.name} needs rows that are a multiple of ${info.blockSize} elements, but ne0 is ${ne0}`,
          c.pos - 4,
        );
      }
      const byteLength = (elements / info.blockSize) * info.bytesPerBlock;
      if (byteLength > MAX_SAFE) {
        throw new GGUFError('GGUF_BAD_TENSOR', `size of ${byteLength} bytes is too large`, c.pos - 4);
      }
      const offset = c.u64n();
      if (offset % alignment !== 0) {
        throw new GGUFError('GGUF_BAD_TENSOR', `data offset ${c.lastU64Text()} is not a multiple of the alignment ${alignment}`, c.pos - 8);
      }
      // The data section starts at or after the current position; an early, cheap bound.
      if (offset + byteLength > c.remaining) {
        throw new GGUFError(
          'GGUF_TRUNCATED',
          `data [${c.lastU64Text()}, +${byteLength} bytes) relative to the data section lies beyond the end of the ${size}-byte file`,
          c.pos - 8,
        );
      }
      tensors.push({ name, dims, type: info.type, offset, byteLength });
    } catch (e) {
      throw withContext(e, `tensor ${i} of ${nTensors}${name === undefined ? '' : ` ("${name}")`}`);
    }
  }

  // --- data section
  const headerEnd = c.pos;
  let dataOffset = alignUp(headerEnd, alignment);
  if (dataOffset > size) {
    if (nTensors > 0) {
      throw new GGUFError(
        'GGUF_TRUNCATED',
        `the data section should start at ${dataOffset} (header end ${headerEnd} aligned to ${alignment}), but the file is ${size} bytes`,
        headerEnd,
      );
    }
    dataOffset = headerEnd;
  }
  const dataSize = size - dataOffset;
  for (const t of tensors) {
    if (t.offset + t.byteLength > dataSize) {
      throw new GGUFError(
        'GGUF_TRUNCATED',
        `tensor "${t.name}": data at ${dataOffset} + ${t.offset} (+${t.byteLength} bytes) ends beyond the end of the ${size}-byte file`,
        dataOffset + t.offset,
      );
    }
  }
  if (tensors.length > 1) {
    const sorted = [...tensors].sort((a, b) => a.offset - b.offset);
    for (let i = 1; i < sorted.length; i++) {
      const a = sorted[i - 1] as GGUFTensorInfo;
      const b = sorted[i] as GGUFTensorInfo;
      if (b.offset < a.offset + a.byteLength) {
        throw new GGUFError(
          'GGUF_BAD_TENSOR',
          `tensor "${b.name}" (data offset ${b.offset}) overlaps tensor "${a.name}" (data offset ${a.offset}, ${a.byteLength} bytes)`,
          dataOffset + b.offset,
        );
      }
    }
  }

  return { version, alignment, metadata, tensors, dataOffset, fileSize: size };
}

/** readGGUF plus how many bytes it fetched from the source (for checking that only the header region is read). */
export async function readGGUFWithStats(src: ByteSource, opts?: ReadGGUFOptions): Promise<{ file: GGUFFile; bytesFetched: number }> {
  let fetched = 0;
  const counting: ByteSource = {
    size: src.size,
    async read(offset, length) {
      fetched += length;
      return src.read(offset, length);
    },
  };
  const file = await readGGUF(counting, opts);
  return { file, bytesFetched: fetched };
}
