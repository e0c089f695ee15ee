/**
 * 10,000 simulated volunteers against one hub process on loopback: log in (ed25519 challenge), volunteer, then
 * heartbeat their slice every 15 s, while dashboards read the demand. Prints p50/p99 latency per endpoint and the
 * hub process's CPU use over the steady-state window.
 *
 *   npm run bench:hub [-- --volunteers 10000 --seconds 30]
 */
import { spawn } from 'node:child_process';
import { generateKeyPairSync, sign } from 'node:crypto';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir, cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Agent, setGlobalDispatcher } from 'undici';
import { testModel } from '../test/support/models.ts';
import { encodeBase58 } from '../hub/auth/base58.ts';
import { freePort } from '../test/support/linkcpp.ts';

const { values } = parseArgs({ options: { volunteers: { type: 'string', default: '10000' }, seconds: { type: 'string', default: '30' } } });
const N = Number(values.volunteers);
const SECONDS = Number(values.seconds);
const HEARTBEAT_MS = 15_000;
setGlobalDispatcher(new Agent({ connections: 64, pipelining: 1, keepAliveTimeout: 30_000 }));

const root = fileURLToPath(new URL('../', import.meta.url));
const model = await testModel({ arch: 'qwen3moe', layers: 8, nEmbd: 64, ff: 64, nExpert: 64, nExpertUsed: 4, seed: 2 });
const dir = mkdtempSync(join(tmpdir(), 'es-bench-hub-'));
const port = await freePort();
const configFile = join(dir, 'hub.json');
writeFileSync(configFile, JSON.stringify({ authRateLimit: { capacity: 1e9, refillPerSec: 1e9 } }));
// The coordinator URL points nowhere: this measures the hub alone (its poller just fails fast).
const hub = spawn(
  process.execPath,
  [
    join(root, 'bin/expertswarm.js'),
    'hub',
    '--model',
    `bench=${model.path}`,
    '--coordinator-url',
    'bench=http://127.0.0.1:9',
    '--port',
    String(port),
    '--state',
    dir,
    '--config',
    configFile,
  ],
  { stdio: ['ignore', 'pipe', 'inherit'] },
);
const base = `http://127.0.0.1:${port}`;
for (let i = 0; ; i++) {
  try {
    if ((await fetch(`${base}/api/health`)).ok) break;
  } catch {
    if (i > 200) throw new Error('hub did not start');
    await new Promise((r) => setTimeout(r, 100));
  }
}

const lat = new Map<string, number[]>();
let errors = 0;
// biome-ignore lint/suspicious/noExplicitAny: the endpoints' JSON, read field by field below
async function call(name: string, path: string, body?: unknown, token?: string): Promise<any> {
  const t0 = performance.now();
  const r = await fetch(`${base}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: {
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const json = await r.json();
  (lat.get(name) ?? lat.set(name, []).get(name)!).push(performance.now() - t0);
  if (!r.ok) errors++;
  return json;
}

async function pool<T>(items: T[], width: number, f: (x: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await f(items[next++] as T);
    }),
  );
}

interface Vol {
  id: string;
  token: string;
  segment: [number, number, number] | null;
}
console.log(`logging in ${N} volunteers…`);
const vols: Vol[] = [];
await pool(
  Array.from({ length: N }, (_, i) => i),
  64,
  async (i) => {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const wallet = encodeBase58(new Uint8Array(Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url')));
    const c = await call('challenge', '/api/auth/challenge', { wallet });
    const t = await call('node-token', '/api/auth/node-token', {
      wallet,
      nonce: c.nonce,
      signature: sign(null, Buffer.from(c.message), privateKey).toString('base64'),
    });
    const v: Vol = { id: `w${i}`, token: t.node_token, segment: null };
    const a = await call('volunteer', '/api/expert-volunteer', { max_experts: 16, worker_id: v.id }, v.token);
    if (a.assigned) v.segment = [a.layer, a.experts[0], a.experts[1]];
    await call(
      'coverage',
      '/api/expert-coverage',
      { worker_id: v.id, model: 'bench', n_layer: 8, n_expert: 64, segments: v.segment ? [v.segment] : [] },
      v.token,
    );
    vols.push(v);
  },
);
for (const k of lat.keys()) lat.set(k, []);

function cpuTicks(pid: number): number {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return Number(f[11]) + Number(f[12]); // utime + stime, in clock ticks
}
const TICKS = 100;
console.log(
  `steady state for ${SECONDS} s: heartbeats every ${HEARTBEAT_MS / 1000} s each (${(N / (HEARTBEAT_MS / 1000)).toFixed(0)}/s), demand reads 20/s, volunteering 5/s`,
);
const cpu0 = cpuTicks(hub.pid!);
const t0 = performance.now();
const end = t0 + SECONDS * 1000;
const inflight = new Set<Promise<unknown>>();
const fire = (p: Promise<unknown>): void => {
  const q = p.catch(() => errors++).finally(() => inflight.delete(q));
  inflight.add(q);
};
let nextVol = 0;
while (performance.now() < end) {
  const tick = performance.now();
  const elapsed = tick - t0;
  const due = Math.floor((elapsed / HEARTBEAT_MS) * N);
  while (nextVol < due) {
    const v = vols[nextVol % vols.length]!;
    nextVol++;
    fire(
      call(
        'coverage',
        '/api/expert-coverage',
        { worker_id: v.id, model: 'bench', n_layer: 8, n_expert: 64, segments: v.segment ? [v.segment] : [] },
        v.token,
      ),
    );
  }
  if (Math.random() < 0.2) fire(call('demand', '/api/expert-demand?model=bench'));
  if (Math.random() < 0.05)
    fire(call('volunteer', '/api/expert-volunteer', { max_experts: 16 }, vols[Math.floor(Math.random() * vols.length)]!.token));
  await new Promise((r) => setTimeout(r, 10));
}
await Promise.all(inflight);
const wallS = (performance.now() - t0) / 1000;
const cpuS = (cpuTicks(hub.pid!) - cpu0) / TICKS;
hub.kill('SIGTERM');

const q = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))] ?? NaN;
console.log(`machine: ${cpus().length} × ${cpus()[0]?.model} (the load generator shares it)`);
console.log(`${N} volunteers, ${wallS.toFixed(1)} s, errors ${errors}`);
for (const [name, xs] of lat) {
  if (xs.length === 0) continue;
  console.log(`  ${name.padEnd(10)} n=${String(xs.length).padStart(6)}  p50 ${q(xs, 0.5).toFixed(2)} ms  p99 ${q(xs, 0.99).toFixed(2)} ms`);
}
console.log(`hub CPU: ${cpuS.toFixed(2)} s over ${wallS.toFixed(1)} s = ${((100 * cpuS) / wallS).toFixed(1)} % of one core`);
