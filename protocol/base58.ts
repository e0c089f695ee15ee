/**
 * Base58 with the Bitcoin alphabet — the encoding Solana and Kvasir use for ed25519 public keys ("wallets").
 *
 * Leading zero bytes map to leading '1's and back, so the encoding is canonical: every string that decodes re-encodes
 * to itself. Decoding is quadratic in the length, so its input is capped at {@link BASE58_MAX_CHARS} characters.
 */

export const BASE58_ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz';

/** Longest text {@link decodeBase58} accepts (a 32-byte key is at most 44 characters, a 64-byte signature 88). */
export const BASE58_MAX_CHARS = 128;

const DIGIT = new Int8Array(128).fill(-1);
for (let i = 0; i < BASE58_ALPHABET.length; i++) DIGIT[BASE58_ALPHABET.charCodeAt(i)] = i;

export function encodeBase58(bytes: Uint8Array): string {
  let zeros = 0;
  while (zeros < bytes.length && bytes[zeros] === 0) zeros++;
  // log(256) / log(58) ≈ 1.366: an upper bound on the base-58 digits needed.
  const digits = new Uint8Array((((bytes.length - zeros) * 138) / 100 + 1) | 0);
  let len = 0;
  for (let i = zeros; i < bytes.length; i++) {
    let carry = bytes[i]!;
    let j = 0;
    for (; j < len || carry !== 0; j++) {
      carry += 256 * (digits[j] ?? 0);
      digits[j] = carry % 58;
      carry = (carry / 58) | 0;
    }
    len = j;
  }
  let out = '1'.repeat(zeros);
  for (let j = len - 1; j >= 0; j--) out += BASE58_ALPHABET[digits[j]!];
  return out;
}

/** Throws a RangeError on a character outside the alphabet or text longer than {@link BASE58_MAX_CHARS}. */
export function decodeBase58(text: string): Uint8Array {
  if (typeof text !== 'string') throw new RangeError('base58 input must be a string');
  if (text.length > BASE58_MAX_CHARS) throw new RangeError(`base58 input longer than ${BASE58_MAX_CHARS} characters`);
  let zeros = 0;
  while (zeros < text.length && text.charCodeAt(zeros) === 0x31 /* '1' */) zeros++;
  // log(58) / log(256) ≈ 0.733: an upper bound on the bytes needed.
  const bytes = new Uint8Array((((text.length - zeros) * 733) / 1000 + 1) | 0);
  let len = 0;
  for (let i = zeros; i < text.length; i++) {
    const code = text.charCodeAt(i);
    const digit = code < 128 ? DIGIT[code]! : -1;
    if (digit < 0) throw new RangeError(`invalid base58 character at position ${i}`);
    let carry = digit;
    let j = 0;
    for (; j < len || carry !== 0; j++) {
      carry += 58 * (bytes[j] ?? 0);
      bytes[j] = carry & 0xff;
      carry >>= 8;
    }
    len = j;
  }
  const out = new Uint8Array(zeros + len);
  for (let j = 0; j < len; j++) out[zeros + j] = bytes[len - 1 - j]!;
  return out;
}
