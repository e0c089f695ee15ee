import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  GGMLType,
  GGUFError,
  GGUFValueType,
  bytesSource,
  encodeGGUF,
  findTensor,
  memorySink,
  readGGUF,
  requireQuantType,
  str,
  u32,
} from '../../gguf/index.ts';
import type { ByteSource, GGUFErrorCode, GGUFFile, GGUFValue } from '../../gguf/index.ts';
import {
  EXPERT_MATRICES,
  ExpertSliceError,
  expertSliceByteLength,
  expertTensorName,
  planExpertSlice,
  readExpertSliceBytes,
  writeExpertSlice,
} from '../../gguf/expert-slice.ts';
import type {
  ExpertMatrix,
  ExpertSliceErrorCode,
  ExpertSliceInfo,
  ExpertSliceMatrixPlan,
  ExpertSlicePlan,
} from '../../gguf/expert-slice.ts';
import { readExpertSliceStream } from '../../gguf/expert-slice-stream.ts';
import type { ReadExpertSliceLimits } from '../../gguf/expert-slice-stream.ts';
import { openFileSource } from '../../gguf/node-io.ts';
import { mulberry32, mulberry32Uint } from '../../shaders/random.ts';
import { testModel } from '../../harness/models.ts';

// ------------------------------------------------------------------------------------------------------------
// helpers

function randomBytes(n: number, seed: number): Uint8Array {
  const next = mulberry32Uint(seed);
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = next() & 0xff;
  return out;
}

function tensorBytes(dims: readonly number[], type: GGMLType): number {
  const q = requireQuantType(type);
  return (dims.reduce((a, b) => a * b, 1) / q.blockSize) * q.bytesPerBlock;
}

interface ModelSpec {
  nEmbd: number;
  ff: number;
  nExpert: number;
  types?: Partial<Record<ExpertMatrix, GGMLType>>;
  /** Dims override per matrix (for inconsistent-shape tests). */
  dims?: Partial<Record<ExpertMatrix, number[]>>;
  omit?: ExpertMatrix[];
  seed?: number;
}

interface Model {
  bytes: Uint8Array;
  file: GGUFFile;
}

/** A two-layer model: layer 0 dense, layer 1 routed experts, random bytes as weights. */
async function makeModel(s: ModelSpec): Promise<Model> {
  let seed = s.seed ?? 1;
  const tensors: { name: string; dims: number[]; type: GGMLType; data: Uint8Array }[] = [];
  const add = (name: string, dims: number[], type: GGMLType = GGMLType.F32): void => {
    tensors.push({ name, dims, type, data: randomBytes(tensorBytes(dims, type), seed++) });
  };
  add('token_embd.weight', [s.nEmbd, 16]);
  add('blk.0.ffn_gate.weight', [s.nEmbd, s.ff]);
  add('blk.0.ffn_up.weight', [s.nEmbd, s.ff]);
  add('blk.0.ffn_down.weight', [s.ff, s.nEmbd]);
  add('blk.1.attn_norm.weight', [s.nEmbd]);
  for (const m of EXPERT_MATRICES) {
    if (s.omit?.includes(m)) continue;
    const dims = s.dims?.[m] ?? (m === 'down' ? [s.ff, s.nEmbd, s.nExpert] : [s.nEmbd, s.ff, s.nExpert]);
    add(expertTensorName(1, m), dims, s.types?.[m] ?? GGMLType.F32);
  }
  add('output_norm.weight', [s.nEmbd]);
  const bytes = encodeGGUF({
    metadata: { 'general.architecture': str('qwen3moe'), 'general.name': str('tiny-test'), 'qwen3moe.block_count': u32(2) },
    tensors,
  });
  return { bytes, file: await readGGUF(bytesSource(bytes)) };
}

/** Experts [begin, end) of a model tensor, located from its shape and type alone. */
function sourceExperts(m: Model, name: string, begin: number, end: number): Uint8Array {
  const t = findTensor(m.file, name);
  assert.ok(t, name);
  const [ne0 = 0, ne1 = 0] = t.dims;
  const perExpert = tensorBytes([ne0, ne1], t.type);
  const at = m.file.dataOffset + t.offset + begin * perExpert;
  return m.bytes.subarray(at, at + (end - begin) * perExpert);
}

async function writeSlice(src: ByteSource, plan: ExpertSlicePlan, chunkBytes?: number): Promise<Uint8Array> {
  const sink = memorySink();
  const n = await writeExpertSlice(src, plan, sink, chunkBytes === undefined ? {} : { chunkBytes });
  const out = sink.bytes();
  assert.equal(n, out.length);
  assert.ok(sink.closed);
  return out;
}

async function sliceOf(m: Model, begin: number, end: number): Promise<{ plan: ExpertSlicePlan; bytes: Uint8Array }> {
  const plan = planExpertSlice(m.file, 1, begin, end);
  return { plan, bytes: await writeSlice(bytesSource(m.bytes), plan) };
}

/** Random chunk sizes, log-uniform in [1, max]. */
function chunkSizes(seed: number, max: number): () => number {
  const rnd = mulberry32(seed);
  return () => Math.max(1, Math.floor(Math.exp(rnd() * Math.log(max + 1))));
}

async function* once(...chunks: unknown[]): AsyncGenerator<Uint8Array> {
  yield* chunks as Uint8Array[];
}

async function* chunked(bytes: Uint8Array, seed: number, max = 1 << 18): AsyncGenerator<Uint8Array> {
  const size = chunkSizes(seed, max);
  for (let at = 0; at < bytes.length; ) {
    const n = Math.min(size(), bytes.length - at);
    yield bytes.subarray(at, at + n);
    at += n;
  }
}

function readable(bytes: Uint8Array, seed: number, max?: number): ReadableStream<Uint8Array> & { cancelled: () => boolean } {
  const it = chunked(bytes, seed, max);
  let cancelled = false;
  const s = new ReadableStream<Uint8Array>({
    async pull(ctrl) {
      const r = await it.next();
      if (r.done) ctrl.close();
      else ctrl.enqueue(new Uint8Array(r.value)); // a copy, as a network stream would give
    },
    cancel() {
      cancelled = true;
    },
  });
  return Object.assign(s, { cancelled: () => cancelled });
}

interface Collected {
  info: ExpertSliceInfo;
  gate: Uint8Array;
  up: Uint8Array;
  down: Uint8Array;
  /** Matrices in the order their data arrived. */
  order: ExpertMatrix[];
}

/** Reads a stream, checking each matrix arrives whole, in order, without gaps, and only after onHeader. */
async function collect(stream: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>, limits?: ReadExpertSliceLimits): Promise<Collected> {
  let out: Record<ExpertMatrix, Uint8Array> | undefined;
  const filled = { gate: 0, up: 0, down: 0 };
  const order: ExpertMatrix[] = [];
  const info = await readExpertSliceStream(
    stream,
    {
      onHeader(i) {
        assert.equal(out, undefined, 'onHeader called twice');
        out = { gate: new Uint8Array(i.bytes.gate), up: new Uint8Array(i.bytes.up), down: new Uint8Array(i.bytes.down) };
      },
      onData(m, offset, chunk) {
        if (!out) assert.fail('onData before onHeader');
        if (offset !== filled[m] || chunk.length === 0) assert.fail(`${m}: ${chunk.length} bytes at ${offset}, expected ${filled[m]}`);
        if (order.at(-1) !== m) {
          assert.ok(!order.includes(m), `${m} arrived in two pieces`);
          if (order.length > 0) assert.equal(filled[order.at(-1) as ExpertMatrix], out[order.at(-1) as ExpertMatrix].length);
          order.push(m);
        }
        out[m].set(chunk, offset);
        filled[m] += chunk.length;
      },
    },
    limits,
  );
  assert.ok(out);
  for (const m of EXPERT_MATRICES) assert.equal(filled[m], info.bytes[m], `${m} incomplete`);
  return { info, ...out, order };
}

function isCode(e: unknown, code: GGUFErrorCode | ExpertSliceErrorCode, msg?: RegExp): boolean {
  assert.ok(e instanceof GGUFError || e instanceof ExpertSliceError, `expected ${code}, got ${String(e)}`);
  assert.equal(e.code, code, e.message);
  if (msg) assert.match(e.message, msg);
  return true;
}

const rejectsCode = (p: Promise<unknown>, code: GGUFErrorCode | ExpertSliceErrorCode, msg?: RegExp): Promise<void> =>
  assert.rejects(p, (e) => isCode(e, code, msg));

function throwsCode(f: () => unknown, code: ExpertSliceErrorCode, msg?: RegExp): void {
  assert.throws(f, (e) => isCode(e, code, msg));
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** A slice-like file built from a plan's metadata (edited) and the given tensors. */
function customSlice(plan: ExpertSlicePlan, edit: (meta: Map<string, GGUFValue>) => void, tensors = plan.matrices): Uint8Array {
  const meta = new Map(plan.metadata);
  edit(meta);
  return encodeGGUF({
    metadata: meta,
    tensors: tensors.map((t) => {
      const type = t.source.type;
      return { name: t.name, dims: t.dims, type, data: new Uint8Array(tensorBytes(t.dims, type)) };
    }),
  });
}

const Q4K_MIX = { nEmbd: 256, ff: 256, nExpert: 5, types: { gate: GGMLType.Q4_K, up: GGMLType.Q4_K, down: GGMLType.Q6_K } };
const MODELS: [string, ModelSpec][] = [
  ['F32', { nEmbd: 64, ff: 32, nExpert: 8 }],
  ['F16 odd dims (padded tensors)', { nEmbd: 5, ff: 3, nExpert: 7, types: { gate: GGMLType.F16, up: GGMLType.F16, down: GGMLType.F16 } }],
  ['Q8_0', { nEmbd: 64, ff: 96, nExpert: 6, types: { gate: GGMLType.Q8_0, up: GGMLType.Q8_0, down: GGMLType.Q8_0 } }],
  ['Q4_K gate/up, Q6_K down', Q4K_MIX],
];

// ------------------------------------------------------------------------------------------------------------

describe('planExpertSlice', () => {
  it('locates the experts of each matrix and describes the slice', async () => {
    const m = await makeModel({ nEmbd: 64, ff: 32, nExpert: 8 });
    const plan = planExpertSlice(m.file, 1, 2, 5);
    assert.deepEqual(
      { layer: plan.layer, b: plan.expertBegin, e: plan.expertEnd, n: plan.nExpertTotal, nEmbd: plan.nEmbd, ff: plan.ff },
      { layer: 1, b: 2, e: 5, n: 8, nEmbd: 64, ff: 32 },
    );
    assert.deepEqual(
      plan.matrices.map((x) => x.matrix),
      ['gate', 'up', 'down'],
    );
    for (const x of plan.matrices) {
      const t = findTensor(m.file, x.name);
      assert.ok(t);
      assert.equal(x.bytesPerExpert, 64 * 32 * 4);
      assert.equal(x.start, m.file.dataOffset + t.offset + 2 * x.bytesPerExpert);
      assert.equal(x.end - x.start, 3 * x.bytesPerExpert);
      assert.equal(plan.bytes[x.matrix], x.end - x.start);
    }
    assert.deepEqual(
      plan.matrices.map((x) => x.dims),
      [
        [64, 32, 3],
        [64, 32, 3],
        [32, 64, 3],
      ],
    );
    assert.deepEqual(Object.fromEntries(plan.metadata.map(([k, v]) => [k, v.value])), {
      'general.architecture': 'qwen3moe',
      'expertswarm.slice.version': 1,
      'expertswarm.slice.layer': 1,
      'expertswarm.slice.expert_begin': 2,
      'expertswarm.slice.expert_end': 5,
      'expertswarm.slice.n_expert_total': 8,
      'expertswarm.slice.n_embd': 64,
      'expertswarm.slice.ff': 32,
      'expertswarm.slice.model_name': 'tiny-test',
      'kvasir.expert_shard.layer': 1,
      'kvasir.expert_shard.expert_begin': 2,
      'kvasir.expert_shard.expert_end': 5,
      'kvasir.expert_shard.n_expert_total': 8,
      'kvasir.expert_shard.n_embd': 64,
      'linkcpp.expert_shard.expert_begin': 2,
      'linkcpp.expert_shard.expert_end': 5,
      'linkcpp.expert_shard.n_expert_global': 8,
      'linkcpp.expert_shard.n_embd': 64,
    });
  });

  it("carries Kvasir's shard keys in the types its clients and native worker read; slices with and without them read alike", async () => {
    const m = await makeModel({ nEmbd: 64, ff: 32, nExpert: 8 });
    const { plan, bytes } = await sliceOf(m, 3, 7);
    const file = await readGGUF(bytesSource(bytes));
    const typeOf = (k: string): number | undefined => file.metadata.get(k)?.type;
    const valueAt = (k: string): unknown => file.metadata.get(k)?.value;
    // Kvasir's clients compare layer/begin/end to what they asked for; its worker's gguf_get_val_i32 aborts on non-i32.
    for (const [k, v] of [
      ['layer', 1],
      ['expert_begin', 3],
      ['expert_end', 7],
      ['n_expert_total', 8],
      ['n_embd', 64],
    ] as const) {
      assert.deepEqual([typeOf(`kvasir.expert_shard.${k}`), valueAt(`kvasir.expert_shard.${k}`)], [GGUFValueType.UINT32, v], k);
    }
    for (const [k, v] of [
      ['expert_begin', 3],
      ['expert_end', 7],
      ['n_expert_global', 8],
      ['n_embd', 64],
    ] as const) {
      assert.deepEqual([typeOf(`linkcpp.expert_shard.${k}`), valueAt(`linkcpp.expert_shard.${k}`)], [GGUFValueType.INT32, v], k);
    }
    const without = customSlice(plan, (meta) => {
      for (const k of [...meta.keys()]) if (/^(kvasir|linkcpp)\./.test(k)) meta.delete(k);
    });
    assert.ok(without.length < bytes.length, 'the keys were there to remove');
    const a = await readExpertSliceBytes(bytes);
    const b = await readExpertSliceBytes(without);
    assert.deepEqual(b.info, a.info, 'a slice from before the keys reads as one with them');
    assert.deepEqual((await collect(chunked(without, 5, 1 << 10))).info, a.info, 'and streamed');
    assert.deepEqual((await collect(chunked(bytes, 5, 1 << 10))).info, a.info);
  });

  it('refuses bad requests and bad layers with a stable code', async () => {
    const m = await makeModel({ nEmbd: 64, ff: 32, nExpert: 8 });
    const cases: [string, number, number, number, ExpertSliceErrorCode, RegExp][] = [
      ['dense layer', 0, 0, 2, 'SLICE_NOT_MOE', /layer 0 has no routed experts/],
      ['no such layer', 9, 0, 2, 'SLICE_NOT_MOE', /layer 9/],
      ['empty range', 1, 3, 3, 'SLICE_BAD_RANGE', /\[3, 3\)/],
      ['reversed range', 1, 5, 2, 'SLICE_BAD_RANGE', /\[5, 2\)/],
      ['end past n_expert', 1, 6, 9, 'SLICE_BAD_RANGE', /8 experts/],
      ['begin at n_expert', 1, 8, 9, 'SLICE_BAD_RANGE', /8 experts/],
      ['negative begin', 1, -1, 2, 'SLICE_BAD_RANGE', /expert_begin/],
      ['fractional end', 1, 0, 2.5, 'SLICE_BAD_RANGE', /expert_end/],
      ['NaN layer', Number.NaN, 0, 2, 'SLICE_BAD_RANGE', /layer/],
    ];
    for (const [what, layer, b, e, code, msg] of cases) {
      assert.throws(
        () => planExpertSlice(m.file, layer, b, e),
        (err) => isCode(err, code, msg),
        what,
      );
    }
  });

  it('refuses a layer whose expert tensors are missing or disagree', async () => {
    const cases: [string, Partial<ModelSpec>, RegExp][] = [
      ['no down', { omit: ['down'] }, /lacks blk\.1\.ffn_down_exps\.weight/],
      ['no gate or up', { omit: ['gate', 'up'] }, /lacks blk\.1\.ffn_gate_exps\.weight, blk\.1\.ffn_up_exps\.weight/],
      ['up with another ff', { dims: { up: [64, 64, 8] } }, /ffn_up_exps\.weight \[64, 64, 8\]/],
      ['down with another n_expert', { dims: { down: [32, 64, 4] } }, /expected gate = up = \[64, 32, 8\], down = \[32, 64, 8\]/],
      ['down not transposed', { dims: { down: [64, 32, 8] } }, /down = \[32, 64, 8\]/],
      ['2-D experts', { dims: { gate: [64, 256], up: [64, 256], down: [32, 512] } }, /expert tensors/],
    ];
    for (const [what, spec, msg] of cases) {
      const m = await makeModel({ nEmbd: 64, ff: 32, nExpert: 8, ...spec });
      assert.throws(
        () => planExpertSlice(m.file, 1, 0, 2),
        (e) => isCode(e, 'SLICE_BAD_TENSORS', msg),
        what,
      );
    }
  });
});

describe('writeExpertSlice', () => {
  for (const [name, spec] of MODELS) {
    it(`copies experts byte for byte (${name})`, async () => {
      const m = await makeModel(spec);
      for (const [b, e] of [
        [2, 5],
        [0, spec.nExpert],
        [spec.nExpert - 1, spec.nExpert],
        [0, 1],
      ] as const) {
        const { plan, bytes } = await sliceOf(m, b, e);
        assert.equal(bytes.length, expertSliceByteLength(plan));
        const got = await readExpertSliceBytes(bytes);
        for (const x of EXPERT_MATRICES) {
          assert.deepEqual(got[x], sourceExperts(m, expertTensorName(1, x), b, e), `${x} [${b}, ${e})`);
        }
        const { bytes: _, ...info } = got.info;
        assert.deepEqual(info, {
          layer: 1,
          expertBegin: b,
          expertEnd: e,
          nExpertTotal: spec.nExpert,
          nEmbd: spec.nEmbd,
          ff: spec.ff,
          types: { gate: GGMLType.F32, up: GGMLType.F32, down: GGMLType.F32, ...spec.types },
          architecture: 'qwen3moe',
          modelName: 'tiny-test',
        });
        assert.deepEqual(got.info.bytes, plan.bytes);
        // A valid GGUF: the tensors keep their names and types, ne2 becomes the range width.
        const file = await readGGUF(bytesSource(bytes));
        assert.deepEqual(
          file.tensors.map((t) => [t.name, t.dims, t.type]),
          plan.matrices.map((x) => [x.name, x.dims, x.source.type]),
        );
        assert.equal(file.fileSize, bytes.length);
      }
    });
  }

  it('reads the source in bounded chunks', async () => {
    const m = await makeModel(Q4K_MIX);
    const plan = planExpertSlice(m.file, 1, 1, 5);
    const inner = bytesSource(m.bytes);
    const reads: number[] = [];
    const spy: ByteSource = {
      size: inner.size,
      read: (o, n) => {
        reads.push(n);
        return inner.read(o, n);
      },
    };
    const small = await writeSlice(spy, plan, 1000);
    assert.ok(Math.max(...reads) <= 1000);
    assert.equal(
      reads.reduce((a, b) => a + b, 0),
      plan.bytes.gate + plan.bytes.up + plan.bytes.down,
    );
    assert.deepEqual(small, await writeSlice(inner, plan));
  });

  it('refuses a source too short for the plan before writing anything', async () => {
    const m = await makeModel({ nEmbd: 64, ff: 32, nExpert: 8 });
    const plan = planExpertSlice(m.file, 1, 6, 8);
    const sink = memorySink();
    await rejectsCode(writeExpertSlice(bytesSource(m.bytes.subarray(0, plan.matrices[2]!.end - 1)), plan, sink), 'GGUF_IO', /past the/);
    assert.equal(sink.length, 0);
  });
});

describe('readExpertSliceStream', () => {
  for (const [name, spec] of MODELS) {
    it(`gives the same bytes for any chunking (${name})`, async () => {
      const m = await makeModel(spec);
      const { bytes } = await sliceOf(m, 1, 4);
      const whole = await readExpertSliceBytes(bytes);
      for (let seed = 1; seed <= 12; seed++) {
        // Tiny chunks cost a few promises each under the test runner: keep a stream to a few thousand chunks.
        const max = Math.max([1 << 6, 1 << 12, 1 << 20][seed % 3] as number, bytes.length >> 10);
        const got = await collect(seed % 2 ? chunked(bytes, seed, max) : readable(bytes, seed, max));
        assert.deepEqual(got.info, whole.info);
        assert.deepEqual(got.order, ['gate', 'up', 'down']);
        for (const x of EXPERT_MATRICES) assert.deepEqual(got[x], whole[x], `${x}, seed ${seed}`);
      }
    });
  }

  it('reads one-byte chunks and a single chunk', async () => {
    const { bytes } = await sliceOf(await makeModel(MODELS[1]![1]), 0, 7);
    const whole = await readExpertSliceBytes(bytes);
    for (const got of [await collect(chunked(bytes, 1, 1)), await collect(once(bytes))]) {
      for (const x of EXPERT_MATRICES) assert.deepEqual(got[x], whole[x]);
    }
  });

  it('follows the data offsets, not the order of the tensor infos', async () => {
    const m = await makeModel({ nEmbd: 64, ff: 32, nExpert: 8 });
    const { bytes } = await sliceOf(m, 2, 5);
    // Swap the data offsets of gate and up (same size): the infos stay gate, up, down; the data becomes up, gate, down.
    const file = await readGGUF(bytesSource(bytes));
    const patched = new Uint8Array(bytes);
    const dv = new DataView(patched.buffer);
    const offsetField = (name: string): number => {
      const at = Buffer.from(patched.subarray(0, file.dataOffset)).indexOf(name);
      return at + name.length + 4 + 3 * 8 + 4;
    };
    const [g, u] = [offsetField(expertTensorName(1, 'gate')), offsetField(expertTensorName(1, 'up'))];
    const go = dv.getBigUint64(g, true);
    dv.setBigUint64(g, dv.getBigUint64(u, true), true);
    dv.setBigUint64(u, go, true);
    const whole = await readExpertSliceBytes(patched);
    assert.deepEqual(whole.gate, sourceExperts(m, expertTensorName(1, 'up'), 2, 5));
    for (let seed = 1; seed <= 4; seed++) {
      const got = await collect(chunked(patched, seed, 4096));
      assert.deepEqual(got.order, ['up', 'gate', 'down']);
      for (const x of EXPERT_MATRICES) assert.deepEqual(got[x], whole[x]);
    }
  });

  it('awaits onHeader and onData before reading on (backpressure)', async () => {
    const { bytes } = await sliceOf(await makeModel({ nEmbd: 64, ff: 32, nExpert: 8 }), 0, 8);
    let busy = false;
    let headerDone = false;
    let calls = 0;
    async function* source(): AsyncGenerator<Uint8Array> {
      for await (const c of chunked(bytes, 7, 3000)) {
        assert.ok(!busy, 'the stream was read while a handler was pending');
        yield c;
      }
    }
    const tick = (): Promise<void> => new Promise((r) => setImmediate(r));
    await readExpertSliceStream(source(), {
      async onHeader() {
        busy = true;
        await tick();
        busy = false;
        headerDone = true;
      },
      async onData() {
        assert.ok(headerDone);
        busy = true;
        calls++;
        await tick();
        busy = false;
      },
    });
    assert.ok(calls > 10);
  });

  it('hands out views of the stream chunks and readExpertSliceBytes views of its input', async () => {
    const { bytes } = await sliceOf(await makeModel({ nEmbd: 64, ff: 32, nExpert: 8 }), 0, 2);
    const whole = await readExpertSliceBytes(bytes);
    for (const x of EXPERT_MATRICES) assert.equal(whole[x].buffer, bytes.buffer);
    const buffers = new Set<ArrayBufferLike>();
    await readExpertSliceStream(once(bytes), { onData: (_m, _o, c) => void buffers.add(c.buffer) });
    assert.deepEqual([...buffers], [bytes.buffer]);
  });

  describe('errors', () => {
    it('reports a stream that ends early, with the bytes missing', async () => {
      for (const [name, spec] of MODELS) {
        const m = await makeModel(spec);
        const { bytes } = await sliceOf(m, 1, 4);
        const file = await readGGUF(bytesSource(bytes));
        const dataEnd = Math.max(...file.tensors.map((t) => file.dataOffset + t.offset + t.byteLength));
        const headerCuts = [0, 3, 20, 100, file.dataOffset - 40, file.dataOffset - 1];
        const dataCuts = [file.dataOffset, file.dataOffset + 1, file.dataOffset + file.tensors[1]!.offset, dataEnd - 1];
        for (const cut of headerCuts) {
          for (const seed of [1, 2]) {
            await rejectsCode(collect(chunked(bytes.subarray(0, cut), seed, 64)), 'GGUF_TRUNCATED', undefined);
          }
        }
        for (const cut of dataCuts) {
          const missing = new RegExp(`ended after ${cut} bytes, ${dataEnd - cut} bytes short`);
          await rejectsCode(collect(chunked(bytes.subarray(0, cut), 3, 1 << 12)), 'GGUF_TRUNCATED', missing);
          await rejectsCode(collect(readable(bytes.subarray(0, cut), 4)), 'GGUF_TRUNCATED', missing);
        }
        // The last tensor's padding is optional.
        if (dataEnd < bytes.length) {
          assert.ok(name.includes('padded'));
          await collect(chunked(bytes.subarray(0, dataEnd), 5));
          await collect(chunked(bytes.subarray(0, dataEnd + 1), 5));
        }
      }
    });

    it('refuses bytes after the end of the slice', async () => {
      for (const [, spec] of MODELS) {
        const { bytes } = await sliceOf(await makeModel(spec), 1, 4);
        for (const extra of [new Uint8Array(1), randomBytes(100, 3), new Uint8Array(70_000)]) {
          const long = concat(bytes, extra);
          const stream = readable(long, 6, 1 << 12);
          await rejectsCode(collect(stream), 'SLICE_TRAILING_BYTES', new RegExp(`byte ${bytes.length}\\)`));
          if (extra.length > 1 << 12) assert.ok(stream.cancelled(), 'the stream was not cancelled');
          await rejectsCode(readExpertSliceBytes(long), 'SLICE_TRAILING_BYTES');
        }
      }
    });

    it('refuses a header over maxHeaderBytes without buffering the stream', async () => {
      const m = await makeModel({ nEmbd: 64, ff: 32, nExpert: 8 });
      const plan = planExpertSlice(m.file, 1, 0, 2);
      const long = customSlice(plan, (meta) => meta.set('expertswarm.slice.model_name', str('x'.repeat(100_000))));
      await rejectsCode(collect(chunked(long, 1), { maxHeaderBytes: 64 * 1024 }), 'GGUF_LIMIT', /maxHeaderBytes \(65536\)/);
      await collect(chunked(long, 1), { maxHeaderBytes: 128 * 1024 });

      // A forged header announcing a 1 TiB key, followed by an endless stream.
      const forged = new Uint8Array(32);
      const dv = new DataView(forged.buffer);
      forged.set([0x47, 0x47, 0x55, 0x46]);
      dv.setUint32(4, 3, true);
      dv.setBigUint64(8, 0n, true);
      dv.setBigUint64(16, 1n, true);
      dv.setBigUint64(24, 1n << 40n, true);
      let pulled = 0;
      async function* endless(): AsyncGenerator<Uint8Array> {
        yield forged;
        for (;;) {
          pulled += 4096;
          yield new Uint8Array(4096);
        }
      }
      for (const maxHeaderBytes of [4096, undefined]) {
        pulled = 0;
        await rejectsCode(collect(endless(), maxHeaderBytes === undefined ? {} : { maxHeaderBytes }), 'GGUF_LIMIT');
        assert.ok(pulled <= 2 * 1024 * 1024, `pulled ${pulled} bytes`);
      }
    });

    it('refuses a GGUF that is not an expert slice', async () => {
      const m = await makeModel({ nEmbd: 64, ff: 32, nExpert: 8 });
      const plan = planExpertSlice(m.file, 1, 2, 5);
      const [gate, up, down] = plan.matrices as [ExpertSliceMatrixPlan, ExpertSliceMatrixPlan, ExpertSliceMatrixPlan];
      const cases: [string, Uint8Array, RegExp][] = [
        ['the whole model', m.bytes, /expertswarm\.slice\.version" is missing/],
        ['no slice keys', customSlice(plan, (meta) => meta.clear()), /is missing, expected u32/],
        ['another version', customSlice(plan, (meta) => meta.set('expertswarm.slice.version', u32(2))), /version 2 is not supported/],
        ['a key of the wrong type', customSlice(plan, (meta) => meta.set('expertswarm.slice.ff', str('32'))), /slice\.ff" is str/],
        ['keys unlike the shapes', customSlice(plan, (meta) => meta.set('expertswarm.slice.expert_end', u32(6))), /down = \[32, 64, 4\]/],
        ['an empty range', customSlice(plan, (meta) => meta.set('expertswarm.slice.expert_begin', u32(5))), /\[5, 5\) of 8/],
        ['a missing tensor', customSlice(plan, () => {}, [gate, up]), /found blk\.1\.ffn_gate_exps\.weight, blk\.1\.ffn_up_exps\.weight$/],
        ['another layer', customSlice(plan, (meta) => meta.set('expertswarm.slice.layer', u32(2))), /blk\.2\.ffn_gate_exps/],
        ['an extra tensor', customSlice(plan, () => {}, [gate, up, down, { ...down, name: 'extra' }]), /found .*extra/],
      ];
      for (const [what, bytes, msg] of cases) {
        await rejectsCode(collect(chunked(bytes, 1, 1 << 12)), 'SLICE_NOT_A_SLICE', msg).catch((e) => assert.fail(`${what}: ${e}`));
        await rejectsCode(readExpertSliceBytes(bytes), 'SLICE_NOT_A_SLICE', msg);
      }
    });

    it('passes GGUF errors through and cancels the stream when a handler throws', async () => {
      await rejectsCode(collect(chunked(randomBytes(5000, 1), 1)), 'GGUF_BAD_MAGIC');
      await rejectsCode(collect(chunked(new Uint8Array(0), 1)), 'GGUF_TRUNCATED');
      await rejectsCode(collect(once('oops')), 'GGUF_IO', /yielded string/);

      const { bytes } = await sliceOf(await makeModel({ nEmbd: 64, ff: 32, nExpert: 8 }), 0, 8);
      const stream = readable(bytes, 1, 1 << 10);
      const boom = new Error('GPU lost');
      await assert.rejects(readExpertSliceStream(stream, { onData: () => Promise.reject(boom) }), (e) => e === boom);
      assert.ok(stream.cancelled());
      let finished = false;
      async function* gen(): AsyncGenerator<Uint8Array> {
        try {
          yield* chunked(bytes, 2, 1 << 10);
        } finally {
          finished = true;
        }
      }
      await assert.rejects(
        readExpertSliceStream(gen(), {
          onHeader: () => {
            throw boom;
          },
          onData: () => {},
        }),
        (e) => e === boom,
      );
      assert.ok(finished, 'the iterator was not closed');
    });
  });
});

describe('expert slice of a generated model file', () => {
  it('slices layer 1 experts [2, 5) of a qwen3moe Q4_K model', async () => {
    const model = await testModel({
      arch: 'qwen3moe',
      layers: 2,
      nEmbd: 256,
      ff: 256,
      nExpert: 8,
      nExpertUsed: 2,
      type: GGMLType.Q4_K,
      seed: 5,
    });
    const src = await openFileSource(model.path);
    try {
      const file = await readGGUF(src);
      const plan = planExpertSlice(file, 1, 2, 5);
      const bytes = await writeSlice(src, plan);
      assert.equal(bytes.length, expertSliceByteLength(plan));
      const perExpert = (256 / 256) * 144 * 256;
      const got = await collect(chunked(bytes, 11, 1 << 14));
      assert.equal(got.info.modelName, 'expertswarm-tiny-qwen3moe');
      assert.deepEqual(got.info.types, { gate: GGMLType.Q4_K, up: GGMLType.Q4_K, down: GGMLType.Q4_K });
      for (const x of EXPERT_MATRICES) {
        const t = findTensor(file, expertTensorName(1, x));
        assert.ok(t);
        const want = await src.read(file.dataOffset + t.offset + 2 * perExpert, 3 * perExpert);
        assert.deepEqual(got[x], want, x);
      }
    } finally {
      await src.close();
    }
  });

  it('refuses the dense leading layer of a deepseek model', async () => {
    const model = await testModel({ arch: 'deepseek', layers: 2, seed: 5 });
    const src = await openFileSource(model.path);
    try {
      const file = await readGGUF(src);
      throwsCode(() => planExpertSlice(file, 0, 0, 2), 'SLICE_NOT_MOE');
      assert.equal(planExpertSlice(file, 1, 0, 2).nExpertTotal, model.config.nExpert);
    } finally {
      await src.close();
    }
  });
});
