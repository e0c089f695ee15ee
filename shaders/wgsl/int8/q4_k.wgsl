// Q4_K weights × Q8_K activations in ggml's lane order (llama numerics; ggml_vec_dot_q4_K_q8_K, AVX2). Weight
// layout: quant/q4_k.wgsl; interface: int8/q8_0.wgsl. For each 32-byte run j of qs (sub-blocks 2j in the low
// nibbles, 2j + 1 in the high ones), lane l gets scale[2j] · Σ(low nibbles of bytes 4l .. 4l + 3 × their
// activations) + scale[2j + 1] · Σ(high nibbles × theirs). The mins have a 4-lane accumulator of their own: lane
// l < 4 holds min[2l] · S(2l) + min[2l + 1] · S(2l + 1), S(s) the sum of sub-block s's activation quants (two bsums),
// times dmin = -y.d · x.dmin; the row's result is hsum_float_8(acc) + ((m0 + m2) + (m1 + m3)).
const MIN_SUM = true;
const MIN_FIRST = false;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  let sm = k4_scales_mins(m, wb + 4u);
  var s = 0i;
  for (var j = 0u; j < 4u; j++) {
    let q = w_u32(m, wb + 16u + 32u * j + 4u * l);
    let lo = dot_i8(q & 0x0f0f0f0fu, act_q(qa + 16u * j + l));
    let hi = dot_i8((q >> 4u) & 0x0f0f0f0fu, act_q(qa + 16u * j + 8u + l));
    s += k4_scale_i(sm, 2u * j) * lo + k4_scale_i(sm, 2u * j + 1u) * hi;
  }
  return s;
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return act_scale(da) * w_f16(m, wb);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  if (l >= 4u) {
    return acc;
  }
  let sm = k4_scales_mins(m, wb + 4u);
  let s0 = act_bsum(da, 4u * l) + act_bsum(da, 4u * l + 1u);
  let s1 = act_bsum(da, 4u * l + 2u) + act_bsum(da, 4u * l + 3u);
  let p = k4_min_i(sm, 2u * l) * s0 + k4_min_i(sm, 2u * l + 1u) * s1;
  return fma_rn(-act_scale(da) * w_f16(m, wb + 2u), f32(p), acc);
}
