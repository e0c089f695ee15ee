// Q4_K weights × Q8_K activations, integer dot product (llama numerics). Weight layout: quant/q4_k.wgsl; interface:
// int8/q8_0.wgsl. Per 32-element sub-block s: Σ q·x and Σ x in i32 (Σ x is Q8_K's bsums), then
//   x_d · (d · Σ_s scale[s] · Σ q·x  −  dmin · Σ_s min[s] · Σ x)
// with both outer sums still integers (|.| < 2^26), as ggml's vec_dot_q4_K_q8_K.
fn block_dot_q8(m: u32, wb: u32, qa: u32, da: u32) -> f32 {
  let sm = k4_scales_mins(m, wb + 4u);
  var sq = 0i; // Σ_s scale[s] · Σ q·x
  var sx = 0i; // Σ_s min[s] · Σ x
  for (var j = 0u; j < 4u; j++) {
    // sub-blocks 2j (low nibbles) and 2j+1 (high nibbles) share the 32 bytes qs[32j ..]
    var q_lo = 0i;
    var q_hi = 0i;
    var x_lo = 0i;
    var x_hi = 0i;
    for (var l = 0u; l < 8u; l++) {
      let q = w_u32(m, wb + 16u + 32u * j + 4u * l);
      let a_lo = act_q(qa + 16u * j + l);
      let a_hi = act_q(qa + 16u * j + 8u + l);
      q_lo += dot_i8(q & 0x0f0f0f0fu, a_lo);
      q_hi += dot_i8((q >> 4u) & 0x0f0f0f0fu, a_hi);
      x_lo += dot_i8(I8_ONES, a_lo);
      x_hi += dot_i8(I8_ONES, a_hi);
    }
    sq += k4_scale_i(sm, 2u * j) * q_lo + k4_scale_i(sm, 2u * j + 1u) * q_hi;
    sx += k4_min_i(sm, 2u * j) * x_lo + k4_min_i(sm, 2u * j + 1u) * x_hi;
  }
  return act_scale(da) * (w_f16(m, wb) * f32(sq) - w_f16(m, wb + 2u) * f32(sx));
}
