import assert from 'node:assert/strict';
import { test } from 'node:test';
import { shareFromTopOne, swarmCeiling } from '../../bench/elastic/ceiling.ts';

const near = (a: number | null, b: number, what: string): void => {
  assert.ok(a !== null && Math.abs(a - b) < 1e-9, `${what}: ${a} ≠ ${b}`);
};

test('swarmCeiling: Amdahl bounds from the share of routed experts and the volunteer speed (table)', () => {
  const rows = [
    // 1000 tokens × 16 pairs × 0.025 ms = 400 ms of 1000: s 0.4; free 1/0.6; equal speed: 0.6 + 0.2 = 0.8 → 1.25.
    { name: 'equal speed', wallMs: 1000, tokens: 1000, l: 0.025, r: 0.025, s: 0.4, free: 1 / 0.6, balanced: 1.25 },
    // a volunteer twice as slow per pair takes a third: 0.6 + 0.4·2/3.
    {
      name: 'volunteer 2× slower',
      wallMs: 1000,
      tokens: 1000,
      l: 0.025,
      r: 0.05,
      s: 0.4,
      free: 1 / 0.6,
      balanced: 1 / (0.6 + 0.4 * (2 / 3)),
    },
    // this machine's shape of numbers: s 0.36, wasm at half llama.cpp's speed: below 1.25 whatever the hub does.
    { name: 's 0.36, r 2l', wallMs: 1000, tokens: 1500, l: 0.015, r: 0.03, s: 0.36, free: 1 / 0.64, balanced: 1 / (0.64 + 0.36 * (2 / 3)) },
    { name: 'no experts', wallMs: 500, tokens: 0, l: 0.1, r: 0.1, s: 0, free: 1, balanced: 1 },
  ];
  for (const t of rows) {
    const c = swarmCeiling({
      wallMs: t.wallMs,
      buckets: [{ tokens: t.tokens, pairsPerToken: 16, localMsPerPair: t.l }],
      remoteMsPerPair: t.r,
    });
    near(c.expertShare, t.s, `${t.name} share`);
    near(c.freeExperts, t.free, `${t.name} free`);
    near(c.balanced, t.balanced, `${t.name} balanced`);
  }
  assert.ok(
    (swarmCeiling({ wallMs: 1000, buckets: [{ tokens: 1500, pairsPerToken: 16, localMsPerPair: 0.015 }], remoteMsPerPair: 0.03 })
      .balanced as number) < 1.25,
  );
});

test('swarmCeiling: buckets of different per-pair cost add; no volunteer measured → no balanced figure; overshoot clamps', () => {
  // decode 200 tokens at 0.1 ms/pair (320 ms) + prompt 2000 at 0.005 (160 ms): s 0.48.
  const c = swarmCeiling({
    wallMs: 1000,
    buckets: [
      { tokens: 200, pairsPerToken: 16, localMsPerPair: 0.1 },
      { tokens: 2000, pairsPerToken: 16, localMsPerPair: 0.005 },
    ],
    remoteMsPerPair: 0.1,
  });
  near(c.expertShare, 0.48, 'share');
  // decode halves (0.32 → 0.16); the prompt bucket keeps 0.1/0.105 of its 0.16.
  near(c.balanced, 1 / (0.52 + 0.16 + 0.16 * (0.1 / 0.105)), 'balanced');
  assert.equal(
    swarmCeiling({ wallMs: 10, buckets: [{ tokens: 1, pairsPerToken: 1, localMsPerPair: 1 }], remoteMsPerPair: null }).balanced,
    null,
  );
  const over = swarmCeiling({ wallMs: 10, buckets: [{ tokens: 20, pairsPerToken: 1, localMsPerPair: 1 }], remoteMsPerPair: 1 });
  assert.equal(over.expertShare, 1);
  assert.equal(over.overshoot, true, 'per-pair times beyond the wall time are flagged');
  assert.equal(c.overshoot, false);
  assert.equal(over.freeExperts, Number.POSITIVE_INFINITY);
  near(over.balanced, 2, 'all experts, equal speed');
  assert.throws(() => swarmCeiling({ wallMs: 0, buckets: [], remoteMsPerPair: null }), RangeError);
  assert.throws(
    () => swarmCeiling({ wallMs: 1, buckets: [{ tokens: -1, pairsPerToken: 1, localMsPerPair: 1 }], remoteMsPerPair: null }),
    RangeError,
  );
});

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
