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
import {
  CLOSE_CODES,
  type CloseName,
  VOLUNTEER_LIMITS,
  VolunteerWireError,
  closeName,
  closeReason,
  encodeResult,
  encodeWork,
  wireBytesPerToken,
} from '../../protocol/channel/index.ts';

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
  // The gguf/ modules the wire reaches at run time (half floats; the expert FFN variant vocabulary and what it imports),
  // themselves held to the same rules and to importing only each other.
  const GGUF_WIRE = ['gguf/half.ts', 'gguf/expert-variant.ts', 'gguf/errors.ts', 'gguf/quant-types.ts', 'gguf/types.ts'];
  for (const file of [...protocolFiles, ...GGUF_WIRE]) {
    const src = readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');
    const imports = [...src.matchAll(/^(?:import|export)\s+(type\s+)?[^;]*?from\s+'([^']+)'/gm)];
    for (const [, typeOnly, from] of imports) {
      const target = join(dirname(file), from!);
      const allowed = (file.startsWith('protocol/') && target.startsWith('protocol/')) || GGUF_WIRE.includes(target);
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
