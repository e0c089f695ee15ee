/**
 * The coordinator↔dispatcher expert-dispatch protocol, version 1 (docs/dispatch-protocol.md).
 * The coordinator's side is coordinator/src/src/llama-expert-dispatch.cpp; both follow the same document.
 *
 * Every frame: a 16-byte little-endian header {magic "EXDP", version u16, kind u16, seq u32, payload u32}, then
 * the payload. Sizes are capped before anything is allocated.
 */
import type { Numerics } from '../../shaders/computer.ts';

export const DISPATCH_MAGIC = 0x50445845;
export const DISPATCH_VERSION = 1;
export const HEADER_BYTES = 16;

export enum FrameKind {
  Hello = 1,
  HelloAck = 2,
  Request = 3,
  Response = 4,
}

export const DISPATCH_LIMITS = Object.freeze({
  maxRows: 8192,
  maxEmbd: 65536,
  maxUsed: 64,
  maxModelDesc: 256,
  maxPayload: 256 * 1024 * 1024,
  maxQuietMs: 60_000,
});

const HELLO_FIXED = 28;
const HELLO_ACK_BYTES = 8;
const REQUEST_FIXED = 24;
const RESPONSE_FIXED = 24;

export type DispatchErrorCode =
  | 'DISPATCH_BAD_MAGIC'
  | 'DISPATCH_BAD_VERSION'
  | 'DISPATCH_BAD_KIND'
  | 'DISPATCH_TOO_LARGE'
  | 'DISPATCH_BAD_FRAME'
  | 'DISPATCH_BAD_NUMERICS';

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
}

interface ResponseBase {
  seq: number;
  layer: number;
  nTokens: number;
  nUsed: number;
  /** Asks the coordinator not to dispatch this layer for this long (0 = ask again next time). */
  quietMs: number;
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

function frame(kind: FrameKind, seq: number, payloadBytes: number): { bytes: Uint8Array; view: DataView } {
  const bytes = new Uint8Array(HEADER_BYTES + payloadBytes);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, DISPATCH_MAGIC, true);
  view.setUint16(4, DISPATCH_VERSION, true);
  view.setUint16(6, kind, true);
  view.setUint32(8, seq >>> 0, true);
  view.setUint32(12, payloadBytes, true);
  return { bytes, view };
}

/** Checks a header; throws on anything but a well-formed v1 header within the caps. */
export function decodeHeader(h: Uint8Array): FrameHeader {
  if (h.length < HEADER_BYTES) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `header needs ${HEADER_BYTES} bytes`);
  const v = new DataView(h.buffer, h.byteOffset, HEADER_BYTES);
  if (v.getUint32(0, true) !== DISPATCH_MAGIC) throw new DispatchProtocolError('DISPATCH_BAD_MAGIC', 'not an expert-dispatch frame');
  const version = v.getUint16(4, true);
  if (version !== DISPATCH_VERSION) {
    throw new DispatchProtocolError('DISPATCH_BAD_VERSION', `protocol version ${version}, this side speaks ${DISPATCH_VERSION}`);
  }
  const kind = v.getUint16(6, true);
  if (!(kind in FrameKind)) throw new DispatchProtocolError('DISPATCH_BAD_KIND', `unknown frame kind ${kind}`);
  const payloadBytes = v.getUint32(12, true);
  if (payloadBytes > DISPATCH_LIMITS.maxPayload) {
    throw new DispatchProtocolError('DISPATCH_TOO_LARGE', `payload of ${payloadBytes} bytes exceeds ${DISPATCH_LIMITS.maxPayload}`);
  }
  return { kind: kind as FrameKind, seq: v.getUint32(8, true), payloadBytes };
}

export function encodeHello(h: Hello): Uint8Array {
  const desc = new TextEncoder().encode(h.modelDesc).subarray(0, DISPATCH_LIMITS.maxModelDesc);
  const { bytes, view } = frame(FrameKind.Hello, 0, HELLO_FIXED + desc.length);
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

/** accepted=false refuses the coordinator (e.g. a different model than the hub expects); `code` says why. */
export function encodeHelloAck(accepted: boolean, code = 0): Uint8Array {
  const { bytes, view } = frame(FrameKind.HelloAck, 0, HELLO_ACK_BYTES);
  view.setUint32(HEADER_BYTES, accepted ? 1 : 0, true);
  view.setUint32(HEADER_BYTES + 4, code, true);
  return bytes;
}

export function encodeRequest(r: DispatchRequest): Uint8Array {
  const payload = REQUEST_FIXED + 4 * (r.nTokens * r.nEmbd + 2 * r.nTokens * r.nUsed);
  const { bytes, view } = frame(FrameKind.Request, r.seq, payload);
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
  const want = REQUEST_FIXED + 4 * (nTokens * nEmbd + 2 * nTokens * nUsed);
  if (payload.length !== want)
    throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `request of ${payload.length} bytes, expected ${want}`);
  // Copy into fresh aligned buffers: the payload may sit at any offset of a pooled buffer.
  const body = payload.slice(REQUEST_FIXED);
  const rows = new Float32Array(body.buffer, 0, nTokens * nEmbd);
  const ids = new Int32Array(body.buffer, 4 * nTokens * nEmbd, nTokens * nUsed);
  const probs = new Float32Array(body.buffer, 4 * (nTokens * nEmbd + nTokens * nUsed), nTokens * nUsed);
  for (const id of ids) {
    if (id < 0 || id >= nExpert) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `expert id ${id} outside [0, ${nExpert})`);
  }
  return { seq: header.seq, layer, nTokens, nEmbd, nUsed, deadlineUs, localNsPerPair, rows, ids, probs };
}

export function encodeResponse(r: DispatchResponse): Uint8Array {
  checkInt('quiet_ms', r.quietMs, 0, DISPATCH_LIMITS.maxQuietMs);
  const pairs = r.nTokens * r.nUsed;
  const payload = r.mode === 'local' ? RESPONSE_FIXED : RESPONSE_FIXED + pad4(pairs) + r.sums.byteLength;
  const { bytes, view } = frame(FrameKind.Response, r.seq, payload);
  let served = 0;
  if (r.mode === 'served') {
    if (r.served.length !== pairs) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'served flags do not cover every pair');
    for (const f of r.served) served += f;
    bytes.set(r.served, HEADER_BYTES + RESPONSE_FIXED);
    bytes.set(new Uint8Array(r.sums.buffer, r.sums.byteOffset, r.sums.byteLength), HEADER_BYTES + RESPONSE_FIXED + pad4(pairs));
  }
  putU32s(view, [r.layer, r.nTokens, r.nUsed, r.mode === 'local' ? 0 : 1, r.quietMs, served]);
  return bytes;
}

export function decodeResponse(header: FrameHeader, payload: Uint8Array, nEmbd: number): DispatchResponse {
  if (header.kind !== FrameKind.Response)
    throw new DispatchProtocolError('DISPATCH_BAD_KIND', `expected a response, got kind ${header.kind}`);
  if (payload.length < RESPONSE_FIXED) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'response is too short');
  const v = new DataView(payload.buffer, payload.byteOffset, payload.length);
  const u = (i: number): number => v.getUint32(4 * i, true);
  const base = { seq: header.seq, layer: u(0), nTokens: u(1), nUsed: u(2), quietMs: u(4) };
  checkInt('quiet_ms', base.quietMs, 0, DISPATCH_LIMITS.maxQuietMs);
  if (u(3) === 0) {
    if (payload.length !== RESPONSE_FIXED) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'a local answer carries no data');
    return { ...base, mode: 'local' };
  }
  if (u(3) !== 1) throw new DispatchProtocolError('DISPATCH_BAD_FRAME', `unknown mode ${u(3)}`);
  const pairs = base.nTokens * base.nUsed;
  if (payload.length !== RESPONSE_FIXED + pad4(pairs) + 4 * base.nTokens * nEmbd) {
    throw new DispatchProtocolError('DISPATCH_BAD_FRAME', 'served answer of the wrong size');
  }
  const body = payload.slice(RESPONSE_FIXED);
  return {
    ...base,
    mode: 'served',
    served: body.subarray(0, pairs),
    sums: new Float32Array(body.buffer, pad4(pairs), base.nTokens * nEmbd),
  };
}

/**
 * Splits a byte stream into frames. Headers are validated as soon as they are complete, so an oversized or
 * foreign frame is refused before its payload is buffered.
 */
export class FrameReader {
  private chunks: Uint8Array[] = [];
  private buffered = 0;
  private header: FrameHeader | undefined;

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
