// F32 weights. Block: 1 element, 4 bytes, little-endian IEEE binary32.
// Quant snippet interface (every file in quant/ defines the same four names):
//   BLOCK_SIZE   elements per block
//   BLOCK_BYTES  bytes per block
//   block_dot(m, wb, a): Σ over the block of weight · load_act(a + i), for the block of matrix `m` starting at byte
//   `wb`; the kernel provides `load_act` (and `weight_word`, see weights.wgsl). Used by the decode kernels.
//   weight_quad(m, rb, e): the values of elements e..e+3 of the row of matrix `m` starting at byte `rb`, e a
//   multiple of 4 (four elements never straddle a block of 32 or 256; with 1-element blocks they are 4 blocks).
//   Used by the batched kernels, which stage decoded weights in workgroup memory; needs only `weight_word`.
const BLOCK_SIZE: u32 = 1u;
const BLOCK_BYTES: u32 = 4u;

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  return bitcast<f32>(w_u32(m, wb)) * load_act(a);
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let b = rb + 4u * e;
  return vec4<f32>(bitcast<f32>(w_u32(m, b)), bitcast<f32>(w_u32(m, b + 4u)), bitcast<f32>(w_u32(m, b + 8u)),
    bitcast<f32>(w_u32(m, b + 12u)));
}
