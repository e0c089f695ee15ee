/**
 * Weight bytes of any type the kernels read, for tests and benchmarks that make expert slices: our quantizer's bytes of
 * uniform(±scale) values, or for the types only llama.cpp's quantizer writes (IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ1_M: tools/llama-quantized.ts)
 * random super-blocks — every grid index, sign pattern and 4-bit scale is a valid block — with d drawn so that the
 * values have about that scale.
 *
 *   const gate = weightBytes(GGMLType.IQ2_XXS, nExpert * nEmbd * ff, mulberry32(7), 1 / Math.sqrt(nEmbd));
 */
import { f32ToF16 } from '../gguf/half.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { quantize } from '../gguf/quantize.ts';

/** Bytes per super-block of the random-block types, and d per unit of scale (a value is about d / dPerScale). */
const RANDOM_BLOCKS: ReadonlyMap<GGMLType, { bytes: number; dPerScale: number }> = new Map([
  // |value| = d · (0.5 + s) / 4 · {8, 25, 43}, s uniform in 0..15
  [GGMLType.IQ2_XXS, { bytes: 66, dPerScale: 1 / 40 }],
  // as IQ2_XXS, a 4-bit scale per 16 elements
  [GGMLType.IQ2_XS, { bytes: 74, dPerScale: 1 / 40 }],
  // |value| = d · (0.5 + s) / 2 · {4, 12, …, 62}
  [GGMLType.IQ3_XXS, { bytes: 98, dPerScale: 1 / 120 }],
  // |value| = d · (2s + 1) · |{−1, 0, 1} ± 0.125|, s uniform in 0..7
  [GGMLType.IQ1_S, { bytes: 50, dPerScale: 1 / 6 }],
  // as IQ1_S, a 3-bit scale per 16 elements; its f16 d in the top nibbles of the four scale words (bytes 49, 51, 53, 55)
  [GGMLType.IQ1_M, { bytes: 56, dPerScale: 1 / 6 }],
]);

export function weightBytes(type: GGMLType, n: number, r: () => number, scale: number): Uint8Array {
  const random = RANDOM_BLOCKS.get(type);
  if (!random)
    return quantize(
      type,
      new Float32Array(n).map(() => (r() * 2 - 1) * scale),
    );
  if (n % 256 !== 0) throw new RangeError(`weightBytes ${GGMLType[type]}: ${n} elements is not a multiple of 256`);
  const { bytes } = random;
  const out = new Uint8Array((n / 256) * bytes);
  for (let b = 0; b < n / 256; b++) {
    const h = f32ToF16(scale * random.dPerScale * (0.5 + r()));
    const o = bytes * b;
    if (type === GGMLType.IQ1_M) {
      for (let i = 0; i < bytes; i++) out[o + i] = Math.floor(r() * 256);
      for (let k = 0; k < 4; k++) out[o + 49 + 2 * k] = (out[o + 49 + 2 * k]! & 0x0f) | (((h >> (4 * k)) & 15) << 4);
      continue;
    }
    out[o] = h & 255;
    out[o + 1] = h >> 8;
    for (let i = 2; i < bytes; i++) out[o + i] = Math.floor(r() * 256);
  }
  return out;
}
