// IQ4_XS weights × Q8_K activations in ggml's lane order (llama numerics; ggml_vec_dot_iq4_xs_q8_K, AVX2). Weight
// layout: quant/iq4_xs.wgsl; interface: int8/q8_0.wgsl. Each 32-element sub-block ib is an IQ4_NL block's lanes (lane l
// holds elements 4l .. 4l + 3: the low nibbles of bytes 4l.. for l < 4, the high nibbles of bytes 4(l − 4).. for
// l >= 4) times the sub-block's 6-bit scale less 32, summed over the 8 sub-blocks in the lane's int32; one fma per
// super-block with f16 d · y.d; no mins.
const MIN_SUM = false;
const MIN_FIRST = false;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  var s = 0i;
  for (var ib = 0u; ib < 8u; ib++) {
    let q = w_u32(m, wb + 8u + 16u * ib + 4u * (l & 3u)) >> (4u * (l >> 2u));
    s += iq4xs_scale_i(m, wb, ib) * dot_i8(iq4nl_bytes(q), act_q(qa + 8u * ib + l));
  }
  return s;
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return act_scale(da) * w_f16(m, wb);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  return acc;
}
