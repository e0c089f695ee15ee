/**
 * Warming the shard server's digests before a push: an assignment announces its slice's size and SHA-256 digest, and
 * the first of each slice costs one read of it (hub/shards.ts), a few trips through libuv's thread pool. A push of
 * hundreds of assignments at once waits on those reads; known beforehand, each is a lookup.
 *
 *   const warmer = new ShardWarmer({ models, shape, warm: (model, slices) => shards.warm(model, slices) });
 *   warmer.asked(request);   // at each volunteer's hello: the request its first offer would be made for
 *
 * Each kind of volunteer (the widths it takes per layer, market/likely-slices.ts sliceWidths) is warmed once, the
 * slices the market would offer such volunteers on a model nobody holds (likelySlices), in the background, one kind
 * after another. Bounded in all: SHARD_WARM_KINDS kinds, SHARD_WARM_SLICES slices (half the digests the shard server
 * keeps, so a warm-up never evicts itself) and SHARD_WARM_BYTES bytes read.
 */
import { bytesForExpertOf, type VolunteerRequest } from './market/assign.ts';
import { likelySlices, sliceWidths } from './market/likely-slices.ts';
import type { HeldRange, ModelShape } from './market/types.ts';
import { SHARD_WARM_BYTES, SHARD_WARM_KINDS, SHARD_WARM_SLICES } from './limits.ts';

export interface ShardWarmerHost {
  /** The market models. */
  models(): string[];
  /** A market model's shape; throws for another name. */
  shape(model: string): ModelShape;
  /** Computes the digests of these slices (shards.ts ShardServer.warm); resolves when done. */
  warm(model: string, slices: HeldRange[]): Promise<unknown>;
}

export interface ShardWarmerLimits {
  kinds: number;
  slices: number;
  bytes: number;
}

export class ShardWarmer {
  private readonly kinds = new Set<string>();
  private slicesLeft: number;
  private bytesLeft: number;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly host: ShardWarmerHost,
    private readonly limits: ShardWarmerLimits = { kinds: SHARD_WARM_KINDS, slices: SHARD_WARM_SLICES, bytes: SHARD_WARM_BYTES },
  ) {
    this.slicesLeft = limits.slices;
    this.bytesLeft = limits.bytes;
  }

  /** Resolves once every warm-up asked for so far is done (tests, benches). */
  idle(): Promise<void> {
    return this.queue.then(() => undefined);
  }

  /** A volunteer will be offered slices for `request` (its hello's): warms them unless its kind was warmed. */
  asked(request: VolunteerRequest): void {
    for (const model of request.model ? [request.model] : this.host.models()) {
      if (this.kinds.size >= this.limits.kinds || this.slicesLeft <= 0 || this.bytesLeft <= 0) return;
      let shape: ModelShape;
      try {
        shape = this.host.shape(model);
      } catch {
        continue; // not a market model: the offer will say so
      }
      const kind = `${model}\u0000${sliceWidths(shape, request).join(' ')}`;
      if (this.kinds.has(kind)) continue;
      this.kinds.add(kind);
      const slices: HeldRange[] = [];
      for (const s of likelySlices(shape, request, this.slicesLeft)) {
        const bytes = (s[2] - s[1]) * bytesForExpertOf(shape, s[0]);
        if (bytes > this.bytesLeft) break;
        this.bytesLeft -= bytes;
        slices.push(s);
      }
      this.slicesLeft -= slices.length;
      if (slices.length === 0) continue;
      this.queue = this.queue.then(() => this.host.warm(model, slices)).catch(() => {});
    }
  }
}
