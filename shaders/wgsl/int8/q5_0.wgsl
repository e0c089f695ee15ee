// Q5_0 weights × Q8_0 activations in ggml's lane order (llama numerics; ggml_vec_dot_q5_0_q8_0, AVX2). Weight
// layout: quant/q5_0.wgsl; interface: int8/q8_0.wgsl. The lanes as in int8/q4_0.wgsl (bytes_from_nibbles_32: lane
// l < 4 the low nibbles of bytes 4l .. 4l + 3, lane l >= 4 the high nibbles of bytes 4(l - 4) ..), each quant with
// its 5th bit from qh (bytes_from_bits_32: bit i of qh for element i) and minus 16.
const MIN_SUM = false;
const MIN_FIRST = false;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  let lo = (w_u32(m, wb + 6u + 4u * (l & 3u)) >> (4u * (l >> 2u))) & 0x0f0f0f0fu;
  let q = lo | q5_high_bytes(w_u32(m, wb + 2u), 4u * l);
  return dot_i8(bytes_minus(q, 0x10101010u), act_q(qa + l));
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return w_f16(m, wb) * act_scale(da);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  return acc;
}
