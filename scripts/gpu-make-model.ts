/**
 * The GPU bundle's model step: bench:elastic's model (bench/shapes.ts benchModel: qwen3moe Q4_K, 2 MoE layers, the
 * realistic shape or `--quick`'s) generated before the benches, in parallel (scripts/gpu-model-parallel.ts: one process
 * per core, byte for byte the serial file), into the cache where benchModel looks; then benchModel itself is asked for
 * it, which must answer "cached" — if it does not, it has just generated the file serially and this says so.
 *
 *   node app/dist/gpu-make-model.js [--quick] [--workers N]
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { type Shape, QUICK, REALISTIC, benchModel } from '../bench/shapes.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { modelCachePath } from '../harness/models.ts';
import { type ModelConfig, defaultConfig } from '../tools/model-arch.ts';
import { modelHeader } from '../tools/make-model.ts';
import { finishFile, runShare, startFile } from './gpu-model-parallel.ts';

const { values } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    workers: { type: 'string' },
    // internal: one worker's share (index/count), the config as JSON and the temporary file
    share: { type: 'string' },
    config: { type: 'string' },
    file: { type: 'string' },
  },
});

if (values.share) {
  const [index, count] = values.share.split('/').map(Number) as [number, number];
  runShare(values.file as string, JSON.parse(values.config as string) as ModelConfig, index, count);
  process.exit(0);
}

/** benchModel's config for `s` (bench/shapes.ts: seed 11, Q4_K, two MoE layers). */
function benchConfig(s: Shape): ModelConfig {
  const { nEmbd, ff, nExpert, nExpertUsed, nHead, nHeadKv } = s;
  return defaultConfig({ arch: 'qwen3moe', layers: 2, nEmbd, ff, nExpert, nExpertUsed, nHead, nHeadKv, type: GGMLType.Q4_K, seed: 11 });
}

const shape = values.quick ? QUICK : REALISTIC;
const config = benchConfig(shape);
const path = modelCachePath(config);
if (existsSync(path)) console.log(`model ${shape.name}: already at ${path}`);
else {
  const workers = Math.max(1, Number(values.workers ?? availableParallelism()));
  const t0 = performance.now();
  const tmp = `${path}.part-${process.pid}`;
  const { writer } = modelHeader(config);
  startFile(tmp, writer);
  console.log(`model ${shape.name}: ${(writer.fileSize / 1e6).toFixed(0)} MB by ${workers} processes into ${tmp}`);
  // The worker is this same script (the bundle, or this file under tsx: execArgv carries `--import tsx`).
  const script = process.argv[1] as string;
  const codes = await Promise.all(
    Array.from(
      { length: workers },
      (_, i) =>
        new Promise<number>((resolve) => {
          const child = spawn(
            process.execPath,
            [...process.execArgv, script, '--share', `${i}/${workers}`, '--config', JSON.stringify(config), '--file', tmp],
            { stdio: 'inherit' },
          );
          child.on('exit', (code) => resolve(code ?? 1));
          child.on('error', () => resolve(1));
        }),
    ),
  );
  if (codes.some((c) => c !== 0)) {
    console.log(`model: a worker failed (exit codes ${codes.join(' ')})`);
    process.exit(1);
  }
  finishFile(tmp, path);
  console.log(`model ${shape.name}: generated in parallel in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}

const made = await benchModel(shape, 2, (line) => console.log(line));
if (made.model.path !== path || made.generatedS !== null) {
  console.log(`WARNING: benchModel did not find the parallel file (${path}) and generated ${made.model.path} itself`);
}
console.log(`model: ${made.model.path} (${made.generatedS === null ? 'cached' : `generated serially in ${made.generatedS.toFixed(1)} s`})`);
