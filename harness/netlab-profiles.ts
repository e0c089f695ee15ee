/**
 * The network lab's link profiles (issue 29, docs/netlab.md): what a home's link to the "internet" adds. Round-trip
 * figures: `rttMs ± jitterMs` is the round trip the link emulator adds (half each way, each way drawn uniformly in
 * ±jitterMs/2, so a round trip stays within ±jitterMs); `lossPct` drops that share of packets in each direction (the
 * kernel, iptables `statistic`); `rateMbit` shapes each direction (`tc … tbf`); `outageMs` is how long `lab.outage()`
 * cuts the link (every packet dropped, both ways) unless it is given another length.
 */
export interface NetProfile {
  name: string;
  /** Round trip added by the link emulator, ms. */
  rttMs: number;
  /** A round trip stays within rttMs ± jitterMs. */
  jitterMs: number;
  /** Each direction's rate (tbf); undefined: not shaped. */
  rateMbit?: number;
  /** Share of packets dropped in each direction, percent. */
  lossPct: number;
  /** The length of this profile's outage (`lab.outage(home)`), ms. */
  outageMs?: number;
}

export const PROFILES = Object.freeze({
  lan: Object.freeze({ name: 'lan', rttMs: 1, jitterMs: 0, lossPct: 0 }),
  broadband: Object.freeze({ name: 'broadband', rttMs: 30, jitterMs: 5, rateMbit: 50, lossPct: 0.1 }),
  far: Object.freeze({ name: 'far', rttMs: 120, jitterMs: 20, rateMbit: 10, lossPct: 1 }),
  mobile: Object.freeze({ name: 'mobile', rttMs: 80, jitterMs: 40, rateMbit: 5, lossPct: 2, outageMs: 3000 }),
} satisfies Record<string, NetProfile>);

export type ProfileName = keyof typeof PROFILES;

export function profileOf(p: ProfileName | NetProfile): NetProfile {
  if (typeof p !== 'string') return p;
  const found = (PROFILES as Record<string, NetProfile>)[p];
  if (!found) throw new Error(`netlab: no profile "${p}" (${Object.keys(PROFILES).join(', ')})`);
  return found;
}

/** The emulator's part of a profile: what the userspace forwarder adds (the kernel does loss, rate and outages). */
export interface LinkShape {
  rttMs: number;
  jitterMs: number;
}

/** One direction's delay for one chunk: half the round trip, ± half the jitter, uniformly (`u` in [0, 1)). */
export function oneWayDelayMs(shape: LinkShape, u: number): number {
  return Math.max(0, shape.rttMs / 2 + (u * 2 - 1) * (shape.jitterMs / 2));
}

/**
 * When a chunk that arrived at `now` leaves: its own delay, but never before the chunk ahead of it (a TCP stream stays
 * in order, so jitter delays the chunks behind a slow one instead of reordering them).
 */
export function dueAt(now: number, previousDue: number, delayMs: number): number {
  return Math.max(previousDue, now + delayMs);
}

/** A small seedable PRNG (mulberry32) so that a lab's jitter can be replayed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
