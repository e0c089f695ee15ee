/**
 * The network lab's agent (issue 29, docs/netlab.md): one process inside one of the lab's namespaces, started by
 * harness/netlab.ts with `ip netns exec NS node --import tsx harness/netlab-agent.ts CONFIG`. It runs the router's link
 * emulators (harness/netlab-link.ts) and answers the test process, which lives outside every namespace, over a Unix
 * socket (a path in the filesystem reaches across network namespaces): each connection sends one JSON line.
 *
 *   {"op":"dial","host","port","timeoutMs"?}  "ok\n" then the connection is a raw pipe to host:port, made from
 *                                           inside this namespace (or "err MESSAGE\n"; a connect that takes longer than
 *                                           timeoutMs, default 10 s, is "err timeout")
 *   {"op":"serve","kind","port","host"?}   starts a server here: echo (TCP), whoami (TCP: writes the peer's address
 *                                           and closes), udp-echo, udp-count (counts datagrams and their sources)
 *   {"op":"udp-count","port"}              {"count","bytes","from"}
 *   {"op":"udp-send","host","port","count","size","gapMs"?}   sends datagrams from here; {"sent"}
 *   {"op":"udp-rtt","host","port","count","timeoutMs"}       one datagram at a time to a udp-echo; {"rtts"} (null: lost)
 *
 * The agent exits when its stdin closes, that is when the test process that started it ends, however it ends.
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { unlinkSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { type LinkOptions, type RunningLink, startLink } from './netlab-link.ts';

export interface AgentConfig {
  control: string;
  links: LinkOptions[];
}

type Request =
  | { op: 'dial'; host: string; port: number; timeoutMs?: number }
  | { op: 'serve'; kind: 'echo' | 'whoami' | 'udp-echo' | 'udp-count'; port: number; host?: string }
  | { op: 'udp-count'; port: number }
  | { op: 'udp-send'; host: string; port: number; count: number; size: number; gapMs?: number }
  | { op: 'udp-rtt'; host: string; port: number; count: number; timeoutMs: number };

const servers: Array<Server | UdpSocket> = [];
const counts = new Map<number, { count: number; bytes: number; from: Set<string> }>();

function serve(r: Extract<Request, { op: 'serve' }>): Promise<void> {
  const host = r.host ?? '0.0.0.0';
  if (r.kind === 'echo' || r.kind === 'whoami') {
    const server = createServer((s) => {
      s.setNoDelay(true);
      s.on('error', () => {});
      if (r.kind === 'echo') s.pipe(s);
      else s.end(`${s.remoteAddress}:${s.remotePort}\n`);
    });
    servers.push(server);
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(r.port, host, () => resolve());
    });
  }
  const sock = createSocket('udp4');
  servers.push(sock);
  const c = { count: 0, bytes: 0, from: new Set<string>() };
  counts.set(r.port, c);
  sock.on('message', (m, from) => {
    c.count++;
    c.bytes += m.length;
    c.from.add(from.address);
    if (r.kind === 'udp-echo') sock.send(m, from.port, from.address);
  });
  return new Promise((resolve, reject) => {
    sock.once('error', reject);
    sock.bind(r.port, host, () => resolve());
  });
}

async function udpSend(r: Extract<Request, { op: 'udp-send' }>): Promise<number> {
  const sock = createSocket('udp4');
  const payload = Buffer.alloc(r.size, 0x5a);
  let sent = 0;
  for (let i = 0; i < r.count; i++) {
    await new Promise<void>((res) => sock.send(payload, r.port, r.host, () => res()));
    sent++;
    if (r.gapMs) await new Promise((res) => setTimeout(res, r.gapMs));
  }
  sock.close();
  return sent;
}

async function udpRtt(r: Extract<Request, { op: 'udp-rtt' }>): Promise<Array<number | null>> {
  const sock = createSocket('udp4');
  await new Promise<void>((res) => sock.bind(0, res));
  const out: Array<number | null> = [];
  for (let i = 0; i < r.count; i++) {
    const tag = Buffer.alloc(8);
    tag.writeUInt32BE(i);
    const t0 = performance.now();
    const rtt = await new Promise<number | null>((res) => {
      const timer = setTimeout(() => {
        sock.off('message', on);
        res(null);
      }, r.timeoutMs);
      const on = (m: Buffer): void => {
        if (m.length >= 4 && m.readUInt32BE(0) === i) {
          clearTimeout(timer);
          sock.off('message', on);
          res(performance.now() - t0);
        }
      };
      sock.on('message', on);
      sock.send(tag, r.port, r.host);
    });
    out.push(rtt);
  }
  sock.close();
  return out;
}

function answer(s: Socket, v: unknown): void {
  s.end(`${JSON.stringify(v)}\n`);
}

async function handle(s: Socket, line: string, rest: Buffer): Promise<void> {
  const r = JSON.parse(line) as Request;
  if (r.op === 'dial') {
    const out = connect({ host: r.host, port: r.port, allowHalfOpen: true });
    out.setNoDelay(true);
    const fail = (why: string): void => {
      clearTimeout(timer);
      if (!s.destroyed) s.end(`err ${why}\n`);
      out.destroy();
    };
    const timer = setTimeout(() => fail('timeout'), r.timeoutMs ?? 10_000);
    out.once('error', (e) => fail(e.message));
    out.once('connect', () => {
      clearTimeout(timer);
      out.removeAllListeners('error');
      s.write('ok\n');
      if (rest.length > 0) out.write(rest);
      s.pipe(out);
      out.pipe(s);
      const kill = (): void => {
        s.destroy();
        out.destroy();
      };
      s.on('error', kill);
      out.on('error', kill);
    });
    return;
  }
  if (r.op === 'serve') {
    await serve(r);
    return answer(s, { ok: true });
  }
  if (r.op === 'udp-count') {
    const c = counts.get(r.port);
    return answer(s, { count: c?.count ?? 0, bytes: c?.bytes ?? 0, from: [...(c?.from ?? [])] });
  }
  if (r.op === 'udp-send') return answer(s, { sent: await udpSend(r) });
  if (r.op === 'udp-rtt') return answer(s, { rtts: await udpRtt(r) });
  answer(s, { error: `unknown op ${(r as { op: string }).op}` });
}

async function main(): Promise<void> {
  const config = JSON.parse(process.argv[2] ?? '{}') as AgentConfig;
  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('close', () => process.exit(0));
  process.stdin.resume();
  const links: RunningLink[] = [];
  for (const l of config.links) links.push(await startLink(l));
  try {
    unlinkSync(config.control);
  } catch {}
  const control = createServer({ allowHalfOpen: true }, (s) => {
    s.pause();
    let buf = Buffer.alloc(0);
    s.on('error', () => {});
    const onData = (c: Buffer): void => {
      buf = Buffer.concat([buf, c]);
      const nl = buf.indexOf(10);
      if (nl < 0) return;
      s.off('data', onData);
      s.pause();
      handle(s, buf.subarray(0, nl).toString(), buf.subarray(nl + 1)).catch((e: Error) => {
        if (!s.destroyed) answer(s, { error: e.message });
      });
    };
    s.on('data', onData);
    s.resume();
  });
  await new Promise<void>((resolve) => control.listen(config.control, resolve));
  process.stdout.write(`${JSON.stringify({ ready: true, links: links.map((l) => l.port) })}\n`);
}

main().catch((e: Error) => {
  process.stderr.write(`netlab-agent: ${e.stack ?? e.message}\n`);
  process.exit(1);
});
