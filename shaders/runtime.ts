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
 * Create the device with the adapter's limits (`requiredLimits: { maxStorageBufferBindingSize: adapter.limits…,
 * maxBufferSize: … }`): a device gets only the WebGPU defaults (128 MiB per binding) otherwise.
 */
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
  type KernelTuning,
  type SliceShape,
  type SliceTypes,
  type UpPass,
} from './expert-ffn.ts';

export { ExpertRuntimeError } from './errors.ts';
export { chooseRegime, DEFAULT_REGIME_POLICY, type Regime, type RegimeDecision, type RegimePolicy, type RegimeRequest } from './regime-policy.ts';

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
  /** Prefix of every GPU object's label. */
  label?: string;
}

/** What the hub needs to know to place work on this runtime. */
export interface ExpertRuntimeCapabilities {
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
  /** Kernel variants in use; later 'shader-f16' / 'subgroups' variants will be listed here. */
  kernelFeatures: string[];
  slice: { nEmbd: number; ff: number; nExperts: number; types: Record<MatrixName, string>; weightBytes: number };
}

export interface ExpertRuntimeMemory {
  /** Bytes of the weight buffers (0 after dispose). */
  weightBytes: number;
  weightBuffers: number;
  pool: BufferPoolStats;
}

/** Bytes a u32 byte offset in the kernels can address. */
const U32_ADDRESSABLE = 2 ** 32 - 4;

export interface ComputeOptions {
  /** 'auto' (default): the runtime's regime policy decides from the routing; otherwise that regime. */
  regime?: RegimeRequest;
}

interface Pipelines {
  up: { pass: UpPass; pipeline: GPUComputePipeline }[];
  down: GPUComputePipeline;
  combine: GPUComputePipeline;
}

/** The batched regime's pipelines; built on the first batched call, so decode-only runtimes never compile them. */
interface TiledPipelines {
  up: { pass: UpPass; pipeline: GPUComputePipeline }[];
  down: GPUComputePipeline;
}

const typeName = (t: GGMLType): string => GGMLType[t] ?? String(t);
const pad4 = (n: number): number => Math.ceil(n / 4) * 4;

/** The smallest of the limits that cap one binding, with its name. */
function bindingLimit(limits: GPUSupportedLimits): { limit: number; limitName: string } {
  const candidates: [string, number][] = [
    ['maxStorageBufferBindingSize', limits.maxStorageBufferBindingSize],
    ['maxBufferSize', limits.maxBufferSize],
    ['u32 byte addressing of the kernels', U32_ADDRESSABLE],
  ];
  candidates.sort((a, b) => a[1] - b[1]);
  const [limitName, limit] = candidates[0]!;
  return { limit, limitName };
}

export class ExpertRuntime {
  private readonly pool: BufferPool;
  private weights: Record<MatrixName, GPUBuffer> | null;
  private readonly weightBytes: number;
  private disposed = false;
  private lost: GPUDeviceLostInfo | null = null;
  private tiled: Promise<TiledPipelines> | null = null;

  private constructor(
    private readonly device: GPUDevice,
    private readonly slice: SliceShape,
    private readonly kernels: ExpertFfnKernels,
    private readonly pipelines: Pipelines,
    weights: Record<MatrixName, GPUBuffer>,
    private readonly tuning: KernelTuning,
    private readonly maxPerDimension: number,
    private readonly label: string,
    private readonly policy: RegimePolicy,
  ) {
    this.weights = weights;
    this.weightBytes = weights.gate.size + weights.up.size + weights.down.size;
    this.pool = new BufferPool(device, label);
    void device.lost.then((info) => {
      this.lost = info;
    });
  }

  /**
   * Validates the slice, builds the pipelines its types need and uploads the quantized bytes (each matrix padded to
   * 4 bytes). Throws ExpertRuntimeError: BAD_SHAPE / UNSUPPORTED_TYPE / BAD_SLICE_BYTES for a malformed slice,
   * BINDING_TOO_LARGE when one matrix exceeds what one storage binding may hold on this device.
   */
  static async create(device: GPUDevice, slice: ExpertSlice, options: ExpertRuntimeOptions = {}): Promise<ExpertRuntime> {
    const shape: SliceShape = { nEmbd: slice.nEmbd, ff: slice.ff, nExperts: slice.nExperts, types: { ...slice.types } };
    validateSlice(shape, slice);
    const tuning: KernelTuning = {
      workgroupSize: options.workgroupSize ?? 64,
      rowsPerWorkgroup: options.rowsPerWorkgroup ?? 4,
      tileRows: options.tileRows ?? 16,
      tileCols: options.tileCols ?? 32,
    };
    validateTuning(tuning, device.limits);
    const policy = options.regimePolicy ?? DEFAULT_REGIME_POLICY;
    if (!(policy.minRowsPerExpert >= 0)) {
      throw new ExpertRuntimeError('BAD_OPTION', { option: 'regimePolicy.minRowsPerExpert', value: policy.minRowsPerExpert, requirement: 'a number ≥ 0' },
        `regimePolicy.minRowsPerExpert must be a number ≥ 0, got ${policy.minRowsPerExpert}`);
    }
    const deviceMax = device.limits.maxComputeWorkgroupsPerDimension;
    const maxPerDimension = Math.min(options.maxWorkgroupsPerDimension ?? deviceMax, deviceMax);
    if (!Number.isSafeInteger(maxPerDimension) || maxPerDimension < 1) {
      throw new ExpertRuntimeError('BAD_OPTION', { option: 'maxWorkgroupsPerDimension', value: maxPerDimension, requirement: 'a positive integer' },
        `maxWorkgroupsPerDimension must be a positive integer, got ${maxPerDimension}`);
    }

    // One matrix is one binding for now. Splitting a slice's matrix over several bindings (by expert ranges) can come
    // later; until then a slice must be small enough, and the error says which limit it hit.
    const { limit, limitName } = bindingLimit(device.limits);
    const bytes = sliceMatrixBytes(shape);
    for (const m of ['gate', 'up', 'down'] as const) {
      if (pad4(bytes[m]) > limit) {
        throw new ExpertRuntimeError('BINDING_TOO_LARGE', { matrix: m, bytes: bytes[m], limit, limitName },
          `${m}: ${shape.nExperts} experts of ${typeName(shape.types[m])} are ${bytes[m]} bytes, over this device's ` +
            `${limitName} of ${limit}; load fewer experts per slice (splitting a matrix over several bindings is not implemented yet)`);
      }
    }

    const label = options.label ?? `expert-slice ${shape.nExperts}×[${shape.nEmbd}↔${shape.ff}]`;
    const kernels = ExpertFfnKernels.forDevice(device);
    const pipelines = await buildPipelines(kernels, shape.types, tuning);

    const upload = (m: MatrixName, data: Uint8Array): GPUBuffer => {
      const buffer = device.createBuffer({
        label: `${label} ${m} weights (${typeName(shape.types[m])})`,
        size: pad4(data.length),
        usage: GPU_FLAGS.BUFFER_STORAGE | GPU_FLAGS.BUFFER_COPY_DST,
        mappedAtCreation: true,
      });
      new Uint8Array(buffer.getMappedRange()).set(data);
      buffer.unmap();
      return buffer;
    };
    const weights = { gate: upload('gate', slice.gate), up: upload('up', slice.up), down: upload('down', slice.down) };
    return new ExpertRuntime(device, shape, kernels, pipelines, weights, tuning, maxPerDimension, label, { ...policy });
  }

  /**
   * The regime compute() would use for these ids under this runtime's policy (validated as by compute()).
   */
  planRegime(ids: Int32Array, nTokens: number, nUsed: number): RegimeDecision {
    // Only the ids matter here; rows and probs are stand-ins of the right length.
    validateInputs(this.slice, { nTokens, nUsed }, { rows: { length: nTokens * this.slice.nEmbd }, ids, probs: { length: nTokens * nUsed } });
    return this.decide(expertCounts(ids, this.slice.nExperts), nTokens * nUsed);
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
    const call = { nTokens, nUsed };
    validateInputs(this.slice, call, { rows, ids, probs });
    const { nEmbd, ff, nExperts } = this.slice;
    const nPairs = nTokens * nUsed;
    const request = options.regime ?? 'auto';
    const counts = request === 'decode' ? null : expertCounts(ids, nExperts);
    const regime = this.resolveRegime(request, counts, nPairs);
    if (nTokens === 0) return new Float32Array(0);
    const groups = regime === 'batched' && counts ? groupByExpert(ids, counts, this.tuning.tileRows) : null;
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
    const { limit, limitName } = bindingLimit(this.device.limits);
    for (const [buffer, bytes] of Object.entries(sizes)) {
      if (bytes > limit) {
        throw new ExpertRuntimeError('BATCH_TOO_LARGE', { buffer, bytes, limit, limitName },
          `${nTokens} tokens × ${nUsed} experts need a ${buffer} buffer of ${bytes} bytes, over ${limitName} = ${limit}; send fewer tokens per call`);
      }
    }
    // Dispatch sizes before any GPU work, so DISPATCH_TOO_LARGE leaves nothing behind.
    const { rowsPerWorkgroup, workgroupSize, tileCols } = this.tuning;
    const fold = (workgroups: number): [number, number] => foldDispatch(workgroups, this.maxPerDimension);
    const upDispatch = fold(groups ? tiledWorkgroups(groups.nTiles, ff, tileCols) : rowKernelWorkgroups(nPairs, ff, rowsPerWorkgroup));
    const downDispatch = fold(groups ? tiledWorkgroups(groups.nTiles, nEmbd, tileCols) : rowKernelWorkgroups(nPairs, nEmbd, rowsPerWorkgroup));
    const combineDispatch = fold(combineWorkgroups(nTokens, nEmbd, workgroupSize));
    const tiled = groups ? await this.tiledPipelines() : null;
    this.assertUsable(); // the pipelines may have been built while the runtime was disposed

    const F = GPU_FLAGS;
    const pool = this.pool;
    const b = {
      shape: pool.acquire(F.BUFFER_UNIFORM | F.BUFFER_COPY_DST, SHAPE_UNIFORM_BYTES, 'shape uniform'),
      rows: pool.acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.rows, 'rows'),
      ids: pool.acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.ids, groups ? 'pairs by expert' : 'ids'),
      tiles: groups ? pool.acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.tiles, 'row tiles') : null,
      probs: pool.acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.probs, 'probs'),
      hidden: pool.acquire(F.BUFFER_STORAGE, sizes.hidden, 'hidden (silu(gate)·up)'),
      expertOut: pool.acquire(F.BUFFER_STORAGE, sizes.expertOut, 'expert outputs'),
      out: pool.acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_SRC, sizes.out, 'out'),
      readback: pool.acquire(F.BUFFER_MAP_READ | F.BUFFER_COPY_DST, sizes.out, 'readback'),
    };
    const all = Object.values(b).filter((x): x is GPUBuffer => x !== null);
    const w = this.weights!;
    const device = this.device;
    const q = device.queue;
    // writeBuffer takes views of shared memory too ([AllowShared] in the IDL); @webgpu/types narrows it to ArrayBuffer.
    const write = (buffer: GPUBuffer, data: ArrayBufferView): void => q.writeBuffer(buffer, 0, data as ArrayBufferView<ArrayBuffer>);
    write(b.shape, writeShapeUniform(this.slice, call, { gate: 0, up: 0, down: 0 }, groups ? groups.nTiles : 0));
    write(b.rows, rows);
    write(b.ids, groups ? groups.perm : ids);
    if (groups && b.tiles) write(b.tiles, groups.tiles);
    write(b.probs, probs);

    const range = (buffer: GPUBuffer, size: number): GPUBufferBinding => ({ buffer, offset: 0, size });
    const bind = (kernel: keyof ExpertFfnKernels['layouts'], resources: GPUBindingResource[]): GPUBindGroup =>
      device.createBindGroup({
        label: `${this.label} ${kernel} bind group`,
        layout: this.kernels.layouts[kernel],
        entries: resources.map((resource, binding) => ({ binding, resource })),
      });
    const shape = range(b.shape, SHAPE_UNIFORM_BYTES);
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    const encoder = device.createCommandEncoder({ label: `${this.label} call (${regime})` });
    const pass = encoder.beginComputePass({ label: `${this.label} expert-ffn (${regime})` });
    let upGroup: GPUBindGroup;
    let downGroup: GPUBindGroup;
    let upPipelines: { pipeline: GPUComputePipeline }[];
    let downPipeline: GPUComputePipeline;
    if (tiled && b.tiles) {
      const perm = range(b.ids, sizes.ids);
      const tiles = range(b.tiles, sizes.tiles);
      upGroup = bind('expert_up_tiled', [shape, { buffer: w.gate }, { buffer: w.up }, range(b.rows, sizes.rows), perm, tiles, range(b.hidden, sizes.hidden)]);
      downGroup = bind('expert_down_tiled', [shape, { buffer: w.down }, range(b.hidden, sizes.hidden), perm, tiles, range(b.expertOut, sizes.expertOut)]);
      upPipelines = tiled.up;
      downPipeline = tiled.down;
    } else {
      const idsRange = range(b.ids, sizes.ids);
      upGroup = bind('expert_up', [shape, { buffer: w.gate }, { buffer: w.up }, range(b.rows, sizes.rows), idsRange, range(b.hidden, sizes.hidden)]);
      downGroup = bind('expert_down', [shape, { buffer: w.down }, range(b.hidden, sizes.hidden), idsRange, range(b.expertOut, sizes.expertOut)]);
      upPipelines = this.pipelines.up;
      downPipeline = this.pipelines.down;
    }
    for (const { pipeline } of upPipelines) {
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, upGroup);
      pass.dispatchWorkgroups(upDispatch[0], upDispatch[1]);
    }
    pass.setPipeline(downPipeline);
    pass.setBindGroup(0, downGroup);
    pass.dispatchWorkgroups(downDispatch[0], downDispatch[1]);
    pass.setPipeline(this.pipelines.combine);
    pass.setBindGroup(0, bind('expert_combine', [shape, range(b.expertOut, sizes.expertOut), range(b.probs, sizes.probs), range(b.out, sizes.out)]));
    pass.dispatchWorkgroups(combineDispatch[0], combineDispatch[1]);
    pass.end();
    encoder.copyBufferToBuffer(b.out, 0, b.readback, 0, sizes.out);
    q.submit([encoder.finish({ label: `${this.label} call commands` })]);
    const validation = device.popErrorScope();
    const oom = device.popErrorScope();

    let ok = false;
    try {
      const mapped = b.readback.mapAsync(F.MAP_MODE_READ, 0, sizes.out);
      const error = (await validation) ?? (await oom);
      if (error) {
        await mapped.catch(() => undefined);
        throw new ExpertRuntimeError('GPU_ERROR', { message: error.message }, `${this.label}: WebGPU error in a compute call: ${error.message}`);
      }
      await mapped;
      const out = new Float32Array(b.readback.getMappedRange(0, sizes.out).slice(0));
      b.readback.unmap();
      ok = true;
      return out;
    } catch (e) {
      this.assertUsable();
      throw e;
    } finally {
      // The readback has been mapped (or the call failed), so the GPU is done with every buffer of this call.
      for (const buffer of all) {
        if (ok) pool.release(buffer);
        else pool.discard(buffer);
      }
    }
  }

  capabilities(): ExpertRuntimeCapabilities {
    const l = this.device.limits;
    const info = this.device.adapterInfo as Partial<GPUAdapterInfo> | undefined;
    return {
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
      features: [...this.device.features].sort(),
      quantTypes: [...QUANT_SNIPPETS.keys()].map(typeName),
      kernelFeatures: ['base'],
      slice: {
        nEmbd: this.slice.nEmbd,
        ff: this.slice.ff,
        nExperts: this.slice.nExperts,
        types: { gate: typeName(this.slice.types.gate), up: typeName(this.slice.types.up), down: typeName(this.slice.types.down) },
        weightBytes: this.weightBytes,
      },
    };
  }

  memory(): ExpertRuntimeMemory {
    const w = this.weights;
    return {
      weightBytes: w ? this.weightBytes : 0,
      weightBuffers: w ? 3 : 0,
      pool: this.pool.stats(),
    };
  }

  /** Destroys the weight buffers and pooled buffers (buffers of calls still in flight go when those finish). Idempotent. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    if (this.weights) {
      for (const buffer of Object.values(this.weights)) buffer.destroy();
      this.weights = null;
    }
    this.pool.dispose();
  }

  private decide(counts: Uint32Array, nPairs: number): RegimeDecision {
    const { nEmbd, ff } = this.slice;
    return chooseRegime({ nPairs, usedExperts: usedExperts(counts), nEmbd, ff }, this.policy);
  }

  /** counts: pairs per expert, for every request but 'decode'. */
  private resolveRegime(request: RegimeRequest, counts: Uint32Array | null, nPairs: number): Regime {
    switch (request) {
      case 'auto':
        return this.decide(counts ?? new Uint32Array(0), nPairs).regime;
      case 'decode':
        return 'decode';
      case 'batched':
        if (!batchedSupported(this.slice)) {
          throw new ExpertRuntimeError('REGIME_UNAVAILABLE', { regime: request, reason: 'rows-not-quads' },
            `${this.label}: the batched regime reads weights four elements at a time; nEmbd = ${this.slice.nEmbd} and ` +
              `ff = ${this.slice.ff} must both be multiples of 4 (use 'decode' or 'auto')`);
        }
        return 'batched';
      default:
        throw new ExpertRuntimeError('REGIME_UNAVAILABLE', { regime: String(request), reason: 'unknown' },
          `${this.label}: regime must be 'auto', 'decode' or 'batched', got ${String(request)}`);
    }
  }

  private tiledPipelines(): Promise<TiledPipelines> {
    if (!this.tiled) {
      const p = buildTiledPipelines(this.kernels, this.slice.types, this.tuning);
      p.catch(() => {
        if (this.tiled === p) this.tiled = null; // a later call may retry
      });
      this.tiled = p;
    }
    return this.tiled;
  }

  private assertUsable(): void {
    if (this.disposed) throw new ExpertRuntimeError('DISPOSED', {}, `${this.label}: used after dispose()`);
    if (this.lost) {
      throw new ExpertRuntimeError('DEVICE_LOST', { reason: this.lost.reason, message: this.lost.message },
        `${this.label}: the GPU device was lost (${this.lost.reason}): ${this.lost.message}`);
    }
  }
}

/** Gate and up usually share a type and run fused; otherwise each pass uses its own type's module. */
function upPasses(types: SliceTypes): { pass: UpPass; type: GGMLType }[] {
  return types.gate === types.up ? [{ pass: 'fused', type: types.gate }] : [{ pass: 'gate', type: types.gate }, { pass: 'up', type: types.up }];
}

async function buildTiledPipelines(kernels: ExpertFfnKernels, types: SliceTypes, tuning: KernelTuning): Promise<TiledPipelines> {
  const features = 'base' as const;
  const [up, down] = await Promise.all([
    Promise.all(upPasses(types).map(async ({ pass, type }) => ({
      pass,
      pipeline: await kernels.pipeline({ kernel: 'expert_up_tiled', quant: quantSnippet(type), pass, tuning, features }),
    }))),
    kernels.pipeline({ kernel: 'expert_down_tiled', quant: quantSnippet(types.down), tuning, features }),
  ]);
  return { up, down };
}

async function buildPipelines(kernels: ExpertFfnKernels, types: SliceTypes, tuning: KernelTuning): Promise<Pipelines> {
  const features = 'base' as const;
  const [up, down, combine] = await Promise.all([
    Promise.all(upPasses(types).map(async ({ pass, type }) => ({
      pass,
      pipeline: await kernels.pipeline({ kernel: 'expert_up', quant: quantSnippet(type), pass, tuning, features }),
    }))),
    kernels.pipeline({ kernel: 'expert_down', quant: quantSnippet(types.down), tuning, features }),
    kernels.pipeline({ kernel: 'expert_combine', tuning, features }),
  ]);
  return { up, down, combine };
}
