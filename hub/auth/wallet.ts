/**
 * Volunteer identities: a wallet is the base58 text of a 32-byte ed25519 public key, and a login proves possession of
 * the matching private key by signing the hub's challenge message.
 */
import { createPublicKey, verify, type KeyObject } from 'node:crypto';
import { HubError } from '../errors.ts';
import { decodeBase58 } from '../../protocol/base58.ts';

export const WALLET_BYTES = 32;
export const SIGNATURE_BYTES = 64;
/** The longest base58 text of 32 bytes (44); longer input is rejected before decoding. */
export const WALLET_MAX_CHARS = 44;

/** DER prefix of an ed25519 SubjectPublicKeyInfo; the 32 raw key bytes follow it. */
const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

/** Standard-alphabet base64 of exactly 64 bytes: 86 significant characters, then '==' (the padding may be omitted). */
const SIGNATURE_B64 = /^[A-Za-z0-9+/]{85}[AQgw](?:==)?$/;

/** The 32 key bytes of a wallet string; anything else throws AUTH_BAD_WALLET. */
export function parseWallet(text: unknown): Uint8Array {
  if (typeof text !== 'string' || text.length === 0 || text.length > WALLET_MAX_CHARS) {
    throw new HubError('AUTH_BAD_WALLET', 'wallet must be the base58 text of a 32-byte ed25519 public key');
  }
  let bytes: Uint8Array;
  try {
    bytes = decodeBase58(text);
  } catch {
    throw new HubError('AUTH_BAD_WALLET', 'wallet is not valid base58');
  }
  if (bytes.length !== WALLET_BYTES) {
    throw new HubError('AUTH_BAD_WALLET', `wallet must decode to ${WALLET_BYTES} bytes, got ${bytes.length}`);
  }
  return bytes;
}

/**
 * The 64 bytes of a base64 ed25519 signature. Strict: standard alphabet only, no whitespace, canonical trailing bits,
 * padding optional. Anything else throws AUTH_BAD_SIGNATURE.
 */
export function decodeSignature(signatureB64: unknown): Uint8Array {
  if (typeof signatureB64 !== 'string' || !SIGNATURE_B64.test(signatureB64)) {
    throw new HubError('AUTH_BAD_SIGNATURE', `signature must be the base64 of ${SIGNATURE_BYTES} bytes`);
  }
  const sig = Buffer.from(signatureB64, 'base64');
  if (sig.length !== SIGNATURE_BYTES) {
    throw new HubError('AUTH_BAD_SIGNATURE', `signature must be the base64 of ${SIGNATURE_BYTES} bytes`);
  }
  return sig;
}

/** A node:crypto public key from 32 raw ed25519 key bytes. */
export function ed25519PublicKey(wallet: Uint8Array): KeyObject {
  if (wallet.length !== WALLET_BYTES) throw new HubError('AUTH_BAD_WALLET', `wallet must be ${WALLET_BYTES} bytes`);
  return createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, wallet]), format: 'der', type: 'spki' });
}

/**
 * Whether `signatureB64` is a valid ed25519 signature by `wallet` over the UTF-8 bytes of `message`.
 * A malformed signature (not base64 of 64 bytes) throws AUTH_BAD_SIGNATURE; a well-formed one that does not verify,
 * or a key OpenSSL refuses, returns false.
 */
export function verifySignature(wallet: Uint8Array, message: string, signatureB64: unknown): boolean {
  const sig = decodeSignature(signatureB64);
  try {
    return verify(null, Buffer.from(message, 'utf8'), ed25519PublicKey(wallet), sig);
  } catch {
    return false;
  }
}
