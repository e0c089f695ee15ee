// Checks the subgroup layout reduce_subgroups.wgsl relies on: run once per device with the decode kernels'
// workgroup size; TS (subgroup-probe.ts) reads out[lid] = (subgroup invocation id, subgroup size, smallest lid of the
// subgroup) and requires id == lid % size and smallest == lid - id, with one power-of-two size for the whole workgroup
// (subgroups are contiguous, ordered runs of local invocations). Assembled as `enable subgroups;` + this file.

override WORKGROUP_SIZE: u32 = 64u;

@group(0) @binding(0) var<storage, read_write> out: array<vec4<u32>>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(@builtin(local_invocation_index) lid: u32) {
  out[lid] = vec4<u32>(subgroupExclusiveAdd(1u), subgroupAdd(1u), subgroupMin(lid), 0u);
}
