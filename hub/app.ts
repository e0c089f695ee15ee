/**
 * The hub's HTTP API (fastify). Routes are thin: validate at the edge, call the Hub, answer JSON. Every error leaves
 * through one handler as {"error", "code"} with the catalogue's status; never a stack trace.
 */
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { HubError } from './errors.ts';
import type { Hub } from './hub.ts';
import { integer, object, optionalNumber, queryString, string } from './validate.ts';
import { proxyJson } from './proxy.ts';
import type { DeviceCapabilities } from './market/types.ts';

const API_BODY_LIMIT = 64 * 1024;
const OPENAI_BODY_LIMIT = 8 * 1024 * 1024;
const MODEL_NAME_MAX = 256;
const WORKER_ID_MAX = 128;

function clientKey(req: FastifyRequest): string {
  const ip = req.ip;
  // IPv6 clients rotate addresses inside their /64: rate-limit the prefix.
  if (ip.includes(':') && !ip.startsWith('::ffff:')) return ip.split(':').slice(0, 4).join(':');
  return ip;
}

function device(v: unknown): DeviceCapabilities | undefined {
  if (v === undefined) return undefined;
  const o = object(v, 'device');
  const out: DeviceCapabilities = {};
  const big = 2 ** 50;
  const a = optionalNumber(o, 'maxStorageBufferBindingSize', 0, big);
  const b = optionalNumber(o, 'maxBufferSize', 0, big);
  const c = optionalNumber(o, 'memoryBudgetBytes', 0, big);
  if (a !== undefined) out.maxStorageBufferBindingSize = a;
  if (b !== undefined) out.maxBufferSize = b;
  if (c !== undefined) out.memoryBudgetBytes = c;
  return out;
}

function segments(v: unknown): Array<[number, number, number]> {
  if (!Array.isArray(v)) throw new HubError('BODY_INVALID', 'segments must be an array of [layer, begin, end]');
  if (v.length > 256) throw new HubError('TOO_MANY_SEGMENTS', `at most 256 segments per worker, got ${v.length}`);
  return v.map((s, i) => {
    if (!Array.isArray(s) || s.length !== 3 || !s.every((x) => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < 2 ** 31)) {
      throw new HubError('BODY_INVALID', `segments[${i}] must be [layer, begin, end] of non-negative integers`);
    }
    return s as [number, number, number];
  });
}

export async function buildApp(hub: Hub): Promise<FastifyInstance> {
  // forceCloseConnections: a stopping hub ends streams still open (proxied generations) instead of waiting for them.
  const app = Fastify({ bodyLimit: API_BODY_LIMIT, logger: false, trustProxy: false, forceCloseConnections: true });
  app.removeContentTypeParser('text/plain'); // the API speaks JSON only: anything else is a 415

  app.setErrorHandler((err: Error & { statusCode?: number; code?: string; validation?: unknown }, _req, reply) => {
    let e: HubError;
    if (err instanceof HubError) e = err;
    else if (err.statusCode === 413) e = new HubError('BODY_TOO_LARGE', 'the request body is too large');
    else if (err.statusCode === 415) e = new HubError('UNSUPPORTED_MEDIA_TYPE', 'send the body as application/json');
    else if (err.code?.startsWith('FST_ERR_CTP') || err instanceof SyntaxError) e = new HubError('BODY_NOT_JSON', 'the body is not valid JSON');
    else if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) e = new HubError('BODY_INVALID', err.message);
    else {
      hub.events.add('coordinator', null, `internal error: ${err.message}`);
      e = new HubError('INTERNAL', 'internal error');
    }
    void reply.status(e.status).headers(e.headers).send(e.toJSON());
  });
  app.setNotFoundHandler((req, reply) => {
    const e = new HubError('NOT_FOUND', `no route ${req.method} ${req.url.split('?')[0]}`);
    void reply.status(e.status).send(e.toJSON());
  });

  const wallet = (req: FastifyRequest): string => hub.auth.authenticate(req.headers.authorization, hub.now());

  app.get('/api/health', async () => ({
    ok: true,
    coordinators: hub.supervisor.status().map((c) => ({ model: c.name, state: c.state, restarts: c.restarts })),
  }));
  app.get('/metrics', async (_req, reply) => reply.type('text/plain; version=0.0.4').send(hub.metrics()));

  app.post('/api/auth/challenge', async (req) => hub.auth.challenge(req.body, clientKey(req), hub.now()));
  app.post('/api/auth/node-token', async (req) => {
    const answer = hub.auth.nodeToken(req.body, clientKey(req), hub.now());
    hub.state.touchVolunteer(answer.wallet, hub.now());
    return answer;
  });

  app.get('/api/expert-demand', async (req) => {
    const q = object(req.query, 'query', 'QUERY_INVALID');
    const model = queryString(q, 'model', MODEL_NAME_MAX, '');
    if (model && !hub.models.has(model)) throw new HubError('MODEL_UNKNOWN', `no model named "${model}" is served here`);
    const models = hub.demand(model || undefined);
    return {
      target_replicas: Math.max(hub.config.saturation.targetBase, ...models.map((m) => m.target_replicas)),
      recruiting: models.some((m) => m.recruiting),
      models,
    };
  });

  app.post('/api/expert-volunteer', async (req) => {
    wallet(req);
    const b = object(req.body);
    const model = string(b, 'model', MODEL_NAME_MAX, '');
    const maxExperts = integer(b, 'max_experts', 0, 1 << 20, 0);
    const workerId = b.worker_id === undefined ? undefined : string(b, 'worker_id', WORKER_ID_MAX);
    const dev = device(b.device);
    return hub.volunteer({ model, maxExperts, ...(dev ? { device: dev } : {}) }, workerId);
  });

  app.post('/api/expert-coverage', async (req) => {
    const w = wallet(req);
    const b = object(req.body);
    const workerId = string(b, 'worker_id', WORKER_ID_MAX);
    if (workerId.length === 0) throw new HubError('BODY_INVALID', 'worker_id must not be empty');
    const model = string(b, 'model', MODEL_NAME_MAX);
    const shape = hub.shape(model);
    const nLayer = integer(b, 'n_layer', 1, 4096);
    const nExpert = integer(b, 'n_expert', 1, 4096);
    if (nLayer !== shape.nLayer || nExpert !== shape.nExpert) {
      throw new HubError('BODY_INVALID', `n_layer/n_expert (${nLayer}/${nExpert}) do not match ${model} (${shape.nLayer}/${shape.nExpert})`);
    }
    hub.heartbeat(workerId, w, model, segments(b.segments));
    return { ok: true, stale_after_s: Math.round(hub.config.staleMs / 1000) };
  });

  app.get('/api/moe/recruitment', async () => hub.recruitment());

  app.get('/api/expert-dispatch-map', async (req) => {
    const q = object(req.query, 'query', 'QUERY_INVALID');
    const model = queryString(q, 'model', MODEL_NAME_MAX);
    hub.shape(model);
    return { model, rows: hub.dispatch.rows(model, hub.coverage, hub.now()) };
  });

  app.get('/api/events', async () => ({ events: hub.events.recent(200) }));

  // OpenAI-compatible API, proxied to the model's coordinator.
  app.get('/v1/models', async () => ({
    object: 'list',
    data: hub.modelNames().map((id) => ({ id, object: 'model', created: 0, owned_by: 'expertswarm' })),
  }));
  for (const path of ['/v1/chat/completions', '/v1/completions']) {
    app.post(path, { bodyLimit: OPENAI_BODY_LIMIT }, async (req, reply) => {
      const b = object(req.body);
      const names = hub.modelNames();
      const model = b.model === undefined && names.length === 1 ? (names[0] as string) : string(b, 'model', MODEL_NAME_MAX);
      if (!hub.supervisor.has(model)) throw new HubError('MODEL_UNKNOWN', `no model named "${model}" is served here; GET /v1/models lists them`);
      const url = hub.supervisor.available(model);
      await proxyJson(reply, url, path, { ...b, model });
    });
  }
  return app;
}
