/**
 * harness/redis.ts: a real redis-server per test, on a unix socket (default) or a free loopback port, no persistence,
 * stopped bounded; two at once do not touch each other; restart() gives an empty one at the same address; kill() is
 * Redis gone mid-run. parseReply's table is here too (the harness's own RESP reader).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { parseReply, startRedis } from '../../harness/redis.ts';

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test('parseReply: each RESP kind, and null while incomplete', () => {
  const cases: Array<[string, { text: string; length: number } | null]> = [
    ['+PONG\r\n', { text: 'PONG', length: 7 }],
    ['-ERR wrong\r\n', { text: 'ERR ERR wrong', length: 12 }],
    [':42\r\n', { text: '42', length: 5 }],
    ['$3\r\nabc\r\n', { text: 'abc', length: 9 }],
    ['$-1\r\n', { text: '(nil)', length: 5 }],
    ['*2\r\n$1\r\na\r\n:7\r\n', { text: 'a\n7', length: 15 }],
    ['$3\r\nab', null],
    ['*2\r\n$1\r\na\r\n', null],
    ['+PON', null],
  ];
  for (const [input, want] of cases) assert.deepEqual(parseReply(input), want, JSON.stringify(input));
});

test('a redis-server on a unix socket and one on a port: separate, empty after restart, gone after stop', async () => {
  const a = await startRedis();
  const b = await startRedis({ listen: 'tcp' });
  try {
    assert.match(a.url, /^unix:\/\/\/.+\/redis\.sock$/);
    assert.match(b.url, /^redis:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(await a.command('PING'), 'PONG');
    assert.equal(await b.command('PING'), 'PONG');
    assert.equal(await a.command('SET', 'k', 'on-a'), 'OK');
    assert.equal(await b.command('GET', 'k'), '(nil)', 'the two servers share nothing');
    assert.equal(await a.command('CONFIG', 'GET', 'appendonly'), 'appendonly\nno');
    assert.equal(await a.command('CONFIG', 'GET', 'save'), 'save\n');

    const before = a.pid();
    await a.restart();
    assert.notEqual(a.pid(), before);
    assert.equal(await a.command('GET', 'k'), '(nil)', 'a restart without persistence is an empty Redis');

    const pid = b.pid() as number;
    await b.kill();
    assert.equal(alive(pid), false, 'killed at once');
    await assert.rejects(b.command('PING'), 'nothing answers once it is killed');
    assert.equal(await a.command('PING'), 'PONG', 'the other one is untouched');

    const apid = a.pid() as number;
    const dir = dirname(a.socketPath as string);
    await a.stop();
    await a.stop(); // idempotent
    assert.equal(alive(apid), false);
    assert.equal(existsSync(dir), false, 'its temporary folder is removed');
  } finally {
    await a.stop();
    await b.stop();
  }
});
