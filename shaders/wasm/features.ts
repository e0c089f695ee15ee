/**
 * Which build of the wasm fallback's kernel this runtime can run (browser-safe). build.ts compiles the same sources
 * twice: 'simd' (WebAssembly SIMD, every browser with it) and 'relaxed-simd' (adds relaxed SIMD's
 * i16x8.relaxed_dot_i8x16_i7x16_s, pmaddubsw on x64: Chromium ≥ 114 by default, Node 20 with
 * `--experimental-wasm-relaxed-simd`, Node ≥ 22 by default). Both compute the same bits (docs/kernels.md, "Wasm fallback").
 *
 * @example
 *   const variant = bestKernelVariant(); // 'relaxed-simd' where the runtime validates a relaxed op, else 'simd'
 */

export type ExpertKernelVariant = 'simd' | 'relaxed-simd';

export const KERNEL_VARIANTS: readonly ExpertKernelVariant[] = ['simd', 'relaxed-simd'];

/** `(func (result v128) (i16x8.relaxed_dot_i8x16_i7x16_s (v128.const 0) (v128.const 0)))`: valid only with relaxed SIMD. */
export const RELAXED_PROBE: Uint8Array<ArrayBuffer> = new Uint8Array([
  0x00,
  0x61,
  0x73,
  0x6d,
  0x01,
  0x00,
  0x00,
  0x00, // magic, version 1
  0x01,
  0x05,
  0x01,
  0x60,
  0x00,
  0x01,
  0x7b, // type section: () -> v128
  0x03,
  0x02,
  0x01,
  0x00, // function section: one function of type 0
  0x0a,
  0x2b,
  0x01,
  0x29,
  0x00, // code section: one body of 41 bytes, no locals
  0xfd,
  0x0c,
  ...new Array<number>(16).fill(0), // v128.const 0
  0xfd,
  0x0c,
  ...new Array<number>(16).fill(0), // v128.const 0
  0xfd,
  0x92,
  0x02, // i16x8.relaxed_dot_i8x16_i7x16_s (0xfd 274)
  0x0b, // end
]);

/** Whether this runtime validates relaxed SIMD (a validation, not a compile that may fail: no exception is the signal). */
export function relaxedSimdSupported(): boolean {
  return typeof WebAssembly === 'object' && WebAssembly.validate(RELAXED_PROBE);
}

/** The fastest build this runtime runs: 'relaxed-simd' where it validates, else 'simd'. */
export function bestKernelVariant(): ExpertKernelVariant {
  return relaxedSimdSupported() ? 'relaxed-simd' : 'simd';
}
