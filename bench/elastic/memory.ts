/**
 * Bigger than the coordinator's memory (issue 13): the coordinator's resident memory and decode speed alone against
 * with the swarm serving every MoE layer, with no limit and under a memory limit below the routed-expert bytes, on the
 * realistic generated model of `npm run bench:elastic` (qwen3moe Q4_K, n_embd 2048, 128 experts, top-8, ff 768, two
 * MoE layers: 679 MiB of routed experts, 13 MiB of everything else).
 *
 *   npm run bench:elastic -- --memory [--limit-mb 256] [--tokens 64] [--threads 1] [--timeout-s 300] [--quick]
 *
 * Runs, one coordinator (linkcpp-server, 1 slot, `-t threads`) each, on a private copy of the model file (in the temporary
 * directory) dropped from the page cache before each start, so that every page the coordinator maps is read, and
 * charged to its cgroup, by the coordinator itself (cgroup v1 charges a page to whoever reads it in first):
 *   stock   `--no-repack-exps` (the whole file mapped and populated): the reference tokens;
 *   alone   `--experts-on-demand`: computes every expert itself, reading each in on first use;
 *   swarm   `--experts-on-demand --expert-dispatch S`, every pair served;
 *   and alone and swarm again with the coordinator in a cgroup v1 memory group limited to --limit-mb (a child of this
 *   process's own group; `systemd-run --scope -p MemoryMax=` needs systemd as PID 1, which this container lacks).
 *
 * The swarm here is a stand-in: the in-process test dispatcher (harness/test-dispatcher.ts, behaviour `all`)
 * backed by linkcpp-expert-ref (the coordinator's own expert arithmetic, bit for bit, in a process of its own outside
 * the limit, holding the experts in its memory as volunteers do). Headless volunteers cannot keep up on this CPU-only
 * machine (Dawn on SwiftShader: 0.02–0.07 GFLOP/s, docs/elastic.md "Elastic gain"). The dispatch deadline is 10 s, so
 * that the prompt's layers are served too and nothing falls back (checked: no fallback line, no pair unserved).
 *
 * Per run: the coordinator's VmRSS, RssFile, RssAnon (/proc/<pid>/status) after the completion and at peak (sampled
 * every 200 ms), its resident pages of the model file split into routed experts and the rest (/proc/<pid>/pagemap),
 * major faults and bytes read from storage during the completion (/proc/<pid>/stat, /proc/<pid>/io), the cgroup's
 * max usage, and the decode rate of two streamed greedy completions in a row (`tokens` tokens after a ~40-token prompt;
 * the first reads in what it needs, the second shows the steady state): llama-server's own figure, or, when one did
 * not finish within --timeout-s, tokens received / time since the first. The tokens are compared with stock's.
 * docs/elastic.md ("Bigger than the coordinator's memory") holds the measurements.
 */
import { chmodSync, copyFileSync, existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { FALLBACK_LINE } from '../../harness/dispatch-checks.ts';
import { LINKCPP_SERVER, type RunningServer, startServer } from '../../harness/linkcpp.ts';
import { QUICK, REALISTIC, benchModel } from '../shapes.ts';
import { NativeReference } from '../../harness/native-reference.ts';
import {
  MiB,
  dropFromPageCache,
  fileResidency,
  modelLayout,
  procMemory,
  type FileResidency,
  type ProcMemory,
} from '../../harness/proc-memory.ts';
import { TestDispatcher } from '../../harness/test-dispatcher.ts';

export async function runMemoryBench(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      'limit-mb': { type: 'string' },
      tokens: { type: 'string', default: '64' },
      threads: { type: 'string', default: '1' },
      'timeout-s': { type: 'string', default: '300' },
      quick: { type: 'boolean', default: false },
    },
  });
  const int = (v: string | undefined, name: string): number => {
    const x = Number(v);
    if (!Number.isInteger(x) || x < 1) throw new Error(`--${name} must be a positive integer, got ${v}`);
    return x;
  };
  const N_TOKENS = int(values.tokens, 'tokens');
  const THREADS = int(values.threads, 'threads');
  const TIMEOUT_MS = int(values['timeout-s'], 'timeout-s') * 1000;
  /** Completions per run: the first reads in what it needs, the second shows the steady state. */
  const PASSES = 2;
  // bench:elastic's models (bench/shapes.ts: the same configs, so the cached GGUF is shared).
  const shape = values.quick ? QUICK : REALISTIC;
  const LIMIT = int(values['limit-mb'] ?? String(values.quick ? 48 : 256), 'limit-mb') * 2 ** 20;
  const log = (line: string): void => console.log(`· ${line}`);

  const { model } = await benchModel(shape, 2, log);
  const layout = await modelLayout(model.path);
  log(
    `model ${model.path}: ${MiB(layout.fileBytes)} MiB, routed experts ${MiB(layout.expertBytes)} MiB, other tensors ` +
      `${MiB(layout.otherTensorBytes)} MiB; limit ${MiB(LIMIT)} MiB; load average at start ${loadavg()
        .map((x) => x.toFixed(2))
        .join(' / ')}`,
  );

  const dir = await mkdtemp(join(tmpdir(), 'es-memory-'));
  // A private copy of the GGUF (same disk): a page that another process maps (another bench or test on the cached
  // model) cannot be dropped from the page cache, and is charged to that process's cgroup, not the coordinator's, so
  // under the limit the coordinator would get it for free.
  const modelPath = join(dir, 'model.gguf');
  copyFileSync(model.path, modelPath);
  const cgroupBase = memoryCgroup();
  // The coordinator enters its group before it execs, so that everything it maps is charged there from the start.
  const wrapper = join(dir, 'in-cgroup.sh');
  writeFileSync(wrapper, '#!/bin/sh\necho $$ > "$ES_CGROUP/cgroup.procs" || exit 97\nexec "$ES_BINARY" "$@"\n');
  chmodSync(wrapper, 0o755);
  let cgroup: string | null = null;
  const removeCgroup = (): void => {
    if (cgroup && existsSync(cgroup)) {
      try {
        rmdirSync(cgroup);
      } catch (e) {
        console.error(`could not remove ${cgroup}: ${(e as Error).message}`);
      }
    }
    cgroup = null;
  };
  process.once('exit', removeCgroup);

  const PROMPT =
    'The swarm serves a model that is too large for one machine: each layer routes every token to a few experts, and ' +
    'the experts that are not needed now rest on the computers of people who volunteered them';

  /** One streamed completion of PROMPT (the first with whatever the start left resident, the second after it). */
  interface Pass {
    outcome: string;
    tokens: number[];
    decodeTps: number;
    promptTps: number;
    majorFaults: number;
    readBytes: number;
  }
  interface Result {
    name: string;
    limited: boolean;
    outcome: string;
    passes: Pass[];
    end: ProcMemory | null;
    peakVmRss: number;
    residency: FileResidency | null;
    cgroupMax: number | null;
    served: string;
  }
  const results: Result[] = [];

  async function one(name: string, args: string[], swarm: boolean, limited: boolean): Promise<Result> {
    if (limited && !cgroupBase) return { ...empty(name, limited), outcome: 'skipped (no writable cgroup v1 memory group)' };
    log(`${name}…`);
    let ref: NativeReference | undefined;
    let d: TestDispatcher | undefined;
    let server: RunningServer | undefined;
    const sock = join(dir, 'dispatch.sock');
    try {
      if (swarm) {
        ref = await NativeReference.start(modelPath);
        const r = ref;
        // The stand-in volunteers load their experts before the run (as volunteers hold their slices): one record per layer.
        for (let layer = 0; layer < 2; layer++) {
          await r.compute(layer, {
            rows: new Float32Array(shape.nEmbd),
            ids: new Int32Array(8).map((_, i) => i),
            probs: new Float32Array(8),
            nTokens: 1,
            nUsed: 8,
          });
        }
        d = await TestDispatcher.start(sock, modelPath, 'all');
        d.backend = {
          name: 'linkcpp-expert-ref',
          layerSums: (layer, rows, ids, probs, nTokens, nUsed) => r.compute(layer, { rows, ids, probs, nTokens, nUsed }),
        };
      }
      dropFromPageCache(modelPath);
      if (limited) {
        cgroup = join(cgroupBase as string, `es-memory-${process.pid}`);
        mkdirSync(cgroup);
        writeFileSync(join(cgroup, 'memory.limit_in_bytes'), String(LIMIT));
      }
      const allArgs = [...args, ...(swarm ? ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', '10000'] : [])];
      try {
        server = await startServer({
          model: modelPath,
          threads: THREADS,
          args: allArgs,
          startTimeoutMs: 300_000,
          ...(limited ? { binary: wrapper, env: { ES_CGROUP: cgroup as string, ES_BINARY: LINKCPP_SERVER } } : {}),
        });
      } catch (e) {
        return { ...empty(name, limited), outcome: `did not start: ${(e as Error).message.split('\n')[0]}` };
      }
      const pid = server.proc.pid as number;
      if (d) await d.waitForHello(30_000);
      let peak = 0;
      let last: ProcMemory | null = null;
      const sampler = setInterval(() => {
        try {
          last = procMemory(pid);
          peak = Math.max(peak, last.vmRss);
        } catch {
          // exited
        }
      }, 200);
      const passes: Pass[] = [];
      const alive = (): boolean => server?.proc.exitCode === null && server?.proc.signalCode === null;
      for (let pass = 0; pass < PASSES && alive(); pass++) {
        const at0 = procMemory(pid);
        const c = await streamCompletion(server.url, PROMPT, N_TOKENS, model.ban, TIMEOUT_MS);
        const at1 = alive() ? procMemory(pid) : last;
        passes.push({
          outcome: c.done
            ? 'finished'
            : alive()
              ? `${c.tokens.length} tokens in ${TIMEOUT_MS / 1000} s`
              : `died after ${c.tokens.length} tokens`,
          tokens: c.tokens,
          decodeTps: c.decodeTps,
          promptTps: c.promptTps,
          majorFaults: (at1?.majorFaults ?? Number.NaN) - at0.majorFaults,
          readBytes: (at1?.readBytes ?? Number.NaN) - at0.readBytes,
        });
        if (!c.done) break;
      }
      clearInterval(sampler);
      const end = alive() ? procMemory(pid) : last;
      if (end) peak = Math.max(peak, end.vmRss);
      const residency = alive() ? fileResidency(pid, modelPath, layout) : null;
      const cgroupMax = cgroup ? Number(readFileSync(join(cgroup, 'memory.max_usage_in_bytes'), 'utf8')) : null;
      const oomKills = cgroup ? Number(/oom_kill (\d+)/.exec(readFileSync(join(cgroup, 'memory.oom_control'), 'utf8'))?.[1] ?? 0) : 0;
      const fallback = server
        .log()
        .split('\n')
        .filter((l) => FALLBACK_LINE.test(l));
      const served = d
        ? `${d.stats.servedPairs} pairs served, ${d.stats.notServedPairs} not${fallback.length ? `; FALLBACK: ${fallback[0]}` : ''}`
        : '';
      const outcome = alive()
        ? passes.every((p) => p.outcome === 'finished')
          ? 'finished'
          : 'timed out'
        : `killed (${server.proc.signalCode ?? server.proc.exitCode}${oomKills ? `, ${oomKills} OOM kill` : ''})`;
      return { name, limited, outcome, passes, end, peakVmRss: peak, residency, cgroupMax, served };
    } finally {
      await server?.stop();
      await d?.stop();
      await ref?.close();
      removeCgroup();
    }
  }

  function empty(name: string, limited: boolean): Result {
    return { name, limited, outcome: '', passes: [], end: null, peakVmRss: NaN, residency: null, cgroupMax: null, served: '' };
  }

  try {
    results.push(await one('stock --no-repack-exps', ['--no-repack-exps'], false, false));
    results.push(await one('alone --experts-on-demand', ['--experts-on-demand'], false, false));
    results.push(await one('swarm --experts-on-demand', ['--experts-on-demand'], true, false));
    results.push(await one('alone --experts-on-demand', ['--experts-on-demand'], false, true));
    results.push(await one('swarm --experts-on-demand', ['--experts-on-demand'], true, true));
  } finally {
    removeCgroup();
    await rm(dir, { recursive: true, force: true });
  }

  const ref = results[0]?.passes[0]?.tokens ?? [];
  const same = (t: number[]): string => {
    if (t.length === 0) return '—';
    const n = Math.min(t.length, ref.length);
    const prefixOk = t.slice(0, n).every((x, i) => x === ref[i]);
    return t.length === ref.length ? (prefixOk ? 'identical' : 'DIFFERENT') : prefixOk ? `first ${n} identical` : 'DIFFERENT';
  };
  const f = (x: number | undefined, d = 1): string => (x !== undefined && Number.isFinite(x) ? x.toFixed(d) : '—');
  const mib = (x: number | undefined | null): string => (x === undefined || x === null || !Number.isFinite(x) ? '—' : MiB(x));
  const both = (r: Result, g: (p: Pass) => string): string => (r.passes.length ? r.passes.map(g).join(' / ') : '—');
  console.log(
    `\nlimit ${MiB(LIMIT)} MiB; routed experts ${MiB(layout.expertBytes)} MiB; -t ${THREADS}; ${N_TOKENS} tokens per completion, ` +
      `${PASSES} completions per run (first / second); load average at end ${loadavg()
        .map((x) => x.toFixed(2))
        .join(' / ')}\n`,
  );
  console.log(
    '| run | limit | outcome | decode tok/s | prompt tok/s | read from disk MiB | major faults | VmRSS end / peak MiB | RssFile / RssAnon MiB | model file resident: experts / rest MiB | cgroup max MiB | tokens vs stock |',
  );
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  for (const r of results) {
    console.log(
      `| ${r.name} | ${r.limited ? `${MiB(LIMIT)} MiB` : 'none'} | ${r.outcome} | ${both(r, (p) => f(p.decodeTps))} | ` +
        `${both(r, (p) => f(p.promptTps))} | ${both(r, (p) => mib(p.readBytes))} | ${both(r, (p) => f(p.majorFaults, 0))} | ` +
        `${mib(r.end?.vmRss)} / ${mib(r.peakVmRss)} | ${mib(r.end?.rssFile)} / ${mib(r.end?.rssAnon)} | ` +
        `${mib(r.residency?.experts)} / ${mib(r.residency?.other)} | ${mib(r.cgroupMax)} | ${both(r, (p) => same(p.tokens))} |`,
    );
  }
  for (const r of results) if (r.served) console.log(`${r.name}${r.limited ? ' (limited)' : ''}: ${r.served}`);
}

/** This process's cgroup v1 memory group, if one can be created under it; null otherwise. */
function memoryCgroup(): string | null {
  try {
    const line = readFileSync('/proc/self/cgroup', 'utf8')
      .split('\n')
      .find((l) => /^\d+:memory:/.test(l));
    if (!line) return null;
    const base = join('/sys/fs/cgroup/memory', line.slice(line.indexOf(':memory:') + ':memory:'.length));
    const probe = join(base, `es-memory-probe-${process.pid}`);
    mkdirSync(probe);
    rmdirSync(probe);
    return base;
  } catch (e) {
    console.error(`· no cgroup v1 memory group to limit the coordinator in: ${(e as Error).message}`);
    return null;
  }
}

interface Streamed {
  tokens: number[];
  done: boolean;
  decodeTps: number;
  promptTps: number;
}

/** A greedy streamed /completion; on timeout, what arrived so far (decode rate from the first token to the last). */
async function streamCompletion(url: string, prompt: string, n: number, ban: readonly number[], timeoutMs: number): Promise<Streamed> {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), timeoutMs);
  const tokens: number[] = [];
  const times: number[] = [];
  let timings: { predicted_per_second?: number; prompt_per_second?: number } | undefined;
  let done = false;
  try {
    const r = await fetch(`${url}/completion`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        prompt,
        n_predict: n,
        temperature: 0,
        top_k: 1,
        seed: 1,
        cache_prompt: false,
        ignore_eos: true,
        return_tokens: true,
        stream: true,
        logit_bias: ban.map((id) => [id, false]),
      }),
      signal: ac.signal,
    });
    if (!r.ok || !r.body) throw new Error(`/completion answered ${r.status}`);
    const decoder = new TextDecoder();
    let buf = '';
    const reader = r.body.getReader();
    for (;;) {
      const { done: ended, value } = await reader.read();
      if (ended) break;
      buf += decoder.decode(value, { stream: true });
      let i = buf.indexOf('\n');
      while (i >= 0) {
        const line = buf.slice(0, i).trim();
        buf = buf.slice(i + 1);
        i = buf.indexOf('\n');
        if (!line.startsWith('data: ')) continue;
        const j = JSON.parse(line.slice(6)) as { tokens?: number[]; stop?: boolean; timings?: typeof timings };
        for (const t of j.tokens ?? []) {
          tokens.push(t);
          times.push(performance.now());
        }
        if (j.stop) {
          done = true;
          timings = j.timings;
        }
      }
    }
  } catch (e) {
    if (!ac.signal.aborted && !(e instanceof TypeError)) throw e; // TypeError: the server died mid-stream
  } finally {
    clearTimeout(timer);
  }
  const span = times.length > 1 ? ((times.at(-1) as number) - (times[0] as number)) / 1000 : NaN;
  return {
    tokens,
    done,
    decodeTps: timings?.predicted_per_second ?? (tokens.length - 1) / span,
    promptTps: timings?.prompt_per_second ?? NaN,
  };
}
