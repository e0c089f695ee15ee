/**
 * Builds the wasm fallback's kernel (shaders/wasm/assembly/*.as, AssemblyScript) with the `assemblyscript` compiler
 * from npm — no other toolchain — and caches the binary by the digest of its sources and compiler options in
 * .cache/wasm/ (ignored, like every build output). Node only; a page gets the same bytes from its bundler
 * (vite-plugin.ts) and hands the compiled module to the engine (volunteer/engine-open.ts).
 *
 * Two builds of the same sources (features.ts): 'simd' and 'relaxed-simd' (`--enable relaxed-simd`, which sets
 * kinds.as RELAXED); `nodeExpertKernel()` loads the one this runtime validates.
 *
 * @example
 *   const kernel = await nodeExpertKernel();           // WebAssembly.Module, built on first use (~10 s), then cached
 *   const simd = await nodeExpertKernel('simd');       // a given build (tests run both)
 *   const fb = await WasmExpertFallback.create(kernel, slice, { numerics: 'llama' });
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { bestKernelVariant, type ExpertKernelVariant } from './features.ts';

const ASSEMBLY = fileURLToPath(new URL('./assembly/', import.meta.url));
const CACHE = fileURLToPath(new URL('../../.cache/wasm/', import.meta.url));
const ENTRY = 'kernel';

/**
 * asc's options. SIMD (the kernel's v128 code) and non-trapping float-to-int conversions (a NaN activation must give a
 * NaN result, not a trap) are wasm features every browser with WebAssembly SIMD has (Chrome 91, Firefox 89, Safari
 * 16.4) and Node ≥ 16.4.
 */
const ASC_ARGS = [
  '--optimizeLevel',
  '3',
  '--shrinkLevel',
  '0',
  '--runtime',
  'stub',
  '--noAssert',
  '--use',
  'abort=',
  '--initialMemory',
  '1',
];

/** Each build's features: relaxed SIMD on top of the baseline (features.ts says which runtimes have it). */
const FEATURES: Record<ExpertKernelVariant, string> = {
  simd: 'simd,nontrapping-f2i',
  'relaxed-simd': 'simd,nontrapping-f2i,relaxed-simd',
};

const ascArgs = (variant: ExpertKernelVariant): string[] => [...ASC_ARGS, '--enable', FEATURES[variant]];

/** The kernel's sources by file name (the compiler sees each `x.as` as `x.ts`). */
export function kernelSources(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const f of readdirSync(ASSEMBLY).sort())
    if (f.endsWith('.as')) out[f.replace(/\.as$/, '.ts')] = readFileSync(join(ASSEMBLY, f), 'utf8');
  return out;
}

/** Digest of the sources, the compiler options and the compiler's version: the cache key. */
export function kernelDigest(sources = kernelSources(), variant: ExpertKernelVariant = 'simd'): string {
  const h = createHash('sha256').update(JSON.stringify(ascArgs(variant)));
  try {
    h.update(readFileSync(fileURLToPath(import.meta.resolve('assemblyscript/package.json'))));
  } catch {
    // no compiler installed: the digest still names the sources
  }
  for (const [name, text] of Object.entries(sources)) h.update(name).update('\0').update(text).update('\0');
  return h.digest('hex').slice(0, 16);
}

/** Compiles the kernel; throws with the compiler's messages when it fails. */
export async function compileExpertKernel(
  sources = kernelSources(),
  variant: ExpertKernelVariant = 'simd',
): Promise<Uint8Array<ArrayBuffer>> {
  const { default: asc } = await import('assemblyscript/asc');
  let binary: Uint8Array | null = null;
  const result = await asc.main([`${ENTRY}.ts`, '--outFile', `${ENTRY}.wasm`, ...ascArgs(variant)], {
    readFile: (name: string) => sources[name.replace(/^\.\//, '')] ?? null,
    writeFile: (name: string, contents: Uint8Array | string) => {
      if (name.endsWith('.wasm') && contents instanceof Uint8Array) binary = contents;
    },
    listFiles: () => [],
  });
  if (result.error || !binary) {
    throw new Error(
      `the wasm fallback's kernel (${variant}) did not compile: ${result.error?.message ?? 'no output'}\n${result.stderr.toString()}`,
    );
  }
  return new Uint8Array(binary as Uint8Array);
}

/** One build's bytes: from .cache/wasm when its digest is there, else compiled and cached. */
export async function expertKernelBytes(variant: ExpertKernelVariant = 'simd'): Promise<Uint8Array<ArrayBuffer>> {
  const sources = kernelSources();
  const file = join(CACHE, `expert-kernel-${variant}-${kernelDigest(sources, variant)}.wasm`);
  if (existsSync(file)) return new Uint8Array(readFileSync(file));
  const bytes = await compileExpertKernel(sources, variant);
  mkdirSync(CACHE, { recursive: true });
  const tmp = `${file}.${process.pid}.part`;
  writeFileSync(tmp, bytes);
  renameSync(tmp, file);
  return bytes;
}

const compiled = new Map<ExpertKernelVariant, Promise<WebAssembly.Module>>();

/** The compiled kernel for this process (built or read once): the given build, or the best this runtime validates. */
export function nodeExpertKernel(variant: ExpertKernelVariant = bestKernelVariant()): Promise<WebAssembly.Module> {
  let m = compiled.get(variant);
  if (!m) {
    m = expertKernelBytes(variant).then((b) => WebAssembly.compile(b));
    m.catch(() => compiled.delete(variant));
    compiled.set(variant, m);
  }
  return m;
}
