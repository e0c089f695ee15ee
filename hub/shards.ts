/**
 * The shard server: a volunteer downloads the experts it was assigned as a mini-GGUF expert slice (gguf/expert-slice.ts:
 * `blk.L.ffn_{gate,up,down}_exps` experts [a, b), bytes copied from the model unchanged; router and shared experts are
 * not in it).
 *
 *   GET|HEAD /api/expert-shard?model=M&layer=L&expert_begin=a&expert_end=b
 *   GET|HEAD /api/proxy/models/M/expert-shard?layer=L&expert_begin=a&expert_end=b   (Kvasir's path, the same bytes)
 *   either path also takes Kvasir's older range form, layers=L:L+1&experts=a:b (never mixed with the other)
 *   Authorization: Bearer <node_token>
 *
 *   registerShardRoutes(app, hub, { clientKey });   // in buildApp (app.ts)
 *
 * The sha256 of the body names the shard: `x-expertswarm-shard-digest: sha256:<hex>`, the strong ETag "sha256-<hex>",
 * and `Cache-Control: immutable` (a changed model file is another digest). Knowing the digest takes one read of the
 * slice, so it is computed on the first request for a (model file, layer, range) and remembered (LRU); a small slice is
 * then kept whole in memory, a large one is streamed from the model file on each download, never held whole.
 * One `Range` (a-b, a-, -n) → 206, `If-Range`, `If-None-Match` → 304. Refusals are HubErrors: the layer and range are
 * checked against the model's shape (refused, never clamped) before any I/O, and downloads in flight are bounded per
 * wallet, per client IP (RATE_LIMITED) and hub-wide (SHARDS_BUSY), each with Retry-After. A slice whose whole length
 * was sent to a wallet (GETs that ran to their end, summed) or answered 304 is reported to the hub
 * (`sliceDownloaded`): HTTP workers may report coverage only for slices their wallet downloaded (market/grants.ts).
 */
import { createHash } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ExpertSliceError, expertSliceByteLength, filledBytes, planExpertSlice, type ExpertSlicePlan } from '../gguf/expert-slice.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { isVariantMetadataKey } from '../gguf/expert-variant.ts';
import { openFileSource, readGGUFFile } from '../gguf/node-io.ts';
import type { GGUFFile } from '../gguf/types.ts';
import { GGUFWriter } from '../gguf/writer.ts';
import { LinkedMap } from './auth/linked-map.ts';
import { ChunkLists } from './chunk-lists.ts';
import { HubError } from './errors.ts';
import type { HeldRange, SliceRef } from '../protocol/slice.ts';
import { SHARD_LOAD_HEADER, formatShardLoad } from '../protocol/chunk-list.ts';
import type { ModelInfo } from './registry.ts';
import {
  EXPERTS_MAX,
  LAYERS_MAX,
  MODEL_NAME_MAX_CHARS,
  SHARD_DIGESTS_KEPT,
  SHARD_DOWNLOADS_MAX,
  SHARD_DOWNLOADS_PER_IP,
  SHARD_DOWNLOADS_PER_WALLET,
  SHARD_MEMORY_CACHE_BYTES,
  SHARD_MEMORY_SLICE_MAX_BYTES,
  SHARD_READ_CHUNK_BYTES,
  SHARD_RETRY_AFTER_S,
  SLICE_GRANT_WALLETS_KEPT,
} from './limits.ts';
import { object, queryInt, queryString } from './validate.ts';
import { inLanes } from './lanes.ts';

export const SHARD_DIGEST_HEADER = 'x-expertswarm-shard-digest';
const IMMUTABLE = 'public, max-age=31536000, immutable';

/**
 * What the shard server needs of the hub, and no more (the pattern of channel/channel.ts's ChannelHost): the models'
 * files, the market calls' authentication, and a place to report a slice a wallet now has. The Hub satisfies it
 * (hub.ts's shardHost()); a test may pass a stub.
 */
export interface ShardHost {
  /** A market model's registry record (its GGUF's path and shape); throws MODEL_UNKNOWN for any other name. */
  modelInfo(model: string): Readonly<ModelInfo>;
  /** The wallet of a market call's Authorization header; throws AUTH_*. */
  authenticate(authorizationHeader: string | undefined): string;
  /** The shard server sent `wallet` a slice (or confirmed its cached copy): its workers may now report it held. */
  sliceDownloaded(wallet: string, slice: SliceRef): void;
}

/** Experts [expertBegin, expertEnd) of one layer of one model. */
export interface ShardRequest {
  model: string;
  layer: number;
  expertBegin: number;
  expertEnd: number;
}

export interface ShardLimits {
  /** Downloads in flight per wallet, per client key (IP) and hub-wide. */
  perWallet: number;
  perIp: number;
  total: number;
  retryAfterS: number;
  /** Digests remembered (LRU). */
  digestsKept: number;
  /** Slices up to this size are kept whole in memory (LRU of memoryCacheBytes); larger ones stream from the file. */
  memorySliceMaxBytes: number;
  memoryCacheBytes: number;
  /** Bytes per read of the model file. */
  readChunkBytes: number;
}

export const DEFAULT_SHARD_LIMITS: Readonly<ShardLimits> = Object.freeze({
  perWallet: SHARD_DOWNLOADS_PER_WALLET,
  perIp: SHARD_DOWNLOADS_PER_IP,
  total: SHARD_DOWNLOADS_MAX,
  retryAfterS: SHARD_RETRY_AFTER_S,
  digestsKept: SHARD_DIGESTS_KEPT,
  memorySliceMaxBytes: SHARD_MEMORY_SLICE_MAX_BYTES,
  memoryCacheBytes: SHARD_MEMORY_CACHE_BYTES,
  readChunkBytes: SHARD_READ_CHUNK_BYTES,
});

// ---------------------------------------------------------------------------------------------------------------
// HTTP conditionals and ranges (RFC 9110 §13, §14), pure

/** The body bytes [from, to) to send; 'all' when there is no usable Range (absent, several ranges, or invalid). */
export type ByteRange = { from: number; to: number } | 'all' | 'unsatisfiable';

/**
 * One `Range: bytes=a-b | a- | -n` against a body of `length` bytes (> 0). A last byte past the end is cut to the end,
 * as RFC 9110 says; a first byte past it is unsatisfiable (416). Several ranges and invalid specs are ignored (200).
 */
export function byteRange(header: string | undefined, length: number): ByteRange {
  const m = header === undefined ? null : /^bytes=(\d*)-(\d*)$/i.exec(header.trim());
  if (!m || (m[1] === '' && m[2] === '')) return 'all';
  if (m[1] === '') {
    const n = Number(m[2]);
    return n === 0 ? 'unsatisfiable' : { from: Math.max(0, length - n), to: length };
  }
  const from = Number(m[1]);
  const last = m[2] === '' ? Number.POSITIVE_INFINITY : Number(m[2]);
  if (last < from) return 'all';
  if (from >= length) return 'unsatisfiable';
  return { from, to: Math.min(last, length - 1) + 1 };
}

/** `If-None-Match` (weak comparison): `*` or a list of entity tags that contains `etag`. */
export function noneMatch(header: string | undefined, etag: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return header.split(',').some((t) => t.trim().replace(/^W\//, '') === etag);
}

/** `If-Range` lets the Range apply only to the same representation: an equal strong tag (a date never matches: no Last-Modified). */
export function ifRangeHolds(header: string | undefined, etag: string): boolean {
  return header === undefined || header.trim() === etag;
}

// ---------------------------------------------------------------------------------------------------------------
// download slots

/** Downloads in flight per wallet, per client key and hub-wide; take() gives their release, or refuses. */
export class DownloadSlots {
  private readonly byWallet = new Map<string, number>();
  private readonly byIp = new Map<string, number>();
  private total = 0;

  constructor(private readonly limits: Pick<ShardLimits, 'perWallet' | 'perIp' | 'total' | 'retryAfterS'>) {}

  get inFlight(): number {
    return this.total;
  }

  /** In flight over the hub-wide cap, as the `x-expertswarm-shard-load` header says it (protocol/chunk-list.ts). */
  get load(): string {
    return formatShardLoad(this.total, this.limits.total);
  }

  /** A slot for one download, or RATE_LIMITED (this wallet or IP has its share) / SHARDS_BUSY (the hub has), with Retry-After. */
  take(wallet: string, ip: string): () => void {
    const { perWallet, perIp, total, retryAfterS } = this.limits;
    const retry = { 'Retry-After': String(retryAfterS) };
    if ((this.byWallet.get(wallet) ?? 0) >= perWallet) {
      throw new HubError('RATE_LIMITED', `this node token already has ${perWallet} shard downloads in flight; retry when one ends`, retry);
    }
    if ((this.byIp.get(ip) ?? 0) >= perIp) {
      throw new HubError('RATE_LIMITED', `this address already has ${perIp} shard downloads in flight; retry when one ends`, retry);
    }
    if (this.total >= total) {
      throw new HubError('SHARDS_BUSY', `the hub is serving its ${total} shard downloads at once; retry in ${retryAfterS} s`, retry);
    }
    const add = (m: Map<string, number>, k: string, d: number): void => {
      const n = (m.get(k) ?? 0) + d;
      if (n === 0) m.delete(k);
      else m.set(k, n);
    };
    add(this.byWallet, wallet, 1);
    add(this.byIp, ip, 1);
    this.total++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      add(this.byWallet, wallet, -1);
      add(this.byIp, ip, -1);
      this.total--;
    };
  }
}

// ---------------------------------------------------------------------------------------------------------------
// slice bytes

/** Where each byte of a slice comes from: its header, a byte range of the model file, or zero padding in between. */
interface SliceLayout {
  length: number;
  header: Uint8Array;
  /**
   * Each tensor's data, in file order: slice bytes [at, at + end − start) are model bytes [start, end), or, for a
   * tensor the model does not hold (a scale of ones), the piece's own `bytes`.
   */
  pieces: Array<{ at: number; start: number; end: number; bytes?: Uint8Array }>;
}

function sliceLayout(plan: ExpertSlicePlan): SliceLayout {
  // The writer writeExpertSlice builds (expert-slice.ts): the plan's metadata, then its matrices in order, then the
  // biases of a biased layer and the scales of a scaled one (float32, one model range each, or ones: filledBytes).
  const w = new GGUFWriter();
  for (const [k, v] of plan.metadata) w.set(k, v);
  for (const m of plan.matrices) w.addTensor(m.name, m.dims, m.source.type);
  for (const b of plan.biases) w.addTensor(b.name, b.dims, GGMLType.F32);
  for (const b of plan.scales) w.addTensor(b.name, [b.dims[0]], GGMLType.F32);
  const length = w.fileSize;
  if (length !== expertSliceByteLength(plan))
    throw new Error(`slice layout of ${length} bytes, writeExpertSlice writes ${expertSliceByteLength(plan)}`);
  const tensors = w.tensors;
  const pieces: SliceLayout['pieces'] = plan.matrices.flatMap((m, i) => {
    let at = w.dataOffset + (tensors[i]?.offset ?? 0);
    return m.pieces.map((p) => {
      const piece = { at, start: p.start, end: p.end };
      at += p.end - p.start;
      return piece;
    });
  });
  [...plan.biases, ...plan.scales].forEach((b, i) => {
    const at = w.dataOffset + (tensors[plan.matrices.length + i]?.offset ?? 0);
    const bytes = filledBytes(b);
    pieces.push(bytes ? { at, start: 0, end: bytes.length, bytes } : { at, start: b.start, end: b.end });
  });
  return { length, header: w.encodeHeader(), pieces };
}

/** Slice bytes [from, to) in chunks of at most `chunk`, the experts read from the model file at `path` as they are needed. */
async function* fileBytes(layout: SliceLayout, path: string, from: number, to: number, chunk: number): AsyncGenerator<Uint8Array> {
  const src = await openFileSource(path);
  try {
    let pos = from;
    if (pos < layout.header.length && pos < to) {
      const end = Math.min(to, layout.header.length);
      yield layout.header.subarray(pos, end);
      pos = end;
    }
    for (const p of layout.pieces) {
      if (pos < p.at && pos < to) {
        const end = Math.min(p.at, to);
        yield new Uint8Array(end - pos);
        pos = end;
      }
      const end = Math.min(p.at + (p.end - p.start), to);
      while (pos < end) {
        const n = Math.min(chunk, end - pos);
        yield p.bytes ? p.bytes.subarray(pos - p.at, pos - p.at + n) : await src.read(p.start + (pos - p.at), n);
        pos += n;
      }
    }
    if (pos < to) yield new Uint8Array(to - pos); // the last matrix's padding
  } finally {
    await src.close();
  }
}

function* memoryBytes(bytes: Uint8Array, from: number, to: number, chunk: number): Generator<Uint8Array> {
  for (let at = from; at < to; at += chunk) yield bytes.subarray(at, Math.min(to, at + chunk));
}

// ---------------------------------------------------------------------------------------------------------------
// the server

interface ShardFacts {
  digest: string;
  length: number;
}

/** A slice's digest and length with its layout: what serving it needs besides its bytes. */
interface KnownShard extends ShardFacts {
  layout: SliceLayout;
}

/** One slice ready to serve: its digest and layout, and its bytes when they are kept in memory. */
export interface Shard extends ShardFacts {
  etag: string;
  path: string;
  layout: SliceLayout;
  bytes?: Uint8Array;
}

function fileIdentity(s: { dev: number; ino: number; size: number; mtimeMs: number }): string {
  return `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}`;
}

/** Only what planExpertSlice reads: the tensors, two names and the variant keys (a tokenizer's metadata can be megabytes). */
function plannable(file: GGUFFile): GGUFFile {
  // The keys planExpertSlice reads: a slice's architecture, name and expert FFN variant (a layer's clamp limit)
  const keep = (k: string): boolean => k === 'general.architecture' || k === 'general.name' || isVariantMetadataKey(k);
  const metadata = new Map([...file.metadata].filter(([k]) => keep(k)));
  return { ...file, metadata };
}

export class ShardServer {
  readonly limits: ShardLimits;
  readonly slots: DownloadSlots;
  /** Each model's parsed header, by the identity of the file it was read from. */
  private readonly headers = new Map<string, { identity: string; file: Promise<GGUFFile> }>();
  private readonly facts = new LinkedMap<KnownShard>();
  private readonly bodies = new LinkedMap<Uint8Array>();
  private bodyBytes = 0;
  /** Digests being computed, so that concurrent first requests read the slice once. */
  private readonly computing = new Map<string, Promise<{ facts: KnownShard; bytes?: Uint8Array }>>();
  /** Stats of model files in flight (identity()). */
  private readonly stats = new Map<string, Promise<string>>();

  constructor(
    private readonly hub: ShardHost,
    limits: Partial<ShardLimits> = {},
  ) {
    this.limits = { ...DEFAULT_SHARD_LIMITS, ...limits };
    this.slots = new DownloadSlots(this.limits);
  }

  /** Checks a request against the model's shape, without I/O: MODEL_UNKNOWN, RANGE_OUT_OF_BOUNDS, LAYER_NOT_MOE. */
  check(r: ShardRequest): void {
    const info = this.hub.modelInfo(r.model);
    if (r.layer >= info.nLayer) {
      throw new HubError('RANGE_OUT_OF_BOUNDS', `layer ${r.layer} is not one of ${r.model}'s ${info.nLayer} layers [0, ${info.nLayer})`);
    }
    if (!info.moeLayers.includes(r.layer)) {
      throw new HubError(
        'LAYER_NOT_MOE',
        `layer ${r.layer} of ${r.model} has no routed experts (a dense layer); its MoE layers: ${info.moeLayers.join(', ')}`,
      );
    }
    if (!(r.expertBegin < r.expertEnd && r.expertEnd <= info.nExpert)) {
      throw new HubError(
        'RANGE_OUT_OF_BOUNDS',
        `experts [${r.expertBegin}, ${r.expertEnd}) is not a non-empty range within ${r.model}'s ${info.nExpert} experts [0, ${info.nExpert})`,
      );
    }
  }

  /** The slice's layout and digest, computed (one read of the slice) unless remembered for this file version. */
  async open(r: ShardRequest): Promise<Shard> {
    return this.prepare(r, true);
  }

  /**
   * Computes, in the background, the digests of slices not yet known (the market's likely next assignments), `lanes`
   * at a time and at most half of `digestsKept` (a warm-up never evicts itself): the first assignment of each is then
   * a lookup, not a read of the file. Their bodies are not kept (the first download reads them). Slices the model
   * cannot give, and read errors, are skipped: the assignment that wants one gets the error itself. Resolves to the
   * number of slices known after it (computed now or before).
   */
  async warm(model: string, slices: readonly HeldRange[], lanes = 2): Promise<number> {
    const todo = slices.slice(0, Math.floor(this.limits.digestsKept / 2));
    let known = 0;
    await inLanes(todo, Math.max(1, lanes), async ([layer, expertBegin, expertEnd]) => {
      try {
        await this.prepare({ model, layer, expertBegin, expertEnd }, false);
        known++;
      } catch {
        // skipped: see above
      }
    });
    return known;
  }

  /**
   * A slice's length and digest (what an assignment announces), computed unless remembered for this file version;
   * unlike open(), a small slice's bytes are not kept for a download that may never come.
   */
  async lookup(r: ShardRequest): Promise<ShardFacts> {
    const { length, digest } = await this.prepare(r, false);
    return { length, digest };
  }

  /** open()'s work; `keepBody` false: a slice small enough for memory is hashed but not kept (a warm-up). */
  private async prepare(r: ShardRequest, keepBody: boolean): Promise<Shard> {
    this.check(r);
    const { path } = this.hub.modelInfo(r.model);
    const identity = await this.identity(path);
    // Remembered for this version of the file: no planning, no layout, no read.
    const key = `${r.model}\u0000${identity}\u0000${r.layer}:${r.expertBegin}:${r.expertEnd}`;
    const known = this.facts.get(key);
    if (known) {
      const inMemory = known.length <= this.limits.memorySliceMaxBytes;
      const bytes = inMemory ? this.bodies.get(key) : undefined;
      if (bytes || !inMemory || !keepBody) {
        this.facts.touch(key);
        if (bytes) this.bodies.touch(key);
        return this.shard(known, path, bytes);
      }
    }
    const file = await this.header(r.model, path, identity);
    let plan: ExpertSlicePlan;
    try {
      plan = planExpertSlice(file, r.layer, r.expertBegin, r.expertEnd);
    } catch (e) {
      if (e instanceof ExpertSliceError && e.code === 'SLICE_BAD_RANGE') throw new HubError('RANGE_OUT_OF_BOUNDS', e.message);
      if (e instanceof ExpertSliceError && e.code === 'SLICE_NOT_MOE') throw new HubError('LAYER_NOT_MOE', e.message);
      throw e;
    }
    const layout = sliceLayout(plan);
    const inMemory = keepBody && layout.length <= this.limits.memorySliceMaxBytes;
    // Concurrent first requests read the slice once; one that keeps the body does not wait on a warm-up's that does not.
    const pendingKey = `${key}\u0000${inMemory ? 'body' : 'digest'}`;
    let pending = this.computing.get(pendingKey);
    if (!pending) {
      pending = this.compute(key, layout, path, inMemory).finally(() => this.computing.delete(pendingKey));
      this.computing.set(pendingKey, pending);
    }
    const { facts, bytes } = await pending;
    return this.shard(facts, path, bytes);
  }

  private shard(facts: KnownShard, path: string, bytes: Uint8Array | undefined): Shard {
    return {
      digest: facts.digest,
      length: facts.length,
      etag: `"sha256-${facts.digest}"`,
      path,
      layout: facts.layout,
      ...(bytes ? { bytes } : {}),
    };
  }

  /**
   * The identity (device, inode, size, mtime) of the model file, one stat per request; requests that ask while a stat
   * is in flight share it (a round's 32 lookups cost one trip through the thread pool, not 32). A stat started before
   * a request is at most as old as the read that follows any stat: a file changed after it is seen by the next one.
   */
  private identity(path: string): Promise<string> {
    let pending = this.stats.get(path);
    if (!pending) {
      pending = stat(path)
        .then(fileIdentity)
        .finally(() => this.stats.delete(path));
      this.stats.set(path, pending);
    }
    return pending;
  }

  /** Bytes [from, to) of a shard as a stream that reads ahead at most one chunk. */
  body(shard: Shard, from: number, to: number): Readable {
    const chunk = this.limits.readChunkBytes;
    const chunks = shard.bytes ? memoryBytes(shard.bytes, from, to, chunk) : fileBytes(shard.layout, shard.path, from, to, chunk);
    return Readable.from(chunks, { objectMode: false });
  }

  private header(model: string, path: string, identity: string): Promise<GGUFFile> {
    const known = this.headers.get(model);
    if (known?.identity === identity) return known.file;
    const file = readGGUFFile(path).then(plannable);
    this.headers.set(model, { identity, file });
    file.catch(() => {
      if (this.headers.get(model)?.file === file) this.headers.delete(model);
    });
    return file;
  }

  private async compute(
    key: string,
    layout: SliceLayout,
    path: string,
    inMemory: boolean,
  ): Promise<{ facts: KnownShard; bytes?: Uint8Array }> {
    const hash = createHash('sha256');
    const chunks = fileBytes(layout, path, 0, layout.length, this.limits.readChunkBytes);
    let bytes: Uint8Array | undefined;
    if (inMemory) {
      bytes = new Uint8Array(layout.length);
      let at = 0;
      for await (const c of chunks) {
        bytes.set(c, at);
        at += c.length;
      }
      hash.update(bytes);
      this.keepBody(key, bytes);
    } else {
      for await (const c of chunks) hash.update(c);
    }
    const facts = { digest: hash.digest('hex'), length: layout.length, layout };
    this.facts.set(key, facts);
    while (this.facts.size > this.limits.digestsKept) this.facts.shift();
    return bytes ? { facts, bytes } : { facts };
  }

  private keepBody(key: string, bytes: Uint8Array): void {
    if (bytes.length > this.limits.memoryCacheBytes) return;
    const old = this.bodies.get(key);
    if (old) this.bodyBytes -= old.length;
    this.bodies.set(key, bytes);
    this.bodyBytes += bytes.length;
    while (this.bodyBytes > this.limits.memoryCacheBytes) {
      const gone = this.bodies.shift();
      if (!gone) break;
      this.bodyBytes -= gone.value.length;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// routes

/** `a:b` of Kvasir's older query form, the half-open range [a, b). */
function span(q: Record<string, unknown>, key: string): [number, number] {
  const v = q[key];
  const m = typeof v === 'string' ? /^(\d{1,9}):(\d{1,9})$/.exec(v) : null;
  if (!m) throw new HubError('QUERY_INVALID', `${key} must be "a:b", the integers of the half-open range [a, b)`);
  return [Number(m[1]), Number(m[2])];
}

const NEW_FORM = ['layer', 'expert_begin', 'expert_end'] as const;
const OLD_FORM = ['layers', 'experts'] as const;

/**
 * The layer and experts of a shard query, in either form, on either path: `layer=L&expert_begin=a&expert_end=b` (ours,
 * and what Kvasir's bridge and clients send today) or Kvasir's older `layers=L:L+1&experts=a:b`. A query that mixes
 * the two forms is refused (QUERY_INVALID), never read half one way and half the other.
 */
function shardRange(q: Record<string, unknown>): Omit<ShardRequest, 'model'> {
  const given = (keys: readonly string[]): string[] => keys.filter((k) => q[k] !== undefined);
  const newer = given(NEW_FORM);
  const older = given(OLD_FORM);
  if (newer.length > 0 && older.length > 0) {
    throw new HubError(
      'QUERY_INVALID',
      `the query mixes two forms (${[...newer, ...older].join(', ')}): give layer, expert_begin and expert_end, or layers=L:L+1 and experts=a:b`,
    );
  }
  if (older.length === 0) {
    return {
      layer: queryInt(q, 'layer', 0, LAYERS_MAX),
      expertBegin: queryInt(q, 'expert_begin', 0, EXPERTS_MAX),
      expertEnd: queryInt(q, 'expert_end', 0, EXPERTS_MAX),
    };
  }
  const [layer, layerEnd] = span(q, 'layers');
  const [expertBegin, expertEnd] = span(q, 'experts');
  if (layerEnd !== layer + 1)
    throw new HubError('RANGE_OUT_OF_BOUNDS', `a shard holds one layer: layers=${layer}:${layer + 1}, not ${layer}:${layerEnd}`);
  return { layer, expertBegin, expertEnd };
}

function shardQuery(query: unknown): ShardRequest {
  const q = object(query, 'query', 'QUERY_INVALID');
  return { model: queryString(q, 'model', MODEL_NAME_MAX_CHARS), ...shardRange(q) };
}

/** Kvasir's path: the model in the path (a `model` in the query too must name the same one), the range in either form. */
function kvasirQuery(params: unknown, query: unknown): ShardRequest {
  const model = queryString(object(params, 'path', 'QUERY_INVALID'), 'model', MODEL_NAME_MAX_CHARS);
  const q = object(query, 'query', 'QUERY_INVALID');
  if (q.model !== undefined && q.model !== model)
    throw new HubError('QUERY_INVALID', 'the query names another model than the path; give the model once, in the path');
  return { model, ...shardRange(q) };
}

/** A request header as one string (a repeated one joined as a list). */
function header(req: FastifyRequest, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
}

export interface ShardRoutesOptions {
  /** The key a client's downloads are counted under besides its wallet: its IP (app.ts's clientKey). */
  clientKey(req: FastifyRequest): string;
  limits?: Partial<ShardLimits>;
  /** The hub's own shard server (its digests are what assignments announce); a new one when absent. */
  server?: ShardServer;
  /** Per-chunk hash lists (GET /api/expert-shard/chunks, hub/chunk-lists.ts); 1 MiB chunks over `server` when absent. */
  chunks?: ChunkLists<Shard>;
  /** Send `x-expertswarm-shard-load` (default true; false with the hub's `--peers-first`). */
  loadHint?: boolean;
}

/** Bytes of each slice sent to each wallet (`wallet digest` → bytes), the least recently used forgotten past `kept`. */
class SentBytes {
  private readonly bytes = new LinkedMap<number>();
  constructor(private readonly kept: number) {}

  /** Adds `n` and returns the total so far. */
  add(key: string, n: number): number {
    const total = (this.bytes.get(key) ?? 0) + n;
    this.bytes.set(key, total);
    if (this.bytes.size > this.kept) this.bytes.shift();
    return total;
  }
}

/** Registers both shard paths (GET and HEAD) on `app`; returns the server (its caches and slots) for tests. */
export function registerShardRoutes(app: FastifyInstance, hub: ShardHost, opts: ShardRoutesOptions): ShardServer {
  const server = opts.server ?? new ShardServer(hub, opts.limits);

  const sent = new SentBytes(SLICE_GRANT_WALLETS_KEPT);
  const load = (): Record<string, string> => (opts.loadHint === false ? {} : { [SHARD_LOAD_HEADER]: server.slots.load });
  const serve = async (req: FastifyRequest, reply: FastifyReply, parse: () => ShardRequest): Promise<FastifyReply> => {
    const wallet = hub.authenticate(req.headers.authorization);
    const r = parse();
    server.check(r); // the cheap refusals before a slot is taken
    const release = server.slots.take(wallet, opts.clientKey(req));
    let streaming = false;
    try {
      const shard = await server.open(r);
      const ifRange = header(req, 'if-range');
      const range = req.method === 'GET' && ifRangeHolds(ifRange, shard.etag) ? byteRange(req.headers.range, shard.length) : 'all';
      const notModified = noneMatch(header(req, 'if-none-match'), shard.etag);
      if (range === 'unsatisfiable' && !notModified) {
        throw new HubError(
          'RANGE_NOT_SATISFIABLE',
          `Range ${String(req.headers.range).slice(0, 64)} selects none of this shard's ${shard.length} bytes`,
          {
            'Content-Range': `bytes */${shard.length}`,
          },
        );
      }
      void reply.headers({
        etag: shard.etag,
        [SHARD_DIGEST_HEADER]: `sha256:${shard.digest}`,
        'cache-control': IMMUTABLE,
        'accept-ranges': 'bytes',
        ...load(),
      });
      const slice = { model: r.model, layer: r.layer, begin: r.expertBegin, end: r.expertEnd };
      if (notModified) {
        // The client holds these bytes already (it named their digest): as good as a download for its coverage.
        if (req.method === 'GET') hub.sliceDownloaded(wallet, slice);
        return reply.code(304).send();
      }
      const { from, to } = typeof range === 'string' ? { from: 0, to: shard.length } : range;
      void reply.type('application/octet-stream').header('content-length', String(to - from));
      if (typeof range !== 'string') void reply.code(206).header('content-range', `bytes ${from}-${to - 1}/${shard.length}`);
      if (req.method === 'HEAD') return reply.send();
      const body = server.body(shard, from, to);
      body.once('close', release);
      // Bytes sent count once a body ran to its end; a wallet sent the slice's whole length (at once, or a download
      // resumed in ranges) has downloaded it, and its workers may report it held. A one-byte range proves nothing.
      body.once('end', () => {
        if (sent.add(`${wallet} ${shard.digest}`, to - from) >= shard.length) hub.sliceDownloaded(wallet, slice);
      });
      streaming = true;
      return reply.send(body);
    } finally {
      if (!streaming) release();
    }
  };

  app.route({
    method: ['GET', 'HEAD'],
    url: '/api/expert-shard',
    handler: (req, reply) => serve(req, reply, () => shardQuery(req.query)),
  });
  app.route({
    method: ['GET', 'HEAD'],
    url: '/api/proxy/models/:model/expert-shard',
    handler: (req, reply) => serve(req, reply, () => kvasirQuery(req.params, req.query)),
  });
  // The slice's per-chunk hashes, for volunteers that take it from each other (docs/peers.md): as authenticated and
  // bounded as a download (hashing a slice the first time reads it once).
  const chunks = opts.chunks ?? new ChunkLists<Shard>((s) => server.body(s, 0, s.length), 1024 * 1024);
  app.route({
    method: ['GET', 'HEAD'],
    url: '/api/expert-shard/chunks',
    handler: async (req, reply) => {
      const wallet = hub.authenticate(req.headers.authorization);
      const r = shardQuery(req.query);
      server.check(r);
      const release = server.slots.take(wallet, opts.clientKey(req));
      try {
        const shard = await server.open(r);
        const { list, chunkBytes } = await chunks.of(shard);
        const etag = `"chunks-${chunkBytes}-${shard.digest}"`;
        void reply.headers({
          etag,
          [SHARD_DIGEST_HEADER]: `sha256:${shard.digest}`,
          'cache-control': IMMUTABLE,
          ...load(),
        });
        if (noneMatch(header(req, 'if-none-match'), etag)) return reply.code(304).send();
        void reply.type('application/octet-stream').header('content-length', String(list.length));
        return reply.send(req.method === 'HEAD' ? undefined : Buffer.from(list.buffer, list.byteOffset, list.length));
      } finally {
        release();
      }
    },
  });
  return server;
}
