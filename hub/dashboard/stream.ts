/**
 * `GET /api/dashboard/stream`: server-sent events to the dashboard pages (framing and the set of open streams; the
 * route is in routes.ts). Each client gets one `snapshot`, then whatever is broadcast — `tick`, `event`, `coverage` —
 * serialised once per message for every client, and a `: ping` comment every PING_MS.
 *
 *   const streams = new DashboardStreams();
 *   streams.assertRoom(ip);                   // TOO_MANY_STREAMS / RATE_LIMITED, before any byte is sent
 *   streams.open(reply.raw, ip, 'snapshot', snapshot);
 *   streams.broadcast('tick', tick);
 *   streams.closeAll();                       // the hub stops
 *
 * Bounds: STREAMS_MAX clients, STREAMS_PER_IP of them from one address and opens per address through a token bucket
 * (one client cannot take every stream and lock the operator out); a client that leaves more than `backlogMaxBytes`
 * unread beyond its snapshot (a stalled tab, a slow link) is cut off — it reconnects and starts over with a snapshot,
 * which is cheaper for the hub than buffering for it.
 */
import { RateLimiter } from '../auth/rate-limit.ts';
import { HubError } from '../errors.ts';
import { STREAM_BACKLOG_MAX_BYTES, STREAM_OPEN_RATE, STREAMS_PER_IP } from '../limits.ts';
import { PING_MS, STREAMS_MAX, type StreamMessages } from '../../protocol/dashboard.ts';

/** The response headers of the stream: no caching, and no buffering in a reverse proxy (nginx reads x-accel-buffering). */
export const SSE_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  'x-accel-buffering': 'no',
  connection: 'keep-alive',
});

export const SSE_PING = ': ping\n\n';

/**
 * One SSE message. `json` must be a single line (JSON.stringify output is: it escapes every newline in strings); a
 * name or data with a raw line break would end the message early, so it is refused.
 */
export function sseMessage(event: string, json: string): string {
  if (!/^[a-z]+$/.test(event)) throw new RangeError(`SSE event names are lowercase words, got ${JSON.stringify(event)}`);
  if (/[\r\n]/.test(json)) throw new RangeError('SSE data must be one line');
  return `event: ${event}\ndata: ${json}\n\n`;
}

/** What the streams write to: an http.ServerResponse after the route hijacked it (tests pass a fake). */
export interface StreamSink {
  write(chunk: string): boolean;
  end(): void;
  destroy(): void;
  readonly writableLength: number;
  readonly destroyed: boolean;
  once(event: 'close' | 'drain', listener: () => void): unknown;
}

export interface StreamOptions {
  maxStreams: number;
  /** Streams open at once from one client key (an IP, an IPv6 /64). */
  maxPerClient: number;
  /** Stream opens per client key: a token bucket (burst, then refillPerSec). */
  openRate: { capacity: number; refillPerSec: number };
  backlogMaxBytes: number;
  pingMs: number;
}

export const DEFAULT_STREAMS: Readonly<StreamOptions> = Object.freeze({
  maxStreams: STREAMS_MAX,
  maxPerClient: STREAMS_PER_IP,
  openRate: STREAM_OPEN_RATE,
  backlogMaxBytes: STREAM_BACKLOG_MAX_BYTES,
  pingMs: PING_MS,
});

interface Client {
  key: string;
  /** Unsent bytes of the snapshot, not counted as backlog until the socket first drains. */
  exemptBytes: number;
}

export class DashboardStreams {
  readonly options: StreamOptions;
  private readonly clients = new Map<StreamSink, Client>();
  private readonly perClient = new Map<string, number>();
  private readonly opens: RateLimiter;
  private pingTimer: NodeJS.Timeout | null = null;
  /** Clients cut off for leaving too much unread. */
  slowDropped = 0;

  constructor(
    options: Partial<StreamOptions> = {},
    private readonly clock: () => number = Date.now,
  ) {
    this.options = { ...DEFAULT_STREAMS, ...options };
    this.opens = new RateLimiter({ ...this.options.openRate, maxKeys: 10_000 });
  }

  get size(): number {
    return this.clients.size;
  }

  /**
   * Throws TOO_MANY_STREAMS when no stream can be opened now for `client` (every stream's cap, or its own), or
   * RATE_LIMITED when it opens them too fast; the route calls it before hijacking the reply. A pass spends one open
   * from the client's bucket.
   */
  assertRoom(client: string): void {
    if (this.clients.size >= this.options.maxStreams)
      throw new HubError(
        'TOO_MANY_STREAMS',
        `the hub already serves ${this.options.maxStreams} dashboard streams; close one (another tab?) or retry later`,
        { 'retry-after': '10' },
      );
    if ((this.perClient.get(client) ?? 0) >= this.options.maxPerClient)
      throw new HubError(
        'TOO_MANY_STREAMS',
        `your address already has ${this.options.maxPerClient} dashboard streams open; close a tab or retry later`,
        { 'retry-after': '10' },
      );
    const now = this.clock();
    if (!this.opens.take(client, now)) {
      const s = Math.max(1, Math.ceil(this.opens.waitMs(client, now) / 1000));
      throw new HubError('RATE_LIMITED', `dashboard streams opened too often from your address; retry in ${s} s`, {
        'retry-after': String(s),
      });
    }
  }

  /**
   * Adds a client and sends it its snapshot (built by the caller right now, so no broadcast falls between). The room
   * is checked (assertRoom) by the caller, which may have committed the reply since; this adds the client regardless.
   */
  open<K extends keyof StreamMessages>(sink: StreamSink, client: string, first: K, data: StreamMessages[K]): void {
    const c: Client = { key: client, exemptBytes: 0 };
    this.clients.set(sink, c);
    this.perClient.set(client, (this.perClient.get(client) ?? 0) + 1);
    sink.once('close', () => this.remove(sink));
    sink.write(sseMessage(first, JSON.stringify(data)));
    // What the socket has not taken of the snapshot yet is the snapshot's, not a backlog: a slow link gets it whole.
    c.exemptBytes = sink.writableLength;
    if (c.exemptBytes > 0)
      sink.once('drain', () => {
        c.exemptBytes = 0;
      });
    if (!this.pingTimer) {
      this.pingTimer = setInterval(() => this.send(SSE_PING), this.options.pingMs);
      this.pingTimer.unref();
    }
  }

  /** Streams open now from one client key. */
  openFrom(client: string): number {
    return this.perClient.get(client) ?? 0;
  }

  private remove(sink: StreamSink): void {
    const c = this.clients.get(sink);
    if (!c) return;
    this.clients.delete(sink);
    const n = (this.perClient.get(c.key) ?? 1) - 1;
    if (n > 0) this.perClient.set(c.key, n);
    else this.perClient.delete(c.key);
  }

  /** Sends one message to every client: serialised once, whatever the number of clients. */
  broadcast<K extends keyof StreamMessages>(event: K, data: StreamMessages[K]): void {
    if (this.clients.size === 0) return;
    this.send(sseMessage(event, JSON.stringify(data)));
  }

  private send(frame: string): void {
    for (const [sink, c] of this.clients) {
      if (sink.destroyed) {
        this.remove(sink);
        continue;
      }
      sink.write(frame);
      if (sink.writableLength - c.exemptBytes > this.options.backlogMaxBytes) {
        this.remove(sink);
        this.slowDropped++;
        sink.destroy();
      }
    }
    if (this.clients.size === 0 && this.pingTimer) {
      clearInterval(this.pingTimer);
      this.pingTimer = null;
    }
  }

  /** Ends every stream (the hub stops); the pages reconnect to whatever comes up next. */
  closeAll(): void {
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.pingTimer = null;
    const sinks = [...this.clients.keys()];
    this.clients.clear();
    this.perClient.clear();
    for (const sink of sinks) sink.end();
  }
}
