/**
 * A synthetic importance matrix for llama-quantize (`--imatrix FILE`), which refuses the lowest-bit IQ types (IQ2_XXS,
 * IQ2_XS, IQ1_S, IQ1_M, …) without one. Written in llama.cpp's legacy imatrix format (common/imatrix-loader.cpp reads
 * it when the file is not GGUF): i32 entry count; per entry i32 name length, the name, i32 ncall, i32 nval, nval f32
 * values (their means are values / ncall); then i32 chunk count and an i32-length dataset name.
 *
 * Every matrix of the model gets one entry of ne0 · ne2 values (one row of column weights per expert for the 3-D
 * expert tensors, as llama-quant checks), all `weight`: equal importance, so the quantizer's weighting is its own
 * (qw · sqrt(σ² + x²)) and nothing about the data is invented.
 *
 *   await writeSyntheticImatrix('model-f32.gguf', 'model.imatrix');
 *   // linkcpp-quantize --imatrix model.imatrix model-f32.gguf out.gguf IQ2_XXS
 */
import { writeFile } from 'node:fs/promises';
import { openFileSource } from '../gguf/node-io.ts';
import { readGGUF } from '../gguf/reader.ts';

export async function writeSyntheticImatrix(modelPath: string, outPath: string, weight = 1): Promise<number> {
  const src = await openFileSource(modelPath);
  let tensors: Array<{ name: string; nval: number }>;
  try {
    const file = await readGGUF(src);
    tensors = file.tensors
      .filter((t) => t.dims.length >= 2)
      .map((t) => ({ name: t.name, nval: (t.dims[0] as number) * (t.dims.length >= 3 ? (t.dims[2] as number) : 1) }));
  } finally {
    await src.close();
  }
  const enc = new TextEncoder();
  const dataset = enc.encode('expertswarm synthetic (uniform)');
  const parts: Uint8Array[] = [];
  const i32 = (v: number): Uint8Array => new Uint8Array(Int32Array.of(v).buffer);
  parts.push(i32(tensors.length));
  for (const t of tensors) {
    const name = enc.encode(t.name);
    parts.push(i32(name.length), name, i32(1), i32(t.nval), new Uint8Array(new Float32Array(t.nval).fill(weight).buffer));
  }
  parts.push(i32(1), i32(dataset.length), dataset);
  await writeFile(outPath, Buffer.concat(parts));
  return tensors.length;
}
