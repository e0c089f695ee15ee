/**
 * The forward-only reader of expert slices (the format is in expert-slice.ts): what a volunteer uses to load a slice
 * straight from `fetch(…).body` into GPU buffers without holding the whole file.
 *
 *   const info = await readExpertSliceStream(res.body, { onHeader, onData });
 *
 * Errors: ExpertSliceError when the bytes are a GGUF but not a slice, or carry bytes after it; GGUFErrors pass
 * through, notably GGUF_TRUNCATED (the stream ended early), GGUF_LIMIT (header over maxHeaderBytes) and GGUF_IO.
 * Browser-safe.
 */
import { GGUFError, isGGUFError } from './errors.ts';
import { biasValues, expertSliceLayout, trailingBytesError } from './expert-slice.ts';
import type { ExpertMatrix, ExpertSliceBiasValues, ExpertSliceInfo } from './expert-slice.ts';
import { bytesSource, readGGUF } from './reader.ts';
import type { ByteSource } from './reader.ts';
import type { GGUFFile } from './types.ts';

export const DEFAULT_MAX_HEADER_BYTES = 16 * 1024 * 1024;
/** The GGUF reader reads ahead up to 1 MiB past what it needs; header reads may reach that far past the cap. */
const READ_AHEAD_SLACK = 1024 * 1024;

export interface ExpertSliceHandlers {
  /** Once, after the header is read and validated, before any data. Awaited. */
  onHeader?(info: ExpertSliceInfo): void | Promise<void>;
  /**
   * Tensor data in file order, padding skipped, each matrix from offset 0 to info.bytes[matrix] without gaps.
   * Awaited, so a slow consumer slows the stream down. `chunk` may be a view of the stream's buffer that is valid
   * only during the call: copy it to keep it.
   */
  onData(matrix: ExpertMatrix, offsetInMatrix: number, chunk: Uint8Array): void | Promise<void>;
  /**
   * Once, after the matrices, when the slice carries expert biases (a biased variant: info.variant.biases): their
   * float32 values, each whole (they are small: (2·ff + n_embd) floats per expert). Awaited.
   */
  onBiases?(biases: ExpertSliceBiasValues): void | Promise<void>;
  /** Once, after the biases, when the slice carries per-expert scales (info.variant.scales): one float per expert. */
  onScales?(scales: ExpertSliceBiasValues): void | Promise<void>;
}

export interface ReadExpertSliceLimits {
  /** Most bytes of header (everything before the tensor data) held in memory. Default 16 MiB. */
  maxHeaderBytes?: number;
}

/** A stream's bytes as they arrive, kept (no copies) from `pos`, the next byte take() hands out. */
class Inflow {
  private chunks: Uint8Array[] = [];
  private head = 0;
  pos = 0;
  /** Bytes received so far. */
  received = 0;
  ended = false;
  private readonly next: () => Promise<IteratorResult<Uint8Array, unknown>>;
  private readonly stop: () => Promise<unknown>;

  constructor(stream: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>) {
    if (typeof (stream as ReadableStream<Uint8Array>).getReader === 'function') {
      const reader = (stream as ReadableStream<Uint8Array>).getReader();
      this.next = () => reader.read() as Promise<IteratorResult<Uint8Array, unknown>>;
      this.stop = () => reader.cancel();
    } else {
      const it = (stream as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
      this.next = () => it.next();
      this.stop = async () => it.return?.();
    }
  }

  /** Receives one more non-empty chunk; false at the end of the stream. */
  private async pull(): Promise<boolean> {
    while (!this.ended) {
      const r = await this.next();
      if (r.done) break;
      const c: unknown = r.value;
      if (!(c instanceof Uint8Array)) {
        throw new GGUFError('GGUF_IO', `the stream yielded ${typeof c} chunks, expected Uint8Array`, this.received);
      }
      if (c.length === 0) continue;
      this.chunks.push(c);
      this.received += c.length;
      return true;
    }
    this.ended = true;
    return false;
  }

  /** Receives until byte `end` is in or the stream ends. */
  async fill(end: number): Promise<void> {
    while (this.received < end && (await this.pull()));
  }

  /** A copy of [offset, offset + length), offset ≥ pos; zeros past the end of the stream. */
  copy(offset: number, length: number): Uint8Array {
    const out = new Uint8Array(length);
    let at = this.pos;
    for (let i = this.head; i < this.chunks.length && at < offset + length; i++) {
      const c = this.chunks[i] as Uint8Array;
      const from = Math.max(offset, at);
      const to = Math.min(offset + length, at + c.length);
      if (from < to) out.set(c.subarray(from - at, to - at), from - offset);
      at += c.length;
    }
    return out;
  }

  /** Up to `max` bytes at `pos`, as a view, consumed; undefined at the end of the stream. */
  async take(max: number): Promise<Uint8Array | undefined> {
    if (this.head === this.chunks.length) {
      this.chunks = [];
      this.head = 0;
      if (!(await this.pull())) return undefined;
    }
    const c = this.chunks[this.head] as Uint8Array;
    const n = Math.min(max, c.length);
    if (n === c.length) this.chunks[this.head++] = c.subarray(0, 0);
    else this.chunks[this.head] = c.subarray(n);
    this.pos += n;
    return n === c.length ? c : c.subarray(0, n);
  }

  /** Consumes up to byte `end`; false when the stream ends first. */
  async skipTo(end: number): Promise<boolean> {
    while (this.pos < end) if (!(await this.take(end - this.pos))) return false;
    return true;
  }

  async close(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    await this.stop().catch(() => {});
  }
}

function headerTooLarge(max: number): GGUFError {
  return new GGUFError('GGUF_LIMIT', `the slice's header does not fit in maxHeaderBytes (${max})`);
}

/**
 * Parses the header with readGGUF over a source that waits for the stream. Its size is unknown, so the source claims
 * the largest (the data ranges are checked while streaming) and reads bytes past the end of the stream as zeros: a
 * header that used them ends past the last byte received, and a parse that failed on them is redone on exactly
 * the bytes received, for the real error.
 */
async function readStreamHeader(inflow: Inflow, maxHeaderBytes: number): Promise<GGUFFile> {
  let pastEnd = false;
  const src: ByteSource = {
    size: Number.MAX_SAFE_INTEGER,
    async read(offset, length) {
      if (offset + length > maxHeaderBytes + READ_AHEAD_SLACK) throw headerTooLarge(maxHeaderBytes);
      await inflow.fill(offset + length);
      if (offset + length > inflow.received) pastEnd = true;
      return inflow.copy(offset, length);
    },
  };
  let file: GGUFFile;
  try {
    file = await readGGUF(src);
  } catch (e) {
    if (!pastEnd || isGGUFError(e, 'GGUF_LIMIT')) throw e;
    await readGGUF(bytesSource(inflow.copy(0, inflow.received))).catch((real: unknown) => {
      throw isGGUFError(real, 'GGUF_TRUNCATED') ? real.withContext('the stream ended inside the header') : real;
    });
    throw e;
  }
  if (file.dataOffset > maxHeaderBytes) throw headerTooLarge(maxHeaderBytes);
  if (file.dataOffset > inflow.received) {
    const where = `inside the ${file.dataOffset}-byte header`;
    throw new GGUFError('GGUF_TRUNCATED', `the stream ended after ${inflow.received} bytes, ${where}`, inflow.received);
  }
  return file;
}

/**
 * Reads a slice forward-only: holds the header (at most maxHeaderBytes), calls onHeader, then hands the tensor
 * data to onData as it arrives, and checks the stream ends right after the last tensor (its padding optional).
 * Resolves with the slice's info. Cancels the stream when it stops early (an error, or a handler that throws).
 */
export async function readExpertSliceStream(
  stream: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
  handlers: ExpertSliceHandlers,
  limits: ReadExpertSliceLimits = {},
): Promise<ExpertSliceInfo> {
  const maxHeaderBytes = limits.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES;
  const inflow = new Inflow(stream);
  try {
    const file = await readStreamHeader(inflow, maxHeaderBytes);
    const { info, ranges, biasRanges, scaleRanges, dataEnd, fileEnd } = expertSliceLayout(file);
    await handlers.onHeader?.(info);
    const truncated = (): GGUFError => {
      const short = `${dataEnd - inflow.pos} bytes short of the end of the tensor data (byte ${dataEnd})`;
      return new GGUFError('GGUF_TRUNCATED', `the stream ended after ${inflow.pos} bytes, ${short}`, inflow.pos);
    };
    for (const s of ranges) {
      if (!(await inflow.skipTo(s.start))) throw truncated();
      while (inflow.pos < s.end) {
        const offset = inflow.pos - s.start;
        const chunk = await inflow.take(s.end - inflow.pos);
        if (!chunk) throw truncated();
        await handlers.onData(s.matrix, offset, chunk);
      }
    }
    const vectors = async (rs: typeof biasRanges): Promise<ExpertSliceBiasValues> => {
      const values: Partial<ExpertSliceBiasValues> = {};
      for (const b of rs) {
        if (!(await inflow.skipTo(b.start))) throw truncated();
        const bytes = new Uint8Array(b.end - b.start);
        while (inflow.pos < b.end) {
          const at = inflow.pos - b.start;
          const chunk = await inflow.take(b.end - inflow.pos);
          if (!chunk) throw truncated();
          bytes.set(chunk, at);
        }
        values[b.bias] = biasValues(bytes);
      }
      return values as ExpertSliceBiasValues;
    };
    if (biasRanges.length > 0) {
      const values = await vectors(biasRanges);
      await handlers.onBiases?.(values);
    }
    if (scaleRanges.length > 0) {
      const values = await vectors(scaleRanges);
      await handlers.onScales?.(values);
    }
    if ((await inflow.skipTo(fileEnd)) && (await inflow.take(1))) throw trailingBytesError(fileEnd);
    return info;
  } finally {
    await inflow.close();
  }
}
