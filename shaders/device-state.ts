/**
 * Everything of an ExpertRuntime that lives on one device (`GpuState`): the chosen kernel features, the pipelines,
 * the weight buffers (split into parts, filled from bytes or a slice stream) and the per-call buffer pool. A state is
 * built whole on a device, released whole, and built again on a new device after a loss (runtime.ts's recovery).
 */
import { GGUFError } from '../gguf/errors.ts';
import { EXPERT_MATRICES, ExpertSliceError } from '../gguf/expert-slice.ts';
import { readExpertSliceStream } from '../gguf/expert-slice-stream.ts';
import { typeName, type GGMLType } from '../gguf/quant-types.ts';
import { describeVariant, sameVariant, SILU_VARIANT, type ExpertVariant } from '../protocol/variant.ts';
import { BufferPool } from './buffer-pool.ts';
import { bindingLimit, callRounding, type CallRounding, type RoundStep } from './call-plan.ts';
import type { Numerics } from '../protocol/numerics.ts';
import { ExpertRuntimeError } from './errors.ts';
import {
  ExpertFfnKernels,
  INT8_SNIPPETS,
  KERNEL_TYPES,
  PACKED_DOT_LANGUAGE_FEATURE,
  kernelFfn,
  kernelVariant,
  quantSnippet,
  validateTuning,
  WGSL_VARIANT_FEATURES,
  type Int8Dot,
  type IntegerDot,
  type KernelFeature,
  type KernelTuning,
  type UpPass,
} from './expert-ffn.ts';
import type { Regime, RegimePolicy } from './regime-policy.ts';
import { roundKernels, type RoundKernels } from './round-activations.ts';
import {
  sliceMatrixBytes,
  validateSlice,
  validateVariant,
  validateVariantFeatures,
  type ExpertSlice,
  type SliceShape,
  type SliceStreamSource,
  type SliceTypes,
} from './slice.ts';
import {
  WeightWriter,
  createBiasBuffer,
  createWeightParts,
  destroyWeightParts,
  planParts,
  writeBiases,
  writeGeluTable,
  writeScales,
  type VariantData,
  type WeightPart,
} from './weight-parts.ts';

/** What a state's variant buffer holds (weight-parts.ts): gelu reads ggml's table in llama numerics only. */
function variantData(settings: Settings): VariantData {
  const v = settings.variant;
  return { biases: v.biases, scales: !!v.scales, geluTable: kernelFfn(v, settings.numerics).geluTable === true };
}

/** The runtime's options, checked (runtime.ts makeSettings): what every device state is built with. */
export interface Settings {
  tuning: KernelTuning;
  policy: RegimePolicy;
  maxWorkgroupsPerDimension: number | undefined;
  maxBindingBytes: number | undefined;
  maxWeightBytes: number | undefined;
  features: 'auto' | readonly KernelFeature[];
  numerics: Numerics;
  integerDot: 'auto' | IntegerDot;
  label: string;
  /**
   * The slice's expert FFN variant (validated: validateVariant): built into the up and down pipelines as override
   * constants (ffn_variant.wgsl), so a silu slice's kernels are the ones it always had.
   */
  variant: ExpertVariant;
}

/**
 * The up pipelines (one per up pass) and the down pipeline of one regime, with the roundings they read (llama
 * numerics) and the round_activations pipelines that make them.
 */
export interface Pipelines {
  up: { pass: UpPass; pipeline: GPUComputePipeline }[];
  down: GPUComputePipeline;
  /** callRounding for this regime: where a step is packed, its kernel is the int8 one (expert_up_q8 / expert_down_q8). */
  rounding: CallRounding;
  /** round_activations pipelines by roundKey(step). */
  round: Map<string, GPUComputePipeline>;
}

/** Key of a rounding's pipeline in Pipelines.round. */
export const roundKey = (step: RoundStep): string => `${step.mode}${step.packed ? '/packed' : ''}`;

/**
 * What an 'auto' integerDot falls back to where dot4I8Packed is missing: the unpacked int8 kernels, which compute as
 * the coordinator does bit for bit like the packed ones (the float kernels agree only to f32 summation order, and an
 * element of h near a rounding boundary can then round the other way; docs/numerics.md).
 */
export const INTEGER_DOT_FALLBACK: IntegerDot = 'unpacked';

/** Everything that lives on one device; rebuilt whole on a new device after a loss. */
export interface GpuState {
  device: GPUDevice;
  /** Devices the runtime requested itself (recovery) are destroyed with it. */
  owned: boolean;
  kernels: ExpertFfnKernels;
  round: RoundKernels;
  features: KernelFeature[];
  featuresReason: string;
  /** llama numerics: how the decode regime's 8-bit dot products run, and why ('float' in exact numerics). */
  integerDot: IntegerDot;
  integerDotReason: string;
  maxPerDimension: number;
  decode: Pipelines;
  combine: GPUComputePipeline;
  /** The batched regime's pipelines, built on its first call. */
  batched: Promise<Pipelines> | null;
  parts: WeightPart[];
  /** The slice's biases (ffn_variant.wgsl's layout), or a small unused buffer for a variant without them. */
  biases: GPUBuffer;
  pool: BufferPool;
  /**
   * The two timestamps (start and end of a call's compute pass) of calls that ask for their kernel time, created on
   * the first such call where the device has 'timestamp-query'; null until then (calls that do not ask pay nothing).
   * One set serves every call: the queue runs each call's writes and their resolve before the next call's writes.
   */
  timestamps: GPUQuerySet | null;
  lost: GPUDeviceLostInfo | null;
}

/** DEVICE_LOST for a runtime (`label`) whose device went (`info`: GPUDeviceLostInfo, or the runtime's record of it). */
export function lostError(label: string, info: { reason: string; message: string }): ExpertRuntimeError {
  return new ExpertRuntimeError(
    'DEVICE_LOST',
    { reason: info.reason, message: info.message },
    `${label}: the GPU device was lost (${info.reason}): ${info.message}`,
  );
}

/** Bytes of the weight buffers of `parts`. */
export function weightBytes(parts: readonly WeightPart[]): number {
  let n = 0;
  for (const p of parts) for (const m of EXPERT_MATRICES) n += p.buffers[m].size;
  return n;
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
    throw new ExpertRuntimeError(
      'FEATURE_UNAVAILABLE',
      { feature, reason },
      `the '${feature}' kernels cannot run on this device: ${reason}`,
    );
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
    throw new ExpertRuntimeError(
      'SLICE_TOO_LARGE',
      { bytes: total, limit: settings.maxWeightBytes },
      `${describe(shape)} weigh ${total} bytes, over maxWeightBytes = ${settings.maxWeightBytes}`,
    );
  }
  validateTuning(settings.tuning, device.limits);
  const deviceMax = device.limits.maxComputeWorkgroupsPerDimension;
  const maxPerDimension = Math.min(settings.maxWorkgroupsPerDimension ?? deviceMax, deviceMax);
  const { limit, limitName } = bindingLimit(device.limits, settings.maxBindingBytes);
  const ranges = planParts(shape, limit, limitName);
  const kernels = ExpertFfnKernels.forDevice(device);
  const round = roundKernels(device);
  const chosen = await chooseFeatures(device, kernels, settings.features, settings.tuning.workgroupSize);
  let { features, reason } = chosen;
  let { dot: integerDot, reason: dotReason } = chooseIntegerDot(shape.types, settings);
  const build = (f: readonly KernelFeature[], dot: IntegerDot) =>
    Promise.all([
      buildPipelines(kernels, round, shape.types, settings, f, 'decode', dot),
      kernels.pipeline({ kernel: 'expert_combine', tuning: settings.tuning, variant: 'base' }),
    ]);
  let pipelines: Awaited<ReturnType<typeof build>>;
  for (;;) {
    try {
      pipelines = await build(features, integerDot);
      break;
    } catch (e) {
      if (!isCompileError(e)) throw e;
      const failed = (e as ExpertRuntimeError<'SHADER_COMPILE'>).details.pipeline;
      // With 'auto', a driver that cannot build dot4I8Packed gets the fallback, and one that cannot build the
      // subgroup variant the base kernels.
      if (settings.integerDot === 'auto' && integerDot === 'packed' && failed.endsWith('/packed')) {
        integerDot = INTEGER_DOT_FALLBACK;
        dotReason = `${INTEGER_DOT_FALLBACK}: dot4I8Packed failed to build (${(e as Error).message})`;
      } else if (settings.integerDot === 'packed' && failed.endsWith('/packed')) {
        throw new ExpertRuntimeError(
          'FEATURE_UNAVAILABLE',
          { feature: PACKED_DOT_LANGUAGE_FEATURE, reason: (e as Error).message },
          `the packed int8 kernels cannot run on this device: ${(e as Error).message}`,
        );
      } else if (settings.features === 'auto' && features.includes('subgroups')) {
        features = features.filter((f) => f !== 'subgroups');
        reason += `; subgroups dropped: ${(e as Error).message}`;
      } else {
        throw e;
      }
    }
  }
  const [decode, combine] = pipelines;
  // Out of GPU memory only shows as an error scope's error (the buffers are invalid, not missing).
  device.pushErrorScope('out-of-memory');
  const parts = createWeightParts(device, shape, ranges, settings.label);
  const data = variantData(settings);
  const biases = createBiasBuffer(device, shape, data, settings.label);
  const oom = await device.popErrorScope();
  if (oom) {
    destroyWeightParts(parts);
    biases.destroy();
    throw new ExpertRuntimeError(
      'GPU_ERROR',
      { message: oom.message },
      `${settings.label}: no GPU memory for ${total} bytes of weights: ${oom.message}`,
    );
  }
  // The GELU table depends on nothing in the slice: written with the buffer, so every path (bytes, stream, recovery) has it.
  if (data.geluTable) writeGeluTable(device.queue, biases, shape, data);
  return {
    device,
    owned,
    kernels,
    round,
    features,
    featuresReason: reason,
    integerDot,
    integerDotReason: dotReason,
    maxPerDimension,
    decode,
    combine,
    batched: null,
    parts,
    biases,
    pool: new BufferPool(device, settings.label),
    timestamps: null,
    lost: null,
  };
}

const isCompileError = (e: unknown): boolean => e instanceof ExpertRuntimeError && e.code === 'SHADER_COMPILE';

/** Frees a state's buffers, and its device when the runtime requested it. */
export function releaseState(st: GpuState): void {
  destroyWeightParts(st.parts);
  st.biases.destroy();
  st.pool.dispose();
  st.timestamps?.destroy();
  if (st.owned) st.device.destroy();
}

/** A state holding the slice's bytes. */
export async function bytesState(
  device: GPUDevice,
  owned: boolean,
  slice: ExpertSlice,
  shape: SliceShape,
  settings: Settings,
): Promise<GpuState> {
  const st = await prepareState(device, owned, shape, settings);
  try {
    const writer = new WeightWriter(device.queue, shape, st.parts);
    for (const m of EXPERT_MATRICES) writer.write(m, 0, slice[m]);
    writer.finish();
    if (settings.variant.biases && slice.biases) writeBiases(device.queue, st.biases, slice.biases);
    if (settings.variant.scales) {
      const missing = new Float32Array(0);
      const scales = slice.scales ?? { gate: missing, up: missing, down: missing };
      writeScales(device.queue, st.biases, shape, variantData(settings), scales);
    }
    return st;
  } catch (e) {
    releaseState(st);
    throw e;
  }
}

const sameShape = (a: SliceShape, b: SliceShape): boolean =>
  a.nEmbd === b.nEmbd &&
  a.ff === b.ff &&
  a.nExpert === b.nExpert &&
  a.types.gate === b.types.gate &&
  a.types.up === b.types.up &&
  a.types.down === b.types.down;

const describe = (s: SliceShape): string =>
  `${s.nExpert} experts [${s.nEmbd}↔${s.ff}] of ${typeName(s.types.gate)}/${typeName(s.types.up)}/${typeName(s.types.down)}`;

/** What a stream's header must repeat when the stream is reopened (recovery): the slice's shape and variant. */
export interface StreamExpect {
  shape: SliceShape;
  variant: ExpertVariant;
}

/**
 * A state filled from a newly opened mini-GGUF slice stream: the header gives the shape and the variant (which must
 * equal `expect` when rebuilding), then the tensor data goes straight into the weight buffers and, for a biased
 * variant, the biases (after the matrices, in one piece) into the bias buffer: all queued before this resolves.
 */
export async function streamState(
  device: GPUDevice,
  owned: boolean,
  source: SliceStreamSource,
  expect: StreamExpect | null,
  settingsFor: (shape: SliceShape, variant: ExpertVariant) => Settings,
): Promise<{ shape: SliceShape; variant: ExpertVariant; state: GpuState }> {
  let st: GpuState | null = null;
  let writer: WeightWriter | null = null;
  let shape: SliceShape | null = null;
  let variant: ExpertVariant = SILU_VARIANT;
  let biasesArrived = false;
  let scalesArrived = false;
  try {
    const stream = await source.open();
    await readExpertSliceStream(stream, {
      onHeader: async (info) => {
        const s: SliceShape = { nEmbd: info.nEmbd, ff: info.ff, nExpert: info.expertEnd - info.expertBegin, types: { ...info.types } };
        validateSlice(
          s,
          { gate: { length: info.bytes.gate }, up: { length: info.bytes.up }, down: { length: info.bytes.down } },
          KERNEL_TYPES,
        );
        const v = info.variant ?? SILU_VARIANT;
        // The biases come after the matrices: their lengths are checked when they arrive (onBiases).
        validateVariantFeatures(v, WGSL_VARIANT_FEATURES);
        if (expect && !(sameShape(expect.shape, s) && sameVariant(expect.variant, v))) {
          const was = `${describe(expect.shape)} (${describeVariant(expect.variant)})`;
          const now = `${describe(s)} (${describeVariant(v)})`;
          throw new ExpertRuntimeError(
            'BAD_SLICE_STREAM',
            { cause: 'changed', message: `holds ${now}` },
            `the reopened slice stream holds ${now}, not ${was}`,
          );
        }
        shape = s;
        variant = v;
        st = await prepareState(device, owned, s, settingsFor(s, v));
        writer = new WeightWriter(device.queue, s, st.parts);
      },
      onData: (matrix, offset, chunk) => {
        writer!.write(matrix, offset, chunk);
      },
      onBiases: (values) => {
        const biases = { gate: values.gate, up: values.up, down: values.down };
        // the biases alone (scales, if any, come after them)
        validateVariant({ ...shape!, variant: { ...variant, scales: false }, biases }, WGSL_VARIANT_FEATURES);
        writeBiases(device.queue, st!.biases, biases);
        biasesArrived = true;
      },
      onScales: (values) => {
        const scales = { gate: values.gate, up: values.up, down: values.down };
        // the scales alone (the biases, if any, were checked when they arrived)
        validateVariant({ ...shape!, variant: { ...variant, biases: false }, scales }, WGSL_VARIANT_FEATURES);
        writeScales(device.queue, st!.biases, shape!, variantData(settingsFor(shape!, variant)), scales);
        scalesArrived = true;
      },
    });
    writer!.finish();
    // A biased variant whose stream brought no biases (the reader lays them out from the header, so only a reader
    // that skipped them could): BAD_SLICE_BIASES rather than a slice computing with zero biases.
    if (variant.biases && !biasesArrived) validateVariant({ ...shape!, variant }, WGSL_VARIANT_FEATURES);
    if (variant.scales && !scalesArrived) validateVariant({ ...shape!, variant: { ...variant, biases: false } }, WGSL_VARIANT_FEATURES);
    return { shape: shape!, variant, state: st! };
  } catch (e) {
    if (st) releaseState(st);
    throw sliceError(e);
  }
}

/** A slice reader's error as BAD_SLICE_STREAM (with its code as the cause); anything else unchanged. */
export function sliceError(e: unknown): unknown {
  if (e instanceof GGUFError || e instanceof ExpertSliceError) {
    return new ExpertRuntimeError('BAD_SLICE_STREAM', { cause: e.code, message: e.message }, `not a valid expert slice: ${e.message}`);
  }
  return e;
}

/** Gate and up usually share a type and run fused; otherwise each pass uses its own type's module. */
function upPasses(types: SliceTypes): { pass: UpPass; type: GGMLType }[] {
  return types.gate === types.up
    ? [{ pass: 'fused', type: types.gate }]
    : [
        { pass: 'gate', type: types.gate },
        { pass: 'up', type: types.up },
      ];
}

/**
 * How the decode regime's 8-bit dot products run (llama numerics), before any pipeline is built: the asked-for
 * integerDot, or with 'auto' dot4I8Packed unless the page's navigator.gpu.wgslLanguageFeatures lacks it (in Node the
 * build decides: prepareState falls back when the packed pipelines fail). 'packed' asked for and missing throws
 * FEATURE_UNAVAILABLE.
 */
function chooseIntegerDot(types: SliceTypes, settings: Settings): { dot: IntegerDot; reason: string } {
  if (settings.numerics === 'exact') return { dot: 'float', reason: 'exact numerics: activations are not rounded' };
  const names = `${typeName(types.gate)}/${typeName(types.up)}/${typeName(types.down)}`;
  if (![types.gate, types.up, types.down].some((t) => INT8_SNIPPETS.has(t)))
    return { dot: 'float', reason: `${names} weights have no 8-bit activations: the float kernels read the rounded values` };
  const want = settings.integerDot;
  if (want === 'float' || want === 'unpacked') return { dot: want, reason: `${want}: asked for` };
  const features = (globalThis as { navigator?: { gpu?: { wgslLanguageFeatures?: ReadonlySet<string> } } }).navigator?.gpu
    ?.wgslLanguageFeatures;
  if (features && !features.has(PACKED_DOT_LANGUAGE_FEATURE)) {
    const why = `navigator.gpu.wgslLanguageFeatures lacks ${PACKED_DOT_LANGUAGE_FEATURE}`;
    if (want === 'packed') {
      throw new ExpertRuntimeError('FEATURE_UNAVAILABLE', { feature: PACKED_DOT_LANGUAGE_FEATURE, reason: why }, `dot4I8Packed: ${why}`);
    }
    return { dot: INTEGER_DOT_FALLBACK, reason: `${INTEGER_DOT_FALLBACK}: ${why}` };
  }
  return { dot: 'packed', reason: want === 'packed' ? 'packed: asked for' : `packed: dot4I8Packed (${PACKED_DOT_LANGUAGE_FEATURE})` };
}

async function buildPipelines(
  kernels: ExpertFfnKernels,
  round: RoundKernels,
  types: SliceTypes,
  settings: Settings,
  features: readonly KernelFeature[],
  regime: Regime,
  integerDot: IntegerDot,
): Promise<Pipelines> {
  const { tuning } = settings;
  const rounding = callRounding(types, settings.numerics, regime, integerDot);
  const dot: Int8Dot = integerDot === 'packed' ? 'packed' : 'unpacked';
  const int8 = (t: GGMLType) => INT8_SNIPPETS.get(t)!;
  const upKernel = regime === 'decode' ? (rounding.gate?.packed ? 'expert_up_q8' : 'expert_up') : 'expert_up_batched';
  const downKernel = regime === 'decode' ? (rounding.down?.packed ? 'expert_down_q8' : 'expert_down') : 'expert_down_batched';
  const ffn = kernelFfn(settings.variant, settings.numerics);
  const upVariant = kernelVariant(upKernel, features);
  const downVariant = kernelVariant(downKernel, features);
  const upPipeline = (pass: UpPass, type: GGMLType): Promise<GPUComputePipeline> =>
    upKernel === 'expert_up_q8'
      ? kernels.pipeline({ kernel: upKernel, quant: int8(type), pass, tuning, variant: upVariant, dot, ffn })
      : kernels.pipeline({ kernel: upKernel, quant: quantSnippet(type), pass, tuning, variant: upVariant, ffn });
  const downPipeline = (): Promise<GPUComputePipeline> =>
    downKernel === 'expert_down_q8'
      ? kernels.pipeline({ kernel: downKernel, quant: int8(types.down), tuning, variant: downVariant, dot, ffn })
      : kernels.pipeline({ kernel: downKernel, quant: quantSnippet(types.down), tuning, variant: downVariant, ffn });
  const steps = [rounding.gate, rounding.up, rounding.down].filter((r): r is RoundStep => r !== null);
  const keys = [...new Set(steps.map(roundKey))];
  const [up, down, roundPipelines] = await Promise.all([
    Promise.all(upPasses(types).map(async ({ pass, type }) => ({ pass, pipeline: await upPipeline(pass, type) }))),
    downPipeline(),
    Promise.all(
      keys.map(async (k) => {
        const step = steps.find((r) => roundKey(r) === k)!;
        return [k, await round.pipeline(step.mode, step.packed)] as const;
      }),
    ),
  ]);
  return { up, down, rounding, round: new Map(roundPipelines) };
}

/**
 * The batched regime's pipelines on this state, built on the first batched call (concurrent calls share the build; a
 * failed build is retried by a later call). With 'auto' features, a driver that cannot build the f16 tiles gets the
 * f32 ones instead, and the state records it.
 */
export function batchedPipelines(st: GpuState, types: SliceTypes, settings: Settings): Promise<Pipelines> {
  if (!st.batched) {
    const build = (f: readonly KernelFeature[]): Promise<Pipelines> =>
      buildPipelines(st.kernels, st.round, types, settings, f, 'batched', st.integerDot);
    const p = build(st.features).catch((e: unknown) => {
      if (!(settings.features === 'auto' && st.features.includes('shader-f16') && isCompileError(e))) throw e;
      st.features = st.features.filter((f) => f !== 'shader-f16');
      st.featuresReason += `; shader-f16 dropped: ${(e as Error).message}`;
      return build(st.features);
    });
    p.catch(() => {
      if (st.batched === p) st.batched = null; // a later call may retry
    });
    st.batched = p;
  }
  return st.batched;
}
