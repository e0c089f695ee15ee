/**
 * TS side of the three expert-FFN kernels (wgsl/expert_up.wgsl, expert_down.wgsl, expert_combine.wgsl): input
 * validation, the shape uniform, dispatch math, module assembly and a pipeline cache keyed by the variant.
 * Buffers and their lifetimes belong to runtime.ts.
 *
 * Per call (nPairs = nTokens · nUsed):
 *   expert_up       h[nPairs × ff]     = silu(gate_e · x) ⊙ (up_e · x)   (two passes when gate and up differ in type)
 *   expert_down     y[nPairs × nEmbd]  = down_e · h
 *   expert_combine  out[nTokens × nEmbd] = Σ_k prob · y
 * In the batched regime (see regime-policy.ts) expert_up_tiled / expert_down_tiled replace the first two, computing
 * the same h and y from pairs grouped by expert (expert-groups.ts); expert_combine is shared.
 */
import { GGMLType, requireQuantType } from '../gguf/quant-types.ts';
import { ExpertRuntimeError, type MatrixName } from './errors.ts';
import { WGSL, type KernelName, type QuantSnippet } from './wgsl-sources.ts';

/** Weight types the kernels read, with their quant snippet. */
export const QUANT_SNIPPETS: ReadonlyMap<GGMLType, QuantSnippet> = new Map<GGMLType, QuantSnippet>([
  [GGMLType.F32, 'f32'],
  [GGMLType.F16, 'f16'],
  [GGMLType.BF16, 'bf16'],
  [GGMLType.Q8_0, 'q8_0'],
  [GGMLType.Q4_0, 'q4_0'],
  [GGMLType.Q4_K, 'q4_k'],
  [GGMLType.Q5_K, 'q5_k'],
  [GGMLType.Q6_K, 'q6_k'],
]);

export interface SliceTypes {
  gate: GGMLType;
  up: GGMLType;
  down: GGMLType;
}

export interface SliceShape {
  nEmbd: number;
  ff: number;
  nExperts: number;
  types: SliceTypes;
}

export interface CallShape {
  nTokens: number;
  nUsed: number;
}

const typeName = (t: number): string => (GGMLType as Record<number, string | undefined>)[t] ?? String(t);

function requirePositiveInt(field: string, value: number): void {
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new ExpertRuntimeError('BAD_SHAPE', { field, value, requirement: 'a positive integer' }, `${field} must be a positive integer, got ${value}`);
  }
}

/** Bytes of one row of `rowLength` elements of `type`. */
export function rowBytes(type: GGMLType, rowLength: number): number {
  const info = requireQuantType(type);
  return (rowLength / info.blockSize) * info.bytesPerBlock;
}

/** Bytes each matrix of a valid slice must have: nExperts × rows × rowBytes. */
export function sliceMatrixBytes(s: SliceShape): Record<MatrixName, number> {
  return {
    gate: s.nExperts * s.ff * rowBytes(s.types.gate, s.nEmbd),
    up: s.nExperts * s.ff * rowBytes(s.types.up, s.nEmbd),
    down: s.nExperts * s.nEmbd * rowBytes(s.types.down, s.ff),
  };
}

/** Checks dimensions, types and byte lengths of a slice; throws ExpertRuntimeError naming what is wrong. */
export function validateSlice(s: SliceShape, bytes: Record<MatrixName, { length: number }>): void {
  requirePositiveInt('nEmbd', s.nEmbd);
  requirePositiveInt('ff', s.ff);
  requirePositiveInt('nExperts', s.nExperts);
  const supported = [...QUANT_SNIPPETS.keys()].map(typeName);
  for (const m of ['gate', 'up', 'down'] as const) {
    const t = s.types[m];
    if (!QUANT_SNIPPETS.has(t)) {
      throw new ExpertRuntimeError('UNSUPPORTED_TYPE', { matrix: m, type: t, typeName: typeName(t), supported },
        `${m}: the expert kernels cannot read ${typeName(t)} weights (supported: ${supported.join(', ')})`);
    }
    const rowLength = m === 'down' ? s.ff : s.nEmbd;
    const block = requireQuantType(t).blockSize;
    if (rowLength % block !== 0) {
      const field = m === 'down' ? 'ff' : 'nEmbd';
      throw new ExpertRuntimeError('BAD_SHAPE', { field, value: rowLength, requirement: `a multiple of ${block} (${m} is ${typeName(t)})` },
        `${field} = ${rowLength} is not a whole number of ${typeName(t)} blocks of ${block} (${m} rows)`);
    }
  }
  const expected = sliceMatrixBytes(s);
  for (const m of ['gate', 'up', 'down'] as const) {
    if (bytes[m].length !== expected[m]) {
      throw new ExpertRuntimeError('BAD_SLICE_BYTES', { matrix: m, expected: expected[m], actual: bytes[m].length },
        `${m}: ${s.nExperts} experts of ${typeName(s.types[m])} need ${expected[m]} bytes, got ${bytes[m].length}`);
    }
  }
}

export interface ExpertFfnInputs {
  rows: { readonly length: number };
  ids: Int32Array;
  probs: { readonly length: number };
}

/** Checks one compute call against its slice; throws ExpertRuntimeError naming the input and the numbers. */
export function validateInputs(s: Pick<SliceShape, 'nEmbd' | 'nExperts'>, call: CallShape, inputs: ExpertFfnInputs): void {
  if (!Number.isSafeInteger(call.nTokens) || call.nTokens < 0) {
    throw new ExpertRuntimeError('BAD_SHAPE', { field: 'nTokens', value: call.nTokens, requirement: 'an integer ≥ 0' }, `nTokens must be an integer ≥ 0, got ${call.nTokens}`);
  }
  requirePositiveInt('nUsed', call.nUsed);
  const nPairs = call.nTokens * call.nUsed;
  const expect = (input: 'rows' | 'ids' | 'probs', expected: number, actual: number, what: string): void => {
    if (actual !== expected) {
      throw new ExpertRuntimeError('BAD_INPUT', { input, expected, actual }, `${input} must hold ${what} = ${expected} values, got ${actual}`);
    }
  };
  expect('rows', call.nTokens * s.nEmbd, inputs.rows.length, `nTokens × nEmbd (${call.nTokens} × ${s.nEmbd})`);
  expect('ids', nPairs, inputs.ids.length, `nTokens × nUsed (${call.nTokens} × ${call.nUsed})`);
  expect('probs', nPairs, inputs.probs.length, `nTokens × nUsed (${call.nTokens} × ${call.nUsed})`);
  for (let i = 0; i < nPairs; i++) {
    const id = inputs.ids[i]!;
    if (id < 0 || id >= s.nExperts) {
      throw new ExpertRuntimeError('ID_OUT_OF_RANGE', { index: i, id, nExperts: s.nExperts },
        `ids[${i}] = ${id} is not an expert of this slice (local indices 0..${s.nExperts - 1})`);
    }
  }
}

/** Fields of `struct Shape` in wgsl/common.wgsl, in declaration order; each is one u32. */
export const SHAPE_FIELDS = [
  'n_embd',
  'ff',
  'n_tokens',
  'n_used',
  'n_experts',
  'n_row_tiles',
  'expert_begin',
  'expert_end',
  'tile_begin',
] as const;
export type ShapeField = (typeof SHAPE_FIELDS)[number];

/** Bytes of the Shape uniform. */
export const SHAPE_UNIFORM_BYTES = SHAPE_FIELDS.length * 4;

/** What one part's dispatches cover: its experts [expertBegin, expertEnd) and, batched, its tiles [tileBegin, + nRowTiles). */
export interface PartDispatch {
  expertBegin: number;
  expertEnd: number;
  tileBegin: number;
  nRowTiles: number;
}

/** The Shape uniform's bytes, written in SHAPE_FIELDS order (the WGSL struct's). */
export function writeShapeUniform(s: Pick<SliceShape, 'nEmbd' | 'ff' | 'nExperts'>, call: CallShape, part: PartDispatch): Uint32Array {
  const values: Record<ShapeField, number> = {
    n_embd: s.nEmbd,
    ff: s.ff,
    n_tokens: call.nTokens,
    n_used: call.nUsed,
    n_experts: s.nExperts,
    n_row_tiles: part.nRowTiles,
    expert_begin: part.expertBegin,
    expert_end: part.expertEnd,
    tile_begin: part.tileBegin,
  };
  return Uint32Array.from(SHAPE_FIELDS, (f) => values[f]);
}

/** Experts per weight binding when each matrix's bytes per expert are `bytesPerExpert` and a binding holds `limit`. */
export function expertsPerPart(bytesPerExpert: Record<MatrixName, number>, limit: number): number {
  // Whole experts only, and each part's buffer is padded to 4 bytes.
  const fits = (b: number): number => {
    let n = Math.floor(limit / b);
    while (n > 0 && Math.ceil((n * b) / 4) * 4 > limit) n--;
    return n;
  };
  return Math.min(...Object.values(bytesPerExpert).map(fits));
}

/** Expert ranges [begin, end) of the parts a slice of nExperts is split into, `perPart` experts each. */
export function partRanges(nExperts: number, perPart: number): [number, number][] {
  const parts: [number, number][] = [];
  for (let b = 0; b < nExperts; b += perPart) parts.push([b, Math.min(nExperts, b + perPart)]);
  return parts;
}

/**
 * Workgroup counts (x, y) for `workgroups` workgroups: 1-D while they fit one dimension, else folded into 2-D; the
 * kernels rebuild the linear index as x + y · num_workgroups.x and skip the padding past `workgroups`.
 */
export function foldDispatch(workgroups: number, maxPerDimension: number): [number, number] {
  if (workgroups <= maxPerDimension) return [workgroups, 1];
  const y = Math.ceil(workgroups / maxPerDimension);
  if (y > maxPerDimension) {
    throw new ExpertRuntimeError('DISPATCH_TOO_LARGE', { workgroups, maxPerDimension },
      `${workgroups} workgroups do not fit a ${maxPerDimension} × ${maxPerDimension} dispatch; send fewer tokens per call`);
  }
  return [Math.ceil(workgroups / y), y];
}

/** Up-kernel pass: fused when gate and up share a type, else a gate pass then an up pass (see expert_up.wgsl). */
export type UpPass = 'fused' | 'gate' | 'up';
const UP_PASS_CONSTANT: Record<UpPass, number> = { fused: 0, gate: 1, up: 2 };

/** Optional WebGPU features the kernels can use; each has its own device feature of the same name. */
export type KernelFeature = 'subgroups' | 'shader-f16';

/**
 * The variant one kernel is built in. 'base' needs nothing optional (f32 math, no subgroups, no shader-f16);
 * 'subgroups' changes the decode kernels' row reduction (reduce_subgroups.wgsl; also needs a subgroup layout
 * confirmed by probeSubgroupLayout); 'shader-f16' stages the batched kernels' tiles in f16 (tile_f16.wgsl).
 */
export type KernelVariant = 'base' | KernelFeature;

/** Which kernels each feature changes; the others are built as 'base'. */
const FEATURE_KERNELS: Readonly<Record<KernelFeature, readonly KernelName[]>> = {
  subgroups: ['expert_up', 'expert_down'],
  'shader-f16': ['expert_up_tiled', 'expert_down_tiled'],
};

/** The variant `kernel` is built in when the runtime uses `features`. */
export function kernelVariant(kernel: KernelName, features: readonly KernelFeature[]): KernelVariant {
  return features.find((f) => FEATURE_KERNELS[f].includes(kernel)) ?? 'base';
}

export interface KernelTuning {
  /** Threads per workgroup; a power of two. */
  workgroupSize: number;
  /** Weight rows per workgroup in expert_up/expert_down; a power of two ≤ workgroupSize. */
  rowsPerWorkgroup: number;
  /** Tiled kernels: pairs of one expert per tile (activation rows a workgroup shares its decoded weights with). */
  tileRows: number;
  /** Tiled kernels: weight rows per workgroup; a power of two dividing workgroupSize. */
  tileCols: number;
}

export type PipelineKey =
  | { kernel: 'expert_up'; quant: QuantSnippet; pass: UpPass; tuning: KernelTuning; variant: KernelVariant }
  | { kernel: 'expert_down'; quant: QuantSnippet; tuning: KernelTuning; variant: KernelVariant }
  | { kernel: 'expert_combine'; tuning: KernelTuning; variant: KernelVariant }
  | { kernel: 'expert_up_tiled'; quant: QuantSnippet; pass: UpPass; tuning: KernelTuning; variant: KernelVariant }
  | { kernel: 'expert_down_tiled'; quant: QuantSnippet; tuning: KernelTuning; variant: KernelVariant };

/**
 * Stable name of a variant, e.g. `expert_up/q4_k/fused/wg64r4/base` or `expert_down_tiled/q6_k/wg64m16n32/base`
 * (m: tile rows, n: tile columns); also the pipeline's label.
 */
export function pipelineName(k: PipelineKey): string {
  const f = k.variant;
  const wg = `wg${k.tuning.workgroupSize}`;
  const tiles = `${wg}m${k.tuning.tileRows}n${k.tuning.tileCols}`;
  switch (k.kernel) {
    case 'expert_up':
      return `expert_up/${k.quant}/${k.pass}/${wg}r${k.tuning.rowsPerWorkgroup}/${f}`;
    case 'expert_down':
      return `expert_down/${k.quant}/${wg}r${k.tuning.rowsPerWorkgroup}/${f}`;
    case 'expert_combine':
      return `expert_combine/${wg}/${f}`;
    case 'expert_up_tiled':
      return `expert_up_tiled/${k.quant}/${k.pass}/${tiles}/${f}`;
    case 'expert_down_tiled':
      return `expert_down_tiled/${k.quant}/${tiles}/${f}`;
  }
}

/**
 * `const`s of the tiled kernels' WGSL (expert_up_tiled.wgsl, expert_down_tiled.wgsl) that TS checks tuning against;
 * a test reads them back from both files.
 */
export const TILED_WGSL_CONSTANTS = { TILE_K: 32, TILE_K4: 8, TILE_K4_PAD: 9, MAX_ROWS_PER_THREAD: 16 } as const;
const { TILE_K4, TILE_K4_PAD, MAX_ROWS_PER_THREAD } = TILED_WGSL_CONSTANTS;

/** Workgroup memory of expert_up_tiled (the larger of the two tiled kernels: two staged weight tiles). */
export function tiledWorkgroupBytes(t: Pick<KernelTuning, 'tileRows' | 'tileCols'>): number {
  const vec4 = 16;
  return vec4 * (t.tileRows * TILE_K4 + 2 * t.tileCols * TILE_K4_PAD) + 4 * t.tileRows;
}

/** WGSL of a (kernel, quant, variant) module: fixed files concatenated, nothing spliced. */
export function moduleSource(kernel: KernelName, quant: QuantSnippet | null, variant: KernelVariant = 'base'): string {
  const enables = variant === 'subgroups' ? ['enable subgroups;'] : variant === 'shader-f16' ? ['enable f16;'] : [];
  if (kernel === 'expert_combine') return [WGSL.common, WGSL.kernels.expert_combine].join('\n');
  if (quant === null) throw new Error(`${kernel} needs a quant snippet`);
  const decode = kernel === 'expert_up' || kernel === 'expert_down';
  const helper = decode ? WGSL.reduce[variant === 'subgroups' ? 'subgroups' : 'base'] : WGSL.tile[variant === 'shader-f16' ? 'f16' : 'f32'];
  return [...enables, WGSL.common, WGSL.weights, WGSL.quant[quant], helper, WGSL.kernels[kernel]].join('\n');
}

export function quantSnippet(type: GGMLType): QuantSnippet {
  const q = QUANT_SNIPPETS.get(type);
  if (!q) throw new Error(`no quant snippet for ${typeName(type)}`);
  return q;
}

const isPow2 = (n: number): boolean => Number.isSafeInteger(n) && n > 0 && (n & (n - 1)) === 0;

/** Checks tuning against the device; throws BAD_OPTION. */
export function validateTuning(t: KernelTuning, limits: GPUSupportedLimits): void {
  const bad = (option: string, value: number, requirement: string): never => {
    throw new ExpertRuntimeError('BAD_OPTION', { option, value, requirement }, `${option} = ${value} must be ${requirement}`);
  };
  const maxWg = Math.min(limits.maxComputeInvocationsPerWorkgroup, limits.maxComputeWorkgroupSizeX);
  if (!isPow2(t.workgroupSize) || t.workgroupSize > maxWg) bad('workgroupSize', t.workgroupSize, `a power of two ≤ ${maxWg}`);
  if (!isPow2(t.rowsPerWorkgroup) || t.rowsPerWorkgroup > t.workgroupSize) {
    bad('rowsPerWorkgroup', t.rowsPerWorkgroup, `a power of two ≤ workgroupSize (${t.workgroupSize})`);
  }
  const wgBytes = 2 * 4 * t.workgroupSize; // expert_up's two partial-sum arrays
  if (wgBytes > limits.maxComputeWorkgroupStorageSize) {
    bad('workgroupSize', t.workgroupSize, `small enough for ${limits.maxComputeWorkgroupStorageSize} B of workgroup memory`);
  }
  if (!isPow2(t.tileCols) || t.tileCols > t.workgroupSize) {
    bad('tileCols', t.tileCols, `a power of two ≤ workgroupSize (${t.workgroupSize})`);
  }
  const rowStride = t.workgroupSize / t.tileCols; // threads sharing one weight row, each with every rowStride-th tile row
  if (!Number.isSafeInteger(t.tileRows) || t.tileRows < rowStride || t.tileRows % rowStride !== 0 || t.tileRows / rowStride > MAX_ROWS_PER_THREAD) {
    bad('tileRows', t.tileRows, `a multiple of workgroupSize / tileCols (${rowStride}) up to ${rowStride * MAX_ROWS_PER_THREAD}`);
  }
  const tiledBytes = tiledWorkgroupBytes(t);
  if (tiledBytes > limits.maxComputeWorkgroupStorageSize) {
    bad('tileCols', t.tileCols, `small enough (with tileRows ${t.tileRows}) for the tiled kernels' ${tiledBytes} B to fit ` +
      `${limits.maxComputeWorkgroupStorageSize} B of workgroup memory`);
  }
}

/**
 * WebGPU's flag values (from the spec), so these modules do not depend on the GPU* globals that Node must install.
 */
export const GPU_FLAGS = {
  SHADER_STAGE_COMPUTE: 0x4,
  BUFFER_MAP_READ: 0x1,
  BUFFER_COPY_SRC: 0x4,
  BUFFER_COPY_DST: 0x8,
  BUFFER_UNIFORM: 0x40,
  BUFFER_STORAGE: 0x80,
  MAP_MODE_READ: 0x1,
} as const;

const storage = (binding: number, type: GPUBufferBindingType): GPUBindGroupLayoutEntry => ({
  binding,
  visibility: GPU_FLAGS.SHADER_STAGE_COMPUTE,
  buffer: { type },
});
const uniform: GPUBindGroupLayoutEntry = { binding: 0, visibility: GPU_FLAGS.SHADER_STAGE_COMPUTE, buffer: { type: 'uniform' } };

const kernelsByDevice = new WeakMap<GPUDevice, ExpertFfnKernels>();

/**
 * Shader modules, layouts and pipelines of one device, cached by variant. Explicit bind group layouts (matching the
 * @binding lists of the .wgsl files) so every variant of a kernel takes the same bind groups. Shapes live in the
 * uniform, so one device needs each variant once whatever slices it loads: runtimes share `forDevice(device)`.
 */
export class ExpertFfnKernels {
  /** The device's shared cache (pipeline builds are slow, seconds on a software adapter). */
  static forDevice(device: GPUDevice): ExpertFfnKernels {
    let k = kernelsByDevice.get(device);
    if (!k) {
      k = new ExpertFfnKernels(device);
      kernelsByDevice.set(device, k);
    }
    return k;
  }

  readonly layouts: Readonly<Record<KernelName, GPUBindGroupLayout>>;
  private readonly pipelineLayouts: Readonly<Record<KernelName, GPUPipelineLayout>>;
  private readonly modules = new Map<string, GPUShaderModule>();
  private readonly pipelines = new Map<string, Promise<GPUComputePipeline>>();
  private readonly probes = new Map<number, Promise<SubgroupLayout>>();

  constructor(private readonly device: GPUDevice) {
    const bgl = (label: string, entries: GPUBindGroupLayoutEntry[]): GPUBindGroupLayout =>
      device.createBindGroupLayout({ label, entries });
    this.layouts = {
      // uniform, gate_w, up_w, rows, ids, h
      expert_up: bgl('expert_up bind group layout', [uniform, storage(1, 'read-only-storage'), storage(2, 'read-only-storage'),
        storage(3, 'read-only-storage'), storage(4, 'read-only-storage'), storage(5, 'storage')]),
      // uniform, down_w, h, ids, y
      expert_down: bgl('expert_down bind group layout', [uniform, storage(1, 'read-only-storage'), storage(2, 'read-only-storage'),
        storage(3, 'read-only-storage'), storage(4, 'storage')]),
      // uniform, y, probs, out
      expert_combine: bgl('expert_combine bind group layout', [uniform, storage(1, 'read-only-storage'), storage(2, 'read-only-storage'),
        storage(3, 'storage')]),
      // uniform, gate_w, up_w, rows, perm, tiles, h
      expert_up_tiled: bgl('expert_up_tiled bind group layout', [uniform, storage(1, 'read-only-storage'), storage(2, 'read-only-storage'),
        storage(3, 'read-only-storage'), storage(4, 'read-only-storage'), storage(5, 'read-only-storage'), storage(6, 'storage')]),
      // uniform, down_w, h, perm, tiles, y
      expert_down_tiled: bgl('expert_down_tiled bind group layout', [uniform, storage(1, 'read-only-storage'), storage(2, 'read-only-storage'),
        storage(3, 'read-only-storage'), storage(4, 'read-only-storage'), storage(5, 'storage')]),
    };
    const pl = (k: KernelName): GPUPipelineLayout =>
      device.createPipelineLayout({ label: `${k} pipeline layout`, bindGroupLayouts: [this.layouts[k]] });
    this.pipelineLayouts = {
      expert_up: pl('expert_up'),
      expert_down: pl('expert_down'),
      expert_combine: pl('expert_combine'),
      expert_up_tiled: pl('expert_up_tiled'),
      expert_down_tiled: pl('expert_down_tiled'),
    };
  }

  /**
   * Whether this device's subgroups have the layout reduce_subgroups.wgsl needs for workgroups of `workgroupSize`
   * (see subgroup_probe.wgsl): one small dispatch, once per device and size.
   */
  subgroupLayout(workgroupSize: number): Promise<SubgroupLayout> {
    let p = this.probes.get(workgroupSize);
    if (!p) {
      p = probeSubgroupLayout(this.device, workgroupSize);
      this.probes.set(workgroupSize, p);
    }
    return p;
  }

  /** The pipeline of a variant, built once (concurrent callers share the build). */
  pipeline(key: PipelineKey): Promise<GPUComputePipeline> {
    const name = pipelineName(key);
    let p = this.pipelines.get(name);
    if (!p) {
      p = this.build(key, name);
      this.pipelines.set(name, p);
      p.catch(() => this.pipelines.delete(name));
    }
    return p;
  }

  private async build(key: PipelineKey, name: string): Promise<GPUComputePipeline> {
    const quant = key.kernel === 'expert_combine' ? null : key.quant;
    const module = await this.module(key.kernel, quant, key.variant);
    // Only the overrides a module declares: naming another one is a validation error.
    const constants: Record<string, number> = { WORKGROUP_SIZE: key.tuning.workgroupSize };
    if (key.kernel === 'expert_up' || key.kernel === 'expert_down') constants.ROWS_PER_WORKGROUP = key.tuning.rowsPerWorkgroup;
    if (key.kernel === 'expert_up_tiled' || key.kernel === 'expert_down_tiled') {
      constants.TILE_ROWS = key.tuning.tileRows;
      constants.TILE_COLS = key.tuning.tileCols;
    }
    if (key.kernel === 'expert_up' || key.kernel === 'expert_up_tiled') constants.PASS = UP_PASS_CONSTANT[key.pass];
    try {
      return await this.device.createComputePipelineAsync({
        label: name,
        layout: this.pipelineLayouts[key.kernel],
        compute: { module, entryPoint: 'main', constants },
      });
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      throw new ExpertRuntimeError('SHADER_COMPILE', { pipeline: name, messages: [message] }, `pipeline ${name} failed: ${message}`);
    }
  }

  private async module(kernel: KernelName, quant: QuantSnippet | null, variant: KernelVariant): Promise<GPUShaderModule> {
    const label = `${quant ? `${kernel}/${quant}` : kernel}/${variant}`;
    const cached = this.modules.get(label);
    if (cached) return cached;
    const module = this.device.createShaderModule({ label, code: moduleSource(kernel, quant, variant) });
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((m) => m.type === 'error').map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
    if (errors.length > 0) {
      throw new ExpertRuntimeError('SHADER_COMPILE', { pipeline: label, messages: errors }, `shader module ${label} failed to compile:\n${errors.join('\n')}`);
    }
    this.modules.set(label, module);
    return module;
  }
}

/** Workgroups of expert_up / expert_down for a call (before folding). */
export function rowKernelWorkgroups(nPairs: number, rows: number, rowsPerWorkgroup: number): number {
  return nPairs * Math.ceil(rows / rowsPerWorkgroup);
}

/** Workgroups of expert_up_tiled / expert_down_tiled (before folding): every row tile × every column tile of `rows`. */
export function tiledWorkgroups(nRowTiles: number, rows: number, tileCols: number): number {
  return nRowTiles * Math.ceil(rows / tileCols);
}

/** Workgroups of expert_combine for a call (before folding). */
export function combineWorkgroups(nTokens: number, nEmbd: number, workgroupSize: number): number {
  return Math.ceil((nTokens * nEmbd) / workgroupSize);
}

/** Outcome of the subgroup layout probe. */
export interface SubgroupLayout {
  usable: boolean;
  /** The subgroup size seen (when the probe ran). */
  subgroupSize?: number;
  /** Why not usable, or what was confirmed. */
  reason: string;
}

async function probeSubgroupLayout(device: GPUDevice, workgroupSize: number): Promise<SubgroupLayout> {
  if (!device.features.has('subgroups')) return { usable: false, reason: "the device was created without the 'subgroups' feature" };
  const F = GPU_FLAGS;
  const bytes = workgroupSize * 16;
  const out = device.createBuffer({ label: 'subgroup probe out', size: bytes, usage: F.BUFFER_STORAGE | F.BUFFER_COPY_SRC });
  const read = device.createBuffer({ label: 'subgroup probe readback', size: bytes, usage: F.BUFFER_MAP_READ | F.BUFFER_COPY_DST });
  try {
    const module = device.createShaderModule({ label: 'subgroup_probe', code: ['enable subgroups;', WGSL.subgroupProbe].join('\n') });
    const pipeline = await device.createComputePipelineAsync({
      label: `subgroup_probe/wg${workgroupSize}`,
      layout: 'auto',
      compute: { module, entryPoint: 'main', constants: { WORKGROUP_SIZE: workgroupSize } },
    });
    const encoder = device.createCommandEncoder({ label: 'subgroup probe' });
    const pass = encoder.beginComputePass({ label: 'subgroup probe' });
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, device.createBindGroup({ label: 'subgroup probe', layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: out } }] }));
    pass.dispatchWorkgroups(1);
    pass.end();
    encoder.copyBufferToBuffer(out, 0, read, 0, bytes);
    device.queue.submit([encoder.finish()]);
    await read.mapAsync(F.MAP_MODE_READ);
    const v = new Uint32Array(read.getMappedRange().slice(0));
    read.unmap();
    return judgeSubgroupLayout(v, workgroupSize);
  } catch (e) {
    return { usable: false, reason: `the probe failed: ${e instanceof Error ? e.message : String(e)}` };
  } finally {
    out.destroy();
    read.destroy();
  }
}

/** Pure verdict on probe output: (subgroup invocation id, subgroup size, smallest lid of the subgroup, 0) per lid. */
export function judgeSubgroupLayout(v: Uint32Array, workgroupSize: number): SubgroupLayout {
  const size = v[1]!;
  if (!isPow2(size)) return { usable: false, subgroupSize: size, reason: `subgroup size ${size} is not a power of two` };
  for (let lid = 0; lid < workgroupSize; lid++) {
    const [lane, n, first] = [v[4 * lid]!, v[4 * lid + 1]!, v[4 * lid + 2]!];
    if (n !== size) return { usable: false, subgroupSize: size, reason: `subgroup sizes differ within a workgroup (${size} and ${n})` };
    if (lane !== lid % size) return { usable: false, subgroupSize: size, reason: `invocation ${lid} is subgroup lane ${lane}, not ${lid % size}` };
    if (first !== lid - lane) {
      return { usable: false, subgroupSize: size, reason: `invocation ${lid}'s subgroup starts at invocation ${first}, not ${lid - lane}: not a contiguous run` };
    }
  }
  return { usable: true, subgroupSize: size, reason: `subgroups of ${size} in local invocation order` };
}
