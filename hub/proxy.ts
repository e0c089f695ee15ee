/**
 * Streams an OpenAI-compatible request to a coordinator and its answer (SSE or JSON) back to the client:
 * backpressure through pipeline(), a client that disconnects aborts the upstream request, hop-by-hop headers dropped.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { pipeline } from 'node:stream/promises';
import type { FastifyReply } from 'fastify';
import { HubError } from './errors.ts';

const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'upgrade',
  'proxy-connection',
  'te',
  'trailer',
  'content-length',
]);
/** A coordinator that sends nothing for this long (no token, no header) is given up on. */
const IDLE_TIMEOUT_MS = 300_000;

export async function proxyJson(reply: FastifyReply, baseUrl: string, path: string, body: unknown): Promise<void> {
  const payload = Buffer.from(JSON.stringify(body));
  const url = new URL(path, baseUrl);
  const send = (retried: boolean): Promise<{ res: IncomingMessage; abort: () => void }> =>
    new Promise((resolve, reject) => {
      const req = httpRequest(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'content-length': String(payload.length),
          accept: 'application/json, text/event-stream',
        },
        timeout: IDLE_TIMEOUT_MS,
      });
      req.once('response', (res) => resolve({ res, abort: () => req.destroy() }));
      req.once('timeout', () => req.destroy(new HubError('COORDINATOR_TIMEOUT', 'the coordinator did not answer in time')));
      req.once('error', (e: NodeJS.ErrnoException) => {
        // A kept-alive connection the coordinator closed just as we reused it: the request never reached it, so
        // one retry on a fresh connection is safe (Node's documented remedy; seen as 503s under streaming load).
        if (!retried && req.reusedSocket && e.code === 'ECONNRESET') send(true).then(resolve, reject);
        else if (e instanceof HubError) reject(e);
        else if (e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET') {
          reject(
            new HubError('COORDINATOR_UNAVAILABLE', `the coordinator is not reachable (${e.code}); try again shortly`, {
              'retry-after': '2',
            }),
          );
        } else reject(new HubError('COORDINATOR_ERROR', `the coordinator request failed: ${e.message}`));
      });
      req.end(payload);
    });
  const upstream = await send(false);
  reply.hijack();
  const raw = reply.raw;
  const headers: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(upstream.res.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) headers[k] = v;
  raw.writeHead(upstream.res.statusCode ?? 502, headers);
  raw.flushHeaders();
  const onClose = (): void => {
    if (!raw.writableFinished) {
      upstream.abort();
      raw.destroy(); // the client is gone: free its socket now rather than when the server closes
    }
  };
  raw.once('close', onClose);
  try {
    await pipeline(upstream.res, raw);
  } catch {
    // client went away or the coordinator died mid-stream
    raw.destroy();
  } finally {
    raw.off('close', onClose);
  }
}
