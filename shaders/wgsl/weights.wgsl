// Readers of quantized weight bytes held in `array<u32>` storage. GGUF blocks are packed without padding (Q4_0 is
// 18 bytes, Q6_K 210), so a field can start at any byte: these assemble little-endian values across word edges.
//
// Contract: the kernel defines `fn weight_word(m: u32, i: u32) -> u32`, the i-th u32 of weight matrix binding `m`
// (a kernel with two matrices, like expert_up, selects between its bindings; with `m` a constant at every call the
// branch folds away). Storage pointers as function parameters would say this more directly, but need the
// unrestricted_pointer_parameters language feature, which not every browser has.

fn w_u8(m: u32, byte: u32) -> u32 {
  return (weight_word(m, byte >> 2u) >> ((byte & 3u) * 8u)) & 0xffu;
}

fn w_u16(m: u32, byte: u32) -> u32 {
  let s = (byte & 3u) * 8u;
  let lo = weight_word(m, byte >> 2u) >> s;
  if (s < 24u) {
    return lo & 0xffffu;
  }
  return (lo | (weight_word(m, (byte >> 2u) + 1u) << 8u)) & 0xffffu;
}

// Four bytes starting at any byte offset, as one little-endian u32 (byte k of the result is weight byte `byte + k`).
fn w_u32(m: u32, byte: u32) -> u32 {
  let i = byte >> 2u;
  let s = (byte & 3u) * 8u;
  let lo = weight_word(m, i);
  if (s == 0u) {
    return lo;
  }
  return (lo >> s) | (weight_word(m, i + 1u) << (32u - s));
}

fn w_f16(m: u32, byte: u32) -> f32 {
  return f16_bits_to_f32(w_u16(m, byte));
}

// Byte k (0..3) of a word.
fn byte_of(word: u32, k: u32) -> u32 {
  return (word >> (k * 8u)) & 0xffu;
}

// The eight 6-bit (scale, min) pairs of Q4_K and Q5_K (ggml's get_scale_min_k4), unpacked four at a time from the
// 12 scale bytes at `byte`: .x holds scales 0..3 (one per byte), .y scales 4..7, .z mins 0..3, .w mins 4..7.
//   j < 4:  sc = q[j] & 63,                        m = q[j+4] & 63
//   j >= 4: sc = (q[j+4] & 15) | (q[j-4] >> 6) << 4, m = (q[j+4] >> 4) | (q[j] >> 6) << 4
fn k4_scales_mins(m: u32, byte: u32) -> vec4<u32> {
  let q0 = w_u32(m, byte);
  let q1 = w_u32(m, byte + 4u);
  let q2 = w_u32(m, byte + 8u);
  let sc_lo = q0 & 0x3f3f3f3fu;
  let m_lo = q1 & 0x3f3f3f3fu;
  let sc_hi = (q2 & 0x0f0f0f0fu) | ((q0 >> 2u) & 0x30303030u);
  let m_hi = ((q2 >> 4u) & 0x0f0f0f0fu) | ((q1 >> 2u) & 0x30303030u);
  return vec4<u32>(sc_lo, sc_hi, m_lo, m_hi);
}

// Scale j (0..7) and min j from k4_scales_mins' result.
fn k4_scale(p: vec4<u32>, j: u32) -> f32 {
  return f32(byte_of(select(p.x, p.y, j >= 4u), j & 3u));
}
fn k4_min(p: vec4<u32>, j: u32) -> f32 {
  return f32(byte_of(select(p.z, p.w, j >= 4u), j & 3u));
}
// The same as integers (the int8 snippets keep their sums in i32).
fn k4_scale_i(p: vec4<u32>, j: u32) -> i32 {
  return i32(byte_of(select(p.x, p.y, j >= 4u), j & 3u));
}
fn k4_min_i(p: vec4<u32>, j: u32) -> i32 {
  return i32(byte_of(select(p.z, p.w, j >= 4u), j & 3u));
}

// Scale and min of sub-block j (0..7) alone, read from the 12 scale bytes at `byte` (same packing as above); the
// batched kernels decode one sub-block at a time and need only one pair.
fn k4_scale_min(m: u32, byte: u32, j: u32) -> vec2<f32> {
  if (j < 4u) {
    return vec2<f32>(f32(w_u8(m, byte + j) & 63u), f32(w_u8(m, byte + j + 4u) & 63u));
  }
  let q = w_u8(m, byte + j + 4u);
  let sc = (q & 15u) | ((w_u8(m, byte + j - 4u) >> 6u) << 4u);
  let mn = (q >> 4u) | ((w_u8(m, byte + j) >> 6u) << 4u);
  return vec2<f32>(f32(sc), f32(mn));
}

// Q5_0 / Q5_1: the 5th bits of elements i..i+3 (bits i..i+3 of the block's u32 qh) as bit 4 of four bytes.
fn q5_high_bytes(qh: u32, i: u32) -> u32 {
  let h = (qh >> i) & 15u;
  return ((h & 1u) | ((h & 2u) << 7u) | ((h & 4u) << 14u) | ((h & 8u) << 21u)) << 4u;
}

// Four int8 ones, packed: dot_i8(I8_ONES, a) is the sum of a's four int8 values.
const I8_ONES: u32 = 0x01010101u;

// Per byte, q - bias as two's complement int8, for bytes q and bias below 128 (weight quants 0..15 minus 8, 0..63
// minus 32): the high bit of each byte lends the borrow, so no byte borrows from its neighbour.
fn bytes_minus(q: u32, bias: u32) -> u32 {
  return ((q | 0x80808080u) - bias) ^ 0x80808080u;
}

// The four bytes of a word as unsigned values (byte 0 first).
fn u8x4(word: u32) -> vec4<f32> {
  return vec4<f32>(f32(word & 0xffu), f32((word >> 8u) & 0xffu), f32((word >> 16u) & 0xffu), f32(word >> 24u));
}

// The four bytes of a word as int8 values (byte 0 first); i32 extractBits sign-extends.
fn i8x4(word: u32) -> vec4<f32> {
  let w = i32(word);
  return vec4<f32>(f32(extractBits(w, 0u, 8u)), f32(extractBits(w, 8u, 8u)), f32(extractBits(w, 16u, 8u)), f32(extractBits(w, 24u, 8u)));
}

// kvalues_iq4nl (ggml-common.h) as constant data, indexed by nibble: the 16 non-linear levels of IQ4_NL and IQ4_XS.
const KVALUES_IQ4NL = array<f32, 16>(-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);

fn iq4nl(q: u32) -> f32 {
  var kv = KVALUES_IQ4NL;
  return kv[q & 15u];
}

// Four nibbles (bits 0..3 of each byte of q) as four int8 kvalues_iq4nl, packed (the int8 kernels' lanes).
fn iq4nl_bytes(q: u32) -> u32 {
  var out = 0u;
  for (var k = 0u; k < 4u; k++) {
    out |= (u32(i32(iq4nl(q >> (8u * k)))) & 0xffu) << (8u * k);
  }
  return out;
}
