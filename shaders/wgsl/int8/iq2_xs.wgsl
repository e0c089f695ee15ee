// IQ2_XS weights × Q8_K activations in ggml's lane order (llama numerics; ggml_vec_dot_iq2_xs_q8_K, AVX2). Weight
// layout and grid: quant/iq2_xs.wgsl; interface: int8/q8_0.wgsl. Lane l holds elements 4l .. 4l + 3 of each 32-element
// sub-block ib (group l / 2, its half l & 1): the grid's magnitudes with the group's signs as int8, times 2s + 1 (s the
// 4-bit scale of the sub-block's half that holds the lane: the low nibble for lanes 0..3, get_scale_shuffle), summed
// over the 8 sub-blocks in the lane's int32; no mins. ggml's final 0.125 is carried by lane_scale, as for IQ2_XXS.
const MIN_SUM = false;
const MIN_FIRST = false;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  var s = 0i;
  let g = l >> 1u;
  let h = l & 1u;
  for (var ib = 0u; ib < 8u; ib++) {
    let q = w_u16(m, wb + 2u + 2u * (4u * ib + g));
    let mags = iq2xs_mags(q & 511u, h);
    let bits = (iq2xs_signs(q) >> (4u * h)) & 15u;
    // 0xff in each byte whose sign bit is set; per byte 256 − magnitude (magnitudes 8..43: no borrow between bytes)
    let mask = ((bits & 1u) | ((bits & 2u) << 7u) | ((bits & 4u) << 14u) | ((bits & 8u) << 21u)) * 0xffu;
    let neg = (~mags) + 0x01010101u;
    let w = (mags & ~mask) | (neg & mask);
    let sc = (w_u8(m, wb + 66u + ib) >> (4u * (l >> 2u))) & 15u;
    s += i32(2u * sc + 1u) * dot_i8(w, act_q(qa + 8u * ib + l));
  }
  return s;
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return (act_scale(da) * w_f16(m, wb)) * 0.125;
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  return acc;
}
