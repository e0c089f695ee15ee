// Q6_K weights × Q8_K activations in ggml's lane order (llama numerics; ggml_vec_dot_q6_K_q8_K, AVX2). Weight
// layout: quant/q6_k.wgsl; interface: int8/q8_0.wgsl. ggml multiplies the unsigned quants (0..63) and subtracts
// the offset 32 through the bsums: for each half h and each 32-element run k of it, lane l gets
// scale[8h + 2k + (l >= 4)] · Σ(quants of bytes 4l .. 4l + 3 × their activations), and then loses
// 32 · (scale[2l] · bsum[2l] + scale[2l + 1] · bsum[2l + 1]). The scales are int8.
const MIN_SUM = false;
const MIN_FIRST = false;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  var s = 0i;
  for (var h = 0u; h < 2u; h++) {
    let qh = w_u32(m, wb + 128u + 32u * h + 4u * l);
    for (var k = 0u; k < 4u; k++) {
      let lo = (w_u32(m, wb + 64u * h + 32u * (k & 1u) + 4u * l) >> (4u * (k >> 1u))) & 0x0f0f0f0fu;
      let hi = (qh >> (2u * k)) & 0x03030303u;
      let p = dot_i8(lo | (hi << 4u), act_q(qa + 32u * h + 8u * k + l));
      s += q6_scale_i(m, wb, 8u * h + 2u * k + (l >> 2u)) * p;
    }
  }
  let off = q6_scale_i(m, wb, 2u * l) * act_bsum(da, 2u * l) + q6_scale_i(m, wb, 2u * l + 1u) * act_bsum(da, 2u * l + 1u);
  return s - 32i * off;
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return act_scale(da) * w_f16(m, wb + 208u);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  return acc;
}

fn q6_scale_i(m: u32, wb: u32, i: u32) -> i32 {
  return extractBits(i32(w_u8(m, wb + 192u + i)), 0u, 8u); // int8, sign-extended
}
