/** The source choice for a slice's chunks (volunteer/source-choice.ts): when speed may win over sparing the hub. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_SOURCE_POLICY, hubIdle, hubMayWin, nextMsPerByte, peerOutpaced, takeoverAfterMs } from '../../volunteer/source-choice.ts';
import { formatShardLoad, parseShardLoad } from '../../protocol/chunk-list.ts';

const MIB = 1024 * 1024;
// ms per byte: 1 MiB/s ≈ 0.00095 ms/B
const perByte = (mibPerS: number): number => 1000 / (mibPerS * MIB);

test('hubMayWin: only an idle hub that has been measured', () => {
  const cases: Array<[string, number | null, number | null, boolean]> = [
    ['idle, measured', 0.02, perByte(10), true],
    ['just under idle', 0.24, perByte(10), true],
    ['at the bound: busy', 0.25, perByte(10), false],
    ['busy', 0.9, perByte(10), false],
    ['no hint (an older hub)', null, perByte(10), false],
    ['idle, not measured yet', 0.02, null, false],
    ['a zero rate is no measurement', 0.02, 0, false],
  ];
  for (const [name, load, msPerByte, want] of cases) assert.equal(hubMayWin({ load, msPerByte }), want, name);
  // Idle is the hint alone (the swarm's probe chunk goes to an idle hub not measured yet).
  assert.deepEqual(
    [0.02, 0.24, 0.25, null].map((load) => hubIdle({ load })),
    [true, true, false, false],
  );
});

test('peerOutpaced: a peer more than speedRatio times slower than an idle hub, when that costs seconds', () => {
  const hub = { load: 0.02, msPerByte: perByte(10) };
  const rest = 100 * MIB; // a real layer slice's remainder: 100 MiB
  const cases: Array<[string, number | null, { load: number | null; msPerByte: number | null }, number, boolean]> = [
    ['as fast as the hub', perByte(10), hub, rest, false],
    ['2× slower: at the ratio, kept', perByte(5), hub, rest, false],
    ['4× slower (mobile through TURN): 30 s saved', perByte(2.5), hub, rest, true],
    ['4× slower, 3 MiB left: 0.9 s saved, kept', perByte(2.5), hub, 3 * MIB, false],
    ['40× slower, 3 MiB left: 11.7 s saved', perByte(0.25), hub, 3 * MIB, true],
    ['faster than the hub', perByte(40), hub, rest, false],
    ['not measured yet', null, hub, rest, false],
    ['4× slower, hub busy: kept (sparing the hub)', perByte(2.5), { load: 0.5, msPerByte: perByte(10) }, rest, false],
    ['4× slower, older hub: kept', perByte(2.5), { load: null, msPerByte: perByte(10) }, rest, false],
  ];
  for (const [name, peer, h, remaining, want] of cases) assert.equal(peerOutpaced(peer, h, remaining), want, name);
});

test('takeoverAfterMs: twice the idle hub’s time for the chunk, within [minTakeoverMs, takeoverMs]', () => {
  const chunk = MIB;
  const cases: Array<[string, { load: number | null; msPerByte: number | null }, number]> = [
    ['hub at 1 MiB/s: 2 s', { load: 0, msPerByte: perByte(1) }, 2_000],
    ['hub at 10 MiB/s: the 1 s floor', { load: 0, msPerByte: perByte(10) }, 1_000],
    ['hub at 0.1 MiB/s: the 8 s ceiling', { load: 0, msPerByte: perByte(0.1) }, 8_000],
    ['busy hub: 8 s', { load: 0.5, msPerByte: perByte(1) }, 8_000],
    ['no hint: 8 s', { load: null, msPerByte: perByte(1) }, 8_000],
    ['not measured: 8 s', { load: 0, msPerByte: null }, 8_000],
  ];
  for (const [name, hub, want] of cases) assert.ok(Math.abs(takeoverAfterMs(chunk, hub, 8_000) - want) < 1e-6, name);
  assert.equal(DEFAULT_SOURCE_POLICY.speedRatio, 2);
});

test('nextMsPerByte: first sample as it is, then a quarter of each; nonsense ignored', () => {
  assert.equal(nextMsPerByte(null, 100, 1000), 0.1);
  assert.equal(nextMsPerByte(0.1, 500, 1000), 0.2);
  assert.equal(nextMsPerByte(0.1, 100, 0), 0.1);
  assert.equal(nextMsPerByte(0.1, -1, 1000), 0.1);
  assert.equal(nextMsPerByte(null, Number.NaN, 1000), null);
});

test('shard-load header: formatted in [0, 1] with two places, parsed strictly', () => {
  assert.equal(formatShardLoad(1, 64), '0.02');
  assert.equal(formatShardLoad(64, 64), '1.00');
  assert.equal(formatShardLoad(70, 64), '1.00');
  assert.equal(formatShardLoad(0, 0), '1.00');
  for (const [v, want] of [
    ['0.02', 0.02],
    ['1.00', 1],
    ['0', 0],
    ['1', 1],
    [null, null],
    ['', null],
    ['1.5', null],
    ['-0.1', null],
    ['0.5; x', null],
    ['NaN', null],
  ] as const) {
    assert.equal(parseShardLoad(v), want, String(v));
  }
});
