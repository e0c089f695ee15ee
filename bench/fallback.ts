/**
 * `npm run bench:fallback`: the wasm fallback (our SIMD kernel, shaders/wasm/) against the old onnxruntime dense
 * fallback (shaders/ort/, every expert for every row from f32 copies) and against llama.cpp's own CPU backend
 * computing the same pairs (coordinator/bin/linkcpp-expert-ref --repeat: llama_xd_compute_pairs, i.e. the
 * coordinator's local mul_mat_id graph), all on one core, on the realistic shape (bench/shapes.ts: n_embd 2048,
 * ff 768, top-8) with a 16-expert Q4_K slice, for 1, 4 and 64 rows, in llama numerics (what the coordinator computes).
 * Ours and native alternate in rounds. Prints CPU ms per call (process CPU time: a busy machine does not inflate it as
 * it does wall time, which is printed too),
 * GFLOP/s of the routed pairs, ours / native from the median CPU times as a throughput ratio (goal ≥ 0.5), the
 * memory of each fallback, and whether ours returned the coordinator's sums bit for bit.
 *
 *   npm run bench:fallback                 # all three; re-runs itself under `taskset -c 1`, native under `taskset -c 0`
 *   npm run bench:fallback -- --quick      # fewer repetitions, no ORT
 *   npm run bench:fallback -- --no-ort     # skip the ORT dense fallback (≈ 300 MB of f32 weights, slow to build)
 *   npm run bench:fallback -- --simd       # our baseline-SIMD build even where relaxed SIMD is available
 *   npm run bench:fallback -- --rounds 8   # more rounds (default 4) on a noisy machine
 *
 * Where the relaxed build's relaxed_madd fuses (x86 with FMA3, ARM), the same build with ggml's FMAs emulated in
 * f64 (`emulateFma`: what a machine whose relaxed_madd does not fuse runs) is timed in the same rounds, its own
 * column, so the fused step's gain is measured side by side.
 *
 * The npm script runs Node with `--experimental-wasm-relaxed-simd` (Node 20 needs it; Chromium has relaxed SIMD by
 * default), so ours is the relaxed-simd build (shaders/wasm/features.ts) unless `--simd` is given; the header says which.
 *
 * The slice is generated once (random weights quantized to Q4_K, seed 5) and cached in .cache/bench-fallback/.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import * as ort from 'onnxruntime-web';
import { EXPERT_MATRICES, expertTensorName } from '../gguf/expert-slice.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { quantize } from '../gguf/quantize.ts';
import { encodeGGUF } from '../gguf/writer.ts';
import { callFlops, median, syntheticCall, type ExpertComputer, type MeasureCall } from '../shaders/computer.ts';
import { OrtExpertFallback } from '../shaders/ort/fallback.ts';
import type { ExpertSlice } from '../shaders/slice.ts';
import { nodeExpertKernel } from '../shaders/wasm/build.ts';
import { type TouchChoice, WasmExpertFallback } from '../shaders/wasm/fallback.ts';
import { bestKernelVariant } from '../shaders/wasm/features.ts';
import { LINKCPP_EXPERT_REF, encodeRecord } from '../harness/native-reference.ts';
import { mulberry32 } from '../shaders/random.ts';
import { REALISTIC } from './shapes.ts';

const argv = process.argv.slice(2);
const args = new Set(argv);
const roundsArg = argv.indexOf('--rounds');
const ROUNDS = roundsArg >= 0 ? Number(argv[roundsArg + 1]) : 4;
if (!Number.isSafeInteger(ROUNDS) || ROUNDS < 1 || ROUNDS > 100) throw new Error('--rounds takes an integer in [1, 100]');
const quick = args.has('--quick');
const withOrt = !quick && !args.has('--no-ort');
const variant = args.has('--simd') ? 'simd' : bestKernelVariant();
const OUR_CPU = 1;
const NATIVE_CPU = 0;

// One core for us: re-run under taskset (V8's helper threads share that core too).
if (!process.env.EXPERTSWARM_BENCH_PINNED && cpus().length > 1 && spawnSync('taskset', ['-V']).status === 0) {
  const r = spawnSync('taskset', ['-c', String(OUR_CPU), process.execPath, ...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, EXPERTSWARM_BENCH_PINNED: '1' },
  });
  process.exit(r.status ?? 1);
}
const pinned = process.env.EXPERTSWARM_BENCH_PINNED === '1';

const N_EXPERT = 16;
const SHAPE = { nEmbd: REALISTIC.nEmbd, ff: REALISTIC.ff, nExpert: N_EXPERT };
const N_USED = REALISTIC.nExpertUsed;
const ROWS = [1, 4, 64];
const CACHE = fileURLToPath(new URL('../.cache/bench-fallback/', import.meta.url));

/** The cached slice's GGUF (the three expert tensors of layer 0), made on first use. */
function benchSlice(): { slice: ExpertSlice; gguf: string } {
  const { nEmbd, ff, nExpert } = SHAPE;
  const gguf = join(CACHE, `q4k-${nEmbd}x${ff}x${nExpert}-seed5.gguf`);
  const raw = join(CACHE, `q4k-${nEmbd}x${ff}x${nExpert}-seed5.slice`);
  const types = { gate: GGMLType.Q4_K, up: GGMLType.Q4_K, down: GGMLType.Q4_K };
  const per = nExpert * nEmbd * ff;
  if (!existsSync(gguf) || !existsSync(raw)) {
    console.log(`generating the Q4_K slice (${nExpert} experts of ${nEmbd}↔${ff}, ~20 s)…`);
    const r = mulberry32(5);
    const matrix = (cols: number): Uint8Array => {
      const w = new Float32Array(per);
      for (let i = 0; i < per; i++) w[i] = ((r() * 2 - 1) * 1) / Math.sqrt(cols);
      return quantize(GGMLType.Q4_K, w);
    };
    const m = { gate: matrix(nEmbd), up: matrix(nEmbd), down: matrix(ff) };
    mkdirSync(CACHE, { recursive: true });
    writeFileSync(
      gguf,
      encodeGGUF({
        tensors: EXPERT_MATRICES.map((k) => ({
          name: expertTensorName(0, k),
          dims: k === 'down' ? [ff, nEmbd, nExpert] : [nEmbd, ff, nExpert],
          type: GGMLType.Q4_K,
          data: m[k],
        })),
      }),
    );
    writeFileSync(raw, Buffer.concat([m.gate, m.up, m.down]));
  }
  const all = new Uint8Array(readFileSync(raw));
  const third = all.length / 3;
  return {
    slice: { ...SHAPE, types, gate: all.subarray(0, third), up: all.subarray(third, 2 * third), down: all.subarray(2 * third) },
    gguf,
  };
}

interface Timed {
  /** Wall ms of each timed call. */
  ms: number[];
  /** CPU ms of each (this process / the tool's clock()): what a busy machine does not inflate. */
  cpu: number[];
  out: Float32Array;
}

/** `reps` timed calls after `warm` untimed ones (and the last warm-up's result). */
async function timeCalls(fb: ExpertComputer, c: MeasureCall, reps: number, warm = 1): Promise<Timed> {
  const { rows, ids, probs } = syntheticCall(c);
  let out = await fb.compute(rows, ids, probs, c.nTokens, c.nUsed);
  for (let i = 1; i < warm; i++) out = await fb.compute(rows, ids, probs, c.nTokens, c.nUsed);
  const ms: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < reps; i++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await fb.compute(rows, ids, probs, c.nTokens, c.nUsed);
    ms.push(performance.now() - t0);
    const dc = process.cpuUsage(c0);
    cpu.push((dc.user + dc.system) / 1000);
  }
  return { ms, cpu, out };
}

/** linkcpp-expert-ref on one core, each call `warm` + `reps` times, the first `warm` untimed: ms per call and its sums. */
async function timeNative(gguf: string, calls: MeasureCall[], reps: number, warm: number): Promise<Timed[]> {
  const taskset = spawnSync('taskset', ['-V']).status === 0;
  const argv = [LINKCPP_EXPERT_REF, '-m', gguf, '-t', '1', '--repeat', String(warm + reps)];
  const p = taskset ? spawn('taskset', ['-c', String(NATIVE_CPU), ...argv]) : spawn(argv[0]!, argv.slice(1));
  const out: Buffer[] = [];
  let err = '';
  p.stdout.on('data', (d: Buffer) => out.push(d));
  p.stderr.on('data', (d: Buffer) => {
    err += d.toString();
  });
  for (const c of calls) p.stdin.write(encodeRecord(0, { ...syntheticCall(c), nTokens: c.nTokens, nUsed: c.nUsed }));
  p.stdin.end();
  const code = await new Promise<number | null>((resolve) => p.once('exit', resolve));
  if (code !== 0) throw new Error(`linkcpp-expert-ref failed (${code}): ${err}`);
  const sums = Buffer.concat(out);
  const timings = err
    .split('\n')
    .filter((l) => l.startsWith('{"timing"'))
    .map((l) => (JSON.parse(l) as { timing: { ms: number[]; cpu_ms: number[] } }).timing);
  let o = 0;
  return calls.map((c, i) => {
    const n = c.nTokens * SHAPE.nEmbd;
    const s = new Float32Array(n);
    new Uint8Array(s.buffer).set(sums.subarray(o, o + 4 * n));
    o += 4 * n;
    return { ms: timings[i]?.ms.slice(warm) ?? [], cpu: timings[i]?.cpu_ms.slice(warm) ?? [], out: s };
  });
}

function sameBits(a: Float32Array, b: Float32Array): number {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let diff = 0;
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) diff++;
  return diff;
}

const mb = (b: number): string => `${(b / 2 ** 20).toFixed(1)} MiB`;
const pad = (s: string, n: number): string => s.padStart(n);

const { slice, gguf } = benchSlice();
const calls: MeasureCall[] = ROWS.map((nTokens) => ({ ...SHAPE, nTokens, nUsed: N_USED }));
const reps = (rows: number): number => (quick ? 3 : rows >= 64 ? 3 : 7);
// Untimed calls before the timed ones. After a call of another shape, native's first few calls of a shape run up to
// 3× slower (1 row: ~5 ms falling to ~1.5 ms over 6–10 calls, on a Xeon with a large L3), while ours runs at its
// steady speed from the second call on; both sides are timed in their steady state.
const WARM = quick ? 1 : 10;
const warmOurs = (rows: number): number => (rows >= 64 ? 1 : WARM);
const cpu = cpus()[0]?.model ?? 'unknown CPU';
console.log(`bench:fallback — ${cpu}, Node ${process.version}; ${N_EXPERT} experts of n_embd ${SHAPE.nEmbd} ↔ ff ${SHAPE.ff}, Q4_K,`);
console.log(
  `top-${N_USED}, llama numerics; ours the ${variant} build${variant === 'simd' && bestKernelVariant() === 'simd' ? ' (no relaxed SIMD in this runtime)' : ''}, ${pinned ? `pinned to CPU ${OUR_CPU}` : 'not pinned (no taskset)'}, native ` +
    `linkcpp-expert-ref -t 1 on CPU ${NATIVE_CPU}; alternating in rounds`,
);

// Ours and native alternate in rounds, so a busy machine (other jobs on the other core, the shared L3) weighs on both
// alike; each side's best and median over all rounds are printed, the ratio from the best.
const kernel = await nodeExpertKernel(variant);
const ours = await WasmExpertFallback.create(kernel, slice, { numerics: 'llama' });
/** The touch-ahead measurement of the fallback as it started (WasmExpertFallback.touch). */
const touchLine = (t: TouchChoice): string =>
  `${t.on ? 'on' : 'off'}${t.onMs !== null && t.offMs !== null ? ` (1-token call ${t.onMs.toFixed(2)} ms on, ${t.offMs.toFixed(2)} ms off)` : ''}`;
const emulated = ours.fusedMadd ? await WasmExpertFallback.create(kernel, slice, { numerics: 'llama', emulateFma: true }) : null;
const rounds = quick ? 1 : ROUNDS;
const timed = (): Timed[] => calls.map(() => ({ ms: [], cpu: [], out: new Float32Array(0) }));
const oursT = timed();
const emulatedT = timed();
const nativeT = timed();
for (let round = 0; round < rounds; round++) {
  for (const [fb, into] of emulated
    ? ([
        [ours, oursT],
        [emulated, emulatedT],
      ] as const)
    : ([[ours, oursT]] as const)) {
    for (const [i, c] of calls.entries()) {
      const t = await timeCalls(fb, c, reps(c.nTokens), warmOurs(c.nTokens));
      into[i]!.ms.push(...t.ms);
      into[i]!.cpu.push(...t.cpu);
      into[i]!.out = t.out;
    }
  }
  for (const [i, t] of (await timeNative(gguf, calls, quick ? 3 : 7, WARM)).entries()) {
    nativeT[i]!.ms.push(...t.ms);
    nativeT[i]!.cpu.push(...t.cpu);
    nativeT[i]!.out = t.out;
  }
}
const oursMem = ours.memory();
await ours.dispose();
await emulated?.dispose();

let ortT: (Timed | null)[] = calls.map(() => null);
let ortBytes = 0;
if (withOrt) {
  ort.env.wasm.numThreads = 1;
  const t0 = performance.now();
  const dense = await OrtExpertFallback.create(ort as never, slice, { numerics: 'llama' });
  console.log(`(ORT dense fallback built in ${((performance.now() - t0) / 1000).toFixed(0)} s)`);
  ortBytes = dense.modelBytes;
  ortT = [];
  for (const c of calls) ortT.push(await timeCalls(dense, c, reps(c.nTokens)));
  await dense.dispose();
}

const best = (xs: number[]): number => Math.min(...xs);
const fmt = (t: Timed): string => `${median(t.cpu).toFixed(2)} (${median(t.ms).toFixed(1)})`;
console.log('');
console.log('CPU ms per call, median (wall ms, median); ours/native from the median CPU times; GFLOP/s of the routed');
console.log('pairs per CPU second (ours); best CPU ms ours / native; ours with FMA emulated (where it fuses), median');
console.log(
  `rows | ${pad('ours wasm', 16)} | ${pad('ORT dense', 16)} | ${pad('native', 16)} | ours/native | GFLOP/s | best ours/native | ${pad('FMA emulated', 16)} | bits vs native`,
);
calls.forEach((c, i) => {
  const o = oursT[i]!;
  const n = nativeT[i]!;
  const d = ortT[i];
  const e = emulatedT[i]!;
  const diff = sameBits(o.out, n.out) + (emulated ? sameBits(e.out, n.out) : 0);
  const emulatedCol = emulated ? `${median(e.cpu).toFixed(2)} (${(median(n.cpu) / median(e.cpu)).toFixed(2)}×)` : '—';
  console.log(
    `${pad(String(c.nTokens), 4)} | ${pad(fmt(o), 16)} | ${pad(d ? fmt(d) : '—', 16)} | ${pad(fmt(n), 16)} | ` +
      `${pad((median(n.cpu) / median(o.cpu)).toFixed(2), 11)} | ${pad((callFlops(c) / (median(o.cpu) * 1e6)).toFixed(2), 7)} | ` +
      `${pad(`${best(o.cpu).toFixed(2)} / ${best(n.cpu).toFixed(2)}`, 16)} | ${pad(emulatedCol, 16)} | ${diff === 0 ? 'identical' : `${diff} of ${o.out.length} differ`}`,
  );
});
console.log('');
console.log(
  `memory: ours ${mb(oursMem.wasmBytes)} wasm (slice ${mb(oursMem.sliceBytes)}, ${mb(oursMem.loadedBytes)} before any call)` +
    (withOrt ? `; ORT dense ${mb(ortBytes)} of f32 model` : ''),
);
console.log(
  `ours/native = native CPU ms / ours CPU ms (throughput ratio; goal ≥ 0.5); ours = the ${variant} build, FMA ${ours.fusedMadd ? 'fused (relaxed_madd)' : 'emulated in f64'}, touch-ahead ${touchLine(ours.touch)}; ${rounds} rounds`,
);
