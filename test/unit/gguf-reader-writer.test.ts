import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  GGMLType,
  GGUFError,
  GGUFValueType,
  GGUFWriter,
  arr,
  bool,
  bytesSource,
  encodeGGUF,
  f32,
  f64,
  i16,
  i32,
  i64,
  i8,
  memorySink,
  metaArray,
  metaBigInt,
  metaBool,
  metaNumber,
  metaNumberArray,
  metaString,
  metaStringArray,
  readGGUF,
  readGGUFWithStats,
  requireMetaArray,
  requireMetaNumber,
  requireMetaString,
  str,
  tensorDataRange,
  u16,
  u32,
  u64,
  u8,
  writeGGUFToBuffer,
} from '../../gguf/index.ts';
import type { ByteSink, GGUFErrorCode, GGUFFile, GGUFSpec, GGUFValue, ReadGGUFOptions } from '../../gguf/index.ts';
import { fileSink, openFileSource, readGGUFFile } from '../../gguf/node-io.ts';

// ------------------------------------------------------------------------------------------------------------
// helpers

/** Little-endian raw byte builder for hand-made (possibly invalid) files. */
class Raw {
  private parts: number[] = [];
  u8(v: number): this {
    this.parts.push(v & 0xff);
    return this;
  }
  u32(v: number): this {
    for (let i = 0; i < 4; i++) this.parts.push((v >>> (8 * i)) & 0xff);
    return this;
  }
  u64(v: number | bigint): this {
    let b = BigInt.asUintN(64, BigInt(v));
    for (let i = 0; i < 8; i++) {
      this.parts.push(Number(b & 0xffn));
      b >>= 8n;
    }
    return this;
  }
  bytes(b: ArrayLike<number>): this {
    for (let i = 0; i < b.length; i++) this.parts.push(b[i] as number);
    return this;
  }
  str(s: string | ArrayLike<number>): this {
    const b = typeof s === 'string' ? new TextEncoder().encode(s) : s;
    return this.u64(b.length).bytes(b);
  }
  header(version: number, nTensors: number | bigint, nKv: number | bigint): this {
    return this.bytes([0x47, 0x47, 0x55, 0x46]).u32(version).u64(nTensors).u64(nKv);
  }
  padTo(alignment: number): this {
    while (this.parts.length % alignment !== 0) this.parts.push(0);
    return this;
  }
  get length(): number {
    return this.parts.length;
  }
  build(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

async function expectCode(bytes: Uint8Array, code: GGUFErrorCode, opts?: ReadGGUFOptions, msg?: RegExp): Promise<GGUFError> {
  let err: unknown;
  try {
    await readGGUF(bytesSource(bytes), opts);
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof GGUFError, `expected a GGUFError ${code}, got ${err === undefined ? 'success' : String(err)}`);
  assert.equal(err.code, code, `expected ${code}, got ${err.code}: ${err.message}`);
  if (msg) assert.match(err.message, msg);
  return err;
}

function throwsCode(fn: () => unknown, code: GGUFErrorCode, msg?: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof GGUFError, `expected GGUFError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    if (msg) assert.match(e.message, msg);
    return true;
  });
}

async function rejectsCode(p: Promise<unknown>, code: GGUFErrorCode, msg?: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof GGUFError, `expected GGUFError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    if (msg) assert.match(e.message, msg);
    return true;
  });
}

const setU32 = (b: Uint8Array, at: number, v: number): void => new DataView(b.buffer, b.byteOffset).setUint32(at, v, true);
const setU64 = (b: Uint8Array, at: number, v: number | bigint): void =>
  new DataView(b.buffer, b.byteOffset).setBigUint64(at, BigInt.asUintN(64, BigInt(v)), true);

function indexOfBytes(hay: Uint8Array, needle: string, from = 0): number {
  const n = new TextEncoder().encode(needle);
  outer: for (let i = from; i + n.length <= hay.length; i++) {
    for (let j = 0; j < n.length; j++) if (hay[i + j] !== n[j]) continue outer;
    return i;
  }
  throw new Error(`"${needle}" not found`);
}

function filled(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    b[i] = x & 0xff;
  }
  return b;
}

/** Every value type, extremes, empties, unicode, nested arrays. */
function allValues(): [string, GGUFValue][] {
  return [
    ['general.architecture', str('llama')],
    ['t.u8', u8(255)],
    ['t.i8', i8(-128)],
    ['t.u16', u16(65535)],
    ['t.i16', i16(-32768)],
    ['t.u32', u32(0xffffffff)],
    ['t.i32', i32(-0x80000000)],
    ['t.f32', f32(-1.25)],
    ['t.f32.nan', f32(NaN)],
    ['t.f64', f64(1e300)],
    ['t.f64.neg0', f64(-0)],
    ['t.bool.true', bool(true)],
    ['t.bool.false', bool(false)],
    ['t.str', str('plain ascii')],
    ['t.str.empty', str('')],
    ['t.str.unicode', str('añ ✓ 🦙 中文 \u0000 nul é')],
    ['t.u64.max', u64(2n ** 64n - 1n)],
    ['t.u64.small', u64(7)],
    ['t.i64.min', i64(-(2n ** 63n))],
    ['t.i64.max', i64(2n ** 63n - 1n)],
    ['a.u8', arr(GGUFValueType.UINT8, [0, 1, 255])],
    ['a.i8', arr(GGUFValueType.INT8, [-128, 0, 127])],
    ['a.u16', arr(GGUFValueType.UINT16, [0, 65535])],
    ['a.i16', arr(GGUFValueType.INT16, [-32768, 32767])],
    ['a.u32', arr(GGUFValueType.UINT32, [0, 0xffffffff])],
    ['a.i32', arr(GGUFValueType.INT32, [-0x80000000, 0x7fffffff, 3])],
    ['a.f32', arr(GGUFValueType.FLOAT32, new Float32Array([0.5, -2, Infinity]))],
    ['a.f64', arr(GGUFValueType.FLOAT64, [Math.PI, -1e-300])],
    ['a.u64', arr(GGUFValueType.UINT64, [0n, 2n ** 64n - 1n, 5])],
    ['a.i64', arr(GGUFValueType.INT64, [-(2n ** 63n), 2n ** 63n - 1n])],
    ['a.bool', arr(GGUFValueType.BOOL, [true, false, true])],
    ['a.str', arr(GGUFValueType.STRING, ['a', '', 'Ġhello', '🦙🦙', '\n'])],
    ['a.empty.u8', arr(GGUFValueType.UINT8, [])],
    ['a.empty.str', arr(GGUFValueType.STRING, [])],
    ['a.empty.f64', arr(GGUFValueType.FLOAT64, [])],
    ['a.empty.arr', arr(GGUFValueType.ARRAY, [])],
    [
      'a.nested',
      arr(GGUFValueType.ARRAY, [
        arr(GGUFValueType.INT32, [1, 2, 3]),
        arr(GGUFValueType.STRING, ['x', '']),
        arr(GGUFValueType.ARRAY, [arr(GGUFValueType.UINT8, []), arr(GGUFValueType.INT64, [-1n])]),
        arr(GGUFValueType.BOOL, []),
      ]),
    ],
  ];
}

function richSpec(alignment?: number, version?: 2 | 3): GGUFSpec {
  return {
    ...(alignment !== undefined ? { alignment } : {}),
    ...(version !== undefined ? { version } : {}),
    metadata: allValues(),
    tensors: [
      { name: 'token_embd.weight', dims: [64, 3], type: GGMLType.F16, data: filled(64 * 3 * 2, 1) },
      { name: 'blk.0.ffn_down.weight', dims: [32, 2, 2], type: GGMLType.Q8_0, data: filled(34 * 4, 2) },
      { name: 'output_norm.weight', dims: [5], type: GGMLType.F32, data: filled(20, 3) },
      { name: 'blk.0.ffn_up_exps.weight', dims: [256, 1, 2, 1], type: GGMLType.Q4_K, data: filled(144 * 2, 4) },
    ],
  };
}

function checkAgainstSpec(file: GGUFFile, bytes: Uint8Array, spec: GGUFSpec): void {
  const alignment = spec.alignment ?? 32;
  assert.equal(file.alignment, alignment);
  assert.equal(file.fileSize, bytes.length);
  assert.equal(file.dataOffset % alignment, 0);
  const expected = new Map<string, GGUFValue>();
  if (alignment !== 32) expected.set('general.alignment', u32(alignment));
  for (const [k, v] of spec.metadata as [string, GGUFValue][]) {
    const n = v.type === GGUFValueType.FLOAT32 ? f32(Math.fround(v.value)) : v;
    expected.set(k, n);
  }
  assert.deepEqual([...file.metadata.keys()], [...expected.keys()]);
  assert.deepEqual(file.metadata, expected);
  const tensors = spec.tensors ?? [];
  assert.equal(file.tensors.length, tensors.length);
  let expectOffset = 0;
  tensors.forEach((t, i) => {
    const info = file.tensors[i]!;
    assert.equal(info.name, t.name);
    assert.deepEqual(info.dims, [...t.dims]);
    assert.equal(info.type, t.type);
    assert.equal(info.byteLength, t.data.length);
    assert.equal(info.offset, expectOffset);
    assert.equal(info.offset % alignment, 0);
    expectOffset += Math.ceil(t.data.length / alignment) * alignment;
    const { start, end } = tensorDataRange(file, info);
    assert.deepEqual(bytes.subarray(start, end), t.data);
  });
  assert.equal(file.fileSize, file.dataOffset + expectOffset);
}

// ------------------------------------------------------------------------------------------------------------

describe('GGUF round trip', () => {
  for (const alignment of [undefined, 64, 1, 4096]) {
    it(`every value type, nested arrays and tensors (alignment ${alignment ?? 'default 32'})`, async () => {
      const spec = richSpec(alignment);
      const bytes = encodeGGUF(spec);
      const file = await readGGUF(bytesSource(bytes));
      assert.equal(file.version, 3);
      checkAgainstSpec(file, bytes, spec);
    });
  }

  it('the streaming path writes the same bytes as encodeGGUF, for any chunking', async () => {
    const spec = richSpec(64);
    const expected = encodeGGUF(spec);
    assert.deepEqual(await writeGGUFToBuffer(spec), expected);
    for (const chunk of [1, 7, 64, 1000]) {
      const w = new GGUFWriter({ alignment: 64 });
      for (const [k, v] of spec.metadata as [string, GGUFValue][]) w.set(k, v);
      for (const t of spec.tensors!) w.addTensor(t.name, t.dims, t.type);
      assert.equal(w.fileSize, expected.length);
      const sink = memorySink();
      await w.writeHeader(sink);
      assert.equal(sink.length, w.dataOffset);
      for (const t of spec.tensors!) {
        assert.equal(w.currentTensor, t.name);
        for (let o = 0; o < t.data.length; o += chunk) await w.writeTensorData(sink, t.data.subarray(o, o + chunk), t.name);
      }
      assert.equal(w.currentTensor, undefined);
      await w.finish(sink);
      assert.ok(sink.closed);
      assert.equal(w.bytesWritten, expected.length);
      assert.deepEqual(sink.bytes(), expected);
    }
  });

  it('writer reports the layout the reader finds', async () => {
    const spec = richSpec();
    const w = new GGUFWriter();
    for (const [k, v] of spec.metadata as [string, GGUFValue][]) w.set(k, v);
    for (const t of spec.tensors!) w.addTensor(t.name, t.dims, t.type);
    const file = await readGGUF(bytesSource(encodeGGUF(spec)));
    assert.deepEqual(w.tensors, file.tensors);
    assert.equal(w.dataOffset, file.dataOffset);
    assert.equal(w.fileSize, file.fileSize);
  });

  it('set() keeps insertion order; replacing keeps the position', async () => {
    const w = new GGUFWriter();
    w.set('b', u8(1)).set('a', u8(2)).set('c', u8(3)).set('a', str('x'));
    w.delete('c');
    const sink = memorySink();
    await w.writeHeader(sink);
    await w.finish(sink);
    const f = await readGGUF(bytesSource(sink.bytes()));
    assert.deepEqual(
      [...f.metadata.entries()],
      [
        ['b', u8(1)],
        ['a', str('x')],
      ],
    );
    assert.equal(f.tensors.length, 0);
  });

  it('general.alignment set via set() is honoured', async () => {
    const w = new GGUFWriter();
    w.addTensor('x', [3], GGMLType.F32);
    w.set('general.alignment', u32(128));
    const sink = memorySink();
    await w.writeHeader(sink);
    await w.writeTensorData(sink, new Uint8Array(12));
    await w.finish(sink);
    const f = await readGGUF(bytesSource(sink.bytes()));
    assert.equal(f.alignment, 128);
    assert.equal(f.dataOffset % 128, 0);
    assert.equal(f.fileSize, f.dataOffset + 128);
  });

  it('reads version 2 files (same layout as v3: u64 counts and lengths)', async () => {
    const spec = richSpec(undefined, 2);
    const bytes = encodeGGUF(spec);
    const f = await readGGUF(bytesSource(bytes));
    assert.equal(f.version, 2);
    checkAgainstSpec(f, bytes, spec);
    // a v3 file with the version patched to 2 parses the same
    const v3 = encodeGGUF(richSpec());
    setU32(v3, 4, 2);
    assert.deepEqual({ ...(await readGGUF(bytesSource(v3))), version: 3 }, await readGGUF(bytesSource(encodeGGUF(richSpec()))));
  });

  it('returned arrays are copies, not views of the source (also for Node Buffers)', async () => {
    const bytes = Buffer.from(encodeGGUF({ metadata: [['s', arr(GGUFValueType.FLOAT32, [1, 2, 3])]] }));
    const f = await readGGUF(bytesSource(bytes));
    const a = metaArray(f, 's', GGUFValueType.FLOAT32)!;
    assert.equal(a.buffer.byteLength, 12);
    bytes.fill(0);
    assert.deepEqual(a, new Float32Array([1, 2, 3]));
  });

  it('big vocabulary arrays survive buffer refills (strings spanning chunk boundaries)', async () => {
    const n = 40_000;
    const tokens = Array.from({ length: n }, (_, i) => (i % 7 === 0 ? `▁tök${i}` : `t${i}_${'x'.repeat(i % 50)}`));
    const scores = Float32Array.from({ length: n }, (_, i) => -i / 4);
    const types = Int32Array.from({ length: n }, (_, i) => (i % 5) + 1);
    const bytes = encodeGGUF({
      metadata: [
        ['tokenizer.ggml.tokens', arr(GGUFValueType.STRING, tokens)],
        ['tokenizer.ggml.scores', arr(GGUFValueType.FLOAT32, scores)],
        ['tokenizer.ggml.token_type', arr(GGUFValueType.INT32, types)],
      ],
      tensors: [{ name: 'w', dims: [32], type: GGMLType.F32, data: filled(128, 9) }],
    });
    assert.ok(bytes.length > 1_000_000);
    const f = await readGGUF(bytesSource(bytes));
    assert.deepEqual(metaStringArray(f, 'tokenizer.ggml.tokens'), tokens);
    assert.deepEqual(metaArray(f, 'tokenizer.ggml.scores', GGUFValueType.FLOAT32), scores);
    assert.deepEqual(metaArray(f, 'tokenizer.ggml.token_type', GGUFValueType.INT32), types);
  });

  it('reads only the header region of a file with large tensors', async () => {
    const big = 6 * 1024 * 1024;
    const bytes = encodeGGUF({
      metadata: [['general.name', str('big')]],
      tensors: [
        { name: 'a', dims: [1024, big / 4096], type: GGMLType.F32, data: new Uint8Array(big) },
        { name: 'b', dims: [1024], type: GGMLType.F32, data: new Uint8Array(4096) },
      ],
    });
    const { file, bytesFetched } = await readGGUFWithStats(bytesSource(bytes));
    assert.equal(file.tensors.length, 2);
    assert.ok(bytesFetched <= 64 * 1024, `fetched ${bytesFetched} bytes`);
  });
});

describe('GGUF metadata accessors', () => {
  const holder = {
    metadata: new Map<string, GGUFValue>([
      ['n', u32(7)],
      ['big', u64(2n ** 60n)],
      ['small64', i64(-3n)],
      ['s', str('hi')],
      ['b', bool(true)],
      ['toks', arr(GGUFValueType.STRING, ['a', 'b'])],
      ['u64s', arr(GGUFValueType.UINT64, [1n, 2n])],
      ['f', arr(GGUFValueType.FLOAT32, [1.5])],
    ]),
  };

  it('typed getters', () => {
    assert.equal(metaNumber(holder, 'n'), 7);
    assert.equal(metaNumber(holder, 'small64'), -3);
    assert.equal(metaNumber(holder, 'absent'), undefined);
    assert.equal(metaBigInt(holder, 'big'), 2n ** 60n);
    assert.equal(metaBigInt(holder, 'n'), 7n);
    assert.equal(metaString(holder, 's'), 'hi');
    assert.equal(metaBool(holder, 'b'), true);
    assert.deepEqual(metaStringArray(holder, 'toks'), ['a', 'b']);
    assert.deepEqual(metaNumberArray(holder, 'u64s'), new Float64Array([1, 2]));
    assert.deepEqual(metaNumberArray(holder, 'f'), new Float32Array([1.5]));
    assert.equal(requireMetaArray(holder, 'toks').itemType, GGUFValueType.STRING);
    assert.equal(requireMetaNumber(holder, 'n'), 7);
  });

  it('wrong types and missing keys throw GGUFErrors naming the key', () => {
    throwsCode(() => metaNumber(holder, 's'), 'GGUF_BAD_VALUE', /"s" is str, expected a number/);
    throwsCode(() => metaNumber(holder, 'big'), 'GGUF_BAD_VALUE', /"big"/);
    throwsCode(() => metaString(holder, 'n'), 'GGUF_BAD_VALUE', /"n" is u32/);
    throwsCode(() => metaArray(holder, 'toks', GGUFValueType.INT32), 'GGUF_BAD_VALUE', /arr\[str\], expected arr\[i32\]/);
    throwsCode(() => metaNumberArray(holder, 'toks'), 'GGUF_BAD_VALUE');
    throwsCode(() => requireMetaString(holder, 'general.name'), 'GGUF_MISSING_KEY', /"general\.name"/);
    throwsCode(() => requireMetaNumber(holder, 'x'), 'GGUF_MISSING_KEY', /"x"/);
  });
});

describe('GGUF writer misuse', () => {
  it('rejects invalid values and tensors up front', () => {
    const w = new GGUFWriter();
    throwsCode(() => w.set('x', u8(256)), 'GGUF_BAD_VALUE', /u8/);
    throwsCode(() => w.set('x', i32(1.5)), 'GGUF_BAD_VALUE');
    throwsCode(() => w.set('x', u64(-1n)), 'GGUF_BAD_VALUE');
    throwsCode(() => w.set('x', i64(2n ** 63n)), 'GGUF_BAD_VALUE');
    throwsCode(() => w.set('x', str('\uD800')), 'GGUF_BAD_VALUE', /surrogate/);
    throwsCode(() => w.set('', u8(1)), 'GGUF_BAD_VALUE');
    throwsCode(() => arr(GGUFValueType.UINT8, [1, 300]), 'GGUF_BAD_VALUE');
    throwsCode(
      () => w.set('x', { type: GGUFValueType.ARRAY, itemType: GGUFValueType.UINT8, value: new Int8Array(1) } as unknown as GGUFValue),
      'GGUF_BAD_VALUE',
    );
    throwsCode(() => w.set('general.alignment', u32(48)), 'GGUF_BAD_VALUE', /power of two/);
    throwsCode(() => w.set('general.alignment', u32(0)), 'GGUF_BAD_VALUE');
    throwsCode(() => w.set('general.alignment', u64(64)), 'GGUF_BAD_VALUE', /must be u32/);
    throwsCode(() => new GGUFWriter({ alignment: 3 }), 'GGUF_BAD_VALUE');
    w.addTensor('a', [32], GGMLType.Q4_0);
    throwsCode(() => w.addTensor('a', [32], GGMLType.F32), 'GGUF_BAD_TENSOR', /duplicate/);
    throwsCode(() => w.addTensor('b', [], GGMLType.F32), 'GGUF_BAD_TENSOR');
    throwsCode(() => w.addTensor('b', [1, 1, 1, 1, 1], GGMLType.F32), 'GGUF_BAD_TENSOR');
    throwsCode(() => w.addTensor('b', [4, 0], GGMLType.F32), 'GGUF_BAD_TENSOR');
    throwsCode(() => w.addTensor('b', [16], GGMLType.Q4_0), 'GGUF_BAD_TENSOR', /multiple of 32/);
    throwsCode(() => w.addTensor('b', [4], 4 as GGMLType), 'GGUF_BAD_TENSOR', /unknown ggml type/);
    throwsCode(() => w.addTensor('n'.repeat(64), [4], GGMLType.F32), 'GGUF_BAD_TENSOR', /fewer than 64/);
    w.addTensor('n'.repeat(63), [4], GGMLType.F32);
  });

  it('enforces the order: header, tensor data in order and size, finish', async () => {
    const w = new GGUFWriter();
    w.addTensor('a', [8], GGMLType.F32).addTensor('b', [4], GGMLType.F32);
    const sink = memorySink();
    await rejectsCode(w.writeTensorData(sink, new Uint8Array(4)), 'GGUF_WRITER', /before writeHeader/);
    await rejectsCode(w.finish(sink), 'GGUF_WRITER', /before writeHeader/);
    await w.writeHeader(sink);
    await rejectsCode(w.writeHeader(sink), 'GGUF_WRITER', /twice/);
    throwsCode(() => w.set('k', u8(1)), 'GGUF_WRITER', /after writeHeader/);
    throwsCode(() => w.addTensor('c', [4], GGMLType.F32), 'GGUF_WRITER', /after writeHeader/);
    await rejectsCode(w.writeTensorData(sink, new Uint8Array(4), 'b'), 'GGUF_WRITER', /out of order: expected "a"/);
    await rejectsCode(w.writeTensorData(sink, new Uint8Array(4), 'zz'), 'GGUF_WRITER', /no tensor named "zz"/);
    await rejectsCode(w.writeTensorData(sink, new Uint8Array(33)), 'GGUF_WRITER', /too many bytes for tensor "a"/);
    await w.writeTensorData(sink, new Uint8Array(16), 'a');
    await rejectsCode(w.writeTensorData(sink, new Uint8Array(4), 'b'), 'GGUF_WRITER', /"a" got only 16 of 32 bytes/);
    await rejectsCode(w.finish(sink), 'GGUF_WRITER', /tensor "a" \(1 of 2\) got 16 of 32/);
    await rejectsCode(w.writeTensor(sink, 'a', new Uint8Array(32)), 'GGUF_WRITER', /too many/);
    await w.writeTensorData(sink, new Uint8Array(16));
    await rejectsCode(w.writeTensor(sink, 'b', new Uint8Array(15)), 'GGUF_WRITER', /16 bytes, got 15/);
    await rejectsCode(w.finish(sink), 'GGUF_WRITER', /"b"/);
    // not awaiting a write, then writing again
    const p = w.writeTensorData(sink, new Uint8Array(8));
    await rejectsCode(w.writeTensorData(sink, new Uint8Array(8)), 'GGUF_WRITER', /pending/);
    await p;
    await w.writeTensorData(sink, new Uint8Array(8));
    await rejectsCode(w.writeTensorData(sink, new Uint8Array(1)), 'GGUF_WRITER', /all 2 tensors are complete/);
    await w.finish(sink);
    await rejectsCode(w.writeTensorData(sink, new Uint8Array(1)), 'GGUF_WRITER', /after finish/);
    const f = await readGGUF(bytesSource(sink.bytes()));
    assert.deepEqual(
      f.tensors.map((t) => [t.name, t.offset]),
      [
        ['a', 0],
        ['b', 32],
      ],
    );
  });

  it('a failing sink puts the writer in a failed state', async () => {
    const w = new GGUFWriter();
    w.addTensor('a', [8], GGMLType.F32);
    let n = 0;
    const sink: ByteSink = {
      async write() {
        if (++n === 2) throw new Error('disk full');
      },
    };
    await w.writeHeader(sink);
    await assert.rejects(w.writeTensorData(sink, new Uint8Array(32)), /disk full/);
    await rejectsCode(w.writeTensorData(sink, new Uint8Array(32)), 'GGUF_WRITER', /failed write/);
  });

  it('encodeGGUF checks tensor data sizes', () => {
    throwsCode(
      () => encodeGGUF({ tensors: [{ name: 'a', dims: [4], type: GGMLType.F32, data: new Uint8Array(15) }] }),
      'GGUF_WRITER',
      /16 bytes, got 15/,
    );
  });
});

describe('GGUF reader rejects corrupted files', () => {
  /** One tensor, no metadata: name "w" at 32, n_dims at 33, ne0 at 37, ne1 at 45, type at 53, offset at 57. */
  const oneTensor = (): Uint8Array => encodeGGUF({ tensors: [{ name: 'w', dims: [32, 2], type: GGMLType.F32, data: filled(256, 5) }] });
  /** One key "a" holding arr[u8] of 3: key len at 24, type at 33, item type at 37, count at 41, items at 49. */
  const oneArray = (): Uint8Array => encodeGGUF({ metadata: [['a', arr(GGUFValueType.UINT8, [1, 2, 3])]] });

  const cases: Array<[string, () => Uint8Array, GGUFErrorCode, RegExp?, ReadGGUFOptions?]> = [
    ['empty file', () => new Uint8Array(0), 'GGUF_TRUNCATED'],
    [
      'bad magic',
      () => {
        const b = oneTensor();
        b[3] = 0x47;
        return b;
      },
      'GGUF_BAD_MAGIC',
      /expected magic "GGUF"/,
    ],
    [
      'version 0',
      () => {
        const b = oneTensor();
        setU32(b, 4, 0);
        return b;
      },
      'GGUF_BAD_VERSION',
    ],
    ['version 1', () => new Raw().header(1, 0, 0).build(), 'GGUF_BAD_VERSION', /version 1 is not supported/],
    [
      'version 999',
      () => {
        const b = oneTensor();
        setU32(b, 4, 999);
        return b;
      },
      'GGUF_BAD_VERSION',
      /999/,
    ],
    [
      'byte-swapped version 3',
      () => {
        const b = oneTensor();
        setU32(b, 4, 0x03000000);
        return b;
      },
      'GGUF_BAD_VERSION',
      /byte-swapped/,
    ],
    [
      'n_tensors 2^40',
      () => {
        const b = oneTensor();
        setU64(b, 8, 2n ** 40n);
        return b;
      },
      'GGUF_TRUNCATED',
      /1099511627776 tensors/,
    ],
    [
      'n_tensors negative',
      () => {
        const b = oneTensor();
        setU64(b, 8, -1n);
        return b;
      },
      'GGUF_TRUNCATED',
    ],
    [
      'n_kv 2^40',
      () => {
        const b = oneArray();
        setU64(b, 16, 2n ** 40n);
        return b;
      },
      'GGUF_TRUNCATED',
      /metadata entries/,
    ],
    [
      'key length larger than the file',
      () => {
        const b = oneArray();
        setU64(b, 24, 10_000);
        return b;
      },
      'GGUF_TRUNCATED',
      /length 10000/,
    ],
    [
      'key length 2^63',
      () => {
        const b = oneArray();
        setU64(b, 24, 2n ** 63n);
        return b;
      },
      'GGUF_TRUNCATED',
    ],
    [
      'array count 2^40',
      () => {
        const b = oneArray();
        setU64(b, 41, 2n ** 40n);
        return b;
      },
      'GGUF_TRUNCATED',
      /1099511627776 u8 items/,
    ],
    [
      'array count 2^64-1',
      () => {
        const b = oneArray();
        setU64(b, 41, -1n);
        return b;
      },
      'GGUF_TRUNCATED',
    ],
    ['array count over maxArrayItems', () => oneArray(), 'GGUF_LIMIT', /maxArrayItems/, { maxArrayItems: 2 }],
    [
      'unknown value type',
      () => {
        const b = oneArray();
        setU32(b, 33, 13);
        return b;
      },
      'GGUF_BAD_VALUE',
      /unknown value type id 13/,
    ],
    [
      'unknown array item type',
      () => {
        const b = oneArray();
        setU32(b, 37, 0xffffffff);
        return b;
      },
      'GGUF_BAD_VALUE',
      /unknown value type id -1/,
    ],
    [
      'bad UTF-8 in a key',
      () => {
        const b = oneArray();
        b[32] = 0xff;
        return b;
      },
      'GGUF_BAD_VALUE',
      /UTF-8/,
    ],
    [
      'bad UTF-8 in a string value',
      () => {
        const b = encodeGGUF({ metadata: [['k', str('abcé')]] });
        b[indexOfBytes(b, 'abc') + 4] = 0x41;
        return b;
      },
      'GGUF_BAD_VALUE',
      /"k".*UTF-8/,
    ],
    [
      'bad UTF-8 in a string array item',
      () => {
        const b = encodeGGUF({ metadata: [['toks', arr(GGUFValueType.STRING, ['ok', 'zzzz'])]] });
        b.set([0xc3, 0x28], indexOfBytes(b, 'zzzz'));
        return b;
      },
      'GGUF_BAD_VALUE',
      /"toks".*item 1.*UTF-8/,
    ],
    [
      'bad UTF-8 in a tensor name',
      () => {
        const b = oneTensor();
        b[32] = 0x80;
        return b;
      },
      'GGUF_BAD_VALUE',
      /tensor 0 of 1.*UTF-8/,
    ],
    ['empty key', () => new Raw().header(3, 0, 1).str('').u32(GGUFValueType.UINT8).u8(1).build(), 'GGUF_BAD_VALUE', /empty/],
    [
      'duplicate key',
      () => {
        const b = encodeGGUF({
          metadata: [
            ['k1', u8(1)],
            ['k2', u8(2)],
          ],
        });
        b[indexOfBytes(b, 'k2') + 1] = 0x31;
        return b;
      },
      'GGUF_BAD_VALUE',
      /duplicate key "k1"/,
    ],
    [
      'string over maxStringBytes',
      () => encodeGGUF({ metadata: [['k', str('x'.repeat(100))]] }),
      'GGUF_LIMIT',
      /maxStringBytes/,
      { maxStringBytes: 99 },
    ],
    [
      'too many entries for maxMetadataEntries',
      () =>
        encodeGGUF({
          metadata: [
            ['a', u8(1)],
            ['b', u8(1)],
          ],
        }),
      'GGUF_LIMIT',
      /maxMetadataEntries/,
      { maxMetadataEntries: 1 },
    ],
    ['too many tensors for maxTensors', oneTensor, 'GGUF_LIMIT', /maxTensors/, { maxTensors: 0 }],
    [
      'arrays nested deeper than maxArrayDepth',
      () => encodeGGUF({ metadata: [['n', arr(GGUFValueType.ARRAY, [arr(GGUFValueType.ARRAY, [arr(GGUFValueType.UINT8, [1])])])]] }),
      'GGUF_LIMIT',
      /maxArrayDepth/,
      { maxArrayDepth: 2 },
    ],
    [
      'alignment 0',
      () => {
        const b = encodeGGUF({ alignment: 64 });
        setU32(b, 53, 0);
        return b;
      },
      'GGUF_BAD_VALUE',
      /general\.alignment.*power of two/,
    ],
    [
      'alignment 48',
      () => {
        const b = encodeGGUF({ alignment: 64 });
        setU32(b, 53, 48);
        return b;
      },
      'GGUF_BAD_VALUE',
      /power of two/,
    ],
    [
      'alignment 2^31',
      () => {
        const b = encodeGGUF({ alignment: 64 });
        setU32(b, 53, 2 ** 31);
        return b;
      },
      'GGUF_BAD_VALUE',
    ],
    [
      'alignment of type u64',
      () => new Raw().header(3, 0, 1).str('general.alignment').u32(GGUFValueType.UINT64).u64(32).build(),
      'GGUF_BAD_VALUE',
      /must be u32/,
    ],
    [
      'tensor with 0 dims',
      () => {
        const b = oneTensor();
        setU32(b, 33, 0);
        return b;
      },
      'GGUF_BAD_TENSOR',
      /0 dimensions/,
    ],
    [
      'tensor with 5 dims',
      () => {
        const b = oneTensor();
        setU32(b, 33, 5);
        return b;
      },
      'GGUF_BAD_TENSOR',
      /5 dimensions/,
    ],
    [
      'tensor dim 0',
      () => {
        const b = oneTensor();
        setU64(b, 45, 0);
        return b;
      },
      'GGUF_BAD_TENSOR',
      /dimension 1 is 0/,
    ],
    [
      'tensor dim negative',
      () => {
        const b = oneTensor();
        setU64(b, 45, -1n);
        return b;
      },
      'GGUF_BAD_TENSOR',
      /dimension 1 is -1/,
    ],
    [
      'tensor elements over 2^53',
      () => {
        const b = oneTensor();
        setU64(b, 37, 2 ** 32);
        setU64(b, 45, 2 ** 30);
        return b;
      },
      'GGUF_BAD_TENSOR',
      /2\^53/,
    ],
    [
      'unknown tensor type id',
      () => {
        const b = oneTensor();
        setU32(b, 53, 99);
        return b;
      },
      'GGUF_BAD_TENSOR',
      /unknown ggml type id 99/,
    ],
    [
      'removed tensor type id 4',
      () => {
        const b = oneTensor();
        setU32(b, 53, 4);
        return b;
      },
      'GGUF_BAD_TENSOR',
      /unknown ggml type id 4/,
    ],
    [
      'row not a multiple of the block size',
      () => {
        const b = oneTensor();
        setU32(b, 53, GGMLType.Q4_K);
        return b;
      },
      'GGUF_BAD_TENSOR',
      /multiple of 256/,
    ],
    [
      'tensor offset out of the file',
      () => {
        const b = oneTensor();
        setU64(b, 57, 1 << 20);
        return b;
      },
      'GGUF_TRUNCATED',
      /beyond the end/,
    ],
    [
      'tensor offset 2^63',
      () => {
        const b = oneTensor();
        setU64(b, 57, 2n ** 63n);
        return b;
      },
      'GGUF_TRUNCATED',
    ],
    [
      'misaligned tensor offset',
      () => {
        const b = oneTensor();
        setU64(b, 57, 4);
        return b;
      },
      'GGUF_BAD_TENSOR',
      /not a multiple of the alignment 32/,
    ],
    [
      'duplicate tensor name',
      () => {
        const b = encodeGGUF({
          tensors: [
            { name: 'tA', dims: [4], type: GGMLType.F32, data: new Uint8Array(16) },
            { name: 'tB', dims: [4], type: GGMLType.F32, data: new Uint8Array(16) },
          ],
        });
        b[indexOfBytes(b, 'tB') + 1] = 0x41;
        return b;
      },
      'GGUF_BAD_TENSOR',
      /duplicate tensor name "tA"/,
    ],
    [
      'overlapping tensors',
      () => {
        const b = encodeGGUF({
          tensors: [
            { name: 'tA', dims: [4], type: GGMLType.F32, data: new Uint8Array(16) },
            { name: 'tB', dims: [4], type: GGMLType.F32, data: new Uint8Array(16) },
          ],
        });
        setU64(b, indexOfBytes(b, 'tB') + 2 + 4 + 8 + 4, 0);
        return b;
      },
      'GGUF_BAD_TENSOR',
      /overlaps/,
    ],
    [
      'tensor name of 64 bytes',
      () => new Raw().header(3, 1, 0).str('n'.repeat(64)).u32(1).u64(4).u32(0).u64(0).padTo(32).bytes(new Uint8Array(16)).build(),
      'GGUF_BAD_TENSOR',
      /64 bytes/,
    ],
    [
      'data section start beyond the end',
      () => new Raw().header(3, 1, 0).str('w').u32(1).u64(1).u32(GGMLType.I8).u64(0).bytes([1, 2, 3]).build(),
      'GGUF_TRUNCATED',
      /data section should start/,
    ],
  ];

  for (const [name, make, code, msg, opts] of cases) {
    it(`${name} → ${code}`, async () => {
      const t0 = performance.now();
      await expectCode(make(), code, opts, msg);
      assert.ok(performance.now() - t0 < 500, 'fails fast');
    });
  }

  it('the hand-made base files are valid', async () => {
    const f1 = await readGGUF(bytesSource(oneTensor()));
    assert.deepEqual(f1.tensors, [{ name: 'w', dims: [32, 2], type: GGMLType.F32, offset: 0, byteLength: 256 }]);
    const f2 = await readGGUF(bytesSource(oneArray()));
    assert.deepEqual(metaArray(f2, 'a', GGUFValueType.UINT8), Uint8Array.of(1, 2, 3));
    const raw = new Raw().header(3, 1, 0).str('n'.repeat(63)).u32(1).u64(4).u32(0).u64(0).padTo(32).bytes(new Uint8Array(16)).build();
    assert.equal((await readGGUF(bytesSource(raw))).tensors[0]!.byteLength, 16);
  });

  it('errors carry the offset and context', async () => {
    const b = oneArray();
    setU64(b, 41, 2n ** 40n);
    const e = await expectCode(b, 'GGUF_TRUNCATED');
    assert.equal(e.offset, 41);
    assert.match(e.message, /metadata entry 0 of 1 \("a"\)/);
    assert.match(e.message, /at byte offset 41/);
  });

  it('truncation at every byte before the end of the last tensor → GGUF_TRUNCATED; after it, the file still parses', async () => {
    const bytes = encodeGGUF(richSpec(64));
    const full = await readGGUF(bytesSource(bytes));
    const last = full.tensors[full.tensors.length - 1]!;
    const end = full.dataOffset + last.offset + last.byteLength;
    assert.ok(end < bytes.length, 'the last tensor is padded');
    for (let len = 0; len < end; len++) await expectCode(bytes.subarray(0, len), 'GGUF_TRUNCATED');
    for (let len = end; len <= bytes.length; len++) {
      const f = await readGGUF(bytesSource(bytes.subarray(0, len)));
      assert.equal(f.tensors.length, full.tensors.length);
    }
  });

  it('a file without tensors may end right after the tensor infos', async () => {
    const b = new Raw().header(3, 0, 1).str('k').u32(GGUFValueType.UINT8).u8(1).build();
    const f = await readGGUF(bytesSource(b));
    assert.equal(f.dataOffset, b.length);
    assert.equal(metaNumber(f, 'k'), 1);
  });
});

describe('GGUF node I/O', () => {
  it('fileSink + openFileSource + readGGUFFile round trip with chunked writes and reused buffers', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gguf-test-'));
    try {
      const path = join(dir, 'm.gguf');
      const rows = 256;
      const w = new GGUFWriter({ alignment: 64 });
      w.set('general.name', str('file test'));
      w.addTensor('a', [1024, rows], GGMLType.F32).addTensor('b', [32, 3], GGMLType.Q8_0);
      const sink = fileSink(path);
      await w.writeHeader(sink);
      const row = new Uint8Array(4096); // reused for every row: the sink must copy
      for (let r = 0; r < rows; r++) {
        row.fill(r & 0xff);
        await w.writeTensorData(sink, row, 'a');
      }
      await w.writeTensorData(sink, filled(102, 7), 'b');
      await w.finish(sink);
      assert.equal(sink.bytesWritten, w.fileSize);

      const onDisk = new Uint8Array(await readFile(path));
      assert.equal(onDisk.length, w.fileSize);
      const f = await readGGUFFile(path);
      assert.equal(metaString(f, 'general.name'), 'file test');
      const a = f.tensors[0]!;
      for (const r of [0, 1, 100, 255]) assert.equal(onDisk[f.dataOffset + a.offset + r * 4096 + 17], r);
      const src = await openFileSource(path);
      try {
        const f2 = await readGGUF(src);
        assert.deepEqual(f2, f);
        const b = f.tensors[1]!;
        assert.deepEqual(await src.read(f.dataOffset + b.offset, b.byteLength), filled(102, 7));
        await rejectsCode(src.read(src.size - 1, 2), 'GGUF_IO');
      } finally {
        await src.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('fileSink propagates stream errors', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gguf-test-'));
    try {
      const sink = fileSink(join(dir, 'no', 'such', 'dir', 'x.gguf'));
      await assert.rejects(
        (async () => {
          await sink.write(new Uint8Array(10));
          await sink.close();
        })(),
        (e: unknown) => e instanceof GGUFError && e.code === 'GGUF_IO' && /ENOENT/.test(e.message),
      );
      await assert.rejects(sink.write(new Uint8Array(1)), GGUFError);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
