// ggml's activation rounding on the GPU, bit for bit: each activation row is converted to the weight type's vec-dot
// type and back (quantize → dequantize) exactly as ggml's x86 CPU backend does before its dot products
// (reference: shaders/reference/ggml-activations.ts, gguf/half.ts). Standalone module (no common.wgsl); TS side:
// shaders/round-activations.ts.
//
//   MODE 0 F32   copy (bits unchanged)
//   MODE 1 F16   f32 → f16 → f32, round to nearest even, subnormals kept, overflow to ±inf, NaN → quiet (sign|0x7e00)
//   MODE 2 BF16  f32 → bf16 → f32, ggml_compute_fp32_to_bf16 (round to nearest even on the bits, NaN | 0x40)
//   MODE 3 Q8_0  blocks of 32: amax = max|x|; d = f16(amax / 127); id = 127 / amax; q = round_even(x · id);
//                value = d · q   (x86 quantize_row_q8_0, AVX2 path; also Q8_1's quants)
//   MODE 4 Q8_K  blocks of 256: max = the first x of largest |x| (signed); iscale = -127 / max;
//                q = min(127, round_even(iscale · x)); d = 1 / iscale (f32); value = d · q; an all-zero block stays +0
//                (quantize_row_q8_K_ref, which x86 calls)
//
// Every step is integer arithmetic on the f32 bits; the kernel performs no floating-point operation at all. WGSL
// promises too little for bit-exactness: x / y is only accurate to 2.5 ULP, `correctly rounded` operations may round
// either way, f32 → f16 rounding is implementation-defined, subnormals may be flushed, the sign of zero may be
// ignored and a runtime infinity or NaN makes the result indeterminate. So:
//   * the three divisions (127 / amax, amax / 127, 1 / iscale) are long divisions on the significands with a sticky
//     bit, rounded to nearest even (div_rne);
//   * x · id is the exact 48-bit product of the significands, rounded once to 24 bits (the f32 product ggml rounds,
//     so no fused/contracted product), then rounded half to even to an integer (quant_mag);
//   * f16 / bf16 conversions, d · q and every sign, zero, infinity and NaN are built on the bits.
//
// Entry points (same pipeline layout prefix):
//   main         writes `values` only (any MODE)
//   main_packed  MODE 3/4 only: also the int8 quants and the per-block scale for packed int8 dot products:
//                qs[i / 4] holds elements i..i+3 as pack4xI8 would (element i in the low byte, two's complement),
//                scales[block] the f32 bits of d as the CPU multiplies with it: Q8_0 the f16-rounded d (+inf when it
//                overflows f16), Q8_K the f32 d = 1 / iscale (negative when the block's signed max is positive);
//                Q8_K also its bsums after all the blocks' scales: scales[n_blocks + 16 · block + k] the sum of
//                quants 16k .. 16k + 15 as i32 bits (block_q8_K's bsums, which ggml's K-quant dot products read);
//                Q8_0 also block_q8_1's s after them (Q8_1 is Q8_0's quants and d plus s, which Q4_1's and Q5_1's
//                dot products read): scales[n_blocks + block] the f32 bits of f16(d32 · Σ quants), d32 = amax / 127
//                before its f16 rounding (x86 quantize_row_q8_1); 0 where the quants are not ordinary (an all-zero
//                block, or 127 / amax overflowing: the CPU's 32 saturated quants add up to 0 in i32), NaN for a
//                non-finite block.
//
// Threads and blocks: every invocation owns one quad (4 consecutive elements); a scale block is BLOCK / 4 consecutive
// invocations (8 for Q8_0, 64 for Q8_K; WORKGROUP_SIZE must be a multiple, TS uses 64), whose largest |x| is found by
// a tree in workgroup memory (ties: the lowest element index, as the CPU's first-strictly-greater scan).
//
// Inputs to the Q8 modes are meant to be finite. A Q8_0 block holding ±inf or NaN, or a Q8_K block holding ±inf,
// gives NaN values (the reference's too), quants 0 and a NaN scale; Q8_K ignores NaN elements in the max as the CPU
// does, and their values are NaN, their quants 0.
// One deliberate difference from the TS reference, to match ggml: a block whose 127 / amax overflows f32
// (amax <= ~3.7e-37, e.g. all-subnormal) gives the CPU's quants: Q8_0 -128 (cvtps_epi32 of inf/NaN, saturated) with
// d = +0, so values -0; Q8_K 0 with d = ∓0 (1 / ∓inf), so values of d's sign. The reference computes NaN there.

override MODE: u32 = 0u;
override WORKGROUP_SIZE: u32 = 64u;

const MODE_F32: u32 = 0u;
const MODE_F16: u32 = 1u;
const MODE_BF16: u32 = 2u;
const MODE_Q8_0: u32 = 3u;
const MODE_Q8_K: u32 = 4u;

const F32_INF: u32 = 0x7f800000u;
const F32_QNAN: u32 = 0x7fc00000u;
const F32_ONE: u32 = 0x3f800000u;
const F32_127: u32 = 0x42fe0000u;
const SIGN: u32 = 0x80000000u;

// The call's shape. The TS writer (writeRoundParams in shaders/round-activations.ts) writes these fields in this
// exact order, one u32 each; keep the two in step.
struct RoundParams {
  n_rows: u32,
  row_len: u32, // a multiple of the mode's block (32 for Q8_0, 256 for Q8_K)
}

@group(0) @binding(0) var<uniform> params: RoundParams;
@group(0) @binding(1) var<storage, read> x: array<u32>;                // [n_rows × row_len] f32 bits
@group(0) @binding(2) var<storage, read_write> values: array<u32>;     // [n_rows × row_len] f32 bits
@group(0) @binding(3) var<storage, read_write> qs: array<u32>;         // main_packed: [n_rows × row_len / 4]
@group(0) @binding(4) var<storage, read_write> scales: array<u32>;     // main_packed: [n_rows × row_len / BLOCK] (Q8_K: × 17)

// Per invocation: the largest |x| bits of its part of the block, and (element index in the block << 1) | sign.
var<workgroup> red_abs: array<u32, WORKGROUP_SIZE>;
var<workgroup> red_pos: array<u32, WORKGROUP_SIZE>;
// main_packed, Q8_K: each invocation's sum of its four quants.
var<workgroup> quad_sums: array<i32, WORKGROUP_SIZE>;

fn block_len() -> u32 {
  switch MODE {
    case 3u: { return 32u; }
    case 4u: { return 256u; }
    default: { return 4u; }
  }
}

fn bit_len(v: u32) -> u32 {
  return 32u - countLeadingZeros(v);
}

// A positive finite nonzero f32 (bits) as m · 2^e with m in [2^23, 2^24): subnormals are normalized too.
struct Unpacked {
  m: u32,
  e: i32,
}

fn unpack_mag(a: u32) -> Unpacked {
  let ef = a >> 23u;
  let mant = a & 0x7fffffu;
  if (ef == 0u) {
    let s = countLeadingZeros(mant) - 8u;
    return Unpacked(mant << s, -149 - i32(s));
  }
  return Unpacked(mant | 0x800000u, i32(ef) - 150);
}

// f32 bits of (m + δ) · 2^e rounded to nearest even, where 0 < m < 2^31 and δ in [0, 1) is known only as
// `sticky` (δ != 0). Gradual underflow (subnormal results, rounding up into the smallest normal) and overflow to
// +inf are handled. sticky must be false when m · 2^e needs no rounding (m has at most 24 significant bits and the
// result is normal, or its bits below 2^-149 are all zero) — every caller's m has ≥ 26 bits or is exact.
fn pack_rne(m: u32, sticky: bool, e: i32) -> u32 {
  let n = i32(bit_len(m));
  let lead = e + n - 1; // exponent of m's leading bit
  if (lead > 127) {
    return F32_INF;
  }
  let subnormal = lead < -126;
  // Bits of m below the result's last place: 24 significant bits for a normal result, the 2^-149 place otherwise.
  let shift = max(n - 24, -149 - e);
  var r: u32;
  if (shift <= 0) {
    r = m << u32(-shift);
  } else if (shift > n) {
    return 0u; // below half the smallest subnormal
  } else {
    let kept = m >> u32(shift);
    let rem = m & ((1u << u32(shift)) - 1u);
    let half = 1u << u32(shift - 1);
    let up = rem > half || (rem == half && (sticky || (kept & 1u) == 1u));
    r = kept + select(0u, 1u, up);
  }
  if (subnormal) {
    return r; // r == 2^23 after rounding up is the smallest normal's bits
  }
  // r in [2^23, 2^24]: its leading bit adds 1 to the biased exponent field; a carry to 2^24 adds one more.
  return min((u32(lead + 126) << 23u) + r, F32_INF);
}

// f32 bits of a / b rounded to nearest even (IEEE division), for positive finite nonzero a and b (bits).
fn div_rne(a: u32, b: u32) -> u32 {
  let ua = unpack_mag(a);
  let ub = unpack_mag(b);
  // Restoring long division: after i steps q = floor(ma · 2^(i-1) / mb) and r = 2 · (ma · 2^(i-1) mod mb) < 2^25.
  // ma / mb is in (1/2, 2), so 27 steps give q in [2^25, 2^27): 24 significant bits, a round bit and more.
  var r = ua.m;
  var q = 0u;
  for (var i = 0u; i < 27u; i++) {
    q = q << 1u;
    if (r >= ub.m) {
      r -= ub.m;
      q |= 1u;
    }
    r = r << 1u;
  }
  return pack_rne(q, r != 0u, ua.e - ub.e - 26);
}

// round_half_even(f32(a · s)) for |x| bits a (finite, may be 0 or subnormal) and a positive normal finite scale s:
// the exact product of the significands (48 bits), rounded once to 24 bits as an f32 multiply rounds it, then to an
// integer. A product below 2^-126 (where the f32 would be subnormal) is < 0.5 and gives 0 however it is rounded.
// Saturates at 128 (unreachable: |x| <= amax keeps a · s <= 127.00001).
fn quant_mag(a: u32, s: u32) -> u32 {
  if (a == 0u) {
    return 0u;
  }
  let ua = unpack_mag(a);
  let us = unpack_mag(s);
  // P = ma · ms = H · 2^24 + L from 12-bit halves (every partial product fits in u32).
  let al = ua.m & 0xfffu;
  let ah = ua.m >> 12u;
  let bl = us.m & 0xfffu;
  let bh = us.m >> 12u;
  let mid = ah * bl + al * bh;
  let t = al * bl + ((mid & 0xfffu) << 12u);
  let lo = t & 0xffffffu;
  let hi = ah * bh + (mid >> 12u) + (t >> 24u); // P >= 2^46, so hi >= 2^22; P < 2^48, so hi < 2^24
  // f32 rounding: keep the top 24 bits of P, round on the s1 bits below them (no sticky: P is exact).
  let s1 = bit_len(hi);
  let kept = (hi << (24u - s1)) | (lo >> s1);
  let rem = lo & ((1u << s1) - 1u);
  let half = 1u << (s1 - 1u);
  let f = kept + select(0u, 1u, rem > half || (rem == half && (kept & 1u) == 1u)); // in [2^23, 2^24]
  // The f32 product is f · 2^e2; round it half to even to an integer.
  let e2 = ua.e + us.e + i32(s1);
  if (e2 >= 0) {
    return 128u;
  }
  let sh = u32(-e2);
  if (sh > 25u) {
    return 0u; // f · 2^e2 <= 2^24 · 2^-26
  }
  let qi = f >> sh;
  let rem2 = f & ((1u << sh) - 1u);
  let half2 = 1u << (sh - 1u);
  return min(qi + select(0u, 1u, rem2 > half2 || (rem2 == half2 && (qi & 1u) == 1u)), 128u);
}

// f32 bits of (f32 with magnitude bits d, finite) · q for an integer 0 <= q <= 128, rounded to nearest even.
fn scale_mag(d: u32, q: u32) -> u32 {
  if (d == 0u || q == 0u) {
    return 0u;
  }
  let u = unpack_mag(d);
  return pack_rne(u.m * q, false, u.e);
}

// f32 bits of (positive finite f32 with bits d) · k for an integer 0 <= k < 2^13, rounded to nearest even: the exact
// product of d's 24-bit significand and k (up to 37 bits, as hi · 2^24 + lo) cut to at most 30 bits with a sticky bit.
fn scale_mag_wide(d: u32, k: u32) -> u32 {
  if (d == 0u || k == 0u) {
    return 0u;
  }
  let u = unpack_mag(d);
  let a = (u.m >> 12u) * k;
  let b = (u.m & 0xfffu) * k;
  let t = b + ((a & 0xfffu) << 12u);
  let lo = t & 0xffffffu;
  let hi = (a >> 12u) + (t >> 24u);
  if (hi == 0u) {
    return pack_rne(lo, false, u.e);
  }
  let shift = u32(max(i32(bit_len(hi)) - 6, 0));
  let m = (hi << (24u - shift)) | (lo >> shift);
  let sticky = shift > 0u && (lo & ((1u << shift) - 1u)) != 0u;
  return pack_rne(m, sticky, u.e + i32(shift));
}

// f32 bits → f16 bits as gguf/half.ts f32ToF16 (ggml's converters, F16C's _cvtss_sh): round to nearest even,
// gradual underflow, overflow to ±inf, NaN → sign | 0x7e00.
fn f32_to_f16_bits(u: u32) -> u32 {
  let sign = (u >> 16u) & 0x8000u;
  let a = u & 0x7fffffffu;
  if (a > F32_INF) {
    return sign | 0x7e00u;
  }
  if (a >= 0x477ff000u) {
    return sign | 0x7c00u; // >= 65520: halfway between 65504 and 65536 rounds up (even) to inf
  }
  if (a < 0x38800000u) {
    // Below 2^-14: an f16 subnormal, round_even(|x| · 2^24) units of 2^-24 (1024 is the smallest normal).
    if (a == 0u) {
      return sign;
    }
    let ua = unpack_mag(a);
    let sh = u32(-(ua.e + 24)); // >= 14
    if (sh > 24u) {
      return sign; // |x| · 2^24 < 2^24 · 2^-25
    }
    let k = ua.m >> sh;
    let rem = ua.m & ((1u << sh) - 1u);
    let half = 1u << (sh - 1u);
    return sign | (k + select(0u, 1u, rem > half || (rem == half && (k & 1u) == 1u)));
  }
  let mant = a & 0x7fffffu;
  let h = (((a >> 23u) - 112u) << 10u) | (mant >> 13u);
  let rest = mant & 0x1fffu;
  return sign | (h + select(0u, 1u, rest > 0x1000u || (rest == 0x1000u && (h & 1u) == 1u))); // carry may bump the exponent
}

// f16 bits → f32 bits, exact (gguf/half.ts f16ToF32Table: subnormals normalized, NaN payload kept and quieted).
fn f16_bits_to_f32_bits(h: u32) -> u32 {
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0u) {
    if (m == 0u) {
      return sign;
    }
    let p = 31u - countLeadingZeros(m); // value m · 2^-24 = 1.f · 2^(p - 24)
    return sign | ((p + 103u) << 23u) | ((m << (23u - p)) & 0x7fffffu);
  }
  if (e == 31u) {
    return sign | F32_INF | (m << 13u) | select(0u, 0x400000u, m != 0u);
  }
  return sign | ((e + 112u) << 23u) | (m << 13u);
}

// f32 bits → bf16 → f32 bits as ggml_compute_fp32_to_bf16 (gguf/half.ts f32ToBf16).
fn bf16_round_bits(u: u32) -> u32 {
  if ((u & 0x7fffffffu) > F32_INF) {
    return ((u >> 16u) | 0x40u) << 16u;
  }
  return ((u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u) << 16u; // no wrap: u <= 0xff800000 here
}

// One invocation's quad: element base, how many of its 4 elements exist, their value bits, int8 quants and the
// block's scale bits (Q8 modes); lane is the invocation's index within its block (0 writes the scale).
struct Quad {
  base: u32,
  count: u32,
  vals: vec4<u32>,
  q: vec4<i32>,
  d: u32,
  lane: u32,
  // Q8_0: the f32 bits of amax / 127 before its f16 rounding (0 unless the block is ordinary, NaN if non-finite).
  d32: u32,
}

// Call from uniform control flow (it has barriers).
fn round_quad(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Quad {
  let n = params.n_rows * params.row_len;
  // Workgroups past 65535 are folded into 2-D by TS (as the expert kernels do).
  let base = ((wid.x + wid.y * nwg.x) * WORKGROUP_SIZE + lid) * 4u;
  var r: Quad;
  r.base = base;
  r.count = select(0u, min(n - base, 4u), base < n);
  var u = vec4<u32>(0u);
  for (var k = 0u; k < r.count; k++) {
    u[k] = x[base + k];
  }

  if (MODE == MODE_F32 || MODE == MODE_F16 || MODE == MODE_BF16) {
    for (var k = 0u; k < 4u; k++) {
      switch MODE {
        case 1u: { r.vals[k] = f16_bits_to_f32_bits(f32_to_f16_bits(u[k])); }
        case 2u: { r.vals[k] = bf16_round_bits(u[k]); }
        default: { r.vals[k] = u[k]; }
      }
    }
    return r;
  }

  // Q8_0 / Q8_K: the block's largest |x| (Q8_K: the first such x's sign too).
  let threads = block_len() / 4u;
  let lane = lid % threads;
  let first = lid - lane;
  r.lane = lane;
  var best = 0u;
  var pos = 0u;
  for (var k = 0u; k < r.count; k++) {
    var key = u[k] & 0x7fffffffu;
    if (MODE == MODE_Q8_K && key > F32_INF) {
      key = 0u; // NaN never compares greater in the CPU's scan
    }
    if (key > best) {
      best = key;
      pos = ((lane * 4u + k) << 1u) | (u[k] >> 31u);
    }
  }
  red_abs[lid] = best;
  red_pos[lid] = pos;
  workgroupBarrier();
  for (var s = threads / 2u; s > 0u; s >>= 1u) {
    if (lane < s) {
      let ob = red_abs[lid + s];
      let op = red_pos[lid + s];
      let mb = red_abs[lid];
      if (ob > mb || (ob == mb && op < red_pos[lid])) {
        red_abs[lid] = ob;
        red_pos[lid] = op;
      }
    }
    workgroupBarrier();
  }
  let amax = red_abs[first];
  let max_sign = (red_pos[first] & 1u) << 31u;

  // Per block (every invocation of the block computes the same; no extra barrier needed).
  // kind: 0 zero block, 1 non-finite, 2 127/amax overflows, 3 ordinary.
  var kind = 3u;
  var id = 0u;
  var d = 0u;
  if (amax == 0u) {
    kind = 0u;
  } else if (amax >= F32_INF) {
    kind = 1u;
    d = F32_QNAN;
    r.d32 = F32_QNAN;
  } else {
    id = div_rne(F32_127, amax);
    if (id == F32_INF) {
      kind = 2u;
    }
    if (MODE == MODE_Q8_0) {
      let d32 = div_rne(amax, F32_127);
      d = f16_bits_to_f32_bits(f32_to_f16_bits(d32));
      r.d32 = select(0u, d32, kind == 3u);
    } else if (kind == 3u) {
      d = div_rne(F32_ONE, id);
    }
  }
  let is_sign = max_sign ^ SIGN; // Q8_K: sign of iscale = -127 / max (and of d)
  if (MODE == MODE_Q8_K) {
    d = d | select(0u, is_sign, kind >= 2u);
  }
  r.d = d;

  for (var k = 0u; k < 4u; k++) {
    let xs = u[k] & SIGN;
    let a = u[k] & 0x7fffffffu;
    var q = 0i;
    var v = 0u;
    if (MODE == MODE_Q8_0) {
      switch kind {
        case 0u: { v = xs; }                // x · 0 = ±0, d = 0
        case 1u: { v = F32_QNAN; }
        case 2u: { q = -128i; v = SIGN; }   // d = +0 (amax / 127 underflows f16): +0 · -128
        default: {
          let qm = quant_mag(a, id);
          q = select(i32(qm), -i32(qm), xs != 0u);
          if (d == F32_INF) {
            v = select(xs | F32_INF, F32_QNAN, qm == 0u); // inf · q, inf · 0 = NaN
          } else {
            v = xs | scale_mag(d, qm);     // exact: f16 significand × 7 bits
          }
        }
      }
    } else {
      switch kind {
        case 0u: { v = 0u; }                // the CPU skips the block: +0 whatever x is
        case 1u: { v = F32_QNAN; }
        case 2u: { v = is_sign; }           // d = ∓0, q = 0
        default: {
          if (a > F32_INF) {
            v = F32_QNAN;                   // NaN element: q = 0 on the CPU (nearest_int of NaN)
          } else {
            var qm = quant_mag(a, id);
            let neg = (is_sign ^ xs) != 0u;
            if (!neg) {
              qm = min(qm, 127u);           // MIN(127, v); never binds for finite blocks
            }
            q = select(i32(qm), -i32(qm), neg);
            v = xs | scale_mag(d & 0x7fffffffu, qm); // (sign d)(sign q) = sign x
          }
        }
      }
    }
    r.q[k] = q;
    r.vals[k] = v;
  }
  return r;
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let r = round_quad(wid, nwg, lid);
  for (var k = 0u; k < r.count; k++) {
    values[r.base + k] = r.vals[k];
  }
}

@compute @workgroup_size(WORKGROUP_SIZE)
fn main_packed(
  @builtin(workgroup_id) wid: vec3<u32>,
  @builtin(num_workgroups) nwg: vec3<u32>,
  @builtin(local_invocation_index) lid: u32,
) {
  let r = round_quad(wid, nwg, lid);
  if (MODE == MODE_Q8_0) {
    // s: eight consecutive invocations hold a block's 32 quants (a workgroup holds whole blocks).
    quad_sums[lid] = r.q[0] + r.q[1] + r.q[2] + r.q[3];
    workgroupBarrier();
    if (r.count != 0u && r.lane == 0u) {
      var sum = 0i;
      for (var k = 0u; k < 8u; k++) {
        sum += quad_sums[lid + k];
      }
      var s = F32_QNAN;
      if (r.d32 != F32_QNAN) {
        let mag = f16_bits_to_f32_bits(f32_to_f16_bits(scale_mag_wide(r.d32, u32(abs(sum)))));
        s = select(mag, mag | SIGN, sum < 0i && r.d32 != 0u); // d · (negative sum), even when it rounds to 0
      }
      scales[params.n_rows * (params.row_len / 32u) + r.base / 32u] = s;
    }
  }
  if (MODE == MODE_Q8_K) {
    // bsums: four consecutive invocations hold 16 consecutive quants (a workgroup holds whole blocks).
    quad_sums[lid] = r.q[0] + r.q[1] + r.q[2] + r.q[3];
    workgroupBarrier();
    if (r.count != 0u && lid % 4u == 0u) {
      let n_blocks = params.n_rows * (params.row_len / 256u);
      let bsum = quad_sums[lid] + quad_sums[lid + 1u] + quad_sums[lid + 2u] + quad_sums[lid + 3u];
      scales[n_blocks + r.base / 16u] = bitcast<u32>(bsum);
    }
  }
  if (r.count == 0u) {
    return;
  }
  for (var k = 0u; k < 4u; k++) {
    values[r.base + k] = r.vals[k];
  }
  let b = vec4<u32>(r.q) & vec4<u32>(0xffu);
  qs[r.base / 4u] = b.x | (b.y << 8u) | (b.z << 16u) | (b.w << 24u);
  if (r.lane == 0u) {
    scales[r.base / block_len()] = r.d;
  }
}
