/**
 * Mixed-type models (issue 26): each MoE layer's routed gate, up and down in a type of its own, as the files big-model
 * releases publish are (a Q2_K_XL or Q3_K_M file holds IQ2_XXS, Q2_K, Q3_K, Q4_K and Q8_0 expert tensors side by
 * side). The model is written in F32 (make-model, the same per-tensor seeds), then llama.cpp's quantizer turns it
 * into the base type with one `--tensor-type` override per expert tensor (`--pure` otherwise: no mixture of its own),
 * with the synthetic importance matrix the IQ types need; every tensor's type is then checked against the plan.
 *
 *   await makeMixedModel(config, [{ gate: GGMLType.IQ2_XXS, up: GGMLType.Q2_K, down: GGMLType.Q8_0 }, …], 'm.gguf');
 *   npm run make-model -- --arch qwen3moe --layers 2 --type q8_0 --expert-types iq2_xxs/q2_k/q8_0,q4_k/q5_k/q6_k --out m.gguf
 *
 * `layerTypes[i]` is the i-th MoE layer's (repeating when there are fewer entries than MoE layers); a type whose
 * blocks do not fill a row falls back as llama.cpp's quantizer does (model-arch.ts rowType).
 */
import { execFile } from 'node:child_process';
import { mkdir, rename, stat, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { promisify } from 'node:util';
import { openFileSource } from '../gguf/node-io.ts';
import { GGMLType, quantTypeByName, typeName } from '../gguf/quant-types.ts';
import { readGGUF } from '../gguf/reader.ts';
import { writeSyntheticImatrix } from './imatrix.ts';
import { LLAMA_QUANTIZE } from './llama-quantized.ts';
import { makeModel, type MadeModel } from './make-model.ts';
import { planModel, rowType } from './model-arch.ts';
import type { ModelConfig, ModelPlan } from './model-types.ts';
import { buildVocabulary } from './tokenizer.ts';

const run = promisify(execFile);

/** One MoE layer's routed expert types. */
export interface ExpertTypes {
  gate: GGMLType;
  up: GGMLType;
  down: GGMLType;
}

const MATRICES = ['gate', 'up', 'down'] as const;
/** A bound on one quantizer run, as tools/llama-quantized.ts's. */
const QUANTIZE_TIMEOUT_MS = 600_000;

/** The expert tensor of `layer`'s `m` as the generator names it (split gate and up; a fused gate_up is not mixed). */
const expertTensor = (layer: number, m: (typeof MATRICES)[number]): string => `blk.${layer}.ffn_${m}_exps.weight`;

/**
 * The plan of `config` (its `type` the base of every other matrix) with each MoE layer's expert tensors in the types
 * of `layerTypes`. Throws when a layer has no split gate, up and down (a fused gate_up, or a family whose experts
 * the generator names otherwise).
 */
export function planMixedModel(config: ModelConfig, layerTypes: readonly ExpertTypes[]): ModelPlan {
  if (layerTypes.length === 0) throw new RangeError('planMixedModel: no layer types');
  const plan = planModel(config, buildVocabulary().tokens.length);
  const byName = new Map(plan.tensors.map((t) => [t.name, t]));
  plan.moeLayers.forEach((layer, i) => {
    const types = layerTypes[i % layerTypes.length] as ExpertTypes;
    for (const m of MATRICES) {
      const t = byName.get(expertTensor(layer, m));
      if (!t) throw new RangeError(`planMixedModel: ${config.arch} has no ${expertTensor(layer, m)} to give a type of its own`);
      t.type = rowType(types[m], t.dims[0] as number);
    }
  });
  return plan;
}

/** Writes the mixed model to `path` (atomically). The base type must be one llama.cpp quantizes (overrides apply only then). */
export async function makeMixedModel(config: ModelConfig, layerTypes: readonly ExpertTypes[], path: string): Promise<MadeModel> {
  const plan = planMixedModel(config, layerTypes);
  const base = typeName(config.type);
  if (config.type === GGMLType.F32 || config.type === GGMLType.F16 || config.type === GGMLType.BF16) {
    throw new RangeError(`makeMixedModel: the base type must be quantized (llama.cpp applies --tensor-type only then), not ${base}`);
  }
  await mkdir(dirname(path), { recursive: true });
  const f32Path = `${path}.f32-${process.pid}`;
  const tmp = `${path}.part-${process.pid}`;
  const imatrix = `${path}.imatrix-${process.pid}`;
  const overrides = plan.moeLayers.flatMap((layer) =>
    MATRICES.map((m) => {
      const t = plan.tensors.find((x) => x.name === expertTensor(layer, m)) as { type: GGMLType };
      return ['--tensor-type', `^${expertTensor(layer, m).replaceAll('.', '\\.')}$=${typeName(t.type).toLowerCase()}`];
    }),
  );
  let f32: MadeModel;
  try {
    f32 = await makeModel({ ...config, type: GGMLType.F32 }, f32Path);
    await writeSyntheticImatrix(f32Path, imatrix);
    const args = ['--pure', '--imatrix', imatrix, ...overrides.flat(), f32Path, tmp, base, '2'];
    try {
      await run(LLAMA_QUANTIZE, args, { timeout: QUANTIZE_TIMEOUT_MS, maxBuffer: 64 << 20 });
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      const tail = (err.stderr ?? '').trim().split('\n').slice(-5).join('\n');
      throw new Error(`linkcpp-quantize (mixed, base ${base}) failed: ${err.message.split('\n')[0]}\n${tail}`);
    }
    await checkTypes(tmp, plan);
  } catch (e) {
    await unlink(tmp).catch(() => undefined);
    throw e;
  } finally {
    await unlink(f32Path).catch(() => undefined);
    await unlink(imatrix).catch(() => undefined);
  }
  const bytes = (await stat(tmp)).size;
  await rename(tmp, path);
  return { ...f32, path, plan, bytes };
}

/** Throws naming the first tensor of the file at `path` whose type is not the plan's. */
async function checkTypes(path: string, plan: ModelPlan): Promise<void> {
  const src = await openFileSource(path);
  try {
    const file = await readGGUF(src);
    const got = new Map(file.tensors.map((t) => [t.name, t.type]));
    for (const t of plan.tensors) {
      const g = got.get(t.name);
      if (g !== t.type) {
        throw new Error(`mixed model: tensor ${t.name} is ${g === undefined ? 'missing' : typeName(g)}, the plan says ${typeName(t.type)}`);
      }
    }
    if (got.size !== plan.tensors.length) throw new Error(`mixed model: ${got.size} tensors, the plan has ${plan.tensors.length}`);
  } finally {
    await src.close();
  }
}

/**
 * `--expert-types`' text: MoE layers separated by commas, each `gate/up/down` by ggml name ("iq2_xxs/q2_k/q8_0"), or
 * one name for all three. Throws naming what it cannot read.
 */
export function parseExpertTypes(text: string): ExpertTypes[] {
  return text.split(',').map((layer) => {
    const names = layer.split('/');
    if (names.length !== 1 && names.length !== 3) throw new RangeError(`--expert-types: "${layer}" is not gate/up/down nor one type`);
    const types = names.map((n) => {
      const info = quantTypeByName(n.trim());
      if (!info) throw new RangeError(`--expert-types: unknown type "${n}"`);
      return info.type;
    });
    const [gate, up = gate, down = gate] = types as [GGMLType, GGMLType?, GGMLType?];
    return { gate, up, down };
  });
}
