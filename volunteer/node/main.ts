/**
 * `npx expertswarm volunteer --hub URL`: the volunteer client in Node, for machines that help without a browser
 * (GPU servers: npm `webgpu` is Dawn), printing one status line per second.
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { WebSocket } from 'ws';
import { DEFAULT_MAX_SLICES, createVolunteerClient, type SocketFactory, type WorkTimings } from '../client.ts';
import { VOLUNTEER_LIMITS } from '../../protocol/channel/index.ts';
import type { BackendChoice } from '../engine-open.ts';
import type { HeldSlice, VolunteerControls, VolunteerState } from '../state.ts';
import { FileShardCache, DEFAULT_SHARD_CACHE_DIR } from './file-cache.ts';
import { FileIdentityStore, DEFAULT_IDENTITY_FILE, nodeEnvironment } from './environment.ts';

/** Work frames whose timings `--timings` keeps (the first ones; about 100 bytes each). */
const MAX_TIMINGS = 200_000;

export const VOLUNTEER_USAGE = `usage: expertswarm volunteer --hub URL [options]

  --hub URL[,URL…]         the hub's address, e.g. http://127.0.0.1:8080; a cluster's other hubs after commas:
                           each retry dials the next (docs/cluster.md)
  --model NAME             serve only this model (default: whichever needs help)
  --budget-mb N            memory lent to the slices it holds, MiB (default 2048)
  --max-experts N          widest slice to take (default: no limit)
  --max-slices N           slices held at once, 1–256 (default 64; the budget bounds them first)
  --backend B              auto | webgpu | wasm (default auto: both measured, the faster kept)
  --worker-id ID           stable id of this volunteer (default: a new one per run)
  --identity FILE          ed25519 key file, made on first run (default ${DEFAULT_IDENTITY_FILE})
  --cache DIR              slice cache (default ${DEFAULT_SHARD_CACHE_DIR})
  --quiet                  no status line
  --timings FILE           on exit, write each answered work frame's timings there as JSON (benchmarks)
  --help                   this text
`;

export interface VolunteerArgs {
  hub: string;
  /** The other hubs of a cluster (`--hub A,B,C`): a retry dials the next (docs/cluster.md). */
  otherHubs?: string[];
  model: string;
  budgetBytes: number;
  maxExperts: number;
  maxSlices: number;
  backend: BackendChoice;
  workerId: string;
  identity: string;
  cache: string;
  quiet: boolean;
  /** Where to write the work frames' timings on exit (null: not kept). */
  timings: string | null;
}

export function parseVolunteerArgs(argv: string[]): VolunteerArgs | 'help' {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      hub: { type: 'string' },
      model: { type: 'string' },
      'budget-mb': { type: 'string' },
      'max-experts': { type: 'string' },
      'max-slices': { type: 'string' },
      backend: { type: 'string' },
      'worker-id': { type: 'string' },
      identity: { type: 'string' },
      cache: { type: 'string' },
      quiet: { type: 'boolean' },
      timings: { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) return 'help';
  if (!values.hub) throw new Error('--hub URL is required');
  const hubs = values.hub.split(',').map((h) => {
    const u = new URL(h.trim());
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`--hub must be an http(s) URL, got ${h}`);
    return u.origin;
  });
  const int = (v: string | undefined, name: string, def: number, min: number): number => {
    if (v === undefined) return def;
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be an integer ≥ ${min}, got "${v}"`);
    return n;
  };
  const backend = values.backend ?? 'auto';
  if (values['max-slices'] !== undefined && Number(values['max-slices']) > VOLUNTEER_LIMITS.maxSlices)
    throw new Error(`--max-slices must be at most ${VOLUNTEER_LIMITS.maxSlices}, got "${values['max-slices']}"`);
  if (backend !== 'auto' && backend !== 'webgpu' && backend !== 'wasm')
    throw new Error(`--backend must be auto, webgpu or wasm, got "${backend}"`);
  return {
    hub: hubs[0] as string,
    otherHubs: hubs.slice(1),
    model: values.model ?? '',
    budgetBytes: int(values['budget-mb'], '--budget-mb', 2048, 1) * 2 ** 20,
    maxExperts: int(values['max-experts'], '--max-experts', 0, 0),
    maxSlices: int(values['max-slices'], '--max-slices', DEFAULT_MAX_SLICES, 1),
    backend,
    workerId: values['worker-id'] ?? `node-${randomUUID()}`,
    identity: values.identity ?? DEFAULT_IDENTITY_FILE,
    cache: values.cache ?? DEFAULT_SHARD_CACHE_DIR,
    quiet: values.quiet ?? false,
    timings: values.timings ?? null,
  };
}

/** The status line of a state, as the page says it in words. */
export function describeState(s: VolunteerState): string {
  switch (s.kind) {
    case 'idle':
      return 'idle';
    case 'connecting':
      return `connecting (attempt ${s.attempt})`;
    case 'retrying':
      return `hub unreachable (${s.reason}); retrying in ${s.inSeconds} s`;
    case 'waiting':
      return 'waiting for demand';
    case 'downloading':
      return `${s.fromCache ? 'cached' : 'downloading'} ${s.slice.model} layer ${s.slice.layer} [${s.slice.experts[0]}, ${s.slice.experts[1]}) ${Math.round((100 * s.loadedBytes) / Math.max(1, s.totalBytes))}%`;
    case 'starting':
      return `starting the engine for ${s.slice.model} layer ${s.slice.layer}`;
    case 'serving':
      return `serving ${s.slice.model} layer ${s.slice.layer} [${s.slice.experts[0]}, ${s.slice.experts[1]}) on ${s.backend}`;
    case 'paused':
      return 'paused';
    case 'released':
      return `released: ${s.reason}`;
    case 'failed':
      return `failed ${s.code}: ${s.message}${s.retrying ? '' : ' (not retrying)'}`;
    case 'left':
      return 'left';
  }
}

/** What it holds beyond the slice its state names: " · holds 4 slices, layers 0–3 (3.2 MiB)", or nothing for one. */
export function describeHeld(slices: readonly HeldSlice[]): string {
  if (slices.length < 2) return '';
  const layers = [...new Set(slices.map((x) => x.layer))].sort((x, y) => x - y);
  const mib = slices.reduce((n, x) => n + x.bytes, 0) / 2 ** 20;
  return ` · holds ${slices.length} slices, layers ${layers.join(', ')} (${mib.toFixed(1)} MiB)`;
}

export function startVolunteer(a: VolunteerArgs, onWorkTimings?: (t: WorkTimings) => void): VolunteerControls {
  const client = createVolunteerClient({
    hubUrl: a.hub,
    otherHubs: a.otherHubs ?? [],
    environment: (backend) => nodeEnvironment(backend),
    identity: new FileIdentityStore(a.identity),
    cache: new FileShardCache(a.cache),
    WebSocket: WebSocket as unknown as SocketFactory,
    workerId: a.workerId,
    model: a.model,
    maxExperts: a.maxExperts,
    maxSlices: a.maxSlices,
    agent: `headless/${process.version}`,
    ...(onWorkTimings ? { onWorkTimings } : {}),
  });
  client.join({ memoryBudgetBytes: a.budgetBytes, backend: a.backend });
  return client;
}

export async function main(argv: string[]): Promise<number> {
  let args: VolunteerArgs | 'help';
  try {
    args = parseVolunteerArgs(argv);
  } catch (e) {
    process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n\n${VOLUNTEER_USAGE}`);
    return 2;
  }
  if (args === 'help') {
    process.stdout.write(VOLUNTEER_USAGE);
    return 0;
  }
  const a = args;
  const timings: WorkTimings[] = [];
  const client = startVolunteer(a, a.timings ? (t) => (timings.length < MAX_TIMINGS ? timings.push(t) : undefined) : undefined);
  let variantsSaid = '';
  const timer = a.quiet
    ? null
    : setInterval(() => {
        const s = client.stats;
        const d = client.device;
        const variants = d ? d.variants.join(', ') : '';
        if (d && variants !== variantsSaid) {
          // Once the device is examined (again only if a rejoin changes it): the variants its hello announces, whose
          // layers alone the hub offers it.
          variantsSaid = variants;
          process.stdout.write(`[volunteer ${a.workerId}] computes expert variants: ${variants}\n`);
        }
        process.stdout.write(
          `[volunteer ${a.workerId}] ${describeState(client.state)}${describeHeld(s.slices)}${client.wallet ? ` · wallet ${client.wallet}` : ''} · pairs ${s.pairsServed} (${s.pairsPerSec.toFixed(1)}/s) · last ${s.lastLatencyMs === null ? '-' : `${s.lastLatencyMs.toFixed(1)} ms`} · credit ${s.credit}${d?.backend ? ` · ${d.backend} ${d.gflops?.toFixed(2) ?? '?'} GFLOP/s` : ''}\n`,
        );
      }, 1000);
  return new Promise<number>((resolve) => {
    const stop = (): void => {
      if (timer) clearInterval(timer);
      if (a.timings) {
        try {
          writeFileSync(a.timings, JSON.stringify(timings));
        } catch (e) {
          // A bench's file that cannot be written must not keep the volunteer from leaving cleanly.
          console.error(`[volunteer] --timings ${a.timings}: ${e instanceof Error ? e.message : e}`);
        }
      }
      void client.leave().then(() => resolve(0));
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    client.on('state', (s) => {
      if (s.kind === 'failed' && !s.retrying) {
        if (timer) clearInterval(timer);
        process.stderr.write(`[volunteer] ${describeState(s)}\n`);
        resolve(1);
      }
    });
  });
}
