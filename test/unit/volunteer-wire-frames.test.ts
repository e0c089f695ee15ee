import { test } from 'node:test';
import assert from 'node:assert/strict';
import { f16ToF32, f32ToF16 } from '../../gguf/half.ts';
import {
  type CloseName,
  type ResultExpectation,
  VOLUNTEER_LIMITS,
  WIRE_HEADER_BYTES,
  type WorkInput,
  decodeResult,
  decodeWork,
  decodeWorkFailed,
  encodeResult,
  encodeWork,
  encodeWorkFailed,
  f16ArrayToF32,
  f32ArrayToF16,
  maxRowsPerFrame,
  peekFrame,
} from '../../protocol/channel/index.ts';
import { throwsCode } from '../../harness/wire-asserts.ts';

function work(over: Partial<WorkInput> = {}): WorkInput {
  const nRows = over.nRows ?? 3;
  const nEmbd = over.nEmbd ?? 5;
  return {
    workId: 0xfffffffe,
    assignmentId: 9,
    nRows,
    nEmbd,
    rows: over.rows ?? Float32Array.from({ length: nRows * nEmbd }, (_, i) => (i - 7) * 0.375),
    rowIndex: Uint16Array.from([0, 0, 1, 2, 2]),
    localExpert: Uint16Array.from([0, 3, 1, 2, 3]),
    weight: Float32Array.from([0.5, 0.25, 1, -0.125, 1e-3]),
    rowEncoding: 'f32',
    resultEncoding: 'f16',
    ...over,
  };
}

test('work frames round-trip in f32 and f16, picked from source rows, from unaligned bytes too', () => {
  const w = work();
  const bytes = encodeWork(w);
  assert.equal(bytes.length, WIRE_HEADER_BYTES + 8 * 5 + 4 * 15);
  assert.deepEqual(peekFrame(bytes), { kind: 'work', workId: 0xfffffffe });
  const d = decodeWork(bytes, { sliceWidth: 4 });
  assert.deepEqual(
    { ...d, rows: [...d.rows], rowIndex: [...d.rowIndex], localExpert: [...d.localExpert], weight: [...d.weight] },
    {
      workId: w.workId,
      assignmentId: 9,
      nRows: 3,
      nEmbd: 5,
      nPairs: 5,
      rowEncoding: 'f32',
      resultEncoding: 'f16',
      rows: [...w.rows],
      rowIndex: [...w.rowIndex],
      localExpert: [...w.localExpert],
      weight: [...w.weight],
    },
  );

  // f16 rows: values that f16 holds exactly come back exactly, in half the row bytes.
  const h = encodeWork({ ...w, rowEncoding: 'f16' });
  assert.equal(h.length, WIRE_HEADER_BYTES + 8 * 5 + 2 * 15);
  const dh = decodeWork(h);
  assert.equal(dh.rowEncoding, 'f16');
  assert.deepEqual([...dh.rows], [...w.rows]);

  // rowSource: frame row i is source row rowSource[i] of a larger array.
  const source = Float32Array.from({ length: 10 * 5 }, (_, i) => i);
  const picked = decodeWork(encodeWork({ ...w, rows: source, rowSource: [7, 2, 9] }));
  assert.deepEqual([...picked.rows], [35, 36, 37, 38, 39, 10, 11, 12, 13, 14, 45, 46, 47, 48, 49]);
  throwsCode(() => encodeWork({ ...w, rows: source, rowSource: [7, 2, 10] }), 'BAD_FRAME', 'rowSource past the end');

  // A ws Buffer may start at any offset of a larger allocation: the decoder copies then, and still decodes.
  const shifted = new Uint8Array(bytes.length + 1);
  shifted.set(bytes, 1);
  assert.deepEqual([...decodeWork(shifted.subarray(1)).rows], [...w.rows]);
  // A browser WebSocket with binaryType 'arraybuffer' delivers an ArrayBuffer.
  assert.equal(decodeWork(bytes.buffer as ArrayBuffer).workId, w.workId);
});

test('results round-trip; f16 results fall back to f32 when a sum overflows f16; work_failed round-trips', () => {
  const sums = Float32Array.from({ length: 2 * 4 }, (_, i) => i * 0.5 - 1);
  const r32 = encodeResult({ workId: 3, nRows: 2, nEmbd: 4, sums, encoding: 'f32', computeUs: 1500.4 });
  assert.equal(r32.length, WIRE_HEADER_BYTES + 32);
  assert.deepEqual(peekFrame(r32), { kind: 'result', workId: 3 });
  const d32 = decodeResult(r32, { workId: 3, nRows: 2, nEmbd: 4, encoding: 'f32' });
  assert.deepEqual({ ...d32, sums: [...d32.sums] }, { workId: 3, nRows: 2, nEmbd: 4, encoding: 'f32', computeUs: 1500, sums: [...sums] });

  const r16 = encodeResult({ workId: 4, nRows: 2, nEmbd: 4, sums, encoding: 'f16' });
  assert.equal(r16.length, WIRE_HEADER_BYTES + 16);
  const d16 = decodeResult(r16, { nRows: 2, nEmbd: 4, encoding: 'f16' });
  assert.equal(d16.encoding, 'f16');
  assert.equal(d16.computeUs, 0);
  assert.deepEqual([...d16.sums], [...sums]);

  const big = Float32Array.from([1, 2, 70_000, 4]);
  const esc = encodeResult({ workId: 5, nRows: 1, nEmbd: 4, sums: big, encoding: 'f16' });
  const dEsc = decodeResult(esc, { workId: 5, nRows: 1, nEmbd: 4, encoding: 'f16' });
  assert.equal(dEsc.encoding, 'f32');
  assert.deepEqual([...dEsc.sums], [1, 2, 70_000, 4]);
  throwsCode(
    () => encodeResult({ workId: 5, nRows: 1, nEmbd: 4, sums: Float32Array.from([1, Number.NaN, 3, 4]), encoding: 'f32' }),
    'BAD_FRAME',
    'NaN sum',
  );

  const f = encodeWorkFailed({ workId: 11, code: 'DEVICE_LOST', message: 'GPU device lost — réessai' });
  assert.deepEqual(peekFrame(f), { kind: 'work_failed', workId: 11 });
  assert.deepEqual(decodeWorkFailed(f), { workId: 11, code: 'DEVICE_LOST', message: 'GPU device lost — réessai' });
  // Over-long messages are cut at a character boundary, within the cap.
  const long = decodeWorkFailed(encodeWorkFailed({ workId: 1, code: 'COMPUTE_ERROR', message: 'é'.repeat(300) }));
  assert.equal(long.message, 'é'.repeat(128));
});

// ------------------------------------------------------------------------------------------------ f16

test('f16 encoding: known values, ties to even, subnormals, overflow; identical to gguf/half.ts', () => {
  const cases: Array<[number, number]> = [
    [0, 0x0000],
    [-0, 0x8000],
    [1, 0x3c00],
    [-2, 0xc000],
    [0.1, 0x2e66],
    [1 / 3, 0x3555],
    [65504, 0x7bff],
    [65519.99, 0x7bff],
    [65520, 0x7c00], // halfway to 65536: ties to even → Inf
    [2 ** -14, 0x0400], // smallest normal
    [2 ** -14 - 2 ** -25, 0x0400], // rounds up into the normals
    [2 ** -24, 0x0001], // smallest subnormal
    [1023 * 2 ** -24, 0x03ff], // largest subnormal
    [2 ** -25, 0x0000], // tie between 0 and 2^-24 → even (0)
    [1.5 * 2 ** -25, 0x0001],
    [1.5 * 2 ** -24, 0x0002], // tie → even
    [2.5 * 2 ** -24, 0x0002], // tie → even
    [1 + 2 ** -11, 0x3c00], // tie → even
    [1 + 3 * 2 ** -11, 0x3c02], // tie → even (up)
    [2 ** -26, 0x0000],
    [Number.POSITIVE_INFINITY, 0x7c00],
    [Number.NEGATIVE_INFINITY, 0xfc00],
    [Number.NaN, 0x7e00],
  ];
  const src = Float32Array.from(cases.map(([x]) => x));
  const dst = new Uint16Array(src.length);
  assert.equal(f32ArrayToF16(src, dst), false, 'Inf, NaN and 65520 are reported as not finite');
  for (const [i, [x, bits]] of cases.entries()) assert.equal(dst[i], bits, `f16(${x})`);
  const finite = Float32Array.from(cases.slice(0, 8).map(([x]) => x));
  assert.equal(f32ArrayToF16(finite, new Uint16Array(finite.length)), true);

  // Bit-identical to half.ts over every float32 exponent that can reach f16, with sampled mantissas, and random bits.
  const bits: number[] = [];
  for (let e = 100; e <= 145; e++) {
    for (let m = 0; m < 1 << 23; m += 997) bits.push((e << 23) | m, ((e << 23) | m | 0x80000000) >>> 0);
    for (const m of [0, 1, 0xfff, 0x1000, 0x1001, 0x2fff, 0x3000, 0x7fffff]) bits.push((e << 23) | m);
  }
  for (let i = 0; i < 100_000; i++) bits.push(Math.floor(Math.random() * 2 ** 32));
  const f = new Float32Array(Uint32Array.from(bits).buffer);
  const out = new Uint16Array(f.length);
  f32ArrayToF16(f, out);
  for (let i = 0; i < f.length; i++) {
    if (out[i] !== f32ToF16(f[i]!)) assert.fail(`bits 0x${bits[i]!.toString(16)}: ${out[i]} vs half.ts ${f32ToF16(f[i]!)}`);
  }
});

test('f16 decoding: every bit pattern as half.ts decodes it; Inf and NaN reported', () => {
  const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
  const out = new Float32Array(65536);
  assert.equal(f16ArrayToF32(all, out), false);
  for (let h = 0; h < 65536; h++) {
    const want = f16ToF32(h);
    if (!(Object.is(out[h], want) || (Number.isNaN(want) && Number.isNaN(out[h])))) assert.fail(`0x${h.toString(16)}`);
  }
  assert.equal(out[0x0001], 2 ** -24);
  assert.equal(out[0x03ff], 1023 * 2 ** -24);
  const finite = Uint16Array.from([0x0000, 0x8001, 0x3c00, 0x7bff, 0xfbff]);
  assert.equal(f16ArrayToF32(finite, new Float32Array(5)), true);
  for (const bad of [0x7c00, 0xfc00, 0x7e00, 0x7c01]) assert.equal(f16ArrayToF32(Uint16Array.of(1, bad), new Float32Array(2)), false);
});

// ------------------------------------------------------------------------------------------------ malformed binary

/** A copy of `bytes` with a little-endian integer written at `offset`. */
function patch(bytes: Uint8Array, offset: number, value: number, size: 1 | 2 | 4): Uint8Array {
  const b = bytes.slice();
  const v = new DataView(b.buffer);
  if (size === 1) v.setUint8(offset, value);
  else if (size === 2) v.setUint16(offset, value, true);
  else v.setUint32(offset, value, true);
  return b;
}

test('malformed work frames get their exact close codes', () => {
  const good = encodeWork(work());
  const weights = WIRE_HEADER_BYTES;
  const rowIdx = weights + 4 * 5;
  const experts = rowIdx + 2 * 5;
  const rowsAt = experts + 2 * 5;
  const f16 = encodeWork(work({ rowEncoding: 'f16' }));
  const float = (b: Uint8Array, at: number, x: number): Uint8Array => {
    const c = b.slice();
    new DataView(c.buffer).setFloat32(at, x, true);
    return c;
  };
  const table: Array<[string, Uint8Array, CloseName, number?]> = [
    ['empty', new Uint8Array(0), 'BAD_FRAME'],
    ['shorter than the header', good.subarray(0, 20), 'BAD_FRAME'],
    ['truncated body', good.subarray(0, good.length - 2), 'BAD_FRAME'],
    ['one byte extra', Uint8Array.of(...good, 0), 'BAD_FRAME'],
    ['wrong magic', patch(good, 0, 0x50445845, 4), 'BAD_FRAME'],
    ['version 2', patch(good, 4, 2, 2), 'UNSUPPORTED_VERSION'],
    ['version 0', patch(good, 4, 0, 2), 'UNSUPPORTED_VERSION'],
    ['unknown kind', patch(good, 6, 9, 2), 'BAD_FRAME'],
    [
      'a result where work was expected',
      encodeResult({ workId: 1, nRows: 1, nEmbd: 1, sums: Float32Array.of(1), encoding: 'f32' }),
      'BAD_FRAME',
    ],
    ['assignment id 0', patch(good, 12, 0, 4), 'BAD_FRAME'],
    ['n_rows 0', patch(good, 16, 0, 4), 'BAD_FRAME'],
    ['n_rows over the cap', patch(good, 16, VOLUNTEER_LIMITS.maxRows + 1, 4), 'TOO_LARGE'],
    ['n_embd 0', patch(good, 20, 0, 4), 'BAD_FRAME'],
    ['n_embd over the cap', patch(good, 20, VOLUNTEER_LIMITS.maxEmbd + 1, 4), 'TOO_LARGE'],
    ['n_pairs 0', patch(good, 24, 0, 4), 'BAD_FRAME'],
    ['n_pairs over the cap', patch(good, 24, VOLUNTEER_LIMITS.maxPairs + 1, 4), 'TOO_LARGE'],
    ['rows that add up past the frame cap', patch(patch(good, 16, 8192, 4), 20, 65536, 4), 'TOO_LARGE'],
    ['n_rows one more than sent', patch(good, 16, 4, 4), 'BAD_FRAME'],
    ['n_pairs one fewer than sent', patch(good, 24, 4, 4), 'BAD_FRAME'],
    ['row encoding 0', patch(good, 28, 0, 1), 'BAD_FRAME'],
    ['result encoding 3', patch(good, 29, 3, 1), 'BAD_FRAME'],
    ['reserved byte set', patch(good, 31, 1, 1), 'BAD_FRAME'],
    ['row index = n_rows', patch(good, rowIdx + 2 * 4, 3, 2), 'BAD_FRAME'],
    ['local expert = slice width', patch(good, experts + 2, 4, 2), 'BAD_FRAME', 4],
    ['local expert past a narrower slice', good, 'BAD_FRAME', 3],
    ['weight NaN', float(good, weights + 4, Number.NaN), 'BAD_FRAME'],
    ['weight +Inf', float(good, weights, Number.POSITIVE_INFINITY), 'BAD_FRAME'],
    ['weight -Inf', float(good, weights + 16, Number.NEGATIVE_INFINITY), 'BAD_FRAME'],
    ['f32 row value Inf', float(good, rowsAt + 4 * 14, Number.POSITIVE_INFINITY), 'BAD_FRAME'],
    ['f16 row value Inf', patch(f16, rowsAt + 2 * 3, 0x7c00, 2), 'BAD_FRAME'],
    ['f16 row value NaN', patch(f16, rowsAt, 0xfe00, 2), 'BAD_FRAME'],
  ];
  for (const [label, bytes, code, sliceWidth] of table) {
    throwsCode(() => decodeWork(bytes, sliceWidth === undefined ? {} : { sliceWidth }), code, label);
  }
  // Over the frame cap is refused before the header is read.
  throwsCode(() => decodeWork(new Uint8Array(VOLUNTEER_LIMITS.maxFrameBytes + 1)), 'TOO_LARGE', 'frame over the cap');
  throwsCode(() => peekFrame(patch(good, 4, 3, 2)), 'UNSUPPORTED_VERSION', 'peek checks the version');
  // The untouched frame passes, so each row above fails for its own reason.
  assert.equal(decodeWork(good, { sliceWidth: 4 }).nPairs, 5);
});

test('encodeWork refuses what decodeWork would refuse', () => {
  throwsCode(() => encodeWork(work({ nRows: 0, rows: new Float32Array(0) })), 'BAD_FRAME', 'no rows');
  throwsCode(() => encodeWork(work({ nRows: 9000, rows: new Float32Array(9000 * 5) })), 'TOO_LARGE', 'too many rows');
  throwsCode(() => encodeWork(work({ rowIndex: Uint16Array.from([0, 0, 1, 2, 3]) })), 'BAD_FRAME', 'row index = n_rows');
  throwsCode(() => encodeWork(work({ weight: Float32Array.from([0.5, 0.25, Number.NaN, 1, 1]) })), 'BAD_FRAME', 'NaN weight');
  throwsCode(() => encodeWork(work({ rowIndex: Uint16Array.from([0, 1]) })), 'BAD_FRAME', 'pair arrays disagree');
  throwsCode(() => encodeWork(work({ rows: new Float32Array(14) })), 'BAD_FRAME', 'rows short');
  throwsCode(() => encodeWork(work({ assignmentId: 0 })), 'BAD_FRAME', 'assignment 0');
  const rows = work().rows.slice();
  rows[3] = 1e6; // beyond f16
  throwsCode(() => encodeWork(work({ rows, rowEncoding: 'f16' })), 'BAD_FRAME', 'row beyond f16');
  rows[3] = Number.POSITIVE_INFINITY;
  throwsCode(() => encodeWork(work({ rows })), 'BAD_FRAME', 'Inf row');
  throwsCode(() => encodeWork(work({ nEmbd: 65536, nRows: 300, rows: new Float32Array(1) })), 'TOO_LARGE', 'frame over the cap');
  // (64 MiB − 32) / (2048·4 + 8·8) rows fit; f16 halves the rows and the row cap binds.
  assert.equal(maxRowsPerFrame(2048, 'f32', 8), 8128);
  assert.equal(maxRowsPerFrame(2048, 'f16', 8), 8192);
  assert.equal(maxRowsPerFrame(65536, 'f32', 8), 255);
  assert.equal(maxRowsPerFrame(64, 'f16', 64), 8192);
});

test('malformed results and work_failed frames get their exact close codes', () => {
  const expect: ResultExpectation = { workId: 3, nRows: 2, nEmbd: 4, encoding: 'f32' };
  const sums = Float32Array.from({ length: 8 }, (_, i) => i);
  const good = encodeResult({ workId: 3, nRows: 2, nEmbd: 4, sums, encoding: 'f32' });
  const good16 = encodeResult({ workId: 3, nRows: 2, nEmbd: 4, sums, encoding: 'f16' });
  const sumNaN = good.slice();
  new DataView(sumNaN.buffer).setFloat32(WIRE_HEADER_BYTES + 4 * 5, Number.NaN, true);
  const sumInf = good.slice();
  new DataView(sumInf.buffer).setFloat32(WIRE_HEADER_BYTES, Number.NEGATIVE_INFINITY, true);
  const table: Array<[string, Uint8Array, CloseName, Partial<ResultExpectation>?]> = [
    ['truncated', good.subarray(0, good.length - 4), 'BAD_FRAME'],
    ['wrong magic', patch(good, 1, 0, 1), 'BAD_FRAME'],
    ['version 9', patch(good, 4, 9, 2), 'UNSUPPORTED_VERSION'],
    ['a work frame where a result was expected', encodeWork(work()), 'BAD_FRAME'],
    ['another work id', good, 'BAD_FRAME', { workId: 4 }],
    ['n_rows other than sent', good, 'BAD_FRAME', { nRows: 3 }],
    ['n_embd other than sent', good, 'BAD_FRAME', { nEmbd: 2 }],
    ['n_rows over the cap', patch(good, 12, 8193, 4), 'TOO_LARGE'],
    ['n_embd 0', patch(good, 16, 0, 4), 'BAD_FRAME'],
    ['f16 when f32 was asked', good16, 'BAD_FRAME'],
    ['encoding 7', patch(good, 24, 7, 1), 'BAD_FRAME'],
    ['reserved byte set', patch(good, 27, 1, 1), 'BAD_FRAME'],
    ['f32 sum NaN', sumNaN, 'BAD_FRAME'],
    ['f32 sum -Inf', sumInf, 'BAD_FRAME'],
    ['f16 sum +Inf', patch(good16, WIRE_HEADER_BYTES + 2, 0x7c00, 2), 'BAD_FRAME', { encoding: 'f16' }],
    ['f16 sum NaN', patch(good16, WIRE_HEADER_BYTES + 14, 0x7e00, 2), 'BAD_FRAME', { encoding: 'f16' }],
    ['f16 bytes with an f32 size', patch(good, 24, 2, 1), 'BAD_FRAME', { encoding: 'f16' }],
  ];
  for (const [label, bytes, code, over] of table) throwsCode(() => decodeResult(bytes, { ...expect, ...over }), code, label);
  assert.equal(decodeResult(good16, { ...expect, encoding: 'f16' }).sums[7], 7);

  const failed = encodeWorkFailed({ workId: 2, code: 'PAUSED', message: 'paused' });
  const invalidUtf8 = Uint8Array.of(
    ...patch(failed, 14, 8, 2).subarray(0, WIRE_HEADER_BYTES),
    0x70,
    0x61,
    0xc3,
    0x28,
    0x75,
    0x73,
    0x65,
    0x64,
  );
  const withNewline = Uint8Array.of(...failed.subarray(0, WIRE_HEADER_BYTES), ...new TextEncoder().encode('pause\n'));
  const failures: Array<[string, Uint8Array, CloseName]> = [
    ['unknown code', patch(failed, 12, 99, 2), 'BAD_FRAME'],
    ['message length over the cap', patch(failed, 14, 300, 2), 'TOO_LARGE'],
    ['message length other than sent', patch(failed, 14, 5, 2), 'BAD_FRAME'],
    ['reserved byte set', patch(failed, 20, 1, 1), 'BAD_FRAME'],
    ['message not UTF-8', invalidUtf8, 'BAD_FRAME'],
    ['message with a control character', withNewline, 'BAD_FRAME'],
  ];
  for (const [label, bytes, code] of failures) throwsCode(() => decodeWorkFailed(bytes), code, label);
});
