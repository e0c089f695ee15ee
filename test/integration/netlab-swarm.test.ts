/**
 * The product over the network lab (issue 29, harness/netlab.ts): the hub (`expertswarm hub`, its real coordinator,
 * `--dispatch always`) in the lab's hub namespace; two headless volunteers (`expertswarm volunteer`) in home namespaces
 * behind the router's NAT, one on the broadband profile (30 ± 5 ms, 50 Mbit/s, 0.1% loss), one far (120 ± 20 ms,
 * 10 Mbit/s, 1% loss), one slice each (--max-slices 1). The test process reaches the hub through the lab's portal.
 * A greedy completion gives the token ids of `--dispatch off`; the far volunteer's served pairs are counted; the hub's
 * metrics show each layer's added round trip (the dashboard's per-worker latency, the dispatch round-trip histogram).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { testModel } from '../../harness/models.ts';
import { createLab, HUB_ADDRESS, type Lab } from '../../harness/netlab.ts';
import { PROFILES } from '../../harness/netlab-profiles.ts';
import { baselineIds, completionIds, dispatchMap, E2E_PROMPT, moeLayersOf, pairOutcomes, QWEN_Q4K, until } from '../../harness/swarm.ts';

const BIN = fileURLToPath(new URL('../../bin/expertswarm.js', import.meta.url));
const HUB_PORT = 8080;
/** Short: every token waits for a 120 ms round trip on one of its two MoE layers. */
const N = 24;

interface Proc {
  proc: ChildProcess;
  log(): string;
}

function keepLog(proc: ChildProcess): Proc {
  let out = '';
  const keep = (d: Buffer): void => {
    out = (out + d.toString()).slice(-20_000);
  };
  proc.stdout?.on('data', keep);
  proc.stderr?.on('data', keep);
  return { proc, log: () => out };
}

interface WorkerRow {
  id: string;
  pairsServed: number;
  latencyMs: number | null;
  slice: [number, number, number] | null;
}

/** `expertswarm_dispatch_roundtrip_seconds` for `model`: cumulative bucket counts by `le`, and sum and count. */
async function roundtrips(url: string, model: string): Promise<{ le: Map<string, number>; sum: number; count: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const le = new Map<string, number>();
  let sum = 0;
  let count = 0;
  for (const m of text.matchAll(/^expertswarm_dispatch_roundtrip_seconds_(bucket|sum|count)\{([^}]*)\} (\S+)$/gm)) {
    const labels = m[2] as string;
    if (!labels.includes(`model="${model}"`)) continue;
    if (m[1] === 'bucket') le.set(/le="([^"]+)"/.exec(labels)?.[1] ?? '', Number(m[3]));
    else if (m[1] === 'sum') sum = Number(m[3]);
    else count = Number(m[3]);
  }
  return { le, sum, count };
}

test('volunteers behind NAT on broadband and far links serve the hub: tokens identical to --dispatch off, far pairs counted, added latency in the metrics', {
  timeout: 300_000,
}, async (t) => {
  const t0 = Date.now();
  const m = await testModel(QWEN_Q4K);
  const want = await baselineIds(m, N);
  const tBaseline = Date.now();
  const dir = mkdtempSync(join(tmpdir(), 'xs-netlab-swarm-'));
  let lab: Lab | undefined;
  const procs: Proc[] = [];
  try {
    lab = await createLab({
      homes: [
        { name: 'bb', profile: 'broadband' },
        { name: 'far', profile: 'far' },
      ],
      tcpPorts: [HUB_PORT],
    });
    const hubArgs = ['hub', '--model', `m=${m.path}`, '--host', '0.0.0.0', '--port', String(HUB_PORT), '--state', join(dir, 'state')];
    hubArgs.push('--dispatch', 'always', '--probation', '0', '--audit-rate', '0', '--slots', '1', '--target-base', '1');
    // The deadline leaves room for a 140 ms round trip plus SwiftShader on busy cores; heartbeats every 2 s, so a
    // retransmitted frame (1% loss) never looks like a dead channel (idle timeout 3 × heartbeat).
    hubArgs.push('--dispatch-deadline-ms', '3000', '--heartbeat-ms', '2000');
    const hub = keepLog(lab.spawn('hub', process.execPath, [BIN, ...hubArgs]));
    procs.push(hub);
    const url = await lab.portal('hub', HUB_PORT);
    await until('the hub in its namespace answering', 60_000, async () => {
      if (hub.proc.exitCode !== null) throw new Error(`the hub exited: ${hub.log()}`);
      const ok = await fetch(`${url}/v1/models`).then(
        (r) => r.ok,
        () => false,
      );
      return ok ? true : undefined;
    });
    for (const home of ['bb', 'far']) {
      const args = [
        'volunteer',
        '--hub',
        `http://${HUB_ADDRESS}:${HUB_PORT}`,
        '--worker-id',
        home,
        '--backend',
        'webgpu',
        '--max-slices',
        '1',
      ];
      args.push('--identity', join(dir, `${home}.key.json`), '--cache', join(dir, `${home}-shards`));
      procs.push(keepLog(lab.spawn(home, process.execPath, [BIN, ...args])));
    }
    const moeLayers = moeLayersOf(QWEN_Q4K);
    const rows = await until('each volunteer holding a layer, every layer covered', 150_000, async () => {
      for (const p of procs) if (p.proc.exitCode !== null) throw new Error(`a process exited: ${p.log().slice(-2000)}`);
      const r = await dispatchMap(url, 'm');
      const holders = new Set(r.map((x) => x.worker_id));
      const layers = new Set(r.map((x) => x.layer));
      return holders.has('bb') && holders.has('far') && moeLayers.every((l) => layers.has(l)) ? r : undefined;
    });
    const tCovered = Date.now();
    t.diagnostic(`slices: ${rows.map((r) => `${r.worker_id}: layer ${r.layer} [${r.experts}]`).join(', ')}`);

    const got = await completionIds(url, 'm', E2E_PROMPT, N, m.ban);
    const tDone = Date.now();
    assert.deepEqual(got, want, 'the tokens of --dispatch off, through NAT and the emulated links');

    const o = await pairOutcomes(url, 'm');
    const workers = ((await (await fetch(`${url}/api/dashboard/workers?model=m`)).json()) as { rows: WorkerRow[] }).rows;
    const w = Object.fromEntries(workers.map((r) => [r.id, r]));
    const rt = await roundtrips(url, 'm');
    const within = (le: string): number => rt.le.get(le) ?? 0;
    t.diagnostic(
      `pairs ${JSON.stringify(o)}; bb served ${w.bb?.pairsServed} (latency ${w.bb?.latencyMs} ms), far served ${w.far?.pairsServed} ` +
        `(latency ${w.far?.latencyMs} ms); dispatch round trips: ${rt.count}, mean ${((1000 * rt.sum) / Math.max(1, rt.count)).toFixed(1)} ms, ` +
        `≤ 25 ms: ${within('0.025')}, ≤ 100 ms: ${within('0.1')}, > 100 ms: ${rt.count - within('0.1')}`,
    );
    t.diagnostic(
      `time: baseline ${((tBaseline - t0) / 1000).toFixed(1)} s, lab + hub + volunteers to coverage ${((tCovered - tBaseline) / 1000).toFixed(1)} s, ` +
        `${N} tokens ${((tDone - tCovered) / 1000).toFixed(1)} s`,
    );
    const routed = (o.served as number) + (o.fallback as number) + (o.rejected as number);
    assert.ok(routed >= N * moeLayers.length * QWEN_Q4K.nExpertUsed, `every routed pair is counted: ${JSON.stringify(o)}`);
    assert.ok((o.served as number) >= 0.9 * routed, `volunteers behind NAT served ${o.served} of ${routed} routed pairs`);
    assert.equal(o.rejected, 0);
    assert.ok((w.far?.pairsServed ?? 0) > 0, `the far volunteer served pairs: ${JSON.stringify(w.far)}`);
    assert.ok((w.bb?.pairsServed ?? 0) > 0, `the broadband volunteer served pairs: ${JSON.stringify(w.bb)}`);
    assert.equal((w.far?.pairsServed ?? 0) + (w.bb?.pairsServed ?? 0), o.served, 'every served pair is one of theirs');
    // The hub sees each link's round trip: far's above its shortest (100 ms), broadband's above its own (25 ms).
    const far = PROFILES.far;
    const bb = PROFILES.broadband;
    assert.ok((w.far?.latencyMs ?? 0) >= far.rttMs - far.jitterMs, `the hub's latency for far: ${w.far?.latencyMs} ms`);
    assert.ok((w.bb?.latencyMs ?? 0) >= bb.rttMs - bb.jitterMs, `the hub's latency for broadband: ${w.bb?.latencyMs} ms`);
    assert.ok((w.far?.latencyMs ?? 0) > (w.bb?.latencyMs ?? 0), 'far is farther');
    // Each dispatched layer waits for one link's round trip: nothing returns under broadband's shortest (25 ms), and the
    // far layer's requests (about half) take over 100 ms.
    assert.ok(rt.count >= N * moeLayers.length, `a round trip per dispatched layer: ${rt.count}`);
    assert.ok(within('0.025') <= 0.05 * rt.count, `no layer comes back faster than the link allows: ${within('0.025')} of ${rt.count}`);
    assert.ok(
      rt.count - within('0.1') >= 0.3 * rt.count,
      `the far layer's round trips: ${rt.count - within('0.1')} of ${rt.count} over 100 ms`,
    );
  } finally {
    await lab?.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
