/**
 * What a process holds in memory, from /proc (Linux): its /proc/<pid>/status totals, its major page faults, and which
 * bytes of a mapped model file are resident in its page tables, split into the routed-expert tensors and the rest.
 * Used by test/integration/experts-on-demand.test.ts and bench/elastic/memory.ts (--experts-on-demand).
 *
 * Residency comes from /proc/<pid>/pagemap (bit 63 of each page's entry: present; readable without root, which only
 * hides the frame numbers), so it counts the pages the process has mapped, not the file's page cache at large.
 */
import { closeSync, fdatasyncSync, openSync, readFileSync, readSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { openFileSource } from '../gguf/node-io.ts';
import { readGGUF } from '../gguf/reader.ts';
import { tensorDataRange } from '../gguf/types.ts';

const PAGE = 4096;

/**
 * /proc/<pid>/status in bytes, the major faults of /proc/<pid>/stat, and the bytes it had read from storage
 * (/proc/<pid>/io read_bytes: page faults that had to read the file count there; the major-fault count misses some
 * of them on this kernel, e.g. faults over a multi-token batch).
 */
export interface ProcMemory {
  vmRss: number;
  rssFile: number;
  rssAnon: number;
  majorFaults: number;
  readBytes: number;
}

export function procMemory(pid: number): ProcMemory {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN) * 1024;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces): state is field 3, majflt field 12.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  let readBytes = Number.NaN;
  try {
    readBytes = Number(/^read_bytes: (\d+)/m.exec(readFileSync(`/proc/${pid}/io`, 'utf8'))?.[1] ?? Number.NaN);
  } catch {
    // another user's process
  }
  return { vmRss: kb('VmRSS'), rssFile: kb('RssFile'), rssAnon: kb('RssAnon'), majorFaults: Number(f[9]), readBytes };
}

/** Byte ranges [start, end) of a GGUF's routed-expert tensors (ffn_{gate,up,down,gate_up}_exps) and its size. */
export interface ModelLayout {
  fileBytes: number;
  expertRanges: Array<[number, number]>;
  expertBytes: number;
  /** Tensor data outside the routed experts (attention, norms, router, embeddings, output). */
  otherTensorBytes: number;
}

export async function modelLayout(path: string): Promise<ModelLayout> {
  const src = await openFileSource(path);
  try {
    const g = await readGGUF(src);
    const expertRanges: Array<[number, number]> = [];
    let expertBytes = 0;
    let otherTensorBytes = 0;
    for (const t of g.tensors) {
      const { start, end } = tensorDataRange(g, t);
      if (/\.ffn_(gate|up|down|gate_up)_exps\./.test(t.name)) {
        expertRanges.push([start, end]);
        expertBytes += end - start;
      } else otherTensorBytes += end - start;
    }
    return { fileBytes: src.size, expertRanges, expertBytes, otherTensorBytes };
  } finally {
    await src.close();
  }
}

/** Resident bytes of `path` in `pid`'s mappings: in the routed-expert tensors and elsewhere in the file. */
export interface FileResidency {
  experts: number;
  other: number;
}

export function fileResidency(pid: number, file: string, layout: ModelLayout): FileResidency {
  const path = resolve(file);
  const resident: Array<[number, number]> = [];
  const fd = openSync(`/proc/${pid}/pagemap`, 'r');
  try {
    for (const line of readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')) {
      const m = /^([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \d+\s+(.*)$/.exec(line);
      if (!m || m[4] !== path) continue;
      const from = Number.parseInt(m[1] as string, 16);
      const to = Number.parseInt(m[2] as string, 16);
      const fileOffset = Number.parseInt(m[3] as string, 16);
      const pages = (to - from) / PAGE;
      const buf = Buffer.alloc(pages * 8);
      readSync(fd, buf, 0, buf.length, (from / PAGE) * 8);
      for (let i = 0; i < pages; i++) {
        if ((buf.readUInt32LE(i * 8 + 4) & 0x8000_0000) === 0) continue;
        const o = fileOffset + i * PAGE;
        const last = resident[resident.length - 1];
        if (last && last[1] === o) last[1] = o + PAGE;
        else resident.push([o, o + PAGE]);
      }
    }
  } finally {
    closeSync(fd);
  }
  let total = 0;
  let experts = 0;
  for (const [a, b] of resident) {
    total += b - a;
    for (const [s, e] of layout.expertRanges) experts += Math.max(0, Math.min(b, e) - Math.max(a, s));
  }
  return { experts, other: total - experts };
}

/**
 * Drops `path` from the page cache (written back first; `dd iflag=nocache` is posix_fadvise DONTNEED), so that what a
 * process maps next is read from the disk in its own page-sized pieces: pages already cached may sit in large folios
 * (the writer's or another reader's), and mapping one page of a large folio maps all of it, which blurs residency.
 * Pages that a live process maps stay cached.
 */
export function dropFromPageCache(path: string): void {
  const fd = openSync(path, 'r+');
  try {
    fdatasyncSync(fd);
  } finally {
    closeSync(fd);
  }
  execFileSync('dd', [`if=${path}`, 'iflag=nocache', 'count=0', 'status=none']);
}

export const MiB = (n: number): string => (n / 2 ** 20).toFixed(1);
