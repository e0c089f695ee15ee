/**
 * A minimal ONNX ModelProto encoder (protobuf wire format written by hand; no protobuf library): enough of onnx.proto
 * to describe a graph of standard operators with float32 / int64 initializers stored as raw_data.
 *
 * Field numbers follow onnx/onnx.proto (proto2):
 *   ModelProto           ir_version=1 producer_name=2 producer_version=3 graph=7 opset_import=8
 *   OperatorSetIdProto   domain=1 version=2
 *   GraphProto           node=1 name=2 initializer=5 input=11 output=12
 *   NodeProto            input=1 output=2 name=3 op_type=4 attribute=5 domain=7
 *   AttributeProto       name=1 f=2 i=3 s=4 floats=7 ints=8 type=20   (AttributeType FLOAT=1 INT=2 STRING=3 FLOATS=6 INTS=7)
 *   TensorProto          dims=1 data_type=2 name=8 raw_data=9          (DataType FLOAT=1 INT64=7)
 *   ValueInfoProto       name=1 type=2
 *   TypeProto            tensor_type=1;  TypeProto.Tensor elem_type=1 shape=2
 *   TensorShapeProto     dim=1;  Dimension dim_value=1 dim_param=2
 * onnxruntime loading the result is the check (test/unit/ort-fallback.test.ts).
 *
 * Messages are built as a tree whose sizes are computed once, then written into one buffer: big initializers are
 * copied exactly once. A protobuf message may not exceed 2 GiB, so neither may a model written this way (no
 * external-data support).
 *
 * @example
 *   const bytes = encodeModel({
 *     name: 'mm', nodes: [node('MatMul', ['x', 'W'], ['y'])],
 *     initializers: [floatTensor('W', [4, 2], weights)],
 *     inputs: [valueInfo('x', DataType.FLOAT, ['T', 4])], outputs: [valueInfo('y', DataType.FLOAT, ['T', 2])],
 *   });
 */

/** TensorProto.DataType values this encoder writes. */
export const DataType = { FLOAT: 1, INT64: 7 } as const;
export type DataTypeValue = (typeof DataType)[keyof typeof DataType];

/** AttributeProto.AttributeType values. */
export const AttributeType = { FLOAT: 1, INT: 2, STRING: 3, FLOATS: 6, INTS: 7 } as const;

export type AttributeSpec =
  | { name: string; type: 'int'; value: number | bigint }
  | { name: string; type: 'ints'; value: readonly (number | bigint)[] }
  | { name: string; type: 'float'; value: number }
  | { name: string; type: 'floats'; value: readonly number[] }
  | { name: string; type: 'string'; value: string };

export interface NodeSpec {
  opType: string;
  inputs: readonly string[];
  outputs: readonly string[];
  name?: string;
  /** Operator domain; '' (the default ONNX domain) when omitted. */
  domain?: string;
  attributes?: readonly AttributeSpec[];
}

export interface TensorSpec {
  name: string;
  dataType: DataTypeValue;
  dims: readonly number[];
  /** Little-endian element bytes (raw_data). */
  raw: Uint8Array;
}

export interface ValueInfoSpec {
  name: string;
  elemType: DataTypeValue;
  /** Per dimension: a fixed size, or a symbolic name (dim_param) such as 'T'. */
  shape: readonly (number | string)[];
}

export interface GraphSpec {
  name: string;
  nodes: readonly NodeSpec[];
  initializers: readonly TensorSpec[];
  inputs: readonly ValueInfoSpec[];
  outputs: readonly ValueInfoSpec[];
}

export interface ModelOptions {
  /** ModelProto.ir_version (default 8, onnx 1.10+). */
  irVersion?: number;
  /** Version of the default ('') operator set (default 17). */
  opsetVersion?: number;
  producerName?: string;
  producerVersion?: string;
}

// ---------------------------------------------------------------------------------------------------------------------
// Wire format

const WIRE_VARINT = 0;
const WIRE_I32 = 5;
const WIRE_LEN = 2;

const utf8 = new TextEncoder();

/** Bytes of a 64-bit varint (negative values are written as their two's complement, 10 bytes, as int64 must be). */
function varintBytes(value: number | bigint): Uint8Array {
  let v: bigint;
  if (typeof value === 'bigint') {
    v = value;
  } else {
    if (!Number.isSafeInteger(value)) throw new RangeError(`onnx-builder: ${value} is not a safe integer`);
    v = BigInt(value);
  }
  if (v < -(2n ** 63n) || v >= 2n ** 64n) throw new RangeError(`onnx-builder: ${v} does not fit 64 bits`);
  v = BigInt.asUintN(64, v);
  const out: number[] = [];
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v !== 0n) byte |= 0x80;
    out.push(byte);
  } while (v !== 0n);
  return Uint8Array.from(out);
}

/** A length-delimited payload: raw bytes, or a nested message. */
type Payload = Uint8Array | Message;

interface Field {
  /** Tag and, for scalar fields, the value already encoded. */
  head: Uint8Array;
  /** Length-delimited payload, when the field has one. */
  payload?: Payload;
}

/** A protobuf message under construction: fields in order, size computed once, written into a caller's buffer. */
export class Message {
  private readonly fields: Field[] = [];
  private cachedSize = -1;

  private static tag(field: number, wire: number): Uint8Array {
    return varintBytes(field * 8 + wire);
  }

  /** An int32/int64/enum/bool field. */
  varint(field: number, value: number | bigint): this {
    const tag = Message.tag(field, WIRE_VARINT);
    const v = varintBytes(value);
    const head = new Uint8Array(tag.length + v.length);
    head.set(tag);
    head.set(v, tag.length);
    return this.push({ head });
  }

  /** A float field (wire type 5, little-endian IEEE single). */
  float(field: number, value: number): this {
    const tag = Message.tag(field, WIRE_I32);
    const head = new Uint8Array(tag.length + 4);
    head.set(tag);
    new DataView(head.buffer).setFloat32(tag.length, value, true);
    return this.push({ head });
  }

  /** A bytes field (the bytes are referenced, not copied, until write()). */
  bytes(field: number, value: Uint8Array): this {
    return this.push({ head: Message.tag(field, WIRE_LEN), payload: value });
  }

  string(field: number, value: string): this {
    return this.bytes(field, utf8.encode(value));
  }

  message(field: number, value: Message): this {
    return this.push({ head: Message.tag(field, WIRE_LEN), payload: value });
  }

  /** A packed repeated varint field (proto2 parsers accept packed and unpacked encodings alike). */
  packedVarints(field: number, values: readonly (number | bigint)[]): this {
    const parts = values.map(varintBytes);
    const body = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let o = 0;
    for (const p of parts) {
      body.set(p, o);
      o += p.length;
    }
    return this.bytes(field, body);
  }

  /** A packed repeated float field. */
  packedFloats(field: number, values: readonly number[]): this {
    const body = new Uint8Array(values.length * 4);
    const view = new DataView(body.buffer);
    values.forEach((v, i) => {
      view.setFloat32(i * 4, v, true);
    });
    return this.bytes(field, body);
  }

  /** Encoded size in bytes. */
  size(): number {
    if (this.cachedSize >= 0) return this.cachedSize;
    let n = 0;
    for (const f of this.fields) {
      n += f.head.length;
      if (f.payload) {
        const len = payloadSize(f.payload);
        n += varintBytes(len).length + len;
      }
    }
    if (n > 0x7fffffff) throw new RangeError(`onnx-builder: a message of ${n} bytes is over protobuf's 2 GiB limit`);
    this.cachedSize = n;
    return n;
  }

  /** Writes the message at `offset`; returns the offset after it. */
  writeInto(out: Uint8Array, offset: number): number {
    let o = offset;
    for (const f of this.fields) {
      out.set(f.head, o);
      o += f.head.length;
      if (f.payload) {
        const len = varintBytes(payloadSize(f.payload));
        out.set(len, o);
        o += len.length;
        if (f.payload instanceof Message) {
          o = f.payload.writeInto(out, o);
        } else {
          out.set(f.payload, o);
          o += f.payload.length;
        }
      }
    }
    return o;
  }

  toBytes(): Uint8Array {
    const out = new Uint8Array(this.size());
    const end = this.writeInto(out, 0);
    if (end !== out.length) throw new Error(`onnx-builder: wrote ${end} bytes, expected ${out.length}`);
    return out;
  }

  private push(f: Field): this {
    if (this.cachedSize >= 0) throw new Error('onnx-builder: message changed after its size was taken');
    this.fields.push(f);
    return this;
  }
}

function payloadSize(p: Payload): number {
  return p instanceof Message ? p.size() : p.length;
}

// ---------------------------------------------------------------------------------------------------------------------
// ONNX messages

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** A float32 initializer; `data` is referenced (not copied) until the model is encoded. */
export function floatTensor(name: string, dims: readonly number[], data: Float32Array): TensorSpec {
  checkElements(name, dims, data.length);
  if (!LITTLE_ENDIAN) throw new Error('onnx-builder: raw_data is little-endian; this host is big-endian');
  return { name, dataType: DataType.FLOAT, dims, raw: new Uint8Array(data.buffer, data.byteOffset, data.byteLength) };
}

/** An int64 initializer. */
export function int64Tensor(name: string, dims: readonly number[], data: readonly (number | bigint)[]): TensorSpec {
  checkElements(name, dims, data.length);
  const raw = new Uint8Array(data.length * 8);
  const view = new DataView(raw.buffer);
  data.forEach((v, i) => {
    view.setBigInt64(i * 8, BigInt(v), true);
  });
  return { name, dataType: DataType.INT64, dims, raw };
}

function checkElements(name: string, dims: readonly number[], n: number): void {
  const want = dims.reduce((a, b) => a * b, 1);
  if (dims.some((d) => !Number.isSafeInteger(d) || d < 0) || want !== n) {
    throw new RangeError(`onnx-builder: tensor ${name} of dims [${dims.join(', ')}] cannot hold ${n} elements`);
  }
}

export function node(
  opType: string,
  inputs: readonly string[],
  outputs: readonly string[],
  extra: Omit<NodeSpec, 'opType' | 'inputs' | 'outputs'> = {},
): NodeSpec {
  return { opType, inputs, outputs, ...extra };
}

export function valueInfo(name: string, elemType: DataTypeValue, shape: readonly (number | string)[]): ValueInfoSpec {
  return { name, elemType, shape };
}

export function tensorMessage(t: TensorSpec): Message {
  const m = new Message();
  if (t.dims.length > 0) m.packedVarints(1, t.dims);
  m.varint(2, t.dataType);
  m.string(8, t.name);
  m.bytes(9, t.raw);
  return m;
}

function attributeMessage(a: AttributeSpec): Message {
  const m = new Message().string(1, a.name);
  switch (a.type) {
    case 'float':
      m.float(2, a.value).varint(20, AttributeType.FLOAT);
      break;
    case 'int':
      m.varint(3, a.value).varint(20, AttributeType.INT);
      break;
    case 'string':
      m.string(4, a.value).varint(20, AttributeType.STRING);
      break;
    case 'floats':
      m.packedFloats(7, a.value).varint(20, AttributeType.FLOATS);
      break;
    case 'ints':
      m.packedVarints(8, a.value).varint(20, AttributeType.INTS);
      break;
  }
  return m;
}

function nodeMessage(n: NodeSpec): Message {
  const m = new Message();
  for (const i of n.inputs) m.string(1, i);
  for (const o of n.outputs) m.string(2, o);
  if (n.name) m.string(3, n.name);
  m.string(4, n.opType);
  for (const a of n.attributes ?? []) m.message(5, attributeMessage(a));
  if (n.domain) m.string(7, n.domain);
  return m;
}

function valueInfoMessage(v: ValueInfoSpec): Message {
  const shape = new Message();
  for (const d of v.shape) {
    const dim = new Message();
    if (typeof d === 'number') dim.varint(1, d);
    else dim.string(2, d);
    shape.message(1, dim);
  }
  const tensorType = new Message().varint(1, v.elemType).message(2, shape);
  const type = new Message().message(1, tensorType);
  return new Message().string(1, v.name).message(2, type);
}

export function graphMessage(g: GraphSpec): Message {
  const m = new Message();
  for (const n of g.nodes) m.message(1, nodeMessage(n));
  m.string(2, g.name);
  for (const t of g.initializers) m.message(5, tensorMessage(t));
  for (const v of g.inputs) m.message(11, valueInfoMessage(v));
  for (const v of g.outputs) m.message(12, valueInfoMessage(v));
  return m;
}

/** The serialized ModelProto of `graph`. */
export function encodeModel(graph: GraphSpec, options: ModelOptions = {}): Uint8Array {
  const opset = new Message().string(1, '').varint(2, options.opsetVersion ?? 17);
  const m = new Message()
    .varint(1, options.irVersion ?? 8)
    .string(2, options.producerName ?? 'expertswarm')
    .string(3, options.producerVersion ?? '0.1.0')
    .message(7, graphMessage(graph))
    .message(8, opset);
  return m.toBytes();
}
