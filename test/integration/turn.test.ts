/**
 * harness/turn.ts with the real coturn on loopback: it listens only where told, accepts the hub's TURN REST API
 * credentials (hub/turn-credentials.ts: username `expiry:id`, password base64(HMAC-SHA1(secret, username))) and
 * refuses a wrong password and an expired username, and stops. The client is coturn's own `turnutils_uclient` (an ALLOCATE with those credentials); what the
 * server made of each request is read from its log, waited for (bounded).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { startTurn, type TurnServer } from '../../harness/turn.ts';
import { turnCredential } from '../../hub/turn-credentials.ts';

const run = promisify(execFile);
const SECRET = 'turn-test-secret-0123456789';

/** The hub's credential (hub/turn-credentials.ts) of `id`, expiring `ttlS` from now. */
function credential(secret: string, ttlS: number, id: string): { username: string; password: string } {
  const c = turnCredential(secret, id, Date.now(), ttlS);
  return { username: c.username, password: c.credential };
}

/** One ALLOCATE (and a message to a peer nobody runs) by coturn's client; it may run until the timeout. */
async function allocate(turn: TurnServer, username: string, password: string): Promise<string> {
  const args = ['-u', username, '-w', password, '-p', String(turn.port), '-n', '1', '-m', '1', '-c', '-e', '127.0.0.1', turn.ip];
  try {
    const r = await run('timeout', ['3', 'turnutils_uclient', ...args], { encoding: 'utf8' });
    return r.stdout + r.stderr;
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string };
    return `${err.stdout ?? ''}${err.stderr ?? ''}`;
  }
}

async function logLine(turn: TurnServer, re: RegExp, ms = 5000): Promise<string> {
  const t0 = Date.now();
  for (;;) {
    const hit = turn
      .log()
      .split('\n')
      .find((l) => re.test(l));
    if (hit) return hit;
    if (Date.now() - t0 > ms) throw new Error(`no log line ${re} within ${ms} ms:\n${turn.log().slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('coturn on loopback: REST API credentials allocate, a wrong password and an expired username do not; it stops', {
  timeout: 60_000,
}, async () => {
  const port = 34000 + Math.floor(Math.random() * 900);
  const minPort = 41000 + Math.floor(Math.random() * 90) * 10;
  const turn = await startTurn({ ip: '127.0.0.1', port, minPort, maxPort: minPort + 9, secret: SECRET });
  try {
    assert.equal(turn.url, `turn:127.0.0.1:${port}`);
    const listen = execFileSync('ss', ['-H', '-l', '-n', '-u', 'sport', `= :${port}`], { encoding: 'utf8' });
    assert.match(listen, new RegExp(`127\\.0\\.0\\.1:${port}`), 'UDP on the address given');
    assert.doesNotMatch(listen, new RegExp(`0\\.0\\.0\\.0:${port}|\\*:${port}`), 'and nowhere else');

    // A worker id may hold ':' (the channel allows it): coturn reads the expiry before the first one.
    for (const id of ['w-good', 'page-1:x']) {
      const good = credential(SECRET, 300, id);
      await allocate(turn, good.username, good.password);
      const ok = await logLine(turn, new RegExp(`user <${good.username}>: incoming packet ALLOCATE processed, success`));
      assert.ok(ok);
    }

    const wrong = credential('another-secret-000', 300, 'w-wrong');
    const out = await allocate(turn, wrong.username, wrong.password);
    assert.match(out, /Cannot complete Allocation/, 'a password from another secret is refused');
    assert.ok(!turn.log().includes(`user <${wrong.username}>: incoming packet ALLOCATE processed, success`));

    const old = credential(SECRET, -10, 'w-expired');
    const out2 = await allocate(turn, old.username, old.password);
    assert.match(out2, /Cannot complete Allocation/, 'an expired username is refused');
    assert.ok(!turn.log().includes(`user <${old.username}>: incoming packet ALLOCATE processed, success`));
  } finally {
    await turn.stop();
  }
  assert.throws(() => process.kill(turn.pid, 0), 'the server is gone');
  const after = execFileSync('ss', ['-H', '-l', '-n', '-u', 'sport', `= :${port}`], { encoding: 'utf8' });
  assert.equal(after.trim(), '', 'its port is free');
  await assert.rejects(startTurn({ ip: '198.18.0.2', secret: SECRET }), /loopback only/);
  await assert.rejects(startTurn({ ip: '127.0.0.1', secret: 'short' }), /secret/);
});
