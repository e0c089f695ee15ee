/** Seeded pseudo-random numbers for tests and benchmarks: the engine's mulberry32 (shaders/random.ts), one implementation. */
export { mulberry32, mulberry32Uint } from '../../shaders/random.ts';
