/**
 * bench:elastic's load: `streams` lanes, each sending one streaming greedy completion after another (the `openai`
 * client) until told to stop; every request is recorded whole, with llama-server's timings. The lanes run in this
 * process or, by default, in a child of their own (bench/elastic/load-child.ts), so that parsing the streamed chunks
 * does not run on the event loop of the hubs' dispatchers it measures.
 *
 *   const { reqs, wallMs } = await runLanes(plan, (n) => n < 12);   // 12 requests, then each lane ends
 */
import OpenAI from 'openai';
import { chunkIds, failureOf, greedyStreamBody } from './load.ts';

export interface Timings {
  prompt_n: number;
  prompt_ms: number;
  predicted_n: number;
  predicted_ms: number;
}

/** One request: its times are this process's performance.now(), compared only with each other. */
export interface Req {
  prompt: number;
  startMs: number;
  firstMs: number | null;
  endMs: number;
  ids: number[];
  timings: Timings | null;
  retried: number;
  error: string | null;
}

export interface LanePlan {
  /** The hub's base URL (`/v1` is added). */
  url: string;
  model: string;
  prompts: readonly string[];
  /** Tokens each request generates (ignore_eos). */
  tokens: number;
  /** Token ids banned with logit bias −100. */
  ban: readonly number[];
  streams: number;
}

async function streamOnce(client: OpenAI, plan: LanePlan, p: number): Promise<Req & { status: number | null }> {
  const r: Req & { status: number | null } = {
    prompt: p,
    startMs: performance.now(),
    firstMs: null,
    endMs: 0,
    ids: [],
    timings: null,
    retried: 0,
    error: null,
    status: null,
  };
  try {
    // llama-server's own fields (ignore_eos, cache_prompt) go in the body as given. cache_prompt false: every request
    // processes its whole prompt, so the prompt rate is measured on each.
    const body = { ...greedyStreamBody(plan.model, plan.prompts[p] as string, plan.tokens, plan.ban), cache_prompt: false };
    const stream = await client.completions.create(body);
    for await (const chunk of stream) {
      const ids = chunkIds(chunk);
      if (ids.length > 0 && r.firstMs === null) r.firstMs = performance.now();
      r.ids.push(...ids);
      const t = (chunk as { timings?: Timings }).timings;
      if (t && typeof t.prompt_n === 'number') r.timings = t;
    }
    if (r.ids.length !== plan.tokens) r.error = `${r.ids.length} token ids streamed, ${plan.tokens} asked for`;
  } catch (e) {
    Object.assign(r, failureOf(e));
  }
  r.endMs = performance.now();
  return r;
}

/** Retried at once on a 503 before any token (the proxy's keep-alive race: bench/elastic/load.ts completeWithRetry). */
async function request(client: OpenAI, plan: LanePlan, p: number): Promise<Req> {
  for (let retried = 0; ; retried++) {
    const r = await streamOnce(client, plan, p);
    r.retried = retried;
    if (r.status !== 503 || r.ids.length > 0 || retried >= 5) {
      const { status: _, ...req } = r;
      return req;
    }
  }
}

/**
 * The lanes until `more(sent)` says no (each lane then ends after its request in flight); the k-th request sent takes
 * prompt k mod prompts.length. `wallMs` runs from the first request sent to the last ended.
 */
export async function runLanes(
  plan: LanePlan,
  more: (sent: number) => boolean,
  onError: (r: Req) => void = () => {},
): Promise<{ reqs: Req[]; wallMs: number }> {
  const client = new OpenAI({ baseURL: `${plan.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 1_800_000 });
  const reqs: Req[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: plan.streams }, async () => {
      while (more(next)) {
        const p = next++ % plan.prompts.length;
        const r = await request(client, plan, p);
        reqs.push(r);
        if (r.error !== null) {
          onError(r);
          await new Promise((res) => setTimeout(res, 250));
        }
      }
    }),
  );
  return { reqs, wallMs: performance.now() - t0 };
}
