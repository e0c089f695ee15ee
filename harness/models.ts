/**
 * Generated test models, cached in .cache/models by (config, generator source) so reruns reuse them.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { GGMLType } from '../gguf/quant-types.ts';
import { makeModel } from '../tools/make-model.ts';
import { type ModelConfig, defaultConfig } from '../tools/model-arch.ts';
import { buildVocabulary } from '../tools/tokenizer.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
export const MODEL_CACHE = join(root, '.cache', 'models');

function generatorDigest(): string {
  const h = createHash('sha256');
  for (const dir of ['tools', 'gguf']) {
    for (const f of readdirSync(join(root, dir)).sort()) h.update(f).update(readFileSync(join(root, dir, f)));
  }
  return h.digest('hex').slice(0, 12);
}

let digest: string | undefined;

export interface TestModel {
  path: string;
  config: ModelConfig;
  /** Byte tokens that are not valid UTF-8 alone: banned in generation so llama-server's JSON stays valid. */
  ban: number[];
}

/** Where testModel keeps `config`'s model: MODEL_CACHE/<arch>-<key>, the key a digest of the config and the generator. */
export function modelCachePath(config: ModelConfig): string {
  digest ??= generatorDigest();
  const key = createHash('sha256').update(JSON.stringify(config)).update(digest).digest('hex').slice(0, 16);
  return join(MODEL_CACHE, `${config.arch}-${key}.gguf`);
}

export async function testModel(partial: Partial<ModelConfig> & Pick<ModelConfig, 'arch'>): Promise<TestModel> {
  const config = defaultConfig(partial);
  const path = modelCachePath(config);
  if (!existsSync(path)) await makeModel(config, path);
  return { path, config, ban: buildVocabulary().nonUtf8Ids };
}

/** A model generated before, at `path`, taken as the config says it was made (not read back to check). */
export function testModelAt(path: string, partial: Partial<ModelConfig> & Pick<ModelConfig, 'arch'>): TestModel {
  if (!existsSync(path)) throw new Error(`${path}: no such model file`);
  return { path, config: defaultConfig(partial), ban: buildVocabulary().nonUtf8Ids };
}

/**
 * Top-2 of 8 Q8_0 experts, 3 layers, the loud expert branch: a row's sum has at most two terms, so any split of its
 * pairs between the coordinator and workers adds up bit for bit (hub-dispatcher's and dispatch-v3's linkcpp cases).
 */
export const TOP2_OF_8 = {
  arch: 'qwen3moe' as const,
  layers: 3,
  nEmbd: 64,
  ff: 64,
  sharedFf: 64,
  nExpert: 8,
  nExpertUsed: 2,
  type: GGMLType.Q8_0,
  seed: 23,
  expertScale: 2,
};

/**
 * One MoE layer (deepseek's layer 0 is dense) of 16 Q8_0 experts, small: the peer-slice tests (peers-chromium,
 * netlab-turn) give every volunteer the same slice, layer 1, experts [0, 16).
 */
export const ONE_MOE_LAYER = {
  arch: 'deepseek' as const,
  layers: 2,
  nEmbd: 256,
  ff: 256,
  sharedFf: 256,
  nExpert: 16,
  nExpertUsed: 2,
  type: GGMLType.Q8_0,
  seed: 41,
  expertScale: 2,
};
