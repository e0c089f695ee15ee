/**
 * CPU placement for the benchmarks that pin processes to cores (bench:elastic, bench:dispatch): every thread of a
 * process onto a taskset list, and the check that they are all still there.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

export function taskset(args: string[]): string {
  const r = spawnSync('taskset', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`taskset ${args.join(' ')}: ${r.error?.message ?? r.stderr.trim()}`);
  return r.stdout.trim();
}

/** The CPU lists the threads of `pid` may run on (/proc/PID/task/*), each with how many threads have it. */
export function threadAffinity(pid: number): { threads: number; lists: Map<string, number> } {
  const lists = new Map<string, number>();
  let threads = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
      const list = /Cpus_allowed_list:\s*(\S+)/.exec(status)?.[1] ?? '?';
      lists.set(list, (lists.get(list) ?? 0) + 1);
      threads++;
    } catch {
      // the thread ended meanwhile
    }
  }
  return { threads, lists };
}

/** `taskset -p` of the process and every thread's list; throws when a thread may run elsewhere than `cores`. */
export function checkAffinity(name: string, pid: number, cores: string): string {
  const main = taskset(['-cp', String(pid)]);
  const { threads, lists } = threadAffinity(pid);
  const all = [...lists.entries()].map(([l, n]) => `${n} on ${l}`).join(', ');
  if (lists.size !== 1 || !lists.has(cores)) throw new Error(`${name} (pid ${pid}): threads ${all}, want all on ${cores}`);
  return `${name}: ${main.replace(/^pid \d+'s current /, '')}; ${threads} threads, all on ${cores}`;
}

/** Pins every thread of `pid` to `cores`; says which threads were elsewhere before. */
export function pin(name: string, pid: number, cores: string): string {
  const { lists } = threadAffinity(pid);
  const elsewhere = [...lists.entries()].filter(([l]) => l !== cores);
  taskset(['-a', '-cp', cores, String(pid)]);
  const moved = elsewhere.length ? ` (moved: ${elsewhere.map(([l, n]) => `${n} threads on ${l}`).join(', ')})` : '';
  return `${checkAffinity(name, pid, cores)}${moved}`;
}
