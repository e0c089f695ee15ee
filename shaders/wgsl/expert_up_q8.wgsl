// expert_up.wgsl with integer dot products, bit for bit as llama.cpp's CPU backend (llama numerics, decode regime):
//   h[p, r] = swiglu(gate_e[r] · x_t, up_e[r] · x_t)      with t = p / n_used, e = ids[p]
// (or the slice's variant: each sum scaled and biased, its gated unit; ffn_variant.wgsl, ggml_gated_unit below)
// where x_t is token t's row as llama.cpp's CPU backend rounds it for the weight type (Q8_0 blocks of 32 for Q8_0 /
// Q4_0 weights, Q8_K blocks of 256 for the K-quants), given as round_activations.wgsl's main_packed output: int8
// quants packed four to a word (act_qs), one f32 scale per block and, for Q8_K, the bsums after the scales (act_d).
// Each dot product is ggml's x86 AVX2 vec_dot step for step: one invocation per lane of its 8-float accumulator
// (int8/<quant>.wgsl says which integer products land in which lane), each lane's fused multiply-adds over the row's
// blocks in order (fma_rn, ggml_math.wgsl), the lanes added as hsum_float_8 (lanes.wgsl); then swiglu with ggml's
// own expf and division. So h equals the coordinator's h to the last bit (test/gpu/ggml-exact.test.ts).
// Assembled as [requires packed_4x8_integer_dot_product;] + [enable subgroups;] + common.wgsl + ffn_variant.wgsl + weights.wgsl +
// ggml_math.wgsl + quant/<q>.wgsl (BLOCK_SIZE, BLOCK_BYTES) + int8/dot_packed.wgsl or int8/dot_unpacked.wgsl +
// int8/<q>.wgsl + lanes.wgsl or lanes_subgroups.wgsl + this file. Work split: a workgroup serves one (token, expert)
// pair and WORKGROUP_SIZE / LANES rows of it (call-plan.ts int8RowsPerWorkgroup); PASS and the part check as in
// expert_up.wgsl; gate and up share the activations (TS uses this kernel only when their types round alike).

override WORKGROUP_SIZE: u32 = 64u;
override PASS: u32 = 0u;
const LANES: u32 = 8u;

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> gate_w: array<u32>;
@group(0) @binding(2) var<storage, read> up_w: array<u32>;
@group(0) @binding(3) var<storage, read> act_qs: array<u32>; // [n_tokens × n_embd / 4] int8 quants, packed
@group(0) @binding(4) var<storage, read> ids: array<i32>;    // [n_tokens × n_used], local expert index in the slice
@group(0) @binding(5) var<storage, read_write> h: array<f32>; // [n_tokens · n_used × ff]
@group(0) @binding(6) var<storage, read> act_d: array<u32>;  // f32 scales [n_tokens × n_embd / BLOCK_SIZE], Q8_K: then bsums
@group(0) @binding(7) var<storage, read> variant_words: array<u32>; // the slice's biases, scales, GELU table (ffn_variant.wgsl)

const GATE = 0u;
const UP = 1u;

// Activation blocks of the call: where the bsums start in act_d.
var<private> act_blocks: u32;

fn weight_word(m: u32, i: u32) -> u32 {
  if (m == GATE) {
    return gate_w[i];
  }
  return up_w[i];
}

// The gated unit as llama.cpp's CPU computes it (ggml_math.wgsl): ggml_vec_swiglu_f32 for silu, the float steps of
// ggml_compute_forward_swiglu_oai_f32 / _swiglu_clamp_f32, ggml_silu + ggml_clamp + ggml_mul for silu_limit, and
// ggml_vec_geglu_f32's table for gelu (ffn_variant.wgsl; this kernel runs in llama numerics only, so GELU_TABLE is set).
fn ggml_gated_unit(g: f32, u: f32) -> f32 {
  switch (ACTIVATION) {
    case ACT_SWIGLU_OAI: {
      return ggml_swiglu_oai(g, u, SWIGLU_ALPHA, SWIGLU_LIMIT);
    }
    case ACT_SWIGLU_CLAMP: {
      return ggml_swiglu_clamp(g, u, SWIGLU_LIMIT);
    }
    case ACT_SILU_LIMIT: {
      return ggml_silu_limit(g, u, SWIGLU_LIMIT);
    }
    case ACT_GELU: {
      return gelu_unit(g, u);
    }
    default: {
      return ggml_swiglu(g, u);
    }
  }
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
  let groups_per_pair = (shape.ff + rows_per_group - 1u) / rows_per_group;
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

  let l = lid % LANES;
  let row = (wg % groups_per_pair) * rows_per_group + lid / LANES;
  let blocks_per_row = shape.n_embd / BLOCK_SIZE;
  let row_bytes = blocks_per_row * BLOCK_BYTES;
  act_blocks = shape.n_tokens * blocks_per_row;

  // Lane l's accumulators: gate, gate's mins, up, up's mins (PAIRED: the odd blocks' gate and up accumulators).
  var acc = vec4<f32>(opaque(0.0));
  // PAIRED: an odd last block is left to the scalar tail below.
  let tail = PAIRED && (blocks_per_row & 1u) == 1u;
  let row_byte = (expert * shape.ff + row) * row_bytes;
  let act_block = token * blocks_per_row; // scale index of the token's first block
  if (row < shape.ff) {
    for (var b = 0u; b < select(blocks_per_row, blocks_per_row - 1u, tail); b++) {
      let wb = row_byte + b * BLOCK_BYTES;
      let da = act_block + b;
      let qa = da * (BLOCK_SIZE / 4u);
      let odd = PAIRED && (b & 1u) == 1u;
      if (PASS != 2u) {
        let v = f32(lane_dot(GATE, wb, qa, da, l));
        if (odd) {
          acc.y = fma_rn(lane_scale(GATE, wb, da), v, acc.y);
        } else if (MIN_FIRST) {
          acc.x = fma_rn(lane_scale(GATE, wb, da), v, min_step(GATE, wb, da, l, acc.x));
        } else {
          acc.x = fma_rn(lane_scale(GATE, wb, da), v, acc.x);
          acc.y = min_step(GATE, wb, da, l, acc.y);
        }
      }
      if (PASS != 1u) {
        let v = f32(lane_dot(UP, wb, qa, da, l));
        if (odd) {
          acc.w = fma_rn(lane_scale(UP, wb, da), v, acc.w);
        } else if (MIN_FIRST) {
          acc.z = fma_rn(lane_scale(UP, wb, da), v, min_step(UP, wb, da, l, acc.z));
        } else {
          acc.z = fma_rn(lane_scale(UP, wb, da), v, acc.z);
          acc.w = min_step(UP, wb, da, l, acc.w);
        }
      }
    }
  }
  if (PAIRED) {
    acc = vec4<f32>(acc.x + acc.y, 0.0, acc.z + acc.w, 0.0);
  }
  let sums = lane_sum(acc, lid);

  if (l == 0u && row < shape.ff) {
    var g = sums.x;
    var u = sums.z;
    if (MIN_SUM) {
      g = sums.x + sums.y;
      u = sums.z + sums.w;
    }
    if (tail) {
      // ggml's scalar loop for the odd last block: sumf = fma(d, Σ of its 32 products, sumf)
      let wb = row_byte + (blocks_per_row - 1u) * BLOCK_BYTES;
      let da = act_block + blocks_per_row - 1u;
      let qa = da * (BLOCK_SIZE / 4u);
      var sg = 0;
      var su = 0;
      for (var k = 0u; k < LANES; k++) {
        if (PASS != 2u) {
          sg += lane_dot(GATE, wb, qa, da, k);
        }
        if (PASS != 1u) {
          su += lane_dot(UP, wb, qa, da, k);
        }
      }
      if (PASS != 2u) {
        g = fma_rn(lane_scale(GATE, wb, da), f32(sg), g);
      }
      if (PASS != 1u) {
        u = fma_rn(lane_scale(UP, wb, da), f32(su), u);
      }
    }
    let o = pair * shape.ff + row;
    switch (PASS) {
      case 1u: {
        h[o] = finish_gate(g, id, row);
      }
      case 2u: {
        h[o] = ggml_gated_unit(h[o], finish_up(u, id, row));
      }
      default: {
        h[o] = ggml_gated_unit(finish_gate(g, id, row), finish_up(u, id, row));
      }
    }
  }
}
