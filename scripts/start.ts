/**
 * `npm start`: the main job. Builds the coordinator if needed, generates the demo MoE model on first run
 * (kept in .cache/, never committed), and serves it. The hub and the pages join here as they land; for now
 * this starts linkcpp-server alone and says so.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { makeModel } from '../tools/make-model.ts';
import { defaultConfig } from '../tools/model-arch.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { buildVocabulary } from '../tools/tokenizer.ts';

const root = fileURLToPath(new URL('../', import.meta.url));
const port = Number(process.env.PORT ?? 8080);
const server = join(root, 'coordinator/bin/linkcpp-server');
const demo = join(root, '.cache/demo/demo-qwen3moe-q8_0.gguf');

const build = spawnSync('bash', [join(root, 'coordinator/build.sh')], { stdio: 'inherit' });
if (build.status !== 0) process.exit(build.status ?? 1);

if (!existsSync(demo)) {
  console.log(`[start] generating the demo model ${demo}`);
  await makeModel(
    defaultConfig({ arch: 'qwen3moe', layers: 4, nEmbd: 256, nExpert: 16, nExpertUsed: 4, ff: 256, type: GGMLType.Q8_0, seed: 7 }),
    demo,
  );
}

const child = spawn(server, ['-m', demo, '--host', '127.0.0.1', '--port', String(port), '-np', '4', '-c', '8192'], {
  stdio: ['ignore', 'inherit', 'inherit'],
});
const ban = JSON.stringify(buildVocabulary().nonUtf8Ids.map((id) => [id, false]));
console.log(`[start] started linkcpp-server (coordinator) on http://127.0.0.1:${port} with ${demo}
[start] not yet started: the hub, the volunteer page and the dashboard (they arrive with later issues)
[start] try:
  curl -s http://127.0.0.1:${port}/completion -H 'content-type: application/json' \\
    -d '{"prompt":"The swarm","n_predict":16,"logit_bias":${ban}}'
`);
const stop = (): void => {
  child.kill('SIGTERM');
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
child.on('exit', (code) => process.exit(code ?? 0));
