/**
 * The demo model `npm start` generates and serves (scripts/start.ts): a tiny qwen3moe of four MoE layers. Tests that
 * check what a user of `npm start` sees use the same configuration (test/integration/multi-slice-e2e.test.ts).
 */
import { GGMLType } from '../gguf/quant-types.ts';
import { type ModelConfig, defaultConfig } from './model-arch.ts';

export const DEMO_MODEL_CONFIG: Readonly<ModelConfig> = Object.freeze(
  defaultConfig({ arch: 'qwen3moe', layers: 4, nEmbd: 256, nExpert: 16, nExpertUsed: 4, ff: 256, type: GGMLType.Q8_0, seed: 7 }),
);
