/**
 * Weight bytes of any type the kernels read, for tests and benchmarks that make expert slices: our quantizer's bytes of
 * uniform(±scale) values, or for the types only llama.cpp's quantizer writes (IQ2_XXS: tools/llama-quantized.ts)
 * random super-blocks — every grid index, sign pattern and 4-bit scale is a valid block — with d drawn so that the
 * values have about that scale (|value| = d · (0.5 + s) / 4 · {8, 25, 43}, s uniform in 0..15).
 *
 *   const gate = weightBytes(GGMLType.IQ2_XXS, nExpert * nEmbd * ff, mulberry32(7), 1 / Math.sqrt(nEmbd));
 */
import { f32ToF16 } from '../gguf/half.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { quantize } from '../gguf/quantize.ts';

export function weightBytes(type: GGMLType, n: number, r: () => number, scale: number): Uint8Array {
  if (type !== GGMLType.IQ2_XXS)
    return quantize(
      type,
      new Float32Array(n).map(() => (r() * 2 - 1) * scale),
    );
  if (n % 256 !== 0) throw new RangeError(`weightBytes IQ2_XXS: ${n} elements is not a multiple of 256`);
  const out = new Uint8Array((n / 256) * 66);
  for (let b = 0; b < n / 256; b++) {
    const h = f32ToF16((scale / 40) * (0.5 + r()));
    out[66 * b] = h & 255;
    out[66 * b + 1] = h >> 8;
    for (let i = 2; i < 66; i++) out[66 * b + i] = Math.floor(r() * 256);
  }
  return out;
}
