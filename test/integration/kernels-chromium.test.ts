/**
 * The expert kernels in real headless Chromium (WebGPU on SwiftShader; Chromium's Dawn and Tint, another version than
 * the `webgpu` package's that test/gpu/kernels.test.ts runs every type on every path and variant on): every quant
 * type on the decode kernels, the 'subgroups' variant, the batched kernels, the auto policy and slices split over
 * several bindings, against the CPU reference; llama numerics against the reference with ggml's rounding (each
 * activation rounding, every integer-dot path, both regimes, split slices) with the negative check that exact
 * numerics misses it; and the expert engine's start-up choice between our kernels and onnxruntime-web's wasm, both
 * real, on one page, in both numerics. Which cases: harness/kernel-grid.ts's CHROMIUM_SMOKE_GRID and
 * CHROMIUM_SMOKE_LLAMA_GRID in `npm test`; every type in both regimes, on every variant and integer-dot path
 * (DECODE_GRID, BATCHED_GRID, SPLIT_GRID, LLAMA_GRID) under `npm run test:kernels:full` (EXPERTSWARM_KERNELS=full).
 * One page and one device for the file: each pipeline is built once (a batched one takes SwiftShader seconds).
 * Tolerance: NMSE ≤ 1e-9 — the kernels decode weights exactly and keep activations in f32, so only f32 accumulation
 * error remains (the Node run of the same kernels measures ≤ 1e-12); where f16 tiles ran ('shader-f16' in
 * kernelFeatures) 1e-5. llama numerics: NMSE beyond the ties of h ≤ 1e-9 (shaders/reference/llama-ties.ts).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { bundle, openPage, type BrowserPage } from '../../harness/browser.ts';
import {
  BATCHED_GRID,
  CHROMIUM_SMOKE_GRID,
  CHROMIUM_SMOKE_LLAMA_GRID,
  DECODE_GRID,
  FULL_KERNEL_GRID,
  KERNEL_GRID_TYPES,
  LLAMA_GRID,
  SPLIT_GRID,
  roundingOf,
  type GridResult,
} from '../../harness/kernel-grid.ts';
import { typeName } from '../../gguf/quant-types.ts';
import { Q8_1_WEIGHT_TYPES } from '../../shaders/reference/ggml-activations.ts';

/** Every weight type the kernels read, by name, sorted: the decode regime covers them all (and the full grid both). */
const KERNEL_TYPE_NAMES = KERNEL_GRID_TYPES.map(typeName).sort();
/** The grids this run takes (the file's header). */
const EXACT_CASES = FULL_KERNEL_GRID ? [...DECODE_GRID, ...BATCHED_GRID, ...SPLIT_GRID] : CHROMIUM_SMOKE_GRID;
const LLAMA_CASES = FULL_KERNEL_GRID ? LLAMA_GRID : CHROMIUM_SMOKE_LLAMA_GRID;
/** Each activation rounding llama numerics applies to some kernel type. */
const ROUNDINGS = [...new Set(KERNEL_GRID_TYPES.map(roundingOf))].sort();

/** The bound of a result, from the kernels that ran: f16 tiles (batched, 'shader-f16') 1e-5, otherwise 1e-9. */
const boundOf = (r: GridResult): number =>
  r.ran === 'batched' && r.kernelFeatures.includes('shader-f16')
    ? 1e-5
    : r.numerics === 'llama' && r.ran === 'decode' && r.ranIntegerDot !== 'float' && Q8_1_WEIGHT_TYPES.has(r.type)
      ? 3e-5 // the int8 kernels use Q8_1's f16 s, which the reference does not model (Q8_1_WEIGHT_TYPES)
      : 1e-9;

let browser: BrowserPage | undefined;

before(async () => {
  const script = await bundle(fileURLToPath(new URL('../browser/kernels-entry.ts', import.meta.url)));
  browser = await openPage(script);
  await browser.page.waitForFunction(() => typeof window.runKernelGrid === 'function', undefined, { timeout: 30_000 });
});

after(async () => {
  await browser?.close();
});

async function withPage<T>(run: (page: BrowserPage['page']) => Promise<T>): Promise<T> {
  assert.ok(browser, 'the kernels page opened');
  return run(browser.page);
}

test(FULL_KERNEL_GRID
  ? 'every expert kernel and variant, decode and batched, whole and split, matches the CPU reference in headless Chromium'
  : 'every type on the decode kernels, the subgroups variant, batched, auto and split slices match the CPU reference in headless Chromium', {
  timeout: 600_000,
}, async (t) => {
  const out = await withPage((page) => page.evaluate((cases) => window.runKernelGrid(cases), EXACT_CASES));
  assert.equal(out.error, undefined, out.error);
  assert.ok(out.adapter, 'Chromium gave a WebGPU adapter');
  for (const s of out.skipped) t.diagnostic(`skipped ${JSON.stringify(s.case.features)} ${s.case.type}: ${s.reason}`);
  assert.equal(out.results.length + out.skipped.length, EXACT_CASES.length);
  for (const r of out.results) {
    assert.ok(
      r.nmse <= boundOf(r),
      `${r.typeName} ${r.nEmbd}×${r.ff}, ${r.nTokens} rows × ${r.nUsed} experts (${r.kernelFeatures}, ${r.weightParts} parts): NMSE ${r.nmse}`,
    );
    if (r.features && r.features !== 'auto') assert.deepEqual(r.kernelFeatures, r.features);
  }
  const all = KERNEL_TYPE_NAMES;
  for (const regime of FULL_KERNEL_GRID ? ['decode', 'batched'] : ['decode']) {
    const types = new Set(out.results.filter((r) => r.ran === regime).map((r) => r.typeName));
    assert.deepEqual([...types].sort(), all, `${regime} regime covers every type`);
  }
  assert.ok(
    out.results.some((r) => r.ran === 'batched' && !r.maxBindingBytes && r.regime === 'auto'),
    'the auto policy ran the batched kernels',
  );
  const decode = out.results.filter((r) => r.ran === 'decode');
  assert.ok(
    decode.some((r) => r.kernelFeatures.length === 0),
    'the base decode variant ran',
  );
  if (out.features.includes('subgroups'))
    assert.ok(
      decode.some((r) => r.kernelFeatures.includes('subgroups')),
      'the subgroups variant ran',
    );
  const split = out.results.filter((r) => r.maxBindingBytes);
  assert.equal(split.length, SPLIT_GRID.length);
  assert.deepEqual([...new Set(split.map((r) => r.ran))].sort(), ['batched', 'decode'], 'split slices in both regimes');
  for (const r of split) assert.equal(r.weightParts, r.nExpert, 'one expert per part');
});

test(FULL_KERNEL_GRID
  ? 'llama numerics: every type, both regimes, every integer-dot path and split slices match the rounded reference in headless Chromium'
  : 'llama numerics: each activation rounding on every integer-dot path, batched and split slices match the rounded reference in headless Chromium', {
  timeout: 600_000,
}, async (t) => {
  const out = await withPage((page) => page.evaluate((cases) => window.runKernelGrid(cases), LLAMA_CASES));
  assert.equal(out.error, undefined, out.error);
  for (const s of out.skipped) t.diagnostic(`skipped ${s.case.type} ${s.case.integerDot}: ${s.reason}`);
  assert.equal(out.results.length + out.skipped.length, LLAMA_CASES.length);
  const packed = out.wgslLanguageFeatures.includes('packed_4x8_integer_dot_product');
  t.diagnostic(`packed_4x8_integer_dot_product: ${packed ? 'yes' : 'no'}`);
  const worst = new Map<string, { nmse: number; beyond: number }>();
  for (const r of out.results) {
    const what = `${r.typeName} ${r.nEmbd}×${r.ff} ${r.ran} ${r.numerics ?? 'exact'} (${r.ranIntegerDot ?? '-'}, ${r.weightParts} parts)`;
    if (r.crossCheck) {
      // Negative check: exact numerics is right against the exact reference and far from the rounded one.
      assert.ok(r.nmse <= boundOf(r), `${what}: NMSE ${r.nmse}`);
      assert.ok(r.vsLlama !== undefined && r.vsLlama >= 1e-6, `${what}: exact numerics within ${r.vsLlama} of the rounded reference`);
      t.diagnostic(`${what}: vs the rounded reference, NMSE beyond ties ${r.vsLlama?.toExponential(1)}`);
      continue;
    }
    const bound = boundOf(r);
    assert.ok(r.beyondTies !== undefined && r.beyondTies <= bound, `${what}: NMSE beyond ties ${r.beyondTies} (plain ${r.nmse})`);
    if (r.integerDot && r.integerDot !== 'auto') assert.equal(r.ranIntegerDot, r.integerDot, what);
    if (r.maxBindingBytes) assert.equal(r.weightParts, r.nExpert, `${what}: one expert per part`);
    const key = `${r.typeName} ${r.ran}${r.ran === 'decode' ? ` ${r.ranIntegerDot}` : ''}${r.maxBindingBytes ? ' split' : ''}`;
    const w = worst.get(key) ?? { nmse: 0, beyond: 0 };
    worst.set(key, { nmse: Math.max(w.nmse, r.nmse), beyond: Math.max(w.beyond, r.beyondTies!) });
  }
  for (const [k, v] of worst) t.diagnostic(`${k}: NMSE ${v.nmse.toExponential(1)}, beyond ties ${v.beyond.toExponential(1)}`);
  const llama = out.results.filter((r) => r.numerics === 'llama');
  if (FULL_KERNEL_GRID) {
    for (const regime of ['decode', 'batched']) {
      const types = new Set(llama.filter((r) => r.ran === regime).map((r) => r.typeName));
      assert.deepEqual([...types].sort(), KERNEL_TYPE_NAMES, `${regime} regime covers every type`);
    }
  }
  const rounded = new Set(llama.filter((r) => r.ran === 'decode').map((r) => roundingOf(r.type)));
  assert.deepEqual([...rounded].sort(), ROUNDINGS, 'the decode regime covers every activation rounding');
  assert.ok(
    llama.some((r) => r.ran === 'batched' && !r.maxBindingBytes),
    'llama numerics ran the batched kernels',
  );
  assert.deepEqual([...new Set(llama.filter((r) => r.maxBindingBytes).map((r) => r.ran))].sort(), ['batched', 'decode']);
  const dots = new Set(out.results.map((r) => r.ranIntegerDot));
  for (const d of [...(packed ? ['packed'] : []), 'unpacked', 'float']) assert.ok(dots.has(d as 'packed'), `integer-dot path ${d} ran`);
  assert.equal(out.results.filter((r) => r.crossCheck).length, 2, 'both negative checks ran');
});

for (const numerics of ['exact', 'llama'] as const) {
  test(`the expert engine measures our WebGPU kernels and onnxruntime wasm in the page and keeps the faster (${numerics} numerics)`, {
    timeout: 300_000,
  }, async (t) => {
    const out = await withPage((page) => page.evaluate((n) => window.runEngineStart(n), numerics));
    const r = out.report;
    t.diagnostic(`${r.backend}: ${r.reason}`);
    assert.equal(r.numerics, numerics);
    assert.deepEqual(r.errors, {}, 'both backends built and computed');
    assert.ok(r.measured.webgpu && r.measured.wasm, 'both measured');
    // The faster one (no tie on measured clocks); a software adapter (SwiftShader here) never wins while wasm works.
    const faster = !r.measured.webgpu.isFallbackAdapter && r.measured.webgpu.gflops > r.measured.wasm.gflops ? 'webgpu' : 'wasm';
    assert.equal(r.backend, faster, r.reason);
    if (numerics === 'exact') assert.ok(out.nmse <= 1e-9, `the chosen backend's NMSE ${out.nmse}`);
    else {
      t.diagnostic(`the chosen backend against the rounded reference: NMSE ${out.nmse}, beyond ties ${out.beyondTies}`);
      assert.ok(out.beyondTies !== undefined && out.beyondTies <= 1e-9, `the chosen backend's NMSE beyond ties ${out.beyondTies}`);
    }
  });
}
