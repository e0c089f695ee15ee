/**
 * Kernel times through timestamp-query (compute(…, { onTiming })) on SwiftShader in Node: a timed call reports a
 * positive kernel time no larger than its wall time and returns the same bits as an untimed one, in both regimes and
 * in llama numerics; a device without the feature never calls onTiming and computes as before; capabilities() says
 * which. Skipped (with the reason) where the adapter has no timestamp-query. And what a call asks of the GPU
 * (compute(…, { onCounts })): one submit and one readback whatever the regime, and a handful of dispatches.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { quantize } from '../../gguf/quantize.ts';
import { nodeGpu } from '../../harness/node-gpu.ts';
import { syntheticCall } from '../../shaders/computer.ts';
import { type CallCounts, ExpertRuntime, type ExpertSlice } from '../../shaders/runtime.ts';
import { mulberry32 as rng } from '../../shaders/random.ts';

const gpu = await nodeGpu();
/** A fresh adapter per device (an adapter serves one requestDevice). */
const freshAdapter = async (): Promise<GPUAdapter> => {
  const a = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  if (!a) throw new Error(`requestAdapter() returned null: no WebGPU adapter (VK_ICD_FILENAMES=${process.env.VK_ICD_FILENAMES})`);
  return a;
};
const hasTimestamps = (await freshAdapter()).features.has('timestamp-query');

function slice(type: GGMLType): ExpertSlice {
  const r = rng(5);
  const [nEmbd, ff, nExpert] = [256, 256, 4];
  const mat = (): Uint8Array =>
    quantize(
      type,
      new Float32Array(nExpert * nEmbd * ff).map(() => (r() * 2 - 1) * 0.1),
    );
  return { nEmbd, ff, nExpert, types: { gate: type, up: type, down: type }, gate: mat(), up: mat(), down: mat() };
}

test('timed calls: kernel time reported, same bits as untimed', {
  skip: hasTimestamps ? false : 'the adapter has no timestamp-query',
}, async () => {
  const device = await (await freshAdapter()).requestDevice({ requiredFeatures: ['timestamp-query'] });
  try {
    for (const numerics of ['exact', 'llama'] as const) {
      const s = slice(GGMLType.Q4_K);
      const rt = await ExpertRuntime.create(device, s, { numerics });
      assert.equal(rt.capabilities().timestampQuery, true);
      for (const [nTokens, regime] of [
        [1, 'decode'],
        [16, 'batched'],
      ] as const) {
        const c = syntheticCall({ nEmbd: s.nEmbd, ff: s.ff, nExpert: s.nExpert, nTokens, nUsed: 2 });
        const plain = await rt.compute(c.rows, c.ids, c.probs, nTokens, 2, { regime });
        const times: number[] = [];
        const t0 = performance.now();
        const timed = await rt.compute(c.rows, c.ids, c.probs, nTokens, 2, { regime, onTiming: (t) => times.push(t.kernelMs) });
        const wall = performance.now() - t0;
        assert.equal(times.length, 1, `${numerics} ${regime}: one timing per call`);
        assert.ok(times[0]! > 0 && times[0]! <= wall, `${numerics} ${regime}: kernel ${times[0]} ms within wall ${wall} ms`);
        assert.deepEqual(timed, plain, `${numerics} ${regime}: timing changes nothing`);
      }
      // Several timed calls in flight share the query set: each gets its own time.
      const c = syntheticCall({ nEmbd: s.nEmbd, ff: s.ff, nExpert: s.nExpert, nTokens: 2, nUsed: 2 });
      const times: number[] = [];
      await Promise.all([0, 1, 2].map(() => rt.compute(c.rows, c.ids, c.probs, 2, 2, { onTiming: (t) => times.push(t.kernelMs) })));
      assert.equal(times.length, 3);
      assert.ok(times.every((t) => t > 0));
      rt.dispose();
    }
  } finally {
    device.destroy();
  }
});

test('a device without timestamp-query: onTiming is never called, results unchanged', async () => {
  const device = await (await freshAdapter()).requestDevice();
  try {
    const s = slice(GGMLType.Q8_0);
    const rt = await ExpertRuntime.create(device, s);
    assert.equal(rt.capabilities().timestampQuery, false);
    const c = syntheticCall({ nEmbd: s.nEmbd, ff: s.ff, nExpert: s.nExpert, nTokens: 1, nUsed: 2 });
    let called = false;
    const timed = await rt.compute(c.rows, c.ids, c.probs, 1, 2, {
      onTiming: () => {
        called = true;
      },
    });
    assert.equal(called, false);
    assert.deepEqual(timed, await rt.compute(c.rows, c.ids, c.probs, 1, 2));
    rt.dispose();
  } finally {
    device.destroy();
  }
});

test('every call asks the GPU for one submit and one readback, and its dispatches stay few', async () => {
  const device = await (await freshAdapter()).requestDevice();
  try {
    for (const numerics of ['exact', 'llama'] as const) {
      const s = slice(GGMLType.Q4_K);
      const rt = await ExpertRuntime.create(device, s, { numerics });
      for (const [nTokens, regime] of [
        [1, 'decode'],
        [16, 'batched'],
      ] as const) {
        const c = syntheticCall({ nEmbd: s.nEmbd, ff: s.ff, nExpert: s.nExpert, nTokens, nUsed: 2 });
        const seen: CallCounts[] = [];
        const out = await rt.compute(c.rows, c.ids, c.probs, nTokens, 2, { regime, onCounts: (k) => seen.push(k) });
        assert.equal(seen.length, 1, `${numerics} ${regime}: counted once`);
        const k = seen[0] as CallCounts;
        assert.equal(k.submits, 1, `${numerics} ${regime}: one submit`);
        assert.equal(k.readbacks, 1, `${numerics} ${regime}: one readback`);
        // up (gate and up fused), down, combine; llama numerics rounds the rows and h first: two more.
        const most = numerics === 'llama' ? 5 : 3;
        assert.ok(k.dispatches >= 3 && k.dispatches <= most, `${numerics} ${regime}: ${k.dispatches} dispatches, at most ${most}`);
        assert.deepEqual(out, await rt.compute(c.rows, c.ids, c.probs, nTokens, 2, { regime }), 'counting changes nothing');
      }
      rt.dispose();
    }
  } finally {
    device.destroy();
  }
});
