/**
 * The shard server (hub/shards.ts) in a real hub over a generated deepseek model (layer 0 dense, shared experts in
 * every MoE layer, Q8_0): a downloaded slice's digest, its bytes against the slice built directly, its parse and its
 * load in ExpertRuntime (SwiftShader), Range resumes and conditionals, Kvasir's path, the refusal table, and the
 * download slots. In-process (fastify inject) except one download over a real port, the way a volunteer streams it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { GGMLType } from '../../gguf/quant-types.ts';
import { openFileSource, readGGUFFile } from '../../gguf/node-io.ts';
import { bytesSource, readGGUF } from '../../gguf/reader.ts';
import { memorySink } from '../../gguf/writer.ts';
import { expertTensorName, planExpertSlice, readExpertSliceBytes, writeExpertSlice } from '../../gguf/expert-slice.ts';
import { readExpertSliceStream } from '../../gguf/expert-slice-stream.ts';
import { ExpertRuntime } from '../../shaders/runtime.ts';
import { dequantizeExperts, nmse, referenceCall } from '../../shaders/reference/expert-call.ts';
import { isHubError } from '../../hub/errors.ts';
import { DownloadSlots, byteRange, ifRangeHolds, noneMatch, registerShardRoutes } from '../../hub/shards.ts';
import { testModel } from '../../harness/models.ts';
import { newVolunteer, testHub, type TestHub } from '../../harness/hub-fixtures.ts';
import { wgslDevice } from '../../harness/wgsl-backend.ts';

const model = await testModel({
  arch: 'deepseek',
  layers: 3,
  nEmbd: 64,
  ff: 128,
  sharedFf: 128,
  nExpert: 32,
  nExpertUsed: 4,
  type: GGMLType.Q8_0,
  seed: 11,
});
const N_EXPERT = 32;
const models = [{ path: model.path, name: 'ds' }];

/** The slice built directly from the model file with gguf/expert-slice.ts. */
async function directSlice(layer: number, begin: number, end: number): Promise<Uint8Array> {
  const plan = planExpertSlice(await readGGUFFile(model.path), layer, begin, end);
  const src = await openFileSource(model.path);
  try {
    const sink = memorySink();
    await writeExpertSlice(src, plan, sink);
    return sink.bytes();
  } finally {
    await src.close();
  }
}

const sha256 = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');
const shardUrl = (layer: number, begin: number, end: number, model = 'ds'): string =>
  `/api/expert-shard?model=${model}&layer=${layer}&expert_begin=${begin}&expert_end=${end}`;

async function get(
  t: TestHub,
  url: string,
  token: string | undefined,
  headers: Record<string, string> = {},
  method: 'GET' | 'HEAD' = 'GET',
): Promise<{ status: number; headers: Record<string, unknown>; body: Uint8Array }> {
  const r = await t.app.inject({ method, url, headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers } });
  return { status: r.statusCode, headers: r.headers, body: new Uint8Array(r.rawPayload) };
}

test('a slice downloads with its digest, is the slice built directly, parses, and loads in ExpertRuntime', async () => {
  const t = await testHub({ models });
  try {
    const token = await t.login(newVolunteer());
    const r = await get(t, shardUrl(1, 4, 20), token);
    assert.equal(r.status, 200);
    const hex = sha256(r.body);
    assert.equal(r.headers['x-expertswarm-shard-digest'], `sha256:${hex}`);
    assert.equal(r.headers.etag, `"sha256-${hex}"`);
    assert.equal(r.headers['cache-control'], 'public, max-age=31536000, immutable');
    assert.equal(r.headers['content-type'], 'application/octet-stream');
    assert.equal(r.headers['accept-ranges'], 'bytes');
    assert.equal(Number(r.headers['content-length']), r.body.length);
    assert.deepEqual(r.body, await directSlice(1, 4, 20), 'byte for byte the slice writeExpertSlice builds');

    // Exactly the three routed-expert tensors: no router (ffn_gate_inp), no shared experts (ffn_*_shexp).
    const parsed = await readGGUF(bytesSource(r.body));
    assert.deepEqual(
      parsed.tensors.map((x) => x.name),
      ['gate', 'up', 'down'].map((m) => expertTensorName(1, m as 'gate')),
    );
    const slice = await readExpertSliceBytes(r.body);
    assert.deepEqual(
      [slice.info.layer, slice.info.expertBegin, slice.info.expertEnd, slice.info.nExpertTotal, slice.info.nEmbd, slice.info.ff],
      [1, 4, 20, N_EXPERT, 64, 128],
    );
    assert.deepEqual(slice.info.types, { gate: GGMLType.Q8_0, up: GGMLType.Q8_0, down: GGMLType.Q8_0 });
    // A byte copy of the model's experts [4, 20).
    const whole = await readGGUFFile(model.path);
    const src = await openFileSource(model.path);
    try {
      for (const m of ['gate', 'up', 'down'] as const) {
        const ti = whole.tensors.find((x) => x.name === expertTensorName(1, m))!;
        const per = ti.byteLength / N_EXPERT;
        assert.deepEqual(slice[m], await src.read(whole.dataOffset + ti.offset + 4 * per, 16 * per), `${m}: experts 4..20 copied`);
      }
    } finally {
      await src.close();
    }
    // The volunteer's forward-only reader agrees on odd chunk boundaries.
    const got = { gate: 0, up: 0, down: 0 };
    const chunks = async function* () {
      for (let at = 0; at < r.body.length; at += 4093) yield r.body.slice(at, at + 4093);
    };
    const info = await readExpertSliceStream(chunks(), {
      onData: (m, off, c) => {
        assert.equal(off, got[m], `${m}: data arrives in order, without gaps`);
        assert.deepEqual(c, slice[m].subarray(off, off + c.length));
        got[m] = off + c.length;
      },
    });
    assert.deepEqual(got, info.bytes);

    // What ExpertRuntime.fromGGUF loads, computing what the CPU reference computes from the same bytes.
    const device = await wgslDevice();
    const rt = await ExpertRuntime.fromGGUF(device, r.body);
    try {
      const experts = dequantizeExperts({
        nEmbd: 64,
        ff: 128,
        nExpert: 16,
        types: slice.info.types,
        gate: slice.gate,
        up: slice.up,
        down: slice.down,
      });
      const nTokens = 3;
      const nUsed = 2;
      const rows = Float32Array.from({ length: nTokens * 64 }, (_, i) => Math.sin(i * 0.37));
      const ids = Int32Array.from([0, 15, 3, 7, 9, 1]);
      const probs = Float32Array.from([0.6, 0.4, 0.5, 0.5, 0.9, 0.1]);
      const e = nmse(await rt.compute(rows, ids, probs, nTokens, nUsed), referenceCall(experts, { rows, ids, probs, nTokens, nUsed }));
      assert.ok(e <= 1e-9, `NMSE ${e} against the CPU reference (bound of test/gpu/kernels.test.ts)`);
    } finally {
      rt.dispose();
    }

    // Over a real port, streamed straight into GPU buffers as a volunteer does (ExpertRuntime.load over fetch's body).
    await t.app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = t.app.server.address() as AddressInfo;
    const url = `http://127.0.0.1:${port}${shardUrl(2, 0, N_EXPERT)}`;
    let opened = 0;
    const streamed = await ExpertRuntime.load(device, {
      open: async () => {
        const res = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
        assert.equal(res.status, 200);
        opened++;
        return res.body!;
      },
    });
    try {
      assert.equal(opened, 1);
      assert.equal(streamed.capabilities().slice.nExpert, N_EXPERT);
    } finally {
      streamed.dispose();
    }
    const res = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
    const body = new Uint8Array(await res.arrayBuffer());
    assert.equal(res.headers.get('x-expertswarm-shard-digest'), `sha256:${sha256(body)}`);
    assert.deepEqual(body, await directSlice(2, 0, N_EXPERT));
  } finally {
    await t.close();
  }
});

test('Range resumes, If-Range, If-None-Match, HEAD and the Kvasir path give the same bytes', async () => {
  const t = await testHub({ models });
  try {
    const token = await t.login(newVolunteer());
    const full = await get(t, shardUrl(1, 0, 8), token);
    assert.equal(full.status, 200);
    const n = full.body.length;
    const etag = full.headers.etag as string;
    const half = Math.floor(n / 2);

    const first = await get(t, shardUrl(1, 0, 8), token, { range: `bytes=0-${half - 1}` });
    assert.deepEqual(
      [first.status, first.headers['content-range'], Number(first.headers['content-length'])],
      [206, `bytes 0-${half - 1}/${n}`, half],
    );
    assert.equal(first.headers.etag, etag, 'a part carries the whole body’s validators');
    // The shard server's load hint (volunteer/source-choice.ts): this range's own slot of the 64, while it was sent.
    assert.equal(first.headers['x-expertswarm-shard-load'], '0.02');
    const rest = await get(t, shardUrl(1, 0, 8), token, { range: `bytes=${half}-`, 'if-range': etag });
    assert.deepEqual([rest.status, rest.headers['content-range']], [206, `bytes ${half}-${n - 1}/${n}`]);
    const joined = new Uint8Array(n);
    joined.set(first.body, 0);
    joined.set(rest.body, half);
    assert.deepEqual(joined, full.body, 'first half + resume = the whole slice');

    const suffix = await get(t, shardUrl(1, 0, 8), token, { range: 'bytes=-100' });
    assert.deepEqual([suffix.status, suffix.body], [206, full.body.subarray(n - 100)]);
    const past = await get(t, shardUrl(1, 0, 8), token, { range: 'bytes=10-99999999' });
    assert.deepEqual([past.status, past.headers['content-range'], past.body], [206, `bytes 10-${n - 1}/${n}`, full.body.subarray(10)]);
    for (const [range, what] of [
      ['bytes=9-3', 'invalid (last < first): ignored'],
      ['bytes=0-1,5-6', 'several ranges: ignored'],
      ['items=0-3', 'another unit: ignored'],
    ] as const) {
      const r = await get(t, shardUrl(1, 0, 8), token, { range });
      assert.deepEqual([r.status, r.body.length], [200, n], what);
    }
    for (const range of [`bytes=${n}-`, `bytes=${n + 5}-${n + 9}`, 'bytes=-0']) {
      const r = await get(t, shardUrl(1, 0, 8), token, { range });
      const j = JSON.parse(Buffer.from(r.body).toString());
      assert.deepEqual([r.status, j.code, r.headers['content-range']], [416, 'RANGE_NOT_SATISFIABLE', `bytes */${n}`], range);
      assert.equal(r.headers['cache-control'], undefined, 'a refusal is not cached forever');
    }
    for (const [ifRange, status] of [
      [etag, 206],
      [`W/${etag}`, 200],
      ['"sha256-00"', 200],
      ['Wed, 21 Oct 2015 07:28:00 GMT', 200],
    ] as const) {
      const r = await get(t, shardUrl(1, 0, 8), token, { range: 'bytes=0-9', 'if-range': ifRange });
      assert.equal(r.status, status, `If-Range ${ifRange}`);
      assert.equal(r.body.length, status === 206 ? 10 : n);
    }

    for (const [inm, status] of [
      [etag, 304],
      [`W/${etag}`, 304],
      [`"sha256-00", ${etag}`, 304],
      ['*', 304],
      ['"sha256-00"', 200],
    ] as const) {
      const r = await get(t, shardUrl(1, 0, 8), token, { 'if-none-match': inm, range: 'bytes=0-9' });
      assert.equal(r.status, status === 304 ? 304 : 206, `If-None-Match ${inm}`);
      if (status === 304) {
        assert.equal(r.body.length, 0);
        assert.equal(r.headers.etag, etag);
        assert.equal(r.headers['x-expertswarm-shard-digest'], full.headers['x-expertswarm-shard-digest']);
        assert.equal(r.headers['content-length'], undefined);
      }
    }
    const unsatisfiableButCached = await get(t, shardUrl(1, 0, 8), token, { 'if-none-match': etag, range: `bytes=${n}-` });
    assert.equal(unsatisfiableButCached.status, 304, 'If-None-Match is evaluated before Range');

    const head = await get(t, shardUrl(1, 0, 8), token, {}, 'HEAD');
    assert.deepEqual([head.status, Number(head.headers['content-length']), head.body.length], [200, n, 0]);
    assert.equal(head.headers.etag, etag);
    const headRange = await get(t, shardUrl(1, 0, 8), token, { range: 'bytes=0-9' }, 'HEAD');
    assert.deepEqual([headRange.status, Number(headRange.headers['content-length'])], [200, n], 'HEAD ignores Range');

    const kvasir = await get(t, '/api/proxy/models/ds/expert-shard?layers=1:2&experts=0:8', token);
    assert.equal(kvasir.status, 200);
    assert.deepEqual(kvasir.body, full.body, "Kvasir's path gives the same bytes");
    assert.equal(kvasir.headers.etag, etag);
    const kvasirHead = await get(t, '/api/proxy/models/ds/expert-shard?layers=1:2&experts=0:8', token, {}, 'HEAD');
    assert.deepEqual([kvasirHead.status, kvasirHead.headers.etag], [200, etag]);
    const kvasirPart = await get(t, '/api/proxy/models/ds/expert-shard?layers=1:2&experts=0:8', token, { range: `bytes=${half}-` });
    assert.deepEqual(kvasirPart.body, full.body.subarray(half));
    // Both query forms on both paths: Kvasir's bridge and clients send layer/expert_begin/expert_end on its path today.
    for (const url of [
      '/api/proxy/models/ds/expert-shard?layer=1&expert_begin=0&expert_end=8',
      '/api/proxy/models/ds/expert-shard?layer=1&expert_begin=0&expert_end=8&model=ds',
      '/api/expert-shard?model=ds&layers=1:2&experts=0:8',
    ]) {
      const r = await get(t, url, token);
      assert.deepEqual([r.status, r.headers.etag], [200, etag], url);
      assert.deepEqual(r.body, full.body, `${url}: the same bytes`);
    }

    const other = await get(t, shardUrl(1, 8, 16), token);
    assert.notEqual(other.headers.etag, etag, 'another range, another digest');
    assert.equal(other.headers['x-expertswarm-shard-digest'], `sha256:${sha256(other.body)}`);
  } finally {
    await t.close();
  }
});

test('slices past the in-memory size stream from the model file, in any chunking, ranges across every boundary', async () => {
  const t = await testHub({ models });
  const app = Fastify();
  try {
    // memorySliceMaxBytes 0: every slice streams from the file; 1000-byte reads put chunk edges everywhere.
    // loadHint false (the hub's --peers-first): no shard-load header.
    registerShardRoutes(app, t.hub, {
      clientKey: () => 'here',
      limits: { memorySliceMaxBytes: 0, readChunkBytes: 1000, perWallet: 100 },
      loadHint: false,
    });
    const token = await t.login(newVolunteer());
    const headers = { authorization: `Bearer ${token}` };
    for (const [layer, begin, end] of [
      [1, 0, N_EXPERT],
      [2, 31, 32],
      [2, 5, 9],
    ] as const) {
      const want = await directSlice(layer, begin, end);
      const url = shardUrl(layer, begin, end);
      const r = await app.inject({ method: 'GET', url, headers });
      assert.equal(r.statusCode, 200);
      assert.deepEqual(new Uint8Array(r.rawPayload), want, `layer ${layer} [${begin}, ${end})`);
      assert.equal(r.headers['x-expertswarm-shard-digest'], `sha256:${sha256(want)}`);
      assert.equal(r.headers['x-expertswarm-shard-load'], undefined, 'no load hint with loadHint false');
      // Range starts in the header, in each matrix, in padding, and at the very end.
      const plan = planExpertSlice(await readGGUFFile(model.path), layer, begin, end);
      const dataStart = want.length - plan.matrices.reduce((s, m) => s + Math.ceil((m.end - m.start) / 32) * 32, 0);
      const cuts = [0, 1, 31, dataStart - 1, dataStart, dataStart + 999, dataStart + 1000, want.length - 1];
      for (const m of plan.matrices) cuts.push(dataStart + (m.end - m.start) - 1);
      for (const from of cuts.filter((c) => c >= 0 && c < want.length)) {
        for (const to of [from + 1, from + 1001, want.length]) {
          const last = Math.min(to, want.length) - 1;
          const p = await app.inject({ method: 'GET', url, headers: { ...headers, range: `bytes=${from}-${last}` } });
          assert.equal(p.statusCode, 206);
          assert.deepEqual(new Uint8Array(p.rawPayload), want.subarray(from, last + 1), `bytes ${from}-${last}`);
        }
      }
    }
  } finally {
    await app.close();
    await t.close();
  }
});

test('bad shard requests get their exact status and code', async () => {
  const t = await testHub({ models });
  try {
    const token = await t.login(newVolunteer());
    const q = (layer: unknown, begin: unknown, end: unknown) =>
      `/api/expert-shard?model=ds&layer=${layer}&expert_begin=${begin}&expert_end=${end}`;
    const k = (query: string, m = 'ds') => `/api/proxy/models/${m}/expert-shard?${query}`;
    const cases: Array<[string, string, string | null, number, string]> = [
      ['unknown model', shardUrl(1, 0, 8, 'nope'), token, 404, 'MODEL_UNKNOWN'],
      ['empty model', shardUrl(1, 0, 8, ''), token, 404, 'MODEL_UNKNOWN'],
      ['dense layer 0', q(0, 0, 8), token, 400, 'LAYER_NOT_MOE'],
      ['begin = end', q(1, 5, 5), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['begin > end', q(1, 9, 5), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['end > n_expert', q(1, 0, N_EXPERT + 1), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['begin = n_expert', q(1, N_EXPERT, N_EXPERT + 1), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['layer = n_layer', q(3, 0, 8), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['layer ≫ n_layer', q(4000, 0, 8), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['layer past the cap', q(99999, 0, 8), token, 400, 'QUERY_INVALID'],
      ['fractional layer', q(1.5, 0, 8), token, 400, 'QUERY_INVALID'],
      ['negative begin', q(1, -1, 8), token, 400, 'QUERY_INVALID'],
      ['word end', q(1, 0, 'all'), token, 400, 'QUERY_INVALID'],
      ['hex begin', q(1, '0x1', 8), token, 400, 'QUERY_INVALID'],
      ['empty layer', q('', 0, 8), token, 400, 'QUERY_INVALID'],
      ['no expert_end', '/api/expert-shard?model=ds&layer=1&expert_begin=0', token, 400, 'QUERY_INVALID'],
      ['no model', '/api/expert-shard?layer=1&expert_begin=0&expert_end=8', token, 400, 'QUERY_INVALID'],
      ['repeated layer', `${q(1, 0, 8)}&layer=2`, token, 400, 'QUERY_INVALID'],
      ['long model', shardUrl(1, 0, 8, 'x'.repeat(300)), token, 400, 'QUERY_INVALID'],
      ['no token', q(1, 0, 8), null, 401, 'AUTH_REQUIRED'],
      ['bad token', q(1, 0, 8), 'abc', 401, 'AUTH_TOKEN_INVALID'],
      ['no token, bad query', q('x', 0, 8), null, 401, 'AUTH_REQUIRED'],
      ['kvasir: unknown model', k('layers=1:2&experts=0:8', 'nope'), token, 404, 'MODEL_UNKNOWN'],
      ['kvasir: dense layer', k('layers=0:1&experts=0:8'), token, 400, 'LAYER_NOT_MOE'],
      ['kvasir: two layers', k('layers=1:3&experts=0:8'), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['kvasir: empty layers', k('layers=1:1&experts=0:8'), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['kvasir: reversed experts', k('layers=1:2&experts=8:0'), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['kvasir: end > n_expert', k('layers=1:2&experts=0:33'), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['kvasir: bare layer', k('layers=1&experts=0:8'), token, 400, 'QUERY_INVALID'],
      ['kvasir: dash experts', k('layers=1:2&experts=0-8'), token, 400, 'QUERY_INVALID'],
      ['kvasir: no experts', k('layers=1:2'), token, 400, 'QUERY_INVALID'],
      ['kvasir: no token', k('layers=1:2&experts=0:8'), null, 401, 'AUTH_REQUIRED'],
      ['kvasir, new form: no expert_end', k('layer=1&expert_begin=0'), token, 400, 'QUERY_INVALID'],
      ['kvasir, new form: dense layer', k('layer=0&expert_begin=0&expert_end=8'), token, 400, 'LAYER_NOT_MOE'],
      ['kvasir, new form: end > n_expert', k('layer=1&expert_begin=0&expert_end=33'), token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['kvasir, new form: word begin', k('layer=1&expert_begin=a&expert_end=8'), token, 400, 'QUERY_INVALID'],
      ['kvasir: forms mixed', k('layer=1&experts=0:8'), token, 400, 'QUERY_INVALID'],
      ['kvasir: both forms whole', k('layer=1&expert_begin=0&expert_end=8&layers=1:2&experts=0:8'), token, 400, 'QUERY_INVALID'],
      ['kvasir: another model in the query', k('layer=1&expert_begin=0&expert_end=8&model=other'), token, 400, 'QUERY_INVALID'],
      ['older form here: two layers', '/api/expert-shard?model=ds&layers=1:3&experts=0:8', token, 400, 'RANGE_OUT_OF_BOUNDS'],
      ['forms mixed here', `${q(1, 0, 8)}&experts=0:8`, token, 400, 'QUERY_INVALID'],
    ];
    for (const [what, url, tk, status, code] of cases) {
      for (const method of ['GET', 'HEAD'] as const) {
        const r = await get(t, url, tk ?? undefined, {}, method);
        assert.equal(r.status, status, `${method} ${what}`);
        if (method === 'HEAD') continue;
        const j = JSON.parse(Buffer.from(r.body).toString());
        assert.deepEqual([j.code, typeof j.error], [code, 'string'], `${what}: ${j.error}`);
        assert.doesNotMatch(j.error, /\bat .*\.ts:\d+/, 'no stack traces');
      }
    }
    const expired = await t.login(newVolunteer());
    t.clock.now += 2 * 86_400_000;
    const r = await get(t, q(1, 0, 8), expired);
    assert.deepEqual([r.status, JSON.parse(Buffer.from(r.body).toString()).code], [401, 'AUTH_TOKEN_EXPIRED']);
    const post = await t.call('POST', q(1, 0, 8), {}, token);
    assert.deepEqual([post.status, post.json.code], [404, 'NOT_FOUND']);
    assert.equal((await t.call('GET', '/api/health')).status, 200);
  } finally {
    await t.close();
  }
});

test('downloads in flight are bounded per node token and per address, and freed when they end', async () => {
  const t = await testHub({ models, authRateLimit: { capacity: 100, refillPerSec: 1 } });
  try {
    const url = shardUrl(1, 0, N_EXPERT); // ~840 KB: an unread body holds its download open
    /** A download whose body is not read yet (fastify inject's payloadAsStream: backpressure stops the hub). */
    const open = async (token: string, remoteAddress = '127.0.0.1') => {
      const r = await t.app.inject({
        method: 'GET',
        url,
        headers: { authorization: `Bearer ${token}` },
        remoteAddress,
        payloadAsStream: true,
      });
      return r;
    };
    const readAll = async (r: Awaited<ReturnType<typeof open>>): Promise<number> => {
      let n = 0;
      for await (const c of r.stream()) n += (c as Buffer).length;
      return n;
    };
    const refused = async (token: string, code: string, status: number, remoteAddress = '127.0.0.1') => {
      const r = await t.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}` }, remoteAddress });
      assert.deepEqual([r.statusCode, r.json().code, r.headers['retry-after']], [status, code, '2']);
    };

    const a = await t.login(newVolunteer());
    const full = (await get(t, url, a)).body.length;
    assert.ok(full > 512 * 1024, `the slice (${full} B) must outlast the buffers between hub and client`);
    // Refusals after a slot is taken (416) give it back.
    for (let i = 0; i < 3; i++) assert.equal((await get(t, url, a, { range: `bytes=${full}-` })).status, 416);
    const a1 = await open(a);
    const a2 = await open(a);
    assert.deepEqual([a1.statusCode, a2.statusCode], [200, 200]);
    await refused(a, 'RATE_LIMITED', 429);
    const headRefused = await get(t, url, a, {}, 'HEAD');
    assert.equal(headRefused.status, 429, 'HEAD takes a slot too (it may read the slice for its digest)');
    assert.equal(await readAll(a1), full);
    let a3: Awaited<ReturnType<typeof open>> | undefined;
    for (let i = 0; i < 300 && !a3; i++) {
      const r = await open(a);
      if (r.statusCode === 200) a3 = r;
      else await new Promise((res) => setTimeout(res, 10));
    }
    assert.ok(a3, 'a finished download frees its slot');

    // Per address: 8 from one IP whatever the tokens (a already holds 2).
    const others = await Promise.all([0, 1, 2, 3].map(() => t.login(newVolunteer())));
    const held = [a2, a3];
    for (const tk of others.slice(0, 3)) for (let i = 0; i < 2; i++) held.push(await open(tk));
    assert.deepEqual(
      held.map((r) => r.statusCode),
      Array(8).fill(200),
    );
    await refused(others[3]!, 'RATE_LIMITED', 429);
    const elsewhere = await open(others[3]!, '10.0.0.2');
    assert.equal(elsewhere.statusCode, 200, 'another address has its own share');
    for (const r of [...held, elsewhere]) assert.equal(await readAll(r), full);

    // A client that hangs up mid-download (its response closes while the body is still streaming) gives its slot back.
    const b = await t.login(newVolunteer());
    const b1 = await open(b);
    const b2 = await open(b);
    await refused(b, 'RATE_LIMITED', 429);
    b1.raw.res.destroy();
    b2.raw.res.destroy();
    let both = false;
    for (let i = 0; i < 500 && !both; i++) {
      const pair = [await open(b), await open(b)];
      both = pair.every((r) => r.statusCode === 200);
      for (const r of pair) if (r.statusCode === 200) assert.equal(await readAll(r), full);
      if (!both) await new Promise((res) => setTimeout(res, 10));
    }
    assert.ok(both, 'both slots of the hung-up downloads came back');
  } finally {
    await t.close();
  }
});

test('DownloadSlots: per wallet, per address, hub-wide, idempotent release', () => {
  const slots = new DownloadSlots({ perWallet: 2, perIp: 3, total: 4, retryAfterS: 7 });
  const code = (f: () => unknown): string | undefined => {
    try {
      f();
      return undefined;
    } catch (e) {
      assert.ok(isHubError(e));
      assert.equal(e.headers['Retry-After'], '7');
      return `${e.status} ${e.code}`;
    }
  };
  const w1a = slots.take('w1', 'ip1');
  slots.take('w1', 'ip1');
  assert.equal(
    code(() => slots.take('w1', 'ip2')),
    '429 RATE_LIMITED',
    'per wallet, whatever the address',
  );
  const w2 = slots.take('w2', 'ip1');
  assert.equal(
    code(() => slots.take('w3', 'ip1')),
    '429 RATE_LIMITED',
    'per address, whatever the wallet',
  );
  slots.take('w3', 'ip2');
  assert.equal(slots.inFlight, 4);
  assert.equal(slots.load, '1.00', 'the load hint: in flight over the cap');
  assert.equal(
    code(() => slots.take('w4', 'ip3')),
    '503 SHARDS_BUSY',
    'hub-wide',
  );
  w1a();
  w1a();
  assert.equal(slots.inFlight, 3, 'a second release gives back nothing');
  w2();
  assert.equal(slots.load, '0.50');
  slots.take('w4', 'ip1');
  slots.take('w1', 'ip1');
  assert.equal(
    code(() => slots.take('w1', 'ip3')),
    '429 RATE_LIMITED',
  );
});

test('byteRange, If-None-Match and If-Range follow RFC 9110', () => {
  const cases: Array<[string | undefined, ReturnType<typeof byteRange>]> = [
    [undefined, 'all'],
    ['bytes=0-9', { from: 0, to: 10 }],
    ['bytes=0-0', { from: 0, to: 1 }],
    ['bytes=90-', { from: 90, to: 100 }],
    ['bytes=99-', { from: 99, to: 100 }],
    ['bytes=100-', 'unsatisfiable'],
    ['bytes=150-160', 'unsatisfiable'],
    ['bytes=90-200', { from: 90, to: 100 }],
    ['bytes=-10', { from: 90, to: 100 }],
    ['bytes=-500', { from: 0, to: 100 }],
    ['bytes=-0', 'unsatisfiable'],
    ['BYTES=1-2', { from: 1, to: 3 }],
    [' bytes=1-2 ', { from: 1, to: 3 }],
    ['bytes=5-3', 'all'],
    ['bytes=-', 'all'],
    ['bytes=1-2,4-5', 'all'],
    ['bytes=a-b', 'all'],
    ['bytes = 1-2', 'all'],
    ['pages=1-2', 'all'],
    ['bytes=1e3-', 'all'],
  ];
  for (const [h, want] of cases) assert.deepEqual(byteRange(h, 100), want, String(h));
  const e = '"sha256-ab"';
  assert.equal(noneMatch(undefined, e), false);
  assert.equal(noneMatch(e, e), true);
  assert.equal(noneMatch(`W/${e}`, e), true);
  assert.equal(noneMatch(`"x" , ${e}`, e), true);
  assert.equal(noneMatch('*', e), true);
  assert.equal(noneMatch('"sha256-ac"', e), false);
  assert.equal(ifRangeHolds(undefined, e), true);
  assert.equal(ifRangeHolds(e, e), true);
  assert.equal(ifRangeHolds(`W/${e}`, e), false, 'If-Range compares strongly');
  assert.equal(ifRangeHolds('Wed, 21 Oct 2015 07:28:00 GMT', e), false);
});

test('a gpt-oss slice (SwiGLU-OAI, expert biases) is the slice writeExpertSlice builds, in memory and streamed from the file', async () => {
  const oss = await testModel({ arch: 'gpt-oss', layers: 2, nEmbd: 64, ff: 64, nExpert: 8, nExpertUsed: 2, type: GGMLType.Q8_0, seed: 5 });
  const t = await testHub({ models: [{ path: oss.path, name: 'oss' }] });
  const app = Fastify();
  try {
    registerShardRoutes(app, t.hub, { clientKey: () => 'here', limits: { memorySliceMaxBytes: 0, readChunkBytes: 100, perWallet: 100 } });
    const token = await t.login(newVolunteer());
    const headers = { authorization: `Bearer ${token}` };
    const plan = planExpertSlice(await readGGUFFile(oss.path), 1, 2, 6);
    assert.equal(plan.biases.length, 3, 'the plan carries the three biases');
    const src = await openFileSource(oss.path);
    const sink = memorySink();
    try {
      await writeExpertSlice(src, plan, sink);
    } finally {
      await src.close();
    }
    const want = sink.bytes();
    const inMemory = await get(t, shardUrl(1, 2, 6, 'oss'), token);
    const streamed = await app.inject({ method: 'GET', url: shardUrl(1, 2, 6, 'oss'), headers });
    for (const [how, body] of [
      ['in memory', inMemory.body],
      ['streamed', new Uint8Array(streamed.rawPayload)],
    ] as const) {
      assert.deepEqual(body, want, `${how}: byte for byte the slice writeExpertSlice builds`);
      const slice = await readExpertSliceBytes(body);
      assert.equal(slice.info.variant?.activation, 'swiglu_oai', how);
      assert.ok(slice.biases && slice.biases.down.length === 4 * 64, `${how}: four experts' down biases`);
    }
    // A variant read from the model's metadata, not its architecture: step35's per-layer swiglu_clamp_exp (the shard
    // server keeps those keys when it drops the rest of the metadata; once it did not, and volunteers computed silu).
    const step = await testModel({
      arch: 'step35',
      layers: 3,
      nEmbd: 64,
      ff: 64,
      nExpert: 8,
      nExpertUsed: 2,
      type: GGMLType.Q8_0,
      seed: 5,
    });
    const s2 = await testHub({ models: [{ path: step.path, name: 'step' }] });
    try {
      const t2 = await s2.login(newVolunteer());
      for (const [layer, limit] of [
        [0, 1.5],
        [2, 2],
      ] as const) {
        const r = await get(s2, shardUrl(layer, 0, 8, 'step'), t2);
        assert.equal(r.status, 200);
        const v = (await readExpertSliceBytes(r.body)).info.variant;
        assert.deepEqual([v?.activation, v?.limit], ['silu_limit', limit], `step35 layer ${layer}'s clamp`);
      }
      assert.equal((await readExpertSliceBytes((await get(s2, shardUrl(1, 0, 8, 'step'), t2)).body)).info.variant, undefined);
    } finally {
      await s2.close();
    }
  } finally {
    await app.close();
    await t.close();
  }
});
