// Staged tiles of the batched kernels, base variant: activations and decoded weights kept as f32 in workgroup memory,
// dot products in f32 (exact decoding; only f32 summation error).

alias tile_vec = vec4<f32>;

fn to_tile(v: vec4<f32>) -> tile_vec {
  return v;
}

fn tile_dot(a: tile_vec, b: tile_vec) -> f32 {
  return dot(a, b);
}
