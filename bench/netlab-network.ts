/**
 * `--network PROFILE` for a benchmark whose hubs run in its own process (bench:elastic, scenario:elastic): its
 * volunteers go into a network lab home with that profile (harness/netlab.ts, docs/netlab.md), behind the router's
 * NAT and the link emulator, while the hub stays where it is. A bridge in the lab's hub namespace listens on
 * 198.18.0.2:PORT and carries each connection over a Unix socket (a filesystem path reaches across namespaces) to the
 * hub's own 127.0.0.1:PORT here, so the volunteers' every byte to the hub crosses the profile's link.
 *
 *   const net = await labNetwork('far', hubPort);          // root; throws where a lab cannot be built
 *   const v = net.spawnVolunteer(['--worker-id', 'v0', '--max-slices', '1']);  // `expertswarm volunteer` in the home,
 *                                                           // as harness/swarm.ts spawnVolunteer: v.proc, v.output()
 *   …
 *   await net.close();                                      // the volunteers, the bridge, the lab
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createLab, HUB_ADDRESS, type Lab } from '../harness/netlab.ts';
import type { NetProfile, ProfileName } from '../harness/netlab-profiles.ts';
import { type HeadlessVolunteer, headlessVolunteer, until } from '../harness/swarm.ts';

const BIN = fileURLToPath(new URL('../bin/expertswarm.js', import.meta.url));

/** Runs in the hub namespace: TCP on HUB_ADDRESS:PORT → the Unix socket SOCK. */
const BRIDGE = `
const net = require('node:net');
const [host, port, sock] = process.argv.slice(1);
const s = net.createServer((c) => {
  const u = net.connect(sock);
  c.pipe(u); u.pipe(c);
  const end = () => { c.destroy(); u.destroy(); };
  c.on('error', end); u.on('error', end); c.on('close', end); u.on('close', end);
});
s.listen(Number(port), host, () => console.log('bridge ready'));
process.stdin.on('end', () => process.exit(0)); process.stdin.resume();
`;

export interface LabNetwork {
  lab: Lab;
  /** The hub's URL as the volunteers in the home reach it. */
  hubUrl: string;
  /** `expertswarm volunteer --hub hubUrl …args` inside the home; its own identity and cache unless args give them. */
  spawnVolunteer(args: string[]): HeadlessVolunteer;
  close(): Promise<void>;
}

export async function labNetwork(profile: ProfileName | NetProfile, hubPort: number): Promise<LabNetwork> {
  const lab = await createLab({ homes: [{ name: 'home', profile }], tcpPorts: [hubPort] });
  const dir = mkdtempSync(join(tmpdir(), 'xs-labnet-'));
  const sock = join(dir, 'hub.sock');
  const procs: ChildProcess[] = [];
  let server: Server | undefined;
  try {
    server = createServer((c) => {
      const h = connect(hubPort, '127.0.0.1');
      c.pipe(h);
      h.pipe(c);
      const end = (): void => {
        c.destroy();
        h.destroy();
      };
      for (const s of [c, h]) {
        s.on('error', end);
        s.on('close', end);
      }
    });
    await new Promise<void>((r) => server?.listen(sock, r));
    const bridge = lab.spawn('hub', process.execPath, ['-e', BRIDGE, HUB_ADDRESS, String(hubPort), sock]);
    procs.push(bridge);
    let out = '';
    bridge.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    bridge.stderr?.on('data', (d: Buffer) => {
      out += d.toString();
    });
    await until('the bridge in the hub namespace', 10_000, () => {
      if (bridge.exitCode !== null) throw new Error(`the bridge exited: ${out}`);
      return out.includes('bridge ready') ? true : undefined;
    });
  } catch (e) {
    server?.close();
    await lab.close();
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  const hubUrl = `http://${HUB_ADDRESS}:${hubPort}`;
  let n = 0;
  return {
    lab,
    hubUrl,
    spawnVolunteer(args) {
      const own = n++;
      const defaults: string[] = [];
      if (!args.includes('--identity')) defaults.push('--identity', join(dir, `v${own}.key.json`));
      if (!args.includes('--cache')) defaults.push('--cache', join(dir, `v${own}-shards`));
      // `ip netns exec` execs the command: the child's pid is the volunteer's own (for taskset and renice).
      const p = lab.spawn('home', process.execPath, [BIN, 'volunteer', '--hub', hubUrl, ...defaults, ...args], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      procs.push(p);
      return headlessVolunteer(p);
    },
    async close() {
      server?.close();
      await lab.close(); // every process in the lab's namespaces: the bridge, the volunteers
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
