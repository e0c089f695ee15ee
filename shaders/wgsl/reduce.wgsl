// row_sum for the decode kernels, base variant (no optional feature): the WORKGROUP_SIZE / ROWS_PER_WORKGROUP
// consecutive invocations of one weight row add their partial sums (two at once: expert_up's gate and up) by a tree
// in workgroup memory. Call from uniform control flow; the row's sum is valid in its first invocation.

var<workgroup> partial: array<vec2<f32>, WORKGROUP_SIZE>;

fn row_sum(v: vec2<f32>, lid: u32) -> vec2<f32> {
  let threads_per_row = WORKGROUP_SIZE / ROWS_PER_WORKGROUP;
  let lane = lid % threads_per_row;
  partial[lid] = v;
  workgroupBarrier();
  for (var s = threads_per_row / 2u; s > 0u; s >>= 1u) {
    if (lane < s) {
      partial[lid] += partial[lid + s];
    }
    workgroupBarrier();
  }
  return partial[lid];
}
