/**
 * The shard server's per-chunk hash lists (protocol/chunk-list.ts has the format and the binding to the slice
 * digest): what volunteers check each chunk against when they take a slice from each other (docs/peers.md).
 *
 *   GET|HEAD /api/expert-shard/chunks?model=M&layer=L&expert_begin=a&expert_end=b     (Authorization: Bearer <node_token>)
 *   → application/octet-stream, 64 + 32·n bytes; ETag "chunks-<chunk_bytes>-<slice hex>", Cache-Control immutable
 *
 * A list is computed on its first request by one read of the slice (from memory when the shard server keeps it there),
 * then remembered by slice digest (LRU); concurrent first requests share the one read.
 */
import { createHash } from 'node:crypto';
import { CHUNK_HASH_BYTES, chunkBytesFor, encodeChunkList } from '../protocol/chunk-list.ts';

/** Lists remembered; each is 64 + 32·n bytes (25 KiB for an 800 MB slice in 1 MiB chunks). */
export const CHUNK_LISTS_KEPT = 1024;

/** What a list is computed from: an opened slice (shards.ts Shard is one), its bytes when they are in memory. */
export interface ChunkSource {
  /** The slice's sha256, hex. */
  digest: string;
  length: number;
  bytes?: Uint8Array;
}

/**
 * Lists of the slices `read` yields (the shard server's `body(shard, 0, shard.length)`): the reader is passed in, so
 * this module knows nothing of the shard server and the shard server may build its own.
 */
export class ChunkLists<S extends ChunkSource = ChunkSource> {
  private readonly kept = new Map<string, Uint8Array>();
  private readonly computing = new Map<string, Promise<Uint8Array>>();

  constructor(
    /** All of a slice's bytes, in order (used only for a slice not kept in memory). */
    private readonly read: (shard: S) => AsyncIterable<Uint8Array>,
    /** The preferred chunk size (a power of two; larger for slices that would have more than MAX_CHUNKS chunks). */
    readonly chunkBytes: number,
  ) {}

  /** The list of an opened shard, and its chunk size. */
  async of(shard: S): Promise<{ list: Uint8Array; chunkBytes: number }> {
    const chunkBytes = chunkBytesFor(shard.length, this.chunkBytes);
    const key = `${shard.digest}:${chunkBytes}`;
    const known = this.kept.get(key);
    if (known) {
      this.kept.delete(key); // LRU: to the back
      this.kept.set(key, known);
      return { list: known, chunkBytes };
    }
    let pending = this.computing.get(key);
    if (!pending) {
      pending = this.compute(shard, chunkBytes).finally(() => this.computing.delete(key));
      this.computing.set(key, pending);
    }
    const list = await pending;
    this.kept.set(key, list);
    while (this.kept.size > CHUNK_LISTS_KEPT) this.kept.delete(this.kept.keys().next().value as string);
    return { list, chunkBytes };
  }

  private async compute(shard: S, chunkBytes: number): Promise<Uint8Array> {
    const n = Math.ceil(shard.length / chunkBytes);
    const hashes = new Uint8Array(n * CHUNK_HASH_BYTES);
    const whole = createHash('sha256');
    let i = 0;
    let h = createHash('sha256');
    let inChunk = 0;
    // A slice the shard server keeps in memory is hashed where it lies; a larger one is read once, as a download would.
    const pieces = shard.bytes ? [shard.bytes] : this.read(shard);
    for await (const piece of pieces) {
      whole.update(piece);
      let at = 0;
      while (at < piece.length) {
        const take = Math.min(piece.length - at, chunkBytes - inChunk);
        h.update(piece.subarray(at, at + take));
        at += take;
        inChunk += take;
        if (inChunk === chunkBytes) {
          hashes.set(h.digest(), i++ * CHUNK_HASH_BYTES);
          h = createHash('sha256');
          inChunk = 0;
        }
      }
    }
    if (inChunk > 0) hashes.set(h.digest(), i++ * CHUNK_HASH_BYTES);
    // The bytes just read must be the slice the digest names: a model file changed under the hub is refused here, not
    // served as a list that no chunk would match.
    if (i !== n || whole.digest('hex') !== shard.digest) {
      throw new Error(`the slice read for its chunk list is not ${shard.digest} (the model file changed?)`);
    }
    return encodeChunkList({ chunkBytes, totalBytes: shard.length, digest: `sha256:${shard.digest}`, hashes });
  }
}
