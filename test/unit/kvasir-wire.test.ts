/**
 * Kvasir's worker wire (protocol/kvasir-wire.ts) and the dispatcher's work items in it (hub/relay/work.ts): round trips
 * of v1, v2 and v2f16 in any cuts, the answers' checks, and a table of malformed requests, each refused with its code
 * (the worker's side closes on them) — and a work item's sums through each wire equal the reduce form's.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  KVASIR_WIRE_LIMITS,
  KvasirRequestReader,
  type KvasirRequest,
  KvasirWireError,
  decodeKvasirAnswer,
  encodeKvasirAnswer,
  encodeKvasirRequest,
  kvasirAnswerBytes,
  kvasirRequestBytes,
} from '../../protocol/kvasir-wire.ts';
import { f16ToF32, f32ToF16 } from '../../gguf/half.ts';
import { kvasirRequestOf, kvasirSums } from '../../hub/relay/work.ts';
import type { WorkItem } from '../../hub/dispatch/worker-link.ts';
import { mulberry32 } from '../../shaders/random.ts';

const E = 8;
const N_LOCAL = 4;
const rand = mulberry32(28);
const floats = (n: number): Float32Array => Float32Array.from({ length: n }, () => rand() - 0.5);

const v1 = (): KvasirRequest => ({ wire: 'v1', nUsed: 2, nTokens: 3, cur: floats(3 * E), sel: Int32Array.of(0, 1, 3, 2, 1, 0) });
const v2 = (wire: 'v2' | 'v2f16' = 'v2'): KvasirRequest => ({
  wire,
  nRows: 2,
  nPairs: 3,
  rows: floats(2 * E),
  rowIndex: Int32Array.of(0, 0, 1),
  ids: Int32Array.of(1, 3, 1),
  probs: Float32Array.of(0.25, 0.75, 1),
});

const codeOf = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof KvasirWireError, String(e));
    return e.code;
  }
  return 'none';
};

test('v1, v2 and v2f16 requests round-trip through the reader in any cuts, as Kvasir lays them out', () => {
  for (const r of [v1(), v2(), v2('v2f16')]) {
    const bytes = encodeKvasirRequest(r, E, N_LOCAL);
    assert.equal(bytes.length, kvasirRequestBytes(r, E));
    const view = new DataView(bytes.buffer);
    if (r.wire === 'v1') assert.deepEqual([view.getInt32(0, true), view.getInt32(4, true)], [2, 3], 'n_used, n_tokens');
    else assert.deepEqual([view.getInt32(0, true), view.getInt32(4, true), view.getInt32(8, true)], [r.wire === 'v2' ? -2 : -3, 2, 3]);
    // Two requests back to back, cut into 5-byte messages.
    const reader = new KvasirRequestReader(E, N_LOCAL);
    const twice = new Uint8Array(2 * bytes.length);
    twice.set(bytes);
    twice.set(bytes, bytes.length);
    const got: KvasirRequest[] = [];
    for (let at = 0; at < twice.length; at += 5) got.push(...reader.push(twice.subarray(at, at + 5)));
    assert.equal(got.length, 2, r.wire);
    assert.equal(reader.buffered, 0);
    const back = got[1] as KvasirRequest;
    if (r.wire === 'v1' && back.wire === 'v1') {
      assert.deepEqual([back.cur, back.sel], [r.cur, r.sel]);
    } else if (r.wire !== 'v1' && back.wire !== 'v1') {
      const round = (a: Float32Array) => (r.wire === 'v2f16' ? a.map((x) => f16ToF32(f32ToF16(x))) : a);
      assert.deepEqual([back.rows, back.rowIndex, back.ids, back.probs], [round(r.rows), r.rowIndex, r.ids, round(r.probs)]);
    }
  }
});

test('answers: the size the request implies, finite, f16 for v2f16', () => {
  for (const r of [v1(), v2(), v2('v2f16')]) {
    const n = r.wire === 'v1' ? r.nTokens * r.nUsed * E : r.nRows * E;
    const out = floats(n);
    const bytes = encodeKvasirAnswer(r, E, out);
    assert.equal(bytes.length, kvasirAnswerBytes(r, E));
    const back = decodeKvasirAnswer(r, E, bytes);
    assert.deepEqual(back, r.wire === 'v2f16' ? out.map((x) => f16ToF32(f32ToF16(x))) : out);
    assert.equal(
      codeOf(() => decodeKvasirAnswer(r, E, bytes.subarray(1))),
      'ANSWER_SIZE',
    );
    assert.equal(
      codeOf(() => decodeKvasirAnswer(r, E, new Uint8Array(bytes.length + 4))),
      'ANSWER_SIZE',
    );
    const nan = bytes.slice();
    if (r.wire === 'v2f16') new DataView(nan.buffer).setUint16(2, 0x7e00, true);
    else new DataView(nan.buffer).setFloat32(4, Number.POSITIVE_INFINITY, true);
    assert.equal(
      codeOf(() => decodeKvasirAnswer(r, E, nan)),
      'NON_FINITE',
    );
  }
});

/** A request's bytes from its header words and arrays, written by hand (what a hostile peer can send). */
function raw(head: number[], ...arrays: Array<Float32Array | Int32Array>): Uint8Array {
  const parts = [new Uint8Array(Int32Array.from(head).buffer), ...arrays.map((a) => new Uint8Array(a.buffer.slice(0)))];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

test('malformed requests: each refused with its code, the header ones before their body is buffered', () => {
  const L = KVASIR_WIRE_LIMITS;
  const z = (n: number) => new Float32Array(n);
  const i = (...v: number[]) => Int32Array.from(v);
  const table: Array<[string, Uint8Array, string]> = [
    ['v1 n_used 0', raw([0, 1]), 'USED_OUT_OF_RANGE'],
    [`v1 n_used ${L.maxUsed + 1}`, raw([L.maxUsed + 1, 1]), 'USED_OUT_OF_RANGE'],
    ['v1 n_used −1 (not a v2 header)', raw([-1, 1]), 'USED_OUT_OF_RANGE'],
    ['header −4', raw([-4, 1]), 'USED_OUT_OF_RANGE'],
    ['v1 n_tokens 0', raw([1, 0]), 'TOKENS_OUT_OF_RANGE'],
    [`v1 n_tokens ${L.maxTokens + 1}`, raw([1, L.maxTokens + 1]), 'TOKENS_OUT_OF_RANGE'],
    ['v1 n_tokens −2^31', raw([1, -(2 ** 31)]), 'TOKENS_OUT_OF_RANGE'],
    ['v1 expert = n_local', raw([1, 1], z(E), i(N_LOCAL)), 'EXPERT_OUT_OF_RANGE'],
    ['v1 expert −1', raw([1, 1], z(E), i(-1)), 'EXPERT_OUT_OF_RANGE'],
    ['v1 one token names an expert twice', raw([2, 1], z(E), i(2, 2)), 'DUPLICATE_EXPERT'],
    ['v2 n_rows 0', raw([-2, 0, 1]), 'ROWS_OUT_OF_RANGE'],
    [`v2 n_rows ${L.maxRows + 1}`, raw([-2, L.maxRows + 1, 1]), 'ROWS_OUT_OF_RANGE'],
    ['v2 n_pairs 0', raw([-2, 1, 0]), 'PAIRS_OUT_OF_RANGE'],
    [`v2 n_pairs ${L.maxPairs + 1}`, raw([-2, 1, L.maxPairs + 1]), 'PAIRS_OUT_OF_RANGE'],
    ['v2 row index = n_rows', raw([-2, 1, 1], z(E), i(1), i(0), z(1)), 'ROW_INDEX_OUT_OF_RANGE'],
    ['v2 row index −1', raw([-2, 1, 1], z(E), i(-1), i(0), z(1)), 'ROW_INDEX_OUT_OF_RANGE'],
    ['v2 expert = n_local', raw([-2, 1, 1], z(E), i(0), i(N_LOCAL), z(1)), 'EXPERT_OUT_OF_RANGE'],
    ['v2f16 n_pairs −1', raw([-3, 1, -1]), 'PAIRS_OUT_OF_RANGE'],
    ['v2f16 expert 2^31−1', raw([-3, 1, 1], new Float32Array(E / 2), i(0), i(2 ** 31 - 1), new Float32Array(1)), 'EXPERT_OUT_OF_RANGE'],
  ];
  for (const [what, bytes, code] of table) {
    const reader = new KvasirRequestReader(E, N_LOCAL);
    assert.equal(
      codeOf(() => reader.push(bytes)),
      code,
      what,
    );
    // Dead after a refusal: the stream cannot be brought back into step.
    assert.equal(
      codeOf(() => reader.push(encodeKvasirRequest(v2(), E, N_LOCAL))),
      code,
      `${what}: stays refused`,
    );
  }
  // A header's counts are judged on its own 8 or 12 bytes: no body is waited for.
  assert.equal(
    codeOf(() => new KvasirRequestReader(E, N_LOCAL).push(raw([-2, L.maxRows + 1]).subarray(0, 8))),
    'none',
    'v2 waits for n_pairs',
  );
  assert.equal(
    codeOf(() => new KvasirRequestReader(E, N_LOCAL, 1000).push(raw([1, L.maxTokens]))),
    'TOO_LARGE',
  );
  // The encoder checks as the worker does: the hub never sends what a worker closes on.
  assert.equal(
    codeOf(() =>
      encodeKvasirRequest({ ...(v1() as Extract<KvasirRequest, { wire: 'v1' }>), sel: Int32Array.of(0, 0, 1, 2, 3, 1) }, E, N_LOCAL),
    ),
    'DUPLICATE_EXPERT',
  );
  assert.equal(
    codeOf(() => encodeKvasirRequest(v2(), E, 3)),
    'EXPERT_OUT_OF_RANGE',
  );
});

/** A work item of 3 rows: row 0 has two pairs, row 1 none, row 2 one. */
function work(): WorkItem {
  return {
    layer: 1,
    nEmbd: E,
    rows: floats(3 * E),
    nRows: 3,
    nPairs: 3,
    rowIndex: Uint32Array.of(0, 0, 2),
    localExpert: Uint16Array.of(2, 0, 3),
    weight: Float32Array.of(0.6, 0.4, 1),
  };
}

/** A toy expert: y = (local id + 1) · x + 0.125. */
const expert = (id: number, x: Float32Array): Float32Array => x.map((v) => Math.fround(Math.fround((id + 1) * v) + 0.125));

/** The reduce form's sums: per row in pair order, first product copied, later ones added, each rounded to f32. */
function reduceSums(w: WorkItem): Float32Array {
  const out = new Float32Array(w.nRows * E);
  const seen = new Set<number>();
  for (let p = 0; p < w.nPairs; p++) {
    const r = w.rowIndex[p] as number;
    const y = expert(w.localExpert[p] as number, w.rows.subarray(r * E, (r + 1) * E));
    for (let k = 0; k < E; k++) {
      const t = Math.fround((y[k] as number) * (w.weight[p] as number));
      out[r * E + k] = seen.has(r) ? Math.fround((out[r * E + k] as number) + t) : t;
    }
    seen.add(r);
  }
  return out;
}

/** What a worker answers: v1 per (token, slot), v2 Σ prob · expert per row from 0. */
function workerAnswer(req: KvasirRequest): Float32Array {
  if (req.wire === 'v1') {
    const out = new Float32Array(req.nTokens * req.nUsed * E);
    for (let s = 0; s < req.nTokens * req.nUsed; s++) {
      const t = Math.floor(s / req.nUsed);
      out.set(expert(req.sel[s] as number, req.cur.subarray(t * E, (t + 1) * E)), s * E);
    }
    return out;
  }
  const out = new Float32Array(req.nRows * E);
  for (let p = 0; p < req.nPairs; p++) {
    const r = req.rowIndex[p] as number;
    const y = expert(req.ids[p] as number, req.rows.subarray(r * E, (r + 1) * E));
    for (let k = 0; k < E; k++)
      out[r * E + k] = Math.fround((out[r * E + k] as number) + Math.fround((y[k] as number) * (req.probs[p] as number)));
  }
  return out;
}

test('a work item through v1 and v2 gives the reduce form’s sums bit for bit; v1 pads short rows with unnamed experts', () => {
  const w = work();
  const want = reduceSums(w);
  for (const wire of ['v1', 'v2'] as const) {
    const req = kvasirRequestOf(w, wire, N_LOCAL);
    const wireBytes = encodeKvasirRequest(req, E, N_LOCAL);
    const [back] = new KvasirRequestReader(E, N_LOCAL).push(wireBytes);
    const answer = decodeKvasirAnswer(req, E, encodeKvasirAnswer(back as KvasirRequest, E, workerAnswer(back as KvasirRequest)));
    assert.deepEqual(kvasirSums(w, req, answer), want, wire);
    if (req.wire === 'v1') {
      assert.deepEqual([req.nUsed, req.nTokens], [2, 3]);
      assert.deepEqual([...req.sel], [2, 0, 0, 1, 3, 0], 'row 1 padded with 0, 1; row 2 with 0');
    }
  }
  const f16 = kvasirRequestOf(w, 'v2f16', N_LOCAL);
  const got = kvasirSums(w, f16, decodeKvasirAnswer(f16, E, encodeKvasirAnswer(f16, E, workerAnswer(f16))));
  let err = 0;
  for (let k = 0; k < got.length; k++) err = Math.max(err, Math.abs((got[k] as number) - (want[k] as number)));
  assert.ok(err < 2e-3, `v2f16 within f16's precision: ${err}`);
  // A row with more pairs than the slice has experts cannot be a v1 request.
  assert.equal(
    codeOf(() => kvasirRequestOf({ ...w, nPairs: 3, rowIndex: Uint32Array.of(0, 0, 0) }, 'v1', 2)),
    'DUPLICATE_EXPERT',
  );
});
