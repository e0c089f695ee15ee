/**
 * The hub under 10,000 volunteers, in two parts (numbers printed, not asserted):
 *
 * - **http**: simulated volunteers on the HTTP market against a hub process (`expertswarm hub`) on loopback: log in
 *   (ed25519 challenge), volunteer, download the slice offered (a worker reports only slices it was assigned and
 *   downloaded), then heartbeat it every 15 s while dashboards read the demand. p50/p99
 *   latency per endpoint and the hub process's CPU over the steady-state window.
 * - **channel**: volunteers holding the WebSocket channel (`/api/volunteer`) open, played by `ws` clients in a few
 *   child processes of this script, against a hub in this process (so its memory and its message handler can be
 *   measured from inside): hub memory per connection, the time the hub's text-message handler takes per heartbeat
 *   (p50/p99, timed around `VolunteerChannel.onText`) with the ping→pong round trip as seen by a client beside it,
 *   and how long the hub takes to push `assign` to 1,000 idle volunteers when demand appears (from the coordinator's
 *   saturated `/slots` reading to the last `assign` received).
 *
 *   npm run bench:hub [-- --part http|channel|all --volunteers 10000 --seconds 30
 *                         --channel 10000 --push 1000 --window 20 --clients 4]
 *
 * - **a cluster** (`--hubs N`, N > 1: bench/hub-cluster.ts): N hubs on one real Redis, each in its own process,
 *   `--volunteers` simulated volunteers on the channel spread over them; the heartbeat's round trip, the pushed
 *   assignments' latency, Redis ops/s and each hub's CPU (docs/cluster.md has the numbers measured here).
 *
 *   npm run bench:hub -- --hubs 4 --volunteers 100000 [--push 1000 --window 20 --beat-ping 0.05 --sync-ms 1000
 *                                                       --cpu-prof DIR (hub 0's CPU profile of each window)]
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync, sign } from 'node:crypto';
import { readFileSync, writeFileSync, mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir, cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loopDelay } from './loop-delay.ts';
import type { ClientJob, FromClient, ToClient } from './hub-clients-protocol.ts';
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Agent, setGlobalDispatcher } from 'undici';
import { WebSocket } from 'ws';
import { testModel } from '../harness/models.ts';
import { encodeBase58 } from '../protocol/base58.ts';
import { freePort } from '../harness/linkcpp.ts';
import { MANY_FROM_ONE_ADDRESS } from '../harness/hub-fixtures.ts';
import { SHARD_DOWNLOADS_PER_IP } from '../hub/limits.ts';
import { inLanes } from '../hub/lanes.ts';
import { Hub, defaultConfig } from '../hub/hub.ts';
import { buildApp } from '../hub/app.ts';
import { VolunteerChannel } from '../hub/channel/channel.ts';
import { VOLUNTEER_PATH, encodeClientMessage, type ClientMessage } from '../protocol/channel/index.ts';

const { values } = parseArgs({
  options: {
    part: { type: 'string', default: 'all' },
    volunteers: { type: 'string', default: '10000' },
    seconds: { type: 'string', default: '30' },
    channel: { type: 'string', default: '10000' },
    push: { type: 'string', default: '1000' },
    window: { type: 'string', default: '20' },
    clients: { type: 'string', default: '4' },
    hubs: { type: 'string', default: '1' },
    'beat-ping': { type: 'string', default: '0.05' },
    'sync-ms': { type: 'string', default: '1000' },
    'cpu-prof': { type: 'string', default: '' },
    role: { type: 'string', default: 'main' },
  },
});
const HEARTBEAT_MS = 15_000;
const root = fileURLToPath(new URL('../', import.meta.url));
const model = await testModel({ arch: 'qwen3moe', layers: 8, nEmbd: 64, ff: 64, nExpert: 64, nExpertUsed: 4, seed: 2 });

const q = (xs: ArrayLike<number>, p: number): number => {
  const s = Float64Array.from(xs).sort();
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? Number.NaN;
};
/** Milliseconds on a clock shared by this machine's processes (child processes report times on it). */
const wallMs = (): number => performance.timeOrigin + performance.now();

function newWallet(): { wallet: string; sign(message: string): string } {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const wallet = encodeBase58(new Uint8Array(Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url')));
  return { wallet, sign: (m) => sign(null, Buffer.from(m), privateKey).toString('base64') };
}

// ---------------------------------------------------------------------------------------------------- http part

async function httpPart(N: number, SECONDS: number): Promise<void> {
  setGlobalDispatcher(new Agent({ connections: 64, pipelining: 1, keepAliveTimeout: 30_000 }));
  const dir = mkdtempSync(join(tmpdir(), 'es-bench-hub-'));
  const port = await freePort();
  const configFile = join(dir, 'hub.json');
  writeFileSync(configFile, JSON.stringify({ authRateLimit: { capacity: 1e9, refillPerSec: 1e9 }, ...MANY_FROM_ONE_ADDRESS }));
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

  interface Vol {
    id: string;
    token: string;
    segment: [number, number, number] | null;
  }
  // Every volunteer here shares one address: its downloads queue for the hub's per-address slots (a 429 waits and retries).
  let downloading = 0;
  const slotFreed: Array<() => void> = [];
  async function download(v: Vol, [layer, begin, end]: [number, number, number]): Promise<void> {
    while (downloading >= SHARD_DOWNLOADS_PER_IP) await new Promise<void>((r) => slotFreed.push(r));
    downloading++;
    try {
      const t0 = performance.now();
      for (;;) {
        const r = await fetch(`${base}/api/expert-shard?model=bench&layer=${layer}&expert_begin=${begin}&expert_end=${end}`, {
          headers: { authorization: `Bearer ${v.token}` },
        });
        await r.arrayBuffer();
        if (r.status !== 429 && r.status !== 503) {
          if (!r.ok) errors++;
          break;
        }
        await new Promise((w) => setTimeout(w, 1000 * Number(r.headers.get('retry-after') ?? 1)));
      }
      (lat.get('shard') ?? lat.set('shard', []).get('shard')!).push(performance.now() - t0);
    } finally {
      downloading--;
      slotFreed.shift()?.();
    }
  }
  console.log(`\nhttp: logging in ${N} volunteers…`);
  const vols: Vol[] = [];
  await inLanes(
    Array.from({ length: N }, (_, i) => i),
    64,
    async (i) => {
      const w = newWallet();
      const c = await call('challenge', '/api/auth/challenge', { wallet: w.wallet });
      const t = await call('node-token', '/api/auth/node-token', { wallet: w.wallet, nonce: c.nonce, signature: w.sign(c.message) });
      const v: Vol = { id: `w${i}`, token: t.node_token, segment: null };
      const a = await call('volunteer', '/api/expert-volunteer', { max_experts: 16, worker_id: v.id }, v.token);
      if (a.assigned) {
        v.segment = [a.layer, a.experts[0], a.experts[1]];
        await download(v, v.segment);
      }
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

  console.log(`${N} volunteers, ${wallS.toFixed(1)} s, errors ${errors}`);
  for (const [name, xs] of lat) {
    if (xs.length === 0) continue;
    console.log(
      `  ${name.padEnd(10)} n=${String(xs.length).padStart(6)}  p50 ${q(xs, 0.5).toFixed(2)} ms  p99 ${q(xs, 0.99).toFixed(2)} ms`,
    );
  }
  console.log(`hub CPU: ${cpuS.toFixed(2)} s over ${wallS.toFixed(1)} s = ${((100 * cpuS) / wallS).toFixed(1)} % of one core`);
}

// ---------------------------------------------------------------------------------------------------- channel part

/** One client process: holds `count` channels open, heartbeats each every heartbeatMs, answers assign with loaded. */
async function clientsRole(): Promise<void> {
  const send = (m: FromClient): void => void process.send?.(m);
  const job = await new Promise<ClientJob>((resolve) =>
    process.once('message', (m: ToClient) => {
      if (m.type === 'start') resolve(m.job);
    }),
  );
  const assigns: number[] = [];
  const rttMs: number[] = [];
  const beatMs: number[] = [];
  const closes: Record<string, number> = {};
  const pingsOut = new Map<number, number>();
  /** Pings sent right behind a heartbeat: their pong comes once the hub handled the heartbeat. */
  const beatPings = new Set<number>();
  const sockets: WebSocket[] = [];
  let nextPing = 1;
  let failed = 0;
  const text = (m: ClientMessage): string => encodeClientMessage(m);

  await inLanes(
    Array.from({ length: job.count }, (_, i) => i),
    64,
    (i) =>
      new Promise<void>((resolve) => {
        const ws = new WebSocket(job.url, { perMessageDeflate: false, ...(job.localAddress ? { localAddress: job.localAddress } : {}) });
        const eligible = i < job.eligible;
        let held: { model: string; layer: number; experts: [number, number] } | null = null;
        let paused = false;
        let welcomed = false;
        ws.on('open', () =>
          ws.send(
            text({
              type: 'hello',
              version: 1,
              token: job.token,
              workerId: `${job.prefix}-${i}`,
              device: {
                webgpu: true,
                adapter: null,
                limits: { maxStorageBufferBindingSize: 1 << 30, maxBufferSize: 1 << 30 },
                features: [],
                backend: 'webgpu',
                gflops: 100,
                memoryBudgetBytes: 1 << 30,
              },
              numerics: ['llama'],
              encodings: ['f32'],
              model: 'bench',
              maxExperts: 1,
              agent: 'bench/hub.ts',
            }),
          ),
        );
        ws.on('message', (data, isBinary) => {
          if (isBinary) return;
          const m = JSON.parse(String(data)) as {
            type: string;
            id?: number;
            assignment_id?: number;
            layer?: number;
            experts?: [number, number];
          };
          if (m.type === 'welcome') {
            welcomed = true;
            if (!eligible) {
              paused = true;
              ws.send(text({ type: 'pause' }));
            }
            // Heartbeats spread evenly over the period, as volunteers that joined at random times.
            setTimeout(() => {
              const beat = (): void => {
                if (ws.readyState !== ws.OPEN) return;
                ws.send(
                  text({
                    type: 'heartbeat',
                    model: held ? held.model : '',
                    coverage: held ? [[held.layer, held.experts[0], held.experts[1]]] : [],
                    paused,
                    stats: { pairsServed: 0, queueDepth: 0 },
                  }),
                );
                if (job.beatPing && Math.random() < job.beatPing) {
                  const id = nextPing++;
                  pingsOut.set(id, performance.now());
                  beatPings.add(id);
                  ws.send(text({ type: 'ping', id }));
                }
              };
              beat();
              setInterval(beat, job.heartbeatMs).unref();
            }, Math.random() * job.heartbeatMs).unref();
            sockets.push(ws);
            resolve();
          } else if (m.type === 'assign') {
            assigns.push(wallMs());
            held = { model: 'bench', layer: m.layer!, experts: m.experts! };
            ws.send(text({ type: 'loaded', assignmentId: m.assignment_id!, ready: true, backend: 'webgpu', gflops: 100 }));
          } else if (m.type === 'pong' && m.id !== undefined) {
            const t0 = pingsOut.get(m.id);
            if (t0 !== undefined) (beatPings.delete(m.id) ? beatMs : rttMs).push(performance.now() - t0);
            pingsOut.delete(m.id);
          }
        });
        ws.on('error', () => {});
        ws.on('close', (code) => {
          closes[code] = (closes[code] ?? 0) + 1;
          if (!welcomed) {
            failed++;
            resolve();
          }
        });
      }),
  );
  send({ type: 'connected', count: sockets.length, failed, closes });

  let rttTimer: NodeJS.Timeout | null = null;
  // The volunteers' side of each round trip: a client process's own loop delay is in every time it measures.
  let loop = loopDelay(10);
  let cpu0 = process.cpuUsage();
  process.on('message', (m: ToClient) => {
    if (m.type === 'rtt') {
      if (rttTimer) clearInterval(rttTimer);
      rttTimer = null;
      // One app-level ping every 20 ms from a random connection: the round trip through the hub's handler.
      if (m.on)
        rttTimer = setInterval(() => {
          const ws = sockets[Math.floor(Math.random() * sockets.length)];
          if (!ws || ws.readyState !== ws.OPEN) return;
          const id = nextPing++;
          pingsOut.set(id, performance.now());
          ws.send(text({ type: 'ping', id }));
        }, 20);
    } else if (m.type === 'report') {
      const cpu = process.cpuUsage(cpu0);
      loop.stop();
      send({
        type: 'report',
        assigns: assigns.splice(0),
        rttMs: rttMs.splice(0),
        beatMs: beatMs.splice(0),
        closes,
        open: sockets.filter((s) => s.readyState === s.OPEN).length,
        cpuS: (cpu.user + cpu.system) / 1e6,
        loopP99: loop.ms(99),
        loopMax: loop.maxMs(),
      });
      loop = loopDelay(10);
      cpu0 = process.cpuUsage();
    } else if (m.type === 'exit') {
      for (const s of sockets) s.terminate();
      process.exit(0);
    }
  });
}

/** The most connections this process can accept: its open-file limit less a margin for everything else. */
function fdBudget(): number {
  const line = readFileSync('/proc/self/limits', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('Max open files'));
  const soft = Number(line?.split(/\s+/)[3]);
  return Number.isFinite(soft) ? soft - 512 : Number.POSITIVE_INFINITY;
}

async function channelPart(wanted: number, PUSH: number, WINDOW_S: number, K: number): Promise<void> {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const budget = fdBudget();
  const N = Math.min(wanted, budget);
  if (N < wanted) console.log(`channel: the open-file limit allows ${N} connections here, not ${wanted} (ulimit -n)`);

  // A stand-in coordinator: its /slots says busy 0 until the push phase flips it to busy 2 (saturated).
  const coordinator = { busy: 0, firstBusyAt: 0 };
  const slots = createServer((_req, res) => {
    if (coordinator.busy >= 2 && coordinator.firstBusyAt === 0) coordinator.firstBusyAt = wallMs();
    res.end(JSON.stringify(Array.from({ length: 4 }, (_, i) => ({ id: i, is_processing: i < coordinator.busy }))));
  });
  await new Promise<void>((r) => slots.listen(0, '127.0.0.1', r));

  // Nothing is wanted at rest (base target 0); saturation wants 2 replicas of all 8 × 64 experts: 1,024 one-expert
  // slices, enough for every idle volunteer of the push phase.
  const hub = new Hub(
    defaultConfig({
      stateDir: ':memory:',
      models: [{ path: model.path, name: 'bench' }],
      externals: [{ name: 'bench', url: `http://127.0.0.1:${(slots.address() as AddressInfo).port}` }],
      poller: { intervalMs: 2_000, timeoutMs: 1_000 },
      saturation: { saturateAt: 2, maxReadingAgeMs: 30_000, targetBase: 0, boost: 2 },
      maxWorkers: N + 100,
      authRateLimit: { capacity: 1e9, refillPerSec: 1e9 },
      // 10,000 volunteers from one address with one token per client process: the per-address caps are lifted.
      channel: { heartbeatMs: HEARTBEAT_MS, ...MANY_FROM_ONE_ADDRESS.channel },
      http: MANY_FROM_ONE_ADDRESS.http,
    }),
  );
  await hub.load();
  const app = await buildApp(hub);
  await app.listen({ port: 0, host: '127.0.0.1' });
  await hub.start();
  const url = `ws://127.0.0.1:${(app.server.address() as AddressInfo).port}${VOLUNTEER_PATH}`;
  const channel = (hub as unknown as { channel: VolunteerChannel }).channel; // the Hub's own, for its state counts

  // Time the hub's text-message handler (parse, validate, act) for each heartbeat, by the connection's state when it
  // came: wall time (µs), and the process's CPU time over the call (µs), which a busy machine's preemption leaves out.
  interface Timed {
    wall: number[];
    cpu: number[];
  }
  const timings = { idle: { wall: [], cpu: [] } as Timed, serving: { wall: [], cpu: [] } as Timed, on: false };
  const HEARTBEAT_PREFIX = Buffer.from('{"type":"heartbeat"');
  const proto = VolunteerChannel.prototype as unknown as { onText(c: { state: string }, b: Uint8Array): void };
  const onText = proto.onText;
  proto.onText = function (this: unknown, c: { state: string }, b: Uint8Array): void {
    if (!timings.on || Buffer.compare(HEARTBEAT_PREFIX, b.subarray(0, HEARTBEAT_PREFIX.length)) !== 0) {
      onText.call(this, c, b);
      return;
    }
    const into = c.state === 'serving' ? timings.serving : timings.idle;
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    try {
      onText.call(this, c, b);
    } finally {
      into.wall.push((performance.now() - t0) * 1000);
      const cpu = process.cpuUsage(cpu0);
      into.cpu.push(cpu.user + cpu.system);
    }
  };
  const reset = (): void => {
    for (const t of [timings.idle, timings.serving]) {
      t.wall.length = 0;
      t.cpu.length = 0;
    }
  };
  const us = (t: Timed): string =>
    `n=${t.wall.length}  wall p50 ${q(t.wall, 0.5).toFixed(0)} µs  p99 ${q(t.wall, 0.99).toFixed(0)} µs  max ${q(t.wall, 1).toFixed(0)} µs;  CPU p50 ${q(t.cpu, 0.5).toFixed(0)} µs  p99 ${q(t.cpu, 0.99).toFixed(0)} µs`;

  const tokens: string[] = [];
  for (let i = 0; i < K; i++) {
    const w = newWallet();
    const c = await app.inject({ method: 'POST', url: '/api/auth/challenge', payload: { wallet: w.wallet } });
    const t = await app.inject({
      method: 'POST',
      url: '/api/auth/node-token',
      payload: { wallet: w.wallet, nonce: c.json().nonce, signature: w.sign(c.json().message) },
    });
    tokens.push(t.json().node_token);
  }

  const self = fileURLToPath(import.meta.url);
  const children: ChildProcess[] = [];
  const reply = (child: ChildProcess, type: FromClient['type']): Promise<FromClient> =>
    new Promise((resolve) => {
      const on = (m: FromClient): void => {
        if (m.type !== type) return;
        child.off('message', on);
        resolve(m);
      };
      child.on('message', on);
    });
  const all = async <T extends FromClient['type']>(type: T, ask?: ToClient): Promise<Extract<FromClient, { type: T }>[]> => {
    const got = children.map((c) => reply(c, type));
    if (ask) for (const c of children) c.send(ask);
    return (await Promise.all(got)) as Extract<FromClient, { type: T }>[];
  };

  gc();
  const mem0 = process.memoryUsage();
  const cpu0 = process.cpuUsage();
  console.log(`channel: ${N} volunteers in ${K} client processes; ${PUSH} of them idle, the rest paused`);
  const tConnect = performance.now();
  for (let i = 0; i < K; i++) {
    const count = Math.floor(N / K) + (i < N % K ? 1 : 0);
    const eligible = Math.floor(PUSH / K) + (i < PUSH % K ? 1 : 0);
    const child = fork(self, ['--role', 'clients'], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    children.push(child);
    child.send({
      type: 'start',
      job: { url, token: tokens[i]!, prefix: `c${i}`, count, eligible, heartbeatMs: HEARTBEAT_MS },
    } satisfies ToClient);
  }
  const connected = await all('connected');
  const connectS = (performance.now() - tConnect) / 1000;
  const cpuConnect = process.cpuUsage(cpu0);
  const held = connected.reduce((s, c) => s + c.count, 0);
  const states = channel.countByState();
  console.log(
    `  connected ${held} (failed ${connected.reduce((s, c) => s + c.failed, 0)}) in ${connectS.toFixed(1)} s: ${(held / connectS).toFixed(0)}/s; hub CPU ${((cpuConnect.user + cpuConnect.system) / 1e6).toFixed(1)} s; states ${JSON.stringify(states)}`,
  );
  await new Promise((r) => setTimeout(r, 1_000)); // the last pauses land
  gc();
  const mem1 = process.memoryUsage();
  const per = (k: 'rss' | 'heapUsed' | 'external' | 'arrayBuffers'): string => `${((mem1[k] - mem0[k]) / held / 1024).toFixed(1)} KiB`;
  console.log(
    `  hub memory per connection (after gc): RSS ${per('rss')}, heapUsed ${per('heapUsed')}, external ${per('external')} (arrayBuffers ${per('arrayBuffers')}); RSS ${(mem1.rss / 2 ** 20).toFixed(0)} MiB in all`,
  );

  // Hold: every volunteer heartbeats every 15 s; a ping every 20 ms per client process measures the round trip.
  reset();
  timings.on = true;
  for (const c of children) c.send({ type: 'rtt', on: true } satisfies ToClient);
  const cpu1 = process.cpuUsage();
  const loop = loopDelay(10);
  const tHold = performance.now();
  await new Promise((r) => setTimeout(r, WINDOW_S * 1000));
  const holdS = (performance.now() - tHold) / 1000;
  const cpuHold = process.cpuUsage(cpu1);
  loop.stop();
  timings.on = false;
  for (const c of children) c.send({ type: 'rtt', on: false } satisfies ToClient);
  const hold = await all('report', { type: 'report' });
  const rtt = hold.flatMap((r) => r.rttMs);
  console.log(
    `  hold ${holdS.toFixed(0)} s: ${(timings.idle.wall.length / holdS).toFixed(0)} heartbeats/s (and ${(rtt.length / holdS).toFixed(0)} app-level pings/s)`,
  );
  console.log(`    heartbeat handling, waiting/paused volunteer: ${us(timings.idle)}`);
  console.log(
    `    ping→pong round trip at a client (proxy, includes the client's own loop): p50 ${q(rtt, 0.5).toFixed(2)} ms  p99 ${q(rtt, 0.99).toFixed(2)} ms`,
  );
  console.log(
    `    hub event-loop delay (added, beyond the 10 ms probe) p50 ${loop.ms(50).toFixed(1)} ms  p99 ${loop.ms(99).toFixed(1)} ms  max ${loop.maxMs().toFixed(0)} ms; hub CPU ${(((cpuHold.user + cpuHold.system) / 1e6 / holdS) * 100).toFixed(1)} % of one core`,
  );

  // Push: demand appears (the poller's next reading is saturated); every idle volunteer is assigned a slice.
  coordinator.busy = 2;
  const pushed: number[] = [];
  const deadline = performance.now() + 60_000;
  while (pushed.length < PUSH && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 250));
    pushed.push(...(await all('report', { type: 'report' })).flatMap((r) => r.assigns));
  }
  const since = pushed.map((t) => t - coordinator.firstBusyAt).sort((a, b) => a - b);
  console.log(
    `  push: ${pushed.length} of ${PUSH} idle volunteers assigned; from the saturated reading: first ${since[0]?.toFixed(0)} ms, p50 ${q(since, 0.5).toFixed(0)} ms, last ${since.at(-1)?.toFixed(0)} ms`,
  );

  // Serving: the assigned volunteers said loaded; their heartbeats now refresh coverage and the dispatch map.
  await new Promise((r) => setTimeout(r, 1_000));
  reset();
  timings.on = true;
  await new Promise((r) => setTimeout(r, WINDOW_S * 1000));
  timings.on = false;
  console.log(`  serving ${WINDOW_S} s, states ${JSON.stringify(channel.countByState())}`);
  console.log(`    heartbeat handling, serving volunteer (coverage, dispatch map, store): ${us(timings.serving)}`);
  console.log(`    heartbeat handling, waiting/paused volunteer: ${us(timings.idle)}`);
  const closes = (await all('report', { type: 'report' })).map((r) => r.closes);
  const unexpected = closes.filter((c) => Object.keys(c).length > 0);
  if (unexpected.length) console.log(`  closes seen by clients: ${JSON.stringify(unexpected)}`);

  for (const c of children) c.send({ type: 'exit' } satisfies ToClient);
  proto.onText = onText;
  await app.close().catch(() => {});
  await hub.stop();
  slots.closeAllConnections();
  slots.close();
}

// ---------------------------------------------------------------------------------------------------- main

if (values.role === 'clients') {
  await clientsRole();
} else if (Number(values.hubs) > 1) {
  console.log(`machine: ${cpus().length} × ${cpus()[0]?.model}, load average ${loadavg()[0]?.toFixed(1)} (the load generator shares it)`);
  const { clusterPart } = await import('./hub-cluster.ts');
  await clusterPart({
    hubs: Number(values.hubs),
    volunteers: Number(values.volunteers),
    push: Number(values.push),
    windowS: Number(values.window),
    heartbeatMs: HEARTBEAT_MS,
    beatPing: Number(values['beat-ping']),
    syncMs: Number(values['sync-ms']),
    cpuProfDir: values['cpu-prof'] || null,
  });
  process.exit(0);
} else {
  console.log(`machine: ${cpus().length} × ${cpus()[0]?.model}, load average ${loadavg()[0]?.toFixed(1)} (the load generator shares it)`);
  const part = values.part;
  // The channel part first: its memory per connection is measured in this process, which the http part's load
  // generator would leave holding freed memory.
  if (part === 'all' || part === 'channel')
    await channelPart(Number(values.channel), Number(values.push), Number(values.window), Number(values.clients));
  if (part === 'all' || part === 'http') await httpPart(Number(values.volunteers), Number(values.seconds));
  process.exit(0);
}
