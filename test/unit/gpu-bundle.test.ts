/**
 * The GPU bundle's choices without building it (`npm run gpu:pack` builds it; scripts/gpu-selftest.sh runs it against
 * SwiftShader): which node_modules files travel, how bundled modules keep their paths, the size budget's arithmetic,
 * which adapters stop the run, and that the parallel model generator writes tools/make-model.ts's file byte for byte
 * where benchModel looks for it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GGMLType } from '../../gguf/quant-types.ts';
import { makeModel, modelHeader } from '../../tools/make-model.ts';
import { defaultConfig } from '../../tools/model-arch.ts';
import { describeAdapter, isSoftwareAdapter } from '../../scripts/gpu-adapter-check.ts';
import { BUNDLE_BUDGET_BYTES, ENTRIES, budgetReport, carriedModuleFile, rewriteImportMetaUrl } from '../../scripts/gpu-bundle-plan.ts';
import { jump, runShare, startFile } from '../../scripts/gpu-model-parallel.ts';

test('only the linux-x64 runtime files of the external packages travel', () => {
  for (const f of [
    'webgpu/index.js',
    'webgpu/package.json',
    'webgpu/dist/linux-x64/dawn.node',
    'better-sqlite3/build/Release/better_sqlite3.node',
    'better-sqlite3/lib/methods/pragma.js',
    'bindings/bindings.js',
    'onnxruntime-web/dist/ort.node.min.mjs',
    'onnxruntime-web/dist/ort-wasm-simd-threaded.wasm',
    'onnxruntime-common/dist/esm/index.js',
    'assemblyscript/package.json',
  ])
    assert.ok(carriedModuleFile(f), f);
  for (const f of [
    'webgpu/dist/win32-x64/dawn.node',
    'webgpu/dist/linux-arm64/dawn.node',
    'webgpu/types.d.ts',
    'better-sqlite3/deps/sqlite3/sqlite3.c',
    'better-sqlite3/build/Release/test_extension.node',
    'onnxruntime-web/dist/ort.all.min.mjs',
    'onnxruntime-web/dist/ort-wasm-simd-threaded.jsep.wasm',
    'onnxruntime-web/dist/ort.node.min.mjs.map',
    'onnxruntime-common/dist/esm/index.d.ts',
    'assemblyscript/dist/asc.js',
    'typescript/lib/typescript.js',
  ])
    assert.ok(!carriedModuleFile(f), f);
});

test('bundles lie one folder deep and modules keep their own place under the app root', () => {
  for (const e of ENTRIES) assert.match(e.out, /^[^/]+\/[^/]+\.js$/, e.out);
  assert.ok(
    ENTRIES.some((e) => e.out === 'bin/expertswarm.js'),
    'harness/swarm.ts spawns app/bin/expertswarm.js',
  );
  // bench:elastic forks its load as a child: the bundled child beside the bundled gain.ts, or the run dies in its
  // first round looking for tsx (the GPU selftest of 2026-12-08 did, before this entry)
  const gain = ENTRIES.find((e) => e.src === 'bench/elastic/gain.ts');
  const child = ENTRIES.find((e) => e.src === 'bench/elastic/load-child.ts');
  assert.ok(gain && child, 'gain.ts and its load child are both bundled');
  assert.equal(child.out, `${gain.out.slice(0, gain.out.lastIndexOf('/'))}/load-child.js`, 'the load child beside gain.js');
  const src = "readFileSync(new URL('./wgsl/common.wgsl', import.meta.url)); const r = new URL('..', import.meta.url);";
  const at = 'new URL("shaders/wgsl-sources.ts", __xsRoot).href';
  assert.equal(
    rewriteImportMetaUrl(src, 'shaders/wgsl-sources.ts'),
    `readFileSync(new URL('./wgsl/common.wgsl', ${at})); const r = new URL('..', ${at});`,
  );
  // the rewritten URL resolves as the original did, from an app root in place of the repository's
  const appRoot = new URL('file:///tmp/w/app/');
  assert.equal(
    new URL('./wgsl/common.wgsl', new URL('shaders/wgsl-sources.ts', appRoot).href).href,
    'file:///tmp/w/app/shaders/wgsl/common.wgsl',
  );
  assert.equal(new URL('../../.cache/wasm/', new URL('shaders/wasm/build.ts', appRoot).href).href, 'file:///tmp/w/app/.cache/wasm/');
  assert.throws(() => rewriteImportMetaUrl('', '../outside.ts'));
});

test('the budget report sums the parts and says when they do not fit', () => {
  const parts = [
    { name: 'app.tar.xz', bytes: 12 * 2 ** 20 },
    { name: 'node.xz', bytes: 21 * 2 ** 20 },
  ];
  const ok = budgetReport(parts);
  assert.equal(ok.total, 33 * 2 ** 20);
  assert.ok(ok.fits);
  assert.match(ok.lines[0] as string, /^node\.xz/);
  assert.match(ok.lines.at(-1) as string, /total .*33\.00 MiB.*fits/);
  const over = budgetReport([...parts, { name: 'model.gguf', bytes: BUNDLE_BUDGET_BYTES }]);
  assert.ok(!over.fits);
  assert.match(over.lines.at(-1) as string, /OVER/);
  assert.ok(budgetReport([{ name: 'x', bytes: BUNDLE_BUDGET_BYTES }]).fits, 'exactly the budget fits');
});

test('software adapters stop the GPU run, real GPUs do not', () => {
  const swiftshader = {
    vendor: 'google',
    architecture: 'swiftshader',
    device: 'swiftshader-device-subzero-',
    description: 'SwiftShader driver 5.0.0',
  };
  const llvmpipe = { vendor: 'mesa', architecture: '', device: '', description: 'llvmpipe (LLVM 15.0.6, 256 bits)' };
  const h200 = { vendor: 'nvidia', architecture: 'hopper', device: '', description: 'NVIDIA H200: 570.124.06' };
  assert.ok(isSoftwareAdapter(swiftshader));
  assert.ok(isSoftwareAdapter(llvmpipe));
  assert.ok(isSoftwareAdapter({ ...h200, isFallbackAdapter: true }));
  assert.ok(!isSoftwareAdapter(h200));
  assert.equal(describeAdapter(h200), 'adapter: nvidia / hopper /  / NVIDIA H200: 570.124.06');
});

test('xorshift32 jump-ahead equals stepping', () => {
  const step = (x: number): number => {
    let s = x;
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return s >>> 0;
  };
  for (const start of [1, 0x811c9dc5, 0xdeadbeef]) {
    let s = start;
    for (let n = 0; n <= 3000; n++) {
      if (n % 997 === 0 || n < 5) assert.equal(jump(start, n), s, `start ${start}, n ${n}`);
      s = step(s);
    }
  }
});

test("the parallel generator writes make-model.ts's file byte for byte", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'xs-gpu-model-'));
  try {
    // two MoE layers of Q4_K experts (rows of 256: one block) and the F32 norms: every tensor role, every path
    const partial = {
      arch: 'qwen3moe' as const,
      layers: 2,
      nEmbd: 256,
      ff: 256,
      nExpert: 4,
      nExpertUsed: 2,
      type: GGMLType.Q4_K,
      seed: 11,
    };
    const config = defaultConfig(partial);
    await makeModel(config, join(dir, 'serial.gguf'));
    const parallel = join(dir, 'parallel.gguf');
    startFile(parallel, modelHeader(config).writer);
    // three "workers" over tasks of 3 rows at most: ranges that start mid-tensor and mid-chunk
    for (let i = 0; i < 3; i++) runShare(parallel, config, i, 3, 3 * 256);
    assert.ok(readFileSync(parallel).equals(readFileSync(join(dir, 'serial.gguf'))), 'the files differ');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
