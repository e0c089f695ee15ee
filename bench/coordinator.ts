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
import { LINKCPP_SERVER, completeGreedy, startServer } from '../test/support/linkcpp.ts';
import { TestDispatcher } from '../test/support/test-dispatcher.ts';
import { GGMLType } from '../gguf/quant-types.ts';

const root = fileURLToPath(new URL('../', import.meta.url));
const { values } = parseArgs({
  options: { rounds: { type: 'string', default: '5' }, tokens: { type: 'string', default: '512' }, 'dispatched-tokens': { type: 'string', default: '64' } },
});
const rounds = Number(values.rounds);
const nPredict = Number(values.tokens);
/** The TypeScript dispatcher is slow; fewer tokens give the same tokens/s. */
const nPredictDispatched = Number(values['dispatched-tokens']);

for (const variant of ['stock', 'hooked']) {
  const r = spawnSync('bash', [join(root, 'coordinator/build.sh')], { stdio: 'inherit', env: { ...process.env, LINKCPP_VARIANT: variant } });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
const STOCK = join(root, 'coordinator/bin-stock/linkcpp-server');

const model = await testModel({ arch: 'qwen3moe', layers: 8, nEmbd: 512, ff: 512, nExpert: 32, nExpertUsed: 4, type: GGMLType.Q8_0, seed: 5 });
const prompt = 'The swarm serves a model that is too large for one machine.';

async function decodeTps(bin: string, args: string[], before?: () => Promise<void>, tokens = nPredict): Promise<number> {
  const server = await startServer({ model: model.path, binary: bin, args });
  try {
    await before?.();
    await completeGreedy(server.url, prompt, 8, model.ban); // warm up caches and the graph
    const out = await completeGreedy(server.url, prompt, tokens, model.ban);
    return (out.raw.timings as { predicted_per_second: number }).predicted_per_second;
  } finally {
    await server.stop();
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const results: Record<string, number[]> = { stock: [], hookedOff: [], local: [], dispatched: [] };
const sockDir = mkdtempSync(join(tmpdir(), 'es-bench-'));
for (let i = 0; i < rounds; i++) {
  // Interleaved so that drift of the machine hits every configuration alike.
  results.stock!.push(await decodeTps(STOCK, []));
  results.hookedOff!.push(await decodeTps(LINKCPP_SERVER, []));
  results.local!.push(await decodeTps(LINKCPP_SERVER, ['--no-repack']));
  const sock = join(sockDir, `d${i}.sock`);
  const d = await TestDispatcher.start(sock, model.path, 'all');
  try {
    results.dispatched!.push(await decodeTps(LINKCPP_SERVER, ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', '10000'], async () => {
      await d.waitForHello();
    }, nPredictDispatched));
  } finally {
    await d.stop();
  }
}

const m = Object.fromEntries(Object.entries(results).map(([k, v]) => [k, median(v)])) as Record<string, number>;
console.log(`machine: ${cpus().length} × ${cpus()[0]?.model}; model: ${model.path} (qwen3moe Q8_0, 8 layers, n_embd 512, 32 experts, top-4)`);
console.log(`decode ${nPredict} tokens (${nPredictDispatched} when dispatched), median of ${rounds} interleaved rounds, tokens/s:`);
for (const [k, v] of Object.entries(results)) console.log(`  ${k.padEnd(11)} ${v.map((x) => x.toFixed(1)).join('  ')}  → median ${m[k]!.toFixed(1)}`);
console.log(`at rest: hook compiled in, dispatch off / stock build = ${(m.hookedOff! / m.stock!).toFixed(3)}  [goal ≥ 0.98]`);
console.log(`all MoE layers dispatched to the TypeScript test dispatcher on loopback / local = ${(m.dispatched! / m.local!).toFixed(3)}`);
