/**
 * Volunteer authentication: base58 wallets, ed25519 challenge signatures, single-use nonces, HMAC node tokens,
 * per-IP rate limiting and body validation — every rejection asserted by its exact error code.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, generateKeyPairSync, randomBytes, sign, type KeyObject } from 'node:crypto';
import { isHubError, type ErrorCode } from '../../hub/errors.ts';
import {
  ChallengeStore,
  NodeAuth,
  RateLimiter,
  bearerToken,
  challengeMessage,
  decodeBase58,
  encodeBase58,
  mintToken,
  parseWallet,
  verifySignature,
  verifyToken,
} from '../../hub/auth/index.ts';
import { LinkedMap } from '../../hub/auth/linked-map.ts';

const T0 = Date.UTC(2025, 0, 1);
const SECRET = new Uint8Array(32).fill(7);

function throwsCode(fn: () => unknown, code: ErrorCode): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(isHubError(e), `expected HubError ${code}, got ${String(e)}`);
    assert.equal(e.code, code);
    return true;
  });
}

interface Volunteer {
  wallet: string;
  raw: Uint8Array;
  privateKey: KeyObject;
  sign(message: string): string;
}

function volunteer(): Volunteer {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const jwk = publicKey.export({ format: 'jwk' });
  const raw = new Uint8Array(Buffer.from(jwk.x!, 'base64url'));
  assert.equal(raw.length, 32);
  // The JWK x and the tail of the SPKI DER are the same 32 bytes.
  const der = publicKey.export({ format: 'der', type: 'spki' });
  assert.deepEqual(new Uint8Array(der.subarray(der.length - 32)), raw);
  return {
    wallet: encodeBase58(raw),
    raw,
    privateKey,
    sign: (message) => sign(null, Buffer.from(message, 'utf8'), privateKey).toString('base64'),
  };
}

function auth(over: Partial<ConstructorParameters<typeof NodeAuth>[0]> = {}): NodeAuth {
  return new NodeAuth({ secret: SECRET, rateLimit: { capacity: 1_000_000, refillPerSec: 1 }, ...over });
}

function login(a: NodeAuth, v: Volunteer, nowMs = T0, ip = '10.0.0.1') {
  const { nonce, message } = a.challenge({ wallet: v.wallet }, ip, nowMs);
  return a.nodeToken({ wallet: v.wallet, nonce, signature: v.sign(message) }, ip, nowMs);
}

describe('base58', () => {
  // Bitcoin Core's base58_encode_decode.json vectors, plus Solana's all-zero system program id.
  const vectors: [string, string][] = [
    ['', ''],
    ['61', '2g'],
    ['626262', 'a3gV'],
    ['636363', 'aPEr'],
    ['73696d706c792061206c6f6e6720737472696e67', '2cFupjhnEsSn59qHXstmK2ffpLv2'],
    ['00eb15231dfceb60925886b67d065299925915aeb172c06647', '1NS17iag9jJgTHD1VXjvLCEnZuQ3rJDE9L'],
    ['516b6fcd0f', 'ABnLTmg'],
    ['bf4f89001e670274dd', '3SEo3LWLoPntC'],
    ['572e4794', '3EFU7m'],
    ['ecac89cad93923c02321', 'EJDM8drfXA6uyA'],
    ['10c8511e', 'Rt5zm'],
    ['00000000000000000000', '1111111111'],
    ['00'.repeat(32), '1'.repeat(32)],
  ];
  it('encodes and decodes known vectors', () => {
    for (const [hex, text] of vectors) {
      assert.equal(encodeBase58(Buffer.from(hex, 'hex')), text, hex);
      assert.equal(Buffer.from(decodeBase58(text)).toString('hex'), hex, text);
    }
  });
  it('round-trips random bytes, leading zeros included', () => {
    for (let i = 0; i < 500; i++) {
      const bytes = new Uint8Array(randomBytes(i % 70));
      if (i % 3 === 0) bytes.fill(0, 0, Math.min(bytes.length, i % 5));
      const text = encodeBase58(bytes);
      assert.deepEqual(decodeBase58(text), bytes);
      assert.equal(encodeBase58(decodeBase58(text)), text);
    }
  });
  it('rejects characters outside the alphabet and overlong input', () => {
    for (const bad of ['0', 'O', 'I', 'l', '+', ' abc', 'abc ', 'é', '2g\n']) assert.throws(() => decodeBase58(bad), RangeError, bad);
    assert.equal(decodeBase58('2'.repeat(128)).length > 0, true);
    assert.throws(() => decodeBase58('2'.repeat(129)), RangeError);
  });
});

describe('wallets and signatures', () => {
  it('parses a 32-byte base58 key and nothing else', () => {
    const v = volunteer();
    assert.deepEqual(parseWallet(v.wallet), v.raw);
    assert.deepEqual(parseWallet('1'.repeat(32)), new Uint8Array(32));
    for (const bad of [
      undefined,
      null,
      42,
      {},
      [],
      '',
      '1'.repeat(31),
      '1'.repeat(33),
      encodeBase58(new Uint8Array(33).fill(9)),
      v.wallet.slice(0, -5),
      `${v.wallet.slice(0, -1)}0`,
      `${v.wallet}2`,
      'z'.repeat(45),
      'z'.repeat(44),
    ]) {
      throwsCode(() => parseWallet(bad), 'AUTH_BAD_WALLET');
    }
  });
  it('verifies real ed25519 signatures and rejects malformed ones', () => {
    const v = volunteer();
    const other = volunteer();
    const msg = 'hello ünïcode';
    const sig = v.sign(msg);
    assert.equal(verifySignature(v.raw, msg, sig), true);
    assert.equal(verifySignature(v.raw, msg, sig.replace(/=+$/, '')), true, 'padding optional');
    assert.equal(verifySignature(v.raw, `${msg}!`, sig), false);
    assert.equal(verifySignature(other.raw, msg, sig), false);
    assert.equal(verifySignature(v.raw, msg, other.sign(msg)), false);
    const flipped = Buffer.from(sig, 'base64');
    flipped[10]! ^= 1;
    assert.equal(verifySignature(v.raw, msg, flipped.toString('base64')), false);
    for (const bad of [
      undefined,
      5,
      '',
      sig.slice(4),
      `${sig}AAAA`,
      ` ${sig}`,
      `${sig}\n`,
      `-${sig.slice(1)}`,
      `_${sig.slice(1)}`, // base64url-only characters (a random signature's base64url form may equal its base64)
      Buffer.alloc(63).toString('base64'),
      Buffer.alloc(65).toString('base64'),
      `${sig.slice(0, 85)}B==`,
    ]) {
      throwsCode(() => verifySignature(v.raw, msg, bad), 'AUTH_BAD_SIGNATURE');
    }
  });
});

describe('login flow', () => {
  it('challenge → signature → token → authenticate', () => {
    const a = auth();
    const v = volunteer();
    const { nonce, message } = a.challenge({ wallet: v.wallet }, '10.0.0.1', T0);
    assert.match(nonce, /^[0-9a-f]{64}$/);
    assert.equal(message, challengeMessage(v.wallet, nonce, T0));
    assert.equal(message, `Expertswarm node login\nwallet: ${v.wallet}\nnonce: ${nonce}\nissued: 2025-01-01T00:00:00.000Z`);
    const reply = a.nodeToken({ wallet: v.wallet, nonce, signature: v.sign(message) }, '10.0.0.1', T0 + 1000);
    assert.deepEqual(Object.keys(reply).sort(), ['expires_in', 'node_token', 'wallet']);
    assert.equal(reply.wallet, v.wallet);
    assert.equal(reply.expires_in, 86_400);
    assert.equal(a.authenticate(`Bearer ${reply.node_token}`, T0 + 2000), v.wallet);
    assert.equal(verifyToken(SECRET, reply.node_token, T0).expMs, T0 + 1000 + 86_400_000);
    assert.equal(a.challenges.size, 0);
  });
  it('a nonce is single use', () => {
    const a = auth();
    const v = volunteer();
    const { nonce, message } = a.challenge({ wallet: v.wallet }, 'ip', T0);
    const body = { wallet: v.wallet, nonce, signature: v.sign(message) };
    a.nodeToken(body, 'ip', T0);
    throwsCode(() => a.nodeToken(body, 'ip', T0), 'AUTH_NONCE_UNKNOWN');
  });
  it('wrong signature, and a signature by another key, are refused and burn the nonce', () => {
    const a = auth();
    const v = volunteer();
    const other = volunteer();
    const c1 = a.challenge({ wallet: v.wallet }, 'ip', T0);
    throwsCode(
      () => a.nodeToken({ wallet: v.wallet, nonce: c1.nonce, signature: v.sign(`${c1.message}x`) }, 'ip', T0),
      'AUTH_BAD_SIGNATURE',
    );
    throwsCode(() => a.nodeToken({ wallet: v.wallet, nonce: c1.nonce, signature: v.sign(c1.message) }, 'ip', T0), 'AUTH_NONCE_UNKNOWN');
    const c2 = a.challenge({ wallet: v.wallet }, 'ip', T0);
    throwsCode(() => a.nodeToken({ wallet: v.wallet, nonce: c2.nonce, signature: other.sign(c2.message) }, 'ip', T0), 'AUTH_BAD_SIGNATURE');
    const c3 = a.challenge({ wallet: v.wallet }, 'ip', T0);
    throwsCode(
      () => a.nodeToken({ wallet: other.wallet, nonce: c3.nonce, signature: other.sign(c3.message) }, 'ip', T0),
      'AUTH_NONCE_UNKNOWN',
    );
  });
  it("another wallet's nonce is unknown and stays usable by its owner", () => {
    const a = auth();
    const v = volunteer();
    const other = volunteer();
    const c = a.challenge({ wallet: v.wallet }, 'ip', T0);
    throwsCode(
      () => a.nodeToken({ wallet: other.wallet, nonce: c.nonce, signature: other.sign(c.message) }, 'ip', T0),
      'AUTH_NONCE_UNKNOWN',
    );
    assert.equal(a.nodeToken({ wallet: v.wallet, nonce: c.nonce, signature: v.sign(c.message) }, 'ip', T0).wallet, v.wallet);
  });
  it('an expired nonce is refused, then unknown', () => {
    const a = auth({ challenges: { ttlMs: 60_000 } });
    const v = volunteer();
    const c = a.challenge({ wallet: v.wallet }, 'ip', T0);
    const body = { wallet: v.wallet, nonce: c.nonce, signature: v.sign(c.message) };
    throwsCode(() => a.nodeToken(body, 'ip', T0 + 60_000), 'AUTH_NONCE_EXPIRED');
    throwsCode(() => a.nodeToken(body, 'ip', T0 + 60_000), 'AUTH_NONCE_UNKNOWN');
    const c2 = a.challenge({ wallet: v.wallet }, 'ip', T0);
    assert.equal(a.nodeToken({ wallet: v.wallet, nonce: c2.nonce, signature: v.sign(c2.message) }, 'ip', T0 + 59_999).wallet, v.wallet);
  });
  it('tokens expire', () => {
    const a = auth({ tokenTtlS: 60 });
    const v = volunteer();
    const { node_token, expires_in } = login(a, v, T0);
    assert.equal(expires_in, 60);
    assert.equal(a.authenticate(`Bearer ${node_token}`, T0 + 59_999), v.wallet);
    throwsCode(() => a.authenticate(`Bearer ${node_token}`, T0 + 60_000), 'AUTH_TOKEN_EXPIRED');
    throwsCode(() => verifyToken(SECRET, node_token, T0 + 10 * 86_400_000), 'AUTH_TOKEN_EXPIRED');
  });
  it('tampered tokens, and tokens from another secret, are invalid', () => {
    const v = volunteer();
    const { token } = mintToken(SECRET, v.wallet, T0);
    const [ver, payload, mac] = token.split('.') as [string, string, string];
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString()) as { w: string; exp: number };
    const forged = (c: object) => `${ver}.${Buffer.from(JSON.stringify(c)).toString('base64url')}.${mac}`;
    const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === 'A' ? 'B' : 'A') + s.slice(i + 1);
    const tampered = [
      forged({ ...claims, exp: claims.exp + 1 }),
      forged({ ...claims, w: volunteer().wallet }),
      `${ver}.${flip(payload, 3)}.${mac}`,
      `${ver}.${payload}.${flip(mac, 0)}`,
      `${ver}.${payload}.${flip(mac, 42)}`,
      `v2.${payload}.${mac}`,
      `${ver}.${payload}.${mac}A`,
      `${ver}.${payload}.${mac.slice(1)}`,
      `${ver}.${payload}`,
      `${ver}.${payload}.${mac}.x`,
      `${token} `,
      '',
      'v1..',
      'x'.repeat(2000),
      mintToken(new Uint8Array(32).fill(8), v.wallet, T0).token,
      mintToken(randomBytes(32), v.wallet, T0).token,
    ];
    assert.equal(verifyToken(SECRET, token, T0).wallet, v.wallet);
    for (const t of tampered) throwsCode(() => verifyToken(SECRET, t, T0), 'AUTH_TOKEN_INVALID');
    for (const t of [undefined, null, 1, {}, ['x']]) throwsCode(() => verifyToken(SECRET, t, T0), 'AUTH_TOKEN_INVALID');
    // A validly MACed payload that is not the expected JSON is still invalid.
    for (const body of ['not json', '[]', 'null', '{"w":1,"exp":1}', '{"w":"a"}', '{"w":"a","exp":"9"}', '{"w":"","exp":9e15}']) {
      const p = Buffer.from(body).toString('base64url');
      const m = createHmac('sha256', SECRET).update(`v1.${p}`).digest('base64url');
      throwsCode(() => verifyToken(SECRET, `v1.${p}.${m}`, T0), 'AUTH_TOKEN_INVALID');
    }
    // Expired but tampered is reported as invalid, not expired.
    throwsCode(() => verifyToken(SECRET, forged({ ...claims, exp: T0 - 1 }), T0), 'AUTH_TOKEN_INVALID');
  });
  it('refuses short secrets', () => {
    assert.throws(() => mintToken(new Uint8Array(31), 'w', T0), RangeError);
    assert.throws(() => new NodeAuth({ secret: new Uint8Array(16) }), RangeError);
  });
});

describe('bearer header', () => {
  it('extracts the token from the accepted variants', () => {
    for (const h of ['Bearer abc.def', 'bearer abc.def', 'BEARER abc.def', 'Bearer   abc.def', ' Bearer abc.def ', 'Bearer\tabc.def']) {
      assert.equal(bearerToken(h), 'abc.def', JSON.stringify(h));
    }
  });
  it('missing → AUTH_REQUIRED, malformed → AUTH_TOKEN_INVALID', () => {
    for (const h of [undefined, '', '   ']) throwsCode(() => bearerToken(h), 'AUTH_REQUIRED');
    for (const h of [
      'Bearer',
      'Bearer ',
      'abc.def',
      'Basic dXNlcjpwYXNz',
      'Bearer a b',
      'Bearerabc',
      'Token abc',
      `Bearer ${'a'.repeat(1100)}`,
      'Bearer ab\u00e9',
      'Bearer a\nb',
    ]) {
      throwsCode(() => bearerToken(h), 'AUTH_TOKEN_INVALID');
    }
    const a = auth();
    throwsCode(() => a.authenticate(undefined, T0), 'AUTH_REQUIRED');
    throwsCode(() => a.authenticate('Bearer nope', T0), 'AUTH_TOKEN_INVALID');
  });
});

describe('rate limiting', () => {
  it('token bucket: burst, refusal, refill', () => {
    const rl = new RateLimiter({ capacity: 3, refillPerSec: 2 });
    assert.deepEqual(
      [1, 2, 3, 4].map(() => rl.take('a', T0)),
      [true, true, true, false],
    );
    assert.equal(rl.take('b', T0), true, 'keys are independent');
    assert.equal(rl.waitMs('a', T0), 500);
    assert.equal(rl.take('a', T0 + 499), false);
    assert.equal(rl.take('a', T0 + 500), true);
    assert.equal(rl.take('a', T0 + 500), false);
    assert.equal(rl.take('a', T0 - 10_000), false, 'a clock stepping back refills nothing');
    assert.deepEqual(
      [1, 2, 3, 4].map(() => rl.take('a', T0 + 60_000)),
      [true, true, true, false],
      'refill caps at capacity',
    );
  });
  it('keeps at most maxKeys buckets, evicting the least recently used', () => {
    const rl = new RateLimiter({ capacity: 1, refillPerSec: 0.001, maxKeys: 100 });
    assert.equal(rl.take('hot', T0), true);
    for (let i = 0; i < 10_000; i++) {
      rl.take(`ip${i}`, T0);
      if (i % 50 === 0) assert.equal(rl.take('hot', T0), false, 'recently used key keeps its empty bucket');
      assert.ok(rl.size <= 100);
    }
    assert.equal(rl.size, 100);
  });
  it('NodeAuth limits minting per IP with RATE_LIMITED and Retry-After, then refills', () => {
    const a = new NodeAuth({ secret: SECRET, rateLimit: { capacity: 5, refillPerSec: 0.5 } });
    const v = volunteer();
    for (let i = 0; i < 5; i++) a.challenge({ wallet: v.wallet }, '1.2.3.4', T0);
    assert.throws(
      () => a.challenge({ wallet: v.wallet }, '1.2.3.4', T0),
      (e: unknown) => {
        assert.ok(isHubError(e, 'RATE_LIMITED'));
        assert.equal(e.status, 429);
        assert.equal(e.headers['Retry-After'], '2');
        return true;
      },
    );
    throwsCode(() => a.nodeToken({}, '1.2.3.4', T0), 'RATE_LIMITED');
    throwsCode(() => a.challenge(null, '1.2.3.4', T0 + 1999), 'RATE_LIMITED');
    assert.equal(a.challenge({ wallet: v.wallet }, '5.6.7.8', T0).nonce.length, 64, 'other IPs unaffected');
    const c = a.challenge({ wallet: v.wallet }, '1.2.3.4', T0 + 2000);
    throwsCode(() => a.challenge({ wallet: v.wallet }, '1.2.3.4', T0 + 2000), 'RATE_LIMITED');
    const reply = a.nodeToken({ wallet: v.wallet, nonce: c.nonce, signature: v.sign(c.message) }, '1.2.3.4', T0 + 4000);
    assert.equal(reply.wallet, v.wallet);
    // authenticate is not rate limited
    for (let i = 0; i < 50; i++) assert.equal(a.authenticate(`Bearer ${reply.node_token}`, T0 + 4000), v.wallet);
  });
});

describe('body validation', () => {
  const v = volunteer();
  const a = auth();
  const good = a.challenge({ wallet: v.wallet }, 'ip', T0);
  const sig = v.sign(good.message);
  const nonce64 = 'ab'.repeat(32);

  const challengeCases: [unknown, ErrorCode][] = [
    [undefined, 'BODY_INVALID'],
    [null, 'BODY_INVALID'],
    ['wallet', 'BODY_INVALID'],
    [42, 'BODY_INVALID'],
    [true, 'BODY_INVALID'],
    [[], 'BODY_INVALID'],
    [[v.wallet], 'BODY_INVALID'],
    [{}, 'BODY_INVALID'],
    [{ Wallet: v.wallet }, 'BODY_INVALID'],
    [{ wallet: null }, 'BODY_INVALID'],
    [{ wallet: 123 }, 'BODY_INVALID'],
    [{ wallet: [v.wallet] }, 'BODY_INVALID'],
    [{ wallet: { x: 1 } }, 'BODY_INVALID'],
    [{ wallet: '' }, 'BODY_INVALID'],
    [{ wallet: '1'.repeat(65) }, 'BODY_INVALID'],
    [{ wallet: 'x'.repeat(100_000) }, 'BODY_INVALID'],
    [{ wallet: '1'.repeat(64) }, 'AUTH_BAD_WALLET'],
    [{ wallet: 'z'.repeat(45) }, 'AUTH_BAD_WALLET'],
    [{ wallet: '1'.repeat(31) }, 'AUTH_BAD_WALLET'],
    [{ wallet: v.wallet.slice(5) }, 'AUTH_BAD_WALLET'],
    [{ wallet: `${v.wallet.slice(0, -1)}0` }, 'AUTH_BAD_WALLET'],
    [{ wallet: `${v.wallet} ` }, 'AUTH_BAD_WALLET'],
    [{ wallet: Buffer.from(v.raw).toString('hex') }, 'AUTH_BAD_WALLET'],
    [{ wallet: Buffer.from(v.raw).toString('base64') }, 'AUTH_BAD_WALLET'],
  ];
  it(`challenge: ${challengeCases.length} malformed bodies`, () => {
    assert.ok(challengeCases.length >= 20);
    for (const [body, code] of challengeCases) {
      assert.throws(
        () => a.challenge(body, 'ip', T0),
        (e: unknown) => isHubError(e, code),
        `${JSON.stringify(body)?.slice(0, 80)} → ${code}`,
      );
    }
  });

  const base = { wallet: v.wallet, nonce: good.nonce, signature: sig };
  const tokenCases: [unknown, ErrorCode][] = [
    [undefined, 'BODY_INVALID'],
    [null, 'BODY_INVALID'],
    ['{}', 'BODY_INVALID'],
    [7, 'BODY_INVALID'],
    [[base], 'BODY_INVALID'],
    [{}, 'BODY_INVALID'],
    [{ ...base, wallet: undefined }, 'BODY_INVALID'],
    [{ ...base, nonce: undefined }, 'BODY_INVALID'],
    [{ ...base, signature: undefined }, 'BODY_INVALID'],
    [{ ...base, wallet: 5 }, 'BODY_INVALID'],
    [{ ...base, nonce: 5 }, 'BODY_INVALID'],
    [{ ...base, signature: 5 }, 'BODY_INVALID'],
    [{ ...base, nonce: [good.nonce] }, 'BODY_INVALID'],
    [{ ...base, signature: [...Buffer.from(sig, 'base64')] }, 'BODY_INVALID'],
    [{ ...base, wallet: '' }, 'BODY_INVALID'],
    [{ ...base, nonce: '' }, 'BODY_INVALID'],
    [{ ...base, signature: '' }, 'BODY_INVALID'],
    [{ ...base, wallet: '2'.repeat(65) }, 'BODY_INVALID'],
    [{ ...base, nonce: 'a'.repeat(129) }, 'BODY_INVALID'],
    [{ ...base, signature: 'A'.repeat(257) }, 'BODY_INVALID'],
    [{ ...base, wallet: '1'.repeat(33) }, 'AUTH_BAD_WALLET'],
    [{ ...base, wallet: 'Il0O'.repeat(11) }, 'AUTH_BAD_WALLET'],
    [{ ...base, signature: sig.slice(0, 40) }, 'AUTH_BAD_SIGNATURE'],
    [{ ...base, signature: Buffer.from(sig, 'base64').toString('hex') }, 'AUTH_BAD_SIGNATURE'],
    // The base64url alphabet is refused. (Not the whole base64url re-encoding: for the ~6% of signatures with no '+'
    // or '/' it is the standard base64 without padding, which is accepted, and the case would be flaky.)
    [{ ...base, signature: `-${sig.slice(1)}` }, 'AUTH_BAD_SIGNATURE'],
    [{ ...base, signature: `${sig}\n` }, 'AUTH_BAD_SIGNATURE'],
    [{ ...base, nonce: nonce64 }, 'AUTH_NONCE_UNKNOWN'],
    [{ ...base, nonce: 'not-a-nonce' }, 'AUTH_NONCE_UNKNOWN'],
    [{ ...base, nonce: good.nonce.toUpperCase() }, 'AUTH_NONCE_UNKNOWN'],
  ];
  it(`node-token: ${tokenCases.length} malformed bodies`, () => {
    assert.ok(tokenCases.length >= 20);
    for (const [body, code] of tokenCases) {
      assert.throws(
        () => a.nodeToken(body, 'ip', T0),
        (e: unknown) => isHubError(e, code),
        `${JSON.stringify(body)?.slice(0, 80)} → ${code}`,
      );
    }
    // None of those burnt the good nonce; extra fields are ignored.
    assert.equal(a.nodeToken({ ...base, extra: 'ignored' }, 'ip', T0).wallet, v.wallet);
  });
});

describe('LinkedMap', () => {
  it('keeps insertion/touch order with O(1) oldest', () => {
    const m = new LinkedMap<number>();
    for (const k of ['a', 'b', 'c', 'd']) m.set(k, k.charCodeAt(0));
    m.touch('a');
    m.delete('c');
    m.set('b', 0);
    const order: string[] = [];
    for (let o = m.shift(); o !== undefined; o = m.shift()) order.push(o.key);
    assert.deepEqual(order, ['d', 'a', 'b']);
    assert.equal(m.size, 0);
    assert.equal(m.oldest(), undefined);
    assert.equal(m.touch('zz'), false);
  });
});

describe('challenge store bounds', () => {
  it('issuing 100k challenges keeps size ≤ maxOutstanding and drops the oldest', () => {
    const store = new ChallengeStore({ maxOutstanding: 1_000 });
    const first = store.issue('w0', T0);
    let last = first;
    for (let i = 1; i < 100_000; i++) {
      last = store.issue(`w${i}`, T0 + i);
      if (i % 997 === 0) assert.ok(store.size <= 1_000);
    }
    assert.equal(store.size, 1_000);
    throwsCode(() => store.consume('w0', first.nonce, T0 + 100_000), 'AUTH_NONCE_UNKNOWN');
    assert.equal(store.consume('w99999', last.nonce, T0 + 100_000), last.message);
    assert.equal(store.size, 999);
  });
  it('the default cap holds under 100k issues from one flood', () => {
    const store = new ChallengeStore();
    for (let i = 0; i < 100_000; i++) store.issue(`w${i}`, T0);
    assert.equal(store.size, 50_000);
  });
  it('per-wallet cap keeps only that wallet’s newest challenges', () => {
    const store = new ChallengeStore({ maxPerWallet: 8 });
    const other = store.issue('other', T0);
    const mine = Array.from({ length: 20 }, (_, i) => store.issue('me', T0 + i));
    assert.equal(store.size, 9);
    for (const c of mine.slice(0, 12)) throwsCode(() => store.consume('me', c.nonce, T0 + 100), 'AUTH_NONCE_UNKNOWN');
    for (const c of mine.slice(12)) assert.equal(store.consume('me', c.nonce, T0 + 100), c.message);
    assert.equal(store.consume('other', other.nonce, T0 + 100), other.message);
    assert.equal(store.size, 0);
  });
  it('expired challenges are pruned lazily on issue', () => {
    const store = new ChallengeStore({ ttlMs: 1_000 });
    for (let i = 0; i < 500; i++) store.issue(`w${i}`, T0);
    assert.equal(store.size, 500);
    store.issue('late', T0 + 1_000);
    assert.equal(store.size, 1);
  });
});
