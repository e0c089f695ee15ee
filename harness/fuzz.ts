/**
 * Seeded hostile input for the hub (issue 14, "Hostile input, fuzzed"), and the drivers that feed it to the hub's
 * three surfaces. Hand-written: no fuzzing library (fast-check or the like) is installed, and the mutators below are
 * small. Everything is drawn from mulberry32 (shaders/random.ts), one generator per case, seeded from
 * (run seed, surface, case index): one case can be replayed alone with the same seed (`caseRng`), whatever ran before.
 *
 *   const rng = caseRng(seed, 'POST /api/admin/target', 412);
 *   const body = mutateJsonBody(rng, { base: 2 }, API_BODY_MAX_BYTES);  // { payload: Buffer, contentType, ops }
 *   const q = mutateQuery(rng, [['model', 'm']], {});                    // { query: '?model=%ff&model=', ops }
 *   const f = mutateBytes(rng, frame, [{ at: 12, size: 4, name: 'n_rows' }]);
 *
 * Mutators:
 * - JSON bodies: a value tree that can hold what JSON.stringify cannot write (duplicate keys, `__proto__` and
 *   `constructor` keys, 1e999, -0, nesting 100,000 deep), mutated by dropping and adding keys, wrong types, extreme and
 *   fractional numbers, number-like strings, unicode (lone surrogates, NUL, RTL), strings at and beyond the field and
 *   body caps, huge arrays; then, sometimes, as bytes (truncated, bit-flipped, invalid UTF-8, UTF-16, a BOM, bad
 *   syntax, padded over the body cap) and under another content type.
 * - Queries: dropped, repeated, empty and valueless parameters, unknown and prototype keys, values at and over their
 *   caps, number-like and near-enum values, bad percent-encoding, bracket syntax, thousands of parameters.
 * - Bytes (binary frames): bit flips, truncation, extension, u8/u16/u32 fields overwritten with extremes and their caps,
 *   floats set to NaN / ±∞, whole garbage, duplicated frames.
 *
 * Drivers (each case returns a failure sentence or null, with its ops for the report):
 * - HTTP (`HTTP_ENDPOINTS`, `httpCase`, `checkHttp`): bodies or queries, and now and then path parameters, the path
 *   itself and the Authorization header; every answer is 2xx, or exactly its catalogue status with a catalogue code,
 *   never INTERNAL.
 * - Volunteer channel (`ChannelFuzzer`): mutated hellos, control messages after a hello, binary frames with work ids
 *   never sent, and results for real work the hub sent (a serving volunteer): each connection ends with a close code of
 *   the catalogue (or the RFC 6455 codes `ws` answers for invalid UTF-8 and oversized frames) or stays open and answers
 *   a ping, and the work the hub sent settles.
 * - Dispatch socket (`DispatchFuzzer`): mutated HELLO and REQUEST frames, HELLOs of other shapes followed by a REQUEST
 *   of that shape, mutated AUDITs of requests the workers served, frames out of order, valid frames split into chunks,
 *   garbage: each connection is answered with frames that decode, or dropped and counted (`totals.protocolErrors`),
 *   or, when its bytes end inside a frame, left waiting for the rest.
 *
 * `startFuzzHub` builds the hub they run against: the test model as a market model whose coordinator is a stand-in
 * (answers /slots and /v1/*), a second coordinator that refuses connections, the dispatcher's socket, `--dispatch
 * always` at target 1 (volunteers are assigned at once), trust checks on (no probation, a quarter of the items
 * audited), and its event log watched for internal errors.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WebSocket, type RawData } from 'ws';
import { ERRORS } from '../hub/errors.ts';
import type { EventLog, HubEvent } from '../hub/events.ts';
import type { HubConfig } from '../hub/hub.ts';
import { API_BODY_MAX_BYTES, OPENAI_BODY_MAX_BYTES } from '../hub/limits.ts';
import { DEFAULT_SATURATION } from '../hub/market/saturation.ts';
import { freePort } from '../hub/net.ts';
import type { ModelDispatcher } from '../hub/dispatch/dispatcher.ts';
import { DEFAULT_TRUST } from '../hub/dispatch/trust.ts';
import type { WorkItem, WorkerLink } from '../hub/dispatch/worker-link.ts';
import type { VolunteerChannel } from '../hub/channel/channel.ts';
import {
  DISPATCH_LIMITS,
  type DispatchVersion,
  type FrameHeader,
  FrameKind,
  FrameReader,
  HEADER_BYTES,
  type Hello as DispatchHello,
  decodeClaim,
  decodeHeader,
  decodeHello,
  decodeResponse,
  decodeResult as decodeDispatchResult,
  encodeAudit,
  encodeClaim,
  encodeHello,
  encodeHelloAck,
  encodeRequest,
  encodeResponse,
  encodeResult as encodeDispatchResult,
} from '../protocol/dispatch.ts';
import {
  CLOSE_CODES,
  VOLUNTEER_LIMITS,
  VOLUNTEER_PATH,
  WIRE_HEADER_BYTES,
  WORK_FAILED_CODES,
  type Assign,
  type HubMessage,
  type WireEncoding,
  type WorkFailedCode,
  decodeWork,
  encodeResult,
  encodeWork,
  encodeWorkFailed,
  parseHubMessage,
} from '../protocol/channel/index.ts';
import { newVolunteer, testHub, type TestHub } from './hub-fixtures.ts';
import { testModel } from './models.ts';
import { mulberry32Uint } from '../shaders/random.ts';

// ---------------------------------------------------------------------------------------------------- seeds

/** The seed a run uses unless FUZZ_SEED says another. */
export const FUZZ_DEFAULT_SEED = 20_140_014;

export function fuzzSeed(env: NodeJS.ProcessEnv = process.env): number {
  const s = env.FUZZ_SEED;
  if (s === undefined || s === '') return FUZZ_DEFAULT_SEED;
  const n = Number(s);
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) throw new Error(`FUZZ_SEED must be an integer in [0, 2^32), got ${s}`);
  return n;
}

/** A seeded generator: mulberry32 with helpers. */
export class Rng {
  private readonly next32: () => number;

  constructor(seed: number) {
    this.next32 = mulberry32Uint(seed);
  }

  u32(): number {
    return this.next32();
  }

  /** Uniform in [0, 1). */
  float(): number {
    return this.next32() / 4294967296;
  }

  /** An integer in [0, n). */
  below(n: number): number {
    return Math.floor(this.float() * n);
  }

  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + this.below(hi - lo + 1);
  }

  chance(p: number): boolean {
    return this.float() < p;
  }

  pick<T>(xs: readonly T[]): T {
    if (xs.length === 0) throw new RangeError('pick from an empty list');
    return xs[this.below(xs.length)] as T;
  }

  /** One of the entries, each as likely as its weight. */
  weighted<T>(table: ReadonlyArray<readonly [number, T]>): T {
    let total = 0;
    for (const [w] of table) total += w;
    let x = this.float() * total;
    for (const [w, v] of table) {
      x -= w;
      if (x < 0) return v;
    }
    return (table[table.length - 1] as readonly [number, T])[1];
  }

  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = this.next32() & 0xff;
    return out;
  }
}

/** FNV-1a over the text, then one mulberry32 step to spread it. */
function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return mulberry32Uint(h)();
}

/** The generator of one case: the same (seed, surface, index) gives the same draws, whatever ran before it. */
export function caseRng(seed: number, surface: string, index: number): Rng {
  return new Rng(hash32(`${seed >>> 0}/${surface}/${index}`));
}

// ---------------------------------------------------------------------------------------------------- JSON values

/** JSON text written as is (may be invalid on purpose: `1e999`, `NaN`, nesting 100,000 deep). */
export class RawJson {
  constructor(readonly text: string) {}
}

/** An object as a list of entries: keys may repeat, and a key may be raw text (`"__proto__"`, `"constructor"`). */
export class JsonObject {
  constructor(readonly entries: Array<[string | RawJson, JsonNode]>) {}
}

export type JsonNode = null | boolean | number | string | RawJson | JsonObject | JsonNode[];

/** A plain JSON-able value (objects, arrays, strings, numbers) as a tree the mutators can edit. */
export function jsonTree(v: unknown): JsonNode {
  if (v === null || typeof v === 'boolean' || typeof v === 'number' || typeof v === 'string') return v;
  if (Array.isArray(v)) return v.map(jsonTree);
  if (typeof v === 'object') return new JsonObject(Object.entries(v as Record<string, unknown>).map(([k, x]) => [k, jsonTree(x)]));
  throw new TypeError(`not JSON: ${typeof v}`);
}

/** The tree's JSON text. Raw parts go in unchanged; a non-finite number is written as JSON cannot (`NaN`, `Infinity`). */
export function jsonText(n: JsonNode): string {
  if (n instanceof RawJson) return n.text;
  if (n instanceof JsonObject) {
    return `{${n.entries.map(([k, v]) => `${k instanceof RawJson ? k.text : JSON.stringify(k)}:${jsonText(v)}`).join(',')}}`;
  }
  if (Array.isArray(n)) return `[${n.map(jsonText).join(',')}]`;
  if (typeof n === 'number' && !Number.isFinite(n)) return String(n);
  return JSON.stringify(n);
}

interface Slot {
  node: JsonNode;
  set(v: JsonNode): void;
}

/** Every place in the tree, the root first. */
function slots(holder: { root: JsonNode }): Slot[] {
  const out: Slot[] = [{ node: holder.root, set: (v) => (holder.root = v) }];
  const walk = (n: JsonNode): void => {
    if (n instanceof JsonObject) {
      for (const e of n.entries) {
        out.push({ node: e[1], set: (v) => (e[1] = v) });
        walk(e[1]);
      }
    } else if (Array.isArray(n)) {
      for (let i = 0; i < n.length && i < 64; i++) {
        out.push({ node: n[i] as JsonNode, set: (v) => (n[i] = v) });
        walk(n[i] as JsonNode);
      }
    }
  };
  walk(holder.root);
  return out;
}

const UNICODE: readonly string[] = [
  '\u0000',
  'a\u0000b',
  '\ud800',
  '\udfff',
  'x\ud83e',
  'é',
  'e\u0301',
  '🧪',
  '\u202eevil',
  '\ufeff',
  '\uffff',
  '\u2028',
  'Ｍ',
  '\n',
  '\r\n',
  '\t',
  ' ',
  '\\',
  '"',
  "'",
  '../../etc/passwd',
  '%00',
  '%ff',
  '<script>alert(1)</script>',
  "'; DROP TABLE volunteers; --",
  '$' + '{process.exit(1)}', // an interpolation, as text
  '{{7*7}}',
  'm',
  'M',
  ' m',
  'm ',
  'y',
  'nope',
];
const NUMBER_LIKE: readonly string[] = [
  'NaN',
  'Infinity',
  '-Infinity',
  '1e999',
  '0x10',
  '1',
  '-1',
  ' 1',
  '1 ',
  '1.0',
  '',
  'null',
  'true',
  'undefined',
  '[object Object]',
  '0b1',
  '١',
  '½',
];
const NUMBERS: readonly JsonNode[] = [
  0,
  new RawJson('-0'),
  1,
  -1,
  0.5,
  1.5,
  -1.5,
  2 ** 31 - 1,
  2 ** 31,
  2 ** 32 - 1,
  2 ** 32,
  2 ** 50,
  2 ** 50 + 1,
  2 ** 53 - 1,
  2 ** 53,
  2 ** 53 + 2,
  -(2 ** 53),
  1e21,
  1e308,
  -1e308,
  5e-324,
  new RawJson('1e999'),
  new RawJson('-1e999'),
  new RawJson('1E400'),
  new RawJson('1.0'),
  new RawJson('1e2'),
  new RawJson('-0.0'),
  new RawJson('0.0000000000000000000000000001'),
  new RawJson('123456789012345678901234567890'),
];
/** Field caps the hub and the wire state (lengths in characters): strings are drawn at and just over them. */
const STRING_LENGTHS: readonly number[] = [64, 100, 101, 128, 129, 200, 201, 256, 257, 512, 513, 1024, 1025, 2048, 2049];

/** A fresh value of some type (a pool of shared objects would be mutated through a later op). */
function wrongType(rng: Rng): JsonNode {
  switch (rng.below(13)) {
    case 0:
      return null;
    case 1:
      return true;
    case 2:
      return false;
    case 3:
      return 0;
    case 4:
      return -1;
    case 5:
      return 1.5;
    case 6:
      return '';
    case 7:
      return 'x';
    case 8:
      return [];
    case 9:
      return new JsonObject([]);
    case 10:
      return [1, 2, 3];
    case 11:
      return new JsonObject([['a', 1]]);
    default:
      return [[0, 0, 1]];
  }
}

function nearNumber(rng: Rng, v: JsonNode): JsonNode {
  if (typeof v === 'number' && rng.chance(0.5)) {
    return rng.pick([v - 1, v + 1, -v, v * 2, v + 0.5, v * 1024, v - 0.000001, -v - 1]);
  }
  return rng.pick(NUMBERS);
}

/** A string `length` units long: ASCII, 2-byte, 4-byte (surrogate pairs) or control characters. */
function longString(rng: Rng, length: number): string {
  const unit = rng.pick(['x', 'é', '🧪', '\u0000', 'ab']);
  return unit.repeat(Math.max(1, Math.ceil(length / unit.length))).slice(0, length);
}

/** Nesting `depth` deep, as raw text (no recursion writes or reads it here). */
function deepNesting(rng: Rng, depth: number): RawJson {
  if (rng.chance(0.5)) return new RawJson(`${'['.repeat(depth)}${']'.repeat(depth)}`);
  return new RawJson(`${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`);
}

const PROTO_KEYS: readonly string[] = [
  '__proto__',
  'constructor',
  'prototype',
  '__defineGetter__',
  'hasOwnProperty',
  'toString',
  'valueOf',
];
const UNKNOWN_KEYS: readonly string[] = [
  'x',
  'extra',
  '',
  ' ',
  'MODEL',
  'model ',
  'Model',
  '\u0000',
  'type',
  'id',
  'a'.repeat(300),
  '🧪',
  '$where',
];

type TreeOp =
  | 'drop-key'
  | 'add-key'
  | 'proto-key'
  | 'dup-key'
  | 'wrong-type'
  | 'number'
  | 'number-string'
  | 'unicode'
  | 'long-string'
  | 'huge-string'
  | 'deep'
  | 'array'
  | 'wrap'
  | 'root';

const TREE_OPS: ReadonlyArray<readonly [number, TreeOp]> = [
  [10, 'drop-key'],
  [8, 'add-key'],
  [4, 'proto-key'],
  [4, 'dup-key'],
  [14, 'wrong-type'],
  [14, 'number'],
  [6, 'number-string'],
  [7, 'unicode'],
  [7, 'long-string'],
  [2, 'huge-string'],
  [3, 'deep'],
  [6, 'array'],
  [3, 'wrap'],
  [2, 'root'],
];

/**
 * One mutation of the tree in `holder`, named in the returned op. `capBytes` is the body cap the receiver applies:
 * huge strings and deep nesting are drawn just under and over it.
 */
export function mutateTree(rng: Rng, holder: { root: JsonNode }, capBytes: number): string {
  const op = rng.weighted(TREE_OPS);
  const all = slots(holder);
  const objects = all.filter((s) => s.node instanceof JsonObject).map((s) => s.node as JsonObject);
  const slot = rng.pick(all.length > 1 && rng.chance(0.85) ? all.slice(1) : all);
  switch (op) {
    case 'drop-key': {
      const o = objects.filter((x) => x.entries.length > 0);
      if (o.length === 0) break;
      const t = rng.pick(o);
      const [k] = t.entries.splice(rng.below(t.entries.length), 1)[0] as [string | RawJson, JsonNode];
      return `drop-key ${k instanceof RawJson ? k.text : JSON.stringify(k)}`;
    }
    case 'add-key': {
      if (objects.length === 0) break;
      const k = rng.pick(UNKNOWN_KEYS);
      rng.pick(objects).entries.push([k, wrongType(rng)]);
      return `add-key ${JSON.stringify(k.slice(0, 16))}`;
    }
    case 'proto-key': {
      if (objects.length === 0) break;
      const k = rng.pick(PROTO_KEYS);
      const v = rng.pick<() => JsonNode>([
        () => new JsonObject([]),
        () => new JsonObject([['polluted', true]]),
        () => new JsonObject([['prototype', new JsonObject([['polluted', true]])]]),
        () => 'x',
        () => null,
      ])();
      rng.pick(objects).entries.push([new RawJson(JSON.stringify(k)), v]);
      return `proto-key ${k}`;
    }
    case 'dup-key': {
      const o = objects.filter((x) => x.entries.length > 0);
      if (o.length === 0) break;
      const t = rng.pick(o);
      const [k] = rng.pick(t.entries);
      t.entries.push([k, wrongType(rng)]);
      return `dup-key ${k instanceof RawJson ? k.text : JSON.stringify(k)}`;
    }
    case 'wrong-type':
      slot.set(wrongType(rng));
      return 'wrong-type';
    case 'number': {
      const n = nearNumber(rng, slot.node);
      slot.set(n);
      return `number ${jsonText(n)}`;
    }
    case 'number-string': {
      const s = rng.pick(NUMBER_LIKE);
      slot.set(s);
      return `number-string ${JSON.stringify(s)}`;
    }
    case 'unicode': {
      const s = rng.pick(UNICODE);
      slot.set(typeof slot.node === 'string' && rng.chance(0.5) ? slot.node + s : s);
      return `unicode ${JSON.stringify(s.slice(0, 16))}`;
    }
    case 'long-string': {
      const n = rng.pick(STRING_LENGTHS);
      slot.set(longString(rng, n));
      return `long-string ${n}`;
    }
    case 'huge-string': {
      const n = rng.pick([capBytes >> 1, capBytes - 64, capBytes + 1, capBytes * 2]);
      slot.set('x'.repeat(Math.max(1, n)));
      return `huge-string ${n}`;
    }
    case 'deep': {
      const d = rng.pick([32, 256, 1000, 5000, 20_000, 100_000]);
      slot.set(deepNesting(rng, d));
      return `deep ${d}`;
    }
    case 'array': {
      const n = rng.pick([0, 1, 2, 3, 4, 255, 256, 257, 1000, 10_000]);
      const el = rng.pick<() => JsonNode>([() => 0, () => [0, 0, 1], () => 'x', () => null, () => new JsonObject([])]);
      slot.set(Array.from({ length: n }, el));
      return `array ${n}`;
    }
    case 'wrap':
      slot.set(rng.chance(0.5) ? [slot.node] : new JsonObject([['v', slot.node]]));
      return 'wrap';
    case 'root': {
      const old = holder.root;
      holder.root = rng.pick<() => JsonNode>([
        () => null,
        () => [],
        () => [old],
        () => 'body',
        () => 42,
        () => true,
        () => jsonText(old),
      ])();
      return 'root';
    }
  }
  slot.set(wrongType(rng));
  return 'wrong-type';
}

// ---------------------------------------------------------------------------------------------------- bodies as bytes

const utf8 = new TextEncoder();

type TextOp =
  | 'truncate'
  | 'bit-flip'
  | 'insert-bytes'
  | 'garbage-suffix'
  | 'bom'
  | 'invalid-utf8'
  | 'utf16'
  | 'empty'
  | 'whitespace'
  | 'syntax'
  | 'pad-over-cap'
  | 'two-documents';

const TEXT_OPS: ReadonlyArray<readonly [number, TextOp]> = [
  [12, 'truncate'],
  [12, 'bit-flip'],
  [6, 'insert-bytes'],
  [6, 'garbage-suffix'],
  [3, 'bom'],
  [6, 'invalid-utf8'],
  [2, 'utf16'],
  [3, 'empty'],
  [3, 'whitespace'],
  [10, 'syntax'],
  [3, 'pad-over-cap'],
  [3, 'two-documents'],
];

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** One byte-level damage to a JSON text. */
export function mutateText(rng: Rng, bytes: Uint8Array, capBytes: number): { bytes: Uint8Array; op: string } {
  const op = rng.weighted(TEXT_OPS);
  const at = rng.below(bytes.length + 1);
  switch (op) {
    case 'truncate':
      return { bytes: bytes.slice(0, rng.below(Math.max(1, bytes.length))), op };
    case 'bit-flip': {
      const out = bytes.slice();
      const n = rng.int(1, 4);
      for (let i = 0; i < n && out.length > 0; i++) {
        const p = rng.below(out.length);
        out[p] = (out[p] as number) ^ (1 << rng.below(8));
      }
      return { bytes: out, op: `bit-flip ×${n}` };
    }
    case 'insert-bytes':
      return { bytes: concat(bytes.subarray(0, at), rng.bytes(rng.int(1, 8)), bytes.subarray(at)), op };
    case 'garbage-suffix':
      return { bytes: concat(bytes, utf8.encode(rng.pick([',', '}', ']', 'x', '\u0000', '\n\n{}', '{"a":1}', 'null', '"']))), op };
    case 'bom':
      return { bytes: concat(Uint8Array.of(0xef, 0xbb, 0xbf), bytes), op };
    case 'invalid-utf8': {
      const bad = rng.pick([[0xff], [0xfe, 0xff], [0xc0, 0xaf], [0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xe2, 0x82]]);
      return { bytes: concat(bytes.subarray(0, at), Uint8Array.from(bad), bytes.subarray(at)), op };
    }
    case 'utf16':
      return { bytes: new Uint8Array(Buffer.from(Buffer.from(bytes).toString('utf8'), 'utf16le')), op };
    case 'empty':
      return { bytes: new Uint8Array(0), op };
    case 'whitespace': {
      const ws = utf8.encode(' \t\r\n'.repeat(rng.int(1, 256)));
      return { bytes: concat(ws, bytes, ws), op };
    }
    case 'syntax': {
      const text = Buffer.from(bytes).toString('utf8');
      const edits: Array<() => string> = [
        () => text.replace(':', '='),
        () => text.replaceAll('"', "'"),
        () => text.replace(/([}\]])$/, ',$1'),
        () => `/* comment */${text}`,
        () => text.replace(/"([A-Za-z_]+)":/, '$1:'),
        () => text.replace(/(\d+)/, '$1.'),
        () => text.replace(/(\d+)/, '0$1'),
        () => text.replace(/(\d+)/, 'NaN'),
        () => text.replace(/(\d+)/, '+$1'),
        () => text.replace(/true|false/, 'True'),
        () => text.replace('{', '['),
        () => `${text.slice(0, at)}\\${text.slice(at)}`,
      ];
      return { bytes: utf8.encode(rng.pick(edits)()), op };
    }
    case 'pad-over-cap': {
      const over = Math.max(0, capBytes - bytes.length) + rng.int(1, 1024);
      return { bytes: concat(bytes, new Uint8Array(over).fill(0x20)), op: `pad-over-cap +${over}` };
    }
    case 'two-documents':
      return { bytes: concat(bytes, bytes), op };
  }
}

/** What an HTTP body is sent as (no content type = the header left out). */
export const CONTENT_TYPES: readonly (string | undefined)[] = [
  undefined,
  '',
  'text/plain',
  'text/json',
  'application/x-www-form-urlencoded',
  'multipart/form-data; boundary=zz',
  'application/octet-stream',
  'application/json; charset=utf-8',
  'application/json; charset=utf-16',
  'application/json; charset=latin1',
  'APPLICATION/JSON',
  'application/json;;',
  'application/json; x="y"',
  'application/vnd.api+json',
  'application/jsonp',
  'application/*',
  '*/*',
  'application/json, text/plain',
  ' application/json',
  'application/json ',
  'application/merge-patch+json',
];

export interface MutatedBody {
  payload: Buffer;
  /** undefined: no content-type header. */
  contentType: string | undefined;
  ops: string[];
}

/**
 * A valid body, mutated: 1–3 tree ops (sometimes none: a valid body must pass), then sometimes a byte op, then
 * sometimes another content type. `contentTypes: false` for a channel message (no header to vary).
 */
export function mutateJsonBody(rng: Rng, valid: unknown, capBytes: number, opts: { contentTypes?: boolean } = {}): MutatedBody {
  const holder = { root: jsonTree(valid) };
  const ops: string[] = [];
  if (!rng.chance(0.06)) {
    const n = rng.weighted([
      [6, 1],
      [3, 2],
      [1, 3],
    ] as const);
    for (let i = 0; i < n; i++) ops.push(mutateTree(rng, holder, capBytes));
  }
  let bytes: Uint8Array = utf8.encode(jsonText(holder.root));
  if (rng.chance(0.22)) {
    const m = mutateText(rng, bytes, capBytes);
    bytes = m.bytes;
    ops.push(m.op);
  }
  let contentType: string | undefined = 'application/json';
  if (opts.contentTypes !== false && rng.chance(0.08)) {
    contentType = rng.pick(CONTENT_TYPES);
    ops.push(`content-type ${JSON.stringify(contentType ?? null)}`);
  }
  if (ops.length === 0) ops.push('valid');
  return { payload: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), contentType, ops };
}

// ---------------------------------------------------------------------------------------------------- queries

interface QueryParam {
  k: string;
  v: string | null;
  /** k and v are written as they are (already percent-encoded, or broken on purpose). */
  raw?: boolean;
}

const BAD_PERCENT: readonly string[] = ['%', '%z', '%zz', '%f', '%ff', '%c0%af', '%ed%a0%80', '%00', '%%', '%2', '%E2%82', '%fe%ff'];
const QUERY_NUMBERS: readonly string[] = [
  '-1',
  '0',
  '1',
  '1.5',
  '1e3',
  '0x10',
  '99999999999',
  '9999999999999999999999',
  '00001',
  ' 1',
  '+1',
  'NaN',
  'Infinity',
  '١',
  '1 ',
  '',
  '4294967296',
  '2147483648',
  '1000',
  '1001',
  '500',
  '501',
];

function nearEnum(rng: Rng, values: readonly string[]): string {
  const v = rng.pick(values);
  return rng.pick([v.toUpperCase(), `${v} `, ` ${v}`, `${v}\u0000`, v.slice(0, -1), `${v}x`, `${v},${v}`, v.normalize('NFD'), 'all', '*']);
}

/** encodeURIComponent that takes lone surrogates too (as U+FFFD, what a UTF-8 encoder sends for them). */
export function pctEncode(s: string): string {
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(b);
    out += /[A-Za-z0-9\-_.!~*'()]/.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

function serializeQuery(params: QueryParam[]): string {
  const text = params
    .map((p) => {
      const k = p.raw ? p.k : pctEncode(p.k);
      if (p.v === null) return k;
      return `${k}=${p.raw ? p.v : pctEncode(p.v)}`;
    })
    .join('&');
  return text === '' ? '' : `?${text}`;
}

type QueryOp =
  | 'drop'
  | 'unknown'
  | 'repeat'
  | 'empty'
  | 'no-equals'
  | 'long'
  | 'number'
  | 'enum'
  | 'unicode'
  | 'bad-percent'
  | 'proto'
  | 'brackets'
  | 'many'
  | 'separators'
  | 'plus';

const QUERY_OPS: ReadonlyArray<readonly [number, QueryOp]> = [
  [10, 'drop'],
  [7, 'unknown'],
  [8, 'repeat'],
  [8, 'empty'],
  [4, 'no-equals'],
  [8, 'long'],
  [12, 'number'],
  [8, 'enum'],
  [8, 'unicode'],
  [8, 'bad-percent'],
  [5, 'proto'],
  [4, 'brackets'],
  [1, 'many'],
  [4, 'separators'],
  [3, 'plus'],
];

/**
 * A valid query, mutated by 1–3 ops (sometimes none). `enums` names the parameters that take one of a few words
 * (their near misses are drawn), `numeric` those that take integers.
 */
export function mutateQuery(
  rng: Rng,
  valid: ReadonlyArray<readonly [string, string]>,
  enums: Readonly<Record<string, readonly string[]>> = {},
): { query: string; ops: string[] } {
  const params: QueryParam[] = valid.map(([k, v]) => ({ k, v }));
  const ops: string[] = [];
  const n = rng.chance(0.06) ? 0 : rng.weighted([[6, 1] as const, [3, 2] as const, [1, 3] as const]);
  const some = (): QueryParam | undefined => (params.length > 0 ? rng.pick(params) : undefined);
  for (let i = 0; i < n; i++) {
    const op = rng.weighted(QUERY_OPS);
    const p = some();
    switch (op) {
      case 'drop':
        if (p) params.splice(params.indexOf(p), 1);
        break;
      case 'unknown':
        params.push({ k: rng.pick(UNKNOWN_KEYS.filter((k) => k !== '')), v: rng.pick(['1', '', 'x', 'm']) });
        break;
      case 'repeat':
        if (p) params.push({ k: p.k, v: rng.chance(0.5) ? p.v : rng.pick(['', 'x', '1']) });
        break;
      case 'empty':
        if (p) p.v = '';
        break;
      case 'no-equals':
        if (p) p.v = null;
        break;
      case 'long':
        if (p) p.v = longString(rng, rng.pick([129, 257, 1025, 10_000, 70_000]));
        break;
      case 'number':
        if (p) p.v = rng.pick(QUERY_NUMBERS);
        break;
      case 'enum': {
        const keys = Object.keys(enums);
        if (keys.length > 0) {
          const k = rng.pick(keys);
          const q = params.find((x) => x.k === k) ?? { k, v: '' };
          if (!params.includes(q)) params.push(q);
          q.v = nearEnum(rng, enums[k] as readonly string[]);
        } else if (p) p.v = rng.pick(NUMBER_LIKE);
        break;
      }
      case 'unicode':
        if (p) p.v = rng.pick(UNICODE);
        break;
      case 'bad-percent':
        if (p) {
          p.k = pctEncode(p.k);
          p.v = `${p.v === null ? '' : pctEncode(p.v)}${rng.pick(BAD_PERCENT)}`;
          p.raw = true;
        } else params.push({ k: rng.pick(BAD_PERCENT), v: '1', raw: true });
        break;
      case 'proto':
        params.push({ k: rng.pick(PROTO_KEYS), v: rng.pick(['1', '', 'x', '{}']) });
        break;
      case 'brackets':
        if (p) {
          p.k = `${pctEncode(p.k)}${rng.pick(['[]', '[0]', '[a]', '.b', '[__proto__]'])}`;
          p.v = pctEncode(p.v ?? '');
          p.raw = true;
        }
        break;
      case 'many':
        for (let j = 0; j < rng.pick([100, 1000, 3000]); j++) params.push({ k: `p${j}`, v: String(j) });
        break;
      case 'separators':
        params.push({ k: rng.pick(['', '&', ';', '?', '=', '==', '#frag']), v: null, raw: true });
        break;
      case 'plus':
        if (p) {
          p.k = pctEncode(p.k);
          p.v = `${pctEncode(p.v ?? '')}${rng.pick(['+', '+x', '%20', '%2B'])}`;
          p.raw = true;
        }
        break;
    }
    ops.push(p ? `${op} ${p.k.slice(0, 24)}` : op);
  }
  if (ops.length === 0) ops.push('valid');
  return { query: serializeQuery(params), ops };
}

// ---------------------------------------------------------------------------------------------------- bytes

/** A little-endian integer field of a binary frame, and the values its receiver caps it at. */
export interface ByteField {
  at: number;
  size: 1 | 2 | 4;
  name: string;
  caps?: readonly number[];
}

function readField(b: Uint8Array, f: ByteField): number {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  return f.size === 1 ? v.getUint8(f.at) : f.size === 2 ? v.getUint16(f.at, true) : v.getUint32(f.at, true);
}

function writeField(b: Uint8Array, f: ByteField, x: number): void {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const max = f.size === 1 ? 0xff : f.size === 2 ? 0xffff : 0xffffffff;
  const y = ((Math.trunc(x) % (max + 1)) + (max + 1)) % (max + 1);
  if (f.size === 1) v.setUint8(f.at, y);
  else if (f.size === 2) v.setUint16(f.at, y, true);
  else v.setUint32(f.at, y >>> 0, true);
}

function extremes(v: number, f: ByteField): number[] {
  const caps = f.caps ?? [];
  return [
    0,
    1,
    2,
    v - 1,
    v + 1,
    v * 2,
    0x7f,
    0x80,
    0xff,
    0x100,
    0xffff,
    0x10000,
    0x7fffffff,
    0x80000000,
    0xfffffffe,
    0xffffffff,
    ...caps,
    ...caps.map((c) => c + 1),
    ...caps.map((c) => c - 1),
  ];
}

type ByteOp = 'bit-flip' | 'truncate' | 'extend' | 'field' | 'float' | 'garbage' | 'duplicate' | 'zero';

const BYTE_OPS: ReadonlyArray<readonly [number, ByteOp]> = [
  [18, 'bit-flip'],
  [12, 'truncate'],
  [9, 'extend'],
  [38, 'field'],
  [8, 'float'],
  [4, 'garbage'],
  [4, 'duplicate'],
  [4, 'zero'],
];

/**
 * A valid frame, mutated by 1–3 ops (sometimes none). `fields` are its integer fields (overwritten with extremes
 * and caps), `floats` the offsets of f32 slots (set to NaN, ±∞, -0, 3.4e38).
 */
export function mutateBytes(
  rng: Rng,
  valid: Uint8Array,
  fields: readonly ByteField[],
  opts: { floats?: readonly number[] } = {},
): { bytes: Uint8Array; ops: string[] } {
  let b: Uint8Array = valid.slice();
  const ops: string[] = [];
  const n = rng.chance(0.06) ? 0 : rng.weighted([[6, 1] as const, [3, 2] as const, [1, 3] as const]);
  for (let i = 0; i < n; i++) {
    const op = rng.weighted(BYTE_OPS);
    switch (op) {
      case 'bit-flip': {
        const k = rng.int(1, 8);
        for (let j = 0; j < k && b.length > 0; j++) {
          const p = rng.below(b.length);
          b[p] = (b[p] as number) ^ (1 << rng.below(8));
        }
        ops.push(`bit-flip ×${k}`);
        break;
      }
      case 'truncate': {
        const len = rng.chance(0.3) ? rng.below(Math.min(b.length, 40)) : rng.below(Math.max(1, b.length));
        b = b.slice(0, len);
        ops.push(`truncate to ${len}`);
        break;
      }
      case 'extend': {
        const k = rng.pick([1, 2, 3, 4, 7, 64, 1000, 70_000]);
        b = concat(b, rng.chance(0.5) ? new Uint8Array(k) : rng.bytes(k));
        ops.push(`extend +${k}`);
        break;
      }
      case 'field': {
        const usable = fields.filter((f) => f.at + f.size <= b.length);
        if (usable.length === 0) break;
        const f = rng.pick(usable);
        const x = rng.pick(extremes(readField(b, f), f));
        writeField(b, f, x);
        ops.push(`${f.name} = ${readField(b, f)}`);
        break;
      }
      case 'float': {
        const usable = (opts.floats ?? []).filter((o) => o + 4 <= b.length);
        if (usable.length === 0) break;
        const o = rng.pick(usable);
        const x = rng.pick([Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0, 3.4e38, 1e-45]);
        new DataView(b.buffer, b.byteOffset, b.byteLength).setFloat32(o, x, true);
        ops.push(`f32 @${o} = ${x}`);
        break;
      }
      case 'garbage': {
        const len = rng.pick([0, 1, 15, 16, 31, 32, 33, 100, 1000]);
        b = rng.bytes(len);
        ops.push(`garbage ${len}`);
        break;
      }
      case 'duplicate':
        b = concat(b, b);
        ops.push('duplicate');
        break;
      case 'zero': {
        const from = rng.below(Math.max(1, b.length));
        const to = Math.min(b.length, from + rng.int(1, 16));
        b.fill(0, from, to);
        ops.push(`zero [${from}, ${to})`);
        break;
      }
    }
  }
  if (ops.length === 0) ops.push('valid');
  return { bytes: b, ops };
}

// ---------------------------------------------------------------------------------------------------- outcome tallies

/** Counts by label (status codes, close codes, outcomes), printable in one line. */
export class Tally {
  readonly counts = new Map<string, number>();

  add(label: string, n = 1): void {
    this.counts.set(label, (this.counts.get(label) ?? 0) + n);
  }

  get total(): number {
    let t = 0;
    for (const n of this.counts.values()) t += n;
    return t;
  }

  merge(other: Tally): void {
    for (const [k, n] of other.counts) this.add(k, n);
  }

  toString(): string {
    return [...this.counts]
      .sort((a, b) => b[1] - a[1])
      .map(([k, n]) => `${k} ${n}`)
      .join(', ');
  }
}

/** One case's verdict: null failure = as the catalogue says. */
export interface CaseResult {
  surface: string;
  index: number;
  ops: string[];
  /** The status, close code or outcome, for the tally. */
  outcome: string;
  failure: string | null;
}

export function describeFailure(seed: number, r: CaseResult): string {
  return `FUZZ_SEED=${seed} FUZZ_CASE='${r.surface}#${r.index}' [${r.ops.join('; ')}] → ${r.outcome}: ${r.failure}`;
}

/** `FUZZ_CASE='<surface>#<index>'`: run that one case only. */
export function fuzzCaseFilter(env: NodeJS.ProcessEnv = process.env): { surface: string; index: number } | null {
  const s = env.FUZZ_CASE;
  if (!s) return null;
  const at = s.lastIndexOf('#');
  const index = Number(s.slice(at + 1));
  if (at < 0 || !Number.isInteger(index) || index < 0) throw new Error(`FUZZ_CASE must be '<surface>#<index>', got ${s}`);
  return { surface: s.slice(0, at), index };
}

/** Runs `run(i)` for each index with at most `lanes` at once; lane numbers are 0..lanes-1. */
export async function runLanes<T>(indices: readonly number[], lanes: number, run: (i: number, lane: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(indices.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(lanes, indices.length) }, async (_, lane) => {
      while (next < indices.length) {
        const k = next++;
        out[k] = await run(indices[k] as number, lane);
      }
    }),
  );
  return out;
}

const wait = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------------- the hub

export const FUZZ_ADMIN_TOKEN = 'fuzz-admin-token-0123456789abcdef';
/** The market model's name; its coordinator is the stand-in. */
export const FUZZ_MODEL = 'm';
/** A coordinator that refuses connections (a closed port): the proxy's COORDINATOR_UNAVAILABLE. */
export const FUZZ_DOWN_MODEL = 'y';

/** The hub under fuzz and what the drivers need of it. */
export interface FuzzHub {
  t: TestHub;
  http: string;
  ws: string;
  socketPath: string;
  channel: VolunteerChannel;
  dispatcher(): ModelDispatcher;
  /** Events that say the hub failed on its side (internal errors, a failed assignment round), in order. */
  internalErrors: HubEvent[];
  nodeToken: string;
  wallet: string;
  /** A fresh volunteer's node token (the channel's serving volunteers each get a wallet: a bad result quarantines it). */
  login(): Promise<string>;
  /** Puts the admin-changeable state back: dispatch always, the configured target, boost 1 (the HTTP fuzz changes them). */
  restoreAdmin(): void;
  close(): Promise<void>;
}

/** A coordinator stand-in: `/slots` with 4 idle slots, any POST answered with a small completion. */
async function standInCoordinator(): Promise<{ url: string; close(): Promise<void> }> {
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.method === 'GET' && req.url === '/slots') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(Array.from({ length: 4 }, (_, id) => ({ id, is_processing: false }))));
      } else if (req.method === 'POST') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"id":"fuzz","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}');
      } else res.writeHead(404).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** Failures a hub reports about itself in its event log. */
const INTERNAL = /internal error|assigning volunteers failed/i;

export interface FuzzHubOptions {
  /** The hub's clock follows Date.now() (the soak: eviction and TTLs run); default: frozen, as testHub's. */
  realTime?: boolean;
  over?: Partial<HubConfig>;
}

/**
 * Two MoE layers of 8 experts, n_embd 32 (the channel test's model): small slices, so assignments are quick.
 */
export async function startFuzzHub(opts: FuzzHubOptions = {}): Promise<FuzzHub> {
  const model = await testModel({ arch: 'qwen3moe', layers: 2, nEmbd: 32, ff: 32, nExpert: 8, nExpertUsed: 2, seed: 21 });
  const coordinator = await standInCoordinator();
  const downPort = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'es-fuzz-'));
  const socketPath = join(dir, 'd.sock');
  const t = await testHub({
    models: [{ path: model.path, name: FUZZ_MODEL }],
    externals: [
      { name: FUZZ_MODEL, url: coordinator.url },
      { name: FUZZ_DOWN_MODEL, url: `http://127.0.0.1:${downPort}` },
    ],
    dispatchSockets: [{ name: FUZZ_MODEL, path: socketPath }],
    dispatchMode: 'always',
    saturation: { ...DEFAULT_SATURATION, targetBase: 1 },
    poller: { intervalMs: 1_000, timeoutMs: 500 },
    // Thousands of connections from one address on a frozen clock: the per-address open rate is lifted with the rest.
    channel: {
      controlPerSec: 1e6,
      helloTimeoutMs: 3_000,
      forgetWorkMs: 1_000,
      loadTimeoutMs: 5_000,
      opensPerAddress: { capacity: 1e9, refillPerSec: 1e9 },
    },
    authRateLimit: { capacity: 1e9, refillPerSec: 1e9 },
    // Trusted at once, a quarter of the items audited: answers are used (CLAIM / RESULT run), a refused result
    // frame quarantines the worker (the trust checks run), and audits are asked for.
    trust: { ...DEFAULT_TRUST, probation: 0, spotRate: 0.25 },
    adminToken: FUZZ_ADMIN_TOKEN,
    ...opts.over,
  });
  const targetBase = opts.over?.saturation?.targetBase ?? 1;
  if (opts.realTime) Object.defineProperty(t.clock, 'now', { get: () => Date.now(), configurable: true });
  const internalErrors: HubEvent[] = [];
  const log = (t.hub as unknown as { events: EventLog }).events;
  const unsubscribe = log.subscribe((e) => {
    if (INTERNAL.test(e.detail)) internalErrors.push(e);
  });
  await t.app.listen({ port: 0, host: '127.0.0.1' });
  await t.hub.start();
  const { port } = t.app.server.address() as AddressInfo;
  const volunteer = newVolunteer();
  const nodeToken = await t.login(volunteer);
  const internals = t.hub as unknown as { channel: VolunteerChannel; dispatchers: Map<string, ModelDispatcher> };
  return {
    t,
    http: `http://127.0.0.1:${port}`,
    ws: `ws://127.0.0.1:${port}${VOLUNTEER_PATH}`,
    socketPath,
    channel: internals.channel,
    dispatcher: () => {
      const d = internals.dispatchers.get(FUZZ_MODEL);
      if (!d) throw new Error('the hub has no dispatcher for the fuzz model');
      return d;
    },
    internalErrors,
    nodeToken,
    wallet: volunteer.wallet,
    login: () => t.login(newVolunteer()),
    restoreAdmin: () => {
      t.hub.adminDispatch(FUZZ_MODEL, 'always');
      t.hub.adminTarget({ base: targetBase, boost: DEFAULT_SATURATION.boost });
    },
    async close() {
      unsubscribe();
      await t.close();
      await coordinator.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// ---------------------------------------------------------------------------------------------------- HTTP

export interface HttpContext {
  nodeToken: string;
  adminToken: string;
  wallet: string;
  /** A fresh challenge of the context's volunteer, signed: the valid body of POST /api/auth/node-token. */
  signedChallenge(): Promise<{ wallet: string; nonce: string; signature: string }>;
}

export interface HttpEndpoint {
  /** `METHOD /path` as the catalogue of cases names it (FUZZ_CASE uses it). */
  name: string;
  method: 'GET' | 'POST';
  /** The path; `:x` segments are path parameters with valid values in `params`. */
  path: string;
  params?: Readonly<Record<string, string>>;
  query?: ReadonlyArray<readonly [string, string]>;
  enums?: Readonly<Record<string, readonly string[]>>;
  body?: (ctx: HttpContext) => unknown | Promise<unknown>;
  auth?: 'node' | 'admin';
  /** The body cap fastify applies to this route. */
  cap: number;
}

const DEVICE = { maxStorageBufferBindingSize: 1 << 30, maxBufferSize: 1 << 30, memoryBudgetBytes: 1 << 30 };

/** Every route of app.ts and dashboard/routes.ts but the SSE stream (it does not end), with a valid input each. */
export const HTTP_ENDPOINTS: readonly HttpEndpoint[] = [
  {
    name: 'POST /api/auth/challenge',
    method: 'POST',
    path: '/api/auth/challenge',
    body: (c) => ({ wallet: c.wallet }),
    cap: API_BODY_MAX_BYTES,
  },
  {
    name: 'POST /api/auth/node-token',
    method: 'POST',
    path: '/api/auth/node-token',
    body: (c) => c.signedChallenge(),
    cap: API_BODY_MAX_BYTES,
  },
  {
    name: 'POST /api/expert-volunteer',
    method: 'POST',
    path: '/api/expert-volunteer',
    auth: 'node',
    body: () => ({ model: FUZZ_MODEL, max_experts: 4, worker_id: 'fz-http-1', device: DEVICE }),
    cap: API_BODY_MAX_BYTES,
  },
  {
    name: 'POST /api/expert-coverage',
    method: 'POST',
    path: '/api/expert-coverage',
    auth: 'node',
    body: () => ({ worker_id: 'fz-http-1', model: FUZZ_MODEL, n_layer: 2, n_expert: 8, segments: [[0, 0, 4]] }),
    cap: API_BODY_MAX_BYTES,
  },
  {
    name: 'POST /api/admin/workers/:id/release',
    method: 'POST',
    path: '/api/admin/workers/:id/release',
    params: { id: 'fz-http-1' },
    auth: 'admin',
    body: () => ({ reason: 'fuzz' }),
    cap: API_BODY_MAX_BYTES,
  },
  {
    name: 'POST /api/admin/workers/:id/quarantine',
    method: 'POST',
    path: '/api/admin/workers/:id/quarantine',
    params: { id: 'fz-http-2' },
    auth: 'admin',
    body: () => ({ reason: 'fuzz', wallet: false }),
    cap: API_BODY_MAX_BYTES,
  },
  {
    name: 'POST /api/admin/target',
    method: 'POST',
    path: '/api/admin/target',
    auth: 'admin',
    body: () => ({ base: 2, boost: 1 }),
    cap: API_BODY_MAX_BYTES,
  },
  {
    name: 'POST /api/admin/models/:model/dispatch',
    method: 'POST',
    path: '/api/admin/models/:model/dispatch',
    params: { model: FUZZ_MODEL },
    auth: 'admin',
    body: () => ({ mode: 'always' }),
    cap: API_BODY_MAX_BYTES,
  },
  {
    name: 'POST /v1/completions',
    method: 'POST',
    path: '/v1/completions',
    body: () => ({ model: FUZZ_MODEL, prompt: 'Hello', max_tokens: 4, temperature: 0 }),
    cap: OPENAI_BODY_MAX_BYTES,
  },
  {
    name: 'POST /v1/chat/completions',
    method: 'POST',
    path: '/v1/chat/completions',
    body: () => ({ model: FUZZ_DOWN_MODEL, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4, stream: false }),
    cap: OPENAI_BODY_MAX_BYTES,
  },
  { name: 'GET /api/expert-demand', method: 'GET', path: '/api/expert-demand', query: [['model', FUZZ_MODEL]], cap: 0 },
  { name: 'GET /api/expert-dispatch-map', method: 'GET', path: '/api/expert-dispatch-map', query: [['model', FUZZ_MODEL]], cap: 0 },
  { name: 'GET /api/moe/recruitment', method: 'GET', path: '/api/moe/recruitment', query: [], cap: 0 },
  { name: 'GET /api/credit', method: 'GET', path: '/api/credit', query: [['wallet', '']], cap: 0 },
  {
    name: 'GET /api/dashboard/workers',
    method: 'GET',
    path: '/api/dashboard/workers',
    query: [
      ['model', FUZZ_MODEL],
      ['state', 'proven'],
      ['q', 'fz'],
      ['sort', 'id'],
      ['dir', 'asc'],
      ['offset', '0'],
      ['limit', '50'],
    ],
    enums: { state: ['loading', 'joining', 'grace', 'proven'], sort: ['id', 'model', 'layer', 'state'], dir: ['asc', 'desc'] },
    cap: 0,
  },
  { name: 'GET /api/dashboard/coverage', method: 'GET', path: '/api/dashboard/coverage', query: [['model', FUZZ_MODEL]], cap: 0 },
  {
    name: 'GET /api/events',
    method: 'GET',
    path: '/api/events',
    query: [
      ['kind', 'admin'],
      ['model', FUZZ_MODEL],
      ['limit', '10'],
    ],
    enums: { kind: ['admin', 'recruit', 'release', 'evict', 'dispatch', 'coordinator'] },
    cap: 0,
  },
  { name: 'GET /api/admin/check', method: 'GET', path: '/api/admin/check', auth: 'admin', query: [], cap: 0 },
  {
    name: 'GET /api/expert-shard',
    method: 'GET',
    path: '/api/expert-shard',
    auth: 'node',
    query: [
      ['model', FUZZ_MODEL],
      ['layer', '1'],
      ['expert_begin', '0'],
      ['expert_end', '4'],
    ],
    cap: 0,
  },
  {
    name: 'GET /api/proxy/models/:model/expert-shard',
    method: 'GET',
    path: '/api/proxy/models/:model/expert-shard',
    params: { model: FUZZ_MODEL },
    auth: 'node',
    query: [
      ['layers', '1:2'],
      ['experts', '0:4'],
    ],
    cap: 0,
  },
];

/** A request as inject takes it. */
export interface HttpRequest {
  method: 'GET' | 'POST';
  url: string;
  headers: Record<string, string>;
  payload?: Buffer;
}

function mutatePathParam(rng: Rng, valid: string): { value: string; op: string } {
  const v = rng.pick<() => string>([
    () => '',
    () => 'w'.repeat(rng.pick([99, 100, 101, 128, 129, 300])),
    () => rng.pick(['%ff', '%', '%zz', '%c0%af', '%ed%a0%80']),
    () => pctEncode(rng.pick(UNICODE)),
    () => '%2F',
    () => '..',
    () => '.',
    () => 'a%00b',
    () => `${valid}/x`,
    () => `${valid};x`,
    () => pctEncode(`${valid} `),
  ])();
  return { value: v, op: `path ${JSON.stringify(v.slice(0, 24))}${v.length > 24 ? `… (${v.length})` : ''}` };
}

function mutateAuthorization(rng: Rng, token: string): { value: string | undefined; op: string } {
  const flip = (s: string): string => {
    const i = rng.below(s.length);
    return `${s.slice(0, i)}${s[i] === 'A' ? 'B' : 'A'}${s.slice(i + 1)}`;
  };
  const choices: Array<[string, () => string | undefined]> = [
    ['none', () => undefined],
    ['empty', () => ''],
    ['scheme only', () => 'Bearer'],
    ['scheme and space', () => 'Bearer '],
    ['lower-case scheme', () => `bearer ${token}`],
    ['basic', () => `Basic ${Buffer.from(`u:${token}`).toString('base64')}`],
    ['flipped', () => `Bearer ${flip(token)}`],
    ['longer', () => `Bearer ${token}x`],
    ['shorter', () => `Bearer ${token.slice(0, -1)}`],
    ['huge', () => `Bearer ${'A'.repeat(rng.pick([1024, 1025, 8000]))}`],
    ['twice', () => `Bearer ${token} ${token}`],
    ['bare', () => token],
    ['tab', () => `Bearer\t${token}`],
    ['two spaces', () => `Bearer  ${token}`],
    ['admin for node', () => `Bearer ${FUZZ_ADMIN_TOKEN}`],
    ['made up', () => 'Bearer v1.bm90LWEtdG9rZW4.c2lnbmF0dXJl'],
    ['unicode', () => `Bearer ${token}é`],
  ];
  const [name, f] = rng.pick(choices);
  return { value: f(), op: `authorization ${name}` };
}

/** Case `index` of an endpoint, drawn from (seed, endpoint, index). */
export async function httpCase(
  seed: number,
  ep: HttpEndpoint,
  index: number,
  ctx: HttpContext,
): Promise<{ req: HttpRequest; ops: string[] }> {
  const rng = caseRng(seed, ep.name, index);
  const ops: string[] = [];
  let path = ep.path;
  for (const [k, v] of Object.entries(ep.params ?? {})) {
    let value = pctEncode(v);
    if (rng.chance(0.25)) {
      const m = mutatePathParam(rng, value);
      value = m.value;
      ops.push(m.op);
    }
    path = path.replace(`:${k}`, value);
  }
  if (rng.chance(0.03)) {
    // The path itself: a route that does not exist, or a segment that does not decode.
    const edit = rng.pick<[string, (p: string) => string]>([
      ['trailing slash', (p) => `${p}/`],
      ['double slash', (p) => p.replace('/api/', '/api//').replace('/v1/', '/v1//')],
      ['upper case', (p) => p.toUpperCase()],
      ['extra segment', (p) => `${p}/x`],
      ['bad percent segment', (p) => `${p}/%`],
      ['bad percent in the path', (p) => p.replace(/\/([a-z])/, '/%ff$1')],
      ['encoded dots', (p) => `${p}/%2e%2e/%2e%2e`],
      ['encoded slash', (p) => p.replace(/\/([a-z-]+)$/, '%2F$1')],
    ]);
    path = edit[1](path);
    ops.push(`path: ${edit[0]}`);
  }
  const headers: Record<string, string> = {};
  const token = ep.auth === 'admin' ? ctx.adminToken : ep.auth === 'node' ? ctx.nodeToken : null;
  if (token !== null) {
    let auth: string | undefined = `Bearer ${token}`;
    if (rng.chance(0.12)) {
      const m = mutateAuthorization(rng, token);
      auth = m.value;
      ops.push(m.op);
    }
    if (auth !== undefined) headers.authorization = auth;
  } else if (rng.chance(0.04)) {
    headers.authorization = `Bearer ${rng.chance(0.5) ? ctx.nodeToken : 'x'}`;
    ops.push('authorization where none is asked');
  }
  if (ep.method === 'GET') {
    const valid = (ep.query ?? []).map(([k, v]) => [k, k === 'wallet' && v === '' ? ctx.wallet : v] as const);
    const q = mutateQuery(rng, valid, ep.enums);
    ops.push(...q.ops.filter((o) => o !== 'valid' || ops.length === 0));
    return { req: { method: 'GET', url: `${path}${q.query}`, headers }, ops };
  }
  const body = mutateJsonBody(rng, await ep.body?.(ctx), ep.cap);
  if (body.contentType !== undefined) headers['content-type'] = body.contentType;
  ops.push(...body.ops.filter((o) => o !== 'valid' || ops.length === 0));
  return { req: { method: 'POST', url: path, headers, payload: body.payload }, ops };
}

/** Null when the answer is what the catalogue says: 2xx, or the code's own status with `{error, code}`, never INTERNAL. */
export function checkHttp(status: number, body: string): { outcome: string; failure: string | null } {
  if (status >= 200 && status < 300) return { outcome: String(status), failure: null };
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return { outcome: String(status), failure: `status ${status} with a body that is not JSON: ${JSON.stringify(body.slice(0, 120))}` };
  }
  const o = (json ?? {}) as { error?: unknown; code?: unknown };
  const code = typeof o.code === 'string' ? o.code : '';
  const outcome = `${status} ${code || '?'}`;
  if (!Object.hasOwn(ERRORS, code)) return { outcome, failure: `a code outside the catalogue: ${JSON.stringify(body.slice(0, 200))}` };
  if (code === 'INTERNAL') return { outcome, failure: 'INTERNAL: the hub failed on this input' };
  const want = ERRORS[code as keyof typeof ERRORS];
  if (want !== status) return { outcome, failure: `${code} is ${want} in the catalogue, answered ${status}` };
  if (typeof o.error !== 'string' || o.error === '') return { outcome, failure: 'no error sentence' };
  const extra = Object.keys(o).filter((k) => k !== 'error' && k !== 'code');
  if (extra.length > 0) return { outcome, failure: `fields beyond {error, code}: ${extra.join(', ')}` };
  return { outcome, failure: null };
}

/** Runs one HTTP case in process (fastify inject) and checks its answer. */
export async function runHttpCase(h: FuzzHub, seed: number, ep: HttpEndpoint, index: number, ctx: HttpContext): Promise<CaseResult> {
  const { req, ops } = await httpCase(seed, ep, index, ctx);
  try {
    const r = await h.t.app.inject({
      method: req.method,
      url: req.url,
      headers: req.headers,
      ...(req.payload ? { payload: req.payload } : {}),
    });
    const { outcome, failure } = checkHttp(r.statusCode, r.body);
    return { surface: ep.name, index, ops, outcome, failure };
  } catch (e) {
    return { surface: ep.name, index, ops, outcome: 'threw', failure: `inject threw: ${(e as Error).message}` };
  }
}

/** The HTTP context of a fuzz hub: its volunteer's token, the admin token, and a signer of fresh challenges. */
export function httpContext(h: FuzzHub): HttpContext {
  const v = newVolunteer();
  return {
    nodeToken: h.nodeToken,
    adminToken: FUZZ_ADMIN_TOKEN,
    wallet: v.wallet,
    async signedChallenge() {
      const c = await h.t.call('POST', '/api/auth/challenge', { wallet: v.wallet });
      if (c.status !== 200) throw new Error(`challenge: ${c.status} ${JSON.stringify(c.json)}`);
      return { wallet: v.wallet, nonce: c.json.nonce as string, signature: v.sign(c.json.message as string) };
    },
  };
}

// ---------------------------------------------------------------------------------------------------- the channel

/**
 * What a channel connection may end with: the catalogue's close codes but INTERNAL_ERROR (the hub failing on its
 * side), a normal close (`leave`), and the two RFC 6455 codes `ws` answers itself before the hub sees the message —
 * 1007 for a text frame that is not UTF-8, 1009 for a frame over maxPayload (= VOLUNTEER_LIMITS.maxFrameBytes).
 */
export const CHANNEL_CLOSE_OK: ReadonlySet<number> = new Set([
  1000,
  1007,
  1009,
  ...Object.values(CLOSE_CODES)
    .map((e) => e.code)
    .filter((c) => c !== CLOSE_CODES.INTERNAL_ERROR.code),
]);

const CLOSE_NAMES = new Map<number, string>([
  [1000, 'normal'],
  [1006, 'abnormal'],
  [1007, 'invalid UTF-8'],
  [1009, 'too big'],
  ...Object.entries(CLOSE_CODES).map(([name, e]) => [e.code, name] as [number, string]),
]);

export const closeLabel = (code: number): string => `${code} ${CLOSE_NAMES.get(code) ?? '?'}`;

/**
 * One end of a connection the fuzzer drives: `wake()` on every event it records, and `until` to wait (bounded) for
 * what those events show.
 */
class Waitable {
  private readonly waiters = new Set<() => void>();

  protected wake(): void {
    for (const w of [...this.waiters]) w();
  }

  /** Resolves with `pred`'s first non-undefined value, or undefined after `ms`. */
  until<T>(pred: () => T | undefined, ms: number): Promise<T | undefined> {
    const now = pred();
    if (now !== undefined) return Promise.resolve(now);
    return new Promise((resolve) => {
      const done = (v: T | undefined): void => {
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve(v);
      };
      const check = (): void => {
        const v = pred();
        if (v !== undefined) done(v);
      };
      const timer = setTimeout(() => done(undefined), ms);
      this.waiters.add(check);
    });
  }
}

/** One volunteer's end of the channel, for the fuzzer: everything the hub sends is parsed with the wire module. */
class FuzzPeer extends Waitable {
  readonly texts: HubMessage[] = [];
  readonly binaries: Uint8Array[] = [];
  closed: { code: number; reason: string } | null = null;
  /** The hub sent a message the wire module refuses (a bug on the hub's side). */
  hubError: string | null = null;
  /** Answer `assign` with load_failed CANCELLED (a fuzzing volunteer must not sit on a slice others could serve). */
  decline = true;
  onWork: ((frame: Uint8Array) => void) | null = null;

  private constructor(readonly ws: WebSocket) {
    super();
    ws.on('message', (data: RawData, isBinary: boolean) => {
      const bytes = toBytes(data);
      if (isBinary) {
        if (this.onWork) this.onWork(bytes);
        else this.binaries.push(bytes);
      } else {
        try {
          const m = parseHubMessage(bytes);
          this.texts.push(m);
          if (m.type === 'assign' && this.decline && ws.readyState === ws.OPEN) {
            ws.send(JSON.stringify({ type: 'load_failed', assignment_id: m.assignmentId, code: 'CANCELLED', message: 'fuzzing' }));
          }
        } catch (e) {
          this.hubError = `the hub sent a message the wire refuses: ${(e as Error).message}`;
        }
      }
      this.wake();
    });
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() };
      this.wake();
    });
    ws.on('error', () => {});
  }

  static open(url: string): Promise<FuzzPeer> {
    const p = new FuzzPeer(new WebSocket(url, { perMessageDeflate: false, maxPayload: 256 * 1024 * 1024 }));
    return new Promise((resolve, reject) => {
      p.ws.once('open', () => resolve(p));
      p.ws.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
      p.ws.once('close', () => resolve(p));
    });
  }

  take<K extends HubMessage['type']>(type: K): Extract<HubMessage, { type: K }> | undefined {
    const i = this.texts.findIndex((m) => m.type === type);
    return i < 0 ? undefined : (this.texts.splice(i, 1)[0] as Extract<HubMessage, { type: K }>);
  }

  send(data: string | Uint8Array, binary: boolean): void {
    if (this.ws.readyState === this.ws.OPEN) this.ws.send(data, { binary });
  }

  /** 'open' when a ping with this id comes back as a pong; 'closed' when the hub closed the channel; null on neither. */
  async alive(id: number, ms = 5_000): Promise<'open' | 'closed' | null> {
    if (this.closed) return 'closed';
    this.send(JSON.stringify({ type: 'ping', id }), false);
    const r = await this.until<'open' | 'closed'>(() => {
      if (this.texts.some((m) => m.type === 'pong' && m.id === id)) return 'open';
      return this.closed ? 'closed' : undefined;
    }, ms);
    this.texts.splice(0, this.texts.length, ...this.texts.filter((m) => m.type !== 'pong'));
    return r ?? null;
  }

  async closeQuietly(): Promise<void> {
    if (this.closed) return;
    this.ws.terminate();
    await this.until(() => (this.closed ? true : undefined), 1_000);
  }
}

function toBytes(data: RawData): Uint8Array {
  if (Array.isArray(data)) return new Uint8Array(Buffer.concat(data));
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** The hello as the wire carries it (snake_case), to mutate. */
export function helloWire(token: string, workerId: string, maxExperts = 0): Record<string, unknown> {
  return {
    type: 'hello',
    version: 1,
    token,
    worker_id: workerId,
    device: {
      webgpu: true,
      adapter: { vendor: 'fuzz', architecture: 'loopback', description: 'fuzzing volunteer', is_fallback_adapter: false },
      limits: { max_storage_buffer_binding_size: 1 << 30, max_buffer_size: 1 << 30 },
      features: ['shader-f16'],
      backend: 'webgpu',
      gflops: 100,
      memory_budget_bytes: 1 << 30,
    },
    numerics: ['exact', 'llama'],
    encodings: ['f32', 'f16'],
    model: '',
    max_experts: maxExperts,
    agent: 'fuzz.test',
  };
}

const CONTROL_TEMPLATES: ReadonlyArray<(rng: Rng, token: string) => Record<string, unknown>> = [
  (rng) => ({ type: 'ping', id: rng.below(1000) }),
  (rng) => ({ type: 'pong', id: rng.below(1000) }),
  (rng) => ({ type: 'loaded', assignment_id: rng.int(1, 50), ready: true, backend: 'webgpu', gflops: 10 }),
  (rng) => ({ type: 'load_failed', assignment_id: rng.int(1, 50), code: 'CANCELLED', message: 'fuzz' }),
  () => ({ type: 'heartbeat', model: FUZZ_MODEL, coverage: [[0, 0, 2]], paused: false, stats: { pairs_served: 0, queue_depth: 0 } }),
  () => ({ type: 'heartbeat', model: '', coverage: [], paused: true, stats: { pairs_served: 12, queue_depth: 1 } }),
  () => ({ type: 'pause' }),
  () => ({ type: 'resume' }),
  () => ({ type: 'leave' }),
  (_rng, token) => helloWire(token, 'fz-again'),
];

/** Integer fields of a binary frame's 32-byte header (the layouts of result and work_failed share the first 12 bytes). */
const FRAME_FIELDS: readonly ByteField[] = [
  { at: 0, size: 4, name: 'magic' },
  { at: 4, size: 2, name: 'version', caps: [1, 2] },
  { at: 6, size: 2, name: 'kind', caps: [1, 2, 3, 4] },
  { at: 8, size: 4, name: 'work_id' },
  { at: 12, size: 4, name: '@12 (n_rows | code+len)', caps: [VOLUNTEER_LIMITS.maxRows] },
  { at: 12, size: 2, name: '@12 u16 (code)', caps: [1, 6, 7] },
  { at: 14, size: 2, name: '@14 u16 (message length)', caps: [VOLUNTEER_LIMITS.maxFailureMessageBytes] },
  { at: 16, size: 4, name: '@16 (n_embd)', caps: [VOLUNTEER_LIMITS.maxEmbd] },
  { at: 20, size: 4, name: '@20 (compute_us | n_embd)' },
  { at: 24, size: 1, name: '@24 (encoding)', caps: [1, 2, 3] },
  { at: 25, size: 1, name: 'reserved @25' },
  { at: 28, size: 1, name: '@28 (row encoding)', caps: [1, 2] },
  { at: 31, size: 1, name: 'reserved @31' },
];

function floatsOf(frameBytes: number): number[] {
  const out: number[] = [];
  for (let o = WIRE_HEADER_BYTES; o + 4 <= frameBytes && out.length < 16; o += 4) out.push(o);
  return out;
}

function finiteFloats(rng: Rng, n: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (rng.float() - 0.5) * 4;
  return out;
}

/** A binary frame a volunteer could send (or, wrongly, a work frame), for a work id the hub may never have sent. */
function someFrame(rng: Rng): Uint8Array {
  const workId = rng.pick([0, 1, 2, 77, 0xffffffff, rng.u32()]);
  switch (rng.below(4)) {
    case 0:
    case 1: {
      const nRows = rng.int(1, 3);
      const nEmbd = rng.pick([1, 4, 32]);
      return encodeResult({ workId, nRows, nEmbd, sums: finiteFloats(rng, nRows * nEmbd), encoding: rng.pick(['f32', 'f16'] as const) });
    }
    case 2:
      return encodeWorkFailed({ workId, code: rng.pick(Object.keys(WORK_FAILED_CODES) as WorkFailedCode[]), message: 'fuzz' });
    default:
      return encodeWork({
        workId,
        assignmentId: 1,
        nRows: 1,
        nEmbd: 4,
        rows: new Float32Array(4),
        rowIndex: new Uint16Array([0]),
        localExpert: new Uint16Array([0]),
        weight: new Float32Array([1]),
        rowEncoding: 'f32',
        resultEncoding: 'f32',
      });
  }
}

/** A frame over the `ws` cap (1009), or a large one within it: drawn rarely, they cost a copy of tens of MB. */
function largeFrame(rng: Rng): { bytes: Uint8Array; op: string } {
  const size = rng.pick([VOLUNTEER_LIMITS.maxFrameBytes + 1, 4 * 1024 * 1024, 1024 * 1024]);
  const b = new Uint8Array(size);
  b.set(someFrame(rng).subarray(0, WIRE_HEADER_BYTES));
  return { bytes: b, op: `large frame ${size} bytes` };
}

type ChannelKind = 'hello' | 'control' | 'binary' | 'result';

interface Lane {
  /** A volunteer past its hello, waiting (it declines every assignment). */
  joined: FuzzPeer | null;
  /** A volunteer serving a slice (loaded), and the link the dispatcher would use. */
  serving: { peer: FuzzPeer; assign: Assign; link: WorkerLink } | null;
  seq: number;
}

/**
 * Drives the channel: cases run in lanes (a lane reuses its volunteer while the hub keeps it open). Case i's kind and
 * mutation come from caseRng(seed, 'channel', i) alone.
 */
export class ChannelFuzzer {
  private readonly lanes: Lane[] = [];
  /** Result cases that found no slice to serve (the market wanted none at that moment). */
  skipped = 0;

  constructor(
    private readonly h: FuzzHub,
    private readonly seed: number,
  ) {}

  private lane(n: number): Lane {
    while (this.lanes.length <= n) this.lanes.push({ joined: null, serving: null, seq: 0 });
    return this.lanes[n] as Lane;
  }

  async close(): Promise<void> {
    for (const l of this.lanes) {
      await l.joined?.closeQuietly();
      await l.serving?.peer.closeQuietly();
      l.joined = null;
      l.serving = null;
    }
  }

  async run(index: number, laneNo: number): Promise<CaseResult> {
    const rng = caseRng(this.seed, 'channel', index);
    const kind = rng.weighted<ChannelKind>([
      [35, 'hello'],
      [30, 'control'],
      [20, 'binary'],
      [15, 'result'],
    ]);
    const lane = this.lane(laneNo);
    const base = { surface: 'channel', index };
    try {
      switch (kind) {
        case 'hello':
          return { ...base, ...(await this.hello(rng, lane, laneNo)) };
        case 'control':
          return { ...base, ...(await this.control(rng, lane, laneNo, index)) };
        case 'binary':
          return { ...base, ...(await this.binary(rng, lane, laneNo, index)) };
        case 'result':
          return { ...base, ...(await this.result(rng, lane, laneNo, index)) };
      }
    } catch (e) {
      return { ...base, ops: [kind], outcome: 'threw', failure: `the driver threw: ${(e as Error).stack ?? e}` };
    }
  }

  /** A fresh volunteer is welcomed and answered, and leaves with a normal close: null, or what went wrong. */
  async stillServing(): Promise<string | null> {
    const p = await FuzzPeer.open(this.h.ws);
    p.send(JSON.stringify(helloWire(await this.h.login(), 'fz-after')), false);
    const w = await p.until(() => p.take('welcome') ?? (p.closed ? null : undefined), 5_000);
    if (!w) return `no welcome after the fuzz (${JSON.stringify(p.closed)})`;
    if ((await p.alive(4242)) !== 'open') return 'no pong after the fuzz';
    p.send(JSON.stringify({ type: 'leave' }), false);
    await p.until(() => (p.closed ? true : undefined), 3_000);
    return p.closed?.code === 1000 ? null : `leave answered ${JSON.stringify(p.closed)}`;
  }

  /** A close code the catalogue allows, or a failure sentence. */
  private judgeClose(p: FuzzPeer): string | null {
    if (p.hubError) return p.hubError;
    const c = p.closed;
    if (!c) return null;
    if (!CHANNEL_CLOSE_OK.has(c.code)) return `closed with ${closeLabel(c.code)} "${c.reason}"`;
    if (Buffer.byteLength(c.reason) > 123) return 'close reason over 123 bytes';
    return null;
  }

  private async join(lane: Lane, laneNo: number): Promise<FuzzPeer> {
    if (lane.joined && !lane.joined.closed) return lane.joined;
    const p = await FuzzPeer.open(this.h.ws);
    p.send(JSON.stringify(helloWire(this.h.nodeToken, `fz-c${laneNo}-${lane.seq++}`)), false);
    const w = await p.until(() => p.take('welcome') ?? (p.closed ? null : undefined), 5_000);
    if (!w) throw new Error(`a valid hello was not welcomed: ${JSON.stringify(p.closed)}`);
    lane.joined = p;
    return p;
  }

  private async hello(rng: Rng, lane: Lane, laneNo: number): Promise<Omit<CaseResult, 'surface' | 'index'>> {
    const p = await FuzzPeer.open(this.h.ws);
    const ops = ['hello'];
    const valid = helloWire(this.h.nodeToken, `fz-h${laneNo}-${lane.seq++}`, rng.pick([0, 2, 4]));
    if (rng.chance(0.06)) {
      const m = mutateBytes(rng, someFrame(rng), FRAME_FIELDS);
      p.send(m.bytes, true);
      ops.push('a binary frame instead', ...m.ops);
    } else {
      const m = mutateJsonBody(rng, valid, VOLUNTEER_LIMITS.maxTextBytes, { contentTypes: false });
      const binary = rng.chance(0.03);
      p.send(m.payload, binary);
      ops.push(...m.ops, ...(binary ? ['sent as a binary frame'] : []));
    }
    const got = await p.until(() => (p.take('welcome') ? 'welcome' : p.closed ? 'closed' : undefined), 5_000);
    if (!got) {
      await p.closeQuietly();
      return { ops, outcome: 'no answer', failure: 'no welcome and no close within 5 s of a hello' };
    }
    if (got === 'closed') return { ops, outcome: `close ${closeLabel(p.closed?.code ?? 0)}`, failure: this.judgeClose(p) };
    // Welcomed: it must stay open and answer, then leave cleanly; a lane without a volunteer keeps it.
    const alive = await p.alive(0x7fff0000);
    if (alive !== 'open')
      return { ops, outcome: 'welcome, then closed', failure: this.judgeClose(p) ?? 'closed after welcome with no reason' };
    if (!lane.joined || lane.joined.closed) lane.joined = p;
    else {
      p.send(JSON.stringify({ type: 'leave' }), false);
      await p.until(() => (p.closed ? true : undefined), 3_000);
      if (p.closed?.code !== 1000) return { ops, outcome: 'welcome', failure: `leave answered ${JSON.stringify(p.closed)}` };
    }
    return { ops, outcome: 'welcome', failure: p.hubError };
  }

  /** After the case's message: a ping must come back (open) or the channel is closed with an allowed code. */
  private async settle(p: FuzzPeer, lane: Lane, index: number, ops: string[]): Promise<Omit<CaseResult, 'surface' | 'index'>> {
    const r = await p.alive(0x7f000000 + index);
    if (r === null) {
      await p.closeQuietly();
      if (lane.joined === p) lane.joined = null;
      return { ops, outcome: 'no answer', failure: 'neither a pong nor a close within 5 s' };
    }
    if (r === 'closed') {
      if (lane.joined === p) lane.joined = null;
      return { ops, outcome: `close ${closeLabel(p.closed?.code ?? 0)}`, failure: this.judgeClose(p) };
    }
    return { ops, outcome: 'open', failure: p.hubError };
  }

  private async control(rng: Rng, lane: Lane, laneNo: number, index: number): Promise<Omit<CaseResult, 'surface' | 'index'>> {
    const p = await this.join(lane, laneNo);
    const template = rng.pick(CONTROL_TEMPLATES)(rng, this.h.nodeToken);
    const m = mutateJsonBody(rng, template, VOLUNTEER_LIMITS.maxTextBytes, { contentTypes: false });
    const binary = rng.chance(0.03);
    p.send(m.payload, binary);
    return this.settle(p, lane, index, [`control ${String(template.type)}`, ...m.ops, ...(binary ? ['sent as a binary frame'] : [])]);
  }

  private async binary(rng: Rng, lane: Lane, laneNo: number, index: number): Promise<Omit<CaseResult, 'surface' | 'index'>> {
    const p = await this.join(lane, laneNo);
    const ops = ['binary'];
    if (rng.chance(0.01)) {
      const l = largeFrame(rng);
      p.send(l.bytes, true);
      ops.push(l.op);
    } else {
      const frame = someFrame(rng);
      const m = mutateBytes(rng, frame, FRAME_FIELDS, { floats: floatsOf(frame.length) });
      const asText = rng.chance(0.04);
      p.send(m.bytes, !asText);
      ops.push(...m.ops, ...(asText ? ['sent as a text frame'] : []));
    }
    return this.settle(p, lane, index, ops);
  }

  /** A volunteer that said loaded for its assignment; null when the market wants no slice now. */
  private async serve(lane: Lane, laneNo: number): Promise<Lane['serving']> {
    if (lane.serving && !lane.serving.peer.closed) return lane.serving;
    lane.serving = null;
    const token = await this.h.login(); // its own wallet: a bad result quarantines the worker and its wallet
    const p = await FuzzPeer.open(this.h.ws);
    p.decline = false;
    const workerId = `fz-s${laneNo}-${lane.seq++}`;
    p.send(JSON.stringify(helloWire(token, workerId, 2)), false);
    const assign = await p.until(() => p.take('assign') ?? (p.closed ? null : undefined), 3_000);
    if (!assign) {
      await p.closeQuietly();
      return null;
    }
    p.send(JSON.stringify({ type: 'loaded', assignment_id: assign.assignmentId, ready: true, backend: 'webgpu', gflops: 50 }), false);
    if ((await p.alive(0x7ffffff0)) !== 'open') throw new Error(`a serving volunteer was closed: ${JSON.stringify(p.closed)}`);
    const link = this.h.channel
      .directory(assign.model)
      .workersFor(assign.layer)
      .find((l) => l.workerId === workerId);
    if (!link) throw new Error(`${workerId} said loaded but is not a link of layer ${assign.layer}`);
    lane.serving = { peer: p, assign, link };
    return lane.serving;
  }

  private async result(rng: Rng, lane: Lane, laneNo: number, index: number): Promise<Omit<CaseResult, 'surface' | 'index'>> {
    const s = await this.serve(lane, laneNo);
    const ops = ['result for real work'];
    if (!s) {
      this.skipped++;
      return { ops, outcome: 'skipped: no slice wanted', failure: null };
    }
    const { peer: p, assign, link } = s;
    const width = assign.experts[1] - assign.experts[0];
    if (rng.chance(0.2)) {
      // A serving volunteer's own control message, mutated: its heartbeat, a second loaded, a load_failed, pause.
      const held = [[assign.layer, assign.experts[0], assign.experts[1]]];
      const tpl = rng.pick<Record<string, unknown>>([
        { type: 'heartbeat', model: assign.model, coverage: held, paused: false, stats: { pairs_served: 1, queue_depth: 0 } },
        { type: 'loaded', assignment_id: assign.assignmentId, ready: true, backend: 'webgpu', gflops: 50 },
        { type: 'load_failed', assignment_id: assign.assignmentId, code: 'ENGINE_FAILED', message: 'fuzz' },
        { type: 'pause' },
        { type: 'resume' },
      ]);
      const m = mutateJsonBody(rng, tpl, VOLUNTEER_LIMITS.maxTextBytes, { contentTypes: false });
      p.send(m.payload, false);
      ops.push(`serving volunteer's ${String(tpl.type)}`, ...m.ops);
      const st = await this.settle(p, { joined: null, serving: null, seq: 0 }, index, ops);
      // Whatever state it is in now (paused, released, closed), the next result case starts with a fresh volunteer.
      lane.serving = null;
      if (st.failure || p.closed) {
        await p.closeQuietly();
        return st;
      }
      ops.push('then the work');
    }
    const nRows = rng.int(1, 3);
    const nEmbd = assign.nEmbd;
    const nPairs = rng.int(1, nRows * width);
    const work: WorkItem = {
      layer: assign.layer,
      nEmbd,
      rows: finiteFloats(rng, nRows * nEmbd),
      nRows,
      nPairs,
      rowIndex: Uint32Array.from({ length: nPairs }, (_, q) => q % nRows),
      localExpert: Uint16Array.from({ length: nPairs }, () => rng.below(width)),
      weight: finiteFloats(rng, nPairs),
    };
    let settled: string | null = null;
    const t0 = performance.now();
    const answer = link.compute(work, 100).then(
      (answer) => {
        const sums = answer instanceof Float32Array ? answer : answer.sums;
        settled = sums.length === nRows * nEmbd && sums.every(Number.isFinite) ? 'resolved' : `resolved with ${sums.length} sums`;
      },
      () => {
        settled = 'rejected';
      },
    );
    const frame = await p.until(() => p.binaries.shift() ?? (p.closed || settled !== null ? null : undefined), 3_000);
    if (!frame) {
      if (lane.serving === null) await p.closeQuietly();
      if (settled === 'rejected') return { ops, outcome: 'work refused: not serving', failure: null };
      return { ops, outcome: 'no work', failure: `the hub's work frame did not arrive (${JSON.stringify(p.closed)})` };
    }
    let w: ReturnType<typeof decodeWork>;
    try {
      w = decodeWork(frame, { sliceWidth: width });
    } catch (e) {
      return { ops, outcome: 'bad work', failure: `the hub sent a work frame the wire refuses: ${(e as Error).message}` };
    }
    let reply: Uint8Array;
    const r = rng.below(20);
    if (r < 15) {
      const enc: WireEncoding = w.resultEncoding;
      reply = encodeResult({ workId: w.workId, nRows: w.nRows, nEmbd: w.nEmbd, sums: finiteFloats(rng, w.nRows * w.nEmbd), encoding: enc });
      ops.push(`result ${enc}`);
    } else if (r < 19) {
      reply = encodeWorkFailed({ workId: w.workId, code: rng.pick(Object.keys(WORK_FAILED_CODES) as WorkFailedCode[]), message: 'fuzz' });
      ops.push('work_failed');
    } else {
      reply = encodeResult({
        workId: w.workId + 1,
        nRows: w.nRows,
        nEmbd: w.nEmbd,
        sums: new Float32Array(w.nRows * w.nEmbd),
        encoding: 'f32',
      });
      ops.push('result for the next work id');
    }
    const m = mutateBytes(rng, reply, FRAME_FIELDS, { floats: floatsOf(reply.length) });
    ops.push(...m.ops);
    p.send(m.bytes, true);
    const state = await this.settle(p, { joined: null, serving: null, seq: 0 }, index, ops);
    if (p.closed) lane.serving = null;
    // The hub's wait for this work ends: an answer, a close, or forgetWorkMs (1 s here).
    await Promise.race([answer, wait(5_000)]);
    const ms = performance.now() - t0;
    if (lane.serving === null) await p.closeQuietly();
    const outcome = `${state.outcome}, work ${settled ?? 'pending'}`;
    if (state.failure) return { ops, outcome, failure: state.failure };
    if (settled === null) return { ops, outcome, failure: `the hub's compute() did not settle within ${ms.toFixed(0)} ms` };
    if (settled !== 'resolved' && settled !== 'rejected') return { ops, outcome, failure: settled };
    return { ops, outcome, failure: null };
  }
}

// ---------------------------------------------------------------------------------------------------- the dispatch socket

/** The coordinator the dispatch fuzz plays: the fuzz model's shape. */
export const DISPATCH_HELLO: DispatchHello = Object.freeze({
  nLayer: 2,
  nEmbd: 32,
  nExpert: 8,
  nExpertUsed: 2,
  deadlineMs: 250,
  numerics: 'llama',
  modelDesc: 'fuzz qwen3moe',
});

const HEADER_FIELDS: readonly ByteField[] = [
  { at: 0, size: 4, name: 'magic' },
  { at: 4, size: 2, name: 'version', caps: [1, 2, 3] },
  { at: 6, size: 2, name: 'kind', caps: [1, 2, 3, 4, 5, 6, 7, 8] },
  { at: 8, size: 4, name: 'seq' },
  { at: 12, size: 4, name: 'payload_bytes', caps: [DISPATCH_LIMITS.maxPayload] },
];

const HELLO_FIELDS: readonly ByteField[] = [
  ...HEADER_FIELDS,
  { at: 16, size: 4, name: 'n_layer', caps: [2, 4096] },
  { at: 20, size: 4, name: 'n_embd', caps: [32, DISPATCH_LIMITS.maxEmbd] },
  { at: 24, size: 4, name: 'n_expert', caps: [8, 4096] },
  { at: 28, size: 4, name: 'n_expert_used', caps: [2, DISPATCH_LIMITS.maxUsed] },
  { at: 32, size: 4, name: 'deadline_ms', caps: [250] },
  { at: 36, size: 4, name: 'numerics', caps: [0, 1, 2] },
  { at: 40, size: 4, name: 'desc_len', caps: [DISPATCH_LIMITS.maxModelDesc] },
];

function requestFields(nTokens: number, nEmbd: number, nUsed: number): { fields: ByteField[]; floats: number[] } {
  const idsAt = HEADER_BYTES + 24 + 4 * nTokens * nEmbd;
  const probsAt = idsAt + 4 * nTokens * nUsed;
  const fields: ByteField[] = [
    ...HEADER_FIELDS,
    { at: 16, size: 4, name: 'layer', caps: [2] },
    { at: 20, size: 4, name: 'n_tokens', caps: [DISPATCH_LIMITS.maxRows] },
    { at: 24, size: 4, name: 'n_embd', caps: [32, DISPATCH_LIMITS.maxEmbd] },
    { at: 28, size: 4, name: 'n_used', caps: [2, DISPATCH_LIMITS.maxUsed] },
    { at: 32, size: 4, name: 'deadline_us' },
    { at: 36, size: 4, name: 'local_ns_per_pair' },
  ];
  for (let k = 0; k < Math.min(4, nTokens * nUsed); k++) fields.push({ at: idsAt + 4 * k, size: 4, name: `ids[${k}]`, caps: [7, 8] });
  const floats = [HEADER_BYTES + 24, HEADER_BYTES + 28, probsAt, probsAt + 4].filter((o) => o + 4 <= probsAt + 4 * nTokens * nUsed);
  return { fields, floats };
}

/** A valid REQUEST of the fuzz model's shape (or of `hello`'s, when the case's HELLO changed it). */
function validRequest(rng: Rng, seq: number, hello: DispatchHello, maxTokens = 4): Parameters<typeof encodeRequest>[0] {
  const nTokens = rng.int(1, maxTokens);
  const nUsed = Math.max(1, Math.min(hello.nExpertUsed, hello.nExpert, DISPATCH_LIMITS.maxUsed));
  const ids = new Int32Array(nTokens * nUsed);
  for (let t = 0; t < nTokens; t++) {
    const first = rng.below(Math.max(1, hello.nExpert));
    for (let k = 0; k < nUsed; k++) ids[t * nUsed + k] = (first + k) % Math.max(1, hello.nExpert);
  }
  return {
    seq,
    layer: rng.below(Math.max(1, Math.min(hello.nLayer, 2))),
    nTokens,
    nEmbd: hello.nEmbd,
    nUsed,
    deadlineUs: hello.deadlineMs * 1000,
    localNsPerPair: rng.pick([0, 1000, 50_000]),
    rows: finiteFloats(rng, nTokens * hello.nEmbd),
    ids,
    probs: finiteFloats(rng, nTokens * nUsed).map(Math.abs),
  };
}

/** How the bytes sent split into frames, as the dispatcher's FrameReader sees them. */
function walkFrames(bytes: Uint8Array): { frames: FrameHeader[]; tail: 'none' | 'partial' | 'invalid' } {
  const frames: FrameHeader[] = [];
  let o = 0;
  while (o < bytes.length) {
    if (bytes.length - o < HEADER_BYTES) return { frames, tail: 'partial' };
    let h: FrameHeader;
    try {
      h = decodeHeader(bytes.subarray(o, o + HEADER_BYTES));
    } catch {
      return { frames, tail: 'invalid' };
    }
    if (bytes.length - o - HEADER_BYTES < h.payloadBytes) return { frames, tail: 'partial' };
    frames.push(h);
    o += HEADER_BYTES + h.payloadBytes;
  }
  return { frames, tail: 'none' };
}

/** The coordinator's end of one dispatch connection: reads and checks every frame the dispatcher sends. */
class DispatchClient extends Waitable {
  private readonly reader = new FrameReader();
  readonly frames: Array<{ header: FrameHeader; payload: Uint8Array }> = [];
  closed = false;
  /** The dispatcher sent bytes that do not decode (a bug on its side). */
  error: string | null = null;

  private constructor(readonly socket: Socket) {
    super();
    socket.on('data', (chunk: Buffer) => {
      try {
        this.frames.push(...this.reader.push(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.length)));
      } catch (e) {
        this.error = `the dispatcher sent an invalid frame: ${(e as Error).message}`;
      }
      this.wake();
    });
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    socket.on('error', () => {});
  }

  static connect(path: string): Promise<DispatchClient> {
    const s = connect(path);
    return new Promise((resolve, reject) => {
      s.once('connect', () => resolve(new DispatchClient(s)));
      s.once('error', reject);
    });
  }

  write(bytes: Uint8Array): void {
    if (!this.closed) this.socket.write(bytes);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

type DispatchKind = 'garbage' | 'hello' | 'shaped' | 'request' | 'audit' | 'sequence' | 'split';

/**
 * Drives the dispatch socket, one connection per case and one case at a time (a new connection replaces the
 * dispatcher's current one, which would blur which case a drop belongs to).
 */
export class DispatchFuzzer {
  readonly tally = new Tally();

  constructor(
    private readonly h: FuzzHub,
    private readonly seed: number,
  ) {}

  async run(index: number): Promise<CaseResult> {
    const rng = caseRng(this.seed, 'dispatch', index);
    const kind = rng.weighted<DispatchKind>([
      [8, 'garbage'],
      [24, 'hello'],
      [10, 'shaped'],
      [30, 'request'],
      [8, 'audit'],
      [12, 'sequence'],
      [8, 'split'],
    ]);
    const base = { surface: 'dispatch', index };
    const c = await DispatchClient.connect(this.h.socketPath);
    try {
      return { ...base, ...(await this.drive(rng, kind, c)) };
    } catch (e) {
      return { ...base, ops: [kind], outcome: 'threw', failure: `the driver threw: ${(e as Error).stack ?? e}` };
    } finally {
      c.destroy();
      await c.until(() => (c.closed ? true : undefined), 1_000);
    }
  }

  /** A valid HELLO and its HELLO_ACK; the version the dispatcher agreed. */
  private async handshake(c: DispatchClient, offer: DispatchVersion): Promise<DispatchVersion> {
    const v = await this.greet(c, DISPATCH_HELLO, offer);
    if (v === null) throw new Error(`no HELLO_ACK to a valid HELLO (${c.closed ? 'closed' : 'silent'})`);
    return v;
  }

  /** A HELLO and its HELLO_ACK: the agreed version, or null when the dispatcher dropped it instead. */
  private async greet(c: DispatchClient, hello: DispatchHello, offer: DispatchVersion): Promise<DispatchVersion | null> {
    c.write(encodeHello(hello, offer));
    const ack = await c.until(() => c.frames.shift() ?? (c.closed ? null : undefined), 3_000);
    if (!ack) return null;
    if (ack.header.kind !== FrameKind.HelloAck) throw new Error(`a HELLO answered with kind ${ack.header.kind}`);
    return ack.header.version;
  }

  private async drive(rng: Rng, kind: DispatchKind, c: DispatchClient): Promise<Omit<CaseResult, 'surface' | 'index'>> {
    const d = this.h.dispatcher();
    const before = d.totals.protocolErrors;
    const internalBefore = this.h.internalErrors.length;
    const offer: DispatchVersion = rng.chance(0.5) ? 2 : 1;
    const ops: string[] = [`${kind} v${offer}`];
    let hello: DispatchHello | null = null;
    let version: DispatchVersion = offer;
    let bytes: Uint8Array;
    let chunks: Uint8Array[] | null = null;
    switch (kind) {
      case 'garbage': {
        const n = rng.pick([1, 8, 15, 16, 17, 100, 4096]);
        bytes = rng.bytes(n);
        if (n >= 4 && rng.chance(0.5)) new DataView(bytes.buffer).setUint32(0, 0x50445845, true); // the magic, then garbage
        ops.push(`${n} random bytes`);
        break;
      }
      case 'hello': {
        const m = mutateBytes(rng, encodeHello(DISPATCH_HELLO, offer), HELLO_FIELDS);
        bytes = m.bytes;
        ops.push(...m.ops);
        break;
      }
      case 'shaped': {
        // A HELLO of another shape (every field within what HELLO decodes), then a valid REQUEST of that shape.
        const shaped: DispatchHello = { ...DISPATCH_HELLO };
        for (let i = rng.int(1, 3); i > 0; i--) {
          const f = rng.pick(['nLayer', 'nEmbd', 'nExpert', 'nExpertUsed', 'deadlineMs', 'numerics'] as const);
          if (f === 'numerics') shaped.numerics = rng.pick(['exact', 'llama'] as const);
          else if (f === 'nEmbd') shaped.nEmbd = rng.pick([1, 2, 31, 33, 4096, DISPATCH_LIMITS.maxEmbd]);
          else if (f === 'nExpertUsed') shaped.nExpertUsed = rng.pick([0, 1, 3, 8, DISPATCH_LIMITS.maxUsed]);
          else if (f === 'deadlineMs') shaped.deadlineMs = rng.pick([0, 1, 5, 60_000, 4_294_967]);
          else shaped[f] = rng.pick([0, 1, 3, 7, 9, 4096, 0x7fffffff, 0xffffffff]);
          ops.push(`${f} = ${String(shaped[f])}`);
        }
        const v = await this.greet(c, shaped, offer);
        if (v === null) {
          bytes = new Uint8Array(0);
          ops.push('HELLO dropped');
          break;
        }
        version = v;
        hello = shaped;
        const req = validRequest(rng, rng.int(1, 1000), shaped, shaped.nEmbd > 4096 ? 1 : 3);
        bytes = encodeRequest(req, version);
        ops.push(`REQUEST of ${req.nTokens} × ${req.nEmbd}, layer ${req.layer}`);
        break;
      }
      case 'request': {
        version = await this.handshake(c, offer);
        hello = DISPATCH_HELLO;
        const large = rng.chance(0.02);
        const req = validRequest(rng, rng.int(1, 1000), hello, large ? 2048 : 4);
        const frame = encodeRequest(req, version);
        const { fields, floats } = requestFields(req.nTokens, req.nEmbd, req.nUsed);
        const m = mutateBytes(rng, frame, fields, { floats });
        bytes = m.bytes;
        ops.push(...(large ? [`${req.nTokens} tokens`] : []), ...m.ops);
        break;
      }
      case 'sequence': {
        version = await this.handshake(c, offer);
        hello = DISPATCH_HELLO;
        const parts: Uint8Array[] = [];
        const n = rng.int(1, 3);
        for (let i = 0; i < n; i++) {
          const seq = rng.int(1, 5);
          const which = rng.below(9);
          const req = validRequest(rng, seq, hello);
          const other: DispatchVersion = version === 1 ? 2 : 1;
          switch (which) {
            case 0:
              parts.push(encodeRequest(req, version));
              ops.push(`REQUEST seq ${seq}`);
              break;
            case 1:
              parts.push(encodeRequest(req, version), encodeRequest({ ...req, seq: seq + 1 }, version));
              ops.push('two REQUESTs at once');
              break;
            case 2:
              parts.push(encodeAudit({ seq, layer: 0, nTokens: 1, nAudit: 1, sums: new Float32Array(hello.nEmbd) }, version));
              ops.push(`AUDIT seq ${seq} nobody asked for`);
              break;
            case 3:
              parts.push(encodeHello(hello, version));
              ops.push('a second HELLO');
              break;
            case 4:
              parts.push(encodeResponse({ seq, layer: 0, nTokens: 1, nUsed: 2, quietMs: 0, mode: 'local' }));
              ops.push('a RESPONSE from the coordinator');
              break;
            case 5:
              parts.push(encodeClaim({ seq, layer: 0, nTokens: 1, nUsed: 2, quietMs: 0, claimed: null }));
              ops.push('a CLAIM from the coordinator');
              break;
            case 6:
              parts.push(
                encodeDispatchResult({
                  seq,
                  layer: 0,
                  nTokens: 1,
                  nUsed: 2,
                  served: new Uint8Array(2),
                  sums: new Float32Array(hello.nEmbd),
                }),
              );
              ops.push('a RESULT from the coordinator');
              break;
            case 7:
              parts.push(encodeHelloAck(true, 0, version));
              ops.push('a HELLO_ACK from the coordinator');
              break;
            default:
              parts.push(encodeRequest(req, other));
              ops.push(`a v${other} REQUEST on a v${version} connection`);
          }
        }
        bytes = concat(...parts);
        break;
      }
      case 'audit': {
        // A REQUEST the honest volunteers serve, its answer (which may ask for an audit), then an AUDIT for it,
        // mutated (its sums are what the workers' answers are held against), then another REQUEST.
        version = await this.handshake(c, offer);
        hello = DISPATCH_HELLO;
        const req = validRequest(rng, rng.int(1, 1000), hello);
        c.write(encodeRequest(req, version));
        const first = await c.until(() => c.frames.shift() ?? (c.closed ? null : undefined), 3_000);
        if (!first) throw new Error(`a valid REQUEST got no answer (${c.closed ? 'closed' : 'silent'})`);
        let nAudit = 0;
        let claimed = false;
        if (first.header.kind === FrameKind.Claim) {
          const cl = decodeClaim(first.header, first.payload);
          nAudit = cl.audit ? cl.audit.reduce((n, x) => n + x, 0) : 0;
          claimed = cl.claimed !== null;
        } else if (first.header.kind === FrameKind.Response) {
          const r = decodeResponse(first.header, first.payload, hello.nEmbd);
          nAudit = r.audit ? r.audit.reduce((n, x) => n + x, 0) : 0;
        }
        if (claimed && rng.chance(0.7)) {
          const result = await c.until(
            () => (c.frames.some((f) => f.header.kind === FrameKind.Result) || c.closed ? true : undefined),
            3_000,
          );
          if (!result) throw new Error('a CLAIM of pairs was not followed by its RESULT');
        }
        ops.push(`${nAudit} pairs to audit${claimed ? ', claimed' : ''}`);
        const sums = finiteFloats(rng, req.nTokens * hello.nEmbd);
        if (rng.chance(0.5)) sums.fill(0); // what the honest volunteers answer: the audit passes
        const audit = encodeAudit({ seq: req.seq, layer: req.layer, nTokens: req.nTokens, nAudit: Math.max(1, nAudit), sums }, version);
        const m = mutateBytes(
          rng,
          audit,
          [
            ...HEADER_FIELDS,
            { at: 16, size: 4, name: 'layer', caps: [2] },
            { at: 20, size: 4, name: 'n_tokens', caps: [req.nTokens, DISPATCH_LIMITS.maxRows] },
            { at: 24, size: 4, name: 'n_audit', caps: [nAudit, req.nTokens * DISPATCH_LIMITS.maxUsed] },
            { at: 28, size: 4, name: 'reserved' },
          ],
          { floats: [32, 36, 40, 44] },
        );
        ops.push(...m.ops);
        bytes = concat(m.bytes, encodeRequest({ ...validRequest(rng, req.seq + 1, hello) }, version));
        break;
      }
      case 'split': {
        const req = validRequest(rng, 1, DISPATCH_HELLO);
        bytes = concat(encodeHello(DISPATCH_HELLO, offer), encodeRequest(req, offer));
        chunks = [];
        for (let o = 0; o < bytes.length; ) {
          const k = rng.pick([1, 2, 3, 5, 16, 17, 64]);
          chunks.push(bytes.subarray(o, o + k));
          o += k;
        }
        ops.push(`${chunks.length} chunks`);
        break;
      }
    }
    const walk = walkFrames(bytes);
    // A HELLO is answered by HELLO_ACK, a REQUEST by RESPONSE (v1) or CLAIM (v2); a CLAIM of pairs by a RESULT later.
    const expected = walk.frames.filter((f) => f.kind === FrameKind.Hello || f.kind === FrameKind.Request).length;
    const answers = (): number => c.frames.filter((f) => f.header.kind !== FrameKind.Result).length;
    const resultsOwed = (): number => {
      let owed = 0;
      for (const f of c.frames) {
        if (f.header.kind === FrameKind.Claim) {
          try {
            if (decodeClaim(f.header, f.payload).claimed) owed++;
          } catch {
            // judged below
          }
        } else if (f.header.kind === FrameKind.Result) owed--;
      }
      return owed;
    };
    if (chunks) {
      for (const ch of chunks) {
        c.write(ch);
        await new Promise((r) => setImmediate(r));
      }
    } else c.write(bytes);
    const t0 = performance.now();
    const done = await c.until(() => (c.closed || (answers() >= expected && resultsOwed() <= 0) ? true : undefined), 3_000);
    if (!c.closed) await c.until(() => (c.closed ? true : undefined), 20); // a drop after the answers (a bad frame behind them)
    // A violation counted: the dispatcher has destroyed its end; the close may take a moment to arrive here.
    if (!c.closed && d.totals.protocolErrors > before) await c.until(() => (c.closed ? true : undefined), 3_000);
    const ms = performance.now() - t0;
    const delta = d.totals.protocolErrors - before;
    const internal = this.h.internalErrors.slice(internalBefore).map((e) => e.detail);
    const answerKinds = c.frames.map((f) => FrameKind[f.header.kind] ?? String(f.header.kind));
    let outcome = c.closed ? 'dropped' : walk.tail === 'partial' ? 'waiting for the rest of a frame' : 'answered';
    if (c.closed && answerKinds.length > 0) outcome = 'answered, then dropped';
    this.tally.add(outcome);
    const fail = (failure: string): Omit<CaseResult, 'surface' | 'index'> => ({
      ops,
      outcome: `${outcome} [${answerKinds.join(' ')}]`,
      failure,
    });
    if (c.error) return fail(c.error);
    if (internal.length > 0) return fail(`the hub logged: ${internal.join(' | ')}`);
    const bad = this.checkAnswers(c, hello ?? this.helloOf(bytes));
    if (bad) return fail(bad);
    if (c.closed && delta !== 1) return fail(`dropped with protocolErrors +${delta} (want +1)`);
    if (!c.closed && delta !== 0) return fail(`protocolErrors +${delta} on a connection still open`);
    if (!c.closed && walk.tail === 'invalid') return fail('an invalid frame header was not dropped');
    if (!done && !c.closed) return fail(`${expected} frames owed an answer, ${answers()} came in ${ms.toFixed(0)} ms`);
    return { ops, outcome: `${outcome}${answerKinds.length > 0 ? ` [${answerKinds.join(' ')}]` : ''}`, failure: null };
  }

  /** The HELLO at the start of the bytes, if it decodes (the shape later answers are read with). */
  private helloOf(bytes: Uint8Array): DispatchHello | null {
    try {
      const h = decodeHeader(bytes.subarray(0, HEADER_BYTES));
      if (h.kind !== FrameKind.Hello) return null;
      return decodeHello(bytes.subarray(HEADER_BYTES, HEADER_BYTES + h.payloadBytes));
    } catch {
      return null;
    }
  }

  /** Every frame the dispatcher sent decodes as the coordinator decodes it. */
  private checkAnswers(c: DispatchClient, hello: DispatchHello | null): string | null {
    const nEmbd = hello?.nEmbd ?? DISPATCH_HELLO.nEmbd;
    let claimed: Uint8Array | null = null;
    for (const { header, payload } of c.frames) {
      try {
        switch (header.kind) {
          case FrameKind.HelloAck:
            if (payload.length !== 8) return `HELLO_ACK of ${payload.length} bytes`;
            break;
          case FrameKind.Response:
            decodeResponse(header, payload, nEmbd);
            break;
          case FrameKind.Claim:
            claimed = decodeClaim(header, payload).claimed;
            break;
          case FrameKind.Result:
            decodeDispatchResult(header, payload, nEmbd, claimed);
            break;
          default:
            return `the dispatcher sent a ${FrameKind[header.kind] ?? header.kind} frame`;
        }
      } catch (e) {
        return `the dispatcher sent a frame that does not decode: ${(e as Error).message}`;
      }
    }
    return null;
  }

  /** A valid coordinator after all of it: HELLO, then a REQUEST, answered. */
  async stillAnswering(): Promise<string | null> {
    const c = await DispatchClient.connect(this.h.socketPath);
    try {
      const version = await this.handshake(c, 2);
      const req = validRequest(new Rng(1), 1, DISPATCH_HELLO);
      c.write(encodeRequest(req, version));
      const f = await c.until(() => c.frames.shift() ?? (c.closed ? null : undefined), 3_000);
      if (!f) return 'a valid REQUEST after the fuzz got no answer';
      if (f.header.kind !== FrameKind.Claim && f.header.kind !== FrameKind.Response)
        return `a valid REQUEST was answered with kind ${f.header.kind}`;
      return null;
    } finally {
      c.destroy();
    }
  }
}

/**
 * Volunteers that serve the fuzz model honestly (a whole layer each, answering every work frame with zeros), so the
 * dispatch fuzz's REQUESTs reach real links and CLAIM / RESULT paths run. One the hub closes (a fuzzed AUDIT that
 * disagrees with its zeros quarantines it) is replaced by a new one with a new wallet. Returns their stop function.
 */
export async function honestVolunteers(h: FuzzHub, n: number): Promise<() => Promise<void>> {
  let stopped = false;
  const live = new Set<FuzzPeer>();
  let joined = 0;
  const join = async (slot: number): Promise<FuzzPeer | null> => {
    const p = await FuzzPeer.open(h.ws);
    p.decline = false;
    p.onWork = (frame) => {
      try {
        const w = decodeWork(frame);
        const sums = new Float32Array(w.nRows * w.nEmbd);
        p.send(encodeResult({ workId: w.workId, nRows: w.nRows, nEmbd: w.nEmbd, sums, encoding: w.resultEncoding }), true);
      } catch {
        // a work frame that does not decode: the channel fuzz reports those
      }
    };
    p.send(JSON.stringify(helloWire(await h.login(), `fz-honest-${slot}-${joined++}`)), false);
    const a = await p.until(() => p.take('assign') ?? (p.closed ? null : undefined), 3_000);
    if (!a) {
      await p.closeQuietly();
      return null;
    }
    p.send(JSON.stringify({ type: 'loaded', assignment_id: a.assignmentId, ready: true, backend: 'webgpu', gflops: 100 }), false);
    if ((await p.alive(1)) !== 'open') return null;
    live.add(p);
    return p;
  };
  const keep = async (slot: number, first: FuzzPeer): Promise<void> => {
    let p: FuzzPeer | null = first;
    while (!stopped) {
      if (p) {
        await p.until(() => (p?.closed || stopped ? true : undefined), 3_600_000);
        live.delete(p);
      } else await wait(200);
      if (!stopped) p = await join(slot).catch(() => null);
    }
  };
  const keepers: Promise<void>[] = [];
  for (let i = 0; i < n; i++) {
    const p = await join(i);
    if (!p) throw new Error(`honest volunteer ${i} was not assigned a slice`);
    keepers.push(keep(i, p));
  }
  return async () => {
    stopped = true;
    for (const p of live) await p.closeQuietly();
    await Promise.all(keepers);
  };
}

/** Memory after a full collection when node runs with --expose-gc (else as it stands). */
export function memoryNow(): NodeJS.MemoryUsage & { gc: boolean } {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc) {
    gc();
    gc();
  }
  return { ...process.memoryUsage(), gc: gc !== undefined };
}
