// Q4_1 weights × Q8_1 activations in ggml's lane order (llama numerics; ggml_vec_dot_q4_1_q8_1, AVX2). Weight
// layout: quant/q4_1.wgsl; interface: int8/q8_0.wgsl. Q8_1 is Q8_0's quants and f16 d plus s = f16(d32 · Σ quants)
// per block, which round_activations.wgsl writes after the scales (q8_1_s). The lanes as in int8/q4_0.wgsl with the
// unsigned nibbles; the mins are one scalar, summs = fma(x.m, y.s, summs) (GCC contracts `summs += m * s`), kept in
// lane 0 of the mins' accumulator; the row's result is hsum_float_8(acc) + summs.
const MIN_SUM = true;
const MIN_FIRST = false;
const PAIRED = false;

// Block da's s (as f32): the word after every block's scale, where Q8_K keeps its bsums.
fn q8_1_s(da: u32) -> f32 {
  return bitcast<f32>(act_bsum(0u, da));
}

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  let q = (w_u32(m, wb + 4u + 4u * (l & 3u)) >> (4u * (l >> 2u))) & 0x0f0f0f0fu;
  return dot_i8(q, act_q(qa + l));
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
