// Q2_K weights. Block (super-block): 256 elements, 84 bytes.
//   [0..16)   scales[16]: sub-block s (16 elements) has scale scales[s] & 15 and min scales[s] >> 4
//   [16..80)  qs[64]: bits 2k..2k+1 of qs[32j + t] are the quant (0..3) of element 128j + 32k + t
//   [80..82)  f16 d
//   [82..84)  f16 dmin
//   y = d · scale[e / 16] · q - dmin · min[e / 16]
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 256u;
const BLOCK_BYTES: u32 = 84u;

// The quants (0..3) of elements 128j + 32k + t .. + 3, t a multiple of 4, one per byte.
fn q2k_bytes(m: u32, wb: u32, j: u32, k: u32, t: u32) -> u32 {
  return (w_u32(m, wb + 16u + 32u * j + t) >> (2u * k)) & 0x03030303u;
}

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  var sum = 0.0;
  var msum = 0.0;
  for (var j = 0u; j < 2u; j++) {
    for (var k = 0u; k < 4u; k++) {
      for (var half = 0u; half < 2u; half++) {
        var s = 0.0;
        var xs = 0.0;
        for (var t = 16u * half; t < 16u * half + 16u; t += 4u) {
          let q = u8x4(q2k_bytes(m, wb, j, k, t));
          let x = a + 128u * j + 32u * k + t;
          let v = vec4<f32>(load_act(x), load_act(x + 1u), load_act(x + 2u), load_act(x + 3u));
          s += dot(q, v);
          xs += v.x + v.y + v.z + v.w;
        }
        let sc = w_u8(m, wb + 8u * j + 2u * k + half);
        sum += f32(sc & 15u) * s;
        msum += f32(sc >> 4u) * xs;
      }
    }
  }
  return w_f16(m, wb + 80u) * sum - w_f16(m, wb + 82u) * msum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let q = u8x4(q2k_bytes(m, wb, i / 128u, (i / 32u) % 4u, i % 32u));
  let sc = w_u8(m, wb + i / 16u);
  return (w_f16(m, wb + 80u) * f32(sc & 15u)) * q - w_f16(m, wb + 82u) * f32(sc >> 4u);
}
