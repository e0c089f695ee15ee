// Q4_0 weights × Q8_0 activations in ggml's lane order (llama numerics). Weight layout: quant/q4_0.wgsl; interface:
// int8/q8_0.wgsl. bytes_from_nibbles_32 puts elements 0..15 (low nibbles) in bytes 0..15 and 16..31 (high nibbles)
// in bytes 16..31, so lane l < 4 holds low nibbles 4l .. 4l + 3 and lane l >= 4 the high nibbles of bytes
// 4(l - 4) ..; the quants q - 8 are formed per byte (bytes_minus) so one dot_i8 takes four of them.
const MIN_SUM = false;
const MIN_FIRST = false;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  let q = (w_u32(m, wb + 2u + 4u * (l & 3u)) >> (4u * (l >> 2u))) & 0x0f0f0f0fu;
  return dot_i8(bytes_minus(q, 0x08080808u), act_q(qa + l));
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return w_f16(m, wb) * act_scale(da);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  return acc;
}
