/**
 * The benchmarks' `--types` parser (bench/types-arg.ts): every type an engine reads by default, Q4_K first, names
 * case-insensitive and each once, and a name the engine does not read refused with the list of those it does.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { GGMLType } from '../../gguf/quant-types.ts';
import { benchTypes } from '../../bench/types-arg.ts';

const KNOWN = [GGMLType.F32, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.IQ2_XXS];

test('--types: all by default, Q4_K first; a list in the engine order, each once; unknown names refused', () => {
  const all = [GGMLType.Q4_K, GGMLType.F32, GGMLType.Q8_0, GGMLType.IQ2_XXS];
  for (const v of [undefined, '', 'all', ' ALL ']) assert.deepEqual(benchTypes(v, KNOWN), all, String(v));
  assert.deepEqual(benchTypes('iq2_xxs, Q8_0,q8_0', KNOWN), [GGMLType.Q8_0, GGMLType.IQ2_XXS]);
  assert.deepEqual(benchTypes('IQ2_XXS,Q4_K', KNOWN), [GGMLType.Q4_K, GGMLType.IQ2_XXS]);
  assert.throws(() => benchTypes('Q4_K,IQ1_M,Q9', KNOWN), /IQ1_M, Q9 not among the types read here: F32, Q8_0, Q4_K, IQ2_XXS/);
});
