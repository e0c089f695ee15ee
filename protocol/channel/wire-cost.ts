/**
 * Benchmark aid: bytes on the wire per token, counting our frame headers and WebSocket framing, so bench/dispatch.ts
 * and docs/dispatch-bench.md state the cost of f32 versus f16 from the same arithmetic the frames use.
 */
import { elemBytes, type WireEncoding } from './encodings.ts';
import { WIRE_HEADER_BYTES, WIRE_PAIR_BYTES } from './limits.ts';

/** Bytes of a WebSocket frame header for a payload; client → server frames add a 4-byte mask (RFC 6455 §5.2). */
export function wsFrameOverhead(payloadBytes: number, fromClient: boolean): number {
  const len = payloadBytes <= 125 ? 2 : payloadBytes <= 0xffff ? 4 : 10;
  return len + (fromClient ? 4 : 0);
}

export interface WireCostInput {
  nEmbd: number;
  /** Experts each token is routed to. */
  topK: number;
  rowEncoding: WireEncoding;
  resultEncoding: WireEncoding;
  /** Tokens batched in one frame (1 when decoding one token at a time). */
  tokensPerFrame?: number;
  /** Workers a token's experts are spread over: each gets the row once and returns one sum row. */
  workersPerToken?: number;
}

/**
 * Bytes on the wire per token per MoE layer, both directions, counting our frame headers and WebSocket framing (not
 * TCP/IP or TLS). n_embd 2048, top-8, one worker: f32 16,524 B; f16 rows and sums 8,332 B.
 */
export function wireBytesPerToken(c: WireCostInput): { work: number; result: number; total: number } {
  const tpf = c.tokensPerFrame ?? 1;
  const w = c.workersPerToken ?? 1;
  const workFrame = WIRE_HEADER_BYTES + WIRE_PAIR_BYTES * Math.ceil((tpf * c.topK) / w) + tpf * c.nEmbd * elemBytes(c.rowEncoding);
  const resultFrame = WIRE_HEADER_BYTES + tpf * c.nEmbd * elemBytes(c.resultEncoding);
  const work = (w * (workFrame + wsFrameOverhead(workFrame, false))) / tpf;
  const result = (w * (resultFrame + wsFrameOverhead(resultFrame, true))) / tpf;
  return { work, result, total: work + result };
}
