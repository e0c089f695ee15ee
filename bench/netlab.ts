/**
 * The swarm over the network lab's full profiles (issue 29, docs/netlab.md): at each profile, a saturated coordinator
 * alone against the same coordinator with volunteers behind NAT on that link, side by side in one run.
 *
 *   A  a hub with `--dispatch off` (the coordinator alone), in the lab's hub namespace;
 *   B  a hub with `--dispatch auto` (the latency-aware claims, protocol v2) beside it, and one headless volunteer per
 *      MoE layer (`expertswarm volunteer --max-slices 1`) in a home namespace with the profile, behind the router's
 *      NAT and the link emulator; the market recruits them when the load saturates B's coordinator.
 *
 * Both hubs run in their own process (harness/netlab-hub.ts) with 4 slots, `-t 1`, polled every 500 ms, saturated at 3
 * busy slots, the production deadline (250 ms cap). Each round sends `streams` concurrent streaming greedy completions
 * (more lanes than slots) until `streams × requests` requests have ended; rounds alternate A, B, B, A, … after a warm-up
 * on each (B's runs until every MoE layer is held and past the grace window). Per profile it prints the decode ratio
 * B/A (Σ tokens / wall, per round, median), the recruitment latency (B's load start → every layer held: saturation,
 * offer, the slice's download over the link, the engine), pairs served / fallback / late, the hub's per-worker
 * latency, the link's bytes per generated token per MoE layer (the router's counters on the home's interface over B's
 * measured rounds), and whether every request's token ids equal A's.
 *
 *   npm run bench:netlab [-- --profiles lan,broadband,far,mobile --rounds 2 --tokens 64 --streams 6 --requests 1]
 *
 * The model (`--shape`): bench/shapes.ts's FRAMES shape by default (the realistic layer, n_embd 2048, ff 768, with 8
 * experts, all routed: ~21 MiB a layer's slice, which a 5 Mbit/s link downloads in ~35 s; the realistic 128 experts'
 * 340 MiB would take minutes at far), or QUICK (n_embd 512, 32 experts, ff 256: the coordinator's experts cost it
 * microseconds, so the claims decline every volunteer and the run checks only that nobody slows the whole). Needs
 * root (the lab's namespaces). No CPU pinning: the hubs' processes own their coordinators here.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import OpenAI from 'openai';
import type { WorkerRow } from '../protocol/dashboard.ts';
import { DEFAULT_POLLER } from '../hub/poller.ts';
import { createLab, HUB_ADDRESS, type Lab } from '../harness/netlab.ts';
import { type LabHub, startLabHub, stopLabHub } from '../harness/netlab-hub.ts';
import { PROFILES, type ProfileName, profileOf } from '../harness/netlab-profiles.ts';
import { dispatchMap, pairOutcomes, until } from '../harness/swarm.ts';
import { FRAMES, QUICK, benchModel, describeShape, volunteerBudget } from './shapes.ts';
import type { HubProcessSpec } from '../harness/hub-process.ts';
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import { median } from '../shaders/computer.ts';

const { values } = parseArgs({
  options: {
    profiles: { type: 'string', default: 'lan,broadband,far,mobile' },
    rounds: { type: 'string', default: '2' },
    tokens: { type: 'string', default: '64' },
    streams: { type: 'string', default: '6' },
    requests: { type: 'string', default: '1' },
    'deadline-ms': { type: 'string', default: '250' },
    shape: { type: 'string', default: 'frames' },
  },
});
const int = (v: string | undefined, name: string): number => {
  const x = Number(v);
  if (!Number.isInteger(x) || x < 1) throw new Error(`--${name} must be a positive integer, got ${v}`);
  return x;
};
const PROFILE_NAMES = (values.profiles ?? '').split(',').filter(Boolean) as ProfileName[];
for (const p of PROFILE_NAMES) profileOf(p); // an unknown name throws, naming the known ones
const ROUNDS = int(values.rounds, 'rounds');
const N_TOKENS = int(values.tokens, 'tokens');
const STREAMS = int(values.streams, 'streams');
const REQUESTS = int(values.requests, 'requests');
const DEADLINE_MS = int(values['deadline-ms'], 'deadline-ms');
const SHAPES = { frames: FRAMES, quick: QUICK } as const;
const SHAPE = SHAPES[values.shape as keyof typeof SHAPES];
if (!SHAPE) throw new Error(`--shape must be ${Object.keys(SHAPES).join(' or ')}, got ${values.shape}`);
const SLOTS = 4;
if (STREAMS <= SLOTS) throw new Error(`--streams must exceed the ${SLOTS} slots, got ${STREAMS}`);
const LAYERS = 2;
const PORT_A = 8080;
const PORT_B = 8081;
const BIN = fileURLToPath(new URL('../bin/expertswarm.js', import.meta.url));
const log = (line: string): void => console.log(`· ${line}`);

const WORDS =
  'the swarm serves a model that is too large for one machine each layer routes every token to a few experts and the experts rest on the computers of people who volunteered them'.split(
    ' ',
  );
const N_PROMPTS = STREAMS * REQUESTS;
const PROMPTS = Array.from(
  { length: N_PROMPTS },
  (_, i) => `Request ${i}: ${Array.from({ length: 40 }, (_, k) => WORDS[(i * 7 + k) % WORDS.length]).join(' ')}.`,
);

interface Round {
  hub: 'A' | 'B';
  ids: number[][];
  tokens: number;
  wallMs: number;
  errors: number;
}

async function stream(client: OpenAI, p: number, ban: readonly number[]): Promise<number[] | null> {
  try {
    const s = await client.completions.create({
      model: 'm',
      prompt: PROMPTS[p] as string,
      max_tokens: N_TOKENS,
      temperature: 0,
      seed: 1,
      logprobs: 1,
      stream: true,
      logit_bias: Object.fromEntries(ban.map((id) => [String(id), -100])),
      // llama-server's own fields
      ...({ ignore_eos: true, cache_prompt: false } as object),
    });
    const ids: number[] = [];
    for await (const chunk of s)
      for (const t of (chunk.choices[0]?.logprobs as { content?: Array<{ id: number }> } | null)?.content ?? []) ids.push(t.id);
    return ids;
  } catch (e) {
    log(`  request ${p} failed: ${e instanceof Error ? e.message : e}`);
    return null;
  }
}

/** STREAMS lanes drain the prompts (`count` requests), or run until `stop()` says so. */
async function runLoad(url: string, hub: 'A' | 'B', ban: readonly number[], o: { count?: number; stop?: () => boolean }): Promise<Round> {
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 2, timeout: 600_000 });
  const ids: number[][] = Array.from({ length: N_PROMPTS }, () => []);
  let next = 0;
  let errors = 0;
  let tokens = 0;
  const more = (): boolean => (o.stop ? !o.stop() : next < (o.count ?? 0));
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: STREAMS }, async () => {
      while (more()) {
        const p = next++ % N_PROMPTS;
        const got = await stream(client, p, ban);
        if (got === null) errors++;
        else {
          ids[p] = got;
          tokens += got.length;
        }
      }
    }),
  );
  return { hub, ids, tokens, wallMs: performance.now() - t0, errors };
}

const rate = (r: Round): number => r.tokens / (r.wallMs / 1000);

/**
 * Counting rules (no target) for the home's interface in the router: INPUT/OUTPUT see the hub port's traffic, which
 * the link emulator in the router terminates and forwards; FORWARD sees what passes through the kernel NAT alone.
 */
function countRules(lan: string): string[][] {
  const c = ['-m', 'comment', '--comment', 'xs-bench'];
  return [
    ['INPUT', '-i', lan, ...c],
    ['OUTPUT', '-o', lan, ...c],
    ['FORWARD', '-i', lan, ...c],
    ['FORWARD', '-o', lan, ...c],
  ];
}

/** Bytes the home's interface carried both ways, by the counting rules. */
async function linkBytes(lab: Lab): Promise<number> {
  const { stdout } = await lab.exec('router', 'iptables-save', ['-c', '-t', 'filter']);
  let sum = 0;
  for (const l of stdout.split('\n')) {
    const m = /^\[\d+:(\d+)\]/.exec(l);
    if (m && l.includes('--comment xs-bench')) sum += Number(m[1]);
  }
  return sum;
}

interface ProfileResult {
  profile: string;
  ratio: number;
  ratesA: number[];
  ratesB: number[];
  recruitS: number;
  pairs: Record<string, number>;
  latencies: string;
  bytesPerTokenLayer: number;
  identical: string;
  errors: number;
  load: string;
}

async function runProfile(name: ProfileName, modelPath: string, ban: readonly number[], budgetMb: number): Promise<ProfileResult> {
  const loadStart = loadavg()[0] as number;
  const lab = await createLab({ homes: [{ name: 'v', profile: name }], tcpPorts: [PORT_B] });
  const dir = mkdtempSync(join(tmpdir(), `xs-bench-netlab-${name}-`));
  const hubs: LabHub[] = [];
  const vols: ChildProcess[] = [];
  try {
    const spec = (port: number, mode: 'off' | 'auto'): HubProcessSpec => ({
      config: {
        host: HUB_ADDRESS,
        port,
        stateDir: ':memory:',
        models: [{ path: modelPath, name: 'm' }],
        dispatchMode: mode,
        slots: SLOTS,
        ctxPerSlot: 1024,
        threads: 1,
        channel: { heartbeatMs: 1000, idleTimeoutMs: 30_000, loadTimeoutMs: 600_000 },
        dispatchDeadlineMs: DEADLINE_MS,
        poller: { ...DEFAULT_POLLER, intervalMs: 500, timeoutMs: 500 },
        saturation: { saturateAt: 3, targetBase: 1, boost: 1 } as HubProcessSpec['config']['saturation'],
      },
    });
    hubs.push(startLabHub(lab, spec(PORT_A, 'off')), startLabHub(lab, spec(PORT_B, 'auto')));
    await Promise.all(hubs.map((h) => h.ready));
    const urlA = await lab.portal('hub', PORT_A, HUB_ADDRESS);
    const urlB = await lab.portal('hub', PORT_B, HUB_ADDRESS);
    const lan = lab.homes.get('v')?.lan as string;
    for (const [chain, ...rule] of countRules(lan)) await lab.exec('router', 'iptables', ['-I', chain as string, '1', ...rule]);

    log(`${name}: warm-up A`);
    const warmA = await runLoad(urlA, 'A', ban, { count: N_PROMPTS });
    for (let i = 0; i < LAYERS; i++) {
      const args = ['volunteer', '--hub', `http://${HUB_ADDRESS}:${PORT_B}`, '--worker-id', `${name}-v${i}`, '--model', 'm'];
      args.push('--budget-mb', String(budgetMb), '--max-slices', '1', '--quiet');
      // A fresh key and slice cache per profile: each profile's volunteers download their slice over its link.
      args.push('--identity', join(dir, `v${i}.key.json`), '--cache', join(dir, `v${i}-shards`));
      vols.push(lab.spawn('v', process.execPath, [BIN, ...args], { stdio: ['ignore', 'ignore', 'inherit'] }));
    }
    log(`${name}: warm-up B until every MoE layer is held and past the grace window`);
    let held = false;
    let warmDone = false;
    const tLoad = performance.now();
    let recruitS = NaN;
    const warmB = runLoad(urlB, 'B', ban, { stop: () => warmDone });
    try {
      await until('the volunteers holding every MoE layer under load', 600_000, async () => {
        const rows = await dispatchMap(urlB, 'm');
        return new Set(rows.map((r) => r.layer)).size >= LAYERS ? true : undefined;
      });
      held = true;
      recruitS = (performance.now() - tLoad) / 1000;
      log(`${name}: every layer held ${recruitS.toFixed(1)} s after B's load began`);
      await until('no volunteer in its grace window', 120_000, async () => {
        const rows = await dispatchMap(urlB, 'm');
        return rows.every((r) => r.state !== 'grace') ? true : undefined;
      });
    } finally {
      warmDone = true;
      await warmB;
    }
    if (!held) throw new Error('never held');

    const rounds: Round[] = [];
    const bytes0 = await linkBytes(lab);
    const pairs0 = await pairOutcomes(urlB, 'm');
    for (let k = 0; k < ROUNDS; k++)
      for (const h of k % 2 === 0 ? (['A', 'B'] as const) : (['B', 'A'] as const)) {
        const r = await runLoad(h === 'A' ? urlA : urlB, h, ban, { count: N_PROMPTS });
        rounds.push(r);
        log(`${name}: round ${rounds.length} ${h}: ${rate(r).toFixed(2)} tok/s (${r.tokens} tokens, ${(r.wallMs / 1000).toFixed(1)} s)`);
      }
    const bytes1 = await linkBytes(lab);
    const pairs1 = await pairOutcomes(urlB, 'm');
    const pairs = Object.fromEntries(Object.keys(pairs1).map((k) => [k, (pairs1[k] ?? 0) - (pairs0[k] ?? 0)]));
    const ws = ((await (await fetch(`${urlB}/api/dashboard/workers?model=m`)).json()) as { rows: WorkerRow[] }).rows;
    const latencies = ws.map((w) => `${w.id} ${w.latencyMs ?? '-'} ms${w.benched ? ' (benched)' : ''}`).join(', ');
    const ratesA = rounds.filter((r) => r.hub === 'A').map(rate);
    const ratesB = rounds.filter((r) => r.hub === 'B').map(rate);
    const tokensB = rounds.filter((r) => r.hub === 'B').reduce((s, r) => s + r.tokens, 0);
    const same = (h: 'A' | 'B'): string => {
      const rs = rounds.filter((r) => r.hub === h);
      const n = rs.reduce((k, r) => k + r.ids.filter((ids, p) => JSON.stringify(ids) === JSON.stringify(warmA.ids[p])).length, 0);
      return `${n}/${rs.reduce((k, r) => k + r.ids.length, 0)}`;
    };
    const identical = `A ${same('A')}, B ${same('B')}`;
    return {
      profile: name,
      ratio: median(ratesB) / median(ratesA),
      ratesA,
      ratesB,
      recruitS,
      pairs,
      latencies,
      bytesPerTokenLayer: (bytes1 - bytes0) / Math.max(1, tokensB * LAYERS),
      identical,
      errors: rounds.reduce((s, r) => s + r.errors, 0),
      load: `${loadStart.toFixed(1)} → ${(loadavg()[0] as number).toFixed(1)}`,
    };
  } finally {
    for (const v of vols) v.kill('SIGTERM');
    for (const h of hubs) await stopLabHub(h.proc);
    await lab.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const { model } = await benchModel(SHAPE, LAYERS, log);
const budget = volunteerBudget(SHAPE);
log(
  `${new Date().toISOString()}: ${describeShape(SHAPE, LAYERS)}; profiles ${PROFILE_NAMES.join(', ')}; ${ROUNDS} × (A, B) rounds of ${N_PROMPTS} requests × ${N_TOKENS} tokens over ${STREAMS} streams; load ${loadavg()
    .map((x) => x.toFixed(1))
    .join(' / ')}`,
);
const results: ProfileResult[] = [];
for (const p of PROFILE_NAMES) results.push(await runProfile(p, model.path, model.ban, budget.mb));
console.log(
  '\n| profile | ratio B/A (median) | A tok/s | B tok/s | recruited in | pairs served / fallback / late | hub latency | link bytes / token / layer | ids = A warm-up | load |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|');
for (const r of results) {
  const pr = PROFILES[r.profile as ProfileName];
  console.log(
    `| ${r.profile} (${pr.rttMs} ms) | ${r.ratio.toFixed(3)} | ${r.ratesA.map((x) => x.toFixed(2)).join(', ')} | ${r.ratesB.map((x) => x.toFixed(2)).join(', ')} | ` +
      `${r.recruitS.toFixed(1)} s | ${r.pairs.served} / ${r.pairs.fallback} / ${r.pairs.late} | ${r.latencies} | ${Math.round(r.bytesPerTokenLayer)} B | ` +
      `${r.identical}${r.errors ? ` (${r.errors} errors)` : ''} | ${r.load} |`,
  );
}
process.exit(results.every((r) => r.errors === 0) ? 0 : 1);
