/**
 * A slice's weights on the GPU: each matrix (gate, up, down) cut by expert ranges into parts that each fit one
 * storage binding, and a writer that fills them from bytes arriving in order (a whole array, or a stream's chunks).
 *
 * All three matrices share the cut (part p holds experts [begin, end) of gate, up and down), so one part is one set of
 * bind groups: expert_up binds gate and up of the same experts. Most slices are one part.
 *
 * @example
 *   const parts = createWeightParts(device, shape, planParts(shape, limit, limitName), label);
 *   const w = new WeightWriter(device.queue, shape, parts);
 *   w.write('gate', 0, bytes.subarray(0, 1000)); w.write('gate', 1000, bytes.subarray(1000)); …
 *   w.finish(); // checks every byte arrived
 */
import { EXPERT_MATRICES, type ExpertMatrix } from '../gguf/expert-slice.ts';
import { typeName } from '../gguf/quant-types.ts';
import { ExpertRuntimeError } from './errors.ts';
import { GPU_FLAGS } from './gpu-flags.ts';
import { ggmlGeluTable } from './reference/ggml-gelu.ts';
import { sliceMatrixBytes, type SliceBiases, type SliceScales, type SliceShape } from './slice.ts';

export interface WeightPart {
  /** Experts [begin, end) of the slice. */
  begin: number;
  end: number;
  buffers: Record<ExpertMatrix, GPUBuffer>;
}

const pad4 = (n: number): number => Math.ceil(n / 4) * 4;

/** Bytes of one expert's matrix, per matrix. */
export function bytesPerExpert(shape: SliceShape): Record<ExpertMatrix, number> {
  const total = sliceMatrixBytes(shape);
  return { gate: total.gate / shape.nExpert, up: total.up / shape.nExpert, down: total.down / shape.nExpert };
}

/** Experts per weight binding when each matrix's bytes per expert are `bytesPerExpert` and a binding holds `limit`. */
export function expertsPerPart(bytesPerExpert: Record<ExpertMatrix, number>, limit: number): number {
  // Whole experts only, and each part's buffer is padded to 4 bytes.
  const fits = (b: number): number => {
    let n = Math.floor(limit / b);
    while (n > 0 && pad4(n * b) > limit) n--;
    return n;
  };
  return Math.min(...Object.values(bytesPerExpert).map(fits));
}

/** Expert ranges [begin, end) of the parts a slice of nExpert is split into, `perPart` experts each. */
export function partRanges(nExpert: number, perPart: number): [number, number][] {
  const parts: [number, number][] = [];
  for (let b = 0; b < nExpert; b += perPart) parts.push([b, Math.min(nExpert, b + perPart)]);
  return parts;
}

/**
 * The expert ranges of a slice's parts when one binding holds `limit` bytes; throws BINDING_TOO_LARGE when not even
 * one expert's matrix fits.
 */
export function planParts(shape: SliceShape, limit: number, limitName: string): [number, number][] {
  const per = bytesPerExpert(shape);
  for (const m of EXPERT_MATRICES) {
    if (pad4(per[m]) > limit) {
      throw new ExpertRuntimeError(
        'BINDING_TOO_LARGE',
        { matrix: m, bytes: per[m], limit, limitName },
        `${m}: one expert of ${typeName(shape.types[m])} is ${per[m]} bytes, over the binding limit of ${limit} (${limitName}); ` +
          "an expert cannot be split over bindings, so this device cannot hold this model's experts",
      );
    }
  }
  return partRanges(shape.nExpert, expertsPerPart(per, limit));
}

/** Creates the (zeroed) weight buffers of every part. */
export function createWeightParts(device: GPUDevice, shape: SliceShape, ranges: [number, number][], label: string): WeightPart[] {
  const per = bytesPerExpert(shape);
  return ranges.map(([begin, end]) => {
    const name = ranges.length === 1 ? '' : ` part ${begin}..${end}`;
    const make = (m: ExpertMatrix): GPUBuffer =>
      device.createBuffer({
        label: `${label} ${m} weights (${typeName(shape.types[m])})${name}`,
        size: pad4((end - begin) * per[m]),
        usage: GPU_FLAGS.BUFFER_STORAGE | GPU_FLAGS.BUFFER_COPY_DST,
      });
    return { begin, end, buffers: { gate: make('gate'), up: make('up'), down: make('down') } };
  });
}

export function destroyWeightParts(parts: readonly WeightPart[]): void {
  for (const p of parts) for (const m of EXPERT_MATRICES) p.buffers[m].destroy();
}

/**
 * Writes each matrix's bytes, in order and in any chunking, into its parts with queue.writeBuffer (which needs
 * 4-byte multiples: up to 3 bytes wait for the next chunk, and a part's last word is padded with zeros). Nothing
 * but those few bytes is kept: the queue copies each chunk before write() returns.
 */
export class WeightWriter {
  private readonly per: Record<ExpertMatrix, number>;
  private readonly written: Record<ExpertMatrix, number> = { gate: 0, up: 0, down: 0 };
  private readonly carry: Record<ExpertMatrix, Uint8Array<ArrayBuffer>> = {
    gate: new Uint8Array(4),
    up: new Uint8Array(4),
    down: new Uint8Array(4),
  };
  private readonly expected: Record<ExpertMatrix, number>;

  constructor(
    private readonly queue: GPUQueue,
    private readonly shape: SliceShape,
    private readonly parts: readonly WeightPart[],
  ) {
    this.per = bytesPerExpert(shape);
    this.expected = sliceMatrixBytes(shape);
  }

  /** `chunk` holds matrix bytes [offset, offset + chunk.length); offsets must follow each other. Copies `chunk`. */
  write(m: ExpertMatrix, offset: number, chunk: Uint8Array): void {
    if (offset !== this.written[m]) {
      throw new ExpertRuntimeError(
        'BAD_SLICE_BYTES',
        { matrix: m, expected: this.written[m], actual: offset },
        `${m}: weight bytes must arrive in order: expected offset ${this.written[m]}, got ${offset}`,
      );
    }
    if (offset + chunk.length > this.expected[m]) {
      throw new ExpertRuntimeError(
        'BAD_SLICE_BYTES',
        { matrix: m, expected: this.expected[m], actual: offset + chunk.length },
        `${m}: ${this.shape.nExpert} experts need ${this.expected[m]} bytes, got at least ${offset + chunk.length}`,
      );
    }
    let at = 0;
    while (at < chunk.length) {
      const pos = this.written[m];
      const part = this.partOf(m, pos);
      const partStart = part.begin * this.per[m];
      const partEnd = part.end * this.per[m];
      const n = Math.min(chunk.length - at, partEnd - pos);
      this.put(m, part.buffers[m], pos - partStart, chunk.subarray(at, at + n), pos + n === partEnd);
      this.written[m] = pos + n;
      at += n;
    }
  }

  /** Throws BAD_SLICE_BYTES unless every matrix got all its bytes. */
  finish(): void {
    for (const m of EXPERT_MATRICES) {
      if (this.written[m] !== this.expected[m]) {
        throw new ExpertRuntimeError(
          'BAD_SLICE_BYTES',
          { matrix: m, expected: this.expected[m], actual: this.written[m] },
          `${m}: ${this.shape.nExpert} experts need ${this.expected[m]} bytes, got ${this.written[m]}`,
        );
      }
    }
  }

  private partOf(m: ExpertMatrix, pos: number): WeightPart {
    const expert = Math.floor(pos / this.per[m]);
    return this.parts.find((p) => expert >= p.begin && expert < p.end)!;
  }

  /** Writes `bytes` at byte `at` of `buffer`, keeping the unaligned tail (flushed, zero-padded, at the part's end). */
  private put(m: ExpertMatrix, buffer: GPUBuffer, at: number, bytes: Uint8Array, partEnds: boolean): void {
    const carry = this.carry[m];
    const held = at % 4; // bytes of the current word already waiting in carry
    let i = 0;
    if (held > 0) {
      const take = Math.min(4 - held, bytes.length);
      carry.set(bytes.subarray(0, take), held);
      i = take;
      if (held + take === 4) this.queue.writeBuffer(buffer, at - held, carry);
      else if (partEnds) this.flushTail(m, buffer, at - held, held + take);
    }
    const whole = (bytes.length - i) & ~3;
    if (whole > 0) this.queue.writeBuffer(buffer, at + i, bytes as Uint8Array<ArrayBuffer>, i, whole);
    i += whole;
    const rest = bytes.length - i;
    if (rest > 0) {
      carry.set(bytes.subarray(i), 0);
      if (partEnds) this.flushTail(m, buffer, at + i, rest);
    }
  }

  /** Writes the part's last, partial word: `valid` bytes of carry, zeros after. */
  private flushTail(m: ExpertMatrix, buffer: GPUBuffer, wordStart: number, valid: number): void {
    const carry = this.carry[m];
    carry.fill(0, valid);
    this.queue.writeBuffer(buffer, wordStart, carry);
  }
}

/**
 * What a slice's variant buffer (ffn_variant.wgsl's `variant_words`) holds, each section only where the variant has it:
 * float32 biases, gate and up [nExpert × ff] then down [nExpert × nEmbd]; float32 per-expert scales, gate, up and down
 * [nExpert] each; ggml's f16 GELU table (gelu in llama numerics: 65,536 f16 values, 128 KiB). One buffer for the whole
 * slice (indexed by the expert's slice index, whatever part holds its weights): even gpt-oss-120b's 128 experts need
 * 4.4 MB of biases. A slice with none of them gets a 16-byte buffer its kernels never read, since every up and down
 * bind group has the binding.
 */
export interface VariantData {
  biases: boolean;
  scales: boolean;
  geluTable: boolean;
}

/** Byte offsets of a variant buffer's sections (ffn_variant.wgsl scales_at, gelu_table_at) and its size. */
export function variantDataLayout(
  shape: Pick<SliceShape, 'nEmbd' | 'ff' | 'nExpert'>,
  data: VariantData,
): { scalesAt: number; geluTableAt: number; bytes: number } {
  const scalesAt = data.biases ? 4 * shape.nExpert * (2 * shape.ff + shape.nEmbd) : 0;
  const geluTableAt = scalesAt + (data.scales ? 4 * 3 * shape.nExpert : 0);
  const end = geluTableAt + (data.geluTable ? 2 * GELU_TABLE_ENTRIES : 0);
  return { scalesAt, geluTableAt, bytes: Math.max(end, 16) };
}

const GELU_TABLE_ENTRIES = 65536;

/** Creates the (zeroed) variant buffer of a slice (biases, scales, GELU table: VariantData). */
export function createBiasBuffer(
  device: GPUDevice,
  shape: Pick<SliceShape, 'nEmbd' | 'ff' | 'nExpert'>,
  data: VariantData,
  label: string,
): GPUBuffer {
  const held = [data.biases && 'biases', data.scales && 'scales', data.geluTable && 'GELU table'].filter(Boolean);
  return device.createBuffer({
    label: `${label} expert variant data (${held.length > 0 ? held.join(', ') : 'none: unused'})`,
    size: variantDataLayout(shape, data).bytes,
    usage: GPU_FLAGS.BUFFER_STORAGE | GPU_FLAGS.BUFFER_COPY_DST,
  });
}

/** Writes a slice's biases (validated: validateVariant) into its variant buffer, in the order ffn_variant.wgsl reads them. */
export function writeBiases(queue: GPUQueue, buffer: GPUBuffer, biases: SliceBiases): void {
  let at = 0;
  for (const b of [biases.gate, biases.up, biases.down]) {
    queue.writeBuffer(buffer, at, b as Float32Array<ArrayBuffer>);
    at += b.byteLength;
  }
}

/**
 * Writes a slice's per-expert scales (gate, up, down: nExpert each) after its biases; throws BAD_SLICE_BIASES (naming
 * `gate scale` …) when one has another length, should validateVariant not have caught it.
 */
export function writeScales(
  queue: GPUQueue,
  buffer: GPUBuffer,
  shape: Pick<SliceShape, 'nEmbd' | 'ff' | 'nExpert'>,
  data: VariantData,
  scales: SliceScales,
): void {
  let at = variantDataLayout(shape, data).scalesAt;
  for (const m of EXPERT_MATRICES) {
    const s = scales[m];
    if (s.length !== shape.nExpert) {
      throw new ExpertRuntimeError(
        'BAD_SLICE_BIASES',
        { bias: `${m} scale`, expected: shape.nExpert, actual: s.length },
        `${m} scales: ${shape.nExpert} experts need ${shape.nExpert} values, got ${s.length}`,
      );
    }
    queue.writeBuffer(buffer, at, s as Float32Array<ArrayBuffer>);
    at += s.byteLength;
  }
}

/** Writes ggml's f16 GELU table (ggml_table_gelu_f16, shaders/reference/ggml-gelu.ts) after the biases and scales. */
export function writeGeluTable(
  queue: GPUQueue,
  buffer: GPUBuffer,
  shape: Pick<SliceShape, 'nEmbd' | 'ff' | 'nExpert'>,
  data: VariantData,
): void {
  const table = ggmlGeluTable();
  if (table.length !== GELU_TABLE_ENTRIES) throw new RangeError(`the GELU table has ${table.length} entries`);
  queue.writeBuffer(buffer, variantDataLayout(shape, data).geluTableAt, table as Uint16Array<ArrayBuffer>);
}
