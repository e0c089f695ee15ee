// Q2_K weights × Q8_K activations in ggml's lane order (llama numerics; ggml_vec_dot_q2_K_q8_K, AVX2). Weight
// layout: quant/q2_k.wgsl; interface: int8/q8_0.wgsl. For each half j and 32-element run k of it, lane l gets
// scale[8j + 2k + (l >= 4)] · Σ(quants 0..3 of bytes 4l .. 4l + 3 of the run × their activations). The mins share
// the one accumulator and come first in each block (MIN_FIRST): lane l = min[2l] · bsum[2l] + min[2l + 1] ·
// bsum[2l + 1], acc = fma(-y.d · x.dmin, f32(lane), acc), then the block's acc = fma(y.d · x.d, f32(lane_dot), acc).
const MIN_SUM = false;
const MIN_FIRST = true;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  var s = 0i;
  for (var j = 0u; j < 2u; j++) {
    for (var k = 0u; k < 4u; k++) {
      let p = dot_i8(q2k_bytes(m, wb, j, k, 4u * l), act_q(qa + 32u * j + 8u * k + l));
      s += i32(w_u8(m, wb + 8u * j + 2u * k + (l >> 2u)) & 15u) * p;
    }
  }
  return s;
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return act_scale(da) * w_f16(m, wb + 80u);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  let p = i32(w_u8(m, wb + 2u * l) >> 4u) * act_bsum(da, 2u * l) + i32(w_u8(m, wb + 2u * l + 1u) >> 4u) * act_bsum(da, 2u * l + 1u);
  return fma_rn(-act_scale(da) * w_f16(m, wb + 82u), f32(p), acc);
}
