/**
 * Which ranges a worker may report as held over HTTP (`POST /api/expert-coverage`): only ranges inside a slice the
 * market assigned to that worker (`POST /api/expert-volunteer`) **and** that its wallet fetched from the shard server
 * (`GET /api/expert-shard`). Without it any token holder could claim any coverage, lowering the demand the market
 * sees (nobody else is recruited for "covered" experts) and putting itself in the dispatch map for slices it never
 * had. Volunteers on the channel need none of this: the hub reports their coverage itself, always their assignment's
 * own range (volunteers/channel.ts).
 *
 *   const grants = new SliceGrants();
 *   grants.assigned(wallet, 'w1', { model: 'm', layer: 1, begin: 0, end: 64 });   // the market's answer
 *   grants.downloaded(wallet, { model: 'm', layer: 1, begin: 0, end: 64 });       // the shard server's
 *   grants.admit(wallet, 'w1', 'm', [[1, 0, 32]]);                                // ok: inside both
 *   grants.admit(wallet, 'w1', 'm', [[1, 32, 96]]);                               // COVERAGE_NOT_ASSIGNED
 *
 * Rules, in order, for each held range `[layer, begin, end)`: it lies inside one assigned slice of this wallet that
 * is this worker's (the request named it as `worker_id`, or a heartbeat of this worker first claimed an unnamed one;
 * a slice claimed by another worker does not count), else COVERAGE_NOT_ASSIGNED; and inside one slice this wallet
 * downloaded, else COVERAGE_NOT_DOWNLOADED. An empty list is always admitted (a worker live and holding nothing).
 * A range may lie in a sub-range of its slice (a worker may hold less than it was given), never across two slices.
 *
 * "Downloaded" is what the shard server can know: it sent the slice's whole length to the wallet (summed over bodies
 * that ran to their end, so a resumed download counts and a one-byte range does not), or answered a revalidation of
 * a cached copy by its digest (304: that only proves the client knows the digest). What a client keeps afterwards it cannot know; whether a worker computes with
 * the right weights is the audits' business (docs/trust.md).
 *
 * Memory is bounded: SLICE_GRANTS_PER_WALLET slices of each kind per wallet (the oldest forgotten first), and
 * SLICE_GRANT_WALLETS_KEPT wallets (the least recently used forgotten first). In memory only: after a hub restart
 * an HTTP worker asks for its slice again, as the coverage it reported is gone too.
 */
import { HubError } from '../errors.ts';
import { LinkedMap } from '../auth/linked-map.ts';
import { SLICE_GRANT_WALLETS_KEPT, SLICE_GRANTS_PER_WALLET } from '../limits.ts';
import type { HeldRange, SliceRef } from '../../protocol/slice.ts';

interface Assigned extends SliceRef {
  /** The worker it is for; null until a heartbeat claims it (a request without `worker_id`). */
  workerId: string | null;
}

interface WalletSlices {
  assigned: Assigned[];
  downloaded: SliceRef[];
}

export interface SliceGrantsOptions {
  perWallet?: number;
  walletsKept?: number;
}

const inside = (s: SliceRef, model: string, [layer, begin, end]: Readonly<HeldRange>): boolean =>
  s.model === model && s.layer === layer && s.begin <= begin && end <= s.end;

const same = (a: SliceRef, b: SliceRef): boolean => a.model === b.model && a.layer === b.layer && a.begin === b.begin && a.end === b.end;

export class SliceGrants {
  readonly perWallet: number;
  readonly walletsKept: number;
  private readonly wallets = new LinkedMap<WalletSlices>();

  constructor({ perWallet = SLICE_GRANTS_PER_WALLET, walletsKept = SLICE_GRANT_WALLETS_KEPT }: SliceGrantsOptions = {}) {
    if (!(Number.isSafeInteger(perWallet) && perWallet >= 1)) throw new RangeError('perWallet must be a positive integer');
    if (!(Number.isSafeInteger(walletsKept) && walletsKept >= 1)) throw new RangeError('walletsKept must be a positive integer');
    this.perWallet = perWallet;
    this.walletsKept = walletsKept;
  }

  /** Wallets remembered now (never more than walletsKept). */
  get size(): number {
    return this.wallets.size;
  }

  /** The market assigned `slice` to `workerId` (null: the request named no worker) of `wallet`. */
  assigned(wallet: string, workerId: string | null, slice: SliceRef): void {
    const w = this.walletOf(wallet);
    const i = w.assigned.findIndex((a) => same(a, slice) && a.workerId === workerId);
    if (i >= 0) w.assigned.splice(i, 1); // the same answer again: it becomes the newest
    w.assigned.push({ model: slice.model, layer: slice.layer, begin: slice.begin, end: slice.end, workerId });
    if (w.assigned.length > this.perWallet) w.assigned.shift();
  }

  /** `wallet` fetched `slice` from the shard server. */
  downloaded(wallet: string, slice: SliceRef): void {
    const w = this.walletOf(wallet);
    const i = w.downloaded.findIndex((d) => same(d, slice));
    if (i >= 0) w.downloaded.splice(i, 1);
    w.downloaded.push({ model: slice.model, layer: slice.layer, begin: slice.begin, end: slice.end });
    if (w.downloaded.length > this.perWallet) w.downloaded.shift();
  }

  /**
   * Throws COVERAGE_NOT_ASSIGNED or COVERAGE_NOT_DOWNLOADED for the first range of `ranges` that is not admitted;
   * otherwise the unnamed slices the ranges used become this worker's. Nothing changes when it throws.
   */
  admit(wallet: string, workerId: string, model: string, ranges: ReadonlyArray<Readonly<HeldRange>>): void {
    if (ranges.length === 0) return;
    const w = this.wallets.get(wallet);
    if (w) this.wallets.touch(wallet);
    const claims: Assigned[] = [];
    for (const r of ranges) {
      const mine = w?.assigned.filter((a) => inside(a, model, r) && (a.workerId === workerId || a.workerId === null)) ?? [];
      const slice = mine.find((a) => a.workerId === workerId) ?? mine[0];
      const what = `${model} layer ${r[0]} experts [${r[1]}, ${r[2]})`;
      if (!slice)
        throw new HubError(
          'COVERAGE_NOT_ASSIGNED',
          `${what} is not inside a slice assigned to worker ${workerId}: ask POST /api/expert-volunteer for one, download it, then report it`,
        );
      if (!w?.downloaded.some((d) => inside(d, model, r)))
        throw new HubError('COVERAGE_NOT_DOWNLOADED', `${what} was assigned but this wallet has not downloaded it: GET its shard first`);
      if (slice.workerId === null) claims.push(slice);
    }
    for (const a of claims) a.workerId = workerId;
  }

  private walletOf(wallet: string): WalletSlices {
    let w = this.wallets.get(wallet);
    if (w) {
      this.wallets.touch(wallet);
      return w;
    }
    while (this.wallets.size >= this.walletsKept && this.wallets.shift() !== undefined);
    w = { assigned: [], downloaded: [] };
    this.wallets.set(wallet, w);
    return w;
  }
}
