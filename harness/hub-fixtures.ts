/** Helpers for hub tests: a hub without coordinators, volunteer identities that really sign, and JSON calls. */
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Hub, defaultConfig, type HubConfig } from '../hub/hub.ts';
import { buildApp } from '../hub/app.ts';
import { encodeBase58 } from '../protocol/base58.ts';
import type { ChannelHello } from '../protocol/channel/index.ts';

/** A channel hello's device: a 1 GiB WebGPU adapter at 100 GFLOP/s named `description`, with `features`. */
export function testDevice(description: string, features: string[] = []): ChannelHello['device'] {
  return {
    webgpu: true,
    adapter: { vendor: 'test', architecture: 'loopback', description, isFallbackAdapter: false },
    limits: { maxStorageBufferBindingSize: 1 << 30, maxBufferSize: 1 << 30 },
    features,
    backend: 'webgpu',
    gflops: 100,
    memoryBudgetBytes: 1 << 30,
  };
}

export interface Volunteer {
  wallet: string;
  key: KeyObject;
  sign(message: string): string;
}

export function newVolunteer(): Volunteer {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url');
  return {
    wallet: encodeBase58(new Uint8Array(raw)),
    key: privateKey,
    sign: (message) => sign(null, Buffer.from(message, 'utf8'), privateKey).toString('base64'),
  };
}

/**
 * The per-address and per-wallet caps lifted (hub/limits.ts; docs/threat-model.md), for simulations that play
 * thousands of volunteers from one loopback address with a few tokens (benchmarks, soaks, reconnection drills); a real
 * hub keeps them, as tests of the caps do (test/integration/security.test.ts).
 *
 *   defaultConfig({ …, channel: { heartbeatMs, ...MANY_FROM_ONE_ADDRESS.channel }, http: MANY_FROM_ONE_ADDRESS.http })
 */
export const MANY_FROM_ONE_ADDRESS = Object.freeze({
  channel: Object.freeze({
    maxPerAddress: 1e9,
    maxPerWallet: 1e9,
    opensPerAddress: Object.freeze({ capacity: 1e9, refillPerSec: 1e9 }),
  }),
  http: Object.freeze({ socketsPerAddress: 1e9 }),
});

export interface TestHub {
  hub: Hub;
  app: FastifyInstance;
  clock: { now: number };
  call(
    method: 'GET' | 'POST',
    url: string,
    body?: unknown,
    token?: string,
    raw?: { payload: string; contentType: string },
    // biome-ignore lint/suspicious/noExplicitAny: any JSON answer; tests read the fields they assert
  ): Promise<{ status: number; json: any; headers: Record<string, unknown> }>;
  login(v: Volunteer): Promise<string>;
  close(): Promise<void>;
}

/**
 * A hub over the given models with no coordinator started: the market, auth and durable store, driven in-process;
 * with `redis` (harness/redis.ts) it joins that cluster of hubs.
 */
export async function testHub(over: Partial<HubConfig>): Promise<TestHub> {
  const clock = { now: 1_800_000_000_000 };
  const hub = new Hub(defaultConfig({ stateDir: ':memory:', ...over }), () => clock.now);
  await hub.load();
  await hub.startCluster(); // with `redis` in `over`: the hub joins that cluster (no coordinator is started either way)
  const app = await buildApp(hub);
  const call: TestHub['call'] = async (method, url, body, token, raw) => {
    const headers: Record<string, string> = {};
    if (token) headers.authorization = `Bearer ${token}`;
    let payload: string | undefined;
    if (raw) {
      payload = raw.payload;
      headers['content-type'] = raw.contentType;
    } else if (body !== undefined) {
      payload = JSON.stringify(body);
      headers['content-type'] = 'application/json';
    }
    const r = await app.inject({ method, url, headers, ...(payload !== undefined ? { payload } : {}) });
    let json: unknown;
    try {
      json = r.json();
    } catch {
      json = r.body;
    }
    return { status: r.statusCode, json, headers: r.headers };
  };
  return {
    hub,
    app,
    clock,
    call,
    async login(v) {
      const c = await call('POST', '/api/auth/challenge', { wallet: v.wallet });
      if (c.status !== 200) throw new Error(`challenge: ${c.status} ${JSON.stringify(c.json)}`);
      const t = await call('POST', '/api/auth/node-token', { wallet: v.wallet, nonce: c.json.nonce, signature: v.sign(c.json.message) });
      if (t.status !== 200) throw new Error(`node-token: ${t.status} ${JSON.stringify(t.json)}`);
      return t.json.node_token as string;
    },
    async close() {
      await app.close();
      await hub.stop();
    },
  };
}
