/** Config, results and the text report of the kernel benchmark (shared by the page and the Node driver). */

/** ours-webgpu: our kernels with every optional feature the device has; ours-base: the same without any (only run
 *  when the device has one, to show what the variants buy); ours-llama-float / ours-llama-int8: ours-webgpu in llama
 *  numerics (activations rounded as llama.cpp's CPU backend does), the decode kernels reading the rounded values
 *  (integerDot 'float') or the packed 8-bit activations (integerDot 'auto': dot4I8Packed where WGSL has it). */
export type BackendName = 'ours-webgpu' | 'ours-base' | 'ours-llama-float' | 'ours-llama-int8' | 'ort-webgpu' | 'ort-wasm';

export interface BenchShape {
  label: string;
  nEmbd: number;
  ff: number;
  nExpert: number;
  nTokens: number;
  nUsed: number;
}

export interface BenchConfig {
  /** GGML type names of the slices ('Q4_K', 'F16', …). */
  types: string[];
  shapes: BenchShape[];
  warmup: number;
  iterations: number;
  /** Where onnxruntime-web fetches its .wasm files (a URL prefix ending in '/'). */
  wasmPaths: string;
  /** onnxruntime wasm threads; 0 = up to 4 when the page is cross-origin isolated, else 1. */
  ortThreads: number;
}

export interface BenchRow {
  type: string;
  shape: BenchShape;
  backend: BackendName;
  msMedian: number;
  msMin: number;
  iterations: number;
  /** Useful flops (2 · 3 · nEmbd · ff per routed pair) per second, over the median. */
  gflops: number;
  /** Weight bytes the backend reads per call, per second, over the median. */
  gbps: number;
  weightBytes: number;
  /** Against the float64 CPU reference on the same dequantized weights (llama rows: the reference with ggml's rounding). */
  nmse: number;
  /** Our kernels: the optional features they used (empty for base and ORT). */
  kernelFeatures?: string[];
  /** ours-llama-*: how the 8-bit dot products ran (capabilities().integerDot). */
  integerDot?: string | null;
}

export interface BenchReport {
  config: BenchConfig;
  env: {
    userAgent: string;
    hardwareConcurrency: number;
    crossOriginIsolated: boolean;
    ortVersion: string;
    ortThreads: number;
    adapter: { vendor: string; architecture: string; description: string; isFallbackAdapter: boolean } | null;
  } | null;
  rows: BenchRow[];
  notes: string[];
  text: string;
}

export const DEFAULT_SHAPES: BenchShape[] = [
  { label: 'decode', nEmbd: 256, ff: 256, nExpert: 4, nTokens: 1, nUsed: 2 },
  { label: 'batched', nEmbd: 256, ff: 256, nExpert: 4, nTokens: 64, nUsed: 2 },
];

const pad = (s: string, n: number): string => (s.length >= n ? s : s + ' '.repeat(n - s.length));
const lpad = (s: string, n: number): string => (s.length >= n ? s : ' '.repeat(n - s.length) + s);
const num = (x: number, digits = 3): string => (Number.isFinite(x) ? (x >= 100 ? x.toFixed(0) : x.toPrecision(digits)) : '-');

export function formatReport(r: BenchReport): string {
  const out: string[] = [];
  const e = r.env;
  if (e) {
    const a = e.adapter;
    out.push(
      `adapter: ${a ? `${a.vendor || '?'} / ${a.architecture || '?'}${a.description ? ` (${a.description})` : ''}${a.isFallbackAdapter ? ', fallback adapter' : ''}` : 'none'}`,
    );
    out.push(
      `onnxruntime-web ${e.ortVersion}, wasm threads ${e.ortThreads} (cross-origin isolated: ${e.crossOriginIsolated}); ${e.hardwareConcurrency} logical CPUs`,
    );
  }
  out.push('GFLOP/s counts 2·3·nEmbd·ff flops per routed (token, expert) pair; GB/s counts the weight bytes each backend reads per call:');
  out.push('  ours = quantized bytes of the routed experts; ORT = float32 weights of all experts (its graph is dense over the slice).');
  out.push(`ms = median of ${r.config.iterations} calls after ${r.config.warmup} warm-up; each call includes upload and readback.`);
  out.push('NMSE: against the float64 reference; ours-llama-* against the reference with ggml rounding (a tie of h rounded the');
  out.push('  other way shows as ~1e-9 there, see docs/kernels.md). The batched regime reads rounded values in both llama rows.');
  for (const type of r.config.types) {
    for (const shape of r.config.shapes) {
      const rows = r.rows.filter((x) => x.type === type && x.shape.label === shape.label);
      if (rows.length === 0) continue;
      out.push('');
      out.push(
        `${type} ${shape.label}: ${shape.nTokens} row${shape.nTokens === 1 ? '' : 's'} × top-${shape.nUsed} of ${shape.nExpert} experts, nEmbd=${shape.nEmbd} ff=${shape.ff}`,
      );
      out.push(
        `  ${pad('backend', 16)} ${lpad('ms/call', 9)} ${lpad('min ms', 9)} ${lpad('GFLOP/s', 8)} ${lpad('GB/s', 8)} ${lpad('MB read', 8)} ${lpad('NMSE', 9)}`,
      );
      for (const x of rows) {
        out.push(
          `  ${pad(x.backend, 16)} ${lpad(num(x.msMedian), 9)} ${lpad(num(x.msMin), 9)} ${lpad(num(x.gflops), 8)} ${lpad(num(x.gbps), 8)} ${lpad(num(x.weightBytes / 1e6), 8)} ${lpad(x.nmse.toExponential(1), 9)}`,
        );
      }
      const ours = rows.find((x) => x.backend === 'ours-webgpu');
      if (ours?.kernelFeatures?.length) out.push(`  ours-webgpu uses ${ours.kernelFeatures.join(' + ')}`);
      const ratios = ours
        ? rows.filter((x) => x.backend.startsWith('ort-')).map((x) => `vs ${x.backend} ${num(x.msMedian / ours.msMedian)}×`)
        : [];
      if (ratios.length) out.push(`  ours/ORT speed (ORT ms ÷ ours ms; > 1 = ours faster): ${ratios.join(', ')}`);
      const base = rows.find((x) => x.backend === 'ours-base');
      if (ours && base) out.push(`  variants: base ms ÷ ours-webgpu ms = ${num(base.msMedian / ours.msMedian)}× (> 1 = the features help)`);
      const lf = rows.find((x) => x.backend === 'ours-llama-float');
      const li = rows.find((x) => x.backend === 'ours-llama-int8');
      if (ours && (lf || li)) {
        const parts = [
          `exact ${num(ours.msMedian)} ms`,
          ...(lf ? [`llama (float) ${num(lf.msMedian)} ms = ${num(lf.msMedian / ours.msMedian)}× exact`] : []),
          ...(li ? [`llama (${li.integerDot ?? 'int8'}) ${num(li.msMedian)} ms = ${num(li.msMedian / ours.msMedian)}× exact`] : []),
          ...(lf && li ? [`float ms ÷ int8 ms = ${num(lf.msMedian / li.msMedian)}× (> 1 = the int8 dot products help)`] : []),
        ];
        out.push(`  numerics: ${parts.join('; ')}`);
      }
    }
  }
  if (r.notes.length) {
    out.push('');
    for (const n of r.notes) out.push(`note: ${n}`);
  }
  return out.join('\n');
}
