// Q3_K weights × Q8_K activations in ggml's lane order (llama numerics; ggml_vec_dot_q3_K_q8_K, AVX2). Weight
// layout: quant/q3_k.wgsl; interface: int8/q8_0.wgsl. For each half j and 32-element run k of it, lane l gets
// scale[8j + 2k + (l >= 4)] · Σ(quants of bytes 4l .. 4l + 3 of the run × their activations), the quants -4..3
// (ggml multiplies the low 2 bits and subtracts 4 × the activation where the high bit is clear: the same integers).
// The scales are 6-bit less 32; no mins.
const MIN_SUM = false;
const MIN_FIRST = false;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  var s = 0i;
  for (var j = 0u; j < 2u; j++) {
    for (var k = 0u; k < 4u; k++) {
      let q = bytes_minus(q3k_bytes(m, wb, j, k, 4u * l), 0x04040404u);
      s += q3k_scale_i(m, wb, 8u * j + 2u * k + (l >> 2u)) * dot_i8(q, act_q(qa + 32u * j + 8u * k + l));
    }
  }
  return s;
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return act_scale(da) * w_f16(m, wb + 108u);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  return acc;
}
