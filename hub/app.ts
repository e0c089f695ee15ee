/**
 * The hub's HTTP API (fastify). Routes are thin: validate at the edge, call the Hub, answer JSON. Every error leaves
 * through one handler as {"error", "code"} with the catalogue's status; never a stack trace.
 */
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { HubError } from './errors.ts';
import type { Hub } from './hub.ts';
import { integer, object, optionalNumber, queryInt, queryString, shallowJson, string } from './validate.ts';
import { capSockets, clientKey, httpServerOptions } from './net.ts';
import { proxyJson } from './proxy.ts';
import { registerPages, type PagesOptions } from './pages.ts';
import { registerShardRoutes } from './shards.ts';
import { registerDashboardRoutes } from './dashboard/routes.ts';
import { COVERAGE_URL_MAX_CHARS } from './relay/relay.ts';
import { BASE58_MAX_CHARS } from '../protocol/base58.ts';
import { parseWallet } from './auth/wallet.ts';
import type { DeviceCapabilities, HeldRange } from './market/types.ts';
import { VARIANT_FEATURES, type VariantFeature } from '../protocol/variant.ts';
import { TENSOR_TYPE_NAMES } from '../protocol/tensor-types.ts';
import { VOLUNTEER_LIMITS } from '../protocol/channel/limits.ts';
import {
  API_BODY_MAX_BYTES,
  DEVICE_BYTES_MAX,
  EXPERTS_MAX,
  HELD_RANGE_NUMBER_LIMIT,
  HELD_RANGES_MAX,
  LAYERS_MAX,
  MODEL_NAME_MAX_CHARS,
  OFFER_EXPERTS_MAX,
  OPENAI_BODY_MAX_BYTES,
  WORKER_ID_MAX_CHARS,
} from './limits.ts';

function device(v: unknown): DeviceCapabilities | undefined {
  if (v === undefined) return undefined;
  const o = object(v, 'device');
  const out: DeviceCapabilities = {};
  const a = optionalNumber(o, 'maxStorageBufferBindingSize', 0, DEVICE_BYTES_MAX);
  const b = optionalNumber(o, 'maxBufferSize', 0, DEVICE_BYTES_MAX);
  const c = optionalNumber(o, 'memoryBudgetBytes', 0, DEVICE_BYTES_MAX);
  if (a !== undefined) out.maxStorageBufferBindingSize = a;
  if (b !== undefined) out.maxBufferSize = b;
  if (c !== undefined) out.memoryBudgetBytes = c;
  return out;
}

/**
 * The optional `variants` of `POST /api/expert-volunteer`: the expert FFN variant features the worker computes
 * (protocol/variant.ts); unknown names are dropped, as the channel's hello drops them. Missing: ['silu'].
 */
function variantList(v: unknown): VariantFeature[] | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || v.length > VARIANT_FEATURES.length * 4 || v.some((x) => typeof x !== 'string')) {
    throw new HubError('BODY_INVALID', `variants must be an array of at most ${VARIANT_FEATURES.length * 4} strings`);
  }
  return VARIANT_FEATURES.filter((f) => v.includes(f));
}

/**
 * The optional `types` of `POST /api/expert-volunteer`: the ggml weight types the worker reads
 * (protocol/tensor-types.ts); unknown names are dropped, as the channel's hello drops them. Missing: not stated
 * (offered every type).
 */
function typeList(v: unknown): string[] | undefined {
  if (v === undefined) return undefined;
  const cap = VOLUNTEER_LIMITS.maxTypesListed;
  if (!Array.isArray(v) || v.length > cap || v.some((x) => typeof x !== 'string')) {
    throw new HubError('BODY_INVALID', `types must be an array of at most ${cap} ggml type names ("Q4_K")`);
  }
  return TENSOR_TYPE_NAMES.filter((n) => v.includes(n));
}

/** The `segments` field of a heartbeat: the worker's held ranges, shape-checked here, against the model by the hub. */
function heldRanges(v: unknown): HeldRange[] {
  if (!Array.isArray(v)) throw new HubError('BODY_INVALID', 'segments must be an array of [layer, begin, end]');
  if (v.length > HELD_RANGES_MAX)
    throw new HubError('TOO_MANY_SEGMENTS', `at most ${HELD_RANGES_MAX} segments per worker, got ${v.length}`);
  return v.map((r, i) => {
    if (
      !Array.isArray(r) ||
      r.length !== 3 ||
      !r.every((x) => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < HELD_RANGE_NUMBER_LIMIT)
    ) {
      throw new HubError('BODY_INVALID', `segments[${i}] must be [layer, begin, end] of non-negative integers`);
    }
    return r as HeldRange;
  });
}

export async function buildApp(hub: Hub, pages: PagesOptions = {}): Promise<FastifyInstance> {
  // forceCloseConnections: a stopping hub ends streams still open (proxied generations) instead of waiting for them.
  // The timeouts and socket caps bound Slowloris clients and connection floods (net.ts, limits.ts).
  const limits = hub.httpLimits();
  const app = Fastify({
    http: httpServerOptions(limits),
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    bodyLimit: API_BODY_MAX_BYTES,
    logger: false,
    trustProxy: false,
    forceCloseConnections: true,
    // Above every id and name cap (worker ids 128, model names 256): the handlers' own checks answer, with their codes.
    routerOptions: { maxParamLength: 1024 },
    // Errors fastify raises before routing get the catalogue's shape too: a path with malformed percent-encoding, a
    // path segment over maxParamLength (and a route constraint, which the hub does not use).
    frameworkErrors: (err, _req, reply) => {
      const e =
        err.code === 'FST_ERR_BAD_URL'
          ? new HubError('URL_INVALID', 'the path is not valid percent-encoding')
          : err.code === 'FST_ERR_MAX_PARAM_LENGTH'
            ? new HubError('URL_INVALID', 'a path segment is longer than 1024 characters')
            : new HubError('URL_INVALID', err.message);
      void (reply as unknown as FastifyReply).status(e.status).send(e.toJSON());
    },
  });
  capSockets(app.server, limits);
  app.removeContentTypeParser('text/plain'); // the API speaks JSON only: anything else is a 415

  app.setErrorHandler((err: Error & { statusCode?: number; code?: string; validation?: unknown }, _req, reply) => {
    let e: HubError;
    if (err instanceof HubError) e = err;
    else if (err.statusCode === 413) e = new HubError('BODY_TOO_LARGE', 'the request body is too large');
    else if (err.statusCode === 415) e = new HubError('UNSUPPORTED_MEDIA_TYPE', 'send the body as application/json');
    else if (err.code?.startsWith('FST_ERR_CTP') || err instanceof SyntaxError)
      e = new HubError('BODY_NOT_JSON', 'the body is not valid JSON');
    else if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) e = new HubError('BODY_INVALID', err.message);
    else {
      hub.noteInternalError(err.message);
      e = new HubError('INTERNAL', 'internal error');
    }
    void reply.status(e.status).headers(e.headers).send(e.toJSON());
  });
  app.setNotFoundHandler((req, reply) => {
    const e = new HubError('NOT_FOUND', `no route ${req.method} ${req.url.split('?')[0]}`);
    void reply.status(e.status).send(e.toJSON());
  });

  const wallet = (req: FastifyRequest): string => hub.authenticate(req.headers.authorization);

  app.get('/api/health', async () => hub.health());
  app.get('/metrics', async (_req, reply) => {
    const { contentType, text } = await hub.scrape();
    return reply.type(contentType).send(text);
  });

  app.post('/api/auth/challenge', async (req) => hub.challenge(req.body, clientKey(req)));
  app.post('/api/auth/node-token', async (req) => hub.login(req.body, clientKey(req)));

  app.get('/api/expert-demand', async (req) => {
    const q = object(req.query, 'query', 'QUERY_INVALID');
    return hub.demandAnswer(queryString(q, 'model', MODEL_NAME_MAX_CHARS, ''));
  });

  app.post('/api/expert-volunteer', async (req) => {
    const w = wallet(req);
    const b = object(req.body);
    const model = string(b, 'model', MODEL_NAME_MAX_CHARS, '');
    const maxExperts = integer(b, 'max_experts', 0, OFFER_EXPERTS_MAX, 0);
    const workerId = b.worker_id === undefined ? undefined : string(b, 'worker_id', WORKER_ID_MAX_CHARS);
    const dev = device(b.device);
    const variants = variantList(b.variants);
    const types = typeList(b.types);
    return hub.volunteer(
      { model, maxExperts, ...(dev ? { device: dev } : {}), ...(variants ? { variants } : {}), ...(types ? { types } : {}) },
      workerId,
      w,
    );
  });

  app.post('/api/expert-coverage', async (req) => {
    const w = wallet(req);
    const b = object(req.body);
    const workerId = string(b, 'worker_id', WORKER_ID_MAX_CHARS);
    if (workerId.length === 0) throw new HubError('BODY_INVALID', 'worker_id must not be empty');
    const model = string(b, 'model', MODEL_NAME_MAX_CHARS);
    const shape = hub.shape(model);
    // 0 (or absent) = unknown, as Kvasir's clients send while they hold nothing; any other value must be the model's.
    const nLayer = integer(b, 'n_layer', 0, LAYERS_MAX, 0);
    const nExpert = integer(b, 'n_expert', 0, EXPERTS_MAX, 0);
    if ((nLayer !== 0 && nLayer !== shape.nLayer) || (nExpert !== 0 && nExpert !== shape.nExpert)) {
      throw new HubError(
        'BODY_INVALID',
        `n_layer/n_expert (${nLayer}/${nExpert}) do not match ${model} (${shape.nLayer}/${shape.nExpert})`,
      );
    }
    // Kvasir's `url`: `relay:<session>` holds the worker's relay session (hub/relay/relay.ts); others (its `tcp:<port>`,
    // a worker to dial) are held as no replica: this hub dials no worker (docs/architecture.md, Kvasir's contract).
    const url = b.url === undefined ? '' : string(b, 'url', COVERAGE_URL_MAX_CHARS);
    // Kvasir's `owner` (the wallet credited): '' or absent = the node token's; another wallet is refused — the hub
    // credits, audits and quarantines the wallet that signed in, never one a heartbeat names.
    const owner = b.owner === undefined ? '' : string(b, 'owner', BASE58_MAX_CHARS);
    if (owner !== '') {
      parseWallet(owner); // AUTH_BAD_WALLET for anything that is not a wallet
      if (owner !== w) throw new HubError('AUTH_FORBIDDEN', 'owner must be the wallet of this node token (or left out)');
    }
    return await hub.reportCoverageShared(workerId, w, model, heldRanges(b.segments), url);
  });
  // Kvasir's ledger of relay sessions (its field names; ws2tcp: bytes the worker sent, tcp2ws: bytes it was sent).
  app.get('/api/expert-relay/sessions', async () => ({ sessions: hub.relaySessions() }));

  app.get('/api/moe/recruitment', async () => hub.recruitment());

  // GET|HEAD /api/expert-shard, Kvasir's alias, and /api/expert-shard/chunks (the per-chunk hashes, docs/peers.md)
  registerShardRoutes(app, hub, { clientKey, server: hub.shardServer(), chunks: hub.chunkLists(), loadHint: hub.shardLoadHint() });
  app.get('/api/peers/slices', async () => ({ slices: hub.peerSlices() })); // bytes from peers vs from the hub, per slice

  // Kvasir's defaults: no model (or '') = every market model, layer -1 = every layer.
  app.get('/api/expert-dispatch-map', async (req) => {
    const q = object(req.query, 'query', 'QUERY_INVALID');
    const layer = q.layer === undefined || q.layer === '-1' ? -1 : queryInt(q, 'layer', 0, LAYERS_MAX);
    return hub.dispatchMap(queryString(q, 'model', MODEL_NAME_MAX_CHARS, ''), layer);
  });

  // The dashboard's stream, workers table, heatmaps, event log (GET /api/events) and admin actions (protocol/dashboard.ts).
  registerDashboardRoutes(app, hub);
  app.addHook('preClose', async () => {
    // Neither ends by itself, and the HTTP server's close waits for both kinds of socket.
    hub.closeDashboardStreams();
    await hub.closeVolunteers();
  });
  app.get('/api/credit', async (req) => {
    const q = object(req.query, 'query', 'QUERY_INVALID');
    const w = queryString(q, 'wallet', BASE58_MAX_CHARS);
    parseWallet(w); // AUTH_BAD_WALLET for anything that is not a wallet
    return hub.creditAnswer(w);
  });

  // OpenAI-compatible API, proxied to the model's coordinator.
  app.get('/v1/models', async () => ({
    object: 'list',
    data: hub.servedModels().map((id) => ({ id, object: 'model', created: 0, owned_by: 'expertswarm' })),
  }));
  for (const path of ['/v1/chat/completions', '/v1/completions']) {
    app.post(path, { bodyLimit: OPENAI_BODY_MAX_BYTES }, async (req, reply) => {
      const b = object(req.body);
      shallowJson(b); // proxied as JSON.stringify(b)
      const names = hub.servedModels();
      const model = b.model === undefined && names.length === 1 ? (names[0] as string) : string(b, 'model', MODEL_NAME_MAX_CHARS);
      await proxyJson(reply, hub.coordinatorUrl(model), path, { ...b, model });
    });
  }
  hub.attachVolunteers(app.server); // WebSocket /api/volunteer (protocol/channel/)
  await registerPages(app, pages); // / the volunteer page (web/, `npm run build:web`), /assets/
  return app;
}
