/**
 * bench:elastic's load in a process of its own (bench/elastic/lanes.ts): the parent (gain.ts) forks it once and sends
 * one message per round over the IPC channel; the lanes' records come back when the round has ended.
 *
 *   parent → { type: 'round', plan, count }     count requests, then the lanes end
 *   parent → { type: 'round', plan, count: null } until { type: 'stop' } (each lane finishes its request in flight)
 *   child  → { type: 'error', prompt, error }   a failed request, as it happens (logged by the parent)
 *   child  → { type: 'done', reqs, wallMs }
 */
import { type LanePlan, runLanes } from './lanes.ts';

type FromParent = { type: 'round'; plan: LanePlan; count: number | null } | { type: 'stop' };

if (!process.send) throw new Error('bench/elastic/load-child.ts runs as a forked child of bench/elastic/gain.ts');
const send = (m: unknown): void => void process.send?.(m);
let stopped = false;

process.on('message', (m: FromParent) => {
  if (m.type === 'stop') {
    stopped = true;
    return;
  }
  stopped = false;
  const count = m.count;
  void runLanes(
    m.plan,
    (sent) => (count === null ? !stopped : sent < count),
    (r) => send({ type: 'error', prompt: r.prompt, error: r.error }),
  ).then(({ reqs, wallMs }) => send({ type: 'done', reqs, wallMs }));
});
process.on('disconnect', () => process.exit(0));
