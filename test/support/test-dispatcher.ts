/**
 * A dispatcher for coordinator tests: speaks the expert-dispatch protocol on a unix socket and computes experts
 * with a pluggable backend — by default `GgmlExactBackend` (ggml-exact.ts: the coordinator's own CPU arithmetic, bit
 * for bit), or the CPU reference of shaders/reference/ (`CpuReferenceBackend`: llama.cpp's activation rounding,
 * float64 sums), or the WGSL runtime (wgsl-backend.ts). It can be told to serve all, half or none of the
 * pairs, to answer "local", to stall, to die mid-frame, or to send garbage; and, as negative controls for the
 * exactness checks, to serve wrong experts, to drop one routed expert per token while reporting it served, to scale
 * its sums by 1.01, or to stop serving after the prompt. It records every request it answered and every protocol
 * error it met, so tests can count them.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { rm } from 'node:fs/promises';
import {
  FrameKind,
  FrameReader,
  decodeHello,
  decodeRequest,
  encodeHelloAck,
  encodeResponse,
  type DispatchRequest,
  type Hello,
} from '../../hub/dispatch/protocol.ts';
import { expertFfnAccumulate } from '../../shaders/reference/expert-ffn.ts';
import { ExpertStore } from './expert-store.ts';
import { GgmlExactBackend } from './ggml-exact.ts';

/**
 * - `all` / `half` / `none`: serve every / every other / no pair (the rest reported not served).
 * - `local`: answer LOCAL (with `quietMs`); `stall`: never answer; `die`: close mid-frame; `garbage`: send junk.
 * - `wrong-expert`: serve every pair with the next expert's matrices.
 * Negative controls that apply only at generation steps (graph evaluations after the prompt's; the prompt is served
 * honestly). An evaluation starts with a request for a layer at or below the previous request's; it is the prompt's
 * when that first request has more than one row (the last layer of a prompt evaluation has one row: llama.cpp keeps
 * only the rows whose logits are wanted there, so a single request's rows do not say which evaluation it belongs to):
 * - `drop-one`: leave the last routed expert of every token out of the sums, yet report it served.
 * - `sums-x1.01`: serve every pair, sums multiplied by 1.01.
 * - `prompt-only`: serve the prompt, then answer LOCAL (quiet 0) to every generation step: the coordinator computes
 *   the rest itself, so tokens stay right and only the count of served requests shows it.
 */
export type DispatcherBehaviour =
  | 'all'
  | 'half'
  | 'none'
  | 'local'
  | 'stall'
  | 'die'
  | 'garbage'
  | 'wrong-expert'
  | 'drop-one'
  | 'sums-x1.01'
  | 'prompt-only';

/** Computes one layer's routed-expert sums: out[t] = Σ_k probs[t,k] · expert_{ids[t,k]}(rows[t]). */
export interface ExpertBackend {
  readonly name: string;
  layerSums(layer: number, rows: Float32Array, ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number): Promise<Float32Array>;
  close?(): Promise<void> | void;
}

/** The CPU reference (float64 accumulation), rounding activations as llama.cpp's CPU backend does unless told not to. */
export class CpuReferenceBackend implements ExpertBackend {
  readonly name: string;
  constructor(
    private readonly store: ExpertStore,
    private readonly llamaNumerics = true,
  ) {
    this.name = `CPU reference (${llamaNumerics ? 'llama' : 'exact'} numerics)`;
  }

  async layerSums(
    layer: number,
    rows: Float32Array,
    ids: Int32Array,
    probs: Float32Array,
    nTokens: number,
    nUsed: number,
  ): Promise<Float32Array> {
    const nEmbd = rows.length / nTokens;
    const sums = new Float32Array(nTokens * nEmbd);
    const acc = new Float64Array(nEmbd);
    for (let t = 0; t < nTokens; t++) {
      acc.fill(0);
      const x = rows.subarray(t * nEmbd, (t + 1) * nEmbd);
      for (let k = 0; k < nUsed; k++) {
        const p = t * nUsed + k;
        if (probs[p] === 0) continue; // a pair left out by the caller
        expertFfnAccumulate(await this.store.expert(layer, ids[p] as number), x, probs[p] as number, acc, this.llamaNumerics);
      }
      sums.set(acc, t * nEmbd);
    }
    return sums;
  }
}

/** One answered request, as the dispatcher saw it. */
export interface RequestRecord {
  layer: number;
  nTokens: number;
  nEmbd: number;
  nUsed: number;
  /** The deadline and local cost the coordinator sent (protocol fields the computation does not use). */
  deadlineUs: number;
  localNsPerPair: number;
  /** Pairs reported served / not served in the answer. */
  served: number;
  notServed: number;
  /** RMS of the rows and of the sums sent back (0 when nothing was served). */
  rowsRms: number;
  sumsRms: number;
  /** The request's rows and the sums sent back, when the dispatcher's `capture` is on. */
  rows?: Float32Array;
  sums?: Float32Array;
}

export interface DispatcherStats {
  hellos: Hello[];
  requests: number;
  servedPairs: number;
  notServedPairs: number;
  layersServed: Set<number>;
  /** localNsPerPair values the coordinator reported. */
  localCosts: number[];
  protocolErrors: string[];
  /** Every answered request, in order. */
  log: RequestRecord[];
}

function rms(v: Float32Array): number {
  let s = 0;
  for (const x of v) s += x * x;
  return v.length === 0 ? 0 : Math.sqrt(s / v.length);
}

export class TestDispatcher {
  behaviour: DispatcherBehaviour = 'all';
  quietMs = 0;
  /** Keep each request's rows and sums in the log (for measurements). */
  capture = false;
  /** What computes the experts: the coordinator's arithmetic bit for bit unless replaced (the caller closes its own). */
  backend: ExpertBackend;
  readonly stats: DispatcherStats = {
    hellos: [],
    requests: 0,
    servedPairs: 0,
    notServedPairs: 0,
    layersServed: new Set(),
    localCosts: [],
    protocolErrors: [],
    log: [],
  };
  private sockets = new Set<Socket>();
  private nExpert = 0;
  /** Layer of the last request, and whether the graph evaluation it belongs to is a prompt's. */
  private lastLayer = Number.POSITIVE_INFINITY;
  private promptEvaluation = false;
  private store: ExpertStore | undefined;

  private constructor(
    readonly path: string,
    private readonly server: Server,
    private readonly modelPath: string,
    private readonly exact: GgmlExactBackend,
  ) {
    this.backend = exact;
  }

  static async start(path: string, modelPath: string, behaviour: DispatcherBehaviour = 'all'): Promise<TestDispatcher> {
    await rm(path, { force: true });
    const exact = await GgmlExactBackend.open(modelPath);
    const server = createServer();
    const d = new TestDispatcher(path, server, modelPath, exact);
    d.behaviour = behaviour;
    server.on('connection', (s) => d.serve(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => resolve());
    });
    return d;
  }

  /** The coordinator's own arithmetic, bit for bit (the default backend). */
  get ggmlExact(): GgmlExactBackend {
    return this.exact;
  }

  /** The CPU reference of shaders/reference/, rounding activations as llama.cpp does (`llama`) or not. */
  async cpuReference(llamaNumerics = true): Promise<CpuReferenceBackend> {
    this.store ??= await ExpertStore.open(this.modelPath);
    return new CpuReferenceBackend(this.store, llamaNumerics);
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.exact.close();
    await this.store?.close();
    await rm(this.path, { force: true });
  }

  /** Resolves once a coordinator has said hello (bounded). */
  async waitForHello(timeoutMs = 10_000): Promise<Hello> {
    const deadline = Date.now() + timeoutMs;
    while (this.stats.hellos.length === 0) {
      if (Date.now() > deadline) throw new Error('no coordinator connected to the test dispatcher in time');
      await new Promise((r) => setTimeout(r, 20));
    }
    return this.stats.hellos[0] as Hello;
  }

  /** Where the request log stands now; `since(mark)` returns what was answered after it. */
  mark(): number {
    return this.stats.log.length;
  }

  since(mark: number): RequestRecord[] {
    return this.stats.log.slice(mark);
  }

  private serve(s: Socket): void {
    this.sockets.add(s);
    s.on('close', () => this.sockets.delete(s));
    s.on('error', () => s.destroy());
    const reader = new FrameReader();
    let nExpert = 0;
    let queue = Promise.resolve();
    s.on('data', (chunk) => {
      let frames: ReturnType<typeof reader.push>;
      try {
        frames = reader.push(chunk);
      } catch (e) {
        this.stats.protocolErrors.push((e as Error).message);
        s.destroy();
        return;
      }
      for (const { header, payload } of frames) {
        queue = queue.then(async () => {
          if (s.destroyed) return;
          try {
            if (header.kind === FrameKind.Hello) {
              const hello = decodeHello(payload);
              nExpert = hello.nExpert;
              this.nExpert = hello.nExpert;
              this.stats.hellos.push(hello);
              s.write(encodeHelloAck(true));
            } else {
              await this.answer(s, decodeRequest(header, payload, nExpert));
            }
          } catch (e) {
            this.stats.protocolErrors.push((e as Error).message);
            s.destroy();
          }
        });
      }
    });
  }

  private record(r: DispatchRequest, served: number, sums: Float32Array | null): void {
    this.stats.log.push({
      layer: r.layer,
      nTokens: r.nTokens,
      nEmbd: r.nEmbd,
      nUsed: r.nUsed,
      deadlineUs: r.deadlineUs,
      localNsPerPair: r.localNsPerPair,
      served,
      notServed: r.nTokens * r.nUsed - served,
      rowsRms: rms(r.rows),
      sumsRms: sums ? rms(sums) : 0,
      ...(this.capture ? { rows: r.rows.slice(), ...(sums ? { sums: sums.slice() } : {}) } : {}),
    });
  }

  private async answer(s: Socket, r: DispatchRequest): Promise<void> {
    this.stats.requests++;
    this.stats.localCosts.push(r.localNsPerPair);
    const base = { seq: r.seq, layer: r.layer, nTokens: r.nTokens, nUsed: r.nUsed, quietMs: this.quietMs };
    if (r.layer <= this.lastLayer) this.promptEvaluation = r.nTokens > 1;
    this.lastLayer = r.layer;
    const generationStep = !this.promptEvaluation;
    switch (this.behaviour) {
      case 'stall':
        return;
      case 'die': {
        const whole = encodeResponse({ ...base, mode: 'local' });
        s.end(whole.subarray(0, 10));
        s.destroy();
        return;
      }
      case 'garbage': {
        const junk = new Uint8Array(64);
        for (let i = 0; i < junk.length; i++) junk[i] = (i * 131 + r.seq * 17) & 0xff;
        s.write(junk);
        return;
      }
      case 'prompt-only':
        if (!generationStep) break;
        this.stats.notServedPairs += r.nTokens * r.nUsed;
        this.record(r, 0, null);
        s.write(encodeResponse({ ...base, mode: 'local', quietMs: 0 }));
        return;
      case 'local':
        this.stats.notServedPairs += r.nTokens * r.nUsed;
        this.record(r, 0, null);
        s.write(encodeResponse({ ...base, mode: 'local' }));
        return;
    }
    const pairs = r.nTokens * r.nUsed;
    const served = new Uint8Array(pairs);
    const ids = Int32Array.from(r.ids);
    const probs = Float32Array.from(r.probs);
    for (let p = 0; p < pairs; p++) {
      const serve = this.behaviour !== 'none' && (this.behaviour !== 'half' || p % 2 === 0);
      if (!serve) {
        probs[p] = 0;
        continue;
      }
      served[p] = 1;
      if (this.behaviour === 'wrong-expert') ids[p] = ((ids[p] as number) + 1) % this.nExpert;
      // Reported served, left out of the sums.
      if (this.behaviour === 'drop-one' && generationStep && p % r.nUsed === r.nUsed - 1) probs[p] = 0;
    }
    const nServed = served.reduce((a, f) => a + f, 0);
    const sums =
      nServed > 0 ? await this.backend.layerSums(r.layer, r.rows, ids, probs, r.nTokens, r.nUsed) : new Float32Array(r.nTokens * r.nEmbd);
    if (this.behaviour === 'sums-x1.01' && generationStep) for (let i = 0; i < sums.length; i++) sums[i] = (sums[i] as number) * 1.01;
    this.stats.servedPairs += nServed;
    this.stats.notServedPairs += pairs - nServed;
    if (nServed > 0) this.stats.layersServed.add(r.layer);
    this.record(r, nServed, sums);
    s.write(encodeResponse({ ...base, mode: 'served', served, sums }));
  }
}
