// Q3_K weights. Block (super-block): 256 elements, 110 bytes.
//   [0..32)    hmask[32]: bit 4j + k of hmask[t] is the high bit of element 128j + 32k + t
//   [32..96)   qs[64]: bits 2k..2k+1 of qs[32j + t] are the low 2 bits of element 128j + 32k + t
//   [96..108)  scales: sixteen 6-bit values biased by 32, one per 16 elements (see q3k_scale)
//   [108..110) f16 d
//   q = low - (high bit ? 0 : 4) (-4..3); y = d · (scale[e / 16] - 32) · q
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 256u;
const BLOCK_BYTES: u32 = 110u;

// Scale s (0..15) less its bias: low 4 bits from scales[s % 8] (the high nibble for s >= 8), high 2 bits from
// bits 2(s / 4).. of scales[8 + s % 4].
fn q3k_scale_i(m: u32, wb: u32, s: u32) -> i32 {
  let low = (w_u8(m, wb + 96u + (s & 7u)) >> (4u * (s >> 3u))) & 15u;
  let high = (w_u8(m, wb + 104u + (s & 3u)) >> (2u * (s >> 2u))) & 3u;
  return i32(low | (high << 4u)) - 32i;
}

// The quants (0..7, i.e. q + 4) of elements 128j + 32k + t .. + 3, t a multiple of 4, one per byte.
fn q3k_bytes(m: u32, wb: u32, j: u32, k: u32, t: u32) -> u32 {
  let lo = (w_u32(m, wb + 32u + 32u * j + t) >> (2u * k)) & 0x03030303u;
  let hi = (w_u32(m, wb + t) >> (4u * j + k)) & 0x01010101u;
  return lo | (hi << 2u);
}

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  var sum = 0.0;
  for (var j = 0u; j < 2u; j++) {
    for (var k = 0u; k < 4u; k++) {
      for (var half = 0u; half < 2u; half++) {
        var s = 0.0;
        for (var t = 16u * half; t < 16u * half + 16u; t += 4u) {
          let q = u8x4(q3k_bytes(m, wb, j, k, t)) - 4.0;
          let x = a + 128u * j + 32u * k + t;
          s += q.x * load_act(x) + q.y * load_act(x + 1u) + q.z * load_act(x + 2u) + q.w * load_act(x + 3u);
        }
        sum += f32(q3k_scale_i(m, wb, 8u * j + 2u * k + half)) * s;
      }
    }
  }
  return w_f16(m, wb + 108u) * sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let q = u8x4(q3k_bytes(m, wb, i / 128u, (i / 32u) % 4u, i % 32u)) - 4.0;
  return (w_f16(m, wb + 108u) * f32(q3k_scale_i(m, wb, i / 16u))) * q;
}
