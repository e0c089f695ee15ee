/**
 * The coordinator's "not dispatched" note (its expert-dispatch hook logs the architecture and the missing piece once)
 * reaches the supervisor's status and its listener: the dashboard's model card and the hub's event log show it.
 * The coordinator here is a stand-in process (a few lines of Node that answer /health and log the hook's line): what
 * is under test is the supervisor's reading of a child's log, not llama.cpp.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoordinatorSupervisor, dispatchUnsupportedNote } from '../../hub/supervisor.ts';

const NOTE = 'architecture gpt-oss uses an expert FFN variant the dispatch path does not cover: expert biases (ffn_*_exps_b)';

test('dispatchUnsupportedNote reads the hook line and nothing else', () => {
  const rows: Array<[string, string | null]> = [
    [`llama_xd: expert-dispatch: ${NOTE}; those layers run the stock path`, NOTE],
    [
      `expert-dispatch: expert weights are repacked or not in host memory; those layers run the stock path`,
      'expert weights are repacked or not in host memory',
    ],
    ['expert-dispatch: connected to /tmp/d.sock (protocol 2)', null],
    ['srv  update_slots: all slots are idle', null],
    ['', null],
  ];
  for (const [line, want] of rows) assert.equal(dispatchUnsupportedNote(line), want, line);
  const long = dispatchUnsupportedNote(`expert-dispatch: ${'x'.repeat(1000)}; those layers run the stock path`);
  assert.ok(long !== null && long.length <= 401 && long.endsWith('…'), 'a long note is cut');
});

test('a managed coordinator that logs the note: status says it, the listener hears it once', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'xs-supervisor-'));
  const bin = join(dir, 'fake-coordinator.mjs');
  // Logs the note twice (the listener hears distinct notes once), then serves /health.
  writeFileSync(
    bin,
    `#!/usr/bin/env node
import { createServer } from 'node:http';
const port = Number(process.argv[process.argv.indexOf('--port') + 1]);
process.stderr.write('load_tensors: done\\nllama_xd: expert-dispatch: ${NOTE}; those layers run the stock path\\n');
process.stderr.write('llama_xd: expert-dispatch: ${NOTE}; those layers run the stock path\\n');
createServer((req, res) => { res.writeHead(200); res.end('{}'); }).listen(port, '127.0.0.1');
process.on('SIGTERM', () => process.exit(0));
`,
  );
  chmodSync(bin, 0o755);
  const heard: Array<[string, string]> = [];
  const sup = new CoordinatorSupervisor(
    () => {},
    (name, note) => heard.push([name, note]),
  );
  sup.addManaged({ name: 'm', modelPath: join(dir, 'none.gguf'), binary: bin, slots: 1, ctxPerSlot: 64 });
  try {
    await sup.start();
    const deadline = Date.now() + 10_000;
    while (heard.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await new Promise((r) => setTimeout(r, 200)); // the second line, if it were heard again
    assert.deepEqual(heard, [['m', NOTE]]);
    const st = sup.status().find((s) => s.name === 'm');
    assert.equal(st?.state, 'ready');
    assert.equal(st?.dispatchUnsupported, NOTE);
  } finally {
    await sup.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an external coordinator has no note', () => {
  const sup = new CoordinatorSupervisor();
  sup.addExternal('x', 'http://127.0.0.1:1');
  assert.equal(sup.status()[0]?.dispatchUnsupported, null);
});
