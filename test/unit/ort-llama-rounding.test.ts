/**
 * shaders/ort/llama-rounding.ts, pure JS: rounding a hidden vector known only within a bound gives, bit for bit, what
 * ggml's rounding of the exact vector gives (roundActivations of the reference), recomputing only the values the
 * bound leaves open; the bound on h = silu(g) ⊙ u holds; and the data here is hard enough that rounding the
 * approximate vector instead differs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { roundActivations } from '../../shaders/reference/ggml-activations.ts';
import { silu } from '../../shaders/reference/expert-ffn.ts';
import { dotErrorBound, hiddenWithin, roundWithin } from '../../shaders/ort/llama-rounding.ts';
import { mulberry32 as rng } from '../../shaders/random.ts';

const f32 = Math.fround;

/** Rows of `len` values: random, with values placed on (or next to) rounding steps and block scales, zeros and ties. */
function hardRows(vt: GGMLType, nRows: number, len: number, seed: number): Float32Array[] {
  const r = rng(seed);
  const rows: Float32Array[] = [];
  for (let k = 0; k < nRows; k++) {
    const x = new Float32Array(len).map(() => (r() * 2 - 1) * (r() < 0.05 ? 8 : 1));
    const block = vt === GGMLType.Q8_0 ? 32 : vt === GGMLType.Q8_K ? 256 : 1;
    if (block > 1) {
      for (let b = 0; b < len; b += block) {
        let amax = 0;
        for (let i = b; i < b + block; i++) amax = Math.max(amax, Math.abs(x[i]!));
        // A few values exactly half a quantum off a step: the rounding of the exact value is a tie-break.
        for (let j = 0; j < 4; j++) {
          const i = b + Math.floor(r() * block);
          if (Math.abs(x[i]!) === amax) continue;
          const q = Math.floor(r() * 126);
          x[i] = f32(((q + 0.5) * amax) / 127) * (r() < 0.5 ? -1 : 1);
        }
        if (k % 7 === 3) x[b + 1] = -x[b]!; // magnitudes tied across signs (Q8_K's signed max)
      }
      if (k % 11 === 5) x.fill(0, 0, block); // an all-zero block
      if (k % 13 === 6) x.fill(1e-30, block, 2 * Math.min(block, len / 2)); // a block of almost nothing
    } else {
      // Values next to the midpoint between two f16 / bf16 neighbours.
      for (let j = 0; j < len / 8; j++) {
        const i = Math.floor(r() * len);
        const bits = vt === GGMLType.F16 ? 10 : 7;
        const e = Math.floor(Math.log2(Math.abs(x[i]!) || 1));
        x[i] = f32((Math.round(x[i]! * 2 ** (bits - e)) + 0.5) * 2 ** (e - bits));
      }
    }
    rows.push(x);
  }
  return rows;
}

test('roundWithin rounds as the exact values round, recomputing only what the bound leaves open', (t) => {
  for (const vt of [GGMLType.F16, GGMLType.BF16, GGMLType.Q8_0, GGMLType.Q8_K, GGMLType.F32]) {
    const len = 512;
    const r = rng(vt + 1);
    let refined = 0;
    let differsUnrefined = 0;
    let rows = 0;
    for (const [k, exact] of hardRows(vt, 60, len, vt + 7).entries()) {
      // Each approximate value within its bound of the exact one (relative 1e-6 of the row's scale, or 0 for some rows).
      const scale = k % 5 === 0 ? 0 : 1e-6;
      const bound = new Float64Array(len).map((_, i) => scale * (Math.abs(exact[i]!) + 0.1));
      const approx = exact.map((v, i) => f32(v + (r() * 2 - 1) * bound[i]! * 0.5));
      for (let i = 0; i < len; i++) bound[i] = Math.max(bound[i]!, Math.abs(approx[i]! - exact[i]!));
      let calls = 0;
      const got = roundWithin(vt, approx, bound, (i) => {
        calls++;
        return exact[i]!;
      });
      const want = roundActivations(vt, exact);
      // F32 rounds nothing: the values pass as they are (within their bound, not bit for bit).
      assert.deepEqual(got.values, vt === GGMLType.F32 ? approx : want, `${GGMLType[vt]} row ${k}`);
      assert.equal(got.refined, calls);
      refined += got.refined;
      if (roundActivations(vt, approx).some((v, i) => v !== want[i])) differsUnrefined++;
      rows++;
    }
    const share = refined / (rows * len);
    if (vt === GGMLType.F32) {
      assert.equal(refined, 0);
    } else {
      t.diagnostic(
        `${GGMLType[vt]}: ${differsUnrefined} of ${rows} rows round differently unrefined; ${(100 * share).toFixed(2)} % recomputed`,
      );
      // The data is hard enough: rounding the approximate values instead gives other numbers in many rows.
      assert.ok(differsUnrefined >= 10, `${GGMLType[vt]}: only ${differsUnrefined} of ${rows} rows differ unrefined`);
      assert.ok(share < 0.5, `${GGMLType[vt]}: recomputed ${share}`);
    }
  }
});

test('roundWithin on random rows with float32-sized bounds recomputes few values', () => {
  const r = rng(5);
  for (const vt of [GGMLType.Q8_0, GGMLType.Q8_K, GGMLType.BF16]) {
    const len = 4096;
    const exact = new Float32Array(len).map(() => (r() * 2 - 1) * r());
    const bound = new Float64Array(len).fill(1e-7);
    const approx = exact.map((v) => f32(v + (r() * 2 - 1) * 1e-7));
    const got = roundWithin(vt, approx, bound, (i) => exact[i]!);
    assert.deepEqual(got.values, roundActivations(vt, exact));
    assert.ok(got.refined / len < 0.02, `${GGMLType[vt]}: recomputed ${got.refined} of ${len}`);
  }
  assert.throws(() => roundWithin(GGMLType.Q8_0, new Float32Array(48), new Float64Array(48), () => 0), RangeError);
  assert.throws(() => roundWithin(GGMLType.Q4_K, new Float32Array(256), new Float64Array(256), () => 0), RangeError);
});

test('hiddenWithin: silu(g)·u of any g, u within the given errors lies within the bound', () => {
  const r = rng(9);
  const n = 4096;
  const g = new Float32Array(n).map(() => (r() * 2 - 1) * 8);
  const u = new Float32Array(n).map(() => (r() * 2 - 1) * 4);
  const dgs = new Float64Array(n).map(() => r() * 1e-3);
  const dus = new Float64Array(n).map(() => r() * 1e-3);
  const h = new Float32Array(n);
  const bound = new Float64Array(n);
  hiddenWithin(
    g,
    u,
    0,
    (i) => dgs[i]!,
    (i) => dus[i]!,
    h,
    bound,
  );
  for (let i = 0; i < n; i++) {
    assert.equal(h[i], f32(silu(g[i]!) * u[i]!));
    for (const [sg, su] of [
      [1, 1],
      [1, -1],
      [-1, 1],
      [-1, -1],
      [r() * 2 - 1, r() * 2 - 1],
    ] as const) {
      const other = f32(silu(g[i]! + sg * dgs[i]!) * (u[i]! + su * dus[i]!));
      assert.ok(Math.abs(other - h[i]!) <= bound[i]!, `value ${i}: ${other} vs ${h[i]} ± ${bound[i]}`);
    }
  }
  // The dot-product bound grows with the norms and stays below the worst case of any summation order.
  assert.ok(dotErrorBound(1, 1, 256) > 0 && dotErrorBound(2, 1, 256) === 2 * dotErrorBound(1, 1, 256));
  assert.ok(dotErrorBound(1, 1, 4) <= 4 * 2 ** -24);
});
