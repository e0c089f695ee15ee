// Q5_1 weights. Block: 32 elements, 24 bytes.
//   [0..2)   f16 d
//   [2..4)   f16 m
//   [4..8)   qh: u32 little-endian, bit j is the 5th bit of element j
//   [8..24)  qs[16]: byte j holds element j in its low nibble and element j+16 in its high nibble
//   y = d · (nibble | 5th bit << 4) + m
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 32u;
const BLOCK_BYTES: u32 = 24u;

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let qh = w_u32(m, wb + 4u);
  var sum = 0.0;
  var xs = 0.0;
  for (var j = 0u; j < 16u; j += 4u) {
    let q = w_u32(m, wb + 8u + j);
    for (var k = 0u; k < 4u; k++) {
      let b = byte_of(q, k);
      let lo = load_act(a + j + k);
      let hi = load_act(a + 16u + j + k);
      let ql = (b & 15u) | (((qh >> (j + k)) & 1u) << 4u);
      let qhi = (b >> 4u) | (((qh >> (16u + j + k)) & 1u) << 4u);
      sum += f32(ql) * lo + f32(qhi) * hi;
      xs += lo + hi;
    }
  }
  return w_f16(m, wb) * sum + w_f16(m, wb + 2u) * xs;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let lo = (w_u32(m, wb + 8u + (i & 15u)) >> select(0u, 4u, i >= 16u)) & 0x0f0f0f0fu;
  return w_f16(m, wb) * u8x4(lo | q5_high_bytes(w_u32(m, wb + 4u), i)) + w_f16(m, wb + 2u);
}
