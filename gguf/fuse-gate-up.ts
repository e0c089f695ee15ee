/**
 * Rewrites a model's routed experts into llama.cpp's fused layout: each MoE layer's `ffn_gate_exps` and `ffn_up_exps`
 * ([n_embd, ff, n_expert] each) become one `ffn_gate_up_exps` [n_embd, 2·ff, n_expert] holding, per expert, its gate
 * rows then its up rows (what llama.cpp's converter writes with `--fuse-gate-up-exps`, and what the loaders of
 * deepseek2, qwen3next, qwen35moe and others accept in place of the separate pair). Every other tensor and key is
 * copied as it is. The tests use it to serve a fused file; the bytes of each row are unchanged.
 *
 *   await fuseGateUpFile('model.gguf', 'model-fused.gguf');
 */
import { GGUFError } from './errors.ts';
import { gateUpTensorName } from './expert-slice.ts';
import { fileSink, openFileSource, readGGUFFile } from './node-io.ts';
import type { GGUFTensorInfo } from './types.ts';
import { GGUFWriter } from './writer.ts';

const GATE = /^blk\.(\d+)\.ffn_gate_exps\.weight$/;

export async function fuseGateUpFile(inPath: string, outPath: string): Promise<{ fusedLayers: number[] }> {
  const file = await readGGUFFile(inPath);
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  const fused = new Map<string, { gate: GGUFTensorInfo; up: GGUFTensorInfo; layer: number }>();
  for (const t of file.tensors) {
    const m = GATE.exec(t.name);
    if (!m) continue;
    const layer = Number(m[1]);
    const up = byName.get(`blk.${layer}.ffn_up_exps.weight`);
    if (!up || up.type !== t.type || up.dims.join() !== t.dims.join()) {
      throw new GGUFError('GGUF_BAD_TENSOR', `layer ${layer}: ffn_up_exps missing or unlike ffn_gate_exps; cannot fuse`);
    }
    fused.set(t.name, { gate: t, up, layer });
  }
  if (fused.size === 0) throw new GGUFError('GGUF_BAD_TENSOR', `${inPath} has no ffn_gate_exps tensors to fuse`);
  const upNames = new Set([...fused.values()].map((f) => f.up.name));

  const w = new GGUFWriter({ alignment: file.alignment });
  for (const [k, v] of file.metadata) w.set(k, v);
  // Tensors in the file's order; a layer's fused tensor takes its gate's place, its up is dropped.
  const order: Array<{ name: string; parts: GGUFTensorInfo[]; nExpert: number }> = [];
  for (const t of file.tensors) {
    if (upNames.has(t.name)) continue;
    const f = fused.get(t.name);
    if (f) {
      const [nEmbd = 0, ff = 0, nExpert = 0] = t.dims;
      w.addTensor(gateUpTensorName(f.layer), [nEmbd, 2 * ff, nExpert], t.type);
      order.push({ name: gateUpTensorName(f.layer), parts: [f.gate, f.up], nExpert });
    } else {
      w.addTensor(t.name, t.dims, t.type);
      order.push({ name: t.name, parts: [t], nExpert: 0 });
    }
  }
  const src = await openFileSource(inPath);
  const sink = fileSink(outPath);
  try {
    await w.writeHeader(sink);
    for (const o of order) {
      if (o.parts.length === 1) {
        const t = o.parts[0] as GGUFTensorInfo;
        await w.writeTensorData(sink, await src.read(file.dataOffset + t.offset, t.byteLength), o.name);
        continue;
      }
      const [gate, up] = o.parts as [GGUFTensorInfo, GGUFTensorInfo];
      const per = gate.byteLength / o.nExpert;
      for (let e = 0; e < o.nExpert; e++) {
        await w.writeTensorData(sink, await src.read(file.dataOffset + gate.offset + e * per, per), o.name);
        await w.writeTensorData(sink, await src.read(file.dataOffset + up.offset + e * per, per), o.name);
      }
    }
    await w.finish(sink);
  } finally {
    await src.close();
  }
  return { fusedLayers: [...fused.values()].map((f) => f.layer).sort((a, b) => a - b) };
}
