/**
 * Speed of linkcpp-server, side by side in one run:
 *   1. small model (qwen3moe Q8_0): the hook compiled in but dispatch off  vs  the same llama.cpp built without our
 *      patches (at-rest cost of the hook's code, goal ≤ 2 %);
 *   2. small model: every MoE layer dispatched to the test dispatcher (TypeScript CPU reference, unix socket)  vs
 *      local (local runs with --no-repack-exps, which --expert-dispatch implies, so both use the same CPU kernels);
 *   3. the realistic Q4_K model of bench/dispatch.ts (n_embd 2048, 128 experts, top-8, ff 768; cached in
 *      .cache/models): decode AND prompt tokens/s of the stock build (default weight repacking)  vs  a coordinator as a
 *      hub runs it, at rest: `--expert-dispatch` (repacks every weight but the routed experts) with the dispatcher
 *      absent, and with a dispatcher that answers every request LOCAL with the hub's 1 s quiet window (what a hub
 *      without volunteers answers: the first evaluation after each window, e.g. every prompt, takes the hook's local
 *      path). Goal (issue 13): ≥ 0.99 × stock, decode and prompt.
 *
 *   npm run bench:coordinator [-- --rounds 3 --tokens 128 --sections small,dispatched,realistic
 *                               --realistic-servers stock,absent,hub,no-repack --prompt-tokens 256 --realistic-tokens 64
 *                               --realistic-rounds 10 --threads 2]   (--threads: the realistic section's -t)
 */
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir, cpus, loadavg } from 'node:os';
import { testModel } from '../harness/models.ts';
import { completeGreedy, startServer, tokenize } from '../harness/linkcpp.ts';
import { TestDispatcher } from '../harness/test-dispatcher.ts';
import { GGMLType } from '../gguf/quant-types.ts';
import { median } from '../shaders/computer.ts';
import { DEFAULT_QUIET_MS } from '../hub/dispatch/dispatcher.ts';

const root = fileURLToPath(new URL('../', import.meta.url));
const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '20' },
    tokens: { type: 'string', default: '256' },
    'dispatched-tokens': { type: 'string', default: '32' },
    sections: { type: 'string', default: 'small,dispatched,realistic' },
    'realistic-rounds': { type: 'string', default: '10' },
    'realistic-tokens': { type: 'string', default: '64' },
    'realistic-servers': { type: 'string', default: 'stock,absent,hub' },
    'prompt-tokens': { type: 'string', default: '256' },
    threads: { type: 'string', default: '2' },
  },
});
const sections = new Set(values.sections.split(','));
for (const x of sections) {
  if (!['small', 'dispatched', 'realistic'].includes(x)) throw new Error(`--sections takes small, dispatched, realistic; got "${x}"`);
}
const rounds = Number(values.rounds);
const nPredict = Number(values.tokens);
/** The TypeScript dispatcher is slow; fewer tokens give the same tokens/s. */
const nPredictDispatched = Number(values['dispatched-tokens']);

for (const variant of ['stock', 'hooked']) {
  const r = spawnSync('bash', [join(root, 'coordinator/build.sh')], {
    stdio: 'inherit',
    env: { ...process.env, LINKCPP_VARIANT: variant },
  });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
const STOCK = join(root, 'coordinator/bin-stock/linkcpp-server');

const model = await testModel({
  arch: 'qwen3moe',
  layers: 8,
  nEmbd: 512,
  ff: 512,
  nExpert: 32,
  nExpertUsed: 4,
  type: GGMLType.Q8_0,
  seed: 5,
});
const prompt = 'The swarm serves a model that is too large for one machine.';

async function tps(url: string, tokens: number): Promise<number> {
  const out = await completeGreedy(url, prompt, tokens, model.ban);
  return (out.raw.timings as { predicted_per_second: number }).predicted_per_second;
}

/**
 * Both servers stay up; requests alternate between them (order flipped every pair) so that the machine's drift hits
 * both alike, and the ratio is taken per pair. Returns each side's runs and the median of the per-pair ratios b/a.
 */
async function pairwise(a: string, b: string, tokens: number): Promise<{ a: number[]; b: number[]; ratio: number }> {
  await tps(a, 8);
  await tps(b, 8);
  const ra: number[] = [];
  const rb: number[] = [];
  const ratios: number[] = [];
  for (let i = 0; i < rounds; i++) {
    let pa: number;
    let pb: number;
    if (i % 2 === 0) {
      pa = await tps(a, tokens);
      pb = await tps(b, tokens);
    } else {
      pb = await tps(b, tokens);
      pa = await tps(a, tokens);
    }
    ra.push(pa);
    rb.push(pb);
    ratios.push(pb / pa);
  }
  return { a: ra, b: rb, ratio: median(ratios) };
}

const sockDir = mkdtempSync(join(tmpdir(), 'es-bench-'));
const sock = join(sockDir, 'd.sock');
const fmt = (xs: number[]): string => `${xs.map((x) => x.toFixed(1)).join(' ')} (median ${median(xs).toFixed(1)})`;
const report: string[] = [
  `machine: ${cpus().length} × ${cpus()[0]?.model}; load average at start ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' / ')}`,
];

if (sections.has('small')) {
  const stock = await startServer({ model: model.path, binary: STOCK });
  const hookedOff = await startServer({ model: model.path });
  const atRest = await pairwise(stock.url, hookedOff.url, nPredict).finally(async () => {
    await stock.stop();
    await hookedOff.stop();
  });
  report.push(
    `small model: ${model.path} (qwen3moe Q8_0, 8 layers, n_embd 512, 32 experts, top-4)`,
    `decode tokens/s, ${rounds} alternating pairs of requests on servers that stay up:`,
    `  stock build              ${fmt(atRest.a)}`,
    `  hook in, dispatch off    ${fmt(atRest.b)}`,
    `at rest: hook compiled in, dispatch off / stock build = ${atRest.ratio.toFixed(3)} (median of per-pair ratios)  [goal ≥ 0.98]`,
  );
}

if (sections.has('dispatched')) {
  const d = await TestDispatcher.start(sock, model.path, 'all');
  const local = await startServer({ model: model.path, args: ['--no-repack-exps'] });
  const dispatched = await startServer({ model: model.path, args: ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', '10000'] });
  await d.waitForHello();
  const remote = await pairwise(local.url, dispatched.url, nPredictDispatched).finally(async () => {
    await local.stop();
    await dispatched.stop();
    await d.stop();
  });
  report.push(
    `small model, decode tokens/s, ${rounds} alternating pairs:`,
    `  local (--no-repack-exps) ${fmt(remote.a)}`,
    `  all layers dispatched    ${fmt(remote.b)}`,
    `every MoE layer dispatched to the TypeScript test dispatcher on loopback / local = ${remote.ratio.toFixed(3)}`,
  );
}

if (sections.has('realistic')) report.push(...(await realistic()));
console.log(report.join('\n'));

/** User + system CPU seconds a process has used so far (Linux /proc; NaN elsewhere). */
function cpuSeconds(pid: number | undefined): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = f.slice(f.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
  } catch {
    return Number.NaN;
  }
}

interface BenchServer {
  url: string;
  pid: number | undefined;
  stop: () => Promise<void>;
}

/**
 * Section 3: the realistic Q4_K model, stock build vs coordinators as a hub runs them. Per round, each server gets a
 * prompt request (about --prompt-tokens tokens, 1 generated: the server's prompt tokens/s) then a decode request (a
 * short prompt, --realistic-tokens generated: its decode tokens/s); every server stays up, the order of the servers
 * is rotated every round, and the ratios to the stock build are taken per round, so the machine's drift hits all
 * alike. Also reported: the server process's CPU seconds per request (/proc), a figure that contention on a shared
 * machine disturbs less than wall time does (with -t 1 nothing spins; with more threads it counts spinning at
 * barriers; a dispatcher's own CPU is not in it).
 */
async function realistic(): Promise<string[]> {
  const rRounds = Number(values['realistic-rounds']);
  const rTokens = Number(values['realistic-tokens']);
  const promptTokens = Number(values['prompt-tokens']);
  const threads = Number(values.threads);
  // bench/dispatch.ts's realistic model (2 MoE layers): the same config, so the same cached file (≈ 11 min to generate)
  const big = await testModel({
    arch: 'qwen3moe',
    layers: 2,
    nEmbd: 2048,
    ff: 768,
    nExpert: 128,
    nExpertUsed: 8,
    nHead: 16,
    nHeadKv: 4,
    type: GGMLType.Q4_K,
    seed: 11,
  });
  const names = values['realistic-servers'].split(',');
  const hubSock = join(sockDir, 'hub.sock');
  const absentSock = join(sockDir, 'absent.sock');
  const plain = async (o: { binary?: string; args?: string[] }): Promise<BenchServer> => {
    const s = await startServer({ model: big.path, threads, ...o });
    return { url: s.url, pid: s.proc.pid, stop: () => s.stop() };
  };
  const kinds: Record<string, { label: string; start: () => Promise<BenchServer> }> = {
    stock: { label: 'stock build (repacks every weight)', start: () => plain({ binary: STOCK }) },
    absent: { label: 'hooked, --expert-dispatch, dispatcher absent', start: () => plain({ args: ['--expert-dispatch', absentSock] }) },
    hub: {
      label: `hooked, --expert-dispatch, LOCAL + quiet ${DEFAULT_QUIET_MS} ms`,
      start: async () => {
        // what a hub without volunteers answers every request: LOCAL with its default quiet window
        const d = await TestDispatcher.start(hubSock, big.path, 'local');
        d.quietMs = DEFAULT_QUIET_MS;
        const s = await plain({ args: ['--expert-dispatch', hubSock] });
        await d.waitForHello();
        return {
          ...s,
          stop: async () => {
            await s.stop();
            await d.stop();
          },
        };
      },
    },
    'no-repack': { label: 'hooked, --no-repack (every weight standard)', start: () => plain({ args: ['--no-repack'] }) },
    'no-repack-exps': { label: 'hooked, --no-repack-exps, no dispatch', start: () => plain({ args: ['--no-repack-exps'] }) },
  };
  for (const n of names) if (!kinds[n]) throw new Error(`--realistic-servers takes ${Object.keys(kinds).join(', ')}; got "${n}"`);
  if (names[0] !== 'stock') throw new Error('--realistic-servers must start with stock (the ratios are to it)');
  const servers: Array<BenchServer & { name: string }> = [];
  try {
    for (const n of names) servers.push({ name: n, ...(await (kinds[n] as (typeof kinds)[string]).start()) });
    // a prompt of about promptTokens tokens (one ubatch: one graph evaluation, so a hub-like dispatcher sees it whole)
    const sentence = 'The swarm serves a model that is too large for one machine, one expert at a time. ';
    let longPrompt = sentence;
    while ((await tokenize((servers[0] as BenchServer).url, longPrompt)).length < promptTokens) longPrompt += sentence;
    const timed = async (sv: BenchServer, p: string, n: number) => {
      const c0 = cpuSeconds(sv.pid);
      const t = (await completeGreedy(sv.url, p, n, big.ban)).raw.timings as {
        predicted_per_second: number;
        prompt_per_second: number;
        prompt_n: number;
      };
      return { ...t, cpu: cpuSeconds(sv.pid) - c0 };
    };
    const measure = async (sv: BenchServer) => {
      const a = await timed(sv, longPrompt, 1);
      const b = await timed(sv, prompt, rTokens);
      return { prompt: a.prompt_per_second, promptN: a.prompt_n, promptCpu: a.cpu, decode: b.predicted_per_second, decodeCpu: b.cpu };
    };
    for (const sv of servers) await measure(sv); // warm: pages in, first graphs built
    type Row = Awaited<ReturnType<typeof measure>>;
    const got: Row[][] = servers.map(() => []);
    for (let i = 0; i < rRounds; i++) {
      for (let j = 0; j < servers.length; j++) {
        const k = (i + j) % servers.length;
        (got[k] as Row[]).push(await measure(servers[k] as BenchServer));
      }
    }
    const col = (k: number, f: (r: Row) => number): number[] => (got[k] as Row[]).map(f);
    const perRound = (k: number, f: (r: Row) => number): number[] => col(k, f).map((x, i) => x / (col(0, f)[i] as number));
    const promptN = (got[0] as Row[])[0]?.promptN;
    const out = [
      `realistic model: ${big.path} (qwen3moe Q4_K, 2 MoE layers, n_embd 2048, 128 experts, top-8, ff 768, 16 heads (4 kv)), -t ${threads}`,
      `${rRounds} rounds; per round and server (order rotated): a ${promptN}-token prompt (1 generated), then ${rTokens} tokens decoded:`,
    ];
    const w = Math.max(...servers.map((sv) => (kinds[sv.name] as { label: string }).label.length));
    for (let k = 0; k < servers.length; k++) {
      const label = (kinds[(servers[k] as { name: string }).name] as { label: string }).label;
      out.push(`  ${label.padEnd(w)}  decode tokens/s ${fmt(col(k, (r) => r.decode))}`);
      out.push(`  ${' '.repeat(w)}  prompt tokens/s ${fmt(col(k, (r) => r.prompt))}`);
      out.push(
        `  ${' '.repeat(w)}  CPU s per request: prompt ${median(col(k, (r) => r.promptCpu)).toFixed(2)}, decode ${median(col(k, (r) => r.decodeCpu)).toFixed(2)} (medians)`,
      );
    }
    const range = (xs: number[]): string => `${Math.min(...xs).toFixed(3)}–${Math.max(...xs).toFixed(3)}`;
    for (let k = 1; k < servers.length; k++) {
      const label = (kinds[(servers[k] as { name: string }).name] as { label: string }).label;
      const d = perRound(k, (r) => r.decode);
      const p = perRound(k, (r) => r.prompt);
      // CPU: stock's seconds / this one's, so that > 1 is faster, like the tokens/s ratios
      const dc = perRound(k, (r) => 1 / r.decodeCpu);
      const pc = perRound(k, (r) => 1 / r.promptCpu);
      out.push(`  ${label} / stock build (medians of per-round ratios, [range]), goal ≥ 0.99:`);
      out.push(`      decode tokens/s ${median(d).toFixed(3)} [${range(d)}]   prompt tokens/s ${median(p).toFixed(3)} [${range(p)}]`);
      out.push(`      by CPU seconds: decode ${median(dc).toFixed(3)} [${range(dc)}]   prompt ${median(pc).toFixed(3)} [${range(pc)}]`);
    }
    out.push(
      `load average at the end ${loadavg()
        .map((x) => x.toFixed(2))
        .join(' / ')}`,
    );
    return out;
  } finally {
    for (const sv of servers) await sv.stop();
  }
}
