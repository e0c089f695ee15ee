// lane_sum for the int8 kernels, base variant (no optional feature): the LANES = 8 consecutive invocations of one
// weight row hold ggml's 8 float lanes (one __m256 accumulator each, per value of v) and add them in the CPU's
// order by a tree in workgroup memory: x_l + x_(l+4), then those + the ones two lanes on, then the last pair, i.e.
// hsum_float_8's ((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7)). A value that only lanes 0..3 hold (lanes 4..7
// hold 0) comes out as (m0 + m2) + (m1 + m3), the 4-lane sum of ggml's __m128 mins accumulator. Call from uniform
// control flow; the row's sums are valid in its first invocation.

var<workgroup> lane_partial: array<vec4<f32>, WORKGROUP_SIZE>;

fn lane_sum(v: vec4<f32>, lid: u32) -> vec4<f32> {
  let l = lid % LANES;
  lane_partial[lid] = v;
  workgroupBarrier();
  for (var s = LANES / 2u; s > 0u; s >>= 1u) {
    if (l < s) {
      lane_partial[lid] = lane_partial[lid] + lane_partial[lid + s];
    }
    workgroupBarrier();
  }
  return lane_partial[lid];
}
