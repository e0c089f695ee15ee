/**
 * `npm run gpu:pack`: builds the GPU bundle — everything the GPU measurement needs on a bare GPU host (no Node, no npm,
 * no network; ../shared/reference/gpu-host.md) — into .cache/gpu-bundle/ (ignored), at most 64 MiB:
 *
 *   run.sh        the runner (scripts/gpu-run.sh): unpacks, installs the Vulkan loader if missing, finds the NVIDIA
 *                 driver, checks the adapter, generates the bench model, runs the benches with a timeout each
 *   node.xz       this machine's node binary, stripped
 *   app.tar.xz    app/: the entry points bundled by esbuild (scripts/gpu-bundle-plan.ts ENTRIES), the few node_modules
 *                 files that must stay files (dawn.node, better_sqlite3.node, onnxruntime-web's wasm), the data read by
 *                 path (WGSL, the wasm kernel's sources and prebuilt binary, tools/ + gguf/ for the model's cache key),
 *                 coordinator/bin/linkcpp-server stripped, and libgomp in case the host lacks it
 *   debs/         Debian's Vulkan loader and GL dispatch libraries (apt-get download)
 *   MANIFEST.txt  the parts and their sizes
 *
 *   npm run gpu:pack [-- --no-debs]     (--no-debs: skip apt-get, for a quick rebuild of the app alone)
 *
 * The slow parts (node's xz -9e, the .deb downloads) are cached in .cache/gpu-pack/ by the node version and package
 * names, so a rebuild after a code change only rebundles app/. How to run and test the bundle: docs/kernels-bench.md.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expertKernelBytes, kernelDigest } from '../shaders/wasm/build.ts';
import { bundleEntries } from './gpu-esbuild.ts';
import {
  BUILT_FILES,
  BUNDLE_DIR,
  CARRIED_PACKAGES,
  DATA_FOLDERS,
  DEBS,
  ENTRIES,
  type Part,
  budgetReport,
  carriedModuleFile,
} from './gpu-bundle-plan.ts';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const OUT = join(ROOT, BUNDLE_DIR);
const CACHE = join(ROOT, '.cache/gpu-pack');
const STAGE = join(CACHE, 'stage');
const APP = join(STAGE, 'app');
const withDebs = !process.argv.includes('--no-debs');

const log = (line: string): void => console.log(`[gpu:pack] ${line}`);

function sh(cmd: string, args: string[], opts: { cwd?: string } = {}): string {
  return execFileSync(cmd, args, { cwd: opts.cwd ?? ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
}

/** Every file under `dir`, relative to it. */
function walk(dir: string, prefix = ''): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(dir, prefix), { withFileTypes: true })) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...walk(dir, rel));
    else if (e.isFile()) out.push(rel);
  }
  return out;
}

function copyInto(src: string, dst: string): void {
  mkdirSync(dirname(dst), { recursive: true });
  copyFileSync(src, dst);
}

/** `strip` if it works on the file (it may not know the format); the copy stays as it was otherwise. */
function stripped(path: string): void {
  const r = spawnSync('strip', ['--strip-unneeded', path], { encoding: 'utf8' });
  if (r.status !== 0) log(`strip ${relative(ROOT, path)} failed (${r.stderr.trim() || r.error?.message}); carried unstripped`);
}

/** xz -9e of `src` into `dst` (kept in CACHE under `key` so that a rebuild skips it). */
function xzCached(src: string, dst: string, key: string): void {
  const cached = join(CACHE, key);
  if (!existsSync(cached)) {
    log(`xz -9e ${relative(ROOT, src)} (once; cached as ${relative(ROOT, cached)})…`);
    const tmp = `${cached}.part`;
    execFileSync('bash', ['-c', 'xz -9e -c -- "$1" > "$2"', 'xz', src, tmp], { stdio: 'inherit' });
    execFileSync('mv', [tmp, cached]);
  }
  copyFileSync(cached, dst);
}

// --- the prerequisites: built here, never on the GPU host

for (const f of BUILT_FILES) {
  if (!existsSync(join(ROOT, f))) throw new Error(`${f} is missing: run npm run build:coordinator first`);
}
log('wasm kernel (.cache/wasm; built once if missing)…');
const KERNEL_VARIANTS = ['simd', 'relaxed-simd'] as const;
for (const variant of KERNEL_VARIANTS) await expertKernelBytes(variant);

rmSync(STAGE, { recursive: true, force: true });
rmSync(OUT, { recursive: true, force: true });
mkdirSync(APP, { recursive: true });
mkdirSync(OUT, { recursive: true });

// --- app/: the bundles

log(`esbuild: ${ENTRIES.map((e) => e.src).join(', ')}`);
const inputs = await bundleEntries(ROOT, APP, ENTRIES);
log(`  ${inputs.files} source files and ${inputs.packages.length} npm packages bundled in`);
// The bundles are ES modules named .js (bin/expertswarm.js must keep its name): this makes Node read them as such.
writeFileSync(join(APP, 'package.json'), `${JSON.stringify({ name: 'expertswarm-gpu-bundle', private: true, type: 'module' }, null, 2)}\n`);

// --- app/node_modules: only the files the external packages load

let moduleFiles = 0;
for (const pkg of CARRIED_PACKAGES) {
  const dir = join(ROOT, 'node_modules', pkg);
  if (!existsSync(dir)) throw new Error(`node_modules/${pkg} is missing: run npm ci`);
  for (const rel of walk(dir)) {
    const path = `${pkg}/${rel}`;
    if (!carriedModuleFile(path)) continue;
    copyInto(join(dir, rel), join(APP, 'node_modules', path));
    moduleFiles++;
  }
}
if (!existsSync(join(APP, 'node_modules/webgpu/dist/linux-x64/dawn.node'))) throw new Error('webgpu has no dist/linux-x64/dawn.node');
stripped(join(APP, 'node_modules/webgpu/dist/linux-x64/dawn.node'));
stripped(join(APP, 'node_modules/better-sqlite3/build/Release/better_sqlite3.node'));
log(`node_modules: ${moduleFiles} files of ${CARRIED_PACKAGES.join(', ')}`);

// --- app/: data read by path, the coordinator, the wasm kernel, libgomp

for (const folder of DATA_FOLDERS) for (const rel of walk(join(ROOT, folder))) copyInto(join(ROOT, folder, rel), join(APP, folder, rel));
for (const f of BUILT_FILES) {
  copyInto(join(ROOT, f), join(APP, f));
  chmodSync(join(APP, f), 0o755);
  stripped(join(APP, f));
}
// Only the builds of the sources carried (the cache also keeps builds of older sources).
const wasm = KERNEL_VARIANTS.map((v) => `expert-kernel-${v}-${kernelDigest(undefined, v)}.wasm`);
for (const f of wasm) copyInto(join(ROOT, '.cache/wasm', f), join(APP, '.cache/wasm', f));
log(`wasm kernel: ${wasm.join(', ')}`);
// The coordinator links libgomp, which a CUDA image may lack: the runner puts this copy on LD_LIBRARY_PATH only then.
const gomp = /libgomp\.so\.1 => (\S+)/.exec(sh('ldd', [join(ROOT, BUILT_FILES[0] as string)]))?.[1];
if (gomp) {
  copyInto(gomp, join(APP, 'lib/libgomp.so.1'));
  stripped(join(APP, 'lib/libgomp.so.1'));
} else log('the coordinator does not link libgomp here: none carried');

log('tar | xz -9e app/…');
execFileSync('bash', ['-c', 'tar -C "$1" -cf - app | xz -9e -T1 > "$2"', 'tar', STAGE, join(OUT, 'app.tar.xz')], { stdio: 'inherit' });

// --- node, stripped

const nodeKey = `node-${process.version}-${statSync(process.execPath).size}.xz`;
const nodeCopy = join(CACHE, 'node');
if (!existsSync(join(CACHE, nodeKey))) {
  copyInto(process.execPath, nodeCopy);
  stripped(nodeCopy);
}
xzCached(nodeCopy, join(OUT, 'node.xz'), nodeKey);

// --- the Vulkan loader and GL dispatch libraries, as Debian packages

if (withDebs) {
  const debCache = join(CACHE, 'debs');
  mkdirSync(debCache, { recursive: true });
  const have = (): string[] => readdirSync(debCache).filter((f) => f.endsWith('.deb'));
  const missing = DEBS.filter((p) => !have().some((f) => f.startsWith(`${p}_`)));
  if (missing.length > 0) {
    log(`apt-get download ${missing.join(' ')}…`);
    // amd64 named explicitly: the GPU host is x86-64 whatever this machine is.
    const arch = ['-oAPT::Architecture=amd64', '-oAPT::Architectures=amd64'];
    let r = spawnSync('apt-get', [...arch, 'download', ...missing], { cwd: debCache, stdio: 'inherit' });
    if (r.status !== 0) {
      log('apt-get download failed: apt-get update, then once more');
      spawnSync('apt-get', [...arch, 'update'], { stdio: 'inherit' });
      r = spawnSync('apt-get', [...arch, 'download', ...missing], { cwd: debCache, stdio: 'inherit' });
      if (r.status !== 0) throw new Error(`apt-get download ${missing.join(' ')} failed`);
    }
  }
  mkdirSync(join(OUT, 'debs'));
  for (const p of DEBS) {
    const f = have().find((x) => x.startsWith(`${p}_`));
    if (!f) throw new Error(`no .deb of ${p}`);
    copyFileSync(join(debCache, f), join(OUT, 'debs', f));
  }
} else log('--no-debs: no Vulkan loader packages (the host must have libvulkan.so.1)');

// --- the runner, and the manifest

copyFileSync(join(ROOT, 'scripts/gpu-run.sh'), join(OUT, 'run.sh'));
chmodSync(join(OUT, 'run.sh'), 0o755);

const parts: Part[] = [];
for (const rel of walk(OUT)) {
  const name = rel.startsWith('debs/') ? 'debs/' : rel;
  const bytes = statSync(join(OUT, rel)).size;
  const p = parts.find((x) => x.name === name);
  if (p) p.bytes += bytes;
  else parts.push({ name, bytes });
}
const appBytes = walk(APP).reduce((s, rel) => s + statSync(join(APP, rel)).size, 0);
const report = budgetReport(parts);
const manifest = [
  `expertswarm GPU bundle, packed ${new Date().toISOString()} with node ${process.version}`,
  `app/ unpacked: ${(appBytes / 2 ** 20).toFixed(1)} MiB in ${walk(APP).length} files`,
  ...report.lines,
  '',
  'run there (repository root, $OUT set):  bash .cache/gpu-bundle/run.sh',
  'test here against SwiftShader:          bash scripts/gpu-selftest.sh',
];
writeFileSync(join(OUT, 'MANIFEST.txt'), `${manifest.join('\n')}\n`);
for (const line of manifest) log(line);
rmSync(STAGE, { recursive: true, force: true });
if (!report.fits) {
  log('the bundle is over the budget');
  process.exit(1);
}
