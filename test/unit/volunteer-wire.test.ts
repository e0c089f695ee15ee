import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path/posix';
import { TOKEN_MAX_CHARS } from '../../hub/auth/tokens.ts';
import {
  DEVICE_BYTES_MAX,
  EXPERTS_MAX,
  HELD_RANGES_MAX,
  LAYERS_MAX,
  MODEL_NAME_MAX_CHARS,
  OFFER_EXPERTS_MAX,
  WORKER_ID_MAX_CHARS,
} from '../../hub/limits.ts';
import { f16ToF32, f32ToF16 } from '../../gguf/half.ts';
import {
  CLOSE_CODES,
  type ClientMessage,
  type CloseName,
  type HubMessage,
  type ResultExpectation,
  VOLUNTEER_LIMITS,
  VolunteerWireError,
  WIRE_HEADER_BYTES,
  type WorkInput,
  closeName,
  closeReason,
  decodeResult,
  decodeWork,
  decodeWorkFailed,
  encodeClientMessage,
  encodeHubMessage,
  encodeResult,
  encodeWork,
  encodeWorkFailed,
  f16ArrayToF32,
  f32ArrayToF16,
  maxRowsPerFrame,
  parseClientMessage,
  parseHubMessage,
  peekFrame,
  wireBytesPerToken,
} from '../../protocol/channel/index.ts';

function throwsCode(fn: () => unknown, name: CloseName, label: string): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof VolunteerWireError, `${label}: threw ${String(e)}`);
    assert.equal(e.code, name, `${label}: ${e.message}`);
    assert.equal(e.closeCode, CLOSE_CODES[name].code);
    return true;
  });
}

const HELLO: ClientMessage = {
  type: 'hello',
  version: 1,
  token: 'v1.eyJ3IjoiQSIsImV4cCI6MX0.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ',
  workerId: 'tab-7f3a.2:x_y',
  device: {
    webgpu: true,
    adapter: { vendor: 'nvidia', architecture: 'hopper', description: 'NVIDIA H200 — ünïcode', isFallbackAdapter: false },
    limits: { maxStorageBufferBindingSize: 2 ** 31, maxBufferSize: 2 ** 40 },
    features: ['shader-f16', 'timestamp-query', 'chromium-experimental_subgroups'],
    backend: 'webgpu',
    gflops: 1234.5,
    memoryBudgetBytes: 2 ** 33,
  },
  numerics: ['exact', 'llama'],
  encodings: ['f32', 'f16'],
  model: 'qwen3-30b',
  maxExperts: 64,
  agent: 'page/0.1.0 Chrome/131',
};

const CLIENT_MESSAGES: ClientMessage[] = [
  HELLO,
  {
    ...HELLO,
    device: {
      webgpu: false,
      adapter: null,
      limits: null,
      features: [],
      backend: null,
      gflops: null,
      memoryBudgetBytes: 0,
    },
    numerics: ['exact'],
    encodings: ['f32'],
    model: '',
    maxExperts: 0,
    agent: '',
  },
  { type: 'loaded', assignmentId: 42, ready: true, backend: 'wasm', gflops: 3.25 },
  { type: 'load_failed', assignmentId: 0xffffffff, code: 'DIGEST_MISMATCH', message: 'sha256 of the body differs' },
  {
    type: 'heartbeat',
    model: 'qwen3-30b',
    coverage: [
      [1, 0, 64],
      [3, 64, 128],
    ],
    paused: false,
    stats: { pairsServed: 123456789, queueDepth: 2 },
  },
  { type: 'heartbeat', model: '', coverage: [], paused: true, stats: { pairsServed: 0, queueDepth: 0 } },
  { type: 'pause' },
  { type: 'resume' },
  { type: 'leave' },
  { type: 'ping', id: 0 },
  { type: 'pong', id: 0xffffffff },
];

const ASSIGN: HubMessage = {
  type: 'assign',
  assignmentId: 7,
  model: 'qwen3-30b',
  layer: 3,
  experts: [128, 192],
  nEmbd: 2048,
  nExpert: 256,
  numerics: 'llama',
  shardUrl: '/api/expert-shard?model=qwen3-30b&layer=3&expert_begin=128&expert_end=192',
  shardBytes: 123_456_789,
  shardDigest: `sha256:${'0123456789abcdef'.repeat(4)}`,
};

const HUB_MESSAGES: HubMessage[] = [
  { type: 'welcome', version: 1, workerId: 'tab-1', heartbeatMs: 15_000, idleTimeoutMs: 60_000, encoding: 'f16', credit: 99 },
  ASSIGN,
  { type: 'release', assignmentId: 7, code: 'NOT_NEEDED', reason: 'demand for layer 3 fell back' },
  { type: 'credit', credit: 2 ** 40 },
  { type: 'ping', id: 5 },
  { type: 'pong', id: 6 },
];

test('every control message round-trips through its JSON text, as a string and as bytes', () => {
  for (const m of CLIENT_MESSAGES) {
    const text = encodeClientMessage(m);
    assert.deepEqual(parseClientMessage(text), m, text);
    assert.deepEqual(parseClientMessage(new TextEncoder().encode(text)), m);
  }
  for (const m of HUB_MESSAGES) {
    const text = encodeHubMessage(m);
    assert.deepEqual(parseHubMessage(text), m, text);
    assert.deepEqual(parseHubMessage(new TextEncoder().encode(text)), m);
  }
  // The wire names are snake_case, as in the HTTP API.
  assert.match(encodeClientMessage(HELLO), /"worker_id":"tab-7f3a.2:x_y".*"max_storage_buffer_binding_size"/);
  assert.match(encodeHubMessage(ASSIGN), /"assignment_id":7,.*"shard_digest":"sha256:/);
});

test('unknown fields are ignored, unknown capability entries dropped, absent optional fields defaulted', () => {
  const o = JSON.parse(encodeClientMessage(HELLO));
  o.future = { anything: [1, 2, 3] };
  o.device.future = 'x';
  o.numerics = ['quantum', 'llama', 'llama'];
  o.encodings = ['bf16', 'f32'];
  delete o.model;
  delete o.max_experts;
  delete o.agent;
  delete o.device.gflops;
  o.device.backend = null;
  const h = parseClientMessage(JSON.stringify(o));
  assert.equal(h.type, 'hello');
  if (h.type !== 'hello') return;
  assert.deepEqual(h.numerics, ['llama']);
  assert.deepEqual(h.encodings, ['f32']);
  assert.equal(h.model, '');
  assert.equal(h.maxExperts, 0);
  assert.equal(h.agent, '');
  assert.equal(h.device.gflops, null);
  assert.equal(h.device.backend, null);
  assert.equal(Object.hasOwn(h, 'future'), false);
  const w = JSON.parse(encodeHubMessage(ASSIGN));
  w.hint = 'later versions may say more';
  assert.deepEqual(parseHubMessage(JSON.stringify(w)), ASSIGN);
});

test('encoders refuse what the other side would refuse, but clean human sentences instead of refusing them', () => {
  const err = `TypeError: device lost\n    at compute (engine.ts:1)\t${'x'.repeat(600)}`;
  const lf = parseClientMessage(encodeClientMessage({ type: 'load_failed', assignmentId: 1, code: 'ENGINE_FAILED', message: err }));
  assert.ok(lf.type === 'load_failed' && lf.message.length === 512 && lf.message.startsWith('TypeError: device lost     at compute'));
  const rel = parseHubMessage(encodeHubMessage({ type: 'release', assignmentId: 1, code: 'REBALANCE', reason: 'a\r\nb' }));
  assert.ok(rel.type === 'release' && rel.reason === 'a b');
  assert.equal(decodeWorkFailed(encodeWorkFailed({ workId: 1, code: 'COMPUTE_ERROR', message: 'x\ny' })).message, 'x y');

  throwsCode(() => encodeClientMessage({ ...HELLO, workerId: 'has space' }), 'BAD_FRAME', 'worker id with a space');
  throwsCode(() => encodeClientMessage({ type: 'ping', id: -1 }), 'BAD_FRAME', 'negative ping id');
  throwsCode(() => encodeHubMessage({ ...ASSIGN, shardUrl: 'https://elsewhere.example/x' } as HubMessage), 'BAD_FRAME', 'full URL');
  throwsCode(() => encodeHubMessage({ ...ASSIGN, nEmbd: 70_000 } as HubMessage), 'TOO_LARGE', 'n_embd over the cap');
});

// ------------------------------------------------------------------------------------------------ binary frames

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

// ------------------------------------------------------------------------------------------------ malformed text

// biome-ignore lint/suspicious/noExplicitAny: the edits write deliberately wrong types into a message's JSON
type Wire = Record<string, any>;
const wireOf = (m: ClientMessage | HubMessage, hub = false): Wire =>
  JSON.parse(hub ? encodeHubMessage(m as HubMessage) : encodeClientMessage(m as ClientMessage));
const edited = (m: ClientMessage | HubMessage, edit: (o: Wire) => void, hub = false): string => {
  const o = wireOf(m, hub);
  edit(o);
  return JSON.stringify(o);
};

test('malformed client messages get their exact close codes', () => {
  const hb = CLIENT_MESSAGES[4]!;
  const loaded = CLIENT_MESSAGES[2]!;
  const failed = CLIENT_MESSAGES[3]!;
  const h = (edit: (o: Wire) => void): string => edited(HELLO, edit);
  const table: Array<[string, string | Uint8Array, CloseName]> = [
    ['not JSON', '{"type":"hello",', 'BAD_FRAME'],
    ['empty text', '', 'BAD_FRAME'],
    ['a JSON array', '[{"type":"pause"}]', 'BAD_FRAME'],
    ['JSON null', 'null', 'BAD_FRAME'],
    ['a JSON string', '"pause"', 'BAD_FRAME'],
    ['no type', '{"id":1}', 'BAD_FRAME'],
    ['unknown type', '{"type":"gimme"}', 'BAD_FRAME'],
    ['type of another case', '{"type":"PAUSE"}', 'BAD_FRAME'],
    ['a hub message', encodeHubMessage(ASSIGN), 'BAD_FRAME'],
    ['text over the cap', `{"type":"pause","pad":"${'x'.repeat(VOLUNTEER_LIMITS.maxTextBytes)}"}`, 'TOO_LARGE'],
    ['multi-byte text over the cap', `{"type":"pause","pad":"${'€'.repeat(6000)}"}`, 'TOO_LARGE'],
    ['bytes over the cap', new Uint8Array(VOLUNTEER_LIMITS.maxTextBytes + 1).fill(0x20), 'TOO_LARGE'],
    ['bytes not UTF-8', Uint8Array.of(0x7b, 0x22, 0xff, 0x22, 0x7d), 'BAD_FRAME'],
    ['hello version 2', h((o) => (o.version = 2)), 'UNSUPPORTED_VERSION'],
    ['hello version 0', h((o) => (o.version = 0)), 'UNSUPPORTED_VERSION'],
    ['hello version as text', h((o) => (o.version = '1')), 'BAD_FRAME'],
    ['hello without version', h((o) => delete o.version), 'BAD_FRAME'],
    ['hello v2 with another shape is refused by version, not shape', '{"type":"hello","version":2,"auth":{}}', 'UNSUPPORTED_VERSION'],
    ['hello without token', h((o) => delete o.token), 'BAD_TOKEN'],
    ['hello with an empty token', h((o) => (o.token = '')), 'BAD_TOKEN'],
    ['hello with a number token', h((o) => (o.token = 5)), 'BAD_TOKEN'],
    ['hello with an over-long token', h((o) => (o.token = 'x'.repeat(TOKEN_MAX_CHARS + 1))), 'BAD_TOKEN'],
    ['hello with a token holding a space', h((o) => (o.token = 'v1.a b.c')), 'BAD_TOKEN'],
    ['worker id missing', h((o) => delete o.worker_id), 'BAD_FRAME'],
    ['worker id empty', h((o) => (o.worker_id = '')), 'BAD_FRAME'],
    ['worker id with a slash', h((o) => (o.worker_id = 'a/b')), 'BAD_FRAME'],
    ['worker id over-long', h((o) => (o.worker_id = 'w'.repeat(129))), 'TOO_LARGE'],
    ['device missing', h((o) => delete o.device), 'BAD_FRAME'],
    ['device an array', h((o) => (o.device = [])), 'BAD_FRAME'],
    ['webgpu missing', h((o) => delete o.device.webgpu), 'BAD_FRAME'],
    ['adapter a string', h((o) => (o.device.adapter = 'nvidia')), 'BAD_FRAME'],
    ['adapter description over-long', h((o) => (o.device.adapter.description = 'd'.repeat(257))), 'TOO_LARGE'],
    ['adapter vendor with a control character', h((o) => (o.device.adapter.vendor = 'nv\u0000')), 'BAD_FRAME'],
    ['is_fallback_adapter as text', h((o) => (o.device.adapter.is_fallback_adapter = 'no')), 'BAD_FRAME'],
    ['limit negative', h((o) => (o.device.limits.max_buffer_size = -1)), 'BAD_FRAME'],
    ['limit fractional', h((o) => (o.device.limits.max_buffer_size = 1.5)), 'BAD_FRAME'],
    ['limit as text', h((o) => (o.device.limits.max_storage_buffer_binding_size = '1024')), 'BAD_FRAME'],
    ['limit over the cap', h((o) => (o.device.limits.max_buffer_size = 2 ** 51)), 'TOO_LARGE'],
    ['limits missing a field', h((o) => delete o.device.limits.max_buffer_size), 'BAD_FRAME'],
    ['features not a list', h((o) => (o.device.features = 'shader-f16')), 'BAD_FRAME'],
    ['too many features', h((o) => (o.device.features = Array.from({ length: 65 }, (_, i) => `f${i}`))), 'TOO_LARGE'],
    ['feature not a name', h((o) => (o.device.features = ['Shader F16'])), 'BAD_FRAME'],
    ['feature over-long', h((o) => (o.device.features = ['f'.repeat(65)])), 'TOO_LARGE'],
    ['feature a number', h((o) => (o.device.features = [1])), 'BAD_FRAME'],
    ['backend unknown', h((o) => (o.device.backend = 'cuda')), 'BAD_FRAME'],
    ['gflops negative', h((o) => (o.device.gflops = -1)), 'BAD_FRAME'],
    ['gflops over the cap', h((o) => (o.device.gflops = 1e8)), 'TOO_LARGE'],
    ['gflops Infinity (1e999)', h((o) => (o.device.gflops = 'INF')).replace('"INF"', '1e999'), 'BAD_FRAME'],
    ['memory budget as text', h((o) => (o.device.memory_budget_bytes = '8GB')), 'BAD_FRAME'],
    ['memory budget missing', h((o) => delete o.device.memory_budget_bytes), 'BAD_FRAME'],
    ['numerics none known', h((o) => (o.numerics = ['fast'])), 'BAD_FRAME'],
    ['numerics not a list', h((o) => (o.numerics = 'llama')), 'BAD_FRAME'],
    ['numerics holding a number', h((o) => (o.numerics = ['llama', 1])), 'BAD_FRAME'],
    ['numerics too many', h((o) => (o.numerics = Array(9).fill('exact'))), 'TOO_LARGE'],
    ['encodings without f32', h((o) => (o.encodings = ['f16'])), 'BAD_FRAME'],
    ['model over-long', h((o) => (o.model = 'm'.repeat(257))), 'TOO_LARGE'],
    ['model a number', h((o) => (o.model = 3)), 'BAD_FRAME'],
    ['max_experts negative', h((o) => (o.max_experts = -1)), 'BAD_FRAME'],
    ['max_experts over the cap', h((o) => (o.max_experts = 2 ** 21)), 'TOO_LARGE'],
    ['agent over-long', h((o) => (o.agent = 'a'.repeat(129))), 'TOO_LARGE'],
    ['loaded without assignment id', edited(loaded, (o) => delete o.assignment_id), 'BAD_FRAME'],
    ['loaded assignment id 0', edited(loaded, (o) => (o.assignment_id = 0)), 'BAD_FRAME'],
    ['loaded assignment id 2^32', edited(loaded, (o) => (o.assignment_id = 2 ** 32)), 'BAD_FRAME'],
    ['loaded ready as 1', edited(loaded, (o) => (o.ready = 1)), 'BAD_FRAME'],
    ['loaded backend null', edited(loaded, (o) => (o.backend = null)), 'BAD_FRAME'],
    ['load_failed unknown code', edited(failed, (o) => (o.code = 'OOPS')), 'BAD_FRAME'],
    ['load_failed message over-long', edited(failed, (o) => (o.message = 'm'.repeat(513))), 'TOO_LARGE'],
    ['load_failed message with a newline', edited(failed, (o) => (o.message = 'a\nb')), 'BAD_FRAME'],
    ['heartbeat coverage over the cap', edited(hb, (o) => (o.coverage = Array(257).fill([0, 0, 1]))), 'TOO_LARGE'],
    ['heartbeat empty range', edited(hb, (o) => (o.coverage = [[1, 5, 5]])), 'BAD_FRAME'],
    ['heartbeat range of two', edited(hb, (o) => (o.coverage = [[1, 5]])), 'BAD_FRAME'],
    ['heartbeat range negative', edited(hb, (o) => (o.coverage = [[1, -1, 5]])), 'BAD_FRAME'],
    ['heartbeat range fractional', edited(hb, (o) => (o.coverage = [[1, 0.5, 5]])), 'BAD_FRAME'],
    ['heartbeat layer over the cap', edited(hb, (o) => (o.coverage = [[4096, 0, 5]])), 'TOO_LARGE'],
    ['heartbeat end over the cap', edited(hb, (o) => (o.coverage = [[0, 0, 5000]])), 'TOO_LARGE'],
    ['heartbeat paused as 0', edited(hb, (o) => (o.paused = 0)), 'BAD_FRAME'],
    ['heartbeat without stats', edited(hb, (o) => delete o.stats), 'BAD_FRAME'],
    ['heartbeat queue depth over the cap', edited(hb, (o) => (o.stats.queue_depth = 1e7)), 'TOO_LARGE'],
    ['heartbeat pairs served unsafe', edited(hb, (o) => (o.stats.pairs_served = 2 ** 60)), 'BAD_FRAME'],
    ['ping without id', '{"type":"ping"}', 'BAD_FRAME'],
    ['pong id negative', '{"type":"pong","id":-1}', 'BAD_FRAME'],
  ];
  for (const [label, text, code] of table) throwsCode(() => parseClientMessage(text), code, label);
});

test('malformed hub messages get their exact close codes', () => {
  const welcome = HUB_MESSAGES[0]!;
  const release = HUB_MESSAGES[2]!;
  const a = (edit: (o: Wire) => void): string => edited(ASSIGN, edit, true);
  const table: Array<[string, string, CloseName]> = [
    ['not JSON', 'welcome', 'BAD_FRAME'],
    ['a client message', encodeClientMessage({ type: 'pause' }), 'BAD_FRAME'],
    ['welcome version 2', edited(welcome, (o) => (o.version = 2), true), 'UNSUPPORTED_VERSION'],
    ['welcome heartbeat under a second', edited(welcome, (o) => (o.heartbeat_ms = 10), true), 'BAD_FRAME'],
    ['welcome idle timeout below the heartbeat', edited(welcome, (o) => (o.idle_timeout_ms = 10_000), true), 'BAD_FRAME'],
    ['welcome encoding bf16', edited(welcome, (o) => (o.encoding = 'bf16'), true), 'BAD_FRAME'],
    ['welcome credit fractional', edited(welcome, (o) => (o.credit = 0.5), true), 'BAD_FRAME'],
    ['assign empty slice', a((o) => (o.experts = [5, 5])), 'BAD_FRAME'],
    ['assign slice past n_expert', a((o) => (o.experts = [0, 300])), 'BAD_FRAME'],
    ['assign slice of three', a((o) => (o.experts = [0, 1, 2])), 'TOO_LARGE'],
    ['assign slice as text', a((o) => (o.experts = ['0', '1'])), 'BAD_FRAME'],
    ['assign n_expert over the cap', a((o) => (o.n_expert = 5000)), 'TOO_LARGE'],
    ['assign n_embd over the cap', a((o) => (o.n_embd = 70_000)), 'TOO_LARGE'],
    ['assign n_embd 0', a((o) => (o.n_embd = 0)), 'BAD_FRAME'],
    ['assign layer over the cap', a((o) => (o.layer = 5000)), 'TOO_LARGE'],
    ['assign model empty', a((o) => (o.model = '')), 'BAD_FRAME'],
    ['assign numerics unknown', a((o) => (o.numerics = 'fast')), 'BAD_FRAME'],
    ['assign shard URL on another host', a((o) => (o.shard_url = 'https://elsewhere.example/x')), 'BAD_FRAME'],
    ['assign shard URL protocol-relative', a((o) => (o.shard_url = '//elsewhere.example/x')), 'BAD_FRAME'],
    ['assign shard URL with a backslash', a((o) => (o.shard_url = '/\\elsewhere.example/x')), 'BAD_FRAME'],
    ['assign shard URL with a space', a((o) => (o.shard_url = '/api/expert-shard?model=a b')), 'BAD_FRAME'],
    ['assign shard URL over-long', a((o) => (o.shard_url = `/${'x'.repeat(2048)}`)), 'TOO_LARGE'],
    ['assign shard bytes 0', a((o) => (o.shard_bytes = 0)), 'BAD_FRAME'],
    ['assign digest of another hash', a((o) => (o.shard_digest = `md5:${'0'.repeat(32)}`)), 'BAD_FRAME'],
    ['assign digest in upper case', a((o) => (o.shard_digest = `sha256:${'AB'.repeat(32)}`)), 'BAD_FRAME'],
    ['assign digest short', a((o) => (o.shard_digest = `sha256:${'a'.repeat(63)}`)), 'BAD_FRAME'],
    ['assign without assignment id', a((o) => delete o.assignment_id), 'BAD_FRAME'],
    ['release unknown code', edited(release, (o) => (o.code = 'BORED'), true), 'BAD_FRAME'],
    ['release reason over-long', edited(release, (o) => (o.reason = 'r'.repeat(513)), true), 'TOO_LARGE'],
    ['credit negative', '{"type":"credit","credit":-1}', 'BAD_FRAME'],
    ['credit as text', '{"type":"credit","credit":"5"}', 'BAD_FRAME'],
  ];
  for (const [label, text, code] of table) throwsCode(() => parseHubMessage(text), code, label);
});

// ------------------------------------------------------------------------------------------------ the rest

test('close codes: unique, in 4000–4999, frozen, each with a sentence and an action; reasons fit a close frame', () => {
  const names = Object.keys(CLOSE_CODES) as CloseName[];
  const codes = names.map((n) => CLOSE_CODES[n].code);
  assert.equal(new Set(codes).size, codes.length);
  for (const n of names) {
    const e = CLOSE_CODES[n];
    assert.ok(e.code >= 4000 && e.code <= 4999, n);
    assert.match(e.meaning, /^[A-Z].{20,}\.$/, n);
    assert.ok(['backoff', 'new-token', 'later', 'stop'].includes(e.then), n);
    assert.equal(closeName(e.code), n);
    assert.ok(Object.isFrozen(e));
  }
  for (const n of ['BAD_TOKEN', 'BAD_FRAME', 'UNSUPPORTED_VERSION', 'TOO_LARGE', 'OVER_CAPACITY'] as const) assert.ok(CLOSE_CODES[n]);
  assert.ok(Object.isFrozen(CLOSE_CODES) && Object.isFrozen(VOLUNTEER_LIMITS));
  assert.equal(closeName(1000), undefined);
  assert.equal(new VolunteerWireError('REPLACED', 'x').closeCode, 4006);

  assert.equal(closeReason('short'), 'short');
  for (const text of ['x'.repeat(500), '€'.repeat(100), `a${'😀'.repeat(60)}`]) {
    const r = closeReason(text);
    assert.ok(new TextEncoder().encode(r).length <= 123, text.slice(0, 5));
    assert.ok(r.endsWith('…') && !r.includes('\ufffd'));
  }
});

test('caps shared with the HTTP side have the same values', () => {
  assert.equal(VOLUNTEER_LIMITS.maxTokenChars, TOKEN_MAX_CHARS);
  assert.equal(VOLUNTEER_LIMITS.maxWorkerIdChars, WORKER_ID_MAX_CHARS);
  assert.equal(VOLUNTEER_LIMITS.maxModelChars, MODEL_NAME_MAX_CHARS);
  assert.equal(VOLUNTEER_LIMITS.maxDeviceBytes, DEVICE_BYTES_MAX);
  assert.equal(VOLUNTEER_LIMITS.maxOfferExperts, OFFER_EXPERTS_MAX);
  assert.equal(VOLUNTEER_LIMITS.maxLayers, LAYERS_MAX);
  assert.equal(VOLUNTEER_LIMITS.maxExperts, EXPERTS_MAX);
  assert.equal(VOLUNTEER_LIMITS.maxCoverageRanges, HELD_RANGES_MAX);
});

test('the wire modules are browser-safe: no Node imports, no Buffer', () => {
  const protocolFiles = readdirSync(new URL('../../protocol/', import.meta.url), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts'))
    .map((f) => `protocol/${f}`);
  assert.ok(protocolFiles.includes('protocol/channel/index.ts'));
  for (const file of [...protocolFiles, 'gguf/half.ts']) {
    const src = readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');
    const imports = [...src.matchAll(/^import\s+(type\s+)?[^;]*?from\s+'([^']+)'/gm)];
    for (const [, typeOnly, from] of imports) {
      const target = join(dirname(file), from!);
      const allowed = file === 'gguf/half.ts' ? false : target.startsWith('protocol/') || target === 'gguf/half.ts';
      assert.ok(typeOnly || allowed, `${file} imports ${from} at run time`);
      assert.ok(!from!.startsWith('node:'), `${file} imports ${from}`);
    }
    const code = src.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
    assert.doesNotMatch(code, /\bBuffer\b|\brequire\(|\bprocess\./, file);
  }
});

test('bytes on the wire per token per layer at n_embd 2048, top-8', () => {
  const at = (rowEncoding: 'f32' | 'f16', resultEncoding: 'f32' | 'f16', more = {}) =>
    wireBytesPerToken({ nEmbd: 2048, topK: 8, rowEncoding, resultEncoding, ...more });
  // work: 32 header + 8·8 pairs + row, +4 WebSocket header; result: 32 + sums, +4 header +4 mask.
  assert.deepEqual(at('f32', 'f32'), { work: 8292, result: 8232, total: 16524 });
  assert.deepEqual(at('f32', 'f16'), { work: 8292, result: 4136, total: 12428 });
  assert.deepEqual(at('f16', 'f16'), { work: 4196, result: 4136, total: 8332 });
  assert.ok(at('f16', 'f16').total <= 12 * 1024, 'goal: ≤ 12 KB per token per layer with f16');
  // Batched prefill amortises the headers; spreading a token over 4 workers sends its row 4 times.
  assert.ok(at('f16', 'f16', { tokensPerFrame: 64 }).total < 8300);
  assert.equal(Math.round(at('f32', 'f32', { workersPerToken: 4 }).total), 4 * 8192 + 64 + 4 * 8192 + 4 * (32 + 4 + 32 + 8));
  // The helper agrees with the frames themselves.
  const frame = encodeWork({
    workId: 1,
    assignmentId: 1,
    nRows: 1,
    nEmbd: 2048,
    rows: new Float32Array(2048),
    rowIndex: new Uint16Array(8),
    localExpert: Uint16Array.from({ length: 8 }, (_, i) => i),
    weight: new Float32Array(8).fill(0.125),
    rowEncoding: 'f16',
    resultEncoding: 'f16',
  });
  const result = encodeResult({ workId: 1, nRows: 1, nEmbd: 2048, sums: new Float32Array(2048), encoding: 'f16' });
  assert.equal(frame.length + 4 + result.length + 8, 8332);
});
