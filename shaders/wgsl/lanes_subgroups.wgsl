// lane_sum for the int8 kernels, 'subgroups' variant (the module starts with `enable subgroups;`): the same sums in
// the same order as lanes.wgsl (hsum_float_8: lanes 4 apart, then 2, then 1), by butterfly shuffles where a row's 8
// invocations share a subgroup (IEEE addition commutes, so every invocation of the row gets the same sums). A device
// whose subgroups are narrower than 8 (SwiftShader's are 4) takes lanes.wgsl's tree. Relies on the subgroup layout
// the runtime's probe confirms (reduce_subgroups.wgsl). Call from uniform control flow; the row's sums are valid in
// its first invocation.

var<workgroup> lane_partial: array<vec4<f32>, WORKGROUP_SIZE>;
var<workgroup> lane_subgroup_width: u32;

fn lane_sum(v: vec4<f32>, lid: u32) -> vec4<f32> {
  let size = subgroupAdd(1u); // every invocation is active here, so the count is the size
  if (lid == 0u) {
    lane_subgroup_width = size;
  }
  let sg = workgroupUniformLoad(&lane_subgroup_width);
  if (sg >= LANES) {
    var s = v;
    for (var o = LANES / 2u; o > 0u; o >>= 1u) {
      s = s + subgroupShuffleXor(s, o);
    }
    return s;
  }
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
