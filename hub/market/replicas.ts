/**
 * Which held ranges count as replicas for recruitment: only those of a worker the hub can send work to. A worker that
 * holds a slice nothing can reach is in the census (the dispatch map, the workers table, `workers` of a coverage
 * answer) but not in the replica counts demand, recruitment and surplus release read (coverage.ts `replicaCounts`):
 * counted, it would lower demand for experts nobody serves, and make reachable volunteers look surplus.
 *
 *   const v = replicaVerdict({ via: 'http', relay: 'none' });   // { counts: false, code: 'no-work-link', ... }
 *   store.heartbeat(workerId, model, ranges, nowMs, v.counts);
 *
 * Work reaches a worker over its volunteer channel (`/api/volunteer`: each serving tab is a dispatcher link), or, for a
 * Kvasir worker that reports over HTTP, over the relay it dials (Kvasir's `/api/expert-relay`, hub/relay/relay.ts): an
 * HTTP-only worker counts while its relay is dialed, never before. A channel volunteer still loading its slice counts
 * already (the channel reserves its range, so that one round of demand does not recruit every idle volunteer).
 */

export interface ReplicaInput {
  /** 'channel': the worker is on the volunteer channel; 'http': it reports over `POST /api/expert-coverage` only. */
  via: 'channel' | 'http';
  /** An HTTP worker's relay session: 'dialed' while its relay is connected, else 'none'. */
  relay: 'none' | 'dialed';
}

export type ReplicaCode =
  /** Its channel connection is its work link. */
  | 'channel'
  /** Its dialed relay is its work link. */
  | 'relay'
  /** Nothing can send it work: held, not a replica. */
  | 'no-work-link';

export interface ReplicaVerdict {
  counts: boolean;
  code: ReplicaCode;
  reason: string;
}

export function replicaVerdict(w: ReplicaInput): ReplicaVerdict {
  if (w.via === 'channel') return { counts: true, code: 'channel', reason: 'its volunteer channel carries its work' };
  if (w.relay === 'dialed') return { counts: true, code: 'relay', reason: 'its relay carries its work' };
  return {
    counts: false,
    code: 'no-work-link',
    reason: 'nothing can send it work (no channel, no dialed relay), so it is not a replica',
  };
}
