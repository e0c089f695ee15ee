/**
 * The messages between bench:hub's main process and its client processes (bench/hub.ts `--role clients`), which play
 * the volunteers on the channel: for the single-hub bench (bench/hub.ts) and the cluster's (bench/hub-cluster.ts).
 */

/** What the main process tells one client process. */
export interface ClientJob {
  url: string;
  token: string;
  prefix: string;
  count: number;
  /** The first `eligible` connections wait for work (max_experts 1); the others pause after welcome. */
  eligible: number;
  heartbeatMs: number;
  /** The share of heartbeats followed at once by a ping, its pong timed: a heartbeat's round trip (bench:hub --hubs). */
  beatPing?: number;
  /** The source address of the connections (127.x.y.z: each its own ephemeral ports; bench:hub --hubs). */
  localAddress?: string;
}

export type ToClient = { type: 'start'; job: ClientJob } | { type: 'rtt'; on: boolean } | { type: 'report' } | { type: 'exit' };
export type FromClient =
  | { type: 'connected'; count: number; failed: number; closes: Record<string, number> }
  | {
      type: 'report';
      assigns: number[];
      rttMs: number[];
      beatMs: number[];
      closes: Record<string, number>;
      open: number;
      /** Since the last report: this client process's CPU (s), and its event-loop delay p99 / max (ms). */
      cpuS: number;
      loopP99: number;
      loopMax: number;
    };
