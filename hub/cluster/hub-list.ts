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

/** A hub of the cluster as `GET /api/health` lists it (`cluster.members`). */
export interface HubMember {
  hub: string;
  /** Its public URL (an http(s) origin); null: it announced none. */
  public_url: string | null;
  /** Workers attached to it: this hub's live ones, another's records in this hub's mirror; null: not known here. */
  workers: number | null;
}

/** Hubs listed in `cluster.members` at most: this one, then the first others in hub id order. */
export const HUB_MEMBERS_LISTED = 64;

/**
 * The cluster's hubs for `GET /api/health` (the dashboard's list): the announced ones and this one (listed even before
 * its first announcement), each once, in hub id order, at most `max` (this one always kept). `remote`: the mirror's
 * worker count per other hub, or null while there is no mirror (degraded, not yet synced): their counts are then null.
 *
 *   hubMembers([{ hub: 'b', public_url: 'http://b:2' }], 'a', 3, new Map([['b', 5]]))
 *   // [{ hub: 'a', public_url: null, workers: 3 }, { hub: 'b', public_url: 'http://b:2', workers: 5 }]
 */
export function hubMembers(
  announced: ReadonlyArray<{ hub: string; public_url: string | null }>,
  self: { hub: string; public_url: string | null; workers: number },
  remote: ReadonlyMap<string, number> | null,
  max: number = HUB_MEMBERS_LISTED,
): HubMember[] {
  const byId = new Map<string, HubMember>();
  byId.set(self.hub, { hub: self.hub, public_url: self.public_url ? originOf(self.public_url) : null, workers: self.workers });
  for (const h of announced) {
    if (byId.has(h.hub)) continue;
    byId.set(h.hub, {
      hub: h.hub,
      public_url: h.public_url ? originOf(h.public_url) : null,
      workers: remote ? (remote.get(h.hub) ?? 0) : null,
    });
  }
  const all = [...byId.values()].sort((a, b) => (a.hub < b.hub ? -1 : a.hub > b.hub ? 1 : 0));
  if (all.length <= max) return all;
  const kept = new Set([
    self.hub,
    ...all
      .filter((m) => m.hub !== self.hub)
      .slice(0, Math.max(0, max - 1))
      .map((m) => m.hub),
  ]);
  return all.filter((m) => kept.has(m.hub));
}
