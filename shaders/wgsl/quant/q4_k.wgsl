// Q4_K weights. Block (super-block): 256 elements, 144 bytes.
//   [0..2)     f16 d
//   [2..4)     f16 dmin
//   [4..16)    scales: eight 6-bit (scale, min) pairs, one per 32-element sub-block (see k4_scales_mins)
//   [16..144)  qs[128]: sub-block s lives in qs[32·(s>>1) + l], low nibble for even s, high nibble for odd s
//   y = d·scale[s] · q - dmin·min[s]
// Interface as in f32.wgsl.
const BLOCK_SIZE: u32 = 256u;
const BLOCK_BYTES: u32 = 144u;

fn block_dot(m: u32, wb: u32, a: u32) -> f32 {
  let d = w_f16(m, wb);
  let dmin = w_f16(m, wb + 2u);
  let sm = k4_scales_mins(m, wb + 4u);
  var sum = 0.0;  // Σ_s scale[s] · Σ q·x
  var msum = 0.0; // Σ_s min[s] · Σ x
  for (var j = 0u; j < 4u; j++) {
    // sub-blocks 2j (low nibbles) and 2j+1 (high nibbles) share the 32 bytes qs[32j ..]
    var q_lo = 0.0;
    var q_hi = 0.0;
    var x_lo = 0.0;
    var x_hi = 0.0;
    for (var l = 0u; l < 32u; l += 4u) {
      let q = w_u32(m, wb + 16u + 32u * j + l);
      for (var k = 0u; k < 4u; k++) {
        let b = byte_of(q, k);
        let xl = load_act(a + 64u * j + l + k);
        let xh = load_act(a + 64u * j + 32u + l + k);
        q_lo += f32(b & 15u) * xl;
        q_hi += f32(b >> 4u) * xh;
        x_lo += xl;
        x_hi += xh;
      }
    }
    sum += k4_scale(sm, 2u * j) * q_lo + k4_scale(sm, 2u * j + 1u) * q_hi;
    msum += k4_min(sm, 2u * j) * x_lo + k4_min(sm, 2u * j + 1u) * x_hi;
  }
  return d * sum - dmin * msum;
}

fn weight_quad(m: u32, rb: u32, e: u32) -> vec4<f32> {
  let wb = rb + (e / BLOCK_SIZE) * BLOCK_BYTES;
  let i = e % BLOCK_SIZE;
  let s = i / 32u; // sub-block
  let q = (w_u32(m, wb + 16u + 32u * (s >> 1u) + i % 32u) >> (4u * (s & 1u))) & 0x0f0f0f0fu;
  let sm = k4_scale_min(m, wb + 4u, s);
  return (w_f16(m, wb) * sm.x) * u8x4(q) - w_f16(m, wb + 2u) * sm.y;
}
