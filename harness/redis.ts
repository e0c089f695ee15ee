/**
 * A real Redis for one test: Debian's `redis-server` (scripts/ensure-packages.sh installs it), started on a unix socket
 * in its own temporary folder (or, when asked, on a free loopback port), with no persistence at all, and stopped with
 * SIGTERM then SIGKILL, both bounded. It never touches another Redis: it reads no config file, it listens only where
 * it was told, it logs to its own pipe, and its folder (the socket) is removed at stop.
 *
 *   const redis = await startRedis();            // unix socket: redis.url = 'unix:///tmp/xsredis-…/redis.sock'
 *   const hubA = await testHub({ models, redis: redis.url });
 *   …
 *   await redis.stop();
 *
 * `restart()` stops it and starts a new, empty one at the same address (a Redis restarted without persistence);
 * `kill()` is SIGKILL at once (Redis gone mid-run). Every wait is bounded (REDIS_START_MS, REDIS_STOP_MS): a Redis that
 * does not answer PING in time is killed and the start throws with the end of its log.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The binary; Debian's package puts it here (scripts/ensure-packages.sh). EXPERTSWARM_REDIS_SERVER overrides it. */
export const REDIS_SERVER = process.env.EXPERTSWARM_REDIS_SERVER ?? '/usr/bin/redis-server';

/** How long a start waits for PING to be answered. */
export const REDIS_START_MS = 10_000;
/** How long a stop waits after SIGTERM before SIGKILL, and after SIGKILL before giving up. */
export const REDIS_STOP_MS = 3_000;

export interface RedisOptions {
  /** 'unix' (default): a socket in the temporary folder, TCP off. 'tcp': a free port on 127.0.0.1. */
  listen?: 'unix' | 'tcp';
}

export interface TestRedis {
  /** What `--redis` takes: `unix:///…/redis.sock` or `redis://127.0.0.1:PORT`. */
  readonly url: string;
  /** The socket's path (unix) or null. */
  readonly socketPath: string | null;
  /** The port (tcp) or null. */
  readonly port: number | null;
  /** The running server's process id, or null while stopped. */
  pid(): number | null;
  /** The server's log so far (its stdout and stderr). */
  log(): string;
  /** Sends one command (RESP) and returns the reply as text: for a test that writes garbage into a key by hand. */
  command(...args: string[]): Promise<string>;
  /** SIGKILL now (Redis gone mid-run); resolves once the process is gone. */
  kill(): Promise<void>;
  /** Stops it (if running) and starts a new empty server at the same address. */
  restart(): Promise<void>;
  /** SIGTERM, then SIGKILL after REDIS_STOP_MS; removes the temporary folder. Idempotent. */
  stop(): Promise<void>;
}

/** A free loopback TCP port now (the kernel's pick; a race with another process is caught by the PING wait). */
async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      const port = typeof a === 'object' && a ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

/** RESP encoding of one command. */
function encode(args: string[]): string {
  return `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;
}

/**
 * One complete RESP reply at the start of `buf` as text (simple strings, errors as `ERR …`, integers, bulk strings,
 * arrays joined by newlines), and its length in bytes; null while incomplete.
 */
export function parseReply(buf: string): { text: string; length: number } | null {
  const eol = buf.indexOf('\r\n');
  if (eol < 0) return null;
  const head = buf[0];
  const line = buf.slice(1, eol);
  if (head === '+' || head === '-' || head === ':') return { text: head === '-' ? `ERR ${line}` : line, length: eol + 2 };
  if (head === '$') {
    const n = Number(line);
    if (n < 0) return { text: '(nil)', length: eol + 2 };
    const body = Buffer.from(buf.slice(eol + 2), 'utf8');
    if (body.length < n + 2) return null;
    const text = body.subarray(0, n).toString('utf8');
    return { text, length: eol + 2 + text.length + 2 };
  }
  if (head === '*') {
    const n = Number(line);
    let at = eol + 2;
    const parts: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = parseReply(buf.slice(at));
      if (!r) return null;
      parts.push(r.text);
      at += r.length;
    }
    return { text: parts.join('\n'), length: at };
  }
  return { text: `ERR unreadable reply ${JSON.stringify(buf.slice(0, 40))}`, length: buf.length };
}

/** One command on a fresh connection, bounded by `timeoutMs`. */
async function sendCommand(connect: () => Socket, args: string[], timeoutMs: number): Promise<string> {
  return await new Promise((resolve, reject) => {
    const sock = connect();
    let buf = '';
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error(`redis: no answer to ${args[0]} within ${timeoutMs} ms`));
    }, timeoutMs);
    sock.setEncoding('utf8');
    sock.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    sock.on('data', (d: string) => {
      buf += d;
      const r = parseReply(buf);
      if (!r) return;
      clearTimeout(timer);
      sock.end();
      resolve(r.text);
    });
    sock.write(encode(args));
  });
}

/** Servers still running: SIGKILLed when the test process exits without stopping them (a failed test, a crash). */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of running) p.kill('SIGKILL');
});

const exited = (p: ChildProcess): boolean => p.exitCode !== null || p.signalCode !== null;

/** Resolves when `p` exits, or false after `ms`. */
function exitWithin(p: ChildProcess, ms: number): Promise<boolean> {
  if (exited(p)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    p.once('exit', () => {
      clearTimeout(t);
      resolve(true);
    });
  });
}

export async function startRedis(options: RedisOptions = {}): Promise<TestRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'xsredis-'));
  const listen = options.listen ?? 'unix';
  const socketPath = listen === 'unix' ? join(dir, 'redis.sock') : null;
  const port = listen === 'tcp' ? await freePort() : null;
  const url = socketPath !== null ? `unix://${socketPath}` : `redis://127.0.0.1:${port}`;
  const connect = (): Socket => (socketPath !== null ? createConnection(socketPath) : createConnection(port as number, '127.0.0.1'));
  let proc: ChildProcess | null = null;
  let output = '';
  let removed = false;

  // Every setting on the command line, no config file: no persistence, only this address, nothing written elsewhere.
  const args = (): string[] => [
    '--save',
    '',
    '--appendonly',
    'no',
    '--dir',
    dir,
    '--dbfilename',
    'never-written.rdb',
    '--port',
    String(port ?? 0),
    '--bind',
    '127.0.0.1',
    ...(socketPath !== null ? ['--unixsocket', socketPath, '--unixsocketperm', '700'] : []),
    '--daemonize',
    'no',
    '--protected-mode',
    'yes',
    '--loglevel',
    'warning',
    '--logfile',
    '',
  ];

  const launch = async (): Promise<void> => {
    const p = spawn(REDIS_SERVER, args(), { stdio: ['ignore', 'pipe', 'pipe'] });
    proc = p;
    running.add(p);
    p.once('exit', () => running.delete(p));
    p.stdout?.setEncoding('utf8').on('data', (d: string) => {
      output += d;
    });
    p.stderr?.setEncoding('utf8').on('data', (d: string) => {
      output += d;
    });
    const spawnError = new Promise<Error>((resolve) => p.once('error', resolve));
    const deadline = Date.now() + REDIS_START_MS;
    for (;;) {
      const failed = await Promise.race([spawnError, new Promise<null>((r) => setTimeout(() => r(null), 25))]);
      if (failed) throw new Error(`redis-server could not start (${REDIS_SERVER}): ${failed.message}`);
      if (exited(p)) throw new Error(`redis-server exited (code ${p.exitCode}, signal ${p.signalCode}); its log:\n${output.slice(-4000)}`);
      const pong = await sendCommand(connect, ['PING'], 500).catch(() => null);
      if (pong === 'PONG') return;
      if (Date.now() >= deadline) {
        await halt();
        throw new Error(`redis-server did not answer PING within ${REDIS_START_MS} ms; its log:\n${output.slice(-4000)}`);
      }
    }
  };

  const halt = async (): Promise<void> => {
    const p = proc;
    proc = null;
    if (!p || exited(p)) return;
    p.kill('SIGTERM');
    if (await exitWithin(p, REDIS_STOP_MS)) return;
    p.kill('SIGKILL');
    if (!(await exitWithin(p, REDIS_STOP_MS))) throw new Error(`redis-server ${p.pid} did not exit after SIGKILL`);
  };

  const api: TestRedis = {
    url,
    socketPath,
    port,
    pid: () => proc?.pid ?? null,
    log: () => output,
    command: (...cmd) => sendCommand(connect, cmd, 2_000),
    kill: async () => {
      const p = proc;
      proc = null;
      if (!p || exited(p)) return;
      p.kill('SIGKILL');
      await exitWithin(p, REDIS_STOP_MS);
    },
    restart: async () => {
      await halt();
      await launch();
    },
    stop: async () => {
      try {
        await halt();
      } finally {
        if (!removed) {
          removed = true;
          rmSync(dir, { recursive: true, force: true });
        }
      }
    },
  };
  try {
    await launch();
  } catch (e) {
    await api.stop().catch(() => {});
    throw e;
  }
  return api;
}
