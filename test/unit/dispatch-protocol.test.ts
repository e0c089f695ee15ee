import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DISPATCH_LIMITS,
  DispatchProtocolError,
  FrameKind,
  FrameReader,
  HEADER_BYTES,
  NUMERICS_WIRE,
  decodeAudit,
  DISPATCH_VERSION,
  checkVersion,
  decodeClaim,
  decodeHeader,
  decodeResult,
  draftResult,
  encodeClaim,
  encodeResult,
  sealResult,
  negotiateVersion,
  decodeHello,
  decodeRequest,
  decodeResponse,
  encodeAudit,
  encodeHello,
  encodeHelloAck,
  encodeRequest,
  encodeResponse,
  type DispatchRequest,
  type DispatchResponse,
  type FrameHeader,
} from '../../protocol/dispatch.ts';

function request(over: Partial<DispatchRequest> = {}): DispatchRequest {
  const nTokens = over.nTokens ?? 3;
  const nEmbd = over.nEmbd ?? 4;
  const nUsed = over.nUsed ?? 2;
  return {
    seq: 7,
    layer: 5,
    nTokens,
    nEmbd,
    nUsed,
    deadlineUs: 250_000,
    localNsPerPair: 1234,
    rows: Float32Array.from({ length: nTokens * nEmbd }, (_, i) => i * 0.5 - 1),
    ids: Int32Array.from({ length: nTokens * nUsed }, (_, i) => i % 8),
    probs: Float32Array.from({ length: nTokens * nUsed }, (_, i) => 1 / (i + 1)),
    ...over,
  };
}

function split(bytes: Uint8Array): { header: ReturnType<typeof decodeHeader>; payload: Uint8Array } {
  return { header: decodeHeader(bytes.subarray(0, HEADER_BYTES)), payload: bytes.subarray(HEADER_BYTES) };
}

test('hello, ack, request and both responses round-trip', () => {
  const hello = {
    nLayer: 4,
    nEmbd: 64,
    nExpert: 8,
    nExpertUsed: 2,
    deadlineMs: 250,
    numerics: 'llama' as const,
    modelDesc: 'qwen3moe ?B Q8_0 — ünïcode',
  };
  const h = split(encodeHello(hello));
  assert.equal(h.header.kind, FrameKind.Hello);
  assert.deepEqual(decodeHello(h.payload), hello);
  const exact = { ...hello, numerics: 'exact' as const };
  assert.deepEqual(decodeHello(split(encodeHello(exact)).payload), exact);

  const ack = split(encodeHelloAck(false, 3));
  assert.equal(ack.header.kind, FrameKind.HelloAck);
  assert.deepEqual([...new Uint32Array(ack.payload.slice().buffer)], [0, 3]);

  const r = request();
  const rf = split(encodeRequest(r, 2));
  assert.equal(rf.header.seq, 7);
  assert.deepEqual(decodeRequest(rf.header, rf.payload, 8), { ...r, preclaimed: null }, 'v2: nothing pre-claimed');

  const local = { seq: 7, layer: 5, nTokens: 3, nUsed: 2, quietMs: 500, mode: 'local' as const };
  const lf = split(encodeResponse(local));
  assert.deepEqual(decodeResponse(lf.header, lf.payload, 4), local);

  const served = {
    seq: 7,
    layer: 5,
    nTokens: 3,
    nUsed: 2,
    quietMs: 0,
    mode: 'served' as const,
    served: Uint8Array.of(1, 0, 0, 1, 1, 1),
    sums: Float32Array.from({ length: 12 }, (_, i) => i / 3),
  };
  const sf = split(encodeResponse(served));
  assert.equal(sf.payload.length, 28 + 8 + 48, 'flags padded to 4 bytes');
  assert.deepEqual(decodeResponse(sf.header, sf.payload, 4), served);
});

test('FrameReader reassembles frames from any chunking', () => {
  const stream = new Uint8Array([...encodeRequest(request()), ...encodeRequest(request({ seq: 8, nTokens: 1 }))]);
  for (const size of [1, 3, 16, 17, 1000]) {
    const reader = new FrameReader();
    const frames = [];
    for (let o = 0; o < stream.length; o += size) frames.push(...reader.push(stream.subarray(o, o + size)));
    assert.deepEqual(
      frames.map((f) => f.header.seq),
      [7, 8],
      `chunks of ${size}`,
    );
    assert.equal(decodeRequest(frames[1]!.header, frames[1]!.payload, 8).nTokens, 1);
  }
});

function withHeader(mut: (v: DataView) => void): Uint8Array {
  const bytes = encodeRequest(request());
  mut(new DataView(bytes.buffer));
  return bytes;
}

function withPayloadU32(index: number, value: number): Uint8Array {
  return withHeader((v) => v.setUint32(HEADER_BYTES + 4 * index, value, true));
}

const BAD: Array<[string, Uint8Array, string, 'header' | 'request']> = [
  ['bad magic', withHeader((v) => v.setUint32(0, 0x12345678, true)), 'DISPATCH_BAD_MAGIC', 'header'],
  ['version 4', withHeader((v) => v.setUint16(4, 4, true)), 'DISPATCH_BAD_VERSION', 'header'],
  ['version 0', withHeader((v) => v.setUint16(4, 0, true)), 'DISPATCH_BAD_VERSION', 'header'],
  ['kind 0', withHeader((v) => v.setUint16(6, 0, true)), 'DISPATCH_BAD_KIND', 'header'],
  ['kind 99', withHeader((v) => v.setUint16(6, 99, true)), 'DISPATCH_BAD_KIND', 'header'],
  ['payload over the cap', withHeader((v) => v.setUint32(12, DISPATCH_LIMITS.maxPayload + 1, true)), 'DISPATCH_TOO_LARGE', 'header'],
  ['payload 4 GiB', withHeader((v) => v.setUint32(12, 0xffffffff, true)), 'DISPATCH_TOO_LARGE', 'header'],
  ['n_tokens 0', withPayloadU32(1, 0), 'DISPATCH_BAD_FRAME', 'request'],
  ['n_tokens over the cap', withPayloadU32(1, DISPATCH_LIMITS.maxRows + 1), 'DISPATCH_BAD_FRAME', 'request'],
  ['n_embd 0', withPayloadU32(2, 0), 'DISPATCH_BAD_FRAME', 'request'],
  ['n_embd over the cap', withPayloadU32(2, DISPATCH_LIMITS.maxEmbd + 1), 'DISPATCH_BAD_FRAME', 'request'],
  ['n_used 0', withPayloadU32(3, 0), 'DISPATCH_BAD_FRAME', 'request'],
  ['n_used over the cap', withPayloadU32(3, DISPATCH_LIMITS.maxUsed + 1), 'DISPATCH_BAD_FRAME', 'request'],
  ['n_tokens disagrees with the size', withPayloadU32(1, 4), 'DISPATCH_BAD_FRAME', 'request'],
  ['expert id out of range', withPayloadU32(6 + 12, 8), 'DISPATCH_BAD_FRAME', 'request'],
  ['negative expert id', withPayloadU32(6 + 12, 0xffffffff), 'DISPATCH_BAD_FRAME', 'request'],
];

for (const [name, bytes, code, stage] of BAD) {
  test(`rejects a frame with ${name}: ${code}`, () => {
    assert.throws(
      () => {
        const header = decodeHeader(bytes.subarray(0, HEADER_BYTES));
        if (stage === 'request') decodeRequest(header, bytes.subarray(HEADER_BYTES), 8);
      },
      (e: unknown) => e instanceof DispatchProtocolError && e.code === code,
    );
  });
}

test('a truncated request and a short hello are refused', () => {
  const r = split(encodeRequest(request()));
  assert.throws(() => decodeRequest(r.header, r.payload.subarray(0, 20), 8), { code: 'DISPATCH_BAD_FRAME' });
  assert.throws(() => decodeRequest(r.header, r.payload.subarray(0, r.payload.length - 4), 8), { code: 'DISPATCH_BAD_FRAME' });
  assert.throws(() => decodeHello(new Uint8Array(10)), { code: 'DISPATCH_BAD_FRAME' });
  const long = encodeHello({
    nLayer: 1,
    nEmbd: 1,
    nExpert: 1,
    nExpertUsed: 1,
    deadlineMs: 1,
    numerics: 'llama',
    modelDesc: 'x'.repeat(300),
  });
  assert.equal(decodeHello(long.subarray(HEADER_BYTES)).modelDesc.length, DISPATCH_LIMITS.maxModelDesc, 'descriptions are capped');
});

test('responses: wrong kind, bad mode, bad sizes and quiet windows out of range are refused', () => {
  const ok = split(
    encodeResponse({
      seq: 1,
      layer: 0,
      nTokens: 1,
      nUsed: 2,
      quietMs: 0,
      mode: 'served',
      served: Uint8Array.of(1, 1),
      sums: new Float32Array(4),
    }),
  );
  assert.throws(() => decodeResponse({ ...ok.header, kind: FrameKind.Request }, ok.payload, 4), { code: 'DISPATCH_BAD_KIND' });
  assert.throws(() => decodeResponse(ok.header, ok.payload, 5), { code: 'DISPATCH_BAD_FRAME' });
  const badMode = ok.payload.slice();
  new DataView(badMode.buffer).setUint32(12, 2, true);
  assert.throws(() => decodeResponse(ok.header, badMode, 4), { code: 'DISPATCH_BAD_FRAME' });
  const badQuiet = ok.payload.slice();
  new DataView(badQuiet.buffer).setUint32(16, DISPATCH_LIMITS.maxQuietMs + 1, true);
  assert.throws(() => decodeResponse(ok.header, badQuiet, 4), { code: 'DISPATCH_BAD_FRAME' });
  assert.throws(
    () =>
      encodeResponse({
        seq: 1,
        layer: 0,
        nTokens: 1,
        nUsed: 2,
        quietMs: 0,
        mode: 'served',
        served: Uint8Array.of(1),
        sums: new Float32Array(4),
      }),
    { code: 'DISPATCH_BAD_FRAME' },
  );
  assert.throws(() => encodeResponse({ seq: 1, layer: 0, nTokens: 1, nUsed: 2, quietMs: -1, mode: 'local' }), {
    code: 'DISPATCH_BAD_FRAME',
  });
});

test('hello layout: numerics is the u32 before desc_len (as linkcpp-server writes it); other values are refused', () => {
  const hello = { nLayer: 3, nEmbd: 32, nExpert: 4, nExpertUsed: 2, deadlineMs: 100, numerics: 'llama' as const, modelDesc: 'abc' };
  const { payload } = split(encodeHello(hello));
  const v = new DataView(payload.buffer, payload.byteOffset, payload.length);
  assert.equal(payload.length, 28 + 3, '7 u32 fields, then the description');
  assert.deepEqual(
    Array.from({ length: 7 }, (_, i) => v.getUint32(4 * i, true)),
    [3, 32, 4, 2, 100, NUMERICS_WIRE.llama, 3],
  );
  assert.deepEqual(NUMERICS_WIRE, { exact: 0, llama: 1 });
  for (const bad of [2, 7, 0xffffffff]) {
    const p = payload.slice();
    new DataView(p.buffer).setUint32(20, bad, true);
    assert.throws(() => decodeHello(p), { code: 'DISPATCH_BAD_NUMERICS' }, `numerics ${bad}`);
  }
  // the pre-numerics layout (24 fixed bytes) no longer decodes: a coordinator without the field is refused, not misread
  const old = new Uint8Array(24 + 3);
  const ov = new DataView(old.buffer);
  for (const [i, x] of [3, 32, 4, 2, 100, 3].entries()) ov.setUint32(4 * i, x, true);
  assert.throws(() => decodeHello(old), DispatchProtocolError);
});

// ---- audit: RESPONSE's audit flags and the AUDIT frame ----

/** A 3-token × 2-used response for a coordinator of width 4; `over` replaces fields. */
function response(over: Partial<DispatchResponse> & { mode?: 'local' | 'served' } = {}): DispatchResponse {
  const base = { seq: 9, layer: 2, nTokens: 3, nUsed: 2, quietMs: 0 };
  if (over.mode === 'local') return { ...base, ...over, mode: 'local' } as DispatchResponse;
  return {
    ...base,
    mode: 'served',
    served: Uint8Array.of(1, 0, 0, 1, 0, 0),
    sums: Float32Array.from({ length: 12 }, (_, i) => i - 5),
    ...over,
  } as DispatchResponse;
}

test('responses with audit flags round-trip; n_audit is the u32 at offset 24 and the flags follow the served flags', () => {
  const served = response({ audit: Uint8Array.of(0, 1, 1, 0, 0, 1) });
  const sf = split(encodeResponse(served));
  const v = new DataView(sf.payload.buffer, sf.payload.byteOffset, sf.payload.length);
  assert.equal(sf.payload.length, 28 + 8 + 8 + 48, 'fixed, served flags, audit flags (each padded to 4), sums');
  assert.deepEqual(
    Array.from({ length: 7 }, (_, i) => v.getUint32(4 * i, true)),
    [2, 3, 2, 1, 0, 2, 3],
  );
  assert.deepEqual([...sf.payload.subarray(28 + 8, 28 + 8 + 6)], [0, 1, 1, 0, 0, 1]);
  assert.equal(v.getFloat32(28 + 16, true), -5, 'sums after both flag arrays');
  assert.deepEqual(decodeResponse(sf.header, sf.payload, 4), served);

  // LOCAL with audit flags: the dispatcher sent the pairs to a worker in shadow and wants the trusted sums.
  const local = response({ mode: 'local', quietMs: 100, audit: Uint8Array.of(1, 1, 0, 0, 1, 1) });
  const lf = split(encodeResponse(local));
  assert.equal(lf.payload.length, 28 + 8);
  assert.deepEqual(decodeResponse(lf.header, lf.payload, 4), local);

  // all-zero audit flags are "no audit": nothing on the wire, nothing decoded
  const none = split(encodeResponse(response({ audit: new Uint8Array(6) })));
  assert.equal(none.payload.length, 28 + 8 + 48);
  assert.equal(decodeResponse(none.header, none.payload, 4).audit, undefined);
});

test('an AUDIT frame round-trips with its request seq; its layout is {layer, n_tokens, n_audit, 0} then the sums', () => {
  const audit = { seq: 41, layer: 3, nTokens: 2, nAudit: 3, sums: Float32Array.from({ length: 8 }, (_, i) => i * 0.25) };
  const bytes = encodeAudit(audit, 2);
  const f = split(bytes);
  assert.deepEqual(f.header, { version: 2, kind: FrameKind.Audit, seq: 41, payloadBytes: 16 + 32 });
  // the same payload in v3, under a v3 header (AUDIT is unchanged by v3)
  const v3 = split(encodeAudit(audit, 3));
  assert.equal(v3.header.version, 3);
  assert.deepEqual(v3.payload, f.payload);
  const v = new DataView(f.payload.buffer, f.payload.byteOffset, f.payload.length);
  assert.deepEqual(
    [0, 1, 2, 3].map((i) => v.getUint32(4 * i, true)),
    [3, 2, 3, 0],
  );
  assert.deepEqual(decodeAudit(f.header, f.payload, 4), audit);
  // a FrameReader passes AUDIT frames through like any other kind
  const frames = new FrameReader().push(new Uint8Array([...bytes, ...encodeRequest(request())]));
  assert.deepEqual(
    frames.map((x) => x.header.kind),
    [FrameKind.Audit, FrameKind.Request],
  );
});

interface Framed {
  header: FrameHeader;
  payload: Uint8Array;
}

/** A valid response (served, three pairs audited, unless `base` says otherwise), its payload changed by `mut`. */
function auditedPayload(
  mut: (p: Uint8Array, v: DataView) => void,
  base: DispatchResponse = response({ audit: Uint8Array.of(0, 1, 1, 0, 0, 1) }),
): Framed {
  const f = split(encodeResponse(base));
  const p = f.payload.slice();
  mut(p, new DataView(p.buffer));
  return { header: f.header, payload: p };
}

const SERVED_AT = 28;
const AUDIT_AT = 28 + 8;
const BAD_RESPONSES: Array<[string, Framed, string]> = [
  [
    'an audit flag of 2',
    auditedPayload((p) => {
      p[AUDIT_AT + 1] = 2;
    }),
    'DISPATCH_BAD_AUDIT',
  ],
  [
    'an audited pair that is also served',
    auditedPayload((p, v) => {
      p[AUDIT_AT] = 1;
      v.setUint32(24, 4, true);
    }),
    'DISPATCH_BAD_AUDIT',
  ],
  ['n_audit larger than the flags say', auditedPayload((_, v) => v.setUint32(24, 4, true)), 'DISPATCH_BAD_AUDIT'],
  ['n_audit smaller than the flags say', auditedPayload((_, v) => v.setUint32(24, 2, true)), 'DISPATCH_BAD_AUDIT'],
  ['n_audit over the pair count', auditedPayload((_, v) => v.setUint32(24, 7, true)), 'DISPATCH_BAD_AUDIT'],
  ['n_audit 0 with the flags still there (size)', auditedPayload((_, v) => v.setUint32(24, 0, true)), 'DISPATCH_BAD_FRAME'],
  ['n_audit > 0 without the flags (size)', auditedPayload((_, v) => v.setUint32(24, 1, true), response()), 'DISPATCH_BAD_FRAME'],
  [
    'a served flag of 2',
    auditedPayload((p) => {
      p[SERVED_AT] = 2;
    }),
    'DISPATCH_BAD_FRAME',
  ],
  ['n_served not matching the flags', auditedPayload((_, v) => v.setUint32(20, 1, true)), 'DISPATCH_BAD_FRAME'],
  ['mode 2', auditedPayload((_, v) => v.setUint32(12, 2, true)), 'DISPATCH_BAD_FRAME'],
  ['n_tokens 0', auditedPayload((_, v) => v.setUint32(4, 0, true)), 'DISPATCH_BAD_FRAME'],
  ['n_tokens over the cap', auditedPayload((_, v) => v.setUint32(4, DISPATCH_LIMITS.maxRows + 1, true)), 'DISPATCH_BAD_FRAME'],
  [
    'n_used over the cap (pairs would overflow the padding math)',
    auditedPayload((_, v) => v.setUint32(8, 0x10000, true)),
    'DISPATCH_BAD_FRAME',
  ],
  [
    'a local answer claiming served pairs',
    auditedPayload((_, v) => v.setUint32(20, 1, true), response({ mode: 'local', audit: Uint8Array.of(1, 0, 0, 0, 0, 0) })),
    'DISPATCH_BAD_FRAME',
  ],
  [
    'a local answer with audit flags cut off',
    ((): Framed => {
      const f = split(encodeResponse(response({ mode: 'local', audit: Uint8Array.of(1, 0, 0, 0, 0, 0) })));
      return { header: f.header, payload: f.payload.subarray(0, 28) };
    })(),
    'DISPATCH_BAD_FRAME',
  ],
];

for (const [name, { header, payload }, code] of BAD_RESPONSES) {
  test(`rejects a response with ${name}: ${code}`, () => {
    assert.throws(
      () => decodeResponse(header, payload, 4),
      (e: unknown) => e instanceof DispatchProtocolError && e.code === code,
    );
  });
}

test('encodeResponse refuses audits the coordinator would refuse', () => {
  const bad: Array<[string, DispatchResponse]> = [
    ['audit flags for too few pairs', response({ audit: Uint8Array.of(0, 1) })],
    ['an audit flag of 2', response({ audit: Uint8Array.of(0, 2, 0, 0, 0, 0) })],
    ['an audited pair that is also served', response({ audit: Uint8Array.of(1, 0, 0, 0, 0, 0) })],
  ];
  for (const [name, r] of bad) assert.throws(() => encodeResponse(r), { code: 'DISPATCH_BAD_AUDIT' }, name);
});

function auditFrame(mut: (v: DataView) => void, nEmbd = 4): Framed {
  const f = split(encodeAudit({ seq: 5, layer: 1, nTokens: 2, nAudit: 2, sums: new Float32Array(2 * nEmbd) }));
  const p = f.payload.slice();
  mut(new DataView(p.buffer));
  return { header: f.header, payload: p };
}

const BAD_AUDITS: Array<[string, Framed, number, string]> = [
  [
    'the wrong kind',
    { ...auditFrame(() => {}), header: { ...auditFrame(() => {}).header, kind: FrameKind.Response } },
    4,
    'DISPATCH_BAD_KIND',
  ],
  ['a short payload', { ...auditFrame(() => {}), payload: new Uint8Array(12) }, 4, 'DISPATCH_BAD_FRAME'],
  ['reserved not 0', auditFrame((v) => v.setUint32(12, 1, true)), 4, 'DISPATCH_BAD_FRAME'],
  ['n_tokens 0', auditFrame((v) => v.setUint32(4, 0, true)), 4, 'DISPATCH_BAD_FRAME'],
  ['n_tokens over the cap', auditFrame((v) => v.setUint32(4, DISPATCH_LIMITS.maxRows + 1, true)), 4, 'DISPATCH_BAD_FRAME'],
  ['n_audit 0 (an audit of nothing is never sent)', auditFrame((v) => v.setUint32(8, 0, true)), 4, 'DISPATCH_BAD_FRAME'],
  ['n_audit over n_tokens × max n_used', auditFrame((v) => v.setUint32(8, 2 * DISPATCH_LIMITS.maxUsed + 1, true)), 4, 'DISPATCH_BAD_FRAME'],
  ['n_tokens disagreeing with the size', auditFrame((v) => v.setUint32(4, 3, true)), 4, 'DISPATCH_BAD_FRAME'],
  ['another width than the coordinator said', auditFrame(() => {}), 8, 'DISPATCH_BAD_FRAME'],
];

for (const [name, { header, payload }, nEmbd, code] of BAD_AUDITS) {
  test(`rejects an audit with ${name}: ${code}`, () => {
    assert.throws(
      () => decodeAudit(header, payload, nEmbd),
      (e: unknown) => e instanceof DispatchProtocolError && e.code === code,
    );
  });
}

// ---------------------------------------------------------------------------------------------
// Version 2: negotiation, CLAIM and RESULT

test('negotiation: HELLO carries the highest version offered, the connection speaks the lower of both', () => {
  assert.equal(DISPATCH_VERSION, 3);
  assert.equal(negotiateVersion(1), 1);
  assert.equal(negotiateVersion(2), 2);
  assert.equal(negotiateVersion(3), 3);
  const hello = { nLayer: 2, nEmbd: 4, nExpert: 8, nExpertUsed: 2, deadlineMs: 250, numerics: 'llama' as const, modelDesc: 'x' };
  assert.equal(split(encodeHello(hello, 1)).header.version, 1);
  assert.equal(split(encodeHello(hello, 2)).header.version, 2);
  assert.equal(split(encodeHello(hello)).header.version, 3);
  assert.equal(split(encodeHelloAck(true, 0, 1)).header.version, 1);
  assert.equal(split(encodeHelloAck(true, 0, 2)).header.version, 2);
  // a frame of the other version on a connection is refused
  const req = split(encodeRequest(request(), 1)).header;
  assert.doesNotThrow(() => checkVersion(req, 1));
  assert.throws(() => checkVersion(req, 2), { code: 'DISPATCH_BAD_VERSION' });
});

test('kinds belong to versions: RESPONSE only in v1, CLAIM and RESULT in v2 and v3', () => {
  const kindAt = (version: number, kind: FrameKind): Uint8Array => {
    const b = encodeRequest(request(), 1);
    const v = new DataView(b.buffer);
    v.setUint16(4, version, true);
    v.setUint16(6, kind, true);
    return b.subarray(0, HEADER_BYTES);
  };
  assert.throws(() => decodeHeader(kindAt(2, FrameKind.Response)), { code: 'DISPATCH_BAD_KIND' });
  assert.throws(() => decodeHeader(kindAt(1, FrameKind.Claim)), { code: 'DISPATCH_BAD_KIND' });
  assert.throws(() => decodeHeader(kindAt(1, FrameKind.Result)), { code: 'DISPATCH_BAD_KIND' });
  assert.equal(decodeHeader(kindAt(2, FrameKind.Claim)).kind, FrameKind.Claim);
  assert.equal(decodeHeader(kindAt(1, FrameKind.Response)).kind, FrameKind.Response);
  assert.throws(() => decodeHeader(kindAt(3, FrameKind.Response)), { code: 'DISPATCH_BAD_KIND' });
  for (const kind of [FrameKind.Hello, FrameKind.HelloAck, FrameKind.Request, FrameKind.Audit, FrameKind.Claim, FrameKind.Result]) {
    assert.equal(decodeHeader(kindAt(3, kind)).kind, kind, `kind ${kind} in v3`);
  }
});

test('CLAIM round-trips; layout {layer, n_tokens, n_used, quiet_ms, n_claimed, n_audit}, claimed then audit flags padded to 4', () => {
  const claimed = Uint8Array.of(1, 0, 1, 1, 0, 0);
  const audit = Uint8Array.of(0, 1, 0, 0, 0, 0);
  const c = { seq: 9, layer: 1, nTokens: 3, nUsed: 2, quietMs: 0, claimed, audit };
  const f = split(encodeClaim(c));
  assert.deepEqual(f.header, { version: 2, kind: FrameKind.Claim, seq: 9, payloadBytes: 24 + 8 + 8 });
  const v = new DataView(f.payload.buffer, f.payload.byteOffset, f.payload.length);
  assert.deepEqual(
    [0, 1, 2, 3, 4, 5].map((i) => v.getUint32(4 * i, true)),
    [1, 3, 2, 0, 3, 1],
  );
  assert.deepEqual(decodeClaim(f.header, f.payload), c);
  // nothing claimed, nothing audited: the fixed part alone
  const none = split(encodeClaim({ ...c, claimed: null, audit: null, quietMs: 700 }));
  assert.equal(none.payload.length, 24);
  assert.deepEqual(decodeClaim(none.header, none.payload), { ...c, claimed: null, audit: null, quietMs: 700 });
});

test('CLAIM refusals: flags not 0/1, counts off, a pair both claimed and audited, sizes', () => {
  const c = { seq: 1, layer: 0, nTokens: 2, nUsed: 2, quietMs: 0, claimed: Uint8Array.of(1, 1, 0, 0), audit: null };
  assert.throws(() => encodeClaim({ ...c, claimed: Uint8Array.of(2, 0, 0, 0) }), { code: 'DISPATCH_BAD_CLAIM' });
  assert.throws(() => encodeClaim({ ...c, audit: Uint8Array.of(1, 0, 0, 0) }), { code: 'DISPATCH_BAD_AUDIT' });
  assert.throws(() => encodeClaim({ ...c, quietMs: 60_001 }), { code: 'DISPATCH_BAD_FRAME' });
  const good = split(encodeClaim(c));
  const mutate = (at: number, value: number): Uint8Array => {
    const p = good.payload.slice();
    new DataView(p.buffer).setUint32(at, value, true);
    return p;
  };
  assert.throws(() => decodeClaim(good.header, mutate(16, 3)), { code: 'DISPATCH_BAD_CLAIM' }, 'n_claimed off');
  assert.throws(() => decodeClaim(good.header, mutate(16, 5)), { code: 'DISPATCH_BAD_CLAIM' }, 'n_claimed over the pairs');
  assert.throws(() => decodeClaim(good.header, mutate(20, 1)), { code: 'DISPATCH_BAD_FRAME' }, 'n_audit without its flags');
  assert.throws(() => decodeClaim(good.header, good.payload.subarray(0, 26)), { code: 'DISPATCH_BAD_FRAME' });
  const flags = good.payload.slice();
  flags[24] = 7;
  assert.throws(() => decodeClaim(good.header, flags), { code: 'DISPATCH_BAD_CLAIM' });
});

test('RESULT round-trips; served ⊆ claimed, finite sums', () => {
  const nEmbd = 4;
  const r = {
    seq: 3,
    layer: 1,
    nTokens: 2,
    nUsed: 2,
    served: Uint8Array.of(1, 0, 0, 1),
    sums: Float32Array.from({ length: 8 }, (_, i) => i - 2.5),
  };
  const f = split(encodeResult(r, 2));
  assert.deepEqual(f.header, { version: 2, kind: FrameKind.Result, seq: 3, payloadBytes: 16 + 4 + 32 });
  assert.deepEqual(decodeResult(f.header, f.payload, nEmbd, Uint8Array.of(1, 1, 0, 1)), r);
  assert.throws(
    () => decodeResult(f.header, f.payload, nEmbd, Uint8Array.of(1, 1, 0, 0)),
    { code: 'DISPATCH_BAD_CLAIM' },
    'served, not claimed',
  );
  assert.throws(() => decodeResult(f.header, f.payload, 3), { code: 'DISPATCH_BAD_FRAME' }, 'another width');
  const nan = split(encodeResult({ ...r, sums: Float32Array.from({ length: 8 }, (_, i) => (i === 5 ? Number.NaN : i)) }));
  assert.throws(() => decodeResult(nan.header, nan.payload, nEmbd), { code: 'DISPATCH_BAD_FRAME' }, 'non-finite');
  const p = f.payload.slice();
  new DataView(p.buffer).setUint32(12, 3, true);
  assert.throws(() => decodeResult(f.header, p, nEmbd), { code: 'DISPATCH_BAD_CLAIM' }, 'n_served off');
});

test('a RESULT drafted in place and sealed is byte for byte the encoded one; seal counts and checks the served flags', () => {
  const r = {
    seq: 9,
    layer: 2,
    nTokens: 3,
    nUsed: 3,
    served: Uint8Array.of(1, 0, 1, 0, 0, 0, 1, 1, 1),
    sums: Float32Array.from({ length: 3 * 4 }, (_, i) => i * 0.25 - 1),
  };
  const d = draftResult({ seq: r.seq, layer: r.layer, nTokens: r.nTokens, nUsed: r.nUsed, nEmbd: 4 });
  assert.ok(d.sums.every((x) => x === 0) && d.served.every((x) => x === 0), 'a draft starts zeroed');
  d.served.set(r.served);
  d.sums.set(r.sums);
  assert.deepEqual(sealResult(d), encodeResult(r));
  const bad = draftResult({ seq: 1, layer: 0, nTokens: 1, nUsed: 2, nEmbd: 4 });
  bad.served[1] = 2;
  assert.throws(() => sealResult(bad), { code: 'DISPATCH_BAD_CLAIM' }, 'a flag of 2');
  assert.throws(() => draftResult({ seq: 1, layer: 0, nTokens: 1, nUsed: 2, nEmbd: 0 }), { code: 'DISPATCH_BAD_FRAME' }, 'n_embd 0');
  assert.throws(() => draftResult({ seq: 1, layer: 0, nTokens: 0, nUsed: 2, nEmbd: 4 }), { code: 'DISPATCH_BAD_FRAME' }, 'n_tokens 0');
});

test('FrameReader hands out a frame within one chunk as a view; a request is decoded in place when aligned, copied when not', () => {
  const bytes = encodeRequest(request());
  const reader = new FrameReader();
  // A socket's chunk is a Buffer, whose slice() is a view: the payload must be a plain Uint8Array all the same.
  const [f] = reader.push(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length));
  assert.ok(f);
  assert.equal(f.payload.buffer, bytes.buffer, 'a view of the chunk, not a copy');
  assert.ok(!Buffer.isBuffer(f.payload), 'not a Buffer');
  assert.notEqual(f.payload.slice().buffer, bytes.buffer, 'slice() copies');
  const inPlace = decodeRequest(f.header, f.payload, 8);
  assert.equal(inPlace.rows.buffer, bytes.buffer);
  const odd = new Uint8Array(bytes.length + 1);
  odd.set(bytes, 1);
  const copied = decodeRequest(f.header, odd.subarray(1 + HEADER_BYTES), 8);
  assert.notEqual(copied.rows.buffer, odd.buffer);
  // An unaligned Buffer too (its own slice() would be another view at the same odd offset).
  const oddBuffer = Buffer.from(odd.buffer, 1 + HEADER_BYTES, bytes.length - HEADER_BYTES);
  const fromBuffer = decodeRequest(f.header, oddBuffer, 8);
  for (const d of [inPlace, copied, fromBuffer]) {
    const want = request();
    assert.deepEqual([...d.rows], [...want.rows]);
    assert.deepEqual([...d.ids], [...want.ids]);
    assert.deepEqual([...d.probs], [...want.probs]);
  }
});
