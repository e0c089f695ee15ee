// Q6_K weights × Q8_K activations, integer dot product (llama numerics). Weight layout: quant/q6_k.wgsl; interface:
// int8/q8_0.wgsl. Quants q - 32 (in -32..31) are formed per byte (bytes_minus); each 16-element run has its own
// int8 scale: x_d · d · Σ_run scale[run] · Σ q·x, the outer sum an integer (|.| < 2^28).
fn block_dot_q8(m: u32, wb: u32, qa: u32, da: u32) -> f32 {
  var s = 0i;
  for (var h = 0u; h < 2u; h++) {
    for (var j = 0u; j < 4u; j++) {
      // elements 128h + 32j + l, l = 4·lq + k: runs l < 16 and l >= 16 have scales 8h + 2j and 8h + 2j + 1
      var run0 = 0i;
      var run1 = 0i;
      for (var lq = 0u; lq < 8u; lq++) {
        let lo = (w_u32(m, wb + 64u * h + 32u * (j & 1u) + 4u * lq) >> (4u * (j >> 1u))) & 0x0f0f0f0fu;
        let hi = (w_u32(m, wb + 128u + 32u * h + 4u * lq) >> (2u * j)) & 0x03030303u;
        let p = dot_i8(bytes_minus(lo | (hi << 4u), 0x20202020u), act_q(qa + 32u * h + 8u * j + lq));
        if (lq < 4u) {
          run0 += p;
        } else {
          run1 += p;
        }
      }
      let si = 8u * h + 2u * j;
      s += q6_scale_i(m, wb, si) * run0 + q6_scale_i(m, wb, si + 1u) * run1;
    }
  }
  return (w_f16(m, wb + 208u) * act_scale(da)) * f32(s);
}

fn q6_scale_i(m: u32, wb: u32, i: u32) -> i32 {
  return extractBits(i32(w_u8(m, wb + 192u + i)), 0u, 8u); // int8, sign-extended
}
