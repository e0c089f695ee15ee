/**
 * The page's HTTP calls to its own hub (protocol/dashboard.ts lists the routes). A refusal becomes an ApiError with
 * the hub's code (`{"error", "code"}`, hub/errors.ts), which the page shows as it came.
 */
import type { AdminResult, DispatchModeName, WorkersPage, WorkersQuery } from '../../../protocol/dashboard.ts';
import { workersQueryString } from '../../../protocol/dashboard.ts';

export class ApiError extends Error {
  override readonly name = 'ApiError';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }

  /** As the page shows it: "ADMIN_TOKEN_INVALID: the admin token is wrong". */
  get display(): string {
    return `${this.code}: ${this.message}`;
  }
}

/** Where the admin token lives: this tab's session only, never localStorage. */
export const TOKEN_KEY = 'expertswarm.dashboard.adminToken';

async function refusal(r: Response): Promise<ApiError> {
  const text = await r.text().catch(() => '');
  try {
    const j = JSON.parse(text) as { code?: unknown; error?: unknown };
    if (typeof j.code === 'string') return new ApiError(r.status, j.code, typeof j.error === 'string' ? j.error : text);
  } catch {
    // not the hub's JSON (a proxy's page): the status says enough
  }
  return new ApiError(r.status, `HTTP_${r.status}`, text.slice(0, 200) || r.statusText);
}

/** A network failure (hub down) as an ApiError, so the page has one shape to show. */
function unreachable(e: unknown): never {
  if (e instanceof DOMException && e.name === 'AbortError') throw e;
  throw new ApiError(0, 'HUB_UNREACHABLE', e instanceof Error ? e.message : String(e));
}

export async function fetchWorkers(q: WorkersQuery, signal?: AbortSignal): Promise<WorkersPage> {
  const qs = workersQueryString(q);
  const r = await fetch(`/api/dashboard/workers${qs ? `?${qs}` : ''}`, { signal: signal ?? null }).catch(unreachable);
  if (!r.ok) throw await refusal(r);
  return (await r.json()) as WorkersPage;
}

/** `GET /api/admin/check`: resolves when the token is right. */
export async function checkToken(token: string): Promise<void> {
  const r = await fetch('/api/admin/check', { headers: { authorization: `Bearer ${token}` } }).catch(unreachable);
  if (!r.ok) throw await refusal(r);
}

async function adminPost(token: string | null, path: string, body: unknown): Promise<AdminResult> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const r = await fetch(path, { method: 'POST', headers, body: JSON.stringify(body) }).catch(unreachable);
  if (!r.ok) throw await refusal(r);
  return (await r.json()) as AdminResult;
}

export const admin = {
  release: (token: string | null, workerId: string, reason?: string): Promise<AdminResult> =>
    adminPost(token, `/api/admin/workers/${encodeURIComponent(workerId)}/release`, reason ? { reason } : {}),
  quarantine: (token: string | null, workerId: string, reason: string): Promise<AdminResult> =>
    adminPost(token, `/api/admin/workers/${encodeURIComponent(workerId)}/quarantine`, { reason }),
  target: (token: string | null, change: { base?: number; boost?: number }): Promise<AdminResult> =>
    adminPost(token, '/api/admin/target', change),
  dispatch: (token: string | null, model: string, mode: DispatchModeName): Promise<AdminResult> =>
    adminPost(token, `/api/admin/models/${encodeURIComponent(model)}/dispatch`, { mode }),
};

/** `GET /api/health` as it came (cluster.ts parseClusterHealth checks it). */
export async function fetchHealth(signal?: AbortSignal): Promise<unknown> {
  const r = await fetch('/api/health', { signal: signal ?? null }).catch(unreachable);
  if (!r.ok) throw await refusal(r);
  return (await r.json()) as unknown;
}

/** `GET /api/events?scope=cluster`: every hub's newest events (503 CLUSTER_UNAVAILABLE while Redis is away). */
export async function fetchClusterEvents(limit: number, signal?: AbortSignal): Promise<unknown> {
  const r = await fetch(`/api/events?scope=cluster&limit=${limit}`, { signal: signal ?? null }).catch(unreachable);
  if (!r.ok) throw await refusal(r);
  return (await r.json()) as unknown;
}
