// Q4_0 weights. Block: 32 elements, 18 bytes.
//   [0..2)   f16 d
//   [2..18)  qs[16]: byte j holds element j in its low nibble and element j+16 in its high nibble
//   y = d · (q - 8)
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 32u;
const BLOCK_BYTES: u32 = 18u;

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = w_f16(m, wb);
  var sum = 0.0;
  for (var j = 0u; j < 16u; j += 4u) {
    let q = w_u32(m, wb + 2u + j);
    for (var k = 0u; k < 4u; k++) {
      let b = byte_of(q, k);
      sum += (f32(b & 15u) - 8.0) * load_act(a + j + k) + (f32(b >> 4u) - 8.0) * load_act(a + 16u + j + k);
    }
  }
  return d * sum;
}
