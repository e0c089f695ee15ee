/**
 * The hub's Layer-1 dispatcher (hub/dispatch/dispatcher.ts) on its unix socket.
 *
 * 1. Against a scripted coordinator (the protocol module's encoders on a plain socket): the connection rules (0600,
 *    stale vs live socket file, HELLO first, one request in flight, a second connection replaces the first, size
 *    caps), LOCAL answers, sums and served flags, timeouts → fallback and late, wrong-sized / NaN answers →
 *    rejected, benching and probing, metrics; and the dispatcher's added latency per round trip with instant
 *    workers (printed, not asserted).
 * 2. Against the real coordinator (linkcpp-server --expert-dispatch) on a generated model, with in-process workers
 *    that compute their slices with GgmlExactBackend (the coordinator's own arithmetic, bit for bit): two workers
 *    split each MoE layer's experts; `--dispatch always` → a 32-token greedy completion identical to the stock
 *    server's, ≥ 90 % of routed pairs served; a worker that never answers → identical tokens, its pairs fall back,
 *    it is benched; workers answering a wrong size or NaN → rejected, identical tokens.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Registry } from 'prom-client';
import { DispatchMetrics, ModelDispatcher, type ModelDispatcherOptions, type ResponseSummary } from '../../hub/dispatch/dispatcher.ts';
import type { WorkItem, WorkerLink } from '../../hub/dispatch/worker-link.ts';
import { DEFAULT_CLAIMS } from '../../hub/dispatch/claims.ts';
import {
  type DispatchClaim,
  type DispatchRequest,
  type DispatchResponse,
  type DispatchResult,
  type DispatchVersion,
  FrameKind,
  FrameReader,
  type Hello,
  decodeClaim,
  decodeResponse,
  decodeResult,
  encodeAudit,
  encodeHello,
  encodeRequest,
} from '../../protocol/dispatch.ts';
import { completeGreedy, startServer } from '../../harness/linkcpp.ts';
import { TOP2_OF_8, testModel, type TestModel } from '../../harness/models.ts';
import { GgmlExactBackend } from '../../harness/ggml-exact.ts';
import { FALLBACK_LINE } from '../../harness/dispatch-checks.ts';
import { planModel } from '../../tools/model-arch.ts';
import { buildVocabulary } from '../../tools/tokenizer.ts';

const dir = await mkdtemp(join(tmpdir(), 'es-hd-'));
after(() => rm(dir, { recursive: true, force: true }));
let sockets = 0;
const sockPath = (): string => join(dir, `d${sockets++}.sock`);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Test doubles

/** A worker link whose answers a function decides. */
class FnLink implements WorkerLink {
  inFlight = 0;
  calls = 0;
  constructor(
    readonly workerId: string,
    readonly layer: number,
    readonly begin: number,
    readonly end: number,
    private readonly fn: (w: WorkItem, link: FnLink) => Promise<Float32Array>,
  ) {}

  /** The deadline of each item, ms, in order. */
  readonly deadlines: number[] = [];

  compute(work: WorkItem, deadlineMs: number): Promise<Float32Array> {
    this.calls++;
    this.deadlines.push(deadlineMs);
    this.inFlight++;
    const p = this.fn(work, this);
    p.then(
      () => this.inFlight--,
      () => this.inFlight--,
    );
    return p;
  }
}

/** Answers each row with Σ weight·(local expert + 1), nEmbd times: easy to check. */
const simple = (w: WorkItem): Promise<Float32Array> => {
  const out = new Float32Array(w.nRows * w.nEmbd);
  for (let q = 0; q < w.nPairs; q++) {
    const r = w.rowIndex[q] as number;
    for (let i = 0; i < w.nEmbd; i++)
      out[r * w.nEmbd + i] = (out[r * w.nEmbd + i] as number) + (w.weight[q] as number) * ((w.localExpert[q] as number) + 1);
  }
  return Promise.resolve(out);
};
const poke = (s: Float32Array, i: number, x: number): Float32Array => {
  s[i] = x;
  return s;
};
const never = (): Promise<Float32Array> => new Promise(() => {});
const after_ = (ms: number) => (w: WorkItem) => sleep(ms).then(() => simple(w));

/** A directory over a mutable list of links. */
class Links {
  list: WorkerLink[] = [];
  workersFor(layer: number): readonly WorkerLink[] {
    return this.list.filter((l) => l.layer === layer);
  }
}

type Frame = { kind: FrameKind; payload: Uint8Array; seq: number; version: DispatchVersion };

/**
 * A scripted coordinator: HELLO offering `version` (1 unless told), then one REQUEST at a time, reading each
 * RESPONSE (v1) or CLAIM and RESULT (v2).
 */
class ScriptedCoordinator {
  private readonly reader = new FrameReader();
  private waiting: ((f: Frame) => void) | null = null;
  private readonly queue: Frame[] = [];
  closed = false;
  seq = 0;
  /** The version the dispatcher's HELLO_ACK agreed. */
  version: DispatchVersion = 1;

  private constructor(
    readonly socket: Socket,
    readonly hello: Hello,
  ) {
    socket.on('data', (chunk) => {
      for (const { header, payload } of this.reader.push(chunk)) {
        const f = { kind: header.kind, payload, seq: header.seq, version: header.version };
        if (this.waiting) {
          const w = this.waiting;
          this.waiting = null;
          w(f);
        } else this.queue.push(f);
      }
    });
    socket.on('close', () => {
      this.closed = true;
    });
    socket.on('error', () => {});
  }

  static async connect(
    path: string,
    hello: Partial<Hello> = {},
    sayHello = true,
    offer: DispatchVersion = 1,
  ): Promise<ScriptedCoordinator> {
    const socket = connect(path);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    const h: Hello = {
      nLayer: 4,
      nEmbd: 8,
      nExpert: 16,
      nExpertUsed: 4,
      deadlineMs: 250,
      numerics: 'llama',
      modelDesc: 'scripted',
      ...hello,
    };
    const c = new ScriptedCoordinator(socket, h);
    if (sayHello) {
      socket.write(encodeHello(h, offer));
      const ack = await c.next();
      assert.equal(ack.kind, FrameKind.HelloAck);
      c.version = ack.version;
      assert.equal(new DataView(ack.payload.buffer, ack.payload.byteOffset).getUint32(0, true), 1, 'HELLO accepted');
    }
    return c;
  }

  next(timeoutMs = 2000): Promise<Frame> {
    const q = this.queue.shift();
    if (q) return Promise.resolve(q);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error('no frame in time')), timeoutMs);
      this.waiting = (f) => {
        clearTimeout(t);
        resolve(f);
      };
    });
  }

  request(r: Partial<DispatchRequest> & { ids: Int32Array }): DispatchRequest {
    const nUsed = r.nUsed ?? this.hello.nExpertUsed;
    const nTokens = r.nTokens ?? r.ids.length / nUsed;
    const nEmbd = this.hello.nEmbd;
    return {
      seq: ++this.seq,
      layer: 0,
      nTokens,
      nEmbd,
      nUsed,
      deadlineUs: this.hello.deadlineMs * 1000,
      localNsPerPair: 0,
      rows: r.rows ?? Float32Array.from({ length: nTokens * nEmbd }, (_, i) => i / 7),
      probs: r.probs ?? Float32Array.from({ length: nTokens * nUsed }, (_, i) => 0.5 + i / 8),
      ...r,
    };
  }

  async send(r: DispatchRequest, timeoutMs = 2000): Promise<DispatchResponse> {
    this.socket.write(encodeRequest(r, 1));
    const f = await this.next(timeoutMs);
    assert.equal(f.kind, FrameKind.Response);
    assert.equal(f.seq, r.seq);
    return decodeResponse({ version: 1, kind: f.kind, seq: f.seq, payloadBytes: f.payload.length }, f.payload, this.hello.nEmbd);
  }

  /**
   * v2: writes the REQUEST and reads its CLAIM; `result()` then reads the RESULT (when pairs were claimed). The
   * times are ms from the REQUEST's write.
   */
  async sendV2(
    r: DispatchRequest,
    timeoutMs = 2000,
  ): Promise<{ claim: DispatchClaim; claimMs: number; result: () => Promise<{ result: DispatchResult; ms: number }> }> {
    const t0 = performance.now();
    this.socket.write(encodeRequest(r, 2));
    const f = await this.next(timeoutMs);
    assert.equal(f.kind, FrameKind.Claim, `a CLAIM answers a v2 REQUEST, got kind ${f.kind}`);
    assert.equal(f.seq, r.seq);
    const claim = decodeClaim({ version: 2, kind: f.kind, seq: f.seq, payloadBytes: f.payload.length }, f.payload);
    const claimMs = performance.now() - t0;
    const result = async (): Promise<{ result: DispatchResult; ms: number }> => {
      const g = await this.next(timeoutMs);
      assert.equal(g.kind, FrameKind.Result);
      assert.equal(g.seq, r.seq);
      const res = decodeResult(
        { version: 2, kind: g.kind, seq: g.seq, payloadBytes: g.payload.length },
        g.payload,
        this.hello.nEmbd,
        claim.claimed,
      );
      return { result: res, ms: performance.now() - t0 };
    };
    return { claim, claimMs, result };
  }

  /** Writes a pre-encoded REQUEST and resolves when the RESPONSE frame is in (not decoded: for timing). */
  async sendRaw(bytes: Uint8Array): Promise<FrameKind> {
    this.socket.write(bytes);
    return (await this.next()).kind;
  }

  async waitClosed(timeoutMs = 2000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.closed) {
      if (Date.now() > deadline) throw new Error('the dispatcher did not close the connection');
      await sleep(5);
    }
  }

  close(): void {
    this.socket.destroy();
  }
}

async function dispatcher(links: Links, o: Partial<ModelDispatcherOptions> = {}): Promise<ModelDispatcher> {
  return ModelDispatcher.listen({ model: 'm', socketPath: sockPath(), directory: links, mode: 'always', ...o });
}

// ---------------------------------------------------------------------------------------------
// 1. Against a scripted coordinator

describe('ModelDispatcher against a scripted coordinator', () => {
  test('socket: 0600, a stale file is replaced, a live one is refused', async () => {
    const path = sockPath();
    await writeFile(path, 'stale');
    const d = await ModelDispatcher.listen({ model: 'm', socketPath: path, directory: new Links() });
    try {
      assert.equal((await stat(path)).mode & 0o777, 0o600);
      await assert.rejects(ModelDispatcher.listen({ model: 'm', socketPath: path, directory: new Links() }), /in use/);
    } finally {
      await d.close();
    }
    await assert.rejects(stat(path), 'close removes the socket file');
  });

  test('LOCAL at once when nothing can be dispatched, with a quiet window when no worker is there', async () => {
    const links = new Links();
    const d = await dispatcher(links, { quietMs: 700 });
    const c = await ScriptedCoordinator.connect(d.socketPath);
    try {
      let r = await c.send(c.request({ ids: Int32Array.of(0, 1, 2, 3) }));
      assert.deepEqual([r.mode, r.quietMs], ['local', 700], 'no worker on the layer');
      links.list = [new FnLink('a', 0, 12, 16, simple)];
      r = await c.send(c.request({ ids: Int32Array.of(0, 1, 2, 3) }));
      assert.deepEqual([r.mode, r.quietMs], ['local', 0], 'a worker, but none of its experts routed: no quiet window');
      d.mode = 'off';
      r = await c.send(c.request({ ids: Int32Array.of(12, 13, 14, 15) }));
      assert.deepEqual([r.mode, r.quietMs], ['local', 700], 'mode off');
      d.mode = 'always';
      r = await c.send(c.request({ ids: Int32Array.of(12, 13, 14, 15), deadlineUs: 5_000 }));
      assert.equal(r.mode, 'local', 'a coordinator deadline too short to dispatch in');
      assert.equal(d.totals.localRequests, 4);
      assert.equal(d.totals.pairs.fallback, 16);
    } finally {
      c.close();
      await d.close();
    }
  });

  test('sums and served flags from two workers; pairs nobody holds stay with the coordinator', async () => {
    const links = new Links();
    links.list = [new FnLink('a', 0, 0, 4, simple), new FnLink('b', 0, 4, 8, simple), new FnLink('c', 1, 0, 16, simple)];
    const registry = new Registry();
    const d = await dispatcher(links, { metrics: new DispatchMetrics(registry) });
    const c = await ScriptedCoordinator.connect(d.socketPath);
    try {
      // 2 tokens × 4 used: token 0 → 1 (a), 5 (b), 9 (none), 2 (a); token 1 → 7 (b), 6 (b), 15 (none), 0 (a).
      const req = c.request({ ids: Int32Array.of(1, 5, 9, 2, 7, 6, 15, 0) });
      const r = await c.send(req);
      assert.equal(r.mode, 'served');
      if (r.mode !== 'served') return;
      assert.deepEqual([...r.served], [1, 1, 0, 1, 1, 1, 0, 1]);
      const p = req.probs;
      const want0 = (p[0] as number) * 2 + (p[3] as number) * 3 + (p[1] as number) * 2; // a: experts 1, 2 → local 1, 2; b: 5 → 1
      const want1 = (p[7] as number) * 1 + ((p[4] as number) * 4 + (p[5] as number) * 3); // a: 0 → 1; b: 7, 6 → 4, 3
      for (let i = 0; i < 8; i++) {
        assert.ok(Math.abs((r.sums[i] as number) - want0) < 1e-5, `token 0 feature ${i}: ${r.sums[i]} vs ${want0}`);
        assert.ok(Math.abs((r.sums[8 + i] as number) - want1) < 1e-5, `token 1 feature ${i}`);
      }
      assert.deepEqual(d.totals.pairs, { served: 6, fallback: 2, rejected: 0, late: 0, audited: 0 });
      assert.equal(d.workerStats('a')?.servedPairs, 3);
      assert.equal(d.workerStats('b')?.servedItems, 1);
      const text = await registry.metrics();
      assert.match(text, /expertswarm_dispatch_pairs_total\{model="m",outcome="served"\} 6/);
      assert.match(text, /expertswarm_dispatch_pairs_total\{model="m",outcome="fallback"\} 2/);
      assert.match(text, /expertswarm_dispatch_requests_total\{model="m",mode="served"\} 1/);
      assert.match(text, /expertswarm_dispatch_roundtrip_seconds_count\{model="m"\} 1/);
    } finally {
      c.close();
      await d.close();
    }
  });

  test('timeouts fall back, late answers are counted, a worker that keeps missing is benched and probed back', async () => {
    const links = new Links();
    let slowMs = 400;
    const slow = new FnLink('slow', 0, 0, 8, (w) => sleep(slowMs).then(() => simple(w)));
    links.list = [slow, new FnLink('ok', 0, 8, 16, simple)];
    const benches: Array<[string, boolean]> = [];
    const late: string[] = [];
    const d = await dispatcher(links, {
      policy: { benchAfterMisses: 3, probeEveryMs: 300, probeMaxPairs: 4 },
      deadlines: { capMs: 60, floorMs: 30 },
      events: { onBench: (id, b) => benches.push([id, b]), onLate: (id) => late.push(id) },
    });
    const c = await ScriptedCoordinator.connect(d.socketPath);
    try {
      const ids = Int32Array.of(1, 9, 2, 10);
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        const r = await c.send(c.request({ ids }));
        const ms = performance.now() - t0;
        assert.ok(ms >= 55 && ms < 200, `answered at the 60 ms budget, not later: ${ms.toFixed(0)} ms`);
        assert.equal(r.mode, 'served');
        if (r.mode === 'served') assert.deepEqual([...r.served], [0, 1, 0, 1], 'the slow worker’s pairs are not served');
      }
      assert.deepEqual(benches, [['slow', true]]);
      assert.ok(d.isBenched('slow'));
      // Benched: not dispatched (the request is answered as fast as the other worker).
      const t0 = performance.now();
      const r = await c.send(c.request({ ids }));
      assert.ok(performance.now() - t0 < 40, 'a benched worker is not waited for');
      assert.equal(r.mode, 'served');
      assert.equal(slow.calls, 3);
      await sleep(450); // the late answers arrive; the probe becomes due
      assert.deepEqual(late, ['slow', 'slow', 'slow']);
      assert.equal(d.totals.pairs.late, 6);
      // The probe: it answers in time now and leaves the bench.
      slowMs = 1;
      const probe = await c.send(c.request({ ids }));
      assert.equal(slow.calls, 4, 'probed once');
      if (probe.mode === 'served') assert.deepEqual([...probe.served], [1, 1, 1, 1]);
      assert.deepEqual(benches, [
        ['slow', true],
        ['slow', false],
      ]);
      assert.equal(d.isBenched('slow'), false);
      assert.equal(d.totals.pairs.fallback, 8, '3 timeouts × 2 pairs, and 2 pairs kept local while benched');
    } finally {
      c.close();
      await d.close();
    }
  });

  test('a worker that slowed down: its late answers set its next deadline, and a bench probe gets the whole budget', async () => {
    const links = new Links();
    let workMs = 1;
    const worker = new FnLink('w', 0, 0, 8, (x) => sleep(workMs).then(() => simple(x)));
    links.list = [worker];
    const benches: boolean[] = [];
    const d = await dispatcher(links, {
      policy: { benchAfterMisses: 3, probeEveryMs: 100, probeMaxPairs: 8 },
      deadlines: { floorMs: 20, latencyFactor: 3 },
      events: { onBench: (_, b) => benches.push(b) },
    });
    const c = await ScriptedCoordinator.connect(d.socketPath); // a 250 ms coordinator deadline: a 225 ms budget
    const ids = Int32Array.of(1, 2, 3, 4);
    const servedAll = (r: DispatchResponse): boolean => r.mode === 'served' && r.served.every((x) => x === 1);
    try {
      for (let i = 0; i < 3; i++) assert.ok(servedAll(await c.send(c.request({ ids }))), 'fast: served');
      workMs = 50; // its machine got busy: now past its 20 ms deadline
      for (let i = 0; i < 3; i++) assert.equal((await c.send(c.request({ ids }))).mode, 'local', 'missed');
      assert.deepEqual(benches, [true]);
      await sleep(150); // the late answers come in; the probe is due
      assert.ok(servedAll(await c.send(c.request({ ids }))), 'the probe is answered in time');
      assert.equal(worker.deadlines.at(-1), 225, 'the probe waits the whole budget, not 3× its last measure');
      assert.deepEqual(benches, [true, false], 'off the bench');
      assert.ok(servedAll(await c.send(c.request({ ids }))), 'its deadline now follows its measured speed, late answers too');
    } finally {
      c.close();
      await d.close();
    }
  });

  test('wrong-sized, non-finite and failed answers are rejected or fall back; the pairs are not lost', async () => {
    const links = new Links();
    links.list = [
      new FnLink('short', 0, 0, 4, (w) => Promise.resolve(new Float32Array(w.nRows * w.nEmbd - 1))),
      new FnLink('nan', 0, 4, 8, (w) => simple(w).then((s) => poke(s, 3, Number.NaN))),
      new FnLink('inf', 0, 8, 12, (w) => simple(w).then((s) => poke(s, 0, Number.POSITIVE_INFINITY))),
      new FnLink('throws', 0, 12, 14, () => Promise.reject(new Error('tab closed'))),
      new FnLink('good', 0, 14, 16, simple),
    ];
    const misses: string[] = [];
    const d = await dispatcher(links, { events: { onMiss: (id, kind) => misses.push(`${id}:${kind}`) } });
    const c = await ScriptedCoordinator.connect(d.socketPath);
    try {
      const r = await c.send(c.request({ ids: Int32Array.of(0, 5, 9, 13, 15, 1, 2, 3) }));
      assert.equal(r.mode, 'served');
      if (r.mode === 'served') assert.deepEqual([...r.served], [0, 0, 0, 0, 1, 0, 0, 0]);
      assert.deepEqual(misses.sort(), ['inf:non-finite', 'nan:non-finite', 'short:wrong-size', 'throws:error']);
      assert.deepEqual(d.totals.pairs, { served: 1, fallback: 1, rejected: 6, late: 0, audited: 0 });
      // Nothing valid at all → LOCAL.
      const l = await c.send(c.request({ ids: Int32Array.of(0, 5, 9, 13) }));
      assert.equal(l.mode, 'local');
    } finally {
      c.close();
      await d.close();
    }
  });

  test('audit seam: a chosen answered item is withheld (one per row), its pairs left to the coordinator', async () => {
    const links = new Links();
    links.list = [new FnLink('a', 0, 0, 4, simple), new FnLink('b', 0, 4, 8, simple), new FnLink('c', 0, 8, 12, simple)];
    const seen: Array<{ workerIds: readonly string[]; answered: readonly boolean[] }> = [];
    const d = await dispatcher(links, {
      chooseAudit: (ctx) => {
        seen.push({ workerIds: ctx.workerIds, answered: ctx.answered });
        return [0, 1]; // a, then b — b shares token 0 with a, so only a is audited
      },
    });
    const c = await ScriptedCoordinator.connect(d.socketPath);
    try {
      const r = await c.send(c.request({ ids: Int32Array.of(1, 5, 9, 13) }));
      assert.equal(r.mode, 'served');
      if (r.mode === 'served') assert.deepEqual([...r.served], [0, 1, 1, 0], 'a’s pair withheld for its audit');
      assert.deepEqual(seen, [{ workerIds: ['a', 'b', 'c'], answered: [true, true, true] }]);
      assert.deepEqual(d.totals.pairs, { served: 2, fallback: 2, rejected: 0, late: 0, audited: 1 });
    } finally {
      c.close();
      await d.close();
    }
  });

  test('protocol rules: HELLO first, one request in flight, size caps, a second connection replaces the first', async () => {
    const links = new Links();
    links.list = [new FnLink('w', 0, 0, 16, after_(50))];
    const events: string[] = [];
    const d = await dispatcher(links, { events: { onCoordinator: (e) => events.push(e) } });
    try {
      // A REQUEST before HELLO.
      const early = await ScriptedCoordinator.connect(d.socketPath, {}, false);
      early.socket.write(encodeRequest(early.request({ ids: Int32Array.of(0, 1, 2, 3) }), 1));
      await early.waitClosed();
      // Junk.
      const junk = await ScriptedCoordinator.connect(d.socketPath, {}, false);
      junk.socket.write(new Uint8Array(32).fill(7));
      await junk.waitClosed();
      // A frame larger than any valid REQUEST of this shape (header says 64 MiB; n_embd 8 allows ~4.5 MB).
      const big = await ScriptedCoordinator.connect(d.socketPath);
      const hdr = new Uint8Array(16);
      const v = new DataView(hdr.buffer);
      v.setUint32(0, 0x50445845, true);
      v.setUint16(4, 1, true);
      v.setUint16(6, FrameKind.Request, true);
      v.setUint32(8, 1, true);
      v.setUint32(12, 64 * 1024 * 1024, true);
      big.socket.write(hdr);
      big.socket.write(new Uint8Array(5 * 1024 * 1024));
      await big.waitClosed();
      // Two requests at once.
      const eager = await ScriptedCoordinator.connect(d.socketPath);
      eager.socket.write(encodeRequest(eager.request({ ids: Int32Array.of(0, 1, 2, 3) }), 1));
      eager.socket.write(encodeRequest(eager.request({ ids: Int32Array.of(0, 1, 2, 3) }), 1));
      await eager.waitClosed();
      // A layer past n_layer.
      const far = await ScriptedCoordinator.connect(d.socketPath);
      far.socket.write(encodeRequest(far.request({ ids: Int32Array.of(0, 1, 2, 3), layer: 4 }), 1));
      await far.waitClosed();
      assert.equal(d.totals.protocolErrors, 5);
      // Replacement: the first connection is closed, its request abandoned; the second is served.
      const first = await ScriptedCoordinator.connect(d.socketPath);
      first.socket.write(encodeRequest(first.request({ ids: Int32Array.of(0, 1, 2, 3) }), 1));
      await sleep(10);
      const second = await ScriptedCoordinator.connect(d.socketPath);
      await first.waitClosed();
      const r = await second.send(second.request({ ids: Int32Array.of(0, 1, 2, 3) }));
      assert.equal(r.mode, 'served');
      assert.ok(d.connected);
      second.close();
      assert.ok(events.includes('protocol-error') && events.includes('hello') && events.includes('closed'));
    } finally {
      await d.close();
    }
  });

  test('HELLO refused by acceptHello; a silent connection is dropped after the HELLO timeout', async () => {
    const d = await dispatcher(new Links(), { acceptHello: (h) => (h.modelDesc === 'wanted' ? 0 : 7), limits: { helloTimeoutMs: 100 } });
    try {
      const c = await ScriptedCoordinator.connect(d.socketPath, {}, false);
      c.socket.write(encodeHello({ ...c.hello, modelDesc: 'other' }, 1));
      const ack = await c.next();
      const v = new DataView(ack.payload.buffer, ack.payload.byteOffset);
      assert.deepEqual([v.getUint32(0, true), v.getUint32(4, true)], [0, 7]);
      await c.waitClosed();
      const ok = await ScriptedCoordinator.connect(d.socketPath, { modelDesc: 'wanted' });
      assert.equal(d.hello?.modelDesc, 'wanted');
      ok.close();
      const silent = await ScriptedCoordinator.connect(d.socketPath, {}, false);
      await silent.waitClosed(1000);
    } finally {
      await d.close();
    }
  });

  test('auto mode: a worker past its grace window that never served is never dispatched; a newcomer is', async () => {
    const links = new Links();
    let now = 1_000_000;
    const attach = new Map([
      ['old', now - 60_000],
      ['new', now - 1_000],
    ]);
    links.list = [new FnLink('old', 0, 0, 8, simple), new FnLink('new', 0, 8, 16, simple)];
    const d = await dispatcher(links, {
      mode: 'auto',
      clock: () => now,
      record: (id) => ({ attachMs: attach.get(id) ?? now, lastServeMs: null, released: false, quarantined: false }),
    });
    const c = await ScriptedCoordinator.connect(d.socketPath);
    try {
      const r = await c.send(c.request({ ids: Int32Array.of(1, 9, 2, 10) }));
      if (r.mode === 'served') assert.deepEqual([...r.served], [0, 1, 0, 1]);
      else assert.fail('the newcomer serves');
      assert.equal(d.totals.decisions['never-served'], 1);
      assert.equal(d.totals.decisions.grace, 1);
      // 25 s later at rest: 'new' served 25 s ago (> idle 20 s) → idle, no longer dispatched.
      now += 25_000;
      const l = await c.send(c.request({ ids: Int32Array.of(1, 9, 2, 10) }));
      assert.equal(l.mode, 'local');
      assert.equal(d.totals.decisions['idle-at-rest'], 1);
    } finally {
      c.close();
      await d.close();
    }
  });

  test('added latency per round trip with instant workers (printed, not asserted)', async (t) => {
    // Realistic decode shape: n_embd 2048, 128 experts, top-8, one token; two workers split the experts.
    const nEmbd = 2048;
    const links = new Links();
    const zeros = new Map<number, Float32Array>();
    const instant = (w: WorkItem): Promise<Float32Array> => {
      let z = zeros.get(w.nRows);
      if (!z) {
        z = new Float32Array(w.nRows * w.nEmbd);
        zeros.set(w.nRows, z);
      }
      return Promise.resolve(z);
    };
    links.list = [new FnLink('a', 0, 0, 64, instant), new FnLink('b', 0, 64, 128, instant)];
    const inside: number[] = [];
    const phases: Array<[number, number]> = [];
    const d = await dispatcher(links, {
      events: {
        onResponse: (s: ResponseSummary) => {
          inside.push(s.totalMs * 1000);
          phases.push([s.dispatchMs * 1000, s.settledMs * 1000]);
        },
      },
    });
    const c = await ScriptedCoordinator.connect(d.socketPath, { nEmbd, nExpert: 128, nExpertUsed: 8 });
    // The floor: the same socket with a server that answers LOCAL without looking (decode + encode only).
    const floorPath = sockPath();
    const echo = createServer((s) => {
      const reader = new FrameReader();
      const local = new Uint8Array(40);
      s.on('data', (chunk) => {
        for (const { header } of reader.push(chunk)) {
          local.set(new Uint8Array(16), 0);
          const v = new DataView(local.buffer);
          v.setUint32(0, 0x50445845, true);
          v.setUint16(4, 1, true);
          v.setUint16(6, FrameKind.Response, true);
          v.setUint32(8, header.seq, true);
          v.setUint32(12, 24, true);
          s.write(local);
        }
      });
    });
    await new Promise<void>((r) => echo.listen(floorPath, r));
    const floorSock = connect(floorPath);
    await new Promise((r) => floorSock.once('connect', r));
    const floorReader = new FrameReader();
    let floorWaiter: (() => void) | null = null;
    floorSock.on('data', (chunk) => {
      if (floorReader.push(chunk).length > 0) floorWaiter?.();
    });
    try {
      const ids = Int32Array.of(3, 17, 40, 77, 90, 101, 120, 127);
      const n = 3000;
      const rtt: number[] = [];
      const floor: number[] = [];
      for (let i = 0; i < n + 300; i++) {
        // Encoded before the clock starts, on both paths; the answers are not decoded: only the round trips are timed.
        const bytes = encodeRequest(c.request({ ids }), 1);
        const t0 = performance.now();
        assert.equal(await c.sendRaw(bytes), FrameKind.Response);
        const us = (performance.now() - t0) * 1000;
        const t1 = performance.now();
        await new Promise<void>((resolve) => {
          floorWaiter = resolve;
          floorSock.write(bytes);
        });
        const fus = (performance.now() - t1) * 1000;
        if (i >= 300) {
          rtt.push(us);
          floor.push(fus);
        }
      }
      assert.equal(d.totals.servedRequests, n + 300);
      const pct = (xs: number[], q: number): number =>
        [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))] as number;
      const ins = inside.slice(-n);
      const ph = phases.slice(-n);
      const added = rtt.map((x, i) => x - (floor[i] as number));
      t.diagnostic(
        `dispatcher, 1 token × top-8, n_embd ${nEmbd}, 2 instant workers (${n} round trips): ` +
          `inside (REQUEST decoded → RESPONSE written) p50 ${pct(ins, 0.5).toFixed(0)} µs p99 ${pct(ins, 0.99).toFixed(0)} µs ` +
          `[work items handed out at p50 ${pct(
            ph.map((x) => x[0]),
            0.5,
          ).toFixed(0)} µs, answers in at ${pct(
            ph.map((x) => x[1]),
            0.5,
          ).toFixed(0)} µs]; ` +
          `coordinator-side round trip p50 ${pct(rtt, 0.5).toFixed(0)} µs p99 ${pct(rtt, 0.99).toFixed(0)} µs; ` +
          `a LOCAL echo on the same kind of socket (the transport floor) p50 ${pct(floor, 0.5).toFixed(0)} µs p99 ${pct(floor, 0.99).toFixed(0)} µs; ` +
          `added over the floor p50 ${pct(added, 0.5).toFixed(0)} µs p99 ${pct(added, 0.99).toFixed(0)} µs`,
      );
    } finally {
      floorSock.destroy();
      echo.close();
      c.close();
      await d.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// 1b. Protocol version 2 (claims and overlap) against a scripted coordinator

describe('ModelDispatcher, protocol v2 (claims) against a scripted coordinator', () => {
  test('negotiation: a v2 HELLO is acknowledged as v2, a v1 HELLO as v1; a frame of the other version is a violation', async () => {
    const links = new Links();
    const d = await dispatcher(links);
    try {
      const two = await ScriptedCoordinator.connect(d.socketPath, {}, true, 2);
      assert.equal(two.version, 2);
      const one = await ScriptedCoordinator.connect(d.socketPath, {}, true, 1);
      assert.equal(one.version, 1, 'the second connection replaces the first and speaks v1');
      await two.waitClosed();
      // A v2 REQUEST on the v1 connection.
      one.socket.write(encodeRequest(one.request({ ids: Int32Array.of(0, 1, 2, 3) }), 2));
      await one.waitClosed();
      assert.equal(d.totals.protocolErrors, 1);
    } finally {
      await d.close();
    }
  });

  test('CLAIM at once, before the workers answer; RESULT with the served sums once they have', async () => {
    const links = new Links();
    links.list = [new FnLink('a', 0, 0, 4, after_(150)), new FnLink('b', 0, 4, 8, simple)];
    const d = await dispatcher(links);
    const c = await ScriptedCoordinator.connect(d.socketPath, {}, true, 2);
    try {
      const req = c.request({ ids: Int32Array.of(1, 5, 9, 2, 7, 6, 15, 0) });
      const { claim, claimMs, result } = await c.sendV2(req);
      assert.deepEqual([...(claim.claimed ?? [])], [1, 1, 0, 1, 1, 1, 0, 1], 'the pairs sent to workers are claimed');
      assert.ok(claimMs < 100, `the CLAIM came after ${claimMs.toFixed(1)} ms, before the slow worker's 150 ms`);
      const { result: r, ms } = await result();
      assert.ok(ms >= 140, `the RESULT waits for the slow worker (${ms.toFixed(0)} ms)`);
      assert.deepEqual([...r.served], [1, 1, 0, 1, 1, 1, 0, 1]);
      const p = req.probs;
      const want0 = (p[0] as number) * 2 + (p[3] as number) * 3 + (p[1] as number) * 2;
      const want1 = (p[7] as number) * 1 + ((p[4] as number) * 4 + (p[5] as number) * 3);
      for (let i = 0; i < 8; i++) {
        assert.ok(Math.abs((r.sums[i] as number) - want0) < 1e-5, `token 0 feature ${i}: ${r.sums[i]} vs ${want0}`);
        assert.ok(Math.abs((r.sums[8 + i] as number) - want1) < 1e-5, `token 1 feature ${i}`);
      }
      assert.deepEqual(d.totals.pairs, { served: 6, fallback: 2, rejected: 0, late: 0, audited: 0 });
      // Nothing routed to a worker: a CLAIM of nothing, and no RESULT (the next frame answers the next REQUEST).
      const none = await c.sendV2(c.request({ ids: Int32Array.of(9, 10, 11, 12) }));
      assert.equal(none.claim.claimed, null);
      const next = await c.sendV2(c.request({ ids: Int32Array.of(4, 5, 6, 7) }));
      assert.equal(
        next.claim.claimed?.reduce((a, b) => a + b, 0),
        4,
      );
      assert.deepEqual([...(await next.result()).result.served], [1, 1, 1, 1]);
    } finally {
      c.close();
      await d.close();
    }
  });

  test('the CLAIM is written before any work goes out: the coordinator starts its own pairs while the items are sent', async () => {
    // Ordering, seen from inside the hub's one thread: its writes to the coordinator's socket against the workers'
    // compute calls (a scripted coordinator in this process would only see the frames after the whole turn).
    const order: string[] = [];
    const links = new Links();
    const noted = (id: string) => (w: WorkItem) => {
      order.push(`compute ${id}`);
      return simple(w);
    };
    links.list = [new FnLink('a', 0, 0, 4, noted('a')), new FnLink('b', 0, 4, 8, noted('b'))];
    const d = await dispatcher(links);
    const spied = d as unknown as { write(conn: unknown, bytes: Uint8Array): void };
    const write = spied.write.bind(d);
    spied.write = (conn, bytes) => {
      order.push(`write kind ${bytes[6]}`);
      write(conn, bytes);
    };
    const c = await ScriptedCoordinator.connect(d.socketPath, {}, true, 2);
    try {
      order.length = 0; // the HELLO_ACK
      const { claim, result } = await c.sendV2(c.request({ ids: Int32Array.of(1, 5, 9, 2, 7, 6, 15, 0) }));
      assert.ok(claim.claimed);
      await result();
      assert.deepEqual(
        order,
        [`write kind ${FrameKind.Claim}`, 'compute a', 'compute b', `write kind ${FrameKind.Result}`],
        'CLAIM, then the work items, then the RESULT',
      );
    } finally {
      c.close();
      await d.close();
    }
  });

  test('a worker that misses its deadline: claimed, not served; its RESULT comes by the deadline', async () => {
    const links = new Links();
    links.list = [new FnLink('slow', 0, 0, 8, never), new FnLink('ok', 0, 8, 16, simple)];
    const d = await dispatcher(links);
    const c = await ScriptedCoordinator.connect(d.socketPath, { deadlineMs: 100 }, true, 2);
    try {
      const { claim, result } = await c.sendV2(c.request({ ids: Int32Array.of(1, 9, 2, 10) }));
      assert.deepEqual([...(claim.claimed ?? [])], [1, 1, 1, 1]);
      const { result: r, ms } = await result();
      assert.deepEqual([...r.served], [0, 1, 0, 1], 'the stalled worker’s pairs are left to the coordinator');
      assert.ok(ms < 100, `RESULT within the coordinator's deadline (${ms.toFixed(0)} ms)`);
      assert.deepEqual(d.totals.pairs, { served: 2, fallback: 2, rejected: 0, late: 0, audited: 0 });
    } finally {
      c.close();
      await d.close();
    }
  });

  test('audits in v2: a shadow item is sent but not claimed, its pairs audited; its answer is held against the AUDIT', async () => {
    const links = new Links();
    links.list = [new FnLink('a', 0, 0, 4, simple), new FnLink('b', 0, 4, 8, after_(80))];
    const audits: Array<{ id: string; nmse: number }> = [];
    const d = await dispatcher(links, {
      chooseAudit: () => [1], // b, in shadow
      events: { onAudit: (id, r) => audits.push({ id, nmse: r.nmse }) },
    });
    const c = await ScriptedCoordinator.connect(d.socketPath, {}, true, 2);
    try {
      const req = c.request({ ids: Int32Array.of(1, 5, 2, 6) });
      const { claim, result } = await c.sendV2(req);
      assert.deepEqual([...(claim.claimed ?? [])], [1, 0, 1, 0], 'a’s pairs claimed');
      assert.deepEqual([...(claim.audit ?? [])], [0, 1, 0, 1], 'b’s pairs audited, not claimed');
      // The coordinator computes b's pairs and reports them (here: what b will answer, so NMSE 0) before b answers.
      const p = req.probs;
      const sums = new Float32Array(2 * 8);
      sums.fill((p[1] as number) * 2 + (p[3] as number) * 3, 0, 8);
      sums.fill(0, 8);
      c.socket.write(encodeAudit({ seq: req.seq, layer: 0, nTokens: 2, nAudit: 2, sums }, 2));
      const { result: r } = await result();
      assert.deepEqual([...r.served], [1, 0, 1, 0], 'the RESULT does not wait for the shadow item');
      await sleep(150);
      assert.deepEqual(audits, [{ id: 'b', nmse: 0 }], 'b’s late-arriving answer compared once');
      assert.equal(d.totals.pairs.audited, 2);
    } finally {
      c.close();
      await d.close();
    }
  });

  test('v2 probation: a newcomer slower than a trusted replica is still sent items (in shadow, one at a time) until it has passed', async () => {
    const links = new Links();
    const fast = new FnLink('fast', 0, 0, 8, simple);
    const fresh = new FnLink('new', 0, 0, 8, after_(40));
    links.list = [fast, fresh];
    const PROBATION = 3;
    const passed = new Map<string, number>();
    const trusted = (id: string): boolean => id === 'fast' || (passed.get(id) ?? 0) >= PROBATION;
    const d = await dispatcher(links, {
      mayUse: trusted,
      chooseAudit: ({ workerIds }) => workerIds.flatMap((id, i) => (trusted(id) ? [] : [i])),
      events: {
        onAudit: (id, r) => {
          if (r.nmse === 0) passed.set(id, (passed.get(id) ?? 0) + 1);
        },
      },
    });
    const c = await ScriptedCoordinator.connect(d.socketPath, {}, true, 2);
    try {
      const shadowed: number[] = [];
      for (let i = 0; i < 16 && (passed.get('new') ?? 0) < PROBATION; i++) {
        const req = c.request({ ids: Int32Array.of(1, 2, 3, 4) });
        const { claim, result } = await c.sendV2(req);
        if (claim.audit) {
          // The coordinator's own sums of the audited pairs (what an honest `simple` worker answers).
          let sum = 0;
          for (let k = 0; k < 4; k++) if (claim.audit[k] === 1) sum += (req.probs[k] as number) * (k + 2);
          c.socket.write(encodeAudit({ seq: req.seq, layer: 0, nTokens: 1, nAudit: 4, sums: new Float32Array(8).fill(sum) }, 2));
          shadowed.push(i);
        }
        if (claim.claimed) await result();
        await sleep(25); // a decode step: shorter than the newcomer's 40 ms
      }
      assert.equal(passed.get('new'), PROBATION, `the slower newcomer passed its probation (items in shadow at steps ${shadowed})`);
      assert.ok(fresh.calls <= shadowed.length, 'never more than one item outstanding: each went in shadow');
      assert.ok(fast.calls >= shadowed.length - 1, 'the trusted replica served the steps between');
      // Trusted now, the newcomer races on speed like any replica: the faster one takes the token.
      const { claim, result } = await c.sendV2(c.request({ ids: Int32Array.of(1, 2, 3, 4) }));
      assert.equal(claim.audit, null, 'nothing audited once trusted (this chooser spot-checks none)');
      await result();
    } finally {
      c.close();
      await d.close();
    }
  });

  test('v2 under saturation: a worker that never served is probed in shadow; answering in time proves it, then it is claimed', async () => {
    const links = new Links();
    const worker = new FnLink('w', 0, 0, 16, simple);
    links.list = [worker];
    const now = 1_000_000;
    const d = await dispatcher(links, {
      mode: 'auto',
      clock: () => now,
      record: () => ({ attachMs: now - 60_000, lastServeMs: null, released: false, quarantined: false }),
      saturation: () => ({ atMs: now, busy: 4, slots: 4, source: 'slots' }),
    });
    const c = await ScriptedCoordinator.connect(d.socketPath, { nExpertUsed: 8 }, true, 2);
    const ids = Int32Array.from({ length: 32 }, (_, i) => i % 16);
    try {
      const first = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000 }));
      assert.equal(first.claim.claimed, null, 'never served: nothing claimed');
      assert.equal(first.claim.quietMs, 0);
      assert.equal(d.totals.decisions['never-served'], 1);
      assert.equal(d.totals.claims['shadow-probe'], 1, 'but probed in shadow');
      await sleep(20);
      // the probe, and its warm follow-ups while the worker's line is young (a chain of warmFollowUpChain at most)
      assert.equal(worker.calls, 1 + DEFAULT_CLAIMS.warmFollowUpChain, 'the probe, and its warm follow-ups');
      assert.ok(d.workerStats('w')?.lastServeMs != null, 'the probe, answered in time, proves it');
      const second = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000 }));
      assert.ok((second.claim.claimed ?? []).length > 0, 'proven and faster than the coordinator: claimed');
      await second.result();
      assert.equal(d.totals.decisions.saturated, 1);
    } finally {
      c.close();
      await d.close();
    }
  });

  test('v2: a worker that stays too slow is probed ever less often (2 s, then 4 s, …), and a claim resets that', async () => {
    const links = new Links();
    const worker = new FnLink('w', 0, 0, 16, (w) => sleep(5).then(() => simple(w)));
    links.list = [worker];
    let now = 1_000_000;
    const d = await dispatcher(links, {
      mode: 'auto',
      clock: () => now,
      record: () => ({ attachMs: now - 60_000, lastServeMs: now - 100, released: false, quarantined: false }),
      saturation: () => ({ atMs: now, busy: 4, slots: 4, source: 'slots' }),
    });
    const c = await ScriptedCoordinator.connect(d.socketPath, { nExpertUsed: 8 }, true, 2);
    const ids = Int32Array.from({ length: 32 }, (_, i) => i % 16);
    const probes = (): number => d.totals.claims['shadow-probe'] ?? 0;
    // One request against a coordinator at `localNs` per pair; waits until the worker's answers are in.
    const step = async (localNs: number): Promise<void> => {
      const x = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: localNs }));
      if (x.claim.claimed) await x.result();
      await sleep(30);
    };
    try {
      // measured, claimed (a ~5 ms worker, a 32 ms coordinator): 8 warm samples, a well-measured line (a thinner one is
      // probed every 2 s without backoff, for the follow-ups that fill it: probes.ts shadowProbeBooking)
      for (let i = 0; i < 8; i++) await step(1_000_000);
      await step(1_000); // a 32 µs coordinator: too slow, probed in shadow
      assert.equal(probes(), 1);
      now += 1_999;
      await step(1_000);
      assert.equal(probes(), 1, 'not within 2 s');
      now += 1;
      await step(1_000);
      assert.equal(probes(), 2, 'the second probe 2 s after the first');
      now += 3_999;
      await step(1_000);
      assert.equal(probes(), 2, 'the third not within 4 s of the second');
      now += 1;
      await step(1_000);
      assert.equal(probes(), 3);
      await step(1_000_000); // claimed again: the backoff starts over
      assert.ok((d.totals.claims.balanced ?? 0) > 0, JSON.stringify(d.totals.claims));
      await step(1_000);
      assert.equal(probes(), 4, 'left out again after a claim: probed at once');
      now += 2_000;
      await step(1_000);
      assert.equal(probes(), 5, 'and 2 s on');
    } finally {
      c.close();
      await d.close();
    }
  });

  test('v2: a shadow probe answered later than the layer could wait still measures the worker (a serve, not a miss)', async () => {
    const links = new Links();
    // 300 ms: past this request's 40 ms budget and past 4 × it, within the shadow floor (plan.ts shadowDeadlineMs).
    const worker = new FnLink('w', 0, 0, 16, (w) => sleep(300).then(() => simple(w)));
    links.list = [worker];
    const now = 1_000_000;
    const d = await dispatcher(links, {
      mode: 'auto',
      clock: () => now,
      record: () => ({ attachMs: now - 60_000, lastServeMs: null, released: false, quarantined: false }),
      saturation: () => ({ atMs: now, busy: 4, slots: 4, source: 'slots' }),
    });
    const c = await ScriptedCoordinator.connect(d.socketPath, { nExpertUsed: 8 }, true, 2);
    const ids = Int32Array.from({ length: 32 }, (_, i) => i % 16);
    try {
      const x = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000, deadlineUs: 50_000 }));
      assert.equal(x.claim.claimed, null, 'a probe in shadow: nothing claimed, nothing waits');
      assert.equal(d.totals.claims['shadow-probe'], 1);
      await sleep(450);
      const st = d.workerStats('w');
      assert.ok(st?.lastServeMs != null, 'the slow answer counts: the worker is measured');
      assert.equal(st?.misses, 0, 'and is not a miss');
      assert.equal(worker.calls, 1, 'a probe slower than a layer could wait gets no warm follow-up');
      assert.equal(d.totals.claims['warm-follow-up'], undefined);
    } finally {
      c.close();
      await d.close();
    }
  });

  test('v2: a quick shadow probe of a worker measured only cold is sent again at once, for a warm sample', async () => {
    const links = new Links();
    const worker = new FnLink('w', 0, 0, 16, (w) => sleep(5).then(() => simple(w)));
    links.list = [worker];
    const now = 1_000_000;
    const d = await dispatcher(links, {
      mode: 'auto',
      clock: () => now,
      record: () => ({ attachMs: now - 60_000, lastServeMs: null, released: false, quarantined: false }),
      saturation: () => ({ atMs: now, busy: 4, slots: 4, source: 'slots' }),
    });
    const c = await ScriptedCoordinator.connect(d.socketPath, { nExpertUsed: 8 }, true, 2);
    const ids = Int32Array.from({ length: 32 }, (_, i) => i % 16);
    try {
      const x = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000 }));
      assert.equal(x.claim.claimed, null, 'never served: a probe in shadow');
      await sleep(100);
      const st = d.workerStats('w');
      // the probe, then the same item again at once, and again while the line holds few warm samples and each answer
      // is quick: warmFollowUpChain in a row at most
      const chain = DEFAULT_CLAIMS.warmFollowUpChain;
      assert.equal(worker.calls, 1 + chain, 'the probe, then the same item again at once, in a chain');
      assert.equal(d.totals.claims['warm-follow-up'], chain);
      assert.equal(st?.outstanding, 0);
      assert.equal(st?.latency.warm, chain, 'each follow-up is a warm sample');
      assert.equal(st?.latency.n, chain, 'and the first replaced the cold-only line');
    } finally {
      c.close();
      await d.close();
    }
  });

  test('v1 and v2: when the policy declines every covering worker, the layer goes quiet (no exchange per layer meanwhile)', async () => {
    const links = new Links();
    links.list = [new FnLink('w', 0, 0, 16, never)];
    const now = 1_000_000;
    const d = await dispatcher(links, {
      mode: 'auto',
      clock: () => now,
      // Served 30 s ago, at rest: idle, declined (not a shadow-probe reason).
      record: () => ({ attachMs: now - 60_000, lastServeMs: now - 30_000, released: false, quarantined: false }),
    });
    try {
      const one = await ScriptedCoordinator.connect(d.socketPath, {}, true, 1);
      const r = await one.send(one.request({ ids: Int32Array.of(0, 1, 2, 3) }));
      assert.deepEqual([r.mode, r.quietMs], ['local', 1000]);
      const two = await ScriptedCoordinator.connect(d.socketPath, {}, true, 2);
      const x = await two.sendV2(two.request({ ids: Int32Array.of(0, 1, 2, 3) }));
      assert.deepEqual([x.claim.claimed, x.claim.quietMs], [null, 1000]);
      assert.equal(d.totals.decisions['idle-at-rest'], 2);
      two.close();
    } finally {
      await d.close();
    }
  });

  test('claim caps in auto mode: a newcomer gets a probe; a fast measured worker takes the balanced share; a slow one none', async () => {
    const links = new Links();
    let answerMs = 0;
    const worker = new FnLink('w', 0, 0, 16, (w) => sleep(answerMs).then(() => simple(w)));
    links.list = [worker];
    const now = 1_000_000;
    const d = await dispatcher(links, {
      mode: 'auto',
      clock: () => now,
      claims: { probePairs: 4 },
      record: () => ({ attachMs: now - 1_000, lastServeMs: null, released: false, quarantined: false }),
      // Saturated throughout: the Layer-1 policy lets a proven worker through whatever its speed; the caps decide.
      saturation: () => ({ atMs: now, busy: 4, slots: 4, source: 'slots' }),
    });
    const c = await ScriptedCoordinator.connect(d.socketPath, { nExpertUsed: 8 }, true, 2);
    const ids = Int32Array.from({ length: 32 }, (_, i) => i % 16); // 4 tokens × 8 used, all covered
    const count = (m: Uint8Array | null | undefined): number => (m ? [...m] : []).reduce((a, b) => a + b, 0);
    try {
      // Never measured: a probe of 4 pairs.
      let x = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000 }));
      assert.equal(count(x.claim.claimed), 4, 'a probe');
      await x.result();
      assert.equal(d.totals.claims.probe, 1);
      // A worker that takes ~10 ms a round trip whatever its share, against a coordinator at 1 ms per pair (32 ms alone):
      // the split converges on the worker's measured speed, and the coordinator keeps the pairs it finishes as soon.
      answerMs = 10;
      for (let i = 0; i < 6; i++) {
        x = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000 }));
        await x.result();
      }
      assert.ok(count(x.claim.claimed) >= 12, `balanced share for a faster worker: ${count(x.claim.claimed)} of 32`);
      assert.ok(count(x.claim.claimed) < 32, 'the coordinator keeps some pairs: it computes them meanwhile');
      assert.ok((d.totals.claims.balanced ?? 0) >= 6);
      // The same worker (~10 ms a round trip) against a fast coordinator (1 µs per pair, 32 µs alone): no claim.
      x = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000 }));
      assert.equal(x.claim.claimed, null, 'a worker slower than the coordinator alone is given nothing');
      assert.ok(
        (d.totals.decisions.saturated ?? 0) >= 6,
        `the policy let the proven worker through (saturated): ${JSON.stringify(d.totals.decisions)}`,
      );
      assert.equal(d.totals.claims['too-slow'], 1, JSON.stringify(d.totals.claims));
      // Left out, it is given a probe in shadow (sent, not claimed: nothing waits on it), at most every 2 s.
      assert.equal(d.totals.claims['shadow-probe'], 1);
      const calls = worker.calls;
      x = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000 }));
      assert.equal(x.claim.claimed, null);
      assert.equal(worker.calls, calls, 'no second probe within the probe interval');
      // Every worker left out, no probe due: the layer goes quiet (stock graph, no exchange) — for a few evaluations at
      // first, as the worker served lately (proven warm: the next request may be one it helps with), then twice as long
      // per decline in a row, up to the quiet window the probes allow (claims.declineQuietMs).
      const quiets = [x.claim.quietMs];
      for (let i = 0; i < 9; i++) {
        x = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000 }));
        assert.equal(x.claim.claimed, null);
        quiets.push(x.claim.quietMs);
      }
      assert.deepEqual(quiets, [4, 8, 16, 32, 64, 128, 256, 512, 1000, 1000], 'quiet windows of the declines in a row');
      // A claim served starts the count over.
      x = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000 }));
      assert.ok(count(x.claim.claimed) > 0, 'the slow coordinator again: the worker is claimed');
      await x.result();
      x = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000 }));
      assert.equal(x.claim.claimed, null);
      assert.ok(x.claim.quietMs <= 4, `the first decline after a claim: a short window again (${x.claim.quietMs} ms)`);
    } finally {
      c.close();
      await d.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// 2. Against the real coordinator

/** A worker computing its slice as the coordinator does (GgmlExactBackend), pair by pair in the order given. */
function exactWorker(
  backend: GgmlExactBackend,
  id: string,
  layer: number,
  begin: number,
  end: number,
  fault: 'none' | 'silent' | 'short' | 'nan' = 'none',
): FnLink {
  const f32 = Math.fround;
  return new FnLink(id, layer, begin, end, async (w) => {
    if (fault === 'silent') return never();
    const out = new Float32Array(w.nRows * w.nEmbd);
    const first = new Uint8Array(w.nRows).fill(1);
    for (let q = 0; q < w.nPairs; q++) {
      const r = w.rowIndex[q] as number;
      const y = await backend.expertOut(layer, begin + (w.localExpert[q] as number), w.rows.subarray(r * w.nEmbd, (r + 1) * w.nEmbd));
      const p = w.weight[q] as number;
      const o = r * w.nEmbd;
      for (let i = 0; i < w.nEmbd; i++) {
        const v = f32((y[i] as number) * p);
        out[o + i] = first[r] ? v : f32((out[o + i] as number) + v);
      }
      first[r] = 0;
    }
    if (fault === 'short') return out.subarray(0, out.length - 1);
    if (fault === 'nan') out[0] = Number.NaN;
    return out;
  });
}

describe('ModelDispatcher, protocol v3 (standing offers) against a scripted coordinator', () => {
  /** One exchange as a v3 coordinator makes it: with pre-claims, the RESULT alone; without, the CLAIM and any RESULT. */
  async function exchange(
    c: ScriptedCoordinator,
    r: DispatchRequest,
  ): Promise<{ claimed: Uint8Array | null; sawClaim: boolean; result: DispatchResult | null }> {
    c.socket.write(encodeRequest(r, 3));
    let claimed = r.preclaimed ?? null;
    let sawClaim = false;
    let f = await c.next();
    if (!r.preclaimed) {
      assert.equal(f.kind, FrameKind.Claim, `a REQUEST without pre-claims is answered by a CLAIM, got kind ${f.kind}`);
      sawClaim = true;
      claimed = decodeClaim({ version: 3, kind: f.kind, seq: f.seq, payloadBytes: f.payload.length }, f.payload).claimed;
      if (!claimed) return { claimed: null, sawClaim, result: null };
      f = await c.next();
    }
    assert.equal(f.kind, FrameKind.Result, `kind ${f.kind} where the RESULT was due`);
    assert.equal(f.seq, r.seq);
    const header = { version: 3 as DispatchVersion, kind: f.kind, seq: f.seq, payloadBytes: f.payload.length };
    return { claimed, sawClaim, result: decodeResult(header, f.payload, c.hello.nEmbd, claimed, c.hello.nExpert) };
  }

  /** The pairs an offer gives of a request (the coordinator's rule with no correction): the first c covered ones. */
  function preclaim(offer: NonNullable<DispatchResult['offer']>, ids: Int32Array): Uint8Array {
    const covered = (e: number): boolean => (((offer.experts[e >> 3] as number) >> (e & 7)) & 1) === 1;
    const nCovered = [...ids].filter(covered).length;
    const c = Math.min(offer.maxPairs, nCovered, Math.floor(offer.a * ids.length - offer.b));
    const pre = new Uint8Array(ids.length);
    let taken = 0;
    for (let i = 0; i < ids.length && taken < c; i++) {
      if (!covered(ids[i] as number)) continue;
      pre[i] = 1;
      taken++;
    }
    return pre;
  }

  const saturatedAuto = (now: number): Partial<ModelDispatcherOptions> => ({
    mode: 'auto',
    clock: () => now,
    record: () => ({ attachMs: now - 60_000, lastServeMs: now - 1_000, released: false, quarantined: false }),
    saturation: () => ({ atMs: now, busy: 4, slots: 4, source: 'slots' }),
  });

  test('a measured worker faster than local: RESULTs carry offers; pre-claimed REQUESTs get no CLAIM, the pairs served; every 4th RESULT none', async () => {
    const links = new Links();
    const worker = new FnLink('w', 0, 0, 12, (w) => sleep(2).then(() => simple(w)));
    links.list = [worker];
    const d = await dispatcher(links, { ...saturatedAuto(1_000_000), claims: { probePairs: 4, offerBreakEvery: 4 } });
    const c = await ScriptedCoordinator.connect(d.socketPath, { nExpertUsed: 8 }, true, 3);
    assert.equal(c.version, 3, 'the dispatcher speaks 3 with a coordinator that offers 3');
    const ids = Int32Array.from({ length: 48 }, (_, i) => i % 16); // 6 tokens x 8, experts 12..15 not covered
    try {
      // CLAIM exchanges until the worker is measured and a RESULT carries an offer
      let offer: DispatchResult['offer'] = null;
      for (let i = 0; i < 10 && !offer; i++) {
        const x = await exchange(c, c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000 }));
        assert.ok(x.sawClaim);
        offer = x.result?.offer ?? null;
      }
      assert.ok(offer, `an offer after the worker was measured: ${JSON.stringify(d.totals.offers)}`);
      assert.equal(offer.ttlMs, DEFAULT_CLAIMS.offerTtlMs);
      assert.ok(offer.a > 0 && offer.a < 1 && offer.maxPairs >= 1, JSON.stringify(offer));
      assert.deepEqual([...offer.experts], [0xff, 0x0f], "the worker's experts [0, 12)");
      // pre-claimed REQUESTs: no CLAIM, every pre-claimed pair served (the worker answers all), an offer or none
      let offers = 0;
      let results = 0;
      for (let i = 0; i < 8 && offer; i++) {
        const pre = preclaim(offer, ids);
        const n = pre.reduce((a, b) => a + b, 0);
        assert.ok(n > 0, 'the line takes pairs of 48 at 1 ms per local pair');
        assert.ok(
          [...pre.keys()].every((p) => !pre[p] || (ids[p] as number) < 12),
          'only covered experts',
        );
        const x = await exchange(c, c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000, preclaimed: pre }));
        assert.equal(x.sawClaim, false);
        const served = x.result?.served ?? new Uint8Array();
        assert.equal(
          served.reduce((a, b) => a + b, 0),
          n,
          'every pre-claimed pair served',
        );
        results++;
        if (x.result?.offer) offers++;
        offer = x.result?.offer ?? offer; // a withheld offer: the last one again (its REQUEST would be a CLAIM exchange)
      }
      assert.equal(d.totals.offers.preclaimed, results);
      assert.ok(offers < results && offers >= results - 3, `every 4th RESULT carries no offer: ${offers} of ${results}`);
      // a pre-claimed REQUEST the dispatcher can no longer place (the worker left): its RESULT at once, nothing served
      links.list = [];
      const gone = await exchange(c, c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000, preclaimed: preclaim(offer, ids) }));
      assert.equal(gone.sawClaim, false);
      assert.equal(
        gone.result?.served.reduce((a, b) => a + b, 0),
        0,
      );
      assert.equal(gone.result?.offer, null);
    } finally {
      c.close();
      await d.close();
    }
  });

  test('no offers under --dispatch always, to a v2 coordinator, or while a spot check is due (the next CLAIM exchange owes it)', async () => {
    const links = new Links();
    links.list = [new FnLink('w', 0, 0, 16, (w) => sleep(1).then(() => simple(w)))];
    const ids = Int32Array.from({ length: 32 }, (_, i) => i % 16);
    for (const mode of ['always', 'auto'] as const) {
      for (const version of [2, 3] as const) {
        const owed: boolean[] = [];
        const d = await dispatcher(links, {
          ...saturatedAuto(1_000_000),
          mode,
          chooseAudit: (ctx) => {
            owed.push(ctx.owed === true);
            return ctx.owed ? [0] : null;
          },
          auditDue: () => true,
        });
        const c = await ScriptedCoordinator.connect(d.socketPath, { nExpertUsed: 8 }, true, version);
        try {
          for (let i = 0; i < 6; i++) {
            const x =
              version === 3
                ? await exchange(c, c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000 }))
                : await (async () => {
                    const y = await c.sendV2(c.request({ ids, nUsed: 8, localNsPerPair: 1_000_000 }));
                    return { result: y.claim.claimed ? (await y.result()).result : null };
                  })();
            assert.ok(!x.result?.offer, `${mode}, v${version}: no offer`);
          }
          assert.equal(d.totals.offers.made, 0);
          if (mode === 'auto' && version === 3)
            assert.ok(owed.includes(true), `a withheld offer makes the next CLAIM exchange owe a spot check: ${owed}`);
          else assert.ok(!owed.includes(true), `${mode}, v${version}: nothing owed`);
        } finally {
          c.close();
          await d.close();
        }
      }
    }
  });
});

describe('ModelDispatcher with linkcpp-server', () => {
  const N = 32;
  const PROMPT = 'The swarm serves';
  let m: TestModel;
  let moe: number[];
  let want: number[];
  let backend: GgmlExactBackend;
  let d: ModelDispatcher;
  let server: Awaited<ReturnType<typeof startServer>>;
  const links = new Links();
  const registry = new Registry();
  let benched: string[] = [];

  before(async () => {
    // Top-2 of 8 experts: a row's sum has at most two terms, so any split between workers adds up bit for bit.
    m = await testModel(TOP2_OF_8);
    moe = planModel(m.config, buildVocabulary().tokens.length).moeLayers;
    const stock = await startServer({ model: m.path, args: ['--no-repack-exps'] });
    try {
      want = (await completeGreedy(stock.url, PROMPT, N, m.ban)).tokens;
    } finally {
      await stock.stop();
    }
    assert.equal(want.length, N);
    backend = await GgmlExactBackend.open(m.path);
    d = await ModelDispatcher.listen({
      model: 'qwen3moe-test',
      socketPath: sockPath(),
      directory: links,
      mode: 'always',
      quietMs: 0,
      metrics: new DispatchMetrics(registry),
      events: { onBench: (id, b) => b && benched.push(id) },
    });
    server = await startServer({ model: m.path, args: ['--expert-dispatch', d.socketPath, '--expert-dispatch-deadline-ms', '1000'] });
    const deadline = Date.now() + 10_000;
    while (!d.connected) {
      if (Date.now() > deadline) throw new Error(`the coordinator did not say HELLO:\n${server.log().slice(-2000)}`);
      await sleep(20);
    }
    // A completion with no worker listed, as when the coordinator's warmup decode reaches the dispatcher before any
    // worker (it does on fast machines): LOCAL answers. With the default quiet window the layers would then stay
    // local for a second and the tests below would see no REQUEST at all (CI did); quietMs 0 keeps them dispatchable.
    await completeGreedy(server.url, PROMPT, 2, m.ban);
    assert.ok(d.totals.localRequests > 0, 'the no-worker completion reached the dispatcher');
  });

  after(async () => {
    await server?.stop();
    await d?.close();
    await backend?.close();
  });

  /** One completion with the given workers; returns its tokens and the dispatcher's pair counts during it. */
  async function run(list: WorkerLink[]): Promise<{ tokens: number[]; served: number; fallback: number; rejected: number; log: string }> {
    links.list = list;
    const before = { ...d.totals.pairs };
    const logMark = server.log().length;
    const got = await completeGreedy(server.url, PROMPT, N, m.ban);
    const p = d.totals.pairs;
    return {
      tokens: got.tokens,
      served: p.served - before.served,
      fallback: p.fallback - before.fallback,
      rejected: p.rejected - before.rejected,
      log: server.log().slice(logMark),
    };
  }

  const split = (tag: string, faults: Record<string, 'silent' | 'short' | 'nan'> = {}): WorkerLink[] =>
    moe.flatMap((layer) => [
      exactWorker(backend, `${tag}-L${layer}-lo`, layer, 0, 4, faults[`${layer}-lo`] ?? 'none'),
      exactWorker(backend, `${tag}-L${layer}-hi`, layer, 4, 8, faults[`${layer}-hi`] ?? 'none'),
    ]);

  test('--dispatch always, two workers per MoE layer: identical tokens, ≥ 90 % of routed pairs served', async (t) => {
    const r = await run(split('honest'));
    assert.equal(d.protocolVersion, 3, 'linkcpp-server and the hub speak protocol v3 (claims and standing offers)');
    assert.deepEqual(r.tokens, want, 'token ids identical to the stock server');
    const routed = r.served + r.fallback + r.rejected;
    t.diagnostic(`served ${r.served} of ${routed} routed pairs (${((100 * r.served) / routed).toFixed(1)} %)`);
    assert.ok(routed > 0 && r.served >= 0.9 * routed, `served ${r.served} of ${routed}`);
    assert.doesNotMatch(r.log, FALLBACK_LINE, 'the coordinator never had to fall back');
    const text = await registry.metrics();
    assert.match(text, /expertswarm_dispatch_pairs_total\{model="qwen3moe-test",outcome="served"\} [1-9]/);
  });

  test('a worker that never answers: identical tokens, its pairs fall back, it is benched', async () => {
    benched = [];
    const layer = moe[0] as number;
    const r = await run(split('silent', { [`${layer}-hi`]: 'silent' }));
    assert.deepEqual(r.tokens, want);
    assert.ok(r.fallback > 0, 'the silent worker’s pairs fell back');
    assert.ok(r.served > 0);
    assert.deepEqual(benched, [`silent-L${layer}-hi`]);
    assert.ok(d.isBenched(`silent-L${layer}-hi`));
    assert.doesNotMatch(r.log, FALLBACK_LINE, 'answered before the coordinator’s deadline every time');
  });

  test('workers answering a wrong size or NaN: rejected, identical tokens', async () => {
    const [l0, l1] = moe as [number, number];
    const r = await run(split('faulty', { [`${l0}-lo`]: 'short', [`${l1 ?? l0}-hi`]: 'nan' }));
    assert.deepEqual(r.tokens, want);
    assert.ok(r.rejected > 0, 'answers rejected');
    assert.ok(r.served > 0, 'the honest workers still served');
    assert.doesNotMatch(r.log, FALLBACK_LINE, 'the dispatcher answered in time, with valid frames');
  });
});
