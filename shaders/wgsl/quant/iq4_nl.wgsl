// IQ4_NL weights. Block: 32 elements, 18 bytes.
//   [0..2)   f16 d
//   [2..18)  qs[16]: byte j holds element j in its low nibble and element j+16 in its high nibble, each an index
//            into kvalues_iq4nl (16 non-linear levels from -127 to 113)
//   y = d · kvalues_iq4nl[q]
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 32u;
const BLOCK_BYTES: u32 = 18u;

// kvalues_iq4nl and iq4nl(): weights.wgsl.
fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = w_f16(m, wb);
  var sum = 0.0;
  for (var j = 0u; j < 16u; j += 4u) {
    let q = w_u32(m, wb + 2u + j);
    for (var k = 0u; k < 4u; k++) {
      let b = byte_of(q, k);
      sum += iq4nl(b) * load_act(a + j + k) + iq4nl(b >> 4u) * load_act(a + 16u + j + k);
    }
  }
  return d * sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let q = w_u32(m, wb + 2u + (i & 15u)) >> select(0u, 4u, i >= 16u);
  let v = vec4<f32>(iq4nl(q), iq4nl(q >> 8u), iq4nl(q >> 16u), iq4nl(q >> 24u));
  return w_f16(m, wb) * v;
}
