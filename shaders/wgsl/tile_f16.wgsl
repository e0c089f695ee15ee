// Staged tiles of the batched kernels, 'shader-f16' variant (the module starts with `enable f16;`): activations and
// decoded weights are staged as f16, which halves the workgroup memory the tiles take and the traffic to it; the dot
// products widen them back to f32, so only the staging rounds.
//
// Precision: rounding both operands to f16 (11-bit significands) gives a relative error of about 2^-11 per product,
// NMSE ~1e-7 against exact math, well inside the 5e-4 contract of the kernels. Values beyond f16's range are clamped
// to ±65504 when staged instead of becoming infinities, and products and sums stay f32, so nothing overflows.

alias tile_vec = vec4<f16>;

const F16_MAX: f32 = 65504.0;

fn to_tile(v: vec4<f32>) -> tile_vec {
  return tile_vec(clamp(v, vec4<f32>(-F16_MAX), vec4<f32>(F16_MAX)));
}

fn tile_dot(a: tile_vec, b: tile_vec) -> f32 {
  return dot(vec4<f32>(a), vec4<f32>(b));
}
