/**
 * llama numerics' int8 kernels (expert_up_q8, expert_down_q8) × every 8-bit-activation quant × reduction variant ×
 * integer-dot form, and the rounding kernel's entry points, build a compute pipeline on Dawn's Null backend (npm
 * `webgpu`, `backend=null`: Tint's full WGSL validation and the pipeline checks, nothing executed), as
 * test/unit/kernels-compile.test.ts does for the float kernels. Their numbers are tested on SwiftShader in
 * kernels.test.ts and in Chromium. Also: the packed form declares the language feature it needs, and the pure
 * helpers the int8 snippets rely on (bytes_minus) do what their comments say.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ExpertFfnKernels,
  INT8_SNIPPETS,
  PACKED_DOT_LANGUAGE_FEATURE,
  moduleSource,
  type Int8Dot,
  type KernelTuning,
  type KernelVariant,
  type PipelineKey,
} from '../../shaders/expert-ffn.ts';
import { roundKernels, type RoundMode } from '../../shaders/round-activations.ts';
import { nullDevice } from '../../harness/dawn-null.ts';

let gpu: GPU;
let device: GPUDevice;

before(async () => {
  ({ gpu, device } = await nullDevice('kernels-int8-compile null device', ['subgroups']));
  assert.ok(gpu.wgslLanguageFeatures.has(PACKED_DOT_LANGUAGE_FEATURE), `Dawn lacks ${PACKED_DOT_LANGUAGE_FEATURE}`);
});

after(() => device?.destroy());

const tuning: KernelTuning = { workgroupSize: 64, rowsPerWorkgroup: 4, tileRows: 16, tileCols: 32 };

test('every int8 kernel, quant, reduction variant and dot form builds a pipeline; so does every rounding mode', {
  timeout: 300_000,
}, async () => {
  const kernels = new ExpertFfnKernels(device);
  const keys: PipelineKey[] = [];
  for (const quant of INT8_SNIPPETS.values()) {
    for (const variant of ['base', 'subgroups'] as KernelVariant[]) {
      for (const dot of ['packed', 'unpacked'] as Int8Dot[]) {
        for (const pass of ['fused', 'gate', 'up'] as const) keys.push({ kernel: 'expert_up_q8', quant, pass, tuning, variant, dot });
        keys.push({ kernel: 'expert_down_q8', quant, tuning, variant, dot });
      }
    }
  }
  const failures: string[] = [];
  for (const key of keys) await kernels.pipeline(key).catch((e: unknown) => failures.push(String(e)));
  const round = roundKernels(device);
  const modes: [RoundMode, boolean][] = [
    ['f32', false],
    ['f16', false],
    ['bf16', false],
    ['q8_0', false],
    ['q8_k', false],
    ['q8_0', true],
    ['q8_k', true],
  ];
  for (const [mode, packed] of modes) await round.pipeline(mode, packed).catch((e: unknown) => failures.push(String(e)));
  assert.deepEqual(failures, []);
  assert.equal(keys.length, INT8_SNIPPETS.size * 2 * 2 * 4);
  await assert.rejects(round.pipeline('f16', true), RangeError, 'no packed output for f16');
});

test('the packed form requires the language feature; the unpacked form uses no packed builtin', () => {
  const packed = moduleSource('expert_down_q8', 'q4_k', 'base', 'packed');
  const unpacked = moduleSource('expert_down_q8', 'q4_k', 'subgroups', 'unpacked');
  const code = (src: string): string => src.replace(/\/\/.*$/gm, ''); // comments may name the builtins
  assert.match(packed, new RegExp(`^requires ${PACKED_DOT_LANGUAGE_FEATURE};`));
  assert.match(packed, /dot4I8Packed/);
  assert.doesNotMatch(code(unpacked), /requires|dot4I8Packed|unpack4xI8|pack4xI8/);
  assert.match(code(packed), /dot4I8Packed\(/);
  assert.match(unpacked, /^enable subgroups;/);
  assert.throws(() => moduleSource('expert_up_q8', 'f16', 'base'), /no integer block dot for f16/);
});

test('bytes_minus: per byte q − bias as int8, no borrow between bytes (a WGSL transcription, checked in JS)', () => {
  // weights.wgsl: ((q | 0x80808080) - bias) ^ 0x80808080 for bytes q, bias < 128.
  const bytesMinus = (q: number, bias: number): number => ((((q | 0x80808080) >>> 0) - bias) ^ 0x80808080) >>> 0;
  const int8 = (w: number, k: number): number => ((w >>> (8 * k)) << 24) >> 24;
  for (const [max, bias] of [
    [15, 8],
    [63, 32],
  ] as const) {
    for (let a = 0; a <= max; a++) {
      for (const b of [0, 1, max >> 1, max]) {
        const q = (a | (b << 8) | (max << 16) | (0 << 24)) >>> 0;
        const r = bytesMinus(q, bias * 0x01010101);
        assert.deepEqual([int8(r, 0), int8(r, 1), int8(r, 2), int8(r, 3)], [a - bias, b - bias, max - bias, -bias], `q ${q.toString(16)}`);
      }
    }
  }
});
