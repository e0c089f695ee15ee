/**
 * What a volunteer announces it computes (volunteer/engine-open.ts computedVariants, the `variants` of its hello and of
 * its DeviceReport): the expert FFN variant features every backend it may serve with computes, since which backend
 * serves is measured only once a slice is assigned. WebGPU and the wasm kernel compute every variant; the onnxruntime
 * fallback silu only, so a client that may fall back to it must not claim more.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { VariantFeature } from '../../protocol/variant.ts';
import type { OrtModuleLike } from '../../shaders/ort/fallback.ts';
import { computedVariants, probeDevice, type BackendChoice, type ComputeEnvironment } from '../../volunteer/engine-open.ts';

/** What WebGPU and the wasm kernel compute. */
const ALL: VariantFeature[] = ['silu', 'swiglu_oai', 'swiglu_clamp', 'silu_limit', 'gelu', 'bias', 'scale'];
const SILU: VariantFeature[] = ['silu'];

/** Stand-ins: computedVariants only asks whether each is there. */
const KERNEL = {} as WebAssembly.Module;
const ORT = {} as OrtModuleLike;

/** [device, backend choice, wasm kernel, onnxruntime] → the features announced, and why. */
const TABLE: [boolean, BackendChoice, boolean, boolean, VariantFeature[], string][] = [
  [true, 'auto', true, true, ALL, 'WebGPU and the kernel (the kernel is the fallback, ORT unused)'],
  [true, 'auto', true, false, ALL, 'WebGPU and the kernel'],
  [true, 'auto', false, true, SILU, 'ORT may serve if measured faster'],
  [true, 'auto', false, false, ALL, 'only WebGPU'],
  [true, 'webgpu', true, true, ALL, 'only WebGPU, by choice'],
  [true, 'webgpu', true, false, ALL, 'only WebGPU, by choice'],
  [true, 'webgpu', false, true, ALL, 'only WebGPU, by choice: ORT never serves'],
  [true, 'webgpu', false, false, ALL, 'only WebGPU, by choice'],
  [true, 'wasm', true, true, ALL, 'only the kernel, by choice'],
  [true, 'wasm', true, false, ALL, 'only the kernel, by choice'],
  [true, 'wasm', false, true, SILU, 'only ORT, by choice'],
  [true, 'wasm', false, false, SILU, 'nothing computes: the default a silent hello means'],
  [false, 'auto', true, true, ALL, 'only the kernel'],
  [false, 'auto', true, false, ALL, 'only the kernel'],
  [false, 'auto', false, true, SILU, 'only ORT'],
  [false, 'auto', false, false, SILU, 'nothing computes'],
  [false, 'webgpu', true, true, SILU, 'WebGPU chosen but absent: nothing computes'],
  [false, 'webgpu', true, false, SILU, 'nothing computes'],
  [false, 'webgpu', false, true, SILU, 'nothing computes'],
  [false, 'webgpu', false, false, SILU, 'nothing computes'],
  [false, 'wasm', true, true, ALL, 'only the kernel'],
  [false, 'wasm', true, false, ALL, 'only the kernel'],
  [false, 'wasm', false, true, SILU, 'only ORT'],
  [false, 'wasm', false, false, SILU, 'nothing computes'],
];

const env = (backend: BackendChoice, kernel: boolean, ort: boolean): Pick<ComputeEnvironment, 'backend' | 'wasmKernel' | 'ort'> => ({
  backend,
  wasmKernel: kernel ? KERNEL : null,
  ort: ort ? ORT : null,
});

test('computedVariants: device × backend choice × wasm kernel × onnxruntime', () => {
  assert.equal(TABLE.length, 2 * 3 * 2 * 2, 'every combination once');
  for (const [device, backend, kernel, ort, expected, why] of TABLE) {
    const name = `device ${device ? 'yes' : 'no'}, ${backend}, kernel ${kernel ? 'yes' : 'no'}, ort ${ort ? 'yes' : 'no'} (${why})`;
    assert.deepEqual(computedVariants(env(backend, kernel, ort), device), expected, name);
  }
});

test('a client that may serve with the onnxruntime fallback never claims swiglu_oai or bias', () => {
  for (const [device, backend, kernel, ort] of TABLE) {
    const mayServeWithOrt = ort && !kernel && backend !== 'webgpu';
    if (!mayServeWithOrt) continue;
    const got = computedVariants(env(backend, kernel, ort), device);
    assert.deepEqual(got, SILU, `device ${device}, ${backend}: ${got.join(', ')}`);
  }
});

test('probeDevice reports what the hello announces', async () => {
  const cases: [ComputeEnvironment, VariantFeature[]][] = [
    [{ gpu: null, ort: null, wasmKernel: KERNEL, backend: 'wasm' }, ALL],
    [{ gpu: null, ort: ORT, wasmKernel: null, backend: 'auto' }, SILU],
  ];
  for (const [e, expected] of cases) {
    const { report, device } = await probeDevice(e, 64 * 2 ** 20);
    assert.equal(device, null);
    assert.deepEqual(report.variants, expected, e.backend);
    assert.deepEqual(report.variants, computedVariants(e, false));
  }
});
