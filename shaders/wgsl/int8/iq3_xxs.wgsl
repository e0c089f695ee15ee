// IQ3_XXS weights × Q8_K activations in ggml's lane order (llama numerics; ggml_vec_dot_iq3_xxs_q8_K, AVX2). Weight
// layout and grid: quant/iq3_xxs.wgsl; interface: int8/q8_0.wgsl. Lane l holds elements 4l .. 4l + 3 of each 32-element
// sub-block ib (grid point qs[8ib + l], the signs of group l / 2): the magnitudes with their signs as int8, times
// 2s + 1, summed over the 8 sub-blocks in the lane's int32; no mins. ggml multiplies the hsum by 0.25 at the end:
// lane_scale carries it instead (f16 d · y.d · 0.25, a power of two: every fma and add on the way rounds to ggml's value
// over 4 while nothing is subnormal).
const MIN_SUM = false;
const MIN_FIRST = false;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  var s = 0i;
  for (var ib = 0u; ib < 8u; ib++) {
    let aux = w_u32(m, wb + 66u + 4u * ib);
    let mags = iq3xxs_mags(w_u8(m, wb + 2u + 8u * ib + l));
    let bits = (iq3xxs_signs(aux, l >> 1u) >> (4u * (l & 1u))) & 15u;
    // 0xff in each byte whose sign bit is set; per byte 256 − magnitude (magnitudes 4..62: no borrow between bytes)
    let mask = ((bits & 1u) | ((bits & 2u) << 7u) | ((bits & 4u) << 14u) | ((bits & 8u) << 21u)) * 0xffu;
    let neg = (~mags) + 0x01010101u;
    let w = (mags & ~mask) | (neg & mask);
    s += i32(2u * (aux >> 28u) + 1u) * dot_i8(w, act_q(qa + 8u * ib + l));
  }
  return s;
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return (act_scale(da) * w_f16(m, wb)) * 0.25;
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  return acc;
}
