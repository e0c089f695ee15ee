/**
 * The checks that say "this dispatched run computed what the stock server computes", as a list of failures (empty =
 * pass), so that the same checks can be asserted to pass for an honest dispatcher and to fail for a dishonest one
 * (test/integration/expert-dispatch.test.ts):
 *  - both token arrays are there and have exactly the requested length, and they are equal;
 *  - every request that should be served was served: one per MoE layer and graph evaluation (the prompt in
 *    ⌈prompt tokens / ubatch⌉ evaluations, then one per generated token but the last), each with every pair served;
 *  - the coordinator logged no local fallback (no incident, no "stock path" note);
 *  - the dispatcher met no protocol error;
 *  - at every position, 1 − cos of the two logit vectors is within the bound.
 */
import type { Completion } from './linkcpp.ts';
import type { RequestRecord } from './test-dispatcher.ts';

type TopLogprobs = Array<{ top_logprobs?: Array<{ id: number; logprob: number }> }>;

/** The coordinator's log lines that say it computed experts itself: an incident, or layers left on the stock path. */
export const FALLBACK_LINE = /expert-dispatch: .*(computing experts locally|run the stock path)/;

/** llama-server's default physical batch (-ub): a prompt longer than this is evaluated in several graphs. */
export const DEFAULT_UBATCH = 512;

/**
 * 1 − cos of the centred log-probability vectors at each position (centring makes it shift-invariant, so it
 * compares the logits). Computed as ‖â − b̂‖² / 2, which keeps its precision near 0 where 1 − (a·b)/(|a||b|) would not.
 * A position missing from either side counts as 1 (no agreement).
 */
export function logitDistances(want: Completion, got: Completion, nVocab: number): number[] {
  const a = want.raw.completion_probabilities as TopLogprobs | undefined;
  const b = got.raw.completion_probabilities as TopLogprobs | undefined;
  const n = Math.max(a?.length ?? 0, b?.length ?? 0);
  const out: number[] = [];
  for (let pos = 0; pos < n; pos++) {
    const va = unitCentred(a?.[pos]?.top_logprobs, nVocab);
    const vb = unitCentred(b?.[pos]?.top_logprobs, nVocab);
    if (!va || !vb) {
      out.push(1);
      continue;
    }
    let d2 = 0;
    for (let i = 0; i < nVocab; i++) d2 += ((va[i] as number) - (vb[i] as number)) ** 2;
    out.push(d2 / 2);
  }
  return out;
}

function unitCentred(top: Array<{ id: number; logprob: number }> | undefined, nVocab: number): Float64Array | null {
  if (!top || top.length !== nVocab) return null; // a partial distribution is not a logit vector
  const v = new Float64Array(nVocab);
  for (const { id, logprob } of top) v[id] = logprob;
  const mean = v.reduce((s, x) => s + x, 0) / nVocab;
  let norm = 0;
  for (let i = 0; i < nVocab; i++) {
    v[i] = (v[i] as number) - mean;
    norm += (v[i] as number) ** 2;
  }
  norm = Math.sqrt(norm);
  if (!Number.isFinite(norm) || norm === 0) return null;
  for (let i = 0; i < nVocab; i++) v[i] = (v[i] as number) / norm;
  return v;
}

/** Prompt tokens the server evaluated for a completion (its `timings.prompt_n`). */
export function promptTokens(c: Completion): number {
  const n = (c.raw.timings as { prompt_n?: number } | undefined)?.prompt_n;
  if (typeof n !== 'number' || n < 1) throw new Error(`the completion reports no prompt_n: ${JSON.stringify(c.raw.timings)}`);
  return n;
}

/** Tokens at the end of a prompt that llama-server evaluates in a graph of their own when it checkpoints the memory. */
export const CHECKPOINT_TAIL = 4;

/** How a model's prompt evaluation departs from the plain one (the hybrid Qwen families: both). */
export interface PromptEvaluation {
  /** The last layer evaluates every prompt row (qwen3next, qwen35moe pick the wanted rows after the output norm). */
  lastLayerAllRows?: boolean;
  /**
   * The prompt's last CHECKPOINT_TAIL tokens are evaluated in a graph of their own, so that the server can checkpoint
   * the memory before them: models whose memory cannot be rolled back (recurrent and hybrid ones), with llama-server's
   * context checkpoints on (--ctx-checkpoints, the default).
   */
  checkpointSplit?: boolean;
}

/**
 * The requests a dispatcher serving everything gets for one completion alone on the server (cache_prompt off): per
 * MoE layer, one evaluation of the whole prompt, then one single-row evaluation per generated token except the last
 * (the last sampled token is never evaluated). In the model's last layer llama.cpp keeps only the rows whose logits
 * are wanted (one: the prompt's last token), so that layer's prompt request has one row. `how` gives the departures
 * of the hybrid families (PromptEvaluation). Prompts longer than a physical batch (evaluated in several graphs) are
 * out of scope here.
 */
export function expectedRequests(
  moeLayers: readonly number[],
  nLayer: number,
  promptN: number,
  nPredict: number,
  how: PromptEvaluation = {},
): Array<{ layer: number; nTokens: number }> {
  if (promptN > DEFAULT_UBATCH)
    throw new RangeError(`a prompt of ${promptN} tokens is evaluated in several graphs; keep it under ${DEFAULT_UBATCH}`);
  const graphs = how.checkpointSplit && promptN > CHECKPOINT_TAIL ? [promptN - CHECKPOINT_TAIL, CHECKPOINT_TAIL] : [promptN];
  const out: Array<{ layer: number; nTokens: number }> = [];
  for (const [g, rows] of graphs.entries()) {
    const wanted = g === graphs.length - 1 ? 1 : 0;
    for (const layer of moeLayers) {
      const nTokens = layer === nLayer - 1 && !how.lastLayerAllRows ? wanted : rows;
      if (nTokens > 0) out.push({ layer, nTokens });
    }
  }
  for (let i = 1; i < nPredict; i++) out.push(...moeLayers.map((layer) => ({ layer, nTokens: 1 })));
  return out;
}

export interface RunCheckInput {
  /** The stock server's completion (requested with n_probs = nVocab). */
  want: Completion;
  got: Completion;
  nPredict: number;
  nVocab: number;
  moeLayers: readonly number[];
  /** Layers of the model (the last one evaluates only the rows whose logits are wanted). */
  nLayer: number;
  /** How the model's prompt is evaluated, where it departs from one graph with one row kept in the last layer. */
  evaluation?: PromptEvaluation;
  /** What the dispatcher answered during `got` (TestDispatcher.since(mark)). */
  requests: readonly RequestRecord[];
  /** The coordinator's log written during `got`. */
  log: string;
  protocolErrors: readonly string[];
  /** Largest 1 − cos allowed at any position. */
  bound: number;
}

export interface RunCheck {
  failures: string[];
  /** 1 − cos per position, and its maximum. */
  distances: number[];
  maxDistance: number;
  tokensEqual: boolean;
}

/** Every check, all of them run (so a report names everything that is wrong); `failures` empty = the run is exact. */
export function checkRun(c: RunCheckInput): RunCheck {
  const failures: string[] = [];
  for (const [side, comp] of [
    ['stock', c.want],
    ['dispatched', c.got],
  ] as const) {
    if (!Array.isArray(comp.tokens)) failures.push(`${side}: the completion has no tokens array`);
    else if (comp.tokens.length !== c.nPredict) failures.push(`${side}: ${comp.tokens.length} tokens, ${c.nPredict} requested`);
  }
  const tokensEqual = Array.isArray(c.got.tokens) && Array.isArray(c.want.tokens) && c.got.tokens.join() === c.want.tokens.join();
  if (!tokensEqual) {
    const first = (c.want.tokens ?? []).findIndex((t, i) => c.got.tokens?.[i] !== t);
    failures.push(`tokens differ from stock from position ${first}`);
  }

  const want = expectedRequests(c.moeLayers, c.nLayer, promptTokens(c.got), c.nPredict, c.evaluation);
  const servedPairs = c.requests.reduce((s, r) => s + r.served, 0);
  const wantPairs = want.reduce((s, r) => s + r.nTokens, 0) * (c.requests[0]?.nUsed ?? 0);
  const shape = (rs: ReadonlyArray<{ layer: number; nTokens: number }>): string => rs.map((r) => `${r.layer}:${r.nTokens}`).join(' ');
  if (c.requests.length !== want.length) {
    failures.push(
      `${c.requests.length} requests answered, ${want.length} expected (${c.moeLayers.length} MoE layers × ${want.length / c.moeLayers.length} evaluations)`,
    );
  } else if (shape(c.requests) !== shape(want)) {
    failures.push(`requests (layer:rows) ${shape(c.requests).slice(0, 200)} differ from the expected ${shape(want).slice(0, 200)}`);
  }
  const notServed = c.requests.reduce((s, r) => s + r.notServed, 0);
  if (notServed > 0 || servedPairs !== wantPairs) {
    failures.push(`${servedPairs} pairs served, ${wantPairs} expected; ${notServed} answered not served (computed locally)`);
  }

  const fallback = c.log.split('\n').filter((l) => FALLBACK_LINE.test(l));
  if (fallback.length > 0) failures.push(`the coordinator fell back to local experts: ${fallback.join(' | ')}`);
  if (c.protocolErrors.length > 0) failures.push(`dispatcher protocol errors: ${c.protocolErrors.join(' | ')}`);

  const distances = logitDistances(c.want, c.got, c.nVocab);
  if (distances.length !== c.nPredict) failures.push(`logits at ${distances.length} positions, ${c.nPredict} expected`);
  const maxDistance = Math.max(0, ...distances);
  const over = distances.map((d, pos) => [pos, d] as const).filter(([, d]) => !(d <= c.bound));
  if (over.length > 0) {
    const [pos, d] = over[0] as readonly [number, number];
    failures.push(
      `1 − cos of the logits exceeds ${c.bound} at ${over.length} positions, first ${pos} (${d.toExponential(2)}), max ${maxDistance.toExponential(2)}`,
    );
  }
  return { failures, distances, maxDistance, tokensEqual };
}
