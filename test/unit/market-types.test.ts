/**
 * Tensor types in the market (issue 26): each MoE layer's bytes per expert from its own tensors' types, so a budget
 * buys the right number of experts at 1.56–2.06 bits per weight; and a layer whose gate, up or down a volunteer does
 * not read is never offered to it (`type-unsupported`, the type named). The shapes come from describeModel over a
 * GGUF header built here, so the registry's accounting is what is tested; the bytes per block are written out by hand
 * (ggml-common.h), not read from gguf/quant-types.ts.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { describeModel } from '../../hub/registry.ts';
import { bytesForExpertOf, chooseAssignment, deviceFit, nextSliceRequest, type VolunteerRequest } from '../../hub/market/assign.ts';
import { modelDemand } from '../../hub/market/demand.ts';
import type { ModelDemand, ModelShape } from '../../hub/market/types.ts';
import { GGMLType, tensorByteSize } from '../../gguf/quant-types.ts';
import { GGUFValueType, type GGUFFile, type GGUFTensorInfo, type GGUFValue } from '../../gguf/types.ts';
import { readsLayer, TENSOR_TYPE_NAMES, tensorTypeNames, unreadTensors } from '../../protocol/tensor-types.ts';
import { computedTypes } from '../../volunteer/engine-open.ts';
import { KERNEL_TYPES } from '../../shaders/expert-ffn.ts';
import { WASM_FALLBACK_TYPES } from '../../shaders/wasm/fallback.ts';
import { parseClientMessage, encodeClientMessage, VOLUNTEER_LIMITS, type ClientMessage } from '../../protocol/channel/index.ts';

const N_EMBD = 256;
const FF = 512;
const N_EXPERT = 16;

/** Bits per weight of each type, from ggml-common.h's block structs (bytes per block × 8 / elements per block). */
const BITS: Partial<Record<keyof typeof GGMLType, number>> = {
  IQ1_S: (50 * 8) / 256, // 1.5625
  IQ2_XXS: (66 * 8) / 256, // 2.0625
  Q2_K: (84 * 8) / 256, // 2.625
  Q8_0: (34 * 8) / 32, // 8.5
  F16: 16,
};

type Types = { gate: GGMLType; up: GGMLType; down: GGMLType };

/** A qwen3moe header: layer 0 dense, layers 1.. MoE with the given types (the data offsets are never read). */
function header(layers: Types[]): GGUFFile {
  const str = (value: string): GGUFValue => ({ type: GGUFValueType.STRING, value }) as GGUFValue;
  const u32 = (value: number): GGUFValue => ({ type: GGUFValueType.UINT32, value }) as GGUFValue;
  const metadata = new Map<string, GGUFValue>([
    ['general.architecture', str('qwen3moe')],
    ['qwen3moe.block_count', u32(layers.length + 1)],
    ['qwen3moe.expert_count', u32(N_EXPERT)],
    ['qwen3moe.expert_used_count', u32(2)],
    ['qwen3moe.embedding_length', u32(N_EMBD)],
  ]);
  const tensors: GGUFTensorInfo[] = [];
  layers.forEach((t, i) => {
    const l = i + 1;
    const add = (name: string, type: GGMLType, row: number, rows: number): void => {
      tensors.push({
        name: `blk.${l}.${name}.weight`,
        dims: [row, rows, N_EXPERT],
        type,
        offset: 0,
        byteLength: tensorByteSize(type, row, row * rows * N_EXPERT),
      });
    };
    add('ffn_gate_exps', t.gate, N_EMBD, FF);
    add('ffn_up_exps', t.up, N_EMBD, FF);
    add('ffn_down_exps', t.down, FF, N_EMBD);
  });
  return { version: 3, alignment: 32, metadata, tensors, dataOffset: 0, fileSize: 0 };
}

const all = (t: GGMLType): Types => ({ gate: t, up: t, down: t });
const want = (s: ModelShape): ModelDemand => modelDemand(s, () => new Int32Array(N_EXPERT), 1, true, false);

test('bytes per expert from each type: a budget buys floor(budget / (3 × ff × n_embd × bits / 8)) experts', () => {
  for (const name of ['IQ1_S', 'IQ2_XXS', 'Q2_K', 'Q8_0', 'F16'] as const) {
    const shape = describeModel('/m.gguf', header([all(GGMLType[name])]));
    const bits = BITS[name] as number;
    const perExpert = (3 * FF * N_EMBD * bits) / 8;
    assert.equal(shape.bytesPerExpert, perExpert, name);
    assert.equal(shape.maxMatrixBytesPerExpert, perExpert / 3, name);
    assert.deepEqual(shape.layerTypes?.[1], { gate: name, up: name, down: name });
    assert.equal(shape.layerBytesPerExpert, undefined, `${name}: one size for every layer`);
    // 5.5 experts' worth: 5 experts, whatever the type.
    const a = chooseAssignment([want(shape)], new Map([[shape.model, shape]]), { device: { memoryBudgetBytes: 5.5 * perExpert } });
    assert.ok(a.assigned, name);
    assert.deepEqual(a.experts, [0, 5], name);
  }
  // The same budget at 1.56 and at 2.06 bits per weight: IQ1_S buys 66/50 as many experts as IQ2_XXS.
  const budget = 3 * FF * N_EMBD * 10; // 80 bits per weight of one expert's 3 matrices
  const experts = (t: GGMLType): number => {
    const s = describeModel('/m.gguf', header([all(t)]));
    const fit = deviceFit(s, { memoryBudgetBytes: budget }, 1);
    return fit.fits ? fit.experts : 0;
  };
  assert.equal(experts(GGMLType.IQ1_S), Math.floor(80 / 1.5625));
  assert.equal(experts(GGMLType.IQ2_XXS), Math.floor(80 / 2.0625));
  assert.equal(experts(GGMLType.Q4_K), Math.floor(80 / 4.5));
});

test('a mixed model: each layer its own bytes per expert, the budget charged per layer held', () => {
  // Layer 1 as a Q2_K_XL file's: gate IQ2_XXS, up Q2_K, down Q8_0; layer 2 all F16.
  const shape = describeModel(
    '/mixed.gguf',
    header([{ gate: GGMLType.IQ2_XXS, up: GGMLType.Q2_K, down: GGMLType.Q8_0 }, all(GGMLType.F16)]),
  );
  const rowBits = (bits: number): number => (FF * N_EMBD * bits) / 8;
  const l1 = rowBits(BITS.IQ2_XXS as number) + rowBits(BITS.Q2_K as number) + rowBits(BITS.Q8_0 as number);
  const l2 = 3 * rowBits(16);
  assert.deepEqual(shape.layerTypes, { 1: { gate: 'IQ2_XXS', up: 'Q2_K', down: 'Q8_0' }, 2: { gate: 'F16', up: 'F16', down: 'F16' } });
  assert.deepEqual(shape.layerBytesPerExpert, { 1: l1, 2: l2 });
  assert.equal(shape.bytesPerExpert, l2, 'the model-wide figure is the largest layer');
  assert.equal(shape.maxMatrixBytesPerExpert, rowBits(16));
  assert.equal(bytesForExpertOf(shape, 1), l1);
  assert.equal(bytesForExpertOf(shape, 2), l2);

  const shapes = new Map([[shape.model, shape]]);
  // A budget of 6 F16 experts (288 bits a weight of one matrix): the whole of layer 1 (16 × 13.19 = 211) first.
  const budget = 6 * l2;
  const first = chooseAssignment([want(shape)], shapes, { device: { memoryBudgetBytes: budget } });
  assert.ok(first.assigned);
  assert.deepEqual([first.layer, ...first.experts], [1, 0, 16]);
  // Its next slice: the budget less 16 layer-1 experts (not 16 F16 ones, which would leave nothing).
  const next = nextSliceRequest({ device: { memoryBudgetBytes: budget } }, { model: shape.model, ranges: [[1, 0, 16]] }, (l) =>
    bytesForExpertOf(shape, l),
  );
  assert.equal(next.device?.memoryBudgetBytes, budget - 16 * l1);
  const second = chooseAssignment([want(shape)], shapes, next);
  assert.ok(second.assigned);
  assert.deepEqual([second.layer, ...second.experts], [2, 0, Math.floor((budget - 16 * l1) / l2)]);
  // Charged at the model-wide (largest) size instead, the same holder would be told its budget is spent.
  const flat = nextSliceRequest(
    { device: { memoryBudgetBytes: budget } },
    { model: shape.model, ranges: [[1, 0, 16]] },
    shape.bytesPerExpert,
  );
  assert.equal(flat.device?.memoryBudgetBytes, 0);
  // A budget below one F16 expert but above one layer-1 expert: layer 1 only.
  const small = chooseAssignment([want(shape)], shapes, { device: { memoryBudgetBytes: l1 * 2 } });
  assert.ok(small.assigned);
  assert.deepEqual([small.layer, ...small.experts], [1, 0, 2]);
});

test('types: a layer is offered only to a volunteer that reads its gate, up and down; otherwise type-unsupported, naming them', () => {
  const mixed = describeModel(
    '/mixed.gguf',
    header([{ gate: GGMLType.IQ2_XXS, up: GGMLType.Q2_K, down: GGMLType.Q8_0 }, all(GGMLType.IQ1_S)]),
  );
  const shapes = new Map([[mixed.model, mixed]]);
  const table: Array<[string, VolunteerRequest, string | [number, number, number], RegExp?]> = [
    ['a client that lists no types: offered any (before issue 26)', {}, [1, 0, 16]],
    ['reads every type of layer 1', { types: ['IQ2_XXS', 'Q2_K', 'Q8_0'] }, [1, 0, 16]],
    ['reads IQ1_S only: layer 2', { types: ['IQ1_S'] }, [2, 0, 16]],
    ['lacks Q8_0 (down) and IQ1_S', { types: ['IQ2_XXS', 'Q2_K', 'Q4_K'] }, 'type-unsupported', /mixed layer 1: down Q8_0/],
    ['reads nothing', { types: [] }, 'type-unsupported', /gate IQ2_XXS, up Q2_K, down Q8_0\); it reads none/],
  ];
  for (const [name, req, expected, reason] of table) {
    const a = chooseAssignment([want(mixed)], shapes, req);
    if (typeof expected === 'string') {
      assert.equal(a.assigned ? 'assigned' : a.code, expected, name);
      if (!a.assigned && reason) assert.match(a.reason, reason, name);
    } else {
      assert.ok(a.assigned, name);
      assert.deepEqual([a.layer, ...a.experts], expected, name);
    }
  }
  // Layer 1 held by this volunteer already, layer 2 unreadable: nothing it can take is wanted.
  const held = { model: mixed.model, ranges: [[1, 0, 16]] as [number, number, number][] };
  const a = chooseAssignment([want(mixed)], shapes, { types: ['IQ2_XXS', 'Q2_K', 'Q8_0'], held });
  assert.equal(a.assigned ? 'assigned' : a.code, 'already-held');
});

test('tensor-types: names, readsLayer, unreadTensors', () => {
  assert.ok(TENSOR_TYPE_NAMES.includes('IQ2_XXS') && TENSOR_TYPE_NAMES.includes('F32') && !TENSOR_TYPE_NAMES.includes('0'));
  assert.deepEqual(tensorTypeNames([GGMLType.Q4_K, GGMLType.F32, 999]), ['F32', 'Q4_K']);
  const l = { gate: 'Q4_K', up: 'Q4_K', down: 'Q6_K' };
  assert.equal(readsLayer(undefined, l), true);
  assert.equal(readsLayer(['Q4_K', 'Q6_K'], l), true);
  assert.equal(readsLayer(['Q4_K'], l), false);
  assert.deepEqual(unreadTensors(['Q6_K'], l), ['gate Q4_K', 'up Q4_K']);
});

test("computedTypes: what every backend the client may serve with reads (the hello's types)", () => {
  const names = (t: { types: readonly number[] }): string[] => tensorTypeNames(t.types);
  const kernel = {} as WebAssembly.Module;
  const both = names({ types: KERNEL_TYPES.types.filter((t) => WASM_FALLBACK_TYPES.types.includes(t)) });
  assert.deepEqual(computedTypes({ backend: 'auto', wasmKernel: kernel, ort: null }, true), both);
  assert.deepEqual(computedTypes({ backend: 'webgpu', wasmKernel: kernel, ort: null }, true), names(KERNEL_TYPES));
  const wasm = computedTypes({ backend: 'auto', wasmKernel: kernel, ort: null }, false);
  assert.deepEqual(wasm, names(WASM_FALLBACK_TYPES));
  // Q4_1 and Q5_1 offered too: the kernel computes them as ggml does (Q8_1's f16 s for the mins, bit for bit).
  for (const t of ['Q4_1', 'Q5_1', 'Q5_0']) assert.ok(wasm.includes(t), t);
  assert.deepEqual(computedTypes({ backend: 'webgpu', wasmKernel: null, ort: null }, false), []);
  for (const t of ['F32', 'Q4_K', 'IQ2_XXS', 'Q2_K']) assert.ok(both.includes(t), t);
  assert.ok(!both.includes('TQ1_0'));
});

test('hello: types on the wire, unknown names dropped, capped', () => {
  const hello: ClientMessage = {
    type: 'hello',
    version: 1,
    token: 'v1.eyJ3IjoiQSIsImV4cCI6MX0.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ',
    workerId: 'w',
    device: { webgpu: false, adapter: null, limits: null, features: [], backend: null, gflops: null, memoryBudgetBytes: 0 },
    numerics: ['llama'],
    encodings: ['f32'],
    types: ['F32', 'Q4_K', 'IQ2_XXS'],
    model: '',
    maxExperts: 0,
    agent: '',
  };
  assert.deepEqual(parseClientMessage(encodeClientMessage(hello)), hello);
  const { types: _, ...none } = hello;
  assert.equal((parseClientMessage(encodeClientMessage(none)) as { types?: string[] }).types, undefined);
  const wire = JSON.parse(encodeClientMessage(hello) as string);
  wire.types = ['Q4_K', 'Q9_Z', 'q4_k', 'Q4_K'];
  assert.deepEqual((parseClientMessage(JSON.stringify(wire)) as { types?: string[] }).types, ['Q4_K']);
  wire.types = Array(VOLUNTEER_LIMITS.maxTypesListed + 1).fill('F32');
  assert.throws(() => parseClientMessage(JSON.stringify(wire)));
});
