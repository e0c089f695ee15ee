/**
 * ExpertEngine's start-up choice, with stand-in backends on a fake clock: which backend wins, what the report says,
 * that the loser is disposed, and how build or compute failures are reported; and the policy itself (chooseBackend)
 * as a table. (Real backends, both in one browser page, are exercised by test/integration/kernels-chromium.test.ts.)
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { chooseBackend, type BackendMeasurements } from '../../shaders/backend-choice.ts';
import { ExpertEngine, type EngineBackend, type ExpertEngineOptions } from '../../shaders/engine.ts';
import { ExpertRuntimeError } from '../../shaders/errors.ts';
import type { ExpertSlice } from '../../shaders/runtime.ts';

const slice: ExpertSlice = {
  nEmbd: 64,
  ff: 32,
  nExpert: 4,
  types: { gate: GGMLType.F32, up: GGMLType.F32, down: GGMLType.F32 },
  gate: new Uint8Array(4 * 64 * 32 * 4),
  up: new Uint8Array(4 * 64 * 32 * 4),
  down: new Uint8Array(4 * 64 * 32 * 4),
};

/** A backend whose every call takes `ms` on the shared fake clock and returns rows filled with `tag`. */
function fake(clock: { t: number }, ms: number, tag: number, failCompute = false): EngineBackend & { disposed: number; calls: number } {
  return {
    disposed: 0,
    calls: 0,
    async compute(_rows, _ids, _probs, nTokens) {
      this.calls++;
      clock.t += ms;
      if (failCompute) throw new Error(`backend ${tag} cannot compute`);
      return new Float32Array(nTokens * slice.nEmbd).fill(tag);
    },
    dispose() {
      this.disposed++;
    },
  };
}

function setup(gpuMs: number, wasmMs: number, isFallbackAdapter: boolean) {
  const clock = { t: 0 };
  const gpu = fake(clock, gpuMs, 1);
  const wasm = fake(clock, wasmMs, 2);
  const options: ExpertEngineOptions = {
    webgpu: async () => ({ runtime: gpu, isFallbackAdapter }),
    wasm: async () => wasm,
    now: () => clock.t,
    warmup: 1,
    iterations: 3,
  };
  return { gpu, wasm, options };
}

const rows = new Float32Array(64);
const ids = Int32Array.of(0, 1);
const probs = Float32Array.of(0.5, 0.5);

test('the faster backend wins, the other is disposed, and the report gives both measurements', async () => {
  const cases: [string, number, number, boolean, 'webgpu' | 'wasm', RegExp][] = [
    ['a GPU three times faster', 1, 3, false, 'webgpu', /WebGPU is faster/],
    [
      'a software adapter slower than wasm',
      40,
      1,
      true,
      'wasm',
      /never wins while wasm works \(slower\): fallback \(software\) WebGPU adapter/,
    ],
    ['a software adapter 3× slower than wasm', 3, 1, true, 'wasm', /never wins while wasm works/],
    ['a software adapter measured faster than wasm', 1, 3, true, 'wasm', /never wins while wasm works \(though measured faster\)/],
    ['wasm faster than a real GPU adapter (an integrated GPU, a small slice)', 3, 1, false, 'wasm', /wasm is faster: WebGPU adapter/],
    ['a tie on a real GPU', 2, 2, false, 'webgpu', /a tie goes to the GPU/],
    ['a tie on a software adapter', 2, 2, true, 'wasm', /never wins while wasm works \(at a tie\)/],
  ];
  for (const [what, gpuMs, wasmMs, fallback, winner, reason] of cases) {
    const { gpu, wasm, options } = setup(gpuMs, wasmMs, fallback);
    const engine = await ExpertEngine.start(slice, options);
    assert.equal(engine.backend, winner, what);
    assert.match(engine.report.reason, reason, what);
    assert.deepEqual(engine.report.call, { nEmbd: 64, ff: 32, nExpert: 4, nTokens: 1, nUsed: 2 });
    assert.deepEqual(engine.report.batchCall, { nEmbd: 64, ff: 32, nExpert: 4, nTokens: 8, nUsed: 2 });
    // A decode call and a batch call (each `ms` on the fake clock): 2 · 3 · 64 · 32 flops per pair, 2 + 16 pairs.
    const g = engine.report.measured.webgpu!;
    assert.deepEqual([g.decodeMs, g.batchMs, g.msMedian], [gpuMs, gpuMs, 2 * gpuMs], what);
    assert.equal(g.gflops, (2 * 3 * 64 * 32 * 18) / (2 * gpuMs * 1e6));
    assert.equal(g.isFallbackAdapter, fallback);
    assert.equal(engine.report.measured.wasm?.msMedian, 2 * wasmMs, what);
    assert.deepEqual(engine.report.errors, {});
    // Per call and round: one warm-up, then three samples, each as many calls as fill the 2 ms minimum; two rounds
    // unless a software adapter sat beside a working wasm (it cannot win: one round).
    const rounds = fallback ? 1 : 2;
    assert.equal(gpu.calls, rounds * 2 * (1 + 3 * Math.ceil(2 / gpuMs)), `${what}: calls made while timing`);
    const [kept, dropped] = winner === 'webgpu' ? [gpu, wasm] : [wasm, gpu];
    assert.equal(dropped.disposed, 1, `${what}: the loser is disposed`);
    assert.equal(kept.disposed, 0);
    assert.equal((await engine.compute(rows, ids, probs, 1, 2))[0], winner === 'webgpu' ? 1 : 2);
    await engine.dispose();
    await engine.dispose();
    assert.equal(kept.disposed, 1, 'dispose() once, however often called');
    await assert.rejects(engine.compute(rows, ids, probs, 1, 2), (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'DISPOSED');
  }
});

test('a backend that fails to build or to compute is reported and the other one serves', async () => {
  const clock = { t: 0 };
  const wasm = fake(clock, 5, 2);
  const noGpu = await ExpertEngine.start(slice, {
    webgpu: async () => {
      throw new Error('requestAdapter() returned null');
    },
    wasm: async () => wasm,
    now: () => clock.t,
  });
  assert.equal(noGpu.backend, 'wasm');
  assert.match(noGpu.report.reason, /only wasm was measured/);
  assert.deepEqual(noGpu.report.errors, { webgpu: 'requestAdapter() returned null' });

  const broken = fake(clock, 1, 2, true);
  const gpu = fake(clock, 9, 1);
  const engine = await ExpertEngine.start(slice, {
    webgpu: async () => ({ runtime: gpu, isFallbackAdapter: false }),
    wasm: async () => broken,
    now: () => clock.t,
  });
  assert.equal(engine.backend, 'webgpu');
  assert.deepEqual(engine.report.errors, { wasm: 'backend 2 cannot compute' });
  assert.equal(broken.disposed, 1, 'a backend that failed is disposed');

  const onlyWasm = await ExpertEngine.start(slice, { wasm: async () => fake(clock, 1, 2), now: () => clock.t });
  assert.equal(onlyWasm.report.errors.webgpu, 'not offered (no WebGPU on this machine)');
});

test('a clock coarser than a call still measures it; a stopped clock counts as no measurement', async () => {
  // The GPU takes 0.1 ms a call, the clock ticks 1 ms every 10 calls (browsers round performance.now()); wasm 0.5 ms.
  const clock = { t: 0 };
  let gpuCalls = 0;
  const gpu: EngineBackend = {
    async compute(_r, _i, _p, nTokens) {
      if (++gpuCalls % 10 === 0) clock.t += 1;
      return new Float32Array(nTokens * slice.nEmbd);
    },
    dispose() {},
  };
  let wasmCalls = 0;
  const wasm: EngineBackend = {
    async compute(_r, _i, _p, nTokens) {
      if (++wasmCalls % 2 === 0) clock.t += 1;
      return new Float32Array(nTokens * slice.nEmbd);
    },
    dispose() {},
  };
  const engine = await ExpertEngine.start(slice, {
    webgpu: async () => ({ runtime: gpu, isFallbackAdapter: false }),
    wasm: async () => wasm,
    now: () => clock.t,
  });
  assert.equal(engine.backend, 'webgpu');
  assert.ok(Math.abs(engine.report.measured.webgpu!.decodeMs - 0.1) < 0.02, `${engine.report.measured.webgpu!.decodeMs}`);
  assert.ok(Math.abs(engine.report.measured.wasm!.decodeMs - 0.5) < 0.1, `${engine.report.measured.wasm!.decodeMs}`);
  // A backend whose calls never move the clock is not measured: the other one serves.
  const frozen = fake({ t: 0 }, 0, 1);
  const c2 = { t: 0 };
  const other = await ExpertEngine.start(slice, {
    webgpu: async () => ({ runtime: frozen, isFallbackAdapter: false }),
    wasm: async () => fake(c2, 3, 2),
    now: () => c2.t,
  });
  assert.equal(other.backend, 'wasm');
  assert.match(other.report.errors.webgpu ?? '', /clock did not advance/);
  assert.equal(frozen.disposed, 1);
  await assert.rejects(
    ExpertEngine.start(slice, { wasm: async () => wasm, iterations: 0 }),
    (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'BAD_OPTION',
  );
});

test('no working backend: NO_BACKEND with every reason', async () => {
  await assert.rejects(
    ExpertEngine.start(slice, {}),
    (e: unknown) =>
      e instanceof ExpertRuntimeError &&
      e.code === 'NO_BACKEND' &&
      /webgpu: not offered/.test(e.message) &&
      /wasm: not offered/.test(e.message),
  );
  const clock = { t: 0 };
  await assert.rejects(
    ExpertEngine.start(slice, {
      webgpu: async () => ({ runtime: fake(clock, 1, 1, true), isFallbackAdapter: false }),
      wasm: async () => {
        throw new Error('no wasm');
      },
    }),
    (e: unknown) => {
      assert.ok(e instanceof ExpertRuntimeError && e.code === 'NO_BACKEND');
      assert.deepEqual(e.details, { errors: { webgpu: 'backend 1 cannot compute', wasm: 'no wasm' } });
      return true;
    },
  );
});

test('timing: a slow first round does not decide; the batch call counts as well as decode', async () => {
  // A GPU whose first round is 20× slow (shader compilation, another process), then 1 ms a call; wasm 2 ms. Timed
  // once, wasm would win; the second, interleaved round gives each call its best median.
  const clock = { t: 0 };
  let gpuCalls = 0;
  const gpu: EngineBackend & { disposed?: number } = {
    async compute() {
      clock.t += ++gpuCalls <= 8 ? 20 : 1; // round 1: warm-up + 3 samples, decode and batch
      return new Float32Array(slice.nEmbd);
    },
    dispose() {},
  };
  const engine = await ExpertEngine.start(slice, {
    webgpu: async () => ({ runtime: gpu, isFallbackAdapter: false }),
    wasm: async () => fake(clock, 2, 2),
    now: () => clock.t,
  });
  assert.equal(engine.backend, 'webgpu', engine.report.reason);
  assert.equal(engine.report.measured.webgpu?.decodeMs, 1);

  // Faster at decode, much slower at a batch (a software adapter's per-token cost): the batch decides.
  const c2 = { t: 0 };
  const batchSlow: EngineBackend = {
    async compute(_r, _i, _p, nTokens) {
      c2.t += nTokens === 1 ? 1 : 30;
      return new Float32Array(nTokens * slice.nEmbd);
    },
    dispose() {},
  };
  const e2 = await ExpertEngine.start(slice, {
    webgpu: async () => ({ runtime: batchSlow, isFallbackAdapter: true }),
    wasm: async () => fake(c2, 3, 2),
    now: () => c2.t,
  });
  assert.equal(e2.backend, 'wasm', e2.report.reason);
  assert.deepEqual([e2.report.measured.webgpu?.decodeMs, e2.report.measured.webgpu?.batchMs], [1, 30]);
  await assert.rejects(
    ExpertEngine.start(slice, { wasm: async () => fake(c2, 1, 2), rounds: 0 }),
    (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'BAD_OPTION',
  );
});

test('chooseBackend: the faster wins; a fallback adapter only where wasm was not measured', () => {
  const table: [BackendMeasurements, 'webgpu' | 'wasm'][] = [
    [{ webgpu: { gflops: 50, isFallbackAdapter: false }, wasm: { gflops: 5 } }, 'webgpu'],
    [{ webgpu: { gflops: 2, isFallbackAdapter: false }, wasm: { gflops: 5 } }, 'wasm'],
    [{ webgpu: { gflops: 5, isFallbackAdapter: false }, wasm: { gflops: 5 } }, 'webgpu'],
    [{ webgpu: { gflops: 5, isFallbackAdapter: true }, wasm: { gflops: 5 } }, 'wasm'],
    [{ webgpu: { gflops: 1, isFallbackAdapter: true }, wasm: { gflops: 5 } }, 'wasm'],
    [{ webgpu: { gflops: 9, isFallbackAdapter: true }, wasm: { gflops: 5 } }, 'wasm'],
    [{ webgpu: { gflops: 9, isFallbackAdapter: true }, wasm: { gflops: NaN } }, 'webgpu'],
    [{ webgpu: { gflops: 1, isFallbackAdapter: true } }, 'webgpu'],
    [{ wasm: { gflops: 1 } }, 'wasm'],
    [{ webgpu: { gflops: NaN, isFallbackAdapter: false }, wasm: { gflops: 1 } }, 'wasm'],
    [{ webgpu: { gflops: 3, isFallbackAdapter: false }, wasm: { gflops: 0 } }, 'webgpu'],
  ];
  for (const [m, want] of table) {
    const got = chooseBackend(m);
    assert.equal(got.backend, want, `${JSON.stringify(m)}: ${got.reason}`);
    assert.ok(got.reason.length > 0);
  }
  assert.throws(() => chooseBackend({}), RangeError);
  assert.throws(() => chooseBackend({ wasm: { gflops: -1 } }), RangeError);
});
