// BF16 weights. Block: 1 element, 2 bytes, little-endian; the upper 16 bits of an f32.
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 1u;
const BLOCK_BYTES: u32 = 2u;

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  return bf16_bits_to_f32(w_u16(m, wb)) * load_act(a);
}
