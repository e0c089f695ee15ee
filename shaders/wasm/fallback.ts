/**
 * The expert FFN of one slice on our own WebAssembly SIMD kernel (shaders/wasm/assembly/), for machines where our
 * WebGPU kernels are unavailable or slower. Same slice, same compute() contract and the same validation errors
 * (ExpertRuntimeError codes) as ExpertRuntime and OrtExpertFallback; browser-safe (the caller hands in the compiled
 * kernel: `nodeExpertKernel()` of build.ts in Node, the bundler's copy in a page).
 *
 * Routed pairs only, from the quantized bytes as they are: the slice is copied once into the kernel's memory (its
 * memory is the slice's size plus a few row buffers, and per call a scratch bounded by `maxTokensPerPass`), and each
 * call decodes, per expert, one weight row at a time and meets it with every routed row of that expert.
 *
 * Numerics (computer.ts): 'exact' (default) dequantizes each weight row exactly (bit for bit as ggml) and sums f32
 * products. 'llama' computes as llama.cpp's CPU backend (x86 AVX2 build, coordinator/build.sh) does: activations
 * converted to each weight type's vec-dot type (Q4_1 and Q5_1: Q8_1, with its f16 s), then for every type it reads
 * (WASM_BIT_EXACT_TYPES = WASM_FALLBACK_TYPES) ggml's own dot products step for step (integer lanes, their fused
 * multiply-adds, its horizontal sums, swiglu with ggml_v_expf, the sums in k order): the coordinator's result bit for
 * bit.
 *
 * Variants (protocol/variant.ts, WASM_VARIANT_FEATURES): every activation (silu, swiglu_oai, swiglu_clamp, silu_limit,
 * gelu), each with or without expert biases and per-expert scales. Biases and scales are copied into the kernel's
 * memory with the slice; in 'llama' numerics each is applied in f32 where llama.cpp's graph applies it (gate and up
 * times their scale (ggml_mul), plus their bias (ggml_add_id), before the gated unit; down times its scale, plus its
 * bias, before the router weight), and the gated units are ggml's f32 steps (ggml-float.as): swiglu_oai and
 * swiglu_clamp with a correctly rounded expf, silu_limit with the SIMD silu of plain silu, gelu read from ggml's f16
 * table (ggml-gelu.ts ggmlGeluTable, copied into the kernel's memory when a gelu slice is loaded in 'llama' numerics).
 * 'exact' numerics compute each gated unit in f64, rounded once.
 *
 * @example
 *   const fb = await WasmExpertFallback.create(await nodeExpertKernel(), slice, { numerics: 'llama' });
 *   const out = await fb.compute(rows, ids, probs, nTokens, nUsed); // Float32Array [nTokens × nEmbd]
 *   await fb.dispose();
 */
import { GGMLType } from '../../gguf/quant-types.ts';
import { median, numericsOption, type ExpertComputer } from '../computer.ts';
import type { Numerics } from '../../protocol/numerics.ts';
import { ExpertRuntimeError } from '../errors.ts';
import { validateInputs, validateSlice, validateVariant, type ExpertSlice, type SupportedTypes } from '../slice.ts';
import { SILU_VARIANT, type ExpertActivation, type VariantFeature } from '../../protocol/variant.ts';
import { ggmlGeluTable } from '../reference/ggml-gelu.ts';

/** Every type the kernel decodes (weight-rows.as), in either numerics. */
export const WASM_FALLBACK_TYPES: SupportedTypes = {
  types: [
    GGMLType.F32,
    GGMLType.F16,
    GGMLType.BF16,
    GGMLType.Q8_0,
    GGMLType.Q4_0,
    GGMLType.Q4_1,
    GGMLType.Q5_0,
    GGMLType.Q5_1,
    GGMLType.Q2_K,
    GGMLType.Q3_K,
    GGMLType.Q4_K,
    GGMLType.Q5_K,
    GGMLType.Q6_K,
    GGMLType.MXFP4,
    GGMLType.IQ4_NL,
    GGMLType.IQ4_XS,
    GGMLType.IQ2_XXS,
    GGMLType.IQ2_XS,
    GGMLType.IQ3_XXS,
    GGMLType.IQ1_S,
    GGMLType.IQ1_M,
  ],
  cannot: 'the wasm fallback cannot read',
};

/** The expert FFN variants the kernel computes (protocol/variant.ts): every activation, with or without biases and scales. */
export const WASM_VARIANT_FEATURES: readonly VariantFeature[] = [
  'silu',
  'swiglu_oai',
  'swiglu_clamp',
  'silu_limit',
  'gelu',
  'bias',
  'scale',
];

/** configureVariant's activation numbers (kernel.as ACT_*). */
const ACTIVATION_CODE: Record<ExpertActivation, number> = { silu: 0, swiglu_oai: 1, swiglu_clamp: 2, silu_limit: 3, gelu: 4 };

/** ggml's f16 GELU table in the kernel's memory: one u16 per f16 input. */
const GELU_TABLE_BYTES = 2 * 65536;

/**
 * The weight types whose 'llama' numerics are ggml's own arithmetic here (bit for bit): since issue 26 every type in
 * WASM_FALLBACK_TYPES (a type added without its dot would get f32 sums of the dequantized weights, DOT_PLAIN).
 */
export const WASM_BIT_EXACT_TYPES: readonly GGMLType[] = [
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.Q2_K,
  GGMLType.Q3_K,
  GGMLType.Q4_K,
  GGMLType.Q5_K,
  GGMLType.Q6_K,
  GGMLType.MXFP4,
  GGMLType.IQ4_NL,
  GGMLType.IQ4_XS,
  GGMLType.IQ2_XXS,
  GGMLType.IQ2_XS,
  GGMLType.IQ3_XXS,
  GGMLType.IQ1_S,
  GGMLType.IQ1_M,
];

/** Tokens per kernel pass by default: bounds the per-call scratch (≈ 3 MiB at n_embd 2048, ff 768, top-8). */
export const DEFAULT_TOKENS_PER_PASS = 32;
/**
 * The top-k a pass is sized for: a pass holds at most maxTokensPerPass × PASS_TOP_K routed pairs, so a frame with a
 * larger top-k takes fewer tokens per pass and the scratch stays what the memory budget counted (kernelWasmBytesFor).
 */
export const PASS_TOP_K = 8;

const PAGE = 65536;
/** wasm32: 4 GiB of memory at most. */
const MAX_PAGES = 65536;

export interface WasmExpertFallbackOptions {
  /** 'exact' (default) or 'llama' (computer.ts). */
  numerics?: Numerics;
  /**
   * Tokens per kernel pass (default DEFAULT_TOKENS_PER_PASS; fewer where top-k > PASS_TOP_K): more reuse of each weight
   * row, more scratch.
   */
  maxTokensPerPass?: number;
  /** Name used in error messages. */
  label?: string;
  /**
   * Emulate ggml's fused multiply-adds in f64 even where the relaxed build's relaxed_madd fuses: what a machine whose
   * relaxed_madd does not fuse runs (the same bits). For tests and benchmarks; default false.
   */
  emulateFma?: boolean;
  /**
   * Whether the kernel loads the next weight row while it computes this one (kernel.as touchRow): true, false, or
   * 'measure' (default): a few 1-token calls of the slice with it on and off, alternating, and the faster kept — it
   * helps on some CPUs and costs on others (docs/kernels.md). The bits of every result are the same either way.
   */
  touchAhead?: boolean | 'measure';
}

/** What the touch-ahead measurement found (WasmExpertFallback.touch). */
export interface TouchChoice {
  on: boolean;
  /** Median ms of the measured 1-token calls with the touch on and off; null where it was set, not measured. */
  onMs: number | null;
  offMs: number | null;
}

/** Calls per setting when the touch-ahead is measured, alternating. */
const TOUCH_CALLS = 7;

/** What the kernel module exports (kernel.as). */
interface KernelExports {
  memory: WebAssembly.Memory;
  heapBase(): number;
  rowBufferBytes(n: number): number;
  configure(
    nEmbd: number,
    ff: number,
    nExpert: number,
    tGate: number,
    tUp: number,
    tDown: number,
    llama: number,
    gate: number,
    up: number,
    down: number,
    rowBuffers: number,
  ): void;
  /**
   * After configure: activation (ACTIVATION_CODE), α, limit, the biases' addresses (0s: none), the scales' address
   * (f32 gate [nExpert], up, down; 0: none) and the GELU table's (0: not read).
   */
  configureVariant(
    activation: number,
    alpha: number,
    limit: number,
    gateBias: number,
    upBias: number,
    downBias: number,
    scales: number,
    geluTable: number,
  ): void;
  callLayout(T: number, K: number, what: number): number;
  compute(T: number, K: number, scratch: number): void;
  /** Uses fused relaxed_madd for ggml's FMAs where it fuses and `allow` is 1; returns 1 if it does (kernel.as). */
  allowFusedMadd(allow: number): number;
  /** Turns the touch-ahead of weight rows on (1) or off (0). */
  setTouchAhead(on: number): void;
}

/** callLayout's parts (kernel.as L_*). */
const LAYOUT = { rows: 0, ids: 1, probs: 2, out: 3, end: 11 } as const;

const alignUp = (n: number, a: number): number => Math.ceil(n / a) * a;

export interface WasmFallbackMemory {
  /** The kernel's whole linear memory now. */
  wasmBytes: number;
  /** The slice's three matrices. */
  sliceBytes: number;
  /**
   * Where the per-call scratch starts: everything below is static data, the slice, its biases and scales, ggml's GELU
   * table (a gelu slice in 'llama' numerics: 128 KiB) and the row buffers.
   */
  loadedBytes: number;
}

export class WasmExpertFallback implements ExpertComputer {
  private kernel: KernelExports | null;
  private disposed = false;
  /**
   * Whether ggml's fused multiply-adds are computed with one relaxed_madd (relaxed-SIMD build, where it fuses: x86
   * with FMA3, ARM) rather than emulated in f64; the same bits either way.
   */
  readonly fusedMadd: boolean;
  /** Whether the kernel touches the next weight row ahead, and what the measurement behind that found. */
  touch: TouchChoice = { on: true, onMs: null, offMs: null };

  private constructor(
    kernel: KernelExports,
    readonly shape: { nEmbd: number; ff: number; nExpert: number },
    /** How this fallback rounds (the option, 'exact' by default). */
    readonly numerics: Numerics,
    private readonly scratch: number,
    private readonly sliceBytes: number,
    private readonly tokensPerPass: number,
    private readonly label: string,
    emulateFma: boolean,
  ) {
    this.kernel = kernel;
    this.fusedMadd = kernel.allowFusedMadd(emulateFma ? 0 : 1) === 1;
  }

  /**
   * Validates the slice and the options, instantiates the kernel and copies the slice (and its biases and scales) into
   * its memory. Throws ExpertRuntimeError: BAD_SHAPE / UNSUPPORTED_TYPE / BAD_SLICE_BYTES for a malformed slice,
   * UNSUPPORTED_VARIANT / BAD_SLICE_BIASES for a variant it does not compute or biases or scales that do not fit (the
   * code names them `gate scale` …), BAD_OPTION for an unknown `numerics` or a bad `maxTokensPerPass`, SLICE_TOO_LARGE
   * past wasm32's 4 GiB.
   */
  static async create(
    kernel: WebAssembly.Module,
    slice: ExpertSlice,
    options: WasmExpertFallbackOptions = {},
  ): Promise<WasmExpertFallback> {
    const numerics = numericsOption(options.numerics);
    const tokensPerPass = options.maxTokensPerPass ?? DEFAULT_TOKENS_PER_PASS;
    if (!Number.isSafeInteger(tokensPerPass) || tokensPerPass < 1 || tokensPerPass > 65536) {
      throw new ExpertRuntimeError(
        'BAD_OPTION',
        { option: 'maxTokensPerPass', value: tokensPerPass, requirement: 'an integer in [1, 65536]' },
        `maxTokensPerPass must be an integer in [1, 65536], got ${tokensPerPass}`,
      );
    }
    validateSlice(slice, slice, WASM_FALLBACK_TYPES);
    validateVariant(slice, WASM_VARIANT_FEATURES);
    validateScales(slice);
    const { nEmbd, ff, nExpert } = slice;
    const variant = slice.variant ?? SILU_VARIANT;
    const biases = variant.biases ? slice.biases : undefined;
    const scales = variant.scales ? slice.scales : undefined;
    const readsGeluTable = variant.activation === 'gelu' && numerics === 'llama';
    const instance = await WebAssembly.instantiate(kernel, {});
    const k = instance.exports as unknown as KernelExports;
    const gateAt = alignUp(k.heapBase(), 64);
    const upAt = alignUp(gateAt + slice.gate.length, 64);
    const downAt = alignUp(upAt + slice.up.length, 64);
    const biasAt = alignUp(downAt + slice.down.length, 64);
    const gateBiasAt = biasAt;
    const upBiasAt = gateBiasAt + 4 * nExpert * ff;
    const downBiasAt = upBiasAt + 4 * nExpert * ff;
    const scalesAt = biases ? alignUp(downBiasAt + 4 * nExpert * nEmbd, 64) : biasAt;
    const geluAt = scales ? alignUp(scalesAt + 3 * 4 * nExpert, 64) : scalesAt;
    const rowsAt = readsGeluTable ? geluAt + GELU_TABLE_BYTES : geluAt;
    const scratch = alignUp(rowsAt + 3 * k.rowBufferBytes(Math.max(nEmbd, ff)), 64);
    const sliceBytes = slice.gate.length + slice.up.length + slice.down.length;
    grow(k.memory, scratch, sliceBytes);
    const mem = new Uint8Array(k.memory.buffer);
    mem.set(slice.gate, gateAt);
    mem.set(slice.up, upAt);
    mem.set(slice.down, downAt);
    if (biases) {
      new Float32Array(k.memory.buffer, gateBiasAt, nExpert * ff).set(biases.gate);
      new Float32Array(k.memory.buffer, upBiasAt, nExpert * ff).set(biases.up);
      new Float32Array(k.memory.buffer, downBiasAt, nExpert * nEmbd).set(biases.down);
    }
    if (scales) {
      const at = (i: number): number => scalesAt + 4 * nExpert * i;
      new Float32Array(k.memory.buffer, at(0), nExpert).set(scales.gate);
      new Float32Array(k.memory.buffer, at(1), nExpert).set(scales.up);
      new Float32Array(k.memory.buffer, at(2), nExpert).set(scales.down);
    }
    if (readsGeluTable) new Uint16Array(k.memory.buffer, geluAt, 65536).set(ggmlGeluTable());
    const t = slice.types;
    k.configure(nEmbd, ff, nExpert, t.gate, t.up, t.down, numerics === 'llama' ? 1 : 0, gateAt, upAt, downAt, rowsAt);
    k.configureVariant(
      ACTIVATION_CODE[variant.activation],
      variant.alpha,
      variant.limit,
      biases ? gateBiasAt : 0,
      biases ? upBiasAt : 0,
      biases ? downBiasAt : 0,
      scales ? scalesAt : 0,
      readsGeluTable ? geluAt : 0,
    );
    const label = options.label ?? `wasm expert-slice ${nExpert}×[${nEmbd}↔${ff}]${numerics === 'llama' ? ' (llama numerics)' : ''}`;
    const fb = new WasmExpertFallback(
      k,
      { nEmbd, ff, nExpert },
      numerics,
      scratch,
      sliceBytes,
      tokensPerPass,
      label,
      options.emulateFma === true,
    );
    const touch = options.touchAhead ?? 'measure';
    if (touch === 'measure') await fb.measureTouch();
    else if (typeof touch === 'boolean') fb.setTouch({ on: touch, onMs: null, offMs: null });
    else {
      throw new ExpertRuntimeError(
        'BAD_OPTION',
        { option: 'touchAhead', value: Number.NaN, requirement: "true, false or 'measure'" },
        `touchAhead must be true, false or 'measure', got ${String(touch)}`,
      );
    }
    return fb;
  }

  private setTouch(choice: TouchChoice): void {
    this.kernel?.setTouchAhead(choice.on ? 1 : 0);
    this.touch = choice;
  }

  /**
   * Times 1-token calls (top-8 or the slice's width) with the touch-ahead on and off, alternating, each call on other
   * experts (rotating through the slice, as routed tokens do, so a large slice is read from memory as when serving),
   * and keeps the faster median; a tie keeps it on.
   */
  private async measureTouch(): Promise<void> {
    const { nEmbd, nExpert } = this.shape;
    const nUsed = Math.min(PASS_TOP_K, nExpert);
    const rows = new Float32Array(nEmbd).map((_, i) => Math.sin(i * 0.37) * 0.5);
    const probs = new Float32Array(nUsed).fill(1 / nUsed);
    const ids = new Int32Array(nUsed);
    const ms: Record<'on' | 'off', number[]> = { on: [], off: [] };
    let call = 0;
    // One round of warm-up each (V8 tiers the module up as it runs), then the measured rounds.
    for (let i = -1; i < TOUCH_CALLS; i++) {
      for (const setting of i % 2 === 0 ? (['on', 'off'] as const) : (['off', 'on'] as const)) {
        for (let k = 0; k < nUsed; k++) ids[k] = (call * nUsed + k) % nExpert;
        call++;
        this.kernel?.setTouchAhead(setting === 'on' ? 1 : 0);
        const t0 = performance.now();
        await this.compute(rows, ids, probs, 1, nUsed);
        if (i >= 0) ms[setting].push(performance.now() - t0);
      }
    }
    const onMs = median(ms.on);
    const offMs = median(ms.off);
    this.setTouch({ on: !(offMs < onMs), onMs, offMs });
  }

  /**
   * out[t] = Σ_k probs[t,k] · expert_{ids[t,k]}(rows[t]) for nTokens rows of nEmbd; returns [nTokens × nEmbd].
   * Only routed pairs are computed (a pair with prob 0 is neither computed nor added). Throws ExpertRuntimeError
   * (BAD_SHAPE, BAD_INPUT, ID_OUT_OF_RANGE, DISPOSED) like ExpertRuntime.compute.
   */
  async compute(rows: Float32Array, ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number): Promise<Float32Array> {
    const k = this.kernel;
    if (this.disposed || !k) throw new ExpertRuntimeError('DISPOSED', {}, `${this.label}: used after dispose()`);
    validateInputs(this.shape, { nTokens, nUsed }, { rows, ids, probs });
    const { nEmbd } = this.shape;
    const out = new Float32Array(nTokens * nEmbd);
    const s = this.scratch;
    const perPass = Math.max(1, Math.min(this.tokensPerPass, Math.floor((this.tokensPerPass * PASS_TOP_K) / nUsed)));
    for (let t0 = 0; t0 < nTokens; t0 += perPass) {
      const T = Math.min(perPass, nTokens - t0);
      grow(k.memory, s + k.callLayout(T, nUsed, LAYOUT.end), this.sliceBytes);
      const buf = k.memory.buffer;
      const at = (what: number): number => s + k.callLayout(T, nUsed, what);
      new Float32Array(buf, at(LAYOUT.rows), T * nEmbd).set(rows.subarray(t0 * nEmbd, (t0 + T) * nEmbd));
      new Int32Array(buf, at(LAYOUT.ids), T * nUsed).set(ids.subarray(t0 * nUsed, (t0 + T) * nUsed));
      new Float32Array(buf, at(LAYOUT.probs), T * nUsed).set(probs.subarray(t0 * nUsed, (t0 + T) * nUsed));
      k.compute(T, nUsed, s);
      out.set(new Float32Array(k.memory.buffer, at(LAYOUT.out), T * nEmbd), t0 * nEmbd);
    }
    return out;
  }

  /** The kernel's memory: all of it, the slice's part, and what was there before any call. */
  memory(): WasmFallbackMemory {
    return { wasmBytes: this.kernel?.memory.buffer.byteLength ?? 0, sliceBytes: this.sliceBytes, loadedBytes: this.scratch };
  }

  /** Bytes it holds: the kernel's whole linear memory (the slice, its scratch, the rest). */
  heldBytes(): number {
    return this.memory().wasmBytes;
  }

  /** Drops the kernel instance (its memory goes with it). Idempotent. */
  async dispose(): Promise<void> {
    this.disposed = true;
    this.kernel = null;
  }
}

/**
 * The slice's scales against its variant: nExpert floats per matrix when `variant.scales`, none otherwise;
 * BAD_SLICE_BIASES naming `gate scale`, `up scale` or `down scale` (validateVariant checks the biases).
 */
function validateScales(s: Pick<ExpertSlice, 'nExpert' | 'variant' | 'scales'>): void {
  const v = s.variant ?? SILU_VARIANT;
  for (const m of ['gate', 'up', 'down'] as const) {
    const got = s.scales?.[m].length ?? 0;
    const expected = v.scales ? s.nExpert : 0;
    if (got !== expected) {
      throw new ExpertRuntimeError(
        'BAD_SLICE_BIASES',
        { bias: `${m} scale`, expected, actual: got },
        `${m} scale: ${v.scales ? 'a variant with scales needs' : 'a variant without scales takes'} ${expected} values, got ${got}`,
      );
    }
  }
}

/** Grows the kernel's memory to hold `bytes`; SLICE_TOO_LARGE past wasm32's 4 GiB. */
function grow(memory: WebAssembly.Memory, bytes: number, sliceBytes: number): void {
  const pages = Math.ceil(bytes / PAGE);
  const have = memory.buffer.byteLength / PAGE;
  if (pages <= have) return;
  if (pages > MAX_PAGES) {
    throw new ExpertRuntimeError(
      'SLICE_TOO_LARGE',
      { bytes: sliceBytes, limit: MAX_PAGES * PAGE },
      `the wasm fallback needs ${bytes} bytes of memory (slice ${sliceBytes}); wasm32 allows ${MAX_PAGES * PAGE}`,
    );
  }
  memory.grow(pages - have);
}
