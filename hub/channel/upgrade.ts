/**
 * What the hub's two WebSocket endpoints (the volunteer channel, hub/channel/channel.ts; Kvasir's relay,
 * hub/relay/relay.ts) share around an upgrade: refusing it with a catalogue error before any WebSocket exists,
 * counting what an address holds open, and reading a `ws` message as bytes.
 */
import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { RawData } from 'ws';
import type { HubError } from '../errors.ts';

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
