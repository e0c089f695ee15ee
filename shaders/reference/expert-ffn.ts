/**
 * CPU reference of one routed expert, the function every expert kernel is tested against:
 *   y += scale · down( silu(gate · x) ⊙ (up · x) )
 * or, for another expert FFN variant (protocol/variant.ts), its activation and biases:
 *   y += scale · (down( act(gate · x + bg, up · x + bu) ) + bd)
 * Weights are dequantized row-major matrices: gate and up are [ff rows × nEmbd], down is [nEmbd rows × ff],
 * which is how a GGUF expert slice lays them out (ggml dims [nEmbd, ff] and [ff, nEmbd]).
 * Accumulates in float64 so the reference is more exact than any float32 kernel it judges.
 *
 * With `ggmlTypes` set, activations are first rounded the way llama.cpp's CPU backend rounds them for those weight
 * types (see ggml-activations.ts), so the result tracks llama.cpp's own numbers rather than the exact math.
 */
import type { GGMLType } from '../../gguf/quant-types.ts';
import { SILU_VARIANT, type ExpertVariant } from '../../protocol/variant.ts';
import { roundActivations, vecDotType } from './ggml-activations.ts';

export interface ExpertMatrices {
  nEmbd: number;
  ff: number;
  gate: Float32Array;
  up: Float32Array;
  down: Float32Array;
  /** Stored types of the three matrices, when they come from a GGUF. */
  ggmlTypes?: { gate: GGMLType; up: GGMLType; down: GGMLType };
  /** The expert FFN variant; absent: SiLU-gated without biases. */
  variant?: ExpertVariant;
  /** This expert's biases when the variant has them: gate and up [ff], down [nEmbd]. */
  biases?: ExpertBiasVectors;
  /** This expert's scales when the variant has them: each product of that matrix is multiplied by it. */
  scales?: { gate: number; up: number; down: number };
}

export interface ExpertBiasVectors {
  gate: Float32Array;
  up: Float32Array;
  down: Float32Array;
}

/** gpt-oss's gated unit (ggml_swiglu_oai): min(g, L) · σ(α · min(g, L)) · (clamp(u, −L, L) + 1), in float64. */
export function swigluOai(g: number, u: number, alpha: number, limit: number): number {
  const x = Math.min(g, limit);
  const y = Math.min(Math.max(u, -limit), limit);
  return (x / (1 + Math.exp(-alpha * x))) * (y + 1);
}

/**
 * ggml's float32 swiglu_oai, step by step as ggml_compute_forward_swiglu_oai_f32 rounds (each operation to float32;
 * expf as the correctly rounded float of exp, which glibc's expf returns but in rare near-ties).
 */
export function swigluOaiF32(g: number, u: number, alpha: number, limit: number): number {
  const f = Math.fround;
  const x = Math.min(f(g), f(limit));
  const y = Math.min(Math.max(f(u), -f(limit)), f(limit));
  const e = f(Math.exp(f(f(alpha) * -x)));
  return f(f(x / f(1 + e)) * f(y + 1));
}

/** The tanh approximation of GELU llama.cpp uses (ggml_gelu_f32's formula), in float64. */
export function gelu(v: number): number {
  return 0.5 * v * (1 + Math.tanh(0.7978845608028654 * v * (1 + 0.044715 * v * v)));
}

/** The gated unit of `variant` on one gate and up value (float64, exact math: no f16 table, no float32 steps). */
export function gatedUnit(variant: ExpertVariant, g: number, u: number): number {
  const L = variant.limit;
  const clampU = (): number => Math.min(Math.max(u, -L), L);
  switch (variant.activation) {
    case 'silu':
      return silu(g) * u;
    case 'swiglu_oai':
      return swigluOai(g, u, variant.alpha, L);
    case 'swiglu_clamp':
      return silu(Math.min(g, L)) * clampU();
    case 'silu_limit':
      return Math.min(silu(g), L) * clampU();
    case 'gelu':
      return gelu(g) * u;
  }
}

/**
 * ggml's float32 swiglu_clamp (DeepSeek-V4), as ggml_compute_forward_swiglu_clamp_f32 rounds: x = min(g, L),
 * y = clamp(u, −L, L), x / (1 + expf(−x)) · y (expf as the correctly rounded float of exp).
 */
export function swigluClampF32(g: number, u: number, limit: number): number {
  const f = Math.fround;
  const x = Math.min(f(g), f(limit));
  const y = Math.min(Math.max(f(u), -f(limit)), f(limit));
  const e = f(Math.exp(-x));
  return f(f(x / f(1 + e)) * y);
}

/**
 * ggml's float32 silu_limit (Step-3.5, Ling 3): ggml_silu (`silu`: the build's SIMD silu, harness/ggml-exact.ts
 * ggmlSilu), ggml_clamp to ≤ L, times clamp(u, −L, L).
 */
export function siluLimitF32(g: number, u: number, limit: number, silu32: (x: number) => number): number {
  const f = Math.fround;
  const a = Math.min(silu32(f(g)), f(limit));
  const y = Math.min(Math.max(f(u), -f(limit)), f(limit));
  return f(a * y);
}

export function silu(v: number): number {
  return v / (1 + Math.exp(-v));
}

export function expertFfnAccumulate(w: ExpertMatrices, x: Float32Array, scale: number, y: Float64Array, ggmlRounding = false): void {
  const { nEmbd, ff, gate, up, down } = w;
  const variant = w.variant ?? SILU_VARIANT;
  const b = variant.biases ? w.biases : undefined;
  if (variant.biases && !b) throw new RangeError(`expertFfnAccumulate: the variant has biases and the expert has none`);
  const sc = variant.scales ? w.scales : undefined;
  if (variant.scales && !sc) throw new RangeError(`expertFfnAccumulate: the variant has scales and the expert has none`);
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
    if (sc) {
      g *= sc.gate;
      u *= sc.up;
    }
    if (b) {
      g += b.gate[r] as number;
      u += b.up[r] as number;
    }
    h[r] = gatedUnit(variant, g, u);
  }
  const hd = types ? roundActivations(vecDotType(types.down), h) : h;
  for (let r = 0; r < nEmbd; r++) {
    let d = 0;
    const o = r * ff;
    for (let i = 0; i < ff; i++) d += (down[o + i] as number) * (hd[i] as number);
    if (sc) d *= sc.down;
    if (b) d += b.down[r] as number;
    y[r] = (y[r] as number) + scale * d;
  }
}
