/**
 * `npm run bench:fallback`: the wasm fallback (our SIMD kernel, shaders/wasm/) against the old onnxruntime dense
 * fallback (shaders/ort/, every expert for every row from f32 copies) and against llama.cpp's own CPU backend
 * computing the same pairs (coordinator/bin/linkcpp-expert-ref --repeat: llama_xd_compute_pairs, i.e. the
 * coordinator's local mul_mat_id graph), all on one core, on the realistic shape (bench/shapes.ts: n_embd 2048,
 * ff 768, top-8) with a 16-expert slice, for 1, 4 and 64 rows, in llama numerics (what the coordinator computes),
 * per weight type: every type the fallback reads (WASM_FALLBACK_TYPES, Q4_K first; `--types` to choose), one slice
 * of that type per type, and at the end one table of ours / native per type and row count.
 * Ours and native alternate in rounds. Prints CPU ms per call (process CPU time: a busy machine does not inflate it as
 * it does wall time, which is printed too),
 * GFLOP/s of the routed pairs, ours / native from the median CPU times as a throughput ratio (goal ≥ 0.5), the
 * memory of each fallback, and whether ours returned the coordinator's sums bit for bit.
 *
 *   npm run bench:fallback                 # all three; re-runs itself under `taskset -c 1`, native on that core too
 *   npm run bench:fallback -- --quick      # fewer repetitions, no ORT
 *   npm run bench:fallback -- --no-ort     # skip the ORT dense fallback (≈ 300 MB of f32 weights, slow to build)
 *   npm run bench:fallback -- --simd       # our baseline-SIMD build even where relaxed SIMD is available
 *   npm run bench:fallback -- --rounds 8   # more rounds (default 4) on a noisy machine
 *   npm run bench:fallback -- --types Q4_K,IQ2_XXS   # only these types (ggml names; default: all the fallback reads)
 *   npm run bench:fallback -- --native-cpu 0         # native on another core (before 2026-12-07: core 0)
 *   npm run bench:fallback -- --experts 128 --cold   # as when serving: other experts in every timed call
 *
 * By default every timed call of a shape routes to the same experts, so a 1-row call's 8 experts (21 MB at Q4_K) are
 * in the caches from the call before, for both sides. `--cold` gives each call (timed or not) its own routing
 * (syntheticCall with its own seed), as a volunteer's calls have when serving; with `--experts 128` (a whole layer of
 * the realistic shape, 333 MB at Q4_K) most of each call's weights then come from memory, on both sides alike.
 *
 * Ours and native share one core by default: they take turns, so neither slows the other, and the ratio does not
 * move with how busy each core's neighbours on the host are. On this project's 2-vCPU guest the two cores drifted
 * apart within minutes (2026-12-07: native 1.07 then 1.66 ms for the same 1-row call on core 0 while ours ran at
 * 4.0 then 2.2 ms on core 1, so Q4_K's ratio read 0.27 and then 0.77).
 *
 * Where the relaxed build's relaxed_madd fuses (x86 with FMA3, ARM), the same build with ggml's FMAs emulated in
 * f64 (`emulateFma`: what a machine whose relaxed_madd does not fuse runs) is timed in the same rounds, its own
 * column, so the fused step's gain is measured side by side.
 *
 * The npm script runs Node with `--experimental-wasm-relaxed-simd` (Node 20 needs it; Chromium has relaxed SIMD by
 * default), so ours is the relaxed-simd build (shaders/wasm/features.ts) unless `--simd` is given; the header says which.
 *
 * Each type's slice is generated once (harness/weight-bytes.ts: uniform weights quantized to the type, or random valid
 * super-blocks for the types only llama.cpp's quantizer writes; seed 5) and cached in .cache/bench-fallback/. A type
 * the generator cannot make bytes for is skipped with a note. Bits: the types whose llama numerics are ggml's own
 * arithmetic (WASM_BIT_EXACT_TYPES) should be `identical` to native; the others (f32 sums) show how many values
 * differ and their NMSE against native.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import * as ort from 'onnxruntime-web';
import { EXPERT_MATRICES, expertTensorName } from '../gguf/expert-slice.ts';
import { type GGMLType, rowByteSize, typeName } from '../gguf/quant-types.ts';
import { encodeGGUF } from '../gguf/writer.ts';
import { callFlops, median, syntheticCall, type ExpertComputer, type MeasureCall } from '../shaders/computer.ts';
import { OrtExpertFallback } from '../shaders/ort/fallback.ts';
import type { ExpertSlice } from '../shaders/slice.ts';
import { nodeExpertKernel } from '../shaders/wasm/build.ts';
import { type TouchChoice, WASM_BIT_EXACT_TYPES, WASM_FALLBACK_TYPES, WasmExpertFallback } from '../shaders/wasm/fallback.ts';
import { bestKernelVariant } from '../shaders/wasm/features.ts';
import { LINKCPP_EXPERT_REF, encodeRecord } from '../harness/native-reference.ts';
import { weightBytes } from '../harness/weight-bytes.ts';
import { nmse } from '../shaders/reference/expert-call.ts';
import { mulberry32 } from '../shaders/random.ts';
import { REALISTIC } from './shapes.ts';
import { benchTypes } from './types-arg.ts';

const argv = process.argv.slice(2);
const args = new Set(argv);
const roundsArg = argv.indexOf('--rounds');
const ROUNDS = roundsArg >= 0 ? Number(argv[roundsArg + 1]) : 4;
if (!Number.isSafeInteger(ROUNDS) || ROUNDS < 1 || ROUNDS > 100) throw new Error('--rounds takes an integer in [1, 100]');
const typesArg = argv.indexOf('--types');
if (typesArg >= 0 && !argv[typesArg + 1]) throw new Error('--types takes a comma list of ggml type names, or all');
const TYPES = benchTypes(typesArg >= 0 ? argv[typesArg + 1] : undefined, WASM_FALLBACK_TYPES.types);
const quick = args.has('--quick');
const withOrt = !quick && !args.has('--no-ort');
const variant = args.has('--simd') ? 'simd' : bestKernelVariant();
const OUR_CPU = 1;
const nativeArg = argv.indexOf('--native-cpu');
const NATIVE_CPU = nativeArg >= 0 ? Number(argv[nativeArg + 1]) : Math.min(OUR_CPU, cpus().length - 1);
if (!Number.isInteger(NATIVE_CPU) || NATIVE_CPU < 0 || NATIVE_CPU >= cpus().length)
  throw new Error(`--native-cpu takes a core of this machine (0 to ${cpus().length - 1})`);

// One core for us: re-run under taskset (V8's helper threads share that core too).
if (!process.env.EXPERTSWARM_BENCH_PINNED && cpus().length > 1 && spawnSync('taskset', ['-V']).status === 0) {
  const r = spawnSync('taskset', ['-c', String(OUR_CPU), process.execPath, ...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, EXPERTSWARM_BENCH_PINNED: '1' },
  });
  process.exit(r.status ?? 1);
}
const pinned = process.env.EXPERTSWARM_BENCH_PINNED === '1';

const expertsArg = argv.indexOf('--experts');
const N_EXPERT = expertsArg >= 0 ? Number(argv[expertsArg + 1]) : 16;
if (!Number.isSafeInteger(N_EXPERT) || N_EXPERT < REALISTIC.nExpertUsed || N_EXPERT > 256)
  throw new Error(`--experts takes an integer in [${REALISTIC.nExpertUsed}, 256]`);
/** Each call (timed or not) with its own routing: the experts' weights mostly from memory, as when serving. */
const COLD = args.has('--cold');
const SHAPE = { nEmbd: REALISTIC.nEmbd, ff: REALISTIC.ff, nExpert: N_EXPERT };
const N_USED = REALISTIC.nExpertUsed;
const ROWS = [1, 4, 64];
const CACHE = fileURLToPath(new URL('../.cache/bench-fallback/', import.meta.url));

/** The cached slice of `type` and its GGUF (the three expert tensors of layer 0), made on first use. */
function benchSlice(type: GGMLType): { slice: ExpertSlice; gguf: string } {
  const { nEmbd, ff, nExpert } = SHAPE;
  const stem = join(CACHE, `${typeName(type).toLowerCase()}-${nEmbd}x${ff}x${nExpert}-seed5`);
  const [gguf, raw] = [`${stem}.gguf`, `${stem}.slice`];
  const types = { gate: type, up: type, down: type };
  const per = nExpert * nEmbd * ff;
  if (!existsSync(gguf) || !existsSync(raw)) {
    console.log(`generating the ${typeName(type)} slice (${nExpert} experts of ${nEmbd}↔${ff}, up to ~20 s)…`);
    const r = mulberry32(5);
    const m = {
      gate: weightBytes(type, per, r, 1 / Math.sqrt(nEmbd)),
      up: weightBytes(type, per, r, 1 / Math.sqrt(nEmbd)),
      down: weightBytes(type, per, r, 1 / Math.sqrt(ff)),
    };
    mkdirSync(CACHE, { recursive: true });
    writeFileSync(
      gguf,
      encodeGGUF({
        tensors: EXPERT_MATRICES.map((k) => ({
          name: expertTensorName(0, k),
          dims: k === 'down' ? [ff, nEmbd, nExpert] : [nEmbd, ff, nExpert],
          type,
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

/** `reps` timed calls after `warm` untimed ones (and the last call's result). */
async function timeCalls(fb: ExpertComputer, c: MeasureCall, reps: number, warm = 1): Promise<Timed> {
  const same = COLD ? null : syntheticCall(c);
  /** The inputs of the i-th call (warm ones first): the same every time, or (--cold) each its own, as timeNative's. */
  const input = (i: number): ReturnType<typeof syntheticCall> => same ?? syntheticCall(c, coldSeed(i, warm + reps));
  let out: Float32Array = new Float32Array(0);
  for (let i = 0; i < warm; i++) {
    const { rows, ids, probs } = input(i);
    out = await fb.compute(rows, ids, probs, c.nTokens, c.nUsed);
  }
  const ms: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < reps; i++) {
    const { rows, ids, probs } = input(warm + i);
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    out = await fb.compute(rows, ids, probs, c.nTokens, c.nUsed);
    ms.push(performance.now() - t0);
    const dc = process.cpuUsage(c0);
    cpu.push((dc.user + dc.system) / 1000);
  }
  return { ms, cpu, out };
}

/**
 * The seed of the i-th of n calls of a shape under --cold: the last call (the one whose sums are compared) has seed 1
 * on both sides, as without --cold; the others 1000 + i.
 */
function coldSeed(i: number, n: number): number {
  return i === n - 1 ? 1 : 1000 + i;
}

/**
 * linkcpp-expert-ref on one core, each call `warm` + `reps` times, the first `warm` untimed: ms per call and its sums.
 * Under --cold each of those calls is a record of its own with its own routing (coldSeed), run once and timed
 * (`--cold`: no untimed compute of the record first).
 */
async function timeNative(gguf: string, calls: MeasureCall[], reps: number, warm: number): Promise<Timed[]> {
  const taskset = spawnSync('taskset', ['-V']).status === 0;
  const n = warm + reps;
  const argv = [LINKCPP_EXPERT_REF, '-m', gguf, '-t', '1', '--repeat', String(COLD ? 1 : n), ...(COLD ? ['--cold'] : [])];
  const p = taskset ? spawn('taskset', ['-c', String(NATIVE_CPU), ...argv]) : spawn(argv[0]!, argv.slice(1));
  const out: Buffer[] = [];
  let err = '';
  p.stdout.on('data', (d: Buffer) => out.push(d));
  p.stderr.on('data', (d: Buffer) => {
    err += d.toString();
  });
  for (const c of calls) {
    if (!COLD) p.stdin.write(encodeRecord(0, { ...syntheticCall(c), nTokens: c.nTokens, nUsed: c.nUsed }));
    else
      for (let i = 0; i < n; i++)
        p.stdin.write(encodeRecord(0, { ...syntheticCall(c, coldSeed(i, n)), nTokens: c.nTokens, nUsed: c.nUsed }));
  }
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
    const len = c.nTokens * SHAPE.nEmbd;
    const s = new Float32Array(len);
    // (every record's sums are written once; under --cold the call's last record is the compared one)
    if (COLD) o += 4 * len * (n - 1);
    new Uint8Array(s.buffer).set(sums.subarray(o, o + 4 * len));
    o += 4 * len;
    if (!COLD) return { ms: timings[i]?.ms.slice(warm) ?? [], cpu: timings[i]?.cpu_ms.slice(warm) ?? [], out: s };
    const mine = timings.slice(i * n + warm, (i + 1) * n);
    return { ms: mine.flatMap((t) => t.ms), cpu: mine.flatMap((t) => t.cpu_ms), out: s };
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

const calls: MeasureCall[] = ROWS.map((nTokens) => ({ ...SHAPE, nTokens, nUsed: N_USED }));
const reps = (rows: number): number => (quick ? 3 : rows >= 64 ? 3 : 7);
// Untimed calls before the timed ones. After a call of another shape, native's first few calls of a shape run up to
// 3× slower (1 row: ~5 ms falling to ~1.5 ms over 6–10 calls, on a Xeon with a large L3), while ours runs at its
// steady speed from the second call on; both sides are timed in their steady state.
const WARM = quick ? 1 : 10;
const warmOurs = (rows: number): number => (rows >= 64 ? 1 : WARM);
/** CPU ms of our first 64-row call past which a type is timed with fewer calls (below). */
const HEAVY_MS = 1500;
const cpu = cpus()[0]?.model ?? 'unknown CPU';
const load = (): string =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(' ');
console.log(
  `bench:fallback — ${cpu}, Node ${process.version}; ${N_EXPERT} experts of n_embd ${SHAPE.nEmbd} ↔ ff ${SHAPE.ff}; types ${TYPES.map(typeName).join(' ')}; ${COLD ? 'cold: every call routed anew' : 'every timed call of a shape routed alike'};`,
);
console.log(
  `top-${N_USED}, llama numerics; ours the ${variant} build${variant === 'simd' && bestKernelVariant() === 'simd' ? ' (no relaxed SIMD in this runtime)' : ''}, ${pinned ? `pinned to CPU ${OUR_CPU}` : 'not pinned (no taskset)'}, native ` +
    `linkcpp-expert-ref -t 1 on CPU ${NATIVE_CPU}; alternating in rounds; load average ${load()}`,
);

const kernel = await nodeExpertKernel(variant);
/** The touch-ahead measurement of the fallback as it started (WasmExpertFallback.touch). */
const touchLine = (t: TouchChoice): string =>
  `${t.on ? 'on' : 'off'}${t.onMs !== null && t.offMs !== null ? ` (1-token call ${t.onMs.toFixed(2)} ms on, ${t.offMs.toFixed(2)} ms off)` : ''}`;
const rounds = quick ? 1 : ROUNDS;
const timed = (): Timed[] => calls.map(() => ({ ms: [], cpu: [], out: new Float32Array(0) }));
const best = (xs: number[]): number => Math.min(...xs);
const fmt = (t: Timed): string => `${median(t.cpu).toFixed(2)} (${median(t.ms).toFixed(1)})`;
/** "identical", or how many values differ from native's and their NMSE against it. */
const bitsVs = (o: Float32Array, n: Float32Array): string => {
  const diff = sameBits(o, n);
  return diff === 0 ? 'identical' : `${diff} of ${o.length} differ, NMSE ${nmse(o, n).toExponential(1)}`;
};

/** One type's line of the closing table. */
interface Summary {
  type: GGMLType;
  /** ours / native from the medians of CPU ms, per row count; null where the type was skipped. */
  ratio: number[] | null;
  bestRatio: number[];
  oursMs: number[];
  nativeMs: number[];
  bits: string;
  note: string;
}
const summaries: Summary[] = [];

for (const type of TYPES) {
  const name = typeName(type);
  let made: { slice: ExpertSlice; gguf: string };
  try {
    made = benchSlice(type);
  } catch (e) {
    const why = (e instanceof Error ? e.message : String(e)).split('\n')[0]!;
    console.log(`\n${name}: skipped — ${why}`);
    summaries.push({ type, ratio: null, bestRatio: [], oursMs: [], nativeMs: [], bits: '—', note: `skipped: ${why}` });
    continue;
  }
  const { slice, gguf } = made;
  const t0 = performance.now();
  // Ours and native alternate in rounds, so a busy machine (other jobs on the other core, the shared L3) weighs on
  // both alike; each side's best and median over all rounds are printed.
  const ours = await WasmExpertFallback.create(kernel, slice, { numerics: 'llama' });
  // A type whose 64-row call takes seconds here (the float types' 300 MB slices through f64-emulated FMAs) would take
  // many minutes at the usual counts: it gets fewer calls (3 timed per shape and round, one at 64 rows), at most two
  // rounds and no FMA-emulated column, and says so.
  const probe = await timeCalls(ours, calls.at(-1)!, 1, 0);
  const heavy = !quick && probe.cpu[0]! > HEAVY_MS;
  const typeRounds = heavy ? Math.min(rounds, 2) : rounds;
  const emulated =
    ours.fusedMadd && !heavy ? await WasmExpertFallback.create(kernel, slice, { numerics: 'llama', emulateFma: true }) : null;
  const oursReps = (rows: number): number => (heavy ? (rows >= 64 ? 1 : 3) : reps(rows));
  const oursWarm = (rows: number): number => (heavy ? (rows >= 64 ? 0 : 1) : warmOurs(rows));
  const oursT = timed();
  const emulatedT = timed();
  const nativeT = timed();
  for (let round = 0; round < typeRounds; round++) {
    for (const [fb, into] of emulated
      ? ([
          [ours, oursT],
          [emulated, emulatedT],
        ] as const)
      : ([[ours, oursT]] as const)) {
      for (const [i, c] of calls.entries()) {
        const t = await timeCalls(fb, c, oursReps(c.nTokens), oursWarm(c.nTokens));
        into[i]!.ms.push(...t.ms);
        into[i]!.cpu.push(...t.cpu);
        into[i]!.out = t.out;
      }
    }
    for (const [i, t] of (await timeNative(gguf, calls, quick || heavy ? 3 : 7, heavy ? 1 : WARM)).entries()) {
      nativeT[i]!.ms.push(...t.ms);
      nativeT[i]!.cpu.push(...t.cpu);
      nativeT[i]!.out = t.out;
    }
  }
  const oursMem = ours.memory();
  const touch = touchLine(ours.touch);
  const fused = ours.fusedMadd;
  await ours.dispose();
  await emulated?.dispose();

  let ortT: (Timed | null)[] = calls.map(() => null);
  let ortNote = '';
  if (withOrt) {
    ort.env.wasm.numThreads = 1;
    const o0 = performance.now();
    try {
      const dense = await OrtExpertFallback.create(ort as never, slice, { numerics: 'llama' });
      ortNote = `; ORT dense ${mb(dense.modelBytes)} of f32 model (built in ${((performance.now() - o0) / 1000).toFixed(0)} s)`;
      ortT = [];
      for (const c of calls) ortT.push(await timeCalls(dense, c, reps(c.nTokens)));
      await dense.dispose();
    } catch (e) {
      ortNote = `; ORT dense: ${(e instanceof Error ? e.message : String(e)).split('\n')[0]}`;
    }
  }

  const bitsPerWeight = (8 * rowByteSize(type, 256)) / 256;
  console.log('');
  console.log(
    `${name} (${bitsPerWeight.toFixed(2)} bits per weight${WASM_BIT_EXACT_TYPES.includes(type) ? ', ggml-exact in llama numerics' : ', f32 sums in llama numerics'}; ` +
      `${((performance.now() - t0) / 1000).toFixed(0)} s; load average ${load()}${heavy ? `; slow here (first 64-row call ${probe.cpu[0]!.toFixed(0)} ms): ${typeRounds} rounds, 3 timed calls per shape each side (ours 1 at 64 rows), no FMA-emulated column` : ''}) — CPU ms per call, median (wall ms, median); ours/native from`,
  );
  console.log('the median CPU times; GFLOP/s of the routed pairs per CPU second (ours); best CPU ms ours / native; ours with FMA');
  console.log('emulated (where it fuses), median');
  console.log(
    `rows | ${pad('ours wasm', 16)} | ${pad('ORT dense', 16)} | ${pad('native', 16)} | ours/native | GFLOP/s | best ours/native | ${pad('FMA emulated', 16)} | bits vs native`,
  );
  calls.forEach((c, i) => {
    const o = oursT[i]!;
    const n = nativeT[i]!;
    const d = ortT[i];
    const e = emulatedT[i]!;
    const emulatedCol = emulated ? `${median(e.cpu).toFixed(2)} (${(median(n.cpu) / median(e.cpu)).toFixed(2)}×)` : '—';
    const bits = bitsVs(o.out, n.out) + (emulated && sameBits(e.out, n.out) !== 0 ? ` (emulated: ${bitsVs(e.out, n.out)})` : '');
    console.log(
      `${pad(String(c.nTokens), 4)} | ${pad(fmt(o), 16)} | ${pad(d ? fmt(d) : '—', 16)} | ${pad(fmt(n), 16)} | ` +
        `${pad((median(n.cpu) / median(o.cpu)).toFixed(2), 11)} | ${pad((callFlops(c) / (median(o.cpu) * 1e6)).toFixed(2), 7)} | ` +
        `${pad(`${best(o.cpu).toFixed(2)} / ${best(n.cpu).toFixed(2)}`, 16)} | ${pad(emulatedCol, 16)} | ${bits}`,
    );
  });
  console.log(
    `memory: ours ${mb(oursMem.wasmBytes)} wasm (slice ${mb(oursMem.sliceBytes)}, ${mb(oursMem.loadedBytes)} before any call)${ortNote}; ` +
      `FMA ${fused ? 'fused (relaxed_madd)' : 'emulated in f64'}, touch-ahead ${touch}`,
  );
  const diffs = calls.map((_, i) => sameBits(oursT[i]!.out, nativeT[i]!.out));
  const worst = Math.max(...calls.map((_, i) => nmse(oursT[i]!.out, nativeT[i]!.out)));
  summaries.push({
    type,
    ratio: calls.map((_, i) => median(nativeT[i]!.cpu) / median(oursT[i]!.cpu)),
    bestRatio: calls.map((_, i) => best(nativeT[i]!.cpu) / best(oursT[i]!.cpu)),
    oursMs: calls.map((_, i) => median(oursT[i]!.cpu)),
    nativeMs: calls.map((_, i) => median(nativeT[i]!.cpu)),
    bits: diffs.every((d) => d === 0) ? 'identical' : `NMSE ≤ ${worst.toExponential(1)}`,
    note: '',
  });
}

// The closing table: one line per type, ours / native per row count (medians of CPU ms, and best against best).
const GOAL = 0.5;
const rowsHead = ROWS.map((r) => pad(`${r} row${r > 1 ? 's' : ''}`, 7)).join(' ');
console.log('');
console.log(`ours / native per type (native CPU ms ÷ ours, medians; goal ≥ ${GOAL}); ${rounds} rounds; load average ${load()}`);
const rowsList = ROWS.join('/');
console.log(
  `type    | ${rowsHead} | ${pad('best/best', 17)} | ${pad(`ours CPU ms ${rowsList}`, 21)} | ${pad(`native CPU ms ${rowsList}`, 22)} | bits vs native`,
);
for (const s of summaries) {
  if (!s.ratio) {
    console.log(`${typeName(s.type).padEnd(7)} | ${s.note}`);
    continue;
  }
  const below = s.ratio.some((r) => r < GOAL) ? ' *' : '';
  console.log(
    `${typeName(s.type).padEnd(7)} | ${s.ratio.map((r) => pad(r.toFixed(2), 7)).join(' ')} | ${s.bestRatio.map((r) => pad(r.toFixed(2), 5)).join(' ')} | ` +
      `${pad(s.oursMs.map((x) => x.toPrecision(3)).join(' / '), 21)} | ${pad(s.nativeMs.map((x) => x.toPrecision(3)).join(' / '), 22)} | ${s.bits}${below}`,
  );
}
console.log(`* below ${GOAL}× native at some row count; ours = the ${variant} build`);
