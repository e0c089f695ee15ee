/**
 * `GET /api/dashboard/stream`: server-sent events to the dashboard pages (framing and the set of open streams; the
 * route is in routes.ts). Each client gets one `snapshot`, then whatever is broadcast — `tick`, `event`, `coverage` —
 * serialised once per message for every client, and a `: ping` comment every PING_MS.
 *
 *   const streams = new DashboardStreams();
 *   streams.open(reply.raw, snapshot);        // throws TOO_MANY_STREAMS past STREAMS_MAX (before any byte is sent)
 *   streams.broadcast('tick', tick);
 *   streams.closeAll();                       // the hub stops
 *
 * Bounds: STREAMS_MAX clients; a client that leaves more than `backlogMaxBytes` unread (a stalled tab, a slow link)
 * is cut off — it reconnects and starts over with a snapshot, which is cheaper for the hub than buffering for it.
 */
import { HubError } from '../errors.ts';
import { STREAM_BACKLOG_MAX_BYTES } from '../limits.ts';
import { PING_MS, STREAMS_MAX, type StreamMessages } from './wire.ts';

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
  once(event: 'close', listener: () => void): unknown;
}

export interface StreamOptions {
  maxStreams: number;
  backlogMaxBytes: number;
  pingMs: number;
}

export const DEFAULT_STREAMS: Readonly<StreamOptions> = Object.freeze({
  maxStreams: STREAMS_MAX,
  backlogMaxBytes: STREAM_BACKLOG_MAX_BYTES,
  pingMs: PING_MS,
});

export class DashboardStreams {
  readonly options: StreamOptions;
  private readonly clients = new Set<StreamSink>();
  private pingTimer: NodeJS.Timeout | null = null;
  /** Clients cut off for leaving too much unread. */
  slowDropped = 0;

  constructor(options: Partial<StreamOptions> = {}) {
    this.options = { ...DEFAULT_STREAMS, ...options };
  }

  get size(): number {
    return this.clients.size;
  }

  /** Throws TOO_MANY_STREAMS when no stream can be opened now (the route calls it before hijacking the reply). */
  assertRoom(): void {
    if (this.clients.size >= this.options.maxStreams)
      throw new HubError(
        'TOO_MANY_STREAMS',
        `the hub already serves ${this.options.maxStreams} dashboard streams; close one (another tab?) or retry later`,
        { 'retry-after': '10' },
      );
  }

  /** Adds a client and sends it its snapshot (built by the caller right now, so no broadcast falls between). */
  open<K extends keyof StreamMessages>(sink: StreamSink, first: K, data: StreamMessages[K]): void {
    this.assertRoom();
    this.clients.add(sink);
    sink.once('close', () => this.clients.delete(sink));
    sink.write(sseMessage(first, JSON.stringify(data)));
    if (!this.pingTimer) {
      this.pingTimer = setInterval(() => this.send(SSE_PING), this.options.pingMs);
      this.pingTimer.unref();
    }
  }

  /** Sends one message to every client: serialised once, whatever the number of clients. */
  broadcast<K extends keyof StreamMessages>(event: K, data: StreamMessages[K]): void {
    if (this.clients.size === 0) return;
    this.send(sseMessage(event, JSON.stringify(data)));
  }

  private send(frame: string): void {
    for (const c of this.clients) {
      if (c.destroyed) {
        this.clients.delete(c);
        continue;
      }
      c.write(frame);
      if (c.writableLength > this.options.backlogMaxBytes) {
        this.clients.delete(c);
        this.slowDropped++;
        c.destroy();
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
    for (const c of this.clients) c.end();
    this.clients.clear();
  }
}
