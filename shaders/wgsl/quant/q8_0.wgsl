// Q8_0 weights. Block: 32 elements, 34 bytes.
//   [0..2)   f16 d
//   [2..34)  qs[32] int8, element i = qs[i]
//   y = d · q
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 32u;
const BLOCK_BYTES: u32 = 34u;

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = w_f16(m, wb);
  var sum = 0.0;
  for (var i = 0u; i < 32u; i += 4u) {
    let q = i32(w_u32(m, wb + 2u + i));
    for (var k = 0u; k < 4u; k++) {
      sum += f32(extractBits(q, k * 8u, 8u)) * load_act(a + i + k); // i32 extractBits sign-extends
    }
  }
  return d * sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  return w_f16(m, wb) * i8x4(w_u32(m, wb + 2u + e % BLOCK_SIZE));
}
