/**
 * Kvasir's data path (issue 28): the relay WebSocket `/api/expert-relay?session=S&token=T` its workers dial, and each
 * dialed relay a `WorkerLink` of the model's dispatcher (dispatch/worker-link.ts), so that a Kvasir worker is served
 * work, timed, audited, credited and quarantined exactly as a volunteer on the channel is.
 *
 *   const relays = new KvasirRelays(host, { wire: 'v2' });
 *   relays.attach(app.server);                               // handles the upgrade of /api/expert-relay
 *   relays.report(workerId, wallet, model, ranges, 'relay:expert-w1', now);  // a coverage heartbeat: the session
 *   new ModelDispatcher({ directory: relays.directory('m'), … });           // beside the channel's
 *
 * Sessions are Kvasir's: a coverage heartbeat whose `url` is `relay:<session>` (`relay:` alone: `expert-<worker_id>`)
 * holds the session for its worker, and the answer hands out `session` and `listen_port` (the hub's own port: the
 * relay ends in the hub, no coordinator port behind it); the worker then dials. The upgrade is always answered 101 and
 * a refusal is a close: 4401 no or a bad node token, 4404 a session no heartbeat holds, 4403 a session of another
 * wallet or a quarantined worker (protocol/kvasir-wire.ts KVASIR_RELAY_CLOSE). A relay carries Kvasir's worker wire:
 * the hub writes requests (v2 by default; `wire`), the worker answers in order, in any cuts. Once dialed the worker
 * counts as a replica (market/replicas.ts `relay: 'dialed'`), its grace window starts, and its slice — the first
 * segment it reports, as Kvasir's relay targets take it — is a link of the dispatcher until the relay closes.
 *
 * Hostile bytes close the relay (4400): a text message, bytes when no answer is owed or beyond the answers owed, an
 * answer with NaN or ±∞ (also reported as a bad answer: the trust ledger's quarantine). Bounds: one message
 * `maxMessageBytes`, answers owed at once `maxInFlight` (each no bigger than its request implies), an answer due within
 * `answerTimeoutMs` (else 4408: the stream cannot be brought back into step), unsent bytes `sendBacklogMaxBytes`, a
 * ping every `pingMs` (no pong by the next: terminated); relays at once (`maxRelays`) and per address
 * (`maxPerAddress`), opens per address (`opensPerAddress`) and the Origin (channel/admission.ts) are checked at the
 * upgrade with an HTTP refusal, as the volunteer channel does.
 */
import type { IncomingMessage, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { performance } from 'node:perf_hooks';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { admitUpgrade, countDown, messageBytes, refuseUpgrade } from '../channel/upgrade.ts';
import {
  KVASIR_RELAY_CLOSE,
  KVASIR_RELAY_PATH,
  type KvasirRelayCloseName,
  type KvasirRequest,
  type KvasirWire,
  decodeKvasirAnswer,
  encodeKvasirRequest,
  kvasirAnswerBytes,
} from '../../protocol/kvasir-wire.ts';
import type { WorkAnswer, WorkItem, WorkerDirectory, WorkerLink } from '../dispatch/worker-link.ts';
import type { HeldRange } from '../market/types.ts';
import { RateLimiter } from '../auth/rate-limit.ts';
import { HubError } from '../errors.ts';
import { clientKey } from '../net.ts';
import { normalOrigin } from '../channel/admission.ts';
import { kvasirRequestOf, kvasirSums } from './work.ts';

/** A coverage `url` naming a relay session: `relay:<session>`. */
export const RELAY_URL_PREFIX = 'relay:';
/** Longest session name (Kvasir's cap). */
export const RELAY_SESSION_MAX_CHARS = 128;
/** Longest coverage `url` accepted (a relay url, or another worker url the hub ignores). */
export const COVERAGE_URL_MAX_CHARS = 512;

/** What the relays need of the hub (the Hub implements it; tests may pass their own). */
export interface RelayHost {
  /** The wallet of a node token's Authorization header; throws (HubError AUTH_*) for a bad one. */
  authenticate(authorization: string): string;
  /** Why this worker or wallet is quarantined, or undefined. */
  quarantineReason(workerId: string, wallet: string): string | undefined;
  /** A worker's relay opened (`dialed`) or closed: its reported ranges (as of `seenMs`) count as replicas or not. */
  relayChanged(workerId: string, model: string, ranges: readonly HeldRange[], seenMs: number, dialed: boolean): void;
  /** An answer that does not decode (NaN or ±∞, undecodable): the relay is closed; the hub may distrust the worker. */
  badAnswer(workerId: string, reason: string): void;
  /** The model's n_embd (the width of rows and answers; not on Kvasir's wire). */
  nEmbd(model: string): number;
  event(model: string | null, detail: string): void;
}

export interface RelayOptions {
  /** The worker wire the hub writes: Kvasir's v2 (f32 reduce), v2f16 (f16 rows, probs and answers) or v1 (per pair). */
  wire: KvasirWire;
  answerTimeoutMs: number;
  maxInFlight: number;
  pingMs: number;
  maxRelays: number;
  maxPerAddress: number;
  opensPerAddress: { capacity: number; refillPerSec: number };
  allowedOrigins: readonly string[];
  sendBacklogMaxBytes: number;
  maxMessageBytes: number;
}

export const DEFAULT_RELAY: Readonly<RelayOptions> = Object.freeze({
  wire: 'v2',
  answerTimeoutMs: 30_000,
  maxInFlight: 16,
  pingMs: 15_000,
  maxRelays: 10_000,
  maxPerAddress: 64,
  opensPerAddress: Object.freeze({ capacity: 32, refillPerSec: 2 }),
  allowedOrigins: Object.freeze([]) as readonly string[],
  sendBacklogMaxBytes: 64 << 20,
  maxMessageBytes: 16 << 20,
});

/** What a coverage answer says of a worker's relay (Kvasir's fields). */
export interface RelayFields {
  wired: boolean;
  listen_port: number | null;
  session: string | null;
}

const NO_RELAY: RelayFields = Object.freeze({ wired: false, listen_port: null, session: null });

interface Session {
  name: string;
  workerId: string;
  wallet: string;
  model: string;
  ranges: HeldRange[];
  seenMs: number;
  relay: Relay | null;
  /** Its last relay's dial and close, ms (null: none yet / open now); bytes sent to and from the worker, all dials. */
  openedMs: number | null;
  closedMs: number | null;
  toWorker: number;
  fromWorker: number;
}

/** One session of `GET /api/expert-relay/sessions`, in Kvasir's field names (times in s since the epoch). */
export interface RelaySessionRow {
  session: string;
  worker_id: string;
  node_id: string;
  owner: string;
  model: string;
  layer: number;
  experts: number[];
  listen_port: number | null;
  wired: boolean;
  ts: number;
  opened: number | null;
  closed: number | null;
  /** Bytes the worker sent (its answers): Kvasir's worker-to-backbone count. */
  ws2tcp: number;
  /** Bytes the worker was sent (requests). */
  tcp2ws: number;
}

interface Pending {
  req: KvasirRequest;
  work: WorkItem;
  bytes: number;
  parts: Uint8Array[];
  got: number;
  sentAt: number;
  timer: NodeJS.Timeout;
  resolve(a: WorkAnswer): void;
  reject(e: Error): void;
}

class RelayClosed extends Error {}

/** One dialed relay: the worker's byte stream, and while its session holds a slice, the dispatcher's link to it. */
class Relay implements WorkerLink {
  readonly pending: Pending[] = [];
  alive = true;
  closed = false;

  constructor(
    readonly ws: WebSocket,
    readonly session: Session,
    private readonly relays: KvasirRelays,
  ) {}

  get workerId(): string {
    return this.session.workerId;
  }
  get layer(): number {
    return this.session.ranges[0]?.[0] ?? -1;
  }
  get begin(): number {
    return this.session.ranges[0]?.[1] ?? 0;
  }
  get end(): number {
    return this.session.ranges[0]?.[2] ?? 0;
  }
  get inFlight(): number {
    return this.pending.length;
  }

  compute(work: WorkItem, _deadlineMs: number): Promise<WorkAnswer> {
    if (this.closed) return Promise.reject(new RelayClosed('the relay is closed'));
    const o = this.relays.options;
    if (this.pending.length >= o.maxInFlight) return Promise.reject(new Error(`${o.maxInFlight} answers owed already`));
    if (this.ws.bufferedAmount > o.sendBacklogMaxBytes) return Promise.reject(new Error('the relay does not read what it is sent'));
    let req: KvasirRequest;
    let bytes: Uint8Array;
    try {
      req = kvasirRequestOf(work, o.wire, this.end - this.begin);
      bytes = encodeKvasirRequest(req, work.nEmbd, this.end - this.begin);
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
    return new Promise<WorkAnswer>((resolve, reject) => {
      const p: Pending = {
        req,
        work,
        bytes: kvasirAnswerBytes(req, work.nEmbd),
        parts: [],
        got: 0,
        sentAt: performance.now(),
        timer: setTimeout(() => this.relays.end(this, 'ANSWER_TIMEOUT', `no answer within ${o.answerTimeoutMs} ms`), o.answerTimeoutMs),
        resolve,
        reject,
      };
      p.timer.unref();
      this.pending.push(p);
      this.ws.send(bytes, { binary: true });
      this.session.toWorker += bytes.length;
    });
  }

  /** Bytes from the worker: the answers owed, in order, in any cuts. Throws a reason to close with BAD_BYTES. */
  take(chunk: Uint8Array): void {
    this.session.fromWorker += chunk.length;
    let at = 0;
    while (at < chunk.length) {
      const p = this.pending[0];
      if (!p) throw new Error(`${chunk.length - at} bytes that answer nothing`);
      const n = Math.min(p.bytes - p.got, chunk.length - at);
      p.parts.push(chunk.slice(at, at + n)); // a copy: the message's buffer is not ours to keep
      p.got += n;
      at += n;
      if (p.got < p.bytes) continue;
      this.pending.shift();
      clearTimeout(p.timer);
      const whole = p.parts.length === 1 ? (p.parts[0] as Uint8Array) : Buffer.concat(p.parts);
      let answer: Float32Array;
      try {
        answer = decodeKvasirAnswer(p.req, p.work.nEmbd, whole);
      } catch (e) {
        p.reject(e instanceof Error ? e : new Error(String(e)));
        throw e;
      }
      p.resolve({ sums: kvasirSums(p.work, p.req, answer), computeUs: 0 });
    }
  }

  failAll(why: string): void {
    for (const p of this.pending.splice(0)) {
      clearTimeout(p.timer);
      p.reject(new RelayClosed(why));
    }
  }
}

export class KvasirRelays {
  readonly options: RelayOptions;
  private readonly wss: WebSocketServer;
  private readonly bySession = new Map<string, Session>();
  private readonly byWorker = new Map<string, Session>();
  private readonly relays = new Set<Relay>();
  private readonly perAddress = new Map<string, number>();
  private readonly opens: RateLimiter;
  private readonly allowedOrigins: ReadonlySet<string>;
  /** Dialed links per model and layer, rebuilt when a relay opens, closes or its slice changes. */
  private readonly links = new Map<string, Map<number, Relay[]>>();
  private readonly pinger: NodeJS.Timeout;
  private server: Server | null = null;
  private closed = false;

  constructor(
    private readonly host: RelayHost,
    options: Partial<RelayOptions> = {},
    readonly nowMs: () => number = Date.now,
  ) {
    this.options = { ...DEFAULT_RELAY, ...options };
    this.opens = new RateLimiter(this.options.opensPerAddress);
    this.allowedOrigins = new Set(this.options.allowedOrigins.map(normalOrigin));
    this.wss = new WebSocketServer({ noServer: true, maxPayload: this.options.maxMessageBytes, perMessageDeflate: false });
    this.pinger = setInterval(() => this.ping(), this.options.pingMs);
    this.pinger.unref();
  }

  /** Whether an upgrade of this path is the relay's. */
  handles(path: string): boolean {
    return path === KVASIR_RELAY_PATH;
  }

  /** Takes the upgrades of `/api/expert-relay` on the hub's HTTP server (other paths are left to their owners). */
  attach(server: Server): void {
    this.server = server;
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      const url = new URL(req.url ?? '/', 'http://hub');
      if (!this.handles(url.pathname)) return;
      if (this.closed) {
        socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      const remote = req.socket.remoteAddress ?? '';
      const key = clientKey({ ip: remote });
      try {
        this.admit(req, key);
      } catch (e) {
        refuseUpgrade(socket, e instanceof HubError ? e : new HubError('INTERNAL', 'internal error'));
        return;
      }
      this.perAddress.set(key, (this.perAddress.get(key) ?? 0) + 1);
      socket.once('close', () => countDown(this.perAddress, key));
      this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws, url.searchParams));
    });
  }

  private admit(req: IncomingMessage, key: string): void {
    const { maxPerAddress, maxRelays } = this.options;
    const gate = { noun: 'relays', allowedOrigins: this.allowedOrigins, perAddress: this.perAddress, maxPerAddress, opens: this.opens };
    admitUpgrade(req, key, { ...gate, total: { open: this.relays.size, max: maxRelays } }, this.nowMs());
  }

  /** After the 101: the token, the session, then the relay is the session's (a relay it had before is replaced). */
  private accept(ws: WebSocket, query: URLSearchParams): void {
    const refuse = (name: KvasirRelayCloseName, reason: string): void => ws.close(KVASIR_RELAY_CLOSE[name], clip(reason));
    ws.on('error', () => {});
    const token = query.getAll('token');
    const name = query.getAll('session');
    let wallet: string;
    try {
      if (token.length !== 1 || !token[0]) throw new Error('no token');
      wallet = this.host.authenticate(`Bearer ${token[0]}`);
    } catch (e) {
      refuse('UNAUTHORIZED', `authentication required: ${e instanceof Error ? e.message : String(e)}`);
      return;
    }
    const s = name.length === 1 ? this.bySession.get(name[0] as string) : undefined;
    if (!s) {
      refuse('UNKNOWN_SESSION', 'unknown relay session: report coverage with url relay:<session> first');
      return;
    }
    if (s.wallet !== wallet) {
      refuse('FORBIDDEN', 'this relay session is another wallet’s');
      return;
    }
    const quarantined = this.host.quarantineReason(s.workerId, wallet);
    if (quarantined) {
      refuse('FORBIDDEN', `this worker is quarantined: ${quarantined}`);
      return;
    }
    if (s.relay) this.end(s.relay, 'REPLACED', 'the session dialed again');
    const relay = new Relay(ws, s, this);
    s.relay = relay;
    s.openedMs = this.nowMs();
    s.closedMs = null;
    this.relays.add(relay);
    ws.on('pong', () => {
      relay.alive = true;
    });
    ws.on('message', (data: RawData, isBinary: boolean) => {
      if (relay.closed) return;
      relay.alive = true;
      try {
        if (!isBinary) throw new Error('a text message (the relay carries bytes only)');
        relay.take(messageBytes(data));
      } catch (e) {
        const reason = e instanceof Error ? e.message : String(e);
        if ((e as { code?: string }).code === 'NON_FINITE' || (e as { code?: string }).code === 'ANSWER_SIZE')
          this.host.badAnswer(s.workerId, `a relay answer refused: ${reason}`);
        this.end(relay, 'BAD_BYTES', reason);
      }
    });
    ws.on('close', () => this.closedRelay(relay));
    this.host.event(s.model, `${s.workerId}: relay ${s.name} dialed`);
    this.host.relayChanged(s.workerId, s.model, s.ranges, s.seenMs, true);
    this.rebuild(s.model);
  }

  /** Ends a relay with one of the relay's close codes; its answers owed fail (the coordinator computes those pairs). */
  end(relay: Relay, name: KvasirRelayCloseName, reason: string): void {
    if (relay.closed) return;
    relay.ws.close(KVASIR_RELAY_CLOSE[name], clip(reason));
    // A peer that does not finish the closing handshake is cut off.
    setTimeout(() => relay.ws.terminate(), 2_000).unref();
    this.closedRelay(relay, `${name}: ${reason}`);
  }

  private closedRelay(relay: Relay, why = 'the relay closed'): void {
    if (relay.closed) return;
    relay.closed = true;
    relay.failAll(why);
    this.relays.delete(relay);
    const s = relay.session;
    if (s.relay !== relay) return;
    s.relay = null;
    s.closedMs = this.nowMs();
    this.host.event(s.model, `${s.workerId}: relay ${s.name} closed (${why})`);
    if (this.byWorker.get(s.workerId) === s) this.host.relayChanged(s.workerId, s.model, s.ranges, s.seenMs, false);
    this.rebuild(s.model);
  }

  private ping(): void {
    for (const r of this.relays) {
      if (!r.alive) {
        r.ws.terminate();
        this.closedRelay(r, 'no pong');
        continue;
      }
      r.alive = false;
      r.ws.ping();
    }
  }

  private sessionName(workerId: string, url: string): string | null {
    if (!url.startsWith(RELAY_URL_PREFIX)) return null;
    return url.slice(RELAY_URL_PREFIX.length) || `expert-${workerId}`;
  }

  /** A heartbeat's relay url, before anything changes: BODY_INVALID for a session name too long or another worker's. */
  check(workerId: string, url: string): void {
    const name = this.sessionName(workerId, url);
    if (name === null) return;
    if (name.length > RELAY_SESSION_MAX_CHARS)
      throw new HubError('BODY_INVALID', `a relay session name is at most ${RELAY_SESSION_MAX_CHARS} characters`);
    const s = this.bySession.get(name);
    if (s && s.workerId !== workerId) throw new HubError('BODY_INVALID', `relay session ${name} is another worker's; choose another`);
  }

  /** Whether this heartbeat's worker and url name a relay that is dialed now (its ranges then count as replicas). */
  dialed(workerId: string, url: string): boolean {
    const name = this.sessionName(workerId, url);
    const s = name === null ? undefined : this.bySession.get(name);
    return s !== undefined && s.workerId === workerId && s.relay !== null;
  }

  /**
   * A heartbeat over HTTP was accepted: a `relay:` url holds (or moves) the worker's session and its slice; another url
   * ends the session it had. Returns Kvasir's fields for the answer.
   */
  report(workerId: string, wallet: string, model: string, ranges: readonly HeldRange[], url: string, nowMs: number): RelayFields {
    const name = this.sessionName(workerId, url);
    const old = this.byWorker.get(workerId);
    if (old && (name === null || old.name !== name || old.model !== model || old.wallet !== wallet))
      this.forget(workerId, 'SESSION_ENDED', name === null ? 'a heartbeat without its relay url' : 'a heartbeat with another session');
    if (name === null) return NO_RELAY;
    let s = this.byWorker.get(workerId);
    const before = s?.ranges[0]?.join(',');
    if (!s) {
      s = {
        name,
        workerId,
        wallet,
        model,
        ranges: [],
        seenMs: nowMs,
        relay: null,
        openedMs: null,
        closedMs: null,
        toWorker: 0,
        fromWorker: 0,
      };
      this.bySession.set(name, s);
      this.byWorker.set(workerId, s);
    }
    s.ranges = ranges.map((r) => [r[0], r[1], r[2]] as HeldRange);
    s.seenMs = nowMs;
    if (s.relay && before !== s.ranges[0]?.join(',')) {
      // Another slice on the same stream: answers owed are for the old one.
      s.relay.failAll('the worker reported another slice');
      this.rebuild(model);
    }
    return { wired: s.relay !== null, listen_port: this.listenPort(), session: name };
  }

  /** The relay fields of a worker's dispatch-map row. */
  fieldsOf(workerId: string): { listen_port: number | null; session: string | null } {
    const s = this.byWorker.get(workerId);
    return s ? { listen_port: this.listenPort(), session: s.name } : { listen_port: null, session: null };
  }

  /** Every session a heartbeat holds, with its relay's times and byte counts (Kvasir's sessions ledger). */
  sessions(): RelaySessionRow[] {
    const s = (ms: number | null): number | null => (ms === null ? null : ms / 1000);
    return [...this.bySession.values()].map((x) => {
      const r = x.ranges[0];
      return {
        session: x.name,
        worker_id: x.workerId,
        node_id: x.workerId,
        owner: x.wallet,
        model: x.model,
        layer: r ? r[0] : -1,
        experts: r ? [r[1], r[2]] : [],
        listen_port: this.listenPort(),
        wired: x.relay !== null,
        ts: x.seenMs / 1000,
        opened: s(x.openedMs),
        closed: s(x.closedMs),
        ws2tcp: x.fromWorker,
        tcp2ws: x.toWorker,
      };
    });
  }

  /** Drops a worker's session and closes its relay (evicted, quarantined, released). Returns whether it had one. */
  forget(workerId: string, name: KvasirRelayCloseName, reason: string): boolean {
    const s = this.byWorker.get(workerId);
    if (!s) return false;
    this.byWorker.delete(workerId);
    this.bySession.delete(s.name);
    if (s.relay) this.end(s.relay, name, reason);
    return true;
  }

  /** The dispatcher's view of one model's dialed relays. */
  directory(model: string): WorkerDirectory {
    return { workersFor: (layer) => this.links.get(model)?.get(layer) ?? [] };
  }

  /** Relays open now. */
  get size(): number {
    return this.relays.size;
  }

  private rebuild(model: string): void {
    const byLayer = new Map<number, Relay[]>();
    for (const s of this.byWorker.values()) {
      const r = s.relay;
      if (s.model !== model || !r || r.closed || r.end <= r.begin) continue;
      const list = byLayer.get(r.layer) ?? [];
      list.push(r);
      byLayer.set(r.layer, list);
    }
    if (byLayer.size === 0) this.links.delete(model);
    else this.links.set(model, byLayer);
  }

  private listenPort(): number | null {
    const a = this.server?.address();
    return a && typeof a === 'object' ? (a as AddressInfo).port : null;
  }

  /** Closes every relay (1001) and waits (bounded) for them to go. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.pinger);
    const gone = [...this.relays].map(
      (r) =>
        new Promise<void>((resolve) => {
          if (r.ws.readyState === r.ws.CLOSED) return resolve();
          r.ws.once('close', () => resolve());
          this.end(r, 'GOING_AWAY', 'the hub is shutting down');
        }),
    );
    await Promise.race([Promise.all(gone), new Promise((r) => setTimeout(r, 2_500))]);
    for (const r of this.relays) r.ws.terminate();
    this.wss.close();
  }
}

/** Two directories as one: the volunteer channel's links, then the relays'. */
export function joinDirectories(a: WorkerDirectory, b: WorkerDirectory): WorkerDirectory {
  return {
    workersFor: (layer) => {
      const x = a.workersFor(layer);
      const y = b.workersFor(layer);
      if (y.length === 0) return x;
      if (x.length === 0) return y;
      return [...x, ...y];
    },
  };
}

/** A close reason is at most 123 bytes. */
function clip(reason: string): string {
  let s = reason;
  while (Buffer.byteLength(s) > 123) s = s.slice(0, -1);
  return s;
}
