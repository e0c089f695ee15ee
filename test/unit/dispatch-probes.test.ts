/**
 * Protocol v2's shadow and probation planning (hub/dispatch/probes.ts) as tables: when a probe in shadow is due and
 * the next one booked, where probes and probation workers stand in the plan, how long the layer stays quiet.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_CLAIMS } from '../../hub/dispatch/claims.ts';
import { newLatencyModel, observeRoundTrip } from '../../hub/dispatch/plan.ts';
import {
  PROBATION_FIRST_MS,
  type ProbeStats,
  declineQuietMs,
  keepWarmDue,
  probationWorker,
  provenWarm,
  warmFollowUp,
  quietUntilProbeMs,
  shadowProbeBooking,
  shadowProbeWorker,
} from '../../hub/dispatch/probes.ts';

const NOW = 1_000_000;
const cfg = DEFAULT_CLAIMS; // probePairs 8, shadowProbeEveryMs 2000, shadowProbeDuty 0.05

function st(o: Partial<Omit<ProbeStats, 'latency'>> & { ms?: number; warm?: number } = {}): ProbeStats {
  const latency = newLatencyModel();
  // `warm` warm samples of a probe's size at `ms` (one when only `ms` is given)
  if (o.ms !== undefined) for (let i = 0; i < (o.warm ?? 1); i++) observeRoundTrip(latency, cfg.probePairs, o.ms);
  return {
    latency,
    outstanding: o.outstanding ?? 0,
    consecutiveMisses: o.consecutiveMisses ?? 0,
    shadowStreak: o.shadowStreak ?? 0,
    nextShadowProbeMs: o.nextShadowProbeMs ?? null,
    servedItems: o.servedItems ?? 0,
    misses: o.misses ?? 0,
    lastClaimedServeMs: o.lastClaimedServeMs ?? null,
    nextKeepWarmMs: o.nextKeepWarmMs ?? null,
  };
}

test('shadowProbeBooking: table', () => {
  const rows: Array<{ name: string; st: ProbeStats; want: number | null }> = [
    { name: 'never probed, unmeasured: base gap', st: st(), want: NOW + 2000 },
    { name: 'work outstanding: not now', st: st({ outstanding: 1 }), want: null },
    { name: 'not due yet', st: st({ nextShadowProbeMs: NOW + 1 }), want: null },
    { name: 'due exactly now', st: st({ nextShadowProbeMs: NOW }), want: NOW + 2000 },
    { name: 'backoff: misses and streak double the gap', st: st({ consecutiveMisses: 1, shadowStreak: 1 }), want: NOW + 8000 },
    { name: 'backoff capped at 2^5', st: st({ shadowStreak: 9 }), want: NOW + 64_000 },
    { name: 'slow probe: at least 20 × its round trip', st: st({ ms: 500 }), want: NOW + 10_000 },
    // thin lines (fewer than warmFollowUpUntil 8 warm samples) whose probes are quick fill by their follow-ups
    { name: 'thin line, quick probe: the streak does not back off', st: st({ ms: 20, warm: 4, shadowStreak: 3 }), want: NOW + 2000 },
    {
      name: 'thin line, quick probe: misses still do',
      st: st({ ms: 20, warm: 4, shadowStreak: 3, consecutiveMisses: 1 }),
      want: NOW + 4000,
    },
    { name: 'well-measured line (8 warm): the streak backs off', st: st({ ms: 20, warm: 8, shadowStreak: 3 }), want: NOW + 16_000 },
    { name: 'thin line, probe past warmFollowUpMaxMs: backs off', st: st({ ms: 300, warm: 4, shadowStreak: 3 }), want: NOW + 16_000 },
  ];
  for (const r of rows) assert.equal(shadowProbeBooking(r.st, NOW, cfg), r.want, r.name);
});

test('shadowProbeWorker and probationWorker: table', () => {
  const link = { begin: 2, end: 6 };
  assert.deepEqual(shadowProbeWorker(link, 3, cfg), {
    begin: 2,
    end: 6,
    queueMs: Number.MAX_SAFE_INTEGER,
    overheadMs: null,
    perPairMs: 0,
    cap: 3,
  });
  assert.equal(shadowProbeWorker(link, 100, cfg).cap, cfg.probePairs, 'a probe takes at most probePairs');
  const rows: Array<{ name: string; st: ProbeStats; covered: number; nUsed: number; cap: number | null; queueMs?: number }> = [
    { name: 'outstanding: not planned', st: st({ outstanding: 1 }), covered: 20, nUsed: 8, cap: null },
    { name: 'at least probePairs', st: st(), covered: 20, nUsed: 4, cap: 8, queueMs: PROBATION_FIRST_MS },
    { name: 'one token of pairs', st: st(), covered: 20, nUsed: 12, cap: 12 },
    { name: 'no more than it covers', st: st(), covered: 3, nUsed: 12, cap: 3 },
    {
      name: 'least-tried first',
      st: st({ servedItems: 2, misses: 1 }),
      covered: 20,
      nUsed: 8,
      cap: 8,
      queueMs: PROBATION_FIRST_MS + 3,
    },
  ];
  for (const r of rows) {
    const w = probationWorker(link, r.st, r.covered, r.nUsed, cfg);
    assert.equal(w?.cap ?? null, r.cap, r.name);
    if (r.queueMs !== undefined) assert.equal(w?.queueMs, r.queueMs, `${r.name}: queue`);
  }
});

test('quietUntilProbeMs: table', () => {
  const rows: Array<{ name: string; stats: ProbeStats[]; want: number }> = [
    { name: 'nobody: the whole window', stats: [], want: 1000 },
    { name: 'all outstanding: the whole window', stats: [st({ outstanding: 1, nextShadowProbeMs: NOW })], want: 1000 },
    { name: 'one due now', stats: [st({ nextShadowProbeMs: NOW + 5000 }), st()], want: 0 },
    { name: 'the soonest, floored', stats: [st({ nextShadowProbeMs: NOW + 300.7 }), st({ nextShadowProbeMs: NOW + 600 })], want: 300 },
    { name: 'capped at the window', stats: [st({ nextShadowProbeMs: NOW + 5000 })], want: 1000 },
    { name: 'overdue: 0', stats: [st({ nextShadowProbeMs: NOW - 50 })], want: 0 },
  ];
  for (const r of rows) assert.equal(quietUntilProbeMs(r.stats, NOW, 1000), r.want, r.name);
});

test('keep-warm: proven warm (warm samples, a claimed item answered lately) and due at most every keepWarmEveryMs', () => {
  const warm = (o: Partial<Omit<ProbeStats, 'latency'>>, warmSamples = true): ProbeStats => {
    const s = st({ ms: 3, ...o });
    if (!warmSamples) {
      const latency = newLatencyModel();
      observeRoundTrip(latency, cfg.probePairs, 3, 0, true);
      return { ...s, latency };
    }
    return s;
  };
  const rows: Array<{ name: string; st: ProbeStats; proven: boolean; due: boolean }> = [
    { name: 'never claimed', st: warm({}), proven: false, due: false },
    { name: 'claimed just now, never kept warm', st: warm({ lastClaimedServeMs: NOW }), proven: true, due: true },
    { name: 'kept warm, not due yet', st: warm({ lastClaimedServeMs: NOW - 100, nextKeepWarmMs: NOW + 1 }), proven: true, due: false },
    { name: 'due exactly now', st: warm({ lastClaimedServeMs: NOW - 100, nextKeepWarmMs: NOW }), proven: true, due: true },
    { name: 'claimed too long ago', st: warm({ lastClaimedServeMs: NOW - cfg.keepWarmForMs - 1 }), proven: false, due: false },
    { name: 'only cold samples (probes)', st: warm({ lastClaimedServeMs: NOW }, false), proven: false, due: false },
  ];
  for (const r of rows) {
    assert.equal(provenWarm(r.st, NOW, cfg), r.proven, `${r.name}: proven`);
    assert.equal(keepWarmDue(r.st, NOW, cfg), r.due, `${r.name}: due`);
  }
  // Quiet: a proven worker declined leaves the layer quiet only until its next keep-warm claim is due.
  const declined = warm({ lastClaimedServeMs: NOW - 100, nextKeepWarmMs: NOW + 180, nextShadowProbeMs: NOW + 5000 });
  assert.equal(quietUntilProbeMs([declined], NOW, 1000, cfg), 180);
  assert.equal(quietUntilProbeMs([declined], NOW, 1000), 1000, 'without the claim config: probes only');
  const stale = warm({ lastClaimedServeMs: NOW - cfg.keepWarmForMs - 1, nextKeepWarmMs: NOW, nextShadowProbeMs: NOW + 5000 });
  assert.equal(quietUntilProbeMs([stale], NOW, 1000, cfg), 1000, 'no longer proven: the whole window');
});

test('warmFollowUp: a quick probe of a worker measured only cold or on few warm samples is sent again at once; a slow one, or a well-measured worker, not', () => {
  const cold = newLatencyModel();
  observeRoundTrip(cold, 8, 19, 8.2, true);
  const young = newLatencyModel();
  observeRoundTrip(young, 8, 3.4, 2.4, false);
  const warm = newLatencyModel();
  for (let i = 0; i < cfg.warmFollowUpUntil; i++) observeRoundTrip(warm, 8, 3.4, 2.4, false);
  const rows: Array<{ name: string; latency: ReturnType<typeof newLatencyModel>; ms: number; pairs?: number; want: boolean }> = [
    { name: 'measured only cold, probe answered in 19 ms', latency: cold, ms: 19, want: true },
    { name: 'at the bound', latency: cold, ms: cfg.warmFollowUpMaxMs, want: true },
    { name: "a software adapter's 2 s probe", latency: cold, ms: 2_000, want: false },
    { name: 'one warm sample (maybe from a hiccup)', latency: young, ms: 19, want: true },
    { name: `already has ${cfg.warmFollowUpUntil} warm samples`, latency: warm, ms: 19, want: false },
    { name: `${cfg.warmFollowUpUntil} warm samples, and this answer beats the line (stale)`, latency: warm, ms: 2, pairs: 8, want: true },
    {
      name: `${cfg.warmFollowUpUntil} warm samples, and this answer is as the line expects`,
      latency: warm,
      ms: 3.4,
      pairs: 8,
      want: false,
    },
    { name: 'never measured', latency: newLatencyModel(), ms: 19, want: false },
  ];
  for (const r of rows) assert.equal(warmFollowUp({ latency: r.latency }, r.ms, cfg, r.pairs), r.want, r.name);
});

test('declineQuietMs: short after one decline of a serving worker, doubling while the declines go on in a row, capped', () => {
  // cfg.declineQuietMs 4; the cap is what the other rules would give (at most keepWarmEveryMs for a proven worker).
  const rows: Array<{ name: string; streak: number; cap: number; want: number }> = [
    { name: 'the first decline: a few evaluations', streak: 1, cap: 250, want: 4 },
    { name: 'the second in a row', streak: 2, cap: 250, want: 8 },
    { name: 'the sixth', streak: 6, cap: 250, want: 128 },
    { name: 'the seventh reaches the cap', streak: 7, cap: 250, want: 250 },
    { name: 'a long run stays at the cap (no overflow)', streak: 10_000, cap: 250, want: 250 },
    { name: 'a smaller cap wins (a probe due sooner)', streak: 3, cap: 10, want: 10 },
    { name: 'a cap of 0 (ask at once) stays 0', streak: 1, cap: 0, want: 0 },
    { name: 'no streak: the cap as it is', streak: 0, cap: 250, want: 250 },
  ];
  for (const r of rows) assert.equal(declineQuietMs(r.streak, r.cap, cfg), r.want, r.name);
  assert.equal(declineQuietMs(3, 250, { ...cfg, declineQuietMs: 0 }), 250, 'switched off: the cap');
});
