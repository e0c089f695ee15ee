/**
 * The expert FFN of one slice on onnxruntime (onnxruntime-web's wasm backend by default), for machines where our
 * WebGPU kernels are unavailable or slower (a software adapter, no WebGPU at all). Same slice, same compute()
 * contract and the same validation errors (ExpertRuntimeError codes) as ExpertRuntime.
 *
 * The weights are dequantized to float32 (gguf/dequantize.ts, bit-exact with ggml) and become initializers of an ONNX
 * graph built here (expert-ffn-graph.ts); the slice thus costs 4 bytes per weight in memory, and the graph runs every
 * expert of the slice on every row (the router probs are a dense [T × nExpert] input, zero where unrouted).
 *
 * Numerics (computer.ts): 'exact' (default) runs the whole FFN as one graph in float32. 'llama' rounds activations
 * as llama.cpp's CPU backend does before each product with quantized weights (roundActivations of
 * reference/ggml-activations.ts, bit-exact with ggml): the rows are rounded here for gate's and up's vec-dot types
 * (Q8_0 / Q8_K blocks, F16, BF16) and fed to an up graph that returns each expert's gate and up products; here
 * h = silu(g) ⊙ u is formed for the routed rows and rounded for down's vec-dot type, recomputing exactly the few values
 * whose rounding float32 error could change (llama-rounding.ts), and fed to a down graph (unrouted rows as 0: their
 * prob is 0). So the rounding decisions are the exact h's and the result differs from the reference with ggml's
 * rounding only at float-summation precision. This mode keeps a reference to the slice's gate and up bytes (for those
 * recomputations). A slice whose three vec-dot types are all F32 (F32 weights) rounds nothing and runs the one graph
 * in either mode.
 *
 * @example
 *   import * as ort from 'onnxruntime-web';
 *   ort.env.wasm.numThreads = 1;
 *   const fb = await OrtExpertFallback.create(ort, slice, { numerics: 'llama' }); // serving a llama.cpp CPU coordinator
 *   const out = await fb.compute(rows, ids, probs, nTokens, nUsed); // Float32Array [nTokens × nEmbd]
 *   await fb.dispose();
 *
 * The `ort` module is a parameter so the caller picks the build (onnxruntime-web, its /wasm or /webgpu entry, or
 * onnxruntime-node) and configures `ort.env` (threads, wasmPaths) before the first session.
 */
import { GGMLType, rowByteSize } from '../../gguf/quant-types.ts';
import { canDequantize, dequantize } from '../../gguf/dequantize.ts';
import { f16ToF32Table } from '../../gguf/half.ts';
import { numericsOption } from '../computer.ts';
import type { Numerics } from '../../protocol/numerics.ts';
import { ExpertRuntimeError } from '../errors.ts';
import { roundActivations, vecDotType } from '../reference/ggml-activations.ts';
import { silu } from '../reference/expert-ffn.ts';
import { validateInputs, validateSlice, validateVariant, type ExpertSlice, type SliceTypes, type SupportedTypes } from '../slice.ts';
import type { VariantFeature } from '../../protocol/variant.ts';
import {
  EXPERT_DOWN_INPUTS,
  EXPERT_FFN_INPUTS,
  EXPERT_FFN_OUTPUT,
  EXPERT_UP_INPUTS,
  buildExpertDownModel,
  buildExpertFfnModel,
  buildExpertUpModel,
  gateName,
  hiddenName,
  upName,
} from './expert-ffn-graph.ts';
import { dotErrorBound, hiddenWithin, roundWithin } from './llama-rounding.ts';

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
  /**
   * How to round (computer.ts): 'exact' (default), or 'llama' to round activations as llama.cpp's CPU backend does,
   * for a worker serving a llama.cpp CPU coordinator.
   */
  numerics?: Numerics;
}

/** Types the fallback reads: every type gguf/dequantize.ts decodes. */
export function fallbackQuantTypes(): GGMLType[] {
  return (Object.values(GGMLType).filter((v) => typeof v === 'number') as GGMLType[]).filter((t) => canDequantize(t));
}

/** The expert FFN variants the onnxruntime graph computes: SiLU-gated without biases (a biased or SwiGLU-OAI slice is refused). */
export const ORT_VARIANT_FEATURES: readonly VariantFeature[] = ['silu'];

/** The weight types the fallback reads, for validateSlice (slice.ts): the same checks as ExpertRuntime's otherwise. */
export const FALLBACK_TYPES: SupportedTypes = { types: fallbackQuantTypes(), cannot: 'the onnxruntime fallback cannot dequantize' };

/** The vec-dot type ggml's CPU backend rounds activations to for `t` weights, or undefined where none is known. */
function knownVecDotType(t: GGMLType): GGMLType | undefined {
  try {
    return vecDotType(t);
  } catch {
    return undefined;
  }
}

/** The weight types the fallback reads in 'llama' numerics: those it dequantizes whose activation rounding is known. */
export const LLAMA_FALLBACK_TYPES: SupportedTypes = {
  types: fallbackQuantTypes().filter((t) => knownVecDotType(t) !== undefined),
  cannot: 'the onnxruntime fallback (llama numerics) cannot round activations for',
};

/** The vec-dot types (what activations are rounded to) of a slice's three matrices. */
export function sliceVecDotTypes(types: SliceTypes): SliceTypes {
  return { gate: vecDotType(types.gate), up: vecDotType(types.up), down: vecDotType(types.down) };
}

/** One weight matrix of a slice as 'llama' numerics re-reads single rows of it (quantized bytes, row norms). */
interface WeightRows {
  type: GGMLType;
  bytes: Uint8Array;
  rowBytes: number;
  /** ‖row‖₂ of each of the nExpert × ff rows, for the float32 error bound. */
  norms: Float64Array;
}

function weightRows(type: GGMLType, bytes: Uint8Array, values: Float32Array, nRows: number, rowLength: number): WeightRows {
  return { type, bytes, rowBytes: rowByteSize(type, rowLength), norms: rowNorms(values, nRows, rowLength) };
}

/** ‖row‖₂ of each row of a [nRows × rowLength] array. */
function rowNorms(x: Float32Array, nRows: number, rowLength: number): Float64Array {
  const out = new Float64Array(nRows);
  for (let r = 0; r < nRows; r++) {
    let s = 0;
    for (let i = r * rowLength; i < (r + 1) * rowLength; i++) s += x[i]! * x[i]!;
    out[r] = Math.sqrt(s);
  }
  return out;
}

/**
 * The one session of 'exact' numerics, or the up and down sessions of 'llama' with the types to round to and the
 * gate and up rows to recompute from.
 */
type Graphs =
  | { kind: 'whole'; session: OrtSessionLike }
  | { kind: 'split'; up: OrtSessionLike; down: OrtSessionLike; round: SliceTypes; gate: WeightRows; upRows: WeightRows };

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
  private graphs: Graphs | null;
  private disposed = false;
  private refined = 0;

  private constructor(
    private readonly ort: OrtModuleLike,
    graphs: Graphs,
    readonly shape: { nEmbd: number; ff: number; nExpert: number },
    /** Bytes of the serialized ONNX model(s) (≈ 4 bytes per weight). */
    readonly modelBytes: number,
    readonly executionProviders: readonly string[],
    /** How this fallback rounds (the option, 'exact' by default). */
    readonly numerics: Numerics,
    private readonly label: string,
  ) {
    this.graphs = graphs;
  }

  /**
   * Validates the slice, dequantizes it, builds the model(s) and opens onnxruntime session(s) on them. Throws
   * ExpertRuntimeError (BAD_SHAPE / UNSUPPORTED_TYPE / BAD_SLICE_BYTES) for a malformed slice, BAD_OPTION for an
   * unknown `numerics`; onnxruntime's own errors (a missing execution provider, out of memory) propagate as they are.
   */
  static async create(ort: OrtModuleLike, slice: ExpertSlice, options: OrtExpertFallbackOptions = {}): Promise<OrtExpertFallback> {
    const numerics = numericsOption(options.numerics);
    validateSlice(slice, slice, numerics === 'llama' ? LLAMA_FALLBACK_TYPES : FALLBACK_TYPES);
    validateVariant(slice, ORT_VARIANT_FEATURES);
    const { nEmbd, ff, nExpert } = slice;
    const n = nExpert * nEmbd * ff;
    const gate = dequantize(slice.types.gate, slice.gate, n);
    const up = dequantize(slice.types.up, slice.up, n);
    const down = dequantize(slice.types.down, slice.down, n);
    const executionProviders = options.executionProviders ?? ['wasm'];
    const sessionOptions: { executionProviders: string[]; graphOptimizationLevel?: 'disabled' | 'basic' | 'extended' | 'all' } = {
      executionProviders,
    };
    if (options.graphOptimizationLevel) sessionOptions.graphOptimizationLevel = options.graphOptimizationLevel;
    let modelBytes = 0;
    const open = async (model: Uint8Array): Promise<OrtSessionLike> => {
      modelBytes += model.length;
      return ort.InferenceSession.create(model, sessionOptions);
    };
    const round = numerics === 'llama' ? sliceVecDotTypes(slice.types) : undefined;
    let graphs: Graphs;
    if (!round || (round.gate === GGMLType.F32 && round.up === GGMLType.F32 && round.down === GGMLType.F32)) {
      graphs = { kind: 'whole', session: await open(buildExpertFfnModel({ nEmbd, ff, nExpert, gate, up, down })) };
    } else {
      const upSession = await open(buildExpertUpModel({ nEmbd, ff, nExpert, gate, up }));
      let downSession: OrtSessionLike;
      try {
        downSession = await open(buildExpertDownModel({ nEmbd, ff, nExpert, down }));
      } catch (e) {
        await upSession.release();
        throw e;
      }
      graphs = {
        kind: 'split',
        up: upSession,
        down: downSession,
        round,
        gate: weightRows(slice.types.gate, slice.gate, gate, nExpert * ff, nEmbd),
        upRows: weightRows(slice.types.up, slice.up, up, nExpert * ff, nEmbd),
      };
    }
    const label =
      options.label ??
      `ort expert-slice ${nExpert}×[${nEmbd}↔${ff}] (${executionProviders.join(',')}${numerics === 'llama' ? ', llama numerics' : ''})`;
    return new OrtExpertFallback(ort, graphs, { nEmbd, ff, nExpert }, modelBytes, executionProviders, numerics, label);
  }

  /**
   * out[t] = Σ_k probs[t,k] · expert_{ids[t,k]}(rows[t]) for nTokens rows of nEmbd; returns [nTokens × nEmbd].
   * Throws ExpertRuntimeError (BAD_SHAPE, BAD_INPUT, ID_OUT_OF_RANGE, DISPOSED) like ExpertRuntime.compute.
   */
  async compute(rows: Float32Array, ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number): Promise<Float32Array> {
    const graphs = this.graphs;
    if (this.disposed || !graphs) throw new ExpertRuntimeError('DISPOSED', {}, `${this.label}: used after dispose()`);
    const { nEmbd, nExpert } = this.shape;
    validateInputs(this.shape, { nTokens, nUsed }, { rows, ids, probs });
    if (nTokens === 0) return new Float32Array(0);
    const p = new this.ort.Tensor('float32', denseProbs(ids, probs, nTokens, nUsed, nExpert), [nTokens, nExpert]);
    let result: Record<string, OrtTensorLike | undefined>;
    if (graphs.kind === 'whole') {
      const x = new this.ort.Tensor('float32', rows, [nTokens, nEmbd]);
      result = await graphs.session.run({ [EXPERT_FFN_INPUTS.rows]: x, [EXPERT_FFN_INPUTS.probs]: p });
    } else {
      const hidden = await this.hidden(graphs, rows, ids, nTokens, nUsed);
      result = await graphs.down.run({ ...hidden, [EXPERT_DOWN_INPUTS.probs]: p });
    }
    const y = floatOutput(result, EXPERT_FFN_OUTPUT, nTokens * nEmbd, this.label);
    const out = y.data.slice();
    y.dispose?.();
    return out;
  }

  /**
   * 'llama' numerics, first half: rows rounded for gate's and up's vec-dot types → the up graph → g and u of each
   * expert → h = silu(g) ⊙ u of the routed rows, rounded for down's vec-dot type as the exact h rounds (the few values
   * float32 error leaves open are recomputed in float64, llama-rounding.ts); unrouted rows stay 0 (their prob is 0).
   * Returns the down graph's hidden feeds.
   */
  private async hidden(
    graphs: Extract<Graphs, { kind: 'split' }>,
    rows: Float32Array,
    ids: Int32Array,
    nTokens: number,
    nUsed: number,
  ): Promise<Record<string, OrtTensorLike>> {
    const { nEmbd, ff, nExpert } = this.shape;
    const { round, gate, upRows } = graphs;
    // Rows are whole blocks of every vec-dot type (validateSlice: whole weight blocks, each a multiple of its
    // vec-dot block), so rounding all rows at once rounds each row as ggml does.
    const xg = roundActivations(round.gate, rows);
    const xu = round.up === round.gate ? xg : roundActivations(round.up, rows);
    const xgNorm = rowNorms(xg, nTokens, nEmbd);
    const xuNorm = xu === xg ? xgNorm : rowNorms(xu, nTokens, nEmbd);
    const dims = [nTokens, nEmbd];
    const result = await graphs.up.run({
      [EXPERT_UP_INPUTS.gateRows]: new this.ort.Tensor('float32', xg, dims),
      [EXPERT_UP_INPUTS.upRows]: new this.ort.Tensor('float32', xu, dims),
    });
    const routed = new Uint8Array(nTokens * nExpert);
    for (let t = 0; t < nTokens; t++) for (let k = 0; k < nUsed; k++) routed[t * nExpert + ids[t * nUsed + k]!] = 1;
    /** The reference's h for row r of expert e and token t: float64 dots of the dequantized rows, in order. */
    const row = new Float32Array(nEmbd);
    const exactHidden = (e: number, t: number, r: number): number =>
      Math.fround(silu(exactDot(gate, e * ff + r, xg, t * nEmbd, nEmbd, row)) * exactDot(upRows, e * ff + r, xu, t * nEmbd, nEmbd, row));
    const feeds: Record<string, OrtTensorLike> = {};
    const h = new Float32Array(ff);
    const bound = new Float64Array(ff);
    for (let e = 0; e < nExpert; e++) {
      const g = floatOutput(result, gateName(e), nTokens * ff, this.label);
      const u = floatOutput(result, upName(e), nTokens * ff, this.label);
      const hq = new Float32Array(nTokens * ff);
      for (let t = 0; t < nTokens; t++) {
        if (!routed[t * nExpert + e]) continue;
        const xgn = xgNorm[t]!;
        const xun = xuNorm[t]!;
        hiddenWithin(
          g.data,
          u.data,
          t * ff,
          (r) => dotErrorBound(gate.norms[e * ff + r]!, xgn, nEmbd),
          (r) => dotErrorBound(upRows.norms[e * ff + r]!, xun, nEmbd),
          h,
          bound,
        );
        const rounded = roundWithin(round.down, h, bound, (r) => exactHidden(e, t, r));
        this.refined += rounded.refined;
        hq.set(rounded.values, t * ff);
      }
      g.dispose?.();
      u.dispose?.();
      feeds[hiddenName(e)] = new this.ort.Tensor('float32', hq, [nTokens, ff]);
    }
    return feeds;
  }

  /**
   * 'llama' numerics: how many hidden values so far were recomputed in float64 because float32 error left their
   * rounding open (llama-rounding.ts); 0 in 'exact'.
   */
  get refinedValues(): number {
    return this.refined;
  }

  /** Releases the session(s). Idempotent. */
  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    const g = this.graphs;
    this.graphs = null;
    if (g?.kind === 'whole') await g.session.release();
    else if (g) await Promise.all([g.up.release(), g.down.release()]);
  }
}

/**
 * Σ w[row][i] · x[xOffset + i] over n values in float64, in index order (the reference's sum; the products of two
 * float32 values are exact in float64). `scratch` holds n dequantized values.
 */
function exactDot(w: WeightRows, rowIndex: number, x: Float32Array, xOffset: number, n: number, scratch: Float32Array): number {
  const o = rowIndex * w.rowBytes;
  const b = w.bytes;
  let sum = 0;
  if (w.type === GGMLType.F16) {
    // F16 weights are the ones recomputed most (f16 rounding steps are relative): read them in place.
    const f16 = f16ToF32Table();
    for (let i = 0, p = o; i < n; i++, p += 2) sum += f16[b[p]! | (b[p + 1]! << 8)]! * x[xOffset + i]!;
    return sum;
  }
  dequantize(w.type, b.subarray(o, o + w.rowBytes), n, scratch);
  for (let i = 0; i < n; i++) sum += scratch[i]! * x[xOffset + i]!;
  return sum;
}

/** A float32 output of `n` values, or an error naming it. */
function floatOutput(
  result: Record<string, OrtTensorLike | undefined>,
  name: string,
  n: number,
  label: string,
): OrtTensorLike & { data: Float32Array } {
  const t = result[name];
  if (!t || !(t.data instanceof Float32Array) || t.data.length !== n) {
    throw new Error(`${label}: onnxruntime returned no float32 output ${name} of ${n} values`);
  }
  return t as OrtTensorLike & { data: Float32Array };
}
