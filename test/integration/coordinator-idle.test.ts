/**
 * A coordinator started with `--expert-dispatch` must cost nothing while its dispatcher is missing or mute: the
 * connector thread backs off (100 ms doubling to 2 s) and every HELLO wait is bounded, so an idle server stays idle.
 * Regression test for a connector that retried without sleeping after every failed attempt: idle, it burnt most of a
 * core with nobody listening and against a socket that listens but never accepts, and slowed decoding on 2 cores
 * several-fold.
 *
 * Per case the real linkcpp-server runs on a generated model; once healthy it idles IDLE_MS and its CPU time is read
 * from /proc/<pid>/stat (utime + stime): it must stay under MAX_IDLE_SHARE of one core. Then a real dispatcher
 * appears on the same path and the coordinator must say HELLO within RECONNECT_MS (the backoff must not make
 * reconnecting slow) and have its next completion served.
 */
import { after, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GGMLType } from '../../gguf/quant-types.ts';
import { completeGreedy, startServer, type RunningServer } from '../../harness/linkcpp.ts';
import { testModel, type TestModel } from '../../harness/models.ts';
import { TestDispatcher } from '../../harness/test-dispatcher.ts';

const dir = await mkdtemp(join(tmpdir(), 'es-idle-'));
after(() => rm(dir, { recursive: true, force: true }));

/** How long the server idles while measured, and the settling time after /health first answers. */
const IDLE_MS = 5000;
const SETTLE_MS = 500;
/**
 * Largest CPU share of one core an idle coordinator may use. Measured on 2 shared cores after the fix: ≤ 0.4 % in every
 * case, as without --expert-dispatch (the connector wakes a few times a second at most). Before it: 72–95 % with
 * nobody listening, 29–83 % against a listener that never accepts (less when other processes held the cores);
 * against a listener that accepts and stays mute, 0.2 % (each attempt slept in the bounded HELLO wait).
 */
const MAX_IDLE_SHARE = 0.05;
/** A dispatcher that appears must get HELLO within this: the backoff's 2 s ceiling plus the handshake, with room. */
const RECONNECT_MS = 4000;

const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** CPU seconds (user + system, all threads) the process has used so far. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) / CLK_TCK;
}

/** CPU share of one core the server uses while nothing is asked of it. */
async function idleShare(server: RunningServer): Promise<number> {
  const pid = server.proc.pid;
  assert.ok(pid !== undefined, 'the server has a pid');
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const c0 = cpuSeconds(pid);
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, IDLE_MS));
  const c1 = cpuSeconds(pid);
  return (c1 - c0) / ((performance.now() - t0) / 1000);
}

/** A socket that accepts every connection, reads what comes and never answers (a hung dispatcher). */
async function muteListener(path: string): Promise<{ server: Server; connections: () => number; close: () => Promise<void> }> {
  await rm(path, { force: true });
  const sockets = new Set<Socket>();
  let count = 0;
  const server = createServer((s) => {
    count++;
    sockets.add(s);
    s.on('data', () => {});
    s.on('error', () => s.destroy());
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => resolve());
  });
  return {
    server,
    connections: () => count,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await rm(path, { force: true });
    },
  };
}

/**
 * A socket that listens but never accepts (its process sleeps, backlog 1): the kernel completes the first connections
 * into the backlog, where HELLO goes unanswered, and refuses the next ones at once (EAGAIN), which the old connector
 * retried without pause.
 */
async function neverAccepting(path: string): Promise<{ close: () => Promise<void> }> {
  await rm(path, { force: true });
  const script =
    "const s = require('node:net').createServer(); s.listen({ path: process.argv[1], backlog: 1 }, () => {" +
    " process.stdout.write('listening\\n'); Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 120000); process.exit(0); });";
  const child = spawn(process.execPath, ['-e', script, path], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('the never-accepting listener did not start')), 10_000);
    child.stdout.once('data', () => {
      clearTimeout(t);
      resolve();
    });
  });
  return {
    close: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
      await rm(path, { force: true });
    },
  };
}

/** A dispatcher appears at `sock`: the coordinator must connect within RECONNECT_MS and be served afterwards. */
async function dispatcherAppears(t: TestContext, server: RunningServer, m: TestModel, sock: string): Promise<void> {
  const t0 = performance.now();
  const d = await TestDispatcher.start(sock, m.path, 'all');
  try {
    await d.waitForHello(RECONNECT_MS);
    const ms = performance.now() - t0;
    t.diagnostic(`HELLO ${ms.toFixed(0)} ms after the dispatcher appeared`);
    assert.ok(ms <= RECONNECT_MS, `HELLO after ${ms.toFixed(0)} ms`);
    const got = await completeGreedy(server.url, 'The swarm serves', 4, m.ban);
    assert.equal(got.tokens.length, 4);
    assert.ok(d.stats.servedPairs > 0, 'the reconnected dispatcher serves the next completion');
    assert.deepEqual(d.stats.protocolErrors, []);
  } finally {
    await d.stop();
  }
}

const small = { layers: 3, nEmbd: 64, ff: 64, sharedFf: 64, nExpert: 8, nExpertUsed: 2, type: GGMLType.Q8_0, seed: 23 };

test('control: the server without --expert-dispatch idles near 0 % of a core', async (t) => {
  const m = await testModel({ arch: 'qwen3moe', ...small });
  const server = await startServer({ model: m.path, args: ['--no-repack-exps'] });
  try {
    const share = await idleShare(server);
    t.diagnostic(`idle CPU ${(100 * share).toFixed(2)} % of a core`);
    assert.ok(share < MAX_IDLE_SHARE, `idle CPU ${(100 * share).toFixed(1)} % of a core`);
  } finally {
    await server.stop();
  }
});

test('nobody listening on the dispatch socket: idle CPU < 5 % of a core; a dispatcher that appears later is connected within seconds', async (t) => {
  const m = await testModel({ arch: 'qwen3moe', ...small });
  const sock = join(dir, 'absent.sock');
  const server = await startServer({ model: m.path, args: ['--expert-dispatch', sock] });
  try {
    const share = await idleShare(server);
    t.diagnostic(`idle CPU ${(100 * share).toFixed(2)} % of a core`);
    assert.ok(share < MAX_IDLE_SHARE, `idle CPU ${(100 * share).toFixed(1)} % of a core with no dispatcher`);
    await dispatcherAppears(t, server, m, sock);
  } finally {
    await server.stop();
  }
});

test('a dispatcher that accepts but never answers HELLO: idle CPU < 5 % of a core, few attempts; a real one replacing it is connected within seconds', async (t) => {
  const m = await testModel({ arch: 'qwen3moe', ...small });
  const sock = join(dir, 'mute.sock');
  const mute = await muteListener(sock);
  let server: RunningServer | undefined;
  try {
    server = await startServer({ model: m.path, args: ['--expert-dispatch', sock] });
    const before = mute.connections();
    const share = await idleShare(server);
    const attempts = mute.connections() - before;
    t.diagnostic(`idle CPU ${(100 * share).toFixed(2)} % of a core, ${attempts} connection attempts in ${IDLE_MS + SETTLE_MS} ms`);
    assert.ok(share < MAX_IDLE_SHARE, `idle CPU ${(100 * share).toFixed(1)} % of a core against a mute dispatcher`);
    // Each attempt waits 1 s for HELLO_ACK, then backs off: a handful per idle window, never a storm.
    assert.ok(attempts >= 1 && attempts <= 8, `${attempts} connection attempts while idle`);
    await mute.close();
    await dispatcherAppears(t, server, m, sock);
  } finally {
    await server?.stop();
    await mute.close().catch(() => {});
  }
});

test('a socket that listens but never accepts (backlog full): idle CPU < 5 % of a core; a real one replacing it is connected within seconds', async (t) => {
  const m = await testModel({ arch: 'qwen3moe', ...small });
  const sock = join(dir, 'backlog.sock');
  const stuck = await neverAccepting(sock);
  let server: RunningServer | undefined;
  try {
    server = await startServer({ model: m.path, args: ['--expert-dispatch', sock] });
    const share = await idleShare(server);
    t.diagnostic(`idle CPU ${(100 * share).toFixed(2)} % of a core`);
    assert.ok(share < MAX_IDLE_SHARE, `idle CPU ${(100 * share).toFixed(1)} % of a core against a listener that never accepts`);
    await stuck.close();
    await dispatcherAppears(t, server, m, sock);
  } finally {
    await server?.stop();
    await stuck.close();
  }
});
