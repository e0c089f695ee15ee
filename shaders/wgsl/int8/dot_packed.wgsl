// Integer dot product of four packed int8 pairs, 'packed' form: WGSL's dot4I8Packed (the module starts with
// `requires packed_4x8_integer_dot_product;`), which drivers lower to the hardware's 4×8-bit dot instruction
// (DP4a and its kin) where there is one. Exact: Σ of four products of int8 values.
fn dot_i8(a: u32, b: u32) -> i32 {
  return dot4I8Packed(a, b);
}
