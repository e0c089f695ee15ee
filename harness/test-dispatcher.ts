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
 *
 * Versions (docs/dispatch-protocol.md, "Negotiation"): it answers HELLO_ACK in min(the HELLO's version,
 * `maxVersion`) (2 unless told 1) and speaks that version on the connection. In v1 it answers each REQUEST with a
 * RESPONSE; in v2 with a CLAIM at once (the pairs it will serve: all / half / none) and, when it claimed any, a RESULT
 * with their sums. `closeOnNewerHello` makes it an old dispatcher that closes on a HELLO newer than `maxVersion`, and
 * `ackVersion` forces the HELLO_ACK's version (a negative control).
 *
 * Version 3 (standing offers) only when told `maxVersion` 3: each RESULT carries `offer` (none unless set; its expert
 * bitmap from `offer.experts`, every expert by default), a REQUEST the coordinator pre-claimed pairs of gets no CLAIM,
 * only one RESULT serving (as the behaviour says, among them) the pre-claimed pairs, and the log records per request
 * how many pairs it pre-claimed. `invalid-offer` and `serve-unpreclaimed` are its misbehaviours.
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
  checkVersion,
  encodeClaim,
  encodeHelloAck,
  offerBitmapBytes,
  encodeResponse,
  encodeResult,
  negotiateVersion,
  type DispatchClaim,
  type DispatchOffer,
  type DispatchRequest,
  type DispatchResponse,
  type DispatchVersion,
  type FrameHeader,
  type Hello,
} from '../protocol/dispatch.ts';
import { expertFfnAccumulate } from '../shaders/reference/expert-ffn.ts';
import { ExpertStore } from './expert-store.ts';
import { GgmlExactBackend } from './ggml-exact.ts';
import type { ExpertBackend } from './expert-backend.ts';
import { mulberry32 } from '../shaders/random.ts';

/**
 * - `all` / `half` / `none`: serve every / every other / no pair (the rest reported not served; in v2 claimed: the
 *   pairs served, nothing claimed for `none`).
 * - `local`: answer LOCAL (v2: a CLAIM of nothing), with `quietMs`; `stall`: never answer (v2: no CLAIM); `die`:
 *   close mid-frame; `garbage`: send junk (v2: instead of the CLAIM).
 * - v2 only (in v1 they act as `stall` / `garbage` / `half` / `half` / `all`): `stall-result`: claim every pair,
 *   then never send the RESULT; `garbage-result`: claim every pair, then junk instead of the RESULT; `late-half`:
 *   claim every pair, serve every other one in the RESULT (as if the rest of the workers were late: the coordinator
 *   computes them after the RESULT); `serve-unclaimed`: claim half, then a RESULT that serves every pair (invalid: a
 *   served pair that was not claimed); `response-in-v2`: answer with a v1 RESPONSE (kind 4) in a version 2 header
 *   (invalid in v2).
 * - v3 only (on a v1 or v2 connection they act as `all`; CLAIM exchanges as `all`): `invalid-offer`: every RESULT
 *   carries `offer` (or a default one) with `invalidOffer`'s fields over it (a = 2 unless told), forged past the
 *   encoder; `serve-unpreclaimed`: a pre-claimed REQUEST's RESULT reports every pair served, pre-claimed or not
 *   (invalid wherever a pair was not pre-claimed; the sums cover the pre-claimed ones).
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
  | 'stall-result'
  | 'die'
  | 'garbage'
  | 'garbage-result'
  | 'late-half'
  | 'serve-unclaimed'
  | 'response-in-v2'
  | 'invalid-offer'
  | 'serve-unpreclaimed'
  | 'wrong-expert'
  | 'drop-one'
  | 'sums-x1.01'
  | 'prompt-only';

/**
 * Which pairs a response (v2: a claim) asks the coordinator to audit (report its own sums of). Only pairs the
 * dispatcher did not serve (v2: claim), except for the negative control:
 * - `all-unserved`: every pair not served;
 * - a number f in [0, 1]: each pair not served with probability f (seeded: the same run asks for the same pairs);
 * - a function of (token, k): the pairs not served for which it says true (e.g. `(t, k) => k === 0`);
 * - `served-too`: every pair, served (claimed) ones included. Invalid wherever a pair is served (claimed): the
 *   coordinator must drop the connection and compute locally (the encoder refuses such a frame, so it is forged here).
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

export type { ExpertBackend };

/**
 * v3: the standing offer each RESULT carries (docs/dispatch-protocol.md, "Version 3"): the line a·N − b, at most
 * `maxPairs`, good for `ttlMs`, over the experts [begin, end) of `experts` (every expert of the model when absent).
 */
export interface TestOffer {
  a: number;
  b: number;
  maxPairs: number;
  ttlMs: number;
  experts?: [number, number];
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
  /** The connection's protocol version. */
  version: DispatchVersion;
  /** v2: pairs claimed (v1: the served ones; v3 pre-claimed: the pre-claimed ones). */
  claimed: number;
  /** v3: pairs the REQUEST pre-claimed under a standing offer (answered without a CLAIM); 0: none (a CLAIM exchange). */
  preclaimed: number;
  /** v3: the pre-claim flags [nTokens × nUsed], when it pre-claimed any. */
  preclaimedFlags?: Uint8Array;
  /** performance.now() when the REQUEST was decoded, and when its answer's last frame had been written. */
  receivedMs: number;
  answeredMs: number;
  /** Pairs reported served / not served in the answer, and how many of the latter it asked to audit. */
  served: number;
  notServed: number;
  audited: number;
  /** RMS of the rows and of the sums sent back (0 when nothing was served). */
  rowsRms: number;
  sumsRms: number;
  /** The request's rows, expert ids and router weights and the sums sent back, when the dispatcher's `capture` is on. */
  rows?: Float32Array;
  ids?: Int32Array;
  probs?: Float32Array;
  sums?: Float32Array;
}

export interface DispatcherStats {
  hellos: Hello[];
  /** Per HELLO, in order: the version it offered and the one acknowledged (null: closed without HELLO_ACK). */
  versions: Array<{ offered: number; agreed: DispatchVersion | null }>;
  requests: number;
  /** CLAIM frames written (v2 and v3), and v3 RESULTs that carried an offer. */
  claims: number;
  offers: number;
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
  /** v2/v3: how long each RESULT is held back after its sums are ready (a slow worker), ms. */
  resultDelayMs = 0;
  /** Keep each request's rows and sums in the log (for measurements). */
  capture = false;
  /** Which pairs to ask the coordinator to audit; none when undefined. */
  audit: AuditPolicy | undefined;
  /** What computes the experts: the coordinator's arithmetic bit for bit unless replaced (the caller closes its own). */
  backend: ExpertBackend;
  /** The highest protocol version it speaks: a connection speaks min(HELLO's, this). */
  maxVersion: DispatchVersion = 2;
  /** An old dispatcher: a HELLO newer than `maxVersion` is refused by closing, without HELLO_ACK. */
  closeOnNewerHello = false;
  /** Forces the HELLO_ACK's version (and the connection's), whatever was offered: a negative control. */
  ackVersion: DispatchVersion | undefined;
  /** v3: the offer each RESULT carries; null: none. */
  offer: TestOffer | null = null;
  /** `invalid-offer`: the fields forged over the offer (each out of range makes it invalid). */
  invalidOffer: Partial<Omit<TestOffer, 'experts'>> = { a: 2 };
  readonly stats: DispatcherStats = {
    hellos: [],
    versions: [],
    requests: 0,
    claims: 0,
    offers: 0,
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

  /**
   * Resolves once a coordinator's HELLO has been acknowledged (bounded), and a little later: the coordinator takes
   * the connection into use when it has read the HELLO_ACK, which the dispatcher cannot see; a completion started at
   * once could otherwise be computed before it has.
   */
  async waitForHello(timeoutMs = 10_000, graceMs = 100): Promise<Hello> {
    const deadline = Date.now() + timeoutMs;
    while (!this.stats.versions.some((v) => v.agreed !== null)) {
      if (Date.now() > deadline) throw new Error('no coordinator connected to the test dispatcher in time');
      await new Promise((r) => setTimeout(r, 20));
    }
    await new Promise((r) => setTimeout(r, graceMs));
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
    let version: DispatchVersion | undefined;
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
              if (version !== undefined) throw new Error('a second HELLO on the connection');
              const hello = decodeHello(payload);
              nExpert = hello.nExpert;
              this.nExpert = hello.nExpert;
              this.stats.hellos.push(hello);
              if (this.closeOnNewerHello && header.version > this.maxVersion) {
                this.stats.versions.push({ offered: header.version, agreed: null });
                s.destroy();
                return;
              }
              version = this.ackVersion ?? (Math.min(negotiateVersion(header.version), this.maxVersion) as DispatchVersion);
              this.stats.versions.push({ offered: header.version, agreed: version });
              s.write(encodeHelloAck(true, 0, version));
              return;
            }
            if (version === undefined) throw new Error(`frame kind ${header.kind} before HELLO`);
            checkVersion(header, version);
            if (header.kind === FrameKind.Audit) {
              this.receiveAudit(header, payload, pending);
            } else {
              await this.answer(s, decodeRequest(header, payload, nExpert), version, pending);
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

  /** Audit flags for a response (claim) under the current policy; null when it asks for none. */
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

  /**
   * v2: writes a CLAIM, asking for the audits the policy says (among the unclaimed pairs) and remembering them. As in
   * `respond`, `served-too` on a claim with claimed pairs is forged: the audit flags spliced in after the claimed ones.
   */
  private claim(
    s: Socket,
    r: DispatchRequest,
    c: DispatchClaim,
    pending: Map<number, { r: DispatchRequest; flags: Uint8Array }>,
    version: DispatchVersion,
  ): number {
    this.stats.claims++;
    const flags = this.auditFlags(r, c.claimed);
    if (!flags) {
      s.write(encodeClaim(c, version));
      return 0;
    }
    const nAudit = flags.reduce((n, f) => n + f, 0);
    this.stats.auditsAsked++;
    pending.set(r.seq, { r, flags });
    const claimed = c.claimed;
    if (!claimed || !flags.some((f, i) => f === 1 && claimed[i] === 1)) {
      s.write(encodeClaim({ ...c, audit: flags }, version));
      return nAudit;
    }
    const plain = encodeClaim({ ...c, audit: null }, version);
    const padded = (flags.length + 3) & ~3;
    const forged = new Uint8Array(plain.length + padded);
    forged.set(plain);
    forged.set(flags, plain.length); // after the fixed part and the claimed flags
    const v = new DataView(forged.buffer);
    v.setUint32(12, forged.length - HEADER_BYTES, true);
    v.setUint32(HEADER_BYTES + 20, nAudit, true);
    s.write(forged);
    return nAudit;
  }

  private record(
    r: DispatchRequest,
    version: DispatchVersion,
    claimed: number,
    served: number,
    sums: Float32Array | null,
    audited = 0,
    preclaimed = 0,
    receivedMs = performance.now(),
  ): void {
    this.stats.log.push({
      layer: r.layer,
      nTokens: r.nTokens,
      nEmbd: r.nEmbd,
      nUsed: r.nUsed,
      deadlineUs: r.deadlineUs,
      localNsPerPair: r.localNsPerPair,
      version,
      claimed,
      preclaimed,
      receivedMs,
      answeredMs: performance.now(),
      ...(r.preclaimed && preclaimed > 0 ? { preclaimedFlags: Uint8Array.from(r.preclaimed) } : {}),
      served,
      notServed: r.nTokens * r.nUsed - served,
      audited,
      rowsRms: rms(r.rows),
      sumsRms: sums ? rms(sums) : 0,
      ...(this.capture
        ? { rows: r.rows.slice(), ids: Int32Array.from(r.ids), probs: Float32Array.from(r.probs), ...(sums ? { sums: sums.slice() } : {}) }
        : {}),
    });
  }

  private junk(seq: number): Uint8Array {
    const junk = new Uint8Array(64);
    for (let i = 0; i < junk.length; i++) junk[i] = (i * 131 + seq * 17) & 0xff;
    return junk;
  }

  /** v3: the offer a RESULT carries now (null: none), its bitmap from `offer.experts` over the HELLO's experts. */
  private offerFrame(): DispatchOffer | null {
    const o = this.offer ?? (this.behaviour === 'invalid-offer' ? { a: 1, b: 0, maxPairs: 64, ttlMs: 250 } : null);
    if (!o) return null;
    const [begin, end] = o.experts ?? [0, this.nExpert];
    const experts = new Uint8Array(offerBitmapBytes(this.nExpert));
    for (let e = begin; e < end; e++) experts[e >> 3] = (experts[e >> 3] as number) | (1 << (e & 7));
    return { ttlMs: o.ttlMs, maxPairs: o.maxPairs, a: o.a, b: o.b, experts };
  }

  /**
   * Writes a RESULT; in v3 with the offer (`invalid-offer`: `invalidOffer`'s fields written over its trailer, which the
   * encoder would refuse).
   */
  private result(s: Socket, r: DispatchRequest, served: Uint8Array, sums: Float32Array, version: DispatchVersion): void {
    const base = { seq: r.seq, layer: r.layer, nTokens: r.nTokens, nUsed: r.nUsed, served, sums };
    const offer = version >= 3 ? this.offerFrame() : null;
    if (!offer) {
      s.write(encodeResult(base, version, this.nExpert));
      return;
    }
    this.stats.offers++;
    const frame = encodeResult({ ...base, offer }, version, this.nExpert);
    if (this.behaviour === 'invalid-offer') {
      // the offer trailer {ttl_ms u32, max_pairs u32, a f32, b f32} ends the frame, before its padded bitmap
      const at = frame.length - ((offer.experts.length + 3) & ~3) - 16;
      const v = new DataView(frame.buffer, frame.byteOffset, frame.length);
      const bad = this.invalidOffer;
      if (bad.ttlMs !== undefined) v.setUint32(at, bad.ttlMs, true);
      if (bad.maxPairs !== undefined) v.setUint32(at + 4, bad.maxPairs, true);
      if (bad.a !== undefined) v.setFloat32(at + 8, bad.a, true);
      if (bad.b !== undefined) v.setFloat32(at + 12, bad.b, true);
    }
    s.write(frame);
  }

  private async answer(
    s: Socket,
    r: DispatchRequest,
    version: DispatchVersion,
    pending: Map<number, { r: DispatchRequest; flags: Uint8Array }>,
  ): Promise<void> {
    const receivedMs = performance.now();
    this.stats.requests++;
    this.stats.localCosts.push(r.localNsPerPair);
    const base = { seq: r.seq, layer: r.layer, nTokens: r.nTokens, nUsed: r.nUsed, quietMs: this.quietMs };
    if (r.layer <= this.lastLayer) this.promptEvaluation = r.nTokens > 1;
    this.lastLayer = r.layer;
    const generationStep = !this.promptEvaluation;
    const v2 = version >= 2;
    const pairs = r.nTokens * r.nUsed;
    // v3: the pairs the coordinator pre-claimed under an offer; such a REQUEST gets no CLAIM, only a RESULT
    const pre = version >= 3 && r.preclaimed ? r.preclaimed : null;
    const nPre = pre ? pre.reduce((n, f) => n + f, 0) : 0;
    // v2-only behaviours, as their v1 counterparts on a v1 connection; v3-only ones as `all` below v3
    const v1Like: Partial<Record<DispatcherBehaviour, DispatcherBehaviour>> = {
      'stall-result': 'stall',
      'garbage-result': 'garbage',
      'late-half': 'half',
      'serve-unclaimed': 'half',
      'response-in-v2': 'all',
    };
    const v3Only: DispatcherBehaviour[] = ['invalid-offer', 'serve-unpreclaimed'];
    let behaviour = v2 ? this.behaviour : (v1Like[this.behaviour] ?? this.behaviour);
    if (version < 3 && v3Only.includes(behaviour)) behaviour = 'all';
    const nothing = (quietMs: number): number => {
      if (pre) {
        // pre-claimed: no CLAIM to decline with, so a RESULT serving none of them
        this.result(s, r, new Uint8Array(pairs), new Float32Array(r.nTokens * r.nEmbd), version);
        return 0;
      }
      return v2
        ? this.claim(s, r, { ...base, quietMs, claimed: null }, pending, version)
        : this.respond(s, r, { ...base, quietMs, mode: 'local' }, pending);
    };
    switch (behaviour) {
      case 'stall':
        return;
      case 'die': {
        const whole = v2 ? encodeClaim({ ...base, claimed: null }, version) : encodeResponse({ ...base, mode: 'local' });
        s.end(whole.subarray(0, 10));
        s.destroy();
        return;
      }
      case 'garbage':
        s.write(this.junk(r.seq));
        return;
      case 'response-in-v2': {
        const frame = encodeResponse({ ...base, mode: 'local' });
        new DataView(frame.buffer).setUint16(4, version, true);
        s.write(frame);
        return;
      }
      case 'prompt-only':
        if (!generationStep) break;
        this.stats.notServedPairs += pairs;
        this.record(r, version, nPre, 0, null, nothing(0), nPre, receivedMs);
        return;
      case 'local':
        this.stats.notServedPairs += pairs;
        this.record(r, version, nPre, 0, null, nothing(this.quietMs), nPre, receivedMs);
        return;
    }
    const served = new Uint8Array(pairs);
    const ids = Int32Array.from(r.ids);
    const probs = Float32Array.from(r.probs);
    for (let p = 0; p < pairs; p++) {
      const half = behaviour === 'half' || behaviour === 'serve-unclaimed';
      // pre-claimed: only pre-claimed pairs may be served
      const serve = behaviour !== 'none' && (!half || p % 2 === 0) && (!pre || pre[p] === 1);
      if (!serve) {
        probs[p] = 0;
        continue;
      }
      served[p] = 1;
      if (behaviour === 'wrong-expert') ids[p] = ((ids[p] as number) + 1) % this.nExpert;
      // Reported served, left out of the sums.
      if (behaviour === 'drop-one' && generationStep && p % r.nUsed === r.nUsed - 1) probs[p] = 0;
    }
    let nServed = served.reduce((a, f) => a + f, 0);
    const nClaimed = pre ? nPre : nServed;
    let audited = 0;
    if (v2) {
      // CLAIM at once (none for a pre-claimed REQUEST), then compute; nothing claimed: no RESULT
      if (!pre) audited = this.claim(s, r, { ...base, claimed: nServed > 0 ? served.slice() : null }, pending, version);
      if (behaviour === 'late-half') {
        // claimed every pair; every other one is not served after all (its worker was late)
        for (let p = 1; p < pairs; p += 2) {
          served[p] = 0;
          probs[p] = 0;
        }
        nServed = served.reduce((a, f) => a + f, 0);
      }
      if (nClaimed === 0) {
        this.stats.notServedPairs += pairs;
        this.record(r, version, 0, 0, null, audited, 0, receivedMs);
        return;
      }
      if (behaviour === 'stall-result') return;
      if (behaviour === 'garbage-result') {
        s.write(this.junk(r.seq));
        return;
      }
    }
    const sums =
      nServed > 0 ? await this.backend.layerSums(r.layer, r.rows, ids, probs, r.nTokens, r.nUsed) : new Float32Array(r.nTokens * r.nEmbd);
    if (behaviour === 'sums-x1.01' && generationStep) for (let i = 0; i < sums.length; i++) sums[i] = (sums[i] as number) * 1.01;
    if (v2 && this.resultDelayMs > 0) await new Promise((r) => setTimeout(r, this.resultDelayMs));
    if (s.destroyed) return;
    if (v2) {
      // serve-unclaimed: every pair reported served, half of them never claimed (the sums cover the claimed ones);
      // serve-unpreclaimed: every pair of a pre-claimed REQUEST reported served (the sums cover the pre-claimed ones)
      const everyPair = behaviour === 'serve-unclaimed' || (behaviour === 'serve-unpreclaimed' && pre !== null);
      this.result(s, r, everyPair ? new Uint8Array(pairs).fill(1) : served, sums, version);
    } else {
      audited = this.respond(s, r, { ...base, mode: 'served', served, sums }, pending);
    }
    this.stats.servedPairs += nServed;
    this.stats.notServedPairs += pairs - nServed;
    if (nServed > 0) this.stats.layersServed.add(r.layer);
    this.record(r, version, nClaimed, nServed, sums, audited, nPre, receivedMs);
  }
}
