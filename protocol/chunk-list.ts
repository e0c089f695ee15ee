/**
 * The per-chunk hash list of a slice (docs/peers.md): what lets a volunteer take a slice from other volunteers a chunk
 * at a time and check every chunk before it keeps it. The hub's shard server builds it (hub/chunk-lists.ts) and serves
 * it beside the slice; volunteers parse it here. Browser-safe (no Node imports), shared by both ends like wire.ts.
 *
 *   const list = parseChunkList(bytes, { digest: assign.shardDigest, bytes: assign.shardBytes });
 *   list.nChunks; chunkRange(list, 3);             // [from, to) of chunk 3 in the slice
 *   await chunkMatches(list, 3, received);         // sha256 of the chunk's bytes = the list's entry
 *
 * Layout, little-endian, version 1 (a list is 64 + 32·n bytes):
 *
 *   0   u32   magic 0x4c435845 (bytes `E X C L`)
 *   4   u16   version 1
 *   6   u16   reserved, 0
 *   8   u32   chunk_bytes: a power of two in [CHUNK_BYTES_MIN, CHUNK_BYTES_MAX]
 *   12  u32   n_chunks = ceil(total / chunk_bytes), 1 … MAX_CHUNKS
 *   16  u32   total bytes, low 32 bits
 *   20  u32   total bytes, high bits (total ≤ 2^50)
 *   24  32 B  sha256 of the whole slice: the digest the assignment announced
 *   56  8 B   reserved, 0
 *   64  32 B  sha256 of chunk i's bytes, for i in 0 … n_chunks − 1 (the last chunk may be short)
 *
 * Binding: the list names the slice it describes by its digest and size. A client refuses a list naming any other
 * (so a list cannot be replayed for another slice), checks every chunk against its entry as it arrives, and checks the
 * assembled slice against the digest (the one the hub pushed over the authenticated channel) before it is used; a list
 * that disagreed with its slice would cost one wasted assembly and a plain download, never a wrong slice.
 */

export const CHUNK_LIST_MAGIC = 0x4c435845;
export const CHUNK_LIST_VERSION = 1;
export const CHUNK_LIST_HEADER_BYTES = 64;
export const CHUNK_HASH_BYTES = 32;
/** 1 MiB: a real layer slice (hundreds of MB) is a few hundred chunks; a list of 800 chunks is 25 KiB. */
export const CHUNK_BYTES_DEFAULT = 1024 * 1024;
export const CHUNK_BYTES_MIN = 16 * 1024;
export const CHUNK_BYTES_MAX = 16 * 1024 * 1024;
/** A list holds at most this many chunks (2 MiB of hashes); a slice larger than MAX_CHUNKS chunks uses larger chunks. */
export const MAX_CHUNKS = 65_536;
/** The largest slice a list may describe (the wire's maxDeviceBytes). */
export const MAX_SLICE_BYTES = 2 ** 50;

/**
 * The shard server's load, on every range and download it sends (volunteer/source-choice.ts): its downloads in flight
 * over its cap, a decimal in [0, 1] with two places. A volunteer taking a slice from peers lets speed win over sparing
 * the hub only while the hub says it is idle.
 */
export const SHARD_LOAD_HEADER = 'x-expertswarm-shard-load';

export function formatShardLoad(inFlight: number, max: number): string {
  const f = max > 0 ? Math.min(1, Math.max(0, inFlight / max)) : 1;
  return f.toFixed(2);
}

/** The header's value as a fraction in [0, 1], or null when absent or malformed (an older hub, a proxy's damage). */
export function parseShardLoad(value: string | null | undefined): number | null {
  if (typeof value !== 'string' || !/^(0(\.\d{1,4})?|1(\.0{1,4})?)$/.test(value)) return null;
  return Number(value);
}

export class ChunkListError extends Error {
  override readonly name = 'ChunkListError';
}

export interface ChunkList {
  chunkBytes: number;
  nChunks: number;
  totalBytes: number;
  /** `sha256:<hex>` of the whole slice. */
  digest: string;
  /** n_chunks × 32 bytes: chunk i's sha256 at [32·i, 32·i + 32). */
  hashes: Uint8Array;
  /** The list's own bytes, as served. */
  bytes: Uint8Array;
}

const isPow2 = (n: number): boolean => Number.isInteger(n) && n > 0 && (n & (n - 1)) === 0;

/**
 * The chunk size for a slice of `total` bytes: `preferred` (a power of two in range), doubled until the slice is at
 * most MAX_CHUNKS chunks.
 */
export function chunkBytesFor(total: number, preferred = CHUNK_BYTES_DEFAULT): number {
  if (!isPow2(preferred) || preferred < CHUNK_BYTES_MIN || preferred > CHUNK_BYTES_MAX) {
    throw new RangeError(`chunk size ${preferred} is not a power of two in [${CHUNK_BYTES_MIN}, ${CHUNK_BYTES_MAX}]`);
  }
  let c = preferred;
  while (Math.ceil(total / c) > MAX_CHUNKS && c < CHUNK_BYTES_MAX) c *= 2;
  return c;
}

/** Bytes [from, to) of chunk `i` in the slice. */
export function chunkRange(list: Pick<ChunkList, 'chunkBytes' | 'nChunks' | 'totalBytes'>, i: number): [number, number] {
  if (!Number.isInteger(i) || i < 0 || i >= list.nChunks) throw new RangeError(`chunk ${i} is not in [0, ${list.nChunks})`);
  const from = i * list.chunkBytes;
  return [from, Math.min(list.totalBytes, from + list.chunkBytes)];
}

export function hexOf(bytes: Uint8Array): string {
  let hex = '';
  for (const b of bytes) hex += b.toString(16).padStart(2, '0');
  return hex;
}

function digestBytes(digest: string): Uint8Array {
  const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
  if (!m) throw new ChunkListError(`a slice digest is "sha256:" and 64 lowercase hex digits, got ${JSON.stringify(digest.slice(0, 80))}`);
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++) out[i] = Number.parseInt((m[1] as string).slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** Encodes a list from its parts (the hub computes the hashes; tests build lists too). */
export function encodeChunkList(p: { chunkBytes: number; totalBytes: number; digest: string; hashes: Uint8Array }): Uint8Array {
  const nChunks = Math.ceil(p.totalBytes / p.chunkBytes);
  checkShape(p.chunkBytes, nChunks, p.totalBytes);
  if (p.hashes.length !== nChunks * CHUNK_HASH_BYTES) throw new ChunkListError(`${nChunks} chunks need ${nChunks * 32} bytes of hashes`);
  const out = new Uint8Array(CHUNK_LIST_HEADER_BYTES + p.hashes.length);
  const v = new DataView(out.buffer);
  v.setUint32(0, CHUNK_LIST_MAGIC, true);
  v.setUint16(4, CHUNK_LIST_VERSION, true);
  v.setUint32(8, p.chunkBytes, true);
  v.setUint32(12, nChunks, true);
  v.setUint32(16, p.totalBytes % 2 ** 32, true);
  v.setUint32(20, Math.floor(p.totalBytes / 2 ** 32), true);
  out.set(digestBytes(p.digest), 24);
  out.set(p.hashes, CHUNK_LIST_HEADER_BYTES);
  return out;
}

function checkShape(chunkBytes: number, nChunks: number, totalBytes: number): void {
  if (!isPow2(chunkBytes) || chunkBytes < CHUNK_BYTES_MIN || chunkBytes > CHUNK_BYTES_MAX) {
    throw new ChunkListError(`chunk_bytes ${chunkBytes} is not a power of two in [${CHUNK_BYTES_MIN}, ${CHUNK_BYTES_MAX}]`);
  }
  if (!Number.isSafeInteger(totalBytes) || totalBytes < 1 || totalBytes > MAX_SLICE_BYTES) {
    throw new ChunkListError(`total ${totalBytes} is not a slice size in [1, 2^50]`);
  }
  if (nChunks < 1 || nChunks > MAX_CHUNKS) throw new ChunkListError(`${nChunks} chunks; a list holds 1 to ${MAX_CHUNKS}`);
  if (nChunks !== Math.ceil(totalBytes / chunkBytes)) {
    throw new ChunkListError(`n_chunks ${nChunks} does not cover ${totalBytes} bytes in chunks of ${chunkBytes}`);
  }
}

/**
 * Parses and checks a list against the slice the assignment announced: its digest and size must be those, its shape
 * consistent, its length exact. Throws ChunkListError.
 */
export function parseChunkList(bytes: Uint8Array, expect: { digest: string; bytes: number }): ChunkList {
  if (bytes.length < CHUNK_LIST_HEADER_BYTES) throw new ChunkListError(`a chunk list of ${bytes.length} bytes is shorter than its header`);
  if (bytes.length > CHUNK_LIST_HEADER_BYTES + MAX_CHUNKS * CHUNK_HASH_BYTES) throw new ChunkListError('the chunk list is too long');
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  if (v.getUint32(0, true) !== CHUNK_LIST_MAGIC) throw new ChunkListError('not a chunk list (bad magic)');
  const version = v.getUint16(4, true);
  if (version !== CHUNK_LIST_VERSION) throw new ChunkListError(`chunk list version ${version}; this client reads ${CHUNK_LIST_VERSION}`);
  for (const o of [6, 7, 56, 57, 58, 59, 60, 61, 62, 63]) if (bytes[o] !== 0) throw new ChunkListError(`reserved byte ${o} is not 0`);
  const chunkBytes = v.getUint32(8, true);
  const nChunks = v.getUint32(12, true);
  const totalBytes = v.getUint32(16, true) + v.getUint32(20, true) * 2 ** 32;
  checkShape(chunkBytes, nChunks, totalBytes);
  if (bytes.length !== CHUNK_LIST_HEADER_BYTES + nChunks * CHUNK_HASH_BYTES) {
    throw new ChunkListError(`a list of ${nChunks} chunks is ${CHUNK_LIST_HEADER_BYTES + nChunks * 32} bytes, got ${bytes.length}`);
  }
  const digest = `sha256:${hexOf(bytes.subarray(24, 56))}`;
  if (digest !== expect.digest) throw new ChunkListError(`the chunk list describes ${digest}, the slice is ${expect.digest}`);
  if (totalBytes !== expect.bytes) throw new ChunkListError(`the chunk list describes ${totalBytes} bytes, the slice is ${expect.bytes}`);
  return { chunkBytes, nChunks, totalBytes, digest, hashes: bytes.subarray(CHUNK_LIST_HEADER_BYTES), bytes };
}

/** sha256 of `data` (WebCrypto: browsers, and Node ≥ 20 as globalThis.crypto). */
export async function sha256(data: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', data as Uint8Array<ArrayBuffer>));
}

/** Whether `data` is chunk `i` of the list: its length and its sha256. */
export async function chunkMatches(list: ChunkList, i: number, data: Uint8Array): Promise<boolean> {
  const [from, to] = chunkRange(list, i);
  if (data.length !== to - from) return false;
  const h = await sha256(data);
  const want = list.hashes.subarray(i * CHUNK_HASH_BYTES, (i + 1) * CHUNK_HASH_BYTES);
  let diff = 0;
  for (let k = 0; k < CHUNK_HASH_BYTES; k++) diff |= (h[k] as number) ^ (want[k] as number);
  return diff === 0;
}

/** The list of a slice held whole (tests, and a volunteer checking its own copy): every chunk hashed. */
export async function buildChunkList(slice: Uint8Array, digest: string, chunkBytes: number): Promise<Uint8Array> {
  const n = Math.ceil(slice.length / chunkBytes);
  const hashes = new Uint8Array(n * CHUNK_HASH_BYTES);
  for (let i = 0; i < n; i++) {
    hashes.set(await sha256(slice.subarray(i * chunkBytes, Math.min(slice.length, (i + 1) * chunkBytes))), i * CHUNK_HASH_BYTES);
  }
  return encodeChunkList({ chunkBytes, totalBytes: slice.length, digest, hashes });
}
