// The expert FFN variant (protocol/variant.ts), fixed when the pipeline is built (override constants; TS:
// variantConstants in shaders/expert-ffn.ts): the gated unit, and whether each expert adds biases after its gate, up
// and down products. A silu slice without biases builds with the defaults, so the branches below fold away and its
// kernels compute as before. Part of every up and down kernel's module; the kernel declares `biases` (its last
// binding) and `shape`.
//
// biases holds the whole slice's float32 biases, expert-major and indexed by the expert's index in the slice (not in
// its weight part): gate [n_expert × ff], then up [n_expert × ff], then down [n_expert × n_embd]. A slice without
// biases binds a small unused buffer.

override ACTIVATION: u32 = 0u; // ACT_SILU or ACT_SWIGLU_OAI
override SWIGLU_ALPHA: f32 = 0.0;
override SWIGLU_LIMIT: f32 = 0.0;
override HAS_BIASES: bool = false;

const ACT_SILU = 0u;
const ACT_SWIGLU_OAI = 1u;

// gate_e[row] · x + its bias (slice expert e).
fn with_gate_bias(g: f32, e: u32, row: u32) -> f32 {
  if (HAS_BIASES) {
    return g + biases[e * shape.ff + row];
  }
  return g;
}

fn with_up_bias(u: f32, e: u32, row: u32) -> f32 {
  if (HAS_BIASES) {
    return u + biases[(shape.n_expert + e) * shape.ff + row];
  }
  return u;
}

// down_e[row] · h + its bias: added before the router weight multiplies it (expert_combine.wgsl), as ggml_add_id
// runs before ggml_mul in llama.cpp's build_moe_ffn.
fn with_down_bias(y: f32, e: u32, row: u32) -> f32 {
  if (HAS_BIASES) {
    return y + biases[2u * shape.n_expert * shape.ff + e * shape.n_embd + row];
  }
  return y;
}

// The float kernels' gated unit. swiglu_oai in float32, in ggml_compute_forward_swiglu_oai_f32's order:
// x = min(g, L), y = clamp(u, −L, L), x / (1 + exp(α · −x)) · (y + 1).
fn gated_unit(g: f32, u: f32) -> f32 {
  if (ACTIVATION == ACT_SWIGLU_OAI) {
    let x = min(g, SWIGLU_LIMIT);
    let y = clamp(u, -SWIGLU_LIMIT, SWIGLU_LIMIT);
    return x / (1.0 + exp(SWIGLU_ALPHA * -x)) * (y + 1.0);
  }
  return silu(g) * u;
}
