/**
 * Public, browser-safe API of the GGUF toolkit. Node file I/O lives in ./node-io.ts (import it directly).
 */
export * from './errors.ts';
export * from './types.ts';
export * from './reader.ts';
export * from './writer.ts';
export * from './quant-types.ts';
export * from './half.ts';
export * from './dequantize.ts';
export * from './quantize.ts';
export * from './expert-slice.ts';
export * from './expert-slice-stream.ts';
