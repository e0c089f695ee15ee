/**
 * Reads one expert's matrices out of a GGUF file and dequantizes them with the CPU references (cached per expert),
 * with the layer's expert FFN variant and the expert's biases where the layer has them.
 */
import { openFileSource } from '../gguf/node-io.ts';
import { readGGUF } from '../gguf/reader.ts';
import type { GGUFFile, GGUFTensorInfo } from '../gguf/types.ts';
import { dequantize } from '../gguf/dequantize.ts';
import { expertTensorName, layerExpertTensors, readExpertMatrix, type ExpertMatrix } from '../gguf/expert-slice.ts';
import { layerBiasTensors, layerVariant, modelScaleTensors, readBiasRange, readScaleRange } from '../gguf/expert-variant.ts';
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
    const shape = { nEmbd: gateT.dims[0] as number, ff: gateT.dims[1] as number, nExpert: gateT.dims[2] as number };
    const biasT = layerBiasTensors(this.file, layer, shape);
    const bias = (b: 'gate' | 'up' | 'down'): Promise<Float32Array> => readBiasRange(this.src, this.file, biasT![b], expert, expert + 1);
    const scaleT = modelScaleTensors(this.file, layer, shape.nExpert);
    const scale = async (m: 'gate' | 'up' | 'down'): Promise<number> =>
      (await readScaleRange(this.src, this.file, scaleT?.[m], expert, expert + 1))[0] as number;
    const m: ExpertMatrices = {
      nEmbd: shape.nEmbd,
      ff: shape.ff,
      gate: await this.slice(layer, 'gate', expert),
      up: await this.slice(layer, 'up', expert),
      down: await this.slice(layer, 'down', expert),
      ggmlTypes: { gate: gateT.type, up: upT.type, down: downT.type },
      variant: layerVariant(this.file, layer, shape),
      ...(biasT && { biases: { gate: await bias('gate'), up: await bias('up'), down: await bias('down') } }),
      ...(scaleT && { scales: { gate: await scale('gate'), up: await scale('up'), down: await scale('down') } }),
    };
    this.cache.set(key, m);
    return m;
  }
}
