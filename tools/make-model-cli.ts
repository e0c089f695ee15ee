/**
 * `npm run make-model`: the command line of tools/make-model.ts (makeModel) and tools/mixed-model.ts (makeMixedModel,
 * `--expert-types`). Apart from both so that neither library imports the other's command line.
 */
import { parseArgs } from 'node:util';
import { quantTypeByName } from '../gguf/quant-types.ts';
import { makeModel } from './make-model.ts';
import { type ExpertTypes, makeMixedModel, parseExpertTypes } from './mixed-model.ts';
import { ARCHITECTURES, type ArchName, type ModelConfig, defaultConfig } from './model-arch.ts';
import { UNGENERATED } from './model-arch-kin.ts';
const USAGE = `usage: npm run make-model -- --arch <${ARCHITECTURES.join('|')}> [--layers N] [--n-embd E]
       [--n-expert X] [--n-expert-used K] [--ff F] [--shared-ff S] [--dense-leading D] [--n-head H] [--n-head-kv H]
       [--q-lora-rank R] [--kv-lora-rank R] [--expert-groups G] [--expert-groups-used U] [--expert-scales]
       [--swiglu-limit L[,L...]] [--hash-layers N]
       [--type f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k|mxfp4|iq4_nl|iq4_xs|iq2_xxs] [--seed S] [--expert-scale A] --out file.gguf

  --expert-scale A   amplitude of the routed experts' down projection relative to unit variance (default 0.1: a quiet
                     expert branch; 1 or more makes errors in the experts visible in the logits)
  --expert-types G/U/D[,...]
                     a mixed model (tools/mixed-model.ts): each MoE layer's routed gate, up and down in the types
                     named (one type for all three, or gate/up/down; layers in order, repeating), e.g.
                     iq2_xxs/q2_k/q3_k,q4_k/q4_k/q6_k; --type is the rest of the model's (a quantized one);
                     written through linkcpp-quantize
  --q-lora-rank, --kv-lora-rank
                     deepseek2's latent-attention ranks (default n-embd / 2; a q-lora-rank of 0 gives one attn_q)
  --expert-groups, --expert-groups-used
                     deepseek2's grouped top-k (default 4 and 2 when n-expert is a multiple of 4; 0 turns it off)
  --expert-scales    per-expert scale tensors ffn_{gate,up,down}_exps.scale (F32, in [0.5, 2)) for qwen3moe, llama,
                     qwen3next and qwen35moe, whose graphs multiply each expert's products by them
  --swiglu-limit L   step35's and deepseek4's clamped SwiGLU: one limit for every layer, or one per layer
                     (comma-separated; 0 leaves a layer unclamped). Default: step35 1.5 + 0.25·layer on even layers, 0
                     on odd ones; deepseek4 1.5, 1.75, 2 repeating (every layer clamped)
  --hash-layers N    deepseek4: the first N layers pick experts by token id (ffn_gate_tid2eid, I32; default 0)`;

async function main(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      arch: { type: 'string' },
      layers: { type: 'string' },
      'n-embd': { type: 'string' },
      'n-expert': { type: 'string' },
      'n-expert-used': { type: 'string' },
      ff: { type: 'string' },
      'shared-ff': { type: 'string' },
      'dense-leading': { type: 'string' },
      'n-head': { type: 'string' },
      'n-head-kv': { type: 'string' },
      'expert-types': { type: 'string' },
      type: { type: 'string', default: 'f32' },
      seed: { type: 'string', default: '1' },
      'expert-scale': { type: 'string' },
      'q-lora-rank': { type: 'string' },
      'kv-lora-rank': { type: 'string' },
      'expert-groups': { type: 'string' },
      'expert-groups-used': { type: 'string' },
      'expert-scales': { type: 'boolean' },
      'swiglu-limit': { type: 'string' },
      'hash-layers': { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const missing = values.arch === undefined ? undefined : UNGENERATED[values.arch];
  if (missing !== undefined) {
    console.error(`make-model: ${values.arch} is not generated yet: the generator lacks ${missing}`);
    return 2;
  }
  if (!values.arch || !(ARCHITECTURES as readonly string[]).includes(values.arch) || !values.out) {
    console.error(USAGE);
    return 2;
  }
  const type = quantTypeByName(values.type ?? 'f32');
  if (!type) {
    console.error(`unknown --type ${values.type}\n${USAGE}`);
    return 2;
  }
  const num = (v: string | undefined): number | undefined => (v === undefined ? undefined : Number(v));
  const partial: Partial<ModelConfig> & { arch: ArchName } = { arch: values.arch as ArchName, type: type.type };
  const set = <K extends keyof ModelConfig>(k: K, v: ModelConfig[K] | undefined): void => {
    if (v !== undefined) partial[k] = v;
  };
  set('layers', num(values.layers));
  set('nEmbd', num(values['n-embd']));
  set('nExpert', num(values['n-expert']));
  set('nExpertUsed', num(values['n-expert-used']));
  set('ff', num(values.ff));
  set('sharedFf', num(values['shared-ff']));
  set('denseLeading', num(values['dense-leading']));
  set('nHead', num(values['n-head']));
  set('nHeadKv', num(values['n-head-kv']));
  set('seed', num(values.seed));
  set('expertScale', num(values['expert-scale']));
  set('qLoraRank', num(values['q-lora-rank']));
  set('kvLoraRank', num(values['kv-lora-rank']));
  set('expertGroups', num(values['expert-groups']));
  set('expertGroupsUsed', num(values['expert-groups-used']));
  set('expertScales', values['expert-scales']);
  set('hashLayers', num(values['hash-layers']));
  if (values['swiglu-limit'] !== undefined) {
    const limits = values['swiglu-limit'].split(',').map(Number);
    // One limit: every layer's (the layer count is known once the rest of the config is).
    partial.swigluLimits = limits.length === 1 ? Array(partial.layers ?? defaultConfig(partial).layers).fill(limits[0]) : limits;
  }
  let mixed: ExpertTypes[] | undefined;
  try {
    mixed = values['expert-types'] === undefined ? undefined : parseExpertTypes(values['expert-types']);
  } catch (err) {
    console.error(`make-model: ${(err as Error).message}`);
    return 2;
  }
  const t0 = performance.now();
  try {
    const made = mixed
      ? await makeMixedModel(defaultConfig(partial), mixed, values.out)
      : await makeModel(defaultConfig(partial), values.out);
    const ms = performance.now() - t0;
    console.log(
      `wrote ${made.path}: ${values.arch} ${type.name}, ${made.plan.config.layers} layers (MoE: ${made.plan.moeLayers.join(',')}), ` +
        `${made.plan.tensors.length} tensors, ${(made.bytes / 1e6).toFixed(1)} MB in ${(ms / 1000).toFixed(1)} s`,
    );
    return 0;
  } catch (err) {
    console.error(`make-model: ${(err as Error).message}`);
    return 1;
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await main(process.argv.slice(2));
}
