/**
 * Starts and supervises one linkcpp-server per model (restart with backoff on crash), or registers an external
 * llama-server-compatible coordinator by URL. The API asks `available(name)` before proxying; while a coordinator is
 * (re)starting it gets a 503 with Retry-After.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { HubError } from './errors.ts';
import { freePort } from './net.ts';

export interface ManagedSpec {
  name: string;
  modelPath: string;
  binary: string;
  slots: number;
  ctxPerSlot: number;
  threads?: number;
  /** Unix socket of the hub's dispatcher for this model, passed as --expert-dispatch. */
  dispatchSocket?: string;
  extraArgs?: string[];
}

export type CoordinatorState = 'starting' | 'ready' | 'restarting' | 'stopped' | 'external';

export interface CoordinatorStatus {
  name: string;
  url: string | null;
  state: CoordinatorState;
  restarts: number;
  pid: number | null;
  lastExit: string | null;
  /**
   * Why the coordinator computes some MoE layers itself whatever the swarm holds: its expert-dispatch hook's note
   * ("architecture gpt-oss uses an expert FFN variant the dispatch path does not cover: expert biases …"); null when
   * it logged none.
   */
  dispatchUnsupported: string | null;
}

/** The line the expert-dispatch hook logs once when a layer cannot take the dispatch path (llama-expert-dispatch.cpp). */
const UNSUPPORTED_LINE = /expert-dispatch: (.+); those layers run the stock path/;
/** A note longer than this is cut (a log line is the coordinator's to write, not ours to trust). */
const NOTE_MAX = 400;

/** The hook's "not dispatched" note in one line of the coordinator's log, or null. */
export function dispatchUnsupportedNote(line: string): string | null {
  const m = UNSUPPORTED_LINE.exec(line);
  if (!m) return null;
  const note = (m[1] as string).trim();
  return note.length > NOTE_MAX ? `${note.slice(0, NOTE_MAX)}…` : note;
}

const BACKOFF_MIN_MS = 500;
const BACKOFF_MAX_MS = 30_000;
/** Uptime after which the backoff starts again from the minimum. */
const HEALTHY_RESET_MS = 60_000;
const START_TIMEOUT_MS = 120_000;
const LOG_LINES = 200;

class Managed {
  state: CoordinatorState = 'starting';
  url: string | null = null;
  restarts = 0;
  lastExit: string | null = null;
  dispatchUnsupported: string | null = null;
  proc: ChildProcess | null = null;
  private backoffMs = BACKOFF_MIN_MS;
  private startedAt = 0;
  private stopping = false;
  private timer: NodeJS.Timeout | null = null;
  readonly log: string[] = [];

  constructor(
    readonly spec: ManagedSpec,
    private readonly onState: (name: string, state: CoordinatorState, detail: string) => void,
    private readonly onNote: (name: string, note: string) => void,
  ) {}

  async start(): Promise<void> {
    if (this.stopping) return;
    if (!existsSync(this.spec.binary)) throw new Error(`coordinator binary ${this.spec.binary} is missing (npm run build:coordinator)`);
    const port = await freePort();
    const s = this.spec;
    const args = [
      '-m',
      s.modelPath,
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      '--alias',
      s.name,
      '-np',
      String(s.slots),
      '-c',
      String(s.slots * s.ctxPerSlot),
      '--metrics',
      '--slots',
      ...(s.threads ? ['-t', String(s.threads)] : []),
      ...(s.dispatchSocket ? ['--expert-dispatch', s.dispatchSocket] : []),
      ...(s.extraArgs ?? []),
    ];
    // The coordinator does not outlive this hub (its expert-dispatch hook asks the kernel for SIGKILL when we die): a
    // SIGKILLed hub leaves no coordinator serving unsupervised; the next hub starts a fresh one.
    const proc = spawn(s.binary, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, LINKCPP_EXIT_WITH_PARENT: String(process.pid) },
    });
    this.proc = proc;
    this.startedAt = Date.now();
    const keep = (d: Buffer): void => {
      for (const line of d.toString().split('\n')) {
        if (!line) continue;
        this.log.push(line);
        const note = dispatchUnsupportedNote(line);
        if (note !== null && note !== this.dispatchUnsupported) {
          this.dispatchUnsupported = note;
          this.onNote(this.spec.name, note);
        }
      }
      if (this.log.length > LOG_LINES) this.log.splice(0, this.log.length - LOG_LINES);
    };
    proc.stdout?.on('data', keep);
    proc.stderr?.on('data', keep);
    proc.on('exit', (code, signal) => this.exited(proc, code, signal));
    const url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + START_TIMEOUT_MS;
    while (Date.now() < deadline && this.proc === proc && proc.exitCode === null && !this.stopping) {
      try {
        const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) });
        if (r.ok) {
          this.url = url;
          this.state = 'ready';
          this.onState(s.name, 'ready', `pid ${proc.pid} on ${url}`);
          return;
        }
      } catch {
        // not up yet
      }
      await new Promise((r) => setTimeout(r, 200));
    }
    if (this.proc === proc && proc.exitCode === null && !this.stopping) proc.kill('SIGKILL'); // did not come up in time
  }

  private exited(proc: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.proc !== proc) return;
    this.proc = null;
    this.url = null;
    this.lastExit = signal ? `signal ${signal}` : `exit code ${code}`;
    if (this.stopping) {
      this.state = 'stopped';
      return;
    }
    if (Date.now() - this.startedAt > HEALTHY_RESET_MS) this.backoffMs = BACKOFF_MIN_MS;
    this.state = 'restarting';
    this.restarts++;
    const wait = this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, BACKOFF_MAX_MS);
    const tail = this.log.slice(-5).join('\n');
    this.onState(this.spec.name, 'restarting', `${this.lastExit}; restarting in ${wait} ms${tail ? `\n${tail}` : ''}`);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.start().catch((e: Error) => this.onState(this.spec.name, 'restarting', e.message));
    }, wait);
  }

  retryAfterS(): number {
    return Math.max(1, Math.ceil(this.backoffMs / 1000));
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearTimeout(this.timer);
    const proc = this.proc;
    if (!proc || proc.exitCode !== null) {
      this.state = 'stopped';
      return;
    }
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    proc.kill('SIGTERM');
    const kill = setTimeout(() => proc.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(kill);
  }
}

export class CoordinatorSupervisor {
  private managed = new Map<string, Managed>();
  private external = new Map<string, string>();

  /**
   * `onState`: a coordinator changed state. `onNote`: its expert-dispatch hook said why some MoE layers stay local
   * (an architecture or expert FFN variant the dispatch path does not cover), once per distinct note.
   */
  constructor(
    private readonly onState: (name: string, state: CoordinatorState, detail: string) => void = () => {},
    private readonly onNote: (name: string, note: string) => void = () => {},
  ) {}

  addManaged(spec: ManagedSpec): void {
    this.assertNew(spec.name);
    this.managed.set(spec.name, new Managed(spec, this.onState, this.onNote));
  }

  addExternal(name: string, url: string): void {
    this.assertNew(name);
    this.external.set(name, url.replace(/\/+$/, ''));
  }

  private assertNew(name: string): void {
    if (this.managed.has(name) || this.external.has(name)) throw new Error(`two coordinators are named ${name}`);
  }

  /** Starts every managed coordinator and waits until each is ready or has failed its first start. */
  async start(): Promise<void> {
    await Promise.all([...this.managed.values()].map((m) => m.start()));
  }

  async stop(): Promise<void> {
    await Promise.all([...this.managed.values()].map((m) => m.stop()));
  }

  names(): string[] {
    return [...this.managed.keys(), ...this.external.keys()];
  }

  has(name: string): boolean {
    return this.managed.has(name) || this.external.has(name);
  }

  /** URL of a coordinator that can take requests now; throws COORDINATOR_UNAVAILABLE (503 + Retry-After) otherwise. */
  available(name: string): string {
    const ext = this.external.get(name);
    if (ext) return ext;
    const m = this.managed.get(name);
    if (!m) throw new HubError('MODEL_UNKNOWN', `no model named "${name}" is served here`);
    if (m.state === 'ready' && m.url) return m.url;
    throw new HubError('COORDINATOR_UNAVAILABLE', `the coordinator of "${name}" is ${m.state}; try again shortly`, {
      'retry-after': String(m.retryAfterS()),
    });
  }

  /** URL for polling, or null while it has none. */
  urlOf(name: string): string | null {
    return this.external.get(name) ?? this.managed.get(name)?.url ?? null;
  }

  status(): CoordinatorStatus[] {
    return [
      ...[...this.managed.values()].map((m) => ({
        name: m.spec.name,
        url: m.url,
        state: m.state,
        restarts: m.restarts,
        pid: m.proc?.pid ?? null,
        lastExit: m.lastExit,
        dispatchUnsupported: m.dispatchUnsupported,
      })),
      ...[...this.external.entries()].map(([name, url]) => ({
        name,
        url,
        state: 'external' as const,
        restarts: 0,
        pid: null,
        lastExit: null,
        dispatchUnsupported: null,
      })),
    ];
  }

  /** The child process of a managed coordinator (tests kill it to check the restart path). */
  processOf(name: string): ChildProcess | null {
    return this.managed.get(name)?.proc ?? null;
  }
}
