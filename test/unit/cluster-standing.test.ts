/**
 * The shared standing's pure parts (hub/cluster/standing.ts): what a hub does with another hub's verdict, and the
 * record's codec (garbage is CLUSTER_STATE_CORRUPT).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { type LocalStanding, type SharedStandingRecord, adoptShared, decodeStanding, encodeStanding } from '../../hub/cluster/standing.ts';
import { isHubError } from '../../hub/errors.ts';

const rec = (standing: 'trusted' | 'struck', wallet = 'W1'): SharedStandingRecord => ({
  v: 1,
  worker_id: 'w1',
  wallet,
  standing,
  hub: 'hub-b',
  at_ms: 1000,
});
const local = (o: Partial<LocalStanding> = {}): LocalStanding => ({
  wallet: 'W1',
  passed: 0,
  strikes: 0,
  quarantined: false,
  struckHere: false,
  ...o,
});

test('adoptShared: a probation passed elsewhere trusts here, a strike elsewhere is a strike here, once', () => {
  const cases: Array<[string, LocalStanding, SharedStandingRecord, string]> = [
    ['new here, trusted there', local(), rec('trusted'), 'trust'],
    ['halfway through probation here', local({ passed: 7 }), rec('trusted'), 'trust'],
    ['trusted here already', local({ passed: 20 }), rec('trusted'), 'none'],
    ['struck here by its own audit', local({ strikes: 1, struckHere: true }), rec('trusted'), 'none'],
    ['struck here by another hub’s verdict, then passed there', local({ strikes: 1 }), rec('trusted'), 'trust'],
    ['another wallet under the id', local(), rec('trusted', 'W2'), 'none'],
    ['no wallet here', local({ wallet: null }), rec('trusted'), 'none'],
    ['quarantined here', local({ quarantined: true }), rec('trusted'), 'none'],
    ['trusted here, struck there', local({ passed: 25 }), rec('struck'), 'strike'],
    ['on probation here, struck there', local({ passed: 3 }), rec('struck'), 'strike'],
    ['carries a strike already', local({ strikes: 1 }), rec('struck'), 'none'],
    ['struck there, another wallet', local({ passed: 25 }), rec('struck', 'W2'), 'none'],
    ['struck there, quarantined here', local({ quarantined: true }), rec('struck'), 'none'],
  ];
  for (const [what, l, r, want] of cases) assert.equal(adoptShared(l, r, 20), want, what);
});

test('decodeStanding: round trip; garbage and another worker’s record refused CLUSTER_STATE_CORRUPT', () => {
  const r = rec('trusted');
  assert.deepEqual(decodeStanding(encodeStanding(r), 'k', 'w1'), r);
  const bad: unknown[] = [
    'nope',
    '[]',
    JSON.stringify({ ...r, v: 2 }),
    JSON.stringify({ ...r, standing: 'proven' }),
    JSON.stringify({ ...r, wallet: '' }),
    JSON.stringify({ ...r, at_ms: -1 }),
    JSON.stringify({ ...r, hub: 'x'.repeat(65) }),
    JSON.stringify({ ...r, worker_id: 'w2' }),
    'x'.repeat(5000),
    null,
  ];
  for (const text of bad)
    assert.throws(
      () => decodeStanding(text, 'k', 'w1'),
      (e) => isHubError(e, 'CLUSTER_STATE_CORRUPT'),
      String(text).slice(0, 40),
    );
});
