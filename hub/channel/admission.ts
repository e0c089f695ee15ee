/**
 * Which browser pages may open the volunteer channel: the Origin policy the channel applies to an upgrade before any
 * WebSocket exists (pure; table-tested in test/unit/channel-admission.test.ts).
 *
 *   const allowed = new Set(['https://swarm.example.org'].map(normalOrigin)); // --allow-origin, checked at startup
 *   checkOrigin(req.headers.origin, req.headers.host, allowed);                // { ok: true, why } | { ok: false, reason }
 *
 * A browser always sends `Origin` on a WebSocket upgrade, and a page cannot forge it; any other client (the headless
 * volunteer, `ws`, curl) sends what it likes, usually none. So the check is about drive-by pages — another site's
 * script making its visitors' browsers dial the hub (and lend their GPUs to someone's token without a click in the
 * hub's own frame, docs/widget.md) — not about identity, which is the node token's. Without an Origin the client is
 * not a browser and is let through to the same checks as everyone (token, caps).
 *
 * The hub's own origin is the one the request names in `Host`: a page the hub served (the volunteer page, the
 * widget's `/embed` frame) has exactly that origin. The scheme is not compared: behind a TLS proxy the hub sees plain
 * HTTP while pages are `https:`. A proxy that rewrites `Host` needs the public origin listed with `--allow-origin`.
 */

export type OriginVerdict = { ok: true; why: 'no-origin' | 'same-origin' | 'listed' } | { ok: false; reason: string };

/** Only what a browser may send as a WebSocket's origin: `http(s)://host[:port]`. */
function parsed(origin: string): URL | null {
  let u: URL;
  try {
    u = new URL(origin);
  } catch {
    return null;
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return null;
  if (u.username || u.password || u.search || u.hash || (u.pathname !== '/' && u.pathname !== '')) return null;
  return u;
}

/** The serialised origin of `--allow-origin` (lower-case, default port dropped); throws an Error a person can act on. */
export function normalOrigin(origin: string): string {
  const u = parsed(origin.trim());
  if (!u) throw new Error(`an allowed origin is http(s)://host[:port] with nothing after it, got "${origin}"`);
  return u.origin;
}

/** `Host` names the origin's host and port (a default port may be written out or not). */
function sameHost(u: URL, host: string): boolean {
  const h = host.trim().toLowerCase();
  return h === u.host || h === `${u.hostname}:${u.port || (u.protocol === 'https:' ? '443' : '80')}`;
}

/** Whether an upgrade with this `Origin` and `Host` may open the channel; `allowed` holds normalOrigin values. */
export function checkOrigin(origin: string | undefined, host: string | undefined, allowed: ReadonlySet<string>): OriginVerdict {
  if (origin === undefined) return { ok: true, why: 'no-origin' };
  if (origin === 'null')
    return { ok: false, reason: 'an opaque origin ("null": a sandboxed frame, a file or data page) may not open the channel' };
  const u = parsed(origin);
  if (!u) return { ok: false, reason: 'the Origin header is not an http(s) origin' };
  if (host !== undefined && sameHost(u, host)) return { ok: true, why: 'same-origin' };
  if (allowed.has(u.origin)) return { ok: true, why: 'listed' };
  return {
    ok: false,
    reason: `pages of ${u.origin} may not open this hub's volunteer channel (it allows its own origin and --allow-origin)`,
  };
}
