/**
 * The network lab's link emulator (issue 29, docs/netlab.md): a userspace forwarder that adds a profile's delay and
 * jitter to TCP streams and UDP datagrams. This kernel has no `netem`, so the lab's router sends a home's traffic for
 * the hub's ports here (iptables REDIRECT) and this forwards it on, late. Loss, rate and outages stay in the kernel
 * (iptables `statistic`, `tc … tbf`, DROP rules), where TCP meets them as it would on a real link.
 *
 * TCP: each accepted connection gets its own upstream connection; each direction is a FIFO of chunks, each due at
 * `dueAt(arrival, previous due, one-way delay)`, so jitter never reorders a stream. A direction holds at most
 * `highWaterBytes` (queued here plus unsent in the socket) before it stops reading its source: a slow downstream
 * (tbf) pushes back on the upstream as a real link would. A FIN is forwarded after the data ahead of it; a reset or
 * error closes both sides at once.
 *
 * UDP: each client address gets its own upstream socket (as a NAT mapping would); every datagram is delayed by its own
 * draw, so jitter may reorder datagrams, as on a real path.
 *
 * Runs in-process (the unit test on loopback) or in the lab's router namespace (harness/netlab-agent.ts).
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { dueAt, type LinkShape, oneWayDelayMs, seededRandom } from './netlab-profiles.ts';

export interface LinkTarget {
  host: string;
  port: number;
}

export interface LinkOptions {
  proto: 'tcp' | 'udp';
  /** 0: any free port. */
  listenPort: number;
  listenHost?: string;
  target: LinkTarget;
  shape: LinkShape;
  /** Jitter's seed (default: random). */
  seed?: number;
  /** TCP: bytes a direction may hold before it pauses its source (default 1 MiB). */
  highWaterBytes?: number;
  /** UDP: a client mapping unused this long is dropped (default 60 s). */
  udpIdleMs?: number;
}

export interface LinkStats {
  connections: number;
  /** Bytes forwarded client → target and back. */
  up: number;
  down: number;
  datagramsUp: number;
  datagramsDown: number;
}

export interface RunningLink {
  port: number;
  stats: LinkStats;
  close(): Promise<void>;
}

type Item = { due: number; chunk: Buffer | null };

/** One direction of one TCP connection: chunks from `src` reach `dst` at their due times, in order. */
class DelayPipe {
  private readonly queue: Item[] = [];
  private queued = 0;
  private lastDue = 0;
  private timer: NodeJS.Timeout | null = null;
  private paused = false;
  private ended = false;

  constructor(
    private readonly src: Socket,
    private readonly dst: Socket,
    private readonly shape: LinkShape,
    private readonly random: () => number,
    private readonly highWater: number,
    private readonly count: (n: number) => void,
  ) {
    src.on('data', (chunk: Buffer) => this.push(chunk));
    src.on('end', () => this.push(null));
    dst.on('drain', () => this.maybeResume());
  }

  private push(chunk: Buffer | null): void {
    const now = performance.now();
    this.lastDue = dueAt(now, this.lastDue, oneWayDelayMs(this.shape, this.random()));
    this.queue.push({ due: this.lastDue, chunk });
    if (chunk) {
      this.queued += chunk.length;
      if (this.queued + this.dst.writableLength > this.highWater && !this.paused) {
        this.paused = true;
        this.src.pause();
      }
    }
    this.schedule();
  }

  private schedule(): void {
    if (this.timer || this.queue.length === 0) return;
    const head = this.queue[0] as Item;
    this.timer = setTimeout(() => this.flush(), Math.max(0, head.due - performance.now()));
  }

  private flush(): void {
    this.timer = null;
    const now = performance.now();
    while (this.queue.length > 0 && (this.queue[0] as Item).due <= now + 0.5) {
      const { chunk } = this.queue.shift() as Item;
      if (this.dst.destroyed) {
        this.queue.length = 0;
        return;
      }
      if (chunk === null) {
        this.ended = true;
        this.dst.end();
      } else {
        this.queued -= chunk.length;
        this.count(chunk.length);
        this.dst.write(chunk);
      }
    }
    this.maybeResume();
    this.schedule();
  }

  private maybeResume(): void {
    if (this.paused && !this.ended && this.queued + this.dst.writableLength <= this.highWater / 2) {
      this.paused = false;
      this.src.resume();
    }
  }

  stop(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.queue.length = 0;
  }
}

function listen(server: Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const a = server.address();
      resolve(typeof a === 'object' && a ? a.port : port);
    });
  });
}

export async function startLink(o: LinkOptions): Promise<RunningLink> {
  return o.proto === 'tcp' ? startTcpLink(o) : startUdpLink(o);
}

async function startTcpLink(o: LinkOptions): Promise<RunningLink> {
  const random = seededRandom(o.seed ?? Math.floor(Math.random() * 2 ** 32));
  const highWater = o.highWaterBytes ?? 1 << 20;
  const stats: LinkStats = { connections: 0, up: 0, down: 0, datagramsUp: 0, datagramsDown: 0 };
  const open = new Set<Socket>();
  // Half-open on both sides: a FIN is forwarded, late, by its pipe; the other direction carries on until its own FIN.
  const server = createServer({ pauseOnConnect: true, allowHalfOpen: true }, (client) => {
    stats.connections++;
    const upstream = connect({ host: o.target.host, port: o.target.port, allowHalfOpen: true });
    open.add(client);
    open.add(upstream);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const pipes = [
      new DelayPipe(client, upstream, o.shape, random, highWater, (n) => {
        stats.up += n;
      }),
      new DelayPipe(upstream, client, o.shape, random, highWater, (n) => {
        stats.down += n;
      }),
    ];
    const kill = (): void => {
      for (const p of pipes) p.stop();
      client.destroy();
      upstream.destroy();
    };
    // A reset or a failed connect on either side ends both at once (a real path would carry the RST).
    client.on('error', kill);
    upstream.on('error', kill);
    client.on('close', () => open.delete(client));
    upstream.on('close', () => open.delete(upstream));
    client.resume();
  });
  const port = await listen(server, o.listenPort, o.listenHost ?? '0.0.0.0');
  return {
    port,
    stats,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of open) s.destroy();
        server.close(() => resolve());
      }),
  };
}

async function startUdpLink(o: LinkOptions): Promise<RunningLink> {
  const random = seededRandom(o.seed ?? Math.floor(Math.random() * 2 ** 32));
  const idleMs = o.udpIdleMs ?? 60_000;
  const stats: LinkStats = { connections: 0, up: 0, down: 0, datagramsUp: 0, datagramsDown: 0 };
  const front = createSocket('udp4');
  const flows = new Map<string, { sock: UdpSocket; last: number }>();
  const timers = new Set<NodeJS.Timeout>();
  const later = (f: () => void): void => {
    const t = setTimeout(
      () => {
        timers.delete(t);
        f();
      },
      oneWayDelayMs(o.shape, random()),
    );
    timers.add(t);
  };
  front.on('message', (msg, rinfo) => {
    const key = `${rinfo.address}:${rinfo.port}`;
    let flow = flows.get(key);
    if (!flow) {
      const sock = createSocket('udp4');
      flow = { sock, last: Date.now() };
      flows.set(key, flow);
      stats.connections++;
      sock.on('message', (reply) => {
        const f = flows.get(key);
        if (f) f.last = Date.now();
        later(() => {
          stats.datagramsDown++;
          stats.down += reply.length;
          front.send(reply, rinfo.port, rinfo.address);
        });
      });
      sock.on('error', () => {});
    }
    flow.last = Date.now();
    const sock = flow.sock;
    later(() => {
      stats.datagramsUp++;
      stats.up += msg.length;
      sock.send(msg, o.target.port, o.target.host);
    });
  });
  front.on('error', () => {});
  const sweep = setInterval(
    () => {
      const old = Date.now() - idleMs;
      for (const [k, f] of flows)
        if (f.last < old) {
          f.sock.close();
          flows.delete(k);
        }
    },
    Math.min(idleMs, 10_000),
  );
  sweep.unref();
  const port = await new Promise<number>((resolve, reject) => {
    front.once('error', reject);
    front.bind(o.listenPort, o.listenHost ?? '0.0.0.0', () => {
      front.off('error', reject);
      resolve(front.address().port);
    });
  });
  return {
    port,
    stats,
    close: async () => {
      clearInterval(sweep);
      for (const t of timers) clearTimeout(t);
      for (const f of flows.values()) f.sock.close();
      flows.clear();
      await new Promise<void>((r) => front.close(() => r()));
    },
  };
}
