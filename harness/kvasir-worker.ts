/**
 * A test double of a Kvasir worker, written from Kvasir's documented contract (its participation client, expert host
 * and native worker's wire), not its code: it logs in with an ed25519 key, joins the census holding nothing
 * (`n_layer`/`n_expert` 0), volunteers, downloads its slice on Kvasir's proxy path and checks the slice's
 * `kvasir.expert_shard.*` keys, heartbeats the segment with its relay url `relay:expert-<worker id>`, dials
 * `/api/expert-relay?session=S&token=T`, and answers the requests on that stream — v1, v2 reduce or v2f16, whichever
 * the hub writes — as `linkcpp-expert-worker --serve` does, with llama.cpp's CPU numerics (harness/ggml-exact.ts, bit
 * for bit as the coordinator). Answers go back cut in two messages, as a TCP bridge may cut them. A request the wire
 * refuses closes the relay (the worker has no error frame). `tamper` falsifies answers; `sendRaw`/`sendText` send
 * anything.
 *
 *   const w = new KvasirWorkerDouble({ hubUrl, workerId: 'kv1' });
 *   await w.join(8);                 // login, census, volunteer, download, heartbeat
 *   await w.dial();                  // the relay; w.closed resolves with its close code
 *   ...; await w.stop();
 */
import { WebSocket } from 'ws';
import { readGGUF, bytesSource } from '../gguf/reader.ts';
import { metaValue } from '../gguf/types.ts';
import { readExpertSliceBytes } from '../gguf/expert-slice.ts';
import {
  KVASIR_RELAY_PATH,
  KvasirRequestReader,
  type KvasirRequest,
  KvasirWireError,
  encodeKvasirAnswer,
} from '../protocol/kvasir-wire.ts';
import { type ExactExperts, ggmlExpertOut } from './ggml-exact.ts';
import { type FastExperts, type FastRow, fastExperts } from './kvasir-fast-experts.ts';
import { newVolunteer, type Volunteer } from './hub-fixtures.ts';

/** Returns other floats, raw bytes to send instead, or undefined to send the honest answer. */
export type KvasirTamper = (req: KvasirRequest, answer: Float32Array) => Float32Array | Uint8Array | undefined;

export interface KvasirAssignment {
  assigned: boolean;
  model: string;
  layer: number;
  experts: [number, number];
  n_embd: number;
  n_layer: number;
  n_expert: number;
}

export interface KvasirCoverageAnswer {
  ok: boolean;
  workers: number;
  replica: boolean;
  wired: boolean;
  listen_port: number | null;
  session: string | null;
}

export interface KvasirWorkerOptions {
  hubUrl: string;
  workerId: string;
  /** The same identity (wallet) again, e.g. after a quarantine. */
  identity?: Volunteer;
  tamper?: KvasirTamper;
}

export class KvasirWorkerDouble {
  readonly identity: Volunteer;
  token = '';
  assignment: KvasirAssignment | null = null;
  experts: ExactExperts | null = null;
  lastCoverage: KvasirCoverageAnswer | null = null;
  ws: WebSocket | null = null;
  /** The relay's close: its code and reason (resolves once per dial). */
  closed: Promise<{ code: number; reason: string }> = Promise.resolve({ code: 0, reason: '' });
  /** Requests answered, by wire; pairs computed, and of them those in requests of several rows (a prompt's batch). */
  readonly served = { v1: 0, v2: 0, v2f16: 0, pairs: 0, batchPairs: 0 };
  /** Q4_K SiLU experts unpacked for speed (harness/kvasir-fast-experts.ts), else null: ggml-exact per pair. */
  fast: FastExperts | null = null;
  /** Whether the last dial was upgraded (101: a refusal is a close after it). */
  opened = false;
  /** Why it closed the relay on a request it refused (a KvasirWireError code), if it did. */
  refused: string | null = null;
  tamper: KvasirTamper | undefined;
  private beat: NodeJS.Timeout | null = null;

  /** Time spent computing answers, ms (performance.now). */
  computeMs = 0;

  constructor(private readonly o: KvasirWorkerOptions) {
    this.identity = o.identity ?? newVolunteer();
    this.tamper = o.tamper;
  }

  get workerId(): string {
    return this.o.workerId;
  }

  get wallet(): string {
    return this.identity.wallet;
  }

  // biome-ignore lint/suspicious/noExplicitAny: any JSON answer; callers read the fields they assert
  private async call(method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; json: any }> {
    const r = await fetch(`${this.o.hubUrl}${path}`, {
      method,
      headers: {
        ...(this.token ? { authorization: `Bearer ${this.token}` } : {}),
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await r.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = text;
    }
    return { status: r.status, json };
  }

  async login(): Promise<void> {
    const c = await this.call('POST', '/api/auth/challenge', { wallet: this.wallet });
    if (c.status !== 200) throw new Error(`challenge: ${c.status} ${JSON.stringify(c.json)}`);
    const t = await this.call('POST', '/api/auth/node-token', {
      wallet: this.wallet,
      nonce: c.json.nonce,
      signature: this.identity.sign(c.json.message),
    });
    if (t.status !== 200) throw new Error(`node-token: ${t.status} ${JSON.stringify(t.json)}`);
    this.token = t.json.node_token;
  }

  /** Its coverage heartbeat: the assignment's segment and relay url while it holds one, the census (0/0) before. */
  // biome-ignore lint/suspicious/noExplicitAny: any JSON answer; callers read the fields they assert
  async report(model: string, url?: string): Promise<{ status: number; json: any }> {
    const a = this.assignment;
    const held = a && this.experts ? [[a.layer, a.experts[0], a.experts[1]]] : [];
    const r = await this.call('POST', '/api/expert-coverage', {
      worker_id: this.o.workerId,
      model,
      n_layer: a?.n_layer ?? 0,
      n_expert: a?.n_expert ?? 0,
      segments: held,
      owner: this.wallet,
      ...(url !== undefined ? { url } : held.length > 0 ? { url: `relay:expert-${this.o.workerId}` } : {}),
    });
    if (r.status === 200) this.lastCoverage = r.json;
    return r;
  }

  /** Login, census, volunteer (`maxExperts`), download and check the slice, first heartbeat, then one every `beatMs`. */
  async join(maxExperts: number, model = 'm', beatMs = 1000): Promise<KvasirAssignment> {
    await this.login();
    const census = await this.report(model);
    if (census.status !== 200) throw new Error(`census: ${census.status} ${JSON.stringify(census.json)}`);
    const v = await this.call('POST', '/api/expert-volunteer', { model: '', max_experts: maxExperts });
    if (v.status !== 200 || !v.json.assigned) throw new Error(`volunteer: ${v.status} ${JSON.stringify(v.json)}`);
    const a = v.json as KvasirAssignment;
    const [begin, end] = a.experts;
    const path = `/api/proxy/models/${encodeURIComponent(a.model)}/expert-shard?layer=${a.layer}&expert_begin=${begin}&expert_end=${end}`;
    const r = await fetch(`${this.o.hubUrl}${path}`, {
      headers: { authorization: `Bearer ${this.token}` },
      signal: AbortSignal.timeout(60_000),
    });
    if (r.status !== 200) throw new Error(`shard: ${r.status} ${await r.text()}`);
    const bytes = new Uint8Array(await r.arrayBuffer());
    // Its expert host's check: the shard must say it holds the layer and range asked for.
    const file = await readGGUF(bytesSource(bytes));
    const key = (k: string) => Number(metaValue(file, `kvasir.expert_shard.${k}`)?.value ?? Number.NaN);
    if (key('layer') !== a.layer || key('expert_begin') !== begin || key('expert_end') !== end)
      throw new Error(
        `shard holds layer ${key('layer')} experts ${key('expert_begin')}-${key('expert_end')}, not ${a.layer} ${begin}-${end}`,
      );
    const s = await readExpertSliceBytes(bytes);
    this.experts = {
      types: s.info.types,
      nEmbd: s.info.nEmbd,
      ff: s.info.ff,
      gate: s.gate,
      up: s.up,
      down: s.down,
      ...(s.info.variant ? { variant: s.info.variant } : {}),
      ...(s.biases ? { biases: s.biases } : {}),
      ...(s.scales ? { scales: s.scales } : {}),
    };
    this.fast = fastExperts(this.experts);
    this.assignment = a;
    const held = await this.report(a.model);
    if (held.status !== 200) throw new Error(`coverage: ${held.status} ${JSON.stringify(held.json)}`);
    this.beat = setInterval(() => {
      this.report(a.model).catch(() => {});
    }, beatMs);
    this.beat.unref();
    return a;
  }

  /** Dials the relay of `session` (default: the last coverage answer's) with `token` (default: its own). */
  dial(session = this.lastCoverage?.session ?? `expert-${this.o.workerId}`, token = this.token): Promise<void> {
    const url = `${this.o.hubUrl.replace(/^http/, 'ws')}${KVASIR_RELAY_PATH}?session=${encodeURIComponent(session)}&token=${encodeURIComponent(token)}`;
    const ws = new WebSocket(url, { perMessageDeflate: false });
    ws.binaryType = 'nodebuffer';
    this.ws = ws;
    this.refused = null;
    this.opened = false;
    this.closed = new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString() })));
    const e = this.experts;
    const reader = e ? new KvasirRequestReader(e.nEmbd, this.nLocal) : null;
    ws.on('message', (data: Buffer) => {
      if (!reader) return;
      let reqs: KvasirRequest[];
      try {
        reqs = reader.push(new Uint8Array(data));
      } catch (err) {
        this.refused = err instanceof KvasirWireError ? err.code : String(err);
        ws.close(1008, this.refused);
        return;
      }
      for (const req of reqs) this.answer(ws, req);
    });
    ws.on('error', () => {});
    return new Promise((resolve, reject) => {
      ws.once('open', () => {
        this.opened = true;
        resolve();
      });
      ws.once('unexpected-response', (_req, res) => reject(new Error(`relay upgrade answered ${res.statusCode}`)));
      ws.once('close', () => resolve());
    });
  }

  get nLocal(): number {
    const a = this.assignment;
    return a ? a.experts[1] - a.experts[0] : 0;
  }

  /** Kvasir's worker's arithmetic: v1 each (token, slot)'s output; v2 per row Σ prob · expert from 0, pairs in order. */
  compute(req: KvasirRequest): Float32Array {
    const e = this.experts as ExactExperts;
    const E = e.nEmbd;
    // Each row rounded once for all its pairs (the fast path), else ggml-exact per pair: the same bits either way.
    const rowsIn = req.wire === 'v1' ? req.cur : req.rows;
    const rounded: Array<FastRow | undefined> = [];
    const expertOut = (expert: number, r: number): Float32Array => {
      const x = rowsIn.subarray(r * E, (r + 1) * E);
      if (!this.fast) return ggmlExpertOut(e, expert, x);
      let row = rounded[r];
      if (!row) {
        row = this.fast.rowOf(x);
        rounded[r] = row;
      }
      return this.fast.expertOut(expert, row);
    };
    if (req.wire === 'v1') {
      const out = new Float32Array(req.nTokens * req.nUsed * E);
      for (let s = 0; s < req.nTokens * req.nUsed; s++) out.set(expertOut(req.sel[s] as number, Math.floor(s / req.nUsed)), s * E);
      this.count(req.nTokens * req.nUsed, req.nTokens > 1);
      return out;
    }
    const out = new Float32Array(req.nRows * E);
    for (let p = 0; p < req.nPairs; p++) {
      const r = req.rowIndex[p] as number;
      const y = expertOut(req.ids[p] as number, r);
      const w = req.probs[p] as number;
      for (let k = 0; k < E; k++) out[r * E + k] = Math.fround((out[r * E + k] as number) + Math.fround((y[k] as number) * w));
    }
    this.count(req.nPairs, req.nRows > 1);
    return out;
  }

  private count(pairs: number, batch: boolean): void {
    this.served.pairs += pairs;
    if (batch) this.served.batchPairs += pairs;
  }

  private answer(ws: WebSocket, req: KvasirRequest): void {
    const E = (this.experts as ExactExperts).nEmbd;
    const t0 = performance.now();
    let out: Float32Array | Uint8Array = this.compute(req);
    this.computeMs += performance.now() - t0;
    this.served[req.wire]++;
    out = this.tamper?.(req, out) ?? out;
    const bytes = out instanceof Float32Array ? encodeKvasirAnswer(req, E, out) : out;
    if (ws.readyState !== ws.OPEN) return;
    // Cut in two, as the TCP bridge in front of a real worker may cut it.
    const cut = bytes.length >> 1;
    ws.send(bytes.subarray(0, cut), { binary: true });
    ws.send(bytes.subarray(cut), { binary: true });
  }

  sendRaw(bytes: Uint8Array): void {
    this.ws?.send(bytes, { binary: true });
  }

  sendText(text: string): void {
    this.ws?.send(text, { binary: false });
  }

  async stop(): Promise<void> {
    if (this.beat) clearInterval(this.beat);
    this.beat = null;
    const ws = this.ws;
    if (ws && ws.readyState !== ws.CLOSED) {
      ws.close(1000);
      await Promise.race([this.closed, new Promise((r) => setTimeout(r, 2000))]);
      ws.terminate();
    }
  }
}
