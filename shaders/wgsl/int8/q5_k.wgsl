// Q5_K weights × Q8_K activations in ggml's lane order (llama numerics; ggml_vec_dot_q5_K_q8_K, AVX2). Weight
// layout: quant/q5_k.wgsl; interface: int8/q8_0.wgsl. The lanes as in int8/q4_k.wgsl, each quant with its 5th bit
// from qh (bit 2j of qh[b] for the low nibble of qs[32j + b], bit 2j + 1 for the high one). The mins are one
// scalar: per block dmin · Σ_s min[s] · S(s) added by a fused multiply-add (summs += dmin * hsum, which GCC
// contracts: vfmadd231ss in the coordinator's build), kept here in lane 0; the row's result is
// hsum_float_8(acc) + summs.
const MIN_SUM = true;
const MIN_FIRST = false;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  let sm = k4_scales_mins(m, wb + 4u);
  let h = w_u32(m, wb + 16u + 4u * l);
  var s = 0i;
  for (var j = 0u; j < 4u; j++) {
    let q = w_u32(m, wb + 48u + 32u * j + 4u * l);
    let q_lo = (q & 0x0f0f0f0fu) | (((h >> (2u * j)) & 0x01010101u) << 4u);
    let q_hi = ((q >> 4u) & 0x0f0f0f0fu) | (((h >> (2u * j + 1u)) & 0x01010101u) << 4u);
    let lo = dot_i8(q_lo, act_q(qa + 16u * j + l));
    let hi = dot_i8(q_hi, act_q(qa + 16u * j + 8u + l));
    s += k4_scale_i(sm, 2u * j) * lo + k4_scale_i(sm, 2u * j + 1u) * hi;
  }
  return s;
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return act_scale(da) * w_f16(m, wb);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  if (l != 0u) {
    return acc;
  }
  let sm = k4_scales_mins(m, wb + 4u);
  var p = 0i;
  for (var s = 0u; s < 8u; s++) {
    p += k4_min_i(sm, s) * (act_bsum(da, 2u * s) + act_bsum(da, 2u * s + 1u));
  }
  return fma_rn(-act_scale(da) * w_f16(m, wb + 2u), f32(p), acc);
}
