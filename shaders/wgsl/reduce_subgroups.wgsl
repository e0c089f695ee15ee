// row_sum for the decode kernels, 'subgroups' variant (the module starts with `enable subgroups;`): the invocations
// of one row add their partial sums by butterfly shuffles inside their subgroup, and only rows wider than a subgroup
// combine the subgroups' sums through workgroup memory (one barrier instead of log2(threads per row)).
//
// Relies on subgroup invocation i being local invocation (lid % subgroup size) with one subgroup size per dispatch,
// so a row's consecutive invocations share a subgroup or span whole ones. WGSL does not promise that layout, so the
// runtime runs subgroup_probe.wgsl on the device first and uses this variant only where the probe confirms it.
// Call from uniform control flow; the row's sum is valid in its first invocation.

var<workgroup> partial: array<vec2<f32>, WORKGROUP_SIZE>;
var<workgroup> subgroup_width: u32;

fn row_sum(v: vec2<f32>, lid: u32) -> vec2<f32> {
  let threads_per_row = WORKGROUP_SIZE / ROWS_PER_WORKGROUP;
  // The subgroup size, made workgroup-uniform (every invocation is active here, so the count is the size).
  let size = subgroupAdd(1u);
  if (lid == 0u) {
    subgroup_width = size;
  }
  let sg = workgroupUniformLoad(&subgroup_width);
  var s = v;
  for (var o = 1u; o < min(threads_per_row, sg); o <<= 1u) {
    s += subgroupShuffleXor(s, o);
  }
  if (threads_per_row <= sg) {
    return s;
  }
  // A row spans threads_per_row / sg subgroups: each subgroup's first invocation posts its sum.
  if (lid % sg == 0u) {
    partial[lid / sg] = s;
  }
  workgroupBarrier();
  var total = vec2<f32>(0.0);
  if (lid % threads_per_row == 0u) {
    for (var j = 0u; j < threads_per_row / sg; j++) {
      total += partial[lid / sg + j];
    }
  }
  return total;
}
