/**
 * The pure half of the kernel sweep (scripts/sweep-kernels.ts): the grids of tunables it tries, what a measurement
 * is worth against the device's roofline, the regime threshold the measurements suggest, and the markdown table.
 * No GPU here; test/unit/sweep-plan.test.ts tables it.
 *
 * The tunables are ExpertRuntime's options (shaders/runtime.ts), each a WGSL `override` or a runtime setting:
 *   decode   workgroupSize, rowsPerWorkgroup              (expert_up.wgsl / expert_down.wgsl)
 *   batched  workgroupSize, tileRows, tileCols            (expert_up_batched.wgsl / expert_down_batched.wgsl)
 *   regime   regimePolicy.minPairsPerExpert               (regime-policy.ts: batched from this many pairs per expert)
 * The batched kernels' TILE_K (32) is not one: it is the quant blocks' length, which the tile decoders read whole.
 */

export interface SweepShape {
  nEmbd: number;
  ff: number;
  nExpert: number;
  nUsed: number;
}

/** The issue's realistic shape: n_embd 2048, ff 768, top-8 of a 16-expert slice. */
export const REALISTIC_SHAPE: SweepShape = { nEmbd: 2048, ff: 768, nExpert: 16, nUsed: 8 };
/** `--quick`: small enough for SwiftShader. */
export const QUICK_SHAPE: SweepShape = { nEmbd: 256, ff: 256, nExpert: 4, nUsed: 2 };

export interface DecodeConfig {
  workgroupSize: number;
  rowsPerWorkgroup: number;
}
export interface BatchedConfig {
  workgroupSize: number;
  tileRows: number;
  tileCols: number;
}

/** The runtime's defaults (runtime.ts makeSettings), always in the grids so every table has them to compare with. */
export const DEFAULT_DECODE: DecodeConfig = { workgroupSize: 64, rowsPerWorkgroup: 4 };
export const DEFAULT_BATCHED: BatchedConfig = { workgroupSize: 64, tileRows: 16, tileCols: 32 };
export const DEFAULT_MIN_PAIRS_PER_EXPERT = 4;

export interface SweepPlan {
  decode: DecodeConfig[];
  batched: BatchedConfig[];
  /** Row counts timed in each regime, and both regimes at the threshold rows. */
  decodeRows: number[];
  batchedRows: number[];
  thresholdRows: number[];
  warmup: number;
  iterations: number;
}

/** The batched kernels' per-thread tile rows cap (BATCHED_WGSL_CONSTANTS.MAX_ROWS_PER_THREAD). */
const MAX_ROWS_PER_THREAD = 16;

/** Whether a batched config satisfies validateTuning's tile rules (workgroup memory is checked on the device). */
export function batchedValid(c: BatchedConfig): boolean {
  if (c.tileCols > c.workgroupSize) return false;
  const stride = c.workgroupSize / c.tileCols;
  return c.tileRows >= stride && c.tileRows % stride === 0 && c.tileRows / stride <= MAX_ROWS_PER_THREAD;
}

const sameDecode = (a: DecodeConfig, b: DecodeConfig): boolean =>
  a.workgroupSize === b.workgroupSize && a.rowsPerWorkgroup === b.rowsPerWorkgroup;
const sameBatched = (a: BatchedConfig, b: BatchedConfig): boolean =>
  a.workgroupSize === b.workgroupSize && a.tileRows === b.tileRows && a.tileCols === b.tileCols;

/** The sweep: the full grids for a GPU, or a few configs on small calls (`quick`, for SwiftShader). */
export function sweepPlan(quick: boolean): SweepPlan {
  if (quick) {
    return {
      decode: [DEFAULT_DECODE, { workgroupSize: 128, rowsPerWorkgroup: 8 }],
      batched: [DEFAULT_BATCHED, { workgroupSize: 64, tileRows: 32, tileCols: 16 }],
      decodeRows: [1, 4],
      batchedRows: [16],
      thresholdRows: [1, 4],
      warmup: 1,
      iterations: 2,
    };
  }
  const decode: DecodeConfig[] = [];
  for (const workgroupSize of [32, 64, 128, 256]) {
    for (const rowsPerWorkgroup of [1, 2, 4, 8, 16])
      if (rowsPerWorkgroup <= workgroupSize) decode.push({ workgroupSize, rowsPerWorkgroup });
  }
  const batched: BatchedConfig[] = [];
  for (const workgroupSize of [64, 128, 256]) {
    for (const tileCols of [16, 32, 64, 128]) {
      for (const tileRows of [8, 16, 32, 64]) {
        const c = { workgroupSize, tileRows, tileCols };
        if (batchedValid(c)) batched.push(c);
      }
    }
  }
  if (!decode.some((c) => sameDecode(c, DEFAULT_DECODE))) decode.unshift(DEFAULT_DECODE);
  if (!batched.some((c) => sameBatched(c, DEFAULT_BATCHED))) batched.unshift(DEFAULT_BATCHED);
  return {
    decode,
    batched,
    decodeRows: [1, 2, 4, 8],
    batchedRows: [8, 16, 32, 64, 128, 256, 512],
    thresholdRows: [1, 2, 4, 8, 16, 32, 64],
    warmup: 2,
    iterations: 10,
  };
}

export const decodeName = (c: DecodeConfig): string => `wg${c.workgroupSize} r${c.rowsPerWorkgroup}`;
export const batchedName = (c: BatchedConfig): string => `wg${c.workgroupSize} m${c.tileRows} n${c.tileCols}`;

/** One timed (config, row count). */
export interface Measurement {
  regime: 'decode' | 'batched';
  config: string;
  rows: number;
  /** Pairs per distinct routed expert (the regime policy's measure). */
  pairsPerExpert: number;
  wallMs: number;
  /** Median GPU time of the compute pass (timestamp-query), or null without it. */
  kernelMs: number | null;
  /** Weight bytes of the routed experts (GGUF), flops of the routed pairs. */
  weightBytes: number;
  flops: number;
  /** Against the default config's output on the same call. */
  nmseVsDefault: number;
}

/** The time a measurement is judged by: kernel time where there is one, else wall time. */
export const judgedMs = (m: Pick<Measurement, 'kernelMs' | 'wallMs'>): number => m.kernelMs ?? m.wallMs;

export interface Roofline {
  /** Memory bandwidth, GB/s (H200: 4800). */
  bandwidthGbs: number;
  /** Peak FLOP/s the kernels can reach, TFLOP/s (H200 FP32 without tensor cores: 67). */
  peakTflops: number;
}

/** GB/s of weights and GFLOP/s over `ms`, and their share of the roofline. */
export function rates(m: Pick<Measurement, 'weightBytes' | 'flops'>, ms: number, r: Roofline) {
  const gbs = m.weightBytes / (ms * 1e6);
  const gflops = m.flops / (ms * 1e6);
  return { gbs, gflops, bandwidthPct: (100 * gbs) / r.bandwidthGbs, peakPct: (100 * gflops) / (r.peakTflops * 1000) };
}

/** The fastest config per row count of a regime (by judgedMs). */
export function bestPerRows(ms: readonly Measurement[], regime: Measurement['regime']): Measurement[] {
  const byRows = new Map<number, Measurement>();
  for (const m of ms) {
    if (m.regime !== regime) continue;
    const best = byRows.get(m.rows);
    if (!best || judgedMs(m) < judgedMs(best)) byRows.set(m.rows, m);
  }
  return [...byRows.values()].sort((a, b) => a.rows - b.rows);
}

/**
 * The config of a regime best over all its row counts: the smallest geometric mean of its time ÷ the best time at
 * each row count (a config missing a row count is out). Null when nothing ran.
 */
export function bestOverall(ms: readonly Measurement[], regime: Measurement['regime']): { config: string; slowdown: number } | null {
  const best = new Map(bestPerRows(ms, regime).map((m) => [m.rows, judgedMs(m)]));
  const byConfig = new Map<string, Measurement[]>();
  for (const m of ms) if (m.regime === regime) byConfig.set(m.config, [...(byConfig.get(m.config) ?? []), m]);
  let winner: { config: string; slowdown: number } | null = null;
  for (const [config, list] of byConfig) {
    if (list.length !== best.size) continue;
    const slowdown = Math.exp(list.reduce((s, m) => s + Math.log(judgedMs(m) / best.get(m.rows)!), 0) / list.length);
    if (!winner || slowdown < winner.slowdown) winner = { config, slowdown };
  }
  return winner;
}

/** Decode vs batched at one row count, each with its best config. */
export interface ThresholdPoint {
  rows: number;
  pairsPerExpert: number;
  decodeMs: number;
  batchedMs: number;
}

/**
 * The minPairsPerExpert the points suggest: the smallest pairs per expert from which batched is faster at that point
 * and every larger one; Infinity when batched does not win at the largest point (or nothing was measured).
 */
export function suggestThreshold(points: readonly ThresholdPoint[]): number {
  const sorted = [...points].sort((a, b) => a.pairsPerExpert - b.pairsPerExpert);
  let from = Infinity;
  for (let i = sorted.length - 1; i >= 0 && sorted[i]!.batchedMs < sorted[i]!.decodeMs; i--) from = sorted[i]!.pairsPerExpert;
  return from;
}

export interface SweepResult {
  when: string;
  adapter: string;
  timestampQuery: boolean;
  type: string;
  numerics: string;
  shape: SweepShape;
  roofline: Roofline;
  plan: SweepPlan;
  measurements: Measurement[];
  threshold: { points: ThresholdPoint[]; suggested: number; current: number };
  skipped: string[];
}

const f = (x: number, d = 3): string => (Number.isFinite(x) ? (x >= 100 ? x.toFixed(0) : x.toPrecision(d)) : '-');

/** The sweep's table in markdown. */
export function sweepMarkdown(r: SweepResult): string {
  const out: string[] = [];
  const { nEmbd, ff, nExpert, nUsed } = r.shape;
  out.push(`# Kernel sweep: ${r.type}, n_embd ${nEmbd}, ff ${ff}, top-${nUsed} of ${nExpert} experts (${r.numerics} numerics)`);
  out.push('');
  out.push(`- when: ${r.when}`);
  out.push(`- adapter: ${r.adapter}`);
  out.push(
    `- timing: ${r.timestampQuery ? 'kernel ms = GPU time of the compute pass (timestamp-query); configs are ranked by it' : 'no timestamp-query: configs are ranked by wall ms'}`,
  );
  out.push(
    `- roofline: ${r.roofline.bandwidthGbs} GB/s (decode: weight bytes of the routed experts ÷ time), ${r.roofline.peakTflops} TFLOP/s (batched)`,
  );
  out.push(`- median of ${r.plan.iterations} calls after ${r.plan.warmup} warm-up; NMSE against the default config's output`);
  for (const regime of ['decode', 'batched'] as const) {
    const ms = r.measurements.filter((m) => m.regime === regime);
    if (ms.length === 0) continue;
    out.push('');
    out.push(`## ${regime}`);
    out.push('');
    const pct = regime === 'decode' ? '% of bandwidth' : '% of peak';
    out.push(`| rows | pairs/expert | config | kernel ms | wall ms | wall ÷ kernel | GB/s | GFLOP/s | ${pct} | NMSE vs default |`);
    out.push('| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
    const best = new Set(bestPerRows(ms, regime));
    for (const m of [...ms].sort((a, b) => a.rows - b.rows || judgedMs(a) - judgedMs(b))) {
      const x = rates(m, judgedMs(m), r.roofline);
      out.push(
        `| ${m.rows} | ${f(m.pairsPerExpert)} | ${best.has(m) ? `**${m.config}**` : m.config} | ${m.kernelMs === null ? '-' : f(m.kernelMs)} | ${f(m.wallMs)} | ${m.kernelMs ? f(m.wallMs / m.kernelMs) : '-'} | ${f(x.gbs)} | ${f(x.gflops)} | ${f(regime === 'decode' ? x.bandwidthPct : x.peakPct)} | ${m.nmseVsDefault.toExponential(1)} |`,
      );
    }
    const overall = bestOverall(ms, regime);
    if (overall)
      out.push('', `Best over all row counts: **${overall.config}** (${f(overall.slowdown)}× the per-row best, geometric mean).`);
  }
  const t = r.threshold;
  if (t.points.length) {
    out.push('', '## decode vs batched (each with its best config)', '');
    out.push('| rows | pairs/expert | decode ms | batched ms | faster |');
    out.push('| ---: | ---: | ---: | ---: | --- |');
    for (const p of t.points) {
      out.push(
        `| ${p.rows} | ${f(p.pairsPerExpert)} | ${f(p.decodeMs)} | ${f(p.batchedMs)} | ${p.batchedMs < p.decodeMs ? 'batched' : 'decode'} |`,
      );
    }
    out.push(
      '',
      `Suggested regimePolicy.minPairsPerExpert: ${Number.isFinite(t.suggested) ? f(t.suggested) : '∞ (batched never won)'} (current default ${t.current}).`,
    );
  }
  if (r.skipped.length) out.push('', '## skipped', '', ...r.skipped.map((s) => `- ${s}`));
  return `${out.join('\n')}\n`;
}
