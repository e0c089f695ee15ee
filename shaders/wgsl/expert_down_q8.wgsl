// expert_down.wgsl with integer dot products, bit for bit as llama.cpp's CPU backend (llama numerics, decode regime):
//   y[p, r] = down_e[r] · h[p] (× s_e + bd_e[r] where the variant has scales or biases: ffn_variant.wgsl)      with e = ids[p]
// where h[p] is the hidden vector as llama.cpp's CPU backend rounds it for the down type, given as
// round_activations.wgsl's main_packed output (act_qs, act_d; see expert_up_q8.wgsl). Assembled and computed as
// expert_up_q8.wgsl is, with down's snippets; work split as there.

override WORKGROUP_SIZE: u32 = 64u;
const LANES: u32 = 8u;

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> down_w: array<u32>;
@group(0) @binding(2) var<storage, read> act_qs: array<u32>;  // [n_tokens · n_used × ff / 4] int8 quants, packed
@group(0) @binding(3) var<storage, read> ids: array<i32>;     // [n_tokens × n_used]
@group(0) @binding(4) var<storage, read_write> y: array<f32>; // [n_tokens · n_used × n_embd]
@group(0) @binding(5) var<storage, read> act_d: array<u32>;   // f32 scales [n_tokens · n_used × ff / BLOCK_SIZE], Q8_K: then bsums
@group(0) @binding(6) var<storage, read> variant_words: array<u32>;  // the slice's biases, scales, GELU table (ffn_variant.wgsl)

var<private> act_blocks: u32;

fn weight_word(m: u32, i: u32) -> u32 {
  return down_w[i];
}

fn act_q(i: u32) -> u32 {
  return act_qs[i];
}

fn act_scale(i: u32) -> f32 {
  return bitcast<f32>(act_d[i]);
}

fn act_bsum(i: u32, k: u32) -> i32 {
  return bitcast<i32>(act_d[act_blocks + 16u * i + k]);
}

// The quant snippet's float block_dot is not called here; load_act completes its contract.
fn load_act(i: u32) -> f32 {
  return f32(extractBits(i32(act_qs[i / 4u]), (i % 4u) * 8u, 8u)) * act_scale(i / BLOCK_SIZE);
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  opaque_init(shape.n_embd);
  product_barrier_init(shape.n_embd);
  let rows_per_group = WORKGROUP_SIZE / LANES;
  let groups_per_pair = (shape.n_embd + rows_per_group - 1u) / rows_per_group;
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

  let l = lid % LANES;
  let row = (wg % groups_per_pair) * rows_per_group + lid / LANES;
  let blocks_per_row = shape.ff / BLOCK_SIZE;
  let row_bytes = blocks_per_row * BLOCK_BYTES;
  act_blocks = shape.n_tokens * shape.n_used * blocks_per_row;

  var acc = vec4<f32>(opaque(0.0)); // lane l's accumulator and its mins' (PAIRED: the odd blocks'; .z, .w unused)
  // PAIRED: an odd last block is left to the scalar tail below.
  let tail = PAIRED && (blocks_per_row & 1u) == 1u;
  let row_byte = (expert * shape.n_embd + row) * row_bytes;
  let act_block = pair * blocks_per_row;
  if (row < shape.n_embd) {
    for (var b = 0u; b < select(blocks_per_row, blocks_per_row - 1u, tail); b++) {
      let wb = row_byte + b * BLOCK_BYTES;
      let da = act_block + b;
      let v = f32(lane_dot(0u, wb, da * (BLOCK_SIZE / 4u), da, l));
      if (PAIRED && (b & 1u) == 1u) {
        acc.y = fma_rn(lane_scale(0u, wb, da), v, acc.y);
      } else if (MIN_FIRST) {
        acc.x = fma_rn(lane_scale(0u, wb, da), v, min_step(0u, wb, da, l, acc.x));
      } else {
        acc.x = fma_rn(lane_scale(0u, wb, da), v, acc.x);
        acc.y = min_step(0u, wb, da, l, acc.y);
      }
    }
  }
  if (PAIRED) {
    acc = vec4<f32>(acc.x + acc.y, 0.0, acc.z, acc.w);
  }
  let sums = lane_sum(acc, lid);

  if (l == 0u && row < shape.n_embd) {
    var s = select(sums.x, sums.x + sums.y, MIN_SUM);
    if (tail) {
      // ggml's scalar loop for the odd last block: sumf = fma(d, Σ of its 32 products, sumf)
      let wb = row_byte + (blocks_per_row - 1u) * BLOCK_BYTES;
      let da = act_block + blocks_per_row - 1u;
      var si = 0;
      for (var k = 0u; k < LANES; k++) {
        si += lane_dot(0u, wb, da * (BLOCK_SIZE / 4u), da, k);
      }
      s = fma_rn(lane_scale(0u, wb, da), f32(si), s);
    }
    y[pair * shape.n_embd + row] = finish_down(s, id, row);
  }
}
