import assert from 'node:assert/strict';
import { test } from 'node:test';
import { amdahlCeiling, shareFromTopOne } from '../../bench/elastic/ceiling.ts';

const near = (a: number, b: number, what: string): void => {
  assert.ok(Math.abs(a - b) < 1e-9, `${what}: ${a} ≠ ${b}`);
};

test("shareFromTopOne: the routed experts' share from a top-k run against a top-1 run of the same load (table)", () => {
  // O 60 + E 40 at top-8; top-1: 60 + 5 = 65 → T1/Tk 0.65 → share 0.4.
  near(shareFromTopOne(0.65, 8), 0.4, 'top-8');
  // top-2: 60 + 20 = 80.
  near(shareFromTopOne(0.8, 2), 0.4, 'top-2');
  assert.equal(shareFromTopOne(1.02, 8), 0, 'noise: the top-1 run no faster → 0');
  assert.equal(shareFromTopOne(0.05, 8), 1, 'clamped');
  assert.throws(() => shareFromTopOne(0.5, 1), RangeError);
  assert.throws(() => shareFromTopOne(0, 8), RangeError);
});

test('amdahlCeiling: every expert away for free, and a volunteer core balanced at ρ (table)', () => {
  for (const [s, rho, want] of [
    [0.4, null, 1 / 0.6],
    [0, null, 1],
    [0.4, 1, 1.25], // equal speed: half the expert time, 0.6 + 0.2
    [0.4, 2, 1 / (0.6 + 0.4 * (2 / 3))], // half as fast: a third of the experts go
    [0.76, 2, 1 / (0.24 + 0.76 * (2 / 3))],
    [1, 1, 2],
  ] as const)
    near(amdahlCeiling(s, rho), want, `s ${s} ρ ${rho}`);
  assert.equal(amdahlCeiling(1, null), Number.POSITIVE_INFINITY);
  // A slower volunteer never bounds higher than a faster one, nor above the free bound.
  assert.ok(amdahlCeiling(0.5, 3) < amdahlCeiling(0.5, 1) && amdahlCeiling(0.5, 1) < amdahlCeiling(0.5, null));
  assert.throws(() => amdahlCeiling(1.2, null), RangeError);
  assert.throws(() => amdahlCeiling(0.5, 0), RangeError);
});
