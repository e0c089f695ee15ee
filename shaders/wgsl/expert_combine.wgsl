// Weighted sum of each token's expert outputs:
//   out[t, c] = Σ_k probs[t, k] · y[t · n_used + k, c]
// Assembled as common.wgsl + this file. One thread per output element, k summed in order.

override WORKGROUP_SIZE: u32 = 64u;

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> y: array<f32>;     // [n_tokens · n_used × n_embd]
@group(0) @binding(2) var<storage, read> probs: array<f32>; // [n_tokens × n_used]
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // [n_tokens × n_embd]

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let i = linear_workgroup(wid, nwg) * WORKGROUP_SIZE + lid;
  if (i >= shape.n_tokens * shape.n_embd) {
    return;
  }
  let t = i / shape.n_embd;
  let c = i % shape.n_embd;
  // Each product rounded on its own, then added in k order, as ggml_mul and the adds of the experts' views do (llama
  // numerics agrees with the coordinator bit for bit): OR-ing a zero the compiler cannot know into the product keeps
  // it from contracting the product and the sum into one fused multiply-add.
  let zero = select(1u, 0u, shape.n_embd != 0u);
  var acc = 0.0;
  for (var k = 0u; k < shape.n_used; k++) {
    let p = t * shape.n_used + k;
    acc += bitcast<f32>(bitcast<u32>(probs[p] * y[p * shape.n_embd + c]) | zero);
  }
  out[i] = acc;
}
