/**
 * ICE servers in welcome (docs/peers.md, issue 29): `welcome.peer.ice_servers`, the STUN/TURN servers a volunteer's
 * peer connections use (RTCIceServer's shape: `urls`, and for TURN the short-lived `username` and `credential` the
 * hub minted, hub/turn-credentials.ts). Optional: a hub without TURN sends none, and older clients ignore the field.
 * Internal to protocol/channel/; messages.ts parses and writes it inside `peer`.
 *
 *   { "urls": ["turn:198.51.100.7:3478"], "username": "1767000000:page-ab12", "credential": "base64…" }
 */
import { badFrame, tooLarge } from './close-codes.ts';
import { Fields, type Obj } from './json-fields.ts';
import { VOLUNTEER_LIMITS as L } from './limits.ts';

export interface IceServer {
  /** `stun:` / `turn:` / `turns:` URLs (RFC 7064/7065): host, optional port, optional `?transport=udp|tcp`. */
  urls: string[];
  /** TURN only: `EXPIRY:ID` and base64(HMAC-SHA1(secret, username)), the TURN REST API's credential. */
  username?: string;
  credential?: string;
}

/** A STUN or TURN URL: scheme, a host name or IPv4 or [IPv6], an optional port, an optional transport. */
export const ICE_URL =
  /^(?:stun|stuns|turn|turns):(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::(\d{1,5}))?(?:\?transport=(?:udp|tcp))?$/;
const ICE_USERNAME = /^[\x21-\x7e]+$/;
const ICE_CREDENTIAL = /^[A-Za-z0-9+/=._~-]+$/;

function parseOne(f: Fields): IceServer {
  const urls = f.list('urls', L.maxIceUrls).map((u, i) => {
    const at = `${f.name('urls')}[${i}]`;
    if (typeof u !== 'string') throw badFrame(`${at} must be a string`);
    if (u.length > L.maxIceUrlChars) throw tooLarge(`${at} has ${u.length} characters, the cap is ${L.maxIceUrlChars}`);
    const m = ICE_URL.exec(u);
    if (!m) throw badFrame(`${at} is not a stun:/turn: URL`);
    if (m[1] !== undefined && !(Number(m[1]) >= 1 && Number(m[1]) <= 65535)) throw badFrame(`${at}: port ${m[1]} is out of range`);
    return u;
  });
  if (urls.length === 0) throw badFrame(`${f.name('urls')} must name at least one URL`);
  const turn = urls.some((u) => u.startsWith('turn'));
  if (turn !== (f.has('username') && f.has('credential')))
    throw badFrame(`${f.name('urls')}: a TURN server needs username and credential, a STUN server has neither`);
  if (!turn) return { urls };
  return {
    urls,
    username: f.str('username', L.maxIceCredentialChars, { min: 1, pattern: ICE_USERNAME }),
    credential: f.str('credential', L.maxIceCredentialChars, { min: 1, pattern: ICE_CREDENTIAL }),
  };
}

/** `peer.ice_servers` as received; throws VolunteerWireError (BAD_FRAME, TOO_LARGE). */
export function parseIceServers(peer: Fields): IceServer[] {
  return peer.list('ice_servers', L.maxIceServers).map((x, i) => parseOne(Fields.of(x, `${peer.name('ice_servers')}[${i}]`)));
}

export function wireIceServers(servers: readonly IceServer[]): Obj[] {
  return servers.map((s) => ({
    urls: [...s.urls],
    ...(s.username !== undefined ? { username: s.username } : {}),
    ...(s.credential !== undefined ? { credential: s.credential } : {}),
  }));
}
