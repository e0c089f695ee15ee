/**
 * A dispatcher for coordinator tests: speaks the expert-dispatch protocol on a unix socket and computes experts
 * from the GGUF with the CPU references. It can be told to serve all, half or none of the pairs, to answer
 * "local", to stall, to die mid-frame, or to send garbage.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { rm } from 'node:fs/promises';
import {
  FrameKind,
  FrameReader,
  decodeHello,
  decodeRequest,
  encodeHelloAck,
  encodeResponse,
  type DispatchRequest,
  type Hello,
} from '../../hub/dispatch/protocol.ts';
import { expertFfnAccumulate } from '../../shaders/reference/expert-ffn.ts';
import { ExpertStore } from './expert-store.ts';

/** `wrong-expert` serves every pair with the next expert's matrices: a negative control for the exactness checks. */
export type DispatcherBehaviour = 'all' | 'half' | 'none' | 'local' | 'stall' | 'die' | 'garbage' | 'wrong-expert';

export interface DispatcherStats {
  hellos: Hello[];
  requests: number;
  servedPairs: number;
  notServedPairs: number;
  layersServed: Set<number>;
  /** localNsPerPair values the coordinator reported. */
  localCosts: number[];
  protocolErrors: string[];
}

export class TestDispatcher {
  behaviour: DispatcherBehaviour = 'all';
  quietMs = 0;
  /** Round activations as llama.cpp's CPU backend does (so results track its numbers, not just the exact math). */
  llamaNumerics = true;
  readonly stats: DispatcherStats = {
    hellos: [],
    requests: 0,
    servedPairs: 0,
    notServedPairs: 0,
    layersServed: new Set(),
    localCosts: [],
    protocolErrors: [],
  };
  private sockets = new Set<Socket>();
  private nExpert = 0;

  private constructor(
    readonly path: string,
    private readonly server: Server,
    private readonly store: ExpertStore,
  ) {}

  static async start(path: string, modelPath: string, behaviour: DispatcherBehaviour = 'all'): Promise<TestDispatcher> {
    await rm(path, { force: true });
    const store = await ExpertStore.open(modelPath);
    const server = createServer();
    const d = new TestDispatcher(path, server, store);
    d.behaviour = behaviour;
    server.on('connection', (s) => d.serve(s));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(path, () => resolve());
    });
    return d;
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
    await this.store.close();
    await rm(this.path, { force: true });
  }

  /** Resolves once a coordinator has said hello (bounded). */
  async waitForHello(timeoutMs = 10_000): Promise<Hello> {
    const deadline = Date.now() + timeoutMs;
    while (this.stats.hellos.length === 0) {
      if (Date.now() > deadline) throw new Error('no coordinator connected to the test dispatcher in time');
      await new Promise((r) => setTimeout(r, 20));
    }
    return this.stats.hellos[0] as Hello;
  }

  private serve(s: Socket): void {
    this.sockets.add(s);
    s.on('close', () => this.sockets.delete(s));
    s.on('error', () => s.destroy());
    const reader = new FrameReader();
    let nExpert = 0;
    let queue = Promise.resolve();
    s.on('data', (chunk) => {
      let frames: ReturnType<typeof reader.push>;
      try {
        frames = reader.push(chunk);
      } catch (e) {
        this.stats.protocolErrors.push((e as Error).message);
        s.destroy();
        return;
      }
      for (const { header, payload } of frames) {
        queue = queue.then(async () => {
          if (s.destroyed) return;
          try {
            if (header.kind === FrameKind.Hello) {
              const hello = decodeHello(payload);
              nExpert = hello.nExpert;
              this.nExpert = hello.nExpert;
              this.stats.hellos.push(hello);
              s.write(encodeHelloAck(true));
            } else {
              await this.answer(s, decodeRequest(header, payload, nExpert));
            }
          } catch (e) {
            this.stats.protocolErrors.push((e as Error).message);
            s.destroy();
          }
        });
      }
    });
  }

  private async answer(s: Socket, r: DispatchRequest): Promise<void> {
    this.stats.requests++;
    this.stats.localCosts.push(r.localNsPerPair);
    const base = { seq: r.seq, layer: r.layer, nTokens: r.nTokens, nUsed: r.nUsed, quietMs: this.quietMs };
    switch (this.behaviour) {
      case 'stall':
        return;
      case 'die': {
        const whole = encodeResponse({ ...base, mode: 'local' });
        s.end(whole.subarray(0, 10));
        s.destroy();
        return;
      }
      case 'garbage': {
        const junk = new Uint8Array(64);
        for (let i = 0; i < junk.length; i++) junk[i] = (i * 131 + r.seq * 17) & 0xff;
        s.write(junk);
        return;
      }
      case 'local':
        this.stats.notServedPairs += r.nTokens * r.nUsed;
        s.write(encodeResponse({ ...base, mode: 'local' }));
        return;
    }
    const served = new Uint8Array(r.nTokens * r.nUsed);
    const sums = new Float32Array(r.nTokens * r.nEmbd);
    const acc = new Float64Array(r.nEmbd);
    for (let t = 0; t < r.nTokens; t++) {
      acc.fill(0);
      const x = r.rows.subarray(t * r.nEmbd, (t + 1) * r.nEmbd);
      for (let k = 0; k < r.nUsed; k++) {
        const p = t * r.nUsed + k;
        const serve = this.behaviour !== 'none' && (this.behaviour !== 'half' || p % 2 === 0);
        if (!serve) {
          this.stats.notServedPairs++;
          continue;
        }
        const id = this.behaviour === 'wrong-expert' ? ((r.ids[p] as number) + 1) % this.nExpert : (r.ids[p] as number);
        expertFfnAccumulate(await this.store.expert(r.layer, id), x, r.probs[p] as number, acc, this.llamaNumerics);
        served[p] = 1;
        this.stats.servedPairs++;
      }
      sums.set(acc, t * r.nEmbd);
    }
    if (served.some((f) => f === 1)) this.stats.layersServed.add(r.layer);
    s.write(encodeResponse({ ...base, mode: 'served', served, sums }));
  }
}
