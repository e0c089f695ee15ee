// IQ4_XS weights. Block (super-block): 256 elements, 136 bytes.
//   [0..2)     f16 d
//   [2..4)     u16 scales_h: bits 2ib, 2ib + 1 are the high 2 bits of sub-block ib's 6-bit scale
//   [4..8)     scales_l[4]: the low 4 bits of sub-block ib's scale, in byte ib / 2 (low nibble for even ib)
//   [8..136)   qs[128]: 32-element sub-block ib in qs[16ib .. 16ib + 16], laid out as an IQ4_NL block's qs (byte j
//              holds element j in its low nibble, j + 16 in its high one), each nibble an index into kvalues_iq4nl
//   y = (d · (scale[ib] − 32)) · kvalues_iq4nl[q]
// Interface as in f32.wgsl; kvalues_iq4nl and iq4nl(): weights.wgsl.
const BLOCK_SIZE: u32 = 256u;
const BLOCK_BYTES: u32 = 136u;

// Sub-block ib's scale less its bias of 32 (−32..31).
fn iq4xs_scale_i(m: u32, wb: u32, ib: u32) -> i32 {
  let low = (w_u8(m, wb + 4u + (ib >> 1u)) >> (4u * (ib & 1u))) & 15u;
  let high = (w_u16(m, wb + 2u) >> (2u * ib)) & 3u;
  return i32(low | (high << 4u)) - 32i;
}

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  var sum = 0.0;
  for (var ib = 0u; ib < 8u; ib++) {
    var s = 0.0;
    for (var j = 0u; j < 16u; j += 4u) {
      let q = w_u32(m, wb + 8u + 16u * ib + j);
      for (var k = 0u; k < 4u; k++) {
        let b = byte_of(q, k);
        s += iq4nl(b) * load_act(a + 32u * ib + j + k) + iq4nl(b >> 4u) * load_act(a + 32u * ib + 16u + j + k);
      }
    }
    sum += f32(iq4xs_scale_i(m, wb, ib)) * s;
  }
  return w_f16(m, wb) * sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let ib = i / 32u;
  let j = i % 32u;
  let q = w_u32(m, wb + 8u + 16u * ib + (j & 15u)) >> select(0u, 4u, j >= 16u);
  let v = vec4<f32>(iq4nl(q), iq4nl(q >> 8u), iq4nl(q >> 16u), iq4nl(q >> 24u));
  return (w_f16(m, wb) * f32(iq4xs_scale_i(m, wb, ib))) * v;
}
