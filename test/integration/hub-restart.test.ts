/**
 * A hub killed with SIGKILL mid-stream (`npx expertswarm hub` as its own process, its real coordinator): the client's
 * stream ends with an error at once instead of hanging, the coordinator it supervised exits within seconds instead of
 * serving on unsupervised (the hub starts it with LINKCPP_EXIT_WITH_PARENT: the kernel sends it SIGTERM when the hub
 * dies), and a new hub on the same state directory starts a fresh coordinator and serves the same tokens.
 *
 * Why restart, not re-adopt: the coordinator's dispatch socket lives in the dead hub's private temporary directory and
 * its slots may hold half-streamed requests nobody reads; a fresh coordinator costs a model load (seconds for the
 * models a hub starts; the mapped file stays in the page cache) and leaves no state behind that nobody supervises.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { testModel } from '../support/models.ts';
import { QWEN_Q4K, completionIds, until } from '../support/swarm.ts';

const BIN = fileURLToPath(new URL('../../bin/expertswarm.js', import.meta.url));

interface HubProcess {
  proc: ChildProcess;
  url: string;
  coordinatorPid: number;
  output: () => string;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function startHub(modelPath: string, stateDir: string): Promise<HubProcess> {
  const proc = spawn(process.execPath, [BIN, 'hub', '--model', `m=${modelPath}`, '--port', '0', '--state', stateDir, '--slots', '1'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  proc.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  proc.stderr?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const output = (): string => out;
  const url = await until('the hub API', 60_000, () => {
    if (proc.exitCode !== null) throw new Error(`the hub exited: ${out}`);
    return /\[hub\] API on (http:\/\/\S+)/.exec(out)?.[1];
  });
  const coordinatorPid = await until('the coordinator ready', 120_000, async () => {
    const r = await fetch(`${url}/api/events?kind=coordinator&limit=50`);
    const events = ((await r.json()) as { events: Array<{ detail: string }> }).events;
    const ready = events.map((e) => /^ready: pid (\d+)/.exec(e.detail)?.[1]).find((p) => p !== undefined);
    return ready === undefined ? undefined : Number(ready);
  });
  return { proc, url, coordinatorPid, output };
}

test('a SIGKILLed hub: its streams end with an error, its coordinator exits, a new hub serves with a fresh one', {
  timeout: 300_000,
}, async () => {
  const m = await testModel(QWEN_Q4K);
  const stateDir = mkdtempSync(join(tmpdir(), 'es-restart-'));
  let first: HubProcess | null = null;
  let second: HubProcess | null = null;
  try {
    first = await startHub(m.path, stateDir);
    const want = await completionIds(first.url, 'm', 'The swarm serves', 16, m.ban);
    assert.ok(alive(first.coordinatorPid), 'the coordinator runs');

    // A long stream; once its first tokens are in, the hub is killed.
    const ctl = new AbortController();
    const res = await fetch(`${first.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'm',
        prompt: 'The swarm serves',
        max_tokens: 4000,
        stream: true,
        ignore_eos: true,
        logit_bias: Object.fromEntries(m.ban.map((id) => [String(id), -100])),
      }),
      signal: ctl.signal,
    });
    assert.equal(res.status, 200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    const killedAt = Date.now();
    first.proc.kill('SIGKILL');
    // The stream ends with an error (the connection is reset), not a hang.
    const ended = await Promise.race([
      (async () => {
        for (;;) {
          const r = await reader.read();
          if (r.done) return 'done';
        }
      })().catch((e: Error) => `error: ${e.message}`),
      new Promise<string>((r) => setTimeout(() => r('hang'), 10_000)),
    ]);
    ctl.abort();
    assert.match(ended, /^error|^done$/, `the stream ended: ${ended}`);
    assert.notEqual(ended, 'hang');
    const goneMs = await until('the orphan coordinator to exit', 15_000, () =>
      alive((first as HubProcess).coordinatorPid) ? undefined : Date.now() - killedAt,
    );
    console.log(
      `# the stream ended (${ended}); the coordinator (pid ${first.coordinatorPid}) exited ${goneMs} ms after the hub was killed`,
    );

    second = await startHub(m.path, stateDir);
    assert.notEqual(second.coordinatorPid, first.coordinatorPid, 'a fresh coordinator');
    assert.deepEqual(await completionIds(second.url, 'm', 'The swarm serves', 16, m.ban), want, 'the same tokens');
  } finally {
    for (const h of [first, second]) {
      if (!h) continue;
      if (h.proc.exitCode === null && h.proc.signalCode === null) {
        h.proc.kill('SIGTERM');
        await new Promise((r) => h.proc.once('exit', r));
      }
      if (alive(h.coordinatorPid)) process.kill(h.coordinatorPid, 'SIGKILL');
    }
    rmSync(stateDir, { recursive: true, force: true });
  }
});
