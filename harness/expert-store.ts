/**
 * Reads one expert's matrices out of a GGUF file and dequantizes them with the CPU references (cached per expert).
 */
import { openFileSource } from '../gguf/node-io.ts';
import { readGGUF } from '../gguf/reader.ts';
import type { GGUFFile, GGUFTensorInfo } from '../gguf/types.ts';
import { dequantize } from '../gguf/dequantize.ts';
import { expertTensorName, layerExpertTensors, readExpertMatrix, type ExpertMatrix } from '../gguf/expert-slice.ts';
import type { ExpertMatrices } from '../shaders/reference/expert-ffn.ts';

export class ExpertStore {
  private cache = new Map<string, ExpertMatrices>();

  private constructor(
    readonly file: GGUFFile,
    private readonly src: Awaited<ReturnType<typeof openFileSource>>,
  ) {}

  static async open(path: string): Promise<ExpertStore> {
    const src = await openFileSource(path);
    return new ExpertStore(await readGGUF(src), src);
  }

  close(): Promise<void> {
    return this.src.close();
  }

  private tensor(layer: number, matrix: ExpertMatrix): GGUFTensorInfo {
    const t = layerExpertTensors(this.file, layer).found[matrix];
    if (!t) throw new RangeError(`layer ${layer} has no routed experts (${expertTensorName(layer, matrix)} missing)`);
    return t;
  }

  private async slice(layer: number, matrix: ExpertMatrix, expert: number): Promise<Float32Array> {
    const { info, bytes } = await readExpertMatrix(this.src, this.file, layer, matrix, expert);
    return dequantize(info.type, bytes, (info.dims[0] as number) * (info.dims[1] as number));
  }

  async expert(layer: number, expert: number): Promise<ExpertMatrices> {
    const key = `${layer}/${expert}`;
    const hit = this.cache.get(key);
    if (hit) return hit;
    const gateT = this.tensor(layer, 'gate');
    const upT = this.tensor(layer, 'up');
    const downT = this.tensor(layer, 'down');
    const m: ExpertMatrices = {
      nEmbd: gateT.dims[0] as number,
      ff: gateT.dims[1] as number,
      gate: await this.slice(layer, 'gate', expert),
      up: await this.slice(layer, 'up', expert),
      down: await this.slice(layer, 'down', expert),
      ggmlTypes: { gate: gateT.type, up: upT.type, down: downT.type },
    };
    this.cache.set(key, m);
    return m;
  }
}
