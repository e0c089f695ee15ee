/**
 * The mixed model npm test serves end to end (families-e2e's qwen3moe with per-expert scales, its experts in
 * harness/mixed-models.ts MIXED_E2E_LAYERS): the generator writes each MoE layer's gate, up and down in its own type
 * (tools/mixed-model.ts checks every tensor against the plan); a slice of each layer carries each tensor in its own
 * type; the hub's registry measures each layer's bytes per expert from those types; and the market on this file
 * offers a layer only to a volunteer that reads its three types, refusing the others with type-unsupported. The model
 * is cached with families-e2e's (same config, same key), so this costs its generation once.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MIXED_E2E_LAYERS, testMixedModel } from '../../harness/mixed-models.ts';
import { planExpertSlice } from '../../gguf/expert-slice.ts';
import { readGGUFFile } from '../../gguf/node-io.ts';
import { GGMLType, rowByteSize, typeName } from '../../gguf/quant-types.ts';
import { describeModel } from '../../hub/registry.ts';
import { chooseAssignment } from '../../hub/market/assign.ts';
import { modelDemand } from '../../hub/market/demand.ts';
import { parseExpertTypes } from '../../tools/mixed-model.ts';

/** families-e2e's config for its per-expert-scales case, where the mixed types go. */
const CONFIG = {
  arch: 'qwen3moe' as const,
  layers: 3,
  nEmbd: 256,
  ff: 256,
  sharedFf: 256,
  nExpert: 8,
  nExpertUsed: 2,
  type: GGMLType.Q4_K,
  seed: 33,
  expertScale: 2,
  expertScales: true,
};

test('a mixed model: every layer its own types, in its slices and in the market', { timeout: 300_000 }, async () => {
  const m = await testMixedModel(CONFIG, MIXED_E2E_LAYERS);
  const file = await readGGUFFile(m.path);
  const info = describeModel(m.path, file);
  assert.deepEqual(info.moeLayers, [0, 1, 2]);
  for (const [l, types] of MIXED_E2E_LAYERS.entries()) {
    // A slice of the layer: its three tensors each in its own type (byte copies), its scales beside them.
    const plan = planExpertSlice(file, l, 2, 5);
    assert.deepEqual(plan.types, types, `layer ${l}'s slice`);
    assert.equal(plan.scales.length, 3, `layer ${l}'s slice carries the per-expert scales`);
    // The registry's bytes per expert: each matrix at its own type's bytes per block, plus the three f32 scales.
    const bytes = 256 * (rowByteSize(types.gate, 256) + rowByteSize(types.up, 256) + rowByteSize(types.down, 256)) + 12;
    assert.equal(info.layerBytesPerExpert?.[l], bytes, `layer ${l}'s bytes per expert`);
    assert.deepEqual(info.layerTypes?.[l], { gate: typeName(types.gate), up: typeName(types.up), down: typeName(types.down) });
  }
  // The market on this file, before anyone holds a slice (target 1 everywhere).
  const demand = modelDemand(info, () => new Int32Array(8), 1, true, false);
  const shapes = new Map([[info.model, info]]);
  // Its layers are scaled (per-expert scales): volunteers that compute them.
  const offer = (types?: string[]) => chooseAssignment([demand], shapes, { variants: ['silu', 'scale'], ...(types && { types }) });
  const reads = (l: number): string[] => Object.values(info.layerTypes?.[l] ?? {});
  const table: Array<[string, string[] | undefined, number | RegExp]> = [
    ['lists no types: layer 0, as before issue 26', undefined, 0],
    ['reads layer 0 only', reads(0), 0],
    ['reads layer 2 only', reads(2), 2],
    ['reads every type but IQ2_XXS', [...reads(0), ...reads(1), ...reads(2)].filter((t) => t !== 'IQ2_XXS'), 1],
    ['reads Q4_K only', ['Q4_K'], /layer 0: gate IQ2_XXS, up Q2_K, down Q3_K\); it reads Q4_K/],
  ];
  for (const [name, types, want] of table) {
    const a = offer(types);
    if (typeof want === 'number') {
      assert.ok(a.assigned && a.layer === want && a.experts[1] === 8, `${name}: ${JSON.stringify(a)}`);
    } else {
      assert.ok(!a.assigned && a.code === 'type-unsupported', `${name}: ${JSON.stringify(a)}`);
      assert.match(a.reason, want, name);
    }
  }
});

test('parseExpertTypes: gate/up/down per layer, or one type for all three; unknown names refused', () => {
  assert.deepEqual(parseExpertTypes('iq2_xxs/q2_k/Q8_0,q4_k'), [
    { gate: GGMLType.IQ2_XXS, up: GGMLType.Q2_K, down: GGMLType.Q8_0 },
    { gate: GGMLType.Q4_K, up: GGMLType.Q4_K, down: GGMLType.Q4_K },
  ]);
  assert.throws(() => parseExpertTypes('q4_k/q4_k'), /gate\/up\/down/);
  assert.throws(() => parseExpertTypes('q4_k/q9_z/q4_k'), /unknown type "q9_z"/);
});
