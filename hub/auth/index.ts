/**
 * Volunteer ("node") authentication, compatible with Kvasir's expert market:
 *
 *   POST /api/auth/challenge  {wallet}                    → {nonce, message}
 *   POST /api/auth/node-token {wallet, nonce, signature}  → {node_token, wallet, expires_in}
 *   market calls: Authorization: Bearer <node_token>
 *
 * {@link NodeAuth} is the pure logic behind those routes (no HTTP, injected clock); the route code parses JSON, passes
 * the body and client IP in, and turns a thrown HubError into its reply.
 */
import { HubError } from '../errors.ts';
import { AUTH_RATE_LIMIT } from '../limits.ts';
import { object } from '../validate.ts';
import { ChallengeStore, type ChallengeStoreOptions } from './challenges.ts';
import { RateLimiter } from './rate-limit.ts';
import { DEFAULT_TOKEN_TTL_S, bearerToken, mintToken, verifyToken } from './tokens.ts';
import { decodeSignature, parseWallet, verifySignature } from './wallet.ts';

export { BASE58_ALPHABET, BASE58_MAX_CHARS, decodeBase58, encodeBase58 } from '../../protocol/base58.ts';
export {
  SIGNATURE_BYTES,
  WALLET_BYTES,
  WALLET_MAX_CHARS,
  decodeSignature,
  ed25519PublicKey,
  parseWallet,
  verifySignature,
} from './wallet.ts';
export { ChallengeStore, challengeMessage } from './challenges.ts';
export type { Challenge, ChallengeStoreOptions } from './challenges.ts';
export {
  DEFAULT_TOKEN_TTL_S,
  TOKEN_MAX_CHARS,
  TOKEN_SECRET_MIN_BYTES,
  bearerToken,
  mintToken,
  verifyToken,
} from './tokens.ts';
export type { MintedToken, VerifiedToken } from './tokens.ts';
export { RateLimiter } from './rate-limit.ts';
export type { RateLimiterOptions } from './rate-limit.ts';

/** Field-length caps applied before any parsing (longer → BODY_INVALID). */
export const BODY_CAPS = {
  /** Longer than any base58 32-byte key, so a too-long-but-plausible wallet still gets AUTH_BAD_WALLET. */
  wallet: 64,
  nonce: 128,
  /** base64 of 64 bytes is 88 characters. */
  signature: 256,
} as const;

export interface NodeAuthOptions {
  /** HMAC key for node tokens (≥ 32 bytes), persisted by the caller across restarts. */
  secret: Uint8Array;
  /** Node-token lifetime in seconds (default 86 400). */
  tokenTtlS?: number;
  /** Options for the challenge store (nonce TTL, caps). */
  challenges?: ChallengeStoreOptions;
  /**
   * Per-IP token bucket shared by both minting calls (a login costs 2 tokens). Default: AUTH_RATE_LIMIT (burst 30,
   * 0.5/s refill) and the RateLimiter's 100 000 IPs tracked.
   */
  rateLimit?: { capacity?: number; refillPerSec?: number; maxKeys?: number };
}

export interface ChallengeReply {
  nonce: string;
  message: string;
}

export interface NodeTokenReply {
  node_token: string;
  wallet: string;
  expires_in: number;
}

function field(body: Record<string, unknown>, name: keyof typeof BODY_CAPS): string {
  const v = body[name];
  if (typeof v !== 'string' || v.length === 0) throw new HubError('BODY_INVALID', `${name} must be a non-empty string`);
  const cap = BODY_CAPS[name];
  if (v.length > cap) throw new HubError('BODY_INVALID', `${name} must be at most ${cap} characters`);
  return v;
}

export class NodeAuth {
  readonly challenges: ChallengeStore;
  readonly limiter: RateLimiter;
  readonly tokenTtlS: number;
  private readonly secret: Uint8Array;

  constructor({ secret, tokenTtlS = DEFAULT_TOKEN_TTL_S, challenges, rateLimit }: NodeAuthOptions) {
    this.secret = secret;
    this.tokenTtlS = tokenTtlS;
    mintToken(secret, 'x', 0, tokenTtlS); // fail fast on a short secret or a bad TTL
    this.challenges = new ChallengeStore(challenges);
    this.limiter = new RateLimiter({
      capacity: rateLimit?.capacity ?? AUTH_RATE_LIMIT.capacity,
      refillPerSec: rateLimit?.refillPerSec ?? AUTH_RATE_LIMIT.refillPerSec,
      ...(rateLimit?.maxKeys !== undefined ? { maxKeys: rateLimit.maxKeys } : {}),
    });
  }

  /** POST /api/auth/challenge. Throws RATE_LIMITED, BODY_INVALID, AUTH_BAD_WALLET. */
  challenge(body: unknown, ip: string, nowMs: number): ChallengeReply {
    this.limit(ip, nowMs);
    const wallet = field(object(body), 'wallet');
    parseWallet(wallet);
    return this.challenges.issue(wallet, nowMs);
  }

  /**
   * POST /api/auth/node-token. Checks in this order: rate limit, body shape, wallet, signature encoding, nonce (consumed
   * here — a nonce is burnt by any attempt that names it with its own wallet, even if the signature then fails),
   * signature. Throws RATE_LIMITED, BODY_INVALID, AUTH_BAD_WALLET, AUTH_BAD_SIGNATURE, AUTH_NONCE_UNKNOWN,
   * AUTH_NONCE_EXPIRED.
   */
  nodeToken(body: unknown, ip: string, nowMs: number): NodeTokenReply {
    this.limit(ip, nowMs);
    const b = object(body);
    const wallet = field(b, 'wallet');
    const nonce = field(b, 'nonce');
    const signature = field(b, 'signature');
    const key = parseWallet(wallet);
    decodeSignature(signature);
    const message = this.challenges.consume(wallet, nonce, nowMs);
    if (!verifySignature(key, message, signature)) {
      throw new HubError('AUTH_BAD_SIGNATURE', 'signature does not verify for this wallet and challenge');
    }
    const { token, expiresIn } = mintToken(this.secret, wallet, nowMs, this.tokenTtlS);
    return { node_token: token, wallet, expires_in: expiresIn };
  }

  /** The wallet of a market call's `Authorization` header. Throws AUTH_REQUIRED, AUTH_TOKEN_INVALID, AUTH_TOKEN_EXPIRED. */
  authenticate(authorizationHeader: string | undefined, nowMs: number): string {
    return verifyToken(this.secret, bearerToken(authorizationHeader), nowMs).wallet;
  }

  private limit(ip: string, nowMs: number): void {
    if (this.limiter.take(ip, nowMs)) return;
    const retryS = Math.max(1, Math.ceil(this.limiter.waitMs(ip, nowMs) / 1000));
    throw new HubError('RATE_LIMITED', `too many login requests; retry in ${retryS} s`, { 'Retry-After': String(retryS) });
  }
}
