// Q8_0 weights × Q8_0 activations in ggml's lane order (llama numerics). Weight layout: quant/q8_0.wgsl.
// Interface of the int8 snippets (every file in int8/ but dot_*.wgsl defines it, after its quant/ snippet), which
// spell out what ggml's x86 AVX2 vec_dot (ggml-cpu/arch/x86/quants.c) computes per weight block, lane by lane:
//   lane_dot(m, wb, qa, da, l) -> i32   lane l (0..7) of the block's 8 × 32-bit integer accumulator: which products
//                                        (and, for the K-quants, which scales and bsums) land in that lane
//   lane_scale(m, wb, da) -> f32        the block's float factor, as ggml rounds it (x.d · y.d)
//   min_step(m, wb, da, l, acc) -> f32  the mins' accumulator of lane l after this block (acc where the type has none)
//   const MIN_SUM: bool                 whether the row's result adds the mins' accumulators
//   const MIN_FIRST: bool               the mins go into the block accumulator itself, before the block's fma
//                                        (Q2_K's vec_dot: acc = fma(d, lane, min_step(acc))), not into their own
//   const PAIRED: bool                  blocks in pairs (MXFP4's vec_dot): odd blocks go to a second accumulator
//                                        (the mins' slot, so MIN_SUM is false), the two added lane by lane before
//                                        the hsum, and an odd last block is one integer sum added after it with one fma
// for the weight block of matrix `m` at byte `wb`, whose activations are 8-bit quants packed four to a word at
// act_q(qa) .. act_q(qa + BLOCK_SIZE / 4 - 1) with one scale act_scale(da) and, for Q8_K, the sums of 16 quants
// act_bsum(da, 0..15) (round_activations.wgsl's main_packed output; one activation block per weight block: 32
// elements for Q8_0, 256 for Q8_K). The kernel provides act_q, act_scale, act_bsum; the dot snippet dot_i8.
// The kernel then runs lane l's float chain over the row's blocks, acc = fma(lane_scale, f32(lane_dot), acc), and
// adds the lanes as hsum_float_8 does (lanes.wgsl). Integer sums are exact, so only the lanes' contents matter, not
// the order inside them.
// Here: lane l holds the products of bytes 4l .. 4l + 3 (mul_sum_i8_pairs_float).
const MIN_SUM = false;
const MIN_FIRST = false;
const PAIRED = false;

fn lane_dot(m: u32, wb: u32, qa: u32, da: u32, l: u32) -> i32 {
  return dot_i8(w_u32(m, wb + 2u + 4u * l), act_q(qa + l));
}

fn lane_scale(m: u32, wb: u32, da: u32) -> f32 {
  return w_f16(m, wb) * act_scale(da);
}

fn min_step(m: u32, wb: u32, da: u32, l: u32, acc: f32) -> f32 {
  return acc;
}
