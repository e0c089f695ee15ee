/**
 * What `npm run gpu:pack` (scripts/gpu-pack.ts) puts in the GPU bundle, as data and pure functions, so that a unit test
 * (test/unit/gpu-bundle-plan.test.ts) can check the choices without building anything.
 *
 * The bundle carries the GPU measurement to a bare host (../shared/reference/gpu-host.md: no Node, no npm, no network,
 * at most 64 MiB of files). The TypeScript entry points are bundled by esbuild into one file each; only the packages that
 * load native or wasm files by path stay outside the bundles and travel as the few files they load.
 */

/** What may travel to the GPU host in all (the device tool's limit on carried files). */
export const BUNDLE_BUDGET_BYTES = 64 * 2 ** 20;

/** Where the bundle is built: ignored (.gitignore has .cache/), never committed. */
export const BUNDLE_DIR = '.cache/gpu-bundle';

/**
 * One bundled entry point. `out` is relative to the app folder and always one folder deep, because the bundles resolve
 * the repository's relative paths (`new URL('../coordinator/bin/…', import.meta.url)`) from `app/<folder>/`.
 */
export interface BundleEntry {
  src: string;
  out: string;
}

export const ENTRIES: readonly BundleEntry[] = [
  { src: 'scripts/gpu-adapter.ts', out: 'dist/gpu-adapter.js' },
  { src: 'scripts/gpu-make-model.ts', out: 'dist/gpu-make-model.js' },
  { src: 'bench/gpu/node-gpu.ts', out: 'dist/node-gpu.js' },
  { src: 'scripts/sweep-kernels.ts', out: 'dist/sweep-kernels.js' },
  { src: 'bench/elastic/gain.ts', out: 'dist/gain.js' },
  // gain.ts forks the load's lanes as a process of their own: this bundle, beside dist/gain.js (gain.ts loadChildEntry).
  { src: 'bench/elastic/load-child.ts', out: 'dist/load-child.js' },
  // harness/swarm.ts spawns `node <root>/bin/expertswarm.js volunteer …`: the same path, without tsx.
  { src: 'scripts/gpu-cli.ts', out: 'bin/expertswarm.js' },
];

/**
 * Packages left out of the bundles: they find their native or wasm files relative to their own module (webgpu's
 * dawn.node, better-sqlite3's addon through `bindings`, onnxruntime-web's wasm beside its dist/), so they must stay
 * files under app/node_modules. `assemblyscript` (with binaryen, 15 MB) is the wasm kernel's compiler, only loaded when
 * the kernel is not prebuilt: it travels prebuilt. `bufferutil` and `utf-8-validate` are ws's optional natives, not
 * installed.
 */
export const EXTERNAL_PACKAGES: readonly string[] = [
  'webgpu',
  'better-sqlite3',
  'onnxruntime-web',
  'assemblyscript',
  'bufferutil',
  'utf-8-validate',
];

/**
 * The files of node_modules that travel, as path patterns relative to node_modules: the runtime closure of the external
 * packages on linux-x64, nothing else (no other platforms' binaries, sources, types, maps or docs).
 */
const CARRIED_MODULE_FILES: readonly RegExp[] = [
  /^webgpu\/(package\.json|index\.js|dist\/linux-x64\/dawn\.node)$/,
  /^better-sqlite3\/(package\.json|lib\/.+\.js|build\/Release\/better_sqlite3\.node)$/,
  /^bindings\/(package\.json|bindings\.js)$/,
  /^file-uri-to-path\/(package\.json|index\.js)$/,
  /^onnxruntime-web\/(package\.json|dist\/ort\.node\.min\.(mjs|js)|dist\/ort-wasm-simd-threaded\.(mjs|wasm))$/,
  /^onnxruntime-common\/(package\.json|dist\/(esm|cjs)\/.+\.js)$/,
  // shaders/wasm/build.ts hashes this file into the wasm kernel's cache key: without it the prebuilt kernel is not found.
  /^assemblyscript\/package\.json$/,
];

export function carriedModuleFile(path: string): boolean {
  return CARRIED_MODULE_FILES.some((re) => re.test(path));
}

/** The packages whose files carriedModuleFile may pick (the folders gpu-pack walks). */
export const CARRIED_PACKAGES: readonly string[] = [
  'webgpu',
  'better-sqlite3',
  'bindings',
  'file-uri-to-path',
  'onnxruntime-web',
  'onnxruntime-common',
  'assemblyscript',
];

/**
 * Repository folders copied as files into app/ because code reads them at run time by path: the WGSL sources
 * (shaders/wgsl-sources.ts), the wasm kernel's sources (its cache key), and tools/ + gguf/ (harness/models.ts hashes
 * them into the generated model's cache key).
 */
export const DATA_FOLDERS: readonly string[] = ['shaders/wgsl', 'shaders/wasm/assembly', 'tools', 'gguf'];

/** Built files carried as they are, relative to the repository (the runner checks each before it runs). */
export const BUILT_FILES: readonly string[] = ['coordinator/bin/linkcpp-server'];

/** Debian packages of the Vulkan loader and the GL dispatch libraries Dawn may open (gpu-host.md). */
export const DEBS: readonly string[] = ['libvulkan1', 'libegl1', 'libglvnd0', 'libopengl0', 'libgl1', 'libglx0', 'libgles2'];

/**
 * Rewrites a module's `import.meta.url` so that, bundled, it still names the module's own place under the app root.
 * The banner (BANNER) defines `__xsRoot` as the bundle's parent folder; every bundle lies one folder deep, so
 * `new URL('./wgsl/x.wgsl', import.meta.url)` in shaders/wgsl-sources.ts keeps meaning app/shaders/wgsl/x.wgsl.
 */
export function rewriteImportMetaUrl(source: string, relPath: string): string {
  if (relPath.startsWith('/') || relPath.startsWith('..')) throw new Error(`not a path inside the repository: ${relPath}`);
  return source.replaceAll('import.meta.url', `new URL(${JSON.stringify(relPath)}, __xsRoot).href`);
}

/**
 * Prepended to every bundle: the app root for rewriteImportMetaUrl, and a `require` for the CommonJS packages esbuild
 * bundles into ESM (without it their require('node:…') throws "Dynamic require … is not supported").
 */
export const BANNER = [
  "import { createRequire as __xsCreateRequire } from 'node:module';",
  'const require = __xsCreateRequire(import.meta.url);',
  "const __xsRoot = new URL('../', import.meta.url);",
].join('\n');

export interface Part {
  name: string;
  bytes: number;
}

/** The bundle's parts by size, largest first, the total, and whether it fits `budget`. */
export function budgetReport(parts: readonly Part[], budget = BUNDLE_BUDGET_BYTES): { lines: string[]; total: number; fits: boolean } {
  const total = parts.reduce((s, p) => s + p.bytes, 0);
  const mib = (b: number): string => `${(b / 2 ** 20).toFixed(2)} MiB`;
  const width = Math.max(5, ...parts.map((p) => p.name.length));
  const lines = [...parts].sort((a, b) => b.bytes - a.bytes).map((p) => `${p.name.padEnd(width)}  ${mib(p.bytes).padStart(10)}`);
  const fits = total <= budget;
  lines.push(`${'total'.padEnd(width)}  ${mib(total).padStart(10)}  (budget ${mib(budget)}: ${fits ? 'fits' : 'OVER'})`);
  return { lines, total, fits };
}
