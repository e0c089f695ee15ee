/**
 * Metadata read of a ~300 MB generated model: time and extra memory.
 * The model is generated once (in a child process, so its memory does not count here) into .cache/bench/.
 *
 *   npm run bench:gguf
 */
import { spawnSync } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { readGGUFFile } from '../gguf/node-io.ts';

const root = fileURLToPath(new URL('../', import.meta.url));
const model = join(root, '.cache/bench/bench-qwen3moe-q8_0-300mb.gguf');
if (!existsSync(model)) {
  console.log(`generating ${model} (once)`);
  const args = [
    '--import',
    'tsx',
    join(root, 'tools/make-model.ts'),
    '--arch',
    'qwen3moe',
    '--layers',
    '5',
    '--n-embd',
    '1024',
    '--n-expert',
    '32',
    '--n-expert-used',
    '4',
    '--ff',
    '512',
    '--type',
    'q8_0',
    '--seed',
    '3',
    '--out',
    model,
  ];
  const r = spawnSync(process.execPath, args, { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc (npm run bench:gguf does)');

const size = statSync(model).size;
gc();
const before = process.memoryUsage();
const rssPeakBefore = process.resourceUsage().maxRSS * 1024;
const times: number[] = [];
let held: unknown;
for (let i = 0; i < 20; i++) {
  const t0 = performance.now();
  held = await readGGUFFile(model);
  times.push(performance.now() - t0);
}
gc();
const after = process.memoryUsage();
const rssPeakAfter = process.resourceUsage().maxRSS * 1024;
const file = held as Awaited<ReturnType<typeof readGGUFFile>>;
times.sort((a, b) => a - b);
const mb = (b: number): string => (b / 1048576).toFixed(2);
console.log(`file: ${model} (${mb(size)} MiB, ${file.tensors.length} tensors, ${file.metadata.size} metadata keys)`);
console.log(
  `metadata read: first ${times[times.length - 1]?.toFixed(2)} ms (max of 20), median ${times[10]?.toFixed(2)} ms, min ${times[0]?.toFixed(2)} ms  [goal < 50 ms]`,
);
console.log(
  `retained after read (heap + external + array buffers, after GC): ${mb(after.heapUsed + after.external - before.heapUsed - before.external)} MiB`,
);
console.log(`peak RSS growth over 20 reads: ${mb(rssPeakAfter - rssPeakBefore)} MiB  [goal < 20 MiB]`);
