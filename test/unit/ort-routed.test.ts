/**
 * The fair onnxruntime baseline of bench:kernels (bench/ort-routed.ts): the GGUF → MatMulNBits mapping gives the GGUF
 * weights (Q4_0 and Q8_0 bit for bit; Q4_K to within float32 rounding of its scales and mins), and
 * the routed graph on onnxruntime-web's wasm EP computes the reference call for every form (NMSE ≤ 1e-9: weights
 * exact, f32 sums), computing only the routed experts (the graph holds no other expert's weights).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as ort from 'onnxruntime-web';
import { dequantize } from '../../gguf/dequantize.ts';
import { GGMLType, rowByteSize } from '../../gguf/quant-types.ts';
import { quantize } from '../../gguf/quantize.ts';
import { syntheticCall } from '../../shaders/computer.ts';
import { dequantizeExperts, nmse, referenceCall } from '../../shaders/reference/expert-call.ts';
import type { ExpertSlice, SliceTypes } from '../../shaders/slice.ts';
import { OrtRoutedExperts, buildRoutedModel, groupRouting, type OrtRoutedModule } from '../../bench/ort-routed.ts';
import { ortMatrixBytes, ortMatrixValues, ortWeightForm, toOrtMatrix, type OrtWeightForm } from '../../bench/ort-routed-weights.ts';
import { mulberry32 as rng } from '../../shaders/random.ts';

ort.env.wasm.numThreads = 1;

function slice(types: SliceTypes, nEmbd: number, ff: number, nExpert: number, seed: number): ExpertSlice {
  const r = rng(seed);
  const mat = (type: GGMLType, scale: number): Uint8Array =>
    quantize(
      type,
      new Float32Array(nExpert * nEmbd * ff).map(() => (r() * 2 - 1) * scale),
    );
  return { nEmbd, ff, nExpert, types, gate: mat(types.gate, 0.06), up: mat(types.up, 0.06), down: mat(types.down, 0.06) };
}

test('MatMulNBits forms: Q4_0 and Q8_0 exact, Q4_K within float32 rounding of ggml', () => {
  const k = 512;
  const rows = 6;
  for (const [type, form] of [
    [GGMLType.Q4_0, 'q4'],
    [GGMLType.Q8_0, 'q8'],
    [GGMLType.Q4_K, 'q4k'],
  ] as const) {
    const r = rng(type);
    const bytes = quantize(
      type,
      new Float32Array(rows * k).map(() => r() * 2 - 1),
    );
    const want = dequantize(type, bytes, rows * k);
    const m = toOrtMatrix(form, type, bytes, rows, k);
    assert.ok(m.form !== 'f32');
    const got = ortMatrixValues(m);
    for (let i = 0; i < want.length; i++) {
      // Q4_K: ggml rounds d·sc·q − dmin·m once; the folded min term (dmin·m − 8·d·sc) is rounded once per block.
      const b = Math.floor(i / 32);
      const min = m.minsT ? Math.abs(m.minsT[(b % (k / 32)) * rows + Math.floor(i / k)]!) : 0;
      const tol = form === 'q4k' ? (Math.abs(want[i]!) + 16 * m.scales[b]! + min) * 2 ** -24 : 0;
      assert.ok(Math.abs(got[i]! - want[i]!) <= tol, `${form} element ${i}: ${got[i]} vs ${want[i]}`);
    }
    // 4.5 bits per weight for Q4_0 / Q4_K as GGUF holds them; as MatMulNBits + f32 scales a little more.
    const ratio = ortMatrixBytes(m) / (rows * rowByteSize(type, k));
    assert.ok(ratio < (form === 'q4k' ? 1.4 : 1.2), `${form}: ${ratio.toFixed(2)}× the GGUF bytes`);
  }
});

test('weight forms: what maps to MatMulNBits on each EP', () => {
  assert.equal(ortWeightForm(GGMLType.Q4_0, 'webgpu'), 'q4');
  assert.equal(ortWeightForm(GGMLType.Q4_K, 'webgpu'), 'q4k');
  assert.equal(ortWeightForm(GGMLType.Q8_0, 'wasm'), 'q8');
  assert.equal(ortWeightForm(GGMLType.Q8_0, 'webgpu'), 'f32');
  for (const t of [GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.F16, GGMLType.BF16, GGMLType.F32]) assert.equal(ortWeightForm(t, 'wasm'), 'f32');
});

test('groupRouting: pairs by expert, and where each token-major pair lands', () => {
  const g = groupRouting(Int32Array.from([3, 1, 1, 0, 3, 0]), 3, 2);
  assert.deepEqual(g.experts, [0, 1, 3]);
  assert.deepEqual(g.tokens, [
    [1, 2],
    [0, 1],
    [0, 2],
  ]);
  // rows: e0 → pairs 3, 5; e1 → pairs 1, 2; e3 → pairs 0, 4.
  assert.deepEqual(g.perm, [4, 2, 3, 0, 5, 1]);
});

test('routed graph on the wasm EP: the reference call, only the routed experts', async () => {
  const cases: { types: SliceTypes; forms?: Partial<Record<'gate' | 'up' | 'down', OrtWeightForm>> }[] = [
    { types: { gate: GGMLType.Q4_K, up: GGMLType.Q4_K, down: GGMLType.Q4_K } },
    { types: { gate: GGMLType.Q4_0, up: GGMLType.Q4_0, down: GGMLType.Q4_0 } },
    { types: { gate: GGMLType.Q8_0, up: GGMLType.Q8_0, down: GGMLType.Q8_0 } },
    { types: { gate: GGMLType.Q6_K, up: GGMLType.Q6_K, down: GGMLType.F16 } },
    { types: { gate: GGMLType.Q4_K, up: GGMLType.Q8_0, down: GGMLType.Q4_0 } },
    { types: { gate: GGMLType.Q4_K, up: GGMLType.Q4_K, down: GGMLType.Q4_K }, forms: { gate: 'f32', up: 'f32', down: 'f32' } },
  ];
  for (const [i, c] of cases.entries()) {
    const s = slice(c.types, 256, 256, 6, 10 + i);
    for (const [nTokens, nUsed] of [
      [1, 2],
      [5, 3],
    ] as const) {
      const call = syntheticCall({ nEmbd: s.nEmbd, ff: s.ff, nExpert: s.nExpert, nTokens, nUsed }, i + nTokens);
      const want = referenceCall(dequantizeExperts(s), { ...call, nTokens, nUsed });
      const fair = await OrtRoutedExperts.create(ort as unknown as OrtRoutedModule, s, call.ids, nTokens, nUsed, {
        ep: 'wasm',
        ...(c.forms ? { forms: c.forms } : {}),
      });
      try {
        const got = await fair.compute(call.rows, call.ids, call.probs, nTokens, nUsed);
        const e = nmse(got, want);
        assert.ok(e <= 1e-9, `case ${i} ${nTokens}×${nUsed} (${JSON.stringify(fair.forms)}): NMSE ${e}`);
        const routed = new Set(call.ids).size;
        const perExpert = (s.gate.length + s.up.length + s.down.length) / s.nExpert;
        // Only routed experts' weights are in the graph: about their GGUF bytes, far below the slice's.
        assert.ok(fair.weightBytes < routed * perExpert * (c.forms || c.types.down === GGMLType.F16 ? 8 : 1.5));
        await assert.rejects(
          () =>
            fair.compute(
              call.rows,
              call.ids.map((x) => (x + 1) % s.nExpert),
              call.probs,
              nTokens,
              nUsed,
            ),
          /another routing/,
        );
      } finally {
        await fair.dispose();
      }
    }
  }
});

test('routed model bytes: one opset import per domain, MatMulNBits in com.microsoft', () => {
  const s = slice({ gate: GGMLType.Q4_0, up: GGMLType.Q4_0, down: GGMLType.Q4_0 }, 64, 64, 2, 3);
  const { bytes, forms } = buildRoutedModel(s, Int32Array.from([1]), 1, 1, { ep: 'webgpu' });
  const text = Buffer.from(bytes).toString('latin1');
  assert.ok(text.includes('com.microsoft') && text.includes('MatMulNBits'));
  assert.deepEqual(forms, { gate: 'q4', up: 'q4', down: 'q4' });
});
