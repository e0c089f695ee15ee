/**
 * Downloads one expert slice from the hub's shard server with progress, resumes an interrupted download with a
 * `Range` request (guarded by `If-Range` on the strong ETag, so a changed body restarts from zero), and checks the
 * digest before anyone sees the bytes. Browser-safe (fetch + WebCrypto).
 *
 *   const bytes = await downloadShard({ url, token, bytes: 41_943_552, digest, onProgress: (got, total) => … });
 *
 * fetchSlice takes the slice from other volunteers where it can (docs/peers.md): chunk by chunk from peers over
 * WebRTC (volunteer/peer-host.ts), the rest from the hub with `Range` requests, each chunk checked against the slice's
 * per-chunk hash list, the whole against the digest; anything else falls back to downloadShard.
 */
import { VolunteerError, errorMessage } from './errors.ts';
import { SHARD_LOAD_HEADER, parseChunkList, parseShardLoad, type ChunkList } from '../protocol/chunk-list.ts';
import type { PeerHost } from './peer-host.ts';
import { sha256Digest } from './shard-cache.ts';

export interface ShardDownload {
  /** Absolute URL of the slice on the shard server. */
  url: string;
  /** The node token (sent as a bearer token). */
  token: string;
  /** The size the hub announced; a body longer than this is refused. */
  bytes: number;
  /** `sha256:<hex>` the hub announced. */
  digest: string;
  onProgress?: (loadedBytes: number, totalBytes: number) => void;
  signal?: AbortSignal;
  /** Resumes after a dropped connection (default 3). */
  maxResumes?: number;
  fetch?: typeof fetch;
}

export async function downloadShard(d: ShardDownload): Promise<Uint8Array> {
  const doFetch = d.fetch ?? fetch;
  const out = new Uint8Array(d.bytes);
  let got = 0;
  let etag: string | null = null;
  let resumes = 0;
  for (;;) {
    const headers: Record<string, string> = { authorization: `Bearer ${d.token}` };
    if (got > 0) {
      headers.range = `bytes=${got}-`;
      if (etag) headers['if-range'] = etag;
    }
    try {
      const res = await doFetch(d.url, { headers, ...(d.signal ? { signal: d.signal } : {}) });
      if (res.status !== 200 && res.status !== 206) {
        throw new VolunteerError('SHARD_HTTP', `the hub answered ${res.status} to the slice download: ${await errorText(res)}`);
      }
      // A 200 to a range request means the body changed or ranges are unsupported: start over.
      if (res.status === 200) got = 0;
      etag = res.headers.get('etag') ?? etag;
      if (!res.body) throw new VolunteerError('SHARD_NETWORK', 'the slice response has no body');
      const reader = res.body.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (got + value.length > out.length) {
          await reader.cancel();
          throw new VolunteerError('SHARD_TOO_LARGE', `the slice is longer than the ${out.length} bytes announced`);
        }
        out.set(value, got);
        got += value.length;
        d.onProgress?.(got, out.length);
      }
      if (got !== out.length) throw new Error(`the slice ended after ${got} of ${out.length} bytes`);
      break;
    } catch (e) {
      if (e instanceof VolunteerError || d.signal?.aborted) throw e;
      if (++resumes > (d.maxResumes ?? 3)) throw new VolunteerError('SHARD_NETWORK', `the slice download failed: ${errorMessage(e)}`);
    }
  }
  const digest = await sha256Digest(out);
  if (digest !== d.digest)
    throw new VolunteerError('SHARD_DIGEST_MISMATCH', `the slice hashes to ${digest}, the hub announced ${d.digest}`);
  return out;
}

async function errorText(res: Response): Promise<string> {
  try {
    const body = (await res.json()) as { error?: unknown; code?: unknown };
    return `${String(body.code ?? '')} ${String(body.error ?? '')}`.trim();
  } catch {
    return res.statusText;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// from peers and the hub (docs/peers.md)

/** A slice's per-chunk hash list from the shard server, parsed and bound to the slice it describes. */
export async function downloadChunkList(d: {
  url: string;
  token: string;
  digest: string;
  bytes: number;
  signal?: AbortSignal;
  fetch?: typeof fetch;
  /** The hub's shard-load hint on the answer (null when it sends none). */
  onLoad?: (load: number | null) => void;
}): Promise<ChunkList> {
  const res = await (d.fetch ?? fetch)(d.url, {
    headers: { authorization: `Bearer ${d.token}` },
    ...(d.signal ? { signal: d.signal } : {}),
  });
  if (res.status !== 200)
    throw new VolunteerError('SHARD_HTTP', `the hub answered ${res.status} to the chunk list: ${await errorText(res)}`);
  d.onLoad?.(parseShardLoad(res.headers.get(SHARD_LOAD_HEADER)));
  const body = new Uint8Array(await res.arrayBuffer());
  try {
    return parseChunkList(body, { digest: d.digest, bytes: d.bytes });
  } catch (e) {
    throw new VolunteerError('SHARD_HTTP', `the chunk list is unusable: ${errorMessage(e)}`);
  }
}

/** How long one `Range` request of a chunk may take, and how long a 429/503's Retry-After may make it wait. */
const RANGE_TIMEOUT_MS = 120_000;
const RETRY_AFTER_MAX_MS = 10_000;

/**
 * Bytes [from, to) of the slice from the shard server (`Range`, guarded by `If-Range` on the digest's ETag so a changed
 * body is refused, not mixed in). A 429 or 503 (the hub's download slots) waits its Retry-After and asks again.
 */
export async function downloadRange(d: {
  url: string;
  token: string;
  digest: string;
  from: number;
  to: number;
  signal: AbortSignal;
  fetch?: typeof fetch;
  /** The hub's shard-load hint of each range it sends (null when it sends none). */
  onLoad?: (load: number | null) => void;
}): Promise<Uint8Array> {
  const doFetch = d.fetch ?? fetch;
  const etag = `"sha256-${d.digest.slice('sha256:'.length)}"`;
  for (let attempt = 0; ; attempt++) {
    const signal = AbortSignal.any([d.signal, AbortSignal.timeout(RANGE_TIMEOUT_MS)]);
    const res = await doFetch(d.url, {
      headers: { authorization: `Bearer ${d.token}`, range: `bytes=${d.from}-${d.to - 1}`, 'if-range': etag },
      signal,
    });
    if ((res.status === 429 || res.status === 503) && attempt < 20) {
      await res.body?.cancel();
      const s = Number(res.headers.get('retry-after'));
      await sleep(Math.min(RETRY_AFTER_MAX_MS, Number.isFinite(s) && s > 0 ? s * 1000 : 1000) * (0.5 + Math.random() / 2), d.signal);
      continue;
    }
    if (res.status !== 206) {
      await res.body?.cancel();
      throw new VolunteerError('SHARD_HTTP', `the hub answered ${res.status} to a range of the slice`);
    }
    const range = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(res.headers.get('content-range') ?? '');
    if (!range || Number(range[1]) !== d.from || Number(range[2]) !== d.to - 1) {
      await res.body?.cancel();
      throw new VolunteerError('SHARD_HTTP', `the hub sent ${res.headers.get('content-range')}, not bytes ${d.from}-${d.to - 1}`);
    }
    d.onLoad?.(parseShardLoad(res.headers.get(SHARD_LOAD_HEADER)));
    const body = new Uint8Array(await res.arrayBuffer());
    if (body.length !== d.to - d.from)
      throw new VolunteerError('SHARD_NETWORK', `a range of ${body.length} bytes, expected ${d.to - d.from}`);
    return body;
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

export interface SliceFetch extends ShardDownload {
  /**
   * Peers to take the slice from (the assign's `peers` and `chunks_url`) and the host that shares, or null: the hub
   * alone (no WebRTC here, or a hub that does not list peers).
   */
  peers: { host: PeerHost; ids: readonly string[]; chunksUrl: string } | null;
}

export interface SliceGot {
  bytes: Uint8Array;
  fromPeers: number;
  fromHub: number;
  /** The chunk list, when peers were used: the slice is then already being shared. */
  list: ChunkList | null;
}

/**
 * The slice from peers and the hub (each chunk checked against the hash list, the whole against the digest), or from
 * the hub alone where peers cannot be used; if taking it from peers fails (no data channel opens, the list cannot be
 * had, the hub fails a range), the plain download follows. The result is verified by its digest either way.
 */
export async function fetchSlice(d: SliceFetch): Promise<SliceGot> {
  const p = d.peers;
  if (p) {
    try {
      let hubLoad: number | null = null;
      const onLoad = (load: number | null): void => {
        hubLoad = load;
      };
      const list = await downloadChunkList({
        url: p.chunksUrl,
        token: d.token,
        digest: d.digest,
        bytes: d.bytes,
        ...(d.signal ? { signal: d.signal } : {}),
        ...(d.fetch ? { fetch: d.fetch } : {}),
        onLoad,
      });
      const signal = d.signal ?? new AbortController().signal;
      const got = await p.host.fetch(
        d.digest,
        list,
        p.ids,
        (from, to, s) =>
          downloadRange({
            url: d.url,
            token: d.token,
            digest: d.digest,
            from,
            to,
            signal: AbortSignal.any([s, signal]),
            ...(d.fetch ? { fetch: d.fetch } : {}),
            onLoad,
          }),
        (got, total) => d.onProgress?.(got, total),
        signal,
        () => hubLoad,
      );
      const digest = await sha256Digest(got.bytes);
      if (digest === d.digest) return { bytes: got.bytes, fromPeers: got.fromPeers, fromHub: got.fromHub, list };
      p.host.drop(d.digest);
    } catch (e) {
      if (d.signal?.aborted) throw e;
      p.host.drop(d.digest);
    }
  }
  const bytes = await downloadShard(d);
  return { bytes, fromPeers: 0, fromHub: bytes.length, list: null };
}
