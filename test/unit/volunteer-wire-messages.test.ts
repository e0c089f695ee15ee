import { test } from 'node:test';
import assert from 'node:assert/strict';
import { TOKEN_MAX_CHARS } from '../../hub/auth/tokens.ts';
import {
  type ClientMessage,
  type CloseName,
  type HubMessage,
  VOLUNTEER_LIMITS,
  decodeWorkFailed,
  encodeClientMessage,
  encodeHubMessage,
  encodeWorkFailed,
  parseClientMessage,
  parseHubMessage,
} from '../../protocol/channel/index.ts';
import { throwsCode } from '../../harness/wire-asserts.ts';

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
  variants: ['silu', 'swiglu_oai', 'bias'],
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
  {
    type: 'credit',
    credit: 12,
    slices: [
      { assignmentId: 7, credit: 12 },
      { assignmentId: 0xffffffff, credit: 0 },
    ],
  },
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
  o.variants = ['relu', 'swiglu_oai', 'bias', 'bias'];
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
  assert.deepEqual(h.variants, ['swiglu_oai', 'bias'], 'expert FFN variant features: unknown dropped, duplicates dropped');
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
    ['credit slices not a list', '{"type":"credit","credit":5,"slices":{"7":5}}', 'BAD_FRAME'],
    ['credit slice not an object', '{"type":"credit","credit":5,"slices":[[7,5]]}', 'BAD_FRAME'],
    ['credit slice without an assignment', '{"type":"credit","credit":5,"slices":[{"credit":5}]}', 'BAD_FRAME'],
    ['credit slice of assignment 0', '{"type":"credit","credit":5,"slices":[{"assignment_id":0,"credit":5}]}', 'BAD_FRAME'],
    ['credit slice negative', '{"type":"credit","credit":5,"slices":[{"assignment_id":7,"credit":-1}]}', 'BAD_FRAME'],
    ['credit slice fractional', '{"type":"credit","credit":5,"slices":[{"assignment_id":7,"credit":0.5}]}', 'BAD_FRAME'],
    [
      'credit slices over the cap',
      JSON.stringify({ type: 'credit', credit: 5, slices: Array.from({ length: 257 }, (_, i) => ({ assignment_id: i + 1, credit: 0 })) }),
      'TOO_LARGE',
    ],
  ];
  for (const [label, text, code] of table) throwsCode(() => parseHubMessage(text), code, label);
});

// ------------------------------------------------------------------------------------------------ the rest
