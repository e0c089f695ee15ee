/**
 * Carries out one planned call (call-plan.ts) on a device state (device-state.ts): per-call buffers from the state's
 * pool, the inputs and uniforms written, one bind group per kernel and part, the dispatches in one compute pass (in
 * llama numerics the activation roundings too: the rows before the up kernels, h before the down kernels), and the
 * output read back. Everything from the first buffer to the submit runs inside an out-of-memory and a
 * validation error scope, so a failure there is GPU_ERROR and gives every buffer back.
 *
 * A timed call (where the device has 'timestamp-query') also has the GPU write a timestamp at the start and the end
 * of its compute pass, resolved and read back beside the output: the kernels' time apart from upload, submit and
 * readback. An untimed call records nothing extra.
 */
import type { ExpertMatrix } from '../gguf/expert-slice.ts';
import { SHAPE_UNIFORM_BYTES, type CallPlan } from './call-plan.ts';
import { lostError, roundKey, type GpuState, type Pipelines } from './device-state.ts';
import { ExpertRuntimeError } from './errors.ts';
import type { ExpertFfnKernels } from './expert-ffn.ts';
import { GPU_FLAGS } from './gpu-flags.ts';
import { ROUND_PARAMS_FIELDS } from './round-activations.ts';

/** GPUBufferUsage.QUERY_RESOLVE (GPU_FLAGS has the usages every call needs). */
const BUFFER_QUERY_RESOLVE = 0x200;
/** Two u64 timestamps: the compute pass's start and end. */
const TIMESTAMP_BYTES = 16;

/** What a call gives back: the output, and for a timed call the GPU time of its compute pass. */
export interface CallResult {
  out: Float32Array;
  /** Nanoseconds between the pass's start and end timestamps; null when the call was not timed. */
  kernelNs: number | null;
  counts: CallCounts;
}

/** What one call asked of the GPU: its fixed costs are per dispatch, per submit and, most of all, per readback. */
export interface CallCounts {
  /** Compute dispatches in the call's one pass (roundings, up, down, combine). */
  dispatches: number;
  /** Queue submits. */
  submits: number;
  /** Buffers mapped to read back (the output; a timed call's timestamps too). */
  readbacks: number;
}

/** The state's timestamp query set, created on the first timed call; null where the device lacks 'timestamp-query'. */
function timestampSet(st: GpuState, label: string): GPUQuerySet | null {
  if (!st.device.features.has('timestamp-query')) return null;
  st.timestamps ??= st.device.createQuerySet({ label: `${label} pass timestamps`, type: 'timestamp', count: 2 });
  return st.timestamps;
}

/** Bytes of the RoundParams uniform (round_activations.wgsl). */
const ROUND_UNIFORM_BYTES = ROUND_PARAMS_FIELDS.length * 4;

/** One rounding's output buffers in a call. */
interface RoundBuffers {
  values: GPUBufferBinding;
  qs: GPUBufferBinding | null;
  scales: GPUBufferBinding | null;
}

/** The call's inputs, validated (slice.ts validateInputs) and of the sizes the plan was made for. */
export interface CallInputs {
  rows: Float32Array;
  ids: Int32Array;
  probs: Float32Array;
}

/**
 * Runs `plan` with the regime's `pipelines` on `st`; returns out [nTokens × nEmbd], and with `timed` (where the device
 * has 'timestamp-query') the compute pass's GPU time. `label` prefixes GPU objects.
 */
export async function runPlan(
  st: GpuState,
  pipelines: Pipelines,
  plan: CallPlan,
  c: CallInputs,
  label: string,
  timed = false,
): Promise<CallResult> {
  const F = GPU_FLAGS;
  const pool = st.pool;
  const { sizes, groups, uniformStride: stride } = plan;
  const device = st.device;
  const q = device.queue;
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
  let ts: { set: GPUQuerySet; resolve: GPUBuffer; readback: GPUBuffer } | null = null;
  const counts: CallCounts = { dispatches: 0, submits: 0, readbacks: 0 };
  try {
    b = {
      shape: acquire(F.BUFFER_UNIFORM | F.BUFFER_COPY_DST, stride * plan.uniforms.length, 'shape uniforms'),
      rows: acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.rows, 'rows'),
      ids: acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.ids, groups ? 'pairs by expert' : 'ids'),
      tiles: groups ? acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.tiles, 'row tiles') : null,
      probs: acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_DST, sizes.probs, 'probs'),
      hidden: acquire(F.BUFFER_STORAGE, sizes.hidden, 'hidden (act(gate, up))'),
      expertOut: acquire(F.BUFFER_STORAGE, sizes.expertOut, 'expert outputs'),
      out: acquire(F.BUFFER_STORAGE | F.BUFFER_COPY_SRC, sizes.out, 'out'),
      readback: acquire(F.BUFFER_MAP_READ | F.BUFFER_COPY_DST, sizes.out, 'readback'),
    };
    // writeBuffer takes views of shared memory too ([AllowShared] in the IDL); @webgpu/types narrows it to ArrayBuffer.
    const write = (buffer: GPUBuffer, data: ArrayBufferView, offset = 0): void =>
      q.writeBuffer(buffer, offset, data as ArrayBufferView<ArrayBuffer>);
    plan.uniforms.forEach((u, i) => {
      write(b.shape, u, i * stride);
    });
    write(b.rows, c.rows);
    write(b.ids, groups ? groups.perm : c.ids);
    if (groups && b.tiles) write(b.tiles, groups.tiles);
    write(b.probs, c.probs);
    // llama numerics: each rounding's outputs (values; packed: int8 quants and scales too).
    const rounded: RoundBuffers[] = plan.rounds.map((r) => {
      const what = `rounded ${r.input} (${r.mode})`;
      const out = (bytes: number, role: string): GPUBufferBinding => ({
        buffer: acquire(F.BUFFER_STORAGE, bytes, `${what} ${role}`),
        offset: 0,
        size: Math.max(4, Math.ceil(bytes / 4) * 4),
      });
      return {
        values: out(r.bytes.values, 'values'),
        qs: r.packed ? out(r.bytes.qs, 'quants') : null,
        scales: r.packed ? out(r.bytes.scales, 'scales') : null,
      };
    });
    const roundedFor = (m: ExpertMatrix): RoundBuffers | null => {
      const i = plan.rounds.findIndex((r) => r.for.includes(m));
      return i < 0 ? null : rounded[i]!;
    };

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
    const biasesR: GPUBufferBinding = { buffer: st.biases }; // the slice's, last binding of every up and down kernel
    const encoder = device.createCommandEncoder({ label: `${label} call (${plan.regime})` });
    const set = timed ? timestampSet(st, label) : null;
    if (set) {
      ts = {
        set,
        resolve: acquire(BUFFER_QUERY_RESOLVE | F.BUFFER_COPY_SRC, TIMESTAMP_BYTES, 'timestamps'),
        readback: acquire(F.BUFFER_MAP_READ | F.BUFFER_COPY_DST, TIMESTAMP_BYTES, 'timestamps readback'),
      };
    }
    const pass = encoder.beginComputePass({
      label: `${label} expert-ffn (${plan.regime})`,
      ...(set ? { timestampWrites: { querySet: set, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } } : {}),
    });
    const run = (pipeline: GPUComputePipeline, group: GPUBindGroup, [x, y]: [number, number]): void => {
      counts.dispatches++;
      pass.setPipeline(pipeline);
      pass.setBindGroup(0, group);
      pass.dispatchWorkgroups(x, y);
    };
    const firstRound = plan.parts.length + 1; // the RoundParams uniforms follow the parts' and the combine's Shapes
    const runRound = (i: number): void => {
      const r = plan.rounds[i]!;
      const out = rounded[i]!;
      const input = r.input === 'rows' ? rowsR : hiddenR;
      const entries: GPUBindGroupEntry[] = [
        { binding: 0, resource: range(b.shape, ROUND_UNIFORM_BYTES, (firstRound + i) * stride) },
        { binding: 1, resource: input },
        { binding: 2, resource: out.values },
      ];
      if (out.qs && out.scales) entries.push({ binding: 3, resource: out.qs }, { binding: 4, resource: out.scales });
      const group = device.createBindGroup({
        label: `${label} round_activations (${r.input}, ${r.mode}) bind group`,
        layout: st.round.bindGroupLayouts[r.packed ? 'packed' : 'main'],
        entries,
      });
      run(pipelines.round.get(roundKey(r))!, group, r.workgroups);
    };
    plan.rounds.forEach((r, i) => {
      if (r.input === 'rows') runRound(i);
    });
    plan.parts.forEach((p, i) => {
      const w = st.parts[p.index]!.buffers;
      for (const { pass: upPass, pipeline } of pipelines.up) {
        // The rows each pass reads: rounded for its matrix (fused: gate and up round alike), or as they are.
        const act = roundedFor(upPass === 'up' ? 'up' : 'gate');
        let group: GPUBindGroup;
        if (act?.qs && act.scales) {
          group = bind('expert_up_q8', [shapeOf(i), { buffer: w.gate }, { buffer: w.up }, act.qs, idsR, hiddenR, act.scales, biasesR]);
        } else {
          const rows = act?.values ?? rowsR;
          group = b.tiles
            ? bind('expert_up_batched', [
                shapeOf(i),
                { buffer: w.gate },
                { buffer: w.up },
                rows,
                idsR,
                range(b.tiles, sizes.tiles),
                hiddenR,
                biasesR,
              ])
            : bind('expert_up', [shapeOf(i), { buffer: w.gate }, { buffer: w.up }, rows, idsR, hiddenR, biasesR]);
        }
        run(pipeline, group, p.up);
      }
    });
    plan.rounds.forEach((r, i) => {
      if (r.input === 'hidden') runRound(i);
    });
    const downAct = roundedFor('down');
    plan.parts.forEach((p, i) => {
      const w = st.parts[p.index]!.buffers;
      let downGroup: GPUBindGroup;
      if (downAct?.qs && downAct.scales) {
        downGroup = bind('expert_down_q8', [shapeOf(i), { buffer: w.down }, downAct.qs, idsR, outR, downAct.scales, biasesR]);
      } else {
        const hidden = downAct?.values ?? hiddenR;
        downGroup = b.tiles
          ? bind('expert_down_batched', [shapeOf(i), { buffer: w.down }, hidden, idsR, range(b.tiles, sizes.tiles), outR, biasesR])
          : bind('expert_down', [shapeOf(i), { buffer: w.down }, hidden, idsR, outR, biasesR]);
      }
      run(pipelines.down, downGroup, p.down);
    });
    run(
      st.combine,
      bind('expert_combine', [shapeOf(plan.parts.length), outR, range(b.probs, sizes.probs), range(b.out, sizes.out)]),
      plan.combine,
    );
    pass.end();
    encoder.copyBufferToBuffer(b.out, 0, b.readback, 0, sizes.out);
    if (ts) {
      encoder.resolveQuerySet(ts.set, 0, 2, ts.resolve, 0);
      encoder.copyBufferToBuffer(ts.resolve, 0, ts.readback, 0, TIMESTAMP_BYTES);
    }
    q.submit([encoder.finish({ label: `${label} call commands` })]);
    counts.submits++;
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
    const mapped = Promise.all([
      b.readback.mapAsync(F.MAP_MODE_READ, 0, sizes.out),
      ts?.readback.mapAsync(F.MAP_MODE_READ, 0, TIMESTAMP_BYTES),
    ]);
    counts.readbacks = ts ? 2 : 1;
    const error = (await validation) ?? (await oom);
    if (error) {
      await mapped.catch(() => undefined);
      throw new ExpertRuntimeError('GPU_ERROR', { message: error.message }, `${label}: WebGPU error in a compute call: ${error.message}`);
    }
    await mapped;
    const out = new Float32Array(b.readback.getMappedRange(0, sizes.out).slice(0));
    b.readback.unmap();
    let kernelNs: number | null = null;
    if (ts) {
      const [start, end] = new BigUint64Array(ts.readback.getMappedRange(0, TIMESTAMP_BYTES).slice(0));
      ts.readback.unmap();
      // Timestamps may be quantized or, on some drivers, out of order: a negative span reads as 0.
      kernelNs = end! > start! ? Number(end! - start!) : 0;
    }
    ok = true;
    return { out, kernelNs, counts };
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
