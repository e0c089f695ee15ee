/**
 * A volunteer's side of slice sharing (docs/peers.md), as the client (volunteer/client.ts) uses it: one PeerHost per
 * channel connection whose welcome carried `peer`, holding the PeerJS network (opened lazily), the slice being fetched
 * and the slice held, the upload budget and the pause. Browser-safe; where there is no WebRTC the client has no
 * PeerHost and downloads from the hub alone.
 *
 *   const host = new PeerHost({ hubUrl, welcome: m.peer, openNetwork, settings: { share: true, uploadCapBytesPerSec: 2e6 }, report });
 *   const got = await host.fetch(assign, list, hubRange, onProgress, signal);   // from peers and the hub
 *   host.hold(assign.shardDigest, list, bytes);   // serve it while it is held (also a slice taken from the cache)
 *   host.setPaused(true);                         // stops uploads at once
 *   host.close();
 */
import type { ChunkList } from '../protocol/chunk-list.ts';
import {
  SliceSwarm,
  type BadPeerCode,
  type FetchResult,
  type PeerLink,
  type PeerNetwork,
  type SwarmTiming,
  type UploadPolicy,
} from './peers-swarm.ts';
import { messageBytes, peekHelloDigest } from '../protocol/peer-messages.ts';
import type { ShareChoice } from './state.ts';
import type { WelcomePeer } from '../protocol/channel/index.ts';

/** What the volunteer chose about uploading (the page's "Share with other volunteers" control). */
export type ShareSettings = ShareChoice;

export const DEFAULT_SHARE: Readonly<ShareSettings> = Object.freeze({ share: true, uploadCapBytesPerSec: 4 * 1024 * 1024 });

/** Opens the transport for a welcome's peer grant (volunteer/peers-peerjs.ts in browsers). */
export type OpenNetwork = (hubUrl: string, peer: WelcomePeer) => Promise<PeerNetwork>;

export interface PeerHostOptions {
  hubUrl: string;
  welcome: WelcomePeer;
  openNetwork: OpenNetwork;
  settings: ShareSettings;
  /** A peer sent a bad chunk or message: the client tells the hub (peer_report). */
  report: (peerId: string, code: BadPeerCode, chunk: number | null, detail: string) => void;
  timing?: Partial<SwarmTiming>;
  now?: () => number;
}

/** A token bucket of `cap` bytes per second, at most a quarter second's worth (or one piece) banked. */
export class UploadBudget implements UploadPolicy {
  paused = false;
  uploaded = 0;
  private tokens = 0;
  private at: number;

  constructor(
    private readonly settings: ShareSettings,
    private readonly now: () => number = () => Date.now(),
  ) {
    this.at = now();
  }

  sharing(): boolean {
    return this.settings.share && this.settings.uploadCapBytesPerSec > 0 && !this.paused;
  }

  take(n: number): number {
    const cap = this.settings.uploadCapBytesPerSec;
    if (!Number.isFinite(cap)) return 0;
    const t = this.now();
    this.tokens = Math.min(Math.max(cap / 4, n), this.tokens + ((t - this.at) / 1000) * cap);
    this.at = t;
    if (this.tokens >= n) {
      this.tokens -= n;
      return 0;
    }
    return Math.max(1, Math.ceil(((n - this.tokens) / cap) * 1000));
  }

  sent(n: number): void {
    this.uploaded += n;
  }
}

export class PeerHost {
  readonly budget: UploadBudget;
  private network: Promise<PeerNetwork> | null = null;
  private readonly swarms = new Map<string, SliceSwarm>();
  private closed = false;

  constructor(private readonly o: PeerHostOptions) {
    this.budget = new UploadBudget(o.settings, o.now);
  }

  /** Bytes this volunteer has uploaded to peers over this connection. */
  get uploaded(): number {
    return this.budget.uploaded;
  }

  setPaused(paused: boolean): void {
    this.budget.paused = paused;
    if (paused) for (const s of this.swarms.values()) s.refuseAll();
  }

  /**
   * Fetches a slice from the listed peers and the hub, each chunk checked against `list`. Rejects when the network
   * cannot open or the hub fails (the caller then downloads from the hub alone). The swarm stays, serving, until
   * drop() or close().
   */
  async fetch(
    digest: string,
    list: ChunkList,
    peers: readonly string[],
    hub: (from: number, to: number, signal: AbortSignal) => Promise<Uint8Array>,
    onProgress: (got: number, total: number) => void,
    signal: AbortSignal,
    hubLoad?: () => number | null,
  ): Promise<FetchResult> {
    const network = await this.open();
    this.drop(digest);
    const swarm = new SliceSwarm({ list, network, upload: this.budget, onBadPeer: this.o.report, ...this.swarmOptions() });
    this.swarms.set(digest, swarm);
    try {
      return await swarm.fetch({ peers, hub, onProgress, signal, ...(hubLoad ? { hubLoad } : {}) });
    } catch (e) {
      if (this.swarms.get(digest) === swarm) this.drop(digest);
      throw e;
    }
  }

  /** Whether it already serves this digest whole. */
  holds(digest: string): boolean {
    return this.swarms.get(digest)?.done ?? false;
  }

  /** Serves a slice held whole (taken from the cache, or downloaded without peers) while it is held. */
  async hold(digest: string, list: ChunkList, bytes: Uint8Array): Promise<void> {
    if (this.swarms.get(digest)?.done) return;
    const network = await this.open();
    if (this.closed) return;
    this.drop(digest);
    this.swarms.set(
      digest,
      SliceSwarm.complete({ list, network, upload: this.budget, onBadPeer: this.o.report, ...this.swarmOptions() }, bytes),
    );
  }

  /** Stops sharing a slice no longer held. */
  drop(digest: string): void {
    const s = this.swarms.get(digest);
    if (!s) return;
    this.swarms.delete(digest);
    s.close();
  }

  /** Only this digest stays shared (the client holds one slice at a time). */
  keepOnly(digest: string | null): void {
    for (const d of [...this.swarms.keys()]) if (d !== digest) this.drop(d);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const d of [...this.swarms.keys()]) this.drop(d);
    void this.network?.then((n) => n.destroy()).catch(() => {});
  }

  private swarmOptions(): { timing?: Partial<SwarmTiming>; now?: () => number } {
    return { ...(this.o.timing ? { timing: this.o.timing } : {}), ...(this.o.now ? { now: this.o.now } : {}) };
  }

  private open(): Promise<PeerNetwork> {
    if (this.closed) return Promise.reject(new Error('the peer host is closed'));
    if (!this.network) {
      this.network = this.o.openNetwork(this.o.hubUrl, this.o.welcome).then((n) => {
        n.onIncoming = (link) => this.incoming(link);
        return n;
      });
      this.network.catch(() => {
        this.network = null; // a later slice tries again
      });
    }
    return this.network;
  }

  /** A link another volunteer opened: its first message (hello) names the slice; routed to that swarm, else closed. */
  private incoming(link: PeerLink): void {
    const timer = setTimeout(() => link.close(), 10_000);
    link.onClose = () => clearTimeout(timer);
    link.onMessage = (data) => {
      clearTimeout(timer);
      link.onMessage = null;
      link.onClose = null;
      let digest: string | null = null;
      try {
        digest = peekHelloDigest(messageBytes(data));
      } catch {
        digest = null;
      }
      const swarm = digest ? this.swarms.get(digest) : undefined;
      if (!swarm) {
        link.close();
        return;
      }
      swarm.adopt(link, data);
    };
  }
}
