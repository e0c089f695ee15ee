/**
 * The dialing side of the relay between hubs (protocol/hub-relay.ts): each worker slice another hub's record names
 * becomes a `WorkerLink` of this hub's dispatcher (dispatch/worker-link.ts), whose items go to that hub over one
 * WebSocket per hub (`/api/hub-relay`, relay-server.ts) and come back as sums. So a coordinator behind this hub is
 * served by volunteers attached to any hub of the cluster; its dispatcher times, audits and credits them as its own.
 *
 *   const links = new RemoteHubLinks({ selfId: 'hub-a', relayOf: (hub) => cluster.relayOf(hub), event });
 *   links.update('m', cluster.remoteWorkersOf('m'));     // after each sync
 *   joinDirectories(channel.directory('m'), links.directory('m'));
 *
 * A hub's socket is dialed when a record first names it and redialed (at most once per `redialMs`) while records do;
 * an item while it is not open is refused at once (the dispatcher computes those pairs itself: never dropped). An
 * item whose answer does not come within its deadline plus `answerGraceMs` is refused and its slot freed; a late
 * answer is dropped.
 */
import { performance } from 'node:perf_hooks';
import WebSocket from 'ws';
import {
  HUB_RELAY_LIMITS,
  HUB_RELAY_PATH,
  HubRelayKind,
  HubRelayStatus,
  decodeRelayFrame,
  encodeRelayWork,
} from '../../protocol/hub-relay.ts';
import type { WorkAnswer, WorkItem, WorkerDirectory, WorkerLink } from '../dispatch/worker-link.ts';
import type { ClusterWorker } from './codec.ts';

export interface RelayLinksHost {
  /** This hub's id (sent with the dial, for the other hub's event log). */
  selfId: string;
  /** Where another hub's relay is reached, from its announcement; undefined: not announced, or no relay. */
  relayOf(hubId: string): { url: string; token: string } | undefined;
  event(detail: string): void;
}

export interface RelayLinksOptions {
  /** The dial's bound (the WebSocket handshake). */
  dialTimeoutMs: number;
  /** Least time between two dials of one hub. */
  redialMs: number;
  /** An answer may come this long after the item's deadline before the item is refused. */
  answerGraceMs: number;
  /**
   * Keepalive: an open relay is pinged (a WebSocket ping; the other hub's `ws` answers it) every `keepaliveMs`, and
   * one whose pong has not come by the next ping is closed — its items refused, the next sync redials. So a hub that
   * hangs or a network that drops without a close costs at most 2 × keepaliveMs of items waiting their deadlines.
   */
  keepaliveMs: number;
}

export const DEFAULT_RELAY_LINKS: Readonly<RelayLinksOptions> = Object.freeze({
  dialTimeoutMs: 2_000,
  redialMs: 1_000,
  answerGraceMs: 1_000,
  keepaliveMs: 2_000,
});

/** What the relay between hubs measured on this side: each item's round trip, ms (the last `RELAY_SAMPLES_KEPT`). */
export interface RelayLinkStats {
  items: number;
  answered: number;
  refused: number;
  roundTripMs: number[];
}

const RELAY_SAMPLES_KEPT = 10_000;

interface Pending {
  resolve(a: WorkAnswer): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

/** One WebSocket to one other hub, multiplexing the items of all its workers' links. */
class HubConnection {
  private ws: WebSocket | null = null;
  private open = false;
  get isOpen(): boolean {
    return this.open;
  }
  private lastDialMs = Number.NEGATIVE_INFINITY;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private keepalive: NodeJS.Timeout | null = null;
  url = '';
  token = '';

  constructor(
    readonly hubId: string,
    private readonly host: RelayLinksHost,
    private readonly options: RelayLinksOptions,
  ) {}

  /** Dials if not connected (at most once per redialMs), with the hub's current address. */
  ensure(url: string, token: string): void {
    if (url !== this.url || token !== this.token) {
      // The hub restarted (a new token) or moved: the old socket is of no use.
      this.url = url;
      this.token = token;
      this.drop('the hub announced a new relay address');
    }
    if (this.ws || performance.now() - this.lastDialMs < this.options.redialMs) return;
    this.lastDialMs = performance.now();
    const q = new URLSearchParams({ hub: this.host.selfId, token });
    const ws = new WebSocket(`${url.replace(/\/$/, '')}${HUB_RELAY_PATH}?${q}`, {
      handshakeTimeout: this.options.dialTimeoutMs,
      maxPayload: HUB_RELAY_LIMITS.maxFrameBytes,
      perMessageDeflate: false,
    });
    this.ws = ws;
    ws.binaryType = 'nodebuffer';
    ws.on('open', () => {
      if (this.ws !== ws) return;
      this.open = true;
      this.host.event(`relay to hub ${this.hubId} open`);
      this.startKeepalive(ws);
    });
    ws.on('message', (data: Buffer, isBinary: boolean) => this.onMessage(ws, data, isBinary));
    ws.on('error', () => {});
    ws.on('unexpected-response', (_req, res) => {
      this.host.event(`relay to hub ${this.hubId} refused: HTTP ${res.statusCode}`);
      res.resume();
    });
    ws.on('close', (code, reason) => {
      if (this.ws !== ws) return;
      this.stopKeepalive();
      if (this.open) this.host.event(`relay to hub ${this.hubId} closed (${code}${reason.length ? `: ${reason}` : ''})`);
      this.ws = null;
      this.open = false;
      this.failAll(`the relay to hub ${this.hubId} closed`);
    });
  }

  compute(workerId: string, model: string, begin: number, work: WorkItem, deadlineMs: number): Promise<WorkAnswer> {
    const ws = this.ws;
    if (!ws || !this.open) return Promise.reject(new Error(`no relay to hub ${this.hubId} open yet`));
    const id = this.nextId;
    this.nextId = this.nextId >= 0xffffffff ? 1 : this.nextId + 1;
    let bytes: Uint8Array;
    try {
      bytes = encodeRelayWork({ id, deadlineMs, model, workerId, begin, work });
    } catch (e) {
      return Promise.reject(e instanceof Error ? e : new Error(String(e)));
    }
    return new Promise<WorkAnswer>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`no answer from hub ${this.hubId} within ${deadlineMs + this.options.answerGraceMs} ms`));
      }, deadlineMs + this.options.answerGraceMs);
      this.pending.set(id, { resolve, reject, timer });
      ws.send(bytes);
    });
  }

  private onMessage(ws: WebSocket, data: Buffer, isBinary: boolean): void {
    if (this.ws !== ws) return;
    let frame: ReturnType<typeof decodeRelayFrame>;
    try {
      if (!isBinary) throw new Error('a text message');
      frame = decodeRelayFrame(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      if (frame.kind !== HubRelayKind.Answer) throw new Error('a WORK sent to the dialing hub');
    } catch (e) {
      this.host.event(`relay to hub ${this.hubId}: ${e instanceof Error ? e.message : String(e)}; closing it`);
      this.drop('a frame that does not decode');
      return;
    }
    const p = this.pending.get(frame.id);
    if (!p) return; // late: its item was refused already
    this.pending.delete(frame.id);
    clearTimeout(p.timer);
    if (frame.status === HubRelayStatus.Ok) p.resolve({ sums: frame.sums, computeUs: frame.computeUs });
    else p.reject(new Error(`hub ${this.hubId}: ${HubRelayStatus[frame.status]}: ${frame.reason}`));
  }

  private failAll(why: string): void {
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.reject(new Error(why));
    }
  }

  /** Pings every keepaliveMs; a ping still unanswered at the next one closes the relay. */
  private startKeepalive(ws: WebSocket): void {
    this.stopKeepalive();
    let awaiting: number | null = null;
    ws.on('pong', () => {
      awaiting = null;
    });
    this.keepalive = setInterval(() => {
      if (this.ws !== ws) return this.stopKeepalive();
      if (awaiting !== null) {
        this.host.event(`relay to hub ${this.hubId}: no pong within ${Math.round(performance.now() - awaiting)} ms; closing it`);
        this.drop('the relay went silent (keepalive)');
        return;
      }
      awaiting = performance.now();
      ws.ping();
    }, this.options.keepaliveMs);
    this.keepalive.unref();
  }

  private stopKeepalive(): void {
    if (this.keepalive) clearInterval(this.keepalive);
    this.keepalive = null;
  }

  drop(why: string): void {
    this.stopKeepalive();
    const ws = this.ws;
    this.ws = null;
    this.open = false;
    this.failAll(why);
    if (ws) ws.terminate();
  }
}

/** A slice of a worker attached to another hub, as this hub's dispatcher sees it. */
class RemoteWorkerLink implements WorkerLink {
  inFlight = 0;

  constructor(
    readonly workerId: string,
    readonly model: string,
    readonly layer: number,
    readonly begin: number,
    readonly end: number,
    readonly hubId: string,
    private readonly conn: HubConnection,
    private readonly stats: RelayLinkStats,
  ) {}

  async compute(work: WorkItem, deadlineMs: number): Promise<WorkAnswer> {
    this.inFlight++;
    this.stats.items++;
    const t0 = performance.now();
    try {
      const a = await this.conn.compute(this.workerId, this.model, this.begin, work, deadlineMs);
      this.stats.answered++;
      if (this.stats.roundTripMs.length < RELAY_SAMPLES_KEPT) this.stats.roundTripMs.push(performance.now() - t0);
      return a;
    } catch (e) {
      this.stats.refused++;
      throw e;
    } finally {
      this.inFlight--;
    }
  }
}

export class RemoteHubLinks {
  private readonly options: RelayLinksOptions;
  private readonly conns = new Map<string, HubConnection>();
  /** model → layer → links. */
  private readonly links = new Map<string, Map<number, RemoteWorkerLink[]>>();
  readonly stats: RelayLinkStats = { items: 0, answered: 0, refused: 0, roundTripMs: [] };
  private closed = false;

  constructor(
    private readonly host: RelayLinksHost,
    options: Partial<RelayLinksOptions> = {},
  ) {
    this.options = { ...DEFAULT_RELAY_LINKS, ...options };
  }

  /**
   * The other hubs' records of `model` now: a link per slice of each worker whose hub takes a relay (not quarantined,
   * not released). Links whose slice is unchanged are kept (their in-flight count with them).
   */
  update(model: string, records: readonly ClusterWorker[]): void {
    if (this.closed) return;
    const old = new Map<string, RemoteWorkerLink>();
    for (const list of this.links.get(model)?.values() ?? [])
      for (const l of list) old.set(sliceKey(l.workerId, l.hubId, l.layer, l.begin, l.end), l);
    const byLayer = new Map<number, RemoteWorkerLink[]>();
    for (const w of records) {
      if (w.quarantined || w.released || w.model !== model) continue;
      const relay = this.host.relayOf(w.hub);
      if (!relay) continue;
      const conn = this.connection(w.hub);
      conn.ensure(relay.url, relay.token);
      for (const [layer, begin, end] of w.ranges) {
        const key = sliceKey(w.worker_id, w.hub, layer, begin, end);
        const link = old.get(key) ?? new RemoteWorkerLink(w.worker_id, model, layer, begin, end, w.hub, conn, this.stats);
        const list = byLayer.get(layer) ?? [];
        list.push(link);
        byLayer.set(layer, list);
      }
    }
    for (const list of byLayer.values()) list.sort((a, b) => a.begin - b.begin || a.workerId.localeCompare(b.workerId));
    if (byLayer.size === 0) this.links.delete(model);
    else this.links.set(model, byLayer);
  }

  /** The other hubs whose relay is open now. */
  openHubs(): string[] {
    return [...this.conns.values()]
      .filter((c) => c.isOpen)
      .map((c) => c.hubId)
      .sort();
  }

  /** The ids of the workers linked now, over all models. */
  workerIds(): Set<string> {
    const ids = new Set<string>();
    for (const m of this.links.values()) for (const list of m.values()) for (const l of list) ids.add(l.workerId);
    return ids;
  }

  directory(model: string): WorkerDirectory {
    return { workersFor: (layer) => this.links.get(model)?.get(layer) ?? [] };
  }

  /** Closes the sockets of hubs no link names any more (their workers left, or the hub stopped announcing). */
  prune(): void {
    const named = new Set<string>();
    for (const m of this.links.values()) for (const list of m.values()) for (const l of list) named.add(l.hubId);
    for (const [hub, c] of this.conns) {
      if (named.has(hub)) continue;
      c.drop(`no worker of hub ${hub} is linked any more`);
      this.conns.delete(hub);
    }
  }

  /** Drops every link and closes every socket, for good: later updates dial nothing (the hub is shutting down). */
  close(): void {
    this.closed = true;
    this.links.clear();
    for (const c of this.conns.values()) c.drop('the hub is shutting down');
    this.conns.clear();
  }

  private connection(hubId: string): HubConnection {
    let c = this.conns.get(hubId);
    if (!c) {
      c = new HubConnection(hubId, this.host, this.options);
      this.conns.set(hubId, c);
    }
    return c;
  }
}

const sliceKey = (workerId: string, hub: string, layer: number, begin: number, end: number): string =>
  `${workerId}\u0000${hub}\u0000${layer}:${begin}:${end}`;
