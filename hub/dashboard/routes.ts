/**
 * The dashboard's HTTP routes (the contract is protocol/dashboard.ts): thin, as every route of the hub — validate at
 * the edge, call the Hub, answer JSON; errors leave through app.ts's one handler.
 *
 *   registerDashboardRoutes(app, hub); // from buildApp
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { HUB_EVENT_KINDS, type HubEventKind } from '../events.ts';
import { HubError } from '../errors.ts';
import type { Hub } from '../hub.ts';
import { EVENTS_LISTED, MODEL_NAME_MAX_CHARS, WORKER_ID_MAX_CHARS } from '../limits.ts';
import { clientKey } from '../net.ts';
import { object, queryInt, queryString } from '../validate.ts';
import { dispatchBody, quarantineBody, releaseBody, targetBody } from './admin.ts';
import { SSE_HEADERS } from './stream.ts';
import { EVENTS_PAGE_MAX, WireQueryError, parseWorkersQuery } from '../../protocol/dashboard.ts';

/** The query as strings: a repeated parameter (an array) is refused rather than guessed at. */
function stringQuery(req: FastifyRequest): Record<string, string | undefined> {
  const q = object(req.query, 'query', 'QUERY_INVALID');
  for (const [k, v] of Object.entries(q)) {
    if (typeof v !== 'string') throw new HubError('QUERY_INVALID', `${k} must be given once`);
  }
  return q as Record<string, string | undefined>;
}

function pathParam(req: FastifyRequest, key: string): string {
  return String((req.params as Record<string, unknown>)[key] ?? '');
}

export function registerDashboardRoutes(app: FastifyInstance, hub: Hub): void {
  // Read side: no token.
  app.get('/api/dashboard/stream', async (req, reply) => {
    // The caps (TOO_MANY_STREAMS, RATE_LIMITED) and the snapshot first: a refusal or a failure is a JSON answer that
    // ends the request. Only then is the reply hijacked and committed to a stream.
    const open = hub.dashboardStream(clientKey(req));
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, SSE_HEADERS);
    req.raw.socket.setNoDelay(true);
    open(res);
    return reply;
  });

  app.get('/api/dashboard/workers', async (req) => {
    try {
      return hub.dashboardWorkers(parseWorkersQuery(stringQuery(req), MODEL_NAME_MAX_CHARS));
    } catch (e) {
      if (e instanceof WireQueryError) throw new HubError('QUERY_INVALID', e.message);
      throw e;
    }
  });

  app.get('/api/dashboard/coverage', async (req) => {
    const q = stringQuery(req);
    return hub.coverageMap(queryString(q, 'model', MODEL_NAME_MAX_CHARS));
  });

  app.get('/api/events', async (req) => {
    const q = stringQuery(req);
    const kind = q.kind ?? '';
    if (kind !== '' && !(HUB_EVENT_KINDS as readonly string[]).includes(kind))
      throw new HubError('QUERY_INVALID', `kind must be one of ${HUB_EVENT_KINDS.join(', ')}`);
    const model = queryString(q, 'model', MODEL_NAME_MAX_CHARS, '');
    const limit = q.limit === undefined || q.limit === '' ? EVENTS_LISTED : queryInt(q, 'limit', 1, EVENTS_PAGE_MAX);
    const scope = q.scope ?? 'hub';
    if (scope !== 'hub' && scope !== 'cluster') throw new HubError('QUERY_INVALID', 'scope must be hub or cluster');
    const filter = { ...(kind !== '' ? { kind: kind as HubEventKind } : {}), ...(model !== '' ? { model } : {}), limit };
    // scope=cluster: every hub's events from the cluster's stream, each with its hub (cluster/cluster-feed.ts).
    return { events: scope === 'cluster' ? await hub.clusterEvents(filter) : hub.queryEvents(filter) };
  });

  // Admin side: `Authorization: Bearer <admin token>`, checked before anything else.
  const admin = (req: FastifyRequest): void => hub.requireAdmin(req.headers.authorization);
  const workerId = (req: FastifyRequest): string => {
    const id = pathParam(req, 'id');
    if (id.length === 0 || id.length > WORKER_ID_MAX_CHARS)
      throw new HubError('WORKER_UNKNOWN', `a worker id is 1 to ${WORKER_ID_MAX_CHARS} characters`);
    return id;
  };

  app.get('/api/admin/check', async (req, reply) => {
    admin(req);
    return reply.code(204).send();
  });

  app.post('/api/admin/workers/:id/release', async (req) => {
    admin(req);
    return hub.adminAction('release', null, () => hub.adminRelease(workerId(req), releaseBody(req.body).reason));
  });

  app.post('/api/admin/workers/:id/quarantine', async (req) => {
    admin(req);
    return hub.adminAction('quarantine', null, () => {
      const { reason, wallet } = quarantineBody(req.body);
      return hub.adminQuarantine(workerId(req), reason, wallet);
    });
  });

  app.post('/api/admin/target', async (req) => {
    admin(req);
    return hub.adminAction('target', null, () => hub.adminTarget(targetBody(req.body)));
  });

  app.post('/api/admin/models/:model/dispatch', async (req) => {
    admin(req);
    const model = pathParam(req, 'model');
    return hub.adminAction('dispatch', model.length <= MODEL_NAME_MAX_CHARS ? model : null, () => {
      if (model.length > MODEL_NAME_MAX_CHARS) throw new HubError('MODEL_UNKNOWN', 'no model has a name that long');
      return hub.adminDispatch(model, dispatchBody(req.body).mode);
    });
  });
}
