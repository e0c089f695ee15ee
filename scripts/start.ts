/**
 * `npm start`: the main job. Builds the coordinator if needed and the pages (web/ → web/dist, a second or two),
 * generates the demo MoE model on first run (.cache/demo/, never committed), and starts the hub, which serves the
 * volunteer page and the dashboard and starts and supervises the demo model's coordinator. A second loopback origin
 * (PORT+1) serves a stand-in "someone else's site" that embeds the join widget under a strict Content-Security-Policy,
 * as docs/widget.md asks of host sites.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { makeModel } from '../tools/make-model.ts';
import { DEMO_MODEL_CONFIG } from '../tools/demo-model.ts';
import { buildVocabulary } from '../tools/tokenizer.ts';
import { runHub } from '../hub/cli.ts';
import { defaultConfig } from '../hub/hub.ts';
import { DISPATCH_MODES, type DispatchMode } from '../hub/dispatch/policy.ts';

const root = fileURLToPath(new URL('../', import.meta.url));
const port = Number(process.env.PORT ?? 8080);
const dispatch = (process.env.DISPATCH ?? 'auto') as DispatchMode;
if (!DISPATCH_MODES.includes(dispatch)) throw new Error(`DISPATCH must be one of ${DISPATCH_MODES.join(', ')}, got ${dispatch}`);
const demoDir = join(root, '.cache/demo');
const demo = join(demoDir, 'demo-qwen3moe-q8_0.gguf');

const build = spawnSync('bash', [join(root, 'coordinator/build.sh')], { stdio: 'inherit' });
if (build.status !== 0) process.exit(build.status ?? 1);
// Always rebuilt: cheap, and a stale build would hide a change to web/.
const pages = spawnSync('npm', ['run', '--silent', 'build:web'], { cwd: root, stdio: 'inherit' });
if (pages.status !== 0) process.exit(pages.status ?? 1);

if (!existsSync(demo)) {
  console.log(`[start] generating the demo model ${demo}`);
  await makeModel({ ...DEMO_MODEL_CONFIG }, demo);
}
// Random weights emit arbitrary bytes; the example bans the byte tokens that are not valid UTF-8 alone.
mkdirSync(demoDir, { recursive: true });
const requestFile = join(demoDir, 'chat-request.json');
writeFileSync(
  requestFile,
  JSON.stringify({
    model: 'demo',
    messages: [{ role: 'user', content: 'Hello, swarm!' }],
    max_tokens: 32,
    logit_bias: Object.fromEntries(buildVocabulary().nonUtf8Ids.map((id) => [String(id), -100])),
  }),
);

// The dashboard's admin actions need a token: yours from the environment, else a fresh one for this run (printed).
const givenToken = process.env.ADMIN_TOKEN || process.env.EXPERTSWARM_ADMIN_TOKEN;
const adminToken = givenToken || randomBytes(18).toString('base64url');

const running = await runHub(
  defaultConfig({
    port,
    host: '127.0.0.1',
    stateDir: join(root, '.cache/hub'),
    models: [{ path: demo, name: 'demo' }],
    dispatchMode: dispatch,
    adminToken,
  }),
  (line) => console.log(line),
);
const widgetPort = port + 1;
const widgetSite = createServer((req, res) => {
  const csp = `default-src 'none'; script-src ${running.url}; frame-src ${running.url}`;
  if ((req.url ?? '/').split('?')[0] !== '/') return void res.writeHead(404, { 'content-security-policy': csp }).end();
  res
    .writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': csp })
    .end(
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">` +
        `<title>A site with the Expertswarm widget</title></head><body><main><h1>A site with the join widget</h1>` +
        `<p>This page stands for someone else's site on another origin; the card below is one line of its HTML:</p>` +
        `<pre>&lt;script src="${running.url}/widget.js" data-model="demo" async&gt;&lt;/script&gt;</pre>` +
        `<script src="${running.url}/widget.js" data-model="demo" async></script></main></body></html>`,
    );
});
await new Promise<void>((resolve) => widgetSite.listen(widgetPort, '127.0.0.1', () => resolve()));

console.log(`
[start] running: the hub on ${running.url} with one coordinator (linkcpp-server) serving the demo model "demo"
[start] volunteer page: ${running.url}/ (dispatch ${dispatch}: ${
  dispatch === 'always'
    ? 'a joined tab gets a slice at once and serves every request'
    : 'a joined tab waits until the model is busy (2+ requests at once); DISPATCH=always npm start serves at rest too'
})
[start] dashboard: ${running.url}/dashboard (admin token: ${givenToken ? 'yours, from the environment' : adminToken})
[start] join widget on a stand-in host site: http://127.0.0.1:${widgetPort}/ (docs/widget.md)
[start] API: ${running.url}/v1/models · ${running.url}/api/expert-demand · ${running.url}/api/moe/recruitment · ${running.url}/metrics
[start] try:  curl -s ${running.url}/v1/chat/completions -H 'content-type: application/json' -d @${requestFile}
[start] Ctrl-C stops everything.`);

const stop = async (): Promise<void> => {
  widgetSite.close();
  await running.close();
  process.exit(0);
};
process.once('SIGINT', () => void stop());
process.once('SIGTERM', () => void stop());
