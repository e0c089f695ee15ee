/**
 * The expert FFN of one slice on onnxruntime (onnxruntime-web's wasm backend by default), for machines where our
 * WebGPU kernels are unavailable or slower (a software adapter, no WebGPU at all). Same slice, same compute()
 * contract and the same validation errors (ExpertRuntimeError codes) as ExpertRuntime.
 *
 * The weights are dequantized to float32 (gguf/dequantize.ts, bit-exact with ggml) and become initializers of an ONNX
 * graph built here (expert-ffn-graph.ts); the slice thus costs 4 bytes per weight in memory, and the graph runs every
 * expert of the slice on every row (the router probs are a dense [T × nExpert] input, zero where unrouted).
 *
 * @example
 *   import * as ort from 'onnxruntime-web';
 *   ort.env.wasm.numThreads = 1;
 *   const fb = await OrtExpertFallback.create(ort, slice);
 *   const out = await fb.compute(rows, ids, probs, nTokens, nUsed); // Float32Array [nTokens × nEmbd]
 *   await fb.dispose();
 *
 * The `ort` module is a parameter so the caller picks the build (onnxruntime-web, its /wasm or /webgpu entry, or
 * onnxruntime-node) and configures `ort.env` (threads, wasmPaths) before the first session.
 */
import { GGMLType } from '../../gguf/quant-types.ts';
import { canDequantize, dequantize } from '../../gguf/dequantize.ts';
import { ExpertRuntimeError } from '../errors.ts';
import { validateInputs, validateSlice, type ExpertSlice, type SupportedTypes } from '../slice.ts';
import { EXPERT_FFN_INPUTS, EXPERT_FFN_OUTPUT, buildExpertFfnModel } from './expert-ffn-graph.ts';

/** The part of an onnxruntime module (web or node) the fallback uses. */
export interface OrtTensorLike {
  readonly data: unknown;
  readonly dims: readonly number[];
  dispose?(): void;
}
export interface OrtSessionLike {
  run(feeds: Record<string, OrtTensorLike>): Promise<Record<string, OrtTensorLike | undefined>>;
  release(): Promise<void>;
}
export interface OrtModuleLike {
  Tensor: new (type: 'float32', data: Float32Array, dims: readonly number[]) => OrtTensorLike;
  InferenceSession: {
    create(
      model: Uint8Array,
      options?: { executionProviders?: string[]; graphOptimizationLevel?: 'disabled' | 'basic' | 'extended' | 'all' },
    ): Promise<OrtSessionLike>;
  };
}

export interface OrtExpertFallbackOptions {
  /** Execution providers in order of preference (default ['wasm']). */
  executionProviders?: string[];
  /** Graph optimisation level (onnxruntime's default 'all' when omitted). */
  graphOptimizationLevel?: 'disabled' | 'basic' | 'extended' | 'all';
  /** Name used in error messages. */
  label?: string;
}

/** Types the fallback reads: every type gguf/dequantize.ts decodes. */
export function fallbackQuantTypes(): GGMLType[] {
  return (Object.values(GGMLType).filter((v) => typeof v === 'number') as GGMLType[]).filter((t) => canDequantize(t));
}

/** The weight types the fallback reads, for validateSlice (slice.ts): the same checks as ExpertRuntime's otherwise. */
export const FALLBACK_TYPES: SupportedTypes = { types: fallbackQuantTypes(), cannot: 'the onnxruntime fallback cannot dequantize' };

/** The dense [nTokens × nExpert] router probs of a call (a pair routed twice to one expert adds up, as in the sum). */
export function denseProbs(ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number, nExpert: number): Float32Array {
  const p = new Float32Array(nTokens * nExpert);
  for (let t = 0; t < nTokens; t++) {
    for (let k = 0; k < nUsed; k++) {
      const i = t * nUsed + k;
      p[t * nExpert + ids[i]!] = p[t * nExpert + ids[i]!]! + probs[i]!;
    }
  }
  return p;
}

export class OrtExpertFallback {
  private session: OrtSessionLike | null;
  private disposed = false;

  private constructor(
    private readonly ort: OrtModuleLike,
    session: OrtSessionLike,
    readonly shape: { nEmbd: number; ff: number; nExpert: number },
    /** Bytes of the serialized ONNX model (≈ 4 bytes per weight). */
    readonly modelBytes: number,
    readonly executionProviders: readonly string[],
    private readonly label: string,
  ) {
    this.session = session;
  }

  /**
   * Validates the slice, dequantizes it, builds the model and opens an onnxruntime session on it. Throws
   * ExpertRuntimeError (BAD_SHAPE / UNSUPPORTED_TYPE / BAD_SLICE_BYTES) for a malformed slice; onnxruntime's own
   * errors (a missing execution provider, out of memory) propagate as they are.
   */
  static async create(ort: OrtModuleLike, slice: ExpertSlice, options: OrtExpertFallbackOptions = {}): Promise<OrtExpertFallback> {
    validateSlice(slice, slice, FALLBACK_TYPES);
    const { nEmbd, ff, nExpert } = slice;
    const n = nExpert * nEmbd * ff;
    let model: Uint8Array | null = buildExpertFfnModel({
      nEmbd,
      ff,
      nExpert,
      gate: dequantize(slice.types.gate, slice.gate, n),
      up: dequantize(slice.types.up, slice.up, n),
      down: dequantize(slice.types.down, slice.down, n),
    });
    const modelBytes = model.length;
    const executionProviders = options.executionProviders ?? ['wasm'];
    const sessionOptions: { executionProviders: string[]; graphOptimizationLevel?: 'disabled' | 'basic' | 'extended' | 'all' } = {
      executionProviders,
    };
    if (options.graphOptimizationLevel) sessionOptions.graphOptimizationLevel = options.graphOptimizationLevel;
    const session = await ort.InferenceSession.create(model, sessionOptions);
    model = null;
    const label = options.label ?? `ort expert-slice ${nExpert}×[${nEmbd}↔${ff}] (${executionProviders.join(',')})`;
    return new OrtExpertFallback(ort, session, { nEmbd, ff, nExpert }, modelBytes, executionProviders, label);
  }

  /**
   * out[t] = Σ_k probs[t,k] · expert_{ids[t,k]}(rows[t]) for nTokens rows of nEmbd; returns [nTokens × nEmbd].
   * Throws ExpertRuntimeError (BAD_SHAPE, BAD_INPUT, ID_OUT_OF_RANGE, DISPOSED) like ExpertRuntime.compute.
   */
  async compute(rows: Float32Array, ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number): Promise<Float32Array> {
    if (this.disposed || !this.session) throw new ExpertRuntimeError('DISPOSED', {}, `${this.label}: used after dispose()`);
    const { nEmbd, nExpert } = this.shape;
    validateInputs(this.shape, { nTokens, nUsed }, { rows, ids, probs });
    if (nTokens === 0) return new Float32Array(0);
    const x = new this.ort.Tensor('float32', rows, [nTokens, nEmbd]);
    const p = new this.ort.Tensor('float32', denseProbs(ids, probs, nTokens, nUsed, nExpert), [nTokens, nExpert]);
    const result = await this.session.run({ [EXPERT_FFN_INPUTS.rows]: x, [EXPERT_FFN_INPUTS.probs]: p });
    const y = result[EXPERT_FFN_OUTPUT];
    if (!y || !(y.data instanceof Float32Array) || y.data.length !== nTokens * nEmbd) {
      throw new Error(`${this.label}: onnxruntime returned no float32 [${nTokens} × ${nEmbd}] output`);
    }
    const out = y.data.slice();
    y.dispose?.();
    return out;
  }

  /** Releases the session. Idempotent. */
  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    const s = this.session;
    this.session = null;
    await s?.release();
  }
}
