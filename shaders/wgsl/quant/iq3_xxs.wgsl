// IQ3_XXS weights. Block (super-block): 256 elements, 98 bytes.
//   [0..2)     f16 d
//   [2..66)    qs[64]: the iq3xxs_grid index of each 4 elements (8 per 32-element sub-block)
//   [66..98)   per sub-block ib a u32: bits 7g .. 7g + 6 are group g's ksigns_iq2xs index (groups of 8 elements), the
//              top 4 bits the sub-block's scale s
//   y = ±((d · (0.5 + s)) · 0.5) · magnitude, the magnitude (4, 12, …, 52, 62) from the grid point, the sign minus
//   where bit j of the group's signs is set (ggml's dequantize_row_iq3_xxs)
// The grid as constant data: ggml-common.h's iq3xxs_grid (gguf/iq-grids.ts), one word per point, element 0 in the low
// byte; the signs' 8th bit is the parity of the 7 stored ones. Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 256u;
const BLOCK_BYTES: u32 = 98u;

const IQ3XXS_GRID = array<u32, 256>(
  0x04040404u, 0x04040414u, 0x04040424u, 0x04040c0cu, 0x04040c1cu, 0x04040c3eu, 0x04041404u, 0x04041414u,
  0x04041c0cu, 0x04042414u, 0x04043e1cu, 0x04043e2cu, 0x040c040cu, 0x040c041cu, 0x040c0c04u, 0x040c0c14u,
  0x040c140cu, 0x040c142cu, 0x040c1c04u, 0x040c1c14u, 0x040c240cu, 0x040c2c24u, 0x040c3e04u, 0x04140404u,
  0x04140414u, 0x04140424u, 0x04140c0cu, 0x04141404u, 0x04141414u, 0x04141c0cu, 0x04141c1cu, 0x04141c3eu,
  0x04142c0cu, 0x04142c3eu, 0x04143e2cu, 0x041c040cu, 0x041c043eu, 0x041c0c04u, 0x041c0c14u, 0x041c142cu,
  0x041c3e04u, 0x04240c1cu, 0x04241c3eu, 0x04242424u, 0x04242c3eu, 0x04243e1cu, 0x04243e2cu, 0x042c040cu,
  0x042c043eu, 0x042c1c14u, 0x042c2c14u, 0x04341c2cu, 0x04343424u, 0x043e0c04u, 0x043e0c24u, 0x043e0c34u,
  0x043e241cu, 0x043e340cu, 0x0c04040cu, 0x0c04041cu, 0x0c040c04u, 0x0c040c14u, 0x0c04140cu, 0x0c04141cu,
  0x0c041c04u, 0x0c041c14u, 0x0c041c24u, 0x0c04243eu, 0x0c042c04u, 0x0c0c0404u, 0x0c0c0414u, 0x0c0c0c0cu,
  0x0c0c1404u, 0x0c0c1414u, 0x0c14040cu, 0x0c14041cu, 0x0c140c04u, 0x0c140c14u, 0x0c14140cu, 0x0c141c04u,
  0x0c143e14u, 0x0c1c0404u, 0x0c1c0414u, 0x0c1c1404u, 0x0c1c1c0cu, 0x0c1c2434u, 0x0c1c3434u, 0x0c24040cu,
  0x0c24042cu, 0x0c242c04u, 0x0c2c1404u, 0x0c2c1424u, 0x0c2c2434u, 0x0c2c3e0cu, 0x0c34042cu, 0x0c3e1414u,
  0x0c3e2404u, 0x14040404u, 0x14040414u, 0x14040c0cu, 0x14040c1cu, 0x14041404u, 0x14041414u, 0x14041434u,
  0x14041c0cu, 0x14042414u, 0x140c040cu, 0x140c041cu, 0x140c042cu, 0x140c0c04u, 0x140c0c14u, 0x140c140cu,
  0x140c1c04u, 0x140c341cu, 0x140c343eu, 0x140c3e04u, 0x14140404u, 0x14140414u, 0x14140c0cu, 0x14140c3eu,
  0x14141404u, 0x14141414u, 0x14141c3eu, 0x14142404u, 0x14142c2cu, 0x141c040cu, 0x141c0c04u, 0x141c0c24u,
  0x141c3e04u, 0x141c3e24u, 0x14241c2cu, 0x14242c1cu, 0x142c041cu, 0x142c143eu, 0x142c240cu, 0x142c3e24u,
  0x143e040cu, 0x143e041cu, 0x143e0c34u, 0x143e242cu, 0x1c04040cu, 0x1c040c04u, 0x1c040c14u, 0x1c04140cu,
  0x1c04141cu, 0x1c042c04u, 0x1c04342cu, 0x1c043e14u, 0x1c0c0404u, 0x1c0c0414u, 0x1c0c1404u, 0x1c0c1c0cu,
  0x1c0c2424u, 0x1c0c2434u, 0x1c14040cu, 0x1c14041cu, 0x1c140c04u, 0x1c14142cu, 0x1c142c14u, 0x1c143e14u,
  0x1c1c0c0cu, 0x1c1c1c1cu, 0x1c241c04u, 0x1c24243eu, 0x1c243e14u, 0x1c2c0404u, 0x1c2c0434u, 0x1c2c1414u,
  0x1c2c2c2cu, 0x1c340c24u, 0x1c341c34u, 0x1c34341cu, 0x1c3e1c1cu, 0x1c3e3404u, 0x24040424u, 0x24040c3eu,
  0x24041c2cu, 0x24041c3eu, 0x24042c1cu, 0x24042c3eu, 0x240c3e24u, 0x24141404u, 0x24141c3eu, 0x24142404u,
  0x24143404u, 0x24143434u, 0x241c043eu, 0x241c242cu, 0x24240424u, 0x24242c0cu, 0x24243424u, 0x242c142cu,
  0x242c241cu, 0x242c3e04u, 0x243e042cu, 0x243e0c04u, 0x243e0c14u, 0x243e1c04u, 0x2c040c14u, 0x2c04240cu,
  0x2c043e04u, 0x2c0c0404u, 0x2c0c0434u, 0x2c0c1434u, 0x2c0c2c2cu, 0x2c140c24u, 0x2c141c14u, 0x2c143e14u,
  0x2c1c0414u, 0x2c1c2c1cu, 0x2c240c04u, 0x2c24141cu, 0x2c24143eu, 0x2c243e14u, 0x2c2c0414u, 0x2c2c1c0cu,
  0x2c342c04u, 0x2c3e1424u, 0x2c3e2414u, 0x34041424u, 0x34042424u, 0x34042434u, 0x34043424u, 0x340c140cu,
  0x340c340cu, 0x34140c3eu, 0x34143424u, 0x341c1c04u, 0x341c1c34u, 0x34242424u, 0x342c042cu, 0x342c2c14u,
  0x34341c1cu, 0x343e041cu, 0x343e140cu, 0x3e04041cu, 0x3e04042cu, 0x3e04043eu, 0x3e040c04u, 0x3e041c14u,
  0x3e042c14u, 0x3e0c1434u, 0x3e0c2404u, 0x3e140c14u, 0x3e14242cu, 0x3e142c14u, 0x3e1c0404u, 0x3e1c0c2cu,
  0x3e1c1c1cu, 0x3e1c3404u, 0x3e24140cu, 0x3e24240cu, 0x3e2c0404u, 0x3e2c0414u, 0x3e2c1424u, 0x3e341c04u
);

// The 4 magnitudes of grid point p, one per byte.
fn iq3xxs_mags(p: u32) -> u32 {
  var grid = IQ3XXS_GRID;
  return grid[p & 255u];
}

// ksigns_iq2xs[(aux >> 7g) & 127]: group g's 7 stored sign bits and their parity as bit 7.
fn iq3xxs_signs(aux: u32, g: u32) -> u32 {
  let s = (aux >> (7u * g)) & 127u;
  return s | ((countOneBits(s) & 1u) << 7u);
}

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = w_f16(m, wb);
  var sum = 0.0;
  for (var ib = 0u; ib < 8u; ib++) {
    let aux = w_u32(m, wb + 66u + 4u * ib);
    var s = 0.0;
    for (var l = 0u; l < 8u; l++) {
      let mags = u8x4(iq3xxs_mags(w_u8(m, wb + 2u + 8u * ib + l)));
      let signs = iq3xxs_signs(aux, l >> 1u) >> (4u * (l & 1u));
      for (var k = 0u; k < 4u; k++) {
        s += select(mags[k], -mags[k], ((signs >> k) & 1u) != 0u) * load_act(a + 32u * ib + 4u * l + k);
      }
    }
    sum += ((d * (0.5 + f32(aux >> 28u))) * 0.5) * s;
  }
  return sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let ib = i / 32u;
  let l = (i % 32u) / 4u;
  let aux = w_u32(m, wb + 66u + 4u * ib);
  let signs = iq3xxs_signs(aux, l >> 1u) >> (4u * (l & 1u));
  let mags = u8x4(iq3xxs_mags(w_u8(m, wb + 2u + 8u * ib + l)));
  let sign = vec4<f32>(
    select(1.0, -1.0, (signs & 1u) != 0u),
    select(1.0, -1.0, (signs & 2u) != 0u),
    select(1.0, -1.0, (signs & 4u) != 0u),
    select(1.0, -1.0, (signs & 8u) != 0u),
  );
  let db = (w_f16(m, wb) * (0.5 + f32(aux >> 28u))) * 0.5;
  return db * (mags * sign);
}
