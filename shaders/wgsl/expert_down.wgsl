// Second half of a routed expert: for each (token, expert) pair p and output row r,
//   y[p, r] = (down_e[r] · h[p]) · s_e + bd_e[r]      with e = ids[p] (scale and bias where the variant has them: ffn_variant.wgsl)
// Assembled as expert_up.wgsl is, with down's quant snippet.
// Work split as in expert_up.wgsl: one workgroup per (pair, group of rows), threads of a row split its blocks.

override WORKGROUP_SIZE: u32 = 64u;
override ROWS_PER_WORKGROUP: u32 = 4u;

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> down_w: array<u32>;
@group(0) @binding(2) var<storage, read> h: array<f32>;   // [n_tokens · n_used × ff]
@group(0) @binding(3) var<storage, read> ids: array<i32>; // [n_tokens × n_used]
@group(0) @binding(4) var<storage, read_write> y: array<f32>; // [n_tokens · n_used × n_embd]
@group(0) @binding(5) var<storage, read> variant_words: array<u32>; // the slice's biases, scales, GELU table (ffn_variant.wgsl)

fn weight_word(m: u32, i: u32) -> u32 {
  return down_w[i];
}

fn load_act(i: u32) -> f32 {
  return h[i];
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let groups_per_pair = (shape.n_embd + ROWS_PER_WORKGROUP - 1u) / ROWS_PER_WORKGROUP;
  let wg = linear_workgroup(wid, nwg);
  if (wg >= shape.n_tokens * shape.n_used * groups_per_pair) {
    return; // padding of a folded 2-D dispatch; uniform across the workgroup
  }
  let pair = wg / groups_per_pair;
  let id = u32(ids[pair]);
  if (id < shape.expert_begin || id >= shape.expert_end) {
    return; // another part's expert (see Shape); uniform across the workgroup, which serves one pair
  }
  let expert = id - shape.expert_begin;

  let threads_per_row = WORKGROUP_SIZE / ROWS_PER_WORKGROUP;
  let lane = lid % threads_per_row;
  let row = (wg % groups_per_pair) * ROWS_PER_WORKGROUP + lid / threads_per_row;
  let blocks_per_row = shape.ff / BLOCK_SIZE;
  let row_bytes = blocks_per_row * BLOCK_BYTES;

  var acc = 0.0;
  if (row < shape.n_embd) {
    let row_byte = (expert * shape.n_embd + row) * row_bytes;
    let act = pair * shape.ff;
    for (var b = lane; b < blocks_per_row; b += threads_per_row) {
      acc += block_dot(0u, row_byte + b * BLOCK_BYTES, act + b * BLOCK_SIZE);
    }
  }
  let sum = row_sum(vec2<f32>(acc, 0.0), lid).x;

  if (lane == 0u && row < shape.n_embd) {
    y[pair * shape.n_embd + row] = finish_down(sum, id, row);
  }
}
