// IQ1_S weights. Block (super-block): 256 elements, 50 bytes.
//   [0..2)     f16 d
//   [2..34)    qs[32]: the low 8 bits of each group of 8's iq1s_grid index (group l of sub-block ib at 2 + 4ib + l)
//   [34..50)   qh[8] u16, one per 32-element sub-block: bits 3l .. 3l + 2 the high 3 bits of group l's index, bits
//              12..14 the scale s, bit 15 the sign of the shift
//   y = (d · (2s + 1)) · (value ± 0.125), the value (−1, 0 or 1) from the grid point (ggml's dequantize_row_iq1_s)
// The grid and its readers (IQ1S_GRID, iq1s_digits, iq1s_values) are in iq1s_grid.wgsl, put before this file.
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 256u;
const BLOCK_BYTES: u32 = 50u;

// Group l's grid point in sub-block ib, whose qh is `qh`.
fn iq1s_point(m: u32, wb: u32, ib: u32, l: u32, qh: u32) -> u32 {
  return w_u8(m, wb + 2u + 4u * ib + l) | (((qh >> (3u * l)) & 7u) << 8u);
}

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = w_f16(m, wb);
  var sum = 0.0;
  for (var ib = 0u; ib < 8u; ib++) {
    let qh = w_u16(m, wb + 34u + 2u * ib);
    let delta = select(0.125, -0.125, (qh & 0x8000u) != 0u);
    var s = 0.0;
    for (var l = 0u; l < 4u; l++) {
      let p = iq1s_point(m, wb, ib, l, qh);
      for (var h = 0u; h < 2u; h++) {
        let v = iq1s_values(p, h) + delta;
        for (var k = 0u; k < 4u; k++) {
          s += v[k] * load_act(a + 32u * ib + 8u * l + 4u * h + k);
        }
      }
    }
    sum += (d * f32(2u * ((qh >> 12u) & 7u) + 1u)) * s;
  }
  return sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let ib = i / 32u;
  let qh = w_u16(m, wb + 34u + 2u * ib);
  let p = iq1s_point(m, wb, ib, (i % 32u) / 8u, qh);
  let dl = w_f16(m, wb) * f32(2u * ((qh >> 12u) & 7u) + 1u);
  return dl * (iq1s_values(p, (i % 8u) / 4u) + select(0.125, -0.125, (qh & 0x8000u) != 0u));
}
