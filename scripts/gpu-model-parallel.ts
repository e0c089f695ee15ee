/**
 * tools/make-model.ts's model, written in parallel: byte for byte the same file (test/unit/gpu-model-parallel.test.ts
 * compares them), in seconds on the GPU host's 16 cores instead of minutes on one (the realistic bench model, 690 MB,
 * took 181 s single-threaded; ../shared/reference/gpu-host.md).
 *
 * Each tensor's weights come from one xorshift32 stream seeded by (seed, tensor name), one step per element. xorshift32
 * is linear over GF(2), so the state after n steps is a 32 × 32 bit matrix power applied to the seed: any row range of
 * any tensor can be generated on its own, quantized (every GGML block lies within a row) and written at its offset.
 * The header, the per-tensor seeds and the amplitudes are tools/make-model.ts's own (modelHeader, hashName, amplitude).
 */
import { closeSync, ftruncateSync, mkdirSync, openSync, renameSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';
import { rowByteSize } from '../gguf/quant-types.ts';
import { quantize } from '../gguf/quantize.ts';
import type { GGUFWriter } from '../gguf/writer.ts';
import { amplitude, hashName, modelHeader } from '../tools/make-model.ts';
import type { ModelConfig, ModelPlan, TensorPlan } from '../tools/model-arch.ts';

/** One xorshift32 step, as tools/make-model.ts fillUniform takes it. */
function step(state: number): number {
  let s = state;
  s ^= s << 13;
  s ^= s >>> 17;
  s ^= s << 5;
  return s >>> 0;
}

/** A linear map on 32-bit states as its 32 columns: col[j] is the image of bit j. */
type BitMatrix = Uint32Array;

function apply(m: BitMatrix, s: number): number {
  let out = 0;
  for (let j = 0, x = s >>> 0; x !== 0; j++, x >>>= 1) if (x & 1) out ^= m[j] as number;
  return out >>> 0;
}

function compose(a: BitMatrix, b: BitMatrix): BitMatrix {
  return Uint32Array.from(b, (col) => apply(a, col));
}

const STEP: BitMatrix = Uint32Array.from({ length: 32 }, (_, j) => step((1 << j) >>> 0));

/** The xorshift32 state `n` steps after `state`, in O(log n) matrix products. */
export function jump(state: number, n: number): number {
  let s = state >>> 0;
  let m = STEP;
  for (let k = n; k > 0; k = Math.floor(k / 2)) {
    if (k % 2 === 1) s = apply(m, s);
    if (k > 1) m = compose(m, m);
  }
  return s;
}

/** A row range of one tensor: generated, quantized and written on its own. */
export interface Task {
  tensor: number;
  row0: number;
  rows: number;
}

/** Every tensor cut into row ranges of at most `maxElements` (whole rows; at least one row each). */
export function planTasks(plan: ModelPlan, maxElements = 1 << 22): Task[] {
  const tasks: Task[] = [];
  plan.tensors.forEach((t, tensor) => {
    const rowLength = t.dims[0] as number;
    const rows = t.dims.reduce((a, b) => a * b, 1) / rowLength;
    const per = Math.max(1, Math.floor(maxElements / rowLength));
    for (let row0 = 0; row0 < rows; row0 += per) tasks.push({ tensor, row0, rows: Math.min(per, rows - row0) });
  });
  return tasks;
}

/** Rows generated and quantized at a time within a task: bounds memory. */
const CHUNK_ELEMENTS = 1 << 20;

/** Generates, quantizes and writes one task into the open file `fd` laid out as `writer` says. */
export function runTask(fd: number, config: ModelConfig, plan: ModelPlan, writer: GGUFWriter, task: Task): void {
  const t = plan.tensors[task.tensor] as TensorPlan;
  const info = writer.tensors[task.tensor];
  if (!info) throw new Error(`no tensor ${task.tensor}`);
  const rowLength = t.dims[0] as number;
  const rowBytes = rowByteSize(t.type, rowLength);
  const amp = amplitude(t, config.expertScale);
  const k = (2 * amp) / 4294967296;
  let state = amp === 0 ? 0 : jump(hashName(config.seed, t.name), task.row0 * rowLength);
  const chunkRows = Math.max(1, Math.floor(CHUNK_ELEMENTS / rowLength));
  for (let r = 0; r < task.rows; r += chunkRows) {
    const n = Math.min(chunkRows, task.rows - r);
    const values = new Float32Array(n * rowLength);
    if (amp === 0) values.fill(1);
    else {
      let s = state;
      for (let i = 0; i < values.length; i++) {
        s ^= s << 13;
        s ^= s >>> 17;
        s ^= s << 5;
        values[i] = (s >>> 0) * k - amp;
      }
      state = s;
    }
    const bytes = quantize(t.type, values);
    const at = writer.dataOffset + info.offset + (task.row0 + r) * rowBytes;
    for (let done = 0; done < bytes.length; ) done += writeSync(fd, bytes, done, bytes.length - done, at + done);
  }
}

/** The file's final size with its header written; the tensors' bytes (and the zero padding) still to come. */
export function startFile(path: string, writer: GGUFWriter): void {
  mkdirSync(dirname(path), { recursive: true });
  const fd = openSync(path, 'w');
  try {
    ftruncateSync(fd, writer.fileSize);
    const header = writer.encodeHeader();
    writeSync(fd, header, 0, header.length, 0);
  } finally {
    closeSync(fd);
  }
}

/** Runs the tasks `index`, `index + count`, … of the plan into the started file: one worker's share. */
export function runShare(path: string, config: ModelConfig, index: number, count: number, maxElements?: number): number {
  const { plan, writer } = modelHeader(config);
  const tasks = planTasks(plan, maxElements);
  const fd = openSync(path, 'r+');
  let done = 0;
  try {
    for (let i = index; i < tasks.length; i += count) {
      runTask(fd, config, plan, writer, tasks[i] as Task);
      done++;
    }
  } finally {
    closeSync(fd);
  }
  return done;
}

/** Renames the finished temporary file into place (a partial file never has the final name, as in make-model.ts). */
export function finishFile(tmp: string, path: string): void {
  renameSync(tmp, path);
}
