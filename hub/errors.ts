/**
 * The hub's one catalogue of error codes. Every rejection the hub sends is `{"error": "<sentence>", "code": "<CODE>"}`
 * with the status listed here; callers and tests match the code, never the prose.
 *
 *   throw new HubError('BODY_INVALID', 'max_experts must be an integer in [0, 512]');
 */
export const ERRORS = {
  // request shape
  BODY_TOO_LARGE: 413,
  BODY_NOT_JSON: 400,
  BODY_INVALID: 400,
  QUERY_INVALID: 400,
  /** A path fastify cannot route: malformed percent-encoding, a segment over 1024 characters. */
  URL_INVALID: 400,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  UNSUPPORTED_MEDIA_TYPE: 415,
  // auth
  AUTH_REQUIRED: 401,
  AUTH_TOKEN_INVALID: 401,
  AUTH_TOKEN_EXPIRED: 401,
  AUTH_BAD_WALLET: 400,
  AUTH_NONCE_UNKNOWN: 401,
  AUTH_NONCE_EXPIRED: 401,
  AUTH_BAD_SIGNATURE: 401,
  AUTH_FORBIDDEN: 403,
  RATE_LIMITED: 429,
  // the volunteer channel's upgrade (refused before any WebSocket exists)
  /** The upgrade's Origin is neither the hub's own nor one of `--allow-origin` (a browser page of another site). */
  ORIGIN_FORBIDDEN: 403,
  /** This address holds CHANNEL_CONNECTIONS_PER_ADDRESS volunteer connections already. */
  TOO_MANY_CONNECTIONS: 503,
  // the dashboard's admin actions
  ADMIN_DISABLED: 403,
  ADMIN_TOKEN_INVALID: 401,
  WORKER_UNKNOWN: 404,
  // the dashboard's stream
  TOO_MANY_STREAMS: 503,
  // market
  MODEL_UNKNOWN: 404,
  LAYER_NOT_MOE: 400,
  RANGE_OUT_OF_BOUNDS: 400,
  TOO_MANY_SEGMENTS: 400,
  TOO_MANY_WORKERS: 503,
  WORKER_QUARANTINED: 403,
  /** An operator released this worker: its heartbeats are refused for RELEASE_COOL_DOWN_MS, then it may come back. */
  WORKER_RELEASED: 409,
  /** A held range outside every slice the market assigned to this worker (`POST /api/expert-volunteer`). */
  COVERAGE_NOT_ASSIGNED: 403,
  /** A held range of an assigned slice this wallet has not downloaded (`GET /api/expert-shard`): download it first. */
  COVERAGE_NOT_DOWNLOADED: 409,
  /** The worker id is live under another wallet: worker ids are the client's to choose, so they are kept per wallet. */
  WORKER_ID_TAKEN: 409,
  // shard server
  RANGE_NOT_SATISFIABLE: 416,
  SHARDS_BUSY: 503,
  // coordinators
  COORDINATOR_UNAVAILABLE: 503,
  COORDINATOR_TIMEOUT: 504,
  COORDINATOR_ERROR: 502,
  // pages
  PAGES_NOT_BUILT: 503,
  // the cluster of hubs (--redis, hub/cluster/)
  /** The cluster's Redis does not answer (down, restarting, unreachable) within its command timeout: retry later. */
  CLUSTER_UNAVAILABLE: 503,
  /** A value read back from the cluster's Redis is not what a hub writes there (hub/cluster/codec.ts). */
  CLUSTER_STATE_CORRUPT: 502,
  // anything else
  INTERNAL: 500,
} as const;

export type ErrorCode = keyof typeof ERRORS;

export class HubError extends Error {
  readonly status: number;

  constructor(
    readonly code: ErrorCode,
    message: string,
    /** Extra headers for the reply (e.g. Retry-After). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'HubError';
    this.status = ERRORS[code];
  }

  toJSON(): { error: string; code: ErrorCode } {
    return { error: this.message, code: this.code };
  }
}

export function isHubError(e: unknown, code?: ErrorCode): e is HubError {
  return e instanceof HubError && (code === undefined || e.code === code);
}
