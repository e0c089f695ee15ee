/**
 * The wasm fallback's kernel for a page: a Vite plugin that builds it (build.ts, cached in .cache/wasm) and serves it
 * as the virtual module `virtual:expertswarm-kernel`, whose default export is the kernel's bytes (inlined, ~30–40 KB
 * each): both builds are inlined and the module picks the relaxed-simd one where the page's runtime validates relaxed
 * SIMD (features.ts), the baseline otherwise. Node only (it runs in the bundler). The page compiles the bytes and hands
 * the module to the engine:
 *
 *   // web/vite.config.ts:  plugins: [inlineWgsl, expertKernelPlugin(), svelte(…)]
 *   // the page:            import kernelBytes from 'virtual:expertswarm-kernel';
 *   //                      const wasmKernel = await WebAssembly.compile(kernelBytes);   // → ComputeEnvironment.wasmKernel
 */
import { expertKernelBytes } from './build.ts';
import { RELAXED_PROBE } from './features.ts';

export const KERNEL_MODULE_ID = 'virtual:expertswarm-kernel';
const RESOLVED = `\0${KERNEL_MODULE_ID}`;

/** The part of Vite's Plugin interface this uses (Vite's own type is structurally the same). */
export interface KernelPlugin {
  name: string;
  resolveId(id: string): string | null;
  load(id: string): Promise<string | null>;
}

export function expertKernelPlugin(): KernelPlugin {
  return {
    name: 'expertswarm:wasm-kernel',
    resolveId: (id) => (id === KERNEL_MODULE_ID ? RESOLVED : null),
    async load(id) {
      if (id !== RESOLVED) return null;
      const b64 = async (v: 'simd' | 'relaxed-simd'): Promise<string> =>
        JSON.stringify(Buffer.from(await expertKernelBytes(v)).toString('base64'));
      return [
        `const relaxedSimd = typeof WebAssembly === 'object' && WebAssembly.validate(new Uint8Array(${JSON.stringify([...RELAXED_PROBE])}));`,
        `const s = atob(relaxedSimd ? ${await b64('relaxed-simd')} : ${await b64('simd')});`,
        'const b = new Uint8Array(s.length);',
        'for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i);',
        'export default b;',
        '',
      ].join('\n');
    },
  };
}
