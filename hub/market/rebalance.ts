/**
 * Spreading slices over devices: a volunteer that holds several slices (docs/volunteer-channel.md, `max_slices`)
 * computes them one frame at a time, so once every wanted expert is covered, a volunteer that waits with nothing is
 * better used holding one of them. A pure function: who waits, who holds what, and which slices to move.
 *
 *   chooseRebalance([{ id: 'new', model: '', speed: 40 }], [{ id: 'tab', speed: 50, slices: [[0, 0, 8], [1, 0, 8]], model: 'm' }])
 *   // → [{ to: 'new', from: 'tab', range: [1, 0, 8] }]: the hub releases it from 'tab' (REBALANCE) and offers it to 'new'
 *
 * Rules: each waiting volunteer, fastest first, takes one slice from the holder with the most loaded slices (ties:
 * the slower holder, then the lower id) that keeps at least one; the slice moved is the holder's newest (the last
 * assigned); a holder gives up a slice only to a volunteer of its model preference ('' = any) and at least half as
 * fast (an unknown speed counts as fast enough), so work does not move to a device that would serve it far slower.
 */
import type { HeldRange } from './types.ts';

export interface WaitingVolunteer {
  id: string;
  /** The model it asked for ('' = any). */
  model: string;
  /** Measured GFLOP/s, or null when unknown. */
  speed: number | null;
}

export interface SliceHolder {
  id: string;
  model: string;
  speed: number | null;
  /** Its loaded slices, oldest first. */
  slices: readonly HeldRange[];
}

export interface RebalanceMove {
  to: string;
  from: string;
  range: HeldRange;
}

/** A holder is not asked to give a slice to a volunteer slower than this fraction of its own speed. */
export const REBALANCE_MIN_SPEED_RATIO = 0.5;

export function chooseRebalance(waiting: readonly WaitingVolunteer[], holders: readonly SliceHolder[]): RebalanceMove[] {
  const left = new Map(holders.map((h) => [h.id, [...h.slices]]));
  const moves: RebalanceMove[] = [];
  const bySpeed = [...waiting].sort((a, b) => (b.speed ?? Infinity) - (a.speed ?? Infinity) || (a.id < b.id ? -1 : 1));
  for (const w of bySpeed) {
    let best: SliceHolder | undefined;
    for (const h of holders) {
      const n = left.get(h.id)?.length ?? 0;
      if (n < 2 || (w.model !== '' && w.model !== h.model)) continue;
      if (w.speed !== null && h.speed !== null && w.speed < REBALANCE_MIN_SPEED_RATIO * h.speed) continue;
      if (!best || n > (left.get(best.id)?.length ?? 0) || (n === left.get(best.id)?.length && slower(h, best))) best = h;
    }
    if (!best) continue;
    const slices = left.get(best.id) as HeldRange[];
    const range = slices.pop() as HeldRange;
    moves.push({ to: w.id, from: best.id, range });
  }
  return moves;
}

function slower(a: SliceHolder, b: SliceHolder): boolean {
  const sa = a.speed ?? Infinity;
  const sb = b.speed ?? Infinity;
  return sa !== sb ? sa < sb : a.id < b.id;
}
