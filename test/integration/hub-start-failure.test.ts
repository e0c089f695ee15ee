/**
 * A hub that cannot start (its coordinator binary is missing) fails with the reason and lets go of what it had
 * opened: its HTTP port and its dispatch sockets, so that the process can exit instead of hanging with them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { testModel } from '../../harness/models.ts';
import { freePort } from '../../hub/net.ts';
import { runHub } from '../../hub/cli.ts';
import { defaultConfig } from '../../hub/hub.ts';

const model = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 64, ff: 64, nExpert: 8, nExpertUsed: 2, seed: 3 });

/** Whether something can listen on the port now (it is free again). */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

test('a missing coordinator binary: runHub rejects naming it, and its port is free again', async () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'es-hub-fail-'));
  const port = await freePort();
  try {
    const config = defaultConfig({
      port,
      host: '127.0.0.1',
      stateDir,
      models: [{ path: model.path, name: 'tiny' }],
      coordinatorBinary: join(stateDir, 'no-such-linkcpp-server'),
    });
    await assert.rejects(
      runHub(config, () => {}),
      /no-such-linkcpp-server is missing/,
    );
    assert.ok(await portFree(port), `port ${port} is still held after the failed start`);
  } finally {
    rmSync(stateDir, { recursive: true, force: true });
  }
});
