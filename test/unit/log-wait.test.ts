import { test } from 'node:test';
import assert from 'node:assert/strict';
import { logLines, logShows, waitForLog } from '../../harness/log-wait.ts';

const LOG = 'start\nexpert-dispatch: cannot connect\nserving\nexpert-dispatch: cannot connect again\n';

test('logShows: a pattern, a sticky pattern tested from the start each time, a predicate', () => {
  const sticky = /cannot/g;
  const rows: Array<[string, string, Parameters<typeof logShows>[1], boolean]> = [
    ['pattern present', LOG, /serving/, true],
    ['pattern absent', LOG, /protocol version/, false],
    ['empty log', '', /./, false],
    ['global pattern, first call', LOG, sticky, true],
    ['global pattern, second call', LOG, sticky, true],
    ['predicate', LOG, (l) => l.split('\n').length > 3, true],
  ];
  for (const [name, log, want, is] of rows) assert.equal(logShows(log, want), is, name);
});

test('logLines: the matching lines, in order, by substring or pattern', () => {
  const rows: Array<[string, RegExp | string, string[]]> = [
    ['substring', 'cannot connect', ['expert-dispatch: cannot connect', 'expert-dispatch: cannot connect again']],
    ['pattern', /^serving$/, ['serving']],
    ['none', /HELLO/, []],
  ];
  for (const [name, p, want] of rows) assert.deepEqual(logLines(LOG, p), want, name);
});

test('waitForLog: returns the log once a late line arrives; times out naming what and quoting the log', async () => {
  let log = '';
  setTimeout(() => (log += 'late line\n'), 120);
  assert.equal(await waitForLog(() => log, /late line/, 2000), 'late line\n');
  await assert.rejects(
    waitForLog(() => log, /never/, 150, 'the never line'),
    (e: Error) => {
      assert.match(e.message, /did not show the never line within 150 ms/);
      assert.match(e.message, /late line/);
      return true;
    },
  );
  await assert.rejects(
    waitForLog(() => '', /x/, 0),
    /\(empty\)/,
  );
});
