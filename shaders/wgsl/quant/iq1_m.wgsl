// IQ1_M weights. Block (super-block): 256 elements, 56 bytes, no d field of its own.
//   [0..32)    qs[32]: the low 8 bits of each group of 8's iq1s_grid index (group l of sub-block ib at 4ib + l)
//   [32..48)   qh[16], two per 32-element sub-block, one per pair of groups (byte 32 + 2ib + l / 2): bits 0..2 and
//              4..6 the high 3 bits of its two groups' indices, bits 3 and 7 their shifts' signs
//   [48..56)   scales as four u16 sc[k]: bits 6(ib & 1) .. 6(ib & 1) + 5 of sc[ib / 2] sub-block ib's two 3-bit scales
//              (first 16 elements, last 16); the top 4 bits of the four together the f16 d (sc[0] >> 12 lowest)
//   y = (d · (2s + 1)) · (value ± 0.125), the value (−1, 0 or 1) from the grid point (ggml's dequantize_row_iq1_m)
// The grid and its readers (IQ1S_GRID, iq1s_digits, iq1s_values) are in iq1s_grid.wgsl, put before this file.
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 256u;
const BLOCK_BYTES: u32 = 56u;

// The block's d: the top nibbles of its four scale words.
fn iq1m_d(m: u32, wb: u32) -> f32 {
  let bits = (w_u16(m, wb + 48u) >> 12u) | ((w_u16(m, wb + 50u) >> 8u) & 0x00f0u) | ((w_u16(m, wb + 52u) >> 4u) & 0x0f00u) |
    (w_u16(m, wb + 54u) & 0xf000u);
  return f16_bits_to_f32(bits);
}

// Sub-block ib's 3-bit scale of half h (0: elements 0..15, 1: 16..31).
fn iq1m_scale(m: u32, wb: u32, ib: u32, h: u32) -> u32 {
  return (w_u16(m, wb + 48u + 2u * (ib >> 1u)) >> (6u * (ib & 1u) + 3u * h)) & 7u;
}

// Group l's nibble of qh in sub-block ib: bits 0..2 its index's high bits, bit 3 its shift's sign.
fn iq1m_qh(m: u32, wb: u32, ib: u32, l: u32) -> u32 {
  return (w_u8(m, wb + 32u + 2u * ib + (l >> 1u)) >> (4u * (l & 1u))) & 15u;
}

// Group l's grid point in sub-block ib.
fn iq1m_point(m: u32, wb: u32, ib: u32, l: u32) -> u32 {
  return w_u8(m, wb + 4u * ib + l) | ((iq1m_qh(m, wb, ib, l) & 7u) << 8u);
}

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = iq1m_d(m, wb);
  var sum = 0.0;
  for (var ib = 0u; ib < 8u; ib++) {
    for (var h = 0u; h < 2u; h++) {
      var s = 0.0;
      for (var g = 2u * h; g < 2u * h + 2u; g++) {
        let p = iq1m_point(m, wb, ib, g);
        let delta = select(0.125, -0.125, (iq1m_qh(m, wb, ib, g) & 8u) != 0u);
        for (var k4 = 0u; k4 < 2u; k4++) {
          let v = iq1s_values(p, k4) + delta;
          for (var k = 0u; k < 4u; k++) {
            s += v[k] * load_act(a + 32u * ib + 8u * g + 4u * k4 + k);
          }
        }
      }
      sum += (d * f32(2u * iq1m_scale(m, wb, ib, h) + 1u)) * s;
    }
  }
  return sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let ib = i / 32u;
  let g = (i % 32u) / 8u;
  let dl = iq1m_d(m, wb) * f32(2u * iq1m_scale(m, wb, ib, g >> 1u) + 1u);
  let delta = select(0.125, -0.125, (iq1m_qh(m, wb, ib, g) & 8u) != 0u);
  return dl * (iq1s_values(iq1m_point(m, wb, ib, g), (i % 8u) / 4u) + delta);
}
