/**
 * CPU reference of one routed expert, the function every expert kernel is tested against:
 *   y += scale · down( silu(gate · x) ⊙ (up · x) )
 * Weights are dequantized row-major matrices: gate and up are [ff rows × nEmbd], down is [nEmbd rows × ff],
 * which is how a GGUF expert slice lays them out (ggml dims [nEmbd, ff] and [ff, nEmbd]).
 * Accumulates in float64 so the reference is more exact than any float32 kernel it judges.
 *
 * With `ggmlTypes` set, activations are first rounded the way llama.cpp's CPU backend rounds them for those weight
 * types (see ggml-activations.ts), so the result tracks llama.cpp's own numbers rather than the exact math.
 */
import type { GGMLType } from '../../gguf/quant-types.ts';
import { roundActivations, vecDotType } from './ggml-activations.ts';

export interface ExpertMatrices {
  nEmbd: number;
  ff: number;
  gate: Float32Array;
  up: Float32Array;
  down: Float32Array;
  /** Stored types of the three matrices, when they come from a GGUF. */
  ggmlTypes?: { gate: GGMLType; up: GGMLType; down: GGMLType };
}

export function silu(v: number): number {
  return v / (1 + Math.exp(-v));
}

export function expertFfnAccumulate(w: ExpertMatrices, x: Float32Array, scale: number, y: Float64Array, ggmlRounding = false): void {
  const { nEmbd, ff, gate, up, down } = w;
  if (x.length !== nEmbd || y.length !== nEmbd) throw new RangeError(`expected vectors of ${nEmbd}, got x ${x.length} y ${y.length}`);
  const types = ggmlRounding ? w.ggmlTypes : undefined;
  const xg = types ? roundActivations(vecDotType(types.gate), x) : x;
  const xu = types ? roundActivations(vecDotType(types.up), x) : x;
  const h = new Float32Array(ff);
  for (let r = 0; r < ff; r++) {
    let g = 0;
    let u = 0;
    const o = r * nEmbd;
    for (let i = 0; i < nEmbd; i++) {
      g += (gate[o + i] as number) * (xg[i] as number);
      u += (up[o + i] as number) * (xu[i] as number);
    }
    h[r] = silu(g) * u;
  }
  const hd = types ? roundActivations(vecDotType(types.down), h) : h;
  for (let r = 0; r < nEmbd; r++) {
    let d = 0;
    const o = r * ff;
    for (let i = 0; i < ff; i++) d += (down[o + i] as number) * (hd[i] as number);
    y[r] = (y[r] as number) + scale * d;
  }
}
