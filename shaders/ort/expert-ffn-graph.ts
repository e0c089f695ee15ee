/**
 * The expert FFN of one slice as ONNX graphs of standard operators (opset 17), with the weights as dequantized
 * float32 initializers. The whole FFN in one graph ('exact' numerics):
 *
 *   inputs  x [T, nEmbd]      the token rows
 *           p [T, nExpert]    dense router probs: probs[t,k] at column ids[t,k], 0 elsewhere
 *   output  y [T, nEmbd]
 *
 *   per expert e:  g_e = x · Gᵀ_e   u_e = x · Uᵀ_e                      (MatMul with pre-transposed initializers)
 *                  h_e = Sigmoid(g_e) ⊙ g_e ⊙ u_e                        (silu(g) ⊙ u)
 *                  y  += (h_e · Dᵀ_e) ⊙ p[:, e]                          (Gather of column e with indices [e] → [T, 1])
 *
 * and in two halves where 'llama' numerics computes and rounds h_e outside the graph (fallback.ts):
 *
 *   up    inputs xg, xu [T, nEmbd] (the rows rounded for gate's and for up's vec-dot type)
 *         outputs g.e = xg · Gᵀ_e, u.e = xu · Uᵀ_e [T, ff]
 *   down  inputs h.e [T, ff] (silu(g) ⊙ u rounded for down's vec-dot type), p [T, nExpert]  →  output y [T, nEmbd]
 *
 * One graph serves every routing of the slice, so every expert runs on every row and unrouted ones are multiplied
 * by 0: the work is nExpert/nUsed times what routing needs. Skipping unrouted experts (one session per expert, or
 * gathering only the routed rows per expert) is a later optimisation, as is keeping the weights quantized with
 * com.microsoft MatMulNBits (4-bit block-quantized weights) instead of float32 initializers.
 */
import {
  DataType,
  encodeModel,
  floatTensor,
  int64Tensor,
  node,
  valueInfo,
  type ModelOptions,
  type NodeSpec,
  type TensorSpec,
} from './onnx-builder.ts';

export interface DenseExpertSlice {
  nEmbd: number;
  ff: number;
  nExpert: number;
  /** nExpert row-major [ff × nEmbd] matrices, consecutive. */
  gate: Float32Array;
  up: Float32Array;
  /** nExpert row-major [nEmbd × ff] matrices, consecutive. */
  down: Float32Array;
}

/** What the up half reads. */
export type DenseUpSlice = Pick<DenseExpertSlice, 'nEmbd' | 'ff' | 'nExpert' | 'gate' | 'up'>;
/** What the down half reads. */
export type DenseDownSlice = Pick<DenseExpertSlice, 'nEmbd' | 'ff' | 'nExpert' | 'down'>;

/** The whole graph's inputs; its output (and the down half's) is EXPERT_FFN_OUTPUT. */
export const EXPERT_FFN_INPUTS = { rows: 'x', probs: 'p' } as const;
export const EXPERT_FFN_OUTPUT = 'y';
/** The up half's inputs: the rows as gate multiplies them, and as up does. */
export const EXPERT_UP_INPUTS = { gateRows: 'xg', upRows: 'xu' } as const;
/** The down half's probs input (beside hiddenName(e) for each expert). */
export const EXPERT_DOWN_INPUTS = { probs: 'p' } as const;

/** The up half's outputs for expert e, [T, ff] each: the gate and up products. */
export function gateName(e: number): string {
  return `g.${e}`;
}
export function upName(e: number): string {
  return `u.${e}`;
}
/** Expert e's hidden vectors [T, ff]: an input of the down half. */
export function hiddenName(e: number): string {
  return `h.${e}`;
}

/** The transpose of a row-major [rows × cols] matrix. */
export function transpose(m: Float32Array, rows: number, cols: number): Float32Array {
  if (m.length !== rows * cols) throw new RangeError(`transpose: ${m.length} values are not ${rows} × ${cols}`);
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    const o = r * cols;
    for (let c = 0; c < cols; c++) out[c * rows + r] = m[o + c]!;
  }
  return out;
}

function checkMatrices(fn: string, s: Partial<DenseExpertSlice> & Pick<DenseExpertSlice, 'nEmbd' | 'ff' | 'nExpert'>): void {
  const per = s.nEmbd * s.ff;
  for (const m of ['gate', 'up', 'down'] as const) {
    const values = s[m];
    if (values && values.length !== s.nExpert * per) {
      throw new RangeError(`${fn}: ${m} has ${values.length} values, expected ${s.nExpert} × ${s.ff} × ${s.nEmbd}`);
    }
  }
}

/** Nodes and initializers of a graph under construction. */
interface GraphParts {
  nodes: NodeSpec[];
  initializers: TensorSpec[];
}

/** Expert e's gate and up products, g = xg · Gᵀ_e and u = xu · Uᵀ_e, written to `gOut` and `uOut`. */
function addGateUp(g: GraphParts, s: DenseUpSlice, e: number, xg: string, xu: string, gOut: string, uOut: string): void {
  const { nEmbd, ff } = s;
  const per = nEmbd * ff;
  const G = `gate_t.${e}`;
  const U = `up_t.${e}`;
  g.initializers.push(
    floatTensor(G, [nEmbd, ff], transpose(s.gate.subarray(e * per, (e + 1) * per), ff, nEmbd)),
    floatTensor(U, [nEmbd, ff], transpose(s.up.subarray(e * per, (e + 1) * per), ff, nEmbd)),
  );
  g.nodes.push(node('MatMul', [xg, G], [gOut], { name: `e${e}.gate` }), node('MatMul', [xu, U], [uOut], { name: `e${e}.up` }));
}

/** Expert e's hidden vectors in the graph: h = Sigmoid(g) ⊙ g ⊙ u of x, written to `h`. */
function addHidden(g: GraphParts, s: DenseUpSlice, e: number, x: string, h: string): void {
  const v = (name: string): string => `e${e}.${name}`;
  addGateUp(g, s, e, x, x, v('g'), v('u'));
  g.nodes.push(
    node('Sigmoid', [v('g')], [v('sig')], { name: v('sigmoid') }),
    node('Mul', [v('sig'), v('g')], [v('silu')], { name: v('silu') }),
    node('Mul', [v('silu'), v('u')], [h], { name: v('hidden') }),
  );
}

/**
 * Expert e's share of y: (h · Dᵀ_e) ⊙ p[:, e], added to the running sum `acc` (the first expert starts it, the last
 * writes EXPERT_FFN_OUTPUT). Returns the name of the sum so far.
 */
function addDown(g: GraphParts, s: DenseDownSlice, e: number, h: string, p: string, acc: string): string {
  const { nEmbd, ff, nExpert } = s;
  const per = nEmbd * ff;
  const D = `down_t.${e}`;
  const idx = `expert_index.${e}`;
  g.initializers.push(
    floatTensor(D, [ff, nEmbd], transpose(s.down.subarray(e * per, (e + 1) * per), nEmbd, ff)),
    int64Tensor(idx, [1], [e]),
  );
  const v = (name: string): string => `e${e}.${name}`;
  const sum = e === nExpert - 1 ? EXPERT_FFN_OUTPUT : `acc.${e}`;
  const scaled = e === 0 ? sum : v('scaled');
  g.nodes.push(
    node('MatMul', [h, D], [v('d')], { name: v('down') }),
    node('Gather', [p, idx], [v('prob')], { name: v('routing_column'), attributes: [{ name: 'axis', type: 'int', value: 1 }] }),
    node('Mul', [v('d'), v('prob')], [scaled], { name: v('scale') }),
  );
  if (e > 0) g.nodes.push(node('Add', [acc, scaled], [sum], { name: v('accumulate') }));
  return sum;
}

/** The ModelProto bytes of the slice's whole expert FFN (see the module comment for inputs and outputs). */
export function buildExpertFfnModel(s: DenseExpertSlice, options: ModelOptions = {}): Uint8Array {
  const { nEmbd, ff, nExpert } = s;
  checkMatrices('buildExpertFfnModel', s);
  const { rows: x, probs: p } = EXPERT_FFN_INPUTS;
  const g: GraphParts = { nodes: [], initializers: [] };
  let acc = '';
  for (let e = 0; e < nExpert; e++) {
    addHidden(g, s, e, x, `e${e}.h`);
    acc = addDown(g, s, e, `e${e}.h`, p, acc);
  }
  return encodeModel(
    {
      name: `expert_ffn_${nExpert}x${nEmbd}x${ff}`,
      ...g,
      inputs: [valueInfo(x, DataType.FLOAT, ['T', nEmbd]), valueInfo(p, DataType.FLOAT, ['T', nExpert])],
      outputs: [valueInfo(EXPERT_FFN_OUTPUT, DataType.FLOAT, ['T', nEmbd])],
    },
    options,
  );
}

/** The ModelProto bytes of the up half: gate and up rows (xg, xu) → each expert's products gateName(e), upName(e). */
export function buildExpertUpModel(s: DenseUpSlice, options: ModelOptions = {}): Uint8Array {
  const { nEmbd, ff, nExpert } = s;
  checkMatrices('buildExpertUpModel', s);
  const { gateRows: xg, upRows: xu } = EXPERT_UP_INPUTS;
  const g: GraphParts = { nodes: [], initializers: [] };
  for (let e = 0; e < nExpert; e++) addGateUp(g, s, e, xg, xu, gateName(e), upName(e));
  return encodeModel(
    {
      name: `expert_up_${nExpert}x${nEmbd}x${ff}`,
      ...g,
      inputs: [valueInfo(xg, DataType.FLOAT, ['T', nEmbd]), valueInfo(xu, DataType.FLOAT, ['T', nEmbd])],
      outputs: Array.from({ length: nExpert }, (_, e) => [
        valueInfo(gateName(e), DataType.FLOAT, ['T', ff]),
        valueInfo(upName(e), DataType.FLOAT, ['T', ff]),
      ]).flat(),
    },
    options,
  );
}

/** The ModelProto bytes of the down half: each expert's hidden vectors hiddenName(e) and the dense probs p → y. */
export function buildExpertDownModel(s: DenseDownSlice, options: ModelOptions = {}): Uint8Array {
  const { nEmbd, ff, nExpert } = s;
  checkMatrices('buildExpertDownModel', s);
  const { probs: p } = EXPERT_DOWN_INPUTS;
  const g: GraphParts = { nodes: [], initializers: [] };
  let acc = '';
  for (let e = 0; e < nExpert; e++) acc = addDown(g, s, e, hiddenName(e), p, acc);
  return encodeModel(
    {
      name: `expert_down_${nExpert}x${nEmbd}x${ff}`,
      ...g,
      inputs: [
        ...Array.from({ length: nExpert }, (_, e) => valueInfo(hiddenName(e), DataType.FLOAT, ['T', ff])),
        valueInfo(p, DataType.FLOAT, ['T', nExpert]),
      ],
      outputs: [valueInfo(EXPERT_FFN_OUTPUT, DataType.FLOAT, ['T', nEmbd])],
    },
    options,
  );
}
