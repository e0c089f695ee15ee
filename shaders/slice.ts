/**
 * A slice of one MoE layer's experts as every backend of the engine takes it (ExpertSlice, or a stream of its
 * mini-GGUF), the shapes of a slice and of a call, and the checks both backends make on them: ExpertRuntime (WGSL)
 * and OrtExpertFallback (onnxruntime) refuse the same slices and calls with the same ExpertRuntimeError codes; only
 * the weight types each can read differ (`SupportedTypes`).
 */
import { EXPERT_MATRICES, type ExpertMatrix } from '../gguf/expert-slice.ts';
import { rowByteSize, requireQuantType, typeName, type GGMLType } from '../gguf/quant-types.ts';
import {
  checkVariant,
  computesVariant,
  describeVariant,
  SILU_VARIANT,
  type ExpertVariant,
  type VariantFeature,
} from '../protocol/variant.ts';
import { ExpertRuntimeError } from './errors.ts';

export type SliceTypes = Record<ExpertMatrix, GGMLType>;

export interface SliceShape {
  nEmbd: number;
  ff: number;
  nExpert: number;
  types: SliceTypes;
}

export interface ExpertSlice extends SliceShape {
  /** nExpert gate matrices [ff rows × nEmbd], consecutive, in their GGUF bytes. */
  gate: Uint8Array;
  /** nExpert up matrices [ff rows × nEmbd]. */
  up: Uint8Array;
  /** nExpert down matrices [nEmbd rows × ff]. */
  down: Uint8Array;
  /** The expert FFN variant (protocol/variant.ts); absent: SiLU-gated without biases, as every slice before it. */
  variant?: ExpertVariant;
  /** Float32 biases, present exactly when `variant.biases`: gate and up [nExpert × ff], down [nExpert × nEmbd]. */
  biases?: SliceBiases;
  /** Float32 per-expert scales, present exactly when `variant.scales`: one per expert and matrix [nExpert]. */
  scales?: SliceScales;
}

/** A slice's per-expert scales (`ffn_{gate,up,down}_exps.scale`), one float per expert of the slice. */
export interface SliceScales {
  gate: Float32Array;
  up: Float32Array;
  down: Float32Array;
}

/** A slice's expert biases, expert-major as in the model (`ffn_{gate,up,down}_exps.bias`). */
export interface SliceBiases {
  gate: Float32Array;
  up: Float32Array;
  down: Float32Array;
}

/** A mini-GGUF expert slice (gguf/expert-slice.ts) to stream into GPU buffers; open() is called again to rebuild. */
export interface SliceStreamSource {
  open(): Promise<ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>>;
}

export interface CallShape {
  nTokens: number;
  nUsed: number;
}

/** The weight types a backend reads, and how its UNSUPPORTED_TYPE message says it cannot (`${cannot} Q2_K weights`). */
export interface SupportedTypes {
  types: readonly GGMLType[];
  cannot: string;
}

function requirePositiveInt(field: string, value: number): void {
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new ExpertRuntimeError(
      'BAD_SHAPE',
      { field, value, requirement: 'a positive integer' },
      `${field} must be a positive integer, got ${value}`,
    );
  }
}

/** Bytes each matrix of a valid slice must have: nExpert × rows × row bytes. */
export function sliceMatrixBytes(s: SliceShape): Record<ExpertMatrix, number> {
  return {
    gate: s.nExpert * s.ff * rowByteSize(s.types.gate, s.nEmbd),
    up: s.nExpert * s.ff * rowByteSize(s.types.up, s.nEmbd),
    down: s.nExpert * s.nEmbd * rowByteSize(s.types.down, s.ff),
  };
}

/**
 * Checks dimensions, types (against the backend's `supported`) and byte lengths of a slice; throws BAD_SHAPE,
 * UNSUPPORTED_TYPE or BAD_SLICE_BYTES naming what is wrong.
 */
export function validateSlice(s: SliceShape, bytes: Record<ExpertMatrix, { length: number }>, supported: SupportedTypes): void {
  requirePositiveInt('nEmbd', s.nEmbd);
  requirePositiveInt('ff', s.ff);
  requirePositiveInt('nExpert', s.nExpert);
  for (const m of EXPERT_MATRICES) {
    const t = s.types[m];
    if (!supported.types.includes(t)) {
      const names = supported.types.map(typeName);
      throw new ExpertRuntimeError(
        'UNSUPPORTED_TYPE',
        { matrix: m, type: t, typeName: typeName(t), supported: names },
        `${m}: ${supported.cannot} ${typeName(t)} weights (supported: ${names.join(', ')})`,
      );
    }
    // Whole blocks first: sliceMatrixBytes (rowByteSize) refuses a partial block with a plain RangeError.
    const rowLength = m === 'down' ? s.ff : s.nEmbd;
    const block = requireQuantType(t).blockSize;
    if (rowLength % block !== 0) {
      const field = m === 'down' ? 'ff' : 'nEmbd';
      throw new ExpertRuntimeError(
        'BAD_SHAPE',
        { field, value: rowLength, requirement: `a multiple of ${block} (${m} is ${typeName(t)})` },
        `${field} = ${rowLength} is not a whole number of ${typeName(t)} blocks of ${block} (${m} rows)`,
      );
    }
  }
  const expected = sliceMatrixBytes(s);
  for (const m of EXPERT_MATRICES) {
    if (bytes[m].length !== expected[m]) {
      throw new ExpertRuntimeError(
        'BAD_SLICE_BYTES',
        { matrix: m, expected: expected[m], actual: bytes[m].length },
        `${m}: ${s.nExpert} experts of ${typeName(s.types[m])} need ${expected[m]} bytes, got ${bytes[m].length}`,
      );
    }
  }
}

/**
 * Checks a variant itself (checkVariant) and against what a backend computes (`features`, protocol/variant.ts):
 * UNSUPPORTED_VARIANT, with checkVariant's sentence for a variant no backend could compute (alpha ≤ 0, a NaN limit).
 * What a stream's header can be checked for before its biases arrive.
 */
export function validateVariantFeatures(v: ExpertVariant, features: readonly VariantFeature[]): void {
  try {
    checkVariant(v);
  } catch (e) {
    if (!(e instanceof RangeError)) throw e;
    throw new ExpertRuntimeError('UNSUPPORTED_VARIANT', { variant: describeVariant(v), supported: [...features] }, e.message);
  }
  if (!computesVariant(features, v)) {
    throw new ExpertRuntimeError(
      'UNSUPPORTED_VARIANT',
      { variant: describeVariant(v), supported: [...features] },
      `this backend does not compute ${describeVariant(v)} experts (it computes: ${features.join(', ')})`,
    );
  }
}

/**
 * Checks a slice's variant (validateVariantFeatures) and its biases against the variant: UNSUPPORTED_VARIANT, or
 * BAD_SLICE_BIASES naming the bias and its lengths.
 */
export function validateVariant(
  s: Pick<ExpertSlice, 'nEmbd' | 'ff' | 'nExpert' | 'variant' | 'biases' | 'scales'>,
  features: readonly VariantFeature[],
): void {
  const v = s.variant ?? SILU_VARIANT;
  validateVariantFeatures(v, features);
  const want = { gate: s.nExpert * s.ff, up: s.nExpert * s.ff, down: s.nExpert * s.nEmbd };
  for (const b of ['gate', 'up', 'down'] as const) {
    const got = s.biases?.[b].length ?? 0;
    const expected = v.biases ? want[b] : 0;
    if (got !== expected) {
      throw new ExpertRuntimeError(
        'BAD_SLICE_BIASES',
        { bias: b, expected, actual: got },
        `${b} bias: ${v.biases ? `${describeVariant(v)} needs` : 'a variant without biases takes'} ${expected} values, got ${got}`,
      );
    }
  }
  for (const m of ['gate', 'up', 'down'] as const) {
    const got = s.scales?.[m].length ?? 0;
    const expected = v.scales ? s.nExpert : 0;
    if (got !== expected) {
      throw new ExpertRuntimeError(
        'BAD_SLICE_BIASES',
        { bias: `${m} scale`, expected, actual: got },
        `${m} scale: ${v.scales ? `${describeVariant(v)} needs` : 'a variant without scales takes'} ${expected} values, got ${got}`,
      );
    }
  }
}

export interface ExpertFfnInputs {
  rows: { readonly length: number };
  ids: Int32Array;
  probs: { readonly length: number };
}

/** Checks one compute call against its slice; throws ExpertRuntimeError naming the input and the numbers. */
export function validateInputs(s: Pick<SliceShape, 'nEmbd' | 'nExpert'>, call: CallShape, inputs: ExpertFfnInputs): void {
  if (!Number.isSafeInteger(call.nTokens) || call.nTokens < 0) {
    throw new ExpertRuntimeError(
      'BAD_SHAPE',
      { field: 'nTokens', value: call.nTokens, requirement: 'an integer ≥ 0' },
      `nTokens must be an integer ≥ 0, got ${call.nTokens}`,
    );
  }
  requirePositiveInt('nUsed', call.nUsed);
  const nPairs = call.nTokens * call.nUsed;
  const expect = (input: 'rows' | 'ids' | 'probs', expected: number, actual: number, what: string): void => {
    if (actual !== expected) {
      throw new ExpertRuntimeError(
        'BAD_INPUT',
        { input, expected, actual },
        `${input} must hold ${what} = ${expected} values, got ${actual}`,
      );
    }
  };
  expect('rows', call.nTokens * s.nEmbd, inputs.rows.length, `nTokens × nEmbd (${call.nTokens} × ${s.nEmbd})`);
  expect('ids', nPairs, inputs.ids.length, `nTokens × nUsed (${call.nTokens} × ${call.nUsed})`);
  expect('probs', nPairs, inputs.probs.length, `nTokens × nUsed (${call.nTokens} × ${call.nUsed})`);
  for (let i = 0; i < nPairs; i++) {
    const id = inputs.ids[i]!;
    if (id < 0 || id >= s.nExpert) {
      throw new ExpertRuntimeError(
        'ID_OUT_OF_RANGE',
        { index: i, id, nExpert: s.nExpert },
        `ids[${i}] = ${id} is not an expert of this slice (local indices 0..${s.nExpert - 1})`,
      );
    }
  }
}
