/**
 * Short-lived TURN credentials for volunteers' peer connections (issue 29, docs/peers.md), by the TURN REST API
 * convention that coturn implements (`use-auth-secret` + `static-auth-secret`): the hub and the TURN server share a
 * secret; for each volunteer connection the hub mints
 *
 *   username   = `${expiry}:${id}`               expiry: UNIX seconds, now + ttl; id: the volunteer's worker id
 *   credential = base64(HMAC-SHA1(secret, username))
 *
 * and the TURN server recomputes the HMAC and refuses a username whose expiry has passed. Nothing is stored and the
 * secret never leaves the hub; a credential is good for any TURN server sharing the secret until it expires.
 *
 *   const turn = checkedTurnConfig({ urls: ['turn:turn.example.org:3478'], secret, ttlS: 6 * 3600 });
 *   welcome.peer.iceServers = iceServersFor(turn, workerId, Date.now());
 */
import { createHmac } from 'node:crypto';
import { ICE_URL, type IceServer } from '../protocol/channel/ice-servers.ts';
import { VOLUNTEER_LIMITS } from '../protocol/channel/limits.ts';

export interface TurnConfig {
  /** `turn:` / `turns:` (and `stun:`) URLs of the servers that share the secret, as volunteers will dial them. */
  urls: string[];
  /** The shared secret (coturn's static-auth-secret). */
  secret: string;
  /** How long a minted credential lasts, seconds. */
  ttlS: number;
}

/**
 * A credential lasts this long by default: a volunteer's peer connections open when it is assigned a slice, which may
 * be hours into its connection; one that outlives its credential cannot allocate a relay and takes the slice from the
 * hub, and its next connection gets a fresh one.
 */
export const DEFAULT_TURN_TTL_S = 6 * 3600;
export const TURN_TTL_MIN_S = 60;
export const TURN_TTL_MAX_S = 7 * 24 * 3600;
export const TURN_SECRET_MIN_CHARS = 16;
const TURN_SECRET_MAX_CHARS = 256;

export interface TurnCredential {
  username: string;
  credential: string;
}

/** The TURN REST API credential of `id` valid until `nowMs` + `ttlS` (rounded down to the second). */
export function turnCredential(secret: string, id: string, nowMs: number, ttlS: number): TurnCredential {
  const username = `${Math.floor(nowMs / 1000) + ttlS}:${id}`;
  return { username, credential: createHmac('sha1', secret).update(username, 'utf8').digest('base64') };
}

/** The ICE servers of one volunteer connection's welcome: the configured URLs with a credential of its own. */
export function iceServersFor(turn: TurnConfig, id: string, nowMs: number): IceServer[] {
  const stun = turn.urls.filter((u) => u.startsWith('stun'));
  const relays = turn.urls.filter((u) => u.startsWith('turn'));
  return [
    ...(relays.length > 0 ? [{ urls: relays, ...turnCredential(turn.secret, id, nowMs, turn.ttlS) }] : []),
    ...(stun.length > 0 ? [{ urls: stun }] : []),
  ];
}

/** Checks a TURN configuration (CLI flags or the --config file); throws a sentence saying what to fix. */
export function checkedTurnConfig(t: Partial<TurnConfig>): TurnConfig {
  const urls = t.urls ?? [];
  if (!Array.isArray(urls) || urls.length === 0) throw new Error('TURN: give at least one --turn-url (turn:HOST[:PORT])');
  const per = VOLUNTEER_LIMITS.maxIceUrls;
  for (const u of urls) {
    if (typeof u !== 'string' || u.length > VOLUNTEER_LIMITS.maxIceUrlChars || !ICE_URL.test(u))
      throw new Error(`TURN: "${String(u).slice(0, 80)}" is not a turn:/turns:/stun: URL (turn:HOST[:PORT][?transport=udp|tcp])`);
  }
  if (urls.filter((u) => u.startsWith('turn')).length > per || urls.filter((u) => u.startsWith('stun')).length > per)
    throw new Error(`TURN: at most ${per} turn: and ${per} stun: URLs`);
  if (!urls.some((u) => u.startsWith('turn'))) throw new Error('TURN: the URLs name no turn: server (the secret is for TURN)');
  const secret = t.secret;
  if (
    typeof secret !== 'string' ||
    secret.length < TURN_SECRET_MIN_CHARS ||
    secret.length > TURN_SECRET_MAX_CHARS ||
    !/^[\x21-\x7e]+$/.test(secret)
  )
    throw new Error(
      `TURN: the shared secret (--turn-secret, env EXPERTSWARM_TURN_SECRET) must be ${TURN_SECRET_MIN_CHARS}–${TURN_SECRET_MAX_CHARS} printable ASCII characters, no spaces; ` +
        'generate one with `openssl rand -hex 24` and give coturn the same (static-auth-secret)',
    );
  const ttlS = t.ttlS ?? DEFAULT_TURN_TTL_S;
  if (!Number.isInteger(ttlS) || ttlS < TURN_TTL_MIN_S || ttlS > TURN_TTL_MAX_S)
    throw new Error(`TURN: --turn-ttl must be whole seconds in [${TURN_TTL_MIN_S}, ${TURN_TTL_MAX_S}], got ${ttlS}`);
  return { urls: [...urls], secret, ttlS };
}
