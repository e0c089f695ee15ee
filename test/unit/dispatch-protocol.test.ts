import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  DISPATCH_LIMITS,
  DispatchProtocolError,
  FrameKind,
  FrameReader,
  HEADER_BYTES,
  NUMERICS_WIRE,
  decodeHeader,
  decodeHello,
  decodeRequest,
  decodeResponse,
  encodeHello,
  encodeHelloAck,
  encodeRequest,
  encodeResponse,
  type DispatchRequest,
} from '../../hub/dispatch/protocol.ts';

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
  const rf = split(encodeRequest(r));
  assert.equal(rf.header.seq, 7);
  assert.deepEqual(decodeRequest(rf.header, rf.payload, 8), r);

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
  assert.equal(sf.payload.length, 24 + 8 + 48, 'flags padded to 4 bytes');
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
  ['version 2', withHeader((v) => v.setUint16(4, 2, true)), 'DISPATCH_BAD_VERSION', 'header'],
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
