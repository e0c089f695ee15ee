/**
 * Slices kept by digest, so a reload (or a second assignment of the same slice) does not download again. The digest
 * names the bytes (`sha256:<hex>`), so an entry never goes stale; a corrupt entry is detected by the caller's digest
 * check and replaced. Browser-safe: the browser uses the Cache API, Node a directory (node/file-cache.ts).
 */
export interface ShardCache {
  get(digest: string): Promise<Uint8Array | null>;
  put(digest: string, bytes: Uint8Array): Promise<void>;
  delete(digest: string): Promise<void>;
}

const DIGEST = /^sha256:[0-9a-f]{64}$/;

export function checkDigest(digest: string): string {
  if (!DIGEST.test(digest))
    throw new RangeError(`a shard digest is "sha256:" and 64 lowercase hex digits, got ${JSON.stringify(digest.slice(0, 80))}`);
  return digest;
}

/** `sha256:<hex>` of the bytes, with WebCrypto (browsers and Node ≥ 20 have it as globalThis.crypto). */
export async function sha256Digest(bytes: Uint8Array): Promise<string> {
  const hash = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes as Uint8Array<ArrayBuffer>));
  let hex = '';
  for (const b of hash) hex += b.toString(16).padStart(2, '0');
  return `sha256:${hex}`;
}

/** Nothing is kept (no Cache API, or the user asked for it). */
export class NoShardCache implements ShardCache {
  async get(): Promise<Uint8Array | null> {
    return null;
  }
  async put(): Promise<void> {}
  async delete(): Promise<void> {}
}

/** The browser's Cache API, one cache for every slice, keyed by a synthetic URL made of the digest. */
export class BrowserShardCache implements ShardCache {
  constructor(private readonly cacheName = 'expertswarm-shards-v1') {}

  private key(digest: string): string {
    return `/__expertswarm_shard/${checkDigest(digest)}`;
  }

  async get(digest: string): Promise<Uint8Array | null> {
    const cache = await caches.open(this.cacheName);
    const hit = await cache.match(this.key(digest));
    return hit ? new Uint8Array(await hit.arrayBuffer()) : null;
  }

  async put(digest: string, bytes: Uint8Array): Promise<void> {
    const cache = await caches.open(this.cacheName);
    await cache.put(
      this.key(digest),
      new Response(bytes as Uint8Array<ArrayBuffer>, { headers: { 'content-type': 'application/octet-stream' } }),
    );
  }

  async delete(digest: string): Promise<void> {
    const cache = await caches.open(this.cacheName);
    await cache.delete(this.key(digest));
  }
}

/** The Cache API where there is one (browsers on a secure or loopback origin), else nothing. */
export function defaultBrowserCache(): ShardCache {
  return typeof caches === 'undefined' ? new NoShardCache() : new BrowserShardCache();
}
