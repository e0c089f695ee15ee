/**
 * The hub's dashboard stream as reactive state: one EventSource on `/api/dashboard/stream`, each message applied by
 * the pure transitions of model.ts, and a clock that makes staleness visible. EventSource reconnects by itself after
 * a dropped connection; when it gives up (an HTTP error such as 503 TOO_MANY_STREAMS closes it for good) or a
 * connection that still looks open stops delivering messages (stream-watchdog.ts decides), the page opens a new one.
 * Each new connection starts with a snapshot, which replaces the state.
 *
 *   const live = new LiveDashboard();
 *   live.start();
 *   live.state.models;   // ModelStatus[]
 *   live.stale;          // the page's time of the last tick when quiet for STALE_AFTER_MS, else null
 */
import type { StreamMessages } from '../../../protocol/dashboard.ts';
import { applyCoverage, applyEvent, applySnapshot, applyTick, type DashboardState, emptyState, staleSince } from './model.ts';
import { streamVerdict } from './stream-watchdog.ts';

export const STREAM_URL = '/api/dashboard/stream';
/** How often the page's clock (staleness, "… ago") advances. */
const CLOCK_MS = 500;
/** Wait before reopening a stream the browser closed for good. */
const REOPEN_DELAY_MS = 2000;

export type LiveConnectionState = 'connecting' | 'open' | 'reconnecting';

export class LiveDashboard {
  state: DashboardState = $state.raw(emptyState());
  now: number = $state(0);
  connection: LiveConnectionState = $state('connecting');
  /** Streams opened so far (1 + reconnects the page made itself). */
  opened = $state(0);

  readonly stale = $derived(staleSince(this.state, this.now));

  #es: EventSource | null = null;
  #clockTimer: ReturnType<typeof setInterval> | undefined;
  #reopenTimer: ReturnType<typeof setTimeout> | undefined;
  /** The page's clock when the current connection opened or last delivered a message. */
  #lastSignAt = 0;
  /** No message yet on the current connection (its snapshot has not arrived whole). */
  #awaitingSnapshot = true;
  /** Connections in a row that the watchdog replaced before their snapshot arrived. */
  #snapshotMisses = 0;
  readonly #url: string;
  readonly #clock: () => number;

  constructor(url = STREAM_URL, clock: () => number = () => Date.now()) {
    this.#url = url;
    this.#clock = clock;
    this.now = clock();
  }

  start(): void {
    this.#open();
    this.#clockTimer = setInterval(() => this.#onClock(), CLOCK_MS);
  }

  destroy(): void {
    clearInterval(this.#clockTimer);
    clearTimeout(this.#reopenTimer);
    this.#es?.close();
    this.#es = null;
  }

  #open(): void {
    this.#es?.close();
    const es = new EventSource(this.#url);
    this.#es = es;
    this.#lastSignAt = this.#clock();
    this.#awaitingSnapshot = true;
    this.opened++;
    this.connection = this.state.loaded ? 'reconnecting' : 'connecting';
    const on = <K extends keyof StreamMessages>(name: K, apply: (m: StreamMessages[K]) => void): void => {
      es.addEventListener(name, (e) => {
        if (this.#es !== es) return;
        // Any message, even one that does not parse, proves the connection delivers.
        this.#lastSignAt = this.#clock();
        this.#awaitingSnapshot = false;
        this.#snapshotMisses = 0;
        let msg: StreamMessages[K];
        try {
          msg = JSON.parse((e as MessageEvent<string>).data) as StreamMessages[K];
        } catch {
          return; // a garbled message: the next tick or snapshot repairs the state
        }
        apply(msg);
      });
    };
    on('snapshot', (m) => {
      this.state = applySnapshot(this.state, m, this.#clock());
      this.connection = 'open';
    });
    on('tick', (m) => {
      this.state = applyTick(this.state, m, this.#clock());
    });
    on('event', (m) => {
      this.state = applyEvent(this.state, m);
    });
    on('coverage', (m) => {
      this.state = applyCoverage(this.state, m);
    });
    // Headers arrived (the first time, or after the browser reconnected by itself): the hub's snapshot comes next.
    es.onopen = () => {
      if (this.#es !== es) return;
      this.#lastSignAt = this.#clock();
      this.#awaitingSnapshot = true;
    };
    es.onerror = () => {
      if (this.#es !== es) return;
      this.connection = 'reconnecting';
      // CONNECTING: the browser retries by itself. CLOSED: it gave up (an HTTP error); the page retries.
      if (es.readyState === EventSource.CLOSED) this.#reopenSoon();
    };
  }

  #reopenSoon(): void {
    clearTimeout(this.#reopenTimer);
    this.#reopenTimer = setTimeout(() => this.#open(), REOPEN_DELAY_MS);
  }

  #onClock(): void {
    this.now = this.#clock();
    if (!this.#es) return;
    const verdict = streamVerdict({
      open: this.#es.readyState === EventSource.OPEN,
      quietMs: this.now - this.#lastSignAt,
      awaitingSnapshot: this.#awaitingSnapshot,
      snapshotMisses: this.#snapshotMisses,
    });
    if (!verdict.reopen) return;
    if (this.#awaitingSnapshot) this.#snapshotMisses++;
    this.#open();
  }
}
