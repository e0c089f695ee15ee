/**
 * TS side of the expert-FFN kernels (wgsl/expert_up.wgsl, expert_down.wgsl and their batched forms
 * expert_up_batched.wgsl, expert_down_batched.wgsl, and expert_combine.wgsl): the weight types they read, their
 * variants by optional feature, the tuning and its checks, module assembly (fixed files concatenated, shapes only in
 * uniforms and `override`s) and a pipeline cache per device keyed by kernel / quant / pass / tuning / variant. The
 * expert FFN variant (its activation — silu, swiglu_oai, swiglu_clamp, silu_limit, gelu — with or without biases and
 * per-expert scales: WGSL_VARIANT_FEATURES) is a set of override constants of the up and down pipelines
 * (wgsl/ffn_variant.wgsl, variantConstants), so one module serves every variant and a silu slice's pipelines fold the
 * others' branches away.
 * What a call dispatches is call-plan.ts's; buffers and their lifetimes belong to device-state.ts and call-run.ts.
 */
import { GGMLType, typeName } from '../gguf/quant-types.ts';
import { SILU_VARIANT, type ExpertActivation, type ExpertVariant, type VariantFeature } from '../protocol/variant.ts';
import type { Numerics } from '../protocol/numerics.ts';
import { ExpertRuntimeError } from './errors.ts';
import { GPU_FLAGS } from './gpu-flags.ts';
import type { SupportedTypes } from './slice.ts';
import { probeSubgroupLayout, type SubgroupLayout } from './subgroup-probe.ts';
import { WGSL, type Int8Quant, type KernelName, type QuantSnippet } from './wgsl-sources.ts';

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
  [GGMLType.MXFP4, 'mxfp4'],
  [GGMLType.IQ4_NL, 'iq4_nl'],
  [GGMLType.Q5_1, 'q5_1'],
  [GGMLType.Q4_1, 'q4_1'],
  [GGMLType.Q2_K, 'q2_k'],
  [GGMLType.Q3_K, 'q3_k'],
  [GGMLType.Q5_0, 'q5_0'],
  [GGMLType.IQ4_XS, 'iq4_xs'],
  [GGMLType.IQ2_XXS, 'iq2_xxs'],
  [GGMLType.IQ2_XS, 'iq2_xs'],
  [GGMLType.IQ3_XXS, 'iq3_xxs'],
  [GGMLType.IQ1_S, 'iq1_s'],
  [GGMLType.IQ1_M, 'iq1_m'],
]);

/** Weight types with an integer block dot against 8-bit activations (llama numerics; wgsl/int8/), with their snippet. */
export const INT8_SNIPPETS: ReadonlyMap<GGMLType, Int8Quant> = new Map<GGMLType, Int8Quant>([
  [GGMLType.Q8_0, 'q8_0'],
  [GGMLType.Q4_0, 'q4_0'],
  [GGMLType.Q4_K, 'q4_k'],
  [GGMLType.Q5_K, 'q5_k'],
  [GGMLType.Q6_K, 'q6_k'],
  [GGMLType.MXFP4, 'mxfp4'],
  [GGMLType.IQ4_NL, 'iq4_nl'],
  [GGMLType.Q5_1, 'q5_1'],
  [GGMLType.Q4_1, 'q4_1'],
  [GGMLType.Q2_K, 'q2_k'],
  [GGMLType.Q3_K, 'q3_k'],
  [GGMLType.Q5_0, 'q5_0'],
  [GGMLType.IQ4_XS, 'iq4_xs'],
  [GGMLType.IQ2_XXS, 'iq2_xxs'],
  [GGMLType.IQ2_XS, 'iq2_xs'],
  [GGMLType.IQ3_XXS, 'iq3_xxs'],
  [GGMLType.IQ1_S, 'iq1_s'],
  [GGMLType.IQ1_M, 'iq1_m'],
]);

/**
 * Invocations per weight row in the int8 kernels (expert_up_q8 / expert_down_q8): one per lane of ggml's 8-float
 * accumulator, so that each lane's float chain runs as the CPU's does (wgsl/int8/q8_0.wgsl); a workgroup serves
 * workgroupSize / INT8_LANES rows (call-plan.ts int8RowsPerWorkgroup).
 */
export const INT8_LANES = 8;

/**
 * How the int8 kernels (expert_up_q8, expert_down_q8) multiply four int8 pairs: 'packed' with WGSL's dot4I8Packed
 * (the packed_4x8_integer_dot_product language feature), 'unpacked' by sign-extending the bytes and multiplying in
 * i32 where that feature is missing. Both are exact, and both kernels follow ggml's x86 vec_dot lane by lane, so
 * their results are the coordinator's bit for bit.
 */
export type Int8Dot = 'packed' | 'unpacked';

/**
 * How a runtime in llama numerics computes the dot products of 8-bit-rounded activations in the decode regime: with
 * the int8 kernels ('packed' or 'unpacked', see Int8Dot), or 'float': the rounded values through the float kernels
 * (the same result up to f32 summation order; always the batched regime's way).
 */
export type IntegerDot = Int8Dot | 'float';

/** The WGSL language feature the 'packed' int8 kernels need. */
export const PACKED_DOT_LANGUAGE_FEATURE = 'packed_4x8_integer_dot_product';

/** The expert FFN variants the kernels compute (protocol/variant.ts), for validateVariant (slice.ts). */
export const WGSL_VARIANT_FEATURES: readonly VariantFeature[] = [
  'silu',
  'swiglu_oai',
  'swiglu_clamp',
  'silu_limit',
  'gelu',
  'bias',
  'scale',
];

/** The weight types the kernels read, for validateSlice (slice.ts). */
export const KERNEL_TYPES: SupportedTypes = { types: [...QUANT_SNIPPETS.keys()], cannot: 'the expert kernels cannot read' };

/** Up-kernel pass: fused when gate and up share a type, else a gate pass then an up pass (see expert_up.wgsl). */
export type UpPass = 'fused' | 'gate' | 'up';
const UP_PASS_CONSTANT: Record<UpPass, number> = { fused: 0, gate: 1, up: 2 };

/** Optional WebGPU features the kernels can use; each has its own device feature of the same name. */
export type KernelFeature = 'subgroups' | 'shader-f16';

/**
 * The variant one kernel is built in. 'base' needs nothing optional (f32 math, no subgroups, no shader-f16);
 * 'subgroups' changes the decode kernels' row reduction (reduce_subgroups.wgsl; also needs a subgroup layout
 * confirmed by probeSubgroupLayout, subgroup-probe.ts); 'shader-f16' stages the batched kernels' tiles in f16
 * (tile_f16.wgsl).
 */
export type KernelVariant = 'base' | KernelFeature;

/** Which kernels each feature changes; the others are built as 'base'. */
const FEATURE_KERNELS: Readonly<Record<KernelFeature, readonly KernelName[]>> = {
  subgroups: ['expert_up', 'expert_down', 'expert_up_q8', 'expert_down_q8'],
  'shader-f16': ['expert_up_batched', 'expert_down_batched'],
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
  /** Batched kernels: pairs of one expert per tile (activation rows a workgroup shares its decoded weights with). */
  tileRows: number;
  /** Batched kernels: weight rows per workgroup; a power of two dividing workgroupSize. */
  tileCols: number;
}

/**
 * What an up or down kernel computes besides its matrices (ffn_variant.wgsl's override constants): the slice's expert FFN
 * variant, and for gelu whether it reads ggml's f16 table (llama numerics) or computes the formula (kernelFfn).
 */
export type KernelFfn = ExpertVariant & { geluTable?: boolean };

/** The kernels' variant of a slice's `variant` in `numerics`: gelu reads ggml's table in llama numerics. */
export function kernelFfn(variant: ExpertVariant, numerics: Numerics): KernelFfn {
  return variant.activation === 'gelu' && numerics === 'llama' ? { ...variant, geluTable: true } : { ...variant };
}

/** Absent: silu without biases or scales, the overrides' defaults. */
type FfnOf = { ffn?: KernelFfn };

// The decode and batched float kernels share one member each (a key with `kernel: 'expert_up' | 'expert_up_batched'`
// and a QuantSnippet would otherwise be more combinations than TypeScript matches against a union).
export type PipelineKey =
  | ({ kernel: 'expert_up' | 'expert_up_batched'; quant: QuantSnippet; pass: UpPass; tuning: KernelTuning; variant: KernelVariant } & FfnOf)
  | ({ kernel: 'expert_down' | 'expert_down_batched'; quant: QuantSnippet; tuning: KernelTuning; variant: KernelVariant } & FfnOf)
  | { kernel: 'expert_combine'; tuning: KernelTuning; variant: KernelVariant }
  | ({ kernel: 'expert_up_q8'; quant: Int8Quant; pass: UpPass; tuning: KernelTuning; variant: KernelVariant; dot: Int8Dot } & FfnOf)
  | ({ kernel: 'expert_down_q8'; quant: Int8Quant; tuning: KernelTuning; variant: KernelVariant; dot: Int8Dot } & FfnOf);

/** Whether `v` is what every slice before issue 25 computes (the overrides' defaults; no name suffix). */
const isPlainSilu = (v: ExpertVariant): boolean => v.activation === 'silu' && !v.biases && !v.scales;

/** ffn_variant.wgsl's ACT_ constants. */
const ACTIVATION_CONSTANT: Record<ExpertActivation, number> = { silu: 0, swiglu_oai: 1, swiglu_clamp: 2, silu_limit: 3, gelu: 4 };

/**
 * The override constants of ffn_variant.wgsl for `v`. α is passed as the f32 it is (GPT_OSS_VARIANT's is
 * Math.fround(1.702)), so the kernels use the same α as llama.cpp's float.
 */
export function variantConstants(v: KernelFfn): Record<string, number> {
  return {
    ACTIVATION: ACTIVATION_CONSTANT[v.activation],
    SWIGLU_ALPHA: Math.fround(v.alpha),
    SWIGLU_LIMIT: Math.fround(v.limit),
    HAS_BIASES: v.biases ? 1 : 0,
    HAS_SCALES: v.scales ? 1 : 0,
    GELU_TABLE: v.activation === 'gelu' && v.geluTable ? 1 : 0,
  };
}

/**
 * Pipeline-name suffix of a variant: '' for plain silu, else e.g. `/swiglu_oai-a1.7020000219345093-l7+bias`,
 * `/silu_limit-l7+scale`, `/gelu-table+bias+scale` (llama numerics) or `/gelu` (the formula).
 */
function ffnSuffix(v: KernelFfn | undefined): string {
  if (!v || isPlainSilu(v)) return '';
  const L = Math.fround(v.limit);
  const act =
    v.activation === 'swiglu_oai'
      ? `swiglu_oai-a${Math.fround(v.alpha)}-l${L}`
      : v.activation === 'swiglu_clamp' || v.activation === 'silu_limit'
        ? `${v.activation}-l${L}`
        : v.activation === 'gelu' && v.geluTable
          ? 'gelu-table'
          : v.activation;
  return `/${act}${v.biases ? '+bias' : ''}${v.scales ? '+scale' : ''}`;
}

/**
 * Stable name of a variant, e.g. `expert_up/q4_k/fused/wg64r4/base`, `expert_down_batched/q6_k/wg64m16n32/base`
 * (m: tile rows, n: tile columns) or `expert_up_q8/q4_k/fused/wg64/subgroups/packed` (8 invocations per row, so
 * no rows-per-workgroup); an expert FFN variant other than plain silu adds its own suffix (ffnSuffix); also the
 * pipeline's label.
 */
export function pipelineName(k: PipelineKey): string {
  const f = k.kernel === 'expert_combine' ? k.variant : `${k.variant}${ffnSuffix(k.ffn)}`;
  const wg = `wg${k.tuning.workgroupSize}`;
  const tiles = `${wg}m${k.tuning.tileRows}n${k.tuning.tileCols}`;
  switch (k.kernel) {
    case 'expert_up':
      return `expert_up/${k.quant}/${k.pass}/${wg}r${k.tuning.rowsPerWorkgroup}/${f}`;
    case 'expert_down':
      return `expert_down/${k.quant}/${wg}r${k.tuning.rowsPerWorkgroup}/${f}`;
    case 'expert_combine':
      return `expert_combine/${wg}/${f}`;
    case 'expert_up_batched':
      return `expert_up_batched/${k.quant}/${k.pass}/${tiles}/${f}`;
    case 'expert_down_batched':
      return `expert_down_batched/${k.quant}/${tiles}/${f}`;
    case 'expert_up_q8':
      return `expert_up_q8/${k.quant}/${k.pass}/${wg}/${f}/${k.dot}`;
    case 'expert_down_q8':
      return `expert_down_q8/${k.quant}/${wg}/${f}/${k.dot}`;
  }
}

/**
 * `const`s of the batched kernels' WGSL (expert_up_batched.wgsl, expert_down_batched.wgsl) that TS checks tuning
 * against; a test reads them back from both files.
 */
export const BATCHED_WGSL_CONSTANTS = { TILE_K: 32, TILE_K4: 8, TILE_K4_PAD: 9, MAX_ROWS_PER_THREAD: 16 } as const;
const { TILE_K4, TILE_K4_PAD, MAX_ROWS_PER_THREAD } = BATCHED_WGSL_CONSTANTS;

/** Workgroup memory of expert_up_batched (the larger of the two batched kernels: two staged weight tiles). */
export function batchedWorkgroupBytes(t: Pick<KernelTuning, 'tileRows' | 'tileCols'>): number {
  const vec4 = 16;
  return vec4 * (t.tileRows * TILE_K4 + 2 * t.tileCols * TILE_K4_PAD) + 4 * t.tileRows;
}

/**
 * WGSL of a (kernel, quant, variant) module: fixed files concatenated, nothing spliced. The int8 kernels
 * (expert_up_q8, expert_down_q8) also take the integer dot's form (`dot`, default 'unpacked').
 */
export function moduleSource(
  kernel: KernelName,
  quant: QuantSnippet | null,
  variant: KernelVariant = 'base',
  dot: Int8Dot = 'unpacked',
): string {
  const enables = variant === 'subgroups' ? ['enable subgroups;'] : variant === 'shader-f16' ? ['enable f16;'] : [];
  if (kernel === 'expert_combine') return [WGSL.common, WGSL.kernels.expert_combine].join('\n');
  if (quant === null) throw new Error(`${kernel} needs a quant snippet`);
  if (kernel === 'expert_up_q8' || kernel === 'expert_down_q8') {
    const int8 = WGSL.int8[quant as Int8Quant];
    if (!int8) throw new Error(`${kernel}: no integer block dot for ${quant}`);
    const requires = dot === 'packed' ? [`requires ${PACKED_DOT_LANGUAGE_FEATURE};`] : [];
    const lanes = WGSL.lanes[variant === 'subgroups' ? 'subgroups' : 'base'];
    return [
      ...requires,
      ...enables,
      WGSL.common,
      WGSL.variant,
      WGSL.weights,
      WGSL.ggmlMath,
      WGSL.quant[quant],
      WGSL.dot[dot],
      int8,
      lanes,
      WGSL.kernels[kernel],
    ].join('\n');
  }
  const decode = kernel === 'expert_up' || kernel === 'expert_down';
  const helper = decode ? WGSL.reduce[variant === 'subgroups' ? 'subgroups' : 'base'] : WGSL.tile[variant === 'shader-f16' ? 'f16' : 'f32'];
  return [...enables, WGSL.common, WGSL.variant, WGSL.weights, WGSL.quant[quant], helper, WGSL.kernels[kernel]].join('\n');
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
  // At least one row of the int8 kernels (INT8_LANES invocations each).
  if (!isPow2(t.workgroupSize) || t.workgroupSize < INT8_LANES || t.workgroupSize > maxWg) {
    bad('workgroupSize', t.workgroupSize, `a power of two from ${INT8_LANES} to ${maxWg}`);
  }
  if (!isPow2(t.rowsPerWorkgroup) || t.rowsPerWorkgroup > t.workgroupSize) {
    bad('rowsPerWorkgroup', t.rowsPerWorkgroup, `a power of two ≤ workgroupSize (${t.workgroupSize})`);
  }
  const wgBytes = 4 * 4 * t.workgroupSize; // expert_up_q8's lane sums (vec4 per invocation), the most of the decode kernels
  if (wgBytes > limits.maxComputeWorkgroupStorageSize) {
    bad('workgroupSize', t.workgroupSize, `small enough for ${limits.maxComputeWorkgroupStorageSize} B of workgroup memory`);
  }
  if (!isPow2(t.tileCols) || t.tileCols > t.workgroupSize) {
    bad('tileCols', t.tileCols, `a power of two ≤ workgroupSize (${t.workgroupSize})`);
  }
  const rowStride = t.workgroupSize / t.tileCols; // threads sharing one weight row, each with every rowStride-th tile row
  if (
    !Number.isSafeInteger(t.tileRows) ||
    t.tileRows < rowStride ||
    t.tileRows % rowStride !== 0 ||
    t.tileRows / rowStride > MAX_ROWS_PER_THREAD
  ) {
    bad('tileRows', t.tileRows, `a multiple of workgroupSize / tileCols (${rowStride}) up to ${rowStride * MAX_ROWS_PER_THREAD}`);
  }
  const batchedBytes = batchedWorkgroupBytes(t);
  if (batchedBytes > limits.maxComputeWorkgroupStorageSize) {
    bad(
      'tileCols',
      t.tileCols,
      `small enough (with tileRows ${t.tileRows}) for the batched kernels' ${batchedBytes} B to fit ` +
        `${limits.maxComputeWorkgroupStorageSize} B of workgroup memory`,
    );
  }
}

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
    const bgl = (label: string, entries: GPUBindGroupLayoutEntry[]): GPUBindGroupLayout => device.createBindGroupLayout({ label, entries });
    this.layouts = {
      // uniform, gate_w, up_w, rows, ids, h, variant_words
      expert_up: bgl('expert_up bind group layout', [
        uniform,
        storage(1, 'read-only-storage'),
        storage(2, 'read-only-storage'),
        storage(3, 'read-only-storage'),
        storage(4, 'read-only-storage'),
        storage(5, 'storage'),
        storage(6, 'read-only-storage'),
      ]),
      // uniform, down_w, h, ids, y, variant_words
      expert_down: bgl('expert_down bind group layout', [
        uniform,
        storage(1, 'read-only-storage'),
        storage(2, 'read-only-storage'),
        storage(3, 'read-only-storage'),
        storage(4, 'storage'),
        storage(5, 'read-only-storage'),
      ]),
      // uniform, y, probs, out
      expert_combine: bgl('expert_combine bind group layout', [
        uniform,
        storage(1, 'read-only-storage'),
        storage(2, 'read-only-storage'),
        storage(3, 'storage'),
      ]),
      // uniform, gate_w, up_w, rows, perm, tiles, h, variant_words
      expert_up_batched: bgl('expert_up_batched bind group layout', [
        uniform,
        storage(1, 'read-only-storage'),
        storage(2, 'read-only-storage'),
        storage(3, 'read-only-storage'),
        storage(4, 'read-only-storage'),
        storage(5, 'read-only-storage'),
        storage(6, 'storage'),
        storage(7, 'read-only-storage'),
      ]),
      // uniform, down_w, h, perm, tiles, y, variant_words
      expert_down_batched: bgl('expert_down_batched bind group layout', [
        uniform,
        storage(1, 'read-only-storage'),
        storage(2, 'read-only-storage'),
        storage(3, 'read-only-storage'),
        storage(4, 'read-only-storage'),
        storage(5, 'storage'),
        storage(6, 'read-only-storage'),
      ]),
      // uniform, gate_w, up_w, act_qs, ids, h, act_d, variant_words
      expert_up_q8: bgl('expert_up_q8 bind group layout', [
        uniform,
        storage(1, 'read-only-storage'),
        storage(2, 'read-only-storage'),
        storage(3, 'read-only-storage'),
        storage(4, 'read-only-storage'),
        storage(5, 'storage'),
        storage(6, 'read-only-storage'),
        storage(7, 'read-only-storage'),
      ]),
      // uniform, down_w, act_qs, ids, y, act_d, variant_words
      expert_down_q8: bgl('expert_down_q8 bind group layout', [
        uniform,
        storage(1, 'read-only-storage'),
        storage(2, 'read-only-storage'),
        storage(3, 'read-only-storage'),
        storage(4, 'storage'),
        storage(5, 'read-only-storage'),
        storage(6, 'read-only-storage'),
      ]),
    };
    const pl = (k: KernelName): GPUPipelineLayout =>
      device.createPipelineLayout({ label: `${k} pipeline layout`, bindGroupLayouts: [this.layouts[k]] });
    this.pipelineLayouts = {
      expert_up: pl('expert_up'),
      expert_down: pl('expert_down'),
      expert_combine: pl('expert_combine'),
      expert_up_batched: pl('expert_up_batched'),
      expert_down_batched: pl('expert_down_batched'),
      expert_up_q8: pl('expert_up_q8'),
      expert_down_q8: pl('expert_down_q8'),
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
    const dot = key.kernel === 'expert_up_q8' || key.kernel === 'expert_down_q8' ? key.dot : null;
    const module = await this.module(key.kernel, quant, key.variant, dot);
    // Only the overrides a module declares: naming another one is a validation error.
    const constants: Record<string, number> = { WORKGROUP_SIZE: key.tuning.workgroupSize };
    if (key.kernel === 'expert_up' || key.kernel === 'expert_down') constants.ROWS_PER_WORKGROUP = key.tuning.rowsPerWorkgroup;
    if (key.kernel === 'expert_up_batched' || key.kernel === 'expert_down_batched') {
      constants.TILE_ROWS = key.tuning.tileRows;
      constants.TILE_COLS = key.tuning.tileCols;
    }
    if (key.kernel === 'expert_up' || key.kernel === 'expert_up_batched' || key.kernel === 'expert_up_q8')
      constants.PASS = UP_PASS_CONSTANT[key.pass];
    if (key.kernel !== 'expert_combine') Object.assign(constants, variantConstants(key.ffn ?? SILU_VARIANT));
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

  private async module(
    kernel: KernelName,
    quant: QuantSnippet | null,
    variant: KernelVariant,
    dot: Int8Dot | null,
  ): Promise<GPUShaderModule> {
    const label = `${quant ? `${kernel}/${quant}` : kernel}/${variant}${dot ? `/${dot}` : ''}`;
    const cached = this.modules.get(label);
    if (cached) return cached;
    const module = this.device.createShaderModule({ label, code: moduleSource(kernel, quant, variant, dot ?? undefined) });
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((m) => m.type === 'error').map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
    if (errors.length > 0) {
      throw new ExpertRuntimeError(
        'SHADER_COMPILE',
        { pipeline: label, messages: errors },
        `shader module ${label} failed to compile:\n${errors.join('\n')}`,
      );
    }
    this.modules.set(label, module);
    return module;
  }
}
