/**
 * The volunteer page's sentences and button rules (web/src/volunteer/page-model.ts), for every state of the client:
 * pure functions, no browser. The page itself is walked through the same states in headless Chromium
 * (test/integration/volunteer-page.test.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  actionsFor,
  BUDGET_MIB,
  budgetBytes,
  clampBudgetMiB,
  describeDevice,
  describeSlice,
  describeState,
  describeVariants,
  downloadPercent,
  failureHint,
  formatBytes,
  formatLatency,
  formatRate,
  retrySecondsLeft,
} from '../../web/src/volunteer/page-model.ts';
import type { VariantFeature } from '../../protocol/variant.ts';
import type { OrtModuleLike } from '../../shaders/ort/fallback.ts';
import { computedVariants } from '../../volunteer/engine-open.ts';
import type { DeviceReport, SliceAssignment, VolunteerState, VolunteerStateKind } from '../../volunteer/state.ts';

const MIB = 1024 * 1024;
const slice: SliceAssignment = { model: 'demo', layer: 3, experts: [0, 64], bytes: 48 * MIB, digest: 'sha256:00' };

/** One state of every kind, with the words its headline must carry. */
const STATES: [VolunteerState, RegExp][] = [
  [{ kind: 'idle' }, /^Not joined yet$/],
  [{ kind: 'connecting', attempt: 1 }, /^Connecting to the hub/],
  [{ kind: 'retrying', inSeconds: 4, reason: 'connection refused', attempt: 2 }, /^Hub unreachable — retrying in 4 s$/],
  [{ kind: 'waiting' }, /^Waiting for demand$/],
  [
    { kind: 'downloading', slice, loadedBytes: 12 * MIB, totalBytes: 48 * MIB, fromCache: false },
    /^Downloading the slice: 12 MiB of 48 MiB \(25%\)$/,
  ],
  [{ kind: 'starting', slice }, /^Starting the compute engine$/],
  [{ kind: 'serving', slice, backend: 'webgpu' }, /^Serving with WebGPU$/],
  [{ kind: 'paused', slice }, /^Paused$/],
  [{ kind: 'released', slice, reason: 'demand fell' }, /^Slice released$/],
  [
    { kind: 'failed', code: 'SLICE_DOES_NOT_FIT', message: 'the slice does not fit this device', retrying: false },
    /^This device cannot help: the slice does not fit this device$/,
  ],
  [{ kind: 'left' }, /^You left$/],
];

test('every state kind has a headline, a detail and a spoken announcement', () => {
  const kinds = new Set<VolunteerStateKind>(STATES.map(([s]) => s.kind));
  assert.equal(kinds.size, 11, 'the table covers all eleven kinds of VolunteerState');
  for (const [s, title] of STATES) {
    const m = describeState(s);
    assert.match(m.title, title, s.kind);
    assert.ok(m.detail.length > 20, `${s.kind} explains itself`);
    assert.ok(m.announce.length > 0 && !/\d+ s\b|%/.test(m.announce), `${s.kind}: the announcement has no running numbers`);
  }
});

test('a slice taken from the cache says so while the engine starts and while serving (nothing was downloaded)', () => {
  const cached = { ...slice, fromCache: true };
  assert.match(describeState({ kind: 'starting', slice: cached }).detail, /from this browser’s cache: nothing downloaded/);
  assert.match(describeState({ kind: 'serving', slice: cached, backend: 'wasm' }).detail, /from this browser’s cache/);
  assert.doesNotMatch(describeState({ kind: 'starting', slice: { ...slice, fromCache: false } }).detail, /cache/);
  assert.doesNotMatch(describeState({ kind: 'serving', slice, backend: 'webgpu' }).detail, /cache/);
});

test('the retry countdown counts down and stops at 0', () => {
  const s: VolunteerState = { kind: 'retrying', inSeconds: 5, reason: 'connection refused', attempt: 3 };
  assert.equal(retrySecondsLeft(5, 1000, 1000), 5);
  assert.equal(retrySecondsLeft(5, 1000, 1001), 5, 'rounded up: 4.999 s left still reads 5');
  assert.equal(retrySecondsLeft(5, 1000, 2000), 4);
  assert.equal(retrySecondsLeft(5, 1000, 5500), 1);
  assert.equal(retrySecondsLeft(5, 1000, 6000), 0);
  assert.equal(retrySecondsLeft(5, 1000, 60_000), 0);
  assert.equal(retrySecondsLeft(5, 1000, 0), 5, 'a clock that steps back does not add time');
  const m = describeState(s, { secondsLeft: 2 });
  assert.equal(m.title, 'Hub unreachable — retrying in 2 s');
  assert.match(m.detail, /connection refused \(attempt 3\)/);
});

test('downloads: progress, cache, unknown size', () => {
  assert.equal(downloadPercent(0, 100), 0);
  assert.equal(downloadPercent(99.9, 100), 99);
  assert.equal(downloadPercent(150, 100), 100);
  assert.equal(downloadPercent(10, 0), null);
  const cached = describeState({ kind: 'downloading', slice, loadedBytes: 48 * MIB, totalBytes: 48 * MIB, fromCache: true });
  assert.match(cached.title, /^Loading the slice from this browser’s cache: 48 MiB of 48 MiB \(100%\)$/);
  assert.match(cached.detail, /no bandwidth/);
  const unknown = describeState({ kind: 'downloading', slice, loadedBytes: 3 * MIB, totalBytes: 0, fromCache: false });
  assert.equal(unknown.title, 'Downloading the slice: 3 MiB');
});

test('slices are described with [begin, end) shown inclusively', () => {
  assert.equal(describeSlice(slice), 'experts 0–63 of layer 3 (64 experts, model demo)');
  assert.equal(describeSlice({ ...slice, experts: [7, 8] }), 'expert 7 of layer 3 (1 expert, model demo)');
});

const device = (over: Partial<DeviceReport>): DeviceReport => ({
  webgpu: true,
  adapter: { vendor: 'google', architecture: 'swiftshader', description: 'SwiftShader', isFallbackAdapter: true },
  limits: { maxStorageBufferBindingSize: 128 * MIB, maxBufferSize: 256 * MIB },
  features: ['shader-f16', 'subgroups'],
  memoryBudgetBytes: 512 * MIB,
  backend: 'webgpu',
  backendReason: 'WebGPU is faster: 3.10 vs 0.800 GFLOP/s',
  gflops: 3.1,
  variants: ['silu', 'swiglu_oai', 'bias'],
  ...over,
});

test('serving with wasm says why when the browser has no WebGPU', () => {
  const noGpu = device({ webgpu: false, adapter: null, limits: null, features: [], backend: 'wasm', backendReason: 'no WebGPU' });
  const m = describeState({ kind: 'serving', slice, backend: 'wasm' }, { device: noGpu });
  assert.equal(m.title, 'Serving with WebAssembly (wasm)');
  assert.match(m.detail, /^No WebGPU in this browser/);
  const chosen = describeState({ kind: 'serving', slice, backend: 'wasm' }, { device: device({ backend: 'wasm' }) });
  assert.doesNotMatch(chosen.detail, /No WebGPU/, 'wasm chosen because faster is not "no WebGPU"');
});

test('failures: a hint per stable code, retrying ones say so', () => {
  const fit = describeState({ kind: 'failed', code: 'SLICE_DOES_NOT_FIT', message: 'needs 700 MiB', retrying: false });
  assert.equal(fit.tone, 'bad');
  assert.match(fit.detail, /raise the budget.*\(code SLICE_DOES_NOT_FIT\)$/);
  assert.match(failureHint('NO_BACKEND'), /Neither WebGPU nor WebAssembly/);
  assert.equal(failureHint('SOMETHING_NEW'), 'Leave and join again to retry.');
  const again = describeState({ kind: 'failed', code: 'SHARD_NETWORK', message: 'the slice download failed', retrying: true });
  assert.equal(again.tone, 'warn');
  assert.match(again.title, /trying again$/);
});

test('buttons per state: join only before and after, pause/resume while joined, leave whenever joined', () => {
  const rows: [VolunteerStateKind, string][] = [
    ['idle', 'join budget'],
    ['connecting', 'leave'],
    ['retrying', 'leave'],
    ['waiting', 'pause leave'],
    ['downloading', 'pause leave'],
    ['starting', 'pause leave'],
    ['serving', 'pause leave'],
    ['paused', 'resume leave'],
    ['released', 'pause leave'],
    ['failed', 'leave'],
    ['left', 'join budget'],
  ];
  for (const [kind, expected] of rows) {
    const s = STATES.find(([x]) => x.kind === kind)![0];
    const a = actionsFor(s);
    const on = [a.join && 'join', a.budgetEditable && 'budget', a.pause && 'pause', a.resume && 'resume', a.leave && 'leave'];
    assert.equal(on.filter(Boolean).join(' '), expected, kind);
  }
});

test('the memory budget is held to its range and step, and sent in bytes', () => {
  assert.equal(BUDGET_MIB.initial, 512);
  assert.equal(budgetBytes(512), 512 * MIB);
  assert.equal(clampBudgetMiB(1), BUDGET_MIB.min);
  assert.equal(clampBudgetMiB(1e9), BUDGET_MIB.max);
  assert.equal(clampBudgetMiB(500), 512);
  assert.equal(clampBudgetMiB(Number.NaN), 512);
});

test('numbers for people', () => {
  assert.equal(formatBytes(512 * MIB), '512 MiB');
  assert.equal(formatBytes(12.34 * MIB), '12.3 MiB');
  assert.equal(formatBytes(1536 * MIB), '1.50 GiB');
  assert.equal(formatBytes(900 * 1024), '900 KiB');
  assert.equal(formatBytes(-1), '—');
  assert.equal(formatLatency(null), '—');
  assert.equal(formatLatency(3.25), '3.3 ms');
  assert.equal(formatLatency(42.4), '42 ms');
  assert.equal(formatRate(2.54), '2.5 /s');
  assert.equal(formatRate(1234.4), '1,234 /s');
});

test('the device panel lists the adapter, its limits and the backend with its reason', () => {
  const rows = new Map(describeDevice(device({})));
  assert.equal(rows.get('Adapter'), 'google · swiftshader (SwiftShader)');
  assert.equal(rows.get('Adapter kind'), 'software fallback (no real GPU)');
  assert.equal(rows.get('Largest storage binding'), '128 MiB');
  assert.equal(rows.get('Largest buffer'), '256 MiB');
  assert.equal(rows.get('Backend'), 'WebGPU');
  assert.equal(rows.get('Why'), 'WebGPU is faster: 3.10 vs 0.800 GFLOP/s');
  assert.equal(rows.get('Measured speed'), '3.10 GFLOP/s');
  const none = new Map(
    describeDevice(device({ webgpu: false, adapter: null, limits: null, backend: null, backendReason: '', gflops: null })),
  );
  assert.equal(none.get('WebGPU'), 'not available in this browser');
  assert.equal(none.get('Backend'), 'not chosen yet');
  assert.ok(!none.has('Features') && !none.has('Largest buffer') && !none.has('Measured speed'));
});

test('the device panel lists the expert types this client computes, in words', () => {
  const rows = new Map(describeDevice(device({})));
  assert.equal(rows.get('Expert types'), 'SiLU-gated (most models), SwiGLU-OAI (gpt-oss), expert biases');
  // A client whose only backend is the onnxruntime fallback (no WebGPU, no wasm kernel) computes SiLU only.
  const ort = computedVariants({ backend: 'auto', wasmKernel: null, ort: {} as OrtModuleLike }, false);
  const onlyOrt = new Map(describeDevice(device({ webgpu: false, adapter: null, limits: null, backend: 'wasm', variants: ort })));
  assert.equal(onlyOrt.get('Expert types'), 'SiLU-gated (most models)');
});

test('expert types for people: protocol order, each feature named, none listed is SiLU-gated', () => {
  const rows: [VariantFeature[], string][] = [
    [['silu'], 'SiLU-gated (most models)'],
    [['silu', 'bias'], 'SiLU-gated (most models), expert biases'],
    [['swiglu_oai'], 'SwiGLU-OAI (gpt-oss)'],
    [['bias', 'swiglu_oai', 'silu'], 'SiLU-gated (most models), SwiGLU-OAI (gpt-oss), expert biases'],
    [[], 'SiLU-gated (most models)'],
    [
      ['scale', 'gelu', 'silu_limit', 'swiglu_clamp', 'silu'],
      'SiLU-gated (most models), clamped SwiGLU (DeepSeek-V4), limited SiLU (Step-3.5), GELU-gated (Grok), per-expert scales',
    ],
  ];
  for (const [features, expected] of rows) assert.equal(describeVariants(features), expected, features.join(',') || 'none');
});
