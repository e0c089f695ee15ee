/** Helpers for the cluster's unit tests and benches: another hub's worker record, and a fine-grained poll. */
import type { ClusterWorker } from '../hub/cluster/codec.ts';

/** A live worker record of hub-b (model m, layer 1 experts [0, 8)), as a hub writes it; `over` replaces fields. */
export function clusterWorker(over: Partial<ClusterWorker> = {}): ClusterWorker {
  return {
    v: 1,
    worker_id: 'w1',
    hub: 'hub-b',
    model: 'm',
    wallet: null,
    ranges: [[1, 0, 8]],
    replica: true,
    seen_ms: 0,
    attach_ms: 0,
    last_serve_ms: null,
    latency_ms: null,
    audits: 0,
    audits_passed: 0,
    audit_nmse_last: null,
    audit_nmse_max: null,
    quarantined: false,
    released: false,
    ...over,
  };
}

/** Polls `f` every 5 ms until it gives a value; throws after `ms` naming `what` (harness/swarm.ts's polls every 100). */
export async function until<T>(what: string, f: () => T | undefined, ms = 3_000): Promise<T> {
  const t0 = Date.now();
  for (;;) {
    const v = f();
    if (v !== undefined) return v;
    if (Date.now() - t0 > ms) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
