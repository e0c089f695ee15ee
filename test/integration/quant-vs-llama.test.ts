/**
 * Our CPU references against llama.cpp itself, through its own quantize tool (linkcpp-quantize):
 *  1. llama.cpp dequantizes files our quantizers wrote (requantize to F32): our dequantizer must agree bit for bit.
 *  2. llama.cpp quantizes an F32 model (--pure): for the 32-element formats our quantizer must write the same bytes
 *     (both follow ggml's reference algorithm); for every format our dequantizer must agree with llama.cpp's F32
 *     expansion of those bytes bit for bit, and stay close to the F32 source.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testModel } from '../../harness/models.ts';
import { LINKCPP_QUANTIZE } from '../../harness/linkcpp.ts';
import { GGMLType, requireQuantType, rowByteSize } from '../../gguf/quant-types.ts';
import { openFileSource } from '../../gguf/node-io.ts';
import { readGGUF } from '../../gguf/reader.ts';
import type { GGUFFile, GGUFTensorInfo } from '../../gguf/types.ts';
import { dequantize } from '../../gguf/dequantize.ts';
import { quantize } from '../../gguf/quantize.ts';
import { writeSyntheticImatrix } from '../../tools/imatrix.ts';
import { makeModel } from '../../tools/make-model.ts';
import { defaultConfig } from '../../tools/model-arch.ts';
import { LLAMA_QUANTIZED, quantizeWithLlama } from '../../tools/llama-quantized.ts';

const run = promisify(execFile);

interface Loaded {
  file: GGUFFile;
  bytes(t: GGUFTensorInfo): Promise<Uint8Array>;
  close(): Promise<void>;
}

async function load(path: string): Promise<Loaded> {
  const src = await openFileSource(path);
  const file = await readGGUF(src);
  return {
    file,
    bytes: (t) => src.read(file.dataOffset + t.offset, t.byteLength),
    close: () => src.close(),
  };
}

function elements(t: GGUFTensorInfo): number {
  return t.dims.reduce((a, b) => a * b, 1);
}

async function llamaQuantize(input: string, output: string, ftype: string, pure: boolean, imatrix?: string): Promise<void> {
  const args = ['--allow-requantize', ...(pure ? ['--pure'] : []), ...(imatrix ? ['--imatrix', imatrix] : []), input, output, ftype, '2'];
  await run(LINKCPP_QUANTIZE, args, { timeout: 120_000, maxBuffer: 16 << 20 });
}

/** Asserts two float arrays are identical bit for bit (NaN-safe), naming the first difference. */
function assertBitEqual(ours: Float32Array, theirs: Float32Array, what: string): void {
  assert.equal(ours.length, theirs.length, `${what}: length`);
  const a = new Uint32Array(ours.buffer, ours.byteOffset, ours.length);
  const b = new Uint32Array(theirs.buffer, theirs.byteOffset, theirs.length);
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) assert.fail(`${what}: element ${i} differs: ours ${ours[i]} llama.cpp ${theirs[i]}`);
  }
}

function nmse(approx: Float32Array, exact: Float32Array): number {
  assert.equal(approx.length, exact.length, 'NMSE of arrays of different lengths');
  let num = 0;
  let den = 0;
  for (let i = 0; i < exact.length; i++) {
    const d = (approx[i] as number) - (exact[i] as number);
    num += d * d;
    den += (exact[i] as number) ** 2;
  }
  return num / den;
}

const dir = await mkdtemp(join(tmpdir(), 'es-quant-'));
test.after(() => rm(dir, { recursive: true, force: true }));

const base = { arch: 'qwen3moe' as const, layers: 1, nEmbd: 256, ff: 256, nExpert: 4, nExpertUsed: 2, seed: 5 };

const OURS = [
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.Q4_K,
  GGMLType.Q5_K,
  GGMLType.Q6_K,
  GGMLType.MXFP4,
  GGMLType.IQ4_NL,
  GGMLType.IQ4_XS,
];
for (const type of OURS) {
  test(`llama.cpp dequantizes our ${GGMLType[type]} exactly as we do`, async () => {
    const model = await testModel({ ...base, type });
    const out = join(dir, `ours-${GGMLType[type]}-f32.gguf`);
    await llamaQuantize(model.path, out, 'F32', false);
    const ours = await load(model.path);
    const theirs = await load(out);
    try {
      let compared = 0;
      for (const t of ours.file.tensors) {
        if (t.type !== type) continue;
        const u = theirs.file.tensors.find((x) => x.name === t.name);
        assert.equal(u?.type, GGMLType.F32, `${t.name} became F32`);
        assert.deepEqual(u?.dims, t.dims, `${t.name}: dims`);
        const mine = dequantize(type, await ours.bytes(t), elements(t));
        const ref = new Float32Array((await theirs.bytes(u!)).slice().buffer);
        assertBitEqual(mine, ref, t.name);
        compared++;
      }
      assert.ok(compared >= 4, `compared ${compared} tensors`);
    } finally {
      await ours.close();
      await theirs.close();
    }
  });
}

/** llama-quantize type name (with --pure every matrix gets exactly this type), and the NMSE bound vs the F32 source. */
const THEIRS: Array<[GGMLType, string, number]> = [
  // Bounds: uniform weights, error ≈ step²/12 relative to the variance; step = range / levels.
  [GGMLType.Q8_0, 'Q8_0', 1e-4],
  [GGMLType.Q4_0, 'Q4_0', 1.5e-2],
  [GGMLType.Q4_1, 'Q4_1', 1e-2],
  [GGMLType.Q5_0, 'Q5_0', 4e-3],
  [GGMLType.Q5_1, 'Q5_1', 3e-3],
  [GGMLType.Q2_K, 'Q2_K', 2e-1],
  [GGMLType.Q3_K, 'Q3_K_M', 5e-2],
  [GGMLType.Q4_K, 'Q4_K_M', 1.5e-2],
  [GGMLType.Q5_K, 'Q5_K_M', 4e-3],
  [GGMLType.Q6_K, 'Q6_K', 1e-3],
  // E2M1 levels × a power of two: the step is coarse near the block max (2 of 12) and the scale up to 2× loose.
  [GGMLType.MXFP4, 'MXFP4_MOE', 5e-2],
  // 16 non-linear levels, the scale fitted by least squares (no importance matrix)
  [GGMLType.IQ4_NL, 'IQ4_NL', 1.5e-2],
  // IQ4_NL's levels with 6-bit sub-block scales of one f16 d per 256
  [GGMLType.IQ4_XS, 'IQ4_XS', 1.5e-2],
  // 2.06 bits: 8-element points of an E8-lattice grid (magnitudes 8, 25, 43) with signs, one 4-bit scale per 32
  [GGMLType.IQ2_XXS, 'IQ2_XXS', 2.5e-1],
  // 2.31 bits: a 512-point grid of IQ2_XXS's kind, a sign pattern per 8 and a 4-bit scale per 16
  [GGMLType.IQ2_XS, 'IQ2_XS', 2e-1],
  // 3.06 bits: 4-element points of a grid (magnitudes 4..62) with IQ2_XXS's signs and 4-bit scales per 32
  [GGMLType.IQ3_XXS, 'IQ3_XXS', 1e-1],
  // 1.56 bits: 8-element points of a {−1, 0, 1} grid shifted by ±0.125, a 3-bit scale per 32
  [GGMLType.IQ1_S, 'IQ1_S', 5e-1],
  // 1.75 bits: IQ1_S's grid, a shift sign per 8 and a 3-bit scale per 16
  [GGMLType.IQ1_M, 'IQ1_M', 5e-1],
];
/** Types llama-quantize is given an importance matrix for (IQ2_XXS needs one; tools/imatrix.ts writes a uniform one). */
const NEEDS_IMATRIX = new Set([GGMLType.IQ2_XXS, GGMLType.IQ2_XS, GGMLType.IQ3_XXS, GGMLType.IQ1_S, GGMLType.IQ1_M]);
const BYTE_IDENTICAL = new Set([
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.MXFP4,
  GGMLType.IQ4_NL,
  GGMLType.IQ4_XS,
]);

/**
 * `npm test`'s time: llama.cpp's IQ1 quantizer takes seconds on the test model (6 s for its bytes, 10 s for a generated
 * model here, at load ~5), so QUANT_FULL=1 runs IQ1_S's and IQ1_M's bytes and the generator's IQ1_S,
 * IQ1_M and IQ2_XS models; npm test keeps IQ2_XS's bytes. The generated
 * IQ2_XS, IQ1_S and IQ1_M models are numerics-vs-coordinator.test.ts's in npm test, bit for bit against linkcpp-expert-ref.
 */
const QUANT_FULL = process.env.QUANT_FULL === '1';
const FULL_ONLY_THEIRS = new Set([GGMLType.IQ1_S, GGMLType.IQ1_M]);
const FULL_ONLY_GENERATED = new Set([GGMLType.IQ2_XS, GGMLType.IQ1_S, GGMLType.IQ1_M]);

for (const [type, ftype, bound] of THEIRS.filter(([t]) => QUANT_FULL || !FULL_ONLY_THEIRS.has(t))) {
  test(`llama.cpp's ${GGMLType[type]} bytes: our dequantizer agrees${BYTE_IDENTICAL.has(type) ? ', our quantizer writes the same bytes' : ''}`, async () => {
    const f32 = await testModel({ ...base, type: GGMLType.F32 });
    const q = join(dir, `theirs-${GGMLType[type]}.gguf`);
    const back = join(dir, `theirs-${GGMLType[type]}-f32.gguf`);
    let imatrix: string | undefined;
    if (NEEDS_IMATRIX.has(type)) {
      imatrix = join(dir, `theirs-${GGMLType[type]}.imatrix`);
      assert.ok((await writeSyntheticImatrix(f32.path, imatrix)) >= 4, 'imatrix entries');
    }
    await llamaQuantize(f32.path, q, ftype, true, imatrix);
    await llamaQuantize(q, back, 'F32', false);
    const src = await load(f32.path);
    const quant = await load(q);
    const deq = await load(back);
    try {
      let compared = 0;
      for (const t of quant.file.tensors) {
        if (t.type !== type) continue;
        const s = src.file.tensors.find((x) => x.name === t.name)!;
        const d = deq.file.tensors.find((x) => x.name === t.name)!;
        const theirBytes = await quant.bytes(t);
        const source = new Float32Array((await src.bytes(s)).slice().buffer);
        assert.equal(
          theirBytes.length,
          rowByteSize(type, t.dims[0] as number) * (elements(t) / (t.dims[0] as number)),
          `${t.name}: byte length`,
        );
        assert.equal(source.length, elements(t), `${t.name}: F32 source length`);
        const mine = dequantize(type, theirBytes, elements(t));
        assertBitEqual(mine, new Float32Array((await deq.bytes(d)).slice().buffer), t.name);
        const e = nmse(mine, source);
        assert.ok(e < bound, `${t.name}: NMSE ${e.toExponential(2)} ≥ ${bound}`);
        if (BYTE_IDENTICAL.has(type)) {
          const ourBytes = quantize(type, source);
          assert.equal(
            ourBytes.length,
            theirBytes.length,
            `${t.name}: our quantizer wrote ${ourBytes.length} bytes, llama.cpp ${theirBytes.length}`,
          );
          const info = requireQuantType(type);
          for (let i = 0; i < ourBytes.length; i++) {
            if (ourBytes[i] !== theirBytes[i]) {
              assert.fail(
                `${t.name}: byte ${i} (block ${Math.floor(i / info.bytesPerBlock)}) differs: ours ${ourBytes[i]} llama.cpp ${theirBytes[i]}`,
              );
            }
          }
        }
        compared++;
      }
      assert.ok(compared >= 4, `compared ${compared} tensors`);
    } finally {
      await src.close();
      await quant.close();
      await deq.close();
    }
  });
}

for (const type of [...LLAMA_QUANTIZED.keys()].filter((t) => QUANT_FULL || !FULL_ONLY_GENERATED.has(t))) {
  test(`the generator's ${GGMLType[type]} model: llama.cpp's quantizer, every tensor of the plan's type, near the F32 model's weights`, async () => {
    const made = await makeModel(defaultConfig({ ...base, type }), join(dir, `gen-${GGMLType[type]}.gguf`));
    const f32 = await testModel({ ...base, type: GGMLType.F32 });
    const ours = await load(made.path);
    const src = await load(f32.path);
    try {
      assert.equal(ours.file.tensors.length, made.plan.tensors.length, 'tensor count');
      let quantized = 0;
      for (const p of made.plan.tensors) {
        const t = ours.file.tensors.find((x) => x.name === p.name);
        assert.ok(t, `${p.name} missing`);
        assert.equal(GGMLType[t.type], GGMLType[p.type], `${p.name}: type`);
        if (t.type !== type) continue;
        const s = src.file.tensors.find((x) => x.name === p.name)!;
        const e = nmse(dequantize(t.type, await ours.bytes(t), elements(t)), new Float32Array((await src.bytes(s)).slice().buffer));
        const bound = THEIRS.find(([t]) => t === type)?.[2] ?? 0;
        assert.ok(e < bound, `${p.name}: NMSE ${e.toExponential(2)} ≥ ${bound}`);
        quantized++;
      }
      assert.ok(quantized >= 4, `${quantized} ${GGMLType[type]} tensors`);
    } finally {
      await ours.close();
      await src.close();
    }
    // A plan that disagrees with what llama.cpp wrote is refused, naming the tensor.
    const wrong = made.plan.tensors.map((t) => (t.name === 'blk.0.ffn_up_exps.weight' ? { ...t, type: GGMLType.Q4_K } : t));
    await assert.rejects(
      quantizeWithLlama(f32.path, join(dir, `gen-wrong-${GGMLType[type]}.gguf`), type, wrong),
      new RegExp(`blk\\.0\\.ffn_up_exps\\.weight is ${GGMLType[type]}, the plan says Q4_K`),
    );
  });
}
