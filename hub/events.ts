/**
 * A bounded in-memory log of recruitment events (saturation onset/end, recruit, release, evictions, admin actions) for
 * the dashboard. Every event gets a sequence number, strictly increasing for the life of the hub, so a stream that
 * sent a snapshot up to seq N continues with N + 1 and a page can tell a gap from a repeat.
 *
 *   const log = new EventLog();
 *   const stop = log.subscribe((e) => stream.broadcast('event', e));
 *   log.add('recruit', 'm', 'layer 1 experts [0, 8) to w1', Date.now());
 */
import { EVENTS_KEPT } from './limits.ts';
import { HUB_EVENT_KINDS, type HubEventKindName, newestEvents } from '../protocol/dashboard.ts';

export { HUB_EVENT_KINDS };
export type HubEventKind = HubEventKindName;

export interface HubEvent {
  seq: number;
  atMs: number;
  kind: HubEventKind;
  model: string | null;
  detail: string;
}

/** A query of the hub's event ring: kind and model to match (absent = any) and how many of the newest to return. */
export interface EventLogQuery {
  kind?: HubEventKind | undefined;
  model?: string | undefined;
  /** The newest `limit` matching events. */
  limit: number;
}

export class EventLog {
  private readonly ring: HubEvent[] = [];
  private seq = 0;
  private readonly listeners = new Set<(e: HubEvent) => void>();
  /**
   * Told of a listener that threw (the hub logs it as an internal error). add() is called from everywhere — request
   * handlers, timers, socket callbacks — so a listener's throw must never reach its caller. An event the report itself
   * adds is not reported again if a listener throws on it too (no loop).
   */
  onListenerError: ((e: unknown) => void) | null = null;
  private reporting = false;

  constructor(private readonly capacity = EVENTS_KEPT) {}

  add(kind: HubEventKind, model: string | null, detail: string, atMs = Date.now()): HubEvent {
    const e: HubEvent = { seq: ++this.seq, atMs, kind, model, detail };
    this.ring.push(e);
    if (this.ring.length > this.capacity) this.ring.splice(0, this.ring.length - this.capacity);
    for (const l of this.listeners) {
      try {
        l(e);
      } catch (err) {
        this.report(err);
      }
    }
    return e;
  }

  private report(err: unknown): void {
    if (this.reporting || !this.onListenerError) return;
    this.reporting = true;
    try {
      this.onListenerError(err);
    } catch {
      // the reporter failed too: nothing left to tell
    } finally {
      this.reporting = false;
    }
  }

  /** Newest last; `limit` most recent. */
  recent(limit = 100): HubEvent[] {
    return this.ring.slice(-Math.max(0, Math.min(limit, this.capacity)));
  }

  /** The newest `limit` events of a kind and/or model, newest last. */
  query(f: EventLogQuery): HubEvent[] {
    return newestEvents(this.ring, f, f.limit).reverse();
  }

  /** Calls `listener` for every event added from now on (synchronously; a throw goes to onListenerError). Returns the unsubscribe. */
  subscribe(listener: (e: HubEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Events ever added (the seq of the newest). */
  get total(): number {
    return this.seq;
  }
}
