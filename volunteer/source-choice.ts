/**
 * Where a slice's chunks come from when both peers and the hub can give them (docs/peers.md, "Choosing the source").
 *
 * Peers exist to spare the hub's egress, so by default a ready peer is asked first for every chunk it holds and the
 * hub takes only the chunks no peer holds, or one a peer has kept for `takeoverMs` (8 s). Over a slow or lossy link a
 * peer behind a TURN relay can be several times slower than the hub's own download (docs/netlab.md measured 2.1× at
 * the broadband profile, 4.2× at mobile), and then sparing an idle hub costs the volunteer minutes. The hub says how
 * busy its shard server is on every range it sends (`x-expertswarm-shard-load`: downloads in flight over its cap);
 * while it is idle, speed may win:
 *
 *  - a peer measured `speedRatio` times slower per byte than the hub, where taking the rest of the slice from the
 *    hub instead would save at least `minSavingMs`, gets no new requests (the hub takes its chunks, with as many lanes
 *    as when it is alone);
 *  - a chunk a peer holds is taken over by the hub after `speedRatio` × the hub's own time for it (at least
 *    `minTakeoverMs`), not after the fixed `takeoverMs`.
 *
 * While the hub is busy, says nothing (an older hub), or has not been measured yet, the default stands. Pure functions;
 * SliceSwarm (peers-swarm.ts) keeps the rates.
 */

export interface SourcePolicy {
  /** The hub's load hint below which it counts as idle (0..1). */
  idleBelow: number;
  /** How many times slower per byte than the hub a peer must be before speed wins over sparing the hub. */
  speedRatio: number;
  /** The earliest a peer's chunk is taken over, however fast the hub. */
  minTakeoverMs: number;
  /** A peer is passed over only when the hub would bring the rest of the slice at least this much sooner. */
  minSavingMs: number;
}

export const DEFAULT_SOURCE_POLICY: Readonly<SourcePolicy> = Object.freeze({
  idleBelow: 0.25,
  speedRatio: 2,
  minTakeoverMs: 1_000,
  minSavingMs: 5_000,
});

export interface HubView {
  /** The hub's last load hint (0..1), or null: none yet, or a hub that sends none. */
  load: number | null;
  /** Milliseconds per byte of the hub's ranges (a moving average over whole chunks), or null before the first. */
  msPerByte: number | null;
}

/** Whether the hub says it is idle (a load hint under `idleBelow`; no hint is not idle). */
export function hubIdle(hub: Pick<HubView, 'load'>, policy: SourcePolicy = DEFAULT_SOURCE_POLICY): boolean {
  return hub.load !== null && hub.load < policy.idleBelow;
}

/** Whether the hub is idle enough, and measured, for speed to count. */
export function hubMayWin(hub: HubView, policy: SourcePolicy = DEFAULT_SOURCE_POLICY): boolean {
  return hubIdle(hub, policy) && hub.msPerByte !== null && hub.msPerByte > 0;
}

/**
 * Whether a peer link (its measured ms per byte, or null before its first whole chunk) should get no new requests:
 * the hub is idle, the peer `speedRatio` times slower than it, and the `remainingBytes` of the slice would come at
 * least `minSavingMs` sooner from the hub.
 */
export function peerOutpaced(
  peerMsPerByte: number | null,
  hub: HubView,
  remainingBytes: number,
  policy: SourcePolicy = DEFAULT_SOURCE_POLICY,
): boolean {
  if (peerMsPerByte === null || !hubMayWin(hub, policy)) return false;
  const hubMs = hub.msPerByte as number;
  return peerMsPerByte > policy.speedRatio * hubMs && remainingBytes * (peerMsPerByte - hubMs) >= policy.minSavingMs;
}

/** How long a peer may keep a chunk of `chunkBytes` before the hub takes it over. */
export function takeoverAfterMs(
  chunkBytes: number,
  hub: HubView,
  takeoverMs: number,
  policy: SourcePolicy = DEFAULT_SOURCE_POLICY,
): number {
  if (!hubMayWin(hub, policy)) return takeoverMs;
  const hubMs = chunkBytes * (hub.msPerByte as number);
  return Math.min(takeoverMs, Math.max(policy.minTakeoverMs, policy.speedRatio * hubMs));
}

/** A moving average of ms per byte: the first sample as it is, then 1/4 of each new one. */
export function nextMsPerByte(prev: number | null, ms: number, bytes: number): number | null {
  if (!(bytes > 0) || !(ms >= 0) || !Number.isFinite(ms)) return prev;
  const sample = ms / bytes;
  return prev === null ? sample : prev + (sample - prev) / 4;
}
