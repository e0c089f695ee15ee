/**
 * The scenario's load: streaming greedy completions through the hub's OpenAI API with the official `openai` client,
 * ramped 0 → peak concurrent streams → 0. Each stream is a lane that issues one request after another while it is
 * on; the k-th request overall takes prompt k mod prompts.length, so every request has a local-only answer to be
 * compared with (the token ids each streamed chunk carries in `logprobs.content[].id`, llama-server's extension).
 *
 *   const load = new RampLoad(url, 'm', { peak: 6, stepMs: 1000, maxTokens: 64, prompts, ban });
 *   load.rampUp();
 *   await load.waitStreaming(4, 60_000);
 *   await load.rampDown();            // lanes stop one per stepMs, each after its request in flight
 *   load.records;                     // every request: prompt, times, token ids
 *
 * A lane that is told to stop finishes its request: every recorded request is whole, so its tokens can be compared.
 */
import OpenAI from 'openai';

export interface RampPlan {
  /** Concurrent streams at the top of the ramp. */
  peak: number;
  /** One more lane every stepMs on the way up, one fewer every stepMs on the way down. */
  stepMs: number;
  /** Tokens per request (ignore_eos: every request generates exactly this many). */
  maxTokens: number;
  prompts: readonly string[];
  /** Token ids banned with logit bias −100 (the random-weight model's bytes that are not valid UTF-8 alone). */
  ban: readonly number[];
}

export interface RequestRecord {
  lane: number;
  /** Index into the plan's prompts. */
  prompt: number;
  startMs: number;
  firstTokenMs: number | null;
  endMs: number | null;
  ids: number[];
  error: string | null;
  /** The HTTP status of a refusal (error before any token), else null. */
  status: number | null;
  /** 503 answers before this attempt that were retried (see completeWithRetry). */
  retried: number;
}

/** A request's record as it is sent: started now, nothing received yet. */
function newRecord(lane: number, prompt: number): RequestRecord {
  return { lane, prompt, startMs: Date.now(), firstTokenMs: null, endMs: null, ids: [], error: null, status: null, retried: 0 };
}

/** One streamed chunk's token ids (llama-server puts them in `logprobs.content` when `logprobs` is asked for). */
export function chunkIds(chunk: unknown): number[] {
  const choice = (chunk as { choices?: Array<{ logprobs?: { content?: Array<{ id?: unknown }> } | null }> }).choices?.[0];
  const out: number[] = [];
  for (const t of choice?.logprobs?.content ?? []) if (typeof t.id === 'number') out.push(t.id);
  return out;
}

/** One greedy streaming completion; resolves with its record (errors are recorded, not thrown). */
export async function streamCompletion(
  client: OpenAI,
  model: string,
  plan: Pick<RampPlan, 'maxTokens' | 'prompts' | 'ban'>,
  prompt: number,
  lane: number,
  onFirstToken: (r: RequestRecord) => void = () => {},
  signal?: AbortSignal,
): Promise<RequestRecord> {
  const r = newRecord(lane, prompt);
  try {
    const body = greedyStreamBody(model, plan.prompts[prompt] as string, plan.maxTokens, plan.ban);
    const stream = await client.completions.create(body, signal ? { signal } : {});
    for await (const chunk of stream) {
      const ids = chunkIds(chunk);
      if (ids.length > 0 && r.firstTokenMs === null) {
        r.firstTokenMs = Date.now();
        onFirstToken(r);
      }
      r.ids.push(...ids);
    }
    if (r.ids.length !== plan.maxTokens) r.error = `${r.ids.length} token ids streamed, ${plan.maxTokens} asked for`;
  } catch (e) {
    Object.assign(r, failureOf(e));
  }
  r.endMs = Date.now();
  return r;
}

/**
 * A streaming greedy completion's body asking for each token's id (`logprobs`) and exactly `maxTokens` tokens;
 * ignore_eos is llama-server's, not in the client's types: the client sends the body as given.
 */
export function greedyStreamBody(model: string, prompt: string, maxTokens: number, ban: readonly number[]) {
  return {
    model,
    prompt,
    max_tokens: maxTokens,
    temperature: 0,
    seed: 1,
    logprobs: 1,
    stream: true as const,
    logit_bias: Object.fromEntries(ban.map((id) => [String(id), -100])),
    ignore_eos: true,
  };
}

/** A failed request's message, and the HTTP status of a refusal (the `openai` client's APIError carries it). */
export function failureOf(e: unknown): { error: string; status: number | null } {
  const status = (e as { status?: unknown }).status;
  return { error: e instanceof Error ? e.message : String(e), status: typeof status === 'number' ? status : null };
}

/** 503 answers retried per request at most. */
export const RETRIES_503 = 5;

/**
 * streamCompletion, retried at once when the hub answers 503 before any token (COORDINATOR_UNAVAILABLE, "try again
 * shortly"), as a client would. At once, not after the answer's Retry-After (2 s): the 503s seen here are the hub's
 * proxy meeting a connection the coordinator had just reset (ECONNRESET), not a coordinator that is down, and a lane
 * that waits lets the slots empty — on a fast machine a third of the requests met one, and waiting 100 ms each was
 * enough to keep the load from saturating. The record counts them (`retried`): the timeline and the summary show them.
 */
export async function completeWithRetry(
  client: OpenAI,
  model: string,
  plan: Pick<RampPlan, 'maxTokens' | 'prompts' | 'ban'>,
  prompt: number,
  lane: number,
  onFirstToken: (r: RequestRecord) => void = () => {},
  signal?: AbortSignal,
): Promise<RequestRecord> {
  for (let retried = 0; ; retried++) {
    const r = await streamCompletion(client, model, plan, prompt, lane, onFirstToken, signal);
    r.retried = retried;
    if (r.status !== 503 || r.ids.length > 0 || retried >= RETRIES_503 || signal?.aborted) return r;
  }
}

export class RampLoad {
  readonly records: RequestRecord[] = [];
  /** When the number of streams generating at once (first token in, not ended) first reached each count. */
  readonly streamingReached = new Map<number, number>();
  /** When each count of requests in flight (sent, not finished) was first reached. */
  readonly inFlightReached = new Map<number, number>();
  /** When, after rampDown began, fewer than each count of requests were in flight for the first time. */
  readonly inFlightBelow = new Map<number, number>();
  private readonly client: OpenAI;
  private readonly lanes: Array<{ stop: boolean; done: Promise<void> }> = [];
  private readonly inFlight = new Set<RequestRecord>();
  /** One controller per request in flight (one shared signal would collect a listener per request). */
  private readonly aborts = new Set<AbortController>();
  private aborted = false;
  private next = 0;
  private rampTimer: NodeJS.Timeout | null = null;
  private rampingDown = false;

  constructor(
    url: string,
    private readonly model: string,
    private readonly plan: RampPlan,
  ) {
    this.client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600_000 });
  }

  /** Lanes running now. */
  get lanesOn(): number {
    return this.lanes.filter((l) => !l.stop).length;
  }

  /** Requests sent and not finished. */
  get requestsInFlight(): number {
    return this.inFlight.size;
  }

  /** Requests generating now (their first token arrived). */
  get streaming(): number {
    let n = 0;
    for (const r of this.inFlight) if (r.firstTokenMs !== null) n++;
    return n;
  }

  /** Starts lane 0 now and one more every stepMs up to the peak. */
  rampUp(): void {
    this.addLane();
    this.rampTimer = setInterval(() => {
      if (this.lanes.length >= this.plan.peak) {
        if (this.rampTimer) clearInterval(this.rampTimer);
        this.rampTimer = null;
        return;
      }
      this.addLane();
    }, this.plan.stepMs);
  }

  /** Resolves when `n` requests were generating at once (at once if they already were); throws after timeoutMs. */
  waitStreaming(n: number, timeoutMs: number): Promise<number> {
    return waitKey(this.streamingReached, n, timeoutMs, () => `never ${n} streams at once in ${timeoutMs} ms (now ${this.streaming})`);
  }

  /** Resolves when `n` requests were in flight at once; throws after timeoutMs. */
  waitInFlight(n: number, timeoutMs: number): Promise<number> {
    return waitKey(
      this.inFlightReached,
      n,
      timeoutMs,
      () => `never ${n} requests in flight in ${timeoutMs} ms (now ${this.inFlight.size})`,
    );
  }

  /** Stops the lanes one per stepMs, newest first; each finishes its request. Resolves when all have ended. */
  async rampDown(): Promise<void> {
    if (this.rampTimer) clearInterval(this.rampTimer);
    this.rampTimer = null;
    this.rampingDown = true;
    this.noteInFlight();
    for (let i = this.lanes.length - 1; i >= 0; i--) {
      (this.lanes[i] as { stop: boolean }).stop = true;
      if (i > 0) await new Promise((r) => setTimeout(r, this.plan.stepMs));
    }
    await Promise.all(this.lanes.map((l) => l.done));
  }

  /** Aborts everything in flight (cleanup after a failure). */
  async abort(): Promise<void> {
    if (this.rampTimer) clearInterval(this.rampTimer);
    for (const l of this.lanes) l.stop = true;
    this.aborted = true;
    for (const a of this.aborts) a.abort();
    await Promise.all(this.lanes.map((l) => l.done));
  }

  private addLane(): void {
    const lane = this.lanes.length;
    const state = { stop: false, done: Promise.resolve() };
    state.done = (async () => {
      while (!state.stop && !this.aborted) {
        const prompt = this.next++ % this.plan.prompts.length;
        const pending = newRecord(lane, prompt);
        this.inFlight.add(pending);
        if (!this.inFlightReached.has(this.inFlight.size)) this.inFlightReached.set(this.inFlight.size, pending.startMs);
        const abort = new AbortController();
        this.aborts.add(abort);
        const r = await completeWithRetry(
          this.client,
          this.model,
          this.plan,
          prompt,
          lane,
          () => {
            pending.firstTokenMs = Date.now();
            const now = this.streaming;
            for (let k = 1; k <= now; k++) if (!this.streamingReached.has(k)) this.streamingReached.set(k, pending.firstTokenMs);
          },
          abort.signal,
        );
        this.aborts.delete(abort);
        this.inFlight.delete(pending);
        this.records.push(r);
        // Only a stopping lane lowers the load: a running one sends its next request in the same turn.
        if (state.stop) this.noteInFlight();
        // A refusal must not spin.
        if (r.error !== null && !state.stop) await new Promise((res) => setTimeout(res, 250));
      }
    })();
    this.lanes.push(state);
  }

  private noteInFlight(): void {
    if (!this.rampingDown) return;
    const now = Date.now();
    for (let k = this.inFlight.size + 1; k <= this.plan.peak + 1; k++) if (!this.inFlightBelow.has(k)) this.inFlightBelow.set(k, now);
  }
}

async function waitKey(map: Map<number, number>, key: number, timeoutMs: number, why: () => string): Promise<number> {
  const until = Date.now() + timeoutMs;
  while (!map.has(key)) {
    if (Date.now() > until) throw new Error(why());
    await new Promise((r) => setTimeout(r, 25));
  }
  return map.get(key) as number;
}
