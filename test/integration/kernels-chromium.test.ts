/**
 * The expert kernels in real headless Chromium (WebGPU on SwiftShader): every quant type, both regimes, both decode
 * variants ('base' and 'subgroups'), slices split over several bindings, against the CPU reference; and the expert
 * engine's start-up choice between our kernels and onnxruntime-web's wasm, both real, on one page.
 * Tolerance: NMSE ≤ 1e-9 — the kernels decode weights exactly and keep activations in f32, so only f32 accumulation
 * error remains (the Node run of the same kernels measures ≤ 1e-12).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { bundle, openPage, type BrowserPage } from '../support/browser.ts';
import { BATCHED_GRID, DECODE_GRID, SPLIT_GRID } from '../browser/kernel-grid.ts';

async function withPage<T>(run: (page: BrowserPage['page']) => Promise<T>): Promise<T> {
  const script = await bundle(fileURLToPath(new URL('../browser/kernels-entry.ts', import.meta.url)));
  const browser = await openPage(script);
  try {
    await browser.page.waitForFunction(() => typeof window.runKernelGrid === 'function', undefined, { timeout: 30_000 });
    return await run(browser.page);
  } finally {
    await browser.close();
  }
}

test('every expert kernel and variant, decode and batched, whole and split, matches the CPU reference in headless Chromium', {
  timeout: 600_000,
}, async (t) => {
  const out = await withPage((page) => page.evaluate(() => window.runKernelGrid('all')));
  assert.equal(out.error, undefined, out.error);
  assert.ok(out.adapter, 'Chromium gave a WebGPU adapter');
  for (const s of out.skipped) t.diagnostic(`skipped ${JSON.stringify(s.case.features)} ${s.case.type}: ${s.reason}`);
  assert.equal(out.results.length + out.skipped.length, DECODE_GRID.length + BATCHED_GRID.length + SPLIT_GRID.length);
  for (const r of out.results) {
    assert.ok(
      r.nmse <= 1e-9,
      `${r.typeName} ${r.nEmbd}×${r.ff}, ${r.nTokens} rows × ${r.nUsed} experts (${r.kernelFeatures}, ${r.weightParts} parts): NMSE ${r.nmse}`,
    );
    if (r.features && r.features !== 'auto') assert.deepEqual(r.kernelFeatures, r.features);
  }
  const all = ['BF16', 'F16', 'F32', 'Q4_0', 'Q4_K', 'Q5_K', 'Q6_K', 'Q8_0'];
  for (const regime of ['decode', 'batched']) {
    const types = new Set(out.results.filter((r) => r.ran === regime).map((r) => r.typeName));
    assert.deepEqual([...types].sort(), all, `${regime} regime covers every type`);
  }
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
  for (const r of split) assert.equal(r.weightParts, r.nExpert, 'one expert per part');
});

test('the expert engine measures our WebGPU kernels and onnxruntime wasm in the page and keeps the faster', {
  timeout: 300_000,
}, async (t) => {
  const out = await withPage((page) => page.evaluate(() => window.runEngineStart()));
  const r = out.report;
  t.diagnostic(`${r.backend}: ${r.reason}`);
  assert.deepEqual(r.errors, {}, 'both backends built and computed');
  assert.ok(r.measured.webgpu && r.measured.wasm, 'both measured');
  const faster = r.measured.webgpu.gflops > r.measured.wasm.gflops ? 'webgpu' : 'wasm';
  assert.equal(r.backend, faster, 'the faster one (no tie on measured clocks)');
  assert.ok(out.nmse <= 1e-9, `the chosen backend's NMSE ${out.nmse}`);
});
