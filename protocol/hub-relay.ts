/**
 * The relay between hubs of a cluster (issue 30, "any volunteer, any hub"): hub A, whose coordinator's dispatcher wants
 * pairs that a worker attached to hub B holds, sends the work item to hub B over one WebSocket (A dials B's
 * `/api/hub-relay`), and B hands it to its own link of that worker (its volunteer channel or a Kvasir relay) and sends
 * the sums back. One message is one frame; frames are multiplexed by `id` and answered in any order. All integers and
 * floats little-endian; every array starts at a multiple of 4 bytes.
 *
 *   WORK    u8 kind=1, u8 version, u16 layer, u32 id, u32 deadline_ms, u32 n_embd, u32 n_rows, u32 n_pairs,
 *           u16 begin (the expert the LOCAL ids count from), u8 model_len, u8 worker_len, model, worker (UTF-8, padded
 *           to 4), f32 rows[n_rows × n_embd], u32 row[n_pairs], f32 weight[n_pairs], u16 local[n_pairs] (padded to 4)
 *   ANSWER  u8 kind=2, u8 version, u8 status, u8 reason_len, u32 id, u32 compute_us, u32 n_sums, reason (UTF-8,
 *           padded to 4), f32 sums[n_sums] (n_sums = n_rows × n_embd of the WORK when status is OK, else 0)
 *
 *   const bytes = encodeRelayWork({ id: 7, deadlineMs: 250, model: 'm', workerId: 'w1', begin: 4, work });
 *   const w = decodeRelayFrame(bytes);             // throws HubRelayError (BAD_FRAME, TOO_LARGE, VERSION)
 *
 * The dialing hub authenticates with the token the dialed hub published in its cluster record (`?hub=ID&token=T`):
 * whoever can read the cluster's Redis is trusted with its state already.
 */

export const HUB_RELAY_PATH = '/api/hub-relay';
export const HUB_RELAY_VERSION = 1;

export const HUB_RELAY_LIMITS = Object.freeze({
  maxRows: 8192,
  maxPairs: 65_536,
  maxEmbd: 65_536,
  maxNameBytes: 255,
  /** One frame (WORK or ANSWER); the WebSocket's maxPayload. */
  maxFrameBytes: 256 * 1024 * 1024,
  maxReasonBytes: 255,
});

export enum HubRelayKind {
  Work = 1,
  Answer = 2,
}

/** An ANSWER's status: the sums, or why there are none (the dialing hub's dispatcher computes those pairs itself). */
export enum HubRelayStatus {
  Ok = 0,
  /** The worker is not attached to this hub (any more), or holds no such slice. */
  WorkerUnknown = 1,
  /** The worker's link failed the item (its own error, a deadline, a disconnect). */
  WorkerFailed = 2,
  /** The hub refused the item (too many in flight on this relay). */
  Busy = 3,
}

/** WebSocket close codes of a relay between hubs. */
export const HUB_RELAY_CLOSE = Object.freeze({
  /** A frame that does not decode, or an ANSWER sent to the dialed side. */
  BAD_FRAME: 4400,
  /** The hub is shutting down. */
  GOING_AWAY: 1001,
});

export type HubRelayErrorCode = 'BAD_FRAME' | 'TOO_LARGE' | 'VERSION';

export class HubRelayError extends Error {
  constructor(
    readonly code: HubRelayErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'HubRelayError';
  }
}

/** The work item as the dispatcher's links take it (hub/dispatch/worker-link.ts WorkItem, restated: protocol/ imports no hub). */
export interface RelayWorkItem {
  layer: number;
  nEmbd: number;
  rows: Float32Array;
  nRows: number;
  nPairs: number;
  rowIndex: Uint32Array;
  localExpert: Uint16Array;
  weight: Float32Array;
}

export interface RelayWork {
  id: number;
  deadlineMs: number;
  model: string;
  workerId: string;
  /** The expert `localExpert` counts from (the dialing hub's view of the worker's slice). */
  begin: number;
  work: RelayWorkItem;
}

export interface RelayAnswer {
  id: number;
  status: HubRelayStatus;
  /** The worker's own time on the item, µs (0: not reported). */
  computeUs: number;
  reason: string;
  /** `f32[nRows × nEmbd]` when OK; empty otherwise. */
  sums: Float32Array;
}

export type HubRelayFrame = ({ kind: HubRelayKind.Work } & RelayWork) | ({ kind: HubRelayKind.Answer } & RelayAnswer);

const WORK_FIXED = 28;
const ANSWER_FIXED = 16;
const pad4 = (n: number): number => (n + 3) & ~3;
const utf8 = new TextEncoder();
const text = new TextDecoder('utf-8', { fatal: true });

function checkInt(what: string, v: number, min: number, max: number): void {
  if (!Number.isInteger(v) || v < min || v > max)
    throw new HubRelayError('BAD_FRAME', `${what} ${v} is not an integer in [${min}, ${max}]`);
}

function name(what: string, s: string): Uint8Array {
  const b = utf8.encode(s);
  if (b.length < 1 || b.length > HUB_RELAY_LIMITS.maxNameBytes)
    throw new HubRelayError('BAD_FRAME', `${what} is ${b.length} bytes; 1..${HUB_RELAY_LIMITS.maxNameBytes} are allowed`);
  return b;
}

export function encodeRelayWork(w: RelayWork): Uint8Array {
  const { work } = w;
  checkInt('n_rows', work.nRows, 1, HUB_RELAY_LIMITS.maxRows);
  checkInt('n_pairs', work.nPairs, 1, HUB_RELAY_LIMITS.maxPairs);
  checkInt('n_embd', work.nEmbd, 1, HUB_RELAY_LIMITS.maxEmbd);
  checkInt('layer', work.layer, 0, 0xffff);
  checkInt('begin', w.begin, 0, 0xffff);
  const model = name('model', w.model);
  const worker = name('worker id', w.workerId);
  const names = pad4(model.length + worker.length);
  const nRowF = work.nRows * work.nEmbd;
  const bytes = WORK_FIXED + names + 4 * nRowF + 8 * work.nPairs + pad4(2 * work.nPairs);
  if (bytes > HUB_RELAY_LIMITS.maxFrameBytes) throw new HubRelayError('TOO_LARGE', `a WORK of ${bytes} bytes`);
  const out = new Uint8Array(bytes);
  const v = new DataView(out.buffer);
  v.setUint8(0, HubRelayKind.Work);
  v.setUint8(1, HUB_RELAY_VERSION);
  v.setUint16(2, work.layer, true);
  v.setUint32(4, w.id >>> 0, true);
  v.setUint32(8, Math.max(0, Math.min(0xffffffff, Math.round(w.deadlineMs))), true);
  v.setUint32(12, work.nEmbd, true);
  v.setUint32(16, work.nRows, true);
  v.setUint32(20, work.nPairs, true);
  v.setUint16(24, w.begin, true);
  v.setUint8(26, model.length);
  v.setUint8(27, worker.length);
  out.set(model, WORK_FIXED);
  out.set(worker, WORK_FIXED + model.length);
  let at = WORK_FIXED + names;
  new Float32Array(out.buffer, at, nRowF).set(work.rows.subarray(0, nRowF));
  at += 4 * nRowF;
  new Uint32Array(out.buffer, at, work.nPairs).set(work.rowIndex.subarray(0, work.nPairs));
  at += 4 * work.nPairs;
  new Float32Array(out.buffer, at, work.nPairs).set(work.weight.subarray(0, work.nPairs));
  at += 4 * work.nPairs;
  new Uint16Array(out.buffer, at, work.nPairs).set(work.localExpert.subarray(0, work.nPairs));
  return out;
}

export function encodeRelayAnswer(a: RelayAnswer): Uint8Array {
  const reason = utf8.encode(a.reason).subarray(0, HUB_RELAY_LIMITS.maxReasonBytes);
  const sums = a.status === HubRelayStatus.Ok ? a.sums : new Float32Array(0);
  const at = ANSWER_FIXED + pad4(reason.length);
  const out = new Uint8Array(at + 4 * sums.length);
  const v = new DataView(out.buffer);
  v.setUint8(0, HubRelayKind.Answer);
  v.setUint8(1, HUB_RELAY_VERSION);
  v.setUint8(2, a.status);
  v.setUint8(3, reason.length);
  v.setUint32(4, a.id >>> 0, true);
  v.setUint32(8, Math.max(0, Math.min(0xffffffff, Math.round(a.computeUs))), true);
  v.setUint32(12, sums.length, true);
  out.set(reason, ANSWER_FIXED);
  new Float32Array(out.buffer, at, sums.length).set(sums);
  return out;
}

/** Decodes one frame; copies the arrays out (aligned, owned). Throws HubRelayError on anything malformed. */
export function decodeRelayFrame(bytes: Uint8Array): HubRelayFrame {
  if (bytes.length > HUB_RELAY_LIMITS.maxFrameBytes) throw new HubRelayError('TOO_LARGE', `a frame of ${bytes.length} bytes`);
  if (bytes.length < 4) throw new HubRelayError('BAD_FRAME', `a frame of ${bytes.length} bytes`);
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const kind = v.getUint8(0);
  const version = v.getUint8(1);
  if (version !== HUB_RELAY_VERSION) throw new HubRelayError('VERSION', `relay version ${version}; this hub speaks ${HUB_RELAY_VERSION}`);
  const copyF32 = (at: number, n: number) => new Float32Array(bytes.slice(at, at + 4 * n).buffer);
  if (kind === HubRelayKind.Work) {
    if (bytes.length < WORK_FIXED) throw new HubRelayError('BAD_FRAME', `a WORK of ${bytes.length} bytes`);
    const layer = v.getUint16(2, true);
    const nEmbd = v.getUint32(12, true);
    const nRows = v.getUint32(16, true);
    const nPairs = v.getUint32(20, true);
    checkInt('n_rows', nRows, 1, HUB_RELAY_LIMITS.maxRows);
    checkInt('n_pairs', nPairs, 1, HUB_RELAY_LIMITS.maxPairs);
    checkInt('n_embd', nEmbd, 1, HUB_RELAY_LIMITS.maxEmbd);
    const ml = v.getUint8(26);
    const wl = v.getUint8(27);
    if (ml === 0 || wl === 0) throw new HubRelayError('BAD_FRAME', 'a WORK without a model or a worker id');
    const names = pad4(ml + wl);
    const want = WORK_FIXED + names + 4 * nRows * nEmbd + 8 * nPairs + pad4(2 * nPairs);
    if (bytes.length !== want) throw new HubRelayError('BAD_FRAME', `a WORK of ${bytes.length} bytes; its header implies ${want}`);
    let model: string;
    let workerId: string;
    try {
      model = text.decode(bytes.subarray(WORK_FIXED, WORK_FIXED + ml));
      workerId = text.decode(bytes.subarray(WORK_FIXED + ml, WORK_FIXED + ml + wl));
    } catch {
      throw new HubRelayError('BAD_FRAME', 'a model or worker id that is not UTF-8');
    }
    let at = WORK_FIXED + names;
    const rows = copyF32(at, nRows * nEmbd);
    at += 4 * nRows * nEmbd;
    const rowIndex = new Uint32Array(bytes.slice(at, at + 4 * nPairs).buffer);
    at += 4 * nPairs;
    const weight = copyF32(at, nPairs);
    at += 4 * nPairs;
    const localExpert = new Uint16Array(bytes.slice(at, at + 2 * nPairs).buffer);
    for (let p = 0; p < nPairs; p++) {
      if ((rowIndex[p] as number) >= nRows) throw new HubRelayError('BAD_FRAME', `pair ${p} names row ${rowIndex[p]} of ${nRows}`);
      if (!Number.isFinite(weight[p] as number)) throw new HubRelayError('BAD_FRAME', `pair ${p}'s weight is not finite`);
    }
    return {
      kind,
      id: v.getUint32(4, true),
      deadlineMs: v.getUint32(8, true),
      model,
      workerId,
      begin: v.getUint16(24, true),
      work: { layer, nEmbd, rows, nRows, nPairs, rowIndex, localExpert, weight },
    };
  }
  if (kind === HubRelayKind.Answer) {
    if (bytes.length < ANSWER_FIXED) throw new HubRelayError('BAD_FRAME', `an ANSWER of ${bytes.length} bytes`);
    const status = v.getUint8(2);
    if (!(status in HubRelayStatus)) throw new HubRelayError('BAD_FRAME', `an ANSWER with status ${status}`);
    const rl = v.getUint8(3);
    const n = v.getUint32(12, true);
    const at = ANSWER_FIXED + pad4(rl);
    if (bytes.length !== at + 4 * n)
      throw new HubRelayError('BAD_FRAME', `an ANSWER of ${bytes.length} bytes; its header implies ${at + 4 * n}`);
    if (status !== HubRelayStatus.Ok && n !== 0) throw new HubRelayError('BAD_FRAME', 'a failed ANSWER with sums');
    let reason: string;
    try {
      reason = text.decode(bytes.subarray(ANSWER_FIXED, ANSWER_FIXED + rl));
    } catch {
      throw new HubRelayError('BAD_FRAME', 'a reason that is not UTF-8');
    }
    return { kind, id: v.getUint32(4, true), status, computeUs: v.getUint32(8, true), reason, sums: copyF32(at, n) };
  }
  throw new HubRelayError('BAD_FRAME', `a frame of kind ${kind}`);
}
