/**
 * Mixed-type test models (tools/mixed-model.ts), cached beside testModel's in .cache/models: the same key (config and
 * generator source) with the layer types appended.
 *
 *   const m = await testMixedModel({ arch: 'qwen3moe', layers: 2, type: GGMLType.Q8_0 }, [{ gate, up, down }, …]);
 */
import { existsSync } from 'node:fs';
import { GGMLType, typeName } from '../gguf/quant-types.ts';
import { type ExpertTypes, makeMixedModel } from '../tools/mixed-model.ts';
import { type ModelConfig, defaultConfig } from '../tools/model-arch.ts';
import { buildVocabulary } from '../tools/tokenizer.ts';
import { modelCachePath, type TestModel } from './models.ts';

/** `gate/up/down` of each layer, joined: "IQ2_XXS/Q2_K/Q8_0,Q4_K/Q4_K/Q6_K". */
export function describeExpertTypes(layerTypes: readonly ExpertTypes[]): string {
  return layerTypes.map((t) => [t.gate, t.up, t.down].map(typeName).join('/')).join(',');
}

export async function testMixedModel(
  partial: Partial<ModelConfig> & Pick<ModelConfig, 'arch'>,
  layerTypes: readonly ExpertTypes[],
): Promise<TestModel & { layerTypes: readonly ExpertTypes[] }> {
  const config = defaultConfig(partial);
  const key = describeExpertTypes(layerTypes).toLowerCase().replaceAll('/', '-').replaceAll(',', '_');
  const path = modelCachePath(config).replace(/\.gguf$/, `-mixed-${key}.gguf`);
  if (!existsSync(path)) await makeMixedModel(config, layerTypes, path);
  return { path, config, ban: buildVocabulary().nonUtf8Ids, layerTypes };
}

const { Q2_K, Q3_K, Q5_K, Q5_0, IQ2_XXS, IQ3_XXS, IQ4_XS, IQ4_NL, MXFP4 } = GGMLType;

/**
 * The mixed model npm test serves end to end (families-e2e's qwen3moe with per-expert scales, three MoE layers, the
 * rest of the model Q4_K): nine expert types, low bits first as a dynamic quant puts them — the Q2_K_XL-like layer
 * (IQ2_XXS gate, Q2_K up, Q3_K down), then IQ3_XXS/IQ4_XS/Q5_K and MXFP4/IQ4_NL/Q5_0.
 */
export const MIXED_E2E_LAYERS: readonly ExpertTypes[] = [
  { gate: IQ2_XXS, up: Q2_K, down: Q3_K },
  { gate: IQ3_XXS, up: IQ4_XS, down: Q5_K },
  { gate: MXFP4, up: IQ4_NL, down: Q5_0 },
];
