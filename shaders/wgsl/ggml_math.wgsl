// The float steps of ggml's x86 CPU arithmetic, bit for bit (llama numerics): fused multiply-add, the division and
// SiLU of ggml_vec_swiglu_f32 (ggml_v_expf's polynomial). TS twin: harness/ggml-exact.ts (fma32, ggmlExpf,
// ggmlSwiglu). Pure functions; part of the int8 kernels' modules.
//
// WGSL promises less than this needs, so nothing here leans on it:
//   * fma() need not be fused (SwiftShader computes it as a rounded product plus a rounded sum: measured), so fma_rn
//     builds the single rounding from round-to-nearest products and sums: Dekker's exact product, Knuth's TwoSum and
//     Boldo–Melquiond's round-to-odd ("Emulation of FMA and correctly rounded sums", IEEE TC 2008).
//   * A compiler may contract a*b + c into an FMA (SPIR-V allows it wherever NoContraction is missing; SwiftShader
//     does not, GPU compilers often do). Every product here is either exact (Dekker's 12-bit halves), so fusing it
//     changes nothing, or passes through opaque() before an addition uses it, which a compiler cannot fuse across.
//   * x / y may be off by 2.5 ULP; div_rn corrects the quotient with its exact remainder.
//   * Compilers fold float arithmetic with constants as if it were associative (SPIR-V optimizers rewrite (c + x) - c
//     to x unless an instruction is marked NoContraction, which WGSL cannot ask for; measured on SwiftShader), and
//     that breaks TwoSum. So every constant that meets these functions passes through opaque() too.
// opaque(x) is x OR-ed with a zero the compiler cannot know (the kernel calls opaque_init with a uniform it knows to
// be nonzero, once, first). This assumes the compiler does not reassociate additions of unknown values, which
// SPIR-V forbids and every test here confirms on SwiftShader.
// All assume finite operands away from the subnormal range (a dot product's partial sums and scales are); past it
// the result may differ from the CPU's in the last bit (GPUs may flush subnormals; SwiftShader does).

var<private> opaque_zero: u32;

fn opaque_init(nonzero: u32) {
  opaque_zero = select(1u, 0u, nonzero != 0u);
}

// x, hidden from constant folding and from contraction into the operation that uses it.
fn opaque(x: f32) -> f32 {
  return bitcast<f32>(bitcast<u32>(x) | opaque_zero);
}

// The high 12 bits of a's significand (a - hi is exact and has at most 12 bits): a mask, so no product is involved.
fn split_hi(a: f32) -> f32 {
  return bitcast<f32>(bitcast<u32>(a) & 0xfffff000u);
}

// s + e == a + b exactly, s = the rounded sum (Knuth's TwoSum).
fn two_sum(a: f32, b: f32) -> vec2<f32> {
  let s = a + b;
  let bb = s - a;
  return vec2<f32>(s, (a - (s - bb)) + (b - bb));
}

// p + e == x · y exactly, p = the rounded product (Dekker). x and y may be the caller's products and p is one: all
// opaque, so no subtraction below (or sum after) fuses with them.
fn two_prod(x: f32, y: f32) -> vec2<f32> {
  let a = opaque(x);
  let b = opaque(y);
  let p = opaque(a * b);
  let ah = split_hi(a);
  let al = a - ah;
  let bh = split_hi(b);
  let bl = b - bh;
  return vec2<f32>(p, (((ah * bh - p) + ah * bl) + al * bh) + al * bl);
}

// a + b rounded to odd: the rounded sum, or where that was inexact and even, its neighbour towards the exact sum.
fn add_ro(a: f32, b: f32) -> f32 {
  let t = two_sum(a, b);
  let u = bitcast<u32>(t.x);
  if (t.y == 0.0 || (u & 1u) == 1u) {
    return t.x;
  }
  // the magnitude grows when the error has the sum's sign
  return bitcast<f32>(select(u - 1u, u + 1u, (t.y > 0.0) == (t.x > 0.0)));
}

// a · b + c with one rounding (what _mm256_fmadd_ps computes). c may be the caller's product: opaque, so not fused.
fn fma_rn(a: f32, b: f32, c: f32) -> f32 {
  let u = two_prod(a, b);
  let t = two_sum(opaque(c), u.x);
  return t.x + add_ro(t.y, u.y);
}

// a / b correctly rounded (what _mm256_div_ps computes): the quotient moved one ULP while that brings it nearer.
fn div_rn(a: f32, b: f32) -> f32 {
  var q = a / b;
  for (var i = 0u; i < 3u; i++) {
    let r = fma_rn(-q, b, a); // a - q·b, exact
    if (r == 0.0 || q == 0.0 || abs(q) > 3.0e38) {
      break; // exact, or a zero / overflowing quotient (b = ±inf from exp): nothing to correct
    }
    // the neighbour of q towards a / b
    let u = bitcast<u32>(q);
    let n = bitcast<f32>(select(u - 1u, u + 1u, ((r > 0.0) == (b > 0.0)) == (q > 0.0)));
    if (abs(fma_rn(-n, b, a)) < abs(r)) {
      q = n;
    } else {
      break;
    }
  }
  return q;
}

// ggml_v_expf (ggml-cpu/vec.h, AVX2), one lane; its hex-float constants written in decimal (each exactly an f32).
fn ggml_expf(x: f32) -> f32 {
  let r = opaque(12582912.0); // 0x1.8p23
  let z = fma_rn(x, opaque(1.4426950216293335), r); // 0x1.715476p+0
  let n = z - r;
  // 0x1.7f7d1cp-20, 0x1.62e4p-1
  let b = fma_rn(-n, opaque(1.428606765330187e-6), fma_rn(-n, opaque(0.693145751953125), x));
  let e = bitcast<u32>(z) << 23u;
  let k = bitcast<f32>(e + 0x3f800000u);
  let u = b * b;
  // 0x1.0e4020p-7, 0x1.573e2ep-5, 0x1.555e66p-3, 0x1.fffdb6p-2, 0x1.ffffecp-1
  let p01 = fma_rn(opaque(0.008247390389442444), b, opaque(0.04189976677298546));
  let p23 = fma_rn(opaque(0.16668395698070526), b, opaque(0.4999912679195404));
  let j = fma_rn(fma_rn(p01, u, p23), u, opaque(0.9999994039535522) * b);
  if (!(abs(n) > 126.0)) {
    return fma_rn(j, k, k);
  }
  let g = select(0u, 0x82000000u, n <= 0.0);
  let s1 = bitcast<f32>(g + 0x7f000000u);
  let s2 = bitcast<f32>(e - g);
  if (abs(n) > 192.0) {
    return opaque(s1 * s1); // the caller adds 1
  }
  return opaque(fma_rn(s2, j, s2) * s1);
}

// ggml_v_silu (ggml_vec_silu_f32 and ggml_vec_swiglu_f32), one lane: g / (1 + ggml_v_expf(0 - g)).
fn ggml_silu(g: f32) -> f32 {
  return div_rn(g, opaque(1.0) + ggml_expf(opaque(0.0) - g));
}

// ggml_vec_swiglu_f32, one element: silu(g) · u.
fn ggml_swiglu(g: f32, u: f32) -> f32 {
  return ggml_silu(g) * u;
}

// ggml_compute_forward_swiglu_oai_f32, one element: x = min(g, limit), y = clamp(u, −limit, limit),
// x / (1 + expf(alpha · −x)) · (y + 1), each step rounded to f32 in that order (the division correctly rounded).
// expf is the CPU's libm here, not ggml_v_expf: WGSL's exp stands in for it (a few ulps at most, so h agrees with
// the coordinator's to float precision, not bit for bit).
fn ggml_swiglu_oai(g: f32, u: f32, alpha: f32, limit: f32) -> f32 {
  let x = min(g, limit);
  let y = clamp(u, -limit, limit);
  return div_rn(x, opaque(1.0) + exp(opaque(alpha) * -x)) * (y + opaque(1.0));
}

// ggml_compute_forward_swiglu_clamp_f32, one element: x = min(g, limit), y = clamp(u, −limit, limit),
// x / (1 + expf(−x)) · y, each step rounded to f32 in that order; expf as in ggml_swiglu_oai (WGSL's exp).
fn ggml_swiglu_clamp(g: f32, u: f32, limit: f32) -> f32 {
  let x = min(g, limit);
  let y = clamp(u, -limit, limit);
  return div_rn(x, opaque(1.0) + exp(opaque(0.0) - x)) * y;
}

// ggml_silu, then ggml_clamp of it to at most limit, times clamp(u, −limit, limit) (ggml_mul): silu_limit's steps.
fn ggml_silu_limit(g: f32, u: f32, limit: f32) -> f32 {
  return min(ggml_silu(g), limit) * clamp(u, -limit, limit);
}
