/**
 * Mutation fuzzing of the GGUF reader: valid files from the writer, randomly corrupted, must either parse into a
 * self-consistent result or fail with a GGUFError — never another error, never a hang, never unbounded memory.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  GGMLType,
  GGUFError,
  GGUFValueType,
  arr,
  bool,
  bytesSource,
  encodeGGUF,
  f32,
  i64,
  readGGUF,
  str,
  u32,
  u64,
  u8,
} from '../../gguf/index.ts';
import type { GGUFFile } from '../../gguf/index.ts';
import { mulberry32 } from '../../shaders/random.ts';

interface Field {
  pos: number;
  size: 4 | 8;
}

/** Walks a valid file and records where its counts, lengths, type ids, dims and offsets are. */
function fieldPositions(b: Uint8Array): Field[] {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const out: Field[] = [
    { pos: 4, size: 4 },
    { pos: 8, size: 8 },
    { pos: 16, size: 8 },
  ];
  let p = 24;
  const u32 = (): number => {
    out.push({ pos: p, size: 4 });
    const v = dv.getUint32(p, true);
    p += 4;
    return v;
  };
  const u64 = (): number => {
    out.push({ pos: p, size: 8 });
    const v = Number(dv.getBigUint64(p, true));
    p += 8;
    return v;
  };
  const string = (): void => {
    const len = u64();
    p += len;
  };
  const sizes: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const arrayBody = (): void => {
    const t = u32();
    const n = u64();
    for (let i = 0; i < n; i++) value(t);
  };
  const value = (t: number): void => {
    if (t === GGUFValueType.STRING) string();
    else if (t === GGUFValueType.ARRAY) arrayBody();
    else p += sizes[t]!;
  };
  const nTensors = Number(dv.getBigUint64(8, true));
  const nKv = Number(dv.getBigUint64(16, true));
  for (let i = 0; i < nKv; i++) {
    string();
    const t = u32();
    value(t);
  }
  for (let i = 0; i < nTensors; i++) {
    string();
    const nd = u32();
    for (let d = 0; d < nd; d++) u64();
    u32();
    u64();
  }
  return out;
}

function baseFiles(): Uint8Array[] {
  const data = (n: number, v: number): Uint8Array => new Uint8Array(n).fill(v);
  return [
    encodeGGUF({
      metadata: [
        ['general.architecture', str('llama')],
        ['general.name', str('fuzz ✓')],
        ['llama.block_count', u32(2)],
        ['llama.rope.freq_base', f32(10000)],
        ['x.u64', u64(123n)],
        ['x.i64', i64(-5n)],
        ['x.bool', bool(true)],
        ['x.u8', u8(9)],
      ],
      tensors: [
        { name: 'token_embd.weight', dims: [32, 4], type: GGMLType.F16, data: data(256, 1) },
        { name: 'blk.0.attn_q.weight', dims: [32, 2], type: GGMLType.Q8_0, data: data(68, 2) },
      ],
    }),
    encodeGGUF({
      alignment: 64,
      metadata: [
        ['tokenizer.ggml.model', str('gpt2')],
        ['tokenizer.ggml.tokens', arr(GGUFValueType.STRING, ['a', 'b', 'Ġthe', '', '🦙', '<s>'])],
        ['tokenizer.ggml.scores', arr(GGUFValueType.FLOAT32, [0, -1, -2, -3, -4, -5])],
        ['tokenizer.ggml.token_type', arr(GGUFValueType.INT32, [1, 1, 1, 1, 1, 3])],
        ['tokenizer.ggml.merges', arr(GGUFValueType.STRING, ['a b', 'Ġ t'])],
        [
          'x.nested',
          arr(GGUFValueType.ARRAY, [arr(GGUFValueType.UINT16, [1, 2]), arr(GGUFValueType.STRING, ['q']), arr(GGUFValueType.ARRAY, [])]),
        ],
        ['x.bools', arr(GGUFValueType.BOOL, [true, false])],
        ['x.u64s', arr(GGUFValueType.UINT64, [1n, 2n])],
      ],
      tensors: [
        { name: 'a', dims: [256], type: GGMLType.Q4_K, data: data(144, 3) },
        { name: 'b', dims: [4, 1, 1, 2], type: GGMLType.F32, data: data(32, 4) },
        { name: 'c', dims: [1], type: GGMLType.I8, data: data(1, 5) },
      ],
    }),
    encodeGGUF({ version: 2, tensors: [{ name: 'only', dims: [8], type: GGMLType.BF16, data: data(16, 6) }] }),
  ];
}

const INTERESTING_U64: bigint[] = [
  0n,
  1n,
  2n,
  3n,
  4n,
  5n,
  8n,
  31n,
  32n,
  33n,
  63n,
  64n,
  255n,
  256n,
  1000n,
  2n ** 31n,
  2n ** 32n - 1n,
  2n ** 32n,
  2n ** 40n,
  2n ** 53n,
  2n ** 53n + 1n,
  2n ** 63n,
  2n ** 64n - 1n,
];

function mutate(src: Uint8Array, fields: Field[], rnd: () => number): Uint8Array {
  let b = src.slice();
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const n = 1 + Math.floor(rnd() * 3);
  for (let m = 0; m < n; m++) {
    const kind = Math.floor(rnd() * 7);
    if (b.length === 0) break;
    const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
    switch (kind) {
      case 0: {
        // flip a bit, mostly in the header region
        const at = Math.floor(rnd() * Math.min(b.length, rnd() < 0.8 ? 400 : b.length));
        b[at] = b[at]! ^ (1 << Math.floor(rnd() * 8));
        break;
      }
      case 1: {
        const at = Math.floor(rnd() * b.length);
        b[at] = Math.floor(rnd() * 256);
        break;
      }
      case 2:
        b = b.slice(0, Math.floor(rnd() * b.length));
        break;
      case 3: {
        // overwrite a count / length / dim / offset / type field with an interesting or random value
        const f = pick(fields);
        if (f.pos + f.size > b.length) break;
        const v = rnd() < 0.7 ? pick(INTERESTING_U64) : BigInt(Math.floor(rnd() * 2 ** 32)) * BigInt(Math.floor(rnd() * 2 ** 32));
        const near = rnd() < 0.2 ? BigInt(b.length) + BigInt(Math.floor(rnd() * 17) - 8) : v;
        if (f.size === 8) dv.setBigUint64(f.pos, BigInt.asUintN(64, near), true);
        else dv.setUint32(f.pos, Number(BigInt.asUintN(32, near)), true);
        break;
      }
      case 4: {
        // insert a random u64 at a field position (shifts everything after it)
        const f = pick(fields);
        if (f.pos > b.length) break;
        const ins = new Uint8Array(8);
        new DataView(ins.buffer).setBigUint64(
          0,
          BigInt.asUintN(64, rnd() < 0.5 ? pick(INTERESTING_U64) : BigInt(Math.floor(rnd() * 2 ** 48))),
          true,
        );
        const next = new Uint8Array(b.length + 8);
        next.set(b.subarray(0, f.pos));
        next.set(ins, f.pos);
        next.set(b.subarray(f.pos), f.pos + 8);
        b = next;
        break;
      }
      case 5: {
        // delete a small range
        const at = Math.floor(rnd() * b.length);
        const end = Math.min(b.length, at + 1 + Math.floor(rnd() * 8));
        const next = new Uint8Array(b.length - (end - at));
        next.set(b.subarray(0, at));
        next.set(b.subarray(end), at);
        b = next;
        break;
      }
      case 6: {
        // duplicate a chunk of the file at another place
        const from = Math.floor(rnd() * b.length);
        const len = Math.min(b.length - from, 1 + Math.floor(rnd() * 32));
        const to = Math.floor(rnd() * b.length);
        const next = new Uint8Array(b.length + len);
        next.set(b.subarray(0, to));
        next.set(b.subarray(from, from + len), to);
        next.set(b.subarray(to), to + len);
        b = next;
        break;
      }
    }
  }
  return b;
}

const TIGHT = { maxArrayItems: 5, maxStringBytes: 24, maxTensors: 2, maxMetadataEntries: 7, maxArrayDepth: 1 };

function checkConsistent(f: GGUFFile, size: number): void {
  assert.equal(f.fileSize, size);
  assert.ok(f.version === 2 || f.version === 3);
  assert.ok(f.alignment >= 1 && (f.alignment & (f.alignment - 1)) === 0);
  assert.ok(f.dataOffset <= size);
  if (f.tensors.length > 0) assert.equal(f.dataOffset % f.alignment, 0);
  const names = new Set<string>();
  for (const t of f.tensors) {
    assert.ok(!names.has(t.name));
    names.add(t.name);
    assert.ok(t.dims.length >= 1 && t.dims.length <= 4);
    for (const d of t.dims) assert.ok(Number.isSafeInteger(d) && d >= 1);
    assert.equal(t.offset % f.alignment, 0);
    assert.ok(Number.isSafeInteger(t.byteLength) && t.byteLength > 0);
    assert.ok(f.dataOffset + t.offset + t.byteLength <= size, `tensor ${t.name} inside the file`);
  }
}

describe('GGUF reader fuzz', () => {
  it('3000 mutated files: success is self-consistent, failure is a GGUFError; fast and bounded memory', { timeout: 30_000 }, async () => {
    const rnd = mulberry32(0x5eed1234);
    const bases = baseFiles();
    const fields = bases.map(fieldPositions);
    for (const b of bases) checkConsistent(await readGGUF(bytesSource(b)), b.length);

    const heap0 = process.memoryUsage().heapUsed;
    let maxHeapGrowth = 0;
    let ok = 0;
    const codes = new Map<string, number>();
    let slowest = 0;
    const t0 = performance.now();
    const N = 3000;
    for (let i = 0; i < N; i++) {
      const which = i % bases.length;
      const bytes = mutate(bases[which]!, fields[which]!, rnd);
      const s = performance.now();
      try {
        // every 4th file under tight caps, so the GGUF_LIMIT paths are fuzzed too
        const f = await readGGUF(bytesSource(bytes), i % 4 === 3 ? TIGHT : undefined);
        checkConsistent(f, bytes.length);
        ok++;
      } catch (e) {
        if (!(e instanceof GGUFError)) {
          assert.fail(
            `iteration ${i}: non-GGUFError ${String(e)}\n${e instanceof Error ? e.stack : ''}\nfile: ${Buffer.from(bytes).toString('hex')}`,
          );
        }
        codes.set(e.code, (codes.get(e.code) ?? 0) + 1);
      }
      slowest = Math.max(slowest, performance.now() - s);
      if (i % 100 === 0) maxHeapGrowth = Math.max(maxHeapGrowth, process.memoryUsage().heapUsed - heap0);
    }
    maxHeapGrowth = Math.max(maxHeapGrowth, process.memoryUsage().heapUsed - heap0);
    const elapsed = performance.now() - t0;
    // Diagnostics for whoever reads the test log.
    console.log(
      `fuzz: ${N} files in ${elapsed.toFixed(0)} ms (slowest ${slowest.toFixed(1)} ms), ${ok} parsed, errors ${JSON.stringify(Object.fromEntries(codes))}, max heap growth ${(maxHeapGrowth / 1e6).toFixed(1)} MB`,
    );
    assert.ok(ok > 0 && codes.size >= 4, 'the mutations reach both success and several error kinds');
    assert.ok(slowest < 1000, `one file took ${slowest} ms`);
    assert.ok(maxHeapGrowth < 100e6, `heap grew by ${maxHeapGrowth} bytes`);
  });

  it('huge counts at every count position fail fast without allocating', async () => {
    const bases = baseFiles();
    for (let k = 0; k < bases.length; k++) {
      const base = bases[k]!;
      for (const f of fieldPositions(base)) {
        if (f.size !== 8) continue;
        for (const v of [2n ** 40n, 2n ** 62n, 2n ** 64n - 1n]) {
          const b = base.slice();
          new DataView(b.buffer).setBigUint64(f.pos, v, true);
          const heap = process.memoryUsage().heapUsed;
          const s = performance.now();
          await assert.rejects(readGGUF(bytesSource(b)), (e: unknown) => e instanceof GGUFError);
          assert.ok(performance.now() - s < 200);
          assert.ok(process.memoryUsage().heapUsed - heap < 50e6);
        }
      }
    }
  });
});
