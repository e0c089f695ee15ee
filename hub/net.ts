/**
 * Network helpers: the key that per-client limits count by, the HTTP server's bounds against Slowloris and connection
 * floods, and a free loopback port.
 */
import type { Server } from 'node:http';
import { createServer, type Socket } from 'node:net';
import {
  HTTP_HEADERS_TIMEOUT_MS,
  HTTP_KEEP_ALIVE_TIMEOUT_MS,
  HTTP_MAX_HEADER_BYTES,
  HTTP_REQUEST_TIMEOUT_MS,
  HTTP_SOCKETS_MAX,
  HTTP_SOCKETS_PER_ADDRESS,
  HTTP_TIMEOUT_CHECK_MS,
} from './limits.ts';

/** The key per-client limits count by: the client's address, or its /64 for IPv6 (clients rotate inside it). */
export function clientKey(req: { ip: string }): string {
  const ip = req.ip;
  if (ip.includes(':') && !ip.startsWith('::ffff:')) return ip.split(':').slice(0, 4).join(':');
  return ip;
}

/** The HTTP server's bounds (numbers and reasons in limits.ts); HubConfig `http` overrides them. */
export interface HttpServerLimits {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  timeoutCheckMs: number;
  maxHeaderBytes: number;
  socketsMax: number;
  socketsPerAddress: number;
}

export const DEFAULT_HTTP_SERVER: Readonly<HttpServerLimits> = Object.freeze({
  headersTimeoutMs: HTTP_HEADERS_TIMEOUT_MS,
  requestTimeoutMs: HTTP_REQUEST_TIMEOUT_MS,
  keepAliveTimeoutMs: HTTP_KEEP_ALIVE_TIMEOUT_MS,
  timeoutCheckMs: HTTP_TIMEOUT_CHECK_MS,
  maxHeaderBytes: HTTP_MAX_HEADER_BYTES,
  socketsMax: HTTP_SOCKETS_MAX,
  socketsPerAddress: HTTP_SOCKETS_PER_ADDRESS,
});

/**
 * Options for `http.createServer` (fastify's `http`): the timeouts are checked every `timeoutCheckMs`, so a client
 * that trickles its headers or its body is cut within `headersTimeoutMs` / `requestTimeoutMs` of its first byte
 * (plus one check). They bound receiving a request only; a response may stream for as long as it needs.
 */
export function httpServerOptions(l: HttpServerLimits): {
  headersTimeout: number;
  requestTimeout: number;
  connectionsCheckingInterval: number;
  maxHeaderSize: number;
} {
  return {
    headersTimeout: l.headersTimeoutMs,
    requestTimeout: l.requestTimeoutMs,
    connectionsCheckingInterval: l.timeoutCheckMs,
    maxHeaderSize: l.maxHeaderBytes,
  };
}

/**
 * Caps the sockets of `server`: `socketsMax` in all (`server.maxConnections`, refused by Node at accept) and
 * `socketsPerAddress` per client key, a socket beyond it destroyed as it is accepted, before a byte is read.
 * Upgraded sockets (the volunteer channel's WebSockets) stay counted until they close. Returns the live count per key
 * (for tests); its entries go when their last socket closes, so it never holds more keys than open sockets.
 *
 *   capSockets(app.server, hub.httpLimits());
 */
export function capSockets(server: Server, l: Pick<HttpServerLimits, 'socketsMax' | 'socketsPerAddress'>): ReadonlyMap<string, number> {
  server.maxConnections = l.socketsMax;
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const key = clientKey({ ip: socket.remoteAddress ?? '' });
    const n = open.get(key) ?? 0;
    if (n >= l.socketsPerAddress) {
      socket.destroy();
      return;
    }
    open.set(key, n + 1);
    socket.once('close', () => {
      const left = (open.get(key) ?? 1) - 1;
      if (left <= 0) open.delete(key);
      else open.set(key, left);
    });
  });
  return open;
}

/** A TCP port on loopback that was free a moment ago (the OS picks it; the caller binds it next). */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const a = s.address();
      s.close(() => (typeof a === 'object' && a ? resolve(a.port) : reject(new Error('no free port'))));
    });
  });
}
