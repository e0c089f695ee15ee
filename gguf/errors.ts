/**
 * GGUFError, the error of the GGUF container: every problem the reader finds in a file, every misuse of the writer,
 * and every failure of a byte source or sink is a GGUFError with a machine-readable `code`; `offset` is the absolute
 * byte offset in the file where the problem was found, when there is one.
 *
 * The toolkit throws two other kinds: ExpertSliceError (expert-slice.ts), for a slice request out of range or a valid
 * GGUF that is not an expert slice, and RangeError for a caller's bad argument (a type quantize or dequantize does not
 * support, a length that is not a whole number of blocks, a negative reader option).
 */

export type GGUFErrorCode =
  /** The file ends before a field, string, array, or tensor that the header announces. */
  | 'GGUF_TRUNCATED'
  /** The file does not start with "GGUF". */
  | 'GGUF_BAD_MAGIC'
  /** Version 0, 1 (unsupported), newer than 3, or byte-swapped (a big-endian file). */
  | 'GGUF_BAD_VERSION'
  /** A metadata key or value is invalid: unknown value type, bad UTF-8, duplicate/empty key, bad general.alignment,
   *  a value that does not fit its declared type (writer), or a metadata value of an unexpected type (accessors). */
  | 'GGUF_BAD_VALUE'
  /** A count or length is larger than a configured cap (ReadGGUFOptions). */
  | 'GGUF_LIMIT'
  /** A tensor info is invalid: dims, type id, block size, duplicate name, misaligned or overlapping data. */
  | 'GGUF_BAD_TENSOR'
  /** A required metadata key is absent (requireMeta* accessors). */
  | 'GGUF_MISSING_KEY'
  /** The writer was used out of order (e.g. metadata after the header, too many/too few tensor bytes). */
  | 'GGUF_WRITER'
  /** The byte source misbehaved (short read, read outside its size) or an I/O call failed. */
  | 'GGUF_IO';

export class GGUFError extends Error {
  override readonly name = 'GGUFError';
  readonly code: GGUFErrorCode;
  /** Absolute byte offset in the file where the problem was found. */
  readonly offset: number | undefined;
  /** The message without the code/offset decoration; used to add context when re-throwing. */
  readonly detail: string;

  constructor(code: GGUFErrorCode, detail: string, offset?: number, options?: { cause?: unknown }) {
    super(`${code}: ${detail}${offset !== undefined ? ` (at byte offset ${offset})` : ''}`, options);
    this.code = code;
    this.offset = offset;
    this.detail = detail;
  }

  /** The same error with `prefix: ` put in front of its detail (e.g. which key or tensor was being read). */
  withContext(prefix: string): GGUFError {
    const e = new GGUFError(this.code, `${prefix}: ${this.detail}`, this.offset, { cause: this.cause });
    return e;
  }
}

export function isGGUFError(e: unknown, code?: GGUFErrorCode): e is GGUFError {
  return e instanceof GGUFError && (code === undefined || e.code === code);
}
