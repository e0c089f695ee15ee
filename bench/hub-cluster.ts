/**
 * `npm run bench:hub -- --hubs 4 --volunteers 100000` (bench/hub.ts hands over here when --hubs > 1): a cluster of
 * hubs on one real Redis (Debian's redis-server, harness/redis.ts, TCP on loopback), each hub in a process of its own,
 * with simulated volunteers holding the channel (`/api/volunteer`) open, spread evenly over the hubs by client
 * processes (bench/hub.ts `--role clients`, each from its own loopback source address). Every hub fronts the same
 * stand-in coordinator (a `/slots` server in this process, one path per hub so that each hub's first saturated
 * reading is known). Printed, not asserted:
 *
 * - connect: how many volunteers each hub holds, and how fast they joined;
 * - hold (`--window` s, every volunteer heartbeating every 15 s): a heartbeat's round trip at the volunteer (a ping
 *   sent right behind a sampled heartbeat, its pong timed: it comes once the hub handled the heartbeat), each hub's
 *   handler time per heartbeat, each hub's CPU (% of one core) and event-loop delay, Redis's ops/s and CPU;
 * - push: demand appears (the stand-in's slots turn busy): from each hub's first saturated reading to each `assign`
 *   at its idle volunteers (`--push` of them, spread over the hubs), p50 / p99 / last;
 * - serving (`--window` s, the pushed volunteers heartbeating their slices, so their records go to Redis and every
 *   hub mirrors every hub's): the same readings again.
 *
 * Each process raises its own open-file limit where it may (root here; bench/hub.ts's npm script raises the
 * soft limit to the hard one): 100,000 connections on 4 hubs are 25,000 sockets a hub and as many on the client side.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync, sign } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { startRedis } from '../harness/redis.ts';
import { MANY_FROM_ONE_ADDRESS } from '../harness/hub-fixtures.ts';
import { encodeBase58 } from '../protocol/base58.ts';
import { VOLUNTEER_PATH } from '../protocol/channel/index.ts';
import { loopDelay } from './loop-delay.ts';
import type { FromClient, ToClient } from './hub-clients-protocol.ts';

const q = (xs: ArrayLike<number>, p: number): number => {
  const s = Float64Array.from(xs).sort();
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? Number.NaN;
};
const wallMs = (): number => performance.timeOrigin + performance.now();
const HUB_SCRIPT = fileURLToPath(import.meta.url);
const CLIENTS_SCRIPT = fileURLToPath(new URL('./hub.ts', import.meta.url));
/** Connections one client process holds at most (its sockets, plus a margin under the open-file limit). */
const PER_CLIENT = 12_500;
/** The open-file limit each child asks for (root with CAP_SYS_RESOURCE may raise it up to fs.nr_open). */
const NOFILE = 200_000;
/** Whether this process could raise its limit to NOFILE (then its children can too). */
const NOFILE_IF_RAISED = (): number => {
  try {
    const r = spawnSync('bash', ['-c', `ulimit -n ${NOFILE} 2>/dev/null && echo ok`], { encoding: 'utf8' });
    return r.stdout.trim() === 'ok' ? NOFILE : 0;
  } catch {
    return 0;
  }
};

export interface ClusterBenchOptions {
  hubs: number;
  volunteers: number;
  push: number;
  windowS: number;
  heartbeatMs: number;
  /** The share of heartbeats followed by a timed ping. */
  beatPing: number;
  syncMs: number;
  /** Hub 0 writes a V8 CPU profile of each window here (DIR/hub-0-hold.cpuprofile, …-serving…); null: none. */
  cpuProfDir: string | null;
}

/** What the main process tells a hub process, and what it answers. */
type ToHub = { type: 'start'; job: HubJob } | { type: 'window'; on: boolean; name?: string } | { type: 'report' } | { type: 'exit' };
interface HubJob {
  index: number;
  redis: string;
  slotsUrl: string;
  maxWorkers: number;
  heartbeatMs: number;
  tokens: number;
  syncMs: number;
  cpuProfDir: string | null;
}
interface HubReport {
  type: 'report';
  index: number;
  cpuUs: number;
  windowS: number;
  beats: number[];
  loopP99: number;
  loopMax: number;
  states: Record<string, number>;
  rssMiB: number;
  cluster: { state: string; workers: number; hubs: number } | null;
}
type FromHub = { type: 'ready'; url: string; tokens: string[] } | HubReport;

/** A child on this script or bench/hub.ts, through bash so that its open-file limit can be raised first. */
function child(script: string, args: string[]): ChildProcess {
  return spawn(
    'bash',
    [
      '-c',
      `ulimit -n ${NOFILE} 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$@"`,
      'bash',
      process.execPath,
      ...process.execArgv,
      script,
      ...args,
    ],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  );
}

function next<T extends { type: string }>(c: ChildProcess, type: T['type']): Promise<T> {
  return new Promise((resolve, reject) => {
    const on = (m: T): void => {
      if (m.type !== type) return;
      c.off('message', on);
      c.off('exit', dead);
      resolve(m);
    };
    const dead = (code: number | null): void => reject(new Error(`a child process exited (${code}) before answering ${type}`));
    c.on('message', on);
    c.once('exit', dead);
  });
}

/** This process's RSS, MiB; NaN when it cannot be read (out of file descriptors: reading it opens /proc). */
const rssMiB = (): number => {
  try {
    return process.memoryUsage.rss() / 2 ** 20;
  } catch {
    return Number.NaN;
  }
};

/** The open-file limit a child gets: the hard limit (raising it needs CAP_SYS_RESOURCE, which a container may drop). */
const hardNofile = (): number => {
  const line = readFileSync('/proc/self/limits', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('Max open files'));
  const hard = Number(line?.split(/\s+/)[4]);
  return Number.isFinite(hard) ? hard : Number.POSITIVE_INFINITY;
};

const procCpuS = (pid: number | null): number => {
  if (!pid) return Number.NaN;
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    return (Number(f[11]) + Number(f[12])) / 100; // utime + stime, clock ticks of 10 ms
  } catch {
    return Number.NaN;
  }
};

export async function clusterPart(o: ClusterBenchOptions): Promise<void> {
  const redis = await startRedis({ listen: 'tcp' });
  const info = async (): Promise<number> => Number(/total_commands_processed:(\d+)/.exec(await redis.command('INFO', 'stats'))?.[1]);

  // The stand-in coordinator: /h<i>/slots answers hub i; busy 0 until the push phase (saturated: busy 2 of 4).
  const coordinator = { busy: 0, firstBusyAt: new Map<number, number>() };
  const slots = createServer((req, res) => {
    const hub = Number(/^\/h(\d+)\//.exec(req.url ?? '')?.[1] ?? -1);
    if (coordinator.busy >= 2 && !coordinator.firstBusyAt.has(hub)) coordinator.firstBusyAt.set(hub, wallMs());
    res.end(JSON.stringify(Array.from({ length: 4 }, (_, i) => ({ id: i, is_processing: i < coordinator.busy }))));
  });
  await new Promise<void>((r) => slots.listen(0, '127.0.0.1', r));
  const slotsPort = (slots.address() as AddressInfo).port;

  const H = o.hubs;
  const K = Math.max(H, Math.ceil(o.volunteers / PER_CLIENT / H) * H); // client processes, a whole number per hub
  const hubs: ChildProcess[] = [];
  const clients: ChildProcess[] = [];
  const stopAll = async (): Promise<void> => {
    for (const c of [...clients, ...hubs]) if (c.exitCode === null && c.connected) c.send({ type: 'exit' }, () => {});
    await new Promise((r) => setTimeout(r, 500));
    for (const c of [...clients, ...hubs]) if (c.exitCode === null) c.kill('SIGKILL');
    slots.closeAllConnections();
    slots.close();
    await redis.stop();
  };
  try {
    const perHub = Math.ceil(o.volunteers / H);
    const limit = Math.max(hardNofile(), NOFILE_IF_RAISED());
    if (perHub > limit - 500)
      console.log(
        `  note: ${perHub} volunteers a hub, but a process may open ${limit} files here (hard limit; raising it needs CAP_SYS_RESOURCE): each hub holds at most ~${limit - 500} and refuses the rest with EMFILE`,
      );
    const ready: Array<{ url: string; tokens: string[] }> = [];
    for (let i = 0; i < H; i++) {
      const h = child(HUB_SCRIPT, ['--role', 'cluster-hub']);
      hubs.push(h);
      const r = next<Extract<FromHub, { type: 'ready' }>>(h, 'ready');
      h.send({
        type: 'start',
        job: {
          index: i,
          redis: redis.url,
          slotsUrl: `http://127.0.0.1:${slotsPort}/h${i}`,
          maxWorkers: perHub + 100,
          heartbeatMs: o.heartbeatMs,
          tokens: K / H,
          syncMs: o.syncMs,
          cpuProfDir: i === 0 ? o.cpuProfDir : null,
        },
      } satisfies ToHub);
      ready.push(await r);
    }
    console.log(
      `cluster: ${H} hubs on one Redis (redis-server, TCP loopback), sync every ${o.syncMs} ms; ${o.volunteers} volunteers in ${K} client processes`,
    );

    const t0 = performance.now();
    for (let i = 0; i < K; i++) {
      const hub = i % H;
      const slot = Math.floor(i / H);
      const count = Math.floor(o.volunteers / K) + (i < o.volunteers % K ? 1 : 0);
      const eligible = Math.floor(o.push / K) + (i < o.push % K ? 1 : 0);
      const c = child(CLIENTS_SCRIPT, ['--role', 'clients']);
      clients.push(c);
      c.send({
        type: 'start',
        job: {
          url: `${ready[hub]?.url.replace(/^http/, 'ws')}${VOLUNTEER_PATH}`,
          token: ready[hub]?.tokens[slot] as string,
          prefix: `h${hub}c${slot}`,
          count,
          eligible,
          heartbeatMs: o.heartbeatMs,
          beatPing: o.beatPing,
          localAddress: `127.0.${1 + Math.floor(i / 250)}.${2 + (i % 250)}`,
        },
      } satisfies ToClient);
    }
    type Connected = Extract<FromClient, { type: 'connected' }>;
    const connected = await Promise.all(clients.map((c) => next<Connected>(c, 'connected')));
    const connectS = (performance.now() - t0) / 1000;
    const held = connected.reduce((s, c) => s + c.count, 0);
    const failed = connected.reduce((s, c) => s + c.failed, 0);
    console.log(`  connected ${held} of ${o.volunteers} (failed ${failed}) in ${connectS.toFixed(1)} s: ${(held / connectS).toFixed(0)}/s`);
    if (failed > 0) console.log(`  closes at the failed: ${JSON.stringify(connected.map((c) => c.closes))}`);
    await new Promise((r) => setTimeout(r, 2_000)); // the last pauses land

    type ClientReport = Extract<FromClient, { type: 'report' }>;
    const reportClients = (): Promise<ClientReport[]> =>
      Promise.all(
        clients.map((c) => {
          const r = next<ClientReport>(c, 'report');
          c.send({ type: 'report' } satisfies ToClient);
          return r;
        }),
      );
    const reportHubs = (): Promise<HubReport[]> =>
      Promise.all(
        hubs.map((h) => {
          const r = next<HubReport>(h, 'report');
          h.send({ type: 'report' } satisfies ToHub);
          return r;
        }),
      );

    /** One measured window: every hub's handler, CPU and loop; the volunteers' heartbeat round trips; Redis. */
    const window = async (name: string): Promise<void> => {
      await reportClients(); // drop what came before
      for (const h of hubs) h.send({ type: 'window', on: true, name } satisfies ToHub);
      const ops0 = await info();
      const rcpu0 = procCpuS(redis.pid());
      const w0 = performance.now();
      await new Promise((r) => setTimeout(r, o.windowS * 1000));
      const s = (performance.now() - w0) / 1000;
      const ops1 = await info();
      const rcpu1 = procCpuS(redis.pid());
      for (const h of hubs) h.send({ type: 'window', on: false } satisfies ToHub);
      const hr = await reportHubs();
      const cr = await reportClients();
      const beat = cr.flatMap((r) => r.beatMs);
      const open = cr.reduce((n, r) => n + r.open, 0);
      console.log(`  ${name} ${s.toFixed(0)} s, ${open} volunteers open:`);
      console.log(
        `    heartbeat round trip at the volunteer (heartbeat, then a ping behind it): n=${beat.length} p50 ${q(beat, 0.5).toFixed(1)} ms  p99 ${q(beat, 0.99).toFixed(1)} ms  max ${q(beat, 1).toFixed(0)} ms`,
      );
      console.log(`    Redis: ${((ops1 - ops0) / s).toFixed(0)} ops/s, CPU ${(((rcpu1 - rcpu0) / s) * 100).toFixed(1)} % of one core`);
      // The volunteers' processes: their own loop delay is in each round trip they time.
      const cs = cr.map((r) => ((r.cpuS / s) * 100).toFixed(0)).join(', ');
      const cl = cr.map((r) => r.loopP99);
      console.log(
        `    the ${cr.length} client processes: CPU ${cs} % of one core; loop delay p99 ${Math.min(...cl).toFixed(1)}–${Math.max(...cl).toFixed(1)} ms, max ${Math.max(...cr.map((r) => r.loopMax)).toFixed(0)} ms`,
      );
      for (const r of hr.sort((x, y) => x.index - y.index))
        console.log(
          `    hub ${r.index}: CPU ${((r.cpuUs / 1e6 / r.windowS) * 100).toFixed(1)} % of one core; ${(r.beats.length / r.windowS).toFixed(0)} heartbeats/s, handler p50 ${q(r.beats, 0.5).toFixed(0)} µs p99 ${q(r.beats, 0.99).toFixed(0)} µs; loop delay p99 ${r.loopP99.toFixed(1)} ms max ${r.loopMax.toFixed(0)} ms; RSS ${r.rssMiB.toFixed(0)} MiB; states ${JSON.stringify(r.states)}; cluster ${JSON.stringify(r.cluster)}`,
        );
    };

    await window('hold');

    // Push: demand appears; each hub's poller reads its path busy and recruits its idle volunteers.
    for (const h of hubs) h.send({ type: 'window', on: true, name: 'push' } satisfies ToHub);
    coordinator.busy = 2;
    const pushed: Array<{ at: number; hub: number }> = [];
    const deadline = performance.now() + 60_000;
    while (pushed.length < o.push && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      const rs = await reportClients();
      rs.forEach((r, i) => {
        for (const at of r.assigns) pushed.push({ at, hub: i % H });
      });
    }
    const since = pushed.map((p) => p.at - (coordinator.firstBusyAt.get(p.hub) ?? Number.NaN)).sort((a, b) => a - b);
    const first = Math.min(...coordinator.firstBusyAt.values());
    const overall = pushed.map((p) => p.at - first).sort((a, b) => a - b);
    console.log(
      `  push: ${pushed.length} of ${o.push} idle volunteers assigned; from each hub's own saturated reading: p50 ${q(since, 0.5).toFixed(0)} ms, p99 ${q(since, 0.99).toFixed(0)} ms, last ${since.at(-1)?.toFixed(0)} ms; from the first hub's reading (the pollers' phases apart): last ${overall.at(-1)?.toFixed(0)} ms`,
    );
    for (const h of hubs) h.send({ type: 'window', on: false } satisfies ToHub);
    for (const r of (await reportHubs()).sort((x, y) => x.index - y.index))
      console.log(
        `    hub ${r.index} during the push (${r.windowS.toFixed(1)} s): CPU ${((r.cpuUs / 1e6 / r.windowS) * 100).toFixed(1)} % of one core; loop delay p99 ${r.loopP99.toFixed(1)} ms max ${r.loopMax.toFixed(0)} ms`,
      );
    for (let h = 0; h < H; h++) {
      const mine = pushed.filter((p) => p.hub === h).map((p) => p.at - (coordinator.firstBusyAt.get(h) ?? Number.NaN));
      console.log(`    hub ${h}: ${mine.length} assigned, last ${Math.max(...mine).toFixed(0)} ms after its saturated reading`);
    }
    await new Promise((r) => setTimeout(r, 2_000)); // loaded, records written and mirrored
    await window('serving');
  } finally {
    await stopAll();
  }
}

// ---------------------------------------------------------------------------------------------------- a hub's process

async function hubRole(): Promise<void> {
  const { Hub, defaultConfig } = await import('../hub/hub.ts');
  const { buildApp } = await import('../hub/app.ts');
  const { VolunteerChannel } = await import('../hub/channel/channel.ts');
  const { testModel } = await import('../harness/models.ts');
  const job = await new Promise<HubJob>((resolve) =>
    process.once('message', (m: ToHub) => {
      if (m.type === 'start') resolve(m.job);
    }),
  );
  const model = await testModel({ arch: 'qwen3moe', layers: 8, nEmbd: 64, ff: 64, nExpert: 64, nExpertUsed: 4, seed: 2 });
  const hub = new Hub(
    defaultConfig({
      stateDir: ':memory:',
      models: [{ path: model.path, name: 'bench' }],
      externals: [{ name: 'bench', url: job.slotsUrl }],
      poller: { intervalMs: 2_000, timeoutMs: 1_000 },
      saturation: { saturateAt: 2, maxReadingAgeMs: 30_000, targetBase: 0, boost: 2 },
      maxWorkers: job.maxWorkers,
      authRateLimit: { capacity: 1e9, refillPerSec: 1e9 },
      channel: { heartbeatMs: job.heartbeatMs, ...MANY_FROM_ONE_ADDRESS.channel },
      http: MANY_FROM_ONE_ADDRESS.http,
      redis: job.redis,
      cluster: { hubId: `hub-${job.index}`, syncMs: job.syncMs },
    }),
  );
  await hub.load();
  const app = await buildApp(hub);
  await app.listen({ port: 0, host: '127.0.0.1' });
  await hub.start();
  const tokens: string[] = [];
  for (let i = 0; i < job.tokens; i++) {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    const wallet = encodeBase58(new Uint8Array(Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url')));
    const c = await app.inject({ method: 'POST', url: '/api/auth/challenge', payload: { wallet } });
    const t = await app.inject({
      method: 'POST',
      url: '/api/auth/node-token',
      payload: { wallet, nonce: c.json().nonce, signature: sign(null, Buffer.from(c.json().message), privateKey).toString('base64') },
    });
    tokens.push(t.json().node_token);
  }
  const channel = (hub as unknown as { channel: InstanceType<typeof VolunteerChannel> }).channel;

  // The heartbeat handler's wall time (µs), as bench/hub.ts's channel part times it.
  const beats: number[] = [];
  let on = false;
  const HEARTBEAT_PREFIX = Buffer.from('{"type":"heartbeat"');
  const proto = VolunteerChannel.prototype as unknown as { onText(c: unknown, b: Uint8Array): void };
  const onText = proto.onText;
  proto.onText = function (this: unknown, c: unknown, b: Uint8Array): void {
    if (!on || Buffer.compare(HEARTBEAT_PREFIX, b.subarray(0, HEARTBEAT_PREFIX.length)) !== 0) {
      onText.call(this, c, b);
      return;
    }
    const t0 = performance.now();
    try {
      onText.call(this, c, b);
    } finally {
      beats.push((performance.now() - t0) * 1000);
    }
  };
  let cpu0 = process.cpuUsage();
  let w0 = performance.now();
  let loop: ReturnType<typeof loopDelay> | null = null;
  let windowS = 0;
  let cpuUs = 0;
  let loopP99 = Number.NaN;
  let loopMax = Number.NaN;
  // --cpu-prof: this hub's CPU profile of each window (the inspector's profiler, sampling every 100 µs).
  const { Session } = await import('node:inspector/promises');
  const prof = job.cpuProfDir ? new Session() : null;
  let profName = '';
  if (prof) {
    prof.connect();
    await prof.post('Profiler.enable');
    await prof.post('Profiler.setSamplingInterval', { interval: 100 });
  }
  process.on('message', (m: ToHub) => {
    if (m.type === 'window') {
      if (prof && m.on) {
        profName = m.name ?? 'window';
        void prof.post('Profiler.start');
      } else if (prof) {
        void prof.post('Profiler.stop').then(({ profile }) => {
          mkdirSync(job.cpuProfDir as string, { recursive: true });
          writeFileSync(`${job.cpuProfDir}/hub-${job.index}-${profName}.cpuprofile`, JSON.stringify(profile));
        });
      }
      if (m.on) {
        beats.length = 0;
        cpu0 = process.cpuUsage();
        w0 = performance.now();
        loop = loopDelay(10);
        on = true;
      } else {
        on = false;
        const c = process.cpuUsage(cpu0);
        cpuUs = c.user + c.system;
        windowS = (performance.now() - w0) / 1000;
        loopP99 = loop?.ms(99) ?? Number.NaN;
        loopMax = loop?.maxMs() ?? Number.NaN;
        loop?.stop();
      }
    } else if (m.type === 'report') {
      const cs = hub.clusterStatus() as unknown as { state: string; hubs?: unknown[]; remote_workers?: number } | null;
      process.send?.({
        type: 'report',
        index: job.index,
        cpuUs,
        windowS,
        beats: beats.splice(0),
        loopP99,
        loopMax,
        states: channel.countByState() as unknown as Record<string, number>,
        rssMiB: rssMiB(),
        cluster: cs ? { state: cs.state, workers: cs.remote_workers ?? -1, hubs: cs.hubs?.length ?? -1 } : null,
      } satisfies HubReport);
    } else if (m.type === 'exit') {
      void app.close().finally(() => process.exit(0));
      setTimeout(() => process.exit(0), 2_000).unref();
    }
  });
  process.send?.({ type: 'ready', url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, tokens } satisfies FromHub);
}

if (process.argv[1] === HUB_SCRIPT && process.argv.includes('cluster-hub')) {
  await hubRole();
}
