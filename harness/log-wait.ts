/**
 * Bounded waits on a child process's log (a coordinator, a hub, a headless volunteer).
 *
 * Why: a child writes its log asynchronously, through a pipe, so a test that reads the log once right after the event it
 * caused can read it before the line is there. That race cost a landing once (dispatch-audit "v1: an audit flag on a
 * served pair", issue 23): the assertion saw an empty log, and the test passed alone. Every assertion that a line IS in
 * a log waits for it here, bounded; an assertion that a line is NOT there reads the log once, as before (no wait can
 * prove an absence).
 */

/** How long a test waits for a log line before it fails: far above a pipe's latency, far below a test's timeout. */
export const LOG_WAIT_MS = 10_000;

/** What a log must show: a pattern tested against the whole log, or a predicate over it. */
export type LogCondition = RegExp | ((log: string) => boolean);

/** Whether `log` shows `want` now. Pure; a global/sticky RegExp is tested from its start each time. */
export function logShows(log: string, want: LogCondition): boolean {
  if (typeof want === 'function') return want(log);
  want.lastIndex = 0;
  return want.test(log);
}

/** The lines of `log` that match `pattern` (the fallback lines, the connect lines), in order. Pure. */
export function logLines(log: string, pattern: RegExp | string): string[] {
  return log.split('\n').filter((l) => (typeof pattern === 'string' ? l.includes(pattern) : logShows(l, pattern)));
}

/**
 * Polls `readLog` every 50 ms until it shows `want`, then returns that log; after `timeoutMs` throws an error naming
 * `what` with the log's last 4,000 characters, so the failure says what the child did write.
 *
 * @example
 *   const log = await waitForLog(server.log, /protocol version 2/, LOG_WAIT_MS, 'the agreed version');
 */
export async function waitForLog(
  readLog: () => string,
  want: LogCondition,
  timeoutMs: number = LOG_WAIT_MS,
  what: string = String(want),
): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const log = readLog();
    if (logShows(log, want)) return log;
    if (Date.now() >= deadline) {
      throw new Error(`the log did not show ${what} within ${timeoutMs} ms; it ends:\n${log.slice(-4000) || '(empty)'}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
