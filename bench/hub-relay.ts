/**
 * What the relay between hubs (issue 30; hub/cluster/relay-links.ts → relay-server.ts) adds to one work item: hub A's
 * round trip to a worker link on hub B that answers at once, so all that is timed is the hop itself — encoding, the
 * WebSocket over loopback, decoding, re-basing, the answer back. B runs in a child process (two event loops, as two
 * hubs); items go one at a time, as a layer's do on the critical path, at decode and prompt sizes.
 *
 *   npm run bench:hub-relay                      # nEmbd 2048 and 7168, 400 items per shape
 *   npm run bench:hub-relay -- --items 1000
 *
 * A layer whose pairs are served over the relay waits this much longer than with the worker on its own hub (plus the
 * network between the hubs, 0 here: loopback).
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { HubRelayServer, relayUrlOf } from '../hub/cluster/relay-server.ts';
import { RemoteHubLinks } from '../hub/cluster/relay-links.ts';
import { clusterWorker } from '../harness/cluster-fixtures.ts';
import type { WorkItem, WorkerLink } from '../hub/dispatch/worker-link.ts';

const TOKEN = 'bench-relay-token-0123456789';
const N_EXPERT = 256;

if (process.argv.includes('--serve')) {
  // Hub B: one worker "w" holding every expert of layer 0, answering zeros at once.
  const link: WorkerLink = {
    workerId: 'w',
    layer: 0,
    begin: 0,
    end: N_EXPERT,
    inFlight: 0,
    compute: async (w) => ({ sums: new Float32Array(w.nRows * w.nEmbd), computeUs: 0 }),
  };
  const relay = new HubRelayServer({
    token: () => TOKEN,
    linkOf: (_m, id, l) => (id === 'w' && l === 0 ? link : undefined),
    event: () => {},
  });
  const server = createServer();
  relay.attach(server);
  server.listen(0, '127.0.0.1', () => console.log(`url ${relayUrlOf(server.address() as AddressInfo)}`));
  process.on('disconnect', () => process.exit(0));
} else {
  await main();
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { items: { type: 'string', default: '400' } } });
  const items = Number(values.items);
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--serve'], {
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('hub B did not start within 20 s')), 20_000);
    let out = '';
    child.stdout?.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /url (\S+)/.exec(out);
      if (m) {
        clearTimeout(t);
        resolve(m[1] as string);
      }
    });
  });
  const links = new RemoteHubLinks({ selfId: 'bench-a', relayOf: () => ({ url, token: TOKEN }), event: () => {} });
  links.update('m', [clusterWorker({ worker_id: 'w', hub: 'bench-b', ranges: [[0, 0, N_EXPERT]] })]);
  const t0 = Date.now();
  while (!links.openHubs().includes('bench-b')) {
    if (Date.now() - t0 > 10_000) throw new Error('the relay did not open within 10 s');
    await new Promise((r) => setTimeout(r, 10));
  }
  const link = links.directory('m').workersFor(0)[0] as WorkerLink;
  console.log(`relay hop, one item at a time (hub B a child process on loopback; ${items} items per shape after 50 warm-up)`);
  console.log('n_embd  rows  pairs  WORK KiB   p50 ms   p90 ms   p99 ms  mean ms');
  for (const nEmbd of [2048, 7168]) {
    for (const [nRows, nPairs] of [
      [1, 8],
      [8, 64],
      [64, 512],
    ] as const) {
      const w: WorkItem = {
        layer: 0,
        nEmbd,
        rows: Float32Array.from({ length: nRows * nEmbd }, (_, i) => Math.sin(i)),
        nRows,
        nPairs,
        rowIndex: Uint32Array.from({ length: nPairs }, (_, p) => p % nRows),
        localExpert: Uint16Array.from({ length: nPairs }, (_, p) => (p * 37) % N_EXPERT),
        weight: Float32Array.from({ length: nPairs }, () => 0.125),
      };
      const ms: number[] = [];
      for (let i = 0; i < 50 + items; i++) {
        const s = performance.now();
        await link.compute(w, 1_000);
        if (i >= 50) ms.push(performance.now() - s);
      }
      ms.sort((a, b) => a - b);
      const q = (p: number) => (ms[Math.min(ms.length - 1, Math.floor(p * ms.length))] as number).toFixed(3).padStart(8);
      const kib = ((nRows * nEmbd * 4 + nPairs * 10) / 1024).toFixed(1).padStart(9);
      const mean = (ms.reduce((a, b) => a + b, 0) / ms.length).toFixed(3).padStart(8);
      console.log(
        `${String(nEmbd).padStart(6)} ${String(nRows).padStart(5)} ${String(nPairs).padStart(6)} ${kib} ${q(0.5)} ${q(0.9)} ${q(0.99)} ${mean}`,
      );
    }
  }
  links.close();
  child.kill('SIGTERM');
}
