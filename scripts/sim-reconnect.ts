/**
 * 10,000 volunteers and a hub that dies (issue 14, docs/faults.md "A hub killed"): real volunteer clients on real
 * WebSockets hold a hub's channel, the hub crashes and a new one starts on the same port and state, and the new hub
 * notes every upgrade request and completed hello. Run twice with the same volunteers: the client as shipped (full
 * jitter, volunteer/backoff.ts) and a control whose every volunteer redials after a fixed 500 ms, after one crash
 * not reported that warms both processes up. Prints the two side by side: reconnected, time to all, the peak 100 ms
 * against an even spread over the first retry's window, arrivals in the first 100 ms, refusals, redials in step, and
 * the histograms. The simulation is harness/reconnect-sim.ts.
 *
 *   npm run sim:reconnect [-- --volunteers 10000 --seed 1 --policies jittered,fixed --restart-delay-ms 0]
 *
 * The new hub listens at once after the crash unless `--restart-delay-ms` says otherwise (then the volunteers that
 * dial before it are refused and back off again, which the printed refusals show).
 *
 * 10,000 clients and 10,000 hub-side sockets need about 10,000 descriptors in each of the two processes: the npm
 * script raises the soft limit to the hard one first.
 */
import { cpus, loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { formatReconnectSim, runReconnectSim, type RedialPolicy } from '../harness/reconnect-sim.ts';

const { values } = parseArgs({
  options: {
    volunteers: { type: 'string', default: '10000' },
    seed: { type: 'string', default: '1' },
    policies: { type: 'string', default: 'jittered,fixed' },
    'timeout-s': { type: 'string', default: '300' },
    'restart-delay-ms': { type: 'string', default: '0' },
  },
});
const volunteers = Number(values.volunteers);
const seed = Number(values.seed);
const timeoutS = Number(values['timeout-s']);
const restartDelayMs = Number(values['restart-delay-ms']);
const policies = values.policies.split(',').map((p) => p.trim()) as RedialPolicy[];
if (!Number.isInteger(volunteers) || volunteers < 1) throw new Error(`--volunteers must be a positive integer, got ${values.volunteers}`);
if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error(`--seed must be an integer in [0, 2^32), got ${values.seed}`);
if (!(restartDelayMs >= 0)) throw new Error(`--restart-delay-ms must be ≥ 0, got ${values['restart-delay-ms']}`);
if (!(timeoutS > 0)) throw new Error(`--timeout-s must be positive, got ${values['timeout-s']}`);
for (const p of policies) if (p !== 'jittered' && p !== 'fixed') throw new Error(`--policies: jittered or fixed, got ${p}`);

console.log(
  `sim:reconnect ${new Date().toISOString()}: ${volunteers} volunteers, policies ${policies.join(', ')}, seed ${seed}; ` +
    `${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}, load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
);
const r = await runReconnectSim({
  volunteers,
  policies,
  seed,
  restartDelayMs,
  warmUp: true,
  timeoutMs: timeoutS * 1000,
  log: (l) => console.log(l),
});
console.log(`\n${formatReconnectSim(r)}`);
console.log(
  `\nload average at the end ${loadavg()
    .map((x) => x.toFixed(1))
    .join(' ')}`,
);
process.exit(r.phases.every((p) => p.reconnected === volunteers) ? 0 : 1);
