// F32 weights. Block: 1 element, 4 bytes, little-endian IEEE binary32.
// Quant snippet interface (every file in quant/ defines the same three names):
//   BLOCK_SIZE   elements per block
//   BLOCK_BYTES  bytes per block
//   block_dot(m, wb, a): Σ over the block of weight · load_act(a + i), for the block of matrix `m` starting at byte
//   `wb`; the kernel provides `load_act` (and `weight_word`, see weights.wgsl).
const BLOCK_SIZE: u32 = 1u;
const BLOCK_BYTES: u32 = 4u;

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  return bitcast<f32>(w_u32(m, wb)) * load_act(a);
}
