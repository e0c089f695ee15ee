/**
 * The coordinator's own account of a dispatched layer's time (LINKCPP_EXPERT_DISPATCH_STATS_MS, coordinator/README.md):
 * summed counters logged as `expert-dispatch: stats …`, which bench:elastic reads to split B's coordinator time into
 * the exchange, its own part of the claimed layers and the wait for the RESULT. Against the real linkcpp-server and the
 * test dispatcher (protocol v2, `half`: every other pair claimed and served):
 *  - the counts of the last line equal the dispatcher's record of the same first `exchanges` requests (one slot, so
 *    they are in order), and each time sum is positive;
 *  - without the variable no such line is written.
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GGMLType } from '../../gguf/quant-types.ts';
import { completeGreedy, startServer } from '../../harness/linkcpp.ts';
import { logLines, waitForLog } from '../../harness/log-wait.ts';
import { testModel } from '../../harness/models.ts';
import { TestDispatcher } from '../../harness/test-dispatcher.ts';
import { parseCoordinatorStats } from '../../bench/elastic/coordinator-stats.ts';

const dir = await mkdtemp(join(tmpdir(), 'es-xdstats-'));
after(() => rm(dir, { recursive: true, force: true }));

const m = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 256, ff: 256, nExpert: 8, nExpertUsed: 2, type: GGMLType.Q4_K, seed: 5 });

/** A 16-token completion through a `half` test dispatcher; `waitFor`: a log line to wait for (bounded) before the stop. */
async function run(env: Record<string, string>, sockName: string, waitFor?: RegExp, resultDelayMs = 0) {
  const sock = join(dir, sockName);
  const d = await TestDispatcher.start(sock, m.path, 'half');
  d.resultDelayMs = resultDelayMs;
  const server = await startServer({ model: m.path, env, args: ['--expert-dispatch', sock, '--expert-dispatch-deadline-ms', '5000'] });
  try {
    await d.waitForHello();
    const c = await completeGreedy(server.url, 'The swarm serves', 16, m.ban);
    assert.equal(c.tokens.length, 16);
    const log = waitFor ? await waitForLog(server.log, waitFor) : server.log();
    return { log, records: [...d.stats.log] };
  } finally {
    await server.stop();
    await d.stop();
  }
}

const STATS = /expert-dispatch: stats /;

test('the stats line counts what the dispatcher saw, and sums positive times', async () => {
  const { log, records } = await run({ LINKCPP_EXPERT_DISPATCH_STATS_MS: '1' }, 'on.sock', STATS);
  const lines = logLines(log, STATS);
  const last = parseCoordinatorStats(lines.at(-1) as string);
  assert.ok(last, `a stats line parses: ${lines.at(-1)}`);
  assert.ok(last.exchanges > 0 && last.exchanges <= records.length, `${last.exchanges} exchanges of ${records.length} requests`);
  const seen = records.slice(0, last.exchanges);
  assert.ok(seen.every((r) => r.version === 2));
  const claimed = seen.filter((r) => r.claimed > 0);
  assert.deepEqual(
    { claimed: last.claimed, pairs: last.pairs, pairsClaimed: last.pairsClaimed, pairsServed: last.pairsServed },
    {
      claimed: claimed.length,
      pairs: claimed.reduce((s, r) => s + r.nTokens * r.nUsed, 0),
      pairsClaimed: claimed.reduce((s, r) => s + r.claimed, 0),
      pairsServed: claimed.reduce((s, r) => s + r.served, 0),
    },
  );
  assert.ok(last.claimed > 0 && last.pairsClaimed < last.pairs, "'half' claims some pairs of each request, not all");
  assert.ok(last.exchangeUs > 0 && last.localUs > 0 && last.waitUs > 0, `times: ${lines.at(-1)}`);
  // the waits' shape: parts of the waits summed above
  assert.ok(last.waitsLong <= last.claimed, `waits past the target: ${last.waitsLong} of ${last.claimed}`);
  assert.ok(last.waitLongUs <= last.waitUs && last.waitPastLocalUs <= last.waitUs, `wait parts: ${lines.at(-1)}`);
});

test('RESULTs held back 20 ms: every claimed exchange waits past the target, and past its claimed pairs’ local time', async () => {
  const HELD_MS = 20;
  const { log } = await run({ LINKCPP_EXPERT_DISPATCH_STATS_MS: '1' }, 'slow.sock', STATS, HELD_MS);
  const line = logLines(log, STATS).at(-1) as string;
  const last = parseCoordinatorStats(line);
  assert.ok(last && last.claimed > 0, `a stats line with claimed exchanges: ${line}`);
  assert.equal(last.waitsLong, last.claimed, `every claimed exchange waited past 150 µs: ${line}`);
  // each wait is at least the hold less the coordinator's own part (a tiny model: well under a millisecond)
  assert.ok(last.waitLongUs >= last.waitsLong * (HELD_MS - 5) * 1000, `waits of ≥ ${HELD_MS - 5} ms each: ${line}`);
  assert.ok(last.waitLongUs <= last.waitUs, line);
  // the claimed pairs' local time is microseconds here: nearly the whole wait lies past it
  assert.ok(last.waitPastLocalUs > 0.9 * last.waitUs && last.waitPastLocalUs <= last.waitUs, `past the local time: ${line}`);
});

test('without LINKCPP_EXPERT_DISPATCH_STATS_MS the coordinator writes no stats line', async () => {
  const { log, records } = await run({}, 'off.sock');
  assert.ok(records.length > 0, 'the dispatcher was asked');
  assert.deepEqual(logLines(log, /expert-dispatch: stats /), []);
});
