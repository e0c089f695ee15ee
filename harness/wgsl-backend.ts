/**
 * A dispatcher backend that computes experts with the WGSL runtime (shaders/runtime.ts, `ExpertRuntime`) on Node's
 * WebGPU (npm `webgpu`, Dawn; SwiftShader where there is no GPU; harness/node-gpu.ts), one runtime per MoE layer
 * holding all of its experts from the GGUF's quantized bytes: what a volunteer's tab computes, behind the test
 * dispatcher's socket.
 */
import { openFileSource } from '../gguf/node-io.ts';
import { readGGUF } from '../gguf/reader.ts';
import type { GGUFFile } from '../gguf/types.ts';
import {
  type ExpertSlicePlan,
  layerExpertTensors,
  planExpertSlice,
  readPlannedBiases,
  readPlannedMatrices,
  readPlannedScales,
} from '../gguf/expert-slice.ts';
import { ExpertRuntime, type ExpertRuntimeCapabilities, type ExpertRuntimeOptions } from '../shaders/runtime.ts';
import type { ExpertBackend } from './expert-backend.ts';
import { nodeExpertDevice } from './node-gpu.ts';

let device: GPUDevice | undefined;

/** The process's one WebGPU device for dispatcher tests (created on first use; no adapter is an error). */
export async function wgslDevice(): Promise<GPUDevice> {
  device ??= await nodeExpertDevice('dispatcher test device');
  return device;
}

/** The whole of `layer`'s routed experts as one slice (a fused gate_up_exps comes apart into gate and up as it does for volunteers). */
function wholeLayerPlan(file: GGUFFile, layer: number): ExpertSlicePlan {
  const whole = layerExpertTensors(file, layer).found.gate?.dims[2];
  if (whole === undefined) throw new RangeError(`layer ${layer} has no routed experts`);
  return planExpertSlice(file, layer, 0, whole);
}

export class WgslBackend implements ExpertBackend {
  readonly name: string;

  private constructor(
    private readonly runtimes: Map<number, ExpertRuntime>,
    readonly options: ExpertRuntimeOptions,
  ) {
    this.name = `WGSL ExpertRuntime (${options.numerics ?? 'exact'} numerics)`;
  }

  /**
   * One runtime per MoE layer with all its experts, each warmed up with a call of one token and one of several (so
   * pipeline builds do not count against the coordinator's deadline).
   */
  static async open(modelPath: string, moeLayers: readonly number[], options: ExpertRuntimeOptions): Promise<WgslBackend> {
    const dev = await wgslDevice();
    const src = await openFileSource(modelPath);
    const runtimes = new Map<number, ExpertRuntime>();
    try {
      const file = await readGGUF(src);
      for (const layer of moeLayers) {
        const plan = wholeLayerPlan(file, layer);
        const bytes = await readPlannedMatrices(src, plan);
        const biases = await readPlannedBiases(src, plan);
        const scales = await readPlannedScales(src, plan);
        const { nEmbd, ff, nExpertTotal: nExpert, types, variant } = plan;
        const slice = {
          nEmbd,
          ff,
          nExpert,
          types,
          ...bytes,
          ...(variant && { variant }),
          ...(biases && { biases }),
          ...(scales && { scales }),
        };
        const rt = await ExpertRuntime.create(dev, slice, { label: `xd layer ${layer}`, ...options });
        runtimes.set(layer, rt);
        for (const nTokens of [1, 8]) {
          const ids = Int32Array.from({ length: 2 * nTokens }, (_, i) => i % nExpert);
          await rt.compute(new Float32Array(nTokens * nEmbd).fill(0.5), ids, new Float32Array(2 * nTokens).fill(0.5), nTokens, 2);
        }
      }
    } catch (e) {
      for (const rt of runtimes.values()) rt.dispose();
      throw e;
    } finally {
      await src.close();
    }
    return new WgslBackend(runtimes, options);
  }

  /**
   * What the runtimes `open` would build compute, as a string: per MoE layer the slice's shape and matrix types, its
   * variant (activation, biases, scales) and whether gate and up come apart from one fused tensor; the routed weights'
   * values are left out. Two models with the same string make a worker run the same kernels on calls of the same shape.
   */
  static async workShape(modelPath: string, moeLayers: readonly number[]): Promise<string> {
    const src = await openFileSource(modelPath);
    try {
      const file = await readGGUF(src);
      return moeLayers
        .map((layer) => {
          const p = wholeLayerPlan(file, layer);
          const fused = p.matrices.some((m) => m.source.name !== m.name);
          return JSON.stringify([p.nEmbd, p.ff, p.nExpertTotal, p.types, p.variant ?? null, fused]);
        })
        .join(' ');
    } finally {
      await src.close();
    }
  }

  capabilities(): ExpertRuntimeCapabilities {
    return (this.runtimes.values().next().value as ExpertRuntime).capabilities();
  }

  layerSums(
    layer: number,
    rows: Float32Array,
    ids: Int32Array,
    probs: Float32Array,
    nTokens: number,
    nUsed: number,
  ): Promise<Float32Array> {
    const rt = this.runtimes.get(layer);
    if (!rt) throw new RangeError(`the WGSL backend holds no experts of layer ${layer}`);
    return rt.compute(rows, ids, probs, nTokens, nUsed);
  }

  close(): void {
    for (const rt of this.runtimes.values()) rt.dispose();
    this.runtimes.clear();
  }
}
