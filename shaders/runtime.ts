/**
 * One MoE layer's slice of experts on one GPU device, computed from the GGUF quantized bytes as they are (no
 * dequantized copy): for each token t, out[t] = Σ_k probs[t,k] · down_e(silu(gate_e · x_t) ⊙ (up_e · x_t)), or the
 * slice's expert FFN variant (protocol/variant.ts: swiglu_oai, swiglu_clamp, silu_limit or gelu, with expert biases
 * and per-expert scales, the down product's applied before the router weight), which the up and down pipelines are
 * built for (override constants, wgsl/ffn_variant.wgsl; biases, scales and, for gelu in llama numerics, ggml's f16 GELU
 * table in one buffer per slice). WGSL_VARIANT_FEATURES lists the variants computed.
 *
 * @example
 *   const rt = await ExpertRuntime.create(device, { nEmbd, ff, nExpert, types: { gate, up, down }, gate: g, up: u, down: d });
 *   const out = await rt.compute(rows, ids, probs, nTokens, nUsed); // Float32Array [nTokens × nEmbd]
 *   rt.dispose();
 *
 * Each call runs in the decode regime (one matrix–vector product per (token, expert) pair) or the batched regime
 * (pairs grouped by expert, matrix–matrix products over tiles of pairs), as chooseRegime (regime-policy.ts) picks
 * from the routing; `compute(…, { regime })` forces one. Both give the same result up to f32 summation order.
 *
 * Numerics (options.numerics): 'exact' (default) computes the float math on the dequantized weights; 'llama' first
 * rounds the activations as llama.cpp's CPU backend does for each weight type (the rows before gate/up, h before
 * down; round_activations.wgsl), so the result agrees with a llama.cpp CPU coordinator's to float-summation
 * precision. In the decode regime the 8-bit activations meet the quantized weights in integer dot products
 * (dot4I8Packed where WGSL has it; options.integerDot, capabilities().integerDot) that follow ggml's x86 vec_dot lane
 * by lane, down to its fused multiply-adds and swiglu: for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K weights the result is the
 * coordinator's bit for bit.
 *
 * Weights live in GPU buffers by expert ranges ("parts", weight-parts.ts) so a slice larger than one storage binding
 * still loads; the decode kernels use subgroup reductions and the batched kernels f16 tiles where the device has those
 * features (options.features, capabilities().kernelFeatures); after a device loss the runtime can rebuild itself on a
 * new device (options.recovery). The whole picture: docs/kernels.md.
 *
 * This file is the API and the recovery; what lives on one device is device-state.ts, the pure plan of one call
 * call-plan.ts, and carrying a plan out on the device call-run.ts.
 */
import { readExpertSliceBytes, type ExpertMatrix } from '../gguf/expert-slice.ts';
import { typeName } from '../gguf/quant-types.ts';
import type { BufferPoolStats } from './buffer-pool.ts';
import { bindingLimit, callRounding, planCall, type PlannedCall } from './call-plan.ts';
import { numericsOption } from './computer.ts';
import type { Numerics } from '../protocol/numerics.ts';
import { runPlan, type CallCounts, type CallInputs, type CallResult } from './call-run.ts';
import {
  batchedPipelines,
  bytesState,
  lostError,
  releaseState,
  sliceError,
  streamState,
  weightBytes,
  type GpuState,
  type Settings,
} from './device-state.ts';
import { ExpertRuntimeError } from './errors.ts';
import { expertCounts, usedExperts } from './expert-groups.ts';
import {
  DEFAULT_REGIME_POLICY,
  batchedSupported,
  chooseRegime,
  type Regime,
  type RegimeDecision,
  type RegimeRequest,
  type RegimePolicy,
} from './regime-policy.ts';
import { KERNEL_TYPES, WGSL_VARIANT_FEATURES, type IntegerDot, type KernelFeature, type KernelTuning } from './expert-ffn.ts';
import {
  validateInputs,
  validateSlice,
  validateVariant,
  type ExpertSlice,
  type SliceScales,
  type SliceShape,
  type SliceStreamSource,
} from './slice.ts';
import { describeVariant, SILU_VARIANT, type ExpertVariant, type VariantFeature } from '../protocol/variant.ts';

export { ExpertRuntimeError } from './errors.ts';
export {
  chooseRegime,
  DEFAULT_REGIME_POLICY,
  type Regime,
  type RegimeDecision,
  type RegimePolicy,
  type RegimeRequest,
} from './regime-policy.ts';
export type { CallCounts } from './call-run.ts';
export type { IntegerDot, KernelFeature } from './expert-ffn.ts';
export { WGSL_VARIANT_FEATURES } from './expert-ffn.ts';
export type { ExpertSlice, SliceStreamSource } from './slice.ts';

export interface ExpertRuntimeOptions {
  /** Threads per workgroup (power of two, default 64). */
  workgroupSize?: number;
  /** Weight rows per workgroup in the decode kernels (power of two ≤ workgroupSize, default 4). */
  rowsPerWorkgroup?: number;
  /** Batched regime: pairs of one expert per tile (default 16; a multiple of workgroupSize / tileCols). */
  tileRows?: number;
  /** Batched regime: weight rows per workgroup (power of two dividing workgroupSize, default 32). */
  tileCols?: number;
  /** When compute() picks the batched regime by itself (default DEFAULT_REGIME_POLICY). */
  regimePolicy?: RegimePolicy;
  /** Caps workgroups per dispatch dimension below the device limit (tests use it to exercise 2-D folding). */
  maxWorkgroupsPerDimension?: number;
  /**
   * Caps the bytes of one weight binding below the device's limits, so a slice is split into more parts (WebGPU
   * gives no device a lower maxStorageBufferBindingSize than its default, so tests of splitting lower it here).
   */
  maxBindingBytes?: number;
  /**
   * Refuses (SLICE_TOO_LARGE) a slice whose weights exceed this many bytes before allocating anything: the memory a
   * volunteer agreed to give, and a guard against a stream header declaring a huge slice.
   */
  maxWeightBytes?: number;
  /**
   * Optional features the kernels use: 'auto' (default) takes 'subgroups' (decode kernels) where the device has it
   * and the layout probe passes, and 'shader-f16' (batched kernels) where the device has it; a list asks for exactly
   * those ([] = base kernels only) and throws FEATURE_UNAVAILABLE for one the device cannot run.
   * Create the device with the adapter's 'subgroups' and 'shader-f16' features for them to count.
   */
  features?: 'auto' | readonly KernelFeature[];
  /**
   * How activations are rounded: 'exact' (default; float math on the dequantized weights, for a coordinator whose
   * numerics are unknown) or 'llama' (as llama.cpp's CPU backend rounds them for each weight type, so the result
   * agrees with a llama.cpp CPU coordinator's own to float-summation precision). See docs/kernels.md.
   */
  numerics?: Numerics;
  /**
   * llama numerics, decode regime: how 8-bit activations meet the weights. 'packed': int8 kernels with WGSL's
   * dot4I8Packed (the packed_4x8_integer_dot_product language feature; FEATURE_UNAVAILABLE where it is missing);
   * 'unpacked': the same kernels multiplying sign-extended bytes in i32; 'float': the rounded values through the float
   * kernels. 'auto' (default): 'packed' where the feature is, else 'unpacked'. 'packed' and 'unpacked' compute as the
   * coordinator's CPU does, bit for bit; 'float' agrees to f32 summation order (docs/numerics.md).
   */
  integerDot?: 'auto' | IntegerDot;
  /**
   * Rebuilding after the device is lost: a new device is requested, the pipelines rebuilt and the weights uploaded
   * again (from the same bytes, or by reopening the stream); calls wait for it and a call cut off by the loss is run
   * again once. Without this option a lost device makes every later call fail with DEVICE_LOST.
   */
  recovery?: {
    requestDevice(): Promise<GPUDevice>;
    /** Devices tried before giving up (default 3); a new device lost again before serving a call counts too. */
    attempts?: number;
    /** Longest one attempt (device, pipelines, weights) may take (default 60 s). */
    attemptTimeoutMs?: number;
  };
  /** Reports device loss and recovery. */
  onEvent?: (event: RuntimeEvent) => void;
  /** Prefix of every GPU object's label. */
  label?: string;
}

export type RuntimeEvent =
  | { type: 'device-lost'; reason: string; message: string }
  | { type: 'recovered'; attempt: number; ms: number }
  | { type: 'recovery-failed'; attempts: number; message: string };

/** What the hub needs to know to place work on this runtime. */
export interface ExpertRuntimeCapabilities {
  backend: 'webgpu';
  adapter: { vendor: string; architecture: string; device: string; description: string };
  limits: {
    maxStorageBufferBindingSize: number;
    maxBufferSize: number;
    maxComputeWorkgroupsPerDimension: number;
    maxComputeInvocationsPerWorkgroup: number;
    maxComputeWorkgroupStorageSize: number;
  };
  /** Device features, sorted. */
  features: string[];
  /** Weight types the kernels read. */
  quantTypes: string[];
  /** The optional features the kernels use (sorted), and why each is used or not (e.g. the subgroup probe's verdict). */
  kernelFeatures: KernelFeature[];
  kernelFeaturesReason: string;
  /** How activations are rounded (the numerics option). */
  numerics: Numerics;
  /** llama numerics: how the decode regime's 8-bit dot products run (null in exact numerics), and why. */
  integerDot: IntegerDot | null;
  integerDotReason: string;
  /** Whether the device has 'timestamp-query', so compute(…, { onTiming }) reports kernel times. */
  timestampQuery: boolean;
  /** Bytes one weight binding may hold here, and the parts the slice's matrices are split into. */
  maxBindingBytes: number;
  weightParts: number;
  /** The expert FFN variants the kernels compute (protocol/variant.ts: a worker lists these in its hello). */
  variants: VariantFeature[];
  /** `variant`: the slice's, as describeVariant writes it ("silu", "swiglu_oai(α 1.702, limit 7) + biases"). */
  slice: { nEmbd: number; ff: number; nExpert: number; types: Record<ExpertMatrix, string>; weightBytes: number; variant: string };
}

export interface ExpertRuntimeMemory {
  /** Bytes of the weight buffers (0 after dispose). */
  weightBytes: number;
  weightBuffers: number;
  pool: BufferPoolStats;
}

export interface ComputeOptions {
  /** 'auto' (default): the runtime's regime policy decides from the routing; otherwise that regime. */
  regime?: RegimeRequest;
  /**
   * Asks for the call's kernel time: where the device was created with 'timestamp-query'
   * (capabilities().timestampQuery), the GPU writes a timestamp at the start and the end of the call's compute pass and
   * this is called with their difference before compute() resolves — the kernels' time apart from upload, submit and
   * readback. Not called where the device lacks the feature. Without it a call records no timestamps.
   */
  onTiming?: (timing: KernelTiming) => void;
  /** Called after every call that ran on the GPU with what it asked of it: dispatches, submits, readbacks. */
  onCounts?: (counts: CallCounts) => void;
}

/** The GPU time of one call's compute pass (every dispatch of the call: roundings, up, down, combine). */
export interface KernelTiming {
  kernelMs: number;
}

/** Longest wait, after a failed call, for the device's lost promise to tell whether the loss caused it. */
const LOST_SETTLE_MS = 250;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** `p`, or a rejection with `message` after `ms`. */
function withTimeout<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message)), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

export class ExpertRuntime {
  private state: GpuState;
  private disposed = false;
  /** Set when the device was lost and is not coming back. */
  private failed: { reason: string; message: string } | null = null;
  private recovering: Promise<void> | null = null;
  /** Recovery attempts since the last call that a device served. */
  private attemptsUsed = 0;
  /** Resolves on dispose(), so calls waiting for a recovery return (with DISPOSED) at once. */
  private readonly disposedSignal: Promise<void>;
  private signalDisposed!: () => void;

  private constructor(
    private readonly shape: SliceShape,
    private readonly settings: Settings,
    private readonly options: ExpertRuntimeOptions,
    /** Where the weights come from again when the runtime rebuilds on a new device. */
    private readonly source: { bytes: ExpertSlice } | { stream: SliceStreamSource },
    state: GpuState,
  ) {
    this.state = state;
    this.disposedSignal = new Promise((r) => (this.signalDisposed = r));
    this.watch(state);
  }

  /**
   * Validates the slice, builds the pipelines its types need and uploads the quantized bytes, split into parts
   * where a matrix exceeds one binding. Keeps a reference to the slice's arrays to upload them again after a device
   * loss (with `recovery`). Throws ExpertRuntimeError: BAD_SHAPE / UNSUPPORTED_TYPE / BAD_SLICE_BYTES for a
   * malformed slice, UNSUPPORTED_VARIANT / BAD_SLICE_BIASES for a variant the kernels do not compute or biases that
   * do not fit it, BINDING_TOO_LARGE when not even one expert fits a binding, BAD_OPTION, FEATURE_UNAVAILABLE.
   *
   * Create the device with the adapter's limits (`requiredLimits: { maxStorageBufferBindingSize: adapter.limits…,
   * maxBufferSize: … }`) and its 'subgroups' feature where it has one: a device gets only the defaults otherwise.
   */
  static async create(device: GPUDevice, slice: ExpertSlice, options: ExpertRuntimeOptions = {}): Promise<ExpertRuntime> {
    const shape: SliceShape = { nEmbd: slice.nEmbd, ff: slice.ff, nExpert: slice.nExpert, types: { ...slice.types } };
    validateSlice(shape, slice, KERNEL_TYPES);
    validateVariant(slice, WGSL_VARIANT_FEATURES);
    const settings = makeSettings(shape, options, slice.variant ?? SILU_VARIANT);
    const state = await bytesState(device, false, slice, shape, settings);
    return new ExpertRuntime(shape, settings, options, { bytes: slice }, state);
  }

  /**
   * Streams a mini-GGUF expert slice (as the hub's /api/expert-shard serves it) into GPU buffers: only the header
   * and a few bytes per matrix are held in memory. Errors as create(), plus BAD_SLICE_STREAM for a stream that is not
   * a valid expert slice. The header's variant is built into the pipelines as create() builds a slice's; a biased
   * variant's biases, which follow the matrices, are uploaded before this resolves (a stream that ends before them:
   * BAD_SLICE_STREAM, cause GGUF_TRUNCATED).
   */
  static async load(device: GPUDevice, source: SliceStreamSource, options: ExpertRuntimeOptions = {}): Promise<ExpertRuntime> {
    let settings: Settings | null = null;
    const { shape, state } = await streamState(
      device,
      false,
      source,
      null,
      (shape, variant) => (settings = makeSettings(shape, options, variant)),
    );
    return new ExpertRuntime(shape, settings!, options, { stream: source }, state);
  }

  /**
   * A whole mini-GGUF expert slice already in memory (an ArrayBuffer from fetch()): parsed, then as create() on its
   * tensors' bytes (views, no copy). BAD_SLICE_STREAM for bytes that are not an expert slice.
   */
  static async fromGGUF(device: GPUDevice, bytes: Uint8Array | ArrayBuffer, options: ExpertRuntimeOptions = {}): Promise<ExpertRuntime> {
    let parsed: Awaited<ReturnType<typeof readExpertSliceBytes>>;
    try {
      parsed = await readExpertSliceBytes(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes));
    } catch (e) {
      throw sliceError(e);
    }
    const { info, gate, up, down, biases } = parsed;
    // The file's variant, biases and scales (gguf/expert-slice.ts, issue 25), so a gpt-oss slice computes as one, or
    // is refused (BAD_SLICE_BIASES), and never silently as silu.
    const { variant } = info;
    const { scales } = parsed as { scales?: SliceScales };
    return ExpertRuntime.create(
      device,
      {
        nEmbd: info.nEmbd,
        ff: info.ff,
        nExpert: info.expertEnd - info.expertBegin,
        types: { ...info.types },
        gate,
        up,
        down,
        ...(variant && { variant }),
        ...(biases && { biases }),
        ...(scales && { scales }),
      },
      options,
    );
  }

  /** The regime compute() would use for these ids under this runtime's policy (validated as by compute()). */
  planRegime(ids: Int32Array, nTokens: number, nUsed: number): RegimeDecision {
    // Only the ids matter here; rows and probs are stand-ins of the right length.
    validateInputs(
      this.shape,
      { nTokens, nUsed },
      { rows: { length: nTokens * this.shape.nEmbd }, ids, probs: { length: nTokens * nUsed } },
    );
    return this.decide(expertCounts(ids, this.shape.nExpert), nTokens * nUsed);
  }

  /**
   * out[t] = Σ_k probs[t,k] · expert_{ids[t,k]}(rows[t]) for nTokens rows of nEmbd; returns [nTokens × nEmbd].
   * ids are local expert indices within the slice. Throws ExpertRuntimeError (BAD_INPUT, ID_OUT_OF_RANGE,
   * BATCH_TOO_LARGE, REGIME_UNAVAILABLE, GPU_ERROR, DEVICE_LOST, DISPOSED).
   */
  async compute(
    rows: Float32Array,
    ids: Int32Array,
    probs: Float32Array,
    nTokens: number,
    nUsed: number,
    options: ComputeOptions = {},
  ): Promise<Float32Array> {
    this.assertUsable();
    validateInputs(this.shape, { nTokens, nUsed }, { rows, ids, probs });
    const request = options.regime ?? 'auto';
    const counts = expertCounts(ids, this.shape.nExpert);
    const regime = this.resolveRegime(request, counts, nTokens * nUsed);
    if (nTokens === 0) return new Float32Array(0);
    for (let attempt = 0; ; attempt++) {
      if (this.recovering) await Promise.race([this.recovering, this.disposedSignal]);
      this.assertUsable();
      const state = this.state;
      try {
        const {
          out,
          kernelNs,
          counts: asked,
        } = await this.run(state, { rows, ids, probs, nTokens, nUsed, counts, regime }, options.onTiming !== undefined);
        this.attemptsUsed = 0;
        if (kernelNs !== null) options.onTiming?.({ kernelMs: kernelNs / 1e6 });
        options.onCounts?.(asked);
        return out;
      } catch (e) {
        // A call cut off by a device loss runs once more on the rebuilt device. Refusals of the call itself
        // (BATCH_TOO_LARGE, DISPATCH_TOO_LARGE…) are not losses and are not waited on.
        const gpuFailure = !(e instanceof ExpertRuntimeError) || e.code === 'GPU_ERROR' || e.code === 'DEVICE_LOST';
        if (attempt === 0 && gpuFailure && this.options.recovery && !this.disposed && (await lostSoon(state))) continue;
        throw e;
      }
    }
  }

  /** How this runtime rounds activations (the numerics option). */
  get numerics(): Numerics {
    return this.settings.numerics;
  }

  capabilities(): ExpertRuntimeCapabilities {
    const st = this.state;
    const l = st.device.limits;
    const info = st.device.adapterInfo as Partial<GPUAdapterInfo> | undefined;
    return {
      backend: 'webgpu',
      adapter: {
        vendor: info?.vendor ?? '',
        architecture: info?.architecture ?? '',
        device: info?.device ?? '',
        description: info?.description ?? '',
      },
      limits: {
        maxStorageBufferBindingSize: l.maxStorageBufferBindingSize,
        maxBufferSize: l.maxBufferSize,
        maxComputeWorkgroupsPerDimension: l.maxComputeWorkgroupsPerDimension,
        maxComputeInvocationsPerWorkgroup: l.maxComputeInvocationsPerWorkgroup,
        maxComputeWorkgroupStorageSize: l.maxComputeWorkgroupStorageSize,
      },
      features: [...st.device.features].sort(),
      quantTypes: KERNEL_TYPES.types.map(typeName),
      kernelFeatures: [...st.features],
      kernelFeaturesReason: st.featuresReason,
      numerics: this.settings.numerics,
      integerDot: this.settings.numerics === 'exact' ? null : st.integerDot,
      integerDotReason: st.integerDotReason,
      timestampQuery: st.device.features.has('timestamp-query'),
      variants: [...WGSL_VARIANT_FEATURES],
      maxBindingBytes: bindingLimit(l, this.settings.maxBindingBytes).limit,
      weightParts: st.parts.length,
      slice: {
        nEmbd: this.shape.nEmbd,
        ff: this.shape.ff,
        nExpert: this.shape.nExpert,
        types: { gate: typeName(this.shape.types.gate), up: typeName(this.shape.types.up), down: typeName(this.shape.types.down) },
        weightBytes: weightBytes(st.parts),
        variant: describeVariant(this.settings.variant),
      },
    };
  }

  memory(): ExpertRuntimeMemory {
    const parts = this.disposed ? [] : this.state.parts;
    return { weightBytes: weightBytes(parts), weightBuffers: parts.length * 3, pool: this.state.pool.stats() };
  }

  /**
   * GPU bytes it holds between calls: the weight parts, the biases buffer and the pool's kept scratch (a call's own
   * buffers go back to the pool when it ends). 0 after dispose.
   */
  heldBytes(): number {
    if (this.disposed) return 0;
    const st = this.state;
    return weightBytes(st.parts) + st.biases.size + st.pool.stats().freeBytes;
  }

  /**
   * Destroys the weight buffers and pooled buffers (buffers of calls still in flight go when those finish), and the
   * devices the runtime requested itself. Idempotent.
   */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.signalDisposed();
    releaseState(this.state);
  }

  private async run(st: GpuState, c: Call, timed: boolean): Promise<CallResult> {
    // Sizes and dispatches before any GPU work, so BATCH_TOO_LARGE or DISPATCH_TOO_LARGE leaves nothing behind.
    const rounding = callRounding(this.shape.types, this.settings.numerics, c.regime, st.integerDot);
    const plan = planCall(
      this.shape,
      { ...c, rounding },
      this.settings.tuning,
      st.parts.map((p) => [p.begin, p.end] as const),
      {
        binding: bindingLimit(st.device.limits),
        maxPerDimension: st.maxPerDimension,
        uniformAlignment: st.device.limits.minUniformBufferOffsetAlignment,
      },
    );
    const pipelines = plan.groups ? await batchedPipelines(st, this.shape.types, this.settings) : st.decode;
    this.assertUsable(); // the pipelines may have been built while the runtime was disposed
    return runPlan(st, pipelines, plan, c, this.settings.label, timed);
  }

  private decide(counts: Uint32Array, nPairs: number): RegimeDecision {
    const { nEmbd, ff } = this.shape;
    return chooseRegime({ nPairs, usedExperts: usedExperts(counts), nEmbd, ff }, this.settings.policy);
  }

  private resolveRegime(request: RegimeRequest, counts: Uint32Array, nPairs: number): Regime {
    switch (request) {
      case 'auto':
        return this.decide(counts, nPairs).regime;
      case 'decode':
        return 'decode';
      case 'batched':
        if (!batchedSupported(this.shape)) {
          throw new ExpertRuntimeError(
            'REGIME_UNAVAILABLE',
            { regime: request, reason: 'rows-not-quads' },
            `${this.settings.label}: the batched regime reads weights four elements at a time; nEmbd = ${this.shape.nEmbd} and ` +
              `ff = ${this.shape.ff} must both be multiples of 4 (use 'decode' or 'auto')`,
          );
        }
        return 'batched';
      default:
        throw new ExpertRuntimeError(
          'REGIME_UNAVAILABLE',
          { regime: String(request), reason: 'unknown' },
          `${this.settings.label}: regime must be 'auto', 'decode' or 'batched', got ${String(request)}`,
        );
    }
  }

  private watch(st: GpuState): void {
    void st.device.lost.then((info) => {
      st.lost = info;
      if (this.disposed || st !== this.state) return;
      this.emit({ type: 'device-lost', reason: info.reason, message: info.message });
      if (!this.options.recovery) {
        this.failed = { reason: info.reason, message: info.message };
        return;
      }
      const p = this.recover(info).finally(() => {
        if (this.recovering === p) this.recovering = null;
      });
      this.recovering = p;
    });
  }

  /**
   * Requests a new device and rebuilds on it: a few attempts (shared with any loss that follows before a call is
   * served, so a device that arrives lost cannot loop), each bounded in time, with a growing pause between them.
   */
  private async recover(info: GPUDeviceLostInfo): Promise<void> {
    const { requestDevice, attempts = 3, attemptTimeoutMs = 60_000 } = this.options.recovery!;
    const started = Date.now();
    let last = 'no attempt left';
    const rebuild = async (): Promise<GpuState> => {
      const device = await requestDevice();
      try {
        const source = this.source;
        return 'bytes' in source
          ? await bytesState(device, true, source.bytes, this.shape, this.settings)
          : (await streamState(device, true, source.stream, { shape: this.shape, variant: this.settings.variant }, () => this.settings))
              .state;
      } catch (e) {
        device.destroy();
        throw e;
      }
    };
    while (this.attemptsUsed < attempts && !this.disposed) {
      const attempt = ++this.attemptsUsed;
      const building = rebuild();
      try {
        const st = await withTimeout(building, attemptTimeoutMs, `recovery attempt ${attempt} took over ${attemptTimeoutMs} ms`);
        if (this.disposed) {
          releaseState(st);
          return;
        }
        releaseState(this.state);
        this.state = st;
        this.watch(st);
        this.emit({ type: 'recovered', attempt, ms: Date.now() - started });
        return;
      } catch (e) {
        last = e instanceof Error ? e.message : String(e);
        building.then(releaseState, () => undefined); // an attempt that finishes after its timeout is thrown away
        if (this.attemptsUsed < attempts) await Promise.race([sleep(Math.min(2000, 100 * 2 ** attempt)), this.disposedSignal]);
      }
    }
    if (this.disposed) return;
    this.failed = { reason: info.reason, message: `${info.message}; recovery failed: ${last}` };
    this.emit({ type: 'recovery-failed', attempts, message: last });
  }

  private emit(event: RuntimeEvent): void {
    try {
      this.options.onEvent?.(event);
    } catch {
      // a listener's error must not break recovery
    }
  }

  private assertUsable(): void {
    if (this.disposed) throw new ExpertRuntimeError('DISPOSED', {}, `${this.settings.label}: used after dispose()`);
    if (this.failed) throw lostError(this.settings.label, this.failed);
  }
}

/** One call as compute() hands it to run(): validated inputs, their routing counts and the regime. */
type Call = PlannedCall & CallInputs;

/** Whether the state's device is lost, waiting a moment for its lost promise (it may settle after the failure). */
async function lostSoon(st: GpuState): Promise<boolean> {
  if (st.lost) return true;
  await Promise.race([st.device.lost, sleep(LOST_SETTLE_MS)]);
  return st.lost !== null;
}

function makeSettings(shape: SliceShape, options: ExpertRuntimeOptions, variant: ExpertVariant): Settings {
  const tuning: KernelTuning = {
    workgroupSize: options.workgroupSize ?? 64,
    rowsPerWorkgroup: options.rowsPerWorkgroup ?? 4,
    tileRows: options.tileRows ?? 16,
    tileCols: options.tileCols ?? 32,
  };
  const policy = options.regimePolicy ?? DEFAULT_REGIME_POLICY;
  if (!(policy.minPairsPerExpert >= 0)) {
    throw new ExpertRuntimeError(
      'BAD_OPTION',
      { option: 'regimePolicy.minPairsPerExpert', value: policy.minPairsPerExpert, requirement: 'a number ≥ 0' },
      `regimePolicy.minPairsPerExpert must be a number ≥ 0, got ${policy.minPairsPerExpert}`,
    );
  }
  const positive = (option: string, value: number | undefined): void => {
    if (value !== undefined && (!Number.isSafeInteger(value) || value < 1)) {
      throw new ExpertRuntimeError(
        'BAD_OPTION',
        { option, value, requirement: 'a positive integer' },
        `${option} must be a positive integer, got ${value}`,
      );
    }
  };
  positive('maxWorkgroupsPerDimension', options.maxWorkgroupsPerDimension);
  positive('maxBindingBytes', options.maxBindingBytes);
  positive('maxWeightBytes', options.maxWeightBytes);
  const features = options.features ?? 'auto';
  const known: readonly string[] = ['subgroups', 'shader-f16'];
  if (features !== 'auto' && !(Array.isArray(features) && features.every((f) => known.includes(f)))) {
    throw new ExpertRuntimeError(
      'BAD_OPTION',
      { option: 'features', value: NaN, requirement: "'auto' or a list of 'subgroups', 'shader-f16'" },
      `features must be 'auto' or a list of 'subgroups', 'shader-f16', got ${JSON.stringify(features)}`,
    );
  }
  const numerics = numericsOption(options.numerics);
  const integerDot = options.integerDot ?? 'auto';
  if (!['auto', 'packed', 'unpacked', 'float'].includes(integerDot)) {
    throw new ExpertRuntimeError(
      'BAD_OPTION',
      { option: 'integerDot', value: NaN, requirement: "'auto', 'packed', 'unpacked' or 'float'" },
      `integerDot must be 'auto', 'packed', 'unpacked' or 'float', got ${JSON.stringify(integerDot)}`,
    );
  }
  return {
    tuning,
    policy: { ...policy },
    numerics,
    integerDot,
    maxWorkgroupsPerDimension: options.maxWorkgroupsPerDimension,
    maxBindingBytes: options.maxBindingBytes,
    maxWeightBytes: options.maxWeightBytes,
    features,
    label: options.label ?? `expert-slice ${shape.nExpert}×[${shape.nEmbd}↔${shape.ff}]`,
    variant: { ...variant },
  };
}
