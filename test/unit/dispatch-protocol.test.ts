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
  offerBitmapBytes,
  type DispatchOffer,
  type DispatchRequest,
  type DispatchResponse,
  type DispatchResult,
  type DispatchVersion,
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

// ---------------------------------------------------------------------------------------------
// Version 3: pre-claims on REQUEST, standing offers on RESULT

/** The v2 part of request()'s payload: 24 fixed bytes, rows f32[3·4], ids and probs [3·2] each. */
const REQUEST_BASE = 24 + 4 * (3 * 4 + 2 * 3 * 2);

test('v3 REQUEST: the pre-claim trailer {n_preclaimed u32, flags u8[pairs] padded to 4} round-trips; none is 4 bytes of 0', () => {
  const r = request({ preclaimed: Uint8Array.of(1, 1, 1, 1, 0, 1) });
  const f = split(encodeRequest(r, 3));
  assert.deepEqual(f.header, { version: 3, kind: FrameKind.Request, seq: 7, payloadBytes: REQUEST_BASE + 4 + 8 });
  const v = new DataView(f.payload.buffer, f.payload.byteOffset, f.payload.length);
  assert.equal(v.getUint32(REQUEST_BASE, true), 5, 'n_preclaimed after the probs');
  assert.deepEqual([...f.payload.subarray(REQUEST_BASE + 4)], [1, 1, 1, 1, 0, 1, 0, 0], 'flags, then zeros to 4');
  assert.deepEqual(decodeRequest(f.header, f.payload, 8), r);

  for (const [name, preclaimed] of [
    ['absent', undefined],
    ['null', null],
    ['all 0', new Uint8Array(6)],
  ] as const) {
    const n = split(encodeRequest(request({ preclaimed }), 3));
    assert.equal(n.payload.length, REQUEST_BASE + 4, `${name}: n_preclaimed alone`);
    assert.equal(new DataView(n.payload.buffer, n.payload.byteOffset).getUint32(REQUEST_BASE, true), 0, name);
    assert.equal(decodeRequest(n.header, n.payload, 8).preclaimed, null, name);
  }
  // v2 has no trailer
  assert.equal(split(encodeRequest(request(), 2)).payload.length, REQUEST_BASE);
  // a pre-claimed REQUEST reassembles from any chunking like any frame
  const bytes = encodeRequest(r, 3);
  for (const size of [1, 5, 17]) {
    const reader = new FrameReader();
    const frames = [];
    for (let o = 0; o < bytes.length; o += size) frames.push(...reader.push(bytes.slice(o, o + size)));
    assert.equal(frames.length, 1);
    assert.deepEqual(decodeRequest(frames[0]!.header, frames[0]!.payload, 8).preclaimed, r.preclaimed, `chunks of ${size}`);
  }
});

/**
 * A v3 request with pairs 0..3 pre-claimed (n_preclaimed 4) unless `preclaimed` says otherwise, its payload changed
 * in place by `mut`, or replaced by the bytes `mut` returns.
 */
function preclaimedPayload(
  mut: (p: Uint8Array, v: DataView) => unknown,
  preclaimed: Uint8Array | null = Uint8Array.of(1, 1, 1, 1, 0, 0),
): Framed {
  const f = split(encodeRequest(request({ preclaimed }), 3));
  const p = f.payload.slice();
  const out = mut(p, new DataView(p.buffer));
  return { header: f.header, payload: out instanceof Uint8Array ? out : p };
}

const BAD_PRECLAIMS: Array<[string, Framed, string]> = [
  [
    'a pre-claim flag of 2',
    preclaimedPayload((p) => {
      p[REQUEST_BASE + 4 + 1] = 2;
    }),
    'DISPATCH_BAD_CLAIM',
  ],
  ['n_preclaimed larger than the flags say', preclaimedPayload((_, v) => v.setUint32(REQUEST_BASE, 5, true)), 'DISPATCH_BAD_CLAIM'],
  ['n_preclaimed smaller than the flags say', preclaimedPayload((_, v) => v.setUint32(REQUEST_BASE, 3, true)), 'DISPATCH_BAD_CLAIM'],
  ['n_preclaimed over the pair count', preclaimedPayload((_, v) => v.setUint32(REQUEST_BASE, 7, true)), 'DISPATCH_BAD_FRAME'],
  [
    'n_preclaimed 0 with the flags still there (size)',
    preclaimedPayload((_, v) => v.setUint32(REQUEST_BASE, 0, true)),
    'DISPATCH_BAD_FRAME',
  ],
  [
    'n_preclaimed > 0 without the flags (size)',
    preclaimedPayload((_, v) => v.setUint32(REQUEST_BASE, 1, true), null),
    'DISPATCH_BAD_FRAME',
  ],
  ['the flags cut short (size)', preclaimedPayload((p) => p.subarray(0, p.length - 4)), 'DISPATCH_BAD_FRAME'],
  ['4 trailing bytes (size)', preclaimedPayload((p) => Uint8Array.from([...p, 0, 0, 0, 0])), 'DISPATCH_BAD_FRAME'],
  ['no trailer at all (a v2 payload under a v3 header)', preclaimedPayload((p) => p.subarray(0, REQUEST_BASE), null), 'DISPATCH_BAD_FRAME'],
];

for (const [name, { header, payload }, code] of BAD_PRECLAIMS) {
  test(`rejects a v3 request with ${name}: ${code}`, () => {
    assert.throws(
      () => decodeRequest(header, payload, 8),
      (e: unknown) => e instanceof DispatchProtocolError && e.code === code,
    );
  });
}

test('a v3 trailer under a v2 header is refused (size), and encodeRequest refuses pre-claims it cannot write', () => {
  const f = split(encodeRequest(request({ preclaimed: Uint8Array.of(1, 1, 0, 0, 0, 0) }), 3));
  assert.throws(() => decodeRequest({ ...f.header, version: 2 }, f.payload, 8), { code: 'DISPATCH_BAD_FRAME' });
  const bad: Array<[string, DispatchRequest, DispatchVersion]> = [
    ['a flag of 2', request({ preclaimed: Uint8Array.of(1, 2, 0, 0, 0, 0) }), 3],
    ['flags for too few pairs', request({ preclaimed: Uint8Array.of(1, 1) }), 3],
    ['flags for too many pairs', request({ preclaimed: new Uint8Array(8).fill(1) }), 3],
    ['pre-claims at version 2', request({ preclaimed: Uint8Array.of(1, 1, 0, 0, 0, 0) }), 2],
    ['pre-claims at version 1', request({ preclaimed: Uint8Array.of(1, 1, 0, 0, 0, 0) }), 1],
  ];
  for (const [name, r, version] of bad) assert.throws(() => encodeRequest(r, version), { code: 'DISPATCH_BAD_CLAIM' }, name);
});

/** 2 tokens × 2 used, width 4; an offer for a coordinator of 10 experts (bitmap 2 bytes, padded to 4). */
const N_EXPERT = 10;
const OFFER: DispatchOffer = { ttlMs: 250, maxPairs: 40, a: 0.5, b: 1.25, experts: Uint8Array.of(0b0000_0101, 0b0000_0010) };
const RESULT_V3: DispatchResult = {
  seq: 11,
  layer: 4,
  nTokens: 2,
  nUsed: 2,
  served: Uint8Array.of(1, 1, 0, 1),
  sums: Float32Array.from({ length: 8 }, (_, i) => i * 0.5 - 1),
  offer: OFFER,
};
/** Where the offer trailer starts in RESULT_V3's payload: fixed, served flags padded to 4, sums. */
const OFFER_AT = 16 + 4 + 32;

test('v3 RESULT with an offer: layout {ttl_ms, max_pairs, a f32, b f32} then the expert bitmap padded to 4; round-trips', () => {
  const f = split(encodeResult(RESULT_V3, 3, N_EXPERT));
  assert.deepEqual(f.header, { version: 3, kind: FrameKind.Result, seq: 11, payloadBytes: OFFER_AT + 16 + 4 });
  const v = new DataView(f.payload.buffer, f.payload.byteOffset, f.payload.length);
  assert.deepEqual(
    [v.getUint32(OFFER_AT, true), v.getUint32(OFFER_AT + 4, true), v.getFloat32(OFFER_AT + 8, true), v.getFloat32(OFFER_AT + 12, true)],
    [250, 40, 0.5, 1.25],
  );
  assert.deepEqual([...f.payload.subarray(OFFER_AT + 16)], [0b101, 0b10, 0, 0], 'experts 0, 2 and 9; zeros to 4');
  assert.equal(v.getFloat32(16 + 4, true), -1, 'the sums where v2 has them');
  assert.deepEqual(decodeResult(f.header, f.payload, 4, Uint8Array.of(1, 1, 1, 1), N_EXPERT), RESULT_V3);

  // drafted in place and sealed with the offer: the same bytes
  const d = draftResult({ seq: 11, layer: 4, nTokens: 2, nUsed: 2, nEmbd: 4, version: 3, nExpert: N_EXPERT });
  d.served.set(RESULT_V3.served);
  d.sums.set(RESULT_V3.sums);
  assert.deepEqual(sealResult(d, OFFER), encodeResult(RESULT_V3, 3, N_EXPERT));

  // bitmap sizes: ⌈n_expert / 8⌉
  assert.deepEqual(
    [1, 8, 9, 128, 256].map((n) => offerBitmapBytes(n)),
    [1, 1, 2, 16, 32],
  );
  const wide = { ...OFFER, experts: new Uint8Array(16).fill(0xff) };
  const w = split(encodeResult({ ...RESULT_V3, offer: wide }, 3, 128));
  assert.equal(w.payload.length, OFFER_AT + 16 + 16);
  assert.deepEqual(decodeResult(w.header, w.payload, 4, null, 128).offer, wide);
});

test('v3 RESULT without an offer: 16 zero bytes, no bitmap, decodes offer null; encoded, drafted or sealed alike', () => {
  const none = { ...RESULT_V3, offer: null };
  const bytes = encodeResult(none, 3, N_EXPERT);
  const f = split(bytes);
  assert.deepEqual(f.header, { version: 3, kind: FrameKind.Result, seq: 11, payloadBytes: OFFER_AT + 16 });
  assert.equal(bytes.length, HEADER_BYTES + OFFER_AT + 16, 'the header says what is there');
  assert.deepEqual([...f.payload.subarray(OFFER_AT)], new Array(16).fill(0));
  assert.deepEqual(decodeResult(f.header, f.payload, 4, null, N_EXPERT), none);
  const { offer: _, ...absent } = RESULT_V3;
  assert.deepEqual(encodeResult(absent, 3, N_EXPERT), bytes, 'offer absent = null');
  // a draft keeps room for the bitmap; sealing without an offer gives back the shorter frame, whole
  const d = draftResult({ seq: 11, layer: 4, nTokens: 2, nUsed: 2, nEmbd: 4, version: 3, nExpert: N_EXPERT });
  d.served.set(none.served);
  d.sums.set(none.sums);
  const sealed = sealResult(d);
  assert.deepEqual(sealed, bytes);
  const frames = new FrameReader().push(new Uint8Array([...sealed, ...encodeRequest(request(), 3)]));
  assert.deepEqual(
    frames.map((x) => x.header.kind),
    [FrameKind.Result, FrameKind.Request],
    'the next frame starts where the sealed one says it ends',
  );
});

test('v2 RESULT: no trailer, no offer key; an offer cannot be written at version 2', () => {
  const { offer: _, ...v2 } = RESULT_V3;
  const f = split(encodeResult(v2, 2));
  assert.deepEqual(f.header, { version: 2, kind: FrameKind.Result, seq: 11, payloadBytes: OFFER_AT });
  const back = decodeResult(f.header, f.payload, 4);
  assert.deepEqual(back, v2);
  assert.ok(!('offer' in back));
  assert.deepEqual(encodeResult(v2), encodeResult(v2, 2), 'encodeResult defaults to version 2');
  // the same frame with v3's trailer under a v2 header: 16 bytes too many
  const v3 = split(encodeResult({ ...v2, offer: null }, 3, N_EXPERT));
  assert.throws(() => decodeResult({ ...v3.header, version: 2 }, v3.payload, 4), { code: 'DISPATCH_BAD_FRAME' });
  // ... and a v2 payload under a v3 header: the trailer missing
  assert.throws(() => decodeResult({ ...f.header, version: 3 }, f.payload, 4, null, N_EXPERT), { code: 'DISPATCH_BAD_FRAME' });

  const d = draftResult({ seq: 11, layer: 4, nTokens: 2, nUsed: 2, nEmbd: 4 });
  assert.equal(d.version, 2, 'drafts default to version 2');
  assert.throws(() => sealResult(d, OFFER), { code: 'DISPATCH_BAD_FRAME' }, 'sealResult: an offer on a v2 draft');
  assert.deepEqual(
    sealResult(d, null),
    encodeResult({ ...v2, served: new Uint8Array(4), sums: new Float32Array(8) }, 2),
    'null is no offer',
  );
  assert.throws(() => encodeResult(RESULT_V3, 2), { code: 'DISPATCH_BAD_FRAME' }, 'encodeResult: an offer at version 2');
});

/** Offers within the limits: each round-trips as written. */
const GOOD_OFFERS: Array<[string, Partial<DispatchOffer>]> = [
  ['ttl_ms 1', { ttlMs: 1 }],
  ['ttl_ms at the cap', { ttlMs: DISPATCH_LIMITS.maxOfferTtlMs }],
  ['max_pairs 1', { maxPairs: 1 }],
  ['max_pairs 8192 × 64', { maxPairs: DISPATCH_LIMITS.maxRows * DISPATCH_LIMITS.maxUsed }],
  ['a 0 (nothing to take)', { a: 0 }],
  ['a 1', { a: 1 }],
  ['b negative', { b: -3.5 }],
  ['b at ±1e6', { b: -DISPATCH_LIMITS.maxOfferB }],
  ['no expert covered', { experts: new Uint8Array(2) }],
];

for (const [name, over] of GOOD_OFFERS) {
  test(`a v3 offer with ${name} round-trips`, () => {
    const offer = { ...OFFER, ...over };
    const f = split(encodeResult({ ...RESULT_V3, offer }, 3, N_EXPERT));
    assert.deepEqual(decodeResult(f.header, f.payload, 4, null, N_EXPERT).offer, offer);
  });
}

/** Offers out of range: encodeResult refuses each, and so does decodeResult when the fields are written on the wire. */
const BAD_OFFERS: Array<[string, Partial<DispatchOffer>]> = [
  ['ttl_ms 0 and max_pairs > 0', { ttlMs: 0 }],
  ['ttl_ms 1001', { ttlMs: DISPATCH_LIMITS.maxOfferTtlMs + 1 }],
  ['max_pairs 0 and ttl_ms > 0', { maxPairs: 0 }],
  ['max_pairs over 8192 × 64', { maxPairs: DISPATCH_LIMITS.maxRows * DISPATCH_LIMITS.maxUsed + 1 }],
  ['a 1.5', { a: 1.5 }],
  ['a negative', { a: -0.25 }],
  ['a NaN', { a: Number.NaN }],
  ['b Infinity', { b: Number.POSITIVE_INFINITY }],
  ['b NaN', { b: Number.NaN }],
  ['b 2e6', { b: 2 * DISPATCH_LIMITS.maxOfferB }],
];

for (const [name, over] of BAD_OFFERS) {
  test(`refuses a v3 offer with ${name}: DISPATCH_BAD_FRAME`, () => {
    const offer = { ...OFFER, ...over };
    assert.throws(() => encodeResult({ ...RESULT_V3, offer }, 3, N_EXPERT), { code: 'DISPATCH_BAD_FRAME' }, 'encode');
    const f = split(encodeResult(RESULT_V3, 3, N_EXPERT));
    const p = f.payload.slice();
    const v = new DataView(p.buffer);
    v.setUint32(OFFER_AT, offer.ttlMs, true);
    v.setUint32(OFFER_AT + 4, offer.maxPairs, true);
    v.setFloat32(OFFER_AT + 8, offer.a, true);
    v.setFloat32(OFFER_AT + 12, offer.b, true);
    assert.throws(() => decodeResult(f.header, p, 4, null, N_EXPERT), { code: 'DISPATCH_BAD_FRAME' }, 'decode');
  });
}

test('v3 offer bitmaps of the wrong length and trailing bytes are refused: DISPATCH_BAD_FRAME', () => {
  const f = split(encodeResult(RESULT_V3, 3, N_EXPERT));
  const none = split(encodeResult({ ...RESULT_V3, offer: null }, 3, N_EXPERT));
  const refused: Array<[string, () => unknown]> = [
    [
      'encode: a 3-byte bitmap for 10 experts',
      () => encodeResult({ ...RESULT_V3, offer: { ...OFFER, experts: new Uint8Array(3) } }, 3, N_EXPERT),
    ],
    [
      'encode: a 1-byte bitmap for 10 experts',
      () => encodeResult({ ...RESULT_V3, offer: { ...OFFER, experts: new Uint8Array(1) } }, 3, N_EXPERT),
    ],
    [
      'seal: a bitmap for another expert count',
      () => sealResult(draftResult({ seq: 1, layer: 0, nTokens: 1, nUsed: 1, nEmbd: 4, version: 3, nExpert: 64 }), OFFER),
    ],
    ['decode: an offer without its bitmap', () => decodeResult(f.header, f.payload.subarray(0, OFFER_AT + 16), 4, null, N_EXPERT)],
    ['decode: 4 bytes after the bitmap', () => decodeResult(f.header, Uint8Array.from([...f.payload, 0, 0, 0, 0]), 4, null, N_EXPERT)],
    ['decode: a bitmap after no offer', () => decodeResult(none.header, Uint8Array.from([...none.payload, 0, 0, 0, 0]), 4, null, N_EXPERT)],
    ['decode: for a coordinator of 40 experts (bitmap 5 bytes, 8 padded)', () => decodeResult(f.header, f.payload, 4, null, 40)],
    ['decode: the trailer cut short', () => decodeResult(none.header, none.payload.subarray(0, OFFER_AT + 12), 4, null, N_EXPERT)],
  ];
  for (const [name, fn] of refused) assert.throws(fn, { code: 'DISPATCH_BAD_FRAME' }, name);
});

test('v3 RESULT served ⊆ pre-claimed: a served pair that was not pre-claimed is refused', () => {
  const f = split(encodeResult(RESULT_V3, 3, N_EXPERT));
  assert.throws(() => decodeResult(f.header, f.payload, 4, Uint8Array.of(1, 1, 0, 0), N_EXPERT), { code: 'DISPATCH_BAD_CLAIM' });
});

test('a CLAIM carries the connection version it is written for (2 or 3), with the same payload; v1 has none', () => {
  const c = { seq: 4, layer: 0, nTokens: 2, nUsed: 2, quietMs: 0, claimed: Uint8Array.of(1, 1, 0, 0), audit: Uint8Array.of(0, 0, 1, 0) };
  const v2 = split(encodeClaim(c));
  const v3 = split(encodeClaim(c, 3));
  assert.equal(v2.header.version, 2, 'default 2');
  assert.equal(split(encodeClaim(c, 2)).header.version, 2);
  assert.equal(v3.header.version, 3);
  assert.deepEqual(v3.payload, v2.payload);
  assert.deepEqual(decodeClaim(v3.header, v3.payload), c);
  assert.throws(() => encodeClaim(c, 1), { code: 'DISPATCH_BAD_KIND' });
});
