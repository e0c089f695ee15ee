/**
 * Sweeps the expert kernels' tunables on whatever GPU Dawn finds (npm `webgpu`), at the realistic shape (n_embd 2048,
 * ff 768, top-8 of a 16-expert slice) in Q4_K: decode (workgroupSize × rowsPerWorkgroup at 1–8 rows), batched
 * (workgroupSize × tileRows × tileCols at 8–512 rows), and decode vs batched with their best configs at 1–64 rows
 * (the regime threshold). Per row count: kernel time (timestamp-query, where the adapter has it), wall time per call,
 * weight GB/s against `--bandwidth-gbs` (decode) and GFLOP/s against `--peak-tflops` (batched). Writes the table as
 * markdown and JSON under `--out` (default .cache/artifacts/sweep/) and prints the markdown. The grids and the
 * analysis: scripts/sweep-plan.ts. How to run it on a GPU: docs/kernels-bench.md.
 *
 *   npm run bench:kernels:sweep                                    the full sweep (a real GPU: a few minutes)
 *   npm run bench:kernels:sweep -- --quick                         small shape, 2 configs each (SwiftShader: ~1 min)
 *   npm run bench:kernels:sweep -- --bandwidth-gbs 4800 --peak-tflops 67 --type Q4_K --numerics exact --out DIR
 *
 * On this project's CPU-only machines: VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json (set by default
 * when that file exists and the variable is not).
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { GGMLType } from '../gguf/quant-types.ts';
import { weightBytes } from '../harness/weight-bytes.ts';
import { median, syntheticCall } from '../shaders/computer.ts';
import { KERNEL_TYPES } from '../shaders/expert-ffn.ts';
import { mulberry32 } from '../shaders/random.ts';
import { nmse } from '../shaders/reference/expert-call.ts';
import { ExpertRuntime, type ExpertRuntimeOptions, type ExpertSlice, type Regime } from '../shaders/runtime.ts';
import { requestBenchDevice } from '../bench/gpu/bench-device.ts';
import {
  DEFAULT_BATCHED,
  DEFAULT_DECODE,
  DEFAULT_MIN_PAIRS_PER_EXPERT,
  QUICK_SHAPE,
  REALISTIC_SHAPE,
  batchedName,
  bestPerRows,
  decodeName,
  judgedMs,
  suggestThreshold,
  sweepMarkdown,
  sweepPlan,
  type Measurement,
  type SweepResult,
  type SweepShape,
  type ThresholdPoint,
} from './sweep-plan.ts';

const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
if (!process.env.VK_ICD_FILENAMES && !process.env.VK_DRIVER_FILES && existsSync(SWIFTSHADER_ICD)) {
  process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
}
// Imported after VK_ICD_FILENAMES is settled: Dawn reads it when the instance is created.
const { create, globals } = await import('webgpu');

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    type: { type: 'string', default: 'Q4_K' },
    numerics: { type: 'string', default: 'exact' },
    'bandwidth-gbs': { type: 'string', default: '4800' },
    'peak-tflops': { type: 'string', default: '67' },
    iterations: { type: 'string' },
    out: { type: 'string', default: '.cache/artifacts/sweep' },
  },
});
const type = GGMLType[values.type as keyof typeof GGMLType];
if (typeof type !== 'number' || !KERNEL_TYPES.types.includes(type))
  throw new Error(`--type: ${values.type} is not a type the kernels read (${KERNEL_TYPES.types.map((t) => GGMLType[t]).join(', ')})`);
if (values.numerics !== 'exact' && values.numerics !== 'llama')
  throw new Error(`--numerics must be exact or llama, got ${values.numerics}`);
const numerics = values.numerics;
const roofline = { bandwidthGbs: Number(values['bandwidth-gbs']), peakTflops: Number(values['peak-tflops']) };
if (!(roofline.bandwidthGbs > 0 && roofline.peakTflops > 0)) throw new Error('--bandwidth-gbs and --peak-tflops must be positive numbers');
const shape: SweepShape = values.quick ? QUICK_SHAPE : REALISTIC_SHAPE;
const plan = sweepPlan(values.quick);
if (values.iterations) plan.iterations = Number(values.iterations);

Object.assign(globalThis, globals);
const gpu = create([]);
// dawn.node frees its instance when this object is garbage-collected, even while its device is in use (docs/kernels.md).
(globalThis as { expertswarmGpu?: GPU }).expertswarmGpu = gpu;
const got = await requestBenchDevice(gpu, 'kernel sweep device');
if (!got) {
  console.error("no WebGPU adapter (on a CPU-only machine set VK_ICD_FILENAMES to SwiftShader's ICD)");
  process.exit(1);
}
const { device } = got;
const info = got.adapter.info;
const adapter = `${info.vendor} / ${info.architecture} / ${info.device} / ${info.description}${got.isFallbackAdapter ? ' (fallback adapter)' : ''}`;
console.log(`adapter: ${adapter}; timestamp-query: ${got.timestampQuery ? 'yes' : 'no'}`);

function slice(): ExpertSlice {
  const r = mulberry32(7);
  const n = shape.nExpert * shape.nEmbd * shape.ff;
  const mat = (scale: number): Uint8Array => weightBytes(type, n, r, scale);
  return {
    nEmbd: shape.nEmbd,
    ff: shape.ff,
    nExpert: shape.nExpert,
    types: { gate: type, up: type, down: type },
    gate: mat(1 / Math.sqrt(shape.nEmbd)),
    up: mat(1 / Math.sqrt(shape.nEmbd)),
    down: mat(1 / Math.sqrt(shape.ff)),
  };
}

const t0 = performance.now();
const s = slice();
console.log(`slice quantized in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
const bytesPerExpert = (s.gate.length + s.up.length + s.down.length) / shape.nExpert;
const calls = new Map<number, ReturnType<typeof syntheticCall>>();
const callFor = (rows: number): ReturnType<typeof syntheticCall> => {
  let c = calls.get(rows);
  if (!c) {
    c = syntheticCall({ ...shape, nTokens: rows }, 1000 + rows);
    calls.set(rows, c);
  }
  return c;
};
/** The default config's output per (regime, rows): what every other config is compared with. */
const reference = new Map<string, Float32Array>();
const measurements: Measurement[] = [];
const skipped: string[] = [];

/** Times one runtime at each row count in `regime`. */
async function measure(
  rt: ExpertRuntime,
  regime: Regime,
  name: string,
  rowsList: readonly number[],
  isDefault: boolean,
): Promise<Measurement[]> {
  const out: Measurement[] = [];
  for (const rows of rowsList) {
    const c = callFor(rows);
    let y: Float32Array = new Float32Array(0);
    for (let i = 0; i < plan.warmup; i++) y = await rt.compute(c.rows, c.ids, c.probs, rows, shape.nUsed, { regime });
    const wall: number[] = [];
    const kernel: number[] = [];
    const onTiming = (t: { kernelMs: number }): void => {
      kernel.push(t.kernelMs);
    };
    for (let i = 0; i < plan.iterations; i++) {
      const start = performance.now();
      y = await rt.compute(c.rows, c.ids, c.probs, rows, shape.nUsed, { regime, onTiming });
      wall.push(performance.now() - start);
    }
    const key = `${regime}/${rows}`;
    if (isDefault) reference.set(key, y);
    const distinct = new Set(c.ids).size;
    const m: Measurement = {
      regime,
      config: name,
      rows,
      pairsPerExpert: (rows * shape.nUsed) / distinct,
      wallMs: median(wall),
      kernelMs: kernel.length ? median(kernel) : null,
      weightBytes: distinct * bytesPerExpert,
      flops: 2 * 3 * shape.nEmbd * shape.ff * rows * shape.nUsed,
      nmseVsDefault: reference.has(key) ? nmse(y, reference.get(key)!) : NaN,
    };
    out.push(m);
    console.log(
      `${regime.padEnd(7)} ${name.padEnd(16)} ${String(rows).padStart(4)} rows: wall ${m.wallMs.toFixed(3)} ms, kernel ${m.kernelMs === null ? '-' : m.kernelMs.toFixed(3)} ms`,
    );
  }
  return out;
}

async function withRuntime<T>(options: ExpertRuntimeOptions, name: string, f: (rt: ExpertRuntime) => Promise<T>): Promise<T | null> {
  let rt: ExpertRuntime | null = null;
  try {
    rt = await ExpertRuntime.create(device, s, { ...options, numerics });
    return await f(rt);
  } catch (e) {
    skipped.push(`${name}: ${(e instanceof Error ? e.message : String(e)).split('\n')[0]}`);
    console.log(`skipped ${name}: ${skipped.at(-1)}`);
    return null;
  } finally {
    rt?.dispose();
  }
}

// Defaults first, so every other config has their output to compare with.
const decodeConfigs = [DEFAULT_DECODE, ...plan.decode.filter((c) => decodeName(c) !== decodeName(DEFAULT_DECODE))];
for (const c of decodeConfigs) {
  const name = decodeName(c);
  const ms = await withRuntime(c, `decode ${name}`, (rt) => measure(rt, 'decode', name, plan.decodeRows, c === DEFAULT_DECODE));
  if (ms) measurements.push(...ms);
}
const batchedConfigs = [DEFAULT_BATCHED, ...plan.batched.filter((c) => batchedName(c) !== batchedName(DEFAULT_BATCHED))];
for (const c of batchedConfigs) {
  const name = batchedName(c);
  const ms = await withRuntime(c, `batched ${name}`, (rt) => measure(rt, 'batched', name, plan.batchedRows, c === DEFAULT_BATCHED));
  if (ms) measurements.push(...ms);
}

// The regime threshold: both regimes at the threshold rows, each with its best config over its own sweep.
const bestConfig = (regime: Regime): string | undefined => {
  const best = bestPerRows(measurements, regime);
  const votes = new Map<string, number>();
  for (const m of best) votes.set(m.config, (votes.get(m.config) ?? 0) + 1);
  return [...votes.entries()].sort((a, b) => b[1] - a[1])[0]?.[0];
};
const decodeBest = decodeConfigs.find((c) => decodeName(c) === bestConfig('decode')) ?? DEFAULT_DECODE;
const batchedBest = batchedConfigs.find((c) => batchedName(c) === bestConfig('batched')) ?? DEFAULT_BATCHED;
const points: ThresholdPoint[] = [];
// One runtime serves both regimes when the best configs share workgroupSize; otherwise batched gets its own.
const same = decodeBest.workgroupSize === batchedBest.workgroupSize;
await withRuntime(
  same ? { ...decodeBest, tileRows: batchedBest.tileRows, tileCols: batchedBest.tileCols } : decodeBest,
  'threshold',
  async (rt) => {
    const d = await measure(rt, 'decode', `threshold ${decodeName(decodeBest)}`, plan.thresholdRows, false);
    const b = same
      ? await measure(rt, 'batched', `threshold ${batchedName(batchedBest)}`, plan.thresholdRows, false)
      : ((await withRuntime(batchedBest, 'threshold batched', (rt2) =>
          measure(rt2, 'batched', `threshold ${batchedName(batchedBest)}`, plan.thresholdRows, false),
        )) ?? []);
    for (const dm of d) {
      const bm = b.find((x) => x.rows === dm.rows);
      if (bm) points.push({ rows: dm.rows, pairsPerExpert: dm.pairsPerExpert, decodeMs: judgedMs(dm), batchedMs: judgedMs(bm) });
    }
  },
);

const result: SweepResult = {
  when: new Date().toISOString(),
  adapter,
  timestampQuery: got.timestampQuery,
  type: values.type,
  numerics,
  shape,
  roofline,
  plan,
  measurements,
  threshold: { points, suggested: suggestThreshold(points), current: DEFAULT_MIN_PAIRS_PER_EXPERT },
  skipped,
};
const markdown = sweepMarkdown(result);
mkdirSync(values.out, { recursive: true });
const stem = join(values.out, `sweep-${values.type}-${values.quick ? 'quick' : 'full'}-${result.when.replace(/[:.]/g, '-')}`);
writeFileSync(`${stem}.md`, markdown);
writeFileSync(`${stem}.json`, `${JSON.stringify(result, (_, v) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v), 2)}\n`);
console.log(`\n${markdown}`);
console.log(`wrote ${stem}.md and ${stem}.json (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
device.destroy();
process.exit(0);
