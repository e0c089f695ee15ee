// Q5_1 weights × Q8_1 activations in ggml's lane order (llama numerics; ggml_vec_dot_q5_1_q8_1, AVX2). Weight
// layout: quant/q5_1.wgsl; interface: int8/q8_0.wgsl. As int8/q4_1.wgsl with each quant's 5th bit from qh
// (bytes_from_bits_32: bit i of qh for element i); acc = fma(q, x.d · y.d, acc), summs = fma(x.m, y.s, summs).
const MIN_SUM = true;
const MIN_FIRST = false;
const PAIRED = false;

// Block da's s (as f32): the word after every block's scale, where Q8_K keeps its bsums.
fn q8_1_s(da: u32) -> f32 {
  return bitcast<f32>(act_bsum(0u, da));
}

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  let lo = (w_u32(m, wb + 8u + 4u * (l & 3u)) >> (4u * (l >> 2u))) & 0x0f0f0f0fu;
  return dot_i8(lo | q5_high_bytes(w_u32(m, wb + 4u), 4u * l), act_q(qa + l));
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return w_f16(m, wb) * act_scale(da);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  if (l != 0u) {
    return acc;
  }
  return fma_rn(w_f16(m, wb + 2u), q8_1_s(da), acc);
}
