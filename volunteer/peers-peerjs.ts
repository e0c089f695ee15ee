/**
 * PeerNetwork over PeerJS (npm `peerjs`): WebRTC data channels between volunteers' browsers, found through the hub's
 * own signalling server (hub/peers-signal.ts) with the id and token the hub issued in welcome. Browser only: `peerjs`
 * is imported when a network is opened, so pages that never share, and Node, never load it.
 *
 *   if (webRtcAvailable()) network = await openPeerJsNetwork(location.origin, welcome.peer);
 *
 * ICE servers are the welcome's (`peer.iceServers`: the hub's TURN server with a credential it minted for this
 * connection, issue 29); a hub without TURN sends none, and then peers connect only where their host candidates reach
 * each other (one machine, one network, or public addresses). Where no candidate pair works the connection fails
 * within its timeout and the slice comes from the hub (docs/peers.md).
 */
import type { DataConnection, Peer } from 'peerjs';
import type { PeerLink, PeerNetwork } from './peers-swarm.ts';
import type { WelcomePeer } from '../protocol/channel/index.ts';

/** Whether this environment has WebRTC data channels at all (Node has not; a browser may have them disabled). */
export function webRtcAvailable(): boolean {
  return typeof globalThis.RTCPeerConnection === 'function' && typeof globalThis.RTCDataChannel === 'function';
}

/** Connections others may open to us at once. */
const MAX_INCOMING = 16;

class PeerJsLink implements PeerLink {
  onMessage: ((data: unknown) => void) | null = null;
  onClose: (() => void) | null = null;
  private closed = false;

  constructor(private readonly conn: DataConnection) {
    conn.on('data', (d) => this.onMessage?.(d));
    const gone = (): void => {
      if (this.closed) return;
      this.closed = true;
      this.onClose?.();
    };
    conn.on('close', gone);
    conn.on('error', () => {
      gone();
      conn.close();
    });
  }

  get peerId(): string {
    return this.conn.peer;
  }

  get buffered(): number {
    return (this.conn.dataChannel?.bufferedAmount ?? 0) + ((this.conn as unknown as { bufferSize?: number }).bufferSize ?? 0) * 16_384;
  }

  send(bytes: Uint8Array): void {
    if (this.closed) return;
    void this.conn.send(bytes);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.conn.close();
  }
}

/** Opens this volunteer's PeerJS peer on the hub; resolves once the signalling server accepted it. */
export async function openPeerJsNetwork(hubUrl: string, w: WelcomePeer, timeoutMs = 10_000): Promise<PeerNetwork> {
  const { Peer: PeerClass } = await import('peerjs');
  const hub = new URL(hubUrl);
  const secure = hub.protocol === 'https:';
  const peer: Peer = new PeerClass(w.id, {
    host: hub.hostname,
    port: Number(hub.port || (secure ? 443 : 80)),
    path: w.path,
    key: w.key,
    token: w.token,
    secure,
    config: { iceServers: (w.iceServers ?? []).map((x) => ({ ...x, urls: [...x.urls] })) },
    debug: 0,
  });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the signalling server did not answer')), timeoutMs);
    peer.once('open', () => {
      clearTimeout(timer);
      resolve();
    });
    peer.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
  }).catch((e: unknown) => {
    peer.destroy();
    throw e;
  });
  let incoming = 0;
  const network: PeerNetwork = {
    onIncoming: null,
    connect(peerId, ms) {
      return new Promise<PeerLink>((resolve, reject) => {
        const conn = peer.connect(peerId, { serialization: 'raw', reliable: true });
        if (!conn) {
          reject(new Error('peerjs refused to connect'));
          return;
        }
        const timer = setTimeout(() => {
          conn.close();
          reject(new Error(`no data channel to ${peerId} within ${ms} ms`));
        }, ms);
        conn.once('open', () => {
          clearTimeout(timer);
          resolve(new PeerJsLink(conn));
        });
        conn.once('error', (e) => {
          clearTimeout(timer);
          conn.close();
          reject(e);
        });
      });
    },
    destroy() {
      peer.destroy();
    },
  };
  // A peer we could not reach (its id is gone) errors on the peer object, not on the connection: not fatal here.
  peer.on('error', () => {});
  peer.on('connection', (conn) => {
    if (incoming >= MAX_INCOMING || conn.serialization !== 'raw') {
      conn.close();
      return;
    }
    incoming++;
    conn.once('close', () => incoming--);
    conn.once('open', () => {
      const link = new PeerJsLink(conn);
      if (network.onIncoming) network.onIncoming(link);
      else link.close();
    });
  });
  return network;
}
