/**
 * Float32 operations as x86-64 executes them for ggml's CPU backend, for the references that reproduce its numbers bit
 * for bit (harness/ggml-exact.ts, ggml-gelu.ts). Browser-safe.
 */

const f32 = Math.fround;
const bitsF = new Float32Array(1);
const bitsU = new Uint32Array(bitsF.buffer);

export function f32Bits(x: number): number {
  bitsF[0] = x;
  return bitsU[0] as number;
}

export function fromF32Bits(u: number): number {
  bitsU[0] = u >>> 0;
  return bitsF[0] as number;
}

/** The float32 next to `r` (a float32) towards +∞ (up) or −∞. */
function nextF32(r: number, up: boolean): number {
  if (r === 0) return up ? fromF32Bits(1) : -fromF32Bits(1);
  const b = f32Bits(r);
  return fromF32Bits(r > 0 === up ? b + 1 : b - 1);
}

/**
 * Single-rounded float32 a·b + c (the FMA instruction) for float32 inputs. a·b is exact in float64 (48 bits); the sum
 * is rounded once to float64 with its exact error kept (TwoSum), so the only case where rounding that float64 to
 * float32 differs from rounding the exact value is a float64 sum lying exactly halfway between two float32s.
 */
export function fma32(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const bb = s - p;
  const e = p - (s - bb) + (c - bb);
  const r = f32(s);
  if (e === 0 || r === s) return r;
  const other = nextF32(r, s > r);
  if (s - r !== other - s) return r; // not a tie: the float64 rounding cannot have crossed a float32 midpoint
  return e > 0 === other > r ? other : r;
}
