/**
 * GGUF data model: metadata value types, tensor infos, the parsed file, and typed metadata accessors.
 * Browser-safe (no Node imports).
 */
import type { GGMLType } from './quant-types.ts';
import { GGUFError } from './errors.ts';

/** Metadata value type ids as stored in the file (gguf.h `enum gguf_type`). */
export enum GGUFValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** Scalar types whose JS value is a number. */
export type GGUFNumberType =
  | GGUFValueType.UINT8
  | GGUFValueType.INT8
  | GGUFValueType.UINT16
  | GGUFValueType.INT16
  | GGUFValueType.UINT32
  | GGUFValueType.INT32
  | GGUFValueType.FLOAT32
  | GGUFValueType.FLOAT64;
/** Scalar types whose JS value is a bigint. */
export type GGUFBigIntType = GGUFValueType.UINT64 | GGUFValueType.INT64;
export type GGUFScalarType = GGUFNumberType | GGUFBigIntType | GGUFValueType.BOOL | GGUFValueType.STRING;

export type GGUFScalar =
  | { type: GGUFNumberType; value: number }
  | { type: GGUFBigIntType; value: bigint }
  | { type: GGUFValueType.BOOL; value: boolean }
  | { type: GGUFValueType.STRING; value: string };

/** How an array's items are held in memory, by item type. Numbers are typed arrays (a copy, never a view of the file). */
export interface GGUFArrayItems {
  [GGUFValueType.UINT8]: Uint8Array;
  [GGUFValueType.INT8]: Int8Array;
  [GGUFValueType.UINT16]: Uint16Array;
  [GGUFValueType.INT16]: Int16Array;
  [GGUFValueType.UINT32]: Uint32Array;
  [GGUFValueType.INT32]: Int32Array;
  [GGUFValueType.FLOAT32]: Float32Array;
  [GGUFValueType.BOOL]: boolean[];
  [GGUFValueType.STRING]: string[];
  /** Nested arrays: each item is an array value with its own item type. (gguf-py reads/writes these; llama.cpp's
   *  gguf.cpp rejects them.) */
  [GGUFValueType.ARRAY]: GGUFArray[];
  [GGUFValueType.UINT64]: BigUint64Array;
  [GGUFValueType.INT64]: BigInt64Array;
  [GGUFValueType.FLOAT64]: Float64Array;
}

export interface GGUFArrayOf<T extends GGUFValueType> {
  type: GGUFValueType.ARRAY;
  itemType: T;
  value: GGUFArrayItems[T];
}

/** An array value; `itemType` discriminates the representation of `value`. */
export type GGUFArray = { [K in GGUFValueType]: GGUFArrayOf<K> }[GGUFValueType];

export type GGUFValue = GGUFScalar | GGUFArray;

/** Numeric typed arrays that hold numbers (not bigints). */
export type GGUFNumberArray = Uint8Array | Int8Array | Uint16Array | Int16Array | Uint32Array | Int32Array | Float32Array | Float64Array;

// ---------------------------------------------------------------------------------------------------------------
// constructors

export const u8 = (value: number): GGUFValue => ({ type: GGUFValueType.UINT8, value });
export const i8 = (value: number): GGUFValue => ({ type: GGUFValueType.INT8, value });
export const u16 = (value: number): GGUFValue => ({ type: GGUFValueType.UINT16, value });
export const i16 = (value: number): GGUFValue => ({ type: GGUFValueType.INT16, value });
export const u32 = (value: number): GGUFValue => ({ type: GGUFValueType.UINT32, value });
export const i32 = (value: number): GGUFValue => ({ type: GGUFValueType.INT32, value });
export const f32 = (value: number): GGUFValue => ({ type: GGUFValueType.FLOAT32, value });
export const f64 = (value: number): GGUFValue => ({ type: GGUFValueType.FLOAT64, value });
export const bool = (value: boolean): GGUFValue => ({ type: GGUFValueType.BOOL, value });
export const str = (value: string): GGUFValue => ({ type: GGUFValueType.STRING, value });
export const u64 = (value: bigint | number): GGUFValue => ({ type: GGUFValueType.UINT64, value: BigInt(value) });
export const i64 = (value: bigint | number): GGUFValue => ({ type: GGUFValueType.INT64, value: BigInt(value) });

/** What `arr()` accepts per item type: plain arrays are converted (and range-checked) to the typed representation. */
export interface GGUFArrayInput {
  [GGUFValueType.UINT8]: ArrayLike<number>;
  [GGUFValueType.INT8]: ArrayLike<number>;
  [GGUFValueType.UINT16]: ArrayLike<number>;
  [GGUFValueType.INT16]: ArrayLike<number>;
  [GGUFValueType.UINT32]: ArrayLike<number>;
  [GGUFValueType.INT32]: ArrayLike<number>;
  [GGUFValueType.FLOAT32]: ArrayLike<number>;
  [GGUFValueType.BOOL]: ArrayLike<boolean>;
  [GGUFValueType.STRING]: ArrayLike<string>;
  [GGUFValueType.ARRAY]: ArrayLike<GGUFArray>;
  [GGUFValueType.UINT64]: ArrayLike<bigint | number>;
  [GGUFValueType.INT64]: ArrayLike<bigint | number>;
  [GGUFValueType.FLOAT64]: ArrayLike<number>;
}

type TypedCtor = { new (n: number): ArrayLike<unknown> & { [i: number]: unknown }; prototype: unknown };
const typedCtors: Partial<Record<GGUFValueType, TypedCtor>> = {
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

/** The typed-array class that holds items of `t`, or undefined for BOOL, STRING, ARRAY. */
export function typedArrayClassOf(t: GGUFValueType): TypedCtor | undefined {
  return typedCtors[t];
}

/**
 * An array value. Typed arrays of the matching class are used as they are (not copied); other array-likes are
 * copied into the typed representation after a range check (throws GGUF_BAD_VALUE for e.g. 300 in a u8 array).
 */
export function arr<T extends GGUFValueType>(itemType: T, values: GGUFArrayInput[T]): GGUFArrayOf<T> {
  const ctor = typedCtors[itemType];
  if (!(itemType in GGUFValueType) || typeof itemType !== 'number') {
    throw new GGUFError('GGUF_BAD_VALUE', `arr(): unknown item type ${String(itemType)}`);
  }
  let out: unknown;
  if (ctor) {
    if (values instanceof (ctor as unknown as abstract new (...a: never[]) => unknown)) {
      out = values;
    } else {
      const n = values.length;
      const ta = new ctor(n);
      for (let i = 0; i < n; i++) {
        const v = checkScalar(itemType as GGUFNumberType | GGUFBigIntType, (values as ArrayLike<unknown>)[i], `arr() item ${i}`);
        ta[i] = v;
      }
      out = ta;
    }
  } else {
    const list = Array.from(values as ArrayLike<unknown>);
    for (let i = 0; i < list.length; i++) {
      const v = list[i];
      if (itemType === GGUFValueType.BOOL && typeof v !== 'boolean') {
        throw new GGUFError('GGUF_BAD_VALUE', `arr(): item ${i} of a bool array is ${typeof v}`);
      }
      if (itemType === GGUFValueType.STRING && typeof v !== 'string') {
        throw new GGUFError('GGUF_BAD_VALUE', `arr(): item ${i} of a string array is ${typeof v}`);
      }
      if (itemType === GGUFValueType.ARRAY && !isArrayValue(v)) {
        throw new GGUFError('GGUF_BAD_VALUE', `arr(): item ${i} of a nested array is not an array value (use arr())`);
      }
    }
    out = list;
  }
  return { type: GGUFValueType.ARRAY, itemType, value: out } as GGUFArrayOf<T>;
}

function isArrayValue(v: unknown): v is GGUFArray {
  return typeof v === 'object' && v !== null && (v as { type?: unknown }).type === GGUFValueType.ARRAY;
}

const INT_RANGES: Partial<Record<GGUFValueType, readonly [number, number]>> = {
  [GGUFValueType.UINT8]: [0, 0xff],
  [GGUFValueType.INT8]: [-0x80, 0x7f],
  [GGUFValueType.UINT16]: [0, 0xffff],
  [GGUFValueType.INT16]: [-0x8000, 0x7fff],
  [GGUFValueType.UINT32]: [0, 0xffffffff],
  [GGUFValueType.INT32]: [-0x80000000, 0x7fffffff],
};

/**
 * Checks that `v` is a valid JS value for scalar type `t` and returns it normalised (numbers → bigint for the
 * 64-bit types). Throws GGUF_BAD_VALUE naming `what` otherwise.
 */
export function checkScalar(t: GGUFScalarType, v: unknown, what: string): number | bigint | boolean | string {
  const range = INT_RANGES[t];
  if (range) {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < range[0] || v > range[1]) {
      throw new GGUFError(
        'GGUF_BAD_VALUE',
        `${what}: ${String(v)} is not a valid ${valueTypeName(t)} (integer in [${range[0]}, ${range[1]}])`,
      );
    }
    return v;
  }
  switch (t) {
    case GGUFValueType.FLOAT32:
    case GGUFValueType.FLOAT64:
      if (typeof v !== 'number')
        throw new GGUFError('GGUF_BAD_VALUE', `${what}: expected a number for ${valueTypeName(t)}, got ${typeof v}`);
      return v;
    case GGUFValueType.UINT64:
    case GGUFValueType.INT64: {
      let b: bigint;
      if (typeof v === 'bigint') b = v;
      else if (typeof v === 'number' && Number.isSafeInteger(v)) b = BigInt(v);
      else throw new GGUFError('GGUF_BAD_VALUE', `${what}: expected a bigint (or safe integer) for ${valueTypeName(t)}, got ${String(v)}`);
      const ok = t === GGUFValueType.UINT64 ? BigInt.asUintN(64, b) === b : BigInt.asIntN(64, b) === b;
      if (!ok) throw new GGUFError('GGUF_BAD_VALUE', `${what}: ${b} does not fit in ${valueTypeName(t)}`);
      return b;
    }
    case GGUFValueType.BOOL:
      if (typeof v !== 'boolean') throw new GGUFError('GGUF_BAD_VALUE', `${what}: expected a boolean, got ${typeof v}`);
      return v;
    case GGUFValueType.STRING:
      if (typeof v !== 'string') throw new GGUFError('GGUF_BAD_VALUE', `${what}: expected a string, got ${typeof v}`);
      return v;
    default:
      throw new GGUFError('GGUF_BAD_VALUE', `${what}: unknown scalar type ${String(t)}`);
  }
}

/** Bytes one item of type `t` takes at least in the file (strings: the length prefix; arrays: type + count). */
export function minEncodedSize(t: GGUFValueType): number {
  switch (t) {
    case GGUFValueType.UINT8:
    case GGUFValueType.INT8:
    case GGUFValueType.BOOL:
      return 1;
    case GGUFValueType.UINT16:
    case GGUFValueType.INT16:
      return 2;
    case GGUFValueType.UINT32:
    case GGUFValueType.INT32:
    case GGUFValueType.FLOAT32:
      return 4;
    case GGUFValueType.UINT64:
    case GGUFValueType.INT64:
    case GGUFValueType.FLOAT64:
    case GGUFValueType.STRING:
      return 8;
    case GGUFValueType.ARRAY:
      return 12;
  }
}

const TYPE_NAMES: Record<GGUFValueType, string> = {
  [GGUFValueType.UINT8]: 'u8',
  [GGUFValueType.INT8]: 'i8',
  [GGUFValueType.UINT16]: 'u16',
  [GGUFValueType.INT16]: 'i16',
  [GGUFValueType.UINT32]: 'u32',
  [GGUFValueType.INT32]: 'i32',
  [GGUFValueType.FLOAT32]: 'f32',
  [GGUFValueType.BOOL]: 'bool',
  [GGUFValueType.STRING]: 'str',
  [GGUFValueType.ARRAY]: 'arr',
  [GGUFValueType.UINT64]: 'u64',
  [GGUFValueType.INT64]: 'i64',
  [GGUFValueType.FLOAT64]: 'f64',
};

/** Short name of a value type as llama.cpp prints it ("u32", "str", "arr"); "type#N" for unknown ids. */
export function valueTypeName(t: number): string {
  return TYPE_NAMES[t as GGUFValueType] ?? `type#${t}`;
}

/** "u32", "str", "arr[str]", "arr[arr]" … */
export function describeValueType(v: GGUFValue): string {
  return v.type === GGUFValueType.ARRAY ? `arr[${valueTypeName(v.itemType)}]` : valueTypeName(v.type);
}

// ---------------------------------------------------------------------------------------------------------------
// tensors and files

export interface GGUFTensorInfo {
  name: string;
  /** Sizes in ggml order: ne0 (the row length) first; 1 to 4 entries, each ≥ 1. */
  dims: number[];
  type: GGMLType;
  /** Offset of the tensor's data relative to the start of the data section; a multiple of the alignment. */
  offset: number;
  /** Bytes of the tensor's data (without padding). */
  byteLength: number;
}

export interface GGUFFile {
  version: number;
  alignment: number;
  /** In file order. */
  metadata: Map<string, GGUFValue>;
  tensors: GGUFTensorInfo[];
  /** Absolute offset of the data section. */
  dataOffset: number;
  fileSize: number;
}

/** Anything with metadata: a parsed GGUFFile, a GGUFWriter, or a bare map wrapper `{ metadata }`. */
export interface GGUFMetadataHolder {
  readonly metadata: ReadonlyMap<string, GGUFValue>;
}

/** Number of elements of a tensor. */
export function tensorElementCount(t: Pick<GGUFTensorInfo, 'dims'>): number {
  let n = 1;
  for (const d of t.dims) n *= d;
  return n;
}

/** Absolute byte range [start, end) of a tensor's data in the file. */
export function tensorDataRange(file: Pick<GGUFFile, 'dataOffset'>, t: GGUFTensorInfo): { start: number; end: number } {
  const start = file.dataOffset + t.offset;
  return { start, end: start + t.byteLength };
}

export function findTensor(file: Pick<GGUFFile, 'tensors'>, name: string): GGUFTensorInfo | undefined {
  return file.tensors.find((t) => t.name === name);
}

// ---------------------------------------------------------------------------------------------------------------
// metadata accessors: the plain ones return undefined for an absent key and throw GGUF_BAD_VALUE for a value of
// the wrong type; the require* ones throw GGUF_MISSING_KEY for an absent key.

function wrongType(key: string, v: GGUFValue, expected: string): GGUFError {
  return new GGUFError('GGUF_BAD_VALUE', `metadata key "${key}" is ${describeValueType(v)}, expected ${expected}`);
}
function missing(key: string, expected: string): GGUFError {
  return new GGUFError('GGUF_MISSING_KEY', `missing metadata key "${key}" (expected ${expected})`);
}

function bigToNumber(key: string, b: bigint): number {
  const n = Number(b);
  if (!Number.isSafeInteger(n)) {
    throw new GGUFError('GGUF_BAD_VALUE', `metadata key "${key}": ${b} is not a safe integer`);
  }
  return n;
}

export function metaValue(h: GGUFMetadataHolder, key: string): GGUFValue | undefined {
  return h.metadata.get(key);
}

/** Any numeric scalar as a number (64-bit integers must be safe integers). */
export function metaNumber(h: GGUFMetadataHolder, key: string): number | undefined {
  const v = h.metadata.get(key);
  if (v === undefined) return undefined;
  switch (v.type) {
    case GGUFValueType.UINT64:
    case GGUFValueType.INT64:
      return bigToNumber(key, v.value);
    case GGUFValueType.BOOL:
    case GGUFValueType.STRING:
    case GGUFValueType.ARRAY:
      throw wrongType(key, v, 'a number');
    default:
      return v.value;
  }
}

/** Any integer scalar as a bigint. */
export function metaBigInt(h: GGUFMetadataHolder, key: string): bigint | undefined {
  const v = h.metadata.get(key);
  if (v === undefined) return undefined;
  if (v.type === GGUFValueType.UINT64 || v.type === GGUFValueType.INT64) return v.value;
  if (v.type in INT_RANGES) return BigInt(v.value as number);
  throw wrongType(key, v, 'an integer');
}

export function metaBool(h: GGUFMetadataHolder, key: string): boolean | undefined {
  const v = h.metadata.get(key);
  if (v === undefined) return undefined;
  if (v.type !== GGUFValueType.BOOL) throw wrongType(key, v, 'bool');
  return v.value;
}

export function metaString(h: GGUFMetadataHolder, key: string): string | undefined {
  const v = h.metadata.get(key);
  if (v === undefined) return undefined;
  if (v.type !== GGUFValueType.STRING) throw wrongType(key, v, 'str');
  return v.value;
}

/** An array value (any item type), or with `itemType` just its items, checked to be of that type. */
export function metaArray(h: GGUFMetadataHolder, key: string): GGUFArray | undefined;
export function metaArray<T extends GGUFValueType>(h: GGUFMetadataHolder, key: string, itemType: T): GGUFArrayItems[T] | undefined;
export function metaArray(
  h: GGUFMetadataHolder,
  key: string,
  itemType?: GGUFValueType,
): GGUFArray | GGUFArrayItems[GGUFValueType] | undefined {
  const v = h.metadata.get(key);
  if (v === undefined) return undefined;
  if (v.type !== GGUFValueType.ARRAY) throw wrongType(key, v, itemType === undefined ? 'an array' : `arr[${valueTypeName(itemType)}]`);
  if (itemType === undefined) return v;
  if (v.itemType !== itemType) throw wrongType(key, v, `arr[${valueTypeName(itemType)}]`);
  return v.value;
}

/** A numeric array as numbers: the typed array itself for 8/16/32-bit and float items, a Float64Array copy for
 *  64-bit integers (each must be a safe integer). */
export function metaNumberArray(h: GGUFMetadataHolder, key: string): GGUFNumberArray | undefined {
  const v = h.metadata.get(key);
  if (v === undefined) return undefined;
  if (v.type !== GGUFValueType.ARRAY) throw wrongType(key, v, 'a numeric array');
  switch (v.itemType) {
    case GGUFValueType.UINT64:
    case GGUFValueType.INT64: {
      const out = new Float64Array(v.value.length);
      for (let i = 0; i < out.length; i++) out[i] = bigToNumber(key, v.value[i] as bigint);
      return out;
    }
    case GGUFValueType.BOOL:
    case GGUFValueType.STRING:
    case GGUFValueType.ARRAY:
      throw wrongType(key, v, 'a numeric array');
    default:
      return v.value;
  }
}

export function metaStringArray(h: GGUFMetadataHolder, key: string): string[] | undefined {
  return metaArray(h, key, GGUFValueType.STRING);
}

function req<T>(v: T | undefined, key: string, expected: string): T {
  if (v === undefined) throw missing(key, expected);
  return v;
}

export function requireMetaValue(h: GGUFMetadataHolder, key: string): GGUFValue {
  return req(metaValue(h, key), key, 'a value');
}
export function requireMetaNumber(h: GGUFMetadataHolder, key: string): number {
  return req(metaNumber(h, key), key, 'a number');
}
export function requireMetaBigInt(h: GGUFMetadataHolder, key: string): bigint {
  return req(metaBigInt(h, key), key, 'an integer');
}
export function requireMetaBool(h: GGUFMetadataHolder, key: string): boolean {
  return req(metaBool(h, key), key, 'bool');
}
export function requireMetaString(h: GGUFMetadataHolder, key: string): string {
  return req(metaString(h, key), key, 'str');
}
export function requireMetaArray(h: GGUFMetadataHolder, key: string): GGUFArray;
export function requireMetaArray<T extends GGUFValueType>(h: GGUFMetadataHolder, key: string, itemType: T): GGUFArrayItems[T];
export function requireMetaArray(h: GGUFMetadataHolder, key: string, itemType?: GGUFValueType): GGUFArray | GGUFArrayItems[GGUFValueType] {
  const v = itemType === undefined ? metaArray(h, key) : metaArray(h, key, itemType);
  return req(v, key, itemType === undefined ? 'an array' : `arr[${valueTypeName(itemType)}]`);
}
export function requireMetaNumberArray(h: GGUFMetadataHolder, key: string): GGUFNumberArray {
  return req(metaNumberArray(h, key), key, 'a numeric array');
}
export function requireMetaStringArray(h: GGUFMetadataHolder, key: string): string[] {
  return req(metaStringArray(h, key), key, 'arr[str]');
}

// ---------------------------------------------------------------------------------------------------------------
// format constants

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** The largest general.alignment this toolkit accepts (reader and writer). */
export const GGUF_MAX_ALIGNMENT = 1 << 20;
/** ggml's GGML_MAX_NAME: a tensor name must be shorter than this many bytes. */
export const GGML_MAX_NAME = 64;
export const GGML_MAX_DIMS = 4;
export const GGUF_KEY_ALIGNMENT = 'general.alignment';
