/**
 * What one routed expert computes, beyond its three matrices: the expert FFN variant (issue 25). Every family the
 * dispatch path serves is one of these; the hub reads a layer's variant from the model file, a slice carries it (and
 * the biases it needs), a worker announces which variants it computes, and the dispatcher sends a layer only to
 * workers that announce its variant.
 *
 * For one (token row x, expert e, router weight w), with g = gate_e·x, u = up_e·x (each × its expert's scale, then +
 * its bias, where the variant has them):
 *   - `silu`:         h = silu(g) ⊙ u                                        (Qwen, DeepSeek, GLM, Llama 4, …)
 *   - `swiglu_oai`:   h = min(g, L) · σ(α · min(g, L)) ⊙ (clamp(u, −L, L) + 1)  (gpt-oss: α = 1.702, L = 7)
 *   - `swiglu_clamp`: h = silu(min(g, L)) ⊙ clamp(u, −L, L)                   (DeepSeek-V4: swiglu_clamp_exp)
 *   - `silu_limit`:   h = min(silu(g), L) ⊙ clamp(u, −L, L)                   (Step-3.5, Ling 3: swiglu_clamp_exp)
 *   - `gelu`:         h = gelu(g) ⊙ u, the tanh approximation                   (Grok)
 * then y += w · (down_e·h × its scale + its down bias). llama.cpp computes each step in float32 in this order: the
 * scales by ggml_mul (build_lora_mm_id), the biases by ggml_add_id, then the op — ggml_swiglu_split (SIMD silu),
 * ggml_swiglu_oai and ggml_swiglu_clamp (scalar expf), ggml_silu + ggml_clamp + ggml_mul, ggml_geglu_split (gelu read
 * from an f16 table of f16 inputs: gelu(g) = table[f16(g)] for −10 < g < 10, 0 below, g above).
 */

export {
  EXPERT_ACTIVATIONS,
  GPT_OSS_VARIANT,
  LIMITED_ACTIVATIONS,
  SILU_VARIANT,
  checkVariant,
  isPlainVariant,
  type ExpertActivation,
  type ExpertVariant,
} from '../gguf/expert-variant.ts';
import { EXPERT_ACTIVATIONS, LIMITED_ACTIVATIONS, type ExpertActivation, type ExpertVariant } from '../gguf/expert-variant.ts';

/**
 * The capability names a worker lists (`variants` in its channel hello): one per activation, plus `bias` when it adds
 * expert biases. A worker that lists none computes `silu` without biases (every client before issue 25).
 */
export type VariantFeature = ExpertActivation | 'bias' | 'scale';
export const VARIANT_FEATURES: readonly VariantFeature[] = [...EXPERT_ACTIVATIONS, 'bias', 'scale'];

/** The features a worker needs to compute `v`. */
export function variantFeatures(v: ExpertVariant): VariantFeature[] {
  const out: VariantFeature[] = [v.activation];
  if (v.biases) out.push('bias');
  if (v.scales) out.push('scale');
  return out;
}

/** Whether a worker that lists `features` computes `v`. */
export function computesVariant(features: readonly string[], v: ExpertVariant): boolean {
  return variantFeatures(v).every((f) => features.includes(f));
}

export function sameVariant(a: ExpertVariant, b: ExpertVariant): boolean {
  return a.activation === b.activation && a.biases === b.biases && !!a.scales === !!b.scales && a.alpha === b.alpha && a.limit === b.limit;
}

/** For people and logs: "silu", "swiglu_oai(α 1.702, limit 7) + biases", "silu_limit(limit 7) + scales". */
export function describeVariant(v: ExpertVariant): string {
  const p = (x: number): number => Number(x.toPrecision(6));
  const act =
    v.activation === 'swiglu_oai'
      ? `swiglu_oai(α ${p(v.alpha)}, limit ${p(v.limit)})`
      : LIMITED_ACTIVATIONS.includes(v.activation)
        ? `${v.activation}(limit ${p(v.limit)})`
        : v.activation;
  return act + (v.biases ? ' + biases' : '') + (v.scales ? ' + scales' : '');
}
