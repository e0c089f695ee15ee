// First half of a routed expert: for each (token, expert) pair p and hidden row r,
//   h[p, r] = act(gate_e[r] · x_t · sg_e + bg_e[r], up_e[r] · x_t · su_e + bu_e[r])      with t = p / n_used, e = ids[p]
// where act, the scales and the biases are the slice's variant (ffn_variant.wgsl; silu(g) · u without either for most
// models).
// Assembled as [enable directives] + common.wgsl + ffn_variant.wgsl + weights.wgsl + one quant/*.wgsl (the weight type) +
// a reduce snippet + this file.
//
// One workgroup per (pair, group of ROWS_PER_WORKGROUP rows); the WORKGROUP_SIZE / ROWS_PER_WORKGROUP threads of a
// row split its blocks and add up their partial sums with row_sum, from reduce.wgsl or reduce_subgroups.wgsl (the
// module's feature variant). Both overrides must be powers of two (checked in TS).
//
// PASS: 0 = fused (gate and up share the quant type, the usual case); when they differ the quant snippet can serve
// only one of them, so TS runs PASS 1 (gate only: h = gate · x, scaled and biased) with the gate type's module, then PASS 2
// (h = act(h, up · x scaled and biased)) with the up type's module.

override WORKGROUP_SIZE: u32 = 64u;
override ROWS_PER_WORKGROUP: u32 = 4u;
override PASS: u32 = 0u;

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> gate_w: array<u32>;
@group(0) @binding(2) var<storage, read> up_w: array<u32>;
@group(0) @binding(3) var<storage, read> rows: array<f32>;  // [n_tokens × n_embd]
@group(0) @binding(4) var<storage, read> ids: array<i32>;   // [n_tokens × n_used], local expert index in the slice
@group(0) @binding(5) var<storage, read_write> h: array<f32>; // [n_tokens · n_used × ff]
@group(0) @binding(6) var<storage, read> variant_words: array<u32>; // the slice's biases, scales, GELU table (ffn_variant.wgsl)

const GATE = 0u;
const UP = 1u;

fn weight_word(m: u32, i: u32) -> u32 {
  if (m == GATE) {
    return gate_w[i];
  }
  return up_w[i];
}

fn load_act(i: u32) -> f32 {
  return rows[i];
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let groups_per_pair = (shape.ff + ROWS_PER_WORKGROUP - 1u) / ROWS_PER_WORKGROUP;
  let wg = linear_workgroup(wid, nwg);
  if (wg >= shape.n_tokens * shape.n_used * groups_per_pair) {
    return; // padding of a folded 2-D dispatch; uniform across the workgroup
  }
  let pair = wg / groups_per_pair;
  let token = pair / shape.n_used;
  let id = u32(ids[pair]);
  if (id < shape.expert_begin || id >= shape.expert_end) {
    return; // another part's expert (see Shape); uniform across the workgroup, which serves one pair
  }
  let expert = id - shape.expert_begin;

  let threads_per_row = WORKGROUP_SIZE / ROWS_PER_WORKGROUP;
  let lane = lid % threads_per_row;
  let row = (wg % groups_per_pair) * ROWS_PER_WORKGROUP + lid / threads_per_row;
  let blocks_per_row = shape.n_embd / BLOCK_SIZE;
  let row_bytes = blocks_per_row * BLOCK_BYTES;

  var g = 0.0;
  var u = 0.0;
  if (row < shape.ff) {
    let row_byte = (expert * shape.ff + row) * row_bytes;
    let act = token * shape.n_embd;
    for (var b = lane; b < blocks_per_row; b += threads_per_row) {
      if (PASS != 2u) {
        g += block_dot(GATE, row_byte + b * BLOCK_BYTES, act + b * BLOCK_SIZE);
      }
      if (PASS != 1u) {
        u += block_dot(UP, row_byte + b * BLOCK_BYTES, act + b * BLOCK_SIZE);
      }
    }
  }
  let sums = row_sum(vec2<f32>(g, u), lid); // gate, up

  if (lane == 0u && row < shape.ff) {
    let o = pair * shape.ff + row;
    switch (PASS) {
      case 1u: {
        h[o] = finish_gate(sums.x, id, row);
      }
      case 2u: {
        h[o] = gated_unit(h[o], finish_up(sums.y, id, row));
      }
      default: {
        h[o] = gated_unit(finish_gate(sums.x, id, row), finish_up(sums.y, id, row));
      }
    }
  }
}
