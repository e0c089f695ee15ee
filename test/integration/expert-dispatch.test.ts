/**
 * linkcpp-server's expert-dispatch hook against the test dispatcher: the product's promise that the answer does not
 * depend on who computed the experts, held up by checks that fail when it breaks.
 *
 * The grid (the first 5 architectures × F32/F16/Q8_0/Q4_0/Q4_K, the later families — deepseek2 with latent attention,
 * sigmoid gates, a selection bias, grouped top-k and scaled weights; glm4moe; minimax-m2 — × F32/Q4_K) compares every dispatched run with the stock server (no
 * dispatch) on the same model and prompt, through the checks of harness/dispatch-checks.ts: both token arrays
 * there with exactly the requested length and equal; every request that should be served served (MoE layers ×
 * graph evaluations, each with all its pairs); no local-fallback line in the coordinator's log; no dispatcher protocol
 * error; and at every position 1 − cos of the logits within a bound. Per case:
 *  - an honest CPU dispatcher (ggml-exact.ts: the coordinator's own arithmetic, bit for bit): identical logits;
 *  - three negative controls, each applied at generation steps only, each of which the same checks must reject:
 *    one routed expert per token dropped yet reported served, sums × 1.01, and a dispatcher that serves the prompt
 *    and then answers "local" (so the coordinator silently computes the rest and the tokens stay right);
 *  - the WGSL runtime (ExpertRuntime on Node's WebGPU, SwiftShader here) with llama numerics: identical tokens.
 * Then: half of the pairs served, a stalling / dying / garbage-sending dispatcher, quiet windows, no dispatcher at
 * all, and 4 concurrent slots, each compared with stock.
 *
 * Protocol versions (docs/dispatch-protocol.md): the coordinator offers 3; every case above speaks version 2 because
 * the test dispatcher acknowledges at most 2 by default (CLAIM at once, the unclaimed pairs computed meanwhile, then
 * the RESULT); version 3 (standing offers) is tested in dispatch-v3.test.ts. Stalls and garbage are tried both instead
 * of the CLAIM and after it (instead of the RESULT). Version 1 is tried with a dispatcher that acknowledges 1, with a
 * coordinator told to offer 1 (LINKCPP_EXPERT_DISPATCH_VERSION=1), and with an old dispatcher that closes on a newer
 * HELLO (the coordinator offers 2, then 1). Invalid v2 frames (a RESULT serving an unclaimed pair, a RESPONSE on a v2
 * connection) and a HELLO_ACK newer than the offer are refused, and the tokens stay stock's.
 *
 * Models: random weights whose routed-expert branch is loud (expertScale LOUD, see below) so that an error in the
 * experts moves the logits as much as one anywhere else would. Token ids are compared (random-weight models emit
 * arbitrary bytes).
 */
import { after, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testModel, type TestModel } from '../../harness/models.ts';
import { completeGreedy, startServer, tokenize, type Completion, type RunningServer } from '../../harness/linkcpp.ts';
import { logLines, waitForLog } from '../../harness/log-wait.ts';
import { TestDispatcher, type DispatcherBehaviour, type RequestRecord } from '../../harness/test-dispatcher.ts';
import type { DispatchVersion, Hello } from '../../protocol/dispatch.ts';
import {
  FALLBACK_LINE,
  checkRun,
  expectedRequests,
  promptTokens,
  type PromptEvaluation,
  type RunCheck,
} from '../../harness/dispatch-checks.ts';
import { WgslBackend } from '../../harness/wgsl-backend.ts';
import { expertLoudness } from '../../harness/residual-probe.ts';
import { ARCHITECTURES, planModel, routingOf, type ArchName, type ModelConfig, type Routing } from '../../tools/model-arch.ts';
import { buildVocabulary } from '../../tools/tokenizer.ts';
import { isHybridArch } from '../../tools/model-arch-hybrid.ts';
import { isKinArch } from '../../tools/model-arch-kin.ts';
import { GGMLType, requireQuantType } from '../../gguf/quant-types.ts';
import { KERNEL_TYPES } from '../../shaders/expert-ffn.ts';
import { GGML_EXACT_TYPES } from '../../harness/ggml-exact.ts';

const dir = await mkdtemp(join(tmpdir(), 'es-xd-'));
after(() => rm(dir, { recursive: true, force: true }));
let socketCounter = 0;
const PROMPT = 'The swarm serves';
const nVocab = buildVocabulary().tokens.length;
/** Every position's full distribution, so that the logits can be compared (shift-invariantly) at every position. */
const ALL_PROBS = { n_probs: nVocab };

/**
 * The routed experts' down projection at 2× the unit-variance amplitude (make-model.ts `expertScale`; the default 0.1
 * keeps the branch quiet). Measured at the prompt's first position (residual-probe.ts): the routed-expert output's RMS
 * is 0.55–0.70 of the residual stream's in layer 0 and 0.19–0.36 in layer 1, against 0.03 and 0.02 at the default;
 * an error in the experts then moves the residual stream by a comparable fraction of its own size: dropping one of two
 * experts changes the tokens in every grid case, and sums × 1.01 move the logits by 1 − cos ≥ 1.9e-4 where an honest
 * worker gives 0.
 */
const LOUD = 2;
/** Each stock baseline must have at least this many distinct tokens of 64 (a collapsed baseline hides errors). */
const MIN_DISTINCT = 16;
const N = 64;
/**
 * Largest 1 − cos at any position for the bit-exact CPU dispatcher: measured 0 (identical logits) at every position of
 * all 25 cases; 1e-12 leaves room for nothing but float noise in the JSON. Sums × 1.01 measure ≥ 1.9e-4.
 */
const EXACT_BOUND = 1e-12;
/**
 * Largest 1 − cos for the WGSL runtime in llama numerics. For the quants its decode kernels compute as ggml does,
 * operation for operation (docs/numerics.md): measured 0 at every position of the 15 quantized cells, as for the CPU
 * dispatcher. F32 and F16 go through the float kernels, which agree to float-summation precision (measured ≤ 2.2e-8
 * and ≤ 2.9e-7). One bound, 1e-6, for all: sums × 1.01 measure ≥ 1.9e-4, two orders of magnitude above it.
 */
function wgslBound(_type: GGMLType): number {
  return 1e-6;
}
/** Routed-expert output RMS / residual RMS at position 0 must reach this at every measured layer (see LOUD). */
const MIN_LOUDNESS = 0.15;

function moeLayers(m: TestModel): number[] {
  return planModel(m.config, nVocab).moeLayers;
}

async function withDispatch<T>(
  m: TestModel,
  behaviour: DispatcherBehaviour,
  run: (server: RunningServer, d: TestDispatcher) => Promise<T>,
  opts: {
    deadlineMs?: number;
    slots?: number;
    quietMs?: number;
    args?: string[];
    env?: Record<string, string>;
    /** Set up the dispatcher before the coordinator starts (versions it speaks). */
    setup?: (d: TestDispatcher) => void;
    /** The protocol version every answered request must have been on (default 2). */
    version?: DispatchVersion;
  } = {},
): Promise<T> {
  const sock = join(dir, `xd-${process.pid}-${socketCounter++}.sock`);
  const d = await TestDispatcher.start(sock, m.path, behaviour);
  d.quietMs = opts.quietMs ?? 0;
  opts.setup?.(d);
  const server = await startServer({
    model: m.path,
    slots: opts.slots ?? 1,
    args: ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', String(opts.deadlineMs ?? 250), ...(opts.args ?? [])],
    ...(opts.env ? { env: opts.env } : {}),
  });
  try {
    const hello = await d.waitForHello();
    const deadlineMs = opts.deadlineMs ?? 250;
    const c = m.config;
    assert.deepEqual(
      { nLayer: hello.nLayer, nEmbd: hello.nEmbd, nExpert: hello.nExpert, nExpertUsed: hello.nExpertUsed, deadlineMs: hello.deadlineMs },
      { nLayer: c.layers, nEmbd: c.nEmbd, nExpert: c.nExpert, nExpertUsed: c.nExpertUsed, deadlineMs },
      'HELLO as the coordinator was started',
    );
    const out = await run(server, d);
    assert.deepEqual(d.stats.protocolErrors, [], 'the dispatcher met no protocol error');
    const version = opts.version ?? 2;
    const versions = [...new Set(d.stats.log.map((r) => r.version))];
    assert.ok(
      versions.every((v) => v === version),
      `requests answered in protocol versions ${versions.join(', ')}, ${version} expected`,
    );
    // Every request as the coordinator was configured: fields the computation itself never looks at included.
    for (const r of d.stats.log) {
      assert.ok(
        r.deadlineUs === deadlineMs * 1000 && r.nEmbd === c.nEmbd && r.nUsed === c.nExpertUsed && r.localNsPerPair < 1e9,
        `request fields off: ${JSON.stringify({ ...r, rows: undefined, sums: undefined })}`,
      );
    }
    return out;
  } finally {
    await server.stop();
    await d.stop();
  }
}

/**
 * The stock server (no dispatch). `--no-repack-exps` keeps the routed-expert weights in ggml's standard layout and
 * repacks the others, as `--expert-dispatch` does, so both runs use the same CPU kernels (repacked kernels round
 * activations differently).
 */
async function stock(m: TestModel, prompts: string[], nPredict: number, extra: Record<string, unknown> = {}): Promise<Completion[]> {
  const server = await startServer({ model: m.path, args: ['--no-repack-exps'] });
  try {
    const out: Completion[] = [];
    for (const p of prompts) out.push(await completeGreedy(server.url, p, nPredict, m.ban, extra));
    return out;
  } finally {
    await server.stop();
  }
}

async function baseline(m: TestModel, nPredict: number, extra: Record<string, unknown> = {}): Promise<Completion> {
  const [c] = await stock(m, [PROMPT], nPredict, extra);
  assert.ok(c && Array.isArray(c.tokens) && c.tokens.length === nPredict, `stock gave ${c?.tokens?.length} tokens, ${nPredict} requested`);
  return c;
}

/**
 * One dispatched completion of PROMPT, judged against `want` by every check, on what the dispatcher answered during
 * it (the server's own 2-token probe at startup, common_context_can_seq_rm, is dispatched too when the dispatcher is
 * connected in time: requests are always counted from a mark).
 */
async function dispatchedRun(
  server: RunningServer,
  d: TestDispatcher,
  m: TestModel,
  want: Completion,
  bound: number,
): Promise<RunCheck & { requests: RequestRecord[] }> {
  const mark = d.mark();
  const logMark = server.log().length;
  const got = await completeGreedy(server.url, PROMPT, N, m.ban, ALL_PROBS);
  const requests = d.since(mark);
  const check = checkRun({
    want,
    got,
    nPredict: N,
    nVocab,
    moeLayers: moeLayers(m),
    nLayer: m.config.layers,
    requests,
    log: server.log().slice(logMark),
    protocolErrors: d.stats.protocolErrors,
    bound,
    ...([
      ...['llama4', 'exaone-moe', 'afmoe', 'granite_swa', 'mimo2', 'laguna', 'lfm2moe', 'jamba', 'granitehybrid'],
      'dots3note',
      'qwen4exp',
      'minimax-01',
      'kimi-linear',
    ].includes(m.config.arch) && {
      evaluation: SWA_EVALUATION,
    }),
    ...(m.config.arch === 'hy_v3' && { evaluation: LAST_LAYER_ALL_ROWS }),
    ...(['gpt-oss', 'step35', 'gemma4', 'deepseek4', 'cohere2moe', 'bailingmoe3'].includes(m.config.arch) && {
      evaluation: GPT_OSS_EVALUATION,
    }),
  });
  return { ...check, requests };
}

/**
 * Llama 4's chunked attention and the sliding-window layers of gpt-oss, exaone-moe, afmoe, granite_swa, mimo2, laguna
 * and dots3note keep a windowed cache (lfm2moe a short-convolution state, jamba and granitehybrid a Mamba state, qwen4exp
 * a delta-net state, minimax-01 a lightning-attention state, kimi-linear a KDA state), which cannot be rolled back:
 * llama-server evaluates the prompt's last tokens in a graph of their own to checkpoint before them
 * (harness/dispatch-checks.ts).
 */
const SWA_EVALUATION: PromptEvaluation = { checkpointSplit: true };
/** hy_v3's graph keeps every row through its last layer and drops the unwanted ones after it. */
const LAST_LAYER_ALL_ROWS: PromptEvaluation = { lastLayerAllRows: true };
/**
 * gpt-oss's, step35's and gemma4's graphs (sliding-window layers too) keep every row through their last layer (they
 * drop the unwanted rows after the layers); so does deepseek4's (it drops them after the last layer's hyper-connection
 * mix), whose windowed and compressed caches are checkpointed the same way; and cohere2moe's (windowed layers); and
 * bailingmoe3's (it drops them after the output norm), whose KDA state is checkpointed the same way.
 */
const GPT_OSS_EVALUATION: PromptEvaluation = { checkpointSplit: true, lastLayerAllRows: true };

function gridConfig(arch: ArchName, type: GGMLType): Partial<ModelConfig> & { arch: ArchName } {
  // Q4_K and the other 256-element super-block types (the K and IQ quants of the full quant grid) need rows of 256.
  const width = type === GGMLType.Q4_K || (QUANT_GRID_TYPES.includes(type) && requireQuantType(type).blockSize === 256) ? 256 : 64;
  // Llama 4 routes each token to one expert (Scout, Maverick); its MoE layers are 1 and 3 of 4.
  const llama4 = arch === 'llama4';
  return {
    arch,
    layers: llama4 ? 4 : 3,
    nEmbd: width,
    ff: width,
    sharedFf: width,
    nExpert: 8,
    nExpertUsed: llama4 ? 1 : 2,
    type,
    seed: 22,
    expertScale: LOUD,
  };
}

/**
 * The router ran on the coordinator as the model asks (router authority): the weights it sent for each token are
 * positive and sum to the routed scaling factor (sigmoid gates normalised, then scaled), the ids of a token are
 * distinct, and with expert groups they lie in at most `expertGroupsUsed` groups. Returns the problems found.
 */
function routingProblems(requests: readonly RequestRecord[], c: ModelConfig, routing: Routing): string[] {
  const problems: string[] = [];
  const want = routing.norm ? routing.scale || 1 : undefined;
  const perGroup = c.expertGroups > 0 ? c.nExpert / c.expertGroups : 0;
  for (const r of requests) {
    if (!r.ids || !r.probs) return ['requests were not captured'];
    for (let t = 0; t < r.nTokens; t++) {
      const ids = Array.from(r.ids.subarray(t * r.nUsed, (t + 1) * r.nUsed));
      const probs = Array.from(r.probs.subarray(t * r.nUsed, (t + 1) * r.nUsed));
      const sum = probs.reduce((a, b) => a + b, 0);
      if (probs.some((p) => !(p > 0))) problems.push(`layer ${r.layer} token ${t}: weights ${probs.join(', ')}`);
      if (want !== undefined && Math.abs(sum - want) > 1e-5 * want)
        problems.push(`layer ${r.layer} token ${t}: weights sum to ${sum}, not ${want}`);
      if (new Set(ids).size !== ids.length) problems.push(`layer ${r.layer} token ${t}: ids ${ids.join(', ')} repeat`);
      if (perGroup > 0) {
        const groups = new Set(ids.map((id) => Math.floor(id / perGroup)));
        if (groups.size > c.expertGroupsUsed)
          problems.push(`layer ${r.layer} token ${t}: ids ${ids.join(', ')} span ${groups.size} groups`);
      }
    }
  }
  return problems;
}

/**
 * The negative controls and the check that must catch each (others may fail too). The first two are applied at
 * generation steps only: position 0 (the prompt's logits) stays exact and the error shows later, so a check that
 * looked at the first positions only would miss them.
 */
const CONTROLS: Array<{ behaviour: DispatcherBehaviour; caughtBy: RegExp; atGeneration: boolean }> = [
  { behaviour: 'drop-one', caughtBy: /1 − cos/, atGeneration: true },
  { behaviour: 'sums-x1.01', caughtBy: /1 − cos/, atGeneration: true },
  { behaviour: 'prompt-only', caughtBy: /pairs served/, atGeneration: false },
];

const GRID_TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_K];
/**
 * Every other weight type the workers read (issue 26: the IQ family, MXFP4, Q2_K…Q5_1, BF16, Q5_K, Q6_K), on qwen3moe,
 * with the same controls: `npm run test:quant:grid` (QUANT_GRID=full). They compute through the same dispatch path
 * and the same ggml-exact / WGSL backends the five cells above take, so npm test keeps its five. The honest CPU
 * dispatcher is ggml-exact, so a type it does not emulate (BF16) is left out.
 */
const QUANT_GRID_TYPES: readonly GGMLType[] =
  process.env.QUANT_GRID === 'full' ? KERNEL_TYPES.types.filter((t) => !GRID_TYPES.includes(t) && GGML_EXACT_TYPES.has(t)) : [];
/**
 * The later families (issue 25) differ from the first five in the loader, the attention and the router, not in the
 * expert FFN the workers compute (the same kernels): a float and a K-quant cell each keep `npm test` bounded.
 */
const FAMILY_GRID_TYPES = [GGMLType.F32, GGMLType.Q4_K];
/**
 * The kin families (tools/model-arch-kin.ts: SiLU-gated experts behind another family's tensors and their own keys)
 * get one cell each in `npm test`, Q4_K (the K-quant path workers take bit for bit; the float path is the other
 * families' F32 cells), and their F32 cell in `npm run test:families:full` (EXPERTSWARM_FAMILIES=full).
 */
const KIN_GRID_TYPES = process.env.EXPERTSWARM_FAMILIES === 'full' ? FAMILY_GRID_TYPES : [GGMLType.Q4_K];
/**
 * Kin families generated once `npm test` had little time left (its 45 minutes nearly spent): granite, minicpm and
 * mistral3 (granitemoe's and llama's layout under their own names and multipliers), deepseek2-ocr (deepseek2's routed
 * layers behind plain attention), granite_swa (sinks in windowed layers, a fused shared expert beside fused gate/up
 * experts; its Q4_K cell took 32 s here), mimo2 (windowed layers with sinks) and cohere2moe (parallel residual) take
 * both cells in `npm run test:families:full` only. laguna keeps its Q4_K cell in `npm test` (8.8 s here): sigmoid routing with a
 * required selection bias and scaling, a shared expert, windowed layers. What the others' workers compute — split or
 * fused SiLU-gated experts, windowed layers' checkpoints — `npm test` covers in mistral4's, afmoe's and laguna's
 * cells; llama-loads loads and runs each of them in `npm test`.
 */
const KIN_FULL_ONLY: readonly string[] = [
  ...[
    'granite',
    'minicpm',
    'mistral3',
    'deepseek2-ocr',
    'granite_swa',
    'mimo2',
    'deepseek32',
    'glm-dsa',
    'lfm2moe',
    'jamba',
    'granitehybrid',
    'dots3note',
    'minimax-01',
    'kimi-linear',
    'bailingmoe3',
  ],
  // parallel residual, windowed layers keeping every row through the last layer
  'cohere2moe',
];
/**
 * Families and file variants generated once `npm test` had no time left, both cells in `npm run test:families:full`
 * only: qwen4exp (gated delta nets beside sparse attention, hyper-connections) and deepseek4's hash layers (the first
 * two layers pick their experts by token id from `ffn_gate_tid2eid`).
 */
const FULL_ONLY_CASES: readonly string[] = ['qwen4exp', 'deepseek4 with hash layers'];
/**
 * The WGSL subtest of a cell runs in `npm test` for the first five architectures, and for any other cell only when no
 * cell before it had the same work for a worker (WgslBackend.workShape: the layers' shapes, matrix types, expert
 * variant and fused gate/up, and the top-k): its runtime would then build the same kernels and run them on calls of
 * the same shape, on other random weights. On this 2-vCPU machine a Q4_K cell's WGSL run took ~6 s on SwiftShader
 * (186 s over the grid's 32 Q4_K cells, 2026-12-07); most of the later families' experts are the first five's plain
 * SiLU-gated ones. `npm run test:families:full` runs it in every cell.
 */
const WGSL_EVERY_CELL = process.env.EXPERTSWARM_FAMILIES === 'full';
const wgslShapesRun = new Map<string, string>();
function gridTypes(name: string): GGMLType[] {
  if (name === 'qwen3moe') return [...GRID_TYPES, ...QUANT_GRID_TYPES];
  if (FIRST_FIVE.includes(name)) return GRID_TYPES;
  if (FULL_ONLY_CASES.includes(name)) return process.env.EXPERTSWARM_FAMILIES === 'full' ? FAMILY_GRID_TYPES : [];
  if (!isKinArch(name)) return FAMILY_GRID_TYPES;
  return KIN_FULL_ONLY.includes(name) && process.env.EXPERTSWARM_FAMILIES !== 'full' ? [] : KIN_GRID_TYPES;
}
const NO_RESIDUAL_PROBE: readonly string[] = [
  ...['llama4', 'gpt-oss', 'grok', 'step35', 'gemma4', 'deepseek4'],
  // layer norms (dbrx, phimoe; phimoe's with biases), a dense MLP beside the experts (arctic), post-norms and a gated
  // attention output (afmoe): graphs the probe does not walk
  ...['dbrx', 'phimoe', 'arctic', 'afmoe'],
  // attention sinks (granite_swa, mimo2) or a gate on the attention output (laguna): position 0's attention output is
  // not Wo·(Wv·x)
  ...['granite_swa', 'mimo2', 'laguna'],
  // parallel residual (cohere2moe): the FFN reads the attention's input, not the residual after it
  'cohere2moe',
  // short-convolution (lfm2moe) and Mamba (jamba, granitehybrid) layers
  ...['lfm2moe', 'jamba', 'granitehybrid'],
  // a gate per head on the attention output (dots3note); hyper-connections and delta nets (qwen4exp); lightning
  // attention and a residual of the normed input (minimax-01); KDA layers (kimi-linear, bailingmoe3)
  ...['dots3note', 'qwen4exp', 'minimax-01', 'kimi-linear', 'bailingmoe3'],
];
const FIRST_FIVE: readonly string[] = ['qwen3moe', 'qwen2moe', 'deepseek', 'llama', 'olmoe'];
const gridBaselines = new Map<string, number[]>();

function fmt(x: number): string {
  return x === 0 ? '0' : x.toExponential(1);
}

/**
 * The grid's cells: every non-hybrid architecture (the hybrid families, with linear-attention layers, have their own
 * grid: expert-dispatch-hybrid.test.ts), and variants a family takes from its file rather than its architecture:
 * per-expert scale tensors (issue 25), on qwen3moe.
 */
const GRID_CASES: Array<{ name: string; arch: ArchName; extra?: Partial<ModelConfig> }> = [
  ...ARCHITECTURES.filter((a) => !isHybridArch(a)).map((arch) => ({ name: arch as string, arch })),
  { name: 'qwen3moe with per-expert scales', arch: 'qwen3moe', extra: { expertScales: true } },
  { name: 'deepseek4 with hash layers', arch: 'deepseek4', extra: { hashLayers: 2 } },
];

for (const { name, arch, extra } of GRID_CASES) {
  for (const type of gridTypes(name)) {
    test(`${name} ${GGMLType[type]}: dispatch gives stock's logits at every position; dropped expert, sums × 1.01 and prompt-only serving are caught; WGSL gives stock's tokens where its work is new`, async (t: TestContext) => {
      const m = await testModel({ ...gridConfig(arch, type), ...extra });
      const want = await baseline(m, N, ALL_PROBS);
      const distinct = new Set(want.tokens).size;
      assert.ok(
        distinct >= MIN_DISTINCT,
        `the stock baseline has ${distinct} distinct tokens of ${N} (need ≥ ${MIN_DISTINCT}): pick another seed or prompt`,
      );
      gridBaselines.set(`${name}/${type}`, want.tokens);
      assert.ok(promptTokens(want) > 1, 'the prompt is more than one token (generation steps are the one-row requests)');
      const shape = `${await WgslBackend.workShape(m.path, moeLayers(m))} top-${m.config.nExpertUsed}`;
      const sameAs = WGSL_EVERY_CELL || FIRST_FIVE.includes(name) ? undefined : wgslShapesRun.get(shape);
      if (!wgslShapesRun.has(shape)) wgslShapesRun.set(shape, `${name} ${GGMLType[type]}`);
      let wgsl: WgslBackend | undefined;
      try {
        await withDispatch(
          m,
          'all',
          async (server, d) => {
            // A worker rounds as the coordinator says it computes (HELLO); warmed up before the first completion.
            const { numerics } = d.stats.hellos[0] as Hello;
            assert.equal(numerics, 'llama', 'linkcpp-server computes as llama.cpp CPU backend does');
            const gpu = sameAs === undefined ? await WgslBackend.open(m.path, moeLayers(m), { numerics }) : undefined;
            wgsl = gpu;
            d.capture = true;
            const honest = await dispatchedRun(server, d, m, want, EXACT_BOUND);
            d.capture = false;
            assert.deepEqual(honest.failures, [], `${d.backend.name}: ${honest.failures.join('\n')}`);
            const routing = routingOf(arch);
            if (routing)
              assert.deepEqual(routingProblems(honest.requests, m.config, routing).slice(0, 5), [], 'the router as the model asks');
            const [first] = await tokenize(server.url, PROMPT);
            // The residual probe walks from layer 0 through dense-free stacks; Llama 4's first MoE layer is its second
            // (after a dense one), and gpt-oss's, grok's, step35's and gemma4's graphs have what the probe does not
            // model (biases, sinks; grok's multipliers and extra norms; step35's head-wise gates; gemma4's scaled
            // embeddings and normed branches), so their loudness is judged by the controls below (a dropped expert must
            // move the logits) and by llama-loads (each variant's distinctive part moves the logits).
            const loud = NO_RESIDUAL_PROBE.includes(arch)
              ? []
              : await expertLoudness(m.path, m.config, first as number, honest.requests.slice(0, moeLayers(m).length));
            for (const l of loud) {
              assert.ok(l.rowCosine > 0.999, `residual probe off the coordinator's rows at layer ${l.layer} (cos ${l.rowCosine})`);
              assert.ok(
                l.ratio >= MIN_LOUDNESS,
                `layer ${l.layer}: routed-expert RMS / residual RMS ${l.ratio.toFixed(3)} < ${MIN_LOUDNESS}`,
              );
            }
            const notes = [
              `distinct ${distinct}`,
              `loudness ${loud.map((l) => `L${l.layer} ${l.ratio.toFixed(2)}`).join(' ')}`,
              `exact: max 1−cos ${fmt(honest.maxDistance)}`,
            ];

            for (const c of CONTROLS) {
              d.behaviour = c.behaviour;
              const r = await dispatchedRun(server, d, m, want, EXACT_BOUND);
              assert.ok(r.failures.length > 0, `negative control ${c.behaviour} passed every check`);
              assert.ok(
                r.failures.some((f) => c.caughtBy.test(f)),
                `negative control ${c.behaviour} was not caught by ${c.caughtBy}: ${r.failures.join(' | ')}`,
              );
              if (c.atGeneration) assert.equal(r.distances[0], 0, `${c.behaviour} applies after the prompt: position 0 is exact`);
              notes.push(`${c.behaviour}: max ${fmt(r.maxDistance)}${r.tokensEqual ? '' : ', tokens differ'}`);
            }
            t.diagnostic(notes.join('; '));

            d.behaviour = 'all';
            if (!gpu) {
              t.diagnostic(`WGSL runtime: the same work for a worker as ${sameAs}'s, run there (every cell: npm run test:families:full)`);
              return;
            }
            d.backend = gpu;
            await t.test("WGSL runtime, llama numerics: stock's tokens, every request served", async (st) => {
              const w = await dispatchedRun(server, d, m, want, wgslBound(type));
              st.diagnostic(`wgsl: max 1−cos ${fmt(w.maxDistance)}${w.tokensEqual ? '' : ', tokens differ'}`);
              assert.deepEqual(w.failures, [], `${d.backend.name}: ${w.failures.join('\n')}`);
            });
          },
          { deadlineMs: 5000 },
        );
      } finally {
        wgsl?.close();
      }
    });
  }
}

test('the grid baselines differ across types: F32, F16 and Q8_0 of one architecture are not all the same', (t: TestContext) => {
  for (const arch of ARCHITECTURES) {
    const [a, b, c] = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0].map((ty) => gridBaselines.get(`${arch}/${ty}`)?.join());
    if (a === undefined || b === undefined || c === undefined) continue; // grid cases filtered out of this run
    t.diagnostic(`${arch}: F32 ${a === b ? '=' : '≠'} F16, F16 ${b === c ? '=' : '≠'} Q8_0, F32 ${a === c ? '=' : '≠'} Q8_0`);
    assert.ok(!(a === b && b === c), `${arch}: F32, F16 and Q8_0 give the same 64 tokens`);
  }
});

const small = { layers: 3, nEmbd: 64, ff: 64, sharedFf: 64, nExpert: 8, nExpertUsed: 2, type: GGMLType.Q8_0, seed: 23, expertScale: LOUD };

test('half of the pairs served, the rest reported not served → same tokens, both paths used', async () => {
  // gpt-oss, grok, step35, minimax-m3, gemma4, deepseek4 and scaled qwen3moe: the coordinator's own half runs the
  // variant (biases and SwiGLU-OAI, GELU, the clamped SiLU, SwiGLU-OAI without biases, fused gate/up with a down
  // scale alone, DeepSeek-V4's swiglu_clamp, per-expert scales) in the dispatch path's local ops
  const cases = [
    { arch: 'qwen3moe', extra: {} },
    { arch: 'deepseek', extra: {} },
    { arch: 'gpt-oss', extra: {} },
    { arch: 'grok', extra: {} },
    { arch: 'step35', extra: {} },
    { arch: 'minimax-m3', extra: {} },
    { arch: 'gemma4', extra: {} },
    { arch: 'deepseek4', extra: {} },
    { arch: 'qwen3moe', extra: { expertScales: true } },
  ] as const;
  for (const { arch, extra } of cases) {
    const m = await testModel({ arch, ...small, ...extra });
    const want = await baseline(m, 64);
    await withDispatch(m, 'half', async (server, d) => {
      const mark = d.mark();
      const got = await completeGreedy(server.url, PROMPT, 64, m.ban);
      const answered = d.since(mark);
      assert.deepEqual(got.tokens, want.tokens, arch);
      const served = answered.reduce((s, r) => s + r.served, 0);
      const local = answered.reduce((s, r) => s + r.notServed, 0);
      assert.ok(served > 0 && local > 0, `${arch}: served ${served}, not served ${local}`);
      const how = ['gpt-oss', 'step35', 'gemma4', 'deepseek4'].includes(arch) ? GPT_OSS_EVALUATION : {};
      const asked = expectedRequests(moeLayers(m), m.config.layers, promptTokens(got), 64, how);
      assert.equal(answered.length, asked.length, `${arch}: every MoE layer of every evaluation asked`);
      assert.equal(served + local, asked.reduce((s, r) => s + r.nTokens, 0) * m.config.nExpertUsed, `${arch}: every pair asked`);
      // The coordinator measured its own cost for the pairs it computed and reports it in later requests.
      assert.ok(
        d.stats.localCosts.some((ns) => ns > 0),
        'local cost per pair reported',
      );
    });
  }
});

const FAULTS: Array<{ behaviour: DispatcherBehaviour; name: string }> = [
  { behaviour: 'stall', name: 'a stalling dispatcher (no CLAIM)' },
  { behaviour: 'stall-result', name: 'a dispatcher that claims every pair and never sends the RESULT' },
  { behaviour: 'die', name: 'a dying dispatcher' },
  { behaviour: 'garbage', name: 'a garbage-sending dispatcher (instead of the CLAIM)' },
  { behaviour: 'garbage-result', name: 'a dispatcher that claims every pair and sends garbage instead of the RESULT' },
];

for (const { behaviour, name } of FAULTS) {
  test(`${name}: same tokens, bounded time, next request served, fault logged once`, async () => {
    const m = await testModel({ arch: 'qwen3moe', ...small });
    const want = await baseline(m, 64);
    const deadlineMs = 200;
    await withDispatch(
      m,
      behaviour,
      async (server, d) => {
        const t0 = performance.now();
        const got = await completeGreedy(server.url, PROMPT, 64, m.ban);
        const ms = performance.now() - t0;
        assert.deepEqual(got.tokens, want.tokens);
        const bound = deadlineMs * moeLayers(m).length + 3000;
        assert.ok(ms < bound, `request took ${ms.toFixed(0)} ms, bound ${bound} ms`);
        assert.ok(d.stats.requests >= 1, 'the dispatcher was asked');
        const again = await completeGreedy(server.url, PROMPT, 16, m.ban);
        assert.deepEqual(again.tokens, want.tokens.slice(0, 16), 'the server keeps serving');
        const incident = 'computing experts locally until it recovers';
        const incidents = logLines(
          await waitForLog(
            () => server.log(),
            (log) => log.includes(incident),
            undefined,
            incident,
          ),
          incident,
        );
        assert.ok(incidents.length >= 1 && incidents.length <= 2, `logged ${incidents.length} times:\n${incidents.join('\n')}`);
      },
      { deadlineMs },
    );
  });
}

/** One completion of PROMPT judged by every check of dispatch-checks.ts against the stock baseline. */
async function exactRun(server: RunningServer, d: TestDispatcher, m: TestModel, want: Completion): Promise<void> {
  const r = await dispatchedRun(server, d, m, want, EXACT_BOUND);
  assert.deepEqual(r.failures, [], r.failures.join('\n'));
}

const V1_MODEL = { arch: 'qwen3moe' as const, ...small };

test('version 1: a dispatcher that acknowledges 1 gets v1 frames and serves every pair with stock logits; so does a coordinator told to offer 1', async () => {
  const m = await testModel(V1_MODEL);
  const want = await baseline(m, N, ALL_PROBS);
  await withDispatch(
    m,
    'all',
    async (server, d) => {
      assert.deepEqual(d.stats.versions[0], { offered: 3, agreed: 1 }, 'the coordinator offers 3 and takes the ack of 1');
      await exactRun(server, d, m, want);
      await waitForLog(() => server.log(), /expert-dispatch: connected to dispatcher at .*, protocol version 1/);
    },
    // -lv 4: libllama's info lines (the agreed version) are printed at trace verbosity
    { deadlineMs: 5000, version: 1, args: ['-lv', '4'], setup: (d) => (d.maxVersion = 1) },
  );
  await withDispatch(
    m,
    'half',
    async (server, d) => {
      assert.ok(
        d.stats.versions.every((v) => v.offered === 1 && v.agreed === 1),
        `LINKCPP_EXPERT_DISPATCH_VERSION=1 offers 1: ${JSON.stringify(d.stats.versions)}`,
      );
      const mark = d.mark();
      const got = await completeGreedy(server.url, PROMPT, N, m.ban);
      assert.deepEqual(got.tokens, want.tokens);
      const answered = d.since(mark);
      const served = answered.reduce((s, r) => s + r.served, 0);
      assert.ok(served > 0 && answered.every((r) => r.notServed > 0), `served ${served} pairs, the rest computed locally`);
    },
    { deadlineMs: 5000, version: 1, env: { LINKCPP_EXPERT_DISPATCH_VERSION: '1' } },
  );
});

test('an old dispatcher that closes on a newer HELLO: the coordinator steps down (3, then 2, then 1), is served every pair with stock logits, logs no fault', async () => {
  const m = await testModel(V1_MODEL);
  const want = await baseline(m, N, ALL_PROBS);
  await withDispatch(
    m,
    'all',
    async (server, d) => {
      assert.deepEqual(d.stats.versions.slice(0, 3), [
        { offered: 3, agreed: null },
        { offered: 2, agreed: null },
        { offered: 1, agreed: 1 },
      ]);
      await exactRun(server, d, m, want);
      await waitForLog(() => server.log(), /closed the connection on a version 3 HELLO; offering version 2/);
    },
    {
      deadlineMs: 5000,
      version: 1,
      args: ['-lv', '4'],
      setup: (d) => {
        d.maxVersion = 1;
        d.closeOnNewerHello = true;
      },
    },
  );
});

test('version 2 with every pair claimed and served: the CLAIM comes before the coordinator computes, the RESULT carries the sums; stock logits', async () => {
  const m = await testModel(V1_MODEL);
  const want = await baseline(m, N, ALL_PROBS);
  await withDispatch(
    m,
    'all',
    async (server, d) => {
      assert.deepEqual(d.stats.versions[0], { offered: 3, agreed: 2 });
      await exactRun(server, d, m, want);
      assert.ok(
        d.stats.log.every((r) => r.claimed === r.nTokens * r.nUsed && r.served === r.claimed),
        'every pair claimed and served',
      );
      await waitForLog(() => server.log(), /expert-dispatch: connected to dispatcher at .*, protocol version 2/);
    },
    { deadlineMs: 5000, args: ['-lv', '4'] },
  );
});

test('version 2, every pair claimed and every other one served (late workers): the coordinator computes the rest after the RESULT; same tokens, no fault', async () => {
  for (const arch of ['qwen3moe', 'deepseek'] as const) {
    const m = await testModel({ arch, ...small });
    const want = await baseline(m, 32);
    await withDispatch(
      m,
      'late-half',
      async (server, d) => {
        const mark = d.mark();
        const logMark = server.log().length;
        const got = await completeGreedy(server.url, PROMPT, 32, m.ban);
        assert.deepEqual(got.tokens, want.tokens, arch);
        const answered = d.since(mark);
        const asked = expectedRequests(moeLayers(m), m.config.layers, promptTokens(got), 32);
        assert.equal(answered.length, asked.length, `${arch}: every MoE layer of every evaluation asked and answered`);
        for (const r of answered) {
          assert.equal(r.claimed, r.nTokens * r.nUsed, 'every pair claimed');
          assert.ok(r.served > 0 && r.served < r.claimed, `some claimed pairs served, not all: ${r.served} of ${r.claimed}`);
        }
        const fallback = logLines(server.log().slice(logMark), FALLBACK_LINE);
        assert.deepEqual(fallback, [], 'claimed pairs not served are no fault');
      },
      { deadlineMs: 5000 },
    );
  }
});

/** Invalid frames on a v2 connection, and the reason the coordinator must log for each. */
const INVALID_V2: Array<{ behaviour: DispatcherBehaviour; name: string; why: RegExp }> = [
  { behaviour: 'serve-unclaimed', name: 'a RESULT serving a pair that was not claimed', why: /served pair that was not claimed/ },
  { behaviour: 'response-in-v2', name: 'a v1 RESPONSE on a version 2 connection', why: /unexpected frame kind 4/ },
];

for (const { behaviour, name, why } of INVALID_V2) {
  test(`${name}: the coordinator drops the connection, computes locally, keeps stock's tokens`, async () => {
    const m = await testModel(V1_MODEL);
    const want = await baseline(m, 32);
    await withDispatch(
      m,
      behaviour,
      async (server, d) => {
        const got = await completeGreedy(server.url, PROMPT, 32, m.ban);
        assert.deepEqual(got.tokens, want.tokens);
        assert.ok(d.stats.requests >= 1, 'the dispatcher was asked');
        const incidents = logLines(await waitForLog(() => server.log(), FALLBACK_LINE, undefined, 'the local fallback'), FALLBACK_LINE);
        assert.ok(incidents.length >= 1 && incidents.length <= 2, `logged ${incidents.length} times:\n${incidents.join('\n')}`);
        assert.match(incidents[0] as string, why);
        // one dropped connection per incident, then a cool-down: far fewer requests than one per layer and token
        assert.ok(d.stats.requests < 32, `${d.stats.requests} requests while the dispatcher kept answering invalidly`);
      },
      { deadlineMs: 1000 },
    );
  });
}

test('a HELLO_ACK of version 2 to a coordinator offering 1 is refused: no request, stock tokens, the reason logged once', async () => {
  const m = await testModel(V1_MODEL);
  const want = await baseline(m, 16);
  await withDispatch(
    m,
    'all',
    async (server, d) => {
      const got = await completeGreedy(server.url, PROMPT, 16, m.ban);
      assert.deepEqual(got.tokens, want.tokens);
      assert.equal(d.stats.requests, 0, 'never connected, never asked');
      assert.ok(d.stats.versions.length >= 1 && d.stats.versions.every((v) => v.offered === 1));
      const lines = logLines(await waitForLog(() => server.log(), FALLBACK_LINE, undefined, 'the refusal'), FALLBACK_LINE);
      assert.equal(lines.length, 1, lines.join('\n'));
      assert.match(lines[0] as string, /protocol version 2 \(want 1\)/);
    },
    {
      env: { LINKCPP_EXPERT_DISPATCH_VERSION: '1' },
      setup: (d) => (d.ackVersion = 2),
    },
  );
});

test('a dispatcher that answers "local" with a quiet window is not asked again during it', async () => {
  const m = await testModel({ arch: 'qwen3moe', ...small });
  const want = await baseline(m, 32);
  await withDispatch(
    m,
    'local',
    async (server, d) => {
      const got = await completeGreedy(server.url, PROMPT, 32, m.ban);
      assert.deepEqual(got.tokens, want.tokens);
      assert.equal(d.stats.requests, moeLayers(m).length, 'one request per MoE layer, then quiet');
    },
    { quietMs: 60_000 },
  );
});

test('no dispatcher listening: the coordinator serves alone and says so once', async () => {
  const m = await testModel({ arch: 'qwen3moe', ...small });
  const want = await baseline(m, 16);
  const server = await startServer({ model: m.path, args: ['--expert-dispatch', join(dir, 'nobody-here.sock')] });
  try {
    const got = await completeGreedy(server.url, PROMPT, 16, m.ban);
    assert.deepEqual(got.tokens, want.tokens);
    const cannot = 'expert-dispatch: cannot connect';
    await waitForLog(
      () => server.log(),
      (log) => log.includes(cannot),
      undefined,
      cannot,
    );
    await new Promise((r) => setTimeout(r, 1500)); // a few background reconnect attempts
    const lines = logLines(server.log(), cannot);
    assert.equal(lines.length, 1, lines.join('\n'));
  } finally {
    await server.stop();
  }
});

test('4 slots generating concurrently with dispatch on: the tokens of stock, every pair served; /slots, /health, /metrics as stock', async () => {
  const m = await testModel({ ...gridConfig('qwen2moe', GGMLType.Q8_0) });
  const prompts = ['The swarm serves', 'hello world', 'A volunteer opens a page', 'numbers 1 2 3'];
  const nPredict = 32;
  const want = await stock(m, prompts, nPredict);
  await withDispatch(
    m,
    'all',
    async (server, d) => {
      const mark = d.mark();
      const outs = await Promise.all(prompts.map((p) => completeGreedy(server.url, p, nPredict, m.ban)));
      const answered = d.since(mark);
      for (const [i, o] of outs.entries()) {
        assert.equal(o.tokens?.length, nPredict, `slot output ${i}: ${o.tokens?.length} tokens`);
        assert.deepEqual(o.tokens, want[i]?.tokens, `prompt ${JSON.stringify(prompts[i])}: concurrent dispatch differs from stock alone`);
      }
      // Every (token, expert) pair of every sequence was served, however the server batched them: per sequence and
      // MoE layer, the prompt's rows (one in the last layer, which keeps only the rows whose logits are wanted) and
      // one row per generated token but the last.
      const nUsed = m.config.nExpertUsed;
      const rowsPerSeq = (promptN: number): number =>
        moeLayers(m).reduce((s, layer) => s + (layer === m.config.layers - 1 ? 1 : promptN) + nPredict - 1, 0);
      const wantPairs = nUsed * outs.reduce((s, o) => s + rowsPerSeq(promptTokens(o)), 0);
      const served = answered.reduce((s, r) => s + r.served, 0);
      assert.equal(served, wantPairs, `served ${served} pairs, expected ${wantPairs}`);
      assert.equal(
        answered.reduce((s, r) => s + r.notServed, 0),
        0,
      );
      const fallback = logLines(server.log(), FALLBACK_LINE);
      assert.deepEqual(fallback, [], 'no local fallback');
      const health = await fetch(`${server.url}/health`);
      assert.equal(health.status, 200);
      const slots = (await (await fetch(`${server.url}/slots`)).json()) as Array<{ id: number; is_processing: boolean }>;
      assert.equal(slots.length, 4);
      assert.ok(slots.every((s) => s.is_processing === false));
      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      assert.match(metrics, /llamacpp:tokens_predicted_total \d+/);
    },
    { slots: 4, args: ['--metrics'], deadlineMs: 5000 },
  );
});
