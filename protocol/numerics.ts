/**
 * The two words a worker and the hub agree on about how a slice is computed: which backend runs it and how it rounds.
 * Both travel in the volunteer channel's hello and in the dispatch socket's hello; the engine (shaders/) implements them.
 */

/**
 * How a backend rounds. 'exact': float math on the dequantized weights (right for any coordinator whose numerics are
 * unknown). 'llama': activations are first rounded to the weight type's vec-dot type exactly as llama.cpp's CPU backend
 * does (Q8_0 / Q8_K blocks, F16, BF16; shaders/reference/ggml-activations.ts), both before gate/up and before down,
 * so an honest worker agrees with a llama.cpp CPU coordinator's own result to float-summation precision.
 */
export type Numerics = 'exact' | 'llama';

/** Which backend computes a slice's experts: our WebGPU kernels or the wasm fallback (shaders/backend-choice.ts). */
export type Backend = 'webgpu' | 'wasm';
