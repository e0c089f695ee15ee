/**
 * The hub's share of one layer round trip with a worker that answers at once: a scripted coordinator on the dispatch
 * socket, the real ModelDispatcher and VolunteerChannel, and a `ws` volunteer that answers every work frame with a
 * ready result — no model, no engine, no coordinator build. What is left is the hub's own work (plan, encode, write,
 * decode, merge, write) plus the sockets and the volunteer's codec, without the compute that hides it in
 * `bench:dispatch`. Profile it with `node --cpu-prof --import tsx bench/dispatch-floor.ts`.
 *
 *   node --import tsx bench/dispatch-floor.ts [--requests 3000] [--warmup 500] [--tokens 1] [--volunteer inline|process]
 *
 * `--volunteer process` runs the volunteer in a child process (its own event loop: loopback wakeups as in the real
 * swarm); `inline` (default) in this one, which leaves the hub's CPU alone in the numbers.
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadavg } from 'node:os';
import { PerformanceObserver, constants as perfConstants } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';
import { Registry } from 'prom-client';
import { WebSocket } from 'ws';
import { VolunteerChannel, type ChannelHost } from '../hub/channel/channel.ts';
import { DispatchMetrics, ModelDispatcher, type ResponseSummary } from '../hub/dispatch/dispatcher.ts';
import { FrameKind, FrameReader, encodeHello, encodeRequest, type DispatchRequest } from '../protocol/dispatch.ts';
import { VOLUNTEER_PATH, decodeWork, encodeClientMessage, encodeResult, parseHubMessage } from '../protocol/channel/index.ts';

const N_EMBD = 2048;
const N_EXPERT = 8;
const TOP_K = 8;

/** The volunteer's side: hello, `loaded` on its assignment, then a result for every work frame at once. */
function runVolunteer(url: string): Promise<WebSocket> {
  const ws = new WebSocket(url);
  ws.binaryType = 'nodebuffer';
  let sums: Float32Array | null = null;
  return new Promise((resolve, reject) => {
    ws.on('open', () =>
      ws.send(
        encodeClientMessage({
          type: 'hello',
          version: 1,
          token: 'bench',
          workerId: 'floor-v0',
          device: { webgpu: false, adapter: null, limits: null, features: [], backend: 'wasm', gflops: 1, memoryBudgetBytes: 1 << 30 },
          numerics: ['exact', 'llama'],
          encodings: ['f32', 'f16'],
          model: '',
          maxExperts: 0,
          agent: 'dispatch-floor',
        }),
      ),
    );
    ws.on('error', reject);
    ws.on('message', (data: Buffer, binary: boolean) => {
      if (!binary) {
        const m = parseHubMessage(data.toString());
        if (m.type === 'assign') {
          ws.send(encodeClientMessage({ type: 'loaded', assignmentId: m.assignmentId, ready: true, backend: 'wasm', gflops: 1 }));
          resolve(ws);
        }
        return;
      }
      const w = decodeWork(data);
      if (!sums || sums.length !== w.nRows * w.nEmbd) sums = new Float32Array(w.nRows * w.nEmbd).fill(0.5);
      ws.send(encodeResult({ workId: w.workId, nRows: w.nRows, nEmbd: w.nEmbd, sums, encoding: w.resultEncoding, computeUs: 0 }));
    });
  });
}

// A child process started with the hub's URL only runs the volunteer.
if (process.env.DISPATCH_FLOOR_VOLUNTEER) {
  await runVolunteer(process.env.DISPATCH_FLOOR_VOLUNTEER);
} else {
  await main();
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      requests: { type: 'string', default: '3000' },
      warmup: { type: 'string', default: '500' },
      tokens: { type: 'string', default: '1' },
      volunteer: { type: 'string', default: 'inline' },
      'gap-ms': { type: 'string', default: '0' },
    },
  });
  const REQUESTS = Number(values.requests);
  const WARMUP = Number(values.warmup);
  const TOKENS = Number(values.tokens);
  const GAP_MS = Number(values['gap-ms']);

  const host: ChannelHost = {
    authenticate: () => 'wallet',
    quarantineReason: () => undefined,
    offer: () => ({ assigned: true, model: 'm', layer: 0, experts: [0, N_EXPERT], n_embd: N_EMBD, n_expert: N_EXPERT }) as never,
    expertBytes: () => 1,
    shard: async () => ({ bytes: 1, digest: `sha256:${'0'.repeat(64)}` }),
    numerics: () => 'llama',
    reserve: () => {},
    serving: () => {},
    forget: () => {},
    creditOf: () => 0,
    event: () => {},
  };
  const channel = new VolunteerChannel(host, { heartbeatMs: 60_000, idleTimeoutMs: 600_000 });
  const http = createServer();
  channel.attach(http);
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  const url = `ws://127.0.0.1:${(http.address() as AddressInfo).port}${VOLUNTEER_PATH}`;

  const dir = mkdtempSync(join(tmpdir(), 'xs-floor-'));
  const socketPath = join(dir, 'd.sock');
  const summaries: ResponseSummary[] = [];
  const channelUs: number[] = [];
  channel.onResult = (_id, rtMs, computeUs) => channelUs.push(rtMs * 1000 - computeUs);
  const d = await ModelDispatcher.listen({
    model: 'm',
    socketPath,
    directory: channel.directory('m'),
    mode: 'always',
    metrics: new DispatchMetrics(new Registry()),
    events: { onServe: () => {}, onUsed: () => {}, onResponse: (s) => summaries.push(s) },
  });

  let child: ReturnType<typeof spawn> | null = null;
  let inline: WebSocket | null = null;
  if (values.volunteer === 'process') {
    child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
      env: { ...process.env, DISPATCH_FLOOR_VOLUNTEER: url },
      stdio: 'inherit',
    });
  } else inline = await runVolunteer(url);
  while (channel.directory('m').workersFor(0).length === 0) await new Promise((r) => setTimeout(r, 20));

  // The coordinator: HELLO v2, then one REQUEST at a time, each answered by a CLAIM and a RESULT.
  const sock: Socket = connect(socketPath);
  sock.setNoDelay(true);
  const reader = new FrameReader();
  // CLAIM and RESULT may come in one chunk: frames queue until awaited.
  const arrived: FrameKind[] = [];
  let want: ((kind: FrameKind) => void) | null = null;
  sock.on('data', (chunk) => {
    for (const { header } of reader.push(chunk)) {
      const w = want;
      want = null;
      if (w) w(header.kind);
      else arrived.push(header.kind);
    }
  });
  const next = (): Promise<FrameKind> => {
    const k = arrived.shift();
    return k !== undefined ? Promise.resolve(k) : new Promise((r) => (want = r));
  };
  await new Promise<void>((r) => sock.once('connect', () => r()));
  sock.write(
    encodeHello(
      { nLayer: 2, nEmbd: N_EMBD, nExpert: N_EXPERT, nExpertUsed: TOP_K, deadlineMs: 250, numerics: 'llama', modelDesc: 'floor' },
      2,
    ),
  );
  await next();
  const req: DispatchRequest = {
    seq: 0,
    layer: 0,
    nTokens: TOKENS,
    nEmbd: N_EMBD,
    nUsed: TOP_K,
    deadlineUs: 250_000,
    localNsPerPair: 100_000,
    rows: Float32Array.from({ length: TOKENS * N_EMBD }, (_, i) => Math.sin(i)),
    ids: Int32Array.from({ length: TOKENS * TOP_K }, (_, i) => i % TOP_K),
    probs: new Float32Array(TOKENS * TOP_K).fill(1 / TOP_K),
  };
  const coordinatorUs: number[] = [];
  /** Each measured request's window (performance.now(), ms), to tell the requests a collection fell in. */
  const windows: Array<[number, number]> = [];
  const gc = watchGc();
  for (let i = 0; i < WARMUP + REQUESTS; i++) {
    if (i === WARMUP) gc.start();
    req.seq = i + 1;
    const t0 = performance.now();
    const claim = next();
    sock.write(encodeRequest(req, 2));
    if ((await claim) !== FrameKind.Claim) throw new Error('expected a CLAIM');
    if ((await next()) !== FrameKind.Result) throw new Error('expected a RESULT');
    if (i >= WARMUP) {
      const t1 = performance.now();
      coordinatorUs.push((t1 - t0) * 1000);
      windows.push([t0, t1]);
    }
    if (GAP_MS > 0) await new Promise((r) => setTimeout(r, GAP_MS));
  }

  const { kinds: gcs, spans } = gc.stop();
  // The requests whose window a collection of this process started in (the floor's p99 with and without them).
  const hit = windows.map(([a, b]) => spans.some(([s]) => s >= a && s <= b));
  const measured = summaries.slice(WARMUP);
  const rows: Array<[string, number[]]> = [
    ['coordinator: REQUEST written → RESULT read', coordinatorUs],
    ['c. dispatcher: REQUEST arrival → RESULT written', measured.map((s) => s.totalMs * 1000)],
    ['b1. arrival → work handed to the link', measured.map((s) => s.dispatchMs * 1000)],
    ['b2. last answer → RESULT written', measured.map((s) => (s.totalMs - s.settledMs) * 1000)],
    ['a. channel: work sent → result decoded', channelUs.slice(WARMUP)],
    ['coordinator, the requests no collection fell in', coordinatorUs.filter((_, i) => !hit[i])],
  ];
  const pct = (xs: number[], p: number): number => {
    const s = [...xs].sort((x, y) => x - y);
    return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))] ?? Number.NaN;
  };
  console.log(
    `dispatch-floor: ${REQUESTS} requests (after ${WARMUP}) of ${TOKENS} token(s), n_embd ${N_EMBD}, top-${TOP_K}; volunteer ${values.volunteer}; ws masking ${wsMasking()}; node ${process.version}; load ${loadavg()
      .map((x) => x.toFixed(2))
      .join(' / ')}`,
  );
  for (const [name, xs] of rows)
    console.log(
      `  ${name.padEnd(50)} p10 ${pct(xs, 10).toFixed(1).padStart(8)} µs  p50 ${pct(xs, 50).toFixed(1).padStart(8)} µs  p99 ${pct(xs, 99).toFixed(1).padStart(8)} µs`,
    );
  console.log(
    `  garbage collections in the measured requests (this process): ${gcs.map((g) => `${g.kind} ${g.count} (${g.ms.toFixed(1)} ms)`).join(', ') || 'none'}; per request ${(gcs.reduce((t, g) => t + g.count, 0) / REQUESTS).toFixed(3)}; requests a collection fell in: ${hit.filter(Boolean).length}`,
  );

  sock.destroy();
  inline?.close();
  child?.kill();
  await d.close();
  await channel.close();
  http.close();
  rmSync(dir, { recursive: true, force: true });
}

/** Counts this process's garbage collections by kind, with their pause time, between start() and stop(). */
function watchGc(): {
  start(): void;
  stop(): { kinds: Array<{ kind: string; count: number; ms: number }>; spans: Array<[number, number]> };
} {
  const names: Record<number, string> = {
    [perfConstants.NODE_PERFORMANCE_GC_MINOR]: 'scavenge',
    [perfConstants.NODE_PERFORMANCE_GC_MAJOR]: 'mark-compact',
    [perfConstants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental marking',
    [perfConstants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak callbacks',
  };
  const seen = new Map<string, { count: number; ms: number }>();
  const spans: Array<[number, number]> = [];
  let on = false;
  const obs = new PerformanceObserver((list) => {
    if (!on) return;
    for (const e of list.getEntries()) {
      const kind = names[(e as unknown as { detail: { kind: number } }).detail.kind] ?? 'other';
      const s = seen.get(kind) ?? { count: 0, ms: 0 };
      s.count++;
      s.ms += e.duration;
      seen.set(kind, s);
      spans.push([e.startTime, e.startTime + e.duration]);
    }
  });
  obs.observe({ entryTypes: ['gc'] });
  return {
    start: () => {
      on = true;
    },
    stop: () => {
      on = false;
      obs.disconnect();
      return { kinds: [...seen].map(([kind, s]) => ({ kind, ...s })), spans };
    },
  };
}

/** How `ws` masks and unmasks client frames here: bufferutil's native addon, or JavaScript (its fallback or ws's loop). */
function wsMasking(): string {
  if (process.env.WS_NO_BUFFER_UTIL) return 'javascript (WS_NO_BUFFER_UTIL set)';
  const req = createRequire(createRequire(import.meta.url).resolve('ws'));
  try {
    return req('bufferutil').unmask === req('bufferutil/fallback').unmask ? 'javascript (bufferutil fallback)' : 'bufferutil (native)';
  } catch {
    return 'javascript (no bufferutil)';
  }
}
