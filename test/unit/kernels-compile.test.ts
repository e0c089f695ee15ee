/**
 * Every kernel × quant type × variant compiles and builds a compute pipeline, including the 'shader-f16' variant that
 * SwiftShader cannot run: on Dawn's Null backend (npm `webgpu`, `backend=null`), which offers every optional feature
 * and runs Tint's full WGSL validation and the pipeline checks, but executes nothing (its results are meaningless, so
 * only building is tested here; the numbers are tested on SwiftShader in kernels.test.ts and in Chromium).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { ExpertFfnKernels, moduleSource, type KernelTuning, type KernelVariant, type PipelineKey } from '../../shaders/expert-ffn.ts';
import type { QuantSnippet } from '../../shaders/wgsl-sources.ts';
import { nullDevice } from '../../harness/dawn-null.ts';

let device: GPUDevice;

before(async () => {
  ({ device } = await nullDevice('kernels-compile null device', ['shader-f16', 'subgroups']));
});

after(() => device?.destroy());

const QUANTS: QuantSnippet[] = [
  'f32',
  'f16',
  'bf16',
  'q8_0',
  'q4_0',
  'q4_k',
  'q5_k',
  'q6_k',
  'mxfp4',
  'iq4_nl',
  'q5_1',
  'q4_1',
  'q2_k',
  'q3_k',
  'q5_0',
  'iq4_xs',
  'iq2_xxs',
  'iq2_xs',
  'iq3_xxs',
  'iq1_s',
  'iq1_m',
];
const tuning: KernelTuning = { workgroupSize: 64, rowsPerWorkgroup: 4, tileRows: 16, tileCols: 32 };

function keys(): PipelineKey[] {
  const out: PipelineKey[] = [];
  for (const quant of QUANTS) {
    for (const variant of ['base', 'subgroups'] as KernelVariant[]) {
      for (const pass of ['fused', 'gate', 'up'] as const) out.push({ kernel: 'expert_up', quant, pass, tuning, variant });
      out.push({ kernel: 'expert_down', quant, tuning, variant });
    }
    for (const variant of ['base', 'shader-f16'] as KernelVariant[]) {
      for (const pass of ['fused', 'gate', 'up'] as const) out.push({ kernel: 'expert_up_batched', quant, pass, tuning, variant });
      out.push({ kernel: 'expert_down_batched', quant, tuning, variant });
    }
  }
  out.push({ kernel: 'expert_combine', tuning, variant: 'base' });
  return out;
}

test('every kernel, quant type and variant builds a pipeline (Tint validation on the Null backend)', { timeout: 300_000 }, async () => {
  const kernels = new ExpertFfnKernels(device);
  const all = keys();
  const failures: string[] = [];
  for (const key of all) await kernels.pipeline(key).catch((e: unknown) => failures.push(String(e)));
  assert.deepEqual(failures, []);
  assert.equal(all.length, QUANTS.length * 16 + 1);
});

test('the check bites: a variant module without its enable directive is rejected with the line', async () => {
  const source = moduleSource('expert_down_batched', 'q4_k', 'shader-f16').replace('enable f16;', '');
  const module = device.createShaderModule({ label: 'broken f16 module', code: source });
  const errors = (await module.getCompilationInfo()).messages.filter((m) => m.type === 'error');
  assert.ok(errors.length > 0, 'f16 used without `enable f16;` must not compile');
  assert.match(errors[0]!.message, /f16/);
});
