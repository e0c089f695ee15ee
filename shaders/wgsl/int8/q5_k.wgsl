// Q5_K weights × Q8_K activations, integer dot product (llama numerics). Weight layout: quant/q5_k.wgsl; interface:
// int8/q8_0.wgsl; the sums as in int8/q4_k.wgsl, with the 5th bit of each quant from qh (quants 0..31).
fn block_dot_q8(m: u32, wb: u32, qa: u32, da: u32) -> f32 {
  let sm = k4_scales_mins(m, wb + 4u);
  var sq = 0i;
  var sx = 0i;
  for (var j = 0u; j < 4u; j++) {
    var q_lo = 0i;
    var q_hi = 0i;
    var x_lo = 0i;
    var x_hi = 0i;
    for (var l = 0u; l < 8u; l++) {
      let q = w_u32(m, wb + 48u + 32u * j + 4u * l);
      let h = w_u32(m, wb + 16u + 4u * l);
      let lo = (q & 0x0f0f0f0fu) | (((h >> (2u * j)) & 0x01010101u) << 4u);
      let hi = ((q >> 4u) & 0x0f0f0f0fu) | (((h >> (2u * j + 1u)) & 0x01010101u) << 4u);
      let a_lo = act_q(qa + 16u * j + l);
      let a_hi = act_q(qa + 16u * j + 8u + l);
      q_lo += dot_i8(lo, a_lo);
      q_hi += dot_i8(hi, a_hi);
      x_lo += dot_i8(I8_ONES, a_lo);
      x_hi += dot_i8(I8_ONES, a_hi);
    }
    sq += k4_scale_i(sm, 2u * j) * q_lo + k4_scale_i(sm, 2u * j + 1u) * q_hi;
    sx += k4_min_i(sm, 2u * j) * x_lo + k4_min_i(sm, 2u * j + 1u) * x_hi;
  }
  return act_scale(da) * (w_f16(m, wb) * f32(sq) - w_f16(m, wb + 2u) * f32(sx));
}
