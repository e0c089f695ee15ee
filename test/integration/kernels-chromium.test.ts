/**
 * The expert kernels in real headless Chromium (WebGPU on SwiftShader): every quant type, decode shapes, against the
 * CPU reference. Tolerance: NMSE ≤ 1e-9 — the kernels decode weights exactly and keep activations in f32, so only
 * f32 accumulation error remains (the Node run of the same kernels measures ≤ 1e-12).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { bundle, openPage } from '../support/browser.ts';
import { BATCHED_GRID, DECODE_GRID } from '../browser/kernel-grid.ts';

test('every expert kernel, decode and batched regimes, matches the CPU reference in headless Chromium', { timeout: 300_000 }, async () => {
  const script = await bundle(fileURLToPath(new URL('../browser/kernels-entry.ts', import.meta.url)));
  const browser = await openPage(script);
  try {
    await browser.page.waitForFunction(() => typeof window.runKernelGrid === 'function', undefined, { timeout: 30_000 });
    const out = await browser.page.evaluate(() => window.runKernelGrid('all'));
    assert.equal(out.error, undefined, out.error);
    assert.ok(out.adapter, 'Chromium gave a WebGPU adapter');
    assert.equal(out.results.length, DECODE_GRID.length + BATCHED_GRID.length);
    for (const r of out.results) {
      assert.ok(r.nmse <= 1e-9, `${r.typeName} ${r.nEmbd}×${r.ff}, ${r.nTokens} rows × ${r.nUsed} experts: NMSE ${r.nmse}`);
    }
    const all = ['BF16', 'F16', 'F32', 'Q4_0', 'Q4_K', 'Q5_K', 'Q6_K', 'Q8_0'];
    for (const regime of ['decode', 'batched']) {
      const types = new Set(out.results.filter((r) => r.ran === regime).map((r) => r.typeName));
      assert.deepEqual([...types].sort(), all, `${regime} regime covers every type`);
    }
  } finally {
    await browser.close();
  }
});
