/**
 * The dashboard of a hub in a cluster (`--redis`, docs/cluster.md): what `GET /api/health` says of the cluster, and
 * the events list of every hub (`GET /api/events?scope=cluster`) merged with this hub's live ones — or, while the
 * cluster does not answer (503 CLUSTER_UNAVAILABLE), this hub's own with a note. Pure: the answers are checked here,
 * at the page's edge (a field that is not what a hub sends is dropped, never shown), and
 * test/unit/dashboard-page-cluster.test.ts drives it with tables.
 *
 *   const view = parseClusterHealth(await health.json());   // null: a hub alone
 *   const log = eventLogView(state.events, { state: 'ok', rows: parseClusterEvents(json) }, view.hubId);
 *   log.rows;  // oldest first, each with its hub and a unique key; log.note: why the cluster's are not shown
 */
import { EVENTS_PAGE_MAX, HUB_EVENT_KINDS, type HubEventKindName, type HubEventRow, newestEvents } from '../../../protocol/dashboard.ts';
import { keepLast } from './model.ts';

/** Hubs the page lists at most (the hub sends at most 64: HUB_MEMBERS_LISTED). */
export const CLUSTER_HUBS_SHOWN = 64;
/** A hub id as hubs write it (hub/cluster/keys.ts). */
const HUB_ID = /^[A-Za-z0-9_.-]{1,64}$/;
const DETAIL_MAX_CHARS = 2000;
const MODEL_MAX_CHARS = 256;

export type ClusterLinkState = 'connecting' | 'ready' | 'degraded';

export interface ClusterHubView {
  hub: string;
  /** An http(s) origin, safe for a link; null when the hub announced none. */
  url: string | null;
  /** Workers attached to that hub; null when this hub does not know (its Redis is away). */
  workers: number | null;
}

export interface ClusterView {
  /** This hub's id in the cluster. */
  hubId: string;
  state: ClusterLinkState;
  sinceMs: number | null;
  /** Why it is degraded (null while ready). */
  error: string | null;
  hubs: ClusterHubView[];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const hubId = (v: unknown): string | null => (typeof v === 'string' && HUB_ID.test(v) ? v : null);
const count = (v: unknown): number | null => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : null);

/** An http(s) URL's origin; null for anything else (a `javascript:` URL never becomes a link). */
export function httpOrigin(v: unknown): string | null {
  if (typeof v !== 'string' || v.length > 512 || !/^https?:\/\//i.test(v)) return null;
  try {
    return new URL(v).origin;
  } catch {
    return null;
  }
}

/**
 * The `cluster` part of a `GET /api/health` answer (protocol/http.ts ClusterStatus), checked; null for a hub alone or
 * an answer that is not a hub's. The hubs: `members` (id, URL, workers); from an older hub without it, the ids of
 * `hubs` with the URLs of `hub_urls` unpaired (a URL without its id is listed by its URL). This hub is always listed.
 */
export function parseClusterHealth(json: unknown): ClusterView | null {
  if (!isObject(json) || !isObject(json.cluster)) return null;
  const c = json.cluster;
  const self = hubId(c.hub_id);
  const state = c.state === 'connecting' || c.state === 'ready' || c.state === 'degraded' ? c.state : null;
  if (self === null || state === null) return null;
  const hubs: ClusterHubView[] = [];
  const seen = new Set<string>();
  const add = (h: ClusterHubView): void => {
    if (seen.has(h.hub) || hubs.length >= CLUSTER_HUBS_SHOWN) return;
    seen.add(h.hub);
    hubs.push(h);
  };
  if (Array.isArray(c.members)) {
    for (const m of c.members.slice(0, CLUSTER_HUBS_SHOWN)) {
      const id = isObject(m) ? hubId(m.hub) : null;
      if (id !== null && isObject(m)) add({ hub: id, url: httpOrigin(m.public_url), workers: count(m.workers) });
    }
  } else {
    const ids = Array.isArray(c.hubs) ? c.hubs : [];
    for (const id of ids.slice(0, CLUSTER_HUBS_SHOWN)) {
      const h = hubId(id);
      if (h !== null) add({ hub: h, url: null, workers: null });
    }
    const urls = Array.isArray(c.hub_urls) ? c.hub_urls : [];
    for (const u of urls.slice(0, CLUSTER_HUBS_SHOWN)) {
      const o = httpOrigin(u);
      if (o !== null) add({ hub: o, url: o, workers: null });
    }
  }
  if (!seen.has(self)) hubs.unshift({ hub: self, url: null, workers: null });
  return {
    hubId: self,
    state,
    sinceMs: count(c.since_ms),
    error: typeof c.error === 'string' ? c.error.slice(0, 500) : null,
    hubs: hubs.slice(0, CLUSTER_HUBS_SHOWN),
  };
}

/** An event of the cluster's list: its hub's event row, with the hub. */
export interface ClusterEventRow extends HubEventRow {
  hub: string;
}

/** `GET /api/events?scope=cluster`'s rows, checked (oldest first, at most EVENTS_PAGE_MAX); a row that is not a hub's is left out. */
export function parseClusterEvents(json: unknown): ClusterEventRow[] {
  if (!isObject(json) || !Array.isArray(json.events)) return [];
  const out: ClusterEventRow[] = [];
  for (const e of json.events.slice(-EVENTS_PAGE_MAX)) {
    if (!isObject(e)) continue;
    const hub = hubId(e.hub);
    const seq = count(e.seq);
    const atMs = count(e.atMs);
    if (hub === null || seq === null || atMs === null) continue;
    if (!(HUB_EVENT_KINDS as readonly unknown[]).includes(e.kind) || typeof e.detail !== 'string') continue;
    const model = e.model === null ? null : typeof e.model === 'string' ? e.model.slice(0, MODEL_MAX_CHARS) : undefined;
    if (model === undefined) continue;
    out.push({ seq, atMs, kind: e.kind as HubEventKindName, model, detail: e.detail.slice(0, DETAIL_MAX_CHARS), hub });
  }
  return out;
}

/** What the page knows of the cluster's events. */
export type ClusterEvents =
  /** A hub alone: no cluster, its own events. */
  | { state: 'off' }
  /** In a cluster, the list not read yet. */
  | { state: 'pending' }
  | { state: 'ok'; rows: ClusterEventRow[] }
  /** The cluster's list refused (503 CLUSTER_UNAVAILABLE while Redis is away) or unreachable: why. */
  | { state: 'unavailable'; reason: string };

/** An event as the log draws it: its hub (null for a hub alone) and a key unique in the list. */
export interface LabelledEvent extends HubEventRow {
  hub: string | null;
  key: string;
}

export interface EventLogView {
  /** Oldest first, at most `max`. */
  rows: LabelledEvent[];
  /** The hubs the rows come from, sorted (empty for a hub alone: no hub column). */
  hubs: string[];
  /** Whether the rows are every hub's (the cluster's list read). */
  cluster: boolean;
  /** Shown above the log when the cluster's events are not: why, and that these are this hub's own. */
  note: string | null;
}

/**
 * The events list: a hub alone, its own (no hub); in a cluster whose list was read, that list with this hub's live
 * events newer than the newest of its own in it (the stream brings them before the next read), ordered by time;
 * otherwise this hub's own, labelled with it, and a note when the cluster's list was refused.
 */
export function eventLogView(
  own: readonly HubEventRow[],
  cluster: ClusterEvents,
  selfHub: string | null,
  max: number = EVENTS_PAGE_MAX,
): EventLogView {
  const keys = new Map<string, number>();
  const label = (e: HubEventRow, hub: string | null): LabelledEvent => {
    const base = `${hub ?? ''}/${e.seq}`;
    const n = keys.get(base) ?? 0;
    keys.set(base, n + 1);
    // A hub restarted under the same id numbers its events again: the second of a key gets a suffix.
    return { seq: e.seq, atMs: e.atMs, kind: e.kind, model: e.model, detail: e.detail, hub, key: n === 0 ? base : `${base}#${n}` };
  };
  if (cluster.state === 'off' || selfHub === null) {
    return { rows: keepLast(own, max).map((e) => label(e, null)), hubs: [], cluster: false, note: null };
  }
  if (cluster.state !== 'ok') {
    const note =
      cluster.state === 'unavailable' ? `The cluster's events are unavailable (${cluster.reason}); showing this hub's own.` : null;
    return { rows: keepLast(own, max).map((e) => label(e, selfHub)), hubs: [selfHub], cluster: false, note };
  }
  let newestOwn = -1;
  for (const e of cluster.rows) if (e.hub === selfHub && e.seq > newestOwn) newestOwn = e.seq;
  const merged: Array<HubEventRow & { hub: string }> = [...cluster.rows];
  for (const e of own) if (e.seq > newestOwn) merged.push({ ...e, hub: selfHub });
  // Stable: rows of one instant keep the cluster stream's order, this hub's live ones after.
  merged.sort((a, b) => a.atMs - b.atMs);
  const rows = keepLast(merged, max).map((e) => label(e, e.hub));
  const hubs = [...new Set(rows.map((r) => r.hub as string))].sort();
  return { rows, hubs, cluster: true, note: null };
}

/** The log's filter: kind, model and hub ('' = any). */
export interface LabelledEventFilter {
  kind: HubEventKindName | '';
  model: string;
  hub: string;
}

/** The newest `limit` rows matching the filter, newest first. */
export function filterLabelled(rows: readonly LabelledEvent[], f: LabelledEventFilter, limit: number): LabelledEvent[] {
  return newestEvents(f.hub === '' ? rows : rows.filter((r) => r.hub === f.hub), f, limit);
}

/** "ready since 12:00:03", "degraded: why": this hub's link to the cluster in words. */
export function clusterStateText(view: ClusterView, clock: (ms: number) => string): string {
  const since = view.sinceMs === null ? '' : ` since ${clock(view.sinceMs)}`;
  if (view.state === 'ready') return `connected${since}`;
  if (view.state === 'connecting') return `connecting${since}`;
  return `degraded${since}: ${view.error ?? 'Redis does not answer'}; serving with its own workers`;
}
