/**
 * Node-only file I/O for the GGUF toolkit (not exported from gguf/index.ts, which stays browser-safe).
 */
import { open } from 'node:fs/promises';
import { createWriteStream } from 'node:fs';
import { GGUFError } from './errors.ts';
import { readGGUF } from './reader.ts';
import type { ByteSource, ReadGGUFOptions } from './reader.ts';
import type { ByteSink } from './writer.ts';
import type { GGUFFile } from './types.ts';

export type FileSource = ByteSource & { readonly path: string; close(): Promise<void> };

/** A ByteSource over a file, using positional reads on one FileHandle. Size is taken when opened. */
export async function openFileSource(path: string): Promise<FileSource> {
  const fh = await open(path, 'r');
  let size: number;
  try {
    size = (await fh.stat()).size;
  } catch (e) {
    await fh.close().catch(() => {});
    throw e;
  }
  let closed = false;
  return {
    path,
    size,
    async read(offset: number, length: number): Promise<Uint8Array> {
      if (closed) throw new GGUFError('GGUF_IO', `${path}: read after close`);
      if (!(Number.isSafeInteger(offset) && Number.isSafeInteger(length) && offset >= 0 && length >= 0 && offset + length <= size)) {
        throw new GGUFError('GGUF_IO', `${path}: read of ${length} bytes at ${offset} is outside the ${size}-byte file`, offset);
      }
      const out = new Uint8Array(length);
      let got = 0;
      while (got < length) {
        const { bytesRead } = await fh.read(out, got, length - got, offset + got);
        if (bytesRead === 0) {
          throw new GGUFError(
            'GGUF_IO',
            `${path}: file ended after ${offset + got} bytes, expected ${size} (did it shrink?)`,
            offset + got,
          );
        }
        got += bytesRead;
      }
      return out;
    },
    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      await fh.close();
    },
  };
}

export type FileSink = ByteSink & { readonly path: string; close(): Promise<void>; readonly bytesWritten: number };

/**
 * A ByteSink that writes a file through a write stream. write() copies the chunk (callers may reuse their buffer
 * once the promise resolves) and waits for 'drain' when the stream's buffer is full. A stream error rejects the
 * pending and all later writes and close(). close() resolves once the file is flushed and closed.
 */
export function fileSink(path: string, opts: { flags?: string; mode?: number } = {}): FileSink {
  const stream = createWriteStream(path, { flags: opts.flags ?? 'w', ...(opts.mode !== undefined ? { mode: opts.mode } : {}) });
  let error: Error | undefined;
  let closed = false;
  let ended = false;
  let bytesWritten = 0;
  stream.on('error', (e: Error) => {
    error ??= e;
  });

  const fail = (e: Error): GGUFError =>
    e instanceof GGUFError ? e : new GGUFError('GGUF_IO', `${path}: ${e.message}`, undefined, { cause: e });

  /** Resolves on `event`; rejects on 'error' or on the stream closing first. */
  const waitFor = (event: 'drain' | 'close'): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      const cleanup = (): void => {
        stream.off(event, onEvent);
        stream.off('error', onError);
        if (event !== 'close') stream.off('close', onClose);
      };
      const onEvent = (): void => {
        cleanup();
        if (error && event === 'close') reject(fail(error));
        else resolve();
      };
      const onError = (e: Error): void => {
        cleanup();
        if (event === 'close') {
          // 'close' follows 'error' for fs streams (autoClose); wait for it so the fd is released.
          stream.once('close', () => reject(fail(e)));
        } else {
          reject(fail(e));
        }
      };
      const onClose = (): void => {
        cleanup();
        reject(fail(error ?? new Error('stream closed before drain')));
      };
      stream.on(event, onEvent);
      stream.on('error', onError);
      if (event !== 'close') stream.on('close', onClose);
    });

  return {
    path,
    get bytesWritten() {
      return bytesWritten;
    },
    async write(chunk: Uint8Array): Promise<void> {
      if (error) throw fail(error);
      if (ended) throw new GGUFError('GGUF_IO', `${path}: write after close`);
      if (chunk.length === 0) return;
      const ok = stream.write(Buffer.from(chunk)); // a copy: the stream may hold it after we return
      bytesWritten += chunk.length;
      if (!ok) await waitFor('drain');
      if (error) throw fail(error);
    },
    async close(): Promise<void> {
      if (closed) {
        if (error) throw fail(error);
        return;
      }
      closed = true;
      ended = true;
      if (stream.closed) {
        if (error) throw fail(error);
        return;
      }
      const done = waitFor('close');
      stream.end();
      await done;
      if (error) throw fail(error);
    },
  };
}

/** Opens a file, reads its GGUF header/metadata/tensor infos, closes it. */
export async function readGGUFFile(path: string, opts?: ReadGGUFOptions): Promise<GGUFFile> {
  const src = await openFileSource(path);
  try {
    return await readGGUF(src, opts);
  } finally {
    await src.close();
  }
}
