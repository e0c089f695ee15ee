/**
 * The JSON answers of the hub's HTTP routes (../shared/ARCHITECTURE.md, "HTTP contract"): plain data, field names are
 * the wire names. They live here, not in hub/hub.ts, so that the hub's parts (metrics.ts, the routes) and the tests
 * that read these answers share one definition without importing the Hub; like the rest of protocol/, this file
 * imports only protocol/ and gguf/.
 */
import type { CoordinatorStateName } from './dashboard.ts';

/** One served model's row of `GET /api/moe/recruitment` (and of the per-model gauges in `GET /metrics`). */
export interface RecruitmentRow {
  model: string;
  busy: number | null;
  slots: number | null;
  saturated: boolean;
  recruiting: boolean;
  base_target: number;
  effective_target: number;
  expert_workers: number;
  age_s: number | null;
}

/** `GET /api/moe/recruitment`. */
export interface RecruitmentAnswer {
  saturate_at: number;
  boost: number;
  target_base: number;
  models: RecruitmentRow[];
}

/**
 * `GET /api/expert-demand`. `Model` is one model's entry: the market's `ModelDemand` (hub/market/types.ts, the market's
 * own vocabulary, whose field names are already the wire's); a type parameter so that this file need not import hub/.
 */
export interface DemandAnswer<Model> {
  /** The highest target among the models listed (at least the base target). */
  target_replicas: number;
  recruiting: boolean;
  models: Model[];
}

/**
 * `POST /api/expert-coverage`. The last four are Kvasir's (issue 28) and only in the HTTP answer: `workers` the live
 * workers of every model (its census), and its relay's `session` and `listen_port` (handed out for a `relay:` url, else
 * null) and `wired` (its relay is dialed now). `replica`: whether the reported ranges count as replicas for recruitment
 * (hub/market/replicas.ts).
 */
export interface CoverageAnswer {
  ok: true;
  stale_after_s: number;
  workers?: number;
  replica?: boolean;
  wired?: boolean;
  listen_port?: number | null;
  session?: string | null;
}

/** `GET /api/health`. */
export interface HealthAnswer {
  ok: true;
  coordinators: Array<{ model: string; state: CoordinatorStateName; restarts: number }>;
  /**
   * With `--redis` only: this hub's part in the cluster (docs/cluster.md): its id, 'ready' / 'degraded' /
   * 'connecting', since when, why degraded, the hubs announced, the other hubs' workers mirrored, writes waiting.
   */
  /** Present when the hub is one of a cluster (`--redis`): docs/cluster.md. */
  cluster?: ClusterStatus;
}

/** The cluster part of `GET /api/health` (hub/cluster/cluster.ts fills it). */
export interface ClusterStatus {
  hub_id: string;
  /** The Redis URL, its password hidden. */
  redis: string;
  state: 'connecting' | 'ready' | 'degraded';
  /** When the state last changed (the hub's clock). */
  since_ms: number;
  /** What made it degraded (null while ready). */
  error: string | null;
  /** Hubs announced in Redis at the last sync (this one included). */
  hubs: string[];
  /**
   * Where clients and volunteers reach the live hubs (this one included), in hub id order: each hub's `--public-url`,
   * else its `--hub-url` / listening address as http(s). A client given one hub learns the others here (issue 30).
   */
  hub_urls: string[];
  /** Workers of other hubs in the mirror. */
  remote_workers: number;
  /**
   * The live hubs (this one included, even before its first announcement), in hub id order, at most 64 (this one always
   * kept): each hub's id, public URL (null: none announced) and workers — this hub's live ones, another hub's records
   * in this hub's mirror, null while this hub has no mirror (degraded, not synced yet). The dashboard's "Cluster".
   */
  members: Array<{ hub: string; public_url: string | null; workers: number | null }>;
  last_sync_ms: number | null;
  /** Writes waiting for Redis. */
  pending: { workers: number; credits: number; quarantines: number };
  /** Values read back that were not what a hub writes (CLUSTER_STATE_CORRUPT), since start. */
  corrupt_values: number;
}

/** `GET /api/credit?wallet=`: a volunteer's lifetime credit (pairs served), durable; 0 and nulls for an unknown wallet. */
export interface CreditAnswer {
  wallet: string;
  credit_pairs: number;
  first_seen_ms: number | null;
  last_seen_ms: number | null;
}
