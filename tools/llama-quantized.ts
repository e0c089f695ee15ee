/**
 * The generator's types that llama.cpp's own quantizer writes (the IQ types whose search over a lattice grid the
 * project does not reimplement): the model is written in F32 with the same weights (make-model seeds per tensor name),
 * then `linkcpp-quantize --pure` turns it into the type, with a synthetic importance matrix where llama.cpp requires
 * one (tools/imatrix.ts). The result is checked against the plan tensor by tensor, so a model of such a type is what
 * planModel says it is (rows that are not whole blocks fall back as rowType says, as llama-quant.cpp does).
 *
 *   await quantizeWithLlama('model-f32.gguf', 'model-iq2_xxs.gguf', GGMLType.IQ2_XXS, plan.tensors);
 */
import { execFile } from 'node:child_process';
import { unlink } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { openFileSource } from '../gguf/node-io.ts';
import { GGMLType, typeName } from '../gguf/quant-types.ts';
import { readGGUF } from '../gguf/reader.ts';
import { writeSyntheticImatrix } from './imatrix.ts';

const run = promisify(execFile);

/** coordinator/build.sh's build of llama.cpp's llama-quantize. */
export const LLAMA_QUANTIZE = fileURLToPath(new URL('../coordinator/bin/linkcpp-quantize', import.meta.url));

/** Types written by llama.cpp's quantizer, with the name llama-quantize takes (IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S and IQ1_M need an importance matrix; every one gets the synthetic one). */
export const LLAMA_QUANTIZED: ReadonlyMap<GGMLType, string> = new Map([
  [GGMLType.IQ2_XXS, 'IQ2_XXS'],
  [GGMLType.IQ2_XS, 'IQ2_XS'],
  [GGMLType.IQ3_XXS, 'IQ3_XXS'],
  [GGMLType.IQ1_S, 'IQ1_S'],
  [GGMLType.IQ1_M, 'IQ1_M'],
]);

/** A bound on one quantizer run: tiny test models take a second or two; a large one may take minutes. */
const QUANTIZE_TIMEOUT_MS = 600_000;

/**
 * Quantizes the F32 model at `f32Path` to `type` into `outPath` and checks every tensor's type against `want`
 * (name → type). Throws naming the first tensor that differs, or with llama-quantize's own message when it fails.
 */
export async function quantizeWithLlama(
  f32Path: string,
  outPath: string,
  type: GGMLType,
  want: ReadonlyArray<{ name: string; type: GGMLType }>,
): Promise<void> {
  const ftype = LLAMA_QUANTIZED.get(type);
  if (ftype === undefined) throw new RangeError(`quantizeWithLlama: ${typeName(type)} is not written by llama.cpp's quantizer here`);
  const imatrix = `${outPath}.imatrix`;
  try {
    await writeSyntheticImatrix(f32Path, imatrix);
    const args = ['--pure', '--imatrix', imatrix, f32Path, outPath, ftype, '2'];
    try {
      await run(LLAMA_QUANTIZE, args, { timeout: QUANTIZE_TIMEOUT_MS, maxBuffer: 64 << 20 });
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      const tail = (err.stderr ?? '').trim().split('\n').slice(-5).join('\n');
      throw new Error(`linkcpp-quantize ${ftype} failed: ${err.message.split('\n')[0]}\n${tail}`);
    }
  } finally {
    await unlink(imatrix).catch(() => undefined);
  }
  const src = await openFileSource(outPath);
  try {
    const file = await readGGUF(src);
    const got = new Map(file.tensors.map((t) => [t.name, t.type]));
    for (const t of want) {
      const g = got.get(t.name);
      if (g !== t.type) {
        throw new Error(
          `linkcpp-quantize ${ftype}: tensor ${t.name} is ${g === undefined ? 'missing' : typeName(g)}, the plan says ${typeName(t.type)}`,
        );
      }
    }
    if (got.size !== want.length) throw new Error(`linkcpp-quantize ${ftype}: ${got.size} tensors, the plan has ${want.length}`);
  } finally {
    await src.close();
  }
}
