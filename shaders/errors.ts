/**
 * The one error type of the expert runtime. Callers and tests match `code` (and read `details`), not the prose.
 */
import type { ExpertMatrix } from '../gguf/expert-slice.ts';

export interface ExpertRuntimeErrorDetails {
  /** The backend (WGSL kernels, or the onnxruntime fallback) cannot read this weight type (yet). */
  UNSUPPORTED_TYPE: { matrix: ExpertMatrix; type: number; typeName: string; supported: string[] };
  /** The slice's expert FFN variant (protocol/variant.ts) is one this backend does not compute (yet). */
  UNSUPPORTED_VARIANT: { variant: string; supported: string[] };
  /** The slice's biases do not match its variant (present without it, missing with it, or of the wrong length). */
  BAD_SLICE_BIASES: { bias: string; expected: number; actual: number };
  /** A slice or call dimension is not a positive integer, or a row is not a whole number of blocks. */
  BAD_SHAPE: { field: string; value: number; requirement: string };
  /** A weight matrix's bytes do not match nExpert × rows × row bytes. */
  BAD_SLICE_BYTES: { matrix: ExpertMatrix; expected: number; actual: number };
  /** One expert's matrix (`bytes`) is bigger than one storage binding (or one buffer) may be on this device. */
  BINDING_TOO_LARGE: { matrix: ExpertMatrix; bytes: number; limit: number; limitName: string };
  /** The slice's weights exceed the runtime's maxWeightBytes. */
  SLICE_TOO_LARGE: { bytes: number; limit: number };
  /** A slice stream is not a valid mini-GGUF expert slice (cause: the GGUFError code), or changed when reopened. */
  BAD_SLICE_STREAM: { cause: string; message: string };
  /** The kernel variant asked for needs a device feature (or layout) this device lacks. */
  FEATURE_UNAVAILABLE: { feature: string; reason: string };
  /** An input array of compute() has the wrong length. */
  BAD_INPUT: { input: 'rows' | 'ids' | 'probs'; expected: number; actual: number };
  /** ids[index] is not a local expert index of the slice. */
  ID_OUT_OF_RANGE: { index: number; id: number; nExpert: number };
  /** A per-call buffer (activations, hidden, outputs) would exceed a device limit: send fewer tokens per call. */
  BATCH_TOO_LARGE: { buffer: string; bytes: number; limit: number; limitName: string };
  /** More workgroups than even a 2-D dispatch can name. */
  DISPATCH_TOO_LARGE: { workgroups: number; maxPerDimension: number };
  /** compute() was asked for a regime (see regime-policy.ts) that cannot serve this slice or is not one. */
  REGIME_UNAVAILABLE: { regime: string; reason: string };
  /** Runtime options out of range for this device. */
  BAD_OPTION: { option: string; value: number; requirement: string };
  /** A shader module or pipeline failed to build. */
  SHADER_COMPILE: { pipeline: string; messages: string[] };
  /** WebGPU reported a validation or out-of-memory error for a compute call. */
  GPU_ERROR: { message: string };
  DEVICE_LOST: { reason: string; message: string };
  /** The expert engine found no backend that builds and computes here (each one's error by backend). */
  NO_BACKEND: { errors: Partial<Record<'webgpu' | 'wasm', string>> };
  DISPOSED: Record<string, never>;
}

export type ExpertRuntimeErrorCode = keyof ExpertRuntimeErrorDetails;

export class ExpertRuntimeError<C extends ExpertRuntimeErrorCode = ExpertRuntimeErrorCode> extends Error {
  override readonly name = 'ExpertRuntimeError';
  readonly code: C;
  readonly details: ExpertRuntimeErrorDetails[C];

  constructor(code: C, details: ExpertRuntimeErrorDetails[C], message: string) {
    super(message);
    this.code = code;
    this.details = details;
  }
}
