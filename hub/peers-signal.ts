/**
 * The hub's own PeerJS signalling server (npm `peer`), on the hub's HTTP server at `${path}/peerjs` (default
 * `/api/peers/peerjs`): volunteers' browsers find each other through it to open WebRTC data channels, over which they
 * pass slices (docs/peers.md). No outside service; it only relays offers, answers and ICE candidates, never slice bytes.
 *
 *   const signal = new PeerSignal(directory, { path: '/api/peers', key: 'expertswarm' });
 *   signal.attach(app.server);        // handles the upgrade of /api/peers/peerjs
 *   await signal.close();
 *
 * Admission: the upgrade is refused (401) unless its `id` and `token` are a pair the hub issued in a volunteer's
 * welcome (PeerDirectory.verify), so nobody else can take a volunteer's id or use the hub as a free relay; when the hub
 * revokes the id (the volunteer's channel closed), its socket is closed (`revoke`). Each socket
 * is bounded: messages of at most SIGNAL_MESSAGE_MAX_BYTES, at most SIGNAL_MESSAGES_PER_S a second (burst ×4).
 *
 * `peer` keeps two housekeeping timers (expired messages, dead connections) that it never stops and never unrefs; the
 * instance is created with setTimeout wrapped so those timers do not hold the process open and end at close().
 */
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { ExpressPeerServer } from 'peer';
import { WebSocketServer, type WebSocket } from 'ws';
import type { PeerDirectory } from './peer-directory.ts';

/** An SDP offer is a few KiB; anything larger is not signalling. */
export const SIGNAL_MESSAGE_MAX_BYTES = 32 * 1024;
/** Messages per second a socket may send (ICE candidates arrive in bursts: burst 4×). */
export const SIGNAL_MESSAGES_PER_S = 50;

export interface SignalOptions {
  path: string;
  key: string;
  /** Sockets at once. */
  maxConnections: number;
}

type TimerFn = typeof setTimeout;

export class PeerSignal {
  readonly wsPath: string;
  private readonly wss: WebSocketServer;
  /** The sockets admitted for each peer id (`peer` itself refuses a second one as ID-TAKEN), so revoking closes them. */
  private readonly byId = new Map<string, Set<WebSocket>>();
  private closed = false;

  constructor(
    private readonly directory: Pick<PeerDirectory, 'verify'>,
    private readonly options: SignalOptions,
  ) {
    this.wsPath = `${options.path.replace(/\/+$/, '')}/peerjs`;
    this.wss = new WebSocketServer({ noServer: true, maxPayload: SIGNAL_MESSAGE_MAX_BYTES, perMessageDeflate: false });
  }

  /** Whether an upgrade of this path is the signalling server's. */
  handles(path: string): boolean {
    return path === this.wsPath;
  }

  attach(server: Server): void {
    const wss = this.wss;
    // ExpressPeerServer creates its instance when its express app is mounted; the hub is not express, so the app is
    // "mounted" by hand and only its WebSocket side is used (peers always bring their id: its HTTP API is not needed).
    const app = ExpressPeerServer(server, {
      path: this.options.path,
      key: this.options.key,
      concurrent_limit: this.options.maxConnections,
      allow_discovery: false,
      alive_timeout: 60_000,
      createWebSocketServer: () => wss,
    });
    app.on('error', () => {}); // a malformed message from a browser; the socket is closed by the rate check or ws
    // express's own mount handler re-parents the app's request, response, engines and settings onto the parent's: a
    // stand-in parent whose request and response are the app's own prototypes leaves them as they are.
    const parent = {
      settings: {},
      engines: {},
      request: Object.getPrototypeOf(app.request) as object,
      response: Object.getPrototypeOf(app.response) as object,
    };
    this.unrefTimers(() => app.emit('mount', parent));
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      const url = new URL(req.url ?? '/', 'http://hub');
      if (!this.handles(url.pathname)) return;
      if (this.closed) {
        socket.end('HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      const id = url.searchParams.get('id') ?? '';
      const token = url.searchParams.get('token') ?? '';
      if (url.searchParams.get('key') !== this.options.key || !this.directory.verify(id, token)) {
        socket.end('HTTP/1.1 401 Unauthorized\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      wss.handleUpgrade(req, socket, head, (ws) => {
        this.bound(ws);
        const open = this.byId.get(id) ?? new Set<WebSocket>();
        open.add(ws);
        this.byId.set(id, open);
        ws.on('close', () => {
          open.delete(ws);
          if (open.size === 0 && this.byId.get(id) === open) this.byId.delete(id);
        });
        wss.emit('connection', ws, req);
      });
    });
  }

  /** Sockets open now. */
  get connections(): number {
    return this.wss.clients.size;
  }

  /** The hub revoked `peerId` (its volunteer's connection closed): its signalling socket closes too. */
  revoke(peerId: string): void {
    const open = this.byId.get(peerId);
    if (!open) return;
    this.byId.delete(peerId);
    for (const ws of open) ws.close(1008, 'peer id revoked');
  }

  close(): Promise<void> {
    this.closed = true;
    for (const ws of this.wss.clients) ws.terminate();
    return new Promise<void>((resolve) => this.wss.close(() => resolve()));
  }

  /** A token bucket per socket: a flood of relayed messages closes it. */
  private bound(ws: WebSocket): void {
    const rate = SIGNAL_MESSAGES_PER_S;
    let tokens = rate * 4;
    let at = Date.now();
    ws.on('message', () => {
      const t = Date.now();
      tokens = Math.min(rate * 4, tokens + ((t - at) / 1000) * rate);
      at = t;
      if (--tokens < 0) ws.close(1008, 'too many signalling messages');
    });
  }

  /**
   * Runs `f` with setTimeout replaced by one whose timers are unref'd, skip their callback once this server closed,
   * and run their callback under the same replacement: the re-arming timers `peer` starts in `f` stay that way.
   */
  private unrefTimers(f: () => void): void {
    const original: TimerFn = globalThis.setTimeout;
    const wrapped = ((cb: (...a: unknown[]) => void, ms?: number, ...args: unknown[]) => {
      const t = original(() => {
        if (this.closed) return;
        const outer = globalThis.setTimeout;
        globalThis.setTimeout = wrapped;
        try {
          cb(...args);
        } finally {
          globalThis.setTimeout = outer;
        }
      }, ms);
      t.unref();
      return t;
    }) as unknown as TimerFn;
    globalThis.setTimeout = wrapped;
    try {
      f();
    } finally {
      globalThis.setTimeout = original;
    }
  }
}
