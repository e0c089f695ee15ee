/**
 * The volunteer channel, version 1 (docs/volunteer-channel.md): one WebSocket per volunteer at `/api/volunteer`,
 * opened by the volunteer. Control messages are JSON text frames; work and results are binary frames. The hub (Node,
 * `ws`) and every client (the page, the widget's frame, the headless volunteer) use this one module, so it stays
 * browser-safe: no Node imports, only typed arrays, DataView and TextEncoder/TextDecoder.
 *
 * Every decoder validates everything and throws VolunteerWireError, whose `closeCode` is what the receiver closes with:
 *
 *   ws.on('message', (data, isBinary) => {
 *     try {
 *       if (!isBinary) return onControl(parseClientMessage(data));
 *       const { kind, workId } = peekFrame(data);
 *       if (kind === 'result') onResult(decodeResult(data, expectFor(workId)));
 *       else if (kind === 'work_failed') onFailed(decodeWorkFailed(data));
 *       else throw new VolunteerWireError('BAD_FRAME', 'volunteers do not send work frames');
 *     } catch (e) {
 *       if (e instanceof VolunteerWireError) ws.close(e.closeCode, closeReason(e.message));
 *     }
 *   });
 *
 * Rule for codes: a value beyond a VOLUNTEER_LIMITS cap → TOO_LARGE; any other malformation → BAD_FRAME; a version
 * other than ours → UNSUPPORTED_VERSION; a missing or malformed token → BAD_TOKEN.
 */
import { f16ToF32Table } from '../gguf/half.ts';
import {
  DEVICE_BYTES_MAX,
  EXPERTS_MAX,
  HELD_RANGES_MAX,
  LAYERS_MAX,
  MODEL_NAME_MAX_CHARS,
  OFFER_EXPERTS_MAX,
  TOKEN_MAX_CHARS,
  WORKER_ID_MAX_CHARS,
} from './limits.ts';
import type { Backend, Numerics } from './numerics.ts';

export const VOLUNTEER_WIRE_VERSION = 1;
/** Bytes `E X V W` read as a little-endian u32: the first four bytes of every binary frame. */
export const WIRE_MAGIC = 0x57565845;
/** Every binary frame starts with a header of this size; the arrays after it are then naturally aligned. */
export const WIRE_HEADER_BYTES = 32;
/** Bytes per (row, expert) pair in a work frame: weight f32, row index u16, local expert u16. */
export const WIRE_PAIR_BYTES = 8;
/** The WebSocket path of the channel. */
export const VOLUNTEER_PATH = '/api/volunteer';

/** Every cap of the channel. The caps the HTTP side shares come from protocol/limits.ts, so both sides agree. */
export const VOLUNTEER_LIMITS = Object.freeze({
  /** Any binary frame; the hub's `ws` maxPayload. A work frame that would be larger is split by the hub. */
  maxFrameBytes: 64 * 1024 * 1024,
  /** Any text (JSON) message, in UTF-8 bytes. */
  maxTextBytes: 16 * 1024,
  /** Rows in one work frame (row indices are u16; the coordinator sends at most 8192 tokens per request). */
  maxRows: 8192,
  maxEmbd: 65536,
  /** Pairs in one work frame: every row routed to at most 64 experts, as the dispatch protocol allows. */
  maxPairs: 8192 * 64,
  /** Work-failed message, UTF-8 bytes. */
  maxFailureMessageBytes: 256,
  maxTokenChars: TOKEN_MAX_CHARS,
  maxWorkerIdChars: WORKER_ID_MAX_CHARS,
  maxModelChars: MODEL_NAME_MAX_CHARS,
  /** Adapter vendor, architecture and description, each. */
  maxAdapterChars: 256,
  maxFeatures: 64,
  maxFeatureChars: 64,
  /** Entries of a capability list (numerics, encodings), known or not. */
  maxListed: 8,
  /** The client's description of itself (e.g. "page/0.1.0 Chrome/131"). */
  maxAgentChars: 128,
  /** Each byte count a device states. */
  maxDeviceBytes: DEVICE_BYTES_MAX,
  /** Measured GFLOP/s (a PFLOP/s card would be 1e6). */
  maxGflops: 1e7,
  maxOfferExperts: OFFER_EXPERTS_MAX,
  /** Layers are < this. */
  maxLayers: LAYERS_MAX,
  /** Experts per layer. */
  maxExperts: EXPERTS_MAX,
  /** Held ranges in one heartbeat. */
  maxCoverageRanges: HELD_RANGES_MAX,
  maxShardUrlChars: 2048,
  /** Human sentences: load_failed.message, release.reason. */
  maxMessageChars: 512,
  maxQueueDepth: 1_000_000,
  /** Peer ids in one assign (docs/peers.md). */
  maxPeersListed: 16,
  /** A PeerJS id or token the hub issues, characters. */
  maxPeerIdChars: 64,
  /** The path of the hub's PeerJS signalling server. */
  maxPeerPathChars: 128,
  /** Heartbeat interval and idle timeout the hub may announce, ms. */
  minIntervalMs: 1000,
  maxIntervalMs: 3_600_000,
});

// ---------------------------------------------------------------------------------------------------- close codes

/** What a client does after the hub closed the channel with a code. */
export type CloseAction =
  /** Dial again with the usual jittered exponential backoff. */
  | 'backoff'
  /** Log in again (a fresh node token), then dial. */
  | 'new-token'
  /** Dial again, but not before a minute or more. */
  | 'later'
  /** Do not dial again by itself; say why to the user. */
  | 'stop';

interface CloseEntry {
  readonly code: number;
  readonly meaning: string;
  readonly then: CloseAction;
}

const entry = (code: number, then: CloseAction, meaning: string): CloseEntry => Object.freeze({ code, then, meaning });

/** WebSocket application close codes of the channel (4000–4999), the same in both directions. A normal leave is 1000. */
export const CLOSE_CODES = Object.freeze({
  INTERNAL_ERROR: entry(4000, 'backoff', 'The hub failed on its side; nothing was wrong with what the volunteer sent.'),
  BAD_TOKEN: entry(4001, 'new-token', 'The node token in hello is missing, malformed, tampered with or expired: log in again.'),
  BAD_FRAME: entry(
    4002,
    'backoff',
    'A message or frame was malformed: bad JSON, unknown type, a missing or mistyped field, sizes that do not add up, a value out of range or not finite.',
  ),
  UNSUPPORTED_VERSION: entry(
    4003,
    'stop',
    'The other side speaks another version of the volunteer channel; reload the page or update the volunteer.',
  ),
  TOO_LARGE: entry(4004, 'backoff', 'A message, frame, string, list or dimension exceeded its cap in VOLUNTEER_LIMITS.'),
  OVER_CAPACITY: entry(4005, 'later', 'The hub holds as many volunteers as it accepts; try again later.'),
  REPLACED: entry(4006, 'stop', 'A newer connection with the same worker id took over (another tab of the same volunteer).'),
  SHUTTING_DOWN: entry(4007, 'backoff', 'The hub is shutting down or restarting.'),
  IDLE_TIMEOUT: entry(4008, 'backoff', 'Nothing arrived from the volunteer within the idle timeout announced in welcome.'),
  HELLO_TIMEOUT: entry(4009, 'backoff', 'The connection opened but no hello arrived in time.'),
  UNEXPECTED_MESSAGE: entry(
    4010,
    'backoff',
    'A well-formed message came at the wrong moment (a second hello, work before loaded, a result for work never sent).',
  ),
  RATE_LIMITED: entry(4011, 'later', 'The volunteer sent control messages faster than the hub accepts them.'),
  QUARANTINED: entry(4012, 'later', "The hub's verification found this worker's results wrong; it is not given work for a while."),
});

export type CloseName = keyof typeof CLOSE_CODES;

const CLOSE_BY_CODE: ReadonlyMap<number, CloseName> = new Map(
  (Object.keys(CLOSE_CODES) as CloseName[]).map((name) => [CLOSE_CODES[name].code, name]),
);

/** The name of one of our close codes, or undefined for any other code (1000, 1006, …). */
export function closeName(code: number): CloseName | undefined {
  return CLOSE_BY_CODE.get(code);
}

const utf8 = new TextEncoder();

/** A WebSocket close reason may hold 123 UTF-8 bytes; longer throws in `ws` and in browsers. Cuts at a character. */
export function closeReason(text: string): string {
  if (text.length <= 41) return text; // ≤ 3 bytes per UTF-16 unit
  const bytes = utf8.encode(text);
  if (bytes.length <= 123) return text;
  let end = 120;
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  return `${new TextDecoder().decode(bytes.subarray(0, end))}…`;
}

export class VolunteerWireError extends Error {
  readonly closeCode: number;

  constructor(
    readonly code: CloseName,
    message: string,
  ) {
    super(message);
    this.name = 'VolunteerWireError';
    this.closeCode = CLOSE_CODES[code].code;
  }
}

const badFrame = (m: string): VolunteerWireError => new VolunteerWireError('BAD_FRAME', m);
const tooLarge = (m: string): VolunteerWireError => new VolunteerWireError('TOO_LARGE', m);

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what it refuses
const CONTROL_CHARS = /[\u0000-\u001f\u007f]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: and what sentence() replaces
const CONTROL_CHARS_ALL = /[\u0000-\u001f\u007f]+/g;

/**
 * A human sentence as encoders send it (an exception's message may hold newlines or run long): control characters
 * become spaces and it is cut to `maxChars`, so a client is never closed for the way an error was worded.
 */
function sentence(text: string, maxChars: number): string {
  const clean = text.replace(CONTROL_CHARS_ALL, ' ');
  return clean.length <= maxChars ? clean : `${clean.slice(0, maxChars - 1)}…`;
}

// ---------------------------------------------------------------------------------------------------- encodings

// The bulk arrays are written and read through typed-array views, which use the host's byte order; the wire is
// little-endian, as is every browser and Node host (x86, ARM).
if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  throw new Error('protocol/channel.ts needs a little-endian host');
}

/** How the floats of a work frame's rows or a result's sums travel. */
export type WireEncoding = 'f32' | 'f16';
export const WIRE_ENCODINGS: readonly WireEncoding[] = Object.freeze(['f32', 'f16']);
const ENCODING_WIRE = Object.freeze({ f32: 1, f16: 2 } as const);
const elemBytes = (e: WireEncoding): number => (e === 'f32' ? 4 : 2);

function encodingFromWire(v: number, field: string): WireEncoding {
  if (v === ENCODING_WIRE.f32) return 'f32';
  if (v === ENCODING_WIRE.f16) return 'f16';
  throw badFrame(`${field} ${v} is neither 1 (f32) nor 2 (f16)`);
}

/**
 * f32 → f16 bits for a whole array: round to nearest even, gradual underflow, bit-identical to gguf/half.ts
 * `f32ToF16` (the unit test compares them), but on the integer bits, without a call per element. Returns false when
 * a value was not finite or overflowed f16 (|x| ≥ 65520); those elements hold ±Inf / NaN.
 */
export function f32ArrayToF16(src: Float32Array, dst: Uint16Array): boolean {
  if (dst.length !== src.length) throw new RangeError('f32ArrayToF16: src and dst differ in length');
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  let finite = true;
  for (let i = 0; i < bits.length; i++) {
    const w = bits[i]!;
    const a = w & 0x7fffffff;
    let h: number;
    if (a >= 0x38800000) {
      if (a >= 0x477ff000) {
        h = a > 0x7f800000 ? 0x7e00 : 0x7c00;
        finite = false;
      } else {
        // Normal: rebias the exponent (127 → 15) and round the 13 dropped bits to nearest even without a branch
        // (a data-dependent branch here mispredicts half the time): add 0xfff, plus 1 when the kept part is odd.
        h = (a - 0x38000000 + 0xfff + ((a >>> 13) & 1)) >>> 13;
      }
    } else if (a >= 0x33000000) {
      // [2^-25, 2^-14): an f16 subnormal, |x|·2^24 rounded to nearest even.
      const shift = 126 - (a >>> 23);
      const m = (a & 0x7fffff) | 0x800000;
      h = m >>> shift;
      const rest = m & ((1 << shift) - 1);
      const half = 1 << (shift - 1);
      if (rest > half || (rest === half && (h & 1) === 1)) h++;
    } else {
      h = 0;
    }
    dst[i] = ((w >>> 16) & 0x8000) | h;
  }
  return finite;
}

/** f16 bits → f32 through gguf/half.ts's table. Returns false when an element was ±Inf or NaN. */
export function f16ArrayToF32(src: Uint16Array, dst: Float32Array): boolean {
  if (dst.length !== src.length) throw new RangeError('f16ArrayToF32: src and dst differ in length');
  const table = f16ToF32Table();
  let finite = true;
  for (let i = 0; i < src.length; i++) {
    const h = src[i]!;
    if ((h & 0x7c00) === 0x7c00) finite = false;
    dst[i] = table[h]!;
  }
  return finite;
}

/**
 * Index of the first non-finite element, or -1. The common all-finite case is one branch-free pass (x·0 is 0 for a
 * finite x and NaN otherwise; four accumulators keep the additions independent), about twice as fast as testing
 * each element's exponent bits; only a failing array is scanned again for the index.
 */
function firstNonFinite(a: Float32Array): number {
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  const n4 = a.length & ~3;
  let i = 0;
  for (; i < n4; i += 4) {
    s0 += a[i]! * 0;
    s1 += a[i + 1]! * 0;
    s2 += a[i + 2]! * 0;
    s3 += a[i + 3]! * 0;
  }
  for (; i < a.length; i++) s0 += a[i]! * 0;
  if (s0 + s1 + s2 + s3 === 0) return -1;
  return a.findIndex((x) => !Number.isFinite(x));
}

// ---------------------------------------------------------------------------------------------------- binary frames

export type FrameKindName = 'work' | 'result' | 'work_failed';
const KIND_WIRE = Object.freeze({ work: 1, result: 2, work_failed: 3 } as const);
const KIND_NAMES: readonly (FrameKindName | undefined)[] = [undefined, 'work', 'result', 'work_failed'];

/** Why a worker could not compute one work frame (binary work_failed); the hub computes those pairs locally. */
export const WORK_FAILED_CODES = Object.freeze({
  /** No loaded slice has the frame's assignment id (released, or not yet loaded). */
  NOT_LOADED: 1,
  /** The volunteer paused. */
  PAUSED: 2,
  /** Too much work queued to answer in time. */
  OVERLOADED: 3,
  /** The backend threw, or produced sums that are not finite. */
  COMPUTE_ERROR: 4,
  /** The GPU device was lost; the client rebuilds its engine (and says loaded again) or gives the slice up. */
  DEVICE_LOST: 5,
  /** The frame asks for an encoding or a shape this client cannot compute. */
  UNSUPPORTED: 6,
});
export type WorkFailedCode = keyof typeof WORK_FAILED_CODES;
const WORK_FAILED_NAMES: ReadonlyMap<number, WorkFailedCode> = new Map(
  (Object.keys(WORK_FAILED_CODES) as WorkFailedCode[]).map((k) => [WORK_FAILED_CODES[k], k]),
);

/** What encodeWork needs; rows are always given as f32 and converted when `rowEncoding` is f16. */
export interface WorkInput {
  /** The hub's id for this frame (u32, unique among the frames in flight on one connection); the result echoes it. */
  workId: number;
  /** The assignment whose slice computes these pairs (from `assign`). */
  assignmentId: number;
  nRows: number;
  nEmbd: number;
  /**
   * `[nRows × nEmbd]`, or, with `rowSource`, any `[n × nEmbd]` array the frame's rows are picked from: frame row i is
   * `rows[rowSource[i]·nEmbd …]`. The hub passes the coordinator's request rows and the tokens this worker needs,
   * so each row is copied once, straight into the frame.
   */
  rows: Float32Array;
  rowSource?: ArrayLike<number>;
  /** Per pair: the frame row (< nRows). */
  rowIndex: Uint16Array;
  /** Per pair: expert id − the slice's first expert. */
  localExpert: Uint16Array;
  /** Per pair: the router weight; finite. */
  weight: Float32Array;
  /** f16 rows halve the bytes but change the worker's input: an exact comparison with the coordinator then no longer holds. */
  rowEncoding: WireEncoding;
  /** What the result must carry (f32 results are accepted when f16 was asked). */
  resultEncoding: WireEncoding;
}

/** A decoded work frame. Arrays may be views of the received bytes: do not reuse that buffer while using them. */
export interface WorkFrame {
  workId: number;
  assignmentId: number;
  nRows: number;
  nEmbd: number;
  nPairs: number;
  rowEncoding: WireEncoding;
  resultEncoding: WireEncoding;
  /** `[nRows × nEmbd]`, f16 rows already widened. */
  rows: Float32Array;
  rowIndex: Uint16Array;
  localExpert: Uint16Array;
  weight: Float32Array;
}

export interface ResultInput {
  workId: number;
  nRows: number;
  nEmbd: number;
  /** `[nRows × nEmbd]`: per row, Σ over its pairs of weight · expert(row). */
  sums: Float32Array;
  /** The work frame's resultEncoding. A sum beyond f16's range (|x| ≥ 65520) makes the frame f32 instead. */
  encoding: WireEncoding;
  /** Client time from receiving the work frame to sending this result, queueing included (µs; 0 = not measured). */
  computeUs?: number;
}

export interface ResultFrame {
  workId: number;
  nRows: number;
  nEmbd: number;
  encoding: WireEncoding;
  computeUs: number;
  /** `[nRows × nEmbd]`, finite, f16 already widened. May be a view of the received bytes. */
  sums: Float32Array;
}

/** What the hub knows about the work frame a result answers. */
export interface ResultExpectation {
  workId?: number;
  nRows: number;
  nEmbd: number;
  /** The work frame's resultEncoding: f16 accepts f32 too (the f16 overflow escape), f32 accepts only f32. */
  encoding: WireEncoding;
}

export interface WorkFailed {
  workId: number;
  code: WorkFailedCode;
  /** ≤ 256 UTF-8 bytes (longer is cut by the encoder). */
  message: string;
}

function checkInt(name: string, v: number, min: number, max: number): void {
  if (!Number.isInteger(v) || v < min || v > max) throw badFrame(`${name} ${v} is outside [${min}, ${max}]`);
}

/** A dimension read from a frame or given to an encoder: 0 is malformed, above the cap is too large. */
function checkDim(name: string, v: number, cap: number): void {
  if (!Number.isInteger(v) || v < 1) throw badFrame(`${name} ${v} must be an integer ≥ 1`);
  if (v > cap) throw tooLarge(`${name} ${v} exceeds the cap of ${cap}`);
}

function checkFrameBytes(what: string, n: number): void {
  if (n > VOLUNTEER_LIMITS.maxFrameBytes) throw tooLarge(`${what} of ${n} bytes exceeds ${VOLUNTEER_LIMITS.maxFrameBytes}`);
}

function newFrame(kind: FrameKindName, workId: number, bytes: number): { buf: ArrayBuffer; view: DataView } {
  checkInt('work_id', workId, 0, 0xffffffff);
  checkFrameBytes(`${kind} frame`, bytes);
  const buf = new ArrayBuffer(bytes);
  const view = new DataView(buf);
  view.setUint32(0, WIRE_MAGIC, true);
  view.setUint16(4, VOLUNTEER_WIRE_VERSION, true);
  view.setUint16(6, KIND_WIRE[kind], true);
  view.setUint32(8, workId, true);
  return { buf, view };
}

/** A frame's bytes at a 4-aligned offset (the arrays inside are then viewable); copies only when they are not. */
function aligned(bytes: Uint8Array): Uint8Array {
  return bytes.byteOffset % 4 === 0 ? bytes : bytes.slice();
}

/** A received binary message: a Uint8Array (Node's Buffer is one) or the ArrayBuffer a browser WebSocket delivers. */
export type WireBytes = Uint8Array | ArrayBuffer;

function asBytes(data: WireBytes): Uint8Array {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  throw badFrame('a binary frame must be bytes');
}

function readHeader(bytes: Uint8Array): { view: DataView; kind: FrameKindName; workId: number } {
  checkFrameBytes('frame', bytes.length);
  if (bytes.length < WIRE_HEADER_BYTES)
    throw badFrame(`frame of ${bytes.length} bytes is shorter than the ${WIRE_HEADER_BYTES}-byte header`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  if (view.getUint32(0, true) !== WIRE_MAGIC) throw badFrame('not a volunteer-channel frame (bad magic)');
  const version = view.getUint16(4, true);
  if (version !== VOLUNTEER_WIRE_VERSION) {
    throw new VolunteerWireError('UNSUPPORTED_VERSION', `frame version ${version}, this side speaks ${VOLUNTEER_WIRE_VERSION}`);
  }
  const kind = KIND_NAMES[view.getUint16(6, true)];
  if (kind === undefined) throw badFrame(`unknown frame kind ${view.getUint16(6, true)}`);
  return { view, kind, workId: view.getUint32(8, true) };
}

function expectKind(got: FrameKindName, want: FrameKindName): void {
  if (got !== want) throw badFrame(`expected a ${want} frame, got ${got}`);
}

function checkZero(view: DataView, from: number, to: number): void {
  for (let o = from; o < to; o++) if (view.getUint8(o) !== 0) throw badFrame(`reserved header byte ${o} is not 0`);
}

/** Validates a binary frame's header (size cap, magic, version, kind) and says what it is, so the receiver can route it. */
export function peekFrame(data: WireBytes): { kind: FrameKindName; workId: number } {
  const { kind, workId } = readHeader(asBytes(data));
  return { kind, workId };
}

const workBytes = (nRows: number, nEmbd: number, nPairs: number, rowEncoding: WireEncoding): number =>
  WIRE_HEADER_BYTES + WIRE_PAIR_BYTES * nPairs + nRows * nEmbd * elemBytes(rowEncoding);

/** The most rows of width nEmbd one work frame can hold with nPairsPerRow pairs each (for the hub's splitting). */
export function maxRowsPerFrame(nEmbd: number, rowEncoding: WireEncoding, nPairsPerRow: number): number {
  const perRow = nEmbd * elemBytes(rowEncoding) + WIRE_PAIR_BYTES * nPairsPerRow;
  const fit = Math.floor((VOLUNTEER_LIMITS.maxFrameBytes - WIRE_HEADER_BYTES) / perRow);
  return Math.min(VOLUNTEER_LIMITS.maxRows, Math.floor(VOLUNTEER_LIMITS.maxPairs / Math.max(1, nPairsPerRow)), fit);
}

/**
 * Work frame, hub → client (layout in docs/volunteer-channel.md): header, weights f32[n_pairs], row indices
 * u16[n_pairs], local experts u16[n_pairs], rows [n_rows·n_embd]. One allocation; rows copied (or converted) once.
 */
export function encodeWork(w: WorkInput): Uint8Array {
  checkInt('assignment_id', w.assignmentId, 1, 0xffffffff);
  checkDim('n_rows', w.nRows, VOLUNTEER_LIMITS.maxRows);
  checkDim('n_embd', w.nEmbd, VOLUNTEER_LIMITS.maxEmbd);
  const nPairs = w.weight.length;
  checkDim('n_pairs', nPairs, VOLUNTEER_LIMITS.maxPairs);
  if (w.rowIndex.length !== nPairs || w.localExpert.length !== nPairs) {
    throw badFrame('weight, rowIndex and localExpert must have one entry per pair');
  }
  const { nRows, nEmbd, rows, rowSource } = w;
  const bytes = workBytes(nRows, nEmbd, nPairs, w.rowEncoding);
  checkFrameBytes('work frame', bytes);
  if (rowSource ? rowSource.length !== nRows || rows.length % nEmbd !== 0 : rows.length !== nRows * nEmbd) {
    throw badFrame(rowSource ? 'rowSource must name nRows rows of an [n × nEmbd] array' : 'rows must hold nRows × nEmbd floats');
  }
  for (const r of w.rowIndex) if (r >= nRows) throw badFrame(`row index ${r} is not below n_rows ${nRows}`);
  const bad = firstNonFinite(w.weight);
  if (bad >= 0) throw badFrame(`weight of pair ${bad} is not finite`);

  const { buf, view } = newFrame('work', w.workId, bytes);
  view.setUint32(12, w.assignmentId, true);
  view.setUint32(16, nRows, true);
  view.setUint32(20, nEmbd, true);
  view.setUint32(24, nPairs, true);
  view.setUint8(28, ENCODING_WIRE[w.rowEncoding]);
  view.setUint8(29, ENCODING_WIRE[w.resultEncoding]);
  let o = WIRE_HEADER_BYTES;
  new Float32Array(buf, o, nPairs).set(w.weight);
  o += 4 * nPairs;
  new Uint16Array(buf, o, nPairs).set(w.rowIndex);
  o += 2 * nPairs;
  new Uint16Array(buf, o, nPairs).set(w.localExpert);
  o += 2 * nPairs;

  const source = (i: number): Float32Array => {
    const s = rowSource ? rowSource[i]! : i;
    if (!Number.isInteger(s) || s < 0 || (s + 1) * nEmbd > rows.length) throw badFrame(`rowSource[${i}] = ${s} names no row`);
    return rows.subarray(s * nEmbd, (s + 1) * nEmbd);
  };
  if (w.rowEncoding === 'f32') {
    const out = new Float32Array(buf, o, nRows * nEmbd);
    if (rowSource) for (let i = 0; i < nRows; i++) out.set(source(i), i * nEmbd);
    else out.set(rows);
    const nf = firstNonFinite(out);
    if (nf >= 0) throw badFrame(`row ${Math.floor(nf / nEmbd)} holds a value that is not finite`);
  } else {
    const out = new Uint16Array(buf, o, nRows * nEmbd);
    for (let i = 0; i < nRows; i++) {
      if (!f32ArrayToF16(source(i), out.subarray(i * nEmbd, (i + 1) * nEmbd))) {
        throw badFrame(`row ${i} holds a value that is not finite or beyond f16's range; send f32 rows`);
      }
    }
  }
  return new Uint8Array(buf);
}

/**
 * Decodes and checks a work frame. `sliceWidth` (the assignment's end − begin) bounds the local expert ids; without
 * it any u16 passes.
 */
export function decodeWork(data: WireBytes, opts: { sliceWidth?: number } = {}): WorkFrame {
  const bytes = asBytes(data);
  const { view, kind, workId } = readHeader(bytes);
  expectKind(kind, 'work');
  const assignmentId = view.getUint32(12, true);
  const nRows = view.getUint32(16, true);
  const nEmbd = view.getUint32(20, true);
  const nPairs = view.getUint32(24, true);
  checkInt('assignment_id', assignmentId, 1, 0xffffffff);
  checkDim('n_rows', nRows, VOLUNTEER_LIMITS.maxRows);
  checkDim('n_embd', nEmbd, VOLUNTEER_LIMITS.maxEmbd);
  checkDim('n_pairs', nPairs, VOLUNTEER_LIMITS.maxPairs);
  const rowEncoding = encodingFromWire(view.getUint8(28), 'row_encoding');
  const resultEncoding = encodingFromWire(view.getUint8(29), 'result_encoding');
  checkZero(view, 30, WIRE_HEADER_BYTES);
  const want = workBytes(nRows, nEmbd, nPairs, rowEncoding);
  checkFrameBytes('work frame as its header describes it', want);
  if (bytes.length !== want) throw badFrame(`work frame of ${bytes.length} bytes, its header adds up to ${want}`);

  const b = aligned(bytes);
  let o = b.byteOffset + WIRE_HEADER_BYTES;
  const weight = new Float32Array(b.buffer, o, nPairs);
  o += 4 * nPairs;
  const rowIndex = new Uint16Array(b.buffer, o, nPairs);
  o += 2 * nPairs;
  const localExpert = new Uint16Array(b.buffer, o, nPairs);
  o += 2 * nPairs;
  const badWeight = firstNonFinite(weight);
  if (badWeight >= 0) throw badFrame(`weight of pair ${badWeight} is not finite`);
  const width = opts.sliceWidth ?? 0x10000;
  for (let i = 0; i < nPairs; i++) {
    if (rowIndex[i]! >= nRows) throw badFrame(`pair ${i}: row index ${rowIndex[i]} is not below n_rows ${nRows}`);
    if (localExpert[i]! >= width) throw badFrame(`pair ${i}: local expert ${localExpert[i]} is not below the slice width ${width}`);
  }
  let rows: Float32Array;
  if (rowEncoding === 'f32') {
    rows = new Float32Array(b.buffer, o, nRows * nEmbd);
    const nf = firstNonFinite(rows);
    if (nf >= 0) throw badFrame(`row ${Math.floor(nf / nEmbd)} holds a value that is not finite`);
  } else {
    rows = new Float32Array(nRows * nEmbd);
    if (!f16ArrayToF32(new Uint16Array(b.buffer, o, nRows * nEmbd), rows)) throw badFrame('a row holds an f16 value that is not finite');
  }
  return { workId, assignmentId, nRows, nEmbd, nPairs, rowEncoding, resultEncoding, rows, rowIndex, localExpert, weight };
}

/** Result frame, client → hub: header, then sums [n_rows·n_embd] in the encoding the work frame asked for. */
export function encodeResult(r: ResultInput): Uint8Array {
  checkDim('n_rows', r.nRows, VOLUNTEER_LIMITS.maxRows);
  checkDim('n_embd', r.nEmbd, VOLUNTEER_LIMITS.maxEmbd);
  const computeUs = Math.min(0xffffffff, Math.max(0, Math.round(r.computeUs ?? 0)));
  const n = r.nRows * r.nEmbd;
  if (r.sums.length !== n) throw badFrame(`sums hold ${r.sums.length} floats, n_rows × n_embd is ${n}`);
  const nf = firstNonFinite(r.sums);
  if (nf >= 0) throw badFrame(`sum ${nf} is not finite; report work_failed COMPUTE_ERROR instead`);
  const write = (encoding: WireEncoding): Uint8Array | undefined => {
    const { buf, view } = newFrame('result', r.workId, WIRE_HEADER_BYTES + n * elemBytes(encoding));
    view.setUint32(12, r.nRows, true);
    view.setUint32(16, r.nEmbd, true);
    view.setUint32(20, computeUs, true);
    view.setUint8(24, ENCODING_WIRE[encoding]);
    if (encoding === 'f32') new Float32Array(buf, WIRE_HEADER_BYTES, n).set(r.sums);
    else if (!f32ArrayToF16(r.sums, new Uint16Array(buf, WIRE_HEADER_BYTES, n))) return undefined;
    return new Uint8Array(buf);
  };
  return write(r.encoding) ?? (write('f32') as Uint8Array);
}

/** Decodes and checks a result against the work frame it answers (shape, encoding, finite sums). */
export function decodeResult(data: WireBytes, expect: ResultExpectation): ResultFrame {
  const bytes = asBytes(data);
  const { view, kind, workId } = readHeader(bytes);
  expectKind(kind, 'result');
  if (expect.workId !== undefined && workId !== expect.workId) throw badFrame(`result for work ${workId}, expected ${expect.workId}`);
  const nRows = view.getUint32(12, true);
  const nEmbd = view.getUint32(16, true);
  checkDim('n_rows', nRows, VOLUNTEER_LIMITS.maxRows);
  checkDim('n_embd', nEmbd, VOLUNTEER_LIMITS.maxEmbd);
  if (nRows !== expect.nRows || nEmbd !== expect.nEmbd) {
    throw badFrame(`result of ${nRows} × ${nEmbd}, the work frame was ${expect.nRows} × ${expect.nEmbd}`);
  }
  const computeUs = view.getUint32(20, true);
  const encoding = encodingFromWire(view.getUint8(24), 'encoding');
  if (encoding === 'f16' && expect.encoding === 'f32') throw badFrame('result in f16, the work frame asked for f32');
  checkZero(view, 25, WIRE_HEADER_BYTES);
  const n = nRows * nEmbd;
  const want = WIRE_HEADER_BYTES + n * elemBytes(encoding);
  if (bytes.length !== want) throw badFrame(`result frame of ${bytes.length} bytes, its header adds up to ${want}`);
  const b = aligned(bytes);
  let sums: Float32Array;
  if (encoding === 'f32') {
    sums = new Float32Array(b.buffer, b.byteOffset + WIRE_HEADER_BYTES, n);
    const nf = firstNonFinite(sums);
    if (nf >= 0) throw badFrame(`sum ${nf} is not finite`);
  } else {
    sums = new Float32Array(n);
    if (!f16ArrayToF32(new Uint16Array(b.buffer, b.byteOffset + WIRE_HEADER_BYTES, n), sums)) throw badFrame('an f16 sum is not finite');
  }
  return { workId, nRows, nEmbd, encoding, computeUs, sums };
}

/** Work-failed frame, client → hub: header (code u16, message length u16 at 12/14), then the UTF-8 message. */
export function encodeWorkFailed(f: WorkFailed): Uint8Array {
  const code = WORK_FAILED_CODES[f.code];
  if (code === undefined) throw badFrame(`unknown work-failed code ${f.code}`);
  let msg = utf8.encode(sentence(f.message, VOLUNTEER_LIMITS.maxFailureMessageBytes));
  if (msg.length > VOLUNTEER_LIMITS.maxFailureMessageBytes) {
    let end = VOLUNTEER_LIMITS.maxFailureMessageBytes;
    while (end > 0 && (msg[end]! & 0xc0) === 0x80) end--;
    msg = msg.subarray(0, end);
  }
  const { buf, view } = newFrame('work_failed', f.workId, WIRE_HEADER_BYTES + msg.length);
  view.setUint16(12, code, true);
  view.setUint16(14, msg.length, true);
  new Uint8Array(buf).set(msg, WIRE_HEADER_BYTES);
  return new Uint8Array(buf);
}

const fatalUtf8 = new TextDecoder('utf-8', { fatal: true });

export function decodeWorkFailed(data: WireBytes): WorkFailed {
  const bytes = asBytes(data);
  const { view, kind, workId } = readHeader(bytes);
  expectKind(kind, 'work_failed');
  const code = WORK_FAILED_NAMES.get(view.getUint16(12, true));
  if (code === undefined) throw badFrame(`unknown work-failed code ${view.getUint16(12, true)}`);
  const len = view.getUint16(14, true);
  if (len > VOLUNTEER_LIMITS.maxFailureMessageBytes) {
    throw tooLarge(`work-failed message of ${len} bytes exceeds ${VOLUNTEER_LIMITS.maxFailureMessageBytes}`);
  }
  checkZero(view, 16, WIRE_HEADER_BYTES);
  if (bytes.length !== WIRE_HEADER_BYTES + len)
    throw badFrame(`work_failed frame of ${bytes.length} bytes, its header adds up to ${WIRE_HEADER_BYTES + len}`);
  let message: string;
  try {
    message = fatalUtf8.decode(bytes.subarray(WIRE_HEADER_BYTES));
  } catch {
    throw badFrame('work-failed message is not UTF-8');
  }
  if (CONTROL_CHARS.test(message)) throw badFrame('work-failed message holds control characters');
  return { workId, code, message };
}

// ---------------------------------------------------------------------------------------------------- JSON messages

/** Experts `[begin, end)` of `layer` that a worker has loaded and serves, as heartbeats carry them. */
export type CoverageRange = [layer: number, begin: number, end: number];

/** The device as hello states it (mirrors volunteer/state.ts DeviceReport). */
export interface HelloDevice {
  webgpu: boolean;
  adapter: { vendor: string; architecture: string; description: string; isFallbackAdapter: boolean } | null;
  limits: { maxStorageBufferBindingSize: number; maxBufferSize: number } | null;
  /** WebGPU feature names of the adapter (e.g. "shader-f16"). */
  features: string[];
  /** The backend the client chose, if it measured before joining. */
  backend: Backend | null;
  /** That backend's measured speed, GFLOP/s. */
  gflops: number | null;
  /** The memory the volunteer lends, bytes. */
  memoryBudgetBytes: number;
}

export interface Hello {
  type: 'hello';
  version: number;
  /** The node token from `POST /api/auth/node-token`. */
  token: string;
  /** Stable id the client chose (kept across reloads), `[A-Za-z0-9._:-]{1,128}`. */
  workerId: string;
  device: HelloDevice;
  /** How this client can round ('llama' needs the llama-numerics kernels); unknown entries are dropped. */
  numerics: Numerics[];
  /** Encodings it can read rows in and write sums in; must include 'f32'; unknown entries are dropped. */
  encodings: WireEncoding[];
  /** Preferred model ('' = any). */
  model: string;
  /** Widest slice it wants (0 = no limit), as `max_experts` of `POST /api/expert-volunteer`. */
  maxExperts: number;
  /** Free-form description of the client, for the hub's logs and dashboard ('' = none). */
  agent: string;
}

export interface Loaded {
  type: 'loaded';
  assignmentId: number;
  /** Accepting work now (false when paused while it loaded). */
  ready: boolean;
  backend: Backend;
  gflops: number;
  /**
   * Optional (docs/peers.md): the slice's bytes this load took from other volunteers and from the hub (both 0 when it
   * came from the cache). Each ≤ 2^50.
   */
  peerBytes?: number;
  hubBytes?: number;
}

export const LOAD_FAILED_CODES = Object.freeze([
  'DOWNLOAD_FAILED',
  'DIGEST_MISMATCH',
  'SHARD_INVALID',
  'DOES_NOT_FIT',
  'NO_BACKEND',
  'UNSUPPORTED_NUMERICS',
  'ENGINE_FAILED',
  'CANCELLED',
] as const);
export type LoadFailedCode = (typeof LOAD_FAILED_CODES)[number];

export interface LoadFailed {
  type: 'load_failed';
  assignmentId: number;
  code: LoadFailedCode;
  message: string;
}

export interface Heartbeat {
  type: 'heartbeat';
  /** The model of the coverage ('' when it holds nothing). */
  model: string;
  /** Only what is loaded and serving now; empty while waiting or loading. */
  coverage: CoverageRange[];
  paused: boolean;
  /** Pairs served since the connection opened, and work frames queued right now. */
  stats: { pairsServed: number; queueDepth: number };
}

export interface Pause {
  type: 'pause';
}
export interface Resume {
  type: 'resume';
}
export interface Leave {
  type: 'leave';
}
/** Either side may send ping; the other answers pong with the same id at once. */
export interface Ping {
  type: 'ping';
  id: number;
}
export interface Pong {
  type: 'pong';
  id: number;
}

/** Why a volunteer reports a peer (docs/peers.md): a chunk that did not match its hash, or a message it could not read. */
export const PEER_REPORT_CODES = Object.freeze(['BAD_CHUNK', 'BAD_MESSAGE'] as const);
export type PeerReportCode = (typeof PEER_REPORT_CODES)[number];

/** A peer listed for the volunteer's assignment misbehaved; the hub stops listing it (docs/peers.md). */
export interface PeerReport {
  type: 'peer_report';
  assignmentId: number;
  /** The peer's PeerJS id, as the assign listed it. */
  peerId: string;
  code: PeerReportCode;
  /** The chunk that did not match, or null. */
  chunk: number | null;
  /** A sentence for the hub's event log (≤ 512, cleaned by the encoder). */
  detail: string;
}

export type ClientMessage = Hello | Loaded | LoadFailed | Heartbeat | Pause | Resume | Leave | Ping | Pong | PeerReport;

/** Where and as whom a volunteer joins the hub's PeerJS signalling server (welcome's optional `peer`, docs/peers.md). */
export interface WelcomePeer {
  /** The server's path on the hub's origin (its WebSocket is `${path}/peerjs`). */
  path: string;
  /** The PeerJS key the server accepts. */
  key: string;
  /** This connection's peer id (`p` and hex) and token: the server admits only ids the hub issued. */
  id: string;
  token: string;
}

export interface Welcome {
  type: 'welcome';
  version: number;
  /** The hello's worker id, echoed. */
  workerId: string;
  /** How often the client sends heartbeat, ms. */
  heartbeatMs: number;
  /** The hub closes with IDLE_TIMEOUT when nothing has arrived for this long, ms (≥ heartbeatMs). */
  idleTimeoutMs: number;
  /** The result encoding the hub will ask for (each work frame states its own). */
  encoding: WireEncoding;
  /** Pairs credited to this wallet so far. */
  credit: number;
  /** Optional: volunteers of this hub pass slices to each other (docs/peers.md); absent when the hub does not. */
  peer?: WelcomePeer;
}

export interface Assign {
  type: 'assign';
  /** The hub's id for this assignment, u32 ≥ 1; work frames and loaded/load_failed/release name it. */
  assignmentId: number;
  model: string;
  layer: number;
  /** `[begin, end)`; local expert ids in work frames are expert − begin, below end − begin. */
  experts: [number, number];
  nEmbd: number;
  nExpert: number;
  numerics: Numerics;
  /** Path and query on the hub's origin (never a full URL): `/api/expert-shard?…`. */
  shardUrl: string;
  shardBytes: number;
  /** `sha256:<64 hex>` of the shard's bytes. */
  shardDigest: string;
  /**
   * Optional (docs/peers.md): PeerJS ids of live volunteers holding (or fetching) the same digest, holders first, ≤ 16,
   * and the path of the slice's per-chunk hash list. Absent: download from the hub alone.
   */
  peers?: string[];
  chunksUrl?: string;
}

export const RELEASE_CODES = Object.freeze(['NOT_NEEDED', 'MODEL_GONE', 'LOAD_TIMEOUT', 'REBALANCE', 'VERIFICATION_FAILED'] as const);
export type ReleaseCode = (typeof RELEASE_CODES)[number];

export interface Release {
  type: 'release';
  assignmentId: number;
  code: ReleaseCode;
  /** A sentence for the volunteer's page. */
  reason: string;
}

export interface Credit {
  type: 'credit';
  /** Pairs credited to this wallet in total (durable). */
  credit: number;
}

export type HubMessage = Welcome | Assign | Release | Credit | Ping | Pong;

type Obj = Record<string, unknown>;
const WORKER_ID = /^[A-Za-z0-9._:-]+$/;
const TOKEN = /^[\x21-\x7e]+$/;
const FEATURE = /^[a-z0-9_-]+$/;
/** A path on the hub's own origin: one leading '/', no backslash (browsers read '\' as '/'), printable ASCII. */
const SHARD_URL = /^\/(?![/\\])[\x21-\x5b\x5d-\x7e]*$/;
const DIGEST = /^sha256:[0-9a-f]{64}$/;
/** PeerJS ids and tokens as the hub issues them, and a path of the hub's own origin. */
const PEER_ID = /^[A-Za-z0-9]+$/;
const PEER_PATH = /^\/[A-Za-z0-9/_-]*$/;

const show = (v: unknown): string => (typeof v === 'string' ? JSON.stringify(v.slice(0, 32)) : v === null ? 'null' : typeof v);

/** Reads fields of one JSON object, naming each failure by its path (`hello.device.limits.max_buffer_size`). */
class Fields {
  constructor(
    private readonly o: Obj,
    private readonly path: string,
  ) {}

  static of(v: unknown, path: string): Fields {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) throw badFrame(`${path} must be an object`);
    return new Fields(v as Obj, path);
  }

  get(k: string): unknown {
    return Object.hasOwn(this.o, k) ? this.o[k] : undefined;
  }

  has(k: string): boolean {
    const v = this.get(k);
    return v !== undefined && v !== null;
  }

  name(k: string): string {
    return `${this.path}.${k}`;
  }

  int(k: string, min: number, max: number, cap?: number): number {
    const v = this.get(k);
    if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw badFrame(`${this.name(k)} must be an integer, got ${show(v)}`);
    if (cap !== undefined && v > cap) throw tooLarge(`${this.name(k)} ${v} exceeds the cap of ${cap}`);
    if (v < min || v > max) throw badFrame(`${this.name(k)} ${v} is outside [${min}, ${max}]`);
    return v;
  }

  num(k: string, min: number, cap: number): number {
    const v = this.get(k);
    if (typeof v !== 'number' || !Number.isFinite(v)) throw badFrame(`${this.name(k)} must be a finite number, got ${show(v)}`);
    if (v > cap) throw tooLarge(`${this.name(k)} ${v} exceeds the cap of ${cap}`);
    if (v < min) throw badFrame(`${this.name(k)} ${v} is below ${min}`);
    return v;
  }

  bool(k: string): boolean {
    const v = this.get(k);
    if (typeof v !== 'boolean') throw badFrame(`${this.name(k)} must be true or false, got ${show(v)}`);
    return v;
  }

  str(k: string, cap: number, opts: { min?: number; pattern?: RegExp } = {}): string {
    const v = this.get(k);
    if (typeof v !== 'string') throw badFrame(`${this.name(k)} must be a string, got ${show(v)}`);
    if (v.length > cap) throw tooLarge(`${this.name(k)} has ${v.length} characters, the cap is ${cap}`);
    if (v.length < (opts.min ?? 0)) throw badFrame(`${this.name(k)} must not be empty`);
    if (opts.pattern ? v.length > 0 && !opts.pattern.test(v) : CONTROL_CHARS.test(v)) {
      throw badFrame(`${this.name(k)} ${show(v)} is not of the allowed form`);
    }
    return v;
  }

  oneOf<T extends string>(k: string, values: readonly T[]): T {
    const v = this.get(k);
    if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) {
      throw badFrame(`${this.name(k)} must be one of ${values.join(', ')}, got ${show(v)}`);
    }
    return v as T;
  }

  list(k: string, cap: number): unknown[] {
    const v = this.get(k);
    if (!Array.isArray(v)) throw badFrame(`${this.name(k)} must be an array, got ${show(v)}`);
    if (v.length > cap) throw tooLarge(`${this.name(k)} has ${v.length} entries, the cap is ${cap}`);
    return v;
  }

  /** A capability list: strings, unknown ones dropped (a newer client may list more), duplicates dropped. */
  known<T extends string>(k: string, values: readonly T[]): T[] {
    const out: T[] = [];
    for (const x of this.list(k, VOLUNTEER_LIMITS.maxListed)) {
      if (typeof x !== 'string') throw badFrame(`${this.name(k)} must hold strings`);
      if ((values as readonly string[]).includes(x) && !out.includes(x as T)) out.push(x as T);
    }
    return out;
  }

  obj(k: string): Fields {
    return Fields.of(this.get(k), this.name(k));
  }
}

/** The JSON object of a text message, and a field reader named after its `type`. */
function parseObject(data: string | Uint8Array): { type: unknown; f: Fields } {
  let text: string;
  if (typeof data === 'string') {
    // A UTF-16 unit is 1 to 3 UTF-8 bytes: count the bytes only when the length alone does not settle it.
    const cap = VOLUNTEER_LIMITS.maxTextBytes;
    if (data.length > cap || (data.length * 3 > cap && utf8.encode(data).length > cap)) {
      throw tooLarge(`text message exceeds ${cap} bytes`);
    }
    text = data;
  } else if (data instanceof Uint8Array) {
    if (data.length > VOLUNTEER_LIMITS.maxTextBytes)
      throw tooLarge(`text message of ${data.length} bytes exceeds ${VOLUNTEER_LIMITS.maxTextBytes}`);
    try {
      text = fatalUtf8.decode(data);
    } catch {
      throw badFrame('text message is not UTF-8');
    }
  } else {
    throw badFrame('a text message must be a string or bytes');
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw badFrame('text message is not JSON');
  }
  const type = Fields.of(v, 'message').get('type');
  return { type, f: Fields.of(v, typeof type === 'string' ? type.slice(0, 32) : 'message') };
}

function helloVersion(f: Fields): number {
  const version = f.int('version', 0, Number.MAX_SAFE_INTEGER);
  if (version !== VOLUNTEER_WIRE_VERSION) {
    throw new VolunteerWireError('UNSUPPORTED_VERSION', `version ${version}; this side speaks ${VOLUNTEER_WIRE_VERSION}`);
  }
  return version;
}

const L = VOLUNTEER_LIMITS;
const assignmentId = (f: Fields): number => f.int('assignment_id', 1, 0xffffffff);

function parseDevice(d: Fields): HelloDevice {
  let adapter: HelloDevice['adapter'] = null;
  if (d.has('adapter')) {
    const a = d.obj('adapter');
    adapter = {
      vendor: a.str('vendor', L.maxAdapterChars),
      architecture: a.str('architecture', L.maxAdapterChars),
      description: a.str('description', L.maxAdapterChars),
      isFallbackAdapter: a.bool('is_fallback_adapter'),
    };
  }
  let limits: HelloDevice['limits'] = null;
  if (d.has('limits')) {
    const l = d.obj('limits');
    limits = {
      maxStorageBufferBindingSize: l.int('max_storage_buffer_binding_size', 0, L.maxDeviceBytes, L.maxDeviceBytes),
      maxBufferSize: l.int('max_buffer_size', 0, L.maxDeviceBytes, L.maxDeviceBytes),
    };
  }
  const features = d.list('features', L.maxFeatures).map((x, i) => {
    if (typeof x !== 'string') throw badFrame(`${d.name('features')}[${i}] must be a string`);
    if (x.length > L.maxFeatureChars)
      throw tooLarge(`${d.name('features')}[${i}] has ${x.length} characters, the cap is ${L.maxFeatureChars}`);
    if (!FEATURE.test(x)) throw badFrame(`${d.name('features')}[${i}] ${show(x)} is not a feature name`);
    return x;
  });
  return {
    webgpu: d.bool('webgpu'),
    adapter,
    limits,
    features,
    backend: d.has('backend') ? d.oneOf<Backend>('backend', ['webgpu', 'wasm']) : null,
    gflops: d.has('gflops') ? d.num('gflops', 0, L.maxGflops) : null,
    memoryBudgetBytes: d.int('memory_budget_bytes', 0, L.maxDeviceBytes, L.maxDeviceBytes),
  };
}

function parseHello(f: Fields): Hello {
  const version = helloVersion(f);
  const token = f.get('token');
  if (typeof token !== 'string' || token.length === 0 || token.length > L.maxTokenChars || !TOKEN.test(token)) {
    throw new VolunteerWireError('BAD_TOKEN', 'hello.token must be the node token from POST /api/auth/node-token');
  }
  const numerics = f.known<Numerics>('numerics', ['exact', 'llama']);
  if (numerics.length === 0) throw badFrame('hello.numerics names no numerics this hub knows (exact, llama)');
  const encodings = f.known<WireEncoding>('encodings', WIRE_ENCODINGS);
  if (!encodings.includes('f32')) throw badFrame("hello.encodings must include 'f32'");
  return {
    type: 'hello',
    version,
    token,
    workerId: f.str('worker_id', L.maxWorkerIdChars, { min: 1, pattern: WORKER_ID }),
    device: parseDevice(f.obj('device')),
    numerics,
    encodings,
    model: f.has('model') ? f.str('model', L.maxModelChars) : '',
    maxExperts: f.has('max_experts') ? f.int('max_experts', 0, L.maxOfferExperts, L.maxOfferExperts) : 0,
    agent: f.has('agent') ? f.str('agent', L.maxAgentChars) : '',
  };
}

function parseCoverage(f: Fields): CoverageRange[] {
  return f.list('coverage', L.maxCoverageRanges).map((r, i) => {
    const at = `${f.name('coverage')}[${i}]`;
    if (!Array.isArray(r) || r.length !== 3 || !r.every((x) => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0)) {
      throw badFrame(`${at} must be [layer, begin, end] of integers ≥ 0`);
    }
    const [layer, begin, end] = r as CoverageRange;
    if (layer >= L.maxLayers) throw tooLarge(`${at}: layer ${layer} is not below ${L.maxLayers}`);
    if (end > L.maxExperts) throw tooLarge(`${at}: end ${end} exceeds ${L.maxExperts} experts`);
    if (begin >= end) throw badFrame(`${at}: begin ${begin} must be below end ${end}`);
    return [layer, begin, end];
  });
}

function parseWelcomePeer(p: Fields): WelcomePeer {
  return {
    path: p.str('path', L.maxPeerPathChars, { min: 1, pattern: PEER_PATH }),
    key: p.str('key', L.maxPeerIdChars, { min: 1, pattern: PEER_ID }),
    id: p.str('id', L.maxPeerIdChars, { min: 1, pattern: PEER_ID }),
    token: p.str('token', L.maxPeerIdChars, { min: 1, pattern: PEER_ID }),
  };
}

/** Parses a client → hub text message (what the hub receives). Throws VolunteerWireError. */
export function parseClientMessage(data: string | Uint8Array): ClientMessage {
  const { type, f: g } = parseObject(data);
  switch (type) {
    case 'hello':
      return parseHello(g);
    case 'loaded':
      return {
        type,
        assignmentId: assignmentId(g),
        ready: g.bool('ready'),
        backend: g.oneOf<Backend>('backend', ['webgpu', 'wasm']),
        gflops: g.num('gflops', 0, L.maxGflops),
        ...(g.has('peer_bytes') ? { peerBytes: g.int('peer_bytes', 0, L.maxDeviceBytes, L.maxDeviceBytes) } : {}),
        ...(g.has('hub_bytes') ? { hubBytes: g.int('hub_bytes', 0, L.maxDeviceBytes, L.maxDeviceBytes) } : {}),
      };
    case 'peer_report':
      return {
        type,
        assignmentId: assignmentId(g),
        peerId: g.str('peer_id', L.maxPeerIdChars, { min: 1, pattern: PEER_ID }),
        code: g.oneOf('code', PEER_REPORT_CODES),
        chunk: g.has('chunk') ? g.int('chunk', 0, 0xffffffff) : null,
        detail: g.str('detail', L.maxMessageChars),
      };
    case 'load_failed':
      return {
        type,
        assignmentId: assignmentId(g),
        code: g.oneOf('code', LOAD_FAILED_CODES),
        message: g.str('message', L.maxMessageChars),
      };
    case 'heartbeat': {
      const stats = g.obj('stats');
      return {
        type,
        model: g.str('model', L.maxModelChars),
        coverage: parseCoverage(g),
        paused: g.bool('paused'),
        stats: {
          pairsServed: stats.int('pairs_served', 0, Number.MAX_SAFE_INTEGER),
          queueDepth: stats.int('queue_depth', 0, L.maxQueueDepth, L.maxQueueDepth),
        },
      };
    }
    case 'pause':
    case 'resume':
    case 'leave':
      return { type };
    case 'ping':
    case 'pong':
      return { type, id: g.int('id', 0, 0xffffffff) };
    default:
      throw badFrame(`unknown client message type ${show(type)}`);
  }
}

/** Parses a hub → client text message (what the client receives). Throws VolunteerWireError. */
export function parseHubMessage(data: string | Uint8Array): HubMessage {
  const { type, f: g } = parseObject(data);
  switch (type) {
    case 'welcome': {
      const version = helloVersion(g);
      const heartbeatMs = g.int('heartbeat_ms', L.minIntervalMs, L.maxIntervalMs);
      return {
        type,
        version,
        workerId: g.str('worker_id', L.maxWorkerIdChars, { min: 1, pattern: WORKER_ID }),
        heartbeatMs,
        idleTimeoutMs: g.int('idle_timeout_ms', heartbeatMs, L.maxIntervalMs),
        encoding: g.oneOf('encoding', WIRE_ENCODINGS),
        credit: g.int('credit', 0, Number.MAX_SAFE_INTEGER),
        ...(g.has('peer') ? { peer: parseWelcomePeer(g.obj('peer')) } : {}),
      };
    }
    case 'assign': {
      const nExpert = g.int('n_expert', 1, L.maxExperts, L.maxExperts);
      const experts = g.list('experts', 2);
      const [begin, end] = experts;
      if (
        experts.length !== 2 ||
        typeof begin !== 'number' ||
        typeof end !== 'number' ||
        !Number.isInteger(begin) ||
        !Number.isInteger(end) ||
        begin < 0 ||
        begin >= end ||
        end > nExpert
      ) {
        throw badFrame(`assign.experts must be [begin, end) with 0 ≤ begin < end ≤ n_expert ${nExpert}`);
      }
      return {
        type,
        assignmentId: assignmentId(g),
        model: g.str('model', L.maxModelChars, { min: 1 }),
        layer: g.int('layer', 0, L.maxLayers - 1, L.maxLayers - 1),
        experts: [begin, end],
        nEmbd: g.int('n_embd', 1, L.maxEmbd, L.maxEmbd),
        nExpert,
        numerics: g.oneOf<Numerics>('numerics', ['exact', 'llama']),
        shardUrl: g.str('shard_url', L.maxShardUrlChars, { min: 1, pattern: SHARD_URL }),
        shardBytes: g.int('shard_bytes', 1, L.maxDeviceBytes, L.maxDeviceBytes),
        shardDigest: g.str('shard_digest', 71, { min: 1, pattern: DIGEST }),
        ...(g.has('peers')
          ? {
              peers: g.list('peers', L.maxPeersListed).map((x, i) => {
                if (typeof x !== 'string' || x.length === 0 || !PEER_ID.test(x)) throw badFrame(`assign.peers[${i}] is not a peer id`);
                if (x.length > L.maxPeerIdChars)
                  throw tooLarge(`assign.peers[${i}] has ${x.length} characters, the cap is ${L.maxPeerIdChars}`);
                return x;
              }),
            }
          : {}),
        ...(g.has('chunks_url') ? { chunksUrl: g.str('chunks_url', L.maxShardUrlChars, { min: 1, pattern: SHARD_URL }) } : {}),
      };
    }
    case 'release':
      return { type, assignmentId: assignmentId(g), code: g.oneOf('code', RELEASE_CODES), reason: g.str('reason', L.maxMessageChars) };
    case 'credit':
      return { type, credit: g.int('credit', 0, Number.MAX_SAFE_INTEGER) };
    case 'ping':
    case 'pong':
      return { type, id: g.int('id', 0, 0xffffffff) };
    default:
      throw badFrame(`unknown hub message type ${show(type)}`);
  }
}

function wireClient(m: ClientMessage): Obj {
  switch (m.type) {
    case 'hello': {
      const d = m.device;
      return {
        type: m.type,
        version: m.version,
        token: m.token,
        worker_id: m.workerId,
        device: {
          webgpu: d.webgpu,
          adapter: d.adapter && {
            vendor: d.adapter.vendor,
            architecture: d.adapter.architecture,
            description: d.adapter.description,
            is_fallback_adapter: d.adapter.isFallbackAdapter,
          },
          limits: d.limits && {
            max_storage_buffer_binding_size: d.limits.maxStorageBufferBindingSize,
            max_buffer_size: d.limits.maxBufferSize,
          },
          features: d.features,
          backend: d.backend,
          gflops: d.gflops,
          memory_budget_bytes: d.memoryBudgetBytes,
        },
        numerics: m.numerics,
        encodings: m.encodings,
        model: m.model,
        max_experts: m.maxExperts,
        agent: m.agent,
      };
    }
    case 'loaded':
      return {
        type: m.type,
        assignment_id: m.assignmentId,
        ready: m.ready,
        backend: m.backend,
        gflops: m.gflops,
        ...(m.peerBytes !== undefined ? { peer_bytes: m.peerBytes } : {}),
        ...(m.hubBytes !== undefined ? { hub_bytes: m.hubBytes } : {}),
      };
    case 'peer_report':
      return {
        type: m.type,
        assignment_id: m.assignmentId,
        peer_id: m.peerId,
        code: m.code,
        chunk: m.chunk,
        detail: sentence(m.detail, L.maxMessageChars),
      };
    case 'load_failed':
      return { type: m.type, assignment_id: m.assignmentId, code: m.code, message: sentence(m.message, L.maxMessageChars) };
    case 'heartbeat':
      return {
        type: m.type,
        model: m.model,
        coverage: m.coverage,
        paused: m.paused,
        stats: { pairs_served: m.stats.pairsServed, queue_depth: m.stats.queueDepth },
      };
    case 'ping':
    case 'pong':
      return { type: m.type, id: m.id };
    default:
      return { type: m.type };
  }
}

function wireHub(m: HubMessage): Obj {
  switch (m.type) {
    case 'welcome':
      return {
        type: m.type,
        version: m.version,
        worker_id: m.workerId,
        heartbeat_ms: m.heartbeatMs,
        idle_timeout_ms: m.idleTimeoutMs,
        encoding: m.encoding,
        credit: m.credit,
        ...(m.peer ? { peer: { path: m.peer.path, key: m.peer.key, id: m.peer.id, token: m.peer.token } } : {}),
      };
    case 'assign':
      return {
        type: m.type,
        assignment_id: m.assignmentId,
        model: m.model,
        layer: m.layer,
        experts: m.experts,
        n_embd: m.nEmbd,
        n_expert: m.nExpert,
        numerics: m.numerics,
        shard_url: m.shardUrl,
        shard_bytes: m.shardBytes,
        shard_digest: m.shardDigest,
        ...(m.peers ? { peers: m.peers } : {}),
        ...(m.chunksUrl ? { chunks_url: m.chunksUrl } : {}),
      };
    case 'release':
      return { type: m.type, assignment_id: m.assignmentId, code: m.code, reason: sentence(m.reason, L.maxMessageChars) };
    case 'credit':
      return { type: m.type, credit: m.credit };
    default:
      return { type: m.type, id: m.id };
  }
}

/**
 * The JSON text of a client message. It is parsed back before it is returned, so a client never sends what the hub
 * would refuse: an invalid message throws VolunteerWireError here instead (control messages are small and rare).
 */
export function encodeClientMessage(m: ClientMessage): string {
  const text = JSON.stringify(wireClient(m));
  parseClientMessage(text);
  return text;
}

/** The JSON text of a hub message, checked like encodeClientMessage. */
export function encodeHubMessage(m: HubMessage): string {
  const text = JSON.stringify(wireHub(m));
  parseHubMessage(text);
  return text;
}

// ---------------------------------------------------------------------------------------------------- benchmark aid

/** Bytes of a WebSocket frame header for a payload; client → server frames add a 4-byte mask (RFC 6455 §5.2). */
export function wsFrameOverhead(payloadBytes: number, fromClient: boolean): number {
  const len = payloadBytes <= 125 ? 2 : payloadBytes <= 0xffff ? 4 : 10;
  return len + (fromClient ? 4 : 0);
}

export interface WireCostInput {
  nEmbd: number;
  /** Experts each token is routed to. */
  topK: number;
  rowEncoding: WireEncoding;
  resultEncoding: WireEncoding;
  /** Tokens batched in one frame (1 when decoding one token at a time). */
  tokensPerFrame?: number;
  /** Workers a token's experts are spread over: each gets the row once and returns one sum row. */
  workersPerToken?: number;
}

/**
 * Bytes on the wire per token per MoE layer, both directions, counting our frame headers and WebSocket framing (not
 * TCP/IP or TLS). n_embd 2048, top-8, one worker: f32 16,524 B; f16 rows and sums 8,332 B.
 */
export function wireBytesPerToken(c: WireCostInput): { work: number; result: number; total: number } {
  const tpf = c.tokensPerFrame ?? 1;
  const w = c.workersPerToken ?? 1;
  const workFrame = WIRE_HEADER_BYTES + WIRE_PAIR_BYTES * Math.ceil((tpf * c.topK) / w) + tpf * c.nEmbd * elemBytes(c.rowEncoding);
  const resultFrame = WIRE_HEADER_BYTES + tpf * c.nEmbd * elemBytes(c.resultEncoding);
  const work = (w * (workFrame + wsFrameOverhead(workFrame, false))) / tpf;
  const result = (w * (resultFrame + wsFrameOverhead(resultFrame, true))) / tpf;
  return { work, result, total: work + result };
}
