/**
 * When the page gives up on a dashboard stream that the browser still thinks open (a proxy holding a dead
 * connection) and opens a new one: a pure decision over what live.svelte.ts observed, table-tested in
 * test/unit/dashboard-page-stream.test.ts.
 *
 * Every message (snapshot, tick, event, coverage) proves the connection delivers, so each one restarts the quiet
 * clock; the hub's `: ping` keep-alive is an SSE comment, which EventSource never surfaces, so it cannot. A snapshot
 * is one message: on a slow link it can take longer than REOPEN_AFTER_MS to arrive whole, and nothing at all is
 * observable while it does. So until a connection's first message the page waits longer, and twice as long again
 * each time such a wait ran out, so a slow but working link gets its snapshot in the end instead of looping.
 *
 *   streamVerdict({ open: true, quietMs: 20_000, awaitingSnapshot: false, snapshotMisses: 0 })
 *   // → { reopen: true, why: 'no message for 20000 ms …' }
 */
import { STALE_AFTER_MS } from '../../../protocol/dashboard.ts';

/** A connection that delivered a message and then went quiet this long is replaced. */
export const REOPEN_AFTER_MS = 4 * STALE_AFTER_MS;
/** How long a new connection may take to deliver its first message (the snapshot, the stream's largest). */
export const SNAPSHOT_WAIT_MS = 2 * REOPEN_AFTER_MS;
/** The longest the page waits for a connection's first message, however many waits ran out before. */
export const SNAPSHOT_WAIT_MAX_MS = 5 * 60_000;

export interface StreamHealth {
  /** The EventSource is OPEN (its response headers arrived). */
  open: boolean;
  /** Since the connection opened or its last message, whichever is later. */
  quietMs: number;
  /** No message yet on this connection (the hub's first is always the snapshot). */
  awaitingSnapshot: boolean;
  /** Connections in a row that the page replaced before their first message. */
  snapshotMisses: number;
}

export interface StreamVerdict {
  reopen: boolean;
  why: string;
}

/** How long a connection may take to deliver its first message: doubling with each miss, capped. */
export function snapshotWaitMs(snapshotMisses: number): number {
  const doublings = Math.min(Math.max(0, Math.floor(snapshotMisses)), 16);
  return Math.min(SNAPSHOT_WAIT_MS * 2 ** doublings, SNAPSHOT_WAIT_MAX_MS);
}

export function streamVerdict(h: StreamHealth): StreamVerdict {
  if (!h.open) return { reopen: false, why: 'not open: the browser is connecting, or the error handler reopens a closed stream' };
  if (h.awaitingSnapshot) {
    const wait = snapshotWaitMs(h.snapshotMisses);
    if (h.quietMs > wait) return { reopen: true, why: `no snapshot ${h.quietMs} ms after the connection opened (waited ${wait} ms)` };
    return { reopen: false, why: `the snapshot may still be arriving (waiting up to ${wait} ms)` };
  }
  if (h.quietMs > REOPEN_AFTER_MS) return { reopen: true, why: `no message for ${h.quietMs} ms on an open connection` };
  return { reopen: false, why: 'a message arrived recently' };
}
