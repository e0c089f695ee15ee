/** Config, results and the text report of the kernel benchmark (shared by the page and the Node driver). */

/**
 * ours-webgpu: our kernels with every optional feature the device has; ours-base: the same without any (only run
 * when the device has one, to show what the variants buy); ours-llama-float / ours-llama-int8: ours-webgpu in llama
 * numerics (activations rounded as llama.cpp's CPU backend does), the decode kernels reading the rounded values
 * (integerDot 'float') or the packed 8-bit activations (integerDot 'auto': dot4I8Packed where WGSL has it).
 * ort-webgpu / ort-webgpu-ep / ort-wasm: the fair baselines (bench/ort-routed.ts): only the routed pairs, weights as
 * MatMulNBits where the quant type maps; ort-webgpu is onnxruntime-web's default build (its JS "JSEP" WebGPU kernels),
 * ort-webgpu-ep its `onnxruntime-web/webgpu` build (the native C++ WebGPU execution provider). fallback-wasm: the
 * engine's own onnxruntime fallback (shaders/ort/fallback.ts) as it is.
 */
export type BackendName =
  | 'ours-webgpu'
  | 'ours-base'
  | 'ours-llama-float'
  | 'ours-llama-int8'
  | 'ort-webgpu'
  | 'ort-webgpu-ep'
  | 'ort-wasm'
  | 'fallback-wasm';

export const BACKENDS: readonly BackendName[] = [
  'ours-webgpu',
  'ours-base',
  'ours-llama-float',
  'ours-llama-int8',
  'ort-webgpu',
  'ort-webgpu-ep',
  'ort-wasm',
  'fallback-wasm',
];

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
  /** Which backends run (default: all; ours-base only where the device has an optional feature). */
  backends: BackendName[];
  warmup: number;
  iterations: number;
  /** Timed calls of one backend on one shape stop past this many seconds (at least one is timed). */
  budgetS: number;
  /** Where onnxruntime-web fetches its .wasm files (a URL prefix ending in '/'). */
  wasmPaths: string;
  /** onnxruntime wasm threads; 0 = up to 4 when the page is cross-origin isolated, else 1. */
  ortThreads: number;
  /** MatMulNBits accuracy_level of the fair ORT graphs (0: float32 products, like our exact numerics). */
  ortAccuracyLevel: number;
  /**
   * Weights of the fair ORT graphs: 'smallest' (MatMulNBits where the type maps, the issue's baseline) or 'f32'
   * (dequantized: 8× the memory, but onnxruntime's wasm MatMul is faster than its MatMulNBits at small shapes).
   */
  ortWeights: 'smallest' | 'f32';
}

export interface BenchRow {
  type: string;
  shape: BenchShape;
  backend: BackendName;
  msMedian: number;
  msMin: number;
  iterations: number;
  /** Our kernels where the device has timestamp-query: the median GPU time of the calls' compute passes. */
  kernelMs?: number | null;
  /** Useful flops (2 · 3 · nEmbd · ff per routed pair) per second, over the median. */
  gflops: number;
  /** Weight bytes the backend reads per call, per second, over the median (NaN where unknown). */
  gbps: number;
  weightBytes: number;
  /** Against the float64 CPU reference on the same dequantized weights (llama rows: the reference with ggml's rounding). */
  nmse: number;
  /** What the NMSE is against: 'reference', or 'ours-webgpu' where the shape is too large for the CPU reference. */
  nmseAgainst: 'reference' | 'ours-webgpu';
  /** NMSE over WRONG_NMSE: the output is wrong, and the row's time counts in no ratio. */
  wrong?: boolean;
  /** Our kernels: the optional features they used (empty for base and ORT). */
  kernelFeatures?: string[];
  /** ours-llama-*: how the 8-bit dot products ran (capabilities().integerDot). */
  integerDot?: string | null;
  /** ort-*: how the weights are held (e.g. "Q4_K as MatMulNBits 4-bit (zero point 0) + mins term"). */
  forms?: string;
  /** Regime our kernels ran (decode / batched). */
  regime?: string;
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
    timestampQuery: boolean;
  } | null;
  rows: BenchRow[];
  notes: string[];
  text: string;
}

/** NMSE past which a backend's output is wrong (the hub's verification contract, llama.cpp's mul_mat tolerance). */
export const WRONG_NMSE = 5e-4;

/** The fair ORT baselines, in report order. */
export const FAIR_ORT: readonly BackendName[] = ['ort-webgpu', 'ort-webgpu-ep', 'ort-wasm'];

/** The ratio the issue asks of ours over the fair ORT webgpu baseline (the faster of its two WebGPU builds) on every shape. */
export const GOAL_VS_ORT_WEBGPU = 1.5;

const shapesAt = (s: Omit<BenchShape, 'label' | 'nTokens'>, rows: readonly number[]): BenchShape[] =>
  rows.map((nTokens) => ({ ...s, label: `${nTokens <= 4 ? 'decode' : 'batched'}-${nTokens}`, nTokens }));

/** The issue's rows: decode (1, 4) and batched (64, 512). */
export const BENCH_ROWS = [1, 4, 64, 512] as const;

/**
 * Default shapes: the issue's rows on a reduced slice (top-2 of 8 experts, nEmbd = ff = 256), small enough that
 * SwiftShader gets through every backend in minutes.
 */
export const DEFAULT_SHAPES: BenchShape[] = shapesAt({ nEmbd: 256, ff: 256, nExpert: 8, nUsed: 2 }, BENCH_ROWS);
/** `--full`: the realistic shape (n_embd 2048, ff 768, top-8 of a 16-expert slice): for a real GPU. */
export const FULL_SHAPES: BenchShape[] = shapesAt({ nEmbd: 2048, ff: 768, nExpert: 16, nUsed: 8 }, BENCH_ROWS);
/** `--quick`: a smoke run (1 and 64 rows, nEmbd = ff = 256, top-2 of 4). */
export const QUICK_SHAPES: BenchShape[] = shapesAt({ nEmbd: 256, ff: 256, nExpert: 4, nUsed: 2 }, [1, 64]);

const pad = (s: string, n: number): string => (s.length >= n ? s : s + ' '.repeat(n - s.length));
const lpad = (s: string, n: number): string => (s.length >= n ? s : ' '.repeat(n - s.length) + s);
const num = (x: number | null | undefined, digits = 3): string =>
  x !== null && x !== undefined && Number.isFinite(x) ? (x >= 100 ? x.toFixed(0) : x.toPrecision(digits)) : '-';

/** ORT ms ÷ ours ms for one shape, or null when either did not run. */
export function speedRatio(rows: readonly BenchRow[], ort: BackendName): number | null {
  const ours = rows.find((x) => x.backend === 'ours-webgpu' && !x.wrong);
  const other = rows.find((x) => x.backend === ort && !x.wrong);
  return ours && other ? other.msMedian / ours.msMedian : null;
}

export function formatReport(r: BenchReport): string {
  const out: string[] = [];
  const e = r.env;
  if (e) {
    const a = e.adapter;
    out.push(
      `adapter: ${a ? `${a.vendor || '?'} / ${a.architecture || '?'}${a.description ? ` (${a.description})` : ''}${a.isFallbackAdapter ? ', fallback adapter' : ''}` : 'none'}; timestamp-query: ${e.timestampQuery ? 'yes' : 'no'}`,
    );
    out.push(
      `onnxruntime-web ${e.ortVersion}, wasm threads ${e.ortThreads} (cross-origin isolated: ${e.crossOriginIsolated}); ${e.hardwareConcurrency} logical CPUs`,
    );
  }
  out.push('GFLOP/s counts 2·3·nEmbd·ff flops per routed (token, expert) pair; GB/s the weight bytes each backend reads per call:');
  out.push("  ours = the routed experts' GGUF bytes; ort-* (fair: routed pairs only) = the routed experts' weights as its graph holds");
  out.push("  them (MatMulNBits codes + f32 scales, or f32); fallback-wasm = the engine's own fallback, bytes not counted.");
  out.push(
    `ms = median of ${r.config.iterations} calls (fewer past ${r.config.budgetS} s) after ${r.config.warmup} warm-up; each call includes upload and readback. kernel ms: ` +
      'GPU time of our compute pass (timestamp-query), where the device has it.',
  );
  out.push('NMSE: against the float64 reference (ours-llama-* against it with ggml rounding; ties of h show as ~1e-9, see');
  out.push('  docs/kernels.md); "vs ours" where the shape is too large for the CPU reference.');
  const summary: string[] = [];
  for (const type of r.config.types) {
    for (const shape of r.config.shapes) {
      const rows = r.rows.filter((x) => x.type === type && x.shape.label === shape.label);
      if (rows.length === 0) continue;
      out.push('');
      out.push(
        `${type} ${shape.label}: ${shape.nTokens} row${shape.nTokens === 1 ? '' : 's'} × top-${shape.nUsed} of ${shape.nExpert} experts, nEmbd=${shape.nEmbd} ff=${shape.ff}`,
      );
      out.push(
        `  ${pad('backend', 16)} ${lpad('ms/call', 9)} ${lpad('min ms', 9)} ${lpad('kernel ms', 9)} ${lpad('GFLOP/s', 8)} ${lpad('GB/s', 8)} ${lpad('MB read', 8)} ${lpad('NMSE', 9)}`,
      );
      for (const x of rows) {
        out.push(
          `  ${pad(x.backend, 16)} ${lpad(num(x.msMedian), 9)} ${lpad(num(x.msMin), 9)} ${lpad(num(x.kernelMs), 9)} ${lpad(num(x.gflops), 8)} ${lpad(num(x.gbps), 8)} ${lpad(num(x.weightBytes / 1e6), 8)} ${lpad(x.nmse.toExponential(1), 9)}${x.nmseAgainst === 'ours-webgpu' ? ' vs ours' : ''}${x.wrong ? ' WRONG' : ''}`,
        );
      }
      const ours = rows.find((x) => x.backend === 'ours-webgpu');
      if (ours) {
        const extra = [
          ...(ours.regime ? [`regime ${ours.regime}`] : []),
          ...(ours.kernelFeatures?.length ? [`features ${ours.kernelFeatures.join(' + ')}`] : []),
          ...(ours.kernelMs ? [`wall ÷ kernel ${num(ours.msMedian / ours.kernelMs)}×`] : []),
        ];
        if (extra.length) out.push(`  ours-webgpu: ${extra.join(', ')}`);
      }
      const forms = rows.find((x) => x.forms)?.forms;
      for (const x of rows.filter((x) => x.forms)) if (x.forms !== forms) out.push(`  ${x.backend} holds ${x.forms}`);
      if (forms) out.push(`  ort weights: ${forms}`);
      const fair = ([...FAIR_ORT, 'fallback-wasm'] as const).flatMap((b) => {
        const ratio = speedRatio(rows, b);
        return ratio === null ? [] : [`vs ${b} ${num(ratio)}×`];
      });
      if (fair.length) out.push(`  ours/ORT speed (ORT ms ÷ ours ms; > 1 = ours faster): ${fair.join(', ')}`);
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
      const listed = ['ours-webgpu', ...FAIR_ORT].flatMap((b) => rows.filter((x) => x.backend === b));
      listed.forEach((x, i) => {
        const ratio = x.backend === 'ours-webgpu' ? null : speedRatio(rows, x.backend);
        summary.push(
          `  ${pad(i === 0 ? type : '', 5)} ${pad(i === 0 ? shape.label : '', 12)} ${pad(x.backend, 14)} ${lpad(num(x.msMedian), 9)} ${lpad(num(x.gflops), 8)} ${lpad(num(x.gbps), 8)} ${lpad(ratio === null ? '' : `${num(ratio)}×`, 9)}`,
        );
      });
      const gpu = FAIR_ORT.filter((b) => b !== 'ort-wasm').flatMap((b) => rows.filter((x) => x.backend === b && !x.wrong));
      if (ours && !ours.wrong && gpu.length) {
        const best = gpu.reduce((a, b) => (b.msMedian < a.msMedian ? b : a));
        const ratio = best.msMedian / ours.msMedian;
        summary.push(
          `  ${pad('', 5)} ${pad('', 12)} goal: ours ÷ the faster ORT WebGPU (${best.backend}) = ${num(ratio)}× ${ratio >= GOAL_VS_ORT_WEBGPU ? '≥' : '<'} ${GOAL_VS_ORT_WEBGPU}× ${ratio >= GOAL_VS_ORT_WEBGPU ? 'met' : 'NOT met'}`,
        );
      }
    }
  }
  if (summary.length) {
    out.push('');
    out.push('fair ratios (ORT ms ÷ ours ms, > 1 = ours faster; same routed pairs, same calls):');
    out.push(
      `  ${pad('type', 5)} ${pad('shape', 12)} ${pad('backend', 14)} ${lpad('ms/call', 9)} ${lpad('GFLOP/s', 8)} ${lpad('GB/s', 8)} ${lpad('ours ÷ it', 9)}`,
    );
    out.push(...summary);
  }
  if (r.notes.length) {
    out.push('');
    for (const n of r.notes) out.push(`note: ${n}`);
  }
  return out.join('\n');
}
