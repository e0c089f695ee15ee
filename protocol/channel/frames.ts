/**
 * The binary frames of the volunteer channel: work (rows and (row, expert) pairs, hub → volunteer), result (sums,
 * volunteer → hub) and work_failed. Every decoder checks the 32-byte header, sizes and finiteness, and throws
 * VolunteerWireError; every encoder checks what it writes, so neither end can send what the other refuses.
 */
import { VolunteerWireError, badFrame, tooLarge } from './close-codes.ts';
import {
  ENCODING_WIRE,
  f16ArrayToF32,
  f32ArrayToF16,
  elemBytes,
  encodingFromWire,
  firstNonFinite,
  type WireEncoding,
} from './encodings.ts';
import { VOLUNTEER_LIMITS, WIRE_HEADER_BYTES, WIRE_MAGIC, WIRE_PAIR_BYTES, VOLUNTEER_WIRE_VERSION } from './limits.ts';
import { CONTROL_CHARS, fatalUtf8, sentence, utf8 } from './text.ts';

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
  /** Per pair: the frame row (< nRows); written as u16 (the hub's plan holds them as u32). */
  rowIndex: Uint16Array | Uint32Array;
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
 * Decodes and checks a work frame. `sliceWidth` (the assignment's end − begin, or the width of the frame's assignment
 * among those a volunteer holds) bounds the local expert ids; without it (or for an assignment it does not know) any
 * u16 passes.
 */
export function decodeWork(
  data: WireBytes,
  opts: { sliceWidth?: number | ((assignmentId: number) => number | undefined) } = {},
): WorkFrame {
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
  const width = (typeof opts.sliceWidth === 'function' ? opts.sliceWidth(assignmentId) : opts.sliceWidth) ?? 0x10000;
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
