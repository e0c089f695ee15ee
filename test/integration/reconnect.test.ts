/**
 * Volunteers reconnect to a restarted hub with jittered backoff (issue 14): 200 real volunteer clients on real
 * WebSockets (harness/reconnect-sim.ts, the code `npm run sim:reconnect` runs with 10,000) hold a hub's
 * channel; the hub crashes and a new one starts on the same port and state. Every volunteer is back, nobody dials
 * before the first retry's window opens (500 ms after the drop), the fullest 100 ms at either end holds at most half
 * of them, and at most a quarter redial in step with a fixed 500 ms delay; the control, every volunteer redialling
 * after a fixed 500 ms, has more than half in step (all of them, by Node's timers), so the check tells the two apart.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FIRST_RETRY_WINDOW_MS, runReconnectSim, spread } from '../../harness/reconnect-sim.ts';

const N = 200;

test(`${N} volunteers after a hub crash: all back, none before 500 ms, spread over the window (the control is not)`, {
  timeout: 60_000,
}, async () => {
  const r = await runReconnectSim({ volunteers: N, policies: ['jittered', 'fixed'], seed: 14, timeoutMs: 20_000 });
  const [jittered, fixed] = r.phases;
  assert.ok(jittered && fixed);
  for (const p of r.phases) {
    assert.equal(p.reconnected, N, `${p.policy}: every volunteer completed its hello at the new hub`);
    assert.notEqual(p.allAtMs, null, `${p.policy}: all back`);
    assert.ok(p.listenAtMs < FIRST_RETRY_WINDOW_MS[0], `${p.policy}: the new hub listened after ${p.listenAtMs} ms, not before the window`);
    const d = spread(p.dials, FIRST_RETRY_WINDOW_MS);
    const u = spread(p.upgrades, FIRST_RETRY_WINDOW_MS);
    assert.equal(
      d.before,
      0,
      `${p.policy}: a volunteer dialled ${d.firstMs.toFixed(0)} ms after the crash, before the first retry's window`,
    );
    assert.equal(u.before, 0, `${p.policy}: an upgrade reached the new hub ${u.firstMs.toFixed(0)} ms after the crash`);
    assert.deepEqual(p.retries, {}, `${p.policy}: no volunteer was refused on the way back`);
  }
  // The fullest 100 ms (aligned to the crash) at both ends: an even spread puts N / 5 in each; all N in one is a
  // stampede. Timed on a busy 2-core machine the control's burst is smeared by how fast the volunteers' process can
  // dial (200 dials take 50–300 ms there), so it is told apart by redialling in step: dialling in the same
  // event-loop turn as a 500 ms timer set at the drop, which the control does to a volunteer whatever the machine's
  // speed and a jittered volunteer only when its draw fell within that turn's lag.
  const bound = N / 2;
  for (const [what, times] of [
    ['dials', jittered.dials],
    ['upgrades at the new hub', jittered.upgrades],
  ] as const) {
    const s = spread(times, FIRST_RETRY_WINDOW_MS);
    assert.ok(s.peak <= bound, `jittered: ${s.peak} ${what} in one 100 ms (at ${s.peakAtMs} ms), over ${bound}`);
  }
  assert.ok(
    jittered.inStep <= N / 4,
    `jittered: ${jittered.inStep} volunteers redialled in step (most in one turn ${jittered.largestBurst})`,
  );
  assert.ok(fixed.inStep > N / 2, `the control had only ${fixed.inStep} volunteers redial in step: the check would not catch a stampede`);
});
