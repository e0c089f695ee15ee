/**
 * What the hub's two WebSocket endpoints (the volunteer channel, hub/channel/channel.ts; Kvasir's relay,
 * hub/relay/relay.ts) share around an upgrade: admitting it (Origin, the caps, the open rate), refusing it with a
 * catalogue error before any WebSocket exists, counting what an address holds open, and reading a `ws` message as
 * bytes.
 */
import type { IncomingMessage } from 'node:http';
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { RawData } from 'ws';
import type { RateLimiter } from '../auth/rate-limit.ts';
import { HubError } from '../errors.ts';
import { checkOrigin } from './admission.ts';

/** One endpoint's limits on upgrades. */
export interface UpgradeGate {
  /** What the endpoint holds, plural, for the refusals ("volunteer connections", "relays"). */
  noun: string;
  allowedOrigins: ReadonlySet<string>;
  /** Connections open per address (countDown on close), and the most one address may hold. */
  perAddress: ReadonlyMap<string, number>;
  maxPerAddress: number;
  /** Opens per address over time. */
  opens: RateLimiter;
  /** The endpoint's connections open now and the most the hub holds; absent: no hub-wide cap here. */
  total?: { open: number; max: number };
}

/**
 * The upgrade's checks, cheapest first; throws the refusal as a HubError: ORIGIN_FORBIDDEN, TOO_MANY_CONNECTIONS
 * (the hub's cap, then the address's), RATE_LIMITED. Takes one open from the address's rate when it admits.
 */
export function admitUpgrade(req: IncomingMessage, key: string, gate: UpgradeGate, nowMs: number): void {
  const origin = checkOrigin(req.headers.origin, req.headers.host, gate.allowedOrigins);
  if (!origin.ok) throw new HubError('ORIGIN_FORBIDDEN', origin.reason);
  if (gate.total && gate.total.open >= gate.total.max)
    throw new HubError('TOO_MANY_CONNECTIONS', `the hub holds ${gate.total.max} ${gate.noun}, the most it may`, { 'Retry-After': '60' });
  if ((gate.perAddress.get(key) ?? 0) >= gate.maxPerAddress)
    throw new HubError('TOO_MANY_CONNECTIONS', `this address has ${gate.maxPerAddress} ${gate.noun} open, the most one address may`, {
      'Retry-After': '60',
    });
  if (!gate.opens.take(key, nowMs)) {
    const retryS = Math.max(1, Math.ceil(gate.opens.waitMs(key, nowMs) / 1000));
    throw new HubError('RATE_LIMITED', `too many ${gate.noun} opened from this address; retry in ${retryS} s`, {
      'Retry-After': String(retryS),
    });
  }
}

/** Answers an upgrade with a catalogue error, as the HTTP API would, and closes the socket once it is written. */
export function refuseUpgrade(socket: Duplex, e: HubError): void {
  const body = JSON.stringify(e.toJSON());
  const headers = Object.entries(e.headers).map(([k, v]) => `${k.toLowerCase()}: ${v}\r\n`);
  socket.end(
    `HTTP/1.1 ${e.status} ${STATUS_CODES[e.status] ?? ''}\r\nconnection: close\r\ncontent-type: application/json; charset=utf-8\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\n${headers.join('')}\r\n${body}`,
    () => socket.destroy(),
  );
}

/** Lowers a count of `key`, deleting it at zero (so the map holds only keys with something open). */
export function countDown(counts: Map<string, number>, key: string): void {
  const n = (counts.get(key) ?? 1) - 1;
  if (n <= 0) counts.delete(key);
  else counts.set(key, n);
}

/** A `ws` message as one byte array (a view where it can be, a copy of fragments). */
export function messageBytes(data: RawData): Uint8Array {
  if (Array.isArray(data)) return new Uint8Array(Buffer.concat(data));
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}
