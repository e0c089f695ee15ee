/**
 * Volunteers reconnecting to a hub that was killed and started again (issue 14: "10,000 simulated ones do not
 * stampede"). A real hub in this process (no model, no coordinator: volunteers say hello and wait), N real volunteer
 * clients (volunteer/client.ts, real WebSockets) in one child process (harness/reconnect-sim-clients.ts), then
 * per policy: the hub crashes (every socket destroyed at once and the listener gone, as when its process is killed),
 * a new hub starts on the same port and state directory (the token secret is in its SQLite store, so every
 * volunteer's token stays valid and nobody logs in again), and the new hub notes when each upgrade request and each
 * completed hello arrives. `npm run sim:reconnect` prints it; test/integration/reconnect.test.ts asserts it at 200.
 *
 *   const r = await runReconnectSim({ volunteers: 200, policies: ['jittered', 'fixed'] });
 *   const s = spread(r.phases[0].upgrades, FIRST_RETRY_WINDOW_MS);   // s.peak ≤ …, s.before === 0
 *
 * Times in results are milliseconds after the crash. The hub keeps its production defaults (10,000 connections at
 * most, one address's limits, hello timeout 10 s, heartbeats every 15 s; each volunteer dials from a loopback address
 * of its own) except the login rate limit, raised because the N volunteers log in from 127.0.0.1 before the first
 * crash. The new hub is built before the crash and listens right after it (`restartDelayMs` to wait longer).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../hub/app.ts';
import type { StreamSink } from '../hub/dashboard/stream.ts';
import { Hub, defaultConfig } from '../hub/hub.ts';
import { freePort } from '../hub/net.ts';
import { DEFAULT_BACKOFF } from '../volunteer/backoff.ts';
import { VOLUNTEER_PATH } from '../protocol/channel/index.ts';
import { type ClientsReport, type FromClients, type RedialPolicy, type ToClients, wallMs } from './reconnect-sim-clients.ts';

export type { RedialPolicy } from './reconnect-sim-clients.ts';

/** Where the first retry of the backoff falls: [base / 2, base). */
export const FIRST_RETRY_WINDOW_MS: readonly [number, number] = [DEFAULT_BACKOFF.baseMs / 2, DEFAULT_BACKOFF.baseMs];

export interface ReconnectSimOptions {
  volunteers: number;
  /** One crash and restart per entry, in this order, with the same volunteers. */
  policies: readonly RedialPolicy[];
  /** Seeds the volunteers' draws (each its own generator). Default 1. */
  seed?: number;
  /** Volunteers joining at once before the first crash. Default 100. */
  joinConcurrency?: number;
  /** One crash before the reported ones, to warm both processes up. Default false. */
  warmUp?: boolean;
  /** How long after the crash the new hub listens. Default 0 (at once). */
  restartDelayMs?: number;
  /** The longest wait for the N joins, and for every volunteer to be back after each crash. Default 300 s. */
  timeoutMs?: number;
  log?: (line: string) => void;
}

export interface PhaseResult {
  policy: RedialPolicy;
  volunteers: number;
  /** When the new hub listened. */
  listenAtMs: number;
  /** Distinct volunteers whose hello the new hub completed. */
  reconnected: number;
  /** When the last of them completed it (null: not all came back within the timeout). */
  allAtMs: number | null;
  /** At the new hub: each upgrade request of `/api/volunteer` and each completed hello (welcome sent). */
  upgrades: number[];
  hellos: number[];
  /** At the volunteers: when each noticed the drop. */
  drops: number[];
  /** At the volunteers: each dial, and what went wrong on the way back (retries after the drop, socket errors). */
  dials: number[];
  /** The most dials in one turn of the volunteers' event loop; volunteers that redialled in step with a fixed 500 ms (ClientsReport). */
  largestBurst: number;
  inStep: number;
  retries: Record<string, number>;
  errors: Record<string, number>;
  /** Volunteers by the retries they needed (1 = the first dial after the drop reached the hub). */
  attempts: Record<string, number>;
}

export interface ReconnectSimResult {
  joined: number;
  joinMs: number;
  phases: PhaseResult[];
}

const CLIENTS = fileURLToPath(new URL('./reconnect-sim-clients.ts', import.meta.url));

/** A hub on `port` with the state in `stateDir`, noting arrivals; built first, listening on `listen()`. */
interface SimHub {
  upgrades: number[];
  hellos: number[];
  helloFrom: Set<string>;
  /** When each volunteer completed its first hello here, in order. */
  firstHellos: number[];
  listen(): Promise<void>;
  /** Resolves when `count` distinct volunteers have completed their hello. */
  helloCount(count: number): Promise<void>;
  /** Closes the app and the hub, once. */
  close(): Promise<void>;
  /** The crash, in two steps a few milliseconds apart: the listener goes, then every socket; `close` cleans up after. */
  stopListening(): void;
  dropConnections(): void;
}

async function buildHub(stateDir: string, port: number): Promise<SimHub> {
  const hub = new Hub(defaultConfig({ host: '127.0.0.1', port, stateDir, authRateLimit: { capacity: 1e9, refillPerSec: 1e9 } }));
  await hub.load();
  const app: FastifyInstance = await buildApp(hub);
  const sockets = new Set<Socket>();
  const upgrades: number[] = [];
  const hellos: number[] = [];
  const helloFrom = new Set<string>();
  const firstHellos: number[] = [];
  let wanted: { count: number; resolve: () => void } | null = null;
  app.server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  // Before the channel's own listener: the moment the request is read, not when the hub gets round to it.
  app.server.prependListener('upgrade', (req: IncomingMessage) => {
    if ((req.url ?? '').split('?')[0] === VOLUNTEER_PATH) upgrades.push(wallMs());
  });
  // The hub's event stream (the dashboard's) sees each completed hello as it happens: `volunteer-join`.
  const sink: StreamSink = {
    write(chunk) {
      if (!chunk.startsWith('event: event\n') || !chunk.includes('"volunteer-join"')) return true;
      const e = JSON.parse(chunk.slice(chunk.indexOf('data: ') + 6)) as { kind: string; detail: string };
      if (e.kind !== 'volunteer-join') return true;
      const t = wallMs();
      const id = e.detail.split(' ')[0] ?? '';
      hellos.push(t);
      if (!helloFrom.has(id)) {
        helloFrom.add(id);
        firstHellos.push(t);
      }
      if (wanted && helloFrom.size >= wanted.count) wanted.resolve();
      return true;
    },
    end() {},
    destroy() {},
    writableLength: 0,
    destroyed: false,
    once: () => sink,
  };
  hub.dashboardStream('reconnect-sim')(sink);
  let crashed = false;
  let closed = false;
  return {
    upgrades,
    hellos,
    helloFrom,
    firstHellos,
    listen: async () => {
      await app.listen({ port, host: '127.0.0.1' });
    },
    helloCount: (count) => (helloFrom.size >= count ? Promise.resolve() : new Promise<void>((resolve) => (wanted = { count, resolve }))),
    stopListening() {
      crashed = true;
      app.server.close();
    },
    dropConnections() {
      for (const s of sockets) s.destroy();
    },
    async close() {
      if (closed) return;
      closed = true;
      // After a crash the listener is gone already; fastify's close then only runs the hooks (the hub's channel).
      await app.close().catch((e: NodeJS.ErrnoException) => {
        if (!(crashed && e.code === 'ERR_SERVER_NOT_RUNNING')) throw e;
      });
      await hub.stop();
    },
  };
}

/** The next message of `type` from the child, or an error after `ms`. */
function reply<T extends FromClients['type']>(child: ChildProcess, type: T, ms: number): Promise<Extract<FromClients, { type: T }>> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.off('message', on);
      reject(new Error(`the volunteers did not say ${type} within ${ms} ms`));
    }, ms);
    const on = (m: FromClients): void => {
      if (m.type !== type) return;
      clearTimeout(timer);
      child.off('message', on);
      resolve(m as Extract<FromClients, { type: T }>);
    };
    child.on('message', on);
  });
}

const after = (t0: number, xs: readonly number[]): number[] => xs.map((x) => x - t0).sort((a, b) => a - b);

export async function runReconnectSim(o: ReconnectSimOptions): Promise<ReconnectSimResult> {
  const log = o.log ?? (() => {});
  const timeoutMs = o.timeoutMs ?? 300_000;
  const stateDir = mkdtempSync(join(tmpdir(), 'es-reconnect-'));
  const port = await freePort();
  const hubs: SimHub[] = [];
  const build = async (): Promise<SimHub> => {
    const h = await buildHub(stateDir, port);
    hubs.push(h);
    return h;
  };
  let hub = await build();
  await hub.listen();
  const child = fork(CLIENTS, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const send = (m: ToClients): void => {
    child.send(m);
  };
  try {
    log(`joining ${o.volunteers} volunteers (login, hello) to a hub on port ${port}…`);
    const joinedP = reply(child, 'joined', timeoutMs);
    send({
      type: 'join',
      hubUrl: `http://127.0.0.1:${port}`,
      count: o.volunteers,
      seed: o.seed ?? 1,
      concurrency: o.joinConcurrency ?? 100,
    });
    const joined = await joinedP;
    log(
      `  ${joined.count} joined (${joined.failed} failed) in ${(joined.ms / 1000).toFixed(1)} s${joined.failed ? `: ${JSON.stringify(joined.why)}` : ''}`,
    );
    if (joined.count !== o.volunteers) throw new Error(`only ${joined.count} of ${o.volunteers} volunteers joined`);
    await hub.helloCount(o.volunteers);
    const phases: PhaseResult[] = [];
    // A first crash, not reported: the first time 10,000 drops run through both processes' code (cold, then
    // optimised; the join's garbage still to collect) it took up to twice as long, whichever policy came first.
    const rounds: Array<{ policy: RedialPolicy; report: boolean }> = [
      ...(o.warmUp ? [{ policy: 'jittered' as const, report: false }] : []),
      ...o.policies.map((policy) => ({ policy, report: true })),
    ];
    for (const { policy, report } of rounds) {
      const armed = reply(child, 'armed', 10_000);
      send({ type: 'arm', policy });
      await armed;
      const back = reply(child, 'back', timeoutMs).catch(() => null);
      // The new hub is built before the crash and listens right after it, before the old hub's sockets go (in this
      // one process their close events would hold up the listen for a second at 10,000). A process restarting takes
      // longer: with restartDelayMs the first dials of some volunteers are refused and they back off again.
      const next = await build();
      const dead = hub;
      hub = next;
      const t0 = wallMs();
      dead.stopListening();
      if (!o.restartDelayMs) await hub.listen();
      dead.dropConnections();
      if (o.restartDelayMs) {
        await new Promise((r) => setTimeout(r, o.restartDelayMs));
        await hub.listen();
      }
      const listenAtMs = wallMs() - t0;
      const name = report ? policy : 'warm-up';
      log(`${name}: crashed; the new hub listened after ${listenAtMs.toFixed(0)} ms`);
      // Back at both ends: the new hub completed N distinct hellos and every volunteer is waiting again.
      const all = await Promise.race([
        Promise.all([hub.helloCount(o.volunteers), back]).then(([, b]) => b !== null),
        new Promise<false>((r) => setTimeout(() => r(false), timeoutMs).unref()),
      ]);
      const reportP = reply(child, 'report', 30_000);
      send({ type: 'report' });
      const rep: ClientsReport = await reportP;
      const reconnected = hub.helloFrom.size;
      log(`${name}: ${reconnected} of ${o.volunteers} back (${rep.waiting} waiting at the volunteers)`);
      await dead.close(); // a killed process cleans nothing up: the old hub's own teardown waits until now
      // Let the last welcomes land before the next crash (the volunteers' attempt counters reset on welcome).
      if (rounds.length > 1) await back;
      if (!report) continue;
      phases.push({
        policy,
        volunteers: o.volunteers,
        listenAtMs,
        reconnected,
        allAtMs: all ? (hub.firstHellos[o.volunteers - 1] as number) - t0 : null,
        upgrades: after(t0, hub.upgrades),
        hellos: after(t0, hub.hellos),
        drops: after(t0, rep.drops),
        dials: after(t0, rep.dials),
        largestBurst: rep.largestBurst,
        inStep: rep.inStep,
        retries: rep.retries,
        errors: rep.errors,
        attempts: rep.attempts,
      });
    }
    return { joined: joined.count, joinMs: joined.ms, phases };
  } finally {
    if (child.connected) child.send({ type: 'exit' } satisfies ToClients);
    await new Promise<void>((r) => {
      const t = setTimeout(() => {
        child.kill('SIGKILL');
        r();
      }, 5_000);
      if (child.exitCode !== null) {
        clearTimeout(t);
        r();
      } else
        child.once('exit', () => {
          clearTimeout(t);
          r();
        });
    });
    for (const h of hubs) await h.close().catch(() => {});
    rmSync(stateDir, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------------- the numbers

/** Arrivals per bucket of `bucketMs`, from 0 to `untilMs` (later ones in the last bucket). */
export function histogram(times: readonly number[], bucketMs: number, untilMs: number): number[] {
  const out = new Array<number>(Math.max(1, Math.ceil(untilMs / bucketMs))).fill(0);
  for (const t of times) {
    const i = Math.min(out.length - 1, Math.max(0, Math.floor(t / bucketMs)));
    out[i] = (out[i] as number) + 1;
  }
  return out;
}

export interface Spread {
  count: number;
  firstMs: number;
  lastMs: number;
  /** Arrivals before the window opens (an immediate redial would put them here), and in the first 100 ms. */
  before: number;
  first100: number;
  /** The fullest 100 ms bucket (aligned to the crash), and where it starts. */
  peak: number;
  peakAtMs: number;
  /** Arrivals per 100 ms over the buckets from the first to the last arrival. */
  mean: number;
  /** Arrivals per 100 ms if `n` of them were spread evenly over `window` (what a perfect jitter gives). */
  uniform: number;
  peakOverUniform: number;
  peakOverMean: number;
}

export const BUCKET_MS = 100;

/**
 * How arrivals (ms after the crash) spread, against an even spread of `n` of them (default: all; the volunteers,
 * when some dialled twice) over `window` ([begin, end) ms).
 */
export function spread(times: readonly number[], window: readonly [number, number], n = times.length): Spread {
  const count = times.length;
  const firstMs = count ? Math.min(...times) : Number.NaN;
  const lastMs = count ? Math.max(...times) : Number.NaN;
  const h = histogram(times, BUCKET_MS, count ? lastMs + BUCKET_MS : BUCKET_MS);
  let peak = 0;
  let peakAt = 0;
  h.forEach((n, i) => {
    if (n > peak) {
      peak = n;
      peakAt = i;
    }
  });
  const spanned = count ? Math.floor(lastMs / BUCKET_MS) - Math.floor(firstMs / BUCKET_MS) + 1 : 1;
  const mean = count / spanned;
  const uniform = n / ((window[1] - window[0]) / BUCKET_MS);
  return {
    count,
    firstMs,
    lastMs,
    before: times.filter((t) => t < window[0]).length,
    first100: times.filter((t) => t < 100).length,
    peak,
    peakAtMs: peakAt * BUCKET_MS,
    mean,
    uniform,
    peakOverUniform: uniform > 0 ? peak / uniform : Number.NaN,
    peakOverMean: mean > 0 ? peak / mean : Number.NaN,
  };
}

const n0 = (x: number): string => (Number.isFinite(x) ? Math.round(x).toLocaleString('en-US') : '–');
const s1 = (ms: number | null): string => (ms === null || !Number.isFinite(ms) ? '–' : `${(ms / 1000).toFixed(2)} s`);
const tally = (o: Record<string, number>): string =>
  Object.entries(o)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${v}`)
    .join(', ') || 'none';

/** The comparison as printed by `npm run sim:reconnect`: one column per policy, then the histograms. */
export function formatReconnectSim(r: ReconnectSimResult): string {
  const cols = r.phases.map((p) => ({
    p,
    d: spread(p.dials, FIRST_RETRY_WINDOW_MS, p.volunteers),
    u: spread(p.upgrades, FIRST_RETRY_WINDOW_MS, p.volunteers),
    h: spread(p.hellos, FIRST_RETRY_WINDOW_MS, p.volunteers),
  }));
  const W = 26;
  const row = (label: string, f: (c: (typeof cols)[number]) => string): string =>
    `${label.padEnd(44)}${cols.map((c) => f(c).padStart(W)).join('')}`;
  const lines: string[] = [];
  lines.push(row('', (c) => (c.p.policy === 'fixed' ? 'fixed 500 ms (control)' : 'jittered (shipped)')));
  lines.push(row('new hub listening after', (c) => s1(c.p.listenAtMs)));
  lines.push(row('reconnected (hellos at the new hub)', (c) => `${n0(c.p.reconnected)} / ${n0(c.p.volunteers)}`));
  lines.push(row('time to all reconnected', (c) => s1(c.p.allAtMs)));
  lines.push(
    row('volunteers saw the drop: first, last', (c) => `${s1(c.p.drops[0] ?? null)}, ${s1(c.p.drops[c.p.drops.length - 1] ?? null)}`),
  );
  lines.push(row('half reconnected after', (c) => s1(c.p.hellos[Math.floor(c.p.volunteers / 2) - 1] ?? null)));
  for (const [name, key] of [
    ['dials (volunteer side)', 'd'],
    ['upgrade requests at the new hub', 'u'],
    ['completed hellos at the new hub', 'h'],
  ] as const) {
    lines.push(`${name}:`);
    lines.push(row('  count; first, last', (c) => `${n0(c[key].count)}; ${s1(c[key].firstMs)}, ${s1(c[key].lastMs)}`));
    lines.push(row('  in the first 100 ms / before 500 ms', (c) => `${n0(c[key].first100)} / ${n0(c[key].before)}`));
    lines.push(row('  peak per 100 ms (bucket start)', (c) => `${n0(c[key].peak)} (${s1(c[key].peakAtMs)})`));
    lines.push(row('  mean per 100 ms, first to last', (c) => n0(c[key].mean)));
    lines.push(row('  N spread evenly over [0.5 s, 1 s), per 100 ms', (c) => n0(c[key].uniform)));
    lines.push(row('  peak / uniform', (c) => c[key].peakOverUniform.toFixed(2)));
    lines.push(row('  peak / mean', (c) => c[key].peakOverMean.toFixed(2)));
  }
  lines.push(row('most dials in one event-loop turn', (c) => n0(c.p.largestBurst)));
  lines.push(row('redialled in step with a fixed 500 ms', (c) => n0(c.p.inStep)));
  lines.push(row('dials per volunteer (1 = first dial got in)', (c) => tally(c.p.attempts)));
  for (const c of cols) {
    lines.push(`refused or failed on the way back, ${c.p.policy}: retries ${tally(c.p.retries)}; socket errors ${tally(c.p.errors)}`);
  }

  // Histograms: every 100 ms up to 2 s, then every second up to the last hello.
  const end = Math.max(2_000, ...cols.map((c) => (Number.isFinite(c.h.lastMs) ? c.h.lastMs + 1 : 0)));
  const header = `${'arrivals from the crash'.padEnd(24)}${cols
    .map((c) => `${`${c.p.policy}: dials`.padStart(16)}${'upgrades'.padStart(10)}${'hellos'.padStart(10)}`)
    .join('')}`;
  lines.push('', header);
  const fine = cols.map((c) => [c.p.dials, c.p.upgrades, c.p.hellos].map((xs) => histogram(xs, BUCKET_MS, end + BUCKET_MS)));
  const coarse = cols.map((c) => [c.p.dials, c.p.upgrades, c.p.hellos].map((xs) => histogram(xs, 1_000, end + 1_000)));
  for (let i = 0; i < 20; i++) {
    const label = `[${(i / 10).toFixed(1)}, ${((i + 1) / 10).toFixed(1)}) s`;
    lines.push(
      `${label.padEnd(24)}${fine.map(([d, u, h]) => `${n0(d![i]!).padStart(16)}${n0(u![i]!).padStart(10)}${n0(h![i]!).padStart(10)}`).join('')}`,
    );
  }
  for (let i = 2; i * 1_000 < end; i++) {
    const label = `[${i}, ${i + 1}) s`;
    lines.push(
      `${label.padEnd(24)}${coarse.map(([d, u, h]) => `${n0(d![i]!).padStart(16)}${n0(u![i]!).padStart(10)}${n0(h![i]!).padStart(10)}`).join('')}`,
    );
  }
  return lines.join('\n');
}
