/**
 * market/grants.ts: which ranges an HTTP worker may report as held — a table of histories (assignments, downloads)
 * and heartbeats with the code each gets; the claim of an unnamed assignment; the caps.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SliceGrants } from '../../hub/market/grants.ts';
import type { SliceRef } from '../../protocol/slice.ts';
import { HubError } from '../../hub/errors.ts';
import type { HeldRange } from '../../hub/market/types.ts';

const S = (layer: number, begin: number, end: number, model = 'm'): SliceRef => ({ model, layer, begin, end });

type Step = ['assign', string | null, SliceRef] | ['download', SliceRef];

function codeOf(f: () => void): string {
  try {
    f();
    return 'ok';
  } catch (e) {
    if (e instanceof HubError) return e.code;
    throw e;
  }
}

test('admit: a range inside a slice assigned to this worker and downloaded by its wallet, and nothing else', () => {
  const cases: Array<[string, Step[], string, HeldRange[], string]> = [
    ['nothing held: always admitted', [], 'w1', [], 'ok'],
    [
      'assigned and downloaded',
      [
        ['assign', 'w1', S(1, 0, 64)],
        ['download', S(1, 0, 64)],
      ],
      'w1',
      [[1, 0, 64]],
      'ok',
    ],
    [
      'a sub-range of its slice',
      [
        ['assign', 'w1', S(1, 0, 64)],
        ['download', S(1, 0, 64)],
      ],
      'w1',
      [[1, 16, 32]],
      'ok',
    ],
    ['never assigned', [['download', S(1, 0, 64)]], 'w1', [[1, 0, 64]], 'COVERAGE_NOT_ASSIGNED'],
    ['assigned, not downloaded', [['assign', 'w1', S(1, 0, 64)]], 'w1', [[1, 0, 64]], 'COVERAGE_NOT_DOWNLOADED'],
    [
      'downloaded a smaller piece only',
      [
        ['assign', 'w1', S(1, 0, 64)],
        ['download', S(1, 0, 32)],
      ],
      'w1',
      [[1, 0, 64]],
      'COVERAGE_NOT_DOWNLOADED',
    ],
    [
      'past the end of its slice',
      [
        ['assign', 'w1', S(1, 0, 64)],
        ['download', S(1, 0, 128)],
      ],
      'w1',
      [[1, 0, 65]],
      'COVERAGE_NOT_ASSIGNED',
    ],
    [
      'another layer',
      [
        ['assign', 'w1', S(1, 0, 64)],
        ['download', S(1, 0, 64)],
      ],
      'w1',
      [[2, 0, 64]],
      'COVERAGE_NOT_ASSIGNED',
    ],
    [
      'another model',
      [
        ['assign', 'w1', S(1, 0, 64, 'x')],
        ['download', S(1, 0, 64, 'x')],
      ],
      'w1',
      [[1, 0, 64]],
      'COVERAGE_NOT_ASSIGNED',
    ],
    [
      'assigned to another worker of the wallet',
      [
        ['assign', 'w2', S(1, 0, 64)],
        ['download', S(1, 0, 64)],
      ],
      'w1',
      [[1, 0, 64]],
      'COVERAGE_NOT_ASSIGNED',
    ],
    [
      'unnamed assignment: the first worker claims it',
      [
        ['assign', null, S(1, 0, 64)],
        ['download', S(1, 0, 64)],
      ],
      'w1',
      [[1, 0, 64]],
      'ok',
    ],
    [
      'across two adjacent slices',
      [
        ['assign', 'w1', S(1, 0, 32)],
        ['assign', 'w1', S(1, 32, 64)],
        ['download', S(1, 0, 32)],
        ['download', S(1, 32, 64)],
      ],
      'w1',
      [[1, 0, 64]],
      'COVERAGE_NOT_ASSIGNED',
    ],
    [
      'two slices, each reported',
      [
        ['assign', 'w1', S(0, 0, 8)],
        ['assign', 'w1', S(1, 0, 8)],
        ['download', S(0, 0, 8)],
        ['download', S(1, 0, 8)],
      ],
      'w1',
      [
        [0, 0, 8],
        [1, 0, 8],
      ],
      'ok',
    ],
    [
      'one good range and one never assigned',
      [
        ['assign', 'w1', S(0, 0, 8)],
        ['download', S(0, 0, 8)],
      ],
      'w1',
      [
        [0, 0, 8],
        [1, 0, 8],
      ],
      'COVERAGE_NOT_ASSIGNED',
    ],
  ];
  for (const [name, steps, worker, ranges, want] of cases) {
    const g = new SliceGrants();
    for (const s of steps) {
      if (s[0] === 'assign') g.assigned('wallet', s[1], s[2]);
      else g.downloaded('wallet', s[1]);
    }
    assert.equal(
      codeOf(() => g.admit('wallet', worker, 'm', ranges)),
      want,
      name,
    );
    assert.equal(
      codeOf(() => g.admit('another-wallet', worker, 'm', ranges)),
      ranges.length === 0 ? 'ok' : 'COVERAGE_NOT_ASSIGNED',
      `${name}: another wallet has none of it`,
    );
  }
});

test('an unnamed assignment becomes the worker that reported it first; a refused heartbeat claims nothing', () => {
  const g = new SliceGrants();
  g.assigned('wallet', null, S(1, 0, 64));
  g.downloaded('wallet', S(1, 0, 64));
  assert.equal(
    codeOf(() =>
      g.admit('wallet', 'w1', 'm', [
        [1, 0, 64],
        [2, 0, 8],
      ]),
    ),
    'COVERAGE_NOT_ASSIGNED',
  );
  assert.equal(
    codeOf(() => g.admit('wallet', 'w2', 'm', [[1, 0, 64]])),
    'ok',
    'w1 was refused, so the slice was still unclaimed',
  );
  assert.equal(
    codeOf(() => g.admit('wallet', 'w1', 'm', [[1, 0, 64]])),
    'COVERAGE_NOT_ASSIGNED',
    "now w2's",
  );
  assert.equal(
    codeOf(() => g.admit('wallet', 'w2', 'm', [[1, 0, 32]])),
    'ok',
  );
});

test('caps: the oldest slices of a wallet and the least recently used wallets are forgotten', () => {
  const g = new SliceGrants({ perWallet: 2, walletsKept: 2 });
  for (const layer of [0, 1, 2]) {
    g.assigned('a', 'w', S(layer, 0, 8));
    g.downloaded('a', S(layer, 0, 8));
  }
  assert.equal(
    codeOf(() => g.admit('a', 'w', 'm', [[0, 0, 8]])),
    'COVERAGE_NOT_ASSIGNED',
    'the oldest of three went',
  );
  assert.equal(
    codeOf(() => g.admit('a', 'w', 'm', [[2, 0, 8]])),
    'ok',
  );
  g.assigned('b', 'w', S(0, 0, 8));
  g.admit('a', 'w', 'm', [[2, 0, 8]]); // a is used: b is now the least recent
  g.assigned('c', 'w', S(0, 0, 8));
  assert.equal(g.size, 2);
  assert.equal(
    codeOf(() => g.admit('a', 'w', 'm', [[2, 0, 8]])),
    'ok',
    'a was used lately and stays',
  );
  g.downloaded('b', S(0, 0, 8));
  assert.equal(
    codeOf(() => g.admit('b', 'w', 'm', [[0, 0, 8]])),
    'COVERAGE_NOT_ASSIGNED',
    "b's assignment was forgotten with it",
  );
  assert.throws(() => new SliceGrants({ perWallet: 0 }), RangeError);
});
