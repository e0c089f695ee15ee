/**
 * Where clients and volunteers reach the hubs of a cluster (issue 30; docs/cluster.md "Hubs telling where the others
 * are"). Pure. Each hub announces a public URL (`--public-url`, else its relay URL as http(s): `--hub-url` or the
 * address it listens on); every hub lists the live ones in `GET /api/health` (`cluster.hub_urls`) and in the volunteer
 * channel's welcome (`hubs`: the others), so that a client or volunteer given one hub learns the rest.
 *
 *   publicUrlOf(null, 'ws://10.0.0.6:8081')          // 'http://10.0.0.6:8081'
 *   publicUrlOf('https://b.example', 'ws://…')       // 'https://b.example'
 *   mergeHubs(['http://a:1'], ['http://b:2/', 'http://a:1', 'ftp://x'], 16)   // ['http://a:1', 'http://b:2']
 */

/** This hub's public URL: `--public-url`, else the relay's `ws(s)://` base as `http(s)://`; null when neither is known. */
export function publicUrlOf(publicUrl: string | null, relayUrl: string | null): string | null {
  const u = publicUrl ?? (relayUrl ? relayUrl.replace(/^ws(s?):\/\//, 'http$1://') : null);
  return u ? originOf(u) : null;
}

/** An http(s) URL's origin (no trailing slash); null for anything else. */
export function originOf(url: string): string | null {
  if (typeof url !== 'string' || url.length > 512 || !/^https?:\/\//.test(url)) return null;
  try {
    return new URL(url).origin;
  } catch {
    return null;
  }
}

/** The announced hubs' public URLs, in their (hub id) order, each once; hubs that announced none are left out. */
export function hubUrls(hubs: ReadonlyArray<{ public_url: string | null }>): string[] {
  return mergeHubs(
    [],
    hubs.map((h) => h.public_url ?? ''),
    Number.POSITIVE_INFINITY,
  );
}

/**
 * `known` followed by the http(s) origins of `learned` not already in it, at most `max` in all (the first ones kept):
 * a client's or volunteer's list of hubs after a hub told it of the others. Never drops a hub it was given.
 */
export function mergeHubs(known: readonly string[], learned: readonly string[], max: number): string[] {
  const out = [...known];
  const seen = new Set(known.map((h) => originOf(h) ?? h));
  for (const h of learned) {
    if (out.length >= max) break;
    const o = originOf(h);
    if (o === null || seen.has(o)) continue;
    seen.add(o);
    out.push(o);
  }
  return out;
}
