/**
 * `linkcpp-server --experts-on-demand` (coordinator/patches/0004-experts-on-demand.patch): the routed experts stay out
 * of the coordinator's memory unless it computes them. On a generated MoE model whose routed experts are nearly all of
 * its bytes (qwen3moe Q8_0, 4 layers, 128 experts of 256 × 256, top-4: 107 MB of experts, 2 MB of everything else),
 * after the same greedy completion:
 *  (a) a dispatcher that serves every pair (the test dispatcher, GgmlExactBackend: the coordinator's own arithmetic):
 *      the coordinator's resident pages of the model file stay below the non-expert bytes plus a few experts (those of
 *      llama-server's 2-token start-up check, computed before the dispatcher is connected) and do not grow at all
 *      while it serves, nor does it read the file meanwhile (no read-ahead pulls experts into the page cache);
 *  (b) a dispatcher that answers "local" (the coordinator computes everything): they grow by the experts it touched;
 *  (c) --experts-on-demand without a dispatcher (and after --warmup, which it must undo): same tokens as the stock
 *      `--no-repack-exps` server, only the touched experts resident.
 * The tokens of (a), (b), (c) and the stock server are identical.
 *
 * Residency is read from /proc/<pid>/pagemap (harness/proc-memory.ts), per byte range of the file, so the
 * binary's and the libraries' file pages (in RssFile too) do not count. The model file is dropped from the page cache
 * before each server starts: the kernel may cache a file in large folios, and mapping one page of one maps all of it.
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GGMLType } from '../../gguf/quant-types.ts';
import { parseHubArgs } from '../../hub/cli.ts';
import { Hub, defaultConfig } from '../../hub/hub.ts';
import { FALLBACK_LINE } from '../../harness/dispatch-checks.ts';
import { completeGreedy, startServer, type Completion } from '../../harness/linkcpp.ts';
import { testModel } from '../../harness/models.ts';
import { MiB, dropFromPageCache, fileResidency, modelLayout, procMemory, type FileResidency } from '../../harness/proc-memory.ts';
import { TestDispatcher, type DispatcherBehaviour, type ExpertBackend } from '../../harness/test-dispatcher.ts';

const dir = await mkdtemp(join(tmpdir(), 'es-on-demand-'));
after(() => rm(dir, { recursive: true, force: true }));

const LAYERS = 4;
const N_EXPERT = 128;
const N_USED = 4;
/** expertScale 2: the routed branch loud, so a wrong expert sum would move the tokens. */
const m = await testModel({
  arch: 'qwen3moe',
  layers: LAYERS,
  nEmbd: 256,
  ff: 256,
  nExpert: N_EXPERT,
  nExpertUsed: N_USED,
  type: GGMLType.Q8_0,
  seed: 13,
  expertScale: 2,
});
const layout = await modelLayout(m.path);
/** One expert's gate, up and down matrices. */
const EXPERT_BYTES = layout.expertBytes / (LAYERS * N_EXPERT);
const PROMPT = 'The swarm serves a model that is too large for one machine';
const N = 16;
/** The JS dispatcher is slow on a loaded machine: never let the coordinator time it out in (a). */
const DEADLINE = ['--expert-dispatch-deadline-ms', '10000'];

interface Run {
  completion: Completion;
  /** Resident model-file bytes once healthy (after llama-server's start-up check) and after the completion. */
  start: FileResidency;
  end: FileResidency;
  /** Bytes the coordinator read from storage during the completion (/proc/<pid>/io), page faults and read-ahead included. */
  readBytes: number;
  log: string;
}

async function run(args: string[], t: { diagnostic(s: string): void }, label: string, dispatcher?: TestDispatcher): Promise<Run> {
  dropFromPageCache(m.path);
  const server = await startServer({ model: m.path, args });
  try {
    const pid = server.proc.pid as number;
    const start = fileResidency(pid, m.path, layout);
    if (dispatcher) await dispatcher.waitForHello();
    const before = procMemory(pid);
    const completion = await completeGreedy(server.url, PROMPT, N, m.ban);
    assert.equal(completion.tokens.length, N);
    const end = fileResidency(pid, m.path, layout);
    const p = procMemory(pid);
    const readBytes = p.readBytes - before.readBytes;
    t.diagnostic(
      `${label}: model file resident ${MiB(start.experts)} → ${MiB(end.experts)} MiB of ${MiB(layout.expertBytes)} MiB experts, ` +
        `${MiB(end.other)} MiB of the rest (${MiB(layout.fileBytes - layout.expertBytes)} MiB); ` +
        `VmRSS ${MiB(p.vmRss)} MiB (RssFile ${MiB(p.rssFile)}, RssAnon ${MiB(p.rssAnon)}); during the completion ` +
        `${MiB(readBytes)} MiB read from storage, ${p.majorFaults - before.majorFaults} major faults`,
    );
    return { completion, start, end, readBytes, log: server.log() };
  } finally {
    await server.stop();
  }
}

async function withDispatcher(
  behaviour: DispatcherBehaviour,
  t: { diagnostic(s: string): void },
): Promise<Run & { stats: TestDispatcher['stats']; touched: Set<number> }> {
  const sock = join(dir, `${behaviour}.sock`);
  const d = await TestDispatcher.start(sock, m.path, behaviour);
  // Which experts the completion routes to (the same in every run: the tokens are the same), as the dispatcher sees them.
  const touched = new Set<number>();
  const inner = d.backend;
  const recording: ExpertBackend = {
    name: `${inner.name}, recording`,
    layerSums(layer, rows, ids, probs, nTokens, nUsed) {
      for (const e of ids) touched.add(layer * N_EXPERT + e);
      return inner.layerSums(layer, rows, ids, probs, nTokens, nUsed);
    },
  };
  d.backend = recording;
  try {
    const r = await run(['--experts-on-demand', '--expert-dispatch', sock, ...DEADLINE], t, `dispatcher '${behaviour}'`, d);
    return { ...r, stats: d.stats, touched };
  } finally {
    await d.stop();
  }
}

let stock: Completion | undefined;
let touchedBytes = 0;

test('stock --no-repack-exps server: the reference tokens', async (t) => {
  const r = await run(['--no-repack-exps'], t, 'stock --no-repack-exps');
  stock = r.completion;
  // Without --experts-on-demand the whole file is mapped populated: every expert is resident from the start.
  assert.ok(r.start.experts > 0.9 * layout.expertBytes, `${MiB(r.start.experts)} MiB of experts resident at start`);
});

test('(a) the swarm serves every pair: the coordinator never reads an expert in', async (t) => {
  assert.ok(stock);
  const r = await withDispatcher('all', t);
  assert.deepEqual(r.completion.tokens, stock.tokens, 'tokens as the stock server');
  assert.ok(r.stats.servedPairs > 0 && r.stats.notServedPairs === 0, `${r.stats.servedPairs} served, ${r.stats.notServedPairs} not`);
  assert.deepEqual(r.stats.protocolErrors, []);
  assert.equal(r.log.split('\n').filter((l) => FALLBACK_LINE.test(l)).length, 0, 'no local fallback');
  touchedBytes = r.touched.size * EXPERT_BYTES;
  t.diagnostic(`the completion routed to ${r.touched.size} of ${LAYERS * N_EXPERT} experts (${MiB(touchedBytes)} MiB)`);
  // Nothing read in while serving (a page or two of slack where a non-expert tensor shares a page with an expert one).
  assert.ok(r.end.experts - r.start.experts <= 4 * 4096, `experts resident grew by ${r.end.experts - r.start.experts} bytes`);
  // …nor read into the page cache: no read-ahead around other faults (2 × read_ahead_kb of the file, experts included).
  assert.ok(r.readBytes <= 2 ** 20, `${MiB(r.readBytes)} MiB read from storage while the swarm served`);
  // At most the start-up check's experts (2 tokens × top-4 per layer, before the dispatcher was connected) and the rest.
  const startUpCheck = 2 * N_USED * LAYERS * EXPERT_BYTES;
  assert.ok(r.end.experts <= startUpCheck + 1 * 2 ** 20, `${MiB(r.end.experts)} MiB of experts resident`);
  assert.ok(r.end.experts + r.end.other < layout.otherTensorBytes + startUpCheck + 2 * 2 ** 20, 'model file resident');
  assert.ok(r.end.experts < 0.1 * layout.expertBytes);
});

test('(b) the dispatcher answers local: the coordinator reads in the experts it computes', async (t) => {
  assert.ok(stock && touchedBytes > 0);
  const r = await withDispatcher('local', t);
  assert.deepEqual(r.completion.tokens, stock.tokens, 'tokens as the stock server');
  assert.equal(r.stats.servedPairs, 0);
  assert.ok(r.end.experts >= 0.5 * touchedBytes, `${MiB(r.end.experts)} MiB resident, ${MiB(touchedBytes)} MiB touched`);
  assert.ok(r.end.experts - r.start.experts >= 0.4 * touchedBytes, 'grown while computing');
  // …and only those: what it did not compute stays on disk.
  assert.ok(r.end.experts <= touchedBytes + 2 * N_USED * LAYERS * EXPERT_BYTES + 2 * 2 ** 20, `${MiB(r.end.experts)} MiB`);
});

test('(c) --experts-on-demand alone (even after --warmup): stock tokens, only the touched experts resident', async (t) => {
  assert.ok(stock && touchedBytes > 0);
  const r = await run(['--warmup', '--experts-on-demand'], t, '--experts-on-demand alone');
  assert.deepEqual(r.completion.tokens, stock.tokens, 'the flag does not change the tokens');
  // The warmup would have computed every expert: the flag turned it off.
  assert.ok(r.start.experts < 0.1 * layout.expertBytes, `${MiB(r.start.experts)} MiB of experts resident at start`);
  assert.ok(r.end.experts >= 0.5 * touchedBytes && r.end.experts <= 0.9 * layout.expertBytes, `${MiB(r.end.experts)} MiB`);
});

test('the hub option: --experts-on-demand (flag, env, config) reaches the coordinator it starts', async (t) => {
  const on = parseHubArgs(['--model', m.path, '--experts-on-demand'], {});
  assert.ok(on !== 'help' && on.expertsOnDemand === true);
  const env = parseHubArgs(['--model', m.path], { EXPERTSWARM_EXPERTS_ON_DEMAND: '1' });
  assert.ok(env !== 'help' && env.expertsOnDemand === true);
  const off = parseHubArgs(['--model', m.path], {});
  assert.ok(off !== 'help' && off.expertsOnDemand === false);

  dropFromPageCache(m.path);
  const hub = new Hub(
    defaultConfig({ stateDir: ':memory:', models: [{ name: 'od', path: m.path }], expertsOnDemand: true, slots: 1, ctxPerSlot: 512 }),
  );
  try {
    await hub.load();
    await hub.start();
    const proc = hub.coordinatorProcess('od');
    assert.ok(proc?.pid !== undefined, 'the hub started the coordinator');
    assert.ok(proc.spawnargs.includes('--experts-on-demand'), proc.spawnargs.join(' '));
    // At rest (no warmup, the dispatcher connected): only the start-up check's experts are resident.
    const r = fileResidency(proc.pid, m.path, layout);
    t.diagnostic(`hub-run coordinator at rest: ${MiB(r.experts)} MiB of ${MiB(layout.expertBytes)} MiB experts resident`);
    assert.ok(r.experts < 0.1 * layout.expertBytes);
  } finally {
    await hub.stop();
  }
});
