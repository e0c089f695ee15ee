/**
 * TS side of wgsl/round_activations.wgsl: ggml's activation rounding (shaders/reference/ggml-activations.ts) on the
 * GPU, bit for bit. The runtime's llama numerics dispatch it inside a call (call-run.ts, with `roundKernels(device)`'s
 * layouts and pipelines); `roundActivationsGpu(device, mode, rows, nRows, rowLen)` runs it alone and returns the
 * rounded rows as f32 and, for the Q8 modes, the int8 quants packed four to a u32 (as WGSL's pack4xI8 packs them) with
 * the f32 scale per block. Pipelines are built once per device and mode.
 *
 * @example
 *   const { values, qs, d } = await roundActivationsGpu(device, roundModeOf(vecDotType(GGMLType.Q4_K)), x, nTokens, nEmbd);
 */
import { GGMLType } from '../gguf/quant-types.ts';
import { ExpertRuntimeError } from './errors.ts';
import { GPU_FLAGS } from './gpu-flags.ts';
import { WGSL } from './wgsl-sources.ts';

/** ggml vec-dot types whose rounding the kernel reproduces. */
export type RoundMode = 'f32' | 'f16' | 'bf16' | 'q8_0' | 'q8_k';

/** The kernel's `MODE` override per mode. */
export const ROUND_MODE_CONSTANT: Readonly<Record<RoundMode, number>> = { f32: 0, f16: 1, bf16: 2, q8_0: 3, q8_k: 4 };

/** Elements per scale block: a row must be a whole number of them. */
export const ROUND_BLOCK: Readonly<Record<RoundMode, number>> = { f32: 1, f16: 1, bf16: 1, q8_0: 32, q8_k: 256 };

/**
 * u32 words of main_packed's `scales` output per block: the scale, and after every block's scale for Q8_K the block's
 * 16 bsums (sums of 16 quants, i32), for Q8_0 its block_q8_1 s (f16(d · Σ quants) as f32: Q8_1, which Q4_1 and Q5_1
 * weights use, is Q8_0's quants and scale plus s; round_activations.wgsl).
 */
export const ROUND_SCALE_WORDS: Readonly<Record<'q8_0' | 'q8_k', number>> = { q8_0: 2, q8_k: 17 };

/** Bytes of main_packed's `scales` output for `elements` values in `mode`. */
export function roundScaleBytes(mode: 'q8_0' | 'q8_k', elements: number): number {
  return (elements / ROUND_BLOCK[mode]) * ROUND_SCALE_WORDS[mode] * 4;
}

/** The `WORKGROUP_SIZE` override: a multiple of every mode's invocations per block (Q8_K: 64). */
export const ROUND_WORKGROUP_SIZE = 64;

/** The mode for a vec-dot type (`vecDotType(weightType)` of the reference). */
export function roundModeOf(vecDotType: GGMLType): RoundMode {
  switch (vecDotType) {
    case GGMLType.F32:
      return 'f32';
    case GGMLType.F16:
      return 'f16';
    case GGMLType.BF16:
      return 'bf16';
    case GGMLType.Q8_0:
    case GGMLType.Q8_1:
      return 'q8_0';
    case GGMLType.Q8_K:
      return 'q8_k';
    default:
      throw new RangeError(`no activation rounding kernel for ggml type ${GGMLType[vecDotType] ?? vecDotType}`);
  }
}

/** Fields of `struct RoundParams` in round_activations.wgsl, in declaration order; each is one u32. */
export const ROUND_PARAMS_FIELDS = ['n_rows', 'row_len'] as const;
export type RoundParamsField = (typeof ROUND_PARAMS_FIELDS)[number];

/** The RoundParams uniform's words, in ROUND_PARAMS_FIELDS order (the WGSL struct's). */
export function writeRoundParams(nRows: number, rowLen: number): Uint32Array {
  const values: Record<RoundParamsField, number> = { n_rows: nRows, row_len: rowLen };
  return Uint32Array.from(ROUND_PARAMS_FIELDS, (f) => values[f]);
}

export interface RoundedActivations {
  /** The rounded rows (quantized and dequantized), nRows × rowLen. */
  values: Float32Array;
  /** Q8 modes (unless `packed: false`): the int8 quants, four per u32, element 4i in the low byte of qs[i]. */
  qs?: Uint32Array;
  /** Q8 modes (unless `packed: false`): one scale per block, as the CPU multiplies with it (Q8_0: f16-rounded). */
  d?: Float32Array;
  /** Q8_K (unless `packed: false`): block_q8_K's bsums, the sums of each 16 consecutive quants. */
  bsums?: Int32Array;
  /** Q8_0 (unless `packed: false`): block_q8_1's s per block, f16(d · Σ quants) with d before its f16 rounding. */
  s?: Float32Array;
}

export interface RoundOptions {
  /** Also return the packed quants and scales (Q8 modes only; default true there). */
  packed?: boolean;
}

/** Workgroups of one rounding dispatch over `elements` values (before folding into 2-D): one invocation per quad. */
export function roundWorkgroups(elements: number): number {
  return Math.ceil(Math.ceil(elements / 4) / ROUND_WORKGROUP_SIZE);
}

/** The rounding kernel on one device: its bind group layouts and its pipelines by mode (for the runtime's calls). */
export interface RoundKernels {
  /** uniform, x, values (main); + qs, scales (main_packed). */
  bindGroupLayouts: { main: GPUBindGroupLayout; packed: GPUBindGroupLayout };
  /** The pipeline of `mode` (`packed`: main_packed, Q8 modes only), built once per device. */
  pipeline(mode: RoundMode, packed: boolean): Promise<GPUComputePipeline>;
}

/** The device's shared rounding kernels. */
export function roundKernels(device: GPUDevice): RoundKernels {
  const k = kernelsFor(device);
  return { bindGroupLayouts: k.bindGroupLayouts, pipeline: (mode, packed) => pipelineFor(device, k, mode, packed) };
}

interface DeviceKernels {
  module?: GPUShaderModule;
  /** uniform, x, values (main) and + qs, scales (main_packed). */
  layouts: { main: GPUPipelineLayout; packed: GPUPipelineLayout };
  bindGroupLayouts: { main: GPUBindGroupLayout; packed: GPUBindGroupLayout };
  pipelines: Map<string, Promise<GPUComputePipeline>>;
}

const perDevice = new WeakMap<GPUDevice, DeviceKernels>();

function kernelsFor(device: GPUDevice): DeviceKernels {
  let k = perDevice.get(device);
  if (k) return k;
  const F = GPU_FLAGS;
  const entry = (binding: number, type: GPUBufferBindingType): GPUBindGroupLayoutEntry => ({
    binding,
    visibility: F.SHADER_STAGE_COMPUTE,
    buffer: { type },
  });
  const common = [entry(0, 'uniform'), entry(1, 'read-only-storage'), entry(2, 'storage')];
  const main = device.createBindGroupLayout({ label: 'round_activations bind group layout', entries: common });
  const packed = device.createBindGroupLayout({
    label: 'round_activations packed bind group layout',
    entries: [...common, entry(3, 'storage'), entry(4, 'storage')],
  });
  k = {
    bindGroupLayouts: { main, packed },
    layouts: {
      main: device.createPipelineLayout({ label: 'round_activations pipeline layout', bindGroupLayouts: [main] }),
      packed: device.createPipelineLayout({ label: 'round_activations packed pipeline layout', bindGroupLayouts: [packed] }),
    },
    pipelines: new Map(),
  };
  perDevice.set(device, k);
  return k;
}

async function pipelineFor(device: GPUDevice, k: DeviceKernels, mode: RoundMode, packed: boolean): Promise<GPUComputePipeline> {
  if (packed && mode !== 'q8_0' && mode !== 'q8_k') throw new RangeError(`round_activations: no packed output for ${mode}`);
  const name = `round_activations/${mode}${packed ? '/packed' : ''}`;
  let p = k.pipelines.get(name);
  if (!p) {
    p = build(device, k, mode, packed, name);
    k.pipelines.set(name, p);
    p.catch(() => k.pipelines.delete(name));
  }
  return p;
}

async function build(device: GPUDevice, k: DeviceKernels, mode: RoundMode, packed: boolean, name: string): Promise<GPUComputePipeline> {
  if (!k.module) {
    const module = device.createShaderModule({ label: 'round_activations', code: WGSL.roundActivations });
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((m) => m.type === 'error').map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
    if (errors.length > 0) {
      throw new ExpertRuntimeError(
        'SHADER_COMPILE',
        { pipeline: 'round_activations', messages: errors },
        `shader module round_activations failed to compile:\n${errors.join('\n')}`,
      );
    }
    k.module ??= module;
  }
  try {
    return await device.createComputePipelineAsync({
      label: name,
      layout: packed ? k.layouts.packed : k.layouts.main,
      compute: {
        module: k.module,
        entryPoint: packed ? 'main_packed' : 'main',
        constants: { MODE: ROUND_MODE_CONSTANT[mode], WORKGROUP_SIZE: ROUND_WORKGROUP_SIZE },
      },
    });
  } catch (e) {
    const message = e instanceof Error ? e.message : String(e);
    throw new ExpertRuntimeError('SHADER_COMPILE', { pipeline: name, messages: [message] }, `pipeline ${name} failed: ${message}`);
  }
}

function checkShape(mode: RoundMode, rows: Float32Array, nRows: number, rowLen: number): void {
  const bad = (field: string, value: number, requirement: string): never => {
    throw new ExpertRuntimeError('BAD_SHAPE', { field, value, requirement }, `${field} = ${value}: must be ${requirement}`);
  };
  if (!Number.isInteger(nRows) || nRows < 0) bad('nRows', nRows, 'a non-negative integer');
  if (!Number.isInteger(rowLen) || rowLen <= 0) bad('rowLen', rowLen, 'a positive integer');
  if (rowLen % ROUND_BLOCK[mode] !== 0) bad('rowLen', rowLen, `a multiple of ${ROUND_BLOCK[mode]} for ${mode}`);
  if (rows.length !== nRows * rowLen) bad('rows.length', rows.length, `nRows × rowLen = ${nRows * rowLen}`);
}

/**
 * Rounds `rows` (nRows × rowLen f32) as ggml's CPU rounds activations for `mode` (see round_activations.wgsl), on
 * `device`. Q8 modes also return the packed int8 quants and per-block scales unless `packed: false`.
 */
export async function roundActivationsGpu(
  device: GPUDevice,
  mode: RoundMode,
  rows: Float32Array,
  nRows: number,
  rowLen: number,
  options: RoundOptions = {},
): Promise<RoundedActivations> {
  checkShape(mode, rows, nRows, rowLen);
  const isQ8 = mode === 'q8_0' || mode === 'q8_k';
  const packed = isQ8 && options.packed !== false;
  const n = nRows * rowLen;
  if (n === 0)
    return packed
      ? {
          values: new Float32Array(0),
          qs: new Uint32Array(0),
          d: new Float32Array(0),
          ...(mode === 'q8_k' ? { bsums: new Int32Array(0) } : { s: new Float32Array(0) }),
        }
      : { values: new Float32Array(0) };

  const k = kernelsFor(device);
  const pipeline = await pipelineFor(device, k, mode, packed);

  // Invocations own 4 elements each; workgroups beyond maxComputeWorkgroupsPerDimension fold into 2-D.
  const groups = roundWorkgroups(n);
  const maxDim = device.limits.maxComputeWorkgroupsPerDimension;
  const gx = Math.min(groups, maxDim);
  const gy = Math.ceil(groups / gx);
  if (gy > maxDim) {
    throw new ExpertRuntimeError(
      'DISPATCH_TOO_LARGE',
      { workgroups: groups, maxPerDimension: maxDim },
      `${groups} workgroups exceed a 2-D dispatch`,
    );
  }

  const F = GPU_FLAGS;
  const valueBytes = n * 4;
  const qsBytes = packed ? n : 0; // one byte per element
  const dBytes = packed ? roundScaleBytes(mode, n) : 0;
  const made: GPUBuffer[] = [];
  const buffer = (label: string, size: number, usage: number): GPUBuffer => {
    const b = device.createBuffer({ label, size: Math.max(4, Math.ceil(size / 4) * 4), usage });
    made.push(b);
    return b;
  };
  try {
    const params = buffer('round_activations params', 8, F.BUFFER_UNIFORM | F.BUFFER_COPY_DST);
    const input = buffer('round_activations rows', valueBytes, F.BUFFER_STORAGE | F.BUFFER_COPY_DST);
    const out = buffer('round_activations values', valueBytes, F.BUFFER_STORAGE | F.BUFFER_COPY_SRC);
    const readBytes = valueBytes + qsBytes + dBytes;
    const read = buffer('round_activations readback', readBytes, F.BUFFER_MAP_READ | F.BUFFER_COPY_DST);
    device.queue.writeBuffer(params, 0, writeRoundParams(nRows, rowLen).buffer);
    device.queue.writeBuffer(input, 0, rows.buffer, rows.byteOffset, valueBytes);

    const entries: GPUBindGroupEntry[] = [
      { binding: 0, resource: { buffer: params } },
      { binding: 1, resource: { buffer: input } },
      { binding: 2, resource: { buffer: out } },
    ];
    let qsBuf: GPUBuffer | undefined;
    let dBuf: GPUBuffer | undefined;
    if (packed) {
      qsBuf = buffer('round_activations qs', qsBytes, F.BUFFER_STORAGE | F.BUFFER_COPY_SRC);
      dBuf = buffer('round_activations scales', dBytes, F.BUFFER_STORAGE | F.BUFFER_COPY_SRC);
      entries.push({ binding: 3, resource: { buffer: qsBuf } }, { binding: 4, resource: { buffer: dBuf } });
    }
    const bindGroup = device.createBindGroup({
      label: `round_activations/${mode}${packed ? '/packed' : ''} bind group`,
      layout: packed ? k.bindGroupLayouts.packed : k.bindGroupLayouts.main,
      entries,
    });

    const encoder = device.createCommandEncoder({ label: 'round_activations' });
    const pass = encoder.beginComputePass({ label: 'round_activations' });
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bindGroup);
    pass.dispatchWorkgroups(gx, gy);
    pass.end();
    encoder.copyBufferToBuffer(out, 0, read, 0, valueBytes);
    if (qsBuf && dBuf) {
      encoder.copyBufferToBuffer(qsBuf, 0, read, valueBytes, qsBytes);
      encoder.copyBufferToBuffer(dBuf, 0, read, valueBytes + qsBytes, dBytes);
    }
    device.queue.submit([encoder.finish()]);
    await read.mapAsync(F.MAP_MODE_READ);
    const bytes = read.getMappedRange().slice(0);
    read.unmap();
    const values = new Float32Array(bytes, 0, n);
    if (!packed) return { values };
    const nBlocks = n / ROUND_BLOCK[mode];
    const got: RoundedActivations = {
      values,
      qs: new Uint32Array(bytes, valueBytes, n / 4),
      d: new Float32Array(bytes, valueBytes + qsBytes, nBlocks),
    };
    if (mode === 'q8_k') got.bsums = new Int32Array(bytes, valueBytes + qsBytes + nBlocks * 4, nBlocks * 16);
    else got.s = new Float32Array(bytes, valueBytes + qsBytes + nBlocks * 4, nBlocks);
    return got;
  } finally {
    for (const b of made) b.destroy();
  }
}
