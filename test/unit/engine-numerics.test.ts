/**
 * ExpertEngine's numerics: the option reaches both backend factories, the report says it, a bad value is refused,
 * and a backend that reports other numerics than the engine asked for is left out (stand-in backends, fake clock;
 * the real ExpertRuntime reports its numerics, see test/gpu/kernels.test.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import type { Numerics } from '../../protocol/numerics.ts';
import { ExpertEngine, type BackendOptions, type EngineBackend } from '../../shaders/engine.ts';
import { ExpertRuntimeError } from '../../shaders/errors.ts';
import type { ExpertSlice } from '../../shaders/runtime.ts';

const slice: ExpertSlice = {
  nEmbd: 64,
  ff: 32,
  nExpert: 4,
  types: { gate: GGMLType.Q8_0, up: GGMLType.Q8_0, down: GGMLType.Q8_0 },
  gate: new Uint8Array(4 * 32 * 68),
  up: new Uint8Array(4 * 32 * 68),
  down: new Uint8Array(4 * 64 * 34),
};

/** A backend built with `numerics` (reported when `reports`), whose calls take `ms` on the shared clock. */
function fake(clock: { t: number }, ms: number, numerics: Numerics | undefined): EngineBackend & { disposed: number } {
  return {
    disposed: 0,
    ...(numerics ? { numerics } : {}),
    async compute(_rows, _ids, _probs, nTokens) {
      clock.t += ms;
      return new Float32Array(nTokens * slice.nEmbd);
    },
    dispose() {
      this.disposed++;
    },
  };
}

test('numerics reaches both factories and the report; default exact', async () => {
  for (const numerics of [undefined, 'exact', 'llama'] as const) {
    const clock = { t: 0 };
    const seen: Record<string, BackendOptions> = {};
    const engine = await ExpertEngine.start(slice, {
      ...(numerics ? { numerics } : {}),
      webgpu: async (_s, o) => {
        seen.webgpu = o;
        return { runtime: fake(clock, 2, o.numerics), isFallbackAdapter: false };
      },
      wasm: async (_s, o) => {
        seen.wasm = o;
        return fake(clock, 1, undefined); // a backend that does not say: taken at its word
      },
      now: () => clock.t,
    });
    const want = numerics ?? 'exact';
    assert.deepEqual(seen, { webgpu: { numerics: want }, wasm: { numerics: want } });
    assert.equal(engine.report.numerics, want);
    assert.deepEqual(engine.report.errors, {});
    await engine.dispose();
  }
});

test('a backend built with other numerics is left out, with the reason; a bad numerics value is refused', async () => {
  const clock = { t: 0 };
  const gpu = fake(clock, 1, 'exact'); // faster, but ignores the numerics it was given
  const wasm = fake(clock, 5, 'llama');
  const engine = await ExpertEngine.start(slice, {
    numerics: 'llama',
    webgpu: async () => ({ runtime: gpu, isFallbackAdapter: false }),
    wasm: async () => wasm,
    now: () => clock.t,
  });
  assert.equal(engine.backend, 'wasm');
  assert.match(engine.report.errors.webgpu ?? '', /built with 'exact' numerics, not the 'llama' asked for/);
  assert.equal(gpu.disposed, 1);
  await engine.dispose();
  await assert.rejects(
    ExpertEngine.start(slice, { numerics: 'fast' as Numerics, wasm: async () => fake(clock, 1, undefined) }),
    (e: unknown) => e instanceof ExpertRuntimeError && e.code === 'BAD_OPTION' && (e.details as { option: string }).option === 'numerics',
  );
});
