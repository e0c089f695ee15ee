/**
 * What one routed expert computes, beyond its three matrices: the expert FFN variant (issue 25). Every family the
 * dispatch path serves is one of these; the hub reads a layer's variant from the model file, a slice carries it (and
 * the biases it needs), a worker announces which variants it computes, and the dispatcher sends a layer only to
 * workers that announce its variant.
 *
 * For one (token row x, expert e, router weight w), with g = gate_e·x, u = up_e·x (each + its bias where the variant
 * has biases):
 *   - `silu`:       h = silu(g) ⊙ u                                        (Qwen, DeepSeek, GLM, Llama 4, …)
 *   - `swiglu_oai`: h = min(g, L) · σ(α · min(g, L)) ⊙ (clamp(u, −L, L) + 1)  (gpt-oss: α = 1.702, L = 7)
 * then y += w · (down_e·h + down bias). llama.cpp computes each step in float32 in this order
 * (ggml_compute_forward_swiglu_oai_f32: x / (1 + expf(α · −x)) · (y + 1); ggml_add_id adds the biases).
 */

export type ExpertActivation = 'silu' | 'swiglu_oai';
export const EXPERT_ACTIVATIONS: readonly ExpertActivation[] = ['silu', 'swiglu_oai'];

export interface ExpertVariant {
  activation: ExpertActivation;
  /** swiglu_oai: the sigmoid's slope α and the clamp limit L (gpt-oss: 1.702 and 7; llama.cpp fixes both). 0 for silu. */
  alpha: number;
  limit: number;
  /** Whether each expert adds a bias after its gate, up and down products (float32 vectors, ffn_*_exps.bias). */
  biases: boolean;
}

/** Every family before issue 25: SiLU-gated, no biases. A slice or layer that says nothing is this. */
export const SILU_VARIANT: Readonly<ExpertVariant> = Object.freeze({ activation: 'silu', alpha: 0, limit: 0, biases: false });

/** gpt-oss (llama.cpp's LLM_FFN_SWIGLU_OAI_MOE with the constants build_moe_ffn fixes, and expert biases). */
export const GPT_OSS_VARIANT: Readonly<ExpertVariant> = Object.freeze({
  activation: 'swiglu_oai',
  alpha: Math.fround(1.702),
  limit: 7,
  biases: true,
});

/**
 * The capability names a worker lists (`variants` in its channel hello): one per activation, plus `bias` when it adds
 * expert biases. A worker that lists none computes `silu` without biases (every client before issue 25).
 */
export type VariantFeature = ExpertActivation | 'bias';
export const VARIANT_FEATURES: readonly VariantFeature[] = ['silu', 'swiglu_oai', 'bias'];

/** The features a worker needs to compute `v`. */
export function variantFeatures(v: ExpertVariant): VariantFeature[] {
  return v.biases ? [v.activation, 'bias'] : [v.activation];
}

/** Whether a worker that lists `features` computes `v`. */
export function computesVariant(features: readonly string[], v: ExpertVariant): boolean {
  return variantFeatures(v).every((f) => features.includes(f));
}

export function sameVariant(a: ExpertVariant, b: ExpertVariant): boolean {
  return a.activation === b.activation && a.biases === b.biases && a.alpha === b.alpha && a.limit === b.limit;
}

/** For people and logs: "silu", "swiglu_oai(α 1.702, limit 7) + biases". */
export function describeVariant(v: ExpertVariant): string {
  const act = v.activation === 'silu' ? 'silu' : `${v.activation}(α ${Number(v.alpha.toPrecision(6))}, limit ${v.limit})`;
  return v.biases ? `${act} + biases` : act;
}

/** Throws a RangeError naming the field when `v` is not a variant a worker could compute. */
export function checkVariant(v: ExpertVariant): void {
  if (!EXPERT_ACTIVATIONS.includes(v.activation)) throw new RangeError(`unknown expert activation ${String(v.activation)}`);
  if (v.activation === 'swiglu_oai') {
    if (!(Number.isFinite(v.alpha) && v.alpha > 0)) throw new RangeError(`swiglu_oai needs alpha > 0, got ${v.alpha}`);
    if (!(Number.isFinite(v.limit) && v.limit > 0)) throw new RangeError(`swiglu_oai needs limit > 0, got ${v.limit}`);
  } else if (v.alpha !== 0 || v.limit !== 0) {
    throw new RangeError(`silu takes no alpha or limit, got ${v.alpha} and ${v.limit}`);
  }
}
