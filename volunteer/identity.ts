/**
 * The volunteer's identity: an ed25519 key pair made and kept on the volunteer's side (WebCrypto, in browsers and in
 * Node), whose public key in base58 is its wallet, and the login that trades a signed challenge for a node token
 * (`POST /api/auth/challenge`, `POST /api/auth/node-token`; docs in ../shared/ARCHITECTURE.md). Browser-safe.
 *
 *   const id = await loadIdentity(store);            // made once, then reused: credit follows the wallet
 *   const { token } = await login(hubUrl, id);
 */
import { encodeBase58 } from '../protocol/base58.ts';

/** Where the key pair is kept between sessions (localStorage in the browser, a file in Node). */
export interface IdentityStore {
  load(): Promise<JsonWebKey | null>;
  save(privateJwk: JsonWebKey): Promise<void>;
}

export interface Identity {
  wallet: string;
  sign(message: string): Promise<string>;
}

export class MemoryIdentityStore implements IdentityStore {
  private jwk: JsonWebKey | null = null;
  async load(): Promise<JsonWebKey | null> {
    return this.jwk;
  }
  async save(jwk: JsonWebKey): Promise<void> {
    this.jwk = jwk;
  }
}

export class LocalStorageIdentityStore implements IdentityStore {
  constructor(private readonly key = 'expertswarm.identity.v1') {}
  async load(): Promise<JsonWebKey | null> {
    const text = localStorage.getItem(this.key);
    return text ? (JSON.parse(text) as JsonWebKey) : null;
  }
  async save(jwk: JsonWebKey): Promise<void> {
    localStorage.setItem(this.key, JSON.stringify(jwk));
  }
}

const ED25519 = { name: 'Ed25519' } as const;

function base64(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

function fromBase64Url(text: string): Uint8Array {
  const b = atob(text.replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(b, (c) => c.charCodeAt(0));
}

/** The stored key pair, or a new one (saved before it is used). */
export async function loadIdentity(store: IdentityStore): Promise<Identity> {
  let jwk = await store.load();
  if (!jwk?.d || !jwk.x) {
    const pair = (await crypto.subtle.generateKey(ED25519, true, ['sign', 'verify'])) as CryptoKeyPair;
    jwk = await crypto.subtle.exportKey('jwk', pair.privateKey);
    await store.save(jwk);
  }
  const key = await crypto.subtle.importKey('jwk', jwk, ED25519, false, ['sign']);
  const wallet = encodeBase58(fromBase64Url(jwk.x as string));
  const encoder = new TextEncoder();
  return {
    wallet,
    sign: async (message) => base64(new Uint8Array(await crypto.subtle.sign(ED25519, key, encoder.encode(message)))),
  };
}

export interface NodeToken {
  token: string;
  wallet: string;
  /** When to log in again (ms since the epoch), a minute before the token expires. */
  renewAtMs: number;
}

/** Challenge, sign, token. Throws with the hub's code on a refusal. */
export async function login(hubUrl: string, id: Identity, fetchFn: typeof fetch = fetch, nowMs = Date.now()): Promise<NodeToken> {
  const post = async (path: string, body: unknown): Promise<Record<string, unknown>> => {
    const res = await fetchFn(new URL(path, hubUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    const json = (await res.json()) as Record<string, unknown>;
    if (!res.ok) throw new Error(`${path}: ${String(json.code)} ${String(json.error)}`);
    return json;
  };
  const challenge = await post('/api/auth/challenge', { wallet: id.wallet });
  const message = String(challenge.message);
  const answer = await post('/api/auth/node-token', { wallet: id.wallet, nonce: challenge.nonce, signature: await id.sign(message) });
  const expiresS = Number(answer.expires_in);
  return { token: String(answer.node_token), wallet: id.wallet, renewAtMs: nowMs + Math.max(0, expiresS - 60) * 1000 };
}
