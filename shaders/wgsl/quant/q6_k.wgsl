// Q6_K weights. Block (super-block): 256 elements, 210 bytes.
//   [0..128)    ql[128]: low 4 bits
//   [128..192)  qh[64]: high 2 bits
//   [192..208)  scales[16] int8, one per 16 elements
//   [208..210)  f16 d
//   Element e = 128h + 32j + l (h < 2, j < 4, l < 32): low = nibble (j >> 1) of ql[64h + 32(j & 1) + l],
//   high = (qh[32h + l] >> 2j) & 3, q = (low | high << 4) - 32; y = d · scales[e >> 4] · q
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 256u;
const BLOCK_BYTES: u32 = 210u;

fn q6_scale(m: u32, wb: u32, i: u32) -> f32 {
  return f32(extractBits(i32(w_u8(m, wb + 192u + i)), 0u, 8u)); // int8, sign-extended
}

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = w_f16(m, wb + 208u);
  var sum = 0.0;
  for (var h = 0u; h < 2u; h++) {
    for (var part = 0u; part < 2u; part++) {
      // l in [16·part, 16·part + 16): one scale per j
      var s0 = 0.0;
      var s1 = 0.0;
      var s2 = 0.0;
      var s3 = 0.0;
      for (var l = 16u * part; l < 16u * part + 16u; l += 4u) {
        let qa = w_u32(m, wb + 64u * h + l);        // j = 0 (low nibbles), j = 2 (high nibbles)
        let qb = w_u32(m, wb + 64u * h + 32u + l);  // j = 1, j = 3
        let qh = w_u32(m, wb + 128u + 32u * h + l);
        for (var k = 0u; k < 4u; k++) {
          let ba = byte_of(qa, k);
          let bb = byte_of(qb, k);
          let bh = byte_of(qh, k);
          let x = a + 128u * h + l + k;
          s0 += (f32((ba & 15u) | ((bh & 3u) << 4u)) - 32.0) * load_act(x);
          s1 += (f32((bb & 15u) | (((bh >> 2u) & 3u) << 4u)) - 32.0) * load_act(x + 32u);
          s2 += (f32((ba >> 4u) | (((bh >> 4u) & 3u) << 4u)) - 32.0) * load_act(x + 64u);
          s3 += (f32((bb >> 4u) | (((bh >> 6u) & 3u) << 4u)) - 32.0) * load_act(x + 96u);
        }
      }
      let si = 8u * h + part; // scale index of (h, j, part) is 8h + 2j + part
      sum += q6_scale(m, wb, si) * s0 + q6_scale(m, wb, si + 2u) * s1 + q6_scale(m, wb, si + 4u) * s2
        + q6_scale(m, wb, si + 6u) * s3;
    }
  }
  return d * sum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let h = i / 128u;
  let j = (i / 32u) % 4u;
  let l = i % 32u;
  let lo = (w_u32(m, wb + 64u * h + 32u * (j & 1u) + l) >> (4u * (j >> 1u))) & 0x0f0f0f0fu;
  let hi = ((w_u32(m, wb + 128u + 32u * h + l) >> (2u * j)) & 0x03030303u) << 4u;
  return (w_f16(m, wb + 208u) * q6_scale(m, wb, i / 16u)) * (u8x4(lo | hi) - 32.0);
}
