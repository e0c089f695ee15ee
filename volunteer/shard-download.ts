/**
 * Downloads one expert slice from the hub's shard server with progress, resumes an interrupted download with a
 * `Range` request (guarded by `If-Range` on the strong ETag, so a changed body restarts from zero), and checks the
 * digest before anyone sees the bytes. Browser-safe (fetch + WebCrypto).
 *
 *   const bytes = await downloadShard({ url, token, bytes: 41_943_552, digest, onProgress: (got, total) => … });
 */
import { VolunteerError, errorMessage } from './errors.ts';
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
