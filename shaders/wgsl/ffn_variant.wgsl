// The expert FFN variant (protocol/variant.ts), fixed when the pipeline is built (override constants; TS:
// variantConstants in shaders/expert-ffn.ts): the gated unit, and whether each expert multiplies its gate, up and down
// products by a scale and adds biases after them. A silu slice without biases or scales builds with the defaults, so
// the branches below fold away and its kernels compute as before. Part of every up and down kernel's module; the
// kernel declares `variant_words` (its last binding) and `shape`.
//
// variant_words holds the slice's variant data as 32-bit words, indexed by the expert's index in the slice (not in its
// weight part), each section present only where the variant has it (TS: variantDataLayout in weight-parts.ts):
//   biases (HAS_BIASES), f32: gate [n_expert × ff], up [n_expert × ff], down [n_expert × n_embd]
//   scales (HAS_SCALES), f32: gate [n_expert], up [n_expert], down [n_expert]
//   GELU table (GELU_TABLE): ggml's 65,536 f16 GELU values (ggml_table_gelu_f16), two to a word, low half first
// A slice with none of them binds a small unused buffer.

override ACTIVATION: u32 = 0u; // one of the ACT_ constants
override SWIGLU_ALPHA: f32 = 0.0;
override SWIGLU_LIMIT: f32 = 0.0; // L of swiglu_oai, swiglu_clamp and silu_limit
override HAS_BIASES: bool = false;
override HAS_SCALES: bool = false;
// gelu as llama.cpp's CPU reads it (llama numerics): the f16 table at the input's f16 bits; else the tanh formula in f32.
override GELU_TABLE: bool = false;

const ACT_SILU = 0u;
const ACT_SWIGLU_OAI = 1u;
const ACT_SWIGLU_CLAMP = 2u;
const ACT_SILU_LIMIT = 3u;
const ACT_GELU = 4u;

fn variant_f32(i: u32) -> f32 {
  return bitcast<f32>(variant_words[i]);
}

// Word index of the scales and of the GELU table (the sections before them as the variant has them).
fn scales_at() -> u32 {
  return select(0u, shape.n_expert * (2u * shape.ff + shape.n_embd), HAS_BIASES);
}

fn gelu_table_at() -> u32 {
  return scales_at() + select(0u, 3u * shape.n_expert, HAS_SCALES);
}

// llama.cpp multiplies by the scale (ggml_mul) and then adds the bias (ggml_add_id), each rounded to f32. The int8
// kernels, bit for bit as ggml, call product_barrier_init with a uniform they know to be nonzero so that no compiler
// contracts the two into one fused multiply-add (as ggml_math.wgsl's opaque); elsewhere the OR is with a zero.
var<private> product_barrier_zero: u32;

fn product_barrier_init(nonzero: u32) {
  product_barrier_zero = select(1u, 0u, nonzero != 0u);
}

fn product_barrier(x: f32) -> f32 {
  return bitcast<f32>(bitcast<u32>(x) | product_barrier_zero);
}

// v × the scale at `s` (if the variant has scales), then + the bias at `b` (if it has biases).
fn scaled_biased(v: f32, s: u32, b: u32) -> f32 {
  var x = v;
  if (HAS_SCALES) {
    x = product_barrier(x * variant_f32(s));
  }
  if (HAS_BIASES) {
    x = x + variant_f32(b);
  }
  return x;
}

// gate_e[row] · x, scaled and biased (slice expert e).
fn finish_gate(g: f32, e: u32, row: u32) -> f32 {
  return scaled_biased(g, scales_at() + e, e * shape.ff + row);
}

fn finish_up(u: f32, e: u32, row: u32) -> f32 {
  return scaled_biased(u, scales_at() + shape.n_expert + e, (shape.n_expert + e) * shape.ff + row);
}

// down_e[row] · h, scaled and biased: before the router weight multiplies it (expert_combine.wgsl), as ggml_mul and
// ggml_add_id run before the weights' ggml_mul in llama.cpp's build_moe_ffn.
fn finish_down(y: f32, e: u32, row: u32) -> f32 {
  return scaled_biased(y, scales_at() + 2u * shape.n_expert + e, 2u * shape.n_expert * shape.ff + e * shape.n_embd + row);
}

// f32 to the bits of the nearest f16, ties to even (what x86's F16C conversion gives ggml), by integer steps:
// WGSL's pack2x16float may round either way. Subnormal f16 results are rounded as well; NaN stays NaN.
fn f32_to_f16_bits(x: f32) -> u32 {
  let bits = bitcast<u32>(x);
  let sign = (bits >> 16u) & 0x8000u;
  let e = (bits >> 23u) & 0xffu;
  let m = bits & 0x7fffffu;
  if (e == 255u) {
    return sign | select(0x7c00u, 0x7e00u, m != 0u);
  }
  if (e >= 143u) {
    return sign | 0x7c00u; // |x| ≥ 65536: past the largest f16
  }
  if (e >= 113u) {
    // normal f16 (a carry out of the mantissa moves the exponent up, to infinity at the top, as rounding should)
    let h = ((e - 112u) << 10u) | (m >> 13u);
    let rest = m & 0x1fffu;
    return sign | (h + select(0u, 1u, rest > 0x1000u || (rest == 0x1000u && (h & 1u) == 1u)));
  }
  if (e < 102u) {
    return sign; // below half the smallest f16 subnormal: ±0
  }
  // subnormal f16: the 24-bit significand shifted down by 14 … 24
  let full = m | 0x800000u;
  let shift = 126u - e;
  let h = full >> shift;
  let rest = full & ((1u << shift) - 1u);
  let half = 1u << (shift - 1u);
  return sign | (h + select(0u, 1u, rest > half || (rest == half && (h & 1u) == 1u)));
}

// ggml_vec_geglu_f32's GELU of g (GGML_GELU_FP16): 0 at or below −10, g at or above 10, else the table at f16(g).
fn ggml_gelu(g: f32) -> f32 {
  if (g <= -10.0) {
    return 0.0;
  }
  if (g >= 10.0) {
    return g;
  }
  let h = f32_to_f16_bits(g);
  let w = variant_words[gelu_table_at() + (h >> 1u)];
  return f16_bits_to_f32((w >> ((h & 1u) * 16u)) & 0xffffu);
}

// GELU's tanh approximation (ggml_gelu_f32's formula) in f32. The tanh argument is clamped to ±10, where tanh is
// 1 in f32 already, because some drivers' tanh overflows to NaN for large arguments.
fn gelu_tanh(g: f32) -> f32 {
  let inner = 0.7978845608028654 * g * (1.0 + 0.044715 * g * g);
  return 0.5 * g * (1.0 + tanh(clamp(inner, -10.0, 10.0)));
}

// gelu(g) · u: ggml's (0 at or below −10, the table product inside) in llama numerics, else the formula.
fn gelu_unit(g: f32, u: f32) -> f32 {
  if (GELU_TABLE) {
    if (g <= -10.0) {
      return 0.0;
    }
    return ggml_gelu(g) * u;
  }
  return gelu_tanh(g) * u;
}

// The float kernels' gated unit, each in float32 in llama.cpp's order:
//   swiglu_oai   (ggml_compute_forward_swiglu_oai_f32): x = min(g, L), y = clamp(u, −L, L), x / (1 + exp(α · −x)) · (y + 1)
//   swiglu_clamp (ggml_compute_forward_swiglu_clamp_f32): x = min(g, L), y = clamp(u, −L, L), x / (1 + exp(−x)) · y
//   silu_limit   (ggml_silu, ggml_clamp, ggml_mul): min(silu(g), L) · clamp(u, −L, L)
//   gelu         (ggml_geglu_split): gelu(g) · u (gelu_unit)
fn gated_unit(g: f32, u: f32) -> f32 {
  switch (ACTIVATION) {
    case ACT_SWIGLU_OAI: {
      let x = min(g, SWIGLU_LIMIT);
      let y = clamp(u, -SWIGLU_LIMIT, SWIGLU_LIMIT);
      return x / (1.0 + exp(SWIGLU_ALPHA * -x)) * (y + 1.0);
    }
    case ACT_SWIGLU_CLAMP: {
      let x = min(g, SWIGLU_LIMIT);
      let y = clamp(u, -SWIGLU_LIMIT, SWIGLU_LIMIT);
      return x / (1.0 + exp(-x)) * y;
    }
    case ACT_SILU_LIMIT: {
      return min(silu(g), SWIGLU_LIMIT) * clamp(u, -SWIGLU_LIMIT, SWIGLU_LIMIT);
    }
    case ACT_GELU: {
      return gelu_unit(g, u);
    }
    default: {
      return silu(g) * u;
    }
  }
}
