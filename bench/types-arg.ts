/**
 * The benchmarks' `--types` option: a comma list of ggml type names (as GGUF and llama.cpp spell them, `Q4_K,IQ2_XXS`),
 * or `all`, resolved against the types an engine reads (KERNEL_TYPES for the WGSL kernels, WASM_FALLBACK_TYPES for
 * the wasm fallback), so a type added to an engine joins its bench by itself. Q4_K, the type every earlier figure
 * used, comes first; the rest in the engine's order. Pure, browser-safe.
 *
 *   benchTypes(undefined, WASM_FALLBACK_TYPES.types)        // [Q4_K, F32, F16, …] every type the fallback reads
 *   benchTypes('q8_0, Q4_K', KERNEL_TYPES.types)            // [Q4_K, Q8_0]
 *   benchTypes('IQ9', KERNEL_TYPES.types)                   // throws: names the unknown type and the known ones
 */
import { GGMLType, typeName } from '../gguf/quant-types.ts';

/** The type every bench led with before the others joined: results stay comparable with the earlier tables. */
export const LEAD_TYPE = GGMLType.Q4_K;

/**
 * The types `value` names (undefined, '' or 'all': every type of `known`), Q4_K first, the others in `known`'s order,
 * each once. Throws an Error naming the types that are not ggml names or that `known` does not hold.
 */
export function benchTypes(value: string | undefined, known: readonly GGMLType[]): GGMLType[] {
  const order = (ts: readonly GGMLType[]): GGMLType[] => [
    ...(ts.includes(LEAD_TYPE) ? [LEAD_TYPE] : []),
    ...known.filter((t) => t !== LEAD_TYPE && ts.includes(t)),
  ];
  const names = (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (names.length === 0 || (names.length === 1 && names[0]!.toLowerCase() === 'all')) return order(known);
  const byName = new Map(known.map((t) => [typeName(t).toUpperCase(), t]));
  const bad = names.filter((n) => !byName.has(n.toUpperCase()));
  if (bad.length) throw new Error(`--types: ${bad.join(', ')} not among the types read here: ${known.map(typeName).join(', ')} (or all)`);
  return order(names.map((n) => byName.get(n.toUpperCase())!));
}
