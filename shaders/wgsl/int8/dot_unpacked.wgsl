// Integer dot product of four packed int8 pairs, 'unpacked' form: for devices without WGSL's
// packed_4x8_integer_dot_product language feature. Each byte is sign-extended (i32 extractBits) and multiplied in
// i32: the same exact result as dot4I8Packed, in more instructions.
fn dot_i8(a: u32, b: u32) -> i32 {
  let x = i32(a);
  let y = i32(b);
  return dot(
    vec4<i32>(extractBits(x, 0u, 8u), extractBits(x, 8u, 8u), extractBits(x, 16u, 8u), extractBits(x, 24u, 8u)),
    vec4<i32>(extractBits(y, 0u, 8u), extractBits(y, 8u, 8u), extractBits(y, 16u, 8u), extractBits(y, 24u, 8u)),
  );
}
