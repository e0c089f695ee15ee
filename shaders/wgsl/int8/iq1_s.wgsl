// IQ1_S weights × Q8_K activations in ggml's lane order (llama numerics; ggml_vec_dot_iq1_s_q8_K, AVX2). Weight
// layout and grid: quant/iq1_s.wgsl; interface: int8/q8_0.wgsl. Lane l holds elements 4l .. 4l + 3 of each 32-element
// sub-block ib (group l / 2, its half l & 1): the grid values as int8 (mul_add_epi8), times 2s + 1, summed over the 8
// sub-blocks in the lane's int32. The shifts are ggml's one scalar int per super-block, Σ_ib ±(2s + 1) · (the
// sub-block's two bsums), and its float accum1 = fma(d, that, accum1); the row's result hsum8(acc) + 0.125 · accum1.
// Here accum1 is lane 0 of the mins' accumulator (the other lanes hold 0, so lane_sum gives it unchanged), scaled by
// 0.125 in min_step (a power of two: each fma rounds to ggml's value over 8 while nothing is subnormal).
const MIN_SUM = true;
const MIN_FIRST = false;
const PAIRED = false;

// The 4 grid values of elements 4h .. 4h + 3 of point p as int8 bytes (digit − 1: 0xff, 0 or 1).
fn iq1s_bytes(p: u32, h: u32) -> u32 {
  let x = iq1s_digits(p, h);
  var out = 0u;
  for (var k = 0u; k < 4u; k++) {
    out |= ((((x >> (2u * k)) & 3u) + 255u) & 255u) << (8u * k);
  }
  return out;
}

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  var s = 0i;
  for (var ib = 0u; ib < 8u; ib++) {
    let qh = w_u16(m, wb + 34u + 2u * ib);
    let p = iq1s_point(m, wb, ib, l >> 1u, qh);
    s += i32(2u * ((qh >> 12u) & 7u) + 1u) * dot_i8(iq1s_bytes(p, l & 1u), act_q(qa + 8u * ib + l));
  }
  return s;
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return act_scale(da) * w_f16(m, wb);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  if (l != 0u) {
    return acc;
  }
  var s = 0i;
  for (var ib = 0u; ib < 8u; ib++) {
    let qh = w_u16(m, wb + 34u + 2u * ib);
    let ls = i32(2u * ((qh >> 12u) & 7u) + 1u);
    let b = act_bsum(da, 2u * ib) + act_bsum(da, 2u * ib + 1u);
    s += select(1i, -1i, (qh & 0x8000u) != 0u) * ls * b;
  }
  return fma_rn(lane_scale(m, wb, da) * 0.125, f32(s), acc);
}
