/**
 * Who can pass a slice on to whom (docs/peers.md). The volunteer channel tells the directory what it knows — who said
 * hello, who was assigned which slice digest, who loaded it, who paused, who left — and the directory answers the one
 * question an assignment asks: which live peers hold (or are fetching) the same digest. It also issues each
 * connection's PeerJS id and token (the signalling server admits no other, hub/peers-signal.ts), stops listing a peer
 * that others reported for a bad chunk, and keeps the bytes-from-peers vs bytes-from-hub counters per slice.
 *
 *   const peers = new PeerDirectory({ ...DEFAULT_PEERS }, (detail, model) => events.add('peer-report', model, detail));
 *   channel.peers = peers;                   // hub/channel/channel.ts calls the PeerListing methods
 *   peers.verify(id, token);                 // the signalling server's admission check
 *   peers.slices();                          // GET /api/peers/slices
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { PeerReport, WelcomePeer } from '../protocol/channel/index.ts';
import type { AssignedSlice } from '../protocol/slice.ts';
import type { SliceTransfer } from '../protocol/dashboard.ts';
import { checkedTurnConfig, iceServersFor, type TurnConfig } from './turn-credentials.ts';

export type { SliceTransfer };

export interface PeerConfig {
  /** Volunteers take slices from each other at all (the hub still serves every byte they ask it for). */
  enabled: boolean;
  /** Where the PeerJS signalling server listens on the hub's own HTTP server (its WebSocket is `${path}/peerjs`). */
  path: string;
  /** The PeerJS key (the signalling server refuses others). */
  key: string;
  /** Peers listed in one assignment, at most. */
  maxListed: number;
  /** How long a reported peer (and its wallet) is not listed. */
  banMs: number;
  /** The preferred chunk size of the hash lists (a power of two, 16 KiB … 16 MiB). */
  chunkBytes: number;
  /** Slices whose counters are kept (oldest dropped). */
  slicesKept: number;
  /**
   * Volunteers take chunks from peers first even while the shard server is idle (`--peers-first`): the hub sends no
   * load hint, so their source choice never lets speed win (volunteer/source-choice.ts). Spares egress; slower where
   * peers are reached through a relay over a slow link.
   */
  peersFirst: boolean;
  /**
   * A TURN server for peers behind NATs (issue 29, hub/turn-credentials.ts): each welcome carries its URLs with a
   * credential minted for that connection. Absent: no ICE servers (peers meet only where host candidates reach).
   */
  turn?: TurnConfig;
}

export const DEFAULT_PEERS: Readonly<PeerConfig> = Object.freeze({
  enabled: true,
  path: '/api/peers',
  key: 'expertswarm',
  maxListed: 8,
  banMs: 60 * 60 * 1000,
  chunkBytes: 1024 * 1024,
  slicesKept: 1024,
  peersFirst: false,
});

/** What the channel tells the directory (hub/channel/channel.ts holds one as `peers`). */
export interface PeerListing {
  /** A volunteer said hello: its PeerJS id and token for welcome, or undefined when peers are off. */
  welcome(workerId: string, wallet: string): WelcomePeer | undefined;
  /** A volunteer is being assigned `slice`: the peers to list in its assign (holders first); it is noted as fetching. */
  assigning(workerId: string, slice: AssignedSlice): string[];
  /**
   * It loaded its slice of `digest`, with what it says it took from peers and from the hub (undefined: an older
   * client).
   */
  loaded(workerId: string, digest: string, fromPeers: number | undefined, fromHub: number | undefined): void;
  /** Paused volunteers upload nothing, so they are not listed. */
  paused(workerId: string, paused: boolean): void;
  /** An assignment ended (released, failed, replaced): it no longer holds the slice of `digest` (undefined: any). */
  dropped(workerId: string, digest?: string): void;
  /** Its connection closed: its PeerJS id is revoked. */
  gone(workerId: string): void;
  /**
   * It reports a peer that sent a bad chunk or a malformed message while it fetched the slice of `digest`. Returns
   * the event's sentence, or null when ignored.
   */
  report(workerId: string, digest: string, r: PeerReport): string | null;
}

/** One slice a member holds or fetches (a volunteer may hold several: docs/volunteer-channel.md, max_slices). */
interface MemberSlice {
  slice: AssignedSlice;
  loaded: boolean;
  /** Peers it reported for this slice (each counted once). */
  reported: Set<string>;
}

interface Member {
  workerId: string;
  wallet: string;
  peerId: string;
  token: string;
  /** By digest. */
  slices: Map<string, MemberSlice>;
  paused: boolean;
}

const newId = (): string => `p${randomBytes(16).toString('hex')}`;
/** How long a closed connection's peer id can still be reported. */
const DEPARTED_KEPT_MS = 10 * 60 * 1000;

export class PeerDirectory implements PeerListing {
  private readonly members = new Map<string, Member>();
  private readonly byPeer = new Map<string, Member>();
  private readonly byDigest = new Map<string, Set<Member>>();
  private readonly banned = new Map<string, number>();
  /** Peers whose connection closed lately, so that a report arriving after a liar left still bans its worker and wallet. */
  private readonly departed = new Map<string, { workerId: string; wallet: string; digests: string[]; atMs: number }>();
  private readonly transfers = new Map<string, SliceTransfer>();
  /** Called with a peer id the moment it is revoked (the signalling server closes that id's socket). */
  onRevoke: ((peerId: string) => void) | null = null;

  constructor(
    readonly config: PeerConfig,
    private readonly now: () => number = Date.now,
    private readonly random: () => number = Math.random,
  ) {
    if (config.turn) this.config = { ...config, turn: checkedTurnConfig(config.turn) };
  }

  welcome(workerId: string, wallet: string): WelcomePeer | undefined {
    if (!this.config.enabled) return undefined;
    this.gone(workerId);
    const m: Member = {
      workerId,
      wallet,
      peerId: newId(),
      token: randomBytes(20).toString('hex'),
      slices: new Map(),
      paused: false,
    };
    this.members.set(workerId, m);
    this.byPeer.set(m.peerId, m);
    const turn = this.config.turn;
    return {
      path: this.config.path,
      key: this.config.key,
      id: m.peerId,
      token: m.token,
      ...(turn ? { iceServers: iceServersFor(turn, workerId, this.now()) } : {}),
    };
  }

  /** The signalling server's admission: an id this hub issued, with its token. */
  verify(peerId: string, token: string): boolean {
    const m = this.byPeer.get(peerId);
    if (!m) return false;
    const a = Buffer.from(token);
    const b = Buffer.from(m.token);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  assigning(workerId: string, slice: AssignedSlice): string[] {
    const m = this.members.get(workerId);
    if (!m) return [];
    this.leaveSlice(m, slice.digest);
    m.slices.set(slice.digest, { slice, loaded: false, reported: new Set() });
    const t = this.transfer(slice);
    const others = [...(this.byDigest.get(slice.digest) ?? [])].filter((o) => o !== m && !o.paused && !this.isBanned(o));
    const set = this.byDigest.get(slice.digest) ?? new Set<Member>();
    this.byDigest.set(slice.digest, set.add(m));
    t.fetching++;
    // Holders first (they have every chunk), then those fetching (they pass on what they have); random within each, so
    // one holder is not every newcomer's first choice.
    const holds = (o: Member): number => Number(o.slices.get(slice.digest)?.loaded === true);
    const shuffled = others.map((o) => ({ o, r: this.random() })).sort((x, y) => holds(y.o) - holds(x.o) || x.r - y.r);
    return shuffled.slice(0, this.config.maxListed).map((x) => x.o.peerId);
  }

  loaded(workerId: string, digest: string, fromPeers: number | undefined, fromHub: number | undefined): void {
    const h = this.members.get(workerId)?.slices.get(digest);
    if (!h || h.loaded) return;
    h.loaded = true;
    const t = this.transfer(h.slice);
    t.fetching = Math.max(0, t.fetching - 1);
    t.holders++;
    t.loads++;
    // A client's own account, capped so that one volunteer cannot skew the counters by more than a few slices.
    const cap = 4 * h.slice.bytes;
    const peers = Math.min(cap, fromPeers ?? 0);
    const hub = Math.min(cap, fromHub ?? (fromPeers === undefined ? h.slice.bytes : 0));
    t.fromPeers += peers;
    t.fromHub += hub;
    if (fromPeers !== undefined && peers === 0 && hub === 0) t.fromCache++;
  }

  paused(workerId: string, paused: boolean): void {
    const m = this.members.get(workerId);
    if (m) m.paused = paused;
  }

  dropped(workerId: string, digest?: string): void {
    const m = this.members.get(workerId);
    if (!m) return;
    if (digest !== undefined) this.leaveSlice(m, digest);
    else for (const d of [...m.slices.keys()]) this.leaveSlice(m, d);
  }

  gone(workerId: string): void {
    const m = this.members.get(workerId);
    if (!m) return;
    const t = this.now();
    this.departed.set(m.peerId, { workerId, wallet: m.wallet, digests: [...m.slices.keys()], atMs: t });
    for (const [id, d] of this.departed) {
      if (this.departed.size <= 10_000 && t - d.atMs < DEPARTED_KEPT_MS) break;
      this.departed.delete(id);
    }
    for (const d of [...m.slices.keys()]) this.leaveSlice(m, d);
    this.members.delete(workerId);
    this.byPeer.delete(m.peerId);
    this.onRevoke?.(m.peerId);
  }

  report(workerId: string, digest: string, r: PeerReport): string | null {
    const reporter = this.members.get(workerId);
    const from = reporter?.slices.get(digest);
    const live = this.byPeer.get(r.peerId);
    const bad = live ? { workerId: live.workerId, wallet: live.wallet, digests: [...live.slices.keys()] } : this.departed.get(r.peerId);
    // Only a report about a peer of the reporter's own slice counts (one it could have been given), once per pair.
    if (!from || !bad || live === reporter || !bad.digests.includes(digest) || from.reported.has(r.peerId)) return null;
    from.reported.add(r.peerId);
    const until = this.now() + this.config.banMs;
    this.banned.set(`w:${bad.workerId}`, until);
    this.banned.set(`k:${bad.wallet}`, until);
    while (this.banned.size > 10_000) this.banned.delete(this.banned.keys().next().value as string);
    this.transfer(from.slice).badPeers++;
    const where = r.chunk === null ? '' : `, chunk ${r.chunk}`;
    return `${workerId} reported peer ${bad.workerId} (${r.code}${where}${r.detail ? `: ${r.detail}` : ''}); not listed as a peer for ${Math.round(this.config.banMs / 60_000)} min`;
  }

  /** Whether a worker is not listed because it was reported. */
  isBannedWorker(workerId: string): boolean {
    const m = this.members.get(workerId);
    return m ? this.isBanned(m) : (this.banned.get(`w:${workerId}`) ?? 0) > this.now();
  }

  /** The counters, newest slice last. */
  slices(): SliceTransfer[] {
    return [...this.transfers.values()].map((t) => ({ ...t, experts: [t.experts[0], t.experts[1]] }));
  }

  private isBanned(m: Member): boolean {
    const t = this.now();
    return (this.banned.get(`w:${m.workerId}`) ?? 0) > t || (this.banned.get(`k:${m.wallet}`) ?? 0) > t;
  }

  private leaveSlice(m: Member, digest: string): void {
    const h = m.slices.get(digest);
    if (!h) return;
    const set = this.byDigest.get(digest);
    set?.delete(m);
    if (set?.size === 0) this.byDigest.delete(digest);
    const t = this.transfers.get(digest);
    if (t) {
      if (h.loaded) t.holders = Math.max(0, t.holders - 1);
      else t.fetching = Math.max(0, t.fetching - 1);
    }
    m.slices.delete(digest);
  }

  private transfer(s: AssignedSlice): SliceTransfer {
    let t = this.transfers.get(s.digest);
    if (!t) {
      t = {
        model: s.model,
        layer: s.layer,
        experts: [s.experts[0], s.experts[1]],
        digest: s.digest,
        bytes: s.bytes,
        loads: 0,
        fromCache: 0,
        fromPeers: 0,
        fromHub: 0,
        holders: 0,
        fetching: 0,
        badPeers: 0,
      };
      this.transfers.set(s.digest, t);
      while (this.transfers.size > this.config.slicesKept) this.transfers.delete(this.transfers.keys().next().value as string);
    }
    return t;
  }
}
