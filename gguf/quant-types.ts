/**
 * ggml tensor types as GGUF stores them: numeric id, elements per block, bytes per block.
 * Ids and sizes follow ggml.h / ggml-common.h of the pinned llama.cpp (commit 80fb11ac).
 * A tensor's row length must be a multiple of its block size; its byte size is
 * (elements / blockSize) * bytesPerBlock.
 */
export enum GGMLType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
}

export interface QuantTypeInfo {
  readonly type: GGMLType;
  readonly name: string;
  /** Elements per block. */
  readonly blockSize: number;
  /** Bytes per block. */
  readonly bytesPerBlock: number;
}

/** Super-block size of the K-quants. */
export const QK_K = 256;

const table: ReadonlyArray<readonly [GGMLType, number, number]> = [
  [GGMLType.F32, 1, 4],
  [GGMLType.F16, 1, 2],
  [GGMLType.Q4_0, 32, 18],
  [GGMLType.Q4_1, 32, 20],
  [GGMLType.Q5_0, 32, 22],
  [GGMLType.Q5_1, 32, 24],
  [GGMLType.Q8_0, 32, 34],
  [GGMLType.Q8_1, 32, 36],
  [GGMLType.Q2_K, QK_K, 84],
  [GGMLType.Q3_K, QK_K, 110],
  [GGMLType.Q4_K, QK_K, 144],
  [GGMLType.Q5_K, QK_K, 176],
  [GGMLType.Q6_K, QK_K, 210],
  [GGMLType.Q8_K, QK_K, 292],
  [GGMLType.IQ2_XXS, QK_K, 66],
  [GGMLType.IQ2_XS, QK_K, 74],
  [GGMLType.IQ3_XXS, QK_K, 98],
  [GGMLType.IQ1_S, QK_K, 50],
  [GGMLType.IQ4_NL, 32, 18],
  [GGMLType.IQ3_S, QK_K, 110],
  [GGMLType.IQ2_S, QK_K, 82],
  [GGMLType.IQ4_XS, QK_K, 136],
  [GGMLType.I8, 1, 1],
  [GGMLType.I16, 1, 2],
  [GGMLType.I32, 1, 4],
  [GGMLType.I64, 1, 8],
  [GGMLType.F64, 1, 8],
  [GGMLType.IQ1_M, QK_K, 56],
  [GGMLType.BF16, 1, 2],
  [GGMLType.TQ1_0, QK_K, 54],
  [GGMLType.TQ2_0, QK_K, 66],
  [GGMLType.MXFP4, 32, 17],
  [GGMLType.NVFP4, 64, 36],
  [GGMLType.Q1_0, 128, 18],
  [GGMLType.Q2_0, 64, 18],
];

const byId = new Map<number, QuantTypeInfo>();
const byName = new Map<string, QuantTypeInfo>();
for (const [type, blockSize, bytesPerBlock] of table) {
  const info: QuantTypeInfo = Object.freeze({ type, name: GGMLType[type] as string, blockSize, bytesPerBlock });
  byId.set(type, info);
  byName.set(info.name.toLowerCase(), info);
}

/** The type's info, or undefined for an id this table does not know. */
export function quantTypeInfo(type: number): QuantTypeInfo | undefined {
  return byId.get(type);
}

/** The type's info; throws for an unknown id. */
export function requireQuantType(type: number): QuantTypeInfo {
  const info = byId.get(type);
  if (!info) throw new RangeError(`unknown ggml type id ${type}`);
  return info;
}

/** Looks a type up by name, case-insensitively ("q4_k", "F16"). */
export function quantTypeByName(name: string): QuantTypeInfo | undefined {
  return byName.get(name.toLowerCase());
}

export function allQuantTypes(): QuantTypeInfo[] {
  return [...byId.values()];
}

/**
 * Bytes of a tensor of `elements` elements whose rows have `rowLength` elements.
 * Throws when the row length is not a whole number of blocks (ggml refuses such tensors too).
 */
export function tensorByteSize(type: GGMLType, rowLength: number, elements: number): number {
  const info = requireQuantType(type);
  if (rowLength % info.blockSize !== 0) {
    throw new RangeError(`${info.name}: row length ${rowLength} is not a multiple of the block size ${info.blockSize}`);
  }
  return (elements / info.blockSize) * info.bytesPerBlock;
}

/** The ggml name of a type id ("Q4_K"), or the bare number for an id this table does not know: safe in error messages. */
export function typeName(type: number): string {
  return (GGMLType as unknown as Record<number, string | undefined>)[type] ?? String(type);
}

/** Bytes of one row of `rowLength` elements. */
export function rowByteSize(type: GGMLType, rowLength: number): number {
  return tensorByteSize(type, rowLength, rowLength);
}
