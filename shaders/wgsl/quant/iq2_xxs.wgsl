// IQ2_XXS weights. Block (super-block): 256 elements, 66 bytes.
//   [0..2)     f16 d
//   [2..66)    per 32-element sub-block ib two u32 at 2 + 8ib: the first's byte g is the iq2xxs_grid index of group g
//              (elements 8g .. 8g + 7 of the sub-block); the second's bits 7g .. 7g + 6 are group g's ksigns_iq2xs
//              index, its top 4 bits the sub-block's scale s
//   y = ±((d · (0.5 + s)) · 0.25) · magnitude, the magnitude (8, 25 or 43) from the grid point, the sign minus where
//   bit j of the group's signs is set (ggml's dequantize_row_iq2_xxs)
// The grid as constant data: ggml-common.h's iq2xxs_grid (gguf/iq-grids.ts), each point's 8 magnitudes as 2-bit
// digits (0: 8, 1: 25, 2: 43; element j at bit 2j) in half 16·(p & 1) of word p >> 1; the signs' 8th bit is the
// parity of the 7 stored ones. Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 256u;
const BLOCK_BYTES: u32 = 66u;

const IQ2XXS_GRID = array<u32, 128>(
  0x00020000u, 0x00080005u, 0x0011000au, 0x00200014u, 0x00280022u, 0x0041002au, 0x00500044u, 0x00610058u,
  0x00800064u, 0x008a0082u, 0x010100a2u, 0x01100104u, 0x01400115u, 0x01980184u, 0x02020200u, 0x02820222u,
  0x04040401u, 0x04210410u, 0x04400424u, 0x04480442u, 0x04810460u, 0x04900484u, 0x050004a4u, 0x05080502u,
  0x05460520u, 0x05800569u, 0x06090591u, 0x06400610u, 0x06a40684u, 0x08050800u, 0x08140808u, 0x08410828u,
  0x08500844u, 0x08880852u, 0x09400904u, 0x0a140a02u, 0x10041001u, 0x10211010u, 0x10601040u, 0x10901084u,
  0x11001095u, 0x11201108u, 0x115a1150u, 0x12241180u, 0x14001245u, 0x14201408u, 0x14491425u, 0x15181480u,
  0x16001562u, 0x18011616u, 0x18101804u, 0x18811840u, 0x19051900u, 0x1a5119a0u, 0x20022000u, 0x2044200au,
  0x20802061u, 0x21292082u, 0x22002148u, 0x24012202u, 0x24102404u, 0x24562440u, 0x25412500u, 0x26902564u,
  0x28202808u, 0x2a442894u, 0x40044001u, 0x40184010u, 0x40244021u, 0x40484040u, 0x40604056u, 0x40844081u,
  0x41004090u, 0x41614120u, 0x41854180u, 0x42104201u, 0x42564248u, 0x44004268u, 0x44204408u, 0x44994480u,
  0x45244512u, 0x48014600u, 0x48104804u, 0x48454840u, 0x49584900u, 0x49824961u, 0x4a904a45u, 0x50085000u,
  0x50195011u, 0x50805020u, 0x51045088u, 0x51a45142u, 0x54905291u, 0x550a5492u, 0x56545601u, 0x58115800u,
  0x58645819u, 0x5a085940u, 0x60106004u, 0x60686040u, 0x61556100u, 0x62606218u, 0x64056400u, 0x65126510u,
  0x68426584u, 0x80028000u, 0x8041800au, 0x81048082u, 0x81408118u, 0x84018211u, 0x84108404u, 0x84408415u,
  0x85008460u, 0x85948546u, 0x86408609u, 0x88028660u, 0x8a118904u, 0x90109004u, 0x90409024u, 0x911690a1u,
  0x92459180u, 0x94229400u, 0x95519444u, 0x99209881u, 0xa050a002u, 0xa109a085u, 0xa418a200u, 0xa904a850u
);

// Magnitudes of elements 4h .. 4h + 3 (h 0 or 1) of grid point p, one per byte (8 + 17·digit + digit / 2).
fn iq2xxs_mags(p: u32, h: u32) -> u32 {
  var grid = IQ2XXS_GRID;
  let digits = (grid[p >> 1u] >> (16u * (p & 1u) + 8u * h)) & 0xffu;
  var out = 0u;
  for (var k = 0u; k < 4u; k++) {
    let x = (digits >> (2u * k)) & 3u;
    out |= (8u + 17u * x + (x >> 1u)) << (8u * k);
  }
  return out;
}

// ksigns_iq2xs[(aux >> 7g) & 127]: group g's 7 stored sign bits and their parity as bit 7.
fn iq2xxs_signs(aux: u32, g: u32) -> u32 {
  let s = (aux >> (7u * g)) & 127u;
  return s | ((countOneBits(s) & 1u) << 7u);
}

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = w_f16(m, wb);
  var sum = 0.0;
  for (var ib = 0u; ib < 8u; ib++) {
    let idx = w_u32(m, wb + 2u + 8u * ib);
    let aux = w_u32(m, wb + 6u + 8u * ib);
    var s = 0.0;
    for (var g = 0u; g < 4u; g++) {
      let signs = iq2xxs_signs(aux, g);
      for (var h = 0u; h < 2u; h++) {
        let mags = u8x4(iq2xxs_mags(byte_of(idx, g), h));
        for (var k = 0u; k < 4u; k++) {
          let j = 4u * h + k;
          s += select(mags[k], -mags[k], ((signs >> j) & 1u) != 0u) * load_act(a + 32u * ib + 8u * g + j);
        }
      }
    }
    sum += ((d * (0.5 + f32(aux >> 28u))) * 0.25) * s;
  }
  return sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let ib = i / 32u;
  let g = (i % 32u) / 8u;
  let h = (i % 8u) / 4u;
  let aux = w_u32(m, wb + 6u + 8u * ib);
  let signs = iq2xxs_signs(aux, g) >> (4u * h);
  let mags = u8x4(iq2xxs_mags(w_u8(m, wb + 2u + 8u * ib + g), h));
  let sign = vec4<f32>(
    select(1.0, -1.0, (signs & 1u) != 0u),
    select(1.0, -1.0, (signs & 2u) != 0u),
    select(1.0, -1.0, (signs & 4u) != 0u),
    select(1.0, -1.0, (signs & 8u) != 0u),
  );
  let db = (w_f16(m, wb) * (0.5 + f32(aux >> 28u))) * 0.25;
  return db * (mags * sign);
}
