/**
 * The dashboard page's stream watchdog (web/src/dashboard/stream-watchdog.ts): when a connection the browser still
 * thinks open is replaced. Every message restarts the quiet clock; a connection still waiting for its snapshot gets
 * a longer wait that doubles with each miss, so a slow link is not reopened forever (the regression: a snapshot
 * taking > 14 s to download was cut off at 14 s, every time).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { STALE_AFTER_MS } from '../../protocol/dashboard.ts';
import {
  REOPEN_AFTER_MS,
  SNAPSHOT_WAIT_MAX_MS,
  SNAPSHOT_WAIT_MS,
  type StreamHealth,
  snapshotWaitMs,
  streamVerdict,
} from '../../web/src/dashboard/stream-watchdog.ts';

test('the watchdog: a table of connection states and verdicts', () => {
  const live: StreamHealth = { open: true, quietMs: 0, awaitingSnapshot: false, snapshotMisses: 0 };
  const cases: Array<[string, Partial<StreamHealth>, boolean]> = [
    ['a message just arrived', {}, false],
    ['quiet, but not for long', { quietMs: REOPEN_AFTER_MS }, false],
    ['quiet past the limit after messages: a proxy holds a dead connection', { quietMs: REOPEN_AFTER_MS + 1 }, true],
    ['the browser is reconnecting by itself: leave it', { open: false, quietMs: 10 * REOPEN_AFTER_MS }, false],
    ['closed for good: the error handler reopens it, not the watchdog', { open: false, quietMs: SNAPSHOT_WAIT_MAX_MS * 2 }, false],
    ['the snapshot may still be downloading', { awaitingSnapshot: true, quietMs: REOPEN_AFTER_MS + 1 }, false],
    ['no snapshot after the first wait', { awaitingSnapshot: true, quietMs: 2 * REOPEN_AFTER_MS + 1 }, true],
    ['after one miss the wait doubles', { awaitingSnapshot: true, snapshotMisses: 1, quietMs: 2 * REOPEN_AFTER_MS + 1 }, false],
    ['after one miss, past the doubled wait', { awaitingSnapshot: true, snapshotMisses: 1, quietMs: 4 * REOPEN_AFTER_MS + 1 }, true],
    ['many misses: capped', { awaitingSnapshot: true, snapshotMisses: 50, quietMs: SNAPSHOT_WAIT_MAX_MS + 1 }, true],
    ['many misses, under the cap', { awaitingSnapshot: true, snapshotMisses: 50, quietMs: SNAPSHOT_WAIT_MAX_MS }, false],
  ];
  for (const [why, over, reopen] of cases) {
    const v = streamVerdict({ ...live, ...over });
    assert.equal(v.reopen, reopen, `${why}: ${v.why}`);
    assert.ok(v.why.length > 0, 'every verdict says why');
  }
  assert.ok(REOPEN_AFTER_MS > STALE_AFTER_MS, 'the page says "stale" before it gives up on the connection');
});

test('the wait for a snapshot: 2 × the quiet limit, doubling per miss, capped', () => {
  assert.equal(snapshotWaitMs(0), SNAPSHOT_WAIT_MS);
  assert.equal(SNAPSHOT_WAIT_MS, 2 * REOPEN_AFTER_MS);
  assert.equal(snapshotWaitMs(1), 4 * REOPEN_AFTER_MS);
  assert.equal(snapshotWaitMs(2), 8 * REOPEN_AFTER_MS);
  assert.equal(snapshotWaitMs(1000), SNAPSHOT_WAIT_MAX_MS);
  assert.equal(snapshotWaitMs(-1), snapshotWaitMs(0), 'a nonsense count is no miss');
  for (let m = 0; m < 40; m++) assert.ok(snapshotWaitMs(m + 1) >= snapshotWaitMs(m), 'never shrinks');
});

/**
 * A page on a link where each connection's snapshot takes `downloadMs` to arrive whole (nothing is observable
 * before), its clock stepping every 500 ms as live.svelte.ts's does: the connections it opens before one delivers.
 */
function connectionsUntilSnapshot(downloadMs: number, verdict = streamVerdict): number {
  let misses = 0;
  for (let connections = 1; connections <= 50; connections++) {
    let delivered = false;
    for (let quiet = 0; ; quiet += 500) {
      if (quiet >= downloadMs) {
        delivered = true;
        break;
      }
      if (verdict({ open: true, quietMs: quiet, awaitingSnapshot: true, snapshotMisses: misses }).reopen) break;
    }
    if (delivered) return connections;
    misses++;
  }
  return Number.POSITIVE_INFINITY;
}

test('a slow link gets its snapshot in the end (regression: it was reopened every 14 s, forever)', () => {
  assert.equal(connectionsUntilSnapshot(2_000), 1, 'a fast link: the first connection');
  assert.equal(connectionsUntilSnapshot(REOPEN_AFTER_MS + 5_000), 1, 'longer than the quiet limit: still the first');
  assert.equal(connectionsUntilSnapshot(60_000), 3, 'waits of 28 s and 56 s ran out; the third connection waits 112 s');
  assert.equal(connectionsUntilSnapshot(4 * 60_000), 5);
  assert.ok(connectionsUntilSnapshot(SNAPSHOT_WAIT_MAX_MS - 1_000) < 10);
  // The old rule (reopen whenever quiet past the limit, snapshot or not) never lets a 20 s download finish.
  const old = (h: StreamHealth) => ({ reopen: h.open && h.quietMs > REOPEN_AFTER_MS, why: 'old rule' });
  assert.equal(connectionsUntilSnapshot(REOPEN_AFTER_MS + 5_000, old), Number.POSITIVE_INFINITY);
});
