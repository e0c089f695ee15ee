/**
 * Kvasir's worker wire (issue 28): what its native expert worker (`linkcpp-expert-worker --serve`) reads and writes on
 * the one long-lived byte stream its relay (`/api/expert-relay`) carries. Written from Kvasir's documentation of the
 * wire, not its code. The stream has no framing of its own: a request is a header and fixed-size arrays, an answer is
 * bare floats whose length the request implies, and the relay may cut both into WebSocket messages anywhere. All
 * integers and floats little-endian. `n_embd` is not on the wire: the worker reads it from its slice; the expert ids
 * are LOCAL to the worker's slice (global id − `kvasir.expert_shard.expert_begin`).
 *
 *   v1      i32 n_used, i32 n_tokens, f32 cur[n_tokens × n_embd], i32 sel[n_tokens × n_used]
 *           → f32 out[n_tokens × n_used × n_embd]: each (token, slot)'s expert output, unweighted
 *   v2      i32 −2, i32 n_rows, i32 n_pairs, f32 rows[n_rows × n_embd], i32 row[n_pairs], i32 id[n_pairs],
 *           f32 prob[n_pairs] → f32 out[n_rows × n_embd]: per row Σ prob · expert(row), pairs in order, from 0
 *   v2f16   v2 with header −3 and rows, probs and the answer in f16
 *
 * Caps (the worker's): n_used 1..64, n_tokens 1..8192, n_rows 1..8192, n_pairs 1..65536; every id in [0, n_local),
 * every row index in [0, n_rows), no token naming one expert twice (v1). A worker closes the stream on any request
 * that breaks one (the wire has no error frame): `KvasirRequestReader` does, with a `KvasirWireError` code.
 *
 *   const bytes = encodeKvasirRequest(req, nEmbd);               // the hub's side
 *   const sums = decodeKvasirAnswer(req, nEmbd, answerBytes);     // throws ANSWER_SIZE, NON_FINITE
 *   const reader = new KvasirRequestReader(nEmbd, nLocal);        // the worker's side
 *   for (const r of reader.push(chunk)) send(encodeKvasirAnswer(r, compute(r)));
 */
import { f16ToF32Table, f32ToF16 } from '../gguf/half.ts';

/** The relay's WebSocket path and the query its dialer sends (`?session=S&token=T`). */
export const KVASIR_RELAY_PATH = '/api/expert-relay';

export const KVASIR_WIRE_LIMITS = Object.freeze({
  /** Experts per token in a v1 request. */
  maxUsed: 64,
  /** Tokens of a v1 request. */
  maxTokens: 8192,
  /** Rows of a v2 request. */
  maxRows: 8192,
  /** Pairs of a v2 request (8 per row at most rows). */
  maxPairs: 65536,
});

/** v2's and v2f16's first i32 (a v1 request's n_used is ≥ 1). */
export const KVASIR_HEADER_V2 = -2;
export const KVASIR_HEADER_V2F16 = -3;

export type KvasirWire = 'v1' | 'v2' | 'v2f16';
export const KVASIR_WIRES: readonly KvasirWire[] = Object.freeze(['v1', 'v2', 'v2f16']);

/**
 * The relay's WebSocket close codes. 4401, 4403 and 4404 are Kvasir's (its gateway's: no or a bad token, a session
 * its dialer may not take, an unknown session); the others are ours, each for one reason the hub ends a relay.
 */
export const KVASIR_RELAY_CLOSE = Object.freeze({
  /** Bytes that answer nothing: more than the answers asked for, a text message, a non-finite or undecodable answer. */
  BAD_BYTES: 4400,
  UNAUTHORIZED: 4401,
  /** The session is another wallet's, or the worker or its wallet is quarantined. */
  FORBIDDEN: 4403,
  UNKNOWN_SESSION: 4404,
  /** An answer did not come within the hub's bound: the stream is stuck or out of step. */
  ANSWER_TIMEOUT: 4408,
  /** The same session dialed again: the newer relay wins. */
  REPLACED: 4409,
  /** The session ended: the worker's coverage went stale, it reported without its relay url, or an operator released it. */
  SESSION_ENDED: 4410,
  /** The hub is shutting down. */
  GOING_AWAY: 1001,
});
export type KvasirRelayCloseName = keyof typeof KVASIR_RELAY_CLOSE;

export type KvasirWireCode =
  | 'USED_OUT_OF_RANGE'
  | 'TOKENS_OUT_OF_RANGE'
  | 'ROWS_OUT_OF_RANGE'
  | 'PAIRS_OUT_OF_RANGE'
  | 'ROW_INDEX_OUT_OF_RANGE'
  | 'EXPERT_OUT_OF_RANGE'
  | 'DUPLICATE_EXPERT'
  | 'ARRAY_LENGTH'
  | 'ANSWER_SIZE'
  | 'NON_FINITE'
  | 'TOO_LARGE';

export class KvasirWireError extends Error {
  constructor(
    readonly code: KvasirWireCode,
    message: string,
  ) {
    super(message);
    this.name = 'KvasirWireError';
  }
}

/** v1: every token's `nUsed` experts; `sel` token-major (`sel[t·nUsed + u]`), local ids. */
export interface KvasirV1Request {
  wire: 'v1';
  nUsed: number;
  nTokens: number;
  /** [nTokens × nEmbd]. */
  cur: Float32Array;
  /** [nTokens × nUsed]. */
  sel: Int32Array;
}

/** v2 and v2f16: pairs (row, local expert, prob) over deduplicated rows. Floats are f32 here whatever the wire. */
export interface KvasirV2Request {
  wire: 'v2' | 'v2f16';
  nRows: number;
  nPairs: number;
  /** [nRows × nEmbd]. */
  rows: Float32Array;
  rowIndex: Int32Array;
  ids: Int32Array;
  probs: Float32Array;
}

export type KvasirRequest = KvasirV1Request | KvasirV2Request;

const inRange = (v: number, lo: number, hi: number): boolean => Number.isInteger(v) && v >= lo && v <= hi;

function checkCounts(r: KvasirRequest): void {
  const L = KVASIR_WIRE_LIMITS;
  if (r.wire === 'v1') {
    if (!inRange(r.nUsed, 1, L.maxUsed)) throw new KvasirWireError('USED_OUT_OF_RANGE', `n_used ${r.nUsed} is not in [1, ${L.maxUsed}]`);
    if (!inRange(r.nTokens, 1, L.maxTokens))
      throw new KvasirWireError('TOKENS_OUT_OF_RANGE', `n_tokens ${r.nTokens} is not in [1, ${L.maxTokens}]`);
    return;
  }
  if (!inRange(r.nRows, 1, L.maxRows)) throw new KvasirWireError('ROWS_OUT_OF_RANGE', `n_rows ${r.nRows} is not in [1, ${L.maxRows}]`);
  if (!inRange(r.nPairs, 1, L.maxPairs))
    throw new KvasirWireError('PAIRS_OUT_OF_RANGE', `n_pairs ${r.nPairs} is not in [1, ${L.maxPairs}]`);
}

function allBelow(v: Int32Array, limit: number, code: KvasirWireCode, what: string): void {
  for (let i = 0; i < v.length; i++) {
    const x = v[i] as number;
    if (x < 0 || x >= limit) throw new KvasirWireError(code, `${what} ${x} at ${i} is not in [0, ${limit})`);
  }
}

/** The checks a worker makes of a whole request (counts, then every index), as `KvasirRequestReader` applies them. */
export function checkKvasirRequest(r: KvasirRequest, nEmbd: number, nLocal: number): void {
  checkCounts(r);
  if (r.wire === 'v1') {
    if (r.cur.length !== r.nTokens * nEmbd || r.sel.length !== r.nTokens * r.nUsed)
      throw new KvasirWireError('ARRAY_LENGTH', 'cur or sel does not match n_tokens × n_embd / n_tokens × n_used');
    allBelow(r.sel, nLocal, 'EXPERT_OUT_OF_RANGE', 'expert');
    if (r.nUsed > 1) {
      for (let t = 0; t < r.nTokens; t++) {
        const s = r.sel.subarray(t * r.nUsed, (t + 1) * r.nUsed);
        for (let a = 0; a < s.length; a++)
          for (let b = a + 1; b < s.length; b++)
            if (s[a] === s[b]) throw new KvasirWireError('DUPLICATE_EXPERT', `token ${t} names expert ${s[a]} twice`);
      }
    }
    return;
  }
  if (r.rows.length !== r.nRows * nEmbd || r.rowIndex.length !== r.nPairs || r.ids.length !== r.nPairs || r.probs.length !== r.nPairs)
    throw new KvasirWireError('ARRAY_LENGTH', 'rows, row indices, ids or probs do not match n_rows and n_pairs');
  allBelow(r.rowIndex, r.nRows, 'ROW_INDEX_OUT_OF_RANGE', 'row index');
  allBelow(r.ids, nLocal, 'EXPERT_OUT_OF_RANGE', 'expert');
}

/** Bytes of a request on the wire. */
export function kvasirRequestBytes(r: KvasirRequest, nEmbd: number): number {
  if (r.wire === 'v1') return 8 + 4 * r.nTokens * nEmbd + 4 * r.nTokens * r.nUsed;
  const f = r.wire === 'v2f16' ? 2 : 4;
  return 12 + f * r.nRows * nEmbd + 8 * r.nPairs + f * r.nPairs;
}

/** Bytes of a request's answer on the wire. */
export function kvasirAnswerBytes(r: KvasirRequest, nEmbd: number): number {
  if (r.wire === 'v1') return 4 * r.nTokens * r.nUsed * nEmbd;
  return (r.wire === 'v2f16' ? 2 : 4) * r.nRows * nEmbd;
}

/** Floats of a request's answer: v1 [nTokens × nUsed × nEmbd], v2 [nRows × nEmbd]. */
export function kvasirAnswerFloats(r: KvasirRequest, nEmbd: number): number {
  return r.wire === 'v1' ? r.nTokens * r.nUsed * nEmbd : r.nRows * nEmbd;
}

function putF16(view: DataView, at: number, src: Float32Array): number {
  for (let i = 0; i < src.length; i++) view.setUint16(at + 2 * i, f32ToF16(src[i] as number), true);
  return at + 2 * src.length;
}

function putF32(out: Uint8Array, at: number, src: Float32Array | Int32Array): number {
  out.set(new Uint8Array(src.buffer, src.byteOffset, src.byteLength), at);
  return at + src.byteLength;
}

/**
 * A request's bytes. It is checked first as a worker would (counts, lengths, indices against `nLocal`, v1's
 * duplicates): what the hub sends, a worker never closes on. v2f16 rounds rows and probs to f16 (nearest even).
 */
export function encodeKvasirRequest(r: KvasirRequest, nEmbd: number, nLocal: number): Uint8Array {
  checkKvasirRequest(r, nEmbd, nLocal);
  const out = new Uint8Array(kvasirRequestBytes(r, nEmbd));
  const view = new DataView(out.buffer);
  if (r.wire === 'v1') {
    view.setInt32(0, r.nUsed, true);
    view.setInt32(4, r.nTokens, true);
    putF32(out, putF32(out, 8, r.cur), r.sel);
    return out;
  }
  view.setInt32(0, r.wire === 'v2f16' ? KVASIR_HEADER_V2F16 : KVASIR_HEADER_V2, true);
  view.setInt32(4, r.nRows, true);
  view.setInt32(8, r.nPairs, true);
  let at = r.wire === 'v2f16' ? putF16(view, 12, r.rows) : putF32(out, 12, r.rows);
  at = putF32(out, putF32(out, at, r.rowIndex), r.ids);
  if (r.wire === 'v2f16') putF16(view, at, r.probs);
  else putF32(out, at, r.probs);
  return out;
}

let f16Table: Float32Array | null = null;
const f16 = (): Float32Array => {
  f16Table ??= f16ToF32Table();
  return f16Table;
};

function f32At(bytes: Uint8Array, at: number, n: number): Float32Array {
  const copy = new Uint8Array(4 * n);
  copy.set(bytes.subarray(at, at + 4 * n));
  return new Float32Array(copy.buffer);
}

function i32At(bytes: Uint8Array, at: number, n: number): Int32Array {
  const copy = new Uint8Array(4 * n);
  copy.set(bytes.subarray(at, at + 4 * n));
  return new Int32Array(copy.buffer);
}

function f16At(bytes: Uint8Array, at: number, n: number): Float32Array {
  const t = f16();
  const view = new DataView(bytes.buffer, bytes.byteOffset + at, 2 * n);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = t[view.getUint16(2 * i, true)] as number;
  return out;
}

/**
 * An answer's floats (f32 whatever the wire), checked: exactly `kvasirAnswerBytes` long (ANSWER_SIZE) and finite
 * (NON_FINITE: an honest worker's experts of finite rows are finite).
 */
export function decodeKvasirAnswer(r: KvasirRequest, nEmbd: number, bytes: Uint8Array): Float32Array {
  const want = kvasirAnswerBytes(r, nEmbd);
  if (bytes.length !== want) throw new KvasirWireError('ANSWER_SIZE', `an answer of ${bytes.length} bytes, not ${want}`);
  const n = kvasirAnswerFloats(r, nEmbd);
  const out = r.wire === 'v2f16' ? f16At(bytes, 0, n) : f32At(bytes, 0, n);
  let z = 0;
  for (let i = 0; i < n; i++) {
    const x = out[i] as number;
    z += x - x;
  }
  if (z !== 0) throw new KvasirWireError('NON_FINITE', 'the answer holds NaN or ±∞');
  return out;
}

/** A worker's answer bytes (f16 for v2f16, rounded to nearest even); `out` holds `kvasirAnswerFloats` floats. */
export function encodeKvasirAnswer(r: KvasirRequest, nEmbd: number, out: Float32Array): Uint8Array {
  if (out.length !== kvasirAnswerFloats(r, nEmbd))
    throw new KvasirWireError('ANSWER_SIZE', `an answer of ${out.length} floats, not ${kvasirAnswerFloats(r, nEmbd)}`);
  if (r.wire !== 'v2f16') return new Uint8Array(out.buffer.slice(out.byteOffset, out.byteOffset + out.byteLength));
  const bytes = new Uint8Array(2 * out.length);
  putF16(new DataView(bytes.buffer), 0, out);
  return bytes;
}

/**
 * The worker's side of the stream: bytes in any cuts, whole requests out, each checked as Kvasir's worker checks it —
 * the counts as soon as the header is in (so a hostile count never makes it buffer), then every index. A request that
 * breaks a rule throws a `KvasirWireError`, after which the reader is dead (the worker closes the stream: there is no
 * way back into step). `maxBytes` caps one request's bytes (TOO_LARGE), below what the counts alone would allow.
 */
export class KvasirRequestReader {
  private buf = new Uint8Array(0);
  private dead: KvasirWireError | null = null;

  constructor(
    readonly nEmbd: number,
    readonly nLocal: number,
    readonly maxBytes = Number.POSITIVE_INFINITY,
  ) {}

  /** Bytes waiting for the rest of their request. */
  get buffered(): number {
    return this.buf.length;
  }

  push(chunk: Uint8Array): KvasirRequest[] {
    if (this.dead) throw this.dead;
    const joined = new Uint8Array(this.buf.length + chunk.length);
    joined.set(this.buf);
    joined.set(chunk, this.buf.length);
    this.buf = joined;
    const out: KvasirRequest[] = [];
    try {
      for (;;) {
        const r = this.next();
        if (!r) break;
        out.push(r);
      }
    } catch (e) {
      this.dead = e instanceof KvasirWireError ? e : new KvasirWireError('ARRAY_LENGTH', String(e));
      this.buf = new Uint8Array(0);
      throw this.dead;
    }
    return out;
  }

  /** The next whole request, or null while its bytes are not all in. */
  private next(): KvasirRequest | null {
    const b = this.buf;
    if (b.length < 8) return null;
    const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const h0 = view.getInt32(0, true);
    const h1 = view.getInt32(4, true);
    const E = this.nEmbd;
    let r: KvasirRequest;
    let size: number;
    if (h0 === KVASIR_HEADER_V2 || h0 === KVASIR_HEADER_V2F16) {
      if (b.length < 12) return null;
      const nPairs = view.getInt32(8, true);
      const wire = h0 === KVASIR_HEADER_V2 ? 'v2' : 'v2f16';
      const head: KvasirV2Request = {
        wire,
        nRows: h1,
        nPairs,
        rows: new Float32Array(0),
        rowIndex: new Int32Array(0),
        ids: new Int32Array(0),
        probs: new Float32Array(0),
      };
      checkCounts(head);
      size = kvasirRequestBytes(head, E);
      this.checkSize(size);
      if (b.length < size) return null;
      const f = wire === 'v2f16' ? 2 : 4;
      const floats = wire === 'v2f16' ? f16At : f32At;
      let at = 12;
      const rows = floats(b, at, h1 * E);
      at += f * h1 * E;
      const rowIndex = i32At(b, at, nPairs);
      at += 4 * nPairs;
      const ids = i32At(b, at, nPairs);
      at += 4 * nPairs;
      r = { ...head, rows, rowIndex, ids, probs: floats(b, at, nPairs) };
    } else {
      const head: KvasirV1Request = { wire: 'v1', nUsed: h0, nTokens: h1, cur: new Float32Array(0), sel: new Int32Array(0) };
      checkCounts(head);
      size = kvasirRequestBytes(head, E);
      this.checkSize(size);
      if (b.length < size) return null;
      const cur = f32At(b, 8, h1 * E);
      r = { ...head, cur, sel: i32At(b, 8 + 4 * h1 * E, h0 * h1) };
    }
    checkKvasirRequest(r, E, this.nLocal);
    this.buf = b.slice(size);
    return r;
  }

  private checkSize(size: number): void {
    if (size > this.maxBytes) throw new KvasirWireError('TOO_LARGE', `a request of ${size} bytes, more than ${this.maxBytes}`);
  }
}
