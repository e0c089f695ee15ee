// MXFP4 weights. Block: 32 elements, 17 bytes.
//   [0]      u8 e: E8M0 exponent; the scale is ggml_e8m0_to_fp32_half(e) = 2^(e-128) (subnormal for e < 2)
//   [1..17)  qs[16]: byte j holds element j in its low nibble and element j+16 in its high nibble, each an index
//            into kvalues_fp4 (E2M1 values doubled: 0 1 2 3 4 6 8 12, and their negatives from index 8)
//   y = kvalues_fp4[q] · 2^(e-128)   (exact in f32)
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 32u;
const BLOCK_BYTES: u32 = 17u;

// kvalues_fp4 (ggml-common.h) as constant data, indexed by nibble.
const KVALUES_FP4 = array<f32, 16>(0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);

fn e8m0_half(e: u32) -> f32 {
  return bitcast<f32>(select((e - 1u) << 23u, 0x00200000u << e, e < 2u));
}

fn fp4(q: u32) -> f32 {
  var kv = KVALUES_FP4;
  return kv[q & 15u];
}

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = e8m0_half(w_u8(m, wb));
  var sum = 0.0;
  for (var j = 0u; j < 16u; j += 4u) {
    let q = w_u32(m, wb + 1u + j);
    for (var k = 0u; k < 4u; k++) {
      let b = byte_of(q, k);
      sum += fp4(b) * load_act(a + j + k) + fp4(b >> 4u) * load_act(a + 16u + j + k);
    }
  }
  return d * sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let q = w_u32(m, wb + 1u + (i & 15u)) >> select(0u, 4u, i >= 16u);
  let v = vec4<f32>(fp4(q), fp4(q >> 8u), fp4(q >> 16u), fp4(q >> 24u));
  return e8m0_half(w_u8(m, wb)) * v;
}
