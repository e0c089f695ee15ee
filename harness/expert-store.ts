/**
 * Reads one expert's matrices out of a GGUF file and dequantizes them with the CPU references (cached per expert).
 */
import { openFileSource } from '../gguf/node-io.ts';
import { readGGUF } from '../gguf/reader.ts';
import type { GGUFFile, GGUFTensorInfo } from '../gguf/types.ts';
import { dequantize } from '../gguf/dequantize.ts';
import { expertTensorName, type ExpertMatrix } from '../gguf/expert-slice.ts';
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
    const name = expertTensorName(layer, matrix);
    const t = this.file.tensors.find((x) => x.name === name);
    if (!t) throw new RangeError(`layer ${layer} has no routed experts (${name} missing)`);
    return t;
  }

  private async slice(t: GGUFTensorInfo, expert: number): Promise<Float32Array> {
    const perExpert = (t.dims[0] as number) * (t.dims[1] as number);
    const bytesPerExpert = t.byteLength / (t.dims[2] as number);
    const bytes = await this.src.read(this.file.dataOffset + t.offset + expert * bytesPerExpert, bytesPerExpert);
    return dequantize(t.type, bytes, perExpert);
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
      gate: await this.slice(gateT, expert),
      up: await this.slice(upT, expert),
      down: await this.slice(downT, expert),
      ggmlTypes: { gate: gateT.type, up: upT.type, down: downT.type },
    };
    this.cache.set(key, m);
    return m;
  }
}
