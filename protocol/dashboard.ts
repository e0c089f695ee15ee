/**
 * The dashboard's wire: what the hub sends the `/dashboard` page and what the page may ask for. One module for both
 * ends (the hub's routes in hub/dashboard/, the page in web/src/dashboard/), so it imports nothing from Node and
 * nothing from the hub's internals: plain types, the caps, and the parsers of what the page sends.
 *
 * Read side (no token):
 *   GET /api/dashboard/stream              text/event-stream: one `snapshot`, then `tick` every `intervalMs`,
 *                                          `event` per new hub event, `coverage` when a model's heatmap changed;
 *                                          a `: ping` comment every PING_MS keeps proxies from closing it.
 *   GET /api/dashboard/workers?…           WorkersQuery → WorkersPage (server-side sort, filter and paging)
 *   GET /api/dashboard/coverage?model=     CoverageMap (also pushed on the stream)
 *   GET /api/events?kind=&model=&limit=    { events: HubEventRow[] } (newest last)
 *   GET /api/events?scope=cluster&…        { events: (HubEventRow & { hub })[] } every hub's, with --redis (docs/cluster.md)
 *
 * Admin side (`Authorization: Bearer <admin token>`, the hub's `--admin-token` / EXPERTSWARM_ADMIN_TOKEN; without
 * one configured every admin call is 403 ADMIN_DISABLED, a wrong or missing token 401 ADMIN_TOKEN_INVALID):
 *   GET  /api/admin/check                                   204 when the token is right (the page's "unlock")
 *   POST /api/admin/workers/:id/release     {reason?}       AdminResult
 *   POST /api/admin/workers/:id/quarantine  {reason, wallet?} AdminResult (durable, as the trust checks quarantine;
 *                                                           wallet: true quarantines the worker's wallet too)
 *   POST /api/admin/target                  {base?, boost?} AdminResult (base ≥ 1, boost ≥ 0: the market's targets)
 *   POST /api/admin/models/:model/dispatch  {mode}          AdminResult (auto | always | off, per model)
 * Every admin action, done or refused for a bad argument, lands in the event log as kind `admin`.
 */
import type { AssignedSlice } from './slice.ts';

/** Stream cadence: one tick a second; the history holds HISTORY_MS of ticks per model. */
export const TICK_MS = 1000;
export const HISTORY_MS = 15 * 60 * 1000;
export const HISTORY_SAMPLES = HISTORY_MS / TICK_MS;
/** A keep-alive comment on the stream this often. */
export const PING_MS = 15_000;
/** The page calls the stream stale after this long without a tick, and says so. */
export const STALE_AFTER_MS = 3 * TICK_MS + 500;
/** Streams open at once (each costs a timer's share of serialisation); one more → 503 TOO_MANY_STREAMS. */
export const STREAMS_MAX = 64;
/** Rows per workers page, at most. */
export const WORKERS_PAGE_MAX = 500;
/** Events in a snapshot and in one `GET /api/events`, at most. */
export const EVENTS_PAGE_MAX = 1000;
/** `reason` of an admin action, at most. */
export const ADMIN_REASON_MAX_CHARS = 200;
/** A workers query's free-text filter, at most. */
export const WORKERS_QUERY_MAX_CHARS = 128;

/** How a model's dispatcher sends expert work (hub/dispatch/policy.ts): Layer 1 decides, every covered pair, none. */
export const DISPATCH_MODES = Object.freeze(['auto', 'always', 'off'] as const);
export type DispatchModeName = (typeof DISPATCH_MODES)[number];

export type CoordinatorStateName = 'starting' | 'ready' | 'restarting' | 'stopped' | 'external';

/** The dispatch map's worker states, plus `loading` (a channel volunteer fetching its slice, not yet serving). */
export type WorkerStateName = 'loading' | 'joining' | 'grace' | 'proven' | 'idle' | 'released' | 'quarantined';
export const WORKER_STATES: readonly WorkerStateName[] = Object.freeze([
  'loading',
  'joining',
  'grace',
  'proven',
  'idle',
  'released',
  'quarantined',
]);

/** The hub's event kinds: hub/events.ts logs them, `GET /api/events?kind=` accepts them, the page filters by them. */
export const HUB_EVENT_KINDS = Object.freeze([
  'saturation-onset',
  'saturation-end',
  'recruit',
  'release',
  'evict',
  'coordinator',
  'quarantine',
  'volunteer-join',
  'volunteer-leave',
  'load-failed',
  'dispatch',
  'admin',
  'peer-report',
] as const);
export type HubEventKindName = (typeof HUB_EVENT_KINDS)[number];

/**
 * One slice's transfers (`GET /api/peers/slices` → `{ slices: SliceTransfer[] }`, the dashboard's slice transfers;
 * hub/peer-directory.ts keeps them, docs/peers.md): bytes volunteers took from each other vs from the hub.
 */
export interface SliceTransfer extends AssignedSlice {
  /** Loads reported (`loaded`), and of those how many came whole from the volunteer's cache. */
  loads: number;
  fromCache: number;
  /** Bytes volunteers say they took from peers and from the hub for this slice. */
  fromPeers: number;
  fromHub: number;
  /** Volunteers holding it now (loaded), and fetching it now. */
  holders: number;
  fetching: number;
  /** Reports of a bad peer for this slice. */
  badPeers: number;
}

/** One model as the dashboard shows it now. */
export interface ModelStatus {
  model: string;
  /**
   * `dispatchUnsupported`: why the coordinator computes some MoE layers itself whatever the swarm holds (its
   * expert-dispatch hook's note: the architecture and the missing piece), null when it logged none.
   */
  coordinator: { state: CoordinatorStateName; restarts: number; lastExit: string | null; dispatchUnsupported: string | null };
  /** Whether its experts are on the market (the hub read its GGUF); external-only models are not. */
  market: boolean;
  /** From the last slots reading; null before one. */
  busy: number | null;
  slots: number | null;
  saturated: boolean;
  recruiting: boolean;
  baseTarget: number;
  boost: number;
  effectiveTarget: number;
  dispatchMode: DispatchModeName;
  /** Whether the coordinator's dispatch connection is up. */
  dispatchConnected: boolean;
  /**
   * Workers by state: those the hub tracks now (what `/api/expert-dispatch-map` lists, plus `loading`), and in
   * `released` / `quarantined` the workers an admin released or quarantined in the last 15 minutes (HISTORY_MS),
   * which the dispatch map no longer lists.
   */
  workers: Record<WorkerStateName, number>;
  /** The model's shape, for the heatmap's axes; null when not on the market. */
  shape: { nLayer: number; nExpert: number; moeLayers: number[] } | null;
}

/**
 * One tick of one model's history. Rates are per second over the tick; latency is over the results that arrived in
 * it (null when none did); tokensPerS is the coordinator's generated tokens (null when its counters are unreadable).
 */
export interface Sample {
  t: number;
  busy: number | null;
  slots: number | null;
  effectiveTarget: number;
  workers: Record<WorkerStateName, number>;
  pairsPerS: { served: number; fallback: number; late: number; rejected: number };
  rttP50Ms: number | null;
  rttP99Ms: number | null;
  tokensPerS: number | null;
}

/** A hub event with its sequence number (strictly increasing; the stream's `event`s continue the snapshot's). */
export interface HubEventRow {
  seq: number;
  atMs: number;
  kind: HubEventKindName;
  model: string | null;
  detail: string;
}

/**
 * Live replicas per (MoE layer, expert) of one model: `replicas` is base64 of a Uint8Array in layer-major order,
 * `moeLayers.length × nExpert` values, each min(replicas, 255). `target` is the effective target now.
 */
export interface CoverageMap {
  model: string;
  atMs: number;
  moeLayers: number[];
  nExpert: number;
  target: number;
  replicas: string;
}

export interface Totals {
  /** Volunteer channels open, by connection state. */
  volunteers: Record<string, number>;
  /** Workers known to the coverage store, all models. */
  workers: number;
}

/** `snapshot`: everything the page needs to draw from nothing. */
export interface Snapshot {
  v: 1;
  atMs: number;
  tickMs: number;
  historyMs: number;
  models: ModelStatus[];
  /** Per model, oldest first, at most HISTORY_SAMPLES. */
  history: Record<string, Sample[]>;
  events: HubEventRow[];
  coverage: CoverageMap[];
  totals: Totals;
  /** Whether the hub has an admin token configured (the page hides the admin controls when not). */
  adminEnabled: boolean;
}

/** `tick`: the models now and one new sample each. */
export interface Tick {
  atMs: number;
  models: ModelStatus[];
  samples: Record<string, Sample>;
  totals: Totals;
}

/** The stream's SSE event names and their data. */
export interface StreamMessages {
  snapshot: Snapshot;
  tick: Tick;
  event: HubEventRow;
  coverage: CoverageMap;
}

export type WorkerSortKey = 'id' | 'model' | 'layer' | 'state' | 'backend' | 'lastServe' | 'latency' | 'pairs' | 'credit';
export const WORKER_SORT_KEYS: readonly WorkerSortKey[] = Object.freeze([
  'id',
  'model',
  'layer',
  'state',
  'backend',
  'lastServe',
  'latency',
  'pairs',
  'credit',
]);

export interface WorkersQuery {
  model: string; // '' = every model
  state: WorkerStateName | ''; // '' = every state
  /** Case-insensitive substring of id, device or backend ('' = none). */
  q: string;
  sort: WorkerSortKey;
  dir: 'asc' | 'desc';
  offset: number;
  limit: number;
}

export const DEFAULT_WORKERS_QUERY: Readonly<WorkersQuery> = Object.freeze({
  model: '',
  state: '',
  q: '',
  sort: 'id',
  dir: 'asc',
  offset: 0,
  limit: 100,
});

/** One served slice of a worker in the workers table: its pairs served in time and the credit they earned. */
export interface WorkerSliceStats {
  slice: [number, number, number];
  pairs: number;
  credit: number;
}

export interface WorkerRow {
  id: string;
  model: string;
  /** `[layer, begin, end)` of the slice it holds or is loading; null when it holds none. */
  slice: [number, number, number] | null;
  /** Every slice it holds or loads when it holds more than one (a volunteer holds several: issue 27); absent else. */
  slices?: Array<[number, number, number]>;
  /**
   * Pairs served and credited for each slice it serves (heartbeat order), counted since it began serving that slice
   * (hub/trust/slice-credit.ts); absent for a worker without a dispatch record.
   */
  sliceStats?: WorkerSliceStats[];
  state: WorkerStateName;
  /** `webgpu` / `wasm` / `native` (an HTTP-heartbeat worker), or null when unknown. */
  backend: string | null;
  /** The adapter's description, or the client's agent string; '' when unknown. */
  device: string;
  gflops: number | null;
  lastServeMs: number | null;
  latencyMs: number | null;
  pairsServed: number;
  /**
   * Where the trust checks (docs/trust.md) stand with it, in words: `probation 12/20` (audits passed of those needed),
   * `trusted`, or '' when the checks are off or it has no dispatch record yet.
   */
  trust: string;
  /**
   * Missed the dispatcher's deadline several times in a row: only probed now and then until it answers in time again
   * (hub/dispatch/policy.ts, the bench).
   */
  benched: boolean;
  /** The wallet's lifetime credit (pairs), or null for a worker without one. */
  credit: number | null;
}

export interface WorkersPage {
  total: number;
  offset: number;
  rows: WorkerRow[];
}

export interface AdminResult {
  ok: true;
  /** What changed, as a sentence (also the event log's detail). */
  detail: string;
}

/** What an event must match to be listed (EventMatch): '' (or absent) matches every kind / model. Both ends apply it. */
export interface EventMatch {
  kind?: HubEventKindName | '' | undefined;
  model?: string | undefined;
}

/**
 * The newest `limit` events matching `f`, NEWEST FIRST, from a list kept oldest first (the hub's ring, the page's
 * copy): the one filter both ends apply.
 */
export function newestEvents<E extends Pick<HubEventRow, 'kind' | 'model'>>(events: readonly E[], f: EventMatch, limit: number): E[] {
  const out: E[] = [];
  for (let i = events.length - 1; i >= 0 && out.length < limit; i--) {
    const e = events[i] as E;
    if (f.kind && e.kind !== f.kind) continue;
    if (f.model && e.model !== f.model) continue;
    out.push(e);
  }
  return out;
}

/** Two queries with the same key list the same rows (offset and limit only page through them). */
export function workersQueryKey(q: Pick<WorkersQuery, 'model' | 'state' | 'q' | 'sort' | 'dir'>): string {
  return JSON.stringify([q.model, q.state, q.q, q.sort, q.dir]);
}

/** Why a query string was refused (the hub answers 400 QUERY_INVALID with this sentence). */
export class WireQueryError extends Error {
  override readonly name = 'WireQueryError';
}

const STATE_SET = new Set<string>(WORKER_STATES);
const SORT_SET = new Set<string>(WORKER_SORT_KEYS);

function intParam(v: string | undefined, name: string, min: number, max: number, dflt: number): number {
  if (v === undefined || v === '') return dflt;
  if (!/^\d{1,10}$/.test(v)) throw new WireQueryError(`${name} must be an integer in [${min}, ${max}]`);
  const n = Number(v);
  if (n < min || n > max) throw new WireQueryError(`${name} must be an integer in [${min}, ${max}]`);
  return n;
}

function textParam(v: string | undefined, name: string, max: number): string {
  if (v === undefined) return '';
  if (v.length > max) throw new WireQueryError(`${name} must be at most ${max} characters`);
  return v;
}

/** Parses `GET /api/dashboard/workers`'s query (each value a string or absent); throws WireQueryError. */
export function parseWorkersQuery(q: Readonly<Record<string, string | undefined>>, modelMaxChars = 256): WorkersQuery {
  const state = q.state ?? '';
  if (state !== '' && !STATE_SET.has(state)) throw new WireQueryError(`state must be one of ${WORKER_STATES.join(', ')}`);
  const sort = q.sort ?? DEFAULT_WORKERS_QUERY.sort;
  if (!SORT_SET.has(sort)) throw new WireQueryError(`sort must be one of ${WORKER_SORT_KEYS.join(', ')}`);
  const dir = q.dir ?? DEFAULT_WORKERS_QUERY.dir;
  if (dir !== 'asc' && dir !== 'desc') throw new WireQueryError('dir must be asc or desc');
  return {
    model: textParam(q.model, 'model', modelMaxChars),
    state: state as WorkersQuery['state'],
    q: textParam(q.q, 'q', WORKERS_QUERY_MAX_CHARS),
    sort: sort as WorkerSortKey,
    dir,
    offset: intParam(q.offset, 'offset', 0, 1_000_000_000, 0),
    limit: intParam(q.limit, 'limit', 1, WORKERS_PAGE_MAX, DEFAULT_WORKERS_QUERY.limit),
  };
}

/** The query string of a WorkersQuery (defaults left out), as the page sends it. */
export function workersQueryString(w: WorkersQuery): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(w) as Array<[keyof WorkersQuery, string | number]>) {
    if (v !== DEFAULT_WORKERS_QUERY[k]) p.set(k, String(v));
  }
  return p.toString();
}

/** Decodes a CoverageMap's replicas (base64 → bytes) without Node's Buffer. */
export function coverageBytes(map: CoverageMap): Uint8Array {
  const bin = atob(map.replicas);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** Encodes replicas for a CoverageMap (both ends use it: the hub to send, tests to build fixtures). */
export function coverageBase64(bytes: Uint8Array): string {
  let bin = '';
  const CHUNK = 0x8000;
  for (let i = 0; i < bytes.length; i += CHUNK) bin += String.fromCharCode(...bytes.subarray(i, i + CHUNK));
  return btoa(bin);
}
