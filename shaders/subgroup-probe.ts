/**
 * TS side of wgsl/subgroup_probe.wgsl: one dispatch that checks the subgroup layout reduce_subgroups.wgsl relies on
 * (contiguous, ordered runs of local invocations of one power-of-two size), which WGSL does not promise. The probe
 * runs once per device and workgroup size (ExpertFfnKernels.subgroupLayout caches it); judgeSubgroupLayout is the
 * pure verdict on its output.
 */
import { GPU_FLAGS } from './gpu-flags.ts';
import { WGSL } from './wgsl-sources.ts';

/** Outcome of the subgroup layout probe. */
export interface SubgroupLayout {
  usable: boolean;
  /** The subgroup size seen (when the probe ran). */
  subgroupSize?: number;
  /** Why not usable, or what was confirmed. */
  reason: string;
}

export async function probeSubgroupLayout(device: GPUDevice, workgroupSize: number): Promise<SubgroupLayout> {
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
    pass.setBindGroup(
      0,
      device.createBindGroup({
        label: 'subgroup probe',
        layout: pipeline.getBindGroupLayout(0),
        entries: [{ binding: 0, resource: { buffer: out } }],
      }),
    );
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
  if (!(size > 0 && (size & (size - 1)) === 0))
    return { usable: false, subgroupSize: size, reason: `subgroup size ${size} is not a power of two` };
  for (let lid = 0; lid < workgroupSize; lid++) {
    const [lane, n, first] = [v[4 * lid]!, v[4 * lid + 1]!, v[4 * lid + 2]!];
    if (n !== size) return { usable: false, subgroupSize: size, reason: `subgroup sizes differ within a workgroup (${size} and ${n})` };
    if (lane !== lid % size)
      return { usable: false, subgroupSize: size, reason: `invocation ${lid} is subgroup lane ${lane}, not ${lid % size}` };
    if (first !== lid - lane) {
      return {
        usable: false,
        subgroupSize: size,
        reason: `invocation ${lid}'s subgroup starts at invocation ${first}, not ${lid - lane}: not a contiguous run`,
      };
    }
  }
  return { usable: true, subgroupSize: size, reason: `subgroups of ${size} in local invocation order` };
}
