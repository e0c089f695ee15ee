/**
 * Node tokens: stateless, HMAC-SHA256 signed, with an expiry. The hub keeps no token table; a token is valid iff its
 * MAC checks out under the hub's persistent secret and its expiry has not passed.
 *
 * Format: `v1.<payload>.<mac>` where payload is base64url (no padding) of the UTF-8 JSON `{"w":<wallet>,"exp":<ms>}`
 * and mac is base64url (no padding, 43 characters) of HMAC-SHA256(secret, "v1.<payload>").
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { HubError } from '../errors.ts';

import { TOKEN_MAX_CHARS } from '../../protocol/limits.ts';

export { TOKEN_MAX_CHARS };
/** Shortest secret accepted, in bytes. */
export const TOKEN_SECRET_MIN_BYTES = 32;
export const DEFAULT_TOKEN_TTL_S = 86_400;

const TOKEN_SHAPE = /^v1\.([A-Za-z0-9_-]{1,900})\.([A-Za-z0-9_-]{43})$/;

export interface MintedToken {
  token: string;
  /** Seconds until expiry (= ttlS). */
  expiresIn: number;
}

export interface VerifiedToken {
  wallet: string;
  expMs: number;
}

function checkSecret(secret: Uint8Array): void {
  if (!(secret instanceof Uint8Array) || secret.length < TOKEN_SECRET_MIN_BYTES) {
    throw new RangeError(`token secret must be at least ${TOKEN_SECRET_MIN_BYTES} bytes`);
  }
}

function mac(secret: Uint8Array, signed: string): string {
  return createHmac('sha256', secret).update(signed, 'utf8').digest('base64url');
}

export function mintToken(secret: Uint8Array, wallet: string, nowMs: number, ttlS: number = DEFAULT_TOKEN_TTL_S): MintedToken {
  checkSecret(secret);
  if (!Number.isSafeInteger(ttlS) || ttlS < 1) throw new RangeError('token ttlS must be a positive integer');
  if (!Number.isFinite(nowMs)) throw new RangeError('nowMs must be finite');
  const payload = Buffer.from(JSON.stringify({ w: wallet, exp: Math.floor(nowMs) + ttlS * 1000 }), 'utf8').toString('base64url');
  const signed = `v1.${payload}`;
  const token = `${signed}.${mac(secret, signed)}`;
  if (token.length > TOKEN_MAX_CHARS) throw new RangeError('token would exceed TOKEN_MAX_CHARS (wallet too long)');
  return { token, expiresIn: ttlS };
}

/** Malformed or tampered (including minted under another secret) → AUTH_TOKEN_INVALID; past expiry → AUTH_TOKEN_EXPIRED. */
export function verifyToken(secret: Uint8Array, token: unknown, nowMs: number): VerifiedToken {
  checkSecret(secret);
  const invalid = (): HubError => new HubError('AUTH_TOKEN_INVALID', 'node token is invalid');
  if (typeof token !== 'string' || token.length > TOKEN_MAX_CHARS) throw invalid();
  const m = TOKEN_SHAPE.exec(token);
  if (m === null) throw invalid();
  const payload = m[1]!;
  const given = Buffer.from(m[2]!, 'ascii');
  const expected = Buffer.from(mac(secret, `v1.${payload}`), 'ascii');
  // Both are 43 ASCII characters (the regex fixes the given length), so timingSafeEqual's length rule always holds.
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) throw invalid();

  let claims: unknown;
  try {
    claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
  } catch {
    throw invalid();
  }
  if (typeof claims !== 'object' || claims === null) throw invalid();
  const { w, exp } = claims as { w?: unknown; exp?: unknown };
  if (typeof w !== 'string' || w.length === 0 || typeof exp !== 'number' || !Number.isSafeInteger(exp)) throw invalid();
  if (nowMs >= exp) throw new HubError('AUTH_TOKEN_EXPIRED', 'node token expired; log in again');
  return { wallet: w, expMs: exp };
}

/**
 * The token of an `Authorization: Bearer <token>` header. The scheme is matched case-insensitively (RFC 9110) and
 * spaces around the token are tolerated. Missing or blank → AUTH_REQUIRED; any other shape, or longer than
 * TOKEN_MAX_CHARS → AUTH_TOKEN_INVALID.
 */
export function bearerToken(header: string | undefined): string {
  if (header === undefined || header === null || (typeof header === 'string' && header.trim() === '')) {
    throw new HubError('AUTH_REQUIRED', 'this call needs Authorization: Bearer <node_token>');
  }
  if (typeof header !== 'string' || header.length > TOKEN_MAX_CHARS) {
    throw new HubError('AUTH_TOKEN_INVALID', 'Authorization header must be "Bearer <node_token>"');
  }
  const m = /^[ \t]*bearer[ \t]+([!-~]+)[ \t]*$/i.exec(header);
  if (m === null) throw new HubError('AUTH_TOKEN_INVALID', 'Authorization header must be "Bearer <node_token>"');
  return m[1]!;
}
