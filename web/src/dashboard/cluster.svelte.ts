/**
 * The cluster as reactive state for the dashboard (cluster.ts says what is read and how it is checked): every
 * POLL_MS, `GET /api/health` (is this hub in a cluster, which hubs, their workers) and, in a cluster, the newest
 * events of every hub. A hub alone reads its health only.
 *
 *   const cluster = new ClusterWatch();
 *   cluster.start();
 *   cluster.view;    // ClusterView | null (a hub alone)
 *   cluster.events;  // ClusterEvents: 'off', 'pending', 'ok' with rows, 'unavailable' with why
 */
import { EVENTS_PAGE_MAX } from '../../../protocol/dashboard.ts';
import { ApiError, fetchClusterEvents, fetchHealth } from './api.ts';
import { type ClusterEvents, type ClusterView, parseClusterEvents, parseClusterHealth } from './cluster.ts';

/** How often the cluster is read (the page's own events come live on the stream; the other hubs' with this delay). */
export const CLUSTER_POLL_MS = 2_000;
/** A read that takes longer is given up (the next one tries again). */
const READ_TIMEOUT_MS = 10_000;

export class ClusterWatch {
  view: ClusterView | null = $state.raw(null);
  events: ClusterEvents = $state.raw({ state: 'off' });

  #timer: ReturnType<typeof setTimeout> | undefined;
  #abort: AbortController | null = null;
  #stopped = false;

  start(): void {
    void this.#read();
  }

  destroy(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#abort?.abort();
  }

  async #read(): Promise<void> {
    const abort = new AbortController();
    this.#abort = abort;
    const timeout = setTimeout(() => abort.abort(), READ_TIMEOUT_MS);
    try {
      try {
        this.view = parseClusterHealth(await fetchHealth(abort.signal));
      } catch {
        // the hub is unreachable: the stream's status says so; the last view stays
      }
      if (this.view === null) {
        this.events = { state: 'off' };
      } else {
        if (this.events.state === 'off') this.events = { state: 'pending' };
        try {
          this.events = { state: 'ok', rows: parseClusterEvents(await fetchClusterEvents(EVENTS_PAGE_MAX, abort.signal)) };
        } catch (e) {
          if (this.#stopped) return;
          this.events = { state: 'unavailable', reason: e instanceof ApiError ? e.display : 'no answer' };
        }
      }
    } finally {
      clearTimeout(timeout);
      if (!this.#stopped) this.#timer = setTimeout(() => void this.#read(), CLUSTER_POLL_MS);
    }
  }
}
