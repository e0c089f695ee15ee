/**
 * The full kernel grid, too long for `npm test` (which runs a representative subset of it in
 * test/gpu/kernels.test.ts and test/integration/kernels-chromium.test.ts): every quant type × three shapes up to
 * nEmbd 1024 × 1, 4, 16 and 64 rows × top-2 of 8 experts × each regime × each kernel variant the adapter runs, plus
 * the same slices split one expert per binding — on Node's WebGPU (SwiftShader here, or whatever Vulkan device Dawn
 * finds). Prints the worst NMSE per type and variant against the float64 reference and exits 1 if any case exceeds
 * its bound (base/subgroups 1e-9, shader-f16 1e-5; see docs/kernels.md).
 *
 *   npm run test:kernels:full [-- --quick]
 */
import { existsSync } from 'node:fs';
import { create, globals } from 'webgpu';
import { GGMLType } from '../gguf/quant-types.ts';
import { requestExpertDevice } from '../shaders/device.ts';
import type { KernelFeature } from '../shaders/expert-ffn.ts';
import { runGridCase, type GridCase } from '../test/browser/kernel-grid.ts';

const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
if (!process.env.VK_ICD_FILENAMES && !process.env.VK_DRIVER_FILES && existsSync(SWIFTSHADER_ICD))
  process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
const quick = process.argv.includes('--quick');

Object.assign(globalThis, globals);
const gpu = create([]); // module scope: dawn.node must not lose it to the garbage collector (docs/kernels.md)
const got = await requestExpertDevice(gpu, 'kernel grid device');
if (!got) {
  console.error('no WebGPU adapter (install libvulkan1 and chromium for SwiftShader, or run on a GPU)');
  process.exit(1);
}
const { device, adapter } = got;
console.log(
  `adapter: ${adapter.info.vendor} / ${adapter.info.architecture} / ${adapter.info.description}; features: ${[...device.features].sort().join(' ')}`,
);

const TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K];
const isK = (t: GGMLType): boolean => t >= GGMLType.Q2_K && t <= GGMLType.Q6_K;
const shapes = (t: GGMLType): [number, number][] =>
  isK(t)
    ? [
        [256, 256],
        [512, 768],
        [1024, 512],
      ]
    : [
        [64, 96],
        [256, 128],
        [1024, 512],
      ];
const ROWS = quick ? [1, 16] : [1, 4, 16, 64];
const N_EXPERT = 8;
const N_USED = 2;
const variants: { name: string; features: KernelFeature[]; regime: 'decode' | 'batched'; bound: number }[] = [
  { name: 'decode base', features: [], regime: 'decode', bound: 1e-9 },
  { name: 'decode subgroups', features: ['subgroups'], regime: 'decode', bound: 1e-9 },
  { name: 'batched base', features: [], regime: 'batched', bound: 1e-9 },
  { name: 'batched shader-f16', features: ['shader-f16'], regime: 'batched', bound: 1e-5 },
];

const worst = new Map<string, number>();
const failures: string[] = [];
let cases = 0;
let seed = 1;
const t0 = performance.now();
for (const type of TYPES) {
  for (const [nEmbd, ff] of quick ? shapes(type).slice(0, 2) : shapes(type)) {
    console.log(`${GGMLType[type]} ${nEmbd}×${ff}… (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
    for (const v of variants) {
      if (v.features.some((f) => !device.features.has(f))) continue;
      for (const nTokens of ROWS) {
        for (const split of [false, true]) {
          if (split && nTokens !== ROWS[ROWS.length - 1]) continue; // splits on the largest call only
          const c: GridCase = { type, nEmbd, ff, nExpert: N_EXPERT, nTokens, nUsed: N_USED, regime: v.regime, features: v.features };
          if (split) c.maxBindingBytes = 4 * Math.ceil(Math.max(nEmbd * ff * 4, 1) / 4); // ≥ one expert of any type here
          const r = await runGridCase(device, c, seed++);
          cases++;
          const key = `${GGMLType[type]} ${v.name}`;
          worst.set(key, Math.max(worst.get(key) ?? 0, r.nmse));
          if (!(r.nmse <= v.bound))
            failures.push(`${key} ${nEmbd}×${ff} ${nTokens} rows${split ? ` (${r.weightParts} parts)` : ''}: NMSE ${r.nmse}`);
        }
      }
    }
  }
}
for (const [key, nmse] of worst) console.log(`${key.padEnd(26)} worst NMSE ${nmse.toExponential(2)}`);
const skipped = variants.filter((v) => v.features.some((f) => !device.features.has(f))).map((v) => v.name);
if (skipped.length) console.log(`not run (the adapter lacks the feature): ${skipped.join(', ')}`);
console.log(`${cases} cases in ${((performance.now() - t0) / 1000).toFixed(0)} s; ${failures.length} over their bound`);
for (const f of failures) console.log(`FAIL ${f}`);
device.destroy();
process.exit(failures.length ? 1 : 0);
