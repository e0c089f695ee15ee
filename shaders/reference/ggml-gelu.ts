/**
 * ggml's GELU as its CPU backend computes it for ggml_geglu_split (GGML_GELU_FP16): the input rounded to f16 looks up
 * a table of f16 values made once at start, table[h] = f16(gelu(f32(h))) with
 *   gelu(x) = 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x·x)))
 * evaluated in float32 as GCC compiles it for x86-64 with FMA (1 + 0.044715·x·x is one fused multiply-add); inputs at
 * or below −10 give 0 and at or above 10 give x itself. Checked against the C expression compiled with the coordinator's
 * flags (-O3 -mavx2 -mfma -mf16c): the same 65,536 entries. Browser-safe.
 */
import { f16ToF32, f32ToF16 } from '../../gguf/half.ts';
import { fma32 } from './ggml-float.ts';

const f32 = Math.fround;
const GELU_COEF_A = f32(0.044715);
// the C source writes √(2/π) to 32 digits; as a float32 it is the float32 of 0.7978845608028654
const SQRT_2_OVER_PI = f32(0.7978845608028654);

/** ggml_gelu_f32 for one float32, in the build's float32 order (tanhf as the float32 of tanh). */
export function ggmlGeluF32(x: number): number {
  const inner = fma32(f32(GELU_COEF_A * x), x, 1);
  const th = f32(Math.tanh(f32(f32(SQRT_2_OVER_PI * x) * inner)));
  return f32(f32(0.5 * x) * f32(1 + th));
}

let table: Uint16Array | undefined;

/** ggml_table_gelu_f16: the f16 bits of gelu for every f16 input bit pattern. */
export function ggmlGeluTable(): Uint16Array {
  if (!table) {
    table = new Uint16Array(65536);
    for (let h = 0; h < 65536; h++) table[h] = f32ToF16(ggmlGeluF32(f16ToF32(h)));
  }
  return table;
}

/** gelu(g) as ggml_vec_geglu_f32 reads it (before the product with up). */
export function ggmlGelu(g: number): number {
  if (g <= -10) return 0;
  if (g >= 10) return g;
  return f16ToF32(ggmlGeluTable()[f32ToF16(g)] as number);
}

/** ggml_vec_geglu_f32 for one element: gelu(g) · u in float32. */
export function ggmlGeglu(g: number, u: number): number {
  if (g <= -10) return 0;
  return f32(ggmlGelu(g) * u);
}
