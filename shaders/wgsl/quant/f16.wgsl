// F16 weights. Block: 1 element, 2 bytes, little-endian IEEE binary16 (decoded by hand, see common.wgsl).
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 1u;
const BLOCK_BYTES: u32 = 2u;

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  return w_f16(m, wb) * load_act(a);
}
