/**
 * A dispatcher for coordinator tests: speaks the expert-dispatch protocol on a unix socket and computes experts
 * with a pluggable backend — by default `GgmlExactBackend` (ggml-exact.ts: the coordinator's own CPU arithmetic, bit
 * for bit), or the CPU reference of shaders/reference/ (`CpuReferenceBackend`: llama.cpp's activation rounding,
 * float64 sums), or the WGSL runtime (wgsl-backend.ts). It can be told to serve all, half or none of the
 * pairs, to answer "local", to stall, to die mid-frame, or to send garbage; and, as negative controls for the
 * exactness checks, to serve wrong experts, to drop one routed expert per token while reporting it served, to scale
 * its sums by 1.01, or to stop serving after the prompt. It records every request it answered and every protocol
 * error it met, so tests can count them. With `audit` set it also asks the coordinator to audit pairs it did not
 * serve (docs/dispatch-protocol.md) and records every AUDIT frame with the request it belongs to.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { rm } from 'node:fs/promises';
import {
  FrameKind,
  FrameReader,
  HEADER_BYTES,
  decodeAudit,
  decodeHello,
  decodeRequest,
  encodeHelloAck,
  encodeResponse,
  type DispatchRequest,
  type DispatchResponse,
  type FrameHeader,
  type Hello,
} from '../../hub/dispatch/protocol.ts';
import { expertFfnAccumulate } from '../../shaders/reference/expert-ffn.ts';
import { ExpertStore } from './expert-store.ts';
import { GgmlExactBackend } from './ggml-exact.ts';
import { mulberry32 } from './random.ts';

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

/**
 * Which pairs a response asks the coordinator to audit (report its own sums of). Only pairs the dispatcher did not
 * serve, except for the negative control:
 * - `all-unserved`: every pair not served;
 * - a number f in [0, 1]: each pair not served with probability f (seeded: the same run asks for the same pairs);
 * - a function of (token, k): the pairs not served for which it says true (e.g. `(t, k) => k === 0`);
 * - `served-too`: every pair, served ones included. Invalid wherever a pair is served: the coordinator must drop the
 *   connection and compute locally (the encoder refuses such a frame, so it is forged here).
 */
export type AuditPolicy = 'all-unserved' | 'served-too' | number | ((t: number, k: number) => boolean);

/** One AUDIT frame with the request it answers and the flags that asked for it. */
export interface AuditRecord {
  seq: number;
  layer: number;
  nTokens: number;
  nEmbd: number;
  nUsed: number;
  nAudit: number;
  /** [nTokens × nUsed] the audit flags the response carried. */
  flags: Uint8Array;
  /** The request's rows, ids and probs. */
  rows: Float32Array;
  ids: Int32Array;
  probs: Float32Array;
  /** The coordinator's sums over the audited pairs, [nTokens × nEmbd]. */
  sums: Float32Array;
}

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
  /** Pairs reported served / not served in the answer, and how many of the latter it asked to audit. */
  served: number;
  notServed: number;
  audited: number;
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
  /** Responses that asked for an audit, and the AUDIT frames received, in order. */
  auditsAsked: number;
  audits: AuditRecord[];
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
  /** Which pairs to ask the coordinator to audit; none when undefined. */
  audit: AuditPolicy | undefined;
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
    auditsAsked: 0,
    audits: [],
  };
  private sockets = new Set<Socket>();
  private nExpert = 0;
  /** Layer of the last request, and whether the graph evaluation it belongs to is a prompt's. */
  private lastLayer = Number.POSITIVE_INFINITY;
  private promptEvaluation = false;
  private store: ExpertStore | undefined;
  private auditRandom = mulberry32(0x5eed);

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

  /**
   * What `backend` (the coordinator's arithmetic bit for bit by default) computes for an audit's pairs: the same
   * request with every pair not flagged left out.
   */
  async auditReference(a: AuditRecord, backend: ExpertBackend = this.exact): Promise<Float32Array> {
    const probs = a.probs.map((p, i) => (a.flags[i] === 1 ? p : 0));
    return backend.layerSums(a.layer, a.rows, a.ids, probs, a.nTokens, a.nUsed);
  }

  private serve(s: Socket): void {
    this.sockets.add(s);
    s.on('close', () => this.sockets.delete(s));
    s.on('error', () => s.destroy());
    const reader = new FrameReader();
    let nExpert = 0;
    let queue = Promise.resolve();
    // Responses of this connection that asked for an audit, by seq, until their AUDIT arrives.
    const pending = new Map<number, { r: DispatchRequest; flags: Uint8Array }>();
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
            } else if (header.kind === FrameKind.Audit) {
              this.receiveAudit(header, payload, pending);
            } else {
              await this.answer(s, decodeRequest(header, payload, nExpert), pending);
            }
          } catch (e) {
            this.stats.protocolErrors.push((e as Error).message);
            s.destroy();
          }
        });
      }
    });
  }

  /** Matches an AUDIT frame with the response that asked for it; anything unexpected is a protocol error. */
  private receiveAudit(header: FrameHeader, payload: Uint8Array, pending: Map<number, { r: DispatchRequest; flags: Uint8Array }>): void {
    const asked = pending.get(header.seq);
    if (!asked) throw new Error(`AUDIT for seq ${header.seq}, which asked for none`);
    pending.delete(header.seq);
    const { r, flags } = asked;
    const a = decodeAudit(header, payload, r.nEmbd);
    const nAudit = flags.reduce((n, f) => n + f, 0);
    if (a.layer !== r.layer || a.nTokens !== r.nTokens || a.nAudit !== nAudit) {
      throw new Error(`AUDIT ${JSON.stringify({ ...a, sums: undefined })} does not match its request (layer ${r.layer}, ${nAudit} pairs)`);
    }
    this.stats.audits.push({
      seq: a.seq,
      layer: a.layer,
      nTokens: a.nTokens,
      nEmbd: r.nEmbd,
      nUsed: r.nUsed,
      nAudit: a.nAudit,
      flags,
      rows: r.rows,
      ids: r.ids,
      probs: r.probs,
      sums: a.sums,
    });
  }

  /** Audit flags for a response under the current policy; null when it asks for none. */
  private auditFlags(r: DispatchRequest, served: Uint8Array | null): Uint8Array | null {
    const policy = this.audit;
    if (policy === undefined) return null;
    const flags = new Uint8Array(r.nTokens * r.nUsed);
    for (let p = 0; p < flags.length; p++) {
      const isServed = served?.[p] === 1;
      if (policy === 'served-too') flags[p] = 1;
      else if (isServed) continue;
      else if (policy === 'all-unserved') flags[p] = 1;
      else if (typeof policy === 'number') flags[p] = this.auditRandom() < policy ? 1 : 0;
      else flags[p] = policy(Math.floor(p / r.nUsed), p % r.nUsed) ? 1 : 0;
    }
    return flags.some((f) => f === 1) ? flags : null;
  }

  /**
   * Writes a response, asking for the audits the policy says and remembering them. `served-too` is refused by the
   * encoder wherever a pair is served, so that frame is forged: encoded without audit flags, then the flags spliced in
   * where docs/dispatch-protocol.md puts them (after the served flags) and n_audit set.
   */
  private respond(
    s: Socket,
    r: DispatchRequest,
    response: DispatchResponse,
    pending: Map<number, { r: DispatchRequest; flags: Uint8Array }>,
  ): number {
    const flags = this.auditFlags(r, response.mode === 'served' ? response.served : null);
    if (!flags) {
      s.write(encodeResponse(response));
      return 0;
    }
    const nAudit = flags.reduce((n, f) => n + f, 0);
    this.stats.auditsAsked++;
    pending.set(r.seq, { r, flags });
    const valid = response.mode !== 'served' || !flags.some((f, i) => f === 1 && response.served[i] === 1);
    if (valid) {
      s.write(encodeResponse({ ...response, audit: flags }));
      return nAudit;
    }
    const plain = encodeResponse(response);
    const padded = (flags.length + 3) & ~3;
    const at = HEADER_BYTES + 28 + padded; // fixed part, then the served flags
    const forged = new Uint8Array(plain.length + padded);
    forged.set(plain.subarray(0, at));
    forged.set(flags, at);
    forged.set(plain.subarray(at), at + padded);
    const v = new DataView(forged.buffer);
    v.setUint32(12, forged.length - HEADER_BYTES, true);
    v.setUint32(HEADER_BYTES + 24, nAudit, true);
    s.write(forged);
    return nAudit;
  }

  private record(r: DispatchRequest, served: number, sums: Float32Array | null, audited = 0): void {
    this.stats.log.push({
      layer: r.layer,
      nTokens: r.nTokens,
      nEmbd: r.nEmbd,
      nUsed: r.nUsed,
      deadlineUs: r.deadlineUs,
      localNsPerPair: r.localNsPerPair,
      served,
      notServed: r.nTokens * r.nUsed - served,
      audited,
      rowsRms: rms(r.rows),
      sumsRms: sums ? rms(sums) : 0,
      ...(this.capture ? { rows: r.rows.slice(), ...(sums ? { sums: sums.slice() } : {}) } : {}),
    });
  }

  private async answer(s: Socket, r: DispatchRequest, pending: Map<number, { r: DispatchRequest; flags: Uint8Array }>): Promise<void> {
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
        this.record(r, 0, null, this.respond(s, r, { ...base, mode: 'local', quietMs: 0 }, pending));
        return;
      case 'local':
        this.stats.notServedPairs += r.nTokens * r.nUsed;
        this.record(r, 0, null, this.respond(s, r, { ...base, mode: 'local' }, pending));
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
    this.record(r, nServed, sums, this.respond(s, r, { ...base, mode: 'served', served, sums }, pending));
  }
}
