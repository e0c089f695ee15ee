/**
 * The dialed side of the relay between hubs (protocol/hub-relay.ts): another hub of the cluster opens
 * `/api/hub-relay?hub=ID&token=T` and sends WORK frames for workers attached here; each is handed to this hub's own link
 * of that worker (its volunteer channel, a Kvasir relay) and the sums go back in an ANSWER. The worker's trust, credit
 * and deadline are the dialing hub's business (its dispatcher audits, credits and falls back); this side only forwards.
 *
 *   const relay = new HubRelayServer({ token: () => cluster.relayToken, linkOf: (m, w, l) => …, event });
 *   relay.attach(httpServer);
 *
 * The upgrade is refused over HTTP before the 101 (refuseUpgrade): AUTH_REQUIRED without a token, AUTH_TOKEN_INVALID
 * with another. A frame that does not decode closes the relay (4400); an item beyond `maxInFlight` is answered Busy.
 */
import type { IncomingMessage, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import { timingSafeEqual } from 'node:crypto';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import {
  HUB_RELAY_CLOSE,
  HUB_RELAY_LIMITS,
  HUB_RELAY_PATH,
  HubRelayKind,
  HubRelayStatus,
  type RelayWork,
  decodeRelayFrame,
  encodeRelayAnswer,
} from '../../protocol/hub-relay.ts';
import type { WorkAnswer, WorkerLink } from '../dispatch/worker-link.ts';
import { HubError } from '../errors.ts';
import { messageBytes, refuseUpgrade } from '../channel/upgrade.ts';

export interface HubRelayServerHost {
  /** The token a dialing hub must present (this hub's, published in its cluster announcement); null: no relay taken. */
  token(): string | null;
  /** This hub's own link of `workerId`'s slice of `layer` of `model`, if the worker is attached here and serving it. */
  linkOf(model: string, workerId: string, layer: number): WorkerLink | undefined;
  event(detail: string): void;
}

export interface HubRelayServerOptions {
  /** Items in flight on one relay at once; beyond it an item is answered Busy. */
  maxInFlight: number;
  /** A link that has not settled this long past the item's deadline is answered WorkerFailed (its slot freed). */
  settleGraceMs: number;
}

export const DEFAULT_HUB_RELAY_SERVER: Readonly<HubRelayServerOptions> = Object.freeze({ maxInFlight: 256, settleGraceMs: 2_000 });

/** What the relay measured on the dialed side: items forwarded, and each one's time on this hub's own link, ms. */
export interface HubRelayStats {
  items: number;
  failed: number;
  linkMs: number[];
}

const SAMPLES_KEPT = 10_000;
/** How long `close` waits for the other hubs to answer its close frames before it terminates their sockets, ms. */
const CLOSE_GRACE_MS = 1_000;

/**
 * The base URL other hubs dial, from the address this hub listens on: its host name when it listens on every
 * interface (set `--hub-url` where that name does not reach it, or behind TLS).
 */
export function relayUrlOf(address: AddressInfo | string | null): string {
  if (address === null || typeof address === 'string') return `ws://${hostname()}`;
  const any = address.address === '0.0.0.0' || address.address === '::';
  const host = any ? hostname() : address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `ws://${host}:${address.port}`;
}

export class HubRelayServer {
  readonly stats: HubRelayStats = { items: 0, failed: 0, linkMs: [] };
  private readonly wss = new WebSocketServer({
    noServer: true,
    maxPayload: HUB_RELAY_LIMITS.maxFrameBytes,
    perMessageDeflate: false,
  });
  private readonly options: HubRelayServerOptions;
  private readonly open = new Set<WebSocket>();
  private closed = false;

  constructor(
    private readonly host: HubRelayServerHost,
    options: Partial<HubRelayServerOptions> = {},
  ) {
    this.options = { ...DEFAULT_HUB_RELAY_SERVER, ...options };
  }

  handles(path: string): boolean {
    return path === HUB_RELAY_PATH;
  }

  attach(server: Server): void {
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      const url = new URL(req.url ?? '/', 'http://hub');
      if (!this.handles(url.pathname)) return;
      const expected = this.host.token();
      if (this.closed || expected === null) {
        socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      const given = url.searchParams.getAll('token');
      if (given.length !== 1 || !given[0]) {
        refuseUpgrade(
          socket,
          new HubError('AUTH_REQUIRED', 'a hub relay takes ?hub=ID&token=T: the token of this hub’s cluster announcement'),
        );
        return;
      }
      if (!sameToken(given[0], expected)) {
        refuseUpgrade(socket, new HubError('AUTH_TOKEN_INVALID', 'that is not this hub’s relay token (it changes when the hub restarts)'));
        return;
      }
      const from = (url.searchParams.get('hub') ?? '?').slice(0, 128);
      this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws, from));
    });
  }

  private accept(ws: WebSocket, from: string): void {
    this.open.add(ws);
    let inFlight = 0;
    ws.on('error', () => {});
    ws.on('close', () => this.open.delete(ws));
    ws.on('message', (data: RawData, isBinary: boolean) => {
      let frame: ReturnType<typeof decodeRelayFrame>;
      try {
        if (!isBinary) throw new Error('a text message');
        frame = decodeRelayFrame(messageBytes(data));
        if (frame.kind !== HubRelayKind.Work) throw new Error('an ANSWER sent to the dialed hub');
      } catch (e) {
        const why = e instanceof Error ? e.message : String(e);
        this.host.event(`relay from hub ${from} closed: ${why}`);
        ws.close(HUB_RELAY_CLOSE.BAD_FRAME, why.slice(0, 120));
        return;
      }
      const send = (status: HubRelayStatus, reason: string, sums?: Float32Array, computeUs = 0): void => {
        if (ws.readyState !== ws.OPEN) return;
        ws.send(encodeRelayAnswer({ id: frame.id, status, computeUs, reason, sums: sums ?? new Float32Array(0) }));
      };
      if (inFlight >= this.options.maxInFlight) {
        send(HubRelayStatus.Busy, `more than ${this.options.maxInFlight} items in flight on this relay`);
        return;
      }
      inFlight++;
      void this.forward(frame).then(
        ([status, reason, sums, us]) => {
          inFlight--;
          send(status, reason, sums, us);
        },
        () => {
          inFlight--;
          send(HubRelayStatus.WorkerFailed, 'internal error');
        },
      );
    });
  }

  /** One item to this hub's link of the worker, its local ids re-based to that link's slice. */
  private async forward(w: RelayWork): Promise<[HubRelayStatus, string, Float32Array | undefined, number]> {
    const link = this.host.linkOf(w.model, w.workerId, w.work.layer);
    if (!link)
      return [
        HubRelayStatus.WorkerUnknown,
        `worker ${w.workerId} serves no slice of layer ${w.work.layer} of ${w.model} here`,
        undefined,
        0,
      ];
    const shift = w.begin - link.begin;
    const width = link.end - link.begin;
    const localExpert = new Uint16Array(w.work.nPairs);
    for (let p = 0; p < w.work.nPairs; p++) {
      const e = (w.work.localExpert[p] as number) + shift;
      if (e < 0 || e >= width)
        return [
          HubRelayStatus.WorkerUnknown,
          `expert ${w.begin + (w.work.localExpert[p] as number)} is not in its slice here`,
          undefined,
          0,
        ];
      localExpert[p] = e;
    }
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('no answer from the worker')), w.deadlineMs + this.options.settleGraceMs);
      timer.unref(); // a hub shutting down does not wait for it
    });
    this.stats.items++;
    const t0 = performance.now();
    try {
      const a: Float32Array | WorkAnswer = await Promise.race([link.compute({ ...w.work, localExpert }, w.deadlineMs), late]);
      const sums = a instanceof Float32Array ? a : a.sums;
      const us = a instanceof Float32Array ? 0 : a.computeUs;
      if (sums.length !== w.work.nRows * w.work.nEmbd) throw new Error(`sums of ${sums.length} floats`);
      if (this.stats.linkMs.length < SAMPLES_KEPT) this.stats.linkMs.push(performance.now() - t0);
      return [HubRelayStatus.Ok, '', sums, us];
    } catch (e) {
      this.stats.failed++;
      return [HubRelayStatus.WorkerFailed, e instanceof Error ? e.message : String(e), undefined, 0];
    } finally {
      clearTimeout(timer);
    }
  }

  /** Relays open now (from other hubs). */
  get size(): number {
    return this.open.size;
  }

  /**
   * Closes every relay from another hub (GOING_AWAY) and refuses new ones; a socket whose close handshake has not
   * finished within `graceMs` is terminated. Bounded: the HTTP server's close waits for these upgraded sockets, and
   * the dialing hub, alive, would otherwise keep its relay open — and this hub's close waiting — until it stops
   * linking this hub's workers (minutes).
   */
  async close(graceMs = CLOSE_GRACE_MS): Promise<void> {
    this.closed = true;
    const gone = [...this.open].map(
      (ws) =>
        new Promise<void>((resolve) => {
          if (ws.readyState === ws.CLOSED) return resolve();
          ws.once('close', () => resolve());
          ws.close(HUB_RELAY_CLOSE.GOING_AWAY, 'the hub is shutting down');
        }),
    );
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(gone), new Promise<void>((r) => (timer = setTimeout(r, graceMs)))]);
    clearTimeout(timer);
    for (const ws of this.open) ws.terminate();
    this.open.clear();
    this.wss.close();
  }
}

function sameToken(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
