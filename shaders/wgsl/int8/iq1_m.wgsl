// IQ1_M weights × Q8_K activations in ggml's lane order (llama numerics; ggml_vec_dot_iq1_m_q8_K, AVX2). Weight
// layout and grid: quant/iq1_m.wgsl; interface: int8/q8_0.wgsl. Two 8-lane int32 sums per super-block, lane l holding
// elements 4l .. 4l + 3 of each 32-element sub-block ib (group l / 2, its half l & 1), times 2s + 1 with s the
// sub-block's 3-bit scale of lane l's 16 elements (lanes 0..3 the first scale, 4..7 the second: ggml's shuffle of
// `scales`), summed over the 8 sub-blocks:
//   sumi1 (lane_dot): the grid values as int8 (mul_add_epi8) · q
//   sumi2 (min_step): ±Σ q, the sign that of group l / 2's shift (maddubs of 1 with sign_epi8(q, delta))
// Each has its own per-lane chain, accum = fma(y.d · d, f32(sumi), accum); the row's result is
// hsum_float_8(accum1) + 0.125 · hsum_float_8(accum2). Here accum2 is the mins' accumulator, scaled by 0.125 in
// min_step's factor (a power of two: each fma rounds to ggml's value over 8 while nothing is subnormal), and the kernel
// adds the two lane sums.
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
    let p = iq1m_point(m, wb, ib, l >> 1u);
    let ls = i32(2u * iq1m_scale(m, wb, ib, l >> 2u) + 1u);
    s += ls * dot_i8(iq1s_bytes(p, l & 1u), act_q(qa + 8u * ib + l));
  }
  return s;
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return act_scale(da) * iq1m_d(m, wb);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  // The block's quants, as the kernels pass lane_dot's qa (one Q8_K block per weight block).
  let qa = da * (BLOCK_SIZE / 4u);
  var s = 0i;
  for (var ib = 0u; ib < 8u; ib++) {
    let ls = i32(2u * iq1m_scale(m, wb, ib, l >> 2u) + 1u);
    let signs = select(I8_ONES, 0xffffffffu, (iq1m_qh(m, wb, ib, l >> 1u) & 8u) != 0u);
    s += ls * dot_i8(signs, act_q(qa + 8u * ib + l));
  }
  return fma_rn(lane_scale(m, wb, da) * 0.125, f32(s), acc);
}
