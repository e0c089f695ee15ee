// Shared by every expert kernel: the shape uniform and pure helpers (no storage access, so every module can include it).

// Shapes of one expert-FFN call. The TS writer (writeShapeUniform in shaders/call-plan.ts) writes these fields in this
// exact order, one u32 each; keep the two in step.
struct Shape {
  n_embd: u32,            // model width: row length of gate/up, row count of down
  ff: u32,                // expert hidden width: row count of gate/up, row length of down
  n_tokens: u32,
  n_used: u32,            // (token, expert) pairs per token
  n_expert: u32,          // experts in the slice
  n_row_tiles: u32,       // batched regime: tiles of this dispatch, tiles[tile_begin ..] (0 in the decode regime)
  // The weight bindings hold experts [expert_begin, expert_end) of the slice: a slice too large for one binding is
  // split by expert ranges into parts, and each part's dispatches skip the other parts' pairs (decode) or get only
  // their own tiles (batched, whose tiles are sorted by expert).
  expert_begin: u32,
  expert_end: u32,
  tile_begin: u32,
}

// IEEE binary16 bits (low 16 bits of `bits`) to f32, decoded by hand so no shader-f16 feature is needed.
// Exact for every input: subnormals become normal f32 values, inf and NaN keep their class.
fn f16_bits_to_f32(bits: u32) -> f32 {
  let sign = (bits & 0x8000u) << 16u;
  let e = (bits >> 10u) & 0x1fu;
  let m = bits & 0x3ffu;
  if (e == 0u) {
    // 0 or subnormal: m · 2^-24, exact in f32
    let v = f32(m) * 5.9604644775390625e-8;
    return select(v, -v, sign != 0u);
  }
  if (e == 31u) {
    return bitcast<f32>(sign | 0x7f800000u | (m << 13u));
  }
  return bitcast<f32>(sign | ((e + 112u) << 23u) | (m << 13u));
}

// bfloat16 bits (low 16 bits) to f32: they are the upper half of the f32.
fn bf16_bits_to_f32(bits: u32) -> f32 {
  return bitcast<f32>(bits << 16u);
}

fn silu(v: f32) -> f32 {
  return v / (1.0 + exp(-v));
}

// Workgroup index of a dispatch that TS may have folded into 2-D (more than maxComputeWorkgroupsPerDimension groups).
fn linear_workgroup(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return wid.x + wid.y * nwg.x;
}
