/**
 * The coordinator↔dispatcher expert-dispatch protocol, versions 1 to 3 (docs/dispatch-protocol.md).
 * The coordinator's side is coordinator/src/src/llama-expert-dispatch.cpp; both follow the same document.
 *
 * Every frame: a 16-byte little-endian header {magic "EXDP", version u16, kind u16, seq u32, payload u32}, then
 * the payload. Sizes are capped before anything is allocated.
 *
 * Audit: a RESPONSE may flag pairs it did not serve as audited; the coordinator computes them (as it computes every
 * pair not served) and reports their sums in an AUDIT frame with the request's seq, the trusted reference a worker's
 * answer for the same pairs is held against (probation, spot checks).
 *
 * Version 2 (claims and overlap): the dispatcher answers a REQUEST at once with a CLAIM (the pairs it sent to
 * workers); the coordinator computes the unclaimed pairs meanwhile, then reads the RESULT (the served pairs' sums)
 * and computes any claimed pair that did not arrive. The version is negotiated in HELLO: the coordinator's HELLO
 * carries the highest version it speaks, HELLO_ACK the version of the connection, which every later frame carries.
 *
 * Version 3 (standing offers): v2 plus an offer trailer on each RESULT (which experts of the layer the dispatcher
 * takes of its next REQUEST, and how many pairs, as a line in the request's size) and a pre-claim trailer on each
 * REQUEST: the coordinator gives the dispatcher the pairs an unexpired offer lets it, computes the rest at once, and
 * reads no CLAIM for that REQUEST — the exchange's wait leaves the coordinator's critical path.
 */
import type { Numerics } from './numerics.ts';

export const DISPATCH_MAGIC = 0x50445845;
/** The highest version this side speaks; a connection speaks min(the coordinator's, this). */
export const DISPATCH_VERSION = 3;
export const DISPATCH_MIN_VERSION = 1;
export type DispatchVersion = 1 | 2 | 3;
export const HEADER_BYTES = 16;

export enum FrameKind {
  Hello = 1,
  HelloAck = 2,
  Request = 3,
  Response = 4,
  /** Coordinator → dispatcher after a RESPONSE (v1) or CLAIM (v2) that asked for audits: the audited pairs' sums. */
  Audit = 5,
  /** v2, dispatcher → coordinator at once: the pairs sent to workers (and audits); the coordinator computes the rest. */
  Claim = 6,
  /** v2, dispatcher → coordinator after a CLAIM with claimed pairs: which of them were served, and their sums. */
  Result = 7,
}

/** Which kinds a connection of each version may carry (RESPONSE is v1's answer; CLAIM and RESULT replace it in v2). */
const KINDS_OF_VERSION: Readonly<Record<DispatchVersion, ReadonlySet<FrameKind>>> = Object.freeze({
  1: new Set([FrameKind.Hello, FrameKind.HelloAck, FrameKind.Request, FrameKind.Response, FrameKind.Audit]),
  2: new Set([FrameKind.Hello, FrameKind.HelloAck, FrameKind.Request, FrameKind.Audit, FrameKind.Claim, FrameKind.Result]),
  3: new Set([FrameKind.Hello, FrameKind.HelloAck, FrameKind.Request, FrameKind.Audit, FrameKind.Claim, FrameKind.Result]),
});

export const DISPATCH_LIMITS = Object.freeze({
  maxRows: 8192,
  maxEmbd: 65536,
  maxUsed: 64,
  maxModelDesc: 256,
  maxPayload: 256 * 1024 * 1024,
  maxQuietMs: 60_000,
  /** v3: an offer is good for at most this long after the coordinator read it. */
  maxOfferTtlMs: 1000,
  /** v3: an offer's `b` (pairs) lies within ±this. */
  maxOfferB: 1_000_000,
});

const HELLO_FIXED = 28;
const HELLO_ACK_BYTES = 8;
const REQUEST_FIXED = 24;
const RESPONSE_FIXED = 28;
const AUDIT_FIXED = 16;
const CLAIM_FIXED = 24;
const RESULT_FIXED = 16;
/** v3 trailers: REQUEST's {n_preclaimed u32}, RESULT's offer {ttl_ms u32, max_pairs u32, a f32, b f32}. */
const PRECLAIM_FIXED = 4;
const OFFER_FIXED = 16;

export type DispatchErrorCode =
  | 'DISPATCH_BAD_MAGIC'
  | 'DISPATCH_BAD_VERSION'
  | 'DISPATCH_BAD_KIND'
  | 'DISPATCH_TOO_LARGE'
  | 'DISPATCH_BAD_FRAME'
  | 'DISPATCH_BAD_NUMERICS'
  /** Audit flags that are not 0/1, do not add up to n_audit, or mark a served pair (the coordinator drops such a frame). */
  | 'DISPATCH_BAD_AUDIT'
  /** v2: claimed/served flags that are not 0/1, do not add up, or a pair served that was not claimed. */
  | 'DISPATCH_BAD_CLAIM';

export class DispatchProtocolError extends Error {
  constructor(
    readonly code: DispatchErrorCode,
    message: string,
  ) {
    super(`${code}: ${message}`);
    this.name = 'DispatchProtocolError';
  }
}

/**
 * HELLO's `numerics` field on the wire: how the coordinator computes the pairs it keeps, so workers can round as it
 * does (docs/numerics.md). 0 = unknown / exact float math, 1 = llama.cpp's CPU backend (activations converted to each
 * weight type's vec_dot type before the dot products; linkcpp-server always sends 1).
 */
export const NUMERICS_WIRE: Readonly<Record<Numerics, number>> = Object.freeze({ exact: 0, llama: 1 });

function numericsFromWire(v: number): Numerics {
  if (v === NUMERICS_WIRE.exact) return 'exact';
  if (v === NUMERICS_WIRE.llama) return 'llama';
  throw new DispatchProtocolError('DISPATCH_BAD_NUMERICS', `numerics ${v} is neither 0 (exact) nor 1 (llama)`);
}

export interface FrameHeader {
  /** The version in the header: HELLO's is the highest the coordinator speaks, every other frame's the connection's. */
  version: DispatchVersion;
  kind: FrameKind;
  seq: number;
  payloadBytes: number;
}

export interface Hello {
  nLayer: number;
  nEmbd: number;
  nExpert: number;
  nExpertUsed: number;
  deadlineMs: number;
  /** How the coordinator computes the pairs it keeps; workers serving it round the same way. */
  numerics: Numerics;
  /** llama.cpp's description of the model (llama_model_desc, e.g. "qwen3moe 30B.A3B Q4_K - Medium"), not the hub's name for it. */
  modelDesc: string;
}

export interface DispatchRequest {
  seq: number;
  layer: number;
  nTokens: number;
  nEmbd: number;
  nUsed: number;
  /** How long the coordinator waits for this answer. */
  deadlineUs: number;
  /** The coordinator's recent wall time per locally computed (token, expert) pair on this layer; 0 = not measured yet. */
  localNsPerPair: number;
  /** [nTokens × nEmbd] normed rows. */
  rows: Float32Array;
  /** [nTokens × nUsed] expert ids chosen by the coordinator's router. */
  ids: Int32Array;
  /** [nTokens × nUsed] router probabilities of those experts, after the model's normalisation and scaling. */
  probs: Float32Array;
  /**
   * v3: `preclaimed[t·nUsed + k]` = 1 for each pair the coordinator gave the dispatcher under its standing offer: it
   * reads no CLAIM for this REQUEST, treats these pairs as claimed and waits for their RESULT. Null or absent: none
   * (the v2 exchange: a CLAIM follows).
   */
  preclaimed?: Uint8Array | null;
}

/**
 * v3: what the dispatcher takes of the layer's next REQUEST, sent on a RESULT. Within `ttlMs` of reading it, the
 * coordinator may pre-claim c = min(maxPairs, covered, ⌊a·N − b⌋) pairs of the next REQUEST of the layer (N its pairs,
 * `covered` those whose expert's bit is set in `experts`), taking covered pairs in (t, k) order, whole tokens first;
 * c ≤ 0 computes the layer locally with no exchange. Used once: the next RESULT brings the next offer, or none.
 */
export interface DispatchOffer {
  /** How long it stays good after it is read, ms (1..maxOfferTtlMs). */
  ttlMs: number;
  /** At most this many pairs (≥ 1). */
  maxPairs: number;
  /** The line's slope in [0, 1] and offset (pairs): the balanced split of N pairs takes a·N − b. */
  a: number;
  b: number;
  /** Bit e (byte e >> 3, bit e & 7) set when expert e may be pre-claimed; ⌈n_expert / 8⌉ bytes. */
  experts: Uint8Array;
}

interface ResponseBase {
  seq: number;
  layer: number;
  nTokens: number;
  nUsed: number;
  /** Asks the coordinator not to dispatch this layer for this long (0 = ask again next time). */
  quietMs: number;
  /**
   * `audit[t·nUsed + k]` = 1 asks the coordinator to report its own sum over the flagged pairs (an AUDIT frame after
   * the layer). Only pairs not served may be flagged: the coordinator computes exactly those. Absent (or all 0) = none;
   * decoding leaves it out when n_audit is 0.
   */
  audit?: Uint8Array;
}

/** "Compute everything locally." */
export interface LocalResponse extends ResponseBase {
  mode: 'local';
}

/** Some pairs served: `served[t·nUsed + k]` is 1 when pair (t, k) is included in `sums[t·nEmbd …]`. */
export interface ServedResponse extends ResponseBase {
  mode: 'served';
  served: Uint8Array;
  sums: Float32Array;
}

export type DispatchResponse = LocalResponse | ServedResponse;

/**
 * v2's immediate answer: `claimed[t·nUsed + k]` = 1 for each pair sent to a worker (the coordinator leaves it for
 * the RESULT); null (or all 0) = none, every pair local, no RESULT follows. `audit` as in a RESPONSE; a pair may not
 * be both claimed and audited.
 */
export interface DispatchClaim {
  seq: number;
  layer: number;
  nTokens: number;
  nUsed: number;
  quietMs: number;
  claimed: Uint8Array | null;
  audit?: Uint8Array | null;
}

/**
 * v2's second answer, once after a CLAIM with claimed pairs: `served` ⊆ claimed, and per token `sums[t]` = Σ over its
 * served pairs of prob · expert(row). The coordinator computes the claimed pairs that were not served.
 */
export interface DispatchResult {
  seq: number;
  layer: number;
  nTokens: number;
  nUsed: number;
  served: Uint8Array;
  /** [nTokens × nEmbd]. */
  sums: Float32Array;
  /** v3: the standing offer for the layer's next REQUEST (null or absent: none). */
  offer?: DispatchOffer | null;
}

/**
 * The coordinator's own sums of the pairs a RESPONSE flagged for audit, per row t: Σ over audited k, in k order, of
 * probs[t,k] · expert_{ids[t,k]}(rows[t]), computed as it computes every pair it keeps (bit for bit its stock
 * arithmetic). Rows without audited pairs are 0.
 */
export interface DispatchAudit {
  /** The seq of the REQUEST (and RESPONSE) it belongs to. */
  seq: number;
  layer: number;
  nTokens: number;
  /** How many pairs the sums cover (the RESPONSE's n_audit). */
  nAudit: number;
  /** [nTokens × nEmbd]. */
  sums: Float32Array;
}

const pad4 = (n: number): number => (n + 3) & ~3;

function checkInt(name: string, v: number, min: number, max: number): void {
  if (!Number.isInteger(v) || v < min || v > max) {
    throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `${name} ${v} is outside [${min}, ${max}]`);
  }
}

/** Writes a payload's leading u32 fields, in order, right after the header. */
function putU32s(view: DataView, fields: readonly number[]): void {
  for (const [i, x] of fields.entries()) view.setUint32(HEADER_BYTES + 4 * i, x, true);
}

function frame(kind: FrameKind, seq: number, payloadBytes: number, version: DispatchVersion): { bytes: Uint8Array; view: DataView } {
  const bytes = new Uint8Array(HEADER_BYTES + payloadBytes);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, DISPATCH_MAGIC, true);
  view.setUint16(4, version, true);
  view.setUint16(6, kind, true);
  view.setUint32(8, seq >>> 0, true);
  view.setUint32(12, payloadBytes, true);
  return { bytes, view };
}

/**
 * Checks a header; throws on anything but a well-formed header of a version this side speaks, of a kind that version
 * has, within the caps. Whether the version is the connection's is the caller's to check (`checkVersion`).
 */
export function decodeHeader(h: Uint8Array): FrameHeader {
  if (h.length < HEADER_BYTES) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `header needs ${HEADER_BYTES} bytes`);
  const v = new DataView(h.buffer, h.byteOffset, HEADER_BYTES);
  if (v.getUint32(0, true) !== DISPATCH_MAGIC) throw new DispatchProtocolError('DISPATCH_BAD_MAGIC', 'not an expert-dispatch frame');
  const version = v.getUint16(4, true);
  if (version < DISPATCH_MIN_VERSION || version > DISPATCH_VERSION) {
    throw new DispatchProtocolError(
      'DISPATCH_BAD_VERSION',
      `protocol version ${version}, this side speaks ${DISPATCH_MIN_VERSION}..${DISPATCH_VERSION}`,
    );
  }
  const kind = v.getUint16(6, true);
  if (!KINDS_OF_VERSION[version as DispatchVersion].has(kind)) {
    throw new DispatchProtocolError('DISPATCH_BAD_KIND', `frame kind ${kind} does not exist in version ${version}`);
  }
  const payloadBytes = v.getUint32(12, true);
  if (payloadBytes > DISPATCH_LIMITS.maxPayload) {
    throw new DispatchProtocolError('DISPATCH_TOO_LARGE', `payload of ${payloadBytes} bytes exceeds ${DISPATCH_LIMITS.maxPayload}`);
  }
  return { version: version as DispatchVersion, kind: kind as FrameKind, seq: v.getUint32(8, true), payloadBytes };
}

/** A frame after HELLO must carry the connection's version. */
export function checkVersion(header: FrameHeader, connection: DispatchVersion): void {
  if (header.version !== connection) {
    throw new DispatchProtocolError('DISPATCH_BAD_VERSION', `a version ${header.version} frame on a version ${connection} connection`);
  }
}

/** The version a connection speaks when the coordinator's HELLO offers `offered`. */
export function negotiateVersion(offered: DispatchVersion): DispatchVersion {
  return Math.min(offered, DISPATCH_VERSION) as DispatchVersion;
}

/** `version`: the highest version the coordinator speaks. */
export function encodeHello(h: Hello, version: DispatchVersion = DISPATCH_VERSION): Uint8Array {
  const desc = new TextEncoder().encode(h.modelDesc).subarray(0, DISPATCH_LIMITS.maxModelDesc);
  const { bytes, view } = frame(FrameKind.Hello, 0, HELLO_FIXED + desc.length, version);
  putU32s(view, [h.nLayer, h.nEmbd, h.nExpert, h.nExpertUsed, h.deadlineMs, NUMERICS_WIRE[h.numerics], desc.length]);
  bytes.set(desc, HEADER_BYTES + HELLO_FIXED);
  return bytes;
}

export function decodeHello(payload: Uint8Array): Hello {
  if (payload.length < HELLO_FIXED) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'hello is too short');
  const v = new DataView(payload.buffer, payload.byteOffset, payload.length);
  const u = (i: number): number => v.getUint32(4 * i, true);
  const descLen = u(6);
  checkInt('desc_len', descLen, 0, DISPATCH_LIMITS.maxModelDesc);
  if (payload.length !== HELLO_FIXED + descLen) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'hello size does not match desc_len');
  const hello: Hello = {
    nLayer: u(0),
    nEmbd: u(1),
    nExpert: u(2),
    nExpertUsed: u(3),
    deadlineMs: u(4),
    numerics: numericsFromWire(u(5)),
    modelDesc: new TextDecoder().decode(payload.subarray(HELLO_FIXED)),
  };
  checkInt('n_embd', hello.nEmbd, 1, DISPATCH_LIMITS.maxEmbd);
  checkInt('n_expert_used', hello.nExpertUsed, 0, DISPATCH_LIMITS.maxUsed);
  return hello;
}

/**
 * accepted=false refuses the coordinator (e.g. a different model than the hub expects); `code` says why. `version`:
 * the connection's (negotiateVersion of the HELLO's).
 */
export function encodeHelloAck(accepted: boolean, code = 0, version: DispatchVersion = DISPATCH_VERSION): Uint8Array {
  const { bytes, view } = frame(FrameKind.HelloAck, 0, HELLO_ACK_BYTES, version);
  view.setUint32(HEADER_BYTES, accepted ? 1 : 0, true);
  view.setUint32(HEADER_BYTES + 4, code, true);
  return bytes;
}

export function encodeRequest(r: DispatchRequest, version: DispatchVersion = DISPATCH_VERSION): Uint8Array {
  const base = REQUEST_FIXED + 4 * (r.nTokens * r.nEmbd + 2 * r.nTokens * r.nUsed);
  const pairs = r.nTokens * r.nUsed;
  const pre = version >= 3 ? r.preclaimed : null;
  if (r.preclaimed && version < 3) throw new DispatchProtocolError('DISPATCH_BAD_CLAIM', `pre-claims need version 3, not ${version}`);
  if (pre && pre.length !== pairs) throw new DispatchProtocolError('DISPATCH_BAD_CLAIM', 'pre-claim flags do not cover every pair');
  const nPre = pre ? countFlags(pre, 'pre-claim', 'DISPATCH_BAD_CLAIM') : 0;
  const payload = base + (version >= 3 ? PRECLAIM_FIXED + (nPre > 0 ? pad4(pairs) : 0) : 0);
  const { bytes, view } = frame(FrameKind.Request, r.seq, payload, version);
  if (version >= 3) {
    view.setUint32(HEADER_BYTES + base, nPre, true);
    if (pre && nPre > 0) bytes.set(pre, HEADER_BYTES + base + PRECLAIM_FIXED);
  }
  putU32s(view, [r.layer, r.nTokens, r.nEmbd, r.nUsed, r.deadlineUs, r.localNsPerPair]);
  let o = HEADER_BYTES + REQUEST_FIXED;
  bytes.set(new Uint8Array(r.rows.buffer, r.rows.byteOffset, r.rows.byteLength), o);
  o += r.rows.byteLength;
  bytes.set(new Uint8Array(r.ids.buffer, r.ids.byteOffset, r.ids.byteLength), o);
  o += r.ids.byteLength;
  bytes.set(new Uint8Array(r.probs.buffer, r.probs.byteOffset, r.probs.byteLength), o);
  return bytes;
}

/** Decodes and range-checks a request payload. `nExpert` bounds the ids (router authority: we never choose, only check). */
export function decodeRequest(header: FrameHeader, payload: Uint8Array, nExpert: number): DispatchRequest {
  if (header.kind !== FrameKind.Request)
    throw new DispatchProtocolError('DISPATCH_BAD_KIND', `expected a request, got kind ${header.kind}`);
  if (payload.length < REQUEST_FIXED) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'request is too short');
  const v = new DataView(payload.buffer, payload.byteOffset, payload.length);
  const u = (i: number): number => v.getUint32(4 * i, true);
  const [layer, nTokens, nEmbd, nUsed, deadlineUs, localNsPerPair] = [u(0), u(1), u(2), u(3), u(4), u(5)];
  checkInt('n_tokens', nTokens, 1, DISPATCH_LIMITS.maxRows);
  checkInt('n_embd', nEmbd, 1, DISPATCH_LIMITS.maxEmbd);
  checkInt('n_used', nUsed, 1, DISPATCH_LIMITS.maxUsed);
  const base = REQUEST_FIXED + 4 * (nTokens * nEmbd + 2 * nTokens * nUsed);
  const pairs = nTokens * nUsed;
  let nPre = 0;
  if (header.version >= 3) {
    if (payload.length < base + PRECLAIM_FIXED) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'request is too short');
    nPre = v.getUint32(base, true);
    checkInt('n_preclaimed', nPre, 0, pairs);
  }
  const want = base + (header.version >= 3 ? PRECLAIM_FIXED + (nPre > 0 ? pad4(pairs) : 0) : 0);
  if (payload.length !== want)
    throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `request of ${payload.length} bytes, expected ${want}`);
  // Views of the payload where its floats are 4-aligned (FrameReader hands out the socket's own chunks, which Node
  // never reuses); a copy only where the payload sits at an odd offset. The request's arrays are read, never written.
  // (Uint8Array's own slice: a Buffer's slice would be another view at the same odd offset.)
  const body =
    (payload.byteOffset + REQUEST_FIXED) % 4 === 0
      ? payload.subarray(REQUEST_FIXED)
      : Uint8Array.prototype.slice.call(payload, REQUEST_FIXED);
  const at = body.byteOffset;
  const rows = new Float32Array(body.buffer, at, nTokens * nEmbd);
  const ids = new Int32Array(body.buffer, at + 4 * nTokens * nEmbd, nTokens * nUsed);
  const probs = new Float32Array(body.buffer, at + 4 * (nTokens * nEmbd + nTokens * nUsed), nTokens * nUsed);
  for (const id of ids) {
    if (id < 0 || id >= nExpert) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `expert id ${id} outside [0, ${nExpert})`);
  }
  let preclaimed: Uint8Array | null = null;
  if (nPre > 0) {
    const at = base + PRECLAIM_FIXED;
    preclaimed = payload.subarray(at, at + pairs);
    if (countFlags(preclaimed, 'pre-claim', 'DISPATCH_BAD_CLAIM') !== nPre)
      throw new DispatchProtocolError('DISPATCH_BAD_CLAIM', `n_preclaimed ${nPre} does not match the pre-claim flags`);
  }
  return { seq: header.seq, layer, nTokens, nEmbd, nUsed, deadlineUs, localNsPerPair, rows, ids, probs, preclaimed };
}

/** Counts the 1s of a flag array; anything but 0/1 is refused with `code`. */
function countFlags(flags: Uint8Array, what: string, code: DispatchErrorCode): number {
  let n = 0;
  for (const f of flags) {
    if (f > 1) throw new DispatchProtocolError(code, `${what} flag ${f} is neither 0 nor 1`);
    n += f;
  }
  return n;
}

/** Refuses audit flags on served pairs: the coordinator computes (and so can audit) only the pairs it was not given. */
function checkAuditDisjoint(audit: Uint8Array, served: Uint8Array | undefined): void {
  if (!served) return;
  for (let i = 0; i < audit.length; i++) {
    if (audit[i] === 1 && served[i] === 1) throw new DispatchProtocolError('DISPATCH_BAD_AUDIT', `pair ${i} is both served and audited`);
  }
}

/**
 * RESPONSE payload: 28 fixed bytes {layer, n_tokens, n_used, mode, quiet_ms, n_served, n_audit}, then served u8[pairs]
 * padded to 4 (mode 1), audit u8[pairs] padded to 4 (n_audit > 0), sums f32[n_tokens·n_embd] (mode 1).
 */
export function encodeResponse(r: DispatchResponse): Uint8Array {
  checkInt('quiet_ms', r.quietMs, 0, DISPATCH_LIMITS.maxQuietMs);
  const pairs = r.nTokens * r.nUsed;
  let nServed = 0;
  if (r.mode === 'served') {
    if (r.served.length !== pairs) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'served flags do not cover every pair');
    nServed = countFlags(r.served, 'served', 'DISPATCH_BAD_FRAME');
  }
  let nAudit = 0;
  if (r.audit) {
    if (r.audit.length !== pairs) throw new DispatchProtocolError('DISPATCH_BAD_AUDIT', 'audit flags do not cover every pair');
    nAudit = countFlags(r.audit, 'audit', 'DISPATCH_BAD_AUDIT');
    checkAuditDisjoint(r.audit, r.mode === 'served' ? r.served : undefined);
  }
  const auditAt = RESPONSE_FIXED + (r.mode === 'served' ? pad4(pairs) : 0);
  const sumsAt = auditAt + (nAudit > 0 ? pad4(pairs) : 0);
  const payload = sumsAt + (r.mode === 'served' ? r.sums.byteLength : 0);
  const { bytes, view } = frame(FrameKind.Response, r.seq, payload, 1);
  if (r.mode === 'served') {
    bytes.set(r.served, HEADER_BYTES + RESPONSE_FIXED);
    bytes.set(new Uint8Array(r.sums.buffer, r.sums.byteOffset, r.sums.byteLength), HEADER_BYTES + sumsAt);
  }
  if (r.audit && nAudit > 0) bytes.set(r.audit, HEADER_BYTES + auditAt);
  putU32s(view, [r.layer, r.nTokens, r.nUsed, r.mode === 'local' ? 0 : 1, r.quietMs, nServed, nAudit]);
  return bytes;
}

/** Decodes and checks a response as the coordinator does (sizes, flags, counts), for a coordinator of width `nEmbd`. */
export function decodeResponse(header: FrameHeader, payload: Uint8Array, nEmbd: number): DispatchResponse {
  if (header.kind !== FrameKind.Response)
    throw new DispatchProtocolError('DISPATCH_BAD_KIND', `expected a response, got kind ${header.kind}`);
  if (payload.length < RESPONSE_FIXED) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'response is too short');
  const v = new DataView(payload.buffer, payload.byteOffset, payload.length);
  const u = (i: number): number => v.getUint32(4 * i, true);
  const base = { seq: header.seq, layer: u(0), nTokens: u(1), nUsed: u(2), quietMs: u(4) };
  const [mode, nServed, nAudit] = [u(3), u(5), u(6)];
  checkInt('n_tokens', base.nTokens, 1, DISPATCH_LIMITS.maxRows);
  checkInt('n_used', base.nUsed, 1, DISPATCH_LIMITS.maxUsed);
  checkInt('quiet_ms', base.quietMs, 0, DISPATCH_LIMITS.maxQuietMs);
  if (mode !== 0 && mode !== 1) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `unknown mode ${mode}`);
  const pairs = base.nTokens * base.nUsed;
  if (mode === 0 && nServed !== 0) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'a local answer serves no pair');
  if (nAudit > pairs) throw new DispatchProtocolError('DISPATCH_BAD_AUDIT', `n_audit ${nAudit} exceeds the ${pairs} pairs`);
  const auditAt = RESPONSE_FIXED + (mode === 1 ? pad4(pairs) : 0);
  const sumsAt = auditAt + (nAudit > 0 ? pad4(pairs) : 0);
  const want = sumsAt + (mode === 1 ? 4 * base.nTokens * nEmbd : 0);
  if (payload.length !== want) {
    throw new DispatchProtocolError(
      'DISPATCH_BAD_FRAME',
      `${mode === 1 ? 'served' : 'local'} answer of ${payload.length} bytes, expected ${want}`,
    );
  }
  // Copy into a fresh aligned buffer: the payload may sit at any offset of a pooled buffer.
  const body = payload.slice();
  const served = mode === 1 ? body.subarray(RESPONSE_FIXED, RESPONSE_FIXED + pairs) : undefined;
  if (served && countFlags(served, 'served', 'DISPATCH_BAD_FRAME') !== nServed) {
    throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `n_served ${nServed} does not match the served flags`);
  }
  const audit = nAudit > 0 ? body.subarray(auditAt, auditAt + pairs) : undefined;
  if (audit) {
    if (countFlags(audit, 'audit', 'DISPATCH_BAD_AUDIT') !== nAudit) {
      throw new DispatchProtocolError('DISPATCH_BAD_AUDIT', `n_audit ${nAudit} does not match the audit flags`);
    }
    checkAuditDisjoint(audit, served);
  }
  const withAudit = audit ? { audit } : {};
  if (!served) return { ...base, ...withAudit, mode: 'local' };
  return { ...base, ...withAudit, mode: 'served', served, sums: new Float32Array(body.buffer, sumsAt, base.nTokens * nEmbd) };
}

/** Refuses flags set on both arrays (claimed and audited, or served and not claimed when `subset`). */
function checkDisjoint(a: Uint8Array, b: Uint8Array, what: string, code: DispatchErrorCode): void {
  for (let i = 0; i < a.length; i++) {
    if (a[i] === 1 && b[i] === 1) throw new DispatchProtocolError(code, `pair ${i} is ${what}`);
  }
}

/**
 * CLAIM payload (v2): 24 fixed bytes {layer, n_tokens, n_used, quiet_ms, n_claimed, n_audit}, then claimed u8[pairs]
 * padded to 4 (n_claimed > 0), audit u8[pairs] padded to 4 (n_audit > 0).
 */
export function encodeClaim(c: DispatchClaim, version: DispatchVersion = 2): Uint8Array {
  if (version < 2) throw new DispatchProtocolError('DISPATCH_BAD_KIND', 'a CLAIM needs version 2 or 3');
  checkInt('n_tokens', c.nTokens, 1, DISPATCH_LIMITS.maxRows);
  checkInt('n_used', c.nUsed, 1, DISPATCH_LIMITS.maxUsed);
  checkInt('quiet_ms', c.quietMs, 0, DISPATCH_LIMITS.maxQuietMs);
  const pairs = c.nTokens * c.nUsed;
  const flags = (f: Uint8Array | null | undefined, what: string): number => {
    if (!f) return 0;
    if (f.length !== pairs) throw new DispatchProtocolError('DISPATCH_BAD_CLAIM', `${what} flags do not cover every pair`);
    return countFlags(f, what, 'DISPATCH_BAD_CLAIM');
  };
  const nClaimed = flags(c.claimed, 'claimed');
  const nAudit = flags(c.audit, 'audit');
  if (c.claimed && c.audit) checkDisjoint(c.claimed, c.audit, 'both claimed and audited', 'DISPATCH_BAD_AUDIT');
  const auditAt = CLAIM_FIXED + (nClaimed > 0 ? pad4(pairs) : 0);
  const payload = auditAt + (nAudit > 0 ? pad4(pairs) : 0);
  const { bytes, view } = frame(FrameKind.Claim, c.seq, payload, version);
  putU32s(view, [c.layer, c.nTokens, c.nUsed, c.quietMs, nClaimed, nAudit]);
  if (c.claimed && nClaimed > 0) bytes.set(c.claimed, HEADER_BYTES + CLAIM_FIXED);
  if (c.audit && nAudit > 0) bytes.set(c.audit, HEADER_BYTES + auditAt);
  return bytes;
}

/** Decodes and checks a CLAIM as the coordinator does (sizes, flags, counts, claimed and audited disjoint). */
export function decodeClaim(header: FrameHeader, payload: Uint8Array): DispatchClaim {
  if (header.kind !== FrameKind.Claim) throw new DispatchProtocolError('DISPATCH_BAD_KIND', `expected a claim, got kind ${header.kind}`);
  if (payload.length < CLAIM_FIXED) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'claim is too short');
  const v = new DataView(payload.buffer, payload.byteOffset, payload.length);
  const u = (i: number): number => v.getUint32(4 * i, true);
  const [layer, nTokens, nUsed, quietMs, nClaimed, nAudit] = [u(0), u(1), u(2), u(3), u(4), u(5)];
  checkInt('n_tokens', nTokens, 1, DISPATCH_LIMITS.maxRows);
  checkInt('n_used', nUsed, 1, DISPATCH_LIMITS.maxUsed);
  checkInt('quiet_ms', quietMs, 0, DISPATCH_LIMITS.maxQuietMs);
  const pairs = nTokens * nUsed;
  if (nClaimed > pairs) throw new DispatchProtocolError('DISPATCH_BAD_CLAIM', `n_claimed ${nClaimed} exceeds the ${pairs} pairs`);
  if (nAudit > pairs) throw new DispatchProtocolError('DISPATCH_BAD_AUDIT', `n_audit ${nAudit} exceeds the ${pairs} pairs`);
  const auditAt = CLAIM_FIXED + (nClaimed > 0 ? pad4(pairs) : 0);
  const want = auditAt + (nAudit > 0 ? pad4(pairs) : 0);
  if (payload.length !== want) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `claim of ${payload.length} bytes, expected ${want}`);
  const body = payload.slice();
  const claimed = nClaimed > 0 ? body.subarray(CLAIM_FIXED, CLAIM_FIXED + pairs) : null;
  if (claimed && countFlags(claimed, 'claimed', 'DISPATCH_BAD_CLAIM') !== nClaimed) {
    throw new DispatchProtocolError('DISPATCH_BAD_CLAIM', `n_claimed ${nClaimed} does not match the claimed flags`);
  }
  const audit = nAudit > 0 ? body.subarray(auditAt, auditAt + pairs) : null;
  if (audit) {
    if (countFlags(audit, 'audit', 'DISPATCH_BAD_AUDIT') !== nAudit) {
      throw new DispatchProtocolError('DISPATCH_BAD_AUDIT', `n_audit ${nAudit} does not match the audit flags`);
    }
    if (claimed) checkDisjoint(claimed, audit, 'both claimed and audited', 'DISPATCH_BAD_AUDIT');
  }
  return { seq: header.seq, layer, nTokens, nUsed, quietMs, claimed, audit };
}

/** Bytes of a v3 offer's expert bitmap for `nExpert` experts. */
export const offerBitmapBytes = (nExpert: number): number => (nExpert + 7) >> 3;

/** Throws unless `o` is an offer a coordinator with `nExpert` experts accepts. */
function checkOffer(o: DispatchOffer, nExpert: number): void {
  checkInt('offer ttl_ms', o.ttlMs, 1, DISPATCH_LIMITS.maxOfferTtlMs);
  checkInt('offer max_pairs', o.maxPairs, 1, DISPATCH_LIMITS.maxRows * DISPATCH_LIMITS.maxUsed);
  if (!(Number.isFinite(o.a) && o.a >= 0 && o.a <= 1))
    throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `offer a ${o.a} is outside [0, 1]`);
  if (!(Number.isFinite(o.b) && Math.abs(o.b) <= DISPATCH_LIMITS.maxOfferB))
    throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `offer b ${o.b} is outside ±${DISPATCH_LIMITS.maxOfferB}`);
  if (o.experts.length !== offerBitmapBytes(nExpert))
    throw new DispatchProtocolError(
      'DISPATCH_BAD_FRAME',
      `offer bitmap of ${o.experts.length} bytes, expected ${offerBitmapBytes(nExpert)}`,
    );
}

/** Writes the v3 offer trailer at `at` (bytes index); returns the trailer's length. */
function putOffer(bytes: Uint8Array, at: number, offer: DispatchOffer | null | undefined, nExpert: number): number {
  const v = new DataView(bytes.buffer, bytes.byteOffset);
  if (!offer) {
    for (let i = 0; i < OFFER_FIXED; i++) bytes[at + i] = 0;
    return OFFER_FIXED;
  }
  checkOffer(offer, nExpert);
  v.setUint32(at, offer.ttlMs, true);
  v.setUint32(at + 4, offer.maxPairs, true);
  v.setFloat32(at + 8, offer.a, true);
  v.setFloat32(at + 12, offer.b, true);
  bytes.set(offer.experts, at + OFFER_FIXED);
  return OFFER_FIXED + pad4(offer.experts.length);
}

/**
 * RESULT payload (v2): 16 fixed bytes {layer, n_tokens, n_used, n_served}, served u8[pairs] padded to 4, sums
 * f32[n_tokens·n_embd]; v3 adds the offer trailer {ttl_ms u32, max_pairs u32, a f32, b f32} (all 0: no offer), then
 * with an offer its expert bitmap u8[⌈n_expert/8⌉] padded to 4. `nExpert`: the coordinator's (HELLO), for v3.
 */
export function encodeResult(r: DispatchResult, version: DispatchVersion = 2, nExpert = 0): Uint8Array {
  checkInt('n_tokens', r.nTokens, 1, DISPATCH_LIMITS.maxRows);
  checkInt('n_used', r.nUsed, 1, DISPATCH_LIMITS.maxUsed);
  const d = draftResult({
    seq: r.seq,
    layer: r.layer,
    nTokens: r.nTokens,
    nUsed: r.nUsed,
    nEmbd: r.sums.length / r.nTokens,
    version,
    nExpert,
  });
  if (r.served.length !== d.served.length) throw new DispatchProtocolError('DISPATCH_BAD_CLAIM', 'served flags do not cover every pair');
  d.served.set(r.served);
  d.sums.set(r.sums);
  return sealResult(d, r.offer);
}

/** A RESULT frame being filled in place: `served` and `sums` are views of `bytes` (zeroed), written by the caller. */
export interface ResultDraft {
  readonly bytes: Uint8Array;
  readonly served: Uint8Array;
  readonly sums: Float32Array;
  readonly version: DispatchVersion;
  readonly nExpert: number;
  /** v3: where the offer trailer starts in `bytes`. */
  readonly offerAt: number;
}

/**
 * Allocates a RESULT frame whose served flags and sums the caller fills where they lie, so the dispatcher merges the
 * workers' partials straight into the bytes it writes (no second buffer, no copy); `sealResult` completes it. The
 * bytes are those `encodeResult` writes for the same flags and sums.
 */
export function draftResult(r: {
  seq: number;
  layer: number;
  nTokens: number;
  nUsed: number;
  nEmbd: number;
  /** The connection's (2 or 3; default 2). */
  version?: DispatchVersion;
  /** v3: the coordinator's expert count, which sizes an offer's bitmap. */
  nExpert?: number;
}): ResultDraft {
  checkInt('n_tokens', r.nTokens, 1, DISPATCH_LIMITS.maxRows);
  checkInt('n_used', r.nUsed, 1, DISPATCH_LIMITS.maxUsed);
  checkInt('n_embd', r.nEmbd, 1, DISPATCH_LIMITS.maxEmbd);
  const version = r.version ?? 2;
  const nExpert = r.nExpert ?? 0;
  const pairs = r.nTokens * r.nUsed;
  const sumsAt = RESULT_FIXED + pad4(pairs);
  const offerAt = sumsAt + 4 * r.nTokens * r.nEmbd;
  const trailer = version >= 3 ? OFFER_FIXED + pad4(offerBitmapBytes(nExpert)) : 0;
  const { bytes, view } = frame(FrameKind.Result, r.seq, offerAt + trailer, version);
  putU32s(view, [r.layer, r.nTokens, r.nUsed, 0]);
  return {
    bytes,
    served: bytes.subarray(HEADER_BYTES + RESULT_FIXED, HEADER_BYTES + RESULT_FIXED + pairs),
    sums: new Float32Array(bytes.buffer, bytes.byteOffset + HEADER_BYTES + sumsAt, r.nTokens * r.nEmbd),
    version,
    nExpert,
    offerAt: HEADER_BYTES + offerAt,
  };
}

/**
 * Checks a draft's served flags (0 or 1 each) and writes their count as n_served, and in v3 the offer trailer (none:
 * zeros and no bitmap); returns the frame's bytes.
 */
export function sealResult(d: ResultDraft, offer?: DispatchOffer | null): Uint8Array {
  const nServed = countFlags(d.served, 'served', 'DISPATCH_BAD_CLAIM');
  const view = new DataView(d.bytes.buffer, d.bytes.byteOffset);
  view.setUint32(HEADER_BYTES + 12, nServed, true);
  if (d.version < 3) {
    if (offer) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `offers need version 3, not ${d.version}`);
    return d.bytes;
  }
  const end = d.offerAt + putOffer(d.bytes, d.offerAt, offer, d.nExpert);
  view.setUint32(12, end - HEADER_BYTES, true);
  return end === d.bytes.length ? d.bytes : d.bytes.subarray(0, end);
}

/**
 * Decodes and checks a RESULT as the coordinator does, for a coordinator of width `nEmbd`; with `claimed` (the
 * CLAIM's flags) it also refuses a served pair that was not claimed and non-finite sums.
 */
export function decodeResult(
  header: FrameHeader,
  payload: Uint8Array,
  nEmbd: number,
  claimed?: Uint8Array | null,
  nExpert = 0,
): DispatchResult {
  if (header.kind !== FrameKind.Result) throw new DispatchProtocolError('DISPATCH_BAD_KIND', `expected a result, got kind ${header.kind}`);
  if (payload.length < RESULT_FIXED) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'result is too short');
  const v = new DataView(payload.buffer, payload.byteOffset, payload.length);
  const u = (i: number): number => v.getUint32(4 * i, true);
  const [layer, nTokens, nUsed, nServed] = [u(0), u(1), u(2), u(3)];
  checkInt('n_tokens', nTokens, 1, DISPATCH_LIMITS.maxRows);
  checkInt('n_used', nUsed, 1, DISPATCH_LIMITS.maxUsed);
  const pairs = nTokens * nUsed;
  const sumsAt = RESULT_FIXED + pad4(pairs);
  const offerAt = sumsAt + 4 * nTokens * nEmbd;
  let want = offerAt;
  let offer: DispatchOffer | null = null;
  if (header.version >= 3) {
    if (payload.length < offerAt + OFFER_FIXED) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'result is too short for its offer');
    const ttlMs = u(offerAt / 4);
    const maxPairs = u(offerAt / 4 + 1);
    const a = v.getFloat32(offerAt + 8, true);
    const b = v.getFloat32(offerAt + 12, true);
    want = offerAt + OFFER_FIXED;
    if (ttlMs !== 0 || maxPairs !== 0 || a !== 0 || b !== 0) {
      const bitmapAt = want;
      want += pad4(offerBitmapBytes(nExpert));
      if (payload.length === want) {
        offer = { ttlMs, maxPairs, a, b, experts: payload.slice(bitmapAt, bitmapAt + offerBitmapBytes(nExpert)) };
        checkOffer(offer, nExpert);
      }
    }
  }
  if (payload.length !== want) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `result of ${payload.length} bytes, expected ${want}`);
  const body = payload.slice();
  const served = body.subarray(RESULT_FIXED, RESULT_FIXED + pairs);
  if (countFlags(served, 'served', 'DISPATCH_BAD_CLAIM') !== nServed) {
    throw new DispatchProtocolError('DISPATCH_BAD_CLAIM', `n_served ${nServed} does not match the served flags`);
  }
  if (claimed) {
    if (claimed.length !== pairs) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'result does not match its claim');
    for (let i = 0; i < pairs; i++) {
      if (served[i] === 1 && claimed[i] !== 1) throw new DispatchProtocolError('DISPATCH_BAD_CLAIM', `pair ${i} served but not claimed`);
    }
  }
  const sums = new Float32Array(body.buffer, sumsAt, nTokens * nEmbd);
  for (const x of sums) {
    if (!Number.isFinite(x)) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'non-finite sum');
  }
  return { seq: header.seq, layer, nTokens, nUsed, served, sums, ...(header.version >= 3 ? { offer } : {}) };
}

/** AUDIT payload: {layer, n_tokens, n_audit, reserved 0} then sums f32[n_tokens·n_embd]. Written by the coordinator. */
export function encodeAudit(a: DispatchAudit, version: DispatchVersion = DISPATCH_VERSION): Uint8Array {
  checkInt('n_tokens', a.nTokens, 1, DISPATCH_LIMITS.maxRows);
  checkInt('n_audit', a.nAudit, 1, a.nTokens * DISPATCH_LIMITS.maxUsed);
  const { bytes, view } = frame(FrameKind.Audit, a.seq, AUDIT_FIXED + a.sums.byteLength, version);
  putU32s(view, [a.layer, a.nTokens, a.nAudit, 0]);
  bytes.set(new Uint8Array(a.sums.buffer, a.sums.byteOffset, a.sums.byteLength), HEADER_BYTES + AUDIT_FIXED);
  return bytes;
}

/** Decodes an AUDIT frame from a coordinator of width `nEmbd`; which request it answers is the caller's to match (seq). */
export function decodeAudit(header: FrameHeader, payload: Uint8Array, nEmbd: number): DispatchAudit {
  if (header.kind !== FrameKind.Audit) throw new DispatchProtocolError('DISPATCH_BAD_KIND', `expected an audit, got kind ${header.kind}`);
  if (payload.length < AUDIT_FIXED) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'audit is too short');
  const v = new DataView(payload.buffer, payload.byteOffset, payload.length);
  const u = (i: number): number => v.getUint32(4 * i, true);
  const [layer, nTokens, nAudit, reserved] = [u(0), u(1), u(2), u(3)];
  checkInt('n_tokens', nTokens, 1, DISPATCH_LIMITS.maxRows);
  checkInt('n_audit', nAudit, 1, nTokens * DISPATCH_LIMITS.maxUsed);
  if (reserved !== 0) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `audit reserved field ${reserved}, expected 0`);
  const want = AUDIT_FIXED + 4 * nTokens * nEmbd;
  if (payload.length !== want) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `audit of ${payload.length} bytes, expected ${want}`);
  return { seq: header.seq, layer, nTokens, nAudit, sums: new Float32Array(payload.slice(AUDIT_FIXED).buffer) };
}

/**
 * Splits a byte stream into frames. Headers are validated as soon as they are complete, so an oversized or
 * foreign frame is refused before its payload is buffered.
 */
export class FrameReader {
  private chunks: Uint8Array[] = [];
  private buffered = 0;
  private header: FrameHeader | undefined;

  /**
   * Returns the frames completed by `chunk`. A frame that lies within one chunk is returned as a view of it (no copy),
   * so a chunk must not be written to after it is pushed (a socket's 'data' chunks never are).
   */
  push(chunk: Uint8Array): Array<{ header: FrameHeader; payload: Uint8Array }> {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const out: Array<{ header: FrameHeader; payload: Uint8Array }> = [];
    for (;;) {
      if (!this.header) {
        if (this.buffered < HEADER_BYTES) break;
        this.header = decodeHeader(this.take(HEADER_BYTES));
      }
      if (this.buffered < this.header.payloadBytes) break;
      out.push({ header: this.header, payload: this.take(this.header.payloadBytes) });
      this.header = undefined;
    }
    return out;
  }

  private take(n: number): Uint8Array {
    const first = this.chunks[0];
    if (first && first.length >= n) {
      // The common case, a frame within one read: a view, not a copy — a plain Uint8Array even of a Buffer chunk, so a
      // decoder's `slice()` copies (Buffer#slice would be another view).
      this.buffered -= n;
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return new Uint8Array(first.buffer, first.byteOffset, n);
    }
    const out = new Uint8Array(n);
    let filled = 0;
    while (filled < n) {
      const c = this.chunks[0] as Uint8Array;
      const k = Math.min(c.length, n - filled);
      out.set(c.subarray(0, k), filled);
      filled += k;
      if (k === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    this.buffered -= n;
    return out;
  }
}
