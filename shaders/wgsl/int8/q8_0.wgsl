// Q8_0 weights × Q8_0 activations, integer dot product (llama numerics). Weight layout: quant/q8_0.wgsl.
// Interface of the int8 snippets (every file in int8/ but dot_*.wgsl defines it, after its quant/ snippet):
//   block_dot_q8(m, wb, qa, da): Σ over the weight block of matrix `m` at byte `wb` of weight · activation, where
//   the block's activations are 8-bit quants packed four to a word, act_q(qa) .. act_q(qa + BLOCK_SIZE / 4 - 1),
//   times one scale act_scale(da) (round_activations.wgsl's main_packed output; one activation scale block per
//   weight block: 32 elements for Q8_0, 256 for Q8_K). The kernel provides act_q and act_scale, the dot snippet
//   dot_i8. Integer sums are exact; only the per-block scales are multiplied in f32, as ggml's vec_dot does.
fn block_dot_q8(m: u32, wb: u32, qa: u32, da: u32) -> f32 {
  var s = 0i;
  for (var i = 0u; i < 8u; i++) {
    s += dot_i8(w_u32(m, wb + 2u + 4u * i), act_q(qa + i));
  }
  return (w_f16(m, wb) * act_scale(da)) * f32(s);
}
