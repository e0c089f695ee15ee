/**
 * What the hubs of a cluster write into Redis and read back, and the checks on every value read back. Pure. Redis is
 * shared with other processes (and with an operator's redis-cli): a value that is not what a hub writes is refused
 * with CLUSTER_STATE_CORRUPT (hub/errors.ts) naming the key and what is wrong, never a crash, never silently used.
 *
 *   const text = encodeWorker(record);           // SET expertswarm:worker:w1 <text> PX staleMs
 *   const back = decodeWorker(text, 'expertswarm:worker:w1');   // throws HubError CLUSTER_STATE_CORRUPT on garbage
 *
 * Records carry a version (`v`); a hub refuses a version it does not know, as it refuses garbage.
 */
import { HubError } from '../errors.ts';
import { HELD_RANGE_NUMBER_LIMIT, HELD_RANGES_MAX, WORKER_ID_MAX_CHARS } from '../limits.ts';
import type { HeldRange } from '../../protocol/slice.ts';
import { HUB_ID_MAX_CHARS, isCreditItem } from './keys.ts';

/** The version of every record this code writes. */
export const CLUSTER_RECORD_VERSION = 1;

/** A value read from Redis longer than this is refused unread (a worker record is well under 8 KiB). */
export const CLUSTER_VALUE_MAX_CHARS = 64 * 1024;

/**
 * One worker's record as its hub publishes it at each heartbeat: enough for another hub's dispatch map row, demand
 * and recruitment. Field names are snake_case, as the rows of `GET /api/expert-dispatch-map` name them.
 */
export interface ClusterWorker {
  v: typeof CLUSTER_RECORD_VERSION;
  worker_id: string;
  /** The hub the worker is attached to (its channel, its heartbeats). */
  hub: string;
  model: string;
  wallet: string | null;
  /** Merged held ranges, as the hub's coverage stores them. */
  ranges: HeldRange[];
  /** Whether its ranges count as replicas (market/replicas.ts: a work link reaches it). */
  replica: boolean;
  /** The hub's clock at the heartbeat this record was written at. */
  seen_ms: number;
  attach_ms: number;
  last_serve_ms: number | null;
  latency_ms: number | null;
  audits: number;
  audits_passed: number;
  audit_nmse_last: number | null;
  audit_nmse_max: number | null;
  quarantined: boolean;
  released: boolean;
}

/** A quarantine entry (the value of one field of the quarantine hash). */
export interface ClusterQuarantine {
  reason: string;
  since_ms: number;
  /** The hub that quarantined the subject. */
  hub: string;
}

/** A wallet's credit as the wallet hash holds it. */
export interface ClusterCredit {
  credit_pairs: number;
  first_seen_ms: number | null;
  last_seen_ms: number | null;
}

/** What a hub tells the others on the bus channel. */
export type BusMessage =
  | { kind: 'quarantine'; subject: string; reason: string; hub: string }
  | { kind: 'credit'; wallet: string; credit_pairs: number; hub: string };

/** A reason or subject longer than this is refused (hub reasons are one sentence). */
const TEXT_MAX_CHARS = 2_000;

/** The stable refusal of a value read back from Redis. */
export function corrupt(key: string, why: string): HubError {
  return new HubError('CLUSTER_STATE_CORRUPT', `the cluster's Redis holds an unreadable value at ${key}: ${why}`);
}

function parse(text: unknown, key: string): Record<string, unknown> {
  if (typeof text !== 'string') throw corrupt(key, `expected a string, got ${text === null ? 'nil' : typeof text}`);
  if (text.length > CLUSTER_VALUE_MAX_CHARS) throw corrupt(key, `${text.length} characters, more than ${CLUSTER_VALUE_MAX_CHARS}`);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw corrupt(key, 'not JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw corrupt(key, 'not a JSON object');
  return v as Record<string, unknown>;
}

/** Field readers over a parsed object: each throws CLUSTER_STATE_CORRUPT naming the key and the field. */
function fields(o: Record<string, unknown>, key: string) {
  const bad = (f: string, want: string) => corrupt(key, `${f} must be ${want}, got ${JSON.stringify(o[f])?.slice(0, 80)}`);
  const str = (f: string, max: number, min = 1): string => {
    const v = o[f];
    if (typeof v !== 'string' || v.length < min || v.length > max) throw bad(f, `a string of ${min} to ${max} characters`);
    return v;
  };
  const ms = (f: string): number => {
    const v = o[f];
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw bad(f, 'a non-negative integer');
    return v;
  };
  const count = ms;
  const num = (f: string, nullable: boolean): number | null => {
    const v = o[f];
    if (v === null && nullable) return null;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw bad(f, `a finite number ≥ 0${nullable ? ' or null' : ''}`);
    return v;
  };
  const msOrNull = (f: string): number | null => (o[f] === null ? null : ms(f));
  const bool = (f: string): boolean => {
    const v = o[f];
    if (typeof v !== 'boolean') throw bad(f, 'true or false');
    return v;
  };
  return { str, ms, count, num, msOrNull, bool, bad };
}

function version(o: Record<string, unknown>, key: string): void {
  if (o.v !== CLUSTER_RECORD_VERSION) throw corrupt(key, `record version ${JSON.stringify(o.v)}, this hub reads ${CLUSTER_RECORD_VERSION}`);
}

/** Held ranges as a record carries them: at most HELD_RANGES_MAX `[layer, begin, end]`, integers, begin < end. */
function ranges(v: unknown, key: string): HeldRange[] {
  if (!Array.isArray(v) || v.length > HELD_RANGES_MAX) throw corrupt(key, `ranges must be an array of at most ${HELD_RANGES_MAX}`);
  return v.map((r, i) => {
    if (
      !Array.isArray(r) ||
      r.length !== 3 ||
      !r.every((x) => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < HELD_RANGE_NUMBER_LIMIT) ||
      r[1] >= r[2]
    ) {
      throw corrupt(key, `ranges[${i}] must be [layer, begin, end] of integers with begin < end`);
    }
    return [r[0], r[1], r[2]] as HeldRange;
  });
}

export function encodeWorker(w: ClusterWorker): string {
  return JSON.stringify(w);
}

/** A worker record read back; `key` names it in the refusal. `expectId`: the id the key names (a record under another key is refused). */
export function decodeWorker(text: unknown, key: string, expectId?: string): ClusterWorker {
  const o = parse(text, key);
  version(o, key);
  const f = fields(o, key);
  const worker_id = f.str('worker_id', WORKER_ID_MAX_CHARS);
  if (expectId !== undefined && worker_id !== expectId) throw corrupt(key, `the record is of worker ${JSON.stringify(worker_id)}`);
  const wallet = o.wallet === null ? null : f.str('wallet', 128);
  return {
    v: CLUSTER_RECORD_VERSION,
    worker_id,
    hub: f.str('hub', HUB_ID_MAX_CHARS),
    model: f.str('model', 256),
    wallet,
    ranges: ranges(o.ranges, key),
    replica: f.bool('replica'),
    seen_ms: f.ms('seen_ms'),
    attach_ms: f.ms('attach_ms'),
    last_serve_ms: f.msOrNull('last_serve_ms'),
    latency_ms: f.num('latency_ms', true),
    audits: f.count('audits'),
    audits_passed: f.count('audits_passed'),
    audit_nmse_last: f.num('audit_nmse_last', true),
    audit_nmse_max: f.num('audit_nmse_max', true),
    quarantined: f.bool('quarantined'),
    released: f.bool('released'),
  };
}

/** A live hub's announcement (`P:hub:ID`): where the other hubs reach its relay (`/api/hub-relay`) and the token it takes. */
export interface ClusterHub {
  v: 1;
  hub: string;
  started_ms: number;
  /** `ws://` or `wss://` base URL of the hub; null: it takes no relay (a hub that did not say where it listens). */
  relay_url: string | null;
  relay_token: string;
  /** `http://` or `https://` origin where clients and volunteers reach the hub; null (or absent): none announced. */
  public_url: string | null;
}

/** A hub's public URL: an http(s) origin (`--public-url`), with an optional trailing slash. */
export const PUBLIC_URL = /^https?:\/\/[^\s/?#]+\/?$/;

export function encodeHub(h: ClusterHub): string {
  return JSON.stringify(h);
}

export function decodeHub(text: unknown, key: string): ClusterHub {
  const o = parse(text, key);
  version(o, key);
  const f = fields(o, key);
  const relay_url = o.relay_url === null ? null : f.str('relay_url', 512);
  if (relay_url !== null && !/^wss?:\/\/[^\s/?#]+\/?$/.test(relay_url)) throw f.bad('relay_url', 'a ws:// or wss:// base URL');
  const publicUrl = o.public_url === null || o.public_url === undefined ? null : f.str('public_url', 512);
  if (publicUrl !== null && !PUBLIC_URL.test(publicUrl)) throw f.bad('public_url', 'an http:// or https:// origin');
  return {
    v: CLUSTER_RECORD_VERSION,
    hub: f.str('hub', HUB_ID_MAX_CHARS),
    started_ms: f.ms('started_ms'),
    relay_url,
    relay_token: f.str('relay_token', 128, 16),
    public_url: publicUrl,
  };
}

export function encodeQuarantine(q: ClusterQuarantine): string {
  return JSON.stringify({ v: CLUSTER_RECORD_VERSION, ...q });
}

export function decodeQuarantine(text: unknown, key: string): ClusterQuarantine {
  const o = parse(text, key);
  version(o, key);
  const f = fields(o, key);
  return { reason: f.str('reason', TEXT_MAX_CHARS), since_ms: f.ms('since_ms'), hub: f.str('hub', HUB_ID_MAX_CHARS) };
}

/** A count Redis holds as a decimal string (HINCRBY's, a script's reply): a safe non-negative integer. */
export function decodeCount(v: unknown, key: string): number {
  const text = typeof v === 'number' ? String(v) : v;
  if (typeof text !== 'string' || !/^\d{1,16}$/.test(text)) throw corrupt(key, `expected a count, got ${JSON.stringify(v)?.slice(0, 80)}`);
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw corrupt(key, `the count ${text} is beyond 2^53`);
  return n;
}

/**
 * A wallet hash as HGETALL returns it ({} when absent: undefined). Unknown fields are refused too: nothing but the hubs
 * write there.
 */
export function decodeCredit(h: unknown, key: string): ClusterCredit | undefined {
  if (typeof h !== 'object' || h === null || Array.isArray(h)) throw corrupt(key, 'expected a hash');
  const o = h as Record<string, unknown>;
  const names = Object.keys(o);
  if (names.length === 0) return undefined;
  const unknown = names.find((n) => n !== 'credit_pairs' && n !== 'first_seen_ms' && n !== 'last_seen_ms');
  if (unknown !== undefined) throw corrupt(key, `unknown field ${JSON.stringify(unknown.slice(0, 40))}`);
  const opt = (f: string): number | null => (o[f] === undefined ? null : decodeCount(o[f], `${key} ${f}`));
  return { credit_pairs: opt('credit_pairs') ?? 0, first_seen_ms: opt('first_seen_ms'), last_seen_ms: opt('last_seen_ms') };
}

export function encodeBus(m: BusMessage): string {
  return JSON.stringify({ v: CLUSTER_RECORD_VERSION, ...m });
}

export function decodeBus(text: unknown, channel: string): BusMessage {
  const o = parse(text, channel);
  version(o, channel);
  const f = fields(o, channel);
  const hub = f.str('hub', HUB_ID_MAX_CHARS);
  if (o.kind === 'quarantine') return { kind: 'quarantine', subject: f.str('subject', 256), reason: f.str('reason', TEXT_MAX_CHARS), hub };
  if (o.kind === 'credit') return { kind: 'credit', wallet: f.str('wallet', 128), credit_pairs: f.count('credit_pairs'), hub };
  throw corrupt(channel, `unknown message kind ${JSON.stringify(o.kind)?.slice(0, 40)}`);
}

/** A credit write's arguments, checked before anything is sent (a caller's bug is a RangeError, not bad state). */
export function checkCreditWrite(item: string, wallet: string, pairs: number): void {
  if (!isCreditItem(item)) throw new RangeError(`a credit item id is 1 to 256 printable ASCII characters, got ${JSON.stringify(item)}`);
  if (typeof wallet !== 'string' || wallet.length === 0 || wallet.length > 128) throw new RangeError('a credit needs a wallet');
  if (!Number.isSafeInteger(pairs) || pairs < 0) throw new RangeError(`credit must be a non-negative integer, got ${pairs}`);
}
