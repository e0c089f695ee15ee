/**
 * Per-call GPU buffers, reused by (usage, size bucket). A buffer goes back to the pool only after the work that used
 * it has completed (the caller releases it after the readback's mapAsync resolves), never right after submit.
 * Sizes are rounded up to a power of two (≥ 256 B) so calls with different token counts still share buffers; bind
 * with an explicit `size` since a pooled buffer may be larger than asked for.
 */

export interface BufferPoolStats {
  /** Buffers waiting in the pool. */
  free: number;
  freeBytes: number;
  /** Buffers handed out and not yet released. */
  inUse: number;
}

export class BufferPool {
  private readonly free = new Map<string, GPUBuffer[]>();
  private readonly inUse = new Set<GPUBuffer>();
  private disposed = false;

  constructor(
    private readonly device: GPUDevice,
    private readonly labelPrefix: string,
    /** Free buffers kept per (usage, size) key; more are destroyed on release. */
    private readonly maxFreePerKey = 4,
  ) {}

  /** Size a request of `bytes` is served with. */
  bucketSize(bytes: number): number {
    const b = Math.max(256, 2 ** Math.ceil(Math.log2(Math.max(bytes, 1))));
    return Math.min(b, Math.max(this.device.limits.maxBufferSize, roundUp4(bytes)));
  }

  acquire(usage: GPUBufferUsageFlags, bytes: number, role: string): GPUBuffer {
    if (this.disposed) throw new Error('BufferPool: acquire after dispose');
    const size = this.bucketSize(bytes);
    const list = this.free.get(key(usage, size));
    const buffer = list?.pop() ?? this.device.createBuffer({ size, usage, label: `${this.labelPrefix} ${role}` });
    buffer.label = `${this.labelPrefix} ${role}`;
    this.inUse.add(buffer);
    return buffer;
  }

  /** Gives a buffer back once the GPU is done with it; destroys it when the pool is full or disposed. */
  release(buffer: GPUBuffer): void {
    if (!this.inUse.delete(buffer)) return;
    const k = key(buffer.usage, buffer.size);
    const list = this.free.get(k) ?? [];
    if (this.disposed || list.length >= this.maxFreePerKey) {
      buffer.destroy();
      return;
    }
    list.push(buffer);
    this.free.set(k, list);
  }

  /** Destroys a buffer whose work may have failed instead of pooling it. */
  discard(buffer: GPUBuffer): void {
    this.inUse.delete(buffer);
    buffer.destroy();
  }

  stats(): BufferPoolStats {
    let free = 0;
    let freeBytes = 0;
    for (const list of this.free.values()) {
      free += list.length;
      for (const b of list) freeBytes += b.size;
    }
    return { free, freeBytes, inUse: this.inUse.size };
  }

  /** Destroys the free buffers now; buffers still in use are destroyed when released. */
  dispose(): void {
    this.disposed = true;
    for (const list of this.free.values()) for (const b of list) b.destroy();
    this.free.clear();
  }
}

function key(usage: GPUBufferUsageFlags, size: number): string {
  return `${usage}:${size}`;
}

function roundUp4(n: number): number {
  return Math.ceil(n / 4) * 4;
}
