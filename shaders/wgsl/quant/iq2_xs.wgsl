// IQ2_XS weights. Block (super-block): 256 elements, 74 bytes.
//   [0..2)     f16 d
//   [2..66)    qs[32] u16, one per group of 8 elements (group g of 32-element sub-block ib at 2 + 2·(4ib + g)): the
//              low 9 bits its iq2xs_grid index, the top 7 its ksigns_iq2xs index
//   [66..74)   scales[8]: sub-block ib's two 4-bit scales, the low nibble for its elements 0..15, the high for 16..31
//   y = ±((d · (0.5 + s)) · 0.25) · magnitude, the magnitude (8, 25 or 43) from the grid point, the sign minus where
//   bit j of the group's signs is set (ggml's dequantize_row_iq2_xs)
// The grid as constant data: ggml-common.h's iq2xs_grid (gguf/iq-grids.ts), 512 points packed as quant/iq2_xxs.wgsl
// packs its 256 (2-bit digits, element j at bit 2j, point p in half 16·(p & 1) of word p >> 1); the signs' 8th bit is
// the parity of the 7 stored ones. Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 256u;
const BLOCK_BYTES: u32 = 74u;

const IQ2XS_GRID = array<u32, 256>(
  0x00020000u, 0x00080005u, 0x0011000au, 0x00160014u, 0x00200019u, 0x00250022u, 0x00410028u, 0x00460044u,
  0x00500049u, 0x00550052u, 0x00610058u, 0x00800064u, 0x00850082u, 0x00910088u, 0x00990094u, 0x010100a0u,
  0x01060104u, 0x01100109u, 0x01150112u, 0x011a0118u, 0x01240121u, 0x01420140u, 0x01480145u, 0x01540151u,
  0x01680160u, 0x01840181u, 0x02000190u, 0x02050202u, 0x02110208u, 0x02200214u, 0x02440241u, 0x02550250u,
  0x028a0280u, 0x04040401u, 0x04090406u, 0x04120410u, 0x04180415u, 0x04240421u, 0x04420440u, 0x04480445u,
  0x04540451u, 0x04600456u, 0x04840481u, 0x05000490u, 0x05050502u, 0x05110508u, 0x05200514u, 0x05440541u,
  0x05610550u, 0x06010580u, 0x06100604u, 0x06400626u, 0x06840642u, 0x08020800u, 0x08080805u, 0x0811080au,
  0x08200814u, 0x08410825u, 0x08500844u, 0x08800858u, 0x08aa08a0u, 0x09040901u, 0x09400910u, 0x09890981u,
  0x0a200a00u, 0x0a960a28u, 0x10010aa0u, 0x10061004u, 0x10101009u, 0x10151012u, 0x10211018u, 0x10401024u,
  0x10451042u, 0x10511048u, 0x10601054u, 0x1081106au, 0x10901084u, 0x11021100u, 0x11081105u, 0x11141111u,
  0x11411120u, 0x11501144u, 0x11941180u, 0x12011196u, 0x12061204u, 0x12401210u, 0x14001260u, 0x14051402u,
  0x14111408u, 0x14201414u, 0x14441441u, 0x14501449u, 0x14801464u, 0x15041501u, 0x15401510u, 0x16141600u,
  0x18011649u, 0x18101804u, 0x18401812u, 0x18861854u, 0x19051900u, 0x1a511966u, 0x20001aa9u, 0x20052002u,
  0x200a2008u, 0x20142011u, 0x20412020u, 0x20502044u, 0x20a02080u, 0x21042101u, 0x21402110u, 0x21652148u,
  0x22222200u, 0x22a82280u, 0x24042401u, 0x24292410u, 0x25002440u, 0x25522541u, 0x26012599u, 0x26a6261au,
  0x28082800u, 0x2820280au, 0x28882855u, 0x296828a2u, 0x2a082990u, 0x2a822a20u, 0x2a8a2a88u, 0x40044001u,
  0x40094006u, 0x40124010u, 0x40184015u, 0x40244021u, 0x40424040u, 0x40484045u, 0x4051404au, 0x40604054u,
  0x40814065u, 0x40904084u, 0x41024100u, 0x41084105u, 0x41144111u, 0x41414120u, 0x41504144u, 0x41854180u,
  0x420141a2u, 0x42104204u, 0x42294212u, 0x44004240u, 0x44054402u, 0x44114408u, 0x44194414u, 0x44414420u,
  0x44504444u, 0x44944480u, 0x45044501u, 0x45244510u, 0x459a4540u, 0x460a4600u, 0x46504644u, 0x48044801u,
  0x48404810u, 0x48544845u, 0x49004862u, 0x49444911u, 0x49694950u, 0x50004a04u, 0x50055002u, 0x50115008u,
  0x50205014u, 0x50415028u, 0x50505044u, 0x51015080u, 0x51105104u, 0x51405115u, 0x52005142u, 0x52aa5244u,
  0x54045401u, 0x54215410u, 0x54605440u, 0x54a15481u, 0x55085500u, 0x55885580u, 0x56685621u, 0x580056a1u,
  0x58415814u, 0x58995850u, 0x5940591au, 0x5a855942u, 0x60046001u, 0x60406010u, 0x60626054u, 0x60a96086u,
  0x62246100u, 0x6292624au, 0x64166400u, 0x65406510u, 0x65a46545u, 0x686a6801u, 0x6a066925u, 0x6a626a54u,
  0x80028000u, 0x80088005u, 0x80148011u, 0x802a8020u, 0x80448041u, 0x80808050u, 0x80a88082u, 0x810180aau,
  0x81068104u, 0x81408110u, 0x81598151u, 0x82208200u, 0x82828280u, 0x82a882a0u, 0x84048401u, 0x84128410u,
  0x84408415u, 0x84898460u, 0x85448500u, 0x861885a5u, 0x8800866au, 0x88258808u, 0x8880885au, 0x88a88882u,
  0x8a228906u, 0x8a888a80u, 0x8aa88a96u, 0x90049001u, 0x90409010u, 0x90849056u, 0x91229100u, 0x92569164u,
  0x94009289u, 0x94449405u, 0x94589450u, 0x95909529u, 0x96419592u, 0x98a69851u, 0x9a159949u, 0xa0009a60u,
  0xa008a002u, 0xa020a00au, 0xa0a0a02au, 0xa159a151u, 0xa200a1a6u, 0xa208a202u, 0xa280a22au, 0xa440a2a0u,
  0xa665a495u, 0xa80aa698u, 0xa822a820u, 0xa8a0a828u, 0xa904a8a8u, 0xa986a984u, 0xaa2aaa28u, 0xaaaaaa91u
);

// Magnitudes of elements 4h .. 4h + 3 (h 0 or 1) of grid point p, one per byte (8 + 17·digit + digit / 2).
fn iq2xs_mags(p: u32, h: u32) -> u32 {
  var grid = IQ2XS_GRID;
  let digits = (grid[(p >> 1u) & 255u] >> (16u * (p & 1u) + 8u * h)) & 0xffu;
  var out = 0u;
  for (var k = 0u; k < 4u; k++) {
    let x = (digits >> (2u * k)) & 3u;
    out |= (8u + 17u * x + (x >> 1u)) << (8u * k);
  }
  return out;
}

// ksigns_iq2xs[q >> 9]: the group's 7 stored sign bits and their parity as bit 7.
fn iq2xs_signs(q: u32) -> u32 {
  let s = (q >> 9u) & 127u;
  return s | ((countOneBits(s) & 1u) << 7u);
}

// The scale factor (0.5 + s) of the half of sub-block ib that holds group g.
fn iq2xs_scale(m: u32, wb: u32, ib: u32, g: u32) -> f32 {
  return 0.5 + f32((w_u8(m, wb + 66u + ib) >> (4u * (g >> 1u))) & 15u);
}

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = w_f16(m, wb);
  var sum = 0.0;
  for (var ib = 0u; ib < 8u; ib++) {
    for (var hf = 0u; hf < 2u; hf++) {
      var s = 0.0;
      for (var g = 2u * hf; g < 2u * hf + 2u; g++) {
        let q = w_u16(m, wb + 2u + 2u * (4u * ib + g));
        let signs = iq2xs_signs(q);
        for (var h = 0u; h < 2u; h++) {
          let mags = u8x4(iq2xs_mags(q & 511u, h));
          for (var k = 0u; k < 4u; k++) {
            let j = 4u * h + k;
            s += select(mags[k], -mags[k], ((signs >> j) & 1u) != 0u) * load_act(a + 32u * ib + 8u * g + j);
          }
        }
      }
      sum += ((d * iq2xs_scale(m, wb, ib, 2u * hf)) * 0.25) * s;
    }
  }
  return sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let ib = i / 32u;
  let g = (i % 32u) / 8u;
  let h = (i % 8u) / 4u;
  let q = w_u16(m, wb + 2u + 2u * (4u * ib + g));
  let signs = iq2xs_signs(q) >> (4u * h);
  let mags = u8x4(iq2xs_mags(q & 511u, h));
  let sign = vec4<f32>(
    select(1.0, -1.0, (signs & 1u) != 0u),
    select(1.0, -1.0, (signs & 2u) != 0u),
    select(1.0, -1.0, (signs & 4u) != 0u),
    select(1.0, -1.0, (signs & 8u) != 0u),
  );
  let db = (w_f16(m, wb) * iq2xs_scale(m, wb, ib, g)) * 0.25;
  return db * (mags * sign);
}
