/**
 * A real TURN/STUN server for a test (issue 29, docs/netlab.md): Debian's coturn (`/usr/bin/turnserver`), with the
 * TURN REST API's shared secret (`--use-auth-secret --static-auth-secret`: it accepts the short-lived credentials the
 * hub mints, hub/turn-credentials.ts), no configuration file (`-n`, every setting a flag), its pid file, log and
 * user database in a temporary folder, listening and relaying only on the one address the test gives: a loopback
 * address here, or an address of a lab namespace (`netns`: it runs there with `ip netns exec`, e.g. the lab's hub
 * namespace, the "internet" side).
 *
 *   const turn = await startTurn({ netns: lab.hubNs, ip: HUB_ADDRESS, secret });
 *   // hub: --turn-url turn.url --turn-secret secret; turn.log() shows its sessions (ALLOCATE, CREATE_PERMISSION)
 *   await turn.stop();
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const TURNSERVER = '/usr/bin/turnserver';

export interface TurnOptions {
  /** The address it listens and relays on: 127.x here, or one configured on an interface of `netns`. */
  ip: string;
  /** Run inside this network namespace (a lab's); absent: in this one (then only loopback is allowed). */
  netns?: string;
  /** The TURN REST API's shared secret (the hub's --turn-secret). */
  secret: string;
  /** STUN/TURN port, UDP and TCP (default 3478). */
  port?: number;
  /** The relay ports' range (default 49160–49199): a small range, so that a lab's rules can name it. */
  minPort?: number;
  maxPort?: number;
  realm?: string;
  /** How long start and stop may take each (default 10 s). */
  timeoutMs?: number;
}

export interface TurnServer {
  /** `turn:IP:PORT` (UDP), the URL volunteers are given. */
  url: string;
  ip: string;
  port: number;
  minPort: number;
  maxPort: number;
  realm: string;
  pid: number;
  /** Its log so far (verbose: sessions, ALLOCATE, CREATE_PERMISSION, CHANNEL_BIND, their results). */
  log(): string;
  /** SIGTERM, then SIGKILL after the timeout; removes its folder. Idempotent. */
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();
let hooked = false;

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', () => {
    for (const p of live) p.kill('SIGKILL');
  });
}

/** Whether `ip` is configured on an interface of `netns` (or here when absent). */
function addressHere(ip: string, netns?: string): boolean {
  const out = execFileSync('ip', [...(netns ? ['-n', netns] : []), '-o', '-4', 'addr', 'show'], { encoding: 'utf8' });
  return out.split('\n').some((l) => l.includes(` inet ${ip}/`));
}

function listening(ip: string, port: number, netns?: string): boolean {
  const args = ['-H', '-l', '-n', '-u', 'src', `${ip}:${port}`];
  try {
    const out = netns
      ? execFileSync('ip', ['netns', 'exec', netns, 'ss', ...args], { encoding: 'utf8' })
      : execFileSync('ss', args, { encoding: 'utf8' });
    return out.trim().length > 0;
  } catch {
    return false;
  }
}

export async function startTurn(o: TurnOptions): Promise<TurnServer> {
  const port = o.port ?? 3478;
  const minPort = o.minPort ?? 49160;
  const maxPort = o.maxPort ?? 49199;
  const realm = o.realm ?? 'expertswarm';
  const timeoutMs = o.timeoutMs ?? 10_000;
  if (!existsSync(TURNSERVER)) throw new Error(`turn: ${TURNSERVER} is missing (Debian's coturn; scripts/ensure-packages.sh installs it)`);
  if (!/^\d{1,3}(\.\d{1,3}){3}$/.test(o.ip)) throw new Error(`turn: ip must be an IPv4 address, got "${o.ip}"`);
  if (!o.netns && !o.ip.startsWith('127.')) throw new Error(`turn: outside a namespace it listens on loopback only, got ${o.ip}`);
  if (!addressHere(o.ip, o.netns)) throw new Error(`turn: ${o.ip} is not an address of ${o.netns ?? 'this namespace'}`);
  if (!(o.secret.length >= 8 && /^[\x21-\x7e]+$/.test(o.secret))) throw new Error('turn: the secret must be ≥ 8 printable characters');
  if (!(minPort > 1024 && minPort <= maxPort && maxPort < 65536)) throw new Error(`turn: bad relay range ${minPort}–${maxPort}`);
  const dir = mkdtempSync(join(tmpdir(), 'xs-turn-'));
  const logFile = join(dir, 'turn.log');
  const args = [
    '-n',
    '-v',
    `--listening-ip=${o.ip}`,
    `--relay-ip=${o.ip}`,
    `--listening-port=${port}`,
    `--min-port=${minPort}`,
    `--max-port=${maxPort}`,
    '--use-auth-secret',
    `--static-auth-secret=${o.secret}`,
    `--realm=${realm}`,
    '--fingerprint',
    '--no-tls',
    '--no-dtls',
    '--no-tcp-relay',
    '--no-cli',
    '--no-multicast-peers',
    '--no-software-attribute',
    `--pidfile=${join(dir, 'turn.pid')}`,
    `--log-file=${logFile}`,
    '--simple-log',
    '--no-stdout-log',
    `--userdb=${join(dir, 'turn.db')}`,
    ...(o.ip.startsWith('127.') ? ['--allow-loopback-peers'] : []),
  ];
  // `ip netns exec` execs turnserver: the child's pid is the server's.
  const proc = o.netns
    ? spawn('ip', ['netns', 'exec', o.netns, TURNSERVER, ...args], { stdio: ['ignore', 'ignore', 'pipe'] })
    : spawn(TURNSERVER, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  hookExit();
  live.add(proc);
  let stderr = '';
  proc.stderr?.on('data', (d) => {
    stderr = (stderr + d).slice(-4000);
  });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const log = (): string => {
    try {
      return readFileSync(logFile, 'utf8');
    } catch {
      return '';
    }
  };
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      const kill = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
      let giveUp: NodeJS.Timeout | undefined;
      await Promise.race([exited, new Promise((r) => (giveUp = setTimeout(r, timeoutMs + 2000)))]);
      clearTimeout(kill);
      clearTimeout(giveUp);
    }
    live.delete(proc);
    rmSync(dir, { recursive: true, force: true });
  };
  const t0 = Date.now();
  while (!listening(o.ip, port, o.netns)) {
    if (proc.exitCode !== null || proc.signalCode !== null) {
      const why = `turn: turnserver exited (${proc.exitCode ?? proc.signalCode}): ${stderr.trim()} ${log().slice(-2000)}`;
      await stop();
      throw new Error(why);
    }
    if (Date.now() - t0 > timeoutMs) {
      const why = `turn: turnserver did not listen on ${o.ip}:${port} within ${timeoutMs} ms: ${log().slice(-2000)}`;
      await stop();
      throw new Error(why);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { url: `turn:${o.ip}:${port}`, ip: o.ip, port, minPort, maxPort, realm, pid: proc.pid ?? 0, log, stop };
}
