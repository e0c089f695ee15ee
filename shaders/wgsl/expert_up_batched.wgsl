// First half of a routed expert, batched regime: the same h[p, r] = act(gate_e[r] · x_t, up_e[r] · x_t) (scaled, biased) as
// expert_up.wgsl, but with the pairs grouped by expert (TS sorts them: `perm` lists pair indices by expert, `tiles`
// cuts each expert's run into tiles of at most TILE_ROWS pairs), so one workgroup computes a TILE_ROWS × TILE_COLS
// block of h for one expert and decodes each weight element once for all the pairs of its tile.
// Assembled as [enable directives] + common.wgsl + ffn_variant.wgsl + weights.wgsl + one quant/*.wgsl (the weight type) + a tile snippet
// (tile_f32.wgsl, or tile_f16.wgsl in the shader-f16 variant) + this file.
//
// Workgroup index: row tile fastest (tile = wg % n_row_tiles, column tile = wg / n_row_tiles), so neighbouring
// workgroups of one expert read the same weight rows. Per step of TILE_K elements of the reduction (n_embd), the
// workgroup stages the tile's activations (gathered through perm) and TILE_COLS decoded weight rows in workgroup
// memory; thread lid then owns weight row lid % TILE_COLS and activation rows lid / TILE_COLS + i · row_stride
// (row_stride = WORKGROUP_SIZE / TILE_COLS threads share a weight row), accumulating in registers.
// Needs n_embd % 4 == 0 (weights are decoded four elements at a time; TS falls back to decode otherwise); the
// last step is zero-padded when n_embd is not a multiple of TILE_K.
//
// PASS as in expert_up.wgsl: 0 fused, 1 gate only (h = gate · x scaled and biased), 2 up (h = act(h, up · x scaled and biased)).
// TS checks (validateTuning): TILE_COLS divides WORKGROUP_SIZE, row_stride divides TILE_ROWS,
// TILE_ROWS / row_stride ≤ MAX_ROWS_PER_THREAD, and the workgroup memory fits the device.

override WORKGROUP_SIZE: u32 = 64u;
override TILE_ROWS: u32 = 16u;
override TILE_COLS: u32 = 32u;
override PASS: u32 = 0u;

// Reduction elements staged per step, held as vec4s (weights are decoded four at a time).
const TILE_K: u32 = 32u;
const TILE_K4: u32 = 8u;
// Row stride of the staged weights in vec4s: 9, not 8, so the threads reading neighbouring weight rows at one k hit
// distinct memory banks.
const TILE_K4_PAD: u32 = 9u;
const MAX_ROWS_PER_THREAD: u32 = 16u;

struct Tile {
  expert: u32,
  first: u32, // index into perm of the tile's first pair
  count: u32, // pairs in the tile, 1..TILE_ROWS
}

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> gate_w: array<u32>;
@group(0) @binding(2) var<storage, read> up_w: array<u32>;
@group(0) @binding(3) var<storage, read> rows: array<f32>;  // [n_tokens × n_embd]
@group(0) @binding(4) var<storage, read> perm: array<u32>;  // [n_tokens · n_used] pair indices, sorted by expert
@group(0) @binding(5) var<storage, read> tiles: array<Tile>; // [n_row_tiles]
@group(0) @binding(6) var<storage, read_write> h: array<f32>; // [n_tokens · n_used × ff]
@group(0) @binding(7) var<storage, read> variant_words: array<u32>; // the slice's biases, scales, GELU table (ffn_variant.wgsl)

const GATE = 0u;
const UP = 1u;

fn weight_word(m: u32, i: u32) -> u32 {
  if (m == GATE) {
    return gate_w[i];
  }
  return up_w[i];
}

// The quant snippet's block_dot (decode kernels) reads activations through load_act; nothing here calls block_dot,
// so this only completes the snippet's contract, over the staged activation tile.
fn load_act(i: u32) -> f32 {
  return f32(xs[i / 4u][i % 4u]);
}

var<workgroup> xs: array<tile_vec, TILE_ROWS * TILE_K4>;
var<workgroup> ws_g: array<tile_vec, TILE_COLS * TILE_K4_PAD>;
var<workgroup> ws_u: array<tile_vec, TILE_COLS * TILE_K4_PAD>;
var<workgroup> act_start: array<u32, TILE_ROWS>; // where each tile row's activations start in `rows`

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let col_tiles = (shape.ff + TILE_COLS - 1u) / TILE_COLS;
  let wg = linear_workgroup(wid, nwg);
  if (wg >= shape.n_row_tiles * col_tiles) {
    return; // padding of a folded 2-D dispatch; uniform across the workgroup
  }
  let tile = tiles[shape.tile_begin + wg % shape.n_row_tiles];
  let expert = tile.expert - shape.expert_begin; // this part's tiles only
  let col0 = (wg / shape.n_row_tiles) * TILE_COLS;
  let k_len = shape.n_embd;
  let row_bytes = (k_len / BLOCK_SIZE) * BLOCK_BYTES;
  let expert_byte = expert * shape.ff * row_bytes;

  for (var r = lid; r < TILE_ROWS; r += WORKGROUP_SIZE) {
    var start = 0u;
    if (r < tile.count) {
      start = (perm[tile.first + r] / shape.n_used) * shape.n_embd;
    }
    act_start[r] = start;
  }

  let col = lid % TILE_COLS;
  let row_stride = WORKGROUP_SIZE / TILE_COLS;
  let r0 = lid / TILE_COLS;
  let my_rows = TILE_ROWS / row_stride;
  var acc_g: array<f32, MAX_ROWS_PER_THREAD>;
  var acc_u: array<f32, MAX_ROWS_PER_THREAD>;
  workgroupBarrier();

  for (var k0 = 0u; k0 < k_len; k0 += TILE_K) {
    for (var i = lid; i < TILE_ROWS * TILE_K4; i += WORKGROUP_SIZE) {
      let r = i / TILE_K4;
      let k = k0 + 4u * (i % TILE_K4);
      var v = vec4<f32>(0.0);
      if (r < tile.count && k < k_len) {
        let a = act_start[r] + k;
        v = vec4<f32>(rows[a], rows[a + 1u], rows[a + 2u], rows[a + 3u]);
      }
      xs[i] = to_tile(v);
    }
    for (var i = lid; i < TILE_COLS * TILE_K4; i += WORKGROUP_SIZE) {
      let c = i / TILE_K4;
      let kq = 4u * (i % TILE_K4);
      var g = vec4<f32>(0.0);
      var u = vec4<f32>(0.0);
      if (col0 + c < shape.ff && k0 + kq < k_len) {
        let rb = expert_byte + (col0 + c) * row_bytes;
        if (PASS != 2u) {
          g = weight_quad(GATE, rb, k0 + kq);
        }
        if (PASS != 1u) {
          u = weight_quad(UP, rb, k0 + kq);
        }
      }
      ws_g[c * TILE_K4_PAD + kq / 4u] = to_tile(g);
      ws_u[c * TILE_K4_PAD + kq / 4u] = to_tile(u);
    }
    workgroupBarrier();
    for (var k = 0u; k < TILE_K4; k++) {
      let g = ws_g[col * TILE_K4_PAD + k];
      let u = ws_u[col * TILE_K4_PAD + k];
      for (var i = 0u; i < my_rows; i++) {
        let r = r0 + i * row_stride;
        if (r >= tile.count) {
          break; // rows past the tile's pairs hold zeros; skip their arithmetic
        }
        let x = xs[r * TILE_K4 + k];
        acc_g[i] += tile_dot(g, x);
        acc_u[i] += tile_dot(u, x);
      }
    }
    workgroupBarrier();
  }

  if (col0 + col >= shape.ff) {
    return;
  }
  for (var i = 0u; i < my_rows; i++) {
    let r = r0 + i * row_stride;
    if (r >= tile.count) {
      break;
    }
    let o = perm[tile.first + r] * shape.ff + col0 + col;
    switch (PASS) {
      case 1u: {
        h[o] = finish_gate(acc_g[i], tile.expert, col0 + col);
      }
      case 2u: {
        h[o] = gated_unit(h[o], finish_up(acc_u[i], tile.expert, col0 + col));
      }
      default: {
        h[o] = gated_unit(finish_gate(acc_g[i], tile.expert, col0 + col), finish_up(acc_u[i], tile.expert, col0 + col));
      }
    }
  }
}
