// MXFP4 weights × Q8_0 activations in ggml's lane order (llama numerics). Weight layout: quant/mxfp4.wgsl; interface:
// int8/q8_0.wgsl. ggml_vec_dot_mxfp4_q8_0 (AVX2) looks the nibbles up in kvalues_fp4 with _mm_shuffle_epi8: the low
// nibbles (elements 0..15) in bytes 0..15, the high ones (16..31) in bytes 16..31, so lane l < 4 holds the low
// nibbles of bytes 4l .. 4l + 3 and lane l >= 4 the high nibbles of bytes 4(l - 4) .., as Q4_0's. Unlike Q4_0's, its
// blocks go in pairs into two accumulators summed before the hsum, and an odd last block is added in scalar code
// (PAIRED: the kernels' second accumulator and tail).
const MIN_SUM = false;
const MIN_FIRST = false;
const PAIRED = true;

// Four nibbles (bits 0..3 of each byte of q) as four int8 kvalues_fp4, packed.
fn fp4_bytes(q: u32) -> u32 {
  var out = 0u;
  for (var k = 0u; k < 4u; k++) {
    out |= (u32(i32(fp4(q >> (8u * k)))) & 0xffu) << (8u * k);
  }
  return out;
}

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  let q = w_u32(m, wb + 1u + 4u * (l & 3u)) >> (4u * (l >> 2u));
  return dot_i8(fp4_bytes(q), act_q(qa + l));
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return act_scale(da) * e8m0_half(w_u8(m, wb));
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  return acc;
}
