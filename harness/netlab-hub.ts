/**
 * A hub in the network lab's hub namespace (issue 29, docs/netlab.md), in its own process (harness/hub-process.ts: a
 * HubConfig and a pages folder as JSON; it prints a ready line and closes on SIGTERM or when its stdin closes).
 *
 *   const hub = startLabHub(lab, { config: { host: HUB_ADDRESS, port: 8080, … }, pagesDir });
 *   await hub.ready;            // bounded: 90 s, or the hub's exit, with its log
 *   …
 *   await stopLabHub(hub.proc); // SIGTERM, SIGKILL after 10 s
 */
import type { ChildProcess } from 'node:child_process';
import { HUB_PROCESS, type HubProcessSpec } from './hub-process.ts';
import type { Lab } from './netlab.ts';
import { until } from './swarm.ts';

export interface LabHub {
  proc: ChildProcess;
  /** The last 20,000 characters of its stdout and stderr. */
  log(): string;
  /** Resolves once it printed its ready line; rejects if it exits first or after 90 s. */
  ready: Promise<void>;
}

export function startLabHub(lab: Lab, spec: HubProcessSpec): LabHub {
  const proc = lab.spawn('hub', process.execPath, ['--import', 'tsx', HUB_PROCESS, JSON.stringify(spec)]);
  let out = '';
  const keep = (d: Buffer): void => {
    out = (out + d.toString()).slice(-20_000);
  };
  proc.stdout?.on('data', keep);
  proc.stderr?.on('data', keep);
  const ready = until('the hub in its namespace ready', 90_000, () => {
    if (proc.exitCode !== null) throw new Error(`the hub exited (${proc.exitCode}): ${out}`);
    return out.includes('"ready":true') ? true : undefined;
  }).then(() => {});
  ready.catch(() => {}); // awaited by its caller; a hub stopped before that is not an unhandled rejection
  return { proc, log: () => out, ready };
}

export async function stopLabHub(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  const gone = new Promise((r) => proc.once('exit', r));
  proc.kill('SIGTERM');
  const t = setTimeout(() => proc.kill('SIGKILL'), 10_000);
  await gone;
  clearTimeout(t);
}
