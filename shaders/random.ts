/**
 * Seeded pseudo-random numbers (mulberry32): the same seed gives the same data everywhere. The engine's synthetic
 * timing call (computer.ts) draws from it, and tests and benchmarks import it from here.
 */
export function mulberry32Uint(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** Uniform in [0, 1). */
export function mulberry32(seed: number): () => number {
  const next = mulberry32Uint(seed);
  return () => next() / 4294967296;
}
