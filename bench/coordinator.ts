/**
 * Decode speed of linkcpp-server, side by side in one run on one generated model:
 *   1. the hook compiled in but dispatch off   vs  the same llama.cpp built without our patches (at-rest cost, goal ≤ 2 %)
 *   2. every MoE layer dispatched to the test dispatcher (TypeScript CPU reference, unix socket)  vs  local
 *      (local runs with --no-repack, which --expert-dispatch implies, so both use the same CPU kernels)
 *
 *   npm run bench:coordinator [-- --rounds 3 --tokens 128]
 */
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { mkdtempSync } from 'node:fs';
import { tmpdir, cpus } from 'node:os';
import { testModel } from '../test/support/models.ts';
import { completeGreedy, startServer } from '../test/support/linkcpp.ts';
import { TestDispatcher } from '../test/support/test-dispatcher.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { median } from '../shaders/computer.ts';

const root = fileURLToPath(new URL('../', import.meta.url));
const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '20' },
    tokens: { type: 'string', default: '256' },
    'dispatched-tokens': { type: 'string', default: '32' },
  },
});
const rounds = Number(values.rounds);
const nPredict = Number(values.tokens);
/** The TypeScript dispatcher is slow; fewer tokens give the same tokens/s. */
const nPredictDispatched = Number(values['dispatched-tokens']);

for (const variant of ['stock', 'hooked']) {
  const r = spawnSync('bash', [join(root, 'coordinator/build.sh')], {
    stdio: 'inherit',
    env: { ...process.env, LINKCPP_VARIANT: variant },
  });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
const STOCK = join(root, 'coordinator/bin-stock/linkcpp-server');

const model = await testModel({
  arch: 'qwen3moe',
  layers: 8,
  nEmbd: 512,
  ff: 512,
  nExpert: 32,
  nExpertUsed: 4,
  type: GGMLType.Q8_0,
  seed: 5,
});
const prompt = 'The swarm serves a model that is too large for one machine.';

async function tps(url: string, tokens: number): Promise<number> {
  const out = await completeGreedy(url, prompt, tokens, model.ban);
  return (out.raw.timings as { predicted_per_second: number }).predicted_per_second;
}

/**
 * Both servers stay up; requests alternate between them (order flipped every pair) so that the machine's drift hits
 * both alike, and the ratio is taken per pair. Returns each side's runs and the median of the per-pair ratios b/a.
 */
async function pairwise(a: string, b: string, tokens: number): Promise<{ a: number[]; b: number[]; ratio: number }> {
  await tps(a, 8);
  await tps(b, 8);
  const ra: number[] = [];
  const rb: number[] = [];
  const ratios: number[] = [];
  for (let i = 0; i < rounds; i++) {
    let pa: number;
    let pb: number;
    if (i % 2 === 0) {
      pa = await tps(a, tokens);
      pb = await tps(b, tokens);
    } else {
      pb = await tps(b, tokens);
      pa = await tps(a, tokens);
    }
    ra.push(pa);
    rb.push(pb);
    ratios.push(pb / pa);
  }
  return { a: ra, b: rb, ratio: median(ratios) };
}

const sockDir = mkdtempSync(join(tmpdir(), 'es-bench-'));
const sock = join(sockDir, 'd.sock');

const stock = await startServer({ model: model.path, binary: STOCK });
const hookedOff = await startServer({ model: model.path });
const atRest = await pairwise(stock.url, hookedOff.url, nPredict).finally(async () => {
  await stock.stop();
  await hookedOff.stop();
});

const d = await TestDispatcher.start(sock, model.path, 'all');
const local = await startServer({ model: model.path, args: ['--no-repack'] });
const dispatched = await startServer({ model: model.path, args: ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', '10000'] });
await d.waitForHello();
const remote = await pairwise(local.url, dispatched.url, nPredictDispatched).finally(async () => {
  await local.stop();
  await dispatched.stop();
  await d.stop();
});

const fmt = (xs: number[]): string => `${xs.map((x) => x.toFixed(1)).join(' ')} (median ${median(xs).toFixed(1)})`;
console.log(
  `machine: ${cpus().length} × ${cpus()[0]?.model}; model: ${model.path} (qwen3moe Q8_0, 8 layers, n_embd 512, 32 experts, top-4)`,
);
console.log(`decode tokens/s, ${rounds} alternating pairs of requests on servers that stay up:`);
console.log(`  stock build              ${fmt(atRest.a)}`);
console.log(`  hook in, dispatch off    ${fmt(atRest.b)}`);
console.log(`  local (--no-repack)      ${fmt(remote.a)}`);
console.log(`  all layers dispatched    ${fmt(remote.b)}`);
console.log(
  `at rest: hook compiled in, dispatch off / stock build = ${atRest.ratio.toFixed(3)} (median of per-pair ratios)  [goal ≥ 0.98]`,
);
console.log(`every MoE layer dispatched to the TypeScript test dispatcher on loopback / local = ${remote.ratio.toFixed(3)}`);
