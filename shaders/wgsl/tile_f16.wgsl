// Staged tiles of the batched kernels, 'shader-f16' variant (the module starts with `enable f16;`): activations and
// decoded weights are staged as f16 (half the workgroup memory and, on most GPUs, twice the multiply rate) and each
// four-element dot product runs in f16 before it is added to the f32 accumulators.
//
// Precision: rounding both operands to f16 (11-bit significands) gives a relative error of about 2^-11 per product,
// so NMSE ~1e-7 against exact math, well inside the 5e-4 contract of the kernels; values beyond f16's range are
// clamped to ±65504 when staged instead of becoming infinities.

alias tile_vec = vec4<f16>;

const F16_MAX: f32 = 65504.0;

fn to_tile(v: vec4<f32>) -> tile_vec {
  return tile_vec(clamp(v, vec4<f32>(-F16_MAX), vec4<f32>(F16_MAX)));
}

fn tile_dot(a: tile_vec, b: tile_vec) -> f32 {
  return f32(dot(a, b));
}
