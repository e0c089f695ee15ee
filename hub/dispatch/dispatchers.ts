/**
 * Every model's dispatcher, in one place: where each listens (a private temporary directory for managed
 * coordinators, a named path for external ones), its mode (`--dispatch`, changeable by an admin), how its coordinator
 * computes (from the HELLO), and the measurement seam that watches one model's data path. The hub supplies what a
 * dispatcher is built with (`DispatchersHost`); this module knows nothing else of the hub.
 *
 *   const ds = new Dispatchers(host);
 *   const path = ds.managedSocket('qwen3');   // given to the coordinator as --expert-dispatch
 *   await ds.start(); …; ds.get('qwen3')?.totals; await ds.close();
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Numerics } from '../../protocol/numerics.ts';
import { HubError } from '../errors.ts';
import { type DispatcherEvents, ModelDispatcher, type ModelDispatcherOptions, type ResponseSummary } from './dispatcher.ts';
import type { DispatchMode } from './policy.ts';

/** What a measurement may watch of one model's data path (`Hub.observeDispatch`; bench/dispatch.ts). */
export interface DispatchObserver {
  /** Every REQUEST the model's dispatcher answered: its ResponseSummary (times in ms from the REQUEST's arrival). */
  onResponse?(summary: ResponseSummary): void;
  /**
   * Every result a worker of this model sent over the volunteer channel, in time or not: the round trip from handing
   * the work frame to the socket to decoding the answer (ms), and the worker's own time on it (µs, as it reports).
   */
  onResult?(workerId: string, roundTripMs: number, computeUs: number): void;
}

/** What the hub gives each model's dispatcher. */
export interface DispatchersHost {
  /** `--dispatch`: the mode of a model no admin changed. */
  defaultMode: DispatchMode;
  /** The dispatcher's hooks for `model` (its serves, audits, misses, coordinator events). */
  events(model: string): DispatcherEvents;
  /** Everything else `model`'s dispatcher listens with. */
  options(model: string): Omit<ModelDispatcherOptions, 'model' | 'socketPath' | 'mode' | 'events' | 'acceptHello'>;
}

export class Dispatchers {
  private readonly running = new Map<string, ModelDispatcher>();
  /** Each dispatcher's event hooks: `observe` adds and removes its onResponse here. */
  private readonly hooks = new Map<string, DispatcherEvents>();
  /** Where each model's dispatcher listens. */
  private readonly paths = new Map<string, string>();
  /** How each model's coordinator computes, from its dispatch HELLO. */
  private readonly numerics = new Map<string, Numerics>();
  /** Modes an admin set. */
  private readonly modes = new Map<string, DispatchMode>();
  private socketDir: string | null = null;
  /** `observe`'s onResult, if one is set. */
  private resultObserver: ((workerId: string, roundTripMs: number, computeUs: number, model: string | undefined) => void) | null = null;

  constructor(private readonly host: DispatchersHost) {}

  /** A managed coordinator's dispatch socket: in a private temporary directory (unix socket paths are short). */
  managedSocket(model: string): string {
    if (!this.socketDir) {
      this.socketDir = mkdtempSync(join(tmpdir(), 'xs-'));
      mkdirSync(this.socketDir, { recursive: true, mode: 0o700 });
    }
    const path = join(this.socketDir, `${this.paths.size}.sock`);
    this.paths.set(model, path);
    return path;
  }

  /** An external coordinator's dispatcher listens at `path` (`--dispatch-socket NAME=PATH`). */
  externalSocket(model: string, path: string): void {
    this.paths.set(model, path);
  }

  /** Starts a dispatcher on every socket named so far. */
  async start(): Promise<void> {
    for (const [model, socketPath] of this.paths) {
      const events = this.host.events(model);
      const d = await ModelDispatcher.listen({
        ...this.host.options(model),
        model,
        socketPath,
        mode: this.modeOf(model),
        events,
        acceptHello: (hello) => {
          this.numerics.set(model, hello.numerics);
          return 0;
        },
      });
      this.running.set(model, d);
      this.hooks.set(model, events);
    }
  }

  /** Closes every dispatcher and removes the managed sockets' directory. */
  async close(): Promise<void> {
    for (const d of this.running.values()) await d.close();
    this.running.clear();
    if (this.socketDir) rmSync(this.socketDir, { recursive: true, force: true });
  }

  get(model: string): ModelDispatcher | undefined {
    return this.running.get(model);
  }

  /** Every dispatcher forgets a worker (it left, or was released or quarantined). */
  forget(workerId: string): void {
    for (const d of this.running.values()) d.forget(workerId);
  }

  /** How `model`'s coordinator computes: its HELLO's numerics (linkcpp-server computes as llama.cpp's CPU backend). */
  numericsOf(model: string): Numerics {
    return this.numerics.get(model) ?? 'llama';
  }

  modeOf(model: string): DispatchMode {
    return this.modes.get(model) ?? this.host.defaultMode;
  }

  setMode(model: string, mode: DispatchMode): void {
    this.modes.set(model, mode);
    this.running.get(model)?.setMode(mode);
  }

  /**
   * Measurement seam: `observer` sees `model`'s dispatcher responses and its workers' channel results until the
   * returned function is called. One observer at a time (a second replaces the first). Unobserved, neither hook is
   * set, so the data path pays nothing for it.
   *
   *   const stop = dispatchers.observe('m', { onResult: (id, rtMs, us) => overheadUs.push(rtMs * 1000 - us) });
   */
  observe(model: string, observer: DispatchObserver): () => void {
    const events = this.hooks.get(model);
    if (!events) throw new HubError('MODEL_UNKNOWN', `no dispatcher for "${model}" (unknown model, or the hub has not started)`);
    const { onResponse, onResult } = observer;
    if (onResponse) events.onResponse = onResponse;
    else delete events.onResponse;
    const watch = onResult
      ? (workerId: string, roundTripMs: number, computeUs: number, of: string | undefined) => {
          if (of === model) onResult(workerId, roundTripMs, computeUs);
        }
      : null;
    this.resultObserver = watch;
    return () => {
      if (events.onResponse === onResponse) delete events.onResponse;
      if (this.resultObserver === watch) this.resultObserver = null;
    };
  }

  /** A worker of `model` (undefined: it covers none now) sent a channel result: for the observer, if any. */
  result(workerId: string, roundTripMs: number, computeUs: number, model: string | undefined): void {
    this.resultObserver?.(workerId, roundTripMs, computeUs, model);
  }
}
