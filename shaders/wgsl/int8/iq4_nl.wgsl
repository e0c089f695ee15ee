// IQ4_NL weights × Q8_0 activations in ggml's lane order (llama numerics). Weight layout: quant/iq4_nl.wgsl;
// interface: int8/q8_0.wgsl. ggml_vec_dot_iq4_nl_q8_0 (AVX2) is ggml_vec_dot_mxfp4_q8_0 with kvalues_iq4nl and an f16
// scale: the same lanes (int8/mxfp4.wgsl), blocks in pairs, an odd last block in scalar code (PAIRED).
const MIN_SUM = false;
const MIN_FIRST = false;
const PAIRED = true;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  let q = w_u32(m, wb + 2u + 4u * (l & 3u)) >> (4u * (l >> 2u));
  return dot_i8(iq4nl_bytes(q), act_q(qa + l));
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return act_scale(da) * w_f16(m, wb);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  return acc;
}
