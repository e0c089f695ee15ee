/**
 * The dashboard's memory: the last HISTORY_SAMPLES ticks per model, in a fixed ring each (a push overwrites the oldest,
 * O(1), and the memory never grows past capacity × models).
 *
 *   const h = new History(HISTORY_SAMPLES);
 *   h.push('m', sample);
 *   h.all(); // { m: [oldest, …, newest] }
 */
import type { Sample } from '../../protocol/dashboard.ts';

export class SampleRing<T> {
  private readonly items: Array<T | undefined>;
  /** Where the next push goes. */
  private head = 0;
  private count = 0;

  constructor(readonly capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${capacity}`);
    this.items = new Array<T | undefined>(capacity);
  }

  push(item: T): void {
    this.items[this.head] = item;
    this.head = (this.head + 1) % this.capacity;
    if (this.count < this.capacity) this.count++;
  }

  get size(): number {
    return this.count;
  }

  /** Oldest first. */
  toArray(): T[] {
    const out = new Array<T>(this.count);
    const start = (this.head - this.count + this.capacity) % this.capacity;
    for (let i = 0; i < this.count; i++) out[i] = this.items[(start + i) % this.capacity] as T;
    return out;
  }

  last(): T | undefined {
    return this.count === 0 ? undefined : this.items[(this.head - 1 + this.capacity) % this.capacity];
  }
}

/** One ring of Samples per model. */
export class History {
  private readonly rings = new Map<string, SampleRing<Sample>>();

  constructor(readonly samplesPerModel: number) {}

  push(model: string, s: Sample): void {
    let r = this.rings.get(model);
    if (!r) {
      r = new SampleRing<Sample>(this.samplesPerModel);
      this.rings.set(model, r);
    }
    r.push(s);
  }

  all(): Record<string, Sample[]> {
    const out: Record<string, Sample[]> = {};
    for (const [model, r] of this.rings) out[model] = r.toArray();
    return out;
  }
}
