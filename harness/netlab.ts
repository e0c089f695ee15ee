/**
 * The network lab (issue 29, docs/netlab.md): real Linux network parts that a test starts and tears down itself.
 *
 *   hub namespace  xs-eth0 198.18.0.2/24 ──veth── xs-wan 198.18.0.1/24   router namespace
 *                                                  xs-lanN 192.168.N.1/24 ──veth── xs-eth0 192.168.N.2/24  home N
 *
 * The router forwards (its own net.ipv4.ip_forward) and NATs every home behind its one "public" address
 * (`iptables -t nat -A POSTROUTING -o xs-wan -j MASQUERADE`); nothing comes in from the internet side unless it
 * answers a connection a home opened (conntrack), and homes cannot reach one another. A home's TCP (and UDP) to the
 * hub's chosen ports is REDIRECTed to the link emulator (harness/netlab-link.ts, run by the router's agent), which adds
 * the home's profile's delay and jitter and connects on from the router's address; loss is iptables `statistic` and
 * outages a DROP rule, both on the home's interface in the router (both directions); rate is `tc … tbf` on both ends
 * of the home's veth. Everything lives in namespaces this lab made (`xslab-PID-N-ROLE`), with interfaces created inside
 * them: nothing is added to the host's namespace, its interfaces, routes or iptables.
 *
 * The test process stays outside: it reaches into a namespace through that namespace's agent
 * (harness/netlab-agent.ts) over a Unix socket: `dial` (a TCP connection made from inside), `portal` (a local URL that
 * forwards into the namespace, e.g. the hub's API), `agent` (the agent's other requests). Commands run inside with
 * `spawn`/`exec` (`ip netns exec`).
 *
 * `close()` is idempotent; a lab is also torn down when the process exits (an exception, a signal) and a lab whose
 * process is gone (SIGKILL) is removed by the next `createLab`. Without root (or without `ip`, `iptables`, `tc`)
 * `createLab` throws, saying why: a test of the lab fails, never skips.
 */
import { type ChildProcess, execFile, execFileSync, spawn, type SpawnOptions } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { LinkOptions } from './netlab-link.ts';
import { type NetProfile, type ProfileName, profileOf } from './netlab-profiles.ts';

const run = promisify(execFile);
const REPO = fileURLToPath(new URL('..', import.meta.url));
const AGENT = fileURLToPath(new URL('./netlab-agent.ts', import.meta.url));

export const NS_PREFIX = 'xslab-';
export const HUB_ADDRESS = '198.18.0.2';
export const ROUTER_ADDRESS = '198.18.0.1';
/** The router's interface towards the hub, and every namespace's own end of its veth. */
const WAN = 'xs-wan';
const ETH = 'xs-eth0';
/** The link emulator's listening ports in the router: LINK_PORT_BASE + 100 × home + index of the port. */
const LINK_PORT_BASE = 20_000;

export interface HomeSpec {
  /** The test's name for it ("bb", "far"). */
  name: string;
  profile: ProfileName | NetProfile;
}

export interface LabOptions {
  homes: HomeSpec[];
  /** Hub-side TCP ports whose traffic from homes goes through the link emulator (delay, jitter). */
  tcpPorts?: number[];
  /** Hub-side UDP ports likewise. */
  udpPorts?: number[];
  /** Jitter's seed (default random). */
  seed?: number;
}

export type Place = 'hub' | 'router' | string;

export interface Home {
  name: string;
  index: number;
  ns: string;
  address: string;
  profile: NetProfile;
  /** The mangle chain holding its loss and outage rules, in the router. */
  chain: string;
  lan: string;
}

export interface Lab {
  id: string;
  hubNs: string;
  routerNs: string;
  homes: Map<string, Home>;
  /** Every namespace of this lab. */
  namespaces(): string[];
  nsOf(place: Place): string;
  /** `ip netns exec NS cmd args…` (stdio as given; default piped). */
  spawn(place: Place, cmd: string, args: string[], opts?: SpawnOptions): ChildProcess;
  exec(place: Place, cmd: string, args: string[]): Promise<{ stdout: string; stderr: string }>;
  /** A TCP connection to host:port opened from inside `place` (rejects after timeoutMs, default 10 s). */
  dial(place: Place, host: string, port: number, timeoutMs?: number): Promise<Socket>;
  /** A URL on 127.0.0.1 here whose connections are made to host:port from inside `place`. */
  portal(place: Place, port: number, host?: string): Promise<string>;
  /** One request to the agent in `place` (harness/netlab-agent.ts); its JSON answer. */
  agent<T = Record<string, unknown>>(place: Place, request: Record<string, unknown>): Promise<T>;
  /** Cuts a home's link (both ways, every packet) for `ms` (default: its profile's outageMs); resolves once it is back. */
  outage(home: string, ms?: number): Promise<void>;
  close(): Promise<void>;
}

// ---------------------------------------------------------------------------------------------
// Preflight and stale labs

/** Why this machine cannot build a lab, or null. */
export function labUnavailable(): string | null {
  if (process.platform !== 'linux') return `the network lab needs Linux (this is ${process.platform})`;
  if (typeof process.getuid === 'function' && process.getuid() !== 0)
    return `the network lab needs root to create network namespaces (uid ${process.getuid()})`;
  for (const tool of ['ip', 'iptables', 'iptables-restore', 'tc']) {
    try {
      execFileSync(tool, tool === 'ip' || tool === 'tc' ? ['-V'] : ['--version'], { stdio: 'ignore' });
    } catch {
      return `the network lab needs \`${tool}\` (Debian: iproute2, iptables; .ci/run installs them)`;
    }
  }
  return null;
}

function listNamespaces(): string[] {
  const out = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  return out
    .split('\n')
    .map((l) => l.trim().split(/\s+/)[0] ?? '')
    .filter((n) => n.length > 0);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function pidsIn(ns: string): number[] {
  try {
    return execFileSync('ip', ['netns', 'pids', ns], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
      .split('\n')
      .map(Number)
      .filter((p) => Number.isInteger(p) && p > 0);
  } catch {
    return [];
  }
}

function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Kills what runs in these namespaces (all of it started by the lab) and deletes them. Synchronous: exit handlers. */
function destroyNamespacesSync(names: readonly string[]): void {
  for (const ns of names) for (const pid of pidsIn(ns)) if (pid !== process.pid) tryKill(pid, 'SIGKILL');
  const t0 = Date.now();
  while (Date.now() - t0 < 3000 && names.some((ns) => pidsIn(ns).length > 0)) sleepSync(20);
  for (const ns of names) {
    try {
      execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
    } catch {}
  }
}

function tryKill(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {}
}

/**
 * Removes the labs of processes that are gone (a run killed with SIGKILL leaves its namespaces): names
 * `xslab-PID-…` whose PID no longer runs. A live process's lab is left alone. Returns the namespaces removed.
 */
export function cleanStaleLabs(): string[] {
  const stale = listNamespaces().filter((n) => {
    const m = /^xslab-(\d+)-/.exec(n);
    return m !== null && Number(m[1]) !== process.pid && !alive(Number(m[1]));
  });
  if (stale.length > 0) destroyNamespacesSync(stale);
  // Their agents' control-socket folders (xslab-PID-N-XXXXXX in the temp folder) go too.
  for (const d of readdirSync(tmpdir())) {
    const m = /^xslab-(\d+)-\d+-\w{6}$/.exec(d);
    if (m && Number(m[1]) !== process.pid && !alive(Number(m[1]))) rmSync(join(tmpdir(), d), { recursive: true, force: true });
  }
  return stale;
}

// ---------------------------------------------------------------------------------------------
// The lab

const live = new Set<LabImpl>();
let hooked = false;
let labCounter = 0;

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', () => {
    for (const lab of live) lab.closeSync();
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const on = (): void => {
      for (const lab of live) lab.closeSync();
      process.off(sig, on);
      // Nobody else listens: the signal's default action (the process ends) as if we had not been here.
      if (process.listenerCount(sig) === 0) process.kill(process.pid, sig);
    };
    process.on(sig, on);
  }
}

async function sh(cmd: string, args: string[], input?: string): Promise<string> {
  if (input === undefined) {
    try {
      return (await run(cmd, args, { encoding: 'utf8' })).stdout;
    } catch (e) {
      const err = e as Error & { stderr?: string };
      throw new Error(`netlab: \`${cmd} ${args.join(' ')}\` failed: ${err.stderr?.trim() || err.message}`);
    }
  }
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => {
      out += d;
    });
    p.stderr.on('data', (d) => {
      err += d;
    });
    p.on('error', reject);
    p.on('exit', (code) =>
      code === 0 ? resolve(out) : reject(new Error(`netlab: \`${cmd} ${args.join(' ')}\` failed (${code}): ${err.trim()}`)),
    );
    p.stdin.end(input);
  });
}

function burstBytes(rateMbit: number): number {
  return Math.max(32 * 1024, Math.round((rateMbit * 1e6) / 8 / 100)); // ≥ 10 ms at the rate
}

interface AgentHandle {
  proc: ChildProcess;
  control: string;
}

class LabImpl implements Lab {
  readonly id: string;
  readonly hubNs: string;
  readonly routerNs: string;
  readonly homes = new Map<string, Home>();
  private readonly dir: string;
  private readonly agents = new Map<string, Promise<AgentHandle>>();
  private readonly portals = new Set<Server>();
  private readonly sockets = new Set<Socket>();
  private closed = false;

  constructor(private readonly o: LabOptions) {
    this.id = `${process.pid}-${labCounter++}`;
    this.hubNs = `${NS_PREFIX}${this.id}-hub`;
    this.routerNs = `${NS_PREFIX}${this.id}-rt`;
    this.dir = mkdtempSync(join(tmpdir(), `xslab-${this.id}-`));
    o.homes.forEach((h, i) => {
      const index = i + 1;
      if (this.homes.has(h.name)) throw new Error(`netlab: two homes named ${h.name}`);
      if (index > 200) throw new Error('netlab: at most 200 homes');
      this.homes.set(h.name, {
        name: h.name,
        index,
        ns: `${NS_PREFIX}${this.id}-h${index}`,
        address: `192.168.${index}.2`,
        profile: profileOf(h.profile),
        chain: `XS-H${index}`,
        lan: `xs-lan${index}`,
      });
    });
  }

  namespaces(): string[] {
    return [this.hubNs, this.routerNs, ...[...this.homes.values()].map((h) => h.ns)];
  }

  nsOf(place: Place): string {
    if (place === 'hub') return this.hubNs;
    if (place === 'router') return this.routerNs;
    const h = this.homes.get(place);
    if (!h) throw new Error(`netlab: no place "${place}" (hub, router, ${[...this.homes.keys()].join(', ')})`);
    return h.ns;
  }

  private home(name: string): Home {
    const h = this.homes.get(name);
    if (!h) throw new Error(`netlab: no home "${name}"`);
    return h;
  }

  async build(): Promise<void> {
    const ip = (ns: string, ...args: string[]): Promise<string> => sh('ip', ['-n', ns, ...args]);
    for (const ns of this.namespaces()) {
      await sh('ip', ['netns', 'add', ns]);
      await ip(ns, 'link', 'set', 'lo', 'up');
    }
    const [H, R] = [this.hubNs, this.routerNs];
    // Every veth is created inside the router's namespace with its peer straight in the other one: no interface is
    // ever in the host's namespace, not even for a moment.
    await ip(R, 'link', 'add', WAN, 'type', 'veth', 'peer', 'name', ETH, 'netns', H);
    await ip(R, 'addr', 'add', `${ROUTER_ADDRESS}/24`, 'dev', WAN);
    await ip(H, 'addr', 'add', `${HUB_ADDRESS}/24`, 'dev', ETH);
    await ip(R, 'link', 'set', WAN, 'up');
    await ip(H, 'link', 'set', ETH, 'up');
    for (const h of this.homes.values()) {
      await ip(R, 'link', 'add', h.lan, 'type', 'veth', 'peer', 'name', ETH, 'netns', h.ns);
      await ip(R, 'addr', 'add', `192.168.${h.index}.1/24`, 'dev', h.lan);
      await ip(h.ns, 'addr', 'add', `${h.address}/24`, 'dev', ETH);
      await ip(R, 'link', 'set', h.lan, 'up');
      await ip(h.ns, 'link', 'set', ETH, 'up');
      await ip(h.ns, 'route', 'add', 'default', 'via', `192.168.${h.index}.1`);
      const rate = h.profile.rateMbit;
      if (rate !== undefined) {
        const tbf = ['root', 'tbf', 'rate', `${rate}mbit`, 'burst', String(burstBytes(rate)), 'latency', '200ms'];
        await sh('tc', ['-n', R, 'qdisc', 'add', 'dev', h.lan, ...tbf]);
        await sh('tc', ['-n', h.ns, 'qdisc', 'add', 'dev', ETH, ...tbf]);
      }
    }
    await sh('ip', ['netns', 'exec', R, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1']);
    await sh('ip', ['netns', 'exec', R, 'iptables-restore'], this.ruleset());
    await this.startAgent('router');
  }

  /** The port the emulator listens on, in the router, for this home's traffic to the hub's `k`-th port of a protocol. */
  private linkPort(h: Home, proto: 'tcp' | 'udp', k: number): number {
    return LINK_PORT_BASE + 100 * h.index + (proto === 'udp' ? 50 : 0) + k;
  }

  private links(): LinkOptions[] {
    const out: LinkOptions[] = [];
    const seed = this.o.seed ?? Math.floor(Math.random() * 2 ** 31);
    for (const h of this.homes.values())
      for (const proto of ['tcp', 'udp'] as const)
        (proto === 'tcp' ? (this.o.tcpPorts ?? []) : (this.o.udpPorts ?? [])).forEach((port, k) => {
          out.push({
            proto,
            listenPort: this.linkPort(h, proto, k),
            target: { host: HUB_ADDRESS, port },
            shape: { rttMs: h.profile.rttMs, jitterMs: h.profile.jitterMs },
            seed: seed + this.linkPort(h, proto, k),
          });
        });
    return out;
  }

  private ruleset(): string {
    const nat = ['*nat', ':PREROUTING ACCEPT [0:0]', ':INPUT ACCEPT [0:0]', ':OUTPUT ACCEPT [0:0]', ':POSTROUTING ACCEPT [0:0]'];
    const mangle = ['*mangle', ':PREROUTING ACCEPT [0:0]', ':INPUT ACCEPT [0:0]', ':FORWARD ACCEPT [0:0]'];
    mangle.push(':OUTPUT ACCEPT [0:0]', ':POSTROUTING ACCEPT [0:0]');
    const mangleRules: string[] = [];
    for (const h of this.homes.values()) {
      for (const proto of ['tcp', 'udp'] as const)
        (proto === 'tcp' ? (this.o.tcpPorts ?? []) : (this.o.udpPorts ?? [])).forEach((port, k) => {
          nat.push(
            `-A PREROUTING -i ${h.lan} -p ${proto} -d ${HUB_ADDRESS} --dport ${port} -j REDIRECT --to-ports ${this.linkPort(h, proto, k)}`,
          );
        });
      mangle.push(`:${h.chain} - [0:0]`);
      mangleRules.push(`-A PREROUTING -i ${h.lan} -j ${h.chain}`, `-A POSTROUTING -o ${h.lan} -j ${h.chain}`);
      if (h.profile.lossPct > 0)
        mangleRules.push(`-A ${h.chain} -m statistic --mode random --probability ${(h.profile.lossPct / 100).toFixed(6)} -j DROP`);
    }
    nat.push(`-A POSTROUTING -o ${WAN} -j MASQUERADE`, 'COMMIT');
    const filter = [
      '*filter',
      ':INPUT ACCEPT [0:0]',
      ':FORWARD ACCEPT [0:0]',
      ':OUTPUT ACCEPT [0:0]',
      // The internet side reaches a home, or the router itself, only with answers to what was opened from inside.
      `-A FORWARD -i ${WAN} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT`,
      `-A FORWARD -i ${WAN} -j DROP`,
      // Homes are separate LANs behind the router: none reaches another.
      '-A FORWARD -i xs-lan+ -o xs-lan+ -j DROP',
      `-A INPUT -i ${WAN} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT`,
      `-A INPUT -i ${WAN} -p icmp -j ACCEPT`,
      `-A INPUT -i ${WAN} -j DROP`,
      'COMMIT',
    ];
    return `${[...nat, ...mangle, ...mangleRules, 'COMMIT', ...filter].join('\n')}\n`;
  }

  private startAgent(place: Place): Promise<AgentHandle> {
    const ns = this.nsOf(place);
    let p = this.agents.get(ns);
    if (p) return p;
    p = (async () => {
      if (this.closed) throw new Error('netlab: the lab is closed');
      const control = join(this.dir, `${ns}.sock`);
      const links = place === 'router' ? this.links() : [];
      const proc = spawn('ip', ['netns', 'exec', ns, process.execPath, '--import', 'tsx', AGENT, JSON.stringify({ control, links })], {
        cwd: REPO,
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      proc.stderr?.on('data', (d) => {
        err = (err + d).slice(-4000);
      });
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`netlab: the agent in ${ns} did not start in 30 s: ${err}`)), 30_000);
        proc.stdout?.on('data', (d) => {
          out += d;
          if (out.includes('"ready":true')) {
            clearTimeout(timer);
            resolve();
          }
        });
        proc.once('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`netlab: the agent in ${ns} exited (${code}): ${err}`));
        });
      });
      return { proc, control };
    })();
    this.agents.set(ns, p);
    return p;
  }

  spawn(place: Place, cmd: string, args: string[], opts: SpawnOptions = {}): ChildProcess {
    return spawn('ip', ['netns', 'exec', this.nsOf(place), cmd, ...args], { cwd: REPO, stdio: 'pipe', ...opts });
  }

  exec(place: Place, cmd: string, args: string[]): Promise<{ stdout: string; stderr: string }> {
    return run('ip', ['netns', 'exec', this.nsOf(place), cmd, ...args], { encoding: 'utf8' });
  }

  private async control(place: Place, request: Record<string, unknown>): Promise<{ sock: Socket; first: string; rest: Buffer }> {
    const { control } = await this.startAgent(place);
    const sock = connect(control);
    this.sockets.add(sock);
    sock.once('close', () => this.sockets.delete(sock));
    await new Promise<void>((resolve, reject) => {
      sock.once('connect', resolve);
      sock.once('error', reject);
    });
    sock.write(`${JSON.stringify(request)}\n`);
    return new Promise((resolve, reject) => {
      let buf = Buffer.alloc(0);
      const onData = (c: Buffer): void => {
        buf = Buffer.concat([buf, c]);
        const nl = buf.indexOf(10);
        if (nl < 0) return;
        sock.off('data', onData);
        sock.off('end', onEnd);
        sock.pause();
        resolve({ sock, first: buf.subarray(0, nl).toString(), rest: buf.subarray(nl + 1) });
      };
      const onEnd = (): void => reject(new Error(`netlab: the agent in ${place} closed without answering ${JSON.stringify(request)}`));
      sock.on('data', onData);
      sock.once('end', onEnd);
      sock.once('error', reject);
    });
  }

  async agent<T = Record<string, unknown>>(place: Place, request: Record<string, unknown>): Promise<T> {
    const { sock, first } = await this.control(place, request);
    sock.destroy();
    const v = JSON.parse(first) as T & { error?: string };
    if (v.error) throw new Error(`netlab: the agent in ${place}: ${v.error}`);
    return v;
  }

  async dial(place: Place, host: string, port: number, timeoutMs?: number): Promise<Socket> {
    const { sock, first, rest } = await this.control(place, { op: 'dial', host, port, timeoutMs });
    if (first !== 'ok') {
      sock.destroy();
      throw new Error(`netlab: ${place} → ${host}:${port}: ${first.replace(/^err /, '')}`);
    }
    sock.removeAllListeners('error');
    if (rest.length > 0) sock.unshift(rest);
    sock.setNoDelay(true);
    sock.resume();
    return sock;
  }

  async portal(place: Place, port: number, host = '127.0.0.1'): Promise<string> {
    const server = createServer((local) => {
      local.pause();
      local.on('error', () => {});
      // Tracked, so that close() ends the keep-alive connections a client (fetch) holds to the portal.
      this.sockets.add(local);
      local.once('close', () => this.sockets.delete(local));
      this.dial(place, host, port).then(
        (remote) => {
          remote.on('close', () => local.destroy());
          local.on('close', () => remote.destroy());
          remote.on('error', () => local.destroy());
          local.on('error', () => remote.destroy());
          local.pipe(remote);
          remote.pipe(local);
          local.resume();
        },
        () => local.destroy(),
      );
    });
    this.portals.add(server);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const a = server.address();
    return `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}`;
  }

  async outage(name: string, ms?: number): Promise<void> {
    const h = this.home(name);
    const len = ms ?? h.profile.outageMs;
    if (len === undefined) throw new Error(`netlab: profile ${h.profile.name} has no outage; give its length`);
    const ipt = (op: '-I' | '-D'): Promise<string> =>
      sh('ip', ['netns', 'exec', this.routerNs, 'iptables', '-t', 'mangle', op, h.chain, ...(op === '-I' ? ['1'] : []), '-j', 'DROP']);
    await ipt('-I');
    try {
      await new Promise((r) => setTimeout(r, len));
    } finally {
      await ipt('-D');
    }
  }

  /** Gentle first (SIGTERM: a hub closes its coordinator), then SIGKILL what is left, then the namespaces go. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.portals) s.close();
    for (const s of this.sockets) s.destroy();
    const names = this.namespaces().filter((n) => listNamespaces().includes(n));
    for (const ns of names) for (const pid of pidsIn(ns)) tryKill(pid, 'SIGTERM');
    const t0 = Date.now();
    while (Date.now() - t0 < 5000 && names.some((ns) => pidsIn(ns).length > 0)) await new Promise((r) => setTimeout(r, 50));
    destroyNamespacesSync(names);
    // Reap the agents (children of this process) so that none lingers as a zombie.
    const agents = await Promise.all([...this.agents.values()].map((p) => p.catch(() => null)));
    await Promise.all(
      agents.map((a) =>
        a && a.proc.exitCode === null && a.proc.signalCode === null
          ? new Promise((r) => {
              a.proc.once('exit', r);
              setTimeout(r, 2000);
            })
          : null,
      ),
    );
    rmSync(this.dir, { recursive: true, force: true });
    live.delete(this);
  }

  closeSync(): void {
    this.closed = true;
    destroyNamespacesSync(this.namespaces());
    rmSync(this.dir, { recursive: true, force: true });
    live.delete(this);
  }
}

/**
 * Builds a lab: first removes stale labs (their processes gone), then the namespaces, veths, addresses, routes, NAT,
 * loss chains, rates and the router's agent with its link emulators. Throws (never skips) where it cannot.
 */
export async function createLab(o: LabOptions): Promise<Lab> {
  const why = labUnavailable();
  if (why) throw new Error(`netlab: cannot build the network lab here: ${why}`);
  cleanStaleLabs();
  hookExit();
  const lab = new LabImpl(o);
  live.add(lab);
  try {
    await lab.build();
  } catch (e) {
    await lab.close();
    throw e;
  }
  return lab;
}
