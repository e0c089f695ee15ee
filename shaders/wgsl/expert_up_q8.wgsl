// expert_up.wgsl with integer dot products (llama numerics, decode regime): the same
//   h[p, r] = silu(gate_e[r] · x_t) · (up_e[r] · x_t)      with t = p / n_used, e = ids[p]
// where x_t is token t's row as llama.cpp's CPU backend rounds it for the weight type (Q8_0 blocks of 32 for Q8_0 /
// Q4_0 weights, Q8_K blocks of 256 for the K-quants), given as round_activations.wgsl's main_packed output: int8
// quants packed four to a word (act_qs) and one f32 scale per block (act_d). Each weight block meets its activation
// block in i32 (int8/<quant>.wgsl's block_dot_q8, on dot_i8: dot4I8Packed, or its unpacked fallback) and only the
// block scales are multiplied in f32, as ggml's vec_dot does.
// Assembled as [requires packed_4x8_integer_dot_product;] + [enable subgroups;] + common.wgsl + weights.wgsl +
// quant/<q>.wgsl (BLOCK_SIZE, BLOCK_BYTES) + int8/dot_packed.wgsl or int8/dot_unpacked.wgsl + int8/<q>.wgsl + a reduce
// snippet + this file. Work split, PASS and the part check as in expert_up.wgsl; gate and up share the activations
// (TS uses this kernel only when their types round activations alike).

override WORKGROUP_SIZE: u32 = 64u;
override ROWS_PER_WORKGROUP: u32 = 4u;
override PASS: u32 = 0u;

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> gate_w: array<u32>;
@group(0) @binding(2) var<storage, read> up_w: array<u32>;
@group(0) @binding(3) var<storage, read> act_qs: array<u32>; // [n_tokens × n_embd / 4] int8 quants, packed
@group(0) @binding(4) var<storage, read> ids: array<i32>;    // [n_tokens × n_used], local expert index in the slice
@group(0) @binding(5) var<storage, read_write> h: array<f32>; // [n_tokens · n_used × ff]
@group(0) @binding(6) var<storage, read> act_d: array<f32>;  // [n_tokens × n_embd / BLOCK_SIZE] scales

const GATE = 0u;
const UP = 1u;

fn weight_word(m: u32, i: u32) -> u32 {
  if (m == GATE) {
    return gate_w[i];
  }
  return up_w[i];
}

fn act_q(i: u32) -> u32 {
  return act_qs[i];
}

fn act_scale(i: u32) -> f32 {
  return act_d[i];
}

// The quant snippet's float block_dot is not called here; load_act completes its contract with the rounded value.
fn load_act(i: u32) -> f32 {
  return f32(extractBits(i32(act_qs[i / 4u]), (i % 4u) * 8u, 8u)) * act_d[i / BLOCK_SIZE];
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
    let act_block = token * blocks_per_row; // scale index of the token's first block
    for (var b = lane; b < blocks_per_row; b += threads_per_row) {
      let qa = (act_block + b) * (BLOCK_SIZE / 4u);
      if (PASS != 2u) {
        g += block_dot_q8(GATE, row_byte + b * BLOCK_BYTES, qa, act_block + b);
      }
      if (PASS != 1u) {
        u += block_dot_q8(UP, row_byte + b * BLOCK_BYTES, qa, act_block + b);
      }
    }
  }
  let sums = row_sum(vec2<f32>(g, u), lid); // gate, up

  if (lane == 0u && row < shape.ff) {
    let o = pair * shape.ff + row;
    switch (PASS) {
      case 1u: {
        h[o] = sums.x;
      }
      case 2u: {
        h[o] = silu(h[o]) * sums.y;
      }
      default: {
        h[o] = silu(sums.x) * sums.y;
      }
    }
  }
}
