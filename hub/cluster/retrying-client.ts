/**
 * The retrying client of a cluster of hubs (issue 30, docs/faults.md "A hub of a cluster killed"): an OpenAI-API
 * caller that knows every hub's address and takes a failed request to the next hub, so that a hub dying mid-load fails
 * no request.
 *
 *   const client = new RetryingClient({ hubs: ['http://hub-a:8080', 'http://hub-b:8080', 'http://hub-c:8080'] });
 *   const { json } = await client.post('/v1/completions', { model: 'm', prompt: 'Hi', max_tokens: 16, temperature: 0 });
 *   for await (const chunk of client.stream('/v1/chat/completions', { model: 'm', messages, temperature: 0 })) …
 *
 * What is retried: a request the hub never answered (connection refused or reset, the attempt's time bound), an
 * answer 502 / 503 / 504 (the hub's coordinator away, the cluster unavailable), and an answer cut short (a body that
 * ends early, a stream without its `data: [DONE]`). Anything else the hub answered is the caller's (a 4xx is thrown as
 * HUB_REFUSED with the hub's code, not retried). Each retry goes to the next hub in turn after a jittered wait
 * (uniform in [½, 1) × min(maxMs, baseMs · 2ⁿ⁻¹)), so the clients of a dead hub do not land on the next one at once.
 *
 * A stream is resumed, not restarted, for the client: the request is sent again to another hub and the chunks already
 * yielded are skipped, each compared with the one yielded before (its text, its finish reason). That is exact only when
 * the generation is deterministic, so a stream that has yielded something is resumed only for a greedy request
 * (`temperature: 0`) or a seeded one (`seed`); another throws STREAM_NOT_RESUMABLE, and a replay whose chunks differ
 * from those yielded (a near tie decided otherwise by other numerics) throws STREAM_DIVERGED. A stream that had yielded
 * nothing yet is simply retried.
 *
 * With `discover: true` the client needs one hub's address only: before its first request it reads the cluster's live
 * hubs from that hub (`GET /api/health` → `cluster.hub_urls`) and adds them after the ones given.
 */

import { mergeHubs } from './hub-list.ts';

/** Why a request gave up; callers match `code`, never the prose. */
export const RETRYING_CLIENT_ERRORS = {
  /** Every attempt failed in a way worth retrying (the last reason is in the message). */
  ALL_HUBS_FAILED: 'every attempt at every hub failed',
  /** A hub answered with an error that another hub would give too (a 4xx: the request itself). */
  HUB_REFUSED: 'a hub refused the request',
  /** A stream cut short after it yielded chunks, of a request that is neither greedy nor seeded. */
  STREAM_NOT_RESUMABLE: 'a stream cut short cannot be resumed: the request is neither greedy nor seeded',
  /** The replay at another hub gave other chunks than those already yielded. */
  STREAM_DIVERGED: 'the replay of a stream differs from what was yielded',
  /** Bad options (no hubs, an address that is not http(s)). */
  OPTIONS_INVALID: 'the client’s options are invalid',
} as const;
export type RetryingClientCode = keyof typeof RETRYING_CLIENT_ERRORS;

export class RetryingClientError extends Error {
  constructor(
    readonly code: RetryingClientCode,
    message: string,
    /** The HTTP status of a HUB_REFUSED answer. */
    readonly status?: number,
    /** The hub's own error code of a HUB_REFUSED answer (its catalogue, hub/errors.ts). */
    readonly hubCode?: string,
  ) {
    super(`${code}: ${message}`);
    this.name = 'RetryingClientError';
  }
}

export interface RetryingClientOptions {
  /** The hubs' origins (`http://host:port`); requests start at each in turn. */
  hubs: readonly string[];
  /** Attempts per request, all hubs together (default 3 per hub, at least 3). */
  attempts?: number;
  /** The jittered wait before retry n: [½, 1) × min(maxMs, baseMs · 2ⁿ⁻¹) (default 100 ms, 2 s). */
  backoff?: { baseMs: number; maxMs: number };
  /** One attempt's bound, headers and body together (default 300 s). */
  attemptTimeoutMs?: number;
  fetch?: typeof fetch;
  random?: () => number;
  /**
   * Learn the other hubs of the cluster before the first request: `GET /api/health` of the hubs given, in turn, until
   * one answers with `cluster.hub_urls` (hub-list.ts); those not given are added after them. Default false.
   */
  discover?: boolean;
  /** Told of each retry (tests and logs). */
  onRetry?: (r: { attempt: number; hub: string; next: string; reason: string }) => void;
}

/** What a retried attempt failed of (never thrown out of this module). */
class Retryable extends Error {}

const RETRY_STATUSES = new Set([502, 503, 504]);
/** Hubs a client keeps at most (those given and those learned). */
const DISCOVERED_HUBS_MAX = 64;

export class RetryingClient {
  private hubs: readonly string[];
  private attempts: number;
  private discovered: Promise<void> | null = null;
  private readonly backoff: { baseMs: number; maxMs: number };
  private readonly timeoutMs: number;
  private readonly fetch: typeof fetch;
  private readonly random: () => number;
  private next = 0;
  /** Retries made, all requests together. */
  retries = 0;

  constructor(private readonly o: RetryingClientOptions) {
    if (o.hubs.length === 0) throw new RetryingClientError('OPTIONS_INVALID', 'hubs is empty');
    this.hubs = o.hubs.map((h) => {
      let u: URL;
      try {
        u = new URL(h);
      } catch {
        throw new RetryingClientError('OPTIONS_INVALID', `not a URL: ${JSON.stringify(h)}`);
      }
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new RetryingClientError('OPTIONS_INVALID', `not http(s): ${h}`);
      return u.origin;
    });
    this.attempts = o.attempts ?? Math.max(3, 3 * this.hubs.length);
    if (!Number.isInteger(this.attempts) || this.attempts < 1) throw new RetryingClientError('OPTIONS_INVALID', `attempts ${o.attempts}`);
    this.backoff = o.backoff ?? { baseMs: 100, maxMs: 2_000 };
    this.timeoutMs = o.attemptTimeoutMs ?? 300_000;
    this.fetch = o.fetch ?? fetch;
    this.random = o.random ?? Math.random;
  }

  /** The hubs requests go to now: those given, then those learned (`discover`). */
  get hubList(): readonly string[] {
    return this.hubs;
  }

  /**
   * Learns the cluster's other hubs (`discover`): once, before the first request (every caller waits on the same
   * look-up); a hub that does not answer, or answers without `cluster.hub_urls`, is skipped. `again` looks again.
   */
  discoverHubs(again = false): Promise<void> {
    if (again) this.discovered = null;
    this.discovered ??= (async () => {
      for (const hub of [...this.hubs]) {
        try {
          const r = await this.fetch(new URL('/api/health', hub), { signal: AbortSignal.timeout(Math.min(this.timeoutMs, 5_000)) });
          if (!r.ok) continue;
          const urls = ((await r.json()) as { cluster?: { hub_urls?: unknown } }).cluster?.hub_urls;
          if (!Array.isArray(urls)) continue;
          this.hubs = mergeHubs(
            this.hubs,
            urls.filter((u): u is string => typeof u === 'string'),
            DISCOVERED_HUBS_MAX,
          );
          if (this.o.attempts === undefined) this.attempts = Math.max(3, 3 * this.hubs.length);
          return;
        } catch {}
      }
    })();
    return this.discovered;
  }

  /** The wait before retry `n` (1, 2, …): full jitter over the upper half of a doubling step. */
  delayMs(n: number): number {
    const step = Math.min(this.backoff.maxMs, this.backoff.baseMs * 2 ** (n - 1));
    return step / 2 + (step / 2) * Math.min(Math.max(this.random(), 0), 0.999_999);
  }

  /** A JSON request answered with a JSON body: retried whole until a hub answers it entirely. */
  async post(path: string, body: unknown): Promise<{ status: number; json: unknown; hub: string; attempts: number }> {
    if (this.o.discover) await this.discoverHubs();
    return this.withRetries(async (hub, signal) => {
      const r = await this.send(hub, path, body, signal);
      let text: string;
      try {
        text = await r.text();
      } catch (e) {
        throw new Retryable(`the answer was cut short: ${message(e)}`);
      }
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        throw new Retryable(`the answer is not whole JSON (${text.length} bytes)`);
      }
      return { status: r.status, json, hub };
    }).then(([v, attempts]) => ({ ...v, attempts }));
  }

  /**
   * A streamed request (`stream: true` is set): yields each `data:` chunk's JSON once, in order, whichever hubs served
   * it (see the module's comment for when a cut stream is resumed).
   */
  async *stream(path: string, body: Record<string, unknown>): AsyncGenerator<unknown> {
    if (this.o.discover) await this.discoverHubs();
    const request: Record<string, unknown> = { ...body, stream: true };
    const resumable = request.temperature === 0 || Number.isInteger(request.seed);
    const yielded: string[] = [];
    let attempt = 0;
    let hub = this.pick();
    for (;;) {
      attempt++;
      const signal = AbortSignal.timeout(this.timeoutMs);
      let seen = 0;
      try {
        const r = await this.send(hub, path, request, signal);
        if (!r.body) throw new Retryable('no body');
        for await (const data of sseData(r.body)) {
          if (data === '[DONE]') return;
          let chunk: unknown;
          try {
            chunk = JSON.parse(data);
          } catch {
            throw new Retryable(`a chunk is not JSON: ${data.slice(0, 80)}`);
          }
          if (chunk && typeof chunk === 'object' && 'error' in chunk) throw new Retryable(`an error in the stream: ${data.slice(0, 200)}`);
          const key = chunkKey(chunk);
          if (seen < yielded.length) {
            if (yielded[seen] !== key)
              throw new RetryingClientError('STREAM_DIVERGED', `chunk ${seen} was ${yielded[seen]}, the replay at ${hub} gives ${key}`);
            seen++;
            continue;
          }
          yielded.push(key);
          seen++;
          yield chunk;
        }
        throw new Retryable('the stream ended without data: [DONE]');
      } catch (e) {
        if (!(e instanceof Retryable) && !isNetworkError(e)) throw e;
        if (yielded.length > 0 && !resumable)
          throw new RetryingClientError('STREAM_NOT_RESUMABLE', `${yielded.length} chunks yielded, then at ${hub}: ${message(e)}`);
        hub = await this.retryOrThrow(attempt, hub, message(e));
      }
    }
  }

  private pick(): string {
    const hub = this.hubs[this.next % this.hubs.length] as string;
    this.next = (this.next + 1) % this.hubs.length;
    return hub;
  }

  private async withRetries<T>(f: (hub: string, signal: AbortSignal) => Promise<T>): Promise<[T, number]> {
    let hub = this.pick();
    for (let attempt = 1; ; attempt++) {
      try {
        return [await f(hub, AbortSignal.timeout(this.timeoutMs)), attempt];
      } catch (e) {
        if (!(e instanceof Retryable) && !isNetworkError(e)) throw e;
        hub = await this.retryOrThrow(attempt, hub, message(e));
      }
    }
  }

  /** After failed attempt `attempt` at `hub`: the next hub once the jittered wait is over, or ALL_HUBS_FAILED. */
  private async retryOrThrow(attempt: number, hub: string, reason: string): Promise<string> {
    if (attempt >= this.attempts) throw new RetryingClientError('ALL_HUBS_FAILED', `${attempt} attempts; the last at ${hub}: ${reason}`);
    const i = this.hubs.indexOf(hub);
    const next = this.hubs[(i + 1) % this.hubs.length] as string;
    this.retries++;
    this.o.onRetry?.({ attempt, hub, next, reason });
    await new Promise((r) => setTimeout(r, this.delayMs(attempt)));
    return next;
  }

  /** One attempt's request; a status worth retrying throws Retryable, another error status HUB_REFUSED. */
  private async send(hub: string, path: string, body: unknown, signal: AbortSignal): Promise<Response> {
    let r: Response;
    try {
      r = await this.fetch(new URL(path, hub), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal,
      });
    } catch (e) {
      throw new Retryable(`no answer: ${message(e)}`);
    }
    if (r.ok) return r;
    const text = await r.text().catch(() => '');
    if (RETRY_STATUSES.has(r.status)) throw new Retryable(`answered ${r.status}: ${text.slice(0, 200)}`);
    let code: string | undefined;
    try {
      code = (JSON.parse(text) as { code?: unknown }).code as string | undefined;
    } catch {}
    throw new RetryingClientError('HUB_REFUSED', `${hub} answered ${r.status}: ${text.slice(0, 200)}`, r.status, code);
  }
}

/** A chunk's part that a replay must repeat: each choice's text and finish reason (not ids, times or logprobs). */
function chunkKey(chunk: unknown): string {
  const choices = (chunk as { choices?: unknown }).choices;
  if (!Array.isArray(choices)) return '';
  return JSON.stringify(
    choices.map((c: { text?: unknown; delta?: { content?: unknown; reasoning_content?: unknown }; finish_reason?: unknown }) => [
      c.text ?? c.delta?.content ?? null,
      c.delta?.reasoning_content ?? null,
      c.finish_reason ?? null,
    ]),
  );
}

/** The `data:` payloads of a server-sent-event stream (one per event; a body cut mid-event throws Retryable). */
async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for await (const part of body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(part, { stream: true });
      for (let end = buf.indexOf('\n\n'); end >= 0; end = buf.indexOf('\n\n')) {
        const event = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const data = event
          .split('\n')
          .filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).trimStart())
          .join('\n');
        if (data) yield data;
      }
    }
  } catch (e) {
    throw new Retryable(`the stream was cut: ${message(e)}`);
  }
}

function isNetworkError(e: unknown): boolean {
  return e instanceof TypeError && /fetch failed|terminated|socket|ECONN/i.test(`${e.message} ${String((e as { cause?: unknown }).cause)}`);
}

const message = (e: unknown): string => {
  if (!(e instanceof Error)) return String(e);
  const cause = (e as { cause?: unknown }).cause;
  return cause instanceof Error ? `${e.message} (${cause.message})` : e.message;
};
