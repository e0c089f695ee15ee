/**
 * Our WGSL expert FFN on whatever GPU Dawn finds through Vulkan (npm `webgpu`), at realistic MoE shapes:
 * qwen3-30B-A3B-like experts (n_embd 2048, expert ff 768, top-8), a slice of 16 experts.
 * Prints ms per call (median; each call includes upload of the rows and readback), GFLOP/s and weight GB/s, for the
 * kernels with every optional feature the adapter has ('subgroups', 'shader-f16') and for the base kernels side by
 * side, with the NMSE between the two outputs (the f16 tiles' numbers checked on real hardware: expect ≤ 1e-5); and
 * numerics side by side: exact vs llama with the float kernels on rounded values (integerDot 'float') vs llama with
 * int8 dot products (integerDot 'auto': dot4I8Packed where WGSL has it), times and ratios, with the llama results'
 * NMSE against the reference with ggml's rounding on the decode shapes (compareLlama; the batched shapes are too
 * large for the CPU reference).
 * Where the adapter has 'timestamp-query' each call also reports the GPU time of its compute pass: the report gives
 * kernel ms beside wall ms per call (upload, submit, kernels, readback) and wall ÷ kernel, and the weight GB/s and
 * GFLOP/s both ways. The fair onnxruntime baseline on the CPU (bench/ort-routed.ts on onnxruntime-web's wasm EP: only
 * the routed pairs, MatMulNBits weights where the type maps) runs on the same calls and the ratio is printed
 * (onnxruntime-web's webgpu EP needs a browser: bench:kernels has it); `--skip-ort` leaves it out.
 * Every type the kernels read (KERNEL_TYPES, Q4_K first) unless `--types` names some (bench/types-arg.ts); the weights
 * come from harness/weight-bytes.ts (random valid super-blocks for the types only llama.cpp's quantizer writes). Each
 * call's line gives the dispatches, submits and readbacks it took (onCounts), and one closing table per run puts the
 * types side by side (kernel and wall ms per shape, the auto kernels, and the counts).
 * Used for the one-off run on a lent GPU machine (docs/kernels-bench.md); on SwiftShader it is very slow.
 *
 *   node --import tsx bench/gpu/node-gpu.ts [--quick] [--skip-ort] [--types Q4_K,Q8_0 | --types all]
 */
import * as ort from 'onnxruntime-web';
import { create, globals } from 'webgpu';
import { type GGMLType, rowByteSize, typeName } from '../../gguf/quant-types.ts';
import { weightBytes } from '../../harness/weight-bytes.ts';
import { KERNEL_TYPES } from '../../shaders/expert-ffn.ts';
import { median } from '../../shaders/computer.ts';
import { mulberry32 } from '../../shaders/random.ts';
import { dequantizeExperts, nmse } from '../../shaders/reference/expert-call.ts';
import { compareLlama } from '../../shaders/reference/llama-ties.ts';
import { type CallCounts, ExpertRuntime } from '../../shaders/runtime.ts';
import { OrtRoutedExperts, describeForms, type OrtRoutedModule } from '../ort-routed.ts';
import { benchTypes } from '../types-arg.ts';
import { describeTimes, requestBenchDevice } from './bench-device.ts';

Object.assign(globalThis, globals);
const quick = process.argv.includes('--quick');
const skipOrt = process.argv.includes('--skip-ort');
const typesAt = process.argv.indexOf('--types');
if (typesAt >= 0 && !process.argv[typesAt + 1]) throw new Error('--types takes a comma list of ggml type names, or all');
const TYPES = benchTypes(typesAt >= 0 ? process.argv[typesAt + 1] : undefined, KERNEL_TYPES.types);
ort.env.wasm.numThreads = 1;
const gpu = create([]);
// dawn.node frees its instance when this object is garbage-collected, even while its device is in use (docs/kernels.md).
(globalThis as { expertswarmGpu?: GPU }).expertswarmGpu = gpu;
const got = await requestBenchDevice(gpu, 'node-gpu bench device');
if (!got) {
  console.log('no WebGPU adapter');
  process.exit(1);
}
const { adapter, device } = got;
const info = adapter.info;
console.log(
  `adapter: ${info.vendor} / ${info.architecture} / ${info.device} / ${info.description}; features: ${[...device.features].sort().join(' ')}`,
);
console.log(
  got.timestampQuery
    ? "timestamp-query: yes — kernel ms is the GPU time of a call's compute pass; wall ms the whole call (upload, submit, kernels, readback)"
    : 'timestamp-query: no — only wall ms per call (upload, submit, kernels, readback)',
);

const nEmbd = quick ? 256 : 2048;
const ff = quick ? 256 : 768;
const nExpert = quick ? 4 : 16;
const iterations = quick ? 3 : 20;

/** 3 significant digits (SwiftShader's rates are far below 0.1), whole numbers from 100 on. */
const sig = (x: number): string => (x >= 100 ? x.toFixed(0) : x.toPrecision(3));

function weights(n: number, seed: number): Float32Array {
  const r = mulberry32(seed);
  return new Float32Array(n).map(() => (r() - 0.5) * 0.05);
}

/** One (type, shape) of the closing table: the auto kernels' median kernel and wall ms and the counts of a call. */
interface Row {
  type: GGMLType;
  shape: string;
  kernelMs: number | null;
  wallMs: number;
  counts: CallCounts | null;
  ortMs: number | null;
}
const table: Row[] = [];

for (const type of TYPES) {
  const t0 = performance.now();
  const gate = weightBytes(type, nExpert * ff * nEmbd, mulberry32(1), 0.025);
  const up = weightBytes(type, nExpert * ff * nEmbd, mulberry32(2), 0.025);
  const down = weightBytes(type, nExpert * nEmbd * ff, mulberry32(3), 0.025);
  const slice = { nEmbd, ff, nExpert, types: { gate: type, up: type, down: type }, gate, up, down };
  const variants = [
    { name: 'auto', rt: await ExpertRuntime.create(device, slice) },
    { name: 'base', rt: await ExpertRuntime.create(device, slice, { features: [] }) },
    { name: 'llama float', rt: await ExpertRuntime.create(device, slice, { numerics: 'llama', integerDot: 'float' }) },
    { name: 'llama int8', rt: await ExpertRuntime.create(device, slice, { numerics: 'llama' }) },
  ];
  const experts = dequantizeExperts(slice);
  console.log(
    `${typeName(type)}: auto uses [${variants[0]!.rt.capabilities().kernelFeatures.join(', ')}] (${variants[0]!.rt.capabilities().kernelFeaturesReason}); ` +
      `llama int8 runs integerDot '${variants[3]!.rt.capabilities().integerDot}' (${variants[3]!.rt.capabilities().integerDotReason})`,
  );
  const prepS = (performance.now() - t0) / 1000;
  const bytesPerExpert = 2 * ff * rowByteSize(type, nEmbd) + nEmbd * rowByteSize(type, ff);
  for (const [name, nTokens, nUsed] of [
    ['decode', 1, 8],
    ['decode', 4, 8],
    ['batched', 64, 8],
    ['batched', 512, 8],
  ] as const) {
    if (quick && nTokens > 64) continue;
    const used = Math.min(nUsed, nExpert);
    const ids = new Int32Array(nTokens * used).map((_, i) => ((i % used) + Math.floor(i / used) * 3) % nExpert);
    const probs = new Float32Array(nTokens * used).fill(1 / used);
    const rows = weights(nTokens * nEmbd, 7).map((x) => x * 40);
    const regime = name === 'decode' ? 'decode' : 'auto';
    const outs: Float32Array[] = [];
    const medians: number[] = [];
    const pairs = nTokens * used;
    const flops = pairs * 2 * 3 * nEmbd * ff;
    const weightBytes = new Set(ids).size * bytesPerExpert;
    for (const { name: variant, rt } of variants) {
      outs.push(await rt.compute(rows, ids, probs, nTokens, used, { regime })); // compile + warm up
      const times: number[] = [];
      const kernel: number[] = [];
      const onTiming = (t: { kernelMs: number }): void => {
        kernel.push(t.kernelMs);
      };
      let counts: CallCounts | null = null;
      const onCounts = (c: CallCounts): void => {
        counts = c;
      };
      for (let i = 0; i < iterations; i++) {
        const s = performance.now();
        await rt.compute(rows, ids, probs, nTokens, used, { regime, onTiming, onCounts });
        times.push(performance.now() - s);
      }
      const ms = median(times);
      const kernelMs = kernel.length ? median(kernel) : null;
      medians.push(ms);
      const rates = (t: number): string => `${sig(flops / (t / 1000) / 1e9)} GFLOP/s, weights ${sig(weightBytes / (t / 1000) / 1e9)} GB/s`;
      const ran = regime === 'auto' ? rt.planRegime(ids, nTokens, used).regime : regime;
      console.log(
        `${typeName(type).padEnd(5)} ${name.padEnd(7)} ${String(nTokens).padStart(4)} rows × top-${used} (${ran}, ${variant}): ${ms.toFixed(3)} ms/call (min ${Math.min(...times).toFixed(3)}), ${rates(ms)}` +
          (kernelMs !== null && kernelMs > 0 ? `; in kernel time ${rates(kernelMs)}` : ''),
      );
      const per = counts as CallCounts | null;
      const asked = per
        ? `; per call ${per.dispatches} dispatches, ${per.submits} submit, ${per.readbacks} readback${per.readbacks > 1 ? 's (one the timestamps)' : ''}`
        : '';
      console.log(`      ${describeTimes({ wallMs: ms, kernelMs })}${asked}`);
      if (variant === 'auto') table.push({ type, shape: `${name}-${nTokens}`, kernelMs, wallMs: ms, counts: per, ortMs: null });
    }
    if (!skipOrt) {
      const fair = await OrtRoutedExperts.create(ort as unknown as OrtRoutedModule, slice, ids, nTokens, used, { ep: 'wasm' }).catch(
        (e: unknown) => {
          console.log(`      fair ORT wasm: not built (${(e instanceof Error ? e.message : String(e)).split('\n')[0]})`);
          return null;
        },
      );
      if (fair)
        try {
          const out = await fair.compute(rows, ids, probs, nTokens, used);
          const times: number[] = [];
          for (let i = 0; i < Math.min(iterations, 5); i++) {
            const s = performance.now();
            await fair.compute(rows, ids, probs, nTokens, used);
            times.push(performance.now() - s);
          }
          const ms = median(times);
          console.log(
            `      fair ORT wasm (1 thread; ${describeForms(slice.types, fair.forms)}): ${ms.toFixed(3)} ms/call, ` +
              `${sig(flops / (ms / 1000) / 1e9)} GFLOP/s, weights ${sig(fair.weightBytes / (ms / 1000) / 1e9)} GB/s; ` +
              `ours ÷ ORT: ORT ms ÷ ours ms = ${(ms / medians[0]!).toFixed(2)}×; NMSE vs ours ${nmse(out, outs[0]!).toExponential(2)}`,
          );
          table.at(-1)!.ortMs = ms;
        } finally {
          await fair.dispose();
        }
    }
    console.log(
      `      auto vs base: NMSE ${nmse(outs[0]!, outs[1]!).toExponential(2)}, base ms ÷ auto ms = ${(medians[1]! / medians[0]!).toFixed(2)}×`,
    );
    const [exactMs, floatMs, int8Ms] = [medians[0]!, medians[2]!, medians[3]!];
    let accuracy = `llama float vs int8 NMSE ${nmse(outs[2]!, outs[3]!).toExponential(2)}`;
    if (nTokens * used <= 32) {
      const c = { rows, ids, probs, nTokens, nUsed: used };
      const [f, i] = [compareLlama(experts, c, outs[2]!), compareLlama(experts, c, outs[3]!)];
      accuracy +=
        `; vs the rounded reference: float NMSE ${f.nmse.toExponential(2)} (beyond ties ${f.beyondTies.toExponential(2)}), ` +
        `int8 ${i.nmse.toExponential(2)} (${i.beyondTies.toExponential(2)}); exact ${compareLlama(experts, c, outs[0]!).nmse.toExponential(2)}`;
    }
    console.log(
      `      numerics: exact ${exactMs.toFixed(3)} ms, llama float ${floatMs.toFixed(3)} ms (${(floatMs / exactMs).toFixed(2)}× exact), ` +
        `llama int8 ${int8Ms.toFixed(3)} ms (${(int8Ms / exactMs).toFixed(2)}× exact); float ms ÷ int8 ms = ${(floatMs / int8Ms).toFixed(2)}×`,
    );
    console.log(`      ${accuracy}`);
  }
  for (const { rt } of variants) rt.dispose();
  console.log(
    `      (slice of ${nExpert} experts, ${((nExpert * bytesPerExpert) / 1e6).toFixed(1)} MB, quantized and uploaded in ${prepS.toFixed(1)} s)`,
  );
}

// One table per run: the types side by side on each shape (the auto kernels; counts per call).
const cell = (x: number | null): string => (x === null ? 'n/a' : x.toFixed(3));
console.log('');
console.log(`per type (auto kernels, median of ${iterations} calls; kernel = timestamp-query GPU time, wall = the whole compute())`);
console.log('type     shape        kernel ms     wall ms  wall÷kernel  dispatches submits readbacks  fair ORT wasm ms  ORT÷ours');
for (const r of table) {
  const c = r.counts;
  console.log(
    `${typeName(r.type).padEnd(8)} ${r.shape.padEnd(11)} ${cell(r.kernelMs).padStart(10)} ${cell(r.wallMs).padStart(11)} ` +
      `${(r.kernelMs ? `${(r.wallMs / r.kernelMs).toFixed(2)}×` : 'n/a').padStart(12)} ${String(c?.dispatches ?? '?').padStart(11)} ` +
      `${String(c?.submits ?? '?').padStart(7)} ${String(c?.readbacks ?? '?').padStart(9)} ${cell(r.ortMs).padStart(17)} ` +
      `${(r.ortMs === null ? '—' : `${(r.ortMs / r.wallMs).toFixed(2)}×`).padStart(9)}`,
  );
}
device.destroy();
process.exit(0);
