/**
 * The protocol between two volunteers passing a slice (docs/peers.md), version 1: binary messages over one reliable,
 * ordered WebRTC data channel (PeerJS, serialization "raw"). Browser-safe; every decoder validates in full and throws
 * PeerWireError, after which the receiver drops the peer (and reports it to the hub).
 *
 *   link.send(encodePeerMessage({ kind: 'request', chunk: 7 }));
 *   const m = decodePeerMessage(bytes, { nChunks, chunkBytes });   // what arrived, checked against the slice's list
 *
 * Every message starts with a 16-byte header, little-endian:
 *
 *   0   u32  magic 0x52505845 (bytes `E X P R`)
 *   4   u8   version 1
 *   5   u8   kind: 1 hello, 2 have, 3 request, 4 piece, 5 refuse, 6 cancel
 *   6   u16  reserved, 0
 *   8   u32  a: hello n_chunks · have/request/piece/refuse/cancel the chunk index
 *   12  u32  b: hello chunk_bytes · piece the offset in the chunk · refuse the reason · else 0
 *
 * - hello (first message each way): then 32 bytes of the slice's sha256 and the bitfield of chunks it holds
 *   (ceil(n_chunks / 8) bytes, chunk i is bit i % 8 of byte i / 8, spare bits 0). Both sides must name the same slice.
 * - have: it has verified one more chunk. request: send me this chunk. cancel: I no longer want it.
 * - piece: then at most PIECE_BYTES of the chunk starting at the offset; a chunk's pieces come in order, back to back.
 * - refuse: it will not send this chunk (1 it does not have it, 2 it is not sharing now: paused, 3 busy).
 *
 * Pieces are small (16 KiB less the header) because some browsers cut data-channel messages above 16 KiB.
 */

export const PEER_WIRE_MAGIC = 0x52505845;
export const PEER_WIRE_VERSION = 1;
export const PEER_HEADER_BYTES = 16;
/** A piece's payload: header + payload = 16 KiB, the message size every browser passes whole. */
export const PIECE_BYTES = 16 * 1024 - PEER_HEADER_BYTES;

export const REFUSE_REASONS = Object.freeze({ missing: 1, paused: 2, busy: 3 } as const);
export type RefuseReason = keyof typeof REFUSE_REASONS;

export type PeerMessage =
  | { kind: 'hello'; nChunks: number; chunkBytes: number; digest: Uint8Array; have: Uint8Array }
  | { kind: 'have'; chunk: number }
  | { kind: 'request'; chunk: number }
  | { kind: 'piece'; chunk: number; offset: number; data: Uint8Array }
  | { kind: 'refuse'; chunk: number; reason: RefuseReason }
  | { kind: 'cancel'; chunk: number };

const KINDS = ['', 'hello', 'have', 'request', 'piece', 'refuse', 'cancel'] as const;
const KIND_WIRE = { hello: 1, have: 2, request: 3, piece: 4, refuse: 5, cancel: 6 } as const;

export class PeerWireError extends Error {
  override readonly name = 'PeerWireError';
}

/** The slice both ends talk about: what a received message is checked against. */
export interface PeerSliceShape {
  nChunks: number;
  chunkBytes: number;
  totalBytes: number;
}

export function bitfieldBytes(nChunks: number): number {
  return Math.ceil(nChunks / 8);
}

export function hasBit(bits: Uint8Array, i: number): boolean {
  return (((bits[i >> 3] as number) >> (i & 7)) & 1) === 1;
}

export function setBit(bits: Uint8Array, i: number): void {
  bits[i >> 3] = (bits[i >> 3] as number) | (1 << (i & 7));
}

function header(kind: PeerMessage['kind'], a: number, b: number, extra: number): Uint8Array {
  const out = new Uint8Array(PEER_HEADER_BYTES + extra);
  const v = new DataView(out.buffer);
  v.setUint32(0, PEER_WIRE_MAGIC, true);
  v.setUint8(4, PEER_WIRE_VERSION);
  v.setUint8(5, KIND_WIRE[kind]);
  v.setUint32(8, a, true);
  v.setUint32(12, b, true);
  return out;
}

export function encodePeerMessage(m: PeerMessage): Uint8Array {
  switch (m.kind) {
    case 'hello': {
      if (m.digest.length !== 32 || m.have.length !== bitfieldBytes(m.nChunks)) throw new PeerWireError('hello: bad digest or bitfield');
      const out = header('hello', m.nChunks, m.chunkBytes, 32 + m.have.length);
      out.set(m.digest, PEER_HEADER_BYTES);
      out.set(m.have, PEER_HEADER_BYTES + 32);
      return out;
    }
    case 'piece': {
      if (m.data.length === 0 || m.data.length > PIECE_BYTES) throw new PeerWireError(`a piece holds 1 to ${PIECE_BYTES} bytes`);
      const out = header('piece', m.chunk, m.offset, m.data.length);
      out.set(m.data, PEER_HEADER_BYTES);
      return out;
    }
    case 'refuse':
      return header('refuse', m.chunk, REFUSE_REASONS[m.reason], 0);
    default:
      return header(m.kind, m.chunk, 0, 0);
  }
}

/** A received message as bytes (a data channel delivers an ArrayBuffer; tests pass Uint8Arrays). */
export function messageBytes(data: unknown): Uint8Array {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (data instanceof Uint8Array) return data;
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new PeerWireError(`a peer message must be bytes, got ${typeof data}`);
}

/**
 * Decodes and checks one message against the slice: its size (never above the largest hello), the chunk index in
 * range, a piece within its chunk, a hello of exactly this shape. The digest in hello is returned for the caller to
 * compare. Throws PeerWireError.
 */
export function decodePeerMessage(bytes: Uint8Array, s: PeerSliceShape): PeerMessage {
  if (bytes.length < PEER_HEADER_BYTES) throw new PeerWireError(`a message of ${bytes.length} bytes is shorter than its header`);
  const most = Math.max(PEER_HEADER_BYTES + PIECE_BYTES, PEER_HEADER_BYTES + 32 + bitfieldBytes(s.nChunks));
  if (bytes.length > most) throw new PeerWireError(`a message of ${bytes.length} bytes exceeds ${most}`);
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  if (v.getUint32(0, true) !== PEER_WIRE_MAGIC) throw new PeerWireError('not a peer message (bad magic)');
  const version = v.getUint8(4);
  if (version !== PEER_WIRE_VERSION) throw new PeerWireError(`peer protocol version ${version}; this side speaks ${PEER_WIRE_VERSION}`);
  const kind = KINDS[v.getUint8(5)];
  if (!kind) throw new PeerWireError(`unknown message kind ${v.getUint8(5)}`);
  if (v.getUint16(6, true) !== 0) throw new PeerWireError('reserved header bytes are not 0');
  const a = v.getUint32(8, true);
  const b = v.getUint32(12, true);
  const body = bytes.subarray(PEER_HEADER_BYTES);
  const noBody = (): void => {
    if (body.length !== 0) throw new PeerWireError(`${kind} carries no body, got ${body.length} bytes`);
  };
  if (kind === 'hello') {
    if (a !== s.nChunks || b !== s.chunkBytes)
      throw new PeerWireError(`hello for ${a} chunks of ${b}, this slice is ${s.nChunks} of ${s.chunkBytes}`);
    if (body.length !== 32 + bitfieldBytes(a))
      throw new PeerWireError(`hello of ${body.length} body bytes, expected ${32 + bitfieldBytes(a)}`);
    const have = body.slice(32);
    const spare = a % 8;
    if (spare !== 0 && (have[have.length - 1] as number) >> spare !== 0) throw new PeerWireError('hello: spare bitfield bits are not 0');
    return { kind, nChunks: a, chunkBytes: b, digest: body.slice(0, 32), have };
  }
  if (a >= s.nChunks) throw new PeerWireError(`${kind}: chunk ${a} is not below ${s.nChunks}`);
  switch (kind) {
    case 'have':
    case 'request':
    case 'cancel':
      if (b !== 0) throw new PeerWireError(`${kind}: the second field must be 0`);
      noBody();
      return { kind, chunk: a };
    case 'refuse': {
      noBody();
      const reason = (Object.keys(REFUSE_REASONS) as RefuseReason[]).find((r) => REFUSE_REASONS[r] === b);
      if (!reason) throw new PeerWireError(`refuse: unknown reason ${b}`);
      return { kind, chunk: a, reason };
    }
    default: {
      const len = Math.min(s.chunkBytes, s.totalBytes - a * s.chunkBytes);
      if (body.length === 0) throw new PeerWireError('an empty piece');
      if (b >= len || b + body.length > len)
        throw new PeerWireError(`piece [${b}, ${b + body.length}) is not within chunk ${a} of ${len} bytes`);
      return { kind: 'piece', chunk: a, offset: b, data: body };
    }
  }
}

/**
 * The slice digest (`sha256:<hex>`) a first message names when it is a version-1 hello, else null: how a volunteer
 * routes a link another opened to it before it knows the slice's shape (the full check follows in decodePeerMessage).
 */
export function peekHelloDigest(bytes: Uint8Array): string | null {
  if (bytes.length < PEER_HEADER_BYTES + 32) return null;
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  if (v.getUint32(0, true) !== PEER_WIRE_MAGIC || v.getUint8(4) !== PEER_WIRE_VERSION || v.getUint8(5) !== KIND_WIRE.hello) return null;
  let hex = '';
  for (const b of bytes.subarray(PEER_HEADER_BYTES, PEER_HEADER_BYTES + 32)) hex += b.toString(16).padStart(2, '0');
  return `sha256:${hex}`;
}
