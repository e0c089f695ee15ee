// F16 weights. Block: 1 element, 2 bytes, little-endian IEEE binary16 (decoded by hand, see common.wgsl).
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 1u;
const BLOCK_BYTES: u32 = 2u;

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  return w_f16(m, wb) * load_act(a);
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let lo = w_u32(m, rb + 2u * e);
  let hi = w_u32(m, rb + 2u * e + 4u);
  return vec4<f32>(f16_bits_to_f32(lo & 0xffffu), f16_bits_to_f32(lo >> 16u), f16_bits_to_f32(hi & 0xffffu),
    f16_bits_to_f32(hi >> 16u));
}
