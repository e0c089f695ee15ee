/**
 * One MoE layer's slice of experts on one GPU device, computed from the GGUF quantized bytes as they are (no
 * dequantized copy): for each token t, out[t] = Σ_k probs[t,k] · down_e(silu(gate_e · x_t) ⊙ (up_e · x_t)).
 *
 * @example
 *   const rt = await ExpertRuntime.create(device, { nEmbd, ff, nExperts, types: { gate, up, down }, gate: g, up: u, down: d });
 *   const out = await rt.compute(rows, ids, probs, nTokens, nUsed); // Float32Array [nTokens × nEmbd]
 *   rt.dispose();
 *
 * Each call runs in the decode regime (one matrix–vector product per (token, expert) pair) or the batched regime
 * (pairs grouped by expert, tiled matrix–matrix products), as chooseRegime (regime-policy.ts) picks from the routing;
 * `compute(…, { regime })` forces one. Both give the same result up to f32 summation order.
 *
 * Weights live in GPU buffers by expert ranges ("parts", weight-parts.ts) so a slice larger than one storage binding
 * still loads; the decode kernels use subgroup reductions and the batched kernels f16 tiles where the device has those
 * features (options.features, capabilities().kernelFeatures); after a device loss the runtime can rebuild itself on a
 * new device (options.recovery). The whole picture: docs/kernels.md.
 */
import { GGUFError } from '../gguf/errors.ts';
import { ExpertSliceError, readExpertSliceBytes, readExpertSliceStream } from '../gguf/expert-slice.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { BufferPool, type BufferPoolStats } from './buffer-pool.ts';
import { ExpertRuntimeError, type MatrixName } from './errors.ts';
import { expertCounts, groupByExpert, usedExperts } from './expert-groups.ts';
import {
  DEFAULT_REGIME_POLICY,
  batchedSupported,
  chooseRegime,
  type Regime,
  type RegimeDecision,
  type RegimePolicy,
  type RegimeRequest,
} from './regime-policy.ts';
import {
  ExpertFfnKernels,
  GPU_FLAGS,
  QUANT_SNIPPETS,
  SHAPE_UNIFORM_BYTES,
  combineWorkgroups,
  foldDispatch,
  quantSnippet,
  rowKernelWorkgroups,
  sliceMatrixBytes,
  tiledWorkgroups,
  validateInputs,
  validateSlice,
  validateTuning,
  writeShapeUniform,
  kernelVariant,
  type KernelFeature,
  type KernelTuning,
  type PartDispatch,
  type SliceShape,
  type SliceTypes,
  type UpPass,
} from './expert-ffn.ts';
import { MATRICES, WeightWriter, createWeightParts, destroyWeightParts, planParts, type WeightPart } from './weight-parts.ts';

export { ExpertRuntimeError } from './errors.ts';
export { chooseRegime, DEFAULT_REGIME_POLICY, type Regime, type RegimeDecision, type RegimePolicy, type RegimeRequest } from './regime-policy.ts';
export type { KernelFeature } from './expert-ffn.ts';

export interface ExpertSlice {
  nEmbd: number;
  ff: number;
  nExperts: number;
  types: SliceTypes;
  /** nExperts gate matrices [ff rows × nEmbd], consecutive, in their GGUF bytes. */
  gate: Uint8Array;
  /** nExperts up matrices [ff rows × nEmbd]. */
  up: Uint8Array;
  /** nExperts down matrices [nEmbd rows × ff]. */
  down: Uint8Array;
}

/** A mini-GGUF expert slice (gguf/expert-slice.ts) to stream into GPU buffers; open() is called again to rebuild. */
export interface SliceStreamSource {
  open(): Promise<ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>>;
}

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
  /** Bytes one weight binding may hold here, and the parts the slice's matrices are split into. */
  maxBindingBytes: number;
  weightParts: number;
  slice: { nEmbd: number; ff: number; nExperts: number; types: Record<MatrixName, string>; weightBytes: number };
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
}

/** Bytes a u32 byte offset in the kernels can address. */
const U32_ADDRESSABLE = 2 ** 32 - 4;
/** Longest wait, after a failed call, for the device's lost promise to tell whether the loss caused it. */
const LOST_SETTLE_MS = 250;

const typeName = (t: GGMLType): string => GGMLType[t] ?? String(t);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** `p`, or a rejection with `message` after `ms`. */
function withTimeout<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message)), ms)));
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** The smallest of the limits that cap one binding, with its name. */
function bindingLimit(limits: GPUSupportedLimits, cap?: number): { limit: number; limitName: string } {
  const candidates: [string, number][] = [
    ['maxStorageBufferBindingSize', limits.maxStorageBufferBindingSize],
    ['maxBufferSize', limits.maxBufferSize],
    ['u32 byte addressing of the kernels', U32_ADDRESSABLE],
  ];
  if (cap !== undefined) candidates.push(['the maxBindingBytes option', cap]);
  candidates.sort((a, b) => a[1] - b[1]);
  const [limitName, limit] = candidates[0]!;
  return { limit, limitName };
}

interface Settings {
  tuning: KernelTuning;
  policy: RegimePolicy;
  maxWorkgroupsPerDimension: number | undefined;
  maxBindingBytes: number | undefined;
  maxWeightBytes: number | undefined;
  features: 'auto' | readonly KernelFeature[];
  label: string;
}

interface Pipelines {
  up: { pass: UpPass; pipeline: GPUComputePipeline }[];
  down: GPUComputePipeline;
}

/** Everything that lives on one device; rebuilt whole on a new device after a loss. */
interface GpuState {
  device: GPUDevice;
  /** Devices the runtime requested itself (recovery) are destroyed with it. */
  owned: boolean;
  kernels: ExpertFfnKernels;
  features: KernelFeature[];
  featuresReason: string;
  maxPerDimension: number;
  decode: Pipelines;
  combine: GPUComputePipeline;
  /** The batched regime's pipelines, built on its first call. */
  tiled: Promise<Pipelines> | null;
  parts: WeightPart[];
  pool: BufferPool;
  lost: GPUDeviceLostInfo | null;
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
   * malformed slice, BINDING_TOO_LARGE when not even one expert fits a binding, BAD_OPTION, FEATURE_UNAVAILABLE.
   *
   * Create the device with the adapter's limits (`requiredLimits: { maxStorageBufferBindingSize: adapter.limits…,
   * maxBufferSize: … }`) and its 'subgroups' feature where it has one: a device gets only the defaults otherwise.
   */
  static async create(device: GPUDevice, slice: ExpertSlice, options: ExpertRuntimeOptions = {}): Promise<ExpertRuntime> {
    const shape: SliceShape = { nEmbd: slice.nEmbd, ff: slice.ff, nExperts: slice.nExperts, types: { ...slice.types } };
    validateSlice(shape, slice);
    const settings = makeSettings(shape, options);
    const state = await bytesState(device, false, slice, shape, settings);
    return new ExpertRuntime(shape, settings, options, { bytes: slice }, state);
  }

  /**
   * Streams a mini-GGUF expert slice (as the hub's /api/expert-shard serves it) into GPU buffers: only the header
   * and a few bytes per matrix are held in memory. Errors as create(), plus BAD_SLICE_STREAM for a stream that is not
   * a valid expert slice.
   */
  static async load(device: GPUDevice, source: SliceStreamSource, options: ExpertRuntimeOptions = {}): Promise<ExpertRuntime> {
    let settings: Settings | null = null;
    const { shape, state } = await streamState(device, false, source, null, (shape) => (settings = makeSettings(shape, options)));
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
    const { info, gate, up, down } = parsed;
    return ExpertRuntime.create(device, { nEmbd: info.nEmbd, ff: info.ff, nExperts: info.expertEnd - info.expertBegin, types: { ...info.types }, gate, up, down }, options);
  }

  /** The regime compute() would use for these ids under this runtime's policy (validated as by compute()). */
  planRegime(ids: Int32Array, nTokens: number, nUsed: number): RegimeDecision {
    // Only the ids matter here; rows and probs are stand-ins of the right length.
    validateInputs(this.shape, { nTokens, nUsed }, { rows: { length: nTokens * this.shape.nEmbd }, ids, probs: { length: nTokens * nUsed } });
    return this.decide(expertCounts(ids, this.shape.nExperts), nTokens * nUsed);
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
    const counts = expertCounts(ids, this.shape.nExperts);
    const regime = this.resolveRegime(request, counts, nTokens * nUsed);
    if (nTokens === 0) return new Float32Array(0);
    for (let attempt = 0; ; attempt++) {
      if (this.recovering) await Promise.race([this.recovering, this.disposedSignal]);
      this.assertUsable();
      const state = this.state;
      try {
        const out = await this.run(state, { rows, ids, probs, nTokens, nUsed, counts, regime });
        this.attemptsUsed = 0;
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
      quantTypes: [...QUANT_SNIPPETS.keys()].map(typeName),
      kernelFeatures: [...st.features],
      kernelFeaturesReason: st.featuresReason,
      maxBindingBytes: bindingLimit(l, this.settings.maxBindingBytes).limit,
      weightParts: st.parts.length,
      slice: {
        nEmbd: this.shape.nEmbd,
        ff: this.shape.ff,
        nExperts: this.shape.nExperts,
        types: { gate: typeName(this.shape.types.gate), up: typeName(this.shape.types.up), down: typeName(this.shape.types.down) },
        weightBytes: weightBytes(st.parts),
      },
    };
  }

  memory(): ExpertRuntimeMemory {
    const parts = this.disposed ? [] : this.state.parts;
    return { weightBytes: weightBytes(parts), weightBuffers: parts.length * 3, pool: this.state.pool.stats() };
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

  private async run(st: GpuState, c: Call): Promise<Float32Array> {
    const { nEmbd, ff } = this.shape;
    const { nTokens, nUsed, counts } = c;
    const nPairs = nTokens * nUsed;
    const { tileRows, rowsPerWorkgroup, workgroupSize, tileCols } = this.settings.tuning;
    const groups = c.regime === 'batched' ? groupByExpert(c.ids, counts, tileRows) : null;
    const sizes = {
      rows: nTokens * nEmbd * 4,
      probs: nPairs * 4,
      hidden: nPairs * ff * 4,
      expertOut: nPairs * nEmbd * 4,
      out: nTokens * nEmbd * 4,
      // decode: ids; batched: the permutation (same size) and the tile list
      ids: nPairs * 4,
      tiles: groups ? groups.tiles.byteLength : 0,
    };
    const { limit, limitName } = bindingLimit(st.device.limits);
    for (const [buffer, bytes] of Object.entries(sizes)) {
      if (bytes > limit) {
        throw new ExpertRuntimeError('BATCH_TOO_LARGE', { buffer, bytes, limit, limitName },
          `${nTokens} tokens × ${nUsed} experts need a ${buffer} buffer of ${bytes} bytes, over ${limitName} = ${limit}; send fewer tokens per call`);
      }
    }
    // Each part dispatches only when some pair routes to its experts; batched, over its own tiles.
    const parts = st.parts
      .map((part) => ({ part, dispatch: partDispatch(part, counts, groups ? tilesPerExpert(counts, tileRows) : null) }))
      .filter(({ dispatch }) => dispatch !== null) as { part: WeightPart; dispatch: PartDispatch }[];
    // Dispatch sizes before any GPU work, so DISPATCH_TOO_LARGE leaves nothing behind.
    const fold = (workgroups: number): [number, number] => foldDispatch(workgroups, st.maxPerDimension);
    const dispatches = parts.map(({ dispatch }) => ({
      up: fold(groups ? tiledWorkgroups(dispatch.nRowTiles, ff, tileCols) : rowKernelWorkgroups(nPairs, ff, rowsPerWorkgroup)),
      down: fold(groups ? tiledWorkgroups(dispatch.nRowTiles, nEmbd, tileCols) : rowKernelWorkgroups(nPairs, nEmbd, rowsPerWorkgroup)),
    }));
    const combineDispatch = fold(combineWorkgroups(nTokens, nEmbd, workgroupSize));
    const pipelines = groups ? await this.tiledPipelines(st) : st.decode;
    this.assertUsable(); // the pipelines may have been built while the runtime was disposed

    const F = GPU_FLAGS;
    const pool = st.pool;
    // One Shape per part (expert range, tiles) plus the combine's, at the uniform offset alignment.
    const align = st.device.limits.minUniformBufferOffsetAlignment;
    const stride = Math.ceil(SHAPE_UNIFORM_BYTES / align) * align;
    const nShapes = parts.length + 1;
    const device = st.device;
    const q = device.queue;
    const label = this.settings.label;
    // Everything from the first buffer to the submit runs inside two error scopes (a buffer that cannot be allocated
    // is only reported there); a synchronous throw on the way pops them and gives the buffers back as failed.
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    const acquired: GPUBuffer[] = [];
    const acquire = (usage: GPUBufferUsageFlags, bytes: number, role: string): GPUBuffer => {
      const buffer = pool.acquire(usage, bytes, role);
      acquired.push(buffer);
      return buffer;
    };
    let b: Record<'shape' | 'rows' | 'ids' | 'probs' | 'hidden' | 'expertOut' | 'out' | 'readback', GPUBuffer> & { tiles: GPUBuffer | null };
    try {
      b = {
        shape: acquire(F.BUFFER_UNIFORM | F.BUFFER_COPY_DST, stride * nShapes, 'shape uniforms'),
        rows: acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.rows, 'rows'),
        ids: acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.ids, groups ? 'pairs by expert' : 'ids'),
        tiles: groups ? acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.tiles, 'row tiles') : null,
        probs: acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.probs, 'probs'),
        hidden: acquire(F.BUFFER_STORAGE, sizes.hidden, 'hidden (silu(gate)·up)'),
        expertOut: acquire(F.BUFFER_STORAGE, sizes.expertOut, 'expert outputs'),
        out: acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_SRC, sizes.out, 'out'),
        readback: acquire(F.BUFFER_MAP_READ | F.BUFFER_COPY_DST, sizes.out, 'readback'),
      };
      // writeBuffer takes views of shared memory too ([AllowShared] in the IDL); @webgpu/types narrows it to ArrayBuffer.
      const write = (buffer: GPUBuffer, data: ArrayBufferView, offset = 0): void =>
        q.writeBuffer(buffer, offset, data as ArrayBufferView<ArrayBuffer>);
      const call = { nTokens, nUsed };
      parts.forEach(({ dispatch }, i) => write(b.shape, writeShapeUniform(this.shape, call, dispatch), i * stride));
      const whole = { expertBegin: 0, expertEnd: this.shape.nExperts, tileBegin: 0, nRowTiles: 0 };
      write(b.shape, writeShapeUniform(this.shape, call, whole), parts.length * stride);
      write(b.rows, c.rows);
      write(b.ids, groups ? groups.perm : c.ids);
      if (groups && b.tiles) write(b.tiles, groups.tiles);
      write(b.probs, c.probs);

      const range = (buffer: GPUBuffer, size: number, offset = 0): GPUBufferBinding => ({ buffer, offset, size });
      const bind = (kernel: keyof ExpertFfnKernels['layouts'], resources: GPUBindingResource[]): GPUBindGroup =>
        device.createBindGroup({
          label: `${label} ${kernel} bind group`,
          layout: st.kernels.layouts[kernel],
          entries: resources.map((resource, binding) => ({ binding, resource })),
        });
      const shapeOf = (i: number): GPUBufferBinding => range(b.shape, SHAPE_UNIFORM_BYTES, i * stride);
      const rowsR = range(b.rows, sizes.rows);
      const idsR = range(b.ids, sizes.ids);
      const hiddenR = range(b.hidden, sizes.hidden);
      const outR = range(b.expertOut, sizes.expertOut);
      const encoder = device.createCommandEncoder({ label: `${label} call (${c.regime})` });
      const pass = encoder.beginComputePass({ label: `${label} expert-ffn (${c.regime})` });
      const run = (pipeline: GPUComputePipeline, group: GPUBindGroup, [x, y]: [number, number]): void => {
        pass.setPipeline(pipeline);
        pass.setBindGroup(0, group);
        pass.dispatchWorkgroups(x, y);
      };
      parts.forEach(({ part }, i) => {
        const w = part.buffers;
        const upGroup = b.tiles
          ? bind('expert_up_tiled', [shapeOf(i), { buffer: w.gate }, { buffer: w.up }, rowsR, idsR, range(b.tiles, sizes.tiles), hiddenR])
          : bind('expert_up', [shapeOf(i), { buffer: w.gate }, { buffer: w.up }, rowsR, idsR, hiddenR]);
        for (const { pipeline } of pipelines.up) run(pipeline, upGroup, dispatches[i]!.up);
      });
      parts.forEach(({ part }, i) => {
        const w = part.buffers;
        const downGroup = b.tiles
          ? bind('expert_down_tiled', [shapeOf(i), { buffer: w.down }, hiddenR, idsR, range(b.tiles, sizes.tiles), outR])
          : bind('expert_down', [shapeOf(i), { buffer: w.down }, hiddenR, idsR, outR]);
        run(pipelines.down, downGroup, dispatches[i]!.down);
      });
      run(st.combine, bind('expert_combine', [shapeOf(parts.length), outR, range(b.probs, sizes.probs), range(b.out, sizes.out)]), combineDispatch);
      pass.end();
      encoder.copyBufferToBuffer(b.out, 0, b.readback, 0, sizes.out);
      q.submit([encoder.finish({ label: `${label} call commands` })]);
    } catch (e) {
      void device.popErrorScope().catch(() => undefined);
      void device.popErrorScope().catch(() => undefined);
      for (const buffer of acquired) pool.discard(buffer);
      throw e;
    }
    const validation = device.popErrorScope();
    const oom = device.popErrorScope();

    let ok = false;
    try {
      const mapped = b.readback.mapAsync(F.MAP_MODE_READ, 0, sizes.out);
      const error = (await validation) ?? (await oom);
      if (error) {
        await mapped.catch(() => undefined);
        throw new ExpertRuntimeError('GPU_ERROR', { message: error.message }, `${label}: WebGPU error in a compute call: ${error.message}`);
      }
      await mapped;
      const out = new Float32Array(b.readback.getMappedRange(0, sizes.out).slice(0));
      b.readback.unmap();
      ok = true;
      return out;
    } catch (e) {
      if (st.lost) throw lostError(label, st.lost);
      throw e;
    } finally {
      // The readback has been mapped (or the call failed), so the GPU is done with every buffer of this call.
      for (const buffer of acquired) {
        if (ok) pool.release(buffer);
        else pool.discard(buffer);
      }
    }
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
          throw new ExpertRuntimeError('REGIME_UNAVAILABLE', { regime: request, reason: 'rows-not-quads' },
            `${this.settings.label}: the batched regime reads weights four elements at a time; nEmbd = ${this.shape.nEmbd} and ` +
              `ff = ${this.shape.ff} must both be multiples of 4 (use 'decode' or 'auto')`);
        }
        return 'batched';
      default:
        throw new ExpertRuntimeError('REGIME_UNAVAILABLE', { regime: String(request), reason: 'unknown' },
          `${this.settings.label}: regime must be 'auto', 'decode' or 'batched', got ${String(request)}`);
    }
  }

  private tiledPipelines(st: GpuState): Promise<Pipelines> {
    if (!st.tiled) {
      const build = (f: readonly KernelFeature[]): Promise<Pipelines> => buildPipelines(st.kernels, this.shape.types, this.settings.tuning, f, 'tiled');
      const p = build(st.features).catch((e: unknown) => {
        // With 'auto', a driver that cannot build the f16 tiles gets the f32 ones instead.
        if (!(this.settings.features === 'auto' && st.features.includes('shader-f16') && isCompileError(e))) throw e;
        st.features = st.features.filter((f) => f !== 'shader-f16');
        st.featuresReason += `; shader-f16 dropped: ${(e as Error).message}`;
        return build(st.features);
      });
      p.catch(() => {
        if (st.tiled === p) st.tiled = null; // a later call may retry
      });
      st.tiled = p;
    }
    return st.tiled;
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
          : (await streamState(device, true, source.stream, this.shape, () => this.settings)).state;
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

interface Call {
  rows: Float32Array;
  ids: Int32Array;
  probs: Float32Array;
  nTokens: number;
  nUsed: number;
  counts: Uint32Array;
  regime: Regime;
}

function lostError(label: string, info: { reason: string; message: string }): ExpertRuntimeError {
  return new ExpertRuntimeError('DEVICE_LOST', { reason: info.reason, message: info.message },
    `${label}: the GPU device was lost (${info.reason}): ${info.message}`);
}

/** Whether the state's device is lost, waiting a moment for its lost promise (it may settle after the failure). */
async function lostSoon(st: GpuState): Promise<boolean> {
  if (st.lost) return true;
  await Promise.race([st.device.lost, sleep(LOST_SETTLE_MS)]);
  return st.lost !== null;
}

function weightBytes(parts: readonly WeightPart[]): number {
  let n = 0;
  for (const p of parts) for (const m of MATRICES) n += p.buffers[m].size;
  return n;
}

/** Tiles each expert's pairs make in the batched regime, as groupByExpert cuts them. */
function tilesPerExpert(counts: Uint32Array, tileRows: number): Uint32Array {
  return counts.map((c) => Math.ceil(c / tileRows));
}

/** A part's dispatch, or null when no pair routes to its experts. */
function partDispatch(part: WeightPart, counts: Uint32Array, tiles: Uint32Array | null): PartDispatch | null {
  let pairs = 0;
  for (let e = part.begin; e < part.end; e++) pairs += counts[e]!;
  if (pairs === 0) return null;
  if (!tiles) return { expertBegin: part.begin, expertEnd: part.end, tileBegin: 0, nRowTiles: 0 };
  let tileBegin = 0;
  for (let e = 0; e < part.begin; e++) tileBegin += tiles[e]!;
  let nRowTiles = 0;
  for (let e = part.begin; e < part.end; e++) nRowTiles += tiles[e]!;
  return { expertBegin: part.begin, expertEnd: part.end, tileBegin, nRowTiles };
}

function makeSettings(shape: SliceShape, options: ExpertRuntimeOptions): Settings {
  const tuning: KernelTuning = {
    workgroupSize: options.workgroupSize ?? 64,
    rowsPerWorkgroup: options.rowsPerWorkgroup ?? 4,
    tileRows: options.tileRows ?? 16,
    tileCols: options.tileCols ?? 32,
  };
  const policy = options.regimePolicy ?? DEFAULT_REGIME_POLICY;
  if (!(policy.minRowsPerExpert >= 0)) {
    throw new ExpertRuntimeError('BAD_OPTION', { option: 'regimePolicy.minRowsPerExpert', value: policy.minRowsPerExpert, requirement: 'a number ≥ 0' },
      `regimePolicy.minRowsPerExpert must be a number ≥ 0, got ${policy.minRowsPerExpert}`);
  }
  const positive = (option: string, value: number | undefined): void => {
    if (value !== undefined && (!Number.isSafeInteger(value) || value < 1)) {
      throw new ExpertRuntimeError('BAD_OPTION', { option, value, requirement: 'a positive integer' }, `${option} must be a positive integer, got ${value}`);
    }
  };
  positive('maxWorkgroupsPerDimension', options.maxWorkgroupsPerDimension);
  positive('maxBindingBytes', options.maxBindingBytes);
  positive('maxWeightBytes', options.maxWeightBytes);
  const features = options.features ?? 'auto';
  const known: readonly string[] = ['subgroups', 'shader-f16'];
  if (features !== 'auto' && !(Array.isArray(features) && features.every((f) => known.includes(f)))) {
    throw new ExpertRuntimeError('BAD_OPTION', { option: 'features', value: NaN, requirement: "'auto' or a list of 'subgroups', 'shader-f16'" },
      `features must be 'auto' or a list of 'subgroups', 'shader-f16', got ${JSON.stringify(features)}`);
  }
  return {
    tuning,
    policy: { ...policy },
    maxWorkgroupsPerDimension: options.maxWorkgroupsPerDimension,
    maxBindingBytes: options.maxBindingBytes,
    maxWeightBytes: options.maxWeightBytes,
    features,
    label: options.label ?? `expert-slice ${shape.nExperts}×[${shape.nEmbd}↔${shape.ff}]`,
  };
}

/** The optional features to build with: those asked for, or with 'auto' every one this device runs. */
async function chooseFeatures(
  device: GPUDevice,
  kernels: ExpertFfnKernels,
  want: 'auto' | readonly KernelFeature[],
  workgroupSize: number,
): Promise<{ features: KernelFeature[]; reason: string }> {
  const features: KernelFeature[] = [];
  const reasons: string[] = [];
  const unavailable = (feature: KernelFeature, reason: string): never => {
    throw new ExpertRuntimeError('FEATURE_UNAVAILABLE', { feature, reason }, `the '${feature}' kernels cannot run on this device: ${reason}`);
  };
  const asked = (f: KernelFeature): boolean => want === 'auto' || want.includes(f);
  if (asked('shader-f16')) {
    if (device.features.has('shader-f16')) {
      features.push('shader-f16');
      reasons.push('shader-f16: the device has it (batched tiles in f16)');
    } else if (want === 'auto') {
      reasons.push("shader-f16 unused: the device was created without the 'shader-f16' feature");
    } else {
      unavailable('shader-f16', "the device was created without the 'shader-f16' feature");
    }
  }
  if (asked('subgroups')) {
    const layout = await kernels.subgroupLayout(workgroupSize);
    if (layout.usable) {
      features.push('subgroups');
      reasons.push(`subgroups: ${layout.reason}`);
    } else if (want === 'auto') {
      reasons.push(`subgroups unused: ${layout.reason}`);
    } else {
      unavailable('subgroups', layout.reason);
    }
  }
  return { features, reason: reasons.join('; ') || 'base kernels asked for' };
}

/** Pipelines and empty weight parts on `device`. */
async function prepareState(device: GPUDevice, owned: boolean, shape: SliceShape, settings: Settings): Promise<GpuState> {
  const total = Object.values(sliceMatrixBytes(shape)).reduce((a, b) => a + b, 0);
  if (settings.maxWeightBytes !== undefined && total > settings.maxWeightBytes) {
    throw new ExpertRuntimeError('SLICE_TOO_LARGE', { bytes: total, limit: settings.maxWeightBytes },
      `${describe(shape)} weigh ${total} bytes, over maxWeightBytes = ${settings.maxWeightBytes}`);
  }
  validateTuning(settings.tuning, device.limits);
  const deviceMax = device.limits.maxComputeWorkgroupsPerDimension;
  const maxPerDimension = Math.min(settings.maxWorkgroupsPerDimension ?? deviceMax, deviceMax);
  const { limit, limitName } = bindingLimit(device.limits, settings.maxBindingBytes);
  const ranges = planParts(shape, limit, limitName);
  const kernels = ExpertFfnKernels.forDevice(device);
  const chosen = await chooseFeatures(device, kernels, settings.features, settings.tuning.workgroupSize);
  let { features, reason } = chosen;
  const build = (f: readonly KernelFeature[]) => Promise.all([
    buildPipelines(kernels, shape.types, settings.tuning, f, 'decode'),
    kernels.pipeline({ kernel: 'expert_combine', tuning: settings.tuning, variant: 'base' }),
  ]);
  let pipelines: Awaited<ReturnType<typeof build>>;
  try {
    pipelines = await build(features);
  } catch (e) {
    // With 'auto', a driver that cannot build the subgroup variant gets the base kernels instead.
    if (!(settings.features === 'auto' && features.includes('subgroups') && isCompileError(e))) throw e;
    features = features.filter((f) => f !== 'subgroups');
    reason += `; subgroups dropped: ${(e as Error).message}`;
    pipelines = await build(features);
  }
  const [decode, combine] = pipelines;
  // Out of GPU memory only shows as an error scope's error (the buffers are invalid, not missing).
  device.pushErrorScope('out-of-memory');
  const parts = createWeightParts(device, shape, ranges, settings.label);
  const oom = await device.popErrorScope();
  if (oom) {
    destroyWeightParts(parts);
    throw new ExpertRuntimeError('GPU_ERROR', { message: oom.message }, `${settings.label}: no GPU memory for ${total} bytes of weights: ${oom.message}`);
  }
  return {
    device, owned, kernels, features, featuresReason: reason, maxPerDimension, decode, combine, tiled: null, parts,
    pool: new BufferPool(device, settings.label), lost: null,
  };
}

const isCompileError = (e: unknown): boolean => e instanceof ExpertRuntimeError && e.code === 'SHADER_COMPILE';

/** Frees a state's buffers, and its device when the runtime requested it. */
function releaseState(st: GpuState): void {
  destroyWeightParts(st.parts);
  st.pool.dispose();
  if (st.owned) st.device.destroy();
}

/** A state holding the slice's bytes. */
async function bytesState(device: GPUDevice, owned: boolean, slice: ExpertSlice, shape: SliceShape, settings: Settings): Promise<GpuState> {
  const st = await prepareState(device, owned, shape, settings);
  try {
    const writer = new WeightWriter(device.queue, shape, st.parts);
    for (const m of MATRICES) writer.write(m, 0, slice[m]);
    writer.finish();
    return st;
  } catch (e) {
    releaseState(st);
    throw e;
  }
}

const sameShape = (a: SliceShape, b: SliceShape): boolean =>
  a.nEmbd === b.nEmbd && a.ff === b.ff && a.nExperts === b.nExperts &&
  a.types.gate === b.types.gate && a.types.up === b.types.up && a.types.down === b.types.down;

const describe = (s: SliceShape): string =>
  `${s.nExperts} experts [${s.nEmbd}↔${s.ff}] of ${typeName(s.types.gate)}/${typeName(s.types.up)}/${typeName(s.types.down)}`;

/**
 * A state filled from a newly opened mini-GGUF slice stream: the header gives the shape (which must equal `expect`
 * when rebuilding), then the tensor data goes straight into the weight buffers.
 */
async function streamState(
  device: GPUDevice,
  owned: boolean,
  source: SliceStreamSource,
  expect: SliceShape | null,
  settingsFor: (shape: SliceShape) => Settings,
): Promise<{ shape: SliceShape; state: GpuState }> {
  let st: GpuState | null = null;
  let writer: WeightWriter | null = null;
  let shape: SliceShape | null = null;
  try {
    const stream = await source.open();
    await readExpertSliceStream(stream, {
      onHeader: async (info) => {
        const s: SliceShape = { nEmbd: info.nEmbd, ff: info.ff, nExperts: info.expertEnd - info.expertBegin, types: { ...info.types } };
        validateSlice(s, { gate: { length: info.bytes.gate }, up: { length: info.bytes.up }, down: { length: info.bytes.down } });
        if (expect && !sameShape(expect, s)) {
          throw new ExpertRuntimeError('BAD_SLICE_STREAM', { cause: 'changed', message: `holds ${describe(s)}` },
            `the reopened slice stream holds ${describe(s)}, not ${describe(expect)}`);
        }
        shape = s;
        st = await prepareState(device, owned, s, settingsFor(s));
        writer = new WeightWriter(device.queue, s, st.parts);
      },
      onData: (matrix, offset, chunk) => {
        writer!.write(matrix, offset, chunk);
      },
    });
    writer!.finish();
    return { shape: shape!, state: st! };
  } catch (e) {
    if (st) releaseState(st);
    throw sliceError(e);
  }
}

/** A slice reader's error as BAD_SLICE_STREAM (with its code as the cause); anything else unchanged. */
function sliceError(e: unknown): unknown {
  if (e instanceof GGUFError || e instanceof ExpertSliceError) {
    return new ExpertRuntimeError('BAD_SLICE_STREAM', { cause: e.code, message: e.message }, `not a valid expert slice: ${e.message}`);
  }
  return e;
}

/** Gate and up usually share a type and run fused; otherwise each pass uses its own type's module. */
function upPasses(types: SliceTypes): { pass: UpPass; type: GGMLType }[] {
  return types.gate === types.up ? [{ pass: 'fused', type: types.gate }] : [{ pass: 'gate', type: types.gate }, { pass: 'up', type: types.up }];
}

async function buildPipelines(
  kernels: ExpertFfnKernels,
  types: SliceTypes,
  tuning: KernelTuning,
  features: readonly KernelFeature[],
  regime: 'decode' | 'tiled',
): Promise<Pipelines> {
  const upKernel = regime === 'decode' ? 'expert_up' : 'expert_up_tiled';
  const downKernel = regime === 'decode' ? 'expert_down' : 'expert_down_tiled';
  const [up, down] = await Promise.all([
    Promise.all(upPasses(types).map(async ({ pass, type }) => ({
      pass,
      pipeline: await kernels.pipeline({ kernel: upKernel, quant: quantSnippet(type), pass, tuning, variant: kernelVariant(upKernel, features) }),
    }))),
    kernels.pipeline({ kernel: downKernel, quant: quantSnippet(types.down), tuning, variant: kernelVariant(downKernel, features) }),
  ]);
  return { up, down };
}
