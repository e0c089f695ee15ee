// Q4_0 weights × Q8_0 activations, integer dot product (llama numerics). Weight layout: quant/q4_0.wgsl; interface:
// int8/q8_0.wgsl. Word j of qs holds elements 4j..4j+3 in its low nibbles and 16+4j.. in its high nibbles; the
// weight quants q - 8 are formed per byte (bytes_minus) so one dot_i8 takes four of them.
fn block_dot_q8(m: u32, wb: u32, qa: u32, da: u32) -> f32 {
  var s = 0i;
  for (var j = 0u; j < 4u; j++) {
    let q = w_u32(m, wb + 2u + 4u * j);
    s += dot_i8(bytes_minus(q & 0x0f0f0f0fu, 0x08080808u), act_q(qa + j));
    s += dot_i8(bytes_minus((q >> 4u) & 0x0f0f0f0fu, 0x08080808u), act_q(qa + 4u + j));
  }
  return (w_f16(m, wb) * act_scale(da)) * f32(s);
}
