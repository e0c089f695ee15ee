/**
 * The dashboard's state as pure transitions over the hub's stream messages (protocol/dashboard.ts): a snapshot
 * replaces everything, a tick appends one sample per model, an event or a coverage map replaces its part. No DOM,
 * no clock of its own (every `now` is passed in), so test/unit/dashboard-page-model.test.ts drives it with tables.
 *
 *   let s = emptyState();
 *   s = applySnapshot(s, snapshot, Date.now());
 *   s = applyTick(s, tick, Date.now());
 *   staleSince(s, Date.now());   // null while ticks arrive
 */
import {
  type CoverageMap,
  EVENTS_PAGE_MAX,
  HISTORY_SAMPLES,
  HUB_EVENT_KINDS,
  type HubEventKindName,
  type HubEventRow,
  type ModelStatus,
  type Sample,
  type Snapshot,
  STALE_AFTER_MS,
  type Tick,
  type Totals,
  newestEvents,
} from '../../../protocol/dashboard.ts';

/** Events the page keeps (a snapshot brings at most EVENTS_PAGE_MAX; the stream adds one at a time). */
export const EVENTS_KEPT = EVENTS_PAGE_MAX;

export interface DashboardState {
  /** Whether a snapshot has arrived since the page opened (before it, the page says it is connecting). */
  loaded: boolean;
  /** The hub's clock at the last snapshot or tick. */
  hubAtMs: number | null;
  /** The page's clock when the last snapshot or tick arrived: staleness counts from here. */
  receivedAtMs: number | null;
  tickMs: number;
  models: ModelStatus[];
  /** Per model, oldest first, at most HISTORY_SAMPLES. */
  history: Record<string, Sample[]>;
  /** Oldest first by seq, at most EVENTS_KEPT. */
  events: HubEventRow[];
  coverage: Record<string, CoverageMap>;
  totals: Totals;
  adminEnabled: boolean;
}

export function emptyState(): DashboardState {
  return {
    loaded: false,
    hubAtMs: null,
    receivedAtMs: null,
    tickMs: 1000,
    models: [],
    history: {},
    events: [],
    coverage: {},
    totals: { volunteers: {}, workers: 0 },
    adminEnabled: false,
  };
}

/** Keeps the last `max` items (the array itself when it already fits). */
export function keepLast<T>(items: readonly T[], max: number): T[] {
  return items.length <= max ? (items as T[]) : items.slice(items.length - max);
}

/** A snapshot replaces everything: after a reconnect the hub's view is the truth, not what the page had. */
export function applySnapshot(_prev: DashboardState, snap: Snapshot, nowMs: number): DashboardState {
  const history: Record<string, Sample[]> = {};
  for (const m of snap.models) history[m.model] = keepLast(snap.history[m.model] ?? [], HISTORY_SAMPLES);
  const coverage: Record<string, CoverageMap> = {};
  for (const c of snap.coverage) coverage[c.model] = c;
  return {
    loaded: true,
    hubAtMs: snap.atMs,
    receivedAtMs: nowMs,
    tickMs: snap.tickMs,
    models: snap.models,
    history,
    events: keepLast(
      [...snap.events].sort((a, b) => a.seq - b.seq),
      EVENTS_KEPT,
    ),
    coverage,
    totals: snap.totals,
    adminEnabled: snap.adminEnabled,
  };
}

/**
 * A tick replaces the models and totals and appends each model's sample (bounded). A model that left the hub loses
 * its history; a tick older than what the page has (a late delivery) is ignored.
 */
export function applyTick(prev: DashboardState, tick: Tick, nowMs: number): DashboardState {
  if (!prev.loaded || (prev.hubAtMs !== null && tick.atMs < prev.hubAtMs)) return prev;
  const history: Record<string, Sample[]> = {};
  for (const m of tick.models) {
    const old = prev.history[m.model] ?? [];
    const s = tick.samples[m.model];
    history[m.model] = s ? keepLast([...old, s], HISTORY_SAMPLES) : old;
  }
  const coverage: Record<string, CoverageMap> = {};
  for (const m of tick.models) {
    const c = prev.coverage[m.model];
    if (c) coverage[m.model] = c;
  }
  return { ...prev, hubAtMs: tick.atMs, receivedAtMs: nowMs, models: tick.models, history, coverage, totals: tick.totals };
}

/** A new hub event, once (a seq the page has already seen is ignored). */
export function applyEvent(prev: DashboardState, ev: HubEventRow): DashboardState {
  if (!prev.loaded) return prev;
  const last = prev.events.at(-1);
  if (last && ev.seq <= last.seq) return prev;
  return { ...prev, events: keepLast([...prev.events, ev], EVENTS_KEPT) };
}

/** A model's heatmap, replacing the one the page had (an older map than the page's is ignored). */
export function applyCoverage(prev: DashboardState, map: CoverageMap): DashboardState {
  if (!prev.loaded) return prev;
  const old = prev.coverage[map.model];
  if (old && old.atMs > map.atMs) return prev;
  return { ...prev, coverage: { ...prev.coverage, [map.model]: map } };
}

/** When the stream went quiet (the page's clock at the last tick), or null while it is live or before it loaded. */
export function staleSince(s: DashboardState, nowMs: number, afterMs = STALE_AFTER_MS): number | null {
  if (s.receivedAtMs === null) return null;
  return nowMs - s.receivedAtMs > afterMs ? s.receivedAtMs : null;
}

/**
 * The hub's clock now, estimated from the page's: the hub's times (a worker's last serve) are compared with this, so
 * a page on a machine whose clock is off still says "4 s ago" rightly. The page's own clock before the first message.
 */
export function hubNow(s: DashboardState, nowMs: number): number {
  return s.hubAtMs === null || s.receivedAtMs === null ? nowMs : nowMs + (s.hubAtMs - s.receivedAtMs);
}

// --- formatting (every number the page shows goes through one of these)

/** `busy/slots`, with a dash for a reading the hub does not have yet. */
export function formatCount(n: number | null): string {
  return n === null ? '—' : String(n);
}

export function formatMs(ms: number | null): string {
  if (ms === null) return '—';
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  if (ms < 10_000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(1)} s`;
}

export function formatRate(perS: number | null, unit: string): string {
  if (perS === null) return '—';
  const v = perS >= 100 ? Math.round(perS).toString() : perS >= 10 ? perS.toFixed(1) : perS.toFixed(2);
  return `${v} ${unit}`;
}

/** A clock time as HH:MM:SS in the viewer's zone (the event log and the stale banner). */
export function formatClock(ms: number): string {
  const d = new Date(ms);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

/** How long ago, coarsely ("4 s ago", "3 min ago"), or "never". */
export function formatAgo(atMs: number | null, nowMs: number): string {
  if (atMs === null) return 'never';
  const s = Math.max(0, Math.round((nowMs - atMs) / 1000));
  if (s < 90) return `${s} s ago`;
  const m = Math.round(s / 60);
  if (m < 90) return `${m} min ago`;
  return `${Math.round(m / 60)} h ago`;
}

/** The coordinator as the issue names it: up, restarting, external (or starting / stopped). */
export function coordinatorLabel(state: ModelStatus['coordinator']['state']): string {
  switch (state) {
    case 'ready':
      return 'up';
    case 'restarting':
      return 'restarting';
    case 'external':
      return 'external';
    case 'starting':
      return 'starting';
    case 'stopped':
      return 'stopped';
  }
}

/** The stale banner's sentence. */
export function staleMessage(since: number): string {
  return `Stale since ${formatClock(since)}: no update from the hub; reconnecting…`;
}

// --- the event log

/** The event log's two filter selects as the page binds them ('' = any); newestEvents reads it as an EventMatch. */
export interface EventFilterForm {
  kind: HubEventKindName | '';
  model: string;
}

/** The kinds the log filters by: the hub's own list. */
export { HUB_EVENT_KINDS as EVENT_KINDS };

/** The newest `limit` events matching the filter, newest first (the hub's own filter, from the wire module). */
export function filterEvents(events: readonly HubEventRow[], f: EventFilterForm, limit: number): HubEventRow[] {
  return newestEvents(events, f, limit);
}

// --- charts: one uPlot per series group, fed column arrays

export type ChartGroup = 'slots' | 'workers' | 'pairs' | 'latency' | 'tokens';

export interface SeriesSpec {
  label: string;
  /** A stroke with ≥ 3:1 contrast on white (WCAG's non-text contrast). */
  color: string;
  value: (s: Sample) => number | null;
  dash?: number[];
}

export interface ChartSpec {
  group: ChartGroup;
  title: string;
  unit: string;
  series: SeriesSpec[];
}

/** One series per key of `colors`, in its order: labelled by the key, valued by that field of `pick(sample)`. */
function keyedSeries<K extends string>(pick: (s: Sample) => Record<NoInfer<K>, number>, colors: Record<K, string>): SeriesSpec[] {
  return (Object.keys(colors) as K[]).map((key) => ({ label: key, color: colors[key], value: (s) => pick(s)[key] }));
}

export const CHARTS: readonly ChartSpec[] = [
  {
    group: 'slots',
    title: 'Busy slots and effective target',
    unit: 'slots',
    series: [
      { label: 'busy', color: '#1f4fd1', value: (s) => s.busy },
      { label: 'slots', color: '#5b6472', value: (s) => s.slots, dash: [4, 4] },
      { label: 'effective target', color: '#a3460a', value: (s) => s.effectiveTarget },
    ],
  },
  {
    group: 'workers',
    title: 'Workers by state',
    unit: 'workers',
    series: keyedSeries((s) => s.workers, {
      grace: '#8a5a00',
      proven: '#17703a',
      idle: '#5b6472',
      released: '#1f4fd1',
      quarantined: '#b42318',
    }),
  },
  {
    group: 'pairs',
    title: 'Dispatched pairs per second',
    unit: 'pairs/s',
    series: keyedSeries((s) => s.pairsPerS, { served: '#17703a', fallback: '#a3460a', late: '#b42318' }),
  },
  {
    group: 'latency',
    title: 'Round-trip latency',
    unit: 'ms',
    series: [
      { label: 'p50', color: '#1f4fd1', value: (s) => s.rttP50Ms },
      { label: 'p99', color: '#b42318', value: (s) => s.rttP99Ms },
    ],
  },
  {
    group: 'tokens',
    title: 'Tokens per second',
    unit: 'tokens/s',
    series: [{ label: 'tokens/s', color: '#17703a', value: (s) => s.tokensPerS }],
  },
];

/** uPlot's columns: x in seconds (uPlot's time unit), then one array per series. */
export function chartColumns(history: readonly Sample[], spec: ChartSpec): [number[], ...(number | null)[][]] {
  const xs = history.map((s) => s.t / 1000);
  return [xs, ...spec.series.map((ser) => history.map((s) => ser.value(s)))];
}

/** The latest value of each series, as words (the chart's text alternative). */
export function latestValues(history: readonly Sample[], spec: ChartSpec): Array<{ label: string; value: string }> {
  const last = history.at(-1);
  return spec.series.map((ser) => {
    const v = last ? ser.value(last) : null;
    return { label: ser.label, value: v === null ? '—' : `${Number.isInteger(v) ? v : v.toFixed(2)} ${spec.unit}` };
  });
}
