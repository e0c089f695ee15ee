/**
 * The fair onnxruntime-web baseline of the kernel benchmark: the expert FFN of one call's routing as an ONNX graph that
 * computes only the routed (row, expert) pairs — the same pairs and flops as our kernels — from weights in the
 * smallest form the execution provider runs (ort-routed-weights.ts: MatMulNBits blocks for Q4_0 / Q4_K, and Q8_0 on
 * wasm; dequantized float32 otherwise).
 *
 * Which experts are routed and how many rows each gets is fixed when the graph is built (a benchmark repeats one
 * call); the rows, which rows go to which expert and the probs are inputs fed on every call, as ours uploads them:
 *
 *   inputs  x [T, nEmbd]; rows.e [n_e] (int64, for each routed expert e: the tokens of its pairs);
 *           perm [P] (int64: pair i of the call, token-major, is row perm[i] of the experts' outputs); p [P, 1] probs
 *   per routed expert e:  x_e = Gather(x, rows.e)                                  [n_e, nEmbd]
 *                         g | u = x_e · [G_e; U_e]ᵀ  (one product, N = 2·ff, then Split)
 *                         y_e = (Sigmoid(g) ⊙ g ⊙ u) · D_eᵀ                    [n_e, nEmbd]
 *   y = ReduceSum(Reshape(Gather(Concat(y_e…), perm) ⊙ p, [T, nUsed, nEmbd]), axis 1)
 *
 * That is what ORT gets to do its best with: static shapes, gate and up fused, no unrouted expert, the weights read
 * once per expert and call (as our batched kernels do; our decode kernels read them once per pair). It is the shape
 * a real ORT-based worker could not quite have — it would need one graph per routing or dynamic shapes — so the
 * comparison leans toward ORT. compute() refuses a routing other than the one the graph was built for.
 *
 * @example
 *   const fair = await OrtRoutedExperts.create(ort, slice, call, nTokens, nUsed, { ep: 'webgpu' });
 *   const out = await fair.compute(call.rows, call.ids, call.probs, nTokens, nUsed);
 *   await fair.dispose();
 */
import { type GGMLType, rowByteSize, typeName } from '../gguf/quant-types.ts';
import type { OrtModuleLike, OrtSessionLike, OrtTensorLike } from '../shaders/ort/fallback.ts';
import {
  DataType,
  Message,
  floatTensor,
  graphMessage,
  int64Tensor,
  node,
  valueInfo,
  type DataTypeValue,
  type NodeSpec,
  type TensorSpec,
} from '../shaders/ort/onnx-builder.ts';
import type { ExpertSlice } from '../shaders/slice.ts';
import {
  NBITS_BLOCK,
  ortMatrixBytes,
  ortWeightForm,
  toOrtMatrix,
  type OrtEp,
  type OrtMatrix,
  type OrtWeightForm,
} from './ort-routed-weights.ts';

/** onnx TensorProto.DataType UINT8 (shaders/ort/onnx-builder.ts writes FLOAT and INT64 only; its encoder takes any). */
const UINT8 = 2 as unknown as DataTypeValue;
/** The contrib operators' domain and the opset versions the graph imports. */
const MS_DOMAIN = 'com.microsoft';
const ONNX_OPSET = 17;

/** An onnxruntime module that also makes int64 tensors (onnxruntime-web and -node do). */
export interface OrtRoutedModule extends OrtModuleLike {
  Tensor: OrtModuleLike['Tensor'] & (new (type: 'int64', data: BigInt64Array, dims: readonly number[]) => OrtTensorLike);
}

export interface OrtRoutedOptions {
  ep: OrtEp;
  /** MatMulNBits accuracy_level: 0 (default: float32 products, as our exact numerics) … 4 (int8 activations). */
  accuracyLevel?: number;
  /** Weight forms by matrix, instead of the smallest the EP runs (tests). */
  forms?: Partial<Record<'gate' | 'up' | 'down', OrtWeightForm>>;
}

/** A call's pairs grouped by expert: the per-expert token lists and where each token-major pair lands. */
export interface RoutedGroups {
  /** The routed experts in ascending order, and each one's tokens (in pair order). */
  experts: number[];
  tokens: number[][];
  /** perm[i]: the row of pair i (token-major) in the experts' outputs concatenated in `experts` order. */
  perm: number[];
}

/** Groups the pairs of a call by expert. */
export function groupRouting(ids: Int32Array, nTokens: number, nUsed: number): RoutedGroups {
  const byExpert = new Map<number, number[]>();
  for (let i = 0; i < nTokens * nUsed; i++) {
    const e = ids[i]!;
    const list = byExpert.get(e) ?? [];
    list.push(i);
    byExpert.set(e, list);
  }
  const experts = [...byExpert.keys()].sort((a, b) => a - b);
  const perm = new Array<number>(nTokens * nUsed);
  let row = 0;
  const tokens = experts.map((e) =>
    byExpert.get(e)!.map((pair) => {
      perm[pair] = row++;
      return Math.floor(pair / nUsed);
    }),
  );
  return { experts, tokens, perm };
}

const rowsName = (e: number): string => `rows.${e}`;

/** Nodes and initializers of the graph under construction. */
interface Parts {
  nodes: NodeSpec[];
  initializers: TensorSpec[];
}

/** out = a · Mᵀ for an [N × K] matrix M in its ORT form (`v`: a name prefix for its nodes and tensors). */
function addProduct(g: Parts, v: string, a: string, rows: number, m: OrtMatrix, out: string, accuracyLevel: number): void {
  if (m.form === 'f32') {
    const wt = new Float32Array(m.k * m.n);
    for (let r = 0; r < m.n; r++) for (let c = 0; c < m.k; c++) wt[c * m.n + r] = m.values[r * m.k + c]!;
    g.initializers.push(floatTensor(`${v}.wt`, [m.k, m.n], wt));
    g.nodes.push(node('MatMul', [a, `${v}.wt`], [out], { name: `${v}.matmul` }));
    return;
  }
  const blocks = m.k / NBITS_BLOCK;
  const blob = (NBITS_BLOCK * m.bits) / 8;
  g.initializers.push(
    { name: `${v}.b`, dataType: UINT8, dims: [m.n, blocks, blob], raw: m.codes },
    floatTensor(`${v}.scales`, [m.n * blocks], m.scales),
  );
  const inputs = [a, `${v}.b`, `${v}.scales`];
  if (m.zeroPoints) {
    g.initializers.push({ name: `${v}.zp`, dataType: UINT8, dims: [m.zeroPoints.length], raw: m.zeroPoints });
    inputs.push(`${v}.zp`);
  }
  const nbits = m.minsT ? `${v}.nbits` : out;
  g.nodes.push(
    node('MatMulNBits', inputs, [nbits], {
      name: `${v}.matmulnbits`,
      domain: MS_DOMAIN,
      attributes: [
        { name: 'K', type: 'int', value: m.k },
        { name: 'N', type: 'int', value: m.n },
        { name: 'bits', type: 'int', value: m.bits },
        { name: 'block_size', type: 'int', value: NBITS_BLOCK },
        { name: 'accuracy_level', type: 'int', value: accuracyLevel },
      ],
    }),
  );
  if (m.minsT) {
    // Q4_K's mins: out = nbits − (Σ over each block of a) · minsᵀ.
    g.initializers.push(
      int64Tensor(`${v}.block_shape`, [3], [rows, blocks, NBITS_BLOCK]),
      int64Tensor(`${v}.block_axis`, [1], [2]),
      floatTensor(`${v}.mins_t`, [blocks, m.n], m.minsT),
    );
    g.nodes.push(
      node('Reshape', [a, `${v}.block_shape`], [`${v}.blocks`], { name: `${v}.blocks` }),
      node('ReduceSum', [`${v}.blocks`, `${v}.block_axis`], [`${v}.block_sums`], {
        name: `${v}.block_sums`,
        attributes: [{ name: 'keepdims', type: 'int', value: 0 }],
      }),
      node('MatMul', [`${v}.block_sums`, `${v}.mins_t`], [`${v}.min_term`], { name: `${v}.min_term` }),
      node('Sub', [nbits, `${v}.min_term`], [out], { name: `${v}.minus_mins` }),
    );
  }
}

/**
 * Inputs one Concat takes at most. onnxruntime-web's JSEP Concat binds every input and the output as a storage buffer,
 * and a device gets 8 per shader stage unless it asks for more (it does not): 9 experts' outputs fail validation.
 */
const CONCAT_FAN_IN = 4;

/** out = Concat(names…) along axis 0, as a tree of Concats of at most CONCAT_FAN_IN inputs. */
function addConcat(g: Parts, names: readonly string[], out: string): void {
  let level = [...names];
  for (let depth = 0; level.length > CONCAT_FAN_IN; depth++) {
    const next: string[] = [];
    for (let i = 0; i < level.length; i += CONCAT_FAN_IN) {
      const part = level.slice(i, i + CONCAT_FAN_IN);
      if (part.length === 1) {
        next.push(part[0]!);
        continue;
      }
      const name = `concat.${depth}.${i / CONCAT_FAN_IN}`;
      g.nodes.push(node('Concat', part, [name], { name, attributes: [{ name: 'axis', type: 'int', value: 0 }] }));
      next.push(name);
    }
    level = next;
  }
  g.nodes.push(node('Concat', level, [out], { name: 'concat', attributes: [{ name: 'axis', type: 'int', value: 0 }] }));
}

/** Rows [e·rows, (e+1)·rows) of one GGUF matrix of the slice. */
function expertRows(type: GGMLType, bytes: Uint8Array, e: number, rows: number, k: number): Uint8Array {
  const per = rows * rowByteSize(type, k);
  return bytes.subarray(e * per, (e + 1) * per);
}

export interface RoutedModel {
  bytes: Uint8Array;
  groups: RoutedGroups;
  /** Bytes of the weight initializers (what one call reads), and the forms used. */
  weightBytes: number;
  forms: Record<'gate' | 'up' | 'down', OrtWeightForm>;
}

/** The ModelProto of a call's routing on `slice` (see the module comment). */
export function buildRoutedModel(
  slice: ExpertSlice,
  ids: Int32Array,
  nTokens: number,
  nUsed: number,
  options: OrtRoutedOptions,
): RoutedModel {
  const { nEmbd, ff, types } = slice;
  const forms = {
    gate: options.forms?.gate ?? ortWeightForm(types.gate, options.ep),
    up: options.forms?.up ?? ortWeightForm(types.up, options.ep),
    down: options.forms?.down ?? ortWeightForm(types.down, options.ep),
  };
  const accuracy = options.accuracyLevel ?? 0;
  const groups = groupRouting(ids, nTokens, nUsed);
  const nPairs = nTokens * nUsed;
  const g: Parts = { nodes: [], initializers: [] };
  let weightBytes = 0;
  const fused = types.gate === types.up && forms.gate === forms.up;
  if (fused) g.initializers.push(int64Tensor('gate_up_split', [2], [ff, ff]));
  groups.experts.forEach((e, i) => {
    const n = groups.tokens[i]!.length;
    const v = (s: string): string => `e${e}.${s}`;
    g.nodes.push(
      node('Gather', ['x', rowsName(e)], [v('x')], { name: v('gather'), attributes: [{ name: 'axis', type: 'int', value: 0 }] }),
    );
    const gateBytes = expertRows(types.gate, slice.gate, e, ff, nEmbd);
    const upBytes = expertRows(types.up, slice.up, e, ff, nEmbd);
    if (fused) {
      const both = new Uint8Array(gateBytes.length + upBytes.length);
      both.set(gateBytes);
      both.set(upBytes, gateBytes.length);
      const m = toOrtMatrix(forms.gate, types.gate, both, 2 * ff, nEmbd);
      weightBytes += ortMatrixBytes(m);
      addProduct(g, v('gate_up'), v('x'), n, m, v('gu'), accuracy);
      g.nodes.push(
        node('Split', [v('gu'), 'gate_up_split'], [v('g'), v('u')], {
          name: v('split'),
          attributes: [{ name: 'axis', type: 'int', value: 1 }],
        }),
      );
    } else {
      const mg = toOrtMatrix(forms.gate, types.gate, gateBytes, ff, nEmbd);
      const mu = toOrtMatrix(forms.up, types.up, upBytes, ff, nEmbd);
      weightBytes += ortMatrixBytes(mg) + ortMatrixBytes(mu);
      addProduct(g, v('gate'), v('x'), n, mg, v('g'), accuracy);
      addProduct(g, v('up'), v('x'), n, mu, v('u'), accuracy);
    }
    const md = toOrtMatrix(forms.down, types.down, expertRows(types.down, slice.down, e, nEmbd, ff), nEmbd, ff);
    weightBytes += ortMatrixBytes(md);
    g.nodes.push(
      node('Sigmoid', [v('g')], [v('sig')], { name: v('sigmoid') }),
      node('Mul', [v('sig'), v('g')], [v('silu')], { name: v('silu') }),
      node('Mul', [v('silu'), v('u')], [v('h')], { name: v('hidden') }),
    );
    addProduct(g, v('down'), v('h'), n, md, v('y'), accuracy);
  });
  g.initializers.push(int64Tensor('out_shape', [3], [nTokens, nUsed, nEmbd]), int64Tensor('slot_axis', [1], [1]));
  addConcat(
    g,
    groups.experts.map((e) => `e${e}.y`),
    'expert_out',
  );
  g.nodes.push(
    node('Gather', ['expert_out', 'perm'], ['pair_out'], { name: 'by_token', attributes: [{ name: 'axis', type: 'int', value: 0 }] }),
    node('Mul', ['pair_out', 'p'], ['weighted'], { name: 'weight' }),
    node('Reshape', ['weighted', 'out_shape'], ['slots'], { name: 'slots' }),
    node('ReduceSum', ['slots', 'slot_axis'], ['y'], { name: 'combine', attributes: [{ name: 'keepdims', type: 'int', value: 0 }] }),
  );
  const graph = graphMessage({
    name: `expert_ffn_routed_${nTokens}x${nUsed}`,
    ...g,
    inputs: [
      valueInfo('x', DataType.FLOAT, [nTokens, nEmbd]),
      ...groups.experts.map((e, i) => valueInfo(rowsName(e), DataType.INT64, [groups.tokens[i]!.length])),
      valueInfo('perm', DataType.INT64, [nPairs]),
      valueInfo('p', DataType.FLOAT, [nPairs, 1]),
    ],
    outputs: [valueInfo('y', DataType.FLOAT, [nTokens, nEmbd])],
  });
  // ModelProto: ir_version=1 producer_name=2 graph=7 opset_import=8 (one per domain: the contrib op needs its own).
  const opset = (domain: string, version: number): Message => new Message().string(1, domain).varint(2, version);
  const bytes = new Message()
    .varint(1, 8)
    .string(2, 'expertswarm-bench')
    .message(7, graph)
    .message(8, opset('', ONNX_OPSET))
    .message(8, opset(MS_DOMAIN, 1))
    .toBytes();
  return { bytes, groups, weightBytes, forms };
}

/** The fair ORT baseline for one routing (see the module comment). */
export class OrtRoutedExperts {
  private constructor(
    private readonly ort: OrtRoutedModule,
    private readonly session: OrtSessionLike,
    private readonly model: Omit<RoutedModel, 'bytes'>,
    private readonly ids: Int32Array,
    private readonly nEmbd: number,
  ) {}

  /** Builds the graph of this routing (`ids`, nTokens × nUsed) and a session on `options.ep`. */
  static async create(
    ort: OrtRoutedModule,
    slice: ExpertSlice,
    ids: Int32Array,
    nTokens: number,
    nUsed: number,
    options: OrtRoutedOptions,
  ): Promise<OrtRoutedExperts> {
    const { bytes, ...model } = buildRoutedModel(slice, ids, nTokens, nUsed, options);
    const session = await ort.InferenceSession.create(bytes, { executionProviders: [options.ep] });
    return new OrtRoutedExperts(ort, session, model, ids.slice(), slice.nEmbd);
  }

  /** Bytes of the routed experts' weights as the graph holds them: what one call reads. */
  get weightBytes(): number {
    return this.model.weightBytes;
  }

  /** The weight forms used (e.g. 'q4k' for Q4_K as MatMulNBits). */
  get forms(): Record<'gate' | 'up' | 'down', OrtWeightForm> {
    return this.model.forms;
  }

  async compute(rows: Float32Array, ids: Int32Array, probs: Float32Array, nTokens: number, nUsed: number): Promise<Float32Array> {
    if (ids.length !== this.ids.length || ids.some((id, i) => id !== this.ids[i])) {
      throw new Error('OrtRoutedExperts: the graph was built for another routing');
    }
    const { Tensor } = this.ort;
    const { groups } = this.model;
    const int64 = (xs: readonly number[]): OrtTensorLike => new Tensor('int64', BigInt64Array.from(xs, BigInt), [xs.length]);
    const feeds: Record<string, OrtTensorLike> = {
      x: new Tensor('float32', rows, [nTokens, this.nEmbd]),
      perm: int64(groups.perm),
      p: new Tensor('float32', probs, [nTokens * nUsed, 1]),
    };
    groups.experts.forEach((e, i) => {
      feeds[rowsName(e)] = int64(groups.tokens[i]!);
    });
    const out = await this.session.run(feeds);
    const y = out.y;
    if (!y) throw new Error('OrtRoutedExperts: the session returned no y');
    const data = y.data as Float32Array;
    const copy = data.slice();
    y.dispose?.();
    return copy;
  }

  async dispose(): Promise<void> {
    await this.session.release();
  }
}

/** A one-line description of the forms, e.g. "Q4_K as MatMulNBits 4-bit + mins". */
export function describeForms(types: ExpertSlice['types'], forms: Record<'gate' | 'up' | 'down', OrtWeightForm>): string {
  const what: Record<OrtWeightForm, string> = {
    q4: 'MatMulNBits 4-bit (zero point 8)',
    q4k: 'MatMulNBits 4-bit + mins term',
    q8: 'MatMulNBits 8-bit',
    f32: 'dequantized f32 MatMul',
  };
  const parts = (['gate', 'up', 'down'] as const).map((m) => `${typeName(types[m])} as ${what[forms[m]]}`);
  return [...new Set(parts)].join(', ');
}
