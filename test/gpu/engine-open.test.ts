/**
 * openEngine's choice beside a software (fallback) adapter, on Dawn's SwiftShader in Node: with the default choice
 * (`auto`) and a wasm kernel that fits, the adapter is not built (it never wins while wasm works, and its start-up
 * costs seconds); if wasm then fails, the adapter is built after all and serves, rather than the volunteer having no
 * backend. A real slice of a generated model, a real device; the adapter is marked software here as SwiftShader is in
 * a browser.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openFileSource } from '../../gguf/node-io.ts';
import { readGGUF } from '../../gguf/reader.ts';
import { planExpertSlice, writeExpertSlice } from '../../gguf/expert-slice.ts';
import { memorySink } from '../../gguf/writer.ts';
import { testModel } from '../../harness/models.ts';
import { nodeGpu } from '../../harness/node-gpu.ts';
import { QWEN_Q4K } from '../../harness/swarm.ts';
import { nodeExpertKernel } from '../../shaders/wasm/build.ts';
import { openEngine, type ComputeEnvironment } from '../../volunteer/engine-open.ts';
import type { ExpertDevice } from '../../shaders/device.ts';

const gpu = await nodeGpu();

async function sliceBytes(): Promise<Uint8Array> {
  const m = await testModel(QWEN_Q4K);
  const src = await openFileSource(m.path);
  try {
    const plan = planExpertSlice(await readGGUF(src), 1, 0, 4);
    const sink = memorySink();
    await writeExpertSlice(src, plan, sink);
    return sink.bytes();
  } finally {
    await src.close();
  }
}

async function softwareDevice(): Promise<ExpertDevice> {
  const adapter = await gpu.requestAdapter();
  if (!adapter) throw new Error(`requestAdapter() returned null (VK_ICD_FILENAMES=${process.env.VK_ICD_FILENAMES})`);
  return { adapter, device: await adapter.requestDevice(), isFallbackAdapter: true };
}

/** A module that compiles but is no expert kernel: the wasm fallback fails to start on it. */
const notAKernel = (): WebAssembly.Module => new WebAssembly.Module(Uint8Array.of(0, 0x61, 0x73, 0x6d, 1, 0, 0, 0));

test('beside a software adapter: wasm serves and the adapter is not built; if wasm fails, the adapter serves', async () => {
  const bytes = await sliceBytes();
  const device = await softwareDevice();
  try {
    const env = (wasmKernel: WebAssembly.Module): ComputeEnvironment => ({ gpu, ort: null, wasmKernel, backend: 'auto' });
    const budget = 64 * 2 ** 20;

    const works = await openEngine(bytes, 'llama', env(await nodeExpertKernel()), device, budget);
    assert.equal(works.engine.backend, 'wasm', works.engine.report.reason);
    assert.match(works.engine.report.errors.webgpu ?? '', /built only if wasm fails/);
    assert.equal(works.engine.report.measured.webgpu, undefined, 'the software adapter was not timed');
    await works.engine.dispose();

    const fails = await openEngine(bytes, 'llama', env(notAKernel()), device, budget);
    assert.equal(fails.engine.backend, 'webgpu', fails.engine.report.reason);
    assert.ok(fails.engine.report.measured.webgpu, 'the adapter was built and timed');
    const out = await fails.engine.compute(new Float32Array(256).fill(0.5), Int32Array.of(0, 3), Float32Array.of(0.5, 0.5), 1, 2);
    assert.equal(out.length, 256);
    assert.ok(out.every(Number.isFinite));
    await fails.engine.dispose();
  } finally {
    device.device.destroy();
  }
});
