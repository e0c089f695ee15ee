/**
 * The scenario's recorder: what the hub says while the load comes and goes, from its public API only, so the timeline
 * shows what an operator's dashboard shows.
 *
 * - `GET /api/dashboard/stream`: a tick a second (busy slots, saturated/recruiting, effective target, workers by
 *   state, dispatched pairs/s by outcome, tokens/s) and every hub event (saturation onset/end, recruit, release, …).
 * - `GET /api/expert-dispatch-map` every `mapPollMs`: each worker's state and last serve. A worker's first serve is the
 *   first `last_serve_ms` seen, so it is late by at most the poll interval (the map is computed per request; the
 *   workers table is rebuilt once a second and would add up to a second).
 * - `sampleLoad()`: the load generator's lanes, requests in flight and streams generating, once per tick.
 *
 *   const rec = await TimelineRecorder.start(url, 'm', () => ({ lanes: 0, inFlight: 0, streaming: 0 }));
 *   await rec.waitEvent('saturation-onset', 60_000);
 *   const timeline = rec.stop();
 */
import { get, type IncomingMessage } from 'node:http';
import type { HubEventKindName, HubEventRow, Sample, StreamMessages, WorkerStateName } from '../../protocol/dashboard.ts';

export interface LoadSample {
  /** Lanes of the load generator running. */
  lanes: number;
  /** Requests sent and not finished. */
  inFlight: number;
  /** Requests whose first token arrived and that have not ended. */
  streaming: number;
}

/** One dashboard tick of the scenario's model, with the load generator's state at its arrival. */
export interface TimelineTick {
  t: number;
  busy: number | null;
  slots: number | null;
  saturated: boolean;
  recruiting: boolean;
  effectiveTarget: number;
  baseTarget: number;
  workers: Record<WorkerStateName, number>;
  pairsPerS: Sample['pairsPerS'];
  tokensPerS: number | null;
  /** Volunteer channels by connection state (hello, waiting, loading, serving, paused). */
  volunteers: Record<string, number>;
  load: LoadSample;
}

/** One worker as the dispatch map showed it over the run. */
export interface WorkerTrace {
  /** First and last time the map listed it. */
  firstListedMs: number;
  lastListedMs: number;
  layer: number;
  experts: [number, number];
  /** The first `last_serve_ms` seen (≤ the true first serve + mapPollMs); null if it never served. */
  firstServeMs: number | null;
  /** Every distinct `last_serve_ms` seen, in order. */
  serves: number[];
  /** Its state each time it changed: [ms, state]. */
  states: Array<[number, string]>;
}

export interface Timeline {
  model: string;
  startedMs: number;
  stoppedMs: number;
  mapPollMs: number;
  ticks: TimelineTick[];
  events: HubEventRow[];
  workers: Record<string, WorkerTrace>;
}

interface MapRowLike {
  worker_id: string;
  layer: number;
  experts: [number, number];
  state: string;
  last_serve_ms: number | null;
}

export class TimelineRecorder {
  readonly ticks: TimelineTick[] = [];
  readonly events: HubEventRow[] = [];
  readonly workers = new Map<string, WorkerTrace>();
  private readonly startedMs = Date.now();
  private res: IncomingMessage | null = null;
  private buffer = '';
  private mapTimer: NodeJS.Timeout | null = null;
  private mapBusy = false;
  private lastEventSeq = 0;
  private streamError: Error | null = null;

  private constructor(
    private readonly url: string,
    private readonly model: string,
    private readonly sampleLoad: () => LoadSample,
    private readonly mapPollMs: number,
  ) {}

  /** Opens the stream (its snapshot's events count from `sinceMs` on) and starts polling the dispatch map. */
  static async start(url: string, model: string, sampleLoad: () => LoadSample, mapPollMs = 100): Promise<TimelineRecorder> {
    const rec = new TimelineRecorder(url, model, sampleLoad, mapPollMs);
    await rec.open();
    rec.mapTimer = setInterval(() => void rec.pollMap(), mapPollMs);
    return rec;
  }

  /** The first event of `kind` at or after `sinceMs` that passes `ok`; waits up to timeoutMs for it. */
  async waitEvent(
    kind: HubEventKindName,
    timeoutMs: number,
    sinceMs = 0,
    ok: (e: HubEventRow) => boolean = () => true,
  ): Promise<HubEventRow> {
    const found = await this.waitFor(`a ${kind} event`, timeoutMs, () =>
      this.events.find((e) => e.kind === kind && e.atMs >= sinceMs && e.model === this.model && ok(e)),
    );
    return found;
  }

  /** The first tick at or after `sinceMs` that passes `ok`; waits up to timeoutMs for it. */
  waitTick(what: string, timeoutMs: number, sinceMs: number, ok: (t: TimelineTick) => boolean): Promise<TimelineTick> {
    return this.waitFor(what, timeoutMs, () => this.ticks.find((t) => t.t >= sinceMs && ok(t)));
  }

  /** Polls `find` every 50 ms until it returns something; throws after timeoutMs, or at once if the stream failed. */
  async waitFor<T>(what: string, timeoutMs: number, find: () => T | undefined): Promise<T> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const v = find();
      if (v !== undefined) return v;
      if (this.streamError) throw new Error(`the dashboard stream failed while waiting for ${what}: ${this.streamError.message}`);
      if (Date.now() > until) throw new Error(`no ${what} within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  stop(): Timeline {
    if (this.mapTimer) clearInterval(this.mapTimer);
    this.mapTimer = null;
    this.res?.destroy();
    return {
      model: this.model,
      startedMs: this.startedMs,
      stoppedMs: Date.now(),
      mapPollMs: this.mapPollMs,
      ticks: this.ticks,
      events: this.events,
      workers: Object.fromEntries(this.workers),
    };
  }

  private open(): Promise<void> {
    return new Promise((resolve, reject) => {
      const req = get(`${this.url}/api/dashboard/stream`, { agent: false }, (res) => {
        if (res.statusCode !== 200) {
          reject(new Error(`GET /api/dashboard/stream answered ${res.statusCode}`));
          res.resume();
          return;
        }
        this.res = res;
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => this.onData(chunk));
        res.on('close', () => {
          if (this.mapTimer) this.streamError ??= new Error('the stream closed');
        });
        resolve();
      });
      req.on('error', (e) => {
        this.streamError ??= e;
        reject(e);
      });
    });
  }

  private onData(chunk: string): void {
    this.buffer += chunk;
    for (let i = this.buffer.indexOf('\n\n'); i >= 0; i = this.buffer.indexOf('\n\n')) {
      const block = this.buffer.slice(0, i);
      this.buffer = this.buffer.slice(i + 2);
      if (block.startsWith(':')) continue;
      const event = /^event: (\w+)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (!event || !data) continue;
      if (event === 'snapshot') {
        for (const e of (JSON.parse(data) as StreamMessages['snapshot']).events) this.addEvent(e);
      } else if (event === 'event') {
        this.addEvent(JSON.parse(data) as StreamMessages['event']);
      } else if (event === 'tick') {
        this.addTick(JSON.parse(data) as StreamMessages['tick']);
      }
    }
  }

  private addEvent(e: HubEventRow): void {
    if (e.seq <= this.lastEventSeq) return;
    this.lastEventSeq = e.seq;
    this.events.push(e);
  }

  private addTick(tick: StreamMessages['tick']): void {
    const m = tick.models.find((x) => x.model === this.model);
    const s = tick.samples[this.model];
    if (!m || !s) return;
    this.ticks.push({
      t: tick.atMs,
      busy: m.busy,
      slots: m.slots,
      saturated: m.saturated,
      recruiting: m.recruiting,
      effectiveTarget: m.effectiveTarget,
      baseTarget: m.baseTarget,
      workers: m.workers,
      pairsPerS: s.pairsPerS,
      tokensPerS: s.tokensPerS,
      volunteers: tick.totals.volunteers,
      load: this.sampleLoad(),
    });
  }

  private async pollMap(): Promise<void> {
    if (this.mapBusy) return;
    this.mapBusy = true;
    try {
      const r = await fetch(`${this.url}/api/expert-dispatch-map?model=${encodeURIComponent(this.model)}`, {
        signal: AbortSignal.timeout(5_000),
      });
      const rows = ((await r.json()) as { rows: MapRowLike[] }).rows;
      const now = Date.now();
      for (const row of rows) {
        let w = this.workers.get(row.worker_id);
        if (!w) {
          w = {
            firstListedMs: now,
            lastListedMs: now,
            layer: row.layer,
            experts: row.experts,
            firstServeMs: null,
            serves: [],
            states: [],
          };
          this.workers.set(row.worker_id, w);
        }
        w.lastListedMs = now;
        if (w.states.at(-1)?.[1] !== row.state) w.states.push([now, row.state]);
        if (row.last_serve_ms !== null) {
          w.firstServeMs ??= row.last_serve_ms;
          if (w.serves.at(-1) !== row.last_serve_ms) w.serves.push(row.last_serve_ms);
        }
      }
    } catch {
      // A missed poll (the hub busy past 5 s) only lowers the resolution; the next one catches up.
    } finally {
      this.mapBusy = false;
    }
  }
}
