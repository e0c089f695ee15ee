/**
 * The coordinator's own local expert computation, as a test oracle: `coordinator/bin/linkcpp-expert-ref` (built by
 * coordinator/build.sh) runs llama_xd_compute_pairs, the kernels linkcpp-server's dispatch path uses for every pair
 * a dispatcher did not serve. One process per model; calls are streamed to it and answered in order.
 *
 * @example
 *   const ref = await NativeReference.start(model.path);
 *   const sums = await ref.compute(layer, { rows, ids, probs, nTokens, nUsed }); // Float32Array [nTokens × nEmbd]
 *   await ref.close();
 */
import { execFile, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { RoutedCall } from '../shaders/reference/expert-call.ts';

export const LINKCPP_EXPERT_REF = fileURLToPath(new URL('../coordinator/bin/linkcpp-expert-ref', import.meta.url));

export interface NativeModelInfo {
  nEmbd: number;
  ff: number;
  nExpert: number;
  /** The HELLO numerics value linkcpp-server sends (1 = llama.cpp CPU rounding). */
  numerics: number;
  /** Layers with routed experts and ggml's names of their matrices' types (e.g. "q4_K"). */
  layers: Array<{ layer: number; gate: string; up: string; down: string }>;
}

function binary(): string {
  if (!existsSync(LINKCPP_EXPERT_REF)) throw new Error(`${LINKCPP_EXPERT_REF} is missing: run npm run build:coordinator`);
  return LINKCPP_EXPERT_REF;
}

/** What the tool reads from a model's GGUF (`--info`). */
export async function nativeModelInfo(modelPath: string): Promise<NativeModelInfo> {
  const { stdout } = await promisify(execFile)(binary(), ['-m', modelPath, '--info'], { timeout: 30_000 });
  const j = JSON.parse(stdout) as { n_embd: number; ff: number; n_expert: number; numerics: number; layers: NativeModelInfo['layers'] };
  return { nEmbd: j.n_embd, ff: j.ff, nExpert: j.n_expert, numerics: j.numerics, layers: j.layers };
}

/** One input record: u32 layer, n_tokens, n_used, then rows f32, ids i32, probs f32 (coordinator/README.md). */
export function encodeRecord(layer: number, c: RoutedCall): Uint8Array {
  const head = Uint32Array.of(layer, c.nTokens, c.nUsed);
  const parts = [head, c.rows, c.ids, c.probs];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let o = 0;
  for (const p of parts) {
    out.set(new Uint8Array(p.buffer, p.byteOffset, p.byteLength), o);
    o += p.byteLength;
  }
  return out;
}

interface Pending {
  bytes: number;
  resolve(v: Float32Array): void;
  reject(e: Error): void;
}

export class NativeReference {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private pending: Pending[] = [];
  private stderr = '';
  private failure: Error | undefined;
  private readonly exited: Promise<void>;

  private constructor(
    readonly info: NativeModelInfo,
    private readonly proc: ChildProcessWithoutNullStreams,
  ) {
    proc.stdout.on('data', (d: Buffer) => this.take(d));
    proc.stderr.on('data', (d: Buffer) => {
      this.stderr = (this.stderr + d.toString()).slice(-4000);
    });
    proc.stdin.on('error', () => {}); // an early exit surfaces through 'exit' below, with the tool's message
    this.exited = new Promise((resolve) => {
      proc.once('exit', (code, signal) => {
        this.fail(new Error(`linkcpp-expert-ref exited (${code ?? signal}): ${this.stderr.trim() || 'no message'}`));
        resolve();
      });
    });
  }

  static async start(modelPath: string): Promise<NativeReference> {
    const info = await nativeModelInfo(modelPath);
    return new NativeReference(info, spawn(binary(), ['-m', modelPath], { stdio: ['pipe', 'pipe', 'pipe'] }));
  }

  /** sums[t] = Σ_k probs[t,k] · expert_{ids[t,k]}(rows[t]) on `layer`, computed as linkcpp-server computes it. */
  compute(layer: number, c: RoutedCall): Promise<Float32Array> {
    if (this.failure) return Promise.reject(this.failure);
    if (c.rows.length !== c.nTokens * this.info.nEmbd || c.ids.length !== c.nTokens * c.nUsed || c.probs.length !== c.ids.length) {
      return Promise.reject(new RangeError(`call shapes do not match nTokens ${c.nTokens}, nUsed ${c.nUsed}, nEmbd ${this.info.nEmbd}`));
    }
    return new Promise<Float32Array>((resolve, reject) => {
      this.pending.push({ bytes: 4 * c.nTokens * this.info.nEmbd, resolve, reject });
      this.proc.stdin.write(encodeRecord(layer, c));
    });
  }

  async close(): Promise<void> {
    this.proc.stdin.end();
    const t = setTimeout(() => this.proc.kill('SIGKILL'), 10_000);
    await this.exited;
    clearTimeout(t);
  }

  private take(d: Buffer): void {
    this.chunks.push(d);
    this.buffered += d.length;
    while (this.pending.length > 0 && this.buffered >= (this.pending[0] as Pending).bytes) {
      const p = this.pending.shift() as Pending;
      const all = Buffer.concat(this.chunks);
      const out = new Float32Array(p.bytes / 4);
      new Uint8Array(out.buffer).set(all.subarray(0, p.bytes));
      this.chunks = [all.subarray(p.bytes)];
      this.buffered -= p.bytes;
      p.resolve(out);
    }
  }

  private fail(e: Error): void {
    this.failure ??= e;
    for (const p of this.pending.splice(0)) p.reject(e);
  }
}
