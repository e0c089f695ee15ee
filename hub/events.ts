/** A bounded in-memory log of recruitment events (saturation onset/end, recruit, release, evictions) for the dashboard. */
import { EVENTS_KEPT } from './limits.ts';

export type HubEventKind =
  | 'saturation-onset'
  | 'saturation-end'
  | 'recruit'
  | 'release'
  | 'evict'
  | 'coordinator'
  | 'quarantine'
  | 'volunteer-join'
  | 'volunteer-leave'
  | 'load-failed'
  | 'dispatch';

export interface HubEvent {
  atMs: number;
  kind: HubEventKind;
  model: string | null;
  detail: string;
}

export class EventLog {
  private readonly ring: HubEvent[] = [];
  private seq = 0;

  constructor(private readonly capacity = EVENTS_KEPT) {}

  add(kind: HubEventKind, model: string | null, detail: string, atMs = Date.now()): void {
    this.ring.push({ atMs, kind, model, detail });
    this.seq++;
    if (this.ring.length > this.capacity) this.ring.splice(0, this.ring.length - this.capacity);
  }

  /** Newest last; `limit` most recent. */
  recent(limit = 100): HubEvent[] {
    return this.ring.slice(-Math.max(0, Math.min(limit, this.capacity)));
  }

  get total(): number {
    return this.seq;
  }
}
