/**
 * Login challenges: single-use nonces with a TTL, held in memory with hard bounds.
 *
 * Bounds: expired entries are pruned lazily (from the oldest end, on every issue); when more than `maxOutstanding`
 * remain, the oldest are dropped — issuing is never refused here, floods are the per-IP rate limiter's job — and a
 * wallet holding `maxPerWallet` live challenges loses its oldest when it asks for another.
 */
import { randomBytes } from 'node:crypto';
import { HubError } from '../errors.ts';
import { LinkedMap } from './linked-map.ts';

export interface ChallengeStoreOptions {
  /** How long a challenge may be answered, in ms. */
  ttlMs?: number;
  /** Most challenges held at once, over all wallets. */
  maxOutstanding?: number;
  /** Most live challenges one wallet may hold. */
  maxPerWallet?: number;
}

export interface Challenge {
  nonce: string;
  message: string;
}

interface Entry {
  wallet: string;
  issuedMs: number;
  message: string;
}

/**
 * The text a volunteer signs. Deterministic given its inputs: four lines joined by '\n', no trailing newline —
 *
 *   Expertswarm node login
 *   wallet: <wallet>
 *   nonce: <nonce>
 *   issued: <new Date(issuedMs).toISOString()>
 */
export function challengeMessage(wallet: string, nonce: string, issuedMs: number): string {
  return `Expertswarm node login\nwallet: ${wallet}\nnonce: ${nonce}\nissued: ${new Date(issuedMs).toISOString()}`;
}

/** Nonces are 32 CSPRNG bytes in lowercase hex, cut from a refilled pool (one randomBytes call per 256 nonces). */
const NONCE_BYTES = 32;
let pool = Buffer.alloc(0);
let poolAt = 0;
function newNonce(): string {
  if (poolAt + NONCE_BYTES > pool.length) {
    pool = randomBytes(NONCE_BYTES * 256);
    poolAt = 0;
  }
  const hex = pool.toString('hex', poolAt, poolAt + NONCE_BYTES);
  pool.fill(0, poolAt, poolAt + NONCE_BYTES);
  poolAt += NONCE_BYTES;
  return hex;
}

export class ChallengeStore {
  readonly ttlMs: number;
  readonly maxOutstanding: number;
  readonly maxPerWallet: number;
  /** nonce → entry, in issue order, so the oldest is first. */
  private readonly byNonce = new LinkedMap<Entry>();
  /** wallet → its live nonces, oldest first (at most maxPerWallet). */
  private readonly byWallet = new Map<string, string[]>();

  constructor({ ttlMs = 300_000, maxOutstanding = 50_000, maxPerWallet = 8 }: ChallengeStoreOptions = {}) {
    for (const [name, v] of [
      ['ttlMs', ttlMs],
      ['maxOutstanding', maxOutstanding],
      ['maxPerWallet', maxPerWallet],
    ] as const) {
      if (!Number.isSafeInteger(v) || v < 1) throw new RangeError(`ChallengeStore ${name} must be a positive integer`);
    }
    this.ttlMs = ttlMs;
    this.maxOutstanding = maxOutstanding;
    this.maxPerWallet = maxPerWallet;
  }

  /** Challenges held now (live or not yet pruned); never more than maxOutstanding. */
  get size(): number {
    return this.byNonce.size;
  }

  /** A fresh challenge for `wallet` (the caller has validated it). */
  issue(wallet: string, nowMs: number): Challenge {
    this.prune(nowMs);
    const nonce = newNonce();
    const message = challengeMessage(wallet, nonce, nowMs);

    let mine = this.byWallet.get(wallet);
    if (mine === undefined) {
      mine = [];
      this.byWallet.set(wallet, mine);
    }
    while (mine.length >= this.maxPerWallet) this.byNonce.delete(mine.shift()!);
    mine.push(nonce);
    this.byNonce.set(nonce, { wallet, issuedMs: nowMs, message });

    while (this.byNonce.size > this.maxOutstanding) this.dropOldest();
    return { nonce, message };
  }

  /**
   * The message issued with `nonce` to `wallet`, removing it so it can never be used again.
   * Unknown, already used, or issued to another wallet → AUTH_NONCE_UNKNOWN (another wallet's nonce is left intact);
   * past its TTL → AUTH_NONCE_EXPIRED (and removed).
   */
  consume(wallet: string, nonce: string, nowMs: number): string {
    const entry = this.byNonce.get(nonce);
    if (entry === undefined || entry.wallet !== wallet) {
      throw new HubError('AUTH_NONCE_UNKNOWN', 'unknown or already used nonce; request a new challenge');
    }
    this.remove(nonce, entry);
    if (this.expired(entry, nowMs)) {
      throw new HubError('AUTH_NONCE_EXPIRED', 'challenge expired; request a new challenge');
    }
    return entry.message;
  }

  /** Drops expired entries from the oldest end. With a clock that steps backwards a few may linger until capped. */
  prune(nowMs: number): void {
    for (let o = this.byNonce.oldest(); o !== undefined && this.expired(o.value, nowMs); o = this.byNonce.oldest()) {
      this.remove(o.key, o.value);
    }
  }

  private expired(entry: Entry, nowMs: number): boolean {
    return nowMs - entry.issuedMs >= this.ttlMs;
  }

  private dropOldest(): void {
    const o = this.byNonce.oldest();
    if (o !== undefined) this.remove(o.key, o.value);
  }

  private remove(nonce: string, entry: Entry): void {
    this.byNonce.delete(nonce);
    const mine = this.byWallet.get(entry.wallet);
    if (mine === undefined) return;
    const i = mine.indexOf(nonce);
    if (i >= 0) mine.splice(i, 1);
    if (mine.length === 0) this.byWallet.delete(entry.wallet);
  }
}
