// Second half of a routed expert, batched regime: y[p, r] = down_e[r] · h[p] (scaled, biased) as in expert_down.wgsl, with the pairs
// grouped by expert (perm, tiles) and one workgroup per TILE_ROWS × TILE_COLS block of y of one expert; each weight
// element is decoded once per tile of pairs.
// Assembled as expert_up_batched.wgsl is, with down's quant snippet.
// Work split, staging and checks as in expert_up_batched.wgsl, with the reduction over ff (ff % 4 == 0) and n_embd
// output rows.

override WORKGROUP_SIZE: u32 = 64u;
override TILE_ROWS: u32 = 16u;
override TILE_COLS: u32 = 32u;

const TILE_K: u32 = 32u;
const TILE_K4: u32 = 8u;
const TILE_K4_PAD: u32 = 9u;
const MAX_ROWS_PER_THREAD: u32 = 16u;

struct Tile {
  expert: u32,
  first: u32,
  count: u32,
}

@group(0) @binding(0) var<uniform> shape: Shape;
@group(0) @binding(1) var<storage, read> down_w: array<u32>;
@group(0) @binding(2) var<storage, read> h: array<f32>;     // [n_tokens · n_used × ff]
@group(0) @binding(3) var<storage, read> perm: array<u32>;  // [n_tokens · n_used] pair indices, sorted by expert
@group(0) @binding(4) var<storage, read> tiles: array<Tile>; // [n_row_tiles]
@group(0) @binding(5) var<storage, read_write> y: array<f32>; // [n_tokens · n_used × n_embd]
@group(0) @binding(6) var<storage, read> variant_words: array<u32>; // the slice's biases, scales, GELU table (ffn_variant.wgsl)

fn weight_word(m: u32, i: u32) -> u32 {
  return down_w[i];
}

// The quant snippet's block_dot (decode kernels) reads activations through load_act; nothing here calls block_dot,
// so this only completes the snippet's contract, over the staged activation tile.
fn load_act(i: u32) -> f32 {
  return f32(xs[i / 4u][i % 4u]);
}

var<workgroup> xs: array<tile_vec, TILE_ROWS * TILE_K4>;
var<workgroup> ws: array<tile_vec, TILE_COLS * TILE_K4_PAD>;
var<workgroup> pair_of: array<u32, TILE_ROWS>;

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let col_tiles = (shape.n_embd + TILE_COLS - 1u) / TILE_COLS;
  let wg = linear_workgroup(wid, nwg);
  if (wg >= shape.n_row_tiles * col_tiles) {
    return; // padding of a folded 2-D dispatch; uniform across the workgroup
  }
  let tile = tiles[shape.tile_begin + wg % shape.n_row_tiles];
  let expert = tile.expert - shape.expert_begin; // this part's tiles only
  let col0 = (wg / shape.n_row_tiles) * TILE_COLS;
  let k_len = shape.ff;
  let row_bytes = (k_len / BLOCK_SIZE) * BLOCK_BYTES;
  let expert_byte = expert * shape.n_embd * row_bytes;

  for (var r = lid; r < TILE_ROWS; r += WORKGROUP_SIZE) {
    var p = 0u;
    if (r < tile.count) {
      p = perm[tile.first + r];
    }
    pair_of[r] = p;
  }

  let col = lid % TILE_COLS;
  let row_stride = WORKGROUP_SIZE / TILE_COLS;
  let r0 = lid / TILE_COLS;
  let my_rows = TILE_ROWS / row_stride;
  var acc: array<f32, MAX_ROWS_PER_THREAD>;
  workgroupBarrier();

  for (var k0 = 0u; k0 < k_len; k0 += TILE_K) {
    for (var i = lid; i < TILE_ROWS * TILE_K4; i += WORKGROUP_SIZE) {
      let r = i / TILE_K4;
      let k = k0 + 4u * (i % TILE_K4);
      var v = vec4<f32>(0.0);
      if (r < tile.count && k < k_len) {
        let a = pair_of[r] * k_len + k;
        v = vec4<f32>(h[a], h[a + 1u], h[a + 2u], h[a + 3u]);
      }
      xs[i] = to_tile(v);
    }
    for (var i = lid; i < TILE_COLS * TILE_K4; i += WORKGROUP_SIZE) {
      let c = i / TILE_K4;
      let kq = 4u * (i % TILE_K4);
      var w = vec4<f32>(0.0);
      if (col0 + c < shape.n_embd && k0 + kq < k_len) {
        w = weight_quad(0u, expert_byte + (col0 + c) * row_bytes, k0 + kq);
      }
      ws[c * TILE_K4_PAD + kq / 4u] = to_tile(w);
    }
    workgroupBarrier();
    for (var k = 0u; k < TILE_K4; k++) {
      let w = ws[col * TILE_K4_PAD + k];
      for (var i = 0u; i < my_rows; i++) {
        let r = r0 + i * row_stride;
        if (r >= tile.count) {
          break; // rows past the tile's pairs hold zeros; skip their arithmetic
        }
        acc[i] += tile_dot(w, xs[r * TILE_K4 + k]);
      }
    }
    workgroupBarrier();
  }

  if (col0 + col >= shape.n_embd) {
    return;
  }
  for (var i = 0u; i < my_rows; i++) {
    let r = r0 + i * row_stride;
    if (r >= tile.count) {
      break;
    }
    y[pair_of[r] * shape.n_embd + col0 + col] = finish_down(acc[i], tile.expert, col0 + col);
  }
}
