/**
 * CPU reference of one routed expert, the function every expert kernel is tested against:
 *   y += scale · down( silu(gate · x) ⊙ (up · x) )
 * Weights are dequantized row-major matrices: gate and up are [ff rows × nEmbd], down is [nEmbd rows × ff],
 * which is how a GGUF expert slice lays them out (ggml dims [nEmbd, ff] and [ff, nEmbd]).
 * Accumulates in float64 so the reference is more exact than any float32 kernel it judges.
 */
export interface ExpertMatrices {
  nEmbd: number;
  ff: number;
  gate: Float32Array;
  up: Float32Array;
  down: Float32Array;
}

export function silu(v: number): number {
  return v / (1 + Math.exp(-v));
}

export function expertFfnAccumulate(w: ExpertMatrices, x: Float32Array, scale: number, y: Float64Array): void {
  const { nEmbd, ff, gate, up, down } = w;
  if (x.length !== nEmbd || y.length !== nEmbd) throw new RangeError(`expected vectors of ${nEmbd}, got x ${x.length} y ${y.length}`);
  const h = new Float64Array(ff);
  for (let r = 0; r < ff; r++) {
    let g = 0;
    let u = 0;
    const o = r * nEmbd;
    for (let i = 0; i < nEmbd; i++) {
      const xi = x[i] as number;
      g += (gate[o + i] as number) * xi;
      u += (up[o + i] as number) * xi;
    }
    h[r] = silu(g) * u;
  }
  for (let r = 0; r < nEmbd; r++) {
    let d = 0;
    const o = r * ff;
    for (let i = 0; i < ff; i++) d += (down[o + i] as number) * (h[i] as number);
    y[r] = (y[r] as number) + scale * d;
  }
}
